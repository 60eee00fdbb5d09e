// tests/threads - the ring, wake and lease code with THREADS standing in for
// processes, so that ThreadSanitizer can watch the slot protocol
// (-Db_sanitize=thread; see tests/threads/meson.build). It runs in every build.
//
// Rules that keep TSan's view honest:
//  * every thread works on ONE mapping of the segment: the Box is opened once
//    and every Producer / Owner is made from that Box object (they share its
//    std::shared_ptr<mapped_box>). A second mapping has other addresses, and
//    TSan sees no sharing between mappings at all;
//  * worker threads never synchronise with each other through the test: no
//    doctest assertion in a worker (doctest's assertion bookkeeping uses
//    seq_cst atomics, and a mutex on failure: happens-before edges between
//    workers that would hide races), no mutex, no acquire/release flag. The only cross-thread test flags are
//    relaxed atomics (no happens-before for TSan). Results are collected per
//    thread and checked by the main thread after join();
//  * waits on the box's state go through a separate read-only "observer"
//    mapping (relaxed loads at other addresses: invisible to TSan, so they
//    add no ordering either). Every wait has a deadline; there is no sleep
//    that stands in for synchronisation (sleeps only pace polls of a condition).
//
// What threads cannot stand for: a process is identified by pid + start time,
// so all threads here are ONE process. Two Owner handles cannot coexist
// (Owner::acquire in a second thread is errc::already_owner), give_away to the
// own pid is refused, and a lease cannot expire to an heir of the same process
// (first_live_heir() skips the owner's own key). Ownership changes are
// therefore tested by release (destroying the Owner) + acquire / Heir.
// Heir::enlist takes a box NAME and maps the segment again: the Owner an heir
// gets works on that second mapping, which TSan cannot relate to the
// producers' mapping (that test checks function, not races).
//
// What TSan itself cannot see (GCC 12):
//  * std::atomic_thread_fence is not modelled (g++ says so: -Wtsan). The
//    fences are SYNC POINTs A/B in wake.cpp (they order atomics only: a lost
//    wake-up there would show as a slow test, never as a report) and the
//    transfer-record seqlock in lease.cpp;
//  * a memcpy that GCC expands inline (small or bounded sizes, e.g. the
//    std::string copies of the 64-byte transfer data) is not instrumented.
//    Build with -Dcpp_args=-mstringop-strategy=libcall (x86) to make every
//    such copy a call to memcpy, which TSan intercepts.
#include <doctest/doctest.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "checks.hpp"
#include "segment/layout.hpp"
#include "segment/liveness.hpp"
#include "segment/release_watch.hpp"
#include "segment/segment.hpp"
#include "shmbox/shmbox.hpp"
#include "support.hpp"

using namespace std::chrono_literals;
using shmbox::policy;
using shmbox::post_status;
using shmbox::recv_status;
using clk = std::chrono::steady_clock;

namespace {

constexpr auto rlx = std::memory_order_relaxed;

// Messages per producer thread in the policy runs (SHMBOX_THREADS_N overrides).
int msgs_per_producer() {
  static const int n = [] {
    const char* v = std::getenv("SHMBOX_THREADS_N");
    const int x = v != nullptr ? std::atoi(v) : 0;
    return x > 0 ? x : 10000;
  }();
  return n;
}

// ---------------------------------------------------------------------------
// Payloads: id, seq, lane, then filler bytes derived from them, of a length
// derived from them (16..56 bytes), so that any torn or mixed-up copy shows.
// ---------------------------------------------------------------------------
struct msg_id {
  std::uint32_t id = 0, seq = 0, lane = 0;
};

std::uint8_t filler(std::uint32_t id, std::uint32_t seq, std::size_t i) {
  return static_cast<std::uint8_t>(id * 131u + seq * 17u + i * 7u + 1u);
}

std::string make_payload(std::uint32_t id, std::uint32_t seq, std::uint32_t lane = 0) {
  const std::size_t extra = (seq * 7u + id * 3u) % 41u;
  std::string s(12 + 4 + extra, '\0');
  const std::uint32_t n = static_cast<std::uint32_t>(extra);
  std::memcpy(s.data(), &id, 4);
  std::memcpy(s.data() + 4, &seq, 4);
  std::memcpy(s.data() + 8, &lane, 4);
  std::memcpy(s.data() + 12, &n, 4);
  for (std::size_t i = 0; i < extra; ++i) s[16 + i] = static_cast<char>(filler(id, seq, i));
  return s;
}

std::optional<msg_id> parse_payload(std::string_view s) {
  if (s.size() < 16) return std::nullopt;
  msg_id m;
  std::uint32_t n = 0;
  std::memcpy(&m.id, s.data(), 4);
  std::memcpy(&m.seq, s.data() + 4, 4);
  std::memcpy(&m.lane, s.data() + 8, 4);
  std::memcpy(&n, s.data() + 12, 4);
  if (s.size() != 16 + std::size_t{n} || n != (m.seq * 7u + m.id * 3u) % 41u) return std::nullopt;
  for (std::size_t i = 0; i < n; ++i)
    if (static_cast<std::uint8_t>(s[16 + i]) != filler(m.id, m.seq, i)) return std::nullopt;
  return m;
}

// ---------------------------------------------------------------------------
// What one owner thread saw.
// ---------------------------------------------------------------------------
struct got {
  std::uint32_t id, seq, lane;
  bool redelivered;
};

struct owner_log {
  std::vector<got> msgs;          // in delivery order
  std::vector<got> uncommitted;   // read() and never committed (handed to the next owner)
  std::uint64_t bad_payload = 0;  // torn, mixed up or wrong length
  std::uint64_t lane_mismatch = 0;     // message::lane differs from the lane in the payload
  std::uint64_t lane_order_breaks = 0; // within one call, a lane after a higher one
  std::uint64_t errors = 0;       // unexpected statuses
  std::uint64_t commit_failures = 0;
  std::string first_error;

