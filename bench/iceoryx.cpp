// bench/iceoryx.cpp - shmbox-bench-iceoryx: Eclipse iceoryx 2.0 (Debian packages
// iceoryx, libiceoryx-posh-dev) measured like the shmbox benchmarks, in
// separate processes, printed as rows (bench/rows.hpp):
//   * throughput   tput-64-1p, tput-64-4p, tput-1k-1p, tput-1k-4p  ("iceoryx")
//   * round trips  rtt-busy-64, rtt-busy-1k ("iceoryx": both sides busy-poll)
//                  rtt-sleep-64 ("iceoryx-waitset": both sides block in a WaitSet)
//
// METHOD
// * RouDi. iceoryx needs its broker, iox-roudi. The benchmark process (the
//   parent) starts it itself (fork + exec, stdout/stderr into a pipe, options
//   "-m off": no keep-alive monitoring, so a child starved of CPU on a busy
//   machine is never declared dead; "-k 5": at most 5 s for its shutdown) and
//   waits until it prints "RouDi is ready for clients" (a handshake, bounded by
//   --timeout; it prints that line with std::cout, whatever the log level).
//   If iox-roudi is missing, or exits before it is ready (another RouDi holds
//   /tmp/iox-unique-roudi.lock, for instance), every group is a skip row and
//   the exit status is 0. Its built-in memory configuration is used (or
//   /etc/iceoryx/roudi_config.toml when that exists): mempools of 128 B and
//   1 KiB user payload, so a 64 B / 1 KiB message takes one 128 B / 1 KiB
//   pool chunk (plus iceoryx's 40-byte chunk header).
//   At the end, on failure, and on SIGINT/SIGTERM/SIGHUP the parent stops it:
//   SIGTERM, then SIGKILL after 10 s, waitpid. RouDi also gets
//   PR_SET_PDEATHSIG(SIGTERM), so it shuts down when we are killed. (After a
//   failed run, whose children are SIGKILLed, RouDi may not stop cleanly:
//   iceoryx 2.0.3 aborts in its shutdown when a registered process is already
//   gone (POSH__ROUDI_PROCESS_SHUTDOWN_FAILED), and hangs removing the ports
//   of a process that died inside publish() holding its port's mutex, which
//   is not robust. The 10 s bound and the cleanup below cover both.)
// * Processes. The parent only orchestrates: for every measured run it forks
//   the processes of that run and reads what they report through a pipe. Only
//   the children call PoshRuntime::initRuntime, after fork, with a unique name
//   (shmbench-ice-<parent pid>-<run>-<role>); the parent never initialises
//   iceoryx. Children die with the parent (PR_SET_PDEATHSIG), their stdout is
//   redirected to stderr (iceoryx's own messages never mix with the rows), and
//   they leave through exit(), so the runtime unregisters from RouDi.
// * Services. Every run uses its own service instance ("shmbench",
//   "<kind>-<pid>-<run>", event), so nothing of an earlier run can connect.
//   Untyped API: UntypedPublisher::loan/publish, UntypedSubscriber::take/
//   release. The payload size is checked through the chunk header.
// * No loss. Subscribers use queueCapacity 256 (MAX_SUBSCRIBER_QUEUE_CAPACITY
//   of this build) and QueueFullPolicy::BLOCK_PRODUCER; publishers use
//   ConsumerTooSlowPolicy::WAIT_FOR_CONSUMER (2.0's name for "wait for
//   subscriber"): a publish into a full queue waits (iceoryx busy-waits with
//   std::this_thread::yield()) instead of dropping the oldest message.
// * Set-up. A child reports "ready" only when its ports are connected: a
//   publisher when hasSubscribers(), a subscriber when SUBSCRIBED. iceoryx 2.0
//   has no notification for that (RouDi connects ports in its discovery loop),
//   so set-up polls these states every millisecond, bounded by a deadline, as
//   iceoryx's own iceperf does. Set-up is never timed.
// * Start barrier. When every child is ready, the parent reads steady_clock
//   (t_release) and closes the write end of the "go" pipe; every child is
//   blocked in read() on it and wakes on EOF. No sleep synchronises anything.
// * Throughput. Every publisher posts its share of N messages (--messages,
//   split as evenly as possible; 1 KiB runs use N/2, said in the note). A
//   message: loan a chunk, write the payload (first 16 bytes: publisher id,
//   sequence number; the rest a pattern), publish. The subscriber busy-polls
//   take() (sched_yield() when nothing is there: up to 5 busy processes share
//   the CPUs) and checks every message: size, known publisher id, exactly the
//   next sequence number of that publisher, the pattern's last byte; then
//   release(). A lost, duplicated, reordered or extra message fails the
//   benchmark (exit 1). 4 publishers: this Debian build is m:n
//   (build::CommunicationPolicy = ManyToManyPolicy), so 4 publisher processes
//   offer ONE service and one subscriber reads it. The run's time is from
//   t_release to the subscriber's steady_clock after the last message; after
//   every publisher has reported "finished" the subscriber also checks that
//   nothing more arrives.
// * Round trips. Process A publishes on "ping", process B takes it, loans a
//   chunk on "pong", copies the payload into it, releases the ping chunk and
//   publishes (iceoryx cannot re-publish a received chunk). A's time of one
//   round trip: steady_clock before its loan to steady_clock right after its
//   take() returned the answer (A then checks size and sequence, and
//   releases). Busy: both take() in a spin loop. WaitSet: both attach their
//   subscriber (SubscriberState::HAS_DATA) to a WaitSet and block in wait()
//   whenever take() finds nothing. Per run --roundtrips (default 20,000)
//   after --warmup (2,000); A computes p50/p99/p99.9 (nearest rank) and
//   reports them. Rows: the median over the repetitions of each percentile,
//   with its min/max across the repetitions.
// * Repetitions. Every configuration runs --reps times, interleaved (rep 1 of
//   everything, then rep 2, ...), each run with fresh processes and services.
// * Watchdog. poll() timeouts in the parent only implement --timeout: a run
//   that takes longer fails, its children are killed and reaped.
// * Cleanup. RouDi removes what it made (/dev/shm/iceoryx_mgmt, the user
//   segment /dev/shm/<group name>, /tmp/roudi, /tmp/roudi.lock,
//   /tmp/iox-unique-roudi.lock) when it stops cleanly; a child removes its
//   socket /tmp/<runtime name> and its /tmp/<runtime name>.lock when it
//   exits. After RouDi is gone the parent removes whatever of those is left:
//   RouDi's paths only if our RouDi got ready (then they were its own) or if
//   they did not exist before we started it (so another RouDi's files are
//   never touched); a killed child's socket and lock file. Such child files of
//   earlier benchmark processes that no longer exist (a parent killed with
//   SIGKILL) are removed at start. SIGINT/SIGTERM/SIGHUP do the same cleanup
//   (async-signal-safe: kill, waitpid, nanosleep, unlink).
#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "iceoryx_hoofs/log/logmanager.hpp"
#include "iceoryx_posh/iceoryx_posh_deployment.hpp"
#include "iceoryx_posh/mepoo/chunk_header.hpp"
#include "iceoryx_posh/popo/untyped_publisher.hpp"
#include "iceoryx_posh/popo/untyped_subscriber.hpp"
#include "iceoryx_posh/popo/wait_set.hpp"
#include "iceoryx_posh/runtime/posh_runtime.hpp"
#include "rows.hpp"

