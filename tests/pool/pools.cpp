// Pools (issue 16, the pooler): every party a separate program. The
// supervisor is `shmbox-test-helper pool-supervise`, the members run
// `shmbox-test-helper pool-worker` (the pool's command), takers are this
// process or `pool-take` helpers. What is checked is the pool's own state
// (inspect_pool: member table, gauges, counters), the worker processes in
// /proc (one live worker per member entry, none without one) and the member
// boxes in /dev/shm, never log lines alone.
//
// Every wait is bounded (shmtest::eventually, line handshakes with timeouts);
// every pool is removed by a pool_guard, which also kills the worker process
// groups, even when a check fails.
#include <doctest/doctest.h>
#include <dirent.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "pool/pool_table.hpp"
#include "shmbox/shmbox.hpp"
#include "pool_support.hpp"
#include "support.hpp"

using namespace std::chrono_literals;
using shmbox::member_state;
using shmtest::child;
using shmtest::line_starting;

using namespace pooltest;


// ---------------------------------------------------------------------------
// Take and give back
// ---------------------------------------------------------------------------

TEST_CASE("pool: a member is taken, used and given back, in this process and in another") {
  pool_guard g(shmtest::unique_name("ptake"));
  REQUIRE(shmbox::Pool::create(g.name, small_pool(g.name, 2, 2)));
  CHECK(shmbox::Pool::create(g.name, small_pool(g.name, 2, 2)).error() == shmbox::errc::exists);
  auto sup = supervisor(g.name);
  check_settled(g.name, 2);
  const auto before = snapshot(g.name);
  CHECK(before.supervisor_pid == static_cast<std::uint32_t>(sup->pid()));
  CHECK(before.supervisor_alive);
  CHECK(before.count.starts == 2);

  auto pool = shmbox::Pool::open(g.name);
  REQUIRE(pool);
  auto lease = pool->take(10s);
  REQUIRE(lease);
  const shmbox::lease_token t = lease->token();
  {
    const auto i = snapshot(g.name);
    check_gauges(i);
    CHECK(i.in_use == 1);
    CHECK(i.free == 1);
    const auto* m = find_member(i, t.member);
    REQUIRE(m != nullptr);
    CHECK(m->state == member_state::in_use);
    CHECK(m->generation == t.generation);
    CHECK(m->box == lease->box());
    CHECK(m->taker_pid == static_cast<std::uint32_t>(::getpid()));
    CHECK(m->taker_alive);
    CHECK(m->worker_alive);
    CHECK(m->leases == 1);
    CHECK(lease->worker_pid() == m->worker_pid);
  }
  // The worker behind the lease gets what the holder posts.
  CHECK(lease->producer().post("hello") == shmbox::post_status::stored);
  CHECK(worker_said(g.name, shmtest::cat("got ", std::to_string(t.member), " ", std::to_string(t.generation), " hello")));
  CHECK(!lease->returned());
  CHECK(lease->give_back(shmbox::outcome::ok) == shmbox::return_status::ok);
  CHECK(lease->returned());

  // Another process takes, posts and gives back.
  auto other = taker(g.name, 5000, {"--post", "from-child"});
  const took_line tl = parse_took(line_starting(*other, "took"));
  CHECK(tl.ok);
  CHECK(line_starting(*other, "posted") == "posted stored");
  CHECK(line_starting(*other, "returned") == "returned ok");
  CHECK(shmtest::exited_with(other->wait(10s), 0));
  CHECK(worker_said(g.name, shmtest::cat("got ", std::to_string(tl.member), " ", std::to_string(tl.generation), " from-child")));

  check_settled(g.name, 2);
  const auto after = snapshot(g.name);
  CHECK(after.count.takes == 2);
  CHECK(after.count.returns_ok == 2);
  CHECK(after.count.starts == 2);  // nothing was replaced
  check_counts(after);
  for (const auto& m : after.members) CHECK(m.generation == find_member(before, m.index)->generation);
}

TEST_CASE("pool: the most recently returned member is taken first (LIFO)") {
  pool_guard g(shmtest::unique_name("plifo"));
  REQUIRE(shmbox::Pool::create(g.name, small_pool(g.name, 3, 3)));
  auto sup = supervisor(g.name);
  check_settled(g.name, 3);
  auto pool = shmbox::Pool::open(g.name);
  REQUIRE(pool);
  std::vector<shmbox::Lease> held;
  for (int i = 0; i < 3; ++i) {
    auto l = pool->take(10s);
    REQUIRE(l);
    held.push_back(std::move(*l));
  }
  const std::uint32_t a = held[0].token().member, b = held[1].token().member, c = held[2].token().member;
  CHECK(std::set<std::uint32_t>{a, b, c}.size() == 3);
  // Given back b, a, c: taken again c, a, b.
  CHECK(held[1].give_back() == shmbox::return_status::ok);
  CHECK(held[0].give_back() == shmbox::return_status::ok);
  CHECK(held[2].give_back() == shmbox::return_status::ok);
  for (const std::uint32_t want : {c, a, b}) {
    auto l = pool->take(0ns);
    REQUIRE(l);
    CHECK(l->token().member == want);
    held.push_back(std::move(*l));
  }
  for (auto& l : held)
    if (!l.returned()) CHECK(l.give_back() == shmbox::return_status::ok);
  check_settled(g.name, 3);
  check_counts(snapshot(g.name));
}

TEST_CASE("pool: a holder killed with its lease: the member is replaced, its messages dead-lettered or counted lost") {
  for (const bool with_dead_letters : {true, false}) {
    CAPTURE(with_dead_letters);
    pool_guard g(shmtest::unique_name("pkill"));
    shmtest::segment_guard dl(shmtest::unique_name("pkill-dl"));
    auto opts = small_pool(g.name, 1, 1);
    if (with_dead_letters) {
      REQUIRE(shmbox::Box::create(dl.name, {.capacity = 64, .slot_size = 64}));
      opts.dead_letters = dl.name;
    }
    REQUIRE(shmbox::Pool::create(g.name, opts));
    auto sup = supervisor(g.name);
    check_settled(g.name, 1);
    // The worker takes "hang" and stops receiving: m1 and m2 stay in its box.
    auto holder = taker(g.name, 10000, {"--post", "hang", "--post", "m1", "--post", "m2", "--hold"});
    const took_line t = parse_took(line_starting(*holder, "took"));
    REQUIRE(t.ok);
    for (int i = 0; i < 3; ++i) CHECK(line_starting(*holder, "posted") == "posted stored");
    REQUIRE(worker_said(g.name, shmtest::cat("hanging ", std::to_string(t.member), " ", std::to_string(t.generation))));
    {
      const auto i = snapshot(g.name);
      const auto* m = find_member(i, t.member);
      REQUIRE(m != nullptr);
      CHECK(m->state == member_state::in_use);
      CHECK(m->taker_pid == static_cast<std::uint32_t>(holder->pid()));
      CHECK(m->depth == 2);
    }
    holder->kill(SIGKILL);
    holder->wait();
    CHECK(settles(g.name, [](const shmbox::pool_info& i) { return i.count.killed_in_use == 1; }, 10s));
    check_settled(g.name, 1);
    const auto i = snapshot(g.name);
    const auto* m = find_member(i, t.member);
    REQUIRE(m != nullptr);
    CHECK(m->generation > t.generation);  // a new member in the entry
    CHECK(i.count.killed_in_use == 1);
    CHECK(i.count.returns_fail == 0);
    CHECK(i.count.starts == 2);
    check_counts(i);
    if (with_dead_letters) {
      CHECK(i.count.dead_lettered == 2);
      CHECK(i.count.lost == 0);
      // docs/pools.md: "[<member box> <reason>] message".
      const auto letters = drain_box(dl.name);
      std::string seen;
      for (const auto& l : letters) seen += l + " | ";
      INFO("dead letters: " << seen);
      CHECK(letters == std::vector<std::string>{shmtest::cat("[", t.box, " consumer-died] m1"),
                                                           shmtest::cat("[", t.box, " consumer-died] m2")});
    } else {
      CHECK(i.count.dead_lettered == 0);
      CHECK(i.count.lost == 2);
    }
    check_take_works(g.name);
  }
}

