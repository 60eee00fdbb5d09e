// bench/rtt.cpp - shmbox-bench-rtt: round-trip latency (ping-pong) between
// two processes over two queues, A -> B ("ping") and B -> A ("pong"), for
//   * busy-polling mechanisms (nobody sleeps in the kernel), 64 B and 1 KiB:
//     a hand-written SPSC spin ring (spin_ring.hpp, the practical limit),
//     boost::lockfree::spsc_queue in Boost.Interprocess shared memory, shmbox
//     with copies (post / try_receive) and shmbox zero-copy (loan /
//     receive_in_place); at 64 B also the other kinds of box, as shmbox-copy
//     (shmbox-priority, -stash, -buffer, -resizable, -quota: common.hpp shmbox_box);
//   * blocking mechanisms that sleep in the kernel when nothing is there,
//     64 B: shmbox's adaptive wait (spin, then futex), shmbox sleeping on the
//     futex at once, Boost.Interprocess message_queue, POSIX message queues,
//     pipes and a UNIX socketpair.
// Results go to stdout as rows (rows.hpp: groups rtt-busy-64, rtt-busy-1k,
// rtt-sleep-64; metrics p50, p99, p99.9; unit us), a readable table to stderr.
//
// METHOD
// * Processes, messages, their check, start barrier, watchdog, repetitions
//   (--reps, default 5; for each percentile the median over the runs, and
//   the min and max), cleanup: harness.hpp, COMMON METHOD. A run: fresh
//   queues for both directions, the pinger A and the echoer B
//   (bench/mech/round_trip.hpp, shared with pool.cpp's box-rtt).
// * One round trip. A writes the sequence number into its message, reads
//   steady_clock (t0), sends the message on "ping", waits for the echo on
//   "pong", checks it, and reads steady_clock again (t1); t1 - t0 is one
//   sample. B waits for each ping, checks it and sends the same bytes back.
//   Exactly one message is in flight at any time, so every queue is either
//   empty or holds one message: this measures hand-over latency (wake-up,
//   cache-line transfers, system calls), never queueing.
// * Messages. 64 bytes (rtt-busy-64, rtt-sleep-64) or 1024 bytes
//   (rtt-busy-1k). B checks every ping, A every echo (it must carry the
//   sequence number A just sent). After the run the parent checks that both
//   children reported the full count, and what the mechanism can confirm
//   itself: shmbox's counters (posted = stored = delivered = the count, per
//   direction), message_queue / POSIX queues / lockfree queues empty.
// * Counts. Per run: W warm-up round trips (--warmup, default 2000; not
//   recorded), then N measured ones (--count, default 20000). A computes the
//   run's p50, p99 and p99.9 (nearest rank over its N sorted samples). The
//   samples array is allocated and touched before the start.
// * Busy polling (rtt-busy-*). Every receiver loops on a non-blocking
//   receive: spin ring pop, spsc_queue::pop, shmbox Owner::try_receive,
//   shmbox Owner::receive_in_place(fn, 1, 0 ns). All four use the same wait
//   between failed checks (shmbench::spin_wait from spin_ring.hpp: the CPU's
//   pause hint, and sched_yield() after 1024 failed checks in a row, so that
//   on an oversubscribed machine a spinner gives its core to the peer instead
//   of burning whole time slices). Senders never wait: a queue holding one
//   message is never full. Copies: the spin ring and spsc_queue copy the
//   payload in on send and out on receive (spsc_queue: A's message is first
//   copied into a queue element, see SpscEnd in bench/mech/mech.hpp);
//   shmbox-copy likewise (post copies in, try_receive copies into a reused
//   shmbox::message). shmbox-zero-copy: the sender claims a slot with Producer::loan(), memcpy's the payload into
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
//   socketpair(AF_UNIX, SOCK_SEQPACKET) per direction, one message per
//   send/recv. A receive timeout is only repeated: a hang is caught by the
//   watchdog.
// * Sizes (bench/run.sh --curves): --sizes S,... replaces the groups above by
//   rtt-busy-<S> for each size S (16 B .. 1 MiB): spin-ring (16 B .. 1 MiB
//   in powers of 4), shmbox-copy and shmbox-zero-copy, busy-polling as
//   above. Above 1 KiB a run makes count x 1024 / S round trips (at least
//   200; warm-up likewise, at least 32) and the queues hold 16 slots (one
//   message is in flight; see capacity_for); the rows' notes say so.
// * No CPU pinning (the machine may have only 2 cores, and other work may run
//   on it): figures include scheduling noise; the p99.9 especially. When the
//   two children end up on the same CPU (the other one busy), a busy-polling
//   receiver keeps the CPU for its 1024 checks before it yields, and shmbox's
//   adaptive wait for its whole spin (50 us) before it sleeps, so a round
//   trip then costs about twice that: tens of microseconds (busy) and ~100
//   us (adaptive) instead of well under one (see the min..max of the rows).
//
// The mechanisms are bench/mech/ (shared with throughput.cpp); this file has
// the configurations.
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
#include "mech/mech.hpp"
#include "mech/round_trip.hpp"
#include "rows.hpp"

