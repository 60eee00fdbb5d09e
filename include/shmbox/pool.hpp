// shmbox/pool.hpp - pools of members (pooler): take a worker's box, give it back.
//
// A pool is a named segment (/dev/shm/shmbox-pool.<name>) holding the pool's
// parameters and its member table. A member is a worker process that owns a
// box (<pool>.m<index>.<generation>). A consumer take()s a member: it gets a
// Lease, i.e. exclusive use of that box (a Producer on it) and of the worker
// behind it, until it gives it back (ok or fail) or dies (then it counts as
// fail). A failed member is stopped and replaced: its state is unknown.
//
// A supervisor (Pool::supervise, `shmbox pool run NAME`) starts the members
// (init_count at once, more on demand up to max_count), restarts the ones
// that die, culls idle ones and runs health checks. It is a role with heirs:
// a second supervise() of the same pool stands by and takes over when the
// first dies. take and give_back never wait for the supervisor; only
// starting a member needs one.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "shmbox/box.hpp"
#include "shmbox/error.hpp"
#include "shmbox/export.hpp"
#include "shmbox/owner.hpp"
#include "shmbox/producer.hpp"
#include "shmbox/types.hpp"

namespace shmbox {

namespace detail {
struct pool_handle;
struct access;  // the library's own way in (lib/base/access.hpp)
}

inline constexpr std::uint32_t kMaxPoolMembers = 256;  // max_count limit
inline constexpr std::uint32_t kMaxPoolClients = 1024;  // max_clients limit
inline constexpr std::size_t kMaxPoolCommand = 2048;   // bytes of pool_options::command
inline constexpr std::size_t kMaxPoolName = 100;        // pool names: 1..100 of [A-Za-z0-9._-]
inline constexpr std::size_t kMaxPoolInitCommand = 128;  // bytes of pool_options::init_command, less one

// A pool's parameters, fixed at creation except those Pool::reconfigure
// changes (init_count, max_count, cull_after, queue_max, auto_grow_threshold).
struct pool_options {
  std::uint32_t init_count = 1;  // members the supervisor keeps started (<= max_count)
  std::uint32_t max_count = 4;   // members at most (1..table_size)
  // Member entries in the pool's table, fixed at creation: the most
  // max_count can be raised to by reconfigure (1..kMaxPoolMembers; 0:
  // max_count). Each entry is 128 bytes of the pool segment.
  std::uint32_t table_size = 0;
  // Free members idle longer than this are stopped, down to init_count;
  // members in use are never culled. 0: never.
  std::chrono::milliseconds cull_after{0};
  // Takers that may wait at once for a member (FIFO); 0: a take that finds
  // no member never waits. <= max_clients.
  std::uint32_t queue_max = 16;
  // Pool handles (takers, supervisors, standbys) open at once (1..kMaxPoolClients).
  std::uint32_t max_clients = 64;
  // The member: run as /bin/sh -c COMMAND in its own process group, with
  // SHMBOX_POOL, SHMBOX_BOX (the member's box, already created),
  // SHMBOX_MEMBER (index) and SHMBOX_MEMBER_GENERATION in its environment.
  // It must take the box (PoolMember::from_env(), or Owner::acquire of
  // $SHMBOX_BOX) within start_timeout. At most kMaxPoolCommand bytes.
  std::string command;
  // Each member box: capacity, slot_size, overflow, lanes, max_producers,
  // block_timeout, spin and mode are used (dead_letters is the pool's, lease is 0).
  options member{};
  std::string group;  // pools of one group share take_group(); "" none
  // The box that receives the messages left in a failed or stopped member's
  // box, and what a member box drops on overflow ("": they are counted as lost).
  std::string dead_letters;
  std::chrono::milliseconds start_timeout{5000};  // a member that does not own its box by then is stopped
  std::chrono::milliseconds stop_grace{1000};     // stopping: SIGTERM, then SIGKILL after this
  // Health check: every interval the supervisor pings each free member (a
  // message on lane 0 the member answers with PoolMember::answer_ping); no
  // answer within health_timeout: the member is replaced. 0: no checks.
  std::chrono::milliseconds health_interval{0};
  std::chrono::milliseconds health_timeout{1000};
  std::uint32_t mode = 0600;  // file mode of the pool segment
  // pooler's max_lifetime: a member older than this (from its start) is
  // retired and replaced: when free, by the supervisor or by the take that
  // finds it; when in use, never under its holder, but at its give back
  // (which still answers ok). 0: members live until stopped otherwise.
  std::chrono::milliseconds max_lifetime{0};
  // Each member's lifetime is max_lifetime plus an offset in [-jitter,
  // +jitter] of its own (drawn from its pool, index and generation), so
  // members started together do not all retire at once. < max_lifetime.
  std::chrono::milliseconds max_lifetime_jitter{0};
  // The member initialisation hook: once a new member owns its box, and
  // before it is first handed out, the supervisor runs /bin/sh -c
  // INIT_COMMAND (its own process group; the member's environment, plus
  // SHMBOX_WORKER_PID). Exit status 0: the member becomes free; anything
  // else, or still running at start_timeout (from the start of the member):
  // the member is stopped (init-failed, counted in start_failures) and the
  // hook's process group killed. Run at least once per member: a supervisor
  // that dies while it runs leaves the member starting, and its successor
  // runs the hook again. "" none. Under kMaxPoolInitCommand bytes (put a
  // longer one in a script).
  std::string init_command;
  // pooler's auto_grow_threshold: when a take leaves this many free members
  // or fewer, the supervisor starts more ahead of demand: init_count minus
  // those starting already (at least 0), within max_count. nullopt: never.
  std::optional<std::uint32_t> auto_grow_threshold{};
};

// How a lease ends.
enum class outcome : std::uint8_t {
  ok,    // the member is fine: back to the head of the free list (or to the oldest waiter)
  fail,  // its state is unknown: it is stopped and replaced
};

// What a give_back did. A bad return never changes the table.
enum class return_status : std::uint8_t {
  ok,             // given back
  double_return,  // that lease was given back already (counted)
  stale,          // the member was replaced while leased (its worker died, or the pool was removed
                  // at once); nothing to give back (counted)
  error,          // the pool cannot be used (corrupt segment, removed); see Pool::last_error()
};
SHMBOX_API std::string_view to_string(return_status s) noexcept;  // "ok", "double-return", "stale", "error"

// Names one lease: copyable, e.g. to give it back from elsewhere.
struct lease_token {
  std::uint32_t member = 0;      // index in the member table
  std::uint64_t generation = 0;  // the member (a replacement has a new one)
  std::uint64_t lease = 0;       // this take of it
};

// Exclusive use of one member until give_back (or the holder dies). Move-only.
// The lease is the taking process's: a fork child's copy gives nothing back
// (give_back: return_status::error, Pool::last_error() inherited_handle; its
// destructor: nothing) and its producer() posts nothing (box.hpp: handles and fork()).
class SHMBOX_API Lease {
 public:
  Lease(Lease&&) noexcept;
  Lease& operator=(Lease&&) noexcept;
  // Gives back a lease not given back yet as failed (its state is unknown,
  // as when the holder dies); a fork child's copy does not.
  ~Lease();