TEST_CASE("pool: a double return is refused and counted; the table does not change") {
  pool_guard g(shmtest::unique_name("pdouble"));
  REQUIRE(shmbox::Pool::create(g.name, small_pool(g.name, 2, 2)));
  auto sup = supervisor(g.name);
  check_settled(g.name, 2);
  auto pool = shmbox::Pool::open(g.name);
  REQUIRE(pool);
  auto lease = pool->take(10s);
  REQUIRE(lease);
  const shmbox::lease_token t = lease->token();
  CHECK(lease->give_back(shmbox::outcome::ok) == shmbox::return_status::ok);
  const auto before = snapshot(g.name);
  CHECK(lease->give_back(shmbox::outcome::ok) == shmbox::return_status::double_return);
  CHECK(lease->give_back(shmbox::outcome::fail) == shmbox::return_status::double_return);
  CHECK(pool->give_back(t, shmbox::outcome::ok) == shmbox::return_status::double_return);
  // Through another handle, and after the member was taken again by someone else.
  auto other = shmbox::Pool::open(g.name);
  REQUIRE(other);
  CHECK(other->give_back(t, shmbox::outcome::fail) == shmbox::return_status::double_return);
  const auto after = snapshot(g.name);
  CHECK(after.count.double_returns == 4);
  CHECK(after.count.returns_ok == 1);
  CHECK(after.count.returns_fail == 0);
  REQUIRE(after.members.size() == before.members.size());
  for (std::size_t k = 0; k < after.members.size(); ++k) {
    CHECK(after.members[k].state == before.members[k].state);
    CHECK(after.members[k].generation == before.members[k].generation);
    CHECK(after.members[k].leases == before.members[k].leases);
  }
  auto again = pool->take(0ns);  // LIFO: the same member, a new lease
  REQUIRE(again);
  CHECK(again->token().member == t.member);
  CHECK(again->token().lease != t.lease);
  CHECK(pool->give_back(t, shmbox::outcome::fail) == shmbox::return_status::double_return);  // the old token
  CHECK(find_member(snapshot(g.name), t.member)->state == member_state::in_use);
  CHECK(again->give_back() == shmbox::return_status::ok);
  // A helper process gives the same token back twice.
  auto twice = taker(g.name, 5000, {"--again"});
  CHECK(line_starting(*twice, "returned") == "returned ok");
  CHECK(line_starting(*twice, "again") == "again double-return");
  CHECK(shmtest::exited_with(twice->wait(10s), 0));
  const auto last = snapshot(g.name);
  CHECK(last.count.double_returns == 6);
  check_settled(g.name, 2);
  check_counts(snapshot(g.name));
}

// ---------------------------------------------------------------------------
// A full pool: refusals, timeouts, the queue
// ---------------------------------------------------------------------------

TEST_CASE("pool: a full pool refuses a take with timeout 0 and times out a take that waits") {
  pool_guard g(shmtest::unique_name("pfull"));
  auto opts = small_pool(g.name, 1, 1);
  opts.queue_max = 4;
  REQUIRE(shmbox::Pool::create(g.name, opts));
  auto sup = supervisor(g.name);
  check_settled(g.name, 1);
  auto pool = shmbox::Pool::open(g.name);
  REQUIRE(pool);
  auto held = pool->take(10s);
  REQUIRE(held);
  auto other = shmbox::Pool::open(g.name);
  REQUIRE(other);
  auto t0 = std::chrono::steady_clock::now();
  auto r = other->take(0ns);
  CHECK(!r);
  CHECK(r.error() == shmbox::errc::no_members_at_capacity);
  CHECK(since(t0) < 1000ms);
  t0 = std::chrono::steady_clock::now();
  r = other->take(300ms);
  CHECK(!r);
  CHECK(r.error() == shmbox::errc::timed_out);
  CHECK(since(t0) >= 250ms);
  CHECK(since(t0) < 5000ms);
  // From another process too.
  auto child_take = taker(g.name, 0);
  CHECK(line_starting(*child_take, "error").rfind("error no_members_at_capacity", 0) == 0);
  CHECK(shmtest::exited_with(child_take->wait(10s), 3));
  const auto i = snapshot(g.name);
  CHECK(i.count.no_members_at_capacity == 2);
  CHECK(i.count.take_timeouts == 1);
  CHECK(i.count.takes == 1);
  CHECK(i.queued == 0);
  CHECK(held->give_back() == shmbox::return_status::ok);
  auto now = other->take(0ns);
  CHECK(now);
  if (now) CHECK(now->give_back() == shmbox::return_status::ok);
  check_settled(g.name, 1);
  check_counts(snapshot(g.name));
}

TEST_CASE("pool: queue_max waiters at most; the oldest waiter gets the returned member (FIFO)") {
  pool_guard g(shmtest::unique_name("pqueue"));
  auto opts = small_pool(g.name, 1, 1);
  opts.queue_max = 2;
  REQUIRE(shmbox::Pool::create(g.name, opts));
  auto sup = supervisor(g.name);
  check_settled(g.name, 1);
  auto pool = shmbox::Pool::open(g.name);
  REQUIRE(pool);
  auto held = pool->take(10s);
  REQUIRE(held);
  auto first = taker(g.name, 20000, {"--hold"});
  REQUIRE(settles(g.name, [](const shmbox::pool_info& i) { return i.queued == 1; }, 10s));
  auto second = taker(g.name, 20000);
  REQUIRE(settles(g.name, [](const shmbox::pool_info& i) { return i.queued == 2; }, 10s));
  // A third waiter does not fit.
  auto other = shmbox::Pool::open(g.name);
  REQUIRE(other);
  const auto t0 = std::chrono::steady_clock::now();
  auto r = other->take(5s);
  CHECK(!r);
  CHECK(r.error() == shmbox::errc::no_members_queue_full);
  CHECK(since(t0) < 2000ms);  // refused, not waited
  {
    const auto i = snapshot(g.name);
    CHECK(i.count.no_members_queue_full == 1);
    CHECK(i.count.queue_max_reached >= 1);
  }
  // The returned member goes to the first waiter, not to the free list.
  CHECK(held->give_back() == shmbox::return_status::ok);
  const took_line t1 = parse_took(line_starting(*first, "took", 10s));
  CHECK(t1.ok);
  CHECK(t1.member == held->token().member);
  {
    const auto i = snapshot(g.name);
    CHECK(i.count.granted == 1);
    CHECK(i.queued == 1);  // the second still waits
    CHECK(i.free == 0);
    const auto* m = find_member(i, t1.member);
    REQUIRE(m != nullptr);
    CHECK(m->state == member_state::in_use);
    CHECK(m->taker_pid == static_cast<std::uint32_t>(first->pid()));
  }
  first->write_stdin("go\n");
  CHECK(line_starting(*first, "returned") == "returned ok");
  const took_line t2 = parse_took(line_starting(*second, "took", 10s));
  CHECK(t2.ok);
  CHECK(line_starting(*second, "returned") == "returned ok");
  CHECK(shmtest::exited_with(first->wait(10s), 0));
  CHECK(shmtest::exited_with(second->wait(10s), 0));
  check_settled(g.name, 1);
  const auto i = snapshot(g.name);
  CHECK(i.count.granted == 2);
  CHECK(i.count.takes == 3);
  CHECK(i.count.returns_ok == 3);
  CHECK(i.count.take_timeouts == 0);
  CHECK(i.queued == 0);
  check_counts(i);
}

TEST_CASE("pool: a waiting taker killed in the queue is skipped; the returned member is free again") {
  pool_guard g(shmtest::unique_name("pqdead"));
  auto opts = small_pool(g.name, 1, 1);
  opts.queue_max = 4;
  REQUIRE(shmbox::Pool::create(g.name, opts));
  auto sup = supervisor(g.name);
  check_settled(g.name, 1);
  auto pool = shmbox::Pool::open(g.name);
  REQUIRE(pool);
  auto held = pool->take(10s);
  REQUIRE(held);
  auto waiter = taker(g.name, 20000);
  REQUIRE(settles(g.name, [](const shmbox::pool_info& i) { return i.queued == 1; }, 10s));
  waiter->kill(SIGKILL);
  waiter->wait();
  CHECK(held->give_back() == shmbox::return_status::ok);
  check_settled(g.name, 1);  // not handed to the dead waiter (or taken back from it)
  const auto i = snapshot(g.name);
  CHECK(i.queued == 0);
  check_counts(i);
  check_take_works(g.name, &*pool);
}

