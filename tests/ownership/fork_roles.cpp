// Handles inherited through fork() (lib/base/process.hpp, FORK INHERITANCE H1-H4):
// a fork child that destroys, or uses, its copies of its parent's handles
// must not act for the parent. Each test makes handles in this process,
// forks (no exec: the inheritance is the point), lets the child use and
// destroy its copies, and then checks, in this process and through
// shmbox::info (what `shmbox stat` shows), that the parent still holds
// every role: owner (receive works, notify_fd still fires), heir entry (it
// still takes over when the owner dies), producer entry, an open loan.
// Two ways out of the child: the copies destroyed explicitly and then
// std::exit(), and the copies' destructors run by returning from a function.
// Also the lock description the handles of one Box share (liveness.hpp L1),
// and the child's own (L6).
// (Pools and leases: tests/pool/pools.cpp; the C API: tests/c/c_api_test.c; Python:
// python/tests/test_fork.py.)
#include <doctest/doctest.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <thread>

#include "shmbox/shmbox.hpp"
#include "support.hpp"

using namespace std::chrono_literals;
using shmtest::child;
using shmtest::line_starting;

namespace {

// Forks; the child runs `body` and leaves with _exit(its result) (a body may
// leave by std::exit itself); this process runs `meanwhile` once the child
// exists. Returns the child's exit code (-1: it did not exit normally within
// 30 s; it is killed then).
template <class Body, class Meanwhile = void (*)()>
int in_fork_child(Body&& body, Meanwhile&& meanwhile = [] {}) {
  REQUIRE(shmtest::threads_parked());  // no thread of ours inside the allocator at fork()
  std::fflush(nullptr);  // the child must not write out our buffered output again
  const pid_t pid = ::fork();
  if (pid < 0) return -2;
  if (pid == 0) {
    int code = 99;
    try {
      code = body();
    } catch (...) {
      code = 98;
    }
    ::_exit(code);
  }
  meanwhile();
  const auto until = std::chrono::steady_clock::now() + 30s;
  int st = 0;
  for (;;) {
    const pid_t r = ::waitpid(pid, &st, WNOHANG);
    if (r == pid) break;
    if (std::chrono::steady_clock::now() > until) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &st, 0);
      return -1;
    }
    std::this_thread::sleep_for(2ms);
  }
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

shmbox::box_info stat_of(const std::string& name) {
  auto b = shmbox::Box::inspect(name);
  REQUIRE(b);
  return shmbox::info(*b);
}

// The child's checks of an inherited Owner: every call refuses (not_owner,
// with a sentence that names the maker), nothing is taken. 0 when so.
int refuses_as_owner(shmbox::Owner& o) {
  shmbox::message m;
  if (o.try_receive(m) != shmbox::recv_status::not_owner) return 10;
  if (o.last_error() != shmbox::errc::not_owner) return 11;
  if (shmbox::explain(o.last_error()).find("fork child") == std::string::npos) return 12;
  if (o.receive(m, {.timeout = 10ms}) != shmbox::recv_status::not_owner) return 13;
  if (o.notify_fd() != -1) return 14;
  if (o.commit() != shmbox::recv_status::not_owner) return 15;
  shmbox::delivery d;
  if (o.wait(d, 0ns) != shmbox::owner_event::not_owner) return 16;
  if (o.give_away(static_cast<std::uint32_t>(::getppid()), "", 10ms)) return 17;
  return 0;
}

int refuses_as_producer(shmbox::Producer& p) {
  if (p.post("from-the-child") != shmbox::post_status::error) return 20;
  if (p.last_error() != shmbox::errc::inherited_handle) return 21;
  if (p.loan()) return 22;
  const std::string_view two[] = {"a", "b"};
  if (p.post_batch(two) != 0) return 23;
  return 0;
}

