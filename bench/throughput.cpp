// bench/throughput.cpp - shmbox-bench-throughput: how many 64-byte messages per
// second go from producer processes to one consumer process through
//   * shmbox (policy block, and policy reject with a busy retry loop),
//   * Boost.Interprocess message_queue (the usual off-the-shelf baseline),
//   * a hand-written single-producer spin ring (spin_ring.hpp): the practical
//     limit for moving bytes between two processes through shared memory,
// with 1 and 4 producers (the spin ring: 1 only), all in one run, printed as
// one table.
//
// METHOD
// * Processes. The benchmark process (the parent) only orchestrates: for every
//   measured run it creates a fresh segment/queue, forks one consumer process
//   and one process per producer, and reads what they report through a pipe.
//   No measured work happens in the parent.
// * Messages. Every producer posts its share of N messages (N = --messages,
//   split as evenly as possible). Each message is 64 bytes; its first 16 bytes
//   are (producer id, sequence number), the rest a fixed pattern.
// * Checking. The consumer checks every message: the right size, a known
//   producer id, and exactly the next sequence number of that producer (all
//   three mechanisms are FIFO per producer), so a lost, duplicated, reordered
//   or extra message fails the run. After the producers have reported that
//   they are finished, the consumer also checks that nothing more arrives, so
//   the count is exact; for shmbox the parent additionally compares the box's
//   own stored/delivered counters with N. Any failure aborts the benchmark
//   with a message on stderr and exit status 1.
// * Start barrier. Every child first does its set-up (attach/open/acquire,
//   mapping) and reports "ready". When all are ready, the parent reads
//   steady_clock (t_release) and closes the write end of the "go" pipe: every
//   child is blocked in read() on it and wakes on EOF at the same moment. So
//   fork, attaching/opening and mapping the segment are not timed.
// * Mechanisms. shmbox: capacity 1024, slot_size 64; producers call
//   post(data, 64) (block: waits on a futex while full, block_timeout 1 s, a
//   timeout is retried; reject: returns full at once and is retried in a busy
//   loop); the consumer calls receive_batch(b, 256, 1 s) into a reusable
//   shmbox::batch b (no allocation per message) and clears b between calls. message_queue: 1024 x 64 bytes, blocking send/receive. Spin ring:
//   1024 slots, see spin_ring.hpp.
// * Timing. The consumer reads steady_clock right after it has received and
//   checked the last message (t_end) and reports it. The run's time is
//   t_end - t_release; steady_clock is CLOCK_MONOTONIC, one clock for all
//   processes of the machine. Throughput = N / time.
// * Repetitions. Every configuration runs R times (--reps). The runs are
//   interleaved (rep 1 of every configuration, then rep 2, ...), so that a
//   slow phase of the machine does not hit a single configuration. The table
//   shows the median rate and the min..max; ratios are of medians of this run.
// * No sleeps synchronise anything: start, finish and the final drain check
//   are pipe handshakes. poll() timeouts in the parent are only a watchdog
//   (--timeout per run) that kills the children when something hangs.
// * Cleanup. Names contain the parent's pid; a stale name is unlinked before
//   it is created, and segments of earlier runs whose process is gone are
//   removed at start. The parent removes every segment/queue after each run
//   (RAII), also when the run fails (children are killed and reaped first),
//   and on SIGINT/SIGTERM/SIGHUP. Children die with the parent (PDEATHSIG).
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
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
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "shmbox/shmbox.hpp"
#include "spin_ring.hpp"

#if defined(SHMBOX_HAVE_BOOST)
#include <boost/interprocess/exceptions.hpp>
#include <boost/interprocess/ipc/message_queue.hpp>
#endif

namespace {

using bench_clock = std::chrono::steady_clock;

constexpr std::size_t kMsgSize = 64;        // bytes per message, every mechanism
constexpr std::uint32_t kCapacity = 1024;   // messages each mechanism holds
constexpr std::size_t kBatch = 256;         // shmbox receive_batch maximum
constexpr std::string_view kMarker = "shmbench-tp-";  // in every name we create

// Any failure of the benchmark itself (not a usage error).
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
  std::uint64_t messages = 2'000'000;  // per run, split across the producers
  int reps = 5;
  int timeout_s = 120;  // watchdog per run
  bool verbose = false;
  std::string only;  // run only the configurations whose label contains this
};

