// bridge/export.cpp - `shmbox-bridge export BOX`: owns the box (a second
// export stands by as its heir) and publishes what it reads to the stream,
// committing only what JetStream acknowledged (two-phase read; Nats-Msg-Id =
// the message's shmbox::message_id, so a republish after a crash is stored
// once). Creates or checks the stream. Each message carries Shmbox-Ordinal,
// its place among the messages of its lane the box delivered to exports
// (bridge/status_layout.hpp: export record), which the import counts losses by.
#include <nats/nats.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "bridge.hpp"
#include "shmbox/box.hpp"
#include "shmbox/heir.hpp"
#include "shmbox/inspect.hpp"
#include "shmbox/owner.hpp"
#include "shmbox/producer.hpp"

namespace shmbox_bridge {

namespace {

using namespace std::chrono_literals;

// The batch in flight: which of its ids JetStream acknowledged. Written by
// nats.c's thread (on_ack), read by the bridge's.
struct inflight {
  std::mutex mu;
  std::unordered_map<std::string, std::size_t> index;  // id -> position in the batch
  std::vector<char> acked;
  std::uint64_t errors = 0;  // negative acknowledgements this round
  bool no_stream = false;    // one said the stream is not there (no responders, stream not found)
  std::string last;          // the last one's text
  bridge_status* status = nullptr;
};

extern "C" void on_ack(jsCtx*, natsMsg* msg, jsPubAck* pa, jsPubAckErr* pae, void* closure) {
  auto* f = static_cast<inflight*>(closure);
  const char* id = nullptr;
  if (natsMsgHeader_Get(msg, "Nats-Msg-Id", &id) != NATS_OK) id = nullptr;
  {
    std::lock_guard<std::mutex> g(f->mu);
    if (pa != nullptr && id != nullptr) {
      const auto it = f->index.find(id);
      if (it != f->index.end() && f->acked[it->second] == 0) {
        f->acked[it->second] = 1;
        if (pa->Duplicate) f->status->add(bridge_counter::dedupe_hits);
      }
    } else if (pae != nullptr) {
      ++f->errors;
      f->no_stream |= pae->Err == NATS_NO_RESPONDERS || pae->ErrCode == JSStreamNotFoundErr;
      f->last = "JetStream refused a publish: " + std::string(pae->ErrText != nullptr ? pae->ErrText : natsStatus_GetText(pae->Err)) +
                (pae->ErrCode != 0 ? " (JetStream error " + std::to_string(pae->ErrCode) + ")" : "");
      f->status->add(bridge_counter::publish_refused);
      f->status->add(bridge_counter::publish_errors);
    }
  }
  natsMsg_Destroy(msg);
}

// Creates the stream with the box's policy mapped, or says why it cannot.
bool create_stream(nats_link& l, const export_args& a, const shmbox::box_info& info, std::string& error) {
  jsStreamConfig cfg;
  jsStreamConfig_Init(&cfg);
  const char* subjects[1] = {a.subject.c_str()};
  cfg.Name = a.stream.c_str();
  cfg.Subjects = subjects;
  cfg.SubjectsLen = 1;
  // A work queue: a message leaves the stream when the importing side acks
  // it, so MaxMsgs bounds what is in transit, as the box bounds what waits.
  cfg.Retention = js_WorkQueuePolicy;
  cfg.MaxMsgs = info.capacity;
  cfg.Storage = a.storage == "memory" ? js_MemoryStorage : js_FileStorage;
  cfg.Duplicates = static_cast<int64_t>(a.dedupe_window_s * 1e9);
  cfg.Replicas = static_cast<int64_t>(a.replicas);
  cfg.MaxBytes = a.max_bytes;
  cfg.MaxAge = static_cast<int64_t>(a.max_age_s * 1e9);
  if (cfg.MaxAge > 0 && cfg.Duplicates > cfg.MaxAge) cfg.Duplicates = cfg.MaxAge;  // JetStream's rule: the window within the age
  switch (info.overflow) {
    case shmbox::policy::reject:
    case shmbox::policy::drop_newest:
    case shmbox::policy::block: cfg.Discard = js_DiscardNew; break;
    case shmbox::policy::drop_oldest: cfg.Discard = js_DiscardOld; break;
    case shmbox::policy::lifo:
      error = "box '" + a.box + "' has policy lifo (newest first, the top replaced): a stream cannot keep that order, so " +
              "--create-stream refuses it; give the box reject, drop-newest, drop-oldest or block";
      return false;
  }
  jsStreamInfo* si = nullptr;
  jsErrCode jerr = static_cast<jsErrCode>(0);
  const natsStatus s = js_AddStream(&si, l.js, &cfg, nullptr, &jerr);
  if (si != nullptr) jsStreamInfo_Destroy(si);
  if (s != NATS_OK) {
    error = "cannot create stream '" + a.stream + "': " + nats_error(s) + (jerr != 0 ? " (JetStream error " + std::to_string(jerr) + ")" : "");
    if (jerr == JSInsufficientResourcesErr || jerr == JSClusterNoPeersErr || a.replicas > 1)
      error += "; --replicas " + std::to_string(a.replicas) + " needs a JetStream cluster of at least that many servers";
    return false;
  }
  return true;
}

// The stream exists (or is created) and takes the subject.
bool check_stream(nats_link& l, const export_args& a, const shmbox::box_info& info, std::string& error) {
  jsStreamInfo* si = nullptr;
  jsErrCode jerr = static_cast<jsErrCode>(0);
  natsStatus s = js_GetStreamInfo(&si, l.js, a.stream.c_str(), nullptr, &jerr);
  if (s != NATS_OK) {
    if (!(jerr == JSStreamNotFoundErr || s == NATS_NOT_FOUND)) {
      error = describe_stream_error(a, s, jerr);
      return false;
    }
    if (!a.create_stream) {
      error = describe_stream_error(a, s, jerr) + "; create it (subjects including '" + a.subject +
              "') or pass --create-stream to create it with the box's policy";
      return false;
    }
    return create_stream(l, a, info, error);
  }
  bool takes = false;
  std::string list;
  if (si->Config != nullptr)
    for (int i = 0; i < si->Config->SubjectsLen; ++i) {
      takes |= subject_matches(si->Config->Subjects[i], a.subject);
      list += (list.empty() ? "" : ", ") + std::string(si->Config->Subjects[i]);
    }
  jsStreamInfo_Destroy(si);
  if (!takes) {
    error = "stream '" + a.stream + "' does not take subject '" + a.subject + "' (its subjects: " +
            (list.empty() ? std::string("none") : list) + "); pass --subject with one of them";
    return false;
  }
  return true;
}

// The stream is there (state connected), or was gone and is made again
// (--create-stream: counted, said once), or is gone: false with the state
// stream_missing and the reason in `fatal` (the bridge exits 1).
bool ensure_stream(nats_link& l, const export_args& a, const shmbox::box_info& info, bridge_status& st, std::string& fatal) {
  jsStreamInfo* si = nullptr;
  jsErrCode jerr = static_cast<jsErrCode>(0);
  const natsStatus s = js_GetStreamInfo(&si, l.js, a.stream.c_str(), nullptr, &jerr);
  if (si != nullptr) jsStreamInfo_Destroy(si);
  if (s == NATS_OK) return true;
  if (!(jerr == JSStreamNotFoundErr || s == NATS_NOT_FOUND)) return true;  // could not ask (a timeout): publish again, ask later
  report_state(st, bridge_state::stream_missing);
  std::string error;
  if (!a.create_stream) {
    fatal = "stream '" + a.stream + "' disappeared from '" + l.shown + "' (deleted, or lost by a server with memory storage " +
                   "that restarted): the messages it held are lost; create it again, or restart the export with --create-stream " +
                   "(the box keeps what the export had not published)";
    return false;
  }
  if (!create_stream(l, a, info, error)) {
    fatal = "stream '" + a.stream + "' disappeared and cannot be made again: " + error;
    return false;
  }
  st.add(bridge_counter::stream_recreated);
  report_error(st, "stream '" + a.stream + "' had disappeared (the messages it held are lost: the import counts them as remote_drops); made it again", true);
  report_state(st, bridge_state::connected);
  return true;
}

// Publishes the batch until JetStream acknowledged every message; false when
// stopped first (nothing is committed then: the next owner republishes), or
// when the stream is gone for good (`fatal` says why).
bool publish_all(nats_link& l, const export_args& a, const shmbox::box_info& info, shmbox::Owner& owner, const shmbox::batch& b,
                 inflight& f, bridge_status& st, const std::vector<std::string>& ids, const std::vector<std::string>& ordinals,
                 std::uint32_t default_lane, std::string& fatal) {
  auto stream_checked = std::chrono::steady_clock::time_point{};
  {
    std::lock_guard<std::mutex> g(f.mu);
    f.index.clear();
    for (std::size_t i = 0; i < b.size(); ++i) f.index.emplace(ids[i], i);
    f.acked.assign(b.size(), 0);
  }
  auto backoff = 50ms;
  while (true) {
    std::vector<std::size_t> todo;
    {
      std::lock_guard<std::mutex> g(f.mu);
      for (std::size_t i = 0; i < b.size(); ++i)
        if (f.acked[i] == 0) todo.push_back(i);
      f.errors = 0;
    }
    if (todo.empty()) return true;
    if (g_stop.load()) return false;
    for (std::size_t k = 0; k < todo.size(); ++k) {
      const std::size_t i = todo[k];
      natsMsg* m = nullptr;
      const std::string_view data = b[i];
      natsStatus s = natsMsg_Create(&m, a.subject.c_str(), nullptr, data.data(), static_cast<int>(data.size()));
      if (s == NATS_OK) s = natsMsgHeader_Set(m, "Nats-Msg-Id", ids[i].c_str());
      // Order: each message of a lane after the first of this round is stored
      // only right after the one before it. Without this, a stream that
      // refuses one (full, discard new) and has room again for the next
      // (the import acked meanwhile) would store them out of order; with
      // it, the rest of the round is refused too and published again, in
      // order. (JetStream checks Nats-Msg-Id first: a republish already
      // stored is answered as a duplicate, not refused.)
      if (s == NATS_OK && k > 0 && b.lane(todo[k - 1]) == b.lane(i))
        s = natsMsgHeader_Set(m, "Nats-Expected-Last-Msg-Id", ids[todo[k - 1]].c_str());
      // A message of the box's default lane (a plain post) goes without a
      // lane: the importing box puts it in its own default lane.
      if (s == NATS_OK && b.lane(i) != default_lane) s = natsMsgHeader_Set(m, "Shmbox-Lane", std::to_string(b.lane(i)).c_str());
      if (s == NATS_OK) s = natsMsgHeader_Set(m, "Shmbox-Box", a.box.c_str());
      if (s == NATS_OK) s = natsMsgHeader_Set(m, "Shmbox-Ordinal", ordinals[i].c_str());
      if (s == NATS_OK) s = js_PublishMsgAsync(l.js, &m, nullptr);
      natsMsg_Destroy(m);  // no effect when the library took it
      if (s == NATS_OK) {
        st.add(bridge_counter::published);
      } else {
        st.add(bridge_counter::publish_unsent);
        st.add(bridge_counter::publish_errors);
        report_error(st, "cannot publish to '" + a.subject + "': " + nats_error(s), false);
        break;  // disconnected, or too many pending: wait below, then publish what is left
      }
    }
    // Out now, not at the flusher's next millisecond: the round trip to the
    // acks is the batch's latency.
    (void)natsConnection_FlushTimeout(l.nc, a.ack_timeout_ms);
    jsPubOptions po;
    jsPubOptions_Init(&po);
    po.MaxWait = a.ack_timeout_ms;
    const natsStatus done = js_PublishAsyncComplete(l.js, &po);
    if (done != NATS_OK) {
      // Not all acknowledged in time: take them back (their acks, if any
      // come, are dropped) and publish them again, same ids.
      natsMsgList pending{};
      if (js_PublishAsyncGetPendingList(&pending, l.js) == NATS_OK) {
        st.add(bridge_counter::ack_timeouts, static_cast<std::uint64_t>(pending.Count));
        st.add(bridge_counter::publish_errors, static_cast<std::uint64_t>(pending.Count));
        report_error(st, std::to_string(pending.Count) + " publishes not acknowledged within " + std::to_string(a.ack_timeout_ms) + " ms", false);
        natsMsgList_Destroy(&pending);
      }
    }
    bool all = true, no_stream = false;
    std::uint64_t errors = 0;
    std::string last;
    {
      std::lock_guard<std::mutex> g(f.mu);
      all = std::all_of(f.acked.begin(), f.acked.end(), [](char c) { return c != 0; });
      errors = f.errors;
      no_stream = f.no_stream;
      f.no_stream = false;
      last.swap(f.last);
    }
    if (all) return true;
    if (!last.empty()) report_error(st, last, false);
    // Refused or unanswered while connected: is the stream still there? (A
    // memory-storage server that restarted lost it; someone deleted it.)
    if ((no_stream || done != NATS_OK) && connected(l) && every(stream_checked, 1000ms) && !ensure_stream(l, a, info, st, fatal))
      return false;
    if (errors > 0 || done != NATS_OK) {
      // The server refused (stream full under discard new, ...) or is away:
      // wait, keep the lease, try again. The box fills meanwhile and its
      // policy decides.
      for (auto waited = 0ms; waited < backoff && !g_stop.load(); waited += 10ms) std::this_thread::sleep_for(10ms);
      backoff = std::min<std::chrono::milliseconds>(backoff * 2, 1000ms);
      owner.renew();
    }
  }
}

// The ordinals of a batch's messages, lane by lane (status_layout.hpp:
// export record): a lane's first message in the batch takes the lane's
// count so far, each next one the next number.
struct lane_ordinals {
  std::uint64_t next_[shmbox::kMaxLanes] = {}, first_[shmbox::kMaxLanes] = {};
  bool in_[shmbox::kMaxLanes] = {};

