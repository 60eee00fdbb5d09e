// lib/ring/wake.hpp - WAKING AND WAITING: every futex wait and wake of the slot
// protocol and of the owner's receive, the owner's eventfd, and the spins
// that come before a sleep. The protocol text is in ring.hpp ("WAKE-UPS",
// P6, T7, L1 and SYNC POINTs A-D); the raw system calls are futex.hpp.
//
//   wake_owner         P6 / L1: a producer wakes a sleeping owner (eventfd of
//                      an owner in an event loop, then the futex wake_seq)
//   owner_sleep        the owner's sleep: read wake_seq, arm every lane
//                      (owner_arm_sleep, ring_take.cpp), futex-wait
//   owner_wait_wake    the owner's other waits on wake_seq (Owner::wait)
//   wake_owner_waiters wakes whatever waits on wake_seq / fd_fallback
//   wait_for_space     SYNC POINT A: a producer waits for a free slot
//   wake_space_waiters SYNC POINT B: whoever frees slots wakes it
//   adaptive_spin      the adaptive wait (options::spin, post_options::spin, receive_options::spin):
//                      poll this long, yielding now and then, before sleeping
//   busy_backoff       the owner's pause / yield / nap behind an unpublished slot
//
// The eventfd of another process is had through eventfd_of (process.cpp:
// pidfd_getfd), the one place shmbox takes another process's descriptor.
#pragma once

#include <sched.h>

#include <atomic>
#include <cstdint>

#include "segment/layout.hpp"
#include "ring/ring.hpp"
#include "segment/segment.hpp"

namespace shmbox::detail {

// Library-internal: not exported (calls to them are direct, no PLT).
#pragma GCC visibility push(hidden)

// A sleeping owner looks at its lanes at least this often. A producer that
// published a message and died before its wake-up (P5-P6 in ring.hpp) leaves
// the owner asleep with a message in the box; nothing else would wake it
// (found by model/ring.pml). An idle owner pays one short wake-up per slice.
constexpr std::uint64_t kLostWakeSliceNs = 250'000'000;
// While it spins (the adaptive wait), an owner or a producer waiting for
// space yields its CPU this often, so that its peer on the same CPU gets to
// run (on a 2-core machine under load both often share one).
constexpr std::uint64_t kSpinYieldNs = 5'000;

inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

void sleep_ns(std::uint64_t ns) noexcept;

// ---------------------------------------------------------------------------
// Producer -> owner
// ---------------------------------------------------------------------------

// P6 (and L1's wake, and RUN's): the owner's eventfd when it has one (an
// owner in an event loop wakes without a thread hop), then the futex.
void wake_owner(producer_ctx& p) noexcept;

// ---------------------------------------------------------------------------
// The owner's waits
// ---------------------------------------------------------------------------

// The owner's sleep in receive: reads wake_seq, arms every lane (fails if
// anything arrived or is claimed), futex-waits on wake_seq until `until` (an
// absolute CLOCK_MONOTONIC time), then clears the sleeping bits. Returns
// whether every lane was armed (false: something is claimed or stored).
bool owner_sleep(owner_ctx& o, std::uint64_t until) noexcept;

// The value a wait on wake_seq then compares with. acquire: pairs with the
// release bump of every waker (wake_owner here (P6), wake_owner_waiters,
// Box::request_give_away in box.cpp).
inline std::uint32_t owner_wake_seq(const owner_record& rec) noexcept {
  return rec.wake_seq.load(std::memory_order_acquire);
}
// Sleeps while wake_seq == seen, until `until`.
void owner_wait_wake(owner_record& rec, std::uint32_t seen, std::uint64_t until) noexcept;
// Wakes every waiter on wake_seq (bumps it first), and on fd_fallback (the
// per-box waker threads of owners of older builds).
void wake_owner_waiters(owner_record& rec) noexcept;
// Makes the notify_fd of box m's owner readable (a give-away request for an
// owner in an event loop): written directly where pidfd_getfd allows it,
// else through the owner process's doorbell (notify_hub.hpp). One-shot.
void ring_owner_fd(mapped_box& m) noexcept;

// ---------------------------------------------------------------------------
// Spinning before a sleep
// ---------------------------------------------------------------------------

// The adaptive wait: from the first call on, keeps saying "spin" for spin_ns
// (pausing `pauses` times per call and yielding every kSpinYieldNs), then
// "sleep". One per wait (a receive call, a post's wait for space).
struct adaptive_spin {
  std::uint64_t spin_ns = 0;
  std::uint64_t until = 0;  // 0: not started
  std::uint64_t next_yield = 0;

