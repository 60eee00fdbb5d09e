// A lease box (1 s). The first owner dies and heir X takes the box over
// (keeping its Heir handle, as `enlist; await_transfer; serve` does). Heir A
// enlists and is killed while it waits. Heir B enlists. X hangs (SIGSTOP)
// past its lease: B should take the box over within about a second.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <chrono>
#include <cstdio>
#include "shmbox/shmbox.hpp"
using namespace std::chrono_literals;
static pid_t heir(const char* name, const char* who, bool report) {
  const pid_t p = fork();
  if (p != 0) return p;
  auto h = shmbox::Heir::enlist(name);
  std::printf("heir %s (pid %d) enlisted at position %u\n", who, (int)getpid(), h->position());
  std::fflush(stdout);
  const auto t0 = std::chrono::steady_clock::now();
  for (;;) {
    auto o = h->await_transfer(report ? 6s : 200ms);
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
    if (o) {
      std::printf("heir %s took the box after %lld ms (%s)\n", who, (long long)ms, std::string(shmbox::to_string(o->transfer().reason)).c_str());
      std::fflush(stdout);
      for (;;) { o->renew(); usleep(50'000); }  // and serves, its Heir handle kept
    }
    if (report) {
      std::printf("heir %s: no transfer in %lld ms (expected one about 1 s after the owner stopped)\n", who, (long long)ms);
      std::fflush(stdout);
      _exit(0);
    }
  }
}
int main() {
  const char* name = "gencheck-repro-heir-alive";
  (void)shmbox::Box::remove(name);
  auto box = shmbox::Box::create(name, {.capacity = 4, .lease = 1000ms});
  const pid_t first = fork();
  if (first == 0) { auto o = shmbox::Owner::acquire(name); pause(); }
  usleep(200'000);
  const pid_t x = heir(name, "X", false);
  usleep(200'000);
  kill(first, SIGKILL);
  waitpid(first, nullptr, 0);
  usleep(300'000);
  const pid_t a = heir(name, "A", false);
  usleep(300'000);
  kill(a, SIGKILL);
  waitpid(a, nullptr, 0);
  std::printf("heir A killed\n");
  std::fflush(stdout);
  const pid_t b = heir(name, "B", true);
  usleep(300'000);
  for (const auto& h : shmbox::info(*box).heirs)
    std::printf("  heir table: entry %u pid %u %s\n", h.entry, h.pid, h.alive ? "alive" : "dead");
  kill(x, SIGSTOP);
  std::printf("X stopped past its lease\n");
  std::fflush(stdout);
  waitpid(b, nullptr, 0);
  kill(x, SIGKILL);
  while (wait(nullptr) > 0) {}
  (void)shmbox::Box::remove(name);
}
