// bench/harness.hpp - what the benchmark programs share: the parent that
// forks the children of a run and reads their reports, the start barrier,
// the watchdog, the cleanup on failure and on fatal signals, the programs a
// benchmark starts and stops (class Daemon: nats-server, shmbox-bridge,
// iox-roudi, the pool's supervisor), the command line, and the messages with
// their check. The rows and the table are bench/rows.hpp (class Results); the
// mechanisms bench/mech/. Every benchmark keeps only its configurations,
// roles and rows. Nothing here depends on shmbox, iceoryx or NATS.
//
// COMMON METHOD (the METHOD of throughput.cpp, rtt.cpp, iceoryx.cpp,
// pool.cpp, bridge.cpp and boxes.cpp refers to it)
// * Processes. The parent only orchestrates: for every measured run it makes
//   fresh queues (segments, boxes, services), forks the run's processes and
//   reads what they report through a pipe; no measured work happens in it.
// * Messages. bytes 0..7 the sender's id, 8..15 its sequence number (0, 1,
//   2, ...), the rest the sender's pattern; the sender writes all bytes of
//   every message. The receiver checks every one (class Checker): its size, a
//   known sender, exactly the next sequence number of that sender, the
//   pattern in its last 8 bytes; a lost, duplicated, reordered, torn or extra
//   message fails the run, and any failure the benchmark (exit status 1).
// * Start barrier and watchdog: ONE RUN below; fork and set-up are never
//   timed, and no sleep synchronises anything.
// * Repetitions. --reps R runs of every configuration, interleaved (rep 1 of
//   everything, then rep 2, ...), so that a slow phase of the machine does
//   not hit a single configuration; a row is the median of the R values with
//   their min and max (a ratio is taken per repetition, then summarized).
// * Cleanup: CLEANUP below. No CPU pinning: the figures include the
//   scheduling noise of the machine (its load average goes to stderr).
//
// ONE RUN (class Run): the protocol of every benchmark
//   1. run.spawn() forks each child; it does its set-up (open, attach, map,
//      connect), then ends.ready_and_wait(): reports "ready" and blocks in
//      read() on the "go" pipe. run.watch() starts the watchdog;
//      run.wait_ready() waits for every "ready".
//   2. run.release() reads the clock (t_release) and closes "go": every child
//      wakes on EOF at the same moment. Fork and set-up are never timed.
//   3. run.wait_finished(): every producer reports "produced" when it has
//      sent everything; after the last one the parent closes "done", so that
//      the consumer may check that nothing more arrives. The consumer (or the
//      measuring process) reports the "result".
//   4. run.wait_exit(): EOF on the report pipe (every child has exited), and
//      every exit status is 0.
// Records are written to one pipe; each is smaller than PIPE_BUF, so writes
// of different children never interleave. No sleep synchronises anything:
// the barriers are pipes that are closed; the parent's poll() timeouts only
// serve the watchdog, which fails the run when it takes too long. Destroying
// the Run (also when anything fails) kills and reaps every child left.
//
// CLEANUP
// What a run creates in the file system (a /dev/shm segment, a POSIX queue,
// a socket file) is owned by a TrackedName: unlinked when it is created (a
// stale one of the same name), when it is destroyed, and from the handler of
// SIGINT/SIGTERM/SIGHUP/SIGQUIT, which first kills and reaps the children
// and stops the daemons (SIGTERM, SIGKILL after 10 s). Names carry a marker
// and the parent's pid, so remove_stale() can remove at start what an
// earlier benchmark killed with SIGKILL left behind.
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <mqueue.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
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
#include <functional>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

#include "rows.hpp"  // read_text

namespace shmbench {

using bench_clock = std::chrono::steady_clock;  // CLOCK_MONOTONIC: one clock for every process

// Any failure of the benchmark itself (not a usage error): exit status 1.
struct bench_failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

inline std::string errno_text(std::string_view what, int e = errno) {
  return std::string(what) + ": " + std::strerror(e);
}

// steady_clock in nanoseconds: times that children send to the parent.
inline std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(bench_clock::now().time_since_epoch()).count();
}

// Whether this benchmark was built with Boost (bench/meson.build defines
// SHMBOX_HAVE_BOOST when it finds it); without it, its mechanisms are skip rows.
inline constexpr bool kHaveBoost =
#if defined(SHMBOX_HAVE_BOOST)
    true;
#else
    false;
#endif

// A benchmark's main(): parse(argc, argv) gives its options (nullopt: a
// usage error, exit status 2), run(options) its exit status. A failure (any
// exception) is one line "<prog>: FAILED: <why>" on stderr, after the rows
// printed so far, and exit status 1.
template <class Parse, class Body>
int bench_main(std::string_view prog, int argc, char** argv, Parse&& parse, Body&& run) {
  const auto args = parse(argc, argv);
  if (!args) return 2;
  try {
    return run(*args);
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "%.*s: FAILED: %s\n", int(prog.size()), prog.data(), e.what());
    return 1;
  }
}

// ===========================================================================
// Command line
// ===========================================================================

template <class T>
bool parse_number(std::string_view s, T& out) {
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc{} && p == s.data() + s.size();
}

// Walks the command line (see parse_options): every argument is an option
// "--name", whose value (if it takes one) is either written "--name=value" or
// the next argument.
class ArgWalker {
 public:
  ArgWalker(int argc, char** argv) : argc_(argc), argv_(argv) {}

