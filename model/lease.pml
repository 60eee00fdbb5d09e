/*
 * model/lease.pml - ownership of a lease box (lib/ownership/lease.cpp, lib/handles/heir.cpp,
 * lib/handles/owner.cpp) with the two-phase receive of lib/ring/ring.hpp: TAKE/HOLD (H1),
 * COMMIT C1-C4, give-back, recovery at acquire (R4, finish_dead_commit,
 * adopt_gone_owner_slot), with every process able to die at any step and
 * (LEASE) the owner able to lose its lease at any moment while it runs on.
 *
 * Processes: 1 = the owner at the start (epoch 1), 2 = heir H1 (registered
 * first), 3 = heir H2. The lane holds M messages at positions 0..M-1 (CAP
 * slots, tail = M, no producer: a box whose producers are gone). An heir
 * waits until the owner is gone (dead, or LEASE: expired) and it is the
 * first live heir, then take_ownership: CAS the key, read the epoch, and
 * (loop) check the key is still ours, CAS the epoch up by one; recovery;
 * then it is an owner. Each owner loops on Owner::receive of a lease box:
 * take (hold) a batch, check it is still the owner (else give back),
 * commit, return what it committed (READ_MODE: Owner::read, then
 * Owner::commit).
 *
 * Liveness is the kernel's answer (lib/segment/liveness.hpp): an owner is alive
 * while some live process holds the owner byte's (shared) lock, olock[];
 * take_ownership takes it before its key CAS and lets go when the CAS fails
 * or the key was taken from it; a death drops it. OWNER_GONE (LEASE=0)
 * asks exactly that, and a heir's key CAS asserts it takes the key only from
 * nobody or from a dead process.
 *
 * Same conventions as ring.pml: one atomic step per access of a shared word
 * (words only a repairer of a dead process reads share a neighbouring step,
 * with death points between), DIE_OR = may die instead of the step.
 *
 * Switches:
 *   LEASE=1   an heir may also take over from a live owner whose lease
 *             expired (time abstracted: at any moment); LEASE=0 (default):
 *             ownership changes only when the owner's process is dead
 *   HEIRS=1|2 (default 2), M CAP MAXDEAD BATCH   sizes (M <= CAP)
 *   CHECK_ADOPT    assert that a take loop only ever adopts an older owner's
 *                  slot (pinpoints MUTANT_STALE_ADOPT)
 *   CHECK_HEAD     assert that the published head never passes a held
 *                  position (true without a lease; with a lease a stale
 *                  owner's head may, which the whole-lane recovery covers)
 *   STRICT_FENCE   assert that no commit (C2) succeeds after the owner's
 *                  epoch has ended (the doc's "its commit fails by epoch"):
 *                  does NOT hold, see README ("known" runs)
 *   READ_MODE      the app sees a message when it is read (Owner::read),
 *                  not when it is committed: a second sighting must be
 *                  flagged redelivered; a stale owner's Owner::commit leaves
 *                  its reads TAKEN (the next owner adopts them, flagged)
 *   MIX            each owner first reads one message (Owner::read: the app
 *                  sees it then) and holds it while it receives (the staged
 *                  receive: the app sees what it committed when it returns);
 *                  after each receive, Owner::commit of the read. A receive
 *                  commits, or (stale) gives back, only what it took itself;
 *                  a stale owner leaves its read TAKEN. Every second
 *                  sighting must be flagged redelivered.
 * Mutants (spin must find an error; README):
 *   MUTANT_C2_STORE        C2 is a plain store (no CAS TAKEN -> DONE)
 *   MUTANT_NO_ADOPT        recovery (R4) does not re-take a gone owner's slots
 *                          (found with LEASE=1 only: without a lease the take
 *                          loop adopts them from the head anyway)
 *   MUTANT_HEAD_NOMIN      publish_head ignores the held (pending) positions
 *   MUTANT_FDC_NOCAS       finish_dead_commit counts with a plain add, not CAS
 *   MUTANT_STALE_ADOPT     (the C++ before the fix of problem 2, README) a stale
 *                          owner adopts a newer owner's TAKEN slot
 *   MUTANT_STALE_HEAD      (before the fix of problem 3) a lease box's
 *                          recovery scans [head, tail) and starts at the head
 *   MUTANT_EPOCH_FETCH_ADD (before the fix of problem 4) take_ownership
 *                          bumps the epoch with a fetch_add after the key CAS
 *   MUTANT_READ_GIVEBACK   (before commit 221f5f8) a stale owner's
 *                          Owner::commit gives its reads back unflagged
 *   MUTANT_GIVEBACK_READS  (MIX; the C++ before the fix of gencheck's
 *                          lease-read-receive) a stale receive gives back
 *                          the earlier read too, as it was: unflagged again
 *   MUTANT_LOCK_AFTER_CAS  take_ownership locks the owner byte after its key
 *                          CAS, not before: a live new owner can be seen
 *                          without its lock and deposed (LEASE=0)
 *   MUTANT_NO_EPOCH_CHECK  the owner commits without the still_owner check:
 *                          NOT an error (the C2 CAS is the fence; the check
 *                          only saves work), so not in check.sh
 */

