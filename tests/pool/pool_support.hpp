// tests/pool/pool_support.hpp - what the pool tests share (tests/pool/pools.cpp,
// tests/pool/pool_security.cpp): the worker processes of a pool found in /proc,
// its member boxes in /dev/shm, a guard that removes a pool whatever state it
// is in, supervisors and takers as separate programs, snapshots and the
// checks of a settled pool.
#pragma once

#include <doctest/doctest.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "segment/layout.hpp"
#include "pool/pool_layout.hpp"
#include "shmbox/shmbox.hpp"
#include "support.hpp"

namespace pooltest {

using namespace std::chrono_literals;
using shmbox::member_state;
using shmtest::child;
using shmtest::line_starting;

// --- Worker processes, member boxes, cleanup --------------------------------

struct live_worker {
  pid_t pid = 0;
  std::uint32_t index = 0;
  std::uint64_t generation = 0;
};

inline std::vector<std::string> split_nul(const std::string& s) {
  std::vector<std::string> v;
  std::size_t at = 0;
  while (at < s.size()) {
    const auto end = s.find('\0', at);
    v.push_back(s.substr(at, end == std::string::npos ? std::string::npos : end - at));
    if (end == std::string::npos) break;
    at = end + 1;
  }
  return v;
}

// The live (not zombie) pool-worker processes of pool `pool`, found by their
// environment (SHMBOX_POOL=<pool>, set by the supervisor) and their command
// line (argv[1] == "pool-worker": not the /bin/sh or env before the exec).
inline std::vector<live_worker> live_workers(const std::string& pool) {
  std::vector<live_worker> out;
  DIR* d = ::opendir("/proc");
  if (d == nullptr) return out;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string dir = "/proc/" + name;
    const auto argv = split_nul(shmtest::read_text(dir + "/cmdline"));
    if (argv.size() < 2 || argv[1] != "pool-worker") continue;
    std::optional<std::string> pool_env, index_env, gen_env;
    for (const auto& kv : split_nul(shmtest::read_text(dir + "/environ"))) {
      if (kv.rfind("SHMBOX_POOL=", 0) == 0) pool_env = kv.substr(12);
      if (kv.rfind("SHMBOX_MEMBER=", 0) == 0) index_env = kv.substr(14);
      if (kv.rfind("SHMBOX_MEMBER_GENERATION=", 0) == 0) gen_env = kv.substr(25);
    }
    if (pool_env != pool) continue;
    const pid_t pid = static_cast<pid_t>(std::stol(name));
    const char st = shmtest::process_state(pid);
    if (st == 'Z' || st == 'X' || st == '?') continue;
    live_worker w;
    w.pid = pid;
    w.index = index_env ? static_cast<std::uint32_t>(std::stoul(*index_env)) : 0xFFFFFFFFu;
    w.generation = gen_env ? std::stoull(*gen_env) : 0;
    out.push_back(w);
  }
  ::closedir(d);
  return out;
}

// The member boxes of pool `pool` in /dev/shm (shmbox.<pool>.m<index>.<generation>).
inline std::set<std::string> member_boxes_on_disk(const std::string& pool) {
  std::set<std::string> out;
  const std::string prefix = "shmbox." + pool + ".m";
  DIR* d = ::opendir("/dev/shm");
  if (d == nullptr) return out;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.rfind(prefix, 0) == 0) out.insert(name.substr(7));
  }
  ::closedir(d);
  return out;
}

// The pool segment mapped raw, to write it as a hostile writer (or a
// scribbler) would: no lock, no journal.
struct raw_pool {
  unsigned char* base = nullptr;
  std::size_t size = 0;
  explicit raw_pool(const std::string& name) {
    const int fd = ::shm_open(("/shmbox-pool." + name).c_str(), O_RDWR | O_CLOEXEC, 0);
    REQUIRE(fd >= 0);
    struct stat st {};
    REQUIRE(::fstat(fd, &st) == 0);
    size = static_cast<std::size_t>(st.st_size);
    void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);
    REQUIRE(p != MAP_FAILED);
    base = static_cast<unsigned char*>(p);
  }
  ~raw_pool() { ::munmap(base, size); }
  raw_pool(const raw_pool&) = delete;
  raw_pool& operator=(const raw_pool&) = delete;
  shmbox::detail::pool_header* header() const { return reinterpret_cast<shmbox::detail::pool_header*>(base); }
  shmbox::detail::pool_state* state() const {
    return reinterpret_cast<shmbox::detail::pool_state*>(base + shmbox::detail::kPoolStateOffset);
  }
  shmbox::detail::pool_member* member(std::uint32_t i) const {
    return reinterpret_cast<shmbox::detail::pool_member*>(base + header()->members_offset) + i;
  }
};