namespace {

using bench_clock = std::chrono::steady_clock;
constexpr std::string_view kProg = "shmbox-bench-iceoryx";
constexpr std::string_view kMarker = "shmbench-ice-";  // every runtime name starts with it
constexpr std::uint64_t kQueueCapacity = iox::MAX_SUBSCRIBER_QUEUE_CAPACITY;  // 256 in Debian's build
constexpr bool kManyToMany = std::is_same_v<iox::build::CommunicationPolicy, iox::build::ManyToManyPolicy>;

struct bench_failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

std::string errno_text(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(bench_clock::now().time_since_epoch()).count();
}

// ===========================================================================
// Command line
// ===========================================================================

struct Args {
  std::uint64_t messages = 2'000'000;  // per 64 B throughput run; 1 KiB runs: half
  std::uint64_t roundtrips = 20'000;   // measured per round-trip run
  std::uint64_t warmup = 2'000;        // unmeasured round trips before them
  int reps = 5;
  int timeout_s = 120;  // watchdog per run (and for starting/stopping RouDi)
  std::string roudi = "/usr/bin/iox-roudi";
  std::string only;  // run only groups containing this text
  bool verbose = false;
};

void usage(std::FILE* to) {
  std::fprintf(to,
               "usage: shmbox-bench-iceoryx [--reps R] [--messages N] [--roundtrips N] [--warmup N] [--quick]\n"
               "                            [--timeout S] [--roudi PATH] [--only TEXT] [--verbose]\n"
               "  --reps R        runs per configuration; rows show median and min/max (default 5)\n"
               "  --messages N    messages per 64-byte throughput run; 1 KiB runs use N/2 (default 2000000)\n"
               "  --roundtrips N  measured round trips per run (default 20000)\n"
               "  --warmup N      unmeasured round trips before them (default 2000)\n"
               "  --quick         smoke test: N=100000, 2000 round trips, 200 warm-up, 1 rep unless --reps\n"
               "  --timeout S     watchdog: a run (or RouDi's start) taking longer fails (default 120)\n"
               "  --roudi PATH    the RouDi binary (default /usr/bin/iox-roudi, else iox-roudi in PATH)\n"
               "  --only TEXT     run only the groups containing TEXT (e.g. tput, rtt-busy-64)\n"
               "  --verbose       print every run and RouDi's output on stderr\n"
               "Rows (bench/rows.hpp) go to stdout, progress to stderr.\n");
}

template <class T>
bool parse_number(std::string_view s, T& out) {
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc{} && p == s.data() + s.size();
}

std::optional<Args> parse_args(int argc, char** argv) {
  Args a;
  bool quick = false, reps_given = false, n_given = false, rt_given = false, wu_given = false;
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i], value;
    bool has_value = false;
    if (const auto eq = arg.find('='); arg.starts_with("--") && eq != std::string_view::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
      has_value = true;
    }
    auto take = [&]() -> bool {
      if (has_value) return true;
      if (i + 1 >= argc) return false;
      value = argv[++i];
      return true;
    };
    bool ok = true;
    if (arg == "-h" || arg == "--help") {
      usage(stdout);
      std::exit(0);
    } else if (arg == "--reps") {
      ok = take() && parse_number(value, a.reps) && a.reps >= 1 && a.reps <= 1000;
      reps_given = true;
    } else if (arg == "--messages") {
      ok = take() && parse_number(value, a.messages) && a.messages >= 8;
      n_given = true;
    } else if (arg == "--roundtrips") {
      ok = take() && parse_number(value, a.roundtrips) && a.roundtrips >= 1;
      rt_given = true;
    } else if (arg == "--warmup") {
      ok = take() && parse_number(value, a.warmup);
      wu_given = true;
    } else if (arg == "--timeout") {
      ok = take() && parse_number(value, a.timeout_s) && a.timeout_s >= 1;
    } else if (arg == "--roudi") {
      ok = take() && !value.empty();
      a.roudi = std::string(value);
    } else if (arg == "--only") {
      ok = take();
      a.only = std::string(value);
    } else if (arg == "--quick") {
      quick = true;
    } else if (arg == "--verbose" || arg == "-v") {
      a.verbose = true;
    } else {
      ok = false;
    }
    if (!ok) {
      std::fprintf(stderr, "%s: bad argument '%s'\n", kProg.data(), argv[i]);
      usage(stderr);
      return std::nullopt;
    }
  }
  if (quick) {
    if (!n_given) a.messages = 100'000;
    if (!rt_given) a.roundtrips = 2'000;
    if (!wu_given) a.warmup = 200;
    if (!reps_given) a.reps = 1;
  }
  return a;
}

// ===========================================================================
// Cleanup on fatal signals (only async-signal-safe calls in the handler)
// ===========================================================================
// The parent registers RouDi, every child (with the path of its socket) and
// the RouDi paths it may remove, so that SIGINT/SIGTERM/SIGHUP still kill and
// reap everything and leave /dev/shm and /tmp as they were.

constexpr int kMaxChildren = 8;
constexpr int kMaxPaths = 8;
constexpr std::size_t kPathMax = 160;
volatile std::sig_atomic_t g_child_pid[kMaxChildren];
char g_child_sock[kMaxChildren][2][kPathMax];  // its socket and lock file
volatile std::sig_atomic_t g_roudi_pid;
char g_roudi_path[kMaxPaths][kPathMax];
volatile std::sig_atomic_t g_roudi_path_owned[kMaxPaths];
constexpr int kStopTimeoutS = 10;  // RouDi stops in milliseconds unless it is stuck (see METHOD)

