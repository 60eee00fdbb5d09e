// bench/pool.cpp - shmbox-bench-pool: what taking a pool member and giving
// it back costs (issue 16), next to a box round trip measured in the same
// run:
//   * take-return: Pool::take + Lease::give_back(ok), nothing in between;
//   * take-post-return: the same with one 64-byte post into the member's box
//     while it is held (Lease::producer().post);
// each with the pool idle and busy, with 1 and 4 taker processes; and
//   * box-rtt: a round trip between two processes over two boxes, the owner
//     sleeping in Owner::receive (bench/rtt.cpp's rtt-sleep-64
//     shmbox-adaptive, measured the same way here).
// Results go to stdout as rows (rows.hpp, group pool-rtt: metrics p50, p99,
// p99.9 in us, and ratio-p50, ratio-p99 = the row's percentile / box-rtt's
// of the same repetition), a readable table to stderr.
//
//   shmbox-bench-pool [--count N] [--warmup W] [--reps R] [--quick] ...  the benchmark
//   shmbox-bench-pool supervise POOL        Pool::supervise until SIGTERM (the benchmark starts it)
//   shmbox-bench-pool member --parent PID   a pool worker (the pool's command runs it)
//
// METHOD
// * Processes. The benchmark process (the parent) only orchestrates. It
//   creates one pool for the whole benchmark (Pool::create) and starts its
//   supervisor: fork + exec of this program with `supervise POOL`, which
//   runs Pool::supervise. The pool's command is `exec <this program> member
//   --parent <pid>`, so every member is this program too: it takes its box
//   (PoolMember::from_env) and receives on it (Owner::receive with spin 0:
//   it sleeps in the futex at once, as an idle worker does), answers health
//   pings on lane 0 and drops everything else. For every measured run the
//   parent forks fresh takers (and holders); each opens its own Pool handle
//   before the start barrier. No measured work happens in the parent.
// * The pool. max_count = init_count = holders + 4 (default 6 + 4 = 10): every
//   member is started before the first run and none is started, culled or
//   health-checked during the runs (cull_after 0, health_interval 0); member
//   boxes of 1024 slots of 64 bytes, policy block. A member process gets
//   the CPU less often than the takers that post into it (2 cores, 4 takers
//   in tight loops): it drains its box in bursts, and a box that fills up
//   makes the next post wait for it (block, not reject: a real client would
//   wait or fail too). Such a wait is inside the take-post-return sample;
//   the parent's log (--verbose) shows the messages left in the member boxes
//   when the run's processes had exited, and a run starts only once every
//   member box is empty again.
// * One take-return. A taker reads steady_clock (CLOCK_MONOTONIC; t0), calls
//   take(1 s), (take-post-return: posts one 64-byte message into the
//   member's box,) calls give_back(outcome::ok), lets the Lease go (its
//   destructor, with the Producer inside it, is part of every real use), and
//   reads steady_clock again (t1); t1 - t0 is one sample. So a sample is the
//   whole cost of one use of the pool, minus the work done with the member.
//   The post wakes the sleeping member (a FUTEX_WAKE), as a real request
//   would; nothing waits for the member to answer.
// * Idle: nothing but the takers uses the pool; 10 members are free, a take
//   gets the most recently returned one (usually the one the taker itself
//   just gave back). Busy: 6 holder processes (--holders) keep 6 of the 10
//   members: each takes a member, posts one message into it, sleeps 1 ms
//   (--hold-us) holding it, gives it back (ok) and takes one again at once,
//   until the takers have finished. So about 6000 takes and returns per
//   second run beside the takers on the same member table, and 6 members
//   wake up 1000 times a second each. Members are never short: 6 holders +
//   4 takers = max_count, so a take never has to wait for a member, and the
//   busy rows show the cost of sharing the table, not of queueing (the
//   parent counts the takes that queued anyway: pool_counters::granted).
//   --members 8 (the 6 holders leave 2 members to 4 takers) measures the
//   queueing instead: most busy 4-taker takes then wait for another taker's
//   give_back (FIFO queue, grant).
// * 1 and 4 takers: each taker makes W warm-up take-returns (--warmup,
//   default 1000; not recorded), then N measured ones (--count, default
//   10000). Its samples go to a shared (MAP_SHARED) array allocated and
//   touched before the start; the parent merges the takers' samples and
//   takes the run's p50, p99 and p99.9 (nearest rank over all of them).
// * Wake-up preemption. The post of take-post-return wakes the member; the
//   kernel may run the woken member at once on the taker's CPU, and the
//   sample then contains the member's receive. With 4 takers on 2 cores
//   this is common (seen here, on a loaded 2-core machine, as a p50 of
//   take-post-return-idle-4t several times larger in some repetitions than
//   in others).
// * box-rtt. Two boxes (ping, pong: 1024 slots of 64 bytes, reject), a
//   pinger and an echoer; the pinger sends one 64-byte message, waits for
//   the echo, and times the pair as one sample; both receive with
//   Owner::receive (the box's adaptive wait: spin 50 us, then the futex).
//   bench/rtt.cpp's machinery (bench/mech/round_trip.hpp), the same counts
//   as a taker. One pinger: the ratios of the 4-taker rows are to a single
//   round trip.
// * Processes, message checks, start barrier, watchdog, repetitions (--reps,
//   default 5; ratio rows: pool percentile / box-rtt percentile of the same
//   rep), cleanup of the children: harness.hpp, COMMON METHOD.
// * Checks. A take that fails (any error, or 1 s without a member), a post
//   that does not store, or a give_back that is not ok fails the benchmark
//   with the library's message. Before every run the parent waits until all
//   members are free and alive again; after it, it compares the pool's
//   counters with what the children did: takes and returns_ok grow by
//   exactly the takes made, and no member was started, restarted, failed,
//   culled or lost, no take timed out or was refused; otherwise the run
//   fails. box-rtt: both boxes' counters agree with the count.
// * What makes the numbers wrong. No CPU pinning, and the machine has 2
//   cores here: with 4 takers (busy: plus 6 holders, their members and the
//   supervisor) processes share cores, so a sample can contain a time
//   slice of another process (the p99 of the 4-taker rows especially; the
//   parent's log prints the load average). Other work on the machine (a
//   build) shows as wide min..max. A taker that sees the member it just gave
//   back measures a warm cache: the idle 1-taker row is the best case. The
//   first lease of a member through a Pool handle may cost more (attaching
//   a producer to its box); the warm-up takes most members a taker will
//   see, but in the busy and 4-taker runs a few such first takes (at most
//   one per member and taker) can land in the measured samples: the p99.9,
//   not the p99, of 10000. A library that made take() wait for the
//   supervisor, or started members during a run, would be caught by the
//   counter check rather than be averaged in. The box-rtt reference is
//   sleeping-capable (adaptive) on both sides; against a busy-polling round
//   trip (rtt-busy-64) the ratios would be larger.
// * The ratios depend on the machine's load more than the pool rows do: a
//   take-return is one process working on shared memory, a box round trip
//   is two processes handing over. When the pinger and the echoer each have
//   a core, box-rtt's p50 is under 1 us; when other work leaves them one
//   core, the echoer spins its 50 us before it yields and the p50 is ~20 us
//   (both seen here on 2 cores, in different repetitions of one run). So a
//   ratio is only meaningful with box-rtt's min..max next to it, and from a
//   quiet machine.
// * The pool is removed at the end (Pool::remove, immediate)
//   and its supervisor stopped; what a killed benchmark left in /dev/shm is
//   removed at the next start (the names carry "shmbench-pool-<pid>"), and
//   its members remove their boxes and exit within 1 s of seeing the
//   benchmark's pid gone.
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "harness.hpp"
#include "mech/round_trip.hpp"
#include "rows.hpp"
#include "shmbox/shmbox.hpp"