#ifndef M
#define M 2
#endif
#ifndef CAP
#define CAP 2
#endif
#ifndef MAXDEAD
#define MAXDEAD 2
#endif
#ifndef BATCH
#define BATCH 2
#endif
#ifndef LEASE
#define LEASE 0
#endif
#ifndef HEIRS
#define HEIRS 2                     /* 1: only H1 */
#endif

#define EMPTY 0
#define FULL 1
#define TAKEN 2
#define DONE 5

#define NOACT 0
#define WRITER 1                    /* the (gone) producer that posted */
#define ACT(e) (1 + (e))            /* owner actor of epoch e (e = 1..3) */
#define EP_OF(a) ((a) - 1)
#define IS_OWNER_ACT(a) ((a) >= 2)
#define NEP 4                       /* epochs 1..3 */
#define NPROC 4                     /* processes 1..3 */

#define OP_NONE 0
#define OP_COMMIT 8

/* ---- the segment ---- */
byte spos[CAP]; byte sst[CAP]; byte sact[CAP];
byte payload[CAP];
byte head;                          /* lane.head */
byte okey;                          /* owner.key: process 1..3, 0 none */
byte epoch;                         /* owner.epoch */
bool heir_reg[NPROC];               /* heir table entry registered (key, seq != 0) */
byte aproc[NEP];                    /* owner_actor[e].key */
byte opk[NEP]; byte opb[NEP];       /* owner_actor[e].op, op_before */
byte deliv[NEP];                    /* owner_lane_counters[e].delivered */

bool dead[NPROC];
byte ndead;
bool olock[NPROC];                  /* holds the owner byte's lock (liveness.hpp L1); dropped at death */

/* ---- ghosts ---- */
bool committed[M];                  /* C2 succeeded for it (the commit point) */
bool seen_app[M];                   /* READ_MODE: an app has read it */
byte ncounted;                      /* commits counted in some deliv[] */
byte maxep;                         /* highest epoch an owner got */
bool acting[NPROC];                 /* process is the owner of its epoch (after take_ownership) */
bool taking[NPROC];                 /* process holds the key it CASed, no epoch yet */
byte gotep[NPROC];                  /* the epoch take_ownership gave the process */

#define SLOT(p) ((p) % CAP)
/* CHECK_HEAD: "the published head never passes a held position" */
#ifdef CHECK_HEAD
#define HELD_BELOW_HEAD(p) ((p) < M && head > (p) && spos[SLOT(p)] == (p) && sst[SLOT(p)] == TAKEN)
#define HEAD_CHECK ; assert(!HELD_BELOW_HEAD(0) && !HELD_BELOW_HEAD(1) && !HELD_BELOW_HEAD(2))
#else
#define HEAD_CHECK
#endif
#define SEEN_IS(p, a, b, c) (spos[SLOT(p)] == (a) && sst[SLOT(p)] == (b) && sact[SLOT(p)] == (c))
#define STILL_OWNER (okey == me && epoch == myep)
/* Where the next owner's recovery looks for a gone owner's slots: a lease
 * box's, the whole lane [tail - cap, tail); otherwise [head, tail). */
#if LEASE && !defined(MUTANT_STALE_HEAD)
#define RECOVERY_START (M > CAP -> M - CAP : 0)
#else
#define RECOVERY_START head
#endif

