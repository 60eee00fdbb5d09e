// tests/adversary/adversary.hpp - what the adversary suite shares (issue 53,
// "What to build" item 3; docs/tests.md, suite 'adversary').
//
// One program, shmbox-adversary, plays three parts:
//   * the DRIVER (doctest; one TEST_CASE per surface: boxes, dead letters,
//     reply boxes, pools, doorbells, bridge status, the exporter, the CLI):
//     root's side. It makes root's segments, starts root's workload as
//     separate processes, runs the attacker beside them for --seconds, and
//     checks: every root process alive and not killed by a signal, every
//     root call back within its deadline, root's 0600 canary box exactly as
//     root left it (every byte), and the counting identity exact where root
//     alone writes the counters;
//   * the ATTACKER (`shmbox-adversary attack ...`, attacker.cpp): the second
//     user, uid 65534 through setpriv when the suite runs as root, doing
//     seeded random actions at the names and segments the driver names;
//   * ROOT'S ROLES (`shmbox-adversary role ...`, roles.cpp): producers,
//     owners, a service, requesters, a churn of creates and opens, each
//     measuring its own calls against their deadlines.
// The seed is printed; --seed S replays the attacker's choices (the
// interleaving with root's processes is the scheduler's).
#pragma once

#include <doctest/doctest.h>
#include <signal.h>
#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "shmbox/shmbox.hpp"
#include "support.hpp"