// The parent still owns `name` under `epoch`: stat shows it, a receive gets
// what a producer posts, and its notify_fd fires for an armed notify.
void check_still_owner(const std::string& name, shmbox::Owner& o, shmbox::Producer& p, std::uint64_t epoch, int efd) {
  const auto i = stat_of(name);
  CHECK(i.owner.pid == static_cast<std::uint32_t>(::getpid()));
  CHECK(i.owner.alive);
  CHECK(i.owner.epoch == epoch);
  CHECK(i.depth == 0);  // the child posted nothing through the inherited producer
  CHECK(p.post("after") == shmbox::post_status::stored);
  shmbox::message m;
  REQUIRE(o.receive(m, {.timeout = 5s}) == shmbox::recv_status::ok);
  CHECK(m.data == "after");
  o.notify();
  CHECK(p.post("wake") == shmbox::post_status::stored);
  pollfd pf{efd, POLLIN, 0};
  CHECK(::poll(&pf, 1, 5000) == 1);  // the owner record still names our eventfd
  shmbox::delivery d;
  CHECK(o.wait(d, 0ns) == shmbox::owner_event::notified);
}

}  // namespace

TEST_CASE("fork: a child that destroys inherited Owner and Producer copies, then exit()s, leaves the parent owner and producer") {
  const std::string name = shmtest::unique_name("fork-own");
  shmtest::segment_guard g(name);
  REQUIRE(shmbox::Box::create(name, {.capacity = 8}));
  std::optional<shmbox::Owner> o;
  std::optional<shmbox::Producer> p;
  {
    auto a = shmbox::Owner::acquire(name);
    REQUIRE(a);
    o.emplace(std::move(*a));
    auto b = shmbox::Producer::attach(name);
    REQUIRE(b);
    p.emplace(std::move(*b));
  }
  const int efd = o->notify_fd();
  REQUIRE(efd >= 0);
  const std::uint64_t epoch = o->epoch();
  const std::uint32_t entry = p->entry_index();

  const int code = in_fork_child([&] {
    int r = refuses_as_owner(*o);
    if (r == 0) r = refuses_as_producer(*p);
    o.reset();  // ~Owner in the child (whatever the checks found)
    p.reset();  // ~Producer in the child
    std::exit(r);
    return r;
  });
  CHECK(code == 0);
  check_still_owner(name, *o, *p, epoch, efd);
  const auto i = stat_of(name);
  bool ours = false;
  for (const auto& e : i.producers) ours |= e.entry == entry && e.pid == static_cast<std::uint32_t>(::getpid()) && e.alive;
  CHECK(ours);  // the producer entry is still ours
}

TEST_CASE("fork: a child whose inherited handles are destroyed by returning from a function leaves every role to the parent") {
  const std::string name = shmtest::unique_name("fork-ret");
  shmtest::segment_guard g(name);
  REQUIRE(shmbox::Box::create(name, {.capacity = 8}));
  auto box = shmbox::Box::open(name);
  REQUIRE(box);
  auto o = shmbox::Owner::acquire(*box);
  REQUIRE(o);
  auto p = shmbox::Producer::attach(*box);
  REQUIRE(p);
  const int efd = o->notify_fd();
  REQUIRE(efd >= 0);
  const std::uint64_t epoch = o->epoch();
  // A loan open at the fork: the child's copy must neither abort nor commit it.
  shmbox::slot_loan loan = p->loan();
  REQUIRE(loan);
  std::memcpy(loan.data(), "loaned", 6);

  const int code = in_fork_child([&] {
    // The copies move into functions' parameters: their destructors run when
    // they return. The loan's first (it refers to the producer).
    auto loan_scope = [](shmbox::slot_loan l) {
      return l.commit(6) == shmbox::post_status::error ? 0 : 30;  // the parent's claim: not ours to publish
    };
    auto scope = [](shmbox::Box, shmbox::Owner own, shmbox::Producer prod) {
      const int r = refuses_as_owner(own);
      return r != 0 ? r : refuses_as_producer(prod);
    };
    const int r = loan_scope(std::move(loan));
    const int r2 = scope(std::move(*box), std::move(*o), std::move(*p));
    return r != 0 ? r : r2;
  });
  CHECK(code == 0);
  // The loan is still ours: committed here, it is delivered once, not aborted.
  REQUIRE(loan);
  CHECK(loan.commit(6) == shmbox::post_status::stored);
  shmbox::message m;
  REQUIRE(o->receive(m, {.timeout = 5s}) == shmbox::recv_status::ok);
  CHECK(m.data == "loaned");
  check_still_owner(name, *o, *p, epoch, efd);
  const auto c = box->read_counters();
  CHECK(c.aborted == 0);
  CHECK(c.abandoned == 0);
}

