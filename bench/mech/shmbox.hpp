// bench/mech/shmbox.hpp - shmbox as a mechanism of the throughput and
// round-trip benchmarks. This is the ONLY file of bench/ (besides wake.cpp,
// failover.cpp, memory.cpp) that calls shmbox's API: Box::create,
// Producer::post / loan + slot_loan::commit / post_batch, and
// Owner::receive_batch / receive_in_place / try_receive / receive. The
// interface of ShmboxEnd is that of every End (bench/mech/mech.hpp).
#pragma once

#include <array>
#include <chrono>
#include <cstring>
#include <exception>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../harness.hpp"
#include "../spin_ring.hpp"  // spin_wait
#include "common.hpp"
#include "shmbox/buffer.hpp"
#include "shmbox/shmbox.hpp"

namespace shmbench {

// The custom buffer of shmbox_box::buffer boxes: FIFO over ids (the least a
// buffer can do, so that its row shows the path's cost, not the buffer's).
// Registered by every process of such a box: the parent that creates it and
// every end (ShmboxEnd), before it attaches or acquires.
inline constexpr const char* kBenchBuffer = "bench.fifo";
class BenchFifoBuffer final : public shmbox::buffer {
 public:
  std::optional<std::uint64_t> push(const shmbox::buffered& m) override {
    ids_.push_back(m.id);
    return std::nullopt;
  }
  std::uint64_t push_drop(const shmbox::buffered& m) override { return m.id; }  // refuse the new one (drop_newest)
  std::optional<std::uint64_t> pop() override {
    if (head_ == ids_.size()) return std::nullopt;
    const std::uint64_t id = ids_[head_++];
    if (head_ == ids_.size()) ids_.clear(), head_ = 0;
    return id;
  }
  std::vector<std::uint64_t> drop(std::size_t n) override {
    std::vector<std::uint64_t> out;
    while (n-- > 0 && ids_.size() > head_) out.push_back(ids_.back()), ids_.pop_back();
    return out;
  }
  std::size_t size() const override { return ids_.size() - head_; }

 private:
  std::vector<std::uint64_t> ids_;
  std::size_t head_ = 0;
};
inline void register_bench_buffer() {
  if (shmbox::buffer_registered(kBenchBuffer)) return;
  const auto r = shmbox::register_buffer(
      kBenchBuffer, {.make = [](const shmbox::buffer_context&) { return std::make_unique<BenchFifoBuffer>(); }});
  if (!r) throw bench_failure("register_buffer: " + shmbox::explain(r.error()));
}

// One box; `block`: policy block (the box's defaults otherwise: block_timeout
// 1 s, spin 50 us, 64 producers), else policy reject (round trips: one
// message in flight never fills a box).
class ShmboxQueue final : public Queue {
 public:
  ShmboxQueue(const std::string& name, std::size_t size, const QueueOpts& opts)
      : Queue(name), track_("/dev/shm/shmbox." + name), block_(opts.shmbox_block) {
    shmbox::options o;
    o.capacity = opts.capacity;
    o.slot_size = static_cast<std::uint32_t>(size);
    o.overflow = block_ ? shmbox::policy::block : shmbox::policy::reject;
    o.max_producers = opts.max_producers;
    switch (opts.box) {
      case shmbox_box::fifo: break;
      case shmbox_box::priority: o.priority = true; break;
      case shmbox_box::stash: o.stash = 64; break;
      case shmbox_box::buffer:
        register_bench_buffer();
        o.buffer = kBenchBuffer;
        break;
      case shmbox_box::resizable: o.max_capacity = 2 * opts.capacity; break;
      case shmbox_box::quota: o.quota = std::max<std::uint32_t>(1, static_cast<std::uint32_t>(opts.capacity / 4)); break;
    }
    auto box = shmbox::Box::create(name, o);
    if (!box) throw bench_failure("Box::create " + name + ": " + shmbox::explain(box.error()));
    box_.emplace(std::move(*box));
  }
  ~ShmboxQueue() override {
    box_.reset();
    (void)shmbox::Box::remove(name_);
  }
  // The box's own counters agree with the count (posts are counted exactly
  // only in a reject box: a blocking post that timed out is repeated).
  void verify(std::uint64_t total) override {
    const shmbox::counters c = box_->read_counters();
    if ((!block_ && c.posted != total) || c.stored != total || c.delivered != total || c.rejected != 0 ||
        c.abandoned != 0 || c.aborted != 0 || c.redelivered != 0)
      throw bench_failure("shmbox counters of " + name_ + " disagree: posted " + std::to_string(c.posted) +
                          ", stored " + std::to_string(c.stored) + ", delivered " + std::to_string(c.delivered) +
                          ", rejected " + std::to_string(c.rejected) + ", abandoned " + std::to_string(c.abandoned) +
                          ", aborted " + std::to_string(c.aborted) + ", redelivered " + std::to_string(c.redelivered) +
                          "; expected " + std::to_string(total));
  }

