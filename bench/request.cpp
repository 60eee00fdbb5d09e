// bench/request.cpp - shmbox-bench-request: the request/reply round trip
// (docs/request-reply.md) against the same thing built by hand from two boxes.
//
// METHOD
// * Two processes: the service (forked; owns the service box) and the
//   requester (this process). One request in flight at a time, 64 bytes each
//   way; a round trip is steady_clock from before the request's post until
//   the requester holds the reply (t1 - t0), --count of them (default 20000)
//   after --warmup (2000) unmeasured ones; p50, p99, p99.9 per repetition
//   (nearest rank), --reps repetitions (default 5; --quick: 1 and 2000
//   round trips), the median of each over the repetitions with min and max.
// * shmbox-request: Requester::call(request, reply, 1 s) against a service
//   that loops Owner::receive(m, 1 s) (copy) and Owner::reply(m, reply).
// * two-boxes: what a user writes without it: the requester posts its own
//   correlation number (8 bytes) at the head of the request into the service
//   box and waits on a reply box of its own (Owner::receive); the service
//   receives, posts the reply with the same number into the reply box (a
//   Producer attached once), and the requester checks the number.
// * Both use the boxes' default adaptive wait (options::spin = 50 us, then
//   the futex), the same capacities (service 1024, replies 64) and slot
//   sizes, and alternate within each repetition (two-boxes, then
//   shmbox-request), so both see the same phase of the machine. ratio-p50 /
//   ratio-p99 (unit x): shmbox-request's over two-boxes' of the same
//   repetition. No CPU pinning (2-core machines; see bench/rtt.cpp).
// Rows on stdout (rows.hpp: group request-rtt), a table on stderr.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
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

using namespace std::chrono_literals;
constexpr std::size_t kSize = 64;

// The service: `mode` 0 answers requests (Owner::reply), 1 posts into `reply_box` by hand.
[[noreturn]] void service(const std::string& box, int mode, const std::string& reply_box, int ready_fd) {
  auto o = shmbox::Owner::acquire(box);
  std::optional<shmbox::Producer> back;
  if (o && mode == 1) {
    if (auto p = shmbox::Producer::attach(reply_box)) back.emplace(std::move(*p));
  }
  const char ok = (o && (mode == 0 || back)) ? '1' : '0';
  (void)!::write(ready_fd, &ok, 1);
  ::close(ready_fd);
  if (ok != '1') ::_exit(1);
  shmbox::message m;
  std::string reply(kSize, 'r');
  for (;;) {
    const auto st = o->receive(m, {.timeout = 5s});
    if (st != shmbox::recv_status::ok) ::_exit(st == shmbox::recv_status::timeout ? 0 : 1);
    if (mode == 0) {
      if (o->reply(m, reply) != shmbox::reply_status::ok) ::_exit(2);
    } else {
      std::memcpy(reply.data(), m.data.data(), 8);  // the correlation number back
      if (back->post(reply) != shmbox::post_status::stored) ::_exit(2);
    }
  }
}

pid_t start_service(const std::string& box, int mode, const std::string& reply_box) {
  int p[2];
  if (::pipe(p) != 0) return -1;
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(p[0]);
    service(box, mode, reply_box, p[1]);
  }
  ::close(p[1]);
  char c = 0;
  const bool ok = ::read(p[0], &c, 1) == 1 && c == '1';
  ::close(p[0]);
  if (!ok && pid > 0) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    return -1;
  }
  return pid;
}

void stop(pid_t pid) {
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
}