  const std::string& box() const noexcept;  // the member's box
  Producer& producer() noexcept;            // posts into the member's box
  lease_token token() const noexcept;       // names this lease (Pool::give_back from elsewhere)
  std::uint32_t worker_pid() const noexcept;  // the member's worker (0: unknown here)
  // Ends the lease; further calls return double_return.
  return_status give_back(outcome o = outcome::ok);
  bool returned() const noexcept;

 private:
  friend struct detail::access;
  struct SHMBOX_LOCAL state;
  SHMBOX_LOCAL explicit Lease(std::unique_ptr<state> s);
  std::unique_ptr<state> s_;
};

// What a supervisor does while it runs (Pool::supervise).
struct supervise_options {
  // Checked at least every 50 ms: supervise() returns when it becomes true.
  const std::atomic<bool>* stop = nullptr;
  // Told one line per event ("started member 2 (pid 812)", "standing by",
  // "took over as supervisor (epoch 3)"). The library never logs itself.
  std::function<void(std::string_view)> log{};
  // The member command to run, instead of the one stored in the pool. A
  // pool that another user can write (group/other-writable mode, or owned
  // by another user) is supervised only with the command given here: a
  // supervisor never runs a command that someone else could have written.
  std::optional<std::string> command{};
  // The dead-letter box, instead of the stored one; required for such a
  // pool when it names one ("" here: stopped members' messages are counted lost).
  std::optional<std::string> dead_letters{};
  // The init command to run instead of the stored one ("" none); required,
  // as `command`, for a pool others can write that names one.
  std::optional<std::string> init_command{};
};

// Pool::reconfigure's changes (pooler's pool_reconfigure): each one set is
// changed, the others kept.
inline constexpr std::uint32_t kNoAutoGrow = 0xFFFFFFFFu;  // auto_grow_threshold: turn it off
struct pool_changes {
  std::optional<std::uint32_t> init_count{};
  std::optional<std::uint32_t> max_count{};  // 1..the pool's table_size
  std::optional<std::chrono::milliseconds> cull_after{};
  std::optional<std::uint32_t> queue_max{};  // <= max_clients
  std::optional<std::uint32_t> auto_grow_threshold{};  // kNoAutoGrow: none
};

enum class removal : std::uint8_t {
  graceful,   // no new takes; free members stop now, members in use when given back
  immediate,  // every member stops now; outstanding leases become stale
};

// A handle on a pool. Its client entry (registered at its first take, give
// back or supervise) is the process's that opened it: a fork child's copy
// refuses take, give_back and supervise (errc::inherited_handle) and gives
// nothing back when destroyed; the child opens the pool itself.
class SHMBOX_API Pool {
 public:
  // Creates /dev/shm/shmbox-pool.<name>; errc::exists if it is there. Members
  // are started by a supervisor (supervise(), `shmbox pool run NAME`).
  static result<void> create(std::string_view name, const pool_options& opts);
  // Opens a pool to take members or to supervise it. A segment owned by
  // another user is refused unless any_owner.
  static result<Pool> open(std::string_view name, const open_options& opts = {});
  // Names of every pool segment in /dev/shm.
  static result<std::vector<std::string>> list();
  // Starts removing pool `name`. Graceful: no new takes, free members stop
  // now, members in use when returned; the last one gone removes the
  // segment. Immediate: all members stop now. The stopping is done by the
  // running supervisor, or by this call (waiting up to `timeout`) when
  // there is none. Returns ok once the pool segment is gone; timed_out when
  // members in use keep it (graceful) or stopping takes longer.
  static result<void> remove(std::string_view name, removal how, std::chrono::nanoseconds timeout);
  // Takes a member of the freest pool of `group` (most free members; ties:
  // fewest in use, then a random one, so equally free pools share the load),
  // trying the others in that order; waits (up to `timeout`) in the first
  // pool's queue when none has one.
  // An unknown group (no pool has it) answers not_found; a group whose pools
  // have no member to give answers as take() does (no_members_at_capacity,
  // no_members_starting, no_members_queue_full), pooler's error_no_members.
  static result<Lease> take_group(std::string_view group, std::chrono::nanoseconds timeout);
  // Removes every pool of `group` (pooler's rm_group): each stops taking
  // first, then each is removed as remove() does, all within one `timeout`.
  // Returns the names of the pools removed (none for a group no pool has).
  // When some pool could not be removed (timed_out with members in use,
  // permission_denied, ...), the error's sentence (explain()) names each
  // with its reason; the others are removed all the same.
  static result<std::vector<std::string>> remove_group(std::string_view group, removal how, std::chrono::nanoseconds timeout);

