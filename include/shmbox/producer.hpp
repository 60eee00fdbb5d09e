// shmbox/producer.hpp - posting into a box from any process.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string_view>

#include "shmbox/box.hpp"
#include "shmbox/error.hpp"
#include "shmbox/export.hpp"
#include "shmbox/types.hpp"

namespace shmbox {

class slot_loan;

// Where one post goes and how long it may wait. Every field is optional:
// post(msg) is post(msg, {}). E.g. post(msg, {.lane = 0}) (the control
// lane), post(msg, {.timeout = 0ms}) (never wait).
struct post_options {
  // The lane (0 = the control lane, which takes only posts that name it; see
  // lane_options). Unset: the box's default lane.
  std::optional<std::uint32_t> lane{};
  // How long a post into a full `block` box (or one stuck behind a stalled
  // process) may wait. Unset: the box's block_timeout; nanoseconds::max():
  // forever.
  std::optional<std::chrono::nanoseconds> timeout{};
  // How long it polls before it sleeps on the futex (at most kMaxSpin).
  // Unset: the box's options::spin.
  std::optional<std::chrono::nanoseconds> spin{};
  // A priority box (options::priority): this message's priority; the owner
  // receives the lowest value first, FIFO among equal values. Unset: the
  // handle's priority function (set_priority_function), else 0. Other boxes
  // ignore it.
  std::optional<std::int64_t> priority{};
  // For a caller that waits in slices and posts the same message again after
  // each (the Python package waits 0.25 s at a time, so that Ctrl-C is
  // handled): true makes a post, loan or batch that times out leave no
  // trace (not counted as a timeout, not dead-lettered); the caller's last
  // slice leaves it false, so a post that really times out counts once.
  bool quiet_timeout = false;
};

// A producer handle: one entry in the box's producer table, used by one thread
// at a time. Any number of processes (and threads, each with its own handle)
// may post into the same box. The entry belongs to the process that attached:
// a fork child's copy posts nothing (post_status::error, last_error()
// errc::inherited_handle) and gives nothing back when destroyed; the child
// attaches its own (box.hpp: handles and fork()).
class SHMBOX_API Producer {
 public:
  // Opens the box by name and takes a producer entry.
  static result<Producer> attach(std::string_view name);
  // Takes a producer entry in a box this process already has open.
  static result<Producer> attach(const Box& box);
  // Takes over entry `entry` from the producer that held it and died, if the
  // entry is still that producer's: `attached_ns` is what its attached_ns()
  // returned. The dead producer's last post is finished first (published,
  // or its slot abandoned), so the entry's counters (inspect.hpp:
  // producer_info) are final: a post it was making when it died is counted
  // stored if and only if the message is in the box. This is how a process
  // that must not post a message twice (the NATS bridge's import) learns,
  // after a crash, whether its last post landed. errc::not_found: the entry
  // is free, held by a live process, or was taken by another since.
  static result<Producer> adopt(const Box& box, std::uint32_t entry, std::uint64_t attached_ns);

  Producer(Producer&&) noexcept;
  Producer& operator=(Producer&&) noexcept;
  ~Producer();  // gives the entry back (not from a fork child's copy); the messages it posted stay in the box

  // Posts one message. By default into the box's default lane
  // (Box::default_lane: lane 1 of a box with several lanes, so ordinary
  // traffic never takes the control lane's room; lane 0 of a box with one),
  // and a full `block` box waits up to the box's block_timeout; see
  // post_options. A lane the box does not have is post_status::error
  // (last_error: invalid_argument).
  post_status post(std::string_view msg, const post_options& o = {}) noexcept { return post(msg.data(), msg.size(), o); }
  post_status post(const void* data, std::size_t size, const post_options& o = {}) noexcept;

  // Zero-copy post: claims a slot for a message written in place; see
  // slot_loan. A full box answers as post does (reject: full, drop_newest:
  // dropped, drop_oldest: evicts, lifo: replaces the top, block: waits up to
  // the timeout).
  slot_loan loan(const post_options& o = {}) noexcept;

  // Posts `msgs` in order, each as post() would, until one is not stored;
  // returns how many were stored: always a prefix of msgs, so
  // msgs.subspan(n) is what is left (retrying it keeps the order). `last`
  // (if given) gets the outcome of msgs[n] (full, dropped, timeout,
  // too_large, error), or of the last message when all were stored (stored /
  // stored_evicted). Each run of free slots is claimed with one atomic
  // operation, and a sleeping owner is woken once per run. A `block` box
  // waits up to the timeout for a message that finds no space.
  std::size_t post_batch(std::span<const std::string_view> msgs, const post_options& o = {},
                         post_status* last = nullptr) noexcept;