namespace {

using namespace shmbench;
using namespace std::chrono_literals;

constexpr std::string_view kMarker = "shmbench-pool-";  // in every name we create
constexpr const char* kProg = "shmbox-bench-pool";
constexpr const char* kGroup = "pool-rtt";
constexpr std::size_t kMsgSize = 64;
constexpr int kMaxTakers = 4;
constexpr std::chrono::seconds kTakeTimeout{1};  // a take that waits this long fails the run
constexpr std::chrono::seconds kSettleTimeout{10};  // members free again / started

// ===========================================================================
// Configurations
// ===========================================================================

enum class kind { box_rtt, take_return, take_post_return };

struct Config {
  const char* mech;  // the row's mechanism
  kind what;
  bool busy;   // holders keep most members
  int takers;  // taker processes (box-rtt: 1 pinger)
};

const std::vector<Config>& all_configs() {
  static const std::vector<Config> v = {
      {"box-rtt", kind::box_rtt, false, 1},
      {"take-return-idle-1t", kind::take_return, false, 1},
      {"take-return-idle-4t", kind::take_return, false, 4},
      {"take-return-busy-1t", kind::take_return, true, 1},
      {"take-return-busy-4t", kind::take_return, true, 4},
      {"take-post-return-idle-1t", kind::take_post_return, false, 1},
      {"take-post-return-idle-4t", kind::take_post_return, false, 4},
      {"take-post-return-busy-1t", kind::take_post_return, true, 1},
      {"take-post-return-busy-4t", kind::take_post_return, true, 4},
  };
  return v;
}

// ===========================================================================
// Command line
// ===========================================================================

struct Args : CommonArgs {
  std::uint64_t count = 10'000;  // measured take-returns per taker and run
  std::uint64_t warmup = 1'000;  // before them, not recorded
  int holders = 6;              // busy: members kept by holder processes
  std::uint32_t members = 0;    // pool size; 0: holders + kMaxTakers (a take never waits for a member)
  std::uint32_t hold_us = 1000;  // busy: how long a holder keeps a member
  std::vector<std::string> only;  // mechanism names; empty: all (box-rtt always runs: the ratios need it)
};

void usage(std::FILE* to) {
  std::fprintf(to,
               "usage: shmbox-bench-pool [--count N] [--warmup W] [--reps R] [--quick] [--holders H] [--hold-us U]\n"
               "                         [--members M] [--only M,...] [--timeout S] [--verbose]\n"
               "       shmbox-bench-pool supervise POOL        (started by the benchmark)\n"
               "       shmbox-bench-pool member --parent PID   (the pool's member command)\n"
               "  --count N    measured take-returns (round trips) per taker and run (default 10000)\n"
               "  --warmup W   before them, not measured (default 1000)\n"
               "  --reps R     runs per configuration, interleaved; rows show the median and min..max of each\n"
               "               percentile over the runs (default 5)\n"
               "  --quick      smoke test: --count 200 --warmup 20 --reps 2 (explicit options win)\n"
               "  --holders H  busy runs: holder processes, each keeping one member (default 6)\n"
               "  --hold-us U  busy runs: how long a holder keeps a member before it gives it back and takes\n"
               "               one again (default 1000)\n"
               "  --members M  the pool's members (> H; default H + 4: a take never has to wait for a member;\n"
               "               fewer: busy 4-taker takes queue for returned members)\n"
               "  --only M,... only these configurations (box-rtt always runs):\n"
               "               take-return-{idle,busy}-{1t,4t}, take-post-return-{idle,busy}-{1t,4t}\n"
               "  --timeout S  watchdog: a run taking longer than S seconds fails (default 120)\n"
               "  --verbose    print every run on stderr\n"
               "Rows (rows.hpp, group pool-rtt) go to stdout, the readable table to stderr.\n");
}

std::optional<Args> parse_args(int argc, char** argv) {
  Args a;
  const bool ok = parse_options(kProg, argc, argv, usage, a, [&](ArgWalker& w) {
    const std::string_view arg = w.name();
    if (arg == "--count") return w.number(a.count, 1, 10'000'000);
    if (arg == "--warmup") return w.number(a.warmup, 0, 10'000'000);
    if (arg == "--holders") return w.number(a.holders, 1, 64);
    if (arg == "--hold-us") return w.number(a.hold_us, 0, 999'999);
    if (arg == "--members") return w.number(a.members, 2, shmbox::kMaxPoolMembers);
    if (arg == "--only")
      return parse_list(w, a.only, [](std::string_view item, std::string& out) {
        out = item;
        for (const Config& c : all_configs())
          if (item == c.mech) return true;
        std::fprintf(stderr, "%s: unknown configuration '%.*s'\n", kProg, int(item.size()), item.data());
        return false;
      });
    return false;
  });
  if (!ok) return std::nullopt;
  a.quick_default(a.count, "--count", 200);
  a.quick_default(a.warmup, "--warmup", 20);
  a.quick_default(a.reps, "--reps", 2);
  return a;
}

bool selected(const Args& a, const Config& c) {
  if (a.only.empty() || c.what == kind::box_rtt) return true;
  return std::find(a.only.begin(), a.only.end(), c.mech) != a.only.end();
}

std::string pool_error(std::string_view what, std::error_code ec) {
  return std::string(what) + ": " + shmbox::explain(ec);
}

// ===========================================================================
// The member (the pool's command) and the supervisor (subcommands)
// ===========================================================================

// Whether process `pid` has ended (gone, or a zombie nobody reaped yet).
bool process_gone(pid_t pid) {
  if (::kill(pid, 0) != 0) return errno == ESRCH;
  const std::string all = shmbench::read_text("/proc/" + std::to_string(pid) + "/stat");
  const auto close = all.rfind(')');
  if (close == std::string::npos || close + 2 >= all.size()) return true;
  return all[close + 2] == 'Z' || all[close + 2] == 'X';
}

// A pool worker: receives on its box until it is no longer its owner, SIGTERM
// (the supervisor stops it), or the benchmark process `parent` is gone: then
// nobody will remove the pool, and the worker removes its own box (an
// interrupted benchmark leaves no worker and no box behind for long).
int member_main(pid_t parent) {
  auto m = shmbox::PoolMember::from_env();
  if (!m) {
    std::fprintf(stderr, "%s member: %s\n", kProg, pool_error("PoolMember::from_env", m.error()).c_str());
    return 1;
  }
  shmbox::message msg;
  for (;;) {
    const shmbox::recv_status st = m->owner().receive(msg, {.timeout = 1s, .spin = 0ns});
    if (st == shmbox::recv_status::ok) {
      if (msg.lane == 0) (void)m->answer_ping(msg.data);  // health pings come on lane 0 (none are asked for here)
      continue;
    }
    if (st == shmbox::recv_status::timeout) {
      if (parent > 0 && process_gone(parent)) {
        if (const char* box = std::getenv("SHMBOX_BOX")) (void)shmbox::Box::remove(box);
        return 0;
      }
      continue;
    }
    if (st == shmbox::recv_status::not_owner) return 0;  // replaced or the pool removed
    std::fprintf(stderr, "%s member %u: receive returned %s: %s\n", kProg, m->index(),
                 std::string(shmbox::to_string(st)).c_str(), shmbox::explain(m->owner().last_error()).c_str());
    return 1;
  }
}

std::atomic<bool> g_stop_supervisor{false};
static_assert(std::atomic<bool>::is_always_lock_free, "set from a signal handler");
extern "C" void on_stop_supervisor(int) { g_stop_supervisor.store(true); }

// Runs Pool::supervise(POOL) until SIGTERM; its log lines go to stderr.
int supervise_main(const std::string& pool_name) {
  struct sigaction sa {};
  sa.sa_handler = on_stop_supervisor;
  sigemptyset(&sa.sa_mask);
  for (int s : {SIGTERM, SIGINT}) ::sigaction(s, &sa, nullptr);
  auto pool = shmbox::Pool::open(pool_name);
  if (!pool) {
    std::fprintf(stderr, "%s supervise: %s\n", kProg, pool_error("Pool::open " + pool_name, pool.error()).c_str());
    return 1;
  }
  shmbox::supervise_options o;
  o.stop = &g_stop_supervisor;
  o.log = [](std::string_view line) {
    std::fprintf(stderr, "%s supervisor: %.*s\n", kProg, int(line.size()), line.data());
  };
  const shmbox::result<void> r = pool->supervise(o);
  if (!r) {
    std::fprintf(stderr, "%s supervise: %s\n", kProg, pool_error("Pool::supervise", r.error()).c_str());
    return 1;
  }
  return 0;
}

// ===========================================================================
// The parent's pool: created once, with its supervisor
// ===========================================================================

// `s` as one /bin/sh word.
std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::string describe_pool(const shmbox::pool_info& p) {
  const shmbox::pool_counters& c = p.count;
  std::string s = "free " + std::to_string(p.free) + ", in use " + std::to_string(p.in_use) + ", starting " +
                  std::to_string(p.starting) + ", checking " + std::to_string(p.checking) + ", stopping " +
                  std::to_string(p.stopping) + ", queued " + std::to_string(p.queued) + "; supervisor " +
                  (p.supervisor_alive ? "alive (pid " + std::to_string(p.supervisor_pid) + ")" : std::string("none")) +
                  "; takes " + std::to_string(c.takes) + ", returns ok " + std::to_string(c.returns_ok) + ", fail " +
                  std::to_string(c.returns_fail) + ", starts " + std::to_string(c.starts) + ", crashed " +
                  std::to_string(c.crashed) + ", start failures " + std::to_string(c.start_failures);
  for (const shmbox::member_info& m : p.members)
    s += "; m" + std::to_string(m.index) + " " + std::string(shmbox::to_string(m.state)) +
         (m.worker_alive ? "" : " (worker not alive)") + (m.stopping_why.empty() ? "" : " " + m.stopping_why);
  return s;
}

class BenchPool {
 public:
  BenchPool(std::string name, std::uint32_t members)
      : name_(std::move(name)), members_(members), segment_("/dev/shm/shmbox-pool." + name_) {
    shmbox::pool_options o;
    o.init_count = members;
    o.max_count = members;
    o.cull_after = 0ms;
    o.max_clients = static_cast<std::uint32_t>(kMaxChildren);  // every taker and holder, the supervisor
    o.queue_max = o.max_clients;  // every taker and holder may wait at once (with --members below H + 4)
    o.command = "exec " + shell_quote(self_path()) + " member --parent " + std::to_string(::getpid());
    o.member.capacity = 1024;
    o.member.slot_size = kMsgSize;
    o.member.overflow = shmbox::policy::block;  // a post into a full box waits for the member (1 s at most)
    o.health_interval = 0ms;
    if (const auto r = shmbox::Pool::create(name_, o); !r) throw bench_failure(pool_error("Pool::create " + name_, r.error()));
    start_supervisor();
    const shmbox::pool_info p = wait_all_free("starting the members");
    starts_ = p.count.starts;
  }
  ~BenchPool() {
    if (const auto r = shmbox::Pool::remove(name_, shmbox::removal::immediate, 5s); !r)
      std::fprintf(stderr, "%s: %s\n", kProg, pool_error("Pool::remove " + name_, r.error()).c_str());
    stop_supervisor();
  }
  BenchPool(const BenchPool&) = delete;
  BenchPool& operator=(const BenchPool&) = delete;

  const std::string& name() const noexcept { return name_; }

  shmbox::pool_info info() const {
    auto p = shmbox::inspect_pool(name_);
    if (!p) throw bench_failure(pool_error("inspect_pool " + name_, p.error()));
    return std::move(*p);
  }

  // Waits until every member is free, its worker alive and its box empty,
  // nothing starting, stopping or queued (polling the table every 2 ms, at
  // most kSettleTimeout). Returns that snapshot.
  shmbox::pool_info wait_all_free(std::string_view during) const {
    const auto deadline = bench_clock::now() + kSettleTimeout;
    for (;;) {
      shmbox::pool_info p = info();
      bool alive = true;
      for (const auto& m : p.members) alive = alive && m.worker_alive && m.depth == 0;
      if (p.free == members_ && p.in_use == 0 && p.starting == 0 && p.stopping == 0 && p.checking == 0 &&
          p.queued == 0 && alive)
        return p;
      if (bench_clock::now() > deadline)
        throw bench_failure("pool " + name_ + ": not all " + std::to_string(members_) + " members free, alive and drained " +
                            std::to_string(kSettleTimeout.count()) + " s after " + std::string(during) + ": " +
                            describe_pool(p));
      std::this_thread::sleep_for(2ms);
    }
  }

  // Members started since the pool was ready (0 unless one was replaced).
  std::uint64_t starts_since_ready(const shmbox::pool_info& p) const { return p.count.starts - starts_; }

 private:
  // The supervisor: this program, `supervise POOL` (SIGTERM if we die: it
  // stops, and its members follow).
  void start_supervisor() { supervisor_.start({self_path(), "supervise", name_}, -1, -1, SIGTERM); }

  // SIGTERM (supervise() returns within 50 ms), SIGKILL after 5 s; reaped.
  void stop_supervisor() noexcept {
    if (supervisor_.pid() <= 0) return;
    const auto st = supervisor_.stop(5s);
    if (!st) std::fprintf(stderr, "%s: the supervisor did not stop within 5 s of SIGTERM: killed\n", kProg);
    else if (!(WIFEXITED(*st) && WEXITSTATUS(*st) == 0))
      std::fprintf(stderr, "%s: the supervisor ended with status 0x%x\n", kProg, static_cast<unsigned>(*st));
  }

  std::string name_;
  std::uint32_t members_;
  TrackedName segment_;  // the pool segment, also when the benchmark is interrupted
  Daemon supervisor_{"supervisor"};
  std::uint64_t starts_ = 0;
};

// ===========================================================================
// What the children share with the parent: samples and counts
// ===========================================================================

// One MAP_SHARED anonymous mapping made before the fork: per taker `count`
// samples in nanoseconds, per child the takes it made, and the number of
// takers that have finished (the last one reports the run's "result").
class SharedBlock {
 public:
  struct header {
    std::atomic<std::uint32_t> takers_finished{0};
    std::uint64_t takes[kMaxChildren] = {};  // written by child `who` before it exits
  };
  static_assert(std::atomic<std::uint32_t>::is_always_lock_free);

  SharedBlock(int takers, std::uint64_t count)
      : count_(count), bytes_(sizeof(header) + static_cast<std::size_t>(takers) * count * sizeof(std::int64_t)) {
    void* p = ::mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw bench_failure(errno_text("mmap of the samples"));
    base_ = p;
    hdr_ = new (p) header;
  }
  ~SharedBlock() { ::munmap(base_, bytes_); }
  SharedBlock(const SharedBlock&) = delete;
  SharedBlock& operator=(const SharedBlock&) = delete;

  header& hdr() const noexcept { return *hdr_; }
  std::int64_t* samples(int taker) const noexcept {
    return reinterpret_cast<std::int64_t*>(static_cast<char*>(base_) + sizeof(header)) +
           static_cast<std::size_t>(taker) * count_;
  }

 private:
  std::uint64_t count_;
  std::size_t bytes_;
  void* base_ = nullptr;
  header* hdr_ = nullptr;
};

// ===========================================================================
// The children
// ===========================================================================

constexpr std::int32_t kFirstHolder = 16;  // holders' `who`: kFirstHolder + h; takers: 0..3

struct ChildCtx {
  std::string pool;
  kind what = kind::take_return;
  std::int32_t who = 0;
  int takers = 1;
  std::uint64_t warmup = 0, count = 0;
  std::uint32_t hold_us = 0;
  const SharedBlock* shared = nullptr;
  ChildEnds ends;
};

shmbox::Pool open_pool(const std::string& name) {
  auto p = shmbox::Pool::open(name);
  if (!p) throw bench_failure(pool_error("Pool::open " + name, p.error()));
  return std::move(*p);
}

shmbox::Lease take_or_fail(shmbox::Pool& pool, std::chrono::nanoseconds timeout, std::uint64_t i) {
  auto lease = pool.take(timeout);
  if (!lease) throw bench_failure("take #" + std::to_string(i) + ": " + shmbox::explain(lease.error()));
  return std::move(*lease);
}

void post_or_fail(shmbox::Lease& lease, const MessageBuffer& msg, std::uint64_t i) {
  const shmbox::post_status st = lease.producer().post(msg.bytes, msg.size);
  if (!shmbox::is_stored(st))
    throw bench_failure("post into member box " + lease.box() + " (take #" + std::to_string(i) + ") returned " +
                        std::string(shmbox::to_string(st)) +
                        (st == shmbox::post_status::error ? ": " + shmbox::explain(lease.producer().last_error()) : ""));
}

void give_back_or_fail(shmbox::Pool& pool, shmbox::Lease& lease, std::uint64_t i) {
  const shmbox::return_status st = lease.give_back(shmbox::outcome::ok);
  if (st != shmbox::return_status::ok)
    throw bench_failure("give_back(ok) of member box " + lease.box() + " (take #" + std::to_string(i) + ") returned " +
                        std::string(shmbox::to_string(st)) +
                        (st == shmbox::return_status::error ? ": " + shmbox::explain(pool.last_error()) : ""));
}

// A taker: W + N take-returns (take-post-return: with one post), the last N
// timed into its part of the shared block.
void taker(const ChildCtx& c) {
  shmbox::Pool pool = open_pool(c.pool);
  std::int64_t* ns = c.shared->samples(c.who);
  std::fill(ns, ns + c.count, std::int64_t{0});  // touched before the start
  MessageBuffer msg(static_cast<std::uint64_t>(c.who), kMsgSize);
  const bool post = c.what == kind::take_post_return;
  c.ends.ready_and_wait(c.who);

  const std::uint64_t total = c.warmup + c.count;
  for (std::uint64_t i = 0; i < total; ++i) {
    msg.set_seq(i);
    const auto t0 = bench_clock::now();
    {
      shmbox::Lease lease = take_or_fail(pool, kTakeTimeout, i);
      if (post) post_or_fail(lease, msg, i);
      give_back_or_fail(pool, lease, i);
    }  // the Lease (and its Producer) is gone: inside the sample
    const auto t1 = bench_clock::now();
    if (i >= c.warmup) ns[i - c.warmup] = std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count();
  }
  c.shared->hdr().takes[c.who] = total;
  c.ends.send(rec_kind::produced, c.who, c.count);
  if (c.shared->hdr().takers_finished.fetch_add(1) + 1 == static_cast<std::uint32_t>(c.takers))
    c.ends.send(rec_kind::result, c.who, c.count * static_cast<std::uint64_t>(c.takers));  // the last one
}

// True when every write end of `fd`'s pipe is closed (never waits).
bool closed_now(int fd) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, 0) <= 0) return false;
  char ch;
  const ssize_t n = ::read(fd, &ch, 1);
  if (n > 0) throw bench_failure("unexpected byte on a barrier pipe");
  return n == 0;
}

