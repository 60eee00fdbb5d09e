// lib/pool/pool_supervisor.hpp - the supervisor's class and timing, shared by its
// start side (pool_supervisor.cpp, which has the protocol: SR, SP, E) and its stop
// side (pool_stop.cpp). Internal to lib/pool.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>

#include "base/errors.hpp"
#include "base/process.hpp"
#include "pool/pool_layout.hpp"
#include "pool/pool_table.hpp"
#include "segment/segment.hpp"
#include "shmbox/box.hpp"
#include "shmbox/pool.hpp"
#include "shmbox/producer.hpp"

namespace shmbox::detail {

#pragma GCC visibility push(hidden)

constexpr std::uint64_t kMs = 1'000'000;
constexpr std::uint64_t kStandbyTickNs = 10 * kMs;  // SR1
constexpr std::uint64_t kBusyTickNs = 2 * kMs;      // members starting, stopping or being checked
constexpr std::uint64_t kInUseTickNs = 5 * kMs;     // members in use: a holder's death is seen within this
constexpr std::uint64_t kIdleTickNs = 50 * kMs;     // also how soon a stop request is seen
constexpr std::uint64_t kTxnWaitNs = 1000 * kMs;
constexpr std::uint64_t kWorkerCheckNs = 20 * kMs;  // how often workers of started members are looked at
// After a start fails (no box, no /bin/sh, no owner within start_timeout) or
// a worker dies within kQuickDeathNs of its start, no new start begins for
// this long: a command that cannot run is retried once a second, not in a loop.
constexpr std::uint64_t kStartBackoffNs = 1000 * kMs;
constexpr std::uint64_t kQuickDeathNs = 2000 * kMs;
constexpr std::uint32_t kPlantedSkip = 64;  // S2a: member box names looked at per tick past planted files

class supervisor {
 public:
  // `removal`: 0 for a supervisor (Pool::supervise); 1 (graceful) or 2
  // (immediate) for a remover that supervises only to stop (RM2).
  supervisor(pool_handle& h, const supervise_options& o, std::uint64_t removal = 0) : h_(h), o_(o), removal_(removal) {}
  supervisor(const supervisor&) = delete;
  supervisor& operator=(const supervisor&) = delete;
  ~supervisor();  // closes the pidfds of the children still running (they keep running)
  result<void> run(std::uint64_t deadline);

 private:
  struct member_rt {  // what this process keeps per member entry (rebuilt after a takeover)
    std::uint64_t generation = 0;
    std::optional<Box> box;  // read-only mapping: who owns it
    std::optional<Producer> pinger;
    bool unsignalable_logged = false;
    pid_t init_pid = 0;      // S6a: its init command, running (our child, in its own group)
    bool init_done = false;  // S6a: it exited 0
    bool foreign_logged = false;  // S2a: a third user's box at its name was reported
  };
  enum class init_step { done, running, failed };
  struct child_rt {  // SP1: a worker this process spawned and has not reaped
    std::string box;  // the member box it was spawned for
    int pidfd = -1;   // a pidfd for it (pidfd_open right after the spawn), or -1 (no pidfds here)
  };

