// Per-producer quotas (options::quota; ring.hpp THE QUOTA): a producer with
// its quota of messages waiting in a lane gets the lane's policy applied to
// it alone, and the others keep their room. Producers are separate programs
// (the helper's `produce`); the box's owner is this process, which receives
// slowly so that the box stays full.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "checks.hpp"
#include "shmbox/shmbox.hpp"
#include "support.hpp"

using namespace std::chrono_literals;
using shmbox::policy;
using shmbox::post_status;
using shmtest::child;
using shmtest::line_field;

namespace {

// The producer id and sequence number the helper's `produce` writes first.
std::pair<std::uint64_t, std::uint64_t> id_seq(const std::string& data) {
  std::uint64_t id = 0, seq = 0;
  if (data.size() >= 16) {
    std::memcpy(&id, data.data(), 8);
    std::memcpy(&seq, data.data() + 8, 8);
  }
  return {id, seq};
}

// A writer of the segment changes lane `lane`'s quota word (lane_header::quota:
// the lanes start at segment_header::lanes_offset, 256 bytes each, quota at 212).
void poke_lane_quota(const std::string& name, std::uint32_t lane, std::uint32_t value) {
  const int fd = ::open(("/dev/shm/shmbox." + name).c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
  REQUIRE(fd >= 0);
  std::uint64_t lanes = 0;
  REQUIRE(::pread(fd, &lanes, sizeof lanes, 72) == static_cast<ssize_t>(sizeof lanes));
  REQUIRE(::pwrite(fd, &value, sizeof value, static_cast<off_t>(lanes + lane * 256 + 212)) == static_cast<ssize_t>(sizeof value));
  ::close(fd);
}

const shmbox::producer_info* entry_of(const shmbox::box_info& i, std::uint32_t entry) {
  for (const auto& p : i.producers)
    if (p.entry == entry) return &p;
  return nullptr;
}

}  // namespace

TEST_CASE("quota: 1 producer posting as fast as it can and 3 slow ones into a box of 64 with a quota of 16: the slow ones lose nothing") {
  for (const policy pol : {policy::reject, policy::drop_newest, policy::block}) {
    CAPTURE(shmbox::to_string(pol));
    shmtest::segment_guard g(shmtest::unique_name("quota"));
    auto box = shmbox::Box::create(g.name, {.capacity = 64, .slot_size = 64, .overflow = pol, .block_timeout = 20ms, .quota = 16});
    REQUIRE(box);
    CHECK(shmbox::info(*box).lanes.at(0).quota == 16);
    auto owner = shmbox::Owner::acquire(*box);
    REQUIRE(owner);
    constexpr std::uint64_t kSlowCount = 150;
    // The flood: posts until it is killed, retrying nothing.
    child flood({shmtest::helper_path(), "produce", g.name, "1", "100000000", "--no-wait", "--size", "32"});
    const auto ready = flood.read_line(30s);
    REQUIRE(ready.has_value());
    REQUIRE(ready->rfind("ready ", 0) == 0);
    const auto flood_entry = static_cast<std::uint32_t>(std::stoul(ready->substr(6)));
    // Let the flood fill its quota before the slow ones start.
    for (int i = 0; i < 3000 && shmbox::info(*box).depth < 16; ++i) std::this_thread::sleep_for(1ms);
    REQUIRE(shmbox::info(*box).depth >= 16);
    std::vector<std::unique_ptr<child>> slow;
    for (int id = 2; id <= 4; ++id)
      slow.push_back(std::make_unique<child>(std::vector<std::string>{shmtest::helper_path(), "produce", g.name, std::to_string(id),
                                                                      std::to_string(kSlowCount), "--no-wait", "--size", "32",
                                                                      "--pause-us", "5000"}));
    std::vector<std::string> slow_done(slow.size());
    std::map<std::uint64_t, std::uint64_t> got, next_seq;
    std::uint64_t order_errors = 0, most_waiting = 0, samples = 0;
    auto take = [&](const shmbox::message& m) {
      const auto [id, seq] = id_seq(m.data);
      ++got[id];
      if (id != 1 && seq != next_seq[id]) ++order_errors;
      next_seq[id] = seq + 1;
    };
    // A slow owner: one message, then a pause, so that the flood keeps its
    // share full. (It still takes the slow producers' messages much faster
    // than they come: each has a few waiting at most. The room a quota keeps
    // for a producer is the capacity less the others' quotas less what the
    // owner holds, so 4 x 16 in 64 slots holds while each slow one has < 15.)
    const auto deadline = std::chrono::steady_clock::now() + 60s;
    std::size_t finished = 0;
    for (std::uint64_t n = 0; finished < slow.size() && std::chrono::steady_clock::now() < deadline; ++n) {
      shmbox::message m;
      if (owner->receive(m, {.timeout = 5ms}) == shmbox::recv_status::ok) take(m);
      std::this_thread::sleep_for(100us);
      if (n % 512 == 0) {  // (the looks cost this owner ~15 ms: rarely, so that the slow ones' own waiting stays low)
        // Nothing but the flood adds its messages while we look (we are the owner): the scan is exact.
        const shmbox::box_info i = shmbox::info(*box);
        if (const auto* f = entry_of(i, flood_entry)) {
          most_waiting = std::max(most_waiting, f->waiting);
          ++samples;
        }
        for (std::size_t k = 0; k < slow.size(); ++k)
          if (slow_done[k].empty())
            if (auto line = slow[k]->read_line(5ms); line && line->rfind("done", 0) == 0) {
              slow_done[k] = *line;
              ++finished;
            }
      }
    }
    REQUIRE(finished == slow.size());
    // The flood, killed wherever it is (mid-post, mid-wait): its accounting is the slots'.
    flood.kill(SIGKILL);
    REQUIRE(shmtest::killed_by(flood.wait(30s), SIGKILL));
    for (shmbox::message m; owner->receive(m, {.timeout = 300ms}) == shmbox::recv_status::ok;) take(m);
    // The slow producers: every post stored, every message delivered, in order.
    for (std::size_t k = 0; k < slow.size(); ++k) {
      CAPTURE(slow_done[k]);
      CHECK(line_field(slow_done[k], "stored") == std::to_string(kSlowCount));
      CHECK(line_field(slow_done[k], "full") == "0");
      CHECK(line_field(slow_done[k], "dropped") == "0");
      CHECK(line_field(slow_done[k], "timeout") == "0");
      CHECK(line_field(slow_done[k], "over_quota") == "0");
      CHECK(got[k + 2] == kSlowCount);
    }
    CHECK(order_errors == 0);
    // The flood was held at its quota, and refused (or made to wait) there: counted.
    CHECK(samples >= 4);
    CHECK(most_waiting <= 16);
    CHECK(most_waiting >= 8);  // it did fill its share while we looked
    const shmbox::counters c = box->read_counters();
    if (pol != policy::block) CHECK(c.quota_refused > 0);  // (block: the flood waited for its oldest instead, in time)
    CHECK(got[1] > 0);
    if (pol == policy::reject) CHECK(c.rejected == c.quota_refused);
    if (pol == policy::drop_newest) CHECK(c.dropped_newest == c.quota_refused);
    if (pol == policy::block) CHECK(c.timeouts == c.quota_refused);
    CHECK(c.delivered == got[1] + got[2] + got[3] + got[4]);
    shmtest::check_invariant(*box);
  }
}

TEST_CASE("quota: the same flood without a quota does cost the slow producers (the test above can fail)") {
  shmtest::segment_guard g(shmtest::unique_name("noquota"));
  auto box = shmbox::Box::create(g.name, {.capacity = 64, .slot_size = 64, .overflow = policy::reject});
  REQUIRE(box);
  auto owner = shmbox::Owner::acquire(*box);
  REQUIRE(owner);
  child flood({shmtest::helper_path(), "produce", g.name, "1", "100000000", "--no-wait", "--size", "32"});
  REQUIRE(flood.read_line(30s).value_or("").rfind("ready ", 0) == 0);
  for (int i = 0; i < 3000 && shmbox::info(*box).depth < 64; ++i) std::this_thread::sleep_for(1ms);
  child slow({shmtest::helper_path(), "produce", g.name, "2", "50", "--no-wait", "--size", "32", "--pause-us", "1500"});
  std::string done;
  for (const auto deadline = std::chrono::steady_clock::now() + 60s; done.empty() && std::chrono::steady_clock::now() < deadline;) {
    shmbox::message m;
    (void)owner->receive(m, {.timeout = 5ms});
    std::this_thread::sleep_for(100us);
    if (auto line = slow.read_line(5ms); line && line->rfind("done", 0) == 0) done = *line;
  }
  flood.kill(SIGKILL);
  flood.wait(30s);
  CAPTURE(done);
  REQUIRE(!done.empty());
  CHECK(line_field(done, "full") != "0");  // the flood took its room
  shmtest::check_invariant(*box);
}

TEST_CASE("quota: what each policy answers over the quota, counted per producer; a taken message gives its room back") {
  SUBCASE("reject: over_quota, counted rejected and quota_refused") {
    shmtest::segment_guard g(shmtest::unique_name("qrej"));
    auto box = shmbox::Box::create(g.name, {.capacity = 8, .slot_size = 32, .quota = 3});
    REQUIRE(box);
    auto a = shmbox::Producer::attach(*box);
    auto b = shmbox::Producer::attach(*box);
    REQUIRE(a);
    REQUIRE(b);
    for (int i = 0; i < 3; ++i) CHECK(a->post(shmtest::cat("a", std::to_string(i))) == post_status::stored);
    CHECK(a->post("a3") == post_status::over_quota);
    CHECK(a->post("a4") == post_status::over_quota);
    for (int i = 0; i < 3; ++i) CHECK(b->post(shmtest::cat("b", std::to_string(i))) == post_status::stored);  // b has its own quota
    CHECK(b->post("b3") == post_status::over_quota);
    shmbox::box_info i = shmbox::info(*box);
    REQUIRE(entry_of(i, a->entry_index()) != nullptr);
    CHECK(entry_of(i, a->entry_index())->waiting == 3);
    CHECK(entry_of(i, a->entry_index())->quota_refused == 2);
    CHECK(entry_of(i, b->entry_index())->quota_refused == 1);
    CHECK(i.count.rejected == 3);
    CHECK(i.count.quota_refused == 3);
    CHECK(i.count.posted == 9);
    auto owner = shmbox::Owner::acquire(*box);
    shmbox::message m;
    REQUIRE(owner->receive(m, {.timeout = 0ns}) == shmbox::recv_status::ok);
    CHECK(m.data == "a0");
    CHECK(a->post("a5") == post_status::stored);  // a0 taken: room for one more of a's
    CHECK(a->post("a6") == post_status::over_quota);
    i = shmbox::info(*box);
    CHECK(entry_of(i, a->entry_index())->waiting == 3);
    shmtest::check_invariant(*box);
    CHECK(std::string(shmbox::to_string(post_status::over_quota)) == "over-quota");
  }
  SUBCASE("drop_newest: over_quota, counted dropped_newest, the message goes to the dead letters") {
    shmtest::segment_guard dl(shmtest::unique_name("qdl"));
    shmtest::segment_guard g(shmtest::unique_name("qdrop"));
    auto dead = shmbox::Box::create(dl.name, {.capacity = 8, .slot_size = 128});
    REQUIRE(dead);
    auto box = shmbox::Box::create(g.name, {.capacity = 8, .slot_size = 32, .overflow = policy::drop_newest, .dead_letters = dl.name, .quota = 2});
    REQUIRE(box);
    auto a = shmbox::Producer::attach(*box);
    CHECK(a->post("one") == post_status::stored);
    CHECK(a->post("two") == post_status::stored);
    CHECK(a->post("three") == post_status::over_quota);
    const shmbox::counters c = box->read_counters();
    CHECK(c.dropped_newest == 1);
    CHECK(c.quota_refused == 1);
    CHECK(c.dead_lettered == 1);
    auto dead_owner = shmbox::Owner::acquire(*dead);
    shmbox::message m;
    REQUIRE(dead_owner->receive(m, {.timeout = 0ns}) == shmbox::recv_status::ok);
    CHECK(m.data.find("over-quota") != std::string::npos);
    CHECK(m.data.find("three") != std::string::npos);
    shmtest::check_invariant(*box);
  }
  SUBCASE("block: waits for one of its own to be taken, by an owner in another process; times out when none is") {
    shmtest::segment_guard g(shmtest::unique_name("qblock"));
    auto box = shmbox::Box::create(g.name, {.capacity = 8, .slot_size = 32, .overflow = policy::block, .quota = 2});
    REQUIRE(box);
    auto a = shmbox::Producer::attach(*box);
    CHECK(a->post("one") == post_status::stored);
    CHECK(a->post("two") == post_status::stored);
    CHECK(a->post("three", {.timeout = 30ms}) == post_status::timeout);
    CHECK(box->read_counters().timeouts == 1);
    CHECK(box->read_counters().quota_refused == 1);
    // An owner process takes one message when told to: the waiting post gets its room.
    child owner({shmtest::helper_path(), "stash-owner", g.name}, {}, true);
    REQUIRE(shmtest::line_starting(owner, "owned").size() > 0);
    std::thread asker([&] {
      std::this_thread::sleep_for(50ms);
      owner.write_stdin("recv 1\n");
    });
    const auto t0 = std::chrono::steady_clock::now();
    const post_status st = a->post("three", {.timeout = 10s});
    asker.join();
    CHECK(st == post_status::stored);
    CHECK(std::chrono::steady_clock::now() - t0 < 9s);
    CHECK(box->read_counters().timeouts == 1);
  }
}

TEST_CASE("quota: creation refuses what it cannot keep, with a sentence that says why") {
  shmtest::segment_guard g(shmtest::unique_name("qbad"));
  auto refused = [&](shmbox::options o, const std::string& words) {
    auto b = shmbox::Box::create(g.name, o);
    REQUIRE(!b);
    CAPTURE(shmbox::explain(b.error()));
    CHECK(b.error() == shmbox::errc::invalid_argument);
    CHECK(shmbox::explain(b.error()).find(words) != std::string::npos);
  };
  refused({.capacity = 8, .overflow = policy::drop_oldest, .quota = 2}, "drop_oldest");
  refused({.capacity = 8, .overflow = policy::lifo, .quota = 2}, "lifo");
  refused({.capacity = 8, .quota = 9}, "over its capacity");
  refused({.capacity = 8, .max_capacity = 16, .quota = 2}, "resizable");
  refused({.capacity = 8, .stash = 4, .quota = 2}, "stash");
  refused({.capacity = 8, .priority = true, .quota = 2}, "store");
  // Per lane: only the lanes that have one; the others take the fast path.
  auto box = shmbox::Box::create(g.name, {.capacity = 8, .slot_size = 32, .lanes = {{}, {.quota = 1}, {.overflow = policy::drop_oldest}}});
  REQUIRE(box);
  const auto i = shmbox::info(*box);
  CHECK(i.lanes[0].quota == 0);
  CHECK(i.lanes[1].quota == 1);
  CHECK(i.lanes[2].quota == 0);
  auto p = shmbox::Producer::attach(*box);
  CHECK(p->post("x", {.lane = 1}) == post_status::stored);
  CHECK(p->post("y", {.lane = 1}) == post_status::over_quota);
  for (int k = 0; k < 20; ++k) CHECK(shmbox::is_stored(p->post("z", {.lane = 2})));
  CHECK(p->post("c", {.lane = 0}) == post_status::stored);
}

TEST_CASE("quota: a forged quota word or forged slots cost only the box's own posts") {
  shmtest::segment_guard g(shmtest::unique_name("qforge"));
  auto box = shmbox::Box::create(g.name, {.capacity = 8, .slot_size = 32, .mode = 0600, .quota = 2});
  REQUIRE(box);
  // A quota word above the capacity, or on a box without the quota flag, is refused at open as corrupt.
  poke_lane_quota(g.name, 0, 99);
  auto o1 = shmbox::Box::open(g.name);
  REQUIRE(!o1);
  CHECK(o1.error() == shmbox::errc::corrupt);
  CHECK(shmbox::explain(o1.error()).find("quota") != std::string::npos);
  poke_lane_quota(g.name, 0, 2);
  auto o2 = shmbox::Box::open(g.name);
  REQUIRE(o2);
  // The quota read at open is kept: a word changed afterwards changes nothing for this handle.
  auto p = shmbox::Producer::attach(*o2);
  poke_lane_quota(g.name, 0, 8);
  CHECK(p->post("1") == post_status::stored);
  CHECK(p->post("2") == post_status::stored);
  CHECK(p->post("3") == post_status::over_quota);
  shmtest::check_invariant(*o2);
  // shmbox verify checks the quota against the slots (a quota lowered behind the box's back shows).
  poke_lane_quota(g.name, 0, 2);
  auto v = shmbox::verify(g.name);
  REQUIRE(v);
  CHECK(v->ok);
  poke_lane_quota(g.name, 0, 1);
  v = shmbox::verify(g.name);
  REQUIRE(v);
  CHECK(!v->ok);
  bool said = false;
  for (const auto& problem : v->problems) said = said || problem.find("over the lane's quota of 1") != std::string::npos;
  CHECK(said);
}

// Issue 53, item 7: the quota counts the messages of the producer HANDLE
// that posted them, not of the producer-table entry a later process reuses.
TEST_CASE("quota: a producer that takes a gone producer's entry has its whole quota at once (the gone one's messages count against no one)") {
  for (const policy pol : {policy::reject, policy::drop_newest, policy::block}) {
    for (const bool killed : {false, true}) {
      CAPTURE(shmbox::to_string(pol));
      CAPTURE(killed);
      shmtest::segment_guard g(shmtest::unique_name("qreuse"));
      // One producer entry: the second process must take the first one's.
      auto box = shmbox::Box::create(g.name, {.capacity = 8, .slot_size = 64, .overflow = pol, .max_producers = 1,
                                              .block_timeout = 2000ms, .quota = 2});
      REQUIRE(box);
      // A posts its quota (2) and exits; or keeps posting (refused, or
      // waiting for its own to be taken: nobody receives) and is SIGKILLed.
      child a({shmtest::helper_path(), "produce", g.name, "1", killed ? "1000000" : "2", "--no-wait", "--size", "32",
               "--pause-us", killed ? "20000" : "0"});
      const std::string a_ready = a.read_line(30s).value_or("");
      REQUIRE(a_ready.rfind("ready ", 0) == 0);
      if (killed) {
        for (int i = 0; i < 3000 && shmbox::info(*box).depth < 2; ++i) std::this_thread::sleep_for(1ms);
        std::this_thread::sleep_for(50ms);  // over its quota by now
        a.kill(SIGKILL);
        REQUIRE(shmtest::killed_by(a.wait(30s), SIGKILL));
      } else {
        REQUIRE(shmtest::exited_with(a.wait(30s), 0));
      }
      REQUIRE(shmbox::info(*box).depth == 2);
      // B, another process, in the same entry, nobody receiving: its first
      // post is stored at once, and so is its second (block: each within far
      // less than the 2 s block_timeout, which a post over its quota would
      // wait out); a third (reject, drop_newest) is over its quota.
      const bool block = pol == policy::block;
      child b({shmtest::helper_path(), "produce", g.name, "2", block ? "2" : "3", "--no-wait", "--size", "32", "--max-call-ms",
               "1000"});
      const std::string b_ready = b.read_line(30s).value_or("");
      REQUIRE(b_ready.rfind("ready ", 0) == 0);
      CHECK(shmtest::fields(b_ready).at(1) == shmtest::fields(a_ready).at(1));  // the same entry
      const std::string done = b.read_line(30s).value_or("");
      CAPTURE(done);
      CHECK(shmtest::exited_with(b.wait(30s), 0));
      CHECK(line_field(done, "stored") == "2");
      CHECK(line_field(done, "over_quota") == (block ? "0" : "1"));
      CHECK(shmbox::info(*box).depth == 4);  // A's 2 and B's 2
      // The owner takes them all: A's first, then B's, in order.
      auto owner = shmbox::Owner::acquire(*box);
      REQUIRE(owner);
      std::vector<std::pair<std::uint64_t, std::uint64_t>> got;
      for (shmbox::message m; owner->receive(m, {.timeout = 300ms}) == shmbox::recv_status::ok;) got.push_back(id_seq(m.data));
      CHECK(got == std::vector<std::pair<std::uint64_t, std::uint64_t>>{{1, 0}, {1, 1}, {2, 0}, {2, 1}});
      shmtest::check_invariant(*box);
      const auto v = shmbox::verify(g.name);
      REQUIRE(v);
      for (const auto& problem : v->problems) FAIL_CHECK(problem);
    }
  }
}

TEST_CASE("quota: 20 one-message `shmbox post` runs into a box with --quota 4 and no owner: none is refused while the box has room") {
  shmtest::segment_guard g(shmtest::unique_name("qcli"));
  REQUIRE(shmtest::cli({"create", g.name, "--capacity", "32", "--slot-size", "64", "--quota", "4"}).code == 0);
  for (int i = 0; i < 20; ++i) {
    const auto r = shmtest::cli({"post", g.name, "m" + std::to_string(i)});
    CAPTURE(i);
    CAPTURE(r.err);
    CHECK(r.code == 0);
    CHECK(r.err.find("over quota") == std::string::npos);
  }
  auto box = shmbox::Box::open(g.name);
  REQUIRE(box);
  const shmbox::box_info i = shmbox::info(*box);
  CHECK(i.depth == 20);
  CHECK(i.count.quota_refused == 0);
  CHECK(i.count.rejected == 0);
  shmtest::check_invariant(*box);
  // verify counts each holder's messages since it attached: none is over its quota
  const auto v = shmbox::verify(g.name);
  REQUIRE(v);
  for (const auto& problem : v->problems) FAIL_CHECK(problem);
  CHECK(v->ok);
  // An attached producer still has its quota of 4, counted from when it attached.
  auto p = shmbox::Producer::attach(*box);
  REQUIRE(p);
  for (int k = 0; k < 4; ++k) CHECK(p->post("x") == post_status::stored);
  CHECK(p->post("x") == post_status::over_quota);
}