// A holder (busy runs): holds one member from before the start until the
// takers have finished, giving it back and taking one again every hold_us.
void holder(const ChildCtx& c) {
  shmbox::Pool pool = open_pool(c.pool);
  MessageBuffer msg(static_cast<std::uint64_t>(c.who), kMsgSize);
  std::uint64_t takes = 0;
  std::optional<shmbox::Lease> lease = take_or_fail(pool, 5s, takes++);
  post_or_fail(*lease, msg, 0);
  c.ends.ready_and_wait(c.who);
  const timespec hold{0, static_cast<long>(c.hold_us) * 1000};
  for (;;) {
    if (c.hold_us > 0) ::clock_nanosleep(CLOCK_MONOTONIC, 0, &hold, nullptr);
    give_back_or_fail(pool, *lease, takes);
    lease.reset();
    if (closed_now(c.ends.done)) break;  // every taker has finished
    lease.emplace(take_or_fail(pool, kTakeTimeout, takes++));
    msg.set_seq(takes);
    post_or_fail(*lease, msg, takes);
  }
  c.shared->hdr().takes[c.who] = takes;
}

// ===========================================================================
// The parent: one run
// ===========================================================================

// The run's samples (all takers), in microseconds.
std::vector<double> samples_us(const SharedBlock& shared, int takers, std::uint64_t count) {
  std::vector<double> us;
  us.reserve(static_cast<std::size_t>(takers) * count);
  for (int t = 0; t < takers; ++t) {
    const std::int64_t* ns = shared.samples(t);
    for (std::uint64_t i = 0; i < count; ++i) us.push_back(static_cast<double>(ns[i]) / 1000.0);
  }
  return us;
}

