// lib/ownership/lease.hpp - the owner record: owner view, lease clock, heir table, transfer record.
//
// Who may change the owner, and how, is the hand-over protocol: handover.hpp.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "segment/layout.hpp"
#include "segment/liveness.hpp"
#include "segment/segment.hpp"

namespace shmbox::detail {

// Up to kHeirDataMax bytes kept in shared memory as relaxed atomic words, so
// that a reader racing a writer (seqlock style: it re-checks a sequence word
// after copying) reads torn data it then discards, never a data race.
void store_data(a64* words, std::string_view bytes) noexcept;
std::string load_data(const a64* words, std::uint64_t len);

struct owner_view {
  std::uint64_t key = 0;
  std::uint64_t epoch = 0;
  std::uint64_t pid_ns = 0;  // the owner's pid namespace (display)
  bool alive = false;    // key set and the owner byte held (liveness.hpp L1)
  bool expired = false;  // alive, but its lease deadline passed without renewal
};
owner_view view_owner(const mapped_box& m) noexcept;
// No owner, a dead one, or one whose lease expired: the box may be taken.
inline bool owner_gone(const owner_view& v) noexcept { return v.key == 0 || !v.alive || v.expired; }
// When the current owner's lease runs out (CLOCK_MONOTONIC ns); UINT64_MAX without a lease.
std::uint64_t lease_deadline_ns(const mapped_box& m) noexcept;
void renew_lease(mapped_box& m) noexcept;

struct heir_view {
  std::uint32_t index = 0;
  std::uint64_t key = 0;
  std::uint64_t seq = 0;
  std::uint64_t pid_ns = 0;  // the heir's pid namespace (display)
  bool alive = false;       // its entry's byte is held (liveness.hpp L1)
  bool listener = false;  // waits only for give_away, not an heir
  std::int32_t wake_fd = -1;
  std::uint64_t registered_unix_ns = 0;
  std::string data;
};
// Registered entries in table order (registration order); dead ones are
// removed from the table when `prune` is set.
std::vector<heir_view> list_heirs(const mapped_box& m, bool prune) noexcept;
// The first live heir that is not the current owner (listeners never inherit).
std::optional<heir_view> first_live_heir(const mapped_box& m) noexcept;

// Takes a free (or dead holder's) entry of the heir table, its byte locked
// through `lock` first (L1). false: table full.
bool enlist(mapped_box& m, std::string_view data, bool listener, int wake_fd, std::uint32_t& index,
            role_lock& lock) noexcept;
// Clears entry `index` if `key` still holds it, then drops its byte (when `lock` is given).
void withdraw(mapped_box& m, std::uint32_t index, std::uint64_t key, role_lock* lock = nullptr) noexcept;

// Wakes processes waiting for a transfer: bumps owner.transfer_seq (futex)
// and writes the eventfd of every live heir/listener (or only `only_key`'s)
// that is in this pid namespace and really maps this box (never an fd of a
// process outside the box: a writer of the heir table could name any).
void signal_waiters(mapped_box& m, std::uint64_t only_key = 0) noexcept;

struct transfer_view {
  std::uint64_t epoch = 0;  // 0: none recorded
  std::uint64_t from_key = 0, to_key = 0, unix_ns = 0;
  std::uint64_t from_ns = 0, to_ns = 0;  // pid namespaces (display)
  transfer_reason reason = transfer_reason::none;
  std::string data;
};
transfer_view read_transfer(const mapped_box& m) noexcept;

}  // namespace shmbox::detail
