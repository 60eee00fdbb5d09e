/*
 * model/ring.pml - the FIFO slot protocol of lib/ring/ring.hpp: POST P1-P6,
 * EVICT E1-E4, TAKE T1-T6 (commit_each mode, as Owner::receive on a box
 * without a lease), the repairs R1-R3 and the owner's sleep / wake handshake,
 * with every process able to die at any step.
 *
 * One lane of CAP slots; producers 1 and 2 (and 3) post N1 and N2 (and N3)
 * messages; one owner receives forever. See model/README.md for the mapping
 * and the abstractions.
 *
 * Granularity. Every load, store or CAS of a word that another LIVE process
 * can read is its own atomic step of the model. Writes that only a repairer
 * of a DEAD process reads (op_before, evict/repair/recv op words, the
 * counters) are merged into a neighbouring step, with a death point between
 * them wherever dying there leaves a different state behind.
 *
 * Death. DIE_OR, at the start of a step, lets the process die instead of
 * taking the step (at most MAXDEAD deaths in a run). dead[a] is then also
 * the liveness oracle of repairers (pid + start time in the real code): a
 * slow process is never dead. A process waiting in a poll loop or a futex
 * holds no slot and no pending op, so dying while it waits is the same as
 * dying just before it waits (a death point there).
 *
 * Waiting. Poll loops of the real code (the owner's backoff on a claimed
 * slot, a drop_oldest producer waiting for space) are blocking waits for
 * "what I poll changed, or a repair could act now". The owner's futex sleep
 * ends when wake_seq changes (P6) or when its slice ends (kLostWakeSliceNs,
 * lib/ring/wake.hpp: the owner looks at its lanes again at least every 250 ms).
 * Time is abstracted: the slice is spin's `timeout`, which is enabled only
 * when no other statement of any process is: "the slice expires, at the
 * latest once nothing else happens". It is further limited to the slices
 * that find something (the tail moved since the owner armed its sleep): a
 * slice that finds the lane as it left it re-arms and sleeps again, a
 * stutter that changes nothing, and leaving it out keeps the model free of
 * the idle wake-sleep loop (which -DNP would report as a non-progress
 * cycle). So a live process that would poll or sleep forever while work is
 * waiting is an invalid end state (deadlock) or a failed assertion of the
 * `checker`, which runs at quiescence (`timeout`, once the owner's slice
 * has nothing more to find).
 *
 * Switches (spin -D...):
 *   POLICY=0 reject, POLICY=1 drop_oldest (default)
 *   CAP N1 N2 N3 MAXDEAD BATCH   sizes
 *   MUTANT_NO_SLICE      the owner's sleep has no slice (the C++ before the
 *                        fix of problem 1 in README): a producer that dies
 *                        between P5 and P6 leaves the owner asleep forever
 *   MUTANT_R1_NOCOUNT    R1 frees a dead writer's claimed slot without counting
 *   MUTANT_T3_STORE      drop_oldest owner takes with a plain store, not a CAS
 *   MUTANT_R2_NOCAS      R2 counts with a plain increment, not CAS(before)
 *   MUTANT_R1_NOCHECK    R1 does not look for a live claimant
 *   MUTANT_NO_WITHDRAW   a producer waiting for space keeps its stale claim op
 *   MUTANT_DEPTH_GHOST   the depth scan counts every slot TAKEN by the owner (the
 *                        C++ before the fix of problem 6 in README): an owner
 *                        that dies between T5 and T6 (or between R1's count
 *                        and its free) leaves its message in a counter and in
 *                        the depth
 *   MUTANT_SKIP_HELD     the owner skips a slot a producer holds (TAKEN by an
 *                        evictor or repairer), as the C++ did before the fix
 *                        of problem 5 (README): a producer that dies between
 *                        E2 and E3 leaves its message counted nowhere (not in
 *                        dropped_oldest, not in the depth) until a producer
 *                        needs the slot, which in a quiet box never happens
 */

