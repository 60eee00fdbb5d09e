// bridge/import.cpp - `shmbox-bridge import --into BOX`: pulls the stream
// with a durable consumer, at most the box's free slots at a time, posts, and
// acks only what the box took (a refusal is nak'ed for later).
//
// Exactly once and in order, even when the import is killed at any
// instruction (docs/bridge.md):
//  * it posts in stream order and remembers, in its status segment, the
//    highest stream sequence it is done with (posted_seq) and, per source
//    box and lane, the highest message position (the Nats-Msg-Id): a message
//    at or below either is a duplicate, acked and skipped;
//  * a post in flight is written down first (the intent: which message, and
//    its producer entry's counts before it); a restarted import takes the
//    dead one's entry back (Producer::adopt, which finishes that post) and
//    learns from the counts whether it landed;
//  * every loss is counted once (remote_drops): a gap in a source lane's
//    ordinals (Shmbox-Ordinal, set by the export), or for a source's first
//    message a gap in the stream sequence; the count rides in the intent
//    and is added by whoever finishes the post (bridge_status::finish);
//  * acks go on a second connection, written in batches by nats.c;
//  * messages a killed import fetched and never acked would come back only
//    after --ack-wait, behind newer ones: a restarted import makes the
//    durable again from the first unacknowledged sequence, so they come
//    first (a stream with interest retention, where deleting the durable
//    would delete messages, waits --ack-wait instead).
#include <nats/nats.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <mutex>
#include <optional>
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

// The free slots of the box's default lane now (where a message without a
// lane goes): what a fetch may take. A message for a full other lane is
// refused by its post and nak'ed.
std::uint32_t free_slots(const shmbox::Box& box) {
  const std::uint32_t lane = box.default_lane();
  const std::uint64_t cap = box.capacity(lane), depth = box.depth_approx(lane);
  return depth >= cap ? 0 : static_cast<std::uint32_t>(cap - depth);
}

}  // namespace

// What this import answers on its presence subject (puller::claim): never
// freed. Not in the anonymous namespace: a variable nothing here reads would
// be optimised away, store and all, and LeakSanitizer would call the string
// a leak again.
extern const std::string* g_presence_text;
const std::string* g_presence_text = nullptr;

namespace {

// The import's hold on its durable: the pull subscription, made again when
// the durable disappears, and a presence other imports ask before they start.
struct puller {
  const import_args& a;
  nats_link& link;
  bridge_status& st;
  natsSubscription* sub = nullptr;
  natsSubscription* presence = nullptr;
  std::chrono::steady_clock::time_point stream_missing_since{};
  std::string exit_error;  // set when the import must exit 1
  bool interest = false;   // the stream has interest retention (deleting the durable deletes messages)
  bool workqueue = false;  // work-queue retention: acked messages leave the stream, a durable must deliver all
  // Fetch nothing before this: a killed import's unacknowledged messages
  // come back first (interest retention: after --ack-wait).
  std::chrono::steady_clock::time_point hold_until{};
  // The consumer sequence of the last delivery this import received: each
  // delivery (a redelivery too) takes the next one, so a jump means
  // deliveries lost on the way (a fetch's reply, a consumer leader that
  // died): JetStream would hand them out again after the ack wait, behind
  // newer messages.
  std::uint64_t delivered = 0;
  natsConnection* acks = nullptr;  // the connection acks go on (run_import's second one)

  // Acks `m` on the acks connection (the main one if that is down: a lost
  // ack only brings the message back, as a duplicate).
  void ack(natsMsg* m) const {
    const char* reply = natsMsg_GetReply(m);
    if (acks == nullptr || reply == nullptr || natsConnection_PublishString(acks, reply, "+ACK") != NATS_OK) natsMsg_Ack(m, nullptr);
  }

  // Deliveries were lost on the way: the durable again from its first
  // unacknowledged sequence (subscribe), so they come back first, in order.
  bool resync() {
    if (acks != nullptr) (void)natsConnection_FlushTimeout(acks, 2000);  // our acks first: fewer to deliver again
    if (sub != nullptr) natsSubscription_Destroy(sub);
    sub = nullptr;
    st.add(bridge_counter::resyncs);
    return subscribe_retrying("this import (deliveries lost on the way: a fetch's reply, a consumer leader's failover)");
  }

