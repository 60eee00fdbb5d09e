// bench/bridge.cpp - shmbox-bench-bridge: what the NATS JetStream bridge
// (docs/bridge.md, `shmbox-bridge export|import`) costs, against plain NATS
// and JetStream measured in the same run, with the same message size and
// counts, on a nats-server the benchmark starts itself:
//   nats-core        core NATS: publish on one connection, a synchronous
//                    subscription on another (default client options: the
//                    publisher's bytes go out through nats.c's flusher thread)
//   nats-core-asap   the same, publisher connection with SendAsap (every
//                    publish is written to the socket at once): latency only
//   jetstream-sync   js_PublishMsg, one at a time, each waits for its ack
//                    (latency)
//   jetstream-async  js_PublishMsgAsync of N messages with at most --window
//                    unacknowledged (the bridge's default --max-inflight),
//                    then js_PublishAsyncComplete (throughput)
//   jetstream-pull   the same publishes, received end to end by a durable
//                    pull consumer on another connection that does what the
//                    import bridge does (Fetch up to 256, waiting 250 ms;
//                    Ack each): JetStream both ways without the boxes and
//                    bridge processes (throughput and latency)
//   shmbox-bridge    box A -> `shmbox-bridge export` -> JetStream ->
//                    `shmbox-bridge import` -> box B: the benchmark posts
//                    into A and, as B's owner, receives from B (end to end)
//
// OUTPUT
// stdout: rows in the format of bench/rows.hpp, group bridge-<size> (e.g.
// bridge-64, bridge-1k):
//   row bridge-64 nats-core        rate  <median> <min> <max> msg/s <note>
//   row bridge-64 nats-core        p50 / p99                  us
//   row bridge-64 nats-core-asap   p50 / p99                  us
//   row bridge-64 jetstream-sync   p50 / p99                  us
//   row bridge-64 jetstream-async  rate                       msg/s
//   row bridge-64 jetstream-pull   rate, p50, p99             msg/s, us
//   row bridge-64 shmbox-bridge    rate, p50, p99             msg/s, us
//   row bridge-64 shmbox-bridge    ratio-rate                 x  (to jetstream-async, same repetition)
//   row bridge-64 shmbox-bridge    ratio-p50, ratio-p99       x  (to jetstream-sync, same repetition)
//   row bridge-64 shmbox-bridge    ratio-rate-pull, ratio-p50-pull, ratio-p99-pull  x  (to jetstream-pull)
//   row bridge-64 <nats-core|jetstream-async|-pull|shmbox-bridge>  cpu-server, cpu-bench (and
//                 cpu-export, cpu-import)   us/msg: CPU of each process in the throughput run
// and skip rows when nats-server or shmbox-bridge cannot be found (then the
// exit status is still 0). stderr: the same as a table, and progress.
//
// METHOD
// * Server. nats-server (--nats-server PATH, else nats-server in PATH or
//   /usr/sbin) is started as `nats-server -js -a 127.0.0.1 -p PORT -sd DIR`
//   on a free port (asked of the kernel; tried again on another port if it
//   was taken meanwhile), DIR a fresh temporary directory
//   ($TMPDIR or /tmp, shmbench-nats-<pid>-XXXXXX) that also holds the logs.
//   Ready when its log says "Server is ready" (bounded by --timeout). It
//   gets PR_SET_PDEATHSIG(SIGKILL), so it dies with us. At the end, on a
//   failure and on SIGINT/SIGTERM/SIGHUP/SIGQUIT: SIGTERM (SIGKILL after
//   10 s), and the directory is removed. Directories of earlier benchmark
//   processes that no longer exist are removed at start.
// * Streams. Every measurement that touches JetStream gets a fresh stream
//   (deleted if there, then created): file storage, subjects [its own
//   subject], a 120 s duplicate window (the bridge's default), no limits; it
//   is deleted after the measurement. JetStream publishes (sync and async)
//   carry the headers the bridge sets (Nats-Msg-Id in the bridge's id form,
//   Shmbox-Lane, Shmbox-Box), so the server does the same deduplication work
//   per message (--js-plain: no headers).
// * Messages (--size bytes, default 64), their check and the repetitions
//   (--reps, default 3; ratios per repetition): harness.hpp, COMMON METHOD.
//   JetStream publishes are checked by their acks (every
//   ack: the stream's next sequence, not a duplicate; async: no error, and
//   the stream holds exactly the messages published).
// * Throughput (nats-core, jetstream-async, jetstream-pull, shmbox-bridge):
//   after --warmup untimed messages, N = --count messages. The clock runs
//   from just before the first publish/post to the receipt of the last
//   message (nats-core, jetstream-pull, shmbox-bridge: a receiving thread in
//   this process) or to the return of
//   js_PublishAsyncComplete (every ack received). msg/s = N / that time.
//   The CPU time (user + system, /proc/PID/stat, 10 ms ticks) that the
//   server, the bridges and this process used during that run, per message.
// * Latency (nats-core, nats-core-asap, jetstream-sync, jetstream-pull,
//   shmbox-bridge): after --warmup untimed ones, --lat-count messages one at
//   a time: the time from just before the publish/post to the receipt of
//   that message (core NATS, pull consumer, bridge) or to the return of
//   js_PublishMsg with its ack (jetstream-sync).
//   p50 and p99 (nearest rank) of each run's samples.
// * The bridge. Box A (--box-capacity slots, default 1024, of --size bytes,
//   policy block) and box B (the same) are created by the benchmark, which
//   attaches as A's producer and acquires B as its owner, creates the stream
//   (like the baselines' streams above), then starts (fork + exec: --bridge
//   PATH, else $SHMBOX_BRIDGE, else ../tools/shmbox-bridge or
//   ./shmbox-bridge next to this binary)
//     shmbox-bridge import --nats URL --stream S --durable D --into B
//     shmbox-bridge export A --nats URL --stream S --subject SUBJ
//   with their default options (export --max-inflight: min(256, capacity/2);
//   --export-args / --import-args add some; --bridge-creates-stream: the
//   export creates the stream with --create-stream, i.e. with the bridge's
//   own mapping of the box's policy, and is started first),
//   and waits for each one's `ready ...` line on its stdout (bounded by
//   --timeout). Their stderr goes to a log in the temporary directory (the
//   last lines are shown when one fails; --verbose: to our stderr). After the
//   measurements it stops them with SIGTERM and expects exit status 0 within
//   10 s (harness.hpp, Daemon); then it deletes the stream (and with it the durable consumer) and
//   removes both boxes (shmbox::Box::remove). Fresh boxes, stream and
//   bridge processes for every repetition; starting them is never timed.
//   Boxes and the bridges' status segments (/dev/shm/shmbox-bridge.BOX.ROLE)
//   are also removed on failure and on fatal signals; those of earlier
//   benchmark processes that no longer exist are removed at start.
// * Watchdog. Every phase (warm-up, throughput, latency, a start or stop)
//   fails the benchmark when it takes longer than --timeout seconds.
// * Everything runs on this machine: server, bridges and the benchmark share
//   its CPUs; the figures are for a local server, not a network.
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <nats/nats.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "harness.hpp"
#include "rows.hpp"
#include "shmbox/shmbox.hpp"

