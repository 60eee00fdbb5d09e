// Lanes: a control lane read first with capacity of its own, priority lanes
// read in order, FIFO within each lane, per-lane capacity, policy and counters.
#include <doctest/doctest.h>

#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "checks.hpp"
#include "shmbox/shmbox.hpp"
#include "support.hpp"

using namespace std::chrono_literals;
using shmbox::policy;
using shmbox::post_status;

TEST_CASE("lanes: interleaved posts on lanes 0, 1, 2 are received 0 first, then 1, then 2, FIFO within each") {
  shmtest::segment_guard g(shmtest::unique_name("lanes"));
  auto box = shmbox::Box::create(g.name, {.capacity = 16, .slot_size = 16, .lanes = {{}, {}, {}}});
  REQUIRE(box);
  CHECK(box->lane_count() == 3);
  CHECK(box->capacity() == 48);
  auto p = shmbox::Producer::attach(*box);
  const std::uint32_t order[] = {2, 1, 0, 2, 0, 1, 1, 2, 0, 2};
  int n = 0;
  for (std::uint32_t lane : order) REQUIRE(p->post(shmtest::cat("L", std::to_string(lane), "-", std::to_string(n++)), {.lane = lane}) == post_status::stored);
  auto owner = shmbox::Owner::acquire(*box);
  std::vector<shmbox::message> got;
  REQUIRE(owner->receive_batch(got, {.max = 100, .timeout = 0ns}) == shmbox::recv_status::ok);
  std::vector<std::string> data;
  for (const auto& m : got) data.push_back(m.data);
  CHECK(data == std::vector<std::string>{"L0-2", "L0-4", "L0-8", "L1-1", "L1-5", "L1-6", "L2-0", "L2-3", "L2-7", "L2-9"});
  for (const auto& m : got) CHECK(m.lane == static_cast<std::uint32_t>(m.data[1] - '0'));
  // A lane the box does not have is an error that says so.
  CHECK(p->post("x", {.lane = 3}) == post_status::error);
  CHECK(shmbox::explain(p->last_error()).find("has 3 lanes") != std::string::npos);
}

TEST_CASE("lanes: a full user lane never blocks or drops a control message; per-lane capacity, policy, counters") {
  shmtest::segment_guard g(shmtest::unique_name("control"));
  auto box = shmbox::Box::create(
      g.name, {.capacity = 4,
               .slot_size = 16,
               .overflow = policy::reject,
               .lanes = {{.capacity = 2}, {.capacity = 3, .overflow = policy::drop_oldest}, {.overflow = policy::block}}});
  REQUIRE(box);
  auto p = shmbox::Producer::attach(*box);
  for (int i = 0; i < 10; ++i) CHECK(shmbox::is_stored(p->post(shmtest::cat("user", std::to_string(i)), {.lane = 1})));  // lane 1 full, evicting
  CHECK(p->post("a", {.lane = 2}) == post_status::stored);
  for (int i = 0; i < 3; ++i) p->post("b", {.lane = 2, .timeout = 0ms});                                    // lane 2 full: block, no wait
  CHECK(p->post("stop", {.lane = 0}) == post_status::stored);                                   // control still goes in
  CHECK(p->post("now", {.lane = 0}) == post_status::stored);
  CHECK(p->post("third", {.lane = 0}) == post_status::full);  // the control lane's own capacity (2), reject
  const shmbox::box_info info = shmbox::info(*box);
  REQUIRE(info.lanes.size() == 3);
  CHECK(info.lanes[0].capacity == 2);
  CHECK(info.lanes[1].capacity == 3);
  CHECK(info.lanes[2].capacity == 4);
  CHECK(info.lanes[0].overflow == policy::reject);
  CHECK(info.lanes[1].overflow == policy::drop_oldest);
  CHECK(info.lanes[2].overflow == policy::block);
  CHECK(info.lanes[0].depth == 2);
  CHECK(info.lanes[1].depth == 3);
  CHECK(info.lanes[1].count.dropped_oldest == 7);
  CHECK(info.lanes[0].count.rejected == 1);
  auto owner = shmbox::Owner::acquire(*box);
  shmbox::message m;
  REQUIRE(owner->try_receive(m) == shmbox::recv_status::ok);
  CHECK(m.data == "stop");  // control first, whatever is waiting elsewhere
  CHECK(m.lane == 0);
  REQUIRE(owner->try_receive(m) == shmbox::recv_status::ok);
  CHECK(m.data == "now");
  REQUIRE(owner->try_receive(m) == shmbox::recv_status::ok);
  CHECK(m.data == "user7");  // then lane 1, its newest three kept (drop_oldest)
  shmtest::check_invariant(*box);
}

