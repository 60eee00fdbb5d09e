// tests/gencheck/model.hpp - the generative checker's reference model of one
// box: what each lane holds, position by position (or stamp by stamp in a
// lifo lane), who holds each slot, and what every counter must read.
//
// The model follows the slot protocol of lib/ring/ring.hpp at the level a
// user can observe: a post stores, evicts, replaces or is refused by its
// lane's policy; the owner receives lane 0 first, FIFO (lifo: newest first;
// a priority box: lowest priority first, FIFO among equals); a message read
// and not committed holds its slot and comes back flagged after the owner
// dies. Where a process died mid-call, the slot it left names its state:
//
//   message    published (FULL): in the depth, shown by peek, deliverable
//   hole       claimed (or being written) by a producer that died: in the depth;
//              whoever repairs it counts it `abandoned`
//   held       taken (read) by the live owner, not yet committed: in the depth
//   orphaned   taken by an owner that died: in the depth; the next owner takes
//              it over (readopted) and delivers it flagged, a drop-oldest
//              producer that needs its slot evicts it
//   readopted  taken over at acquire by the live owner: delivered next, flagged
//   owner_ghost  counted delivered by an owner that died before freeing the slot
//   owner_done   committed (DONE) by an owner that died before counting it:
//              counted delivered by whoever frees it (the next acquire, or a
//              producer that needs the slot)
//   prod_ghost   evicted and counted by a producer that died before freeing it
//   prod_evicting  taken for eviction by a producer that died before counting it
//
// The last four are not in the depth and not in peek, but occupy their slot.
//
// The model does not decide what it cannot know (which instruction a killed
// process died at, whether a repair ran yet): every transition returns the
// list of states the box may be in after it, and the driver keeps those that
// agree with what the call returned and with what the box shows (counters,
// depth, peek). A bug is a step after which no state of the model agrees.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "protocol.hpp"
#include "shmbox/types.hpp"

namespace gencheck {

using shmbox::policy;
using shmbox::post_status;

// One lane's counters, as the model predicts them (shmbox::counters' subset).
struct tally {
  std::uint64_t posted = 0, delivered = 0, rejected = 0, too_large = 0, timeouts = 0, dropped_newest = 0,
                dropped_oldest = 0, filtered = 0, abandoned = 0, aborted = 0, redelivered = 0, quota_refused = 0,
                stashed = 0, unstashed = 0, shrunk = 0;
  friend bool operator==(const tally&, const tally&) = default;
  static tally of(const shmbox::counters& c);
  // delivered + rejected + too_large + timeouts + dropped + filtered + abandoned + aborted
  std::uint64_t out() const;
  // "delivered 3 (box 4), ..." for the counters that differ
  std::string diff(const tally& box) const;
  std::string str() const;
};

enum class kind : std::uint8_t {
  message, hole, held, orphaned, readopted, owner_ghost, owner_done, prod_ghost, prod_evicting,
  sorting_counted,  // known bug priority-sorting-delivered (fixed; --tolerate only): caught mid-move after T5 (in delivered, its ring slot still taken)
  sorting_freed,    // ... and after T6, before M4: its ring slot freed (in delivered only)
};
const char* to_string(kind k);
bool in_depth(kind k);  // counted in the lane's depth (lane_depth_scan)

struct entry {
  kind k = kind::message;
  msg_id id{};
  std::int64_t prio = 0;
  std::uint32_t writer = 0;  // the poster's producer-table entry (a slot an evictor holds: the evictor's)
  // How it must be flagged when it is delivered next: 0 not redelivered, 1
  // redelivered, 2 either (a dead owner may or may not have handed it out).
  std::uint8_t flag = 0;
  bool flagged_take = false;  // held/owner_done: it was taken flagged (a redelivery: counted redelivered at commit)
  bool still_taken = false;   // owner_ghost: committed by the fast path (T5) with its slot still TAKEN, not DONE
  bool redelivery_due = false;  // owner_ghost: a redelivery committed (T5) whose `redelivered` (T5b) is not counted yet
  // A priority box's message: 0 in its ring slot, 1 moved into the store, 2
  // either (an owner call moves what it finds out of order; the model does
  // not follow which).
  std::uint8_t where = 0;
  friend bool operator==(const entry&, const entry&) = default;
};

struct lane_state {
  policy pol = policy::reject;
  std::uint32_t slots = 0;  // the ring's slots (a resizable lane: its reserve)
  std::uint32_t limit = 0;  // messages it may hold (a resizable lane's limit; else slots)
  std::uint32_t quota = 0;
  bool lifo = false;
  bool resizable = false;
  std::uint64_t tail = 0;  // positions claimed (FIFO), stamps handed out (lifo)
  std::uint64_t head = 0;  // the owner's published head (FIFO)
  bool head_stale = false;  // an owner died since the last receive call published the head
  bool head_repaired = false;  // a priority lane: a post at the closed gate repaired the dead claim at the published head
  std::map<std::uint64_t, entry> at;  // unfinished positions (FIFO) / occupied slots by stamp (lifo)
  tally c;
  std::uint64_t phantom = 0;  // known bug phantom-abandon (fixed; --tolerate only): abandons counted for finished positions (in c.abandoned)
  friend bool operator==(const lane_state&, const lane_state&) = default;
};

// What happened to a message (the driver's ledger of fates, checked at the end).
enum class fate : std::uint8_t { delivered, evicted, replaced, abandoned, shrunk };
struct fate_event {
  msg_id id;
  std::uint32_t lane = 0;
  fate f = fate::delivered;
  friend bool operator==(const fate_event&, const fate_event&) = default;
};

struct model {
  std::vector<lane_state> lanes;
  bool priority = false;  // a priority box
  bool fenced = false;    // a lease box (every receive takes, then commits)
  bool quota_per_entry = false;  // the documented quota: per producer-table entry (else per producer process)
  // Known library behaviour the model may be told to expect (--tolerate):
  // a priority box's gate counts the ring from its published head, which a
  // held ring slot pins, plus the store: it may refuse while not full.
  bool pinned_gate_may_refuse = false;
  // a priority box's owner killed mid-move after T5: `delivered` one too high until the takeover.
  bool sorting_counted_delivered = false;
  // a priority box's in-order run ends at a position finished out of order
  // (an abandoned claim): what is before it may be handed out first.
  bool gap_ends_run = false;
  bool owner_live = false;
  std::vector<std::pair<std::uint32_t, std::uint64_t>> pending;  // (lane, key) held by the live owner, in read order
  // Producer entries whose dead holder announced a claim (P2) it never made
  // (P3): entry -> (lane, position). The next holder of the entry finishes
  // that op: a dead claim at that position, whoever's, is abandoned.
  std::map<std::uint32_t, std::pair<std::uint32_t, std::uint64_t>> announced;
  std::vector<fate_event> fates;  // of the step being applied (the driver clears it)
  friend bool operator==(const model&, const model&) = default;

