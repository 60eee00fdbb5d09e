// lib/handles/owner_state.hpp - what the Owner handle holds (Owner::state, the pimpl
// of shmbox/owner.hpp) and the sinks its receives copy messages into. Shared
// by owner.cpp (acquire, receive, commit) and owner_modes.cpp (pobox's owner
// states, notify_fd). Not installed.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <unistd.h>

#include "base/access.hpp"
#include "ownership/handover.hpp"
#include "segment/liveness.hpp"
#include "wake/notify_hub.hpp"
#include "base/process.hpp"
#include "ring/ring.hpp"
#include "segment/segment.hpp"
#include "shmbox/owner.hpp"
#include "ring/wake.hpp"
#include "segment/envelope.hpp"

namespace shmbox {
namespace detail {

// A received message split into its body and, for a request, its reply
// address (lib/segment/envelope.hpp). `answered` only for a redelivery
// (THE ANSWERED MARK). The trailer's flags byte is read once, here.
struct request_split {
  std::uint32_t body;
  std::uint32_t trailer;
  bool answered;
};
inline request_split split_request(const std::byte* data, std::uint32_t size, bool redelivered) noexcept {
  const std::size_t body = envelope::request_body(data, size);
  if (body == size) [[likely]]
    return {size, 0, false};
  // The owner holds the slot; an earlier owner may have marked it (relaxed: read once, any value is safe).
  const std::uint8_t flags = std::to_integer<std::uint8_t>(
      std::atomic_ref<std::byte>(const_cast<std::byte&>(data[body + kRequestFlagsAt])).load(std::memory_order_relaxed));
  return {static_cast<std::uint32_t>(body), static_cast<std::uint32_t>(kRequestTrailer),
          redelivered && (flags & kAnswered) != 0};
}

// Request/reply: the owner's producers on reply boxes (lib/request/reply.cpp).
struct reply_cache;
struct reply_cache_deleter {
  void operator()(reply_cache* c) const noexcept;
};
// An owner about to sleep (receive's wait): lets go of the reply boxes of
// requesters that are gone, at most every 100 ms, so that an idle service
// does not keep them from 'shmbox gc' (reply.cpp).
void reply_cache_idle(reply_cache* c, std::uint64_t now) noexcept;

// Counts what it appends; the public receive forms wrap it.
struct owner_sink : take_sink {
  std::size_t appended = 0;

