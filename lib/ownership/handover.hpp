// lib/ownership/handover.hpp - THE HAND-OVER PROTOCOL: every way a box changes owner.
// Owner, Heir and Box call these; none of them touches the owner record's
// hand-over words (key, epoch, offer_*, request_pid, requests_allowed) itself.
//
// ===========================================================================
// THE RULE
// ===========================================================================
// Ownership changes only by a CAS on owner.key performed by the process that
// becomes the owner (from a dead, expired or released owner, or from a giver
// that offered it the box). It then bumps the epoch by a CAS, only while the
// key is still its own (otherwise another heir took the key from it
// meanwhile, e.g. while it was stopped: it returns 0 and waits again), writes
// the transfer record and runs recovery (ring.hpp, R4). No process ever hands
// the box to another by writing its key, so a process that dies half-way
// through a change of owner never leaves an ambiguous state: either the key
// is still the old one, or it is the new owner's, who is alive and finishes,
// or dead and is itself replaced the same way. (A new owner that dies between
// its CAS and its epoch bump leaves the epoch unchanged; it never operated,
// so no operation under that epoch exists to be fenced.)
//
// ===========================================================================
// Steps (fault points in brackets: lib/base/fault.hpp)
// ===========================================================================
// TAKE OVER (take_ownership; by Owner::acquire, an inheriting heir, and the
//   destination of a give-away):
//  O1 lock the owner byte (liveness.hpp L1: before the key is published).
//  O2 CAS key from_key -> me (seq_cst).                [takeover.after_cas]
//  O3 epoch + 1 by CAS, only while the key is still ours (seq_cst, see below).
//  O4 lock the new epoch's actor byte; write the lease clock, state, and the
//     transfer record (seqlock: tr_epoch 0, fields, tr_epoch = epoch, release).
//                                                      [takeover.after_record]
//  O5 an inheriting heir or a listener leaves the heir table (its key
//     cleared; its Heir handle then lets go of the entry's byte, heir.cpp:
//     until then no one enlists there, liveness.hpp L1); transfer_seq+1,
//     futex wake. Then the new Owner handle runs recovery (ring.hpp R4).
// RELEASE (an Owner handle going away): CAS key me -> 0 (release), signal
//  the waiters, then drop the owner byte (L1: after the key is cleared). The
//  first live heir takes the box over (TAKE OVER from key 0).
// GIVE AWAY (the owner hands the box to a waiting heir or listener):
//  G1 giver: offer data, offer epoch, then offer_key = dest (release: pairs
//     with the acquire in G2); signal dest.           [give_away.after_offer]
//  G2 dest: offer_key == me and offer_epoch == epoch: CAS offer_key
//     me -> me | accepted (acq_rel; exclusive against G3's withdrawal),
//                                                      [give_away.after_accept]
//     TAKE OVER from the giver's key, then offer_key = 0.
//                                                      [give_away.before_clear]
//  G3 giver: waits until the key moves (given), the timeout (withdraw: CAS
//     offer_key dest -> 0; fails when dest accepted just now: wait up to 1 s
//     for it to finish), or dest accepted and died (the offer is void).
// REQUEST (any process asks the owner to give the box to heir entry N; the
//  owner must accept requests: requests_allowed == its epoch):
//  Q1 asker: lock the request byte (L1), CAS request_pid 0 -> make_request
//     (acq_rel), wake the owner (wake_seq, both futexes).
//  Q2 owner (serve_request, at every receive and wait): a request marked
//     serving (left by an owner that died serving it) or whose asker is gone
//     (its byte is free) is void: clear it. Otherwise mark it serving (CAS),
//     GIVE AWAY to the entry if it still names the asked-for key, then clear
//     it (acq_rel) and bump transfer_seq.
//  Q3 asker: reads request_pid first, then the owner record: the owner
//     clears the request only after it saw the key move, so a cleared request
//     means the record read next shows that move (acquire/release chain).
//     Given = key at dest and the epoch moved.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "segment/liveness.hpp"
#include "ring/ring.hpp"
#include "segment/segment.hpp"
#include "shmbox/error.hpp"

namespace shmbox::detail {

// O1-O5: this process becomes the owner: owner byte locked through `lock`,
// CAS key from_key -> self, epoch + 1, the epoch's actor byte locked,
// transfer record (unless why is none), own heir/listener entry handled,
// others signalled. Returns the new epoch, or 0 when the CAS lost (then the
// owner byte is unlocked again). The caller's Owner keeps `lock`.
std::uint64_t take_ownership(mapped_box& m, std::uint64_t from_key, transfer_reason why, std::string_view data,
                             role_lock& lock) noexcept;

// Owner::acquire: the box is free (no owner, a dead or expired one, and no
// live heir ahead of us): take it. Returns the new epoch, `lease` holding
// the owner's locks; or why not, in words that say what to do.
result<std::uint64_t> acquire_ownership(mapped_box& m, role_lock& lease);

// An heir's (or listener's) turn: accepts an offer made to `key` (G2), or,
// for an heir, inherits a box whose owner is gone if it is the first live
// heir. Returns the new epoch, `taking` holding the owner's locks; or 0.
std::uint64_t heir_take(mapped_box& m, std::uint64_t key, bool listener, std::string_view data, role_lock& taking);

// Still the owner (key and epoch ours)? When not (for good: epochs only
// grow), lets go of the owner byte so that it speaks only for the owner
// that holds the key. Never for a handle inherited through fork
// (process.hpp H3): release_ownership and give-away do nothing with it.
bool still_owner(const owner_ctx& o, role_lock& lease) noexcept;

// RELEASE: gives the box back if it is still ours (key -> 0), signals the
// waiters, drops `lease`.
void release_ownership(owner_ctx& o, role_lock& lease) noexcept;

// GIVE AWAY (G1, G3) to a waiting heir or listener, named by its key, heir
// entry, or pid (of this pid namespace). true: given (this handle is no
// longer the owner); false: o.last_error says why.
bool give_away_to_key(owner_ctx& o, role_lock& lease, std::uint64_t dest, const std::string& dest_name,
                      std::string_view data, std::uint64_t timeout_ns);
bool give_away_to_entry(owner_ctx& o, role_lock& lease, std::uint32_t entry, std::string_view data,
                        std::uint64_t timeout_ns);
bool give_away_to_pid(owner_ctx& o, role_lock& lease, std::uint32_t pid, std::string_view data,
                      std::uint64_t timeout_ns);

// Requests. The owner of `epoch` accepts them (epoch 0: refuses).
void allow_requests(mapped_box& m, std::uint64_t epoch) noexcept;
bool accepts_requests(const mapped_box& m, std::uint64_t epoch) noexcept;
// The pending request word (0: none), for the owner's notify_fd thread.
std::uint64_t pending_request(const mapped_box& m) noexcept;
// Q2: serves a pending request; true when the box was given away.
bool serve_request(owner_ctx& o, role_lock& lease);
// Q1, Q3: asks the owner to give the box to heir entry `entry`, or to the
// heir or listener with pid `pid` (of this pid namespace), and waits for the
// answer.
result<void> request_give_away_to_entry(mapped_box& m, std::uint32_t entry, std::uint64_t timeout_ns);
result<void> request_give_away_to_pid(mapped_box& m, std::uint32_t pid, std::uint64_t timeout_ns);

}  // namespace shmbox::detail
