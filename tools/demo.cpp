// tools/demo.cpp - shmbox-demo: the Quick start's main job.
//
// Three producer processes flood a small drop-oldest box faster than a slow
// owner process drains it; a second process waits as the owner's heir; the
// owner is killed with SIGKILL mid-stream; the heir takes the box over at once
// (it watches the owner through a pidfd) with the messages intact; `shmbox
// stat` then shows that every posted message is accounted for (delivered,
// dropped, or still in the box). Every process is a separate program (this binary
// re-executed in another role).
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "shmbox/shmbox.hpp"

namespace {

constexpr int kProducers = 3;
constexpr std::uint64_t kPerProducer = 20'000;

std::string self_exe() {
  char buf[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "shmbox-demo";
  buf[n] = '\0';
  return buf;
}

std::string sibling(const std::string& name) {
  std::string exe = self_exe();
  return exe.substr(0, exe.rfind('/') + 1) + name;
}

struct proc {
  pid_t pid = -1;
  int out = -1;  // its stdout
  std::string buf;

  bool read_line(std::string& line, int timeout_ms) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    for (;;) {
      if (const auto nl = buf.find('\n'); nl != std::string::npos) {
        line = buf.substr(0, nl);
        buf.erase(0, nl + 1);
        return true;
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
      if (left <= 0) return false;
      pollfd p{out, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left)) <= 0) continue;
      char tmp[1024];
      const ssize_t n = ::read(out, tmp, sizeof tmp);
      if (n <= 0) return false;
      buf.append(tmp, static_cast<std::size_t>(n));
    }
  }
  int wait() {
    int st = 0;
    ::waitpid(pid, &st, 0);
    if (out >= 0) ::close(out);
    out = -1;
    pid = -1;
    return st;
  }
};

proc spawn(const std::vector<std::string>& args) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) std::exit(1);
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  proc p;
  p.pid = ::fork();
  if (p.pid == 0) {
    ::dup2(fds[1], 1);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  ::close(fds[1]);
  p.out = fds[0];
  return p;
}

// ---- roles ------------------------------------------------------------------

