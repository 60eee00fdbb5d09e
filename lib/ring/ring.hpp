// lib/ring/ring.hpp - THE SLOT PROTOCOL of shmbox: the protocol text (below), with
// the step labels the code cites (P1-P6, E1-E4, T1-T7, H1, C1-C4, R1-R4,
// L1-L3, SYNC POINTs A-D), and the interface the rest of the library uses.
// Mostly protocol text (two thirds of its lines are the text), so it is
// longer than the ~600 lines a source file of shmbox keeps to.
//
// Where each step is implemented (all in lib/ring/ but wake.cpp, lib/wake/):
//   ring_fast.hpp   P1-P6, the inline fast path of a FIFO post
//   ring_post.cpp   POST P1-P6 (general path), EVICT E1-E4, ABORT, RUN
//   ring_take.cpp   TAKE T1-T7 (and FAST TAKE, the one-message receives'
//                   common case), HOLD H1, COMMIT C1-C4, sleep arming (FIFO)
//   ring_repair.cpp REPAIRS R1-R4, producer entries, owner recovery (R4)
//   ring_lifo.cpp   lifo lanes L1-L3, SYNC POINTs C/D
//   ring_internal.hpp  what those files share (counters, op words, take_one)
//   wake.hpp, wake/wake.cpp  WAKE-UPS: P6's wake, the owner's sleep, the eventfd,
//                   SYNC POINTs A/B (space waiters), the adaptive spin
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
//       event-loop owner's notify hub makes notify_fd readable when the
//       armed box holds messages: notify_hub.hpp). Found by model/ring.pml.
//  Full (s == FULL(t-cap) or busy): reject -> full, drop_newest -> dropped,
//  block -> sleep on lane.space_seq (SYNC POINT A) and retry, drop_oldest ->
//  EVICT. Busy (TAKEN(t-cap) or EMPTY(t-cap) being written): reject/drop_newest
//  answer as full; block/drop_oldest wait, repairing dead holders (R1-R3).
//
// EVICT (drop_oldest, producer P, oldest stored position q = t - cap):
//  E1 op_before = P.evicted; op = evict(q).
//  E2 CAS seq FULL(q) -> TAKEN(q, P). Fails (the owner took it, or another
//     evictor did): back to P1.
//       dies here: slot TAKEN(q, P), P dead, q in no counter and in no depth
//       (fault point producer.evict_taken). Repair R2, by the owner, whose
//       cursor waits at q (T1b), or by a producer that needs the slot.
//  E3 P.evicted++.        dies here: R2 (counts it if E3 did not; fault point
//                         producer.mid_evict).
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
//       tail, the producers' hottest line, before it sleeps and otherwise at
//       most once per kTailLookNs (owner.cpp tail_look_due); in between
//       EMPTY(p) just means "nothing yet".)
//     FULL(p): continue at T2.   TAKEN(p, O): a message re-taken from a dead
//       owner at acquire: deliver it flagged redelivered.
//     TAKEN(p, another owner): a gone owner's (R4: adopt or finish it).
//     T1b TAKEN(p, a producer): an evictor (E2-E4), a repairer (R1), a loan
//       given back (ABORT) or a resize's drop decides p's fate, a few
//       instructions from done. Until it has counted p, p is in no counter
//       and in no depth, so the cursor never passes it: stop (busy; a call
//       that has taken nothing yet waits for it), and once the holder is
//       dead, after kRepairGraceNs, finish its op (R2: counted once, freed),
//       as R1 does for an unpublished claim. An owner inside a receive backs
//       off and looks again (no futex sleep: its cursor is behind the tail),
//       so it repairs within about a millisecond; an owner that is not
//       receiving (an event loop between calls) at its next receive, and a
//       box with no owner at the next owner's first receive or a producer's
//       need of the slot (R2): until then that message is counted nowhere,
//       the identity one short. (Before, the owner skipped p:
//       a producer killed between E2 and E3 left its message counted
//       nowhere until a producer needed the slot a lap later, in a quiet
//       box for ever: the identity one short. Issue 53, item 9.)
//     Slot already past p: someone else decided p's fate (eviction, repair)
//       and the slot was reused: skip p (jump to tail - cap if behind).
//     DONE(p, a gone owner): committed; finish that owner's count if it is
//       dead (finish_dead_commit), skip p.
//     Slot still at p - cap: a slot we passed (a gone owner's DONE, which a
//       stale owner finishes) has not finished the previous lap yet, so p is
//       not claimed: stop.
//  T2 owner.op_before = delivered; owner.op = recv(p).
//  T3 seq = TAKEN(p, O): a CAS in drop_oldest lanes (evictors race for FULL
//     slots) and resizable lanes (a shrink drops FULL slots: without the CAS
//     a message could be both delivered and dropped, found by the ASan run of
//     tests/ring/resize.cpp), a release store otherwise (no one else writes a FULL slot).
//  T4 copy payload (length checked against the slot size first).
//       dies in T3..T4: slot TAKEN(p, O) and delivered == op_before: the next
//       owner re-takes it and delivers it again, flagged (R4).
//       Fault point owner.after_take.
//  T5 delivered = op_before + 1: THE COMMIT (one store, the owner's own line).
//       dies here: delivered != op_before: the next owner frees the slot
//       without delivering it again (R4). Fault point owner.after_commit.
//       Meanwhile the slot is TAKEN(p, O) and its message counted delivered,
//       so the depth leaves it out by the same test (op recv(p), delivered
//       != op_before: lane_depth_scan, owner_slot_counted; likewise an
//       owner's R1 repair between its count and its free) and the counters
//       add up at every instant. (Before, the depth counted every
//       owner-TAKEN slot: `posted` one short of the sum until the takeover;
//       gencheck's taken-ghost-depth.)
//  T5b a redelivery (TAKEN(p, O) re-taken at acquire): redelivered =
//     op_before_b + 1, which T2 stored with its op marked kRecvAgain.
//       dies before it: whoever frees the committed slot (R3, R4) finishes
//       the count from op_before_b, once (a CAS; a no-op after T5b).
//     (A priority box's move into its store is no delivery: not counted here.)
//  T6 seq = EMPTY(p + cap) (release: our payload read happens before the next
//     writer's payload writes; pairs with P1's acquire). Freeing each slot as
//     soon as it is committed lets the producer refill it while the owner
//     reads the next one: the two cores work in parallel.
//  T7 (once per call) head = p (release); owner.op = none; if the lane has
//     waiters (SYNC POINT B) wake lane.space_seq.
//  FAST TAKE (owner_take_fast: Owner::try_receive, receive, and
//  receive_in_place with max 1): T1 finds FULL(p) with a valid length: T2-T7
//  for that one message, the same stores in the same order; anything else
//  is left to the general take above. What the one-message calls saved is
//  the general path's set-up (deadline, spin, staging, the lane walk), and
//  B's fence (below): no step is skipped.
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
//  slot, C3 count, C4 free; per lane, the redeliveries in a commit of their
//  own (op commit(lane, 1), op_before_b = redelivered), so that C3 and a
//  repairer's count of them include `redelivered` exactly. Why a CAS at C2: only with a lease can an owner
//  lose the box while alive (stopped past its deadline); its heir re-takes
//  its TAKEN slots (R4) by CAS, so the stale owner's C2 fails and it never
//  hands out a message the heir delivers. A lease box's receive commits the
//  messages it took before returning them, and returns only those it
//  committed; one that finds it lost the box gives them back (its caller
//  saw none of them). Earlier reads (Owner::read) are not its to commit or
//  give back: they stay held for commit(), as in a box without a lease,
//  and a stale owner leaves them TAKEN, for the next owner to deliver
//  again flagged (its caller saw them). (Before, the receive committed or
//  gave back every held slot, and paired its own messages with them by
//  index: gencheck's lease-read-receive.)
//  An owner never publishes a head past a position it still holds. But with a
//  lease, a stale owner still running may publish its own cursor past
//  positions its successor holds; so a lease box's new owner recovers over
//  the whole lane [tail - cap, tail), not from the head (R4). And a take loop
//  that meets a NEWER owner's TAKEN slot stops: it is the stale one
//  (adopt_gone_owner_slot). Both found by model/lease.pml.

