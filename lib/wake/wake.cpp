// lib/wake/wake.cpp - waking and waiting (wake.hpp): P6's wake of the owner with
// its eventfd lookup, the owner's sleep and waits on wake_seq, the
// space-waiter handshake (SYNC POINTs A/B) and the owner's busy backoff.
// Step labels: the protocol text at the top of ring.hpp.
#include "ring/wake.hpp"

#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <ctime>
#include <string_view>

#include "base/fault.hpp"
#include "base/futex.hpp"
#include "segment/liveness.hpp"
#include "wake/notify_hub.hpp"
#include "base/process.hpp"

namespace shmbox::detail {

void sleep_ns(std::uint64_t ns) noexcept {
  timespec ts{static_cast<time_t>(ns / 1'000'000'000ull), static_cast<long>(ns % 1'000'000'000ull)};
  ::nanosleep(&ts, nullptr);
}

// ---------------------------------------------------------------------------
// Producer -> owner (P6, L1, RUN)
// ---------------------------------------------------------------------------

namespace {

void wake_owner(mapped_box& m) noexcept {
  owner_record* o = m.owner();
  // release: the message we published is visible to the owner once it sees
  // wake_seq change (it re-reads the slot with acquire anyway). Pairs with
  // the acquire of owner_wake_seq() (owner_sleep, Owner::wait, the notify
  // hub's scan).
  o->wake_seq.fetch_add(1, std::memory_order_release);
  futex_wake(&o->wake_seq);
  o->wake_calls.fetch_add(1, std::memory_order_relaxed);  // relaxed: diagnostic counter
}

// Descriptor notify_fd_plus1 - 1 (`num`) of the owner with key `key`, taken
// into this process (pidfd_getfd), or -1. Only an owner of our pid namespace
// (its pid means it here); eventfd_of checks that it is in this very box, by
// the segment descriptor the owner published with it.
int take_owner_eventfd(const mapped_box& m, std::uint64_t key, std::uint32_t num) noexcept {
  // THE TRUST RULE (shm_file.hpp T7): the descriptor number is followed
  // only where nobody but this box's user may write it. eventfd_of proves
  // that the process named is in the box and that the descriptor is an
  // eventfd, not that it is this box's: a writer of a box others may write
  // could name another eventfd of the owner process (another box's
  // notify_fd, an application's semaphore) and have this producer add to
  // it. There the owner's doorbell is rung instead (its notify hub writes
  // the eventfd it made itself).
  if ((m.mode & 022) != 0) return -1;
  const owner_record* o = m.owner();
  if (!in_this_ns(o->owner_pid_ns.load(std::memory_order_relaxed))) return -1;  // relaxed: written with the key
  // relaxed: published with notify_fd_plus1 (release, acquired by the caller)
  const std::uint32_t seg = o->seg_fd_plus1.load(std::memory_order_relaxed);
  return eventfd_of(key_pid(key), static_cast<int>(num - 1), m.dev, m.ino, static_cast<int>(seg) - 1);
}

// The owner's notify eventfd as a descriptor of this process, or -1.
// pidfd_getfd (eventfd_of, process.cpp) once per owner (same user or
// CAP_SYS_PTRACE); producers that cannot do this ring the owner's doorbell
// (notify_hub.hpp).
int owner_eventfd(producer_ctx& p) noexcept {
  const owner_record* o = p.m->owner();
  // acquire: pairs with the release store of Owner::notify_fd (owner.cpp),
  // made after the eventfd exists.
  const std::uint32_t num = o->notify_fd_plus1.load(std::memory_order_acquire);
  // acquire: pairs with the seq_cst CAS that installed the owner's key
  // (take_ownership, lease.cpp).
  const std::uint64_t key = o->key.load(std::memory_order_acquire);
  if (num == 0 || num == kNotifyByBell || key == 0) return -1;  // (a group's member: the doorbell)
  // Had (or refused) for this owner and descriptor already.
  if (p.owner_fd_key == key && p.owner_fd_num == num) return p.owner_fd;
  if (p.owner_fd >= 0) ::close(p.owner_fd);
  p.owner_fd = -1;
  p.owner_fd_key = key;
  p.owner_fd_num = num;
  p.owner_fd = take_owner_eventfd(*p.m, key, num);
  return p.owner_fd;
}

}  // namespace

// The owner's eventfd, duplicated into this process by owner_eventfd.
producer_ctx::~producer_ctx() {
  if (owner_fd >= 0) ::close(owner_fd);
}

// P6 (and L1's wake): the owner's eventfd when it has one (first: an owner in
// an event loop wakes without a thread hop), then the futex. A producer that
// cannot write the eventfd (another user or pid namespace) rings the owner
// process's doorbell, and its notify hub writes the eventfd (notify_hub.hpp).
void wake_owner(producer_ctx& p) noexcept {
  SHMBOX_FAULT("producer.before_wake");  // published, owner asleep: its slice or the notify hub's scan finds it
  owner_record* o = p.m->owner();
  // The arming this wake-up is the notification of (see below).
  const std::uint32_t armed = o->state.load(std::memory_order_relaxed);
  // acquire: pairs with the release store of Owner::notify_fd (owner.cpp).
  if (o->notify_fd_plus1.load(std::memory_order_acquire) != 0) {
    const int fd = owner_eventfd(p);
    if (fd >= 0) {
      write_eventfd(fd);
    } else {
      // acquire: pairs with the seq_cst CAS that installed the owner's key (take_ownership).
      ring_bell(*p.m, o->key.load(std::memory_order_acquire));
      if (o->fd_fallback.load(std::memory_order_relaxed) == 0) {
        // For an owner of an older build (a waker thread per box, which sleeps
        // on this word and then relays wake_seq). release: pairs with its
        // acquire loads of fd_fallback.
        o->fd_fallback.store(1, std::memory_order_release);
        futex_wake(&o->fd_fallback);
      }
    }
  }
  SHMBOX_FAULT("producer.after_ring");  // the eventfd written (or the doorbell rung), wake_seq not bumped, notify not reverted
  wake_owner(*p.m);
  // pobox: an owner in notify reverts to passive as soon as the notification
  // is sent, and this wake-up is the notification. After the wake, so that a
  // producer that dies here leaves the state notify, which the owner's wait()
  // (and the notify hub's lost-wake scan) still act on.
  // A CAS from the word read before the wake-up: if the owner took the
  // message and armed again meanwhile (another arming count), this late
  // revert must not undo that arming.
  // relaxed: the state is shown to inspectors; the owner's wait() decides
  // from its own arming and the slots, not from this word.
  if (state_mode(armed) == owner_state::notify) {
    std::uint32_t expected = armed;
    o->state.compare_exchange_strong(expected, (armed & ~3u) | static_cast<std::uint32_t>(owner_state::passive),
                                     std::memory_order_relaxed);
  }
}

// ---------------------------------------------------------------------------
// The owner's waits
// ---------------------------------------------------------------------------

bool owner_sleep(owner_ctx& o, std::uint64_t until) noexcept {
  mapped_box& m = *o.m;
  owner_record* rec = m.owner();
  // Read wake_seq, then arm every lane (fails if anything arrived), then
  // futex-wait. A producer that sees the bit bumps wake_seq (P6): the wait
  // then returns at once.
  const std::uint32_t w = owner_wake_seq(*rec);
  bool armed = true;
  for (std::uint32_t l = 0; l < m.lane_count() && armed; ++l) armed = owner_arm_sleep(o, l);
  if (armed) futex_wait(&rec->wake_seq, w, until);
  for (std::uint32_t l = 0; l < m.lane_count(); ++l) owner_clear_sleep(o, l);
  return armed;
}

void owner_wait_wake(owner_record& rec, std::uint32_t seen, std::uint64_t until) noexcept {
  futex_wait(&rec.wake_seq, seen, until);
}

void ring_owner_fd(mapped_box& m) noexcept {
  const owner_record* o = m.owner();
  // acquire: pairs with the release store of Owner::notify_fd (owner_modes.cpp).
  const std::uint32_t num = o->notify_fd_plus1.load(std::memory_order_acquire);
  // acquire: pairs with the seq_cst CAS that installed the owner's key (take_ownership).
  const std::uint64_t key = o->key.load(std::memory_order_acquire);
  if (num == 0 || key == 0) return;
  if (const int fd = num == kNotifyByBell ? -1 : take_owner_eventfd(m, key, num); fd >= 0) {
    write_eventfd(fd);
    ::close(fd);
    return;
  }
  ring_bell(m, key);
}

void wake_owner_waiters(owner_record& rec) noexcept {
  // release: pairs with the acquire of owner_wake_seq() in the waiters: what
  // the caller stored before (a stop flag) is seen once they see the bump.
  rec.wake_seq.fetch_add(1, std::memory_order_release);
  futex_wake(&rec.wake_seq);
  futex_wake(&rec.fd_fallback);
}

void busy_backoff(unsigned& rounds, lazy_deadline& deadline, std::uint64_t now) noexcept {
  ++rounds;
  if (rounds < 64) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  } else if (rounds < 256) {
    ::sched_yield();
  } else {
    const std::uint64_t nap = std::min<std::uint64_t>(200'000, deadline.get() - std::min(now, deadline.get()));
    timespec ts{0, static_cast<long>(nap)};
    ::nanosleep(&ts, nullptr);
  }
}

// ---------------------------------------------------------------------------
// Space waiters (SYNC POINTs A/B)
// ---------------------------------------------------------------------------

// First spins briefly (the holder is usually mid-copy), then polls for up to
// w.spin.spin_ns (the box's or the call's adaptive wait: an owner draining a
// busy box frees a slot within microseconds), then sleeps on the lane's
// futex in 10 ms slices.
bool wait_for_space(const lane_view& L, std::uint64_t t, std::uint64_t watch, std::uint64_t seen, lazy_deadline& deadline,
                    space_wait& w) noexcept {
  if (deadline.timeout_ns == 0) return false;  // no wait at all
  if (w.spins < 64) {
    ++w.spins;
    cpu_relax();
    return true;
  }
  const std::uint64_t now = mono_ns();
  if (now >= deadline.get()) return false;
  // the owner may share our CPU: let it run now and then
  if (w.spin.spinning(now, 16)) return true;
  lane_header* h = L.hdr;
  // acquire: pairs with the release bump in wake_space_waiters_now (SYNC
  // POINT B): the frees before a bump we see are seen by our re-check.
  const std::uint32_t sp = h->space_seq.load(std::memory_order_acquire);
  h->space_wanted.store(1, std::memory_order_relaxed);
  // SYNC POINT A: StoreLoad between space_wanted = 1 and the re-check of the
  // slot; pairs with SYNC POINT B in wake_space_waiters() (wake.hpp). seq_cst:
  // only a full fence orders a store before a later load.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  // Sleep in slices so that a dead holder is noticed and repaired.
  std::uint64_t slice = 10'000'000;
  // The owner's half of the fence, for an owner whose B skips it (THE
  // ASYMMETRIC FENCE, wake.hpp). Refused: make every owner fence from now on.
  if (!fence_owners() && h->space_fence.load(std::memory_order_relaxed) == 0) {
    h->space_fence.store(1, std::memory_order_relaxed);
    // seq_cst: orders the word before our re-check, like space_wanted above.
    std::atomic_thread_fence(std::memory_order_seq_cst);
    slice = 1'000'000;  // an owner that has not seen the word yet may have freed a slot unseen
  }
  if (L.slot_for(watch)->seq.load(std::memory_order_relaxed) != seen || (h->tail.load(std::memory_order_relaxed) >> 1) != t)
    return true;
  if (L.gated) {
    // The gate moved since the wait was decided on it: retry (once: the new
    // limit is the one to wait on from here). A wait decided on a full slot
    // (kNoGate) takes the limit as it is now: the slot's re-check above is its own.
    const std::uint32_t lim = L.gate_limit();
    const bool moved = w.limit != space_wait::kNoGate && lim != w.limit;
    w.limit = lim;
    if (moved) return true;
  }
  futex_wait(&h->space_seq, sp, std::min(deadline.get(), now + slice));
  return true;
}

// ---------------------------------------------------------------------------
// The asymmetric fence (wake.hpp)
// ---------------------------------------------------------------------------

namespace {

long membarrier_call(int cmd) noexcept { return ::syscall(SYS_membarrier, cmd, 0u, 0); }

bool membarrier_disabled() noexcept {
  static const bool off = [] {
    const char* v = std::getenv("SHMBOX_NO_MEMBARRIER");
    return v != nullptr && *v != '\0' && std::string_view(v) != "0";
  }();
  return off;
}

}  // namespace

bool owner_light_fence() noexcept {
  // 0: not tried, 1: registered, 2: refused. Registration is per process
  // (kept across fork, undone by exec), and idempotent: racing threads are fine.
  static std::atomic<int> state{0};
  int s = state.load(std::memory_order_relaxed);  // relaxed: the kernel holds the state; this only caches it
  if (s == 0) {
    const long q = membarrier_disabled() ? -1 : membarrier_call(MEMBARRIER_CMD_QUERY);
    const bool ok = q >= 0 && (q & MEMBARRIER_CMD_GLOBAL_EXPEDITED) != 0 &&
                    membarrier_call(MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED) == 0;
    s = ok ? 1 : 2;
    state.store(s, std::memory_order_relaxed);
  }
  return s == 1;
}

bool fence_owners() noexcept {
  static std::atomic<bool> refused{false};
  if (refused.load(std::memory_order_relaxed) || membarrier_disabled()) return false;  // relaxed: a cache
  if (membarrier_call(MEMBARRIER_CMD_GLOBAL_EXPEDITED) == 0) return true;
  refused.store(true, std::memory_order_relaxed);
  return false;
}

void wake_space_waiters_now(lane_header* h) noexcept {
  h->space_wanted.store(0, std::memory_order_relaxed);
  // release: our frees happen before the waiter's retry; pairs with the
  // acquire load of space_seq in wait_for_space.
  h->space_seq.fetch_add(1, std::memory_order_release);
  futex_wake(&h->space_seq);
  h->space_wake_calls.fetch_add(1, std::memory_order_relaxed);  // relaxed: diagnostic counter
}

}  // namespace shmbox::detail
