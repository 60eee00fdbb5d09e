// lib/pool/pool_table.hpp - a pool's member table: its lock, its redo journal, and
// the operations take, give back, grant, sweep, start, stop (pooler in shared memory).
//
// THE LOCK (TL). Every change of the table is made by the holder of one lock,
// so that the table has one writer at a time (as pooler's table has its one
// gen_server). The lock is the KERNEL's, not a word of the segment: a word
// can be written by anyone who can write the segment (a 0666 pool), so a
// word that names a holder proves nothing (acceptance testing set it to the
// supervisor's own live client entry and wedged the pool).
//  TL1 Every Pool handle is a client: an entry of the client table whose key
//      byte it holds (shared OFD lock, L1) from before it publishes its key
//      until after it clears it (or dies). Registering (ensure_client, under
//      the table lock) takes a free entry whose byte it gets at once, and
//      only when there is none waits for the others, with one deadline for
//      all of them (L7): a byte another process holds without the protocol
//      (anyone who may open the segment can) costs that entry, never the
//      registration, nor a wait per entry under the table lock.
//  TL2 Holding the table = holding byte kPoolTableByte of the segment
//      EXCLUSIVELY (F_OFD_SETLK) through the handle's own open file
//      description (its role_lock), for the whole section. The kernel drops
//      it when the holder dies, in any pid namespace; no process can hold it
//      for another. The word pool_state::lock then names the holder (client
//      c + 1, or kAnonHolder for a process registering its client entry) for
//      display, and is the futex word that waiters sleep on.
//  TL3 Taking: the byte first (F_OFD_SETLK, never waiting in the kernel),
//      then the word is exchanged for ours. A holder writes the word only
//      while it holds the byte, so whatever the word said before the
//      exchange is stale: a dead holder's, or a scribbler's (counted in
//      last_op nowhere; it costs nothing). The journal is then completed
//      (J5) before anything else. Busy: set kPoolLockWaiters in the word and
//      sleep on it (futex, at most kLockSliceNs a time), then try the byte
//      again. A stopped (SIGSTOP) holder keeps the byte: waiters wait, up to
//      their deadline (slow is not dead), and a supervisor's stop flag ends
//      its wait at once. A byte held by a process that is not a holder (a
//      hostile writer of a 0666 pool can take it too) costs the waiters their
//      deadline, never more; `shmbox pool rm NAME --now` then removes the pool.
//  TL4 Releasing: exchange the word -> 0, unlock the byte, then FUTEX_WAKE
//      if kPoolLockWaiters was set. The lock is never held across a wait for
//      a member, a start or a stop, and sections never nest (a nested
//      table_txn on a handle that holds the table is refused: the kernel
//      lock would not tell them apart).
//
// THE JOURNAL (J): one table operation changes several words (a member's
// state, its holder, a counter, a waiter's grant). A process can be killed
// between any two of them, so the holder writes what it will write first:
//  J1 journal_offset[i], journal_value[i] for each write (words of the
//     table only: pool_state from journal words on, clients, members; never
//     the lock, the futex words, the header or the config).
//  J2 journal_count = n, then journal_valid = 1: the commit point. Killed
//     before it: nothing happened. (fault point pool.after_journal)
//  J3 every write applied in order (pool.mid_apply after half of them,
//     pool.after_apply after all).
//  J4 journal_valid = 0.
//  J5 Whoever takes the lock and finds journal_valid == 1 applies the
//     journal again (every write is an absolute value computed under the
//     lock, so applying twice is applying once: counters are written as
//     "old + 1", never added), then J4. A journal whose count or offsets
//     are out of bounds (a scribbled segment) is dropped, not applied.
// Futex wake-ups (a waiter's `wake`, the supervisor's `work`) are sent after
// the lock is released; a wake lost to a crash costs the sleeper one poll
// slice (waiters re-check every 10 ms, the supervisor every tick).
//
// MEMBER STATES (member_state in shmbox/pool.hpp; pool_member::state):
//   empty --start request (take, replenish)--> starting
//   starting --its box has a live owner (supervisor)--> free | in_use (granted)
//   free --take--> in_use --give back ok--> free | in_use (granted to the oldest waiter)
//   free --health check--> checking --answered--> free | in_use
//   in_use --give back fail / holder dead / worker died / removed at once--> stopping
//     --(supervisor: signal, drain to the dead-letter box, unlink the box)--> starting (replaced) | empty
//   free | checking --culled / worker died / unhealthy / removed--> stopping
// The supervisor is the only one that starts or stops processes; take and
// give back only change the table, so they never wait for it.
//
// THE LEDGER (LG), as a box has its counting identity. Every lease given (a
// take; a grant to a waiter is a take too: `granted` counts the grants
// among `takes`) ends exactly once, and is counted in the table section
// that ends it, inside its journal (so a process killed at any point counts
// it once, J5), in exactly one of:
//  LG1 returns_ok: given back ok.
//  LG2 returns_fail: given back as failed (also by ~Lease, and by a take
//      whose Producer cannot attach to the member box: its producer table
//      is full; a box that is gone is a dead member, LV3).
//  LG3 killed_in_use: its holder died holding it (sweep_dead_clients).
//  LG4 revoked_in_use: the pool ended it: its member was stopped under it
//      because its worker died (the supervisor saw it, or LV2/LV3 did) or
//      the pool was removed at once. Counted when the member is stopped,
//      whatever the holder does later: its give back answers stale, and a
//      holder that dies, or a waiter that never collects its grant, counts
//      nothing more.
// A lease not ended yet is an in_use member (one each). So, whenever no
// operation is half applied:
//     takes == returns_ok + returns_fail + killed_in_use + revoked_in_use + in_use
// stale_returns and double_returns count give back calls that end nothing
// (their lease had ended already); they are outside the identity.
// stop_member() ends the lease of an in_use member (LG3 or LG4) unless its
// caller ended it by a give back (LG1, LG2); inspect_pool checks the identity.
//
// LIVENESS AT HAND-OUT (LV). A worker can die while its member is free or
// leased, and the supervisor sees it only at its next look (kWorkerCheckNs).
// Whoever hands a member out or takes it back asks the kernel first whether
// the member's box has a live owner (its owner byte held: liveness.hpp L2,
// one fcntl through the handle's mapping of the box, pool_handle::links).
// The probe is made just before the table section, for the member the
// section will most likely pick (so the lock is not held through a system
// call), and again inside it only when the section picks another one:
//  LV1 take: a free member found dead is stopped (crashed) in the same
//      section, and the take goes on with the next free member.
//  LV2 collecting a grant (take_impl): a granted member found dead is
//      stopped (crashed; its lease LG4), and the waiter goes back to its
//      place in the queue (its ticket) or takes a free member.
//  LV3 give back: a member found dead is stopped (crashed; the lease LG4)
//      and the give back answers stale, never ok; so a dead member is never
//      granted to a waiter either.
// A worker that dies after the probe is the supervisor's to see, as before.
//
// LIVE RECONFIGURATION (RC; pooler's pool_reconfigure). init_count,
// max_count, queue_max, cull_after and auto_grow_threshold can be changed
// on a running pool; the header keeps the values at creation.
//  RC1 The new values are pool_state's live words, written in one journalled
//      section by Pool::reconfigure, which checks them first (as pooler
//      does: lowering max_count below the members alive needs that many of
//      them free, else nothing changes). Everyone reads them through
//      live_limits(), which clamps each to the header's bounds (max_count
//      to the member entries, queue_max to max_clients, ...): a forged word
//      changes the pool's own limits within its table, never more.
//  RC2 Lowered queue_max: in the same section the newest waiters beyond it
//      are refused (granted = kGrantRefused, ticket cleared, woken); their
//      take answers no_members_queue_full. (pooler refuses the oldest; we
//      keep the line's order: those who waited longest keep their place.)
//  RC3 The supervisor reads reconf_asked at the start of a tick and, after
//      that tick applied the live values (starts up to init_count; free
//      members stopped, longest idle first, while more members than
//      max_count are alive: counted as culled; a cull by a lowered
//      cull_after), sets reconf_done to it. Members in use above a lowered
//      max_count are stopped when they come back free; takes never start
//      one above it meanwhile.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "segment/layout.hpp"
#include "segment/liveness.hpp"
#include "pool/pool_layout.hpp"
#include "base/process.hpp"
#include "shmbox/pool.hpp"