// REPAIRS (anyone who finds a slot stuck; rate limited; never a live holder;
// only a slot that holds the position q it is asked about: one that has
// moved on to q + cap or a later lap is finished, nothing to repair, even
// if a dead producer's entry still names claim(q))
//  R1 EMPTY(q), tail > q, stuck for kRepairGraceNs: look for producer
//     entries whose op is claim(q). If one is alive, wait: it is the claimant
//     or is about to retry elsewhere (slow is not dead). If all are dead:
//     repairer R writes op_before = R.abandoned, op = repair(q), CAS
//     EMPTY(q) -> TAKEN(q, R), R.abandoned++, seq = EMPTY(q + cap).
//     If R dies mid-way: slot TAKEN(q, R), R dead: R2 finishes it (R an
//     owner: R3/R4). Fault point repair.after_count (counted, not freed):
//     an owner's TAKEN(q) is then left out of the depth, as at T5.
//     No claimant at all (only a scribbled table): repaired after
//     kOrphanClaimNs.
//  R2 TAKEN(q, X), X a dead producer: X's op says evict(q) or repair(q)
//     (or abort(q), a resize's shrink_drop(q));
//     CAS(X's counter, before, before + 1), then CAS seq -> EMPTY(q + cap).
//     Idempotent: two repairers cannot count twice. Run by the owner when
//     its cursor reaches q (T1b: it never passes a producer's slot), by a
//     producer that needs the slot, and by the next holder of X's entry.
//  R3 TAKEN(q, owner of an older epoch, or a dead owner): a drop_oldest
//     producer that needs the slot looks at the owner's op: committed
//     (delivered != op_before) -> just free it; repair(q) -> finish that
//     repair; otherwise evict it (E1-E4, counted as dropped_oldest).
//  R4 At acquire, the new owner scans [head, tail) (lease box: [tail - cap,
//     tail); lifo lane: every slot). DONE(_, old owner) whose
//     process is dead: committed; counted once for all of them (op_before of
//     the old actor; a commit of redeliveries also redelivered, op_before_b),
//     then freed (a stale owner that still runs finishes its own).
//     TAKEN(_, old owner): committed by the fast path (its recv op and
//     delivered != op_before) -> free (kRecvAgain: T5b finished); repair op
//     -> finish it; otherwise CAS to TAKEN(_, new owner) and deliver again
//     with the redelivered flag.
//  A producer entry held by a dead process is reused only after its pending
//  op has been finished by the new holder (R1-R2 on that op).
//
// WAKE-UPS (wake.hpp, wake.cpp)
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
//  read space_wanted): one of the two sees the other's store. B runs after
//  every take and A only before a sleep, so B's fence is made asymmetric:
//  an owner whose process registered for membarrier(2) skips it, and A runs
//  membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED), which makes the owner's CPU
//  fence for it (wake.hpp, THE ASYMMETRIC FENCE; the lane's space_fence word
//  turns B's fence back on where a producer may not call membarrier).
//
// ===========================================================================
// THE LIMIT of a resizable lane (options::max_capacity; resize.cpp)
// ===========================================================================
// A resizable FIFO lane has `cap` slots (its reserve) and holds at most
// `limit` messages (lane_header::limit, 1..cap, written only by a resize).
// The ring above stays as it is: positions, slots, T1-T7 and the repairs do
// not know the limit. Only the claim does: position t may be claimed when
// slot(t) is free for it (P1-P2) AND the gate is open:
//  drop_oldest: position g = t - limit is finished (slot(g) has moved on to
//    g + cap). Positions are finished in order there (the owner from the
//    head, evictions from the oldest), so every earlier one is finished too
//    (or being finished) and at most `limit` are outstanding after the claim.
//    Closed: evict the oldest message (from the owner's published head, or
//    this handle's last eviction, up to g: E1-E4 on it) and retry.
//  reject, drop_newest, block (keep-old): t - head < limit, head being the
//    owner's published head (every position before it is finished). Not
//    g as above: a shrink drops the NEWEST positions here, and a finished g
//    would then admit posts while older messages fill the lane. Closed:
//    reject -> full, drop_newest -> dropped, block -> wait on slot(head)
//    (SYNC POINT A with that slot, and the limit word). The head is
//    published once per receive call (T7), so a keep-old lane at its limit
//    refuses a little early while the owner is inside a batch: by at most
//    the messages that call has taken so far; it never holds more. Until
//    the owner has passed the newest positions a shrink dropped (the lane's
//    shrink_mark, stored before the drops), a closed gate counts what
//    [head, t) holds instead (O(limit), only in that window). Resizable lanes
// always take this general path (lane_view::fast is false): the inline fast
// path, and RUN, are for fixed lanes only, which pay nothing for this.
// RESIZE (resize_lane): exchange the limit (seq_cst), wake space waiters;
// grown: done. Shrunk below the depth: scan [head, tail) for stored messages
// and drop the excess by E1-E4 with the resizer's producer entry: the oldest
// (drop_oldest; counted evicted) or the newest (reject, drop_newest; op
// shrink_drop, counted `shrunk`, reported as dropped_newest); block drops
// none. A resizer killed mid-drop leaves TAKEN(q, its entry) with its op:
// R2 finishes the count once and frees the slot (fault point
// resize.mid_drop, as producer.mid_evict). Known limits: a post that read
// the old limit just before a shrink may still land against it (at most one
// per producer in flight).
//
// ===========================================================================
// THE QUOTA (options::quota, lane_options::quota): per-producer fairness
// ===========================================================================
// A lane with a quota Q lets each producer HANDLE have at most Q messages
// WAITING in it: published and not yet taken, i.e. slots FULL(q, P) with
// q in [head, tail) and q >= P.attached_tail, the lane's tail when the
// handle took its producer entry. Nothing is counted for it: the count is
// the slots themselves, read at the claim (count_own, ring_post.cpp), so it
// is as exact after any crash as the slots are; no counter can drift, and
// the fault matrix's producer points cover it as they cover any post.
//  Q0 (claim_entry, ring_repair.cpp) P takes its entry, then reads each
//     FIFO lane's tail into its own memory (producer_ctx::attached_tail;
//     a copy goes to the entry's attached_tail word, for inspectors only).
//     Every claim of the entry's previous holders is below it: a holder
//     that let go did so by a release CAS of the key, which P's key CAS
//     read; a dead one claimed before the kernel dropped its lock, which P
//     took before the key. So the actor bits P's slots share with those
//     holders' (actor = entry + 1) cannot make P count their messages.
//       dies here: nothing posted; the next holder reads the tail again.
//  Q1 P1 finds slot(t) free for t. Scan [max(head, t - cap, P.attached_tail),
//     t) for FULL(q, P), stopping at Q (none when fewer than Q positions: a
//     lane whose depth is under Q costs one load of the head). Only P adds
//     such slots there (a handle is used by one thread at a time; a loan
//     blocks other claims) and everyone else only takes them away, so the
//     count is never low when P claims: at most Q of P's messages wait, at
//     every instant.
//  Q2 count >= Q: the policy, for P alone. reject / drop_newest: nothing
//     claimed, P's quota_rejected / quota_dropped counted (they sum into
//     rejected / dropped_newest: the identity of counters is unchanged),
//     status over_quota. block: wait (SYNC POINT A) on P's oldest waiting
//     slot (of Q1's count: never a predecessor's) until it moves (the owner
//     took it) or the tail moves, then back to P1; at the deadline
//     quota_timeouts (into timeouts), status timeout.
//  Not drop_oldest: evicting P's own oldest (which may sit anywhere in the
//  ring) would free a slot only for the lap after it, so the ring, which
//  claims positions in order, would stay full for every producer until the
//  owner passed it: create refuses the combination (and lifo, resizable,
//  stash, priority and custom-buffer boxes: the gates of THE LIMIT and THE
//  STASH count differently). Q lanes take the general path (lane_view::fast
//  false: no inline fast path, no RUN). With Q x producers <= cap, a
//  producer within its quota always finds slot(t) free once the owner has
//  committed what it read and taken what gone producers left
//  (tests/ring/quota.cpp).
//  The quota is per producer HANDLE: a process that attaches several
//  handles has several quotas; a process that takes the entry of one that
//  has gone (exited, or died) has its whole quota at once. The messages a
//  gone producer left wait in the lane counted against no one's quota:
//  they take room, as any waiting message does, until the owner takes them.
//  (Before, Q1 counted every FULL(q, entry + 1): a new holder inherited its
//  predecessors' waiting messages, and with no owner running stayed refused
//  for ever: 196 of 200 one-message CLI posts refused at --quota 4. Issue
//  53, item 7; tests/ring/quota.cpp.)
//  Hostile writers (whoever the box's mode lets write it: 0666 is every
//  local user). Q is read once at open (lane_header::quota, validated,
//  announced by box_config's kConfigQuota so that no older library posts
//  past it), and P.attached_tail is P's own memory. But the slots' actor
//  bits are theirs to rewrite: renaming FULL slots at positions at or after
//  P.attached_tail to P makes P count messages that are not its own, and
//  kept up it refuses every post of P (reject, drop_newest: over_quota;
//  block: waits to its deadline, timeout): a writer can starve a chosen
//  producer of that box. Renaming P's own to another actor lets P post past
//  its quota, into the others' room. Either costs that box's messages and
//  nothing else: each refused post is counted (the identity holds), Q1
//  reads at most cap slots and writes nothing, a block post waits no
//  longer than its deadline, and no other box, handle or process is
//  touched. shmbox verify reports an entry whose holder has more than Q
//  messages waiting since its attached_tail (a forgery that names it on
//  top of its own messages; one of exactly Q it cannot tell from P's). The
//  quota shares a box fairly among producers that post through the library;
//  it does not protect them from one that writes the segment itself: give
//  the box a mode that lets only trusted processes write it (0600, or 0660
//  with a group).
//
// ===========================================================================
// THE STASH (options::stash; stash.cpp): actor-ts's stash / unstashAll
// ===========================================================================
// A box created with a stash has `stash` entries after its rings (segment
// header stash_offset/stride), each a stash_entry header and a payload the
// size of a slot. Only the box's owner writes them (lease boxes, whose
// stale owner keeps running, cannot have a stash), and the ring protocol
// above does not know them: a message leaves its ring as usual (received
// and committed, counted delivered) and Owner::stash puts a copy in an
// entry. An entry's state word is kind | redelivered | epoch << 16
// (layout.hpp stash_kind):
//  S1 op_before = stashed; op = stash_put(entry)
//  S2 FREE -> WRITING(E)            (CAS; then payload, length, lane, order)
//  S3 lane.parked += 1              (the gate counts it from here)
//  S4 WRITING -> PARKED(E)          (release: the stash point)
//  S5 stashed = op_before + 1; op = none
// unstash_all: every PARKED(E) -> FRONT(E), in stash order, after any FRONT
// ones still waiting. A receive first delivers FRONT entries (all lanes,
// in `order`), then the lanes as usual:
//  U1 FRONT -> TAKEN(E)             (CAS); the sink copies it out
//  (held reads stop here until commit(); give-back: TAKEN -> FRONT)
//  U2 op_before = unstashed; op_before_b = (below); op = stash_commit(lane)
//  U3 TAKEN -> DONE(E)              (release: the commit point)
//  U4 unstashed = op_before + n; each DONE -> FREE; lane.parked -= n;
//     op = none; wake space waiters.
//  Redeliveries (flagged, and not dropped by the filter) are committed in
//  U2-U4 of their own, after the others: op_before_b = redelivered, their
//  DONE keeps the flag, U4 also counts redelivered = op_before_b + n. (In
//  the others op_before_b is a priority box's filter drops: see below.) So
//  a takeover tells the two apart by the DONE entries' flag, and counts a
//  redelivery exactly once, as for a ring's (T5b, C1-C4).
// Takeover (stash_recover, after the ring's R4): the new owner scans every
// entry. WRITING: freed (the message is still its sender's: it was never
// parked). PARKED, FRONT, TAKEN: FRONT(new epoch), flagged redelivered,
// delivered before everything else in stash order (the heir cannot know
// what the dead owner meant to do with them). DONE: freed; if the dead
// owner's op is stash_commit of that lane and its `unstashed` still reads
// op_before, it is finished to op_before + (its DONE entries there), and
// (flagged DONE entries: a commit of redeliveries) its `redelivered` from
// op_before_b likewise. A
// PARKED entry named by a dead stash_put op whose `stashed` still reads
// op_before is counted there. Then every lane's `parked` is recounted from
// the entries. So any owner killed at any step loses no parked message,
// and Σ stashed = Σ unstashed + entries held, exactly.
// THE GATE: a stash box's lanes are gated (lane_view::gated): the claim's
// limit is limit - parked (at least 1), the THE LIMIT rules above with that
// number. With nothing parked that limit is the ring's own, so the inline
// fast path and RUN post there (lane_view::fast_gate: they read `parked`,
// relaxed, after the slot, as limit_reached does, and leave any other
// count to fifo_claim). Owner::stash refuses a message whose lane
// would be left no room (parked + 1 >= limit). A post that read `parked`
// just before a stash may still land against the old count.
// A PRIORITY BOX'S STASH (below): its entries follow the store's in the
// same pool; a parked entry also holds the message's priority. Unstashed
// (FRONT) entries go into their lane's heap, not before every lane: each
// rejoins its priority, ahead of the stored messages of that priority, in
// stash order among the unstashed ones (actor-ts's stash with its
// PriorityMailbox); U1-U4 as above, from the heap. A takeover makes
// PARKED, FRONT and TAKEN ones FRONT (flagged) in the heaps likewise.
// unstash_all moves one entry at a time (PARKED -> FRONT, then into the
// heap): an owner killed half-way (fault point owner.mid_unstash_all)
// leaves PARKED and FRONT entries, which the takeover treats alike. The
// lane's `parked` counts store and stash together (the gate: ring + store
// + stash <= limit); Owner::stash refuses when the lane's stash alone would
// leave no room (stash + 1 >= limit), so the store's delivery always opens
// the lane again.
//
// ===========================================================================
// PRIORITY BOXES (options::priority; priority.cpp): actor-ts's PriorityMailbox
// ===========================================================================
// Producers post as into any FIFO lane (P1-P6; the inline fast path while
// the lane's store holds nothing: THE GATE below), and P4 also writes the
// message's priority (an int64) into the word after the payload
// (lane_view::priority_of). The rings stay FIFO: order is the owner's job.
// The owner keeps a STORE: the stash region (THE STASH's entries), one
// entry per slot of every lane, and for each lane a heap in its own memory
// of the QUEUED entries, keyed (priority, ring position): lowest priority
// first, FIFO among equal ones (positions are the lane's claim order,
// across producers). Every receive first moves what the rings hold into
// the store, then delivers from the heaps, lane 0 first; except what THE
// IN-ORDER RUN (priority.cpp sort_direct) hands out without the store: a
// lane's stored messages no later than its ring's first, then the ring's
// leading messages that are no later than everything after them (one
// priority, or rising ones), by the ring's own take (T1-T7, H1; repair
// R1-R4: a crash there is a FIFO lane's); a message published at the
// run's end while the owner takes the run is met by another round (R5),
// not by the store, as long as it keeps the call's messages in order.
// MOVE (sort_drain: the ring's take T1-T7, commit_each, into sort_sink):
//  M1 (inside T4) FREE -> SORTING(E) (CAS); M2 payload, length, lane,
//     order = position, priority; M3 lane.parked += 1 (the gate counts it
//     from here, before T6 frees the slot). Then T5 counts it delivered
//     (it left its ring) and T6 frees the slot.
//  M4 SORTING -> QUEUED(E) (release), at the next message's M1 or when the
//     lane's take returns: after T5 and T6.
// DELIVER (sort_take): Q1 pop the heap of the lowest lane that has one;
//  U1 QUEUED -> TAKEN(E) (CAS), copy out; U2-U4 (commit_entries, counting
//  nothing: the message was counted at T5) TAKEN -> DONE -> FREE, parked -= 1,
//  wake space waiters. Held reads (Owner::read) stop after U1 until commit;
//  give-back: TAKEN -> QUEUED, back into the heap. The public `delivered`
//  is the rings' count less the store's QUEUED and TAKEN entries, and the
//  lane's depth is the ring's plus those (lane_depth_scan, lane_counters),
//  so stored = delivered + ... + depth holds as in any box.
// Takeover (stash_recover, after R4): SORTING(E, entry i, position p) is
//  the one move that may be in flight. Its ring take decides, with the very
//  words R4 read: the gone owner's op is still recv(lane, p) and its
//  `delivered` still reads op_before -> not committed: R4 re-took the slot
//  to deliver it again (flagged), so the entry is freed; otherwise
//  (committed, or the owner had gone on) the entry is kept. Kept SORTING,
//  QUEUED: QUEUED(new epoch), flags as they were; TAKEN: QUEUED, flagged
//  redelivered (it may have been handed out); DONE: freed (delivered).
//  Then the heaps are rebuilt and every lane's parked recounted. So an
//  owner killed at any step of a move or a delivery loses no stored message
//  and counts none twice (fault points owner.mid_sort, owner.after_take,
//  owner.after_commit, owner.mid_unstash; tests/ring/priority.cpp).
// THE GATE: a priority box's lanes are gated like a stash box's, but the
//  gate may close at 0 (lane_view::gate_limit): ring + store <= limit, and a
//  post that read `parked` just before a move may still land against the
//  older count. Policies: reject, drop_newest and block; drop_oldest is
//  refused (the oldest message may be in the store, where only the owner
//  writes), lifo too. No lease (a stale owner's store could not be fenced);
//  a user stash (options::stash) as THE STASH says. Redeliveries are
//  counted when the store hands them out (U2-U4 of their own), not at the
//  move (T5b does not count a move). Costs: the store doubles the segment
//  (a slot's size per entry); a message out of order is copied once more
//  (ring -> store) and costs O(log n) heap work (one in order: a scan of
//  its slot's words); a post takes the general path while its lane has
//  messages in the store (bench/run.sh); RUN (post_batch) never in a
//  priority box (each message has its own priority).
//
// ===========================================================================
// CUSTOM BUFFERS (options::buffer; buffer.cpp, shmbox/buffer.hpp): pobox's
// custom buffers. A priority box whose heaps are replaced by user buffers.
// ===========================================================================
// The same slots (the priority word carries the producer's key), the same
// store, the same M1-M4 and U1-U4, with three differences:
//  - THE GATE counts the ring only (lane_view::buffered): the ring takes
//    `limit` messages in transit and the box's policy applies there; the
//    store holds at most limit + 1 entries of a lane, and has one entry
//    more than the slots (the spare a push_drop decides on).
//  - ADMIT (buf_admit, after the lane's take has returned: never inside a
//    take, whose op word names the message in flight): each moved QUEUED
//    entry is pushed, by id (entry | low half of its position << 32), into
//    the lane's buffer: push() while it holds fewer than the limit, else
//    push_drop(). The ids it names (and, after a shrink, drop(n)'s) are
//    committed as dropped in one go: U2 (op = stash_commit(lane, 1),
//    op_before_b = buffer_dropped), U3 QUEUED -> DONE(dropped), U4
//    buffer_dropped += n, then FREE. The lane's take moves at most
//    limit + 1 - parked at a time, so each message beyond the limit is
//    decided before the next is moved.
//  - DELIVER: what pop() names (given-back entries first); the library
//    checks every id against its own table (buf_in) and the buffer's size()
//    against its count: a buffer that breaks its contract (or throws) is
//    rebuilt from the store (then, if that breaks too, replaced by a FIFO),
//    and the receive fails once with buffer_broken. Nothing stored is lost.
// Takeover: stash_recover as for a priority box; a DONE(dropped) entry whose
//  owner's op is stash_commit(lane, 1) finishes that owner's buffer_dropped
//  from op_before_b (as sort_filtered for target 0). Then buf_rebuild: a new
//  buffer per lane (buffer_type::make) gets push() of the lane's QUEUED
//  entries in arrival order (position), redelivered ones flagged, after
//  `parked` is recounted (the rebuild may drop). So what a buffer knows must
//  follow from what it holds (shmbox/buffer.hpp). Fault points:
//  owner.mid_sort, owner.before_buffer_drop, owner.mid_unstash (the drop's
//  U3-U4); tests/ring/buffers.cpp kills the owner at each.
// Counting: a dropped message was counted delivered when it left its ring
//  (T5); the public counters move it to `filtered` and `buffer_dropped`.
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
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <system_error>
#include <deque>
#include <vector>