inline bool pool_segment_exists(const std::string& pool) { return ::access(("/dev/shm/shmbox-pool." + pool).c_str(), F_OK) == 0; }

// Where the workers of pool `pool` append what they say (pool-worker --log):
// tests wait for their lines there, whatever the supervisor does with the
// workers' stdout.
inline std::string worker_log_path(const std::string& pool) {
  return (std::filesystem::temp_directory_path() / ("shmbox-" + pool + ".workers")).string();
}

// Removes pool `name` when it goes out of scope, whatever state it is in:
// kills its workers' process groups, unlinks the pool segment and every
// member box. Declare it before the supervisors (children), so that they are
// dead (killed by their own guards) before it runs and restart nothing.
struct pool_guard {
  std::string name;
  explicit pool_guard(std::string n) : name(std::move(n)) { cleanup(); }
  ~pool_guard() { cleanup(); }
  pool_guard(const pool_guard&) = delete;
  pool_guard& operator=(const pool_guard&) = delete;

  void cleanup() const {
    for (int round = 0; round < 50; ++round) {
      const auto workers = live_workers(name);
      if (workers.empty()) break;
      for (const live_worker& w : workers) {
        const pid_t group = ::getpgid(w.pid);
        if (group > 1 && group != ::getpgrp()) ::killpg(group, SIGKILL);
        else ::kill(w.pid, SIGKILL);
      }
      std::this_thread::sleep_for(10ms);  // bounded: until the kernel has taken them down
    }
    ::shm_unlink(("/shmbox-pool." + name).c_str());
    for (const auto& box : member_boxes_on_disk(name)) ::shm_unlink(("/shmbox." + box).c_str());
    std::error_code ignored;
    std::filesystem::remove(worker_log_path(name), ignored);
  }
};

// --- Pools, supervisors, takers -------------------------------------------

// The members' command: the test helper's pool-worker. A supervisor started
// with SHMBOX_FAULT passes it on; the workers must not crash at its points.
inline std::string worker_command(const std::string& pool) {
  return shmtest::cat("exec env -u SHMBOX_FAULT ", shmtest::helper_path(), " pool-worker --log ", worker_log_path(pool));
}

// Waits (bounded) until a worker of `pool` has said a line starting with `prefix`.
inline bool worker_said(const std::string& pool, const std::string& prefix, std::chrono::milliseconds limit = 15s) {
  const bool ok = shmtest::eventually(
      [&] {
        std::istringstream in(shmtest::read_text(worker_log_path(pool)));
        std::string line;
        while (std::getline(in, line))
          if (line.rfind(prefix, 0) == 0) return true;
        return false;
      },
      limit);
  if (!ok) MESSAGE("no worker line '" << prefix << "' in:\n" << shmtest::read_text(worker_log_path(pool)));
  return ok;
}

inline shmbox::pool_options small_pool(const std::string& pool, std::uint32_t init, std::uint32_t max) {
  shmbox::pool_options o;
  o.init_count = init;
  o.max_count = max;
  o.command = worker_command(pool);
  o.member.capacity = 16;
  o.member.slot_size = 64;
  o.start_timeout = 5000ms;
  o.stop_grace = 1000ms;
  return o;
}


// A supervisor (helper pool-supervise) of `pool`, optionally with a crash point.
inline std::unique_ptr<child> supervisor(const std::string& pool, const std::string& fault = "") {
  std::vector<std::string> env;
  if (!fault.empty()) env.push_back("SHMBOX_FAULT=" + fault);
  auto c = std::make_unique<child>(std::vector<std::string>{shmtest::helper_path(), "pool-supervise", pool}, env, true);
  REQUIRE(line_starting(*c, "supervising ") == "supervising " + std::to_string(c->pid()));
  return c;
}

