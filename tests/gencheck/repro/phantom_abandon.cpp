// A priority box (block, capacity 2). A dead producer's last post was
// position 0 (its entry still names claim(0)). An owner dies moving that
// message into the store (owner.after_commit: T5 done, T7 not: the
// published head stays 0); a new owner takes the box over (R4 frees slot 0,
// publishes no head). A post into the full lane then waits on slot(head)
// and "repairs" position 0 -- finished long ago -- counting it abandoned,
// again and again while it waits.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cstdio>
#include <cstdlib>
#include <string>
#include "shmbox/shmbox.hpp"
using namespace std::chrono_literals;
static void show(const shmbox::Box& b, const char* when) {
  const auto c = b.read_counters();
  const auto depth = shmbox::info(b).depth;
  const unsigned long long right = c.delivered + c.rejected + c.too_large + c.timeouts + c.dropped_newest + c.dropped_oldest +
                                   c.filtered + c.abandoned + c.aborted + depth;
  std::printf("%-34s posted %llu, delivered %llu, timeouts %llu, abandoned %llu, depth %llu: identity %s\n", when,
              (unsigned long long)c.posted, (unsigned long long)c.delivered, (unsigned long long)c.timeouts,
              (unsigned long long)c.abandoned, (unsigned long long)depth, c.posted == right ? "holds" : "BROKEN");
}
int main(int argc, char** argv) {
  const std::string gencheck = argc > 1 ? argv[1] : "build/tests/shmbox-gencheck";
  const char* name = "gencheck-repro-phantom";
  (void)shmbox::Box::remove(name);
  auto box = shmbox::Box::create(name, {.capacity = 2, .overflow = shmbox::policy::block, .priority = true});
  if (fork() == 0) {  // a producer whose last post is position 0, then dies
    auto p = shmbox::Producer::attach(name);
    p->post("w", {.priority = 5});
    raise(SIGKILL);
  }
  wait(nullptr);
  auto p = shmbox::Producer::attach(*box);
  p->post("x", {.priority = 0});  // out of order: the owner will move both into its store
  show(*box, "two messages posted:");
  // An owner (shmbox-gencheck's role) that dies at its first owner.after_commit: moving w.
  const std::string cmd = "echo 'recv 1 0' | SHMBOX_FAULT=owner.after_commit:1 " + gencheck + " owner " + name + " acquire >/dev/null";
  std::system(cmd.c_str());
  show(*box, "an owner died moving w:");
  auto o = shmbox::Owner::acquire(*box);  // R4; no receive yet
  show(*box, "a new owner took over:");
  const auto st = p->post("y", {.timeout = 50ms, .priority = 1});  // the lane is full: waits 50 ms
  std::printf("post y: %s\n", std::string(shmbox::to_string(st)).c_str());
  show(*box, "after the post waited:");
  (void)shmbox::Box::remove(name);
}
