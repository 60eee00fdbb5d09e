/*
 * model/ring.pml - the FIFO slot protocol of lib/ring.cpp (POST P1-P6,
 * EVICT E1-E4, TAKE T1-T7 in commit_each mode, repairs R1-R3, the owner's
 * sleep/wake handshake), with any process able to die at any step.
 *
 * One lane of CAP slots, two producers (actors 1 and 2) posting N1 and N2
 * messages, one owner (actor OWN) receiving forever. Every access to a shared
 * word of the segment is one atomic step of the model (a d_step that may also
 * compute local values from what it read); nothing else is atomic.
 *
 * Death: the `killer` process sets dead[a] at any moment (at most MAXDEAD
 * times); each process body is `{ ... } unless { dead[me] }`, so the process
 * stops between any two of its steps, or while it waits. dead[] is also the
 * liveness oracle (pid + start time in the real code): slow is never dead.
 *
 * Polling loops of the real code (the owner's backoff on a claimed slot, a
 * drop_oldest producer waiting for space) are modelled as blocking waits for
 * "what I polled changed, or a repair could act now"; futex sleeps that have
 * no timeout are blocking waits on the futex word. So a live process that
 * would poll forever shows up as an invalid end state (deadlock), and the
 * `checker` runs exactly when nothing can move any more (quiescence).
 *
 * Build-time switches (spin -D...):
 *   POLICY=0 reject, POLICY=1 drop_oldest (default)
 *   CAP, N1, N2, MAXDEAD, BATCH (sizes)
 *   STRICT_WAKE  do not tolerate KNOWN ISSUE 1 (see README): expected to fail
 *   MUTANT_R1_NOCOUNT   repairer frees a dead writer's claim without counting
 *   MUTANT_T3_STORE     owner takes with a plain store in drop_oldest lanes
 *   MUTANT_NO_WAKE      producer skips P6 (never wakes the sleeping owner)
 *   MUTANT_R2_NOCAS     R2 counts with a plain increment, not CAS(before)
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
#define MAXP (N1 + N2)          /* positions 0 .. MAXP-1 can be claimed */
#ifndef MAXDEAD
#define MAXDEAD 2
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
#define OWN 3
#define NACT 4

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
byte head;                      /* lane.head (T7)                          */
byte wake_seq;                  /* owner.wake_seq (futex word)             */
byte opk[NACT];                 /* op word of each actor: kind ...          */
byte opt[NACT];                 /*                        ... target        */
byte opb[NACT];                 /* op_before of each actor                  */
byte c_evict[NACT];             /* producer_lane_counters.evicted           */
byte c_aband[NACT];             /* .abandoned (producers and owner actor)   */
byte c_rej[NACT];               /* .rejected                                */
byte deliv;                     /* owner_lane_counters.delivered            */

/* ---- liveness oracle and death ---- */
bool dead[NACT];
byte ndead;

/* ---- ghosts (not in the segment) ---- */
byte fate[MAXP];                /* F_*: set exactly where the counter is bumped */
bool pub[MAXP];                 /* P5 done: the post completed as "stored"  */
bool nowake[MAXP];              /* P5 done with the sleeping bit seen, P6 not yet */

#define SLOT(p) ((p) % CAP)
#define SEEN_IS(p, a, b, c) (spos[SLOT(p)] == (a) && sst[SLOT(p)] == (b) && sact[SLOT(p)] == (c))

/* Every counted fate: at most one per position, never "abandoned" for a
 * message that was published. */
#define FATE(p, f) assert(fate[p] == F_NONE); fate[p] = f
#define FATE_ABANDON(p) assert(!pub[p]); FATE(p, F_ABANDONED)
/* A slot is freed for the next lap only once its position's fate is counted. */
#define FREE_SLOT(p) assert(fate[p] != F_NONE); spos[SLOT(p)] = (p) + CAP; sst[SLOT(p)] = EMPTY; sact[SLOT(p)] = NOACT

/* R1's oracle: no live producer announces claim(q) (time: the grace period
 * and kOrphanClaimNs are abstracted away, they always end). */
#define NO_LIVE_CLAIMANT(q) (!((opk[1] == OP_CLAIM && opt[1] == (q) && !dead[1]) || \
                               (opk[2] == OP_CLAIM && opt[2] == (q) && !dead[2])))
