// shmbox/types.hpp - the words every part of the API shares: overflow
// policies, the statuses posts and receives return, the counters every
// message ends in, why a box changed owner, and the documented limits.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "shmbox/export.hpp"

namespace shmbox {

// What a post does when the box is full (pobox names in brackets).
enum class policy : std::uint8_t {
  reject = 0,       // nothing is stored; post returns full
  drop_newest = 1,  // [keep_old] the new message is discarded; post returns dropped
  drop_oldest = 2,  // [queue] the oldest message is evicted; post returns stored_evicted
  lifo = 3,         // [stack] delivery is newest-first; the top is replaced; post returns stored_evicted
  block = 4,        // the post waits for space up to its timeout, then returns timeout
};

// "reject", "drop-newest", "drop-oldest", "lifo", "block".
SHMBOX_API std::string_view to_string(policy p) noexcept;
// Accepts the names above, with '-' or '_'.
SHMBOX_API std::optional<policy> parse_policy(std::string_view s) noexcept;

// Documented limits of a box.
inline constexpr std::uint32_t kMaxCapacity = 1u << 24;      // messages per box
inline constexpr std::uint32_t kMaxSlotSize = 1u << 20;      // bytes per message
inline constexpr std::uint32_t kMaxProducers = 4096;         // producer entries
inline constexpr std::uint64_t kMaxSegmentBytes = 1ull << 36;  // 64 GiB
inline constexpr std::size_t kMaxNameLength = 128;

// Lanes per box (lane 0 is the control lane). The segment layout is sized by
// this one constant (lib/segment/layout.hpp asserts it).
inline constexpr std::uint32_t kMaxLanes = 8;

// The longest a blocking call polls before it sleeps (options::spin,
// post_options::spin, receive_options::spin).
inline constexpr std::chrono::nanoseconds kMaxSpin = std::chrono::seconds(1);

// Every message that is posted ends in exactly one of these counters or in the box
// (the same identity, word for word, is in README.md; tests/cli/cli_hardening.cpp checks both):
//   posted = delivered + rejected + too_large + timeouts + dropped_newest
//          + dropped_oldest + filtered + abandoned + aborted + depth
// (a loan counts as posted when it claims its slot)
struct counters {
  std::uint64_t posted = 0;          // post calls (each message of a batch counts once)
  std::uint64_t stored = 0;          // messages that entered the box
  std::uint64_t delivered = 0;       // messages the owner received and committed
  std::uint64_t rejected = 0;        // refused because the box was full (reject)
  std::uint64_t too_large = 0;       // refused because larger than the slot size
  std::uint64_t timeouts = 0;        // block: no space before the timeout
  std::uint64_t dropped_newest = 0;  // drop_newest: the new message; lifo: the replaced top; a shrink
                                     // (Box::resize) of a reject/drop_newest/block lane: the newest it dropped
  std::uint64_t dropped_oldest = 0;  // drop_oldest: evicted messages (also by a shrink of a drop_oldest lane)
  std::uint64_t shrunk = 0;          // of dropped_newest: stored messages a shrink dropped (not refused posts)
  std::uint64_t filtered = 0;        // dropped by the owner's filter (and by a custom buffer)
  std::uint64_t buffer_dropped = 0;  // of filtered: dropped by the box's custom buffer (options::buffer)
  std::uint64_t abandoned = 0;       // producer died between claiming a slot and publishing it
  std::uint64_t aborted = 0;         // loans given back unposted (slot_loan::abort)
  std::uint64_t redelivered = 0;     // delivered again after an owner died before committing
  std::uint64_t dead_lettered = 0;   // dropped/evicted messages (and, with options::dead_letter_refused,
                                     // refused posts) stored in the dead-letter box
  std::uint64_t dead_letter_failed = 0;  // ... that the dead-letter box did not take
  std::uint64_t stashed = 0;    // messages the owner parked in the stash (Owner::stash; not part of
                                // `stored`: a stashed message was received first)
  std::uint64_t unstashed = 0;  // parked messages received back (stashed - unstashed are in the stash)
  // A lane with a quota (options::quota): posts refused because their producer had its quota
  // of messages waiting. Each is also in the counter its policy names (like `shrunk`): of
  // rejected (reject), dropped_newest (drop_newest), timeouts (block).
  std::uint64_t quota_refused = 0;
};

// Why a box changed owner.
enum class transfer_reason : std::uint8_t {
  none,           // a plain acquire: no transfer
  owner_died,     // the previous owner died or left (exited, released the box)
  give_away,      // the previous owner gave the box to this process
  lease_expired,  // the previous owner, alive but hung, did not renew its lease in time
};
// "none", "owner-died", "give-away", "lease-expired".
SHMBOX_API std::string_view to_string(transfer_reason r) noexcept;

// How an owner got its box.
struct transfer_record {
  std::string box;
  std::uint32_t from_pid = 0;  // the previous owner (0: none), as seen in its own pid namespace
  std::uint32_t to_pid = 0;    // this process
  std::uint64_t from_pid_ns = 0;  // pid namespaces (inode of /proc/PID/ns/pid; 0: unknown)
  std::uint64_t to_pid_ns = 0;
  transfer_reason reason = transfer_reason::none;
  std::string data;            // the heir's registered data, or the give_away data
  std::uint64_t epoch = 0;     // the epoch the transfer created
};

// What one post did. Posts never throw.
enum class post_status : std::uint8_t {
  stored,          // the message is in the box
  stored_evicted,  // stored after evicting other messages (drop_oldest: one or more, see
                   // Producer::last_evicted) or replacing the top (lifo)
  dropped,         // drop_newest: the box was full, the message was discarded (counted)
  full,            // reject: the box was full, nothing stored (counted)
  timeout,         // block: no space before the timeout (counted); drop_oldest/lifo: stuck behind
                   // a stalled process for the whole timeout
  too_large,       // larger than the box's slot size; nothing stored (counted)
  error,           // the box cannot be used (corrupt segment); see Producer::last_error()
  over_quota,      // the lane has a quota (options::quota) and this producer already has that many
                   // messages waiting in it: nothing stored (reject and drop_newest lanes; counted
                   // quota_refused, of rejected / dropped_newest)
};

// "stored", "stored-evicted", "dropped", "full", "timeout", "too-large", "error", "over-quota".
SHMBOX_API std::string_view to_string(post_status s) noexcept;

// True for stored and stored_evicted.
constexpr bool is_stored(post_status s) noexcept {
  return s == post_status::stored || s == post_status::stored_evicted;
}

// What one receive did. Receives never throw.
enum class recv_status : std::uint8_t {
  ok,         // at least one message was received
  empty,      // nothing to receive right now (non-blocking calls)
  timeout,    // nothing arrived before the timeout
  not_owner,  // this handle no longer owns the box
  error,      // the box cannot be used (corrupt segment); see Owner::last_error()
};

// "ok", "empty", "timeout", "not-owner", "error".
SHMBOX_API std::string_view to_string(recv_status s) noexcept;

// What a request/reply call did (shmbox/request.hpp: Requester; Owner::reply).
enum class reply_status : std::uint8_t {
  ok,               // Requester: the reply is in `out`; Owner::reply: the reply is in the requester's reply box
  timeout,          // Requester: no reply in time (a later one is counted late, never handed to another request)
  already_replied,  // Owner::reply: this request was answered already, by this owner or by one that died
                    // before committing it (message::answered); nothing sent
  not_a_request,    // Owner::reply: the message carries no reply address (message::reply_to is empty)
  requester_gone,   // Owner::reply: the requester is dead, or its reply box is gone or another's; the reply
                    // is counted and goes to the box's dead letters (if it has one)
  full,             // Owner::reply: the requester's reply box is full (it has that many replies unread):
                    // counted, dead-lettered as requester_gone
  too_large,        // the request (Requester) or reply (Owner::reply) is larger than the box takes
  not_owner,        // Owner::reply: this handle no longer owns the box
  error,            // see last_error()
};
// "ok", "timeout", "already-replied", "not-a-request", "requester-gone", "full", "too-large",
// "not-owner", "error".
SHMBOX_API std::string_view to_string(reply_status s) noexcept;

// A message's position when it has none (a message an owner parked in the
// stash, Owner::stash, is a new message of the owner's).
inline constexpr std::uint64_t kNoPosition = ~std::uint64_t{0};

// A message's identity, stable for as long as the message is in its box:
// the box's incarnation (Box::id: a removed and re-created box gets a new
// one), the lane, and the lane position the post claimed (the claim order
// across all producers; modulo 2^48, the positions `shmbox peek` shows). A
// message redelivered after its owner died keeps its id, which is what
// makes it a deduplication key (the NATS bridge's Nats-Msg-Id) and a trace
// handle. A lifo lane's position is its stamp (unique per post too).
struct message_id {
  std::uint64_t box = 0;
  std::uint32_t lane = 0;
  std::uint64_t position = kNoPosition;
  // False for a message without a position (kNoPosition).
  bool valid() const noexcept { return position != kNoPosition; }
  friend bool operator==(const message_id&, const message_id&) = default;
};

// "BOXID-LANE-POSITION": 16 hex digits, then decimals (e.g.
// "9f3c0a1b2c3d4e5f-1-42"); "" when !id.valid().
SHMBOX_API std::string to_string(const message_id& id);
// Reads to_string(message_id)'s form back; nullopt for anything else.
SHMBOX_API std::optional<message_id> parse_message_id(std::string_view s) noexcept;

}  // namespace shmbox