namespace {

using namespace shmbench;

constexpr std::uint32_t kCapacity = 1024;  // messages per queue (shared-memory mechanisms, message_queue)
constexpr long kPosixMqDepth = 8;          // POSIX queues: at most this (and at most msg_max)
constexpr std::string_view kMarker = "shmbench-rtt-";  // in every name we create
constexpr const char* kProg = "shmbox-bench-rtt";

// ===========================================================================
// Mechanisms (bench/mech/mech.hpp) and configurations
// ===========================================================================

// One measured configuration = one (group, mechanism) pair of the output.
struct Config {
  const char* group;
  const char* mech_name;
  Kind kind;
  std::size_t size;  // bytes per message
  shmbox_send send = shmbox_send::post;
  shmbox_recv recv = shmbox_recv::poll;
  shmbox_box box = shmbox_box::fifo;  // the kind of box (common.hpp)
};

// A baseline: its name is the one of bench/mech/mech.hpp.
constexpr Config baseline(const char* group, Kind k, std::size_t size) { return {group, info_of(k).name, k, size}; }

const std::vector<Config>& all_configs() {
  using enum shmbox_recv;
  static const std::vector<Config> v = {
      baseline("rtt-busy-64", Kind::spin_ring, 64),
      baseline("rtt-busy-64", Kind::lockfree_spsc, 64),
      {"rtt-busy-64", "shmbox-copy", Kind::shmbox, 64, shmbox_send::post, poll},
      {"rtt-busy-64", "shmbox-zero-copy", Kind::shmbox, 64, shmbox_send::loan, poll_in_place},
      // The other kinds of box, like shmbox-copy (compare with it).
      {"rtt-busy-64", "shmbox-priority", Kind::shmbox, 64, shmbox_send::post, poll, shmbox_box::priority},
      {"rtt-busy-64", "shmbox-stash", Kind::shmbox, 64, shmbox_send::post, poll, shmbox_box::stash},
      {"rtt-busy-64", "shmbox-buffer", Kind::shmbox, 64, shmbox_send::post, poll, shmbox_box::buffer},
      {"rtt-busy-64", "shmbox-resizable", Kind::shmbox, 64, shmbox_send::post, poll, shmbox_box::resizable},
      {"rtt-busy-64", "shmbox-quota", Kind::shmbox, 64, shmbox_send::post, poll, shmbox_box::quota},
      baseline("rtt-busy-1k", Kind::spin_ring, 1024),
      baseline("rtt-busy-1k", Kind::lockfree_spsc, 1024),
      {"rtt-busy-1k", "shmbox-copy", Kind::shmbox, 1024, shmbox_send::post, poll},
      {"rtt-busy-1k", "shmbox-zero-copy", Kind::shmbox, 1024, shmbox_send::loan, poll_in_place},
      {"rtt-sleep-64", "shmbox-adaptive", Kind::shmbox, 64, shmbox_send::post, adaptive},
      {"rtt-sleep-64", "shmbox-futex", Kind::shmbox, 64, shmbox_send::post, futex},
      baseline("rtt-sleep-64", Kind::boost_mq, 64),
      baseline("rtt-sleep-64", Kind::posix_mq, 64),
      baseline("rtt-sleep-64", Kind::pipe, 64),
      baseline("rtt-sleep-64", Kind::unix_socket, 64),
  };
  return v;
}

// ===========================================================================
// Command line
// ===========================================================================

struct Args : CommonArgs {
  std::vector<std::size_t> sizes;  // --sizes: the rtt-busy-<S> groups instead of the default ones
  std::uint64_t count = 20'000;  // measured round trips per run
  std::uint64_t warmup = 2'000;  // round trips before them, not recorded
  std::vector<std::string> only;  // mechanism (or group) names; empty: all
};

void usage(std::FILE* to) {
  std::fprintf(to,
               "usage: shmbox-bench-rtt [--count N] [--warmup W] [--reps R] [--quick] [--only M,...] [--timeout S]\n"
               "                        [--sizes S,...] [--verbose]\n"
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
               "  --sizes S,.. instead of the groups above, rtt-busy-<S> for each message size S (16..1048576):\n"
               "               spin-ring, shmbox-copy, shmbox-zero-copy; fewer round trips above 1 KiB\n"
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
  const bool ok = parse_options(kProg, argc, argv, usage, a, [&](ArgWalker& w) {
    const std::string_view arg = w.name();
    if (arg == "--count") return w.number(a.count, 1, 100'000'000);
    if (arg == "--warmup") return w.number(a.warmup, 0, 100'000'000);
    if (arg == "--sizes")
      return parse_list(w, a.sizes, [](std::string_view item, std::size_t& s) {
        return parse_number(item, s) && s >= kMinMsgSize && s <= kMaxCurveMsgSize;
      });
    if (arg == "--only")
      return parse_list(w, a.only, [](std::string_view item, std::string& out) {
        out = item;
        if (known_name(item)) return true;
        std::fprintf(stderr, "%s: unknown mechanism '%.*s'\n", kProg, int(item.size()), item.data());
        return false;
      });
    return false;
  });
  if (!ok) return std::nullopt;
  a.quick_default(a.count, "--count", 200);
  a.quick_default(a.warmup, "--warmup", 20);
  a.quick_default(a.reps, "--reps", 2);
  return a;
}

// The configurations of this run: all_configs(), or with --sizes the
// busy-polling groups rtt-busy-<S>.
const std::vector<Config>& configs_of(const Args& a) {
  if (a.sizes.empty()) return all_configs();
  using enum shmbox_recv;
  static std::vector<std::string> groups;  // the names the configurations point to
  static std::vector<Config> v;
  groups.reserve(a.sizes.size());
  for (std::size_t s : a.sizes) {
    groups.push_back("rtt-busy-" + std::to_string(s));
    const char* g = groups.back().c_str();
    if (spin_ring_size(s)) v.push_back(baseline(g, Kind::spin_ring, s));
    v.push_back({g, "shmbox-copy", Kind::shmbox, s, shmbox_send::post, poll});
    v.push_back({g, "shmbox-zero-copy", Kind::shmbox, s, shmbox_send::loan, poll_in_place});
  }
  return v;
}

// Slots per box: kCapacity up to 1 KiB, kBigCapacity above. One message is
// in flight, so the ring's size only decides how soon slots are reused: a
// 1024-slot ring of 16 KiB slots is 16 MiB, which the few round trips of a
// run would walk about once, mostly on slots this process touches for the
// first time (page faults), while a 1024-slot ring of 64-byte slots is
// reused 20 times. With 16 slots the warm-up walks the ring
// at least twice, and the curve shows the cost of moving the bytes.
constexpr std::uint32_t kBigCapacity = 16;
std::uint32_t capacity_for(std::size_t size) { return size > 1024 ? kBigCapacity : kCapacity; }

// Round trips (measured, warm-up) of a run with S-byte messages: fewer above 1 KiB.
std::pair<std::uint64_t, std::uint64_t> counts_for(const Args& a, std::size_t size) {
  if (size <= 1024) return {a.count, a.warmup};
  return {std::max<std::uint64_t>(std::min<std::uint64_t>(a.count, 200), a.count * 1024 / size),
          std::max<std::uint64_t>(std::min<std::uint64_t>(a.warmup, 2 * kBigCapacity), a.warmup * 1024 / size)};
}

bool selected(const Args& a, const Config& c) {
  if (a.only.empty()) return true;
  for (const auto& n : a.only)
    if (n == c.mech_name || n == c.group) return true;
  return false;
}

// One measured run (bench/mech/round_trip.hpp): fresh queues, the pinger
// and the echoer; the pinger's percentiles.
Record run_once(const Config& cfg, const Args& args, long mq_depth) {
  const auto [count, warmup] = counts_for(args, cfg.size);
  return run_round_trips({cfg.kind, cfg.size, cfg.send, cfg.recv, capacity_for(cfg.size), mq_depth, count, warmup,
                          std::string(kMarker) + std::to_string(::getpid()) + "-" + info_of(cfg.kind).tag,
                          args.timeout_s, cfg.box});
}

// ===========================================================================
// Availability, repetitions, output
// ===========================================================================

// The POSIX queue depth we may use: min(kPosixMqDepth, msg_max).
long posix_mq_depth() { return std::min<long>(kPosixMqDepth, posix_mq_msg_max()); }

// Why a configuration cannot be measured here ("" if it can).
std::string unavailable(const Config& c, long mq_depth) {
  if (info_of(c.kind).needs_boost && !kHaveBoost)
    return "built without Boost (Boost.Interprocess/Boost.Lockfree)";
  if (c.kind == Kind::posix_mq) {
    const std::string probe = "/" + std::string(kMarker) + std::to_string(::getpid()) + "-probe";
    TrackedName track(probe, TrackedName::mqueue);
    if (const int e = create_posix_mq(probe, mq_depth, c.size); e != 0)
      return "POSIX message queues unavailable: " + errno_text("mq_open", e);
  }
  return {};
}

int run(const Args& args) {
  install_signal_handlers();
  remove_stale(kProg, "/dev/shm", kMarker);
  remove_stale(kProg, "/dev/mqueue", kMarker);  // only there when the mqueue file system is mounted

  const std::vector<Config>& configs = configs_of(args);
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
  Results res;
  for (std::size_t i = 0; i < configs.size(); ++i)
    if (selected(args, configs[i]) && !skip[i].empty()) res.skip(configs[i].group, configs[i].mech_name, skip[i]);
  for (int rep = 0; any && rep < args.reps; ++rep) {
    const auto t0 = bench_clock::now();
    for (std::size_t i = 0; i < configs.size(); ++i) {
      const Config& c = configs[i];
      if (!selected(args, c) || !skip[i].empty()) continue;
      const Record r = run_once(c, args, mq_depth);
      std::string note = std::to_string(args.count) + " round trips x " + std::to_string(args.reps) + " reps";
      if (c.size > 1024 || capacity_for(c.size) != kCapacity)
        note = std::to_string(counts_for(args, c.size).first) + " round trips x " + std::to_string(args.reps) +
               " reps; boxes of " + std::to_string(capacity_for(c.size)) + " slots";
      for (std::size_t k = 0; k < 3; ++k) res.add(c.group, c.mech_name, kPercentileMetric[k], "us", r.us[k], note);
      if (args.verbose)
        std::fprintf(stderr, "  rep %d/%d  %-13s %-17s p50 %8s  p99 %8s  p99.9 %8s  min %8s  max %8s  mean %8s us\n",
                     rep + 1, args.reps, c.group, c.mech_name, fmt(r.us[0]).c_str(), fmt(r.us[1]).c_str(),
                     fmt(r.us[2]).c_str(), fmt(r.us[3]).c_str(), fmt(r.us[4]).c_str(), fmt(r.us[5]).c_str());
    }
    std::fprintf(stderr, "%s: rep %d/%d done (%.1f s)\n", kProg, rep + 1, args.reps,
                 std::chrono::duration<double>(bench_clock::now() - t0).count());
  }
  res.print();  // rows (stdout) and the table (stderr)
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return shmbench::bench_main(kProg, argc, argv, parse_args, run); }

