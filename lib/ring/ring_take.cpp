// lib/ring/ring_take.cpp - TAKING in the slot protocol (ring.hpp): the owner's
// take of a FIFO lane T1-T7 (fifo_take; take_one, its per-message step, is
// inline in ring_internal.hpp), HOLD H1 and COMMIT C1-C4 (two-phase
// receive), giving held slots back, and the arming of the owner's sleep
// (the owner-sleeping bit; the sleep itself is in wake.cpp). Lifo lanes:
// ring_lifo.cpp.
#include <algorithm>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "base/errors.hpp"
#include "base/fault.hpp"
#include "ring/ring.hpp"
#include "ring/ring_internal.hpp"
#include "ring/wake.hpp"

namespace shmbox::detail {

std::string corrupt_slot(const owner_ctx& o, const lane_view& L, std::uint64_t idx, const std::string& what) {
  return "box '" + o.m->name + "': lane " + std::to_string(L.index) + " slot " + std::to_string(idx) + " " + what +
         " (corrupt segment; the message there is counted as abandoned)";
}

namespace {

// Publishes the FIFO head: the first position this owner has not finished
// (held, uncommitted positions count as unfinished).
void publish_head(owner_ctx& o, const lane_view& L) noexcept {
  std::uint64_t h = o.head[L.index];
  for (const pending_slot& ps : o.pending)
    if (!ps.stash && ps.lane == L.index && ps.where < h) h = ps.where;
  // T7 release: pairs with the acquire loads of the head in owner_recover (R4, the next
  // owner: ring_repair.cpp) and lane_depth_scan (inspectors).
  L.hdr->head.store(h, std::memory_order_release);  // T7 release: read by inspectors and the next owner
}

take_result fifo_take(owner_ctx& o, const lane_view& L, take_sink& sink, take_mode mode) noexcept {
  lane_header* h = L.hdr;
  const std::uint64_t cap = L.capacity;
  take_result res;
  std::uint64_t p = o.head[L.index];
  const std::uint64_t first = p;
  std::size_t n = 0;
  // A healthy lane is walked in at most about 2 x cap steps per call (cap
  // positions to take or skip, plus retries after lost races). Only a
  // scribbled segment (a tail or slot positions far off) could make the walk
  // go on and on: after this many steps, stop and report it (found by
  // fuzz/segment_fuzz).
  std::uint64_t budget = 4 * cap + 1024;

  while (n < sink.max) {
    if (budget-- == 0) {
      res.corrupt = true;
      o.last_error = fail(errc::corrupt, "box '" + o.m->name + "': lane " + std::to_string(L.index) +
                                             ": the owner's cursor cannot advance (corrupt tail or slot positions)");
      break;
    }
    slot_header* s = L.slot_for(p);
    const std::uint64_t seen = s->seq.load(std::memory_order_acquire);  // T1 acquire: pairs with P5's release
    const std::int64_t d = pos_diff(seq_pos(seen), p);
    if (d > 0) {
      // p's fate was decided by someone else (evicted, repaired) and the slot
      // reused. Every position below tail - cap is finished: jump there.
      // acquire: pairs with the claim CASes (P3, release) that moved the tail.
      const std::uint64_t t = h->tail.load(std::memory_order_acquire) >> 1;
      if (p >= t) {  // a position ahead of the tail: only a scribbled slot says so
        res.corrupt = true;
        o.last_error = fail(errc::corrupt, corrupt_slot(o, L, L.slot_index(p), "holds a position ahead of the tail"));
        break;
      }
      p = t > p + cap ? t - cap : p + 1;
      continue;
    }
    if (d == -static_cast<std::int64_t>(cap)) {
      // The slot still holds the previous lap's position p - cap: a slot we
      // passed (a gone owner's DONE, T1) is not finished yet, so p cannot
      // have been claimed. Nothing more to take here for now.
      break;
    }
    if (d < 0) {
      // The slot lags behind our cursor: the segment was written over.
      res.corrupt = true;
      o.last_error = fail(errc::corrupt, corrupt_slot(o, L, L.slot_index(p), "is behind the owner's cursor"));
      if (n > 0) break;
      ++p;  // skip it: a scribbled slot can lose a message, never hang the owner
      continue;
    }
    const slot_state st = seq_state(seen);
    const std::uint32_t actor = seq_actor(seen);
    const bool redeliver = st == slot_state::taken && actor == o.rep.actor;
    if (st == slot_state::full || redeliver) {
      // Stable while FULL: no one but an evictor touches a FULL slot, and an
      // evictor changes the sequence word, which makes our take fail.
      const std::uint32_t len = s->length.load(std::memory_order_relaxed);
      if (len > L.payload) {
        if (n > 0 || !o.pending.empty()) break;  // the next call repairs it
        res.corrupt = true;
        o.last_error = fail(errc::corrupt, corrupt_slot(o, L, L.slot_index(p), "has length " + std::to_string(len) +
                                                                                 " > slot size " + std::to_string(L.payload)));
        abandon_fifo(L, p, seen, o.rep);
        continue;
      }
      const took t = take_one(o, L, s, p, seen, len, redeliver, sink, mode);
      if (t == took::lost_race) continue;  // look again
      if (t == took::skipped) {
        res.skipped = true;
        break;
      }
      ++n;
      ++p;
      continue;
    }
    if (st == slot_state::taken && is_owner_actor(actor)) {
      // Taken by another owner, which is gone: adopt it (redelivered) or finish it.
      const int adopted = adopt_gone_owner_slot(o, L, s, p, seen);
      if (adopted == 2) break;  // a newer owner's: we are stale, take nothing more
      if (adopted != 0) continue;  // look again
      ++p;
      continue;
    }
    if (st == slot_state::taken) {
      // T1b: held by a producer: an evictor (E2-E4), a repairer (R1), a loan
      // being given back (ABORT) or a resize's drop. It decides p's fate in a
      // few instructions; until it has counted it, p is in no counter and in
      // no depth. So the cursor never passes it: wait (busy), and once the
      // holder is dead finish its op (R2: count once, free). Skipping it, as
      // before, left a dead evictor's uncounted message for a producer that
      // needs the slot a lap later: in a box nobody posts into, for ever
      // (issue 53, item 9; fault point producer.evict_taken).
      res.busy = true;
      if (n == 0 && o.pending.empty() && owner_check_stuck(o, L, p, seen)) continue;  // repaired: look again
      break;
    }
    if (st == slot_state::done || st == slot_state::dropped) {
      // Committed by an owner that is gone (a dead one's commit we finish
      // here): skip p.
      if (is_owner_actor(actor) && actor != o.rep.actor && n == 0 && o.pending.empty())
        finish_dead_commit(*o.m, L, actor);
      ++p;
      continue;
    }
    if (st == slot_state::empty) {
      // Not published (yet). Whether p is claimed at all needs the tail, the
      // producers' hottest line: a polling owner reads it only now and then.
      if (n > 0 || !sink.look_at_tail) {
        res.unknown = n == 0;
        break;
      }
      // acquire half: pairs with P3's release (a claimant's op is then visible to R1 in
      // owner_check_stuck). seq_cst: one order with the claim CASes and R1's tail loads;
      // the pair itself needs only acquire (kept as written and modelled).
      const std::uint64_t t = h->tail.load(std::memory_order_seq_cst) >> 1;
      if (t <= p) break;  // nothing more in the lane
      res.busy = true;    // claimed, not yet published
      if (o.pending.empty() && owner_check_stuck(o, L, p, seen)) continue;  // repaired: look again
      break;
    }
    // writing/free do not exist in FIFO lanes.
    res.corrupt = true;
    o.last_error = fail(errc::corrupt, corrupt_slot(o, L, L.slot_index(p), "is in a lifo state"));
    if (n > 0 || !o.pending.empty()) break;
    abandon_fifo(L, p, seen, o.rep);
  }

  if (p != first) {
    o.head[L.index] = p;
    publish_head(o, L);
    o.stuck_since_ns[L.index] = 0;
  }
  if (n > 0 && mode == take_mode::commit_each && (L.pol == policy::block || L.pol == policy::drop_oldest))
    wake_space_waiters(L, o.light_fence);
  res.taken = n;
  return res;
}

}  // namespace

__attribute__((hot)) fast_take owner_take_fast(owner_ctx& o, const lane_view& L, take_sink& sink) noexcept {
  const std::uint64_t p = o.head[L.index];
  slot_header* s = L.slot_for(p);
  const std::uint64_t seen = s->seq.load(std::memory_order_acquire);  // T1 acquire: pairs with P5's release
  if (seen == make_seq(p, slot_state::empty, kActorNone)) return fast_take::empty;
  if (seq_state(seen) != slot_state::full || pos_diff(seq_pos(seen), p) != 0 || L.is_lifo()) return fast_take::general;
  // The next slot's line, while this one is copied out: a producer ahead of
  // us has written it already (a read hint only: no ordering, no fault).
  __builtin_prefetch(L.slot_for(p + 1), 0, 3);
  // Stable while FULL (see fifo_take).
  const std::uint32_t len = s->length.load(std::memory_order_relaxed);
  if (len > L.payload) return fast_take::general;  // fifo_take reports and repairs it
  if (take_one(o, L, s, p, seen, len, false, sink, take_mode::commit_each) != took::yes) return fast_take::general;
  // T7, as fifo_take does for a call that moved the cursor (nothing is
  // pending: the caller checked).
  o.head[L.index] = p + 1;
  // T7 release: pairs with the acquire loads of the head in owner_recover (R4) and
  // lane_depth_scan (inspectors), as publish_head.
  L.hdr->head.store(p + 1, std::memory_order_release);
  o.stuck_since_ns[L.index] = 0;
  if (L.pol == policy::block || L.pol == policy::drop_oldest) wake_space_waiters(L, o.light_fence);  // SYNC POINT B
  return fast_take::taken;
}

take_result owner_take(owner_ctx& o, std::uint32_t lane, take_sink& sink, take_mode mode) noexcept {
  const lane_view& L = o.m->lanes[lane];
  return L.is_lifo() ? lifo_take(o, L, sink, mode) : fifo_take(o, L, sink, mode);
}

// COMMIT (o.pending, lane by lane; in each lane first the messages that are
// not redeliveries, then the redeliveries, as two commits, so that the one a
// dead owner left is counted exactly once):
//  C1 op_before = delivered; op_before_b = filtered, op = commit(lane, 0)
//     (redeliveries: op_before_b = redelivered, op = commit(lane, 1))
//  C2 each slot: CAS TAKEN(x, O) -> DONE(x, O)            (the commit point of
//     that message; fails if a newer owner re-took it: lost to us, it will be
//     delivered again there, flagged)
//       dies here: DONE slots committed, not counted: R4 (or a later owner
//       meeting them) counts every DONE(_, O) of the lane once, via op_before
//       (and, for a commit of redeliveries, redelivered via op_before_b).
//  C3 delivered = op_before + committed; filtered (or redelivered) = op_before_b + ...
//  C4 each DONE slot: CAS -> free (EMPTY(p + cap) / FREE); op = none.
commit_result owner_commit(owner_ctx& o, std::vector<char>* kept, std::size_t first) noexcept {
  commit_result r;
  // o.pending[0, first): earlier reads this commit leaves held (a lease
  // box's receive commits only what it took itself). Set aside while the
  // rest is committed, back before the heads are published: a head never
  // passes a position we still hold.
  std::vector<pending_slot> earlier;
  if (first != 0) {
    first = std::min(first, o.pending.size());
    earlier.assign(o.pending.begin(), o.pending.begin() + static_cast<std::ptrdiff_t>(first));
    o.pending.erase(o.pending.begin(), o.pending.begin() + static_cast<std::ptrdiff_t>(first));
  }
  if (kept != nullptr) kept->assign(o.pending.size(), 0);
  for (std::uint32_t l = 0; l < o.m->lane_count(); ++l) {
    const lane_view& L = o.m->lanes[l];
    owner_lane_counters* oc = o.counters(l);
    for (std::uint64_t again = 0; again < 2; ++again) {
      // (a message the filter dropped is not a delivery, redelivered or not)
      auto in_round = [&](const pending_slot& ps) {
        return !ps.stash && ps.lane == l && (ps.redelivered && !ps.drop) == (again == 1);
      };
      if (std::none_of(o.pending.begin(), o.pending.end(), in_round)) continue;
      a64& second = again == 1 ? oc->redelivered : oc->filtered;
      const std::uint64_t before = oc->delivered.load(std::memory_order_relaxed);  // we are its only writer
      const std::uint64_t before_b = second.load(std::memory_order_relaxed);
      o.act->op_before.store(before, std::memory_order_relaxed);
      o.act->op_before_b.store(before_b, std::memory_order_relaxed);
      o.act->op.store(make_op(op_kind::commit, l, again), std::memory_order_relaxed);  // relaxed: published by the CASes
      std::uint64_t n = 0, dropped = 0;
      for (std::size_t i = 0; i < o.pending.size(); ++i) {
        pending_slot& ps = o.pending[i];
        if (!in_round(ps)) continue;
        slot_header* s = L.is_lifo() ? L.slot_at_index(ps.where) : L.slot_for(ps.where);
        std::uint64_t expected = ps.seq;
        const std::uint64_t done =
            make_seq(seq_pos(ps.seq), ps.drop ? slot_state::dropped : slot_state::done, o.rep.actor);
        // C2. release: publishes C1's commit op to a later owner (finish_dead_commit:
        // acquire loads of the DONE slot, then the op); acquire: pairs with a newer owner's
        // re-take (adopt_gone_owner_slot, acq_rel), whose value makes this CAS fail.
        // seq_cst: kept as written; the protocol is model-checked (model/*.pml) under SC, and the pairs named need only acq_rel.
        if (s->seq.compare_exchange_strong(expected, done, std::memory_order_seq_cst, std::memory_order_relaxed)) {
          ps.seq = done;
          ++(ps.drop ? dropped : n);
          if (kept != nullptr) (*kept)[i] = 1;
        } else {
          ps.seq = 0;  // lost: a newer owner took it back
          ++r.lost;
        }
      }
      SHMBOX_FAULT("owner.mid_commit");
      oc->delivered.store(before + n, std::memory_order_relaxed);
      second.store(before_b + (again == 1 ? n : dropped), std::memory_order_relaxed);
      SHMBOX_FAULT("owner.after_commit");
      for (const pending_slot& ps : o.pending) {
        if (!in_round(ps) || ps.seq == 0) continue;
        slot_header* s = L.is_lifo() ? L.slot_at_index(ps.where) : L.slot_for(ps.where);
        std::uint64_t expected = ps.seq;
        // C4; pairs with the acquire of the next claimant (P1 / claim_fast_inline, L1).
        // release: our payload reads happen before the next writer's writes
        s->seq.compare_exchange_strong(expected, finished_seq(L, ps.seq), std::memory_order_release,
                                       std::memory_order_relaxed);
      }
      // release: pairs with the acquire loads of the op by a later owner (dead_owner_op,
      // finish_dead_commit: ring_repair.cpp): the op is cleared after our frees.
      o.act->op.store(0, std::memory_order_release);
      r.committed += n + dropped;
    }
  }
  stash_commit_pending(o, kept, r);  // THE STASH: held entries (U2-U4)
  std::vector<std::uint32_t> lanes;
  for (const pending_slot& ps : o.pending)
    if (!ps.stash && std::find(lanes.begin(), lanes.end(), ps.lane) == lanes.end()) lanes.push_back(ps.lane);
  o.pending = std::move(earlier);  // still held (publish_head counts them)
  for (const std::uint32_t l : lanes) {
    const lane_view& L = o.m->lanes[l];
    if (!L.is_lifo()) publish_head(o, L);
    if (L.is_lifo() || L.pol == policy::block || L.pol == policy::drop_oldest) wake_space_waiters(L, o.light_fence);
  }
  return r;
}

std::size_t owner_give_back(owner_ctx& o, std::size_t first) noexcept {
  std::size_t n = 0;
  first = std::min(first, o.pending.size());
  const auto from = o.pending.begin() + static_cast<std::ptrdiff_t>(first);
  // Stash entries go back to the front in the order they were taken.
  if (o.m->stash_entries() != 0)
    for (auto it = o.pending.rbegin(); it != std::make_reverse_iterator(from); ++it)
      if (it->stash) stash_give_back(o, *it);
  for (auto it = from; it != o.pending.end(); ++it) {
    const pending_slot& ps = *it;
    if (ps.stash) continue;
    const lane_view& L = o.m->lanes[ps.lane];
    slot_header* s = L.is_lifo() ? L.slot_at_index(ps.where) : L.slot_for(ps.where);
    std::uint64_t expected = ps.seq;
    // pairs with the acquire of the next taker's T1 / lifo scan (and a newer owner's
    //  R4 scan).
    // release: as if we had never taken it (a newer owner may have re-taken it already)
    if (s->seq.compare_exchange_strong(expected, ps.orig, std::memory_order_release, std::memory_order_relaxed)) ++n;
  }
  o.pending.erase(from, o.pending.end());
  return n;
}

bool owner_arm_sleep(owner_ctx& o, std::uint32_t lane) noexcept {
  const lane_view& L = o.m->lanes[lane];
  lane_header* h = L.hdr;
  if (!L.is_lifo()) {
    // The bit goes into the word the claim CASes (P3) change: the next claimant's
    // CAS reads it (RMW order). release (the CAS below): pairs with the acquire of
    // that claimant's P3 CAS, so our read of wake_seq before arming (owner_sleep,
    // wake.cpp) happens before its P6 bump, and the futex wait cannot miss it.
    // seq_cst: kept as written and modelled (SC); the pair needs acq_rel.
    std::uint64_t w = h->tail.load(std::memory_order_seq_cst);
    if ((w >> 1) != o.head[lane]) return false;  // something is claimed
    if (w & 1) return true;
    // seq_cst: the producer whose claim CAS follows ours sees the bit (P6).
    return h->tail.compare_exchange_strong(w, w | 1, std::memory_order_seq_cst, std::memory_order_relaxed);
  }
  return lifo_arm_sleep(o, L);  // SYNC POINT D: ring_lifo.cpp
}

void owner_clear_sleep(owner_ctx& o, std::uint32_t lane) noexcept {
  const lane_view& L = o.m->lanes[lane];
  a64& word = L.is_lifo() ? L.hdr->lifo_stamp : L.hdr->tail;
  std::uint64_t w = word.load(std::memory_order_relaxed);
  while ((w & 1) && !word.compare_exchange_weak(w, w & ~1ull, std::memory_order_relaxed)) {
  }
}

namespace {

// A slot TAKEN by an owner holds a message of the depth unless that owner
// has counted it already: committed (T5 done, T6 not: counted delivered, or
// filtered), or abandoned by its repair of a dead claim (R1, counted, not
// yet freed). An owner killed there (crash point owner.after_commit) leaves
// it so until a takeover or a producer frees it (R3/R4). (Before, every
// owner-TAKEN slot was counted: such a message was in a counter and in the
// depth, `posted` one short of the sum: gencheck's taken-ghost-depth; the
// repair's case found by model/ring.pml.) The owner's own lane counters and
// op words, read only here, off every message path.
bool in_depth_taken(const mapped_box& m, const lane_view& L, std::uint64_t target, std::uint64_t seq) noexcept {
  return is_owner_actor(seq_actor(seq)) && !owner_slot_counted(m, L, target & kTargetMask, seq_actor(seq));
}

}  // namespace

std::uint64_t lane_depth_scan(const mapped_box& m, std::uint32_t lane) noexcept {
  const lane_view& L = m.lanes[lane];
  std::uint64_t n = 0;
  if (L.is_lifo()) {
    for (std::uint32_t i = 0; i < L.capacity; ++i) {
      // acquire: pairs with the release that last changed the slot (L1-L2 publish, L3, R1);
      // a count for inspectors and the notify hub's scan only.
      const std::uint64_t s = L.slot_at_index(i)->seq.load(std::memory_order_acquire);
      const slot_state st = seq_state(s);
      if (st == slot_state::full || st == slot_state::writing || (st == slot_state::taken && in_depth_taken(m, L, i, s)))
        ++n;
    }
    return n;
  }
  // acquire: pairs with P3's release (tail) and T7's (head, publish_head); slots below:
  // with P5 / T3 / T6. A count for inspectors and the notify hub's scan only.
  const std::uint64_t t = L.hdr->tail.load(std::memory_order_acquire) >> 1;
  std::uint64_t lo = L.hdr->head.load(std::memory_order_acquire);
  if (lo > t) lo = t;
  if (t - lo > L.capacity) lo = t - L.capacity;
  for (std::uint64_t q = lo; q < t; ++q) {
    // (see above: pairs with P5 / T3 / T6)
    const std::uint64_t s = L.slot_for(q)->seq.load(std::memory_order_acquire);
    if (pos_diff(seq_pos(s), q) != 0) continue;  // finished and reused
    const slot_state st = seq_state(s);
    // stored and not finished: published, being written, or taken by an owner (not yet committed)
    if (st == slot_state::full || st == slot_state::empty || (st == slot_state::taken && in_depth_taken(m, L, q, s)))
      ++n;
  }
  // A priority box's lane holds its messages in the owner's store too.
  return n + sorted_count(m, lane);
}

}  // namespace shmbox::detail
