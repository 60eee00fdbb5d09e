// The owner's stash (Owner::stash / unstash_all, options::stash, ring.hpp
// THE STASH): order, capacity, the counters, and an owner killed between
// stash and unstash (and at the stash's own steps) losing nothing.
#include <doctest/doctest.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "checks.hpp"
#include "shmbox/shmbox.hpp"
#include "support.hpp"

using namespace std::chrono_literals;
using shmbox::policy;
using shmbox::post_status;
using shmbox::recv_status;

namespace {

using shmtest::tag;

// Every message there is now, as "data" or "data*" (redelivered).
std::vector<std::string> drain(shmbox::Owner& o) {
  std::vector<shmbox::message> got;
  while (o.receive_batch(got, {.max = 4096, .timeout = 0ns}) == recv_status::ok) {
  }
  std::vector<std::string> out;
  for (const auto& m : got) {
    out.push_back(m.data);
    if (m.redelivered) out.back() += '*';
  }
  return out;
}

shmbox::message receive_one(shmbox::Owner& o) {
  shmbox::message m;
  REQUIRE(o.receive(m, {.timeout = 2s}) == recv_status::ok);
  return m;
}

using shmtest::ask;

// Σ stashed = Σ unstashed + parked, and nothing counted twice.
void check_stash_ledger(const shmbox::Box& box, std::uint64_t stashed, std::uint64_t unstashed) {
  const auto c = box.read_counters();
  CHECK(c.stashed == stashed);
  CHECK(c.unstashed == unstashed);
  CHECK(shmbox::info(box).parked == stashed - unstashed);
}

}  // namespace

TEST_CASE("stash: creation errors, and stash errors that say what to do") {
  shmtest::segment_guard g(shmtest::unique_name("stasherr"));
  CHECK(shmbox::Box::create(g.name, {.capacity = 8, .overflow = policy::lifo, .stash = 4}).error() ==
        shmbox::errc::invalid_argument);
  CHECK(shmbox::Box::create(g.name, {.capacity = 8, .lease = 1000ms, .stash = 4}).error() == shmbox::errc::invalid_argument);
  {
    auto plain = shmbox::Box::create(g.name, {.capacity = 8});
    REQUIRE(plain);
    auto o = shmbox::Owner::acquire(*plain);
    REQUIRE(o);
    CHECK(o->stash("x", 0) == recv_status::error);
    CHECK(o->last_error() == shmbox::errc::invalid_argument);
    CHECK(shmbox::explain(o->last_error()).find("--stash") != std::string::npos);
  }
  REQUIRE(shmbox::Box::remove(g.name));
  auto box = shmbox::Box::create(g.name, {.capacity = 4, .slot_size = 16, .stash = 8});
  REQUIRE(box);
  auto o = shmbox::Owner::acquire(*box);
  REQUIRE(o);
  CHECK(o->stash(std::string(17, 'x'), 0) == recv_status::error);
  CHECK(o->last_error() == shmbox::errc::too_large);
  CHECK(o->stash("x", 1) == recv_status::error);  // no lane 1
  CHECK(o->last_error() == shmbox::errc::invalid_argument);
  // A lane of 4 takes 3 parked: the fourth would leave its producers no room.
  for (int i = 0; i < 3; ++i) CHECK(o->stash(tag('s', i), 0) == recv_status::ok);
  CHECK(o->stash("s3", 0) == recv_status::error);
  CHECK(o->last_error() == shmbox::errc::stash_full);
  CHECK(shmbox::explain(o->last_error()).find("unstash") != std::string::npos);
  CHECK(o->stashed() == 3);
  // The entries themselves run out too.
  REQUIRE(shmbox::Box::remove(g.name));
  auto small = shmbox::Box::create(g.name, {.capacity = 64, .stash = 2});
  REQUIRE(small);
  auto o2 = shmbox::Owner::acquire(*small);
  REQUIRE(o2);
  CHECK(o2->stash("a", 0) == recv_status::ok);
  CHECK(o2->stash("b", 0) == recv_status::ok);
  CHECK(o2->stash("c", 0) == recv_status::error);
  CHECK(o2->last_error() == shmbox::errc::stash_full);
  CHECK(shmbox::explain(o2->last_error()).find("--stash") != std::string::npos);
}