// `n` leases of `pool`, each taken within 15 s (members started on demand).
inline std::vector<shmbox::Lease> take_leases(shmbox::Pool& pool, int n) {
  std::vector<shmbox::Lease> held;
  for (int k = 0; k < n; ++k) {
    auto l = pool.take(std::chrono::seconds(15));
    INFO("take " << k << ": " << shmbox::explain(l.error()));
    REQUIRE(l);
    held.push_back(std::move(*l));
  }
  return held;
}

// A taker process (helper pool-take).
inline std::unique_ptr<child> taker(const std::string& pool, int timeout_ms, std::vector<std::string> extra = {},
                             const std::string& fault = "") {
  std::vector<std::string> argv{shmtest::helper_path(), "pool-take", pool, std::to_string(timeout_ms)};
  argv.insert(argv.end(), extra.begin(), extra.end());
  std::vector<std::string> env;
  if (!fault.empty()) env.push_back("SHMBOX_FAULT=" + fault);
  return std::make_unique<child>(argv, env, true);
}

// "took <member> <box> <generation> <worker pid>"
struct took_line {
  bool ok = false;
  std::uint32_t member = 0;
  std::string box;
  std::uint64_t generation = 0;
  std::uint32_t worker_pid = 0;
};
inline took_line parse_took(const std::string& line) {
  took_line t;
  std::istringstream in(line);
  std::string tag;
  t.ok = in >> tag && tag == "took" && in >> t.member >> t.box >> t.generation >> t.worker_pid;
  return t;
}

inline std::string describe(const shmbox::pool_info& i) {
  std::ostringstream o;
  o << "pool " << i.name << ": free=" << i.free << " in_use=" << i.in_use << " starting=" << i.starting
    << " checking=" << i.checking << " stopping=" << i.stopping << " queued=" << i.queued << " clients=" << i.clients
    << " supervisor=" << i.supervisor_pid << (i.supervisor_alive ? "(alive)" : "(dead)") << " epoch=" << i.supervisor_epoch
    << " standbys=" << i.standbys << " removing='" << i.removing << "' ledger_gap=" << i.ledger_gap
    << (i.ledger_settled ? "" : "(unsettled)") << "\n";
  for (const auto& m : i.members)
    o << "  m" << m.index << " " << shmbox::to_string(m.state) << " gen=" << m.generation << " box=" << m.box
      << " worker=" << m.worker_pid << (m.worker_alive ? "(alive)" : "(dead)") << " taker=" << m.taker_pid
      << (m.taker_alive ? "(alive)" : "(dead)") << " leases=" << m.leases << " depth=" << m.depth << " why='"
      << m.stopping_why << "'\n";
  const auto& c = i.count;
  o << "  takes=" << c.takes << " ok=" << c.returns_ok << " fail=" << c.returns_fail << " at_capacity=" << c.no_members_at_capacity
    << " queue_full=" << c.no_members_queue_full << " starting=" << c.no_members_starting << " take_timeouts=" << c.take_timeouts
    << " queue_max_reached=" << c.queue_max_reached << " granted=" << c.granted << " culled=" << c.killed_free_culled
    << " unhealthy=" << c.killed_free_unhealthy << " in_use_killed=" << c.killed_in_use << " revoked=" << c.revoked_in_use
    << " crashed=" << c.crashed
    << " start_failures=" << c.start_failures << " starts=" << c.starts << " double=" << c.double_returns
    << " stale=" << c.stale_returns << " dead_lettered=" << c.dead_lettered << " lost=" << c.lost << "\n";
  return o.str();
}

inline std::string describe_workers(const std::string& pool) {
  std::string s = "workers:";
  for (const auto& w : live_workers(pool))
    s += shmtest::cat(" ", std::to_string(w.pid), "=m", std::to_string(w.index), ".", std::to_string(w.generation));
  s += "\nboxes:";
  for (const auto& b : member_boxes_on_disk(pool)) s += " " + b;
  return s;
}

