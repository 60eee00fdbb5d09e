// lib/segment/segment.hpp - one mapped box segment, with its validated geometry.
//
// Everything here is computed once, at create or open, from values that were
// checked against compute_geometry(). Later code never re-reads geometry from
// shared memory (another process could have scribbled over it).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "segment/layout.hpp"
#include "shmbox/box.hpp"
#include "shmbox/error.hpp"

namespace shmbox::detail {

// One lane as this process sees it: pointers and constants from the geometry.
struct lane_view {
  lane_header* hdr = nullptr;
  std::byte* slots = nullptr;
  std::uint32_t index = 0;
  std::uint32_t capacity = 0;
  std::uint64_t mask = 0;  // capacity - 1 when capacity is a power of two
  bool pow2 = false;
  bool buffered = false;  // a custom-buffer box's lane: its store is not part of the gate (CUSTOM BUFFERS)
  bool fast_gate = false;  // fast or fast_priority, and gated (a stash or priority box's lane, not a custom
                           // buffer's): the fast path posts only while nothing is parked (THE GATE's limit
                           // is then the ring's)
  bool fast_priority = false;  // a priority (or custom-buffer) lane, not resizable, no quota: the fast path
                               // with the priority word (post_fast_priority), after `fast` said no
  std::uint32_t stride = 0;
  std::uint32_t payload = 0;
  policy pol = policy::reject;
  bool resizable = false;  // created with a reserve: posts check hdr->limit (the general path)
  bool gated = false;      // posts check the gate (limit_reached): resizable, or a stash or priority box's lane
  bool fast = false;       // FIFO, not resizable, no quota, no priority word: the inline fast path (fast_gate)
  std::uint32_t priority_offset = 0;  // a priority box's lane: where a slot's priority word is (else 0)
  std::uint32_t quota = 0;  // messages one producer entry may have waiting (ring.hpp THE QUOTA); 0: none.
                            // Read once at open (validated): not re-read from shared memory

  // The lane's limit now: its capacity unless resizable (bounded: a scribbled word reads as the capacity).
  std::uint32_t limit() const noexcept {
    if (!resizable) return capacity;
    const std::uint32_t l = hdr->limit.load(std::memory_order_relaxed);  // relaxed: a hint; the slots decide
    return l == 0 || l > capacity ? capacity : l;
  }

