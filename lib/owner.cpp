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
// An empty owner keeps polling this long before it sleeps on the futex, so
// that a busy producer/owner pair hands over without system calls; an idle
// owner then sleeps and uses no CPU. (Tunable per call in a later issue.)
constexpr std::uint64_t kSpinBeforeSleepNs = 50'000;
// Waiting for a writer that claimed a slot and has not published it yet (or
// died: the take repairs that after a grace period): pause, then yield, then
// short naps.
void backoff(unsigned& rounds, detail::lazy_deadline& deadline, std::uint64_t now) {
  ++rounds;
  if (rounds < 64) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  } else if (rounds < 256) {
    ::sched_yield();
  } else {
    const std::uint64_t nap = std::min<std::uint64_t>(200'000, deadline.get() - std::min(now, deadline.get()));
    timespec ts{0, static_cast<long>(nap)};
    ::nanosleep(&ts, nullptr);
  }
}
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

// Counts what it appends; the two public receive_batch forms wrap it.
struct detail::owner_sink : detail::take_sink {
  std::size_t appended = 0;

 protected:
  ~owner_sink() = default;
};

namespace {
struct vector_sink final : detail::owner_sink {
  std::vector<message>* out;
  explicit vector_sink(std::vector<message>& v) : out(&v) {}
  void append(const std::byte* data, std::uint32_t size, bool redelivered, std::uint32_t lane) override {
    message& m = out->emplace_back();
    m.data.assign(reinterpret_cast<const char*>(data), size);
    m.redelivered = redelivered;
    m.lane = lane;
    ++appended;
  }
};
struct batch_sink final : detail::owner_sink {
  batch* out;
  explicit batch_sink(batch& b) : out(&b) {}
  void append(const std::byte* data, std::uint32_t size, bool redelivered, std::uint32_t lane) override {
    out->append(data, size, redelivered, lane);
    ++appended;
  }
};
}  // namespace

recv_status Owner::receive_batch(std::vector<message>& out, std::size_t max, std::chrono::nanoseconds timeout) {
  vector_sink sink(out);
  return receive_into(sink, max, timeout);
}

recv_status Owner::receive_batch(batch& out, std::size_t max, std::chrono::nanoseconds timeout) {
  batch_sink sink(out);
  return receive_into(sink, max, timeout);
}

recv_status Owner::receive_into(detail::owner_sink& sink, std::size_t max, std::chrono::nanoseconds timeout) {
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
  // The clock is read only once nothing was found: a call that finds a
  // message makes no clock call.
  detail::lazy_deadline deadline{timeout == std::chrono::nanoseconds::max() ? UINT64_MAX
                                 : timeout.count() < 0                     ? 0
                                                                           : static_cast<std::uint64_t>(timeout.count())};
  unsigned spins = 0, busy_rounds = 0;
  std::uint64_t spin_until = 0;
  unsigned polls = 0;
  for (;;) {
    bool busy = false, corrupt = false;
    // Every 64th empty poll (and the first) also reads the tails, to notice
    // a claimed-but-unpublished slot (slow or dead writer).
    sink.look_at_tail = (polls++ & 63) == 0;
    for (std::uint32_t l = 0; l < m.lane_count() && sink.appended < max; ++l) {
      sink.max = max - sink.appended;
      const detail::take_result r = detail::owner_take(o, l, sink);
      busy |= r.busy;
      corrupt |= r.corrupt;  // (r.unknown: an unpublished slot, not yet told apart: keep polling)
    }
    if (sink.appended > 0) return recv_status::ok;
    if (corrupt) return recv_status::error;
    if (deadline.timeout_ns == 0) return recv_status::timeout;
    const std::uint64_t now = detail::mono_ns();
    if (now >= deadline.get()) return recv_status::timeout;
    if (busy) {
      backoff(busy_rounds, deadline, now);
      continue;
    }
    if (spin_until == 0) spin_until = now + kSpinBeforeSleepNs;
    if (now < spin_until) {
      for (int i = 0; i < 16; ++i) {  // a short pause between polls of the lanes
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
      }
      ++spins;
      continue;
    }
    // Sleep: read wake_seq, then arm every lane (fails if anything arrived),
    // then futex-wait. A producer that sees the bit bumps wake_seq (P6).
    const std::uint32_t w = rec->wake_seq.load(std::memory_order_acquire);
    bool armed = true;
    for (std::uint32_t l = 0; l < m.lane_count() && armed; ++l) armed = detail::owner_arm_sleep(o, l);
    if (armed) detail::futex_wait(&rec->wake_seq, w, deadline.get());
    for (std::uint32_t l = 0; l < m.lane_count(); ++l) detail::owner_clear_sleep(o, l);
    // Not armed: a slot is claimed and not yet published (a slow or stopped
    // writer): back off instead of polling hot.
    if (!armed) backoff(busy_rounds, deadline, now);
  }
}

}  // namespace shmbox
