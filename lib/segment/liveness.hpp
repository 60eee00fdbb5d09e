// lib/segment/liveness.hpp - who is alive in a box: asked of the kernel, in any pid namespace.
//
// WHY LOCKS. The processes of one box may sit in different pid namespaces
// (containers sharing /dev/shm), where a pid means something else and /proc
// shows only one namespace. What every process of a box does share is the
// segment file. So a role is alive exactly while its holder holds an open
// file description lock (F_OFD_SETLK) on the role's byte of the segment: the
// kernel drops the lock when the last descriptor of that open file
// description goes away, i.e. when the holder exits or is killed at any
// instruction, in whatever namespace, and any process that can open the
// segment can test it (F_OFD_GETLK) or wait for it (F_OFD_SETLKW).
// (POSIX record locks would not do: they belong to the process, so two
// handles of one process could not be told apart, and closing any
// descriptor of the file drops them all. flock() has no byte ranges.)
//
// THE RULES.
//  L1 A role's byte is the offset of its key word in the segment (owner record,
//     owner actor, heir entry, producer entry, the give-away request, the
//     creator's key). Holders take a SHARED lock (F_RDLCK) on it BEFORE they
//     publish their key there, and drop it only AFTER they cleared the key (or
//     die). So "key != 0 and nobody holds the byte" means: its holder is dead.
//     Shared, because two processes may hold one byte for a moment (a claimer
//     whose CAS then fails; a stale owner whose lease expired and its
//     successor): that errs towards "alive", never towards "dead". Exclusive
//     rights still come from the CAS on the key, as before.
//     A byte speaks for the key it is held for, so a role whose key was
//     cleared while some process still holds its byte is not free: an heir
//     entry withdrawn by its own heir's takeover (handover.hpp O5) while
//     that heir's Heir handle still holds the byte (it lets go right after:
//     heir.cpp), or by Owner::acquire in a process whose Heir handle holds
//     it (until that handle goes). enlist takes an entry only when nobody
//     holds its byte; else a new heir there would read as alive by the
//     other's lock, also once dead (gencheck's heir-entry-lock).
//     THE LOCK DESCRIPTION. A handle locks its role bytes through its
//     mapping's lock description (mapped_box::fd), not one of its own: an
//     owned box costs one descriptor, not two. It is a second description
//     of the segment, opened once the box is mapped (lock_description); the
//     description that was mapped holds only the attach lock (L3), and its
//     descriptor is closed: the mapping keeps it (and the lock) alive. The
//     two must differ because a mapping pins the description it was made
//     from, in this process and in every fork child that inherits the
//     mapping: role locks on it would outlive their holder in its children.
//     The handles of one mapping share its lock description, and the locks
//     of one description are one lock per byte however often they are
//     taken, so the mapping counts its holders per byte (mapped_box::held,
//     under this file's mutex) and the last role_lock that lets a byte go
//     unlocks it. (Without /proc, and with the name gone, the mapped
//     description stays the lock description; a mapping not held by a
//     shared_ptr gets a description per role_lock, as before.)
//  L2 A probe answers "held" for a byte its own mapping holds (the held
//     bytes: this process holds it, and this process lives), and otherwise
//     asks the kernel: F_OFD_GETLK for an exclusive lock on the byte, through
//     the mapping's description, which reports the locks of every OTHER open
//     file description, in this process or another. (A description never
//     conflicts with itself: that is why the held bytes are asked first.)
//     Ordering: a holder counts its byte (under the mutex) before it
//     publishes its key; a prober of this process reads the key (acquire)
//     before the count, so it sees the count of any key it sees.
//  L3 Every handle that maps a box holds a shared lock on byte 0 (the attach
//     byte) for as long as it is mapped (on the mapped description: it goes
//     with the last mapping of that description, a fork child's included). gc takes an exclusive lock on it
//     (F_OFD_SETLK, never waiting) before it checks and unlinks: while gc
//     holds it nobody can attach, and gc gets it only when nobody is
//     attached. An opener that gets its shared lock after gc unlinked sees
//     st_nlink == 0 and fails ("removed while opening") instead of posting
//     into a segment without a name.
//  L4 The creator holds byte 24 (creator_key) until the box is ready: a
//     half-made box whose byte nobody holds was abandoned.
//  L5 Waiting for a death: in our pid namespace a pidfd (readable at once);
//     in another, a watcher thread blocked in F_OFD_SETLKW for the byte
//     (release_watch.hpp: the kernel wakes it when the holder goes; it is
//     never stopped, only left), and L2 asked every 20 ms as a safety net
//     (every 5 ms where no watcher could be started; lib/handles/heir.cpp).
//     Because gc, or a watcher, may hold a byte exclusively for a moment,
//     role_lock::lock waits (F_OFD_SETLKW for a shared lock) instead of
//     failing.
//  L6 fork: a child inherits descriptors, so it would keep its parent's role
//     locks held after the parent died, and its probes through the shared
//     lock description would not see them (a description never conflicts
//     with itself: the child would take its living parent for dead). So a
//     pthread_atfork child handler gives every mapping of the child a lock
//     description of its own (/proc/self/fd/N opened again, put at the same
//     number with dup3) and voids the held bytes (mapped_box::held_gen: a
//     handle's later unlock there is a no-op). With no /proc the child's
//     lock descriptor is closed (fd -1: its probes answer "held", never
//     "dead"). The other role_lock descriptions (release watchers, pools)
//     are pointed at /dev/null in the child. (A child made by a raw clone()
//     without the handler holds them until it exits or execs: every
//     descriptor here is O_CLOEXEC; its handles unlock nothing, by pid.)
//     Cost: three system calls per mapped box per fork.
//  L7 THE TRUST RULE T6 (base/shm_file.hpp): anyone who may open a segment
//     may hold any of its bytes, shared (read access) or exclusively (write
//     access), for as long as it likes. So no call waits for a byte in the
//     kernel (F_OFD_SETLKW waits as long as the holder wants and restarts
//     after signals): a role lock that finds its byte held exclusively
//     polls (F_OFD_SETLK, 50 us pauses growing to 1 ms) until a deadline,
//     kRoleLockWaitNs after the call began unless the caller gives one (a
//     producer's attach gives one deadline to all the entries it tries,
//     and an entry it cannot lock by then is skipped for the next); a
//     signal that comes at any moment of the wait ends it (errno EINTR), as
//     a blocking call without SA_RESTART would (liveness.cpp: the looks run
//     with signals blocked, the pauses are ppoll()s that unblock them). What holds a byte
//     honestly holds it for microseconds (a watcher's probe after a death,
//     L5) or milliseconds (gc's check and unlink, L3). The one wait left in
//     the kernel is a release watcher's (release_watch.hpp): a thread of its
//     own that nothing waits for, with L2's probes as its safety net.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