int run_producer(const std::string& name, int id) {
  auto p = shmbox::Producer::attach(name);
  if (!p) {
    std::fprintf(stderr, "producer %d: %s\n", id, shmbox::explain(p.error()).c_str());
    return 1;
  }
  std::uint64_t evicting = 0, evictions = 0;  // posts that evicted; messages they evicted
  char msg[64];
  for (std::uint64_t seq = 0; seq < kPerProducer; ++seq) {
    const int n = std::snprintf(msg, sizeof msg, "producer %d message %" PRIu64, id, seq);
    const shmbox::post_status st = p->post(msg, static_cast<std::size_t>(n));
    evictions += p->last_evicted();
    if (st == shmbox::post_status::stored_evicted) ++evicting;
    else if (st != shmbox::post_status::stored) {
      std::fprintf(stderr, "producer %d: post returned %s\n", id, std::string(shmbox::to_string(st)).c_str());
      return 1;
    }
    // Bursts of 50 every 5 ms: ~10 000 messages/s per producer, ~2 s in all,
    // still about four times what the slow owner can take.
    if (seq % 50 == 49) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::printf("%d %" PRIu64 " %" PRIu64 "\n", id, evicting, evictions);
  return 0;
}

std::int64_t mono_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return std::int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

// A slow owner: takes a few messages, "works" on them, reports progress. As
// an heir, it first waits until the box is handed to it.
int run_owner(const std::string& name, const char* label) {
  shmbox::result<shmbox::Owner> o = shmbox::errc::not_owner;
  if (std::strcmp(label, "heir") == 0) {
    auto heir = shmbox::Heir::enlist(name, "standby-B");
    if (!heir) {
      std::printf("error %s\n", shmbox::explain(heir.error()).c_str());
      return 1;
    }
    std::printf("enlisted\n");
    std::fflush(stdout);
    o = heir->await_transfer(std::chrono::seconds(60));
  } else {
    o = shmbox::Owner::acquire(name);
  }
  if (!o) {
    std::printf("error %s\n", shmbox::explain(o.error()).c_str());
    return 1;
  }
  const shmbox::transfer_record& t = o->transfer();
  std::printf("owned %" PRIu64 " at %" PRId64 " reason %s from %u data %s\n", o->epoch(), mono_ns(),
              std::string(shmbox::to_string(t.reason)).c_str(), t.from_pid, t.data.c_str());
  std::fflush(stdout);
  std::uint64_t got = 0, redelivered = 0;
  std::vector<shmbox::message> batch;
  for (;;) {
    batch.clear();
    const auto st = o->receive_batch(batch, {.max = 4, .timeout = std::chrono::milliseconds(300)});
    if (st == shmbox::recv_status::timeout) break;  // the producers are done and the box is empty
    if (st != shmbox::recv_status::ok) {
      std::printf("error %s\n", shmbox::explain(o->last_error()).c_str());
      return 1;
    }
    for (const auto& m : batch) redelivered += m.redelivered ? 1 : 0;
    got += batch.size();
    std::printf("progress %" PRIu64 " %" PRIu64 "\n", got, redelivered);
    std::fflush(stdout);
    std::this_thread::sleep_for(std::chrono::microseconds(400));  // the owner's "work"
  }
  std::printf("done %" PRIu64 " %" PRIu64 "\n", got, redelivered);
  return 0;
}

// ---- the story -----------------------------------------------------------------

int run_demo() {
  const std::string name = "demo-" + std::to_string(::getpid());
  (void)shmbox::Box::remove(name);  // a stale box of a previous run with this pid
  shmbox::options opts;
  opts.capacity = 32;
  opts.slot_size = 64;
  opts.overflow = shmbox::policy::drop_oldest;
  auto box = shmbox::Box::create(name, opts);
  if (!box) {
    std::fprintf(stderr, "shmbox-demo: %s\n", shmbox::explain(box.error()).c_str());
    return 1;
  }
  struct cleanup {
    std::string n;
    ~cleanup() { (void)shmbox::Box::remove(n); }
  } remove_at_exit{name};

  const std::string exe = self_exe();
  std::printf("== shmbox demo ==\n");
  std::printf("box '%s': capacity %u messages of up to %u bytes, policy drop-oldest (/dev/shm/shmbox.%s)\n\n",
              name.c_str(), opts.capacity, opts.slot_size, name.c_str());

  proc owner_a = spawn({exe, "owner", name, "A"});
  std::string line;
  if (!owner_a.read_line(line, 10'000) || line.rfind("owned", 0) != 0) {
    std::fprintf(stderr, "shmbox-demo: owner A did not start: %s\n", line.c_str());
    return 1;
  }
  std::printf("owner A (pid %d) owns the box (epoch 1); it takes 4 messages every ~0.5 ms\n", owner_a.pid);
  proc owner_b = spawn({exe, "owner", name, "heir"});
  if (!owner_b.read_line(line, 10'000) || line != "enlisted") {
    std::fprintf(stderr, "shmbox-demo: heir B did not enlist: %s\n", line.c_str());
    return 1;
  }
  std::printf("process B (pid %d) waits as A's heir (heir data 'standby-B'), watching A through a pidfd\n", owner_b.pid);

  std::vector<proc> producers;
  for (int id = 0; id < kProducers; ++id) producers.push_back(spawn({exe, "produce", name, std::to_string(id)}));
  std::printf("%d producer processes each post %" PRIu64 " messages in bursts, ~4x faster than the owner drains\n",
              kProducers, kPerProducer);

  // Let owner A work for a while, then kill it without warning.
  std::uint64_t a_got = 0;
  while (owner_a.read_line(line, 10'000)) {
    std::uint64_t got = 0, again = 0;
    if (std::sscanf(line.c_str(), "progress %" SCNu64 " %" SCNu64, &got, &again) == 2) a_got = got;
    if (a_got >= 2000) break;
  }
  const std::int64_t t_kill = mono_ns();
  ::kill(owner_a.pid, SIGKILL);
  const pid_t a_pid = owner_a.pid;
  owner_a.wait();
  std::printf("\nowner A (pid %d) killed with SIGKILL after receiving %" PRIu64 " messages\n", a_pid, a_got);
  if (!owner_b.read_line(line, 10'000) || line.rfind("owned", 0) != 0) {
    std::fprintf(stderr, "shmbox-demo: heir B did not take over: %s\n", line.c_str());
    return 1;
  }
  std::uint64_t epoch = 0;
  std::int64_t t_owned = 0;
  char reason[32] = {}, data[80] = {};
  unsigned from = 0;
  std::sscanf(line.c_str(), "owned %" SCNu64 " at %" SCNd64 " reason %31s from %u data %79s", &epoch, &t_owned, reason,
              &from, data);
  std::printf("heir B (pid %d) took the box over %.0f us later: epoch %" PRIu64 ", reason %s, from pid %u, data '%s'\n",
              owner_b.pid, static_cast<double>(t_owned - t_kill) / 1000.0, epoch, reason, from, data);
  shmbox::box_info mid = shmbox::info(*box);
  std::printf("  the box kept its %" PRIu64 "/%u messages and its policy; producers never stopped (%" PRIu64
              " dropped so far)\n\n",
              mid.depth, mid.capacity, mid.count.dropped_oldest);

  std::uint64_t evicting_posts = 0, evicted_by_posts = 0;
  for (auto& p : producers) {
    if (p.read_line(line, 60'000)) {
      int id = 0;
      std::uint64_t posts = 0, ev = 0;
      if (std::sscanf(line.c_str(), "%d %" SCNu64 " %" SCNu64, &id, &posts, &ev) == 3) {
        evicting_posts += posts;
        evicted_by_posts += ev;
      }
    }
    const int st = p.wait();
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      std::fprintf(stderr, "shmbox-demo: a producer failed\n");
      return 1;
    }
  }
  // One post may evict more than one message (another producer took the
  // slot it freed): the producers' counts of evicted messages
  // (Producer::last_evicted) add up to the box's dropped_oldest counter.
  std::printf("all producers finished; %" PRIu64 " of their posts evicted the oldest messages, %" PRIu64
              " messages in all (dropped_oldest: %" PRIu64 ")\n",
              evicting_posts, evicted_by_posts, box->read_counters().dropped_oldest);
  std::uint64_t b_got = 0, b_again = 0;
  while (owner_b.read_line(line, 30'000)) {
    if (std::sscanf(line.c_str(), "done %" SCNu64 " %" SCNu64, &b_got, &b_again) == 2) break;
  }
  owner_b.wait();
  std::printf("heir B received %" PRIu64 " messages, %" PRIu64 " of them flagged redelivered%s\n\n", b_got, b_again,
              b_again != 0 ? " (read by A, never committed: delivered again, not lost)"
                           : " (A died between two receives: nothing was in flight)");

  std::printf("$ shmbox stat %s\n", name.c_str());
  std::fflush(stdout);
  const std::string cli = sibling("shmbox");
  proc stat = spawn({cli, "stat", name});
  while (stat.read_line(line, 10'000)) std::printf("%s\n", line.c_str());
  stat.wait();

  const shmbox::counters c = box->read_counters();
  const std::uint64_t depth = shmbox::info(*box).depth;
  const std::uint64_t accounted =
      c.delivered + c.rejected + c.too_large + c.timeouts + c.dropped_newest + c.dropped_oldest + c.filtered + c.abandoned + c.aborted + depth;
  std::printf("\nposted %" PRIu64 " = delivered %" PRIu64 " + dropped %" PRIu64 " + abandoned %" PRIu64
              " + in the box %" PRIu64 "  -> %s\n",
              c.posted, c.delivered, c.dropped_oldest + c.dropped_newest, c.abandoned, depth,
              c.posted == accounted && c.posted == kProducers * kPerProducer ? "every message accounted for"
                                                                              : "MISMATCH");
  return c.posted == accounted ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 4 && std::strcmp(argv[1], "produce") == 0) return run_producer(argv[2], std::atoi(argv[3]));
  if (argc >= 4 && std::strcmp(argv[1], "owner") == 0) return run_owner(argv[2], argv[3]);
  if (argc == 1) return run_demo();
  std::fprintf(stderr, "usage: shmbox-demo\n");
  return 2;
}