  bool spinning(std::uint64_t now, unsigned pauses) noexcept {
    if (until == 0) {
      until = now + spin_ns;
      next_yield = now + kSpinYieldNs;
    }
    if (now >= until) return false;
    for (unsigned i = 0; i < pauses; ++i) cpu_relax();
    // A peer that shares our CPU cannot make progress while we spin: give it
    // the CPU now and then (a yield with nothing else to run returns at once).
    if (now >= next_yield) {
      ::sched_yield();
      next_yield = now + kSpinYieldNs;
    }
    return true;
  }
};

// How long a producer has been waiting for space, across the retries of one post.
struct space_wait {
  unsigned spins = 0;  // short pauses first: the holder is usually mid-copy
  adaptive_spin spin;  // then the adaptive wait (spin.spin_ns: the box's or the call's)
  // A gated lane (THE GATE, THE LIMIT): the limit the wait was decided on
  // (limit_reached sets it; a change wakes the wait once), kNoGate while no
  // decision of this post looked at it (a full slot: the slot decides).
  static constexpr std::uint32_t kNoGate = UINT32_MAX;
  std::uint32_t limit = kNoGate;
};

// Waiting for a writer that claimed a slot and has not published it yet (or
// died: the take repairs that after a grace period): pause, then yield, then
// short naps (at most until the deadline).
void busy_backoff(unsigned& rounds, lazy_deadline& deadline, std::uint64_t now) noexcept;

// ---------------------------------------------------------------------------
// Space waiters (SYNC POINTs A/B)
// ---------------------------------------------------------------------------

// Waits for the slot of position `watch` (seen: its seq) to change, the tail
// to leave t, or (a gated lane) its limit to leave w.limit: the slot of
// position t itself, or a gated lane's gate position (THE LIMIT). A limit
// that moved returns once and becomes w.limit: a wait on a full slot sleeps
// whatever the gate did (before, a gated lane whose ring was full never
// slept: every retry ran membarrier and returned). false: the deadline
// passed. SYNC POINT A.
bool wait_for_space(const lane_view& L, std::uint64_t t, std::uint64_t watch, std::uint64_t seen, lazy_deadline& deadline,
                    space_wait& w) noexcept;

void wake_space_waiters_now(lane_header* h) noexcept;

// THE ASYMMETRIC FENCE of SYNC POINTs A/B (membarrier(2)). SYNC POINT B runs
// after every message an owner takes; SYNC POINT A only when a producer is
// about to sleep for space. So B's StoreLoad fence (a third of a one-message
// receive's cost) moves to A's side: an owner process registers once for
// MEMBARRIER_CMD_GLOBAL_EXPEDITED, and its B is then a compiler barrier only;
// a producer about to sleep runs membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED)
// after its own fence, which makes every CPU running a registered process
// execute a full barrier. Either that barrier comes before the owner's frees
// (its later load of space_wanted sees the producer's 1) or after them (the
// frees are visible to the producer's re-check once membarrier returns):
// one of the two sees the other, as with two fences. It works across users
// and pid namespaces (the kernel looks at every CPU).
//   Refused somewhere (seccomp, an old kernel, SHMBOX_NO_MEMBARRIER=1 in the
// environment): an owner that cannot register fences as before; a producer
// whose membarrier fails sets the lane's sticky space_fence word, after which
// every owner fences at B again. Only the waits that began before an owner
// saw that word can sleep past a free: their first sleep is 1 ms instead of
// the 10 ms slice (wait_for_space).
// owner_light_fence: registers this process (once); true if its SYNC POINT B
// may skip the fence. fence_owners: A's membarrier; false if refused.
bool owner_light_fence() noexcept;
bool fence_owners() noexcept;

// After freeing slots (T6/T7, L3, C4, an abort): wakes producers waiting for
// space. Inline: the common case (nobody waits) is a fence and a load, or
// (`light`: an owner whose process registered, owner_light_fence) a compiler
// barrier and two loads of one line.
inline void wake_space_waiters(const lane_view& L, bool light = false) noexcept {
  lane_header* h = L.hdr;
  // SYNC POINT B: StoreLoad between our frees (T6 / L3) and reading
  // space_wanted; pairs with SYNC POINT A in wait_for_space() (wake.cpp).
  // relaxed (space_fence): a stale 0 is the window described above.
  if (light && h->space_fence.load(std::memory_order_relaxed) == 0)
    std::atomic_signal_fence(std::memory_order_seq_cst);  // the asymmetric form: A's membarrier fences for us
  else
    std::atomic_thread_fence(std::memory_order_seq_cst);
  if (h->space_wanted.load(std::memory_order_relaxed) == 0) return;
  wake_space_waiters_now(h);
}

#pragma GCC visibility pop

}  // namespace shmbox::detail
