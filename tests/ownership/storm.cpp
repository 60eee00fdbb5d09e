// tests/ownership/storm.cpp - shmbox-storm: the kill storm.
//
// 4 producer processes and 3 owner-side processes (the owner and 2 heirs) run
// against one box while a killer sends SIGKILL to a random one of them every
// few tens of milliseconds, hundreds of times, restarting each victim. The
// phases cycle through the overflow policies (some with a lease). At the end
// of a phase every process is told to stop, the driver takes the box over and
// drains it, and checks, from a ledger the processes kept in shared memory:
//   - every message whose post returned "stored" was delivered (policies that
//     never evict), or is accounted for by the counters (drop_oldest, lifo);
//   - no message was delivered twice unless flagged as redelivered, and none
//     that was never posted or was refused was delivered;
//   - the counters add up (posted = delivered + refused + dropped + filtered +
//     abandoned + in the box) and every delivered message is counted once;
//   - no blocking call outlived its timeout (plus a slack for a loaded
//     machine), and every process finished once told to.
// One producer and one owner-side process run each in a pid namespace of
// its own (clone(CLONE_NEWPID), as in a container; needs root, else they
// run in ours and the driver says so): liveness and takeover must hold
// across namespaces too. --no-namespaces keeps them all in ours.
// Another producer and another owner-side process run as a second uid
// (65534, when the driver is root and that uid may run this program; the
// box is then 0666 and every role opens it with any_owner): liveness,
// repair and takeover must hold across uids too (THE TRUST RULE's second
// user, docs/guarantees.md). --no-other-uid keeps them all ours.
//
//   shmbox-storm [--seconds S] [--phase-seconds S] [--seed N] [--slack-ms MS] [--no-namespaces] [--no-other-uid]
//   (the other roles, "producer" and "owner", are started by the driver)
//
// Exit 0 when every check held, 1 otherwise (the reasons on stderr).
#include <fcntl.h>
#include <grp.h>
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "shmbox/shmbox.hpp"

namespace {

using namespace std::chrono_literals;
using shmbox::policy;

constexpr std::uint32_t kMaxInc = 2048;       // producer incarnations per phase
constexpr std::uint32_t kMaxSeq = 1u << 16;   // messages per incarnation
constexpr std::size_t kPayload = 56;
constexpr auto kBlockTimeout = 200ms;
constexpr auto kRecvTimeout = 100ms;
constexpr std::uint32_t kReadBatch = 32;      // messages an owner reads (and records) before it commits
constexpr auto kAwaitTimeout = 300ms;

// Per message: what its producer learnt, and how often it was delivered.
enum : std::uint8_t { kUnknown = 0, kStored = 1, kRefused = 2 };

struct ledger {
  std::atomic<std::uint32_t> next_inc;
  std::atomic<std::uint32_t> stop;
  std::atomic<std::uint32_t> errors;
  std::atomic<std::uint32_t> late_waits;
  std::atomic<std::uint64_t> worst_overrun_ns;
  std::atomic<std::uint32_t> takeovers;
  char first_error[256];
  std::atomic<std::uint32_t> attempted[kMaxInc];  // seq + 1 of the post in progress or last made
  std::atomic<std::uint8_t> status[kMaxInc * kMaxSeq];
  std::atomic<std::uint8_t> plain[kMaxInc * kMaxSeq];    // delivered, not flagged
  std::atomic<std::uint8_t> flagged[kMaxInc * kMaxSeq];  // delivered again, flagged redelivered
};

ledger* L = nullptr;
std::uint64_t g_slack_ns = 2'000'000'000;

std::uint64_t now_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<std::uint64_t>(ts.tv_nsec);
}

void error(const std::string& what) {
  if (L->errors.fetch_add(1) == 0) std::snprintf(L->first_error, sizeof L->first_error, "%s", what.c_str());
  std::fprintf(stderr, "shmbox-storm[%d]: %s\n", static_cast<int>(::getpid()), what.c_str());
}

