// shmbox/box.hpp - a box: one bounded mailbox in one POSIX shared-memory segment.
//
// A Box handle maps the segment. Producers (producer.hpp) post into it from any
// number of processes; one Owner (owner.hpp) at a time receives from it;
// heirs (heir.hpp) wait to take it over. Looking at boxes: inspect.hpp.
//
// Handles and fork(): a fork child inherits copies of its parent's handles,
// not their roles. A role (owner, heir entry, producer entry, pool client
// and lease) stays with the process that made the handle: in another
// process, destroying a copy only unmaps and closes that process's own
// resources (it never releases, withdraws, gives back or hands over
// anything), and calls that would act for the role fail: Owner calls with
// not_owner, the others with errc::inherited_handle. The child makes handles
// of its own (it may use an inherited Box to attach or acquire them: a Box
// holds no role). This holds for a child made by fork() (the library's
// pthread_atfork handler marks it); the copies of a raw clone() without
// those handlers are told apart only when destroyed (by pid).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "shmbox/error.hpp"
#include "shmbox/export.hpp"
#include "shmbox/types.hpp"

namespace shmbox {

namespace detail {
struct mapped_box;
struct access;  // the library's own way in (lib/base/access.hpp)
}

// One lane of a box (a ring of its own). Lane 0 is the control lane: always
// read first, with its own capacity, so full user lanes never block or drop a
// control message; it takes only explicit posts (Producer::post(msg, {.lane = 0})).
// Lanes 1.. are priorities: a lower number is read first; each lane keeps
// FIFO order (lifo lanes: newest first). A plain post goes to the box's
// default lane (options::default_lane).
struct lane_options {
  std::uint32_t capacity = 0;      // messages; 0: the box's `capacity`
  std::optional<policy> overflow{};  // unset: the box's `overflow`
  std::uint32_t max_capacity = 0;  // resizable up to this (Box::resize); 0: the box's `max_capacity`
  std::uint32_t quota = 0;         // per-producer quota of this lane; 0: the box's `quota`
};

// Capacity and behaviour, chosen at creation and fixed for the box's life.
struct options {
  std::uint32_t capacity = 1024;     // messages the box holds; a power of two is fastest
  // Resizable: the box reserves slots for this many messages and Box::resize
  // moves its limit (`capacity` at first) between 1 and this, while producers
  // and the owner run. The reserve costs its memory from creation; posts to
  // a resizable lane take the general path (no inline fast path). 0: not
  // resizable. Not for lifo lanes.
  std::uint32_t max_capacity = 0;
  std::uint32_t slot_size = 256;     // largest message, in bytes
  policy overflow = policy::reject;  // what a post does when the box is full
  std::uint32_t mode = 0600;         // file mode of /dev/shm/shmbox.<name>
  std::uint32_t max_producers = 64;  // producer handles that can be attached at once
  std::chrono::milliseconds block_timeout{1000};  // default wait of a post on a full `block` box
  std::chrono::milliseconds lease{0};  // lease deadline: an owner that does not receive (or renew) for this
                                       // long loses the box to its heir; 0: only death ends a lease
  std::vector<lane_options> lanes{};   // 1..kMaxLanes lanes; empty: one lane of `capacity` and `overflow`
  // The lane of a plain post (Producer::post, loan, post_batch); must be one
  // of the box's lanes. Unset: lane 1 when the box has several lanes (the
  // control lane 0 takes only explicit posts), lane 0 when it has one.
  std::optional<std::uint32_t> default_lane{};
  std::string dead_letters{};          // a box that receives what this one drops or evicts ("": none)
  // Also forward posts this box refuses (reject: full, block: timed out, a
  // message larger than the slot) to `dead_letters`, as Akka's bounded
  // mailboxes do: best effort (the dead-letter box's policy, no waiting),
  // counted in dead_lettered / dead_letter_failed. The sender still gets the
  // refusal. Needs `dead_letters`.
  bool dead_letter_refused = false;
  // Adaptive wait: a blocking receive that finds nothing, and a blocking post
  // that finds no space, poll the box this long before they sleep on a futex.
  // A busy pair then hands over without system calls; an idle owner sleeps
  // and uses no CPU. 0: sleep at once. At most kMaxSpin. Per call: post_options::spin,
  // receive_options::spin.
  std::chrono::nanoseconds spin{std::chrono::microseconds(50)};
  // The owner's stash (actor-ts's stash/unstashAll): entries for this many
  // parked messages (Owner::stash), each the size of a slot. A parked
  // message counts against its lane's limit (posts see room for limit -
  // parked) and survives an owner crash: the next owner receives it first,
  // flagged redelivered. 0: no stash. Posts to a box with a stash take the
  // general path (the gate that counts parked messages). Not with lifo lanes,
  // a lease or a custom buffer; a priority box's unstashed messages rejoin
  // their priority (Owner::unstash_all).
  std::uint32_t stash = 0;
  // A priority box (actor-ts's PriorityMailbox): each message carries a
  // priority (post_options::priority, or the producer's
  // Producer::set_priority function; 0 by default) and the owner receives
  // the lowest value first, FIFO among equal values, across all producers;
  // lanes still order first (lane 0 before lane 1, ...). The owner moves
  // posted messages into a store of the box (one entry per slot, so the
  // segment is about twice the size) and keeps them ordered in a heap:
  // O(log n) per message. Policies: reject, drop_newest, block (not
  // drop_oldest, lifo); no lease; a stash if `stash` says so (its entries
  // follow the store's). See the README's "Priority boxes".
  bool priority = false;
  // A custom-buffer box (pobox's custom buffers; shmbox/buffer.hpp): the
  // owner delivers in the order a buffer of this registered type decides,
  // and it decides what to drop once a lane's store holds the lane's limit.
  // Every process that posts to the box, owns it or is its heir registers
  // the type first (register_buffer). 1-48 characters of [A-Za-z0-9._-];
  // "": none. Policies (of the lanes in front of the store): reject,
  // drop_newest, block; no lease, no stash, not with `priority`. See the
  // README's "Custom buffers".
  std::string buffer{};
  // Per-producer fairness: each producer handle may have at most this many
  // of its messages waiting in a lane (posted, not yet taken by the owner;
  // those a gone producer left count against no one's). A post beyond it
  // gets the lane's policy applied to that producer alone: reject and
  // drop_newest store nothing (post_status::over_quota), block waits until
  // one of the producer's own messages is taken (post_status::timeout if
  // none is in time). Counted per producer (counters::quota_refused, and
  // box_info's producers: waiting, quota_refused). With quota x producers <=
  // capacity, a producer within its quota always finds room once the owner
  // has committed what it read (and taken what gone producers left). Posts
  // take the general path (no inline fast path, no batched claim). 0: none.
  // Lanes with reject, drop_newest or block only: not drop_oldest (evicting
  // a producer's own oldest would leave a hole in the ring that costs every
  // producer room until the owner passes it), not lifo; not in resizable,
  // stash, priority or custom-buffer boxes. Per lane: lane_options::quota.
  std::uint32_t quota = 0;
};

// What Box::resize did.
struct resize_report {
  std::uint32_t lane = 0;
  std::uint32_t before = 0;        // the lane's limit before
  std::uint32_t after = 0;         // and now
  std::uint32_t max_capacity = 0;  // its reserve: the largest limit it can have
  std::uint64_t dropped = 0;       // messages the shrink dropped by the lane's policy (counted, dead-lettered)
};

struct open_options {
  // Open a box whose segment belongs to another user. Off by default: such a
  // segment may have been planted to read what we post or to feed us.
  bool any_owner = false;
};

class SHMBOX_API Box {
 public:
  // Creates /dev/shm/shmbox.<name> and initialises it; fails with errc::exists if
  // it is there already. Any process may call it.
  static result<Box> create(std::string_view name, const options& opts = {});
  // Opens an existing box for posting and receiving (read-write). A segment
  // owned by another user is refused (permission_denied) unless any_owner.
  static result<Box> open(std::string_view name, const open_options& opts = {});
  // Opens an existing box read-only, for inspection (stat, ls).
  static result<Box> inspect(std::string_view name);
  // inspect() into a private copy: the segment (up to 1 MiB; a larger one is
  // mapped as by inspect) is read once with pread into memory of this
  // process, and info(), peek() and the counters read that copy. No mapping
  // (no page faults, no munmap), and nothing another process does to the
  // segment afterwards (a truncation included) can reach this process;
  // liveness (owner, producers, heirs) is still asked of the kernel when
  // read. For tools that look at many boxes (ls, metrics).
  static result<Box> snapshot(std::string_view name);
  // Unlinks the segment. Processes that have it mapped keep working on it.
  static result<void> remove(std::string_view name);
  // Names of every shmbox segment in /dev/shm (valid or not).
  static result<std::vector<std::string>> list();
  // Checks a name against the rules (1..128 of [A-Za-z0-9._-], not starting with '.').
  static result<void> validate_name(std::string_view name);

