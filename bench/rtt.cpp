// bench/rtt.cpp - shmbox-bench-rtt: round-trip latency (ping-pong) between
// two processes over two queues, A -> B ("ping") and B -> A ("pong"), for
//   * busy-polling mechanisms (nobody sleeps in the kernel), 64 B and 1 KiB:
//     a hand-written SPSC spin ring (spin_ring.hpp, the practical limit),
//     boost::lockfree::spsc_queue in Boost.Interprocess shared memory, shmbox
//     with copies (post / try_receive) and shmbox zero-copy (loan /
//     receive_in_place);
//   * blocking mechanisms that sleep in the kernel when nothing is there,
//     64 B: shmbox's adaptive wait (spin, then futex), shmbox sleeping on the
//     futex at once, Boost.Interprocess message_queue, POSIX message queues,
//     pipes and a UNIX socketpair.
// Results go to stdout as rows (rows.hpp: groups rtt-busy-64, rtt-busy-1k,
// rtt-sleep-64; metrics p50, p99, p99.9; unit us), a readable table to stderr.
//
// METHOD
// * Processes. The benchmark process (the parent) only orchestrates: for every
//   measured run it creates fresh queues/segments for both directions, forks
//   the pinger A and the echoer B, and reads what they report through a pipe.
//   No measured work happens in the parent.
// * One round trip. A writes the sequence number into its message, reads
//   steady_clock (t0), sends the message on "ping", waits for the echo on
//   "pong", checks it, and reads steady_clock again (t1); t1 - t0 is one
//   sample. B waits for each ping, checks it and sends the same bytes back.
//   Exactly one message is in flight at any time, so every queue is either
//   empty or holds one message: this measures hand-over latency (wake-up,
//   cache-line transfers, system calls), never queueing.
// * Messages. 64 bytes (rtt-busy-64, rtt-sleep-64) or 1024 bytes
//   (rtt-busy-1k). Bytes 0..7 are the sequence number, 8..15 a tag derived
//   from the size, the rest a fixed pattern.
// * Checking. B checks every ping: the right size and tag and exactly the
//   next sequence number (0, 1, 2, ...); A checks every echo the same way (it
//   must carry the sequence number A just sent). A lost, duplicated, reordered
//   or damaged message fails the run. After the run the parent checks that
//   both children reported the full count, and what the mechanism can confirm
//   itself: shmbox's counters (posted = stored = delivered = the count, per
//   direction), message_queue / POSIX queues / lockfree queues empty. Any
//   failure aborts the benchmark with a message on stderr and exit status 1.
// * Counts. Per run: W warm-up round trips (--warmup, default 2000; not
//   recorded), then N measured ones (--count, default 20000). A computes the
//   run's p50, p99 and p99.9 (nearest rank over its N sorted samples). The
//   samples array is allocated and touched before the start.
// * Repetitions. Every (group, mechanism) runs R times (--reps, default 5),
//   interleaved (rep 1 of every configuration, then rep 2, ...), so that a
//   slow phase of the machine does not hit a single configuration. For each
//   percentile the row shows the median over the R runs, and the min and max.
// * Busy polling (rtt-busy-*). Every receiver loops on a non-blocking
//   receive: spin ring pop, spsc_queue::pop, shmbox Owner::try_receive,
//   shmbox Owner::receive_in_place(fn, 1, 0 ns). All four use the same wait
//   between failed checks (shmbench::spin_wait from spin_ring.hpp: the CPU's
//   pause hint, and sched_yield() after 1024 failed checks in a row, so that
//   on an oversubscribed machine a spinner gives its core to the peer instead
//   of burning whole time slices). Senders never wait: a queue holding one
//   message is never full. Copies: the spin ring and spsc_queue copy the
//   payload in on send and out on receive (spsc_queue: A's message is first
//   copied into a queue element, see LockfreeLink); shmbox-copy likewise
//   (post copies in, try_receive copies into a reused shmbox::message).
//   shmbox-zero-copy:
//   the sender claims a slot with Producer::loan(), memcpy's the payload into
//   loan.data() and commits; the receiver reads the message in place
//   (message_view), and B forwards the echo from inside the callback (one
//   memcpy from the ping slot into a loaned pong slot). Every box: capacity
//   1024, slot_size = the message size, policy reject.
// * Sleeping (rtt-sleep-64). Blocking receives: shmbox Owner::receive(m, 1 s,
//   wait_options{}) (the box's adaptive wait: spins options::spin = 50 us,
//   then sleeps on the futex) and with wait_options{0 ns} (sleeps at once);
//   Boost.Interprocess message_queue (1024 x 64 B) send/receive; POSIX
//   mq_send/mq_receive (depth min(8, /proc/sys/fs/mqueue/msg_max), msgsize
//   64); two pipes with blocking read/write of 64 bytes; a
//   socketpair(AF_UNIX, SOCK_SEQPACKET), one message per send/recv. A receive
//   timeout is only repeated: a hang is caught by the watchdog.
// * Start barrier. Both children first do their set-up (open/attach/acquire,
//   mapping, touching the sample array) and report "ready". Then the parent
//   closes the write end of the "go" pipe: both children are blocked in
//   read() on it and wake on EOF. Fork and set-up are not timed.
// * No sleeps synchronise anything: start and finish are pipe handshakes.
//   poll() timeouts in the parent are only a watchdog (--timeout per run)
//   that kills the children when something hangs.
// * No CPU pinning (the machine may have only 2 cores, and other work may run
//   on it): figures include scheduling noise; the p99.9 especially. When the
//   two children end up on the same CPU (the other one busy), a busy-polling
//   receiver keeps the CPU for its 1024 checks before it yields, and shmbox's
//   adaptive wait for its whole spin (50 us) before it sleeps, so a round
//   trip then costs about twice that: tens of microseconds (busy) and ~100
//   us (adaptive) instead of well under one (see the min..max of the rows).
// * Cleanup. Names contain a marker and the parent's pid; a stale name is
//   unlinked before it is created, and segments of earlier runs whose process
//   is gone are removed at start (/dev/shm, and /dev/mqueue if it is
//   mounted). The parent removes every segment/queue after each run (RAII),
//   also when the run fails (children are killed and reaped first), and on
//   SIGINT/SIGTERM/SIGHUP/SIGQUIT. Children die with the parent (PDEATHSIG).
#include <dirent.h>
#include <fcntl.h>
#include <mqueue.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <tuple>
#include <utility>
#include <vector>

#include "rows.hpp"
#include "shmbox/shmbox.hpp"
#include "spin_ring.hpp"

#if defined(SHMBOX_HAVE_BOOST)
#include <boost/interprocess/exceptions.hpp>
#include <boost/interprocess/ipc/message_queue.hpp>
#include <boost/interprocess/managed_shared_memory.hpp>
#include <boost/interprocess/shared_memory_object.hpp>
#include <boost/lockfree/spsc_queue.hpp>
#endif

