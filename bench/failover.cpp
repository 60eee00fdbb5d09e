// bench/failover.cpp - shmbox-bench-failover: how long a box is without an
// owner when its owner is killed.
//
// METHOD. Each run uses a fresh box holding one message. Two forked
// processes: the owner (acquires the box, then waits on a pipe without
// receiving) and the heir (enlists, then blocks in Heir::await_transfer and,
// once it owns the box, in receive). When both are ready (pipe handshakes),
// the parent reads CLOCK_MONOTONIC (t0) and kill -9s the owner. The heir reads
// CLOCK_MONOTONIC (t1) as soon as its receive returned the message and sends
// it back. Failover time = t1 - t0: the kernel's death notification (pidfd),
// the takeover (CAS, epoch, transfer record, recovery scan of the slots) and
// the first receive. Median and p99 over --runs runs (default 100).
// The same again with the heir in a new pid namespace (unshare(CLONE_NEWPID),
// as containers have; needs root, else the row says skipped): it cannot use
// a pidfd of the owner; a watcher thread blocked in F_OFD_SETLKW on the
// owner's role byte is woken by the kernel when the owner dies
// (lib/segment/release_watch.hpp, liveness.hpp L5).
// THE FLOOR (kill-floor): the same kill -9 of a process that maps the box,
// until a waiting process's pidfd of it turns readable (poll): what the
// kernel itself takes to tear a process down and say so; no shmbox code.
// Runs alternate between the three, so all see the same machine; the rows
// give each p50/p99 and the heirs' ratios to the floor's.
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "harness.hpp"
#include "rows.hpp"
#include "shmbox/shmbox.hpp"

namespace {

using shmbench::now_ns;  // CLOCK_MONOTONIC

void write_all(int fd, const void* p, std::size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    const ssize_t w = ::write(fd, c, n);
    if (w <= 0) _exit(3);
    c += w;
    n -= static_cast<std::size_t>(w);
  }
}

bool read_all(int fd, void* p, std::size_t n) {
  char* c = static_cast<char*>(p);
  while (n > 0) {
    const ssize_t r = ::read(fd, c, n);
    if (r <= 0) return false;
    c += r;
    n -= static_cast<std::size_t>(r);
  }
  return true;
}

// Each run's box: made afresh (a failed run's is removed first), `capacity`
// slots of 64 B. Says why on stderr if it cannot.
std::optional<shmbox::Box> fresh_box(const std::string& name, std::uint32_t capacity) {
  (void)shmbox::Box::remove(name);
  shmbox::options o;
  o.capacity = capacity;
  o.slot_size = 64;
  auto box = shmbox::Box::create(name, o);
  if (!box) {
    std::fprintf(stderr, "create: %s\n", shmbox::explain(box.error()).c_str());
    return std::nullopt;
  }
  return std::move(*box);
}

