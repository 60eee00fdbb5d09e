// shmbox/inspect.hpp - looking at boxes from outside: a snapshot of one box
// (info), its messages without taking them (peek), a check of its invariants
// (verify), and removing boxes nobody uses (collect). What `shmbox stat`,
// `ls`, `peek`, `verify` and `gc` print.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "shmbox/box.hpp"
#include "shmbox/error.hpp"
#include "shmbox/export.hpp"
#include "shmbox/types.hpp"

namespace shmbox {

// The owner record, as seen by anyone.
struct owner_info {
  std::uint32_t pid = 0;    // 0: no owner; as seen in the owner's own pid namespace
  std::uint64_t pid_ns = 0;     // the owner's pid namespace (inode of /proc/PID/ns/pid; 0: unknown)
  bool same_namespace = false;  // pid_ns is the caller's: pid means the same process here
  bool alive = false;       // the kernel says it holds the box (its lock in the segment), in any namespace
  bool expired = false;     // alive, but its lease deadline passed without renewal
  std::uint64_t epoch = 0;  // +1 on every change of owner
  std::string state;        // "passive", "notify" or "active"
};

// One entry of the heir table, in table (registration) order.
struct heir_info {
  std::uint32_t entry = 0;  // index in the heir table (Owner::give_away_to_heir, give-away --heir N)
  std::uint32_t pid = 0;    // as seen in the heir's own pid namespace
  std::uint64_t pid_ns = 0;
  bool same_namespace = false;
  bool alive = false;       // holds its entry (kernel-held lock), in any namespace
  bool listener = false;  // waits only for give_away
  std::string data;
};

// One entry of the producer table held by a process (live or dead).
struct producer_info {
  std::uint32_t entry = 0;  // index in the producer table
  std::uint32_t pid = 0;    // as seen in the producer's own pid namespace
  std::uint64_t pid_ns = 0;
  bool same_namespace = false;
  bool alive = false;       // holds its entry (kernel-held lock), in any namespace
  std::uint64_t stored = 0;   // slots this entry claimed, all lanes: its messages, and its loans (also aborted ones)
  std::uint64_t refused = 0;  // rejected + dropped_newest + timeouts + too_large of this entry
  std::uint64_t aborted = 0;  // loans it gave back
  // Its holder's messages waiting in the box now (posted since that process
  // took the entry, not yet taken by the owner; FIFO lanes): what its quota
  // counts. And the entry's posts refused at their quota (options::quota).
  std::uint64_t waiting = 0;
  std::uint64_t quota_refused = 0;
};

// A message seen by peek(), in delivery order, without taking it.
struct peeked_message {
  std::uint32_t lane = 0;
  std::uint64_t position = 0;  // FIFO position, or lifo stamp (stash: its stash order)
  std::string data;
  // In the owner's stash (listed first, in stash order): "parked" (stashed),
  // "unstashed" (delivered before the lanes), "reading" (read, not committed);
  // "" in its lane. A priority box lists each lane in the owner's order
  // (priority, then position), its store's messages marked "sorted" (or
  // "reading"), the ring's not yet sorted ones "". A custom-buffer box lists
  // each lane's store first, in arrival order (the delivery order is its
  // owner's buffer's), marked "buffered" (or "reading"), then its ring's.
  std::string stash;
  // Request/reply (shmbox/request.hpp): "request": a request, `data` its
  // body as the owner receives it (its reply address, the trailer, left
  // out); "reply": a reply in a requester's reply box, `data` its body;
  // "" a plain message (or one whose trailer does not check out: all of it).
  std::string envelope;
};

// One lane, as seen by anyone.
struct lane_info {
  std::uint32_t capacity = 0;      // messages it holds (a resizable lane: its limit now)
  std::uint32_t max_capacity = 0;  // resizable up to this (its reserve); 0: not resizable
  policy overflow = policy::reject;
  std::uint64_t depth = 0;
  std::uint64_t parked = 0;        // its messages in the owner's stash (they count against `capacity`)
  std::uint32_t quota = 0;         // per-producer quota (options::quota); 0: none
  counters count;
};

// Request/reply (shmbox/request.hpp): what the box's owners did with the
// requests they answered (Owner::reply), every owner so far.
struct reply_counts {
  std::uint64_t sent = 0;     // replies stored in requesters' reply boxes
  std::uint64_t lost = 0;     // replies that could not be: the requester dead or gone, or its reply box full
  std::uint64_t skipped = 0;  // replies not sent because the request was answered already (already_replied)
};

// A snapshot of a box, read without locks (values are consistent only when idle).
struct box_info {
  std::string name;
  std::uint32_t capacity = 0;
  std::uint32_t slot_size = 0;
  policy overflow = policy::reject;
  std::uint32_t max_producers = 0;
  std::uint32_t producers_attached = 0;  // entries held by live processes
  std::vector<producer_info> producers;  // entries held (by live or dead processes), in table order
  std::uint64_t depth = 0;               // messages in the box (exact scan)
  std::uint64_t segment_bytes = 0;
  std::uint32_t mode = 0;
  std::uint32_t uid = 0;
  std::chrono::milliseconds block_timeout{0};
  std::chrono::milliseconds lease{0};  // 0: only death ends a lease
  std::chrono::nanoseconds spin{0};    // options::spin
  owner_info owner;
  bool accepts_requests = false;  // the owner accepts give-away requests (Box::request_give_away)
  bool orphaned = false;         // the owner died (or expired) and no live heir is waiting
  std::vector<heir_info> heirs;  // in order
  transfer_record last_transfer; // epoch 0: none yet
  std::vector<lane_info> lanes;   // lane 0 is the control lane
  std::uint32_t default_lane = 0;  // the lane of a plain post
  std::string dead_letters;       // the dead-letter box ("" none)
  bool dead_letter_refused = false;  // refused posts go there too (options::dead_letter_refused)
  std::uint32_t stash = 0;           // stash entries (options::stash); 0: no stash
  std::uint64_t parked = 0;          // messages in the stash now (all lanes)
  bool priority = false;             // a priority box (options::priority)
  std::string buffer;                // a custom-buffer box: its buffer type (options::buffer); "" none
  counters count;                 // all lanes
  reply_counts replies;           // request/reply
  bool reply_box = false;         // a requester's reply box (shmbox/request.hpp): gc removes it, replies and all,
                                  // once its requester is dead and nobody holds it
};

// What verify() found. A box in use is checked without stopping anyone:
// every check holds at any instant of the protocol, so a problem is real.
struct verify_report {
  std::string box;
  bool ok = true;                     // no problem found
  std::vector<std::string> problems;  // one sentence each: what is wrong and where
  std::uint64_t slots = 0;            // how many of each were checked
  std::uint32_t producers = 0;
  std::uint32_t heirs = 0;
};

// Why collect() removed (or, dry run, would remove) a box, or why it skipped one.
struct collected_box {
  std::string name;
  std::uint64_t depth = 0;  // messages it held
  std::string why;          // "owner, heirs and producers are dead", ...; skipped: why it was not removed
  bool skipped = false;     // not removed: not ours to remove (permission denied), or not a box (a FIFO, a link)
};

struct collect_options {
  bool dry_run = false;           // report, remove nothing
  bool include_nonempty = false;  // also boxes that still hold messages
  std::string prefix{};           // only boxes whose names start with this
};

// Everything Box knows plus the owner record, the heir and producer tables
// and an exact depth.
SHMBOX_API box_info info(const Box& box);
// Up to `max` messages in delivery order (lane 0 first; FIFO lanes oldest
// first, lifo lanes newest first), copied out WITHOUT taking them: the
// owner and the producers are not disturbed (nothing in the segment is
// written). A message taken, evicted or overwritten while it is being
// copied is left out; so the list is a snapshot of a moving box. Works on
// a box opened with Box::inspect(). A request is shown as its owner would
// receive it (peeked_message::envelope).
SHMBOX_API std::vector<peeked_message> peek(const Box& box, std::size_t max);

// Checks the segment's invariants: header, owner record, heir and producer
// tables, every slot of every lane, counters. A segment that cannot be
// opened as a box (foreign, truncated, corrupt header) is a report with
// ok = false; errors are only for what stops us looking (not_found,
// permission_denied, invalid_name).
SHMBOX_API result<verify_report> verify(std::string_view name);
// Removes boxes nobody uses: no live owner, heir or listener, no live
// producer, no live process mapping the segment (as far as /proc shows),
// and empty unless include_nonempty; also half-created segments whose
// creator died. Never a box with a live process attached. A box it may
// not remove (another user's, EPERM/EACCES) and a file at a box path that
// is not a regular file are listed with skipped = true, and it goes on.
SHMBOX_API result<std::vector<collected_box>> collect(const collect_options& opts = {});

}  // namespace shmbox
