// Live reconfiguration of a running pool (pooler's pool_reconfigure; issue
// 35, lib/pool/pool_table.hpp RC): init_count, max_count, cull_after,
// queue_max and auto_grow_threshold changed while a supervisor (a separate
// program) runs members (separate programs) and takers (this process or
// pool-take helpers) hold or wait for them. What is checked is the pool's
// own state (inspect_pool), the worker processes and the member boxes
// (check_settled), never log lines alone.
#include <doctest/doctest.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "pool_support.hpp"
#include "shmbox/shmbox.hpp"
#include "support.hpp"

using namespace std::chrono_literals;
using shmbox::member_state;
using shmtest::child;
using shmtest::line_starting;
using namespace pooltest;

namespace {

shmbox::result<void> reconfigure(shmbox::Pool& pool, const shmbox::pool_changes& c) { return pool.reconfigure(c, 20s); }

}  // namespace

TEST_CASE("pool reconfigure: a raised init_count starts members now; max_count rises up to the table size and no further") {
  running_pool p("prcup", 1, 2, [](shmbox::pool_options& o) { o.table_size = 5; });
  auto& pool = *p.pool;
  {
    const auto i = snapshot(p.name());
    CHECK(i.max_count == 2);
    CHECK(i.table_size == 5);
    CHECK(i.reconfigurations == 0);
  }
  // Refused, nothing changed: init above max, max above the table.
  auto over = pool.reconfigure({.init_count = 3}, 5s);
  REQUIRE(!over);
  CHECK(over.error() == shmbox::errc::invalid_argument);
  auto beyond = pool.reconfigure({.max_count = 6}, 5s);
  REQUIRE(!beyond);
  CHECK(beyond.error() == shmbox::errc::invalid_argument);
  CHECK(shmbox::explain(beyond.error()).find("table") != std::string::npos);
  CHECK(snapshot(p.name()).reconfigurations == 0);
  // Both at once: init 3 within the new max 4. The call returns once the
  // supervisor applied it; the starts follow.
  auto r = reconfigure(pool, {.init_count = 3, .max_count = 4});
  INFO(shmbox::explain(r.error()));
  REQUIRE(r);
  check_settled(p.name(), 3);
  {
    const auto i = snapshot(p.name());
    CHECK(i.init_count == 3);
    CHECK(i.max_count == 4);
    CHECK(i.reconfigurations == 1);
  }
  // Takes obey the new max: four members, and a fifth take is refused at capacity.
  std::vector<shmbox::Lease> held = take_leases(pool, 4);
  auto fifth = pool.take(0ms);
  REQUIRE(!fifth);
  CHECK(fifth.error() == shmbox::errc::no_members_at_capacity);
  CHECK(shmbox::explain(fifth.error()).find("all 4") != std::string::npos);
  for (auto& l : held) CHECK(l.give_back() == shmbox::return_status::ok);
  check_settled(p.name(), 4);
  check_counts(snapshot(p.name()));
}

TEST_CASE("pool reconfigure: a lowered max_count stops free members down to it, longest idle first; refused when too few are free") {
  running_pool p("prcdown", 1, 4);
  auto& pool = *p.pool;
  std::vector<shmbox::Lease> held = take_leases(pool, 4);
  // Given back 1, 2, 0 (1 idles longest); 3 stays in use.
  for (int k : {1, 2, 0}) CHECK(held[k].give_back() == shmbox::return_status::ok);
  CHECK(settles(p.name(), [](const shmbox::pool_info& i) { return i.free == 3 && i.in_use == 1; }, 10s));
  // Max 2: two of the four must go, and three are free: 1 and 2 go, 0 and 3 stay.
  auto r = reconfigure(pool, {.max_count = 2});
  INFO(shmbox::explain(r.error()));
  REQUIRE(r);
  CHECK(settles(p.name(), [](const shmbox::pool_info& i) { return i.members.size() == 2 && i.free == 1 && i.in_use == 1; }, 15s));
  {
    const auto i = snapshot(p.name());
    CHECK(i.max_count == 2);
    CHECK(i.count.killed_free_culled == 2);
    CHECK(find_member(i, held[0].token().member) != nullptr);
    CHECK(find_member(i, held[3].token().member) != nullptr);
    CHECK(find_member(i, held[1].token().member) == nullptr);
    CHECK(find_member(i, held[2].token().member) == nullptr);
  }
  // Both in use: max 1 would stop a member in use. Refused, nothing changed.
  auto second = pool.take(10s);
  REQUIRE(second);
  auto refused = pool.reconfigure({.max_count = 1}, 5s);
  REQUIRE(!refused);
  CHECK(refused.error() == shmbox::errc::refused);
  CHECK(shmbox::explain(refused.error()).find("not_enough_free") != std::string::npos);
  {
    const auto i = snapshot(p.name());
    CHECK(i.max_count == 2);
    CHECK(i.reconfigurations == 1);
    CHECK(i.in_use == 2);
  }
  CHECK(second->give_back() == shmbox::return_status::ok);
  // One free now: max 1 stops it; the member in use stays under its holder.
  REQUIRE(reconfigure(pool, {.max_count = 1}));
  CHECK(settles(p.name(), [](const shmbox::pool_info& i) { return i.members.size() == 1 && i.in_use == 1; }, 15s));
  CHECK(held[3].give_back() == shmbox::return_status::ok);
  check_settled(p.name(), 1);
  const auto i = snapshot(p.name());
  CHECK(i.count.killed_free_culled == 3);
  check_counts(i);
}

