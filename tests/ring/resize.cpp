// Resizable boxes (Box::resize, shmbox resize): the limit moves between 1
// and the reserve while producers and the owner run; a shrink applies the
// lane's policy to the excess, counted; a resizer killed mid-drop loses
// nothing and counts once.
#include <doctest/doctest.h>
#include <signal.h>

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "checks.hpp"
#include "shmbox/shmbox.hpp"
#include "support.hpp"

using namespace std::chrono_literals;
using shmbox::policy;
using shmbox::post_status;

namespace {

// Receives until a call finds nothing (waiting up to `wait` for it).
std::vector<std::string> drain(shmbox::Owner& o, std::chrono::nanoseconds wait = 0ns) {
  std::vector<shmbox::message> got;
  while (o.receive_batch(got, {.max = 4096, .timeout = wait}) == shmbox::recv_status::ok) {
  }
  std::vector<std::string> out;
  for (const auto& m : got) out.push_back(m.data);
  return out;
}

std::vector<std::string> numbers(int from, int to) {  // [from, to)
  std::vector<std::string> v;
  for (int i = from; i < to; ++i) v.push_back(std::to_string(i));
  return v;
}

void post_all(shmbox::Producer& p, int from, int to) {
  for (int i = from; i < to; ++i) (void)p.post(std::to_string(i));
}

std::uint64_t field_of(const std::string& out, const std::string& key) {
  const auto at = out.find(key + "=");
  return at == std::string::npos ? UINT64_MAX : std::stoull(out.substr(at + key.size() + 1));
}

}  // namespace

TEST_CASE("resize: errors say what to do; a box without a reserve, a lifo lane, a limit out of range, an unnamed lane") {
  shmtest::segment_guard g(shmtest::unique_name("rzerr"));
  CHECK(shmbox::Box::create(g.name, {.capacity = 8, .max_capacity = 4}).error() == shmbox::errc::invalid_argument);
  CHECK(shmbox::Box::create(g.name, {.capacity = 8, .max_capacity = 16, .overflow = policy::lifo}).error() ==
        shmbox::errc::invalid_argument);
  {
    auto fixed = shmbox::Box::create(g.name, {.capacity = 8});
    REQUIRE(fixed);
    auto r = fixed->resize(4);
    REQUIRE(!r);
    CHECK(r.error() == shmbox::errc::invalid_argument);
    CHECK(shmbox::explain(r.error()).find("--max-capacity") != std::string::npos);
    CHECK(shmbox::info(*fixed).lanes[0].max_capacity == 0);
  }
  REQUIRE(shmbox::Box::remove(g.name));
  auto box = shmbox::Box::create(g.name, {.capacity = 8, .max_capacity = 32});
  REQUIRE(box);
  CHECK(box->capacity() == 8);
  CHECK(shmbox::info(*box).lanes[0].max_capacity == 32);
  CHECK(box->resize(0).error() == shmbox::errc::invalid_argument);
  CHECK(box->resize(33).error() == shmbox::errc::invalid_argument);
  CHECK(box->resize(4, 1).error() == shmbox::errc::invalid_argument);  // no lane 1
  auto r = box->resize(32);
  REQUIRE(r);
  CHECK(r->before == 8);
  CHECK(r->after == 32);
  CHECK(r->max_capacity == 32);
  CHECK(box->capacity() == 32);
  // Several lanes: the lane must be named; each lane has its own reserve.
  shmtest::segment_guard g2(shmtest::unique_name("rzlanes"));
  auto lanes = shmbox::Box::create(
      g2.name, {.capacity = 4, .lanes = {{.capacity = 2}, {.capacity = 4, .max_capacity = 64}, {.overflow = policy::lifo}}});
  REQUIRE(lanes);
  CHECK(lanes->resize(8).error() == shmbox::errc::invalid_argument);
  CHECK(lanes->resize(8, 0).error() == shmbox::errc::invalid_argument);  // lane 0 has no reserve
  CHECK(lanes->resize(8, 2).error() == shmbox::errc::invalid_argument);  // lifo
  REQUIRE(lanes->resize(64, 1));
  CHECK(lanes->capacity() == 2 + 64 + 4);
}