  void log(const std::string& line) const {
    if (o_.log) o_.log(line);
  }
  void count(pool_counter c) {
    table_txn t(h_, mono_ns() + kTxnWaitNs);
    if (!t.locked()) return;
    t.add(c);
    t.commit("count");
  }
  std::string member_name(std::uint32_t m, std::uint64_t gen) const { return member_box_name(h_.name, m, gen); }
  bool am_supervisor() const noexcept;
  bool first_in_line() const noexcept;
  void take_over();
  bool segment_gone() const noexcept;
  std::uint64_t tick();  // returns how long to sleep
  // Runs `f(t, entry)` under the lock if member m still has `word` and `gen`.
  template <class F>
  bool with_member(std::uint32_t m, std::uint64_t word, std::uint64_t gen, const char* op, F f);
  member_rt& rt(std::uint32_t m, std::uint64_t gen);
  // S2a: what sits at member box `name` was planted: it is not a regular file
  // of this user or the pool's owner. `what` says what it is. false: nothing
  // there, or a predecessor's box (S2).
  bool planted(const std::string& name, std::string& what) const;
  bool ours(std::uint32_t uid) const noexcept { return uid == ::geteuid() || uid == h_.uid; }  // a member box's owner (S2a)
  std::optional<owner_view> box_owner(std::uint32_t m, std::uint64_t gen);
  void handle_starting(std::uint32_t m, std::uint64_t word, std::uint64_t gen, std::uint64_t now);
  void handle_stopping(std::uint32_t m, std::uint64_t word, std::uint64_t gen, std::uint64_t now);
  bool handle_checking(std::uint32_t m, std::uint64_t word, std::uint64_t gen, std::uint64_t now);  // true: stopped it (unhealthy)
  bool signal_worker(std::uint32_t m, std::uint64_t gen, int sig);
  bool signal_proven(std::uint32_t m, std::uint64_t gen, pid_t pid, int sig, const char* named_by);
  bool signal_child(pid_t pid, const child_rt& c, int sig) noexcept;  // SP1, for a child found in children_ just now
  // S6a: member m's worker, proven (SP1, SP2): the entry's pid, else its
  // box's owner's, when one of them is; 0 when neither is.
  pid_t proven_worker(std::uint32_t m, std::uint64_t gen);
  void stop_own_workers();  // E
  bool drain(std::uint32_t m, std::uint64_t gen, member_stop why);
  // /bin/sh -c `command` in its own process group with member m's
  // environment (and, for an init command, SHMBOX_WORKER_PID when
  // proven_worker() finds one); a worker is recorded in children_ (SP1), an
  // init command in hooks_.
  pid_t spawn(std::uint32_t m, std::uint64_t gen, const std::string& command, bool init, std::string& error);
  init_step run_init(std::uint32_t m, std::uint64_t gen, std::uint64_t now, std::uint64_t started);
  void kill_hooks() noexcept;  // every init command still running: its group SIGKILLed, reaped
  void reap() noexcept;
  bool finish_removal();

  pool_handle& h_;
  const supervise_options& o_;
  const std::uint64_t removal_;  // RM2: how this process was asked to remove the pool (0: it supervises)
  const std::string pool_id_ = "SHMBOX_POOL_ID=" + pool_incarnation(h_.hdr);  // SP2
  std::map<std::uint32_t, member_rt> rt_;
  std::set<std::tuple<std::uint32_t, std::uint64_t, pid_t>> refused_;  // (member, generation, pid) reported unproven (SP)
  std::map<pid_t, child_rt> children_;  // SP1: our unreaped children (reap() erases them, and nothing else)
  std::map<pid_t, std::pair<std::uint32_t, std::uint64_t>> hooks_;  // S6a: init commands running, by (member, generation)
  std::optional<Producer> dead_letters_;
  bool standby_logged_ = false;
  bool done_ = false;
  std::uint64_t last_worker_check_ns_ = 0;
  std::uint64_t backoff_until_ns_ = 0;  // kStartBackoffNs
  void start_failed(std::uint64_t now) {
    if (now >= backoff_until_ns_) log("starts are failing: the next one in " + std::to_string(kStartBackoffNs / kMs) + " ms");
    backoff_until_ns_ = now + kStartBackoffNs;
  }
};

template <class F>
bool supervisor::with_member(std::uint32_t m, std::uint64_t word, std::uint64_t gen, const char* op, F f) {
  table_txn t(h_, mono_ns() + kTxnWaitNs);
  if (!t.locked()) return false;
  pool_member* e = h_.member_at(m);
  if (t.read(e->state) != word || t.read(e->generation) != gen) return false;
  f(t, e);
  t.commit(op);
  return true;
}

#pragma GCC visibility pop

}  // namespace shmbox::detail