namespace {

using bench_clock = std::chrono::steady_clock;

constexpr std::uint32_t kCapacity = 1024;  // messages per queue (shared-memory mechanisms, message_queue)
constexpr long kPosixMqDepth = 8;          // POSIX queues: at most this (and at most msg_max)
constexpr std::string_view kMarker = "shmbench-rtt-";  // in every name we create
constexpr const char* kProg = "shmbox-bench-rtt";

// Any failure of the benchmark itself (not a usage error).
struct bench_failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

std::string errno_text(const char* what, int e = errno) { return std::string(what) + ": " + std::strerror(e); }

// ===========================================================================
// Mechanisms and configurations
// ===========================================================================

enum class Mech {
  spin_ring,
  lockfree_spsc,
  shmbox_copy,
  shmbox_zero_copy,
  shmbox_adaptive,
  shmbox_futex,
  boost_mq,
  posix_mq,
  pipe,
  unix_socket,
};

// One measured configuration = one (group, mechanism) pair of the output.
struct Config {
  const char* group;
  const char* mech_name;
  Mech mech;
  std::size_t size;  // bytes per message
};

const std::vector<Config>& all_configs() {
  static const std::vector<Config> v = {
      {"rtt-busy-64", "spin-ring", Mech::spin_ring, 64},
      {"rtt-busy-64", "lockfree-spsc", Mech::lockfree_spsc, 64},
      {"rtt-busy-64", "shmbox-copy", Mech::shmbox_copy, 64},
      {"rtt-busy-64", "shmbox-zero-copy", Mech::shmbox_zero_copy, 64},
      {"rtt-busy-1k", "spin-ring", Mech::spin_ring, 1024},
      {"rtt-busy-1k", "lockfree-spsc", Mech::lockfree_spsc, 1024},
      {"rtt-busy-1k", "shmbox-copy", Mech::shmbox_copy, 1024},
      {"rtt-busy-1k", "shmbox-zero-copy", Mech::shmbox_zero_copy, 1024},
      {"rtt-sleep-64", "shmbox-adaptive", Mech::shmbox_adaptive, 64},
      {"rtt-sleep-64", "shmbox-futex", Mech::shmbox_futex, 64},
      {"rtt-sleep-64", "boost-mq", Mech::boost_mq, 64},
      {"rtt-sleep-64", "posix-mq", Mech::posix_mq, 64},
      {"rtt-sleep-64", "pipe", Mech::pipe, 64},
      {"rtt-sleep-64", "unix-socket", Mech::unix_socket, 64},
  };
  return v;
}

// ===========================================================================
// Command line
// ===========================================================================

struct Args {
  std::uint64_t count = 20'000;  // measured round trips per run
  std::uint64_t warmup = 2'000;  // round trips before them, not recorded
  int reps = 5;
  int timeout_s = 120;  // watchdog per run
  bool verbose = false;
  std::vector<std::string> only;  // mechanism (or group) names; empty: all
};

void usage(std::FILE* to) {
  std::fprintf(to,
               "usage: shmbox-bench-rtt [--count N] [--warmup W] [--reps R] [--quick] [--only M,...] [--timeout S]\n"
               "                        [--verbose]\n"
               "  --count N    measured round trips per run (default 20000)\n"
               "  --warmup W   round trips before them, not measured (default 2000)\n"
               "  --reps R     runs per mechanism, interleaved; rows show the median and min..max of each\n"
               "               percentile over the runs (default 5)\n"
               "  --quick      smoke test: --count 200 --warmup 20 --reps 2 (explicit options win)\n"
               "  --only M,... run only these mechanisms (or groups), comma-separated:\n"
               "               spin-ring, lockfree-spsc, shmbox-copy, shmbox-zero-copy, shmbox-adaptive,\n"
               "               shmbox-futex, boost-mq, posix-mq, pipe, unix-socket;\n"
               "               rtt-busy-64, rtt-busy-1k, rtt-sleep-64\n"
               "  --timeout S  watchdog: a run taking longer than S seconds fails (default 120)\n"
               "  --verbose    print every run on stderr\n"
               "Rows (rows.hpp) go to stdout, the readable table to stderr.\n");
}

template <class T>
bool parse_number(std::string_view s, T& out) {
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc{} && p == s.data() + s.size();
}

bool known_name(std::string_view n) {
  for (const Config& c : all_configs())
    if (n == c.mech_name || n == c.group) return true;
  return false;
}

std::optional<Args> parse_args(int argc, char** argv) {
  Args a;
  bool quick = false, have_count = false, have_warmup = false, have_reps = false;
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    std::string_view value;
    bool has_value = false;
    if (const auto eq = arg.find('='); arg.starts_with("--") && eq != std::string_view::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
      has_value = true;
    }
    auto take_value = [&]() -> bool {
      if (has_value) return true;
      if (i + 1 >= argc) return false;
      value = argv[++i];
      return true;
    };
    bool ok = true;
    if (arg == "-h" || arg == "--help") {
      usage(stdout);
      std::exit(0);
    } else if (arg == "--count") {
      ok = take_value() && parse_number(value, a.count) && a.count >= 1 && a.count <= 100'000'000;
      have_count = true;
    } else if (arg == "--warmup") {
      ok = take_value() && parse_number(value, a.warmup) && a.warmup <= 100'000'000;
      have_warmup = true;
    } else if (arg == "--reps") {
      ok = take_value() && parse_number(value, a.reps) && a.reps >= 1 && a.reps <= 1000;
      have_reps = true;
    } else if (arg == "--quick") {
      quick = true;
    } else if (arg == "--timeout") {
      ok = take_value() && parse_number(value, a.timeout_s) && a.timeout_s >= 1;
    } else if (arg == "--only") {
      ok = take_value();
      std::string_view rest = value;
      while (ok && !rest.empty()) {
        const auto comma = rest.find(',');
        const std::string_view item = rest.substr(0, comma);
        rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
        if (item.empty()) continue;
        if (!known_name(item)) {
          std::fprintf(stderr, "%s: unknown mechanism '%.*s'\n", kProg, int(item.size()), item.data());
          ok = false;
        }
        a.only.emplace_back(item);
      }
      if (ok && a.only.empty()) ok = false;
    } else if (arg == "--verbose" || arg == "-v") {
      a.verbose = true;
    } else {
      ok = false;
    }
    if (!ok) {
      std::fprintf(stderr, "%s: bad argument '%s'\n", kProg, argv[i]);
      usage(stderr);
      return std::nullopt;
    }
  }
  if (quick) {
    if (!have_count) a.count = 200;
    if (!have_warmup) a.warmup = 20;
    if (!have_reps) a.reps = 2;
  }
  return a;
}

bool selected(const Args& a, const Config& c) {
  if (a.only.empty()) return true;
  for (const auto& n : a.only)
    if (n == c.mech_name || n == c.group) return true;
  return false;
}

// ===========================================================================
// Cleanup on fatal signals (everything here is async-signal-safe)
// ===========================================================================
// The RAII guards below register the /dev/shm paths and POSIX queue names they
// own, and the parent registers its children, so that SIGINT/SIGTERM/SIGHUP/
// SIGQUIT still kill the children and remove the segments and queues
// (unlink(2) and the mq_unlink system call are async-signal-safe; on Linux
// shm_unlink(name) is unlink("/dev/shm/name")).

constexpr int kMaxTracked = 8;
constexpr int kMaxChildren = 4;
char g_tracked_path[kMaxTracked][256];
volatile std::sig_atomic_t g_tracked_used[kMaxTracked];
char g_tracked_mq[kMaxTracked][128];  // without the leading '/' (the system call's form)
volatile std::sig_atomic_t g_tracked_mq_used[kMaxTracked];
volatile std::sig_atomic_t g_child_pid[kMaxChildren];

extern "C" void on_fatal_signal(int sig) {
  for (int i = 0; i < kMaxChildren; ++i)
    if (g_child_pid[i] > 0) ::kill(static_cast<pid_t>(g_child_pid[i]), SIGKILL);
  for (int i = 0; i < kMaxChildren; ++i)  // reap them: no zombies left to init
    if (g_child_pid[i] > 0) ::waitpid(static_cast<pid_t>(g_child_pid[i]), nullptr, 0);
  for (int i = 0; i < kMaxTracked; ++i)
    if (g_tracked_used[i] != 0) ::unlink(g_tracked_path[i]);
  for (int i = 0; i < kMaxTracked; ++i)
    if (g_tracked_mq_used[i] != 0) ::syscall(SYS_mq_unlink, g_tracked_mq[i]);
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

constexpr int kFatalSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};

void install_signal_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_fatal_signal;
  sigemptyset(&sa.sa_mask);
  for (int s : kFatalSignals) ::sigaction(s, &sa, nullptr);
}

void reset_signal_handlers() {
  for (int s : kFatalSignals) ::signal(s, SIG_DFL);
}

// Registers `text` in the first free entry of a signal-handler table.
int track_in(char (*table)[256], volatile std::sig_atomic_t* used, const std::string& text) {
  for (int i = 0; i < kMaxTracked; ++i) {
    if (used[i] != 0) continue;
    std::snprintf(table[i], 256, "%s", text.c_str());
    std::atomic_signal_fence(std::memory_order_seq_cst);  // the text is complete before it is used
    used[i] = 1;
    return i;
  }
  return -1;
}

// Owns a path in /dev/shm: unlinks it when created (a stale one of the same
// name), on destruction, and from the signal handler while it exists.
class TrackedPath {
 public:
  explicit TrackedPath(const std::string& path) : path_(path) {
    ::unlink(path_.c_str());
    slot_ = track_in(g_tracked_path, g_tracked_used, path_);
  }
  ~TrackedPath() {
    ::unlink(path_.c_str());
    if (slot_ >= 0) g_tracked_used[slot_] = 0;
  }
  TrackedPath(const TrackedPath&) = delete;
  TrackedPath& operator=(const TrackedPath&) = delete;

 private:
  std::string path_;
  int slot_ = -1;
};