TEST_CASE("pool: a lease dropped without give_back counts as failed: the member is replaced") {
  pool_guard g(shmtest::unique_name("pdrop"));
  REQUIRE(shmbox::Pool::create(g.name, small_pool(g.name, 1, 1)));
  auto sup = supervisor(g.name);
  check_settled(g.name, 1);
  auto pool = shmbox::Pool::open(g.name);
  REQUIRE(pool);
  shmbox::lease_token t;
  {
    auto l = pool->take(10s);
    REQUIRE(l);
    t = l->token();
  }  // ~Lease: given back as fail
  CHECK(settles(g.name, [](const shmbox::pool_info& i) { return i.count.returns_fail == 1; }, 10s));
  check_settled(g.name, 1);
  const auto i = snapshot(g.name);
  CHECK(i.members.at(0).generation > t.generation);
  CHECK(i.count.starts == 2);
  check_counts(i);
  CHECK(pool->give_back(t, shmbox::outcome::ok) != shmbox::return_status::ok);  // ended already
}

TEST_CASE("pool: a fork child that destroys inherited Pool and Lease copies gives nothing back; the parent keeps both") {
  pool_guard g(shmtest::unique_name("pfork"));
  REQUIRE(shmbox::Pool::create(g.name, small_pool(g.name, 1, 1)));
  auto sup = supervisor(g.name);
  check_settled(g.name, 1);
  std::optional<shmbox::Pool> pool;
  std::optional<shmbox::Lease> lease;
  {
    auto p = shmbox::Pool::open(g.name);
    REQUIRE(p);
    pool.emplace(std::move(*p));
    auto l = pool->take(10s);
    REQUIRE(l);
    lease.emplace(std::move(*l));
  }
  const shmbox::lease_token t = lease->token();
  std::fflush(nullptr);
  const pid_t kid = ::fork();  // no exec: the child inherits the handles (lib/base/process.hpp H3)
  REQUIRE(kid >= 0);
  if (kid == 0) {
    int code = 0;
    if (lease->give_back(shmbox::outcome::ok) != shmbox::return_status::error) code = 10;
    else if (pool->last_error() != shmbox::errc::inherited_handle) code = 11;
    else if (pool->take(0ns).error() != shmbox::errc::inherited_handle) code = 12;
    else if (pool->give_back(t, shmbox::outcome::fail) != shmbox::return_status::error) code = 13;
    else if (lease->producer().post("from-the-child") != shmbox::post_status::error) code = 14;
    lease.reset();  // ~Lease: would give it back as failed
    pool.reset();   // ~Pool: would give the client entry back
    std::exit(code);
  }
  int st = 0;
  CHECK(shmtest::eventually([&] { return ::waitpid(kid, &st, WNOHANG) == kid; }, 30s));
  CHECK(shmtest::exited_with(st, 0));
  {
    const auto i = snapshot(g.name);
    const auto* m = find_member(i, t.member);
    REQUIRE(m != nullptr);
    CHECK(m->state == member_state::in_use);
    CHECK(m->generation == t.generation);
    CHECK(m->taker_pid == static_cast<std::uint32_t>(::getpid()));
    CHECK(m->taker_alive);
    CHECK(i.count.returns_fail == 0);
    CHECK(i.count.returns_ok == 0);
  }
  CHECK(lease->producer().post("still-ours") == shmbox::post_status::stored);
  CHECK(worker_said(g.name, shmtest::cat("got ", std::to_string(t.member), " ", std::to_string(t.generation), " still-ours")));
  CHECK(lease->give_back(shmbox::outcome::ok) == shmbox::return_status::ok);
  check_settled(g.name, 1);
  const auto after = snapshot(g.name);
  CHECK(after.count.returns_ok == 1);
  CHECK(after.count.returns_fail == 0);
  CHECK(after.count.starts == 1);  // nothing was replaced
  check_take_works(g.name, &*pool);
}

// ---------------------------------------------------------------------------
// Starting on demand, culling
// ---------------------------------------------------------------------------

TEST_CASE("pool: members are started on demand up to max_count") {
  pool_guard g(shmtest::unique_name("pdemand"));
  REQUIRE(shmbox::Pool::create(g.name, small_pool(g.name, 1, 3)));
  auto sup = supervisor(g.name);
  check_settled(g.name, 1);
  auto pool = shmbox::Pool::open(g.name);
  REQUIRE(pool);
  std::vector<shmbox::Lease> held;
  for (int k = 0; k < 3; ++k) {
    if (k == 1) {
      // None free, below max_count: a take that does not wait is told a member is being started.
      auto now = pool->take(0ns);
      CHECK(!now);
      CHECK(now.error() == shmbox::errc::no_members_starting);
      CHECK(snapshot(g.name).count.no_members_starting == 1);
    }
    auto l = pool->take(15s);
    INFO(shmbox::explain(l.error()));
    REQUIRE(l);
    held.push_back(std::move(*l));
  }
  {
    const auto i = snapshot(g.name);
    check_gauges(i);
    CHECK(i.members.size() == 3);
    CHECK(i.in_use == 3);
    CHECK(i.count.starts == 3);
    CHECK(workers_and_boxes_mismatch(i) == "");
  }
  auto r = pool->take(0ns);
  CHECK(!r);
  CHECK(r.error() == shmbox::errc::no_members_at_capacity);
  for (auto& l : held) CHECK(l.give_back() == shmbox::return_status::ok);
  check_settled(g.name, 3);  // cull_after 0: they stay
  const auto i = snapshot(g.name);
  CHECK(i.count.starts == 3);
  CHECK(i.count.killed_free_culled == 0);
  check_counts(i);
}

TEST_CASE("pool: idle members are culled down to init_count; members in use never are") {
  running_pool p("pcull", 1, 3, [](shmbox::pool_options& o) { o.cull_after = 300ms; });
  const pool_guard& g = p.guard;
  auto& pool = p.pool;
  for (auto& l : take_leases(*pool, 3)) CHECK(l.give_back() == shmbox::return_status::ok);
  CHECK(settles(g.name, [](const shmbox::pool_info& i) { return i.count.killed_free_culled == 2; }, 15s));
  check_settled(g.name, 1);
  // Two members in use (one started for it): idle far longer than
  // cull_after, more than init_count, and still never culled.
  auto a = pool->take(10s);
  REQUIRE(a);
  auto b = pool->take(15s);
  REQUIRE(b);
  const auto in_use = snapshot(g.name);
  CHECK(in_use.in_use == 2);
  const auto until = std::chrono::steady_clock::now() + 1200ms;  // 4 x cull_after: an observation window, not a handshake
  while (std::chrono::steady_clock::now() < until) {
    const auto i = snapshot(g.name);
    CHECK(i.in_use == 2);
    for (const auto* l : {&*a, &*b}) {
      const auto* m = find_member(i, l->token().member);
      REQUIRE(m != nullptr);
      CHECK(m->state == member_state::in_use);
      CHECK(m->generation == l->token().generation);
      CHECK(m->worker_alive);
    }
    std::this_thread::sleep_for(50ms);
  }
  CHECK(snapshot(g.name).count.killed_free_culled == 2);
  CHECK(a->give_back() == shmbox::return_status::ok);
  CHECK(b->give_back() == shmbox::return_status::ok);
  CHECK(settles(g.name, [](const shmbox::pool_info& i) { return i.count.killed_free_culled == 3; }, 15s));
  check_settled(g.name, 1);
  check_counts(snapshot(g.name));
}

