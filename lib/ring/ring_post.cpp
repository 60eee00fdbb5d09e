// lib/ring/ring_post.cpp - POSTING in the slot protocol (ring.hpp): the general
// path of a FIFO post P1-P6 (fifo_claim; the inline fast path is
// ring_fast.hpp), EVICT E1-E4 (drop_oldest), ABORT (a loan given back), RUN
// (post_batch: one claim for k positions), and the entry points that pick
// the FIFO or the lifo path (ring_lifo.cpp). The waits for space (SYNC POINT
// A) and P6's wake are in wake.cpp.
#include <algorithm>
#include <cstring>
#include <string>

#include "base/errors.hpp"
#include "base/fault.hpp"
#include "base/process.hpp"
#include "ring/ring.hpp"
#include "ring/ring_fast.hpp"
#include "ring/ring_internal.hpp"
#include "ring/wake.hpp"

namespace shmbox::detail {

// E1-E4. Returns true when the slot of q is now free for q + cap.
bool evict_fifo(producer_ctx& p, const lane_view& L, std::uint64_t q, std::uint64_t seen, op_kind kind,
                [[maybe_unused]] bool by_resize) noexcept {
  a64& counter = removal_counter(p.m->producer_counters(p.entry, L.index), kind);
  const std::uint64_t before = counter.load(std::memory_order_relaxed);
  p.pe->op_before_a.store(before, std::memory_order_relaxed);
  // relaxed: published by the seq_cst CAS below to whoever sees the slot taken by us
  p.pe->op.store(make_op(kind, L.index, q), std::memory_order_relaxed);
  slot_header* s = L.slot_for(q);
  std::uint64_t expected = seen;
  // E2. acquire: pairs with P5's release (the payload we may capture); release: publishes
  // our E1 op to repairers (R2/R3 load the slot, then the op, with acquire).
  // seq_cst: kept as written; the protocol is model-checked (model/*.pml) under SC, and the pairs named need only acq_rel.
  if (!s->seq.compare_exchange_strong(expected, make_seq(q, slot_state::taken, p.rep.actor), std::memory_order_seq_cst,
                                      std::memory_order_relaxed))
    return false;
  if (!by_resize) SHMBOX_FAULT("producer.evict_taken");  // E2 done, E3 not: the message is in no counter yet
  if (p.capture) {  // ours now: stable until we free it
    const std::uint32_t len = std::min(s->length.load(std::memory_order_relaxed), L.payload);
    p.captured.emplace_back(reinterpret_cast<const char*>(lane_view::payload_of(s)), len);
  }
  counter.store(before + 1, std::memory_order_relaxed);
  ++p.evicted;  // the caller's own count: what its post reports (E3)
  SHMBOX_FAULT(by_resize ? "resize.mid_drop" : "producer.mid_evict");
  // release: pairs with the acquire of the producer claiming q + cap
  s->seq.store(make_seq(q + L.capacity, slot_state::empty, kActorNone), std::memory_order_release);
  return true;
}

// THE QUOTA. Positions below the owner's published head are finished, and
// those below t - cap are in no slot any more; those below the tail when
// this handle took its entry are its previous holders' (Q1). Every other
// position of ours still waiting shows FULL(q, us). Only this handle adds
// such slots (one thread at a time), and others only take them away, so
// the count can only be high, never low, by the time the caller claims.
own_messages count_own(const producer_ctx& p, const lane_view& L, std::uint64_t t, std::uint32_t stop_at) noexcept {
  own_messages r;
  const std::uint64_t cap = L.capacity;
  // acquire: pairs with T7's release of the head (every position before it is finished)
  std::uint64_t q = std::max({L.hdr->head.load(std::memory_order_acquire), t > cap ? t - cap : 0, p.attached_tail[L.index]});
  if (q >= t || t - q < stop_at) return r;  // fewer positions than the quota: cannot hold it
  for (; q < t && r.n < stop_at; ++q) {
    // acquire: pairs with our own P5 (nothing to read) and with whoever moved the slot on
    // (so that an eviction of q that follows sees the payload it may capture)
    const std::uint64_t seen = L.slot_for(q)->seq.load(std::memory_order_acquire);
    if (seen != make_seq(q, slot_state::full, p.rep.actor)) continue;
    if (r.n++ == 0) {
      r.oldest = q;
      r.oldest_seen = seen;
    }
  }
  return r;
}

bool limit_reached(const lane_view& L, std::uint64_t t, std::uint64_t& gate, std::uint64_t& gate_seen,
                   std::uint32_t& limit) noexcept {
  if (!L.gated) return false;
  // A stash box: parked messages of this lane count against its limit (ring.hpp THE STASH).
  const std::uint32_t lim = limit = L.gate_limit();
  if (lim >= L.capacity) return false;  // the ring's own check (slot(t)) is the limit
  if (lim == 0) {
    // A priority box's lane whose store holds its limit (PRIORITY BOXES; keep-old
    // policies only): closed until the owner delivers one, whatever the ring holds.
    // acquire: as below
    gate = L.hdr->head.load(std::memory_order_acquire);
    gate_seen = L.slot_for(gate)->seq.load(std::memory_order_acquire);
    return true;
  }
  if (L.pol == policy::drop_oldest) {
    // Positions are finished in order here (the owner from the head, evictions
    // from the oldest): position t - lim finished means every earlier one is.
    if (t < lim) return false;
    gate = t - lim;
    // acquire: pairs with the release that finished the position (T6, E4, R1, R2):
    // what we then read of the lane (the head, for an eviction) is at least as new.
    gate_seen = L.slot_for(gate)->seq.load(std::memory_order_acquire);
    // Finished: the slot has moved on to gate + capacity (or a later lap).
    return pos_diff(seq_pos(gate_seen), gate) < static_cast<std::int64_t>(L.capacity);
  }
  // Keep-old lanes (reject, drop_newest, block): a shrink drops the NEWEST
  // positions, so a finished t - lim proves nothing; the owner's published
  // head does: every position before it is finished, so t - head bounds the
  // depth (from above: the owner publishes it once per receive call).
  // acquire: pairs with T7's release of the head.
  const std::uint64_t head = L.hdr->head.load(std::memory_order_acquire);
  if (head >= t || t - head < lim) return false;
  gate = head;  // what to wait on: the owner finishing it
  // acquire: as above
  gate_seen = L.slot_for(gate)->seq.load(std::memory_order_acquire);
  // A shrink dropped newest positions the owner has not passed yet: [head, t)
  // has holes, so count what it holds (only until the owner passes the mark).
  // acquire: pairs with the resizer's release of the mark, stored before its
  // drops; an older mark only leaves the check above, which refuses early.
  if (L.hdr->shrink_mark.load(std::memory_order_acquire) > head) {
    std::uint64_t held = 0;
    for (std::uint64_t q = std::max(head, t > L.capacity ? t - L.capacity : 0); q < t && held < lim; ++q)
      // relaxed: a count; a slot we see finished is finished (positions only move on)
      held += pos_diff(seq_pos(L.slot_for(q)->seq.load(std::memory_order_relaxed)), q) == 0;
    if (held < lim) return false;
  }
  return true;
}

namespace {

// drop_oldest at a resizable lane's limit: evicts the oldest message the
// lane holds (E1-E4 on it), looking from the owner's published head (or
// this handle's last eviction, if later) up to the gate position. Returns
// 1 when it evicted one or found the gate finished meanwhile (retry P1), 0
// when nothing up to the gate can be evicted now (claimed and not yet
// written, or held: being read, committed, evicted or repaired, maybe by a
// dead process): *busy_pos/*busy_seen name the oldest such slot, for the
// caller to repair (R1-R3) and wait on; -1 on a lost race (retry). (The
// hint skips positions this handle saw finished or evicted; one given back
// to FULL later, by a lease owner that lost its box, waits for the owner.)
int evict_oldest(producer_ctx& p, const lane_view& L, std::uint64_t t, std::uint64_t gate, std::uint64_t& busy_pos,
                 std::uint64_t& busy_seen) noexcept {
  const std::uint64_t cap = L.capacity;
  // acquire: pairs with T7's release of the head: positions before it are finished.
  std::uint64_t q = std::max(L.hdr->head.load(std::memory_order_acquire), t > cap ? t - cap : 0);
  q = std::max(q, p.evict_from[L.index]);
  bool busy = false;
  for (; q <= gate; ++q) {
    // acquire: pairs with P5's release (the payload evict_fifo may capture)
    const std::uint64_t seen = L.slot_for(q)->seq.load(std::memory_order_acquire);
    const std::int64_t d = pos_diff(seq_pos(seen), q);
    if (d >= static_cast<std::int64_t>(cap)) continue;  // finished
    if (d != 0) return -1;                               // not yet claimable: our view is stale
    if (seq_state(seen) == slot_state::full) {
      if (!evict_fifo(p, L, q, seen)) return -1;
      p.evict_from[L.index] = q + 1;
      return 1;
    }
    if (!busy) {  // the oldest slot someone else holds: what we wait on if nothing is evictable
      busy = true;
      busy_pos = q;
      busy_seen = seen;
    }
  }
  return busy ? 0 : 1;
}

void write_payload(slot_header* s, const void* data, std::size_t size) noexcept {
  std::byte* dst = lane_view::payload_of(s);
#if defined(SHMBOX_FAULT_INJECTION)
  if (g_fault_armed) {
    const std::size_t half = size / 2;
    if (half != 0) std::memcpy(dst, data, half);  // (data may be null when size is 0)
    SHMBOX_FAULT("producer.mid_payload");
    if (size != half) std::memcpy(dst + half, static_cast<const std::byte*>(data) + half, size - half);
    return;
  }
#endif
  if (size != 0) std::memcpy(dst, data, size);
}


// P1-P4 without the payload: claims position t for one message. stored /
// stored_evicted with `out` filled, or the outcome a post gets (counted).
post_status fifo_claim(producer_ctx& p, const lane_view& L, producer_lane_counters* c, lazy_deadline& deadline,
                       slot_claim& out) noexcept {
  lane_header* h = L.hdr;
  const std::uint64_t cap = L.capacity;
  // Every eviction of this call, here and in R3 (producer_maybe_repair),
  // counts in p.evicted: the status says stored_evicted when there was any.
  const std::uint32_t evicted_before = p.evicted;
  std::uint64_t stuck_since = 0;
  space_wait waiting;
  waiting.spin.spin_ns = p.spin_ns;
  auto give_up = [&](a64& counter, post_status st) {
    p.pe->op.store(0, std::memory_order_relaxed);  // we hold no claim
    if (st != post_status::timeout || !p.quiet_timeout) bump(counter);  // (post_options::quiet_timeout)
    return st;
  };
  for (;;) {
    // relaxed: the slot's sequence word (acquire, below) decides; a stale tail
    // only makes the CAS fail.
    const std::uint64_t w = h->tail.load(std::memory_order_relaxed);
    const std::uint64_t t = w >> 1;
    slot_header* s = L.slot_for(t);
    // acquire: pairs with the release that freed the slot (T6, E4, R1), so the
    // previous holder's reads of the payload happen before our writes.
    const std::uint64_t seen = s->seq.load(std::memory_order_acquire);
    const std::int64_t d = pos_diff(seq_pos(seen), t);
    const slot_state st = seq_state(seen);

    // THE LIMIT of a resizable lane: full once position t - limit is not finished.
    if (std::uint64_t g = 0, gseen = 0; d == 0 && st == slot_state::empty && limit_reached(L, t, g, gseen, waiting.limit)) {
      p.pe->op.store(0, std::memory_order_relaxed);  // we hold no claim (as below)
      std::uint64_t wait_pos = g, wait_seen = gseen;
      switch (L.pol) {
        case policy::reject:
          if (seq_state(gseen) != slot_state::full) producer_maybe_repair(p, L, g, gseen, stuck_since);
          return give_up(c->rejected, post_status::full);
        case policy::drop_newest:
          if (seq_state(gseen) != slot_state::full) producer_maybe_repair(p, L, g, gseen, stuck_since);
          return give_up(c->dropped_new, post_status::dropped);
        case policy::drop_oldest: {
          const int r = evict_oldest(p, L, t, g, wait_pos, wait_seen);
          if (r != 0) continue;
          producer_maybe_repair(p, L, wait_pos, wait_seen, stuck_since);
          break;
        }
        case policy::block:
        case policy::lifo:
          if (seq_state(gseen) != slot_state::full) producer_maybe_repair(p, L, g, gseen, stuck_since);
          break;
      }
      if (!wait_for_space(L, t, wait_pos, wait_seen, deadline, waiting)) return give_up(c->timeouts, post_status::timeout);
      continue;
    }

    // THE QUOTA: this handle has `quota` messages waiting: the lane's
    // policy, applied to this producer alone. (A handle with an open loan
    // claims nothing else: Producer refuses it.)
    if (L.quota != 0 && d == 0 && st == slot_state::empty) {
      const own_messages mine = count_own(p, L, t, L.quota);
      if (mine.n >= L.quota) {
        p.pe->op.store(0, std::memory_order_relaxed);  // we hold no claim
        switch (L.pol) {
          case policy::reject: return give_up(c->quota_rejected, post_status::over_quota);
          case policy::drop_newest: return give_up(c->quota_dropped, post_status::over_quota);
          case policy::block:
            // Wait for the owner to take our oldest (SYNC POINT A with that slot).
            if (!wait_for_space(L, t, mine.oldest, mine.oldest_seen, deadline, waiting))
              return give_up(c->quota_timeouts, post_status::timeout);
            continue;
          case policy::drop_oldest:  // (no quota on drop_oldest or lifo lanes: create and open refuse it)
          case policy::lifo: return give_up(c->quota_rejected, post_status::over_quota);
        }
      }
    }

    if (d == 0 && st == slot_state::empty) {  // P2
      // relaxed: published by the seq_cst CAS on the tail; R1 loads the tail
      // first. (No op_before: a FIFO lane's stored total is its tail, exact by
      // itself; the per-producer `stored` is for statistics.)
      p.pe->op.store(make_op(op_kind::claim, L.index, t), std::memory_order_relaxed);
      SHMBOX_FAULT("producer.after_announce");
      std::uint64_t expected = w;
      // P3. release: publishes P2's op; pairs with R1's seq_cst tail load (repair_fifo_slot,
      // finish_dead_entry: ring_repair.cpp), which then reads the ops with acquire.
      // acquire: pairs with the owner's arming CAS (owner_arm_sleep, ring_take.cpp): we
      // see its bit, and its read of wake_seq happens before our P6 bump.
      // seq_cst: kept as written; the protocol is model-checked (model/*.pml) under SC, and the pairs named need only acq_rel.
      if (!h->tail.compare_exchange_weak(expected, ((t + 1) << 1) | (w & 1), std::memory_order_seq_cst,
                                         std::memory_order_relaxed))  // P3: the sleeping bit stays
        continue;
      bump(c->stored);  // P4
      SHMBOX_FAULT("producer.after_claim");
      out.slot = s;
      out.lane = L.index;
      out.where = t;
      out.wake = (w & 1) != 0;
      return p.evicted != evicted_before ? post_status::stored_evicted : post_status::stored;
    }
    if (d == -static_cast<std::int64_t>(cap)) {
      // The slot still holds position t - cap: the lane is full at t. We hold
      // no claim: withdraw a stale claim(t') left by a lost CAS, so that R1
      // never waits for us while we sleep for space.
      p.pe->op.store(0, std::memory_order_relaxed);
      if (st == slot_state::full) {
        switch (L.pol) {
          case policy::reject: return give_up(c->rejected, post_status::full);
          case policy::drop_newest: return give_up(c->dropped_new, post_status::dropped);
          case policy::drop_oldest:
            // E1-E4. Another producer may claim the slot we free before we
            // do (its post is then a plain store): we evict again, so one
            // post can evict several messages; p.evicted counts each.
            evict_fifo(p, L, t - cap, seen);
            continue;
          case policy::block:
          case policy::lifo:
            if (!wait_for_space(L, t, t, seen, deadline, waiting)) return give_up(c->timeouts, post_status::timeout);
            continue;
        }
      }
      if (st == slot_state::taken || st == slot_state::empty || st == slot_state::done || st == slot_state::dropped) {
        // Busy: being read, committed, evicted, repaired or still written.
        producer_maybe_repair(p, L, t - cap, seen, stuck_since);
        if (L.pol == policy::reject) return give_up(c->rejected, post_status::full);
        if (L.pol == policy::drop_newest) return give_up(c->dropped_new, post_status::dropped);
        if (!wait_for_space(L, t, t, seen, deadline, waiting)) return give_up(c->timeouts, post_status::timeout);
        continue;
      }
    } else if (d > 0 || (d == 0 && st != slot_state::empty)) {
      // Our tail is stale: others claimed t (and maybe more) meanwhile.
      if (h->tail.load(std::memory_order_relaxed) != w) continue;
    } else if (h->tail.load(std::memory_order_relaxed) != w) {
      continue;
    }
    // The slot holds neither t nor t - cap while the tail stays at t: the lane
    // is corrupt (someone wrote over the tail or the slot).
    p.pe->op.store(0, std::memory_order_relaxed);
    p.last_error = fail(errc::corrupt, "box '" + p.m->name + "': lane " + std::to_string(L.index) + " slot " +
                                           std::to_string(L.slot_index(t)) + " holds position " +
                                           std::to_string(seq_pos(seen)) + " but the tail is at " + std::to_string(t) +
                                           " (corrupt segment; run 'shmbox stat " + p.m->name + "')");
    return post_status::error;
  }
}

}  // namespace

std::uint64_t lazy_deadline::get() noexcept {
  if (at == 0) at = timeout_ns == UINT64_MAX ? UINT64_MAX : mono_ns() + timeout_ns;
  return at;
}

// The fast path of a FIFO post: ring_fast.hpp.

__attribute__((hot)) bool post_fast(producer_ctx& p, const lane_view& L, const void* data, std::size_t size) noexcept {
  slot_claim k;
  if (!claim_fast_inline(p, L, k)) return false;
  write_payload(k.slot, data, size);
  fifo_publish_inline(p, k, size);
  return true;
}

bool post_fast_priority(producer_ctx& p, const lane_view& L, const void* data, std::size_t size,
                        std::int64_t priority) noexcept {
  slot_claim k;
  if (!claim_fast_inline(p, L, k)) return false;
  write_payload(k.slot, data, size);
  set_priority(L, k.slot, priority);  // P4's priority word, published by P5 with the payload
  fifo_publish_inline(p, k, size);
  return true;
}

post_status claim_slot(producer_ctx& p, std::uint32_t lane, std::size_t size, std::uint64_t timeout_ns,
                       slot_claim& out) noexcept {
  const lane_view& L = p.m->lanes[lane];
  producer_lane_counters* c = p.m->producer_counters(p.entry, lane);
  if (size > L.payload) {
    bump(c->too_large);
    return post_status::too_large;
  }
  lazy_deadline deadline{timeout_ns};
  return L.is_lifo() ? lifo_claim(p, L, c, deadline, out) : fifo_claim(p, L, c, deadline, out);
}

void publish_slot(producer_ctx& p, const slot_claim& k, std::size_t size) noexcept {
  const lane_view& L = p.m->lanes[k.lane];
  if (L.is_lifo()) lifo_publish(p, L, k.slot, k.stamp, size);
  else fifo_publish_inline(p, k, size);
}

// ABORT (a loan given back): the producer takes back its own claimed slot
// the way R1 abandons a dead writer's (op_before = aborted, op = abort,
// CAS -> TAKEN(_, P), aborted++, free), counting it as aborted. Dies before
// the CAS: the slot is still claimed (R1 and finish_dead_entry read abort(q)
// as a claim; a lifo WRITING slot is abandoned by R2): counted abandoned
// instead, once. Dies after the CAS: R2 finishes the count from the op.
void abort_slot(producer_ctx& p, const slot_claim& k) noexcept {
  const lane_view& L = p.m->lanes[k.lane];
  a64& counter = p.m->producer_counters(p.entry, k.lane)->aborted;
  slot_header* s = k.slot;
  const std::uint64_t before = counter.load(std::memory_order_relaxed);
  std::uint64_t seen, next;
  if (L.is_lifo()) {
    // The op (lifo_push / lifo_replace) still describes the claim with its
    // own before-values: clear it before they are overwritten (a repairer
    // that sees no op abandons our WRITING slot; its counts are already done).
    p.pe->op.store(0, std::memory_order_relaxed);
    seen = make_seq(k.stamp, slot_state::writing, p.rep.actor);
    next = make_seq(k.stamp, slot_state::free, kActorNone);
  } else {
    seen = make_seq(k.where, slot_state::empty, kActorNone);
    next = make_seq(k.where + L.capacity, slot_state::empty, kActorNone);
  }
  p.pe->op_before_a.store(before, std::memory_order_relaxed);
  // relaxed: published by the seq_cst CAS (R1 loads the tail, which our
  // claim CAS already moved, and then the op with acquire)
  p.pe->op.store(make_op(op_kind::abort, k.lane, L.is_lifo() ? k.where : (k.where & kTargetMask)),
                 std::memory_order_relaxed);
  SHMBOX_FAULT("producer.mid_abort");
  std::uint64_t expected = seen;
  // release: publishes our abort op (as E2's CAS) to a repairer that finds the slot
  // TAKEN by us (R2, complete_dead_producer: acquire loads of the slot and the op).
  // seq_cst: kept as written; the protocol is model-checked (model/*.pml) under SC, and the pairs named need only acq_rel.
  if (s->seq.compare_exchange_strong(expected, make_seq(seq_pos(seen), slot_state::taken, p.rep.actor),
                                     std::memory_order_seq_cst, std::memory_order_relaxed)) {
    counter.store(before + 1, std::memory_order_relaxed);
    // release: pairs with the acquire of the next claimant of the slot
    s->seq.store(next, std::memory_order_release);
  }
  p.pe->op.store(0, std::memory_order_relaxed);
  if (!L.is_lifo()) wake_space_waiters(L);  // the slot is free for the next lap
}

post_status post_message(producer_ctx& p, std::uint32_t lane, const void* data, std::size_t size,
                         std::uint64_t timeout_ns) noexcept {
  slot_claim k;
  const post_status st = claim_slot(p, lane, size, timeout_ns, k);
  if (!is_stored(st)) return st;
  if (p.m->lanes[lane].is_lifo()) SHMBOX_FAULT("producer.lifo_mid_write");
  write_payload(k.slot, data, size);
  set_priority(p.m->lanes[lane], k.slot, p.priority);
  publish_slot(p, k, size);
  return st;
}

// RUN (post_batch): P1-P6 for n consecutive positions with ONE tail CAS.
// The slots t..t+k-1 must all be EMPTY(t+i) (free for this lap); only the
// claimant of a position writes its slot, so they stay free until the CAS
// decides. op = claim_run(t, k) names the whole run for R1: a writer that
// dies mid-run leaves the rest claimed by a dead entry, repaired (abandoned)
// one by one. The payloads are published in order, each with its own
// release store; a sleeping owner is woken once, after the last.
std::size_t post_run(producer_ctx& p, std::uint32_t lane, const std::string_view* msgs, std::size_t n) noexcept {
  const lane_view& L = p.m->lanes[lane];
  // lifo, resizable, quota (their limits: fifo_claim); a priority lane (each
  // message's priority: one at a time); a stash lane with messages parked (THE GATE)
  if (!L.fast || n == 0) return 0;
  // relaxed: as claim_fast_inline's read (with nothing parked the gate limits no position)
  if (L.fast_gate && L.hdr->parked.load(std::memory_order_relaxed) != 0) return 0;
  lane_header* h = L.hdr;
  producer_lane_counters* c = p.m->producer_counters(p.entry, lane);
  n = std::min<std::size_t>({n, kMaxClaimRun, L.capacity});
  for (;;) {
    const std::uint64_t w = h->tail.load(std::memory_order_relaxed);
    const std::uint64_t t = w >> 1;
    std::size_t k = 0;
    // acquire: pairs with the release that freed each slot (T6, E4, R1)
    while (k < n && L.slot_for(t + k)->seq.load(std::memory_order_acquire) ==
                        make_seq(t + k, slot_state::empty, kActorNone))
      ++k;
    if (k == 0) return 0;  // full, busy or a stale tail: the caller posts one message the usual way
    p.pe->op.store(k == 1 ? make_op(op_kind::claim, lane, t) : make_op(op_kind::claim_run, lane, run_target(t, static_cast<std::uint32_t>(k))),
                   std::memory_order_relaxed);  // relaxed: published by the seq_cst CAS (as P2)
    std::uint64_t expected = w;
    // P3 for the run: as in fifo_claim (release publishes the claim_run op to R1's
    // seq_cst tail load). seq_cst: kept as written; the protocol is model-checked (model/*.pml) under SC, and the pairs named need only acq_rel.
    if (!h->tail.compare_exchange_weak(expected, ((t + k) << 1) | (w & 1), std::memory_order_seq_cst,
                                       std::memory_order_relaxed))
      continue;
    bump(c->stored, k);
    for (std::size_t i = 0; i < k; ++i) {
      slot_header* s = L.slot_for(t + i);
      write_payload(s, msgs[i].data(), msgs[i].size());
      s->length.store(static_cast<std::uint32_t>(msgs[i].size()), std::memory_order_relaxed);
      s->writer.store(p.entry, std::memory_order_relaxed);
      // P5 release: publishes payload and length; pairs with the acquire in T1 (ring_take.cpp).
      s->seq.store(make_seq(t + i, slot_state::full, p.rep.actor), std::memory_order_release);  // P5
      if (i == 0 && k > 1) SHMBOX_FAULT("producer.mid_run");
    }
    if (w & 1) wake_owner(p);  // P6, once
    return k;
  }
}

}  // namespace shmbox::detail