 private:
  TrackedName track_;
  bool block_;
  std::optional<shmbox::Box> box_;
};

// A child's ends: the Producer of the box it sends on, the Owner of the box
// it receives from; how it sends and receives is EndCtx::send_mode/recv_mode.
class ShmboxEnd {
 public:
  explicit ShmboxEnd(const EndCtx& c)
      : size_(c.size), batch_(c.batch), send_(c.send_mode), recv_(c.recv_mode), big_(c.size > kMaxMsgSize ? c.size : 0) {
    register_bench_buffer();  // (needed only in a shmbox_box::buffer box; cheap)
    if (!c.tx.empty()) {
      auto p = shmbox::Producer::attach(c.tx);
      if (!p) throw bench_failure("Producer::attach " + c.tx + ": " + shmbox::explain(p.error()));
      tx_.emplace(std::move(*p));
    }
    if (!c.rx.empty()) {
      auto o = shmbox::Owner::acquire(c.rx);
      if (!o) throw bench_failure("Owner::acquire " + c.rx + ": " + shmbox::explain(o.error()));
      rx_.emplace(std::move(*o));
    }
    if (recv_ == shmbox_recv::futex) wait_.spin = std::chrono::nanoseconds(0);  // adaptive: the box's spin
    m_.data.reserve(size_);
  }

  unsigned char* tx_buffer() noexcept { return big_.empty() ? buf_ : big_.data(); }

  // Sends one message of size_ bytes; a post or loan that timed out on a
  // full (block) box is repeated. Returns the repetitions.
  std::uint64_t send(const unsigned char* m) {
    for (std::uint64_t retries = 0;; ++retries) {
      if (send_ == shmbox_send::post) {
        const shmbox::post_status st = tx_->post(m, size_);  // block: waits (spin, then futex) while full
        if (shmbox::is_stored(st)) return retries;
        if (st != shmbox::post_status::timeout) post_failed("post", st);
        continue;
      }
      shmbox::slot_loan l = tx_->loan();  // block: waits while full, up to the box's block_timeout
      if (!shmbox::is_stored(l.status())) {
        if (l.status() != shmbox::post_status::timeout) post_failed("loan", l.status());
        continue;
      }
      if (!l || l.data() == nullptr || l.capacity() < size_)
        throw bench_failure("loan: a stored loan without a slot of " + std::to_string(size_) + " bytes");
      std::memcpy(l.data(), m, size_);  // the message, written into the slot
      const shmbox::post_status st = l.commit(size_);
      if (!shmbox::is_stored(st)) post_failed("slot_loan::commit", st);
      return retries;
    }
  }

  // post_batch of `msgs`; what a full box did not take (timeout) is posted
  // again, in order. Returns the messages posted again.
  std::uint64_t send_batch(std::span<const std::string_view> msgs) {
    std::uint64_t retries = 0;
    status_.resize(msgs.size());
    for (std::size_t first = 0; first < msgs.size();) {
      const std::span<const std::string_view> part = msgs.subspan(first);
      const std::size_t stored = tx_->post_batch(part, {.timeout = std::chrono::seconds(1)}, status_.data());
      std::size_t prefix = 0;  // the stored ones must be a prefix, or FIFO order is broken
      while (prefix < part.size() && shmbox::is_stored(status_[prefix])) ++prefix;
      for (std::size_t k = prefix; k < part.size(); ++k) {
        if (shmbox::is_stored(status_[k]))
          throw bench_failure("post_batch stored message " + std::to_string(k) + " of " + std::to_string(part.size()) +
                              " after not storing message " + std::to_string(prefix) + " (" +
                              std::string(shmbox::to_string(status_[prefix])) + "): a re-post would break FIFO order");
        if (status_[k] != shmbox::post_status::timeout) post_failed("post_batch", status_[k]);
      }
      if (stored != prefix)
        throw bench_failure("post_batch returned " + std::to_string(stored) + " but its statuses say " +
                            std::to_string(prefix) + " were stored");
      retries += part.size() - prefix;
      first += prefix;
    }
    return retries;
  }