// The same for a POSIX message queue name ("/name").
class TrackedMq {
 public:
  explicit TrackedMq(const std::string& name) : name_(name) {
    ::mq_unlink(name_.c_str());
    for (int i = 0; i < kMaxTracked; ++i) {
      if (g_tracked_mq_used[i] != 0) continue;
      std::snprintf(g_tracked_mq[i], sizeof g_tracked_mq[i], "%s", name_.c_str() + 1);
      std::atomic_signal_fence(std::memory_order_seq_cst);
      g_tracked_mq_used[i] = 1;
      slot_ = i;
      break;
    }
  }
  ~TrackedMq() {
    ::mq_unlink(name_.c_str());
    if (slot_ >= 0) g_tracked_mq_used[slot_] = 0;
  }
  TrackedMq(const TrackedMq&) = delete;
  TrackedMq& operator=(const TrackedMq&) = delete;

 private:
  std::string name_;
  int slot_ = -1;
};

// The pid after our marker in a name, or 0.
long marker_pid(std::string_view n) {
  const auto at = n.find(kMarker);
  if (at == std::string_view::npos) return 0;
  const std::string_view rest = n.substr(at + kMarker.size());
  long pid = 0;
  const auto [p, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), pid);
  if (ec != std::errc{} || p == rest.data() || pid <= 0) return 0;
  return pid;
}

// Removes entries with our marker in `dir` left by benchmark processes that no
// longer exist (killed with SIGKILL, for instance).
void remove_stale_in(const char* dir) {
  DIR* d = ::opendir(dir);
  if (d == nullptr) return;
  std::vector<std::string> stale;
  while (const dirent* e = ::readdir(d)) {
    const long pid = marker_pid(e->d_name);
    if (pid == 0 || pid == ::getpid()) continue;
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;  // its process still exists
    stale.emplace_back(e->d_name);
  }
  ::closedir(d);
  for (const auto& n : stale) {
    const std::string path = std::string(dir) + "/" + n;
    if (::unlink(path.c_str()) == 0) std::fprintf(stderr, "%s: removed stale %s\n", kProg, path.c_str());
  }
}

void remove_stale_segments() {
  remove_stale_in("/dev/shm");
  remove_stale_in("/dev/mqueue");  // only if mqueue is mounted there; otherwise nothing to list
}

// ===========================================================================
// File descriptors and the records children send to the parent
// ===========================================================================

class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      close();
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  ~Fd() { close(); }
  int get() const noexcept { return fd_; }
  void close() noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

struct Pipe {
  Fd r, w;
  Pipe() {
    int p[2];
    if (::pipe2(p, O_CLOEXEC) != 0) throw bench_failure(errno_text("pipe2"));
    r = Fd(p[0]);
    w = Fd(p[1]);
  }
};

enum class rec_kind : std::int32_t { ready = 1, result = 2, echoed = 3, failed = 4 };

constexpr std::int32_t kPinger = 0;  // A: sends pings, measures
constexpr std::int32_t kEchoer = 1;  // B: echoes

// One report from a child. Smaller than PIPE_BUF, so every write() of a record
// is atomic and records of the two children never interleave.
struct Record {
  rec_kind kind{};
  std::int32_t who = 0;    // kPinger or kEchoer
  std::uint64_t n = 0;     // result: samples; echoed: messages echoed
  double us[6] = {};       // result: p50, p99, p99.9, min, max, mean (microseconds)
  char text[200] = {};     // failed: what went wrong
};
static_assert(sizeof(Record) <= PIPE_BUF);

void write_all(int fd, const void* p, std::size_t n, const char* what) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    const ssize_t w = ::write(fd, c, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      throw bench_failure(errno_text(what));
    }
    c += w;
    n -= static_cast<std::size_t>(w);
  }
}

void send_record(int fd, const Record& r) { write_all(fd, &r, sizeof r, "write to the parent"); }

void send_simple(int fd, rec_kind kind, std::int32_t who, std::uint64_t n = 0, const std::string& text = {}) {
  Record r;
  r.kind = kind;
  r.who = who;
  r.n = n;
  const std::size_t len = std::min(text.size(), sizeof r.text - 1);
  if (len > 0) std::memcpy(r.text, text.data(), len);
  send_record(fd, r);
}

// Blocks until the write end of `fd`'s pipe is closed everywhere (the
// parent's broadcast: nobody ever writes to these pipes, they only close).
void wait_for_eof(int fd) {
  char c;
  for (;;) {
    const ssize_t n = ::read(fd, &c, 1);
    if (n == 0) return;
    if (n < 0 && errno == EINTR) continue;
    throw bench_failure(n < 0 ? errno_text("read of the barrier pipe") : "unexpected byte on a barrier pipe");
  }
}

// ===========================================================================
// Messages and their check
// ===========================================================================

// A message of S bytes: sequence number, tag, pattern.
template <std::size_t S>
struct Msg {
  static_assert(S >= 16);
  alignas(64) unsigned char bytes[S];
  Msg() {
    std::memset(bytes, 0x5A, S);
    const std::uint64_t tag = tag_of(S);
    std::memcpy(bytes + 8, &tag, sizeof tag);
  }
  void set_seq(std::uint64_t seq) noexcept { std::memcpy(bytes, &seq, sizeof seq); }
  static constexpr std::uint64_t tag_of(std::size_t size) noexcept { return 0x7274740000000000ull ^ size; }
};

// Checks that every message has the right size and tag and exactly the next
// sequence number. on() may be called inside a library callback
// (receive_in_place), so it never throws: it remembers the first mismatch,
// and raise() throws it afterwards.
class SeqCheck {
 public:
  SeqCheck(const char* side, std::size_t size) : side_(side), size_(size) {}

  void on(const void* data, std::size_t n) noexcept {
    std::uint64_t seq = ~0ull, tag = 0;
    if (n >= 16) {
      std::memcpy(&seq, data, sizeof seq);
      std::memcpy(&tag, static_cast<const unsigned char*>(data) + 8, sizeof tag);
    }
    if ((n != size_ || seq != next_ || tag != Msg<16>::tag_of(size_)) && !bad_) {
      bad_ = true;
      bad_size_ = n;
      bad_seq_ = seq;
      bad_expected_ = next_;
    }
    ++next_;
  }
  void on(std::span<const unsigned char> m) noexcept { on(m.data(), m.size()); }

  void raise() const {
    if (!bad_) return;
    throw bench_failure(std::string(side_) + " " + std::to_string(bad_expected_) + " is wrong: " +
                        std::to_string(bad_size_) + " bytes (expected " + std::to_string(size_) + "), sequence " +
                        (bad_seq_ == ~0ull ? std::string("?") : std::to_string(bad_seq_)) +
                        " (lost, duplicated, reordered or damaged)");
  }
  std::uint64_t seen() const noexcept { return next_; }

 private:
  const char* side_;
  std::size_t size_;
  std::uint64_t next_ = 0;
  bool bad_ = false;
  std::size_t bad_size_ = 0;
  std::uint64_t bad_seq_ = 0, bad_expected_ = 0;
};

// ===========================================================================
// What a child needs, and the links (one per mechanism)
// ===========================================================================
// A link is one child's side of both directions. Interface:
//   void send(const unsigned char* msg)            sends S bytes
//   std::span<const unsigned char> recv()          waits for the next message;
//                                                  the view is valid until the next recv
// Zero-copy links (kZeroCopy) instead offer:
//   recv_in_place(fn)      calls fn(const unsigned char*, size_t) in place
//   echo_in_place(check)   receives one message in place, checks it, and sends
//                          it back from the callback (B)

struct ChildCtx {
  Mech mech{};
  std::size_t size = 0;
  std::int32_t who = kPinger;
  std::string tx_name, rx_name;  // the queue this child sends on / receives from
  int tx_fd = -1, rx_fd = -1;    // pipe and socket mechanisms
  std::uint64_t warmup = 0, count = 0;
  int report_fd = -1;  // write: records to the parent
  int go_fd = -1;      // read: EOF = start
};

// --- spin ring (busy) ---------------------------------------------------------

template <std::size_t S>
class SpinRingLink {
 public:
  static constexpr bool kZeroCopy = false;
  explicit SpinRingLink(const ChildCtx& c)
      : tx_(shmbench::BasicSpinRing<S>::open(c.tx_name)), rx_(shmbench::BasicSpinRing<S>::open(c.rx_name)) {}
  void send(const unsigned char* m) { tx_.push(m); }  // never full: one message in flight
  std::span<const unsigned char> recv() {
    rx_.pop(buf_.bytes);  // spins (spin_wait) while empty
    return {buf_.bytes, S};
  }

