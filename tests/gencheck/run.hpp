// tests/gencheck/run.hpp - one run of the generative checker (driver.hpp):
// the driver's state and its steps. driver.cpp has the processes, the
// observation of the box and the checks after every step; steps.cpp the
// steps themselves and the final drain.
#pragma once

#ifndef DOCTEST_CONFIG_DISABLE
#define DOCTEST_CONFIG_DISABLE  // support.hpp's child processes and guards, without doctest's runner
#endif

#include <time.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "driver.hpp"
#include "model.hpp"
#include "protocol.hpp"
#include "shmbox/shmbox.hpp"
#include "support.hpp"

namespace gencheck {

using namespace std::chrono_literals;


using shmbox::recv_status;

struct failure {
  std::string what;
};

[[noreturn]] inline void fail(const std::string& what) { throw failure{what}; }

inline std::uint64_t now_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<std::uint64_t>(ts.tv_nsec);
}

// A wait of `ns` nanoseconds: spun when short (a kill lands inside a call of microseconds).
inline void pause_ns(std::uint64_t ns) {
  const std::uint64_t until = now_ns() + ns;
  if (ns > 2'000'000) {
    std::this_thread::sleep_for(std::chrono::nanoseconds(ns));
    return;
  }
  while (now_ns() < until) {
  }
}

inline std::optional<post_status> parse_post_status(const std::string& s) {
  for (int i = 0; i <= 7; ++i)
    if (shmbox::to_string(static_cast<post_status>(i)) == s) return static_cast<post_status>(i);
  return std::nullopt;
}

inline std::optional<recv_status> parse_recv_status(const std::string& s) {
  for (int i = 0; i <= 4; ++i)
    if (shmbox::to_string(static_cast<recv_status>(i)) == s) return static_cast<recv_status>(i);
  return std::nullopt;
}

// The crash points each role may be armed with (lib/base/fault.hpp).
inline constexpr const char* kProducerPoints[] = {"producer.after_announce", "producer.after_claim", "producer.mid_payload",
                                       "producer.before_publish", "producer.mid_evict",  "producer.lifo_mid_write",
                                       "producer.before_wake",    "producer.after_ring"};
inline constexpr const char* kOwnerPoints[] = {"owner.before_read", "owner.after_take",     "owner.mid_commit",      "owner.after_commit",
                                    "owner.mid_sort",    "takeover.after_cas",   "takeover.after_record", "takeover.mid_recovery"};

// What the box shows (read without disturbing it: info and peek).
struct observation {
  std::vector<tally> count;
  std::vector<std::uint64_t> depth;
  std::vector<std::vector<msg_id>> peek;
  bool owner_alive = false;
  std::uint64_t epoch = 0;
  std::string describe() const {
    std::ostringstream o;
    o << "owner " << (owner_alive ? "alive" : "none") << ", epoch " << epoch;
    for (std::size_t l = 0; l < count.size(); ++l) {
      o << "\n    lane " << l << ": depth " << depth[l] << ", peek";
      for (const msg_id& m : peek[l]) o << " " << to_string(m);
      o << "\n      counters: " << count[l].str();
    }
    return o.str();
  }
};

class run {
 public:
  run(const config& cfg, const run_options& opt) : cfg_(cfg), opt_(opt), rng_(cfg.seed) {}

  run_result go();

 private:
  struct proc {
    std::unique_ptr<shmtest::child> c;
    std::uint32_t prod = 0;  // producers: the driver's number
    std::uint32_t entry = 0;  // producers: the table entry
    std::uint32_t next_seq = 0;
    std::string fault;  // SHMBOX_FAULT it runs with ("" none)
  };

  // ------------------------------------------------------------------
  // Set-up and shut-down
  // ------------------------------------------------------------------

  void setup();
  void check_box_start();
  void shutdown();

  // ------------------------------------------------------------------
  // Processes
  // ------------------------------------------------------------------

  std::unique_ptr<shmtest::child> start(const std::vector<std::string>& args, const std::string& fault);
  // The answer to `cmd`; nullopt when the process died without giving it. A
  // process alive and silent past `limit` is a hang: a failure.
  std::optional<std::string> ask(proc& p, const std::string& cmd, std::chrono::milliseconds limit);
  std::optional<std::string> answer(proc& p, const std::string& cmd, std::chrono::milliseconds limit);
  // `cmd`, then SIGKILL after `delay_ns`: the answer if it got out first.
  std::optional<std::string> ask_then_kill(proc& p, const std::string& cmd, std::uint64_t delay_ns);
  void spawn_producer(const std::string& fault);
  void producer_died(std::size_t i);
  // A new owner: acquire (no heir may be waiting), or nothing when it died inside.
  void spawn_owner(const std::string& fault);
  void spawn_heir(const std::string& fault);
  // The owner is gone (the model says so already): its first live heir must
  // take the box over; an heir that dies inside the takeover passes it on.
  void await_takeover(const char* why);
  // The owner process died: the model's states are without it already.
  void owner_died(const char* why);
  // A lease box: an heir that took the box from a live owner whose lease ran
  // out while it waited for the driver (a loaded machine). Between steps: as
  // if the owner had died there.
  void poll_lease_takeover();
  // A deposed (stale) owner must refuse everything and hand out nothing.
  void retire_stale_owner();

