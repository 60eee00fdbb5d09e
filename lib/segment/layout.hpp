// lib/segment/layout.hpp - EVERYTHING that lives in a box's shared-memory segment.
//
// This is the only file that declares a box's shared structures (a pool's
// segment has its own: lib/pool/pool_layout.hpp). Shared memory holds
// fixed-width integers and lock-free std::atomic<uint32_t|uint64_t>, never
// pointers: offsets and indexes only. Every field has its offset asserted.
//
// Rule: bump kLayoutVersion on every incompatible change of anything here
// (a field moved, resized, re-encoded, or a meaning changed). Openers refuse
// any other version.
//
//   offset 0           segment_header      (256 B: identity + immutable geometry)
//   config_offset      box_config          (256 B: immutable settings, e.g. the dead-letter box)
//   owner_offset       owner_record        (384 B: lease, futexes, offer, last transfer)
//   actors_offset      owner_actor[16], each followed by owner_lane_counters[lanes]
//   heirs_offset       heir_entry[kHeirSlots] (128 B each)
//   lanes_offset       lane_header[lanes]  (256 B each)
//   producers_offset   producer_entry[max_producers], each followed by
//                      producer_lane_counters[lanes]
//   lane.slots_offset  slot[capacity] per lane, `slot_stride` bytes each:
//                      slot_header (16 B) + payload (slot_payload B), padded to 64 B
//
// One function, compute_geometry(), turns the creation parameters into these
// offsets; create, open, verify and the CLI all use it.
//
// Mostly layout text: field declarations with their comments and 140
// asserted offsets and sizes, so it is a little over the ~600 lines a source
// file keeps to. (The pool's segment: lib/pool/pool_layout.hpp; the bridge
// status segment's: bridge/status_layout.hpp.)
//
// The pool segment (a pool is not a box) has its own file: lib/pool/pool_layout.hpp.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "shmbox/types.hpp"