  // Moves to the next option; false after the last.
  bool next() {
    if (++i_ >= argc_) return false;
    name_ = argv_[i_];
    value_ = {};
    has_value_ = false;
    if (const auto eq = name_.find('='); name_.starts_with("--") && eq != std::string_view::npos) {
      value_ = name_.substr(eq + 1);
      name_ = name_.substr(0, eq);
      has_value_ = true;
    }
    return true;
  }
  std::string_view name() const noexcept { return name_; }

  // The option's value: after '=', else the next argument (which it takes).
  // False if there is none.
  bool value(std::string_view& out) {
    if (!has_value_) {
      if (i_ + 1 >= argc_) return false;
      value_ = argv_[++i_];
      has_value_ = true;
    }
    out = value_;
    return true;
  }
  // The value as a number in [lo, hi].
  template <class T>
  bool number(T& out, std::type_identity_t<T> lo = std::numeric_limits<T>::lowest(),
              std::type_identity_t<T> hi = std::numeric_limits<T>::max()) {
    std::string_view v;
    return value(v) && parse_number(v, out) && out >= lo && out <= hi;
  }

  // "<prog>: bad argument '<the argument we are at>'" on stderr (that is the
  // value once the option has taken the next argument).
  void complain(std::string_view prog) const {
    std::fprintf(stderr, "%.*s: bad argument '%s'\n", int(prog.size()), prog.data(), argv_[i_]);
  }

 private:
  int argc_;
  char** argv_;
  int i_ = 0;
  std::string_view name_, value_;
  bool has_value_ = false;
};

// The items of the option's value "a,b,c", each through parse(item, out):
// false for an empty item or one parse() refuses. Duplicates are dropped.
template <class T, class Parse>
bool parse_list(ArgWalker& w, std::vector<T>& out, Parse&& parse) {
  std::string_view s;
  if (!w.value(s)) return false;
  out.clear();
  while (true) {
    const auto comma = s.find(',');
    const std::string_view item = s.substr(0, comma);
    T v{};
    if (item.empty() || !parse(item, v)) return false;
    if (std::find(out.begin(), out.end(), v) == out.end()) out.push_back(v);
    if (comma == std::string_view::npos) return true;
    s.remove_prefix(comma + 1);
  }
}

// --pin: every forked child runs on one CPU of the parent's set: the child
// whose `who` is < 0 (the consumer, the owner) on the last, the others (the
// producers) round-robin on the rest, so that no two share a core when there
// are enough. Unpinned by default: other work may run on a small machine.
// A child's `who` picks its CPU unless its spawn says otherwise (pin_as): a
// benchmark whose roles are not "one consumer (< 0), producers (>= 0)" (the
// round trip's pinger 0 and echoer 1) names them so that no two share one.
inline constexpr std::int32_t kPinAsWho = INT32_MIN;
inline bool& pin_children() {
  static bool on = false;
  return on;
}
inline void pin_child(std::int32_t who) {
  cpu_set_t allowed;
  if (::sched_getaffinity(0, sizeof allowed, &allowed) != 0) return;
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &allowed)) cpus.push_back(c);
  if (cpus.size() < 2) return;
  const int cpu = who < 0 ? cpus.back() : cpus[std::size_t(who) % (cpus.size() - 1)];
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  if (::sched_setaffinity(0, sizeof one, &one) != 0) throw bench_failure(errno_text("sched_setaffinity"));
}

// The options every benchmark has; its own Args derive from this.
struct CommonArgs {
  int reps = 5;             // --reps R: runs per configuration (1..1000)
  int timeout_s = 120;      // --timeout S: the watchdog of a run (>= 1)
  bool quick = false;       // --quick: a smoke test with small counts (unless they are given)
  bool verbose = false;     // --verbose, -v
  std::vector<std::string> given;  // every option on the command line

  // With --quick, `value` becomes `small` unless `option` was given.
  template <class T, class U>
  void quick_default(T& value, std::string_view option, U small) const {
    if (quick && std::find(given.begin(), given.end(), option) == given.end()) value = static_cast<T>(small);
  }
};

// Parses the command line into `common` and the benchmark's own options:
// -h/--help prints usage(stdout) and exits with status 0; the options of
// CommonArgs are set in `common`; every other option goes to option(w) (the
// option is w.name()), which takes its value from w and returns false for an
// unknown option or a bad value. Then "<prog>: bad argument '...'" and
// usage(stderr) go to stderr, and the result is false.
template <class Option>
bool parse_options(std::string_view prog, int argc, char** argv, void (*usage)(std::FILE*), CommonArgs& common,
                   Option&& option) {
  ArgWalker w(argc, argv);
  while (w.next()) {
    const std::string_view arg = w.name();
    common.given.emplace_back(arg);
    bool ok = true;
    if (arg == "-h" || arg == "--help") {
      usage(stdout);
      std::exit(0);
    } else if (arg == "--reps") {
      ok = w.number(common.reps, 1, 1000);
    } else if (arg == "--timeout") {
      ok = w.number(common.timeout_s, 1);
    } else if (arg == "--quick") {
      common.quick = true;
    } else if (arg == "--verbose" || arg == "-v") {
      common.verbose = true;
    } else if (arg == "--pin") {
      pin_children() = true;  // read by Children::spawn, which has no Args
    } else {
      ok = option(w);
    }
    if (!ok) {
      w.complain(prog);
      usage(stderr);
      return false;
    }
  }
  return true;
}

