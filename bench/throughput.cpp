// bench/throughput.cpp - shmbox-bench-throughput: how many messages per second
// go from producer processes to one consumer process, for every mechanism
// below, with 64-byte and 1024-byte messages and 1 and 4 producers, all in
// one run:
//   shmbox-copy       shmbox, Producer::post / Owner::receive_batch (copies)
//   shmbox-zero-copy  shmbox, Producer::loan + slot_loan::commit /
//                     Owner::receive_in_place (written and read in place)
//   shmbox-batch      shmbox, Producer::post_batch (32 at a time) /
//                     Owner::receive_batch
//   boost-mq          Boost.Interprocess message_queue (off-the-shelf baseline)
//   posix-mq          POSIX message queue (mq_send / mq_receive)
//   pipe              one pipe, atomic write() per message, 64 KiB reads
//   unix-socket       a unix SOCK_DGRAM socket, send() / recvmmsg()
//   lockfree-spsc     boost::lockfree::spsc_queue in a Boost.Interprocess
//                     managed segment, busy-polling (single producer)
//   spin-ring         the hand-written spin ring (spin_ring.hpp): the
//                     practical limit of shared memory (single producer)
//
// OUTPUT
// stdout: one row per (group, mechanism) in the format of bench/rows.hpp:
//   row  tput-<64|1k>-<1|4>p  <mechanism>  rate  <median> <min> <max>  Mmsg/s  <note>
//   skip tput-...             <mechanism>  <why>
// (value = messages per second / 1e6; the note gives the messages per run
// and anything that differs between mechanisms, such as a smaller queue).
// stderr: the same as a human-readable table with ratios, and errors.
//
// METHOD
// * Processes. The benchmark process (the parent) only orchestrates: for every
//   measured run it creates a fresh segment/queue/pipe/socket, forks one
//   consumer process and one process per producer, and reads what they report
//   through a pipe. No measured work happens in the parent.
// * Messages. Every producer posts its share of the run's messages (split as
//   evenly as possible). Every message is S bytes (64 or 1024); its first 16
//   bytes are (producer id, sequence number), the rest a fixed pattern of its
//   producer. The producer copies the whole S bytes for every message (into
//   the loaned slot, for shmbox-zero-copy). Message counts: --messages N for
//   64-byte messages, N/2 for 1 KiB ones; the slower mechanisms send fewer,
//   so that a run of each takes a comparable time: boost-mq and pipe a
//   quarter, posix-mq and unix-socket a sixteenth. Every row's note says how
//   many messages a run sent.
// * Checking. The consumer checks every message: the right size, a known
//   producer id, exactly the next sequence number of that producer (every
//   mechanism is FIFO per producer), and that the message's last 8 bytes are
//   its producer's pattern (a truncated or torn message fails; every
//   consumer, also the zero-copy one, reads both ends of every message). So a
//   lost, duplicated, reordered, corrupted or extra message fails the run.
//   After the producers have reported that they are finished, the consumer
//   also checks that nothing more arrives, so the count is exact; for shmbox
//   the parent additionally compares the box's own stored/delivered counters
//   with the count. Any failure aborts the benchmark with a message on stderr
//   and exit status 1.
// * Start barrier. Every child first does its set-up (attach/open/acquire,
//   connect, mapping) and reports "ready". When all are ready, the parent
//   reads steady_clock (t_release) and closes the write end of the "go" pipe:
//   every child is blocked in read() on it and wakes on EOF at the same
//   moment. So fork, attaching/opening and mapping are not timed.
// * Mechanisms. Every queue holds 1024 messages of S bytes, except where the
//   system limits it (the note says so): posix-mq holds
//   /proc/sys/fs/mqueue/msg_max messages (10 on Debian; not changed), a unix
//   datagram socket queues /proc/sys/net/unix/max_dgram_qlen datagrams (10;
//   not changed). Blocking mechanisms block (shmbox policy block, the box's
//   defaults otherwise: block_timeout 1 s, a post or loan that times out is
//   retried and counted; adaptive wait spin 50 us); busy-polling ones
//   (lockfree-spsc, spin-ring) spin with the pause hint and yield after 1024
//   failed checks (spin_ring.hpp's spin_wait). The pipe's buffer is set to
//   1024 x S bytes (F_SETPIPE_SZ); every write is one whole message
//   (S <= PIPE_BUF, so writes are atomic) and the consumer splits 64 KiB
//   reads into messages. The socket consumer takes up to 256 datagrams per
//   recvmmsg (MSG_WAITFORONE); shmbox consumers take up to 256 messages per
//   call into a reusable batch (or in place).
// * Timing. The consumer reads steady_clock right after it has received and
//   checked the last message (t_end) and reports it. The run's time is
//   t_end - t_release; steady_clock is CLOCK_MONOTONIC, one clock for all
//   processes of the machine. Throughput = messages / time.
// * Repetitions. Every configuration runs R times (--reps). The runs are
//   interleaved (rep 1 of every configuration, then rep 2, ...), so that a
//   slow phase of the machine does not hit a single configuration. Rows give
//   the median rate and the min and max; ratios are of medians of this run.
// * No sleeps synchronise anything: start, finish and the final drain check
//   are pipe handshakes. poll() timeouts in the parent are only a watchdog
//   (--timeout per run) that kills the children when something hangs.
// * Cleanup. Names contain a marker and the parent's pid; a stale name is
//   unlinked before it is created, and segments (and, if /dev/mqueue is
//   mounted, message queues) of earlier runs whose process is gone are
//   removed at start. The POSIX message queue's name is unlinked as soon as
//   every child has opened it. The parent removes every segment/queue after each run
//   (RAII), also when the run fails (children are killed and reaped first),
//   and on SIGINT/SIGTERM/SIGHUP/SIGQUIT. The socket is in the abstract
//   namespace (it leaves no file). Children die with the parent (PDEATHSIG).
//
// The harness (children, pipes, barriers, watchdog, cleanup, the message
// check) is bench/harness.hpp, shared with rtt.cpp and iceoryx.cpp; this file
// has the mechanisms, the configurations and the table.
#include <fcntl.h>
#include <mqueue.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
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