void sleep_ms(long ms) {
  timespec ts{ms / 1000, (ms % 1000) * 1'000'000L};
  while (::nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

extern "C" void on_fatal_signal(int sig) {
  for (int i = 0; i < kMaxChildren; ++i)
    if (g_child_pid[i] > 0) ::kill(static_cast<pid_t>(g_child_pid[i]), SIGKILL);
  for (int i = 0; i < kMaxChildren; ++i)
    if (g_child_pid[i] > 0) {
      ::waitpid(static_cast<pid_t>(g_child_pid[i]), nullptr, 0);
      ::unlink(g_child_sock[i][0]);
      ::unlink(g_child_sock[i][1]);
    }
  if (const pid_t r = static_cast<pid_t>(g_roudi_pid); r > 0) {
    ::kill(r, SIGTERM);  // RouDi removes its segments, sockets and lock files
    bool gone = false;
    for (int ms = 0; ms < kStopTimeoutS * 1000 && !gone; ms += 10) {
      gone = ::waitpid(r, nullptr, WNOHANG) == r;
      if (!gone) sleep_ms(10);
    }
    if (!gone) {
      ::kill(r, SIGKILL);
      ::waitpid(r, nullptr, 0);
    }
    for (int i = 0; i < kMaxPaths; ++i)
      if (g_roudi_path_owned[i] != 0) ::unlink(g_roudi_path[i]);
  }
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

bool path_exists(const std::string& p) {
  struct stat st {};
  return ::lstat(p.c_str(), &st) == 0;
}

// What a runtime creates: its socket (IPC channel) and its lock file.
std::string socket_path(const std::string& runtime_name) { return "/tmp/" + runtime_name; }
std::string lock_path(const std::string& runtime_name) { return "/tmp/" + runtime_name + ".lock"; }

// Removes /tmp/shmbench-ice-<pid>-... sockets and lock files of benchmark processes that no
// longer exist (a parent killed with SIGKILL, for instance).
void remove_stale_sockets() {
  DIR* d = ::opendir("/tmp");
  if (d == nullptr) return;
  std::vector<std::string> stale;
  while (const dirent* e = ::readdir(d)) {
    const std::string_view n = e->d_name;
    if (!n.starts_with(kMarker)) continue;
    const std::string_view rest = n.substr(kMarker.size());
    long pid = 0;
    const auto [p, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), pid);
    if (ec != std::errc{} || p == rest.data() || pid <= 0 || pid == ::getpid()) continue;
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;
    stale.emplace_back(n);
  }
  ::closedir(d);
  for (const auto& n : stale)
    if (::unlink(("/tmp/" + n).c_str()) == 0)
      std::fprintf(stderr, "%s: removed stale /tmp/%s\n", kProg.data(), n.c_str());
}

// ===========================================================================
// Pipes and the records children send to the parent
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

// One report of a child; smaller than PIPE_BUF, so every write is atomic.
struct Record {
  rec_kind kind{};
  std::int32_t who = 0;     // publisher id, -1 subscriber / round-trip process A
  std::uint64_t a = 0;      // produced: messages published; result: messages / round trips
  std::uint64_t chunk = 0;  // ready: iceoryx chunk size of one message (bytes)
  std::int64_t t_ns = 0;    // result (throughput): steady_clock after the last message
  double q[3] = {0, 0, 0};  // result (round trips): p50, p99, p99.9 in microseconds
  char text[200] = {};      // failed: what went wrong
};
static_assert(sizeof(Record) <= PIPE_BUF);

void write_all(int fd, const void* p, std::size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    const ssize_t w = ::write(fd, c, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      throw bench_failure(errno_text("write to the parent"));
    }
    c += w;
    n -= static_cast<std::size_t>(w);
  }
}

void send_record(int fd, Record r, const std::string& text = {}) {
  const std::size_t n = std::min(text.size(), sizeof r.text - 1);
  if (n > 0) std::memcpy(r.text, text.data(), n);
  write_all(fd, &r, sizeof r);
}

Record make_record(rec_kind k, std::int32_t who) {
  Record r;
  r.kind = k;
  r.who = who;
  return r;
}

// Blocks until the write end of fd's pipe is closed everywhere (the parent's
// broadcast: nobody writes to these pipes, they are only closed).
void wait_for_eof(int fd) {
  char c;
  for (;;) {
    const ssize_t n = ::read(fd, &c, 1);
    if (n == 0) return;
    if (n < 0 && errno == EINTR) continue;
    throw bench_failure(n < 0 ? errno_text("read of a barrier pipe") : "unexpected byte on a barrier pipe");
  }
}

// ===========================================================================
// RouDi
// ===========================================================================

std::string strip_ansi(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\x1b') {  // ESC [ ... letter
      while (i < s.size() && !std::isalpha(static_cast<unsigned char>(s[i]))) ++i;
      continue;
    }
    if (s[i] != '\r') out += s[i];
  }
  return out;
}