  void error(std::string what) {
    if (errors++ == 0) first_error = std::move(what);
  }
  // One call's worth of messages (lane order is checked within the call).
  void add(std::string_view data, bool redelivered, std::uint32_t lane, std::uint32_t& last_lane,
           std::vector<got>* into = nullptr) {
    const auto m = parse_payload(data);
    if (!m) {
      ++bad_payload;
      return;
    }
    if (m->lane != lane) ++lane_mismatch;
    if (lane < last_lane) ++lane_order_breaks;
    last_lane = lane;
    (into != nullptr ? *into : msgs).push_back({m->id, m->seq, lane, redelivered});
  }
  void add_all(const std::vector<shmbox::message>& v) {
    std::uint32_t last = 0;
    for (const auto& m : v) add(m.data, m.redelivered, m.lane, last);
  }
  void add_all(const shmbox::batch& b, std::vector<got>* into = nullptr) {
    std::uint32_t last = 0;
    for (std::size_t i = 0; i < b.size(); ++i) add(b[i], b.redelivered(i), b.lane(i), last, into);
  }
};

struct producer_log {
  std::vector<std::uint32_t> stored;  // seqs whose post stored the message
  std::uint64_t post_calls = 0;
  std::uint64_t evicting = 0;  // stored_evicted
  std::uint64_t not_stored = 0;
  std::uint64_t aborted = 0;  // loans given back (each counts as posted)
  std::uint64_t errors = 0;
  std::string first_error;
  void error(std::string what) {
    if (errors++ == 0) first_error = std::move(what);
  }
};

// A read-only second mapping of the box, to watch its words without adding
// happens-before edges between the threads under test (other addresses).
struct observer {
  std::shared_ptr<shmbox::detail::mapped_box> m;
  explicit observer(const std::string& name) {
    auto r = shmbox::detail::open_segment(name, true);
    REQUIRE(r);
    m = *r;
  }
  std::uint64_t tail(std::uint32_t lane = 0) const { return m->lanes[lane].hdr->tail.load(rlx); }
  std::uint64_t head(std::uint32_t lane = 0) const { return m->lanes[lane].hdr->head.load(rlx); }
  // The owner has taken r messages and sleeps (or is about to) with its
  // sleeping bit set. (The bit alone is not enough: a producer's claim keeps
  // it, so it is still set just after the previous round's post.)
  bool owner_asleep_after(std::uint64_t r) const { return tail() == ((r << 1) | 1) && head() == r; }
  std::uint32_t space_wanted(std::uint32_t lane = 0) const { return m->lanes[lane].hdr->space_wanted.load(rlx); }
  std::uint64_t space_wake_calls(std::uint32_t lane = 0) const {
    return m->lanes[lane].hdr->space_wake_calls.load(rlx);
  }
  std::uint64_t wake_calls() const { return m->owner()->wake_calls.load(rlx); }
  std::uint32_t state() const { return static_cast<std::uint32_t>(shmbox::detail::state_mode(m->owner()->state.load(rlx))); }
};

// SHMBOX_THREADS_VERBOSE=1: each test prints what happened (drops, wake-ups),
// to see that the threads really contended.
bool verbose() {
  static const bool v = std::getenv("SHMBOX_THREADS_VERBOSE") != nullptr;
  return v;
}

// Polls `pred` until it holds or `timeout` passes (the sleep only paces the polls).
template <class Pred>
bool poll_until(Pred pred, std::chrono::milliseconds timeout) {
  const auto end = clk::now() + timeout;
  while (!pred()) {
    if (clk::now() >= end) return false;
    std::this_thread::sleep_for(50us);
  }
  return true;
}

// Best effort: waits (up to 2 s) until thread `tid` sleeps in the kernel
// (/proc state 'S'), so that a post after owner_asleep_after() finds the owner
// inside futex_wait / poll rather than on its way there. Returns whether it did.
bool wait_thread_sleeping(const std::atomic<pid_t>& tid) {
  return poll_until([&] { const pid_t t = tid.load(rlx); return t != 0 && shmtest::process_state(t) == 'S'; }, 2000ms);
}

// Drains what is left, from the main thread after the workers joined.
void drain(shmbox::Owner& owner, owner_log& log) {
  for (int i = 0; i < 100000; ++i) {
    std::vector<shmbox::message> v;
    const recv_status st = owner.receive_batch(v, {.max = 1024, .timeout = 0ns});
    if (st != recv_status::ok) {
      if (st != recv_status::timeout) log.error("drain: " + std::string(to_string(st)));
      return;
    }
    log.add_all(v);
  }
}

// Per producer: the delivered seqs, in delivery order.
std::map<std::uint32_t, std::vector<std::uint32_t>> by_producer(const std::vector<got>& msgs) {
  std::map<std::uint32_t, std::vector<std::uint32_t>> out;
  for (const got& g : msgs) out[g.id].push_back(g.seq);
  return out;
}

bool strictly_increasing(const std::vector<std::uint32_t>& v) {
  return std::adjacent_find(v.begin(), v.end(), [](auto a, auto b) { return a >= b; }) == v.end();
}

bool no_duplicates(std::vector<std::uint32_t> v) {
  std::sort(v.begin(), v.end());
  return std::adjacent_find(v.begin(), v.end()) == v.end();
}

bool is_subset(std::vector<std::uint32_t> sub, std::vector<std::uint32_t> all) {
  std::sort(sub.begin(), sub.end());
  std::sort(all.begin(), all.end());
  return std::includes(all.begin(), all.end(), sub.begin(), sub.end());
}

void check_owner_log(const owner_log& log) {
  INFO("first owner error: " << log.first_error);
  CHECK(log.errors == 0);
  CHECK(log.bad_payload == 0);
  CHECK(log.lane_mismatch == 0);
  CHECK(log.lane_order_breaks == 0);
  CHECK(log.commit_failures == 0);
}

void check_producer_logs(const std::vector<producer_log>& logs) {
  for (std::size_t i = 0; i < logs.size(); ++i) {
    INFO("producer " << i << ": " << logs[i].first_error);
    CHECK(logs[i].errors == 0);
  }
}

// A box for the tests: 64-byte slots (payloads are 16..56 bytes), room for
// the producer threads, and a block timeout no test should ever reach.
// n producer handles on `box`, one per producer thread.
std::vector<shmbox::Producer> attach_producers(const shmbox::Box& box, std::uint32_t n) {
  std::vector<shmbox::Producer> producers;
  for (std::uint32_t i = 0; i < n; ++i) {
    auto p = shmbox::Producer::attach(box);
    REQUIRE(p);
    producers.push_back(std::move(*p));
  }
  return producers;
}

shmbox::options small_box(policy pol, std::uint32_t cap) {
  shmbox::options o;
  o.capacity = cap;
  o.slot_size = 64;
  o.overflow = pol;
  o.max_producers = 8;
  o.block_timeout = 30s;
  return o;
}

// How a producer thread posts (run_policy mixes them).
enum class post_style { copy, loan, batch };

// A zero-copy post: a loan, written in place and committed. Every 5th
// message first takes a loan, scribbles over it and aborts it.
post_status loan_post(shmbox::Producer& p, producer_log& log, std::uint32_t seq, std::uint32_t lane,
                      std::string_view msg) {
  if (seq % 5 == 0) {
    shmbox::slot_loan a = p.loan({.lane = lane, .timeout = 30s});
    if (a) {
      std::memset(a.data(), 0x5A, a.capacity());
      a.abort();
      ++log.aborted;
      ++log.post_calls;
    } else if (a.status() != post_status::full && a.status() != post_status::dropped) {
      log.error("loan: " + std::string(to_string(a.status())));
    } else {
      ++log.post_calls;  // refused: counted like a post
    }
  }
  shmbox::slot_loan l = p.loan({.lane = lane, .timeout = 30s});
  if (!l) return l.status();
  if (l.capacity() < msg.size()) return post_status::too_large;
  std::memcpy(l.data(), msg.data(), msg.size());
  return l.commit(msg.size());
}

// One post; reject retries on full (yielding) so that every message gets in.
void post_one(shmbox::Producer& p, producer_log& log, std::uint32_t id, std::uint32_t seq, policy pol,
              clk::time_point deadline, std::uint32_t lane = 0, post_style style = post_style::copy) {
  const std::string msg = make_payload(id, seq, lane);
  for (;;) {
    ++log.post_calls;
    const post_status st =
        style == post_style::loan ? loan_post(p, log, seq, lane, msg) : p.post(msg.data(), msg.size(), {.lane = lane});
    if (shmbox::is_stored(st)) {
      log.stored.push_back(seq);
      if (st == post_status::stored_evicted) ++log.evicting;
      return;
    }
    if (st == post_status::full && pol == policy::reject && clk::now() < deadline) {
      std::this_thread::yield();
      continue;
    }
    ++log.not_stored;
    const bool expected = (st == post_status::full && pol == policy::reject) ||
                          (st == post_status::dropped && pol == policy::drop_newest);
    if (!expected)
      log.error("post " + std::to_string(seq) + ": " + std::string(to_string(st)) + " (" +
                shmbox::explain(p.last_error()) + ")");
    return;
  }
}

// Messages first..first+n-1 through post_batch: what it stored is a prefix;
// a reject refusal is retried (in order), a drop_newest drop is skipped.
void post_chunk(shmbox::Producer& p, producer_log& log, std::uint32_t id, std::uint32_t first, std::uint32_t n,
                policy pol, clk::time_point deadline) {
  std::vector<std::string> msgs;
  for (std::uint32_t s = first; s < first + n; ++s) msgs.push_back(make_payload(id, s, 0));
  const std::vector<std::string_view> views(msgs.begin(), msgs.end());
  std::size_t i = 0;
  while (i < n) {
    post_status why = post_status::error;
    const std::size_t k = p.post_batch(std::span<const std::string_view>(views).subspan(i), {.timeout = 30s}, &why);
    for (std::size_t j = i; j < i + k; ++j) log.stored.push_back(first + static_cast<std::uint32_t>(j));
    log.post_calls += k;
    i += k;
    if (i == n) return;
    ++log.post_calls;  // the one that stopped the batch was tried
    if (why == post_status::full && pol == policy::reject && clk::now() < deadline) {
      std::this_thread::yield();
      continue;
    }
    ++log.not_stored;
    if (!(why == post_status::full && pol == policy::reject) && !(why == post_status::dropped && pol == policy::drop_newest))
      log.error("post_batch at " + std::to_string(first + i) + ": " + std::string(to_string(why)));
    ++i;  // skipped
  }
}

// ---------------------------------------------------------------------------
// 1. Every policy: 4 producer threads, one owner thread.
// ---------------------------------------------------------------------------
enum class recv_mode { batch, two_phase };

void owner_loop(shmbox::Owner& owner, recv_mode mode, const std::atomic<int>& producing, owner_log& log,
                clk::time_point deadline) {
  unsigned round = 0;
  shmbox::batch b;
  std::vector<shmbox::message> v;
  while (clk::now() < deadline) {
    recv_status st;
    if (mode == recv_mode::two_phase) {
      b.clear();
      st = owner.read(b, {.max = 16, .timeout = 20ms});
      if (st == recv_status::ok) {
        log.add_all(b);
        std::size_t lost = 0;
        if (owner.commit(&lost) != recv_status::ok) ++log.commit_failures;
      }
    } else {
      switch (round++ % 4) {
        case 3: {  // zero-copy: the views point into the segment
          std::uint32_t last = 0;
          st = owner.receive_in_place([&](const shmbox::message_view& m) { log.add(m.data, m.redelivered, m.lane, last); }, {.max = 16, .timeout = 20ms});
          break;
        }
        case 0:
          v.clear();
          st = owner.receive_batch(v, {.max = 16, .timeout = 20ms});
          if (st == recv_status::ok) log.add_all(v);
          break;
        case 1:
          b.clear();
          st = owner.receive_batch(b, {.max = 16, .timeout = 20ms});
          if (st == recv_status::ok) log.add_all(b);
          break;
        default: {
          shmbox::message m;
          st = owner.receive(m, {.timeout = 20ms});
          std::uint32_t last = 0;
          if (st == recv_status::ok) log.add(m.data, m.redelivered, m.lane, last);
          break;
        }
      }
    }
    if (st == recv_status::ok) continue;
    if (st != recv_status::timeout) {
      log.error("receive: " + std::string(to_string(st)) + " (" + shmbox::explain(owner.last_error()) + ")");
      return;
    }
    if (producing.load(rlx) == 0) return;  // the main thread drains whatever is left
  }
  log.error("owner loop: deadline passed");
}

void run_policy(policy pol, recv_mode mode, std::chrono::milliseconds lease = 0ms) {
  constexpr std::uint32_t P = 4;
  const auto N = static_cast<std::uint32_t>(msgs_per_producer());
  const std::string what = std::string(to_string(pol)) + (mode == recv_mode::batch ? ", receive_batch" : ", read/commit");
  INFO("policy " << what << ", lease " << lease.count() << " ms, " << N << " messages per producer");
  shmtest::segment_guard g(shmtest::unique_name("thr-" + std::string(to_string(pol))));
  shmbox::options o;
  o.capacity = 64;
  o.slot_size = 64;
  o.overflow = pol;
  o.max_producers = 8;
  o.block_timeout = 30s;
  o.lease = lease;
  auto box = shmbox::Box::create(g.name, o);
  REQUIRE(box);
  std::vector<shmbox::Producer> producers = attach_producers(*box, P);
  auto owner = shmbox::Owner::acquire(*box);
  REQUIRE(owner);
  observer obs(g.name);

  std::vector<producer_log> plogs(P);
  owner_log olog;
  std::atomic<int> producing{static_cast<int>(P)};
  std::atomic<bool> inspecting{true};
  std::uint64_t inspections = 0;
  const auto deadline = clk::now() + 120s;
  std::thread ot([&] { owner_loop(*owner, mode, producing, olog, deadline); });
  // An inspector (what `shmbox stat` does from another process): lock-free
  // snapshots of the same mapping while everyone works.
  std::thread it([&] {
    while (inspecting.load(rlx) && clk::now() < deadline) {
      const shmbox::box_info info = shmbox::info(*box);
      (void)box->depth_approx();
      inspections += info.capacity != 0 ? 1 : 0;
      std::this_thread::sleep_for(2ms);
    }
  });
  std::vector<std::thread> pts;
  // Producers 0 and 1 copy, 2 posts through loans (aborting some), 3 in batches of 8.
  for (std::uint32_t i = 0; i < P; ++i)
    pts.emplace_back([&, i] {
      if (i == 3) {
        for (std::uint32_t s = 0; s < N; s += 8) post_chunk(producers[i], plogs[i], i, s, std::min(8u, N - s), pol, deadline);
      } else {
        for (std::uint32_t s = 0; s < N; ++s)
          post_one(producers[i], plogs[i], i, s, pol, deadline, 0, i == 2 ? post_style::loan : post_style::copy);
      }
      producing.fetch_sub(1, rlx);
    });
  for (auto& t : pts) t.join();
  ot.join();
  inspecting.store(false, rlx);
  it.join();
  drain(*owner, olog);

  check_owner_log(olog);
  check_producer_logs(plogs);
  CHECK(inspections > 0);
  const auto delivered = by_producer(olog.msgs);
  std::uint64_t stored_total = 0, calls = 0, aborted = 0;
  for (std::uint32_t i = 0; i < P; ++i) {
    INFO("producer " << i);
    const std::vector<std::uint32_t>& stored = plogs[i].stored;
    stored_total += stored.size() + plogs[i].aborted;
    calls += plogs[i].post_calls;
    aborted += plogs[i].aborted;
    const auto it2 = delivered.find(i);
    const std::vector<std::uint32_t> mine = it2 == delivered.end() ? std::vector<std::uint32_t>{} : it2->second;
    CHECK(no_duplicates(mine));
    CHECK(is_subset(mine, stored));
    if (pol != policy::lifo) CHECK(strictly_increasing(mine));  // per-producer FIFO
    switch (pol) {
      case policy::reject:  // retried until stored
      case policy::block:   // waited for space
        CHECK(stored.size() == N);
        CHECK(mine.size() == N);
        break;
      case policy::drop_newest:  // refused ones never entered; stored ones are never dropped
        CHECK(mine == stored);
        break;
      case policy::drop_oldest:
      case policy::lifo:  // stored ones may be evicted / replaced
        break;
    }
  }
  for (const got& m : olog.msgs) CHECK_FALSE(m.redelivered);
  const shmbox::counters c = box->read_counters();
  CHECK(c.posted == calls);
  CHECK(c.stored == stored_total);
  CHECK(c.aborted == aborted);
  if (pol != policy::reject && pol != policy::drop_newest) CHECK(aborted > 0);  // (those may refuse every abort loan)
  CHECK(c.delivered == olog.msgs.size());
  CHECK(c.abandoned == 0);
  CHECK(c.redelivered == 0);
  CHECK(c.timeouts == 0);
  if (pol == policy::drop_oldest) CHECK(c.dropped_oldest == stored_total - aborted - olog.msgs.size());
  if (pol == policy::lifo) CHECK(c.dropped_newest == stored_total - aborted - olog.msgs.size());
  CHECK(shmbox::info(*box).depth == 0);
  shmtest::check_invariant(*box);
  if (verbose())
    MESSAGE(what << ", lease " << lease.count()
                           << ": posted " << c.posted << " stored " << c.stored << " delivered " << c.delivered
                           << " rejected " << c.rejected << " dropped_newest " << c.dropped_newest << " dropped_oldest "
                           << c.dropped_oldest << " owner futex wakes " << obs.wake_calls() << " space wakes "
                           << obs.space_wake_calls() << " inspections " << inspections);
}

TEST_CASE("threads: every policy, 4 producer threads and an owner thread (receive_batch and read/commit)") {
  for (const policy pol : {policy::reject, policy::drop_newest, policy::drop_oldest, policy::lifo, policy::block})
    for (const recv_mode mode : {recv_mode::batch, recv_mode::two_phase}) {
      CAPTURE(shmbox::to_string(pol));
      CAPTURE(mode == recv_mode::batch ? "receive_batch" : "read/commit");
      run_policy(pol, mode);
    }
}
TEST_CASE("threads: lease box (fenced take/commit path), 4 producer threads and an owner thread") {
  SUBCASE("block, receive_batch") { run_policy(policy::block, recv_mode::batch, 10s); }
  SUBCASE("drop_oldest, receive_batch") { run_policy(policy::drop_oldest, recv_mode::batch, 10s); }
  SUBCASE("lifo, read/commit") { run_policy(policy::lifo, recv_mode::two_phase, 10s); }
}

// Evicting (drop_oldest) and replacing (lifo) producers copy the message they
// remove out of its slot while they hold it, and forward it to the dead-letter
// box: that copy is a producer reading another producer's payload, ordered by
// the evicting / replacing CAS. (Each producer posts its dead letters through
// a mapping of its own, Producer::attach(name): that box is checked for
// function only.)
void run_dead_letters(policy pol) {
  constexpr std::uint32_t P = 4;
  const std::uint32_t N = std::max<std::uint32_t>(200, static_cast<std::uint32_t>(msgs_per_producer()) / 4);
  INFO("policy " << std::string(to_string(pol)) << ", " << N << " messages per producer");
  shmtest::segment_guard gd(shmtest::unique_name("thr-dead"));
  shmtest::segment_guard g(shmtest::unique_name("thr-dl"));
  shmbox::options od = small_box(policy::reject, 1);
  while (od.capacity < P * N) od.capacity <<= 1;  // holds every message: nothing is refused there
  od.slot_size = 160;
  auto dead = shmbox::Box::create(gd.name, od);
  REQUIRE(dead);
  shmbox::options o = small_box(pol, 32);
  o.dead_letters = gd.name;
  auto box = shmbox::Box::create(g.name, o);
  REQUIRE(box);
  std::vector<shmbox::Producer> producers = attach_producers(*box, P);
  auto owner = shmbox::Owner::acquire(*box);
  REQUIRE(owner);
  const auto deadline = clk::now() + 120s;
  std::atomic<int> producing{static_cast<int>(P)};
  owner_log olog;
  std::thread ot([&] { owner_loop(*owner, recv_mode::batch, producing, olog, deadline); });
  std::vector<producer_log> plogs(P);
  std::vector<std::thread> pts;
  for (std::uint32_t i = 0; i < P; ++i)
    pts.emplace_back([&, i] {
      for (std::uint32_t s = 0; s < N; ++s) post_one(producers[i], plogs[i], i, s, pol, deadline);
      producing.fetch_sub(1, rlx);
    });
  for (auto& t : pts) t.join();
  ot.join();
  drain(*owner, olog);
  check_owner_log(olog);
  check_producer_logs(plogs);

  // The dead letters: "[<box> <reason>] <message>".
  auto dead_owner = shmbox::Owner::acquire(*dead);
  REQUIRE(dead_owner);
  const std::string prefix = "[" + g.name + (pol == policy::lifo ? " replaced] " : " dropped-oldest] ");
  owner_log dlog;
  std::uint64_t bad_prefix = 0;
  for (;;) {
    std::vector<shmbox::message> v;
    if (dead_owner->receive_batch(v, {.max = 4096, .timeout = 0ns}) != recv_status::ok) break;
    for (auto& m : v) {
      if (m.data.compare(0, prefix.size(), prefix) != 0) {
        ++bad_prefix;
        continue;
      }
      m.data.erase(0, prefix.size());
    }
    dlog.add_all(v);
  }
  check_owner_log(dlog);
  CHECK(bad_prefix == 0);
  // Every message was stored (both policies store every post), and ends up
  // exactly once: delivered, or evicted/replaced and dead-lettered.
  std::vector<got> all = olog.msgs;
  all.insert(all.end(), dlog.msgs.begin(), dlog.msgs.end());
  for (const auto& [id, seqs] : by_producer(all)) {
    INFO("producer " << id);
    CHECK(seqs.size() == N);
    CHECK(no_duplicates(seqs));
  }
  CHECK(all.size() == std::size_t{P} * N);
  const shmbox::counters c = box->read_counters();
  CHECK(c.dead_lettered == dlog.msgs.size());
  CHECK(c.dead_letter_failed == 0);
  CHECK(c.dead_lettered == (pol == policy::lifo ? c.dropped_newest : c.dropped_oldest));
  shmtest::check_invariant(*box);
  if (verbose()) MESSAGE(std::string(to_string(pol)) << ": delivered " << olog.msgs.size() << ", dead-lettered " << dlog.msgs.size());
}

TEST_CASE("threads: drop_oldest evictors and lifo replacers copy out what they remove (dead letters)") {
  SUBCASE("drop_oldest") { run_dead_letters(policy::drop_oldest); }
  SUBCASE("lifo") { run_dead_letters(policy::lifo); }
}

// ---------------------------------------------------------------------------
// 2. Wake-ups.
// ---------------------------------------------------------------------------
TEST_CASE("threads: an owner sleeping in receive (futex) is woken by producer threads") {
  shmtest::segment_guard g(shmtest::unique_name("thr-wake"));
  auto box = shmbox::Box::create(g.name, small_box(policy::reject, 16));
  REQUIRE(box);
  observer obs(g.name);
  constexpr std::uint32_t P = 3, K = 24;
  std::vector<shmbox::Producer> producers = attach_producers(*box, P);
  auto owner = shmbox::Owner::acquire(*box);
  REQUIRE(owner);
  const std::uint64_t wakes_before = obs.wake_calls();
  owner_log olog;
  std::vector<double> waited_ms;
  std::atomic<pid_t> owner_tid{0};
  std::thread ot([&] {
    owner_tid.store(::gettid(), rlx);
    for (std::uint32_t r = 0; r < K; ++r) {
      shmbox::message m;
      const auto t0 = clk::now();
      const recv_status st = owner->receive(m, {.timeout = 10s});
      waited_ms.push_back(std::chrono::duration<double, std::milli>(clk::now() - t0).count());
      if (st != recv_status::ok) {
        olog.error("round " + std::to_string(r) + ": " + std::string(to_string(st)));
        return;
      }
      if (waited_ms.back() > 5000.0) {  // found at the deadline, not woken: stop here
        olog.error("round " + std::to_string(r) + ": not woken (" + std::to_string(waited_ms.back()) + " ms)");
        return;
      }
      std::uint32_t last = 0;
      olog.add(m.data, m.redelivered, m.lane, last);
    }
  });
  std::vector<producer_log> plogs(P);
  std::vector<std::uint32_t> asleep(P, 0);
  std::vector<std::thread> pts;
  for (std::uint32_t j = 0; j < P; ++j)
    pts.emplace_back([&, j] {
      for (std::uint32_t r = j; r < K; r += P) {
        // Round r: r messages posted and all taken, and the owner's sleeping
        // bit set (it has armed the futex sleep): now post.
        if (!poll_until([&] { return obs.owner_asleep_after(r); }, 10s)) {
          plogs[j].error("round " + std::to_string(r) + ": the owner never went to sleep (tail " +
                         std::to_string(obs.tail()) + ")");
          return;
        }
        asleep[j] += wait_thread_sleeping(owner_tid) ? 1 : 0;
        post_one(producers[j], plogs[j], j, r, policy::reject, clk::now());
      }
    });
  for (auto& t : pts) t.join();
  ot.join();
  if (verbose()) {
    std::string waits;
    for (const double w : waited_ms) waits += std::to_string(static_cast<int>(w)) + " ";
    MESSAGE("receive waits (ms): " << waits << "; futex wakes " << obs.wake_calls() - wakes_before
                                     << "; rounds with the owner seen asleep " << asleep[0] + asleep[1] + asleep[2]);
  }
  check_owner_log(olog);
  check_producer_logs(plogs);
  REQUIRE(olog.msgs.size() == K);
  for (std::uint32_t r = 0; r < K; ++r) {
    CHECK(olog.msgs[r].seq == r);
    CHECK(olog.msgs[r].id == r % P);
  }
  const double worst = *std::max_element(waited_ms.begin(), waited_ms.end());
  INFO("longest receive: " << worst << " ms; futex wakes: " << obs.wake_calls() - wakes_before);
  CHECK(worst < 5000.0);                         // woken, not timed out
  CHECK(obs.wake_calls() - wakes_before >= K / 2);  // by the futex: each post saw the sleeping bit
                                                     // (but for a rare spurious futex return)
  CHECK(obs.wake_calls() - wakes_before <= K);
  shmtest::check_invariant(*box);
}

TEST_CASE("threads: block producers sleeping for space are woken by the owner thread") {
  shmtest::segment_guard g(shmtest::unique_name("thr-space"));
  auto box = shmbox::Box::create(g.name, small_box(policy::block, 8));
  REQUIRE(box);
  observer obs(g.name);
  constexpr std::uint32_t P = 3;
  const std::uint32_t M = std::max<std::uint32_t>(60, static_cast<std::uint32_t>(msgs_per_producer()) / 8);
  std::vector<shmbox::Producer> producers = attach_producers(*box, P);
  auto owner = shmbox::Owner::acquire(*box);
  REQUIRE(owner);
  const auto deadline = clk::now() + 60s;
  owner_log olog;
  std::uint64_t saw_sleepers = 0;
  std::thread ot([&] {
    std::vector<shmbox::message> v;
    while (olog.msgs.size() < std::size_t{P} * M && clk::now() < deadline) {
      // Take only once a producer sleeps for space (or everything is posted).
      if (poll_until([&] { return obs.space_wanted() == 1 || (obs.tail() >> 1) == std::uint64_t{P} * M; }, 10s) &&
          obs.space_wanted() == 1)
        ++saw_sleepers;
      v.clear();
      const recv_status st = owner->receive_batch(v, {.max = 4, .timeout = 1s});
      if (st == recv_status::ok) {
        olog.add_all(v);
      } else if (st != recv_status::timeout) {
        olog.error(std::string(to_string(st)));
        return;
      }
    }
  });
  std::vector<producer_log> plogs(P);
  std::vector<std::thread> pts;
  for (std::uint32_t i = 0; i < P; ++i)
    pts.emplace_back([&, i] {
      for (std::uint32_t s = 0; s < M; ++s) post_one(producers[i], plogs[i], i, s, policy::block, deadline);
    });
  for (auto& t : pts) t.join();
  ot.join();
  drain(*owner, olog);
  check_owner_log(olog);
  check_producer_logs(plogs);
  CHECK(olog.msgs.size() == std::size_t{P} * M);
  for (const auto& [id, seqs] : by_producer(olog.msgs)) {
    INFO("producer " << id);
    CHECK(seqs.size() == M);
    CHECK(strictly_increasing(seqs));
  }
  INFO("owner saw sleeping producers " << saw_sleepers << " times; space futex wakes " << obs.space_wake_calls());
  CHECK(saw_sleepers > 0);
  CHECK(obs.space_wake_calls() > 0);
  CHECK(box->read_counters().timeouts == 0);
  shmtest::check_invariant(*box);
}

// Rounds of notify (even) and active (odd) fired by producer threads; with
// `use_fd` the owner waits in poll() on notify_fd() instead of in wait().
void run_states(bool use_fd) {
  shmtest::segment_guard g(shmtest::unique_name(use_fd ? "thr-fd" : "thr-states"));
  auto box = shmbox::Box::create(g.name, small_box(policy::reject, 16));
  REQUIRE(box);
  observer obs(g.name);
  constexpr std::uint32_t P = 2, K = 16;
  std::vector<shmbox::Producer> producers = attach_producers(*box, P);
  auto owner = shmbox::Owner::acquire(*box);
  REQUIRE(owner);
  owner_log olog;
  std::uint64_t filter_calls = 0;
  std::atomic<pid_t> owner_tid{0};
  std::thread ot([&] {
    owner_tid.store(::gettid(), rlx);
    const int fd = use_fd ? owner->notify_fd() : -1;
    if (use_fd && fd < 0) {
      olog.error("notify_fd: " + shmbox::explain(owner->last_error()));
      return;
    }
    for (std::uint32_t r = 0; r < K; ++r) {
      const bool notify = r % 2 == 0;
      if (notify) {
        owner->notify();
      } else {
        owner->active([&](std::string& m) {
          ++filter_calls;
          m += '!';  // rewritten on the way out
          return shmbox::filter_verdict::deliver;
        });
      }
      shmbox::delivery d;
      shmbox::owner_event ev;
      const auto t0 = clk::now();
      if (use_fd) {
        pollfd p{fd, POLLIN, 0};
        const int n = ::poll(&p, 1, 10000);
        if (n != 1 || (p.revents & POLLIN) == 0) {
          olog.error("round " + std::to_string(r) + ": notify_fd not readable");
          return;
        }
        ev = owner->wait(d, 0ns);
      } else {
        ev = owner->wait(d, 10s);
      }
      const shmbox::owner_event want = notify ? shmbox::owner_event::notified : shmbox::owner_event::delivered;
      if (ev != want) {
        olog.error("round " + std::to_string(r) + ": wait returned " + std::to_string(static_cast<int>(ev)));
        return;
      }
      if (clk::now() - t0 > 5s) {  // fired at the deadline (wait() looks once more), not woken
        olog.error("round " + std::to_string(r) + ": not woken");
        return;
      }
      if (owner->mode() != shmbox::owner_mode::passive) olog.error("round " + std::to_string(r) + ": not passive");
      if (notify) {
        std::vector<shmbox::message> v;
        if (owner->receive_batch(v, {.max = 16, .timeout = 5s}) != recv_status::ok || v.size() != 1) {
          olog.error("round " + std::to_string(r) + ": nothing to receive after notified");
          return;
        }
        olog.add_all(v);
      } else {
        if (d.count != 1 || d.messages.size() != 1 || d.messages[0].empty() || d.messages[0].back() != '!') {
          olog.error("round " + std::to_string(r) + ": delivery of " + std::to_string(d.count));
          return;
        }
        std::uint32_t last = 0;
        const std::string_view body = d.messages[0];
        olog.add(body.substr(0, body.size() - 1), d.messages.redelivered(0), d.messages.lane(0), last);
      }
    }
  });
  std::vector<producer_log> plogs(P);
  std::vector<std::uint32_t> asleep(P, 0);
  std::vector<std::thread> pts;
  for (std::uint32_t j = 0; j < P; ++j)
    pts.emplace_back([&, j] {
      for (std::uint32_t r = j; r < K; r += P) {
        const auto armed = static_cast<std::uint32_t>(r % 2 == 0 ? shmbox::detail::owner_state::notify
                                                                 : shmbox::detail::owner_state::active);
        // Round r: r messages taken, the state armed, the sleeping bit set.
        if (!poll_until([&] { return obs.owner_asleep_after(r) && obs.state() == armed; }, 10s)) {
          plogs[j].error("round " + std::to_string(r) + ": the owner never armed (tail " + std::to_string(obs.tail()) +
                         ", state " + std::to_string(obs.state()) + ")");
          return;
        }
        asleep[j] += wait_thread_sleeping(owner_tid) ? 1 : 0;  // in wait()'s futex_wait, or in poll()
        post_one(producers[j], plogs[j], j, r, policy::reject, clk::now());
      }
    });
  for (auto& t : pts) t.join();
  ot.join();
  check_owner_log(olog);
  check_producer_logs(plogs);
  REQUIRE(olog.msgs.size() == K);
  for (std::uint32_t r = 0; r < K; ++r) CHECK(olog.msgs[r].seq == r);
  CHECK(filter_calls == K / 2);
  if (verbose()) MESSAGE("rounds with the owner seen asleep: " << asleep[0] + asleep[1] << " of " << K);
  shmtest::check_invariant(*box);
}

TEST_CASE("threads: notify and active states fire through wait() when a producer thread posts") { run_states(false); }

TEST_CASE("threads: notify_fd becomes readable (poll) when a producer thread posts") { run_states(true); }

// ---------------------------------------------------------------------------
// 3. Lanes.
// ---------------------------------------------------------------------------
TEST_CASE("threads: lanes from several producer threads; lane 0 first in every call; FIFO per lane") {
  shmtest::segment_guard g(shmtest::unique_name("thr-lanes"));
  shmbox::options o = small_box(policy::block, 32);
  o.lanes = {{.capacity = 16}, {}, {.overflow = policy::drop_oldest}};
  auto box = shmbox::Box::create(g.name, o);
  REQUIRE(box);
  constexpr std::uint32_t P = 3;
  const std::uint32_t N = std::max<std::uint32_t>(90, static_cast<std::uint32_t>(msgs_per_producer()) / 2);
  std::vector<shmbox::Producer> producers = attach_producers(*box, P);
  auto owner = shmbox::Owner::acquire(*box);
  REQUIRE(owner);

  SUBCASE("concurrent posting and receiving") {
    const auto deadline = clk::now() + 60s;
    std::atomic<int> producing{static_cast<int>(P)};
    owner_log olog;
    std::thread ot([&] { owner_loop(*owner, recv_mode::batch, producing, olog, deadline); });
    std::vector<producer_log> plogs(P);
    std::vector<std::thread> pts;
    for (std::uint32_t i = 0; i < P; ++i)
      pts.emplace_back([&, i] {
        for (std::uint32_t s = 0; s < N; ++s) post_one(producers[i], plogs[i], i, s, policy::block, deadline, (s + i) % 3);
        producing.fetch_sub(1, rlx);
      });
    for (auto& t : pts) t.join();
    ot.join();
    drain(*owner, olog);
    check_owner_log(olog);
    check_producer_logs(plogs);
    std::map<std::pair<std::uint32_t, std::uint32_t>, std::vector<std::uint32_t>> per;  // (producer, lane) -> seqs
    for (const got& m : olog.msgs) per[{m.id, m.lane}].push_back(m.seq);
    std::uint64_t lossless = 0;
    for (const auto& [key, seqs] : per) {
      INFO("producer " << key.first << " lane " << key.second);
      CHECK(strictly_increasing(seqs));
      if (key.second != 2) lossless += seqs.size();
    }
    std::uint64_t expected = 0;
    for (std::uint32_t i = 0; i < P; ++i)
      for (std::uint32_t s = 0; s < N; ++s) expected += (s + i) % 3 != 2 ? 1 : 0;
    CHECK(lossless == expected);  // block lanes 0 and 1 lose nothing
    shmtest::check_invariant(*box);
  }

  SUBCASE("posted concurrently, then received: all of lane 0, then lane 1, then lane 2") {
    constexpr std::uint32_t per_lane = 4;  // per producer: 12 per lane, within every lane's capacity
    std::vector<producer_log> plogs(P);
    std::vector<std::thread> pts;
    for (std::uint32_t i = 0; i < P; ++i)
      pts.emplace_back([&, i] {
        for (std::uint32_t s = 0; s < 3 * per_lane; ++s)
          post_one(producers[i], plogs[i], i, s, policy::block, clk::now() + 10s, 2 - s % 3);
      });
    for (auto& t : pts) t.join();
    check_producer_logs(plogs);
    owner_log olog;
    std::thread ot([&] {
      std::vector<shmbox::message> v;
      if (owner->receive_batch(v, {.max = 1000, .timeout = 5s}) != recv_status::ok) olog.error("nothing received");
      olog.add_all(v);
    });
    ot.join();
    check_owner_log(olog);
    REQUIRE(olog.msgs.size() == 3 * P * per_lane);
    for (std::size_t k = 0; k < olog.msgs.size(); ++k) CHECK(olog.msgs[k].lane == k / (P * per_lane));
    std::map<std::pair<std::uint32_t, std::uint32_t>, std::vector<std::uint32_t>> per;
    for (const got& m : olog.msgs) per[{m.id, m.lane}].push_back(m.seq);
    for (const auto& [key, seqs] : per) CHECK(strictly_increasing(seqs));
    shmtest::check_invariant(*box);
  }
}

// ---------------------------------------------------------------------------
// 4. Ownership changes inside one process.
// ---------------------------------------------------------------------------
TEST_CASE("threads: owner threads release and acquire in turn while producer threads post; uncommitted reads come back flagged") {
  shmtest::segment_guard g(shmtest::unique_name("thr-handoff"));
  auto box = shmbox::Box::create(g.name, small_box(policy::block, 64));
  REQUIRE(box);
  constexpr std::uint32_t P = 4, G = 6;
  const auto N = static_cast<std::uint32_t>(msgs_per_producer());
  const std::size_t quota = std::size_t{P} * N / (G + 2);
  std::vector<shmbox::Producer> producers = attach_producers(*box, P);
  const auto deadline = clk::now() + 120s;
  std::atomic<int> producing{static_cast<int>(P)};
  std::atomic<std::uint32_t> generation{0};  // relaxed: numbers the owners in the order they owned the box
  std::atomic<bool> inspecting{true};
  struct gen_log {
    owner_log log;
    std::uint32_t gen = G;
    std::uint64_t epoch = 0;
    shmbox::transfer_reason reason = shmbox::transfer_reason::none;
    std::uint64_t acquire_polls = 0;
  };
  std::vector<gen_log> gens(G);
  std::vector<std::thread> ots;
  for (std::uint32_t k = 0; k < G; ++k)
    ots.emplace_back([&, k] {
      gen_log& me = gens[k];
      std::optional<shmbox::Owner> owner;
      // The box is ours once the previous owner thread released it (in one
      // process: already_owner until then).
      while (!owner) {
        auto o = shmbox::Owner::acquire(*box);
        if (o) {
          owner.emplace(std::move(*o));
          break;
        }
        ++me.acquire_polls;
        if (o.error() != shmbox::errc::already_owner || clk::now() >= deadline) {
          me.log.error("acquire: " + shmbox::explain(o.error()));
          return;
        }
        std::this_thread::sleep_for(100us);
      }
      me.gen = generation.fetch_add(1, rlx);
      me.epoch = owner->epoch();
      me.reason = owner->transfer().reason;
      const bool last = me.gen == G - 1;
      std::vector<shmbox::message> v;
      while (clk::now() < deadline) {
        if (!last && me.log.msgs.size() >= quota) break;
        v.clear();
        const recv_status st = owner->receive_batch(v, {.max = 8, .timeout = 20ms});
        if (st == recv_status::ok) {
          me.log.add_all(v);
          continue;
        }
        if (st != recv_status::timeout) {
          me.log.error("receive: " + std::string(to_string(st)));
          return;
        }
        if (producing.load(rlx) == 0) break;
      }
      if (!last) {
        // Read a few without committing, then release: the next owner gets them again, flagged.
        shmbox::batch b;
        if (owner->read(b, {.max = 5, .timeout = 20ms}) == recv_status::ok) me.log.add_all(b, &me.log.uncommitted);
      }
    });  // ~Owner releases the box
  std::thread it([&] {
    while (inspecting.load(rlx) && clk::now() < deadline) {
      (void)shmbox::info(*box);
      std::this_thread::sleep_for(1ms);
    }
  });
  std::vector<producer_log> plogs(P);
  std::vector<std::thread> pts;
  for (std::uint32_t i = 0; i < P; ++i)
    pts.emplace_back([&, i] {
      for (std::uint32_t s = 0; s < N; ++s) post_one(producers[i], plogs[i], i, s, policy::block, deadline);
      producing.fetch_sub(1, rlx);
    });
  for (auto& t : pts) t.join();
  for (auto& t : ots) t.join();
  inspecting.store(false, rlx);
  it.join();
  // One more owner (this thread) takes what is left.
  auto final_owner = shmbox::Owner::acquire(*box);
  REQUIRE(final_owner);
  CHECK(final_owner->epoch() == G + 1);
  owner_log rest;
  drain(*final_owner, rest);

  check_producer_logs(plogs);
  std::sort(gens.begin(), gens.end(), [](const gen_log& a, const gen_log& b) { return a.gen < b.gen; });
  std::vector<got> all, uncommitted;
  for (std::uint32_t k = 0; k < G; ++k) {
    INFO("generation " << k);
    check_owner_log(gens[k].log);
    CHECK(gens[k].gen == k);
    CHECK(gens[k].epoch == k + 1);  // one epoch per owner, in order
    CHECK(gens[k].reason == shmbox::transfer_reason::none);  // a released box: a plain acquire
    all.insert(all.end(), gens[k].log.msgs.begin(), gens[k].log.msgs.end());
    uncommitted.insert(uncommitted.end(), gens[k].log.uncommitted.begin(), gens[k].log.uncommitted.end());
  }
  check_owner_log(rest);
  all.insert(all.end(), rest.msgs.begin(), rest.msgs.end());
  // Everything exactly once (committed deliveries), FIFO per producer across owners.
  for (const auto& [id, seqs] : by_producer(all)) {
    INFO("producer " << id);
    CHECK(seqs.size() == N);
    CHECK(no_duplicates(seqs));
    CHECK(strictly_increasing(seqs));
  }
  CHECK(all.size() == std::size_t{P} * N);
  // Exactly the uncommitted reads came back flagged.
  std::set<std::pair<std::uint32_t, std::uint32_t>> flagged, read_only;
  for (const got& m : all)
    if (m.redelivered) flagged.insert({m.id, m.seq});
  for (const got& m : uncommitted) read_only.insert({m.id, m.seq});
  CHECK(flagged == read_only);
  INFO("uncommitted reads handed over: " << read_only.size());
  const shmbox::counters c = box->read_counters();
  CHECK(c.delivered == std::uint64_t{P} * N);
  CHECK(c.redelivered == read_only.size());
  CHECK(c.timeouts == 0);
  shmtest::check_invariant(*box);
}

// The Owner that Heir::await_transfer returns works on the heir's own mapping
// (Heir::enlist maps the segment again, by name). TSan keys memory and sync
// objects by virtual address, so the heir's release stores (freeing slots)
// are invisible to producers on the Box's mapping: a producer reusing a slot
// the heir freed would be reported as a race with the previous owner's read
// of that slot (a false positive of the test set-up, seen in the first TSan
// run). So this box holds every message of the test: the ring never wraps,
// no slot is written twice, and the test checks the handover itself.
TEST_CASE("threads: an heir thread takes over when the owner thread releases, while producer threads post") {
  shmtest::segment_guard g(shmtest::unique_name("thr-heir"));
  constexpr std::uint32_t P = 3, N = 300;
  auto box = shmbox::Box::create(g.name, small_box(policy::block, 1024));  // >= P * N: never wraps
  REQUIRE(box);
  std::vector<shmbox::Producer> producers = attach_producers(*box, P);
  // Acquire first: an acquire by a process that is itself a registered heir
  // takes the box as that heir (and withdraws the entry).
  auto first = shmbox::Owner::acquire(*box);
  REQUIRE(first);
  auto heir = shmbox::Heir::enlist(g.name, "heir-thread");
  REQUIRE(heir);
  const auto deadline = clk::now() + 60s;
  std::atomic<int> producing{static_cast<int>(P)};
  owner_log a_log, h_log;
  std::uint64_t a_epoch = first->epoch();
  shmbox::transfer_record h_transfer;
  std::uint64_t h_epoch = 0;
  std::thread at([&] {
    std::optional<shmbox::Owner> owner(std::move(*first));
    std::vector<shmbox::message> v;
    while (a_log.msgs.size() < std::size_t{P} * N / 3 && clk::now() < deadline) {
      v.clear();
      const recv_status st = owner->receive_batch(v, {.max = 8, .timeout = 20ms});
      if (st == recv_status::ok) a_log.add_all(v);
      else if (st != recv_status::timeout) return a_log.error(std::string(to_string(st)));
    }
    shmbox::batch b;
    if (owner->read(b, {.max = 5, .timeout = 20ms}) == recv_status::ok) a_log.add_all(b, &a_log.uncommitted);
    owner.reset();  // release: the heir takes over
  });
  std::thread ht([&] {
    auto o = heir->await_transfer(30s);
    if (!o) return h_log.error("await_transfer: " + shmbox::explain(o.error()));
    h_transfer = o->transfer();
    h_epoch = o->epoch();
    std::vector<shmbox::message> v;
    while (clk::now() < deadline) {
      v.clear();
      const recv_status st = o->receive_batch(v, {.max = 8, .timeout = 20ms});
      if (st == recv_status::ok) {
        h_log.add_all(v);
        continue;
      }
      if (st != recv_status::timeout) return h_log.error(std::string(to_string(st)));
      if (producing.load(rlx) == 0) break;
    }
  });
  std::vector<producer_log> plogs(P);
  std::vector<std::thread> pts;
  for (std::uint32_t i = 0; i < P; ++i)
    pts.emplace_back([&, i] {
      for (std::uint32_t s = 0; s < N; ++s) post_one(producers[i], plogs[i], i, s, policy::block, deadline);
      producing.fetch_sub(1, rlx);
    });
  for (auto& t : pts) t.join();
  at.join();
  ht.join();
  auto last = shmbox::Owner::acquire(*box);
  REQUIRE(last);
  owner_log rest;
  drain(*last, rest);

  check_producer_logs(plogs);
  check_owner_log(a_log);
  check_owner_log(h_log);
  check_owner_log(rest);
  CHECK(h_transfer.reason == shmbox::transfer_reason::owner_died);  // a released box, inherited
  CHECK(h_transfer.data == "heir-thread");
  CHECK(h_epoch == a_epoch + 1);
  std::vector<got> all = a_log.msgs;
  all.insert(all.end(), h_log.msgs.begin(), h_log.msgs.end());
  all.insert(all.end(), rest.msgs.begin(), rest.msgs.end());
  for (const auto& [id, seqs] : by_producer(all)) {
    INFO("producer " << id);
    CHECK(seqs.size() == N);
    CHECK(strictly_increasing(seqs));
  }
  CHECK(all.size() == std::size_t{P} * N);
  std::set<std::pair<std::uint32_t, std::uint32_t>> flagged, read_only;
  for (const got& m : all)
    if (m.redelivered) flagged.insert({m.id, m.seq});
  for (const got& m : a_log.uncommitted) read_only.insert({m.id, m.seq});
  CHECK(flagged == read_only);
  shmtest::check_invariant(*box);
}

}  // namespace

