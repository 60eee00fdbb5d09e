// lib/ordering/priority.cpp - PRIORITY BOXES (ring.hpp): the owner's sort (moving
// posted messages from the rings into the store, M1-M4), its delivery in
// priority order (Q1-Q3 over the stash entries' U-steps), and the heaps'
// part of a takeover (sort_rebuild; the entries' part is in stash_recover).
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "base/errors.hpp"
#include "base/fault.hpp"
#include "ring/ring.hpp"
#include "ring/ring_internal.hpp"
#include "ring/wake.hpp"

namespace shmbox::detail {

namespace {

std::int64_t as_priority(std::uint64_t w) noexcept { return static_cast<std::int64_t>(w); }

// The owner's order: lowest priority first, then the unstashed ones (THE
// STASH: they rejoin their priority ahead of what is stored, in stash
// order), then ring position (FIFO among equals: positions are the lane's
// claim order, across all producers). std::push_heap keeps the largest
// first, so "larger" here means "later".
bool later(const sort_item& a, const sort_item& b) noexcept {
  if (a.priority != b.priority) return a.priority > b.priority;
  if (a.front != b.front) return b.front;
  return a.order > b.order;
}

// lane.parked: written by the owner only (as stash.cpp's add_parked).
void add_held(const lane_view& L, std::int64_t by) noexcept {
  const std::uint64_t v = L.hdr->parked.load(std::memory_order_relaxed);
  const std::uint64_t next = by < 0 && v < static_cast<std::uint64_t>(-by) ? 0 : v + static_cast<std::uint64_t>(by);
  // release: a post that sees the lower count after a delivery (U4) finds the entry freed first
  L.hdr->parked.store(next, std::memory_order_release);
}

// M1-M4: the sink through which the ring's take (T1-T7, commit_each) moves
// each message into a store entry instead of handing it out. The entry
// becomes QUEUED only after the take has committed and freed the slot (T5,
// T6): at the next append, or at finish().
struct sort_sink final : take_sink {
  owner_ctx* o;
  const lane_view* L;
  std::uint32_t entry = kNoEntry;  // the SORTING entry of the message taken last
  std::uint64_t state = 0;
  sort_item item{};
  std::size_t moved = 0;

  sort_sink(owner_ctx& ctx, const lane_view& lane) : o(&ctx), L(&lane) {}

  void publish() noexcept {
    if (entry == kNoEntry) return;
    stash_entry* e = o->m->stash_at(entry);
    // M4. release: contents before the entry shows QUEUED (a takeover, inspectors).
    e->state.store(make_stash_state(stash_kind::queued, o->epoch, stash_redelivered(state), true), std::memory_order_release);
    if (L->buffered) {
      o->buf_new[L->index].push_back(entry);  // CUSTOM BUFFERS: pushed after the take (buf_admit)
    } else {
      auto& heap = o->sort_heap[L->index];
      heap.push_back(item);
      std::push_heap(heap.begin(), heap.end(), later);
    }
    entry = kNoEntry;
    ++moved;
  }
  void finish() noexcept { publish(); }