TEST_CASE("pool reconfigure: members in use above a lowered max_count are stopped once given back, never under their holder") {
  // The race pooler's check cannot see: the free members are taken between
  // the reconfigure's check and the supervisor's pass. Here: lowered while
  // three are free, then one of them is taken back before the supervisor
  // culled (no supervisor runs yet), and given back later.
  pool_guard g(shmtest::unique_name("prcrace"));
  REQUIRE(shmbox::Pool::create(g.name, small_pool(g.name, 0, 3)));
  auto sup = supervisor(g.name);
  auto pool = shmbox::Pool::open(g.name);
  REQUIRE(pool);
  std::vector<shmbox::Lease> held = take_leases(*pool, 3);
  for (auto& l : held) CHECK(l.give_back() == shmbox::return_status::ok);
  check_settled(g.name, 3);
  // Stop the supervisor: no one applies the change, so the members stay.
  sup->kill(SIGKILL);
  CHECK(shmtest::killed_by(sup->wait(10s), SIGKILL));
  REQUIRE(settles(g.name, [](const shmbox::pool_info& i) { return !i.supervisor_alive; }, 10s));
  REQUIRE(pool->reconfigure({.max_count = 1}, 5s));  // no supervisor: set, applied when one runs
  CHECK(snapshot(g.name).max_count == 1);
  CHECK(snapshot(g.name).members.size() == 3);
  std::vector<shmbox::Lease> again = take_leases(*pool, 3);  // the three existing members (no start needed)
  auto none = pool->take(0ms);
  REQUIRE(!none);
  CHECK(none.error() == shmbox::errc::no_members_at_capacity);  // at most 1 member, 3 alive: never a start
  sup = supervisor(g.name);
  // All three are in use: none is stopped under its holder.
  CHECK(settles(g.name, [](const shmbox::pool_info& i) { return i.supervisor_alive && i.in_use == 3; }, 10s));
  CHECK(snapshot(g.name).count.killed_free_culled == 0);
  CHECK(again[0].give_back() == shmbox::return_status::ok);
  CHECK(again[1].give_back() == shmbox::return_status::ok);
  CHECK(settles(g.name, [](const shmbox::pool_info& i) { return i.members.size() == 1 && i.in_use == 1; }, 15s));
  CHECK(again[2].give_back() == shmbox::return_status::ok);
  check_settled(g.name, 1);
  const auto i = snapshot(g.name);
  CHECK(i.count.killed_free_culled == 2);
  CHECK(i.count.revoked_in_use == 0);
  check_counts(i);
}

TEST_CASE("pool reconfigure: a lowered queue_max refuses the newest waiters beyond it; the oldest keeps its place") {
  running_pool p("prcqueue", 1, 1, [](shmbox::pool_options& o) { o.queue_max = 3; });
  const pool_guard& g = p.guard;
  auto& pool = p.pool;
  auto held = pool->take(10s);
  REQUIRE(held);
  std::vector<std::unique_ptr<child>> waiters;
  for (std::uint32_t k = 1; k <= 3; ++k) {
    waiters.push_back(taker(g.name, 30000));
    REQUIRE(settles(g.name, [k](const shmbox::pool_info& i) { return i.queued == k; }, 10s));
  }
  REQUIRE(reconfigure(*pool, {.queue_max = 1}));
  for (int k : {1, 2}) {
    const std::string line = line_starting(*waiters[k], "error", 10s);
    CHECK(line.rfind("error no_members_queue_full", 0) == 0);
    CHECK(line.find("queue_max was lowered to 1") != std::string::npos);
    CHECK(shmtest::exited_with(waiters[k]->wait(10s), 3));
  }
  {
    const auto i = snapshot(g.name);
    CHECK(i.queue_max == 1);
    CHECK(i.queued == 1);
    CHECK(i.count.no_members_queue_full == 2);
  }
  // The oldest waiter still gets the member.
  CHECK(held->give_back() == shmbox::return_status::ok);
  CHECK(parse_took(line_starting(*waiters[0], "took", 10s)).ok);
  CHECK(line_starting(*waiters[0], "returned") == "returned ok");
  CHECK(shmtest::exited_with(waiters[0]->wait(10s), 0));
  // queue_max 0: a take that finds none free no longer waits.
  REQUIRE(reconfigure(*pool, {.queue_max = 0}));
  auto busy = pool->take(10s);
  REQUIRE(busy);
  auto other = shmbox::Pool::open(g.name);
  REQUIRE(other);
  auto r = other->take(5s);
  REQUIRE(!r);
  CHECK(r.error() == shmbox::errc::no_members_queue_full);
  CHECK(busy->give_back() == shmbox::return_status::ok);
  check_settled(g.name, 1);
  check_counts(snapshot(g.name));
}