TEST_CASE("lanes: priorities hold with 4 producer processes") {
  shmtest::segment_guard g(shmtest::unique_name("prio"));
  auto box = shmbox::Box::create(g.name, {.capacity = 4096, .slot_size = 64, .lanes = {{}, {}, {}, {}}});
  REQUIRE(box);
  std::vector<std::unique_ptr<shmtest::child>> producers;
  for (int id = 0; id < 4; ++id) {
    // Producer `id` posts 1000 messages into lane 3 - id.
    producers.push_back(std::make_unique<shmtest::child>(
        std::vector<std::string>{shmtest::helper_path(), "produce", g.name, std::to_string(id), "1000", "--no-wait",
                                 "--lane", std::to_string(3 - id)},
        std::vector<std::string>{}, true));
  }
  for (auto& p : producers) CHECK(shmtest::exited_with(p->wait(60s), 0));
  auto owner = shmbox::Owner::acquire(*box);
  std::vector<shmbox::message> got;
  while (owner->receive_batch(got, {.max = 10000, .timeout = 0ns}) == shmbox::recv_status::ok) {
  }
  REQUIRE(got.size() == 4000);
  std::uint32_t lane = 0;
  std::map<std::uint64_t, std::uint64_t> next;
  for (const auto& m : got) {
    CHECK(m.lane >= lane);  // never a higher lane before a lower one
    lane = m.lane;
    std::uint64_t id = 0, seq = 0;
    std::memcpy(&id, m.data.data(), 8);
    std::memcpy(&seq, m.data.data() + 8, 8);
    CHECK(id == 3 - m.lane);
    CHECK(seq == next[id]++);  // FIFO within the lane
  }
  shmtest::check_invariant(*box);
}

// Issue 13 item 9: a plain post on a box with several lanes goes to the
// default user lane (1 unless chosen at creation), never to the control
// lane: ordinary traffic does not eat the room kept for control messages.
// Before: plain posts went to lane 0.
TEST_CASE("lanes: plain posts go to the default lane (1, or the one chosen at creation); the control lane only takes explicit posts") {
  {
    shmtest::segment_guard g(shmtest::unique_name("deflane"));
    auto box = shmbox::Box::create(g.name, {.capacity = 4, .slot_size = 16, .lanes = {{.capacity = 2}, {}, {}}});
    REQUIRE(box);
    CHECK(box->default_lane() == 1);
    CHECK(shmbox::info(*box).default_lane == 1);
    CHECK(shmbox::Box::inspect(g.name)->default_lane() == 1);  // read back from the segment
    auto p = shmbox::Producer::attach(*box);
    for (int i = 0; i < 4; ++i) CHECK(p->post(shmtest::cat("plain", std::to_string(i))) == post_status::stored);
    CHECK(p->post("fifth") == post_status::full);  // lane 1 is full; the control lane's room is untouched
    std::string_view two[] = {"b1", "b2"};
    CHECK(p->post_batch(two) == 0);  // batches and loans go there too
    CHECK_FALSE(p->loan());
    CHECK(p->post("stop", {.lane = 0}) == post_status::stored);  // control: explicit only
    CHECK(p->post("now", {.lane = 0}) == post_status::stored);
    const shmbox::box_info info = shmbox::info(*box);
    CHECK(info.lanes[0].depth == 2);
    CHECK(info.lanes[1].depth == 4);
    CHECK(info.lanes[2].depth == 0);
    CHECK(info.lanes[1].count.rejected == 3);  // the post, the batch's first message and the loan (counted as a post)
  }
  {
    shmtest::segment_guard g(shmtest::unique_name("deflane2"));
    auto box = shmbox::Box::create(g.name, {.capacity = 4, .slot_size = 16, .lanes = {{}, {}, {}}, .default_lane = 2});
    REQUIRE(box);
    CHECK(box->default_lane() == 2);
    auto p = shmbox::Producer::attach(shmbox::Box::open(g.name).value());
    CHECK(p->post("x") == post_status::stored);
    std::string_view two[] = {"y", "z"};
    CHECK(p->post_batch(two) == 2);
    CHECK(shmbox::info(*box).lanes[2].depth == 3);
    CHECK(shmbox::info(*box).lanes[0].depth + shmbox::info(*box).lanes[1].depth == 0);
  }
  {
    shmtest::segment_guard g(shmtest::unique_name("deflane1"));  // one lane: lane 0 is the only lane
    auto box = shmbox::Box::create(g.name, {.capacity = 4, .slot_size = 16});
    REQUIRE(box);
    CHECK(box->default_lane() == 0);
    CHECK(shmbox::Producer::attach(*box)->post("x") == post_status::stored);
    CHECK(shmbox::info(*box).lanes[0].depth == 1);
  }
}