inline shmbox::pool_info snapshot(const std::string& pool) {
  auto i = shmbox::inspect_pool(pool);
  INFO("inspect_pool(" << pool << "): " << shmbox::explain(i.error()));
  REQUIRE(i);
  return *i;
}

inline const shmbox::member_info* find_member(const shmbox::pool_info& i, std::uint32_t index) {
  for (const auto& m : i.members)
    if (m.index == index) return &m;
  return nullptr;
}

// Waits (bounded) until `pred` holds for a snapshot of `pool`; on failure the
// last snapshot is printed.
template <class Pred>
inline bool settles(const std::string& pool, Pred pred, std::chrono::milliseconds limit = 30s) {
  std::string last;
  const bool ok = shmtest::eventually(
      [&] {
        auto i = shmbox::inspect_pool(pool);
        if (!i) {
          last = "inspect_pool: " + shmbox::explain(i.error());
          return false;
        }
        last = describe(*i);
        return pred(*i);
      },
      limit);
  if (!ok) MESSAGE("did not settle:\n" << last << describe_workers(pool));
  return ok;
}

// Every entry has exactly the workers and box it should: one live worker per
// member with a worker (same index and generation, and the pid the table
// records), no live worker without a member entry, no member box in
// /dev/shm without an entry. Returns "" or what is wrong.
inline std::string workers_and_boxes_mismatch(const shmbox::pool_info& i) {
  const auto workers = live_workers(i.name);
  std::map<std::pair<std::uint32_t, std::uint64_t>, std::vector<pid_t>> by_member;
  for (const auto& w : workers) by_member[{w.index, w.generation}].push_back(w.pid);
  std::set<std::string> boxes;
  for (const auto& m : i.members) {
    boxes.insert(m.box);
    const auto it = by_member.find({m.index, m.generation});
    const std::size_t n = it == by_member.end() ? 0 : it->second.size();
    const bool needs_worker = m.state == member_state::free || m.state == member_state::in_use ||
                              m.state == member_state::checking;
    if (needs_worker && n != 1) return "member " + std::to_string(m.index) + " has " + std::to_string(n) + " live workers";
    if (n > 1) return "member " + std::to_string(m.index) + " has " + std::to_string(n) + " live workers";
    if (n == 1 && m.worker_pid != 0 && static_cast<pid_t>(m.worker_pid) != it->second[0])
      return "member " + std::to_string(m.index) + " records pid " + std::to_string(m.worker_pid) + ", its worker is " +
             std::to_string(it->second[0]);
    if (it != by_member.end()) by_member.erase(it);
  }
  if (!by_member.empty())
    return "live worker without a member entry: pid " + std::to_string(by_member.begin()->second[0]) + " (m" +
           std::to_string(by_member.begin()->first.first) + "." + std::to_string(by_member.begin()->first.second) + ")";
  if (member_boxes_on_disk(i.name) != boxes) return "member boxes in /dev/shm differ from the table";
  return {};
}

// The gauges are the member table's states counted.
inline void check_gauges(const shmbox::pool_info& i) {
  std::map<member_state, std::uint32_t> n;
  for (const auto& m : i.members) ++n[m.state];
  INFO(describe(i));
  CHECK(n[member_state::empty] == 0);  // inspect lists non-empty entries only
  CHECK(i.free == n[member_state::free]);
  CHECK(i.in_use == n[member_state::in_use]);
  CHECK(i.starting == n[member_state::starting]);
  CHECK(i.checking == n[member_state::checking]);
  CHECK(i.stopping == n[member_state::stopping]);
  CHECK(i.free + i.in_use + i.starting + i.checking + i.stopping == i.members.size());
  CHECK(i.members.size() <= i.max_count);
}

// Every lease ends in one counter (or is still out: the ledger,
// pool_table.hpp LG, as inspect_pool checks it too); every started worker is
// a member or was stopped for a counted reason.
inline void check_counts(const shmbox::pool_info& i) {
  const auto& c = i.count;
  INFO(describe(i));
  CHECK(c.takes == c.returns_ok + c.returns_fail + c.killed_in_use + c.revoked_in_use + i.in_use);
  CHECK(i.ledger_gap == 0);
  CHECK(c.starts == i.members.size() + c.killed_free_culled + c.killed_free_unhealthy + c.killed_in_use + c.crashed +
                        c.start_failures + c.returns_fail + c.expired_free + c.expired_returned);
}