constexpr std::string_view kProg = "shmbox-bench-throughput";
constexpr std::uint32_t kCapacity = 1024;      // messages each queue holds (where the system allows)
constexpr std::size_t kBatch = 256;            // most messages a consumer takes per call
constexpr std::size_t kPostBatch = 32;         // shmbox-batch: messages per post_batch
constexpr std::size_t kPipeChunk = 64 * 1024;  // pipe consumer: bytes per read
constexpr std::string_view kMarker = "shmbench-tp-";  // in every name we create
static_assert(kMaxMsgSize <= PIPE_BUF, "pipe writes of one message must be atomic");

// ===========================================================================
// Mechanisms
// ===========================================================================

enum class Mech {
  shmbox_copy,
  shmbox_zero_copy,
  shmbox_batch,
  boost_mq,
  posix_mq,
  pipe,
  unix_socket,
  lockfree_spsc,
  spin_ring,
};

struct MechInfo {
  Mech mech;
  std::string_view name;          // as in the rows
  bool needs_boost;
  std::string_view single_why;    // non-empty: single producer only; the skip reason otherwise
  std::uint64_t divisor;          // runs send N / divisor messages (slow mechanisms: fewer)
};

constexpr MechInfo kMechs[] = {
    {Mech::shmbox_copy, "shmbox-copy", false, {}, 1},
    {Mech::shmbox_zero_copy, "shmbox-zero-copy", false, {}, 1},
    {Mech::shmbox_batch, "shmbox-batch", false, {}, 1},
    {Mech::boost_mq, "boost-mq", true, {}, 4},
    {Mech::posix_mq, "posix-mq", false, {}, 16},
    {Mech::pipe, "pipe", false, {}, 4},
    {Mech::unix_socket, "unix-socket", false, {}, 16},
    {Mech::lockfree_spsc, "lockfree-spsc", true, "single-producer queue", 1},
    {Mech::spin_ring, "spin-ring", false, "single-producer ring", 1},
};

const MechInfo& info_of(Mech m) {
  for (const auto& i : kMechs)
    if (i.mech == m) return i;
  throw bench_failure("unknown mechanism");
}

// ===========================================================================
// Command line
// ===========================================================================

struct Args : CommonArgs {
  std::uint64_t messages = 4'000'000;  // per 64-byte run, split across the producers
  std::vector<Mech> only;  // empty: every mechanism
  std::vector<std::size_t> sizes = {64, 1024};
  std::vector<int> producers = {1, 4};
};

void usage(std::FILE* to) {
  std::fprintf(to,
               "usage: shmbox-bench-throughput [--messages N] [--reps R] [--timeout S] [--quick]\n"
               "                               [--only MECH,...] [--sizes 64,1024] [--producers 1,4] [--verbose]\n"
               "  --messages N    messages per run of 64-byte messages, split across the producers (default\n"
               "                  4000000); 1 KiB runs send N/2; boost-mq and pipe send a quarter of that,\n"
               "                  posix-mq and unix-socket a sixteenth (every row's note says how many)\n"
               "  --reps R        runs per configuration; rows give median, min and max (default 5)\n"
               "  --timeout S     watchdog: a run taking longer than S seconds fails (default 120)\n"
               "  --quick         smoke test: 20000 messages, 1 rep (unless --messages/--reps are given)\n"
               "  --only LIST     only these mechanisms (comma-separated):\n"
               "                  ");
  for (std::size_t i = 0; i < std::size(kMechs); ++i)
    std::fprintf(to, "%s%.*s", i ? "," : "", int(kMechs[i].name.size()), kMechs[i].name.data());
  std::fprintf(to,
               "\n"
               "  --sizes LIST    message sizes in bytes, of 64 and 1024 (default 64,1024)\n"
               "  --producers LIST  producer counts, each 1..8 (default 1,4)\n"
               "  --verbose       print every run (and producer retries) on stderr\n"
               "Rows (bench/rows.hpp) go to stdout, the table and errors to stderr. Exit status 1: a run\n"
               "failed (lost, duplicated, reordered or corrupted message, watchdog, error).\n");
}

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

std::optional<Args> parse_args(int argc, char** argv) {
  Args a;
  bool messages_given = false;
  const bool ok = parse_options(kProg, argc, argv, usage, a, [&](ArgWalker& w) {
    const std::string_view arg = w.name();
    if (arg == "--messages") {
      messages_given = true;
      return w.number(a.messages, 1);
    }
    if (arg == "--only")
      return parse_list(w, a.only, [](std::string_view item, Mech& m) {
        const auto it = std::find_if(std::begin(kMechs), std::end(kMechs),
                                     [&](const MechInfo& i) { return i.name == item; });
        if (it != std::end(kMechs)) m = it->mech;
        return it != std::end(kMechs);
      });
    if (arg == "--sizes")
      return parse_list(w, a.sizes, [](std::string_view item, std::size_t& s) {
        return parse_number(item, s) && (s == 64 || s == 1024);
      });
    if (arg == "--producers")
      return parse_list(w, a.producers,
                        [](std::string_view item, int& p) { return parse_number(item, p) && p >= 1 && p <= 8; });
    return false;
  });
  if (!ok) return std::nullopt;
  if (a.quick) {
    if (!messages_given) a.messages = 20'000;
    if (!a.reps_given) a.reps = 1;
  }
  return a;
}

// ===========================================================================
// What the children do
// ===========================================================================

// What a child needs to know.
struct ChildCtx {
  Mech mech{};
  std::string name;                         // of the segment/queue/socket
  std::size_t size = 0;                     // bytes per message
  int id = -1;                              // producer id; -1: the consumer
  std::vector<std::uint64_t> per_producer;  // messages each producer posts
  ChildEnds ends;                           // its ends of the run's pipes
  int data_r = -1, data_w = -1;             // pipe: its two ends; unix-socket: data_r = the bound socket
};

// Every producer after its set-up: reports "ready", waits for "go", sends its
// messages in order with send(msg), which returns how often it had to retry
// (a post or loan that timed out on the full box), and reports the count.
template <class Send>
void produce(const ChildCtx& c, Send&& send) {
  const auto id = static_cast<std::uint64_t>(c.id);
  const std::uint64_t count = c.per_producer[id];
  MessageBuffer msg(id, c.size);
  c.ends.ready_and_wait(c.id);
  std::uint64_t retries = 0;
  for (std::uint64_t seq = 0; seq < count; ++seq) {
    msg.set_seq(seq);
    retries += send(msg);
  }
  c.ends.send(rec_kind::produced, c.id, count, retries);
}

// --- shmbox -----------------------------------------------------------------