#include "segment/layout.hpp"
#include "segment/liveness.hpp"
#include "base/process.hpp"
#include "segment/segment.hpp"
#include "shmbox/buffer.hpp"
#include "shmbox/producer.hpp"  // post_status

namespace shmbox::detail {

constexpr std::uint64_t kNoDeadline = UINT64_MAX;
// A slot stuck this long behind a process is checked for a dead holder; then
// again every kRepairIntervalNs while it stays stuck.
constexpr std::uint64_t kRepairGraceNs = 50'000;
constexpr std::uint64_t kRepairIntervalNs = 1'000'000;
// A polling owner reads the tails (to tell a claimed, unpublished slot from
// an empty lane) at most this often: each look pulls the producers' hottest
// line, and the next claim CAS must take it back, a cache miss on the
// producer's path (in a round trip, on the reply's). Once every 64 empty
// polls, as before, made the busy round trip's p99 1.5x a spin ring's; once
// a millisecond, 1.1x (docs/benchmarks.md). A dead claimant is then seen
// up to this much later: its repair waits kRepairGraceNs anyway and is
// retried every kRepairIntervalNs.
constexpr std::uint64_t kTailLookNs = 1'000'000;
// A claimed FIFO position that no producer entry claims (only a scribbled
// producer table can do that) is abandoned after this long.
constexpr std::uint64_t kOrphanClaimNs = 1'000'000'000;

// Who repairs: its actor id, its pending-op words and its abandoned counters.
struct repairer {
  std::uint32_t actor = kActorNone;
  a64* op = nullptr;
  a64* op_before = nullptr;
  a64* abandoned[kMaxLanes] = {};
};

// One attached producer handle.
struct producer_ctx {
  made_here born;  // process.hpp H1: an inherited (fork) handle never posts through, or gives back, the entry (H3)
  mapped_box* m = nullptr;
  std::uint32_t entry = 0;  // index in the producer table
  producer_entry* pe = nullptr;
  repairer rep;             // actor = entry + 1
  std::uint64_t next_repair_ns = 0;
  std::uint32_t busy_seen = 0;  // busy slots seen since the last repair check
  std::uint32_t lifo_hint = 0;
  std::error_code last_error;
  // Dead letters: while the box names a dead-letter box, messages this handle
  // evicts (drop_oldest) or replaces (lifo) are copied here, while it still
  // holds their slot, to be forwarded after the post.
  bool capture = false;
  std::vector<std::string> captured;
  // The owner's notify eventfd, duplicated into this process (pidfd_getfd)
  // for the owner key and descriptor number it belongs to; -1 none, also
  // when that owner's descriptor could not be had (another pid namespace or
  // user, pidfd_getfd refused by seccomp or Yama): remembered, so that a
  // refused producer does not try again on every wake (it rings the owner's
  // doorbell instead: ring_bell, notify_hub.hpp).
  int owner_fd = -1;
  std::uint64_t owner_fd_key = 0;
  std::uint32_t owner_fd_num = 0;
  std::uint64_t spin_ns = 0;  // this call's adaptive wait (set by the Producer before each call)
  bool quiet_timeout = false;  // this call's timeout is not counted (post_options::quiet_timeout; set with spin_ns)
  // Messages this handle's current call (post, loan, post_batch) evicted
  // (drop_oldest, E1-E4, also R3) or replaced (lifo, L2): Producer::last_evicted().
  // Reset by each public call; a single writer, private memory.
  std::uint32_t evicted = 0;
  // A priority box: the priority the next post writes into its slot (set by
  // the Producer before each call: post_options::priority or its function).
  std::int64_t priority = 0;
  // drop_oldest at a resizable lane's limit: where this handle's search for
  // the oldest message starts (after its last eviction), per lane.
  std::uint64_t evict_from[kMaxLanes] = {};
  // THE QUOTA: each FIFO lane's tail when this handle took its entry. Its
  // own messages are at positions at or after it; those of the entry's
  // previous holders (gone: exited, or dead) are below and count against no
  // one's quota. Private memory: a post never reads it back from the segment
  // (the entry's attached_tail word is a copy for inspectors).
  std::uint64_t attached_tail[kMaxLanes] = {};
  bool loan_open = false;     // a slot_loan holds this entry's claim
  role_lock lock;             // holds the entry's byte (liveness.hpp L1)
  ~producer_ctx();
};

// A slot claimed for one message, not yet published.
struct slot_claim {
  slot_header* slot = nullptr;
  std::uint32_t lane = 0;
  std::uint64_t where = 0;  // FIFO position, or lifo slot index
  std::uint64_t stamp = 0;  // lifo: the stamp it is published with
  bool wake = false;        // FIFO: the owner's sleeping bit was set at the claim
};

// A priority box's slot: its priority word, written before the publish (P5
// releases it with the payload). Nothing in other boxes.
inline void set_priority(const lane_view& L, slot_header* s, std::int64_t priority) noexcept {
  // relaxed: published by P5's release store of the slot
  if (L.is_priority()) L.priority_of(s)->store(static_cast<std::uint64_t>(priority), std::memory_order_relaxed);
}

// Posts one message into `lane`; waits (block policy, or behind a busy slot)
// at most `timeout_ns` (UINT64_MAX: forever).
post_status post_message(producer_ctx& p, std::uint32_t lane, const void* data, std::size_t size,
                         std::uint64_t timeout_ns) noexcept;

// The three steps of post_message, for loans (zero-copy posts): claims a slot
// for a message of up to `size` bytes (stored / stored_evicted with `out`
// filled, else the outcome a post gets, counted); publishes it once `size`
// bytes are written at its payload; or gives it back (counted aborted).
post_status claim_slot(producer_ctx& p, std::uint32_t lane, std::size_t size, std::uint64_t timeout_ns,
                       slot_claim& out) noexcept;
void publish_slot(producer_ctx& p, const slot_claim& k, std::size_t size) noexcept;
// The fast path of a post into a FIFO lane (claim_fast_inline, payload,
// fifo_publish_inline: ring_fast.hpp); false, having claimed nothing, when
// the slot at the tail is not free for it: then post_message decides.
bool post_fast(producer_ctx& p, const lane_view& L, const void* data, std::size_t size) noexcept;
// The same for a priority lane (lane_view::fast_priority), with the message's priority word.
bool post_fast_priority(producer_ctx& p, const lane_view& L, const void* data, std::size_t size,
                        std::int64_t priority) noexcept;
void abort_slot(producer_ctx& p, const slot_claim& k) noexcept;

// Posts msgs[0..k) with one claim of k consecutive free positions (FIFO
// lanes; k <= n, kMaxClaimRun). Returns k; 0 when the first position is not
// free (full, busy, lifo): post that message with post_message. Every
// message must fit the slot.
std::size_t post_run(producer_ctx& p, std::uint32_t lane, const std::string_view* msgs, std::size_t n) noexcept;

// Takes a producer entry (free, or held by a dead process whose pending op is
// completed first). Returns false when every entry is held by a live process.
// `locked_out` (optional): counts the entries skipped because another process
// held their byte past the deadline (segment/liveness.hpp L7).
// `give_up_ns`: until when an entry's byte held by another is waited for
// (0: kRoleLockWaitNs from now, one deadline for all).
bool claim_producer_entry(mapped_box& m, producer_ctx& out, std::uint32_t* locked_out = nullptr,
                          std::uint64_t give_up_ns = 0) noexcept;
// Takes entry i from the dead holder that attached at `attached_ns` (its
// pending op completed first, so the entry's counters are final). False when
// the entry is free, held by a live process, or was claimed by another since.
bool adopt_producer_entry(mapped_box& m, std::uint32_t i, std::uint64_t attached_ns, producer_ctx& out) noexcept;
void release_producer_entry(producer_ctx& p) noexcept;

// A message taken but not yet committed (explicit read, or a lease box's receive).
struct pending_slot {
  std::uint32_t lane = 0;
  std::uint64_t where = 0;  // FIFO position, or lifo slot index
  std::uint64_t seq = 0;    // the slot's sequence word as we set it: TAKEN(x, us)
  std::uint64_t orig = 0;   // what it was before we took it (FULL, or TAKEN by a gone owner)
  bool redelivered = false;
  bool drop = false;        // the filter dropped it: committed as filtered, not delivered
  bool stash = false;       // a stash entry (`where`: its index), not a ring slot (THE STASH)
};

// A priority box's message in the owner's order (ring.hpp PRIORITY BOXES).
struct sort_item {
  std::int64_t priority = 0;
  std::uint64_t order = 0;   // its ring position (FIFO among equal priorities); unstashed: its stash order
  std::uint32_t entry = 0;   // its store entry
  bool front = false;        // unstashed (a FRONT entry): ahead of the stored messages of its priority
};
inline constexpr std::uint32_t kNoEntry = 0xFFFFFFFFu;

// A priority box's lane as the owner last read it (THE IN-ORDER RUN,
// sort_direct): the ring positions from the owner's cursor up to `scanned`
// that are each no later than every message scanned after them (the
// suffix minima: priorities non-decreasing along the run, FIFO among equal
// ones). Owner memory only; a takeover starts it afresh.
struct sort_run {
  struct item {
    std::uint64_t pos = 0;
    std::int64_t priority = 0;
  };
  std::vector<item> items;  // items[first..]: the run, positions ascending
  std::size_t first = 0;
  std::uint64_t scanned = 0;  // the next position to read
  std::size_t size() const noexcept { return items.size() - first; }
  const item& at(std::size_t k) const noexcept { return items[first + k]; }
  void forget_below(std::uint64_t head) noexcept {
    while (first < items.size() && items[first].pos < head) ++first;
    if (first == items.size()) {
      items.clear();
      first = 0;
    } else if (first >= 1024 && first * 2 >= items.size()) {
      items.erase(items.begin(), items.begin() + static_cast<std::ptrdiff_t>(first));
      first = 0;
    }
  }
  void add(std::uint64_t pos, std::int64_t priority) {
    while (items.size() > first && items.back().priority > priority) items.pop_back();
    items.push_back({pos, priority});
  }
};

// One owner handle.
struct owner_ctx {
  made_here born;  // process.hpp H1: an inherited (fork) handle never acts as the owner (H3)
  mapped_box* m = nullptr;
  std::uint64_t key = 0;
  std::uint64_t epoch = 0;
  std::uint32_t actor_index = 0;  // epoch % kOwnerActors
  owner_actor* act = nullptr;     // this owner's op words
  repairer rep;                   // actor = owner_actor_id(epoch)
  bool fenced = false;            // lease box: takes by CAS, commits through DONE (see TAKE, fenced)
  bool light_fence = false;       // SYNC POINT B without its fence (wake.hpp, THE ASYMMETRIC FENCE)
  std::uint64_t head[kMaxLanes] = {};  // private cursor of each FIFO lane
  std::vector<std::uint32_t> lifo_redeliver[kMaxLanes];  // lifo slots taken over from a gone owner
  std::vector<pending_slot> pending;                      // taken, not yet committed
  std::uint64_t stuck_pos[kMaxLanes] = {};
  std::uint64_t stuck_since_ns[kMaxLanes] = {};
  std::uint64_t next_check_ns[kMaxLanes] = {};
  std::error_code last_error;
  std::uint32_t polls = 0;  // receive polls: every 64th looks at the clock for tail_look_due (owner.cpp)
  std::uint64_t tail_look_ns = 0;  // when a poll last read the tails (tail_look_due)
  // THE STASH (stash boxes): this owner's view of its entries.
  std::deque<std::uint32_t> stash_front;   // FRONT entries, in delivery order (a priority box: in its heaps)
  std::vector<std::uint32_t> stash_parked; // PARKED entries, in stash order
  std::vector<std::uint32_t> stash_free;   // FREE entries
  std::uint64_t stash_held[kMaxLanes] = {};  // entries PARKED, FRONT or TAKEN by the stash, per lane (not sorted ones)
  // PRIORITY BOXES: each lane's QUEUED entries, a heap (priority.cpp).
  std::vector<sort_item> sort_heap[kMaxLanes];
  sort_run run[kMaxLanes];  // THE IN-ORDER RUN of each lane's ring (priority.cpp sort_direct)
  std::vector<std::uint32_t> sort_taken;        // sort_take: entries taken this call, committed together
  std::vector<std::uint64_t> sort_taken_state;  // (their TAKEN states)
  std::vector<char> sort_taken_drop;            // (the filter dropped it)
  std::vector<std::uint32_t> commit_scratch;    // commit_entries: the entries it made DONE
  // CUSTOM BUFFERS (buffer.cpp): the type, each lane's buffer (ids of QUEUED
  // entries), the entries moved but not yet pushed, those given back
  // (delivered before the buffer's next pop), and which entries a buffer holds.
  std::shared_ptr<const buffer_type> buf_type;
  std::unique_ptr<buffer> bufs[kMaxLanes];
  std::vector<std::uint32_t> buf_new[kMaxLanes];
  std::deque<std::uint32_t> buf_front[kMaxLanes];
  std::uint64_t buf_held[kMaxLanes] = {};
  std::vector<char> buf_in;  // [entry]: held by its lane's buffer

