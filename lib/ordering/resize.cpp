// lib/ordering/resize.cpp - RESIZE of a lane (ring.hpp, THE LIMIT): moves a resizable
// lane's limit and, when it shrinks below the lane's depth, applies the
// lane's policy to the excess with the eviction steps E1-E4 (so a resizer
// killed at any step leaves a slot that R2 finishes, counted once).
#include <sched.h>

#include <algorithm>
#include <vector>

#include "base/errors.hpp"
#include "base/fault.hpp"
#include "ring/ring.hpp"
#include "ring/ring_internal.hpp"
#include "ring/wake.hpp"

namespace shmbox::detail {

result<resize_outcome> resize_lane(producer_ctx& p, std::uint32_t lane, std::uint32_t limit) noexcept {
  mapped_box& m = *p.m;
  const std::string where = "box '" + m.name + "'" + (m.lane_count() > 1 ? " lane " + std::to_string(lane) : std::string());
  if (lane >= m.lane_count())
    return fail(errc::invalid_argument, "box '" + m.name + "' has " + std::to_string(m.lane_count()) + " lanes; no lane " +
                                            std::to_string(lane));
  const lane_view& L = m.lanes[lane];
  if (!L.resizable)
    return fail(errc::invalid_argument, where + " is not resizable: its slots were not reserved at creation; create it with "
                                                "--max-capacity N (options::max_capacity)");
  if (limit == 0 || limit > L.capacity)
    return fail(errc::invalid_argument, where + ": a limit of " + std::to_string(limit) + " messages; it can hold 1 to " +
                                            std::to_string(L.capacity) + " (its max capacity, reserved at creation)");
  resize_outcome out;
  out.max_capacity = L.capacity;
  out.after = limit;
  // seq_cst: a post that reads the new limit (relaxed, lane_view::limit) is
  // decided by the slots it then reads; the exchange is ordered before our
  // scan below, so a post that read the old limit claimed before the scan or
  // is seen by a later post's gate.
  out.before = L.hdr->limit.exchange(limit, std::memory_order_seq_cst);
  if (out.before == 0 || out.before > L.capacity) out.before = L.capacity;  // (bounded, as lane_view::limit)
  SHMBOX_FAULT("resize.after_limit");
  // Producers waiting for space (block, a busy drop_oldest slot) look again: a
  // larger limit may let them in; a smaller one changes what they wait for.
  wake_space_waiters_now(L.hdr);
  if (limit >= out.before || L.pol == policy::block) return out;  // block: nothing dropped, posts wait for the owner

  // Shrunk: the excess goes by the lane's policy: drop_oldest evicts the
  // oldest (counted dropped_oldest), reject and drop_newest keep the old ones
  // and drop the newest (counted dropped_newest: `shrunk`).
  const bool oldest = L.pol == policy::drop_oldest;
  const std::uint64_t cap = L.capacity;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> full;  // (position, seq) of stored messages
  for (int round = 0; round < 1000; ++round) {
    // acquire (head): positions before it are finished (T7's release).
    const std::uint64_t t = L.hdr->tail.load(std::memory_order_acquire) >> 1;
    const std::uint64_t head = L.hdr->head.load(std::memory_order_acquire);
    std::uint64_t held = 0;  // stored or being written
    full.clear();
    for (std::uint64_t q = std::max(head, t > cap ? t - cap : 0); q < t; ++q) {
      // acquire: pairs with P5's release (the payload evict_fifo captures)
      const std::uint64_t seen = L.slot_for(q)->seq.load(std::memory_order_acquire);
      if (pos_diff(seq_pos(seen), q) != 0) continue;  // finished (or not ours to judge)
      const slot_state st = seq_state(seen);
      if (st == slot_state::full) full.emplace_back(q, seen);
      if (st == slot_state::full || st == slot_state::empty) ++held;
    }
    if (held <= limit) return out;
    std::uint64_t excess = held - limit, dropped = 0;
    if (!oldest) {
      std::reverse(full.begin(), full.end());
      // The mark first (release: a post that sees one of our holes and the
      // mark counts what the lane holds; ring.hpp THE LIMIT), never lowered.
      std::uint64_t mark = L.hdr->shrink_mark.load(std::memory_order_relaxed);
      while (mark < t && !L.hdr->shrink_mark.compare_exchange_weak(mark, t, std::memory_order_release,
                                                                    std::memory_order_relaxed)) {
      }
    }
    for (const auto& [q, seen] : full) {
      if (dropped == excess) break;
      if (evict_fifo(p, L, q, seen, oldest ? op_kind::evict : op_kind::shrink_drop, /*by_resize=*/true)) ++dropped;
    }
    p.pe->op.store(0, std::memory_order_relaxed);
    out.dropped += dropped;
    if (dropped == 0) sched_yield();  // the rest is being written or read: look again
  }
  return out;  // (a lane that stays busy this long: what is left goes as posts and takes go)
}

}  // namespace shmbox::detail