void usage(std::FILE* to) {
  std::fprintf(to,
               "usage: shmbox-bench-throughput [--messages N] [--reps R] [--timeout S] [--only TEXT] [--verbose]\n"
               "  --messages N  messages per run, split across the producers (default 2000000)\n"
               "  --reps R      runs per configuration; the table shows median and min..max (default 5)\n"
               "  --timeout S   watchdog: a run taking longer than S seconds fails (default 120)\n"
               "  --only TEXT   run only the rows whose mechanism contains TEXT (e.g. \"shmbox (block)\")\n"
               "  --verbose     print every run (and producer retries) on stderr\n");
}

template <class T>
bool parse_number(std::string_view s, T& out) {
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc{} && p == s.data() + s.size();
}

std::optional<Args> parse_args(int argc, char** argv) {
  Args a;
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
    } else if (arg == "--messages") {
      ok = take_value() && parse_number(value, a.messages) && a.messages >= 1;
    } else if (arg == "--reps") {
      ok = take_value() && parse_number(value, a.reps) && a.reps >= 1 && a.reps <= 1000;
    } else if (arg == "--timeout") {
      ok = take_value() && parse_number(value, a.timeout_s) && a.timeout_s >= 1;
    } else if (arg == "--only") {
      ok = take_value();
      a.only = std::string(value);
    } else if (arg == "--verbose" || arg == "-v") {
      a.verbose = true;
    } else {
      ok = false;
    }
    if (!ok) {
      std::fprintf(stderr, "shmbox-bench-throughput: bad argument '%s'\n", argv[i]);
      usage(stderr);
      return std::nullopt;
    }
  }
  return a;
}

// ===========================================================================
// Cleanup on fatal signals (everything here is async-signal-safe)
// ===========================================================================
// The RAII guards below register the /dev/shm paths they own and the parent
// registers its children, so that SIGINT/SIGTERM/SIGHUP still kill the
// children and unlink the segments (unlink(2) is async-signal-safe; on Linux
// shm_unlink(name) is unlink("/dev/shm/name")).

constexpr int kMaxTracked = 4;
constexpr int kMaxChildren = 16;
char g_tracked_path[kMaxTracked][256];
volatile std::sig_atomic_t g_tracked_used[kMaxTracked];
volatile std::sig_atomic_t g_child_pid[kMaxChildren];

