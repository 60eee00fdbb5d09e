#include "segment/layout.hpp"

#include "shmbox/types.hpp"

namespace shmbox::detail {
namespace {
constexpr std::uint64_t round_up(std::uint64_t v, std::uint64_t a) noexcept { return (v + a - 1) / a * a; }
}  // namespace

bool compute_geometry(const geometry_params& p, geometry& g) noexcept {
  if (p.lane_count < 1 || p.lane_count > kMaxLanes) return false;
  if (p.slot_payload < 1 || p.slot_payload > kMaxSlotSize) return false;
  if (p.max_producers < 1 || p.max_producers > kMaxProducers) return false;
  for (std::uint32_t l = 0; l < kMaxLanes; ++l) {
    const bool used = l < p.lane_count;
    if (used && (p.lane_capacity[l] < 1 || p.lane_capacity[l] > kMaxCapacity)) return false;
    if (!used && p.lane_capacity[l] != 0) return false;
  }
  g = geometry{};
  g.params = p;
  // A priority box's slot ends with an 8-byte priority word after the payload.
  if (p.priority) g.priority_offset = static_cast<std::uint32_t>(sizeof(slot_header) + round_up(p.slot_payload, 8));
  g.slot_stride = static_cast<std::uint32_t>(
      round_up(p.priority ? g.priority_offset + 8 : sizeof(slot_header) + std::uint64_t{p.slot_payload}, kCacheLine));
  g.producer_stride = static_cast<std::uint32_t>(sizeof(producer_entry) + p.lane_count * sizeof(producer_lane_counters));
  g.actor_stride = static_cast<std::uint32_t>(sizeof(owner_actor) + p.lane_count * sizeof(owner_lane_counters));
  std::uint64_t off = kSegmentHeaderBytes;
  g.config_offset = off;
  off += sizeof(box_config);
  g.owner_offset = off;
  off += sizeof(owner_record);
  g.actors_offset = off;
  off += std::uint64_t{kOwnerActors} * g.actor_stride;
  g.heirs_offset = off;
  off += std::uint64_t{kHeirSlots} * sizeof(heir_entry);
  g.lanes_offset = off;
  off += p.lane_count * sizeof(lane_header);
  g.producers_offset = off;
  off += std::uint64_t{p.max_producers} * g.producer_stride;
  // Slots start on a page so that a box's ring does not share a page with its tables.
  off = round_up(off, 4096);
  for (std::uint32_t l = 0; l < p.lane_count; ++l) {
    g.slots_offset[l] = off;
    // capacity <= 2^24 and stride <= 2^20 + 64: the product fits easily in 64 bits.
    off += std::uint64_t{p.lane_capacity[l]} * g.slot_stride;
    if (off > kMaxSegmentBytes) return false;
  }
  // The stash (at most kMaxCapacity) and a priority box's store (its lanes' slots).
  if (p.stash_entries > std::uint64_t{kMaxCapacity} * (kMaxLanes + 1)) return false;
  if (p.stash_entries != 0) {
    g.stash_stride = static_cast<std::uint32_t>(round_up(sizeof(stash_entry) + std::uint64_t{p.slot_payload}, kCacheLine));
    g.stash_offset = round_up(off, 4096);
    off = g.stash_offset + std::uint64_t{p.stash_entries} * g.stash_stride;
    if (off > kMaxSegmentBytes) return false;
  }
  g.total_bytes = round_up(off, 4096);
  return g.total_bytes <= kMaxSegmentBytes;
}

}  // namespace shmbox::detail