  std::uint64_t slot_index(std::uint64_t pos) const noexcept { return pow2 ? (pos & mask) : (pos % capacity); }
  slot_header* slot_at_index(std::uint64_t i) const noexcept {
    return reinterpret_cast<slot_header*>(slots + i * stride);
  }
  slot_header* slot_for(std::uint64_t pos) const noexcept { return slot_at_index(slot_index(pos)); }
  static std::byte* payload_of(slot_header* s) noexcept { return reinterpret_cast<std::byte*>(s) + sizeof(slot_header); }
  bool is_lifo() const noexcept { return pol == policy::lifo; }
  bool is_priority() const noexcept { return priority_offset != 0; }
  // A priority box's slot: its priority word (ring.hpp PRIORITY BOXES).
  a64* priority_of(slot_header* s) const noexcept {
    return reinterpret_cast<a64*>(reinterpret_cast<std::byte*>(s) + priority_offset);
  }
  // What posts may fill: the limit less this lane's messages parked in a
  // stash (ring.hpp THE STASH), at least 1 (a lane always takes one post);
  // a priority box's lane: less its messages in the owner's store, possibly
  // 0 (its store is part of the lane, which then holds `limit` already);
  // a custom-buffer box's lane: the limit (its buffer bounds the store).
  std::uint32_t gate_limit() const noexcept {
    const std::uint32_t lim = limit();
    if (!gated || buffered) return lim;
    // relaxed: a count for the gate, which tolerates an older value (THE STASH)
    const std::uint64_t parked = hdr->parked.load(std::memory_order_relaxed);
    if (parked >= lim) return is_priority() ? 0 : 1;
    return lim - static_cast<std::uint32_t>(parked);
  }
};
// Every post reads its lane's view: it stays 56 bytes (a build that grew it
// to 64 measured 0.80-0.88x on the FIFO box's throughput: docs/benchmarks.md).
static_assert(sizeof(void*) != 8 || sizeof(lane_view) == 56);

struct mapped_box : std::enable_shared_from_this<mapped_box> {
  std::string name;
  std::byte* base = nullptr;
  std::size_t mapped_bytes = 0;
  bool read_only = false;
  // `base` is a private copy read with pread (open_segment's snapshot), not a
  // mapping: freed, not unmapped; what it says is as of the open.
  bool snapshot = false;
  // THE TRUST RULE T5: this mapping's ticket with the SIGBUS guard
  // (base/bus_guard.hpp), -1 for a snapshot or when the guard is off.
  int bus_ticket = -1;
  // The segment shrank under this mapping (a SIGBUS was caught in it): what
  // lay beyond its new end reads as zeros from then on (errc::truncated).
  bool shrank() const noexcept;
  geometry geo;
  policy default_policy = policy::reject;
  std::uint32_t block_timeout_ms = 0;
  std::uint32_t lease_ms_ = 0;  // validated copy of the header's lease_ms
  std::uint32_t spin_ns = 0;    // bounded copy of the header's spin_ns (options::spin)
  std::uint32_t default_lane = 0;  // validated copy of the header's default_lane (< lane_count)
  std::string dead_letters;     // validated copy of the config's dead-letter box name ("" none)
  std::string buffer_name;      // validated copy of the config's buffer type (CUSTOM BUFFERS; "" none)
  bool dead_letter_refused = false;  // refused posts are forwarded too (kConfigDeadLetterRefused)
  bool reply_box = false;  // a requester's reply box (kConfigReplyBox)
  // The mapping's open file description, kept open: it holds the attach lock
  // (liveness.hpp L3), the role locks of this process's handles of this
  // mapping (L1: THE ONE DESCRIPTION) and asks the kernel who holds the role
  // bytes (L2). A fork child gets a description of its own (L6).
  int fd = -1;
  // THE HELD BYTES (liveness.hpp L1, L2): the role bytes this process holds
  // through `fd`, each with how many role_locks hold it (a lock of one
  // description is one lock however often it is taken: the last role_lock
  // that lets go unlocks it). Guarded by liveness.cpp's mutex; `held_count`
  // (entries with a count) lets a probe skip the mutex when nothing is held.
  mutable std::vector<std::pair<std::uint64_t, std::uint32_t>> held;
  mutable std::atomic<std::uint32_t> held_count{0};
  mutable std::uint32_t held_gen = 0;  // bumped in a fork child (L6): the parent's holds are void there
  // This process's list of mappings (liveness.cpp), for L6's fork child.
  mapped_box* track_prev = nullptr;
  mapped_box* track_next = nullptr;
  bool tracked = false;
  std::uint64_t dev = 0, ino = 0;  // the segment file, to recognise it again
  std::uint32_t mode = 0;  // st_mode & 07777 at open
  std::uint32_t uid = 0;
  lane_view lanes[kMaxLanes];

  mapped_box() = default;
  mapped_box(const mapped_box&) = delete;
  mapped_box& operator=(const mapped_box&) = delete;
  ~mapped_box();

