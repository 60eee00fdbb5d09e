// bench/boxes.cpp - shmbox-bench-boxes: thousands of boxes in one owner
// process, all waited on in ONE epoll set over each box's
// Owner::notify_fd(), or (--group) in one NotifyGroup (Owner::join).
//
// WHAT IT MEASURES (for N boxes, --boxes N, default 10000)
//   setup      the owner process's Owner::acquire + notify_fd() (--group: join) +
//              epoll_ctl(ADD) + notify() of all N boxes (ms), and its thread
//              count after that (Threads: in /proc/self/status)
//   idle       the owner's CPU while nothing is posted, over --idle-seconds
//              (ms of CPU per second; the sum of the on-CPU nanoseconds of
//              every thread of the owner in /proc/<pid>/task/*/schedstat)
//   wake       post -> the owner holds the message, for a post to box 1 and
//              to box N, interleaved (box 1, box N, box 1, ...): the producer
//              writes CLOCK_MONOTONIC into the message, the owner subtracts
//              it from its own reading once try_receive has it; p50 and p99
//   memory     shared memory per box (st_size of /dev/shm/shmbox.<name>),
//              and the owner's RSS growth over the set-up divided by N
//   tput       one producer process posts --messages messages round-robin to
//              the N boxes (policy block); the owner drains each box whose
//              fd is readable (Owner::wait(d, 0), try_receive until empty,
//              notify() to re-arm); messages per second, after a warm-up
//              lap of one post to every box (first-lap, its own row)
//   cli        wall time of `shmbox ls` (every box on the machine) and
//              `shmbox gc --dry-run --prefix <ours>` (our N boxes, owner
//              alive), each run as a child process (fork + exec)
//
// METHOD
// * Processes: the parent creates the N boxes (capacity 64, 64-byte slots,
//   policy block; the Box handles are dropped at once) and only
//   orchestrates; the owner and the producer are forked children (they die
//   with the parent: PR_SET_PDEATHSIG), every wait of the parent has a
//   deadline (--timeout), and the boxes are removed when the benchmark ends,
//   fails or gets SIGINT/SIGTERM/SIGHUP/SIGQUIT (the names carry the
//   parent's pid: a later run removes what a SIGKILLed one left).
// * Every message is checked: the owner checks that a message came out of
//   the box it was posted to and carries the next sequence number of that
//   box, and counts them: the throughput phase fails unless exactly
//   --messages arrived.
// * Wake handshake: before each timed post the producer waits until the
//   owner's main thread sleeps in the kernel (state S: in epoll_wait); the
//   owner acknowledges each sample through a pipe after it has re-armed the
//   box, so one sample never overlaps the next.
// * File descriptors: every owned box holds its lock description (its
//   segment: liveness.hpp L1) and its notify_fd (the owner process had 215
//   open for 100 boxes; the "threads" row's note gives the count), the
//   producer its lock description and the owner's eventfd per box
//   (docs/status.md, Limits). The benchmark raises RLIMIT_NOFILE's
//   soft limit to the hard limit, and (as root) the hard limit to what N
//   needs; if it still cannot, it measures the largest N the limit allows and
//   prints a skip row for the N asked, with the reason. A set-up the system
//   refuses (notify_fd fails: a thread or descriptor limit) is a skip row too.
// * What would make the numbers wrong: other load on the machine (the run's
//   load average goes to stderr); the wake-up of a box depends on where the
//   owner and producer run (same CPU or not; this is a 2-CPU machine).
//
// OUTPUT: rows (bench/rows.hpp) of group "boxes", mechanism "<N> boxes":
//   setup(ms) threads(count) idle(ms/s) wake-first-p50/p99 wake-last-p50/p99
//   (us) shm-per-box(B) rss-per-box(B) first-lap(ms) tput(Mmsg/s) ls(ms) gc(ms)
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <dirent.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include "harness.hpp"
#include "numbered_boxes.hpp"
#include "rows.hpp"
#include "shmbox/shmbox.hpp"

