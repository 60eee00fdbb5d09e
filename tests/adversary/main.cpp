// tests/adversary/main.cpp - shmbox-adversary's entry: `attack ...` (the
// second user, attacker.cpp), `role ...` (root's workload, roles.cpp), or the
// driver: doctest with the run's options
//   --seconds N   attack time per surface (default 12; SHMBOX_ADVERSARY_SECONDS)
//   --seed S      the attackers' seed (default: drawn; SHMBOX_ADVERSARY_SEED)
// and doctest's own (e.g. --test-case='adversary: pools*').
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "adversary.hpp"

namespace adv {
int attacker_main(int argc, char** argv);
int role_main(int argc, char** argv);
}  // namespace adv

int main(int argc, char** argv) {
  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  adv::params().self = n > 0 ? std::string(self, static_cast<std::size_t>(n)) : argv[0];
  if (argc > 1 && std::strcmp(argv[1], "attack") == 0) return adv::attacker_main(argc, argv);
  if (argc > 1 && std::strcmp(argv[1], "role") == 0) return adv::role_main(argc, argv);

  adv::run_params& p = adv::params();
  if (const char* s = std::getenv("SHMBOX_ADVERSARY_SECONDS")) p.seconds = std::strtod(s, nullptr);
  if (const char* s = std::getenv("SHMBOX_ADVERSARY_SEED")) p.seed = std::strtoull(s, nullptr, 10);
  std::vector<char*> rest{argv[0]};
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--seconds") == 0 && i + 1 < argc) p.seconds = std::strtod(argv[++i], nullptr);
    else if (std::strcmp(argv[i], "--seed") == 0 && i + 1 < argc) p.seed = std::strtoull(argv[++i], nullptr, 10);
    else rest.push_back(argv[i]);
  }
  if (p.seed == 0) p.seed = (std::uint64_t{std::random_device{}()} << 32) ^ std::random_device{}() ^ static_cast<std::uint64_t>(::getpid());
  if (p.seconds < 1) p.seconds = 1;
  std::printf("shmbox-adversary: seed %llu, %g s of attack per surface (replay: --seed %llu --seconds %g)\n",
              static_cast<unsigned long long>(p.seed), p.seconds, static_cast<unsigned long long>(p.seed), p.seconds);
  std::fflush(stdout);
  doctest::Context ctx;
  ctx.applyCommandLine(static_cast<int>(rest.size()), rest.data());
  return ctx.run();
}