 private:
  shmbench::BasicSpinRing<S> tx_, rx_;
  Msg<S> buf_;
};

// --- boost::lockfree::spsc_queue in Boost.Interprocess shared memory (busy) ---

#if defined(SHMBOX_HAVE_BOOST)
namespace bip = boost::interprocess;

// The queue element: one message of S bytes, copied in by push, out by pop.
template <std::size_t S>
struct LfMsg {
  unsigned char bytes[S];
};
template <std::size_t S>
using LfQueue = boost::lockfree::spsc_queue<LfMsg<S>, boost::lockfree::capacity<kCapacity>>;
constexpr const char* kLfObject = "q";  // the queue's name inside its segment

template <std::size_t S>
class LockfreeLink {
 public:
  static constexpr bool kZeroCopy = false;
  explicit LockfreeLink(const ChildCtx& c) try
      : tx_seg_(bip::open_only, c.tx_name.c_str()), rx_seg_(bip::open_only, c.rx_name.c_str()) {
    tx_ = tx_seg_.find<LfQueue<S>>(kLfObject).first;
    rx_ = rx_seg_.find<LfQueue<S>>(kLfObject).first;
    if (tx_ == nullptr || rx_ == nullptr) throw bench_failure("spsc_queue not found in its segment");
  } catch (const bip::interprocess_exception& e) {
    throw bench_failure(std::string("managed_shared_memory open: ") + e.what());
  }
  // push() takes an element: B echoes the element it popped as it is; A's
  // message is first copied into an element (one extra memcpy from L1, a few
  // ns to a few tens of ns; spsc_queue has no in-place construction here).
  void send(const unsigned char* m) {
    const LfMsg<S>* e = &out_;
    if (m == in_.bytes)
      e = &in_;
    else
      std::memcpy(out_.bytes, m, S);
    for (std::uint32_t spins = 0; !tx_->push(*e);) shmbench::spin_wait(spins);
  }
  std::span<const unsigned char> recv() {
    for (std::uint32_t spins = 0; !rx_->pop(in_);) shmbench::spin_wait(spins);
    return {in_.bytes, S};
  }

 private:
  bip::managed_shared_memory tx_seg_, rx_seg_;
  LfQueue<S>* tx_ = nullptr;
  LfQueue<S>* rx_ = nullptr;
  LfMsg<S> out_{}, in_{};
};
#endif

// --- shmbox with copies: busy (try_receive) or blocking (receive) --------------

// How a shmbox link receives.
enum class ShmboxRecv { busy, adaptive, futex };

class ShmboxLink {
 public:
  static constexpr bool kZeroCopy = false;
  ShmboxLink(const ChildCtx& c, ShmboxRecv how) : how_(how), size_(c.size) {
    auto p = shmbox::Producer::attach(c.tx_name);
    if (!p) throw bench_failure("Producer::attach " + c.tx_name + ": " + shmbox::explain(p.error()));
    tx_.emplace(std::move(*p));
    auto o = shmbox::Owner::acquire(c.rx_name);
    if (!o) throw bench_failure("Owner::acquire " + c.rx_name + ": " + shmbox::explain(o.error()));
    rx_.emplace(std::move(*o));
    m_.data.reserve(size_);
    if (how_ == ShmboxRecv::futex) wait_.spin = std::chrono::nanoseconds(0);  // adaptive: unset = the box's spin
  }
  void send(const unsigned char* m) {
    const shmbox::post_status st = tx_->post(m, size_);  // reject box: never full with one message in flight
    if (!shmbox::is_stored(st))
      throw bench_failure("post returned " + std::string(shmbox::to_string(st)) + ": " +
                          shmbox::explain(tx_->last_error()));
  }
  std::span<const unsigned char> recv() {
    shmbox::recv_status st;
    if (how_ == ShmboxRecv::busy) {
      std::uint32_t spins = 0;
      while ((st = rx_->try_receive(m_)) == shmbox::recv_status::empty) shmbench::spin_wait(spins);
    } else {
      // A timeout only loops: a hang is caught by the parent's watchdog.
      while ((st = rx_->receive(m_, std::chrono::seconds(1), wait_)) == shmbox::recv_status::timeout) {
      }
    }
    if (st != shmbox::recv_status::ok)
      throw bench_failure("receive returned " + std::string(shmbox::to_string(st)) + ": " +
                          shmbox::explain(rx_->last_error()));
    if (m_.redelivered) throw bench_failure("a message was flagged redelivered");
    return {reinterpret_cast<const unsigned char*>(m_.data.data()), m_.data.size()};
  }

 private:
  ShmboxRecv how_;
  std::size_t size_;
  std::optional<shmbox::Producer> tx_;
  std::optional<shmbox::Owner> rx_;
  shmbox::message m_;  // reused: its string keeps its memory
  shmbox::wait_options wait_{};
};

// --- shmbox zero-copy (busy): loan / receive_in_place --------------------------

class ShmboxZeroCopyLink {
 public:
  static constexpr bool kZeroCopy = true;
  explicit ShmboxZeroCopyLink(const ChildCtx& c) : size_(c.size) {
    auto p = shmbox::Producer::attach(c.tx_name);
    if (!p) throw bench_failure("Producer::attach " + c.tx_name + ": " + shmbox::explain(p.error()));
    tx_.emplace(std::move(*p));
    auto o = shmbox::Owner::acquire(c.rx_name);
    if (!o) throw bench_failure("Owner::acquire " + c.rx_name + ": " + shmbox::explain(o.error()));
    rx_.emplace(std::move(*o));
  }

  // Claims a slot, writes the message into it, publishes it.
  void send(const unsigned char* m) {
    if (!send_nothrow(m, size_)) raise();
  }

  // Polls until one message is there; fn sees it in place in the box.
  template <class F>
  void recv_in_place(F&& fn) {
    auto cb = [&](const shmbox::message_view& v) {
      if (v.redelivered && error_.empty()) error_ = "a message was flagged redelivered";
      fn(reinterpret_cast<const unsigned char*>(v.data.data()), v.data.size());
    };
    shmbox::recv_status st;
    std::uint32_t spins = 0;
    while ((st = rx_->receive_in_place(cb, 1, std::chrono::nanoseconds(0))) == shmbox::recv_status::empty ||
           st == shmbox::recv_status::timeout)
      shmbench::spin_wait(spins);
    if (st != shmbox::recv_status::ok)
      throw bench_failure("receive_in_place returned " + std::string(shmbox::to_string(st)) + ": " +
                          shmbox::explain(rx_->last_error()));
    raise();
  }

  // B: the echo is written from the ping's slot straight into a loaned pong
  // slot, inside the callback (one memcpy).
  void echo_in_place(SeqCheck& check) {
    recv_in_place([&](const unsigned char* p, std::size_t n) {
      check.on(p, n);
      send_nothrow(p, n);
    });
  }

 private:
  // Never throws (it runs inside receive_in_place's callback): a failure is
  // kept in error_ and thrown by raise().
  bool send_nothrow(const unsigned char* m, std::size_t n) noexcept {
    shmbox::slot_loan loan = tx_->loan();  // reject box: never full with one message in flight
    if (!loan) return fail("loan returned ", loan.status());
    if (loan.capacity() < n) {
      loan.abort();
      return fail("loan too small: ", shmbox::post_status::too_large);
    }
    std::memcpy(loan.data(), m, n);
    const shmbox::post_status st = loan.commit(n);
    if (!shmbox::is_stored(st)) return fail("commit returned ", st);
    return true;
  }
  bool fail(const char* what, shmbox::post_status st) noexcept {
    try {
      if (error_.empty())
        error_ = what + std::string(shmbox::to_string(st)) + ": " + shmbox::explain(tx_->last_error());
    } catch (...) {
    }
    return false;
  }
  void raise() const {
    if (!error_.empty()) throw bench_failure(error_);
  }

  std::size_t size_;
  std::optional<shmbox::Producer> tx_;
  std::optional<shmbox::Owner> rx_;
  std::string error_;
};

// --- Boost.Interprocess message_queue (blocking) ---------------------------------