TEST_CASE("usage(): depth and capacity per lane and in total") {
  shmtest::segment_guard g(shmtest::unique_name("usage"));
  auto box = shmbox::Box::create(g.name, {.capacity = 4, .slot_size = 16, .lanes = {{.capacity = 2}, {}}});
  auto p = shmbox::Producer::attach(*box);
  p->post("a", {.lane = 0});
  p->post("b", {.lane = 1});
  p->post("c", {.lane = 1});
  auto owner = shmbox::Owner::acquire(*box);
  const shmbox::usage_info u = owner->usage();
  CHECK(u.depth == std::vector<std::uint64_t>{1, 2});
  CHECK(u.depth_total == 3);
  CHECK(u.capacity == std::vector<std::uint32_t>{2, 4});
  CHECK(u.capacity_total == 6);
  CHECK(u.dropped_since_delivery == 0);
}

TEST_CASE("lanes: bad lane options are clear errors") {
  shmtest::segment_guard g(shmtest::unique_name("badlanes"));
  shmbox::options o;
  o.lanes.resize(9);
  auto r = shmbox::Box::create(g.name, o);
  REQUIRE_FALSE(r);
  CHECK(r.error() == shmbox::errc::invalid_argument);
  CHECK(shmbox::explain(r.error()).find("9 lanes") != std::string::npos);
  o.lanes = {{.capacity = shmbox::kMaxCapacity + 1}};
  CHECK(shmbox::Box::create(g.name, o).error() == shmbox::errc::invalid_argument);
}