shmbox::Producer attach_producer(const ChildCtx& c) {
  auto p = shmbox::Producer::attach(c.name);
  if (!p) throw bench_failure("Producer::attach: " + shmbox::explain(p.error()));
  return std::move(*p);
}

[[noreturn]] void post_failed(const char* what, shmbox::post_status st, const shmbox::Producer& p) {
  throw bench_failure(std::string(what) + " returned " + std::string(shmbox::to_string(st)) + ": " +
                      shmbox::explain(p.last_error()));
}

// shmbox-copy: post(data, size); a post that times out on the full box is retried.
void shmbox_copy_producer(const ChildCtx& c) {
  shmbox::Producer p = attach_producer(c);
  produce(c, [&](const MessageBuffer& msg) {
    for (std::uint64_t retries = 0;; ++retries) {
      const shmbox::post_status st = p.post(msg.bytes, msg.size);  // block: waits (spin, then futex) while full
      if (shmbox::is_stored(st)) return retries;
      if (st != shmbox::post_status::timeout) post_failed("post", st, p);
    }
  });
}

// shmbox-zero-copy: loan a slot, write the message in place, commit.
void shmbox_zero_copy_producer(const ChildCtx& c) {
  shmbox::Producer p = attach_producer(c);
  produce(c, [&](const MessageBuffer& msg) {
    for (std::uint64_t retries = 0;; ++retries) {
      shmbox::slot_loan l = p.loan();  // block: waits while full, up to the box's block_timeout
      if (!shmbox::is_stored(l.status())) {
        if (l.status() != shmbox::post_status::timeout) post_failed("loan", l.status(), p);
        continue;
      }
      if (!l || l.data() == nullptr || l.capacity() < msg.size)
        throw bench_failure("loan: a stored loan without a slot of " + std::to_string(msg.size) + " bytes");
      std::memcpy(l.data(), msg.bytes, msg.size);  // the message, written into the slot
      const shmbox::post_status st = l.commit(msg.size);
      if (!shmbox::is_stored(st)) post_failed("slot_loan::commit", st, p);
      return retries;
    }
  });
}

// shmbox-batch: post_batch of kPostBatch messages; what a full box did not
// take (timeout) is posted again, in order.
void shmbox_batch_producer(const ChildCtx& c) {
  shmbox::Producer p = attach_producer(c);
  const auto id = static_cast<std::uint64_t>(c.id);
  const std::uint64_t count = c.per_producer[id];
  std::vector<unsigned char> bytes(kPostBatch * c.size);
  std::array<std::string_view, kPostBatch> views;
  for (std::size_t k = 0; k < kPostBatch; ++k) {
    unsigned char* m = bytes.data() + k * c.size;
    fill_message(m, c.size, id);
    views[k] = std::string_view(reinterpret_cast<const char*>(m), c.size);
  }
  c.ends.ready_and_wait(c.id);
  std::uint64_t retries = 0;
  std::array<shmbox::post_status, kPostBatch> status{};
  for (std::uint64_t seq = 0; seq < count;) {
    const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(kPostBatch, count - seq));
    for (std::size_t k = 0; k < n; ++k) set_seq(bytes.data() + k * c.size, seq + k);
    for (std::size_t first = 0; first < n;) {
      const std::span<const std::string_view> part(views.data() + first, n - first);
      const std::size_t stored = p.post_batch(part, {.timeout = std::chrono::seconds(1)}, status.data());
      std::size_t prefix = 0;  // the stored ones must be a prefix, or FIFO order is broken
      while (prefix < part.size() && shmbox::is_stored(status[prefix])) ++prefix;
      for (std::size_t k = prefix; k < part.size(); ++k) {
        if (shmbox::is_stored(status[k]))
          throw bench_failure("post_batch stored message " + std::to_string(k) + " of " +
                              std::to_string(part.size()) + " after not storing message " +
                              std::to_string(prefix) + " (" + std::string(shmbox::to_string(status[prefix])) +
                              "): a re-post would break FIFO order");
        if (status[k] != shmbox::post_status::timeout) post_failed("post_batch", status[k], p);
      }
      if (stored != prefix)
        throw bench_failure("post_batch returned " + std::to_string(stored) + " but its statuses say " +
                            std::to_string(prefix) + " were stored");
      retries += part.size() - prefix;
      first += prefix;
    }
    seq += n;
  }
  c.ends.send(rec_kind::produced, c.id, count, retries);
}

shmbox::Owner acquire_owner(const ChildCtx& c) {
  auto owner = shmbox::Owner::acquire(c.name);
  if (!owner) throw bench_failure("Owner::acquire: " + shmbox::explain(owner.error()));
  return std::move(*owner);
}

// shmbox-copy and shmbox-batch: receive_batch into a reusable batch.
void shmbox_copy_consumer(const ChildCtx& c) {
  shmbox::Owner owner = acquire_owner(c);
  Checker check(c.per_producer, c.size);
  shmbox::batch batch;  // reusable: a steady stream allocates nothing
  c.ends.ready_and_wait(c.id);
  auto receive = [&](std::chrono::nanoseconds timeout) {
    batch.clear();  // keeps its memory
    const shmbox::recv_status st = owner.receive_batch(batch, {.max = kBatch, .timeout = timeout});
    if (st != shmbox::recv_status::ok && st != shmbox::recv_status::timeout && st != shmbox::recv_status::empty)
      check.fail("receive_batch returned " + std::string(shmbox::to_string(st)) + ": " +
                 shmbox::explain(owner.last_error()));
    for (std::size_t i = 0; i < batch.size(); ++i) {
      if (batch.redelivered(i)) check.fail("a message was flagged redelivered");
      check.on(batch[i].data(), batch[i].size());
    }
    return !batch.empty();
  };
  // A timeout only loops: a hang is caught by the parent's watchdog.
  while (!check.complete()) receive(std::chrono::seconds(1));
  finish_consumer(c.ends, check, [&] { return !receive(std::chrono::nanoseconds(0)); });
}

