// lib/ring.cpp - THE SLOT PROTOCOL of shmbox.
//
// ===========================================================================
// Actors and words
// ===========================================================================
// A lane is a ring of `cap` fixed slots. Each slot starts with a 64-bit
// sequence word `seq` = (position48, state, actor) (layout.hpp). Every change
// of a slot is ONE atomic store or CAS of that word, so a process that dies
// between two instructions leaves every slot in a state that names who holds
// it. Actors: producer entries (actor = entry + 1) and the owner of epoch e
// (actor = kOwnerActorBase + e % 16).
//
// Before an actor makes a change that must also be counted, it writes the
// counter value it starts from (`op_before`) and then an op word (kind, lane,
// target) in its own record. Counters are single-writer words in the actor's
// own record. A repairer that finds a slot held by a dead actor reads the op
// to finish the count exactly once: CAS(counter, before, before + 1) is a
// no-op if the dead actor had counted already. Liveness is pid + start time
// (process.hpp): slow or stopped is alive; only a dead process is repaired.
//
// ===========================================================================
// FIFO lanes (reject, drop_newest, drop_oldest, block)
// ===========================================================================
// Position p (64-bit, never wraps) lives in slot p % cap. `tail` = next
// position << 1 | owner-sleeping bit. `head` = first position the owner has
// not finished. Slot states for position p:
//   EMPTY(p)      free for the producer that claims p (or claimed, being written)
//   FULL(p, w)    published by writer w
//   TAKEN(p, a)   held by actor a: the owner reading it, or a producer
//                 evicting (drop_oldest) or repairing (dead writer) it
//   EMPTY(p+cap)  finished: free for the next lap
//
// POST (producer P, lane full iff slot(t) still holds t - cap):
//  P1 t = tail >> 1; s = slot(t).seq (acquire).
//  P2 if s == EMPTY(t): op = claim(t) in P's entry (one store).
//       dies here: nothing claimed; the stale claim(t) names a dead process,
//       which only ever adds a dead claimant to the check in R1.
//  P3   CAS tail t -> t+1 (seq_cst), keeping the owner-sleeping bit as it
//       is. Fails: back to P1.
//       dies here: position t is claimed and slot(t) stays EMPTY(t): the
//       owner (or a producer one lap later) stalls at t. Repair R1.
//  P4   P.stored++, write payload and length.
//       dies here: as P3 (R1). Fault points producer.after_claim,
//       producer.mid_payload, producer.before_publish.
//  P5   seq = FULL(t, P) (release: publishes payload and length).
//       dies here: the message is stored and will be delivered.
//  P6   if the tail had the owner-sleeping bit: bump owner.wake_seq,
//       futex_wake. Only the owner clears the bit (when it wakes), so every
//       claimant until then wakes it: a claimant that dies before P6 cannot
//       take the wake-up with it; the next post wakes the owner, which then
//       repairs the dead claim (R1). If no post follows, there is nothing to
//       deliver and the hole is repaired when the owner next looks.
//       dies between P5 and P6 (fault point producer.before_wake) with the
//       owner asleep and no post following: the owner's sleep is cut into
//       250 ms slices, after each of which it looks at its lanes (and an
//       event-loop owner's waker thread makes notify_fd readable when the
//       armed box holds messages). Found by model/ring.pml.
//  Full (s == FULL(t-cap) or busy): reject -> full, drop_newest -> dropped,
//  block -> sleep on lane.space_seq (SYNC POINT A) and retry, drop_oldest ->
//  EVICT. Busy (TAKEN(t-cap) or EMPTY(t-cap) being written): reject/drop_newest
//  answer as full; block/drop_oldest wait, repairing dead holders (R1-R3).
//
// EVICT (drop_oldest, producer P, oldest stored position q = t - cap):
//  E1 op_before = P.evicted; op = evict(q).
//  E2 CAS seq FULL(q) -> TAKEN(q, P). Fails (the owner took it, or another
//     evictor did): back to P1.
//       dies here: slot TAKEN(q, P), P dead. Repair R2.
//  E3 P.evicted++.        dies here: R2 (counts it if E3 did not).
//  E4 seq = EMPTY(q + cap) (release). The claim at P1 now finds slot free.
//     Another producer's P1-P3 may claim that free slot first (its post is a
//     plain store, no eviction): we are back at P1 with the lane full and
//     evict again. So one post may evict several messages. E3 also counts
//     each eviction in the caller's private p.evicted, which the post reports
//     (Producer::last_evicted(); status stored_evicted when it is not 0): the
//     producers' reports add up to dropped_oldest exactly. (Before, a post
//     returned stored_evicted once however many it evicted, and an eviction
//     in R3 was not reported at all.)
//  Evictors never wait for the owner: the owner TAKES a slot before copying
//  it, so an evictor can never overwrite bytes the owner is reading; it
//  evicts only FULL slots. So the owner never returns torn bytes.
//
// TAKE (owner O of epoch e, from its private cursor p = head), per message:
//  T1 s = slot(p).seq (acquire; pairs with P5).
//     EMPTY(p), tail <= p: lane empty, stop.
//     EMPTY(p), tail > p: claimed, not yet published: stop (busy); after
//       kRepairGraceNs check the claimant (R1). (A polling owner reads the
//       tail, the producers' hottest line, only on every 64th empty poll and
//       before it sleeps; in between EMPTY(p) just means "nothing yet".)
//     FULL(p): continue at T2.   TAKEN(p, O): a message re-taken from a dead
//       owner at acquire: deliver it flagged redelivered.
//     TAKEN(p, other) or slot already past p: someone else decided p's fate
//       (eviction, repair): skip p.
//     Slot still at p - cap: a skipped evictor/repairer has not finished the
//       previous lap yet, so p is not claimed: stop.
//  T2 owner.op_before = delivered; owner.op = recv(p).
//  T3 seq = TAKEN(p, O): a CAS in drop_oldest lanes (evictors race for FULL
//     slots), a release store otherwise (no one else writes a FULL slot).
//  T4 copy payload (length checked against the slot size first).
//       dies in T3..T4: slot TAKEN(p, O) and delivered == op_before: the next
//       owner re-takes it and delivers it again, flagged (R4).
//       Fault point owner.after_take.
//  T5 delivered = op_before + 1: THE COMMIT (one store, the owner's own line).
//       dies here: delivered != op_before: the next owner frees the slot
//       without delivering it again (R4). Fault point owner.after_commit.
//  T6 seq = EMPTY(p + cap) (release: our payload read happens before the next
//     writer's payload writes; pairs with P1's acquire). Freeing each slot as
//     soon as it is committed lets the producer refill it while the owner
//     reads the next one: the two cores work in parallel.
//  T7 (once per call) head = p (release); owner.op = none; if the lane has
//     waiters (SYNC POINT B) wake lane.space_seq.
//  A receive call commits each message as it copies it out: a process that
//  dies inside the call loses (at most) what it had copied but not yet
//  returned, exactly like a process that dies just after the call returns.
//  Each owner epoch e has its own actor record (op words and counters,
//  index e % 16): an owner never writes another owner's words.
//
// TAKE, HOLD (Owner::read, and every receive of a lease box):
//  H1 CAS FULL(p) -> TAKEN(p, O) (a newer owner, evictors and lifo replacers
//     may race for the slot), copy, remember it in o.pending. Nothing counted.
//       dies here: TAKEN(p, O), uncommitted: R4 delivers it again, flagged.
//  Then COMMIT (owner_commit, below): C1 announce, C2 CAS TAKEN -> DONE per
//  slot, C3 count, C4 free. Why a CAS at C2: only with a lease can an owner
//  lose the box while alive (stopped past its deadline); its heir re-takes
//  its TAKEN slots (R4) by CAS, so the stale owner's C2 fails and it never
//  hands out a message the heir delivers. A lease box's receive commits the
//  held messages before returning them, and returns only those it committed.
//  An owner never publishes a head past a position it still holds. But with a
//  lease, a stale owner still running may publish its own cursor past
//  positions its successor holds; so a lease box's new owner recovers over
//  the whole lane [tail - cap, tail), not from the head (R4). And a take loop
//  that meets a NEWER owner's TAKEN slot stops: it is the stale one
//  (adopt_gone_owner_slot). Both found by model/lease.pml.

// REPAIRS (anyone who finds a slot stuck; rate limited; never a live holder)
//  R1 EMPTY(q), tail > q, stuck for kRepairGraceNs: look for producer
//     entries whose op is claim(q). If one is alive, wait: it is the claimant
//     or is about to retry elsewhere (slow is not dead). If all are dead:
//     repairer R writes op_before = R.abandoned, op = repair(q), CAS
//     EMPTY(q) -> TAKEN(q, R), R.abandoned++, seq = EMPTY(q + cap).
//     If R dies mid-way: slot TAKEN(q, R), R dead: R2 finishes it.
//     No claimant at all (only a scribbled table): repaired after
//     kOrphanClaimNs.
//  R2 TAKEN(q, X), X a dead producer: X's op says evict(q) or repair(q);
//     CAS(X's counter, before, before + 1), then CAS seq -> EMPTY(q + cap).
//     Idempotent: two repairers cannot count twice.
//  R3 TAKEN(q, owner of an older epoch, or a dead owner): a drop_oldest
//     producer that needs the slot looks at the owner's op: committed
//     (delivered != op_before) -> just free it; repair(q) -> finish that
//     repair; otherwise evict it (E1-E4, counted as dropped_oldest).
//  R4 At acquire, the new owner scans [head, tail) (lease box: [tail - cap,
//     tail); lifo lane: every slot). DONE(_, old owner) whose
//     process is dead: committed; counted once for all of them (op_before of
//     the old actor), then freed (a stale owner that still runs finishes its
//     own). TAKEN(_, old owner): committed by the fast path (its recv op and
//     delivered != op_before) -> free; repair op -> finish it; otherwise CAS
//     to TAKEN(_, new owner) and deliver again with the redelivered flag.
//  A producer entry held by a dead process is reused only after its pending
//  op has been finished by the new holder (R1-R2 on that op).
//
// WAKE-UPS
//  The owner sleeps only when every lane is empty: it reads owner.wake_seq,
//  then CASes the sleeping bit into each lane's tail (fails if a producer
//  claimed meanwhile), then futex-waits on wake_seq. Every claim CAS (P3)
//  sees the bit and wakes it (P6) until the owner, awake, clears the bit.
//  (A producer must never clear it: it could clear the owner's next arming,
//  and a claimant that cleared it and died would take the wake-up along.)
//  Both sides use the RMW they already do, so a post makes no system call
//  and no extra fence when nobody sleeps. A wake-up lost with a producer that
//  died before P6 costs at most one sleep slice (250 ms).
//  Producers waiting for space: SYNC POINT A (producer: space_wanted = 1,
//  fence, re-check slot) pairs with SYNC POINT B (owner: free slots, fence,
//  read space_wanted): one of the two sees the other's store.
//
// ===========================================================================
// lifo lanes (pobox's stack)
// ===========================================================================
// No positions: each push takes a 48-bit stamp from lane.lifo_stamp
// (fetch_add) and writes it into the slot's seq, so "newest" = largest stamp.
// Slot states: FREE, WRITING(stamp, P), FULL(stamp, P), TAKEN(stamp, actor).
//  L1 push: find a FREE slot; op_before = P.stored; op = lifo_push(i);
//     CAS FREE -> WRITING(stamp, P); P.stored++; write; publish with an
//     exchange (seq_cst) to FULL(stamp, P); then read lifo_stamp (SYNC POINT C)
//     and wake the owner if its sleeping bit is set (only the owner clears it).
//  L2 full (no FREE slot): replace the FULL slot with the largest stamp:
//     op_before = (stored, replaced); op = lifo_replace(i); CAS FULL ->
//     WRITING(stamp, P); count both; write; publish.
//       dies after L1/L2's CAS: WRITING(stamp, P), P dead: the repairer
//       finishes P's counts from its op, then abandons the slot (counted
//       abandoned) -> FREE.
//  L3 pop (owner): the FULL slot with the largest stamp; op = lifo_pop(i);
//     CAS FULL -> TAKEN(stamp, O); copy; delivered++ (commit); seq = FREE.
//     A replacer that won the slot first makes the CAS fail: look again.
//     Dies before the commit: R4 delivers it again; after: R4 frees it.
//  Owner sleep: CAS the bit into lifo_stamp, then re-scan every slot
//  (SYNC POINT D, pairs with C): a push either is seen by the scan or sees
//  the bit. Push and pop scan the lane: O(capacity); lifo boxes are meant
//  to be small ("keep the latest N").
// ===========================================================================
#include "ring.hpp"
#include "ring_fast.hpp"