// ===========================================================================
// System limits and POSIX message queues
// ===========================================================================

// A positive number in a /proc file (a system limit), or `fallback`. The
// benchmarks never change system settings.
inline std::uint32_t read_proc_number(const char* path, std::uint32_t fallback) {
  std::FILE* f = std::fopen(path, "re");
  if (f == nullptr) return fallback;
  unsigned long v = 0;
  const bool ok = std::fscanf(f, "%lu", &v) == 1;
  std::fclose(f);
  return ok && v > 0 ? static_cast<std::uint32_t>(std::min<unsigned long>(v, UINT32_MAX)) : fallback;
}

// The most messages a POSIX message queue may hold here (fs.mqueue.msg_max).
inline std::uint32_t posix_mq_msg_max() { return read_proc_number("/proc/sys/fs/mqueue/msg_max", 10); }

// Creates the POSIX message queue `name` ("/..."; it must not exist) of
// `depth` messages of `size` bytes, and closes it: the queue lives on until
// mq_unlink. Returns 0, or the errno of mq_open.
inline int create_posix_mq(const std::string& name, long depth, std::size_t size) {
  mq_attr attr{};
  attr.mq_maxmsg = depth;
  attr.mq_msgsize = static_cast<long>(size);
  const mqd_t q = ::mq_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600, &attr);
  if (q == static_cast<mqd_t>(-1)) return errno;
  ::mq_close(q);
  return 0;
}

// ===========================================================================
// Cleanup on fatal signals (everything the handler calls is async-signal-safe)
// ===========================================================================
// TrackedName registers the names it owns and Children the pids of the
// children, so that SIGINT/SIGTERM/SIGHUP/SIGQUIT still kill and reap the
// children and remove the names. unlink(2) and the mq_unlink system call are
// async-signal-safe (on Linux shm_unlink(name) is unlink("/dev/shm/name")).

inline constexpr int kMaxTracked = 16;
inline constexpr int kMaxChildren = 80;  // 64 producers (throughput.cpp --producers) and more
inline constexpr std::size_t kTrackedNameMax = 256;
inline char g_tracked_name[kMaxTracked][kTrackedNameMax];
inline volatile std::sig_atomic_t g_tracked_kind[kMaxTracked];  // 0: unused, else a TrackedName::kind_t
inline volatile std::sig_atomic_t g_child_pid[kMaxChildren];      // 0: unused
inline void (*g_fatal_signal_hook)() = nullptr;                   // the program's own cleanup, if any
inline constexpr int kMaxDaemons = 8;
inline volatile std::sig_atomic_t g_daemon_pid[kMaxDaemons];  // 0: unused (class Daemon)
inline constexpr int kDaemonStopTimeoutS = 10;                 // SIGTERM -> exit, else SIGKILL

