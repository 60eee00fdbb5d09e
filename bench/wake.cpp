// bench/wake.cpp - shmbox-bench-wake: how long from a post until a sleeping
// owner has the message, when the owner sleeps
//   (a) in Owner::receive (the futex in the segment), or
//   (b) in epoll_wait on Owner::notify_fd(), armed with active() (the waker
//       thread turns the futex wake into an eventfd write).
// The owner is a forked process; the parent posts. For each run the owner
// arms, reports "ready" through a pipe and goes to sleep; the parent gives it
// waits until the owner process sleeps in the kernel (state S in /proc: after
// its adaptive spin it is in the futex or epoll_wait), reads CLOCK_MONOTONIC
// (t0) and posts; the owner reads
// CLOCK_MONOTONIC (t1) once it holds the message and reports it. Median and
// p99 over --runs runs (default 200) per mode, all in the same run.
//   (c) as (b), with the producer refused pidfd_getfd (a seccomp filter that
//       answers EPERM, as Docker's default profile does, and as another user
//       or pid namespace gets): it cannot write the owner's eventfd itself,
//       so the owner's waker thread relays the futex wake. The refusal is
//       remembered per owner: one pidfd_getfd attempt, not one per wake.
//       Runs last (a seccomp filter cannot be removed).
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "harness.hpp"
#include "rows.hpp"
#include "shmbox/shmbox.hpp"

namespace {

using shmbench::now_ns;  // CLOCK_MONOTONIC

bool io(int fd, void* p, std::size_t n, bool write_it) {
  char* c = static_cast<char*>(p);
  while (n > 0) {
    const ssize_t r = write_it ? ::write(fd, c, n) : ::read(fd, c, n);
    if (r <= 0) return false;
    c += r;
    n -= static_cast<std::size_t>(r);
  }
  return true;
}

// The owner process: `runs` times: arm, say ready, sleep, time the message.
void owner_main(const std::string& name, bool use_fd, int runs, int to_parent, int from_parent, int unused_a,
                int unused_b) {
  ::close(unused_a);  // the parent's ends: EOF must reach us if the parent stops
  ::close(unused_b);
  auto owner = shmbox::Owner::acquire(name);
  if (!owner) _exit(2);
  const int fd = use_fd ? owner->notify_fd() : -1;
  const int ep = use_fd ? ::epoll_create1(EPOLL_CLOEXEC) : -1;
  if (use_fd) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ::epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
  }
  for (int r = 0; r < runs; ++r) {
    char go = 0;
    if (!io(from_parent, &go, 1, false)) _exit(3);
    std::int64_t t1 = -1;
    if (use_fd) {
      owner->active();
      const std::int64_t ready = 0;
      io(to_parent, const_cast<std::int64_t*>(&ready), sizeof ready, true);
      // An event loop: readable -> wait(0); a spurious readiness just loops.
      const std::int64_t give_up = now_ns() + 10'000'000'000;
      epoll_event ev{};
      while (t1 < 0 && now_ns() < give_up && ::epoll_wait(ep, &ev, 1, 10'000) == 1) {
        shmbox::delivery d;
        if (owner->wait(d, std::chrono::nanoseconds(0)) == shmbox::owner_event::delivered && d.count == 1) t1 = now_ns();
      }
    } else {
      const std::int64_t ready = 0;
      io(to_parent, const_cast<std::int64_t*>(&ready), sizeof ready, true);
      shmbox::message m;
      if (owner->receive(m, {.timeout = std::chrono::seconds(10)}) == shmbox::recv_status::ok) t1 = now_ns();
    }
    io(to_parent, &t1, sizeof t1, true);
  }
  _exit(0);
}

std::vector<double> measure(bool use_fd, int runs) {
  const std::string name = "bench-wake-" + std::to_string(::getpid()) + (use_fd ? "-fd" : "-futex");
  (void)shmbox::Box::remove(name);
  auto box = shmbox::Box::create(name, {.capacity = 64, .slot_size = 64});
  if (!box) return {};
  int up[2], down[2];
  if (::pipe(up) != 0 || ::pipe(down) != 0) return {};
  const pid_t pid = ::fork();
  if (pid == 0) owner_main(name, use_fd, runs, up[1], down[0], up[0], down[1]);
  ::close(up[1]);
  ::close(down[0]);
  auto producer = shmbox::Producer::attach(*box);
  std::vector<double> us;
  for (int r = 0; r < runs && producer; ++r) {
    char go = 1;
    std::int64_t ready = 0, t1 = 0;
    if (!io(down[1], &go, 1, true) || !io(up[0], &ready, sizeof ready, false)) break;
    if (!shmbench::wait_until_sleeping(pid)) break;  // handshake: the owner sleeps in the kernel
    const std::int64_t t0 = now_ns();
    if (producer->post("wake up") != shmbox::post_status::stored) break;
    if (!io(up[0], &t1, sizeof t1, false) || t1 < 0) break;
    us.push_back(static_cast<double>(t1 - t0) / 1000.0);
  }
  ::close(down[1]);
  ::waitpid(pid, nullptr, 0);
  (void)shmbox::Box::remove(name);
  ::close(up[0]);
  std::sort(us.begin(), us.end());
  return us;
}

// This process (and its children) from now on: pidfd_getfd fails with EPERM.
bool refuse_pidfd_getfd() {
#ifdef SYS_pidfd_getfd
  sock_filter filter[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_pidfd_getfd, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  sock_fprog prog{static_cast<unsigned short>(sizeof filter / sizeof filter[0]), filter};
  return ::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 && ::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) == 0;
#else
  return false;
#endif
}

}  // namespace