extern "C" void on_fatal_signal(int sig) {
  for (int i = 0; i < kMaxChildren; ++i)
    if (g_child_pid[i] > 0) ::kill(static_cast<pid_t>(g_child_pid[i]), SIGKILL);
  for (int i = 0; i < kMaxChildren; ++i)  // reap them: no zombies left to init
    if (g_child_pid[i] > 0) ::waitpid(static_cast<pid_t>(g_child_pid[i]), nullptr, 0);
  for (int i = 0; i < kMaxTracked; ++i)
    if (g_tracked_used[i] != 0) ::unlink(g_tracked_path[i]);
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

// Owns a path in /dev/shm: unlinks it when created (a stale one of the same
// name), on destruction, and from the signal handler while it exists.
class TrackedPath {
 public:
  explicit TrackedPath(const std::string& path) : path_(path) {
    ::unlink(path_.c_str());
    for (int i = 0; i < kMaxTracked; ++i) {
      if (g_tracked_used[i] != 0) continue;
      std::snprintf(g_tracked_path[i], sizeof g_tracked_path[i], "%s", path_.c_str());
      std::atomic_signal_fence(std::memory_order_seq_cst);  // the path is complete before it is used
      g_tracked_used[i] = 1;
      slot_ = i;
      break;
    }
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

// Removes /dev/shm entries with our marker left by benchmark processes that
// no longer exist (killed with SIGKILL, for instance).
void remove_stale_segments() {
  DIR* d = ::opendir("/dev/shm");
  if (d == nullptr) return;
  std::vector<std::string> stale;
  while (const dirent* e = ::readdir(d)) {
    const std::string_view n = e->d_name;
    const auto at = n.find(kMarker);
    if (at == std::string_view::npos) continue;
    const std::string_view rest = n.substr(at + kMarker.size());
    long pid = 0;
    const auto [p, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), pid);
    if (ec != std::errc{} || p == rest.data() || pid <= 0) continue;
    if (pid == ::getpid()) continue;
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;  // its process still exists
    stale.emplace_back(n);
  }
  ::closedir(d);
  for (const auto& n : stale) {
    if (::unlink(("/dev/shm/" + n).c_str()) == 0)
      std::fprintf(stderr, "shmbox-bench-throughput: removed stale /dev/shm/%s\n", n.c_str());
  }
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

enum class rec_kind : std::int32_t { ready = 1, produced = 2, result = 3, failed = 4 };

// One report from a child. Smaller than PIPE_BUF, so every write() of a record
// is atomic and records of different children never interleave.
struct Record {
  rec_kind kind{};
  std::int32_t who = 0;   // producer id, or -1 for the consumer
  std::uint64_t a = 0;    // produced: messages posted; result: messages received
  std::uint64_t b = 0;    // produced: retries (full/timeout); result: unused
  std::int64_t t_ns = 0;  // result: steady_clock time of the last message
  char text[200] = {};    // failed: what went wrong
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

void send_record(int fd, rec_kind kind, std::int32_t who, std::uint64_t a = 0, std::uint64_t b = 0,
                 std::int64_t t_ns = 0, const std::string& text = {}) {
  Record r;
  r.kind = kind;
  r.who = who;
  r.a = a;
  r.b = b;
  r.t_ns = t_ns;
  const std::size_t n = std::min(text.size(), sizeof r.text - 1);
  if (n > 0) std::memcpy(r.text, text.data(), n);
  write_all(fd, &r, sizeof r);
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
// What the children do
// ===========================================================================

enum class Mech { shmbox_block, shmbox_reject, boost_mq, spin_ring };

struct Config {
  Mech mech;
  int producers;
  const char* label;
};

// What a child needs to know; the fds are its ends of the pipes.
struct ChildCtx {
  Mech mech{};
  std::string name;
  int id = -1;                             // producer id; -1: the consumer
  std::vector<std::uint64_t> per_producer;  // messages each producer posts
  int report_fd = -1;                      // write: records to the parent
  int go_fd = -1;                          // read: EOF = start
  int done_fd = -1;                        // read: EOF = every producer has finished
};

// The message of producer `id` with sequence `seq`.
struct MessageBuffer {
  alignas(16) unsigned char bytes[kMsgSize];
  explicit MessageBuffer(std::uint64_t id) {
    std::memset(bytes, static_cast<int>(0xA0 + (id & 0xF)), sizeof bytes);
    std::memcpy(bytes, &id, sizeof id);
  }
  void set_seq(std::uint64_t seq) noexcept { std::memcpy(bytes + 8, &seq, sizeof seq); }
};

// The consumer's check of every message: producer id and exactly the next
// sequence number of that producer.
class Checker {
 public:
  explicit Checker(const std::vector<std::uint64_t>& per_producer)
      : expected_(per_producer), next_(per_producer.size(), 0) {
    for (auto n : per_producer) total_ += n;
  }
  void on(const void* data, std::size_t size) {
    if (size != kMsgSize) fail("message of " + std::to_string(size) + " bytes, expected " + std::to_string(kMsgSize));
    std::uint64_t id = 0, seq = 0;
    std::memcpy(&id, data, sizeof id);
    std::memcpy(&seq, static_cast<const unsigned char*>(data) + 8, sizeof seq);
    if (id >= next_.size()) fail("message from unknown producer id " + std::to_string(id));
    if (seq != next_[id] || seq >= expected_[id])
      fail("producer " + std::to_string(id) + ": got sequence " + std::to_string(seq) + ", expected " +
           std::to_string(next_[id]) + " of " + std::to_string(expected_[id]) +
           " (a message was lost, duplicated, reordered or is extra)");
    ++next_[id];
    ++received_;
  }
  bool complete() const noexcept { return received_ == total_; }
  std::uint64_t received() const noexcept { return received_; }
  std::uint64_t total() const noexcept { return total_; }
  [[noreturn]] void fail(const std::string& what) const {
    throw bench_failure("after " + std::to_string(received_) + " of " + std::to_string(total_) +
                        " messages: " + what);
  }

 private:
  std::vector<std::uint64_t> expected_;
  std::vector<std::uint64_t> next_;
  std::uint64_t received_ = 0;
  std::uint64_t total_ = 0;
};

// --- shmbox -----------------------------------------------------------------

void shmbox_producer(const ChildCtx& c) {
  auto p = shmbox::Producer::attach(c.name);
  if (!p) throw bench_failure("Producer::attach: " + shmbox::explain(p.error()));
  const auto id = static_cast<std::uint64_t>(c.id);
  const std::uint64_t count = c.per_producer[id];
  MessageBuffer msg(id);
  send_record(c.report_fd, rec_kind::ready, c.id);
  wait_for_eof(c.go_fd);
  std::uint64_t retries = 0;
  for (std::uint64_t seq = 0; seq < count; ++seq) {
    msg.set_seq(seq);
    for (;;) {
      // block: sleeps on a futex while full (up to the box's block_timeout);
      // reject: returns full at once and we try again (a busy producer).
      const shmbox::post_status st = p->post(msg.bytes, kMsgSize);
      if (shmbox::is_stored(st)) break;
      if (st != shmbox::post_status::full && st != shmbox::post_status::timeout)
        throw bench_failure("post returned " + std::string(shmbox::to_string(st)) + ": " +
                            shmbox::explain(p->last_error()));
      ++retries;
    }
  }
  send_record(c.report_fd, rec_kind::produced, c.id, count, retries);
}

void shmbox_consumer(const ChildCtx& c) {
  auto owner = shmbox::Owner::acquire(c.name);
  if (!owner) throw bench_failure("Owner::acquire: " + shmbox::explain(owner.error()));
  Checker check(c.per_producer);
  shmbox::batch batch;  // reusable: a steady stream allocates nothing
  send_record(c.report_fd, rec_kind::ready, -1);
  wait_for_eof(c.go_fd);
  auto receive = [&](std::chrono::nanoseconds timeout) {
    batch.clear();  // keeps its memory
    const shmbox::recv_status st = owner->receive_batch(batch, kBatch, timeout);
    if (st != shmbox::recv_status::ok && st != shmbox::recv_status::timeout)
      check.fail("receive_batch returned " + std::string(shmbox::to_string(st)) + ": " +
                 shmbox::explain(owner->last_error()));
    for (std::size_t i = 0; i < batch.size(); ++i) {
      if (batch.redelivered(i)) check.fail("a message was flagged redelivered");
      check.on(batch[i].data(), batch[i].size());
    }
    return st == shmbox::recv_status::ok;
  };
  // A timeout only loops: a hang is caught by the parent's watchdog.
  while (!check.complete()) receive(std::chrono::seconds(1));
  const std::int64_t t_end = now_ns();
  wait_for_eof(c.done_fd);  // every producer has posted its last message
  if (receive(std::chrono::nanoseconds(0))) check.fail("messages arrived after the last expected one");
  send_record(c.report_fd, rec_kind::result, -1, check.received(), 0, t_end);
}

// --- Boost.Interprocess message_queue --------------------------------------

#if defined(SHMBOX_HAVE_BOOST)
namespace bip = boost::interprocess;

void mq_producer(const ChildCtx& c) {
  try {
    bip::message_queue mq(bip::open_only, c.name.c_str());
    const auto id = static_cast<std::uint64_t>(c.id);
    const std::uint64_t count = c.per_producer[id];
    MessageBuffer msg(id);
    send_record(c.report_fd, rec_kind::ready, c.id);
    wait_for_eof(c.go_fd);
    for (std::uint64_t seq = 0; seq < count; ++seq) {
      msg.set_seq(seq);
      mq.send(msg.bytes, kMsgSize, 0);  // blocks (condition variable) while full
    }
    send_record(c.report_fd, rec_kind::produced, c.id, count, 0);
  } catch (const bip::interprocess_exception& e) {
    throw bench_failure(std::string("boost message_queue (producer): ") + e.what());
  }
}

void mq_consumer(const ChildCtx& c) {
  try {
    bip::message_queue mq(bip::open_only, c.name.c_str());
    Checker check(c.per_producer);
    unsigned char buf[kMsgSize];
    bip::message_queue::size_type got = 0;
    unsigned prio = 0;
    send_record(c.report_fd, rec_kind::ready, -1);
    wait_for_eof(c.go_fd);
    while (!check.complete()) {
      mq.receive(buf, sizeof buf, got, prio);  // blocks while empty; the watchdog catches hangs
      check.on(buf, got);
    }
    const std::int64_t t_end = now_ns();
    wait_for_eof(c.done_fd);
    if (mq.try_receive(buf, sizeof buf, got, prio)) check.fail("messages arrived after the last expected one");
    send_record(c.report_fd, rec_kind::result, -1, check.received(), 0, t_end);
  } catch (const bip::interprocess_exception& e) {
    throw bench_failure(std::string("boost message_queue (consumer): ") + e.what());
  }
}
#endif

// --- spin ring ----------------------------------------------------------------

void ring_producer(const ChildCtx& c) {
  shmbench::SpinRing ring = shmbench::SpinRing::open(c.name);
  const auto id = static_cast<std::uint64_t>(c.id);
  const std::uint64_t count = c.per_producer[id];
  MessageBuffer msg(id);
  send_record(c.report_fd, rec_kind::ready, c.id);
  wait_for_eof(c.go_fd);
  for (std::uint64_t seq = 0; seq < count; ++seq) {
    msg.set_seq(seq);
    ring.push(msg.bytes);  // spins while full
  }
  send_record(c.report_fd, rec_kind::produced, c.id, count, 0);
}

void ring_consumer(const ChildCtx& c) {
  shmbench::SpinRing ring = shmbench::SpinRing::open(c.name);
  Checker check(c.per_producer);
  unsigned char buf[shmbench::SpinRing::kPayload];
  send_record(c.report_fd, rec_kind::ready, -1);
  wait_for_eof(c.go_fd);
  while (!check.complete()) {
    ring.pop(buf);  // spins while empty
    check.on(buf, sizeof buf);
  }
  const std::int64_t t_end = now_ns();
  wait_for_eof(c.done_fd);
  if (ring.try_pop(buf)) check.fail("messages arrived after the last expected one");
  send_record(c.report_fd, rec_kind::result, -1, check.received(), 0, t_end);
}

void child_main(const ChildCtx& c) {
  const bool consumer = c.id < 0;
  switch (c.mech) {
    case Mech::shmbox_block:
    case Mech::shmbox_reject:
      return consumer ? shmbox_consumer(c) : shmbox_producer(c);
    case Mech::boost_mq:
#if defined(SHMBOX_HAVE_BOOST)
      return consumer ? mq_consumer(c) : mq_producer(c);
#else
      throw bench_failure("built without Boost");
#endif
    case Mech::spin_ring:
      return consumer ? ring_consumer(c) : ring_producer(c);
  }
}

// ===========================================================================
// The parent: segments, children, one run
// ===========================================================================

// A fresh segment/queue for one run; removed when the object goes away.
class Resource {
 public:
  virtual ~Resource() = default;
  // After a successful run: anything the mechanism itself can confirm.
  virtual void verify(std::uint64_t /*total*/) {}
};

class ShmboxResource final : public Resource {
 public:
  ShmboxResource(const std::string& name, shmbox::policy pol) : name_(name), track_("/dev/shm/shmbox." + name) {
    shmbox::options o;
    o.capacity = kCapacity;
    o.slot_size = kMsgSize;
    o.overflow = pol;
    o.max_producers = 64;
    o.block_timeout = std::chrono::milliseconds(1000);  // a timed-out post is retried (and counted)
    auto box = shmbox::Box::create(name, o);
    if (!box) throw bench_failure("Box::create: " + shmbox::explain(box.error()));
    box_.emplace(std::move(*box));
  }
  ~ShmboxResource() override {
    box_.reset();
    (void)shmbox::Box::remove(name_);
  }
  void verify(std::uint64_t total) override {
    const shmbox::counters c = box_->read_counters();
    if (c.stored != total || c.delivered != total || c.redelivered != 0 || c.abandoned != 0)
      throw bench_failure("shmbox counters disagree: stored " + std::to_string(c.stored) + ", delivered " +
                          std::to_string(c.delivered) + ", expected " + std::to_string(total));
  }

 private:
  std::string name_;
  TrackedPath track_;
  std::optional<shmbox::Box> box_;
};

#if defined(SHMBOX_HAVE_BOOST)
class MqResource final : public Resource {
 public:
  explicit MqResource(const std::string& name) : name_(name), track_("/dev/shm/" + name) {
    try {
      bip::message_queue::remove(name_.c_str());
      bip::message_queue mq(bip::create_only, name_.c_str(), kCapacity, kMsgSize);  // the queue outlives the handle
    } catch (const bip::interprocess_exception& e) {
      throw bench_failure(std::string("boost message_queue create: ") + e.what());
    }
  }
  ~MqResource() override { bip::message_queue::remove(name_.c_str()); }

 private:
  std::string name_;
  TrackedPath track_;
};
#endif

class RingResource final : public Resource {
 public:
  explicit RingResource(const std::string& name) : name_(name), track_("/dev/shm/" + name) {
    shmbench::SpinRing::remove(name_);
    (void)shmbench::SpinRing::create(name_, kCapacity);
  }
  ~RingResource() override { shmbench::SpinRing::remove(name_); }

 private:
  std::string name_;
  TrackedPath track_;
};

std::unique_ptr<Resource> make_resource(Mech m, const std::string& name) {
  switch (m) {
    case Mech::shmbox_block: return std::make_unique<ShmboxResource>(name, shmbox::policy::block);
    case Mech::shmbox_reject: return std::make_unique<ShmboxResource>(name, shmbox::policy::reject);
    case Mech::boost_mq:
#if defined(SHMBOX_HAVE_BOOST)
      return std::make_unique<MqResource>(name);
#else
      throw bench_failure("built without Boost");
#endif
    case Mech::spin_ring: return std::make_unique<RingResource>(name);
  }
  throw bench_failure("unknown mechanism");
}

std::string resource_name(Mech m) {
  const char* tag = m == Mech::boost_mq ? "mq" : m == Mech::spin_ring ? "ring" : "box";
  return std::string(kMarker) + std::to_string(::getpid()) + "-" + tag;
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

  // Forks a child that runs body(); it reports exceptions as a `failed`
  // record and never returns into the parent's code (it ends with _exit).
  template <class Body>
  void spawn(std::string role, int report_fd, std::initializer_list<int> close_in_child, std::int32_t who, Body body) {
    std::fflush(nullptr);  // nothing buffered may be written twice
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    if (pid < 0) throw bench_failure(errno_text("fork"));
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(90);
      reset_signal_handlers();
      for (int fd : close_in_child) ::close(fd);
      int rc = 0;
      try {
        body();
      } catch (const std::exception& e) {
        rc = 1;
        try {
          send_record(report_fd, rec_kind::failed, who, 0, 0, 0, role + ": " + e.what());
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
    if (WIFSIGNALED(st)) return "was killed by signal " + std::to_string(WTERMSIG(st)) + " (" + strsignal(WTERMSIG(st)) + ")";
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

// Reads one record from the report pipe. Returns false at EOF (every child
// has closed its end, i.e. exited). Throws at the deadline, or when a child
// died without reporting. The 250 ms poll slices are only for the watchdog.
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

struct RunResult {
  double seconds = 0;
  std::uint64_t retries = 0;  // shmbox: posts that returned full/timeout and were repeated
};

RunResult run_once(const Config& cfg, const Args& args) {
  const std::string name = resource_name(cfg.mech);
  const std::unique_ptr<Resource> resource = make_resource(cfg.mech, name);

  std::vector<std::uint64_t> per_producer(static_cast<std::size_t>(cfg.producers));
  for (int i = 0; i < cfg.producers; ++i)
    per_producer[static_cast<std::size_t>(i)] =
        args.messages / static_cast<std::uint64_t>(cfg.producers) +
        (static_cast<std::uint64_t>(i) < args.messages % static_cast<std::uint64_t>(cfg.producers) ? 1 : 0);

  Pipe report, go, done;
  Children kids;  // declared after the resource: children die before it is removed
  ChildCtx base;
  base.mech = cfg.mech;
  base.name = name;
  base.per_producer = per_producer;
  base.report_fd = report.w.get();
  base.go_fd = go.r.get();
  base.done_fd = done.r.get();
  const std::initializer_list<int> parent_ends = {report.r.get(), go.w.get(), done.w.get()};

  kids.spawn("consumer", report.w.get(), parent_ends, -1, [&] { child_main(base); });
  for (int i = 0; i < cfg.producers; ++i) {
    kids.spawn("producer " + std::to_string(i), report.w.get(), parent_ends, i, [&] {
      ChildCtx c = base;
      c.id = i;
      child_main(c);
    });
  }
  // Only the children keep these ends: EOF on the report pipe means they all exited.
  report.w.close();
  go.r.close();
  done.r.close();

  const auto deadline = bench_clock::now() + std::chrono::seconds(args.timeout_s);
  Record rec;
  // 1. Set-up handshake: every child is attached and mapped.
  for (int ready = 0; ready < cfg.producers + 1;) {
    if (!read_record(report.r.get(), rec, deadline, kids)) throw bench_failure("children exited during set-up");
    if (rec.kind != rec_kind::ready) throw bench_failure("unexpected report during set-up");
    ++ready;
  }
  // 2. Release: the clock starts, then every child wakes on EOF of "go".
  const std::int64_t t_release = now_ns();
  go.w.close();
  // 3. Producers report when they have posted everything; then the consumer
  //    may check that nothing more arrives, and reports its time.
  RunResult out;
  int produced = 0;
  std::optional<Record> result;
  std::uint64_t posted = 0;
  while (produced < cfg.producers || !result) {
    if (!read_record(report.r.get(), rec, deadline, kids)) throw bench_failure("children exited before reporting");
    if (rec.kind == rec_kind::produced) {
      posted += rec.a;
      out.retries += rec.b;
      if (++produced == cfg.producers) done.w.close();
    } else if (rec.kind == rec_kind::result) {
      result = rec;
    } else {
      throw bench_failure("unexpected report during the run");
    }
  }
  // 4. Every child exits (EOF on the report pipe) with status 0.
  while (read_record(report.r.get(), rec, deadline, kids)) throw bench_failure("unexpected report after the run");
  kids.reap_all();

  if (posted != args.messages || result->a != args.messages)
    throw bench_failure("count mismatch: posted " + std::to_string(posted) + ", received " + std::to_string(result->a) +
                        ", expected " + std::to_string(args.messages));
  resource->verify(args.messages);
  if (result->t_ns <= t_release) throw bench_failure("consumer reported a time before the release");
  out.seconds = static_cast<double>(result->t_ns - t_release) / 1e9;
  return out;
}

// ===========================================================================
// Statistics and the table
// ===========================================================================

struct Stats {
  double median = 0, min = 0, max = 0;
};

Stats stats_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  Stats s;
  s.min = v.front();
  s.max = v.back();
  const std::size_t n = v.size();
  s.median = n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
  return s;
}

// Messages per second with three significant digits, in millions.
std::string fmt_rate(double r) {
  const double m = r / 1e6;
  char buf[32];
  if (m >= 100) std::snprintf(buf, sizeof buf, "%.0f M", m);
  else if (m >= 10) std::snprintf(buf, sizeof buf, "%.1f M", m);
  else if (m >= 1) std::snprintf(buf, sizeof buf, "%.2f M", m);
  else std::snprintf(buf, sizeof buf, "%.3f M", m);
  return buf;
}

std::string fmt_ratio(double r) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2fx", r);
  return buf;
}

constexpr bool kHaveBoost =
#if defined(SHMBOX_HAVE_BOOST)
    true;
#else
    false;
#endif

int run(const Args& args) {
  install_signal_handlers();
  remove_stale_segments();

  // Table order; runs are interleaved across configurations (see METHOD).
  const std::vector<Config> configs = {
      {Mech::shmbox_block, 1, "shmbox (block)"},
      {Mech::shmbox_reject, 1, "shmbox (reject+retry)"},
      {Mech::boost_mq, 1, "boost message_queue"},
      {Mech::spin_ring, 1, "spin ring (limit, SPSC)"},
      {Mech::shmbox_block, 4, "shmbox (block)"},
      {Mech::shmbox_reject, 4, "shmbox (reject+retry)"},
      {Mech::boost_mq, 4, "boost message_queue"},
  };
  auto selected = [&](const Config& c) { return std::string_view(c.label).find(args.only) != std::string_view::npos; };
  auto runs = [&](const Config& c) { return selected(c) && (c.mech != Mech::boost_mq || kHaveBoost); };

  std::vector<std::vector<double>> rates(configs.size());
  for (int rep = 0; rep < args.reps; ++rep) {
    for (std::size_t i = 0; i < configs.size(); ++i) {
      const Config& c = configs[i];
      if (!runs(c)) continue;
      const RunResult r = run_once(c, args);
      const double rate = static_cast<double>(args.messages) / r.seconds;
      rates[i].push_back(rate);
      if (args.verbose)
        std::fprintf(stderr, "rep %d/%d  %-24s x%d  %8.4f s  %9s msg/s  retries %llu\n", rep + 1, args.reps, c.label,
                     c.producers, r.seconds, fmt_rate(rate).c_str(), static_cast<unsigned long long>(r.retries));
    }
  }

  std::vector<std::optional<Stats>> st(configs.size());
  for (std::size_t i = 0; i < configs.size(); ++i)
    if (!rates[i].empty()) st[i] = stats_of(rates[i]);
  auto median_of = [&](Mech m, int producers) -> std::optional<double> {
    for (std::size_t i = 0; i < configs.size(); ++i)
      if (configs[i].mech == m && configs[i].producers == producers && st[i]) return st[i]->median;
    return std::nullopt;
  };

  const long cpus = ::sysconf(_SC_NPROCESSORS_ONLN);
  std::printf("# %llu messages of %zu bytes per run (split across producers), capacity %u, median of %d runs, %ld CPUs\n",
              static_cast<unsigned long long>(args.messages), kMsgSize, kCapacity, args.reps, cpus);
  std::printf("%-30s %-10s %-16s %-22s %s\n", "mechanism", "producers", "msg/s (median)", "min .. max", "vs mq");
  for (std::size_t i = 0; i < configs.size(); ++i) {
    const Config& c = configs[i];
    if (!st[i]) {
      std::printf("%-30s %-10d %s\n", c.label, c.producers,
                  selected(c) ? "skipped (Boost not installed)" : "not run (--only)");
      continue;
    }
    const auto mq = median_of(Mech::boost_mq, c.producers);
    const std::string range = fmt_rate(st[i]->min) + " .. " + fmt_rate(st[i]->max);
    std::printf("%-30s %-10d %-16s %-22s %s\n", c.label, c.producers, fmt_rate(st[i]->median).c_str(), range.c_str(),
                mq ? fmt_ratio(st[i]->median / *mq).c_str() : "n/a");
  }
  const auto box1 = median_of(Mech::shmbox_block, 1), ring1 = median_of(Mech::spin_ring, 1);
  const auto box4 = median_of(Mech::shmbox_block, 4), mq4 = median_of(Mech::boost_mq, 4);
  std::printf("shmbox/spin ring (1 producer): %s\n", box1 && ring1 ? fmt_ratio(*box1 / *ring1).c_str() : "n/a");
  std::printf("shmbox/mq (4 producers): %s\n",
              box4 && mq4 ? fmt_ratio(*box4 / *mq4).c_str() : kHaveBoost ? "n/a" : "n/a (Boost not installed)");
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
    std::fprintf(stderr, "shmbox-bench-throughput: FAILED: %s\n", e.what());
    return 1;
  }
}