  puller(const import_args& args, nats_link& l, bridge_status& s) : a(args), link(l), st(s) {}
  puller(const puller&) = delete;
  puller& operator=(const puller&) = delete;
  ~puller() {
    if (sub != nullptr) natsSubscription_Destroy(sub);
    if (presence != nullptr) natsSubscription_Destroy(presence);
  }

  // The subject where a working import of this durable answers (stream and
  // durable names are single tokens).
  std::string presence_subject() const { return "_SHMBOX.import." + a.stream + "." + a.durable; }

  // Another import pulling this durable answers on the presence subject:
  // false with exit_error naming it. Then this import answers there.
  bool claim() {
    natsMsg* reply = nullptr;
    const natsStatus s = natsConnection_RequestString(&reply, link.nc, presence_subject().c_str(), "", 500);
    if (s == NATS_OK) {
      exit_error = "durable '" + a.durable + "' of stream '" + a.stream + "' is pulled by another import bridge (" +
                   std::string(natsMsg_GetData(reply), static_cast<std::size_t>(natsMsg_GetDataLength(reply))) +
                   "): one import per durable (two would share its messages and its order); stop it, or give this one another --durable";
      natsMsg_Destroy(reply);
      return false;
    }
    // A user not allowed to subscribe there is not stopped by it: the check is then one-sided.
    char host[256] = {};
    (void)gethostname(host, sizeof host - 1);
    // Never freed: nats.c may run the callback after the subscription is
    // destroyed. Kept reachable (g_presence_text), so that LeakSanitizer
    // does not take it for a leak.
    auto* me = new std::string("pid " + std::to_string(getpid()) + " on " + host + ", into box '" + a.into + "'");
    g_presence_text = me;
    if (natsConnection_Subscribe(&presence, link.nc, presence_subject().c_str(), on_presence, me) != NATS_OK) presence = nullptr;
    return true;
  }

  static void on_presence(natsConnection* nc, natsSubscription*, natsMsg* m, void* closure) {
    const auto* me = static_cast<const std::string*>(closure);
    if (natsMsg_GetReply(m) != nullptr) (void)natsConnection_PublishString(nc, natsMsg_GetReply(m), me->c_str());
    natsMsg_Destroy(m);
  }

