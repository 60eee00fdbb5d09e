// lib/handles/heir.cpp - the Heir handle: waiting to be given a box.
//
// An heir sleeps in epoll_wait on two descriptors:
//  * a pidfd of the process it depends on: the owner while it lives, else the
//    first live heir ahead of it (which is about to take the box over). A
//    pidfd becomes readable the moment that process dies: death is seen at
//    once, not by polling. A pidfd names a process of our own pid namespace
//    only: for one in another namespace (another container) a watcher
//    thread waits for that role's lock in the segment to be let go
//    (release_watch.hpp, liveness.hpp L5) and then writes our eventfd, so
//    such a death is seen at once too (and asked of the lock every
//    kFallbackSliceNs as a safety net; every kOtherNsSliceNs where no
//    watcher could be started);
//  * its own eventfd, which a releasing owner, a giver, or a process that
//    found the box's owner gone writes through pidfd_getfd (same user and
//    namespace).
// Where pidfd_getfd is not allowed, waiters still wake within kFallbackSliceNs
// through owner.transfer_seq. A lease deadline bounds the wait as well: an
// owner that stops renewing loses the box to the first live heir.
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/access.hpp"
#include "base/errors.hpp"
#include "ownership/handover.hpp"
#include "ownership/lease.hpp"
#include "segment/liveness.hpp"
#include "segment/release_watch.hpp"
#include "base/process.hpp"
#include "ring/ring.hpp"
#include "segment/segment.hpp"
#include "shmbox/heir.hpp"

namespace shmbox {

namespace {
constexpr std::uint64_t kFallbackSliceNs = 20'000'000;
constexpr std::uint64_t kOtherNsSliceNs = 5'000'000;  // polling a target of another pid namespace
constexpr std::uint32_t kTagEventfd = 1, kTagPidfd = 2;
}  // namespace

struct Heir::state {
  detail::made_here born;  // process.hpp H1
  std::shared_ptr<detail::mapped_box> m;
  std::uint32_t index = 0;
  std::uint64_t key = 0;
  bool listener = false;
  std::string data;
  int efd = -1;     // our eventfd
  int ep = -1;      // epoll over efd and pidfd
  int pidfd = -1;   // pidfd of `target` (same pid namespace); -1: watched (release_watch) or polled
  std::uint64_t release_watch = 0;  // the release watch on target_byte (another namespace), 0: none
  std::uint64_t target = 0;
  std::uint64_t target_byte = UINT64_MAX;
  std::uint64_t target_ns = 0;
  detail::role_lock entry_lock;  // holds our heir entry (liveness.hpp L1)
  detail::role_lock taking;      // the owner's role lock, while we take the box over

  ~state() {
    // process.hpp H3: a fork child's copy leaves the entry to its parent (its
    // entry lock is void there: liveness.hpp L6).
    if (born.here_for_sure()) detail::withdraw(*m, index, key, &entry_lock);
    detail::release_watch_remove(release_watch);  // (before efd closes: the watcher writes it no more)
    if (pidfd >= 0) ::close(pidfd);
    if (ep >= 0) ::close(ep);
    if (efd >= 0) ::close(efd);
  }

  // Watches process `k` (of pid namespace `pid_ns`), which holds role byte
  // `byte`, for its death (0: nothing).
  void watch(std::uint64_t k, std::uint64_t byte = UINT64_MAX, std::uint64_t pid_ns = 0) {
    // (The namespace word of a new owner is written just after its key: a
    // target seen in that moment is looked at again at the next slice.)
    if (k == target && byte == target_byte && pid_ns == target_ns) {
      // The same target: a release watch that has written (its byte was let
      // go for a moment, or the watcher found it free) is made again.
      if (k != 0 && pidfd < 0 && byte != UINT64_MAX && !detail::release_watch_active(release_watch))
        release_watch = detail::release_watch_add(*m, byte, efd);
      return;
    }
    detail::release_watch_remove(release_watch);
    release_watch = 0;
    if (pidfd >= 0) {
      ::epoll_ctl(ep, EPOLL_CTL_DEL, pidfd, nullptr);
      ::close(pidfd);
      pidfd = -1;
    }
    target = k;
    target_byte = byte;
    target_ns = pid_ns;
    if (k == 0) return;
    // Its pid means it here while it holds its role (a live process's pid is
    // not reused): a pidfd of it.
    if (detail::in_this_ns(pid_ns) && byte != UINT64_MAX && detail::lock_held(*m, byte)) {
      const long fd = ::syscall(SYS_pidfd_open, static_cast<pid_t>(detail::key_pid(k)), 0);
      if (fd >= 0) {
        pidfd = static_cast<int>(fd);
        epoll_event ev{};
        ev.events = EPOLLIN;
        ev.data.u32 = kTagPidfd;
        ::epoll_ctl(ep, EPOLL_CTL_ADD, pidfd, &ev);
        return;
      }
    }
    // Another pid namespace (or no pidfd): the kernel tells a watcher when
    // its lock is let go; arm() also polls it.
    if (byte != UINT64_MAX) release_watch = detail::release_watch_add(*m, byte, efd);
  }

