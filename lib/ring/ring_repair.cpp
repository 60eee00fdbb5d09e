// lib/ring/ring_repair.cpp - REPAIRS R1-R4 of the slot protocol (ring.hpp): who
// holds a stuck slot (actor_state, claimants_of), finishing a dead actor's
// op exactly once (R1 abandon, R2 dead producers, R3 gone owners' slots, R4
// adopting them at acquire), the producer entries (claim, release, finishing
// a dead holder's op) and the owner's recovery at acquire (R4).
#include <algorithm>
#include <utility>
#include <vector>

#include "base/fault.hpp"
#include "segment/liveness.hpp"
#include "base/process.hpp"
#include "ring/ring.hpp"
#include "ring/ring_internal.hpp"

namespace shmbox::detail {

holder actor_state(const mapped_box& m, std::uint32_t actor) noexcept {
  if (actor >= 1 && actor <= m.max_producers()) {
    // acquire: pairs with the CAS that installed the key
    return role_alive(m, producer_byte(m, actor - 1), m.producer(actor - 1)->key.load(std::memory_order_acquire))
               ? holder::alive
               : holder::dead;
  }
  if (is_owner_actor(actor)) {
    const owner_record* o = m.owner();
    // acquire (key, epoch): pairs with take_ownership's seq_cst CASes of key and epoch
    // (lease.cpp).
    const std::uint64_t key = o->key.load(std::memory_order_acquire);
    const std::uint64_t epoch = o->epoch.load(std::memory_order_acquire);
    // An actor of another epoch is an owner that is gone (it may still run,
    // stale, after its lease expired; it can no longer commit a TAKEN slot).
    // During a takeover (key changed, epoch not yet) this errs towards
    // "alive": a short wait.
    if (owner_actor_id(epoch) != actor) return holder::dead;
    return role_alive(m, owner_byte(m), key) ? holder::alive : holder::dead;
  }
  return holder::invalid;
}

namespace {

// R1: who announced a claim of FIFO position q in `lane`? The caller has
// loaded the tail (seq_cst) and seen it past q, so every claimant's op store,
// which precedes its tail CAS, is visible here.
// A claim is op claim(q), a run claim_run covering q (post_batch), or
// abort(q) (a loan being given back, not yet taken back by its CAS).
bool op_claims(std::uint64_t op, std::uint32_t lane, std::uint64_t q) noexcept {
  if (op == make_op(op_kind::claim, lane, q) || op == make_op(op_kind::abort, lane, q)) return true;
  if (op_kind_of(op) != op_kind::claim_run || op_lane(op) != lane) return false;
  // Positions modulo 2^48, as slots store them.
  return ((q - run_first(op_target(op))) & kPosMask) < run_length(op_target(op));
}

}  // namespace

claim_verdict claimants_of(const mapped_box& m, std::uint32_t lane, std::uint64_t q, std::int64_t exclude) noexcept {
  bool any = false;
  for (std::uint32_t i = 0; i < m.max_producers(); ++i) {
    if (static_cast<std::int64_t>(i) == exclude) continue;
    const producer_entry* pe = m.producer(i);
    // acquire (op): no release of its own (P2 stores the op relaxed): the claimant's P3
    // CAS (release) published it, and the caller's seq_cst tail load synchronized with
    // that. acquire (key): pairs with claim_producer_entry's acq_rel key CAS.
    if (!op_claims(pe->op.load(std::memory_order_acquire), lane, q)) continue;
    if (role_alive(m, producer_byte(m, i), pe->key.load(std::memory_order_acquire))) return claim_verdict::live;
    any = true;
  }
  return any ? claim_verdict::dead : claim_verdict::none;
}

// Abandons the message (or hole) at FIFO position q, observed as `seen`:
// counted once, as abandoned, by repairer r. See R1.
bool abandon_fifo(const lane_view& L, std::uint64_t q, std::uint64_t seen, const repairer& r) noexcept {
  a64& counter = *r.abandoned[L.index];
  const std::uint64_t before = counter.load(std::memory_order_relaxed);
  r.op_before->store(before, std::memory_order_relaxed);
  // relaxed: published by the seq_cst CAS below to whoever sees the slot held by r
  r.op->store(make_op(op_kind::repair, L.index, q), std::memory_order_relaxed);
  slot_header* s = L.slot_for(q);
  // R1. release: publishes our repair op (stored relaxed above) to whoever finds the slot
  // TAKEN by us (R2: complete_dead_producer's acquire loads of the slot, then the op).
  // seq_cst: kept as written; the protocol is model-checked (model/*.pml) under SC, and the pairs named need only acq_rel.
  std::uint64_t expected = seen;
  const bool won = s->seq.compare_exchange_strong(expected, make_seq(q, slot_state::taken, r.actor),
                                                  std::memory_order_seq_cst, std::memory_order_relaxed);
  if (won) {
    counter.store(before + 1, std::memory_order_relaxed);
    SHMBOX_FAULT("repair.after_count");
    // release: pairs with the acquire of the producer that claims q + cap
    s->seq.store(make_seq(q + L.capacity, slot_state::empty, kActorNone), std::memory_order_release);
  }
  r.op->store(0, std::memory_order_relaxed);
  return won;
}

// Same for a lifo slot (it becomes FREE).
bool abandon_lifo(const lane_view& L, std::uint32_t i, std::uint64_t seen, const repairer& r) noexcept {
  a64& counter = *r.abandoned[L.index];
  const std::uint64_t before = counter.load(std::memory_order_relaxed);
  r.op_before->store(before, std::memory_order_relaxed);
  r.op->store(make_op(op_kind::repair, L.index, i), std::memory_order_relaxed);  // relaxed: published by the CAS
  slot_header* s = L.slot_at_index(i);
  // As in abandon_fifo: release publishes our repair op to R2. seq_cst: kept as written; the protocol is model-checked (model/*.pml) under SC, and the pairs named need only acq_rel.
  std::uint64_t expected = seen;
  const bool won = s->seq.compare_exchange_strong(expected, make_seq(seq_pos(seen), slot_state::taken, r.actor),
                                                  std::memory_order_seq_cst, std::memory_order_relaxed);
  if (won) {
    counter.store(before + 1, std::memory_order_relaxed);
    SHMBOX_FAULT("repair.after_count");
    // release: pairs with L1's acquire load of a FREE slot (lifo_claim, ring_lifo.cpp).
    s->seq.store(make_seq(seq_pos(seen), slot_state::free, kActorNone), std::memory_order_release);
  }
  r.op->store(0, std::memory_order_relaxed);
  return won;
}

// R2 (and the lifo equivalent): slot `idx` (FIFO: position `pos`) is held by
// dead producer entry x - 1. Finish its op; returns true if the slot changed.
bool complete_dead_producer(mapped_box& m, const lane_view& L, std::uint64_t pos, std::uint32_t idx, std::uint64_t seen,
                            std::uint32_t x, const repairer& r) noexcept {
  const std::uint32_t e = x - 1;
  const producer_entry* pe = m.producer(e);
  producer_lane_counters* pc = m.producer_counters(e, L.index);
  // acquire (op, op_before_a/b): no release of their own (stored relaxed): the dead
  // producer's slot CAS (E2, L1-L2, R1, abort: release) published them, and the
  // caller read the slot with acquire.
  const std::uint64_t op = pe->op.load(std::memory_order_acquire);
  const std::uint64_t before_a = pe->op_before_a.load(std::memory_order_acquire);
  const std::uint64_t before_b = pe->op_before_b.load(std::memory_order_acquire);
  const std::uint64_t target = L.is_lifo() ? idx : (pos & kTargetMask);
  const bool mine = op_lane(op) == L.index && op_target(op) == target;
  const slot_state st = seq_state(seen);
  slot_header* s = L.is_lifo() ? L.slot_at_index(idx) : L.slot_for(pos);

  const op_kind kind = op_kind_of(op);
  if (st == slot_state::taken && mine &&
      (kind == op_kind::evict || kind == op_kind::repair || kind == op_kind::abort || kind == op_kind::shrink_drop)) {
    finish_count(removal_counter(pc, kind), before_a);
    std::uint64_t expected = seen;
    // R2's free. release: pairs with the acquire of the next claimant (P1, L1).
    return s->seq.compare_exchange_strong(expected, finished_seq(L, seen), std::memory_order_release,
                                          std::memory_order_relaxed);
  }
  if (st == slot_state::writing && mine) {
    // lifo: the writer died before publishing. Its message was stored (and,
    // for a replace, the old top was replaced): finish those counts, then
    // abandon the unpublished message.
    if (op_kind_of(op) == op_kind::lifo_push || op_kind_of(op) == op_kind::lifo_replace) finish_count(pc->stored, before_a);
    if (op_kind_of(op) == op_kind::lifo_replace) finish_count(pc->replaced, before_b);
  }
  // Unpublished, or held by x although x's op does not describe it (only a
  // scribbled segment does that): whatever it held is lost, counted abandoned.
  return L.is_lifo() ? abandon_lifo(L, idx, seen, r) : abandon_fifo(L, pos, seen, r);
}

namespace {


// A slot TAKEN by owner actor `actor`, which is gone; `target` is its FIFO
// position or lifo slot index. Returns: 1 = that owner was repairing it,
// 2 = it had committed it (fast path: counted as delivered; a redelivery's
// count, T5b, is finished here), 3 = uncommitted (deliver it again, or evict it).
int dead_owner_op(const mapped_box& m, const lane_view& L, std::uint64_t target, std::uint32_t actor) noexcept {
  const std::uint32_t idx = owner_actor_index(actor);
  const owner_actor* ar = m.actor(idx);
  // acquire (op, op_before): pairs with the owner's release stores of the op (take_one,
  // owner_commit, owner_recover) and the release halves of its slot CASes (T3, C2),
  // after which it stored them; the caller read the slot with acquire.
  const std::uint64_t op = ar->op.load(std::memory_order_acquire);
  const std::uint64_t before = ar->op_before.load(std::memory_order_acquire);
  if (op_lane(op) != L.index) return 3;
  if (op_kind_of(op) == op_kind::repair) return (op_target(op) & kPosMask) == (target & kPosMask) ? 1 : 3;
  // uncommitted (a commit op: DONE slots are the committed ones)
  if (!owner_slot_counted(m, L, target, idx, op, before)) return 3;
  // Committed. A redelivery (kRecvAgain): T5b may not have counted it; a CAS
  // from op_before_b counts it once (a no-op if T5b did). acquire: as `before`.
  if (op_kind_of(op) != op_kind::filter_drop && (op_target(op) & kRecvAgain) != 0)
    finish_count(m.actor_counters(idx, L.index)->redelivered, ar->op_before_b.load(std::memory_order_acquire));
  return 2;
}

void finish_dead_owner_repair(mapped_box& m, const lane_view& L, std::uint32_t actor) noexcept {
  const std::uint32_t idx = owner_actor_index(actor);
  // acquire: as in dead_owner_op (no partner of its own: published by the repair CAS, R1).
  finish_count(m.actor_counters(idx, L.index)->abandoned, m.actor(idx)->op_before.load(std::memory_order_acquire));
}

}  // namespace

bool owner_slot_counted(const mapped_box& m, const lane_view& L, std::uint64_t target, std::uint32_t idx,
                        std::uint64_t op, std::uint64_t before) noexcept {
  if (op_lane(op) != L.index || (op_target(op) & kPosMask) != (target & kPosMask)) return false;  // about another slot
  const owner_lane_counters* oc = m.actor_counters(idx, L.index);
  // acquire (delivered, filtered, abandoned): no release partner (T5 and R1 store them
  // relaxed); exact for an owner that is gone: without a lease that is a dead one (its
  // stores are all done); a lease box commits through C1-C4 (op commit: never counted
  // here, its DONE slots are). For a live owner an estimate, as every inspector's
  // count of a busy box.
  switch (op_kind_of(op)) {
    case op_kind::recv:
    case op_kind::lifo_pop: return oc->delivered.load(std::memory_order_acquire) != before;
    case op_kind::filter_drop: return oc->filtered.load(std::memory_order_acquire) != before;
    case op_kind::repair: return oc->abandoned.load(std::memory_order_acquire) != before;
    default: return false;
  }
}

bool owner_slot_counted(const mapped_box& m, const lane_view& L, std::uint64_t target, std::uint32_t actor) noexcept {
  const std::uint32_t idx = owner_actor_index(actor);
  const owner_actor* ar = m.actor(idx);
  // acquire (op, op_before): as in dead_owner_op (pairs with the owner's release
  // stores of the op and the release halves of its slot CASes / T3's store; the
  // caller read the slot with acquire).
  const std::uint64_t op = ar->op.load(std::memory_order_acquire);
  const std::uint64_t before = ar->op_before.load(std::memory_order_acquire);
  return owner_slot_counted(m, L, target, idx, op, before);
}

// Looks at a FIFO slot stuck at position q (seen = its seq) and repairs it if
// its holder is dead. `p` (may be null) allows R3's eviction of a dead
// owner's uncommitted message (drop_oldest producers only).
bool repair_fifo_slot(mapped_box& m, const lane_view& L, std::uint64_t q, std::uint64_t seen, const repairer& r,
                      producer_ctx* p, std::int64_t exclude, std::uint64_t stuck_since, std::uint64_t now) noexcept {
  // R1-R3 act only on a slot that holds position q. One that has moved on
  // (EMPTY(q + cap) or a later lap) is finished: nothing to repair. (A post
  // waiting at a priority box's closed gate looks at slot(head), a position
  // that may be long finished while a dead producer's entry still names
  // claim(q): R1 abandoned it again at every repair interval, gencheck's
  // phantom-abandon.)
  if (pos_diff(seq_pos(seen), q) != 0) return false;
  slot_header* s = L.slot_for(q);
  const slot_state st = seq_state(seen);
  const std::uint32_t actor = seq_actor(seen);
  if (st == slot_state::empty) {
    // seq_cst: see claimants_of
    if ((L.hdr->tail.load(std::memory_order_seq_cst) >> 1) <= q) return false;
    const claim_verdict v = claimants_of(m, L.index, q, exclude);
    if (v == claim_verdict::live) return false;
    if (v == claim_verdict::none && now - stuck_since < kOrphanClaimNs) return false;
    // acquire: pairs with P5's release (published meanwhile) or another repairer's.
    if (s->seq.load(std::memory_order_acquire) != seen) return true;  // published meanwhile
    return abandon_fifo(L, q, seen, r);
  }
  if (st == slot_state::done || st == slot_state::dropped) {
    // Committed by an owner, not yet freed: finished by that owner, or (dead) here.
    return is_owner_actor(actor) && finish_dead_commit(m, L, actor);
  }
  if (st != slot_state::taken) return false;
  const holder h = actor_state(m, actor);
  if (h == holder::alive) return false;
  if (h == holder::invalid) return abandon_fifo(L, q, seen, r);
  if (!is_owner_actor(actor)) return complete_dead_producer(m, L, q, 0, seen, actor, r);
  // R3: a gone owner's slot.
  switch (dead_owner_op(m, L, q & kTargetMask, actor)) {
    case 1: {
      // (the CAS below) release: pairs with the acquire of the next claimant (P1, L1).
      finish_dead_owner_repair(m, L, actor);
      std::uint64_t expected = seen;
      return s->seq.compare_exchange_strong(expected, finished_seq(L, seen), std::memory_order_release,
                                            std::memory_order_relaxed);
    }
    // (the CAS below) release: pairs with the acquire of the next claimant (P1, L1).
    case 2: {
      std::uint64_t expected = seen;
      return s->seq.compare_exchange_strong(expected, finished_seq(L, seen), std::memory_order_release,
                                            std::memory_order_relaxed);
    }
    default:
      // Uncommitted: the next owner will deliver it again. Only an evictor
      // that needs the slot now may drop it instead (it is the oldest).
      return p != nullptr && evict_fifo(*p, L, q, seen);
  }
}

// A producer stuck behind slot seq `seen` of position q: repair after the
// grace period, at most once per kRepairIntervalNs per handle.
void producer_maybe_repair(producer_ctx& p, const lane_view& L, std::uint64_t q, std::uint64_t seen,
                           std::uint64_t& stuck_since) noexcept {
  // A busy slot is nearly always an owner or writer a few ns from done: look
  // at the clock only every 64th time (a busy retry loop stays cheap).
  // (A post that has been waiting a while, stuck_since != 0, always looks.)
  if (stuck_since == 0 && (++p.busy_seen & 63) != 0) return;
  const std::uint64_t now = mono_ns();
  if (!producer_repair_due(p, stuck_since, now)) return;
  repair_fifo_slot(*p.m, L, q, seen, p.rep, L.pol == policy::drop_oldest ? &p : nullptr, -1, stuck_since, now);
}

// A FIFO position stuck at EMPTY(p) with the tail past it (owner side of R1),
// or TAKEN by a producer (T1b: owner side of R2).
bool owner_check_stuck(owner_ctx& o, const lane_view& L, std::uint64_t p, std::uint64_t seen) noexcept {
  const std::uint64_t now = mono_ns();
  if (!owner_repair_due(o, L.index, p, now)) return false;
  return repair_fifo_slot(*o.m, L, p, seen, o.rep, nullptr, -1, o.stuck_since_ns[L.index], now);
}

// DONE/DROPPED slots of a gone owner actor whose process is dead: it
// committed them (TAKEN -> DONE or DROPPED) and may not have counted them.
// Counts them exactly once (op_before, op_before_b) and frees them. Returns
// true if it freed any.
bool finish_dead_commit(mapped_box& m, const lane_view& L, std::uint32_t actor) noexcept {
  const std::uint32_t idx = owner_actor_index(actor);
  const owner_actor* ar = m.actor(idx);
  // a stale owner finishes its own (it holds its actor's byte until its handle goes)
  // acquire: no release of its own (owner_recover stores the actor's key relaxed); it
  // is visible through the DONE slot read (acquire) after that owner's C2 (release).
  if (role_alive(m, actor_byte(m, idx), ar->key.load(std::memory_order_acquire))) return false;
  std::vector<std::pair<std::uint32_t, std::uint64_t>> done;
  std::uint64_t delivered = 0, dropped = 0;
  for (std::uint32_t i = 0; i < L.capacity; ++i) {
    // acquire: pairs with C2's CAS (owner_commit), which published C1's op and op_before.
    const std::uint64_t seen = L.slot_at_index(i)->seq.load(std::memory_order_acquire);
    const slot_state st = seq_state(seen);
    if ((st != slot_state::done && st != slot_state::dropped) || seq_actor(seen) != actor) continue;
    done.emplace_back(i, seen);
    (st == slot_state::done ? delivered : dropped) += 1;
  }
  if (done.empty()) return false;
  // acquire (op, op_before, op_before_b): pairs with C2's release, as above.
  const std::uint64_t op = ar->op.load(std::memory_order_acquire);
  if (op_kind_of(op) == op_kind::commit && op_lane(op) == L.index) {
    // Every DONE/DROPPED slot of this actor in this lane belongs to its last
    // commit: a CAS from the value before it counts each kind once. A commit
    // of redeliveries (target 1) has no drops; its second count is redelivered.
    std::uint64_t before = ar->op_before.load(std::memory_order_acquire);
    std::uint64_t before_b = ar->op_before_b.load(std::memory_order_acquire);
    owner_lane_counters* oc = m.actor_counters(idx, L.index);
    if (delivered != 0) oc->delivered.compare_exchange_strong(before, before + delivered, std::memory_order_relaxed);
    if (op_target(op) == 1) {
      if (delivered != 0) oc->redelivered.compare_exchange_strong(before_b, before_b + delivered, std::memory_order_relaxed);
    } else if (dropped != 0) {
      oc->filtered.compare_exchange_strong(before_b, before_b + dropped, std::memory_order_relaxed);
    }
  }
  // (the CASes below) release: C4 for the dead owner; pairs with the acquire of the
  // next claimant (P1, L1).
  bool freed = false;
  for (auto& [i, seen] : done)
    freed |= L.slot_at_index(i)->seq.compare_exchange_strong(seen, finished_seq(L, seen), std::memory_order_release,
                                                             std::memory_order_relaxed);
  return freed;
}

// A slot TAKEN by another owner actor: that owner is gone (we own the box).
// Committed (fast path) or being repaired: finish it. Otherwise take it over
// for redelivery. Returns 1 if it is now TAKEN by us, 0 if it was finished
// (freed), -1 if the slot changed under us, 2 if it belongs to a newer owner
// (we are stale: leave it). Used at acquire (R4) and by the
// take loops, which meet slots a stale owner took after our recovery ran.
int adopt_gone_owner_slot(owner_ctx& o, const lane_view& L, slot_header* s, std::uint64_t target,
                          std::uint64_t seen) noexcept {
  mapped_box& m = *o.m;
  const std::uint32_t actor = seq_actor(seen);
  // A NEWER owner's slot (its actor record holds a later epoch than ours):
  // we are a stale owner whose lease expired while it ran on. That slot is
  // not ours to adopt: re-taking it would make the newer owner's commit fail
  // and, once we fail our own commit, leave the message TAKEN by an actor
  // whose successor has already moved past it (found by model/lease.pml).
  // acquire: no release of its own (owner_recover stores the epoch relaxed); it is
  // visible through the slot we read (acquire) after that owner took it (T3/H1).
  if (m.actor(owner_actor_index(actor))->epoch.load(std::memory_order_acquire) > o.epoch) return 2;
  const int verdict = dead_owner_op(m, L, target & kTargetMask, actor);
  if (verdict == 1) finish_dead_owner_repair(m, L, actor);
  // (the CAS below) release: pairs with the acquire of the next claimant (P1, L1).
  if (verdict == 1 || verdict == 2)
    return s->seq.compare_exchange_strong(seen, finished_seq(L, seen), std::memory_order_release,
                                          std::memory_order_relaxed)
               ? 0
               : -1;
  // Uncommitted: ours now, to be delivered again (a stale owner that still
  // acq_rel (the CAS below): acquire pairs with the gone owner's take (T3 / H1:
  // its payload, delivered again by us); release: our TAKEN to that stale owner's C2
  // CAS, which then fails, and to later repairers.
  // runs will fail to commit it: its C2 expects its own TAKEN).
  return s->seq.compare_exchange_strong(seen, make_seq(seq_pos(seen), slot_state::taken, o.rep.actor),
                                        std::memory_order_acq_rel, std::memory_order_relaxed)
             ? 1
             : -1;
}

// ---------------------------------------------------------------------------
// Producer entries
// ---------------------------------------------------------------------------

namespace {
// entry: the producer entry, or (owner) the owner actor index.
void fill_repairer(mapped_box& m, std::uint32_t actor, a64* op, a64* op_before, bool owner, std::uint32_t entry,
                   repairer& r) noexcept {
  r.actor = actor;
  r.op = op;
  r.op_before = op_before;
  for (std::uint32_t l = 0; l < m.lane_count(); ++l)
    r.abandoned[l] = owner ? &m.actor_counters(entry, l)->abandoned : &m.producer_counters(entry, l)->abandoned;
}

// Finishes the pending op of a dead process whose entry we just took over.
void finish_dead_entry(producer_ctx& p) noexcept {
  mapped_box& m = *p.m;
  // acquire: no release partner: the dead holder stored its op relaxed after its key
  // CAS; it is ordered before us by its death (the entry's lock byte, liveness.hpp L1).
  const std::uint64_t op = p.pe->op.load(std::memory_order_acquire);
  const std::uint32_t lane = op_lane(op);
  if (op_kind_of(op) == op_kind::none || lane >= m.lane_count()) {
    p.pe->op.store(0, std::memory_order_relaxed);
    return;
  }
  const lane_view& L = m.lanes[lane];
  if (L.is_lifo()) {
    const std::uint64_t i = op_target(op);
    if (i < L.capacity) {
      // acquire: pairs with the slot's last release (L1-L2, R1, abort).
      const std::uint64_t seen = L.slot_at_index(i)->seq.load(std::memory_order_acquire);
      const slot_state st = seq_state(seen);
      if ((st == slot_state::writing || st == slot_state::taken) && seq_actor(seen) == p.rep.actor)
        complete_dead_producer(m, L, 0, static_cast<std::uint32_t>(i), seen, p.rep.actor, p.rep);
    }
  } else {
    // seq_cst: as R1's tail load in repair_fifo_slot (pairs with P3's release).
    const std::uint64_t t = L.hdr->tail.load(std::memory_order_seq_cst) >> 1;
    const bool run = op_kind_of(op) == op_kind::claim_run;
    const std::uint64_t first = run ? t - ((t - run_first(op_target(op))) & kPosMask) : unfold_target(op_target(op), t);
    const std::uint32_t count = run ? run_length(op_target(op)) : 1;
    for (std::uint64_t q = first; q != first + count && q < t; ++q) {
    // acquire: pairs with the slot's last release (P5, E2/E4, R1, abort).
    const std::uint64_t seen = L.slot_for(q)->seq.load(std::memory_order_acquire);
    if (pos_diff(seq_pos(seen), q) == 0) {
      const slot_state st = seq_state(seen);
      if ((run || op_kind_of(op) == op_kind::claim || op_kind_of(op) == op_kind::abort) && st == slot_state::empty && t > q) {
        // The dead holder may have claimed q and never published it; if no
        // other live producer claims q, abandon it (R1, excluding this entry).
        if (claimants_of(m, lane, q, p.entry) != claim_verdict::live) abandon_fifo(L, q, seen, p.rep);
      } else if (st == slot_state::taken && seq_actor(seen) == p.rep.actor) {
        complete_dead_producer(m, L, q, 0, seen, p.rep.actor, p.rep);
      }
    }
    }
  }
  p.pe->op.store(0, std::memory_order_relaxed);
}
}  // namespace

namespace {
// Claims entry i, whose key was `k` (0: free; else a dead holder's, whose
// pending op is completed first). False when another claimant won it, or
// when its byte stayed held by another process until `give_up_ns`
// (liveness.hpp L7: then *locked_out counts it).
bool claim_entry(mapped_box& m, std::uint32_t i, std::uint64_t k, std::uint64_t me, producer_ctx& out,
                 std::uint64_t give_up_ns, std::uint32_t* locked_out) noexcept {
  producer_entry* pe = m.producer(i);
  // liveness.hpp L1: the entry's byte first, then the key.
  if (!out.lock.lock(m, producer_byte(m, i), give_up_ns)) {
    if (locked_out != nullptr && (errno == EAGAIN || errno == EINTR)) ++*locked_out;
    return false;
  }
  // (pairs: acquire with release_producer_entry's release CAS; release with the
  // acquire key loads of actor_state, claimants_of and the next claimant.)
  // acq_rel: acquire the dead holder's op and counters; release our key
  if (!pe->key.compare_exchange_strong(k, me, std::memory_order_acq_rel, std::memory_order_relaxed)) {
    out.lock.unlock(producer_byte(m, i));
    return false;
  }
  pe->pid_ns.store(self_pid_ns(), std::memory_order_relaxed);  // display only
  out.m = &m;
  out.entry = i;
  out.pe = pe;
  fill_repairer(m, i + 1, &pe->op, &pe->op_before_a, false, i, out.rep);
  if (k != 0) finish_dead_entry(out);
  pe->op.store(0, std::memory_order_relaxed);
  // THE QUOTA (ring.hpp): where this holder's messages start in each FIFO lane.
  // Every claim of a previous holder is below it: it released the entry with a
  // release CAS of the key, which our acq_rel key CAS read, or it is dead and its
  // claims were done before the kernel dropped its lock, which we then took.
  for (std::uint32_t l = 0; l < m.lane_count(); ++l) {
    if (m.lanes[l].is_lifo()) continue;
    // acquire: pairs with P3's release (the tail CASes of earlier holders and others)
    const std::uint64_t t = m.lanes[l].hdr->tail.load(std::memory_order_acquire) >> 1;
    out.attached_tail[l] = t;
    // relaxed: for inspectors only (waiting, verify), which read it as a hint
    m.producer_counters(i, l)->attached_tail.store(t, std::memory_order_relaxed);
  }
  pe->attached_unix_ns.store(unix_ns(), std::memory_order_relaxed);
  return true;
}
}  // namespace

bool claim_producer_entry(mapped_box& m, producer_ctx& out, std::uint32_t* locked_out, std::uint64_t give_up_ns) noexcept {
  const std::uint64_t me = self_key();
  if (me == 0) return false;
  // L7: one deadline for every entry tried; an entry whose byte another
  // process holds past it is skipped (a hostile lock costs that entry only).
  const std::uint64_t give_up = give_up_ns != 0 ? give_up_ns : mono_ns() + kRoleLockWaitNs;
  // Free entries first (no system calls), then entries of dead processes.
  for (int pass = 0; pass < 2; ++pass) {
    for (std::uint32_t i = 0; i < m.max_producers(); ++i) {
      producer_entry* pe = m.producer(i);
      // acquire: pairs with release_producer_entry's release CAS (key -> 0) and a
      // claimant's acq_rel CAS below.
      std::uint64_t k = pe->key.load(std::memory_order_acquire);
      if (pass == 0 ? k != 0 : (k == 0 || lock_held(m, producer_byte(m, i)))) continue;
      if (claim_entry(m, i, k, me, out, give_up, locked_out)) return true;
    }
  }
  return false;
}

bool adopt_producer_entry(mapped_box& m, std::uint32_t i, std::uint64_t attached_ns, producer_ctx& out) noexcept {
  const std::uint64_t me = self_key();
  if (me == 0 || i >= m.max_producers() || attached_ns == 0) return false;
  producer_entry* pe = m.producer(i);
  // acquire: as in claim_producer_entry; the stamp is read after the key, so
  // a claimant that changed both is seen by the key CAS in claim_entry.
  const std::uint64_t k = pe->key.load(std::memory_order_acquire);
  if (k == 0 || pe->attached_unix_ns.load(std::memory_order_relaxed) != attached_ns || lock_held(m, producer_byte(m, i))) return false;
  return claim_entry(m, i, k, me, out, 0, nullptr);
}

void release_producer_entry(producer_ctx& p) noexcept {
  if (p.pe == nullptr) return;
  p.pe->op.store(0, std::memory_order_relaxed);
  std::uint64_t me = self_key();
  // release: our last slot writes and counters happen before the entry is free
  // release: pairs with the acquire key load / acq_rel CAS of the entry's next
  // claimant (claim_producer_entry).
  p.pe->key.compare_exchange_strong(me, 0, std::memory_order_release, std::memory_order_relaxed);
  p.lock.reset();  // liveness.hpp L1: after the key is cleared
  p.pe = nullptr;
}

// ---------------------------------------------------------------------------
// Owner recovery (R4)
// ---------------------------------------------------------------------------

void owner_recover(owner_ctx& o) noexcept {
  mapped_box& m = *o.m;
  o.actor_index = static_cast<std::uint32_t>(o.epoch % kOwnerActors);
  o.act = m.actor(o.actor_index);
  o.act->key.store(o.key, std::memory_order_relaxed);
  o.act->epoch.store(o.epoch, std::memory_order_relaxed);
  // release: publishes the actor's key and epoch (relaxed above); pairs with the
  // acquire loads of the op in dead_owner_op / finish_dead_commit.
  o.act->op.store(0, std::memory_order_release);
  fill_repairer(m, owner_actor_id(o.epoch), &o.act->op, &o.act->op_before, true, o.actor_index, o.rep);
  o.fenced = m.lease_ms() > 0;
  o.pending.clear();
  for (std::uint32_t l = 0; l < m.lane_count(); ++l) {
    const lane_view& L = m.lanes[l];
    o.lifo_redeliver[l].clear();
    // Which slots can hold a gone owner's TAKEN/DONE: in a FIFO lane without
    // a lease only the positions between the last published head and the
    // tail (the head's only writer is the one owner, and it never publishes
    // past a position it still holds); in a lifo lane any slot. So a takeover
    // costs O(messages in flight), not O(capacity).
    // With a lease, a stale owner (lease expired, still running) may publish
    // its own cursor after its successor took positions below it; should the
    // successor die, those would sit below the head (found by
    // model/lease.pml). So a lease box's new owner scans the whole lane
    // [tail - cap, tail) and starts its cursor at the lowest slot it adopts.
    std::uint64_t first = 0, count = L.capacity;
    if (!L.is_lifo()) {
      // acquire: pairs with P3's release (tail) and T7's (head, publish_head).
      const std::uint64_t t = L.hdr->tail.load(std::memory_order_acquire) >> 1;
      std::uint64_t h = L.hdr->head.load(std::memory_order_acquire);
      if (h > t) h = t;
      if (t - h > L.capacity) h = t - L.capacity;
      o.head[l] = h;
      first = o.fenced ? (t > L.capacity ? t - L.capacity : 0) : h;
      count = t - first;
    }
    auto slot_no = [&](std::uint64_t k) { return L.is_lifo() ? k : L.slot_index(first + k); };
    // Committed-but-unfreed slots of dead owners first (counted once per actor).
    std::vector<std::uint32_t> actors;
    for (std::uint64_t k = 0; k < count; ++k) {
      // acquire: pairs with the last change of the slot by a gone owner (T3, H1, C2).
      const std::uint64_t seen = L.slot_at_index(slot_no(k))->seq.load(std::memory_order_acquire);
      const std::uint32_t actor = seq_actor(seen);
      const slot_state st = seq_state(seen);
      if ((st == slot_state::done || st == slot_state::dropped) && is_owner_actor(actor) && actor != o.rep.actor &&
          std::find(actors.begin(), actors.end(), actor) == actors.end())
        actors.push_back(actor);
    }
    for (const std::uint32_t actor : actors) finish_dead_commit(m, L, actor);
    for (std::uint64_t k = 0; k < count; ++k) {
      const std::uint64_t i = slot_no(k);
      slot_header* s = L.slot_at_index(i);
      // acquire: pairs with T3, H1, C2, as above.
      const std::uint64_t seen = s->seq.load(std::memory_order_acquire);
      const std::uint32_t actor = seq_actor(seen);
      if (seq_state(seen) != slot_state::taken || !is_owner_actor(actor) || actor == o.rep.actor) continue;
      // R4. FIFO slots re-taken by us are found again by the take loop from
      // the cursor, which must not be above them.
      const std::uint64_t where = L.is_lifo() ? i : seq_pos(seen);
      if (adopt_gone_owner_slot(o, L, s, where, seen) == 1) {
        if (L.is_lifo()) o.lifo_redeliver[l].push_back(static_cast<std::uint32_t>(i));
        else if (const std::int64_t below = pos_diff(where, o.head[l]); below < 0) o.head[l] -= static_cast<std::uint64_t>(-below);
      }
      SHMBOX_FAULT("takeover.mid_recovery");
    }
    o.stuck_since_ns[l] = 0;
    owner_clear_sleep(o, l);  // a previous owner may have died asleep: no stray wake-ups
  }  stash_recover(o);  // THE STASH: after the rings (ring.hpp)
}

}  // namespace shmbox::detail