#define LOCALS byte myep, hp, first, n, i, k, h, sp, ss, sa, before, cnt, rp, marks, e2, rdp, rdst, rdact; \
               bool rdh, rdone, reading, creading; \
               byte pp[BATCH], pst[BATCH], pact[BATCH]; bool pred[BATCH], kept[BATCH]; \
               byte fs[CAP]
#define RESET myep = 0; hp = 0; first = 0; n = 0; i = 0; k = 0; h = 0; sp = 0; ss = 0; sa = 0; \
              before = 0; cnt = 0; rp = 0; marks = 0; e2 = 0; rdp = 0; rdst = 0; rdact = 0; \
              rdh = 0; rdone = 0; reading = 0; creading = 0; \
              for (i : 0 .. BATCH - 1) { pp[i] = 0; pst[i] = 0; pact[i] = 0; pred[i] = 0; kept[i] = 0 } \
              for (i : 0 .. CAP - 1) { fs[i] = 0 } i = 0; acting[me] = 0; taking[me] = 0; gotep[me] = 0

#define CAN_DIE (ndead < MAXDEAD)
/* (the dead process forgets its locals at `died`) */
#define DIE_OR if :: CAN_DIE -> dead[me] = 1; ndead++; goto died :: true fi;

/* first_live_heir() == me (heirs in registration order, dead ones skipped,
 * never the current owner) */
#define FIRST_LIVE_HEIR(x) (heir_reg[x] && \
                            ((x) == 2 || !(heir_reg[2] && !dead[2] && okey != 2)))
/* view_owner + owner_gone: no owner, a dead one (nobody alive holds the
 * owner byte), or (lease) an expired one */
#define BYTE_HELD ((olock[1] && !dead[1]) || (olock[2] && !dead[2]) || (olock[3] && !dead[3]))
#if LEASE
#define OWNER_GONE (1)
#else
#define OWNER_GONE (okey == 0 || !BYTE_HELD)
#endif