  owner_lane_counters* counters(std::uint32_t lane) const noexcept { return m->actor_counters(actor_index, lane); }
};

// What the sink (the owner's filter) makes of one taken message.
enum class take_verdict {
  deliver,  // hand it out (committed as delivered)
  drop,     // remove it (committed as filtered)
  skip,     // stop: this message and the rest stay in the box
};

// Where taken messages go: the owner copies each one out through append().
struct take_sink {
  std::size_t max = 0;        // take at most this many
  bool look_at_tail = true;   // on an unpublished slot, read the tail to tell "busy" from "empty"
  // `position`: the message's lane position (message_id), kNoPosition for a parked one;
  // `priority`: a priority box's message's priority (a custom buffer's: its key), else 0.
  virtual take_verdict append(const std::byte* data, std::uint32_t size, bool redelivered, std::uint32_t lane,
                              std::uint64_t position, std::int64_t priority) = 0;

 protected:
  ~take_sink() = default;
};

// A post's deadline, read from the clock only when the post first has to wait
// (an uncontended post makes no clock call).
struct lazy_deadline {
  std::uint64_t timeout_ns = UINT64_MAX;  // UINT64_MAX: wait forever
  std::uint64_t at = 0;                   // CLOCK_MONOTONIC ns, once computed
  std::uint64_t get() noexcept;
};

struct take_result {
  std::size_t taken = 0;     // delivered or dropped
  bool skipped = false;      // the sink said skip: stop taking (all lanes)
  bool busy = false;     // something is claimed but not yet published (a slow or dead writer)
  bool unknown = false;  // stopped at an unpublished slot without reading the tail (look_at_tail false)
  bool corrupt = false;  // the lane broke an invariant; last_error says how
};

// How owner_take treats what it takes.
enum class take_mode {
  commit_each,  // take, copy, commit, free each message (the fast path)
  hold,         // take and copy; keep in o.pending until owner_commit()
};

// Takes and copies up to sink.max messages from `lane` (owner only).
take_result owner_take(owner_ctx& o, std::uint32_t lane, take_sink& sink, take_mode mode) noexcept;

// FAST TAKE: one message from a FIFO lane in the common case (T1 finds FULL(p)
// with a valid length; T2-T7 as in owner_take, commit_each, same orders and
// fault points), for the one-message receive calls. `empty`: T1 found EMPTY(p)
// (nothing published at the head; whether it is claimed needs the tail: the
// caller's general path reads it now and then). `general`: anything else
// (redelivery, a slot someone else decided, a lost race, a corrupt length, a
// lifo lane): nothing was taken; owner_take decides it.
enum class fast_take { taken, empty, general };
fast_take owner_take_fast(owner_ctx& o, const lane_view& L, take_sink& sink) noexcept;

// Commits o.pending[first..]: TAKEN -> DONE (a CAS each: a slot re-taken by
// a newer owner is lost to us), counts them, frees them; o.pending[0, first)
// stays held (earlier reads: a lease box's receive commits only what it took
// itself). kept[i] (if given) says whether pending[first + i] was committed.
struct commit_result {
  std::size_t committed = 0;  // delivered or dropped by the filter
  std::size_t lost = 0;  // re-taken by a newer owner: it delivers them again
};
commit_result owner_commit(owner_ctx& o, std::vector<char>* kept, std::size_t first = 0) noexcept;
// Gives the held slots o.pending[first..] back (TAKEN -> what it was): for a
// receive that lost the box before committing what it took (the messages
// its caller never saw). Earlier reads stay held: their caller saw them, so
// they go to the next owner flagged (R4), never back as they were. Returns
// how many went back.
std::size_t owner_give_back(owner_ctx& o, std::size_t first = 0) noexcept;

// After taking the lease: finishes or re-takes the slots of owners that are
// gone (committed ones are counted and freed, uncommitted ones will be
// delivered again, flagged), and clears stray sleeping bits.
void owner_recover(owner_ctx& o) noexcept;

// True when nothing is claimed or stored in the lane (the owner may sleep).
// Sets the owner-sleeping bit when it returns true; owner_clear_sleep() undoes it.
bool owner_arm_sleep(owner_ctx& o, std::uint32_t lane) noexcept;
void owner_clear_sleep(owner_ctx& o, std::uint32_t lane) noexcept;

// RESIZE (resize.cpp): sets lane `lane`'s limit (resizable lanes: 1..its
// reserve) and, shrinking below its depth, drops the excess by its policy
// with p's producer entry (E1-E4; captured for dead letters when p.capture).
struct resize_outcome {
  std::uint32_t before = 0, after = 0, max_capacity = 0;
  std::uint64_t dropped = 0;
};
result<resize_outcome> resize_lane(producer_ctx& p, std::uint32_t lane, std::uint32_t limit) noexcept;

// THE STASH (stash.cpp). Owner only.
// Parks a copy of `data` (a message of lane `lane`; a priority box's: of that
// priority): errors invalid_argument (no stash, no such lane), too_large,
// full (no free entry, or the lane would be left no room), not_owner (a
// newer owner holds the entries).
result<void> stash_put(owner_ctx& o, std::string_view data, std::uint32_t lane, std::int64_t priority = 0) noexcept;
// Makes every parked message FRONT (delivered next, in stash order; a
// priority box's: first of its priority in its lane's heap); returns how many.
std::size_t stash_unstash_all(owner_ctx& o) noexcept;
// Delivers FRONT entries into the sink (before any lane): as owner_take.
take_result stash_take(owner_ctx& o, take_sink& sink, take_mode mode) noexcept;
// owner_commit's and owner_give_back's part for held stash entries.
void stash_commit_pending(owner_ctx& o, std::vector<char>* kept, commit_result& r) noexcept;
void stash_give_back(owner_ctx& o, const pending_slot& ps) noexcept;
// Takeover: see THE STASH.
void stash_recover(owner_ctx& o) noexcept;
// Entries in use per lane (inspection; exact when idle).
std::uint64_t stash_count(const mapped_box& m, std::uint32_t lane) noexcept;
// U2-U4 for `entries` (all TAKEN(E), all of lane `lane`): counts `unstashed`
// for the parked ones, and a priority box's sorted ones the filter dropped
// (drops[k] != 0; drops may be null) in `sort_filtered`; returns how many
// were ours to commit (kept[k * kept_stride] = 1 for those).
// buffer_drops: the drops are a custom buffer's (counted buffer_dropped, op target 1).
std::size_t commit_entries(owner_ctx& o, std::uint32_t lane, const std::uint32_t* entries, const std::uint64_t* states,
                           std::size_t count, char* kept, std::size_t kept_stride, const char* drops,
                           bool buffer_drops = false) noexcept;

// PRIORITY BOXES (priority.cpp). Owner only.
// THE IN-ORDER RUN: delivers lane by lane what the store would hand out
// next anyway, without moving the ring's messages into the store: the
// store's first ones while they are no later than the ring's, then the
// ring's own leading messages that are no later than everything after them.
// `sorted_from`: the first lane it could not finish (the sort's to serve),
// lane_count() if none.
take_result sort_direct(owner_ctx& o, take_sink& sink, take_mode mode, std::uint32_t& sorted_from) noexcept;
// Moves what the rings hold into the store (M1-M4), as far as it has free entries.
take_result sort_drain(owner_ctx& o, bool look_at_tail) noexcept;
// Delivers from the store: lane by lane, lowest priority first (Q1-Q3).
// only_lane, bound: only that lane's, and only while the first's priority is <= bound
// (sort_direct's D0).
take_result sort_take(owner_ctx& o, take_sink& sink, take_mode mode, std::uint32_t only_lane = UINT32_MAX,
                      std::int64_t bound = INT64_MAX) noexcept;
// Whether the store holds messages for this owner to deliver.
bool sort_waiting(const owner_ctx& o) noexcept;
void sort_give_back(owner_ctx& o, const pending_slot& ps) noexcept;
// The heaps, from the entries a takeover has made QUEUED, and FRONT (the
// stash's, in stash order; stash_recover).
void sort_rebuild(owner_ctx& o, const std::vector<std::uint32_t>& queued, const std::vector<std::uint32_t>& front) noexcept;
// A FRONT entry (unstashed) into its lane's heap.
void sort_push_front(owner_ctx& o, std::uint32_t entry) noexcept;
// Unstashed messages waiting in the heaps (Owner::unstashed_waiting).
std::size_t sort_front_count(const owner_ctx& o) noexcept;
// A priority box's messages of `lane` in the store (inspectors; 0 in other boxes):
// QUEUED and sorted TAKEN entries, and SORTING ones the ring's take has
// already committed (sorting_committed).
std::uint64_t sorted_count(const mapped_box& m, std::uint32_t lane) noexcept;
// A SORTING entry (state `seen`, M1-M4) of `lane` holding ring position
// `order`: has the ring's take of that position committed it (T5: counted
// delivered, it left the ring)? Its owner actor's op still names the
// position and `delivered` still reads op_before: not yet (the message is
// the ring's, in its depth); else it has (the store's). The takeover
// (stash_recover) keeps or frees the entry by the same test.
bool sorting_committed(const mapped_box& m, std::uint64_t seen, std::uint32_t lane, std::uint64_t order) noexcept;

// CUSTOM BUFFERS (buffer.cpp). Owner only.
// The registered type `name` (null: not registered in this process).
std::shared_ptr<const buffer_type> find_buffer(std::string_view name);
// The error for a process that has not registered the box's type (who: "box 'x'").
std::error_code buffer_unknown_error(const mapped_box& m, std::string_view doing);
// Pushes lane `lane`'s moved entries (buf_new) into its buffer and drops what
// it names (and what exceeds the lane's limit), counted buffer_dropped.
// False when the buffer broke its contract (last_error says how; rebuilt).
bool buf_admit(owner_ctx& o, std::uint32_t lane) noexcept;
// The next entry to deliver from lane `lane` (given back first, then pop());
// false when none. `broken`: the buffer broke its contract (rebuilt).
bool buf_next(owner_ctx& o, std::uint32_t lane, std::uint32_t& entry, bool& broken) noexcept;
// Puts a taken entry back in front of the lane (a skip, an uncommitted read).
void buf_put_back(owner_ctx& o, std::uint32_t lane, std::uint32_t entry, bool front) noexcept;
// New buffers from the entries a takeover has made QUEUED (arrival order).
void buf_rebuild(owner_ctx& o, const std::vector<std::uint32_t>& queued) noexcept;
// Whether some lane's buffer (or its given-back entries) holds messages.
bool buf_waiting(const owner_ctx& o) noexcept;

// Messages in the lane, by scanning slots (exact when idle, and when the
// owner is dead: a slot it committed and did not free is not counted, T5).
std::uint64_t lane_depth_scan(const mapped_box& m, std::uint32_t lane) noexcept;

}  // namespace shmbox::detail
