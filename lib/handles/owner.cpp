// lib/handles/owner.cpp - the Owner handle: acquisition, receiving, two-phase commit,
// give-away and release. Ownership changes follow handover.hpp; the slot
// protocol is in ring.hpp; the waits are in wake.hpp; pobox's owner states
// and notify_fd are in owner_modes.cpp.
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

#include "base/access.hpp"
#include "base/errors.hpp"
#include "base/fault.hpp"
#include "base/futex.hpp"
#include "ownership/handover.hpp"
#include "ownership/lease.hpp"
#include "segment/liveness.hpp"
#include "base/process.hpp"
#include "ring/ring.hpp"
#include "segment/segment.hpp"
#include "handles/owner_state.hpp"
#include "ring/wake.hpp"

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

// Whether this poll also reads the tails: on every 64th poll (the count runs
// across calls) that comes kTailLookNs or more after the last such look
// (ring.hpp kTailLookNs: a loop of try_receive on an empty box must not pull
// the producers' hottest line to the owner on every call, nor every few).
bool tail_look_due(detail::owner_ctx& o) noexcept {
  if ((o.polls++ & 63) != 0) return false;
  const std::uint64_t now = detail::mono_ns();
  if (now - o.tail_look_ns < detail::kTailLookNs) return false;
  o.tail_look_ns = now;
  return true;
}

}  // namespace

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
  if (s->m->buffered()) s->ctx.buf_type = find_buffer(s->m->buffer_name);  // CUSTOM BUFFERS (checked before the lease)
  owner_recover(s->ctx);
  s->ctx.light_fence = owner_light_fence();
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
  if (m->buffered() && !detail::find_buffer(m->buffer_name)) return detail::buffer_unknown_error(*m, "Owner::acquire");
  detail::role_lock lease;
  auto epoch = detail::acquire_ownership(*m, lease);
  if (!epoch) return epoch.error();
  return detail::access::adopt_owner(m, *epoch, std::move(lease));
}

std::uint64_t Owner::epoch() const noexcept { return s_ ? s_->ctx.epoch : 0; }

message_id Owner::id_of(std::uint32_t lane, std::uint64_t position) const noexcept {
  return message_id{s_ ? s_->m->incarnation() : 0, lane, position};
}
std::error_code Owner::last_error() const noexcept { return s_ ? s_->ctx.last_error : make_error_code(errc::not_owner); }
const transfer_record& Owner::transfer() const noexcept {
  static const transfer_record none;
  return s_ ? s_->transfer : none;
}