// A blocking call that took `took` ns against its `timeout`.
void check_wait(std::uint64_t took, std::chrono::nanoseconds timeout) {
  const auto limit = static_cast<std::uint64_t>(timeout.count());
  if (took <= limit + g_slack_ns) return;
  L->late_waits.fetch_add(1);
  std::uint64_t worst = L->worst_overrun_ns.load();
  while (took - limit > worst && !L->worst_overrun_ns.compare_exchange_weak(worst, took - limit)) {
  }
}

char pattern(std::uint32_t inc, std::uint32_t seq, std::size_t i) { return static_cast<char>((inc * 131 + seq * 7 + i) & 0xFF); }

void encode(char* buf, std::uint32_t inc, std::uint32_t seq) {
  std::memcpy(buf, &inc, 4);
  std::memcpy(buf + 4, &seq, 4);
  for (std::size_t i = 8; i < kPayload; ++i) buf[i] = pattern(inc, seq, i);
}

// The ledger index of a received message, or SIZE_MAX (and an error) when it
// is not one of ours or is torn.
std::size_t decode(std::string_view m) {
  std::uint32_t inc = 0, seq = 0;
  if (m.size() != kPayload) {
    error("message of " + std::to_string(m.size()) + " bytes, expected " + std::to_string(kPayload));
    return SIZE_MAX;
  }
  std::memcpy(&inc, m.data(), 4);
  std::memcpy(&seq, m.data() + 4, 4);
  if (inc >= kMaxInc || seq >= kMaxSeq) {
    error("message names incarnation " + std::to_string(inc) + " seq " + std::to_string(seq) + ": out of range");
    return SIZE_MAX;
  }
  for (std::size_t i = 8; i < kPayload; ++i)
    if (m[i] != pattern(inc, seq, i)) {
      error("torn payload in message " + std::to_string(inc) + "/" + std::to_string(seq));
      return SIZE_MAX;
    }
  return std::size_t{inc} * kMaxSeq + seq;
}

void record(const shmbox::batch& b) {
  for (std::size_t i = 0; i < b.size(); ++i) {
    const std::size_t idx = decode(b[i]);
    if (idx == SIZE_MAX) continue;
    (b.redelivered(i) ? L->flagged : L->plain)[idx].fetch_add(1);
  }
}

// ---------------------------------------------------------------------------
// Roles
// ---------------------------------------------------------------------------

// The box, whoever created it (a role of the second uid opens root's 0666 box).
shmbox::result<shmbox::Box> open_box(const std::string& box) { return shmbox::Box::open(box, {.any_owner = true}); }

int producer_main(const std::string& box) {
  const std::uint32_t inc = L->next_inc.fetch_add(1);
  if (inc >= kMaxInc) return 0;  // this phase's ledger is used up
  auto b = open_box(box);
  if (!b) {
    error("producer open: " + shmbox::explain(b.error()));
    return 1;
  }
  auto p = shmbox::Producer::attach(*b);
  if (!p) {
    error("producer attach: " + shmbox::explain(p.error()));
    return 1;
  }
  char buf[kPayload];
  for (std::uint32_t seq = 0; seq < kMaxSeq && L->stop.load() == 0; ++seq) {
    encode(buf, inc, seq);
    L->attempted[inc].store(seq + 1);
    for (;;) {
      const std::uint64_t t0 = now_ns();
      const shmbox::post_status st = p->post(buf, kPayload);
      check_wait(now_ns() - t0, kBlockTimeout);
      const std::size_t idx = std::size_t{inc} * kMaxSeq + seq;
      if (st == shmbox::post_status::stored || st == shmbox::post_status::stored_evicted) {
        L->status[idx].store(kStored);
        break;
      }
      if (st == shmbox::post_status::dropped) {
        L->status[idx].store(kRefused);
        break;
      }
      if (st == shmbox::post_status::full || st == shmbox::post_status::timeout) {
        if (L->stop.load() != 0) {
          L->status[idx].store(kRefused);
          return 0;
        }
        ::sched_yield();
        continue;  // the same message again
      }
      error(std::string("post: ") + std::string(shmbox::to_string(st)) + ": " + shmbox::explain(p->last_error()));
      return 1;
    }
  }
  return 0;
}

