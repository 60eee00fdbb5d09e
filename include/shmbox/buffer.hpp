// shmbox/buffer.hpp - custom buffers: the owner's code decides the order in
// which a box delivers and what it drops when full (pobox's pobox_buf
// behaviour: new, push, push_drop, pop, drop, size; Akka's custom mailbox
// types).
//
// A box created with options::buffer = "NAME" (shmbox create --buffer NAME)
// delivers through a buffer of type NAME, which every process that posts to
// the box or owns it (or enlists as its heir) registers first with
// register_buffer(NAME, ...). A process that has not registered NAME gets
// errc::buffer_unknown from Producer::attach, Owner::acquire and
// Heir::enlist: it never posts keys the owner does not expect, and never
// delivers in an order the box was not made for.
//
// How it works (README "Custom buffers"; ring.hpp CUSTOM BUFFERS). Posts
// go into the box's lanes as in any box; each message carries a 64-bit key
// that the producer computes at post time (buffer_type::key, or
// post_options::priority). The owner moves what the lanes hold into the
// box's store (in shared memory: a message there survives the owner's
// death) and hands each moved message to the lane's buffer object (in the
// owner's memory) by push(). Once a lane's buffer holds its limit (the
// lane's capacity, or its limit after Box::resize), the next message goes
// to push_drop() instead, which names the message to drop: the new one or
// one it holds. Receives deliver what pop() names. Every message a buffer
// drops is counted: `filtered` and, of it, `buffer_dropped`.
//
// The buffer object holds ids, never the messages: the store holds them.
// Its state is rebuilt from the store when an heir takes the box over (or
// after the buffer broke its contract): a new buffer (buffer_type::make)
// gets push() of every stored message of the lane, in arrival order (its
// `sequence`), redelivered ones flagged. So a buffer's state must follow
// from the messages it holds, in arrival order: what the buffer learnt from
// messages it has delivered or dropped (a dedupe buffer's memory of keys it
// has delivered, say) does not survive a change of owner. That part of
// pobox's contract (the buffer is an Erlang term that lives as long as the
// pobox process) cannot hold across processes; the messages themselves do.
//
// Transit. The lanes in front of the store take `capacity` messages too:
// when the owner does not run, producers fill them and the box's policy
// (reject, drop_newest, block) applies to further posts, counted as in any
// box. The buffer's drops apply to what the owner has moved, which it does
// at every receive.
//
// The contract, checked by the library (a buffer that breaks it gets
// errc::buffer_broken from the receive; the box loses nothing: the buffer is
// rebuilt from the store):
//   - ids named by pop/push/push_drop/drop are ids the buffer holds (or the
//     id just pushed), each named once;
//   - size() is the number of ids held;
//   - push_drop names exactly one id; drop(n) names n ids (fewer only when it
//     holds fewer).
// A buffer object is used by one thread at a time (its Owner's). Exceptions
// thrown by it are treated as a broken contract.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "shmbox/error.hpp"
#include "shmbox/export.hpp"

namespace shmbox {

// One stored message as a buffer sees it.
struct buffered {
  std::uint64_t id = 0;        // names it to the library (pop, drop, push_drop)
  std::int64_t key = 0;        // the producer's key (buffer_type::key, or post_options::priority; else 0)
  std::uint64_t sequence = 0;  // its lane's position: arrival order across every producer
  std::uint32_t lane = 0;
  bool redelivered = false;    // an owner that died may have handed it out already
  // Its bytes, in the box's store: valid while the buffer holds it (until
  // pop/drop/push_drop names it, or the Owner handle is gone).
  std::string_view payload{};
};

// What a buffer is made for.
struct buffer_context {
  std::string_view box{};   // the box's name
  std::uint32_t lane = 0;   // one buffer per lane (lanes still order first: lane 0, then 1, ...)
  std::uint32_t limit = 0;  // the lane's limit when the buffer is made (Box::resize may change it later)
};

// pobox_buf's operations over ids.
class SHMBOX_API buffer {
 public:
  virtual ~buffer() = default;
  // Takes `m` in (the buffer holds fewer than its limit). May name one
  // message to drop at once (m.id itself, or one it holds), e.g. a
  // duplicate; std::nullopt: nothing to drop.
  virtual std::optional<std::uint64_t> push(const buffered& m) = 0;
  // The buffer holds its limit (or more, after a shrink): takes `m` in and
  // names the one message to drop (m.id to refuse the new one, or one it
  // holds, which it forgets).
  virtual std::uint64_t push_drop(const buffered& m) = 0;
  // Forgets and names the next message to deliver; std::nullopt when empty.
  virtual std::optional<std::uint64_t> pop() = 0;
  // Forgets and names `n` messages to drop (Box::resize shrank the lane).
  virtual std::vector<std::uint64_t> drop(std::size_t n) = 0;
  // How many it holds.
  virtual std::size_t size() const = 0;
};

struct buffer_type {
  // Owner side: a new, empty buffer for one lane. Required.
  std::function<std::unique_ptr<buffer>(const buffer_context&)> make{};
  // Producer side: a message's key, computed at post when post_options::priority
  // is not given (Producer::set_priority_function, if set, comes first). Empty: 0.
  std::function<std::int64_t(std::string_view)> key{};
};

// Registers buffer type `name` (1-48 characters of [A-Za-z0-9._-]) in this
// process, replacing an earlier registration of the name (handles made
// before keep the type they were made with). Errors: invalid_argument (a bad
// name, no `make`).
SHMBOX_API result<void> register_buffer(std::string_view name, buffer_type type);
// Whether `name` is registered in this process.
SHMBOX_API bool buffer_registered(std::string_view name);

}  // namespace shmbox