  std::uint32_t lane_count() const noexcept { return geo.params.lane_count; }
  // Box::id: a mix of the header's creator key and creation time (segment.cpp).
  std::uint64_t incarnation() const noexcept;
  std::uint32_t max_producers() const noexcept { return geo.params.max_producers; }
  segment_header* header() const noexcept { return reinterpret_cast<segment_header*>(base); }
  owner_record* owner() const noexcept { return reinterpret_cast<owner_record*>(base + geo.owner_offset); }
  std::uint32_t lease_ms() const noexcept { return lease_ms_; }
  // The record of owner actor index i (0..kOwnerActors-1).
  owner_actor* actor(std::uint32_t i) const noexcept {
    return reinterpret_cast<owner_actor*>(base + geo.actors_offset + std::uint64_t{i} * geo.actor_stride);
  }
  owner_lane_counters* actor_counters(std::uint32_t i, std::uint32_t lane) const noexcept {
    return reinterpret_cast<owner_lane_counters*>(reinterpret_cast<std::byte*>(actor(i)) + sizeof(owner_actor)) + lane;
  }
  // THE STASH (ring.hpp): its entries (0 in a box without one) and entry i's header and payload.
  std::uint32_t stash_entries() const noexcept { return geo.params.stash_entries; }
  // The stash a user may park into (options::stash). A priority box's entries
  // are its store (one per slot: ring.hpp PRIORITY BOXES; a custom-buffer
  // box's one more) and then its stash, in one pool (open_segment checked
  // that there are at least that many).
  std::uint32_t user_stash() const noexcept {
    if (!geo.params.priority) return geo.params.stash_entries;
    std::uint64_t store = buffered() ? 1 : 0;
    for (std::uint32_t l = 0; l < lane_count(); ++l) store += geo.params.lane_capacity[l];
    return geo.params.stash_entries > store ? static_cast<std::uint32_t>(geo.params.stash_entries - store) : 0;
  }
  bool priority() const noexcept { return geo.params.priority; }
  // A custom-buffer box (ring.hpp CUSTOM BUFFERS; also priority(): the same store).
  bool buffered() const noexcept { return !buffer_name.empty(); }
  stash_entry* stash_at(std::uint32_t i) const noexcept {
    return reinterpret_cast<stash_entry*>(base + geo.stash_offset + std::uint64_t{i} * geo.stash_stride);
  }
  static std::byte* stash_payload(stash_entry* e) noexcept { return reinterpret_cast<std::byte*>(e) + sizeof(stash_entry); }
  heir_entry* heir(std::uint32_t i) const noexcept {
    return reinterpret_cast<heir_entry*>(base + geo.heirs_offset) + i;
  }
  producer_entry* producer(std::uint32_t i) const noexcept {
    return reinterpret_cast<producer_entry*>(base + geo.producers_offset + std::uint64_t{i} * geo.producer_stride);
  }
  producer_lane_counters* producer_counters(std::uint32_t i, std::uint32_t lane) const noexcept {
    return reinterpret_cast<producer_lane_counters*>(reinterpret_cast<std::byte*>(producer(i)) + sizeof(producer_entry)) +
           lane;
  }
};

// The longest block timeout and lease a box may have (one day, in ms):
// create refuses more, open_segment treats more in a header as corrupt.
inline constexpr std::uint32_t kMaxHeaderMs = 86'400'000;

// "/shmbox.<name>", the name given to shm_open.
std::string shm_path(std::string_view name);

// `flags`: box_config flags beyond what `opts` says (kConfigReplyBox).
result<std::shared_ptr<mapped_box>> create_segment(std::string_view name, const options& opts, std::uint32_t flags = 0);
// Read-write opens refuse a segment owned by another user unless any_owner
// (someone else could have planted it to read what we post, or to feed us).
// `attach`: take the attach lock (liveness.hpp L3); only gc, which holds the
// byte exclusively while it looks, opens without it. `snapshot` (read-only
// only): a segment of at most kSnapshotMaxBytes is read with pread into
// private memory (mapped_box::snapshot) instead of mapped (Box::snapshot).
// `wait_ns`: how long to wait for a box being created (sized, made ready)
// or an attach byte held by gc; 0: 1 s (a snapshot: 10 ms). A name the
// operator did not give (a reply box, dead letters: THE TRUST RULE) is
// opened with kNamedWaitNs: a file planted there costs the opener no more.
result<std::shared_ptr<mapped_box>> open_segment(std::string_view name, bool read_only, bool any_owner = false,
                                                 bool attach = true, bool snapshot = false, std::uint64_t wait_ns = 0);
inline constexpr std::uint64_t kNamedWaitNs = 10'000'000;
inline constexpr std::size_t kSnapshotMaxBytes = std::size_t{1} << 20;
result<void> validate_box_name(std::string_view name);
// A custom buffer type's name (options::buffer): 1..kMaxBufferName of [A-Za-z0-9._-] (buffer.cpp).
bool valid_buffer_name(std::string_view name) noexcept;

}  // namespace shmbox::detail