TEST_CASE("stash: unstash_all delivers the parked messages next, in stash order, before every lane") {
  shmtest::segment_guard g(shmtest::unique_name("stashord"));
  auto box = shmbox::Box::create(g.name, {.capacity = 64, .lanes = {{}, {}, {}}, .stash = 16});
  REQUIRE(box);
  auto o = shmbox::Owner::acquire(*box);
  REQUIRE(o);
  auto p = shmbox::Producer::attach(*box);
  REQUIRE(p);
  for (int i = 1; i <= 6; ++i) REQUIRE(p->post(tag('m', i), {.lane = 2}) == post_status::stored);
  // Handle m1..m3: park m1 and m3 (waiting for something), handle m2.
  const auto m1 = receive_one(*o), m2 = receive_one(*o), m3 = receive_one(*o);
  CHECK(m2.data == "m2");
  REQUIRE(o->stash(m1) == recv_status::ok);
  REQUIRE(o->stash(m3) == recv_status::ok);
  CHECK(o->stashed() == 2);
  // Parked ones stay parked: the lane goes on.
  CHECK(receive_one(*o).data == "m4");
  // The dump shows them first, marked.
  const auto peeked = shmbox::peek(*box, 100);
  REQUIRE(peeked.size() == 4);
  CHECK(peeked[0].data == "m1");
  CHECK(peeked[0].stash == "parked");
  CHECK(peeked[1].data == "m3");
  CHECK(peeked[2].stash.empty());
  auto dump = shmtest::run({shmtest::cli_path(), "dump", g.name});
  CHECK(dump.out.find("[stash: parked]") != std::string::npos);
  auto stat = shmtest::run({shmtest::cli_path(), "stat", g.name});
  CHECK(stat.out.find("2 parked of 16 entries (stashed 2, unstashed 0") != std::string::npos);
  auto js = nlohmann::json::parse(shmtest::run({shmtest::cli_path(), "stat", g.name, "--json"}).out);
  CHECK(js["stash"]["entries"] == 16);
  CHECK(js["stash"]["parked"] == 2);
  CHECK(js["lanes"][2]["parked"] == 2);
  CHECK(js["counters"]["stashed"] == 2);
  // A control message arrives; then unstash: m1, m3 come before it and before m5, m6.
  REQUIRE(p->post("ctl", {.lane = 0}) == post_status::stored);
  CHECK(o->unstash_all() == 2);
  CHECK(o->stashed() == 0);
  CHECK(o->unstashed_waiting() == 2);
  CHECK(shmbox::peek(*box, 1)[0].stash == "unstashed");
  CHECK(drain(*o) == std::vector<std::string>{"m1", "m3", "ctl", "m5", "m6"});
  check_stash_ledger(*box, 2, 2);
  // Stash again after an unstash; a later unstash comes after earlier unstashed ones still waiting.
  REQUIRE(o->stash("x1", 1) == recv_status::ok);
  CHECK(o->unstash_all() == 1);
  REQUIRE(o->stash("x2", 2) == recv_status::ok);
  REQUIRE(o->stash("x3", 1) == recv_status::ok);
  CHECK(o->unstash_all() == 2);
  // One at a time through every receive form.
  CHECK(receive_one(*o).data == "x1");
  shmbox::batch b;
  REQUIRE(o->read(b, {.max = 1, .timeout = 0ns}) == recv_status::ok);
  CHECK(b[0] == "x2");
  CHECK(b.lane(0) == 2);
  REQUIRE(o->commit() == recv_status::ok);
  std::string seen;
  CHECK(o->receive_in_place([&](const shmbox::message_view& v) { seen = std::string(v.data); }, {.max = 1, .timeout = 0ns}) ==
        recv_status::ok);
  CHECK(seen == "x3");
  check_stash_ledger(*box, 5, 5);
  CHECK(shmtest::run({shmtest::cli_path(), "verify", g.name}).code == 0);
}