namespace {
// The transfer record is a seqlock (lease.cpp: take_ownership writes tr_epoch
// = 0, a release fence, the fields, then tr_epoch; read_transfer loads
// tr_epoch, copies, an acquire fence, loads tr_epoch again). Its tr_data
// bytes are plain memory copied with memcpy on both sides. Here an inspector
// thread (shmbox::info, as `shmbox stat` does) reads the record while an owner
// thread keeps taking the box over with a transfer recorded: in one process
// that is an Owner::acquire while this process is itself a registered heir
// (the acquire takes the box as that heir, reason owner_died, with its data).
//
// TSan reported this race until the seqlock's data bytes became relaxed
// atomic words (layout.hpp: tr_data, offer_data, heir_entry::data;
// lease.cpp store_data/load_data): a plain memcpy racing with a copy out is
// a data race by the C++ rules even though the re-check of tr_epoch throws a
// torn copy away. Build with -mstringop-strategy=libcall, or GCC inlines
// small copies without instrumentation and TSan sees nothing.
TEST_CASE("threads: an inspector reads the transfer record while owner threads take the box over") {
  shmtest::segment_guard g(shmtest::unique_name("thr-transfer"));
  auto box = shmbox::Box::create(g.name, small_box(policy::reject, 16));
  REQUIRE(box);
  constexpr std::uint32_t R = 40;
  std::atomic<bool> inspecting{true};
  std::uint64_t seen_records = 0, torn = 0;
  std::thread it([&] {
    while (inspecting.load(rlx)) {
      const shmbox::box_info info = shmbox::info(*box);
      if (info.last_transfer.epoch == 0) continue;
      ++seen_records;
      const std::string& d = info.last_transfer.data;
      if (d.size() != 8 || d.compare(0, 5, "heir-") != 0) ++torn;
    }
  });
  owner_log log;
  std::thread ot([&] {
    for (std::uint32_t r = 0; r < R; ++r) {
      char data[16];
      std::snprintf(data, sizeof data, "heir-%03u", r);
      auto heir = shmbox::Heir::enlist(g.name, data);
      if (!heir) return log.error("enlist: " + shmbox::explain(heir.error()));
      auto o = shmbox::Owner::acquire(*box);
      if (!o) return log.error("acquire: " + shmbox::explain(o.error()));
      if (o->transfer().reason != shmbox::transfer_reason::owner_died || o->transfer().data != data)
        log.error("round " + std::to_string(r) + ": transfer record " + o->transfer().data);
    }  // ~Owner releases, ~Heir withdraws (already withdrawn by the acquire)
  });
  ot.join();
  inspecting.store(false, rlx);
  it.join();
  check_owner_log(log);
  CHECK(torn == 0);
  MESSAGE("inspector saw " << seen_records << " transfer records");
}
}  // namespace