namespace shmbox::detail {

constexpr std::size_t kCacheLine = 64;
// "SHMBOX" + two version-independent bytes; never changes.
constexpr std::uint64_t kMagic = 0x0158'4F42'4D48'5301ULL;
constexpr std::uint32_t kLayoutVersion = 5;  // 5: lane_header.limit (resizable lanes); 4: segment_header.default_lane, keys carry the pid namespace, role locks
constexpr std::uint32_t kReady = 0x5245'4459;  // 'REDY': written last at creation
// Lanes per box: the one definition is public (shmbox/types.hpp); the
// segment below is sized by it, so changing it changes the layout.
using shmbox::kMaxLanes;
static_assert(kMaxLanes == 8, "kMaxLanes sizes segment_header and the geometry: a new value needs a new kLayoutVersion");
constexpr std::uint32_t kOwnerActors = 16;  // owner actor records, one per epoch % 16
constexpr std::uint32_t kHeirSlots = 16;    // heir table entries
constexpr std::uint32_t kHeirDataMax = 64;  // bytes of heir / give-away data
constexpr std::uint32_t kSegmentHeaderBytes = 256;

using a64 = std::atomic<std::uint64_t>;
using a32 = std::atomic<std::uint32_t>;
static_assert(a64::is_always_lock_free && a32::is_always_lock_free,
              "shared memory needs lock-free 32/64-bit atomics");

// ---------------------------------------------------------------------------
// Slot sequence words.
//
// Every slot starts with a 64-bit sequence word that says, in one atomic
// value, which message position the slot is for, what state it is in and,
// for the intermediate states, which actor holds it:
//
//   bits 0..2   state
//   bits 3..15  actor: 0 none, 1..kMaxProducers producer entry + 1,
//               kOwnerActorBase + (epoch % 16) the owner of that epoch
//   bits 16..63 position (FIFO lanes) or stamp (lifo lanes), modulo 2^48
//
// FIFO position p lives in slot p % capacity. 2^48 positions at 100 M msg/s
// is 32 days before an alias can exist, and an alias matters only to a CAS
// issued by a process that stalled for that whole time between its load and
// its CAS; the 64-bit lane tail itself never wraps.
// ---------------------------------------------------------------------------
enum class slot_state : std::uint32_t {
  empty = 0,    // FIFO: writable by the producer that claims `position`
  full = 1,     // published message of `position` (FIFO) / `stamp` (lifo), actor = writer
  taken = 2,    // held by `actor` (owner reading, or a producer evicting/repairing)
  writing = 3,  // lifo only: claimed by `actor`, payload being written
  free = 4,     // lifo only: writable by any producer
  done = 5,     // committed by owner `actor` (lease boxes and explicit commit), not yet freed
  dropped = 6,  // like done, but dropped by the owner's filter (counted as filtered)
};

constexpr std::uint32_t kActorBits = 13;
constexpr std::uint32_t kActorNone = 0;
constexpr std::uint32_t kOwnerActorBase = (1u << kActorBits) - 16;  // 8176..8191
constexpr std::uint64_t kPosMask = (1ull << 48) - 1;

constexpr std::uint64_t make_seq(std::uint64_t pos, slot_state st, std::uint32_t actor) noexcept {
  return ((pos & kPosMask) << 16) | (std::uint64_t{actor & ((1u << kActorBits) - 1)} << 3) |
         static_cast<std::uint64_t>(st);
}
constexpr std::uint64_t seq_pos(std::uint64_t seq) noexcept { return seq >> 16; }
constexpr slot_state seq_state(std::uint64_t seq) noexcept {
  return static_cast<slot_state>(seq & 7u);
}
constexpr std::uint32_t seq_actor(std::uint64_t seq) noexcept {
  return static_cast<std::uint32_t>((seq >> 3) & ((1u << kActorBits) - 1));
}
// Signed distance a - b between two 48-bit positions.
constexpr std::int64_t pos_diff(std::uint64_t a48, std::uint64_t b) noexcept {
  const std::uint64_t d = (a48 - (b & kPosMask)) & kPosMask;
  return d & (1ull << 47) ? static_cast<std::int64_t>(d) - static_cast<std::int64_t>(1ull << 48)
                          : static_cast<std::int64_t>(d);
}
constexpr std::uint32_t owner_actor_id(std::uint64_t epoch) noexcept {
  return kOwnerActorBase + static_cast<std::uint32_t>(epoch % 16);
}
constexpr std::uint32_t owner_actor_index(std::uint32_t actor) noexcept { return actor - kOwnerActorBase; }
constexpr bool is_owner_actor(std::uint32_t actor) noexcept { return actor >= kOwnerActorBase; }

// ---------------------------------------------------------------------------
// Pending-operation words (producer entries and the owner record).
//
// Before an actor changes a slot in a way that must also be counted, it writes
// the counter value(s) it starts from (op_before_*) and then this word. A
// repairer that finds the slot held by the dead actor reads them to finish the
// count exactly once (see the protocol text at the top of ring.hpp).
//   bits 0..3 kind, bits 4..7 lane, bits 8..63 target (position or slot index)
// An owner's recv / lifo_pop target is the position modulo 2^48 (or the slot
// index), with kRecvAgain set when the message is a redelivery: the owner
// counts it in `redelivered` after T5, from op_before_b (ring.hpp T5b).
// Readers compare the target modulo 2^48, so the bit is invisible to them.
// ---------------------------------------------------------------------------
enum class op_kind : std::uint32_t {
  none = 0,
  claim = 1,         // producer: about to CAS the tail for position `target`
  evict = 2,         // producer: evicting position `target` (drop_oldest)
  repair = 3,        // any actor: abandoning a dead writer's position/slot `target`
  lifo_push = 4,     // producer: writing lifo slot `target`
  lifo_replace = 5,  // producer: replacing the top, lifo slot `target`
  recv = 6,          // owner: reading FIFO position `target` (committed by the delivered counter)
  lifo_pop = 7,      // owner: reading lifo slot `target` (committed by the delivered counter)
  commit = 8,        // owner: committing its TAKEN slots of lane `lane` (TAKEN -> DONE/DROPPED -> freed)
  filter_drop = 9,   // owner: dropping FIFO position / lifo slot `target` by its filter (committed by filtered)
  abort = 10,        // producer: giving back its loaned FIFO position / lifo slot `target` (counted aborted)
  claim_run = 11,    // producer: about to CAS the tail for the run of positions in run_target (post_batch)
  shrink_drop = 12,  // producer (a resize): dropping FIFO position `target`, one of the newest (counted shrunk)
  stash_put = 13,    // owner: parking a message in stash entry `target` (counted stashed)
  stash_commit = 14, // owner: committing its TAKEN stash entries of lane `lane` (counted unstashed)
};
constexpr std::uint64_t kRecvAgain = 1ull << 48;  // recv / lifo_pop target: a redelivery (above)
// claim_run's target: the first position (low 48 bits) and the run length - 1 (8 bits).
constexpr std::uint32_t kMaxClaimRun = 256;
constexpr std::uint64_t run_target(std::uint64_t first, std::uint32_t n) noexcept {
  return (first & ((1ull << 48) - 1)) | (std::uint64_t{(n - 1) & 0xFFu} << 48);
}
constexpr std::uint64_t run_first(std::uint64_t target) noexcept { return target & ((1ull << 48) - 1); }
constexpr std::uint32_t run_length(std::uint64_t target) noexcept { return static_cast<std::uint32_t>((target >> 48) & 0xFFu) + 1; }
constexpr std::uint64_t make_op(op_kind k, std::uint32_t lane, std::uint64_t target) noexcept {
  return (target << 8) | (std::uint64_t{lane & 0xFu} << 4) | static_cast<std::uint64_t>(k);
}
constexpr op_kind op_kind_of(std::uint64_t op) noexcept { return static_cast<op_kind>(op & 0xFu); }
constexpr std::uint32_t op_lane(std::uint64_t op) noexcept { return static_cast<std::uint32_t>((op >> 4) & 0xFu); }
constexpr std::uint64_t op_target(std::uint64_t op) noexcept { return op >> 8; }

// ---------------------------------------------------------------------------
// The segment header: identity and immutable geometry. Written by the creator
// before `ready`; never written again. Openers copy it once and validate it.
// ---------------------------------------------------------------------------
struct segment_header {
  std::uint64_t magic;             // kMagic
  std::uint32_t layout_version;    // kLayoutVersion
  a32 ready;                       // kReady, stored last with release by the creator
  std::uint64_t total_bytes;       // size of the whole segment
  std::uint64_t creator_key;       // process key of the creator (see process.hpp)
  std::uint64_t created_unix_ns;   // wall clock at creation
  std::uint32_t lane_count;        // 1..kMaxLanes
  std::uint32_t max_producers;     // producer entries
  std::uint32_t slot_payload;      // largest message in bytes
  std::uint32_t slot_stride;       // bytes per slot (header + payload, 64-B multiple)
  std::uint32_t default_policy;    // policy of the box (lanes may override later)
  std::uint32_t block_timeout_ms;  // default wait of a post on a full block lane
  std::uint64_t owner_offset;      // offset of owner_record
  std::uint64_t lanes_offset;      // offset of lane_header[0]
  std::uint64_t producers_offset;  // offset of producer_entry[0]
  std::uint32_t producer_stride;   // bytes per producer entry incl. its lane counters
  std::uint32_t lane_capacity[kMaxLanes];  // slots per lane (0 for unused lanes)
  std::uint32_t lease_ms;          // lease deadline (0 = none); also in owner_record
  std::uint64_t actors_offset;     // offset of owner_actor[0]
  std::uint64_t heirs_offset;      // offset of heir_entry[0]
  std::uint32_t actor_stride;      // bytes per owner actor incl. its lane counters
  std::uint64_t config_offset;     // offset of box_config
  std::uint32_t spin_ns;           // adaptive wait: poll this long before sleeping (options::spin)
  std::uint32_t default_lane;      // lane of a plain post (options::default_lane); < lane_count
  std::uint32_t stash_entries;     // the owner's stash (options::stash): entries; 0 none (a reserved
                                   // field before: 0 in older boxes). A priority box: its store's
                                   // (one per slot; + 1 with a custom buffer), then its stash's
  std::uint32_t stash_stride;      // bytes per stash entry (stash_entry + payload, 64-B multiple)
  std::uint64_t stash_offset;      // offset of stash_entry[0]
  std::uint32_t ordering;          // kOrdering*: 0 FIFO (a reserved field before: 0 in older boxes),
                                   // 1 priority (options::priority; ring.hpp PRIORITY BOXES),
                                   // 2 custom buffer (options::buffer; ring.hpp CUSTOM BUFFERS)
  std::uint8_t reserved[kSegmentHeaderBytes - 188];
};
static_assert(sizeof(segment_header) == kSegmentHeaderBytes);
static_assert(offsetof(segment_header, magic) == 0);
static_assert(offsetof(segment_header, layout_version) == 8);
static_assert(offsetof(segment_header, ready) == 12);
static_assert(offsetof(segment_header, total_bytes) == 16);
static_assert(offsetof(segment_header, creator_key) == 24);
static_assert(offsetof(segment_header, created_unix_ns) == 32);
static_assert(offsetof(segment_header, lane_count) == 40);
static_assert(offsetof(segment_header, max_producers) == 44);
static_assert(offsetof(segment_header, slot_payload) == 48);
static_assert(offsetof(segment_header, slot_stride) == 52);
static_assert(offsetof(segment_header, default_policy) == 56);
static_assert(offsetof(segment_header, block_timeout_ms) == 60);
static_assert(offsetof(segment_header, owner_offset) == 64);
static_assert(offsetof(segment_header, lanes_offset) == 72);
static_assert(offsetof(segment_header, producers_offset) == 80);
static_assert(offsetof(segment_header, producer_stride) == 88);
static_assert(offsetof(segment_header, lane_capacity) == 92);
static_assert(offsetof(segment_header, lease_ms) == 124);
static_assert(offsetof(segment_header, actors_offset) == 128);
static_assert(offsetof(segment_header, heirs_offset) == 136);
static_assert(offsetof(segment_header, actor_stride) == 144);
static_assert(offsetof(segment_header, config_offset) == 152);
static_assert(offsetof(segment_header, spin_ns) == 160);
static_assert(offsetof(segment_header, default_lane) == 164);
static_assert(offsetof(segment_header, stash_entries) == 168);
static_assert(offsetof(segment_header, stash_stride) == 172);
static_assert(offsetof(segment_header, stash_offset) == 176);
static_assert(offsetof(segment_header, ordering) == 184);
static_assert(offsetof(segment_header, reserved) == 188);
constexpr std::uint32_t kOrderingFifo = 0;
constexpr std::uint32_t kOrderingPriority = 1;
constexpr std::uint32_t kOrderingBuffer = 2;
constexpr std::uint32_t kMaxBufferName = 48;  // options::buffer

// Immutable settings, written before `ready` at creation. Untrusted on open:
// lengths are bounded, names validated before use.
// box_config::flags (bits a library does not know make the box refused: a
// newer shmbox wrote them, or the segment is corrupt).
constexpr std::uint32_t kConfigDeadLetterRefused = 1;  // refused posts go to the dead-letter box too
// Some lane has a quota (lane_header::quota): set so that a library that does
// not enforce quotas refuses the box instead of posting past them.
constexpr std::uint32_t kConfigQuota = 2;
// A requester's reply box (lib/request/requester.cpp): once its owner is dead
// nobody can ever read it, so `gc` removes it with its replies (counted).
constexpr std::uint32_t kConfigReplyBox = 4;
constexpr std::uint32_t kConfigKnownFlags = kConfigDeadLetterRefused | kConfigQuota | kConfigReplyBox;

struct box_config {
  std::uint32_t dead_letters_len;  // 0: no dead-letter box
  char dead_letters[132];          // its name (<= kMaxNameLength bytes, not NUL-terminated)
  std::uint32_t flags;             // kConfig* (0 in boxes of earlier libraries: the field was reserved)
  std::uint32_t buffer_len;        // kOrderingBuffer: its buffer type's name (1..kMaxBufferName); else 0
  char buffer[kMaxBufferName];     // (not NUL-terminated)
  std::uint8_t reserved[64];
};
static_assert(sizeof(box_config) == 256);
static_assert(offsetof(box_config, buffer_len) == 140);
static_assert(offsetof(box_config, buffer) == 144);
static_assert(offsetof(box_config, dead_letters_len) == 0);
static_assert(offsetof(box_config, dead_letters) == 4);
static_assert(offsetof(box_config, flags) == 136);

// ---------------------------------------------------------------------------
// The owner record (the lease). Ownership changes only by a CAS on `key`
// performed by the NEW owner (see lease.cpp); it then bumps `epoch`.
// ---------------------------------------------------------------------------
enum class owner_state : std::uint32_t { passive = 0, notify = 1, active = 2 };
// owner_record::state: bits 0..1 the owner_state, bits 2..31 a count of the
// owner's armings (every write by the owner steps it). A producer whose
// wake-up is a notification reverts notify to passive with a CAS from the
// word it read before it woke the owner: a wake-up that comes late (the
// owner took the message and armed again meanwhile) finds another count and
// leaves the new arming alone.
constexpr owner_state state_mode(std::uint32_t word) noexcept { return static_cast<owner_state>(word & 3u); }
constexpr std::uint32_t next_state(std::uint32_t word, owner_state s) noexcept {
  return ((word & ~3u) + 4u) | static_cast<std::uint32_t>(s);
}
enum class transfer_reason : std::uint32_t { none = 0, owner_died = 1, give_away = 2, lease_expired = 3 };

constexpr std::uint64_t kOfferAccepted = 1ull << 63;  // offer_key | kOfferAccepted: dest accepted

struct alignas(kCacheLine) owner_record {
  // line 0: the lease, written on a change of owner (and renewals)
  a64 key;               // process key of the owner; 0 = none (released, or never owned)
  a64 epoch;             // fencing token, +1 on every change of owner
  a64 acquired_unix_ns;  // when the current owner took the box
  a64 lease_renewed_ns;  // CLOCK_MONOTONIC of the owner's last renewal (lease boxes)
  a64 last_owner_key;    // key of the owner before the current one (for transfer records)
  a32 state;             // owner_state | arming count << 2 (state_mode, next_state)
  std::uint32_t lease_ms;  // immutable: lease deadline (0 = only death ends a lease)
  a64 drops_baseline;    // overflow and custom-buffer drops counted when the last delivery was made
  a64 owner_pid_ns;      // inode of the owner's pid namespace (display: liveness is its lock, liveness.hpp)
  // line 1: the futex the owner sleeps on; producers bump it to wake the owner
  alignas(kCacheLine) a32 wake_seq;  // futex word
  a32 notify_fd_plus1;   // the owner's notify eventfd number + 1 (0: none); producers that wake the
                         // owner also write it, through pidfd_getfd (a waker thread covers the rest);
                         // kNotifyByBell: a notify group's member (notify_hub.hpp): they ring its doorbell
  a64 wake_calls;        // futex_wake syscalls made on wake_seq (diagnostic)
  a32 fd_fallback;       // 1 once a producer could not write the owner's eventfd itself (it rings the
                         // owner's doorbell instead: notify_hub.hpp); a futex word for owners of
                         // layout 4 before the notify hub, whose per-box waker thread watched it
  a32 bell_rings;        // doorbell records the owner's notify hub turned into eventfd writes (diagnostic)
  a32 seg_fd_plus1;      // with notify_fd_plus1: the owner's descriptor of this segment + 1 (0: none), by
                         // which a waker checks that the process named is in the box (eventfd_of)
  a32 bell_refused;      // rings wakers did not make: the FIFO at the owner's doorbell name belonged to a
                         // uid they do not trust (notify_hub.cpp ring_bell; diagnostic; the word was
                         // reserved, 0, in earlier libraries, which never write it)
  a64 reserved2[4];
  // line 2: transfers in flight
  alignas(kCacheLine) a32 transfer_seq;  // futex word: bumped on every release, offer and takeover
  a32 reserved3;
  a64 heir_seq;          // registration counter: heirs are ordered by it
  a64 offer_key;         // give_away: destination key (| kOfferAccepted once accepted); 0 = none
  a64 offer_epoch;       // the giver's epoch when it made the offer
  a64 offer_data_len;    // bytes in offer_data (<= kHeirDataMax)
  a64 requests_allowed;  // give-away requests: the epoch of the owner that accepts them (0: not accepted)
  a64 request_pid;       // a pending give-away request (0: none): make_request(...) below,
                         // | kRequestServing while the owner serves it. Its asker holds this
                         // word's byte locked while it waits (liveness.hpp): no lock, no asker
  a64 reserved4;
  // line 3: give_away data
  alignas(kCacheLine) a64 offer_data[kHeirDataMax / 8];  // bytes, as 8 relaxed atomic words (read under a seqlock)
  // line 4: the last transfer (written by the new owner; tr_epoch last, with release)
  alignas(kCacheLine) a64 tr_epoch;  // epoch the transfer created; 0 = no transfer yet
  a64 tr_from_key;       // previous owner
  a64 tr_to_key;         // new owner
  a64 tr_unix_ns;
  a32 tr_reason;         // transfer_reason
  a32 tr_data_len;       // bytes in tr_data (<= kHeirDataMax)
  a64 tr_from_ns;        // pid namespace inodes of the previous and the new owner
  a64 tr_to_ns;
  a64 stash_next_order;  // the stash: the order the owner gives the next parked message (owner only)
  // line 5: transfer data (the heir's registered data, or the give_away data)
  alignas(kCacheLine) a64 tr_data[kHeirDataMax / 8];  // bytes, as 8 relaxed atomic words (read under a seqlock)
};
static_assert(sizeof(owner_record) == 6 * kCacheLine);
// owner_record::notify_fd_plus1 of a notify group's member: no descriptor of
// its own; wakers ring the owner process's doorbell (notify_hub.hpp NOTIFY
// GROUPS). A library before groups takes it for descriptor 0xFFFFFFFE, which
// pidfd_getfd refuses: it rings the doorbell too.
inline constexpr std::uint32_t kNotifyByBell = 0xFFFFFFFFu;

// owner_record::request_pid: the destination is an heir-table entry (which
// holds its key, valid in any pid namespace); its pid and the asker's pid,
// each as seen in its own namespace, are kept for messages only.
//   bits 0..4   destination heir entry + 1 (never 0 in a request)
//   bits 5..26  destination pid
//   bits 27..48 asking pid
//   bits 49..62 bits 22..35 of the destination's key (its incarnation): an
//               entry registered anew meanwhile does not match
//   bit 63      set while the owner serves it
inline constexpr std::uint64_t kRequestServing = std::uint64_t{1} << 63;
constexpr std::uint64_t make_request(std::uint32_t dest_entry, std::uint64_t dest_key, std::uint32_t from_pid) noexcept {
  return (std::uint64_t{dest_entry + 1} & 0x1Fu) | ((dest_key & 0x3FFFFFu) << 5) |
         (std::uint64_t{from_pid & 0x3FFFFFu} << 27) | (((dest_key >> 22) & 0x3FFFu) << 49);
}
constexpr std::uint32_t request_entry(std::uint64_t r) noexcept { return static_cast<std::uint32_t>(r & 0x1Fu) - 1; }
constexpr std::uint32_t request_dest(std::uint64_t r) noexcept { return static_cast<std::uint32_t>(r >> 5) & 0x3FFFFFu; }
constexpr std::uint32_t request_from(std::uint64_t r) noexcept { return static_cast<std::uint32_t>(r >> 27) & 0x3FFFFFu; }
// The request names this key (pid and incarnation bits agree).
constexpr bool request_names(std::uint64_t r, std::uint64_t key) noexcept {
  return key != 0 && request_dest(r) == (key & 0x3FFFFFu) && ((r >> 49) & 0x3FFFu) == ((key >> 22) & 0x3FFFu);
}
static_assert(kHeirSlots < 0x1F, "request_pid keeps the heir entry in 5 bits");
static_assert(offsetof(owner_record, key) == 0);
static_assert(offsetof(owner_record, epoch) == 8);
static_assert(offsetof(owner_record, acquired_unix_ns) == 16);
static_assert(offsetof(owner_record, lease_renewed_ns) == 24);
static_assert(offsetof(owner_record, last_owner_key) == 32);
static_assert(offsetof(owner_record, state) == 40);
static_assert(offsetof(owner_record, lease_ms) == 44);
static_assert(offsetof(owner_record, drops_baseline) == 48);
static_assert(offsetof(owner_record, owner_pid_ns) == 56);
static_assert(offsetof(owner_record, wake_seq) == 64);
static_assert(offsetof(owner_record, notify_fd_plus1) == 68);
static_assert(offsetof(owner_record, wake_calls) == 72);
static_assert(offsetof(owner_record, fd_fallback) == 80);
static_assert(offsetof(owner_record, bell_rings) == 84);
static_assert(offsetof(owner_record, seg_fd_plus1) == 88);
static_assert(offsetof(owner_record, bell_refused) == 92);
static_assert(offsetof(owner_record, transfer_seq) == 128);
static_assert(offsetof(owner_record, heir_seq) == 136);
static_assert(offsetof(owner_record, offer_key) == 144);
static_assert(offsetof(owner_record, offer_epoch) == 152);
static_assert(offsetof(owner_record, offer_data_len) == 160);
static_assert(offsetof(owner_record, requests_allowed) == 168);
static_assert(offsetof(owner_record, request_pid) == 176);
static_assert(offsetof(owner_record, offer_data) == 192);
static_assert(offsetof(owner_record, tr_epoch) == 256);
static_assert(offsetof(owner_record, tr_from_key) == 264);
static_assert(offsetof(owner_record, tr_to_key) == 272);
static_assert(offsetof(owner_record, tr_unix_ns) == 280);
static_assert(offsetof(owner_record, tr_reason) == 288);
static_assert(offsetof(owner_record, tr_data_len) == 292);
static_assert(offsetof(owner_record, tr_from_ns) == 296);
static_assert(offsetof(owner_record, tr_to_ns) == 304);
static_assert(offsetof(owner_record, tr_data) == 320);

// One per owner actor (epoch % 16): the op words and counters of the owner
// of that epoch. A stale owner (lease expired while it was stopped) and its
// successor have different actors, so they never write the same word.
struct alignas(kCacheLine) owner_actor {
  a64 key;          // process key of the owner that holds this actor (for liveness)
  a64 epoch;        // the epoch it holds it for
  a64 op;           // pending operation: recv / lifo_pop / filter_drop / commit / repair (make_op)
  a64 op_before;    // the counter the op changes, before it (commit: delivered)
  a64 op_before_b;  // commit: filtered before it (target 1, a commit of redeliveries: redelivered);
                    // recv / lifo_pop with kRecvAgain: redelivered; stash_commit: ring.hpp THE STASH
  // Request/reply (lib/segment/envelope.hpp), counted by the owner of this
  // epoch (0 in boxes of earlier libraries: reserved). Not crash-exact: an
  // owner killed between a reply's post and its count leaves it uncounted.
  a64 replies;          // replies stored in requesters' reply boxes
  a64 replies_lost;     // replies that could not be: the requester dead or gone, its reply box full
  a64 replies_skipped;  // replies not sent: the request was answered already (already_replied)
};
static_assert(sizeof(owner_actor) == kCacheLine);
static_assert(offsetof(owner_actor, key) == 0);
static_assert(offsetof(owner_actor, epoch) == 8);
static_assert(offsetof(owner_actor, op) == 16);
static_assert(offsetof(owner_actor, op_before) == 24);
static_assert(offsetof(owner_actor, op_before_b) == 32);

// Per-lane counters of one owner actor. Follows its owner_actor.
struct alignas(kCacheLine) owner_lane_counters {
  a64 delivered;    // messages received and committed
  a64 redelivered;  // of those, read before by an owner that died
  a64 abandoned;    // dead writers' positions this owner repaired
  a64 filtered;     // messages the owner's filter dropped (committed, not delivered)
  a64 stashed;      // messages this owner parked in the stash (Owner::stash)
  a64 unstashed;    // stash entries of this lane it received back (delivered or dropped by its filter)
  a64 sort_filtered;  // a priority box: messages of its store the owner's filter dropped (counted
                      // delivered when they left the ring: inspectors move them to filtered)
  a64 buffer_dropped;  // a custom-buffer box: messages of its store its buffer dropped (as sort_filtered)
};
static_assert(sizeof(owner_lane_counters) == kCacheLine);
static_assert(offsetof(owner_lane_counters, delivered) == 0);
static_assert(offsetof(owner_lane_counters, redelivered) == 8);
static_assert(offsetof(owner_lane_counters, abandoned) == 16);
static_assert(offsetof(owner_lane_counters, filtered) == 24);
static_assert(offsetof(owner_lane_counters, stashed) == 32);
static_assert(offsetof(owner_lane_counters, unstashed) == 40);
static_assert(offsetof(owner_lane_counters, sort_filtered) == 48);
static_assert(offsetof(owner_lane_counters, buffer_dropped) == 56);

// ---------------------------------------------------------------------------
// An heir entry. Claimed by CAS of `key` (0 or a dead key -> mine); `seq` is
// written last (release): 0 means "not yet registered". Heirs take over in
// `seq` order (registration order). Listeners (flag) only accept give_away.
// ---------------------------------------------------------------------------
constexpr std::uint32_t kHeirListenerOnly = 1;

struct alignas(kCacheLine) heir_entry {
  a64 key;               // process key of the heir; 0 = free
  a64 seq;               // registration order (owner.heir_seq); 0 = not ready
  a64 registered_unix_ns;
  a32 flags;             // kHeirListenerOnly
  a32 wake_fd;           // the heir's eventfd number (givers signal it via pidfd_getfd); -1 none
  a32 data_len;          // bytes in data (<= kHeirDataMax)
  a32 reserved0;
  a64 pid_ns;            // inode of the heir's pid namespace (display)
  a64 reserved1[2];
  a64 data[kHeirDataMax / 8];  // bytes, as 8 relaxed atomic words
};
static_assert(sizeof(heir_entry) == 2 * kCacheLine);
static_assert(offsetof(heir_entry, key) == 0);
static_assert(offsetof(heir_entry, seq) == 8);
static_assert(offsetof(heir_entry, registered_unix_ns) == 16);
static_assert(offsetof(heir_entry, flags) == 24);
static_assert(offsetof(heir_entry, wake_fd) == 28);
static_assert(offsetof(heir_entry, data_len) == 32);
static_assert(offsetof(heir_entry, pid_ns) == 40);
static_assert(offsetof(heir_entry, data) == 64);

// ---------------------------------------------------------------------------
// A lane: one ring. Producers write line 0, the owner line 1, waiters line 2;
// line 3 is immutable after creation but for `limit`, which only a resize
// writes (rarely: the line stays shared in every reader's cache).
//
// A resizable lane (created with a reserve: options::max_capacity) has
// `capacity` slots (the reserve) and holds at most `limit` messages
// (1..capacity). `limit` 0: not resizable, the lane holds `capacity`.
// ---------------------------------------------------------------------------
struct alignas(kCacheLine) lane_header {
  // line 0: claims (producers)
  a64 tail;        // FIFO: (next position << 1) | owner-sleeping bit
  a64 lifo_stamp;  // lifo: (next stamp << 1) | owner-sleeping bit
  a64 reserved0[6];
  // line 1: consumption (owner)
  alignas(kCacheLine) a64 head;  // FIFO: first position the owner has not finished
  a64 parked;  // stash boxes: this lane's messages in the stash; they count against its limit (ring.hpp THE STASH)
  a64 reserved1[6];
  // line 2: producers waiting for space (block, and drop_oldest/lifo behind a busy slot)
  alignas(kCacheLine) a32 space_seq;  // futex word, bumped by whoever frees a slot while wanted
  a32 space_wanted;  // 1 when a producer sleeps (or is about to) on space_seq
  a64 space_wake_calls;  // futex_wake syscalls made on space_seq (diagnostic)
  // 1 once a producer waiting for space could not make the owner's CPU fence
  // for it (membarrier refused: seccomp, an old kernel): from then on owners
  // fence at SYNC POINT B (wake.hpp). Sticky; 0 in a new lane.
  a32 space_fence;
  a32 reserved2a;
  a64 reserved2[5];
  // line 3: immutable description
  alignas(kCacheLine) std::uint32_t capacity;  // slots in this lane (a resizable lane's reserve)
  std::uint32_t policy;                         // shmbox::policy of this lane
  std::uint64_t slots_offset;                   // offset of slot 0 from the segment start
  a32 limit;                                    // resizable: messages it holds (1..capacity); 0: not resizable
  std::uint32_t quota;  // messages one producer entry may have waiting here (ring.hpp THE QUOTA); 0: none.
                        // Immutable; read once at open (reserved, 0, in boxes of earlier libraries)
  a64 shrink_mark;  // keep-old resizable lane: the tail when a shrink last dropped the newest (ring.hpp THE LIMIT)
  std::uint64_t reserved3[4];
};
static_assert(sizeof(lane_header) == 4 * kCacheLine);
static_assert(offsetof(lane_header, tail) == 0);
static_assert(offsetof(lane_header, lifo_stamp) == 8);
static_assert(offsetof(lane_header, head) == 64);
static_assert(offsetof(lane_header, parked) == 72);
static_assert(offsetof(lane_header, space_seq) == 128);
static_assert(offsetof(lane_header, space_wanted) == 132);
static_assert(offsetof(lane_header, space_wake_calls) == 136);
static_assert(offsetof(lane_header, space_fence) == 144);
static_assert(offsetof(lane_header, capacity) == 192);
static_assert(offsetof(lane_header, policy) == 196);
static_assert(offsetof(lane_header, slots_offset) == 200);
static_assert(offsetof(lane_header, limit) == 208);
static_assert(offsetof(lane_header, quota) == 212);
static_assert(offsetof(lane_header, shrink_mark) == 216);

// ---------------------------------------------------------------------------
// A producer entry. One per attached Producer handle. The key word is claimed
// by CAS (0 or a dead key -> my key). Everything else is written only by the
// holder, or by a repairer once the holder is confirmed dead.
// ---------------------------------------------------------------------------
struct alignas(kCacheLine) producer_entry {
  a64 key;           // process key of the holder; 0 = free
  a64 op;            // pending operation (make_op)
  a64 op_before_a;   // counter value before op (stored or evicted/abandoned)
  a64 op_before_b;   // second counter before op (lifo_replace: replaced)
  a64 attached_unix_ns;
  a64 posted_base;   // lane-0 posted total when the holder attached (for per-process stats)
  a64 pid_ns;        // inode of the holder's pid namespace (display)
  a64 reserved;
};
static_assert(sizeof(producer_entry) == kCacheLine);
static_assert(offsetof(producer_entry, key) == 0);
static_assert(offsetof(producer_entry, op) == 8);
static_assert(offsetof(producer_entry, op_before_a) == 16);
static_assert(offsetof(producer_entry, op_before_b) == 24);
static_assert(offsetof(producer_entry, attached_unix_ns) == 32);
static_assert(offsetof(producer_entry, posted_base) == 40);
static_assert(offsetof(producer_entry, pid_ns) == 48);

// Per-lane counters of one producer entry. They outlive the holder: a new
// holder of the entry continues them, so sums over entries stay exact.
struct alignas(kCacheLine) producer_lane_counters {
  a64 stored;        // messages this entry put into the lane
  a64 rejected;      // reject: refused, lane full
  a64 dropped_new;   // drop_newest: the incoming message discarded
  a64 replaced;      // lifo: tops this entry replaced
  a64 evicted;       // drop_oldest: messages this entry evicted
  a64 timeouts;      // block: gave up waiting for space
  a64 too_large;     // refused: larger than the slot
  a64 abandoned;     // dead writers' positions this entry repaired
  // line 2
  a64 dead_lettered;      // dropped/evicted/replaced messages this entry forwarded to the dead-letter box
  a64 dead_letter_failed; // ... that the dead-letter box did not store (its policy, size, or it is gone)
  a64 aborted;            // loans this entry gave back without a message (slot_loan::abort)
  a64 shrunk;             // newest messages this entry dropped shrinking a keep-old lane (Box::resize);
                          // a shrink of a drop_oldest lane counts `evicted`
  // THE QUOTA (ring.hpp): posts of this entry made while it had its lane's
  // quota of messages waiting (0 in boxes of earlier libraries: reserved).
  a64 quota_rejected;     // reject: refused (status over_quota)
  a64 quota_dropped;      // drop_newest: the incoming message discarded (status over_quota)
  a64 quota_timeouts;     // block: none of its messages left before the timeout (status timeout)
  // FIFO lanes: the lane's tail when the entry's current holder took it
  // (claim_entry): that holder's messages are at positions at or after it,
  // a previous holder's below (THE QUOTA counts from the holder's own,
  // private copy; this one is for inspectors: waiting, verify). Written once
  // per holder; 0 in boxes of earlier libraries (reserved): all of the entry's.
  a64 attached_tail;
};
static_assert(sizeof(producer_lane_counters) == 2 * kCacheLine);
static_assert(offsetof(producer_lane_counters, stored) == 0);
static_assert(offsetof(producer_lane_counters, rejected) == 8);
static_assert(offsetof(producer_lane_counters, dropped_new) == 16);
static_assert(offsetof(producer_lane_counters, replaced) == 24);
static_assert(offsetof(producer_lane_counters, evicted) == 32);
static_assert(offsetof(producer_lane_counters, timeouts) == 40);
static_assert(offsetof(producer_lane_counters, too_large) == 48);
static_assert(offsetof(producer_lane_counters, abandoned) == 56);
static_assert(offsetof(producer_lane_counters, dead_lettered) == 64);
static_assert(offsetof(producer_lane_counters, dead_letter_failed) == 72);
static_assert(offsetof(producer_lane_counters, aborted) == 80);
static_assert(offsetof(producer_lane_counters, shrunk) == 88);
static_assert(offsetof(producer_lane_counters, quota_rejected) == 96);
static_assert(offsetof(producer_lane_counters, quota_dropped) == 104);
static_assert(offsetof(producer_lane_counters, quota_timeouts) == 112);
static_assert(offsetof(producer_lane_counters, attached_tail) == 120);


// ---------------------------------------------------------------------------
// A slot: sequence word, length, writer, then the payload.
// ---------------------------------------------------------------------------
struct slot_header {
  a64 seq;     // make_seq(position|stamp, state, actor)
  a32 length;  // payload bytes; untrusted: bounded by slot_payload before use
  a32 writer;  // producer entry index of the writer (diagnostic)
};
static_assert(sizeof(slot_header) == 16);
static_assert(offsetof(slot_header, seq) == 0);
static_assert(offsetof(slot_header, length) == 8);
static_assert(offsetof(slot_header, writer) == 12);

// ---------------------------------------------------------------------------
// A stash entry (ring.hpp THE STASH): written only by the owner of the box
// (a stale one's CASes fail on the epoch). The payload follows the header.
//   state: kind (bits 0..7) | redelivered (bit 8) | owner epoch << 16
// ---------------------------------------------------------------------------
enum class stash_kind : std::uint32_t {
  free = 0,
  writing = 1,  // being filled by its owner (not parked yet)
  parked = 2,   // stashed (Owner::stash)
  front = 3,    // unstashed: delivered before anything else, in `order`
  taken = 4,    // being delivered (read, not committed)
  done = 5,     // committed, not yet counted and freed (op stash_commit)
  // A priority box's sorted messages (ring.hpp PRIORITY BOXES); TAKEN and
  // DONE entries of theirs carry kStashSorted.
  sorting = 6,  // being moved in from the ring (kept or freed by the ring's op at a takeover)
  queued = 7,   // in the owner's order, waiting to be delivered
};
constexpr std::uint64_t kStashRedelivered = 1u << 8;  // DONE: committed by a commit of redeliveries (ring.hpp U2-U4)
constexpr std::uint64_t kStashSorted = 1u << 9;  // a priority box's message (not a parked one)
constexpr std::uint64_t kStashDropped = 1u << 10;  // DONE: the owner's filter dropped it (a sorted message)
constexpr std::uint64_t make_stash_state(stash_kind k, std::uint64_t epoch, bool redelivered = false,
                                         bool sorted = false) noexcept {
  return static_cast<std::uint64_t>(k) | (redelivered ? kStashRedelivered : 0) | (sorted ? kStashSorted : 0) | (epoch << 16);
}
constexpr bool stash_sorted(std::uint64_t s) noexcept { return (s & kStashSorted) != 0; }
constexpr stash_kind stash_kind_of(std::uint64_t s) noexcept { return static_cast<stash_kind>(s & 0xFFu); }
constexpr std::uint64_t stash_epoch_of(std::uint64_t s) noexcept { return s >> 16; }
constexpr bool stash_redelivered(std::uint64_t s) noexcept { return (s & kStashRedelivered) != 0; }

struct stash_entry {
  a64 state;    // make_stash_state
  a64 order;    // stash order (owner_record::stash_next_order when parked); a sorted message: its ring position
  a32 length;   // payload bytes; untrusted: bounded by slot_payload before use
  a32 lane;     // the lane the message came from; untrusted: bounded by lane_count
  a64 priority; // a priority box's message (stored or parked): its priority (an int64 in two's complement)
};
static_assert(sizeof(stash_entry) == 32);
static_assert(offsetof(stash_entry, state) == 0);
static_assert(offsetof(stash_entry, order) == 8);
static_assert(offsetof(stash_entry, length) == 16);
static_assert(offsetof(stash_entry, lane) == 20);

// ---------------------------------------------------------------------------
// Geometry: the one place offsets are computed.
// ---------------------------------------------------------------------------
struct geometry_params {
  std::uint32_t lane_count = 1;
  std::uint32_t lane_capacity[kMaxLanes] = {};
  std::uint32_t slot_payload = 0;
  std::uint32_t max_producers = 0;
  std::uint32_t stash_entries = 0;  // options::stash, plus a priority box's store (0: none)
  bool priority = false;            // options::priority (and options::buffer): each slot ends with its
                                    // priority (key) word, and the store follows the stash's entries
};

struct geometry {
  geometry_params params;
  std::uint32_t slot_stride = 0;
  std::uint32_t priority_offset = 0;  // a priority box: where a slot's priority word is (0: none)
  std::uint32_t producer_stride = 0;
  std::uint32_t actor_stride = 0;
  std::uint64_t config_offset = 0;
  std::uint64_t owner_offset = 0;
  std::uint64_t actors_offset = 0;
  std::uint64_t heirs_offset = 0;
  std::uint64_t lanes_offset = 0;
  std::uint64_t producers_offset = 0;
  std::uint64_t slots_offset[kMaxLanes] = {};
  std::uint32_t stash_stride = 0;
  std::uint64_t stash_offset = 0;
  std::uint64_t total_bytes = 0;
};

// Fills `out` from `p`; false when a parameter is outside the documented limits
// (never overflows: every product is checked against kMaxSegmentBytes).
bool compute_geometry(const geometry_params& p, geometry& out) noexcept;

}  // namespace shmbox::detail
