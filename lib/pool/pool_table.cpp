// lib/pool/pool_table.cpp - the pool's table lock, redo journal and table operations
// (the protocol is at the top of pool_table.hpp; labels TL*, J* cite it).
#include "pool/pool_table.hpp"

#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <thread>

#include "base/errors.hpp"
#include "base/fault.hpp"
#include "base/futex.hpp"
#include "base/process.hpp"
#include "pool/pool_layout.hpp"

namespace shmbox::detail {
namespace {

constexpr std::uint64_t kLockSliceNs = 1'000'000;  // TL3: a waiter tries the byte again every 1 ms at most

// J1's bounds: a word of the table that operations may write.
bool journal_target_ok(const pool_handle& h, std::uint64_t off) noexcept {
  if (off % 8 != 0 || off + 8 > h.bytes) return false;
  const std::uint64_t first = kPoolStateOffset + offsetof(pool_state, removing);
  const std::uint64_t journal_begin = kPoolStateOffset + offsetof(pool_state, journal_offset);
  const std::uint64_t counters_begin = kPoolStateOffset + offsetof(pool_state, counters);
  if (off >= first && off < journal_begin) return true;
  if (off >= counters_begin && off < counters_begin + 8ull * kPoolCounterSlots) return true;
  const std::uint64_t live_begin = kPoolStateOffset + offsetof(pool_state, live_init_count);
  if (off >= live_begin && off < kPoolStateOffset + offsetof(pool_state, reserved)) return true;
  if (off >= h.hdr.clients_offset && off < h.hdr.members_offset) {
    const std::uint64_t in = (off - h.hdr.clients_offset) % sizeof(pool_client);
    return in != offsetof(pool_client, wake) && in != offsetof(pool_client, key);  // futex word; keys are CASed
  }
  if (off >= h.hdr.members_offset && off < h.hdr.members_offset + std::uint64_t{h.hdr.max_count} * sizeof(pool_member)) {
    const std::uint64_t in = (off - h.hdr.members_offset) % sizeof(pool_member);
    return in != offsetof(pool_member, ping_ack);  // written by the member itself
  }
  return false;
}

a64& word_at(pool_handle& h, std::uint64_t off) noexcept { return *reinterpret_cast<a64*>(h.base + off); }

}  // namespace

namespace {

template <class Read>
pool_limits limits_from(const pool_handle& h, Read read) noexcept {
  const pool_header& p = h.hdr;
  const pool_state* st = h.state();
  auto live = [&](const a64& w, std::uint64_t created, std::uint64_t most) {
    const std::uint64_t v = read(w);
    return static_cast<std::uint32_t>(std::min(v == 0 ? created : v - 1, most));
  };
  pool_limits l;
  l.max_count = std::max<std::uint32_t>(1, live(st->live_max_count, p.max_count, p.max_count));
  l.init_count = live(st->live_init_count, p.init_count, l.max_count);
  l.queue_max = live(st->live_queue_max, p.queue_max, p.max_clients);
  l.cull_after_ms = live(st->live_cull_after_ms, p.cull_after_ms, kMaxPoolMs);
  l.auto_grow_plus1 = live(st->live_auto_grow, p.auto_grow_plus1, std::uint64_t{l.max_count} + 1);
  return l;
}

}  // namespace

pool_limits live_limits(const pool_handle& h) noexcept {
  return limits_from(h, [](const a64& w) { return w.load(std::memory_order_relaxed); });
}

pool_limits live_limits(const pool_handle& h, const table_txn& t) noexcept {
  return limits_from(h, [&](const a64& w) { return t.read(w); });
}

bool client_alive(const pool_handle& h, std::uint32_t c, std::uint64_t key) noexcept {
  return c < h.max_clients() && key != 0 && h.client_at(c)->key.load(std::memory_order_relaxed) == key &&
         lock_held_fd(h.fd, h.client_byte(c));
}

void replay_journal(pool_handle& h) noexcept {
  pool_state* st = h.state();
  // Under the lock: the lock's CAS (seq_cst) ordered us after the dead holder's writes.
  if (st->journal_valid.load(std::memory_order_relaxed) != 1) return;
  const std::uint64_t n = st->journal_count.load(std::memory_order_relaxed);
  bool ok = n <= kPoolJournalMax;
  for (std::uint64_t i = 0; ok && i < n; ++i) ok = journal_target_ok(h, st->journal_offset[i].load(std::memory_order_relaxed));
  if (ok) {
    for (std::uint64_t i = 0; i < n; ++i)
      word_at(h, st->journal_offset[i].load(std::memory_order_relaxed))
          .store(st->journal_value[i].load(std::memory_order_relaxed), std::memory_order_relaxed);
  }
  // J5: applied (or dropped when scribbled); seq_cst orders the writes before it.
  st->journal_valid.store(0);
}

table_txn::table_txn(pool_handle& h, std::uint64_t deadline_ns, bool anonymous) noexcept
    : h_(h), anonymous_(anonymous) {
  if (h.read_only || h.in_txn) return;  // TL4: never nested (the byte is already ours)
  if (!anonymous && h.client < 0) return;
  if (!h.role.open_file(h.fd)) return;  // the handle's own open file description (TL2)
  pool_state* st = h.state();
  const std::uint32_t me = anonymous ? kAnonHolder : static_cast<std::uint32_t>(h.client) + 1;
  for (int spins = 0;; ++spins) {
    if (h.role.try_exclusive(kPoolTableByte)) break;  // TL3: the kernel's lock is ours
    if (spins < 64) {
      sched_yield();
      continue;
    }
    const std::uint64_t now = mono_ns();
    if (now >= deadline_ns || (h.stop != nullptr && h.stop->load())) return;
    // Busy: ask to be woken (the holder's release sees the bit, TL4). A word
    // of 0 with the byte held is a holder between its two steps: just retry.
    std::uint32_t v = st->lock.load();
    if (v != 0 && (v & kPoolLockWaiters) == 0 && !st->lock.compare_exchange_strong(v, v | kPoolLockWaiters)) continue;
    futex_wait(&st->lock, v | (v != 0 ? kPoolLockWaiters : 0), std::min(deadline_ns, now + kLockSliceNs));
  }
  // TL3: whatever the word says now is stale (holders write it only while
  // they hold the byte). seq_cst exchange: after the byte, before the
  // journal is read. The waiters bit is kept so that our release wakes them.
  std::uint32_t v = st->lock.load();
  while (!st->lock.compare_exchange_weak(v, me | (v & kPoolLockWaiters))) {
  }
  locked_ = true;
  h.in_txn = true;
  SHMBOX_FAULT("pool.locked");
  replay_journal(h);
}

table_txn::~table_txn() {
  if (!locked_) return;
  pool_state* st = h_.state();
  // TL4: seq_cst exchange publishes every write of the section before the
  // release; then the kernel's lock, then the wake (a woken waiter finds the byte free).
  const std::uint32_t old = st->lock.exchange(0);
  h_.role.unlock(kPoolTableByte);
  h_.in_txn = false;
  if (old & kPoolLockWaiters) futex_wake(&st->lock);
  for (const std::uint32_t c : wake_clients_) {
    if (c >= h_.max_clients()) continue;
    a32& w = h_.client_at(c)->wake;
    w.fetch_add(1);  // seq_cst: after the grant (J3); the waiter re-reads `granted` after waking
    futex_wake(&w);
  }
  if (wake_work_) {
    st->work.fetch_add(1);
    futex_wake(&st->work);
  }
}

void table_txn::become_client() noexcept {
  if (!locked_ || !anonymous_ || h_.client < 0) return;
  pool_state* st = h_.state();
  const std::uint32_t me = static_cast<std::uint32_t>(h_.client) + 1;
  std::uint32_t v = st->lock.load();
  // Display only (TL2): the word now names our client entry; the byte stays ours.
  while (!st->lock.compare_exchange_weak(v, me | (v & kPoolLockWaiters))) {
  }
  anonymous_ = false;
}

void table_txn::write(a64& word, std::uint64_t value) noexcept {
  for (std::size_t i = 0; i < count_; ++i)
    if (writes_[i].first == &word) {
      writes_[i].second = value;
      return;
    }
  // Operations stay within the journal (room()); a write past it would be
  // a bug, and is dropped rather than applied outside the journal.
  if (count_ < writes_.size()) writes_[count_++] = {&word, value};
}

std::uint64_t table_txn::read(const a64& word) const noexcept {
  for (std::size_t i = 0; i < count_; ++i)
    if (writes_[i].first == &word) return writes_[i].second;
  return word.load(std::memory_order_relaxed);  // under the lock: we are the only writer
}

void table_txn::add(pool_counter c, std::uint64_t n) noexcept {
  a64& w = h_.state()->counters[static_cast<std::uint32_t>(c)];
  write(w, read(w) + n);
}

void table_txn::commit(const char* op) noexcept {
  if (!locked_ || count_ == 0) return;
  pool_state* st = h_.state();
  const std::size_t n = count_;
  for (std::size_t i = 0; i < n; ++i) {  // J1
    st->journal_offset[i].store(h_.offset_of(writes_[i].first), std::memory_order_relaxed);
    st->journal_value[i].store(writes_[i].second, std::memory_order_relaxed);
  }
  st->journal_count.store(n, std::memory_order_relaxed);
  st->journal_valid.store(1);  // J2: seq_cst, after the entries
  SHMBOX_FAULT("pool.after_journal");
  for (std::size_t i = 0; i < n; ++i) {  // J3
    writes_[i].first->store(writes_[i].second, std::memory_order_relaxed);
    if (i + 1 == n / 2) SHMBOX_FAULT("pool.mid_apply");
  }
  SHMBOX_FAULT("pool.after_apply");
  st->journal_valid.store(0);  // J4
  std::uint64_t op_code = 0;
  for (const char* p = op; *p != '\0' && p - op < 8; ++p) op_code = (op_code << 8) | static_cast<unsigned char>(*p);
  st->last_op.store(op_code, std::memory_order_relaxed);  // display only
  count_ = 0;
}

std::error_code table_busy(std::string_view pool, std::string_view then) {
  return fail(errc::timed_out, "pool '" + std::string(pool) +
                                   "': its table lock stayed held by another process (stopped, or one that writes the segment "
                                   "without the protocol); " + std::string(then) + ", or remove the pool with 'shmbox pool rm " +
                                   std::string(pool) + " --now'");
}

// --- clients ----------------------------------------------------------------

result<void> ensure_client(pool_handle& h, pool_role role, std::uint64_t deadline_ns) {
  if (h.client >= 0) return {};
  if (h.read_only) return fail(errc::permission_denied, "pool '" + h.name + "' is open read-only");
  if (!h.role.open_file(h.fd)) return fail_errno(errno, "pool '" + h.name + "': cannot open its segment again");
  const std::uint64_t key = self_key();
  table_txn t(h, deadline_ns, /*anonymous=*/true);  // TL2
  if (!t.locked())
    return table_busy(h.name, "retry");
  // TL1 under T6 (liveness.hpp L7): anyone who may open the segment may
  // hold a free entry's byte exclusively. Such an entry is skipped, not
  // waited for under the table lock: first every entry whose byte we get at
  // once, then (only if none) the skipped ones with one deadline for them
  // all, as claim_producer_entry does; a byte still held then costs its
  // entry, never the registration.
  const std::uint64_t give_up = std::min(deadline_ns, mono_ns() + kRoleLockWaitNs);
  std::uint32_t held = 0;
  for (int pass = 0; pass < 2; ++pass) {
    if (pass == 1 && held == 0) break;
    for (std::uint32_t c = 0; c < h.max_clients(); ++c) {
      pool_client* e = h.client_at(c);
      std::uint64_t old = e->key.load(std::memory_order_relaxed);
      if (old != 0 && lock_held_fd(h.fd, h.client_byte(c))) continue;  // live
      // Free, or its holder died (L1). Byte first, then the key. (A deadline
      // of 1, long past: one try, then EAGAIN.)
      if (!h.role.lock_open(h.client_byte(c), pass == 0 ? 1 : give_up)) {
        if (errno != EAGAIN && errno != EACCES) return fail_errno(errno, "pool '" + h.name + "': cannot lock its client entry");
        if (pass == 0) ++held;
        continue;  // held by another description: the next entry
      }
      // Under the table lock nobody else registers; CAS anyway against a scribbler.
      if (!e->key.compare_exchange_strong(old, key)) {
        h.role.unlock(h.client_byte(c));
        continue;
      }
      h.client = static_cast<std::int32_t>(c);
      h.key = key;
      t.write(e->pid_ns, self_pid_ns());
      t.write(e->role, static_cast<std::uint64_t>(role));
      t.write(e->wait_ticket, 0);
      t.write(e->granted, 0);
      if (role == pool_role::standby) {
        const std::uint64_t order = t.read(h.state()->next_order) + 1;
        t.write(h.state()->next_order, order);
        t.write(e->order, order);
      } else {
        t.write(e->order, 0);
      }
      t.commit("client");
      t.become_client();
      return {};
    }
  }
  return fail(errc::pool_clients_full, "pool '" + h.name + "': all " + std::to_string(h.max_clients()) + " client entries are held by live processes" +
                                           (held == 0 ? std::string() : " (" + std::to_string(held) + " of them by a process that holds their lock byte without the protocol)") +
                                           ": close Pool handles or create the pool with more --max-clients");
}

void release_client(pool_handle& h) noexcept {
  if (h.client < 0) return;
  pool_client* e = h.client_at(static_cast<std::uint32_t>(h.client));
  {
    table_txn t(h, mono_ns() + 5'000'000'000ull);
    if (t.locked()) {
      pool_state* st = h.state();
      t.write(e->wait_ticket, 0);
      t.write(e->granted, 0);
      t.write(e->role, 0);
      if (t.read(st->supervisor_key) == h.key && t.read(st->supervisor_client) == static_cast<std::uint64_t>(h.client)) {
        t.write(st->supervisor_key, 0);  // a standby takes over at once
      }
      t.commit("leave");
    }
  }
  // Only after the table lock is released (TL4): while we hold it, a key of
  // 0 would tell waiters that its holder is dead (TL3). L1: the key is
  // cleared before the byte is dropped.
  std::uint64_t k = h.key;
  e->key.compare_exchange_strong(k, 0);
  h.role.reset();
  h.client = -1;
  h.key = 0;
}

// --- table operations -------------------------------------------------------

table_counts count_table(const pool_handle& h, const table_txn& t) noexcept {
  table_counts n;
  for (std::uint32_t m = 0; m < h.max_count(); ++m) {
    const std::uint32_t s = member_state_of(t.read(h.member_at(m)->state));
    if (s > static_cast<std::uint32_t>(member_state::stopping)) continue;  // garbage: counted nowhere
    ++n.by_state[s];
    if (s != static_cast<std::uint32_t>(member_state::empty)) ++n.members;
  }
  for (std::uint32_t c = 0; c < h.max_clients(); ++c) {
    const pool_client* e = h.client_at(c);
    if (t.read(e->wait_ticket) != 0 && client_alive(h, c, e->key.load(std::memory_order_relaxed))) ++n.waiters;
  }
  return n;
}

std::uint32_t sweep_dead_clients(pool_handle& h, table_txn& t) noexcept {
  std::uint32_t stopped = 0;
  for (std::uint32_t m = 0; m < h.max_count() && t.room() >= 8; ++m) {  // the rest at the next sweep
    pool_member* e = h.member_at(m);
    if (member_state_of(t.read(e->state)) != static_cast<std::uint32_t>(member_state::in_use)) continue;
    const std::uint64_t c = t.read(e->taker_client);
    if (c < h.max_clients() && client_alive(h, static_cast<std::uint32_t>(c), t.read(e->taker_key))) continue;
    stop_member(h, t, m, member_stop::consumer_died);  // pooler: a crashed consumer's member is replaced
    ++stopped;
  }
  for (std::uint32_t c = 0; c < h.max_clients() && t.room() >= 8; ++c) {
    pool_client* e = h.client_at(c);
    if (t.read(e->wait_ticket) == 0) continue;
    if (!client_alive(h, c, e->key.load(std::memory_order_relaxed))) t.write(e->wait_ticket, 0);
  }
  return stopped;
}

void make_available(pool_handle& h, table_txn& t, std::uint32_t m, bool keep_stamp) noexcept {
  pool_state* st = h.state();
  pool_member* e = h.member_at(m);
  // The oldest live waiter (FIFO by ticket); dead ones lose their place.
  std::int64_t best = -1;
  std::uint64_t best_ticket = UINT64_MAX;
  for (std::uint32_t c = 0; c < h.max_clients(); ++c) {
    pool_client* w = h.client_at(c);
    const std::uint64_t ticket = t.read(w->wait_ticket);
    if (ticket == 0 || ticket >= best_ticket) continue;
    if (!client_alive(h, c, w->key.load(std::memory_order_relaxed))) continue;  // a sweep clears its ticket
    best = c;
    best_ticket = ticket;
  }
  if (best >= 0 && t.read(st->removing) == 0) {
    pool_client* w = h.client_at(static_cast<std::uint32_t>(best));
    const std::uint64_t lease = t.read(e->leases) + 1;
    t.write(e->leases, lease);
    t.write(e->taker_client, static_cast<std::uint64_t>(best));
    t.write(e->taker_key, w->key.load(std::memory_order_relaxed));
    t.write(e->state, make_member_state(member_state::in_use));
    t.write(w->granted, (std::uint64_t{m} + 1) | (lease << 16));
    t.write(w->wait_ticket, 0);
    t.add(pool_counter::takes);
    t.add(pool_counter::granted);
    t.wake_client(static_cast<std::uint32_t>(best));
    return;
  }
  if (!keep_stamp) {
    const std::uint64_t stamp = t.read(st->next_stamp) + 1;
    t.write(st->next_stamp, stamp);
    t.write(e->stamp, stamp);
    t.write(e->idle_since_ns, mono_ns());
  }
  t.write(e->state, make_member_state(member_state::free));
}

void stop_member(pool_handle& h, table_txn& t, std::uint32_t m, member_stop why, bool given_back) noexcept {
  pool_member* e = h.member_at(m);
  // LG3/LG4: a lease still out on it ends now, in this section.
  const bool leased = member_state_of(t.read(e->state)) == static_cast<std::uint32_t>(member_state::in_use);
  if (leased && !given_back && why != member_stop::consumer_died) t.add(pool_counter::revoked_in_use);
  t.write(e->state, make_member_state(member_state::stopping, why));
  t.write(e->stop_signal_ns, 0);
  t.write(e->drain_count, 0);
  switch (why) {
    case member_stop::culled: t.add(pool_counter::killed_free_culled); break;
    case member_stop::unhealthy: t.add(pool_counter::killed_free_unhealthy); break;
    case member_stop::consumer_died: t.add(pool_counter::killed_in_use); break;  // LG3 (only ever in_use)
    case member_stop::crashed: t.add(pool_counter::crashed); break;
    case member_stop::start_timeout:
    case member_stop::init_failed: t.add(pool_counter::start_failures); break;
    case member_stop::expired:
      t.add(given_back ? pool_counter::expired_returned : pool_counter::expired_free);
      break;
    case member_stop::failed:  // counted as returns_fail by the caller
    case member_stop::removed:
    case member_stop::none: break;
  }
  t.wake_supervisor();
}

bool supervisor_alive(const pool_handle& h) noexcept {
  const pool_state* st = h.state();
  const std::uint64_t c = st->supervisor_client.load(std::memory_order_relaxed);
  return c < h.max_clients() && client_alive(h, static_cast<std::uint32_t>(c), st->supervisor_key.load(std::memory_order_relaxed));
}

std::uint64_t member_expiry(const pool_handle& h, std::uint32_t m, std::uint64_t gen, std::uint64_t started_ns) noexcept {
  const pool_header& p = h.hdr;
  if (p.max_lifetime_ms == 0 || started_ns == 0) return UINT64_MAX;
  std::int64_t life_ms = p.max_lifetime_ms;
  if (p.max_lifetime_jitter_ms != 0) {
    // The member's own offset in [-jitter, +jitter]: a hash of the pool's
    // incarnation, the entry and the generation (splitmix64's finaliser),
    // the same in every process that asks.
    std::uint64_t x = p.creator_key ^ (p.created_unix_ns * 0x9E3779B97F4A7C15ull) ^ (std::uint64_t{m} << 48) ^ gen;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    x ^= x >> 31;
    const std::uint64_t span = 2 * std::uint64_t{p.max_lifetime_jitter_ms} + 1;
    life_ms += static_cast<std::int64_t>(x % span) - static_cast<std::int64_t>(p.max_lifetime_jitter_ms);
  }
  // (jitter < lifetime: life_ms >= 1; a forged started_ns saturates.)
  const std::uint64_t life_ns = static_cast<std::uint64_t>(life_ms) * 1'000'000ull;
  return started_ns > UINT64_MAX - life_ns ? UINT64_MAX : started_ns + life_ns;
}

bool member_expired(const pool_handle& h, const table_txn& t, std::uint32_t m, std::uint64_t now) noexcept {
  if (h.hdr.max_lifetime_ms == 0) return false;
  const pool_member* e = h.member_at(m);
  return now >= member_expiry(h, m, t.read(e->generation), t.read(e->started_ns));
}

bool request_start(pool_handle& h, table_txn& t) noexcept {
  for (std::uint32_t m = 0; m < h.max_count(); ++m) {
    pool_member* e = h.member_at(m);
    if (member_state_of(t.read(e->state)) != static_cast<std::uint32_t>(member_state::empty)) continue;
    t.write(e->generation, t.read(e->generation) + 1);
    t.write(e->state, make_member_state(member_state::starting));
    t.write(e->worker_pid, 0);
    t.write(e->worker_ns, 0);
    t.write(e->worker_start, 0);
    t.write(e->started_ns, 0);  // 0: not begun; the supervisor sets it when it makes the box
    t.write(e->stamp, 0);
    t.write(e->ping_seq, 0);
    t.write(e->stop_signal_ns, 0);
    t.write(e->drain_count, 0);
    t.wake_supervisor();
    return true;
  }
  return false;
}

std::string_view to_string(member_stop why) noexcept {
  switch (why) {
    case member_stop::none: return "";
    case member_stop::culled: return "culled";
    case member_stop::failed: return "failed";
    case member_stop::consumer_died: return "consumer-died";
    case member_stop::unhealthy: return "unhealthy";
    case member_stop::crashed: return "crashed";
    case member_stop::start_timeout: return "start-timeout";
    case member_stop::removed: return "removed";
    case member_stop::expired: return "expired";
    case member_stop::init_failed: return "init-failed";
  }
  return "?";
}

}  // namespace shmbox::detail
