// lib/process.hpp - process identity that survives pid reuse and pid namespaces.
//
// A process key packs a pid and an incarnation into one 64-bit word, so that
// it can be claimed with a single CAS in shared memory:
//   bits 0..21  pid as the process sees itself (Linux pids are < 2^22)
//   bits 22..63 incarnation: a 42-bit mix of the process's start time (clock
//               ticks after boot, /proc/self/stat field 22) and the inode of
//               its pid namespace (/proc/self/ns/pid)
// Key 0 means "nobody". A reused pid has another start time, and the same
// pid in another pid namespace (pid 1 of two containers started in the same
// tick) has another namespace inode, so keys of different processes differ.
//
// A key is identity, not liveness: whether the holder of a role is alive is
// asked of the kernel through the role's lock (liveness.hpp), which holds in
// any namespace. key_of_pid() and same_ns_alive() look in this process's own
// /proc and are right only for processes of this pid namespace: they are
// used to name a process by pid (give-away) and to decide whether a pidfd is
// usable, never to declare a role dead.
#pragma once

#include <cstdint>

namespace shmbox::detail {

constexpr std::uint64_t kPidMask = (1ull << 22) - 1;

constexpr std::uint32_t key_pid(std::uint64_t key) noexcept {
  return static_cast<std::uint32_t>(key & kPidMask);
}

// The key of the calling process (cached; recomputed after fork).
std::uint64_t self_key() noexcept;

// The inode of this process's pid namespace (0 if /proc cannot tell).
std::uint64_t self_pid_ns() noexcept;

// The key of `pid` in this process's pid namespace, or 0 when it does not
// exist or is a zombie.
std::uint64_t key_of_pid(std::uint32_t pid) noexcept;

// True when `key` names a running process of THIS pid namespace (not
// exited, not a zombie, pid not reused). A process of another namespace is
// never "alive" here: ask its role lock instead.
bool same_ns_alive(std::uint64_t key) noexcept;

// True when process `pid` (this namespace) maps the file with device `dev`
// and inode `ino` (/proc/<pid>/maps): the process really is in that box.
bool process_maps_file(std::uint32_t pid, std::uint64_t dev, std::uint64_t ino) noexcept;

// True when `fd` (a descriptor of this process) is an eventfd. Descriptor
// numbers read from shared memory are checked with this before anything is
// written to a descriptor copied from another process (pidfd_getfd): a
// scribbled number must not make us write into one of its files.
bool is_eventfd(int fd) noexcept;

// Monotonic and wall clocks in nanoseconds.
std::uint64_t mono_ns() noexcept;
std::uint64_t unix_ns() noexcept;

}  // namespace shmbox::detail
