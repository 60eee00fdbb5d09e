// tests/gencheck/gencheck.cpp - shmbox-gencheck: the generative checker of a
// box's semantics (docs/tests.md, "The generative checker").
//
// From a seed it makes a box (1-3 lanes of 1-16 messages, each lane's policy
// among reject, drop-newest, drop-oldest, lifo and block; sometimes a
// priority box, per-producer quotas, a lease), then runs a random sequence
// of steps on it: producer processes started, posting, exiting, killed
// between calls, killed at a random moment inside a post, or dying at a
// named crash point (SHMBOX_FAULT); an owner process receiving, reading,
// committing, exiting, killed (between calls or inside one) or dying at a
// crash point; heirs enlisting and taking the box over; a lease owner
// stopped past its lease. After every step it checks the box against a
// reference model (model.hpp) and the invariants of docs/guarantees.md
// (driver.cpp says which). Each run prints its seed first; a failing one
// prints the seed, the step and the discrepancy, and
//
//   shmbox-gencheck --seed S [--steps N]
//
// replays it: the same box and the same steps, decided by the seed alone.
// The outcomes of kills at random moments depend on scheduling (where the
// kill landed); --no-timed-kills leaves only the crash points, and the run
// is then the same every time.
//
//   shmbox-gencheck [--seconds S] [--steps N] [--seed S] [--stop-at K]
//                   [--no-timed-kills] [--tolerate BUG,...] [--no-priority] [--keep-going] [--verbose]
//
// Without --seed: runs of new seeds for S seconds (default 60). --steps: the
// steps of each run (default 300). --stop-at K: stop a replay after step K
// (no final drain). --tolerate: known library bugs the model then expects
// instead of flagging (docs/tests.md lists them): quota-inheritance,
// priority-read-gate, priority-sorting-delivered, priority-gap-order,
// phantom-abandon (the first, the third and the last are fixed: they still
// parse). --no-priority: new seeds whose box would be a priority
// box are passed over (CI's run: priority-read-gate and priority-gap-order
// are still open, and a priority box still fails now and then with them
// tolerated, docs/tests.md). --keep-going: go on with new seeds after a failure.
// Exit 0 when every check held, 1 when one did not, 2 on bad arguments.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "driver.hpp"
#include "protocol.hpp"

namespace gencheck {
int role_main(int argc, char** argv);
}

namespace {

std::uint64_t now_ms() {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch()).count());
}

const char* value(int argc, char** argv, const char* flag) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], flag) == 0) return argv[i + 1];
  return nullptr;
}

bool has(int argc, char** argv, const char* flag) {
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], flag) == 0) return true;
  return false;
}