TEST_CASE("stash: parked messages count against their lane's capacity; a blocked producer process gets in when they leave") {
  shmtest::segment_guard g(shmtest::unique_name("stashcap"));
  SUBCASE("reject") {
    auto box = shmbox::Box::create(g.name, {.capacity = 4, .overflow = policy::reject, .stash = 4});
    REQUIRE(box);
    auto o = shmbox::Owner::acquire(*box);
    REQUIRE(o);
    auto p = shmbox::Producer::attach(*box);
    REQUIRE(p);
    REQUIRE(p->post("a") == post_status::stored);
    REQUIRE(p->post("b") == post_status::stored);
    REQUIRE(o->stash(receive_one(*o)) == recv_status::ok);
    REQUIRE(o->stash(receive_one(*o)) == recv_status::ok);
    // 2 parked of 4: two more fit, the third is refused.
    CHECK(p->post("c") == post_status::stored);
    CHECK(p->post("d") == post_status::stored);
    CHECK(p->post("e") == post_status::full);
    CHECK(box->read_counters().rejected == 1);
    CHECK(shmbox::info(*box).lanes[0].parked == 2);
    CHECK(o->unstash_all() == 2);
    // Unstashed but not yet received: still parked, still counted.
    CHECK(p->post("e") == post_status::full);
    CHECK(drain(*o) == std::vector<std::string>{"a", "b", "c", "d"});
    for (const char* m : {"e", "f", "g", "h"}) CHECK(p->post(m) == post_status::stored);
    CHECK(p->post("i") == post_status::full);
    // post_batch claims runs of free slots at once: the gate limits them too.
    CHECK(drain(*o) == std::vector<std::string>{"e", "f", "g", "h"});
    REQUIRE(p->post("j") == post_status::stored);
    REQUIRE(o->stash(receive_one(*o)) == recv_status::ok);  // 1 parked of 4: room for 3
    const std::vector<std::string_view> run{"k", "l", "m", "n", "o"};
    post_status last = post_status::stored;
    CHECK(p->post_batch(run, {}, &last) == 3);
    CHECK(last == post_status::full);
    CHECK(shmbox::info(*box).lanes[0].parked == 1);
    CHECK(o->unstash_all() == 1);
    CHECK(drain(*o) == std::vector<std::string>{"j", "k", "l", "m"});
  }
  SUBCASE("drop_oldest evicts from the lane, never a parked message") {
    auto box = shmbox::Box::create(g.name, {.capacity = 4, .overflow = policy::drop_oldest, .stash = 4});
    REQUIRE(box);
    auto o = shmbox::Owner::acquire(*box);
    REQUIRE(o);
    auto p = shmbox::Producer::attach(*box);
    REQUIRE(p);
    REQUIRE(p->post("p") == post_status::stored);
    REQUIRE(o->stash(receive_one(*o)) == recv_status::ok);
    for (int i = 0; i < 6; ++i) (void)p->post(tag('n', i));
    CHECK(box->read_counters().dropped_oldest == 3);  // room for 3 beside the parked one
    o->unstash_all();
    CHECK(drain(*o) == std::vector<std::string>{"p", "n3", "n4", "n5"});
  }
  SUBCASE("block") {
    auto box = shmbox::Box::create(g.name, {.capacity = 3, .overflow = policy::block, .stash = 4});
    REQUIRE(box);
    auto o = shmbox::Owner::acquire(*box);
    REQUIRE(o);
    REQUIRE(shmtest::run({shmtest::cli_path(), "post", g.name, "a", "b", "c"}).code == 0);
    REQUIRE(o->stash(receive_one(*o)) == recv_status::ok);  // a parked: room for 2, and b, c are there
    shmtest::child blocked({shmtest::cli_path(), "post", g.name, "--timeout", "20000", "d"});
    // It cannot get in while a is parked and b, c wait: prove it is waiting (the
    // box stays at b, c), then take b: room for one.
    CHECK(!blocked.read_line(300ms));
    CHECK(shmbox::info(*box).depth == 2);
    CHECK(receive_one(*o).data == "b");
    CHECK(shmtest::exited_with(blocked.wait(30s), 0));
    o->unstash_all();
    CHECK(drain(*o) == std::vector<std::string>{"a", "c", "d"});
    CHECK(box->read_counters().timeouts == 0);
  }
}

TEST_CASE("stash: an owner SIGKILLed between stash and unstash; the heir receives the parked messages first, flagged") {
  shmtest::segment_guard g(shmtest::unique_name("stashkill"));
  auto box = shmbox::Box::create(g.name, {.capacity = 64, .stash = 16});
  REQUIRE(box);
  // Four producer processes post 5 messages each.
  std::vector<std::unique_ptr<shmtest::child>> producers;
  for (int k = 0; k < 4; ++k) {
    std::vector<std::string> argv{shmtest::cli_path(), "post", g.name};
    for (int i = 0; i < 5; ++i) argv.push_back(tag('p', k * 10 + i));
    producers.push_back(std::make_unique<shmtest::child>(argv));
  }
  for (auto& c : producers) REQUIRE(shmtest::exited_with(c->wait(30s), 0));
  std::vector<std::string> posted;
  for (const auto& m : shmbox::peek(*box, 100)) posted.push_back(m.data);
  REQUIRE(posted.size() == 20);
  {
    shmtest::child owner({shmtest::helper_path(), "stash-owner", g.name}, {}, true);
    REQUIRE(shmtest::line_starting(owner, "owned").size() > 0);
    // It reads 8, parks them (read, stash, commit: no window that loses one), handles 4 more.
    CHECK(ask(owner, "read 8").rfind("read 8", 0) == 0);
    CHECK(ask(owner, "stash-read") == "stashed 8");
    CHECK(ask(owner, "recv 4 1000").rfind("got 4", 0) == 0);
    CHECK(ask(owner, "stat") == "parked 8 front 0");
    CHECK(shmbox::info(*box).parked == 8);
    owner.kill(SIGKILL);
    REQUIRE(shmtest::killed_by(owner.wait(10s), SIGKILL));
  }
  // More arrive meanwhile.
  REQUIRE(shmtest::run({shmtest::cli_path(), "post", g.name, "late1", "late2"}).code == 0);
  shmtest::child heir({shmtest::helper_path(), "stash-owner", g.name}, {}, true);
  REQUIRE(shmtest::line_starting(heir, "owned").size() > 0);
  const auto got = shmtest::fields(ask(heir, "recv 100 1000"));
  REQUIRE(got.size() == 2 + 8 + 8 + 2);
  std::vector<std::string> expect{"got", "18"};
  for (int i = 0; i < 8; ++i) {
    expect.push_back(posted[i]);  // the parked ones, in stash order, flagged
    expect.back() += '*';
  }
  for (int i = 12; i < 20; ++i) expect.push_back(posted[i]);       // the rest of the lane
  expect.push_back("late1");
  expect.push_back("late2");
  CHECK(got == expect);
  check_stash_ledger(*box, 8, 8);
  const auto c = box->read_counters();
  CHECK(c.delivered == 22);  // 8 read and parked + 4 handled + 10 (the lane's rest): each lane message once
  CHECK(c.stored == 22);
  heir.close_stdin();
  CHECK(shmtest::exited_with(heir.wait(10s), 0));
  CHECK(shmtest::run({shmtest::cli_path(), "verify", g.name}).code == 0);
}