// release_watch.hpp: watcher threads blocked in F_OFD_SETLKW, subscribers
// that come and go from other threads meanwhile. A subscriber still there
// when the byte is let go is written exactly once; one that left first
// never is (its eventfd stays 0). Rounds: the byte held (a role_lock, as an
// owner's), subscriptions added and some removed by 4 threads, the byte let
// go, then the next round on a fresh watcher.
TEST_CASE("threads: release watches: subscribers added and removed by threads; the byte let go writes each remaining one once") {
  shmtest::segment_guard g(shmtest::unique_name("thr-rwatch"));
  REQUIRE(shmbox::Box::create(g.name, {.capacity = 4, .slot_size = 16}));
  auto m = shmbox::detail::open_segment(g.name, false);
  REQUIRE(m);
  const std::uint64_t byte = shmbox::detail::owner_byte(**m);
  constexpr int kThreads = 4, kPerThread = 16, kRounds = 20;
  for (int round = 0; round < kRounds; ++round) {
    shmbox::detail::role_lock holder;
    REQUIRE(holder.lock(**m, byte));
    struct sub {
      int efd = -1;
      std::uint64_t id = 0;
      bool removed = false;
    };
    std::vector<std::vector<sub>> subs(kThreads);
    std::vector<std::thread> ts;
    for (int t = 0; t < kThreads; ++t)
      ts.emplace_back([&, t] {
        for (int i = 0; i < kPerThread; ++i) {
          sub s;
          s.efd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
          s.id = shmbox::detail::release_watch_add(**m, byte, s.efd);
          if ((i + t) % 3 == 0) {
            shmbox::detail::release_watch_remove(s.id);
            s.removed = true;
          }
          subs[t].push_back(s);
        }
      });
    for (auto& t : ts) t.join();
    holder.reset();  // the "owner" lets go: the watcher is granted the byte, lets go, writes
    for (auto& v : subs)
      for (const sub& s : v) {
        REQUIRE(s.efd >= 0);
        REQUIRE(s.id != 0);
        if (s.removed) {
          CHECK(!shmbox::detail::release_watch_active(s.id));
          continue;
        }
        pollfd p{s.efd, POLLIN, 0};
        CHECK(::poll(&p, 1, 10'000) == 1);
        CHECK(!shmbox::detail::release_watch_active(s.id));
      }
    for (auto& v : subs)
      for (const sub& s : v) {
        std::uint64_t n = 0;
        const ssize_t r = ::read(s.efd, &n, sizeof n);
        if (s.removed) CHECK(r < 0);  // never written
        else CHECK((r == sizeof n && n == 1));  // written once
        ::close(s.efd);
      }
  }
}