  // A priority box: computes the priority of each message this handle posts
  // without post_options::priority (actor-ts's priorityFor), e.g. a deadline
  // read from the message. Called with the message's bytes (a loan's at
  // commit), in the posting thread; it must not throw (post is noexcept).
  // An empty function: priority 0. Other boxes never call it.
  void set_priority_function(std::function<std::int64_t(std::string_view)> fn) noexcept;

  // The largest message this box takes, in bytes.
  std::uint32_t max_message_size() const noexcept;
  // Why the most recent post that returned post_status::error did so.
  std::error_code last_error() const noexcept;
  // The index of this handle's entry in the producer table.
  std::uint32_t entry_index() const noexcept;
  // When this handle took its entry (CLOCK_REALTIME ns): with entry_index(),
  // what adopt() needs to take the entry over should this process die.
  std::uint64_t attached_ns() const noexcept;
  // How many messages this handle's most recent post, loan or post_batch
  // call evicted (drop_oldest) or replaced (lifo). One post can
  // evict more than one: when another producer takes the slot this one just
  // freed, this one evicts again. Evictions count even when the call then
  // failed (a timeout behind a stalled process). Summed over every call of
  // every producer, it equals the box's dropped_oldest counter (drop_oldest
  // lanes) plus the replaced tops of lifo lanes.
  std::uint32_t last_evicted() const noexcept;

 private:
  struct SHMBOX_LOCAL state;
  friend class slot_loan;
  friend class Box;  // Box::resize drops through a Producer's entry
  friend struct detail::access;  // a pool probes its member box through it
  SHMBOX_LOCAL explicit Producer(std::unique_ptr<state> s);
  SHMBOX_LOCAL static result<Producer> take_entry(const Box& box, const std::uint32_t* entry, std::uint64_t attached_ns,
                                                 std::uint64_t give_up_ns = 0);
  std::unique_ptr<state> s_;
};

// A slot claimed for one message that the producer writes in place (zero
// copy): Producer::loan() claims it, the caller writes up to capacity() bytes
// at data(), then commit(size) publishes them (one release store) or abort()
// gives the slot back without a message (counted as `aborted`). A loan that
// is destroyed uncommitted is aborted. While a loan is open its slot holds
// back the delivery of messages posted after it (FIFO order), so keep loans
// short; if the process dies holding one, the slot is repaired and counted
// `abandoned`, like any post cut short. One open loan per Producer handle;
// the handle's post calls fail (error, invalid_argument) until it is closed.
class SHMBOX_API slot_loan {
 public:
  slot_loan() = default;
  slot_loan(slot_loan&& o) noexcept;
  slot_loan& operator=(slot_loan&& o) noexcept;
  ~slot_loan() {
    if (ctx_ != nullptr) abort();  // an open loan destroyed without commit is aborted
  }

  // stored / stored_evicted: the slot is yours. Otherwise why there is none
  // (full, dropped, timeout, error; counted like a post with that outcome).
  post_status status() const noexcept { return status_; }
  explicit operator bool() const noexcept { return ctx_ != nullptr; }
  // The slot's payload bytes (capacity() of them), in shared memory.
  void* data() const noexcept { return data_; }
  std::uint32_t capacity() const noexcept { return capacity_; }
  // Publishes the first `size` bytes of data(). Returns status(), or
  // too_large (size > capacity(): the loan stays open, write less) or error
  // (no open loan).
  post_status commit(std::size_t size) noexcept;
  // Gives the slot back without a message.
  void abort() noexcept;

 private:
  friend class Producer;
  // where_ and stamp_ are not next to each other: commit would load them with
  // one 16-byte load, which cannot be forwarded from loan's two 8-byte
  // stores (a store-forwarding stall on every zero-copy post).
  Producer::state* ctx_ = nullptr;  // the lending handle's state (it outlives moves of the handle)
  void* data_ = nullptr;
  std::uint64_t where_ = 0;  // FIFO position or lifo slot index
  std::uint32_t capacity_ = 0;
  std::uint32_t lane_ = 0;
  static constexpr std::uint64_t kNotLifo = UINT64_MAX;
  std::uint64_t stamp_ = kNotLifo;  // lifo stamp (a FIFO lane: kNotLifo)
  bool wake_ = false;        // FIFO: the owner was asleep when we claimed
  bool priority_ = false;    // a priority box's lane: commit writes the priority word
  post_status status_ = post_status::error;
};

}  // namespace shmbox