#if defined(SHMBOX_HAVE_BOOST)
template <std::size_t S>
class BoostMqLink {
 public:
  static constexpr bool kZeroCopy = false;
  explicit BoostMqLink(const ChildCtx& c) try
      : tx_(bip::open_only, c.tx_name.c_str()), rx_(bip::open_only, c.rx_name.c_str()) {
  } catch (const bip::interprocess_exception& e) {
    throw bench_failure(std::string("message_queue open: ") + e.what());
  }
  void send(const unsigned char* m) {
    try {
      tx_.send(m, S, 0);
    } catch (const bip::interprocess_exception& e) {
      throw bench_failure(std::string("message_queue send: ") + e.what());
    }
  }
  std::span<const unsigned char> recv() {
    bip::message_queue::size_type got = 0;
    unsigned prio = 0;
    try {
      rx_.receive(buf_.bytes, S, got, prio);  // blocks while empty; the watchdog catches hangs
    } catch (const bip::interprocess_exception& e) {
      throw bench_failure(std::string("message_queue receive: ") + e.what());
    }
    return {buf_.bytes, static_cast<std::size_t>(got)};
  }

 private:
  bip::message_queue tx_, rx_;
  Msg<S> buf_;
};
#endif

// --- POSIX message queues (blocking) -------------------------------------------

template <std::size_t S>
class PosixMqLink {
 public:
  static constexpr bool kZeroCopy = false;
  explicit PosixMqLink(const ChildCtx& c) {
    tx_ = ::mq_open(c.tx_name.c_str(), O_WRONLY | O_CLOEXEC);
    if (tx_ == mqd_t(-1)) throw bench_failure(errno_text(("mq_open " + c.tx_name).c_str()));
    rx_ = ::mq_open(c.rx_name.c_str(), O_RDONLY | O_CLOEXEC);
    if (rx_ == mqd_t(-1)) throw bench_failure(errno_text(("mq_open " + c.rx_name).c_str()));
  }
  ~PosixMqLink() {
    if (tx_ != mqd_t(-1)) ::mq_close(tx_);
    if (rx_ != mqd_t(-1)) ::mq_close(rx_);
  }
  PosixMqLink(const PosixMqLink&) = delete;
  PosixMqLink& operator=(const PosixMqLink&) = delete;
  void send(const unsigned char* m) {
    while (::mq_send(tx_, reinterpret_cast<const char*>(m), S, 0) != 0)
      if (errno != EINTR) throw bench_failure(errno_text("mq_send"));
  }
  std::span<const unsigned char> recv() {
    ssize_t n;
    unsigned prio = 0;
    // The buffer must hold mq_msgsize (= S) bytes.
    while ((n = ::mq_receive(rx_, reinterpret_cast<char*>(buf_.bytes), S, &prio)) < 0)
      if (errno != EINTR) throw bench_failure(errno_text("mq_receive"));
    return {buf_.bytes, static_cast<std::size_t>(n)};
  }

 private:
  mqd_t tx_ = mqd_t(-1), rx_ = mqd_t(-1);
  Msg<S> buf_;
};

// --- pipes and a UNIX socketpair (blocking) ------------------------------------

template <std::size_t S>
class PipeLink {
 public:
  static constexpr bool kZeroCopy = false;
  explicit PipeLink(const ChildCtx& c) : tx_(c.tx_fd), rx_(c.rx_fd) {}
  // S <= PIPE_BUF: one write(2) is atomic and normally complete.
  void send(const unsigned char* m) { write_all(tx_, m, S, "write to the pipe"); }
  std::span<const unsigned char> recv() {
    std::size_t got = 0;
    while (got < S) {
      const ssize_t n = ::read(rx_, buf_.bytes + got, S - got);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) throw bench_failure(errno_text("read of the pipe"));
      if (n == 0) throw bench_failure("the peer closed its pipe");
      got += static_cast<std::size_t>(n);
    }
    return {buf_.bytes, S};
  }

 private:
  int tx_, rx_;
  Msg<S> buf_;
};

template <std::size_t S>
class SocketLink {
 public:
  static constexpr bool kZeroCopy = false;
  explicit SocketLink(const ChildCtx& c) : fd_(c.tx_fd) {}
  void send(const unsigned char* m) {
    ssize_t n;
    while ((n = ::send(fd_, m, S, MSG_NOSIGNAL)) < 0)
      if (errno != EINTR) throw bench_failure(errno_text("send on the socket"));
    if (static_cast<std::size_t>(n) != S) throw bench_failure("short send on a SOCK_SEQPACKET socket");
  }
  std::span<const unsigned char> recv() {
    ssize_t n;
    // SOCK_SEQPACKET: one message per recv; MSG_TRUNC returns its real length.
    while ((n = ::recv(fd_, buf_.bytes, S, MSG_TRUNC)) < 0)
      if (errno != EINTR) throw bench_failure(errno_text("recv on the socket"));
    if (n == 0) throw bench_failure("the peer closed the socket");
    if (static_cast<std::size_t>(n) > S)
      throw bench_failure("a message of " + std::to_string(n) + " bytes on the socket, expected " + std::to_string(S));
    return {buf_.bytes, static_cast<std::size_t>(n)};
  }

 private:
  int fd_;
  Msg<S> buf_;
};

// ===========================================================================
// The two roles
// ===========================================================================

// A: sends pings, times each round trip, reports the run's percentiles.
template <std::size_t S, class Link>
void pinger(const ChildCtx& c, Link& link) {
  Msg<S> msg;
  SeqCheck check("echo", S);
  std::vector<std::int64_t> ns(c.count, 0);  // allocated and touched before the start
  send_simple(c.report_fd, rec_kind::ready, kPinger);
  wait_for_eof(c.go_fd);

  const std::uint64_t total = c.warmup + c.count;
  for (std::uint64_t i = 0; i < total; ++i) {
    msg.set_seq(i);
    const auto t0 = bench_clock::now();
    link.send(msg.bytes);
    if constexpr (Link::kZeroCopy)
      link.recv_in_place([&](const unsigned char* p, std::size_t n) { check.on(p, n); });
    else
      check.on(link.recv());
    const auto t1 = bench_clock::now();
    check.raise();
    if (i >= c.warmup) ns[i - c.warmup] = std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count();
  }

  std::vector<double> us(ns.size());
  double sum = 0;
  for (std::size_t i = 0; i < ns.size(); ++i) sum += us[i] = static_cast<double>(ns[i]) / 1000.0;
  std::sort(us.begin(), us.end());
  Record r;
  r.kind = rec_kind::result;
  r.who = kPinger;
  r.n = us.size();
  r.us[0] = shmbench::quantile(us, 0.50);
  r.us[1] = shmbench::quantile(us, 0.99);
  r.us[2] = shmbench::quantile(us, 0.999);
  r.us[3] = us.front();
  r.us[4] = us.back();
  r.us[5] = sum / static_cast<double>(us.size());
  send_record(c.report_fd, r);
}

// B: echoes every ping after checking it.
template <std::size_t S, class Link>
void echoer(const ChildCtx& c, Link& link) {
  SeqCheck check("ping", S);
  send_simple(c.report_fd, rec_kind::ready, kEchoer);
  wait_for_eof(c.go_fd);

  const std::uint64_t total = c.warmup + c.count;
  for (std::uint64_t i = 0; i < total; ++i) {
    if constexpr (Link::kZeroCopy) {
      link.echo_in_place(check);
      check.raise();
    } else {
      const std::span<const unsigned char> m = link.recv();
      check.on(m);
      check.raise();  // before sending: a wrong message is never echoed
      link.send(m.data());
    }
  }
  send_simple(c.report_fd, rec_kind::echoed, kEchoer, check.seen());
}

template <std::size_t S, class Link>
void play(const ChildCtx& c, Link& link) {
  if (c.who == kPinger)
    pinger<S>(c, link);
  else
    echoer<S>(c, link);
}

template <std::size_t S>
void child_sized(const ChildCtx& c) {
  switch (c.mech) {
    case Mech::spin_ring: {
      SpinRingLink<S> l(c);
      return play<S>(c, l);
    }
    case Mech::lockfree_spsc: {
#if defined(SHMBOX_HAVE_BOOST)
      LockfreeLink<S> l(c);
      return play<S>(c, l);
#else
      throw bench_failure("built without Boost");
#endif
    }
    case Mech::shmbox_copy:
    case Mech::shmbox_adaptive:
    case Mech::shmbox_futex: {
      ShmboxLink l(c, c.mech == Mech::shmbox_copy       ? ShmboxRecv::busy
                      : c.mech == Mech::shmbox_adaptive ? ShmboxRecv::adaptive
                                                        : ShmboxRecv::futex);
      return play<S>(c, l);
    }
    case Mech::shmbox_zero_copy: {
      ShmboxZeroCopyLink l(c);
      return play<S>(c, l);
    }
    case Mech::boost_mq: {
#if defined(SHMBOX_HAVE_BOOST)
      BoostMqLink<S> l(c);
      return play<S>(c, l);
#else
      throw bench_failure("built without Boost");
#endif
    }
    case Mech::posix_mq: {
      PosixMqLink<S> l(c);
      return play<S>(c, l);
    }
    case Mech::pipe: {
      PipeLink<S> l(c);
      return play<S>(c, l);
    }
    case Mech::unix_socket: {
      SocketLink<S> l(c);
      return play<S>(c, l);
    }
  }
  throw bench_failure("unknown mechanism");
}