namespace shmbox::detail {

constexpr std::uint32_t kAnonHolder = 0x7FFF;     // TL2: the word's value for a process registering
constexpr std::uint64_t kPoolTableByte = 8;       // TL2: a header byte (layout_version) that is no role's
constexpr std::uint64_t kPoolCreatorByte = 24;    // L4: offsetof(pool_header, creator_key)
constexpr std::uint64_t kGrantRefused = 0xFFFF;   // RC2: pool_client::granted of a waiter the queue no longer holds (names no member)
constexpr std::uint32_t kMaxPoolMs = 86'400'000;  // durations: at most one day

// One mapped pool segment with its validated parameters (never re-read from
// shared memory), and this handle's client entry.
struct pool_handle {
  made_here born;  // process.hpp H1: a fork child's copy neither uses nor gives back the client entry (H3)
  std::string name;
  std::byte* base = nullptr;
  std::size_t bytes = 0;
  int bus_ticket = -1;  // THE TRUST RULE T5: the mapping's ticket with the SIGBUS guard (base/bus_guard.hpp)
  bool read_only = false;
  int fd = -1;  // the mapping's open file description: probes (L2); holds no lock
  std::uint64_t dev = 0, ino = 0;
  std::uint32_t mode = 0, uid = 0, gid = 0;  // the segment's, at open
  pool_header hdr{};  // validated copy
  std::string group, dead_letters, command, init_command;