// shmbox-zero-copy: receive_in_place, every message checked in the box.
void shmbox_in_place_consumer(const ChildCtx& c) {
  shmbox::Owner owner = acquire_owner(c);
  Checker check(c.per_producer, c.size);
  c.ends.ready_and_wait(c.id);
  std::string failure;  // the callback must not throw into the library: it records, we throw after
  std::size_t seen = 0;
  auto on_message = [&](const shmbox::message_view& v) {
    ++seen;
    if (!failure.empty()) return;
    try {
      if (v.redelivered) check.fail("a message was flagged redelivered");
      check.on(v.data.data(), v.data.size());
    } catch (const std::exception& e) {
      failure = e.what();
    }
  };
  auto receive = [&](std::chrono::nanoseconds timeout) {
    seen = 0;
    const shmbox::recv_status st = owner.receive_in_place(on_message, {.max = kBatch, .timeout = timeout});
    if (!failure.empty()) throw bench_failure(failure);
    if (st != shmbox::recv_status::ok && st != shmbox::recv_status::timeout && st != shmbox::recv_status::empty)
      check.fail("receive_in_place returned " + std::string(shmbox::to_string(st)) + ": " +
                 shmbox::explain(owner.last_error()));
    if ((st == shmbox::recv_status::ok) != (seen > 0))
      check.fail("receive_in_place returned " + std::string(shmbox::to_string(st)) + " after " +
                 std::to_string(seen) + " messages");
    return seen > 0;
  };
  while (!check.complete()) receive(std::chrono::seconds(1));
  finish_consumer(c.ends, check, [&] { return !receive(std::chrono::nanoseconds(0)); });
}

// --- Boost.Interprocess message_queue and boost::lockfree::spsc_queue -------

#if defined(SHMBOX_HAVE_BOOST)
namespace bip = boost::interprocess;

void boost_mq_producer(const ChildCtx& c) {
  try {
    bip::message_queue mq(bip::open_only, c.name.c_str());
    produce(c, [&](const MessageBuffer& msg) {
      mq.send(msg.bytes, msg.size, 0);  // blocks (condition variable) while full
      return 0;
    });
  } catch (const bip::interprocess_exception& e) {
    throw bench_failure(std::string("boost message_queue (producer): ") + e.what());
  }
}

void boost_mq_consumer(const ChildCtx& c) {
  try {
    bip::message_queue mq(bip::open_only, c.name.c_str());
    Checker check(c.per_producer, c.size);
    alignas(64) unsigned char buf[kMaxMsgSize];
    bip::message_queue::size_type got = 0;
    unsigned prio = 0;
    c.ends.ready_and_wait(c.id);
    while (!check.complete()) {
      mq.receive(buf, c.size, got, prio);  // blocks while empty; the watchdog catches hangs
      check.on(buf, got);
    }
    finish_consumer(c.ends, check, [&] { return !mq.try_receive(buf, c.size, got, prio); });
  } catch (const bip::interprocess_exception& e) {
    throw bench_failure(std::string("boost message_queue (consumer): ") + e.what());
  }
}

// A message as one fixed-size value, as the lock-free queue stores it.
template <std::size_t S>
struct fixed_message {
  alignas(8) unsigned char bytes[S];
};
template <std::size_t S>
using spsc_queue = boost::lockfree::spsc_queue<fixed_message<S>, boost::lockfree::capacity<kCapacity>>;
constexpr const char* kSpscObject = "queue";

// The queue in the managed segment `name` (constructed by the parent).
template <std::size_t S>
spsc_queue<S>& find_spsc(bip::managed_shared_memory& seg, const std::string& name) {
  const auto [q, n] = seg.find<spsc_queue<S>>(kSpscObject);
  if (q == nullptr || n != 1) throw bench_failure("no spsc_queue in segment " + name);
  return *q;
}

// The message is written straight into the queue's element type (push copies it in).
template <std::size_t S>
void spsc_producer(const ChildCtx& c) {
  bip::managed_shared_memory seg(bip::open_only, c.name.c_str());
  spsc_queue<S>& q = find_spsc<S>(seg, c.name);
  const auto id = static_cast<std::uint64_t>(c.id);
  const std::uint64_t count = c.per_producer[id];
  fixed_message<S> msg;
  fill_message(msg.bytes, S, id);
  c.ends.ready_and_wait(c.id);
  for (std::uint64_t seq = 0; seq < count; ++seq) {
    set_seq(msg.bytes, seq);
    for (std::uint32_t spins = 0; !q.push(msg);) shmbench::spin_wait(spins);  // busy-polls while full
  }
  c.ends.send(rec_kind::produced, c.id, count);
}

template <std::size_t S>
void spsc_consumer(const ChildCtx& c) {
  bip::managed_shared_memory seg(bip::open_only, c.name.c_str());
  spsc_queue<S>& q = find_spsc<S>(seg, c.name);
  Checker check(c.per_producer, c.size);
  fixed_message<S> msg;
  c.ends.ready_and_wait(c.id);
  while (!check.complete()) {
    for (std::uint32_t spins = 0; !q.pop(msg);) shmbench::spin_wait(spins);  // busy-polls while empty
    check.on(msg.bytes, S);
  }
  finish_consumer(c.ends, check, [&] { return !q.pop(msg); });
}
#endif

// --- POSIX message queue ------------------------------------------------------

mqd_t open_posix_mq(const ChildCtx& c, int flags) {
  const mqd_t q = ::mq_open(c.name.c_str(), flags | O_CLOEXEC);
  if (q == static_cast<mqd_t>(-1)) throw bench_failure(errno_text("mq_open " + c.name));
  return q;
}

void posix_mq_producer(const ChildCtx& c) {
  const mqd_t q = open_posix_mq(c, O_WRONLY);
  produce(c, [&](const MessageBuffer& msg) {
    while (::mq_send(q, reinterpret_cast<const char*>(msg.bytes), msg.size, 0) != 0)  // blocks while full
      if (errno != EINTR) throw bench_failure(errno_text("mq_send"));
    return 0;
  });
}

void posix_mq_consumer(const ChildCtx& c) {
  const mqd_t q = open_posix_mq(c, O_RDONLY);
  Checker check(c.per_producer, c.size);
  alignas(64) char buf[kMaxMsgSize];  // mq_msgsize is the message size
  c.ends.ready_and_wait(c.id);
  while (!check.complete()) {
    const ssize_t n = ::mq_receive(q, buf, c.size, nullptr);  // blocks while empty
    if (n < 0) {
      if (errno == EINTR) continue;
      check.fail(errno_text("mq_receive"));
    }
    check.on(buf, static_cast<std::size_t>(n));
  }
  finish_consumer(c.ends, check, [&] {
    timespec now{};
    ::clock_gettime(CLOCK_REALTIME, &now);  // an absolute time that has passed: do not wait
    const ssize_t n = ::mq_timedreceive(q, buf, c.size, nullptr, &now);
    if (n < 0 && errno != ETIMEDOUT) check.fail(errno_text("mq_timedreceive"));
    return n < 0;
  });
}