inline void sleep_ms(long ms) {
  timespec ts{ms / 1000, (ms % 1000) * 1'000'000L};
  while (::nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

// SIGTERM, SIGKILL after kDaemonStopTimeoutS; reaped (async-signal-safe).
inline void stop_pid_on_signal(pid_t pid) {
  ::kill(pid, SIGTERM);
  for (int ms = 0; ms < kDaemonStopTimeoutS * 1000; ms += 10) {
    if (::waitpid(pid, nullptr, WNOHANG) == pid) return;
    sleep_ms(10);
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
}

// Removes a path, or a POSIX message queue "/name" (the system call takes the
// name without its '/'; mq_unlink(3) is not on the async-signal-safe list).
inline void unlink_name(int kind, const char* name) noexcept {
  if (kind == 1) ::unlink(name);
  if (kind == 2 && name[0] == '/') ::syscall(SYS_mq_unlink, name + 1);
}

extern "C" inline void on_fatal_signal(int sig) {
  for (int i = 0; i < kMaxChildren; ++i)
    if (g_child_pid[i] > 0) ::kill(static_cast<pid_t>(g_child_pid[i]), SIGKILL);
  for (int i = 0; i < kMaxChildren; ++i)  // reap them: no zombies left to init
    if (g_child_pid[i] > 0) ::waitpid(static_cast<pid_t>(g_child_pid[i]), nullptr, 0);
  for (int i = kMaxDaemons - 1; i >= 0; --i)  // the last started first (the bridges before their server)
    if (g_daemon_pid[i] > 0) stop_pid_on_signal(static_cast<pid_t>(g_daemon_pid[i]));
  for (int i = 0; i < kMaxTracked; ++i) unlink_name(g_tracked_kind[i], g_tracked_name[i]);
  if (g_fatal_signal_hook != nullptr) g_fatal_signal_hook();
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

inline constexpr int kFatalSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};

// `hook`: more cleanup for the handler, after the children, the daemons and
// the names (iceoryx.cpp: RouDi's paths); it must be async-signal-safe.
inline void install_signal_handlers(void (*hook)() = nullptr) {
  g_fatal_signal_hook = hook;
  struct sigaction sa {};
  sa.sa_handler = on_fatal_signal;
  sigemptyset(&sa.sa_mask);
  for (int s : kFatalSignals) ::sigaction(s, &sa, nullptr);
}

inline void reset_signal_handlers() {
  for (int s : kFatalSignals) ::signal(s, SIG_DFL);
}

// Owns a name: a path (a /dev/shm segment, a socket file) or a POSIX message
// queue name ("/x"). Unlinks it when created (a stale one of the same name),
// on destruction, and from the signal handler while it exists.
class TrackedName {
 public:
  enum kind_t { path = 1, mqueue = 2 };
  explicit TrackedName(std::string name, kind_t kind = path) : name_(std::move(name)), kind_(kind) {
    if (name_.size() >= kTrackedNameMax) throw bench_failure("name too long to track: " + name_);
    unlink_name(kind_, name_.c_str());
    for (int i = 0; i < kMaxTracked && slot_ < 0; ++i) {
      if (g_tracked_kind[i] != 0) continue;
      std::memcpy(g_tracked_name[i], name_.c_str(), name_.size() + 1);
      std::atomic_signal_fence(std::memory_order_seq_cst);  // the name is complete before it is used
      g_tracked_kind[i] = kind_;
      slot_ = i;
    }
    if (slot_ < 0) throw bench_failure("too many names to track: " + name_);
  }
  ~TrackedName() {
    unlink_name(kind_, name_.c_str());
    g_tracked_kind[slot_] = 0;
  }
  TrackedName(const TrackedName&) = delete;
  TrackedName& operator=(const TrackedName&) = delete;

 private:
  std::string name_;
  int kind_;
  int slot_ = -1;
};

// Removes a directory and everything in it (a temporary directory of ours).
inline bool remove_tree(const std::string& dir) {
  return ::nftw(dir.c_str(), [](const char* p, const struct stat*, int, FTW*) { return ::remove(p), 0; }, 16,
                FTW_DEPTH | FTW_PHYS) == 0;
}

// Removes the entries of `dir` whose name contains `marker` followed by the
// pid of a process that no longer exists (a directory: only one of ours, with
// all it holds): what a benchmark killed with
// SIGKILL left behind. A missing `dir` (/dev/mqueue is only there when the
// mqueue file system is mounted) has nothing to remove.
inline void remove_stale(std::string_view prog, const char* dir, std::string_view marker) {
  DIR* d = ::opendir(dir);
  if (d == nullptr) return;
  std::vector<std::string> stale;
  while (const dirent* e = ::readdir(d)) {
    const std::string_view n = e->d_name;
    const auto at = n.find(marker);
    if (at == std::string_view::npos) continue;
    const std::string_view rest = n.substr(at + marker.size());
    long pid = 0;
    const auto [p, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), pid);
    if (ec != std::errc{} || p == rest.data() || pid <= 0 || pid == ::getpid()) continue;
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;  // its process still exists
    stale.emplace_back(n);
  }
  ::closedir(d);
  for (const auto& n : stale) {
    const std::string path = std::string(dir) + "/" + n;
    struct stat st {};
    const bool our_dir = ::lstat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == ::geteuid();
    if (our_dir ? remove_tree(path) : ::unlink(path.c_str()) == 0)
      std::fprintf(stderr, "%.*s: removed stale %s\n", int(prog.size()), prog.data(), path.c_str());
  }
}

// ===========================================================================
// File descriptors, and the records children send to the parent
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

enum class rec_kind : std::int32_t { ready = 1, produced = 2, result = 3, failed = 4 };

// One report from a child. What `who` and the numbers mean is the
// benchmark's: the comments say who uses what.
struct Record {
  rec_kind kind{};
  std::int32_t who = 0;   // producer/publisher id, or the consumer's or round-trip role's
  std::uint64_t a = 0;    // produced: messages sent; result: messages received, or round trips measured
  std::uint64_t b = 0;    // produced: retries (throughput.cpp); ready: the chunk size (iceoryx.cpp)
  std::int64_t t_ns = 0;  // result (throughput): steady_clock time of the last message
  double us[6] = {};      // result (round trips): p50, p99, p99.9, min, max, mean in microseconds
  char text[200] = {};    // failed: what went wrong
};
static_assert(sizeof(Record) <= PIPE_BUF, "a record must be written atomically");

inline Record make_record(rec_kind kind, std::int32_t who, std::uint64_t a = 0, std::uint64_t b = 0) {
  Record r;
  r.kind = kind;
  r.who = who;
  r.a = a;
  r.b = b;
  return r;
}

inline void write_all(int fd, const void* p, std::size_t n, std::string_view what = "write to the parent") {
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

inline void send_record(int fd, const Record& r) { write_all(fd, &r, sizeof r); }

// Blocks until the write end of `fd`'s pipe is closed everywhere (the
// parent's broadcast: nobody ever writes to these pipes, they only close).
inline void wait_for_eof(int fd) {
  char c;
  for (;;) {
    const ssize_t n = ::read(fd, &c, 1);
    if (n == 0) return;
    if (n < 0 && errno == EINTR) continue;
    throw bench_failure(n < 0 ? errno_text("read of the barrier pipe") : "unexpected byte on a barrier pipe");
  }
}

// A child's ends of its run's pipes (Run::child_ends).
struct ChildEnds {
  int report = -1;  // write: records to the parent
  int go = -1;      // read: EOF = start
  int done = -1;    // read: EOF = every producer has finished

  void send(const Record& r) const { send_record(report, r); }
  void send(rec_kind kind, std::int32_t who, std::uint64_t a = 0, std::uint64_t b = 0) const {
    send(make_record(kind, who, a, b));
  }
  // The start barrier, after the child's set-up: reports "ready" (with `b`
  // for the parent's log) and blocks until the parent releases every child.
  void ready_and_wait(std::int32_t who, std::uint64_t b = 0) const {
    send(rec_kind::ready, who, 0, b);
    wait_for_eof(go);
  }
};

// ===========================================================================
// The messages of the throughput runs, and their check
// ===========================================================================
// A message of S bytes (16 <= S <= kMaxCurveMsgSize): bytes 0..7 its
// sender's id, 8..15 its sequence number (0, 1, 2, ... per sender), the rest
// its sender's pattern. The sender writes all S bytes of every message.

inline constexpr std::size_t kMaxMsgSize = 1024;  // the largest size of the suite's own groups (inline buffers)
inline constexpr std::size_t kMinMsgSize = 16;    // id and sequence number, no pattern
inline constexpr std::size_t kMaxCurveMsgSize = std::size_t{1} << 20;  // run.sh --curves: up to 1 MiB (heap buffers)

inline unsigned char pattern_of(std::uint64_t id) noexcept { return static_cast<unsigned char>(0xA0 + (id & 0xF)); }

// Writes the message of sender `id` (sequence 0) into p[0..size).
inline void fill_message(unsigned char* p, std::size_t size, std::uint64_t id) noexcept {
  std::memset(p, pattern_of(id), size);
  std::memcpy(p, &id, sizeof id);
  const std::uint64_t seq = 0;
  std::memcpy(p + 8, &seq, sizeof seq);
}
inline void set_seq(unsigned char* p, std::uint64_t seq) noexcept { std::memcpy(p + 8, &seq, sizeof seq); }

// One sender's message template; set_seq() before each send.
// Messages of up to kMaxMsgSize bytes are built inline, larger ones on the heap.
struct MessageBuffer {
  alignas(64) unsigned char small[kMaxMsgSize];
  std::vector<unsigned char> big;
  unsigned char* bytes;
  std::size_t size;
  MessageBuffer(std::uint64_t id, std::size_t sz)
      : big(sz > kMaxMsgSize ? sz : 0), bytes(sz > kMaxMsgSize ? big.data() : small), size(sz) {
    fill_message(bytes, size, id);
  }
  MessageBuffer(const MessageBuffer&) = delete;
  MessageBuffer& operator=(const MessageBuffer&) = delete;
  void set_seq(std::uint64_t seq) noexcept { shmbench::set_seq(bytes, seq); }
};

// The consumer's check of every message: its size, a known sender id,
// exactly the next sequence number of that sender (every mechanism is FIFO
// per sender), and the sender's pattern in its last 8 bytes (a truncated or
// torn message fails). So a lost, duplicated, reordered, corrupted or extra
// message fails the run. `sender` names the senders in the messages.
class Checker {
 public:
  Checker(const std::vector<std::uint64_t>& per_sender, std::size_t size, std::string sender = "producer")
      : expected_(per_sender), next_(per_sender.size(), 0), size_(size), sender_(std::move(sender)) {
    for (auto n : per_sender) total_ += n;
    for (std::size_t i = 0; i < per_sender.size(); ++i) {
      std::uint64_t w;
      std::memset(&w, pattern_of(i), sizeof w);
      tail_.push_back(w);
    }
  }
  void on(const void* data, std::size_t size) {
    if (size != size_) fail("message of " + std::to_string(size) + " bytes, expected " + std::to_string(size_));
    const auto* p = static_cast<const unsigned char*>(data);
    std::uint64_t id = 0, seq = 0, tail = 0;
    std::memcpy(&id, p, sizeof id);
    std::memcpy(&seq, p + 8, sizeof seq);
    if (id >= next_.size()) fail("message from unknown " + sender_ + " id " + std::to_string(id));
    if (seq != next_[id] || seq >= expected_[id])
      fail(sender_ + " " + std::to_string(id) + ": got sequence " + std::to_string(seq) + ", expected " +
           std::to_string(next_[id]) + (expected_[id] == kOpen ? "" : " of " + std::to_string(expected_[id])) +
           " (a message was lost, duplicated, reordered or is extra)");
    if (size >= 24) std::memcpy(&tail, p + size - sizeof tail, sizeof tail);  // 16 B: no pattern to check
    if (size >= 24 && tail != tail_[id])
      fail(sender_ + " " + std::to_string(id) + ", sequence " + std::to_string(seq) + ": the last bytes are not the " +
           sender_ + "'s pattern (a torn or corrupted message)");
    ++next_[id];
    ++received_;
  }
  // One sender (id 0) whose count is not known in advance (bridge.cpp).
  static Checker open_ended(std::size_t size, std::string sender = "sender") { return {{kOpen}, size, std::move(sender)}; }
  bool complete() const noexcept { return received_ == total_; }
  std::uint64_t received() const noexcept { return received_; }
  [[noreturn]] void fail(const std::string& what) const {
    throw bench_failure("after " + std::to_string(received_) +
                        (total_ >= kOpen ? "" : " of " + std::to_string(total_)) + " messages: " + what);
  }

 private:
  static constexpr std::uint64_t kOpen = std::numeric_limits<std::uint64_t>::max();
  std::vector<std::uint64_t> expected_;
  std::vector<std::uint64_t> next_;
  std::vector<std::uint64_t> tail_;
  std::size_t size_;
  std::string sender_;
  std::uint64_t received_ = 0;
  std::uint64_t total_ = 0;
};

// `total` messages split across `senders` as evenly as possible.
inline std::vector<std::uint64_t> split_evenly(std::uint64_t total, int senders) {
  const auto n = static_cast<std::uint64_t>(senders);
  std::vector<std::uint64_t> out;
  for (std::uint64_t i = 0; i < n; ++i) out.push_back(total / n + (i < total % n ? 1 : 0));
  return out;
}

// The consumer's end of a throughput run, once check.complete(): reads the
// time of the last message, waits until every producer has finished ("done"),
// checks that nothing more arrives (nothing_more() is true when a
// non-blocking receive finds nothing), and reports the result.
template <class NothingMore>
void finish_consumer(const ChildEnds& ends, const Checker& check, NothingMore&& nothing_more) {
  const std::int64_t t_end = now_ns();
  wait_for_eof(ends.done);  // every producer has sent its last message
  if (!nothing_more()) check.fail("messages arrived after the last expected one");
  Record r = make_record(rec_kind::result, -1, check.received());
  r.t_ns = t_end;
  ends.send(r);
}

// ===========================================================================
// The parent: children and one run
// ===========================================================================

// How a process ended, for messages ("exited with status 3").
inline std::string describe_status(int st) {
  if (WIFSIGNALED(st)) return "was killed by signal " + std::to_string(WTERMSIG(st)) + " (" + strsignal(WTERMSIG(st)) + ")";
  return "exited with status " + std::to_string(WEXITSTATUS(st));
}

// How a child leaves after its body: _exit (nothing of the parent's process
// runs again in it) or exit (atexit handlers and static destructors run:
// iceoryx's runtime unregisters from RouDi).
enum class child_exit { immediate, normal };

// The children of one run. The destructor kills and reaps every child that
// has not been reaped, so a failing run leaves no process behind.
class Children {
 public:
  explicit Children(child_exit how) : how_(how) {}
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

  // Forks a child that closes `close_in_child` and runs body(); it reports an
  // exception as a `failed` record and never returns into the parent's code.
  template <class Body>
  void spawn(std::string role, int report_fd, const std::vector<int>& close_in_child, std::int32_t who, Body&& body,
             std::int32_t pin_as = kPinAsWho) {
    std::fflush(nullptr);  // nothing buffered may be written twice
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    if (pid < 0) throw bench_failure(errno_text("fork"));
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // children die with the parent
      if (::getppid() != parent) ::_exit(90);
      reset_signal_handlers();
      for (int fd : close_in_child) ::close(fd);
      int rc = 0;
      try {
        if (pin_children()) pin_child(pin_as == kPinAsWho ? who : pin_as);
        body();
      } catch (const std::exception& e) {
        rc = 1;
        try {
          Record r = make_record(rec_kind::failed, who);
          const std::string text = role + ": " + e.what();
          std::memcpy(r.text, text.data(), std::min(text.size(), sizeof r.text - 1));
          send_record(report_fd, r);
        } catch (...) {
        }
      } catch (...) {
        rc = 1;
      }
      if (how_ == child_exit::normal) std::exit(rc);
      ::_exit(rc);
    }
    kids_.push_back({pid, std::move(role), false});
    track(pid);
  }

  // Reaps children that have exited; throws if one died abnormally.
  void check() {
    for (auto& k : kids_) {
      if (k.reaped) continue;
      int st = 0;
      if (::waitpid(k.pid, &st, WNOHANG) != k.pid) continue;
      k.reaped = true;
      untrack(k.pid);
      if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0)) throw bench_failure(k.role + " " + describe_status(st));
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
      if (r == k.pid && !(WIFEXITED(st) && WEXITSTATUS(st) == 0)) throw bench_failure(k.role + " " + describe_status(st));
    }
  }

 private:
  struct Kid {
    pid_t pid;
    std::string role;
    bool reaped;
  };
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
  child_exit how_;
  std::vector<Kid> kids_;
};

