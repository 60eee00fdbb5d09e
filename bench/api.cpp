// bench/api.cpp - what the C API (include/shmbox/shmbox.h) and the Python
// package cost per message next to the C++ API, in the same run.
//
// One process, one box (capacity 256, 64-byte messages, reject): a round
// posts 256 messages and receives them, one call each, checking every
// message's sequence number; ns per message = (post + receive) / messages.
// No second process, so what is measured is the API layers, not the
// cache-line traffic between cores (bench/throughput.cpp measures that).
// Mechanisms, interleaved repetition by repetition (order alternating):
//   c++           Producer::post + Owner::receive(message&) (copies into a std::string)
//   c++-in-place  Producer::post + Owner::receive_in_place + memcpy: what the C layer does
//   c             shmbox_post + shmbox_receive, from C (bench/api_loop.c, compiled as C)
//   python        the Python package's Producer.post + Owner.receive (bench/api_python.py),
//                 when python3 and python/shmbox are there; else a skip row
//   spin-ring     the benchmarks' spin ring (bench/spin_ring.hpp), push + pop, the
//                 same rounds: the floor, a path with nothing but the hand-off (no
//                 lengths, counters, owner, crash records or handle checks)
// Rows (rows.hpp), group api-64: metric post-recv-ns per mechanism, and
// ratios c / c++-in-place, c / c++, python / c and c++ / spin-ring
// (mechanism ratio-..., unit x). The last is what a busy round trip pays
// twice per round, on its critical path (docs/benchmarks.md).
// Exit 1 when a message is lost, refused or out of order.
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "api_loop.h"
#include "rows.hpp"
#include "spin_ring.hpp"
#include "shmbox/shmbox.hpp"