// Pool::cull (pooler's cull, run now; pool_supervisor.cpp CU).
TEST_CASE("pool: an explicit cull stops idle free members now, longest idle first, down to init_count; never one in use") {
  pool_guard g(shmtest::unique_name("pxcull"));
  REQUIRE(shmbox::Pool::create(g.name, small_pool(g.name, 1, 4)));  // cull_after 0: no timer culls
  auto pool = shmbox::Pool::open(g.name);
  REQUIRE(pool);
  {
    // No supervisor: nobody could stop a member; refused at once, the table unchanged.
    auto r = pool->cull(0ms, 5s);
    REQUIRE(!r);
    CHECK(r.error() == shmbox::errc::refused);
    CHECK(shmbox::explain(r.error()).find("shmbox pool run " + g.name) != std::string::npos);
    auto bad = pool->cull(std::chrono::hours(25), 5s);
    REQUIRE(!bad);
    CHECK(bad.error() == shmbox::errc::invalid_argument);
  }
  auto sup = supervisor(g.name);
  check_settled(g.name, 1);
  std::vector<shmbox::Lease> held = take_leases(*pool, 4);
  // Given back in the order 0, 1, 2: member 0 idles longest. 3 stays in use.
  for (int k = 0; k < 3; ++k) CHECK(held[k].give_back() == shmbox::return_status::ok);
  CHECK(settles(g.name, [](const shmbox::pool_info& i) { return i.free == 3 && i.in_use == 1; }, 10s));
  // Idle at least an hour: none is.
  auto none = pool->cull(std::chrono::hours(1), 15s);
  INFO(shmbox::explain(none.error()));
  REQUIRE(none);
  CHECK(*none == 0);
  // Every free member, down to init_count 1: the member in use counts, so all three free ones go.
  auto n = pool->cull(0ms, 15s);
  INFO(shmbox::explain(n.error()));
  REQUIRE(n);
  CHECK(*n == 3);
  {
    const auto i = snapshot(g.name);
    CHECK(i.count.killed_free_culled == 3);
    CHECK(i.free + i.starting + i.checking == 0);
    CHECK(i.in_use == 1);
    const auto* m = find_member(i, held[3].token().member);
    REQUIRE(m != nullptr);
    CHECK(m->state == member_state::in_use);
    CHECK(m->generation == held[3].token().generation);
  }
  CHECK(held[3].give_back() == shmbox::return_status::ok);
  check_settled(g.name, 1);
  // At init_count: nothing to cull.
  auto at_init = pool->cull(0ms, 15s);
  REQUIRE(at_init);
  CHECK(*at_init == 0);
  // Longest idle first: three members, given back 1, 2, then 0. init_count
  // 1, so a cull stops two: 1 and 2, the longest idle; 0 (returned last) stays.
  held = take_leases(*pool, 3);
  for (int k : {1, 2, 0}) CHECK(held[k].give_back() == shmbox::return_status::ok);
  check_settled(g.name, 3);
  auto two = pool->cull(0ms, 15s);
  REQUIRE(two);
  CHECK(*two == 2);
  check_settled(g.name, 1);
  // The one left is the most recently returned (held[0]): the longest idle went first.
  const auto after = snapshot(g.name);
  REQUIRE(after.members.size() == 1);
  CHECK(after.members[0].index == held[0].token().member);
  CHECK(after.count.killed_free_culled == 5);
  check_counts(after);
}

// A member under its health check (`checking`) is free and idle all the
// same: a cull takes it in its place, never a member idle for less in its
// stead (the supervisor's pass once left `checking` members out of its list).
TEST_CASE("pool: a cull counts a member under its health check as idle, in its place") {
  running_pool p("pchkcull", 1, 2, [](shmbox::pool_options& o) {
    o.health_interval = 100ms;
    o.health_timeout = 60s;  // the hung member stays `checking` for the whole test
  });
  const std::string& name = p.name();
  auto a = p.pool->take(10s);
  REQUIRE(a);
  auto b = p.pool->take(10s);
  REQUIRE(b);
  const shmbox::lease_token ta = a->token(), tb = b->token();
  // a's worker stops receiving: given back, it is pinged and never answers.
  CHECK(a->producer().post("hang") == shmbox::post_status::stored);
  REQUIRE(worker_said(name, shmtest::cat("hanging ", std::to_string(ta.member), " ", std::to_string(ta.generation))));
  CHECK(a->give_back() == shmbox::return_status::ok);
  REQUIRE(settles(name, [&](const shmbox::pool_info& i) {
    const auto* m = find_member(i, ta.member);
    return m != nullptr && m->generation == ta.generation && m->state == member_state::checking;
  }, 10s));
  CHECK(b->give_back() == shmbox::return_status::ok);  // b idles for less than a
  // Two alive, init_count 1: one goes, the longest idle: a, under its check.
  auto n = p.pool->cull(0ms, 15s);
  INFO(shmbox::explain(n.error()));
  REQUIRE(n);
  CHECK(*n == 1);
  const auto i = snapshot(name);
  CHECK(i.count.killed_free_culled == 1);
  CHECK(i.count.killed_free_unhealthy == 0);
  const auto* kept = find_member(i, tb.member);
  REQUIRE(kept != nullptr);
  CHECK(kept->generation == tb.generation);
  CHECK((kept->state == member_state::free || kept->state == member_state::checking));
  const auto* gone = find_member(i, ta.member);
  CHECK((gone == nullptr || gone->generation != ta.generation || gone->state == member_state::stopping));
  check_settled(name, 1);
  const auto last = snapshot(name);
  REQUIRE(last.members.size() == 1);
  CHECK(last.members[0].index == tb.member);
  CHECK(last.members[0].generation == tb.generation);
  check_counts(last);
}

// max_lifetime (pooler's): free members are retired and replaced once past
// it; one in use never under its holder, but at its give back (still ok).
TEST_CASE("pool: max_lifetime replaces free members once past it; a member in use is retired at its give back, never under its holder") {
  running_pool p("plife", 2, 2, [](shmbox::pool_options& o) { o.max_lifetime = 1500ms; });
  const pool_guard& g = p.guard;
  auto lease = p.pool->take(10s);
  REQUIRE(lease);
  const std::uint32_t held = lease->token().member;
  // The free one expires and is replaced (a new generation in its entry), more than once.
  CHECK(settles(g.name, [](const shmbox::pool_info& i) { return i.count.expired_free >= 2; }, 30s));
  {
    const auto i = snapshot(g.name);
    const auto* m = find_member(i, held);
    REQUIRE(m != nullptr);
    CHECK(m->state == member_state::in_use);  // long past its lifetime, and still the holder's
    CHECK(m->generation == lease->token().generation);
    CHECK(m->worker_alive);
    CHECK(i.count.expired_returned == 0);
  }
  CHECK(lease->producer().post("still here") == shmbox::post_status::stored);
  CHECK(lease->give_back() == shmbox::return_status::ok);
  CHECK(settles(g.name, [&](const shmbox::pool_info& i) {
    const auto* m = find_member(i, held);
    return i.count.expired_returned == 1 && m != nullptr && m->generation > lease->token().generation;
  }, 20s));
  // Its counts, from a snapshot with both members settled (members keep
  // retiring: a replacement half started is a member whose start is not counted yet).
  const auto i = check_settled(g.name, 2);
  CHECK(i.count.returns_ok == 1);
  CHECK(i.count.killed_in_use == 0);
  CHECK(i.count.revoked_in_use == 0);
  check_counts(i);
}

TEST_CASE("pool: a take never hands out a member past its max_lifetime (it retires it itself when no supervisor did)") {
  running_pool p("plifetake", 2, 2, [](shmbox::pool_options& o) { o.max_lifetime = 1500ms; });
  const pool_guard& g = p.guard;
  // The supervisor goes (SIGKILL): nobody retires the members but the take.
  // (It may have been replacing one when it died: only the members free
  // then are counted on.)
  p.sup->kill(SIGKILL);
  p.sup->wait();
  const auto at_kill = snapshot(g.name);
  REQUIRE(at_kill.free >= 1);
  std::this_thread::sleep_for(1800ms);  // not a handshake: every member started before the kill passes its lifetime (1.5 s)
  auto l = p.pool->take(0ns);
  CHECK(!l);
  const auto i = snapshot(g.name);
  CHECK(i.count.expired_free == at_kill.count.expired_free + at_kill.free);
  CHECK(i.count.takes == at_kill.count.takes);
  CHECK(i.free == 0);
  for (const auto& was : at_kill.members) {
    if (was.state != member_state::free) continue;
    const auto* m = find_member(i, was.index);
    REQUIRE(m != nullptr);
    CHECK(m->state == member_state::stopping);
    CHECK(m->stopping_why == "expired");
    CHECK(m->generation == was.generation);
  }
}

