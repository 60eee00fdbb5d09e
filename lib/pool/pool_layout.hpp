// lib/pool/pool_layout.hpp - EVERYTHING that lives in a pool's shared-memory segment.
//
// The pool segment (/dev/shm/shmbox-pool.<name>): a pool's parameters and its
// member table (pooler). Its own magic and version: a pool is not a box.
//
//   offset 0              pool_header   (256 B: identity, parameters, geometry)
//   kPoolConfigOffset     pool_config   (2560 B: names and the member command)
//   kPoolStateOffset      pool_state    (1024 B: table lock, journal, supervisor, counters)
//   clients_offset        pool_client[max_clients]  (64 B each)
//   members_offset        pool_member[max_count]    (128 B each)
//
// Everything after pool_config that a table operation changes is a 64-bit
// word, written only by the holder of the table lock and only through the
// redo journal (lib/pool/pool_table.hpp has the protocol), so that a process
// killed between any two writes leaves a table the next lock holder
// completes. The futex words (pool_state::lock, ::work, pool_client::wake)
// are outside the journal. Readers without the lock (inspection, a waiting
// taker's poll) read each word atomically and treat what they see as a
// snapshot.
//
// Rule: bump kPoolLayoutVersion on every incompatible change here.
// Every field has its offset asserted and every struct its size: they are
// the ones of layout version 2.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "segment/layout.hpp"  // a32, a64, kReady, kCacheLine
#include "shmbox/types.hpp"