namespace shmbox::detail {

struct mapped_box;

// L7: how long a role lock waits for a byte held exclusively by another
// description, unless the caller says (then: until its deadline).
constexpr std::uint64_t kRoleLockWaitNs = 1'000'000'000;

// L1: the byte of each role.
constexpr std::uint64_t kAttachByte = 0;    // L3
constexpr std::uint64_t kCreatorByte = 24;  // L4: offsetof(segment_header, creator_key)
std::uint64_t owner_byte(const mapped_box& m) noexcept;
std::uint64_t request_byte(const mapped_box& m) noexcept;
std::uint64_t actor_byte(const mapped_box& m, std::uint32_t actor_index) noexcept;
std::uint64_t heir_byte(const mapped_box& m, std::uint32_t entry) noexcept;
std::uint64_t producer_byte(const mapped_box& m, std::uint32_t entry) noexcept;

// L2: true while some open file description holds a lock on byte `off` of
// the box, this mapping's own held bytes included (true as well if the kernel
// cannot answer: never declare a living process dead).
bool lock_held(const mapped_box& m, std::uint64_t off) noexcept;
// The same for a descriptor of a segment that is not mapped (gc, openers).
bool lock_held_fd(int fd, std::uint64_t off) noexcept;
// A role is alive: its key is set and its byte is held (L1).
inline bool role_alive(const mapped_box& m, std::uint64_t off, std::uint64_t key) noexcept {
  return key != 0 && lock_held(m, off);
}

// Shared (F_RDLCK) or exclusive lock on one byte of `fd`'s open file
// description, without waiting. false with errno (EAGAIN: held by another).
bool try_lock_byte(int fd, std::uint64_t off, bool exclusive) noexcept;
// L7: a lock of `type` (F_RDLCK, F_WRLCK) on byte `off` of `fd`'s
// description, waiting for a conflicting holder until `give_up_ns` (mono_ns;
// 0: kRoleLockWaitNs from now) by polling, never in the kernel; a signal ends
// the wait. false with errno (EAGAIN: held past the deadline; EINTR).
bool wait_lock_byte(int fd, std::uint64_t off, short type, std::uint64_t give_up_ns) noexcept;
void unlock_byte(int fd, std::uint64_t off) noexcept;

// The role locks of one handle: shared locks on its roles' bytes (L1, L6),
// held through the mapping's description (a box handle's lock(), counted in
// mapped_box::held; it keeps the mapping alive while it holds any), or
// through an open file description of its own (a pool's open_file, a
// watcher's open_segment, a mapping not held by a shared_ptr).
// Move-only; destruction and reset drop every lock it holds.
class role_lock {
 public:
  role_lock() = default;
  role_lock(role_lock&& o) noexcept;
  role_lock& operator=(role_lock&& o) noexcept;
  role_lock(const role_lock&) = delete;
  role_lock& operator=(const role_lock&) = delete;
  ~role_lock() { reset(); }