  void start(bridge_status& st, const shmbox::batch& b) {
    std::fill(std::begin(in_), std::end(in_), false);
    for (std::size_t i = 0; i < b.size(); ++i) {
      const std::uint32_t l = b.lane(i);
      if (l >= shmbox::kMaxLanes || in_[l]) continue;
      in_[l] = true;
      first_[l] = b.position(i);
      next_[l] = st.lane_ordinal(l, first_[l]);
    }
  }
  std::uint64_t next(std::uint32_t lane) { return lane < shmbox::kMaxLanes ? next_[lane]++ : 0; }
  void begin_commit(bridge_status& st) const {
    for (std::uint32_t l = 0; l < shmbox::kMaxLanes; ++l)
      if (in_[l]) st.begin_commit(l, next_[l], first_[l]);
  }
  void end_commit(bridge_status& st) const {
    for (std::uint32_t l = 0; l < shmbox::kMaxLanes; ++l)
      if (in_[l]) st.end_commit(l);
  }
};

}  // namespace

int run_export(const export_args& a) {
  auto box = shmbox::Box::open(a.box);
  if (!box) return die(shmbox::explain(box.error()));
  const shmbox::box_info info = shmbox::info(*box);
  for (std::size_t l = 0; l < info.lanes.size(); ++l)
    if (info.lanes[l].overflow == shmbox::policy::lifo)
      return die("box '" + a.box + "' lane " + std::to_string(l) +
                 " has policy lifo (newest first, the top replaced): export keeps FIFO order and stable ids, so it refuses lifo lanes");
  if (info.stash != 0)
    return die("box '" + a.box + "' has a stash: messages an owner parked there have no stable id, so export refuses it; "
               "export a box created without --stash");
  std::string error;
  auto st = bridge_status::open(a.box, bridge_role::export_, info.mode, error);
  if (!st) return die(error);

  inflight f;
  f.status = &*st;
  const std::uint32_t inflight_max =
      a.max_inflight != 0 ? a.max_inflight : std::max<std::uint32_t>(1, std::min<std::uint32_t>(256, info.capacity / 2));
  jsOptions jo;
  jsOptions_Init(&jo);
  jo.PublishAsync.AckHandler = on_ack;
  jo.PublishAsync.AckHandlerClosure = &f;
  jo.PublishAsync.MaxPending = static_cast<int64_t>(inflight_max) * 2;
  nats_link link;
  if (!connect(link, a, *st, &jo, false, error)) return stop(*st, die(error));
  if (!check_stream(link, a, info, error)) return stop(*st, die(error));
  // A message the server cannot take would be published again for ever:
  // refuse now. (Headers: the id, the lane and the box name, well under 512 bytes.)
  const std::int64_t max_payload = natsConnection_GetMaxPayload(link.nc);
  if (max_payload > 0 && static_cast<std::int64_t>(info.slot_size) + 512 > max_payload)
    return die("box '" + a.box + "' takes messages of up to " + std::to_string(info.slot_size) + " bytes, but the NATS server takes at most " +
               std::to_string(max_payload) + " per message (with headers); raise max_payload in the server's configuration, or export a box with a smaller --slot-size");

  // Own the box, or stand by as its heir.
  auto owner = shmbox::Owner::acquire(*box);
  if (!owner && owner.error() == shmbox::errc::not_owner) {
    auto heir = shmbox::Heir::enlist(*box, "shmbox-bridge export standby");
    if (!heir) return die(shmbox::explain(heir.error()));
    std::cout << "standby export " << a.box << " heir" << std::endl;
    while (!g_stop.load()) {
      owner = heir->await_transfer(250ms);
      if (owner || owner.error() != shmbox::errc::timed_out) break;
    }
    if (g_stop.load() && !owner) {
      std::cout << "stopped export " << a.box << " (standby)" << std::endl;
      return kExitOk;
    }
  }
  if (!owner) return stop(*st, die(shmbox::explain(owner.error())));
  st->activate(a.url, a.stream, a.subject, "");
  report_state(*st, connected(link) ? bridge_state::connected : bridge_state::reconnecting);
  if (!st->locked())
    report_error(*st, "the lock of " + st->path() + " is held (by the export that had box '" + a.box +
                          "' and is still exiting, or by a reader's read lock): shmbox stat shows this export as not alive until it "
                          "gets it; trying again every second", true);
  {
    // The export record is this uid's own from an earlier run (bridge_status::open);
    // its ordinals are still bounded by what the box proves before they are used.
    // Owning the box now: no other export commits meanwhile.
    const shmbox::box_info now = shmbox::info(*box);
    std::uint64_t delivered[shmbox::kMaxLanes] = {};
    const auto lanes = static_cast<std::uint32_t>(std::min<std::size_t>(now.lanes.size(), shmbox::kMaxLanes));
    for (std::uint32_t l = 0; l < lanes; ++l) delivered[l] = now.lanes[l].count.delivered;
    if (const std::string said = st->bound_ordinals(delivered, lanes, a.box); !said.empty()) report_error(*st, said, true);
  }
  std::cout << "ready export " << a.box << " stream=" << a.stream << " subject=" << a.subject << " epoch=" << owner->epoch()
            << std::endl;

  shmbox::batch b;
  std::vector<std::string> ids, ordinals;
  lane_ordinals ord;
  auto relocked = std::chrono::steady_clock::now();
  while (!g_stop.load()) {
    if (!st->locked() && every(relocked, 1000ms) && st->relock())
      std::cerr << "shmbox-bridge: got the lock of " << st->path() << ": shmbox stat shows this export alive" << std::endl;
    b.clear();
    const shmbox::recv_status r = owner->read(b, {.max = inflight_max, .timeout = 200ms});
    if (r == shmbox::recv_status::timeout || r == shmbox::recv_status::empty) continue;
    if (r == shmbox::recv_status::not_owner)
      return stop(*st, die("box '" + a.box + "' was taken from this bridge (lease expired or given away); stopping"));
    if (r != shmbox::recv_status::ok) return stop(*st, die(shmbox::explain(owner->last_error())));
    ids.resize(b.size());
    ordinals.resize(b.size());
    ord.start(*st, b);
    for (std::size_t i = 0; i < b.size(); ++i) {
      ids[i] = shmbox::to_string(owner->id_of(b.lane(i), b.position(i)));
      ordinals[i] = std::to_string(ord.next(b.lane(i)));
      if (b.redelivered(i)) st->add(bridge_counter::redeliveries);
    }
    std::string fatal;
    if (!publish_all(link, a, info, *owner, b, f, *st, ids, ordinals, box->default_lane(), fatal)) {
      if (!fatal.empty()) return stop(*st, die(fatal));
      break;  // stopped: the next owner publishes them again
    }
    ord.begin_commit(*st);
    crash_point("export.before_commit");
    std::size_t lost = 0;
    if (owner->commit(&lost) != shmbox::recv_status::ok)
      return stop(*st, die("box '" + a.box + "' was taken from this bridge with " + std::to_string(lost) +
                           " published messages uncommitted (the new owner publishes them again; JetStream drops the duplicates)"));
    crash_point("export.after_commit");
    ord.end_commit(*st);
    // Acknowledged, then committed: counted once, here (a bridge killed
    // between the two leaves them to the next owner, which counts them).
    st->add(bridge_counter::acked, b.size());
  }
  stop(*st, kExitOk);
  std::cout << "stopped export " << a.box << " published=" << st->get(bridge_counter::published)
            << " acked=" << st->get(bridge_counter::acked) << std::endl;
  return kExitOk;
}
}  // namespace shmbox_bridge