struct RunResult {
  std::array<double, 3> pct{};  // p50, p99, p99.9 in us
  std::uint64_t granted = 0;    // takes that queued and were handed a member
  std::uint64_t holder_takes = 0;
  std::uint64_t backlog = 0;    // messages in the member boxes when every child had exited
};

// box-rtt: bench/rtt.cpp's rtt-sleep-64 shmbox-adaptive, the same counts as a taker.
RunResult run_box_rtt(const Args& args) {
  const Record r = run_round_trips({Kind::shmbox, kMsgSize, shmbox_send::post, shmbox_recv::adaptive, 1024, 8, args.count,
                                    args.warmup, std::string(kMarker) + std::to_string(::getpid()) + "-rtt", args.timeout_s});
  return {{r.us[0], r.us[1], r.us[2]}};
}

RunResult run_pool(const Config& cfg, const Args& args, const BenchPool& pool) {
  const shmbox::pool_info before = pool.wait_all_free("the previous run");
  SharedBlock shared(cfg.takers, args.count);
  Run run;
  const int holders = cfg.busy ? args.holders : 0;
  for (int h = 0; h < holders; ++h) {
    ChildCtx c;
    c.pool = pool.name();
    c.who = kFirstHolder + h;
    c.hold_us = args.hold_us;
    c.shared = &shared;
    c.ends = run.child_ends();
    run.spawn("holder " + std::to_string(h), c.who, [c] { holder(c); });
  }
  for (int t = 0; t < cfg.takers; ++t) {
    ChildCtx c;
    c.pool = pool.name();
    c.what = cfg.what;
    c.who = t;
    c.takers = cfg.takers;
    c.warmup = args.warmup;
    c.count = args.count;
    c.shared = &shared;
    c.ends = run.child_ends();
    run.spawn("taker " + std::to_string(t), c.who, [c] { taker(c); });
  }
  run.watch(args.timeout_s);
  run.wait_ready(holders + cfg.takers);
  run.release();
  const Run::Finished f = run.wait_finished(cfg.takers);  // "done" closes after the last taker: holders stop
  run.wait_exit();
  RunResult r;
  for (const shmbox::member_info& m : pool.info().members) r.backlog += m.depth;  // not drained yet

  const std::uint64_t measured = args.count * static_cast<std::uint64_t>(cfg.takers);
  if (f.sent != measured || f.result.a != measured)
    throw bench_failure(std::string(cfg.mech) + ": measured " + std::to_string(f.sent) + " (result " +
                        std::to_string(f.result.a) + ") of " + std::to_string(measured) + " take-returns");
  std::uint64_t takes = 0;
  for (int t = 0; t < cfg.takers; ++t) takes += shared.hdr().takes[t];
  for (int h = 0; h < holders; ++h) r.holder_takes += shared.hdr().takes[kFirstHolder + h];
  takes += r.holder_takes;

  // The pool's own counters agree with what the children did, and nothing
  // was started, replaced or refused meanwhile.
  const shmbox::pool_info after = pool.wait_all_free(std::string("run ") + cfg.mech);
  const shmbox::pool_counters& a = after.count;
  const shmbox::pool_counters& b = before.count;
  r.granted = a.granted - b.granted;
  const auto d = [](std::uint64_t x, std::uint64_t y) { return std::to_string(x - y); };
  if (a.takes - b.takes != takes || a.returns_ok - b.returns_ok != takes || a.returns_fail != b.returns_fail ||
      a.starts != b.starts || a.crashed != b.crashed || a.start_failures != b.start_failures ||
      a.killed_in_use != b.killed_in_use || a.killed_free_culled != b.killed_free_culled ||
      a.killed_free_unhealthy != b.killed_free_unhealthy || a.take_timeouts != b.take_timeouts ||
      a.no_members_at_capacity != b.no_members_at_capacity || a.no_members_queue_full != b.no_members_queue_full ||
      a.no_members_starting != b.no_members_starting || a.stale_returns != b.stale_returns ||
      a.double_returns != b.double_returns || a.lost != b.lost)
    throw bench_failure(std::string(cfg.mech) + ": the pool's counters disagree with the run (" +
                        std::to_string(takes) + " takes and returns made): takes +" + d(a.takes, b.takes) +
                        ", returns ok +" + d(a.returns_ok, b.returns_ok) + ", fail +" +
                        d(a.returns_fail, b.returns_fail) + ", starts +" + d(a.starts, b.starts) + ", crashed +" +
                        d(a.crashed, b.crashed) + ", start failures +" + d(a.start_failures, b.start_failures) +
                        ", killed in use +" + d(a.killed_in_use, b.killed_in_use) + ", culled +" +
                        d(a.killed_free_culled, b.killed_free_culled) + ", take timeouts +" +
                        d(a.take_timeouts, b.take_timeouts) + ", refused +" +
                        d(a.no_members_at_capacity + a.no_members_queue_full + a.no_members_starting,
                          b.no_members_at_capacity + b.no_members_queue_full + b.no_members_starting) +
                        ", stale returns +" + d(a.stale_returns, b.stale_returns) + ", double returns +" +
                        d(a.double_returns, b.double_returns) + ", lost +" + d(a.lost, b.lost));
  if (pool.starts_since_ready(after) != 0)
    throw bench_failure(std::string(cfg.mech) + ": " + std::to_string(pool.starts_since_ready(after)) +
                        " members were started after the pool was ready");

  std::vector<double> us = samples_us(shared, cfg.takers, args.count);
  r.pct = shmbench::percentiles(us);
  return r;
}