namespace {

using namespace shmbench;

constexpr std::string_view kProg = "shmbox-bench-boxes";
constexpr std::string_view kMarker = "shmbench-bx-";  // in every box name we create
constexpr std::uint32_t kCapacity = 64;               // slots per box
constexpr std::uint32_t kSlot = 64;                   // bytes per slot
// The owner process holds 2 per box (its segment, the notify_fd), 1 with
// --group; the producer process 1 (its segment; the owner's eventfd too
// without --group). The rows say how many were open.
int fds_per_box(bool group) { return group ? 1 : 2; }
constexpr int kFdReserve = 256;                       // pipes, epoll, stdio, the library's own

struct Args : CommonArgs {
  int boxes = 10000;
  int samples = 400;         // wake-up samples, half to box 1, half to box N
  double idle_seconds = 3;
  std::uint64_t messages = 400'000;
  double tput_seconds = 3;   // the throughput phase stops after this long, whatever it has posted
  std::string cli;           // the shmbox CLI; default: ../tools/shmbox next to this program
  bool group = false;        // the owners in one NotifyGroup instead of a notify_fd each
};

void usage(std::FILE* to) {
  std::fprintf(to,
               "usage: shmbox-bench-boxes [--boxes N] [--samples S] [--idle-seconds T] [--messages M]\n"
               "                          [--group] [--cli PATH] [--timeout S] [--quick] [--verbose]\n"
               "  --boxes N         boxes owned by one process (default 10000)\n"
               "  --group           the owners in one NotifyGroup (Owner::join), not a notify_fd each\n"
               "  --samples S       wake-up samples, alternating box 1 and box N (default 400)\n"
               "  --idle-seconds T  how long the idle CPU is measured (default 3)\n"
               "  --messages M      throughput phase: at most M messages posted round-robin (default 400000)\n"
               "  --tput-seconds T  ... and for at most T seconds (default 3)\n"
               "  --cli PATH        the shmbox CLI timed for ls and gc (default: ../tools/shmbox from here)\n"
               "  --timeout S       watchdog of the whole run (default 120)\n"
               "  --quick           smoke test: 40 samples, 0.5 s idle, 20000 messages, 0.5 s (unless given)\n"
               "Rows (bench/rows.hpp) on stdout, a readable summary on stderr.\n");
}

std::optional<Args> parse_args(int argc, char** argv) {
  Args a;
  const bool ok = parse_options(kProg, argc, argv, usage, a, [&](ArgWalker& w) {
    const std::string_view arg = w.name();
    if (arg == "--boxes") return w.number(a.boxes, 1, 1'000'000);
    if (arg == "--samples") return w.number(a.samples, 2, 1'000'000);
    if (arg == "--idle-seconds") return w.number(a.idle_seconds, 0.1, 600.0);
    if (arg == "--messages") return w.number(a.messages, std::uint64_t{1});
    if (arg == "--tput-seconds") return w.number(a.tput_seconds, 0.01, 600.0);
    if (arg == "--group") {
      a.group = true;
      return true;
    }
    if (arg == "--cli") {
      std::string_view v;
      if (!w.value(v)) return false;
      a.cli = std::string(v);
      return true;
    }
    return false;
  });
  if (!ok) return std::nullopt;
  a.quick_default(a.samples, "--samples", 40);
  a.quick_default(a.idle_seconds, "--idle-seconds", 0.5);
  a.quick_default(a.messages, "--messages", 20'000);
  a.quick_default(a.tput_seconds, "--tput-seconds", 0.5);
  if (a.cli.empty()) {
    char self[4096];
    const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
    if (n > 0) {
      std::string s(self, static_cast<std::size_t>(n));
      s = s.substr(0, s.rfind('/'));  // .../bench
      a.cli = s.substr(0, s.rfind('/')) + "/tools/shmbox";
    }
  }
  return a;
}

// ===========================================================================
// The boxes: names, and their removal (also from the fatal-signal handler)
// ===========================================================================

using namespace numbered_boxes;  // g_names, box_name, unlink_all_boxes, BoxesGuard (bench/numbered_boxes.hpp)

// ===========================================================================
// Small helpers
// ===========================================================================

// A number from /proc/self/status ("Threads:", "VmRSS:" in kB).
long status_field(const char* key) {
  std::ifstream f("/proc/self/status");
  std::string line;
  const std::size_t klen = std::strlen(key);
  while (std::getline(f, line))
    if (line.compare(0, klen, key) == 0) return std::strtol(line.c_str() + klen, nullptr, 10);
  return -1;
}

// Entries of a directory (not . and ..), e.g. /proc/self/fd.
long count_entries(const char* path) {
  DIR* d = ::opendir(path);
  if (d == nullptr) return -1;
  long k = 0;
  while (const dirent* e = ::readdir(d)) k += e->d_name[0] != '.';
  ::closedir(d);
  return k - 1;  // the directory's own descriptor
}

// On-CPU nanoseconds of every thread of `pid` (schedstat's first field).
std::int64_t cpu_ns_of(pid_t pid) {
  const std::string dir = "/proc/" + std::to_string(pid) + "/task";
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return -1;
  std::int64_t sum = 0;
  while (const dirent* e = ::readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::FILE* f = std::fopen((dir + "/" + e->d_name + "/schedstat").c_str(), "re");
    if (f == nullptr) continue;  // the thread just exited
    long long ns = 0;
    if (std::fscanf(f, "%lld", &ns) == 1) sum += ns;
    std::fclose(f);
  }
  ::closedir(d);
  return sum;
}

// The message of both phases (posted as kMsgBytes bytes).
struct Msg {
  std::uint32_t box;     // the box it is posted to
  std::uint32_t kind;    // 0: a wake-up sample, 1: throughput, 2: the warm-up lap
  std::uint64_t seq;     // wake-up: the sample number; throughput: the next of this box
  std::int64_t t_post;   // wake-up: CLOCK_MONOTONIC at the post
  std::uint64_t check;   // ~seq ^ box: a torn message fails
};
constexpr std::size_t kMsgBytes = sizeof(Msg);
static_assert(kMsgBytes <= kSlot);

void read_byte(int fd, const char* what) {
  char c;
  for (;;) {
    const ssize_t n = ::read(fd, &c, 1);
    if (n == 1) return;
    if (n < 0 && errno == EINTR) continue;
    throw bench_failure(n == 0 ? std::string(what) + ": the other side went away" : errno_text(what));
  }
}

double pct(std::vector<double>& v, double q) {
  std::sort(v.begin(), v.end());
  return quantile(v, q);
}

// ===========================================================================
// The owner process
// ===========================================================================

// Records (harness.hpp Record) the owner sends:
//   ready:   a = set-up ns, b = threads, us[0] = RSS growth in bytes
//   result (who 1): us[0..3] = wake p50/p99 box 1, p50/p99 box N
//   result (who 2): a = messages received, t_ns = time of the last one
// `ctl`: 8 bytes = how many throughput messages were posted (the parent
// relays the producer's count), then EOF = stop; `ack`: one byte per wake-up
// sample, once re-armed.
void owner_main(const Args& args, int n, int report, int ctl, int ack) {
  const long rss0_kb = status_field("VmRSS:");
  const std::int64_t t0 = now_ns();
  std::vector<shmbox::Owner> owners;
  owners.reserve(static_cast<std::size_t>(n));
  const int ep = ::epoll_create1(EPOLL_CLOEXEC);
  if (ep < 0) throw bench_failure(errno_text("epoll_create1"));
  constexpr std::uint64_t kGroupEvent = UINT64_MAX - 1;
  std::optional<shmbox::NotifyGroup> group;
  if (args.group) {
    auto g = shmbox::NotifyGroup::create();
    if (!g) throw bench_failure("NotifyGroup::create: " + shmbox::explain(g.error()));
    group.emplace(std::move(*g));
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = kGroupEvent;
    if (::epoll_ctl(ep, EPOLL_CTL_ADD, group->fd(), &ev) != 0) throw bench_failure(errno_text("epoll_ctl ADD of the group"));
  }
  for (int i = 0; i < n; ++i) {
    auto o = shmbox::Owner::acquire(box_name(i));
    if (!o) throw bench_failure("Owner::acquire of box " + std::to_string(i + 1) + ": " + shmbox::explain(o.error()));
    owners.push_back(std::move(*o));
    if (group) {
      if (auto j = owners.back().join(*group, static_cast<std::uint64_t>(i)); !j)
        throw bench_failure("join of box " + std::to_string(i + 1) + " of " + std::to_string(n) +
                            " failed: " + shmbox::explain(j.error()));
      owners.back().notify();
      continue;
    }
    const int fd = owners.back().notify_fd();
    if (fd < 0)
      throw bench_failure("notify_fd of box " + std::to_string(i + 1) + " of " + std::to_string(n) +
                          " failed: " + shmbox::explain(owners.back().last_error()));
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = static_cast<std::uint64_t>(i);
    if (::epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) != 0)
      throw bench_failure(errno_text("epoll_ctl ADD of box " + std::to_string(i + 1)));
    owners.back().notify();
  }
  const std::int64_t t1 = now_ns();
  Record r = make_record(rec_kind::ready, static_cast<std::int32_t>(::getpid()), static_cast<std::uint64_t>(t1 - t0),
                         static_cast<std::uint64_t>(status_field("Threads:")));
  r.us[0] = static_cast<double>(status_field("VmRSS:") - rss0_kb) * 1024.0;
  r.us[1] = static_cast<double>(count_entries("/proc/self/fd"));
  send_record(report, r);

  epoll_event cev{};
  cev.events = EPOLLIN;
  cev.data.u64 = UINT64_MAX;
  if (::epoll_ctl(ep, EPOLL_CTL_ADD, ctl, &cev) != 0) throw bench_failure(errno_text("epoll_ctl ADD of the pipe"));

  const auto samples = static_cast<std::size_t>(args.samples);
  std::vector<double> first_us, last_us;
  std::vector<std::uint64_t> next(static_cast<std::size_t>(n), 0);  // throughput: next sequence per box
  std::uint64_t received = 0, expected = UINT64_MAX;
  std::int64_t t_last = 0;
  bool reported = false;
  std::size_t wakes = 0, warm = 0;
  auto report_if_complete = [&] {
    if (reported || received != expected) return;
    Record res = make_record(rec_kind::result, 2, received);
    res.t_ns = t_last;
    send_record(report, res);
    reported = true;
  };
  shmbox::message m;
  m.data.reserve(kSlot);
  shmbox::delivery d;
  std::vector<epoll_event> evs(256);
  std::vector<std::uint64_t> tags;
  for (;;) {
    const int k = ::epoll_wait(ep, evs.data(), static_cast<int>(evs.size()), -1);
    if (k < 0) {
      if (errno == EINTR) continue;
      throw bench_failure(errno_text("epoll_wait"));
    }
    for (int e = 0; e < k; ++e) {
      if (evs[e].data.u64 == UINT64_MAX) {
        std::uint64_t count = 0;
        const ssize_t k8 = ::read(ctl, &count, sizeof count);
        if (k8 == 0) return;  // the parent closed the pipe: stop
        if (k8 != static_cast<ssize_t>(sizeof count)) throw bench_failure(errno_text("read of the control pipe"));
        expected = count;
        report_if_complete();
        continue;
      }
      tags.clear();
      if (evs[e].data.u64 == kGroupEvent) group->ready(tags);
      else tags.push_back(evs[e].data.u64);
      for (const std::uint64_t tag : tags) {
        const auto i = static_cast<std::size_t>(tag);
        if (i >= owners.size()) throw bench_failure("a tag of no box: " + std::to_string(tag));
        shmbox::Owner& o = owners[i];
        const shmbox::owner_event got = o.wait(d, std::chrono::nanoseconds(0));
        if (got == shmbox::owner_event::not_owner || got == shmbox::owner_event::error)
          throw bench_failure("Owner::wait on box " + std::to_string(i + 1) + ": " + shmbox::explain(o.last_error()));
        bool sample = false;
        shmbox::recv_status st;
        while ((st = o.try_receive(m)) == shmbox::recv_status::ok) {
          const std::int64_t t = now_ns();
          Msg msg{};
          if (m.data.size() != kMsgBytes) throw bench_failure("a message of " + std::to_string(m.data.size()) + " bytes");
          std::memcpy(&msg, m.data.data(), kMsgBytes);
          if (msg.box != i || msg.check != (~msg.seq ^ msg.box) || m.redelivered)
            throw bench_failure("box " + std::to_string(i + 1) + ": a message for box " + std::to_string(msg.box + 1) +
                                " or a torn or redelivered one");
          if (msg.kind == 2) {
            if (++warm == static_cast<std::size_t>(n)) write_all(ack, "w", 1, "ack to the producer");
          } else if (msg.kind == 0) {
            (i == 0 ? first_us : last_us).push_back(static_cast<double>(t - msg.t_post) / 1000.0);
            ++wakes;
            sample = true;
          } else {
            if (msg.seq != next[i])
              throw bench_failure("box " + std::to_string(i + 1) + ": sequence " + std::to_string(msg.seq) +
                                  ", expected " + std::to_string(next[i]) + " (lost, repeated or reordered)");
            ++next[i];
            ++received;
            t_last = t;
            if (received > expected) throw bench_failure("more messages than were posted");
          }
        }
        if (st != shmbox::recv_status::empty)
          throw bench_failure("try_receive on box " + std::to_string(i + 1) + ": " + shmbox::explain(o.last_error()));
        report_if_complete();
        o.notify();  // re-arm: fires at once if something arrived meanwhile
        if (sample) {
          write_all(ack, "a", 1, "ack to the producer");
          if (wakes == samples) {
            Record res = make_record(rec_kind::result, 1);
            if (n == 1) first_us.swap(last_us), first_us = last_us;  // one box is box 1 and box N
            res.us[0] = pct(first_us, 0.5), res.us[1] = pct(first_us, 0.99);
            res.us[2] = pct(last_us, 0.5), res.us[3] = pct(last_us, 0.99);
            send_record(report, res);
          }
        }
      }
    }
  }
}

// ===========================================================================
// The producer process
// ===========================================================================

// Records: ready (a = attach ns); produced (a = messages, t_ns = time of the
// first throughput post, b = posts repeated after a block timeout).
void producer_main(const Args& args, int n, pid_t owner, const ChildEnds& ends, int ack) {
  const std::int64_t t0 = now_ns();
  std::vector<shmbox::Producer> tx;
  tx.reserve(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    auto p = shmbox::Producer::attach(box_name(i));
    if (!p) throw bench_failure("Producer::attach of box " + std::to_string(i + 1) + ": " + shmbox::explain(p.error()));
    tx.push_back(std::move(*p));
  }
  ends.ready_and_wait(0, static_cast<std::uint64_t>(now_ns() - t0));
  auto post = [&](std::size_t box, const Msg& msg) -> std::uint64_t {
    for (std::uint64_t retries = 0;; ++retries) {
      const shmbox::post_status st = tx[box].post(&msg, kMsgBytes);
      if (shmbox::is_stored(st)) return retries;
      if (st != shmbox::post_status::timeout)
        throw bench_failure("post to box " + std::to_string(box + 1) + ": " + std::string(shmbox::to_string(st)));
    }
  };
  // Wake-up samples: box 1, box N, box 1, ... each to a sleeping owner.
  for (int s = 0; s < args.samples; ++s) {
    const std::size_t box = s % 2 == 0 ? 0 : static_cast<std::size_t>(n - 1);
    if (!wait_until_sleeping(owner)) throw bench_failure("the owner did not go to sleep within 2 s");
    Msg msg{static_cast<std::uint32_t>(box), 0, static_cast<std::uint64_t>(s), 0, 0};
    msg.check = ~msg.seq ^ msg.box;
    msg.t_post = now_ns();
    if (post(box, msg) != 0) throw bench_failure("a wake-up post had to wait for space");
    read_byte(ack, "wake-up acknowledgement");
  }
  // Warm-up lap, not timed: one message to every box (the first wake-up of a
  // box also fetches the owner's eventfd), until the owner has them all.
  const std::int64_t w0 = now_ns();
  for (int i = 0; i < n; ++i) {
    Msg msg{static_cast<std::uint32_t>(i), 2, 0, 0, 0};
    msg.check = ~msg.seq ^ msg.box;
    post(static_cast<std::size_t>(i), msg);
  }
  read_byte(ack, "warm-up acknowledgement");
  const std::int64_t w1 = now_ns();
  // Throughput: round-robin over the boxes.
  std::vector<std::uint64_t> next(static_cast<std::size_t>(n), 0);
  std::uint64_t retries = 0;
  const std::int64_t t_start = now_ns();
  const std::int64_t t_stop = t_start + static_cast<std::int64_t>(args.tput_seconds * 1e9);
  std::uint64_t k = 0;
  for (; k < args.messages; ++k) {
    if ((k & 63) == 0 && now_ns() > t_stop) break;
    const std::size_t box = static_cast<std::size_t>(k % static_cast<std::uint64_t>(n));
    Msg msg{static_cast<std::uint32_t>(box), 1, next[box]++, 0, 0};
    msg.check = ~msg.seq ^ msg.box;
    retries += post(box, msg);
  }
  Record r = make_record(rec_kind::produced, 0, k, retries);
  r.t_ns = t_start;
  r.us[0] = static_cast<double>(w1 - w0) / 1000.0;
  ends.send(r);
}

// ===========================================================================
// The parent
// ===========================================================================

// Runs argv as a child process (stdout and stderr to /dev/null); returns its
// wall time in ms, and its exit status in *status (-1: killed at the deadline).
double time_command(const std::vector<std::string>& argv, int timeout_s, int* status) {
  std::vector<char*> av;
  for (const auto& a : argv) av.push_back(const_cast<char*>(a.c_str()));
  av.push_back(nullptr);
  std::fflush(nullptr);
  const std::int64_t t0 = now_ns();
  const pid_t pid = ::fork();
  if (pid < 0) throw bench_failure(errno_text("fork"));
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    reset_signal_handlers();
    const int null = ::open("/dev/null", O_WRONLY);
    ::dup2(null, 1);
    ::dup2(null, 2);
    ::execv(av[0], av.data());
    ::_exit(127);
  }
  const int pfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  const std::int64_t deadline = t0 + std::int64_t{timeout_s} * 1'000'000'000;
  int st = 0;
  for (;;) {
    const pid_t r = ::waitpid(pid, &st, WNOHANG);
    if (r == pid) break;
    if (now_ns() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &st, 0);
      if (pfd >= 0) ::close(pfd);
      *status = -1;
      return -1;
    }
    if (pfd >= 0) {
      pollfd p{pfd, POLLIN, 0};
      ::poll(&p, 1, 100);
    } else {
      ::usleep(500);
    }
  }
  const std::int64_t t1 = now_ns();
  if (pfd >= 0) ::close(pfd);
  *status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return static_cast<double>(t1 - t0) / 1e6;
}

