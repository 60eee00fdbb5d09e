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
//   At the end, on failure, and on SIGINT/SIGTERM/SIGHUP the parent stops it
//   (harness.hpp, Daemon): SIGTERM, then SIGKILL after 10 s. RouDi also gets
//   PR_SET_PDEATHSIG(SIGTERM), so it shuts down when we are killed. (After a
//   failed run, whose children are SIGKILLed, RouDi may not stop cleanly:
//   iceoryx 2.0.3 aborts in its shutdown when a registered process is already
//   gone (POSH__ROUDI_PROCESS_SHUTDOWN_FAILED), and hangs removing the ports
//   of a process that died inside publish() holding its port's mutex, which
//   is not robust. The 10 s bound and the cleanup below cover both.)
// * Processes, message checks, start barrier, watchdog, repetitions (each run
//   with fresh processes and services): harness.hpp, COMMON METHOD. Only the
//   children call PoshRuntime::initRuntime, after fork, with a unique name
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
// * Throughput. Every publisher posts its share of N messages (--messages,
//   split as evenly as possible; 1 KiB runs use N/2, said in the note). A
//   message: loan a chunk, write the payload, publish. The subscriber
//   busy-polls take() (sched_yield() when nothing is there: up to 5 busy
//   processes share the CPUs), checks every message, release(). 4 publishers: this Debian build is m:n
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
//   reports them.
// * Cleanup. RouDi removes what it made (/dev/shm/iceoryx_mgmt, the user
//   segment /dev/shm/<group name>, /tmp/roudi, /tmp/roudi.lock,
//   /tmp/iox-unique-roudi.lock) when it stops cleanly; a child removes its
//   socket /tmp/<runtime name> and its /tmp/<runtime name>.lock when it
//   exits. The parent removes whatever of those is left: a killed child's
//   socket and lock file at the end of its run (after its processes are
//   reaped), RouDi's paths after RouDi is gone and only if our RouDi got ready
//   (then they were its own) or if they did not exist before we started it
//   (so another RouDi's files are never touched). Such child files of earlier
//   benchmark processes that no longer exist (a parent killed with SIGKILL)
//   are removed at start. SIGINT/SIGTERM/SIGHUP do the same cleanup
//   (async-signal-safe: kill, waitpid, nanosleep, unlink).
//
// This file has RouDi, the iceoryx ports and the two kinds of runs.
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
#include <array>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "harness.hpp"

#include "iceoryx_hoofs/log/logmanager.hpp"
#include "iceoryx_posh/iceoryx_posh_deployment.hpp"
#include "iceoryx_posh/mepoo/chunk_header.hpp"
#include "iceoryx_posh/popo/untyped_publisher.hpp"
#include "iceoryx_posh/popo/untyped_subscriber.hpp"
#include "iceoryx_posh/popo/wait_set.hpp"
#include "iceoryx_posh/runtime/posh_runtime.hpp"
#include "rows.hpp"

