// bench/throughput.cpp - shmbox-bench-throughput: how many messages per second
// go from producer processes to one consumer process, for every mechanism
// below, with 64-byte and 1024-byte messages and 1 and 4 producers, all in
// one run:
//   shmbox-copy       shmbox, Producer::post / Owner::receive_batch (copies)
//   shmbox-zero-copy  shmbox, Producer::loan + slot_loan::commit /
//                     Owner::receive_in_place (written and read in place)
//   shmbox-batch      shmbox, Producer::post_batch (32 at a time) /
//                     Owner::receive_batch
//   shmbox-receive    shmbox, Producer::post / Owner::receive(m, 1 s): one
//                     message per call on both sides (the loop users write)
//   shmbox-try-receive  shmbox, Producer::post / an Owner::try_receive
//                     polling loop (spin_wait while empty)
//   shmbox-in-place-1 shmbox, Producer::loan + commit /
//                     Owner::receive_in_place with max 1, waiting 1 s
//   shmbox-priority, shmbox-stash, shmbox-resizable, shmbox-quota  the other kinds of box
//                     (bench/mech/common.hpp shmbox_box), posted and received
//                     as shmbox-copy; shmbox-buffer (a custom buffer) is a
//                     skip row here (it drops by design when outrun) and a
//                     round-trip row in rtt.cpp
//   boost-mq          Boost.Interprocess message_queue (off-the-shelf baseline)
//   posix-mq          POSIX message queue (mq_send / mq_receive)
//   pipe              one pipe, atomic write() per message, 64 KiB reads
//   unix-socket       a unix SOCK_DGRAM socket, send() / recvmmsg()
//   lockfree-spsc     boost::lockfree::spsc_queue in a Boost.Interprocess
//                     managed segment, busy-polling (single producer)
//   spin-ring         the hand-written spin ring (spin_ring.hpp): the
//                     practical limit of shared memory (single producer)
//   spin-ring-locked  the same ring with one locked read-modify-write (on a
//                     private line) before every push: the floor of a queue
//                     with several producers, whose claim needs one (a
//                     shmbox post's tail CAS), as a single producer meets it
//
// OUTPUT
// stdout: one row per (group, mechanism) in the format of bench/rows.hpp:
//   row  tput-<64|1k>-<1|4>p  <mechanism>  rate  <median> <min> <max>  Mmsg/s  <note>
//   skip tput-...             <mechanism>  <why>
// Other sizes, producer counts and capacities (bench/run.sh --curves) make
// groups tput-<S>-<P>p, and tput-<S>-<P>p-c<C> with --capacity C.
// (value = messages per second / 1e6; the note gives the messages per run
// and anything that differs between mechanisms, such as a smaller queue).
// stderr: the same as a table (rows.hpp, Results), and errors.
//
// METHOD
// * Processes, messages, their check, start barrier, watchdog, repetitions,
//   cleanup: harness.hpp, COMMON METHOD. A run: a fresh segment/queue/pipe/
//   socket, one consumer process and one process per producer.
// * Messages. Every producer posts its share of the run's messages (split as
//   evenly as possible), S bytes each (64 or 1024; zero-copy: written into
//   the loaned slot). Message counts: --messages N for
//   64-byte messages, N/2 for 1 KiB ones; the slower mechanisms send fewer,
//   so that a run of each takes a comparable time: boost-mq and pipe a
//   quarter, posix-mq and unix-socket a sixteenth. Every row's note says how
//   many messages a run sent.
// * Checking. Every mechanism is FIFO per producer; every consumer, also the
//   zero-copy one, reads both ends of every message. After the producers
//   have finished, the consumer checks that nothing more arrives, so the
//   count is exact; for shmbox the parent compares the box's own
//   stored/delivered counters with the count (and finds the boost-mq,
//   posix-mq and lockfree-spsc queues empty).
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
//   call into a reusable batch (or in place), except the one-message rows
//   (shmbox-receive, shmbox-try-receive, shmbox-in-place-1): one per call.
//   The POSIX message queue's name is unlinked as soon as every child has
//   opened it; the socket is in the abstract namespace (it leaves no file).
// * Timing. The consumer reads steady_clock right after it has received and
//   checked the last message (t_end) and reports it. The run's time is
//   t_end - t_release; steady_clock is CLOCK_MONOTONIC, one clock for all
//   processes of the machine. Throughput = messages / time.
// * Curves (bench/run.sh --curves): --sizes takes any size from 16 bytes
//   (id and sequence number only: no pattern to check) to 1 MiB, measured
//   for the shmbox rows and the spin ring (a spin ring exists for 16 B .. 1
//   MiB in powers of 4); the other mechanisms are skip rows there. Sizes
//   above 1 KiB send N x 512 / S messages per run (the same bytes as the 1
//   KiB runs); without --capacity a queue of S-byte messages holds at most
//   128 MiB / S of them (so a segment stays under 256 MiB: 512 slots of 256
//   KiB, 128 of 1 MiB); a shmbox consumer takes at most 1 MiB / S messages
//   per call (256 up to 4 KiB). --capacity C,... sets every queue's capacity
//   (a list: one set of groups per capacity, interleaved; the spin ring only
//   takes powers of two); --producers goes up to 64
//   (the box's max_producers is raised to the count when it is above 64).
//   Big messages and queues of more than 1024 send at least 8 x the
//   capacity (--laps) (so the first lap, with its page faults, is at most an eighth of
//   the time). The notes of the rows say what applied.
//
// The mechanisms are bench/mech/ (shared with rtt.cpp); this file has the
// configurations and the two roles.
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
#include <type_traits>
#include <utility>
#include <vector>