class Roudi {
 public:
  // Starts iox-roudi and waits until it is ready. Returns why it could not be
  // started (the caller prints skip rows), or nullopt when it runs.
  std::optional<std::string> start(const Args& args) {
    verbose_ = args.verbose;
    std::string bin = args.roudi;
    if (::access(bin.c_str(), X_OK) != 0 && args.roudi == "/usr/bin/iox-roudi") bin = find_in_path("iox-roudi");
    if (bin.empty() || ::access(bin.c_str(), X_OK) != 0) return "iox-roudi not found (apt-get install iceoryx)";

    // The paths RouDi creates. We may remove one later only if it was not
    // there before, or if our RouDi got ready (then it owns them all).
    std::string group_name = "root";
    if (const struct group* g = ::getgrgid(::getegid()); g != nullptr && g->gr_name != nullptr) group_name = g->gr_name;
    const std::string paths[] = {"/dev/shm/iceoryx_mgmt", "/dev/shm/" + group_name, "/tmp/roudi", "/tmp/roudi.lock",
                                 "/tmp/iox-unique-roudi.lock"};
    int i = 0;
    for (const auto& p : paths) {
      std::snprintf(g_roudi_path[i], kPathMax, "%s", p.c_str());
      g_roudi_path_owned[i] = path_exists(p) ? 0 : 1;
      ++i;
    }

    Pipe out;
    std::fflush(nullptr);
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    if (pid < 0) throw bench_failure(errno_text("fork"));
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGTERM);  // a clean shutdown if we die
      if (::getppid() != parent) ::_exit(90);
      reset_signal_handlers();
      ::dup2(out.w.get(), STDOUT_FILENO);
      ::dup2(out.w.get(), STDERR_FILENO);
      const int devnull = ::open("/dev/null", O_RDONLY);
      if (devnull >= 0) ::dup2(devnull, STDIN_FILENO);
      ::execl(bin.c_str(), bin.c_str(), "-m", "off", "-k", "5", static_cast<char*>(nullptr));
      const std::string msg = errno_text(("exec " + bin).c_str()) + "\n";
      (void)!::write(STDERR_FILENO, msg.data(), msg.size());
      ::_exit(127);
    }
    pid_ = pid;
    g_roudi_pid = pid;
    out.w.close();
    log_ = std::move(out.r);
    ::fcntl(log_.get(), F_SETFL, ::fcntl(log_.get(), F_GETFL) | O_NONBLOCK);  // read_log() reads what is there

    // Handshake: its "ready" line, or EOF (it exited), or the deadline.
    const auto deadline = bench_clock::now() + std::chrono::seconds(args.timeout_s);
    while (log_text_.find("RouDi is ready for clients") == std::string::npos) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - bench_clock::now()).count();
      if (left <= 0) {
        stop();
        return "iox-roudi did not get ready within " + std::to_string(args.timeout_s) + " s";
      }
      pollfd pfd{log_.get(), POLLIN, 0};
      if (::poll(&pfd, 1, static_cast<int>(left)) < 0 && errno != EINTR) throw bench_failure(errno_text("poll"));
      if (!read_log()) {  // EOF: RouDi exited
        const std::string why = last_line();
        stop();
        return "iox-roudi exited at start: " + why;
      }
    }
    for (int k = 0; k < kMaxPaths; ++k) g_roudi_path_owned[k] = g_roudi_path[k][0] != '\0' ? 1 : 0;
    std::fprintf(stderr, "%s: started %s (pid %d), ready\n", kProg.data(), bin.c_str(), static_cast<int>(pid_));
    return std::nullopt;
  }

  int log_fd() const noexcept { return log_.get(); }

  // Reads what RouDi printed (we must keep its pipe from filling up). Returns
  // false at EOF, i.e. when RouDi has exited.
  bool read_log() {
    char buf[4096];
    for (;;) {
      const ssize_t n = ::read(log_.get(), buf, sizeof buf);
      if (n > 0) {
        if (verbose_) std::fprintf(stderr, "[iox-roudi] %.*s", static_cast<int>(n), buf);
        log_text_.append(buf, static_cast<std::size_t>(n));
        if (log_text_.size() > 16384) log_text_.erase(0, log_text_.size() - 8192);
        continue;
      }
      if (n == 0) return false;
      if (errno == EINTR) continue;
      return true;  // EAGAIN: all read
    }
  }

  // The most telling line of its output: the last Fatal, else Error, else
  // the last line, without timestamp and level.
  std::string last_line() const {
    std::vector<std::string> lines;
    const std::string t = strip_ansi(log_text_);
    for (std::size_t pos = 0; pos < t.size();) {
      std::size_t nl = t.find('\n', pos);
      if (nl == std::string::npos) nl = t.size();
      std::string l = t.substr(pos, nl - pos);
      while (!l.empty() && l.back() == ' ') l.pop_back();
      if (!l.empty()) lines.push_back(std::move(l));
      pos = nl + 1;
    }
    for (const char* level : {"[ Fatal ]", "[ Error ]"})
      for (auto it = lines.rbegin(); it != lines.rend(); ++it)
        if (const auto at = it->find(level); at != std::string::npos) {
          const auto msg = it->find("]: ", at);
          return msg == std::string::npos ? *it : it->substr(msg + 3);
        }
    return lines.empty() ? std::string("no output") : lines.back();
  }

  // SIGTERM; waits (EOF of its output, i.e. exit) until the deadline, then
  // SIGKILL; reaps it, then removes what it may have left behind.
  void stop() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGTERM);
    const auto deadline = bench_clock::now() + std::chrono::seconds(kStopTimeoutS);
    bool eof = false;
    while (!eof && log_.get() >= 0) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - bench_clock::now()).count();
      if (left <= 0) break;
      pollfd pfd{log_.get(), POLLIN, 0};
      if (::poll(&pfd, 1, static_cast<int>(left)) < 0 && errno != EINTR) break;
      eof = !read_log();
    }
    int st = 0;
    if (::waitpid(pid_, &st, WNOHANG) != pid_) {
      if (!eof) std::fprintf(stderr, "%s: iox-roudi did not stop in time, killing it\n", kProg.data());
      ::kill(pid_, SIGKILL);
      while (::waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
      }
    }
    g_roudi_pid = 0;
    pid_ = -1;
    log_.close();
    for (int i = 0; i < kMaxPaths; ++i) {
      if (g_roudi_path_owned[i] != 0 && ::unlink(g_roudi_path[i]) == 0)
        std::fprintf(stderr, "%s: removed %s left by iox-roudi\n", kProg.data(), g_roudi_path[i]);
      g_roudi_path_owned[i] = 0;
    }
  }

  ~Roudi() { stop(); }

 private:
  static std::string find_in_path(const char* name) {
    const char* path = std::getenv("PATH");
    std::string_view rest = path != nullptr ? path : "/usr/bin:/bin";
    while (!rest.empty()) {
      const auto colon = rest.find(':');
      const std::string dir(rest.substr(0, colon));
      rest = colon == std::string_view::npos ? std::string_view{} : rest.substr(colon + 1);
      const std::string cand = (dir.empty() ? "." : dir) + "/" + name;
      if (::access(cand.c_str(), X_OK) == 0) return cand;
    }
    return {};
  }

  pid_t pid_ = -1;
  Fd log_;
  std::string log_text_;
  bool verbose_ = false;
};

Roudi* g_roudi = nullptr;  // drained while the parent waits for reports

// ===========================================================================
// Children
// ===========================================================================

// The children of one run. The destructor kills and reaps every child not yet
// reaped and removes its socket, so a failing run leaves nothing behind.
class Children {
 public:
  Children() = default;
  Children(const Children&) = delete;
  Children& operator=(const Children&) = delete;
  ~Children() {
    for (auto& k : kids_)
      if (!k.reaped) ::kill(k.pid, SIGKILL);
    for (auto& k : kids_) {
      if (!k.reaped) {
        while (::waitpid(k.pid, nullptr, 0) < 0 && errno == EINTR) {
        }
        k.reaped = true;
      }
      untrack(k.pid);
      ::unlink(socket_path(k.runtime).c_str());  // normally removed by the child itself
      ::unlink(lock_path(k.runtime).c_str());
    }
  }