int main(int argc, char** argv) {
  int runs = 200;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--runs") == 0) runs = std::atoi(argv[i + 1]);
  std::fprintf(stderr, "# post -> a sleeping owner holds the message; %d runs each, separate processes\n", runs);
  std::fprintf(stderr, "%-34s %10s %10s %10s\n", "owner sleeps in", "median us", "p99 us", "max us");
  double median[3] = {0, 0, 0};
  for (int mode = 0; mode < 3; ++mode) {
    if (mode == 2 && !refuse_pidfd_getfd()) {
      std::fprintf(stderr, "%-34s skipped: cannot install a seccomp filter here\n", "notify_fd, pidfd_getfd refused");
      shmbench::print_skip("wake", "shmbox-notify-fd-refused", "cannot install a seccomp filter here");
      break;
    }
    const std::vector<double> us = measure(mode >= 1, runs);
    if (us.size() != static_cast<std::size_t>(runs)) {
      std::fprintf(stderr, "shmbox-bench-wake: a run failed\n");
      return 1;
    }
    auto pct = [&](double p) { return us[std::min(us.size() - 1, static_cast<std::size_t>(p * static_cast<double>(us.size())))]; };
    median[mode] = pct(0.5);
    const char* what[3] = {"receive (futex)", "epoll on notify_fd (active)", "notify_fd, pidfd_getfd refused"};
    std::fprintf(stderr, "%-34s %10.1f %10.1f %10.1f\n", what[mode], pct(0.5), pct(0.99), us.back());
    const char* mechs[3] = {"shmbox-futex", "shmbox-notify-fd", "shmbox-notify-fd-refused"};
    const char* mech = mechs[mode];
    const std::string note = std::to_string(runs) + " wake-ups";
    shmbench::print_row("wake", mech, "p50", pct(0.5), pct(0.5), pct(0.5), "us", note);
    shmbench::print_row("wake", mech, "p99", pct(0.99), pct(0.99), pct(0.99), "us", note);
  }
  std::fprintf(stderr, "notify_fd / futex (median): %.2fx\n", median[1] / median[0]);
  if (median[2] > 0) std::fprintf(stderr, "notify_fd refused / notify_fd (median): %.2fx\n", median[2] / median[1]);
  return 0;
}
