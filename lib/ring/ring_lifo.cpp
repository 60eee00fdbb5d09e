// lib/ring/ring_lifo.cpp - LIFO LANES of the slot protocol (ring.hpp, "lifo
// lanes"): push L1, replace L2 (a full lane), publish with SYNC POINT C, the
// producer's repair of dead writers, pop L3 (the owner, newest first) and
// the arming of the owner's sleep on a lifo lane (SYNC POINT D).
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "base/errors.hpp"
#include "base/fault.hpp"
#include "base/process.hpp"
#include "ring/ring.hpp"
#include "ring/ring_internal.hpp"
#include "ring/wake.hpp"

namespace shmbox::detail {

// L1-L2's publish: a lifo slot we hold WRITING, its payload written; then wake a sleeping owner.
void lifo_publish(producer_ctx& p, const lane_view& L, slot_header* s, std::uint64_t stamp, std::size_t size) noexcept {
  s->length.store(static_cast<std::uint32_t>(size), std::memory_order_relaxed);  // relaxed: published by the exchange
  s->writer.store(p.entry, std::memory_order_relaxed);
  // SYNC POINT C: the publishing exchange (seq_cst), then the load of the
  // sleeping bit (seq_cst); pairs with SYNC POINT D in lifo_arm_sleep. seq_cst:
  // a store then a load (Dekker): acquire/release cannot order those. The
  // exchange's release half also publishes payload and length to L3's acquire.
  s->seq.exchange(make_seq(stamp, slot_state::full, p.rep.actor), std::memory_order_seq_cst);
  if (L.hdr->lifo_stamp.load(std::memory_order_seq_cst) & 1) wake_owner(p);  // the owner clears the bit
}

namespace {

void producer_maybe_repair_lifo(producer_ctx& p, const lane_view& L, std::uint64_t& stuck_since) noexcept {
  const std::uint64_t now = mono_ns();
  if (!producer_repair_due(p, stuck_since, now)) return;
  for (std::uint32_t i = 0; i < L.capacity; ++i) {
    // acquire: pairs with the CAS that made the slot WRITING / TAKEN (L1-L2, L3, R1), so
    // the holder's op record is visible to complete_dead_producer.
    const std::uint64_t seen = L.slot_at_index(i)->seq.load(std::memory_order_acquire);
    const slot_state st = seq_state(seen);
    const std::uint32_t actor = seq_actor(seen);
    if ((st == slot_state::done || st == slot_state::dropped) && is_owner_actor(actor)) {
      finish_dead_commit(*p.m, L, actor);
      continue;
    }
    if (st != slot_state::writing && st != slot_state::taken) continue;
    if (is_owner_actor(actor)) continue;  // a gone owner's slots are the next owner's (R4)
    const holder h = actor_state(*p.m, actor);
    if (h == holder::dead) complete_dead_producer(*p.m, L, 0, i, seen, actor, p.rep);
    else if (h == holder::invalid) abandon_lifo(L, i, seen, p.rep);
  }
}

}  // namespace

// L1-L2 up to the payload: holds a lifo slot WRITING for one message.
post_status lifo_claim(producer_ctx& p, const lane_view& L, producer_lane_counters* c, lazy_deadline& deadline,
                       slot_claim& out) noexcept {
  lane_header* h = L.hdr;
  const std::uint32_t cap = L.capacity;
  // relaxed: a unique number is all we need; the slot CAS orders the rest.
  const std::uint64_t stamp = (h->lifo_stamp.fetch_add(2, std::memory_order_relaxed) >> 1) & kPosMask;
  std::uint64_t stuck_since = 0;
  unsigned rounds = 0;
  for (;;) {
    // L1: a free slot, starting after the one we used last.
    for (std::uint32_t k = 0; k < cap; ++k) {
      const std::uint32_t i = (p.lifo_hint + k) % cap;
      slot_header* s = L.slot_at_index(i);
      // acquire: pairs with the release that freed it (its reads happen before our writes)
      std::uint64_t seen = s->seq.load(std::memory_order_acquire);
      if (seq_state(seen) != slot_state::free) continue;
      const std::uint64_t stored = c->stored.load(std::memory_order_relaxed);
      p.pe->op_before_a.store(stored, std::memory_order_relaxed);
      p.pe->op.store(make_op(op_kind::lifo_push, L.index, i), std::memory_order_relaxed);  // relaxed: published by the CAS
      // L1. release: publishes our lifo_push op to a repairer that finds the slot WRITING
      // (complete_dead_producer: acquire loads of the slot, then the op). acquire: the
      // load above already pairs with the free. seq_cst: kept as written; the protocol is model-checked (model/*.pml) under SC, and the pairs named need only acq_rel.
      if (!s->seq.compare_exchange_strong(seen, make_seq(stamp, slot_state::writing, p.rep.actor),
                                          std::memory_order_seq_cst, std::memory_order_relaxed))
        continue;
      c->stored.store(stored + 1, std::memory_order_relaxed);
      p.lifo_hint = (i + 1) % cap;
      out = {s, L.index, i, stamp, false};
      return post_status::stored;
    }
    // L2: full: replace the newest message (largest stamp).
    std::int64_t best_d = 0;
    std::uint32_t best = cap;
    std::uint64_t best_seq = 0;
    bool busy = false;
    // acquire (each slot): pairs with L1-L2's publish; the CAS below re-checks the value.
    for (std::uint32_t i = 0; i < cap; ++i) {
      const std::uint64_t seen = L.slot_at_index(i)->seq.load(std::memory_order_acquire);
      const slot_state st = seq_state(seen);
      if (st == slot_state::full) {
        const std::int64_t d = pos_diff(seq_pos(seen), stamp);
        if (best == cap || d > best_d) {
          best = i;
          best_d = d;
          best_seq = seen;
        }
      } else if (st == slot_state::writing || st == slot_state::taken || st == slot_state::free ||
                 st == slot_state::done || st == slot_state::dropped) {
        busy = true;
      }
    }
    if (best != cap) {
      slot_header* s = L.slot_at_index(best);
      const std::uint64_t stored = c->stored.load(std::memory_order_relaxed);
      const std::uint64_t replaced = c->replaced.load(std::memory_order_relaxed);
      p.pe->op_before_a.store(stored, std::memory_order_relaxed);
      p.pe->op_before_b.store(replaced, std::memory_order_relaxed);
      p.pe->op.store(make_op(op_kind::lifo_replace, L.index, best), std::memory_order_relaxed);
      std::uint64_t expected = best_seq;
      // L2. acquire: pairs with the publish of the message we replace (L1-L2), which we may
      // capture; release: publishes our lifo_replace op to repairers (as L1).
      // seq_cst: kept as written; the protocol is model-checked (model/*.pml) under SC, and the pairs named need only acq_rel.
      if (!s->seq.compare_exchange_strong(expected, make_seq(stamp, slot_state::writing, p.rep.actor),
                                          std::memory_order_seq_cst, std::memory_order_relaxed))
        continue;  // the owner took it or another replacer won: look again
      if (p.capture) {  // the replaced message, still intact until we write ours
        const std::uint32_t len = std::min(s->length.load(std::memory_order_relaxed), L.payload);
        p.captured.emplace_back(reinterpret_cast<const char*>(lane_view::payload_of(s)), len);
      }
      c->stored.store(stored + 1, std::memory_order_relaxed);
      c->replaced.store(replaced + 1, std::memory_order_relaxed);
      ++p.evicted;
      out = {s, L.index, best, stamp, false};
      return post_status::stored_evicted;
    }
    p.pe->op.store(0, std::memory_order_relaxed);
    if (!busy) {
      p.last_error = fail(errc::corrupt, "box '" + p.m->name + "': lane " + std::to_string(L.index) +
                                             " has no slot in a valid lifo state (corrupt segment)");
      return post_status::error;
    }
    // L3: every slot is being written or read right now.
    producer_maybe_repair_lifo(p, L, stuck_since);
    if (deadline.timeout_ns == 0 || mono_ns() >= deadline.get()) {
      if (!p.quiet_timeout) bump(c->timeouts);  // (post_options::quiet_timeout)
      return post_status::timeout;
    }
    if (++rounds < 16) cpu_relax();
    else sleep_ns(rounds < 64 ? 0 : 50'000);
  }
}

namespace {

bool lifo_pop_one(owner_ctx& o, const lane_view& L, std::uint32_t i, std::uint64_t seen, bool redeliver,
                  take_sink& sink, take_result& res, take_mode mode) noexcept {
  slot_header* s = L.slot_at_index(i);
  // Read before the take: if the take's CAS succeeds, no replacer touched the
  // slot in between (a replace changes the stamp), so this length is its own.
  const std::uint32_t len = s->length.load(std::memory_order_relaxed);
  if (len > L.payload) {
    res.corrupt = true;
    o.last_error = fail(errc::corrupt, corrupt_slot(o, L, i, "has length " + std::to_string(len) + " > slot size " +
                                                                 std::to_string(L.payload)));
    if (o.pending.empty()) abandon_lifo(L, i, seen, o.rep);
    return true;
  }
  const took t = take_one(o, L, s, i, seen, len, redeliver, sink, mode);
  if (t == took::lost_race) return false;
  if (t == took::skipped) {
    res.skipped = true;
    return true;
  }
  ++res.taken;
  return true;
}

}  // namespace

take_result lifo_take(owner_ctx& o, const lane_view& L, take_sink& sink, take_mode mode) noexcept {
  take_result res;
  auto& again = o.lifo_redeliver[L.index];
  while (res.taken < sink.max && !again.empty() && !res.skipped) {
    const std::uint32_t i = again.back();
    again.pop_back();
    // acquire: pairs with our own adopting CAS (adopt_gone_owner_slot) and, before it,
    // the publish of the message (L1-L2).
    const std::uint64_t seen = L.slot_at_index(i)->seq.load(std::memory_order_acquire);
    if (seq_state(seen) == slot_state::taken && seq_actor(seen) == o.rep.actor) {
      lifo_pop_one(o, L, i, seen, true, sink, res, mode);
      if (res.skipped) again.push_back(i);  // still ours, still to deliver
    }
  }
  // Newest first: a snapshot of the FULL slots by stamp. A slot that changed
  // since the snapshot (replaced) makes us take a new one.
  thread_local std::vector<std::pair<std::int64_t, std::uint32_t>> order;
  thread_local std::vector<std::uint64_t> seqs;
  while (res.taken < sink.max && !res.skipped) {
    order.clear();
    seqs.assign(L.capacity, 0);
    // acquire: no release partner (the stamps are drawn with a relaxed fetch_add): ref
    // only anchors the comparison of stamps; each slot's own acquire below orders it.
    const std::uint64_t ref = (L.hdr->lifo_stamp.load(std::memory_order_acquire) >> 1) & kPosMask;
    std::uint64_t oldest_writing = 0;
    for (std::uint32_t i = 0; i < L.capacity; ++i) {
      // acquire: pairs with L1-L2's publishing exchange (the payload lifo_pop_one copies).
      const std::uint64_t seen = L.slot_at_index(i)->seq.load(std::memory_order_acquire);
      seqs[i] = seen;
      const slot_state st = seq_state(seen);
      if (st == slot_state::full) order.emplace_back(pos_diff(seq_pos(seen), ref), i);
      else if (st == slot_state::writing) {
        res.busy = true;
        oldest_writing = seen;
      } else if (st == slot_state::empty && o.pending.empty()) {
        res.corrupt = true;
        o.last_error = fail(errc::corrupt, corrupt_slot(o, L, i, "is in a FIFO state"));
        abandon_lifo(L, i, seen, o.rep);
      } else if ((st == slot_state::done || st == slot_state::dropped) && is_owner_actor(seq_actor(seen)) &&
                 seq_actor(seen) != o.rep.actor && o.pending.empty()) {
        finish_dead_commit(*o.m, L, seq_actor(seen));
      } else if (st == slot_state::taken && is_owner_actor(seq_actor(seen)) && seq_actor(seen) != o.rep.actor) {
        if (adopt_gone_owner_slot(o, L, L.slot_at_index(i), i, seen) == 1) again.push_back(i);
      }
    }
    if (order.empty()) {
      if (res.busy && res.taken == 0 && o.pending.empty()) {
        // Something is being written: after the grace period, repair dead writers.
        if (owner_repair_due(o, L.index, oldest_writing, mono_ns())) {
          bool repaired = false;
          for (std::uint32_t i = 0; i < L.capacity; ++i) {
            const slot_state st = seq_state(seqs[i]);
            if (st != slot_state::writing && st != slot_state::taken) continue;
            const std::uint32_t actor = seq_actor(seqs[i]);
            if (is_owner_actor(actor)) continue;
            const holder h = actor_state(*o.m, actor);
            if (h == holder::dead) repaired |= complete_dead_producer(*o.m, L, 0, i, seqs[i], actor, o.rep);
            else if (h == holder::invalid) repaired |= abandon_lifo(L, i, seqs[i], o.rep);
          }
          if (repaired) continue;
        }
      }
      break;
    }
    std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    bool changed = false;
    for (const auto& [d, i] : order) {
      if (res.taken >= sink.max || res.skipped) break;
      if (!lifo_pop_one(o, L, i, seqs[i], false, sink, res, mode)) {
        changed = true;
        break;
      }
    }
    if (!changed) break;  // the batch is the snapshot; newer pushes wait for the next call
  }
  if (res.taken > 0) {
    o.stuck_since_ns[L.index] = 0;
    if (mode == take_mode::commit_each) wake_space_waiters(L, o.light_fence);
  }
  return res;
}

// The lifo part of owner_arm_sleep (ring_take.cpp).
bool lifo_arm_sleep(owner_ctx& o, const lane_view& L) noexcept {
  lane_header* h = L.hdr;
  if (!o.lifo_redeliver[L.index].empty()) return false;
  // seq_cst (the load, the CAS and the slot loads below): SYNC POINT D, a store-load
  // pattern with SYNC POINT C (lifo_publish): only seq_cst orders our bit before our
  // reads of the slots against the push's exchange before its read of the bit.
  std::uint64_t w = h->lifo_stamp.load(std::memory_order_seq_cst);
  if (!(w & 1) && !h->lifo_stamp.compare_exchange_strong(w, w | 1, std::memory_order_seq_cst, std::memory_order_relaxed))
    return false;
  // SYNC POINT D: the bit is set (seq_cst RMW); now every slot is read
  // seq_cst. Pairs with SYNC POINT C: a push either shows up here or sees the bit.
  for (std::uint32_t i = 0; i < L.capacity; ++i) {
    const slot_state st = seq_state(L.slot_at_index(i)->seq.load(std::memory_order_seq_cst));
    if (st == slot_state::full || st == slot_state::writing) return false;
  }
  return true;
}

}  // namespace shmbox::detail