  // The durable as this import wants it: created if missing; an existing one
  // whose ack wait or max ack pending differ is updated first (a restart
  // with other --ack-wait / --max-batch). False with exit_error.
  bool subscribe(const char* who = "a previous import") {
    const std::int64_t ack_wait = static_cast<std::int64_t>(a.ack_wait_ms) * 1000000;
    const std::int64_t max_pending = static_cast<std::int64_t>(a.max_batch) * 4;
    jsConsumerInfo* ci = nullptr;
    jsErrCode jerr = static_cast<jsErrCode>(0);
    std::uint64_t start_seq = 0;  // 0: where the durable is (or, new, the stream's start)
    if (js_GetConsumerInfo(&ci, link.js, a.stream.c_str(), a.durable.c_str(), nullptr, &jerr) != NATS_OK) ci = nullptr;
    if (ci != nullptr && ci->NumAckPending > 0) {
      // Fetched by an import that is gone (claim() found none alive), not
      // acked: JetStream would hand them out again after the ack wait,
      // behind newer messages. Start the durable again at the first one.
      const std::uint64_t floor = ci->AckFloor.Stream;
      const std::int64_t pending = ci->NumAckPending;
      if (interest) {
        hold_until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ci->Config != nullptr ? ci->Config->AckWait / 1000000 : a.ack_wait_ms) +
                     100ms;
        std::cerr << "shmbox-bridge: durable '" << a.durable << "' has " << pending << " messages " << who
                  << " fetched and did not ack; the stream has interest retention, so waiting the ack wait for them to come back first, in order"
                  << std::endl;
      } else if (js_DeleteConsumer(link.js, a.stream.c_str(), a.durable.c_str(), nullptr, &jerr) == NATS_OK) {
        start_seq = floor + 1;
        std::cerr << "shmbox-bridge: durable '" << a.durable << "' had " << pending << " messages " << who
                  << " fetched and did not ack: made it again from stream sequence " << start_seq
                  << ", so that they come back first, in order" << std::endl;
        jsConsumerInfo_Destroy(ci);
        ci = nullptr;
      }
    }
    if (ci != nullptr && ci->Config != nullptr && (ci->Config->AckWait != ack_wait || ci->Config->MaxAckPending != max_pending)) {
      jsConsumerConfig cfg = *ci->Config;  // the durable's own settings, two of them changed
      const std::int64_t was_wait = cfg.AckWait, was_pending = cfg.MaxAckPending;
      cfg.AckWait = ack_wait;
      cfg.MaxAckPending = max_pending;
      jsConsumerInfo* updated = nullptr;
      const natsStatus s = js_UpdateConsumer(&updated, link.js, a.stream.c_str(), &cfg, nullptr, &jerr);
      if (updated != nullptr) jsConsumerInfo_Destroy(updated);
      if (s != NATS_OK) {
        exit_error = "durable '" + a.durable + "' has ack wait " + std::to_string(was_wait / 1000000) + " ms and max ack pending " +
                     std::to_string(was_pending) + "; changing them to " + std::to_string(a.ack_wait_ms) + " ms and " +
                     std::to_string(max_pending) + " (--ack-wait, 4 x --max-batch) failed: " + nats_error(s) +
                     "; start with the durable's values, or remove the durable (nats consumer rm) to make it anew";
        jsConsumerInfo_Destroy(ci);
        return false;
      }
      std::cerr << "shmbox-bridge: durable '" << a.durable << "' updated: ack wait " << was_wait / 1000000 << " -> " << a.ack_wait_ms
                << " ms, max ack pending " << was_pending << " -> " << max_pending << std::endl;
    }
    delivered = ci != nullptr ? ci->Delivered.Consumer : 0;
    if (ci != nullptr) jsConsumerInfo_Destroy(ci);
    jsSubOptions so;
    jsSubOptions_Init(&so);
    so.Stream = a.stream.c_str();
    so.Config.AckPolicy = js_AckExplicit;
    so.Config.MaxAckPending = max_pending;
    // How soon JetStream delivers again what a killed import fetched and never acked.
    so.Config.AckWait = ack_wait;
    // A work queue keeps only what is not acked: delivering all starts at the
    // first unacknowledged message (and JetStream takes no other policy there).
    if (start_seq != 0 && !workqueue) {
      so.Config.DeliverPolicy = js_DeliverByStartSequence;
      so.Config.OptStartSeq = start_seq;
    }
    const natsStatus s = js_PullSubscribe(&sub, link.js, a.subject.c_str(), a.durable.c_str(), nullptr, &so, &jerr);
    if (s != NATS_OK) {
      exit_error = "cannot pull from stream '" + a.stream + "' with durable '" + a.durable + "': " + nats_error(s) +
                   (jerr != 0 ? " (JetStream error " + std::to_string(jerr) + ")" : "");
      // No answer, or a cluster electing leaders: worth another try.
      transient = jerr == 0 || jerr == JSClusterNotAvailErr || jerr == JSClusterNotLeaderErr;
      return false;
    }
    return true;
  }
  bool transient = false;  // the last subscribe() failed for a reason that passes (a timeout, an election)

  // subscribe(), again while it fails for a reason that passes (for up to a
  // minute: a JetStream cluster electing leaders after a server died).
  bool subscribe_retrying(const char* who = "a previous import") {
    const auto until = std::chrono::steady_clock::now() + 60s;
    auto backoff = 100ms;
    while (!subscribe(who)) {
      if (!transient || g_stop.load() || std::chrono::steady_clock::now() >= until) return false;
      report_error(st, exit_error + "; trying again", false);
      std::this_thread::sleep_for(backoff);
      backoff = std::min<std::chrono::milliseconds>(backoff * 2, 2000ms);
    }
    return true;
  }