#ifndef CAP
#define CAP 2
#endif
#ifndef N1
#define N1 2
#endif
#ifndef N2
#define N2 2
#endif
#ifndef N3
#define N3 0                    /* a third producer (actor 3) if > 0 */
#endif
#define MAXP (N1 + N2 + N3)     /* positions 0 .. MAXP-1 can be claimed */
#ifndef MAXDEAD
#define MAXDEAD 1
#endif
#ifndef BATCH
#define BATCH 2                 /* sink.max of one receive call */
#endif
#define REJECT 0
#define DROP_OLDEST 1
#ifndef POLICY
#define POLICY DROP_OLDEST
#endif

/* slot states (layout.hpp slot_state) */
#define EMPTY 0
#define FULL 1
#define TAKEN 2

/* actors: 0 none, 1..2 producer entries (entry + 1), OWN the owner actor */
#define NOACT 0
#if N3 > 0
#define OWN 4
#define NACT 5
#else
#define OWN 3
#define NACT 4
#endif

/* op kinds (layout.hpp op_kind) */
#define OP_NONE 0
#define OP_CLAIM 1
#define OP_EVICT 2
#define OP_REPAIR 3
#define OP_RECV 6

/* ghost fates of a position */
#define F_NONE 0
#define F_DELIVERED 1
#define F_EVICTED 2
#define F_ABANDONED 3

/* ---- the segment ---- */
byte spos[CAP];                 /* slot sequence word: position ...        */
byte sst[CAP];                  /*                     ... state ...       */
byte sact[CAP];                 /*                     ... actor           */
byte payload[CAP];              /* what the writer of the slot wrote       */
byte tailw;                     /* lane.tail = next position << 1 | sleeping bit */
byte wake_seq;                  /* owner.wake_seq (futex word)             */
byte opk[NACT];                 /* op word of each actor: kind ...          */
byte opt[NACT];                 /*                        ... target        */
byte opb[NACT];                 /* op_before of each actor                  */
byte c_evict[NACT];             /* producer_lane_counters.evicted           */
byte c_aband[NACT];             /* .abandoned (producers and owner actor)   */
byte c_rej[NACT];               /* .rejected                                */
byte deliv;                     /* owner_lane_counters.delivered            */

/* ---- liveness oracle ---- */
bool dead[NACT];
byte ndead;

/* ---- ghosts (not in the segment) ---- */
byte fate[MAXP];                /* F_*: set in the step that bumps the counter */
bool pub[MAXP];                 /* P5 done: the post completed as "stored"  */
byte slept_at;                  /* owner asleep (futex): its cursor + 1; else 0 */

#define SLOT(p) ((p) % CAP)
#define SEEN_IS(p, a, b, c) (spos[SLOT(p)] == (a) && sst[SLOT(p)] == (b) && sact[SLOT(p)] == (c))

/* every process declares LOCALS; a dead process forgets them */
#define LOCALS byte k, hp, first, n, w, t, sp, ss, sa, before, v, k2, tg; bool busy
#define RESET k = 0; hp = 0; first = 0; n = 0; w = 0; t = 0; sp = 0; ss = 0; sa = 0; \
              before = 0; v = 0; k2 = 0; tg = 0; busy = 0

#define CAN_DIE (ndead < MAXDEAD)
/* die instead of the step that follows (inside an atomic) */
/* (the dead process forgets its locals at `died`) */
#define DIE_OR if :: CAN_DIE -> dead[me] = 1; ndead++; goto died :: true fi;

/* Every counted fate: at most one per position; "abandoned" never for a
 * message that was published. */
#define FATE(p, f) assert(fate[p] == F_NONE); fate[p] = f
#define FATE_ABANDON(p) assert(!pub[p]); FATE(p, F_ABANDONED)
/* A slot is freed for the next lap only once its position's fate is counted. */
#define FREE_SLOT(p) assert(fate[p] != F_NONE); spos[SLOT(p)] = (p) + CAP; sst[SLOT(p)] = EMPTY; sact[SLOT(p)] = NOACT

/* R1's oracle: no live producer announces claim(q). (Time is abstracted:
 * kRepairGraceNs, kOrphanClaimNs and the rate limits always end.) */