 protected:
  ~owner_sink() = default;
};

struct vector_sink final : detail::owner_sink {
  std::vector<message>* out;
  explicit vector_sink(std::vector<message>& v) : out(&v) {}
  detail::take_verdict append(const std::byte* data, std::uint32_t size, bool redelivered, std::uint32_t lane,
                                     std::uint64_t position, std::int64_t priority) override {
    message& m = out->emplace_back();
    const request_split r = split_request(data, size, redelivered);
    m.data.assign(reinterpret_cast<const char*>(data), r.body);
    m.reply_to.assign(reinterpret_cast<const char*>(data) + r.body, r.trailer);
    m.answered = r.answered;
    m.redelivered = redelivered;
    m.lane = lane;
    m.position = position;
    m.priority = priority;
    ++appended;
    return detail::take_verdict::deliver;
  }
};
// One message into the caller's `message` (its string keeps its memory, so
// a loop of receives allocates nothing once it has grown).
struct message_sink final : detail::owner_sink {
  message* out;
  explicit message_sink(message& m) : out(&m) {}
  detail::take_verdict append(const std::byte* data, std::uint32_t size, bool redelivered, std::uint32_t lane,
                                     std::uint64_t position, std::int64_t priority) override {
    const request_split r = split_request(data, size, redelivered);
    // A message as long as the last one (a loop of receives of one kind of
    // message): copied over it, without assign's re-sizing.
    std::string& d = out->data;
    // (An empty message may come with no data pointer at all: memcpy's
    // arguments must not be null even for 0 bytes; segment_fuzz found it.)
    if (d.size() == r.body) [[likely]] {
      if (r.body != 0) std::memcpy(d.data(), data, r.body);
    } else
      d.assign(reinterpret_cast<const char*>(data), r.body);
    if (r.trailer != 0 || !out->reply_to.empty()) [[unlikely]]
      out->reply_to.assign(reinterpret_cast<const char*>(data) + r.body, r.trailer);
    out->answered = r.answered;
    out->redelivered = redelivered;
    out->lane = lane;
    out->position = position;
    out->priority = priority;
    ++appended;
    return detail::take_verdict::deliver;
  }
};
struct batch_sink final : detail::owner_sink {
  batch* out;
  explicit batch_sink(batch& b) : out(&b) {}
  detail::take_verdict append(const std::byte* data, std::uint32_t size, bool redelivered, std::uint32_t lane,
                                     std::uint64_t position, std::int64_t priority) override {
    const request_split r = split_request(data, size, redelivered);
    detail::access::append(*out, data, size, redelivered, lane, position, priority, r.trailer, r.answered);
    ++appended;
    return detail::take_verdict::deliver;
  }
};
// Zero-copy: hands each message to the caller's function in place (the slot
// is TAKEN by us meanwhile, so no producer or evictor writes it), and it is
// committed when the function returns. An exception from the function ends
// the call: that message counts as delivered (the function saw it), the
// rest stay in the box, and the exception is rethrown once the take is done.
struct view_sink final : detail::owner_sink {
  void (*fn)(void*, const message_view&);
  void* ctx;
  std::exception_ptr thrown;
  view_sink(void (*f)(void*, const message_view&), void* c) : fn(f), ctx(c) {}
  detail::take_verdict append(const std::byte* data, std::uint32_t size, bool redelivered, std::uint32_t lane,
                                     std::uint64_t position, std::int64_t priority) override {
    if (thrown) return detail::take_verdict::skip;
    ++appended;
    try {
      const request_split r = split_request(data, size, redelivered);
      const auto* c = reinterpret_cast<const char*>(data);
      fn(ctx, message_view{std::string_view(c, r.body), redelivered, lane, position, priority,
                           std::string_view(c + r.body, r.trailer), r.answered});
    } catch (...) {
      thrown = std::current_exception();
    }
    return detail::take_verdict::deliver;
  }
};
// Runs the owner's filter on each message and passes what it delivers on.
struct filter_sink final : detail::owner_sink {
  detail::owner_sink* inner;
  const filter_fn* filter;
  std::uint64_t drops = 0;  // this call's filter drops
  std::size_t seen = 0;     // messages the filter looked at (skip included)
  std::vector<char>* drop_marks = nullptr;  // fenced path: one mark per non-skipped message
  std::string scratch;
  filter_sink(detail::owner_sink& in, const filter_fn* f) : inner(&in), filter(f) {}
  detail::take_verdict append(const std::byte* data, std::uint32_t size, bool redelivered, std::uint32_t lane,
                                     std::uint64_t position, std::int64_t priority) override {
    ++seen;
    filter_verdict v = filter_verdict::deliver;
    const std::byte* out = data;
    std::size_t n = size;
    if (filter != nullptr && *filter) {
      // The filter sees a request's body; its reply address follows what it leaves.
      const request_split r = split_request(data, size, false);
      scratch.assign(reinterpret_cast<const char*>(data), r.body);
      v = (*filter)(scratch);
      scratch.append(reinterpret_cast<const char*>(data) + r.body, r.trailer);
      out = reinterpret_cast<const std::byte*>(scratch.data());
      n = scratch.size();
    }
    if (v == filter_verdict::skip) return detail::take_verdict::skip;
    ++appended;
    if (drop_marks != nullptr) drop_marks->push_back(v == filter_verdict::drop ? 1 : 0);
    if (v == filter_verdict::drop) {
      ++drops;
      if (drop_marks != nullptr) inner->append(out, 0, redelivered, lane, position, priority);  // keeps the staging aligned
      return detail::take_verdict::drop;
    }
    inner->append(out, static_cast<std::uint32_t>(n), redelivered, lane, position, priority);
    return detail::take_verdict::deliver;
  }
};
// A delivery's drops that are not its filter's (pobox's Lost): messages the
// box's policies refused, dropped or evicted, and those a custom buffer
// dropped (ring.hpp CUSTOM BUFFERS), all lanes.
inline std::uint64_t overflow_drops(const Box& box) {
  const counters c = box.read_counters();
  return c.rejected + c.timeouts + c.dropped_newest + c.dropped_oldest + c.buffer_dropped;
}

}  // namespace detail

// By their short names in owner.cpp and owner_modes.cpp.
using detail::batch_sink;
using detail::filter_sink;
using detail::message_sink;
using detail::overflow_drops;
using detail::vector_sink;
using detail::view_sink;

struct Owner::state {
  std::shared_ptr<detail::mapped_box> m;
  detail::owner_ctx ctx;
  transfer_record transfer;
  batch staging;  // lease boxes: messages taken, committed before they are handed out
  std::vector<char> staging_drops;  // lease boxes with a filter: which staged messages the filter dropped
  // pobox states (the segment holds the state; these are the armed details)
  filter_fn active_filter;
  std::size_t active_max = SIZE_MAX;
  // What this handle armed and has not yet reported (wait()). The segment's
  // state may already be passive again: a notification reverts the box to
  // passive as soon as it is sent (pobox), by the producer whose post woke
  // us, or at arming time when the box already had data (then `due`).
  owner_mode armed = owner_mode::passive;
  bool due = false;  // an armed state fired at arming time (the box had data)
  // The same, for this process's notify hub (notify_hub.hpp hub_watch): what
  // this handle waits to be told, by arming; the hub's scan reads it, not
  // the owner record's state, which the waking producer sets back to passive
  // (also when its wake-up went missing). publish_watch() after every
  // change of armed or due; arm_generation steps with every arming.
  detail::hub_watch watch{0};
  std::uint32_t arm_generation = 0;
  void publish_watch() noexcept {
    const bool waits = armed != owner_mode::passive && !due;
    // release: pairs with the acquire in the hub's watch_of (notify_hub.cpp):
    // the lanes were armed (arm_all) before the hub sees the arming.
    watch.store(waits ? (arm_generation << 1) | 1u : 0u, std::memory_order_release);
  }
  // notify_fd: an eventfd that wakers write themselves where they may, and
  // this process's notify hub (notify_hub.hpp) writes for the others.
  int efd = -1;
  // Or a notify group's member (Owner::join; notify_hub.hpp NOTIFY GROUPS):
  // the group (kept alive while we are registered) and our tag in it.
  std::shared_ptr<detail::notify_group_state> group;
  std::uint64_t group_tag = 0;
  std::uint64_t hub_id = 0;  // our registration with the hub (efd or group), 0: none
  // liveness.hpp L1: the owner byte while this handle owns the box, and its
  // epoch's actor byte until the handle goes (a stale owner still finishes
  // the commits it started: a later owner's recovery must see it alive).
  mutable detail::role_lock lease;
  // Request/reply (Owner::reply): producers on reply boxes, made on first use.
  std::unique_ptr<detail::reply_cache, detail::reply_cache_deleter> replies;
  std::string reply_scratch;