TEST_CASE("pool: max_lifetime_jitter gives each member its own lifetime within +/- the jitter; a jitter not below the lifetime is refused") {
  auto bad = small_pool("x", 1, 1);
  bad.max_lifetime = 1s;
  bad.max_lifetime_jitter = 1s;
  const auto r = shmbox::Pool::create(shmtest::unique_name("pjitter-bad"), bad);
  REQUIRE(!r);
  CHECK(r.error() == shmbox::errc::invalid_argument);
  CHECK(shmbox::explain(r.error()).find("must be less than max_lifetime") != std::string::npos);

  pool_guard g(shmtest::unique_name("pjitter"));
  auto opts = small_pool(g.name, 1, 4);
  opts.max_lifetime = 10s;
  opts.max_lifetime_jitter = 2s;
  REQUIRE(shmbox::Pool::create(g.name, opts));
  auto h = shmbox::detail::open_pool_segment(g.name, true, false);
  REQUIRE(h);
  std::set<std::uint64_t> lives;
  for (std::uint32_t m = 0; m < 4; ++m)
    for (std::uint64_t gen = 1; gen <= 50; ++gen) {
      const std::uint64_t start = 1'000'000'000;
      const std::uint64_t life = shmbox::detail::member_expiry(**h, m, gen, start) - start;
      CHECK(life >= 8'000'000'000ull);
      CHECK(life <= 12'000'000'000ull);
      lives.insert(life);
      CHECK(shmbox::detail::member_expiry(**h, m, gen, start) - start == life);  // the same answer every time
    }
  CHECK(lives.size() > 150);  // spread, not one value
  CHECK(shmbox::detail::member_expiry(**h, 0, 1, 0) == UINT64_MAX);  // not started: never
}

// auto_grow_threshold (pooler's): a take that leaves that few free members
// starts init_count - starting more, within max_count.
TEST_CASE("pool: auto_grow_threshold starts members ahead of demand when a take leaves that few free, within max_count") {
  running_pool p("pgrow", 2, 5, [](shmbox::pool_options& o) { o.auto_grow_threshold = 1; });
  const pool_guard& g = p.guard;
  auto& pool = p.pool;
  auto a = pool->take(10s);
  REQUIRE(a);
  // One free left (<= 1): two more (init_count 2, none starting) come without a take waiting.
  CHECK(settles(g.name, [](const shmbox::pool_info& i) { return i.free == 3 && i.in_use == 1; }, 20s));
  CHECK(snapshot(g.name).count.auto_grow_starts == 2);
  CHECK(snapshot(g.name).count.no_members_starting == 0);
  // Takes that leave two or more free start nothing; the one that leaves 1 starts one (max_count 5).
  auto b = pool->take(10s);
  REQUIRE(b);
  auto c = pool->take(10s);
  REQUIRE(c);
  CHECK(settles(g.name, [](const shmbox::pool_info& i) { return i.members.size() == 5 && i.free == 2; }, 20s));
  CHECK(snapshot(g.name).count.auto_grow_starts == 3);
  for (auto* l : {&*a, &*b, &*c}) CHECK(l->give_back() == shmbox::return_status::ok);
  check_settled(g.name, 5);
  check_counts(snapshot(g.name));
}

// The member initialisation hook (pool_options::init_command): a script in
// /tmp that logs "init <box> <worker pid>" when it starts and, after a short
// sleep, "done <box>" and exit 0, or exit 3 while a FAIL file exists.
struct init_hook {
  std::string script, log, fail;
  explicit init_hook(const std::string& pool)
      : script(worker_log_path(pool) + ".init.sh"), log(worker_log_path(pool) + ".init"), fail(worker_log_path(pool) + ".fail") {
    std::ofstream(script) << "echo \"init $SHMBOX_BOX $SHMBOX_WORKER_PID\" >> '" << log << "'\n"
                          << "sleep 0.3\n"
                          << "test -e '" << fail << "' && exit 3\n"
                          << "echo \"done $SHMBOX_BOX\" >> '" << log << "'\n";
  }
  ~init_hook() {
    for (const auto* f : {&script, &log, &fail}) ::unlink(f->c_str());
  }
  std::string command() const { return "exec sh '" + script + "'"; }
  int count(const std::string& line) const {
    std::istringstream in(shmtest::read_text(log));
    int n = 0;
    for (std::string l; std::getline(in, l);) n += l == line;
    return n;
  }
};

TEST_CASE("pool: init_command runs once a member owns its box, and the member is handed out only after it exits 0; a failing one stops the member") {
  pool_guard g(shmtest::unique_name("pinit"));
  init_hook hook(g.name);
  auto opts = small_pool(g.name, 0, 2);
  opts.init_command = hook.command();
  REQUIRE(opts.init_command.size() < shmbox::kMaxPoolInitCommand);
  REQUIRE(shmbox::Pool::create(g.name, opts));
  CHECK(snapshot(g.name).init_command == hook.command());
  auto sup = supervisor(g.name);
  auto pool = shmbox::Pool::open(g.name);
  REQUIRE(pool);
  auto first = pool->take(15s);
  INFO(shmbox::explain(first.error()));
  REQUIRE(first);
  // Its hook ran to the end before the take got it, with the member's worker already started.
  CHECK(hook.count("done " + first->box()) == 1);
  CHECK(hook.count("init " + first->box() + " " + std::to_string(first->worker_pid())) == 1);
  CHECK(first->worker_pid() > 0);
  // A given-back member is not initialised again.
  CHECK(first->give_back() == shmbox::return_status::ok);
  auto again = pool->take(15s);
  REQUIRE(again);
  CHECK(again->box() == first->box());
  CHECK(hook.count("init " + first->box() + " " + std::to_string(first->worker_pid())) == 1);
  // The hook fails (exit 3): the new member is stopped (init-failed, a
  // start failure), never handed out; the take times out.
  std::ofstream(hook.fail) << "x";
  const auto failures = snapshot(g.name).count.start_failures;
  auto none = pool->take(2500ms);
  REQUIRE(!none);
  CHECK(none.error() == shmbox::errc::timed_out);
  CHECK(snapshot(g.name).count.start_failures > failures);
  CHECK(snapshot(g.name).count.takes == 2);
  // Fixed: the next start (after the supervisor's back-off) gets through.
  ::unlink(hook.fail.c_str());
  auto second = pool->take(15s);
  INFO(shmbox::explain(second.error()));
  REQUIRE(second);
  CHECK(second->box() != again->box());
  CHECK(hook.count("done " + second->box()) == 1);
  CHECK(second->give_back() == shmbox::return_status::ok);
  CHECK(again->give_back() == shmbox::return_status::ok);
  check_settled(g.name, 2);
  check_counts(snapshot(g.name));
}

TEST_CASE("pool: a supervisor killed while a member's init_command runs: the standby runs it again before handing the member out") {
  pool_guard g(shmtest::unique_name("pinitk"));
  init_hook hook(g.name);
  auto opts = small_pool(g.name, 0, 1);
  opts.init_command = hook.command();
  REQUIRE(shmbox::Pool::create(g.name, opts));
  supervisor_pair sups = supervisor_and_standby(g.name, "supervisor.after_init_spawn", 0);
  auto pool = shmbox::Pool::open(g.name);
  REQUIRE(pool);
  auto lease = pool->take(20s);
  INFO(shmbox::explain(lease.error()));
  REQUIRE(lease);
  CHECK(shmtest::killed_by(sups.first->wait(15s), SIGKILL));
  CHECK(snapshot(g.name).supervisor_pid == static_cast<std::uint32_t>(sups.standby->pid()));
  // Run twice (the first one's, orphaned by its supervisor's death, may or
  // may not have finished by now), and handed out after a complete run.
  CHECK(hook.count("init " + lease->box() + " " + std::to_string(lease->worker_pid())) == 2);
  CHECK(hook.count("done " + lease->box()) >= 1);
  CHECK(lease->give_back() == shmbox::return_status::ok);
  check_settled(g.name, 1);
  check_counts(snapshot(g.name));
}

// ---------------------------------------------------------------------------
// Crashes and health checks
// ---------------------------------------------------------------------------

TEST_CASE("pool: a worker that dies on its own is restarted and counted crashed; its lease becomes stale") {
  pool_guard g(shmtest::unique_name("pcrash"));
  REQUIRE(shmbox::Pool::create(g.name, small_pool(g.name, 2, 2)));
  auto sup = supervisor(g.name);
  check_settled(g.name, 2);
  // A free member's worker is killed.
  const auto before = snapshot(g.name);
  const auto& victim = before.members.front();
  REQUIRE(victim.worker_pid != 0);
  REQUIRE(::kill(static_cast<pid_t>(victim.worker_pid), SIGKILL) == 0);
  CHECK(settles(g.name, [](const shmbox::pool_info& i) { return i.count.crashed == 1; }, 10s));
  check_settled(g.name, 2);
  {
    const auto i = snapshot(g.name);
    CHECK(find_member(i, victim.index)->generation > victim.generation);
    CHECK(i.count.starts == 3);
    check_counts(i);
  }
  // A leased member's worker crashes: the lease is stale.
  auto pool = shmbox::Pool::open(g.name);
  REQUIRE(pool);
  auto lease = pool->take(10s);
  REQUIRE(lease);
  CHECK(lease->producer().post("crash") == shmbox::post_status::stored);
  CHECK(settles(g.name, [](const shmbox::pool_info& i) { return i.count.crashed == 2; }, 10s));
  check_settled(g.name, 2);
  CHECK(find_member(snapshot(g.name), lease->token().member)->generation > lease->token().generation);
  CHECK(lease->give_back() == shmbox::return_status::stale);
  const auto i = snapshot(g.name);
  CHECK(i.count.stale_returns == 1);
  CHECK(i.count.revoked_in_use == 1);  // ended when its member was stopped, not by the stale give back
  CHECK(i.count.killed_in_use == 0);
  CHECK(i.count.starts == 4);
  check_counts(i);
  check_take_works(g.name);
}

TEST_CASE("pool: the health check replaces a free member that stops answering") {
  pool_guard g(shmtest::unique_name("phealth"));
  auto opts = small_pool(g.name, 1, 1);
  opts.health_interval = 100ms;
  opts.health_timeout = 300ms;
  REQUIRE(shmbox::Pool::create(g.name, opts));
  auto sup = supervisor(g.name);
  check_settled(g.name, 1);
  const std::uint64_t gen0 = snapshot(g.name).members.at(0).generation;
  // A member that answers keeps its place through several checks.
  const auto until = std::chrono::steady_clock::now() + 800ms;  // 8 intervals: an observation window
  while (std::chrono::steady_clock::now() < until) {
    const auto i = snapshot(g.name);
    CHECK(i.count.killed_free_unhealthy == 0);
    REQUIRE(i.members.size() == 1);
    CHECK(i.members[0].generation == gen0);
    std::this_thread::sleep_for(50ms);
  }
  // Now it hangs.
  auto pool = shmbox::Pool::open(g.name);
  REQUIRE(pool);
  auto lease = pool->take(10s);
  REQUIRE(lease);
  const shmbox::lease_token t = lease->token();
  CHECK(lease->producer().post("hang") == shmbox::post_status::stored);
  REQUIRE(worker_said(g.name, shmtest::cat("hanging ", std::to_string(t.member), " ", std::to_string(t.generation))));
  CHECK(lease->give_back() == shmbox::return_status::ok);
  CHECK(settles(g.name, [](const shmbox::pool_info& i) { return i.count.killed_free_unhealthy == 1; }, 10s));
  check_settled(g.name, 1);
  const auto i = snapshot(g.name);
  CHECK(i.members.at(0).generation > t.generation);
  CHECK(i.count.killed_free_unhealthy == 1);
  check_counts(i);
  check_take_works(g.name);
}

// ---------------------------------------------------------------------------
// The supervisor killed mid-start and mid-stop, with a standby
// ---------------------------------------------------------------------------

TEST_CASE("pool: a supervisor killed while starting a member: the standby finishes, nothing leaked or doubled") {
  for (const char* point : {"supervisor.after_box", "supervisor.after_spawn"}) {
    const std::string point_name = point;
    CAPTURE(point_name);
    pool_guard g(shmtest::unique_name("psupstart"));
    REQUIRE(shmbox::Pool::create(g.name, small_pool(g.name, 1, 2)));
    // The first start (member 0) passes; the second, on demand, dies there.
    auto first = supervisor(g.name, point_name + ":2");
    check_settled(g.name, 1);
    auto standby = supervisor(g.name);
    REQUIRE(settles(g.name, [&](const shmbox::pool_info& i) {
      return i.standbys == 1 && i.supervisor_pid == static_cast<std::uint32_t>(first->pid());
    }, 10s));
    const std::uint64_t epoch = snapshot(g.name).supervisor_epoch;
    auto pool = shmbox::Pool::open(g.name);
    REQUIRE(pool);
    auto l1 = pool->take(10s);
    REQUIRE(l1);
    auto l2 = pool->take(20s);  // needs a start: the first supervisor dies in it
    INFO(shmbox::explain(l2.error()));
    CHECK(l2);
    CHECK(shmtest::killed_by(first->wait(10s), SIGKILL));
    {
      const auto i = snapshot(g.name);
      CHECK(i.supervisor_pid == static_cast<std::uint32_t>(standby->pid()));
      CHECK(i.supervisor_alive);
      CHECK(i.supervisor_epoch > epoch);
      CHECK(i.members.size() == 2);
    }
    CHECK(l1->give_back() == shmbox::return_status::ok);
    if (l2) CHECK(l2->give_back() == shmbox::return_status::ok);
    check_settled(g.name, 2);
    check_take_works(g.name);
  }
}

namespace {
// A supervisor dies at `point_name` while culling one of two members, each
// with a message its (hung) worker never takes; the standby finishes.
void supervisor_killed_stopping(const std::string& point_name) {
  {
    CAPTURE(point_name);
    pool_guard g(shmtest::unique_name("psupcull"));
    shmtest::segment_guard dl(shmtest::unique_name("psupcull-dl"));
    REQUIRE(shmbox::Box::create(dl.name, {.capacity = 64, .slot_size = 64}));
    auto opts = small_pool(g.name, 1, 2);
    opts.cull_after = 300ms;
    opts.dead_letters = dl.name;
    REQUIRE(shmbox::Pool::create(g.name, opts));
    supervisor_pair sups = supervisor_and_standby(g.name, point_name, 1);
    auto& first = sups.first;
    auto& standby = sups.standby;
    // Two members, each with one message its hung worker will never take.
    auto pool = shmbox::Pool::open(g.name);
    REQUIRE(pool);
    std::vector<shmbox::Lease> held = take_leases(*pool, 2);
    for (auto& l : held) {
      CHECK(l.producer().post("hang") == shmbox::post_status::stored);
      CHECK(l.producer().post("keep-" + std::to_string(l.token().member)) == shmbox::post_status::stored);
      REQUIRE(worker_said(g.name, shmtest::cat("hanging ", std::to_string(l.token().member), " ",
                                               std::to_string(l.token().generation))));
    }
    for (auto& l : held) CHECK(l.give_back() == shmbox::return_status::ok);
    // One of them is culled: the first supervisor dies stopping it.
    CHECK(shmtest::killed_by(first->wait(15s), SIGKILL));
    CHECK(settles(g.name, [](const shmbox::pool_info& i) {
      return i.count.killed_free_culled == 1 && i.members.size() == 1;
    }, 15s));
    check_settled(g.name, 1);
    const auto i = snapshot(g.name);
    CHECK(i.supervisor_pid == static_cast<std::uint32_t>(standby->pid()));
    const std::uint32_t kept = i.members.at(0).index;
    const shmbox::Lease& gone = kept == held[0].token().member ? held[1] : held[0];
    const std::uint32_t culled = gone.token().member;
    CHECK(i.members.at(0).depth == 1);  // the kept member's message is still there
    CHECK(i.count.killed_free_culled == 1);
    CHECK(i.count.dead_lettered == 1);
    CHECK(i.count.lost == 0);
    // Exactly once, as "[<member box> culled] message" (docs/pools.md).
    const auto letters = drain_box(dl.name);
    std::string seen;
    for (const auto& l : letters) seen += l + " | ";
    INFO("dead letters: " << seen);
    CHECK(letters == std::vector<std::string>{shmtest::cat("[", gone.box(), " culled] keep-", std::to_string(culled))});
  }
}
}  // namespace

TEST_CASE("pool: a supervisor killed while stopping (culling) a member: the standby finishes, messages moved once") {
  supervisor_killed_stopping("supervisor.after_signal");
  supervisor_killed_stopping("supervisor.after_unlink");
}

// Killed at supervisor.mid_drain (letters posted to the dead-letter box and
// recorded, not committed in the member box), the standby reads them again
// (redelivered) and skips the recorded ones: one letter each, counted once.
TEST_CASE("pool: a supervisor killed mid-drain: the standby does not dead-letter the messages again") {
  supervisor_killed_stopping("supervisor.mid_drain");
}

// ---------------------------------------------------------------------------
// Groups, removal
// ---------------------------------------------------------------------------

TEST_CASE("pool: take_group takes from the freest pool of the group") {
  const std::string group = shmtest::unique_name("pgroup");
  pool_guard small(shmtest::unique_name("pgroup-a")), big(shmtest::unique_name("pgroup-b"));
  auto a_opts = small_pool(small.name, 1, 1), b_opts = small_pool(big.name, 3, 3);
  a_opts.group = b_opts.group = group;
  REQUIRE(shmbox::Pool::create(small.name, a_opts));
  REQUIRE(shmbox::Pool::create(big.name, b_opts));
  auto sup_a = supervisor(small.name);
  auto sup_b = supervisor(big.name);
  check_settled(small.name, 1);
  check_settled(big.name, 3);
  auto from = [](const shmbox::Lease& l, const std::string& pool) { return l.box().rfind(pool + ".m", 0) == 0; };
  std::vector<shmbox::Lease> held;
  // free 1 vs 3 -> big; 1 vs 2 -> big; 1 vs 1, in use 0 vs 2 -> small; 0 vs 1 -> big.
  for (const std::string* want : {&big.name, &big.name, &small.name, &big.name}) {
    auto l = shmbox::Pool::take_group(group, 5s);
    INFO(shmbox::explain(l.error()));
    REQUIRE(l);
    CHECK(from(*l, *want));
    held.push_back(std::move(*l));
  }
  auto none = shmbox::Pool::take_group(group, 0ns);
  CHECK(!none);
  CHECK(none.error() == shmbox::errc::no_members_at_capacity);
  // From another process: a group take waits for the member given back.
  auto waiter = taker(group, 10000, {"--group"});
  CHECK(settles(small.name, [](const shmbox::pool_info& i) { return i.queued == 1; }, 10s));  // the first pool's queue
  CHECK(held[2].give_back() == shmbox::return_status::ok);
  const took_line t = parse_took(line_starting(*waiter, "took", 10s));
  CHECK(t.ok);
  CHECK(t.box.rfind(small.name + ".m", 0) == 0);
  CHECK(line_starting(*waiter, "returned") == "returned ok");
  CHECK(shmtest::exited_with(waiter->wait(10s), 0));
  for (auto& l : held)
    if (!l.returned()) CHECK(l.give_back() == shmbox::return_status::ok);
  check_settled(small.name, 1);
  check_settled(big.name, 3);
}

TEST_CASE("pool: graceful removal waits for the members in use; immediate removal stops them at once") {
  SUBCASE("graceful") {
    pool_guard g(shmtest::unique_name("prmg"));
    REQUIRE(shmbox::Pool::create(g.name, small_pool(g.name, 2, 2)));
    auto sup = supervisor(g.name);
    check_settled(g.name, 2);
    auto pool = shmbox::Pool::open(g.name);
    REQUIRE(pool);
    auto lease = pool->take(10s);
    REQUIRE(lease);
    const auto r = shmbox::Pool::remove(g.name, shmbox::removal::graceful, 500ms);
    CHECK(!r);
    CHECK(r.error() == shmbox::errc::timed_out);  // the member in use keeps the pool
    CHECK(settles(g.name, [](const shmbox::pool_info& i) { return i.removing == "graceful" && i.members.size() == 1; }, 10s));
    CHECK(find_member(snapshot(g.name), lease->token().member)->state == member_state::in_use);
    auto other = shmbox::Pool::open(g.name);
    if (other) {
      auto refused = other->take(1s);
      CHECK(!refused);
      CHECK(refused.error() == shmbox::errc::pool_removed);
    } else {
      CHECK(other.error() == shmbox::errc::pool_removed);
    }
    CHECK(lease->producer().post("still") == shmbox::post_status::stored);  // the lease still works
    CHECK(lease->give_back() == shmbox::return_status::ok);
    CHECK(shmtest::eventually([&] { return !pool_segment_exists(g.name); }, 10s));
    CHECK(shmtest::eventually([&] { return live_workers(g.name).empty() && member_boxes_on_disk(g.name).empty(); }, 10s));
    CHECK(line_starting(*sup, "stopped", 10s) == "stopped");  // supervise() returns once the pool is gone
    CHECK(shmtest::exited_with(sup->wait(10s), 0));
  }
  SUBCASE("immediate") {
    pool_guard g(shmtest::unique_name("prmi"));
    REQUIRE(shmbox::Pool::create(g.name, small_pool(g.name, 2, 2)));
    auto sup = supervisor(g.name);
    check_settled(g.name, 2);
    auto pool = shmbox::Pool::open(g.name);
    REQUIRE(pool);
    auto lease = pool->take(10s);
    REQUIRE(lease);
    const auto r = shmbox::Pool::remove(g.name, shmbox::removal::immediate, 10s);
    INFO(shmbox::explain(r.error()));
    CHECK(r);
    CHECK(!pool_segment_exists(g.name));
    CHECK(shmtest::eventually([&] { return live_workers(g.name).empty() && member_boxes_on_disk(g.name).empty(); }, 10s));
    CHECK(lease->give_back() == shmbox::return_status::stale);
    CHECK(line_starting(*sup, "stopped", 10s) == "stopped");
    CHECK(shmtest::exited_with(sup->wait(10s), 0));
  }
  SUBCASE("immediate, without a supervisor: remove() stops the members itself") {
    pool_guard g(shmtest::unique_name("prmn"));
    REQUIRE(shmbox::Pool::create(g.name, small_pool(g.name, 2, 2)));
    auto sup = supervisor(g.name);
    check_settled(g.name, 2);
    sup->kill(SIGKILL);
    sup->wait();
    const auto r = shmbox::Pool::remove(g.name, shmbox::removal::immediate, 10s);
    INFO(shmbox::explain(r.error()));
    CHECK(r);
    CHECK(!pool_segment_exists(g.name));
    CHECK(shmtest::eventually([&] { return live_workers(g.name).empty() && member_boxes_on_disk(g.name).empty(); }, 10s));
  }
}

// Pool::remove_group (pooler's rm_group).
TEST_CASE("pool: remove_group removes every pool of the group and no other; one kept by a lease is named, the rest go") {
  const std::string group = shmtest::unique_name("prmgrp");
  pool_guard a(shmtest::unique_name("prmgrp-a")), b(shmtest::unique_name("prmgrp-b")), other(shmtest::unique_name("prmgrp-o"));
  auto a_opts = small_pool(a.name, 1, 1), b_opts = small_pool(b.name, 1, 1), o_opts = small_pool(other.name, 1, 1);
  a_opts.group = b_opts.group = group;
  o_opts.group = group + "x";  // another group, whose name starts with this one's
  REQUIRE(shmbox::Pool::create(a.name, a_opts));
  REQUIRE(shmbox::Pool::create(b.name, b_opts));
  REQUIRE(shmbox::Pool::create(other.name, o_opts));
  auto sup_a = supervisor(a.name);
  auto sup_b = supervisor(b.name);
  auto sup_o = supervisor(other.name);
  check_settled(a.name, 1);
  check_settled(b.name, 1);
  check_settled(other.name, 1);
  {
    auto unknown = shmbox::Pool::remove_group(group + "-none", shmbox::removal::graceful, 1s);
    REQUIRE(unknown);  // pooler: rm_group of a group with no pool is ok
    CHECK(unknown->empty());
  }
  // A lease on a's member keeps a past the timeout; b goes; the other group is untouched.
  auto pool_a = shmbox::Pool::open(a.name);
  REQUIRE(pool_a);
  auto lease = pool_a->take(10s);
  REQUIRE(lease);
  const auto r = shmbox::Pool::remove_group(group, shmbox::removal::graceful, 1s);
  REQUIRE(!r);
  CHECK(r.error() == shmbox::errc::timed_out);
  const std::string why = shmbox::explain(r.error());
  CHECK(why.find("1 of 2 pools not removed") != std::string::npos);
  CHECK(why.find("pool '" + a.name + "'") != std::string::npos);
  CHECK(why.find(b.name) == std::string::npos);
  CHECK(shmtest::eventually([&] { return !pool_segment_exists(b.name); }, 10s));
  CHECK(pool_segment_exists(a.name));
  CHECK(snapshot(a.name).removing == "graceful");  // it takes no more members
  CHECK(snapshot(other.name).removing.empty());
  check_settled(other.name, 1);
  CHECK(lease->give_back() == shmbox::return_status::ok);
  CHECK(shmtest::eventually([&] { return !pool_segment_exists(a.name); }, 10s));
  for (auto* s : {sup_a.get(), sup_b.get()}) CHECK(shmtest::exited_with(s->wait(10s), 0));
  // The group is gone: a take from it finds no pool.
  auto none = shmbox::Pool::take_group(group, 0ns);
  REQUIRE(!none);
  CHECK(none.error() == shmbox::errc::not_found);
  // Immediate: the other group's pool goes at once, lease or not.
  auto pool_o = shmbox::Pool::open(other.name);
  REQUIRE(pool_o);
  auto held = pool_o->take(10s);
  REQUIRE(held);
  auto now = shmbox::Pool::remove_group(group + "x", shmbox::removal::immediate, 10s);
  INFO(shmbox::explain(now.error()));
  REQUIRE(now);
  CHECK(*now == std::vector<std::string>{other.name});
  CHECK(!pool_segment_exists(other.name));
  CHECK(held->give_back() == shmbox::return_status::stale);
  CHECK(shmtest::exited_with(sup_o->wait(10s), 0));
  CHECK(shmtest::eventually([&] {
    return live_workers(a.name).empty() && live_workers(b.name).empty() && live_workers(other.name).empty();
  }, 10s));
}

// CU: a supervisor killed after culling, before it answered: the standby
// takes over, finds the request pending and answers it (the members the
// first one stopped are not stopped twice: this pass stops none).
TEST_CASE("pool: a supervisor killed before answering a cull: the standby answers it") {
  pool_guard g(shmtest::unique_name("pxcullk"));
  REQUIRE(shmbox::Pool::create(g.name, small_pool(g.name, 1, 3)));
  supervisor_pair sups = supervisor_and_standby(g.name, "supervisor.before_cull_answer", 1);
  auto& first = sups.first;
  auto& standby = sups.standby;
  auto pool = shmbox::Pool::open(g.name);
  REQUIRE(pool);
  for (auto& l : take_leases(*pool, 3)) CHECK(l.give_back() == shmbox::return_status::ok);
  check_settled(g.name, 3);
  auto n = pool->cull(0ms, 30s);
  INFO(shmbox::explain(n.error()));
  REQUIRE(n);
  CHECK(*n == 0);
  CHECK(shmtest::killed_by(first->wait(15s), SIGKILL));
  check_settled(g.name, 1);
  const auto i = snapshot(g.name);
  CHECK(i.supervisor_pid == static_cast<std::uint32_t>(standby->pid()));
  CHECK(i.count.killed_free_culled == 2);
  check_counts(i);
  // The next cull is answered by the standby as usual.
  auto again = pool->cull(0ms, 15s);
  REQUIRE(again);
  CHECK(*again == 0);
}

// ---------------------------------------------------------------------------
// The fault matrix: takers, returners and supervisors killed at every pool
// table point (lib/base/fault.hpp: pool.after_journal, pool.mid_apply,
// pool.after_apply, pool.locked)
// ---------------------------------------------------------------------------

// A process killed at a pool point while it registers its client entry
// (the table lock held "anonymously", TL2) does not wedge the next one to
// register: that one holds the anonymous byte itself, so the word's
// anonymous holder is dead, and it takes the lock over and completes the
// journal.
TEST_CASE("pool: a process killed while registering (table lock held anonymously) does not wedge new handles") {
  for (const char* point : {"pool.after_journal", "pool.mid_apply", "pool.after_apply", "pool.locked"}) {
    const std::string point_name = point;
    CAPTURE(point_name);
    pool_guard g(shmtest::unique_name("fmreg"));
    REQUIRE(shmbox::Pool::create(g.name, small_pool(g.name, 1, 1)));
    {
      // No supervisor yet: the first pass of the point is the victim's registration.
      auto victim = taker(g.name, 2000, {}, point_name + ":1");
      const int st = victim->wait(30s);
      if (shmtest::exited_with(st, 3)) continue;  // the point is not on the registering path
      REQUIRE(shmtest::killed_by(st, SIGKILL));
    }
    auto sup = supervisor(g.name);  // registers anew: must steal the dead holder's lock
    check_settled(g.name, 1);
    check_take_works(g.name);  // a new handle
  }
}

const char* const kPoolPoints[] = {"pool.after_journal", "pool.mid_apply", "pool.after_apply", "pool.locked"};

// `aged`: members live 1.5 s (max_lifetime, so some give backs retire
// theirs) and every take asks for growth (auto_grow_threshold 1, which
// max_count 2 never lets start anything): the writes those add to a take
// and a give back are under the same points.
TEST_CASE("fault matrix: a taker/returner killed at every pool point, at every pass, leaves a consistent pool") {
  for (const char* point : kPoolPoints) {
    for (const auto& [fail, aged] : {std::pair{false, false}, std::pair{true, false}, std::pair{false, true}}) {
      const std::string point_name = point;
      CAPTURE(point_name);
      CAPTURE(fail);
      CAPTURE(aged);
      pool_guard g(shmtest::unique_name("fmtake"));
      auto opts = small_pool(g.name, 2, 2);
      if (aged) {
        opts.max_lifetime = 1500ms;
        opts.auto_grow_threshold = 1;
      }
      REQUIRE(shmbox::Pool::create(g.name, opts));
      auto sup = supervisor(g.name);
      check_settled(g.name, 2);
      auto pool = shmbox::Pool::open(g.name);  // this process's handle stays open throughout
      REQUIRE(pool);
      check_take_works(g.name, &*pool);  // it is a client of the table from now on
      // The victim opens, takes, posts, gives back (ok or fail) and closes;
      // it dies at the n-th pass of the point, for every n it reaches.
      const std::uint32_t clients = snapshot(g.name).clients;  // live Pool handles before any victim
      int kills = 0;
      bool finished = false;
      for (int n = 1; n <= 12 && !finished; ++n) {
        CAPTURE(n);
        std::vector<std::string> extra{"--post", "hi"};
        if (fail) extra.push_back("--fail");
        auto victim = taker(g.name, 5000, extra, shmtest::cat(point_name, ":", std::to_string(n)));
        const int st = victim->wait(30s);
        CHECK(!victim->timed_out());
        if (shmtest::exited_with(st, 0)) {
          finished = true;  // it passed the point fewer than n times
          continue;
        }
        REQUIRE(shmtest::killed_by(st, SIGKILL));
        ++kills;
        const auto i = check_settled(g.name, 2);
        check_counts(i);
        CHECK(i.queued == 0);
        CHECK(settles(g.name, [&](const shmbox::pool_info& now) {
          return now.clients == clients;  // the victim's client entry is free again
        }, 10s));
        check_take_works(g.name, &*pool);
      }
      CHECK(finished);
      CHECK(kills >= 2);  // at least in take and in give_back
      check_counts(check_settled(g.name, 2));
    }
  }
}

// `hooked`: the pool has an init command (S6a), so its members wait in
// `starting` for it: every member the standby hands out ran it to the end.
TEST_CASE("fault matrix: a supervisor killed at every pool point (passes 1..4), with a standby") {
  for (const char* point : kPoolPoints) {
    for (const bool hooked : {false, true}) {
      const std::string point_name = point;
      int killed = 0;
      for (int n = 1; n <= 4; ++n) {  // n = 1: while it registers (the table held anonymously)
        CAPTURE(point_name);
        CAPTURE(hooked);
        CAPTURE(n);
        pool_guard g(shmtest::unique_name("fmsup"));
        init_hook hook(g.name);
        auto opts = small_pool(g.name, 2, 2);
        if (hooked) opts.init_command = hook.command();
        REQUIRE(shmbox::Pool::create(g.name, opts));
        // It may die before it says "supervising" (opening the pool changes the table too).
        auto first = std::make_unique<child>(std::vector<std::string>{shmtest::helper_path(), "pool-supervise", g.name},
                                             std::vector<std::string>{shmtest::cat("SHMBOX_FAULT=", point_name, ":", std::to_string(n))},
                                             true);
        // The standby comes second: once the first is the supervisor (or dead).
        CHECK(shmtest::eventually([&] {
          const char state = shmtest::process_state(first->pid());
          if (state == 'Z' || state == '?') return true;
          auto i = shmbox::inspect_pool(g.name);
          return i && i->supervisor_pid == static_cast<std::uint32_t>(first->pid());
        }, 10s));
        auto standby = supervisor(g.name);
        check_settled(g.name, 2);
        const int st = first->wait(2s);  // alive after 2 s: it did not reach the n-th pass (and is killed)
        if (shmtest::killed_by(st, SIGKILL) && !first->timed_out()) ++killed;
        CHECK(settles(g.name, [&](const shmbox::pool_info& i) {
          return i.supervisor_alive && i.supervisor_pid == static_cast<std::uint32_t>(standby->pid());
        }, 10s));
        check_settled(g.name, 2);
        check_take_works(g.name);
        const auto settled = check_settled(g.name, 2);
        if (hooked)
          for (const auto& m : settled.members) CHECK(hook.count("done " + m.box) >= 1);
      }
      CAPTURE(point_name);
      CHECK(killed >= 1);
    }
  }
}