// The parent's side of one run (see ONE RUN at the top): the report, go and
// done pipes, the children and the watchdog. Declare it after whatever the
// children use (segments, queues): its destructor kills and reaps them first.
class Run {
 public:
  explicit Run(child_exit how = child_exit::immediate) : kids_(how) {}

  // What every child needs to report and to wait at the barriers.
  ChildEnds child_ends() const { return {report_.w.get(), go_.r.get(), done_.r.get()}; }

  // Forks a child (see Children::spawn); it closes the parent's ends of the
  // pipes and `close_also`.
  template <class Body>
  void spawn(std::string role, std::int32_t who, Body&& body, std::vector<int> close_also = {},
             std::int32_t pin_as = kPinAsWho) {
    close_also.insert(close_also.end(), {report_.r.get(), go_.w.get(), done_.w.get()});
    kids_.spawn(std::move(role), report_.w.get(), close_also, who, std::forward<Body>(body), pin_as);
  }

  // While waiting for reports, also serve `fd`: serve() is called whenever it
  // is readable (iceoryx.cpp: RouDi's output, which must not fill its pipe).
  void serve_meanwhile(int fd, std::function<void()> serve) {
    serve_fd_ = fd;
    serve_ = std::move(serve);
  }

  // Every child is spawned: only the children keep their ends of the pipes
  // now (EOF on the report pipe means every child has exited), and the
  // watchdog starts: the run fails if it is not over within timeout_s.
  void watch(int timeout_s) {
    report_.w.close();
    go_.r.close();
    done_.r.close();
    start_watchdog(timeout_s);
  }
  // Only the watchdog, while more children are to come (boxes.cpp).
  void start_watchdog(int timeout_s) { deadline_ = bench_clock::now() + std::chrono::seconds(timeout_s); }