// --- pipe ---------------------------------------------------------------------

void pipe_producer(const ChildCtx& c) {
  ::close(c.data_r);  // producers only write
  produce(c, [&](const MessageBuffer& msg) {
    for (;;) {  // <= PIPE_BUF bytes: all of it or nothing (blocks while the pipe is full)
      const ssize_t w = ::write(c.data_w, msg.bytes, msg.size);
      if (w == static_cast<ssize_t>(msg.size)) return 0;
      if (w < 0 && errno == EINTR) continue;
      throw bench_failure(w < 0 ? errno_text("write to the data pipe")
                                : "short write of " + std::to_string(w) + " bytes to the data pipe");
    }
  });
}

void pipe_consumer(const ChildCtx& c) {
  ::close(c.data_w);  // the consumer only reads
  Checker check(c.per_producer, c.size);
  std::vector<unsigned char> buf(kPipeChunk + c.size);
  std::size_t have = 0;  // bytes in buf: whole messages are checked, a partial one waits for its rest
  c.ends.ready_and_wait(c.id);
  while (!check.complete()) {
    const ssize_t n = ::read(c.data_r, buf.data() + have, kPipeChunk);  // blocks while empty
    if (n < 0) {
      if (errno == EINTR) continue;
      check.fail(errno_text("read of the data pipe"));
    }
    if (n == 0) check.fail("end of file on the data pipe");
    have += static_cast<std::size_t>(n);
    std::size_t at = 0;
    for (; have - at >= c.size; at += c.size) check.on(buf.data() + at, c.size);
    if (at > 0 && at < have) std::memmove(buf.data(), buf.data() + at, have - at);
    have -= at;
  }
  finish_consumer(c.ends, check, [&] {
    pollfd pfd{c.data_r, POLLIN, 0};
    return have == 0 && ::poll(&pfd, 1, 0) == 0;
  });
}

// --- unix datagram socket -------------------------------------------------------

// The consumer's address: abstract namespace (no file), "\0<name>".
sockaddr_un socket_address(const std::string& name, socklen_t& len) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  if (name.size() + 1 > sizeof a.sun_path) throw bench_failure("socket name too long: " + name);
  std::memcpy(a.sun_path + 1, name.data(), name.size());
  len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  return a;
}

void socket_producer(const ChildCtx& c) {
  ::close(c.data_r);  // the consumer's socket
  Fd s(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (s.get() < 0) throw bench_failure(errno_text("socket"));
  socklen_t len = 0;
  const sockaddr_un to = socket_address(c.name, len);
  // Connected: send() blocks while the consumer's queue is full (nothing is dropped).
  if (::connect(s.get(), reinterpret_cast<const sockaddr*>(&to), len) != 0)
    throw bench_failure(errno_text("connect to the consumer's socket"));
  produce(c, [&](const MessageBuffer& msg) {
    for (;;) {
      const ssize_t w = ::send(s.get(), msg.bytes, msg.size, 0);
      if (w == static_cast<ssize_t>(msg.size)) return 0;
      if (w < 0 && errno == EINTR) continue;
      throw bench_failure(w < 0 ? errno_text("send") : "short send of " + std::to_string(w) + " bytes");
    }
  });
}

void socket_consumer(const ChildCtx& c) {
  Checker check(c.per_producer, c.size);
  const std::size_t room = c.size + 1;  // one byte more: a longer datagram shows as longer (or MSG_TRUNC)
  std::vector<unsigned char> buf(kBatch * room);
  std::vector<iovec> iov(kBatch);
  std::vector<mmsghdr> msgs(kBatch);
  auto reset = [&] {
    for (std::size_t i = 0; i < kBatch; ++i) {
      iov[i] = {buf.data() + i * room, room};
      msgs[i] = {};
      msgs[i].msg_hdr.msg_iov = &iov[i];
      msgs[i].msg_hdr.msg_iovlen = 1;
    }
  };
  c.ends.ready_and_wait(c.id);
  while (!check.complete()) {
    reset();
    // Waits for the first datagram, then takes what is there, up to kBatch.
    const int n = ::recvmmsg(c.data_r, msgs.data(), kBatch, MSG_WAITFORONE, nullptr);
    if (n < 0) {
      if (errno == EINTR) continue;
      check.fail(errno_text("recvmmsg"));
    }
    for (int i = 0; i < n; ++i) {
      if (msgs[i].msg_hdr.msg_flags & MSG_TRUNC) check.fail("a datagram longer than a message");
      check.on(iov[i].iov_base, msgs[i].msg_len);
    }
  }
  finish_consumer(c.ends, check, [&] {
    unsigned char b[1];
    const ssize_t n = ::recv(c.data_r, b, sizeof b, MSG_DONTWAIT | MSG_TRUNC);
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) check.fail(errno_text("recv"));
    return n < 0;
  });
}

// --- spin ring ----------------------------------------------------------------

template <std::size_t S>
void ring_producer(const ChildCtx& c) {
  auto ring = shmbench::BasicSpinRing<S>::open(c.name);
  produce(c, [&](const MessageBuffer& msg) {
    ring.push(msg.bytes);  // spins while full
    return 0;
  });
}

template <std::size_t S>
void ring_consumer(const ChildCtx& c) {
  auto ring = shmbench::BasicSpinRing<S>::open(c.name);
  Checker check(c.per_producer, c.size);
  alignas(64) unsigned char buf[S];
  c.ends.ready_and_wait(c.id);
  while (!check.complete()) {
    ring.pop(buf);  // spins while empty
    check.on(buf, sizeof buf);
  }
  finish_consumer(c.ends, check, [&] { return !ring.try_pop(buf); });
}

