// lib/owner.cpp - the Owner handle: acquisition, receiving, two-phase commit,
// give-away and release. Ownership changes follow the rule in lease.hpp; the
// slot protocol is in ring.hpp; the waits are in wake.hpp.
#include "shmbox/owner.hpp"

#include <sched.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <exception>
#include <thread>

#include "access.hpp"
#include "errors.hpp"
#include "fault.hpp"
#include "futex.hpp"
#include "handover.hpp"
#include "lease.hpp"
#include "liveness.hpp"
#include "process.hpp"
#include "ring.hpp"
#include "segment.hpp"
#include "wake.hpp"

namespace shmbox {
namespace {

// The waits (the adaptive spin, the sleep on wake_seq, the busy backoff,
// kLostWakeSliceNs) are in wake.hpp.
using detail::kLostWakeSliceNs;


transfer_reason public_reason(detail::transfer_reason r) {
  switch (r) {
    case detail::transfer_reason::owner_died: return transfer_reason::owner_died;
    case detail::transfer_reason::give_away: return transfer_reason::give_away;
    case detail::transfer_reason::lease_expired: return transfer_reason::lease_expired;
    case detail::transfer_reason::none: break;
  }
  return transfer_reason::none;
}

}  // namespace

namespace detail {
struct owner_sink;
}

// Counts what it appends; the public receive forms wrap it.
struct detail::owner_sink : detail::take_sink {
  std::size_t appended = 0;

 protected:
  ~owner_sink() = default;
};

namespace {
struct vector_sink final : detail::owner_sink {
  std::vector<message>* out;
  explicit vector_sink(std::vector<message>& v) : out(&v) {}
  detail::take_verdict append(const std::byte* data, std::uint32_t size, bool redelivered, std::uint32_t lane) override {
    message& m = out->emplace_back();
    m.data.assign(reinterpret_cast<const char*>(data), size);
    m.redelivered = redelivered;
    m.lane = lane;
    ++appended;
    return detail::take_verdict::deliver;
  }
};
// One message into the caller's `message` (its string keeps its memory, so
// a loop of receives allocates nothing once it has grown).
struct message_sink final : detail::owner_sink {
  message* out;
  explicit message_sink(message& m) : out(&m) {}
  detail::take_verdict append(const std::byte* data, std::uint32_t size, bool redelivered, std::uint32_t lane) override {
    out->data.assign(reinterpret_cast<const char*>(data), size);
    out->redelivered = redelivered;
    out->lane = lane;
    ++appended;
    return detail::take_verdict::deliver;
  }
};
struct batch_sink final : detail::owner_sink {
  batch* out;
  explicit batch_sink(batch& b) : out(&b) {}
  detail::take_verdict append(const std::byte* data, std::uint32_t size, bool redelivered, std::uint32_t lane) override {
    detail::access::append(*out, data, size, redelivered, lane);
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
  detail::take_verdict append(const std::byte* data, std::uint32_t size, bool redelivered, std::uint32_t lane) override {
    if (thrown) return detail::take_verdict::skip;
    ++appended;
    try {
      fn(ctx, message_view{std::string_view(reinterpret_cast<const char*>(data), size), redelivered, lane});
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
  detail::take_verdict append(const std::byte* data, std::uint32_t size, bool redelivered, std::uint32_t lane) override {
    ++seen;
    filter_verdict v = filter_verdict::deliver;
    const std::byte* out = data;
    std::size_t n = size;
    if (filter != nullptr && *filter) {
      scratch.assign(reinterpret_cast<const char*>(data), size);
      v = (*filter)(scratch);
      out = reinterpret_cast<const std::byte*>(scratch.data());
      n = scratch.size();
    }
    if (v == filter_verdict::skip) return detail::take_verdict::skip;
    ++appended;
    if (drop_marks != nullptr) drop_marks->push_back(v == filter_verdict::drop ? 1 : 0);
    if (v == filter_verdict::drop) {
      ++drops;
      if (drop_marks != nullptr) inner->append(out, 0, redelivered, lane);  // keeps the staging aligned
      return detail::take_verdict::drop;
    }
    inner->append(out, static_cast<std::uint32_t>(n), redelivered, lane);
    return detail::take_verdict::deliver;
  }
};
}  // namespace

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
  // notify_fd: an eventfd written by a waker thread that sleeps on the
  // segment's futex (so producers of any process and user can wake it).
  int efd = -1;
  std::thread waker;
  std::atomic<bool> stop_waker{false};
  std::atomic<std::uint32_t> served_wake{0};  // wake_seq when wait() last drained the fd
  // liveness.hpp L1: the owner byte while this handle owns the box, and its
  // epoch's actor byte until the handle goes (a stale owner still finishes
  // the commits it started: a later owner's recovery must see it alive).
  mutable detail::role_lock lease;

  bool still_owner() const noexcept { return detail::still_owner(ctx, lease); }

  // Every receive form: takes up to `max` messages into `sink` (through the
  // filter, if any), waiting up to `timeout` (the adaptive wait: spin, then
  // sleep on the futex); `hold`: keep them taken until commit() (read).
  recv_status receive_into(detail::owner_sink& sink, std::size_t max, std::chrono::nanoseconds timeout, bool hold,
                           const filter_fn* filter = nullptr, std::uint64_t* filter_drops = nullptr,
                           std::optional<std::chrono::nanoseconds> spin_opt = std::nullopt);

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
    if (efd < 0) return;
    const std::uint64_t one = 1;
    [[maybe_unused]] const ssize_t n = ::write(efd, &one, sizeof one);
  }