namespace adv {

using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;
using ms = std::chrono::milliseconds;

// The run: --seconds (SHMBOX_ADVERSARY_SECONDS) of attack per surface, and
// the seed (--seed, SHMBOX_ADVERSARY_SEED; drawn and printed when not given).
struct run_params {
  double seconds = 12;
  std::uint64_t seed = 0;
  std::string self;  // this program (/proc/self/exe): the attacker and the roles are this program
};
run_params& params();
ms attack_time();  // params().seconds

// The attacker's seed for a surface: the run's seed mixed with the surface's name.
std::uint64_t surface_seed(std::string_view surface);

// A planted counter: a value no root tool may ever show (bridge status images).
inline constexpr std::uint64_t kHostileValue = 777777777777ULL;

// splitmix64: small, seedable, the same sequence everywhere.
class rng {
 public:
  explicit rng(std::uint64_t seed) : s_(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (s_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  std::uint64_t below(std::uint64_t n) { return n == 0 ? 0 : next() % n; }
  bool chance(unsigned in) { return below(in) == 0; }  // 1 in `in`
  template <class V>
  const typename V::value_type& pick(const V& v) {
    return v[static_cast<std::size_t>(below(v.size()))];
  }

 private:
  std::uint64_t s_;
};

// Whether a second user can play: root, setpriv, and uid 65534 may run this
// program. Otherwise the attacker runs as this uid, and the checks that need
// two users are skipped (said by MESSAGE once per surface).
bool second_user();
// argv run as uid/gid 65534 (no other groups) when second_user(), else as is.
std::vector<std::string> as_second_user(std::vector<std::string> argv);
constexpr unsigned kSecondUid = 65534;

// The key=value words of a line ("done a=1 b=2": {a:1, b:2}); non-numbers are skipped.
std::map<std::string, std::uint64_t> tallies(const std::string& line);
std::uint64_t tally(const std::map<std::string, std::uint64_t>& t, const std::string& key);

// A separate process of any program: its stdout read by a thread of ours
// into lines (so that a chatty process never blocks on a full pipe), its
// stdin a pipe, its stderr a file (read at the end, for the report). The
// destructor kills (SIGKILL) and reaps it if it still runs.
class proc {
 public:
  proc(std::string label, const std::vector<std::string>& argv, const std::vector<std::string>& env = {});
  ~proc();
  proc(const proc&) = delete;
  proc& operator=(const proc&) = delete;

  pid_t pid() const { return pid_; }
  const std::string& label() const { return label_; }
  // The next line of stdout, or nullopt after `timeout` (or at its end).
  std::optional<std::string> line(ms timeout);
  // Lines until one starts with `prefix`: it, or "" after `timeout`.
  std::string expect(const std::string& prefix, ms timeout);
  void say(const std::string& line);  // one line to its stdin
  void close_stdin();
  void signal(int sig) const;
  // Waits for its exit up to `timeout` (then SIGKILL): the wait status.
  int wait(ms timeout);
  bool hung() const { return hung_; }  // wait() had to kill it
  bool exited() const { return status_.has_value(); }
  std::string err_text() const;  // its stderr so far (the last 4 KiB)
  std::string all_lines() const;  // everything it said on stdout, for reports

  // What finish() saw.
  struct ending {
    std::string done;  // the line starting with "done" ("" if none came)
    int status = -1;
    bool hung = false;
    std::map<std::string, std::uint64_t> t;  // tallies(done)
    ms took{0};  // from the close of its stdin to its exit
  };
  // The agreed end of a role or the attacker: closes stdin, waits up to
  // `limit` for its "done" line (a line starting with `last`) and its exit.
  // Checks (doctest) that it said it, exited 0 and was not killed by a
  // signal; INFO says who and why.
  ending finish(ms limit, const std::string& last = "done");

 private:
  void reader();
  std::string label_;
  pid_t pid_ = -1;
  int in_ = -1, out_ = -1;
  std::string err_path_;
  std::thread thread_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::string> lines_;
  std::string all_;
  bool eof_ = false;
  std::atomic<bool> stop_{false};
  std::optional<int> status_;
  bool hung_ = false;
};

// A root role of this program: `shmbox-adversary role ARGS...`, handshake "ready".
std::unique_ptr<proc> start_role(const std::string& label, std::vector<std::string> args,
                                 const std::vector<std::string>& env = {});

// The attacker of one surface, started with `targets` (attacker.cpp's
// options) and the surface's seed, as the second user; waits for "ready".
std::unique_ptr<proc> start_attacker(const std::string& surface, std::vector<std::string> targets,
                                     ms seconds = attack_time());
// Its end: its tallies (the checks of proc::finish included), printed with the seed.
std::map<std::string, std::uint64_t> finish_attacker(proc& a, const std::string& surface);

// Prints each role's last line (MESSAGE), for the report.
void report(const std::string& surface, const std::map<std::string, proc::ending>& ends);
// Ends every process of `roles` (proc::finish), in order: their endings by label.
std::map<std::string, proc::ending> finish_all(std::vector<std::unique_ptr<proc>>& roles, ms limit = 30s);
// Checks that no role's call was late (past its deadline and the slack).
void check_none_late(const std::map<std::string, proc::ending>& ends);

// Removes, when it goes out of scope (also when a check failed), every
// /dev/shm entry whose name starts with one of `prefixes`, and the `entries`
// named: the run's boxes, pools, bridge statuses, and whatever the attacker
// planted (FIFOs, links, directories, sockets, files). Pool workers first:
// see pool_support.hpp's pool_guard.
struct shm_sweeper {
  std::vector<std::string> prefixes;
  std::vector<std::string> entries;
  shm_sweeper() = default;
  shm_sweeper(const shm_sweeper&) = delete;
  shm_sweeper& operator=(const shm_sweeper&) = delete;
  ~shm_sweeper() { sweep(); }
  void sweep() const;
};

// Root's 0600 canary box: made and filled at the start, never touched by
// root again. check() compares every byte of its segment, its counters,
// depth and messages with what root left: no write may reach it, by any
// name any surface follows.
struct canary {
  std::string name;
  std::string bytes;
  shmbox::counters count;
  std::uint64_t depth = 0;
  std::vector<std::string> messages;
  explicit canary(std::string n);
  void check() const;
};

// The counting identity of a box (types.hpp), with a sentence when it fails.
std::string identity_problem(const shmbox::counters& c, std::uint64_t depth);

// A 0600 box of root's with a root producer and a root owner (roles
// produce and own): what the adversary can only reach through names. After
// stop(): the identity holds exactly, and the producer's tallies, the
// owner's count and the box's counters agree.
struct counted_box {
  std::string name;
  std::unique_ptr<proc> producer, owner;
  counted_box(std::string n, const shmbox::options& o, std::vector<std::string> producer_flags = {});
  void stop_and_check();
};

// Runs the CLI under test once, bounded: its exit code (-1: killed), how
// long it took, and whether it was killed by a signal or for its deadline.
struct cli_call {
  int code = -1;
  int signal = 0;
  bool hung = false;
  ms took{0};
  std::string out, err;
};
cli_call run_cli(const std::vector<std::string>& args, ms limit);

// The entries of /dev/shm starting with `prefix`.
std::vector<std::string> shm_entries(const std::string& prefix);

// Says (MESSAGE) what a surface skips when there is no second user.
void say_skipped(const char* surface);

// "0666" etc.
std::string octal(unsigned mode);

}  // namespace adv