// One run: returns the failover time in ns, or -1 on failure.
// -2: the heir could not enter a new pid namespace (not root).
std::int64_t one_run(const std::string& name, std::uint32_t capacity, bool other_ns) {
  auto box = fresh_box(name, capacity);
  if (!box) return -1;
  int owner_ready[2], owner_hold[2], heir_report[2];
  if (::pipe(owner_ready) != 0 || ::pipe(owner_hold) != 0 || ::pipe(heir_report) != 0) return -1;
  const pid_t owner = ::fork();
  if (owner == 0) {
    auto own = shmbox::Owner::acquire(name);
    const char ok = own ? 'y' : 'n';
    write_all(owner_ready[1], &ok, 1);
    char c;
    [[maybe_unused]] ssize_t r = ::read(owner_hold[0], &c, 1);  // never written: holds the box until killed
    _exit(0);
  }
  char ok = 0;
  if (!read_all(owner_ready[0], &ok, 1) || ok != 'y') return -1;
  int heir_pid[2];
  if (::pipe(heir_pid) != 0) return -1;
  pid_t heir = ::fork();
  if (heir == 0 && other_ns) {
    // The heir proper is our child, pid 1 of a new pid namespace.
    pid_t kid = -1;
    if (::unshare(CLONE_NEWPID) == 0) kid = ::fork();
    if (kid != 0) {
      std::int64_t v = kid;
      write_all(heir_pid[1], &v, sizeof v);
      if (kid > 0) ::waitpid(kid, nullptr, 0);
      _exit(kid > 0 ? 0 : 1);
    }
  }
  if (heir == 0) {
    auto h = shmbox::Heir::enlist(name, "bench");
    std::int64_t ready = h ? 1 : -1;
    write_all(heir_report[1], &ready, sizeof ready);
    if (!h) _exit(1);
    auto got = h->await_transfer(std::chrono::seconds(30));
    std::int64_t t1 = -1;
    if (got) {
      shmbox::message m;
      if (got->receive(m, {.timeout = std::chrono::seconds(30)}) == shmbox::recv_status::ok) t1 = now_ns();
    }
    write_all(heir_report[1], &t1, sizeof t1);
    _exit(0);
  }
  pid_t watched = heir;  // the process whose sleep we wait for
  if (other_ns) {
    std::int64_t v = -1;
    if (!read_all(heir_pid[0], &v, sizeof v) || v <= 0) {
      ::kill(owner, SIGKILL);
      ::waitpid(owner, nullptr, 0);
      ::waitpid(heir, nullptr, 0);
      return -2;
    }
    watched = static_cast<pid_t>(v);
  }
  std::int64_t ready = 0;
  if (!read_all(heir_report[0], &ready, sizeof ready) || ready != 1) return -1;
  {
    auto p = shmbox::Producer::attach(*box);
    if (!p || p->post("first") != shmbox::post_status::stored) return -1;
  }
  // Handshake: the heir sleeps in the kernel (epoll_wait on the owner's pidfd).
  if (!shmbench::wait_until_sleeping(watched)) return -1;
  const std::int64_t t0 = now_ns();
  ::kill(owner, SIGKILL);
  std::int64_t t1 = -1;
  read_all(heir_report[0], &t1, sizeof t1);
  ::waitpid(owner, nullptr, 0);
  ::waitpid(heir, nullptr, 0);
  for (int fd : {owner_ready[0], owner_ready[1], owner_hold[0], owner_hold[1], heir_report[0], heir_report[1], heir_pid[0],
                 heir_pid[1]})
    ::close(fd);
  (void)shmbox::Box::remove(name);
  return t1 < 0 ? -1 : t1 - t0;
}