  take_verdict append(const std::byte* data, std::uint32_t size, bool redelivered, std::uint32_t lane,
                      std::uint64_t /*position: read from the slot below*/, std::int64_t /*priority: too*/) override {
    publish();  // the previous message's take has committed and freed its slot
    if (o->stash_free.empty()) return take_verdict::skip;  // (max is the free count: not reached)
    const std::uint32_t i = o->stash_free.back();
    stash_entry* e = o->m->stash_at(i);
    auto* s = reinterpret_cast<slot_header*>(const_cast<std::byte*>(data) - sizeof(slot_header));
    // relaxed: the slot is TAKEN by us (T3, or redelivered); T1's acquire published its contents
    const std::uint64_t position = seq_pos(s->seq.load(std::memory_order_relaxed));
    const std::uint64_t priority = L->priority_of(s)->load(std::memory_order_relaxed);
    const std::uint64_t mine = make_stash_state(stash_kind::sorting, o->epoch, redelivered, true);
    std::uint64_t expected = make_stash_state(stash_kind::free, 0);
    // M1 FREE -> SORTING(E). acq_rel: the acquire pairs with the free (U4) before our
    // writes; the release orders our op (T2) before it for a takeover.
    if (!e->state.compare_exchange_strong(expected, mine, std::memory_order_acq_rel, std::memory_order_relaxed)) {
      o->stash_free.pop_back();  // not free after all (a scribbled entry, or a newer owner's): leave it
      return take_verdict::skip;
    }
    o->stash_free.pop_back();
    // M2: contents (relaxed: published by M4's release)
    std::memcpy(mapped_box::stash_payload(e), data, size);
    e->length.store(size, std::memory_order_relaxed);
    e->lane.store(lane, std::memory_order_relaxed);
    e->order.store(position, std::memory_order_relaxed);
    e->priority.store(priority, std::memory_order_relaxed);
    // M3: the gate counts it from here, before T6 frees its slot
    add_held(*L, 1);
    SHMBOX_FAULT("owner.mid_sort");
    entry = i;
    state = mine;
    item = {as_priority(priority), position, i};
    return take_verdict::deliver;  // T5 commits it (counted delivered: it left the ring), T6 frees the slot
  }
};

}  // namespace

// THE IN-ORDER RUN. Most priority boxes see runs of messages that are
// already in the owner's order (one priority, or rising ones): moving them
// through the store (a second copy, two entry CASes, heap work) only to hand
// them out in ring order is wasted. So, lane by lane:
//  D1 read the slots the producers published since the last call (T1's
//     acquire load of the sequence word, then the priority word P4 wrote
//     before P5's release) into the run: the suffix minima of the scanned
//     messages;
//  D0 (after D1) the lane's stored messages (QUEUED or FRONT entries) left
//     the ring before the cursor: each comes before the ring's messages of
//     its priority. The store hands out those no later than the run's first
//     (Q1-Q3; all of them when the ring is plainly empty). One still stored
//     after that is later than a ring message, or the ring holds something
//     else first (out of order, a redelivery): the sort's.
//  D2 the run's leading messages at the cursor's very positions (head,
//     head + 1, ...) are each no later than every message scanned after
//     them: exactly what the store would deliver next. The ring's own take
//     (T1-T7 or H1, the FIFO lane's protocol, with its crash repair R1-R4)
//     delivers them, as many as the sink takes.
//  R5 the run taken whole and the slot after it FULL now (a producer
//     published there while D2 took the run): D1-D2 again, a round at a
//     time (each delivers one at least; a lap's worth at most), while the
//     new run's first is no earlier than the last message this call
//     delivered and nothing is stored; else the call ends with what it has
//     (the next call orders the rest). Without R5 every message a busy
//     producer published during D2 went to the store, and with it every
//     later one: the store's work, and posts on the general path (THE GATE
//     counts the store), for a run that was in order.
// A lane whose ring holds more than that (a message out of order, a
// redelivery) is the sort's from there on: the caller moves and delivers as
// before. Snapshot semantics as the sort's: what a
// producer publishes after D1 is ordered at the next call. Only FIFO lanes
// whose FULL slots no one but the owner changes (no evictor, no shrink, no
// custom buffer) qualify, so the positions read at D1 still hold the same
// messages at D2. A writer who rewrites a priority word between D1 and D2
// misorders only messages of its own box, as it could in the store. An
// empty lane is not the sort's: the caller lets the sort look at it (a
// claim not yet published, a stuck producer: fifo_take's R1) every 64th
// poll, when fifo_take reads the tail anyway.
namespace {
// Position p's slot waits for p: nothing claimed there, or a claim not yet
// published (anything else there, a redelivery say, is fifo_take's).
// relaxed: only compared; T1 (in fifo_take) acquires it before any use.
bool plainly_empty(const lane_view& L, std::uint64_t p) noexcept {
  return L.slot_for(p)->seq.load(std::memory_order_relaxed) == make_seq(p, slot_state::empty, kActorNone);
}
// Position p's slot holds p's message, published (FULL), not yet taken.
// relaxed: only compared; D1 acquires it before any use.
bool plainly_full(const lane_view& L, std::uint64_t p) noexcept {
  const std::uint64_t seen = L.slot_for(p)->seq.load(std::memory_order_relaxed);
  return pos_diff(seq_pos(seen), p) == 0 && seq_state(seen) == slot_state::full;
}
}  // namespace

take_result sort_direct(owner_ctx& o, take_sink& sink, take_mode mode, std::uint32_t& sorted_from) noexcept {
  take_result res;
  mapped_box& m = *o.m;
  sorted_from = m.lane_count();
  // One take (the store's or the ring's) with at most `room` of the sink's
  // room: its result into ours, and the sink's room what is left.
  auto account = [&](const take_result& r, std::size_t room) {
    sink.max = room > r.taken ? room - r.taken : 0;
    res.taken += r.taken;
    res.busy |= r.busy;
    res.unknown |= r.unknown;
    res.corrupt |= r.corrupt;
    res.skipped |= r.skipped;
  };
  for (std::uint32_t l = 0; l < m.lane_count(); ++l) {
    const lane_view& L = m.lanes[l];
    if (L.buffered || L.is_lifo() || L.pol == policy::drop_oldest || L.resizable) {
      sorted_from = l;
      return res;
    }
    sort_run& run = o.run[l];
    // Rounds: a message published after D1, at the very position where the
    // run stopped, is met by another round (D1 again), not sent to the sort
    // (R5 below); what was delivered stays in the owner's order.
    bool again = false;
    std::int64_t last = INT64_MIN;  // the priority of the last message this lane delivered in this call
    for (std::uint32_t round = 0;; ++round) {
      const std::uint64_t head = o.head[l];
      run.forget_below(head);
      if (run.scanned < head) run.scanned = head;
      // D1 (at most a lap of the ring past the cursor)
      for (const std::uint64_t end = head + L.capacity; run.scanned < end; ++run.scanned) {
        slot_header* s = L.slot_for(run.scanned);
        // acquire: pairs with P5's release (the priority word, written at P4)
        const std::uint64_t seen = s->seq.load(std::memory_order_acquire);
        if (pos_diff(seq_pos(seen), run.scanned) != 0 || seq_state(seen) != slot_state::full) break;
        run.add(run.scanned, as_priority(L.priority_of(s)->load(std::memory_order_relaxed)));
      }
      if (again) {
        // R5's round delivers only what keeps this call's messages in the
        // owner's order (its first no earlier than the last delivered), and
        // only with nothing stored (D0 ran in the first round). Else the call
        // ends here, with what it has: the next call orders the rest.
        if (run.size() == 0 || run.at(0).pos != head || run.at(0).priority < last) return res;
        if (!o.sort_heap[l].empty()) {
          sorted_from = l;
          return res;
        }
      }
      // D0: what the lane's heap holds first. Everything stored left the ring
      // before the cursor: it comes before the ring's messages of its priority
      // (and an unstashed one is first in its priority anyway). So the store
      // delivers while its first is no later than the run's first; a stored
      // message later than that (or a ring out of order) is the sort's.
      if (!o.sort_heap[l].empty() && sink.max > 0) {
        const bool ring_empty = run.size() == 0 && run.scanned == head && plainly_empty(L, head);
        if (!ring_empty && (run.size() == 0 || run.at(0).pos != head)) {
          sorted_from = l;
          return res;
        }
        const std::size_t room = sink.max;
        const take_result r = sort_take(o, sink, mode, l, ring_empty ? INT64_MAX : run.at(0).priority);
        account(r, room);
        if (r.skipped || r.corrupt || sink.max == 0 || !o.sort_heap[l].empty()) {
          sorted_from = l;
          return res;
        }
      }
      // D2
      std::size_t k = 0;
      while (k < run.size() && run.at(k).pos == head + k) ++k;
      if (k > 0 && sink.max > 0) {
        const std::size_t room = sink.max;
        sink.max = std::min(room, k);
        const take_result r = owner_take(o, l, sink, mode);
        account(r, room);
        // the run's priorities rise with its positions: the last one taken is the highest
        if (const std::uint64_t moved = o.head[l] - head; moved > 0 && moved <= k) last = run.at(moved - 1).priority;
        run.forget_below(o.head[l]);
        if (r.skipped || r.corrupt) {
          sorted_from = l;
          return res;
        }
      }
      // Left in this lane: messages out of order, or a slot that is neither
      // FULL nor plainly EMPTY (a redelivery, a dead owner's commit, a scribble):
      // the sort's (the caller's; fifo_take knows them all). A plainly empty one
      // (nothing claimed, or a claim not yet published): the next lane.
      if (o.head[l] != run.scanned || sink.max == 0) {
        sorted_from = l;
        return res;
      }
      if (plainly_empty(L, run.scanned)) break;
      // R5: the run ended at its last scanned message and the slot after it
      // is FULL now (published during D2): another round, at most a lap's
      // worth of rounds (each delivered at least one message).
      if (round >= L.capacity || !plainly_full(L, run.scanned)) {
        sorted_from = l;
        return res;
      }
      again = true;
    }
  }
  return res;
}

take_result sort_drain(owner_ctx& o, bool look_at_tail) noexcept {
  take_result res;
  mapped_box& m = *o.m;
  for (std::uint32_t l = 0; l < m.lane_count() && !o.stash_free.empty(); ++l) {
    const lane_view& L = m.lanes[l];
    // CUSTOM BUFFERS: a lane moves at most one message past its limit before
    // its buffer decides (buf_admit: push_drop frees one), so that it never
    // holds more than limit + 1 entries of the store; and again while that
    // makes room.
    // A shrink (Box::resize) may have left the buffer over the limit: it drops first.
    if (L.buffered && o.buf_held[l] + o.buf_front[l].size() > L.limit() && !buf_admit(o, l)) res.corrupt = true;
    for (;;) {
      sort_sink sink(o, L);
      sink.max = o.stash_free.size();
      if (L.buffered) {
        // relaxed: written by us only (add_held, commit_entries)
        const std::uint64_t held = L.hdr->parked.load(std::memory_order_relaxed), lim = L.limit();
        sink.max = std::min<std::uint64_t>(sink.max, held > lim ? 0 : lim + 1 - held);
        if (sink.max == 0) break;
      }
      sink.look_at_tail = look_at_tail;
      const take_result r = owner_take(o, l, sink, take_mode::commit_each);
      sink.finish();
      res.taken += sink.moved;
      res.busy |= r.busy;
      res.unknown |= r.unknown;
      res.corrupt |= r.corrupt;
      if (!L.buffered) break;
      if (!o.buf_new[l].empty() && !buf_admit(o, l)) res.corrupt = true;  // last_error: buffer_broken
      if (sink.moved == 0 || r.corrupt || o.stash_free.empty()) break;
    }
  }
  return res;
}

bool sort_waiting(const owner_ctx& o) noexcept {
  for (const auto& heap : o.sort_heap)
    if (!heap.empty()) return true;
  return buf_waiting(o);
}

// Q1 pick the first of the lowest lane's heap; Q2 U1 (QUEUED -> TAKEN), copy
// out; Q3 U2-U4 for the lane's messages of this call together
// (commit_entries: TAKEN -> DONE -> FREE, lane.parked -= n), or hold them
// (Owner::read) until commit.
take_result sort_take(owner_ctx& o, take_sink& sink, take_mode mode, std::uint32_t only_lane, std::int64_t bound) noexcept {
  take_result res;
  mapped_box& m = *o.m;
  std::size_t n = 0;
  const std::uint32_t lanes = only_lane < m.lane_count() ? only_lane + 1 : m.lane_count();
  for (std::uint32_t l = only_lane < m.lane_count() ? only_lane : 0; l < lanes && n < sink.max && !res.skipped; ++l) {
    auto& heap = o.sort_heap[l];
    // commit_each: the lane's messages of this call are committed together
    // (U2-U4 once), after the sink has them: one that dies in between
    // leaves them TAKEN, delivered again (flagged) by the next owner.
    o.sort_taken.clear();
    o.sort_taken_state.clear();
    o.sort_taken_drop.clear();
    const bool buffered = m.lanes[l].buffered;
    while (n < sink.max) {
      sort_item it{};
      if (buffered) {  // CUSTOM BUFFERS: what the lane's buffer pops (given-back entries first)
        bool broken = false;
        if (!buf_next(o, l, it.entry, broken)) {
          res.corrupt |= broken;  // last_error: buffer_broken (rebuilt; nothing lost)
          break;
        }
      } else {
        if (heap.empty() || heap.front().priority > bound) break;  // (the front: the first in the owner's order)
        std::pop_heap(heap.begin(), heap.end(), later);
        it = heap.back();
        heap.pop_back();
      }
      stash_entry* e = m.stash_at(it.entry);
      // acquire: pairs with M4's release (payload, length, lane); an unstashed one's: S4's
      std::uint64_t seen = e->state.load(std::memory_order_acquire);
      // QUEUED (sorted), or FRONT (an unstashed message: THE STASH); else a newer owner's, or scribbled
      if (stash_kind_of(seen) != (it.front ? stash_kind::front : stash_kind::queued) || stash_sorted(seen) == it.front ||
          stash_epoch_of(seen) != o.epoch)
        continue;
      // relaxed: published by M4 (the acquire above)
      const std::uint32_t len = e->length.load(std::memory_order_relaxed);
      if (len > m.geo.params.slot_payload || e->lane.load(std::memory_order_relaxed) != l) {
        res.corrupt = true;
        o.last_error = fail(errc::corrupt, "box '" + m.name + "': store entry " + std::to_string(it.entry) + " has length " +
                                               std::to_string(len) + " or a lane out of range (corrupt segment; the entry is freed)");
        e->state.store(make_stash_state(stash_kind::free, 0), std::memory_order_release);
        o.stash_free.push_back(it.entry);
        add_held(m.lanes[l], -1);
        if (it.front && o.stash_held[l] > 0) --o.stash_held[l];
        continue;
      }
      const bool redelivered = stash_redelivered(seen);
      const std::uint64_t mine = make_stash_state(stash_kind::taken, o.epoch, redelivered, !it.front);
      // U1. relaxed: the acquire above read the contents; the CAS only claims the entry.
      if (!e->state.compare_exchange_strong(seen, mine, std::memory_order_relaxed)) continue;
      SHMBOX_FAULT("owner.after_take");
      // relaxed: `order` (the ring position of a sorted message) was published with
      // the entry's state, acquired above; a parked message has none.
      const std::uint64_t position = stash_sorted(seen) ? e->order.load(std::memory_order_relaxed) & kPosMask : kNoPosition;
      // relaxed: as `order` (a parked one's was written by our S2-S4)
      const auto priority = static_cast<std::int64_t>(e->priority.load(std::memory_order_relaxed));
      const take_verdict v = sink.append(mapped_box::stash_payload(e), len, redelivered, l, position, priority);
      if (v == take_verdict::skip) {
        e->state.store(seen, std::memory_order_relaxed);  // QUEUED again, first in line
        if (buffered) {
          buf_put_back(o, l, it.entry, true);
        } else {
          heap.push_back(it);
          std::push_heap(heap.begin(), heap.end(), later);
        }
        res.skipped = true;
        break;
      }
      ++n;
      if (mode == take_mode::hold) {
        o.pending.push_back({l, it.entry, mine, seen, redelivered, v == take_verdict::drop, true});
        continue;
      }
      o.sort_taken.push_back(it.entry);
      o.sort_taken_state.push_back(mine);
      o.sort_taken_drop.push_back(v == take_verdict::drop ? 1 : 0);
    }
    if (!o.sort_taken.empty())
      commit_entries(o, l, o.sort_taken.data(), o.sort_taken_state.data(), o.sort_taken.size(), nullptr, 0,
                     o.sort_taken_drop.data());
  }
  res.taken = n;
  return res;
}

void sort_give_back(owner_ctx& o, const pending_slot& ps) noexcept {
  const auto i = static_cast<std::uint32_t>(ps.where);
  stash_entry* e = o.m->stash_at(i);
  std::uint64_t expected = ps.seq;
  // relaxed: the entry goes back as it was (QUEUED, or FRONT: unstashed); only we deliver it
  if (!e->state.compare_exchange_strong(expected, ps.orig, std::memory_order_relaxed)) return;
  if (!stash_sorted(ps.orig)) return sort_push_front(o, i);
  if (o.m->lanes[ps.lane].buffered) {
    // CUSTOM BUFFERS: first in line (owner_give_back goes through o.pending
    // from the last taken, so they keep their delivery order).
    buf_put_back(o, ps.lane, i, true);
    return;
  }
  auto& heap = o.sort_heap[ps.lane];
  heap.push_back({as_priority(e->priority.load(std::memory_order_relaxed)), e->order.load(std::memory_order_relaxed), i});
  std::push_heap(heap.begin(), heap.end(), later);
}

void sort_rebuild(owner_ctx& o, const std::vector<std::uint32_t>& queued, const std::vector<std::uint32_t>& front) noexcept {
  for (auto& heap : o.sort_heap) heap.clear();
  for (const auto* list : {&queued, &front}) {
    for (const std::uint32_t i : *list) {
      stash_entry* e = o.m->stash_at(i);
      // relaxed: entries this owner has just made QUEUED or FRONT; the lane is read
      // again (shared memory: bounded here, not only in stash_recover's first pass)
      const std::uint32_t lane = e->lane.load(std::memory_order_relaxed);
      if (lane >= o.m->lane_count()) continue;  // scribbled: sort_take never finds it; verify reports it
      o.sort_heap[lane].push_back(
          {as_priority(e->priority.load(std::memory_order_relaxed)), e->order.load(std::memory_order_relaxed), i, list == &front});
    }
  }
  for (auto& heap : o.sort_heap) std::make_heap(heap.begin(), heap.end(), later);
}

void sort_push_front(owner_ctx& o, std::uint32_t entry) noexcept {
  stash_entry* e = o.m->stash_at(entry);
  // relaxed: an entry this owner parked (S2-S4) or took over; the lane is bounded
  const std::uint32_t lane = e->lane.load(std::memory_order_relaxed);
  if (lane >= o.m->lane_count()) return;  // scribbled: verify reports it
  auto& heap = o.sort_heap[lane];
  heap.push_back({as_priority(e->priority.load(std::memory_order_relaxed)), e->order.load(std::memory_order_relaxed), entry, true});
  std::push_heap(heap.begin(), heap.end(), later);
}

std::size_t sort_front_count(const owner_ctx& o) noexcept {
  std::size_t n = 0;
  for (const auto& heap : o.sort_heap)
    n += static_cast<std::size_t>(std::count_if(heap.begin(), heap.end(), [](const sort_item& it) { return it.front; }));
  return n;
}

bool sorting_committed(const mapped_box& m, std::uint64_t seen, std::uint32_t lane, std::uint64_t order) noexcept {
  const std::uint64_t ep = stash_epoch_of(seen);
  const std::uint32_t ai = static_cast<std::uint32_t>(ep % kOwnerActors);
  const owner_actor* ar = m.actor(ai);
  // acquire (epoch, op, op_before, delivered): pairs with the owner's release stores
  // of its op (T2) and of the slot (T6); for a live owner an estimate, as every
  // inspector's count of a busy box. A newer epoch in the actor record: that
  // owner is gone and its ops since are another's: committed.
  if (ar->epoch.load(std::memory_order_acquire) != ep) return true;
  // (a recv op names the position modulo 2^48: layout.hpp)
  if (ar->op.load(std::memory_order_acquire) != make_op(op_kind::recv, lane, order & kPosMask)) return true;
  return m.actor_counters(ai, lane)->delivered.load(std::memory_order_acquire) !=
         ar->op_before.load(std::memory_order_acquire);
}

std::uint64_t sorted_count(const mapped_box& m, std::uint32_t lane) noexcept {
  if (!m.priority()) return 0;
  std::uint64_t n = 0;
  for (std::uint32_t i = 0; i < m.stash_entries(); ++i) {
    stash_entry* e = m.stash_at(i);
    // acquire: pairs with M4 (a count for inspectors)
    const std::uint64_t s = e->state.load(std::memory_order_acquire);
    const stash_kind k = stash_kind_of(s);
    // A SORTING entry whose ring take has committed (T5, before M4) is the
    // store's already: the ring counted it delivered and no longer counts it
    // in its depth (an owner killed between T5 and M4 leaves it so until the
    // takeover makes it QUEUED: gencheck's priority-sorting-delivered).
    const bool sorting = k == stash_kind::sorting && stash_sorted(s);
    if (!(k == stash_kind::queued || (k == stash_kind::taken && stash_sorted(s)) || sorting)) continue;
    // relaxed: after the acquire above
    if (e->lane.load(std::memory_order_relaxed) != lane) continue;
    if (sorting && !sorting_committed(m, s, lane, e->order.load(std::memory_order_relaxed))) continue;
    ++n;
  }
  return n;
}

}  // namespace shmbox::detail