  Pool(Pool&&) noexcept;
  Pool& operator=(Pool&&) noexcept;
  ~Pool();

  const std::string& name() const noexcept;  // the pool's name

  // A lease on a free member: the most recently returned first. With none
  // free it asks the supervisor for a new one (below max_count) and waits
  // for it, or queues (FIFO, up to queue_max) for a returned one, up to
  // `timeout` (0: never waits). Errors: no_members_starting (timeout 0; one
  // is being started), no_members_at_capacity (timeout 0, max_count reached),
  // no_members_queue_full, timed_out, pool_removed, pool_clients_full.
  // One thread at a time per Pool handle (open one per thread).
  result<Lease> take(std::chrono::nanoseconds timeout);
  // Gives back the lease named by `t` (also one taken by another handle of
  // this process, e.g. after the Lease was moved away).
  return_status give_back(const lease_token& t, outcome o);
  std::error_code last_error() const noexcept;

  // Culls now (pooler's cull, without waiting for cull_after): the running
  // supervisor stops the free members idle for at least `idle` (0: every
  // free member), longest idle first, down to init_count; members in use,
  // starting or being checked are never culled. Waits up to `timeout` for
  // its answer: the number of members that pass stopped (counted in
  // killed_free_culled, "culled" in stat). Errors: refused (no supervisor
  // runs), pool_removed, timed_out (the request stays and is served when a
  // supervisor runs), invalid_argument (idle over 24 h).
  result<std::uint32_t> cull(std::chrono::milliseconds idle, std::chrono::nanoseconds timeout);