proctype Owner(byte me)
{
  LOCALS;

  if
  :: me == 1 -> myep = 1; acting[me] = 1; goto CALL     /* acquired at the start */
  :: else
  fi;

  /* ---- an heir: Heir::await_transfer / try_take ---- */
WAIT:
end_wait:
  atomic {
    (OWNER_GONE && FIRST_LIVE_HEIR(me) && okey != me) ->              /* view_owner, first_live_heir */
    DIE_OR
    k = okey
  }
#ifndef MUTANT_LOCK_AFTER_CAS
  atomic { DIE_OR olock[me] = 1 }                                     /* lock the owner byte (L1) */
#endif
  atomic {                                                            /* take_ownership: CAS key */
    DIE_OR
    if
    :: okey == k ->
#if !LEASE
       assert(k == 0 || dead[k]);     /* never from a live owner */
#endif
       okey = me; taking[me] = 1
    :: else -> k = 0; olock[me] = 0; goto WAIT                       /* lost: unlock (same step: a word of ours) */
    fi
  }
#ifdef MUTANT_LOCK_AFTER_CAS
  atomic { DIE_OR olock[me] = 1 }
#endif
  /* The epoch goes up by one only while the key is still ours. When we get
   * an epoch, the key holder is us, or one that has yet to get its own
   * (it then gets a later one), or dead: never one that already got its
   * epoch (it would then not be the owner, and nobody would be). */
#define GOT_EPOCH \
    assert(myep > maxep); maxep = myep;   /* strictly increases, never reused */ \
    assert(okey == me || taking[okey] || dead[okey]); \
    taking[me] = 0; gotep[me] = myep; acting[me] = 1; k = 0
#ifdef MUTANT_EPOCH_FETCH_ADD
  atomic {                                                            /* epoch.fetch_add(1) + 1 */
    DIE_OR
    epoch = epoch + 1; myep = epoch;
    GOT_EPOCH
  }
#else
  atomic { DIE_OR k = epoch }                                         /* cur = epoch */
EPOCH_CAS:
  atomic {                                                            /* key still ours? */
    DIE_OR
    if
    :: okey != me -> k = 0; taking[me] = 0; olock[me] = 0; goto WAIT  /* taken from us: unlock, wait again */
    :: else
    fi
  }
  atomic {                                                            /* CAS epoch cur -> cur + 1 */
    DIE_OR
    if
    :: epoch == k -> epoch = k + 1; myep = epoch; GOT_EPOCH
    :: else -> k = epoch; goto EPOCH_CAS                              /* cur reloaded */
    fi
  }
#endif
  atomic { DIE_OR heir_reg[me] = 0 }                                  /* withdraw our heir entry */

  /* ---- Owner::adopt -> owner_recover ---- */
  atomic { DIE_OR aproc[myep] = me; opk[myep] = OP_NONE }              /* our actor record */
  atomic {                                                            /* tail (= M), head */
    DIE_OR
    h = head;
    if :: h > M -> h = M :: else fi;
    if :: M - h > CAP -> h = M - CAP :: else fi;
    hp = h;                                /* o.head: our cursor */
#if LEASE && !defined(MUTANT_STALE_HEAD)
    first = RECOVERY_START;                /* lease box: scan [tail - cap, tail) */
#else
    first = h;                             /* scan [head, tail) */
#endif
    k = first
  }
  /* committed-but-unfreed slots of gone owners first: which actors */
RSCAN1:
  atomic {
    DIE_OR
    if
    :: k >= M -> k = first; goto RFDC
    :: else
    fi;
    sp = spos[SLOT(k)]; ss = sst[SLOT(k)]; sa = sact[SLOT(k)];
    if
    :: ss == DONE && IS_OWNER_ACT(sa) && sa != ACT(myep) -> marks = marks | (1 << EP_OF(sa))
    :: else
    fi;
    k++; sp = 0; ss = 0; sa = 0; goto RSCAN1
  }
RFDC:
  atomic {
    if
    :: marks == 0 -> goto RSCAN2
    :: (marks & 2) -> e2 = 1; marks = marks & ~2
    :: !(marks & 2) && (marks & 4) -> e2 = 2; marks = marks & ~4
    :: !(marks & 6) && (marks & 8) -> e2 = 3; marks = marks & ~8
    fi;
    rp = 1; goto FDC                       /* finish_dead_commit(ACT(e2)), back to RFDC */
  }
  /* R4: every slot TAKEN by a gone owner actor: adopt it */
RSCAN2:
  atomic {
    DIE_OR
    if
    :: k >= M -> k = 0; h = 0; first = 0; goto CALL
    :: else
    fi;
    sp = spos[SLOT(k)]; ss = sst[SLOT(k)]; sa = sact[SLOT(k)];
    if
    :: ss == TAKEN && IS_OWNER_ACT(sa) && sa != ACT(myep) -> skip
    :: else -> k++; goto RSCAN2
    fi
  }
  /* adopt_gone_owner_slot: a newer owner's slot (its actor record's epoch
   * is above ours: we are already stale) is left alone; else dead_owner_op
   * says "uncommitted" (a hold-mode owner's op is none or commit): CAS to
   * TAKEN by us, deliver again; our cursor goes down to it if need be.
   * (The actor record's epoch never changes here: reading it in the step
   * of the CAS is the same as reading it just before.) */
  atomic {
    DIE_OR
#ifndef MUTANT_STALE_ADOPT
    if :: EP_OF(sa) > myep -> goto RSCAN2_NEXT :: else fi;
#endif
#ifndef MUTANT_NO_ADOPT
    if
    :: SEEN_IS(k, sp, ss, sa) -> sact[SLOT(k)] = ACT(myep);
       if :: sp < hp -> hp = sp :: else fi
    :: else
    fi;
#endif
RSCAN2_NEXT:
    k++; sp = 0; ss = 0; sa = 0; goto RSCAN2
  }

  /* ---- Owner::receive (lease box: take, hold, commit, return) ---- */
CALL:
  atomic {
    DIE_OR
    if :: !STILL_OWNER -> goto LEAVE :: else fi;                      /* still_owner() */
    n = 0; first = hp; cnt = 0;
#ifdef MIX
    if :: !rdone -> reading = 1 :: else fi                            /* the first call: Owner::read of 1 */
#else
    skip
#endif
  }
T1:
  atomic {
    DIE_OR
    sp = spos[SLOT(hp)]; ss = sst[SLOT(hp)]; sa = sact[SLOT(hp)];     /* T1 (acquire) */
    if
    :: sp > hp -> hp = (M > hp + CAP -> M - CAP : hp + 1); goto T1    /* reused: jump (tail = M) */
    :: sp + CAP == hp -> goto ENDTAKE
    :: sp == hp && (ss == FULL || (ss == TAKEN && sa == ACT(myep))) -> goto TAKE
    :: sp == hp && ss == TAKEN && IS_OWNER_ACT(sa) && sa != ACT(myep) -> goto ADOPT
    :: sp == hp && ss == DONE && IS_OWNER_ACT(sa) && sa != ACT(myep) && n == 0 ->
       e2 = EP_OF(sa); rp = 2; goto FDC                               /* finish_dead_commit, skip p */
    :: sp == hp && ss == DONE && !(IS_OWNER_ACT(sa) && sa != ACT(myep) && n == 0) -> hp++; goto T1
    :: sp == hp && ss == EMPTY -> goto ENDTAKE                        /* tail = M <= hp: empty */
    :: else -> assert(false)
    fi
  }
TAKE:       /* take_one, hold mode: CAS FULL -> TAKEN(p, us) (not if ours to redeliver), copy */
  atomic {
    DIE_OR
    if
    :: ss == FULL ->
       if
       :: SEEN_IS(hp, sp, ss, sa) -> sst[SLOT(hp)] = TAKEN; sact[SLOT(hp)] = ACT(myep)
       :: else -> goto T1                                             /* lost the race */
       fi
    :: else
    fi;
    assert(payload[SLOT(hp)] == hp);                                  /* copy */
#ifdef READ_MODE
    assert(!seen_app[hp] || ss == TAKEN);   /* seen before: flagged redelivered */
    seen_app[hp] = 1;
#endif
#ifdef MIX
    if :: reading -> assert(!seen_app[hp] || ss == TAKEN); seen_app[hp] = 1 :: else fi;   /* read: seen now */
#endif
    pp[n] = hp; pst[n] = ss; pact[n] = sa; pred[n] = (ss == TAKEN);   /* o.pending */
    n++; hp++;
    if :: n < BATCH && !reading -> goto T1 :: else -> goto ENDTAKE fi
  }
ADOPT:      /* adopt_gone_owner_slot (a take loop meeting another owner's TAKEN slot) */
  atomic {
    DIE_OR
#ifndef MUTANT_STALE_ADOPT
    /* a NEWER owner's slot (its actor record's epoch is above ours): we
     * are stale; take nothing more (returns 2: break, publish_head) */
    if :: EP_OF(sa) > myep -> goto ENDTAKE :: else fi;
#endif
#ifdef CHECK_ADOPT
    assert(EP_OF(sa) < myep);   /* only a gone (older) owner's slot */
#endif
    if
    :: SEEN_IS(hp, sp, ss, sa) -> sact[SLOT(hp)] = ACT(myep)
    :: else
    fi;
    goto T1                                                           /* look again */
  }
ENDTAKE:    /* publish_head if the cursor moved: the first position not finished */
  atomic {
    DIE_OR
    if
#ifdef MUTANT_HEAD_NOMIN
    :: hp != first -> head = hp
#else
    :: hp != first ->                          /* (MIX: a held read counts too) */
       h = ((n > 0 && pp[0] < hp) -> pp[0] : hp); if :: rdh && rdp < h -> h = rdp :: else fi;
       head = h; h = 0; HEAD_CHECK
#endif
    :: else
    fi;
    first = 0;
    if
    :: reading && n > 0 ->                     /* MIX: Owner::read returns it, held */
       rdp = pp[0]; rdst = pst[0]; rdact = pact[0]; rdh = 1; rdone = 1; reading = 0;
       n = 0; pp[0] = 0; pst[0] = 0; pact[0] = 0; pred[0] = 0; goto CALL
    :: reading && n == 0 -> reading = 0; rdone = 1; goto IDLE
    :: !reading && n == 0 && rdh -> goto COMMIT_READ
    :: !reading && n == 0 && !rdh -> goto IDLE
    :: else
    fi
  }
  /* a stale owner gives back what it took instead of committing it */
STALECHK:
  atomic {
    DIE_OR
#ifndef MUTANT_NO_EPOCH_CHECK
    if
    :: !STILL_OWNER ->
#if defined(READ_MODE) && !defined(MUTANT_READ_GIVEBACK)
       /* Owner::commit of a stale owner: the app has seen them; they stay
        * TAKEN by our actor, the next owner adopts them (flagged) */
       goto LEAVE
#else
       /* MIX: Owner::commit of the read, likewise */
       if :: creading -> goto LEAVE :: else fi;
       /* receive (staged): the app has seen nothing: give them back (only
        * what this receive took: not a held read) */
       i = 0; goto GIVEBACK
#endif
    :: else
    fi;
#endif
    before = deliv[myep]; opb[myep] = before; opk[myep] = OP_COMMIT;  /* C1 announce */
    i = 0
  }
C2:
  atomic {
    DIE_OR
#ifdef MUTANT_C2_STORE
    sst[SLOT(pp[i])] = DONE; sact[SLOT(pp[i])] = ACT(myep); kept[i] = 1;
#else
    if                                                                /* C2: CAS TAKEN -> DONE */
    :: SEEN_IS(pp[i], pp[i], TAKEN, ACT(myep)) -> sst[SLOT(pp[i])] = DONE; kept[i] = 1
    :: else -> kept[i] = 0                                            /* lost: a newer owner has it */
    fi;
#endif
    if
    :: kept[i] ->
#ifdef STRICT_FENCE
       assert(STILL_OWNER);
#endif
       assert(!committed[pp[i]]); committed[pp[i]] = 1; cnt++
    :: else
    fi;
    i++;
    if :: i < n -> goto C2 :: else -> i = 0 fi
  }
  atomic { DIE_OR deliv[myep] = before + cnt; ncounted = ncounted + cnt }   /* C3 count */
C4:
  atomic {
    DIE_OR
    if                                                                /* C4: CAS DONE -> free */
    :: kept[i] && SEEN_IS(pp[i], pp[i], DONE, ACT(myep)) ->
       spos[SLOT(pp[i])] = pp[i] + CAP; sst[SLOT(pp[i])] = EMPTY; sact[SLOT(pp[i])] = NOACT
    :: else
    fi;
    i++;
    if :: i < n -> goto C4 :: else -> i = 0 fi
  }
  atomic {
    DIE_OR
    opk[myep] = OP_NONE;
    DIE_OR
    head = ((rdh && rdp < hp) -> rdp : hp); HEAD_CHECK                /* publish_head */
    /* the receive returns the committed messages; next call */
#ifdef MIX
    /* the app sees what the receive returns (a read's commit: seen when read) */
    for (i : 0 .. BATCH - 1) {
      if
      :: i < n && kept[i] && !creading -> assert(!seen_app[pp[i]] || pred[i]); seen_app[pp[i]] = 1
      :: else
      fi
    }
#endif
    for (i : 0 .. BATCH - 1) { pp[i] = 0; pst[i] = 0; pact[i] = 0; pred[i] = 0; kept[i] = 0 }
    i = 0; n = 0; cnt = 0; before = 0;
    if
    :: creading -> creading = 0; goto CALL
    :: !creading && rdh -> goto COMMIT_READ    /* MIX: then Owner::commit of the read */
    :: else -> goto CALL
    fi
  }

COMMIT_READ:   /* MIX: Owner::commit of the held read (C1-C4 of one slot) */
  atomic { pp[0] = rdp; pst[0] = rdst; pact[0] = rdact; pred[0] = 0; n = 1; rdh = 0; creading = 1; goto STALECHK }

GIVEBACK:   /* owner_give_back: CAS TAKEN(p, us) -> as it was */
  atomic {
    DIE_OR
    if
    :: SEEN_IS(pp[i], pp[i], TAKEN, ACT(myep)) ->
       sst[SLOT(pp[i])] = pst[i]; sact[SLOT(pp[i])] = pact[i]
    :: else
    fi;
    i++;
    if
    :: i < n -> goto GIVEBACK
    :: else ->
#ifdef MUTANT_GIVEBACK_READS
       if                                      /* ... and the held read, as it was */
       :: rdh && SEEN_IS(rdp, rdp, TAKEN, ACT(myep)) -> sst[SLOT(rdp)] = rdst; sact[SLOT(rdp)] = rdact
       :: else
       fi;
#endif
       goto LEAVE
    fi
  }

IDLE:       /* nothing to take: sleep (waking every lease/2) until something changes */
end_idle:
  (!SEEN_IS(hp, sp, ss, sa) || !STILL_OWNER);
  goto CALL;

  /* ---- finish_dead_commit(ACT(e2)); returns to rp (1: recovery, 2: take) ---- */
FDC:
  atomic {
    DIE_OR
    if
    :: !dead[aproc[e2]] -> goto FDC_RET        /* alive (stale): it finishes its own */
    :: else
    fi;
    cnt = 0; i = 0
  }
FDC_SCAN:   /* every slot of the lane */
  atomic {
    DIE_OR
    if
    :: sst[i] == DONE && sact[i] == ACT(e2) -> fs[i] = spos[i] + 1; cnt++
    :: else -> fs[i] = 0
    fi;
    i++;
    if :: i < CAP -> goto FDC_SCAN :: else -> i = 0 fi;
    if :: cnt == 0 -> goto FDC_RET :: else fi
  }
  atomic { DIE_OR k = opk[e2] }                                       /* its op */
  atomic {
    DIE_OR
    if
    :: k == OP_COMMIT ->                       /* count them once: CAS from op_before */
       before = opb[e2];
#ifdef MUTANT_FDC_NOCAS
       deliv[e2] = deliv[e2] + cnt; ncounted = ncounted + cnt
#else
       if
       :: deliv[e2] == before -> deliv[e2] = before + cnt; ncounted = ncounted + cnt
       :: else
       fi
#endif
    :: else
    fi;
    k = 0; before = 0
  }
FDC_FREE:
  atomic {
    DIE_OR
    if
    :: fs[i] != 0 && spos[i] == fs[i] - 1 && sst[i] == DONE && sact[i] == ACT(e2) ->
       assert(committed[fs[i] - 1]);
       spos[i] = fs[i] - 1 + CAP; sst[i] = EMPTY; sact[i] = NOACT
    :: else
    fi;
    fs[i] = 0; i++;
    if :: i < CAP -> goto FDC_FREE :: else -> i = 0 fi
  }
FDC_RET:
  atomic {
    cnt = 0; e2 = 0;
    if
    :: rp == 1 -> rp = 0; goto RFDC
    :: rp == 2 -> rp = 0; hp++; goto T1
    fi
  }

LEAVE:      /* receive returned not_owner: this handle is done */
  atomic { olock[me] = 0;  /* still_owner() failed: the owner byte goes (a `goto died` enters below) */
died:
    RESET }
}