#ifdef MUTANT_R1_NOCHECK
#define NO_LIVE_CLAIMANT(q) (1)
#else
#define LIVE_CLAIMANT(i, q) (opk[i] == OP_CLAIM && opt[i] == (q) && !dead[i])
#if N3 > 0
#define NO_LIVE_CLAIMANT(q) (!(LIVE_CLAIMANT(1, q) || LIVE_CLAIMANT(2, q) || LIVE_CLAIMANT(3, q)))
#else
#define NO_LIVE_CLAIMANT(q) (!(LIVE_CLAIMANT(1, q) || LIVE_CLAIMANT(2, q)))
#endif
#endif
/* A repair of slot(q) seen as (EMPTY|TAKEN, a) could act now. */
#define REPAIRABLE(q, s, a) (((s) == EMPTY && (tailw >> 1) > (q) && NO_LIVE_CLAIMANT(q)) || \
                             ((s) == TAKEN && dead[a]))
/* The slot of p is held by a live producer (an evictor or a repairer): the
 * owner's cursor waits at it (T1b). */
#define HELD_LIVE(p) (spos[SLOT(p)] == (p) && sst[SLOT(p)] == TAKEN && sact[SLOT(p)] != OWN && \
                      !dead[sact[SLOT(p)]])

/* ------------------------------------------------------------------------
 * R1 (last part), abandon_fifo: repairer `me` abandons position q, seen as
 * (asp, ass, asa). op_before and op = repair(q) are read only by a repairer
 * of a dead `me`, so they share the step of the CAS (dying before the CAS
 * leaves nothing that matters). Then: abandoned++ | die | seq = EMPTY(q+cap).
 */
inline abandon_fifo(q, asp, ass, asa, NEXT) {
  atomic {
    DIE_OR
    before = c_aband[me]; opb[me] = before; opk[me] = OP_REPAIR; opt[me] = q;
    if
    :: SEEN_IS(q, asp, ass, asa) -> sst[SLOT(q)] = TAKEN; sact[SLOT(q)] = me
    :: else -> opk[me] = OP_NONE; before = 0; goto NEXT
    fi
  }
  atomic {
    DIE_OR
#ifdef MUTANT_R1_NOCOUNT
    spos[SLOT(q)] = (q) + CAP; sst[SLOT(q)] = EMPTY; sact[SLOT(q)] = NOACT;
#else
    c_aband[me] = before + 1; FATE_ABANDON(q);
    DIE_OR
    FREE_SLOT(q);
#endif
    opk[me] = OP_NONE; before = 0; goto NEXT
  }
}

/* EVICT E1-E4 by producer `me` of position q seen as (esp, ess, esa).
 * E1 (op_before, op = evict(q)) is read only by R2 once `me` is dead and only
 * if E2 succeeded: it shares E2's step. E3 (evicted++) is private: it shares
 * E4's step, with a death point between them. */
inline evict_fifo(q, esp, ess, esa, NEXT) {
  atomic {
    DIE_OR
    before = c_evict[me]; opb[me] = before; opk[me] = OP_EVICT; opt[me] = q;   /* E1 */
    if                                                                         /* E2 */
    :: SEEN_IS(q, esp, ess, esa) -> sst[SLOT(q)] = TAKEN; sact[SLOT(q)] = me
    :: else -> before = 0; goto NEXT
    fi
  }
  atomic {
    DIE_OR
    c_evict[me] = before + 1; FATE(q, F_EVICTED);                              /* E3 */
    DIE_OR
    FREE_SLOT(q);                                                              /* E4 */
    before = 0; goto NEXT
  }
}

/* R2: slot of q is TAKEN by dead producer x (seen as csp, css, x): read x's
 * op and op_before, finish x's count (CAS from op_before), free the slot. */
inline complete_dead_producer(q, csp, css, x, NEXT) {
  atomic { DIE_OR k2 = opk[x]; tg = opt[x] }                            /* op */
  atomic { DIE_OR before = opb[x];                                      /* op_before_a */
    if
    :: css == TAKEN && tg == q && (k2 == OP_EVICT || k2 == OP_REPAIR) -> goto R2_COUNT
    :: else -> k2 = 0; tg = 0; before = 0
    fi
  }
  /* x's op does not describe the slot: the code abandons it (CAS from the
   * seen value). Reached with a stale `seen` (the CAS then fails); a CAS
   * that succeeds here would abandon whatever x held (checked by FATE). */
  abandon_fifo(q, csp, css, x, NEXT);
R2_COUNT:
  atomic {                                                              /* finish_count */
    DIE_OR
#ifdef MUTANT_R2_NOCAS
    if
    :: k2 == OP_EVICT -> c_evict[x] = c_evict[x] + 1; FATE(q, F_EVICTED)
    :: else -> c_aband[x] = c_aband[x] + 1; FATE_ABANDON(q)
    fi
#else
    if
    :: k2 == OP_EVICT && c_evict[x] == before -> c_evict[x] = before + 1; FATE(q, F_EVICTED)
    :: k2 == OP_REPAIR && c_aband[x] == before -> c_aband[x] = before + 1; FATE_ABANDON(q)
    :: else
    fi
#endif
  }
  atomic {                                                              /* CAS seq -> EMPTY(q+cap) */
    DIE_OR
    if
    :: SEEN_IS(q, csp, css, x) -> FREE_SLOT(q)
    :: else
    fi;
    k2 = 0; tg = 0; before = 0; goto NEXT
  }
}