  // This handle's client entry (TL1); -1 until the first operation needs it.
  role_lock role;
  std::int32_t client = -1;
  std::uint64_t key = 0;
  std::recursive_mutex mu;  // one operation at a time per handle
  std::error_code last_error;
  bool in_txn = false;  // a table_txn of this handle holds the table (TL4: sections never nest)
  // A supervisor's stop flag (supervise_options::stop): a wait for the table gives up when it is set.
  const std::atomic<bool>* stop = nullptr;

  // Producers on member boxes, by member index, for the generation they were made for.
  struct member_link {
    std::uint64_t generation = 0;
    std::shared_ptr<void> box;       // shmbox::Box (type-erased: keeps this header light)
    std::shared_ptr<void> producer;  // shmbox::Producer
    std::uint32_t worker_pid = 0;    // its worker, when in our pid namespace (Lease::worker_pid)
  };
  std::map<std::uint32_t, member_link> links;

  pool_handle() = default;
  pool_handle(const pool_handle&) = delete;
  pool_handle& operator=(const pool_handle&) = delete;
  ~pool_handle();

  pool_state* state() const noexcept { return reinterpret_cast<pool_state*>(base + kPoolStateOffset); }
  pool_client* client_at(std::uint32_t i) const noexcept {
    return reinterpret_cast<pool_client*>(base + hdr.clients_offset) + i;
  }
  pool_member* member_at(std::uint32_t i) const noexcept {
    return reinterpret_cast<pool_member*>(base + hdr.members_offset) + i;
  }
  std::uint64_t client_byte(std::uint32_t i) const noexcept {
    return hdr.clients_offset + std::uint64_t{i} * sizeof(pool_client);
  }
  std::uint64_t offset_of(const void* p) const noexcept {
    return static_cast<std::uint64_t>(static_cast<const std::byte*>(p) - base);
  }
  std::uint32_t max_count() const noexcept { return hdr.max_count; }
  std::uint32_t max_clients() const noexcept { return hdr.max_clients; }
};

// The pool's incarnation as 16 hex digits, from its header's creator key and
// creation time: a pool removed and created again under its name has another.
// Workers get it as SHMBOX_POOL_ID (the supervisor's signal proof, SP2).
std::string pool_incarnation(const pool_header& h);
// "/shmbox-pool.<name>" for shm_open.
std::string pool_shm_path(std::string_view name);
// The box of member `index`, generation `gen`: "<pool>.m<index>.<gen>".
std::string member_box_name(std::string_view pool, std::uint32_t index, std::uint64_t gen);
result<void> validate_pool_name(std::string_view name);
result<std::shared_ptr<pool_handle>> open_pool_segment(std::string_view name, bool read_only, bool any_owner);

constexpr std::uint32_t member_state_of(std::uint64_t word) noexcept { return static_cast<std::uint32_t>(word & 0xFF); }
constexpr member_stop member_stop_of(std::uint64_t word) noexcept { return static_cast<member_stop>((word >> 8) & 0xFF); }
constexpr std::uint64_t make_member_state(member_state s, member_stop why = member_stop::none) noexcept {
  return static_cast<std::uint64_t>(s) | (static_cast<std::uint64_t>(why) << 8);
}
std::string_view to_string(member_stop why) noexcept;

// RC: the parameters in force (the live words, else the header's), each
// within the header's bounds.
struct pool_limits {
  std::uint32_t init_count = 0;
  std::uint32_t max_count = 1;      // <= the member entries
  std::uint32_t queue_max = 0;
  std::uint32_t cull_after_ms = 0;
  std::uint32_t auto_grow_plus1 = 0;  // auto_grow_threshold + 1; 0: none
};
pool_limits live_limits(const pool_handle& h) noexcept;  // a snapshot without the lock
class table_txn;
pool_limits live_limits(const pool_handle& h, const table_txn& t) noexcept;  // as the section sees them

// A client's liveness: key set and its byte held (TL1).
bool client_alive(const pool_handle& h, std::uint32_t c, std::uint64_t key) noexcept;
// The supervisor the table names is alive (a guess without the table lock;
// under it, what the table says).
bool supervisor_alive(const pool_handle& h) noexcept;

// One locked section: takes the table lock (TL3), completes a dead
// holder's journal (J5); collects writes and applies them through the
// journal (commit()); releases on destruction (TL4) and then sends the
// wake-ups asked for. Only for a handle with a client entry, or anonymous (TL2).
class table_txn {
 public:
  // Waits up to `deadline_ns` (CLOCK_MONOTONIC; UINT64_MAX: for ever) for the
  // lock, or until the handle's stop flag is set. Not locked() when it gave up.
  table_txn(pool_handle& h, std::uint64_t deadline_ns, bool anonymous = false) noexcept;
  ~table_txn();
  table_txn(const table_txn&) = delete;
  table_txn& operator=(const table_txn&) = delete;

