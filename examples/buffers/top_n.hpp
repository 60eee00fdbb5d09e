// examples/buffers/top_n.hpp - a custom buffer (shmbox/buffer.hpp) that keeps
// the N most important messages, N being the lane's limit, and delivers the
// most important first (FIFO among equals).
//
// Importance is the message's key: producers register the same type, whose
// key function reads a leading decimal number ("7:rest of the message" has
// importance 7; no number: 0), or post with post_options::priority.
// When full, a new message less important than (or as important as) the
// least important one held is dropped; a more important one takes the place
// of the least important held (of those, the newest).
//
//   shmbox_examples::register_top_n();            // in every process
//   opts.buffer = "top-n";                        // at creation
#pragma once

#include <charconv>
#include <cstdint>
#include <memory>
#include <set>
#include <string_view>
#include <tuple>

#include "shmbox/buffer.hpp"

namespace shmbox_examples {

// "42:..." -> 42; a message without a leading number -> 0.
inline std::int64_t leading_number(std::string_view s) noexcept {
  std::int64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  return ec == std::errc() && end != s.data() ? v : 0;
}

class top_n_buffer final : public shmbox::buffer {
 public:
  std::optional<std::uint64_t> push(const shmbox::buffered& m) override {
    held_.insert(item{m.key, m.sequence, m.id});
    return std::nullopt;
  }
  std::uint64_t push_drop(const shmbox::buffered& m) override {
    if (held_.empty()) return m.id;
    const auto least = std::prev(held_.end());
    if (m.key <= least->key) return m.id;  // not more important than what it holds: refused
    const std::uint64_t victim = least->id;
    held_.erase(least);
    held_.insert(item{m.key, m.sequence, m.id});
    return victim;
  }
  std::optional<std::uint64_t> pop() override {
    if (held_.empty()) return std::nullopt;
    const std::uint64_t id = held_.begin()->id;
    held_.erase(held_.begin());
    return id;
  }
  std::vector<std::uint64_t> drop(std::size_t n) override {
    std::vector<std::uint64_t> out;
    while (n-- > 0 && !held_.empty()) {
      const auto least = std::prev(held_.end());
      out.push_back(least->id);
      held_.erase(least);
    }
    return out;
  }
  std::size_t size() const override { return held_.size(); }

 private:
  struct item {
    std::int64_t key;
    std::uint64_t sequence;
    std::uint64_t id;
    // Delivery order: most important first, then oldest first.
    bool operator<(const item& o) const noexcept {
      return key != o.key ? key > o.key : sequence < o.sequence;
    }
  };
  std::set<item> held_;
};

inline shmbox::result<void> register_top_n(std::string_view name = "top-n") {
  return shmbox::register_buffer(name, {.make = [](const shmbox::buffer_context&) -> std::unique_ptr<shmbox::buffer> {
                                          return std::make_unique<top_n_buffer>();
                                        },
                                        .key = leading_number});
}

}  // namespace shmbox_examples