/* R3: slot of q is TAKEN by the dead owner actor, seen as (rsp, rss, OWN):
 * dead_owner_op, then finish its repair / free its committed slot / (a
 * drop_oldest producer only) evict its uncommitted message. */
inline dead_owner_slot(q, rsp, rss, may_evict, NEXT) {
  atomic { DIE_OR k2 = opk[OWN]; tg = opt[OWN] }                        /* op */
  atomic { DIE_OR before = opb[OWN];                                    /* op_before */
    if
    :: k2 == OP_REPAIR && tg == q -> v = 1
    :: k2 == OP_RECV && tg == q -> v = 4
    :: else -> v = 3
    fi
  }
  if
  :: v == 4 -> atomic { DIE_OR v = (deliv != before -> 2 : 3) }         /* delivered */
  :: else
  fi;
  if
  :: v == 1 ->
     atomic { DIE_OR before = opb[OWN] }
     atomic {                                                           /* finish_count(abandoned) */
       DIE_OR
       if
       :: c_aband[OWN] == before -> c_aband[OWN] = before + 1; FATE_ABANDON(q)
       :: else
       fi
     }
     atomic { DIE_OR if :: SEEN_IS(q, rsp, rss, OWN) -> FREE_SLOT(q) :: else fi;
              k2 = 0; tg = 0; v = 0; before = 0; goto NEXT }
  :: v == 2 ->
     atomic { DIE_OR if :: SEEN_IS(q, rsp, rss, OWN) -> FREE_SLOT(q) :: else fi;
              k2 = 0; tg = 0; v = 0; before = 0; goto NEXT }
  :: v == 3 && may_evict -> atomic { k2 = 0; tg = 0; v = 0; before = 0 };
     evict_fifo(q, rsp, rss, OWN, NEXT)
  :: v == 3 && !may_evict -> atomic { k2 = 0; tg = 0; v = 0; before = 0; goto NEXT }
  fi
}

/* repair_fifo_slot: the slot of q is stuck, seen as (rsp, rss, rsa).
 * EMPTY: R1 (tail past q, every claimant dead); TAKEN: R2 / R3. Only a slot
 * that holds position q: one that has moved on (EMPTY(q + cap), a later lap)
 * is finished, nothing to repair (the C++'s first check; a priority box's
 * post at a closed gate asks about the published head, which the model has
 * not: here every caller passes rsp == q). */
