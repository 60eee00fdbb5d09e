// tests/ownership/namespaces.cpp - boxes shared between containers: roles in other pid
// namespaces (unshare --pid --fork --mount-proc, as root), and as another
// user, are alive exactly as long as the kernel says, and every role works
// across them (boxes and pools). Also: gc is exclusive against attaching (a post never lands
// in a box gc removes). Needs root and unshare(1): skipped (a message, no
// checks) where a pid namespace cannot be made.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <future>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <doctest/doctest.h>
#include "segment/liveness.hpp"
#include "base/process.hpp"
#include "segment/segment.hpp"
#include "shmbox/box.hpp"
#include "shmbox/heir.hpp"
#include "shmbox/inspect.hpp"
#include "shmbox/owner.hpp"
#include "shmbox/pool.hpp"
#include "shmbox/producer.hpp"
#include "support.hpp"

namespace {

using namespace std::chrono_literals;
using shmtest::child;

bool namespaces_available() {
  static const bool ok = [] {
    const auto r = shmtest::run({"/usr/bin/unshare", "--pid", "--fork", "--mount-proc", "--kill-child", "/bin/true"});
    return shmtest::exited_with(r.status, 0);
  }();
  return ok;
}

#define REQUIRE_NAMESPACES()                                                          \
  do {                                                                                \
    if (!namespaces_available()) {                                                    \
      MESSAGE("skipped: cannot make a pid namespace here (needs root and unshare)"); \
      return;                                                                         \
    }                                                                                 \
  } while (0)

// argv run in a new pid namespace with its own /proc (a container): a shell
// is its pid 1 (an init, which cannot signal itself: SIGSTOP at a fault
// point would be ignored) and runs argv as pid 2. --kill-child: the whole
// namespace dies with the unshare process (the child guard kills that).
std::vector<std::string> in_new_ns(std::vector<std::string> argv) {
  std::vector<std::string> out = {"/usr/bin/unshare", "--pid", "--fork", "--mount-proc", "--kill-child",
                                   "/bin/sh", "-c", "\"$@\"; exit $?", "sh"};
  out.insert(out.end(), argv.begin(), argv.end());
  return out;
}

pid_t first_child(pid_t pid) {
  for (int i = 0; i < 5000; ++i) {
    std::istringstream in(
        shmtest::read_text("/proc/" + std::to_string(pid) + "/task/" + std::to_string(pid) + "/children"));
    pid_t kid = 0;
    if (in >> kid && kid > 0) return kid;
    std::this_thread::sleep_for(1ms);
  }
  return -1;
}

// The pid (in our namespace) of argv of in_new_ns (unshare -> sh -> argv).
pid_t ns_child(pid_t unshare_pid) {
  const pid_t init = first_child(unshare_pid);
  return init > 0 ? first_child(init) : -1;
}

void make_box(const std::string& name, shmbox::policy pol = shmbox::policy::reject, std::uint32_t mode = 0600) {
  auto b = shmbox::Box::create(name, {.capacity = 64, .slot_size = 64, .overflow = pol, .mode = mode});
  REQUIRE(b);
}

using shmtest::eventually;

shmbox::box_info info_of(const std::string& name) {
  auto b = shmbox::Box::inspect(name);
  REQUIRE(b);
  return shmbox::info(*b);
}

}  // namespace

