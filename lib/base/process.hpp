// lib/base/process.hpp - process identity that survives pid reuse and pid namespaces.
//
// A process key packs a pid and an incarnation into one 64-bit word, so that
// it can be claimed with a single CAS in shared memory:
//   bits 0..21  pid as the process sees itself (Linux pids are < 2^22)
//   bits 22..63 incarnation: 42 random bits drawn once per process
// Key 0 means "nobody". Nothing a process can see of itself is unique across
// containers: pid 1 of two containers started in the same clock tick has the
// same pid and start time, and a container restarted at once gets pid 1, a
// new pid namespace whose inode number is the dead one's (the kernel reuses
// them) and maybe the same start tick (found by the kill storm). So the
// incarnation is random (getrandom): two live or recent processes share a
// key with probability ~2^-42.
//
// A key is identity, not liveness: whether the holder of a role is alive is
// asked of the kernel through the role's lock (liveness.hpp), which holds in
// any namespace. Each role also records the inode of its holder's pid
// namespace (display, and: in_this_ns() says whether its pid means the same
// process here, for pidfds and give-away by pid).
#pragma once

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace shmbox::detail {

constexpr std::uint64_t kPidMask = (1ull << 22) - 1;

constexpr std::uint32_t key_pid(std::uint64_t key) noexcept {
  return static_cast<std::uint32_t>(key & kPidMask);
}

// The key of the calling process (cached; recomputed after fork).
std::uint64_t self_key() noexcept;

// The inode of this process's pid namespace (0 if /proc cannot tell).
std::uint64_t self_pid_ns() noexcept;

// A role recorded with pid namespace `pid_ns` is of this process's namespace
// (its pid means the same process here). False when either is unknown.
inline bool in_this_ns(std::uint64_t pid_ns) noexcept { return pid_ns != 0 && pid_ns == self_pid_ns(); }

// The start time (clock ticks after boot) of process `pid` of this pid
// namespace; 0 when it is gone or a zombie. With the pid, names one process.
std::uint64_t process_start_ticks(std::uint32_t pid) noexcept;

// Process `pid` of this pid namespace exists and is not a zombie.
bool pid_running(std::uint32_t pid) noexcept;

// True when process `pid` (this namespace) maps the file with device `dev`
// and inode `ino` (/proc/<pid>/maps): the process really is in that box.
bool process_maps_file(std::uint32_t pid, std::uint64_t dev, std::uint64_t ino) noexcept;

// Descriptor `num` of process `pid` (this pid namespace), duplicated into
// this process (pidfd_getfd: the same user or CAP_SYS_PTRACE, and a seccomp
// profile that allows it), if it is an eventfd and that process maps the
// file `dev`/`ino` (it is in the box: numbers read from a segment that
// others can write must not make us write into an arbitrary process's
// eventfd). -1 otherwise. The one place shmbox takes another process's fd.
// `seg_num` (>= 0): a descriptor of that process said to be the segment's:
// checked instead of its maps (one pidfd_getfd and fstat instead of reading
// /proc/<pid>/maps, which grows with every box the process has mapped).
int eventfd_of(std::uint32_t pid, int num, std::uint64_t dev, std::uint64_t ino, int seg_num = -1) noexcept;

// PROOF BEFORE A SIGNAL. A pid read from shared memory is a claim, not a
// proof: anyone who can write the segment can name any process, with its
// start time. A process is ours to signal only on evidence a writer of the
// segment cannot forge: it is our own unreaped child, or its environment
// (the block it was started with, /proc/<pid>/environ, readable only by its
// own user and root) carries what we gave our workers at spawn.
//
// A pidfd for process `pid` of this pid namespace if its environment holds
// every one of `entries` exactly ("NAME=value"), else -1. The pidfd is opened
// before the read and checked alive after it, so the proof is about the
// process the pidfd names (not a pid reused in between).
int pidfd_with_environ(std::uint32_t pid, std::initializer_list<std::string_view> entries) noexcept;
// Sends `sig` through `pidfd` (pidfd_send_signal: never to a reused pid). false with errno.
bool pidfd_signal(int pidfd, int sig) noexcept;
// The pids of this pid namespace (but this process) whose environment holds
// `entry`, each with an open pidfd (pidfd_with_environ); the caller closes them.
std::vector<std::pair<std::uint32_t, int>> processes_with_environ(std::string_view entry);

// True when `fd` (a descriptor of this process) is an eventfd. Descriptor
// numbers read from shared memory are checked with this before anything is
// written to a descriptor copied from another process (pidfd_getfd): a
// scribbled number must not make us write into one of its files.
bool is_eventfd(int fd) noexcept;

// Adds 1 to eventfd `fd` (makes it readable); a full counter or a closed
// descriptor is ignored: the reader looks at the box anyway.
inline void write_eventfd(int fd) noexcept {
  const std::uint64_t one = 1;
  [[maybe_unused]] const ssize_t n = ::write(fd, &one, sizeof one);
}

// ---------------------------------------------------------------------------
// FORK INHERITANCE (H). A fork child gets copies of its parent's handles:
// their memory, their mapping, their descriptors. The role a handle holds
// in a segment (owner lease, heir entry, producer entry, pool client, a
// member's lease) stays the parent's: the child is another process.
//  H1 Every handle that holds a role records its birth (made_here) when it
//     is made: the process's fork generation and its pid.
//  H2 The fork generation is 0 in a process that was exec'd and +1 in each
//     fork child (a pthread_atfork child handler, installed when the
//     library is loaded). So in a fork child it differs from every handle
//     it inherited, and equals it for every handle it makes itself. Reading
//     it is one relaxed load of a process-local word: the per-message calls
//     (post, receive) check it, where a getpid() would be a system call.
//  H3 A handle used in another process than its maker's only frees what is
//     its own copy (unmaps, closes its descriptors; its role locks are
//     void there already: liveness.hpp L6). Its destructor and close
//     never clear a key, release or give back a lease, withdraw an heir
//     entry, hand over, or write the segment for the role; its operations
//     refuse (errc::inherited_handle; an Owner's: not_owner), naming the
//     process that made it. The child opens handles of its own (an
//     inherited Box may be used to attach or acquire them).
//  H4 Destructors also compare the pid (a system call, but rare): a child
//     made by a raw clone() without the atfork handlers keeps generation
//     and memory, not the pid.
// ---------------------------------------------------------------------------

// H2: this process's fork generation. relaxed: written only by the atfork
// child handler, in the one thread of a new child, before fork() returns to it.
extern std::atomic<std::uint32_t> g_fork_generation;
inline std::uint32_t fork_generation() noexcept { return g_fork_generation.load(std::memory_order_relaxed); }

// H1: where a handle was made.
struct made_here {
  std::uint32_t generation = fork_generation();
  std::uint32_t pid = static_cast<std::uint32_t>(::getpid());
  // H2: the handle is used in the process that made it (one relaxed load).
  bool here() const noexcept { return generation == fork_generation(); }
  // H4: the same, also by pid (destructors, close: a getpid() system call).
  bool here_for_sure() const noexcept { return here() && pid == static_cast<std::uint32_t>(::getpid()); }
  // "this <what> handle was made by process P; a fork child must ..." (H3).
  std::string inherited_sentence(std::string_view what, std::string_view box, std::string_view instead) const;
};

// Monotonic and wall clocks in nanoseconds.
std::uint64_t mono_ns() noexcept;
// A public timeout in ns: nanoseconds::max() -> UINT64_MAX (forever), negative -> 0.
inline std::uint64_t timeout_ns(std::chrono::nanoseconds t) noexcept {
  return t == std::chrono::nanoseconds::max() ? UINT64_MAX : t.count() < 0 ? 0 : static_cast<std::uint64_t>(t.count());
}
std::uint64_t unix_ns() noexcept;

}  // namespace shmbox::detail
