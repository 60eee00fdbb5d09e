// lib/base/fault.hpp - named crash points for tests.
//
// Compiled in only in the tests' variant of the library (libshmbox-testing.a,
// built with -DSHMBOX_FAULT_INJECTION=1 when -Dfault_injection=true, the
// default; see lib/meson.build); the installed libshmbox.so has none. There,
// SHMBOX_FAULT=<point>[:N] in the environment makes the process kill itself
// with SIGKILL the N-th time (default 1st) it passes <point>;
// SHMBOX_FAULT=<point>:N:stop stops it with SIGSTOP instead (it carries on
// after SIGCONT). Read once per process. Points:
//   producer.after_announce  claim announced in the producer table, tail not yet CASed
//   producer.after_claim     tail claimed, nothing written yet
//   producer.mid_payload     half the payload written, not published
//   producer.before_publish  payload and length written, sequence not stored
//   producer.evict_taken     drop_oldest: slot taken for eviction (E2), not yet counted (E3)
//   producer.mid_evict       drop_oldest: slot taken for eviction and counted (E3), not freed
//   producer.lifo_mid_write  lifo: slot claimed (push or replace), not published
//   producer.before_wake     message published, the sleeping owner not yet woken (P6)
//   producer.after_ring      P6: the owner's eventfd written (or its doorbell rung), wake_seq not bumped, notify not yet reverted to passive
//   producer.loan_open       loan: slot claimed and handed to the caller, nothing written
//   producer.mid_abort       loan abort: abort announced, slot not yet taken back
//   producer.mid_run         post_batch: first message of a run published, the rest not
//   repair.after_count       R1 (a dead claim; lifo: a dead writer's slot): counted abandoned, slot not yet freed
//   resize.after_limit       resize: the lane's new limit stored, nothing dropped yet
//   resize.mid_drop          resize (shrink): a message's slot taken for dropping and counted (or not yet), not freed
//   owner.before_read        owner (read): ownership checked, nothing taken yet
//   owner.after_take         owner: slots taken for reading, nothing committed
//   owner.mid_commit         owner (read/commit, lease boxes): slots marked done, not yet counted
//   owner.after_commit       owner: delivered counted, slots not yet freed
//   owner.mid_stash          owner (stash): entry written and counted in parked, not yet PARKED
//   owner.mid_unstash        owner: unstashed (or a priority box's sorted) entries marked DONE, not yet counted or freed
//   owner.mid_unstash_all    owner (unstash_all): a parked message made FRONT (unstashed), the next ones not yet
//   owner.mid_sort           owner (priority box): a ring message copied into a SORTING store entry, its slot not yet committed
//   owner.before_buffer_drop owner (custom-buffer box): the buffer named messages to drop, none marked DONE yet
//   owner.reply_before_mark  owner (Owner::reply): the reply stored in the reply box, the request not yet marked answered
//   owner.reply_after_mark   owner (Owner::reply): the request marked answered, not yet committed
//   takeover.after_cas       new owner: owner key CASed to itself, epoch not yet bumped
//   takeover.after_record    new owner: epoch bumped, transfer record written, heirs not signalled
//   takeover.mid_recovery    new owner: one gone owner's in-flight slot adopted, others not yet
//   give_away.after_offer    giver: offer posted and dest signalled, not yet taken or withdrawn
//   give_away.after_accept   dest: offer accepted (CAS), ownership not yet taken
//   give_away.before_clear   dest: ownership taken, the accepted offer not yet cleared
#pragma once

#if defined(SHMBOX_FAULT_INJECTION)
namespace shmbox::detail {
extern const bool g_fault_armed;  // SHMBOX_FAULT was set when the library loaded
void fault_point(const char* name) noexcept;
}  // namespace shmbox::detail
#define SHMBOX_FAULT(name)                                                      \
  do {                                                                          \
    if (__builtin_expect(::shmbox::detail::g_fault_armed, 0)) ::shmbox::detail::fault_point(name); \
  } while (0)
#else
#define SHMBOX_FAULT(name) ((void)0)
#endif