TEST_CASE("namespaces: a live owner in another pid namespace is alive, keeps the box, and its heir takes over when it dies") {
  REQUIRE_NAMESPACES();
  shmtest::segment_guard g(shmtest::unique_name("ns-owner"));
  make_box(g.name);
  child owner(in_new_ns({shmtest::helper_path(), "own", g.name}), {}, true);
  REQUIRE(owner.read_line().value_or("") == "owned 1");
  const pid_t inner = ns_child(owner.pid());
  REQUIRE(inner > 0);

  // Seen from here: alive, in another namespace, with its own pid (1 there).
  shmbox::box_info i = info_of(g.name);
  CHECK(i.owner.alive);
  CHECK(i.owner.pid == 2);
  CHECK_FALSE(i.owner.same_namespace);
  CHECK(i.owner.pid_ns != 0);
  CHECK(i.owner.pid_ns != shmbox::detail::self_pid_ns());
  CHECK_FALSE(i.orphaned);
  const auto stat = shmtest::run({shmtest::cli_path(), "stat", g.name});
  INFO("stat:\n", stat.out);
  CHECK(stat.out.find("pid 2 (alive, pid namespace " + std::to_string(i.owner.pid_ns) + ")") != std::string::npos);
  CHECK(stat.out.find("ORPHANED") == std::string::npos);
  const auto js = shmtest::run({shmtest::cli_path(), "stat", g.name, "--json"});
  CHECK(js.out.find("\"same_namespace\": false") != std::string::npos);
  const auto prom = shmtest::run({shmtest::cli_path(), "stat", g.name, "--prometheus"});
  CHECK(prom.out.find("shmbox_owner_same_pid_namespace{box=\"" + g.name + "\"} 0") != std::string::npos);
  CHECK(prom.out.find("shmbox_owner_alive{box=\"" + g.name + "\"} 1") != std::string::npos);

  // Nobody here may take it: not a plain acquire, not an heir.
  auto again = shmbox::Owner::acquire(g.name);
  REQUIRE_FALSE(again);
  CHECK(again.error() == shmbox::errc::not_owner);
  child heir({shmtest::helper_path(), "serve", g.name, "--heir", "--data", "standby", "--max", "1", "--idle-ms", "200"});
  REQUIRE(heir.read_line().value_or("").rfind("enlisted", 0) == 0);
  // The heir waits; it must not depose the live owner (a bounded look).
  CHECK_FALSE(heir.read_line(400ms).has_value());
  CHECK(info_of(g.name).owner.epoch == 1);

  // Killed from here (the container's pid 1 dies): the heir takes over.
  const auto t0 = std::chrono::steady_clock::now();
  ::kill(inner, SIGKILL);
  const auto line = heir.read_line(20s).value_or("");
  const auto took = std::chrono::steady_clock::now() - t0;
  INFO("heir: ", line);
  CHECK(line.rfind("owner epoch=2 reason=owner-died", 0) == 0);
  CHECK(line.find("data=standby") != std::string::npos);
  MESSAGE("takeover across pid namespaces after ",
          std::chrono::duration_cast<std::chrono::microseconds>(took).count(), " us (figures: shmbox-bench-failover)");
  i = info_of(g.name);
  CHECK(i.last_transfer.reason == shmbox::transfer_reason::owner_died);
  CHECK(i.last_transfer.from_pid == 2);
  CHECK(i.last_transfer.from_pid_ns != i.last_transfer.to_pid_ns);
}

TEST_CASE("namespaces: an heir in another pid namespace takes over when the owner dies (it polls the owner's lock), and a chain of heirs across namespaces") {
  REQUIRE_NAMESPACES();
  shmtest::segment_guard g(shmtest::unique_name("ns-heir"));
  make_box(g.name);
  child owner({shmtest::helper_path(), "own", g.name}, {}, true);
  REQUIRE(owner.read_line().value_or("") == "owned 1");
  child heir1(in_new_ns({shmtest::helper_path(), "serve", g.name, "--heir", "--data", "first", "--max", "1", "--idle-ms",
                         "100", "--hold"}),
              {}, true);
  REQUIRE(heir1.read_line().value_or("").rfind("enlisted 0", 0) == 0);
  child heir2(in_new_ns({shmtest::helper_path(), "serve", g.name, "--heir", "--data", "second", "--max", "1", "--idle-ms",
                         "100"}));
  REQUIRE(heir2.read_line().value_or("").rfind("enlisted 1", 0) == 0);
  const auto heirs = info_of(g.name).heirs;
  REQUIRE(heirs.size() == 2);
  for (const auto& h : heirs) {
    CHECK(h.alive);
    CHECK_FALSE(h.same_namespace);
    CHECK(h.pid == 2);
  }
  const auto table = shmtest::run({shmtest::cli_path(), "heirs", g.name});
  CHECK(table.out.find("PID-NS") != std::string::npos);
  CHECK(table.out.find(std::to_string(heirs[0].pid_ns)) != std::string::npos);

  // The owner (here) dies: the first heir (in its own namespace) takes over
  // without any poke it could receive (another namespace: no pidfd_getfd).
  owner.kill(SIGKILL);
  owner.wait();
  const auto l1 = heir1.read_line(20s).value_or("");
  CHECK(l1.rfind("owner epoch=2 reason=owner-died", 0) == 0);
  CHECK(l1.find("data=first") != std::string::npos);
  // It holds the box (--hold); the second heir stays where it is.
  CHECK_FALSE(heir2.read_line(300ms).has_value());
  // The first heir's whole namespace dies: the second takes over.
  heir1.kill(SIGKILL);
  heir1.wait();
  const auto l2 = heir2.read_line(20s).value_or("");
  CHECK(l2.rfind("owner epoch=3 reason=owner-died", 0) == 0);
  CHECK(l2.find("data=second") != std::string::npos);
}