namespace {

using namespace shmbench;

constexpr std::string_view kProg = "shmbox-bench-iceoryx";
constexpr std::string_view kMarker = "shmbench-ice-";  // every runtime name starts with it
constexpr std::uint64_t kQueueCapacity = iox::MAX_SUBSCRIBER_QUEUE_CAPACITY;  // 256 in Debian's build
constexpr bool kManyToMany = std::is_same_v<iox::build::CommunicationPolicy, iox::build::ManyToManyPolicy>;

// ===========================================================================
// Command line
// ===========================================================================

struct Args : CommonArgs {  // its timeout_s also bounds RouDi's start
  std::uint64_t messages = 2'000'000;  // per 64 B throughput run; 1 KiB runs: half
  std::uint64_t roundtrips = 20'000;   // measured per round-trip run
  std::uint64_t warmup = 2'000;        // unmeasured round trips before them
  std::string roudi = "/usr/bin/iox-roudi";
  std::string only;  // run only groups containing this text
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

std::optional<Args> parse_args(int argc, char** argv) {
  Args a;
  const bool ok = parse_options(kProg, argc, argv, usage, a, [&](ArgWalker& w) {
    const std::string_view arg = w.name();
    std::string_view value;
    if (arg == "--messages") return w.number(a.messages, 8);
    if (arg == "--roundtrips") return w.number(a.roundtrips, 1);
    if (arg == "--warmup") return w.number(a.warmup);
    if (arg == "--roudi") {
      const bool ok = w.value(value) && !value.empty();
      a.roudi = std::string(value);
      return ok;
    }
    if (arg == "--only") {
      const bool ok = w.value(value);
      a.only = std::string(value);
      return ok;
    }
    return false;
  });
  if (!ok) return std::nullopt;
  a.quick_default(a.messages, "--messages", 100'000);
  a.quick_default(a.roundtrips, "--roundtrips", 2'000);
  a.quick_default(a.warmup, "--warmup", 200);
  a.quick_default(a.reps, "--reps", 1);
  return a;
}

// ===========================================================================
// RouDi's part of the cleanup on fatal signals (async-signal-safe calls only)
// ===========================================================================
// The harness's handler kills and reaps the children, stops RouDi (class
// Daemon: RouDi removes its segments, sockets and lock files) and removes the
// children's socket and lock files (TrackedName); then this hook removes the
// RouDi paths the parent may remove, so that SIGINT/SIGTERM/SIGHUP leave
// /dev/shm and /tmp as they were.

constexpr int kMaxPaths = 8;
constexpr std::size_t kPathMax = 160;
char g_roudi_path[kMaxPaths][kPathMax];
volatile std::sig_atomic_t g_roudi_path_owned[kMaxPaths];

void remove_roudi_paths_on_signal() {
  for (int i = 0; i < kMaxPaths; ++i)
    if (g_roudi_path_owned[i] != 0) ::unlink(g_roudi_path[i]);
}

bool path_exists(const std::string& p) {
  struct stat st {};
  return ::lstat(p.c_str(), &st) == 0;
}

// What a runtime creates: its socket (IPC channel) and its lock file.
std::string socket_path(const std::string& runtime_name) { return "/tmp/" + runtime_name; }
std::string lock_path(const std::string& runtime_name) { return "/tmp/" + runtime_name + ".lock"; }

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

    proc_.start({bin, "-m", "off", "-k", "5"}, Daemon::kPipe, Daemon::kSameAsOut, SIGTERM,  // SIGTERM: a clean
                args.verbose);                                                               // shutdown if we die
    // Handshake: its "ready" line, or EOF (it exited), or the deadline.
    const auto deadline = bench_clock::now() + std::chrono::seconds(args.timeout_s);
    while (proc_.text().find("RouDi is ready for clients") == std::string::npos) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - bench_clock::now()).count();
      if (left <= 0) {
        stop();
        return "iox-roudi did not get ready within " + std::to_string(args.timeout_s) + " s";
      }
      if (!proc_.read_out(static_cast<int>(left))) {  // EOF: RouDi exited
        const std::string why = last_line();
        stop();
        return "iox-roudi exited at start: " + why;
      }
    }
    for (int k = 0; k < kMaxPaths; ++k) g_roudi_path_owned[k] = g_roudi_path[k][0] != '\0' ? 1 : 0;
    std::fprintf(stderr, "%s: started %s (pid %d), ready\n", kProg.data(), bin.c_str(), static_cast<int>(proc_.pid()));
    return std::nullopt;
  }

  // Reads what RouDi printed (we must keep its pipe from filling up). Returns
  // false at EOF, i.e. when RouDi has exited.
  bool read_log() { return proc_.read_out(0); }
  int log_fd() const noexcept { return proc_.out_fd(); }

  // The most telling line of its output: the last Fatal, else Error, else
  // the last line, without timestamp and level.
  std::string last_line() const {
    std::vector<std::string> lines;
    const std::string t = strip_ansi(proc_.text());
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

  // SIGTERM; waits until it exits (kDaemonStopTimeoutS), then SIGKILL;
  // reaps it, then removes what it may have left behind.
  void stop() {
    if (proc_.pid() <= 0) return;
    if (!proc_.stop()) std::fprintf(stderr, "%s: iox-roudi did not stop in time, killed it\n", kProg.data());
    for (int i = 0; i < kMaxPaths; ++i) {
      if (g_roudi_path_owned[i] != 0 && ::unlink(g_roudi_path[i]) == 0)
        std::fprintf(stderr, "%s: removed %s left by iox-roudi\n", kProg.data(), g_roudi_path[i]);
      g_roudi_path_owned[i] = 0;
    }
  }

  ~Roudi() { stop(); }

 private:
  Daemon proc_{"iox-roudi"};
};

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
  ChildEnds ends;        // its ends of the run's pipes
  int timeout_s = 120;
};