#include "harness.hpp"
#include "mech/mech.hpp"
#include "rows.hpp"

namespace {

using namespace shmbench;

constexpr std::string_view kProg = "shmbox-bench-throughput";
constexpr std::uint32_t kCapacity = 1024;      // messages each queue holds (where the system allows)
constexpr std::size_t kBatch = 256;            // most messages a consumer takes per call
constexpr std::size_t kPostBatch = 32;         // shmbox-batch: messages per post_batch
constexpr std::string_view kMarker = "shmbench-tp-";  // in every name we create

// ===========================================================================
// Mechanisms (bench/mech/mech.hpp)
// ===========================================================================

struct MechInfo {
  std::string_view name;        // as in the rows
  Kind kind;
  std::string_view single_why;  // non-empty: single producer only; the skip reason otherwise
  std::uint64_t divisor;        // runs send N / divisor messages (slow mechanisms: fewer)
  shmbox_send send = shmbox_send::post;
  shmbox_recv recv = shmbox_recv::batch;
  std::size_t recv_max = kBatch;  // the most messages one receive call takes
  shmbox_box box = shmbox_box::fifo;  // shmbox: the kind of box (common.hpp)
  bool locked_push = false;           // spin ring: EndCtx::locked_push
};

// A baseline: its name is the one of bench/mech/mech.hpp.
constexpr MechInfo baseline(Kind k, std::string_view single_why, std::uint64_t divisor) {
  return {info_of(k).name, k, single_why, divisor};
}

constexpr MechInfo kMechs[] = {
    {"shmbox-copy", Kind::shmbox, {}, 1, shmbox_send::post, shmbox_recv::batch},
    {"shmbox-zero-copy", Kind::shmbox, {}, 1, shmbox_send::loan, shmbox_recv::in_place},
    {"shmbox-batch", Kind::shmbox, {}, 1, shmbox_send::post, shmbox_recv::batch},
    {"shmbox-receive", Kind::shmbox, {}, 1, shmbox_send::post, shmbox_recv::adaptive, 1},
    {"shmbox-try-receive", Kind::shmbox, {}, 1, shmbox_send::post, shmbox_recv::poll, 1},
    {"shmbox-in-place-1", Kind::shmbox, {}, 1, shmbox_send::loan, shmbox_recv::in_place, 1},
    // The other kinds of box, posted and received like shmbox-copy (compare with it).
    {"shmbox-priority", Kind::shmbox, {}, 1, shmbox_send::post, shmbox_recv::batch, kBatch, shmbox_box::priority},
    {"shmbox-stash", Kind::shmbox, {}, 1, shmbox_send::post, shmbox_recv::batch, kBatch, shmbox_box::stash},
    {"shmbox-buffer", Kind::shmbox, {}, 1, shmbox_send::post, shmbox_recv::batch, kBatch, shmbox_box::buffer},  // a skip row
    {"shmbox-resizable", Kind::shmbox, {}, 1, shmbox_send::post, shmbox_recv::batch, kBatch, shmbox_box::resizable},
    {"shmbox-quota", Kind::shmbox, {}, 1, shmbox_send::post, shmbox_recv::batch, kBatch, shmbox_box::quota},
    baseline(Kind::boost_mq, {}, 4),
    baseline(Kind::posix_mq, {}, 16),
    baseline(Kind::pipe, {}, 4),
    baseline(Kind::unix_socket, {}, 16),
    baseline(Kind::lockfree_spsc, "single-producer queue", 1),
    baseline(Kind::spin_ring, "single-producer ring", 1),
    {"spin-ring-locked", Kind::spin_ring, "single-producer ring", 1, shmbox_send::post, shmbox_recv::batch, kBatch,
     shmbox_box::fifo, true},
};

// ===========================================================================
// Command line
// ===========================================================================

struct Args : CommonArgs {
  std::uint64_t messages = 4'000'000;  // per 64-byte run, split across the producers
  std::vector<const MechInfo*> only;  // empty: every mechanism
  std::vector<std::size_t> sizes = {64, 1024};
  std::vector<int> producers = {1, 4};
  std::vector<std::uint32_t> capacities;  // --capacity: one set of groups per capacity; empty: capacity_for
  std::uint64_t laps = 8;  // --laps: big messages and big queues send at least laps x capacity messages
};

void usage(std::FILE* to) {
  std::fprintf(to,
               "usage: shmbox-bench-throughput [--messages N] [--reps R] [--timeout S] [--quick]\n"
               "                               [--only MECH,...] [--sizes 64,1024] [--producers 1,4] [--capacity C,...]\n"
               "                               [--laps L] [--pin] [--verbose]\n"
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
               "  --sizes LIST    message sizes in bytes, 16..1048576 (default 64,1024); sizes other than 64 and\n"
               "                  1024 measure the shmbox rows and spin-ring only\n"
               "  --producers LIST  producer counts, each 1..64 (default 1,4)\n"
               "  --capacity LIST messages every queue holds, one set of groups (tput-S-Pp-cC) per capacity\n"
               "                  (default 1024, fewer for messages over 128 KiB)\n"
               "  --laps L        messages over 1 KiB and queues over 1024: at least L x capacity messages per\n"
               "                  run (default 8)\n"
               "  --pin           the consumer on the last CPU, each producer on one of the others\n"
               "  --verbose       print every run (and producer retries) on stderr\n"
               "Rows (bench/rows.hpp) go to stdout, the table and errors to stderr. Exit status 1: a run\n"
               "failed (lost, duplicated, reordered or corrupted message, watchdog, error).\n");
}

std::optional<Args> parse_args(int argc, char** argv) {
  Args a;
  const bool ok = parse_options(kProg, argc, argv, usage, a, [&](ArgWalker& w) {
    const std::string_view arg = w.name();
    if (arg == "--messages") return w.number(a.messages, 1);
    if (arg == "--only")
      return parse_list(w, a.only, [](std::string_view item, const MechInfo*& m) {
        const auto it = std::find_if(std::begin(kMechs), std::end(kMechs),
                                     [&](const MechInfo& i) { return i.name == item; });
        if (it != std::end(kMechs)) m = it;
        return it != std::end(kMechs);
      });
    if (arg == "--sizes")
      return parse_list(w, a.sizes, [](std::string_view item, std::size_t& s) {
        return parse_number(item, s) && s >= kMinMsgSize && s <= kMaxCurveMsgSize;
      });
    if (arg == "--producers")
      return parse_list(w, a.producers,
                        [](std::string_view item, int& p) { return parse_number(item, p) && p >= 1 && p <= 64; });
    if (arg == "--laps") return w.number(a.laps, 1, 1000);
    if (arg == "--capacity")
      return parse_list(w, a.capacities, [](std::string_view item, std::uint32_t& c) {
        return parse_number(item, c) && c >= 1 && c <= (16u << 20);
      });
    return false;
  });
  if (!ok) return std::nullopt;
  a.quick_default(a.messages, "--messages", 20'000);
  a.quick_default(a.reps, "--reps", 1);
  return a;
}

// ===========================================================================
// What the children do
// ===========================================================================

// What a child needs to know.
struct ChildCtx {
  const MechInfo* mech = nullptr;
  EndCtx end;                               // the queue it sends on (producer) or receives from (consumer)
  int id = -1;                              // producer id; -1: the consumer
  std::vector<std::uint64_t> per_producer;  // messages each producer posts
  ChildEnds ends;                           // its ends of the run's pipes
};

// Every producer after its set-up: reports "ready", waits for "go", sends its
// messages in order (built in the end's own buffer) and reports the count and
// how often it had to retry (a post or loan that timed out on the full box).
template <class End>
void produce(const ChildCtx& c, End& end) {
  const auto id = static_cast<std::uint64_t>(c.id);
  const std::uint64_t count = c.per_producer[id];
  unsigned char* msg = end.tx_buffer();
  fill_message(msg, c.end.size, id);
  c.ends.ready_and_wait(c.id);
  std::uint64_t retries = 0;
  for (std::uint64_t seq = 0; seq < count; ++seq) {
    set_seq(msg, seq);
    retries += end.send(msg);
  }
  c.ends.send(rec_kind::produced, c.id, count, retries);
}

// shmbox-batch: post_batch of kPostBatch messages at a time.
void produce_batches(const ChildCtx& c, ShmboxEnd& end) {
  const auto id = static_cast<std::uint64_t>(c.id);
  const std::uint64_t count = c.per_producer[id];
  const std::size_t size = c.end.size;
  std::vector<unsigned char> bytes(kPostBatch * size);
  std::array<std::string_view, kPostBatch> views;
  for (std::size_t k = 0; k < kPostBatch; ++k) {
    fill_message(bytes.data() + k * size, size, id);
    views[k] = std::string_view(reinterpret_cast<const char*>(bytes.data() + k * size), size);
  }
  c.ends.ready_and_wait(c.id);
  std::uint64_t retries = 0;
  for (std::uint64_t seq = 0; seq < count;) {
    const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(kPostBatch, count - seq));
    for (std::size_t k = 0; k < n; ++k) set_seq(bytes.data() + k * size, seq + k);
    retries += end.send_batch(std::span<const std::string_view>(views.data(), n));
    seq += n;
  }
  c.ends.send(rec_kind::produced, c.id, count, retries);
}

// The consumer checks every message (harness.hpp, Checker) and finally that
// nothing more arrives.
template <class End>
void consume(const ChildCtx& c, End& end) {
  Checker check(c.per_producer, c.end.size);
  c.ends.ready_and_wait(c.id);
  const auto on = [&](const unsigned char* p, std::size_t n) { check.on(p, n); };
  while (!check.complete()) end.recv(on);
  finish_consumer(c.ends, check, [&] { return end.idle(); });
}

void child_main(const ChildCtx& c) {
  with_end(c.mech->kind, c.end, [&](auto& end) {
    if (c.id < 0) return consume(c, end);
    if constexpr (std::is_same_v<std::decay_t<decltype(end)>, ShmboxEnd>)
      if (c.mech->name == "shmbox-batch") return produce_batches(c, end);
    produce(c, end);
  });
}

// ===========================================================================
// The parent: one run
// ===========================================================================

// What the system allows a POSIX message queue and a unix datagram socket to
// hold (the benchmark never changes system settings).
std::uint32_t posix_mq_depth() { return std::min(kCapacity, posix_mq_msg_max()); }
std::uint32_t dgram_queue_length() { return read_proc_number("/proc/sys/net/unix/max_dgram_qlen", 10); }
// The capacity of every queue of S-byte messages when --capacity is not
// given: kCapacity, but at most 128 MiB of payload (a power of two).
std::uint32_t capacity_for(std::size_t size) {
  std::uint32_t c = kCapacity;
  while (c > 1 && std::size_t{c} * size > (std::size_t{128} << 20)) c /= 2;
  return c;
}

// The most messages a shmbox consumer takes per call: kBatch, but at most 1 MiB of them.
std::size_t batch_for(std::size_t size, std::size_t recv_max) {
  return std::min(recv_max, std::max<std::size_t>(1, (std::size_t{1} << 20) / size));
}

// One measured configuration: a mechanism, a message size, a producer count.
struct Config {
  const MechInfo* mech;
  std::size_t size;
  int producers;
  std::uint32_t capacity;
  std::uint64_t messages;  // per run
  std::string group;       // tput-64-1p, ...
  std::string note;        // of its row
  std::string skip;        // non-empty: not measured, why
};

struct RunResult {
  double seconds = 0;
  std::uint64_t retries = 0;  // shmbox: posts/loans that timed out and were repeated, messages re-posted
};

// One run (harness.hpp, ONE RUN): a fresh queue, the consumer and the
// producers; the time from the release to the consumer's last message.
RunResult run_once(const Config& cfg, const Args& args) {
  const MechInfo& m = *cfg.mech;
  QueueOpts opts;  // kCapacity messages; shmbox: policy block; unix-socket: SOCK_DGRAM
  opts.posix_depth = posix_mq_depth();
  opts.capacity = cfg.capacity;
  opts.max_producers = std::max<std::uint32_t>(64, static_cast<std::uint32_t>(cfg.producers));
  opts.box = m.box;
  const std::unique_ptr<Queue> queue =
      make_queue(m.kind, std::string(kMarker) + std::to_string(::getpid()) + "-" + info_of(m.kind).tag, cfg.size, opts);
  Run run;  // declared after the queue: children die before it is removed
  ChildCtx base;
  base.mech = &m;
  base.end.size = cfg.size;
  base.end.send_mode = m.send;
  base.end.recv_mode = m.recv;
  base.end.locked_push = m.locked_push;
  base.per_producer = split_evenly(cfg.messages, cfg.producers);
  base.ends = run.child_ends();

  ChildCtx consumer = base;
  consumer.end.batch = batch_for(cfg.size, m.recv_max);
  queue->receiver(consumer.end);
  run.spawn("consumer", -1, [&] { child_main(consumer); }, fds_not_of(consumer.end, {queue.get()}));
  for (int i = 0; i < cfg.producers; ++i) {
    ChildCtx c = base;
    c.id = i;
    queue->sender(c.end);
    run.spawn("producer " + std::to_string(i), i, [&] { child_main(c); }, fds_not_of(c.end, {queue.get()}));
  }
  run.watch(args.timeout_s);
  queue->close_fds();  // only the children keep these
  run.wait_ready(cfg.producers + 1);  // every child is attached and mapped
  queue->opened();
  const std::int64_t t_release = run.release();
  const Run::Finished f = run.wait_finished(cfg.producers);
  run.wait_exit();

  if (f.sent != cfg.messages || f.result.a != cfg.messages)
    throw bench_failure("count mismatch: posted " + std::to_string(f.sent) + ", received " +
                        std::to_string(f.result.a) + ", expected " + std::to_string(cfg.messages));
  queue->verify(cfg.messages);
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
  std::vector<std::uint32_t> caps = args.capacities;
  if (caps.empty()) caps.push_back(0);  // 0: capacity_for(size)
  for (std::uint32_t cap : caps)
  for (std::size_t size : args.sizes) {
    for (int producers : args.producers) {
      for (const MechInfo& m : kMechs) {
        if (!args.only.empty() && std::find(args.only.begin(), args.only.end(), &m) == args.only.end()) continue;
        Config c{&m, size, producers, cap != 0 ? cap : capacity_for(size), 0, {}, {}, {}};
        c.group = "tput-" + size_tag(size) + "-" + std::to_string(producers) + "p";
        if (cap != 0) c.group += "-c" + std::to_string(cap);
        std::uint64_t div = 1;
        if (size > 64) div *= 2;
        if (size > 1024) div = size / 512;  // the bytes of a 1 KiB run
        div *= m.divisor;
        c.messages = std::max<std::uint64_t>(args.messages / div, static_cast<std::uint64_t>(producers));
        // Big messages and big queues: at least 8 laps of the queue (the
        // first lap's page faults are in the time).
        if (size > 1024 || c.capacity > kCapacity) c.messages = std::max<std::uint64_t>(c.messages, args.laps * c.capacity);
        c.note = std::to_string(c.messages) + " msgs/run";
        if (div > 1) c.note += " (N/" + std::to_string(div) + ")";
        if (c.capacity != kCapacity && m.kind != Kind::posix_mq && m.kind != Kind::unix_socket)
          c.note += "; capacity " + std::to_string(c.capacity);
        if (m.kind == Kind::shmbox && batch_for(size, m.recv_max) != m.recv_max)
          c.note += "; up to " + std::to_string(batch_for(size, m.recv_max)) + " per receive";
        if (m.kind == Kind::posix_mq) c.note += "; depth " + std::to_string(posix_mq_depth()) + " (fs.mqueue.msg_max)";
        if (m.kind == Kind::unix_socket)
          c.note += "; SOCK_DGRAM, queue " + std::to_string(dgram_queue_length()) + " (net.unix.max_dgram_qlen)";
        if (info_of(m.kind).needs_boost && !kHaveBoost) c.skip = "Boost not installed";
        else if (!m.single_why.empty() && producers > 1) c.skip = std::string(m.single_why);
        else if (m.box == shmbox_box::buffer)
          c.skip = "a custom buffer drops by design once its store is full (pobox's buffers): a producer that "
                   "outruns the owner loses messages, which this benchmark counts as a failure; its cost per "
                   "message is in shmbox-bench-rtt's rtt-busy-64 shmbox-buffer row";
        else if (m.kind == Kind::spin_ring && !spin_ring_size(size))
          c.skip = "no spin ring for " + std::to_string(size) + "-byte messages";
        else if (m.kind == Kind::spin_ring && (c.capacity & (c.capacity - 1)) != 0)
          c.skip = "the spin ring's capacity must be a power of two";
        else if (m.kind != Kind::shmbox && m.kind != Kind::spin_ring && size != 64 && size != 1024)
          c.skip = "measured at 64 and 1024 bytes only";
        else if (m.kind == Kind::lockfree_spsc && cap != 0 && cap != kCapacity)
          c.skip = "its capacity is fixed at compile time (1024)";
        out.push_back(std::move(c));
      }
    }
  }
  return out;
}

int run(const Args& args) {
  install_signal_handlers();
  remove_stale(kProg, "/dev/shm", kMarker);
  remove_stale(kProg, "/dev/mqueue", kMarker);  // only there when the mqueue file system is mounted
  const std::string load_before = load_average();

  const std::vector<Config> configs = make_configs(args);
  const auto started = bench_clock::now();
  Results res;
  for (const Config& c : configs)
    if (!c.skip.empty()) res.skip(c.group, c.mech->name, c.skip);
  for (int rep = 0; rep < args.reps; ++rep) {  // interleaved: rep 1 of everything, then rep 2, ...
    for (const Config& c : configs) {
      if (!c.skip.empty()) continue;
      RunResult r;
      try {
        r = run_once(c, args);
      } catch (const std::exception& e) {
        throw bench_failure(c.group + " " + std::string(c.mech->name) + ", rep " + std::to_string(rep + 1) +
                            ": " + e.what());
      }
      const double rate = static_cast<double>(c.messages) / r.seconds / 1e6;
      res.add(c.group, c.mech->name, "rate", "Mmsg/s", rate, c.note);
      if (r.retries > 0 || args.verbose)
        std::fprintf(stderr, "rep %d/%d  %-11s %-17.*s %9llu msgs  %8.4f s  %8s Mmsg/s  retries %llu\n", rep + 1,
                     args.reps, c.group.c_str(), int(c.mech->name.size()), c.mech->name.data(),
                     static_cast<unsigned long long>(c.messages), r.seconds, fmt(rate).c_str(),
                     static_cast<unsigned long long>(r.retries));
    }
  }
  std::fprintf(stderr,
               "\n# shmbox-bench-throughput: median (min .. max) of %d runs per row, interleaved; N = %llu; queues "
               "of %u messages unless noted\n# %ld CPUs, load average %s before, %s after; %.0f s\n",
               args.reps, static_cast<unsigned long long>(args.messages), kCapacity, ::sysconf(_SC_NPROCESSORS_ONLN),
               load_before.c_str(), load_average().c_str(),
               std::chrono::duration<double>(bench_clock::now() - started).count());
  res.print();
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return shmbench::bench_main(kProg, argc, argv, parse_args, run); }

