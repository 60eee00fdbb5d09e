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
// * Sleeping (rtt-sleep-64). Blocking receives: shmbox Owner::receive(m,
//   {.timeout = 1 s}) (the box's adaptive wait: spins options::spin = 50 us,
//   then sleeps on the futex) and with {.spin = 0 ns} (sleeps at once);
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
//
// The harness (children, pipes, barriers, watchdog, cleanup) is
// bench/harness.hpp, shared with throughput.cpp and iceoryx.cpp; this file
// has the links (one per mechanism), the two roles and the table.
#include <fcntl.h>
#include <mqueue.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "harness.hpp"
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

using namespace shmbench;

constexpr std::uint32_t kCapacity = 1024;  // messages per queue (shared-memory mechanisms, message_queue)
constexpr long kPosixMqDepth = 8;          // POSIX queues: at most this (and at most msg_max)
constexpr std::string_view kMarker = "shmbench-rtt-";  // in every name we create
constexpr const char* kProg = "shmbox-bench-rtt";

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

struct Args : CommonArgs {
  std::uint64_t count = 20'000;  // measured round trips per run
  std::uint64_t warmup = 2'000;  // round trips before them, not recorded
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

bool known_name(std::string_view n) {
  for (const Config& c : all_configs())
    if (n == c.mech_name || n == c.group) return true;
  return false;
}

std::optional<Args> parse_args(int argc, char** argv) {
  Args a;
  bool have_count = false, have_warmup = false;
  const bool ok = parse_options(kProg, argc, argv, usage, a, [&](ArgWalker& w) {
    const std::string_view arg = w.name();
    if (arg == "--count") {
      have_count = true;
      return w.number(a.count, 1, 100'000'000);
    }
    if (arg == "--warmup") {
      have_warmup = true;
      return w.number(a.warmup, 0, 100'000'000);
    }
    if (arg == "--only") {
      std::string_view rest;
      if (!w.value(rest)) return false;
      while (!rest.empty()) {  // empty items are skipped
        const auto comma = rest.find(',');
        const std::string_view item = rest.substr(0, comma);
        rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
        if (item.empty()) continue;
        if (!known_name(item)) {
          std::fprintf(stderr, "%s: unknown mechanism '%.*s'\n", kProg, int(item.size()), item.data());
          return false;
        }
        a.only.emplace_back(item);
      }
      return !a.only.empty();
    }
    return false;
  });
  if (!ok) return std::nullopt;
  if (a.quick) {
    if (!have_count) a.count = 200;
    if (!have_warmup) a.warmup = 20;
    if (!a.reps_given) a.reps = 2;
  }
  return a;
}

bool selected(const Args& a, const Config& c) {
  if (a.only.empty()) return true;
  for (const auto& n : a.only)
    if (n == c.mech_name || n == c.group) return true;
  return false;
}

constexpr std::int32_t kPinger = 0;  // A: sends pings, measures
constexpr std::int32_t kEchoer = 1;  // B: echoes

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
  ChildEnds ends;  // its ends of the run's pipes (the "done" barrier is not used)
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

// What both shmbox links hold: a Producer of the box this child sends on,
// the Owner of the box it receives from.
class ShmboxEnds {
 protected:
  explicit ShmboxEnds(const ChildCtx& c) : size_(c.size) {
    auto p = shmbox::Producer::attach(c.tx_name);
    if (!p) throw bench_failure("Producer::attach " + c.tx_name + ": " + shmbox::explain(p.error()));
    tx_.emplace(std::move(*p));
    auto o = shmbox::Owner::acquire(c.rx_name);
    if (!o) throw bench_failure("Owner::acquire " + c.rx_name + ": " + shmbox::explain(o.error()));
    rx_.emplace(std::move(*o));
  }
  std::size_t size_;
  std::optional<shmbox::Producer> tx_;
  std::optional<shmbox::Owner> rx_;
};

// How a shmbox link receives.
enum class ShmboxRecv { busy, adaptive, futex };

class ShmboxLink : ShmboxEnds {
 public:
  static constexpr bool kZeroCopy = false;
  ShmboxLink(const ChildCtx& c, ShmboxRecv how) : ShmboxEnds(c), how_(how) {
    m_.data.reserve(size_);
    if (how_ == ShmboxRecv::futex) recv_.spin = std::chrono::nanoseconds(0);  // adaptive: unset = the box's spin
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
      while ((st = rx_->receive(m_, recv_)) == shmbox::recv_status::timeout) {
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
  shmbox::message m_;  // reused: its string keeps its memory
  shmbox::receive_options recv_{.timeout = std::chrono::seconds(1)};
};

// --- shmbox zero-copy (busy): loan / receive_in_place --------------------------

class ShmboxZeroCopyLink : ShmboxEnds {
 public:
  static constexpr bool kZeroCopy = true;
  explicit ShmboxZeroCopyLink(const ChildCtx& c) : ShmboxEnds(c) {}

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
    while ((st = rx_->receive_in_place(cb, {.max = 1, .timeout = std::chrono::nanoseconds(0)})) == shmbox::recv_status::empty ||
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
    if (tx_ == mqd_t(-1)) throw bench_failure(errno_text("mq_open " + c.tx_name));
    rx_ = ::mq_open(c.rx_name.c_str(), O_RDONLY | O_CLOEXEC);
    if (rx_ == mqd_t(-1)) throw bench_failure(errno_text("mq_open " + c.rx_name));
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
  c.ends.ready_and_wait(kPinger);

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
  const std::array<double, 3> p = shmbench::percentiles(us);  // sorts us
  Record r = make_record(rec_kind::result, kPinger, us.size());
  std::copy(p.begin(), p.end(), r.us);
  r.us[3] = us.front();
  r.us[4] = us.back();
  r.us[5] = sum / static_cast<double>(us.size());
  c.ends.send(r);
}

// B: echoes every ping after checking it.
template <std::size_t S, class Link>
void echoer(const ChildCtx& c, Link& link) {
  SeqCheck check("ping", S);
  c.ends.ready_and_wait(kEchoer);

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
  c.ends.send(rec_kind::produced, kEchoer, check.seen());  // the number of messages echoed
}

// Opens c's link of type Link (its constructor takes c and `more`) and plays
// c's role on it.
template <std::size_t S, class Link, class... More>
void play(const ChildCtx& c, More... more) {
  Link link(c, more...);
  if (c.who == kPinger)
    pinger<S>(c, link);
  else
    echoer<S>(c, link);
}

template <std::size_t S>
void child_sized(const ChildCtx& c) {
  switch (c.mech) {
    case Mech::spin_ring: return play<S, SpinRingLink<S>>(c);
    case Mech::lockfree_spsc:
#if defined(SHMBOX_HAVE_BOOST)
      return play<S, LockfreeLink<S>>(c);
#else
      throw bench_failure("built without Boost");
#endif
    case Mech::shmbox_copy: return play<S, ShmboxLink>(c, ShmboxRecv::busy);
    case Mech::shmbox_adaptive: return play<S, ShmboxLink>(c, ShmboxRecv::adaptive);
    case Mech::shmbox_futex: return play<S, ShmboxLink>(c, ShmboxRecv::futex);
    case Mech::shmbox_zero_copy: return play<S, ShmboxZeroCopyLink>(c);
    case Mech::boost_mq:
#if defined(SHMBOX_HAVE_BOOST)
      return play<S, BoostMqLink<S>>(c);
#else
      throw bench_failure("built without Boost");
#endif
    case Mech::posix_mq: return play<S, PosixMqLink<S>>(c);
    case Mech::pipe: return play<S, PipeLink<S>>(c);
    case Mech::unix_socket: return play<S, SocketLink<S>>(c);
  }
  throw bench_failure("unknown mechanism");
}

void child_main(const ChildCtx& c) {
  ::signal(SIGPIPE, SIG_IGN);  // a write to a dead peer's pipe/socket is an error (EPIPE), not a silent death
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
  TrackedName t_ping_, t_pong_;
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
  TrackedName t_ping_, t_pong_;
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
  TrackedName t_ping_, t_pong_;
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
  TrackedName t_ping_, t_pong_;
};
#endif

class PosixMqResource final : public Resource {
 public:
  PosixMqResource(const std::string& base, std::size_t size, long depth)
      : Resource("/" + base), t_ping_(ping, TrackedName::mqueue), t_pong_(pong, TrackedName::mqueue) {
    for (const std::string* n : {&ping, &pong})
      if (const int e = create_posix_mq(*n, depth, size); e != 0)
        throw bench_failure(errno_text("mq_open(create) " + *n, e));
  }
  ~PosixMqResource() override {
    ::mq_unlink(ping.c_str());
    ::mq_unlink(pong.c_str());
  }
  void verify(std::uint64_t) override {
    for (const std::string* n : {&ping, &pong}) {
      const mqd_t q = ::mq_open(n->c_str(), O_RDONLY | O_CLOEXEC);
      if (q == mqd_t(-1)) throw bench_failure(errno_text("mq_open " + *n));
      mq_attr a{};
      const int rc = ::mq_getattr(q, &a);
      ::mq_close(q);
      if (rc != 0 || a.mq_curmsgs != 0) throw bench_failure("POSIX queue " + *n + " is not empty after the run");
    }
  }

 private:
  TrackedName t_ping_, t_pong_;
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

// One measured run (harness.hpp, ONE RUN): fresh queues, the pinger and the
// echoer; the pinger's percentiles.
Record run_once(const Config& cfg, const Args& args, long mq_depth) {
  const std::unique_ptr<Resource> res = make_resource(cfg, mq_depth);
  Run run;  // declared after the resource: children die before it is removed

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
    c.ends = run.child_ends();
    std::vector<int> not_its_own;
    for (int fd : res->all_fds())
      if (fd != c.tx_fd && fd != c.rx_fd) not_its_own.push_back(fd);
    run.spawn(who == kPinger ? "pinger" : "echoer", who, [c] { child_main(c); }, not_its_own);
  }
  run.watch(args.timeout_s);
  res->close_fds();  // only the children keep these: EOF on a pipe/socket means the peer is gone
  run.wait_ready(2);  // both children have opened/attached/mapped everything
  run.release();
  const Run::Finished f = run.wait_finished(1);  // the echoer's count and the pinger's result
  run.wait_exit();

  const std::uint64_t total = args.warmup + args.count;
  if (f.sent != total || f.result.a != args.count)
    throw bench_failure("count mismatch: echoed " + std::to_string(f.sent) + " of " + std::to_string(total) +
                        ", measured " + std::to_string(f.result.a) + " of " + std::to_string(args.count));
  res->verify(total);
  return f.result;
}

// ===========================================================================
// Availability, repetitions, output
// ===========================================================================

// The POSIX queue depth we may use: min(kPosixMqDepth, msg_max).
long posix_mq_depth() { return std::min<long>(kPosixMqDepth, posix_mq_msg_max()); }

// Why a configuration cannot be measured here ("" if it can).
std::string unavailable(const Config& c, long mq_depth) {
  if ((c.mech == Mech::lockfree_spsc || c.mech == Mech::boost_mq) && !kHaveBoost)
    return "built without Boost (Boost.Interprocess/Boost.Lockfree)";
  if (c.mech == Mech::posix_mq) {
    const std::string probe = "/" + std::string(kMarker) + std::to_string(::getpid()) + "-probe";
    TrackedName track(probe, TrackedName::mqueue);
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
  remove_stale(kProg, "/dev/shm", kMarker);
  remove_stale(kProg, "/dev/mqueue", kMarker);  // only there when the mqueue file system is mounted

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
    for (const shmbench::summary& s : shmbench::print_percentile_rows(c.group, c.mech_name, pct[i], note)) {
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

int main(int argc, char** argv) { return shmbench::bench_main(kProg, argc, argv, parse_args, run); }
