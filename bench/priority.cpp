// bench/priority.cpp - what a priority box (options::priority, ring.hpp
// PRIORITY BOXES) costs against a plain FIFO box of the same capacity, in
// the same run:
//   fill    a producer process posts `capacity` 64-byte messages into the
//           empty box (random priorities in a priority box): ns per post
//   drain   the owner then receives them all (receive_batch, 64 per call):
//           ns per message; in a priority box this is the move into the
//           store plus the heap's O(log n) pop, with n = capacity
//   stream  a producer process posts 8 x capacity messages while the owner
//           receives them: messages per second end to end
// at capacities 1 Ki and 64 Ki. Rows (rows.hpp), group prio-<capacity>:
// mechanisms fifo and priority with metrics post-ns, drain-ns, stream-mps,
// and priority/fifo ratios (mechanism ratio). Exit 1 when a message is lost
// or out of order (the drain of a priority box is checked sorted).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "rows.hpp"
#include "shmbox/shmbox.hpp"

namespace {

using clock_type = std::chrono::steady_clock;

double ns_since(clock_type::time_point t0) {
  return static_cast<double>(std::chrono::duration_cast<std::chrono::nanoseconds>(clock_type::now() - t0).count());
}

// The producer process: posts `n` messages (a block box: never refused),
// writes ns per post to `fd`, and exits.
[[noreturn]] void producer(const std::string& name, std::uint64_t n, bool priority, int fd) {
  auto p = shmbox::Producer::attach(name);
  if (!p) std::_Exit(3);
  std::mt19937_64 rng(42);
  char msg[64] = {};
  const auto t0 = clock_type::now();
  for (std::uint64_t i = 0; i < n; ++i) {
    const std::int64_t prio = priority ? static_cast<std::int64_t>(rng() % 1'000'000) : 0;
    std::memcpy(msg, &prio, sizeof prio);
    std::memcpy(msg + 8, &i, sizeof i);
    if (!shmbox::is_stored(p->post(std::string_view(msg, sizeof msg), {.timeout = std::chrono::seconds(30), .priority = prio})))
      std::_Exit(4);
  }
  const double per = ns_since(t0) / static_cast<double>(n);
  [[maybe_unused]] const ssize_t w = ::write(fd, &per, sizeof per);
  std::_Exit(0);
}

struct one_run {
  double post_ns = 0, drain_ns = 0, stream_mps = 0;
  bool ok = true;
};

one_run run_once(std::uint32_t capacity, bool priority) {
  one_run r;
  const std::string name = "shmbench-prio-" + std::to_string(::getpid());
  (void)shmbox::Box::remove(name);
  auto box = shmbox::Box::create(name, {.capacity = capacity, .slot_size = 64, .overflow = shmbox::policy::block,
                                        .block_timeout = std::chrono::seconds(30), .priority = priority});
  if (!box) {
    std::fprintf(stderr, "priority bench: %s\n", shmbox::explain(box.error()).c_str());
    std::exit(1);
  }
  auto owner = shmbox::Owner::acquire(*box);
  if (!owner) std::exit(1);
  auto start_producer = [&](std::uint64_t n, int& fd) {
    int pipefd[2];
    if (::pipe(pipefd) != 0) std::exit(1);
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(pipefd[0]);
      producer(name, n, priority, pipefd[1]);
    }
    ::close(pipefd[1]);
    fd = pipefd[0];
    return pid;
  };
  auto finish_producer = [&](pid_t pid, int fd) {
    double per = 0;
    const bool got = ::read(fd, &per, sizeof per) == sizeof per;
    ::close(fd);
    int status = 0;
    ::waitpid(pid, &status, 0);
    if (!got || !WIFEXITED(status) || WEXITSTATUS(status) != 0) r.ok = false;
    return per;
  };
  // fill, then drain
  int fd = -1;
  pid_t pid = start_producer(capacity, fd);
  r.post_ns = finish_producer(pid, fd);
  std::vector<shmbox::message> got;
  got.reserve(capacity);
  const auto t0 = clock_type::now();
  while (got.size() < capacity && owner->receive_batch(got, {.max = 64, .timeout = std::chrono::seconds(0)}) == shmbox::recv_status::ok) {
  }
  r.drain_ns = ns_since(t0) / capacity;
  if (got.size() != capacity) r.ok = false;
  std::int64_t last = INT64_MIN;
  for (const auto& m : got) {
    std::int64_t prio = 0;
    std::memcpy(&prio, m.data.data(), sizeof prio);
    if (priority && prio < last) r.ok = false;
    last = prio;
  }
  // stream
  const std::uint64_t n = std::uint64_t{8} * capacity;
  pid = start_producer(n, fd);
  std::uint64_t received = 0;
  std::vector<shmbox::message> batch;
  const auto s0 = clock_type::now();
  while (received < n) {
    batch.clear();
    const auto st = owner->receive_batch(batch, {.max = 64, .timeout = std::chrono::seconds(10)});
    if (st != shmbox::recv_status::ok) {
      r.ok = false;
      break;
    }
    received += batch.size();
  }
  r.stream_mps = static_cast<double>(received) / (ns_since(s0) / 1e9);
  (void)finish_producer(pid, fd);
  (void)shmbox::Box::remove(name);
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 5;
  bool quick = false;
  std::vector<std::uint32_t> capacities = {1024, 65536};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick") {
      quick = true;
    } else if (a == "--reps" && i + 1 < argc) {
      reps = std::max(1, std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr,
                   "usage: shmbox-bench-priority [--quick] [--reps R]\n"
                   "  a priority box against a FIFO box: fill (ns/post), drain (ns/message), stream (msg/s),\n"
                   "  capacities 1024 and 65536 (--quick: 1 rep). Rows on stdout.\n");
      return 2;
    }
  }
  if (quick) reps = 1;
  bool ok = true;
  shmbench::Results res;
  const char* metric[3] = {"post-ns", "drain-ns", "stream-mps"};
  const char* unit[3] = {"ns", "ns", "msg/s"};
  for (const std::uint32_t cap : capacities) {
    const std::string group = "prio-" + (cap % 1024 == 0 ? std::to_string(cap / 1024) + "k" : std::to_string(cap));
    const std::string note = "capacity " + std::to_string(cap) + ", 64 B, " + std::to_string(reps) + " reps";
    for (int rep = 0; rep < reps; ++rep) {
      double v[2][3];
      for (int k = 0; k < 2; ++k) {  // interleaved: fifo, then priority, each repetition
        const one_run r = run_once(cap, k == 1);
        ok &= r.ok;
        v[k][0] = r.post_ns, v[k][1] = r.drain_ns, v[k][2] = r.stream_mps;
        for (int m = 0; m < 3; ++m) res.add(group, k == 0 ? "fifo" : "priority", metric[m], unit[m], v[k][m], note);
      }
      for (int m = 0; m < 3; ++m)
        res.add(group, "ratio", metric[m], "x", v[1][m] / v[0][m], "priority / fifo, same repetition");
    }
  }
  res.print();
  if (!ok) std::fprintf(stderr, "priority bench: a run lost, refused or misordered messages\n");
  return ok ? 0 : 1;
}