  Box(Box&&) noexcept;
  Box& operator=(Box&&) noexcept;
  ~Box();  // unmaps the segment; a fork child may keep using an inherited Box (it holds no role)

  const std::string& name() const noexcept;  // the box's name (without the shmbox. prefix)
  std::uint32_t capacity() const noexcept;  // all lanes together
  std::uint32_t lane_count() const noexcept;  // lanes, the control lane 0 included
  std::uint32_t default_lane() const noexcept;  // the lane of a plain post (options::default_lane)
  std::uint32_t slot_size() const noexcept;  // the largest message, in bytes
  policy overflow() const noexcept;  // the box's policy (options::overflow; lanes may have their own)
  // This incarnation of the box: fixed at creation (from its creator and
  // creation time), different for a box removed and created again under the
  // same name. The first part of every message_id.
  std::uint64_t id() const noexcept;
  // Messages in the box right now, from two counters; exact when idle.
  std::uint64_t depth_approx() const noexcept;
  // The same for one lane (0 for a lane the box does not have).
  std::uint64_t depth_approx(std::uint32_t lane) const noexcept;
  // Messages lane `lane` holds at most now (a resizable lane: its limit; 0 for
  // a lane the box does not have).
  std::uint32_t capacity(std::uint32_t lane) const noexcept;
  // Sums of the counters in the segment.
  shmbox::counters read_counters() const;
  // Whether the segment is still whole under this handle: errc::truncated
  // once a process that may write it shrank it while this process had it
  // mapped (what lay beyond the new end reads as zeros from then on, so
  // info() and the counters are not the box's any more: docs/guarantees.md,
  // "Trust"). A snapshot's copy is always whole.
  result<void> intact() const;
  // Asks the box's owner to hand the box to process `pid` of the caller's pid
  // namespace, which must be waiting for it (an heir or listener:
  // Heir::enlist / listen, or `shmbox recv --heir`); request_give_away_to_heir
  // names heir-table entry `entry` instead, in any namespace. Only an owner that accepts requests
  // (Owner::accept_give_away_requests) does it, the next time it receives or
  // waits. Returns once `pid` owns the box; errors: refused (the owner does
  // not accept requests, or did not hand the box over: see the message),
  // not_owner (no live owner), invalid_argument (pid is not waiting for the
  // box, or another request is pending), timed_out.
  result<void> request_give_away(std::uint32_t pid, std::chrono::nanoseconds timeout) const;
  // Changes how many messages a lane holds, between 1 and the max capacity
  // reserved at creation (options::max_capacity), while producers and the
  // owner run. `lane` unset: the box's only lane (a box with several lanes
  // needs one named). Growing lets waiting posts in at once. Shrinking below
  // the lane's depth applies its policy to the excess, as pobox does:
  // drop_oldest drops the oldest (counted dropped_oldest), reject and
  // drop_newest keep the old ones and drop the newest (counted
  // dropped_newest), block drops nothing (posts wait until the owner has
  // taken the excess); dropped messages go to the dead-letter box like any
  // drop. The caller takes a producer entry for the call. Errors:
  // invalid_argument (not resizable, a limit out of range, no such lane),
  // producer_table_full, read-only handle.
  result<resize_report> resize(std::uint32_t limit, std::optional<std::uint32_t> lane = {}) const;
  // request_give_away, naming heir-table entry `entry` (heir_info::entry)
  // instead of a pid: see request_give_away above.
  result<void> request_give_away_to_heir(std::uint32_t entry, std::chrono::nanoseconds timeout) const;

 private:
  SHMBOX_LOCAL explicit Box(std::shared_ptr<detail::mapped_box> m);
  std::shared_ptr<detail::mapped_box> m_;
  friend struct detail::access;
};

}  // namespace shmbox