void child_main(const ChildCtx& c) {
  const bool consumer = c.id < 0;
  switch (c.mech) {
    case Mech::shmbox_copy: return consumer ? shmbox_copy_consumer(c) : shmbox_copy_producer(c);
    case Mech::shmbox_zero_copy: return consumer ? shmbox_in_place_consumer(c) : shmbox_zero_copy_producer(c);
    case Mech::shmbox_batch: return consumer ? shmbox_copy_consumer(c) : shmbox_batch_producer(c);
    case Mech::posix_mq: return consumer ? posix_mq_consumer(c) : posix_mq_producer(c);
    case Mech::pipe: return consumer ? pipe_consumer(c) : pipe_producer(c);
    case Mech::unix_socket: return consumer ? socket_consumer(c) : socket_producer(c);
    case Mech::spin_ring:
      if (c.size == 64) return consumer ? ring_consumer<64>(c) : ring_producer<64>(c);
      if (c.size == 1024) return consumer ? ring_consumer<1024>(c) : ring_producer<1024>(c);
      throw bench_failure("spin-ring: unsupported message size");
#if defined(SHMBOX_HAVE_BOOST)
    case Mech::boost_mq: return consumer ? boost_mq_consumer(c) : boost_mq_producer(c);
    case Mech::lockfree_spsc:
      if (c.size == 64) return consumer ? spsc_consumer<64>(c) : spsc_producer<64>(c);
      if (c.size == 1024) return consumer ? spsc_consumer<1024>(c) : spsc_producer<1024>(c);
      throw bench_failure("lockfree-spsc: unsupported message size");
#else
    case Mech::boost_mq:
    case Mech::lockfree_spsc: throw bench_failure("built without Boost");
#endif
  }
  throw bench_failure("unknown mechanism");
}

// ===========================================================================
// The parent: segments, queues, one run
// ===========================================================================

// What the system allows a POSIX message queue and a unix datagram socket to
// hold (the benchmark never changes system settings).
std::uint32_t posix_mq_depth() { return std::min(kCapacity, posix_mq_msg_max()); }
std::uint32_t dgram_queue_length() { return read_proc_number("/proc/sys/net/unix/max_dgram_qlen", 10); }

// A fresh segment/queue/pipe/socket for one run; removed when the object goes away.
class Resource {
 public:
  virtual ~Resource() = default;
  // Sets what the children inherit (file descriptors).
  virtual void prepare(ChildCtx& /*c*/) {}
  // Every child has opened it (reported "ready").
  virtual void children_ready() {}
  // After a successful run: anything the mechanism itself can confirm.
  virtual void verify(std::uint64_t /*total*/) {}
};

class ShmboxResource final : public Resource {
 public:
  ShmboxResource(const std::string& name, std::size_t size) : name_(name), track_("/dev/shm/shmbox." + name) {
    shmbox::options o;  // the box's defaults otherwise (block_timeout 1 s, spin 50 us, 64 producers)
    o.capacity = kCapacity;
    o.slot_size = static_cast<std::uint32_t>(size);
    o.overflow = shmbox::policy::block;
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
    if (c.stored != total || c.delivered != total || c.redelivered != 0 || c.abandoned != 0 || c.aborted != 0)
      throw bench_failure("shmbox counters disagree: stored " + std::to_string(c.stored) + ", delivered " +
                          std::to_string(c.delivered) + ", redelivered " + std::to_string(c.redelivered) +
                          ", abandoned " + std::to_string(c.abandoned) + ", aborted " + std::to_string(c.aborted) +
                          ", expected " + std::to_string(total));
  }

 private:
  std::string name_;
  TrackedName track_;
  std::optional<shmbox::Box> box_;
};

#if defined(SHMBOX_HAVE_BOOST)
class BoostMqResource final : public Resource {
 public:
  BoostMqResource(const std::string& name, std::size_t size) : name_(name), track_("/dev/shm/" + name) {
    try {
      bip::message_queue::remove(name_.c_str());
      bip::message_queue mq(bip::create_only, name_.c_str(), kCapacity, size);  // the queue outlives the handle
    } catch (const bip::interprocess_exception& e) {
      throw bench_failure(std::string("boost message_queue create: ") + e.what());
    }
  }
  ~BoostMqResource() override { bip::message_queue::remove(name_.c_str()); }

 private:
  std::string name_;
  TrackedName track_;
};

template <std::size_t S>
class SpscResource final : public Resource {
 public:
  explicit SpscResource(const std::string& name) : name_(name), track_("/dev/shm/" + name) {
    try {
      bip::shared_memory_object::remove(name_.c_str());
      bip::managed_shared_memory seg(bip::create_only, name_.c_str(), sizeof(spsc_queue<S>) + 64 * 1024);
      seg.construct<spsc_queue<S>>(kSpscObject)();  // the segment outlives the handle
    } catch (const bip::interprocess_exception& e) {
      throw bench_failure(std::string("spsc_queue segment: ") + e.what());
    }
  }
  ~SpscResource() override { bip::shared_memory_object::remove(name_.c_str()); }

 private:
  std::string name_;
  TrackedName track_;
};
#endif

class PosixMqResource final : public Resource {
 public:
  PosixMqResource(const std::string& name, std::size_t size) : name_(name), track_(name, TrackedName::mqueue) {
    const long depth = posix_mq_depth();
    if (const int e = create_posix_mq(name, depth, size); e != 0)  // lives on until mq_unlink
      throw bench_failure(errno_text("mq_open(create) " + name + " (depth " + std::to_string(depth) +
                                         ", message size " + std::to_string(size) + ")",
                                     e));
  }
  // Every child has the queue open: unlink the name now, so that nothing is
  // left even if this process is killed with SIGKILL (the queue lives on
  // until the last descriptor is closed). Without /dev/mqueue mounted, a
  // leftover queue could not even be found.
  void children_ready() override { ::mq_unlink(name_.c_str()); }

 private:
  std::string name_;
  TrackedName track_;
};

class PipeResource final : public Resource {
 public:
  explicit PipeResource(std::size_t size) {
    // Room for kCapacity messages, like the other queues (pipe-max-size is 1 MiB by default).
    if (::fcntl(p_.w.get(), F_SETPIPE_SZ, static_cast<int>(kCapacity * size)) < 0)
      throw bench_failure(errno_text("F_SETPIPE_SZ " + std::to_string(kCapacity * size)));
  }
  void prepare(ChildCtx& c) override {
    c.data_r = p_.r.get();
    c.data_w = p_.w.get();
  }

 private:
  Pipe p_;
};