namespace shmbox::detail {

constexpr std::uint64_t kPoolMagic = 0x0158'4C4F'4F50'5302ULL;  // "SPOOLX" + 02: never changes
constexpr std::uint32_t kPoolLayoutVersion = 2;  // 2: the table lock is the kernel's (TL2), not the word
constexpr std::uint32_t kPoolHeaderBytes = 256;
constexpr std::uint32_t kPoolConfigBytes = 2560;
constexpr std::uint32_t kPoolStateBytes = 1024;
constexpr std::uint64_t kPoolConfigOffset = kPoolHeaderBytes;
constexpr std::uint64_t kPoolStateOffset = kPoolConfigOffset + kPoolConfigBytes;
constexpr std::uint32_t kPoolJournalMax = 24;    // writes of one table operation at most
constexpr std::uint32_t kPoolCounterSlots = 24;  // pool_state::counters

struct pool_header {
  std::uint64_t magic;             // kPoolMagic
  std::uint32_t layout_version;    // kPoolLayoutVersion
  a32 ready;                       // kReady, stored last with release by the creator
  std::uint64_t total_bytes;       // size of the whole segment
  std::uint64_t creator_key;       // the creator (process.hpp)
  std::uint64_t created_unix_ns;
  // pool_options, validated at creation. init_count, max_count, queue_max,
  // cull_after_ms and auto_grow_plus1 are the values at creation: the
  // effective ones are live_limits() (pool_state's live words).
  std::uint32_t init_count;
  std::uint32_t max_count;         // member entries (1..kMaxPoolMembers): pool_options::table_size or max_count
  std::uint32_t queue_max;
  std::uint32_t max_clients;       // client entries (1..kMaxPoolClients)
  std::uint32_t cull_after_ms;
  std::uint32_t start_timeout_ms;
  std::uint32_t stop_grace_ms;
  std::uint32_t health_interval_ms;
  std::uint32_t health_timeout_ms;
  std::uint32_t member_slot_size;  // member box geometry (shmbox::options)
  std::uint32_t member_policy;
  std::uint32_t member_lanes;      // 1..kMaxLanes
  std::uint32_t member_max_producers;
  std::uint32_t member_mode;
  std::uint32_t member_block_timeout_ms;
  std::uint32_t member_spin_ns;
  std::uint32_t member_lane_capacity[kMaxLanes];
  std::uint32_t member_lane_policy[kMaxLanes];
  std::uint32_t member_default_lane;  // kMaxLanes: unset
  // pool_options::max_lifetime (0: none). This and the two words after
  // members_offset were reserved (0) before they were options: a pool made
  // by an older library has none of them, and an older library ignores them.
  std::uint32_t max_lifetime_ms;
  std::uint64_t clients_offset;
  std::uint64_t members_offset;
  std::uint32_t max_lifetime_jitter_ms;  // < max_lifetime_ms (0 when that is 0)
  std::uint32_t auto_grow_plus1;         // pool_options::auto_grow_threshold + 1 (0: none)
  std::uint8_t reserved[kPoolHeaderBytes - 200];
};
static_assert(sizeof(pool_header) == kPoolHeaderBytes);
static_assert(offsetof(pool_header, magic) == 0);
static_assert(offsetof(pool_header, layout_version) == 8);
static_assert(offsetof(pool_header, ready) == 12);
static_assert(offsetof(pool_header, total_bytes) == 16);
static_assert(offsetof(pool_header, creator_key) == 24);
static_assert(offsetof(pool_header, created_unix_ns) == 32);
static_assert(offsetof(pool_header, init_count) == 40);
static_assert(offsetof(pool_header, max_count) == 44);
static_assert(offsetof(pool_header, queue_max) == 48);
static_assert(offsetof(pool_header, max_clients) == 52);
static_assert(offsetof(pool_header, cull_after_ms) == 56);
static_assert(offsetof(pool_header, start_timeout_ms) == 60);
static_assert(offsetof(pool_header, stop_grace_ms) == 64);
static_assert(offsetof(pool_header, health_interval_ms) == 68);
static_assert(offsetof(pool_header, health_timeout_ms) == 72);
static_assert(offsetof(pool_header, member_slot_size) == 76);
static_assert(offsetof(pool_header, member_policy) == 80);
static_assert(offsetof(pool_header, member_lanes) == 84);
static_assert(offsetof(pool_header, member_max_producers) == 88);
static_assert(offsetof(pool_header, member_mode) == 92);
static_assert(offsetof(pool_header, member_block_timeout_ms) == 96);
static_assert(offsetof(pool_header, member_spin_ns) == 100);
static_assert(offsetof(pool_header, member_lane_capacity) == 104);
static_assert(offsetof(pool_header, member_lane_policy) == 136);
static_assert(offsetof(pool_header, member_default_lane) == 168);
static_assert(offsetof(pool_header, clients_offset) == 176);
static_assert(offsetof(pool_header, members_offset) == 184);
static_assert(offsetof(pool_header, max_lifetime_ms) == 172);
static_assert(offsetof(pool_header, max_lifetime_jitter_ms) == 192);
static_assert(offsetof(pool_header, auto_grow_plus1) == 196);
static_assert(offsetof(pool_header, reserved) == 200);

// Written by the creator before `ready`, never again. Strings are NUL-padded;
// readers take at most the field's size and validate what they read.
struct pool_config {
  char name[128];          // the pool's name
  char group[128];         // pool_options::group ("" none)
  char dead_letters[128];  // pool_options::dead_letters ("" none)
  char command[2048];      // pool_options::command (kMaxPoolCommand)
  // pool_options::init_command (< kMaxPoolInitCommand bytes). Reserved (0)
  // before it was an option: a pool made by an older library has none, and
  // an older supervisor ignores it (it hands members out without running it).
  char init_command[128];
};
static_assert(sizeof(pool_config) == kPoolConfigBytes);
static_assert(offsetof(pool_config, name) == 0);
static_assert(offsetof(pool_config, group) == 128);
static_assert(offsetof(pool_config, dead_letters) == 256);
static_assert(offsetof(pool_config, command) == 384);
static_assert(offsetof(pool_config, init_command) == 2432);

// pool_state::counters, by index (pool_counters in shmbox/pool.hpp). A new
// counter takes the next spare slot: a pool made by an older library reads 0
// there and an older library ignores it, so that is not an incompatible
// change (no version bump); moving or re-purposing a slot is.
enum class pool_counter : std::uint32_t {
  takes, returns_ok, returns_fail, no_members_at_capacity, no_members_queue_full, no_members_starting,
  take_timeouts, queue_max_reached, granted, killed_free_culled, killed_free_unhealthy, killed_in_use,
  crashed, start_failures, starts, double_returns, stale_returns, dead_lettered, lost,
  revoked_in_use,  // slot 19: leases ended by their member's stop (pool_table.hpp LG4)
  refused_signals,  // slot 20: signals not sent for want of proof (pool_supervisor.cpp SP)
  expired_free,      // slot 21: free members retired at max_lifetime
  expired_returned,  // slot 22: members retired at their give back, max_lifetime having passed in use
  auto_grow_starts,  // slot 23: members started ahead of demand (auto_grow_threshold)
  count_  // number of counters (<= kPoolCounterSlots)
};
static_assert(static_cast<std::uint32_t>(pool_counter::count_) <= kPoolCounterSlots);
static_assert(static_cast<std::uint32_t>(pool_counter::revoked_in_use) == 19);

struct alignas(kCacheLine) pool_state {
  // The table lock (futex): 0 free, else (holder's client index + 1) | kPoolLockWaiters.
  a32 lock;
  a32 work;                 // futex: bumped (then woken) when the supervisor has something to do
  a64 journal_valid;        // 1: the journal below holds a committed operation not yet fully applied
  a64 journal_count;        // writes in it (<= kPoolJournalMax)
  a64 removing;             // 0, 1 graceful, 2 immediate
  a64 supervisor_client;    // client entry of the supervisor (valid while supervisor_key != 0)
  a64 supervisor_key;       // its process key; 0: none
  a64 supervisor_epoch;     // +1 on every change of supervisor
  a64 next_ticket;          // waiting takers' tickets (FIFO)
  a64 next_stamp;           // return stamps (the most recently returned member is taken first)
  a64 next_order;           // standby supervisors' order
  a64 last_op;              // the kind of the last journalled operation (display, tests)
  // Explicit culls (Pool::cull, pool_supervisor.cpp CU): a request is
  // seq << 32 | idle ms (the least idle time asked by the requests the
  // supervisor has not served yet); served, cull_done is seq << 32 |
  // members stopped by that pass. Both journalled. A pool made by an older
  // library has 0 here (no request); an older supervisor ignores them.
  a64 cull_asked;
  a64 cull_done;
  // auto_grow_threshold: a take that left that few free members bumps
  // grow_asked; the supervisor starts members and sets grow_done to it.
  a64 grow_asked;
  a64 grow_done;
  a64 reserved0[1];
  a64 journal_offset[kPoolJournalMax];  // byte offset of each write in the segment (8-aligned, in the table)
  a64 journal_value[kPoolJournalMax];
  a64 counters[kPoolCounterSlots];
  // Live reconfiguration (Pool::reconfigure, pool_table.hpp RC): each
  // parameter's value + 1, or 0 for the header's (a pool made by an older
  // library, or never reconfigured). Journalled; read through live_limits(),
  // which keeps every value within the header's bounds whatever is written here.
  a64 live_init_count;
  a64 live_max_count;     // <= pool_header::max_count (the member entries)
  a64 live_queue_max;     // <= pool_header::max_clients
  a64 live_cull_after_ms;
  a64 live_auto_grow;     // auto_grow_plus1 + 1
  a64 reconf_asked;       // +1 for every reconfigure
  a64 reconf_done;        // the reconfigure the supervisor applied last (RC3)
  std::uint8_t reserved[kPoolStateBytes - 128 - 16 * kPoolJournalMax - 8 * kPoolCounterSlots - 56];
};
constexpr std::uint32_t kPoolLockWaiters = 1u << 31;
static_assert(sizeof(pool_state) == kPoolStateBytes);
static_assert(offsetof(pool_state, lock) == 0);
static_assert(offsetof(pool_state, work) == 4);
static_assert(offsetof(pool_state, journal_valid) == 8);
static_assert(offsetof(pool_state, journal_count) == 16);
static_assert(offsetof(pool_state, removing) == 24);
static_assert(offsetof(pool_state, supervisor_client) == 32);
static_assert(offsetof(pool_state, supervisor_key) == 40);
static_assert(offsetof(pool_state, supervisor_epoch) == 48);
static_assert(offsetof(pool_state, next_ticket) == 56);
static_assert(offsetof(pool_state, next_stamp) == 64);
static_assert(offsetof(pool_state, next_order) == 72);
static_assert(offsetof(pool_state, last_op) == 80);
static_assert(offsetof(pool_state, cull_asked) == 88);
static_assert(offsetof(pool_state, cull_done) == 96);
static_assert(offsetof(pool_state, grow_asked) == 104);
static_assert(offsetof(pool_state, grow_done) == 112);
static_assert(offsetof(pool_state, reserved0) == 120);
static_assert(offsetof(pool_state, journal_offset) == 128);
static_assert(offsetof(pool_state, journal_value) == 128 + 8 * kPoolJournalMax);
static_assert(offsetof(pool_state, counters) == 128 + 16 * kPoolJournalMax);
static_assert(offsetof(pool_state, live_init_count) == 128 + 16 * kPoolJournalMax + 8 * kPoolCounterSlots);
static_assert(offsetof(pool_state, live_init_count) == 704);
static_assert(offsetof(pool_state, live_max_count) == 712);
static_assert(offsetof(pool_state, live_queue_max) == 720);
static_assert(offsetof(pool_state, live_cull_after_ms) == 728);
static_assert(offsetof(pool_state, live_auto_grow) == 736);
static_assert(offsetof(pool_state, reconf_asked) == 744);
static_assert(offsetof(pool_state, reconf_done) == 752);
static_assert(offsetof(pool_state, reserved) == 760);

// One Pool handle (a taker, a supervisor or a standby). Its holder keeps a
// shared OFD lock on the byte of `key` (liveness.hpp L1) while key is set.
enum class pool_role : std::uint64_t { taker = 0, standby = 1, supervisor = 2 };
struct alignas(kCacheLine) pool_client {
  a64 key;            // process key (process.hpp); 0: free entry
  a64 pid_ns;         // its pid namespace (display)
  a64 role;           // pool_role
  a64 wait_ticket;    // != 0: waiting for a member since this ticket (FIFO order)
  a64 granted;        // a waiting take was handed member (index + 1) | lease << 16; 0 none
  a64 order;          // standby: its place in the line (pool_state::next_order)
  a32 wake;           // futex: bumped when `granted` is set
  a32 reserved0;
  a64 reserved1;
};
static_assert(sizeof(pool_client) == 64);
static_assert(offsetof(pool_client, key) == 0);
static_assert(offsetof(pool_client, pid_ns) == 8);
static_assert(offsetof(pool_client, role) == 16);
static_assert(offsetof(pool_client, wait_ticket) == 24);
static_assert(offsetof(pool_client, granted) == 32);
static_assert(offsetof(pool_client, order) == 40);
static_assert(offsetof(pool_client, wake) == 48);
static_assert(offsetof(pool_client, reserved0) == 52);
static_assert(offsetof(pool_client, reserved1) == 56);

// One member entry. `state` is member_state (shmbox/pool.hpp) | why << 8 (stopping).
enum class member_stop : std::uint64_t {
  none = 0, culled = 1, failed = 2, consumer_died = 3, unhealthy = 4, crashed = 5, start_timeout = 6, removed = 7,
  expired = 8,  // max_lifetime reached: free (the supervisor, a take) or at its give back
  init_failed = 9,  // its init_command failed or outlasted start_timeout (counted as a start failure)
};
struct alignas(kCacheLine) pool_member {
  a64 state;          // member_state | member_stop << 8
  a64 generation;     // +1 for every new member in this entry (more past planted names: S2a); names its box (<pool>.m<index>.<generation>)
  a64 leases;         // +1 on every take; with generation, names one lease (lease_token)
  a64 taker_client;   // in_use: client entry of the holder
  a64 taker_key;      // in_use: its key (the entry may be reused after it dies)
  a64 worker_pid;     // the started worker (process group leader), as its starter sees it; 0 unknown
  a64 worker_ns;      // the starter's pid namespace
  a64 worker_start;   // the worker's start time (clock ticks after boot): defeats pid reuse
  a64 started_ns;     // CLOCK_MONOTONIC when the start began
  a64 stamp;          // free: its return stamp (highest is taken first)
  a64 idle_since_ns;  // free: CLOCK_MONOTONIC when it became free
  a64 ping_seq;       // health check: the last ping sent
  a64 ping_ack;       // ... the last ping the member answered (written by the member, not journalled)
  a64 ping_sent_ns;
  a64 stop_signal_ns; // stopping: when SIGTERM was sent (0: not yet)
  a64 drain_count;    // stopping: messages of its box forwarded or counted lost so far (pool_supervisor.cpp P3)
};
static_assert(sizeof(pool_member) == 128);
static_assert(offsetof(pool_member, state) == 0);
static_assert(offsetof(pool_member, generation) == 8);
static_assert(offsetof(pool_member, leases) == 16);
static_assert(offsetof(pool_member, taker_client) == 24);
static_assert(offsetof(pool_member, taker_key) == 32);
static_assert(offsetof(pool_member, worker_pid) == 40);
static_assert(offsetof(pool_member, worker_ns) == 48);
static_assert(offsetof(pool_member, worker_start) == 56);
static_assert(offsetof(pool_member, started_ns) == 64);
static_assert(offsetof(pool_member, stamp) == 72);
static_assert(offsetof(pool_member, idle_since_ns) == 80);
static_assert(offsetof(pool_member, ping_seq) == 88);
static_assert(offsetof(pool_member, ping_ack) == 96);
static_assert(offsetof(pool_member, ping_sent_ns) == 104);
static_assert(offsetof(pool_member, stop_signal_ns) == 112);
static_assert(offsetof(pool_member, drain_count) == 120);

// Fills clients_offset, members_offset and the total size; false when out of limits.
bool compute_pool_geometry(std::uint32_t max_clients, std::uint32_t max_count, std::uint64_t& clients_offset,
                           std::uint64_t& members_offset, std::uint64_t& total_bytes) noexcept;

}  // namespace shmbox::detail