// The start of every child (before its body): stdout goes to stderr
// (iceoryx's messages must not mix with the rows), iceoryx logs warnings and
// errors only, and the runtime registers with RouDi under `runtime`.
void init_runtime(const std::string& runtime) {
  ::dup2(STDERR_FILENO, STDOUT_FILENO);
  // iceoryx's applications log at Verbose by default.
  iox::log::LogManager::GetLogManager().SetDefaultLogLevel(iox::log::LogLevel::kWarn,
                                                           iox::log::LogLevelOutput::kHideLogLevel);
  iox::runtime::PoshRuntime::initRuntime(iox::RuntimeName_t(iox::cxx::TruncateToCapacity, runtime));
}

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

// --- throughput ---------------------------------------------------------------

void tput_publisher(const ChildCtx& c) {
  iox::popo::UntypedPublisher pub(service(c.instance, "data"), publisher_options());
  wait_connected([&] { return pub.hasSubscribers(); }, c.timeout_s, "publisher");
  const auto id = static_cast<std::uint64_t>(c.id);
  const std::uint64_t count = c.per_producer[id];
  const MessageBuffer msg(id, c.payload);  // the template of every message
  std::uint64_t chunk = 0;                 // the chunk size of one message, for the log
  {
    void* p = loan(pub, c.payload);
    chunk = chunk_size(p);
    pub.release(p);
  }
  c.ends.ready_and_wait(c.id, chunk);
  for (std::uint64_t seq = 0; seq < count; ++seq) {
    auto* p = static_cast<unsigned char*>(loan(pub, c.payload));
    std::memcpy(p, msg.bytes, c.payload);
    set_seq(p, seq);
    pub.publish(p);  // waits (yield loop) while the subscriber's queue is full
  }
  c.ends.send(rec_kind::produced, c.id, count);
}

void tput_subscriber(const ChildCtx& c) {
  iox::popo::UntypedSubscriber sub(service(c.instance, "data"), subscriber_options());
  wait_connected([&] { return sub.getSubscriptionState() == iox::SubscribeState::SUBSCRIBED; }, c.timeout_s,
                 "subscriber");
  Checker check(c.per_producer, c.payload, "publisher");
  c.ends.ready_and_wait(-1);
  while (!check.complete()) {
    const void* p = try_take(sub);
    if (p == nullptr) {
      ::sched_yield();  // empty: let the publishers run (up to 5 busy processes)
      continue;
    }
    check.on(p, payload_size(p));
    sub.release(p);
  }
  finish_consumer(c.ends, check, [&] {
    const void* p = try_take(sub);
    if (p != nullptr) sub.release(p);
    return p == nullptr;
  });
}

// --- round trips ----------------------------------------------------------------

// A round-trip process's ports: it publishes on `out` and subscribes to `in`;
// with c.waitset the subscriber is attached to a WaitSet. The constructor
// returns when both ports are connected.
struct RttPorts {
  iox::popo::UntypedPublisher pub;
  iox::popo::UntypedSubscriber sub;
  std::optional<iox::popo::WaitSet<>> ws;

  RttPorts(const ChildCtx& c, const char* out, const char* in, const char* process)
      : pub(service(c.instance, out), publisher_options()), sub(service(c.instance, in), subscriber_options()) {
    if (c.waitset) {
      ws.emplace();
      if (ws->attachState(sub, iox::popo::SubscriberState::HAS_DATA).has_error())
        throw bench_failure("WaitSet::attachState failed");
    }
    wait_connected([&] { return pub.hasSubscribers() && sub.getSubscriptionState() == iox::SubscribeState::SUBSCRIBED; },
                   c.timeout_s, process);
  }

