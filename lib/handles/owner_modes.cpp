// lib/handles/owner_modes.cpp - pobox's owner states (passive, notify, active; wait
// and deliver) and notify_fd, the eventfd an event loop polls (written by
// wakers themselves, or by this process's notify hub: notify_hub.hpp).
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>

#include "base/errors.hpp"
#include "ownership/handover.hpp"
#include "ownership/lease.hpp"
#include "wake/notify_hub.hpp"
#include "handles/owner_state.hpp"
#include "base/process.hpp"
#include "ring/ring.hpp"
#include "ring/wake.hpp"

namespace shmbox {

using detail::kLostWakeSliceNs;


std::string_view to_string(owner_mode m) noexcept {
  switch (m) {
    case owner_mode::passive: return "passive";
    case owner_mode::notify: return "notify";
    case owner_mode::active: return "active";
  }
  return "unknown";
}

owner_mode Owner::mode() const noexcept {
  if (!s_) return owner_mode::passive;
  // acquire: pairs with set_mode's release store (a producer's revert is relaxed).
  const auto v = static_cast<std::uint32_t>(detail::state_mode(s_->m->owner()->state.load(std::memory_order_acquire)));
  return v <= static_cast<std::uint32_t>(owner_mode::active) ? static_cast<owner_mode>(v) : owner_mode::passive;
}

void Owner::passive() {
  if (!s_ || !s_->still_owner()) return;
  s_->due = false;
  s_->armed = owner_mode::passive;
  s_->publish_watch();
  s_->active_filter = nullptr;
  s_->set_mode(owner_mode::passive);
  s_->disarm_all();
}

void Owner::notify() {
  if (!s_ || !s_->still_owner()) return;
  s_->armed = owner_mode::notify;
  ++s_->arm_generation;
  s_->set_mode(owner_mode::notify);
  // Armed: producers now wake us (futex, and notify_fd: notify_hub.hpp).
  // Data already there: the notification is sent now (wait() reports it),
  // and, as in pobox, the box is passive again at once.
  s_->due = !s_->arm_all();
  s_->publish_watch();
  if (s_->due) {
    s_->set_mode(owner_mode::passive);
    s_->poke_fd();
  }
}

void Owner::active(filter_fn filter, std::size_t max) {
  if (!s_ || !s_->still_owner()) return;
  s_->active_filter = std::move(filter);
  s_->active_max = max;
  s_->armed = owner_mode::active;
  ++s_->arm_generation;
  s_->set_mode(owner_mode::active);
  s_->due = !s_->arm_all();
  s_->publish_watch();
  if (s_->due) s_->poke_fd();
}

recv_status Owner::deliver(delivery& out, std::size_t max, const filter_fn& filter) {
  out.messages.clear();
  out.count = 0;
  out.dropped = 0;
  if (!s_) return recv_status::not_owner;
  batch_sink sink(out.messages);
  std::uint64_t filter_drops = 0;
  const recv_status st = s_->receive_into(sink, max == 0 ? 1 : max, std::chrono::nanoseconds(0), false, &filter, &filter_drops);
  if (st == recv_status::timeout || st == recv_status::empty) return recv_status::empty;  // no data: no delivery
  if (st != recv_status::ok) return st;
  // A delivery (maybe empty: all dropped, or the first message skipped).
  // Read after the receive: a custom buffer drops while the receive moves
  // messages into it, and those drops belong to this delivery.
  const std::uint64_t drops_now = overflow_drops(detail::access::make_box(s_->m));
  detail::owner_record* rec = s_->m->owner();
  const std::uint64_t base = rec->drops_baseline.load(std::memory_order_relaxed);
  out.count = out.messages.size();
  out.dropped = (drops_now >= base ? drops_now - base : 0) + filter_drops;
  rec->drops_baseline.store(drops_now, std::memory_order_relaxed);
  s_->armed = owner_mode::passive;
  s_->due = false;
  s_->publish_watch();
  s_->set_mode(owner_mode::passive);
  return recv_status::ok;
}

owner_event Owner::wait(delivery& out, std::chrono::nanoseconds timeout) {
  if (!s_) return owner_event::not_owner;
  if (!s_->ctx.born.here()) {  // process.hpp H3: armed states and requests are the parent's
    s_->ctx.last_error = s_->not_owner_error("");
    return owner_event::not_owner;
  }
  detail::owner_record* rec = s_->m->owner();
  detail::lazy_deadline deadline{detail::timeout_ns(timeout)};
  for (;;) {
    // Read before looking for a request: Box::request_give_away stores the
    // request, then bumps wake_seq (release) and wakes the futex; reading it
    // first means a request we do not see below changes it, and the futex
    // wait returns at once. acquire (owner_wake_seq): pairs with that bump
    // (and P6's).
    const std::uint32_t w = detail::owner_wake_seq(*rec);
    if (!s_->still_owner()) return owner_event::not_owner;
    if (detail::serve_request(s_->ctx, s_->lease)) return owner_event::not_owner;  // given away on request
    s_->drain_fd();
    const owner_mode mode = s_->armed;
    if (mode == owner_mode::passive && !s_->due) {
      // Nothing armed: nothing can fire, but the owner sleeps here until the
      // timeout all the same, serving give-away requests as it does when
      // armed (they wake this futex), and returns not_owner once the box is
      // gone. Posts do not wake it: no lane is armed.
      if (deadline.timeout_ns == 0) return owner_event::none;
      const std::uint64_t now = detail::mono_ns();
      if (now >= deadline.get()) return owner_event::none;
      // In slices, like the armed wait below: a box taken away meanwhile
      // (lease expired) is noticed within one.
      detail::owner_wait_wake(*rec, w, std::min(deadline.get(), now + kLostWakeSliceNs));
      continue;
    }
    const bool data = s_->due || !s_->arm_all();
    if (data) {
      s_->due = false;
      if (mode == owner_mode::notify) {
        s_->armed = owner_mode::passive;
        s_->publish_watch();
        s_->set_mode(owner_mode::passive);
        s_->disarm_all();
        return owner_event::notified;
      }
      const recv_status st = deliver(out, s_->active_max, s_->active_filter);
      if (st == recv_status::ok) {
        s_->disarm_all();
        s_->active_filter = nullptr;
        return owner_event::delivered;
      }
      s_->publish_watch();  // (armed still: active, no longer due)
      if (st == recv_status::not_owner) return owner_event::not_owner;
      if (st == recv_status::error) return owner_event::error;
      // Claimed but not yet published: look again shortly.
      s_->set_mode(owner_mode::active);
      const std::uint64_t now = detail::mono_ns();
      if (deadline.timeout_ns == 0 || now >= deadline.get()) return owner_event::none;
      ::sched_yield();
      continue;
    }
    // Armed, nothing there yet: the segment shows what we wait for (a
    // producer's wake-up, which is the notification, may have set it back to
    // passive while we were receiving instead of waiting).
    if (this->mode() != mode) s_->set_mode(mode);
    if (deadline.timeout_ns == 0) return owner_event::none;
    const std::uint64_t now = detail::mono_ns();
    if (now >= deadline.get()) {
      return owner_event::none;  // still armed: a later wait, or the fd, picks it up
    }
    detail::owner_wait_wake(*rec, w, std::min(deadline.get(), now + kLostWakeSliceNs));
  }
}

int Owner::notify_fd() {
  if (!s_) return -1;
  if (!s_->ctx.born.here()) {  // process.hpp H3: the owner record's notify_fd stays the parent's
    s_->ctx.last_error = s_->not_owner_error("");
    return -1;
  }
  if (s_->efd >= 0) return s_->efd;
  if (s_->group != nullptr) {
    s_->ctx.last_error = detail::fail(errc::invalid_argument, "box '" + s_->m->name +
                                                                  "': this Owner is in a NotifyGroup: wait on the "
                                                                  "group's fd (or leave_group() first)");
    return -1;
  }
  s_->efd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (s_->efd < 0) {
    s_->ctx.last_error = detail::fail_errno(errno, "box '" + s_->m->name + "': eventfd");
    return -1;
  }
  // The hub writes it for wakers that cannot (another user or pid
  // namespace: the doorbell), and for what nobody woke us for (its scan).
  s_->hub_id = detail::hub_add(*s_->m, s_->efd, s_->ctx.key, s_->ctx.epoch, &s_->watch);
  if (s_->hub_id == 0) {
    s_->ctx.last_error = detail::fail(errc::system_error, "box '" + s_->m->name + "': cannot start the notify hub thread");
    ::close(s_->efd);
    s_->efd = -1;
    return -1;
  }
  // Producers that wake us write it directly (pidfd_getfd): no thread hop.
  // release: pairs with the acquire loads of notify_fd_plus1 in wake_owner /
  // owner_eventfd (wake.cpp): the eventfd exists before its number is read.
  // relaxed: published by the release store below
  s_->m->owner()->seg_fd_plus1.store(s_->m->fd >= 0 ? static_cast<std::uint32_t>(s_->m->fd) + 1 : 0, std::memory_order_relaxed);
  s_->m->owner()->notify_fd_plus1.store(static_cast<std::uint32_t>(s_->efd) + 1, std::memory_order_release);
  if (s_->due) s_->poke_fd();
  return s_->efd;
}

// ---------------------------------------------------------------------------
// Notify groups (notify_hub.hpp NOTIFY GROUPS)
// ---------------------------------------------------------------------------

result<void> Owner::join(NotifyGroup& group, std::uint64_t tag) {
  if (!s_) return detail::fail(errc::not_owner, "this Owner handle is empty (moved from)");
  if (!s_->ctx.born.here()) return s_->not_owner_error("");  // process.hpp H3
  if (!s_->still_owner()) return s_->not_owner_error("box '" + s_->m->name + "' was taken from this handle");
  if (!group.s_) return detail::fail(errc::invalid_argument, "NotifyGroup is empty (moved from): make one with NotifyGroup::create()");
  if (s_->efd >= 0)
    return detail::fail(errc::invalid_argument, "box '" + s_->m->name +
                                                    "': this Owner has a notify_fd already; an Owner is woken through "
                                                    "its notify_fd or through a group, not both");
  leave_group();
  s_->hub_id = detail::hub_add(*s_->m, -1, s_->ctx.key, s_->ctx.epoch, &s_->watch, group.s_.get(), tag);
  if (s_->hub_id == 0)
    return detail::fail(errc::system_error, "box '" + s_->m->name + "': cannot start the notify hub thread");
  s_->group = group.s_;
  s_->group_tag = tag;
  // Wakers ring the doorbell, which names the box (notify_hub.hpp). release:
  // pairs with the acquire loads of notify_fd_plus1 in wake_owner (wake.cpp).
  s_->m->owner()->notify_fd_plus1.store(detail::kNotifyByBell, std::memory_order_release);
  if (s_->due) s_->poke_fd();
  return {};
}

void Owner::leave_group() noexcept {
  if (!s_ || s_->group == nullptr) return;
  if (!s_->ctx.born.here_for_sure()) {  // process.hpp H3: the parent's membership
    s_->group.reset();
    return;
  }
  s_->leave_notify();
}

result<NotifyGroup> NotifyGroup::create() {
  NotifyGroup g;
  try {
    g.s_ = std::make_shared<detail::notify_group_state>();
  } catch (const std::bad_alloc&) {
    return detail::fail(errc::system_error, "NotifyGroup: out of memory");
  }
  g.s_->efd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (g.s_->efd < 0) return detail::fail_errno(errno, "NotifyGroup: eventfd");
  return g;
}

NotifyGroup::NotifyGroup(NotifyGroup&&) noexcept = default;
NotifyGroup& NotifyGroup::operator=(NotifyGroup&&) noexcept = default;
NotifyGroup::~NotifyGroup() = default;

int NotifyGroup::fd() const noexcept { return s_ ? s_->efd : -1; }

std::size_t NotifyGroup::ready(std::vector<std::uint64_t>& tags) { return s_ ? s_->take(tags) : 0; }

}  // namespace shmbox