  bool still_owner() const noexcept { return detail::still_owner(ctx, lease); }

  // The error of a call this handle may not make as the owner: inherited by
  // a fork child (process.hpp H3), or `lost` (the box was taken from it).
  std::error_code not_owner_error(const std::string& lost) const {
    if (!ctx.born.here())
      return detail::fail(errc::not_owner, ctx.born.inherited_sentence(
                                               "Owner", "box '" + m->name + "'",
                                               "the child does not own the box (its parent does); acquire it, or "
                                               "enlist as its heir, in the child"));
    return detail::fail(errc::not_owner, lost);
  }

  // Every receive form: takes up to `max` messages into `sink` (through the
  // filter, if any), waiting up to `timeout` (the adaptive wait: spin, then
  // sleep on the futex); `hold`: keep them taken until commit() (read).
  recv_status receive_into(detail::owner_sink& sink, std::size_t max, std::chrono::nanoseconds timeout, bool hold,
                           const filter_fn* filter = nullptr, std::uint64_t* filter_drops = nullptr,
                           std::optional<std::chrono::nanoseconds> spin_opt = std::nullopt);

  // The one-message receives (try_receive, receive, receive_in_place with
  // max 1) try this first: ring.hpp's FAST TAKE from the first lane that has
  // a message at its head, without the general path's set-up (deadline,
  // spin, staging, filter). nullopt: receive_into decides (a lease box, held
  // reads, lifo lanes, a give-away request to serve, a lost handle, anything
  // but FULL or EMPTY at a head, and every 64th empty poll, which reads the
  // tails).
  std::optional<recv_status> receive_fast(detail::owner_sink& sink) noexcept;