  // The stream, durable and subject this status segment's sequences belong
  // to: another one (or the stream made again: another creation time)
  // starts them at the durable's ack floor (0 for a new durable: messages
  // gone from the stream before it fetched them count as remote_drops).
  // The same one: the record is this import's own from an earlier run (the
  // segment is this uid's and nobody else may write it: bridge_status::open),
  // and still bounded by what the stream proves before it decides what is a
  // duplicate (bridge_status::bound_sequences): posted_seq is the one truth
  // for what was posted and not acked (JetStream cannot know a post whose ack
  // was lost), so a value beyond the stream's last sequence is refused, said.
  void stream_identity() {
    jsStreamInfo* si = nullptr;
    jsConsumerInfo* ci = nullptr;
    jsErrCode jerr = static_cast<jsErrCode>(0);
    if (js_GetStreamInfo(&si, link.js, a.stream.c_str(), nullptr, &jerr) == NATS_OK && si != nullptr &&
        js_GetConsumerInfo(&ci, link.js, a.stream.c_str(), a.durable.c_str(), nullptr, &jerr) == NATS_OK && ci != nullptr) {
      std::uint64_t key = static_cast<std::uint64_t>(si->Created) ^ 0xcbf29ce484222325ull;  // FNV-1a over durable and subject
      for (const char ch : a.durable + '\0' + a.subject) key = (key ^ static_cast<unsigned char>(ch)) * 0x100000001b3ull;
      if (key != st.stream_created_ns()) {
        st.set_stream(key, ci->AckFloor.Stream);
      } else if (const std::string said = st.bound_sequences(si->State.LastSeq, ci->AckFloor.Stream, a.stream); !said.empty()) {
        report_error(st, said, true);
      }
    }
    if (si != nullptr) jsStreamInfo_Destroy(si);
    if (ci != nullptr) jsConsumerInfo_Destroy(ci);
  }

  // A durable that says nothing is pending or unacknowledged while its
  // stream (of one subject, ours) holds messages past what it delivered: a
  // JetStream cluster's consumer that lost track (nats-server 2.9, a server
  // killed and restarted). Seen twice with nothing delivered in between.
  std::uint64_t stuck_at = 0;  // the delivered sequence of the first sighting (0: none)
  bool lost_track(const jsConsumerInfo& ci) {
    bool now = false;
    if (ci.NumPending == 0 && ci.NumAckPending == 0) {
      jsStreamInfo* si = nullptr;
      jsErrCode jerr = static_cast<jsErrCode>(0);
      if (js_GetStreamInfo(&si, link.js, a.stream.c_str(), nullptr, &jerr) == NATS_OK && si != nullptr) {
        now = si->Config != nullptr && si->Config->SubjectsLen == 1 && a.subject == si->Config->Subjects[0] && si->State.Msgs > 0 &&
              si->State.LastSeq > ci.Delivered.Stream;
      }
      if (si != nullptr) jsStreamInfo_Destroy(si);
    }
    const std::uint64_t at = ci.Delivered.Stream + 1;
    const bool twice = now && stuck_at == at;
    stuck_at = now ? at : 0;
    return twice;
  }