  // Changes a running pool's parameters, with pooler's effects: a raised
  // init_count starts members up to it; a lowered max_count stops free
  // members (longest idle first) down to it, and is refused (errc::refused,
  // nothing changed) when too few are free for that, as pooler's
  // not_enough_free_workers_to_shutdown; a lowered cull_after culls at once
  // what is idle longer; a lowered queue_max refuses the takers waiting
  // beyond it (the newest; their take answers no_members_queue_full).
  // Takes obey the new values at once; starts and stops are the
  // supervisor's: with one running, waits up to `timeout` until it has
  // applied them (timed_out: they are set, not yet applied). With none, the
  // values are set and applied when one runs. Errors: invalid_argument (a
  // value out of range, max_count above the table_size fixed at creation,
  // init_count above max_count), refused, pool_removed, permission_denied.
  // A max_count lowered below init_count (or auto_grow_threshold) without
  // changing that one takes it down to max_count too.
  result<void> reconfigure(const pool_changes& changes, std::chrono::nanoseconds timeout);

  // Runs the supervisor until opts.stop (or the pool is removed): as standby
  // while another supervisor is alive, then as the supervisor. Returns ok
  // when stopped or the pool is gone; when the pool is gone, the workers it
  // can prove are this pool's (its children, and processes started with
  // this pool's SHMBOX_POOL_ID) are stopped first. errc::permission_denied:
  // the pool is writable by others and opts.command (or opts.dead_letters,
  // when the pool names a dead-letter box) was not given.
  result<void> supervise(const supervise_options& opts);

 private:
  friend struct detail::access;
  SHMBOX_LOCAL explicit Pool(std::shared_ptr<detail::pool_handle> h);
  std::shared_ptr<detail::pool_handle> h_;
};

// The worker side: run by the member command.
class SHMBOX_API PoolMember {
 public:
  // Reads SHMBOX_POOL, SHMBOX_BOX, SHMBOX_MEMBER, SHMBOX_MEMBER_GENERATION and
  // takes the member's box (errc::refused when the member was replaced meanwhile).
  static result<PoolMember> from_env();
  PoolMember(PoolMember&&) noexcept;
  PoolMember& operator=(PoolMember&&) noexcept;
  ~PoolMember();

  Owner& owner() noexcept;  // receives what the lease holders post
  // True when this worker should end: its pool was removed (its segment is
  // gone) or its entry no longer names this member (stopped, replaced).
  // A worker checks it when a receive times out; a few system calls.
  bool stopped() const noexcept;
  // True when `msg` is the supervisor's health ping; then it is answered
  // (not by a fork child's copy: the worker answers). Call it on each
  // message of lane 0 (pings arrive there).
  bool answer_ping(std::string_view msg) noexcept;
  std::uint32_t index() const noexcept;