  // Takes a shared lock on byte `off` of box `m`, through m's description
  // (L1); waits out a momentary exclusive holder (a watcher, L5) until
  // `give_up_ns` (mono_ns; 0: kRoleLockWaitNs from now, L7). false: could
  // not lock (errno; EAGAIN: held exclusively past the deadline; EINTR: a
  // signal ended the wait). Locking a byte this role_lock holds already is a
  // no-op; locking a byte of another mapping first lets go of the first.
  bool lock(const mapped_box& m, std::uint64_t off, std::uint64_t give_up_ns = 0) noexcept;
  // Opens the description on segment `segment_fd` of this process (a pool)
  // without locking anything; then lock_open() takes shared locks on it.
  bool open_file(int segment_fd) noexcept;
  bool lock_open(std::uint64_t off, std::uint64_t give_up_ns = 0) noexcept;  // waits as lock() does (L7)
  // Opens the description on box `m`'s segment without locking anything.
  bool open_segment(const mapped_box& m) noexcept;
  // Waits (F_OFD_SETLKW) until it holds byte `off` exclusively: until no
  // other description holds it (release_watch.hpp). false: an error.
  bool wait_exclusive(std::uint64_t off) noexcept;
  // An exclusive lock on byte `off`, without waiting (the pool's TL2). false: held by another.
  bool try_exclusive(std::uint64_t off) noexcept { return fd_ >= 0 && try_lock_byte(fd_, off, true); }
  void unlock(std::uint64_t off) noexcept;
  void reset() noexcept;  // drops every lock
  bool open() const noexcept { return fd_ >= 0 || m_ != nullptr; }

 private:
  template <class Open>
  bool open_with(Open open_description) noexcept;
  bool hold(std::uint64_t off, std::uint64_t give_up_ns) noexcept;  // through m_ (L1's one description)
  void let_go(std::uint64_t off) noexcept;   // the same, one byte
  int fd_ = -1;                              // a description of its own, or -1
  std::shared_ptr<const mapped_box> m_;      // or the mapping whose description holds our bytes
  std::uint32_t gen_ = 0;                    // m_->held_gen when `bytes_` were taken (L6)
  std::uint32_t pid_ = 0;                    // our pid then (process.hpp H4: a raw clone() child unlocks nothing)
  std::vector<std::uint64_t> bytes_;         // the bytes we hold through m_
};

// L1: once box `m` is mapped (the end of create_segment and open_segment),
// its lock description takes the place of the mapped one in m.fd. L6: it also
// puts `m` on this process's list of mappings (until destruction:
// untrack_mapping), so that a fork child can give each a description of its own.
void lock_description(mapped_box& m) noexcept;
void untrack_mapping(mapped_box& m) noexcept;

// A new open file description of the box's segment (read-write when the
// box is mapped read-write), or -1 with errno.
int reopen_segment(const mapped_box& m) noexcept;

}  // namespace shmbox::detail