TEST_CASE("pool reconfigure: without a supervisor the values are set and applied when one runs; a lowered cull_after culls at once") {
  pool_guard g(shmtest::unique_name("prccull"));
  REQUIRE(shmbox::Pool::create(g.name, small_pool(g.name, 0, 3)));  // cull_after 0: never
  auto pool = shmbox::Pool::open(g.name);
  REQUIRE(pool);
  const auto t0 = std::chrono::steady_clock::now();
  REQUIRE(pool->reconfigure({.init_count = 2}, 10s));  // no supervisor: set, not waited for
  CHECK(since(t0) < 5000ms);
  CHECK(snapshot(g.name).init_count == 2);
  CHECK(snapshot(g.name).members.empty());
  auto sup = supervisor(g.name);
  check_settled(g.name, 2);
  // init 0 and cull_after 200 ms: both idle members go (they are idle longer once it has passed).
  REQUIRE(reconfigure(*pool, {.init_count = 0, .cull_after = 200ms}));
  CHECK(settles(g.name, [](const shmbox::pool_info& i) { return i.members.empty(); }, 15s));
  const auto i = snapshot(g.name);
  CHECK(i.cull_after == 200ms);
  CHECK(i.count.killed_free_culled == 2);
  CHECK(i.reconfigurations == 2);
  check_counts(i);
}

TEST_CASE("pool reconfigure: auto_grow_threshold is turned on and off on a running pool") {
  running_pool p("prcgrow", 2, 5);
  auto& pool = *p.pool;
  REQUIRE(reconfigure(pool, {.auto_grow_threshold = 1}));
  CHECK(snapshot(p.name()).auto_grow_threshold == std::optional<std::uint32_t>(1));
  auto a = pool.take(10s);
  REQUIRE(a);
  CHECK(settles(p.name(), [](const shmbox::pool_info& i) { return i.free == 3 && i.in_use == 1; }, 20s));
  CHECK(snapshot(p.name()).count.auto_grow_starts == 2);
  REQUIRE(reconfigure(pool, {.auto_grow_threshold = shmbox::kNoAutoGrow}));
  CHECK(!snapshot(p.name()).auto_grow_threshold);
  std::vector<shmbox::Lease> more = take_leases(pool, 3);  // leaves none free: no growth asked
  CHECK(settles(p.name(), [](const shmbox::pool_info& i) { return i.free == 0 && i.in_use == 4 && i.starting == 0; }, 10s));
  CHECK(snapshot(p.name()).count.auto_grow_starts == 2);
  CHECK(a->give_back() == shmbox::return_status::ok);
  for (auto& l : more) CHECK(l.give_back() == shmbox::return_status::ok);
  check_settled(p.name(), 4);
  // Invalid: a threshold above max_count.
  auto bad = pool.reconfigure({.auto_grow_threshold = 6}, 5s);
  REQUIRE(!bad);
  CHECK(bad.error() == shmbox::errc::invalid_argument);
}

