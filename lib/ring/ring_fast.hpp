// lib/ring/ring_fast.hpp - THE FAST PATH of a FIFO post (ring.hpp P1-P6), inline
// so that Producer::post, loan and slot_loan::commit run it without calls.
// It handles only the common case: the slot at the tail is free for it
// (EMPTY(t)) and, in a stash or priority box's lane, nothing is parked (THE
// GATE then limits nothing the slot does not). Anything else (full, busy,
// parked messages, a lost CAS) returns false having claimed nothing, and the
// caller takes the general path (ring_post.cpp: fifo_claim), which decides
// it. Same steps, same order, same memory orders,
// same fault points as there.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "base/fault.hpp"
#include "segment/layout.hpp"
#include "ring/ring.hpp"
#include "segment/segment.hpp"
#include "ring/wake.hpp"

namespace shmbox::detail {

// PREFETCHW: fetch a line in exclusive state, ready for our stores (x86-64:
// every AMD CPU, Intel since Broadwell; older Intel CPUs execute it as a
// NOP). GCC emits it for __builtin_prefetch(p, 1) only with -mprfchw.
inline void prefetch_for_write(const void* p) noexcept {
#if defined(__x86_64__)
  asm volatile("prefetchw %0" : : "m"(*static_cast<const char*>(p)));
#else
  __builtin_prefetch(p, 1, 3);
#endif
}

// P1-P4 without the payload. The free slot may be one that another
// producer's eviction (E4) just freed for its own claim: taking it here is a
// plain store (no eviction by this post), and that evictor evicts again;
// its post reports both (producer_ctx::evicted, Producer::last_evicted).
__attribute__((always_inline)) inline bool claim_fast_inline(producer_ctx& p, const lane_view& L,
                                                             slot_claim& out) noexcept {
  lane_header* h = L.hdr;
  const std::uint64_t w = h->tail.load(std::memory_order_relaxed);  // relaxed: see fifo_claim
  const std::uint64_t t = w >> 1;
  slot_header* s = L.slot_for(t);
  // acquire: pairs with the release that freed the slot (T6, E4, R1)
  if (s->seq.load(std::memory_order_acquire) != make_seq(t, slot_state::empty, kActorNone)) return false;
  // THE GATE (ring.hpp) of a stash or priority lane: with nothing parked its
  // limit is the ring's, which the slot just checked; else fifo_claim decides.
  // relaxed: as limit_reached's read of the count (gate_limit), in the same place.
  if (L.fast_gate && L.hdr->parked.load(std::memory_order_relaxed) != 0) return false;
  // Ask for the slot's lines in exclusive state now: the tail CAS below
  // drains the store buffer, and stores still waiting for their lines would
  // make every post wait for the previous one's cache misses.
  prefetch_for_write(s);
  prefetch_for_write(reinterpret_cast<const std::byte*>(s) + 64);
  p.pe->op.store(make_op(op_kind::claim, L.index, t), std::memory_order_relaxed);  // P2
  SHMBOX_FAULT("producer.after_announce");
  std::uint64_t expected = w;
  // P3: the same CAS as fifo_claim's (ring_post.cpp), where its pairs are named:
  // release publishes P2's op to R1; acquire pairs with the owner's arming CAS.
  if (!h->tail.compare_exchange_strong(expected, ((t + 1) << 1) | (w & 1), std::memory_order_seq_cst,
                                       std::memory_order_relaxed))  // P3
    return false;
  a64& stored = p.m->producer_counters(p.entry, L.index)->stored;  // P4 (a single-writer counter: see bump)
  stored.store(stored.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  SHMBOX_FAULT("producer.after_claim");
  out.slot = s;
  out.lane = L.index;
  out.where = t;
  out.wake = (w & 1) != 0;
  return true;
}

// P4's length, then P5-P6: publishes claimed FIFO slot `s` (position `t`)
// whose payload is written; `wake`: the owner was asleep at the claim.
__attribute__((always_inline)) inline void fifo_publish_inline(producer_ctx& p, slot_header* s, std::uint64_t t,
                                                               bool wake, std::size_t size) noexcept {
  s->length.store(static_cast<std::uint32_t>(size), std::memory_order_relaxed);  // relaxed: published by P5
  s->writer.store(p.entry, std::memory_order_relaxed);
  SHMBOX_FAULT("producer.before_publish");
  // P5 release: publishes payload and length; pairs with the acquire in T1.
  s->seq.store(make_seq(t, slot_state::full, p.rep.actor), std::memory_order_release);
  if (wake) wake_owner(p);  // P6 (wake.cpp)
}
__attribute__((always_inline)) inline void fifo_publish_inline(producer_ctx& p, const slot_claim& k,
                                                               std::size_t size) noexcept {
  fifo_publish_inline(p, k.slot, k.where, k.wake, size);
}

}  // namespace shmbox::detail