void child_main(const ChildCtx& c) {
  if (c.size == 64) return child_sized<64>(c);
  if (c.size == 1024) return child_sized<1024>(c);
  throw bench_failure("unsupported message size " + std::to_string(c.size));
}

// ===========================================================================
// The parent: queues/segments, children, one run
// ===========================================================================

// The queues of one run, both directions: created fresh, removed when the
// object goes away (also on failure; the signal handler covers the rest).
class Resource {
 public:
  explicit Resource(const std::string& base) : ping(base + "-ping"), pong(base + "-pong") {}
  virtual ~Resource() = default;
  Resource(const Resource&) = delete;
  Resource& operator=(const Resource&) = delete;

  const std::string ping;  // A sends, B receives
  const std::string pong;  // B sends, A receives

  // Pipe and socket mechanisms: the (send, receive) descriptors of a child;
  // every child closes the descriptors that are not its own, the parent all
  // of them once both children run (so that EOF means "the peer is gone").
  virtual std::pair<int, int> fds(std::int32_t /*who*/) const { return {-1, -1}; }
  virtual std::vector<int> all_fds() const { return {}; }
  virtual void close_fds() {}
  // After a successful run: anything the mechanism itself can confirm.
  virtual void verify(std::uint64_t /*total per direction*/) {}
};

template <std::size_t S>
class SpinRingResource final : public Resource {
 public:
  explicit SpinRingResource(const std::string& base)
      : Resource(base), t_ping_("/dev/shm/" + ping), t_pong_("/dev/shm/" + pong) {
    (void)shmbench::BasicSpinRing<S>::create(ping, kCapacity);  // the ring outlives the handle
    (void)shmbench::BasicSpinRing<S>::create(pong, kCapacity);
  }
  ~SpinRingResource() override {
    shmbench::BasicSpinRing<S>::remove(ping);
    shmbench::BasicSpinRing<S>::remove(pong);
  }

 private:
  TrackedPath t_ping_, t_pong_;
};

#if defined(SHMBOX_HAVE_BOOST)
template <std::size_t S>
class LockfreeResource final : public Resource {
 public:
  explicit LockfreeResource(const std::string& base)
      : Resource(base), t_ping_("/dev/shm/" + ping), t_pong_("/dev/shm/" + pong) {
    try {
      for (int i = 0; i < 2; ++i) {
        const std::string& n = i == 0 ? ping : pong;
        bip::shared_memory_object::remove(n.c_str());
        seg_[i].emplace(bip::create_only, n.c_str(), sizeof(LfQueue<S>) + 65536);
        q_[i] = seg_[i]->template construct<LfQueue<S>>(kLfObject)();
      }
    } catch (const bip::interprocess_exception& e) {
      throw bench_failure(std::string("managed_shared_memory create: ") + e.what());
    }
  }
  ~LockfreeResource() override {
    for (auto& s : seg_) s.reset();
    bip::shared_memory_object::remove(ping.c_str());
    bip::shared_memory_object::remove(pong.c_str());
  }
  void verify(std::uint64_t) override {
    for (auto* q : q_)
      if (q->read_available() != 0) throw bench_failure("an spsc_queue is not empty after the run");
  }

 private:
  TrackedPath t_ping_, t_pong_;
  std::optional<bip::managed_shared_memory> seg_[2];  // stays mapped in the parent for verify()
  LfQueue<S>* q_[2] = {nullptr, nullptr};
};
#endif

class ShmboxResource final : public Resource {
 public:
  ShmboxResource(const std::string& base, std::size_t size)
      : Resource(base), t_ping_("/dev/shm/shmbox." + ping), t_pong_("/dev/shm/shmbox." + pong) {
    shmbox::options o;
    o.capacity = kCapacity;
    o.slot_size = static_cast<std::uint32_t>(size);
    o.overflow = shmbox::policy::reject;  // never full here: one message in flight
    for (const std::string* n : {&ping, &pong}) {
      (void)shmbox::Box::remove(*n);
      auto box = shmbox::Box::create(*n, o);
      if (!box) throw bench_failure("Box::create " + *n + ": " + shmbox::explain(box.error()));
      boxes_.push_back(std::move(*box));
    }
  }
  ~ShmboxResource() override {
    boxes_.clear();
    (void)shmbox::Box::remove(ping);
    (void)shmbox::Box::remove(pong);
  }
  void verify(std::uint64_t total) override {
    for (const shmbox::Box& b : boxes_) {
      const shmbox::counters c = b.read_counters();
      if (c.posted != total || c.stored != total || c.delivered != total || c.rejected != 0 || c.abandoned != 0 ||
          c.aborted != 0 || c.redelivered != 0)
        throw bench_failure("shmbox counters of " + b.name() + " disagree: posted " + std::to_string(c.posted) +
                            ", stored " + std::to_string(c.stored) + ", delivered " + std::to_string(c.delivered) +
                            ", rejected " + std::to_string(c.rejected) + ", abandoned " + std::to_string(c.abandoned) +
                            ", aborted " + std::to_string(c.aborted) + ", redelivered " +
                            std::to_string(c.redelivered) + "; expected " + std::to_string(total));
    }
  }

 private:
  TrackedPath t_ping_, t_pong_;
  std::vector<shmbox::Box> boxes_;
};

#if defined(SHMBOX_HAVE_BOOST)
class BoostMqResource final : public Resource {
 public:
  BoostMqResource(const std::string& base, std::size_t size)
      : Resource(base), t_ping_("/dev/shm/" + ping), t_pong_("/dev/shm/" + pong) {
    try {
      for (const std::string* n : {&ping, &pong}) {
        bip::message_queue::remove(n->c_str());
        bip::message_queue mq(bip::create_only, n->c_str(), kCapacity, size);  // the queue outlives the handle
      }
    } catch (const bip::interprocess_exception& e) {
      throw bench_failure(std::string("message_queue create: ") + e.what());
    }
  }
  ~BoostMqResource() override {
    bip::message_queue::remove(ping.c_str());
    bip::message_queue::remove(pong.c_str());
  }
  void verify(std::uint64_t) override {
    try {
      for (const std::string* n : {&ping, &pong})
        if (bip::message_queue(bip::open_only, n->c_str()).get_num_msg() != 0)
          throw bench_failure("message_queue " + *n + " is not empty after the run");
    } catch (const bip::interprocess_exception& e) {
      throw bench_failure(std::string("message_queue open: ") + e.what());
    }
  }

 private:
  TrackedPath t_ping_, t_pong_;
};
#endif

// Creates a POSIX queue (fails if it exists); returns errno or 0.
int create_posix_mq(const std::string& name, long depth, std::size_t size) {
  mq_attr attr{};
  attr.mq_maxmsg = depth;
  attr.mq_msgsize = static_cast<long>(size);
  const mqd_t q = ::mq_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600, &attr);
  if (q == mqd_t(-1)) return errno;
  ::mq_close(q);
  return 0;
}

class PosixMqResource final : public Resource {
 public:
  PosixMqResource(const std::string& base, std::size_t size, long depth)
      : Resource("/" + base), t_ping_(ping), t_pong_(pong) {
    for (const std::string* n : {&ping, &pong})
      if (const int e = create_posix_mq(*n, depth, size); e != 0)
        throw bench_failure(errno_text(("mq_open(create) " + *n).c_str(), e));
  }
  ~PosixMqResource() override {
    ::mq_unlink(ping.c_str());
    ::mq_unlink(pong.c_str());
  }
  void verify(std::uint64_t) override {
    for (const std::string* n : {&ping, &pong}) {
      const mqd_t q = ::mq_open(n->c_str(), O_RDONLY | O_CLOEXEC);
      if (q == mqd_t(-1)) throw bench_failure(errno_text(("mq_open " + *n).c_str()));
      mq_attr a{};
      const int rc = ::mq_getattr(q, &a);
      ::mq_close(q);
      if (rc != 0 || a.mq_curmsgs != 0) throw bench_failure("POSIX queue " + *n + " is not empty after the run");
    }
  }

 private:
  TrackedMq t_ping_, t_pong_;
};