 private:
  friend struct detail::access;
  struct SHMBOX_LOCAL state;
  SHMBOX_LOCAL explicit PoolMember(std::unique_ptr<state> s);
  std::unique_ptr<state> s_;
};

// --- Looking at a pool (read without locks; consistent when idle) ---------

enum class member_state : std::uint8_t {
  empty,     // no member in this entry
  starting,  // box made, worker started (or asked for), not yet owning its box
  free,      // owns its box, waiting for a taker
  in_use,    // leased
  checking,  // free, being health-checked (not given out meanwhile)
  stopping,  // being stopped (culled, failed, unhealthy, crashed, removed, expired, init-failed)
};
SHMBOX_API std::string_view to_string(member_state s) noexcept;  // "empty", "starting", ...

struct member_info {
  std::uint32_t index = 0;
  member_state state = member_state::empty;
  std::string box;               // "" for empty entries
  std::uint64_t generation = 0;
  std::uint32_t worker_pid = 0;  // as the supervisor that started it saw it (0: unknown)
  std::uint64_t worker_pid_ns = 0;
  bool worker_alive = false;     // its box has a live owner
  std::uint32_t taker_pid = 0;   // in_use: the lease holder (in its own pid namespace)
  std::uint64_t taker_pid_ns = 0;
  bool taker_alive = false;
  std::uint64_t leases = 0;                 // times this entry was taken, over all its generations
  std::chrono::milliseconds idle{0};        // free: since it was returned
  std::string stopping_why;                 // stopping: "culled", "failed", "consumer-died", ...
  std::uint64_t depth = 0;                  // messages in its box
};

struct pool_counters {
  std::uint64_t takes = 0;                   // leases given
  std::uint64_t returns_ok = 0;
  std::uint64_t returns_fail = 0;            // given back as fail
  std::uint64_t no_members_at_capacity = 0;  // takes refused: none free, max_count reached
  std::uint64_t no_members_queue_full = 0;   // takes refused: queue_max takers waiting already
  std::uint64_t no_members_starting = 0;     // takes with timeout 0 refused while one was started
  std::uint64_t take_timeouts = 0;           // takes that waited in vain
  std::uint64_t queue_max_reached = 0;       // times the queue became full
  std::uint64_t granted = 0;                 // members handed straight to a waiting taker
  std::uint64_t killed_free_culled = 0;      // idle members stopped by cull_after
  std::uint64_t killed_free_unhealthy = 0;   // free members that failed the health check
  std::uint64_t killed_in_use = 0;           // members stopped because their holder died holding them
  std::uint64_t crashed = 0;                 // members whose worker died on its own (restarted)
  std::uint64_t start_failures = 0;          // members that did not own their box within start_timeout, or failed init_command
  std::uint64_t starts = 0;                  // worker processes started
  std::uint64_t double_returns = 0;
  std::uint64_t stale_returns = 0;
  std::uint64_t dead_lettered = 0;           // messages of stopped members moved to the dead-letter box
  std::uint64_t lost = 0;                    // ... that could not be (no dead-letter box, or it refused)
  // Leases the pool ended: their member was stopped under them (its worker
  // died, or the pool was removed at once); their give back answers stale.
  std::uint64_t revoked_in_use = 0;
  // Signals a supervisor did not send: the process that the pool segment
  // named could not be proven to be this pool's worker (a forged or stale entry).
  std::uint64_t refused_signals = 0;
  std::uint64_t expired_free = 0;      // free members retired at max_lifetime (and replaced)
  std::uint64_t expired_returned = 0;  // members retired at their give back: max_lifetime passed while in use
  std::uint64_t auto_grow_starts = 0;  // members started ahead of demand (auto_grow_threshold)
};
// The ledger: every lease given ends once, so when no take or give back is
// half done, takes == returns_ok + returns_fail + killed_in_use +
// revoked_in_use + (members in use). stale_returns and double_returns count
// give back calls that ended nothing, and are not part of it.

struct pool_info {
  std::string name;
  std::string group;
  std::string dead_letters;
  std::string command;
  std::string init_command;  // "" none
  // init_count, max_count, queue_max, cull_after and auto_grow_threshold
  // are the values in force (Pool::reconfigure changes them).
  std::uint32_t init_count = 0, max_count = 0, queue_max = 0, max_clients = 0;
  std::uint32_t table_size = 0;         // member entries: the most max_count can be raised to
  std::uint64_t reconfigurations = 0;   // Pool::reconfigure calls that changed the pool
  std::chrono::milliseconds cull_after{0}, start_timeout{0}, stop_grace{0}, health_interval{0}, health_timeout{0};
  std::chrono::milliseconds max_lifetime{0}, max_lifetime_jitter{0};
  std::optional<std::uint32_t> auto_grow_threshold;
  std::uint32_t member_capacity = 0, member_slot_size = 0;
  policy member_overflow = policy::reject;
  std::uint32_t free = 0, in_use = 0, starting = 0, checking = 0, stopping = 0;  // gauges
  std::uint32_t queued = 0;                  // takers waiting now
  std::uint32_t clients = 0;                 // live Pool handles that registered (a handle does at its first take, give back or supervise)
  std::uint32_t supervisor_pid = 0;          // 0: none
  std::uint64_t supervisor_pid_ns = 0;
  bool supervisor_alive = false;
  std::uint64_t supervisor_epoch = 0;        // +1 on every change of supervisor
  std::uint32_t standbys = 0;                // live supervisors standing by
  std::string removing;                      // "", "graceful", "immediate"
  std::uint32_t mode = 0, uid = 0;
  std::uint64_t segment_bytes = 0;
  std::vector<member_info> members;          // non-empty entries, by index
  pool_counters count;
  // takes - (returns_ok + returns_fail + killed_in_use + revoked_in_use +
  // members in use): 0 when the ledger holds. The members, gauges and
  // counters above are read in one pass, retried (up to 20 ms) until it was
  // taken while no table operation ran (ledger_settled) and the ledger holds
  // in it; when the table never stood still, a gap may be operations in
  // flight, not a fault.
  std::int64_t ledger_gap = 0;
  bool ledger_settled = false;
};

// A snapshot of pool `name` (opened read-only).
SHMBOX_API result<pool_info> inspect_pool(std::string_view name);

}  // namespace shmbox