namespace {

using namespace shmbench;
using namespace std::chrono_literals;

constexpr std::string_view kProg = "shmbox-bench-bridge";
constexpr std::string_view kMarker = "shmbench-br-";        // in every box name we create (then our pid)
constexpr std::string_view kDirMarker = "shmbench-nats-";   // our temporary directories (then our pid)
constexpr auto kSlice = 100ms;                              // receive waits are cut into slices (stop flag, deadline)

// ===========================================================================
// Command line
// ===========================================================================

struct Args : CommonArgs {
  Args() { reps = 3; }
  std::size_t size = 64;              // bytes per message
  std::uint64_t count = 20'000;       // messages per throughput run
  std::uint64_t lat_count = 2'000;    // latency samples per run
  std::uint64_t warmup = 200;         // untimed messages before each
  std::uint32_t window = 256;         // jetstream-async: unacknowledged publishes at most (0: no limit)
  std::uint32_t box_capacity = 1024;  // boxes A and B
  bool js_plain = false;              // JetStream publishes without the bridge's headers
  bool bridge_creates_stream = false;  // export --create-stream (the bridge's mapping) instead of our stream
  std::vector<std::string> export_args, import_args;  // more arguments for the bridges
  std::string bridge;                 // the shmbox-bridge binary ("" : $SHMBOX_BRIDGE or next to us)
  std::string nats_server;            // the nats-server binary ("" : PATH, /usr/sbin)
};

void usage(std::FILE* to) {
  std::fprintf(
      to,
      "usage: shmbox-bench-bridge [--size B] [--count N] [--lat-count N] [--warmup N] [--window W]\n"
      "                           [--box-capacity C] [--js-plain] [--bridge-creates-stream]\n"
      "                           [--export-args 'ARGS'] [--import-args 'ARGS'] [--bridge PATH] [--nats-server PATH]\n"
      "                           [--reps R] [--quick] [--timeout S] [--verbose]\n"
      "  core NATS, JetStream and the shmbox NATS bridge (box -> export -> JetStream -> import -> box)\n"
      "  in one run, on a nats-server started for the run (bench/bridge.cpp METHOD)\n"
      "  --size B          bytes per message, 16..262144 (default 64)\n"
      "  --count N         messages per throughput run (default 20000)\n"
      "  --lat-count N     latency samples per run, one message at a time (default 2000)\n"
      "  --warmup N        untimed messages before each measurement (default 200)\n"
      "  --window W        jetstream-async: unacknowledged publishes at most, 0 = no limit (default 256,\n"
      "                    the bridge's default --max-inflight)\n"
      "  --box-capacity C  slots of the bridged boxes A and B (default 1024)\n"
      "  --js-plain        JetStream publishes without the bridge's headers (Nats-Msg-Id, Shmbox-*)\n"
      "  --bridge-creates-stream  the export creates the bridged stream (--create-stream: work queue,\n"
      "                    MaxMsgs = box capacity, discard new) instead of a stream like the baselines'\n"
      "  --export-args 'A' / --import-args 'A'  more arguments for the bridges, split at spaces\n"
      "                    (e.g. --export-args '--max-inflight 64')\n"
      "  --bridge PATH     shmbox-bridge (default $SHMBOX_BRIDGE, else ../tools/shmbox-bridge or\n"
      "                    ./shmbox-bridge next to this program; missing: skip rows)\n"
      "  --nats-server P   nats-server (default: PATH, then /usr/sbin; missing: skip rows)\n"
      "  --reps R          runs per mechanism, interleaved; median and min-max (default 3)\n"
      "  --quick           smoke test: N=1000, 100 samples, 20 warm-up, 1 rep (unless given)\n"
      "  --timeout S       a phase (warm-up, measurement, start, stop) taking longer fails (default 120)\n"
      "  --verbose         every run on stderr, and the bridges' stderr\n"
      "Rows (bench/rows.hpp) go to stdout, the table to stderr.\n");
}

std::optional<Args> parse_args(int argc, char** argv) {
  Args a;
  const bool ok = parse_options(kProg, argc, argv, usage, a, [&](ArgWalker& w) {
    const std::string_view arg = w.name();
    std::string_view value;
    if (arg == "--size") return w.number(a.size, kMinMsgSize, 262'144);
    if (arg == "--count") return w.number(a.count, 1, 1'000'000'000);
    if (arg == "--lat-count") return w.number(a.lat_count, 1, 100'000'000);
    if (arg == "--warmup") return w.number(a.warmup, 0, 100'000'000);
    if (arg == "--window") return w.number(a.window, 0, 10'000'000);
    if (arg == "--box-capacity") return w.number(a.box_capacity, 2, shmbox::kMaxCapacity);
    if (arg == "--js-plain") {
      a.js_plain = true;
      return true;
    }
    if (arg == "--bridge-creates-stream") {
      a.bridge_creates_stream = true;
      return true;
    }
    if (arg == "--export-args" || arg == "--import-args") {
      if (!w.value(value)) return false;
      auto& to = arg == "--export-args" ? a.export_args : a.import_args;
      while (!value.empty()) {
        const auto sp = value.find(' ');
        if (sp != 0) to.emplace_back(value.substr(0, sp));
        value = sp == std::string_view::npos ? std::string_view{} : value.substr(sp + 1);
      }
      return true;
    }
    if (arg == "--bridge" || arg == "--nats-server") {
      if (!w.value(value) || value.empty()) return false;
      (arg == "--bridge" ? a.bridge : a.nats_server) = std::string(value);
      return true;
    }
    return false;
  });
  if (!ok) return std::nullopt;
  a.quick_default(a.count, "--count", 1'000);
  a.quick_default(a.lat_count, "--lat-count", 100);
  a.quick_default(a.warmup, "--warmup", 20);
  a.quick_default(a.reps, "--reps", 1);
  return a;
}

// ===========================================================================
// Small things
// ===========================================================================

double us_between(bench_clock::time_point a, bench_clock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

// A phase's deadline (--timeout).
struct Deadline {
  bench_clock::time_point at;
  std::string what;
  Deadline(int seconds, std::string w) : at(bench_clock::now() + std::chrono::seconds(seconds)), what(std::move(w)) {}
  std::int64_t ms_left() const {
    return std::max<std::int64_t>(0, std::chrono::duration_cast<std::chrono::milliseconds>(at - bench_clock::now()).count());
  }
  void check(int seconds) const {
    if (bench_clock::now() >= at) throw bench_failure(what + ": not done within --timeout " + std::to_string(seconds) + " s");
  }
};

std::string exe_dir() {
  const std::string p = self_path();
  return p.substr(0, p.rfind('/'));
}

// Runs receive(stop) in a thread while send(receiver_done) runs here; a
// failure of either stops the other (receive() must return when `stop` is
// set, within a slice; send() may watch `receiver_done` after sending, to
// check the processes it depends on while the receiver waits).
template <class Receive, class Send>
void with_receiver(Receive&& receive, Send&& send) {
  std::atomic<bool> stop{false}, receiver_done{false};
  std::exception_ptr failed;
  std::thread t([&] {
    try {
      receive(stop);
    } catch (...) {
      failed = std::current_exception();
    }
    receiver_done = true;
  });
  try {
    send(static_cast<const std::atomic<bool>&>(receiver_done));
  } catch (...) {
    stop = true;
    t.join();
    throw;
  }
  t.join();
  if (failed) std::rethrow_exception(failed);
}

// What the repetitions measured: (mechanism, metric) -> one value per repetition.
using Samples = std::map<std::pair<std::string, std::string>, std::vector<double>>;

// The CPU that processes use during a throughput run: microseconds per message.
class CpuMeter {
 public:
  CpuMeter(std::vector<std::pair<std::string, pid_t>> procs) : procs_(std::move(procs)) {
    for (const auto& [name, pid] : procs_) start_.push_back(cpu_us(pid));
  }
  void record(Samples& out, const std::string& mech, std::uint64_t messages) const {
    for (std::size_t i = 0; i < procs_.size(); ++i)
      out[{mech, "cpu-" + procs_[i].first}].push_back((cpu_us(procs_[i].second) - start_[i]) / static_cast<double>(messages));
  }

 private:
  std::vector<std::pair<std::string, pid_t>> procs_;
  std::vector<double> start_;
};

// p50, p99 of one run's samples (nearest rank; sorts them).
std::pair<double, double> p50_p99(std::vector<double>& us) {
  std::sort(us.begin(), us.end());
  return {quantile(us, 0.50), quantile(us, 0.99)};
}

// ===========================================================================
// Cleanup on fatal signals (async-signal-safe: kill, waitpid, nanosleep, fork, execve)
// ===========================================================================
// The harness's handler stops the bridges and the server (class Daemon) and
// removes the tracked names (boxes, the bridges' status segments); then this
// hook removes the temporary directory.

char g_tmpdir[PATH_MAX];
volatile std::sig_atomic_t g_tmpdir_set;

void cleanup_on_signal() {
  if (g_tmpdir_set != 0) {
    const pid_t rm = ::fork();
    if (rm == 0) {
      char arg0[] = "rm", arg1[] = "-rf", arg2[] = "--";
      char* const argv[] = {arg0, arg1, arg2, g_tmpdir, nullptr};
      char* const envp[] = {nullptr};
      ::execve("/bin/rm", argv, envp);
      ::_exit(127);
    }
    if (rm > 0) ::waitpid(rm, nullptr, 0);
  }
}

// The temporary directory: the server's store and every log.
class TempDir {
 public:
  TempDir() {
    const char* t = std::getenv("TMPDIR");
    parent_ = t != nullptr && *t != '\0' ? t : "/tmp";
    remove_stale(kProg, parent_.c_str(), kDirMarker);
    std::string tmpl = parent_ + "/" + std::string(kDirMarker) + std::to_string(::getpid()) + "-XXXXXX";
    if (tmpl.size() >= sizeof g_tmpdir) throw bench_failure("temporary directory name too long: " + tmpl);
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    if (::mkdtemp(buf.data()) == nullptr) throw bench_failure(errno_text("mkdtemp " + tmpl));
    path_ = buf.data();
    std::memcpy(g_tmpdir, path_.c_str(), path_.size() + 1);
    std::atomic_signal_fence(std::memory_order_seq_cst);
    g_tmpdir_set = 1;
  }
  ~TempDir() {
    g_tmpdir_set = 0;
    remove_tree(path_);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const noexcept { return path_; }

 private:
  std::string parent_, path_;
};

// ===========================================================================
// nats-server
// ===========================================================================

class NatsServer {
 public:
  // Starts it and waits until it is ready. Returns why it cannot run (the
  // caller prints skip rows), or nullopt.
  std::optional<std::string> start(const Args& args, const std::string& dir) {
    bin_ = args.nats_server.empty() ? find_in_path("nats-server") : args.nats_server;
    if (bin_.empty() || ::access(bin_.c_str(), X_OK) != 0)
      return "nats-server not found (apt-get install nats-server)";
    store_ = dir + "/store";
    log_ = dir + "/nats-server.log";
    for (int attempt = 0; attempt < 3; ++attempt) {
      const int port = free_port();
      const Fd log(::open(log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
      if (log.get() < 0) throw bench_failure(errno_text("open " + log_));
      proc_.start({bin_, "-js", "-a", "127.0.0.1", "-p", std::to_string(port), "-sd", store_}, log.get(),
                  Daemon::kSameAsOut, SIGKILL);
      const Deadline dl(args.timeout_s, "nats-server start");
      for (;;) {
        const std::string text = read_text(log_);
        if (text.find("Server is ready") != std::string::npos) {
          url_ = "nats://127.0.0.1:" + std::to_string(port);
          const auto v = text.find("Version:");
          if (v != std::string::npos) {
            const auto e = text.find('\n', v);
            version_ = text.substr(v + 8, e - v - 8);
            version_.erase(0, version_.find_first_not_of(' '));
          }
          if (args.verbose) std::fprintf(stderr, "%s: %s ready at %s\n", kProg.data(), bin_.c_str(), url_.c_str());
          return std::nullopt;
        }
        if (const auto st = proc_.exited()) {
          if (text.find("address already in use") != std::string::npos) break;  // the port was taken: another
          return "nats-server " + describe_status(*st) + " at start: " + tail_of(log_, 3);
        }
        if (bench_clock::now() >= dl.at) {
          stop();
          throw bench_failure("nats-server not ready within " + std::to_string(args.timeout_s) + " s: " + tail_of(log_));
        }
        sleep_ms(5);  // polls its log: it has no other handshake
      }
    }
    return "nats-server could not get a free port (3 tries): " + tail_of(log_, 3);
  }

  const std::string& url() const noexcept { return url_; }
  const std::string& version() const noexcept { return version_; }
  const std::string& log() const noexcept { return log_; }
  pid_t pid() const noexcept { return proc_.pid(); }

  // Fails when the server is gone (a measurement that times out asks).
  void check_alive() {
    if (const auto st = proc_.exited()) throw bench_failure("nats-server " + describe_status(*st) + ": " + tail_of(log_));
  }

  void stop() {
    if (proc_.pid() > 0 && !proc_.stop())
      std::fprintf(stderr, "%s: nats-server did not stop within %d s, killed it\n", kProg.data(), kDaemonStopTimeoutS);
  }
  ~NatsServer() { stop(); }

 private:
  static int free_port() {
    const Fd s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (s.get() < 0) throw bench_failure(errno_text("socket"));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = 0;
    socklen_t len = sizeof a;
    if (::bind(s.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        ::getsockname(s.get(), reinterpret_cast<sockaddr*>(&a), &len) != 0)
      throw bench_failure(errno_text("bind 127.0.0.1:0"));
    return ntohs(a.sin_port);
  }

  std::string bin_, store_, log_, url_, version_ = "?";
  Daemon proc_{"nats-server"};
};

// ===========================================================================
// nats.c, with errors as exceptions and handles that free themselves
// ===========================================================================

[[noreturn]] void nats_fail(std::string_view what, natsStatus s, jsErrCode jerr = static_cast<jsErrCode>(0)) {
  std::string m(what);
  m += ": ";
  m += natsStatus_GetText(s);
  natsStatus ls = NATS_OK;
  const char* last = nats_GetLastError(&ls);
  if (last != nullptr && *last != '\0' && std::strcmp(last, natsStatus_GetText(s)) != 0) m += std::string(" (") + last + ")";
  if (jerr != 0) m += " [JetStream error " + std::to_string(static_cast<int>(jerr)) + "]";
  throw bench_failure(m);
}
void check_nats(natsStatus s, std::string_view what, jsErrCode jerr = static_cast<jsErrCode>(0)) {
  if (s != NATS_OK) nats_fail(what, s, jerr);
}

struct ConnDel { void operator()(natsConnection* c) const { natsConnection_Destroy(c); } };
struct SubDel { void operator()(natsSubscription* s) const { natsSubscription_Destroy(s); } };
struct JsDel { void operator()(jsCtx* j) const { jsCtx_Destroy(j); } };
struct MsgDel { void operator()(natsMsg* m) const { natsMsg_Destroy(m); } };
using Conn = std::unique_ptr<natsConnection, ConnDel>;
using Sub = std::unique_ptr<natsSubscription, SubDel>;
using Js = std::unique_ptr<jsCtx, JsDel>;
using Msg = std::unique_ptr<natsMsg, MsgDel>;

// A connection that does not reconnect (a dead server fails the run at once);
// send_asap: every publish is written to the socket at once (no flusher thread).
Conn connect(const std::string& url, bool send_asap) {
  natsOptions* o = nullptr;
  check_nats(natsOptions_Create(&o), "natsOptions_Create");
  std::unique_ptr<natsOptions, void (*)(natsOptions*)> opts(o, natsOptions_Destroy);
  check_nats(natsOptions_SetURL(o, url.c_str()), "natsOptions_SetURL");
  check_nats(natsOptions_SetAllowReconnect(o, false), "natsOptions_SetAllowReconnect");
  check_nats(natsOptions_SetTimeout(o, 5000), "natsOptions_SetTimeout");
  check_nats(natsOptions_SetSendAsap(o, send_asap), "natsOptions_SetSendAsap");
  natsConnection* nc = nullptr;
  check_nats(natsConnection_Connect(&nc, o), "connect to " + url);
  return Conn(nc);
}

// Counts the asynchronous publishes that failed (the ErrHandler of a context).
struct AsyncErrors {
  std::atomic<std::uint64_t> count{0};
  std::string first;  // written by the first error only
  std::atomic<bool> have_first{false};
};
void on_async_error(jsCtx*, jsPubAckErr* pae, void* closure) {
  auto* e = static_cast<AsyncErrors*>(closure);
  if (!e->have_first.exchange(true))
    e->first = std::string(natsStatus_GetText(pae->Err)) + (pae->ErrText != nullptr ? std::string(": ") + pae->ErrText : "");
  e->count.fetch_add(1);
}

Js jetstream(natsConnection* nc, std::uint32_t window, int timeout_s, AsyncErrors* errors) {
  jsOptions o;
  check_nats(jsOptions_Init(&o), "jsOptions_Init");
  o.Wait = 10'000;  // API requests (add/delete stream)
  o.PublishAsync.MaxPending = window;
  o.PublishAsync.StallWait = std::int64_t{timeout_s} * 1000;  // a full window waits, it does not fail after 200 ms
  if (errors != nullptr) {
    o.PublishAsync.ErrHandler = on_async_error;
    o.PublishAsync.ErrHandlerClosure = errors;
  }
  jsCtx* js = nullptr;
  check_nats(natsConnection_JetStream(&js, nc, &o), "natsConnection_JetStream");
  return Js(js);
}

// A fresh stream: deleted if there, then created (file storage, the bridge's
// default duplicate window, no limits).
void recreate_stream(jsCtx* js, const std::string& name, const std::string& subject) {
  jsErrCode jerr = static_cast<jsErrCode>(0);
  const natsStatus d = js_DeleteStream(js, name.c_str(), nullptr, &jerr);
  if (d != NATS_OK && d != NATS_NOT_FOUND) nats_fail("delete stream " + name, d, jerr);
  jsStreamConfig cfg;
  check_nats(jsStreamConfig_Init(&cfg), "jsStreamConfig_Init");
  const char* subjects[] = {subject.c_str()};
  cfg.Name = name.c_str();
  cfg.Subjects = subjects;
  cfg.SubjectsLen = 1;
  cfg.Storage = js_FileStorage;
  cfg.Duplicates = std::int64_t{120} * 1'000'000'000;  // ns
  jsStreamInfo* si = nullptr;
  jerr = static_cast<jsErrCode>(0);
  check_nats(js_AddStream(&si, js, &cfg, nullptr, &jerr), "create stream " + name, jerr);
  jsStreamInfo_Destroy(si);
}

void delete_stream(jsCtx* js, const std::string& name) {
  jsErrCode jerr = static_cast<jsErrCode>(0);
  const natsStatus d = js_DeleteStream(js, name.c_str(), nullptr, &jerr);
  if (d != NATS_OK && d != NATS_NOT_FOUND) nats_fail("delete stream " + name, d, jerr);
}

std::uint64_t stream_messages(jsCtx* js, const std::string& name) {
  jsStreamInfo* si = nullptr;
  jsErrCode jerr = static_cast<jsErrCode>(0);
  check_nats(js_GetStreamInfo(&si, js, name.c_str(), nullptr, &jerr), "stream info " + name, jerr);
  const std::uint64_t n = si->State.Msgs;
  jsStreamInfo_Destroy(si);
  return n;
}

// ===========================================================================
// One repetition of each mechanism
// ===========================================================================

struct Ctx {
  const Args& args;
  NatsServer& server;
  jsCtx* admin;      // stream management
  std::string tag;   // <pid>: subjects, streams
  std::string bridge_bin;  // "" : not found
  std::string tmpdir;
};

void add_latency(Samples& out, const std::string& mech, std::vector<double>& us) {
  const auto [p50, p99] = p50_p99(us);
  out[{mech, "p50"}].push_back(p50);
  out[{mech, "p99"}].push_back(p99);
}

// --- core NATS: throughput, latency with default options and with SendAsap
void run_core(const Ctx& c, Samples& out) {
  const Args& a = c.args;
  const std::string subject = "shmbench." + c.tag + ".core";
  Conn sub_conn = connect(c.server.url(), false);
  Conn pub = connect(c.server.url(), false);
  Conn pub_asap = connect(c.server.url(), true);
  natsSubscription* s = nullptr;
  check_nats(natsConnection_SubscribeSync(&s, sub_conn.get(), subject.c_str()), "subscribe " + subject);
  Sub sub(s);
  check_nats(natsSubscription_SetPendingLimits(s, -1, -1), "natsSubscription_SetPendingLimits");
  check_nats(natsConnection_FlushTimeout(sub_conn.get(), 5000), "flush (subscription)");  // the server has it

  MessageBuffer msg(0, a.size);
  Checker check = Checker::open_ended(a.size, "nats-core sender");
  std::uint64_t seq = 0;
  auto publish = [&](natsConnection* nc) {
    msg.set_seq(seq++);
    check_nats(natsConnection_Publish(nc, subject.c_str(), msg.bytes, static_cast<int>(a.size)), "publish");
  };
  // Waits for the next message (slices: `stop`, the deadline) and checks it.
  auto next = [&](const Deadline& dl, const std::atomic<bool>* stop) {
    for (;;) {
      natsMsg* m = nullptr;
      const natsStatus st = natsSubscription_NextMsg(&m, s, std::chrono::duration_cast<std::chrono::milliseconds>(kSlice).count());
      if (st == NATS_OK) {
        const Msg owned(m);
        check.on(natsMsg_GetData(m), static_cast<std::size_t>(natsMsg_GetDataLength(m)));
        return;
      }
      if (st != NATS_TIMEOUT) nats_fail("nats-core: next message", st);
      if (stop != nullptr && *stop) throw bench_failure("nats-core receiver stopped");
      dl.check(a.timeout_s);
    }
  };
  auto one_at_a_time = [&](natsConnection* nc, std::uint64_t n, std::vector<double>* us, const char* what) {
    const Deadline dl(a.timeout_s, what);
    for (std::uint64_t i = 0; i < n; ++i) {
      const auto t0 = bench_clock::now();
      publish(nc);
      next(dl, nullptr);
      if (us != nullptr) us->push_back(us_between(t0, bench_clock::now()));
    }
  };

  one_at_a_time(pub.get(), a.warmup, nullptr, "nats-core warm-up");
  // Throughput
  bench_clock::time_point t0{}, t_end{};
  const CpuMeter cpu({{"server", c.server.pid()}, {"bench", 0}});
  with_receiver(
      [&](const std::atomic<bool>& stop) {
        const Deadline dl(a.timeout_s, "nats-core throughput");
        for (std::uint64_t i = 0; i < a.count; ++i) next(dl, &stop);
        t_end = bench_clock::now();
      },
      [&](const std::atomic<bool>&) {
        t0 = bench_clock::now();
        for (std::uint64_t i = 0; i < a.count; ++i) publish(pub.get());
        check_nats(natsConnection_FlushTimeout(pub.get(), std::int64_t{a.timeout_s} * 1000), "flush (publisher)");
      });
  cpu.record(out, "nats-core", a.count);
  out[{"nats-core", "rate"}].push_back(static_cast<double>(a.count) / (us_between(t0, t_end) / 1e6));
  // Latency: default options (the flusher thread), then SendAsap
  std::vector<double> us;
  one_at_a_time(pub.get(), a.lat_count, &us, "nats-core latency");
  add_latency(out, "nats-core", us);
  us.clear();
  one_at_a_time(pub_asap.get(), a.warmup, nullptr, "nats-core-asap warm-up");
  one_at_a_time(pub_asap.get(), a.lat_count, &us, "nats-core-asap latency");
  add_latency(out, "nats-core-asap", us);
  // Nothing more arrives
  natsMsg* extra = nullptr;
  if (natsSubscription_NextMsg(&extra, s, 50) == NATS_OK) {
    natsMsg_Destroy(extra);
    throw bench_failure("nats-core: a message arrived after the last one");
  }
}

// A JetStream message with the bridge's headers (unless --js-plain).
Msg js_message(const Ctx& c, const std::string& subject, const MessageBuffer& body, std::uint64_t box_id,
               std::uint64_t seq) {
  natsMsg* m = nullptr;
  check_nats(natsMsg_Create(&m, subject.c_str(), nullptr, reinterpret_cast<const char*>(body.bytes),
                            static_cast<int>(body.size)),
             "natsMsg_Create");
  Msg msg(m);
  if (!c.args.js_plain) {
    char id[64];
    std::snprintf(id, sizeof id, "%016" PRIx64 "-0-%" PRIu64, box_id, seq);
    check_nats(natsMsgHeader_Set(m, "Nats-Msg-Id", id), "natsMsgHeader_Set");
    check_nats(natsMsgHeader_Set(m, "Shmbox-Lane", "0"), "natsMsgHeader_Set");
    check_nats(natsMsgHeader_Set(m, "Shmbox-Box", "shmbench-js"), "natsMsgHeader_Set");
  }
  return msg;
}

// --- JetStream: sync publish latency, async publish throughput
void run_jetstream(const Ctx& c, Samples& out) {
  const Args& a = c.args;
  const std::string stream = "SHMBENCH_" + c.tag + "_JS", subject = "shmbench." + c.tag + ".js";
  AsyncErrors errors;  // outlives the connection, whose thread calls its handler
  Conn nc = connect(c.server.url(), false);
  Js js = jetstream(nc.get(), a.window, a.timeout_s, &errors);
  std::mt19937_64 rng(std::random_device{}());
  MessageBuffer body(0, a.size);

  // Sync: one at a time, each waits for its ack.
  {
    recreate_stream(c.admin, stream, subject);
    const std::uint64_t box_id = rng();
    std::uint64_t seq = 0;
    std::vector<double> us;
    jsPubOptions po;
    jsPubOptions_Init(&po);
    po.MaxWait = std::int64_t{a.timeout_s} * 1000;
    for (int phase = 0; phase < 2; ++phase) {
      const std::uint64_t n = phase == 0 ? a.warmup : a.lat_count;
      const Deadline dl(a.timeout_s, phase == 0 ? "jetstream-sync warm-up" : "jetstream-sync latency");
      for (std::uint64_t i = 0; i < n; ++i) {
        body.set_seq(seq);
        const Msg m = js_message(c, subject, body, box_id, seq);
        jsPubAck* pa = nullptr;
        jsErrCode jerr = static_cast<jsErrCode>(0);
        const auto t0 = bench_clock::now();
        const natsStatus st = js_PublishMsg(&pa, js.get(), m.get(), &po, &jerr);
        const auto t1 = bench_clock::now();
        if (st != NATS_OK) nats_fail("js_PublishMsg", st, jerr);
        const bool ok = pa->Sequence == seq + 1 && !pa->Duplicate;
        jsPubAck_Destroy(pa);
        if (!ok) throw bench_failure("jetstream-sync: ack of message " + std::to_string(seq) + " is not the next stream sequence, or a duplicate");
        ++seq;
        if (phase == 1) us.push_back(us_between(t0, t1));
        dl.check(a.timeout_s);
      }
    }
    add_latency(out, "jetstream-sync", us);
    delete_stream(c.admin, stream);
  }

  // Async: N publishes, at most `window` unacknowledged, then wait for every ack.
  {
    recreate_stream(c.admin, stream, subject);
    const std::uint64_t box_id = rng();
    std::uint64_t seq = 0;
    jsPubOptions done;
    jsPubOptions_Init(&done);
    done.MaxWait = std::int64_t{a.timeout_s} * 1000;
    auto publish_n = [&](std::uint64_t n, const char* what) {
      const Deadline dl(a.timeout_s, what);
      for (std::uint64_t i = 0; i < n; ++i) {
        body.set_seq(seq);
        Msg m = js_message(c, subject, body, box_id, seq);
        natsMsg* raw = m.release();
        const natsStatus st = js_PublishMsgAsync(js.get(), &raw, nullptr);
        natsMsg_Destroy(raw);  // NULL when the library took it
        if (st != NATS_OK) nats_fail("js_PublishMsgAsync", st);
        ++seq;
      }
      const natsStatus st = js_PublishAsyncComplete(js.get(), &done);
      if (st != NATS_OK) nats_fail(std::string(what) + ": js_PublishAsyncComplete", st);
      dl.check(a.timeout_s);
    };
    publish_n(a.warmup, "jetstream-async warm-up");
    const CpuMeter cpu({{"server", c.server.pid()}, {"bench", 0}});
    const auto t0 = bench_clock::now();
    publish_n(a.count, "jetstream-async throughput");
    const auto t1 = bench_clock::now();
    cpu.record(out, "jetstream-async", a.count);
    if (errors.count != 0)
      throw bench_failure("jetstream-async: " + std::to_string(errors.count.load()) + " publishes failed, first: " + errors.first);
    const std::uint64_t stored = stream_messages(c.admin, stream);
    if (stored != a.warmup + a.count)
      throw bench_failure("jetstream-async: the stream holds " + std::to_string(stored) + " messages, expected " +
                          std::to_string(a.warmup + a.count));
    out[{"jetstream-async", "rate"}].push_back(static_cast<double>(a.count) / (us_between(t0, t1) / 1e6));
    delete_stream(c.admin, stream);
  }

  // Pull: the same async publishes, and on another connection a durable pull
  // consumer (explicit acks) that fetches up to 256 at a time, waiting up to
  // 250 ms, and acks each message: the import bridge's calls, without the
  // boxes. End to end, as the bridge is measured.
  {
    recreate_stream(c.admin, stream, subject);
    const std::uint64_t box_id = rng();
    std::uint64_t seq = 0;
    Conn cc = connect(c.server.url(), false);
    Js cjs = jetstream(cc.get(), 0, a.timeout_s, nullptr);
    jsSubOptions so;
    check_nats(jsSubOptions_Init(&so), "jsSubOptions_Init");
    so.Stream = stream.c_str();
    so.Config.AckPolicy = js_AckExplicit;
    so.Config.MaxAckPending = 4 * 256;
    natsSubscription* ps = nullptr;
    jsErrCode jerr = static_cast<jsErrCode>(0);
    check_nats(js_PullSubscribe(&ps, cjs.get(), subject.c_str(), "shmbench-pull", nullptr, &so, &jerr), "js_PullSubscribe", jerr);
    const Sub psub(ps);
    Checker check = Checker::open_ended(a.size, "jetstream-pull sender");
    jsPubOptions done;
    jsPubOptions_Init(&done);
    done.MaxWait = std::int64_t{a.timeout_s} * 1000;
    auto publish = [&] {
      body.set_seq(seq);
      Msg m = js_message(c, subject, body, box_id, seq);
      natsMsg* raw = m.release();
      const natsStatus st = js_PublishMsgAsync(js.get(), &raw, nullptr);
      natsMsg_Destroy(raw);
      if (st != NATS_OK) nats_fail("js_PublishMsgAsync", st);
      ++seq;
    };
    auto complete = [&](const char* what) {
      const natsStatus st = js_PublishAsyncComplete(js.get(), &done);
      if (st != NATS_OK) nats_fail(std::string(what) + ": js_PublishAsyncComplete", st);
    };
    // Fetches up to `max` (at most 256) and acks them; how many it got.
    auto fetch = [&](std::uint64_t max, const Deadline& dl, const std::atomic<bool>* stop) -> std::uint64_t {
      natsMsgList list{};
      jsErrCode fe = static_cast<jsErrCode>(0);
      const natsStatus st = natsSubscription_Fetch(&list, ps, static_cast<int>(std::min<std::uint64_t>(max, 256)), 250, &fe);
      if (st == NATS_TIMEOUT) {
        if (stop != nullptr && *stop) throw bench_failure("jetstream-pull receiver stopped");
        dl.check(a.timeout_s);
        return 0;
      }
      if (st != NATS_OK) nats_fail("jetstream-pull: natsSubscription_Fetch", st, fe);
      std::exception_ptr bad;
      for (int i = 0; i < list.Count; ++i) {
        natsMsg* m = list.Msgs[i];
        try {
          if (!bad) check.on(natsMsg_GetData(m), static_cast<std::size_t>(natsMsg_GetDataLength(m)));
        } catch (...) {
          bad = std::current_exception();
        }
        natsMsg_Ack(m, nullptr);
      }
      const auto n = static_cast<std::uint64_t>(list.Count);
      natsMsgList_Destroy(&list);
      if (bad) std::rethrow_exception(bad);
      return n;
    };
    auto one_at_a_time = [&](std::uint64_t n, std::vector<double>* us, const char* what) {
      const Deadline dl(a.timeout_s, what);
      for (std::uint64_t i = 0; i < n; ++i) {
        const auto t0 = bench_clock::now();
        publish();
        while (fetch(1, dl, nullptr) == 0) {
        }
        const auto t1 = bench_clock::now();
        if (us != nullptr) us->push_back(us_between(t0, t1));
        complete(what);  // its ack has come by now, or comes within the publish's round trip
      }
    };
    one_at_a_time(a.warmup, nullptr, "jetstream-pull warm-up");
    bench_clock::time_point t0{}, t_end{};
    const CpuMeter cpu({{"server", c.server.pid()}, {"bench", 0}});
    with_receiver(
        [&](const std::atomic<bool>& stop) {
          const Deadline dl(a.timeout_s, "jetstream-pull throughput (fetching)");
          for (std::uint64_t got = 0; got < a.count;) got += fetch(a.count - got, dl, &stop);
          t_end = bench_clock::now();
        },
        [&](const std::atomic<bool>&) {
          t0 = bench_clock::now();
          for (std::uint64_t i = 0; i < a.count; ++i) publish();
          complete("jetstream-pull throughput");
        });
    cpu.record(out, "jetstream-pull", a.count);
    out[{"jetstream-pull", "rate"}].push_back(static_cast<double>(a.count) / (us_between(t0, t_end) / 1e6));
    std::vector<double> us;
    one_at_a_time(a.lat_count, &us, "jetstream-pull latency");
    add_latency(out, "jetstream-pull", us);
    if (errors.count != 0)
      throw bench_failure("jetstream-pull: " + std::to_string(errors.count.load()) + " publishes failed, first: " + errors.first);
    delete_stream(c.admin, stream);
  }
}

// --- The bridge processes

class BridgeProc {
 public:
  explicit BridgeProc(const std::string& role) : proc_("shmbox-bridge " + role) {}

  // Starts it; stdout into our pipe, stderr into `log` (verbose: ours).
  void start(const std::string& bin, std::vector<std::string> args, const std::string& log, bool verbose) {
    log_ = log;
    const Fd err(::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
    if (err.get() < 0) throw bench_failure(errno_text("open " + log));
    args.insert(args.begin(), bin);
    proc_.start(args, Daemon::kPipe, verbose ? -1 : err.get(), SIGTERM);  // SIGTERM: it stops cleanly if we die
  }

  // Waits for its first line; it must start with "ready ".
  std::string wait_ready(const Deadline& dl, int timeout_s) {
    std::string& text = proc_.text();
    for (;;) {
      if (const auto nl = text.find('\n'); nl != std::string::npos) {
        const std::string line = text.substr(0, nl);
        text.erase(0, nl + 1);
        if (!line.starts_with("ready ")) throw bench_failure(proc_.name() + ": expected 'ready ...', got '" + line + "'");
        return line;
      }
      if (!proc_.read_out(static_cast<int>(std::min<std::int64_t>(dl.ms_left(), 100)))) {
        const auto st = proc_.stop();  // it has exited: reaped at once
        throw bench_failure(proc_.name() + " " + (st ? describe_status(*st) : "was killed") + " before its ready line: " + tail_of(log_));
      }
      if (bench_clock::now() >= dl.at)
        throw bench_failure(proc_.name() + ": no ready line within " + std::to_string(timeout_s) + " s: " + tail_of(log_));
    }
  }

  pid_t pid() const noexcept { return proc_.pid(); }

  // Fails if it has exited.
  void check_alive() {
    if (const auto st = proc_.exited())
      throw bench_failure(proc_.name() + " " + describe_status(*st) + " during the run: " + tail_of(log_));
  }

  // SIGTERM; it must exit with status 0 within kDaemonStopTimeoutS (a note on
  // stderr if it printed no "stopped ..." line, which the spec promises).
  void stop() {
    if (proc_.pid() <= 0) return;
    const auto st = proc_.stop();
    if (!st)
      throw bench_failure(proc_.name() + " did not exit within " + std::to_string(kDaemonStopTimeoutS) +
                          " s of SIGTERM (killed): " + tail_of(log_));
    if (!(WIFEXITED(*st) && WEXITSTATUS(*st) == 0))
      throw bench_failure(proc_.name() + " " + describe_status(*st) + " on SIGTERM: " + tail_of(log_));
    if (proc_.text().find("stopped") == std::string::npos)
      std::fprintf(stderr, "%s: note: %s printed no 'stopped' line on SIGTERM\n", kProg.data(), proc_.name().c_str());
  }

 private:
  Daemon proc_;
  std::string log_;
};

// --- box A -> export -> JetStream -> import -> box B
void run_bridge(const Ctx& c, Samples& out, int rep) {
  const Args& a = c.args;
  const std::string base = std::string(kMarker) + c.tag;
  const std::string box_a = base + "-a", box_b = base + "-b";
  const std::string stream = "SHMBENCH_" + c.tag + "_BRIDGE", subject = "shmbench." + c.tag + ".bridge";
  // Removed on destruction and on fatal signals (what a killed bridge leaves too).
  const TrackedName seg_a("/dev/shm/shmbox." + box_a), seg_b("/dev/shm/shmbox." + box_b);
  const TrackedName status_a("/dev/shm/shmbox-bridge." + box_a + ".export"),
      status_b("/dev/shm/shmbox-bridge." + box_b + ".import");
  struct Removal {  // Box::remove at the end, whatever happens
    std::string a, b;
    ~Removal() {
      (void)shmbox::Box::remove(a);
      (void)shmbox::Box::remove(b);
    }
  } removal{box_a, box_b};
  const shmbox::options opts{.capacity = a.box_capacity,
                             .slot_size = static_cast<std::uint32_t>(a.size),
                             .overflow = shmbox::policy::block,
                             .block_timeout = std::chrono::seconds(a.timeout_s)};
  auto ba = shmbox::Box::create(box_a, opts);
  if (!ba) throw bench_failure("create box " + box_a + ": " + shmbox::explain(ba.error()));
  auto bb = shmbox::Box::create(box_b, opts);
  if (!bb) throw bench_failure("create box " + box_b + ": " + shmbox::explain(bb.error()));
  auto producer = shmbox::Producer::attach(*ba);
  if (!producer) throw bench_failure("attach to box " + box_a + ": " + shmbox::explain(producer.error()));
  auto owner = shmbox::Owner::acquire(*bb);
  if (!owner) throw bench_failure("acquire box " + box_b + ": " + shmbox::explain(owner.error()));
  if (a.bridge_creates_stream) delete_stream(c.admin, stream);  // the export creates it
  else recreate_stream(c.admin, stream, subject);
  struct StreamGone {
    jsCtx* js;
    std::string name;
    ~StreamGone() {
      try {
        delete_stream(js, name);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "%s: %s\n", kProg.data(), e.what());
      }
    }
  } stream_gone{c.admin, stream};

  // Declared after the boxes and the stream: stopped (killed) first.
  BridgeProc imp("import"), exp("export");
  const std::string r = std::to_string(rep + 1);
  std::vector<std::string> exp_args = {"export", box_a, "--nats", c.server.url(), "--stream", stream, "--subject", subject};
  if (a.bridge_creates_stream) exp_args.emplace_back("--create-stream");
  exp_args.insert(exp_args.end(), a.export_args.begin(), a.export_args.end());
  std::vector<std::string> imp_args = {"import", "--nats", c.server.url(), "--stream", stream, "--durable", "shmbench-import", "--into", box_b};
  imp_args.insert(imp_args.end(), a.import_args.begin(), a.import_args.end());
  {
    // The export first when it creates the stream (the import needs it), else the import first.
    const Deadline dl(a.timeout_s, "bridge start");
    std::string le, li;
    if (a.bridge_creates_stream) {
      exp.start(c.bridge_bin, exp_args, c.tmpdir + "/bridge-export-" + r + ".log", a.verbose);
      le = exp.wait_ready(dl, a.timeout_s);
      imp.start(c.bridge_bin, imp_args, c.tmpdir + "/bridge-import-" + r + ".log", a.verbose);
      li = imp.wait_ready(dl, a.timeout_s);
    } else {
      imp.start(c.bridge_bin, imp_args, c.tmpdir + "/bridge-import-" + r + ".log", a.verbose);
      exp.start(c.bridge_bin, exp_args, c.tmpdir + "/bridge-export-" + r + ".log", a.verbose);
      li = imp.wait_ready(dl, a.timeout_s);
      le = exp.wait_ready(dl, a.timeout_s);
    }
    if (a.verbose) std::fprintf(stderr, "%s: %s | %s\n", kProg.data(), li.c_str(), le.c_str());
  }
  auto alive = [&] {
    c.server.check_alive();
    imp.check_alive();
    exp.check_alive();
  };

  MessageBuffer msg(0, a.size);
  Checker check = Checker::open_ended(a.size, "shmbox-bridge sender");
  std::uint64_t seq = 0;
  // A post into the block box A waits while A is full (the export bridge
  // behind): in slices of a second, checking the processes in between.
  auto post = [&](const Deadline& dl) {
    msg.set_seq(seq);
    for (;;) {
      const auto st = producer->post(msg.bytes, a.size, {.timeout = std::chrono::milliseconds(1000)});
      if (shmbox::is_stored(st)) break;
      if (st != shmbox::post_status::timeout)
        throw bench_failure("post into " + box_a + " (sequence " + std::to_string(seq) + "): " +
                            std::string(shmbox::to_string(st)) + " (" + dl.what + ")");
      alive();
      dl.check(a.timeout_s);
    }
    ++seq;
  };
  auto failed_receive = [&](shmbox::recv_status st) {
    throw bench_failure("receive from " + box_b + ": " + std::string(shmbox::to_string(st)) + " " +
                        shmbox::explain(owner->last_error()));
  };
  shmbox::message m;
  auto one_at_a_time = [&](std::uint64_t n, std::vector<double>* us, const char* what) {
    const Deadline dl(a.timeout_s, what);
    for (std::uint64_t i = 0; i < n; ++i) {
      const auto t0 = bench_clock::now();
      post(dl);
      for (;;) {
        const auto st = owner->receive(m, {.timeout = kSlice});
        if (st == shmbox::recv_status::ok) break;
        if (st != shmbox::recv_status::timeout) failed_receive(st);
        alive();
        dl.check(a.timeout_s);
      }
      const auto t1 = bench_clock::now();
      check.on(m.data.data(), m.data.size());
      if (us != nullptr) us->push_back(us_between(t0, t1));
    }
  };

  one_at_a_time(a.warmup, nullptr, "shmbox-bridge warm-up");
  // Throughput: post N into A here, receive N from B in a thread.
  bench_clock::time_point t0{}, t_end{};
  const CpuMeter cpu({{"server", c.server.pid()}, {"export", exp.pid()}, {"import", imp.pid()}, {"bench", 0}});
  with_receiver(
      [&](const std::atomic<bool>& stop) {
        const Deadline dl(a.timeout_s, "shmbox-bridge throughput (receiving)");
        shmbox::batch b;
        std::uint64_t got = 0;
        while (got < a.count) {
          b.clear();
          const auto st = owner->receive_batch(b, {.max = 256, .timeout = kSlice});
          if (st == shmbox::recv_status::ok) {
            for (std::size_t i = 0; i < b.size(); ++i) check.on(b[i].data(), b[i].size());
            got += b.size();
            continue;
          }
          if (st != shmbox::recv_status::timeout) failed_receive(st);
          if (stop) throw bench_failure("shmbox-bridge receiver stopped");
          dl.check(a.timeout_s);
        }
        t_end = bench_clock::now();
        if (got != a.count) throw bench_failure("shmbox-bridge: received " + std::to_string(got) + " messages, expected " + std::to_string(a.count));
      },
      [&](const std::atomic<bool>& receiver_done) {
        const Deadline dl(a.timeout_s, "shmbox-bridge throughput (posting)");
        t0 = bench_clock::now();
        for (std::uint64_t i = 0; i < a.count; ++i) post(dl);
        while (!receiver_done) {  // the receiver times itself; here only the bridges are watched
          sleep_ms(10);
          alive();
          dl.check(a.timeout_s);
        }
      });
  cpu.record(out, "shmbox-bridge", a.count);
  out[{"shmbox-bridge", "rate"}].push_back(static_cast<double>(a.count) / (us_between(t0, t_end) / 1e6));
  // Latency: one message at a time.
  std::vector<double> us;
  one_at_a_time(a.lat_count, &us, "shmbox-bridge latency");
  add_latency(out, "shmbox-bridge", us);
  // Nothing more arrives.
  if (owner->receive(m, {.timeout = 50ms}) == shmbox::recv_status::ok)
    throw bench_failure("shmbox-bridge: a message arrived after the last one (sequence " +
                        std::to_string(check.received()) + " expected none)");
  alive();
  imp.stop();
  exp.stop();
}

// ===========================================================================
// Output
// ===========================================================================

std::string size_group(std::size_t size) {
  return "bridge-" + (size % 1024 == 0 ? std::to_string(size / 1024) + "k" : std::to_string(size));
}

int run(const Args& args) {
  install_signal_handlers(cleanup_on_signal);
  ::signal(SIGPIPE, SIG_IGN);
  remove_stale(kProg, "/dev/shm", kMarker);
  const std::string load_before = load_average();
  const std::string group = size_group(args.size);
  const std::vector<std::string> mechs = {"nats-core",      "nats-core-asap", "jetstream-sync",
                                          "jetstream-async", "jetstream-pull", "shmbox-bridge"};

  std::string bridge_bin = args.bridge;
  if (bridge_bin.empty())
    if (const char* e = std::getenv("SHMBOX_BRIDGE"); e != nullptr && *e != '\0') bridge_bin = e;
  if (bridge_bin.empty())
    for (const std::string& cand : {exe_dir() + "/../tools/shmbox-bridge", exe_dir() + "/shmbox-bridge"})
      if (::access(cand.c_str(), X_OK) == 0) {
        bridge_bin = cand;
        break;
      }
  std::string bridge_skip;
  if (bridge_bin.empty()) bridge_skip = "shmbox-bridge not found (--bridge PATH, $SHMBOX_BRIDGE, or ../tools/ next to the benchmark)";
  else if (::access(bridge_bin.c_str(), X_OK) != 0) bridge_skip = "shmbox-bridge not executable: " + bridge_bin;

  const TempDir tmp;
  NatsServer server;
  if (const auto why = server.start(args, tmp.path())) {
    for (const auto& m : mechs) print_skip(group, m, *why);
    std::fprintf(stderr, "%s: every mechanism skipped: %s\n", kProg.data(), why->c_str());
    return 0;
  }
  Samples samples;
  const auto started = bench_clock::now();
  {
    Conn admin_conn = connect(server.url(), false);
    Js admin = jetstream(admin_conn.get(), 0, args.timeout_s, nullptr);
    const Ctx ctx{args, server, admin.get(), std::to_string(::getpid()), bridge_skip.empty() ? bridge_bin : "", tmp.path()};
    for (int rep = 0; rep < args.reps; ++rep) {  // interleaved: rep 1 of everything, then rep 2, ...
      for (const char* what : {"nats-core", "jetstream", "shmbox-bridge"}) {
        if (std::string_view(what) == "shmbox-bridge" && !bridge_skip.empty()) continue;
        const auto t = bench_clock::now();
        try {
          if (std::string_view(what) == "nats-core") run_core(ctx, samples);
          else if (std::string_view(what) == "jetstream") run_jetstream(ctx, samples);
          else run_bridge(ctx, samples, rep);
        } catch (const std::exception& e) {
          throw bench_failure(std::string(what) + ", rep " + std::to_string(rep + 1) + ": " + e.what());
        }
        if (args.verbose) {
          std::string line;
          for (auto& [key, v] : samples)
            if (key.first.starts_with(what) && static_cast<int>(v.size()) == rep + 1)
              line += "  " + key.first + " " + key.second + " " + fmt(v.back());
          std::fprintf(stderr, "rep %d/%d %-14s %6.2f s:%s\n", rep + 1, args.reps, what,
                       std::chrono::duration<double>(bench_clock::now() - t).count(), line.c_str());
        }
      }
      // Ratios of this repetition.
      auto last = [&](const char* m, const char* k) { return samples[{m, k}].back(); };
      if (bridge_skip.empty()) {
        samples[{"shmbox-bridge", "ratio-rate"}].push_back(last("shmbox-bridge", "rate") / last("jetstream-async", "rate"));
        samples[{"shmbox-bridge", "ratio-p50"}].push_back(last("shmbox-bridge", "p50") / last("jetstream-sync", "p50"));
        samples[{"shmbox-bridge", "ratio-p99"}].push_back(last("shmbox-bridge", "p99") / last("jetstream-sync", "p99"));
        samples[{"shmbox-bridge", "ratio-rate-pull"}].push_back(last("shmbox-bridge", "rate") / last("jetstream-pull", "rate"));
        samples[{"shmbox-bridge", "ratio-p50-pull"}].push_back(last("shmbox-bridge", "p50") / last("jetstream-pull", "p50"));
        samples[{"shmbox-bridge", "ratio-p99-pull"}].push_back(last("shmbox-bridge", "p99") / last("jetstream-pull", "p99"));
      }
    }
    // admin's context and connection go before nats_Close
  }
  const double elapsed = std::chrono::duration<double>(bench_clock::now() - started).count();
  server.stop();
  nats_Close();

  // Rows on stdout, the table on stderr.
  const std::string counts = std::to_string(args.count) + " msgs/run, " + std::to_string(args.lat_count) +
                             " samples/run, " + std::to_string(args.reps) + " reps";
  auto note_of = [&](const std::string& m) {
    if (m == "nats-core") return counts + "; default client options (flusher thread)";
    if (m == "nats-core-asap") return counts + "; publisher with SendAsap";
    if (m == "jetstream-sync") return counts + "; js_PublishMsg, file storage" + (args.js_plain ? "" : ", bridge headers");
    if (m == "jetstream-pull")
      return counts + "; js_PublishMsgAsync -> durable pull consumer, Fetch(256, 250 ms) + Ack, file storage" +
             (args.js_plain ? "" : ", bridge headers");
    if (m == "jetstream-async")
      return counts + "; js_PublishMsgAsync, window " + (args.window == 0 ? std::string("unlimited") : std::to_string(args.window)) +
             ", file storage" + (args.js_plain ? "" : ", bridge headers");
    std::string n = counts + "; box capacity " + std::to_string(args.box_capacity) + ", " +
                    (args.bridge_creates_stream ? "stream made by export --create-stream" : "stream like jetstream-*");
    std::string extra;
    for (const auto& x : args.export_args) extra += " " + x;
    n += extra.empty() ? ", export defaults" : ", export" + extra;
    extra.clear();
    for (const auto& x : args.import_args) extra += " " + x;
    n += extra.empty() ? ", import defaults" : ", import" + extra;
    return n;
  };
  Results res;
  for (const auto& m : mechs) {
    if (m == "shmbox-bridge" && !bridge_skip.empty()) {
      res.skip(group, m, bridge_skip);
      continue;
    }
    for (const char* k : {"rate", "p50", "p99", "ratio-rate", "ratio-p50", "ratio-p99", "ratio-rate-pull",
                          "ratio-p50-pull", "ratio-p99-pull", "cpu-server", "cpu-export", "cpu-import", "cpu-bench"}) {
      auto it = samples.find({m, k});
      if (it == samples.end()) continue;
      const std::string metric = k;
      const bool ratio = metric.starts_with("ratio");
      std::string note = note_of(m);
      if (metric == "ratio-rate") note = "shmbox-bridge / jetstream-async msg/s, same repetition";
      if (metric == "ratio-p50" || metric == "ratio-p99") note = "shmbox-bridge / jetstream-sync latency, same repetition";
      if (metric.ends_with("-pull")) note = "shmbox-bridge / jetstream-pull (publish -> pull consumer), same repetition";
      if (metric.starts_with("cpu-"))
        note = "CPU (user + system) of " + metric.substr(4) + " per message of the throughput run, 10 ms ticks";
      for (const double v : it->second)
        res.add(group, m, metric, ratio ? "x" : metric == "rate" ? "msg/s" : metric.starts_with("cpu-") ? "us/msg" : "us", v, note);
    }
  }
  std::fprintf(stderr,
               "\n# %s: %zu-byte messages; median (min .. max) of %d runs, interleaved; throughput N = %llu, latency "
               "%llu samples per run after %llu warm-up\n# nats-server %s (-js, file storage under %s), %ld CPUs, load "
               "average %s before, %s after; %.0f s\n",
               kProg.data(), args.size, args.reps, static_cast<unsigned long long>(args.count),
               static_cast<unsigned long long>(args.lat_count), static_cast<unsigned long long>(args.warmup),
               server.version().c_str(), tmp.path().c_str(), ::sysconf(_SC_NPROCESSORS_ONLN), load_before.c_str(),
               load_average().c_str(), elapsed);
  res.print();
  std::fprintf(stderr,
               "  (rate: nats-core publish -> subscriber, jetstream-async publish -> every ack (window %s),\n"
               "   jetstream-pull publish -> fetched by a pull consumer, shmbox-bridge post into A -> received\n"
               "   from B; latency: one message at a time, nats-core(-asap) publish -> received, jetstream-sync\n"
               "   publish -> ack, jetstream-pull publish -> fetched, shmbox-bridge post -> received from B;\n"
               "   ratio-*: shmbox-bridge over jetstream-async (rate) and jetstream-sync (p50, p99), -pull: over\n"
               "   jetstream-pull; per repetition; cpu-*: user + system per message of the throughput run)\n",
               args.window == 0 ? "unlimited" : std::to_string(args.window).c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return shmbench::bench_main(kProg, argc, argv, parse_args, run); }