TEST_CASE("stash: the fault matrix: an owner killed inside stash and inside the unstashed delivery loses nothing, counts once") {
  shmtest::segment_guard g(shmtest::unique_name("stashfault"));
  auto box = shmbox::Box::create(g.name, {.capacity = 16, .stash = 8});
  REQUIRE(box);
  REQUIRE(shmtest::run({shmtest::cli_path(), "post", g.name, "a", "b", "c", "d"}).code == 0);
  SUBCASE("owner.mid_stash: the second message's entry written, not parked") {
    {
      shmtest::child owner({shmtest::helper_path(), "stash-owner", g.name}, {"SHMBOX_FAULT=owner.mid_stash:2"}, true);
      REQUIRE(shmtest::line_starting(owner, "owned").size() > 0);
      CHECK(ask(owner, "read 2") == "read 2 a b");
      owner.write_stdin("stash-read\n");
      REQUIRE(shmtest::killed_by(owner.wait(10s), SIGKILL));
    }
    // a was parked; b's stash never happened and its read was never committed:
    // a comes back from the stash, b from the lane, each once, both flagged.
    auto o = shmbox::Owner::acquire(*box);
    REQUIRE(o);
    CHECK(drain(*o) == std::vector<std::string>{"a*", "a*", "b*", "c", "d"});
    // (a twice: stash then commit is at-least-once; the read of a was not committed when it died)
    check_stash_ledger(*box, 1, 1);
  }
  SUBCASE("owner.mid_unstash: an unstashed message committed, not yet counted or freed") {
    {
      shmtest::child owner({shmtest::helper_path(), "stash-owner", g.name}, {"SHMBOX_FAULT=owner.mid_unstash:1"}, true);
      REQUIRE(shmtest::line_starting(owner, "owned").size() > 0);
      CHECK(ask(owner, "read 2") == "read 2 a b");
      CHECK(ask(owner, "stash-read") == "stashed 2");
      CHECK(ask(owner, "unstash") == "unstashed 2");
      owner.write_stdin("recv 1 1000\n");
      REQUIRE(shmtest::killed_by(owner.wait(10s), SIGKILL));
    }
    // a was delivered (committed) and dies uncounted: the next owner counts it once and
    // does not deliver it again; b comes first, flagged.
    auto o = shmbox::Owner::acquire(*box);
    REQUIRE(o);
    CHECK(drain(*o) == std::vector<std::string>{"b*", "c", "d"});
    check_stash_ledger(*box, 2, 2);
  }
  SUBCASE("takeover.mid_recovery: a new owner killed while it takes the stash over") {
    {
      shmtest::child owner({shmtest::helper_path(), "stash-owner", g.name}, {}, true);
      REQUIRE(shmtest::line_starting(owner, "owned").size() > 0);
      CHECK(ask(owner, "read 3") == "read 3 a b c");
      CHECK(ask(owner, "stash-read") == "stashed 3");
    }  // killed by the guard
    {
      // The ring has nothing in flight, so the first stop is the stash's: one entry moved, two not.
      shmtest::child second({shmtest::helper_path(), "stash-owner", g.name}, {"SHMBOX_FAULT=takeover.mid_recovery:1"}, true);
      REQUIRE(shmtest::killed_by(second.wait(10s), SIGKILL));
    }
    auto o = shmbox::Owner::acquire(*box);
    REQUIRE(o);
    CHECK(drain(*o) == std::vector<std::string>{"a*", "b*", "c*", "d"});
    check_stash_ledger(*box, 3, 3);
  }
  CHECK(shmtest::run({shmtest::cli_path(), "verify", g.name}).code == 0);
}

