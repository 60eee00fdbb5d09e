// A lease box: read() one message (uncommitted), then receive_batch.
#include <cstdio>
#include <vector>
#include "shmbox/shmbox.hpp"
using namespace std::chrono_literals;
int main() {
  (void)shmbox::Box::remove("gencheck-repro-lease");
  auto box = shmbox::Box::create("gencheck-repro-lease", {.capacity = 8, .lease = 1000ms});
  auto p = shmbox::Producer::attach(*box);
  auto o = shmbox::Owner::acquire(*box);
  p->post("first"); p->post("second"); p->post("third");
  shmbox::batch b;
  const auto r = o->read(b, {.max = 1, .timeout = 0ns});
  std::printf("read: %s %zu ('%s', uncommitted)\n", std::string(shmbox::to_string(r)).c_str(), b.size(), std::string(b[0]).c_str());
  std::vector<shmbox::message> got;
  auto st = o->receive_batch(got, {.max = 1, .timeout = 0ns});
  std::printf("receive_batch: %s %zu\n", std::string(shmbox::to_string(st)).c_str(), got.size());
  for (auto& m : got) std::printf("  got '%s'\n", m.data.c_str());
  (void)shmbox::Box::remove("gencheck-repro-lease");
}