  void drain_fd() noexcept {
    if (efd < 0) return;
    // acquire (wake_seq): pairs with the release bump of P6 (wake_owner, wake.cpp);
    // release (served_wake): pairs with the waker thread's acquire load below.
    served_wake.store(m->owner()->wake_seq.load(std::memory_order_acquire), std::memory_order_release);
    std::uint64_t v;
    [[maybe_unused]] const ssize_t n = ::read(efd, &v, sizeof v);
  }

  // Arms the owner's sleeping bit on every lane; false if any lane has
  // something (then nothing stays armed).
  bool arm_all() noexcept {
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

  ~state() {
    // release: pairs with the acquire loads of notify_fd_plus1 in wake_owner /
    // owner_eventfd (wake.cpp): producers stop writing our descriptor.
    if (efd >= 0 && still_owner()) m->owner()->notify_fd_plus1.store(0, std::memory_order_release);
    if (waker.joinable()) {
      // release: pairs with the waker thread's acquire load of stop_waker
      // (notify_fd), which the wake below makes it do at once.
      stop_waker.store(true, std::memory_order_release);
      detail::wake_owner_waiters(*m->owner());
      waker.join();
    }
    if (efd >= 0) ::close(efd);
    // Give the lease back; the messages stay (uncommitted reads are delivered
    // again to the next owner). Only if it is still ours. A registered heir
    // (pobox's monitor mode) takes it over.
    if (still_owner()) set_mode(owner_mode::passive);
    detail::release_ownership(ctx, lease);
  }
};

std::string_view to_string(recv_status s) noexcept {
  switch (s) {
    case recv_status::ok: return "ok";
    case recv_status::empty: return "empty";
    case recv_status::timeout: return "timeout";
    case recv_status::not_owner: return "not-owner";
    case recv_status::error: return "error";
  }
  return "unknown";
}

std::string_view to_string(transfer_reason r) noexcept {
  switch (r) {
    case transfer_reason::none: return "none";
    case transfer_reason::owner_died: return "owner-died";
    case transfer_reason::give_away: return "give-away";
    case transfer_reason::lease_expired: return "lease-expired";
  }
  return "unknown";
}

Owner::Owner(std::unique_ptr<state> s) : s_(std::move(s)) {}
Owner::Owner(Owner&&) noexcept = default;
Owner& Owner::operator=(Owner&&) noexcept = default;
Owner::~Owner() = default;

Owner detail::access::adopt_owner(std::shared_ptr<mapped_box> m, std::uint64_t epoch, role_lock&& lease) {
  using namespace detail;
  auto s = std::make_unique<Owner::state>();
  s->m = std::move(m);
  s->lease = std::move(lease);
  s->ctx.m = s->m.get();
  s->ctx.key = self_key();
  s->ctx.epoch = epoch;
  owner_recover(s->ctx);
  const transfer_view t = read_transfer(*s->m);
  s->transfer.box = s->m->name;
  s->transfer.to_pid = key_pid(s->ctx.key);
  s->transfer.to_pid_ns = self_pid_ns();
  if (t.epoch == epoch) {
    s->transfer.from_pid = key_pid(t.from_key);
    s->transfer.from_pid_ns = t.from_ns;
    s->transfer.reason = public_reason(t.reason);
    s->transfer.data = t.data;
    s->transfer.epoch = t.epoch;
  }
  return Owner(std::move(s));
}

result<Owner> Owner::acquire(std::string_view name) {
  auto box = Box::open(name);
  if (!box) return box.error();
  return acquire(*box);
}

result<Owner> Owner::acquire(const Box& box) {
  const auto& m = detail::access::box(box);
  if (m->read_only)
    return detail::fail(errc::permission_denied, "box '" + m->name + "' was opened read-only; open it with Box::open to own it");
  detail::role_lock lease;
  auto epoch = detail::acquire_ownership(*m, lease);
  if (!epoch) return epoch.error();
  return detail::access::adopt_owner(m, *epoch, std::move(lease));
}

std::uint64_t Owner::epoch() const noexcept { return s_ ? s_->ctx.epoch : 0; }
std::error_code Owner::last_error() const noexcept { return s_ ? s_->ctx.last_error : make_error_code(errc::not_owner); }
const transfer_record& Owner::transfer() const noexcept {
  static const transfer_record none;
  return s_ ? s_->transfer : none;
}
namespace {
// Messages the box's policies refused, dropped or evicted, all lanes.
std::uint64_t overflow_drops(const Box& box) {
  const counters c = box.read_counters();
  return c.rejected + c.timeouts + c.dropped_newest + c.dropped_oldest;
}
}  // namespace

usage_info Owner::usage() const {
  usage_info u;
  if (!s_) return u;
  const detail::mapped_box& m = *s_->m;
  for (std::uint32_t l = 0; l < m.lane_count(); ++l) {
    u.depth.push_back(detail::lane_depth_scan(m, l));
    u.capacity.push_back(m.lanes[l].capacity);
    u.depth_total += u.depth.back();
    u.capacity_total += u.capacity.back();
  }
  const std::uint64_t now = overflow_drops(detail::access::make_box(s_->m));
  const std::uint64_t base = m.owner()->drops_baseline.load(std::memory_order_relaxed);
  u.dropped_since_delivery = now >= base ? now - base : 0;
  return u;
}

void Owner::renew() noexcept {
  if (s_ && s_->still_owner()) detail::renew_lease(*s_->m);
}

void Owner::accept_give_away_requests(bool accept) noexcept {
  if (!s_ || !s_->still_owner()) return;
  detail::allow_requests(*s_->m, accept ? s_->ctx.epoch : 0);
}

recv_status Owner::try_receive(message& out) {
  if (!s_) return recv_status::not_owner;
  message_sink sink(out);
  const recv_status st = s_->receive_into(sink, 1, std::chrono::nanoseconds(0), false);
  return st == recv_status::timeout ? recv_status::empty : st;
}

recv_status Owner::receive(message& out, const receive_options& o) {
  if (!s_) return recv_status::not_owner;
  message_sink sink(out);
  return s_->receive_into(sink, 1, o.timeout, false, nullptr, nullptr, o.spin);
}

recv_status Owner::receive_batch(std::vector<message>& out, const receive_options& o) {
  if (!s_) return recv_status::not_owner;
  vector_sink sink(out);
  return s_->receive_into(sink, o.max, o.timeout, false, nullptr, nullptr, o.spin);
}

recv_status Owner::receive_batch(batch& out, const receive_options& o) {
  if (!s_) return recv_status::not_owner;
  batch_sink sink(out);
  return s_->receive_into(sink, o.max, o.timeout, false, nullptr, nullptr, o.spin);
}

recv_status Owner::read(batch& out, const receive_options& o) {
  if (!s_) return recv_status::not_owner;
  batch_sink sink(out);
  return s_->receive_into(sink, o.max, o.timeout, true, nullptr, nullptr, o.spin);
}

recv_status Owner::receive_in_place_impl(void (*fn)(void*, const message_view&), void* ctx,
                                         const receive_options& o) {
  if (!s_) return recv_status::not_owner;
  view_sink sink(fn, ctx);
  if (s_->ctx.fenced) {
    // A lease box commits before it hands anything out: one message per
    // commit, so that an exception from fn cannot hide committed messages.
    recv_status st = recv_status::empty;
    for (std::size_t n = 0; n < o.max; ++n) {
      const recv_status one =
          s_->receive_into(sink, 1, n == 0 ? o.timeout : std::chrono::nanoseconds(0), false, nullptr, nullptr, o.spin);
      if (sink.thrown) std::rethrow_exception(sink.thrown);
      if (one != recv_status::ok) return n == 0 ? one : recv_status::ok;  // a later call reports what ended it
      st = recv_status::ok;
    }
    return st;
  }
  const recv_status st = s_->receive_into(sink, o.max, o.timeout, false, nullptr, nullptr, o.spin);
  if (sink.thrown) std::rethrow_exception(sink.thrown);
  return st;
}

recv_status Owner::commit(std::size_t* lost) {
  if (lost != nullptr) *lost = 0;
  if (!s_) return recv_status::not_owner;
  if (s_->ctx.pending.empty()) return s_->still_owner() ? recv_status::ok : recv_status::not_owner;
  if (!s_->still_owner()) {
    // Our application has seen these: they stay TAKEN by our (stale) actor,
    // and the new owner adopts them as redeliveries, flagged (ring.hpp R4 and
    // the take loops). Putting them back as they were would deliver them
    // again unflagged.
    const std::size_t n = s_->ctx.pending.size();
    s_->ctx.pending.clear();
    if (lost != nullptr) *lost = n;
    s_->ctx.last_error = detail::fail(errc::not_owner, "box '" + s_->m->name + "': taken over while " +
                                                           std::to_string(n) + " read messages were uncommitted");
    return recv_status::not_owner;
  }
  const detail::commit_result r = detail::owner_commit(s_->ctx, nullptr);
  if (lost != nullptr) *lost = r.lost;
  if (r.lost == 0) return recv_status::ok;
  s_->ctx.last_error = detail::fail(errc::not_owner, "box '" + s_->m->name + "': taken over while " +
                                                         std::to_string(r.lost) +
                                                         " read messages were uncommitted; the new owner receives them");
  return recv_status::not_owner;
}

recv_status Owner::state::receive_into(detail::owner_sink& sink, std::size_t max, std::chrono::nanoseconds timeout,
                                       bool hold, const filter_fn* filter, std::uint64_t* filter_drops,
                                       std::optional<std::chrono::nanoseconds> spin_opt) {
  state* const s_ = this;  // (the body reads as the Owner methods around it)
  detail::owner_ctx& o = s_->ctx;
  detail::mapped_box& m = *s_->m;
  if (!s_->still_owner()) {
    o.last_error = detail::fail(errc::not_owner, "box '" + m.name + "': this handle lost ownership (epoch " +
                                                     std::to_string(o.epoch) + ")");
    return recv_status::not_owner;
  }
  if (max == 0) return recv_status::empty;
  if (detail::serve_request(s_->ctx, s_->lease)) return recv_status::not_owner;  // given away on request
  if (hold) SHMBOX_FAULT("owner.before_read");
  detail::renew_lease(m);
  // Lease boxes (fenced): take into a staging batch, commit, and hand out
  // only what committed: a stale owner never returns a message.
  const bool staged = o.fenced && !hold;
  batch_sink staging_sink(s_->staging);
  // With a filter, the filter sits in front: of the staging (lease boxes) or
  // of the caller's sink.
  filter_sink filtering(staged ? static_cast<detail::owner_sink&>(staging_sink) : sink, filter);
  if (staged) filtering.drop_marks = &s_->staging_drops;
  detail::owner_sink& into = filter != nullptr ? static_cast<detail::owner_sink&>(filtering)
                             : staged          ? static_cast<detail::owner_sink&>(staging_sink)
                                               : sink;
  const detail::take_mode mode = (hold || o.fenced) ? detail::take_mode::hold : detail::take_mode::commit_each;
  // The clock is read only once nothing was found: a call that finds a
  // message makes no clock call.
  detail::lazy_deadline deadline{detail::timeout_ns(timeout)};
  const std::uint64_t lease_ns = std::uint64_t{m.lease_ms()} * 1'000'000;
  unsigned busy_rounds = 0;
  // The adaptive wait: an empty owner keeps polling this long before it
  // sleeps on the futex, so that a busy producer/owner pair hands over
  // without system calls; an idle owner then sleeps and uses no CPU.
  detail::adaptive_spin spin;
  spin.spin_ns =
      spin_opt ? static_cast<std::uint64_t>(std::clamp(*spin_opt, std::chrono::nanoseconds(0), std::chrono::nanoseconds(kMaxSpin)).count())
          : m.spin_ns;
  for (;;) {
    bool busy = false, corrupt = false;
    if (staged) {
      s_->staging.clear();
      s_->staging_drops.clear();
      staging_sink.appended = 0;
      filtering.appended = 0;
    }
    // Every 64th poll also reads the tails, to notice a claimed-but-
    // unpublished slot (slow or dead writer). The count runs across calls: a
    // loop of try_receive on an empty box must not pull the producers'
    // hottest line (the tail) to the owner on every call. (Before it sleeps
    // the owner reads every tail anyway: owner_arm_sleep.)
    into.look_at_tail = (o.polls++ & 63) == 0;
    bool skipped = false;
    for (std::uint32_t l = 0; l < m.lane_count() && into.appended < max && !skipped; ++l) {
      into.max = max - into.appended;
      const detail::take_result r = detail::owner_take(o, l, into, mode);
      busy |= r.busy;
      corrupt |= r.corrupt;  // (r.unknown: an unpublished slot, not yet told apart: keep polling)
      skipped |= r.skipped;  // the filter said stop
    }
    if (filter_drops != nullptr) *filter_drops = filtering.drops;
    if (staged && into.appended > 0) {
      // A stale owner (its lease expired while it was stopped) gives back
      // what it took instead of committing it: it never returns a message.
      if (!s_->still_owner()) {
        detail::owner_give_back(o);
        o.last_error = detail::fail(errc::not_owner, "box '" + m.name + "': taken over by a new owner (lease expired)");
        return recv_status::not_owner;
      }
      std::vector<char> kept;
      const detail::commit_result r = detail::owner_commit(o, &kept);
      for (std::size_t i = 0; i < kept.size(); ++i)
        if (kept[i] != 0 && (filter == nullptr || s_->staging_drops[i] == 0)) {
          const std::string_view b = s_->staging[i];
          sink.append(reinterpret_cast<const std::byte*>(b.data()), static_cast<std::uint32_t>(b.size()),
                      s_->staging.redelivered(i), s_->staging.lane(i));
        }
      if (sink.appended > 0 || (filter != nullptr && r.committed > 0)) return recv_status::ok;
      if (r.lost > 0) {
        o.last_error = detail::fail(errc::not_owner, "box '" + m.name + "': taken over by a new owner (lease expired)");
        return recv_status::not_owner;
      }
    }
    if (!staged && into.appended > 0) return recv_status::ok;
    if (skipped || (filter != nullptr && filtering.seen > 0)) return recv_status::ok;  // the filter decided
    if (corrupt) return recv_status::error;
    if (deadline.timeout_ns == 0) return recv_status::timeout;
    const std::uint64_t now = detail::mono_ns();
    if (now >= deadline.get()) return recv_status::timeout;
    if (!s_->still_owner()) return recv_status::not_owner;
    if (detail::serve_request(s_->ctx, s_->lease)) return recv_status::not_owner;  // given away on request
    detail::renew_lease(m);
    if (busy) {
      detail::busy_backoff(busy_rounds, deadline, now);
      continue;
    }
    // One pause between polls (a poll costs more than a pause already); a
    // yield now and then, for a producer that shares our CPU.
    if (spin.spinning(now, 1)) continue;
    // Sleep (wake.cpp): read wake_seq, arm every lane (fails if anything
    // arrived), futex-wait. A producer that sees the bit bumps wake_seq (P6).
    // A lease box's owner wakes in time to renew its lease.
    std::uint64_t until = std::min(deadline.get(), now + kLostWakeSliceNs);
    if (lease_ns != 0) until = std::min(until, now + lease_ns / 2);
    // Not armed: a slot is claimed and not yet published (a slow or stopped
    // writer): back off instead of polling hot.
    if (!detail::owner_sleep(o, until)) detail::busy_backoff(busy_rounds, deadline, now);
  }
}

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
  s_->active_filter = nullptr;
  s_->set_mode(owner_mode::passive);
  s_->disarm_all();
}

void Owner::notify() {
  if (!s_ || !s_->still_owner()) return;
  s_->armed = owner_mode::notify;
  s_->set_mode(owner_mode::notify);
  // Armed: producers now wake us (futex, and the waker thread's eventfd).
  // Data already there: the notification is sent now (wait() reports it),
  // and, as in pobox, the box is passive again at once.
  s_->due = !s_->arm_all();
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
  s_->set_mode(owner_mode::active);
  s_->due = !s_->arm_all();
  if (s_->due) s_->poke_fd();
}

recv_status Owner::deliver(delivery& out, std::size_t max, const filter_fn& filter) {
  out.messages.clear();
  out.count = 0;
  out.dropped = 0;
  if (!s_) return recv_status::not_owner;
  const std::uint64_t drops_now = overflow_drops(detail::access::make_box(s_->m));
  batch_sink sink(out.messages);
  std::uint64_t filter_drops = 0;
  const recv_status st = s_->receive_into(sink, max == 0 ? 1 : max, std::chrono::nanoseconds(0), false, &filter, &filter_drops);
  if (st == recv_status::timeout || st == recv_status::empty) return recv_status::empty;  // no data: no delivery
  if (st != recv_status::ok) return st;
  // A delivery (maybe empty: all dropped, or the first message skipped).
  detail::owner_record* rec = s_->m->owner();
  const std::uint64_t base = rec->drops_baseline.load(std::memory_order_relaxed);
  out.count = out.messages.size();
  out.dropped = (drops_now >= base ? drops_now - base : 0) + filter_drops;
  rec->drops_baseline.store(drops_now, std::memory_order_relaxed);
  s_->armed = owner_mode::passive;
  s_->due = false;
  s_->set_mode(owner_mode::passive);
  return recv_status::ok;
}

owner_event Owner::wait(delivery& out, std::chrono::nanoseconds timeout) {
  if (!s_) return owner_event::not_owner;
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
  if (s_->efd >= 0) return s_->efd;
  s_->efd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (s_->efd < 0) {
    s_->ctx.last_error = detail::fail_errno(errno, "box '" + s_->m->name + "': eventfd");
    return -1;
  }
  state* st = s_.get();
  st->waker = std::thread([st] {
    detail::owner_record* rec = st->m->owner();
    std::uint64_t next_look = detail::mono_ns() + kLostWakeSliceNs * 4;
    std::uint64_t request_seen = 0;
    // The last wake_seq this thread relayed (or found already served).
    std::uint32_t relayed = detail::owner_wake_seq(*rec);
    // acquire: pairs with the release store of stop_waker in ~state.
    while (!st->stop_waker.load(std::memory_order_acquire)) {
      // A give-away request (Box::request_give_away wakes this thread) for
      // an owner that accepts them: make the fd readable once per request, so
      // that an event loop calls wait(), which serves it.
      const std::uint64_t request = detail::pending_request(*st->m);
      if (request != request_seen) {
        request_seen = request;
        if (request != 0 && detail::accepts_requests(*st->m, st->ctx.epoch)) st->poke_fd();
      }
      // Every second: armed (notify/active) with messages in the box means a
      // wake-up was lost (a producer died between publishing and waking us):
      // make the fd readable. Reads only shared words, never the owner's
      // private state; a spurious poke just makes wait() look again.
      if (const std::uint64_t now = detail::mono_ns(); now >= next_look) {
        next_look = now + kLostWakeSliceNs * 4;
        // acquire: pairs with set_mode's release store.
        const auto mode = static_cast<std::uint32_t>(detail::state_mode(rec->state.load(std::memory_order_acquire)));
        if (mode != static_cast<std::uint32_t>(owner_mode::passive) && st->still_owner()) {
          std::uint64_t depth = 0;
          for (std::uint32_t l = 0; l < st->m->lane_count() && depth == 0; ++l) depth += detail::lane_depth_scan(*st->m, l);
          if (depth != 0) st->poke_fd();
        }
      }
      // Producers write the eventfd themselves; until one says it cannot
      // (fd_fallback), this thread just sleeps.
      // acquire (here and below): pairs with wake_owner's release store of fd_fallback
      // (wake.cpp).
      if (rec->fd_fallback.load(std::memory_order_acquire) == 0) {
        detail::waiter_wait_fallback(*rec, detail::mono_ns() + 1'000'000'000);
        // Switched on by a producer that is waking the owner right now: relay
        // that wake too (it bumped wake_seq before we could watch it).
        if (rec->fd_fallback.load(std::memory_order_acquire) != 0) st->poke_fd();
        continue;
      }
      // A producer woke the owner; unless the owner already handled that wake
      // (producers write the fd themselves where they can), make the fd
      // readable. Compared with the last wake relayed, not with a value
      // loaded just before sleeping: a wake that came while this thread was
      // busy (relaying the previous one) would otherwise wait a whole slice.
      const std::uint32_t w = detail::owner_wake_seq(*rec);  // acquire: pairs with the producer's release bump (P6)
      if (w != relayed) {
        relayed = w;
        if (st->served_wake.load(std::memory_order_acquire) != w) st->poke_fd();
      }
      detail::owner_wait_wake(*rec, w, detail::mono_ns() + 1'000'000'000);
    }
  });
  // Producers that wake us write it directly (pidfd_getfd): no thread hop.
  // release: pairs with the acquire loads of notify_fd_plus1 in wake_owner /
  // owner_eventfd (wake.cpp): the eventfd exists before its number is read.
  s_->m->owner()->notify_fd_plus1.store(static_cast<std::uint32_t>(s_->efd) + 1, std::memory_order_release);
  if (s_->due) s_->poke_fd();
  return s_->efd;
}

bool Owner::give_away(std::uint32_t dest_pid, std::string_view data, std::chrono::nanoseconds timeout) {
  return s_ && detail::give_away_to_pid(s_->ctx, s_->lease, dest_pid, data, detail::timeout_ns(timeout));
}

bool Owner::give_away_to_heir(std::uint32_t entry, std::string_view data, std::chrono::nanoseconds timeout) {
  return s_ && detail::give_away_to_entry(s_->ctx, s_->lease, entry, data, detail::timeout_ns(timeout));
}

}  // namespace shmbox