TEST_CASE("stash: a parked message the heir receives again is counted once (redelivered), also when that owner is killed") {
  for (const bool two_phase : {false, true}) {
    for (const char* point : {"", "owner.after_take:1", "owner.mid_unstash:1", "owner.mid_unstash:2"}) {
      shmtest::segment_guard g(shmtest::unique_name("stashagain"));
      auto box = shmbox::Box::create(g.name, {.capacity = 16, .stash = 8});
      REQUIRE(box);
      REQUIRE(shmtest::run({shmtest::cli_path(), "post", g.name, "a1", "a2", "a3", "a4", "a5", "a6"}).code == 0);
      shmtest::check_redeliveries_counted(*box, point, two_phase, true);
    }
  }
}

// ---------------------------------------------------------------------------
// A priority box's stash (ring.hpp THE STASH, A PRIORITY BOX'S STASH):
// actor-ts's stash with its PriorityMailbox.
// ---------------------------------------------------------------------------

namespace {

// Posts `msg` into `box` from a separate process (the CLI) with that priority.
void post_prio(const std::string& box, const std::string& msg, int prio, int lane = -1) {
  std::vector<std::string> argv{shmtest::cli_path(), "post", box, "--priority", std::to_string(prio)};
  if (lane >= 0) argv.insert(argv.end(), {"--lane", std::to_string(lane)});
  argv.push_back(msg);
  REQUIRE(shmtest::run(argv).code == 0);
}

// A message's priority in these tests: its last digit ("b3" -> 3; "z9" -> 9).
int prio_of(const std::string& m) { return m[m.find_first_of("0123456789")] - '0'; }

}  // namespace

TEST_CASE("stash: in a priority box, unstashed messages rejoin their own priority, first of it, in stash order") {
  shmtest::segment_guard g(shmtest::unique_name("priostash"));
  auto box = shmbox::Box::create(g.name, {.capacity = 16, .lanes = {{}, {}}, .stash = 8, .priority = true});
  REQUIRE(box);
  CHECK(shmbox::info(*box).priority);
  CHECK(shmbox::info(*box).stash == 8);
  for (const char* m : {"a5", "b3", "c5", "d1", "e3"}) post_prio(g.name, m, prio_of(m));  // lane 1, the default
  auto o = shmbox::Owner::acquire(*box);
  REQUIRE(o);
  const auto d1 = receive_one(*o);
  CHECK(d1.data == "d1");
  CHECK(d1.priority == 1);
  const auto b3 = receive_one(*o), e3 = receive_one(*o);
  CHECK(b3.data == "b3");
  CHECK(e3.data == "e3");
  // Parked in another order than they came: e3, then b3; then a5.
  REQUIRE(o->stash(e3) == recv_status::ok);
  REQUIRE(o->stash(b3) == recv_status::ok);
  const auto a5 = receive_one(*o);
  CHECK(a5.data == "a5");
  REQUIRE(o->stash(a5) == recv_status::ok);
  CHECK(o->stashed() == 3);
  // More arrive, a control message too; the parked ones wait.
  for (const char* m : {"f3", "g1", "h5"}) post_prio(g.name, m, prio_of(m));
  post_prio(g.name, "z9", 9, 0);
  const auto peeked = shmbox::peek(*box, 100);
  REQUIRE(peeked.size() == 8);
  CHECK(peeked[0].data == "e3");  // parked first, in stash order
  CHECK(peeked[0].stash == "parked");
  CHECK(peeked[2].data == "a5");
  CHECK(peeked[3].data == "z9");
  CHECK(o->unstash_all() == 3);
  CHECK(o->unstashed_waiting() == 3);
  CHECK(shmbox::peek(*box, 100)[2].data == "e3");  // z9, g1, then tier 3: the unstashed first
  CHECK(shmbox::peek(*box, 100)[2].stash == "unstashed");
  // Lanes first; in lane 1 by priority, each unstashed one ahead of its tier, in stash order.
  CHECK(receive_one(*o).data == "z9");
  CHECK(receive_one(*o).data == "g1");
  const auto again = receive_one(*o);
  CHECK(again.data == "e3");
  CHECK(again.priority == 3);
  CHECK(again.position == shmbox::kNoPosition);
  // Stashed again (it keeps its priority), unstashed again: after b3, which was unstashed earlier.
  REQUIRE(o->stash(again) == recv_status::ok);
  CHECK(o->unstash_all() == 1);
  CHECK(drain(*o) == std::vector<std::string>{"b3", "e3", "f3", "a5", "c5", "h5"});
  check_stash_ledger(*box, 4, 4);
  const auto c = box->read_counters();
  CHECK(c.delivered == 9);
  CHECK(c.redelivered == 0);
  shmtest::check_invariant(*box);
  CHECK(shmtest::run({shmtest::cli_path(), "verify", g.name}).code == 0);
  // A parked message given without its priority rejoins priority 0, as a post without one.
  REQUIRE(o->stash("n", 1) == recv_status::ok);
  post_prio(g.name, "m1", 1);
  o->unstash_all();
  CHECK(drain(*o) == std::vector<std::string>{"n", "m1"});
}