namespace {

using clock_type = std::chrono::steady_clock;
constexpr unsigned kBatch = 256;
constexpr unsigned kSize = 64;

// Times `rounds` rounds of kBatch 64-byte messages, each carrying its
// sequence number in its first 8 bytes: send(msg) sends one (false: it was
// refused), then recv(seq) takes one each and reads its number (false:
// nothing there, or the wrong size). ns per message; -1 when a message is
// refused, missing or out of order.
template <class Send, class Recv>
double timed_rounds(long rounds, Send&& send, Recv&& recv) {
  unsigned char msg[kSize];
  std::memset(msg, 'c', sizeof msg);
  std::uint64_t next = 0, want = 0;
  const auto t0 = clock_type::now();
  for (long r = 0; r < rounds; ++r) {
    for (unsigned i = 0; i < kBatch; ++i) {
      std::memcpy(msg, &next, sizeof next);
      ++next;
      if (!send(static_cast<const unsigned char*>(msg))) return -1;
    }
    for (unsigned i = 0; i < kBatch; ++i) {
      std::uint64_t seq = 0;
      if (!recv(seq) || seq != want++) return -1;
    }
  }
  const double ns = static_cast<double>(std::chrono::duration_cast<std::chrono::nanoseconds>(clock_type::now() - t0).count());
  return ns / static_cast<double>(rounds * kBatch);
}

double cpp_post_recv(const std::string& name, long rounds, bool in_place) {
  auto p = shmbox::Producer::attach(name);
  auto o = shmbox::Owner::acquire(name);
  if (!p || !o) return -1;
  char buf[4096];
  shmbox::message m;
  return timed_rounds(
      rounds, [&](const unsigned char* msg) { return p->post(msg, kSize) == shmbox::post_status::stored; },
      [&](std::uint64_t& seq) {
        if (in_place) {
          std::size_t got = 0;
          const auto s = o->receive_in_place(
              [&](const shmbox::message_view& v) {
                std::memcpy(buf, v.data.data(), v.data.size());
                got = v.data.size();
              },
              {.max = 1, .timeout = std::chrono::nanoseconds(0)});
          if (s != shmbox::recv_status::ok || got != kSize) return false;
          std::memcpy(&seq, buf, sizeof seq);
          return true;
        }
        if (o->receive(m, {.timeout = std::chrono::nanoseconds(0)}) != shmbox::recv_status::ok || m.data.size() != kSize)
          return false;
        std::memcpy(&seq, m.data.data(), sizeof seq);
        return true;
      });
}

// The same rounds through a spin ring of kBatch slots: a producer and a
// consumer handle in this process (a round leaves the ring empty, so a push
// never waits).
double spin_push_pop(const std::string& name, long rounds) {
  try {
    shmbench::SpinRing::remove(name);
    auto tx = shmbench::SpinRing::create(name, kBatch);
    auto rx = shmbench::SpinRing::open(name);
    shmbench::SpinRing::remove(name);
    unsigned char buf[kSize];
    return timed_rounds(
        rounds,
        [&](const unsigned char* msg) {
          tx.push(msg);
          return true;
        },
        [&](std::uint64_t& seq) {
          rx.pop(buf);
          std::memcpy(&seq, buf, sizeof seq);
          return true;
        });
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench-api: spin ring: %s\n", e.what());
    shmbench::SpinRing::remove(name);
    return -1;
  }
}

// The Python side: bench/api_python.py NAME ROUNDS prints ns per message.
// Returns -1 when it fails, -2 when Python cannot run it here (skip).
double python_post_recv(const std::string& script, const std::string& name, long rounds, std::string& why) {
  const std::string cmd = "python3 '" + script + "' '" + name + "' " + std::to_string(rounds) + " 2>&1";
  FILE* f = ::popen(cmd.c_str(), "r");
  if (f == nullptr) {
    why = "popen failed";
    return -2;
  }
  std::string out;
  char line[512];
  while (std::fgets(line, sizeof line, f) != nullptr) out += line;
  const int st = ::pclose(f);
  if (WIFEXITED(st) && WEXITSTATUS(st) == 77) {
    why = out.substr(0, out.find('\n'));
    return -2;
  }
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    std::fprintf(stderr, "bench-api: python: %s", out.c_str());
    return -1;
  }
  return std::atof(out.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  int reps = 7;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
      reps = 3;
    } else if (std::strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
      reps = std::atoi(argv[++i]);
    }
  }
  const long rounds = quick ? 20 : 2000;           // 5 120 or 512 000 messages per run
  const long py_rounds = quick ? 4 : 200;          // Python is ~100x slower: fewer messages
  const std::string name = "bench-api-" + std::to_string(::getpid());
  (void)shmbox::Box::remove(name);
  auto box = shmbox::Box::create(name, {.capacity = kBatch, .slot_size = kSize});
  if (!box) {
    std::fprintf(stderr, "bench-api: %s\n", shmbox::explain(box.error()).c_str());
    return 1;
  }
  const char* src = std::getenv("SHMBOX_SOURCE_ROOT");
  const std::string script = std::string(src != nullptr ? src : ".") + "/bench/api_python.py";
  std::vector<double> cpp, cpp_in_place, c, py, spin, r_c_inplace, r_c_cpp, r_py_c, r_cpp_spin;
  std::string py_skip;
  bool failed = false;
  for (int r = 0; r < reps && !failed; ++r) {
    double a = 0, b = 0, x = 0, q = 0;
    if (r % 2 == 0) {
      a = cpp_post_recv(name, rounds, false);
      b = cpp_post_recv(name, rounds, true);
      x = shmbench_c_post_recv(name.c_str(), rounds, kBatch, kSize);
      q = spin_push_pop(name + "-spin", rounds);
    } else {
      q = spin_push_pop(name + "-spin", rounds);
      x = shmbench_c_post_recv(name.c_str(), rounds, kBatch, kSize);
      b = cpp_post_recv(name, rounds, true);
      a = cpp_post_recv(name, rounds, false);
    }
    if (a < 0 || b < 0 || x < 0 || q < 0) {
      std::fprintf(stderr, "bench-api: a message was lost, refused or out of order\n");
      failed = true;
      break;
    }
    cpp.push_back(a);
    cpp_in_place.push_back(b);
    c.push_back(x);
    r_c_inplace.push_back(x / b);
    r_c_cpp.push_back(x / a);
    spin.push_back(q);
    r_cpp_spin.push_back(a / q);
    if (py_skip.empty()) {
      const double p = python_post_recv(script, name, py_rounds, py_skip);
      if (p == -1) {
        failed = true;
        break;
      }
      if (p > 0) {
        py.push_back(p);
        r_py_c.push_back(p / x);
      }
    }
  }
  (void)shmbox::Box::remove(name);
  if (failed) return 1;
  shmbench::Results res;
  const auto row = [&](const char* mech, const char* metric, const std::vector<double>& v, const char* unit, const char* note) {
    for (const double x : v) res.add("api-64", mech, metric, unit, x, note);
  };
  row("c++", "post-recv-ns", cpp, "ns", "Producer::post + Owner::receive(message&)");
  row("c++-in-place", "post-recv-ns", cpp_in_place, "ns", "Producer::post + receive_in_place + memcpy");
  row("c", "post-recv-ns", c, "ns", "shmbox_post + shmbox_receive (C)");
  row("ratio-c-in-place", "ratio", r_c_inplace, "x", "c / c++-in-place: the C layer alone");
  row("ratio-c-cpp", "ratio", r_c_cpp, "x", "c / c++");
  row("spin-ring", "post-recv-ns", spin, "ns", "the benchmarks' spin ring, push + pop: the floor");
  row("ratio-cpp-spin-ring", "ratio", r_cpp_spin, "x", "c++ / spin-ring: the library's path against the bare hand-off");
  row("python", "post-recv-ns", py, "ns", "Producer.post + Owner.receive (ctypes)");
  row("ratio-python-c", "ratio", r_py_c, "x", "python / c");
  if (py.empty()) res.skip("api-64", "python", py_skip.empty() ? "not measured" : py_skip);
  res.print();
  std::fprintf(stderr, "bench-api: c++ %.1f ns, c++ in place %.1f ns, c %.1f ns, spin ring %.1f ns per message (medians of %d)\n",
               shmbench::summarize(cpp).median, shmbench::summarize(cpp_in_place).median, shmbench::summarize(c).median,
               shmbench::summarize(spin).median, reps);
  return 0;
}
