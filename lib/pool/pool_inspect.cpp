// lib/pool/pool_inspect.cpp - looking at a pool: inspect_pool (pool_info, the
// ledger's snapshot) and the names of return statuses and member states.
#include <array>
#include <chrono>
#include <string>
#include <thread>

#include "base/bus_guard.hpp"
#include "base/errors.hpp"
#include "base/process.hpp"
#include "pool/pool_layout.hpp"
#include "pool/pool_table.hpp"
#include "pool/pool_internal.hpp"
#include "segment/segment.hpp"
#include "shmbox/inspect.hpp"
#include "shmbox/pool.hpp"

namespace shmbox {

using namespace detail;

// --- inspection ------------------------------------------------------------

std::string_view to_string(return_status s) noexcept {
  switch (s) {
    case return_status::ok: return "ok";
    case return_status::double_return: return "double-return";
    case return_status::stale: return "stale";
    case return_status::error: return "error";
  }
  return "?";
}

std::string_view to_string(member_state s) noexcept {
  switch (s) {
    case member_state::empty: return "empty";
    case member_state::starting: return "starting";
    case member_state::free: return "free";
    case member_state::in_use: return "in-use";
    case member_state::checking: return "checking";
    case member_state::stopping: return "stopping";
  }
  return "?";
}

namespace {

// The words of the table inspection reports, read in one pass, bracketed
// by two looks at the lock: `settled` when the lock was free and no journal
// pending both before and after, and the counters the same at both ends (a
// section that ran in between and gave or ended a lease changed a counter:
// each one counts). Then the in_use members and the counters belong
// together, and LG can be checked.
struct table_snapshot {
  struct member_words {
    std::uint64_t state, generation, leases, taker_client, taker_key, worker_pid, worker_ns, idle_since_ns;
  };
  std::array<std::uint64_t, kPoolCounterSlots> counters{};
  std::vector<member_words> members;
  bool settled = false;
  std::uint64_t counter(pool_counter k) const noexcept { return counters[static_cast<std::uint32_t>(k)]; }
  // LG: takes - (returns_ok + returns_fail + killed_in_use + revoked_in_use + in_use).
  std::int64_t ledger_gap() const noexcept {
    std::uint64_t in_use = 0;
    for (const auto& m : members)
      if (member_state_of(m.state) == static_cast<std::uint32_t>(member_state::in_use)) ++in_use;
    return static_cast<std::int64_t>(counter(pool_counter::takes) - counter(pool_counter::returns_ok) -
                                     counter(pool_counter::returns_fail) - counter(pool_counter::killed_in_use) -
                                     counter(pool_counter::revoked_in_use) - in_use);
  }
};

table_snapshot read_table(const pool_handle& h) {
  const pool_state* st = h.state();
  // seq_cst loads of the lock word: a 0 seen after a holder's release (TL4's
  // exchange) orders the words it wrote before the relaxed reads below.
  // And the kernel's lock (TL2) not held: no holder between its two steps.
  auto quiet = [st, &h] { return st->lock.load() == 0 && st->journal_valid.load() == 0 && !lock_held_fd(h.fd, kPoolTableByte); };
  auto read_counters = [st](std::array<std::uint64_t, kPoolCounterSlots>& out) {
    for (std::uint32_t k = 0; k < kPoolCounterSlots; ++k) out[k] = st->counters[k].load(std::memory_order_relaxed);
  };
  table_snapshot t;
  t.members.resize(h.max_count());
  const bool quiet_before = quiet();
  read_counters(t.counters);
  for (std::uint32_t m = 0; m < h.max_count(); ++m) {
    const pool_member* e = h.member_at(m);
    t.members[m] = {e->state.load(std::memory_order_relaxed),        e->generation.load(std::memory_order_relaxed),
                    e->leases.load(std::memory_order_relaxed),       e->taker_client.load(std::memory_order_relaxed),
                    e->taker_key.load(std::memory_order_relaxed),    e->worker_pid.load(std::memory_order_relaxed),
                    e->worker_ns.load(std::memory_order_relaxed),    e->idle_since_ns.load(std::memory_order_relaxed)};
  }
  std::array<std::uint64_t, kPoolCounterSlots> after{};
  read_counters(after);
  t.settled = quiet_before && after == t.counters && quiet();
  return t;
}

}  // namespace

result<pool_info> inspect_pool(std::string_view name) { return inspect_pool_impl(name, true); }

result<pool_info> detail::inspect_pool_impl(std::string_view name, bool with_ledger) {
  auto hr = open_pool_segment(name, true, true);
  if (!hr) return hr.error();
  const pool_handle& h = **hr;
  const pool_header& p = h.hdr;
  pool_info info;
  info.name = h.name;
  info.group = h.group;
  info.dead_letters = h.dead_letters;
  info.command = h.command;
  info.init_command = h.init_command;
  const pool_limits lim = live_limits(h);  // RC1: the values in force
  info.init_count = lim.init_count;
  info.max_count = lim.max_count;
  info.table_size = p.max_count;
  info.queue_max = lim.queue_max;
  info.max_clients = p.max_clients;
  info.cull_after = std::chrono::milliseconds(lim.cull_after_ms);
  info.reconfigurations = h.state()->reconf_asked.load(std::memory_order_relaxed);
  info.start_timeout = std::chrono::milliseconds(p.start_timeout_ms);
  info.stop_grace = std::chrono::milliseconds(p.stop_grace_ms);
  info.health_interval = std::chrono::milliseconds(p.health_interval_ms);
  info.health_timeout = std::chrono::milliseconds(p.health_timeout_ms);
  info.max_lifetime = std::chrono::milliseconds(p.max_lifetime_ms);
  info.max_lifetime_jitter = std::chrono::milliseconds(p.max_lifetime_jitter_ms);
  if (lim.auto_grow_plus1 != 0) info.auto_grow_threshold = lim.auto_grow_plus1 - 1;
  info.member_capacity = p.member_lane_capacity[0];
  info.member_slot_size = p.member_slot_size;
  info.member_overflow = static_cast<policy>(p.member_policy);
  info.mode = h.mode;
  info.uid = h.uid;
  info.segment_bytes = h.bytes;
  // The member table and the counters from one snapshot: with the ledger,
  // retried (1 ms apart, 20 times at most) until one is settled and LG
  // holds in it; a real gap is still there 20 ms later.
  table_snapshot t = read_table(h);
  for (int attempt = 1; with_ledger && attempt < 20 && !(t.settled && t.ledger_gap() == 0); ++attempt) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    t = read_table(h);
  }
  if (with_ledger) {
    info.ledger_gap = t.ledger_gap();
    info.ledger_settled = t.settled;
  }
  const pool_state* st = h.state();
  const std::uint64_t removing_v = st->removing.load(std::memory_order_relaxed);
  info.removing = removing_v == 1 ? "graceful" : removing_v == 2 ? "immediate" : "";
  const std::uint64_t sup_client = st->supervisor_client.load(std::memory_order_relaxed);
  const std::uint64_t sup_key = st->supervisor_key.load(std::memory_order_relaxed);
  info.supervisor_epoch = st->supervisor_epoch.load(std::memory_order_relaxed);
  if (sup_key != 0 && sup_client < p.max_clients) {
    info.supervisor_pid = key_pid(sup_key);
    info.supervisor_pid_ns = h.client_at(static_cast<std::uint32_t>(sup_client))->pid_ns.load(std::memory_order_relaxed);
    info.supervisor_alive = client_alive(h, static_cast<std::uint32_t>(sup_client), sup_key);
  }
  for (std::uint32_t c = 0; c < p.max_clients; ++c) {
    const pool_client* e = h.client_at(c);
    const std::uint64_t key = e->key.load(std::memory_order_relaxed);
    if (!client_alive(h, c, key)) continue;
    ++info.clients;
    if (e->wait_ticket.load(std::memory_order_relaxed) != 0) ++info.queued;
    if (e->role.load(std::memory_order_relaxed) == static_cast<std::uint64_t>(pool_role::standby) &&
        !(key == sup_key && c == sup_client))
      ++info.standbys;
  }
  const std::uint64_t now = mono_ns();
  for (std::uint32_t m = 0; m < p.max_count; ++m) {
    const table_snapshot::member_words& e = t.members[m];
    const std::uint32_t s = member_state_of(e.state);
    if (s == 0 || s > static_cast<std::uint32_t>(member_state::stopping)) continue;
    member_info mi;
    mi.index = m;
    mi.state = static_cast<member_state>(s);
    mi.generation = e.generation;
    mi.box = member_box_name(h.name, m, mi.generation);
    mi.worker_pid = static_cast<std::uint32_t>(e.worker_pid & kPidMask);
    mi.worker_pid_ns = e.worker_ns;
    mi.leases = e.leases;
    if (mi.state == member_state::in_use) {
      mi.taker_pid = key_pid(e.taker_key);
      if (e.taker_client < p.max_clients) {
        mi.taker_pid_ns = h.client_at(static_cast<std::uint32_t>(e.taker_client))->pid_ns.load(std::memory_order_relaxed);
        mi.taker_alive = client_alive(h, static_cast<std::uint32_t>(e.taker_client), e.taker_key);
      }
    }
    if (mi.state == member_state::free && e.idle_since_ns != 0 && e.idle_since_ns < now)
      mi.idle = std::chrono::milliseconds((now - e.idle_since_ns) / 1'000'000);
    if (mi.state == member_state::stopping) mi.stopping_why = std::string(to_string(member_stop_of(e.state)));
    // A snapshot: a file another user planted at a member's name costs no
    // waiting (segment.hpp: a snapshot of another user's segment waits for
    // nothing), and a truncation cannot reach us.
    if (auto b = Box::snapshot(mi.box)) {
      const box_info bi = shmbox::info(*b);
      mi.worker_alive = bi.owner.alive;
      mi.depth = bi.depth;
    }
    switch (mi.state) {
      case member_state::free: ++info.free; break;
      case member_state::in_use: ++info.in_use; break;
      case member_state::starting: ++info.starting; break;
      case member_state::checking: ++info.checking; break;
      case member_state::stopping: ++info.stopping; break;
      case member_state::empty: break;
    }
    info.members.push_back(std::move(mi));
  }
  auto c = [&](pool_counter k) { return t.counter(k); };
  pool_counters& n = info.count;
  n.takes = c(pool_counter::takes);
  n.returns_ok = c(pool_counter::returns_ok);
  n.returns_fail = c(pool_counter::returns_fail);
  n.no_members_at_capacity = c(pool_counter::no_members_at_capacity);
  n.no_members_queue_full = c(pool_counter::no_members_queue_full);
  n.no_members_starting = c(pool_counter::no_members_starting);
  n.take_timeouts = c(pool_counter::take_timeouts);
  n.queue_max_reached = c(pool_counter::queue_max_reached);
  n.granted = c(pool_counter::granted);
  n.killed_free_culled = c(pool_counter::killed_free_culled);
  n.killed_free_unhealthy = c(pool_counter::killed_free_unhealthy);
  n.killed_in_use = c(pool_counter::killed_in_use);
  n.crashed = c(pool_counter::crashed);
  n.start_failures = c(pool_counter::start_failures);
  n.starts = c(pool_counter::starts);
  n.double_returns = c(pool_counter::double_returns);
  n.stale_returns = c(pool_counter::stale_returns);
  n.dead_lettered = c(pool_counter::dead_lettered);
  n.lost = c(pool_counter::lost);
  n.revoked_in_use = c(pool_counter::revoked_in_use);
  n.refused_signals = c(pool_counter::refused_signals);
  n.expired_free = c(pool_counter::expired_free);
  n.expired_returned = c(pool_counter::expired_returned);
  n.auto_grow_starts = c(pool_counter::auto_grow_starts);
  // T5 (docs/guarantees.md, "Trust"): truncated while it was read, the table read as zeros.
  if (bus_guard_faults(h.bus_ticket) != 0)
    return fail(errc::truncated, quote_pool(h.name) + ": its segment shrank while it was read (a process that may write it "
                                                  "truncated it); remove it ('shmbox pool rm " + h.name + "') and create it again");
  return info;
}

}  // namespace shmbox