TEST_CASE("namespaces: a producer in another pid namespace stopped mid-post is alive (its slot is not repaired); killed, it is") {
  REQUIRE_NAMESPACES();
  shmtest::segment_guard g(shmtest::unique_name("ns-prod"));
  make_box(g.name);
  auto box = shmbox::Box::open(g.name);
  REQUIRE(box);
  auto owner = shmbox::Owner::acquire(*box);
  REQUIRE(owner);
  // A producer in a namespace of its own that claims a slot and stops
  // (SIGSTOP: slow, not dead) before publishing; returns its pid here.
  auto stopped_producer = [&](child& prod) {
    REQUIRE(prod.read_line().value_or("").rfind("ready", 0) == 0);
    const pid_t inner = ns_child(prod.pid());
    REQUIRE(inner > 0);
    REQUIRE(shmtest::wait_for_state(inner, 'T', 10s));
    return inner;
  };
  const std::vector<std::string> stop_env = {"SHMBOX_FAULT=producer.after_claim:1:stop"};
  child prod(in_new_ns({shmtest::helper_path(), "produce", g.name, "7", "1", "--no-wait"}), stop_env);
  const pid_t inner = stopped_producer(prod);
  shmbox::box_info i = info_of(g.name);
  REQUIRE(i.producers.size() == 1);
  CHECK(i.producers[0].alive);
  CHECK_FALSE(i.producers[0].same_namespace);
  // The owner waits well past the repair grace period: nothing is abandoned.
  shmbox::message m;
  CHECK(owner->receive(m, {.timeout = 600ms}) == shmbox::recv_status::timeout);
  CHECK(box->read_counters().abandoned == 0);
  // Going on, it publishes; the owner gets it.
  ::kill(inner, SIGCONT);
  CHECK(owner->receive(m, {.timeout = 10s}) == shmbox::recv_status::ok);
  CHECK(shmtest::exited_with(prod.wait(), 0));

  // Again, but killed while it holds the claim: the owner repairs the slot.
  child prod2(in_new_ns({shmtest::helper_path(), "produce", g.name, "8", "1", "--no-wait"}), stop_env);
  ::kill(stopped_producer(prod2), SIGKILL);
  prod2.wait();
  CHECK(eventually([&] {
    shmbox::message x;
    owner->receive(x, {.timeout = 50ms});
    return box->read_counters().abandoned == 1;
  }));
  i = info_of(g.name);
  CHECK(i.count.posted == i.count.delivered + i.count.abandoned + i.depth);
}

TEST_CASE("namespaces: Producer::adopt of a producer of another pid namespace (and user): refused while it lives (stopped), taken once it is killed") {
  REQUIRE_NAMESPACES();
  const bool can_switch_user = ::geteuid() == 0 && ::access("/usr/bin/setpriv", X_OK) == 0;
  for (const bool other_user : {false, true}) {
    if (other_user && !can_switch_user) {
      MESSAGE("second user skipped: needs root and setpriv");
      continue;
    }
    CAPTURE(other_user);
    shmtest::segment_guard g(shmtest::unique_name("ns-adopt"));
    make_box(g.name, shmbox::policy::reject, other_user ? 0666 : 0600);
    auto box = shmbox::Box::open(g.name);
    REQUIRE(box);
    // Stops (SIGSTOP) holding the claim of its first post: alive, in another namespace.
    std::vector<std::string> argv = {shmtest::helper_path(), "produce", g.name, "9", "1", "--no-wait", "--any-owner"};
    if (other_user) argv.insert(argv.begin(), {"/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"});
    child prod(in_new_ns(argv), {"SHMBOX_FAULT=producer.after_claim:1:stop"});
    const std::string ready = prod.read_line().value_or("");
    unsigned entry = 0;
    unsigned long long attached = 0;
    REQUIRE(std::sscanf(ready.c_str(), "ready %u %llu", &entry, &attached) == 2);
    const pid_t inner = ns_child(prod.pid());
    REQUIRE(inner > 0);
    REQUIRE(shmtest::wait_for_state(inner, 'T', 10s));
    CHECK(shmbox::Producer::adopt(*box, entry, attached).error() == shmbox::errc::not_found);  // alive: its lock is held
    ::kill(inner, SIGKILL);
    prod.wait();
    auto heir = shmbox::Producer::adopt(*box, entry, attached);
    REQUIRE(heir);
    CHECK(heir->entry_index() == entry);
    CHECK(box->read_counters().abandoned == 1);  // its claim, repaired by adopt
    CHECK(heir->post("next") == shmbox::post_status::stored);
    auto owner = shmbox::Owner::acquire(*box);
    REQUIRE(owner);
    shmbox::message m;
    REQUIRE(owner->receive(m, {.timeout = 10s}) == shmbox::recv_status::ok);
    CHECK(m.data == "next");
  }
}