class SocketResource final : public Resource {
 public:
  explicit SocketResource(const std::string& name) : s_(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0)) {
    if (s_.get() < 0) throw bench_failure(errno_text("socket"));
    socklen_t len = 0;
    const sockaddr_un a = socket_address(name, len);
    if (::bind(s_.get(), reinterpret_cast<const sockaddr*>(&a), len) != 0)
      throw bench_failure(errno_text("bind @" + name));
  }
  void prepare(ChildCtx& c) override { c.data_r = s_.get(); }

 private:
  Fd s_;  // bound before any producer connects; the consumer inherits it
};

template <std::size_t S>
class RingResource final : public Resource {
 public:
  explicit RingResource(const std::string& name) : name_(name), track_("/dev/shm/" + name) {
    shmbench::BasicSpinRing<S>::remove(name_);
    (void)shmbench::BasicSpinRing<S>::create(name_, kCapacity);  // the segment outlives the handle
  }
  ~RingResource() override { shmbench::BasicSpinRing<S>::remove(name_); }

 private:
  std::string name_;
  TrackedName track_;
};

std::string resource_name(Mech m) {
  std::string tag;
  switch (m) {
    case Mech::shmbox_copy:
    case Mech::shmbox_zero_copy:
    case Mech::shmbox_batch: tag = "box"; break;
    case Mech::boost_mq: tag = "mq"; break;
    case Mech::posix_mq: tag = "pmq"; break;
    case Mech::pipe: tag = "pipe"; break;
    case Mech::unix_socket: tag = "sock"; break;
    case Mech::lockfree_spsc: tag = "spsc"; break;
    case Mech::spin_ring: tag = "ring"; break;
  }
  std::string n = std::string(kMarker) + std::to_string(::getpid()) + "-" + tag;
  return m == Mech::posix_mq ? "/" + n : n;  // a POSIX mq name starts with '/'
}

std::unique_ptr<Resource> make_resource(Mech m, const std::string& name, std::size_t size) {
  switch (m) {
    case Mech::shmbox_copy:
    case Mech::shmbox_zero_copy:
    case Mech::shmbox_batch: return std::make_unique<ShmboxResource>(name, size);
    case Mech::posix_mq: return std::make_unique<PosixMqResource>(name, size);
    case Mech::pipe: return std::make_unique<PipeResource>(size);
    case Mech::unix_socket: return std::make_unique<SocketResource>(name);
    case Mech::spin_ring:
      if (size == 64) return std::make_unique<RingResource<64>>(name);
      if (size == 1024) return std::make_unique<RingResource<1024>>(name);
      throw bench_failure("spin-ring: unsupported message size");
#if defined(SHMBOX_HAVE_BOOST)
    case Mech::boost_mq: return std::make_unique<BoostMqResource>(name, size);
    case Mech::lockfree_spsc:
      if (size == 64) return std::make_unique<SpscResource<64>>(name);
      if (size == 1024) return std::make_unique<SpscResource<1024>>(name);
      throw bench_failure("lockfree-spsc: unsupported message size");
#else
    case Mech::boost_mq:
    case Mech::lockfree_spsc: throw bench_failure("built without Boost");
#endif
  }
  throw bench_failure("unknown mechanism");
}

// One measured configuration: a mechanism, a message size, a producer count.
struct Config {
  Mech mech;
  std::size_t size;
  int producers;
  std::uint64_t messages;  // per run
  std::string group;       // tput-64-1p, ...
  std::string note;        // of its row
  std::string skip;        // non-empty: not measured, why
};

struct RunResult {
  double seconds = 0;
  std::uint64_t retries = 0;  // shmbox: posts/loans that timed out and were repeated, messages re-posted
};

// One run (harness.hpp, ONE RUN): a fresh resource, the consumer and the
// producers; the time from the release to the consumer's last message.
RunResult run_once(const Config& cfg, const Args& args) {
  const std::string name = resource_name(cfg.mech);
  const std::unique_ptr<Resource> resource = make_resource(cfg.mech, name, cfg.size);
  Run run;  // declared after the resource: children die before it is removed
  ChildCtx base;
  base.mech = cfg.mech;
  base.name = name;
  base.size = cfg.size;
  base.per_producer = split_evenly(cfg.messages, cfg.producers);
  base.ends = run.child_ends();
  resource->prepare(base);

  run.spawn("consumer", -1, [&] { child_main(base); });
  for (int i = 0; i < cfg.producers; ++i) {
    run.spawn("producer " + std::to_string(i), i, [&] {
      ChildCtx c = base;
      c.id = i;
      child_main(c);
    });
  }
  run.watch(args.timeout_s);
  run.wait_ready(cfg.producers + 1);  // every child is attached and mapped
  resource->children_ready();
  const std::int64_t t_release = run.release();
  const Run::Finished f = run.wait_finished(cfg.producers);
  run.wait_exit();

  if (f.sent != cfg.messages || f.result.a != cfg.messages)
    throw bench_failure("count mismatch: posted " + std::to_string(f.sent) + ", received " +
                        std::to_string(f.result.a) + ", expected " + std::to_string(cfg.messages));
  resource->verify(cfg.messages);
  if (f.result.t_ns <= t_release) throw bench_failure("consumer reported a time before the release");
  RunResult out;
  out.seconds = static_cast<double>(f.result.t_ns - t_release) / 1e9;
  out.retries = f.retries;
  return out;
}

// ===========================================================================
// Configurations, rows and the table
// ===========================================================================

std::string size_tag(std::size_t size) { return size == 1024 ? "1k" : std::to_string(size); }

std::vector<Config> make_configs(const Args& args) {
  std::vector<Config> out;
  for (std::size_t size : args.sizes) {
    for (int producers : args.producers) {
      for (const MechInfo& m : kMechs) {
        if (!args.only.empty() && std::find(args.only.begin(), args.only.end(), m.mech) == args.only.end()) continue;
        Config c{m.mech, size, producers, 0, {}, {}, {}};
        c.group = "tput-" + size_tag(size) + "-" + std::to_string(producers) + "p";
        std::uint64_t div = 1;
        if (size > 64) div *= 2;
        div *= m.divisor;
        c.messages = std::max<std::uint64_t>(args.messages / div, static_cast<std::uint64_t>(producers));
        c.note = std::to_string(c.messages) + " msgs/run";
        if (div > 1) c.note += " (N/" + std::to_string(div) + ")";
        if (m.mech == Mech::posix_mq) c.note += "; depth " + std::to_string(posix_mq_depth()) + " (fs.mqueue.msg_max)";
        if (m.mech == Mech::unix_socket)
          c.note += "; SOCK_DGRAM, queue " + std::to_string(dgram_queue_length()) + " (net.unix.max_dgram_qlen)";
        if (m.needs_boost && !kHaveBoost) c.skip = "Boost not installed";
        else if (!m.single_why.empty() && producers > 1) c.skip = std::string(m.single_why);
        out.push_back(std::move(c));
      }
    }
  }
  return out;
}