  // Forks a child: it initialises the iceoryx runtime under `runtime`, runs
  // body(), reports an exception as a `failed` record and leaves with exit(),
  // so that the runtime unregisters from RouDi.
  template <class Body>
  void spawn(const std::string& role, const std::string& runtime, int report_fd, const std::vector<int>& close_in_child,
             std::int32_t who, Body body) {
    std::fflush(nullptr);  // nothing buffered may be written twice
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    if (pid < 0) throw bench_failure(errno_text("fork"));
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(90);
      reset_signal_handlers();
      ::dup2(STDERR_FILENO, STDOUT_FILENO);  // iceoryx's messages must not mix with the rows
      for (int fd : close_in_child) ::close(fd);
      int rc = 0;
      try {
        // iceoryx's applications log at Verbose by default: warnings and errors only.
        iox::log::LogManager::GetLogManager().SetDefaultLogLevel(iox::log::LogLevel::kWarn,
                                                                 iox::log::LogLevelOutput::kHideLogLevel);
        iox::runtime::PoshRuntime::initRuntime(iox::RuntimeName_t(iox::cxx::TruncateToCapacity, runtime));
        body();  // its iceoryx objects are gone when it returns
      } catch (const std::exception& e) {
        rc = 1;
        try {
          send_record(report_fd, make_record(rec_kind::failed, who), role + ": " + e.what());
        } catch (...) {
        }
      } catch (...) {
        rc = 1;
      }
      std::exit(rc);  // runs the runtime's destructor: it unregisters from RouDi
    }
    kids_.push_back({pid, role, runtime, false});
    track(pid, runtime);
  }

  // Reaps children that have exited; throws if one died abnormally.
  void check() {
    for (auto& k : kids_) {
      if (k.reaped) continue;
      int st = 0;
      if (::waitpid(k.pid, &st, WNOHANG) != k.pid) continue;
      k.reaped = true;
      if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0)) throw bench_failure(k.role + " " + describe(st));
    }
  }

  void reap_all() {
    for (auto& k : kids_) {
      if (k.reaped) continue;
      int st = 0;
      pid_t r;
      while ((r = ::waitpid(k.pid, &st, 0)) < 0 && errno == EINTR) {
      }
      k.reaped = true;
      if (r == k.pid && !(WIFEXITED(st) && WEXITSTATUS(st) == 0)) throw bench_failure(k.role + " " + describe(st));
    }
  }

 private:
  struct Kid {
    pid_t pid;
    std::string role, runtime;
    bool reaped;
  };
  static std::string describe(int st) {
    if (WIFSIGNALED(st))
      return "was killed by signal " + std::to_string(WTERMSIG(st)) + " (" + strsignal(WTERMSIG(st)) + ")";
    return "exited with status " + std::to_string(WEXITSTATUS(st));
  }
  static void track(pid_t pid, const std::string& runtime) {
    for (int i = 0; i < kMaxChildren; ++i)
      if (g_child_pid[i] == 0) {
        std::snprintf(g_child_sock[i][0], kPathMax, "%s", socket_path(runtime).c_str());
        std::snprintf(g_child_sock[i][1], kPathMax, "%s", lock_path(runtime).c_str());
        std::atomic_signal_fence(std::memory_order_seq_cst);
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

// Reads one record from the report pipe; false at EOF (every child exited).
// Meanwhile drains RouDi's output. Throws at the deadline, when a child died
// without reporting, when RouDi exited, or on a `failed` record. The 250 ms
// poll slices are only for the watchdog.
bool read_record(int fd, Record& r, bench_clock::time_point deadline, Children& kids) {
  char* p = reinterpret_cast<char*>(&r);
  std::size_t got = 0;
  while (got < sizeof r) {
    const auto now = bench_clock::now();
    if (now >= deadline) throw bench_failure("watchdog: the run did not finish in time (see --timeout)");
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count();
    pollfd pfd[2] = {{fd, POLLIN, 0}, {g_roudi != nullptr ? g_roudi->log_fd() : -1, POLLIN, 0}};
    const int rc = ::poll(pfd, 2, static_cast<int>(std::min<long long>(250, left + 1)));
    if (rc < 0) {
      if (errno == EINTR) continue;
      throw bench_failure(errno_text("poll"));
    }
    if (pfd[1].revents != 0 && !g_roudi->read_log())
      throw bench_failure("iox-roudi exited during the run: " + g_roudi->last_line());
    if (pfd[0].revents == 0) {
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

// ===========================================================================
// What the children do
// ===========================================================================

// A child's view of its run; the fds are its ends of the parent's pipes.
struct ChildCtx {
  std::string instance;                     // service instance of this run
  std::size_t payload = 64;                 // bytes per message
  std::vector<std::uint64_t> per_producer;  // throughput: messages each publisher posts
  std::uint64_t roundtrips = 0, warmup = 0;
  bool waitset = false;  // round trips: block in a WaitSet
  int id = -1;           // publisher id; -1 subscriber / process A
  int report_fd = -1, go_fd = -1, done_fd = -1;
  int timeout_s = 120;
};

iox::capro::ServiceDescription service(const std::string& instance, const char* event) {
  return {"shmbench", iox::capro::IdString_t(iox::cxx::TruncateToCapacity, instance),
          iox::capro::IdString_t(iox::cxx::TruncateToCapacity, event)};
}

iox::popo::PublisherOptions publisher_options() {
  iox::popo::PublisherOptions o;
  o.subscriberTooSlowPolicy = iox::popo::ConsumerTooSlowPolicy::WAIT_FOR_CONSUMER;  // never drop
  return o;
}

iox::popo::SubscriberOptions subscriber_options() {
  iox::popo::SubscriberOptions o;
  o.queueCapacity = kQueueCapacity;
  o.queueFullPolicy = iox::popo::QueueFullPolicy::BLOCK_PRODUCER;  // never drop
  return o;
}

// Set-up only: iceoryx 2.0 has no notification for "connected", so poll.
template <class Cond>
void wait_connected(Cond cond, int timeout_s, const char* what) {
  const auto deadline = bench_clock::now() + std::chrono::seconds(timeout_s);
  while (!cond()) {
    if (bench_clock::now() > deadline) throw bench_failure(std::string("not connected in time: ") + what);
    sleep_ms(1);
  }
}

void* loan(iox::popo::UntypedPublisher& pub, std::size_t size) {
  auto r = pub.loan(static_cast<std::uint32_t>(size));
  if (r.has_error())
    throw bench_failure("loan failed, AllocationError " + std::to_string(static_cast<int>(r.get_error())));
  return r.value();
}

std::uint32_t payload_size(const void* p) { return iox::mepoo::ChunkHeader::fromUserPayload(p)->userPayloadSize(); }
std::uint32_t chunk_size(const void* p) { return iox::mepoo::ChunkHeader::fromUserPayload(p)->chunkSize(); }

// take(): a chunk, or nullptr when the queue is empty (anything else fails).
const void* try_take(iox::popo::UntypedSubscriber& sub) {
  auto r = sub.take();
  if (!r.has_error()) return r.value();
  if (r.get_error() == iox::popo::ChunkReceiveResult::NO_CHUNK_AVAILABLE) return nullptr;
  throw bench_failure("take failed: too many chunks held");
}

unsigned char pattern_byte(std::uint64_t id) { return static_cast<unsigned char>(0xA0 + (id & 0xF)); }

// The subscriber's check of every message (as bench/throughput.cpp).
class Checker {
 public:
  Checker(const std::vector<std::uint64_t>& per_producer, std::size_t payload)
      : expected_(per_producer), next_(per_producer.size(), 0), payload_(payload) {
    for (auto n : per_producer) total_ += n;
  }
  void on(const void* data) {
    const std::size_t size = payload_size(data);
    if (size != payload_) fail("message of " + std::to_string(size) + " bytes, expected " + std::to_string(payload_));
    const auto* b = static_cast<const unsigned char*>(data);
    std::uint64_t id = 0, seq = 0;
    std::memcpy(&id, b, sizeof id);
    std::memcpy(&seq, b + 8, sizeof seq);
    if (id >= next_.size()) fail("message from unknown publisher id " + std::to_string(id));
    if (seq != next_[id] || seq >= expected_[id])
      fail("publisher " + std::to_string(id) + ": got sequence " + std::to_string(seq) + ", expected " +
           std::to_string(next_[id]) + " of " + std::to_string(expected_[id]) +
           " (a message was lost, duplicated, reordered or is extra)");
    if (b[payload_ - 1] != pattern_byte(id)) fail("corrupt payload of publisher " + std::to_string(id));
    ++next_[id];
    ++received_;
  }
  bool complete() const noexcept { return received_ == total_; }
  std::uint64_t received() const noexcept { return received_; }
  [[noreturn]] void fail(const std::string& what) const {
    throw bench_failure("after " + std::to_string(received_) + " of " + std::to_string(total_) + " messages: " + what);
  }

 private:
  std::vector<std::uint64_t> expected_, next_;
  std::size_t payload_;
  std::uint64_t received_ = 0, total_ = 0;
};

// --- throughput ---------------------------------------------------------------

void tput_publisher(const ChildCtx& c) {
  iox::popo::UntypedPublisher pub(service(c.instance, "data"), publisher_options());
  wait_connected([&] { return pub.hasSubscribers(); }, c.timeout_s, "publisher");
  const auto id = static_cast<std::uint64_t>(c.id);
  const std::uint64_t count = c.per_producer[id];
  std::vector<unsigned char> msg(c.payload, pattern_byte(id));  // the template of every message
  std::memcpy(msg.data(), &id, sizeof id);
  Record ready = make_record(rec_kind::ready, c.id);
  {
    void* p = loan(pub, c.payload);  // the chunk size, for the log
    ready.chunk = chunk_size(p);
    pub.release(p);
  }
  send_record(c.report_fd, ready);
  wait_for_eof(c.go_fd);
  for (std::uint64_t seq = 0; seq < count; ++seq) {
    auto* p = static_cast<unsigned char*>(loan(pub, c.payload));
    std::memcpy(p, msg.data(), c.payload);
    std::memcpy(p + 8, &seq, sizeof seq);
    pub.publish(p);  // waits (yield loop) while the subscriber's queue is full
  }
  Record done = make_record(rec_kind::produced, c.id);
  done.a = count;
  send_record(c.report_fd, done);
}

void tput_subscriber(const ChildCtx& c) {
  iox::popo::UntypedSubscriber sub(service(c.instance, "data"), subscriber_options());
  wait_connected([&] { return sub.getSubscriptionState() == iox::SubscribeState::SUBSCRIBED; }, c.timeout_s,
                 "subscriber");
  Checker check(c.per_producer, c.payload);
  send_record(c.report_fd, make_record(rec_kind::ready, -1));
  wait_for_eof(c.go_fd);
  while (!check.complete()) {
    const void* p = try_take(sub);
    if (p == nullptr) {
      ::sched_yield();  // empty: let the publishers run (up to 5 busy processes)
      continue;
    }
    check.on(p);
    sub.release(p);
  }
  const std::int64_t t_end = now_ns();
  wait_for_eof(c.done_fd);  // every publisher has published its last message
  if (const void* p = try_take(sub)) {
    sub.release(p);
    check.fail("a message arrived after the last expected one");
  }
  Record r = make_record(rec_kind::result, -1);
  r.a = check.received();
  r.t_ns = t_end;
  send_record(c.report_fd, r);
}

// --- round trips ----------------------------------------------------------------

// Waits for the next chunk: spinning on take(), or blocking in the WaitSet.
const void* take_next(iox::popo::UntypedSubscriber& sub, iox::popo::WaitSet<>* ws) {
  for (;;) {
    if (const void* p = try_take(sub)) return p;
    if (ws != nullptr)
      (void)ws->wait();  // HAS_DATA is a state: no lost wake-up
    else
      __builtin_ia32_pause();
  }
}

// Process A: ping -> pong, times every round trip.
void rtt_pinger(const ChildCtx& c) {
  iox::popo::UntypedPublisher pub(service(c.instance, "ping"), publisher_options());
  iox::popo::UntypedSubscriber sub(service(c.instance, "pong"), subscriber_options());
  std::optional<iox::popo::WaitSet<>> ws;
  if (c.waitset) {
    ws.emplace();
    if (ws->attachState(sub, iox::popo::SubscriberState::HAS_DATA).has_error())
      throw bench_failure("WaitSet::attachState failed");
  }
  wait_connected([&] { return pub.hasSubscribers() && sub.getSubscriptionState() == iox::SubscribeState::SUBSCRIBED; },
                 c.timeout_s, "process A");
  std::vector<unsigned char> msg(c.payload, pattern_byte(0));
  std::vector<double> us;
  us.reserve(c.roundtrips);
  send_record(c.report_fd, make_record(rec_kind::ready, -1));
  wait_for_eof(c.go_fd);
  for (std::uint64_t seq = 0; seq < c.warmup + c.roundtrips; ++seq) {
    const std::int64_t t0 = now_ns();
    auto* p = static_cast<unsigned char*>(loan(pub, c.payload));
    std::memcpy(p, msg.data(), c.payload);
    std::memcpy(p + 8, &seq, sizeof seq);
    pub.publish(p);
    const void* answer = take_next(sub, ws ? &*ws : nullptr);
    const std::int64_t t1 = now_ns();
    std::uint64_t got = 0;
    std::memcpy(&got, static_cast<const unsigned char*>(answer) + 8, sizeof got);
    if (payload_size(answer) != c.payload || got != seq)
      throw bench_failure("round trip " + std::to_string(seq) + ": answer of " + std::to_string(payload_size(answer)) +
                          " bytes with sequence " + std::to_string(got));
    sub.release(answer);
    if (seq >= c.warmup) us.push_back(static_cast<double>(t1 - t0) / 1e3);
  }
  std::sort(us.begin(), us.end());
  Record r = make_record(rec_kind::result, -1);
  r.a = us.size();
  r.q[0] = shmbench::quantile(us, 0.50);
  r.q[1] = shmbench::quantile(us, 0.99);
  r.q[2] = shmbench::quantile(us, 0.999);
  send_record(c.report_fd, r);
}

// Process B: takes every ping and answers it on pong with a copy.
void rtt_ponger(const ChildCtx& c) {
  iox::popo::UntypedSubscriber sub(service(c.instance, "ping"), subscriber_options());
  iox::popo::UntypedPublisher pub(service(c.instance, "pong"), publisher_options());
  std::optional<iox::popo::WaitSet<>> ws;
  if (c.waitset) {
    ws.emplace();
    if (ws->attachState(sub, iox::popo::SubscriberState::HAS_DATA).has_error())
      throw bench_failure("WaitSet::attachState failed");
  }
  wait_connected([&] { return pub.hasSubscribers() && sub.getSubscriptionState() == iox::SubscribeState::SUBSCRIBED; },
                 c.timeout_s, "process B");
  send_record(c.report_fd, make_record(rec_kind::ready, 1));
  wait_for_eof(c.go_fd);
  for (std::uint64_t seq = 0; seq < c.warmup + c.roundtrips; ++seq) {
    const void* ping = take_next(sub, ws ? &*ws : nullptr);
    std::uint64_t got = 0;
    std::memcpy(&got, static_cast<const unsigned char*>(ping) + 8, sizeof got);
    if (payload_size(ping) != c.payload || got != seq)
      throw bench_failure("ping " + std::to_string(seq) + " has sequence " + std::to_string(got));
    void* pong = loan(pub, c.payload);
    std::memcpy(pong, ping, c.payload);
    sub.release(ping);
    pub.publish(pong);
  }
  Record r = make_record(rec_kind::produced, 1);
  r.a = c.warmup + c.roundtrips;
  send_record(c.report_fd, r);
}

// ===========================================================================
// The parent: one run
// ===========================================================================

enum class Kind { tput, rtt };

struct Config {
  const char* group;
  const char* mech;
  Kind kind;
  std::size_t payload;
  int publishers;  // throughput
  bool waitset;    // round trips
};

struct RunOut {
  double seconds = 0;  // throughput
  std::uint64_t messages = 0;
  double q[3] = {0, 0, 0};  // round trips, us
  std::uint64_t chunk = 0;
};

int g_run = 0;  // numbers the runs: unique service instances and runtime names

std::uint64_t tput_messages(const Config& c, const Args& a) { return c.payload > 64 ? a.messages / 2 : a.messages; }

RunOut run_once(const Config& cfg, const Args& args) {
  const int run = ++g_run;
  const std::string tag = std::to_string(::getpid()) + "-" + std::to_string(run);
  const std::string rt_prefix = std::string(kMarker) + tag + "-";

  Pipe report, go, done;
  Children kids;
  ChildCtx base;
  base.instance = (cfg.kind == Kind::tput ? "tput-" : "rtt-") + tag;
  base.payload = cfg.payload;
  base.roundtrips = args.roundtrips;
  base.warmup = args.warmup;
  base.waitset = cfg.waitset;
  base.report_fd = report.w.get();
  base.go_fd = go.r.get();
  base.done_fd = done.r.get();
  base.timeout_s = args.timeout_s;
  const std::uint64_t total = cfg.kind == Kind::tput ? tput_messages(cfg, args) : 0;
  if (cfg.kind == Kind::tput) {
    const auto n = static_cast<std::uint64_t>(cfg.publishers);
    for (std::uint64_t i = 0; i < n; ++i) base.per_producer.push_back(total / n + (i < total % n ? 1 : 0));
  }
  const std::vector<int> parent_ends = {report.r.get(), go.w.get(), done.w.get(), g_roudi->log_fd()};

  int expected_ready = 0, expected_produced = 0;
  if (cfg.kind == Kind::tput) {
    kids.spawn("subscriber", rt_prefix + "sub", report.w.get(), parent_ends, -1, [&] { tput_subscriber(base); });
    for (int i = 0; i < cfg.publishers; ++i)
      kids.spawn("publisher " + std::to_string(i), rt_prefix + "pub" + std::to_string(i), report.w.get(), parent_ends,
                 i, [&] {
                   ChildCtx c = base;
                   c.id = i;
                   tput_publisher(c);
                 });
    expected_ready = cfg.publishers + 1;
    expected_produced = cfg.publishers;
  } else {
    kids.spawn("round-trip process A", rt_prefix + "a", report.w.get(), parent_ends, -1, [&] { rtt_pinger(base); });
    kids.spawn("round-trip process B", rt_prefix + "b", report.w.get(), parent_ends, 1, [&] { rtt_ponger(base); });
    expected_ready = 2;
    expected_produced = 1;
  }
  report.w.close();  // only the children keep these ends
  go.r.close();
  done.r.close();

  const auto deadline = bench_clock::now() + std::chrono::seconds(args.timeout_s);
  Record rec;
  RunOut out;
  // 1. Set-up: every child is registered and its ports are connected.
  for (int ready = 0; ready < expected_ready; ++ready) {
    if (!read_record(report.r.get(), rec, deadline, kids)) throw bench_failure("children exited during set-up");
    if (rec.kind != rec_kind::ready) throw bench_failure("unexpected report during set-up");
    out.chunk = std::max(out.chunk, rec.chunk);
  }
  // 2. Release: the clock starts, every child wakes on EOF of "go".
  const std::int64_t t_release = now_ns();
  go.w.close();
  // 3. Publishers (process B) report when finished; then the subscriber may
  //    check that nothing more arrives; it (process A) reports the result.
  int produced = 0;
  std::uint64_t posted = 0;
  std::optional<Record> result;
  while (produced < expected_produced || !result) {
    if (!read_record(report.r.get(), rec, deadline, kids)) throw bench_failure("children exited before reporting");
    if (rec.kind == rec_kind::produced) {
      posted += rec.a;
      if (++produced == expected_produced) done.w.close();
    } else if (rec.kind == rec_kind::result) {
      result = rec;
    } else {
      throw bench_failure("unexpected report during the run");
    }
  }
  // 4. Every child exits with status 0 (EOF: all have closed the report pipe).
  while (read_record(report.r.get(), rec, deadline, kids)) throw bench_failure("unexpected report after the run");
  kids.reap_all();

  if (cfg.kind == Kind::tput) {
    if (posted != total || result->a != total)
      throw bench_failure("count mismatch: published " + std::to_string(posted) + ", received " +
                          std::to_string(result->a) + ", expected " + std::to_string(total));
    if (result->t_ns <= t_release) throw bench_failure("subscriber reported a time before the release");
    out.seconds = static_cast<double>(result->t_ns - t_release) / 1e9;
    out.messages = total;
  } else {
    if (result->a != args.roundtrips || posted != args.roundtrips + args.warmup)
      throw bench_failure("round-trip count mismatch");
    std::copy(std::begin(result->q), std::end(result->q), out.q);
  }
  return out;
}

// ===========================================================================
// main
// ===========================================================================

const std::vector<Config>& configs() {
  static const std::vector<Config> c = {
      {"tput-64-1p", "iceoryx", Kind::tput, 64, 1, false},
      {"tput-64-4p", "iceoryx", Kind::tput, 64, 4, false},
      {"tput-1k-1p", "iceoryx", Kind::tput, 1024, 1, false},
      {"tput-1k-4p", "iceoryx", Kind::tput, 1024, 4, false},
      {"rtt-busy-64", "iceoryx", Kind::rtt, 64, 0, false},
      {"rtt-busy-1k", "iceoryx", Kind::rtt, 1024, 0, false},
      {"rtt-sleep-64", "iceoryx-waitset", Kind::rtt, 64, 0, true},
  };
  return c;
}

std::string note_of(const Config& c, const Args& a) {
  if (c.kind == Kind::tput) {
    std::string n = "N=" + std::to_string(tput_messages(c, a));
    if (c.payload > 64) n += " (--messages/2)";
    n += "; queue " + std::to_string(kQueueCapacity) + ", BLOCK_PRODUCER/WAIT_FOR_CONSUMER";
    if (c.publishers > 1) n += "; " + std::to_string(c.publishers) + " publishers on 1 service (m:n build)";
    return n;
  }
  return std::to_string(a.roundtrips) + " round trips after " + std::to_string(a.warmup) +
         " warm-up per rep; B copies into a new chunk";
}

int run(const Args& args) {
  install_signal_handlers();
  remove_stale_sockets();
  static_assert(kManyToMany, "this benchmark expects an m:n (ManyToManyPolicy) build of iceoryx");

  std::vector<const Config*> selected;
  for (const auto& c : configs())
    if (std::string_view(c.group).find(args.only) != std::string_view::npos) selected.push_back(&c);
  if (selected.empty()) {
    std::fprintf(stderr, "%s: --only '%s' matches no group\n", kProg.data(), args.only.c_str());
    return 2;
  }

  Roudi roudi;
  if (const auto why = roudi.start(args)) {
    std::fprintf(stderr, "%s: skipped: %s\n", kProg.data(), why->c_str());
    for (const Config* c : selected) shmbench::print_skip(c->group, c->mech, *why);
    return 0;
  }
  g_roudi = &roudi;

  std::vector<std::vector<double>> rate(configs().size()), q[3];
  for (auto& v : q) v.resize(configs().size());
  std::vector<std::uint64_t> chunk(configs().size(), 0);
  try {
    for (int rep = 0; rep < args.reps; ++rep) {
      for (const Config* c : selected) {
        const std::size_t i = static_cast<std::size_t>(c - configs().data());
        const RunOut r = run_once(*c, args);
        chunk[i] = r.chunk;
        if (c->kind == Kind::tput) {
          const double mps = static_cast<double>(r.messages) / r.seconds / 1e6;
          rate[i].push_back(mps);
          std::fprintf(stderr, "rep %d/%d  %-13s %-16s %8.4f s  %7.3f Mmsg/s  (chunk %llu B)\n", rep + 1, args.reps,
                       c->group, c->mech, r.seconds, mps, static_cast<unsigned long long>(r.chunk));
        } else {
          for (int k = 0; k < 3; ++k) q[k][i].push_back(r.q[k]);
          std::fprintf(stderr, "rep %d/%d  %-13s %-16s p50 %7.2f us  p99 %7.2f us  p99.9 %7.2f us\n", rep + 1,
                       args.reps, c->group, c->mech, r.q[0], r.q[1], r.q[2]);
        }
      }
    }
  } catch (...) {
    g_roudi = nullptr;
    roudi.stop();
    throw;
  }
  g_roudi = nullptr;
  roudi.stop();

  static const char* const kMetric[3] = {"p50", "p99", "p99.9"};
  for (const Config* c : selected) {
    const std::size_t i = static_cast<std::size_t>(c - configs().data());
    const std::string note = note_of(*c, args);
    if (c->kind == Kind::tput) {
      const auto s = shmbench::summarize(rate[i]);
      shmbench::print_row(c->group, c->mech, "rate", s.median, s.min, s.max, "Mmsg/s", note);
    } else {
      for (int k = 0; k < 3; ++k) {
        const auto s = shmbench::summarize(q[k][i]);
        shmbench::print_row(c->group, c->mech, kMetric[k], s.median, s.min, s.max, "us", note);
      }
    }
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
    std::fprintf(stderr, "%s: FAILED: %s\n", kProg.data(), e.what());
    return 1;
  }
}
