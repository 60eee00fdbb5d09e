// Multi-process tests: producers and owners are separate programs
// (shmbox-test-helper, started with fork + exec). Every wait has a timeout,
// every segment is unlinked by a guard, every child is killed and reaped by
// its handle even when a check fails.
#include <doctest/doctest.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include "segment/layout.hpp"
#include "segment/segment.hpp"
#include "ring/wake.hpp"
#include "shmbox/shmbox.hpp"
#include "checks.hpp"
#include "support.hpp"

using namespace std::chrono_literals;
using shmbox::policy;
using shmtest::child;

namespace {

// "key=value" fields of a helper's summary line.
std::map<std::string, std::uint64_t> fields(const std::string& line) {
  std::map<std::string, std::uint64_t> f;
  std::istringstream in(line);
  std::string word;
  while (in >> word) {
    const auto eq = word.find('=');
    if (eq != std::string::npos) f[word.substr(0, eq)] = std::stoull(word.substr(eq + 1));
  }
  return f;
}

std::unique_ptr<child> start_producer(const std::string& box, int id, std::uint64_t count,
                                      std::vector<std::string> extra = {}, std::vector<std::string> env = {}) {
  std::vector<std::string> argv{shmtest::helper_path(), "produce", box, std::to_string(id), std::to_string(count)};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return std::make_unique<child>(argv, env, true);
}


std::vector<shmbox::message> drain(shmbox::Owner& o, std::size_t expect, std::chrono::milliseconds idle = 5s) {
  std::vector<shmbox::message> got;
  while (got.size() < expect && o.receive_batch(got, {.max = 4096, .timeout = idle}) == shmbox::recv_status::ok) {
  }
  return got;
}

// Handshake with a producer of `box` waiting for space: bounded wait until
// lane 0's space_wanted is 1 (the producer is past SYNC POINT A, asleep or
// about to be). Returns the box's segment, opened read-only, to look further.
std::shared_ptr<shmbox::detail::mapped_box> open_when_space_wanted(const std::string& box) {
  auto seg = shmbox::detail::open_segment(box, true);
  REQUIRE(seg);
  const shmbox::detail::lane_header* h = (*seg)->lanes[0].hdr;
  const auto until = std::chrono::steady_clock::now() + 30s;
  while (h->space_wanted.load() == 0 && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(1ms);
  REQUIRE(h->space_wanted.load() == 1);
  return *seg;
}

// Handshake with a child that stops itself (SIGSTOP fault action), bounded.
bool wait_until_stopped(const child& c) { return shmtest::wait_for_state(c.pid(), 'T', 30s); }

// A box of 10 messages from producer 1, whose first owner was killed at the
// fault point `point` (e.g. "owner.after_take:4") while receiving them.
shmbox::Box box_with_killed_owner(const std::string& name, const std::string& point) {
  auto box = shmbox::Box::create(name, {.capacity = 64, .slot_size = 64});
  REQUIRE(box);
  auto p = start_producer(name, 1, 10, {"--no-wait"});
  CHECK(shmtest::exited_with(p->wait(30s), 0));
  child dying({shmtest::helper_path(), "consume", name, "10", "1000"}, {"SHMBOX_FAULT=" + point});
  CHECK(shmtest::killed_by(dying.wait(30s), SIGKILL));
  return std::move(*box);
}

std::pair<std::uint64_t, std::uint64_t> id_seq(const shmbox::message& m) {
  std::uint64_t id = 0, seq = 0;
  std::memcpy(&id, m.data.data(), 8);
  std::memcpy(&seq, m.data.data() + 8, 8);
  return {id, seq};
}

}  // namespace

TEST_CASE("4 producer processes x 250k messages into one owner process") {
  constexpr std::uint64_t kPer = 250'000;
  struct variant {
    policy pol;
    bool retry;  // post a refused message again until stored
    const char* receive = nullptr;  // the consumer's flag: one message per call (--one, --poll); else batches
  };
  const variant variants[] = {{policy::block, false},       {policy::reject, true},
                              {policy::drop_oldest, false}, {policy::drop_newest, false},
                              {policy::block, false, "--one"}, {policy::drop_oldest, false, "--poll"}};
  for (const auto& v : variants) {
    CAPTURE(shmbox::to_string(v.pol));
    const std::string receive = v.receive ? v.receive : "receive_batch";
    CAPTURE(receive);
    shmtest::segment_guard g(shmtest::unique_name("mp"));
    auto box = shmbox::Box::create(g.name, {.capacity = 1024, .slot_size = 64, .overflow = v.pol, .block_timeout = 30s});
    REQUIRE(box);
    const std::uint64_t expect = (v.pol == policy::block || v.retry) ? 4 * kPer : 0;
    std::vector<std::string> owner_argv{shmtest::helper_path(), "consume", g.name, std::to_string(expect ? expect : 4 * kPer), "2000"};
    if (v.receive) owner_argv.push_back(v.receive);
    child owner(owner_argv);
    REQUIRE(owner.read_line().value_or("").rfind("owned", 0) == 0);
    std::vector<std::unique_ptr<child>> producers;
    for (int id = 0; id < 4; ++id) {
      producers.push_back(start_producer(g.name, id, kPer, v.retry ? std::vector<std::string>{"--retry"} : std::vector<std::string>{}));
      REQUIRE(producers.back()->read_line().value_or("").rfind("ready", 0) == 0);
    }
    for (auto& p : producers) p->write_stdin("go\n");  // all start together
    std::uint64_t full = 0;
    for (auto& p : producers) {
      const auto done = p->read_line(120s);
      REQUIRE(done.has_value());
      auto f = fields(*done);
      full += f["full"];
      CHECK(shmtest::exited_with(p->wait(), 0));
    }
    const auto summary = owner.read_line(120s);
    REQUIRE(summary.has_value());
    CHECK(shmtest::exited_with(owner.wait(), 0));
    CAPTURE(*summary);
    auto s = fields(*summary);
    CHECK(s["order_errors"] == 0);  // per producer, strictly in posting order: no duplicate, no reordering
    CHECK(s["dups"] == 0);
    CHECK(s["torn"] == 0);  // every payload intact
    CHECK(s["short"] == 0);
    const shmbox::counters c = box->read_counters();
    CHECK(c.delivered == s["got"]);
    CHECK(c.abandoned == 0);
    if (expect != 0) {
      CHECK(s["got"] == 4 * kPer);
      for (int id = 0; id < 4; ++id) CHECK(s[shmtest::cat("p", std::to_string(id))] == kPer);
    }
    if (v.retry) CHECK(c.rejected == full);
    CHECK(c.posted == 4 * kPer + c.rejected);
    shmtest::check_invariant(*box);
    CHECK(shmbox::info(*box).depth == 0);
  }
}

TEST_CASE("lifo with 4 producer processes: exactly once, payloads intact, counters add up") {
  shmtest::segment_guard g(shmtest::unique_name("mplifo"));
  auto box = shmbox::Box::create(g.name, {.capacity = 64, .slot_size = 64, .overflow = policy::lifo});
  REQUIRE(box);
  child owner({shmtest::helper_path(), "consume", g.name, "200000", "1000", "--lifo", "--batch", "16"});
  REQUIRE(owner.read_line().value_or("").rfind("owned", 0) == 0);
  std::vector<std::unique_ptr<child>> producers;
  for (int id = 0; id < 4; ++id) producers.push_back(start_producer(g.name, id, 50'000, {"--no-wait"}));
  for (auto& p : producers) CHECK(shmtest::exited_with(p->wait(120s), 0));
  const auto summary = owner.read_line(120s);
  REQUIRE(summary.has_value());
  CAPTURE(*summary);
  auto s = fields(*summary);
  CHECK(s["dups"] == 0);
  CHECK(s["torn"] == 0);
  const shmbox::counters c = box->read_counters();
  CHECK(c.delivered == s["got"]);
  CHECK(c.posted == 200'000);
  CHECK(c.dropped_newest == c.stored - c.delivered - shmbox::info(*box).depth);
  shmtest::check_invariant(*box);
}

TEST_CASE("a stopped producer is slow, not dead: the owner waits for it and loses nothing") {
  shmtest::segment_guard g(shmtest::unique_name("stopped"));
  auto box = shmbox::Box::create(g.name, {.capacity = 64, .slot_size = 64});
  auto owner = shmbox::Owner::acquire(*box);
  // Producer 1 stops itself (SIGSTOP) right after claiming its 3rd slot.
  auto p1 = start_producer(g.name, 1, 5, {"--no-wait"}, {"SHMBOX_FAULT=producer.after_claim:3:stop"});
  REQUIRE(wait_until_stopped(*p1));
  auto p2 = start_producer(g.name, 2, 2, {"--no-wait"});
  CHECK(shmtest::exited_with(p2->wait(30s), 0));
  auto got = drain(*owner, 100, 300ms);  // far longer than the repair grace period
  REQUIRE(got.size() == 2);             // p1's first two; the rest waits behind p1's claim
  CHECK(box->read_counters().abandoned == 0);
  p1->kill(SIGCONT);
  CHECK(shmtest::exited_with(p1->wait(30s), 0));
  auto rest = drain(*owner, 5, 2s);
  REQUIRE(rest.size() == 5);
  std::vector<std::pair<std::uint64_t, std::uint64_t>> ids;
  for (const auto& m : rest) ids.push_back(id_seq(m));
  CHECK(ids == std::vector<std::pair<std::uint64_t, std::uint64_t>>{{1, 2}, {2, 0}, {2, 1}, {1, 3}, {1, 4}});
  CHECK(box->read_counters().abandoned == 0);
  shmtest::check_invariant(*box);
}

TEST_CASE("a producer killed between claim and publish never wedges the box") {
  const char* points[] = {"producer.after_claim", "producer.mid_payload", "producer.before_publish"};
  for (auto pol : {policy::reject, policy::block, policy::drop_oldest}) {
    for (const char* point : points) {
      CAPTURE(std::string(point));
      CAPTURE(shmbox::to_string(pol));
      shmtest::segment_guard g(shmtest::unique_name("kill"));
      auto box = shmbox::Box::create(g.name, {.capacity = 256, .slot_size = 64, .overflow = pol});
      REQUIRE(box);
      auto owner = shmbox::Owner::acquire(*box);
      REQUIRE(owner);
      // Producer 1 dies at its 101st post: 100 stored, the 101st claimed and never published.
      auto p1 = start_producer(g.name, 1, 200, {"--no-wait"}, {shmtest::cat("SHMBOX_FAULT=", point, ":101")});
      CHECK(shmtest::killed_by(p1->wait(30s), SIGKILL));
      CHECK_FALSE(p1->timed_out());
      // Producer 2 posts behind the dead slot.
      auto p2 = start_producer(g.name, 2, 50, {"--no-wait"});
      const auto t0 = std::chrono::steady_clock::now();
      auto got = drain(*owner, 150);
      const auto skip_ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0);
      CHECK(shmtest::exited_with(p2->wait(30s), 0));
      REQUIRE(got.size() == 150);
      MESSAGE("owner skipped the abandoned slot and drained 150 messages in " << skip_ms.count() << " ms");
      std::map<std::uint64_t, std::uint64_t> next;
      for (const auto& m : got) {
        auto [id, seq] = id_seq(m);
        CHECK(seq == next[id]);  // nothing lost, nothing duplicated, in order
        next[id] = seq + 1;
      }
      CHECK(next[1] == 100);
      CHECK(next[2] == 50);
      const shmbox::counters c = box->read_counters();
      CHECK(c.abandoned == 1);
      CHECK(c.stored == 151);
      CHECK(c.delivered == 150);
      shmtest::check_invariant(*box);
      // The box keeps working.
      auto p3 = shmbox::Producer::attach(*box);
      REQUIRE(p3->post("still alive") == shmbox::post_status::stored);
      shmbox::message m;
      CHECK(owner->receive(m, {.timeout = 10s}) == shmbox::recv_status::ok);
      CHECK(m.data == "still alive");
    }
  }
}

TEST_CASE("block: producers sleeping for space never hold up the repair of a dead claimant") {
  // A 1-slot block box and racing producers: when one dies holding a claim,
  // others that lost the race for that position sleep for space. They must not
  // look like live claimants of it, or the owner would wait out their timeout
  // (60 s here) instead of skipping the dead slot within milliseconds.
  shmtest::segment_guard g(shmtest::unique_name("blockrace"));
  auto box = shmbox::Box::create(g.name, {.capacity = 1, .slot_size = 64, .overflow = policy::block, .block_timeout = 60s});
  std::vector<std::unique_ptr<child>> producers;
  producers.push_back(start_producer(g.name, 9, 1000, {}, {"SHMBOX_FAULT=producer.after_claim:300"}));
  for (int id = 0; id < 3; ++id) producers.push_back(start_producer(g.name, id, 1000));
  for (auto& p : producers) REQUIRE(p->read_line().value_or("").rfind("ready", 0) == 0);
  auto owner = shmbox::Owner::acquire(*box);
  const auto t0 = std::chrono::steady_clock::now();
  for (auto& p : producers) p->write_stdin("go\n");
  auto got = drain(*owner, 3299, 20s);
  const auto took = std::chrono::steady_clock::now() - t0;
  CHECK(shmtest::killed_by(producers[0]->wait(60s), SIGKILL));
  for (std::size_t i = 1; i < producers.size(); ++i) CHECK(shmtest::exited_with(producers[i]->wait(60s), 0));
  CHECK(got.size() == 3299);
  // If the dead claim was the last position, nothing needed it yet: one more
  // (empty) receive lets the owner find and repair it.
  CHECK(drain(*owner, 1, 300ms).empty());
  CHECK(box->read_counters().abandoned == 1);
  CHECK(box->read_counters().timeouts == 0);
  CHECK(took < 20s);
  MESSAGE("3299 messages through a 1-slot box around a dead claimant in "
          << std::chrono::duration_cast<std::chrono::milliseconds>(took).count() << " ms");
  shmtest::check_invariant(*box);
}

TEST_CASE("a producer that lost the claim race and sleeps for space is not mistaken for the dead claimant") {
  // X announces claim(0) and is stopped before its CAS; Y claims 0 and dies;
  // X resumes, loses the CAS, finds the box full and sleeps for space (60 s).
  // X must have withdrawn its announcement, or the owner would wait for X.
  shmtest::segment_guard g(shmtest::unique_name("staleclaim"));
  auto box = shmbox::Box::create(g.name, {.capacity = 1, .slot_size = 64, .overflow = policy::block, .block_timeout = 60s});
  auto x = start_producer(g.name, 1, 1, {"--no-wait"}, {"SHMBOX_FAULT=producer.after_announce:1:stop"});
  REQUIRE(wait_until_stopped(*x));
  auto y = start_producer(g.name, 2, 1, {"--no-wait"}, {"SHMBOX_FAULT=producer.after_claim:1"});
  CHECK(shmtest::killed_by(y->wait(30s), SIGKILL));
  x->kill(SIGCONT);
  open_when_space_wanted(g.name);  // handshake: X is asleep waiting for space
  auto owner = shmbox::Owner::acquire(*box);
  const auto t0 = std::chrono::steady_clock::now();
  auto got = drain(*owner, 1, 30s);
  CHECK(std::chrono::steady_clock::now() - t0 < 20s);  // not X's 60 s block timeout
  REQUIRE(got.size() == 1);
  CHECK(id_seq(got[0]).first == 1);
  CHECK(shmtest::exited_with(x->wait(30s), 0));
  CHECK(box->read_counters().abandoned == 1);
  CHECK(box->read_counters().timeouts == 0);
  shmtest::check_invariant(*box);
}

// THE ASYMMETRIC FENCE (lib/ring/wake.hpp): an owner whose process registered for
// membarrier skips SYNC POINT B's fence; a producer about to sleep for space
// runs membarrier for it. These check the wiring on both sides: the owner's
// one-message take (FAST TAKE) sees the sleeping producer and wakes it (a
// missed wake-up would leave space_wake_calls at 0: the producer's own slice
// would still get it out later), and a producer whose membarrier is refused
// (SHMBOX_NO_MEMBARRIER=1, as under a seccomp filter) marks the lane so that
// owners fence again. The race itself (a free and a sleep at the same
// instant) is the model's and the argument's in wake.hpp, not a test's.
TEST_CASE("block: a producer asleep for space is woken by the owner's next one-message take, membarrier or not") {
  for (const bool refused : {false, true}) {
    CAPTURE(refused);
    shmtest::segment_guard g(shmtest::unique_name("asymfence"));
    auto box = shmbox::Box::create(g.name, {.capacity = 2, .slot_size = 64, .overflow = policy::block, .block_timeout = 60s});
    REQUIRE(box);
    auto owner = shmbox::Owner::acquire(*box);  // registers this process, where the kernel allows it
    REQUIRE(owner);
    std::vector<std::string> env;
    if (refused) env.push_back("SHMBOX_NO_MEMBARRIER=1");
    auto p = start_producer(g.name, 1, 3, {"--no-wait"}, env);  // 2 fit; the 3rd waits for space
    const auto seg = open_when_space_wanted(g.name);  // handshake: the producer is past SYNC POINT A
    shmbox::detail::lane_header* h = seg->lanes[0].hdr;
    // Without membarrier the producer marked the lane (before its re-check):
    // owners fence from now on. With it, the mark stays clear unless this
    // kernel refuses membarrier to everyone.
    if (refused || !shmbox::detail::fence_owners()) CHECK(h->space_fence.load() == 1);
    else CHECK(h->space_fence.load() == 0);
    const std::uint64_t calls = h->space_wake_calls.load();
    shmbox::message m;
    REQUIRE(owner->try_receive(m) == shmbox::recv_status::ok);  // frees a slot: SYNC POINT B sees the waiter
    CHECK(h->space_wake_calls.load() == calls + 1);
    CHECK(shmtest::exited_with(p->wait(30s), 0));
    CHECK(drain(*owner, 2, 5s).size() == 2);
    CHECK(box->read_counters().timeouts == 0);
    shmtest::check_invariant(*box);
  }
}

// A producer blocked on a full box sleeps (on the lane's futex, in slices),
// whatever the kind of box. A gated lane (a priority or stash box's lane, a
// resizable one: THE GATE, THE LIMIT) once compared the gate with a limit
// its wait had never read when the ring itself was full: every retry ran
// membarrier and returned, a CPU burnt per blocked producer and an IPI to
// every CPU per retry. Measured as the producer's CPU time over a window
// while it waits (the handshake: space_wanted; shmtest::cpu_ticks).
TEST_CASE("block: a producer waiting on a full box sleeps, in every kind of box") {
  struct kind {
    std::string name;
    shmbox::options o;
    std::uint32_t grow_to = 0;  // a resizable box: resized to this first (its reserve: the ring itself is full)
  };
  shmbox::options base{.capacity = 2, .slot_size = 64, .overflow = policy::block, .block_timeout = 60s};
  std::vector<kind> kinds{{"fifo", base}, {"priority", base}, {"stash", base}, {"resizable", base}, {"resizable, at its reserve", base, 4}};
  kinds[1].o.priority = true;
  kinds[2].o.stash = 4;
  kinds[3].o.max_capacity = 4;
  kinds[4].o.max_capacity = 4;
  for (const kind& k : kinds) {
    CAPTURE(k.name);
    shmtest::segment_guard g(shmtest::unique_name("blocksleep"));
    auto box = shmbox::Box::create(g.name, k.o);
    REQUIRE(box);
    if (k.grow_to != 0) REQUIRE(box->resize(k.grow_to));
    const std::uint32_t fits = k.grow_to != 0 ? k.grow_to : k.o.capacity;
    auto owner = shmbox::Owner::acquire(*box);
    REQUIRE(owner);
    auto p = start_producer(g.name, 1, fits + 1, {"--no-wait"});  // the last one waits for space
    open_when_space_wanted(g.name);  // handshake: the producer is past SYNC POINT A
    // Past its adaptive wait (50 us) now; from here it should be asleep. A
    // window of 500 ms: a sleeper wakes every 10 ms slice and uses a few
    // milliseconds; a spinning one uses most of the window (50 ticks).
    const long before = shmtest::cpu_ticks(p->pid());
    std::this_thread::sleep_for(500ms);
    const long used = shmtest::cpu_ticks(p->pid()) - before;
    MESSAGE(k.name << ": the waiting producer used " << used << " clock ticks of CPU in 500 ms (" << ::sysconf(_SC_CLK_TCK)
                   << " a second)");
    CHECK(used * 10 < ::sysconf(_SC_CLK_TCK));  // under 100 ms of the 500
    shmbox::message m;
    REQUIRE(owner->try_receive(m) == shmbox::recv_status::ok);  // frees a slot: the producer gets in
    CHECK(shmtest::exited_with(p->wait(30s), 0));
    CHECK(drain(*owner, fits, 5s).size() == fits);
    CHECK(box->read_counters().timeouts == 0);
    shmtest::check_invariant(*box);
  }
}

TEST_CASE("a producer killed while its abandoned entry is reused: the new holder repairs it first") {
  shmtest::segment_guard g(shmtest::unique_name("reuse"));
  shmbox::options o;
  o.capacity = 16;
  o.slot_size = 64;
  o.max_producers = 1;  // the next producer must take the dead one's entry
  auto box = shmbox::Box::create(g.name, o);
  auto p1 = start_producer(g.name, 1, 10, {"--no-wait"}, {"SHMBOX_FAULT=producer.after_claim:3"});
  CHECK(shmtest::killed_by(p1->wait(30s), SIGKILL));
  auto p2 = start_producer(g.name, 2, 5, {"--no-wait"});
  CHECK(shmtest::exited_with(p2->wait(30s), 0));
  auto owner = shmbox::Owner::acquire(*box);
  auto got = drain(*owner, 7, 2s);
  CHECK(got.size() == 7);
  CHECK(box->read_counters().abandoned == 1);
  shmtest::check_invariant(*box);
}

// Issue 32: Producer::adopt takes a dead producer's entry back, finishing
// its last post, so that the entry's stored count (claims: P4) is final and
// nobody else's: the NATS bridge's import decides from it whether to post a
// message again after a crash. A post whose claim is counted is in the box
// or counted abandoned (never to be posted again: that would be a
// duplicate); a post not counted is not in the box (post it again).
TEST_CASE("Producer::adopt: a producer killed at each point of a post; its stored count says whether that post may land") {
  struct point_case {
    const char* point;
    bool claimed;  // the 5th post's claim is counted in stored
  };
  const point_case points[] = {{"producer.after_announce", false},
                               {"producer.after_claim", true},
                               {"producer.mid_payload", true},
                               {"producer.before_publish", true}};
  for (const point_case& pc : points) {
    CAPTURE(std::string(pc.point));
    shmtest::segment_guard g(shmtest::unique_name("adopt"));
    auto box = shmbox::Box::create(g.name, {.capacity = 64, .slot_size = 64});
    REQUIRE(box);
    // Dies in its 5th post: 4 stored before it.
    auto p1 = start_producer(g.name, 1, 10, {"--no-wait"}, {shmtest::cat("SHMBOX_FAULT=", pc.point, ":5")});
    const std::string ready = p1->read_line().value_or("");
    unsigned entry = 0;
    unsigned long long attached = 0;
    REQUIRE(std::sscanf(ready.c_str(), "ready %u %llu", &entry, &attached) == 2);
    CHECK(shmtest::killed_by(p1->wait(30s), SIGKILL));
    // Not that producer's entry, or a free one: refused.
    CHECK(shmbox::Producer::adopt(*box, entry, attached + 1).error() == shmbox::errc::not_found);
    CHECK(shmbox::Producer::adopt(*box, entry + 1, attached).error() == shmbox::errc::not_found);
    auto heir = shmbox::Producer::adopt(*box, entry, attached);
    REQUIRE(heir);
    CHECK(heir->entry_index() == entry);
    CHECK(heir->attached_ns() != attached);
    CHECK(shmbox::Producer::adopt(*box, entry, attached).error() == shmbox::errc::not_found);  // held now (by us)
    std::uint64_t counted = 0;
    for (const auto& pi : shmbox::info(*box).producers)
      if (pi.entry == entry) counted = pi.stored;
    CHECK(counted == (pc.claimed ? 5u : 4u));
    auto owner = shmbox::Owner::acquire(*box);
    REQUIRE(owner);
    const auto got = drain(*owner, counted + 1, 500ms);
    CHECK(got.size() == 4);  // killed before its 5th message was published
    // Counted claims: in the box, or counted abandoned (adopt repaired the dead claim at once).
    CHECK(box->read_counters().abandoned == counted - got.size());
    // The entry goes on counting for its new holder.
    CHECK(heir->post("after") == shmbox::post_status::stored);
    for (const auto& pi : shmbox::info(*box).producers)
      if (pi.entry == entry) CHECK(pi.stored == counted + 1);
    shmtest::check_invariant(*box);
  }
}

// Issue 13 item 6: the status a producer sees is exact. With 4 producers
// racing to evict from a small box, a producer whose freed slot was taken by
// another one evicts again: one post can evict more than one message. The
// producers' own counts (Producer::last_evicted() after each post) add up to
// the box's dropped_oldest counter exactly. Before: only stored_evicted
// statuses could be counted, and they fell short of dropped_oldest
// (38,812 vs 39,551 in the acceptance run).
TEST_CASE("drop_oldest: the evictions producers are told of add up to dropped_oldest (4 producers, a slow owner)") {
  constexpr std::uint64_t kPer = 10'000;
  shmtest::segment_guard g(shmtest::unique_name("evictcount"));
  auto box = shmbox::Box::create(g.name, {.capacity = 64, .slot_size = 64, .overflow = policy::drop_oldest});
  REQUIRE(box);
  auto owner = shmbox::Owner::acquire(*box);
  REQUIRE(owner);
  std::vector<std::unique_ptr<child>> producers;
  for (int id = 0; id < 4; ++id) {
    producers.push_back(start_producer(g.name, id, kPer));
    REQUIRE(producers.back()->read_line().value_or("").rfind("ready", 0) == 0);
  }
  for (auto& p : producers) p->write_stdin("go\n");
  // The owner receives in batches with short pauses (load shaping, not
  // synchronisation) until every producer has said it is done.
  std::uint64_t got = 0, evictions = 0, evicting_posts = 0;
  std::size_t finished = 0;
  std::vector<bool> done(producers.size(), false);
  const auto give_up = std::chrono::steady_clock::now() + 120s;
  shmbox::batch b;
  for (unsigned round = 1; finished < producers.size() && std::chrono::steady_clock::now() < give_up; ++round) {
    b.clear();
    if (owner->receive_batch(b, {.max = 16, .timeout = 0ns}) == shmbox::recv_status::ok) got += b.size();
    std::this_thread::sleep_for(50us);
    if (round % 64 != 0) continue;  // now and then: which producers are done (a 2 ms look each)
    for (std::size_t i = 0; i < producers.size(); ++i) {
      if (done[i]) continue;
      const auto line = producers[i]->read_line(2ms);
      if (!line) continue;
      auto f = fields(*line);
      evictions += f["evictions"];
      evicting_posts += f["evicted"];
      CHECK(f["stored"] + f["evicted"] == kPer);  // drop_oldest stores every message
      done[i] = true;
      ++finished;
    }
  }
  REQUIRE(finished == producers.size());
  for (auto& p : producers) CHECK(shmtest::exited_with(p->wait(), 0));
  b.clear();  // (counted already: the last round's messages)
  while (owner->receive_batch(b, {.max = 4096, .timeout = 0ns}) == shmbox::recv_status::ok) {
    got += b.size();
    b.clear();
  }
  const shmbox::counters c = box->read_counters();
  INFO("posts that said stored_evicted: ", evicting_posts, ", evictions they report: ", evictions,
       ", dropped_oldest: ", c.dropped_oldest);
  CHECK(c.dropped_oldest > 0);
  CHECK(evictions == c.dropped_oldest);
  CHECK(evicting_posts <= evictions);
  CHECK(got + c.dropped_oldest == 4 * kPer);
  shmtest::check_invariant(*box);
}

TEST_CASE("drop_oldest: an evictor killed mid-eviction is finished by the next producer, counted once") {
  shmtest::segment_guard g(shmtest::unique_name("evict"));
  auto box = shmbox::Box::create(g.name, {.capacity = 4, .slot_size = 64, .overflow = policy::drop_oldest});
  // Posts 4 (fills the box), then dies in its first eviction: slot taken, counted, not freed.
  auto p1 = start_producer(g.name, 1, 10, {"--no-wait"}, {"SHMBOX_FAULT=producer.mid_evict:1"});
  CHECK(shmtest::killed_by(p1->wait(30s), SIGKILL));
  auto p2 = start_producer(g.name, 2, 3, {"--no-wait"});
  CHECK(shmtest::exited_with(p2->wait(30s), 0));
  auto owner = shmbox::Owner::acquire(*box);
  auto got = drain(*owner, 4, 1s);
  REQUIRE(got.size() == 4);
  // p1's 0 was evicted by p1 (dying), then p2 evicted p1's 1, 2, 3.
  std::vector<std::pair<std::uint64_t, std::uint64_t>> ids;
  for (const auto& m : got) ids.push_back(id_seq(m));
  CHECK(ids == std::vector<std::pair<std::uint64_t, std::uint64_t>>{{1, 3}, {2, 0}, {2, 1}, {2, 2}});
  const shmbox::counters c = box->read_counters();
  CHECK(c.dropped_oldest == 3);
  CHECK(c.abandoned == 0);
  shmtest::check_invariant(*box);
}

TEST_CASE("lifo: a writer killed mid-write is abandoned and counted once") {
  shmtest::segment_guard g(shmtest::unique_name("lifokill"));
  auto box = shmbox::Box::create(g.name, {.capacity = 4, .slot_size = 64, .overflow = policy::lifo});
  auto p1 = start_producer(g.name, 1, 10, {"--no-wait"}, {"SHMBOX_FAULT=producer.lifo_mid_write:3"});
  CHECK(shmtest::killed_by(p1->wait(30s), SIGKILL));
  auto owner = shmbox::Owner::acquire(*box);
  auto got = drain(*owner, 2, 500ms);
  REQUIRE(got.size() == 2);
  CHECK(id_seq(got[0]).second == 1);  // newest first
  CHECK(id_seq(got[1]).second == 0);
  // The dead writer's slot is repaired once the owner notices it is stuck.
  std::vector<shmbox::message> more;
  CHECK(owner->receive_batch(more, {.max = 10, .timeout = 200ms}) == shmbox::recv_status::timeout);
  const shmbox::counters c = box->read_counters();
  CHECK(c.abandoned == 1);
  CHECK(c.stored == 3);
  shmtest::check_invariant(*box);
}

TEST_CASE("owner killed after taking, before committing: the next owner gets that message again, flagged") {
  shmtest::segment_guard g(shmtest::unique_name("redeliver"));
  // The first owner dies holding its 4th message: taken, copied, not committed.
  auto box = box_with_killed_owner(g.name, "owner.after_take:4");
  CHECK(box.read_counters().delivered == 3);
  auto owner = shmbox::Owner::acquire(box);
  REQUIRE(owner);
  CHECK(owner->epoch() == 2);
  auto got = drain(*owner, 7, 1s);
  REQUIRE(got.size() == 7);
  for (std::size_t i = 0; i < got.size(); ++i) {
    CHECK(got[i].redelivered == (i == 0));  // only the one in flight is flagged
    CHECK(id_seq(got[i]).second == i + 3);  // nothing lost, nothing repeated
  }
  const shmbox::counters c = box.read_counters();
  CHECK(c.delivered == 10);
  CHECK(c.redelivered == 1);
  shmtest::check_invariant(box);
}

TEST_CASE("owner killed after committing, before freeing: counted once, not delivered again") {
  shmtest::segment_guard g(shmtest::unique_name("committed"));
  // The first owner dies after committing its 4th message, before freeing its slot.
  auto box = box_with_killed_owner(g.name, "owner.after_commit:4");
  CHECK(box.read_counters().delivered == 4);
  // Counted delivered, and so not in the depth: the box adds up before the
  // takeover too (before, the slot was in both: gencheck's taken-ghost-depth).
  CHECK(shmbox::info(box).depth == 6);
  shmtest::check_invariant(box);
  auto owner = shmbox::Owner::acquire(box);
  REQUIRE(owner);
  auto p2 = start_producer(g.name, 2, 3, {"--no-wait"});
  CHECK(shmtest::exited_with(p2->wait(30s), 0));
  auto got = drain(*owner, 9, 500ms);
  REQUIRE(got.size() == 9);  // the committed four are not repeated
  for (std::size_t i = 0; i < got.size(); ++i) {
    CHECK_FALSE(got[i].redelivered);
    CHECK(id_seq(got[i]) == (i < 6 ? std::pair<std::uint64_t, std::uint64_t>{1, i + 4}
                                   : std::pair<std::uint64_t, std::uint64_t>{2, i - 6}));
  }
  const shmbox::counters c = box.read_counters();
  CHECK(c.delivered == 13);
  CHECK(c.redelivered == 0);
  shmtest::check_invariant(box);
}

TEST_CASE("one owner at a time across processes; a dead owner's box is taken over with its messages") {
  shmtest::segment_guard g(shmtest::unique_name("owners"));
  auto box = shmbox::Box::create(g.name);
  auto p = shmbox::Producer::attach(*box);
  REQUIRE(p->post("kept") == shmbox::post_status::stored);
  child first({shmtest::helper_path(), "own", g.name}, {}, true);
  REQUIRE(first.read_line().value_or("") == "owned 1");
  auto second = shmbox::Owner::acquire(*box);
  REQUIRE_FALSE(second);
  CHECK(second.error() == shmbox::errc::not_owner);
  CHECK(shmbox::explain(second.error()).find(shmtest::cat("process ", std::to_string(first.pid()))) != std::string::npos);
  child third({shmtest::helper_path(), "own", g.name}, {}, true);
  CHECK(third.read_line().value_or("").find("owned by live process") != std::string::npos);
  first.kill(SIGKILL);
  first.wait();
  CHECK_FALSE(shmbox::info(*box).owner.alive);
  auto now_mine = shmbox::Owner::acquire(*box);
  REQUIRE(now_mine);
  CHECK(now_mine->epoch() == 2);
  shmbox::message m;
  CHECK(now_mine->try_receive(m) == shmbox::recv_status::ok);
  CHECK(m.data == "kept");
}

TEST_CASE("a sleeping owner process is woken by a producer process; idle posts make no wake call") {
  shmtest::segment_guard g(shmtest::unique_name("wakeproc"));
  auto box = shmbox::Box::create(g.name);
  auto seg = shmbox::detail::open_segment(g.name, true);
  REQUIRE(seg);
  auto* lane = (*seg)->lanes[0].hdr;
  auto* rec = (*seg)->owner();
  // Nobody sleeps: 10 000 posts from another process make no futex wake.
  auto quiet = start_producer(g.name, 1, 10'000, {"--no-wait"});
  CHECK(shmtest::exited_with(quiet->wait(30s), 0));
  CHECK(rec->wake_calls.load() == 0);
  {
    auto o = shmbox::Owner::acquire(*box);
    drain(*o, 10'000, 100ms);
  }
  child sleeper({shmtest::helper_path(), "wait-one", g.name, "30000"});
  REQUIRE(sleeper.read_line().value_or("").rfind("owned", 0) == 0);
  // Handshake: the owner is asleep once its bit is in the tail.
  const auto until = std::chrono::steady_clock::now() + 30s;
  while ((lane->tail.load() & 1) == 0 && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(1ms);
  REQUIRE((lane->tail.load() & 1) == 1);
  auto poster = shmbox::Producer::attach(*box);
  REQUIRE(poster->post("ping") == shmbox::post_status::stored);
  CHECK(sleeper.read_line(30s).value_or("") == "got ping");
  CHECK(shmtest::exited_with(sleeper.wait(), 0));
  CHECK(rec->wake_calls.load() == 1);
}

TEST_CASE("a claimant that dies right after claiming does not take the owner's wake-up with it") {
  shmtest::segment_guard g(shmtest::unique_name("lostwake"));
  auto box = shmbox::Box::create(g.name);
  auto seg = shmbox::detail::open_segment(g.name, true);
  REQUIRE(seg);
  auto* lane = (*seg)->lanes[0].hdr;
  child sleeper({shmtest::helper_path(), "wait-one", g.name, "60000"});
  REQUIRE(sleeper.read_line().value_or("").rfind("owned", 0) == 0);
  const auto until = std::chrono::steady_clock::now() + 30s;
  while ((lane->tail.load() & 1) == 0 && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(1ms);
  REQUIRE((lane->tail.load() & 1) == 1);  // the owner sleeps
  // This producer's claim is the first after the owner armed its bit; it dies
  // before publishing (and before waking anybody).
  auto dying = start_producer(g.name, 1, 1, {"--no-wait"}, {"SHMBOX_FAULT=producer.after_claim:1"});
  CHECK(shmtest::killed_by(dying->wait(30s), SIGKILL));
  const auto t0 = std::chrono::steady_clock::now();
  auto poster = shmbox::Producer::attach(*box);
  REQUIRE(poster->post("ping") == shmbox::post_status::stored);
  // The owner must wake now (not at its 60 s deadline), repair the dead claim and deliver.
  CHECK(sleeper.read_line(30s).value_or("") == "got ping");
  CHECK(std::chrono::steady_clock::now() - t0 < 20s);
  CHECK(shmtest::exited_with(sleeper.wait(), 0));
  CHECK(box->read_counters().abandoned == 1);
  shmtest::check_invariant(*box);
}

TEST_CASE("block across processes: a blocked producer process resumes as the owner drains") {
  shmtest::segment_guard g(shmtest::unique_name("blockproc"));
  auto box = shmbox::Box::create(g.name, {.capacity = 2, .slot_size = 64, .overflow = policy::block, .block_timeout = 30s});
  auto p = start_producer(g.name, 7, 500, {"--no-wait"});
  auto owner = shmbox::Owner::acquire(*box);
  auto got = drain(*owner, 500, 30s);
  CHECK(shmtest::exited_with(p->wait(30s), 0));
  REQUIRE(got.size() == 500);
  for (std::size_t i = 0; i < got.size(); ++i) CHECK(id_seq(got[i]).second == i);
  CHECK(box->read_counters().timeouts == 0);
}