TEST_CASE("fork: a child that destroys an inherited Heir leaves the parent's heir entry; failover still works") {
  const std::string name = shmtest::unique_name("fork-heir");
  shmtest::segment_guard g(name);
  REQUIRE(shmbox::Box::create(name, {.capacity = 8}));
  child owner({shmtest::helper_path(), "own", name}, {}, true);
  REQUIRE(line_starting(owner, "owned").rfind("owned", 0) == 0);
  std::optional<shmbox::Heir> h;
  {
    auto e = shmbox::Heir::enlist(name, "parent-heir");
    REQUIRE(e);
    h.emplace(std::move(*e));
  }
  CHECK(h->position() == 0);

  SUBCASE("destroyed explicitly, then exit()") {
    const int code = in_fork_child([&] {
      auto t = h->await_transfer(0ns);
      const int r = !t && t.error() == shmbox::errc::inherited_handle ? 0 : 40;
      h.reset();
      std::exit(r);
      return r;
    });
    CHECK(code == 0);
  }
  SUBCASE("destroyed by returning from a function") {
    const int code = in_fork_child([&] {
      auto scope = [](shmbox::Heir copy) {
        auto t = copy.await_transfer(10ms);
        return !t && t.error() == shmbox::errc::inherited_handle ? 0 : 41;
      };
      return scope(std::move(*h));
    });
    CHECK(code == 0);
  }
  const auto i = stat_of(name);
  REQUIRE(i.heirs.size() == 1);
  CHECK(i.heirs[0].pid == static_cast<std::uint32_t>(::getpid()));
  CHECK(i.heirs[0].alive);
  CHECK(i.heirs[0].data == "parent-heir");
  CHECK(i.owner.pid == static_cast<std::uint32_t>(owner.pid()));

  owner.kill();  // the owner dies: we are next
  auto taken = h->await_transfer(10s);
  REQUIRE(taken);
  CHECK(taken->transfer().reason == shmbox::transfer_reason::owner_died);
  CHECK(taken->transfer().data == "parent-heir");
  CHECK(stat_of(name).owner.pid == static_cast<std::uint32_t>(::getpid()));
  owner.wait(5s);
}

TEST_CASE("fork: a child may use an inherited Box to make handles of its own") {
  const std::string name = shmtest::unique_name("fork-box");
  shmtest::segment_guard g(name);
  REQUIRE(shmbox::Box::create(name, {.capacity = 8}));
  auto box = shmbox::Box::open(name);
  REQUIRE(box);
  auto o = shmbox::Owner::acquire(*box);
  REQUIRE(o);
  const int code = in_fork_child([&] {
    auto p = shmbox::Producer::attach(*box);  // a producer entry of its own
    if (!p) return 50;
    if (p->post("child's own") != shmbox::post_status::stored) return 51;
    if (shmbox::Owner::acquire(*box)) return 52;  // the parent owns it
    return 0;  // ~Producer gives the child's own entry back
  });
  CHECK(code == 0);
  shmbox::message m;
  REQUIRE(o->receive(m, {.timeout = 5s}) == shmbox::recv_status::ok);
  CHECK(m.data == "child's own");
  CHECK(stat_of(name).owner.pid == static_cast<std::uint32_t>(::getpid()));
}

