// A priority box: a position finished out of order (a dead producer's claim,
// abandoned when its entry is reused) in the ring. Messages before it and
// after it: the owner should still hand out the lowest priority first.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cstdio>
#include "shmbox/shmbox.hpp"
using namespace std::chrono_literals;
static void child(void (*f)(const char*), const char* name) {
  const pid_t c = fork();
  if (c == 0) { f(name); _exit(0); }
  int st = 0;
  waitpid(c, &st, 0);
}
int main(int argc, char**) {
  const bool with_reader = argc > 1;  // also an owner that read a and b and died
  const char* name = "gencheck-repro-prio-gap";
  (void)shmbox::Box::remove(name);
  auto box = shmbox::Box::create(name, {.capacity = 8, .max_producers = 1, .priority = true});
  { auto p = shmbox::Producer::attach(*box); p->post("a", {.priority = 0}); p->post("b", {.priority = 2}); }
  if (with_reader)
    child([](const char* n) {
      auto o = shmbox::Owner::acquire(n);
      shmbox::batch got;
      o->read(got, {.max = 2, .timeout = 0ns});
      raise(SIGKILL);
    }, name);
  child([](const char* n) {  // claims position 2 and dies before publishing it
    auto p = shmbox::Producer::attach(n);
    auto loan = p->loan();
    raise(SIGKILL);
  }, name);
  {
    auto p = shmbox::Producer::attach(*box);  // reuses the dead entry: position 2 is abandoned
    p->post("c", {.priority = 1});
    p->post("d", {.priority = 0});
  }
  std::printf("abandoned %llu\n", (unsigned long long)box->read_counters().abandoned);
  auto o = shmbox::Owner::acquire(*box);
  std::printf("receive:");
  shmbox::message m;
  while (o->try_receive(m) == shmbox::recv_status::ok)
    std::printf(" %s%s(prio %lld)", m.data.c_str(), m.redelivered ? "!" : "", (long long)m.priority);
  std::printf("\nexpected: a%s(prio 0) d(prio 0) c(prio 1) b%s(prio 2)\n", with_reader ? "!" : "", with_reader ? "!" : "");
  (void)shmbox::Box::remove(name);
}