// Millions of messages per second, three significant digits.
std::string fmt_mrate(double r) {
  const double m = r / 1e6;
  char buf[32];
  if (m >= 100) std::snprintf(buf, sizeof buf, "%.0f", m);
  else if (m >= 10) std::snprintf(buf, sizeof buf, "%.1f", m);
  else if (m >= 1) std::snprintf(buf, sizeof buf, "%.2f", m);
  else std::snprintf(buf, sizeof buf, "%.3f", m);
  return buf;
}

std::string fmt_ratio(std::optional<double> r) {
  if (!r) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2fx", *r);
  return buf;
}

// The 1-minute load average: other work on the machine makes every number noisy.
std::string load_average() {
  double l = 0;
  return ::getloadavg(&l, 1) == 1 ? std::to_string(l).substr(0, 4) : "?";
}

int run(const Args& args) {
  install_signal_handlers();
  remove_stale(kProg, "/dev/shm", kMarker);
  remove_stale(kProg, "/dev/mqueue", kMarker);  // only there when the mqueue file system is mounted
  const std::string load_before = load_average();

  const std::vector<Config> configs = make_configs(args);
  const auto started = bench_clock::now();
  std::vector<std::vector<double>> rates(configs.size());
  std::vector<std::uint64_t> retries(configs.size(), 0);
  for (int rep = 0; rep < args.reps; ++rep) {  // interleaved: rep 1 of everything, then rep 2, ...
    for (std::size_t i = 0; i < configs.size(); ++i) {
      const Config& c = configs[i];
      if (!c.skip.empty()) continue;
      RunResult r;
      try {
        r = run_once(c, args);
      } catch (const std::exception& e) {
        throw bench_failure(c.group + " " + std::string(info_of(c.mech).name) + ", rep " + std::to_string(rep + 1) +
                            ": " + e.what());
      }
      const double rate = static_cast<double>(c.messages) / r.seconds;
      rates[i].push_back(rate);
      retries[i] += r.retries;
      if (args.verbose)
        std::fprintf(stderr, "rep %d/%d  %-11s %-17.*s %9llu msgs  %8.4f s  %8s Mmsg/s  retries %llu\n", rep + 1,
                     args.reps, c.group.c_str(), int(info_of(c.mech).name.size()), info_of(c.mech).name.data(),
                     static_cast<unsigned long long>(c.messages), r.seconds, fmt_mrate(rate).c_str(),
                     static_cast<unsigned long long>(r.retries));
    }
  }
  const double elapsed = std::chrono::duration<double>(bench_clock::now() - started).count();

  // Rows on stdout.
  std::vector<std::optional<shmbench::summary>> st(configs.size());
  for (std::size_t i = 0; i < configs.size(); ++i) {
    const Config& c = configs[i];
    const std::string_view mech = info_of(c.mech).name;
    if (!c.skip.empty()) {
      shmbench::print_skip(c.group, mech, c.skip);
      continue;
    }
    st[i] = shmbench::summarize(rates[i]);
    shmbench::print_row(c.group, mech, "rate", st[i]->median / 1e6, st[i]->min / 1e6, st[i]->max / 1e6, "Mmsg/s",
                        c.note);
  }

  // The table on stderr: one block per group, ratios of medians within it.
  auto median_in = [&](const std::string& group, Mech m) -> std::optional<double> {
    for (std::size_t i = 0; i < configs.size(); ++i)
      if (configs[i].group == group && configs[i].mech == m && st[i]) return st[i]->median;
    return std::nullopt;
  };
  const long cpus = ::sysconf(_SC_NPROCESSORS_ONLN);
  std::fprintf(stderr,
               "\n# shmbox-bench-throughput: median (min .. max) of %d runs per row, interleaved; N = %llu; queues "
               "of %u messages unless noted\n# %ld CPUs, load average %s before, %s after; %.0f s\n",
               args.reps, static_cast<unsigned long long>(args.messages), kCapacity, cpus, load_before.c_str(),
               load_average().c_str(), elapsed);
  std::string last_group;
  for (std::size_t i = 0; i < configs.size(); ++i) {
    const Config& c = configs[i];
    if (c.group != last_group) {
      last_group = c.group;
      std::fprintf(stderr, "\n%s: %zu-byte messages, %d producer%s, 1 consumer\n", c.group.c_str(), c.size,
                   c.producers, c.producers == 1 ? "" : "s");
      std::fprintf(stderr, "  %-17s %10s  %8s  %-19s %8s  %9s  %s\n", "mechanism", "msgs/run", "Mmsg/s", "min .. max",
                   "vs copy", "vs b-mq", "note");
    }
    const std::string_view mech = info_of(c.mech).name;
    if (!st[i]) {
      std::fprintf(stderr, "  %-17.*s skipped: %s\n", int(mech.size()), mech.data(), c.skip.c_str());
      continue;
    }
    const auto copy = median_in(c.group, Mech::shmbox_copy), bmq = median_in(c.group, Mech::boost_mq);
    const std::string range = fmt_mrate(st[i]->min) + " .. " + fmt_mrate(st[i]->max);
    std::string note = c.note.substr(c.note.find(" msgs/run") + 9);  // the count is in its own column
    if (note.starts_with(" ")) note.erase(0, 1);
    if (retries[i] > 0) note += (note.empty() ? "" : "; ") + std::to_string(retries[i]) + " retries";
    std::fprintf(stderr, "  %-17.*s %10llu  %8s  %-19s %8s  %9s  %s\n", int(mech.size()), mech.data(),
                 static_cast<unsigned long long>(c.messages), fmt_mrate(st[i]->median).c_str(), range.c_str(),
                 fmt_ratio(copy ? std::optional<double>(st[i]->median / *copy) : std::nullopt).c_str(),
                 fmt_ratio(bmq ? std::optional<double>(st[i]->median / *bmq) : std::nullopt).c_str(), note.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return shmbench::bench_main(kProg, argc, argv, parse_args, run); }