TEST_CASE("resize: each policy at a moved limit, exact: drop-oldest keeps the newest, reject and drop-newest the oldest, block waits") {
  for (const policy pol : {policy::drop_oldest, policy::reject, policy::drop_newest, policy::block}) {
    CAPTURE(shmbox::to_string(pol));
    shmtest::segment_guard g(shmtest::unique_name("rzpol"));
    auto box = shmbox::Box::create(g.name, {.capacity = 8, .max_capacity = 64, .slot_size = 16, .overflow = pol, .block_timeout = 10ms});
    REQUIRE(box);
    auto p = shmbox::Producer::attach(*box);
    REQUIRE(p);
    auto owner = shmbox::Owner::acquire(*box);
    REQUIRE(owner);
    // Grown from 8 to 20: 20 fit, the 21st meets the policy.
    REQUIRE(box->resize(20));
    post_all(*p, 0, 21);
    CHECK(shmbox::info(*box).depth == 20);
    // Shrunk to 5: the excess goes by the policy, at once.
    auto r = box->resize(5);
    REQUIRE(r);
    CHECK(r->before == 20);
    const bool drops = pol != policy::block;
    CHECK(r->dropped == (drops ? 15u : 0u));
    CHECK(shmbox::info(*box).depth == (drops ? 5u : 20u));
    // At the new limit a post meets the policy (block: times out while 20 > 5).
    const post_status st = p->post("late");
    if (pol == policy::drop_oldest) CHECK(st == post_status::stored_evicted);
    if (pol == policy::reject) CHECK(st == post_status::full);
    if (pol == policy::drop_newest) CHECK(st == post_status::dropped);
    if (pol == policy::block) CHECK(st == post_status::timeout);
    const auto got = drain(*owner);
    std::vector<std::string> expect;
    if (pol == policy::drop_oldest) {
      expect = numbers(17, 21);  // 0..20 stored; the shrink kept 16..20, "late" evicted 16
      expect.push_back("late");
    } else if (pol == policy::block) {
      expect = numbers(0, 20);
    } else {
      expect = numbers(0, 5);  // the oldest kept
    }
    CHECK(got == expect);
    const shmbox::counters c = box->read_counters();
    if (pol == policy::drop_oldest) CHECK(c.dropped_oldest == 17);  // 1 by the 21st post, 15 by the shrink, 1 by "late"
    if (pol == policy::reject || pol == policy::drop_newest) CHECK(c.shrunk == 15);
    shmtest::check_invariant(*box);
    // After the owner took everything, the lane holds exactly 5 again.
    int stored = 0;
    for (int i = 0; i < 10; ++i) stored += shmbox::is_stored(p->post("again")) ? 1 : 0;
    if (pol != policy::drop_oldest) CHECK(stored == 5);
    CHECK(shmbox::info(*box).depth == 5);
    shmtest::check_invariant(*box);
  }
}

TEST_CASE("resize: a shrink that dropped the newest still admits up to the limit once the owner takes the old ones") {
  shmtest::segment_guard g(shmtest::unique_name("rzholes"));
  auto box = shmbox::Box::create(g.name, {.capacity = 8, .max_capacity = 16, .slot_size = 16, .overflow = policy::reject});
  REQUIRE(box);
  auto p = shmbox::Producer::attach(*box);
  REQUIRE(p);
  post_all(*p, 0, 8);
  REQUIRE(box->resize(3));  // keeps 0, 1, 2; drops 3..7 (the newest)
  CHECK(p->post("x") == post_status::full);
  auto owner = shmbox::Owner::acquire(*box);
  REQUIRE(owner);
  shmbox::message m;
  REQUIRE(owner->receive(m, {.timeout = 0ns}) == shmbox::recv_status::ok);
  CHECK(m.data == "0");
  // 2 held, limit 3: one more fits, though the owner has not passed the holes.
  CHECK(p->post("y") == post_status::stored);
  CHECK(p->post("z") == post_status::full);
  CHECK(drain(*owner) == std::vector<std::string>{"1", "2", "y"});
  shmtest::check_invariant(*box);
}