// A reconfigure (`shmbox pool reconfigure`, the tests' build with crash
// points) killed at every pass of every table point: the pool has the old
// values or the new ones, never a mix (RC1: one journalled section), and
// it stays usable. Each pass starts again from the old values.
TEST_CASE("fault matrix: a reconfigure killed at every pool point leaves the old values or the new ones, never a mix") {
  running_pool p("fmrcfg", 1, 2, [](shmbox::pool_options& o) {
    o.table_size = 4;
    o.queue_max = 3;
  });
  auto& pool = *p.pool;
  using values = std::tuple<std::uint32_t, std::uint32_t, std::uint32_t, long long, std::optional<std::uint32_t>>;
  const values old_values{1, 2, 3, 0, std::nullopt}, new_values{2, 4, 2, 60000, 1};
  auto now = [&] {
    const auto i = snapshot(p.name());
    return values{i.init_count, i.max_count, i.queue_max, static_cast<long long>(i.cull_after.count()), i.auto_grow_threshold};
  };
  for (const char* point : {"pool.after_journal", "pool.mid_apply", "pool.after_apply", "pool.locked"}) {
    bool finished = false;
    int kills = 0;
    for (int n = 1; n <= 8 && !finished; ++n) {
      const std::string fault = std::string(point) + ":" + std::to_string(n);
      CAPTURE(fault);
      REQUIRE(now() == old_values);
      child victim({shmtest::cli_path(), "pool", "reconfigure", p.name(), "--init", "2", "--max", "4", "--queue-max", "2",
                    "--cull-after", "1m", "--auto-grow", "1", "--timeout", "20s"},
                   {"SHMBOX_FAULT=" + fault});
      const int st = victim.wait(30s);
      if (shmtest::exited_with(st, 0)) {
        finished = true;
      } else {
        REQUIRE(shmtest::killed_by(st, SIGKILL));
        ++kills;
      }
      // The supervisor (the next lock holder) completes a committed journal (J5).
      values seen{};
      CHECK(shmtest::eventually([&] {
        seen = now();
        return snapshot(p.name()).ledger_settled && (seen == old_values || seen == new_values);
      }, 10s));
      CHECK((seen == old_values || seen == new_values));
      if (finished) CHECK(seen == new_values);
      // Back to the old values for the next pass (the supervisor may have started a second member: 2 <= max 2).
      auto r = pool.reconfigure({.init_count = 1, .max_count = 2, .cull_after = 0ms, .queue_max = 3,
                                 .auto_grow_threshold = shmbox::kNoAutoGrow},
                                20s);
      INFO(shmbox::explain(r.error()));
      REQUIRE(r);
    }
    CHECK(finished);
    CHECK(kills >= 1);
  }
  check_take_works(p.name(), &pool);
  check_counts(snapshot(p.name()));
}

// A second uid (nobody, through setpriv and the CLI): a 0666 pool is
// writable by every local user, who could write its live words anyway, so
// that user may reconfigure and cull it through the protocol (the running
// supervisor, root's, applies it); a 0600 pool it cannot open at all.
TEST_CASE("pool reconfigure: another uid reconfigures and culls a 0666 pool through its supervisor; a 0600 pool refuses it") {
  if (!shmtest::nobody_can_run_cli()) return;
  pool_guard open_pool(shmtest::unique_name("prcuid"));
  auto opts = small_pool(open_pool.name, 1, 2);
  opts.table_size = 3;
  opts.mode = 0666;
  REQUIRE(shmbox::Pool::create(open_pool.name, opts));
  // A pool others can write is supervised only with the command on the supervisor's command line.
  child run({shmtest::cli_path(), "pool", "run", open_pool.name, "--command", opts.command});
  check_settled(open_pool.name, 1);
  auto r = shmtest::as_nobody(65534, {"pool", "reconfigure", open_pool.name, "--max", "3", "--init", "2", "--any-owner", "--timeout", "20s"},
                              30s);
  INFO(r.err);
  CHECK(r.code == 0);
  check_settled(open_pool.name, 2);
  CHECK(snapshot(open_pool.name).max_count == 3);
  r = shmtest::as_nobody(65534, {"pool", "reconfigure", open_pool.name, "--init", "1", "--any-owner", "--timeout", "20s"}, 30s);
  CHECK(r.code == 0);
  r = shmtest::as_nobody(65534, {"pool", "cull", open_pool.name, "--any-owner", "--timeout", "20s"}, 30s);
  INFO(r.err);
  CHECK(r.code == 0);
  CHECK(r.out == "culled 1 member of pool '" + open_pool.name + "'\n");
  check_settled(open_pool.name, 1);

  running_pool closed_pool("prcuid0", 1, 1);  // 0600
  r = shmtest::as_nobody(65534, {"pool", "reconfigure", closed_pool.name(), "--max", "1", "--any-owner"}, 30s);
  CHECK(r.code == 1);
  CHECK(r.err.find("permission denied") != std::string::npos);
  CHECK(snapshot(closed_pool.name()).reconfigurations == 0);
  run.kill(SIGTERM);
  CHECK(shmtest::exited_with(run.wait(10s), 0));
}
