// shmbox/producer.hpp - posting into a box from any process.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

#include "shmbox/box.hpp"
#include "shmbox/error.hpp"

namespace shmbox {

// What one post did. Posts never throw.
enum class post_status : std::uint8_t {
  stored,          // the message is in the box
  stored_evicted,  // stored after evicting another message (drop_oldest) or replacing the top (lifo)
  dropped,         // drop_newest: the box was full, the message was discarded (counted)
  full,            // reject: the box was full, nothing stored (counted)
  timeout,         // block: no space before the timeout (counted); drop_oldest/lifo: stuck behind
                   // a stalled process for the whole timeout
  too_large,       // larger than the box's slot size; nothing stored (counted)
  error,           // the box cannot be used (corrupt segment); see Producer::last_error()
};

// "stored", "stored-evicted", "dropped", "full", "timeout", "too-large", "error".
std::string_view to_string(post_status s) noexcept;

// True for stored and stored_evicted.
constexpr bool is_stored(post_status s) noexcept {
  return s == post_status::stored || s == post_status::stored_evicted;
}

// A producer handle: one entry in the box's producer table, used by one thread
// at a time. Any number of processes (and threads, each with its own handle)
// may post into the same box.
class Producer {
 public:
  // Opens the box by name and takes a producer entry.
  static result<Producer> attach(std::string_view name);
  // Takes a producer entry in a box this process already has open.
  static result<Producer> attach(const Box& box);

  Producer(Producer&&) noexcept;
  Producer& operator=(Producer&&) noexcept;
  ~Producer();  // gives the entry back; the messages it posted stay in the box

  // Posts one message. A full `block` box waits up to the box's block_timeout.
  post_status post(const void* data, std::size_t size) noexcept;
  // Posts one message; `timeout` replaces the box's block_timeout for this call.
  post_status post(const void* data, std::size_t size, std::chrono::nanoseconds timeout) noexcept;
  post_status post(std::string_view msg) noexcept { return post(msg.data(), msg.size()); }
  post_status post(std::string_view msg, std::chrono::nanoseconds timeout) noexcept {
    return post(msg.data(), msg.size(), timeout);
  }
  // The same into lane `lane` (0 = control lane; see lane_options). A lane the
  // box does not have is post_status::error (last_error: invalid_argument).
  post_status post_to(std::uint32_t lane, const void* data, std::size_t size) noexcept;
  post_status post_to(std::uint32_t lane, const void* data, std::size_t size, std::chrono::nanoseconds timeout) noexcept;
  post_status post_to(std::uint32_t lane, std::string_view msg) noexcept { return post_to(lane, msg.data(), msg.size()); }
  post_status post_to(std::uint32_t lane, std::string_view msg, std::chrono::nanoseconds timeout) noexcept {
    return post_to(lane, msg.data(), msg.size(), timeout);
  }

  // The largest message this box takes, in bytes.
  std::uint32_t max_message_size() const noexcept;
  // Why the most recent post that returned post_status::error did so.
  std::error_code last_error() const noexcept;
  // The index of this handle's entry in the producer table.
  std::uint32_t entry_index() const noexcept;

 private:
  struct state;
  explicit Producer(std::unique_ptr<state> s);
  std::unique_ptr<state> s_;
};

}  // namespace shmbox