  // After failed or empty fetches: is the durable (and its stream) still
  // there? The durable is made again at once (counted, said once); a missing
  // stream is waited for --stream-grace seconds (an export with
  // --create-stream makes it again), then false with exit_error.
  bool check() {
    jsConsumerInfo* ci = nullptr;
    jsErrCode jerr = static_cast<jsErrCode>(0);
    natsStatus s = js_GetConsumerInfo(&ci, link.js, a.stream.c_str(), a.durable.c_str(), nullptr, &jerr);
    if (s == NATS_OK && ci != nullptr) {
      const bool stuck = lost_track(*ci);
      jsConsumerInfo_Destroy(ci);
      stream_missing_since = {};
      report_state(st, bridge_state::connected);
      if (stuck) {
        std::cerr << "shmbox-bridge: durable '" << a.durable << "' has said for two checks that nothing is pending while stream '"
                  << a.stream << "' holds messages for it (a JetStream cluster's consumer that lost track after a server died)"
                  << std::endl;
        return resync();
      }
      return true;
    }
    if (ci != nullptr) jsConsumerInfo_Destroy(ci);
    if (!(jerr == JSConsumerNotFoundErr || jerr == JSStreamNotFoundErr || s == NATS_NOT_FOUND)) return true;  // could not ask: later
    jsStreamInfo* si = nullptr;
    s = js_GetStreamInfo(&si, link.js, a.stream.c_str(), nullptr, &jerr);
    if (si != nullptr) jsStreamInfo_Destroy(si);
    if (s != NATS_OK) {
      if (!(jerr == JSStreamNotFoundErr || s == NATS_NOT_FOUND)) return true;
      const auto now = std::chrono::steady_clock::now();
      if (stream_missing_since == std::chrono::steady_clock::time_point{}) stream_missing_since = now;
      report_state(st, bridge_state::stream_missing,
                   "stream '" + a.stream + "' disappeared from '" + link.shown + "' (deleted, or lost by a server with memory " +
                       "storage that restarted); waiting " + std::to_string(static_cast<int>(a.stream_grace_s)) + " s for it");
      if (now - stream_missing_since >= std::chrono::duration<double>(a.stream_grace_s)) {
        exit_error = "stream '" + a.stream + "' has been missing for " + std::to_string(static_cast<int>(a.stream_grace_s)) +
                     " s (--stream-grace): create it again (an export bridge with --create-stream does), then restart the import";
        return false;
      }
      return true;
    }
    report_state(st, bridge_state::consumer_missing);
    if (sub != nullptr) natsSubscription_Destroy(sub);
    sub = nullptr;
    if (!subscribe_retrying()) return false;
    stream_identity();
    st.add(bridge_counter::durable_recreated);
    report_error(st, "durable '" + a.durable + "' of stream '" + a.stream + "' had disappeared; made it again", true);
    stream_missing_since = {};
    report_state(st, bridge_state::connected);
    return true;
  }
};

// The import's producer: a killed import's entry taken back when it died
// with a post in flight (that post's outcome learned from the entry's
// counts), else a new entry. Its counts, kept up to date by post().
struct import_producer {
  bridge_status& st;
  shmbox::Box& box;
  const shmbox::box_info& info;  // the box's, as run_import read it at start
  std::optional<shmbox::Producer> p;
  std::uint64_t stored = 0, refused = 0;  // the entry's counts (producer_info)

  import_producer(bridge_status& s, shmbox::Box& b, const shmbox::box_info& i) : st(s), box(b), info(i) {}

  bool counts(std::uint32_t entry) {
    for (const shmbox::producer_info& pi : shmbox::info(box).producers)
      if (pi.entry == entry) {
        stored = pi.stored;
        refused = pi.refused;
        return true;
      }
    return false;
  }

  // Recovers the post a killed import had in flight, then holds an entry. False with `error`.
  bool start(std::string& error) {
    const bridge_status::import_recovery r = st.recovery();
    if (r.posting) {
      auto adopted = shmbox::Producer::adopt(box, static_cast<std::uint32_t>(std::min<std::uint64_t>(r.entry, UINT32_MAX)), r.attached_ns);
      if (adopted && counts(adopted->entry_index())) {
        const bool drop_newest = r.intent.lane < info.lanes.size() && info.lanes[r.intent.lane].overflow == shmbox::policy::drop_newest;
        const bool landed = stored > r.intent.stored_before || (drop_newest && refused > r.intent.refused_before);
        // In the box (or counted there: abandoned, dropped), or done with
        // before it died: never post it again; its counts once each.
        if (landed || r.done) st.finish(r.intent, landed);
        std::cerr << "shmbox-bridge: the previous import was killed posting stream sequence " << r.intent.stream_seq << ": "
                  << (landed ? "it is in box '" + info.name + "' (it will not be posted again)"
                             : r.done ? std::string("it was done with (it will not be posted again)")
                                      : std::string("it did not land (it will be posted)"))
                  << std::endl;
        p.emplace(std::move(*adopted));
      } else {
        st.add(bridge_counter::uncertain_posts);
        std::cerr << "shmbox-bridge: the previous import was killed posting stream sequence " << r.intent.stream_seq
                  << " and its producer entry of box '" << info.name
                  << "' was taken by another process since: whether that post landed is unknown; it is posted again (counted as uncertain_posts)"
                  << std::endl;
      }
      st.end_post();
    }
    if (!p) {
      auto fresh = shmbox::Producer::attach(box);
      if (!fresh) {
        error = shmbox::explain(fresh.error());
        return false;
      }
      p.emplace(std::move(*fresh));
      if (!counts(p->entry_index())) stored = refused = 0;
    }
    st.set_entry(p->entry_index(), p->attached_ns());
    return true;
  }