  // Waits for the next chunk: spinning on take(), or blocking in the WaitSet.
  const void* take_next() {
    for (;;) {
      if (const void* p = try_take(sub)) return p;
      if (ws)
        (void)ws->wait();  // HAS_DATA is a state: no lost wake-up
      else
        __builtin_ia32_pause();
    }
  }
};

// The sequence number of a round-trip message (bytes 8..15, as in MessageBuffer).
std::uint64_t seq_of(const void* p) {
  std::uint64_t seq = 0;
  std::memcpy(&seq, static_cast<const unsigned char*>(p) + 8, sizeof seq);
  return seq;
}

// Process A: ping -> pong, times every round trip.
void rtt_pinger(const ChildCtx& c) {
  RttPorts ports(c, "ping", "pong", "process A");
  const MessageBuffer msg(0, c.payload);
  std::vector<double> us;
  us.reserve(c.roundtrips);
  c.ends.ready_and_wait(-1);
  for (std::uint64_t seq = 0; seq < c.warmup + c.roundtrips; ++seq) {
    const std::int64_t t0 = now_ns();
    auto* p = static_cast<unsigned char*>(loan(ports.pub, c.payload));
    std::memcpy(p, msg.bytes, c.payload);
    set_seq(p, seq);
    ports.pub.publish(p);
    const void* answer = ports.take_next();
    const std::int64_t t1 = now_ns();
    const std::uint64_t got = seq_of(answer);
    if (payload_size(answer) != c.payload || got != seq)
      throw bench_failure("round trip " + std::to_string(seq) + ": answer of " + std::to_string(payload_size(answer)) +
                          " bytes with sequence " + std::to_string(got));
    ports.sub.release(answer);
    if (seq >= c.warmup) us.push_back(static_cast<double>(t1 - t0) / 1e3);
  }
  const std::array<double, 3> q = shmbench::percentiles(us);
  Record r = make_record(rec_kind::result, -1, us.size());
  std::copy(q.begin(), q.end(), r.us);
  c.ends.send(r);
}