TEST_CASE("dead letters: evicted, dropped and replaced messages reach the dead-letter box with their origin") {
  shmtest::segment_guard dl(shmtest::unique_name("dl"));
  shmtest::segment_guard a(shmtest::unique_name("dlold"));
  shmtest::segment_guard b(shmtest::unique_name("dlnew"));
  shmtest::segment_guard c(shmtest::unique_name("dllifo"));
  REQUIRE(shmbox::Box::create(dl.name, {.capacity = 64, .slot_size = 128}));
  CHECK(shmbox::Box::create(a.name, {.dead_letters = a.name}).error() == shmbox::errc::invalid_argument);  // not itself
  auto old_box = shmbox::Box::create(a.name, {.capacity = 2, .slot_size = 16, .overflow = policy::drop_oldest, .dead_letters = dl.name});
  auto new_box = shmbox::Box::create(b.name, {.capacity = 2, .slot_size = 16, .overflow = policy::drop_newest, .dead_letters = dl.name});
  auto lifo_box = shmbox::Box::create(c.name, {.capacity = 2, .slot_size = 16, .overflow = policy::lifo, .dead_letters = dl.name});
  REQUIRE(old_box);
  REQUIRE(new_box);
  REQUIRE(lifo_box);
  CHECK(shmbox::info(*old_box).dead_letters == dl.name);
  // Producers are separate programs (the CLI).
  for (const auto* g : {&a, &b, &c}) {
    const auto r = shmtest::run({shmtest::cli_path(), "post", g->name, "m1", "m2", "m3", "m4"});
    CHECK((r.code == 0 || r.code == 3));  // 3: drop-newest refused two (and said so)
  }
  auto owner = shmbox::Owner::acquire(dl.name);
  REQUIRE(owner);
  std::vector<shmbox::message> got;
  while (owner->receive_batch(got, {.max = 100, .timeout = 0ns}) == shmbox::recv_status::ok) {
  }
  std::vector<std::string> letters;
  for (const auto& m : got) letters.push_back(m.data);
  const std::vector<std::string> expect = {
      shmtest::cat("[", a.name, " dropped-oldest] m1"), shmtest::cat("[", a.name, " dropped-oldest] m2"),
      shmtest::cat("[", b.name, " dropped-newest] m3"), shmtest::cat("[", b.name, " dropped-newest] m4"),
      shmtest::cat("[", c.name, " replaced] m2"),       shmtest::cat("[", c.name, " replaced] m3")};
  CHECK(letters == expect);
  // The counters agree: each box forwarded what it lost, and the dead-letter box stored them.
  for (const auto* box : {&*old_box, &*new_box, &*lifo_box}) {
    const shmbox::counters k = box->read_counters();
    CHECK(k.dead_lettered == 2);
    CHECK(k.dead_letter_failed == 0);
    CHECK(k.dead_lettered == k.dropped_oldest + k.dropped_newest);
  }
  CHECK(shmbox::Box::inspect(dl.name)->read_counters().stored == 6);
  auto st = shmtest::run({shmtest::cli_path(), "stat", a.name});
  CHECK(st.out.find(shmtest::cat("-> box '", dl.name, "', 2 forwarded")) != std::string::npos);
}