inline repair_fifo_slot(q, rsp, rss, rsa, may_evict, NEXT) {
  if
  :: rsp != q -> goto NEXT
  :: rsp == q && rss == EMPTY ->
     atomic { DIE_OR if :: (tailw >> 1) <= q -> goto NEXT :: else fi }  /* tail (seq_cst) */
     /* claimants_of: each producer entry's op, then its key */
     atomic { DIE_OR v = ((opk[1] == OP_CLAIM && opt[1] == q) -> (dead[1] -> 1 : 2) : 0);
#ifndef MUTANT_R1_NOCHECK
              if :: v == 2 -> v = 0; goto NEXT :: else fi
#endif
     }
     atomic { DIE_OR
              if
              :: opk[2] == OP_CLAIM && opt[2] == q -> v = (dead[2] -> 1 : 2)
              :: else
              fi;
#ifndef MUTANT_R1_NOCHECK
              if :: v == 2 -> v = 0; goto NEXT :: else fi;
#endif
#if N3 == 0
              v = 0
#endif
     }
#if N3 > 0
     atomic { DIE_OR
              if
              :: opk[3] == OP_CLAIM && opt[3] == q -> v = (dead[3] -> 1 : 2)
              :: else
              fi;
#ifndef MUTANT_R1_NOCHECK
              if :: v == 2 -> v = 0; goto NEXT :: else fi;
#endif
              v = 0
     }
#endif
     /* all dead (or none: an orphan, after kOrphanClaimNs): re-read the slot */
     atomic { DIE_OR if :: !SEEN_IS(q, rsp, rss, rsa) -> goto NEXT :: else fi }
     abandon_fifo(q, rsp, rss, rsa, NEXT)
  :: rsp == q && rss == TAKEN ->
     atomic { DIE_OR                                                    /* actor_state */
              if :: !dead[rsa] -> goto NEXT :: else fi }
     if
     :: rsa != OWN -> complete_dead_producer(q, rsp, rss, rsa, NEXT)    /* R2 */
     :: rsa == OWN -> dead_owner_slot(q, rsp, rss, may_evict, NEXT)     /* R3 */
     fi
  :: else -> assert(false)          /* DONE/DROPPED do not occur in commit_each lanes */
  fi
}

/* ------------------------------------------------------------------------
 * A producer: nmsg posts (POST P1-P6; full lane: reject, or EVICT E1-E4 and
 * waiting for space with the repairs R1-R3).
 */
#define NEXT_POST k++; w = 0; t = 0; sp = 0; ss = 0; sa = 0; \
                  if :: k < nmsg -> goto P1 :: else -> k = 0; goto died fi

proctype Producer(byte me; byte nmsg)
{
  LOCALS;

P1:
  atomic { DIE_OR w = tailw; t = w >> 1 }                               /* P1: tail (relaxed) */
  atomic {
    DIE_OR
    sp = spos[SLOT(t)]; ss = sst[SLOT(t)]; sa = sact[SLOT(t)];          /* P1: slot (acquire) */
    if
    :: sp == t && ss == EMPTY -> goto P2
    :: sp + CAP == t && ss == FULL -> goto FULL_LANE
    :: sp + CAP == t && (ss == TAKEN || ss == EMPTY) -> goto BUSY
    :: sp + CAP == t && ss != FULL && ss != TAKEN && ss != EMPTY -> assert(false)
    :: else -> goto STALE
    fi
  }
P2:
  atomic { DIE_OR opk[me] = OP_CLAIM; opt[me] = t }                     /* P2: op = claim(t) */
  atomic {
    DIE_OR
    if                                                                  /* P3: CAS tail */
    :: tailw == w -> tailw = ((t + 1) << 1) | (w & 1)
    :: else -> goto P1
    fi;
    payload[SLOT(t)] = t                                                /* P4: payload */
  }
  atomic {
    DIE_OR
    assert(SEEN_IS(t, t, EMPTY, NOACT));    /* nobody touched our claimed slot */
    sst[SLOT(t)] = FULL; sact[SLOT(t)] = me; pub[t] = 1;                /* P5: publish */
    if
    :: (w & 1) -> skip                         /* the owner may sleep: wake it */
    :: else -> NEXT_POST
    fi
  }
  atomic {
    DIE_OR
    wake_seq = wake_seq + 1;                                            /* P6: wake the owner */
    NEXT_POST
  }

FULL_LANE:  /* the slot still holds t - cap, FULL */
#if POLICY == REJECT
  atomic { DIE_OR opk[me] = OP_NONE;                                    /* withdraw a stale claim */
           DIE_OR c_rej[me] = c_rej[me] + 1; NEXT_POST }               /* give_up: full */
#else
  atomic { DIE_OR opk[me] = OP_NONE }                                   /* withdraw a stale claim */
  evict_fifo(t - CAP, sp, ss, sa, P1)
#endif

BUSY:       /* the slot still holds t - cap: TAKEN, or EMPTY (being written) */
#if POLICY == REJECT
  /* producer_maybe_repair never repairs within one reject post (its
   * stuck_since starts at 0 and is only set): answer full. */
  atomic { DIE_OR opk[me] = OP_NONE;
           DIE_OR c_rej[me] = c_rej[me] + 1; NEXT_POST }
#else
#ifndef MUTANT_NO_WITHDRAW
  atomic { DIE_OR opk[me] = OP_NONE; DIE_OR skip }                      /* withdraw */
#endif
  /* producer_maybe_repair (R1-R3; may evict a gone owner's slot), else
   * wait_for_space: poll until the slot or the tail changes */
  if
  :: REPAIRABLE(t - CAP, ss, sa) -> repair_fifo_slot(t - CAP, sp, ss, sa, 1, P1)
  :: !SEEN_IS(t, sp, ss, sa) || tailw != w -> goto P1
  fi;
#endif

STALE:      /* our tail is stale; if it did not move, the lane is corrupt */
  atomic { DIE_OR assert(tailw != w); goto P1 }

  atomic { skip;          /* a `goto died` enters this atomic step in the middle */
died:
    RESET }
}

