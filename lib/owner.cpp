#include "shmbox/owner.hpp"

#include "errors.hpp"
#include "futex.hpp"
#include "process.hpp"
#include "ring.hpp"
#include "segment.hpp"

#include <sched.h>
#include <time.h>

namespace shmbox {
namespace {
// An empty owner polls this many times (a few microseconds) before it sleeps,
// so that a busy pair hands over without a system call.
constexpr unsigned kSpinBeforeSleep = 200;
}  // namespace

struct Owner::state {
  std::shared_ptr<detail::mapped_box> m;
  detail::owner_ctx ctx;
  ~state() {
    // Give the lease back; the messages stay. Only if it is still ours.
    detail::owner_record* rec = m->owner();
    if (rec->epoch.load(std::memory_order_acquire) != ctx.epoch) return;
    std::uint64_t me = ctx.key;
    rec->key.compare_exchange_strong(me, 0, std::memory_order_release, std::memory_order_relaxed);
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

Owner::Owner(std::unique_ptr<state> s) : s_(std::move(s)) {}
Owner::Owner(Owner&&) noexcept = default;
Owner& Owner::operator=(Owner&&) noexcept = default;
Owner::~Owner() = default;

result<Owner> Owner::acquire(std::string_view name) {
  auto box = Box::open(name);
  if (!box) return box.error();
  return acquire(*box);
}

result<Owner> Owner::acquire(const Box& box) {
  const auto& m = box.m_;
  const std::string who = "box '" + m->name + "'";
  if (m->read_only) return detail::fail(errc::permission_denied, who + " was opened read-only; open it with Box::open to own it");
  const std::uint64_t me = detail::self_key();
  if (me == 0) return detail::fail(errc::system_error, who + ": cannot read this process's start time from /proc/self/stat");
  detail::owner_record* rec = m->owner();
  for (;;) {
    std::uint64_t k = rec->key.load(std::memory_order_acquire);
    if (k == me) return detail::fail(errc::already_owner, who + " is already owned by this process (pid " +
                                                              std::to_string(detail::key_pid(me)) + "): use its Owner handle");
    if (k != 0 && detail::process_alive(k))
      return detail::fail(errc::not_owner, who + " is owned by live process " + std::to_string(detail::key_pid(k)) +
                                               "; only one owner at a time (it must exit or release the box first)");
    // acq_rel: acquire the previous owner's record and slots; release our key.
    if (rec->key.compare_exchange_strong(k, me, std::memory_order_acq_rel, std::memory_order_relaxed)) break;
  }
  auto s = std::make_unique<state>();
  s->m = m;
  s->ctx.m = m.get();
  s->ctx.key = me;
  s->ctx.epoch = rec->epoch.fetch_add(1, std::memory_order_acq_rel) + 1;
  rec->acquired_unix_ns.store(detail::unix_ns(), std::memory_order_relaxed);
  rec->state.store(static_cast<std::uint32_t>(detail::owner_state::passive), std::memory_order_relaxed);
  detail::owner_recover(s->ctx);
  return Owner(std::move(s));
}

std::uint64_t Owner::epoch() const noexcept { return s_ ? s_->ctx.epoch : 0; }
std::error_code Owner::last_error() const noexcept { return s_ ? s_->ctx.last_error : make_error_code(errc::not_owner); }

recv_status Owner::try_receive(message& out) {
  std::vector<message> one;
  const recv_status st = receive_batch(one, 1, std::chrono::nanoseconds(0));
  if (st == recv_status::ok) out = std::move(one.front());
  return st == recv_status::timeout ? recv_status::empty : st;
}

recv_status Owner::receive(message& out, std::chrono::nanoseconds timeout) {
  std::vector<message> one;
  const recv_status st = receive_batch(one, 1, timeout);
  if (st == recv_status::ok) out = std::move(one.front());
  return st;
}

recv_status Owner::receive_batch(std::vector<message>& out, std::size_t max, std::chrono::nanoseconds timeout) {
  if (!s_) return recv_status::not_owner;
  detail::owner_ctx& o = s_->ctx;
  detail::mapped_box& m = *s_->m;
  detail::owner_record* rec = m.owner();
  if (rec->key.load(std::memory_order_acquire) != o.key || rec->epoch.load(std::memory_order_acquire) != o.epoch) {
    o.last_error = detail::fail(errc::not_owner, "box '" + m.name + "': this handle lost ownership (epoch " +
                                                     std::to_string(o.epoch) + ")");
    return recv_status::not_owner;
  }
  if (max == 0) return recv_status::empty;
  const std::uint64_t start_ns = detail::mono_ns();
  std::uint64_t deadline = detail::kNoDeadline;
  if (timeout != std::chrono::nanoseconds::max())
    deadline = start_ns + (timeout.count() < 0 ? 0 : static_cast<std::uint64_t>(timeout.count()));
  const std::size_t first = out.size();
  unsigned spins = 0, busy_rounds = 0;
  for (;;) {
    bool busy = false, corrupt = false;
    for (std::uint32_t l = 0; l < m.lane_count() && out.size() - first < max; ++l) {
      detail::take_sink sink{&out, max - (out.size() - first)};
      const detail::take_result r = detail::owner_take(o, l, sink);
      busy |= r.busy;
      corrupt |= r.corrupt;
    }
    if (out.size() > first) return recv_status::ok;
    if (corrupt) return recv_status::error;
    const std::uint64_t now = detail::mono_ns();
    if (now >= deadline) return recv_status::timeout;
    if (busy) {
      // A writer claimed a slot and has not published it yet (or died: the
      // take above repairs that after a grace period). Back off gently.
      ++busy_rounds;
      if (busy_rounds < 64) {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
      } else if (busy_rounds < 256) {
        ::sched_yield();
      } else {
        const std::uint64_t nap = std::min<std::uint64_t>(200'000, deadline - now);
        timespec ts{0, static_cast<long>(nap)};
        ::nanosleep(&ts, nullptr);
      }
      continue;
    }
    if (spins < kSpinBeforeSleep) {
      ++spins;
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
      continue;
    }
    // Sleep: read wake_seq, then arm every lane (fails if anything arrived),
    // then futex-wait. A producer that sees the bit bumps wake_seq (P6).
    const std::uint32_t w = rec->wake_seq.load(std::memory_order_acquire);
    bool armed = true;
    for (std::uint32_t l = 0; l < m.lane_count() && armed; ++l) armed = detail::owner_arm_sleep(o, l);
    if (armed) detail::futex_wait(&rec->wake_seq, w, deadline);
    for (std::uint32_t l = 0; l < m.lane_count(); ++l) detail::owner_clear_sleep(o, l);
  }
}

}  // namespace shmbox
