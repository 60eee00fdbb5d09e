// Pool leases: who gets one and how each one ends. The pool's ledger
// (pool_table.hpp, "THE LEDGER") after a kill storm of takers and workers;
// a take or a give back that finds its member's worker dead before the
// supervisor does; group takes that spread over equally free pools. Every
// party is a separate program: the supervisor is `shmbox-test-helper
// pool-supervise`, the members `pool-worker`, the takers `pool-take` and
// `pool-churn` (a take/give-back loop); this process kills them and reads
// the pool with inspect_pool.
//
// Every wait is bounded; every pool is removed by a pool_guard (which kills
// its workers' process groups) even when a check fails. The storm runs
// SHMBOX_POOL_STORM_SECONDS seconds (default 4; scripts/soak.sh runs it longer).
#include <doctest/doctest.h>
#include <dirent.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
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

// Members: the helper's pool-worker, its lines to /dev/null (nobody reads them here).
shmbox::pool_options test_pool(std::uint32_t init, std::uint32_t max) {
  shmbox::pool_options o;
  o.init_count = init;
  o.max_count = max;
  o.queue_max = 8;
  o.max_clients = 32;
  o.command = shmtest::cat("exec env -u SHMBOX_FAULT ", shmtest::helper_path(), " pool-worker >/dev/null");
  o.member.capacity = 16;
  o.member.slot_size = 64;
  o.start_timeout = 5000ms;
  o.stop_grace = 200ms;
  return o;
}

// Reads what a child said so far (a supervisor's log lines), so that its pipe never fills.
void drain(child& c) {
  while (c.read_line(1ms)) {
  }
}

// `members` members, all free with a live worker, none starting or stopping,
// and no table operation half done (a journal a killed process left).
bool all_free(const shmbox::pool_info& i, std::uint32_t members) {
  if (i.members.size() != members || i.free != members || !i.ledger_settled) return false;
  return std::all_of(i.members.begin(), i.members.end(), [](const shmbox::member_info& m) { return m.worker_alive; });
}

// The ledger (pool_table.hpp LG), computed here from the counters and the
// member table: takes minus every way a lease ended minus the leases out now
// (0 when it holds). Checked in a quiet pool, against inspect_pool's own too.
std::int64_t ledger_gap(const shmbox::pool_info& i) {
  const auto& c = i.count;
  return static_cast<std::int64_t>(c.takes) -
         static_cast<std::int64_t>(c.returns_ok + c.returns_fail + c.killed_in_use + c.revoked_in_use + i.in_use);
}

void check_ledger(const shmbox::pool_info& i) {
  INFO(describe(i));
  CHECK(ledger_gap(i) == 0);
  CHECK(i.ledger_gap == 0);
  CHECK(i.ledger_settled);
}

double storm_seconds() {
  const char* s = std::getenv("SHMBOX_POOL_STORM_SECONDS");
  const double v = s != nullptr ? std::strtod(s, nullptr) : 0.0;
  return v > 0 ? v : 4.0;
}

}  // namespace

// ---------------------------------------------------------------------------
// The ledger (item 6)
// ---------------------------------------------------------------------------