// SIGTERM (meson's timeout), SIGINT: the run's box goes, then the signal's default.
// (The roles end by themselves when the driver's pipes close.)
extern "C" void on_signal(int sig) {
  gencheck::unlink_current_box();
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && (std::strcmp(argv[1], "producer") == 0 || std::strcmp(argv[1], "owner") == 0))
    return gencheck::role_main(argc, argv);
  if (has(argc, argv, "--help")) {
    std::printf("usage: shmbox-gencheck [--seconds S] [--steps N] [--seed S] [--stop-at K] [--no-timed-kills] "
                "[--tolerate BUG,...] [--no-priority] [--keep-going] [--verbose]\n");
    return 0;
  }
  char exe[4096];
  const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return 2;
  ::signal(SIGTERM, on_signal);
  ::signal(SIGINT, on_signal);
  gencheck::run_options opt;
  opt.self.assign(exe, static_cast<std::size_t>(n));
  if (const char* v = value(argc, argv, "--steps")) opt.steps = static_cast<std::uint32_t>(std::strtoul(v, nullptr, 0));
  if (const char* v = value(argc, argv, "--stop-at")) opt.stop_at = static_cast<std::uint32_t>(std::strtoul(v, nullptr, 0));
  opt.timed_kills = !has(argc, argv, "--no-timed-kills");
  opt.verbose = has(argc, argv, "--verbose");
  if (const char* v = value(argc, argv, "--tolerate")) {
    std::string all = v;
    for (std::size_t at = 0; at <= all.size();) {
      const std::size_t comma = std::min(all.find(',', at), all.size());
      if (comma > at) opt.tolerate.insert(all.substr(at, comma - at));
      at = comma + 1;
    }
    for (const std::string& t : opt.tolerate)
      if (t != "quota-inheritance" && t != "priority-read-gate" &&
          t != "priority-sorting-delivered" && t != "priority-gap-order" && t != "phantom-abandon") {
        std::fprintf(stderr, "shmbox-gencheck: --tolerate: unknown '%s'\n", t.c_str());
        return 2;
      }
  }
  const char* seed_arg = value(argc, argv, "--seed");
  const char* seconds_arg = value(argc, argv, "--seconds");
  const std::uint64_t seconds = seconds_arg != nullptr ? std::strtoull(seconds_arg, nullptr, 0) : 60;
  if (opt.steps == 0) return 2;
  // Runs: the one --seed names, or new seeds (from the clock and pid) until the time is up.
  const std::uint64_t session = seed_arg != nullptr ? 0 : gencheck::mix(now_ms() ^ (std::uint64_t(::getpid()) << 32));
  std::string tolerated;
  for (const std::string& t : opt.tolerate) tolerated += (tolerated.empty() ? " --tolerate " : ",") + t;
  std::printf("# shmbox-gencheck: %s, %u steps per run%s%s\n",
              seed_arg != nullptr ? ("replay of seed " + std::string(seed_arg)).c_str()
                                  : (std::to_string(seconds) + " s of runs").c_str(),
              opt.steps, opt.timed_kills ? "" : ", crash points only (no timed kills)",
              tolerated.empty() ? "" : (", tolerating known bugs:" + tolerated.substr(11)).c_str());
  std::fflush(stdout);
  const bool no_priority = has(argc, argv, "--no-priority");
  const std::uint64_t start = now_ms();
  gencheck::run_totals all;
  std::uint64_t passed_over = 0;
  std::uint64_t runs = 0;
  int failures = 0;
  for (std::uint64_t i = 0;; ++i) {
    if (seed_arg == nullptr && now_ms() - start >= seconds * 1000) break;
    if (seed_arg != nullptr && i == 1) break;
    const std::uint64_t seed = seed_arg != nullptr ? std::strtoull(seed_arg, nullptr, 0) : gencheck::mix(session + i);
    const gencheck::config cfg = gencheck::make_config(seed);
    if (no_priority && cfg.priority && seed_arg == nullptr) {
      ++passed_over;
      continue;
    }
    std::printf("run %" PRIu64 ": seed 0x%016" PRIx64 ": %s\n", i, seed, cfg.describe().c_str());
    std::fflush(stdout);
    const std::uint64_t run_start = now_ms();
    const gencheck::run_result r = gencheck::run_one(cfg, opt);
    const double secs = static_cast<double>(now_ms() - run_start) / 1000.0;
    ++runs;
    const auto& t = r.totals;
    all.steps += t.steps;
    all.posts += t.posts;
    all.delivered += t.delivered;
    all.kills += t.kills;
    all.fault_kills += t.fault_kills;
    all.takeovers += t.takeovers;
    all.redelivered += t.redelivered;
    all.abandoned += t.abandoned;
    all.evicted += t.evicted;
    all.max_candidates = std::max(all.max_candidates, t.max_candidates);
    all.lazy_identity += t.lazy_identity;
    if (!r.ok) {
      ++failures;
      std::printf("FAIL seed 0x%016" PRIx64 " step %" PRIu64 ": %s\n", seed, r.failed_step, r.failure.c_str());
      std::printf("  replay: %s --seed 0x%016" PRIx64 " --steps %u%s%s --verbose\n", argv[0], seed, opt.steps,
                  opt.timed_kills ? "" : " --no-timed-kills", tolerated.c_str());
      std::fflush(stdout);
      if (seed_arg != nullptr || !has(argc, argv, "--keep-going")) break;
      continue;
    }
    std::printf("  ok in %.1f s: %" PRIu64 " steps, %" PRIu64 " posts, %" PRIu64 " delivered (%" PRIu64 " flagged), %" PRIu64
                " kills + %" PRIu64 " at crash points, %" PRIu64 " takeovers, %" PRIu64 " evicted, %" PRIu64
                " abandoned, up to %" PRIu64 " model states\n",
                secs, t.steps, t.posts, t.delivered, t.redelivered, t.kills, t.fault_kills, t.takeovers, t.evicted, t.abandoned,
                t.max_candidates);
    std::fflush(stdout);
  }
  std::printf("# %" PRIu64 " runs, %" PRIu64 " steps, %" PRIu64 " posts, %" PRIu64 " delivered (%" PRIu64
              " flagged), %" PRIu64 " kills + %" PRIu64 " at crash points, %" PRIu64 " takeovers, up to %" PRIu64
              " model states at once, %" PRIu64 " identity checks explained by a dead process's unfinished count; %s\n",
              runs, all.steps, all.posts, all.delivered, all.redelivered, all.kills, all.fault_kills, all.takeovers,
              all.max_candidates, all.lazy_identity,
              failures == 0 ? "every check held" : (std::to_string(failures) + " run(s) FAILED").c_str());
  if (passed_over != 0)
    std::printf("# %" PRIu64 " seed(s) whose box would have been a priority box passed over (--no-priority)\n", passed_over);
  return failures == 0 ? 0 : 1;
}
