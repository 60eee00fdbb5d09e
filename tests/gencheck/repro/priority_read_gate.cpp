// A priority box (reject, capacity 4): an uncommitted read pins the ring's
// head; messages sorted into the store after it are counted twice by the gate.
#include <cstdio>
#include "shmbox/shmbox.hpp"
using namespace std::chrono_literals;
int main() {
  (void)shmbox::Box::remove("gencheck-repro-prio");
  auto box = shmbox::Box::create("gencheck-repro-prio", {.capacity = 4, .priority = true});
  auto p = shmbox::Producer::attach(*box);
  auto o = shmbox::Owner::acquire(*box);
  std::printf("post a (prio 0): %s\n", std::string(shmbox::to_string(p->post("a", {.priority = 0}))).c_str());
  shmbox::batch b;
  const auto r = o->read(b, {.max = 1, .timeout = 0ns});
  std::printf("read: %s %zu (uncommitted)\n", std::string(shmbox::to_string(r)).c_str(), b.size());
  std::printf("post b (prio 5): %s\n", std::string(shmbox::to_string(p->post("b", {.priority = 5}))).c_str());
  std::printf("post c (prio 1): %s\n", std::string(shmbox::to_string(p->post("c", {.priority = 1}))).c_str());
  std::printf("pump: moved %zu into the store\n", o->pump());
  std::printf("depth %llu of capacity %u\n", (unsigned long long)box->depth_approx(), box->capacity());
  std::printf("post d (prio 2): %s   <- 3 of 4 held: expected stored\n", std::string(shmbox::to_string(p->post("d", {.priority = 2}))).c_str());
  (void)shmbox::Box::remove("gencheck-repro-prio");
}