TEST_CASE("pool ledger: after a kill storm of takers and workers, every lease is counted exactly once") {
  pool_guard g(shmtest::unique_name("lstorm"));
  constexpr std::uint32_t kMembers = 4;
  REQUIRE(shmbox::Pool::create(g.name, test_pool(kMembers, kMembers)));
  auto sup = supervisor(g.name);
  CHECK(settles(g.name, [&](const shmbox::pool_info& i) { return all_free(i, kMembers); }));

  std::mt19937 rng(std::random_device{}());
  const auto seed = rng();
  CAPTURE(seed);
  rng.seed(seed);
  std::uint32_t next_seed = 1;
  auto churner = [&] {
    auto c = std::make_unique<child>(std::vector<std::string>{shmtest::helper_path(), "pool-churn", g.name,
                                                              std::to_string(seed + next_seed++), "--hold-ms", "60",
                                                              "--fail-every", "8"},
                                     std::vector<std::string>{}, true);
    REQUIRE(line_starting(*c, "churning ") == "churning " + std::to_string(c->pid()));
    return c;
  };
  std::vector<std::unique_ptr<child>> takers;
  for (int i = 0; i < 4; ++i) takers.push_back(churner());

  // The storm: every 10..40 ms a random taker (2 in 8) or worker (1 in 8)
  // gets SIGKILL, or nobody. The worker is one whose member is leased when
  // there is one; once the pool has seen its death (the member stopping),
  // the lease's holder gets SIGKILL too, so that some holders die holding a
  // lease the pool ended. A killed taker is replaced by a new one; a member
  // whose taker or worker died is replaced by the supervisor (which backs
  // off for a second after a worker that dies young, so workers are killed
  // less often). The pace is the storm's, not a synchronisation.
  int taker_kills = 0, worker_kills = 0, holder_kills = 0;
  auto kill_taker = [&](std::size_t k) {
    takers[k]->kill(SIGKILL);
    takers[k]->wait(10s);
    ++taker_kills;
    takers[k] = churner();
  };
  // The storm lasts `seconds` and goes on until it has killed at least one
  // taker a second and a worker every two (a slow machine, a sanitizer
  // build, gets there later), for at most 60 s more.
  const double seconds = storm_seconds();
  const auto start = std::chrono::steady_clock::now();
  const auto end = start + std::chrono::duration<double>(seconds);
  const auto hard_end = end + 60s;
  const auto storming = [&] {
    const auto now = std::chrono::steady_clock::now();
    return now < end || ((taker_kills < seconds || worker_kills < seconds / 2) && now < hard_end);
  };
  while (storming()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10 + rng() % 31));
    drain(*sup);
    const auto dice = rng() % 8;
    if (dice < 5) continue;
    if (dice < 7) {
      kill_taker(rng() % takers.size());
      continue;
    }
    std::vector<shmbox::member_info> leased;
    if (auto i = shmbox::inspect_pool(g.name))
      for (const auto& m : i->members)
        if (m.state == member_state::in_use && m.worker_alive && m.worker_pid > 1) leased.push_back(m);
    if (leased.empty()) {
      const auto workers = live_workers(g.name);
      if (!workers.empty() && ::kill(workers[rng() % workers.size()].pid, SIGKILL) == 0) ++worker_kills;
      continue;
    }
    const shmbox::member_info victim = leased[rng() % leased.size()];
    if (::kill(static_cast<pid_t>(victim.worker_pid), SIGKILL) != 0) continue;
    ++worker_kills;
    const bool seen = shmtest::eventually([&] {
      auto i = shmbox::inspect_pool(g.name);
      if (!i) return false;
      for (const auto& m : i->members)
        if (m.index == victim.index) return m.generation != victim.generation || m.state != member_state::in_use;
      return true;
    }, 1s);
    for (std::size_t k = 0; seen && k < takers.size(); ++k)
      if (static_cast<std::uint32_t>(takers[k]->pid()) == victim.taker_pid) {
        kill_taker(k);
        ++holder_kills;
      }
  }
  const double stormed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // Quiet: every taker finishes its lease and exits; the supervisor replaces what died.
  for (auto& t : takers) t->close_stdin();
  for (auto& t : takers) {
    CHECK(line_starting(*t, "done", 30s).rfind("done", 0) == 0);
    CHECK(shmtest::exited_with(t->wait(30s), 0));
  }
  MESSAGE("storm: " << taker_kills << " takers (" << holder_kills << " right after their member's worker) and " << worker_kills
                    << " workers killed in " << stormed << " s");
  CHECK(taker_kills >= seconds);
  CHECK(worker_kills >= seconds / 2);
  CHECK(settles(g.name, [&](const shmbox::pool_info& i) {
    drain(*sup);
    return all_free(i, kMembers);
  }, 60s));
  const auto i = snapshot(g.name);
  MESSAGE(describe(i));
  CHECK(i.count.takes > 0);
  check_ledger(i);
}