  shmbox::post_status post(const void* data, std::size_t size, const shmbox::post_options& o) {
    const shmbox::post_status ps = p->post(data, size, o);
    switch (ps) {
      case shmbox::post_status::stored:
      case shmbox::post_status::stored_evicted: ++stored; break;
      case shmbox::post_status::dropped:
      case shmbox::post_status::full:
      case shmbox::post_status::timeout:
      case shmbox::post_status::over_quota:
      case shmbox::post_status::too_large: ++refused; break;
      case shmbox::post_status::error: (void)counts(p->entry_index()); break;
    }
    return ps;
  }
};

// A Nats-Msg-Id of the export ("BOXID-LANE-POSITION"): its source; box 0 when it is not one.
bridge_status::source_id source_of(natsMsg* m) {
  const char* id = nullptr;
  if (natsMsgHeader_Get(m, "Nats-Msg-Id", &id) != NATS_OK || id == nullptr) return {};
  const std::optional<shmbox::message_id> mid = shmbox::parse_message_id(id);
  if (!mid || !mid->valid()) return {};
  bridge_status::source_id src{mid->box, mid->lane, mid->position, 0};
  const char* ord = nullptr;
  if (natsMsgHeader_Get(m, "Shmbox-Ordinal", &ord) == NATS_OK && ord != nullptr && *ord >= '0' && *ord <= '9') {
    char* end = nullptr;
    errno = 0;
    const unsigned long long v = std::strtoull(ord, &end, 10);
    if (errno == 0 && *end == '\0' && v < UINT64_MAX) src.next_ordinal = v + 1;  // anything else: carries none
  }
  return src;
}

// How many messages of the stream were lost before this one: for a source
// lane this import knows (its ordinal expected next), the ordinals skipped;
// otherwise (a source's first message, a message from elsewhere) the stream
// sequences skipped since the last one handled. (An ordinal below the one
// expected: the export's count started over; nothing lost.)
std::uint64_t lost_before(const bridge_status& st, const bridge_status::source_id& src, bool known, std::uint64_t expect, std::uint64_t seq) {
  if (known && expect != 0 && src.next_ordinal != 0) {
    const std::uint64_t ordinal = src.next_ordinal - 1;  // expect: the ordinal the source's next message should carry
    return ordinal > expect ? ordinal - expect : 0;
  }
  const std::uint64_t seen = st.last_stream_seq();
  return seq > seen + 1 ? seq - seen - 1 : 0;
}

}  // namespace