  // The next record of any child (its own protocol: boxes.cpp).
  Record next() {
    Record rec;
    if (!read_record(rec)) throw bench_failure("a child exited without reporting");
    return rec;
  }

  // 1. Set-up handshake: `n` children have done their set-up. Returns their
  //    "ready" records.
  std::vector<Record> wait_ready(int n) {
    std::vector<Record> ready;
    Record rec;
    while (static_cast<int>(ready.size()) < n) {
      if (!read_record(rec)) throw bench_failure("children exited during set-up");
      if (rec.kind != rec_kind::ready) throw bench_failure("unexpected report during set-up");
      ready.push_back(rec);
    }
    return ready;
  }

  // 2. Release: reads the clock (returned: t_release), then every child wakes
  //    on EOF of "go".
  std::int64_t release() {
    const std::int64_t t_release = now_ns();
    go_.w.close();
    return t_release;
  }

  // 3. Waits for one "produced" record of each of `producers` children
  //    (closing "done" after the last: the consumer may then check that
  //    nothing more arrives) and for the one "result".
  struct Finished {
    std::uint64_t sent = 0;     // the sum of the producers' counts
    std::uint64_t retries = 0;  // the sum of their retries
    Record result;
  };
  Finished wait_finished(int producers) {
    Finished f;
    int produced = 0;
    bool have_result = false;
    Record rec;
    while (produced < producers || !have_result) {
      if (!read_record(rec)) throw bench_failure("children exited before reporting");
      if (rec.kind == rec_kind::produced && produced < producers) {
        f.sent += rec.a;
        f.retries += rec.b;
        if (++produced == producers) done_.w.close();
      } else if (rec.kind == rec_kind::result && !have_result) {
        f.result = rec;
        have_result = true;
      } else {
        throw bench_failure("unexpected report during the run");
      }
    }
    return f;
  }