/* ------------------------------------------------------------------------
 * The owner: receive calls (fifo_take, commit_each) forever; when the lane
 * is empty it arms the sleeping bit and sleeps on wake_seq, for at most one
 * slice (kLostWakeSliceNs) at a time.
 */

proctype Owner()
{
  byte me = OWN;
  LOCALS;

CALL:
  atomic { n = 0; busy = 0; first = hp; w = 0; t = 0 }
T1:
  atomic {
    DIE_OR
    sp = spos[SLOT(hp)]; ss = sst[SLOT(hp)]; sa = sact[SLOT(hp)];       /* T1 (acquire) */
    if
    :: sp > hp -> goto JUMP                    /* decided by someone else, reused */
    :: sp + CAP == hp -> goto ENDCALL          /* a skipped evictor/repairer is not done */
    :: sp == hp && ss == FULL -> goto TAKE
#ifdef MUTANT_SKIP_HELD
    :: sp == hp && ss == TAKEN && sa != OWN -> hp++; goto T1   /* evictor/repairer: skip p */
#else
    /* T1b: held by a producer (evictor E2-E4, repairer R1): its count may
     * not be done, so the cursor waits at p (busy); a dead holder's op is
     * finished by R2 (owner_check_stuck) */
    :: sp == hp && ss == TAKEN && sa != OWN && n > 0 -> busy = 1; goto ENDCALL
    :: sp == hp && ss == TAKEN && sa != OWN && n == 0 -> busy = 1; goto STUCK
#endif
    :: sp == hp && ss == EMPTY && n > 0 -> goto ENDCALL
    :: sp == hp && ss == EMPTY && n == 0 -> goto TAILCHK
    :: else -> assert(false)   /* behind the cursor, TAKEN by us (one epoch: no
                                  redelivery here), or not a FIFO state */
    fi
  }
JUMP:
  atomic { DIE_OR t = tailw >> 1; hp = (t > hp + CAP -> t - CAP : hp + 1); t = 0; goto T1 }
TAKE:
  atomic {
    DIE_OR
    before = deliv; opb[OWN] = before; opk[OWN] = OP_RECV; opt[OWN] = hp;   /* T2 announce */
#if POLICY == DROP_OLDEST && !defined(MUTANT_T3_STORE)
    if                                                                  /* T3: CAS */
    :: SEEN_IS(hp, sp, ss, sa) -> sst[SLOT(hp)] = TAKEN; sact[SLOT(hp)] = OWN
    :: else -> opk[OWN] = OP_NONE; before = 0; goto T1                  /* lost: look again */
    fi;
#else
#if POLICY == REJECT
    assert(SEEN_IS(hp, sp, ss, sa));        /* "no one else writes a FULL slot" */
#endif
    spos[SLOT(hp)] = hp; sst[SLOT(hp)] = TAKEN; sact[SLOT(hp)] = OWN;   /* T3: release store */
#endif
    assert(payload[SLOT(hp)] == hp)                                     /* T4: copy, never torn */
  }
  atomic {
    DIE_OR
    deliv = before + 1; FATE(hp, F_DELIVERED);                          /* T5: commit */
    DIE_OR
    FREE_SLOT(hp); opk[OWN] = OP_NONE;                                  /* T6: free */
    before = 0; n++; hp++;
    if :: n < BATCH -> goto T1 :: else -> goto ENDCALL fi
  }
TAILCHK:
  atomic {
    DIE_OR
    t = tailw >> 1;                                                     /* tail (seq_cst) */
    if :: t <= hp -> goto ENDCALL :: else fi;                           /* lane empty */
    busy = 1; t = 0                                                     /* claimed, unpublished */
  }
  /* owner_check_stuck: R1 (EMPTY, claimed) or R2 (T1b: TAKEN by a producer)
   * once the grace period is over */
STUCK:
  if
  :: REPAIRABLE(hp, ss, sa) -> repair_fifo_slot(hp, sp, ss, sa, 0, T1)
  :: else -> goto ENDCALL
  fi;
ENDCALL:
  atomic {
    DIE_OR
    sp = 0; ss = 0; sa = 0;
    if
    :: n > 0 -> goto CALL                      /* returned messages: next call */
    :: n == 0 && busy -> goto BACKOFF
    :: else -> goto SLEEP
    fi
  }
BACKOFF:
  /* then poll again: that poll finds something new unless slot(hp) is still
   * claimed (tail > hp), unpublished, by a live writer, or (T1b) still held
   * by a live evictor or repairer */
#ifdef MUTANT_SKIP_HELD
  (!SEEN_IS(hp, hp, EMPTY, NOACT) || (tailw >> 1) <= hp || NO_LIVE_CLAIMANT(hp));
#else
  ((!SEEN_IS(hp, hp, EMPTY, NOACT) || (tailw >> 1) <= hp || NO_LIVE_CLAIMANT(hp)) && !HELD_LIVE(hp));
#endif
  goto CALL;
SLEEP:
  atomic { DIE_OR w = wake_seq }                                        /* read wake_seq */
  atomic {                                                              /* owner_arm_sleep */
    DIE_OR
    t = tailw;
    if
    :: (t >> 1) != hp -> goto CLEAR            /* something claimed: not armed */
    :: (t >> 1) == hp && (t & 1) -> slept_at = hp + 1; goto ARMED
    :: else
    fi
  }
  atomic {
    DIE_OR
    if
    :: tailw == t -> tailw = t | 1; DIE_OR slept_at = hp + 1; goto ARMED
    :: else -> goto CLEAR
    fi
  }
ARMED:
end_sleep:
  if                                                                    /* futex_wait */
  :: (wake_seq != w)                           /* woken (P6) */
#ifndef MUTANT_NO_SLICE
  :: timeout && (tailw >> 1) != hp             /* the slice ends (see "Waiting" above) */
#endif
  fi;
CLEAR:                                                                  /* owner_clear_sleep */
  atomic { DIE_OR slept_at = 0; t = tailw; if :: !(t & 1) -> goto CALL :: else fi }
  atomic { DIE_OR if :: tailw == t -> tailw = t & 254 :: else fi; goto CLEAR }

  atomic { skip;          /* a `goto died` enters this atomic step in the middle */
died:
    RESET }
}

