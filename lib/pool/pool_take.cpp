// lib/pool/pool_take.cpp - take and give back (Pool::take, Pool::give_back) and
// the taker's Lease (the table protocol, LV and LG: pool_table.hpp).
#include <unistd.h>

#include <algorithm>
#include <memory>
#include <string>

#include "base/access.hpp"
#include "base/errors.hpp"
#include "base/futex.hpp"
#include "ownership/lease.hpp"
#include "pool/pool_layout.hpp"
#include "pool/pool_table.hpp"
#include "pool/pool_internal.hpp"
#include "base/process.hpp"
#include "segment/segment.hpp"
#include "shmbox/inspect.hpp"
#include "shmbox/pool.hpp"
#include "shmbox/producer.hpp"

namespace shmbox {
namespace detail {
namespace {

constexpr std::uint64_t kWaitSliceNs = 10'000'000;       // a waiting take re-checks its grant every 10 ms
constexpr std::uint64_t kReturnLockWaitNs = 5'000'000'000ull;  // give_back waits this long for the table lock

}  // namespace
}  // namespace detail

using namespace detail;

// --- take and give back ---------------------------------------------------

namespace detail {
namespace {

bool removing(const pool_handle& h) noexcept { return h.state()->removing.load(std::memory_order_relaxed) != 0; }

// The free member taken first: the most recently returned (highest stamp; pooler's head of the free list).
std::int64_t best_free(const pool_handle& h, const table_txn& t) noexcept {
  std::int64_t best = -1;
  std::uint64_t best_stamp = 0;
  for (std::uint32_t m = 0; m < h.max_count(); ++m) {
    const pool_member* e = h.member_at(m);
    if (member_state_of(t.read(e->state)) != static_cast<std::uint32_t>(member_state::free)) continue;
    const std::uint64_t stamp = t.read(e->stamp);
    if (best < 0 || stamp > best_stamp) {
      best = m;
      best_stamp = stamp;
    }
  }
  return best;
}

// Under the lock: member `m` to this handle.
void assign(pool_handle& h, table_txn& t, std::uint32_t m, std::uint64_t& gen, std::uint64_t& lease) noexcept {
  pool_member* e = h.member_at(m);
  lease = t.read(e->leases) + 1;
  gen = t.read(e->generation);
  t.write(e->leases, lease);
  t.write(e->taker_client, static_cast<std::uint64_t>(h.client));
  t.write(e->taker_key, h.key);
  t.write(e->state, make_member_state(member_state::in_use));
  t.add(pool_counter::takes);
}

// Under the lock: a grant made to this handle (make_available), if it is
// still ours: the member is in use by us under that lease. Clears it either
// way (a refusal, RC2, names no member: cleared too).
bool collect_grant(pool_handle& h, table_txn& t, std::uint32_t& m, std::uint64_t& gen, std::uint64_t& lease) noexcept {
  pool_client* me = h.client_at(static_cast<std::uint32_t>(h.client));
  const std::uint64_t g = t.read(me->granted);
  if (g == 0) return false;
  t.write(me->granted, 0);
  m = static_cast<std::uint32_t>((g & 0xFFFF) - 1);
  lease = g >> 16;
  if (m >= h.max_count()) return false;
  const pool_member* e = h.member_at(m);
  gen = t.read(e->generation);
  return member_state_of(t.read(e->state)) == static_cast<std::uint32_t>(member_state::in_use) &&
         t.read(e->taker_key) == h.key && t.read(e->taker_client) == static_cast<std::uint64_t>(h.client) &&
         t.read(e->leases) == lease;
}

// LV's probe (one fcntl), made before the table section for the member the
// section will most likely pick, so that the lock is not held through it:
// the section uses it when it does pick that member of that generation (a
// generation is one worker: dead once, dead for good), and probes itself
// otherwise. A worker that dies between the probe and the section is seen
// as one that dies just after it would be: by the next probe or the supervisor.
struct probe {
  std::uint32_t m = 0;
  std::uint64_t gen = 0;
  bool made = false;
  bool alive = false;
};

probe probe_member(pool_handle& h, std::uint32_t m) {
  probe p;
  if (m >= h.max_count()) return p;
  p.m = m;
  p.gen = h.member_at(m)->generation.load(std::memory_order_relaxed);  // relaxed: a guess, checked under the lock
  p.alive = member_alive(h, m, p.gen);
  p.made = true;
  return p;
}

// Without the lock: the member best_free would pick now (a guess).
probe probe_best_free(pool_handle& h) {
  std::int64_t best = -1;
  std::uint64_t best_stamp = 0;
  for (std::uint32_t m = 0; m < h.max_count(); ++m) {
    const pool_member* e = h.member_at(m);
    // relaxed: a guess, checked under the lock
    if (member_state_of(e->state.load(std::memory_order_relaxed)) != static_cast<std::uint32_t>(member_state::free)) continue;
    const std::uint64_t stamp = e->stamp.load(std::memory_order_relaxed);
    if (best < 0 || stamp > best_stamp) {
      best = m;
      best_stamp = stamp;
    }
  }
  return best < 0 ? probe{} : probe_member(h, static_cast<std::uint32_t>(best));
}

bool alive_as_probed(pool_handle& h, const probe& p, std::uint32_t m, std::uint64_t gen) {
  return p.made && p.m == m && p.gen == gen ? p.alive : member_alive(h, m, gen);
}

// auto_grow_threshold: a take that leaves that many free members or fewer
// asks the supervisor to start more (pooler grows at its take too).
void ask_growth(pool_handle& h, table_txn& t) noexcept {
  const std::uint32_t plus1 = live_limits(h, t).auto_grow_plus1;
  if (plus1 == 0) return;
  std::uint32_t free = 0;
  for (std::uint32_t m = 0; m < h.max_count(); ++m)
    if (member_state_of(t.read(h.member_at(m)->state)) == static_cast<std::uint32_t>(member_state::free)) ++free;
  if (free + 1 > plus1) return;
  t.write(h.state()->grow_asked, t.read(h.state()->grow_asked) + 1);
  t.wake_supervisor();
}

// LV1: the freshest free member whose box has a live owner, assigned to
// this handle; the dead ones found on the way are stopped (crashed), and
// those past their max_lifetime retired (expired: pooler evicts them at
// the take when its timer was late).
bool take_live_free(pool_handle& h, table_txn& t, const probe& guess, std::uint32_t& m, std::uint64_t& gen,
                    std::uint64_t& lease) {
  const std::uint64_t now = h.hdr.max_lifetime_ms != 0 ? mono_ns() : 0;
  for (std::int64_t best = best_free(h, t); best >= 0; best = best_free(h, t)) {
    if (t.room() < 8) t.commit("stop");  // stops of dead members so far; assign needs 5 writes, ask_growth 1
    m = static_cast<std::uint32_t>(best);
    if (member_expired(h, t, m, now)) {
      stop_member(h, t, m, member_stop::expired);
      continue;
    }
    if (alive_as_probed(h, guess, m, t.read(h.member_at(m)->generation))) {
      assign(h, t, m, gen, lease);
      ask_growth(h, t);
      return true;
    }
    stop_member(h, t, m, member_stop::crashed);
  }
  return false;
}

// LV2: a grant to this handle (collect_grant) whose member's box has a live
// owner. A dead one is stopped (crashed; its lease revoked, LG4).
bool collect_live_grant(pool_handle& h, table_txn& t, const probe& guess, std::uint32_t& m, std::uint64_t& gen,
                        std::uint64_t& lease) {
  if (!collect_grant(h, t, m, gen, lease)) return false;
  if (alive_as_probed(h, guess, m, gen)) return true;
  stop_member(h, t, m, member_stop::crashed);
  return false;
}

// The member a grant to this handle names (a guess before the lock).
std::uint32_t granted_member(const pool_handle& h) noexcept {
  const std::uint64_t g = h.client_at(static_cast<std::uint32_t>(h.client))->granted.load(std::memory_order_relaxed);
  return static_cast<std::uint32_t>((g & 0xFFFF) - 1);  // 0 (none) gives 0xFFFFFFFF: no member
}

std::error_code no_supervisor_sentence(const pool_handle& h, errc e, std::string what) {
  if (!supervisor_alive(h)) what += "; no supervisor is running: start one with 'shmbox pool run " + h.name + "'";
  return fail(e, what);
}

}  // namespace

return_status give_back_impl(pool_handle& h, const lease_token& tok, outcome o) {
  // Before the mutex: a thread of the parent may have held it at the fork.
  if (const std::error_code ec = refuse_inherited(h, "Pool", "open the pool in the child (Pool::open) to give a lease back by its token")) {
    h.last_error = ec;
    return return_status::error;
  }
  std::lock_guard<std::recursive_mutex> g(h.mu);
  if (auto r = ensure_client(h, pool_role::taker, mono_ns() + kReturnLockWaitNs); !r) {
    h.last_error = r.error();
    return return_status::error;
  }
  // LV3's probe, before the section (the lock is not held through a system call).
  const bool alive = tok.member >= h.max_count() || member_alive(h, tok.member, tok.generation);
  table_txn t(h, mono_ns() + kReturnLockWaitNs);
  if (!t.locked()) {
    h.last_error = table_busy(h.name, "the lease was not given back");
    return return_status::error;
  }
  if (tok.member >= h.max_count()) {
    t.add(pool_counter::stale_returns);
    t.commit("return");
    return return_status::stale;
  }
  pool_member* e = h.member_at(tok.member);
  const std::uint64_t word = t.read(e->state);
  const auto s = static_cast<member_state>(member_state_of(word));
  const std::uint64_t gen = t.read(e->generation), leases = t.read(e->leases);
  if (gen == tok.generation && s == member_state::in_use && leases == tok.lease) {
    if (!alive) {
      // LV3: its worker died under the lease; the supervisor has not seen it
      // yet. The lease ends as revoked (LG4), the answer is stale.
      stop_member(h, t, tok.member, member_stop::crashed);
      t.add(pool_counter::stale_returns);
      t.commit("return");
      return return_status::stale;
    }
    if (o == outcome::ok) {
      t.add(pool_counter::returns_ok);  // LG1
      if (t.read(h.state()->removing) != 0) stop_member(h, t, tok.member, member_stop::removed, /*given_back=*/true);
      else if (h.hdr.max_lifetime_ms != 0 && member_expired(h, t, tok.member, mono_ns()))
        stop_member(h, t, tok.member, member_stop::expired, /*given_back=*/true);
      else make_available(h, t, tok.member, false);
    } else {
      t.add(pool_counter::returns_fail);  // LG2
      stop_member(h, t, tok.member, member_stop::failed, /*given_back=*/true);
    }
    t.commit("return");
    return return_status::ok;
  }
  // Given back already (and maybe taken again since), or replaced under the
  // lease (its worker died, the pool was removed at once): a stopped
  // member's entry cannot tell which, so only a failed return it still shows counts as double.
  const member_stop why = member_stop_of(word);
  const bool again = gen == tok.generation &&
                     (((s == member_state::free || s == member_state::checking) && leases >= tok.lease) ||
                      (s == member_state::in_use && leases > tok.lease) ||
                      (s == member_state::stopping && why == member_stop::failed && leases == tok.lease));
  if (again) {
    t.add(pool_counter::double_returns);
    t.commit("return");
    return return_status::double_return;
  }
  t.add(pool_counter::stale_returns);
  t.commit("return");
  return return_status::stale;
}

// Under the lock, with no member to hand out: refuses (timeout 0, queue
// full) or queues this handle (ticket into `my_ticket`) and asks for a start
// when one is needed. Returns the refusal, or {} when queued.
std::error_code queue_or_refuse(pool_handle& h, table_txn& t, bool wait, std::uint64_t& my_ticket) {
  pool_client* me = h.client_at(static_cast<std::uint32_t>(h.client));
  sweep_dead_clients(h, t);
  t.commit("sweep");  // the sweep may fill most of the journal; a start request and a queue entry follow
  const table_counts n = count_table(h, t);
  const std::uint32_t starting = n.by_state[static_cast<std::uint32_t>(member_state::starting)];
  const pool_limits p = live_limits(h, t);  // RC1
  const bool can_start = n.members < p.max_count;
  const bool start_needed = starting < n.waiters + 1;
  if (!wait) {
    const bool started = can_start && start_needed && request_start(h, t);
    if (started || starting > 0) {
      t.add(pool_counter::no_members_starting);
      t.commit("refuse");
      return no_supervisor_sentence(h, errc::no_members_starting,
                                    quote_pool(h.name) + ": no member is free; one is being started: take again, or take with a timeout");
    }
    t.add(pool_counter::no_members_at_capacity);
    t.commit("refuse");
    return fail(errc::no_members_at_capacity, quote_pool(h.name) + ": no member is free and all " + std::to_string(p.max_count) +
                                                  " (max_count) are in use: take with a timeout to queue for one");
  }
  if (n.waiters >= p.queue_max) {
    t.add(pool_counter::no_members_queue_full);
    t.commit("refuse");
    return fail(errc::no_members_queue_full, quote_pool(h.name) + ": no member is free and " + std::to_string(n.waiters) +
                                                 " takers wait already (queue_max " + std::to_string(p.queue_max) + "): retry later");
  }
  const std::uint64_t ticket = t.read(h.state()->next_ticket) + 1;
  t.write(h.state()->next_ticket, ticket);
  t.write(me->wait_ticket, ticket);
  t.write(me->granted, 0);
  if (n.waiters + 1 == p.queue_max) t.add(pool_counter::queue_max_reached);
  if (can_start && start_needed) request_start(h, t);
  t.commit("queue");
  my_ticket = ticket;
  return {};
}

// make_lease runs after the table lock is released (each `return
// make_lease` below is outside the section): it may give the member back.
result<Lease> take_impl(const std::shared_ptr<pool_handle>& hp, std::chrono::nanoseconds timeout) {
  pool_handle& h = *hp;
  // Before the mutex: a thread of the parent may have held it at the fork.
  if (const std::error_code ec = refuse_inherited(h, "Pool", "its client entry is its parent's; open the pool in the child (Pool::open)"))
    return ec;
  std::lock_guard<std::recursive_mutex> g(h.mu);
  const std::uint64_t deadline = saturating_deadline(timeout);
  const bool wait = timeout_ns(timeout) > 0;
  const std::uint64_t lock_deadline = std::max<std::uint64_t>(deadline, mono_ns() + 50'000'000ull);
  if (auto r = ensure_client(h, pool_role::taker, lock_deadline); !r) return r.error();
  pool_client* me = h.client_at(static_cast<std::uint32_t>(h.client));
  std::uint32_t m = 0;
  std::uint64_t gen = 0, lease = 0;
  std::uint64_t my_ticket = 0;  // our place in the queue (FIFO by ticket)
  bool got = false;
  {
    // LV: the member this take will most likely get, probed before the section.
    const probe guess = granted_member(h) < h.max_count() ? probe_member(h, granted_member(h)) : probe_best_free(h);
    table_txn t(h, lock_deadline);
    if (!t.locked()) return table_busy(h.name, "retry");
    if (t.read(h.state()->removing) != 0) return fail(errc::pool_removed, quote_pool(h.name) + " is being removed: no new takes");
    if (collect_live_grant(h, t, guess, m, gen, lease)) {  // a grant that arrived after an earlier wait gave up (LV2)
      t.commit("collect");
      got = true;
    } else if (take_live_free(h, t, guess, m, gen, lease)) {  // LV1
      t.commit("take");
      got = true;
    } else if (const std::error_code refused = queue_or_refuse(h, t, wait, my_ticket)) {
      return refused;
    }
  }
  if (got) return access::make_lease(hp, m, gen, lease);
  // Wait for a grant (make_available hands a returned or new member to the oldest waiter).
  for (;;) {
    const std::uint32_t seen = me->wake.load();  // seq_cst: before the grant re-check below
    const bool granted = me->granted.load() != 0;
    const std::uint64_t now = mono_ns();
    if (!granted && now < deadline && !removing(h)) {
      futex_wait(&me->wake, seen, std::min(deadline, now + kWaitSliceNs));
      continue;
    }
    {
      const probe guess = probe_member(h, granted_member(h));  // LV2's probe, before the section
      table_txn t(h, std::max<std::uint64_t>(deadline, now + 50'000'000ull));
      if (!t.locked()) return table_busy(h.name, "retry");
      if (t.read(me->granted) == kGrantRefused) {  // RC2: the queue was shortened past our place
        t.write(me->granted, 0);
        t.write(me->wait_ticket, 0);
        t.add(pool_counter::no_members_queue_full);
        t.commit("refuse");
        return fail(errc::no_members_queue_full, quote_pool(h.name) + ": no member became free, and the pool's queue_max was lowered to " +
                                                     std::to_string(live_limits(h).queue_max) + " while this take waited beyond it: retry later");
      }
      if (collect_live_grant(h, t, guess, m, gen, lease)) {
        t.commit("collect");
        got = true;
      } else if (t.read(me->wait_ticket) == 0 && t.read(h.state()->removing) == 0) {
        // LV2: our grant's member died before we collected it (the grant took
        // us out of the queue): a free member, or back to our place in line.
        if (take_live_free(h, t, guess, m, gen, lease)) {
          t.commit("take");
          got = true;
        } else {
          t.write(me->wait_ticket, my_ticket);
        }
      }
      if (!got) {
        if (t.read(h.state()->removing) != 0 || mono_ns() >= deadline) {
          t.write(me->wait_ticket, 0);
          const bool gone = t.read(h.state()->removing) != 0;
          if (!gone) t.add(pool_counter::take_timeouts);
          t.commit("cancel");
          if (gone) return fail(errc::pool_removed, quote_pool(h.name) + " is being removed: no new takes");
          return no_supervisor_sentence(h, errc::timed_out, quote_pool(h.name) + ": no member became free before the timeout");
        }
        t.commit("collect");
        continue;
      }
    }
    return access::make_lease(hp, m, gen, lease);
  }
}

}  // namespace detail

result<Lease> Pool::take(std::chrono::nanoseconds timeout) {
  auto r = take_impl(h_, timeout);
  if (!r) h_->last_error = r.error();
  return r;
}

return_status Pool::give_back(const lease_token& t, outcome o) { return give_back_impl(*h_, t, o); }

// --- Lease ---------------------------------------------------------------

struct Lease::state {
  std::shared_ptr<pool_handle> h;  // (h->born: made in the same process, by a take)
  lease_token token;
  std::string box;
  std::shared_ptr<Producer> producer;
  std::uint32_t worker_pid = 0;
  bool returned = false;
};

namespace detail {
namespace {

// This handle's link to member m's box for generation `gen`: a Producer on
// it, made on first use (and dropped when it cannot be made).
result<pool_handle::member_link*> link_member(pool_handle& h, std::uint32_t m, std::uint64_t gen) {
  if (auto it = h.links.find(m); it != h.links.end() && it->second.generation == gen && it->second.producer) return &it->second;
  // The member's box is the pool owner's (its supervisor made it): a taker
  // of another user's pool (opened with any_owner, or readable and writable
  // by mode) opens it as such; a box of a third user at that name is refused.
  const std::string name = member_box_name(h.name, m, gen);
  auto b = Box::open(name, {.any_owner = true});
  if (!b) return b.error();  // a link to another generation stays (a probe of a stale token's generation)
  if (const std::uint32_t uid = access::box(*b)->uid; uid != h.uid && uid != ::geteuid())
    return fail(errc::permission_denied, "pool '" + h.name + "': member box '" + name + "' belongs to uid " + std::to_string(uid) +
                                             ", neither the pool's (uid " + std::to_string(h.uid) +
                                             ") nor yours: not used (remove it if it was planted)");
  auto p = Producer::attach(*b);
  if (!p) return p.error();
  auto& link = h.links[m];
  link.generation = gen;
  link.producer = std::make_shared<Producer>(std::move(*p));
  const pool_member* e = h.member_at(m);
  link.worker_pid = in_this_ns(e->worker_ns.load(std::memory_order_relaxed))
                        ? static_cast<std::uint32_t>(e->worker_pid.load(std::memory_order_relaxed) & kPidMask)
                        : 0;
  return &link;
}

}  // namespace

bool member_alive(pool_handle& h, std::uint32_t m, std::uint64_t gen) {
  auto link = link_member(h, m, gen);
  if (!link) return link.error() != errc::not_found;  // gone: dead; other errors: make_lease reports them
  // L2: one F_OFD_GETLK on the owner byte, through the Producer's mapping.
  return view_owner(*access::producer_box(*std::static_pointer_cast<Producer>((*link)->producer))).alive;
}

}  // namespace detail

result<Lease> detail::access::make_lease(const std::shared_ptr<pool_handle>& h, std::uint32_t m, std::uint64_t gen,
                                         std::uint64_t lease) {
  auto s = std::make_unique<Lease::state>();
  s->h = h;
  s->token = {m, gen, lease};
  s->box = member_box_name(h->name, m, gen);
  auto link = link_member(*h, m, gen);
  if (!link) {
    // The member's box is gone (removed by hand, a scribbled table), or
    // cannot take another producer: it is given back as failed.
    // The sentence is kept (the give-back may leave one of its own for explain()).
    const std::error_code ec = link.error();
    const std::string said = explain(ec);
    give_back_impl(*h, s->token, outcome::fail);
    h->last_error = ec.category() == category() ? fail(static_cast<errc>(ec.value()), said) : ec;
    return h->last_error;
  }
  s->producer = std::static_pointer_cast<Producer>((*link)->producer);
  s->worker_pid = (*link)->worker_pid;
  return Lease(std::move(s));
}

std::error_code detail::access::lease_error(const Lease& l) noexcept { return l.s_ ? l.s_->h->last_error : std::error_code{}; }

Lease::Lease(std::unique_ptr<state> s) : s_(std::move(s)) {}
Lease::Lease(Lease&&) noexcept = default;
Lease& Lease::operator=(Lease&& o) noexcept {
  if (this != &o) {
    if (s_ && !s_->returned && s_->h->born.here_for_sure()) give_back(outcome::fail);
    s_ = std::move(o.s_);
  }
  return *this;
}
Lease::~Lease() {
  // process.hpp H3: in a fork child the lease stays its parent's (not given
  // back as failed: the parent still uses the member).
  if (s_ && !s_->returned && s_->h->born.here_for_sure()) give_back(outcome::fail);
}
const std::string& Lease::box() const noexcept { return s_->box; }
Producer& Lease::producer() noexcept { return *s_->producer; }
lease_token Lease::token() const noexcept { return s_->token; }
std::uint32_t Lease::worker_pid() const noexcept { return s_->worker_pid; }
bool Lease::returned() const noexcept { return s_->returned; }

return_status Lease::give_back(outcome o) {
  if (const std::error_code ec = refuse_inherited(*s_->h, "Lease", "the lease is its parent's to give back")) {
    s_->h->last_error = ec;
    return return_status::error;
  }
  if (s_->returned) {
    // Detected here, counted in the pool like any double return.
    std::lock_guard<std::recursive_mutex> g(s_->h->mu);
    table_txn t(*s_->h, mono_ns() + kReturnLockWaitNs);
    if (t.locked()) {
      t.add(pool_counter::double_returns);
      t.commit("return");
    }
    return return_status::double_return;
  }
  const return_status r = give_back_impl(*s_->h, s_->token, o);
  if (r != return_status::error) s_->returned = true;
  return r;
}

}  // namespace shmbox