TEST_CASE("fork: a role the parent takes after the fork is alive to the child (liveness.hpp L6: its own lock description)") {
  // The handles of one mapping lock their roles through the mapping's lock
  // description, and a description never conflicts with itself: a child
  // still sharing it would find the parent's new lease unheld, and take
  // the box from its living parent.
  const std::string name = shmtest::unique_name("fork-after");
  shmtest::segment_guard g(name);
  REQUIRE(shmbox::Box::create(name, {.capacity = 8}));
  auto box = shmbox::Box::open(name);
  REQUIRE(box);
  int go[2];
  REQUIRE(::pipe(go) == 0);
  std::optional<shmbox::Owner> o;
  const int code = in_fork_child(
      [&] {
        ::close(go[1]);
        char c = 0;
        if (::read(go[0], &c, 1) != 1) return 60;  // the parent owns the box now
        if (shmbox::Owner::acquire(*box)) return 61;  // taken from a living owner
        return 0;
      },
      [&] {
        ::close(go[0]);
        auto got = shmbox::Owner::acquire(*box);
        REQUIRE(got);
        o.emplace(std::move(*got));
        CHECK(::write(go[1], "x", 1) == 1);
        ::close(go[1]);
      });
  CHECK(code == 0);
  REQUIRE(o);
  const auto st = stat_of(name);
  CHECK(st.owner.pid == static_cast<std::uint32_t>(::getpid()));
  CHECK(st.owner.epoch == o->epoch());
  auto p = shmbox::Producer::attach(*box);
  REQUIRE(p);
  REQUIRE(p->post("still ours") == shmbox::post_status::stored);
  shmbox::message m;
  CHECK(o->receive(m, {.timeout = 5s}) == shmbox::recv_status::ok);
}

TEST_CASE("liveness: the handles of one Box lock their roles through one description; one that goes leaves the others held") {
  // liveness.hpp L1 (THE LOCK DESCRIPTION): an Owner and two Producers made
  // from one Box share its lock description, where a byte's lock is one lock
  // however many hold it. What another mapping (Box::inspect: a description
  // of its own, as another process's) sees is the kernel's answer.
  const std::string name = shmtest::unique_name("one-desc");
  shmtest::segment_guard g(name);
  REQUIRE(shmbox::Box::create(name, {.capacity = 8}));
  auto box = shmbox::Box::open(name);
  REQUIRE(box);
  std::optional<shmbox::Owner> o;
  std::optional<shmbox::Producer> p1, p2;
  {
    auto got = shmbox::Owner::acquire(*box);
    auto a = shmbox::Producer::attach(*box);
    auto b = shmbox::Producer::attach(*box);
    REQUIRE(got);
    REQUIRE(a);
    REQUIRE(b);
    o.emplace(std::move(*got));
    p1.emplace(std::move(*a));
    p2.emplace(std::move(*b));
  }
  // Through another mapping (the kernel's answer), and through the Box the
  // handles were made from (its lock description holds the bytes: a
  // description never conflicts with itself, so its held bytes answer).
  auto check = [&](bool owner_alive, std::uint32_t producers) {
    const auto other = stat_of(name);
    const auto same = shmbox::info(*box);
    CHECK(other.owner.alive == owner_alive);
    CHECK(same.owner.alive == owner_alive);
    CHECK(other.producers_attached == producers);
    CHECK(same.producers_attached == producers);
  };
  check(true, 2);
  p1.reset();  // its entry's byte goes; the owner's and p2's stay
  check(true, 1);
  REQUIRE(p2->post("p2") == shmbox::post_status::stored);
  o.reset();  // released: the owner byte goes, p2's stays
  check(false, 1);
  auto again = shmbox::Owner::acquire(*box);  // the byte is taken again through the same description
  REQUIRE(again);
  check(true, 1);
  shmbox::message m;
  CHECK(again->receive(m, {.timeout = 5s}) == shmbox::recv_status::ok);
  CHECK(m.data == "p2");
}