  // 4. Every child exits (EOF on the report pipe) with status 0.
  void wait_exit() {
    Record rec;
    while (read_record(rec)) throw bench_failure("unexpected report after the run");
    kids_.reap_all();
  }

 private:
  // Reads one record from the report pipe. Returns false at EOF (every child
  // has closed its end, i.e. exited). Throws at the deadline, when a child
  // died without reporting, and on a `failed` record. The 250 ms poll slices
  // are only for the watchdog.
  bool read_record(Record& r) {
    char* p = reinterpret_cast<char*>(&r);
    std::size_t got = 0;
    while (got < sizeof r) {
      const auto now = bench_clock::now();
      if (now >= deadline_) throw bench_failure("watchdog: the run did not finish in time (see --timeout)");
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - now).count();
      pollfd pfd[2] = {{report_.r.get(), POLLIN, 0}, {serve_fd_, POLLIN, 0}};  // poll ignores fd -1
      const int rc = ::poll(pfd, 2, static_cast<int>(std::min<long long>(250, left + 1)));
      if (rc < 0) {
        if (errno == EINTR) continue;
        throw bench_failure(errno_text("poll"));
      }
      if (pfd[1].revents != 0) serve_();
      if (pfd[0].revents == 0) {
        kids_.check();
        continue;
      }
      const ssize_t n = ::read(report_.r.get(), p + got, sizeof r - got);
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

  Pipe report_, go_, done_;
  Children kids_;  // after the pipes: destroyed (children killed and reaped) before they close
  bench_clock::time_point deadline_{};
  int serve_fd_ = -1;
  std::function<void()> serve_;
};

// ===========================================================================
// Programs the benchmark starts (fork + exec) and stops
// ===========================================================================
// nats-server and shmbox-bridge (bridge.cpp), iox-roudi (iceoryx.cpp), the
// pool's supervisor (pool.cpp). A Daemon is in g_daemon_pid while it runs, so
// that the fatal-signal handler stops it (SIGTERM, SIGKILL after
// kDaemonStopTimeoutS); its destructor kills (SIGKILL) and reaps it.

// An executable `name` in $PATH, /usr/sbin, /usr/local/sbin or /usr/local/bin; "" if none.
inline std::string find_in_path(const char* name) {
  const char* path = std::getenv("PATH");
  std::string dirs = path != nullptr ? path : "/usr/bin:/bin";
  dirs += ":/usr/sbin:/usr/local/sbin:/usr/local/bin";  // nats-server is in /usr/sbin on Debian
  std::string_view rest = dirs;
  while (!rest.empty()) {
    const auto colon = rest.find(':');
    const std::string dir(rest.substr(0, colon));
    rest = colon == std::string_view::npos ? std::string_view{} : rest.substr(colon + 1);
    const std::string cand = (dir.empty() ? "." : dir) + "/" + name;
    if (::access(cand.c_str(), X_OK) == 0) return cand;
  }
  return {};
}

// The path of this program (/proc/self/exe).
inline std::string self_path() {
  char buf[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) throw bench_failure(errno_text("readlink /proc/self/exe"));
  return std::string(buf, static_cast<std::size_t>(n));
}

// The last `lines` lines of a file (a log, for errors), joined by '|'.
inline std::string tail_of(const std::string& path, int lines = 8) {
  std::string t = read_text(path);
  while (!t.empty() && (t.back() == '\n' || t.back() == ' ')) t.pop_back();
  std::size_t at = t.size();
  for (int i = 0; i < lines && at != std::string::npos && at > 0; ++i) at = t.rfind('\n', at - 1);
  std::string out = at == std::string::npos ? t : t.substr(at + 1);
  for (auto& c : out)
    if (c == '\n') c = '|';
  return out.empty() ? "(no output)" : out;
}

class Daemon {
 public:
  static constexpr int kPipe = -2;       // start(): stdout (and stderr) into a pipe that read_out() reads
  static constexpr int kSameAsOut = -3;  // start(): stderr where stdout goes
  explicit Daemon(std::string name) : name_(std::move(name)) {}
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;
  ~Daemon() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    while (::waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
    }
    forget();
  }

