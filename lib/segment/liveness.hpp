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
//     creator's key). Holders take a SHARED lock (F_RDLCK) on it, through an
//     open file description of their own (role_lock), BEFORE they publish
//     their key there, and drop it only AFTER they cleared the key (or die).
//     So "key != 0 and nobody holds the byte" means: its holder is dead.
//     Shared, because two processes may hold one byte for a moment (a claimer
//     whose CAS then fails; a stale owner whose lease expired and its
//     successor): that errs towards "alive", never towards "dead". Exclusive
//     rights still come from the CAS on the key, as before.
//  L2 A probe is F_OFD_GETLK for an exclusive lock on the byte, through the
//     box's mapping descriptor, which holds no role lock (only L3's and L4's,
//     on other bytes): any lock of any other open file description, in this
//     process or another, answers "held".
//  L3 Every handle that maps a box holds a shared lock on byte 0 (the attach
//     byte) for as long as it is mapped. gc takes an exclusive lock on it
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
//     locks held after the parent died. A pthread_atfork child handler points
//     every role_lock descriptor at /dev/null in the child. (A child made by
//     a raw clone() without the handler holds them until it exits or execs:
//     every descriptor here is O_CLOEXEC.)
#pragma once

#include <cstdint>

namespace shmbox::detail {

struct mapped_box;

// L1: the byte of each role.
constexpr std::uint64_t kAttachByte = 0;    // L3
constexpr std::uint64_t kCreatorByte = 24;  // L4: offsetof(segment_header, creator_key)
std::uint64_t owner_byte(const mapped_box& m) noexcept;
std::uint64_t request_byte(const mapped_box& m) noexcept;
std::uint64_t actor_byte(const mapped_box& m, std::uint32_t actor_index) noexcept;
std::uint64_t heir_byte(const mapped_box& m, std::uint32_t entry) noexcept;
std::uint64_t producer_byte(const mapped_box& m, std::uint32_t entry) noexcept;

// L2: true while some open file description holds a lock on byte `off` of
// the box (true as well if the kernel cannot answer: never declare a living
// process dead).
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
void unlock_byte(int fd, std::uint64_t off) noexcept;

// The role locks of one handle: one open file description of the segment,
// private to the handle, holding shared locks on its roles' bytes (L1, L6).
// Move-only; closing it (destruction, reset) drops every lock it holds.
class role_lock {
 public:
  role_lock() = default;
  role_lock(role_lock&& o) noexcept;
  role_lock& operator=(role_lock&& o) noexcept;
  role_lock(const role_lock&) = delete;
  role_lock& operator=(const role_lock&) = delete;
  ~role_lock() { reset(); }

  // Takes a shared lock on byte `off` (opens the description on first use);
  // waits out a momentary exclusive holder (gc, L3). false: could not open or lock.
  bool lock(const mapped_box& m, std::uint64_t off) noexcept;
  // Opens the description on segment `segment_fd` of this process (a pool)
  // without locking anything; then lock_open() takes shared locks on it.
  bool open_file(int segment_fd) noexcept;
  bool lock_open(std::uint64_t off) noexcept;
  // Opens the description on box `m`'s segment without locking anything.
  bool open_segment(const mapped_box& m) noexcept;
  // Waits (F_OFD_SETLKW) until it holds byte `off` exclusively: until no
  // other description holds it (release_watch.hpp). false: an error.
  bool wait_exclusive(std::uint64_t off) noexcept;
  // An exclusive lock on byte `off`, without waiting (the pool's TL2). false: held by another.
  bool try_exclusive(std::uint64_t off) noexcept { return fd_ >= 0 && try_lock_byte(fd_, off, true); }
  void unlock(std::uint64_t off) noexcept;
  void reset() noexcept;  // drops every lock
  bool open() const noexcept { return fd_ >= 0; }

 private:
  template <class Open>
  bool open_with(Open open_description) noexcept;
  int fd_ = -1;
};

// A new open file description of the box's segment (read-write when the
// box is mapped read-write), or -1 with errno.
int reopen_segment(const mapped_box& m) noexcept;

}  // namespace shmbox::detail