TEST_CASE("dead letters: with dead_letter_refused, refused posts (full, timed out, too large) from 4 producer processes are forwarded and counted") {
  shmtest::segment_guard dl(shmtest::unique_name("dlr"));
  shmtest::segment_guard rej(shmtest::unique_name("dlrrej"));
  shmtest::segment_guard blk(shmtest::unique_name("dlrblk"));
  shmtest::segment_guard plain(shmtest::unique_name("dlrplain"));
  REQUIRE(shmbox::Box::create(dl.name, {.capacity = 256, .slot_size = 256}));
  // Needs a dead-letter box to go to.
  CHECK(shmbox::Box::create(rej.name, {.dead_letter_refused = true}).error() == shmbox::errc::invalid_argument);
  auto r = shmbox::Box::create(rej.name, {.capacity = 2, .slot_size = 16, .overflow = policy::reject, .dead_letters = dl.name,
                                          .dead_letter_refused = true});
  auto b = shmbox::Box::create(blk.name, {.capacity = 1, .slot_size = 16, .overflow = policy::block,
                                          .block_timeout = 20ms, .dead_letters = dl.name, .dead_letter_refused = true});
  auto n = shmbox::Box::create(plain.name, {.capacity = 1, .slot_size = 16, .overflow = policy::reject, .dead_letters = dl.name});
  REQUIRE(r);
  REQUIRE(b);
  REQUIRE(n);
  CHECK(shmbox::info(*r).dead_letter_refused);
  CHECK_FALSE(shmbox::info(*n).dead_letter_refused);
  const std::string big(40, 'x');  // larger than the 16-byte slot
  // Four producer processes (the CLI) per box; nobody receives, so all but
  // the first `capacity` fitting messages are refused.
  for (const auto* g : {&rej, &blk, &plain}) {
    std::vector<std::unique_ptr<shmtest::child>> ps;
    for (int id = 0; id < 4; ++id)
      ps.push_back(std::make_unique<shmtest::child>(std::vector<std::string>{
          shmtest::cli_path(), "post", g->name, shmtest::cat("p", std::to_string(id), "a"), shmtest::cat("p", std::to_string(id), "b"), big}));
    for (auto& p : ps) {
      CHECK(shmtest::exited_with(p->wait(60s), 1));  // 1: a message too large (the others refused or stored)
    }
  }
  auto owner = shmbox::Owner::acquire(dl.name);
  REQUIRE(owner);
  std::vector<shmbox::message> got;
  while (owner->receive_batch(got, {.max = 256, .timeout = 0ns}) == shmbox::recv_status::ok) {
  }
  std::map<std::string, int> by_reason;  // "box reason" -> letters
  for (const auto& m : got) {
    const auto end = m.data.find("] ");
    REQUIRE(end != std::string::npos);
    by_reason[m.data.substr(1, end - 1)]++;
    const std::string body = m.data.substr(end + 2);
    CHECK_MESSAGE((body == big || (body.size() == 3 && body[0] == 'p')), m.data);  // whole messages
  }
  // reject box: 8 fitting messages, 2 stored, 6 rejected; 4 too large.
  CHECK(by_reason[shmtest::cat(rej.name, " rejected")] == 6);
  CHECK(by_reason[shmtest::cat(rej.name, " too-large")] == 4);
  // block box: 1 stored, 7 timed out (nobody receives), 4 too large.
  CHECK(by_reason[shmtest::cat(blk.name, " timed-out")] == 7);
  CHECK(by_reason[shmtest::cat(blk.name, " too-large")] == 4);
  // Without the option, refusals stay with their senders.
  CHECK(by_reason.count(shmtest::cat(plain.name, " rejected")) == 0);
  CHECK(by_reason.count(shmtest::cat(plain.name, " too-large")) == 0);
  CHECK(got.size() == 21);
  const shmbox::counters kr = r->read_counters(), kb = b->read_counters(), kn = n->read_counters();
  CHECK(kr.rejected == 6);
  CHECK(kr.too_large == 4);
  CHECK(kr.dead_lettered == 10);
  CHECK(kb.timeouts == 7);
  CHECK(kb.dead_lettered == 11);
  CHECK(kn.rejected + kn.too_large == 11);
  CHECK(kn.dead_lettered == 0);
  for (const shmbox::counters& k : {kr, kb, kn}) CHECK(k.dead_letter_failed == 0);
  for (const auto* box : {&*r, &*b, &*n}) shmtest::check_invariant(*box);
  // A full dead-letter box: the refusal is still the sender's answer, the
  // failed forward is counted.
  auto dl_prod = shmbox::Producer::attach(*r);
  REQUIRE(dl_prod);
  auto fill = shmbox::Producer::attach(dl.name);
  REQUIRE(fill);
  while (shmbox::is_stored(fill->post("filler"))) {
  }
  CHECK(dl_prod->post("one-more") == post_status::full);
  CHECK(r->read_counters().dead_letter_failed == 1);
  auto st = shmtest::run({shmtest::cli_path(), "stat", rej.name});
  CHECK(st.out.find("(drops and refused posts)") != std::string::npos);
  // The CLI: the option needs --dead-letters.
  const std::string other = shmtest::unique_name("dlrcli");
  auto bad = shmtest::run({shmtest::cli_path(), "create", other, "--dead-letter-refused"});
  CHECK(bad.code == 2);
  CHECK(bad.err.find("--dead-letter-refused needs --dead-letters") != std::string::npos);
  shmtest::segment_guard cli_box(other);
  CHECK(shmtest::run({shmtest::cli_path(), "create", other, "--dead-letters", dl.name, "--dead-letter-refused"}).code == 0);
  CHECK(shmbox::info(*shmbox::Box::inspect(other)).dead_letter_refused);
}

TEST_CASE("dead letters: a missing or full dead-letter box loses nothing else and is counted") {
  shmtest::segment_guard a(shmtest::unique_name("dlmiss"));
  const std::string missing = shmtest::unique_name("nosuchbox");
  auto box = shmbox::Box::create(a.name, {.capacity = 1, .slot_size = 16, .overflow = policy::drop_newest, .dead_letters = missing});
  REQUIRE(box);
  auto p = shmbox::Producer::attach(*box);
  CHECK(p->post("kept") == post_status::stored);
  CHECK(p->post("lost") == post_status::dropped);
  const shmbox::counters k = box->read_counters();
  CHECK(k.dead_letter_failed == 1);
  CHECK(k.dead_lettered == 0);
  shmtest::check_invariant(*box);
}