TEST_CASE("pool ledger: a holder that dies holding a lease its member's crash ended counts once") {
  pool_guard g(shmtest::unique_name("lrevoke"));
  REQUIRE(shmbox::Pool::create(g.name, test_pool(1, 1)));
  auto sup = supervisor(g.name);
  CHECK(settles(g.name, [](const shmbox::pool_info& i) { return all_free(i, 1); }));
  // The holder posts "crash": its member's worker kills itself while leased.
  child holder({shmtest::helper_path(), "pool-take", g.name, "5000", "--post", "crash", "--hold"}, {}, true);
  CHECK(line_starting(holder, "took ").rfind("took ", 0) == 0);
  CHECK(settles(g.name, [](const shmbox::pool_info& i) { return i.count.crashed == 1; }, 10s));
  holder.kill(SIGKILL);  // dies holding the lease the crash ended
  holder.wait(10s);
  CHECK(settles(g.name, [&](const shmbox::pool_info& i) {
    drain(*sup);
    return all_free(i, 1) && i.count.starts == 2;
  }));
  const auto i = snapshot(g.name);
  INFO(describe(i));
  CHECK(i.count.takes == 1);
  CHECK(i.count.killed_in_use == 0);  // the member was stopped before its holder died
  CHECK(i.count.revoked_in_use == 1);
  check_ledger(i);
}

// ---------------------------------------------------------------------------
// A member whose worker died is never handed out (item 8: pool_table.hpp LV)
// ---------------------------------------------------------------------------

namespace {

// Stops the supervisor the way `pool run` stops on SIGTERM: it resigns and
// the members keep running, so that nobody but the takes and give backs
// below can notice a worker's death.
void resign(child& sup) {
  sup.close_stdin();
  CHECK(line_starting(sup, "stopped", 10s) == "stopped");
  CHECK(shmtest::exited_with(sup.wait(10s), 0));
}

// SIGKILL to member `index`'s worker; returns once the process is gone (its
// OFD locks, the box's owner byte among them, are dropped at its exit).
void kill_worker(const std::string& pool, std::uint32_t index) {
  const auto i = snapshot(pool);
  const shmbox::member_info* m = nullptr;
  for (const auto& e : i.members)
    if (e.index == index) m = &e;
  REQUIRE(m != nullptr);
  REQUIRE(m->worker_pid > 1);
  const auto pid = static_cast<pid_t>(m->worker_pid);
  REQUIRE(::kill(pid, SIGKILL) == 0);
  CHECK(shmtest::eventually([&] {
    const char st = shmtest::process_state(pid);
    return st == 'Z' || st == 'X' || st == '?';
  }, 10s));
}

const shmbox::member_info* member(const shmbox::pool_info& i, std::uint32_t index) {
  for (const auto& m : i.members)
    if (m.index == index) return &m;
  return nullptr;
}

}  // namespace