  // ------------------------------------------------------------------
  // The model's states, the box, and the checks
  // ------------------------------------------------------------------

  // Applies transition f to every state of the model: the states it may
  // leave, each once. None: the call's answer agrees with no state (a failure).
  template <class F>
  void apply(F f, const std::string& what) {
    std::vector<model> next;
    std::unordered_multimap<std::size_t, std::size_t> seen;  // hash -> index in next
    std::string why;
    for (const model& m : cands_) {
      std::string w;
      for (model& x : f(m, w)) {
        const std::size_t h = x.hash();
        bool dup = false;
        for (auto [it, end] = seen.equal_range(h); it != end && !dup; ++it) dup = next[it->second] == x;
        if (dup) continue;
        seen.emplace(h, next.size());
        next.push_back(std::move(x));
      }
      if (why.empty()) why = w;
    }
    if (next.empty()) fail(what + ": the answer agrees with no state of the model: " + why + model_now());
    cands_ = std::move(next);
    if (cands_.size() > 65536)
      fail(what + ": the model cannot tell " + std::to_string(cands_.size()) + " states apart (a limit of the checker)");
    totals_.max_candidates = std::max<std::uint64_t>(totals_.max_candidates, cands_.size());
  }

  // The model's first state (or, after a failed settle, the closest to the box), for a report.
  std::string model_now() const;
  // What the box shows now: info and peek, read without disturbing it.
  observation observe();
  static std::string ids(const std::vector<msg_id>& v);
  // How a state of the model differs from the box ("" when it agrees);
  // `distance` (if given) counts the differences, to name the closest state.
  std::string mismatch(const model& m, const observation& o, std::size_t* distance = nullptr) const;
  // After every step: what holds whatever the model says, then the model's
  // states that agree with the box.
  void settle(const std::string& what);
  // What happened to each message in the step (fates), where every state agrees.
  void record_fates();
  // An owner's answer "g STATUS N MSG...": its messages, checked for what
  // must hold whatever the model says.
  std::vector<delivery> deliveries(const std::string& line, recv_status& st);
  void check_delivery(const delivery& d);
  void note(const std::string& s);

  // ------------------------------------------------------------------
  // Steps
  // ------------------------------------------------------------------

  std::uint32_t slot_size() const { return cfg_.slot_size; }

  // A post by producer i; kill_ns: SIGKILL it that long after the command (0: no kill).
  void post(std::size_t i, std::uint32_t lane, bool too_large, std::uint64_t r, std::optional<std::uint64_t> kill_ns);
  // A receive, try_receive or read by the owner.
  void take(take_kind how, std::size_t max, int timeout_ms, std::optional<std::uint64_t> kill_ns);
  void commit(std::optional<std::uint64_t> kill_ns);
  void owner_exit();
  void kill_idle(proc& p);
  // A lease box: the owner stopped (SIGSTOP) past its lease; its heir must take over.
  void hang_owner();
  void one_step();

  // A crash point of `points` and a count (1-3), from a random word: "point:N".
  template <std::size_t N>
  static std::string fault_of(const char* const (&points)[N], std::uint64_t r) {
    return std::string(points[r % N]) + ":" + std::to_string(1 + (r / N) % 3);
  }

  // The end: an owner (unarmed) drains the box; every stored message must
  // then be accounted for.
  void drain();

  const config cfg_;
  const run_options opt_;
  std::mt19937_64 rng_;
  std::string name_;
  std::optional<shmbox::Box> box_;
  int ledger_fd_ = -1;
  ledger* L_ = nullptr;
  std::uint64_t step_ = 0;
  std::uint64_t t0_ = now_ns();
  std::uint32_t next_prod_ = 0;
  std::vector<proc> producers_;
  std::optional<proc> owner_;
  std::vector<proc> heirs_;
  std::set<std::uint32_t> dead_entries_;
  std::vector<model> cands_;
  observation last_obs_;
  std::map<msg_id, post_status> status_;
  std::map<msg_id, std::pair<std::uint32_t, std::uint32_t>> delivered_;  // (unflagged, flagged) deliveries seen
  std::map<std::pair<std::uint32_t, std::uint32_t>, std::uint32_t> last_first_;  // (prod, lane) -> seq + 1
  std::map<msg_id, fate> fates_;
  std::set<msg_id> uncertain_;
  run_totals totals_;
};

}  // namespace gencheck
