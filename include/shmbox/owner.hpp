// shmbox/owner.hpp - receiving from a box: one owner process at a time.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "shmbox/box.hpp"
#include "shmbox/error.hpp"

namespace shmbox {

namespace detail {
struct owner_sink;
}

enum class recv_status : std::uint8_t {
  ok,         // at least one message was received
  empty,      // nothing to receive right now (non-blocking calls)
  timeout,    // nothing arrived before the timeout
  not_owner,  // this handle no longer owns the box
  error,      // the box cannot be used (corrupt segment); see Owner::last_error()
};

std::string_view to_string(recv_status s) noexcept;

// One received message.
struct message {
  std::string data;          // the bytes, exactly as posted
  bool redelivered = false;  // a previous owner read it and died before committing
  std::uint32_t lane = 0;
};

// A reusable set of received messages. Receiving into it reuses its memory,
// so a steady stream of messages allocates nothing. Views stay valid until
// the next receive into (or clear() of) this batch.
class batch {
 public:
  std::size_t size() const noexcept { return entries_.size(); }
  bool empty() const noexcept { return entries_.empty(); }
  // The bytes of message i, exactly as posted.
  std::string_view operator[](std::size_t i) const noexcept {
    return {bytes_.data() + entries_[i].offset, entries_[i].size};
  }
  // True when a previous owner read message i and died before committing it.
  bool redelivered(std::size_t i) const noexcept { return entries_[i].redelivered; }
  std::uint32_t lane(std::size_t i) const noexcept { return entries_[i].lane; }
  // Forgets the messages, keeps the memory.
  void clear() noexcept {
    bytes_.clear();
    entries_.clear();
  }
  // Appends one message (the library uses this while receiving).
  void append(const void* data, std::size_t size, bool redelivered, std::uint32_t lane) {
    const auto* p = static_cast<const char*>(data);
    entries_.push_back({bytes_.size(), size, redelivered, lane});
    bytes_.insert(bytes_.end(), p, p + size);
  }

 private:
  struct entry {
    std::size_t offset;
    std::size_t size;
    bool redelivered;
    std::uint32_t lane;
  };
  std::vector<char> bytes_;
  std::vector<entry> entries_;
};

// The owner handle. Receiving copies a message out and commits it in one call.
class Owner {
 public:
  // Takes ownership of the box by name. Fails with errc::not_owner when another
  // live process owns it. A dead owner's box is taken over, with its messages.
  static result<Owner> acquire(std::string_view name);
  static result<Owner> acquire(const Box& box);

  Owner(Owner&&) noexcept;
  Owner& operator=(Owner&&) noexcept;
  ~Owner();  // releases ownership; the messages stay in the box

  // Takes the next message if there is one. Owner only.
  recv_status try_receive(message& out);
  // Waits up to `timeout` for a message (sleeps on a futex, no CPU while idle).
  recv_status receive(message& out, std::chrono::nanoseconds timeout);
  // Appends up to `max` messages to `out`: waits up to `timeout` for the first,
  // then takes what is there without waiting. Returns ok if any was appended.
  recv_status receive_batch(std::vector<message>& out, std::size_t max,
                            std::chrono::nanoseconds timeout);
  // The same into a reusable batch (appends; call out.clear() to reuse it).
  recv_status receive_batch(batch& out, std::size_t max, std::chrono::nanoseconds timeout);

  // The epoch this handle owns the box under.
  std::uint64_t epoch() const noexcept;
  // Why the last call returned recv_status::error.
  std::error_code last_error() const noexcept;

 private:
  struct state;
  recv_status receive_into(detail::owner_sink& sink, std::size_t max, std::chrono::nanoseconds timeout);
  explicit Owner(std::unique_ptr<state> s);
  std::unique_ptr<state> s_;
};

}  // namespace shmbox