// Receives two-phase: the ledger is written before the commit, so a message
// is recorded at least once before it counts as delivered.
int serve_as_owner(shmbox::Owner& o) {
  if (o.epoch() > 1) L->takeovers.fetch_add(1);
  shmbox::batch b;
  while (L->stop.load() == 0) {
    b.clear();
    const std::uint64_t t0 = now_ns();
    const shmbox::recv_status st = o.read(b, {.max = kReadBatch, .timeout = kRecvTimeout});
    check_wait(now_ns() - t0, kRecvTimeout);
    if (st == shmbox::recv_status::timeout || st == shmbox::recv_status::empty) continue;
    if (st == shmbox::recv_status::not_owner) return 0;  // deposed (lease): the driver starts a new one
    if (st != shmbox::recv_status::ok) {
      error("read: " + shmbox::explain(o.last_error()));
      return 1;
    }
    record(b);
    const shmbox::recv_status c = o.commit();
    if (c == shmbox::recv_status::not_owner) return 0;
    if (c != shmbox::recv_status::ok) {
      error("commit: " + shmbox::explain(o.last_error()));
      return 1;
    }
  }
  return 0;
}

int owner_main(const std::string& box) {
  auto b = open_box(box);
  if (!b) {
    error("owner open: " + shmbox::explain(b.error()));
    return 1;
  }
  auto o = shmbox::Owner::acquire(*b);
  if (o) return serve_as_owner(*o);
  if (o.error() != shmbox::errc::not_owner) {
    error("acquire: " + shmbox::explain(o.error()));
    return 1;
  }
  auto heir = shmbox::Heir::enlist(*b, "storm");
  if (!heir) {
    error("enlist: " + shmbox::explain(heir.error()));
    return 1;
  }
  while (L->stop.load() == 0) {
    const std::uint64_t t0 = now_ns();
    auto got = heir->await_transfer(kAwaitTimeout);
    check_wait(now_ns() - t0, kAwaitTimeout);
    if (got) return serve_as_owner(*got);
    if (got.error() != shmbox::errc::timed_out) {
      error("await_transfer: " + shmbox::explain(got.error()));
      return 1;
    }
  }
  return 0;
}

// ---------------------------------------------------------------------------
// Driver
// ---------------------------------------------------------------------------

struct proc {
  pid_t pid = -1;
  bool producer = false;
  bool other_ns = false;   // runs in a pid namespace of its own
  bool other_uid = false;  // runs as kOtherUid
};

std::string g_self;
bool g_namespaces = true;  // false: --no-namespaces, or clone(CLONE_NEWPID) is not allowed here
bool g_other_uid = true;   // false: --no-other-uid, not root, or kOtherUid may not run g_self
constexpr uid_t kOtherUid = 65534;

// In a child: become kOtherUid (group too, no supplementary groups).
bool become_other_uid() {
  return ::setgroups(0, nullptr) == 0 && ::setresgid(kOtherUid, kOtherUid, kOtherUid) == 0 &&
         ::setresuid(kOtherUid, kOtherUid, kOtherUid) == 0;
}

// Whether the second uid can be used here: root, and kOtherUid may execute g_self.
bool other_uid_possible(std::string& why) {
  if (::geteuid() != 0) {
    why = "not root";
    return false;
  }
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(become_other_uid() && ::access(g_self.c_str(), X_OK) == 0 ? 0 : 1);
  int st = 0;
  if (pid < 0 || ::waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    why = "uid " + std::to_string(kOtherUid) + " may not run " + g_self;
    return false;
  }
  return true;
}

