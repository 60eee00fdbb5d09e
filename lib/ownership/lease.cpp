// lib/ownership/lease.cpp - the owner record: owner view, lease clock, heir table,
// transfer record. Changes of owner follow handover.hpp.
#include "ownership/lease.hpp"

#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "base/fault.hpp"
#include "base/futex.hpp"
#include "base/process.hpp"

namespace shmbox::detail {
namespace {


// Writes one to the eventfd `fd` of the heir `h` (best effort: waiters also
// wake on the transfer_seq futex within their fallback slice). Only an heir of our pid namespace (its pid means it here);
// eventfd_of checks that it maps this very segment (the heir table is
// writable by every user the box lets in: an entry may name any process and
// any of its descriptors).
void poke_eventfd(const mapped_box& m, const heir_view& h) noexcept {
  if (h.wake_fd < 0 || !in_this_ns(h.pid_ns)) return;
  // Not in a box others may write (T7): an entry written there could name
  // any eventfd of a process in the box (eventfd_of cannot tell which is
  // the heir's); its heir wakes on the transfer_seq futex instead.
  if ((m.mode & 022) != 0) return;
  const int theirs = eventfd_of(key_pid(h.key), h.wake_fd, m.dev, m.ino);
  if (theirs < 0) return;
  write_eventfd(theirs);
  ::close(theirs);
}

}  // namespace

void store_data(a64* words, std::string_view bytes) noexcept {
  const std::size_t n = std::min<std::size_t>(bytes.size(), kHeirDataMax);
  for (std::size_t i = 0; i < kHeirDataMax / 8; ++i) {
    std::uint64_t w = 0;
    if (8 * i < n) std::memcpy(&w, bytes.data() + 8 * i, std::min<std::size_t>(8, n - 8 * i));
    words[i].store(w, std::memory_order_relaxed);
  }
}

std::string load_data(const a64* words, std::uint64_t len) {
  char buf[kHeirDataMax];
  for (std::size_t i = 0; i < kHeirDataMax / 8; ++i) {
    const std::uint64_t w = words[i].load(std::memory_order_relaxed);
    std::memcpy(buf + 8 * i, &w, 8);
  }
  return std::string(buf, static_cast<std::size_t>(std::min<std::uint64_t>(len, kHeirDataMax)));
}

owner_view view_owner(const mapped_box& m) noexcept {
  const owner_record* rec = m.owner();
  owner_view v;
  v.key = rec->key.load(std::memory_order_acquire);  // acquire: pairs with the CAS in take_ownership
  v.epoch = rec->epoch.load(std::memory_order_acquire);
  v.pid_ns = rec->owner_pid_ns.load(std::memory_order_relaxed);
  v.alive = role_alive(m, owner_byte(m), v.key);
  v.expired = v.alive && mono_ns() > lease_deadline_ns(m);
  return v;
}

std::uint64_t lease_deadline_ns(const mapped_box& m) noexcept {
  if (m.lease_ms() == 0) return UINT64_MAX;
  // relaxed: a renewal seen late only delays a takeover a little
  return m.owner()->lease_renewed_ns.load(std::memory_order_relaxed) + std::uint64_t{m.lease_ms()} * 1'000'000;
}

void renew_lease(mapped_box& m) noexcept {
  if (m.lease_ms() != 0) m.owner()->lease_renewed_ns.store(mono_ns(), std::memory_order_relaxed);
}

std::vector<heir_view> list_heirs(const mapped_box& m, bool prune) noexcept {
  std::vector<heir_view> out;
  for (std::uint32_t i = 0; i < kHeirSlots; ++i) {
    heir_entry* e = m.heir(i);
    const std::uint64_t key = e->key.load(std::memory_order_acquire);
    const std::uint64_t seq = e->seq.load(std::memory_order_acquire);  // acquire: pairs with enlist's release
    if (key == 0 || seq == 0) continue;
    heir_view h;
    h.index = i;
    h.key = key;
    h.seq = seq;
    h.alive = role_alive(m, heir_byte(m, i), key);
    h.pid_ns = e->pid_ns.load(std::memory_order_relaxed);
    h.listener = (e->flags.load(std::memory_order_relaxed) & kHeirListenerOnly) != 0;
    h.wake_fd = e->wake_fd.load(std::memory_order_relaxed);
    h.registered_unix_ns = e->registered_unix_ns.load(std::memory_order_relaxed);
    h.data = load_data(e->data, e->data_len.load(std::memory_order_relaxed));
    // Re-registered while we copied (enlist zeroes seq first, stores it last)?
    std::atomic_thread_fence(std::memory_order_acquire);
    if (e->seq.load(std::memory_order_relaxed) != seq || e->key.load(std::memory_order_relaxed) != key) continue;
    if (!h.alive && prune) {
      // Dead heirs are skipped and removed.
      std::uint64_t expected = key;
      if (e->key.compare_exchange_strong(expected, 0, std::memory_order_acq_rel, std::memory_order_relaxed))
        e->seq.store(0, std::memory_order_relaxed);
      continue;
    }
    out.push_back(std::move(h));
  }
  std::sort(out.begin(), out.end(), [](const heir_view& a, const heir_view& b) { return a.seq < b.seq; });
  return out;
}

std::optional<heir_view> first_live_heir(const mapped_box& m) noexcept {
  const std::uint64_t owner = m.owner()->key.load(std::memory_order_acquire);
  for (heir_view& h : list_heirs(m, true))
    if (h.alive && !h.listener && h.key != owner) return std::move(h);
  return std::nullopt;
}

bool enlist(mapped_box& m, std::string_view data, bool listener, int wake_fd, std::uint32_t& index,
            role_lock& lock) noexcept {
  const std::uint64_t me = self_key();
  if (me == 0 || data.size() > kHeirDataMax) return false;
  // liveness.hpp L7: one deadline for every entry tried; an entry whose byte
  // another process holds past it is skipped, as a producer's attach does.
  const std::uint64_t give_up = mono_ns() + kRoleLockWaitNs;
  for (int pass = 0; pass < 2; ++pass) {
    for (std::uint32_t i = 0; i < kHeirSlots; ++i) {
      heir_entry* e = m.heir(i);
      std::uint64_t k = e->key.load(std::memory_order_acquire);
      // Free: no key (pass 0) or a dead heir's (pass 1), and in both cases
      // nobody holds the byte (liveness.hpp L1: a byte speaks for the key
      // it is held for). A key cleared while its byte is still held is not
      // free: an heir's entry withdrawn by its own takeover while its Heir
      // handle still holds the byte (heir.cpp lets go of it right after), or
      // another's enlist between its lock and its CAS. An heir there would
      // read as alive by that other holder's lock, also once dead, and the
      // heirs behind it would wait for ever (gencheck's heir-entry-lock).
      if ((pass == 0 ? k != 0 : k == 0) || lock_held(m, heir_byte(m, i))) continue;
      // L1: the byte first, then the key.
      if (!lock.lock(m, heir_byte(m, i), give_up)) {
        if (errno == EAGAIN || errno == EINTR) continue;
        return false;
      }
      if (!e->key.compare_exchange_strong(k, me, std::memory_order_acq_rel, std::memory_order_relaxed)) {
        lock.unlock(heir_byte(m, i));
        continue;
      }
      e->seq.store(0, std::memory_order_relaxed);
      e->pid_ns.store(self_pid_ns(), std::memory_order_relaxed);
      e->flags.store(listener ? kHeirListenerOnly : 0, std::memory_order_relaxed);
      e->wake_fd.store(wake_fd, std::memory_order_relaxed);
      e->registered_unix_ns.store(unix_ns(), std::memory_order_relaxed);
      store_data(e->data, data);
      e->data_len.store(static_cast<std::uint32_t>(data.size()), std::memory_order_relaxed);
      const std::uint64_t seq = m.owner()->heir_seq.fetch_add(1, std::memory_order_relaxed) + 1;
      e->seq.store(seq, std::memory_order_release);  // release: the entry is complete
      index = i;
      return true;
    }
  }
  return false;
}

void withdraw(mapped_box& m, std::uint32_t index, std::uint64_t key, role_lock* lock) noexcept {
  if (index >= kHeirSlots) return;
  heir_entry* e = m.heir(index);
  if (e->key.load(std::memory_order_acquire) == key) {
    e->seq.store(0, std::memory_order_relaxed);
    std::uint64_t expected = key;
    e->key.compare_exchange_strong(expected, 0, std::memory_order_release, std::memory_order_relaxed);
  }
  if (lock != nullptr) lock->unlock(heir_byte(m, index));  // L1: after the key is cleared
}

void signal_waiters(mapped_box& m, std::uint64_t only_key) noexcept {
  owner_record* rec = m.owner();
  rec->transfer_seq.fetch_add(1, std::memory_order_release);  // release: what we changed is visible to waiters
  futex_wake(&rec->transfer_seq);
  for (const heir_view& h : list_heirs(m, false))
    if (h.alive && (only_key == 0 || h.key == only_key)) poke_eventfd(m, h);
}

transfer_view read_transfer(const mapped_box& m) noexcept {
  const owner_record* rec = m.owner();
  transfer_view t;
  for (int tries = 0; tries < 16; ++tries) {
    const std::uint64_t e = rec->tr_epoch.load(std::memory_order_acquire);
    if (e == 0) return {};
    t.epoch = e;
    t.from_key = rec->tr_from_key.load(std::memory_order_relaxed);
    t.to_key = rec->tr_to_key.load(std::memory_order_relaxed);
    t.from_ns = rec->tr_from_ns.load(std::memory_order_relaxed);
    t.to_ns = rec->tr_to_ns.load(std::memory_order_relaxed);
    t.unix_ns = rec->tr_unix_ns.load(std::memory_order_relaxed);
    const std::uint32_t r = rec->tr_reason.load(std::memory_order_relaxed);
    t.reason = r <= static_cast<std::uint32_t>(transfer_reason::lease_expired) ? static_cast<transfer_reason>(r)
                                                                              : transfer_reason::none;
    t.data = load_data(rec->tr_data, rec->tr_data_len.load(std::memory_order_relaxed));
    std::atomic_thread_fence(std::memory_order_acquire);
    if (rec->tr_epoch.load(std::memory_order_relaxed) == e) return t;
  }
  return t;
}

}  // namespace shmbox::detail