// One repetition of one mechanism: its samples in us; empty on failure (said on stderr).
std::vector<double> run(int mode, int warmup, int count) {
  const std::string svc = "shmbench-request-" + std::to_string(::getpid()) + "-" + std::to_string(mode);
  const std::string rbox = svc + "-replies";
  (void)shmbox::Box::remove(svc);
  (void)shmbox::Box::remove(rbox);
  std::vector<double> samples;
  auto box = shmbox::Box::create(svc, {.capacity = 1024, .slot_size = kSize + 64});
  if (!box) {
    std::fprintf(stderr, "create %s: %s\n", svc.c_str(), shmbox::explain(box.error()).c_str());
    return samples;
  }
  if (mode == 0) {
    pid_t pid = start_service(svc, 0, {});
    auto r = shmbox::Requester::attach(svc, {.max_outstanding = 64, .max_reply_size = kSize + 64});
    if (pid < 0 || !r) {
      std::fprintf(stderr, "request: service or requester failed\n");
      if (pid > 0) stop(pid);
      (void)shmbox::Box::remove(svc);
      return samples;
    }
    std::string req(kSize, 'q'), out;
    samples.reserve(static_cast<std::size_t>(count));
    for (int i = 0; i < warmup + count; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      if (r->call(req, out, 1s) != shmbox::reply_status::ok || out.size() != kSize) {
        std::fprintf(stderr, "shmbox-request: round trip %d failed\n", i);
        samples.clear();
        break;
      }
      const auto t1 = std::chrono::steady_clock::now();
      if (i >= warmup) samples.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    }
    stop(pid);
  } else {
    auto rb = shmbox::Box::create(rbox, {.capacity = 64, .slot_size = kSize + 64});
    auto mine = rb ? shmbox::Owner::acquire(*rb) : shmbox::result<shmbox::Owner>(rb.error());
    pid_t pid = mine ? start_service(svc, 1, rbox) : -1;
    auto p = shmbox::Producer::attach(*box);
    if (pid < 0 || !p) {
      std::fprintf(stderr, "two-boxes: service or producer failed\n");
      if (pid > 0) stop(pid);
      (void)shmbox::Box::remove(svc);
      (void)shmbox::Box::remove(rbox);
      return samples;
    }
    std::string req(kSize, 'q');
    shmbox::message m;
    samples.reserve(static_cast<std::size_t>(count));
    for (std::uint64_t i = 0; i < static_cast<std::uint64_t>(warmup + count); ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      std::memcpy(req.data(), &i, 8);
      std::uint64_t back = ~i;
      if (p->post(req) != shmbox::post_status::stored || mine->receive(m, {.timeout = 1s}) != shmbox::recv_status::ok ||
          m.data.size() != kSize || (std::memcpy(&back, m.data.data(), 8), back != i)) {
        std::fprintf(stderr, "two-boxes: round trip %llu failed\n", static_cast<unsigned long long>(i));
        samples.clear();
        break;
      }
      const auto t1 = std::chrono::steady_clock::now();
      if (i >= static_cast<std::uint64_t>(warmup))
        samples.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    }
    stop(pid);
  }
  (void)shmbox::Box::remove(svc);
  (void)shmbox::Box::remove(rbox);
  return samples;
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 5, count = 20000, warmup = 2000;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick") {
      reps = 1;
      count = 2000;
      warmup = 200;
    } else if (a == "--reps" && i + 1 < argc) {
      reps = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--count" && i + 1 < argc) {
      count = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--warmup" && i + 1 < argc) {
      warmup = std::max(0, std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr,
                   "usage: shmbox-bench-request [--quick] [--reps R] [--count N] [--warmup W]\n"
                   "  the request/reply round trip (Requester::call, Owner::reply) against two boxes by hand,\n"
                   "  64 B each way, one in flight. Rows on stdout (group request-rtt).\n");
      return 2;
    }
  }
  static const char* const kNames[2] = {"shmbox-request", "two-boxes"};
  std::vector<double> pct[2][3], ratio50, ratio99;
  for (int rep = 0; rep < reps; ++rep) {
    std::array<double, 3> got[2];
    for (int mode : {1, 0}) {
      std::vector<double> s = run(mode, warmup, count);
      if (s.empty()) {
        shmbench::print_skip("request-rtt", kNames[mode], "a round trip failed (see stderr)");
        return 1;
      }
      got[mode] = shmbench::percentiles(s);
      for (int k = 0; k < 3; ++k) pct[mode][k].push_back(got[mode][k]);
    }
    ratio50.push_back(got[0][0] / got[1][0]);
    ratio99.push_back(got[0][1] / got[1][1]);
  }
  const std::string note = "64 B each way, one in flight, " + std::to_string(count) + " round trips x " +
                           std::to_string(reps) + " reps; adaptive wait (spin 50 us, then futex)";
  for (int mode : {1, 0}) {
    for (int k = 0; k < 3; ++k) {
      const auto s = shmbench::summarize(pct[mode][k]);
      shmbench::print_row("request-rtt", kNames[mode], shmbench::kPercentileMetric[k], s.median, s.min, s.max, "us", note);
    }
  }
  const auto r50 = shmbench::summarize(ratio50), r99 = shmbench::summarize(ratio99);
  shmbench::print_row("request-rtt", "shmbox-request", "ratio-p50", r50.median, r50.min, r50.max, "x",
                      "over two-boxes of the same repetition");
  shmbench::print_row("request-rtt", "shmbox-request", "ratio-p99", r99.median, r99.min, r99.max, "x",
                      "over two-boxes of the same repetition");
  std::fprintf(stderr, "request-rtt p50/p99 us: shmbox-request %.2f/%.2f, two-boxes %.2f/%.2f; ratio p50 %.2fx p99 %.2fx\n",
               shmbench::summarize(pct[0][0]).median, shmbench::summarize(pct[0][1]).median,
               shmbench::summarize(pct[1][0]).median, shmbench::summarize(pct[1][1]).median, r50.median, r99.median);
  return 0;
}
