// shmbox/box.hpp - a box: one bounded mailbox in one POSIX shared-memory segment.
//
// A Box handle maps the segment. Producers (producer.hpp) post into it from any
// number of processes; one Owner (owner.hpp) at a time receives from it.
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

namespace shmbox {

namespace detail {
struct mapped_box;
}

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

inline constexpr std::uint32_t kMaxLanes = 8;

// One lane of a box (a ring of its own). Lane 0 is the control lane: always
// read first, with its own capacity, so full user lanes never block or drop a
// control message; it takes only explicit posts (Producer::post_to(0, ...)).
// Lanes 1.. are priorities: a lower number is read first; each lane keeps
// FIFO order (lifo lanes: newest first). A plain post goes to the box's
// default lane (options::default_lane).
struct lane_options {
  std::uint32_t capacity = 0;      // messages; 0: the box's `capacity`
  std::optional<policy> overflow{};  // unset: the box's `overflow`
};

// Capacity and behaviour, chosen at creation and fixed for the box's life.
struct options {
  std::uint32_t capacity = 1024;     // messages the box holds; a power of two is fastest
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
  // Adaptive wait: a blocking receive that finds nothing, and a blocking post
  // that finds no space, poll the box this long before they sleep on a futex.
  // A busy pair then hands over without system calls; an idle owner sleeps
  // and uses no CPU. 0: sleep at once. At most kMaxSpin. Per call: wait_options.
  std::chrono::nanoseconds spin{std::chrono::microseconds(50)};
};

inline constexpr std::chrono::nanoseconds kMaxSpin = std::chrono::seconds(1);

// How one blocking call waits (receive, receive_batch, read, receive_in_place,
// post with a timeout, loan): poll for `spin`, then sleep on the futex.
// Unset: the box's options::spin.
struct wait_options {
  std::optional<std::chrono::nanoseconds> spin{};
};

// Every message that is posted ends in exactly one of these counters or in the box
// (the same identity, word for word, is in README.md; tests/cli_hardening.cpp checks both):
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
  std::uint64_t dropped_newest = 0;  // drop_newest: the new message; lifo: the replaced top
  std::uint64_t dropped_oldest = 0;  // drop_oldest: evicted messages
  std::uint64_t filtered = 0;        // dropped by the owner's filter
  std::uint64_t abandoned = 0;       // producer died between claiming a slot and publishing it
  std::uint64_t aborted = 0;         // loans given back unposted (slot_loan::abort)
  std::uint64_t redelivered = 0;     // delivered again after an owner died before committing
  std::uint64_t dead_lettered = 0;   // dropped/evicted messages stored in the dead-letter box
  std::uint64_t dead_letter_failed = 0;  // ... that the dead-letter box did not take
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
};

// A message seen by Box::peek, in delivery order, without taking it.
struct peeked_message {
  std::uint32_t lane = 0;
  std::uint64_t position = 0;  // FIFO position, or lifo stamp
  std::string data;
};

// One lane, as seen by anyone.
struct lane_info {
  std::uint32_t capacity = 0;
  policy overflow = policy::reject;
  std::uint64_t depth = 0;
  counters count;
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
  counters count;                 // all lanes
};

// What Box::verify found. A box in use is checked without stopping anyone:
// every check holds at any instant of the protocol, so a problem is real.
struct verify_report {
  std::string box;
  bool ok = true;                     // no problem found
  std::vector<std::string> problems;  // one sentence each: what is wrong and where
  std::uint64_t slots = 0;            // how many of each were checked
  std::uint32_t producers = 0;
  std::uint32_t heirs = 0;
};

// Why Box::collect removed (or, dry run, would remove) a box, or why it skipped one.
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
  // Unlinks the segment. Processes that have it mapped keep working on it.
  static result<void> remove(std::string_view name);
  // Names of every shmbox segment in /dev/shm (valid or not).
  static result<std::vector<std::string>> list();
  // Checks the segment's invariants: header, owner record, heir and producer
  // tables, every slot of every lane, counters. A segment that cannot be
  // opened as a box (foreign, truncated, corrupt header) is a report with
  // ok = false; errors are only for what stops us looking (not_found,
  // permission_denied, invalid_name).
  static result<verify_report> verify(std::string_view name);
  // Removes boxes nobody uses: no live owner, heir or listener, no live
  // producer, no live process mapping the segment (as far as /proc shows),
  // and empty unless include_nonempty; also half-created segments whose
  // creator died. Never a box with a live process attached. A box it may
  // not remove (another user's, EPERM/EACCES) and a file at a box path that
  // is not a regular file are listed with skipped = true, and it goes on.
  static result<std::vector<collected_box>> collect(const collect_options& opts = {});
  // Checks a name against the rules (1..128 of [A-Za-z0-9._-], not starting with '.').
  static result<void> validate_name(std::string_view name);

  Box(Box&&) noexcept;
  Box& operator=(Box&&) noexcept;
  ~Box();

  const std::string& name() const noexcept;
  std::uint32_t capacity() const noexcept;  // all lanes together
  std::uint32_t lane_count() const noexcept;
  std::uint32_t default_lane() const noexcept;  // the lane of a plain post (options::default_lane)
  std::uint32_t slot_size() const noexcept;
  policy overflow() const noexcept;
  // Messages in the box right now, from two counters; exact when idle.
  std::uint64_t depth_approx() const noexcept;
  // Sums of the counters in the segment.
  shmbox::counters read_counters() const;
  // Everything above plus the owner record and an exact depth.
  box_info info() const;
  // Up to `max` messages in delivery order (lane 0 first; FIFO lanes oldest
  // first, lifo lanes newest first), copied out WITHOUT taking them: the
  // owner and the producers are not disturbed (nothing in the segment is
  // written). A message taken, evicted or overwritten while it is being
  // copied is left out; so the list is a snapshot of a moving box. Works on
  // a box opened with inspect().
  std::vector<peeked_message> peek(std::size_t max) const;
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
  result<void> request_give_away_to_heir(std::uint32_t entry, std::chrono::nanoseconds timeout) const;

 private:
  SHMBOX_LOCAL explicit Box(std::shared_ptr<detail::mapped_box> m);
  std::shared_ptr<detail::mapped_box> m_;
  friend class Producer;
  friend class Owner;
  friend class Heir;
};

}  // namespace shmbox
