// bench/memory.cpp - shmbox-bench-memory: what a box costs when nobody uses it.
//
// 1. Memory: the bytes of shared memory one box takes (its segment size, all
//    of it allocated at creation with posix_fallocate: a box never grows), for
//    capacities 64 .. 65536 and slot sizes 64 .. 4096 bytes, with the default
//    64 producer entries and one lane; and the overhead over the payload bytes
//    (capacity x slot size). Group "memory", mechanism "cap=C slot=S".
// 2. Idle CPU: an owner process blocked in Owner::receive with nothing to
//    receive, measured over --idle-seconds (default 2) from /proc/<pid>/stat
//    (utime + stime, in clock ticks of 10 ms) once the process sleeps in the
//    kernel (handshake: state S; it polls for the box's adaptive spin first).
//    As a control that the measurement sees CPU use, the same for an owner
//    that busy-polls try_receive. Group "idle", metric "cpu", unit "ms/s".
// Rows on stdout (rows.hpp), a readable table on stderr.
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>

#include "rows.hpp"
#include "shmbox/shmbox.hpp"

namespace {

// CPU milliseconds per second of an owner of an empty box; -1 on failure.
double idle_owner_cpu(bool busy_poll, double seconds) {
  const std::string name = "bench-idle-" + std::to_string(::getpid());
  (void)shmbox::Box::remove(name);
  auto box = shmbox::Box::create(name, {.capacity = 1024, .slot_size = 64});
  if (!box) {
    std::fprintf(stderr, "create: %s\n", shmbox::explain(box.error()).c_str());
    return -1;
  }
  int ready[2];
  if (::pipe(ready) != 0) return -1;
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    auto o = shmbox::Owner::acquire(name);
    if (!o) ::_exit(1);
    char c = 1;
    if (::write(ready[1], &c, 1) != 1) ::_exit(1);
    shmbox::message m;
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds + 5);
    while (std::chrono::steady_clock::now() < until) {
      if (busy_poll) (void)o->try_receive(m);
      else (void)o->receive(m, {.timeout = std::chrono::seconds(60)});
    }
    ::_exit(0);
  }
  ::close(ready[1]);
  char c = 0;
  double result = -1;
  if (::read(ready[0], &c, 1) == 1 && (busy_poll || shmbench::wait_until_sleeping(pid))) {
    const double t0 = shmbench::cpu_us(pid);
    const auto w0 = std::chrono::steady_clock::now();
    ::usleep(static_cast<useconds_t>(seconds * 1e6));  // the measured interval itself, not a synchronisation
    const double t1 = shmbench::cpu_us(pid);
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count();
    if (t0 >= 0 && t1 >= 0) result = (t1 - t0) / 1000.0 / wall;  // ms of CPU per s
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  ::close(ready[0]);
  (void)shmbox::Box::remove(name);
  return result;
}

}  // namespace

int main(int argc, char** argv) {
  double idle_seconds = 2;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--idle-seconds") == 0 && i + 1 < argc) idle_seconds = std::atof(argv[++i]);
    else if (std::strcmp(argv[i], "--quick") == 0) idle_seconds = 0.5;
    else {
      std::fprintf(stderr, "usage: shmbox-bench-memory [--idle-seconds S] [--quick]\n");
      return 2;
    }
  }
  const std::string name = "bench-memory-" + std::to_string(::getpid());
  std::fprintf(stderr, "# shared memory per box (64 producer entries, 1 lane)\n%10s %8s %14s %14s %10s\n", "capacity",
               "slot", "segment bytes", "payload bytes", "overhead");
  for (const std::uint32_t cap : {64u, 1024u, 16384u, 65536u}) {
    for (const std::uint32_t slot : {64u, 256u, 1024u, 4096u}) {
      (void)shmbox::Box::remove(name);
      auto box = shmbox::Box::create(name, {.capacity = cap, .slot_size = slot});
      if (!box) {
        std::fprintf(stderr, "create %u x %u: %s\n", cap, slot, shmbox::explain(box.error()).c_str());
        return 1;
      }
      const double bytes = static_cast<double>(shmbox::info(*box).segment_bytes);
      const double payload = static_cast<double>(cap) * slot;
      (void)shmbox::Box::remove(name);
      char mech[64], note[96];
      std::snprintf(mech, sizeof mech, "cap=%u slot=%u", cap, slot);
      std::snprintf(note, sizeof note, "%.2fx the payload bytes", bytes / payload);
      std::fprintf(stderr, "%10u %8u %14.0f %14.0f %9.2fx\n", cap, slot, bytes, payload, bytes / payload);
      shmbench::print_row("memory", mech, "bytes", bytes, bytes, bytes, "B", note);
    }
  }
  std::fprintf(stderr, "# CPU of an owner of an empty box, over %.1f s\n", idle_seconds);
  for (const bool busy : {false, true}) {
    const double ms = idle_owner_cpu(busy, idle_seconds);
    if (ms < 0) {
      std::fprintf(stderr, "shmbox-bench-memory: the idle measurement failed\n");
      return 1;
    }
    const char* mech = busy ? "shmbox-try-receive-loop" : "shmbox-receive";
    std::fprintf(stderr, "%-28s %8.1f ms CPU per s\n", busy ? "busy-polling try_receive" : "blocked in receive", ms);
    shmbench::print_row("idle", mech, "cpu", ms, ms, ms, "ms/s",
                        busy ? "control: polling burns a core" : "blocked in receive, adaptive spin then futex");
  }
  return 0;
}