class PipeResource final : public Resource {
 public:
  explicit PipeResource(const std::string& base) : Resource(base) {}
  std::pair<int, int> fds(std::int32_t who) const override {
    return who == kPinger ? std::pair{ping_.w.get(), pong_.r.get()} : std::pair{pong_.w.get(), ping_.r.get()};
  }
  std::vector<int> all_fds() const override { return {ping_.r.get(), ping_.w.get(), pong_.r.get(), pong_.w.get()}; }
  void close_fds() override {
    ping_.r.close();
    ping_.w.close();
    pong_.r.close();
    pong_.w.close();
  }

 private:
  Pipe ping_, pong_;
};

class SocketResource final : public Resource {
 public:
  explicit SocketResource(const std::string& base) : Resource(base) {
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0)
      throw bench_failure(errno_text("socketpair(AF_UNIX, SOCK_SEQPACKET)"));
    a_ = Fd(sv[0]);
    b_ = Fd(sv[1]);
  }
  // One socket per child; it sends and receives on it (the two directions of the pair).
  std::pair<int, int> fds(std::int32_t who) const override {
    const int fd = who == kPinger ? a_.get() : b_.get();
    return {fd, fd};
  }
  std::vector<int> all_fds() const override { return {a_.get(), b_.get()}; }
  void close_fds() override {
    a_.close();
    b_.close();
  }

 private:
  Fd a_, b_;
};

const char* name_tag(Mech m) {
  switch (m) {
    case Mech::spin_ring: return "ring";
    case Mech::lockfree_spsc: return "lf";
    case Mech::shmbox_copy:
    case Mech::shmbox_zero_copy:
    case Mech::shmbox_adaptive:
    case Mech::shmbox_futex: return "box";
    case Mech::boost_mq: return "bmq";
    case Mech::posix_mq: return "pmq";
    case Mech::pipe: return "pipe";
    case Mech::unix_socket: return "sock";
  }
  return "x";
}

template <std::size_t S>
std::unique_ptr<Resource> make_sized_resource(const Config& cfg, const std::string& base) {
  switch (cfg.mech) {
    case Mech::spin_ring: return std::make_unique<SpinRingResource<S>>(base);
    case Mech::lockfree_spsc:
#if defined(SHMBOX_HAVE_BOOST)
      return std::make_unique<LockfreeResource<S>>(base);
#else
      throw bench_failure("built without Boost");
#endif
    default: break;
  }
  throw bench_failure("not a sized resource");
}

std::unique_ptr<Resource> make_resource(const Config& cfg, long mq_depth) {
  const std::string base = std::string(kMarker) + std::to_string(::getpid()) + "-" + name_tag(cfg.mech);
  switch (cfg.mech) {
    case Mech::spin_ring:
    case Mech::lockfree_spsc:
      if (cfg.size == 64) return make_sized_resource<64>(cfg, base);
      if (cfg.size == 1024) return make_sized_resource<1024>(cfg, base);
      throw bench_failure("unsupported message size");
    case Mech::shmbox_copy:
    case Mech::shmbox_zero_copy:
    case Mech::shmbox_adaptive:
    case Mech::shmbox_futex: return std::make_unique<ShmboxResource>(base, cfg.size);
    case Mech::boost_mq:
#if defined(SHMBOX_HAVE_BOOST)
      return std::make_unique<BoostMqResource>(base, cfg.size);
#else
      throw bench_failure("built without Boost");
#endif
    case Mech::posix_mq: return std::make_unique<PosixMqResource>(base, cfg.size, mq_depth);
    case Mech::pipe: return std::make_unique<PipeResource>(base);
    case Mech::unix_socket: return std::make_unique<SocketResource>(base);
  }
  throw bench_failure("unknown mechanism");
}

// The children of one run. The destructor kills and reaps every child that
// has not been reaped, so a failing run leaves no process behind.
class Children {
 public:
  Children() = default;
  Children(const Children&) = delete;
  Children& operator=(const Children&) = delete;
  ~Children() {
    for (auto& k : kids_)
      if (!k.reaped) ::kill(k.pid, SIGKILL);
    for (auto& k : kids_) {
      if (k.reaped) continue;
      int st = 0;
      while (::waitpid(k.pid, &st, 0) < 0 && errno == EINTR) {
      }
      k.reaped = true;
    }
    for (auto& k : kids_) untrack(k.pid);
  }

  // Forks a child that closes `close_in_child` and runs body(); it reports
  // exceptions as a `failed` record and never returns into the parent's code
  // (it ends with _exit).
  template <class Body>
  void spawn(std::string role, int report_fd, const std::vector<int>& close_in_child, std::int32_t who, Body body) {
    std::fflush(nullptr);  // nothing buffered may be written twice
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    if (pid < 0) throw bench_failure(errno_text("fork"));
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(90);
      reset_signal_handlers();
      ::signal(SIGPIPE, SIG_IGN);  // a write to a dead peer's pipe/socket is an error (EPIPE), not a silent death
      for (int fd : close_in_child) ::close(fd);
      int rc = 0;
      try {
        body();
      } catch (const std::exception& e) {
        rc = 1;
        try {
          send_simple(report_fd, rec_kind::failed, who, 0, role + ": " + e.what());
        } catch (...) {
        }
      } catch (...) {
        rc = 1;
      }
      ::_exit(rc);  // no atexit handlers, no destructors of the parent's objects
    }
    kids_.push_back({pid, std::move(role), false});
    track(pid);
  }

  // Reaps children that have exited; throws if one died abnormally.
  void check() {
    for (auto& k : kids_) {
      if (k.reaped) continue;
      int st = 0;
      const pid_t r = ::waitpid(k.pid, &st, WNOHANG);
      if (r != k.pid) continue;
      k.reaped = true;
      untrack(k.pid);
      if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0)) throw bench_failure(k.role + " " + describe(st));
    }
  }

  // Waits for every child; throws if one did not exit with status 0.
  void reap_all() {
    for (auto& k : kids_) {
      if (k.reaped) continue;
      int st = 0;
      pid_t r;
      while ((r = ::waitpid(k.pid, &st, 0)) < 0 && errno == EINTR) {
      }
      k.reaped = true;
      untrack(k.pid);
      if (r == k.pid && !(WIFEXITED(st) && WEXITSTATUS(st) == 0)) throw bench_failure(k.role + " " + describe(st));
    }
  }

 private:
  struct Kid {
    pid_t pid;
    std::string role;
    bool reaped;
  };
  static std::string describe(int st) {
    if (WIFSIGNALED(st))
      return "was killed by signal " + std::to_string(WTERMSIG(st)) + " (" + strsignal(WTERMSIG(st)) + ")";
    return "exited with status " + std::to_string(WEXITSTATUS(st));
  }
  static void track(pid_t pid) {
    for (int i = 0; i < kMaxChildren; ++i)
      if (g_child_pid[i] == 0) {
        g_child_pid[i] = pid;
        return;
      }
  }
  static void untrack(pid_t pid) {
    for (int i = 0; i < kMaxChildren; ++i)
      if (g_child_pid[i] == pid) g_child_pid[i] = 0;
  }
  std::vector<Kid> kids_;
};

// Reads one record from the report pipe. Returns false at EOF (both children
// have closed their ends, i.e. exited). Throws at the deadline, or when a
// child died without reporting. The 250 ms poll slices are only for the
// watchdog.
bool read_record(int fd, Record& r, bench_clock::time_point deadline, Children& kids) {
  char* p = reinterpret_cast<char*>(&r);
  std::size_t got = 0;
  while (got < sizeof r) {
    const auto now = bench_clock::now();
    if (now >= deadline) throw bench_failure("watchdog: the run did not finish in time (see --timeout)");
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count();
    pollfd pfd{fd, POLLIN, 0};
    const int rc = ::poll(&pfd, 1, static_cast<int>(std::min<long long>(250, left + 1)));
    if (rc < 0) {
      if (errno == EINTR) continue;
      throw bench_failure(errno_text("poll"));
    }
    if (rc == 0) {
      kids.check();
      continue;
    }
    const ssize_t n = ::read(fd, p + got, sizeof r - got);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw bench_failure(errno_text("read of the report pipe"));
    }
    if (n == 0) {
      if (got == 0) return false;
      throw bench_failure("truncated report from a child");
    }
    got += static_cast<std::size_t>(n);
  }
  if (r.kind == rec_kind::failed) {
    r.text[sizeof r.text - 1] = '\0';
    throw bench_failure(r.text);
  }
  return true;
}

