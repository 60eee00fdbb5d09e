// examples/buffers/dedupe.hpp - a custom buffer (shmbox/buffer.hpp) that holds
// at most one message per key: FIFO, a message whose key is already waiting
// is dropped (the first one wins), and when full (the lane's limit) the
// oldest message is dropped to make room (a bounded queue).
//
// The key is the message's text up to its first ':' (the whole message when
// there is none), hashed (FNV-1a, 64 bits) by the producers' key function.
// Two different texts with the same hash count as duplicates: use keys whose
// hashes you trust, or post with post_options::priority as the key.
//
// What it remembers is what waits: a key delivered or dropped may come
// again. (That is also all it could remember across an owner's death: a new
// owner rebuilds the buffer from the messages still in the box.)
//
//   shmbox_examples::register_dedupe();           // in every process
//   opts.buffer = "dedupe";                       // at creation
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <string_view>
#include <unordered_map>

#include "shmbox/buffer.hpp"

namespace shmbox_examples {

inline std::int64_t dedupe_key(std::string_view s) noexcept {
  const std::string_view k = s.substr(0, s.find(':'));
  std::uint64_t h = 14695981039346656037ull;
  for (const char c : k) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  return static_cast<std::int64_t>(h);
}

class dedupe_buffer final : public shmbox::buffer {
 public:
  std::optional<std::uint64_t> push(const shmbox::buffered& m) override {
    if (by_key_.count(m.key) != 0) return m.id;  // a duplicate of one waiting
    append(m);
    return std::nullopt;
  }
  std::uint64_t push_drop(const shmbox::buffered& m) override {
    if (by_key_.count(m.key) != 0 || queue_.empty()) return m.id;
    const std::uint64_t victim = queue_.front().id;
    remove_front();
    append(m);
    return victim;
  }
  std::optional<std::uint64_t> pop() override {
    if (queue_.empty()) return std::nullopt;
    const std::uint64_t id = queue_.front().id;
    remove_front();
    return id;
  }
  std::vector<std::uint64_t> drop(std::size_t n) override {
    std::vector<std::uint64_t> out;
    while (n-- > 0 && !queue_.empty()) {
      out.push_back(queue_.front().id);
      remove_front();
    }
    return out;
  }
  std::size_t size() const override { return queue_.size(); }

 private:
  struct item {
    std::int64_t key;
    std::uint64_t id;
  };
  void append(const shmbox::buffered& m) {
    queue_.push_back(item{m.key, m.id});
    by_key_[m.key] = std::prev(queue_.end());
  }
  void remove_front() {
    by_key_.erase(queue_.front().key);
    queue_.pop_front();
  }
  std::list<item> queue_;
  std::unordered_map<std::int64_t, std::list<item>::iterator> by_key_;
};

inline shmbox::result<void> register_dedupe(std::string_view name = "dedupe") {
  return shmbox::register_buffer(name, {.make = [](const shmbox::buffer_context&) -> std::unique_ptr<shmbox::buffer> {
                                          return std::make_unique<dedupe_buffer>();
                                        },
                                        .key = dedupe_key});
}

}  // namespace shmbox_examples