// ===========================================================================
// Repetitions, output
// ===========================================================================

int run(const Args& args) {
  install_signal_handlers();
  remove_stale(kProg, "/dev/shm", kMarker);
  const auto start = bench_clock::now();
  const std::vector<Config>& configs = all_configs();
  const auto members = args.members != 0 ? args.members : static_cast<std::uint32_t>(args.holders + kMaxTakers);
  if (members <= static_cast<std::uint32_t>(args.holders))
    throw bench_failure("--members " + std::to_string(members) + " leaves no member for the takers of the busy runs (" +
                        std::to_string(args.holders) + " holders)");
  std::fprintf(stderr,
               "%s: %llu take-returns (+%llu warm-up) per taker and run, %d reps interleaved, %ld CPUs, "
               "%u members, busy: %d holders x %u us; load average %s\n",
               kProg, static_cast<unsigned long long>(args.count), static_cast<unsigned long long>(args.warmup),
               args.reps, ::sysconf(_SC_NPROCESSORS_ONLN), members, args.holders, args.hold_us, load_average().c_str());

  char note[128];
  std::snprintf(note, sizeof note, "%llu per taker x %d reps; %u members, %d holders x %u us",
                static_cast<unsigned long long>(args.count), args.reps, members, args.holders, args.hold_us);
  Results res;
  std::vector<std::uint64_t> granted(configs.size(), 0);
  {
    BenchPool pool(std::string(kMarker) + std::to_string(::getpid()), members);
    std::fprintf(stderr, "%s: pool %s ready (%u members) after %.2f s\n", kProg, pool.name().c_str(), members,
                 std::chrono::duration<double>(bench_clock::now() - start).count());
    try {
      for (int rep = 0; rep < args.reps; ++rep) {
        const auto t0 = bench_clock::now();
        std::array<double, 3> box{};
        for (std::size_t i = 0; i < configs.size(); ++i) {
          const Config& c = configs[i];
          if (!selected(args, c)) continue;
          const RunResult r = c.what == kind::box_rtt ? run_box_rtt(args) : run_pool(c, args, pool);
          if (c.what == kind::box_rtt) box = r.pct;
          for (std::size_t k = 0; k < 3; ++k) res.add(kGroup, c.mech, kPercentileMetric[k], "us", r.pct[k], note);
          for (std::size_t k = 0; c.what != kind::box_rtt && k < 2; ++k)
            res.add(kGroup, c.mech, k == 0 ? "ratio-p50" : "ratio-p99", "x", r.pct[k] / box[k], "to box-rtt of the same rep");
          granted[i] += r.granted;
          if (args.verbose)
            std::fprintf(stderr,
                         "  rep %d/%d  %-25s p50 %8s  p99 %8s  p99.9 %8s us  (%.2fx, %.2fx box-rtt)  granted %llu  "
                         "holder takes %llu  left in member boxes %llu\n",
                         rep + 1, args.reps, c.mech, fmt(r.pct[0]).c_str(), fmt(r.pct[1]).c_str(),
                         fmt(r.pct[2]).c_str(), r.pct[0] / box[0], r.pct[1] / box[1],
                         static_cast<unsigned long long>(r.granted), static_cast<unsigned long long>(r.holder_takes),
                         static_cast<unsigned long long>(r.backlog));
        }
        std::fprintf(stderr, "%s: rep %d/%d done (%.1f s)\n", kProg, rep + 1, args.reps,
                     std::chrono::duration<double>(bench_clock::now() - t0).count());
      }
    } catch (const std::exception&) {
      // For the report: the pool as the failure left it.
      if (auto p = shmbox::inspect_pool(pool.name()))
        std::fprintf(stderr, "%s: pool at the failure: %s\n", kProg, describe_pool(*p).c_str());
      throw;
    }
  }

  res.print();  // rows (stdout) and the table (stderr)
  for (std::size_t i = 0; i < configs.size(); ++i)
    if (granted[i] > 0) std::fprintf(stderr, "%s: %s: %llu takes queued\n", kProg, configs[i].mech, static_cast<unsigned long long>(granted[i]));
  std::fprintf(stderr, "%s: load average at the end %s; %.1f s in all\n", kProg, load_average().c_str(),
               std::chrono::duration<double>(bench_clock::now() - start).count());
  return 0;
}

int subcommand(int argc, char** argv) {
  const std::string_view sub = argv[1];
  if (sub == "supervise" && argc == 3) return supervise_main(argv[2]);
  long parent = 0;
  if (sub == "member" && argc == 4 && std::string_view(argv[2]) == "--parent" && parse_number(std::string_view(argv[3]), parent))
    return member_main(static_cast<pid_t>(parent));
  usage(stderr);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && argv[1][0] != '-') return subcommand(argc, argv);
  return shmbench::bench_main(kProg, argc, argv, parse_args, run);
}
