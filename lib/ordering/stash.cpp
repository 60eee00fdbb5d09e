// lib/ordering/stash.cpp - THE STASH (ring.hpp): the owner's parked messages
// (actor-ts's stash / unstashAll), S1-S5 (stash_put), U1-U4 (stash_take,
// stash_commit_pending), and their takeover (stash_recover).
#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "base/errors.hpp"
#include "base/fault.hpp"
#include "ring/ring.hpp"
#include "ring/ring_internal.hpp"
#include "ring/wake.hpp"

namespace shmbox::detail {

namespace {

// Bounds an entry's untrusted words: false when they cannot be a message.
bool entry_sane(const mapped_box& m, stash_entry* e, std::uint32_t& len, std::uint32_t& lane) noexcept {
  // relaxed: read after an acquire of the state (the owner's release published them)
  len = e->length.load(std::memory_order_relaxed);
  lane = e->lane.load(std::memory_order_relaxed);
  return len <= m.geo.params.slot_payload && lane < m.lane_count();
}

// lane.parked: written by the owner only (the gate reads it relaxed).
void add_parked(const lane_view& L, std::int64_t by) noexcept {
  const std::uint64_t v = L.hdr->parked.load(std::memory_order_relaxed);
  const std::uint64_t next = by < 0 && v < static_cast<std::uint64_t>(-by) ? 0 : v + static_cast<std::uint64_t>(by);
  // release: a post that sees the lower count after our free (U4) finds the entry freed first
  L.hdr->parked.store(next, std::memory_order_release);
}

}  // namespace

result<void> stash_put(owner_ctx& o, std::string_view data, std::uint32_t lane, std::int64_t priority) noexcept {
  mapped_box& m = *o.m;
  const std::string who = "box '" + m.name + "'";
  if (m.user_stash() == 0)
    return fail(errc::invalid_argument, who + (m.buffered() ? " is a custom-buffer box, which has no stash yet"
                                                            : " has no stash: create it with a stash (options::stash, shmbox create --stash N)"));
  if (lane >= m.lane_count())
    return fail(errc::invalid_argument, who + ": no lane " + std::to_string(lane) + " (it has " + std::to_string(m.lane_count()) + ")");
  if (data.size() > m.geo.params.slot_payload)
    return fail(errc::too_large, who + ": a message of " + std::to_string(data.size()) + " bytes; its stash holds at most " +
                                     std::to_string(m.geo.params.slot_payload));
  const lane_view& L = m.lanes[lane];
  // A priority box's `parked` also counts its store's messages (PRIORITY
  // BOXES), which the owner delivers: only the stash's own may not close
  // the lane. (relaxed: `parked` is written by us only)
  const std::uint64_t parked = m.priority() ? o.stash_held[lane] : L.hdr->parked.load(std::memory_order_relaxed);
  if (parked + 1 >= L.limit())
    return fail(errc::stash_full, who + ": lane " + std::to_string(lane) + " holds " + std::to_string(L.limit()) + " and has " +
                                std::to_string(parked) + " parked: one more would leave its producers no room; unstash first");
  std::uint64_t in_use = 0;
  for (std::uint32_t l = 0; l < m.lane_count(); ++l) in_use += o.stash_held[l];
  if (o.stash_free.empty() || in_use >= m.user_stash())
    return fail(errc::stash_full, who + ": its stash is full (" + std::to_string(m.user_stash()) +
                                " entries); unstash first, or create the box with a larger --stash");
  const std::uint32_t i = o.stash_free.back();
  stash_entry* e = m.stash_at(i);
  owner_lane_counters* oc = o.counters(lane);
  // S1 (relaxed: published by S2's CAS)
  o.act->op_before.store(oc->stashed.load(std::memory_order_relaxed), std::memory_order_relaxed);
  o.act->op.store(make_op(op_kind::stash_put, lane, i), std::memory_order_relaxed);
  // S2. acq_rel: the release publishes S1 to a next owner's recovery (acquire of the
  // state, then the op); the acquire pairs with the free (U4) before our writes.
  std::uint64_t expected = make_stash_state(stash_kind::free, 0);
  if (!e->state.compare_exchange_strong(expected, make_stash_state(stash_kind::writing, o.epoch), std::memory_order_acq_rel,
                                        std::memory_order_relaxed)) {
    o.act->op.store(0, std::memory_order_release);
    if (stash_epoch_of(expected) > o.epoch)
      return fail(errc::not_owner, who + ": a newer owner holds the stash (epoch " + std::to_string(stash_epoch_of(expected)) + ")");
    o.stash_free.pop_back();  // not free after all (a scribbled entry): leave it to verify
    return fail(errc::corrupt, who + ": stash entry " + std::to_string(i) + " is in use but was listed free (corrupt segment)");
  }
  o.stash_free.pop_back();
  std::memcpy(mapped_box::stash_payload(e), data.data(), data.size());
  // relaxed: published by S4's release
  e->length.store(static_cast<std::uint32_t>(data.size()), std::memory_order_relaxed);
  e->lane.store(lane, std::memory_order_relaxed);
  owner_record* rec = m.owner();
  const std::uint64_t order = rec->stash_next_order.load(std::memory_order_relaxed);
  rec->stash_next_order.store(order + 1, std::memory_order_relaxed);
  e->order.store(order, std::memory_order_relaxed);
  e->priority.store(static_cast<std::uint64_t>(priority), std::memory_order_relaxed);  // a priority box's tier
  add_parked(L, 1);  // S3
  SHMBOX_FAULT("owner.mid_stash");
  // S4. release: payload, length, lane and order before the entry shows PARKED.
  e->state.store(make_stash_state(stash_kind::parked, o.epoch), std::memory_order_release);
  // S5
  oc->stashed.store(o.act->op_before.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  o.act->op.store(0, std::memory_order_release);
  o.stash_parked.push_back(i);
  ++o.stash_held[lane];
  return {};
}

std::size_t stash_unstash_all(owner_ctx& o) noexcept {
  const std::size_t n = o.stash_parked.size();
  for (const std::uint32_t i : o.stash_parked) {
    stash_entry* e = o.m->stash_at(i);
    std::uint64_t expected = make_stash_state(stash_kind::parked, o.epoch);
    // relaxed: the entry's contents were published by S4, and a next owner treats
    // PARKED and FRONT alike; a failed CAS means a newer owner has it.
    if (!e->state.compare_exchange_strong(expected, make_stash_state(stash_kind::front, o.epoch), std::memory_order_relaxed))
      continue;
    // A priority box's: into its lane's heap, first of its priority (PRIORITY BOXES).
    if (o.m->priority())
      sort_push_front(o, i);
    else
      o.stash_front.push_back(i);
    SHMBOX_FAULT("owner.mid_unstash_all");
  }
  o.stash_parked.clear();
  return n;
}

std::size_t commit_entries(owner_ctx& o, std::uint32_t lane, const std::uint32_t* entries, const std::uint64_t* states,
                           std::size_t count, char* kept, std::size_t kept_stride, const char* drops,
                           bool buffer_drops) noexcept {
  mapped_box& m = *o.m;
  owner_lane_counters* oc = o.counters(lane);
  std::size_t n = 0;
  // Two commits: the entries that are not redeliveries, then the
  // redeliveries (delivered, not dropped), whose second count is
  // `redelivered` and whose DONE state keeps the flag (the takeover's
  // recovery tells the two apart by it: THE STASH, U2-U4).
  for (int again = 0; again < 2; ++again) {
    auto in_round = [&](std::size_t k) {
      const bool filtered = drops != nullptr && drops[k] != 0;
      return (stash_redelivered(states[k]) && !filtered) == (again == 1);
    };
    std::size_t first = 0;
    while (first < count && !in_round(first)) ++first;
    if (first == count) continue;
    a64& second = again == 1 ? oc->redelivered : buffer_drops ? oc->buffer_dropped : oc->sort_filtered;
    const std::uint64_t before = oc->unstashed.load(std::memory_order_relaxed);
    const std::uint64_t before_b = second.load(std::memory_order_relaxed);
    // U2 (relaxed: published by U3's release)
    o.act->op_before.store(before, std::memory_order_relaxed);
    o.act->op_before_b.store(before_b, std::memory_order_relaxed);
    o.act->op.store(make_op(op_kind::stash_commit, lane, buffer_drops ? 1 : 0), std::memory_order_relaxed);
    std::size_t done_n = 0, parked = 0, dropped = 0;
    std::vector<std::uint32_t>& done = o.commit_scratch;
    done.clear();
    for (std::size_t k = first; k < count; ++k) {
      if (!in_round(k)) continue;
      stash_entry* e = m.stash_at(entries[k]);
      std::uint64_t expected = states[k];
      const bool sorted = stash_sorted(states[k]);
      const bool drop = sorted && drops != nullptr && drops[k] != 0;  // a parked one the filter drops counts unstashed
      // U3. release: publishes U2 to a next owner's recovery (acquire of the state, then the op).
      if (e->state.compare_exchange_strong(expected,
                                           make_stash_state(stash_kind::done, o.epoch, again == 1, sorted) | (drop ? kStashDropped : 0),
                                           std::memory_order_release, std::memory_order_relaxed)) {
        ++done_n;
        parked += !sorted;  // a sorted message was counted when it left its ring (T5)
        dropped += drop;
        done.push_back(entries[k]);
        if (kept != nullptr) kept[k * kept_stride] = 1;
      }
    }
    SHMBOX_FAULT("owner.mid_unstash");
    oc->unstashed.store(before + parked, std::memory_order_relaxed);  // U4
    second.store(before_b + (again == 1 ? done_n : dropped), std::memory_order_relaxed);
    for (const std::uint32_t i : done) {
      // release: our payload reads happen before the next S2's writes (its acquire CAS)
      m.stash_at(i)->state.store(make_stash_state(stash_kind::free, 0), std::memory_order_release);
      o.stash_free.push_back(i);
    }
    add_parked(m.lanes[lane], -static_cast<std::int64_t>(done_n));
    o.stash_held[lane] -= std::min<std::uint64_t>(o.stash_held[lane], parked);
    o.act->op.store(0, std::memory_order_release);
    if (done_n > 0) wake_space_waiters(m.lanes[lane], o.light_fence);
    n += done_n;
  }
  return n;
}

take_result stash_take(owner_ctx& o, take_sink& sink, take_mode mode) noexcept {
  take_result res;
  mapped_box& m = *o.m;
  std::size_t n = 0;
  while (n < sink.max && !o.stash_front.empty()) {
    const std::uint32_t i = o.stash_front.front();
    stash_entry* e = m.stash_at(i);
    // acquire: pairs with S4's release (payload, length, lane)
    std::uint64_t seen = e->state.load(std::memory_order_acquire);
    if (stash_kind_of(seen) != stash_kind::front || stash_epoch_of(seen) != o.epoch) {
      o.stash_front.pop_front();  // not ours any more (a newer owner), or scribbled
      continue;
    }
    std::uint32_t len = 0, lane = 0;
    if (!entry_sane(m, e, len, lane)) {
      o.stash_front.pop_front();
      res.corrupt = true;
      o.last_error = fail(errc::corrupt, "box '" + m.name + "': stash entry " + std::to_string(i) + " has length " +
                                             std::to_string(len) + " / lane " + std::to_string(lane) +
                                             " out of range (corrupt segment; the entry is freed)");
      e->state.store(make_stash_state(stash_kind::free, 0), std::memory_order_release);
      o.stash_free.push_back(i);
      if (lane < m.lane_count() && o.stash_held[lane] > 0) --o.stash_held[lane];
      continue;
    }
    const bool redelivered = stash_redelivered(seen);
    const std::uint64_t mine = make_stash_state(stash_kind::taken, o.epoch, redelivered);
    // U1. relaxed: the acquire above read the contents; the CAS only claims the entry for us.
    if (!e->state.compare_exchange_strong(seen, mine, std::memory_order_relaxed)) continue;  // look again
    o.stash_front.pop_front();
    SHMBOX_FAULT("owner.after_take");
    const take_verdict v = sink.append(mapped_box::stash_payload(e), len, redelivered, lane, kNoPosition, 0);
    if (v == take_verdict::skip) {
      e->state.store(seen, std::memory_order_relaxed);  // back to FRONT, first in line
      o.stash_front.push_front(i);
      res.skipped = true;
      break;
    }
    ++n;
    if (mode == take_mode::hold) {
      o.pending.push_back({lane, i, mine, seen, redelivered, v == take_verdict::drop, true});
      continue;
    }
    commit_entries(o, lane, &i, &mine, 1, nullptr, 0, nullptr);
  }
  res.taken = n;
  return res;
}

void stash_commit_pending(owner_ctx& o, std::vector<char>* kept, commit_result& r) noexcept {
  if (o.m->stash_entries() == 0) return;
  for (std::uint32_t l = 0; l < o.m->lane_count(); ++l) {
    std::vector<std::uint32_t> entries;
    std::vector<std::uint64_t> states;
    std::vector<char> drops;
    std::vector<std::size_t> at;
    for (std::size_t k = 0; k < o.pending.size(); ++k) {
      const pending_slot& ps = o.pending[k];
      if (!ps.stash || ps.lane != l) continue;
      entries.push_back(static_cast<std::uint32_t>(ps.where));
      states.push_back(ps.seq);
      drops.push_back(ps.drop ? 1 : 0);
      at.push_back(k);
    }
    if (entries.empty()) continue;
    std::vector<char> mine(entries.size(), 0);
    const std::size_t n = commit_entries(o, l, entries.data(), states.data(), entries.size(), mine.data(), 1, drops.data());
    r.committed += n;
    r.lost += entries.size() - n;
    if (kept != nullptr)
      for (std::size_t k = 0; k < at.size(); ++k) (*kept)[at[k]] = mine[k];
  }
}

void stash_give_back(owner_ctx& o, const pending_slot& ps) noexcept {
  if (stash_sorted(ps.seq) || o.m->priority()) return sort_give_back(o, ps);  // (a priority box's unstashed: its heap)
  stash_entry* e = o.m->stash_at(static_cast<std::uint32_t>(ps.where));
  std::uint64_t expected = ps.seq;
  // relaxed: the entry goes back as it was (FRONT); only we deliver it
  if (e->state.compare_exchange_strong(expected, ps.orig, std::memory_order_relaxed)) o.stash_front.push_front(static_cast<std::uint32_t>(ps.where));
}

void stash_recover(owner_ctx& o) noexcept {
  mapped_box& m = *o.m;
  for (auto& heap : o.sort_heap) heap.clear();
  o.stash_front.clear();
  o.stash_parked.clear();
  o.stash_free.clear();
  for (auto& h : o.stash_held) h = 0;
  const std::uint32_t entries = m.stash_entries();
  if (entries == 0) return;
  // Pass 1 reads only, and finishes the gone owners' counts; pass 2 changes
  // entries. A recovery killed half-way leaves the counts made and the
  // entries for the next owner, which counts nothing twice (the CASes
  // below expect op_before).
  enum class act : std::uint8_t { keep, front, release, queue, queue_flagged };
  std::vector<act> what(entries, act::keep);
  std::vector<std::uint64_t> done_count(std::size_t{kOwnerActors} * kMaxLanes, 0);
  std::vector<std::uint64_t> drop_count(std::size_t{kOwnerActors} * kMaxLanes, 0);  // PRIORITY BOXES
  std::vector<std::uint64_t> bdrop_count(std::size_t{kOwnerActors} * kMaxLanes, 0);  // CUSTOM BUFFERS
  std::vector<std::uint64_t> again_count(std::size_t{kOwnerActors} * kMaxLanes, 0);  // redeliveries (U2-U4)
  for (std::uint32_t i = 0; i < entries; ++i) {
    stash_entry* e = m.stash_at(i);
    // acquire: pairs with the gone owner's releases (S2, S4, U3)
    const std::uint64_t seen = e->state.load(std::memory_order_acquire);
    if (seen == 0) continue;  // FREE
    const stash_kind k = stash_kind_of(seen);
    const std::uint64_t ep = stash_epoch_of(seen);
    std::uint32_t len = 0, lane = 0;
    // (sorted entries only in a priority box; the others only where a user may stash)
    if (!entry_sane(m, e, len, lane) || ep >= o.epoch || k == stash_kind::free || k > stash_kind::queued ||
        (stash_sorted(seen) ? !m.priority() : m.user_stash() == 0) || ((seen & kStashDropped) != 0 && k != stash_kind::done)) {
      what[i] = act::release;  // scribbled: nothing can be delivered from it
      continue;
    }
    const std::uint32_t ai = static_cast<std::uint32_t>(ep % kOwnerActors);
    const owner_actor* ar = m.actor(ai);
    // acquire: pairs with the gone owner's release stores of its op (S5, U4)
    const bool its = ar->epoch.load(std::memory_order_acquire) == ep;
    const std::uint64_t op = its ? ar->op.load(std::memory_order_acquire) : 0;
    if (stash_sorted(seen)) {  // PRIORITY BOXES (ring.hpp)
      if (k == stash_kind::sorting) {
        // M1-M4: the ring's take of its position decides, as in R4: its op
        // still names the position and `delivered` still reads op_before:
        // not committed (the slot is redelivered from the ring), else moved.
        // (sorting_committed: the test sorted_count counts it by)
        const bool undone = !sorting_committed(m, seen, lane, e->order.load(std::memory_order_relaxed));
        what[i] = undone ? act::release : stash_redelivered(seen) ? act::queue_flagged : act::queue;
      } else if (k == stash_kind::queued) {
        what[i] = stash_redelivered(seen) ? act::queue_flagged : act::queue;
      } else if (k == stash_kind::taken) {
        what[i] = act::queue_flagged;  // the gone owner may have handed it out
      } else {
        // DONE: delivered (counted when it left its ring); the filter's drops
        // are counted below unless the count was made. WRITING, PARKED, FRONT: not ours.
        // A custom buffer's drops are committed with target 1 (buffer_dropped).
        if (k == stash_kind::done && (seen & kStashDropped) != 0 && op == make_op(op_kind::stash_commit, lane, 0))
          drop_count[ai * kMaxLanes + lane] += 1;
        if (k == stash_kind::done && (seen & kStashDropped) != 0 && op == make_op(op_kind::stash_commit, lane, 1))
          bdrop_count[ai * kMaxLanes + lane] += 1;
        // A flagged DONE entry was committed by a commit of redeliveries (its op_before_b: redelivered).
        if (k == stash_kind::done && stash_redelivered(seen) && op == make_op(op_kind::stash_commit, lane, 0))
          again_count[ai * kMaxLanes + lane] += 1;
        what[i] = act::release;
      }
      continue;
    }
    if (k == stash_kind::sorting || k == stash_kind::queued) {
      what[i] = act::release;  // scribbled: only sorted entries are
      continue;
    }
    if (k == stash_kind::writing) {  // S2-S4: never parked, never counted
      what[i] = act::release;
    } else if (k == stash_kind::done) {  // U3-U4: delivered; counted below unless the count was made
      if (op == make_op(op_kind::stash_commit, lane, 0)) {
        done_count[ai * kMaxLanes + lane] += 1;
        if (stash_redelivered(seen)) again_count[ai * kMaxLanes + lane] += 1;  // (as above)
      }
      what[i] = act::release;
    } else {
      if (k == stash_kind::parked && op == make_op(op_kind::stash_put, lane, i))  // S5 not made
        finish_count(m.actor_counters(ai, lane)->stashed, ar->op_before.load(std::memory_order_acquire));
      what[i] = act::front;  // PARKED, FRONT, TAKEN: first to the new owner, flagged
    }
  }
  for (std::uint32_t ai = 0; ai < kOwnerActors; ++ai)
    for (std::uint32_t l = 0; l < m.lane_count(); ++l)
      if (const std::uint64_t n = done_count[ai * kMaxLanes + l]; n != 0) {
        // acquire: as above
        std::uint64_t expected = m.actor(ai)->op_before.load(std::memory_order_acquire);
        m.actor_counters(ai, l)->unstashed.compare_exchange_strong(expected, expected + n, std::memory_order_relaxed);
      }
  for (std::uint32_t ai = 0; ai < kOwnerActors; ++ai)
    for (std::uint32_t l = 0; l < m.lane_count(); ++l)
      if (const std::uint64_t n = drop_count[ai * kMaxLanes + l]; n != 0) {
        // acquire: as above (U2's op_before_b)
        std::uint64_t expected = m.actor(ai)->op_before_b.load(std::memory_order_acquire);
        m.actor_counters(ai, l)->sort_filtered.compare_exchange_strong(expected, expected + n, std::memory_order_relaxed);
      }
  for (std::uint32_t ai = 0; ai < kOwnerActors; ++ai)
    for (std::uint32_t l = 0; l < m.lane_count(); ++l)
      if (const std::uint64_t n = bdrop_count[ai * kMaxLanes + l]; n != 0) {
        // acquire: as above (U2's op_before_b: buffer_dropped before)
        std::uint64_t expected = m.actor(ai)->op_before_b.load(std::memory_order_acquire);
        m.actor_counters(ai, l)->buffer_dropped.compare_exchange_strong(expected, expected + n, std::memory_order_relaxed);
      }
  for (std::uint32_t ai = 0; ai < kOwnerActors; ++ai)
    for (std::uint32_t l = 0; l < m.lane_count(); ++l)
      if (const std::uint64_t n = again_count[ai * kMaxLanes + l]; n != 0) {
        // acquire: as above (U2's op_before_b: redelivered before, in a commit of redeliveries)
        std::uint64_t expected = m.actor(ai)->op_before_b.load(std::memory_order_acquire);
        m.actor_counters(ai, l)->redelivered.compare_exchange_strong(expected, expected + n, std::memory_order_relaxed);
      }
  std::vector<std::pair<std::uint64_t, std::uint32_t>> front;  // (order, entry)
  std::vector<std::uint32_t> queued;                           // PRIORITY BOXES
  std::uint64_t held[kMaxLanes] = {};
  std::uint64_t next_order = m.owner()->stash_next_order.load(std::memory_order_relaxed);
  for (std::uint32_t i = 0; i < entries; ++i) {
    stash_entry* e = m.stash_at(i);
    if (what[i] == act::release) {
      // release: the gone owner's payload reads happen before the next S2's writes
      e->state.store(make_stash_state(stash_kind::free, 0), std::memory_order_release);
    } else if (what[i] == act::queue || what[i] == act::queue_flagged) {
      e->state.store(make_stash_state(stash_kind::queued, o.epoch, what[i] == act::queue_flagged, true),
                     std::memory_order_release);
      queued.push_back(i);
      // Read again: another process may have written it since pass 1 (shared memory).
      if (const std::uint32_t l = e->lane.load(std::memory_order_relaxed); l < m.lane_count()) ++held[l];
      SHMBOX_FAULT("takeover.mid_recovery");
      continue;
    } else if (what[i] == act::front) {
      e->state.store(make_stash_state(stash_kind::front, o.epoch, true), std::memory_order_release);
      const std::uint64_t order = e->order.load(std::memory_order_relaxed);
      front.emplace_back(order, i);
      next_order = std::max(next_order, order + 1);
      // Read again: another process may have written it since pass 1 (shared memory).
      if (const std::uint32_t l = e->lane.load(std::memory_order_relaxed); l < m.lane_count()) {
        ++held[l];
        ++o.stash_held[l];
      }
      SHMBOX_FAULT("takeover.mid_recovery");
      continue;
    }
    // acquire: what pass 1 saw may have been freed meanwhile only by us
    if (e->state.load(std::memory_order_acquire) == 0) o.stash_free.push_back(i);
  }
  // Entries are taken from the back: lowest index first.
  std::reverse(o.stash_free.begin(), o.stash_free.end());
  std::sort(front.begin(), front.end());
  std::vector<std::uint32_t> unstashed;  // a priority box's: into its heaps (PRIORITY BOXES)
  for (const auto& [order, i] : front) {
    if (m.priority())
      unstashed.push_back(i);
    else
      o.stash_front.push_back(i);
  }
  m.owner()->stash_next_order.store(next_order, std::memory_order_relaxed);
  for (std::uint32_t l = 0; l < m.lane_count(); ++l) m.lanes[l].hdr->parked.store(held[l], std::memory_order_release);
  // After `parked` is exact: a custom buffer's rebuild may drop (commit_entries).
  if (m.buffered())
    buf_rebuild(o, queued);
  else
    sort_rebuild(o, queued, unstashed);
  for (std::uint32_t l = 0; l < m.lane_count(); ++l) wake_space_waiters(m.lanes[l], o.light_fence);
}

std::uint64_t stash_count(const mapped_box& m, std::uint32_t lane) noexcept {
  std::uint64_t n = 0;
  for (std::uint32_t i = 0; i < m.stash_entries(); ++i) {
    stash_entry* e = m.stash_at(i);
    // acquire: pairs with S4 (a count for inspectors)
    const std::uint64_t s = e->state.load(std::memory_order_acquire);
    const stash_kind k = stash_kind_of(s);
    if ((k != stash_kind::parked && k != stash_kind::front && k != stash_kind::taken) || stash_sorted(s)) continue;
    std::uint32_t len = 0, l = 0;
    if (entry_sane(m, e, len, l) && l == lane) ++n;
  }
  return n;
}

}  // namespace shmbox::detail