/* lane_depth_scan's test for a slot TAKEN by the owner (owner_slot_counted):
 * the owner has counted its message and not freed the slot: committed it
 * (T5, not T6: op recv(p), `delivered` moved past op_before), or abandoned
 * it repairing a dead claim (R1 counted, not freed: op repair(p),
 * `abandoned` moved past op_before). Such a message is in a counter, so the
 * scan leaves it out of the depth. */
#ifdef MUTANT_DEPTH_GHOST
#define OWNER_COUNTED(p) (0)
#else
#define OWNER_COUNTED(p) (opt[OWN] == (p) && ((opk[OWN] == OP_RECV && deliv != opb[OWN]) || \
                                             (opk[OWN] == OP_REPAIR && c_aband[OWN] != opb[OWN])))
#endif
/* ... and whether the scan counts position p (ring_take.cpp lane_depth_scan:
 * the slot still holds p, FULL, claimed (EMPTY), or TAKEN by the owner and
 * not committed; not one a producer holds) */
#define SCAN_COUNTS(p) (spos[SLOT(p)] == (p) && (sst[SLOT(p)] == FULL || sst[SLOT(p)] == EMPTY || \
                        (sst[SLOT(p)] == TAKEN && sact[SLOT(p)] == OWN && !OWNER_COUNTED(p))))

/* Quiescence: nothing can move any more (and the owner's slice, if it
 * sleeps, would find nothing new). Check the accounting. */