TEST_CASE("stash: in a priority box, store and stash fill the lane together; the stash never closes it") {
  shmtest::segment_guard g(shmtest::unique_name("priostashcap"));
  auto box = shmbox::Box::create(g.name, {.capacity = 4, .stash = 8, .priority = true});
  REQUIRE(box);
  for (int i = 1; i <= 4; ++i) post_prio(g.name, tag('p', i), i);
  auto o = shmbox::Owner::acquire(*box);
  REQUIRE(o);
  auto p = shmbox::Producer::attach(*box);
  REQUIRE(p);
  REQUIRE(o->stash(receive_one(*o)) == recv_status::ok);  // p1: the store holds 3, the stash 1
  CHECK(p->post("q") == post_status::full);
  REQUIRE(o->stash(receive_one(*o)) == recv_status::ok);  // p2
  REQUIRE(o->stash(receive_one(*o)) == recv_status::ok);  // p3: 3 parked, p4 stored
  const auto p4 = receive_one(*o);
  CHECK(o->stash(p4) == recv_status::error);  // a fourth would leave the lane no room
  CHECK(o->last_error() == shmbox::errc::stash_full);
  CHECK(shmbox::explain(o->last_error()).find("no room") != std::string::npos);
  CHECK(shmbox::info(*box).parked == 3);
  CHECK(shmbox::info(*box).depth == 0);
  CHECK(box->depth_approx() == 0);
  CHECK(p->post("q") == post_status::stored);  // room for limit - parked
  CHECK(p->post("r") == post_status::full);
  CHECK(o->unstash_all() == 3);
  CHECK(drain(*o) == std::vector<std::string>{"q", "p1", "p2", "p3"});  // q: priority 0
  check_stash_ledger(*box, 3, 3);
  shmtest::check_invariant(*box);
  // The entries run out too: --stash 2.
  REQUIRE(shmbox::Box::remove(g.name));
  auto small = shmbox::Box::create(g.name, {.capacity = 64, .stash = 2, .priority = true});
  REQUIRE(small);
  auto o2 = shmbox::Owner::acquire(*small);
  REQUIRE(o2);
  CHECK(o2->stash("a", 0, 1) == recv_status::ok);
  CHECK(o2->stash("b", 0, 1) == recv_status::ok);
  CHECK(o2->stash("c", 0, 1) == recv_status::error);
  CHECK(o2->last_error() == shmbox::errc::stash_full);
  CHECK(shmbox::explain(o2->last_error()).find("2 entries") != std::string::npos);
}