TEST_CASE("resize: growing lets a post waiting on a full block box in at once") {
  shmtest::segment_guard g(shmtest::unique_name("rzgrow"));
  auto box = shmbox::Box::create(g.name, {.capacity = 2, .max_capacity = 8, .slot_size = 64, .overflow = policy::block,
                                          .block_timeout = 60'000ms});
  REQUIRE(box);
  auto p = shmbox::Producer::attach(*box);
  REQUIRE(p);
  post_all(*p, 0, 2);
  // A producer process blocks on the full box (its posts wait up to 60 s).
  shmtest::child waiter({shmtest::helper_path(), "produce", g.name, "7", "3", "--no-wait", "--timeout-ms", "60000"});
  REQUIRE(waiter.read_line(30s).value_or("").rfind("ready", 0) == 0);
  REQUIRE(box->resize(5));
  const std::string done = waiter.read_line(30s).value_or("");
  INFO(done);
  CHECK(done.rfind("done", 0) == 0);
  CHECK(shmtest::exited_with(waiter.wait(30s), 0));
  CHECK(shmbox::info(*box).depth == 5);
}

TEST_CASE("resize under load: 4 producer processes and an owner process while the limit moves up and down; the ledger is exact") {
  for (const policy pol : {policy::drop_oldest, policy::reject}) {
    CAPTURE(shmbox::to_string(pol));
    shmtest::segment_guard g(shmtest::unique_name("rzload"));
    auto box = shmbox::Box::create(g.name, {.capacity = 64, .max_capacity = 1024, .slot_size = 64, .overflow = pol});
    REQUIRE(box);
    const int per = 20000;
    // 10 s without a message ends the owner: the producers start after it (four
    // processes under a sanitizer on a loaded machine can take seconds), and it
    // must not stop before them (CI once saw got=0 with 3 s).
    shmtest::child owner({shmtest::helper_path(), "consume", g.name, std::to_string(4 * per), "10000"});
    REQUIRE(owner.read_line(30s).value_or("").rfind("owned", 0) == 0);
    std::vector<std::unique_ptr<shmtest::child>> producers;
    for (int id = 1; id <= 4; ++id)
      producers.push_back(std::make_unique<shmtest::child>(std::vector<std::string>{
          shmtest::helper_path(), "produce", g.name, std::to_string(id), std::to_string(per), "--no-wait", "--pause-us", "20"}));
    std::mt19937 rng(42);
    std::uint64_t dropped = 0;
    int resizes = 0;
    for (auto& p : producers) REQUIRE(p->read_line(30s).value_or("").rfind("ready", 0) == 0);
    // Resize while any producer still runs (each prints "done" at its end).
    std::vector<bool> finished(producers.size(), false);
    const auto deadline = std::chrono::steady_clock::now() + 120s;
    for (std::size_t done = 0; done < producers.size() && std::chrono::steady_clock::now() < deadline;) {
      auto r = box->resize(1 + rng() % 1024);
      if (!r) FAIL(shmbox::explain(r.error()));
      dropped += r->dropped;
      if (++resizes % 64 != 0) continue;
      for (std::size_t i = 0; i < producers.size(); ++i) {
        if (finished[i]) continue;
        const std::string line = producers[i]->read_line(5ms).value_or("");
        if (line.empty()) continue;
        INFO(line);
        CHECK(line.rfind("done", 0) == 0);
        finished[i] = true;
        ++done;
      }
    }
    CHECK(std::chrono::steady_clock::now() < deadline);
    for (auto& p : producers) CHECK(shmtest::exited_with(p->wait(60s), 0));
    const std::string out = owner.read_all(60s);
    CHECK(shmtest::exited_with(owner.wait(30s), 0));
    INFO(out);
    CHECK(field_of(out, "order_errors") == 0);  // per-producer FIFO order kept through every resize
    CHECK(field_of(out, "torn") == 0);
    CHECK(field_of(out, "dups") == 0);
    const std::uint64_t got = field_of(out, "got");
    const shmbox::counters c = box->read_counters();
    CHECK(c.posted == 4u * per);
    CHECK(c.delivered == got);
    if (pol == policy::drop_oldest) CHECK(got + c.dropped_oldest == 4u * per);  // nothing refused, every drop counted
    else CHECK(got + c.rejected + c.shrunk == 4u * per);
    CHECK(c.dropped_oldest + c.shrunk >= dropped);  // what the resizes reported is among them
    shmtest::check_invariant(*box);
    const auto v = shmtest::run({shmtest::cli_path(), "verify", g.name});
    CHECK(v.code == 0);
    MESSAGE(shmbox::to_string(pol) << ": " << resizes << " resizes, " << dropped << " dropped by them, " << got << " delivered");
  }
}

TEST_CASE("resize: a resizer killed mid-drop (fault point resize.mid_drop): the drop is counted once, nothing else is lost") {
  for (const policy pol : {policy::drop_oldest, policy::reject}) {
    CAPTURE(shmbox::to_string(pol));
    shmtest::segment_guard g(shmtest::unique_name("rzkill"));
    auto box = shmbox::Box::create(g.name, {.capacity = 16, .max_capacity = 16, .slot_size = 16, .overflow = pol});
    REQUIRE(box);
    {
      auto p = shmbox::Producer::attach(*box);
      REQUIRE(p);
      post_all(*p, 0, 16);
    }
    // The CLI resizes to 4 and dies at its 3rd drop (the slot it holds TAKEN, counted or not).
    shmtest::child victim({shmtest::cli_path(), "resize", g.name, "4"}, {"SHMBOX_FAULT=resize.mid_drop:3"});
    REQUIRE(shmtest::killed_by(victim.wait(30s), SIGKILL));
    auto owner = shmbox::Owner::acquire(*box);
    REQUIRE(owner);
    // The owner's cursor waits at the slot the dead resizer holds (ring.hpp
    // T1b) and, after kRepairGraceNs, finishes its count and frees it (R2):
    // a drain that waits a little gets everything behind it.
    const auto first = drain(*owner, 200ms);
    // The owner got what the shrink kept, minus nothing: 16 - 2 dropped before the kill - the one it held.
    if (pol == policy::drop_oldest) CHECK(first == numbers(3, 16));
    else CHECK(first == numbers(0, 13));
    // The drop is counted already, by the owner, before anyone posts again.
    if (pol == policy::drop_oldest) CHECK(box->read_counters().dropped_oldest == 3);
    else CHECK(box->read_counters().shrunk == 3);
    shmtest::check_invariant(*box);
    // Laps of the ring afterwards find nothing left to repair.
    auto p = shmbox::Producer::attach(*box);
    REQUIRE(p);
    for (int lap = 0; lap < 3; ++lap) {
      post_all(*p, 100, 104);
      CHECK(drain(*owner) == numbers(100, 104));
    }
    const shmbox::counters c = box->read_counters();
    if (pol == policy::drop_oldest) CHECK(c.dropped_oldest == 3);
    else CHECK(c.shrunk == 3);
    shmtest::check_invariant(*box);
    CHECK(shmtest::run({shmtest::cli_path(), "verify", g.name}).code == 0);
  }
}

TEST_CASE("resize: what a shrink drops goes to the dead-letter box; the CLI says what it did, with --json") {
  shmtest::segment_guard dl(shmtest::unique_name("rzdl"));
  shmtest::segment_guard g(shmtest::unique_name("rzcli"));
  REQUIRE(shmbox::Box::create(dl.name, {.capacity = 64, .slot_size = 128}));
  auto r = shmtest::run({shmtest::cli_path(), "create", g.name, "--capacity", "4", "--max-capacity", "8", "--policy",
                         "drop-oldest", "--dead-letters", dl.name});
  REQUIRE(r.code == 0);
  REQUIRE(shmtest::run({shmtest::cli_path(), "post", g.name, "a", "b", "c", "d"}).code == 0);
  r = shmtest::run({shmtest::cli_path(), "stat", g.name});
  CHECK(r.out.find("resizable up to 8") != std::string::npos);
  r = shmtest::run({shmtest::cli_path(), "resize", g.name, "2"});
  CHECK(r.code == 0);
  CHECK(r.out == shmtest::cat("box '", g.name, "': limit 4 -> 2 (max capacity 8); 2 dropped (drop-oldest: the oldest)\n"));
  r = shmtest::run({shmtest::cli_path(), "resize", g.name, "8", "--json"});
  CHECK(r.code == 0);
  const auto j = nlohmann::json::parse(r.out);
  CHECK(j["before"] == 2);
  CHECK(j["after"] == 8);
  CHECK(j["max_capacity"] == 8);
  CHECK(j["dropped"] == 0);
  r = shmtest::run({shmtest::cli_path(), "resize", g.name, "9"});
  CHECK(r.code == 2);
  CHECK(r.err.find("1 to 8") != std::string::npos);
  auto owner = shmbox::Owner::acquire(dl.name);
  REQUIRE(owner);
  CHECK(drain(*owner) == std::vector<std::string>{shmtest::cat("[", g.name, " dropped-oldest] a"),
                                                  shmtest::cat("[", g.name, " dropped-oldest] b")});
  const auto st = nlohmann::json::parse(shmtest::run({shmtest::cli_path(), "stat", g.name, "--json"}).out);
  CHECK(st["capacity"] == 8);
  CHECK(st["lanes"][0]["max_capacity"] == 8);
  CHECK(st["counters"]["dead_lettered"] == 2);
}

TEST_CASE("resize: at a drop-oldest lane's limit, an owner killed holding the oldest message does not stall posts") {
  shmtest::segment_guard g(shmtest::unique_name("rzdead"));
  auto box = shmbox::Box::create(g.name, {.capacity = 4, .max_capacity = 16, .slot_size = 16, .overflow = policy::drop_oldest});
  REQUIRE(box);
  auto p = shmbox::Producer::attach(*box);
  REQUIRE(p);
  post_all(*p, 0, 4);
  // An owner process dies holding position 0 (taken, not committed): the gate position.
  shmtest::child victim({shmtest::helper_path(), "consume", g.name, "4", "1000"}, {"SHMBOX_FAULT=owner.after_take:1"});
  REQUIRE(shmtest::killed_by(victim.wait(30s), SIGKILL));
  // The post repairs that slot (R3: the dead owner's uncommitted message is the oldest: evicted) and stores.
  CHECK(shmbox::is_stored(p->post("x", {.timeout = 10s})));
  auto owner = shmbox::Owner::acquire(*box);
  REQUIRE(owner);
  const auto got = drain(*owner);
  CHECK(got == std::vector<std::string>{"1", "2", "3", "x"});
  CHECK(box->read_counters().dropped_oldest == 1);
  shmtest::check_invariant(*box);
}

TEST_CASE("verify: a drop-oldest lane posted far past its capacity with no owner receiving is not corrupt") {
  // Evictors take the oldest without moving head (only the owner does), so
  // the tail runs on past head + capacity. verify once called that corrupt
  // (CI: the resize-under-load box, after its owner had stopped).
  for (const std::uint32_t max_capacity : {0u, 16u}) {
    CAPTURE(max_capacity);
    shmtest::segment_guard g(shmtest::unique_name("vfydrop"));
    auto box = shmbox::Box::create(g.name, {.capacity = 8, .max_capacity = max_capacity, .overflow = policy::drop_oldest});
    REQUIRE(box);
    auto p = shmbox::Producer::attach(*box);
    REQUIRE(p);
    for (int i = 0; i < 100; ++i) REQUIRE(shmbox::is_stored(p->post(shmtest::tag('v', i))));
    auto v = shmbox::verify(g.name);
    REQUIRE(v);
    CHECK_MESSAGE(v->ok, (v->problems.empty() ? std::string() : v->problems.front()));
    auto o = shmbox::Owner::acquire(*box);
    REQUIRE(o);
    std::vector<std::string> got;
    shmbox::message m;
    while (o->try_receive(m) == shmbox::recv_status::ok) got.push_back(m.data);
    REQUIRE(got.size() == 8);
    CHECK(got.front() == shmtest::tag('v', 92));
    CHECK(got.back() == shmtest::tag('v', 99));
    v = shmbox::verify(g.name);
    REQUIRE(v);
    CHECK(v->ok);
  }
}
