// bridge/bridge.cpp - shmbox-bridge: moves messages between a local box and a
// NATS JetStream stream (docs/bridge.md). Export owns a box and publishes
// what it reads, committing only what JetStream acknowledged (two-phase
// read; Nats-Msg-Id = the message's shmbox::message_id, so a republish after
// a crash is stored once). Import pulls with a durable consumer, at most the
// box's free slots, posts, and acks only what the box took.
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

#include <CLI/CLI.hpp>

#include "bridge_status.hpp"
#include "shmbox/box.hpp"
#include "shmbox/heir.hpp"
#include "shmbox/inspect.hpp"
#include "shmbox/owner.hpp"
#include "shmbox/producer.hpp"

namespace {

using namespace std::chrono_literals;
using shmbox_cli::bridge_counter;
using shmbox_cli::bridge_role;
using shmbox_cli::bridge_status;

constexpr int kExitOk = 0, kExitFail = 1, kExitUsage = 2;

std::atomic<bool> g_stop{false};
extern "C" void on_signal(int) { g_stop.store(true); }

int die(const std::string& what) {
  std::cerr << "shmbox-bridge: " << what << "\n";
  return kExitFail;
}

std::string nats_error(natsStatus s) {
  natsStatus last = NATS_OK;
  const char* text = nats_GetLastError(&last);
  std::string out = natsStatus_GetText(s);
  if (text != nullptr && *text != '\0' && out.find(text) == std::string::npos) out += std::string(" (") + text + ")";
  return out;
}

struct common_args {
  std::string url = "nats://127.0.0.1:4222";
  std::string stream, subject, user, password, token;
};

// A NATS connection with its JetStream context; reconnects for ever once up.
struct nats_link {
  natsOptions* opts = nullptr;
  natsConnection* nc = nullptr;
  jsCtx* js = nullptr;
  nats_link() = default;
  nats_link(const nats_link&) = delete;
  nats_link& operator=(const nats_link&) = delete;
  ~nats_link() {
    if (js != nullptr) jsCtx_Destroy(js);
    if (nc != nullptr) {
      natsConnection_FlushTimeout(nc, 1000);  // the last acks
      natsConnection_Destroy(nc);
    }
    if (opts != nullptr) natsOptions_Destroy(opts);
  }
};

// Connects (one attempt: a bad URL or bad credentials end the bridge with a
// clear line) and opens JetStream. `js_opts` may set the async-ack handler.
bool connect(nats_link& l, const common_args& a, jsOptions* js_opts, bool send_asap, std::string& error) {
  const std::string shown = shmbox_cli::without_credentials(a.url);
  natsStatus s = natsOptions_Create(&l.opts);
  if (s == NATS_OK) s = natsOptions_SetURL(l.opts, a.url.c_str());
  if (s == NATS_OK && !a.user.empty()) s = natsOptions_SetUserInfo(l.opts, a.user.c_str(), a.password.c_str());
  if (s == NATS_OK && !a.token.empty()) s = natsOptions_SetToken(l.opts, a.token.c_str());
  if (s == NATS_OK) s = natsOptions_SetTimeout(l.opts, 2000);
  if (s == NATS_OK) s = natsOptions_SetAllowReconnect(l.opts, true);
  if (s == NATS_OK) s = natsOptions_SetMaxReconnect(l.opts, -1);
  if (s == NATS_OK) s = natsOptions_SetReconnectWait(l.opts, 250);
  if (s == NATS_OK) s = natsOptions_SetPingInterval(l.opts, 2000);
  if (s == NATS_OK) s = natsOptions_SetMaxPingsOut(l.opts, 3);
  // nats.c's flusher writes at most every millisecond; the import's fetch
  // requests and acks go out at once instead (a millisecond of latency less).
  if (s == NATS_OK && send_asap) s = natsOptions_SetSendAsap(l.opts, true);
  if (s != NATS_OK) {
    error = "bad NATS options for '" + shown + "': " + nats_error(s) + " (a URL looks like nats://host:4222)";
    return false;
  }
  s = natsConnection_Connect(&l.nc, l.opts);
  if (s != NATS_OK) {
    const std::string why = nats_error(s);
    std::string hint = "is nats-server running there (nats-server -js -a HOST -p PORT)?";
    if (s == NATS_NOT_PERMITTED || why.find("uthoriz") != std::string::npos)
      hint = "the server refused the credentials: pass --user and --password, or --token, or user:password@ in the URL";
    error = "cannot connect to NATS at '" + shown + "': " + why + "; " + hint;
    return false;
  }
  s = natsConnection_JetStream(&l.js, l.nc, js_opts);
  if (s != NATS_OK) {
    error = "cannot use JetStream on '" + shown + "': " + nats_error(s);
    return false;
  }
  return true;
}

// NATS subject matching: '*' one token, '>' the rest.
bool subject_matches(std::string_view pattern, std::string_view subject) {
  while (true) {
    const std::size_t pd = pattern.find('.'), sd = subject.find('.');
    const std::string_view pt = pattern.substr(0, pd), st = subject.substr(0, sd);
    if (pt == ">") return !subject.empty();
    if (pt != "*" && pt != st) return false;
    if (pd == std::string_view::npos || sd == std::string_view::npos) return pd == sd;
    pattern.remove_prefix(pd + 1);
    subject.remove_prefix(sd + 1);
  }
}

std::string describe_stream_error(const common_args& a, natsStatus s, jsErrCode jerr) {
  if (jerr == JSStreamNotFoundErr || s == NATS_NOT_FOUND)
    return "stream '" + a.stream + "' does not exist on '" + shmbox_cli::without_credentials(a.url) + "'";
  return "cannot read stream '" + a.stream + "': " + nats_error(s) + (jerr != 0 ? " (JetStream error " + std::to_string(jerr) + ")" : "");
}

// ---------------------------------------------------------------------------
// Export
// ---------------------------------------------------------------------------

struct export_args : common_args {
  std::string box;
  bool create_stream = false;
  std::string storage = "file";
  double dedupe_window_s = 120;
  std::uint32_t max_inflight = 0;  // 0: min(256, capacity / 2)
  std::uint32_t ack_timeout_ms = 2000;
};

// The batch in flight: which of its ids JetStream acknowledged. Written by
// nats.c's thread (on_ack), read by the bridge's.
struct inflight {
  std::mutex mu;
  std::unordered_map<std::string, std::size_t> index;  // id -> position in the batch
  std::vector<char> acked;
  std::uint64_t errors = 0;  // negative acknowledgements this round
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
        f->status->add(bridge_counter::acked);
        if (pa->Duplicate) f->status->add(bridge_counter::dedupe_hits);
      }
    } else if (pae != nullptr) {
      ++f->errors;
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

// Publishes the batch until JetStream acknowledged every message; false when
// stopped first (nothing is committed then: the next owner republishes).
bool publish_all(nats_link& l, const export_args& a, shmbox::Owner& owner, const shmbox::batch& b, inflight& f,
                 bridge_status& st, const std::vector<std::string>& ids, std::uint32_t default_lane) {
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
      if (s == NATS_OK) s = js_PublishMsgAsync(l.js, &m, nullptr);
      natsMsg_Destroy(m);  // no effect when the library took it
      if (s == NATS_OK) {
        st.add(bridge_counter::published);
      } else {
        st.add(bridge_counter::publish_errors);
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
        st.add(bridge_counter::publish_errors, static_cast<std::uint64_t>(pending.Count));
        natsMsgList_Destroy(&pending);
      }
    }
    bool all = true;
    std::uint64_t errors = 0;
    {
      std::lock_guard<std::mutex> g(f.mu);
      all = std::all_of(f.acked.begin(), f.acked.end(), [](char c) { return c != 0; });
      errors = f.errors;
    }
    if (all) return true;
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
  if (!connect(link, a, &jo, false, error)) return die(error);
  if (!check_stream(link, a, info, error)) return die(error);
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
  if (!owner) return die(shmbox::explain(owner.error()));
  st->activate(a.url, a.stream, a.subject, "");
  std::cout << "ready export " << a.box << " stream=" << a.stream << " subject=" << a.subject << " epoch=" << owner->epoch()
            << std::endl;

  shmbox::batch b;
  std::vector<std::string> ids;
  while (!g_stop.load()) {
    b.clear();
    const shmbox::recv_status r = owner->read(b, {.max = inflight_max, .timeout = 200ms});
    if (r == shmbox::recv_status::timeout || r == shmbox::recv_status::empty) continue;
    if (r == shmbox::recv_status::not_owner) return die("box '" + a.box + "' was taken from this bridge (lease expired or given away); stopping");
    if (r != shmbox::recv_status::ok) return die(shmbox::explain(owner->last_error()));
    ids.resize(b.size());
    for (std::size_t i = 0; i < b.size(); ++i) {
      ids[i] = shmbox::to_string(owner->id_of(b.lane(i), b.position(i)));
      if (b.redelivered(i)) st->add(bridge_counter::redeliveries);
    }
    if (!publish_all(link, a, *owner, b, f, *st, ids, box->default_lane())) break;  // stopped: the next owner publishes them again
    std::size_t lost = 0;
    if (owner->commit(&lost) != shmbox::recv_status::ok)
      return die("box '" + a.box + "' was taken from this bridge with " + std::to_string(lost) +
                 " published messages uncommitted (the new owner publishes them again; JetStream drops the duplicates)");
  }
  std::cout << "stopped export " << a.box << " published=" << st->get(bridge_counter::published)
            << " acked=" << st->get(bridge_counter::acked) << std::endl;
  return kExitOk;
}