TEST_CASE("stash: a priority box's owner SIGKILLed with messages parked or unstashed: the heir delivers them in their own priority, flagged") {
  for (const bool unstashed : {false, true}) {
    CAPTURE(unstashed);
    shmtest::segment_guard g(shmtest::unique_name("priostashkill"));
    auto box = shmbox::Box::create(g.name, {.capacity = 16, .stash = 8, .priority = true});
    REQUIRE(box);
    for (const char* m : {"a1", "b2", "c2", "d3", "e3", "f4"}) post_prio(g.name, m, prio_of(m));
    {
      shmtest::child owner({shmtest::helper_path(), "stash-owner", g.name}, {}, true);
      REQUIRE(shmtest::line_starting(owner, "owned").size() > 0);
      // It reads the three lowest, parks them (read, stash, commit), handles one more.
      CHECK(ask(owner, "read 3") == "read 3 a1 b2 c2");
      CHECK(ask(owner, "stash-read") == "stashed 3");
      if (unstashed) CHECK(ask(owner, "unstash") == "unstashed 3");
      CHECK(ask(owner, "recv 1 0") == (unstashed ? "got 1 a1" : "got 1 d3"));
      CHECK(ask(owner, "stat") == (unstashed ? "parked 0 front 2" : "parked 3 front 0"));
      owner.kill(SIGKILL);
      REQUIRE(shmtest::killed_by(owner.wait(10s), SIGKILL));
    }
    for (const char* m : {"g2", "h0"}) post_prio(g.name, m, prio_of(m));  // more arrive meanwhile
    shmtest::child heir({shmtest::helper_path(), "stash-owner", g.name}, {}, true);
    REQUIRE(shmtest::line_starting(heir, "owned").size() > 0);
    // Each parked one in its priority, ahead of the stored ones there, in stash order, flagged.
    CHECK(ask(heir, "recv 100 1000") == (unstashed ? "got 7 h0 b2* c2* g2 d3 e3 f4" : "got 7 h0 a1* b2* c2* g2 e3 f4"));
    heir.close_stdin();
    CHECK(shmtest::exited_with(heir.wait(10s), 0));
    check_stash_ledger(*box, 3, 3);
    const auto c = box->read_counters();
    CHECK(c.redelivered == (unstashed ? 2u : 3u));
    CHECK(c.delivered == 8);  // each posted message once (the parked ones' copies count unstashed)
    shmtest::check_invariant(*box);
    CHECK(shmtest::run({shmtest::cli_path(), "verify", g.name}).code == 0);
  }
}

TEST_CASE("stash: a priority box's fault matrix: an owner killed inside stash, unstash_all and the unstashed delivery loses nothing") {
  // Six messages, priorities 1, 2, 2, 3, 3, 4. The owner reads the three
  // lowest, parks them, unstashes them and receives: killed at the n-th pass
  // of a step; a second owner is killed while it takes over; the third must
  // deliver every message not handed out, in priority order, and the
  // counters (the stash's ledger, redelivered) must add up. The one loss
  // allowed is a receive's at-most-once window (owner.mid_unstash of the
  // delivery, "recv": committed, not returned). Posted in priority order the
  // first read comes straight from the ring (THE IN-ORDER RUN); posted in
  // reverse it comes from the store (the read's commit passes
  // owner.mid_unstash too).
  const std::pair<const char*, int> points[] = {
      {"owner.mid_stash", 2},    {"owner.mid_unstash_all", 1}, {"owner.mid_unstash_all", 2}, {"owner.mid_unstash", 1},
      {"owner.mid_unstash", 2},  {"owner.after_take", 8},      {"owner.after_take", 10},     {"owner.mid_sort", 3},
      {"takeover.mid_recovery", 0}};
  const std::vector<std::string> in_order{"f1", "f2", "g2", "f3", "g3", "f4"};
  for (const bool reversed : {false, true})
  for (const auto& [point, n] : points) {
    CAPTURE(reversed);
    CAPTURE(point);
    CAPTURE(n);
    shmtest::segment_guard g(shmtest::unique_name("priostashfault"));
    auto box = shmbox::Box::create(g.name, {.capacity = 8, .stash = 8, .priority = true});
    REQUIRE(box);
    std::vector<std::string> all = in_order;
    if (reversed) std::reverse(all.begin(), all.end());
    for (const auto& m : all) post_prio(g.name, m, prio_of(m));
    // what two receives hand out first: the lowest priority, FIFO among equal ones
    const std::vector<std::string> first_two = reversed ? std::vector<std::string>{"f1", "g2"} : std::vector<std::string>{"f1", "f2"};
    const bool takeover = std::string(point) == "takeover.mid_recovery";
    std::vector<std::string> handed;  // what the first owner returned
    bool killed = false;
    std::string died_in;  // the command the owner did not answer
    {
      std::vector<std::string> env;
      if (!takeover) env.push_back(std::string("SHMBOX_FAULT=") + point + ":" + std::to_string(n));
      shmtest::child owner({shmtest::helper_path(), "stash-owner", g.name}, env, true);
      REQUIRE(shmtest::line_starting(owner, "owned").size() > 0);
      for (const char* cmd : {"read 3\n", "stash-read\n", "unstash\n", "recv 2 0\n"}) {
        owner.write_stdin(cmd);
        const auto l = owner.read_line(10s);
        if (!l) {
          died_in = shmtest::fields(cmd)[0];
          break;
        }
        const auto f = shmtest::fields(*l);
        if (f[0] == "got")
          for (std::size_t i = 2; i < f.size(); ++i) handed.push_back(f[i]);
      }
      owner.close_stdin();
      killed = shmtest::killed_by(owner.wait(10s), SIGKILL);
      if (takeover) CHECK(!killed);
    }
    CAPTURE(killed);
    CAPTURE(died_in);
    {
      // (with takeover.mid_recovery: the first owner left 3 parked, and
      // exited with 2 received; this one dies taking the stash over)
      shmtest::child second({shmtest::helper_path(), "stash-owner", g.name},
                            {takeover ? "SHMBOX_FAULT=takeover.mid_recovery:1" : "SHMBOX_FAULT=takeover.mid_recovery:2"}, true);
      (void)second.read_line(10s);  // "owned", or nothing: killed in the takeover
      second.close_stdin();
      (void)second.wait(10s);
    }
    auto o = shmbox::Owner::acquire(*box);
    REQUIRE(o);
    std::vector<shmbox::message> got;
    while (o->receive_batch(got, {.max = 1, .timeout = 0ns}) == recv_status::ok) {
    }
    INFO("handed out: " << handed.size() << ", then delivered: " << got.size());
    std::size_t flagged = 0, missing = 0;
    for (std::size_t i = 0; i < got.size(); ++i) {
      if (i > 0) CHECK(prio_of(got[i - 1].data) <= prio_of(got[i].data));  // priority order
      flagged += got[i].redelivered;
      const bool seen_before = std::find(handed.begin(), handed.end(), got[i].data) != handed.end() ||
                               std::any_of(got.begin(), got.begin() + static_cast<std::ptrdiff_t>(i),
                                           [&](const shmbox::message& m) { return m.data == got[i].data; });
      CHECK_MESSAGE((!seen_before || got[i].redelivered), got[i].data << " repeated unflagged");
    }
    for (const auto& m : all) {
      const bool here = std::any_of(got.begin(), got.end(), [&](const shmbox::message& x) { return x.data == m; });
      missing += !here && std::find(handed.begin(), handed.end(), m) == handed.end();
    }
    CHECK(missing <= (std::string(point) == "owner.mid_unstash" && killed && died_in == "recv" ? 2u : 0u));
    if (!killed && !takeover) CHECK(handed == first_two);  // the point was not reached
    const auto c = box->read_counters();
    CHECK(c.stashed == c.unstashed);
    CHECK(shmbox::info(*box).parked == 0);
    CHECK(c.redelivered == flagged);
    CHECK(c.stored == 6);
    CHECK(c.delivered == 6);
    CHECK(shmbox::info(*box).depth == 0);
    shmtest::check_invariant(*box);
    const auto v = shmbox::verify(g.name);
    REQUIRE(v);
    CHECK_MESSAGE(v->ok, (v->problems.empty() ? std::string() : v->problems[0]));
  }
}