  bool locked() const noexcept { return locked_; }
  // Queues one write (the word must be in the table: J1). Reads after it in
  // this section see the value (read()) before commit.
  void write(a64& word, std::uint64_t value) noexcept;
  std::uint64_t read(const a64& word) const noexcept;
  // Writes that still fit in this section's journal (operations that loop
  // over the table stop early and leave the rest to the next section).
  std::size_t room() const noexcept { return kPoolJournalMax - count_; }
  void add(pool_counter c, std::uint64_t n = 1) noexcept;
  // J1-J4 for the writes queued so far; `op` names the operation (fault points, last_op).
  void commit(const char* op) noexcept;
  void wake_client(std::uint32_t c) noexcept { wake_clients_.push_back(c); }
  void wake_supervisor() noexcept { wake_work_ = true; }
  // Hands the lock from anonymous (TL2) to this handle's new client entry.
  void become_client() noexcept;

 private:
  pool_handle& h_;
  bool locked_ = false;
  bool anonymous_ = false;
  // The queued writes (no allocation on the take/give-back path).
  std::array<std::pair<a64*, std::uint64_t>, kPoolJournalMax> writes_{};
  std::size_t count_ = 0;
  std::vector<std::uint32_t> wake_clients_;
  bool wake_work_ = false;
};

// The error of a wait for the table that gave up (TL3): says what may hold it and what to do.
std::error_code table_busy(std::string_view pool, std::string_view then);

// J5 (also used by open for a journal left valid by a dead holder, under the lock).
void replay_journal(pool_handle& h) noexcept;

// Registers this handle's client entry (TL1) if it has none. `role`: taker
// or standby. false: the table is full of live clients (pool_clients_full), or an error.
result<void> ensure_client(pool_handle& h, pool_role role, std::uint64_t deadline_ns);
// Gives the entry back (clears waits; members it holds stay in_use until a sweep sees it gone).
// Not for a handle inherited through fork (process.hpp H3): its destructor skips it.
void release_client(pool_handle& h) noexcept;
// errc::inherited_handle when `h` was made by another process (a fork
// parent: process.hpp H3), naming `instead`; an empty code otherwise.
std::error_code refuse_inherited(const pool_handle& h, std::string_view what, std::string_view instead);

// --- Table operations: all under an open table_txn -------------------------

// Counts of the member states (gauges) and of live waiters, from the table as the txn sees it.
struct table_counts {
  std::uint32_t by_state[6] = {};
  std::uint32_t waiters = 0;
  std::uint32_t members = 0;  // non-empty entries
};
table_counts count_table(const pool_handle& h, const table_txn& t) noexcept;
// In-use members whose holder died -> stopping(consumer_died) (counted
// killed_in_use, LG3); dead waiters' tickets cleared. Returns how many members
// it stopped. May fill most of the journal: commit before more writes.
std::uint32_t sweep_dead_clients(pool_handle& h, table_txn& t) noexcept;
// Member `m` is ready for use: to the oldest live waiter (granted, in_use),
// else to the head of the free list (new stamp) unless `keep_stamp`.
void make_available(pool_handle& h, table_txn& t, std::uint32_t m, bool keep_stamp) noexcept;
// Member `m` -> stopping(why), counted as `why` says; wakes the supervisor.
// An in_use member's lease ends here (LG3 for consumer_died, else LG4)
// unless `given_back`: the caller ended it by a give back (LG1, LG2).
void stop_member(pool_handle& h, table_txn& t, std::uint32_t m, member_stop why, bool given_back = false) noexcept;
// max_lifetime: when member `m` of generation `gen`, started (S1) at
// `started_ns`, retires (CLOCK_MONOTONIC; UINT64_MAX: never, or not started).
std::uint64_t member_expiry(const pool_handle& h, std::uint32_t m, std::uint64_t gen, std::uint64_t started_ns) noexcept;
// Member `m` is past its max_lifetime at `now` (as the txn sees the entry).
bool member_expired(const pool_handle& h, const table_txn& t, std::uint32_t m, std::uint64_t now) noexcept;
// An empty entry -> starting (new generation), the supervisor woken. false: none empty.
bool request_start(pool_handle& h, table_txn& t) noexcept;

// An open_pool_segment error that means "a file at the pool's name that is
// not a usable pool" (empty, half made, damaged, foreign): `pool rm --now` removes it.
bool unusable_pool_file(std::error_code ec) noexcept;
// Unlinks the pool's segment if it is a regular file (not followed) and, when
// `ino` is given, still the file with that identity; `why` goes into the
// error when it is not a regular file.
result<void> remove_pool_file(std::string_view name, std::error_code why, std::uint64_t ino = 0, std::uint64_t dev = 0);

// The member boxes' options, from the validated header.
options member_box_options(const pool_handle& h);
// The health check's message (PoolMember::answer_ping recognises it).
std::string ping_message(std::uint64_t seq);
// Take and give back (pool_take.cpp), for the API and the leases.
return_status give_back_impl(pool_handle& h, const lease_token& t, outcome o);
// LV: member `m` of generation `gen` has a box with a live owner. Asked
// through this handle's link to the box (the Producer its leases use, made
// once per generation); a box that is gone is dead. A box that cannot be
// attached for another reason (its producer table is full) counts as alive:
// the take then reports that error as before (make_lease).
bool member_alive(pool_handle& h, std::uint32_t m, std::uint64_t gen);

// The supervisor's loop (pool_supervisor.cpp). `removal` != 0: a remover's
// (1 graceful, 2 immediate), which only stops members and starts nothing (RM2).
result<void> run_supervisor(pool_handle& h, const supervise_options& opts, std::uint64_t deadline_ns, std::uint64_t removal = 0);

}  // namespace shmbox::detail