#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <ctime>
#include <string>
#include <utility>

#include "errors.hpp"
#include "fault.hpp"
#include "futex.hpp"
#include "liveness.hpp"
#include "process.hpp"

namespace shmbox::detail {
namespace {

constexpr std::uint64_t kTargetMask = (1ull << 56) - 1;  // op targets hold 56 bits

inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

void sleep_ns(std::uint64_t ns) noexcept {
  timespec ts{static_cast<time_t>(ns / 1'000'000'000ull), static_cast<long>(ns % 1'000'000'000ull)};
  ::nanosleep(&ts, nullptr);
}

// Counters are single-writer words: a plain increment, no RMW.
// relaxed: read only by inspectors summing counters, and by repairers of a
// dead writer (which has stopped writing).
inline void bump(a64& c, std::uint64_t by = 1) noexcept {
  c.store(c.load(std::memory_order_relaxed) + by, std::memory_order_relaxed);
}

// Finishes a dead actor's count: no-op when it had counted already.
inline void finish_count(a64& c, std::uint64_t before) noexcept {
  std::uint64_t expected = before;
  c.compare_exchange_strong(expected, before + 1, std::memory_order_relaxed);
}

void wake_owner(mapped_box& m) noexcept {
  owner_record* o = m.owner();
  // release: the message we published is visible to the owner once it sees
  // wake_seq change (it re-reads the slot with acquire anyway).
  o->wake_seq.fetch_add(1, std::memory_order_release);
  futex_wake(&o->wake_seq);
  o->wake_calls.fetch_add(1, std::memory_order_relaxed);  // relaxed: diagnostic counter
}

// The owner's notify eventfd as a descriptor of this process, or -1.
// pidfd_getfd once per owner (same user or CAP_SYS_PTRACE); the owner's
// waker thread covers producers that cannot do this.
int owner_eventfd(producer_ctx& p) noexcept {
  const owner_record* o = p.m->owner();
  const std::uint32_t num = o->notify_fd_plus1.load(std::memory_order_acquire);
  const std::uint64_t key = o->key.load(std::memory_order_acquire);
  if (num == 0 || key == 0) return -1;
  // Had (or refused) for this owner and descriptor already.
  if (p.owner_fd_key == key && p.owner_fd_num == num) return p.owner_fd;
  if (p.owner_fd >= 0) ::close(p.owner_fd);
  p.owner_fd = -1;
  p.owner_fd_key = key;
  p.owner_fd_num = num;
  // Only an owner of our pid namespace (its pid means it here); eventfd_of
  // checks that it maps this very segment.
  if (!in_this_ns(o->owner_pid_ns.load(std::memory_order_relaxed))) return -1;
  p.owner_fd = eventfd_of(key_pid(key), static_cast<int>(num - 1), p.m->dev, p.m->ino);
  return p.owner_fd;
}

// P6 (and L1's wake): the owner's eventfd when it has one (first: an owner in
// an event loop wakes without a thread hop), then the futex. A producer that
// cannot write the eventfd (another user) turns the owner's waker thread on.
void wake_owner(producer_ctx& p) noexcept {
  SHMBOX_FAULT("producer.before_wake");  // published, owner asleep: its slice or waker thread finds it
  owner_record* o = p.m->owner();
  // The arming this wake-up is the notification of (see below).
  const std::uint32_t armed = o->state.load(std::memory_order_relaxed);
  if (o->notify_fd_plus1.load(std::memory_order_acquire) != 0) {
    const int fd = owner_eventfd(p);
    if (fd >= 0) {
      const std::uint64_t one = 1;
      [[maybe_unused]] const ssize_t n = ::write(fd, &one, sizeof one);
    } else if (o->fd_fallback.load(std::memory_order_relaxed) == 0) {
      o->fd_fallback.store(1, std::memory_order_release);
      futex_wake(&o->fd_fallback);
    }
  }
  wake_owner(*p.m);
  // pobox: an owner in notify reverts to passive as soon as the notification
  // is sent, and this wake-up is the notification. After the wake, so that a
  // producer that dies here leaves the state notify, which the owner's wait()
  // (and its waker thread's lost-wake check) still act on.
  // A CAS from the word read before the wake-up: if the owner took the
  // message and armed again meanwhile (another arming count), this late
  // revert must not undo that arming.
  // relaxed: the state is shown to inspectors; the owner's wait() decides
  // from its own arming and the slots, not from this word.
  if (state_mode(armed) == owner_state::notify) {
    std::uint32_t expected = armed;
    o->state.compare_exchange_strong(expected, (armed & ~3u) | static_cast<std::uint32_t>(owner_state::passive),
                                     std::memory_order_relaxed);
  }
}

// The full 64-bit position whose low 56 bits are `target`, at or below `near`.
std::uint64_t unfold_target(std::uint64_t target, std::uint64_t near) noexcept {
  return near - ((near - target) & kTargetMask);
}

enum class holder { alive, dead, invalid };

holder actor_state(const mapped_box& m, std::uint32_t actor) noexcept {
  if (actor >= 1 && actor <= m.max_producers()) {
    // acquire: pairs with the CAS that installed the key
    return role_alive(m, producer_byte(m, actor - 1), m.producer(actor - 1)->key.load(std::memory_order_acquire))
               ? holder::alive
               : holder::dead;
  }
  if (is_owner_actor(actor)) {
    const owner_record* o = m.owner();
    const std::uint64_t key = o->key.load(std::memory_order_acquire);
    const std::uint64_t epoch = o->epoch.load(std::memory_order_acquire);
    // An actor of another epoch is an owner that is gone (it may still run,
    // stale, after its lease expired; it can no longer commit a TAKEN slot).
    // During a takeover (key changed, epoch not yet) this errs towards
    // "alive": a short wait.
    if (owner_actor_id(epoch) != actor) return holder::dead;
    return role_alive(m, owner_byte(m), key) ? holder::alive : holder::dead;
  }
  return holder::invalid;
}

enum class claim_verdict { live, dead, none };

// R1: who announced a claim of FIFO position q in `lane`? The caller has
// loaded the tail (seq_cst) and seen it past q, so every claimant's op store,
// which precedes its tail CAS, is visible here.
// A claim is op claim(q), a run claim_run covering q (post_batch), or
// abort(q) (a loan being given back, not yet taken back by its CAS).
bool op_claims(std::uint64_t op, std::uint32_t lane, std::uint64_t q) noexcept {
  if (op == make_op(op_kind::claim, lane, q) || op == make_op(op_kind::abort, lane, q)) return true;
  if (op_kind_of(op) != op_kind::claim_run || op_lane(op) != lane) return false;
  // Positions modulo 2^48, as slots store them.
  return ((q - run_first(op_target(op))) & kPosMask) < run_length(op_target(op));
}

claim_verdict claimants_of(const mapped_box& m, std::uint32_t lane, std::uint64_t q, std::int64_t exclude) noexcept {
  bool any = false;
  for (std::uint32_t i = 0; i < m.max_producers(); ++i) {
    if (static_cast<std::int64_t>(i) == exclude) continue;
    const producer_entry* pe = m.producer(i);
    if (!op_claims(pe->op.load(std::memory_order_acquire), lane, q)) continue;
    if (role_alive(m, producer_byte(m, i), pe->key.load(std::memory_order_acquire))) return claim_verdict::live;
    any = true;
  }
  return any ? claim_verdict::dead : claim_verdict::none;
}

// Abandons the message (or hole) at FIFO position q, observed as `seen`:
// counted once, as abandoned, by repairer r. See R1.
bool abandon_fifo(const lane_view& L, std::uint64_t q, std::uint64_t seen, const repairer& r) noexcept {
  a64& counter = *r.abandoned[L.index];
  const std::uint64_t before = counter.load(std::memory_order_relaxed);
  r.op_before->store(before, std::memory_order_relaxed);
  // relaxed: published by the seq_cst CAS below to whoever sees the slot held by r
  r.op->store(make_op(op_kind::repair, L.index, q), std::memory_order_relaxed);
  slot_header* s = L.slot_for(q);
  std::uint64_t expected = seen;
  const bool won = s->seq.compare_exchange_strong(expected, make_seq(q, slot_state::taken, r.actor),
                                                  std::memory_order_seq_cst, std::memory_order_relaxed);
  if (won) {
    counter.store(before + 1, std::memory_order_relaxed);
    // release: pairs with the acquire of the producer that claims q + cap
    s->seq.store(make_seq(q + L.capacity, slot_state::empty, kActorNone), std::memory_order_release);
  }
  r.op->store(0, std::memory_order_relaxed);
  return won;
}

// Same for a lifo slot (it becomes FREE).
bool abandon_lifo(const lane_view& L, std::uint32_t i, std::uint64_t seen, const repairer& r) noexcept {
  a64& counter = *r.abandoned[L.index];
  const std::uint64_t before = counter.load(std::memory_order_relaxed);
  r.op_before->store(before, std::memory_order_relaxed);
  r.op->store(make_op(op_kind::repair, L.index, i), std::memory_order_relaxed);  // relaxed: published by the CAS
  slot_header* s = L.slot_at_index(i);
  std::uint64_t expected = seen;
  const bool won = s->seq.compare_exchange_strong(expected, make_seq(seq_pos(seen), slot_state::taken, r.actor),
                                                  std::memory_order_seq_cst, std::memory_order_relaxed);
  if (won) {
    counter.store(before + 1, std::memory_order_relaxed);
    s->seq.store(make_seq(seq_pos(seen), slot_state::free, kActorNone), std::memory_order_release);
  }
  r.op->store(0, std::memory_order_relaxed);
  return won;
}

// The slot's next state once its current holder is done with it.
std::uint64_t finished_seq(const lane_view& L, std::uint64_t seq) noexcept {
  return L.is_lifo() ? make_seq(seq_pos(seq), slot_state::free, kActorNone)
                     : make_seq(seq_pos(seq) + L.capacity, slot_state::empty, kActorNone);
}

// R2 (and the lifo equivalent): slot `idx` (FIFO: position `pos`) is held by
// dead producer entry x - 1. Finish its op; returns true if the slot changed.
bool complete_dead_producer(mapped_box& m, const lane_view& L, std::uint64_t pos, std::uint32_t idx, std::uint64_t seen,
                            std::uint32_t x, const repairer& r) noexcept {
  const std::uint32_t e = x - 1;
  const producer_entry* pe = m.producer(e);
  producer_lane_counters* pc = m.producer_counters(e, L.index);
  const std::uint64_t op = pe->op.load(std::memory_order_acquire);
  const std::uint64_t before_a = pe->op_before_a.load(std::memory_order_acquire);
  const std::uint64_t before_b = pe->op_before_b.load(std::memory_order_acquire);
  const std::uint64_t target = L.is_lifo() ? idx : (pos & kTargetMask);
  const bool mine = op_lane(op) == L.index && op_target(op) == target;
  const slot_state st = seq_state(seen);
  slot_header* s = L.is_lifo() ? L.slot_at_index(idx) : L.slot_for(pos);

  const op_kind kind = op_kind_of(op);
  if (st == slot_state::taken && mine && (kind == op_kind::evict || kind == op_kind::repair || kind == op_kind::abort)) {
    finish_count(kind == op_kind::evict ? pc->evicted : kind == op_kind::abort ? pc->aborted : pc->abandoned, before_a);
    std::uint64_t expected = seen;
    return s->seq.compare_exchange_strong(expected, finished_seq(L, seen), std::memory_order_release,
                                          std::memory_order_relaxed);
  }
  if (st == slot_state::writing && mine) {
    // lifo: the writer died before publishing. Its message was stored (and,
    // for a replace, the old top was replaced): finish those counts, then
    // abandon the unpublished message.
    if (op_kind_of(op) == op_kind::lifo_push || op_kind_of(op) == op_kind::lifo_replace) finish_count(pc->stored, before_a);
    if (op_kind_of(op) == op_kind::lifo_replace) finish_count(pc->replaced, before_b);
  }
  // Unpublished, or held by x although x's op does not describe it (only a
  // scribbled segment does that): whatever it held is lost, counted abandoned.
  return L.is_lifo() ? abandon_lifo(L, idx, seen, r) : abandon_fifo(L, pos, seen, r);
}

// A slot TAKEN by owner actor `actor`, which is gone; `target` is its FIFO
// position or lifo slot index. Returns: 1 = that owner was repairing it,
// 2 = it had committed it (fast path: counted as delivered), 3 = uncommitted
// (deliver it again, or evict it).
int dead_owner_op(const mapped_box& m, const lane_view& L, std::uint64_t target, std::uint32_t actor) noexcept {
  const std::uint32_t idx = owner_actor_index(actor);
  const owner_actor* ar = m.actor(idx);
  const std::uint64_t op = ar->op.load(std::memory_order_acquire);
  const std::uint64_t before = ar->op_before.load(std::memory_order_acquire);
  if (op_lane(op) != L.index) return 3;
  // Positions are compared modulo 2^48, as slots store them.
  const bool same = (op_target(op) & kPosMask) == (target & kPosMask);
  switch (op_kind_of(op)) {
    case op_kind::repair:
      return same ? 1 : 3;
    case op_kind::recv:
    case op_kind::lifo_pop:
      if (!same) return 3;  // the op is about another slot
      return m.actor_counters(idx, L.index)->delivered.load(std::memory_order_acquire) != before ? 2 : 3;
    case op_kind::filter_drop:
      if (!same) return 3;
      return m.actor_counters(idx, L.index)->filtered.load(std::memory_order_acquire) != before ? 2 : 3;
    default:
      return 3;  // commit: a TAKEN slot is not committed yet (DONE ones are)
  }
}

void finish_dead_owner_repair(mapped_box& m, const lane_view& L, std::uint32_t actor) noexcept {
  const std::uint32_t idx = owner_actor_index(actor);
  finish_count(m.actor_counters(idx, L.index)->abandoned, m.actor(idx)->op_before.load(std::memory_order_acquire));
}

bool evict_fifo(producer_ctx& p, const lane_view& L, std::uint64_t q, std::uint64_t seen) noexcept;
bool finish_dead_commit(mapped_box& m, const lane_view& L, std::uint32_t actor) noexcept;

// Looks at a FIFO slot stuck at position q (seen = its seq) and repairs it if
// its holder is dead. `p` (may be null) allows R3's eviction of a dead
// owner's uncommitted message (drop_oldest producers only).
bool repair_fifo_slot(mapped_box& m, const lane_view& L, std::uint64_t q, std::uint64_t seen, const repairer& r,
                      producer_ctx* p, std::int64_t exclude, std::uint64_t stuck_since, std::uint64_t now) noexcept {
  slot_header* s = L.slot_for(q);
  const slot_state st = seq_state(seen);
  const std::uint32_t actor = seq_actor(seen);
  if (st == slot_state::empty) {
    // seq_cst: see claimants_of
    if ((L.hdr->tail.load(std::memory_order_seq_cst) >> 1) <= q) return false;
    const claim_verdict v = claimants_of(m, L.index, q, exclude);
    if (v == claim_verdict::live) return false;
    if (v == claim_verdict::none && now - stuck_since < kOrphanClaimNs) return false;
    if (s->seq.load(std::memory_order_acquire) != seen) return true;  // published meanwhile
    return abandon_fifo(L, q, seen, r);
  }
  if (st == slot_state::done || st == slot_state::dropped) {
    // Committed by an owner, not yet freed: finished by that owner, or (dead) here.
    return is_owner_actor(actor) && finish_dead_commit(m, L, actor);
  }
  if (st != slot_state::taken) return false;
  const holder h = actor_state(m, actor);
  if (h == holder::alive) return false;
  if (h == holder::invalid) return abandon_fifo(L, q, seen, r);
  if (!is_owner_actor(actor)) return complete_dead_producer(m, L, q, 0, seen, actor, r);
  // R3: a gone owner's slot.
  switch (dead_owner_op(m, L, q & kTargetMask, actor)) {
    case 1: {
      finish_dead_owner_repair(m, L, actor);
      std::uint64_t expected = seen;
      return s->seq.compare_exchange_strong(expected, finished_seq(L, seen), std::memory_order_release,
                                            std::memory_order_relaxed);
    }
    case 2: {
      std::uint64_t expected = seen;
      return s->seq.compare_exchange_strong(expected, finished_seq(L, seen), std::memory_order_release,
                                            std::memory_order_relaxed);
    }
    default:
      // Uncommitted: the next owner will deliver it again. Only an evictor
      // that needs the slot now may drop it instead (it is the oldest).
      return p != nullptr && evict_fifo(*p, L, q, seen);
  }
}

// ---------------------------------------------------------------------------
// Producer side
// ---------------------------------------------------------------------------

// E1-E4. Returns true when the slot of q is now free for q + cap.
bool evict_fifo(producer_ctx& p, const lane_view& L, std::uint64_t q, std::uint64_t seen) noexcept {
  producer_lane_counters* c = p.m->producer_counters(p.entry, L.index);
  const std::uint64_t before = c->evicted.load(std::memory_order_relaxed);
  p.pe->op_before_a.store(before, std::memory_order_relaxed);
  // relaxed: published by the seq_cst CAS below to whoever sees the slot taken by us
  p.pe->op.store(make_op(op_kind::evict, L.index, q), std::memory_order_relaxed);
  slot_header* s = L.slot_for(q);
  std::uint64_t expected = seen;
  if (!s->seq.compare_exchange_strong(expected, make_seq(q, slot_state::taken, p.rep.actor), std::memory_order_seq_cst,
                                      std::memory_order_relaxed))
    return false;
  if (p.capture) {  // ours now: stable until we free it
    const std::uint32_t len = std::min(s->length.load(std::memory_order_relaxed), L.payload);
    p.captured.emplace_back(reinterpret_cast<const char*>(lane_view::payload_of(s)), len);
  }
  c->evicted.store(before + 1, std::memory_order_relaxed);
  ++p.evicted;  // the caller's own count: what its post reports (E3)
  SHMBOX_FAULT("producer.mid_evict");
  // release: pairs with the acquire of the producer claiming q + cap
  s->seq.store(make_seq(q + L.capacity, slot_state::empty, kActorNone), std::memory_order_release);
  return true;
}

void write_payload(slot_header* s, const void* data, std::size_t size) noexcept {
  std::byte* dst = lane_view::payload_of(s);
#if defined(SHMBOX_FAULT_INJECTION)
  if (g_fault_armed) {
    const std::size_t half = size / 2;
    if (half != 0) std::memcpy(dst, data, half);  // (data may be null when size is 0)
    SHMBOX_FAULT("producer.mid_payload");
    if (size != half) std::memcpy(dst + half, static_cast<const std::byte*>(data) + half, size - half);
    return;
  }
#endif
  if (size != 0) std::memcpy(dst, data, size);
}

// A producer stuck behind slot seq `seen` of position q: repair after the
// grace period, at most once per kRepairIntervalNs per handle.
void producer_maybe_repair(producer_ctx& p, const lane_view& L, std::uint64_t q, std::uint64_t seen,
                           std::uint64_t& stuck_since) noexcept {
  // A busy slot is nearly always an owner or writer a few ns from done: look
  // at the clock only every 64th time (a busy retry loop stays cheap).
  // (A post that has been waiting a while, stuck_since != 0, always looks.)
  if (stuck_since == 0 && (++p.busy_seen & 63) != 0) return;
  const std::uint64_t now = mono_ns();
  if (stuck_since == 0) {
    stuck_since = now;
    return;
  }
  if (now - stuck_since < kRepairGraceNs || now < p.next_repair_ns) return;
  p.next_repair_ns = now + kRepairIntervalNs;
  repair_fifo_slot(*p.m, L, q, seen, p.rep, L.pol == policy::drop_oldest ? &p : nullptr, -1, stuck_since, now);
}

// How long a producer has been waiting for space, across the retries of one post.
struct space_wait {
  unsigned spins = 0;
  std::uint64_t started_ns = 0;
  std::uint64_t spin_ns = 0;  // poll this long before sleeping (the adaptive wait)
  std::uint64_t next_yield_ns = 0;
};

// Waits for the slot of position t to be freed. false: the deadline passed.
// First spins briefly (the holder is usually mid-copy), then polls for up to
// w.spin_ns (the box's or the call's adaptive wait: an owner draining a busy
// box frees a slot within microseconds), then sleeps on the lane's futex in
// 10 ms slices.
bool wait_for_space(const lane_view& L, std::uint64_t t, std::uint64_t seen, lazy_deadline& deadline,
                    space_wait& w) noexcept {
  if (deadline.timeout_ns == 0) return false;  // no wait at all
  if (w.spins < 64) {
    ++w.spins;
    cpu_relax();
    return true;
  }
  const std::uint64_t now = mono_ns();
  if (now >= deadline.get()) return false;
  if (w.started_ns == 0) {
    w.started_ns = now;
    w.next_yield_ns = now + 5'000;
  }
  if (now - w.started_ns < w.spin_ns) {
    for (int i = 0; i < 16; ++i) cpu_relax();
    if (now >= w.next_yield_ns) {  // the owner may share our CPU: let it run now and then
      ::sched_yield();
      w.next_yield_ns = now + 5'000;
    }
    return true;
  }
  lane_header* h = L.hdr;
  const std::uint32_t sp = h->space_seq.load(std::memory_order_acquire);
  h->space_wanted.store(1, std::memory_order_relaxed);
  // SYNC POINT A: StoreLoad between space_wanted = 1 and the re-check of the
  // slot; pairs with SYNC POINT B in wake_space_waiters().
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (L.slot_for(t)->seq.load(std::memory_order_relaxed) != seen ||
      (h->tail.load(std::memory_order_relaxed) >> 1) != t)
    return true;
  // Sleep in slices so that a dead holder is noticed and repaired.
  futex_wait(&h->space_seq, sp, std::min(deadline.get(), now + 10'000'000));
  return true;
}

// P1-P4 without the payload: claims position t for one message. stored /
// stored_evicted with `out` filled, or the outcome a post gets (counted).
post_status fifo_claim(producer_ctx& p, const lane_view& L, producer_lane_counters* c, lazy_deadline& deadline,
                       slot_claim& out) noexcept {
  lane_header* h = L.hdr;
  const std::uint64_t cap = L.capacity;
  // Every eviction of this call, here and in R3 (producer_maybe_repair),
  // counts in p.evicted: the status says stored_evicted when there was any.
  const std::uint32_t evicted_before = p.evicted;
  std::uint64_t stuck_since = 0;
  space_wait waiting;
  waiting.spin_ns = p.spin_ns;
  auto give_up = [&](a64& counter, post_status st) {
    p.pe->op.store(0, std::memory_order_relaxed);  // we hold no claim
    bump(counter);
    return st;
  };
  for (;;) {
    // relaxed: the slot's sequence word (acquire, below) decides; a stale tail
    // only makes the CAS fail.
    const std::uint64_t w = h->tail.load(std::memory_order_relaxed);
    const std::uint64_t t = w >> 1;
    slot_header* s = L.slot_for(t);
    // acquire: pairs with the release that freed the slot (T6, E4, R1), so the
    // previous holder's reads of the payload happen before our writes.
    const std::uint64_t seen = s->seq.load(std::memory_order_acquire);
    const std::int64_t d = pos_diff(seq_pos(seen), t);
    const slot_state st = seq_state(seen);

    if (d == 0 && st == slot_state::empty) {  // P2
      // relaxed: published by the seq_cst CAS on the tail; R1 loads the tail
      // first. (No op_before: a FIFO lane's stored total is its tail, exact by
      // itself; the per-producer `stored` is for statistics.)
      p.pe->op.store(make_op(op_kind::claim, L.index, t), std::memory_order_relaxed);
      SHMBOX_FAULT("producer.after_announce");
      std::uint64_t expected = w;
      if (!h->tail.compare_exchange_weak(expected, ((t + 1) << 1) | (w & 1), std::memory_order_seq_cst,
                                         std::memory_order_relaxed))  // P3: the sleeping bit stays
        continue;
      bump(c->stored);  // P4
      SHMBOX_FAULT("producer.after_claim");
      out.slot = s;
      out.lane = L.index;
      out.where = t;
      out.wake = (w & 1) != 0;
      return p.evicted != evicted_before ? post_status::stored_evicted : post_status::stored;
    }
    if (d == -static_cast<std::int64_t>(cap)) {
      // The slot still holds position t - cap: the lane is full at t. We hold
      // no claim: withdraw a stale claim(t') left by a lost CAS, so that R1
      // never waits for us while we sleep for space.
      p.pe->op.store(0, std::memory_order_relaxed);
      if (st == slot_state::full) {
        switch (L.pol) {
          case policy::reject: return give_up(c->rejected, post_status::full);
          case policy::drop_newest: return give_up(c->dropped_new, post_status::dropped);
          case policy::drop_oldest:
            // E1-E4. Another producer may claim the slot we free before we
            // do (its post is then a plain store): we evict again, so one
            // post can evict several messages; p.evicted counts each.
            evict_fifo(p, L, t - cap, seen);
            continue;
          case policy::block:
          case policy::lifo:
            if (!wait_for_space(L, t, seen, deadline, waiting)) return give_up(c->timeouts, post_status::timeout);
            continue;
        }
      }
      if (st == slot_state::taken || st == slot_state::empty || st == slot_state::done || st == slot_state::dropped) {
        // Busy: being read, committed, evicted, repaired or still written.
        producer_maybe_repair(p, L, t - cap, seen, stuck_since);
        if (L.pol == policy::reject) return give_up(c->rejected, post_status::full);
        if (L.pol == policy::drop_newest) return give_up(c->dropped_new, post_status::dropped);
        if (!wait_for_space(L, t, seen, deadline, waiting)) return give_up(c->timeouts, post_status::timeout);
        continue;
      }
    } else if (d > 0 || (d == 0 && st != slot_state::empty)) {
      // Our tail is stale: others claimed t (and maybe more) meanwhile.
      if (h->tail.load(std::memory_order_relaxed) != w) continue;
    } else if (h->tail.load(std::memory_order_relaxed) != w) {
      continue;
    }
    // The slot holds neither t nor t - cap while the tail stays at t: the lane
    // is corrupt (someone wrote over the tail or the slot).
    p.pe->op.store(0, std::memory_order_relaxed);
    p.last_error = fail(errc::corrupt, "box '" + p.m->name + "': lane " + std::to_string(L.index) + " slot " +
                                           std::to_string(L.slot_index(t)) + " holds position " +
                                           std::to_string(seq_pos(seen)) + " but the tail is at " + std::to_string(t) +
                                           " (corrupt segment; run 'shmbox stat " + p.m->name + "')");
    return post_status::error;
  }
}

}  // namespace

// P6 for the inline fast path (ring_fast.hpp).
void wake_owner_now(producer_ctx& p) noexcept { wake_owner(p); }

namespace {

// L1-L2's publish: a lifo slot we hold WRITING, its payload written; then wake a sleeping owner.
void lifo_publish(producer_ctx& p, const lane_view& L, slot_header* s, std::uint64_t stamp, std::size_t size) noexcept {
  s->length.store(static_cast<std::uint32_t>(size), std::memory_order_relaxed);  // relaxed: published by the exchange
  s->writer.store(p.entry, std::memory_order_relaxed);
  // SYNC POINT C: the publishing exchange (seq_cst), then the load of the
  // sleeping bit (seq_cst); pairs with SYNC POINT D in owner_arm_sleep.
  s->seq.exchange(make_seq(stamp, slot_state::full, p.rep.actor), std::memory_order_seq_cst);
  if (L.hdr->lifo_stamp.load(std::memory_order_seq_cst) & 1) wake_owner(p);  // the owner clears the bit
}

void producer_maybe_repair_lifo(producer_ctx& p, const lane_view& L, std::uint64_t& stuck_since) noexcept {
  const std::uint64_t now = mono_ns();
  if (stuck_since == 0) {
    stuck_since = now;
    return;
  }
  if (now - stuck_since < kRepairGraceNs || now < p.next_repair_ns) return;
  p.next_repair_ns = now + kRepairIntervalNs;
  for (std::uint32_t i = 0; i < L.capacity; ++i) {
    const std::uint64_t seen = L.slot_at_index(i)->seq.load(std::memory_order_acquire);
    const slot_state st = seq_state(seen);
    const std::uint32_t actor = seq_actor(seen);
    if ((st == slot_state::done || st == slot_state::dropped) && is_owner_actor(actor)) {
      finish_dead_commit(*p.m, L, actor);
      continue;
    }
    if (st != slot_state::writing && st != slot_state::taken) continue;
    if (is_owner_actor(actor)) continue;  // a gone owner's slots are the next owner's (R4)
    const holder h = actor_state(*p.m, actor);
    if (h == holder::dead) complete_dead_producer(*p.m, L, 0, i, seen, actor, p.rep);
    else if (h == holder::invalid) abandon_lifo(L, i, seen, p.rep);
  }
}

// L1-L2 up to the payload: holds a lifo slot WRITING for one message.
post_status lifo_claim(producer_ctx& p, const lane_view& L, producer_lane_counters* c, lazy_deadline& deadline,
                       slot_claim& out) noexcept {
  lane_header* h = L.hdr;
  const std::uint32_t cap = L.capacity;
  // relaxed: a unique number is all we need; the slot CAS orders the rest.
  const std::uint64_t stamp = (h->lifo_stamp.fetch_add(2, std::memory_order_relaxed) >> 1) & kPosMask;
  std::uint64_t stuck_since = 0;
  unsigned rounds = 0;
  for (;;) {
    // L1: a free slot, starting after the one we used last.
    for (std::uint32_t k = 0; k < cap; ++k) {
      const std::uint32_t i = (p.lifo_hint + k) % cap;
      slot_header* s = L.slot_at_index(i);
      // acquire: pairs with the release that freed it (its reads happen before our writes)
      std::uint64_t seen = s->seq.load(std::memory_order_acquire);
      if (seq_state(seen) != slot_state::free) continue;
      const std::uint64_t stored = c->stored.load(std::memory_order_relaxed);
      p.pe->op_before_a.store(stored, std::memory_order_relaxed);
      p.pe->op.store(make_op(op_kind::lifo_push, L.index, i), std::memory_order_relaxed);  // relaxed: published by the CAS
      if (!s->seq.compare_exchange_strong(seen, make_seq(stamp, slot_state::writing, p.rep.actor),
                                          std::memory_order_seq_cst, std::memory_order_relaxed))
        continue;
      c->stored.store(stored + 1, std::memory_order_relaxed);
      p.lifo_hint = (i + 1) % cap;
      out = {s, L.index, i, stamp, false};
      return post_status::stored;
    }
    // L2: full: replace the newest message (largest stamp).
    std::int64_t best_d = 0;
    std::uint32_t best = cap;
    std::uint64_t best_seq = 0;
    bool busy = false;
    for (std::uint32_t i = 0; i < cap; ++i) {
      const std::uint64_t seen = L.slot_at_index(i)->seq.load(std::memory_order_acquire);
      const slot_state st = seq_state(seen);
      if (st == slot_state::full) {
        const std::int64_t d = pos_diff(seq_pos(seen), stamp);
        if (best == cap || d > best_d) {
          best = i;
          best_d = d;
          best_seq = seen;
        }
      } else if (st == slot_state::writing || st == slot_state::taken || st == slot_state::free ||
                 st == slot_state::done || st == slot_state::dropped) {
        busy = true;
      }
    }
    if (best != cap) {
      slot_header* s = L.slot_at_index(best);
      const std::uint64_t stored = c->stored.load(std::memory_order_relaxed);
      const std::uint64_t replaced = c->replaced.load(std::memory_order_relaxed);
      p.pe->op_before_a.store(stored, std::memory_order_relaxed);
      p.pe->op_before_b.store(replaced, std::memory_order_relaxed);
      p.pe->op.store(make_op(op_kind::lifo_replace, L.index, best), std::memory_order_relaxed);
      std::uint64_t expected = best_seq;
      if (!s->seq.compare_exchange_strong(expected, make_seq(stamp, slot_state::writing, p.rep.actor),
                                          std::memory_order_seq_cst, std::memory_order_relaxed))
        continue;  // the owner took it or another replacer won: look again
      if (p.capture) {  // the replaced message, still intact until we write ours
        const std::uint32_t len = std::min(s->length.load(std::memory_order_relaxed), L.payload);
        p.captured.emplace_back(reinterpret_cast<const char*>(lane_view::payload_of(s)), len);
      }
      c->stored.store(stored + 1, std::memory_order_relaxed);
      c->replaced.store(replaced + 1, std::memory_order_relaxed);
      ++p.evicted;
      out = {s, L.index, best, stamp, false};
      return post_status::stored_evicted;
    }
    p.pe->op.store(0, std::memory_order_relaxed);
    if (!busy) {
      p.last_error = fail(errc::corrupt, "box '" + p.m->name + "': lane " + std::to_string(L.index) +
                                             " has no slot in a valid lifo state (corrupt segment)");
      return post_status::error;
    }
    // L3: every slot is being written or read right now.
    producer_maybe_repair_lifo(p, L, stuck_since);
    if (deadline.timeout_ns == 0 || mono_ns() >= deadline.get()) {
      bump(c->timeouts);
      return post_status::timeout;
    }
    if (++rounds < 16) cpu_relax();
    else sleep_ns(rounds < 64 ? 0 : 50'000);
  }
}

// ---------------------------------------------------------------------------
// Owner side
// ---------------------------------------------------------------------------

void wake_space_waiters(const lane_view& L) noexcept {
  lane_header* h = L.hdr;
  // SYNC POINT B: StoreLoad between our frees (T6 / L3) and reading
  // space_wanted; pairs with SYNC POINT A in wait_for_space().
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (h->space_wanted.load(std::memory_order_relaxed) == 0) return;
  h->space_wanted.store(0, std::memory_order_relaxed);
  h->space_seq.fetch_add(1, std::memory_order_release);  // release: our frees happen before the waiter's retry
  futex_wake(&h->space_seq);
  h->space_wake_calls.fetch_add(1, std::memory_order_relaxed);  // relaxed: diagnostic counter
}

std::string corrupt_slot(const owner_ctx& o, const lane_view& L, std::uint64_t idx, const std::string& what) {
  return "box '" + o.m->name + "': lane " + std::to_string(L.index) + " slot " + std::to_string(idx) + " " + what +
         " (corrupt segment; the message there is counted as abandoned)";
}

// A FIFO position stuck at EMPTY(p) with the tail past it (owner side of R1).
bool owner_check_stuck(owner_ctx& o, const lane_view& L, std::uint64_t p, std::uint64_t seen) noexcept {
  const std::uint32_t l = L.index;
  const std::uint64_t now = mono_ns();
  if (o.stuck_pos[l] != p || o.stuck_since_ns[l] == 0) {
    o.stuck_pos[l] = p;
    o.stuck_since_ns[l] = now;
    o.next_check_ns[l] = now + kRepairGraceNs;
    return false;
  }
  if (now < o.next_check_ns[l]) return false;
  o.next_check_ns[l] = now + kRepairIntervalNs;
  return repair_fifo_slot(*o.m, L, p, seen, o.rep, nullptr, -1, o.stuck_since_ns[l], now);
}

// DONE/DROPPED slots of a gone owner actor whose process is dead: it
// committed them (TAKEN -> DONE or DROPPED) and may not have counted them.
// Counts them exactly once (op_before, op_before_b) and frees them. Returns
// true if it freed any.
bool finish_dead_commit(mapped_box& m, const lane_view& L, std::uint32_t actor) noexcept {
  const std::uint32_t idx = owner_actor_index(actor);
  const owner_actor* ar = m.actor(idx);
  // a stale owner finishes its own (it holds its actor's byte until its handle goes)
  if (role_alive(m, actor_byte(m, idx), ar->key.load(std::memory_order_acquire))) return false;
  std::vector<std::pair<std::uint32_t, std::uint64_t>> done;
  std::uint64_t delivered = 0, dropped = 0;
  for (std::uint32_t i = 0; i < L.capacity; ++i) {
    const std::uint64_t seen = L.slot_at_index(i)->seq.load(std::memory_order_acquire);
    const slot_state st = seq_state(seen);
    if ((st != slot_state::done && st != slot_state::dropped) || seq_actor(seen) != actor) continue;
    done.emplace_back(i, seen);
    (st == slot_state::done ? delivered : dropped) += 1;
  }
  if (done.empty()) return false;
  const std::uint64_t op = ar->op.load(std::memory_order_acquire);
  if (op_kind_of(op) == op_kind::commit && op_lane(op) == L.index) {
    // Every DONE/DROPPED slot of this actor in this lane belongs to its last
    // commit: a CAS from the value before it counts each kind once.
    std::uint64_t before = ar->op_before.load(std::memory_order_acquire);
    std::uint64_t before_b = ar->op_before_b.load(std::memory_order_acquire);
    owner_lane_counters* oc = m.actor_counters(idx, L.index);
    if (delivered != 0) oc->delivered.compare_exchange_strong(before, before + delivered, std::memory_order_relaxed);
    if (dropped != 0) oc->filtered.compare_exchange_strong(before_b, before_b + dropped, std::memory_order_relaxed);
  }
  bool freed = false;
  for (auto& [i, seen] : done)
    freed |= L.slot_at_index(i)->seq.compare_exchange_strong(seen, finished_seq(L, seen), std::memory_order_release,
                                                             std::memory_order_relaxed);
  return freed;
}

// A slot TAKEN by another owner actor: that owner is gone (we own the box).
// Committed (fast path) or being repaired: finish it. Otherwise take it over
// for redelivery. Returns 1 if it is now TAKEN by us, 0 if it was finished
// (freed), -1 if the slot changed under us, 2 if it belongs to a newer owner
// (we are stale: leave it). Used at acquire (R4) and by the
// take loops, which meet slots a stale owner took after our recovery ran.
int adopt_gone_owner_slot(owner_ctx& o, const lane_view& L, slot_header* s, std::uint64_t target,
                          std::uint64_t seen) noexcept {
  mapped_box& m = *o.m;
  const std::uint32_t actor = seq_actor(seen);
  // A NEWER owner's slot (its actor record holds a later epoch than ours):
  // we are a stale owner whose lease expired while it ran on. That slot is
  // not ours to adopt: re-taking it would make the newer owner's commit fail
  // and, once we fail our own commit, leave the message TAKEN by an actor
  // whose successor has already moved past it (found by model/lease.pml).
  if (m.actor(owner_actor_index(actor))->epoch.load(std::memory_order_acquire) > o.epoch) return 2;
  const int verdict = dead_owner_op(m, L, target & kTargetMask, actor);
  if (verdict == 1) finish_dead_owner_repair(m, L, actor);
  if (verdict == 1 || verdict == 2)
    return s->seq.compare_exchange_strong(seen, finished_seq(L, seen), std::memory_order_release,
                                          std::memory_order_relaxed)
               ? 0
               : -1;
  // Uncommitted: ours now, to be delivered again (a stale owner that still
  // runs will fail to commit it: its C2 expects its own TAKEN).
  return s->seq.compare_exchange_strong(seen, make_seq(seq_pos(seen), slot_state::taken, o.rep.actor),
                                        std::memory_order_acq_rel, std::memory_order_relaxed)
             ? 1
             : -1;
}

// What take_one did.
enum class took { yes, lost_race, skipped };

// Announce-take-copy for one slot, then (commit_each) commit and free it, or
// (hold) remember it in o.pending. `seen` is FULL, or TAKEN by us (redeliver).
// The sink's verdict decides: deliver (counted delivered), drop (counted
// filtered), skip (the slot is put back as it was; stop).
__attribute__((always_inline)) inline took take_one(owner_ctx& o, const lane_view& L, slot_header* s, std::uint64_t where, std::uint64_t seen,
              std::uint32_t len, bool redeliver, take_sink& sink, take_mode mode) noexcept {
  owner_lane_counters* oc = o.counters(L.index);
  const std::uint64_t pos_or_stamp = seq_pos(seen);
  const std::uint64_t mine = make_seq(pos_or_stamp, slot_state::taken, o.rep.actor);
  // Others race for FULL slots in drop_oldest lanes (evictors) and lifo lanes
  // (replacers): a CAS there; a release store elsewhere (no one else writes a
  // FULL slot). The hold path always CASes (a newer owner may race too).
  const bool cas = mode == take_mode::hold || L.pol == policy::drop_oldest || L.is_lifo();
  auto put_back = [&] {
    std::uint64_t expected = mine;
    s->seq.compare_exchange_strong(expected, seen, std::memory_order_release, std::memory_order_relaxed);
  };
  if (mode == take_mode::hold) {
    if (!redeliver && !s->seq.compare_exchange_strong(seen, mine, std::memory_order_seq_cst, std::memory_order_relaxed))
      return took::lost_race;
    const take_verdict v = sink.append(lane_view::payload_of(s), len, redeliver, L.index);
    if (v == take_verdict::skip) {
      put_back();
      return took::skipped;
    }
    o.pending.push_back({L.index, where, mine, seen, redeliver, v == take_verdict::drop});
    SHMBOX_FAULT("owner.after_take");
    return took::yes;
  }
  // T2: announce. relaxed: published by the release/seq_cst of the take.
  const std::uint64_t before = oc->delivered.load(std::memory_order_relaxed);  // we are its only writer
  o.act->op_before.store(before, std::memory_order_relaxed);
  o.act->op.store(make_op(L.is_lifo() ? op_kind::lifo_pop : op_kind::recv, L.index, where), std::memory_order_relaxed);
  if (!redeliver) {  // T3
    if (cas) {
      if (!s->seq.compare_exchange_strong(seen, mine, std::memory_order_seq_cst, std::memory_order_relaxed)) {
        o.act->op.store(0, std::memory_order_relaxed);
        return took::lost_race;
      }
    } else {
      s->seq.store(mine, std::memory_order_release);  // release: our op record is visible to whoever sees this
    }
  }
  const take_verdict v = sink.append(lane_view::payload_of(s), len, redeliver, L.index);  // T4
  SHMBOX_FAULT("owner.after_take");
  if (v == take_verdict::skip) {
    put_back();  // as it was (FULL, or ours to redeliver)
    o.act->op.store(0, std::memory_order_release);
    return took::skipped;
  }
  if (v == take_verdict::drop) {
    // Committed as filtered instead: re-announce with that counter.
    const std::uint64_t fb = oc->filtered.load(std::memory_order_relaxed);
    o.act->op_before.store(fb, std::memory_order_relaxed);
    o.act->op.store(make_op(op_kind::filter_drop, L.index, where), std::memory_order_release);
    oc->filtered.store(fb + 1, std::memory_order_relaxed);
  } else {
    if (redeliver) bump(oc->redelivered);
    // T5: the commit. relaxed: single writer; the free below is a release store.
    oc->delivered.store(before + 1, std::memory_order_relaxed);
  }
  SHMBOX_FAULT("owner.after_commit");
  // T6 release: our payload read happens before the next writer's payload
  // writes (pairs with P1's acquire / L1's acquire).
  s->seq.store(finished_seq(L, mine), std::memory_order_release);
  o.act->op.store(0, std::memory_order_release);
  return took::yes;
}

// Publishes the FIFO head: the first position this owner has not finished
// (held, uncommitted positions count as unfinished).
void publish_head(owner_ctx& o, const lane_view& L) noexcept {
  std::uint64_t h = o.head[L.index];
  for (const pending_slot& ps : o.pending)
    if (ps.lane == L.index && ps.where < h) h = ps.where;
  L.hdr->head.store(h, std::memory_order_release);  // T7 release: read by inspectors and the next owner
}

take_result fifo_take(owner_ctx& o, const lane_view& L, take_sink& sink, take_mode mode) noexcept {
  lane_header* h = L.hdr;
  const std::uint64_t cap = L.capacity;
  take_result res;
  std::uint64_t p = o.head[L.index];
  const std::uint64_t first = p;
  std::size_t n = 0;
  // A healthy lane is walked in at most about 2 x cap steps per call (cap
  // positions to take or skip, plus retries after lost races). Only a
  // scribbled segment (a tail or slot positions far off) could make the walk
  // go on and on: after this many steps, stop and report it (found by
  // fuzz/segment_fuzz).
  std::uint64_t budget = 4 * cap + 1024;

  while (n < sink.max) {
    if (budget-- == 0) {
      res.corrupt = true;
      o.last_error = fail(errc::corrupt, "box '" + o.m->name + "': lane " + std::to_string(L.index) +
                                             ": the owner's cursor cannot advance (corrupt tail or slot positions)");
      break;
    }
    slot_header* s = L.slot_for(p);
    const std::uint64_t seen = s->seq.load(std::memory_order_acquire);  // T1 acquire: pairs with P5's release
    const std::int64_t d = pos_diff(seq_pos(seen), p);
    if (d > 0) {
      // p's fate was decided by someone else (evicted, repaired) and the slot
      // reused. Every position below tail - cap is finished: jump there.
      const std::uint64_t t = h->tail.load(std::memory_order_acquire) >> 1;
      if (p >= t) {  // a position ahead of the tail: only a scribbled slot says so
        res.corrupt = true;
        o.last_error = fail(errc::corrupt, corrupt_slot(o, L, L.slot_index(p), "holds a position ahead of the tail"));
        break;
      }
      p = t > p + cap ? t - cap : p + 1;
      continue;
    }
    if (d == -static_cast<std::int64_t>(cap)) {
      // The slot still holds the previous lap's position p - cap: an evictor
      // or repairer that we skipped (T1) has not finished it yet, so p cannot
      // have been claimed. Nothing more to take here for now.
      break;
    }
    if (d < 0) {
      // The slot lags behind our cursor: the segment was written over.
      res.corrupt = true;
      o.last_error = fail(errc::corrupt, corrupt_slot(o, L, L.slot_index(p), "is behind the owner's cursor"));
      if (n > 0) break;
      ++p;  // skip it: a scribbled slot can lose a message, never hang the owner
      continue;
    }
    const slot_state st = seq_state(seen);
    const std::uint32_t actor = seq_actor(seen);
    const bool redeliver = st == slot_state::taken && actor == o.rep.actor;
    if (st == slot_state::full || redeliver) {
      // Stable while FULL: no one but an evictor touches a FULL slot, and an
      // evictor changes the sequence word, which makes our take fail.
      const std::uint32_t len = s->length.load(std::memory_order_relaxed);
      if (len > L.payload) {
        if (n > 0 || !o.pending.empty()) break;  // the next call repairs it
        res.corrupt = true;
        o.last_error = fail(errc::corrupt, corrupt_slot(o, L, L.slot_index(p), "has length " + std::to_string(len) +
                                                                                 " > slot size " + std::to_string(L.payload)));
        abandon_fifo(L, p, seen, o.rep);
        continue;
      }
      const took t = take_one(o, L, s, p, seen, len, redeliver, sink, mode);
      if (t == took::lost_race) continue;  // look again
      if (t == took::skipped) {
        res.skipped = true;
        break;
      }
      ++n;
      ++p;
      continue;
    }
    if (st == slot_state::taken && is_owner_actor(actor)) {
      // Taken by another owner, which is gone: adopt it (redelivered) or finish it.
      const int adopted = adopt_gone_owner_slot(o, L, s, p, seen);
      if (adopted == 2) break;  // a newer owner's: we are stale, take nothing more
      if (adopted != 0) continue;  // look again
      ++p;
      continue;
    }
    if (st == slot_state::taken || st == slot_state::done || st == slot_state::dropped) {
      // Held by an evictor or a repairer, which decides p's fate, or committed
      // by an owner that is gone (a dead one's commit we finish here): skip p.
      if (st != slot_state::taken && is_owner_actor(actor) && actor != o.rep.actor && n == 0 && o.pending.empty())
        finish_dead_commit(*o.m, L, actor);
      ++p;
      continue;
    }
    if (st == slot_state::empty) {
      // Not published (yet). Whether p is claimed at all needs the tail, the
      // producers' hottest line: a polling owner reads it only now and then.
      if (n > 0 || !sink.look_at_tail) {
        res.unknown = n == 0;
        break;
      }
      const std::uint64_t t = h->tail.load(std::memory_order_seq_cst) >> 1;
      if (t <= p) break;  // nothing more in the lane
      res.busy = true;    // claimed, not yet published
      if (o.pending.empty() && owner_check_stuck(o, L, p, seen)) continue;  // repaired: look again
      break;
    }
    // writing/free do not exist in FIFO lanes.
    res.corrupt = true;
    o.last_error = fail(errc::corrupt, corrupt_slot(o, L, L.slot_index(p), "is in a lifo state"));
    if (n > 0 || !o.pending.empty()) break;
    abandon_fifo(L, p, seen, o.rep);
  }

  if (p != first) {
    o.head[L.index] = p;
    publish_head(o, L);
    o.stuck_since_ns[L.index] = 0;
  }
  if (n > 0 && mode == take_mode::commit_each && (L.pol == policy::block || L.pol == policy::drop_oldest))
    wake_space_waiters(L);
  res.taken = n;
  return res;
}

// L3 for one slot. redeliver: the slot is already TAKEN by us (R4).
bool lifo_pop_one(owner_ctx& o, const lane_view& L, std::uint32_t i, std::uint64_t seen, bool redeliver,
                  take_sink& sink, take_result& res, take_mode mode) noexcept {
  slot_header* s = L.slot_at_index(i);
  // Read before the take: if the take's CAS succeeds, no replacer touched the
  // slot in between (a replace changes the stamp), so this length is its own.
  const std::uint32_t len = s->length.load(std::memory_order_relaxed);
  if (len > L.payload) {
    res.corrupt = true;
    o.last_error = fail(errc::corrupt, corrupt_slot(o, L, i, "has length " + std::to_string(len) + " > slot size " +
                                                                 std::to_string(L.payload)));
    if (o.pending.empty()) abandon_lifo(L, i, seen, o.rep);
    return true;
  }
  const took t = take_one(o, L, s, i, seen, len, redeliver, sink, mode);
  if (t == took::lost_race) return false;
  if (t == took::skipped) {
    res.skipped = true;
    return true;
  }
  ++res.taken;
  return true;
}

take_result lifo_take(owner_ctx& o, const lane_view& L, take_sink& sink, take_mode mode) noexcept {
  take_result res;
  auto& again = o.lifo_redeliver[L.index];
  while (res.taken < sink.max && !again.empty() && !res.skipped) {
    const std::uint32_t i = again.back();
    again.pop_back();
    const std::uint64_t seen = L.slot_at_index(i)->seq.load(std::memory_order_acquire);
    if (seq_state(seen) == slot_state::taken && seq_actor(seen) == o.rep.actor) {
      lifo_pop_one(o, L, i, seen, true, sink, res, mode);
      if (res.skipped) again.push_back(i);  // still ours, still to deliver
    }
  }
  // Newest first: a snapshot of the FULL slots by stamp. A slot that changed
  // since the snapshot (replaced) makes us take a new one.
  thread_local std::vector<std::pair<std::int64_t, std::uint32_t>> order;
  thread_local std::vector<std::uint64_t> seqs;
  while (res.taken < sink.max && !res.skipped) {
    order.clear();
    seqs.assign(L.capacity, 0);
    const std::uint64_t ref = (L.hdr->lifo_stamp.load(std::memory_order_acquire) >> 1) & kPosMask;
    std::uint64_t oldest_writing = 0;
    for (std::uint32_t i = 0; i < L.capacity; ++i) {
      const std::uint64_t seen = L.slot_at_index(i)->seq.load(std::memory_order_acquire);
      seqs[i] = seen;
      const slot_state st = seq_state(seen);
      if (st == slot_state::full) order.emplace_back(pos_diff(seq_pos(seen), ref), i);
      else if (st == slot_state::writing) {
        res.busy = true;
        oldest_writing = seen;
      } else if (st == slot_state::empty && o.pending.empty()) {
        res.corrupt = true;
        o.last_error = fail(errc::corrupt, corrupt_slot(o, L, i, "is in a FIFO state"));
        abandon_lifo(L, i, seen, o.rep);
      } else if ((st == slot_state::done || st == slot_state::dropped) && is_owner_actor(seq_actor(seen)) &&
                 seq_actor(seen) != o.rep.actor && o.pending.empty()) {
        finish_dead_commit(*o.m, L, seq_actor(seen));
      } else if (st == slot_state::taken && is_owner_actor(seq_actor(seen)) && seq_actor(seen) != o.rep.actor) {
        if (adopt_gone_owner_slot(o, L, L.slot_at_index(i), i, seen) == 1) again.push_back(i);
      }
    }
    if (order.empty()) {
      if (res.busy && res.taken == 0 && o.pending.empty()) {
        // Something is being written: after the grace period, repair dead writers.
        const std::uint32_t l = L.index;
        const std::uint64_t now = mono_ns();
        if (o.stuck_pos[l] != oldest_writing || o.stuck_since_ns[l] == 0) {
          o.stuck_pos[l] = oldest_writing;
          o.stuck_since_ns[l] = now;
          o.next_check_ns[l] = now + kRepairGraceNs;
        } else if (now >= o.next_check_ns[l]) {
          o.next_check_ns[l] = now + kRepairIntervalNs;
          bool repaired = false;
          for (std::uint32_t i = 0; i < L.capacity; ++i) {
            const slot_state st = seq_state(seqs[i]);
            if (st != slot_state::writing && st != slot_state::taken) continue;
            const std::uint32_t actor = seq_actor(seqs[i]);
            if (is_owner_actor(actor)) continue;
            const holder h = actor_state(*o.m, actor);
            if (h == holder::dead) repaired |= complete_dead_producer(*o.m, L, 0, i, seqs[i], actor, o.rep);
            else if (h == holder::invalid) repaired |= abandon_lifo(L, i, seqs[i], o.rep);
          }
          if (repaired) continue;
        }
      }
      break;
    }
    std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    bool changed = false;
    for (const auto& [d, i] : order) {
      if (res.taken >= sink.max || res.skipped) break;
      if (!lifo_pop_one(o, L, i, seqs[i], false, sink, res, mode)) {
        changed = true;
        break;
      }
    }
    if (!changed) break;  // the batch is the snapshot; newer pushes wait for the next call
  }
  if (res.taken > 0) {
    o.stuck_since_ns[L.index] = 0;
    if (mode == take_mode::commit_each) wake_space_waiters(L);
  }
  return res;
}

}  // namespace

// ---------------------------------------------------------------------------
// Public (library-internal) entry points
// ---------------------------------------------------------------------------

producer_ctx::~producer_ctx() {
  if (owner_fd >= 0) ::close(owner_fd);
}

std::uint64_t lazy_deadline::get() noexcept {
  if (at == 0) at = timeout_ns == UINT64_MAX ? UINT64_MAX : mono_ns() + timeout_ns;
  return at;
}

// The fast path of a FIFO post: ring_fast.hpp.

__attribute__((hot)) bool post_fast(producer_ctx& p, const lane_view& L, const void* data, std::size_t size) noexcept {
  slot_claim k;
  if (!claim_fast_inline(p, L, k)) return false;
  write_payload(k.slot, data, size);
  fifo_publish_inline(p, k, size);
  return true;
}

post_status claim_slot(producer_ctx& p, std::uint32_t lane, std::size_t size, std::uint64_t timeout_ns,
                       slot_claim& out) noexcept {
  const lane_view& L = p.m->lanes[lane];
  producer_lane_counters* c = p.m->producer_counters(p.entry, lane);
  if (size > L.payload) {
    bump(c->too_large);
    return post_status::too_large;
  }
  lazy_deadline deadline{timeout_ns};
  return L.is_lifo() ? lifo_claim(p, L, c, deadline, out) : fifo_claim(p, L, c, deadline, out);
}

void publish_slot(producer_ctx& p, const slot_claim& k, std::size_t size) noexcept {
  const lane_view& L = p.m->lanes[k.lane];
  if (L.is_lifo()) lifo_publish(p, L, k.slot, k.stamp, size);
  else fifo_publish_inline(p, k, size);
}

// ABORT (a loan given back): the producer takes back its own claimed slot
// the way R1 abandons a dead writer's (op_before = aborted, op = abort,
// CAS -> TAKEN(_, P), aborted++, free), counting it as aborted. Dies before
// the CAS: the slot is still claimed (R1 and finish_dead_entry read abort(q)
// as a claim; a lifo WRITING slot is abandoned by R2): counted abandoned
// instead, once. Dies after the CAS: R2 finishes the count from the op.
void abort_slot(producer_ctx& p, const slot_claim& k) noexcept {
  const lane_view& L = p.m->lanes[k.lane];
  a64& counter = p.m->producer_counters(p.entry, k.lane)->aborted;
  slot_header* s = k.slot;
  const std::uint64_t before = counter.load(std::memory_order_relaxed);
  std::uint64_t seen, next;
  if (L.is_lifo()) {
    // The op (lifo_push / lifo_replace) still describes the claim with its
    // own before-values: clear it before they are overwritten (a repairer
    // that sees no op abandons our WRITING slot; its counts are already done).
    p.pe->op.store(0, std::memory_order_relaxed);
    seen = make_seq(k.stamp, slot_state::writing, p.rep.actor);
    next = make_seq(k.stamp, slot_state::free, kActorNone);
  } else {
    seen = make_seq(k.where, slot_state::empty, kActorNone);
    next = make_seq(k.where + L.capacity, slot_state::empty, kActorNone);
  }
  p.pe->op_before_a.store(before, std::memory_order_relaxed);
  // relaxed: published by the seq_cst CAS (R1 loads the tail, which our
  // claim CAS already moved, and then the op with acquire)
  p.pe->op.store(make_op(op_kind::abort, k.lane, L.is_lifo() ? k.where : (k.where & kTargetMask)),
                 std::memory_order_relaxed);
  SHMBOX_FAULT("producer.mid_abort");
  std::uint64_t expected = seen;
  if (s->seq.compare_exchange_strong(expected, make_seq(seq_pos(seen), slot_state::taken, p.rep.actor),
                                     std::memory_order_seq_cst, std::memory_order_relaxed)) {
    counter.store(before + 1, std::memory_order_relaxed);
    // release: pairs with the acquire of the next claimant of the slot
    s->seq.store(next, std::memory_order_release);
  }
  p.pe->op.store(0, std::memory_order_relaxed);
  if (!L.is_lifo()) wake_space_waiters(L);  // the slot is free for the next lap
}

post_status post_message(producer_ctx& p, std::uint32_t lane, const void* data, std::size_t size,
                         std::uint64_t timeout_ns) noexcept {
  slot_claim k;
  const post_status st = claim_slot(p, lane, size, timeout_ns, k);
  if (!is_stored(st)) return st;
  if (p.m->lanes[lane].is_lifo()) SHMBOX_FAULT("producer.lifo_mid_write");
  write_payload(k.slot, data, size);
  publish_slot(p, k, size);
  return st;
}

// RUN (post_batch): P1-P6 for n consecutive positions with ONE tail CAS.
// The slots t..t+k-1 must all be EMPTY(t+i) (free for this lap); only the
// claimant of a position writes its slot, so they stay free until the CAS
// decides. op = claim_run(t, k) names the whole run for R1: a writer that
// dies mid-run leaves the rest claimed by a dead entry, repaired (abandoned)
// one by one. The payloads are published in order, each with its own
// release store; a sleeping owner is woken once, after the last.
std::size_t post_run(producer_ctx& p, std::uint32_t lane, const std::string_view* msgs, std::size_t n) noexcept {
  const lane_view& L = p.m->lanes[lane];
  if (L.is_lifo() || n == 0) return 0;
  lane_header* h = L.hdr;
  producer_lane_counters* c = p.m->producer_counters(p.entry, lane);
  n = std::min<std::size_t>({n, kMaxClaimRun, L.capacity});
  for (;;) {
    const std::uint64_t w = h->tail.load(std::memory_order_relaxed);
    const std::uint64_t t = w >> 1;
    std::size_t k = 0;
    // acquire: pairs with the release that freed each slot (T6, E4, R1)
    while (k < n && L.slot_for(t + k)->seq.load(std::memory_order_acquire) ==
                        make_seq(t + k, slot_state::empty, kActorNone))
      ++k;
    if (k == 0) return 0;  // full, busy or a stale tail: the caller posts one message the usual way
    p.pe->op.store(k == 1 ? make_op(op_kind::claim, lane, t) : make_op(op_kind::claim_run, lane, run_target(t, static_cast<std::uint32_t>(k))),
                   std::memory_order_relaxed);  // relaxed: published by the seq_cst CAS (as P2)
    std::uint64_t expected = w;
    if (!h->tail.compare_exchange_weak(expected, ((t + k) << 1) | (w & 1), std::memory_order_seq_cst,
                                       std::memory_order_relaxed))
      continue;
    bump(c->stored, k);
    for (std::size_t i = 0; i < k; ++i) {
      slot_header* s = L.slot_for(t + i);
      write_payload(s, msgs[i].data(), msgs[i].size());
      s->length.store(static_cast<std::uint32_t>(msgs[i].size()), std::memory_order_relaxed);
      s->writer.store(p.entry, std::memory_order_relaxed);
      s->seq.store(make_seq(t + i, slot_state::full, p.rep.actor), std::memory_order_release);  // P5
      if (i == 0 && k > 1) SHMBOX_FAULT("producer.mid_run");
    }
    if (w & 1) wake_owner(p);  // P6, once
    return k;
  }
}

namespace {
// entry: the producer entry, or (owner) the owner actor index.
void fill_repairer(mapped_box& m, std::uint32_t actor, a64* op, a64* op_before, bool owner, std::uint32_t entry,
                   repairer& r) noexcept {
  r.actor = actor;
  r.op = op;
  r.op_before = op_before;
  for (std::uint32_t l = 0; l < m.lane_count(); ++l)
    r.abandoned[l] = owner ? &m.actor_counters(entry, l)->abandoned : &m.producer_counters(entry, l)->abandoned;
}

// Finishes the pending op of a dead process whose entry we just took over.
void finish_dead_entry(producer_ctx& p) noexcept {
  mapped_box& m = *p.m;
  const std::uint64_t op = p.pe->op.load(std::memory_order_acquire);
  const std::uint32_t lane = op_lane(op);
  if (op_kind_of(op) == op_kind::none || lane >= m.lane_count()) {
    p.pe->op.store(0, std::memory_order_relaxed);
    return;
  }
  const lane_view& L = m.lanes[lane];
  if (L.is_lifo()) {
    const std::uint64_t i = op_target(op);
    if (i < L.capacity) {
      const std::uint64_t seen = L.slot_at_index(i)->seq.load(std::memory_order_acquire);
      const slot_state st = seq_state(seen);
      if ((st == slot_state::writing || st == slot_state::taken) && seq_actor(seen) == p.rep.actor)
        complete_dead_producer(m, L, 0, static_cast<std::uint32_t>(i), seen, p.rep.actor, p.rep);
    }
  } else {
    const std::uint64_t t = L.hdr->tail.load(std::memory_order_seq_cst) >> 1;
    const bool run = op_kind_of(op) == op_kind::claim_run;
    const std::uint64_t first = run ? t - ((t - run_first(op_target(op))) & kPosMask) : unfold_target(op_target(op), t);
    const std::uint32_t count = run ? run_length(op_target(op)) : 1;
    for (std::uint64_t q = first; q != first + count && q < t; ++q) {
    const std::uint64_t seen = L.slot_for(q)->seq.load(std::memory_order_acquire);
    if (pos_diff(seq_pos(seen), q) == 0) {
      const slot_state st = seq_state(seen);
      if ((run || op_kind_of(op) == op_kind::claim || op_kind_of(op) == op_kind::abort) && st == slot_state::empty && t > q) {
        // The dead holder may have claimed q and never published it; if no
        // other live producer claims q, abandon it (R1, excluding this entry).
        if (claimants_of(m, lane, q, p.entry) != claim_verdict::live) abandon_fifo(L, q, seen, p.rep);
      } else if (st == slot_state::taken && seq_actor(seen) == p.rep.actor) {
        complete_dead_producer(m, L, q, 0, seen, p.rep.actor, p.rep);
      }
    }
    }
  }
  p.pe->op.store(0, std::memory_order_relaxed);
}
}  // namespace

bool claim_producer_entry(mapped_box& m, producer_ctx& out) noexcept {
  const std::uint64_t me = self_key();
  if (me == 0) return false;
  // Free entries first (no system calls), then entries of dead processes.
  for (int pass = 0; pass < 2; ++pass) {
    for (std::uint32_t i = 0; i < m.max_producers(); ++i) {
      producer_entry* pe = m.producer(i);
      std::uint64_t k = pe->key.load(std::memory_order_acquire);
      if (pass == 0 ? k != 0 : (k == 0 || lock_held(m, producer_byte(m, i)))) continue;
      // liveness.hpp L1: the entry's byte first, then the key.
      if (!out.lock.lock(m, producer_byte(m, i))) return false;
      // acq_rel: acquire the dead holder's op and counters; release our key
      if (!pe->key.compare_exchange_strong(k, me, std::memory_order_acq_rel, std::memory_order_relaxed)) {
        out.lock.unlock(producer_byte(m, i));
        continue;
      }
      pe->pid_ns.store(self_pid_ns(), std::memory_order_relaxed);  // display only
      out.m = &m;
      out.entry = i;
      out.pe = pe;
      fill_repairer(m, i + 1, &pe->op, &pe->op_before_a, false, i, out.rep);
      if (pass == 1) finish_dead_entry(out);
      pe->op.store(0, std::memory_order_relaxed);
      pe->attached_unix_ns.store(unix_ns(), std::memory_order_relaxed);
      return true;
    }
  }
  return false;
}

void release_producer_entry(producer_ctx& p) noexcept {
  if (p.pe == nullptr) return;
  p.pe->op.store(0, std::memory_order_relaxed);
  std::uint64_t me = self_key();
  // release: our last slot writes and counters happen before the entry is free
  p.pe->key.compare_exchange_strong(me, 0, std::memory_order_release, std::memory_order_relaxed);
  p.lock.reset();  // liveness.hpp L1: after the key is cleared
  p.pe = nullptr;
}

take_result owner_take(owner_ctx& o, std::uint32_t lane, take_sink& sink, take_mode mode) noexcept {
  const lane_view& L = o.m->lanes[lane];
  return L.is_lifo() ? lifo_take(o, L, sink, mode) : fifo_take(o, L, sink, mode);
}

// COMMIT (o.pending, lane by lane):
//  C1 op_before = delivered; op = commit(lane)            (announce)
//  C2 each slot: CAS TAKEN(x, O) -> DONE(x, O)            (the commit point of
//     that message; fails if a newer owner re-took it: lost to us, it will be
//     delivered again there, flagged)
//       dies here: DONE slots committed, not counted: R4 (or a later owner
//       meeting them) counts every DONE(_, O) of the lane once, via op_before.
//  C3 delivered = op_before + committed                   (counted)
//  C4 each DONE slot: CAS -> free (EMPTY(p + cap) / FREE); op = none.
commit_result owner_commit(owner_ctx& o, std::vector<char>* kept) noexcept {
  commit_result r;
  if (kept != nullptr) kept->assign(o.pending.size(), 0);
  for (std::uint32_t l = 0; l < o.m->lane_count(); ++l) {
    const lane_view& L = o.m->lanes[l];
    owner_lane_counters* oc = o.counters(l);
    bool any = false;
    for (const pending_slot& ps : o.pending) any |= ps.lane == l;
    if (!any) continue;
    const std::uint64_t before = oc->delivered.load(std::memory_order_relaxed);  // we are its only writer
    const std::uint64_t before_b = oc->filtered.load(std::memory_order_relaxed);
    o.act->op_before.store(before, std::memory_order_relaxed);
    o.act->op_before_b.store(before_b, std::memory_order_relaxed);
    o.act->op.store(make_op(op_kind::commit, l, 0), std::memory_order_relaxed);  // relaxed: published by the CASes
    std::uint64_t n = 0, dropped = 0, again = 0;
    for (std::size_t i = 0; i < o.pending.size(); ++i) {
      pending_slot& ps = o.pending[i];
      if (ps.lane != l) continue;
      slot_header* s = L.is_lifo() ? L.slot_at_index(ps.where) : L.slot_for(ps.where);
      std::uint64_t expected = ps.seq;
      const std::uint64_t done =
          make_seq(seq_pos(ps.seq), ps.drop ? slot_state::dropped : slot_state::done, o.rep.actor);
      if (s->seq.compare_exchange_strong(expected, done, std::memory_order_seq_cst, std::memory_order_relaxed)) {
        ps.seq = done;
        if (ps.drop) {
          ++dropped;
        } else {
          ++n;
          again += ps.redelivered ? 1 : 0;
        }
        if (kept != nullptr) (*kept)[i] = 1;
      } else {
        ps.seq = 0;  // lost: a newer owner took it back
        ++r.lost;
      }
    }
    SHMBOX_FAULT("owner.mid_commit");
    if (again > 0) bump(oc->redelivered, again);
    oc->delivered.store(before + n, std::memory_order_relaxed);
    oc->filtered.store(before_b + dropped, std::memory_order_relaxed);
    SHMBOX_FAULT("owner.after_commit");
    for (const pending_slot& ps : o.pending) {
      if (ps.lane != l || ps.seq == 0) continue;
      slot_header* s = L.is_lifo() ? L.slot_at_index(ps.where) : L.slot_for(ps.where);
      std::uint64_t expected = ps.seq;
      // release: our payload reads happen before the next writer's writes
      s->seq.compare_exchange_strong(expected, finished_seq(L, ps.seq), std::memory_order_release,
                                     std::memory_order_relaxed);
    }
    o.act->op.store(0, std::memory_order_release);
    r.committed += n + dropped;
  }
  std::vector<std::uint32_t> lanes;
  for (const pending_slot& ps : o.pending)
    if (std::find(lanes.begin(), lanes.end(), ps.lane) == lanes.end()) lanes.push_back(ps.lane);
  o.pending.clear();
  for (const std::uint32_t l : lanes) {
    const lane_view& L = o.m->lanes[l];
    if (!L.is_lifo()) publish_head(o, L);
    if (L.is_lifo() || L.pol == policy::block || L.pol == policy::drop_oldest) wake_space_waiters(L);
  }
  return r;
}

std::size_t owner_give_back(owner_ctx& o) noexcept {
  std::size_t n = 0;
  for (const pending_slot& ps : o.pending) {
    const lane_view& L = o.m->lanes[ps.lane];
    slot_header* s = L.is_lifo() ? L.slot_at_index(ps.where) : L.slot_for(ps.where);
    std::uint64_t expected = ps.seq;
    // release: as if we had never taken it (a newer owner may have re-taken it already)
    if (s->seq.compare_exchange_strong(expected, ps.orig, std::memory_order_release, std::memory_order_relaxed)) ++n;
  }
  o.pending.clear();
  return n;
}

void owner_recover(owner_ctx& o) noexcept {
  mapped_box& m = *o.m;
  o.actor_index = static_cast<std::uint32_t>(o.epoch % kOwnerActors);
  o.act = m.actor(o.actor_index);
  o.act->key.store(o.key, std::memory_order_relaxed);
  o.act->epoch.store(o.epoch, std::memory_order_relaxed);
  o.act->op.store(0, std::memory_order_release);
  fill_repairer(m, owner_actor_id(o.epoch), &o.act->op, &o.act->op_before, true, o.actor_index, o.rep);
  o.fenced = m.lease_ms() > 0;
  o.pending.clear();
  for (std::uint32_t l = 0; l < m.lane_count(); ++l) {
    const lane_view& L = m.lanes[l];
    o.lifo_redeliver[l].clear();
    // Which slots can hold a gone owner's TAKEN/DONE: in a FIFO lane without
    // a lease only the positions between the last published head and the
    // tail (the head's only writer is the one owner, and it never publishes
    // past a position it still holds); in a lifo lane any slot. So a takeover
    // costs O(messages in flight), not O(capacity).
    // With a lease, a stale owner (lease expired, still running) may publish
    // its own cursor after its successor took positions below it; should the
    // successor die, those would sit below the head (found by
    // model/lease.pml). So a lease box's new owner scans the whole lane
    // [tail - cap, tail) and starts its cursor at the lowest slot it adopts.
    std::uint64_t first = 0, count = L.capacity;
    if (!L.is_lifo()) {
      const std::uint64_t t = L.hdr->tail.load(std::memory_order_acquire) >> 1;
      std::uint64_t h = L.hdr->head.load(std::memory_order_acquire);
      if (h > t) h = t;
      if (t - h > L.capacity) h = t - L.capacity;
      o.head[l] = h;
      first = o.fenced ? (t > L.capacity ? t - L.capacity : 0) : h;
      count = t - first;
    }
    auto slot_no = [&](std::uint64_t k) { return L.is_lifo() ? k : L.slot_index(first + k); };
    // Committed-but-unfreed slots of dead owners first (counted once per actor).
    std::vector<std::uint32_t> actors;
    for (std::uint64_t k = 0; k < count; ++k) {
      const std::uint64_t seen = L.slot_at_index(slot_no(k))->seq.load(std::memory_order_acquire);
      const std::uint32_t actor = seq_actor(seen);
      const slot_state st = seq_state(seen);
      if ((st == slot_state::done || st == slot_state::dropped) && is_owner_actor(actor) && actor != o.rep.actor &&
          std::find(actors.begin(), actors.end(), actor) == actors.end())
        actors.push_back(actor);
    }
    for (const std::uint32_t actor : actors) finish_dead_commit(m, L, actor);
    for (std::uint64_t k = 0; k < count; ++k) {
      const std::uint64_t i = slot_no(k);
      slot_header* s = L.slot_at_index(i);
      const std::uint64_t seen = s->seq.load(std::memory_order_acquire);
      const std::uint32_t actor = seq_actor(seen);
      if (seq_state(seen) != slot_state::taken || !is_owner_actor(actor) || actor == o.rep.actor) continue;
      // R4. FIFO slots re-taken by us are found again by the take loop from
      // the cursor, which must not be above them.
      const std::uint64_t where = L.is_lifo() ? i : seq_pos(seen);
      if (adopt_gone_owner_slot(o, L, s, where, seen) == 1) {
        if (L.is_lifo()) o.lifo_redeliver[l].push_back(static_cast<std::uint32_t>(i));
        else if (const std::int64_t below = pos_diff(where, o.head[l]); below < 0) o.head[l] -= static_cast<std::uint64_t>(-below);
      }
      SHMBOX_FAULT("takeover.mid_recovery");
    }
    o.stuck_since_ns[l] = 0;
    owner_clear_sleep(o, l);  // a previous owner may have died asleep: no stray wake-ups
  }
}

bool owner_arm_sleep(owner_ctx& o, std::uint32_t lane) noexcept {
  const lane_view& L = o.m->lanes[lane];
  lane_header* h = L.hdr;
  if (!L.is_lifo()) {
    std::uint64_t w = h->tail.load(std::memory_order_seq_cst);
    if ((w >> 1) != o.head[lane]) return false;  // something is claimed
    if (w & 1) return true;
    // seq_cst: the producer whose claim CAS follows ours sees the bit (P6).
    return h->tail.compare_exchange_strong(w, w | 1, std::memory_order_seq_cst, std::memory_order_relaxed);
  }
  if (!o.lifo_redeliver[lane].empty()) return false;
  std::uint64_t w = h->lifo_stamp.load(std::memory_order_seq_cst);
  if (!(w & 1) && !h->lifo_stamp.compare_exchange_strong(w, w | 1, std::memory_order_seq_cst, std::memory_order_relaxed))
    return false;
  // SYNC POINT D: the bit is set (seq_cst RMW); now every slot is read
  // seq_cst. Pairs with SYNC POINT C: a push either shows up here or sees the bit.
  for (std::uint32_t i = 0; i < L.capacity; ++i) {
    const slot_state st = seq_state(L.slot_at_index(i)->seq.load(std::memory_order_seq_cst));
    if (st == slot_state::full || st == slot_state::writing) return false;
  }
  return true;
}

void owner_clear_sleep(owner_ctx& o, std::uint32_t lane) noexcept {
  const lane_view& L = o.m->lanes[lane];
  a64& word = L.is_lifo() ? L.hdr->lifo_stamp : L.hdr->tail;
  std::uint64_t w = word.load(std::memory_order_relaxed);
  while ((w & 1) && !word.compare_exchange_weak(w, w & ~1ull, std::memory_order_relaxed)) {
  }
}

std::uint64_t lane_depth_scan(const mapped_box& m, std::uint32_t lane) noexcept {
  const lane_view& L = m.lanes[lane];
  std::uint64_t n = 0;
  if (L.is_lifo()) {
    for (std::uint32_t i = 0; i < L.capacity; ++i) {
      const std::uint64_t s = L.slot_at_index(i)->seq.load(std::memory_order_acquire);
      const slot_state st = seq_state(s);
      if (st == slot_state::full || st == slot_state::writing || (st == slot_state::taken && is_owner_actor(seq_actor(s))))
        ++n;
    }
    return n;
  }
  const std::uint64_t t = L.hdr->tail.load(std::memory_order_acquire) >> 1;
  std::uint64_t lo = L.hdr->head.load(std::memory_order_acquire);
  if (lo > t) lo = t;
  if (t - lo > L.capacity) lo = t - L.capacity;
  for (std::uint64_t q = lo; q < t; ++q) {
    const std::uint64_t s = L.slot_for(q)->seq.load(std::memory_order_acquire);
    if (pos_diff(seq_pos(s), q) != 0) continue;  // finished and reused
    const slot_state st = seq_state(s);
    // stored and not finished: published, being written, or taken by an owner
    if (st == slot_state::full || st == slot_state::empty || (st == slot_state::taken && is_owner_actor(seq_actor(s))))
      ++n;
  }
  return n;
}

}  // namespace shmbox::detail