TEST_CASE("namespaces: gc keeps a box whose only user lives in another pid namespace (also gc run inside one), and removes it once that user is dead") {
  REQUIRE_NAMESPACES();
  shmtest::segment_guard g(shmtest::unique_name("ns-gc"));
  make_box(g.name);
  {
    // A role in another namespace, the only process of the box.
    child heir(in_new_ns({shmtest::helper_path(), "serve", g.name, "--heir", "--max", "1"}));
    REQUIRE(heir.read_line().value_or("").rfind("enlisted", 0) == 0);
    auto r = shmtest::run({shmtest::cli_path(), "gc", "--prefix", g.name});
    CHECK(r.status == 0);
    CHECK(::access(("/dev/shm/shmbox." + g.name).c_str(), F_OK) == 0);
    // gc inside a third namespace (its /proc shows nothing of the others).
    r = shmtest::run(in_new_ns({shmtest::cli_path(), "gc", "--prefix", g.name}));
    CHECK(::access(("/dev/shm/shmbox." + g.name).c_str(), F_OK) == 0);
    // (An heir of a box nobody owns takes it at once: it is the owner now.)
    // The CLI in a third namespace sees it alive, in another namespace.
    r = shmtest::run(in_new_ns({shmtest::cli_path(), "stat", g.name}));
    INFO(r.out);
    CHECK(r.out.find("(alive, pid namespace ") != std::string::npos);
    const pid_t inner = ns_child(heir.pid());
    REQUIRE(inner > 0);
    ::kill(inner, SIGKILL);
    heir.wait();
  }
  const auto r = shmtest::run({shmtest::cli_path(), "gc", "--prefix", g.name});
  INFO(r.out, r.err);
  CHECK(r.status == 0);
  CHECK(::access(("/dev/shm/shmbox." + g.name).c_str(), F_OK) != 0);
}

TEST_CASE("namespaces: give-away names a pid of the caller's namespace only, or an heir entry in any") {
  REQUIRE_NAMESPACES();
  shmtest::segment_guard g(shmtest::unique_name("ns-give"));
  make_box(g.name);
  child owner({shmtest::helper_path(), "own", g.name, "--accept-requests"}, {}, true);
  REQUIRE(owner.read_line().value_or("") == "owned 1");
  child heir(in_new_ns({shmtest::helper_path(), "serve", g.name, "--listen", "--max", "1", "--idle-ms", "100"}));
  REQUIRE(heir.read_line().value_or("").rfind("enlisted", 0) == 0);
  const auto hs = info_of(g.name).heirs;
  REQUIRE(hs.size() == 1);
  // Its pid (2) means another process here: a clear error, nothing asked.
  auto r = shmtest::run({shmtest::cli_path(), "give-away", g.name, std::to_string(hs[0].pid), "--timeout", "500"});
  INFO(r.err);
  CHECK(shmtest::exited_with(r.status, 1));
  CHECK(r.err.find("--heir") != std::string::npos);
  // By its heir entry: served when the owner next receives.
  child ask({shmtest::cli_path(), "give-away", g.name, "--heir", std::to_string(hs[0].entry), "--timeout", "10000"}, {},
            false, true);
  // The owner serves a request when it receives: receive until it is gone
  // (the asker may not have posted its request yet at the first tries).
  std::string st;
  for (int i = 0; i < 1000 && st != "not-owner"; ++i) {
    owner.write_stdin("serve\n");
    st = owner.read_line(5s).value_or("");
    if (st != "not-owner") std::this_thread::sleep_for(10ms);
  }
  CHECK(st == "not-owner");
  CHECK(shmtest::exited_with(ask.wait(20s), 0));
  const auto l = heir.read_line(20s).value_or("");
  CHECK(l.rfind("owner epoch=2 reason=give-away", 0) == 0);
}