int run_import(import_args a) {
  auto box = shmbox::Box::open(a.into);
  if (!box) return die(shmbox::explain(box.error()));
  const shmbox::box_info info = shmbox::info(*box);
  std::string error;
  auto st = bridge_status::open(a.into, bridge_role::import_, info.mode, error);
  if (!st) return die(error);
  std::uint64_t holder = 0;
  bool read_lock = false;
  if (!st->activate(a.url, a.stream, a.subject, a.durable, true, &holder, &read_lock)) {
    if (read_lock)  // no bridge takes a read lock: someone who may read the segment holds one
      return die("box '" + a.into + "': a process that is not a bridge holds a read lock on " + st->path() +
                 " (a bridge takes a write lock; anyone who may read the file may take a read lock, and while it is held this "
                 "import cannot tell that no other import runs): not started, nothing posted or acked; find it with "
                 "`lslocks | grep shmbox-bridge` and stop it, or keep the box (and so its status) without read permission for others");
    return die("box '" + a.into + "' already has a working import bridge (pid " + std::to_string(holder) +
               " as it saw itself): one import per box; stop it first (shmbox stat " + a.into + " shows it)");
  }
  import_producer producer(*st, *box, info);
  if (!producer.start(error)) return stop(*st, die(error));
  nats_link link;
  if (!connect(link, a, *st, nullptr, true, error)) return stop(*st, die(error));
  // Acks go on a second connection that nats.c's flusher writes in batches
  // (at most a millisecond late; one socket write for many acks, instead of
  // one each on the send-at-once connection that keeps fetches prompt).
  nats_link acks;
  acks.events->quiet = true;
  if (!connect(acks, a, *st, nullptr, false, error)) return stop(*st, die(error));

  jsStreamInfo* si = nullptr;
  jsErrCode jerr = static_cast<jsErrCode>(0);
  natsStatus s = js_GetStreamInfo(&si, link.js, a.stream.c_str(), nullptr, &jerr);
  if (s != NATS_OK)
    return stop(*st, die(describe_stream_error(a, s, jerr) + "; the import reads an existing stream (an export bridge with --create-stream makes one)"));
  if (a.subject.empty()) {
    if (si->Config != nullptr && si->Config->SubjectsLen == 1) a.subject = si->Config->Subjects[0];
  }
  puller pull(a, link, *st);
  pull.acks = acks.nc;
  pull.interest = si->Config != nullptr && si->Config->Retention == js_InterestPolicy;
  pull.workqueue = si->Config != nullptr && si->Config->Retention == js_WorkQueuePolicy;
  jsStreamInfo_Destroy(si);
  if (a.subject.empty()) return stop(*st, die("stream '" + a.stream + "' has several subjects: pass --subject to say which one to import"));

  if (!pull.claim() || !pull.subscribe_retrying()) return stop(*st, die(pull.exit_error));
  pull.stream_identity();
  natsSubscription* const& sub = pull.sub;
  st->activate(a.url, a.stream, a.subject, a.durable);
  std::cout << "ready import " << a.into << " stream=" << a.stream << " durable=" << a.durable << std::endl;

  auto checked = std::chrono::steady_clock::now();
  int rc = kExitOk;
  while (!g_stop.load() && rc == kExitOk) {
    const std::uint32_t room = std::min(free_slots(*box), a.max_batch);
    if (room == 0 || std::chrono::steady_clock::now() < pull.hold_until) {
      std::this_thread::sleep_for(2ms);  // the owner frees slots; no one wakes an outside producer for that
      continue;
    }
    natsMsgList list{};
    s = natsSubscription_Fetch(&list, sub, static_cast<int>(room), 250, &jerr);
    if (s != NATS_OK && s != NATS_TIMEOUT) {
      st->add(bridge_counter::fetch_errors);
      report_error(*st, "fetch from durable '" + a.durable + "' failed: " + nats_error(s) +
                            (jerr != 0 ? " (JetStream error " + std::to_string(jerr) + ")" : ""), false);
    }
    if (s != NATS_OK) {
      if (list.Msgs != nullptr) natsMsgList_Destroy(&list);
      // Nothing came: after an error (at most each second) or quiet for two
      // seconds, look whether the durable and the stream are still there.
      if (connected(link) && every(checked, s == NATS_TIMEOUT ? 2000ms : 1000ms) && !pull.check()) {
        rc = die(pull.exit_error);
        break;
      }
      if (s != NATS_TIMEOUT) std::this_thread::sleep_for(100ms);  // reconnecting; the durable keeps our place
      continue;
    }
    crash_point("import.after_fetch");
    bool refused = false;  // the box refused one: nak the rest of the fetch too (they would be refused)
    bool lost = false;     // deliveries were lost before one of these: the rest is delivered again after resync
    for (int i = 0; i < list.Count; ++i) {
      natsMsg* m = list.Msgs[i];
      std::uint64_t seq = 0;
      jsMsgMetaData* meta = nullptr;
      if (natsMsg_GetMetaData(&meta, m) == NATS_OK) {
        const std::uint64_t cseq = meta->Sequence.Consumer;
        if (cseq > pull.delivered + 1) {  // lost on the way: see puller::delivered
          jsMsgMetaData_Destroy(meta);
          lost = true;
          break;
        }
        pull.delivered = cseq;
        seq = meta->Sequence.Stream;
        if (meta->NumDelivered > 1) st->add(bridge_counter::redeliveries);
        jsMsgMetaData_Destroy(meta);
      }
      if (refused) {
        natsMsg_NakWithDelay(m, a.nak_delay_ms, nullptr);
        st->add(bridge_counter::naks);
        continue;
      }
      const bridge_status::source_id src = source_of(m);
      std::uint64_t done_pos = 0, expect = 0;
      const bool known = src.box != 0 && st->cursor(src.box, src.lane, done_pos, expect);
      bridge_status::post_intent intent{src, seq, 0, producer.stored, producer.refused, st->get(bridge_counter::imported),
                                        st->get(bridge_counter::remote_drops), lost_before(*st, src, known, expect, seq)};
      if ((seq != 0 && seq <= st->posted_seq()) || (known && src.position <= done_pos)) {
        // Posted before (by a killed import, or republished by an export): not again.
        st->begin_post(intent);
        st->finish(intent, false);
        pull.ack(m);
        st->add(bridge_counter::duplicates);
        continue;
      }
      shmbox::post_options po;
      const char* lane = nullptr;
      if (natsMsgHeader_Get(m, "Shmbox-Lane", &lane) == NATS_OK && lane != nullptr) {
        char* end = nullptr;
        const unsigned long v = std::strtoul(lane, &end, 10);
        if (end != lane && *end == '\0' && v < box->lane_count()) po.lane = static_cast<std::uint32_t>(v);
      }
      const auto size = static_cast<std::size_t>(natsMsg_GetDataLength(m));
      intent.lane = po.lane.value_or(box->default_lane());
      st->begin_post(intent);
      crash_point("import.after_intent");
      const shmbox::post_status ps = producer.post(natsMsg_GetData(m), size, po);
      crash_point("import.after_post");
      switch (ps) {
        case shmbox::post_status::stored:
        case shmbox::post_status::stored_evicted:
        case shmbox::post_status::dropped:
        case shmbox::post_status::too_large:
          st->finish(intent, ps != shmbox::post_status::too_large);  // done with: never posted again
          crash_point("import.before_ack");
          if (ps == shmbox::post_status::too_large) {
            std::cerr << "shmbox-bridge: a message of " << size << " bytes is larger than box '" << a.into << "' takes ("
                      << producer.p->max_message_size() << "); terminated in the stream (counted as too_large by the box)\n";
            natsMsg_Term(m, nullptr);
            st->add(bridge_counter::local_drops);
            break;
          }
          pull.ack(m);
          if (ps == shmbox::post_status::dropped) st->add(bridge_counter::local_drops);
          if (ps == shmbox::post_status::stored_evicted) st->add(bridge_counter::local_drops, producer.p->last_evicted());
          break;
        case shmbox::post_status::full:
        case shmbox::post_status::timeout:
        case shmbox::post_status::over_quota:  // the bridge's own producer holds its quota: later
          st->end_post();
          natsMsg_NakWithDelay(m, a.nak_delay_ms, nullptr);
          st->add(bridge_counter::naks);
          refused = true;
          break;
        case shmbox::post_status::error:
          st->end_post();
          natsMsg_Nak(m, nullptr);
          st->add(bridge_counter::naks);
          rc = die(shmbox::explain(producer.p->last_error()));
          refused = true;
          break;
      }
    }
    natsMsgList_Destroy(&list);
    if (lost && !pull.resync()) {
      rc = die(pull.exit_error);
      break;
    }
    if (refused) {
      // Fetch nothing until the nak'ed ones are due again: JetStream hands
      // out due redeliveries before newer messages, so the lane keeps its
      // order (a fetch now would post newer messages ahead of them).
      const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(a.nak_delay_ms) + 20ms;
      while (!g_stop.load() && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(10ms);
    }
  }
  stop(*st, rc);
  if (rc == kExitOk)
    std::cout << "stopped import " << a.into << " imported=" << st->get(bridge_counter::imported) << std::endl;
  return rc;
}
}  // namespace shmbox_bridge
