// lib/ring.hpp - the slot protocol: posting, taking, evicting, repairing.
// The protocol itself, and what happens when a process dies at each step, is
// written down at the top of ring.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "layout.hpp"
#include "liveness.hpp"
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
  // Dead letters: while the box names a dead-letter box, messages this handle
  // evicts (drop_oldest) or replaces (lifo) are copied here, while it still
  // holds their slot, to be forwarded after the post.
  bool capture = false;
  std::vector<std::string> captured;
  // The owner's notify eventfd, duplicated into this process (pidfd_getfd)
  // for the owner key and descriptor number it belongs to; -1 none, also
  // when that owner's descriptor could not be had (another pid namespace or
  // user, pidfd_getfd refused by seccomp or Yama): remembered, so that a
  // refused producer does not try again on every wake (it wakes the owner's
  // waker thread instead).
  int owner_fd = -1;
  std::uint64_t owner_fd_key = 0;
  std::uint32_t owner_fd_num = 0;
  std::uint64_t spin_ns = 0;  // this call's adaptive wait (set by the Producer before each call)
  // Messages this handle's current call (post, loan, post_batch) evicted
  // (drop_oldest, E1-E4, also R3) or replaced (lifo, L2): Producer::last_evicted().
  // Reset by each public call; a single writer, private memory.
  std::uint32_t evicted = 0;
  bool loan_open = false;     // a slot_loan holds this entry's claim
  role_lock lock;             // holds the entry's byte (liveness.hpp L1)
  ~producer_ctx();
};

// A slot claimed for one message, not yet published.
struct slot_claim {
  slot_header* slot = nullptr;
  std::uint32_t lane = 0;
  std::uint64_t where = 0;  // FIFO position, or lifo slot index
  std::uint64_t stamp = 0;  // lifo: the stamp it is published with
  bool wake = false;        // FIFO: the owner's sleeping bit was set at the claim
};

// Posts one message into `lane`; waits (block policy, or behind a busy slot)
// at most `timeout_ns` (UINT64_MAX: forever).
post_status post_message(producer_ctx& p, std::uint32_t lane, const void* data, std::size_t size,
                         std::uint64_t timeout_ns) noexcept;

// The three steps of post_message, for loans (zero-copy posts): claims a slot
// for a message of up to `size` bytes (stored / stored_evicted with `out`
// filled, else the outcome a post gets, counted); publishes it once `size`
// bytes are written at its payload; or gives it back (counted aborted).
post_status claim_slot(producer_ctx& p, std::uint32_t lane, std::size_t size, std::uint64_t timeout_ns,
                       slot_claim& out) noexcept;
void publish_slot(producer_ctx& p, const slot_claim& k, std::size_t size) noexcept;
// The fast path of a post into a FIFO lane (claim_fast_inline, payload,
// fifo_publish_inline: ring_fast.hpp); false, having claimed nothing, when
// the slot at the tail is not free for it: then post_message decides.
bool post_fast(producer_ctx& p, const lane_view& L, const void* data, std::size_t size) noexcept;
void abort_slot(producer_ctx& p, const slot_claim& k) noexcept;

// Posts msgs[0..k) with one claim of k consecutive free positions (FIFO
// lanes; k <= n, kMaxClaimRun). Returns k; 0 when the first position is not
// free (full, busy, lifo): post that message with post_message. Every
// message must fit the slot.
std::size_t post_run(producer_ctx& p, std::uint32_t lane, const std::string_view* msgs, std::size_t n) noexcept;

// Takes a producer entry (free, or held by a dead process whose pending op is
// completed first). Returns false when every entry is held by a live process.
bool claim_producer_entry(mapped_box& m, producer_ctx& out) noexcept;
void release_producer_entry(producer_ctx& p) noexcept;

// A message taken but not yet committed (explicit read, or a lease box's receive).
struct pending_slot {
  std::uint32_t lane = 0;
  std::uint64_t where = 0;  // FIFO position, or lifo slot index
  std::uint64_t seq = 0;    // the slot's sequence word as we set it: TAKEN(x, us)
  std::uint64_t orig = 0;   // what it was before we took it (FULL, or TAKEN by a gone owner)
  bool redelivered = false;
  bool drop = false;        // the filter dropped it: committed as filtered, not delivered
};

