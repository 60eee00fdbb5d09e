// lib/ownership/handover.cpp - the hand-over protocol: take over, release, give away,
// requests. The steps (O1-O5, G1-G3, Q1-Q3) and the rule they follow are
// written at the top of handover.hpp.
#include "ownership/handover.hpp"

#include <sched.h>
#include <unistd.h>

#include <algorithm>

#include "base/errors.hpp"
#include "base/fault.hpp"
#include "base/futex.hpp"
#include "ownership/lease.hpp"
#include "base/process.hpp"
#include "ring/wake.hpp"

namespace shmbox::detail {

namespace {

std::string box_name(const mapped_box& m) { return "box '" + m.name + "'"; }

// A waiting destination is alive while it holds its heir entry (waiting) or
// the owner byte (taking the box), liveness.hpp L1, in any pid namespace.
bool dest_alive(const mapped_box& m, std::uint64_t dest) noexcept {
  // acquire: pairs with O2's CAS (take_ownership) and enlist's CAS (lease.cpp)
  if (m.owner()->key.load(std::memory_order_acquire) == dest && lock_held(m, owner_byte(m))) return true;
  for (std::uint32_t i = 0; i < kHeirSlots; ++i)
    if (m.heir(i)->key.load(std::memory_order_acquire) == dest && lock_held(m, heir_byte(m, i))) return true;
  return false;
}

// The key of heir entry `entry` if a live heir or listener holds it, else 0.
std::uint64_t live_entry_key(const mapped_box& m, std::uint32_t entry) noexcept {
  if (entry >= kHeirSlots) return 0;
  const std::uint64_t k = m.heir(entry)->key.load(std::memory_order_acquire);  // acquire: pairs with enlist's CAS
  return role_alive(m, heir_byte(m, entry), k) ? k : 0;
}

}  // namespace

// ---------------------------------------------------------------------------
// TAKE OVER (O1-O5)
// ---------------------------------------------------------------------------

std::uint64_t take_ownership(mapped_box& m, std::uint64_t from_key, transfer_reason why, std::string_view data,
                             role_lock& lock) noexcept {
  owner_record* rec = m.owner();
  const std::uint64_t me = self_key();
  if (me == 0) return 0;
  // L1: the owner byte before the key, so that a live new owner is never
  // seen without its lock.
  if (!lock.lock(m, owner_byte(m))) return 0;
  auto lost = [&] {
    lock.unlock(owner_byte(m));
    return std::uint64_t{0};
  };
  std::uint64_t expected = from_key;
  // seq_cst (acquires the previous owner's record and slots, releases our
  // key): the epoch step below reasons about the order of key and epoch.
  if (!rec->key.compare_exchange_strong(expected, me, std::memory_order_seq_cst, std::memory_order_relaxed)) return lost();
  // display only: the namespace of the previous owner goes to the transfer record
  const std::uint64_t previous_ns = rec->owner_pid_ns.exchange(self_pid_ns(), std::memory_order_relaxed);
  SHMBOX_FAULT("takeover.after_cas");
  // The epoch goes up by one only while the key is still ours. Until it does,
  // the lease still looks expired, so another heir may take the key from us
  // (we could be stopped right here). A plain fetch_add would then hand us
  // an epoch after the new key holder's, and neither of us would be the
  // owner (found by model/lease.pml). With the check before each CAS (all
  // seq_cst): if a later key holder K read the epoch after our key check, our
  // CAS either came first (K gets the next epoch) or fails on the value K
  // wrote, and we see the key is gone.
  std::uint64_t cur = rec->epoch.load(std::memory_order_seq_cst);
  for (;;) {
    if (rec->key.load(std::memory_order_seq_cst) != me) return lost();  // taken from us before we had an epoch
    if (rec->epoch.compare_exchange_weak(cur, cur + 1, std::memory_order_seq_cst, std::memory_order_seq_cst)) break;
  }
  const std::uint64_t epoch = cur + 1;
  // The actor of this epoch is ours from here (before any slot is touched as
  // that actor): a later owner's recovery asks this byte whether we live.
  // Best effort: the key and epoch are ours already, and a byte another
  // process holds past L7's deadline (whoever may write the box may) reads
  // as held, i.e. alive, to those probes while it holds it; a later owner
  // exists only once we lost the key, and then our takes and commits fail
  // by epoch whatever its recovery does.
  (void)lock.lock(m, actor_byte(m, owner_actor_index(owner_actor_id(epoch))));
  // From a released box (key 0), the previous owner is the one that released it.
  const std::uint64_t previous = from_key != 0 ? from_key : rec->last_owner_key.load(std::memory_order_relaxed);
  rec->last_owner_key.store(previous, std::memory_order_relaxed);
  rec->acquired_unix_ns.store(unix_ns(), std::memory_order_relaxed);
  rec->lease_renewed_ns.store(mono_ns(), std::memory_order_relaxed);
  rec->state.store(next_state(rec->state.load(std::memory_order_relaxed), owner_state::passive), std::memory_order_relaxed);
  rec->notify_fd_plus1.store(0, std::memory_order_relaxed);  // the previous owner's descriptor is not ours
  rec->fd_fallback.store(0, std::memory_order_relaxed);
  if (why != transfer_reason::none) {
    // The record is valid for the epoch in tr_epoch, written last (release):
    // readers load tr_epoch, copy, and load it again (seqlock style).
    rec->tr_epoch.store(0, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
    rec->tr_from_key.store(previous, std::memory_order_relaxed);
    rec->tr_to_key.store(me, std::memory_order_relaxed);
    rec->tr_from_ns.store(previous_ns, std::memory_order_relaxed);
    rec->tr_to_ns.store(self_pid_ns(), std::memory_order_relaxed);
    rec->tr_unix_ns.store(unix_ns(), std::memory_order_relaxed);
    rec->tr_reason.store(static_cast<std::uint32_t>(why), std::memory_order_relaxed);
    const std::size_t n = std::min<std::size_t>(data.size(), kHeirDataMax);
    store_data(rec->tr_data, data.substr(0, n));
    rec->tr_data_len.store(static_cast<std::uint32_t>(n), std::memory_order_relaxed);
    rec->tr_epoch.store(epoch, std::memory_order_release);
  }
  SHMBOX_FAULT("takeover.after_record");
  // An heir that inherits leaves the heir table; a listener too. (An heir that
  // was given the box keeps its place: give_away leaves the table unchanged.)
  for (std::uint32_t i = 0; i < kHeirSlots; ++i) {
    heir_entry* e = m.heir(i);
    if (e->key.load(std::memory_order_acquire) != me) continue;
    const bool listener = (e->flags.load(std::memory_order_relaxed) & kHeirListenerOnly) != 0;
    // Its byte is the Heir handle's lock, let go once we return (heir.cpp
    // let_go_of_withdrawn_entry); until then enlist takes no entry whose byte is held.
    if (listener || why != transfer_reason::give_away) withdraw(m, i, me);
  }
  rec->transfer_seq.fetch_add(1, std::memory_order_release);
  futex_wake(&rec->transfer_seq);
  return epoch;
}

result<std::uint64_t> acquire_ownership(mapped_box& m, role_lock& lease) {
  const std::string who = box_name(m);
  const std::uint64_t me = self_key();
  if (me == 0) return fail(errc::system_error, who + ": this process's pid is out of range for a process key");
  for (;;) {
    const owner_view v = view_owner(m);
    if (v.key == me)
      return fail(errc::already_owner, who + " is already owned by this process (pid " + std::to_string(key_pid(me)) +
                                           "): use its Owner handle");
    // The epoch goes up by one per change of owner and can never honestly
    // reach its last value; from there it would wrap to 0, which
    // take_ownership returns for "not taken" (and we would then find our own
    // key: "already owned by this process"). Say what is wrong instead.
    if (v.epoch == UINT64_MAX)
      return fail(errc::corrupt, who + ": its owner epoch (the count of changes of owner) is " + std::to_string(v.epoch) +
                                     ", which no box reaches: the owner record was written over (corrupt); remove and recreate the box");
    if (!owner_gone(v))
      return fail(errc::not_owner, who + " is owned by live process " + std::to_string(key_pid(v.key)) +
                                       (v.pid_ns != 0 && v.pid_ns != self_pid_ns() ? " (of another pid namespace)" : "") +
                                       "; only one owner at a time (it must exit or release the box first)");
    // A box whose owner is gone belongs to its first live heir.
    const auto heir = first_live_heir(m);
    if (heir && heir->key != me) {
      signal_waiters(m, heir->key);
      return fail(errc::not_owner, who + "'s owner is gone and its heir (pid " + std::to_string(key_pid(heir->key)) +
                                       ") takes it over first");
    }
    // A transfer is recorded when an heir inherits or an owner died or
    // expired; a plain acquire of a released or new box records none.
    transfer_reason why = transfer_reason::none;
    if (v.expired) why = transfer_reason::lease_expired;
    else if (v.key != 0 || heir) why = transfer_reason::owner_died;
    // take_ownership locks the owner byte too (again: a no-op); a failure
    // here is the system's (no descriptor left), not a lost race to retry.
    if (!lease.lock(m, owner_byte(m))) {
      if (errno == EAGAIN)  // liveness.hpp L7
        return fail(errc::system_error, who + ": the owner's lock byte of the segment was held by another process for over a second "
                                              "(whoever may write the segment may hold it); retry, or if it stays so, "
                                              "remove and recreate the box with a mode that does not let others write it");
      if (errno == EINTR) return fail(errc::system_error, who + ": interrupted by a signal while waiting for the owner's lock byte");
      return fail_errno(errno, who + ": cannot lock the owner's byte of the segment (open file description lock)");
    }
    const std::uint64_t epoch = take_ownership(m, v.key, why, heir ? std::string_view(heir->data) : "", lease);
    if (epoch != 0) return epoch;
    // someone else changed the owner meanwhile: look again
  }
}

std::uint64_t heir_take(mapped_box& m, std::uint64_t key, bool listener, std::string_view data, role_lock& taking) {
  owner_record* rec = m.owner();
  // G2. acquire: pairs with G1's release of offer_key (the offer's data and epoch)
  const std::uint64_t offer = rec->offer_key.load(std::memory_order_acquire);
  // acquire (epoch): pairs with O3's CAS, so a stale offer of an earlier epoch is not taken for a new one
  if (offer == key && rec->offer_epoch.load(std::memory_order_relaxed) == rec->epoch.load(std::memory_order_acquire)) {
    std::uint64_t expected = key;
    // Accept (exclusive against the giver's withdrawal, G3), then take.
    // acq_rel: acquires the giver's offer, releases "accepted" to the giver's G3 CAS
    if (rec->offer_key.compare_exchange_strong(expected, key | kOfferAccepted, std::memory_order_acq_rel,
                                               std::memory_order_relaxed)) {
      SHMBOX_FAULT("give_away.after_accept");
      const std::string gift = load_data(rec->offer_data, rec->offer_data_len.load(std::memory_order_relaxed));
      const std::uint64_t giver = rec->key.load(std::memory_order_acquire);  // acquire: pairs with O2 (the giver's own take)
      const std::uint64_t epoch = take_ownership(m, giver, transfer_reason::give_away, gift, taking);
      SHMBOX_FAULT("give_away.before_clear");
      rec->offer_key.store(0, std::memory_order_release);  // release: pairs with the acquire in G2/G3 (the offer is used)
      if (epoch != 0) return epoch;
    }
  }
  if (listener) return 0;
  const owner_view v = view_owner(m);
  if (!owner_gone(v)) return 0;
  const auto first = first_live_heir(m);
  if (!first || first->key != key) return 0;
  // A box nobody ever owned is taken without a transfer record.
  const transfer_reason why = v.expired                     ? transfer_reason::lease_expired
                              : v.key == 0 && v.epoch == 0 ? transfer_reason::none
                                                            : transfer_reason::owner_died;
  return take_ownership(m, v.key, why, data, taking);
}

// ---------------------------------------------------------------------------
// Being the owner, and RELEASE
// ---------------------------------------------------------------------------

bool still_owner(const owner_ctx& o, role_lock& lease) noexcept {
  // process.hpp H3: a handle inherited by a fork child is not the owner there
  // (its parent is), whatever the record says; it lets go of nothing (its
  // lease is void in the child: liveness.hpp L6).
  if (!o.born.here()) return false;
  const owner_record* rec = o.m->owner();
  // acquire: pairs with O2/O3 of whoever took the box from us
  const bool mine = rec->key.load(std::memory_order_acquire) == o.key && rec->epoch.load(std::memory_order_acquire) == o.epoch;
  // No longer the owner (for good: epochs only grow): let go of the owner
  // byte, so that the byte speaks only for the owner that holds the key.
  if (!mine) lease.unlock(owner_byte(*o.m));
  return mine;
}

void release_ownership(owner_ctx& o, role_lock& lease) noexcept {
  if (!still_owner(o, lease)) return;
  owner_record* rec = o.m->owner();
  std::uint64_t me = o.key;
  rec->last_owner_key.store(me, std::memory_order_relaxed);  // for the heir's transfer record (ordered by the CAS below)
  // release: our record and the slots we finished are visible to the next owner's O2 (seq_cst CAS)
  if (rec->key.compare_exchange_strong(me, 0, std::memory_order_release, std::memory_order_relaxed)) signal_waiters(*o.m);
  lease.reset();  // L1: after the key is cleared
}

// ---------------------------------------------------------------------------
// GIVE AWAY (G1, G3)
// ---------------------------------------------------------------------------

bool give_away_to_key(owner_ctx& o, role_lock& lease, std::uint64_t dest, const std::string& dest_name,
                      std::string_view data, std::uint64_t timeout_ns) {
  mapped_box& m = *o.m;
  owner_record* rec = m.owner();
  const std::string who = box_name(m);
  if (!still_owner(o, lease)) {
    o.last_error = fail(errc::not_owner, who + ": give_away by a handle that is not the owner");
    return false;
  }
  if (data.size() > kHeirDataMax || !o.pending.empty()) {
    o.last_error = fail(errc::invalid_argument, who + ": give_away needs data of at most 64 bytes and no uncommitted reads");
    return false;
  }
  if (dest == o.key) {
    o.last_error = fail(errc::invalid_argument, who + ": give_away to " + dest_name + ", which is the owner");
    return false;
  }
  if (!dest_alive(m, dest)) {
    o.last_error = fail(errc::invalid_argument, who + ": give_away to " + dest_name +
                                                    ", which is not waiting for the box (make it an heir or listener first)");
    return false;
  }
  // G1: data first, then the key that makes it visible (release: pairs with G2's acquire).
  store_data(rec->offer_data, data);
  rec->offer_data_len.store(data.size(), std::memory_order_relaxed);
  rec->offer_epoch.store(o.epoch, std::memory_order_relaxed);
  rec->offer_key.store(dest, std::memory_order_release);
  signal_waiters(m, dest);
  SHMBOX_FAULT("give_away.after_offer");
  lazy_deadline deadline{timeout_ns};
  // An accepted offer whose dest died before taking the box is void at once.
  auto accepted_by_dead_dest = [&] {
    // acquire: pairs with G2's acq_rel CAS (accepted)
    return rec->offer_key.load(std::memory_order_acquire) == (dest | kOfferAccepted) && still_owner(o, lease) &&
           !dest_alive(m, dest);
  };
  // No longer the owner: dest took the box (true), or, on a lease box whose
  // deadline passed anyway, an heir did (false, not_owner).
  auto given = [&] {
    const std::uint64_t k = rec->key.load(std::memory_order_acquire);  // acquire: pairs with O2
    if (k == dest) return true;
    // dest may have taken the box and let it go already (released it, or
    // died): then the transfer record of the epoch after ours names dest and
    // the give-away, as long as no later transfer has written it over
    // (read like its other readers: epoch, fields, epoch again).
    const std::uint64_t e = rec->tr_epoch.load(std::memory_order_acquire);  // acquire: pairs with the record's release
    if (e == o.epoch + 1 && rec->tr_to_key.load(std::memory_order_relaxed) == dest &&
        rec->tr_reason.load(std::memory_order_relaxed) == static_cast<std::uint32_t>(transfer_reason::give_away)) {
      std::atomic_thread_fence(std::memory_order_acquire);
      if (rec->tr_epoch.load(std::memory_order_relaxed) == e) return true;
    }
    o.last_error = fail(errc::not_owner, who + ": lost the box during give_away: pid " + std::to_string(key_pid(k)) +
                                             " took it, not " + dest_name);
    return false;
  };
  // G3
  for (;;) {
    if (!still_owner(o, lease)) return given();
    renew_lease(m);  // a giver is alive and busy: its heirs must not take over meanwhile
    // acquire: pairs with O5's release (read before the check below, so a take we miss changes it)
    const std::uint32_t seen = rec->transfer_seq.load(std::memory_order_acquire);
    const std::uint64_t now = mono_ns();
    if (now >= deadline.get() || accepted_by_dead_dest()) break;
    if (!still_owner(o, lease)) return given();
    futex_wait(&rec->transfer_seq, seen, std::min(deadline.get(), now + 10'000'000));
  }
  // Withdraw the offer; if dest accepted it just now, let it finish.
  std::uint64_t expected = dest;
  // acq_rel: exclusive against G2's CAS; on failure we read its "accepted"
  if (rec->offer_key.compare_exchange_strong(expected, 0, std::memory_order_acq_rel, std::memory_order_relaxed)) {
    o.last_error = fail(errc::timed_out, who + ": " + dest_name + " did not take the box in time");
    return false;  // withdrawn before dest accepted: nothing changed
  }
  const std::uint64_t give_up = mono_ns() + 1'000'000'000;
  while (mono_ns() < give_up) {
    if (!still_owner(o, lease)) return given();
    if (!dest_alive(m, dest)) break;
    ::sched_yield();
  }
  if (!still_owner(o, lease)) return given();
  rec->offer_key.store(0, std::memory_order_release);  // dest accepted and died: the offer is void
  o.last_error = fail(errc::invalid_argument, who + ": " + dest_name +
                                                  " accepted the box and died before taking it; this process still owns it");
  return false;
}

bool give_away_to_entry(owner_ctx& o, role_lock& lease, std::uint32_t entry, std::string_view data,
                        std::uint64_t timeout_ns) {
  const std::string who = box_name(*o.m);
  if (entry >= kHeirSlots) {
    o.last_error = fail(errc::invalid_argument, who + ": heir entry " + std::to_string(entry) +
                                                    " does not exist (entries are 0.." + std::to_string(kHeirSlots - 1) + ")");
    return false;
  }
  const std::uint64_t dest = live_entry_key(*o.m, entry);
  if (dest == 0) {
    o.last_error = fail(errc::invalid_argument, who + ": heir entry " + std::to_string(entry) +
                                                    " holds no live heir or listener (see shmbox heirs " + o.m->name + ")");
    return false;
  }
  return give_away_to_key(o, lease, dest, "heir entry " + std::to_string(entry) + " (pid " + std::to_string(key_pid(dest)) + ")",
                          data, timeout_ns);
}

bool give_away_to_pid(owner_ctx& o, role_lock& lease, std::uint32_t pid, std::string_view data, std::uint64_t timeout_ns) {
  // A pid means a process of this pid namespace only: the live heir or
  // listener with that pid recorded in this namespace.
  for (const heir_view& h : list_heirs(*o.m, false))
    if (h.alive && key_pid(h.key) == pid && in_this_ns(h.pid_ns))
      return give_away_to_key(o, lease, h.key, "pid " + std::to_string(pid), data, timeout_ns);
  o.last_error = fail(errc::invalid_argument,
                      box_name(*o.m) + ": give_away to pid " + std::to_string(pid) +
                          (pid_running(pid) ? ", which is not waiting for the box (make it an heir or listener first)"
                                            : ", which is not running in this pid namespace") +
                          " (an heir in another container is named by its heir entry: Owner::give_away_to_heir, "
                          "shmbox give-away NAME --heir N)");
  return false;
}

// ---------------------------------------------------------------------------
// REQUESTS (Q1-Q3)
// ---------------------------------------------------------------------------

void allow_requests(mapped_box& m, std::uint64_t epoch) noexcept {
  // release: pairs with the acquire in accepts_requests (an asker sees it with the epoch it belongs to)
  m.owner()->requests_allowed.store(epoch, std::memory_order_release);
}

bool accepts_requests(const mapped_box& m, std::uint64_t epoch) noexcept {
  return epoch != 0 && m.owner()->requests_allowed.load(std::memory_order_acquire) == epoch;  // acquire: pairs with allow_requests
}

std::uint64_t pending_request(const mapped_box& m) noexcept {
  return m.owner()->request_pid.load(std::memory_order_acquire);  // acquire: pairs with Q1's CAS
}

bool serve_request(owner_ctx& o, role_lock& lease) {
  mapped_box& m = *o.m;
  owner_record* rec = m.owner();
  // relaxed: only this owner writes it (for its own epoch)
  if (rec->requests_allowed.load(std::memory_order_relaxed) != o.epoch) return false;
  const std::uint64_t req = rec->request_pid.load(std::memory_order_acquire);  // acquire: pairs with Q1's CAS
  if (req == 0) return false;
  auto answered = [&](std::uint64_t expected) {
    // acq_rel: releases the key move we saw (G3) to the asker's acquire in Q3
    rec->request_pid.compare_exchange_strong(expected, 0, std::memory_order_acq_rel);
    rec->transfer_seq.fetch_add(1, std::memory_order_release);  // the asker watches it (release: pairs with Q3's acquire)
    futex_wake(&rec->transfer_seq);
  };
  // Q2. Only this handle serves requests (one thread), so a request marked as
  // being served was left by an owner that died serving it; one whose asker
  // is gone (killed while it waited, e.g. Ctrl-C: it no longer holds the
  // request's byte, liveness.hpp L1, in whatever pid namespace it ran) was
  // cancelled. Both are void.
  if ((req & kRequestServing) != 0 || !lock_held(m, request_byte(m))) {
    answered(req);
    return false;
  }
  std::uint64_t expected = req;
  if (!rec->request_pid.compare_exchange_strong(expected, req | kRequestServing, std::memory_order_acq_rel,
                                                std::memory_order_relaxed))
    return false;  // withdrawn or replaced meanwhile: the next call looks again
  // The destination is an heir entry; an entry registered anew since the
  // request (another key) is not what was asked for.
  const std::uint32_t entry = request_entry(req);
  const std::uint64_t dest = entry < kHeirSlots ? m.heir(entry)->key.load(std::memory_order_acquire) : std::uint64_t{0};
  const bool given = request_names(req, dest) && o.pending.empty() &&
                     give_away_to_key(o, lease, dest,
                                      "heir entry " + std::to_string(entry) + " (pid " + std::to_string(key_pid(dest)) + ")",
                                      "requested", 1'000'000'000);
  answered(req | kRequestServing);
  return given;
}

namespace {
// What every give-away request needs first: a live owner that accepts them.
result<void> owner_takes_requests(const mapped_box& m) {
  const std::string who = "box '" + m.name + "'";
  const owner_view v = view_owner(m);
  if (v.key == 0 || !v.alive)
    return fail(errc::not_owner, who + " has no live owner: a waiting heir takes it over by itself");
  if (!accepts_requests(m, v.epoch))
    return fail(errc::refused, who + ": its owner (pid " + std::to_string(key_pid(v.key)) +
                                           ") does not accept give-away requests (it must call "
                                           "Owner::accept_give_away_requests, or run shmbox recv --follow --accept-give-away)");
  return {};
}
}  // namespace

result<void> request_give_away_to_pid(mapped_box& m, std::uint32_t pid, std::uint64_t timeout_ns) {
  if (m.read_only) return fail(errc::permission_denied, "box '" + m.name + "' was opened read-only; open it with Box::open");
  if (auto ok = owner_takes_requests(m); !ok) return ok.error();
  // A pid names a process of the caller's pid namespace: the live heir or
  // listener with that pid recorded in this namespace.
  for (const heir_view& h : list_heirs(m, false))
    if (h.alive && key_pid(h.key) == pid && in_this_ns(h.pid_ns))
      return request_give_away_to_entry(m, h.index, timeout_ns);
  const owner_view v = view_owner(m);
  if (key_pid(v.key) == pid && in_this_ns(v.pid_ns))
    return fail(errc::invalid_argument, "box '" + m.name + "': process " + std::to_string(pid) + " already owns it");
  bool elsewhere = false;
  for (const heir_view& h : list_heirs(m, false))
    elsewhere |= h.alive && key_pid(h.key) == pid && h.pid_ns != self_pid_ns();
  if (elsewhere)
    return fail(errc::invalid_argument,
                        "box '" + m.name + "': process " + std::to_string(pid) +
                            " is not in this pid namespace; an heir with that pid runs in another one: name it by its "
                            "heir entry (shmbox heirs " + m.name + "; shmbox give-away " + m.name +
                            " --heir N; Box::request_give_away_to_heir)");
  return fail(errc::invalid_argument, "box '" + m.name + "': process " + std::to_string(pid) +
                                                  (!pid_running(pid) ? " is not running in this pid namespace"
                                                            : " is not waiting for it: make it an heir or listener first "
                                                              "(shmbox recv " + m.name + " --heir, Heir::enlist, Heir::listen)"));
}

result<void> request_give_away_to_entry(mapped_box& m, std::uint32_t entry, std::uint64_t timeout_ns) {
  const std::string who = "box '" + m.name + "'";
  if (m.read_only) return fail(errc::permission_denied, who + " was opened read-only; open it with Box::open");
  owner_record* rec = m.owner();
  if (auto ok = owner_takes_requests(m); !ok) return ok.error();
  const owner_view v = view_owner(m);
  if (entry >= kHeirSlots)
    return fail(errc::invalid_argument, who + ": heir entry " + std::to_string(entry) + " does not exist (entries are 0.." +
                                                    std::to_string(kHeirSlots - 1) + ")");
  const std::uint64_t dest = m.heir(entry)->key.load(std::memory_order_acquire);
  const std::uint32_t pid = key_pid(dest);
  if (dest == v.key)
    return fail(errc::invalid_argument, who + ": heir entry " + std::to_string(entry) + " (pid " +
                                                    std::to_string(pid) + ") already owns it");
  if (!role_alive(m, heir_byte(m, entry), dest))
    return fail(errc::invalid_argument, who + ": heir entry " + std::to_string(entry) +
                                                    " holds no live heir or listener: make the process an heir or listener first "
                                                    "(shmbox recv " + m.name + " --heir, Heir::enlist, Heir::listen)");
  // Q1. One request at a time. The asker holds the request's byte while it
  // waits (liveness.hpp L1): a pending request whose byte nobody holds and
  // that the owner is not serving was left by an asker that is gone (killed
  // while it waited, in any pid namespace): take its place.
  const std::uint64_t req = make_request(entry, dest, static_cast<std::uint32_t>(::getpid()));
  role_lock asking;
  for (std::uint64_t cur = rec->request_pid.load(std::memory_order_acquire);;) {
    const bool void_request = cur != 0 && (cur & kRequestServing) == 0 && !lock_held(m, request_byte(m));
    if (cur != 0 && !void_request)
      return fail(errc::invalid_argument, who + ": another give-away request (to pid " +
                                                      std::to_string(request_dest(cur)) + ", asked by pid " +
                                                      std::to_string(request_from(cur)) +
                                                      ") is pending; try again when it is served");
    if (!asking.lock(m, request_byte(m))) return fail_errno(errno, who + ": cannot lock the request");
    if (rec->request_pid.compare_exchange_strong(cur, req, std::memory_order_acq_rel, std::memory_order_acquire)) break;
    asking.reset();  // changed meanwhile: look again
  }
  // Wake the owner wherever it sleeps: in receive or wait (the futex), or in
  // an event loop (its notify_fd: written directly, or by its notify hub on
  // a doorbell ring; notify_hub.hpp). Then watch the owner record.
  wake_owner_waiters(*rec);
  ring_owner_fd(m);
  std::uint64_t deadline = timeout_ns == UINT64_MAX ? UINT64_MAX : mono_ns() + timeout_ns;
  bool extended = false;
  for (;;) {
    // Q3. The request first, then the owner: the owner clears the request only
    // after it saw the key move, so a cleared request read here means the
    // owner record read next shows that move (acquire/release chain).
    const std::uint64_t pending = rec->request_pid.load(std::memory_order_acquire);
    const owner_view now = view_owner(m);
    // A new owner stores its key, then steps the epoch: the key alone already
    // says where the box went; it is given once the epoch has moved too.
    const bool to_dest = now.key != v.key && now.key == dest;
    if (to_dest && now.epoch != v.epoch) return {};  // given
    const bool ours = (pending & ~kRequestServing) == req;
    if (!to_dest && (!ours || now.key != v.key || now.epoch != v.epoch)) {
      // Answered without a transfer to pid (the destination did not take
      // it, or the box changed owner another way).
      return fail(errc::refused, who + ": the owner did not hand the box to pid " + std::to_string(pid) +
                                             (now.key != v.key || now.epoch != v.epoch ? " (the box changed owner meanwhile)"
                                                                                       : " (it was not taken in time)"));
    }
    if (mono_ns() >= deadline) {
      if (to_dest)
        return fail(errc::timed_out, who + ": pid " + std::to_string(pid) +
                                                 " started taking the box over but had not finished in time");
      std::uint64_t mine = req;
      if (rec->request_pid.compare_exchange_strong(mine, 0, std::memory_order_acq_rel, std::memory_order_acquire))
        return fail(errc::timed_out, who + ": the owner did not serve the request in time (it serves requests "
                                                   "when it receives or waits); the request is withdrawn");
      if (mine != (req | kRequestServing)) continue;  // answered just now: look at the answer
      // The owner is handing the box over right now: its offer waits at most
      // 1 s for pid, so wait for the answer a little longer, once.
      if (!extended) {
        extended = true;
        deadline = mono_ns() + 2'000'000'000;
        continue;
      }
      return fail(errc::timed_out, who + ": the owner was still handing the box to pid " + std::to_string(pid) +
                                                 " when the time ran out; it may still be given");
    }
    const std::uint32_t seq = rec->transfer_seq.load(std::memory_order_acquire);
    futex_wait(&rec->transfer_seq, seq, std::min(deadline, mono_ns() + 10'000'000));
  }
}

}  // namespace shmbox::detail