TEST_CASE("pool: a take right after a worker died does not lease its member, and a give back of a dead member is never ok") {
  pool_guard g(shmtest::unique_name("ldead"));
  REQUIRE(shmbox::Pool::create(g.name, test_pool(2, 2)));
  {
    auto sup = supervisor(g.name);
    CHECK(settles(g.name, [](const shmbox::pool_info& i) { return all_free(i, 2); }));
    resign(*sup);
  }
  auto pool = shmbox::Pool::open(g.name);
  REQUIRE(pool);
  // Both taken, `victim` given back last: it heads the free list (the next take's choice).
  std::uint32_t victim = 0, other = 0;
  {
    auto a = pool->take(0ns);
    auto b = pool->take(0ns);
    REQUIRE(a);
    REQUIRE(b);
    other = a->token().member;
    victim = b->token().member;
    CHECK(a->give_back() == shmbox::return_status::ok);
    CHECK(b->give_back() == shmbox::return_status::ok);
  }
  kill_worker(g.name, victim);
  // At once: no supervisor has seen the death, the take does.
  auto l = pool->take(0ns);
  INFO(shmbox::explain(l.error()));
  REQUIRE(l);
  CHECK(l->token().member == other);
  auto none = pool->take(0ns);  // the victim is stopping, the other one leased
  CHECK(!none);
  {
    const auto i = snapshot(g.name);
    INFO(describe(i));
    REQUIRE(member(i, victim) != nullptr);
    CHECK(member(i, victim)->state == member_state::stopping);
    CHECK(member(i, victim)->stopping_why == "crashed");
    CHECK(i.count.crashed == 1);
    CHECK(i.count.revoked_in_use == 0);  // it was free
    check_ledger(i);
  }
  // The leased member's worker dies: its give back answers stale, not ok.
  kill_worker(g.name, other);
  CHECK(l->give_back(shmbox::outcome::ok) == shmbox::return_status::stale);
  {
    const auto i = snapshot(g.name);
    INFO(describe(i));
    CHECK(member(i, other)->state == member_state::stopping);
    CHECK(i.count.crashed == 2);
    CHECK(i.count.revoked_in_use == 1);
    CHECK(i.count.stale_returns == 1);
    CHECK(i.count.returns_ok == 2);
    check_ledger(i);
  }
  // A supervisor replaces both; takes work again.
  auto sup = supervisor(g.name);
  CHECK(settles(g.name, [](const shmbox::pool_info& i) { return all_free(i, 2) && i.count.starts == 4; }));
  auto again = pool->take(5s);
  REQUIRE(again);
  CHECK(again->give_back() == shmbox::return_status::ok);
  check_ledger(snapshot(g.name));
}

TEST_CASE("pool: a waiting taker is never granted a member whose worker died") {
  SUBCASE("the worker dies before the give back: the give back is stale and grants nothing") {
    pool_guard g(shmtest::unique_name("lgrant1"));
    REQUIRE(shmbox::Pool::create(g.name, test_pool(1, 1)));
    {
      auto sup = supervisor(g.name);
      CHECK(settles(g.name, [](const shmbox::pool_info& i) { return all_free(i, 1); }));
      resign(*sup);
    }
    auto pool = shmbox::Pool::open(g.name);
    REQUIRE(pool);
    auto held = pool->take(0ns);
    REQUIRE(held);
    const std::uint64_t old_gen = held->token().generation;
    child waiter({shmtest::helper_path(), "pool-take", g.name, "20000"}, {}, true);
    CHECK(settles(g.name, [](const shmbox::pool_info& i) { return i.queued == 1; }, 10s));
    kill_worker(g.name, held->token().member);
    CHECK(held->give_back() == shmbox::return_status::stale);
    // The waiter gets the replacement a supervisor starts, never the dead member.
    auto sup = supervisor(g.name);
    const std::string took = line_starting(waiter, "took ", 20s);
    INFO(took);
    std::istringstream in(took);
    std::string tag, box;
    std::uint32_t index = 0;
    std::uint64_t gen = 0;
    CHECK((in >> tag >> index >> box >> gen));
    CHECK(gen > old_gen);
    CHECK(line_starting(waiter, "returned") == "returned ok");
    CHECK(shmtest::exited_with(waiter.wait(10s), 0));
    CHECK(settles(g.name, [](const shmbox::pool_info& i) { return all_free(i, 1); }));
    const auto i = snapshot(g.name);
    CHECK(i.count.revoked_in_use == 1);
    check_ledger(i);
  }
  SUBCASE("the worker dies after the grant, before the waiter collects it: the waiter waits on for a live one") {
    pool_guard g(shmtest::unique_name("lgrant2"));
    REQUIRE(shmbox::Pool::create(g.name, test_pool(1, 1)));
    {
      auto sup = supervisor(g.name);
      CHECK(settles(g.name, [](const shmbox::pool_info& i) { return all_free(i, 1); }));
      resign(*sup);
    }
    auto pool = shmbox::Pool::open(g.name);
    REQUIRE(pool);
    auto held = pool->take(0ns);
    REQUIRE(held);
    const std::uint32_t index = held->token().member;
    const std::uint64_t old_gen = held->token().generation;
    child waiter({shmtest::helper_path(), "pool-take", g.name, "20000"}, {}, true);
    CHECK(settles(g.name, [](const shmbox::pool_info& i) { return i.queued == 1; }, 10s));
    // The waiter is stopped (outside the table lock: a stopped holder would
    // hold up the give back) so that it cannot collect the grant yet.
    bool stopped_outside = false;
    for (int attempt = 0; attempt < 100 && !stopped_outside; ++attempt) {
      waiter.kill(SIGSTOP);
      REQUIRE(shmtest::wait_for_state(waiter.pid(), 'T', 5s));
      stopped_outside = snapshot(g.name).ledger_settled;  // the table lock is free
      if (!stopped_outside) {
        waiter.kill(SIGCONT);
        std::this_thread::sleep_for(1ms);  // a retry's pause, not a synchronisation
      }
    }
    REQUIRE(stopped_outside);
    CHECK(held->give_back() == shmbox::return_status::ok);  // its worker is alive: granted to the waiter
    CHECK(snapshot(g.name).count.granted == 1);
    kill_worker(g.name, index);
    waiter.kill(SIGCONT);
    // The waiter finds the granted member dead (LV2): it is stopped, and the waiter waits on.
    CHECK(settles(g.name, [&](const shmbox::pool_info& i) {
      return member(i, index) != nullptr && member(i, index)->state == member_state::stopping;
    }, 10s));
    auto sup = supervisor(g.name);
    const std::string took = line_starting(waiter, "took ", 20s);
    INFO(took);
    std::istringstream in(took);
    std::string tag, box;
    std::uint32_t got = 0;
    std::uint64_t gen = 0;
    CHECK((in >> tag >> got >> box >> gen));
    CHECK(gen > old_gen);
    CHECK(line_starting(waiter, "returned") == "returned ok");
    CHECK(shmtest::exited_with(waiter.wait(10s), 0));
    CHECK(settles(g.name, [](const shmbox::pool_info& i) { return all_free(i, 1); }));
    const auto i = snapshot(g.name);
    INFO(describe(i));
    CHECK(i.count.granted == 2);
    CHECK(i.count.revoked_in_use == 1);
    CHECK(i.count.crashed == 1);
    check_ledger(i);
  }
}