pid_t spawn(int ledger_fd, const std::string& role, const std::string& box, bool other_ns = false, bool other_uid = false) {
  pid_t pid = -1;
  if (other_ns && g_namespaces) {
    // A fork into a new pid namespace, where the child is pid 1.
    pid = static_cast<pid_t>(::syscall(SYS_clone, CLONE_NEWPID | SIGCHLD, nullptr, nullptr, nullptr, nullptr));
    if (pid < 0) {
      std::fprintf(stderr, "shmbox-storm: no pid namespaces here (%s): every role runs in ours\n", std::strerror(errno));
      g_namespaces = false;
    }
  }
  if (pid < 0) pid = ::fork();
  if (pid == 0) {
    if (other_uid && g_other_uid && !become_other_uid()) ::_exit(126);
    const std::string fd = std::to_string(ledger_fd), slack = std::to_string(g_slack_ns / 1'000'000);
    ::execl(g_self.c_str(), g_self.c_str(), role.c_str(), fd.c_str(), box.c_str(), slack.c_str(), nullptr);
    std::fprintf(stderr, "exec %s: %s\n", g_self.c_str(), std::strerror(errno));
    ::_exit(127);
  }
  return pid;
}

// Waits for `pid` until `deadline_ns`; false (and kills it) if it outlives it.
bool reap_by(pid_t pid, std::uint64_t deadline_ns, int* status) {
  for (;;) {
    const pid_t r = ::waitpid(pid, status, WNOHANG);
    if (r == pid) return true;
    if (now_ns() > deadline_ns) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, status, 0);
      return false;
    }
    ::usleep(1000);
  }
}

struct phase_spec {
  policy pol;
  std::chrono::milliseconds lease;
};

struct totals {
  std::uint64_t kills = 0, kills_producer = 0, kills_owner_side = 0, takeovers = 0, messages = 0, redelivered = 0,
                abandoned = 0;
  int failures = 0;
};

void fail(totals& t, const std::string& phase, const std::string& what) {
  ++t.failures;
  std::fprintf(stderr, "shmbox-storm: FAIL [%s]: %s\n", phase.c_str(), what.c_str());
}

