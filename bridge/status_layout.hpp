// bridge/status_layout.hpp - the one declaration of the bridge status
// segment: /dev/shm/shmbox-bridge.BOX.ROLE (ROLE: export or import), one per
// bridged box and direction. Written by the one bridge that works the box
// (bridge/bridge.cpp through bridge_status), read by whom the box lets read
// it (`shmbox stat`, `shmbox metrics`, through a private copy). Its code is
// bridge/bridge_status.cpp; nothing else maps it.
//
// Who may write it (lib/base/shm_file.hpp, THE TRUST RULE T3): its bridge's
// uid alone (mode 0600 plus the box's read bits). A bridge adopts one only
// when it is its own uid's and nobody else may write it; readers show one
// for box B only when it is B's owner's, theirs or root's and nobody else
// may write it. Anything else at the name is refused and said.
//
//   offset  size  field
//        0     8  magic            kBridgeStatusMagic ("SBRIDGE\x01"), written last when the segment is made
//        8     4  version          kBridgeStatusVersion
//       12     4  role             bridge_role: 1 export, 2 import
//       16     8  pid              the working bridge (atomic; 0: none yet)
//       24     8  started_unix_ns  when it became the working bridge (atomic)
//       32   256  nats             display only, NUL-padded, credentials removed
//      288   128  stream           display only
//      416   256  subject          display only (export)
//      672   128  durable          display only (import)
//      800   256  counters[32]     bridge_counter order (atomic, relaxed: each is a lone figure)
//     1056     4  state            bridge_state (atomic): connected, reconnecting, stream_missing, ...
//     1060     4  (padding)
//     1064     8  state_unix_ns    since when (atomic)
//     1072     8  error_unix_ns    when the last error was written (atomic; 0: none yet)
//     1080   256  last_error       display only: the last error the bridge met, NUL-padded
//     1336   256  import_record    import only: what makes its posts exactly once across its crashes
//                                  (bridge_import_record below); zero for an export
//     1592  2048  cursors[64]      import only: per source (box id, lane) the highest position posted
//                                  and the ordinal expected next (bridge_cursor)
//     3640   256  export_record    export only: per lane of the box the ordinal of the next message,
//                                  and a commit in flight (bridge_export_record below)
//     3896        (size)
//
// Import record: before each post (and before a duplicate is acked) the
// import writes the intent (source id and ordinal, its producer entry's
// counts before the post, remote_drops before it and the gap its ordinal or
// stream sequence shows, done = 0) and then `posting` = 1 (release). Once
// the message is done with: `done` = 1, then imported and remote_drops, the
// source's cursor, the sequences, and `posting` = 0. A restarted import that
// finds `posting` = 1 takes the dead import's producer entry back
// (Producer::adopt, which finishes the dead post) and compares the counts:
// risen (or `done`) means that message is done with, so it finishes those
// steps, adding to a counter only if it still holds its value from before
// (the dead import had not added yet): imported and remote_drops count it
// once. The record is the import's own from an earlier run (T3 above), and
// still bounded before use: posted_seq and last_stream_seq beyond the
// stream's last sequence are refused (bridge_status::bound_sequences), and
// every value is read as untrusted: written over by its owner, it can cost
// the box's own messages (a forged cursor skips them) and the truth of its
// counters, nothing else.
//
// Export record: each message the export publishes carries Shmbox-Ordinal,
// the number of messages of its lane the box delivered to exports before it
// (ordinals of a lane rise by one, republishes keep theirs), so that the
// import counts exactly what never reached it (remote_drops: a gap in a
// source lane's ordinals). `sent[lane]` is that count. A commit writes, per
// lane in the batch, `after` (sent once committed) and then `pending` = the
// batch's first position of that lane + 1 (release); commits in the box;
// then sent = after, pending = 0. An export that finds `pending` (its
// predecessor died around a commit) looks at the lane's first message it
// reads: the same position again (redelivered) means not committed (sent
// stays), a later one means committed (sent = after). Before that, ordinals
// are bounded by what the box proves (bridge_status::bound_ordinals): a
// lane's ordinal counts messages the box delivered, so `sent` beyond the
// lane's delivered counter is refused (the lane numbers from 0 again), and
// `after` beyond it means the commit was not made.
//
// Rule: bump kBridgeStatusVersion on every incompatible change (a field
// moved, resized or given another meaning); a bridge that finds another
// version starts the segment afresh, a reader shows nothing for it. New
// counters take free entries of `counters` without a bump.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace shmbox_cli {

inline constexpr std::uint64_t kBridgeStatusMagic = 0x0145'4744'4952'4253ULL;  // "SBRIDGE\x01"
inline constexpr std::uint32_t kBridgeStatusVersion = 3;  // 2: state, last error; 3: ordinals
inline constexpr std::uint32_t kBridgeStatusCounterSlots = 32;

inline constexpr std::uint32_t kBridgeCursors = 64;
inline constexpr std::uint32_t kBridgeLanes = 8;  // shmbox::kMaxLanes (static_assert in bridge_status.cpp)

// One source lane's cursor: the highest position of (box_id, lane) the import posted.
struct bridge_cursor {
  std::atomic<std::uint64_t> box_id;  // the source box's id (message_id's box); 0: a free entry
  std::atomic<std::uint64_t> lane;
  std::atomic<std::uint64_t> position;
  std::atomic<std::uint64_t> next_ordinal;  // the ordinal of the last one posted + 1 (0: none known)
};

