// lib/ring/ring_internal.hpp - what the ring's files (ring_post.cpp, ring_take.cpp,
// ring_repair.cpp, ring_lifo.cpp) share: counters, op targets, slot holders,
// the repairs they call into, and take_one (inline: fifo_take's per-message
// step). Step labels: the protocol text at the top of ring.hpp. Not for the
// rest of the library.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "base/fault.hpp"
#include "segment/layout.hpp"
#include "ring/ring.hpp"
#include "segment/segment.hpp"

namespace shmbox::detail {

// Symbols of the ring's own files only: not exported from the library.
#pragma GCC visibility push(hidden)

constexpr std::uint64_t kTargetMask = (1ull << 56) - 1;  // op targets hold 56 bits

// Counters are single-writer words: a plain increment, no RMW.
// relaxed: read only by inspectors summing counters, and by repairers of a
// dead writer (which has stopped writing).
inline void bump(a64& c, std::uint64_t by = 1) noexcept {
  c.store(c.load(std::memory_order_relaxed) + by, std::memory_order_relaxed);
}

// Finishes a dead actor's count: no-op when it had counted already.
inline void finish_count(a64& c, std::uint64_t before) noexcept {
  std::uint64_t expected = before;
  c.compare_exchange_strong(expected, before + 1, std::memory_order_relaxed);
}

// The full 64-bit position whose low 56 bits are `target`, at or below `near`.
inline std::uint64_t unfold_target(std::uint64_t target, std::uint64_t near) noexcept {
  return near - ((near - target) & kTargetMask);
}

// The slot's next state once its current holder is done with it.
inline std::uint64_t finished_seq(const lane_view& L, std::uint64_t seq) noexcept {
  return L.is_lifo() ? make_seq(seq_pos(seq), slot_state::free, kActorNone)
                     : make_seq(seq_pos(seq) + L.capacity, slot_state::empty, kActorNone);
}

// ---------------------------------------------------------------------------
// Slot holders and repairs (ring_repair.cpp)
// ---------------------------------------------------------------------------

enum class holder { alive, dead, invalid };
// Whether the actor named in a slot (producer entry + 1, or an owner actor)
// is alive, dead (or a gone owner epoch), or no actor at all.
holder actor_state(const mapped_box& m, std::uint32_t actor) noexcept;

enum class claim_verdict { live, dead, none };
// R1: who announced a claim of FIFO position q in `lane` (entry `exclude`
// left out)? The caller has loaded the tail (seq_cst) and seen it past q.
claim_verdict claimants_of(const mapped_box& m, std::uint32_t lane, std::uint64_t q, std::int64_t exclude) noexcept;

// R1: abandons the message (or hole) at FIFO position q / lifo slot i,
// observed as `seen`: counted once, as abandoned, by repairer r.
bool abandon_fifo(const lane_view& L, std::uint64_t q, std::uint64_t seen, const repairer& r) noexcept;
bool abandon_lifo(const lane_view& L, std::uint32_t i, std::uint64_t seen, const repairer& r) noexcept;

// R2 (and the lifo equivalent): slot `idx` (FIFO: position `pos`) is held by
// dead producer entry x - 1. Finish its op; returns true if the slot changed.
bool complete_dead_producer(mapped_box& m, const lane_view& L, std::uint64_t pos, std::uint32_t idx, std::uint64_t seen,
                            std::uint32_t x, const repairer& r) noexcept;

// Looks at a FIFO slot stuck at position q (seen = its seq) and repairs it if
// its holder is dead (R1-R3). `p` (may be null) allows R3's eviction of a
// dead owner's uncommitted message (drop_oldest producers only).
bool repair_fifo_slot(mapped_box& m, const lane_view& L, std::uint64_t q, std::uint64_t seen, const repairer& r,
                      producer_ctx* p, std::int64_t exclude, std::uint64_t stuck_since, std::uint64_t now) noexcept;

// The rate limit of a producer's repairs: false on the first call of a wait
// (which starts its clock); then true once it has been stuck kRepairGraceNs
// and kRepairIntervalNs has passed since this handle's last repair (booked).
inline bool producer_repair_due(producer_ctx& p, std::uint64_t& stuck_since, std::uint64_t now) noexcept {
  if (stuck_since == 0) {
    stuck_since = now;
    return false;
  }
  if (now - stuck_since < kRepairGraceNs || now < p.next_repair_ns) return false;
  p.next_repair_ns = now + kRepairIntervalNs;
  return true;
}

// A producer stuck behind slot seq `seen` of position q: repair after the
// grace period, at most once per kRepairIntervalNs per handle.
void producer_maybe_repair(producer_ctx& p, const lane_view& L, std::uint64_t q, std::uint64_t seen,
                           std::uint64_t& stuck_since) noexcept;

// The owner's rate limit for repairing what stalls a lane (`pos`: a FIFO
// position, or the seq of a lifo lane's WRITING slot): false when `pos` is
// newly stuck (its clock starts) or before the next check is due; then true
// (the check after it is booked kRepairIntervalNs later).
inline bool owner_repair_due(owner_ctx& o, std::uint32_t l, std::uint64_t pos, std::uint64_t now) noexcept {
  if (o.stuck_pos[l] != pos || o.stuck_since_ns[l] == 0) {
    o.stuck_pos[l] = pos;
    o.stuck_since_ns[l] = now;
    o.next_check_ns[l] = now + kRepairGraceNs;
    return false;
  }
  if (now < o.next_check_ns[l]) return false;
  o.next_check_ns[l] = now + kRepairIntervalNs;
  return true;
}

// A FIFO position stuck at EMPTY(p) with the tail past it (owner side of R1),
// or TAKEN by a producer (T1b: owner side of R2).
bool owner_check_stuck(owner_ctx& o, const lane_view& L, std::uint64_t p, std::uint64_t seen) noexcept;

// Whether a slot TAKEN(target, owner actor) (target: its FIFO position or
// lifo slot index) holds a message its owner has counted already and not
// yet freed: committed (T5 done, T6 not; crash point owner.after_commit),
// or, repairing a dead claim (R1), counted abandoned: its op (op_before
// `before`, actor record `idx`) still names the slot, recv / lifo_pop,
// filter_drop or repair, and that counter has moved past op_before. Read
// only (R3/R4's dead_owner_op also finishes a redelivery's count). Exact for
// a gone owner; for a live one an estimate (it moves on).
bool owner_slot_counted(const mapped_box& m, const lane_view& L, std::uint64_t target, std::uint32_t idx,
                        std::uint64_t op, std::uint64_t before) noexcept;
// The same, reading the owner actor's op words.
bool owner_slot_counted(const mapped_box& m, const lane_view& L, std::uint64_t target, std::uint32_t actor) noexcept;

// DONE/DROPPED slots of a gone owner actor whose process is dead: counts
// them once and frees them (C2-C4 finished for it). True if it freed any.
bool finish_dead_commit(mapped_box& m, const lane_view& L, std::uint32_t actor) noexcept;

// A slot TAKEN by another owner actor (R4): 1 = now TAKEN by us (deliver
// again), 0 = finished (freed), -1 = the slot changed under us, 2 = a newer
// owner's (we are stale: leave it).
int adopt_gone_owner_slot(owner_ctx& o, const lane_view& L, slot_header* s, std::uint64_t target,
                          std::uint64_t seen) noexcept;

// ---------------------------------------------------------------------------
// Posting (ring_post.cpp) and lifo lanes (ring_lifo.cpp)
// ---------------------------------------------------------------------------

// E1-E4. Returns true when the slot of q is now free for q + cap. `kind`:
// evict (counted evicted: drop_oldest) or shrink_drop (a resize dropping one
// of the newest messages of a keep-old lane: counted shrunk).
// `by_resize`: a shrink's drop (fault point resize.mid_drop instead of producer.mid_evict).
bool evict_fifo(producer_ctx& p, const lane_view& L, std::uint64_t q, std::uint64_t seen,
                op_kind kind = op_kind::evict, bool by_resize = false) noexcept;

// The counter of a producer entry that op `kind` (evict, shrink_drop,
// abort, repair) finishes: E3, ABORT, R1, R2.
inline a64& removal_counter(producer_lane_counters* c, op_kind kind) noexcept {
  switch (kind) {
    case op_kind::evict: return c->evicted;
    case op_kind::shrink_drop: return c->shrunk;
    case op_kind::abort: return c->aborted;
    default: return c->abandoned;
  }
}

// THE QUOTA (ring.hpp): this handle's messages waiting in lane L below
// position t, counted up to `stop_at`, and the oldest of them (what a
// block lane's post over its quota waits on).
struct own_messages {
  std::uint32_t n = 0;
  std::uint64_t oldest = 0, oldest_seen = 0;
};
own_messages count_own(const producer_ctx& p, const lane_view& L, std::uint64_t t, std::uint32_t stop_at) noexcept;

// THE LIMIT of a resizable lane (ring.hpp): 1 when position t may not be
// claimed yet because position t - limit is not finished (the lane holds
// `limit` messages); *gate and *gate_seen then name that position's slot
// and what it held. 0: not limited at t.
bool limit_reached(const lane_view& L, std::uint64_t t, std::uint64_t& gate, std::uint64_t& gate_seen,
                   std::uint32_t& limit) noexcept;

// L1-L2 up to the payload: holds a lifo slot WRITING for one message.
post_status lifo_claim(producer_ctx& p, const lane_view& L, producer_lane_counters* c, lazy_deadline& deadline,
                       slot_claim& out) noexcept;
// L1-L2's publish (SYNC POINT C), then the wake of a sleeping owner.
void lifo_publish(producer_ctx& p, const lane_view& L, slot_header* s, std::uint64_t stamp, std::size_t size) noexcept;
// L3: the owner's take from a lifo lane.
take_result lifo_take(owner_ctx& o, const lane_view& L, take_sink& sink, take_mode mode) noexcept;
// The owner's sleep arming of a lifo lane (SYNC POINT D).
bool lifo_arm_sleep(owner_ctx& o, const lane_view& L) noexcept;

// ---------------------------------------------------------------------------
// Taking (ring_take.cpp; take_one is also L3's)
// ---------------------------------------------------------------------------

std::string corrupt_slot(const owner_ctx& o, const lane_view& L, std::uint64_t idx, const std::string& what);

// A priority box's message's priority, 0 elsewhere. relaxed: published with
// the slot (T1's acquire, or ours).
inline std::int64_t slot_priority(const lane_view& L, slot_header* s) noexcept {
  return L.is_priority() ? static_cast<std::int64_t>(L.priority_of(s)->load(std::memory_order_relaxed)) : 0;
}

// What take_one did.
enum class took { yes, lost_race, skipped };

// Announce-take-copy for one slot, then (commit_each) commit and free it, or
// (hold) remember it in o.pending. `seen` is FULL, or TAKEN by us (redeliver).
// The sink's verdict decides: deliver (counted delivered), drop (counted
// filtered), skip (the slot is put back as it was; stop).
__attribute__((always_inline)) inline took take_one(owner_ctx& o, const lane_view& L, slot_header* s, std::uint64_t where, std::uint64_t seen,
              std::uint32_t len, bool redeliver, take_sink& sink, take_mode mode) noexcept {
  owner_lane_counters* oc = o.counters(L.index);
  const std::uint64_t pos_or_stamp = seq_pos(seen);
  const std::uint64_t mine = make_seq(pos_or_stamp, slot_state::taken, o.rep.actor);
  // Others race for FULL slots in drop_oldest lanes (evictors), lifo lanes
  // (replacers) and resizable lanes (a shrink drops FULL slots, E2): a CAS
  // there; a release store elsewhere (no one else writes a FULL slot). The
  // hold path always CASes (a newer owner may race too).
  const bool cas = mode == take_mode::hold || L.pol == policy::drop_oldest || L.is_lifo() || L.resizable;
  auto put_back = [&] {
    std::uint64_t expected = mine;
    // release: the slot is FULL (or ours) again; pairs with the acquire of its next
    // taker (T1, the lifo scan) or evictor / replacer (P1 / E2, L2).
    s->seq.compare_exchange_strong(expected, seen, std::memory_order_release, std::memory_order_relaxed);
  };
  if (mode == take_mode::hold) {
    // H1. acquire: pairs with P5's (or L1-L2's) publish: the payload we copy. release:
    // our TAKEN, read by a newer owner's re-take (adopt_gone_owner_slot, acq_rel).
    // seq_cst: kept as written; the protocol is model-checked (model/*.pml) under SC, and the pairs named need only acq_rel.
    if (!redeliver && !s->seq.compare_exchange_strong(seen, mine, std::memory_order_seq_cst, std::memory_order_relaxed))
      return took::lost_race;
    const take_verdict v = sink.append(lane_view::payload_of(s), len, redeliver, L.index, pos_or_stamp, slot_priority(L, s));
    if (v == take_verdict::skip) {
      put_back();
      return took::skipped;
    }
    o.pending.push_back({L.index, where, mine, seen, redeliver, v == take_verdict::drop});
    SHMBOX_FAULT("owner.after_take");
    return took::yes;
  }
  // T2: announce. relaxed: published by the release/seq_cst of the take.
  const std::uint64_t before = oc->delivered.load(std::memory_order_relaxed);  // we are its only writer
  o.act->op_before.store(before, std::memory_order_relaxed);
  // A redelivery is counted in `redelivered` too (T5b), from op_before_b, and its op
  // says so (kRecvAgain). A priority box's move into its store is not a delivery:
  // the store counts the redelivery when it hands the message out (commit_entries).
  const bool again = redeliver && !L.is_priority();
  std::uint64_t again_before = 0;
  if (again) {
    again_before = oc->redelivered.load(std::memory_order_relaxed);  // we are its only writer
    o.act->op_before_b.store(again_before, std::memory_order_relaxed);
  }
  o.act->op.store(make_op(L.is_lifo() ? op_kind::lifo_pop : op_kind::recv, L.index,
                          (where & kPosMask) | (again ? kRecvAgain : 0)),
                  std::memory_order_relaxed);
  if (!redeliver) {  // T3
    if (cas) {
      // T3 (CAS). acquire: pairs with P5's / L1-L2's publish (the payload we copy);
      // release: publishes T2's op to repairers (dead_owner_op: acquire loads of the
      // slot, then the op). seq_cst: kept as written; the protocol is model-checked (model/*.pml) under SC, and the pairs named need only acq_rel.
      if (!s->seq.compare_exchange_strong(seen, mine, std::memory_order_seq_cst, std::memory_order_relaxed)) {
        o.act->op.store(0, std::memory_order_relaxed);
        return took::lost_race;
      }
    } else {
      // T3 (store): pairs with the acquire loads of the slot, then the op, in dead_owner_op
      // (R3/R4, ring_repair.cpp). The payload was acquired by T1's load.
      s->seq.store(mine, std::memory_order_release);  // release: our op record is visible to whoever sees this
    }
  }
  // T4 (a priority box's sink, its move, reads the slot's priority word itself;
  // a delivery straight from the ring, THE IN-ORDER RUN, hands it on)
  const take_verdict v = sink.append(lane_view::payload_of(s), len, redeliver, L.index, pos_or_stamp, slot_priority(L, s));
  SHMBOX_FAULT("owner.after_take");
  if (v == take_verdict::skip) {
    put_back();  // as it was (FULL, or ours to redeliver)
    // release: pairs with the acquire load of the op in dead_owner_op (ring_repair.cpp).
    o.act->op.store(0, std::memory_order_release);
    return took::skipped;
  }
  if (v == take_verdict::drop) {
    // Committed as filtered instead: re-announce with that counter.
    const std::uint64_t fb = oc->filtered.load(std::memory_order_relaxed);
    o.act->op_before.store(fb, std::memory_order_relaxed);
    // release: publishes op_before (fb); pairs with the acquire loads of the op, then
    // op_before, in dead_owner_op (ring_repair.cpp).
    o.act->op.store(make_op(op_kind::filter_drop, L.index, where), std::memory_order_release);
    oc->filtered.store(fb + 1, std::memory_order_relaxed);
  } else {
    // T5: the commit. relaxed: single writer; the free below is a release store.
    oc->delivered.store(before + 1, std::memory_order_relaxed);
  }
  SHMBOX_FAULT("owner.after_commit");
  // T5b: a redelivery counted. Dies before it: the repairer that frees the
  // committed slot (R3/R4, verdict "committed") finishes it from op_before_b.
  if (again && v != take_verdict::drop) oc->redelivered.store(again_before + 1, std::memory_order_relaxed);
  // T6 release: our payload read happens before the next writer's payload
  // writes (pairs with P1's acquire / L1's acquire).
  s->seq.store(finished_seq(L, mine), std::memory_order_release);
  // release: pairs with the acquire load of the op in dead_owner_op (ring_repair.cpp).
  o.act->op.store(0, std::memory_order_release);
  return took::yes;
}

#pragma GCC visibility pop

}  // namespace shmbox::detail