/* A repair of slot(q) seen as (EMPTY|TAKEN, a) could act now. */
#define REPAIRABLE(q, s, a) (((s) == EMPTY && (tailw >> 1) > (q) && NO_LIVE_CLAIMANT(q)) || \
                             ((s) == TAKEN && dead[a]))
/* A slot held by a dead producer whose op says how to finish it (R2 pending). */
#define PENDING_R2(p) (spos[SLOT(p)] == (p) && sst[SLOT(p)] == TAKEN && sact[SLOT(p)] != OWN && \
                       dead[sact[SLOT(p)]] && opt[sact[SLOT(p)]] == (p) && \
                       (opk[sact[SLOT(p)]] == OP_EVICT || opk[sact[SLOT(p)]] == OP_REPAIR))

/* ------------------------------------------------------------------------
 * abandon_fifo (R1's last part): the repairer `me` abandons position q seen as
 * (asp, ass, asa). Locals used: before, ok.
 */
inline abandon_fifo(q, asp, ass, asa) {
  d_step { before = c_aband[me]; opb[me] = before }                 /* op_before */
  d_step { opk[me] = OP_REPAIR; opt[me] = q }                       /* op = repair(q) */
  d_step {                                                          /* CAS -> TAKEN(q, me) */
    if
    :: SEEN_IS(q, asp, ass, asa) -> sst[SLOT(q)] = TAKEN; sact[SLOT(q)] = me; ok = 1
    :: else -> ok = 0
    fi
  }
  if
  :: ok ->
#ifdef MUTANT_R1_NOCOUNT
     skip;
     d_step { spos[SLOT(q)] = (q) + CAP; sst[SLOT(q)] = EMPTY; sact[SLOT(q)] = NOACT }
#else
     d_step { c_aband[me] = before + 1; FATE_ABANDON(q) }           /* abandoned++ */
     d_step { FREE_SLOT(q) }                                        /* seq = EMPTY(q + cap) */
#endif
  :: else
  fi;
  opk[me] = OP_NONE;
  before = 0
}

/* EVICT E1-E4 by producer `me` of position q seen as (esp, ess, esa).
 * Locals used: before, ok (ok = 1: the slot is now free for q + cap). */
inline evict_fifo(q, esp, ess, esa) {
  d_step { before = c_evict[me]; opb[me] = before }                 /* E1 op_before */
  d_step { opk[me] = OP_EVICT; opt[me] = q }                        /* E1 op = evict(q) */
  d_step {                                                          /* E2 CAS -> TAKEN(q, me) */
    if
    :: SEEN_IS(q, esp, ess, esa) -> sst[SLOT(q)] = TAKEN; sact[SLOT(q)] = me; ok = 1
    :: else -> ok = 0
    fi
  }
  if
  :: ok ->
     d_step { c_evict[me] = before + 1; FATE(q, F_EVICTED) }        /* E3 */
     d_step { FREE_SLOT(q) }                                        /* E4 */
  :: else
  fi;
  before = 0
}