struct bridge_import_record {
  std::atomic<std::uint64_t> entry;          // the import's producer entry in its box
  std::atomic<std::uint64_t> attached_ns;    // that entry's Producer::attached_ns() (0: none yet)
  std::atomic<std::uint64_t> posting;        // 1 while a post is in flight (the fields below describe it)
  std::atomic<std::uint64_t> src_box, src_lane, src_position;  // its source id (box 0: a message without a shmbox id)
  std::atomic<std::uint64_t> lane;           // the lane of the box it posts into
  std::atomic<std::uint64_t> stored_before;  // the entry's stored (claims) before the post
  std::atomic<std::uint64_t> refused_before; // the entry's refused before the post
  std::atomic<std::uint64_t> last_stream_seq;  // the highest stream sequence handled (remote_drops counts gaps above it)
  std::atomic<std::uint64_t> stream_created_ns;  // the stream's creation time (a stream made again starts over)
  std::atomic<std::uint64_t> next_cursor;    // where the next new source's cursor goes (round robin, mod kBridgeCursors)
  std::atomic<std::uint64_t> posted_seq;     // the highest stream sequence done with (posted, dropped or terminated)
  std::atomic<std::uint64_t> stream_seq;     // the stream sequence of the post in flight
  std::atomic<std::uint64_t> imported_before;  // the imported counter before it (counted once: the repairer's rule)
  std::atomic<std::uint64_t> src_ordinal;    // its source ordinal (Shmbox-Ordinal) + 1 (0: none)
  std::atomic<std::uint64_t> drops_before;   // the remote_drops counter before it
  std::atomic<std::uint64_t> gap;            // the messages lost before it (counted in remote_drops once it is done with)
  std::atomic<std::uint64_t> done;           // 1: the message is done with (posted, dropped, terminated) or a duplicate
  std::atomic<std::uint64_t> reserved[13];
};

struct bridge_export_record {
  std::atomic<std::uint64_t> sent[kBridgeLanes];     // per lane: the ordinal of its next message
  std::atomic<std::uint64_t> after[kBridgeLanes];    // per lane: `sent` once the commit in flight is done
  std::atomic<std::uint64_t> pending[kBridgeLanes];  // per lane: first position of the commit in flight + 1 (0: none)
  std::atomic<std::uint64_t> reserved[8];
};

// Written by one working bridge at a time; the strings are display only (a
// reader racing a start may see them half-written).
struct bridge_status_segment {
  std::uint64_t magic;                                         // kBridgeStatusMagic once made (0: being made)
  std::uint32_t version;                                       // kBridgeStatusVersion
  std::uint32_t role;                                          // bridge_role
  std::atomic<std::uint64_t> pid;                              // the working bridge's pid, as it saw itself
  std::atomic<std::uint64_t> started_unix_ns;                  // CLOCK_REALTIME when it became the working bridge
  char nats[256];                                              // its --nats, credentials removed
  char stream[128];                                            // its --stream
  char subject[256];                                           // its --subject (export)
  char durable[128];                                           // its --durable (import)
  std::atomic<std::uint64_t> counters[kBridgeStatusCounterSlots];  // bridge_counter order; unused slots 0
  std::atomic<std::uint32_t> state;                            // bridge_state
  std::uint32_t pad;
  std::atomic<std::uint64_t> state_unix_ns;                    // CLOCK_REALTIME when `state` was set
  std::atomic<std::uint64_t> error_unix_ns;                    // CLOCK_REALTIME when `last_error` was written (0: none)
  char last_error[256];                                        // the last error met (display only)
  bridge_import_record import_record;                          // import only
  bridge_cursor cursors[kBridgeCursors];                       // import only
  bridge_export_record export_record;                          // export only
};

static_assert(std::atomic<std::uint64_t>::is_always_lock_free && std::atomic<std::uint32_t>::is_always_lock_free);
static_assert(std::is_standard_layout_v<bridge_status_segment>);
static_assert(offsetof(bridge_status_segment, magic) == 0);
static_assert(offsetof(bridge_status_segment, version) == 8);
static_assert(offsetof(bridge_status_segment, role) == 12);
static_assert(offsetof(bridge_status_segment, pid) == 16);
static_assert(offsetof(bridge_status_segment, started_unix_ns) == 24);
static_assert(offsetof(bridge_status_segment, nats) == 32);
static_assert(offsetof(bridge_status_segment, stream) == 288);
static_assert(offsetof(bridge_status_segment, subject) == 416);
static_assert(offsetof(bridge_status_segment, durable) == 672);
static_assert(offsetof(bridge_status_segment, counters) == 800);
static_assert(offsetof(bridge_status_segment, state) == 1056);
static_assert(offsetof(bridge_status_segment, state_unix_ns) == 1064);
static_assert(offsetof(bridge_status_segment, error_unix_ns) == 1072);
static_assert(offsetof(bridge_status_segment, last_error) == 1080);
static_assert(sizeof(bridge_import_record) == 256);
static_assert(sizeof(bridge_cursor) == 32);
static_assert(sizeof(bridge_export_record) == 256);
static_assert(offsetof(bridge_status_segment, import_record) == 1336);
static_assert(offsetof(bridge_status_segment, cursors) == 1592);
static_assert(offsetof(bridge_status_segment, export_record) == 3640);
static_assert(sizeof(bridge_status_segment) == 3896);
static_assert(alignof(bridge_status_segment) == 8);

}  // namespace shmbox_cli