// One measured run: fresh queues, two children, the pinger's percentiles.
Record run_once(const Config& cfg, const Args& args, long mq_depth) {
  const std::unique_ptr<Resource> res = make_resource(cfg, mq_depth);
  Pipe report, go;
  Children kids;  // declared after the resource: children die before it is removed

  for (const std::int32_t who : {kPinger, kEchoer}) {
    ChildCtx c;
    c.mech = cfg.mech;
    c.size = cfg.size;
    c.who = who;
    c.tx_name = who == kPinger ? res->ping : res->pong;
    c.rx_name = who == kPinger ? res->pong : res->ping;
    std::tie(c.tx_fd, c.rx_fd) = res->fds(who);
    c.warmup = args.warmup;
    c.count = args.count;
    c.report_fd = report.w.get();
    c.go_fd = go.r.get();
    std::vector<int> close_in_child = {report.r.get(), go.w.get()};
    for (int fd : res->all_fds())
      if (fd != c.tx_fd && fd != c.rx_fd) close_in_child.push_back(fd);
    kids.spawn(who == kPinger ? "pinger" : "echoer", report.w.get(), close_in_child, who, [c] { child_main(c); });
  }
  // Only the children keep these ends: EOF on the report pipe means both
  // exited, EOF on a pipe/socket of the mechanism means the peer is gone.
  report.w.close();
  go.r.close();
  res->close_fds();

  const auto deadline = bench_clock::now() + std::chrono::seconds(args.timeout_s);
  Record rec;
  // 1. Set-up handshake: both children have opened/attached/mapped everything.
  for (int ready = 0; ready < 2; ++ready) {
    if (!read_record(report.r.get(), rec, deadline, kids)) throw bench_failure("children exited during set-up");
    if (rec.kind != rec_kind::ready) throw bench_failure("unexpected report during set-up");
  }
  // 2. Start: both children wake on EOF of "go".
  go.w.close();
  // 3. The pinger's result and the echoer's count, in either order.
  std::optional<Record> result;
  std::optional<std::uint64_t> echoed;
  while (!result || !echoed) {
    if (!read_record(report.r.get(), rec, deadline, kids)) throw bench_failure("children exited before reporting");
    if (rec.kind == rec_kind::result && !result)
      result = rec;
    else if (rec.kind == rec_kind::echoed && !echoed)
      echoed = rec.n;
    else
      throw bench_failure("unexpected report during the run");
  }
  // 4. Both exit (EOF on the report pipe) with status 0.
  while (read_record(report.r.get(), rec, deadline, kids)) throw bench_failure("unexpected report after the run");
  kids.reap_all();

  const std::uint64_t total = args.warmup + args.count;
  if (*echoed != total || result->n != args.count)
    throw bench_failure("count mismatch: echoed " + std::to_string(*echoed) + " of " + std::to_string(total) +
                        ", measured " + std::to_string(result->n) + " of " + std::to_string(args.count));
  res->verify(total);
  return *result;
}

// ===========================================================================
// Availability, repetitions, output
// ===========================================================================

constexpr bool kHaveBoost =
#if defined(SHMBOX_HAVE_BOOST)
    true;
#else
    false;
#endif

// The POSIX queue depth we may use: min(kPosixMqDepth, msg_max).
long posix_mq_depth() {
  long depth = kPosixMqDepth;
  if (std::FILE* f = std::fopen("/proc/sys/fs/mqueue/msg_max", "r")) {
    long max = 0;
    if (std::fscanf(f, "%ld", &max) == 1 && max >= 1) depth = std::min(depth, max);
    std::fclose(f);
  }
  return depth;
}

// Why a configuration cannot be measured here ("" if it can).
std::string unavailable(const Config& c, long mq_depth) {
  if ((c.mech == Mech::lockfree_spsc || c.mech == Mech::boost_mq) && !kHaveBoost)
    return "built without Boost (Boost.Interprocess/Boost.Lockfree)";
  if (c.mech == Mech::posix_mq) {
    const std::string probe = "/" + std::string(kMarker) + std::to_string(::getpid()) + "-probe";
    TrackedMq track(probe);
    if (const int e = create_posix_mq(probe, mq_depth, c.size); e != 0)
      return "POSIX message queues unavailable: " + errno_text("mq_open", e);
  }
  return {};
}

std::string fmt_us(double v) {
  char buf[32];
  if (v >= 1000)
    std::snprintf(buf, sizeof buf, "%.0f", v);
  else if (v >= 100)
    std::snprintf(buf, sizeof buf, "%.1f", v);
  else
    std::snprintf(buf, sizeof buf, "%.2f", v);
  return buf;
}

int run(const Args& args) {
  install_signal_handlers();
  remove_stale_segments();

  const std::vector<Config>& configs = all_configs();
  const long mq_depth = posix_mq_depth();
  std::vector<std::string> skip(configs.size());
  bool any = false;
  for (std::size_t i = 0; i < configs.size(); ++i) {
    if (!selected(args, configs[i])) continue;
    skip[i] = unavailable(configs[i], mq_depth);
    any = any || skip[i].empty();
  }

  std::fprintf(stderr,
               "%s: %llu round trips (+%llu warm-up) per run, %d reps interleaved, %ld CPUs, POSIX mq depth %ld\n",
               kProg, static_cast<unsigned long long>(args.count), static_cast<unsigned long long>(args.warmup),
               args.reps, ::sysconf(_SC_NPROCESSORS_ONLN), mq_depth);

  // per configuration: p50, p99, p99.9 of every rep
  std::vector<std::array<std::vector<double>, 3>> pct(configs.size());
  for (int rep = 0; any && rep < args.reps; ++rep) {
    const auto t0 = bench_clock::now();
    for (std::size_t i = 0; i < configs.size(); ++i) {
      const Config& c = configs[i];
      if (!selected(args, c) || !skip[i].empty()) continue;
      const Record r = run_once(c, args, mq_depth);
      for (int k = 0; k < 3; ++k) pct[i][static_cast<std::size_t>(k)].push_back(r.us[k]);
      if (args.verbose)
        std::fprintf(stderr,
                     "  rep %d/%d  %-13s %-17s p50 %8s  p99 %8s  p99.9 %8s  min %8s  max %8s  mean %8s us\n",
                     rep + 1, args.reps, c.group, c.mech_name, fmt_us(r.us[0]).c_str(), fmt_us(r.us[1]).c_str(),
                     fmt_us(r.us[2]).c_str(), fmt_us(r.us[3]).c_str(), fmt_us(r.us[4]).c_str(),
                     fmt_us(r.us[5]).c_str());
    }
    std::fprintf(stderr, "%s: rep %d/%d done (%.1f s)\n", kProg, rep + 1, args.reps,
                 std::chrono::duration<double>(bench_clock::now() - t0).count());
  }

  // Rows (stdout) and the table (stderr), in configuration order.
  char note[96];
  std::snprintf(note, sizeof note, "%llu round trips x %d reps", static_cast<unsigned long long>(args.count),
                args.reps);
  static constexpr const char* kMetric[3] = {"p50", "p99", "p99.9"};
  std::fprintf(stderr, "\n%-13s %-17s %-24s %-24s %-24s\n", "group", "mechanism", "p50 us (min..max)",
               "p99 us (min..max)", "p99.9 us (min..max)");
  for (std::size_t i = 0; i < configs.size(); ++i) {
    const Config& c = configs[i];
    if (!selected(args, c)) continue;
    if (!skip[i].empty()) {
      shmbench::print_skip(c.group, c.mech_name, skip[i]);
      std::fprintf(stderr, "%-13s %-17s skipped: %s\n", c.group, c.mech_name, skip[i].c_str());
      continue;
    }
    std::string line;
    for (std::size_t k = 0; k < 3; ++k) {
      const shmbench::summary s = shmbench::summarize(pct[i][k]);
      shmbench::print_row(c.group, c.mech_name, kMetric[k], s.median, s.min, s.max, "us", note);
      char cell[64];
      std::snprintf(cell, sizeof cell, "%s (%s..%s)", fmt_us(s.median).c_str(), fmt_us(s.min).c_str(),
                    fmt_us(s.max).c_str());
      char padded[80];
      std::snprintf(padded, sizeof padded, "%-24s ", cell);
      line += padded;
    }
    std::fprintf(stderr, "%-13s %-17s %s\n", c.group, c.mech_name, line.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::optional<Args> args = parse_args(argc, argv);
  if (!args) return 2;
  try {
    return run(*args);
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "%s: FAILED: %s\n", kProg, e.what());
    return 1;
  }
}