// ---------------------------------------------------------------------------
// Import
// ---------------------------------------------------------------------------

struct import_args : common_args {
  std::string into, durable;
  std::uint32_t max_batch = 256;
  std::uint32_t nak_delay_ms = 500;
  std::uint32_t ack_wait_ms = 30000;
};

// The free slots of the box's default lane now (where a message without a
// lane goes): what a fetch may take. A message for a full other lane is
// refused by its post and nak'ed.
std::uint32_t free_slots(const shmbox::Box& box) {
  const std::uint32_t lane = box.default_lane();
  const std::uint64_t cap = box.capacity(lane), depth = box.depth_approx(lane);
  return depth >= cap ? 0 : static_cast<std::uint32_t>(cap - depth);
}

int run_import(import_args a) {
  auto box = shmbox::Box::open(a.into);
  if (!box) return die(shmbox::explain(box.error()));
  auto producer = shmbox::Producer::attach(*box);
  if (!producer) return die(shmbox::explain(producer.error()));
  const shmbox::box_info info = shmbox::info(*box);
  std::string error;
  auto st = bridge_status::open(a.into, bridge_role::import_, info.mode, error);
  if (!st) return die(error);
  nats_link link;
  if (!connect(link, a, nullptr, true, error)) return die(error);

  jsStreamInfo* si = nullptr;
  jsErrCode jerr = static_cast<jsErrCode>(0);
  natsStatus s = js_GetStreamInfo(&si, link.js, a.stream.c_str(), nullptr, &jerr);
  if (s != NATS_OK) return die(describe_stream_error(a, s, jerr) + "; the import reads an existing stream (an export bridge with --create-stream makes one)");
  if (a.subject.empty()) {
    if (si->Config != nullptr && si->Config->SubjectsLen == 1) a.subject = si->Config->Subjects[0];
  }
  jsStreamInfo_Destroy(si);
  if (a.subject.empty()) return die("stream '" + a.stream + "' has several subjects: pass --subject to say which one to import");

  jsSubOptions so;
  jsSubOptions_Init(&so);
  so.Stream = a.stream.c_str();
  so.Config.AckPolicy = js_AckExplicit;
  so.Config.MaxAckPending = static_cast<int64_t>(a.max_batch) * 4;
  // How soon JetStream delivers again what a killed import fetched and never acked.
  so.Config.AckWait = static_cast<int64_t>(a.ack_wait_ms) * 1000000;
  natsSubscription* sub = nullptr;
  s = js_PullSubscribe(&sub, link.js, a.subject.c_str(), a.durable.c_str(), nullptr, &so, &jerr);
  if (s != NATS_OK)
    return die("cannot pull from stream '" + a.stream + "' with durable '" + a.durable + "': " + nats_error(s) +
               (jerr != 0 ? " (JetStream error " + std::to_string(jerr) + ")" : ""));
  st->activate(a.url, a.stream, a.subject, a.durable);
  std::cout << "ready import " << a.into << " stream=" << a.stream << " durable=" << a.durable << std::endl;

  std::uint64_t last_seq = 0;
  int rc = kExitOk;
  while (!g_stop.load() && rc == kExitOk) {
    const std::uint32_t room = std::min(free_slots(*box), a.max_batch);
    if (room == 0) {
      std::this_thread::sleep_for(2ms);  // the owner frees slots; no one wakes an outside producer for that
      continue;
    }
    natsMsgList list{};
    s = natsSubscription_Fetch(&list, sub, static_cast<int>(room), 250, &jerr);
    if (s == NATS_TIMEOUT) continue;
    if (s != NATS_OK) {
      if (list.Msgs != nullptr) natsMsgList_Destroy(&list);
      std::this_thread::sleep_for(100ms);  // reconnecting; the durable keeps our place
      continue;
    }
    bool refused = false;  // the box refused one: nak the rest of the fetch too (they would be refused)
    for (int i = 0; i < list.Count; ++i) {
      natsMsg* m = list.Msgs[i];
      jsMsgMetaData* meta = nullptr;
      if (natsMsg_GetMetaData(&meta, m) == NATS_OK) {
        if (meta->NumDelivered > 1) {
          st->add(bridge_counter::redeliveries);
        } else if (last_seq != 0 && meta->Sequence.Stream > last_seq + 1) {
          st->add(bridge_counter::remote_drops, meta->Sequence.Stream - last_seq - 1);
        }
        last_seq = std::max(last_seq, meta->Sequence.Stream);
        jsMsgMetaData_Destroy(meta);
      }
      if (refused) {
        natsMsg_NakWithDelay(m, a.nak_delay_ms, nullptr);
        st->add(bridge_counter::naks);
        continue;
      }
      shmbox::post_options po;
      const char* lane = nullptr;
      if (natsMsgHeader_Get(m, "Shmbox-Lane", &lane) == NATS_OK && lane != nullptr) {
        char* end = nullptr;
        const unsigned long v = std::strtoul(lane, &end, 10);
        if (end != lane && *end == '\0' && v < box->lane_count()) po.lane = static_cast<std::uint32_t>(v);
      }
      const shmbox::post_status ps = producer->post(natsMsg_GetData(m), static_cast<std::size_t>(natsMsg_GetDataLength(m)), po);
      switch (ps) {
        case shmbox::post_status::stored:
        case shmbox::post_status::stored_evicted:
        case shmbox::post_status::dropped:
          natsMsg_Ack(m, nullptr);
          st->add(bridge_counter::imported);
          if (ps == shmbox::post_status::dropped) st->add(bridge_counter::local_drops);
          if (ps == shmbox::post_status::stored_evicted) st->add(bridge_counter::local_drops, producer->last_evicted());
          break;
        case shmbox::post_status::full:
        case shmbox::post_status::timeout:
          natsMsg_NakWithDelay(m, a.nak_delay_ms, nullptr);
          st->add(bridge_counter::naks);
          refused = true;
          break;
        case shmbox::post_status::too_large:
          std::cerr << "shmbox-bridge: a message of " << natsMsg_GetDataLength(m) << " bytes is larger than box '" << a.into
                    << "' takes (" << box->slot_size() << "); terminated in the stream (counted as too_large by the box)\n";
          natsMsg_Term(m, nullptr);
          st->add(bridge_counter::local_drops);
          break;
        case shmbox::post_status::error:
          natsMsg_Nak(m, nullptr);
          st->add(bridge_counter::naks);
          rc = die(shmbox::explain(producer->last_error()));
          refused = true;
          break;
      }
    }
    natsMsgList_Destroy(&list);
    if (refused) {
      // Fetch nothing until the nak'ed ones are due again: JetStream hands
      // out due redeliveries before newer messages, so the lane keeps its
      // order (a fetch now would post newer messages ahead of them).
      const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(a.nak_delay_ms) + 20ms;
      while (!g_stop.load() && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(10ms);
    }
  }
  natsSubscription_Destroy(sub);
  if (rc == kExitOk)
    std::cout << "stopped import " << a.into << " imported=" << st->get(bridge_counter::imported) << std::endl;
  return rc;
}

// A stream or consumer name: no spaces, dots, wildcards or path separators (JetStream's rule).
CLI::Validator name_token(const char* what) {
  return CLI::Validator(
      [what](std::string& v) -> std::string {
        if (v.empty()) return std::string(what) + " cannot be empty";
        for (const char ch : v)
          if (ch == '.' || ch == '*' || ch == '>' || ch == '/' || ch == '\\' || ch == ' ' || ch < 0x21 || ch == 0x7f)
            return std::string(what) + " '" + v + "' may not contain '.', '*', '>', '/', '\\' or spaces";
        return {};
      },
      "NAME");
}

void add_common(CLI::App* c, common_args& a) {
  c->add_option("--nats", a.url, "NATS server URL(s), comma-separated (nats://[user:password@]host:port)")->capture_default_str();
  c->add_option("--stream", a.stream, "JetStream stream")->required()->check(name_token("a stream name"));
  auto* user = c->add_option("--user", a.user, "NATS user (with --password)");
  auto* password = c->add_option("--password", a.password, "NATS password (with --user)");
  auto* token = c->add_option("--token", a.token, "NATS token (instead of --user and --password)");
  user->needs(password);
  password->needs(user);
  token->excludes(user)->excludes(password);
}

// A subject to publish to: dot-separated tokens, no wildcard, no space.
CLI::Validator publish_subject() {
  return CLI::Validator(
      [](std::string& v) -> std::string {
        if (v.empty() || v.front() == '.' || v.back() == '.' || v.find("..") != std::string::npos)
          return "'" + v + "' is not a subject: dot-separated tokens, e.g. jobs.host-a";
        for (const char ch : v)
          if (ch == '*' || ch == '>' || ch == ' ' || ch == '\t' || ch == '\r' || ch == '\n')
            return "'" + v + "': a bridge publishes to one subject, without wildcards (* >) or spaces";
        return {};
      },
      "SUBJECT");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"shmbox-bridge: move messages between a local box and a NATS JetStream stream (docs/bridge.md)"};
  app.require_subcommand(1);
  export_args ex;
  auto* e = app.add_subcommand("export", "Own BOX and publish its messages to a stream (a second one stands by as heir)");
  e->add_option("BOX", ex.box, "the box to export")->required();
  add_common(e, ex);
  e->add_option("--subject", ex.subject, "subject to publish to")->required()->check(publish_subject());
  e->add_flag("--create-stream", ex.create_stream, "create the stream if missing, with the box's policy mapped");
  e->add_option("--storage", ex.storage, "storage of a created stream")->check(CLI::IsMember({"file", "memory"}))->capture_default_str();
  e->add_option("--dedupe-window", ex.dedupe_window_s, "seconds: a created stream's duplicate window")
      ->check(CLI::Range(1.0, 86400.0))->capture_default_str();
  e->add_option("--max-inflight", ex.max_inflight, "messages read and published before their acks (default: min(256, capacity/2))")
      ->check(CLI::Range(1u, 65536u));
  e->add_option("--ack-timeout", ex.ack_timeout_ms, "ms to wait for JetStream's acks before publishing again")
      ->check(CLI::Range(10u, 600000u))->capture_default_str();
  import_args im;
  auto* i = app.add_subcommand("import", "Pull a stream with a durable consumer into BOX (acks what the box took)");
  add_common(i, im);
  i->add_option("--durable", im.durable, "durable consumer name (created if missing)")->required()->check(name_token("a durable name"));
  i->add_option("--into", im.into, "the box to post into (it must exist)")->required();
  i->add_option("--subject", im.subject, "filter subject (default: the stream's only subject)");
  i->add_option("--max-batch", im.max_batch, "messages per fetch at most")->check(CLI::Range(1u, 65536u))->capture_default_str();
  i->add_option("--nak-delay", im.nak_delay_ms, "ms before JetStream redelivers a message the box refused")
      ->check(CLI::Range(0u, 3600000u))->capture_default_str();
  i->add_option("--ack-wait", im.ack_wait_ms,
                "ms before JetStream redelivers what an import fetched and never acked (it was killed); a new durable's setting")
      ->check(CLI::Range(100u, 3600000u))->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& err) {
    const int rc = app.exit(err);
    return rc == 0 ? kExitOk : kExitUsage;
  }
  struct sigaction sa{};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
  int rc = kExitFail;
  if (e->parsed()) rc = run_export(ex);
  if (i->parsed()) rc = run_import(im);
  nats_Close();
  return rc;
}