// Raises RLIMIT_NOFILE so that `want` descriptors fit: the soft limit to the
// hard one, and as root the hard one too (at most fs.nr_open). Returns the
// soft limit in force.
rlim_t raise_fd_limit(rlim_t want, std::string& why_not) {
  rlimit lim{};
  ::getrlimit(RLIMIT_NOFILE, &lim);
  if (lim.rlim_cur < want) {
    if (lim.rlim_max < want && ::geteuid() == 0) {
      const rlim_t cap = read_proc_number("/proc/sys/fs/nr_open", 1048576);
      rlimit up{std::min(want, cap), std::min(want, cap)};
      if (::setrlimit(RLIMIT_NOFILE, &up) == 0) lim = up;
      else why_not = errno_text("setrlimit of the hard limit");
    }
    if (lim.rlim_cur < want) {
      lim.rlim_cur = std::min(want, lim.rlim_max);
      ::setrlimit(RLIMIT_NOFILE, &lim);
      ::getrlimit(RLIMIT_NOFILE, &lim);
    }
  }
  return lim.rlim_cur;
}

int count_boxes_on_machine() {
  DIR* d = ::opendir("/dev/shm");
  if (d == nullptr) return -1;
  int k = 0;
  while (const dirent* e = ::readdir(d)) k += std::strncmp(e->d_name, "shmbox.", 7) == 0;
  ::closedir(d);
  return k;
}