  // Takes the box if it is ours to take now: an offer to us, or the owner is
  // gone and we are the first live heir (handover.hpp). The new epoch or 0.
  std::uint64_t try_take() { return detail::heir_take(*m, key, listener, data, taking); }

  // After a take: if it withdrew our heir entry (an heir that inherits, a
  // listener: handover.hpp O5), its byte goes too (liveness.hpp L1: after
  // the key is cleared), though this handle lives on (enlist, await_transfer,
  // then serve). Held, it would make the next heir enlisted in the entry
  // read as alive by our lock, also once dead (gencheck's heir-entry-lock;
  // enlist also takes no entry whose byte is held). An heir given the box
  // keeps its entry (give_away leaves the table as it is).
  void let_go_of_withdrawn_entry() {
    if (index >= detail::kHeirSlots) return;
    // relaxed: our own take cleared it, in this thread (withdraw, O5); and no
    // one else sets a key there while we hold the byte (enlist).
    if (m->heir(index)->key.load(std::memory_order_relaxed) == key) return;
    entry_lock.unlock(detail::heir_byte(*m, index));
    index = detail::kHeirSlots;  // nothing of ours to withdraw
  }

  // Whom to watch, and until when (CLOCK_MONOTONIC ns).
  std::uint64_t arm() {
    const detail::owner_view v = detail::view_owner(*m);
    std::uint64_t until = detail::mono_ns() + kFallbackSliceNs;
    if (!detail::owner_gone(v)) {
      watch(v.key, detail::owner_byte(*m), v.pid_ns);
      // Wake just after the owner's lease would expire (no lease: no deadline).
      const std::uint64_t lease_end = detail::lease_deadline_ns(*m);
      if (!listener && lease_end != UINT64_MAX) until = std::min(until, lease_end + 1'000'000);
    } else if (!listener) {
      const auto first = detail::first_live_heir(*m);
      // it takes the box over next; if it dies, we might be next
      if (first) watch(first->key, detail::heir_byte(*m, first->index), first->pid_ns);
      else watch(0);
    } else {
      watch(0);
    }
    // A target without a pidfd (another pid namespace) nor a release watch:
    // look again soon.
    if (target != 0 && pidfd < 0 && release_watch == 0 && !listener)
      until = std::min(until, detail::mono_ns() + kOtherNsSliceNs);
    return until;
  }