active proctype checker()
{
  byte p, nd, ne, na, inbox, depth, rej, scan;
#ifdef MUTANT_NO_SLICE
  timeout ->
#else
  timeout && (dead[OWN] || slept_at == 0 || (tailw >> 1) == slept_at - 1) ->
#endif
  d_step {
    /* 1. Nothing lost: with a live owner, every message whose post completed
     * as stored is delivered or evicted (dropped_oldest), never abandoned or
     * left behind: not even a dead evictor's, which the owner's cursor
     * waits at and finishes (T1b, R2). (Delivered at most once: FATE, at
     * each count.) */
    p = 0;
    do
    :: p < MAXP && p < (tailw >> 1) && !dead[OWN] ->
       assert(!pub[p] || fate[p] == F_DELIVERED || fate[p] == F_EVICTED);
       p++
    :: else -> break
    od;
    /* 2. The accounting. */
    p = 0;
    do
    :: p < MAXP ->
       if
       :: fate[p] == F_DELIVERED -> nd++
       :: fate[p] == F_EVICTED -> ne++
       :: fate[p] == F_ABANDONED -> na++
       :: else
       fi;
       if
       :: p < (tailw >> 1) ->
          /* claimed: counted once, or still in its slot (never freed uncounted) */
          assert(fate[p] != F_NONE || spos[SLOT(p)] == p);
          if :: fate[p] == F_NONE -> inbox++ :: else fi;
          /* the depth as the C++ counts it (lane_depth_scan): FULL, claimed
           * (EMPTY) or TAKEN by the owner, not a slot a producer holds */
          if :: fate[p] == F_NONE && !(sst[SLOT(p)] == TAKEN && sact[SLOT(p)] != OWN) -> depth++ :: else fi;
          /* ... and as the scan reads it from the words (no fates) */
          if :: SCAN_COUNTS(p) -> scan++ :: else fi;
          /* A live owner has drained the lane: every claimed position is
           * delivered, evicted or abandoned (a hole whose writer died is
           * repaired: R1), or held by a dead evictor / repairer. */
#ifdef MUTANT_NO_SLICE
          /* (without the slice, a hole whose writer died while the owner
           * slept waits for the next post: tolerated here, so that spin
           * reports the lost wake-up of check 1) */
          assert(dead[OWN] || fate[p] != F_NONE ||
                 (spos[SLOT(p)] == p && sst[SLOT(p)] == EMPTY && !pub[p] && NO_LIVE_CLAIMANT(p)))
#else
          assert(dead[OWN] || fate[p] != F_NONE)
#endif
       :: else -> assert(fate[p] == F_NONE && !pub[p])
       fi;
       p++
    :: else -> break
    od;
    /* the counters agree with the fates: each count is one position */
    assert(deliv == nd);
    assert(c_evict[1] + c_evict[2] + c_evict[OWN - 1] * (N3 > 0) == ne);
    assert(c_aband[1] + c_aband[2] + c_aband[OWN - 1] * (N3 > 0) + c_aband[OWN] == na);
    /* posted = delivered + rejected + dropped_oldest + abandoned + in the box
     * (posted = stored + rejected, and a FIFO lane's stored total is its tail) */
    rej = c_rej[1] + c_rej[2] + c_rej[OWN - 1] * (N3 > 0);
    assert((tailw >> 1) + rej == deliv + rej + ne + na + inbox);
    /* ... with the depth the C++ reports, once a live owner has looked: a
     * slot a dead producer holds is finished by then (T1b; with the owner
     * dead it waits for the next owner, or a producer that needs it: R2) */
    assert(dead[OWN] || (tailw >> 1) + rej == deliv + rej + ne + na + depth);
    /* The scan of the words counts exactly those positions, owner alive or
     * dead: a message the owner committed and did not free (it died
     * between T5 and T6), or abandoned repairing it and did not free, is in
     * its counter, never in the depth too. */
    assert(scan == depth)
  }
}

init {
  byte i;
  atomic {
    for (i : 0 .. CAP - 1) { spos[i] = i }
    i = 0;
    run Producer(1, N1);
    run Producer(2, N2);
#if N3 > 0
    run Producer(3, N3);
#endif
    run Owner()
  }
}