int run(const Args& args) {
  const std::string kind = args.group ? " boxes, group" : " boxes";
  const std::string mech = std::to_string(args.boxes) + kind;
  const int kFdsPerBox = fds_per_box(args.group);
  const std::string group = "boxes";
  install_signal_handlers(unlink_all_boxes);
  remove_stale(kProg, "/dev/shm", kMarker);
  name_boxes(kMarker);

  // Descriptors: what N boxes need, or the largest N the limit allows.
  const rlim_t want = static_cast<rlim_t>(args.boxes) * kFdsPerBox + kFdReserve;
  std::string why_not = ::geteuid() == 0 ? "" : "not root";
  const rlim_t have = raise_fd_limit(want, why_not);
  int n = args.boxes;
  if (have < want) {
    n = static_cast<int>((have - std::min<rlim_t>(have, kFdReserve)) / kFdsPerBox);
    char why[256];
    std::snprintf(why, sizeof why,
                  "RLIMIT_NOFILE is %llu descriptors (cannot raise it: %s), %d boxes need about %llu per process; "
                  "measured %d boxes instead",
                  static_cast<unsigned long long>(have), why_not.c_str(),
                  args.boxes, static_cast<unsigned long long>(want), n);
    print_skip(group, mech, why);
    std::fprintf(stderr, "%.*s: %s\n", int(kProg.size()), kProg.data(), why);
    if (n < 1) return 0;
  }
  const std::string nmech = std::to_string(n) + kind;
  double load = 0;
  ::getloadavg(&load, 1);

  // The boxes.
  BoxesGuard guard;
  const std::int64_t c0 = now_ns();
  for (int i = 0; i < n; ++i) {
    g_boxes = i + 1;  // before it exists: the handler removes it
    shmbox::options o;
    o.capacity = kCapacity;
    o.slot_size = kSlot;
    o.overflow = shmbox::policy::block;
    auto box = shmbox::Box::create(box_name(i), o);
    if (!box) throw bench_failure("Box::create of box " + std::to_string(i + 1) + ": " + shmbox::explain(box.error()));
  }
  const double create_ms = static_cast<double>(now_ns() - c0) / 1e6;
  struct stat sb {};
  if (::stat((std::string("/dev/shm/shmbox.") + box_name(0)).c_str(), &sb) != 0)
    throw bench_failure(errno_text("stat of box 1's segment"));

  Pipe ctl, ack;  // ctl: to the owner; ack: from the owner to the producer
  Run run;         // harness.hpp, with boxes.cpp's own records (see owner_main)
  run.start_watchdog(args.timeout_s);
  const ChildEnds ends = run.child_ends();
  run.spawn("owner", -1, [&] { owner_main(args, n, ends.report, ctl.r.get(), ack.w.get()); }, {ctl.w.get(), ack.r.get()});
  ctl.r.close();
  ack.w.close();
  const Record ready = run.next();
  if (ready.kind != rec_kind::ready) throw bench_failure("unexpected report from the owner");
  const pid_t owner_pid = static_cast<pid_t>(ready.who);
  const double setup_ms = static_cast<double>(ready.a) / 1e6;
  const double threads = static_cast<double>(ready.b);
  const double rss_per_box = ready.us[0] / n;
  const double owner_fds = ready.us[1];

  // Idle: nothing is posted; the owner sleeps in epoll_wait.
  if (!wait_until_sleeping(owner_pid)) throw bench_failure("the owner did not go to sleep after its set-up");
  const std::int64_t i0 = now_ns(), cpu0 = cpu_ns_of(owner_pid);
  ::usleep(static_cast<useconds_t>(args.idle_seconds * 1e6));
  const std::int64_t cpu1 = cpu_ns_of(owner_pid), i1 = now_ns();
  if (cpu0 < 0 || cpu1 < 0) throw bench_failure("cannot read the owner's /proc/<pid>/task/*/schedstat");
  const double idle_ms_per_s = static_cast<double>(cpu1 - cpu0) / 1e6 / (static_cast<double>(i1 - i0) / 1e9);

  // The CLI over the N boxes (the owner alive).
  const int on_machine = count_boxes_on_machine();
  int ls_status = 0, gc_status = 0;
  const double ls_ms = time_command({args.cli, "ls"}, args.timeout_s, &ls_status);
  const double gc_ms =
      time_command({args.cli, "gc", "--dry-run", "--prefix", g_names}, args.timeout_s, &gc_status);

  // Wake-ups and throughput.
  run.spawn("producer", 0, [&] { producer_main(args, n, owner_pid, ends, ack.r.get()); }, {ctl.w.get()});
  run.watch(args.timeout_s);
  ack.r.close();
  const Record pready = run.next();
  if (pready.kind != rec_kind::ready) throw bench_failure("unexpected report from the producer");
  const double attach_ms = static_cast<double>(pready.b) / 1e6;
  run.release();
  std::optional<Record> wake, produced, drained;
  while (!wake || !produced || !drained) {
    const Record r = run.next();
    if (r.kind == rec_kind::result && r.who == 1 && !wake) wake = r;
    else if (r.kind == rec_kind::result && r.who == 2 && !drained) drained = r;
    else if (r.kind == rec_kind::produced && !produced) {
      produced = r;
      write_all(ctl.w.get(), &r.a, sizeof r.a, "write to the owner's control pipe");
    }
    else throw bench_failure("unexpected report during the run");
  }
  ctl.w.close();  // the owner stops
  run.wait_exit();
  if (produced->a == 0 || drained->a != produced->a)
    throw bench_failure("count mismatch: posted " + std::to_string(produced->a) + ", received " +
                        std::to_string(drained->a));
  if (drained->t_ns <= produced->t_ns) throw bench_failure("the last message arrived before the first was posted");
  const double tput = static_cast<double>(drained->a) / (static_cast<double>(drained->t_ns - produced->t_ns) / 1e9);

  // Rows.
  const std::string geo = std::to_string(kCapacity) + " slots x " + std::to_string(kSlot) + " B";
  auto row = [&](const char* metric, double v, const char* unit, const std::string& note) {
    print_row(group, nmech, metric, v, v, v, unit, note);
  };
  row("setup", setup_ms, "ms", std::string(args.group ? "acquire + join + notify" : "acquire + notify_fd + epoll_ctl + notify") + ", all boxes; create " +
                                   std::to_string(static_cast<long>(create_ms)) + " ms, producer attach " +
                                   std::to_string(static_cast<long>(attach_ms)) + " ms");
  row("threads", threads, "count",
      "owner process after set-up (/proc/self/status Threads); " + std::to_string(static_cast<long>(owner_fds)) +
          " descriptors open");
  row("idle", idle_ms_per_s, "ms/s", "owner CPU, nothing posted, over " + std::to_string(args.idle_seconds).substr(0, 4) + " s");
  const std::string wnote = std::to_string(args.samples / 2) + " samples each, interleaved";
  row("wake-first-p50", wake->us[0], "us", wnote);
  row("wake-first-p99", wake->us[1], "us", wnote);
  row("wake-last-p50", wake->us[2], "us", wnote);
  row("wake-last-p99", wake->us[3], "us", wnote);
  row("shm-per-box", static_cast<double>(sb.st_size), "B", geo + ", 64 producer entries, 1 lane");
  row("rss-per-box", rss_per_box, "B", "owner RSS growth over the set-up / N");
  row("first-lap", produced->us[0] / 1000.0, "ms",
      "one post to every box, first wake-up of each, until the owner has them all (not in tput)");
  row("tput", tput / 1e6, "Mmsg/s", std::to_string(drained->a) + " msgs round-robin, 1 producer; " +
                                         std::to_string(produced->b) + " retries");
  if (ls_status == 0) row("ls", ls_ms, "ms", "shmbox ls, " + std::to_string(on_machine) + " boxes on the machine");
  else print_skip(group, nmech + " ls", "shmbox ls exited with status " + std::to_string(ls_status));
  if (gc_status == 0 || gc_status == 3) row("gc", gc_ms, "ms", "shmbox gc --dry-run --prefix (ours), owner alive");
  else print_skip(group, nmech + " gc", "shmbox gc exited with status " + std::to_string(gc_status));

  double after = 0;
  ::getloadavg(&after, 1);
  std::fprintf(stderr,
               "# %s: %d boxes (%s), one owner process, one epoll set; load average %.2f before, %.2f after\n"
               "  create %.0f ms; owner set-up %.1f ms (%.1f us per box), %g threads; producer attach %.0f ms\n"
               "  idle owner CPU %.2f ms/s over %.1f s\n"
               "  wake-up p50/p99: box 1 %.1f / %.1f us, box %d %.1f / %.1f us (%d samples each)\n"
               "  memory per box: %lld B shared (segment), %.0f B owner RSS\n"
               "  warm-up lap (one post to every box) %.1f ms; throughput round-robin: %.4f Mmsg/s\n"
               "  shmbox ls %.1f ms (%d boxes on the machine, exit %d); gc --dry-run %.1f ms (exit %d)\n",
               kProg.data(), n, geo.c_str(), load, after, create_ms, setup_ms, setup_ms * 1000 / n, threads,
               attach_ms, idle_ms_per_s, args.idle_seconds, wake->us[0], wake->us[1], n, wake->us[2], wake->us[3],
               args.samples / 2, static_cast<long long>(sb.st_size), rss_per_box, produced->us[0] / 1000.0, tput / 1e6, ls_ms, on_machine,
               ls_status, gc_ms, gc_status);
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return shmbench::bench_main(kProg, argc, argv, parse_args, run); }