  std::uint64_t depth(std::uint32_t lane) const;
  std::uint64_t lazy(std::uint32_t lane) const;  // owner_done + prod_evicting: posted but in no counter yet
  // The published messages of a lane in the order peek lists them, and
  // those peek may or may not list (a priority box's messages a dead owner
  // had taken: back in its store, QUEUED, if they were there, and listed;
  // re-taken if they were still in the ring, or still taken, and not).
  std::vector<msg_id> visible(std::uint32_t lane) const;
  std::vector<msg_id> maybe_visible(std::uint32_t lane) const;
  // A self-check of the model's own bookkeeping: the identity with lazy entries.
  std::string broken() const;
  std::size_t hash() const;  // equal models hash equal (for the driver's set of states)
  std::string describe() const;
};

// One post as the driver asked for it.
struct post_call {
  std::uint32_t lane = 0;
  msg_id id{};
  std::int64_t prio = 0;
  std::uint32_t writer = 0;  // the producer's table entry
  bool too_large = false;
};
struct post_reply {
  post_status st = post_status::stored;
  std::uint32_t evicted = 0;
};
std::string to_string(const post_reply& r);

// A post that returned `r`: the states it may have left that agree with r
// (empty: none does; `why` then says what the model expected).
std::vector<model> post_done(const model& m, const post_call& c, post_reply r, std::string& why);
// A post whose producer died inside the call: every state it may have left.
std::vector<model> post_cut(const model& m, const post_call& c);
// What a post may return (the driver gives one that can only time out a short timeout).
std::vector<post_reply> post_outcomes(const model& m, const post_call& c);

// One message an owner received, as it printed it.
struct delivery {
  std::uint32_t lane = 0;
  msg_id id{};
  bool flagged = false;
  friend bool operator==(const delivery&, const delivery&) = default;
};
std::string to_string(const std::vector<delivery>& d);

enum class take_kind : std::uint8_t { receive, try_one, read };
struct take_call {
  take_kind how = take_kind::receive;
  std::size_t max = 1;
  bool waits = false;  // a timeout > 0 (a call that waits may repair what it finds stuck)
};
// A receive/read that returned `got` (empty when it found nothing).
std::vector<model> take_done(const model& m, const take_call& c, const std::vector<delivery>& got, std::string& why);
// A receive/read during which the owner died: every state it may have left (the owner is dead in each).
std::vector<model> take_cut(const model& m, const take_call& c);
// commit() of what the live owner read: returned ok.
std::vector<model> commit_done(const model& m, std::string& why);
// The owner died inside commit().
std::vector<model> commit_cut(const model& m);
// The owner died between calls (or exited: it releases the box the same way).
model owner_gone(const model& m);
// A new owner took the box (acquire, or an heir's transfer): R4.
model acquire(const model& m);
// A new owner died inside its takeover: every state it may have left (no owner).
std::vector<model> acquire_cut(const model& m);
// A producer took table entry `e`, which a dead producer held: its pending op is finished.
std::vector<model> entry_reused(const model& m, std::uint32_t e);

}  // namespace gencheck