  // Forks and execs argv[0] with stdin from /dev/null, stdout to `out` (an
  // fd, kPipe, or -1: /dev/null), stderr to `err` (an fd, kSameAsOut, or -1:
  // ours); the program gets `deathsig` when we die. `echo`: what read_out()
  // reads is also copied to our stderr. Only async-signal-safe calls in the child.
  void start(const std::vector<std::string>& args, int out, int err, int deathsig, bool echo = false) {
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    std::optional<Pipe> pipe;
    if (out == kPipe) pipe.emplace();
    const int out_fd = pipe ? pipe->w.get() : out;
    const int err_fd = err == kSameAsOut ? out_fd : err;
    echo_ = echo;
    text_.clear();
    std::fflush(nullptr);
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    if (pid < 0) throw bench_failure(errno_text("fork"));
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, deathsig);
      if (::getppid() != parent) ::_exit(90);
      reset_signal_handlers();
      ::signal(SIGPIPE, SIG_DFL);
      sigset_t none;
      sigemptyset(&none);
      ::sigprocmask(SIG_SETMASK, &none, nullptr);  // nats.c's threads may block signals; exec'd programs need them
      const int devnull = ::open("/dev/null", O_RDWR);
      if (devnull >= 0) ::dup2(devnull, STDIN_FILENO);
      ::dup2(out_fd >= 0 ? out_fd : devnull, STDOUT_FILENO);
      if (err_fd >= 0) ::dup2(err_fd, STDERR_FILENO);
      ::execv(argv[0], argv.data());
      static const char msg[] = "exec failed\n";
      (void)!::write(STDERR_FILENO, msg, sizeof msg - 1);
      ::_exit(127);
    }
    pid_ = pid;
    for (int i = 0; i < kMaxDaemons && slot_ < 0; ++i)
      if (g_daemon_pid[i] == 0) {
        g_daemon_pid[i] = pid;
        slot_ = i;
      }
    if (pipe) {
      out_ = std::move(pipe->r);
      ::fcntl(out_.get(), F_SETFL, ::fcntl(out_.get(), F_GETFL) | O_NONBLOCK);
    }
  }

  pid_t pid() const noexcept { return pid_; }
  const std::string& name() const noexcept { return name_; }
  // What read_out() has read (the last 64 KiB at most).
  std::string& text() noexcept { return text_; }
  const std::string& text() const noexcept { return text_; }
  int out_fd() const noexcept { return out_.get(); }  // its pipe (kPipe), -1 at EOF

  // Reads what its pipe holds, waiting up to `ms` for something. False at
  // EOF (it has exited), or without a pipe.
  bool read_out(int ms) {
    if (out_.get() < 0) return false;
    pollfd p{out_.get(), POLLIN, 0};
    if (::poll(&p, 1, std::max(ms, 0)) < 0 && errno != EINTR) throw bench_failure(errno_text("poll"));
    char buf[4096];
    for (;;) {
      const ssize_t n = ::read(out_.get(), buf, sizeof buf);
      if (n > 0) {
        if (echo_) std::fprintf(stderr, "[%s] %.*s", name_.c_str(), static_cast<int>(n), buf);
        text_.append(buf, static_cast<std::size_t>(n));
        if (text_.size() > 65536) text_.erase(0, text_.size() - 32768);
        continue;
      }
      if (n == 0) {
        out_.close();
        return false;
      }
      if (errno == EINTR) continue;
      return true;  // EAGAIN: all read
    }
  }

  // Its exit status if it has exited (then it is reaped), else nullopt.
  std::optional<int> exited() {
    int st = 0;
    if (pid_ <= 0 || ::waitpid(pid_, &st, WNOHANG) != pid_) return std::nullopt;
    forget();
    return st;
  }

  // SIGTERM, then waits up to `timeout` (reading its pipe), then SIGKILL;
  // reaped. Returns its exit status (nullopt if it had to be killed, or was
  // not running).
  std::optional<int> stop(std::chrono::milliseconds timeout = std::chrono::seconds(kDaemonStopTimeoutS)) {
    if (pid_ <= 0) return std::nullopt;
    ::kill(pid_, SIGTERM);
    const auto deadline = bench_clock::now() + timeout;
    while (bench_clock::now() < deadline) {
      if (!read_out(10) && out_.get() < 0 && pid_ > 0) sleep_ms(5);
      if (const auto st = exited()) {
        while (read_out(0)) {
        }
        return st;
      }
    }
    ::kill(pid_, SIGKILL);
    while (::waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
    }
    forget();
    return std::nullopt;
  }

 private:
  void forget() noexcept {
    if (slot_ >= 0) g_daemon_pid[slot_] = 0;
    slot_ = -1;
    pid_ = -1;
  }
  std::string name_;
  pid_t pid_ = -1;
  int slot_ = -1;
  bool echo_ = false;
  Fd out_;
  std::string text_;
};

}  // namespace shmbench