// One floor run: a process that maps the box is killed; a waiting process
// (poll on a pidfd of it) reads the clock when it turns readable. ns, or -1.
std::int64_t floor_run(const std::string& name, std::uint32_t capacity) {
  if (!fresh_box(name, capacity)) return -1;
  int victim_ready[2], victim_hold[2], waiter_report[2];
  if (::pipe(victim_ready) != 0 || ::pipe(victim_hold) != 0 || ::pipe(waiter_report) != 0) return -1;
  const pid_t victim = ::fork();
  if (victim == 0) {
    auto b = shmbox::Box::open(name);  // maps the segment, as an owner does
    const char ok = b ? 'y' : 'n';
    write_all(victim_ready[1], &ok, 1);
    char c;
    [[maybe_unused]] ssize_t r = ::read(victim_hold[0], &c, 1);  // never written: until killed
    _exit(0);
  }
  char ok = 0;
  if (!read_all(victim_ready[0], &ok, 1) || ok != 'y') return -1;
  const pid_t waiter = ::fork();
  if (waiter == 0) {
    const int pfd = static_cast<int>(::syscall(SYS_pidfd_open, victim, 0));
    std::int64_t ready = pfd >= 0 ? 1 : -1;
    write_all(waiter_report[1], &ready, sizeof ready);
    if (pfd < 0) _exit(1);
    pollfd p{pfd, POLLIN, 0};
    std::int64_t t1 = -1;
    if (::poll(&p, 1, 30'000) == 1) t1 = now_ns();
    write_all(waiter_report[1], &t1, sizeof t1);
    _exit(0);
  }
  std::int64_t ready = 0;
  if (!read_all(waiter_report[0], &ready, sizeof ready) || ready != 1) return -1;
  if (!shmbench::wait_until_sleeping(waiter)) return -1;
  const std::int64_t t0 = now_ns();
  ::kill(victim, SIGKILL);
  std::int64_t t1 = -1;
  read_all(waiter_report[0], &t1, sizeof t1);
  ::waitpid(victim, nullptr, 0);
  ::waitpid(waiter, nullptr, 0);
  for (int fd : {victim_ready[0], victim_ready[1], victim_hold[0], victim_hold[1], waiter_report[0], waiter_report[1]})
    ::close(fd);
  (void)shmbox::Box::remove(name);
  return t1 < 0 ? -1 : t1 - t0;
}

}  // namespace

int main(int argc, char** argv) {
  int runs = 100;
  std::uint32_t capacity = 1024;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--runs") == 0) runs = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--capacity") == 0) capacity = static_cast<std::uint32_t>(std::atoi(argv[i + 1]));
  }
  const std::string name = "bench-failover-" + std::to_string(::getpid());
  std::vector<double> us[2], floor_us;
  bool ns_ok = true;
  for (int r = 0; r < runs; ++r) {
    const std::int64_t f = floor_run(name, capacity);
    if (f < 0) {
      std::fprintf(stderr, "shmbox-bench-failover: floor run %d failed\n", r);
      (void)shmbox::Box::remove(name);
      return 1;
    }
    floor_us.push_back(static_cast<double>(f) / 1000.0);
    for (int other = 0; other < (ns_ok ? 2 : 1); ++other) {
      const std::int64_t ns = one_run(name, capacity, other == 1);
      if (ns == -2) {
        ns_ok = false;
        (void)shmbox::Box::remove(name);
        continue;
      }
      if (ns < 0) {
        std::fprintf(stderr, "shmbox-bench-failover: run %d failed%s\n", r, other ? " (heir in another pid namespace)" : "");
        (void)shmbox::Box::remove(name);
        return 1;
      }
      us[other].push_back(static_cast<double>(ns) / 1000.0);
    }
  }
  std::fprintf(stderr, "# owner kill -9 -> heir has received its first message; box of %u slots; %d runs\n", capacity,
               runs);
  const std::string note = std::to_string(runs) + " kills, " + std::to_string(capacity) + " slots";
  auto pct = [](std::vector<double>& v, double p) {
    std::sort(v.begin(), v.end());
    return v[std::min(v.size() - 1, static_cast<std::size_t>(p * static_cast<double>(v.size())))];
  };
  const double floor50 = pct(floor_us, 0.5), floor99 = pct(floor_us, 0.99);
  std::fprintf(stderr, "%-24s median %.0f us   p99 %.0f us   min %.0f us   max %.0f us\n", "kill-floor", floor50, floor99,
               floor_us.front(), floor_us.back());
  shmbench::print_row("failover", "kill-floor", "p50", floor50, floor50, floor50, "us",
                      note + "; kill -9 of a process mapping the box until a pidfd of it is readable");
  shmbench::print_row("failover", "kill-floor", "p99", floor99, floor99, floor99, "us", note);
  const char* what[2] = {"shmbox-heir", "shmbox-heir-other-pidns"};
  for (int other = 0; other < 2; ++other) {
    std::vector<double>& v = us[other];
    if (v.empty()) {
      std::fprintf(stderr, "%s: skipped: a new pid namespace needs root\n", what[other]);
      shmbench::print_skip("failover", what[other], "a new pid namespace needs root (unshare(CLONE_NEWPID))");
      continue;
    }
    const double p50 = pct(v, 0.5), p99 = pct(v, 0.99);
    std::fprintf(stderr, "%-24s median %.0f us   p99 %.0f us   min %.0f us   max %.0f us   (%.2fx / %.2fx the floor)\n",
                 what[other], p50, p99, v.front(), v.back(), p50 / floor50, p99 / floor99);
    shmbench::print_row("failover", what[other], "p50", p50, p50, p50, "us", note);
    shmbench::print_row("failover", what[other], "p99", p99, p99, p99, "us", note);
    shmbench::print_row("failover", what[other], "p50-vs-floor", p50 / floor50, p50 / floor50, p50 / floor50, "x",
                        "p50 / kill-floor p50, same run");
    shmbench::print_row("failover", what[other], "p99-vs-floor", p99 / floor99, p99 / floor99, p99 / floor99, "x",
                        "p99 / kill-floor p99, same run");
  }
  return 0;
}