// Process B: takes every ping and answers it on pong with a copy.
void rtt_ponger(const ChildCtx& c) {
  RttPorts ports(c, "pong", "ping", "process B");
  c.ends.ready_and_wait(1);
  for (std::uint64_t seq = 0; seq < c.warmup + c.roundtrips; ++seq) {
    const void* ping = ports.take_next();
    const std::uint64_t got = seq_of(ping);
    if (payload_size(ping) != c.payload || got != seq)
      throw bench_failure("ping " + std::to_string(seq) + " has sequence " + std::to_string(got));
    void* pong = loan(ports.pub, c.payload);
    std::memcpy(pong, ping, c.payload);
    ports.sub.release(ping);
    ports.pub.publish(pong);
  }
  c.ends.send(rec_kind::produced, 1, c.warmup + c.roundtrips);
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

// One run (harness.hpp, ONE RUN) with fresh processes and services: a
// subscriber and the publishers (throughput), or processes A and B.
RunOut run_once(const Config& cfg, const Args& args, Roudi& roudi) {
  const int run_no = ++g_run;
  const std::string tag = std::to_string(::getpid()) + "-" + std::to_string(run_no);
  const std::string rt_prefix = std::string(kMarker) + tag + "-";

  // The socket and lock file of every child's runtime: normally removed by
  // the child itself; declared before the Run, so that they are removed (if
  // still there) after its children are killed and reaped.
  std::vector<std::unique_ptr<TrackedName>> runtime_files;
  Run run(child_exit::normal);  // exit(): the runtime unregisters from RouDi
  run.serve_meanwhile(roudi.log_fd(), [&roudi] {  // RouDi's pipe must not fill up
    if (!roudi.read_log()) throw bench_failure("iox-roudi exited during the run: " + roudi.last_line());
  });
  ChildCtx base;
  base.instance = (cfg.kind == Kind::tput ? "tput-" : "rtt-") + tag;
  base.payload = cfg.payload;
  base.roundtrips = args.roundtrips;
  base.warmup = args.warmup;
  base.waitset = cfg.waitset;
  base.ends = run.child_ends();
  base.timeout_s = args.timeout_s;
  const std::uint64_t total = cfg.kind == Kind::tput ? tput_messages(cfg, args) : 0;
  if (cfg.kind == Kind::tput) base.per_producer = split_evenly(total, cfg.publishers);

  // Forks a child that registers as `runtime` with RouDi and runs body().
  auto spawn = [&](std::string role, const std::string& runtime, std::int32_t who, auto body) {
    runtime_files.push_back(std::make_unique<TrackedName>(socket_path(runtime)));
    runtime_files.push_back(std::make_unique<TrackedName>(lock_path(runtime)));
    run.spawn(
        std::move(role), who,
        [&] {
          init_runtime(runtime);
          body();  // its iceoryx objects are gone when it returns
        },
        {roudi.log_fd()});
  };
  int expected_ready = 0, expected_produced = 0;
  if (cfg.kind == Kind::tput) {
    spawn("subscriber", rt_prefix + "sub", -1, [&] { tput_subscriber(base); });
    for (int i = 0; i < cfg.publishers; ++i)
      spawn("publisher " + std::to_string(i), rt_prefix + "pub" + std::to_string(i), i, [&] {
        ChildCtx c = base;
        c.id = i;
        tput_publisher(c);
      });
    expected_ready = cfg.publishers + 1;
    expected_produced = cfg.publishers;
  } else {
    spawn("round-trip process A", rt_prefix + "a", -1, [&] { rtt_pinger(base); });
    spawn("round-trip process B", rt_prefix + "b", 1, [&] { rtt_ponger(base); });
    expected_ready = 2;
    expected_produced = 1;
  }
  run.watch(args.timeout_s);

  RunOut out;
  // Set-up: every child is registered and its ports are connected.
  for (const Record& r : run.wait_ready(expected_ready)) out.chunk = std::max(out.chunk, r.b);
  const std::int64_t t_release = run.release();
  // Publishers (process B) report when finished; then the subscriber may
  // check that nothing more arrives; it (process A) reports the result.
  const Run::Finished f = run.wait_finished(expected_produced);
  run.wait_exit();

  if (cfg.kind == Kind::tput) {
    if (f.sent != total || f.result.a != total)
      throw bench_failure("count mismatch: published " + std::to_string(f.sent) + ", received " +
                          std::to_string(f.result.a) + ", expected " + std::to_string(total));
    if (f.result.t_ns <= t_release) throw bench_failure("subscriber reported a time before the release");
    out.seconds = static_cast<double>(f.result.t_ns - t_release) / 1e9;
    out.messages = total;
  } else {
    if (f.result.a != args.roundtrips || f.sent != args.roundtrips + args.warmup)
      throw bench_failure("round-trip count mismatch");
    std::copy(f.result.us, f.result.us + 3, out.q);
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
  install_signal_handlers(remove_roudi_paths_on_signal);
  remove_stale(kProg, "/tmp", kMarker);  // sockets and lock files of children of dead benchmarks
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

  Results res;
  try {
    for (int rep = 0; rep < args.reps; ++rep) {
      for (const Config* c : selected) {
        const RunOut r = run_once(*c, args, roudi);
        if (c->kind == Kind::tput) {
          const double mps = static_cast<double>(r.messages) / r.seconds / 1e6;
          res.add(c->group, c->mech, "rate", "Mmsg/s", mps, note_of(*c, args));
          std::fprintf(stderr, "rep %d/%d  %-13s %-16s %8.4f s  %7.3f Mmsg/s  (chunk %llu B)\n", rep + 1, args.reps,
                       c->group, c->mech, r.seconds, mps, static_cast<unsigned long long>(r.chunk));
        } else {
          for (std::size_t k = 0; k < 3; ++k) res.add(c->group, c->mech, kPercentileMetric[k], "us", r.q[k], note_of(*c, args));
          std::fprintf(stderr, "rep %d/%d  %-13s %-16s p50 %7.2f us  p99 %7.2f us  p99.9 %7.2f us\n", rep + 1,
                       args.reps, c->group, c->mech, r.q[0], r.q[1], r.q[2]);
        }
      }
    }
  } catch (...) {
    roudi.stop();
    throw;
  }
  roudi.stop();
  res.print();
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return shmbench::bench_main(kProg, argc, argv, parse_args, run); }