void run_phase(const phase_spec& spec, std::chrono::milliseconds length, std::mt19937_64& rng, totals& t) {
  const std::string phase = std::string(shmbox::to_string(spec.pol)) + (spec.lease.count() ? " lease" : "");
  // The tests' prefix (tests/support/support.hpp test_prefix): "t-", "t-<run>-" under scripts/test.sh.
  const char* run = std::getenv("SHMBOX_TEST_RUN");
  const std::string prefix = run != nullptr && *run != '\0' ? "t-" + std::string(run) + "-" : "t-";
  const std::string box = prefix + "storm-" + std::to_string(::getpid()) + "-" + std::string(shmbox::to_string(spec.pol));
  (void)shmbox::Box::remove(box);
  const int fd = ::memfd_create("shmbox-storm-ledger", 0);  // no CLOEXEC: the children inherit it
  if (fd < 0 || ::ftruncate(fd, sizeof(ledger)) != 0) {
    fail(t, phase, "memfd for the ledger: " + std::string(std::strerror(errno)));
    return;
  }
  L = static_cast<ledger*>(::mmap(nullptr, sizeof(ledger), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  if (L == MAP_FAILED) {
    fail(t, phase, "mmap of the ledger");
    ::close(fd);
    return;
  }
  auto created = shmbox::Box::create(box, {.capacity = 64, .slot_size = kPayload, .overflow = spec.pol,
                                           .mode = g_other_uid ? 0666u : 0600u, .block_timeout = kBlockTimeout,
                                           .lease = spec.lease});
  if (!created) {
    fail(t, phase, "create: " + shmbox::explain(created.error()));
    ::munmap(L, sizeof(ledger));
    ::close(fd);
    return;
  }
  std::vector<proc> procs;
  // Owner-side 1 and producer 0 in pid namespaces of their own; owner-side 2 and producer 1 as the second uid.
  for (int i = 0; i < 3; ++i) procs.push_back({spawn(fd, "owner", box, i == 1, i == 2), false, i == 1, i == 2});
  for (int i = 0; i < 4; ++i) procs.push_back({spawn(fd, "producer", box, i == 0, i == 1), true, i == 0, i == 1});

  std::uint64_t kills = 0, kp = 0, ko = 0;
  const std::uint64_t end = now_ns() + static_cast<std::uint64_t>(length.count()) * 1'000'000;
  std::uniform_int_distribution<int> pause_us(5'000, 60'000);
  std::uniform_int_distribution<std::size_t> pick(0, procs.size() - 1);
  while (now_ns() < end) {
    ::usleep(static_cast<useconds_t>(pause_us(rng)));  // the killer's random moment (not a handshake)
    proc& victim = procs[pick(rng)];
    ::kill(victim.pid, SIGKILL);
    int st = 0;
    if (!reap_by(victim.pid, now_ns() + 10'000'000'000, &st)) fail(t, phase, "a killed process did not die");
    if (WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL) {
      ++kills;
      ++(victim.producer ? kp : ko);
    } else if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      fail(t, phase, "a " + std::string(victim.producer ? "producer" : "owner") + " exited with status " + std::to_string(st));
    }
    victim.pid = spawn(fd, victim.producer ? "producer" : "owner", box, victim.other_ns, victim.other_uid);
    // Processes that finished on their own (a deposed owner, a producer at
    // the end of its sequence) are restarted too.
    for (proc& p : procs) {
      if (::waitpid(p.pid, &st, WNOHANG) != p.pid) continue;
      if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) fail(t, phase, "a process exited with status " + std::to_string(st));
      p.pid = spawn(fd, p.producer ? "producer" : "owner", box, p.other_ns, p.other_uid);
    }
  }
  // Stop: every process finishes within its timeouts.
  L->stop.store(1);
  const std::uint64_t deadline = now_ns() + 10'000'000'000 + 3 * g_slack_ns;
  for (proc& p : procs) {
    int st = 0;
    if (!reap_by(p.pid, deadline, &st)) fail(t, phase, "a process did not finish after stop (a wait outlived its timeout)");
    else if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) fail(t, phase, "a process exited with status " + std::to_string(st));
  }
  // Take the box over and drain it, recording like the owners did.
  {
    auto o = shmbox::Owner::acquire(*created);
    if (!o) {
      fail(t, phase, "final acquire: " + shmbox::explain(o.error()));
    } else {
      shmbox::batch b;
      for (;;) {
        b.clear();
        const auto st = o->read(b, {.max = 256, .timeout = 200ms});
        if (st != shmbox::recv_status::ok) break;
        record(b);
        if (o->commit() != shmbox::recv_status::ok) fail(t, phase, "final commit");
      }
    }
  }
  // The checks.
  const bool evicts = spec.pol == policy::drop_oldest || spec.pol == policy::lifo;
  const std::uint32_t incs = std::min(L->next_inc.load(), kMaxInc);
  std::uint64_t flagged_total = 0, distinct = 0, lost = 0, dup = 0, ghost = 0, refused_delivered = 0, unrecorded = 0;
  for (std::uint32_t inc = 0; inc < incs; ++inc) {
    const std::uint32_t attempted = L->attempted[inc].load();
    for (std::uint32_t seq = 0; seq < kMaxSeq; ++seq) {
      const std::size_t i = std::size_t{inc} * kMaxSeq + seq;
      const std::uint8_t plain = L->plain[i].load(), flagged = L->flagged[i].load(), status = L->status[i].load();
      const bool delivered = plain + flagged > 0;
      distinct += delivered ? 1 : 0;
      flagged_total += flagged;
      if (plain > 1) ++dup;                                        // twice without the flag
      if (seq >= attempted) {
        if (delivered) ++ghost;                                    // never posted
        continue;
      }
      if (status == kUnknown && seq + 1 < attempted) ++unrecorded;  // a finished post must be recorded
      if (status == kRefused && delivered) ++refused_delivered;
      if (status == kStored && !delivered && !evicts) ++lost;
    }
  }
  const shmbox::counters c = created->read_counters();
  const shmbox::box_info info = shmbox::info(*created);
  if (L->errors.load() != 0) fail(t, phase, std::to_string(L->errors.load()) + " errors in the processes, first: " + L->first_error);
  if (lost) fail(t, phase, std::to_string(lost) + " stored messages were never delivered");
  if (dup) fail(t, phase, std::to_string(dup) + " messages were delivered twice without the redelivered flag");
  if (ghost) fail(t, phase, std::to_string(ghost) + " messages were delivered that were never posted");
  if (refused_delivered) fail(t, phase, std::to_string(refused_delivered) + " refused messages were delivered");
  if (unrecorded) fail(t, phase, std::to_string(unrecorded) + " finished posts have no recorded outcome");
  // Every message counted delivered was recorded (before its commit). The
  // converse holds unless the policy evicts: a message an owner read and
  // recorded, then was killed before committing, is the oldest in the box;
  // a drop_oldest producer that needs its slot may evict it (R3 in
  // lib/ring/ring.hpp, counted dropped_oldest) before the next owner delivers it
  // again. Seen by an app, counted as dropped: at most one read batch per
  // owner-side process killed.
  const std::uint64_t read_then_evicted = distinct - std::min(distinct, c.delivered);
  if (distinct < c.delivered || (evicts ? read_then_evicted > ko * kReadBatch : read_then_evicted != 0))
    fail(t, phase, "the ledger holds " + std::to_string(distinct) + " delivered messages, the counters " +
                       std::to_string(c.delivered) +
                       (evicts ? " (at most " + std::to_string(ko * kReadBatch) + " more allowed: read by killed owners, then evicted)"
                               : std::string()));
  if (read_then_evicted != 0)
    std::printf("# %s: %" PRIu64 " messages read by an owner that was then killed were evicted before redelivery\n",
                phase.c_str(), read_then_evicted);
  if (info.depth != 0) fail(t, phase, std::to_string(info.depth) + " messages left in the box after the drain");
  const std::uint64_t out = c.delivered + c.rejected + c.too_large + c.timeouts + c.dropped_newest + c.dropped_oldest +
                            c.filtered + c.abandoned + c.aborted + info.depth;
  if (c.posted != out)
    fail(t, phase, "posted " + std::to_string(c.posted) + " != delivered + refused + dropped + abandoned + depth = " + std::to_string(out));
  if (L->late_waits.load() != 0)
    fail(t, phase, std::to_string(L->late_waits.load()) + " blocking calls outlived their timeout by more than the slack (worst by " +
                       std::to_string(L->worst_overrun_ns.load() / 1'000'000) + " ms)");
  if (kills == 0) fail(t, phase, "no process was killed");
  if (flagged_total != c.redelivered)
    fail(t, phase, "the ledger holds " + std::to_string(flagged_total) + " flagged deliveries, the counters " + std::to_string(c.redelivered));
  std::printf("%-18s kills %5" PRIu64 " (producers %4" PRIu64 ", owners/heirs %4" PRIu64 ")  takeovers %4u  posted %9" PRIu64
              "  delivered %9" PRIu64 "  redelivered %5" PRIu64 "  abandoned %4" PRIu64 "  dropped %7" PRIu64 "\n",
              phase.c_str(), kills, kp, ko, L->takeovers.load(), c.posted, c.delivered, c.redelivered, c.abandoned,
              c.dropped_newest + c.dropped_oldest);
  std::fflush(stdout);
  t.kills += kills;
  t.kills_producer += kp;
  t.kills_owner_side += ko;
  t.takeovers += L->takeovers.load();
  t.messages += c.delivered;
  t.redelivered += c.redelivered;
  t.abandoned += c.abandoned;
  (void)shmbox::Box::remove(box);
  ::munmap(L, sizeof(ledger));
  L = nullptr;
  ::close(fd);
}

long arg_value(int argc, char** argv, const char* flag, long fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], flag) == 0) return std::strtol(argv[i + 1], nullptr, 10);
  return fallback;
}

}  // namespace