// ---------------------------------------------------------------------------
// Group takes share equally free pools (item 7)
// ---------------------------------------------------------------------------

TEST_CASE("pool group: equally free pools share the takes") {
  const std::string group = shmtest::unique_name("lgroup");
  pool_guard a(shmtest::unique_name("lgroup-a")), b(shmtest::unique_name("lgroup-b"));
  auto opts = test_pool(1, 1);
  opts.group = group;
  REQUIRE(shmbox::Pool::create(a.name, opts));
  REQUIRE(shmbox::Pool::create(b.name, opts));
  auto sup_a = supervisor(a.name);
  auto sup_b = supervisor(b.name);
  CHECK(settles(a.name, [](const shmbox::pool_info& i) { return all_free(i, 1); }));
  CHECK(settles(b.name, [](const shmbox::pool_info& i) { return all_free(i, 1); }));
  // 50 takes, each by a new process (as `pool take` clients are), each
  // given back before the next: every take sees two pools with 1 free, 0 in use.
  int from_a = 0, from_b = 0;
  for (int n = 0; n < 50; ++n) {
    child t({shmtest::helper_path(), "pool-take", group, "5000", "--group"});
    const std::string took = line_starting(t, "took ", 20s);
    CHECK(line_starting(t, "returned") == "returned ok");
    CHECK(shmtest::exited_with(t.wait(10s), 0));
    std::istringstream in(took);
    std::string tag, box;
    std::uint32_t index = 0;
    REQUIRE((in >> tag >> index >> box));
    if (box.rfind(a.name + ".m", 0) == 0) ++from_a;
    if (box.rfind(b.name + ".m", 0) == 0) ++from_b;
  }
  MESSAGE("pool a: " << from_a << " takes, pool b: " << from_b);
  CHECK(from_a + from_b == 50);
  // Fair coin: P(fewer than 5 of 50 for one pool) = 2 * sum_{k<5} C(50,k) / 2^50 < 5e-10.
  CHECK(from_a >= 5);
  CHECK(from_b >= 5);
}