  void drain_eventfd() {
    std::uint64_t v;
    while (::read(efd, &v, sizeof v) > 0) {
    }
  }
};

Heir::Heir(std::unique_ptr<state> s) : s_(std::move(s)) {}
Heir::Heir(Heir&&) noexcept = default;
Heir& Heir::operator=(Heir&&) noexcept = default;
Heir::~Heir() = default;

result<Heir> Heir::enlist(std::string_view box, std::string_view data) {
  auto m = detail::open_segment(box, false);
  if (!m) return m.error();
  return detail::access::make_heir(std::move(*m), data, false);
}
result<Heir> Heir::listen(std::string_view box) {
  auto m = detail::open_segment(box, false);
  if (!m) return m.error();
  return detail::access::make_heir(std::move(*m), {}, true);
}
result<Heir> Heir::enlist(const Box& box, std::string_view data) { return detail::access::make_heir(detail::access::box(box), data, false); }
result<Heir> Heir::listen(const Box& box) { return detail::access::make_heir(detail::access::box(box), {}, true); }

result<Heir> detail::access::make_heir(std::shared_ptr<mapped_box> box, std::string_view data, bool listener) {
  const std::string who = "box '" + box->name + "'";
  if (box->read_only) return detail::fail(errc::permission_denied, who + " was opened read-only; open it with Box::open to be its heir");
  if (box->buffered() && !detail::find_buffer(box->buffer_name))  // it could not own the box (CUSTOM BUFFERS)
    return detail::buffer_unknown_error(*box, listener ? "Heir::listen" : "Heir::enlist");
  if (data.size() > detail::kHeirDataMax)
    return detail::fail(errc::invalid_argument, who + ": heir data of " + std::to_string(data.size()) + " bytes; at most 64");
  auto s = std::make_unique<Heir::state>();
  s->m = std::move(box);
  s->index = detail::kHeirSlots;  // nothing to withdraw until enlisted
  s->key = detail::self_key();
  s->listener = listener;
  s->data = std::string(data);
  s->efd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  s->ep = ::epoll_create1(EPOLL_CLOEXEC);
  if (s->efd < 0 || s->ep < 0) return detail::fail_errno(errno, who + ": eventfd/epoll");
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u32 = kTagEventfd;
  ::epoll_ctl(s->ep, EPOLL_CTL_ADD, s->efd, &ev);
  if (!detail::enlist(*s->m, data, listener, s->efd, s->index, s->entry_lock))
    return detail::fail(errc::heir_table_full, who + ": all " + std::to_string(detail::kHeirSlots) +
                                                   " heir entries are held by live processes");
  s->arm();
  return Heir(std::move(s));
}

result<Owner> Heir::await_transfer(std::chrono::nanoseconds timeout) {
  if (!s_) return detail::fail(errc::not_owner, "this Heir handle was moved from");
  if (!s_->born.here())  // process.hpp H3: it would take the box as its parent
    return detail::fail(errc::inherited_handle,
                        s_->born.inherited_sentence(s_->listener ? "Heir (listener)" : "Heir", "box '" + s_->m->name + "'",
                                                    "the heir entry is its parent's; enlist the child itself (Heir::enlist)"));
  const std::uint64_t deadline = timeout == std::chrono::nanoseconds::max()
                                     ? UINT64_MAX
                                     : detail::mono_ns() + static_cast<std::uint64_t>(std::max<std::int64_t>(0, timeout.count()));
  for (;;) {
    s_->drain_eventfd();
    if (const std::uint64_t epoch = s_->try_take(); epoch != 0) {
      s_->watch(0);
      s_->let_go_of_withdrawn_entry();
      return detail::access::adopt_owner(s_->m, epoch, std::move(s_->taking));
    }
    const std::uint64_t now = detail::mono_ns();
    if (now >= deadline) {
      // What fd() shows follows who is there now (an event loop calls with
      // timeout 0): a target that died and was succeeded is let go (a dead
      // process's pidfd stays readable), the successor watched.
      s_->arm();
      return detail::fail(errc::timed_out, "box '" + s_->m->name + "': not given to this process before the timeout");
    }
    const std::uint64_t until = std::min(deadline, s_->arm());
    const std::uint64_t wait_ns = until > now ? until - now : 0;
    epoll_event ev{};
    ::epoll_wait(s_->ep, &ev, 1, static_cast<int>((wait_ns + 999'999) / 1'000'000));
  }
}

int Heir::fd() const noexcept { return s_ ? s_->ep : -1; }

std::uint32_t Heir::position() const {
  if (!s_ || s_->listener) return 0;
  std::uint32_t pos = 0;
  const std::uint64_t owner = s_->m->owner()->key.load(std::memory_order_acquire);
  for (const auto& h : detail::list_heirs(*s_->m, false)) {
    if (h.key == s_->key && h.index == s_->index) return pos;
    if (h.alive && !h.listener && h.key != owner) ++pos;
  }
  return pos;
}

}  // namespace shmbox