usage_info Owner::usage() const {
  usage_info u;
  if (!s_) return u;
  const detail::mapped_box& m = *s_->m;
  for (std::uint32_t l = 0; l < m.lane_count(); ++l) {
    u.depth.push_back(detail::lane_depth_scan(m, l));
    u.capacity.push_back(m.lanes[l].limit());
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

std::optional<recv_status> Owner::state::receive_fast(detail::owner_sink& sink) noexcept {
  detail::owner_ctx& o = ctx;
  // born.here(): a handle inherited by a fork child compares its parent's key
  // equal below; the general path refuses it (process.hpp H2, H3).
  if (o.fenced || !o.pending.empty() || !o.stash_front.empty() || m->priority() || !o.born.here()) return std::nullopt;
  const detail::owner_record* rec = m->owner();
  // still_owner() and serve_request()'s first test, as loads only: anything
  // else (lost, or asked to give away) is the general path's to report.
  // acquire: pairs with O2/O3 of whoever took the box from us (as still_owner).
  if (rec->key.load(std::memory_order_acquire) != o.key || rec->epoch.load(std::memory_order_acquire) != o.epoch ||
      rec->requests_allowed.load(std::memory_order_relaxed) == o.epoch)  // relaxed: only we write it (serve_request)
    return std::nullopt;
  sink.max = 1;
  sink.look_at_tail = false;
  for (std::uint32_t l = 0; l < m->lane_count(); ++l) {
    switch (detail::owner_take_fast(o, m->lanes[l], sink)) {
      case detail::fast_take::taken: return recv_status::ok;
      case detail::fast_take::empty: continue;
      case detail::fast_take::general: return std::nullopt;
    }
  }
  // Nothing at any head. The general path reads the tails now and then
  // (tail_look_due), to notice a claimed slot that is not published.
  if ((o.polls & 63) == 0 && detail::mono_ns() - o.tail_look_ns >= detail::kTailLookNs) return std::nullopt;
  ++o.polls;
  return recv_status::empty;
}

recv_status Owner::try_receive(message& out) {
  if (!s_) return recv_status::not_owner;
  message_sink sink(out);
  if (const auto fast = s_->receive_fast(sink)) return *fast;
  const recv_status st = s_->receive_into(sink, 1, std::chrono::nanoseconds(0), false);
  return st == recv_status::timeout ? recv_status::empty : st;
}

recv_status Owner::receive(message& out, const receive_options& o) {
  if (!s_) return recv_status::not_owner;
  message_sink sink(out);
  if (const auto fast = s_->receive_fast(sink)) {
    if (*fast == recv_status::ok) return *fast;
    if (o.timeout.count() == 0) return recv_status::timeout;  // as receive_into's poll says it
  }
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
  if (o.max == 1) {
    const auto fast = s_->receive_fast(sink);
    if (sink.thrown) std::rethrow_exception(sink.thrown);
    if (fast && *fast == recv_status::ok) return *fast;
    if (fast && o.timeout.count() == 0) return recv_status::timeout;  // as receive_into's poll says it
  }
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
  if (!s_->ctx.born.here()) {  // process.hpp H3: the reads are the parent's to commit
    s_->ctx.last_error = s_->not_owner_error("");
    return recv_status::not_owner;
  }
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
  detail::owner_ctx& o = ctx;
  detail::mapped_box& box = *this->m;
  if (!still_owner()) {
    o.last_error = not_owner_error("box '" + box.name + "': this handle lost ownership (epoch " + std::to_string(o.epoch) + ")");
    return recv_status::not_owner;
  }
  if (max == 0) return recv_status::empty;
  if (detail::serve_request(ctx, lease)) return recv_status::not_owner;  // given away on request
  if (hold) SHMBOX_FAULT("owner.before_read");
  detail::renew_lease(box);
  // Lease boxes (fenced): take into a staging batch, commit, and hand out
  // only what committed: a stale owner never returns a message.
  const bool staged = o.fenced && !hold;
  batch_sink staging_sink(staging);
  // With a filter, the filter sits in front: of the staging (lease boxes) or
  // of the caller's sink.
  filter_sink filtering(staged ? static_cast<detail::owner_sink&>(staging_sink) : sink, filter);
  if (staged) filtering.drop_marks = &staging_drops;
  detail::owner_sink& into = filter != nullptr ? static_cast<detail::owner_sink&>(filtering)
                             : staged          ? static_cast<detail::owner_sink&>(staging_sink)
                                               : sink;
  const detail::take_mode mode = (hold || o.fenced) ? detail::take_mode::hold : detail::take_mode::commit_each;
  // The clock is read only once nothing was found: a call that finds a
  // message makes no clock call.
  detail::lazy_deadline deadline{detail::timeout_ns(timeout)};
  const std::uint64_t lease_ns = std::uint64_t{box.lease_ms()} * 1'000'000;
  unsigned busy_rounds = 0;
  // The adaptive wait: an empty owner keeps polling this long before it
  // sleeps on the futex, so that a busy producer/owner pair hands over
  // without system calls; an idle owner then sleeps and uses no CPU.
  detail::adaptive_spin spin;
  spin.spin_ns =
      spin_opt ? static_cast<std::uint64_t>(std::clamp(*spin_opt, std::chrono::nanoseconds(0), std::chrono::nanoseconds(kMaxSpin)).count())
          : box.spin_ns;
  for (;;) {
    bool busy = false, corrupt = false;
    // Held before this poll: earlier reads (Owner::read) not yet committed.
    // A lease box's receive commits (or gives back) only what it takes
    // itself, o.pending[held_before..], one for one with `staging`; the
    // reads stay held for commit(), as in any box.
    const std::size_t held_before = o.pending.size();
    if (staged) {
      staging.clear();
      staging_drops.clear();
      staging_sink.appended = 0;
      filtering.appended = 0;
    }
    // Now and then a poll also reads the tails, to notice a claimed-but-
    // unpublished slot (slow or dead writer): tail_look_due. (Before it
    // sleeps the owner reads every tail anyway: owner_arm_sleep.)
    into.look_at_tail = tail_look_due(o);
    bool skipped = false;
    if (!o.stash_front.empty()) {  // THE STASH: unstashed messages come first (ring.hpp)
      into.max = max - into.appended;
      const detail::take_result r = detail::stash_take(o, into, mode);
      corrupt |= r.corrupt;
      skipped |= r.skipped;
    }
    if (box.priority() && !skipped && into.appended < max) {  // PRIORITY BOXES (ring.hpp): the owner's order
      // THE IN-ORDER RUN first: what the store would hand out next anyway,
      // straight from the rings; the store sorts the rest.
      std::uint32_t sorted_from = 0;
      into.max = max - into.appended;
      const detail::take_result f = detail::sort_direct(o, into, mode, sorted_from);
      busy |= f.busy;
      corrupt |= f.corrupt;
      skipped |= f.skipped;
      // (an empty box: the sort looks at the tails every 64th poll, as fifo_take would)
      if ((sorted_from < box.lane_count() || (f.taken == 0 && into.look_at_tail)) && !skipped && into.appended < max) {
        const detail::take_result d = detail::sort_drain(o, into.look_at_tail);
        busy |= d.busy;
        corrupt |= d.corrupt;
        into.max = max - into.appended;
        const detail::take_result r = detail::sort_take(o, into, mode);
        corrupt |= r.corrupt;
        skipped |= r.skipped;
      }
    }
    for (std::uint32_t l = 0; l < box.lane_count() && into.appended < max && !skipped && !box.priority(); ++l) {
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
      if (!still_owner()) {
        detail::owner_give_back(o, held_before);
        o.last_error = detail::fail(errc::not_owner, "box '" + box.name + "': taken over by a new owner (lease expired)");
        return recv_status::not_owner;
      }
      std::vector<char> kept;
      const detail::commit_result r = detail::owner_commit(o, &kept, held_before);
      for (std::size_t i = 0; i < kept.size() && i < staging.size(); ++i)
        if (kept[i] != 0 && (filter == nullptr || staging_drops[i] == 0)) {
          const std::string_view b = staging[i];  // the body; a request's reply address follows it
          sink.append(reinterpret_cast<const std::byte*>(b.data()),
                      static_cast<std::uint32_t>(b.size() + staging.reply_to(i).size()),
                      staging.redelivered(i), staging.lane(i), staging.position(i), staging.priority(i));
        }
      if (sink.appended > 0 || (filter != nullptr && r.committed > 0)) return recv_status::ok;
      if (r.lost > 0) {
        o.last_error = detail::fail(errc::not_owner, "box '" + box.name + "': taken over by a new owner (lease expired)");
        return recv_status::not_owner;
      }
    }
    if (!staged && into.appended > 0) return recv_status::ok;
    if (skipped || (filter != nullptr && filtering.seen > 0)) return recv_status::ok;  // the filter decided
    if (corrupt) return recv_status::error;
    if (deadline.timeout_ns == 0) return recv_status::timeout;
    const std::uint64_t now = detail::mono_ns();
    if (now >= deadline.get()) return recv_status::timeout;
    if (!still_owner()) return recv_status::not_owner;
    if (detail::serve_request(ctx, lease)) return recv_status::not_owner;  // given away on request
    detail::renew_lease(box);
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
    detail::reply_cache_idle(replies.get(), now);  // an idle service lets go of gone requesters' reply boxes
    std::uint64_t until = std::min(deadline.get(), now + kLostWakeSliceNs);
    if (lease_ns != 0) until = std::min(until, now + lease_ns / 2);
    // Not armed: a slot is claimed and not yet published (a slow or stopped
    // writer): back off instead of polling hot.
    if (!detail::owner_sleep(o, until)) detail::busy_backoff(busy_rounds, deadline, now);
  }
}

recv_status Owner::stash(std::string_view data, std::uint32_t lane) { return stash(data, lane, 0); }

recv_status Owner::stash(std::string_view data, std::uint32_t lane, std::int64_t priority) {
  if (!s_) return recv_status::not_owner;
  if (!s_->still_owner()) {
    s_->ctx.last_error = s_->not_owner_error("box '" + s_->m->name + "': this handle lost ownership; nothing stashed");
    return recv_status::not_owner;
  }
  if (auto r = detail::stash_put(s_->ctx, data, lane, priority); !r) {
    s_->ctx.last_error = r.error();
    return r.error() == make_error_code(errc::not_owner) ? recv_status::not_owner : recv_status::error;
  }
  return recv_status::ok;
}

recv_status Owner::stash(const message& m) {
  if (!m.is_request()) return stash(m.data, m.lane, m.priority);
  // A request stays one: its reply address is parked after its bytes (segment/envelope.hpp).
  std::string whole;
  whole.reserve(m.data.size() + m.reply_to.size());
  whole.append(m.data).append(m.reply_to);
  return stash(whole, m.lane, m.priority);
}

std::size_t Owner::unstash_all() {
  if (!s_ || !s_->still_owner()) return 0;
  return detail::stash_unstash_all(s_->ctx);
}

std::size_t Owner::pump() {
  if (!s_ || !s_->m->priority() || !s_->still_owner()) return 0;
  return detail::sort_drain(s_->ctx, true).taken;
}

std::size_t Owner::stashed() const noexcept { return s_ ? s_->ctx.stash_parked.size() : 0; }

std::size_t Owner::unstashed_waiting() const noexcept {
  if (!s_) return 0;
  // A priority box's unstashed messages wait in its heaps (ring.hpp PRIORITY BOXES).
  return s_->m->priority() ? detail::sort_front_count(s_->ctx) : s_->ctx.stash_front.size();
}

bool Owner::give_away(std::uint32_t dest_pid, std::string_view data, std::chrono::nanoseconds timeout) {
  if (s_ && !s_->ctx.born.here()) {  // process.hpp H3: the box is the parent's to give
    s_->ctx.last_error = s_->not_owner_error("");
    return false;
  }
  return s_ && detail::give_away_to_pid(s_->ctx, s_->lease, dest_pid, data, detail::timeout_ns(timeout));
}

bool Owner::give_away_to_heir(std::uint32_t entry, std::string_view data, std::chrono::nanoseconds timeout) {
  if (s_ && !s_->ctx.born.here()) {  // process.hpp H3
    s_->ctx.last_error = s_->not_owner_error("");
    return false;
  }
  return s_ && detail::give_away_to_entry(s_->ctx, s_->lease, entry, data, detail::timeout_ns(timeout));
}

}  // namespace shmbox