  void set_mode(owner_mode mode) noexcept {
    // Only the owner steps the count; a producer's revert (a CAS) may land
    // between our load and store: then the new arming simply replaces it.
    // release: pairs with the acquire loads of the state in Owner::mode() and the
    // notify_fd waker thread (a producer's revert in wake_owner is a relaxed CAS).
    detail::a32& w = m->owner()->state;
    w.store(detail::next_state(w.load(std::memory_order_relaxed), static_cast<detail::owner_state>(mode)),
            std::memory_order_release);
  }

  void poke_fd() noexcept {
    if (group != nullptr) group->fire(group_tag);
    else if (efd >= 0) detail::write_eventfd(efd);
  }

  void drain_fd() noexcept {
    if (efd < 0) return;
    std::uint64_t v;
    [[maybe_unused]] const ssize_t n = ::read(efd, &v, sizeof v);
  }

  // Arms the owner's sleeping bit on every lane; false if any lane has
  // something (then nothing stays armed).
  bool arm_all() noexcept {
    if (!ctx.stash_front.empty()) return false;  // unstashed messages wait (ring.hpp THE STASH)
    if (detail::sort_waiting(ctx)) return false;  // sorted messages wait (ring.hpp PRIORITY BOXES)
    for (std::uint32_t l = 0; l < m->lane_count(); ++l)
      if (!detail::owner_arm_sleep(ctx, l)) {
        disarm_all();
        return false;
      }
    return true;
  }
  void disarm_all() noexcept {
    for (std::uint32_t l = 0; l < m->lane_count(); ++l) detail::owner_clear_sleep(ctx, l);
  }

  // Our notify_fd, or our group membership, goes.
  void leave_notify() noexcept {
    // release: pairs with the acquire loads of notify_fd_plus1 in wake_owner /
    // owner_eventfd (wake.cpp): producers stop writing our descriptor.
    if ((efd >= 0 || group != nullptr) && still_owner()) m->owner()->notify_fd_plus1.store(0, std::memory_order_release);
    detail::hub_remove(hub_id);  // the hub never writes our eventfd, nor tells our group, again
    hub_id = 0;
    if (efd >= 0) ::close(efd);
    efd = -1;
    group.reset();
  }

  ~state() {
    // process.hpp H3: in a fork child (or a raw clone, H4) only our own copy
    // goes: the eventfd (the hub is the parent's; hub_remove would be a
    // no-op here) and the lease (void in the child: liveness.hpp L6). The
    // owner record, its notify_fd and the lease stay the parent's.
    if (!ctx.born.here_for_sure()) {
      if (efd >= 0) ::close(efd);
      return;
    }
    leave_notify();
    // Give the lease back; the messages stay (uncommitted reads are delivered
    // again to the next owner). Only if it is still ours. A registered heir
    // (pobox's monitor mode) takes it over.
    if (still_owner()) set_mode(owner_mode::passive);
    detail::release_ownership(ctx, lease);
  }
};


}  // namespace shmbox
