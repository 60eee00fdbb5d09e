// lib/ring.hpp - the slot protocol: posting, taking, evicting, repairing.
// The protocol itself, and what happens when a process dies at each step, is
// written down at the top of ring.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <system_error>
#include <vector>

#include "layout.hpp"
#include "segment.hpp"
#include "shmbox/owner.hpp"
#include "shmbox/producer.hpp"

namespace shmbox::detail {

constexpr std::uint64_t kNoDeadline = UINT64_MAX;
// A slot stuck this long behind a process is checked for a dead holder; then
// again every kRepairIntervalNs while it stays stuck.
constexpr std::uint64_t kRepairGraceNs = 50'000;
constexpr std::uint64_t kRepairIntervalNs = 1'000'000;
// A claimed FIFO position that no producer entry claims (only a scribbled
// producer table can do that) is abandoned after this long.
constexpr std::uint64_t kOrphanClaimNs = 1'000'000'000;

// Who repairs: its actor id, its pending-op words and its abandoned counters.
struct repairer {
  std::uint32_t actor = kActorNone;
  a64* op = nullptr;
  a64* op_before = nullptr;
  a64* abandoned[kMaxLanes] = {};
};

// One attached producer handle.
struct producer_ctx {
  mapped_box* m = nullptr;
  std::uint32_t entry = 0;  // index in the producer table
  producer_entry* pe = nullptr;
  repairer rep;             // actor = entry + 1
  std::uint64_t next_repair_ns = 0;
  std::uint32_t busy_seen = 0;  // busy slots seen since the last repair check
  std::uint32_t lifo_hint = 0;
  std::error_code last_error;
};

// Posts one message into `lane`; waits (block policy, or behind a busy slot)
// at most `timeout_ns` (UINT64_MAX: forever).
post_status post_message(producer_ctx& p, std::uint32_t lane, const void* data, std::size_t size,
                         std::uint64_t timeout_ns) noexcept;

// Takes a producer entry (free, or held by a dead process whose pending op is
// completed first). Returns false when every entry is held by a live process.
bool claim_producer_entry(mapped_box& m, producer_ctx& out) noexcept;
void release_producer_entry(producer_ctx& p) noexcept;

// One owner handle.
struct owner_ctx {
  mapped_box* m = nullptr;
  std::uint64_t key = 0;
  std::uint64_t epoch = 0;
  repairer rep;  // actor = owner_actor(epoch)
  std::uint64_t head[kMaxLanes] = {};  // private cursor of each FIFO lane
  std::vector<std::uint32_t> lifo_redeliver[kMaxLanes];  // lifo slots taken over from a dead owner
  std::uint64_t stuck_pos[kMaxLanes] = {};
  std::uint64_t stuck_since_ns[kMaxLanes] = {};
  std::uint64_t next_check_ns[kMaxLanes] = {};
  std::error_code last_error;
};

// Where taken messages go: the owner copies each one out through append()
// before it commits the batch.
struct take_sink {
  std::size_t max = 0;        // take at most this many
  bool look_at_tail = true;   // on an unpublished slot, read the tail to tell "busy" from "empty"
  virtual void append(const std::byte* data, std::uint32_t size, bool redelivered, std::uint32_t lane) = 0;

 protected:
  ~take_sink() = default;
};

// A post's deadline, read from the clock only when the post first has to wait
// (an uncontended post makes no clock call).
struct lazy_deadline {
  std::uint64_t timeout_ns = UINT64_MAX;  // UINT64_MAX: wait forever
  std::uint64_t at = 0;                   // CLOCK_MONOTONIC ns, once computed
  std::uint64_t get() noexcept;
};

struct take_result {
  std::size_t taken = 0;
  bool busy = false;     // something is claimed but not yet published (a slow or dead writer)
  bool unknown = false;  // stopped at an unpublished slot without reading the tail (look_at_tail false)
  bool corrupt = false;  // the lane broke an invariant; last_error says how
};

// Takes, copies and commits up to sink.max messages from `lane` (owner only).
take_result owner_take(owner_ctx& o, std::uint32_t lane, take_sink& sink) noexcept;

// After acquiring the lease: finishes or re-takes the dead owner's slots
// (committed ones are freed, uncommitted ones will be delivered again, flagged).
void owner_recover(owner_ctx& o) noexcept;

// True when nothing is claimed or stored in the lane (the owner may sleep).
// Sets the owner-sleeping bit when it returns true; owner_clear_sleep() undoes it.
bool owner_arm_sleep(owner_ctx& o, std::uint32_t lane) noexcept;
void owner_clear_sleep(owner_ctx& o, std::uint32_t lane) noexcept;

// Messages in the lane, by scanning slots (exact when idle).
std::uint64_t lane_depth_scan(const mapped_box& m, std::uint32_t lane) noexcept;

}  // namespace shmbox::detail