  // Waits for one or more messages (up to batch_) and calls fn(data, size)
  // for each; fn may throw (also inside receive_in_place: the exception is
  // kept and thrown after the call). A receive timeout only repeats: a hang
  // is caught by the parent's watchdog.
  template <class F>
  void recv(F&& fn) {
    using namespace std::chrono_literals;
    shmbox::recv_status st{};
    std::uint32_t spins = 0;
    switch (recv_) {
      case shmbox_recv::batch:
        do {
          batch_msgs_.clear();  // keeps its memory: a steady stream allocates nothing
          st = rx_->receive_batch(batch_msgs_, {.max = batch_, .timeout = 1s});
          if (st != shmbox::recv_status::ok && st != shmbox::recv_status::timeout && st != shmbox::recv_status::empty)
            recv_failed("receive_batch", st);
          for (std::size_t i = 0; i < batch_msgs_.size(); ++i) {
            if (batch_msgs_.redelivered(i)) throw bench_failure("a message was flagged redelivered");
            fn(reinterpret_cast<const unsigned char*>(batch_msgs_[i].data()), batch_msgs_[i].size());
          }
        } while (batch_msgs_.empty());
        return;
      case shmbox_recv::in_place:
      case shmbox_recv::poll_in_place: {
        const bool poll = recv_ == shmbox_recv::poll_in_place;
        std::size_t seen = 0;
        std::string failure;  // the callback must not throw into the library: it records, we throw after
        auto cb = [&](const shmbox::message_view& v) {
          ++seen;
          if (!failure.empty()) return;
          try {
            if (v.redelivered) throw bench_failure("a message was flagged redelivered");
            fn(reinterpret_cast<const unsigned char*>(v.data.data()), v.data.size());
          } catch (const std::exception& e) {
            failure = e.what();
          }
        };
        for (;;) {
          st = rx_->receive_in_place(cb, {.max = batch_, .timeout = poll ? 0ns : 1s});
          if (!failure.empty()) throw bench_failure(failure);
          if (st != shmbox::recv_status::ok && st != shmbox::recv_status::timeout && st != shmbox::recv_status::empty)
            recv_failed("receive_in_place", st);
          if ((st == shmbox::recv_status::ok) != (seen > 0))
            throw bench_failure("receive_in_place returned " + std::string(shmbox::to_string(st)) + " after " +
                                std::to_string(seen) + " messages");
          if (seen > 0) return;
          if (poll) spin_wait(spins);
        }
      }
      case shmbox_recv::poll:
        while ((st = rx_->try_receive(m_)) == shmbox::recv_status::empty) spin_wait(spins);
        break;
      case shmbox_recv::adaptive:
      case shmbox_recv::futex:
        while ((st = rx_->receive(m_, wait_)) == shmbox::recv_status::timeout) {
        }
        break;
    }
    if (st != shmbox::recv_status::ok) recv_failed("receive", st);
    if (m_.redelivered) throw bench_failure("a message was flagged redelivered");
    fn(reinterpret_cast<const unsigned char*>(m_.data.data()), m_.data.size());
  }

  // Nothing more is in the box (never waits).
  bool idle() {
    const shmbox::recv_status st = rx_->try_receive(m_);
    if (st != shmbox::recv_status::ok && st != shmbox::recv_status::empty) recv_failed("try_receive", st);
    return st == shmbox::recv_status::empty;
  }

 private:
  [[noreturn]] void post_failed(const char* what, shmbox::post_status st) const {
    throw bench_failure(std::string(what) + " returned " + std::string(shmbox::to_string(st)) + ": " +
                        shmbox::explain(tx_->last_error()));
  }
  [[noreturn]] void recv_failed(const char* what, shmbox::recv_status st) const {
    throw bench_failure(std::string(what) + " returned " + std::string(shmbox::to_string(st)) + ": " +
                        shmbox::explain(rx_->last_error()));
  }

  std::size_t size_, batch_;
  shmbox_send send_;
  shmbox_recv recv_;
  std::optional<shmbox::Producer> tx_;
  std::optional<shmbox::Owner> rx_;
  shmbox::batch batch_msgs_;  // reusable
  shmbox::message m_;         // reused: its string keeps its memory
  shmbox::receive_options wait_{.timeout = std::chrono::seconds(1)};  // the sleeping receive's options
  std::vector<shmbox::post_status> status_;
  alignas(64) unsigned char buf_[kMaxMsgSize];
  std::vector<unsigned char> big_;  // messages larger than kMaxMsgSize (run.sh --curves) are built here
};

}  // namespace shmbench