/* Quiescence: nothing can move any more. */
active proctype checker()
{
  byte p, sum;
  timeout ->
  d_step {
    /* a box with a live heir does not stay ownerless */
    assert(!(okey == 0 || dead[okey]) ||
           !((heir_reg[2] && !dead[2]) || (heir_reg[3] && !dead[3])));
    /* a live key holder is the owner: it got the current epoch */
    assert(okey == 0 || dead[okey] || gotep[okey] == epoch);
    p = 0;
    do
    :: p < M ->
       if
       :: !committed[p] ->
          /* not lost: still in its slot, not DONE, and where the next
           * owner's recovery looks (from the published head) */
          assert(spos[SLOT(p)] == p && sst[SLOT(p)] != DONE && p >= RECOVERY_START);
          /* a live owner acting for the current epoch has received it */
          assert(!(okey != 0 && !dead[okey] && acting[okey]))
       :: else
       fi;
       p++
    :: else -> break
    od;
    /* counted at most once each (uncounted: a dead owner's DONE slots) */
    sum = deliv[1] + deliv[2] + deliv[3];
    assert(sum == ncounted);
    p = 0; sum = 0;
    do
    :: p < M -> sum = sum + committed[p]; p++
    :: else -> break
    od;
    assert(ncounted <= sum)
  }
}

init {
  byte i;
  atomic {
    for (i : 0 .. CAP - 1) { spos[i] = i; }
    for (i : 0 .. M - 1) { spos[SLOT(i)] = i; sst[SLOT(i)] = FULL; sact[SLOT(i)] = WRITER; payload[SLOT(i)] = i }
    i = 0;
    okey = 1; olock[1] = 1; epoch = 1; maxep = 1; aproc[1] = 1; gotep[1] = 1;
    heir_reg[2] = 1; heir_reg[3] = (HEIRS > 1);
    run Owner(1);
    run Owner(2);
#if HEIRS > 1
    run Owner(3)
#endif
  }
}