// Waits until pool `pool` has exactly `members` members, all free, each with
// one live worker and its box, and nothing else; then checks the gauges.
// Returns the snapshot that was so (a pool whose members retire by
// themselves, max_lifetime, may have moved on since).
inline shmbox::pool_info check_settled(const std::string& pool, std::uint32_t members) {
  std::string mismatch;
  shmbox::pool_info settled;
  const bool ok = settles(pool, [&](const shmbox::pool_info& i) {
    settled = i;
    // ledger_settled: the table lock is free and no journal is pending (a
    // process killed mid-operation leaves one that the next lock holder applies).
    if (i.members.size() != members || i.free != members || !i.ledger_settled) return false;
    for (const auto& m : i.members)
      if (m.state != member_state::free || !m.worker_alive) return false;
    mismatch = workers_and_boxes_mismatch(i);
    return mismatch.empty();
  });
  INFO(mismatch);
  CHECK(ok);
  check_gauges(settled);
  return settled;
}

// A pool of init..max members (small_pool, then `tweak`), created, its
// supervisor running, settled at `init` members, and a handle on it; removed
// (whatever its state) when it goes.
struct running_pool {
  pool_guard guard;
  std::unique_ptr<child> sup;
  std::optional<shmbox::Pool> pool;
  running_pool(const std::string& prefix, std::uint32_t init, std::uint32_t max,
               const std::function<void(shmbox::pool_options&)>& tweak = {})
      : guard(shmtest::unique_name(prefix)) {
    auto opts = small_pool(guard.name, init, max);
    if (tweak) tweak(opts);
    REQUIRE(shmbox::Pool::create(guard.name, opts));
    sup = supervisor(guard.name);
    check_settled(guard.name, init);
    auto p = shmbox::Pool::open(guard.name);
    REQUIRE(p);
    pool.emplace(std::move(*p));
  }
  const std::string& name() const { return guard.name; }
};

// A supervisor that kills itself at `fault` (its first pass there) and a
// standby in line behind it, once `init` members are settled.
struct supervisor_pair {
  std::unique_ptr<child> first, standby;
};
inline supervisor_pair supervisor_and_standby(const std::string& pool, const std::string& fault, std::uint32_t init) {
  supervisor_pair s;
  s.first = supervisor(pool, fault + ":1");
  check_settled(pool, init);
  s.standby = supervisor(pool);
  REQUIRE(settles(pool, [&](const shmbox::pool_info& i) {
    return i.standbys == 1 && i.supervisor_pid == static_cast<std::uint32_t>(s.first->pid());
  }, std::chrono::seconds(10)));
  return s;
}

// A take and a give_back work, through `handle` (a Pool handle that took
// before) or a new handle of this process.
inline void check_take_works(const std::string& pool, shmbox::Pool* handle = nullptr) {
  std::optional<shmbox::Pool> fresh;
  if (handle == nullptr) {
    auto p = shmbox::Pool::open(pool);
    REQUIRE(p);
    fresh.emplace(std::move(*p));
    handle = &*fresh;
  }
  auto l = handle->take(10s);
  INFO(shmbox::explain(l.error()));
  REQUIRE(l);
  CHECK(l->producer().post("after") == shmbox::post_status::stored);
  CHECK(l->give_back(shmbox::outcome::ok) == shmbox::return_status::ok);
}

inline std::chrono::milliseconds since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0);
}

// Receives every message of box `name` (owner), until 300 ms pass without one.
inline std::vector<std::string> drain_box(const std::string& name) {
  auto o = shmbox::Owner::acquire(name);
  REQUIRE(o);
  std::vector<std::string> out;
  shmbox::message m;
  while (o->receive(m, {.timeout = 300ms}) == shmbox::recv_status::ok) out.push_back(m.data);
  return out;
}

}  // namespace pooltest