// One owner handle.
struct owner_ctx {
  mapped_box* m = nullptr;
  std::uint64_t key = 0;
  std::uint64_t epoch = 0;
  std::uint32_t actor_index = 0;  // epoch % kOwnerActors
  owner_actor* act = nullptr;     // this owner's op words
  repairer rep;                   // actor = owner_actor_id(epoch)
  bool fenced = false;            // lease box: takes by CAS, commits through DONE (see TAKE, fenced)
  std::uint64_t head[kMaxLanes] = {};  // private cursor of each FIFO lane
  std::vector<std::uint32_t> lifo_redeliver[kMaxLanes];  // lifo slots taken over from a gone owner
  std::vector<pending_slot> pending;                      // taken, not yet committed
  std::uint64_t stuck_pos[kMaxLanes] = {};
  std::uint64_t stuck_since_ns[kMaxLanes] = {};
  std::uint64_t next_check_ns[kMaxLanes] = {};
  std::error_code last_error;
  std::uint32_t polls = 0;  // receive polls, for reading the tails only every 64th (owner.cpp)

  owner_lane_counters* counters(std::uint32_t lane) const noexcept { return m->actor_counters(actor_index, lane); }
};

// What the sink (the owner's filter) makes of one taken message.
enum class take_verdict {
  deliver,  // hand it out (committed as delivered)
  drop,     // remove it (committed as filtered)
  skip,     // stop: this message and the rest stay in the box
};

// Where taken messages go: the owner copies each one out through append().
struct take_sink {
  std::size_t max = 0;        // take at most this many
  bool look_at_tail = true;   // on an unpublished slot, read the tail to tell "busy" from "empty"
  virtual take_verdict append(const std::byte* data, std::uint32_t size, bool redelivered, std::uint32_t lane) = 0;

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
  std::size_t taken = 0;     // delivered or dropped
  bool skipped = false;      // the sink said skip: stop taking (all lanes)
  bool busy = false;     // something is claimed but not yet published (a slow or dead writer)
  bool unknown = false;  // stopped at an unpublished slot without reading the tail (look_at_tail false)
  bool corrupt = false;  // the lane broke an invariant; last_error says how
};

// How owner_take treats what it takes.
enum class take_mode {
  commit_each,  // take, copy, commit, free each message (the fast path)
  hold,         // take and copy; keep in o.pending until owner_commit()
};

// Takes and copies up to sink.max messages from `lane` (owner only).
take_result owner_take(owner_ctx& o, std::uint32_t lane, take_sink& sink, take_mode mode) noexcept;

// Commits o.pending: TAKEN -> DONE (a CAS each: a slot re-taken by a newer
// owner is lost to us), counts them, frees them. kept[i] (if given) says
// whether pending[i] was committed.
struct commit_result {
  std::size_t committed = 0;  // delivered or dropped by the filter
  std::size_t lost = 0;  // re-taken by a newer owner: it delivers them again
};
commit_result owner_commit(owner_ctx& o, std::vector<char>* kept) noexcept;
// Gives every held slot back (TAKEN -> what it was): for an owner that lost
// the box before committing. Returns how many went back.
std::size_t owner_give_back(owner_ctx& o) noexcept;

// After taking the lease: finishes or re-takes the slots of owners that are
// gone (committed ones are counted and freed, uncommitted ones will be
// delivered again, flagged), and clears stray sleeping bits.
void owner_recover(owner_ctx& o) noexcept;

// True when nothing is claimed or stored in the lane (the owner may sleep).
// Sets the owner-sleeping bit when it returns true; owner_clear_sleep() undoes it.
bool owner_arm_sleep(owner_ctx& o, std::uint32_t lane) noexcept;
void owner_clear_sleep(owner_ctx& o, std::uint32_t lane) noexcept;

// Messages in the lane, by scanning slots (exact when idle).
std::uint64_t lane_depth_scan(const mapped_box& m, std::uint32_t lane) noexcept;

}  // namespace shmbox::detail