TEST_CASE("namespaces: a fork child of the owner (no exec) does not keep the owner's role alive") {
  shmtest::segment_guard g(shmtest::unique_name("ns-fork"));
  make_box(g.name);
  child owner({shmtest::helper_path(), "own", g.name, "--fork-child"}, {}, true);
  REQUIRE(owner.read_line().value_or("").rfind("child ", 0) == 0);
  REQUIRE(owner.read_line().value_or("") == "owned 1");
  child heir({shmtest::helper_path(), "serve", g.name, "--heir", "--max", "1", "--idle-ms", "100"});
  REQUIRE(heir.read_line().value_or("").rfind("enlisted", 0) == 0);
  owner.kill(SIGKILL);  // the forked child lives on (its stdin is still open)
  owner.wait();
  CHECK(heir.read_line(20s).value_or("").rfind("owner epoch=2 reason=owner-died", 0) == 0);
  owner.close_stdin();
}

TEST_CASE("namespaces: roles in another namespace AND as another user (a 0666 box)") {
  REQUIRE_NAMESPACES();
  if (::geteuid() != 0 || ::access("/usr/bin/setpriv", X_OK) != 0) {
    MESSAGE("skipped: needs root and setpriv");
    return;
  }
  shmtest::segment_guard g(shmtest::unique_name("ns-uid"));
  make_box(g.name, shmbox::policy::reject, 0666);
  auto box = shmbox::Box::open(g.name);
  REQUIRE(box);
  auto owner = shmbox::Owner::acquire(*box);
  REQUIRE(owner);
  std::vector<std::string> as_nobody = {"/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                                        shmtest::helper_path(), "produce", g.name, "5", "20", "--no-wait", "--any-owner"};
  child prod(in_new_ns(as_nobody));
  REQUIRE(prod.read_line().value_or("").rfind("ready", 0) == 0);
  const auto done = prod.read_line(20s).value_or("");
  INFO(done);
  CHECK(done.rfind("done", 0) == 0);
  std::vector<shmbox::message> got;
  CHECK(owner->receive_batch(got, {.max = 64, .timeout = 5s}) == shmbox::recv_status::ok);
  while (got.size() < 20) {
    std::vector<shmbox::message> more;
    if (owner->receive_batch(more, {.max = 64, .timeout = 2s}) != shmbox::recv_status::ok) break;
    got.insert(got.end(), more.begin(), more.end());
  }
  CHECK(got.size() == 20);
}

// An owner in an event loop (notify_fd) and a producer that may not take its
// eventfd (another pid namespace and another user): the producer rings the
// owner process's doorbell and the notify hub writes the eventfd
// (lib/wake/notify_hub.hpp, route 2). bell_rings shows that route was taken: the
// hub's scan (route 3) would also make the fd readable, within a second.
TEST_CASE("namespaces: an owner in an event loop is woken through its doorbell by a producer of another namespace and user") {
  REQUIRE_NAMESPACES();
  if (::geteuid() != 0 || ::access("/usr/bin/setpriv", X_OK) != 0) {
    MESSAGE("skipped: needs root and setpriv");
    return;
  }
  shmtest::segment_guard g(shmtest::unique_name("ns-bell"));
  make_box(g.name, shmbox::policy::reject, 0666);
  auto box = shmbox::Box::open(g.name);
  REQUIRE(box);
  auto owner = shmbox::Owner::acquire(*box);
  REQUIRE(owner);
  const int fd = owner->notify_fd();
  REQUIRE(fd >= 0);
  owner->notify();
  auto seg = shmbox::detail::open_segment(g.name, true);
  REQUIRE(seg);
  const std::uint32_t rings_before = (*seg)->owner()->bell_rings.load();
  std::vector<std::string> as_nobody = {"/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                                        shmtest::helper_path(), "produce", g.name, "5", "1", "--no-wait", "--any-owner"};
  child prod(in_new_ns(as_nobody));
  REQUIRE(prod.read_line(20s).value_or("").rfind("ready", 0) == 0);
  CHECK(prod.read_line(20s).value_or("").rfind("done", 0) == 0);
  pollfd p{fd, POLLIN, 0};
  REQUIRE(::poll(&p, 1, 30'000) == 1);
  shmbox::delivery d;
  CHECK(owner->wait(d, std::chrono::nanoseconds(0)) == shmbox::owner_event::notified);
  CHECK((*seg)->owner()->bell_rings.load() == rings_before + 1);
  shmbox::message m;
  CHECK(owner->try_receive(m) == shmbox::recv_status::ok);
}

TEST_CASE("gc is exclusive against attaching: an opener that comes after the unlink fails, it never posts into a removed box") {
  using namespace shmbox::detail;
  shmtest::segment_guard g(shmtest::unique_name("gc-excl"));
  make_box(g.name);
  // Do what gc does: hold the attach byte exclusively while checking.
  const int fd = ::shm_open(("/shmbox." + g.name).c_str(), O_RDWR | O_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  REQUIRE(try_lock_byte(fd, kAttachByte, true));
  std::promise<shmbox::result<shmbox::Producer>> attached;
  auto fut = attached.get_future();
  std::string why;  // explain() is per thread: the attaching thread's words
  std::thread t([&] {
    auto r = shmbox::Producer::attach(g.name);
    if (!r) why = shmbox::explain(r.error());
    attached.set_value(std::move(r));
  });
  // Handshake: the thread has opened the segment (a second descriptor of it
  // in this process) and now waits for the byte...
  const auto opened_by_thread = [&] {
    int n = 0;
    for (int d = 0; d < 1024; ++d) {
      char path[64], target[256];
      std::snprintf(path, sizeof path, "/proc/self/fd/%d", d);
      const ssize_t len = ::readlink(path, target, sizeof target - 1);
      if (len <= 0) continue;
      target[len] = '\0';
      if (std::string(target) == "/dev/shm/shmbox." + g.name) ++n;
    }
    return n >= 2;
  };
  REQUIRE(eventually(opened_by_thread));
  CHECK(fut.wait_for(50ms) == std::future_status::timeout);
  // ...gc unlinks and lets go: the opener learns the box is gone.
  REQUIRE(::shm_unlink(("/shmbox." + g.name).c_str()) == 0);
  ::close(fd);
  t.join();
  auto p = fut.get();
  REQUIRE_FALSE(p);
  CHECK(p.error() == shmbox::errc::not_found);
  INFO(why);
  CHECK(why.find("removed while it was being opened") != std::string::npos);

  // And the other way round: a box someone has open is never collected.
  make_box(g.name);
  auto prod = shmbox::Producer::attach(g.name);
  REQUIRE(prod);
  auto c = shmbox::collect({.prefix = g.name});
  REQUIRE(c);
  CHECK(c->empty());
}

TEST_CASE("gc racing create/post/stat (issue 13's reproduction, bounded): every stored post is in a box that stays") {
  shmtest::segment_guard g(shmtest::unique_name("gc-race"));
  std::atomic<bool> stop{false};
  std::thread gc([&] {
    while (!stop.load()) (void)shmbox::collect({.prefix = g.name});
  });
  int lost = 0, stored = 0;
  for (int i = 0; i < 400; ++i) {
    {
      // The creator lets go at the end of this block: gc may collect the
      // empty box from there on.
      auto b = shmbox::Box::create(g.name, {.capacity = 4});
      if (!b) continue;
    }
    {
      auto p = shmbox::Producer::attach(g.name);
      if (!p) continue;  // collected first: a clear error, nothing posted
      if (p->post("m") != shmbox::post_status::stored) continue;
      ++stored;
    }
    // A look that gc's exclusive hold outlasted (it checks this very box in
    // a loop) is retried: only a box that is gone, or that lost its
    // message, is a loss. What each loss was is said.
    auto box = shmbox::Box::inspect(g.name);
    for (int k = 0; k < 20 && !box && box.error() == shmbox::errc::system_error; ++k) box = shmbox::Box::inspect(g.name);
    if (!box || box->read_counters().posted != 1) {
      ++lost;
      MESSAGE("iteration ", i, ": ", box ? "posted " + std::to_string(box->read_counters().posted) : shmbox::explain(box.error()));
    }
    ::shm_unlink(("/shmbox." + g.name).c_str());
  }
  stop = true;
  gc.join();
  MESSAGE(stored, " posts stored while gc ran in a loop");
  CHECK(stored > 0);
  CHECK(lost == 0);
}

TEST_CASE("heir entries are no confused deputy: a forged entry naming a process outside the box never gets its eventfd written") {
  // A victim process that is not in the box: an eventfd, and a report of
  // whether anyone wrote it within 2 s.
  child victim({"/usr/bin/python3", "-c",
                "import os, select, sys\n"
                "fd = os.eventfd(0)\n"
                "print(fd, flush=True)\n"
                "sys.stdin.readline()\n"
                "r, _, _ = select.select([fd], [], [], 2.0)\n"
                "print('poked' if r else 'quiet', flush=True)\n"},
               {}, true);
  const int victim_fd = std::stoi(victim.read_line().value_or("-1"));
  REQUIRE(victim_fd >= 0);
  shmtest::segment_guard g(shmtest::unique_name("deputy"));
  make_box(g.name, shmbox::policy::reject, 0666);
  child owner({shmtest::helper_path(), "own", g.name}, {}, true);
  REQUIRE(owner.read_line().value_or("") == "owned 1");
  {
    // What any user of a 0666 box can do: claim an heir entry (and hold its
    // lock, so it looks alive) and write the victim's key and descriptor.
    auto m = shmbox::detail::open_segment(g.name, false, true);
    REQUIRE(m);
    shmbox::detail::role_lock forged;
    REQUIRE(forged.lock(**m, shmbox::detail::heir_byte(**m, 5)));
    shmbox::detail::heir_entry* e = (*m)->heir(5);
    // The victim's pid, recorded in our pid namespace, with any incarnation.
    e->key.store((std::uint64_t{12345} << 22) | static_cast<std::uint32_t>(victim.pid()));
    e->pid_ns.store(shmbox::detail::self_pid_ns());
    e->wake_fd.store(victim_fd);
    e->seq.store(99);
    REQUIRE(info_of(g.name).heirs.size() == 1);
    victim.write_stdin("go\n");
    // The owner releases the box: it wakes its heirs (signal_waiters).
    owner.close_stdin();
    CHECK(shmtest::exited_with(owner.wait(), 0));
    CHECK(victim.read_line(10s).value_or("") == "quiet");
  }
}

// --- pools across containers -------------------------------------------------

namespace {

// A pool whose members are the test helper, with a supervisor (a helper
// child in our namespace); removed at once, members stopped, even when a
// check fails.
struct ns_pool {
  std::string name = shmtest::unique_name("ns-pool");
  std::string dead_letters = name + "-dl";
  std::optional<child> supervisor;
  explicit ns_pool(std::uint32_t max_count) {
    make_box(dead_letters);
    shmbox::pool_options o;
    o.init_count = 1;
    o.max_count = max_count;
    o.queue_max = 4;
    o.dead_letters = dead_letters;
    o.command = "exec '" + shmtest::helper_path() + "' pool-worker";
    REQUIRE(shmbox::Pool::create(name, o));
    supervisor.emplace(std::vector<std::string>{shmtest::helper_path(), "pool-supervise", name}, std::vector<std::string>{}, true);
    REQUIRE(supervisor->read_line().value_or("").rfind("supervising", 0) == 0);
  }
  ~ns_pool() {
    (void)shmbox::Pool::remove(name, shmbox::removal::immediate, 10s);  // the supervisor stops the members
    if (supervisor) supervisor->close_stdin();
    ::shm_unlink(("/shmbox-pool." + name).c_str());
    (void)shmbox::Box::remove(dead_letters);
  }
  shmbox::pool_info info() const {
    auto i = shmbox::inspect_pool(name);
    REQUIRE(i);
    return *i;
  }
};

}  // namespace

TEST_CASE("namespaces: a pool taker in another pid namespace holds its lease while alive; its death there returns the member as failed") {
  REQUIRE_NAMESPACES();
  ns_pool pool(1);
  REQUIRE(eventually([&] { return pool.info().free == 1; }));
  child taker(in_new_ns({shmtest::helper_path(), "pool-take", pool.name, "5000", "--hold", "--post", "left-behind"}), {}, true);
  const std::string took = taker.read_line().value_or("");
  REQUIRE(took.rfind("took 0 ", 0) == 0);
  REQUIRE(taker.read_line().value_or("").rfind("posted", 0) == 0);
  shmbox::pool_info i = pool.info();
  REQUIRE(i.members.size() == 1);
  CHECK(i.members[0].state == shmbox::member_state::in_use);
  CHECK(i.members[0].taker_alive);
  CHECK(i.members[0].taker_pid == 2);  // its pid in its own namespace
  CHECK(i.members[0].taker_pid_ns != shmbox::detail::self_pid_ns());
  const std::uint64_t gen = i.members[0].generation;

  taker.kill();  // unshare --kill-child: the namespace goes with it
  taker.wait();
  REQUIRE(eventually([&] {
    const auto j = pool.info();
    return j.count.killed_in_use == 1 && j.free == 1 && j.members.size() == 1 && j.members[0].generation > gen;
  }));
  // The worker never received "left-behind" (it was consumed, or moved to the dead letters): accounted either way.
  const auto j = pool.info();
  CHECK(j.count.dead_lettered + j.count.lost <= 1);
  CHECK(j.count.takes == 1);
}

TEST_CASE("namespaces: a pool taker waiting in another pid namespace is handed the member given back here") {
  REQUIRE_NAMESPACES();
  ns_pool pool(1);
  REQUIRE(eventually([&] { return pool.info().free == 1; }));
  child holder({shmtest::helper_path(), "pool-take", pool.name, "5000", "--hold"}, {}, true);
  REQUIRE(holder.read_line().value_or("").rfind("took 0 ", 0) == 0);
  child waiter(in_new_ns({shmtest::helper_path(), "pool-take", pool.name, "20000"}));
  REQUIRE(eventually([&] { return pool.info().queued == 1; }));
  holder.write_stdin("go\n");
  CHECK(holder.read_line().value_or("") == "returned ok");
  CHECK(waiter.read_line().value_or("").rfind("took 0 ", 0) == 0);
  CHECK(waiter.read_line().value_or("") == "returned ok");
  const auto i = pool.info();
  CHECK(i.count.granted == 1);
  CHECK(i.count.takes == 2);
  CHECK(i.count.returns_ok == 2);
}

TEST_CASE("namespaces: another user's process cannot open a pool unless it asks for any owner") {
  REQUIRE_NAMESPACES();
  if (::geteuid() != 0 || ::access("/usr/bin/setpriv", X_OK) != 0) {
    MESSAGE("skipped: needs root and setpriv");
    return;
  }
  ns_pool pool(1);
  std::vector<std::string> as_nobody = {"/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                                        shmtest::helper_path(), "pool-take", pool.name, "0"};
  child other(in_new_ns(as_nobody));
  const std::string line = other.read_line().value_or("");
  CHECK(line.rfind("error permission_denied", 0) == 0);
  CHECK(pool.info().count.takes == 0);
}

// release_watch.hpp: an heir whose owner is in another pid namespace has no
// pidfd of it; a watcher thread blocked in F_OFD_SETLKW on the owner's role
// byte writes the heir's eventfd when the owner dies. So an event-loop heir
// (Heir::fd, nobody calling await_transfer meanwhile) becomes readable, and
// then takes the box with its message.
TEST_CASE("namespaces: an event-loop heir's fd becomes readable when its owner in another pid namespace dies") {
  REQUIRE_NAMESPACES();
  shmtest::segment_guard g(shmtest::unique_name("ns-evheir"));
  make_box(g.name);
  child owner(in_new_ns({shmtest::helper_path(), "own", g.name}), {}, true);
  REQUIRE(owner.read_line().value_or("") == "owned 1");
  {
    auto p = shmbox::Producer::attach(g.name);
    REQUIRE(p);
    REQUIRE(p->post("kept") == shmbox::post_status::stored);
  }
  auto heir = shmbox::Heir::enlist(g.name, "evloop");
  REQUIRE(heir);
  const int fd = heir->fd();
  REQUIRE(fd >= 0);
  pollfd pf{fd, POLLIN, 0};
  CHECK(::poll(&pf, 1, 200) == 0);  // the owner lives: nothing to do
  owner.kill(SIGKILL);
  owner.wait();
  pf.revents = 0;
  REQUIRE(::poll(&pf, 1, 10'000) == 1);  // made readable by the kernel's word, through the watcher
  auto o = heir->await_transfer(0ns);
  REQUIRE(o);
  CHECK(o->transfer().reason == shmbox::transfer_reason::owner_died);
  shmbox::message m;
  REQUIRE(o->try_receive(m) == shmbox::recv_status::ok);
  CHECK(m.data == "kept");
}