/* R2: slot of q held TAKEN by dead producer x (seen as csp, css, x). */
inline complete_dead_producer(q, csp, css, x) {
  d_step { k2 = opk[x]; tg = opt[x] }                               /* op */
  before = opb[x];                                                  /* op_before_a */
  if
  :: css == TAKEN && tg == q && (k2 == OP_EVICT || k2 == OP_REPAIR) ->
     d_step {                                                       /* finish_count */
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
     d_step {                                                       /* CAS seq -> EMPTY(q + cap) */
       if
       :: SEEN_IS(q, csp, css, x) -> FREE_SLOT(q)
       :: else
       fi
     }
  :: else ->
     /* held by x although x's op does not describe it: only a scribbled
      * segment (or a reused entry, not modelled) does that. */
     assert(false)
  fi;
  k2 = 0; tg = 0; before = 0
}

/* R3: slot of q held TAKEN by the (dead) owner actor, seen as (rsp, rss, OWN).
 * dead_owner_op, then finish / free / (drop_oldest producers) evict. */
inline dead_owner_slot(q, rsp, rss, may_evict) {
  d_step { k2 = opk[OWN]; tg = opt[OWN] }
  before = opb[OWN];
  if
  :: k2 == OP_REPAIR && tg == q -> v = 1
  :: k2 == OP_RECV && tg == q -> d_step { v = (deliv != before -> 2 : 3) }
  :: else -> v = 3
  fi;
  if
  :: v == 1 ->
     before = opb[OWN];                                             /* finish_dead_owner_repair */
     d_step {
       if
       :: c_aband[OWN] == before -> c_aband[OWN] = before + 1; FATE_ABANDON(q)
       :: else
       fi
     }
     d_step { if :: SEEN_IS(q, rsp, rss, OWN) -> FREE_SLOT(q) :: else fi }
  :: v == 2 ->
     d_step { if :: SEEN_IS(q, rsp, rss, OWN) -> FREE_SLOT(q) :: else fi }
  :: v == 3 && may_evict -> evict_fifo(q, rsp, rss, OWN)
  :: v == 3 && !may_evict -> skip
  fi;
  k2 = 0; tg = 0; v = 0; before = 0
}

/* repair_fifo_slot: the slot of q is stuck, seen as (rsp, rss, rsa).
 * R1 for EMPTY (a dead claimant), R2/R3 for TAKEN by a dead holder. */
inline repair_fifo_slot(q, rsp, rss, rsa, may_evict) {
  if
  :: rss == EMPTY ->
     if
     :: (tailw >> 1) <= q -> skip                                   /* tail (seq_cst) */
     :: else ->
        /* claimants_of: each entry's op, then its key (process_alive) */
        d_step { v = ((opk[1] == OP_CLAIM && opt[1] == q) -> (dead[1] -> 1 : 2) : 0) }
        if
        :: v != 2 ->
           d_step {
             if
             :: opk[2] == OP_CLAIM && opt[2] == q -> v = (dead[2] -> 1 : 2)
             :: else
             fi
           }
        :: else
        fi;
        if
        :: v == 2 -> skip                                           /* a live claimant: wait */
        :: else ->                                                  /* dead (or none: orphan) */
           d_step { ok = SEEN_IS(q, rsp, rss, rsa) }                /* re-read the slot */
           if
           :: ok -> abandon_fifo(q, rsp, rss, rsa)
           :: else
           fi
        fi
     fi
  :: rss == TAKEN ->
     if
     :: !dead[rsa] -> skip                                          /* actor_state: alive */
     :: dead[rsa] && rsa != OWN -> complete_dead_producer(q, rsp, rss, rsa)   /* R2 */
     :: dead[rsa] && rsa == OWN -> dead_owner_slot(q, rsp, rss, may_evict)     /* R3 */
     fi
  :: else -> assert(false)          /* DONE/DROPPED do not occur in commit_each lanes */
  fi;
  v = 0; ok = 0
}

/* ------------------------------------------------------------------------
 * A producer: N posts (POST P1-P6; full: reject, or EVICT E1-E4 / wait).
 */
proctype Producer(byte me; byte nmsg)
{
  byte k, w, t, sp, ss, sa, before, ok, v, k2, tg;
  {
  do
  :: k < nmsg ->
P1:  atomic { w = tailw; t = w >> 1 }                               /* P1 tail (relaxed) */
     d_step { sp = spos[SLOT(t)]; ss = sst[SLOT(t)]; sa = sact[SLOT(t)] }   /* slot (acquire) */
     if
     :: sp == t && ss == EMPTY ->
        d_step { opk[me] = OP_CLAIM; opt[me] = t }                  /* P2 op = claim(t) */
        d_step {                                                    /* P3 CAS tail */
          if
          :: tailw == w -> tailw = ((t + 1) << 1) | (w & 1); ok = 1
          :: else -> ok = 0
          fi
        }
        if
        :: !ok -> goto P1
        :: else
        fi;
        payload[SLOT(t)] = t;                                       /* P4 payload, length */
        d_step {                                                    /* P5 publish FULL(t, me) */
          assert(SEEN_IS(t, t, EMPTY, NOACT));
          sst[SLOT(t)] = FULL; sact[SLOT(t)] = me; pub[t] = 1; nowake[t] = (w & 1)
        }
#ifndef MUTANT_NO_WAKE
        if
        :: (w & 1) -> d_step { wake_seq = wake_seq + 1; nowake[t] = 0 }   /* P6 */
        :: else
        fi;
#endif
        k++
     :: sp + CAP == t ->
        /* the slot still holds t - cap: full at t */
        opk[me] = OP_NONE;                                          /* withdraw a stale claim */
        if
        :: ss == FULL ->
#if POLICY == REJECT
           opk[me] = OP_NONE;                                       /* give_up */
           c_rej[me] = c_rej[me] + 1;
           k++
#else
           evict_fifo(t - CAP, sp, ss, sa);
           goto P1
#endif
        :: ss == TAKEN || ss == EMPTY ->
           /* busy: being read, evicted, repaired or written */
#if POLICY == REJECT
           /* producer_maybe_repair never repairs within one reject post
            * (stuck_since starts at 0 and is only set): answer full. */
           opk[me] = OP_NONE;
           c_rej[me] = c_rej[me] + 1;
           k++
#else
           /* drop_oldest: producer_maybe_repair (R1-R3, may evict a gone
            * owner's slot), then wait_for_space: poll until something changes. */
           if
           :: REPAIRABLE(t - CAP, ss, sa) -> repair_fifo_slot(t - CAP, sp, ss, sa, 1)
           :: !SEEN_IS(t, sp, ss, sa) || tailw != w -> skip
           fi;
           goto P1
#endif
        :: else -> assert(false)        /* not a FIFO state: corrupt */
        fi
     :: else ->
        /* stale tail (or a corrupt lane if the tail did not move) */
        assert(tailw != w);
        goto P1
     fi;
     w = 0; t = 0; sp = 0; ss = 0; sa = 0; ok = 0
  :: else -> break
  od
  } unless { dead[me] }
}

/* ------------------------------------------------------------------------
 * The owner: receive calls (TAKE T1-T7, commit_each) forever; when every lane
 * is empty it arms the sleeping bit and sleeps on wake_seq (no timeout).
 */
proctype Owner()
{
  byte me = OWN;
  byte hp, first, n, t, w, sp, ss, sa, before, ok, v, k2, tg;
  bool busy, armed;
  {
  do
  :: /* one receive call: fifo_take */
     n = 0; busy = 0; first = hp;
     do
     :: n < BATCH ->
        d_step { sp = spos[SLOT(hp)]; ss = sst[SLOT(hp)]; sa = sact[SLOT(hp)] }   /* T1 */
        if
        :: sp > hp ->                   /* p's fate decided by someone else, slot reused */
           d_step { t = tailw >> 1; hp = (t > hp + CAP -> t - CAP : hp + 1) }
        :: sp + CAP == hp -> break      /* a skipped evictor/repairer is not done yet */
        :: sp < hp && sp + CAP != hp -> assert(false)    /* behind the cursor: corrupt */
        :: sp == hp && (ss == FULL || (ss == TAKEN && sa == OWN)) ->
           assert(ss == FULL);          /* one owner epoch here: no redelivery */
           d_step { before = deliv; opb[OWN] = before }             /* T2 op_before */
           d_step { opk[OWN] = OP_RECV; opt[OWN] = hp }             /* T2 op = recv(p) */
#if POLICY == DROP_OLDEST && !defined(MUTANT_T3_STORE)
           d_step {                                                 /* T3 CAS (evictors race) */
             if
             :: SEEN_IS(hp, sp, ss, sa) -> sst[SLOT(hp)] = TAKEN; sact[SLOT(hp)] = OWN; ok = 1
             :: else -> ok = 0
             fi
           }
#else
           d_step {                                                 /* T3 release store */
#if POLICY == REJECT
             assert(SEEN_IS(hp, sp, ss, sa));   /* "no one else writes a FULL slot" */
#endif
             spos[SLOT(hp)] = hp; sst[SLOT(hp)] = TAKEN; sact[SLOT(hp)] = OWN; ok = 1
           }
#endif
           if
           :: !ok -> opk[OWN] = OP_NONE           /* lost the race: look again */
           :: ok ->
              assert(payload[SLOT(hp)] == hp);                     /* T4 copy: never torn */
              d_step { deliv = before + 1; FATE(hp, F_DELIVERED) } /* T5 commit */
              d_step { FREE_SLOT(hp) }                             /* T6 */
              opk[OWN] = OP_NONE;
              n++; hp++
           fi;
           before = 0; ok = 0
        :: sp == hp && ss == TAKEN && sa != OWN ->
           hp++                         /* held by an evictor or repairer: skip p */
        :: sp == hp && ss == EMPTY ->
           if
           :: n > 0 -> break
           :: else
           fi;
           t = tailw >> 1;                                          /* tail (seq_cst) */
           if
           :: t <= hp -> break          /* nothing more in the lane */
           :: else
           fi;
           busy = 1;                    /* claimed, not yet published */
           if
           :: REPAIRABLE(hp, ss, sa) ->  /* owner_check_stuck after the grace period: R1 */
              repair_fifo_slot(hp, sp, ss, sa, 0);
              if
              :: !SEEN_IS(hp, sp, ss, sa) -> skip      /* repaired: look again */
              :: else -> break
              fi
           :: else -> break
           fi
        :: sp == hp && ss != FULL && ss != TAKEN && ss != EMPTY -> assert(false)
        fi
     :: else -> break
     od;
     if
     :: hp != first -> head = hp                                    /* T7 publish head */
     :: else
     fi;
     sp = 0; ss = 0; sa = 0; t = 0;
     if
     :: n > 0 -> skip                   /* returned messages; next call */
     :: n == 0 && busy ->
        /* backoff, then poll again: that poll finds something new unless
         * slot(hp) is still claimed (tail > hp), unpublished, by a live writer */
        (!SEEN_IS(hp, hp, EMPTY, NOACT) || (tailw >> 1) <= hp || NO_LIVE_CLAIMANT(hp))
     :: n == 0 && !busy ->
        /* sleep: read wake_seq, arm the sleeping bit, futex_wait */
        w = wake_seq;
        d_step {                                                    /* owner_arm_sleep */
          t = tailw;
          armed = ((t >> 1) == hp)
        }
        if
        :: armed && !(t & 1) ->
           d_step { if :: tailw == t -> tailw = t | 1 :: else -> armed = 0 fi }
        :: else
        fi;
        if
        :: armed ->
end_sleep:  (wake_seq != w)                                         /* futex_wait, no timeout */
        :: else
        fi;
        do                                                          /* owner_clear_sleep */
        :: atomic { t = tailw };
           if
           :: (t & 1) -> d_step { if :: tailw == t -> tailw = t & 254; t = 0 :: else fi }
           :: else -> break
           fi
        od;
        w = 0; t = 0; armed = 0
     fi;
     busy = 0
  od
  } unless { dead[me] }
}

/* Death: any process, at any moment, at most MAXDEAD of them. */
active proctype killer()
{
  do
  :: ndead < MAXDEAD ->
     if
     :: !dead[1] -> dead[1] = 1
     :: !dead[2] -> dead[2] = 1
     :: !dead[OWN] -> dead[OWN] = 1
     fi;
     ndead++
  :: break
  od
}

/* Quiescence: nothing can move any more. Check the accounting. */
active proctype checker()
{
  byte p, nd, ne, na, inbox, rej;
  timeout ->
  d_step {
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
          if
          :: !dead[OWN] ->
             /* a live owner has drained the lane: every claimed position is
              * delivered, evicted or abandoned, or held by a dead evictor /
              * repairer whose count R2 finishes when a producer needs the slot,
              * or is a hole a dead writer claimed after the owner went to
              * sleep (nothing to deliver; repaired when the owner next looks) */
#ifndef STRICT_WAKE
             /* KNOWN ISSUE 1: the writer died between P5 and P6 while the
              * owner slept: nobody wakes the owner (see README). */
             if
             :: !(nowake[p] && dead[sact[SLOT(p)]] && sst[SLOT(p)] == FULL) ->
#endif
                assert(fate[p] != F_NONE || PENDING_R2(p) ||
                       (spos[SLOT(p)] == p && sst[SLOT(p)] == EMPTY && !pub[p] && NO_LIVE_CLAIMANT(p)));
                assert(!pub[p] || fate[p] == F_DELIVERED || fate[p] == F_EVICTED ||
                       (PENDING_R2(p) && opk[sact[SLOT(p)]] == OP_EVICT))
#ifndef STRICT_WAKE
             :: else
             fi
#endif
          :: else
          fi
       :: else -> assert(fate[p] == F_NONE && !pub[p])
       fi;
       p++
    :: else -> break
    od;
    /* the counters agree with the fates: each count is one position */
    assert(deliv == nd);
    assert(c_evict[1] + c_evict[2] == ne);
    assert(c_aband[1] + c_aband[2] + c_aband[OWN] == na);
    /* posted = delivered + rejected + dropped_oldest + abandoned + in the box
     * (posted = stored + rejected; a FIFO lane's stored total is its tail) */
    rej = c_rej[1] + c_rej[2];
    assert((tailw >> 1) + rej == deliv + rej + c_evict[1] + c_evict[2] + na + inbox)
  }
}

init {
  byte i;
  atomic {
    for (i : 0 .. CAP - 1) { spos[i] = i }
    run Producer(1, N1);
    run Producer(2, N2);
    run Owner()
  }
}