int main(int argc, char** argv) {
  g_self = "/proc/self/exe";
  if (argc == 5 && (std::strcmp(argv[1], "producer") == 0 || std::strcmp(argv[1], "owner") == 0)) {
    const int fd = std::atoi(argv[2]);
    g_slack_ns = static_cast<std::uint64_t>(std::atol(argv[4])) * 1'000'000;
    L = static_cast<ledger*>(::mmap(nullptr, sizeof(ledger), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
    if (L == MAP_FAILED) return 1;
    return std::strcmp(argv[1], "producer") == 0 ? producer_main(argv[3]) : owner_main(argv[3]);
  }
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--help") == 0) {
      std::printf("usage: shmbox-storm [--seconds S] [--phase-seconds S] [--seed N] [--slack-ms MS] [--no-namespaces] [--no-other-uid]\n");
      return 0;
    }
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--no-namespaces") == 0) g_namespaces = false;
    if (std::strcmp(argv[i], "--no-other-uid") == 0) g_other_uid = false;
  }
  char exe[4096];
  const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return 1;
  g_self.assign(exe, static_cast<std::size_t>(n));
  const long seconds = arg_value(argc, argv, "--seconds", 40);
  const long phase_seconds = arg_value(argc, argv, "--phase-seconds", 8);
  const auto seed = static_cast<std::uint64_t>(arg_value(argc, argv, "--seed", static_cast<long>(::getpid())));
  g_slack_ns = static_cast<std::uint64_t>(arg_value(argc, argv, "--slack-ms", 2000)) * 1'000'000;
  std::mt19937_64 rng(seed);
  const phase_spec phases[] = {{policy::block, 0ms},       {policy::reject, 0ms},         {policy::drop_newest, 1000ms},
                               {policy::drop_oldest, 0ms}, {policy::lifo, 1000ms},         {policy::block, 1000ms},
                               {policy::reject, 1000ms},   {policy::drop_oldest, 1000ms}, {policy::lifo, 0ms},
                               {policy::drop_newest, 0ms}};
  std::string no_other_uid = "--no-other-uid";
  if (g_other_uid && !other_uid_possible(no_other_uid))
    std::fprintf(stderr, "shmbox-storm: no second uid here (%s): every role runs as this user\n", no_other_uid.c_str());
  g_other_uid = g_other_uid && no_other_uid == "--no-other-uid";
  std::printf("# kill storm: seed %" PRIu64 ", %ld s in phases of %ld s; 4 producers, an owner and 2 heirs per phase%s%s\n",
              seed, seconds, phase_seconds,
              g_namespaces ? "; one producer and one owner-side process each in a pid namespace of its own" : "",
              g_other_uid ? "; one producer and one owner-side process as uid 65534 (a 0666 box)" : "");
  totals t;
  const std::uint64_t start = now_ns();
  for (std::size_t i = 0; now_ns() - start < static_cast<std::uint64_t>(seconds) * 1'000'000'000; ++i) {
    const std::uint64_t left_ms = (static_cast<std::uint64_t>(seconds) * 1'000'000'000 - (now_ns() - start)) / 1'000'000;
    const auto len = std::chrono::milliseconds(std::min<std::uint64_t>(left_ms, static_cast<std::uint64_t>(phase_seconds) * 1000));
    if (len < 500ms) break;
    run_phase(phases[i % std::size(phases)], len, rng, t);
  }
  std::printf("# total: %" PRIu64 " kills (%" PRIu64 " producers, %" PRIu64 " owners/heirs), %" PRIu64
              " takeovers, %" PRIu64 " messages delivered, %" PRIu64 " redelivered (flagged), %" PRIu64
              " abandoned slots; %s\n",
              t.kills, t.kills_producer, t.kills_owner_side, t.takeovers, t.messages, t.redelivered, t.abandoned,
              t.failures == 0 ? "every check held" : "FAILED");
  return t.failures == 0 ? 0 : 1;
}