TEST_CASE("stash: the CLI creates a stash box; the manual documents --stash") {
  shmtest::segment_guard g(shmtest::unique_name("stashcli"));
  const auto lifo = shmtest::run({shmtest::cli_path(), "create", g.name, "--stash", "4", "--policy", "lifo"});
  CHECK(lifo.code == 1);
  CHECK(lifo.err.find("needs FIFO lanes") != std::string::npos);
  REQUIRE(shmtest::run({shmtest::cli_path(), "create", g.name, "--capacity", "8", "--stash", "4"}).code == 0);
  auto box = shmbox::Box::inspect(g.name);
  REQUIRE(box);
  CHECK(shmbox::info(*box).stash == 4);
  CHECK(shmtest::run({shmtest::cli_path(), "stat", g.name}).out.find("0 parked of 4 entries") != std::string::npos);
  CHECK(shmtest::manual_text().find("--stash") != std::string::npos);
}

TEST_CASE("stash: pobox's owner states see unstashed messages as data (notify fires at once, active delivers them)") {
  shmtest::segment_guard g(shmtest::unique_name("stashmode"));
  auto box = shmbox::Box::create(g.name, {.capacity = 8, .stash = 4});
  REQUIRE(box);
  auto o = shmbox::Owner::acquire(*box);
  REQUIRE(o);
  REQUIRE(o->stash("s1", 0) == recv_status::ok);
  REQUIRE(o->stash("s2", 0) == recv_status::ok);
  shmbox::delivery d;
  // Parked only: nothing to deliver, so an armed notify waits.
  o->notify();
  CHECK(o->wait(d, 50ms) == shmbox::owner_event::none);
  o->passive();
  CHECK(o->unstash_all() == 2);
  o->notify();
  CHECK(o->wait(d, 0ms) == shmbox::owner_event::notified);
  // An active delivery through a filter: it sees them, drops s1, delivers s2.
  o->active([](std::string& m) { return m == "s1" ? shmbox::filter_verdict::drop : shmbox::filter_verdict::deliver; });
  REQUIRE(o->wait(d, 1s) == shmbox::owner_event::delivered);
  REQUIRE(d.count == 1);
  CHECK(d.messages[0] == "s2");
  check_stash_ledger(*box, 2, 2);
}
