// lib/process.hpp - process identity that survives pid reuse.
//
// A process key packs a pid and the process's start time into one 64-bit
// word, so that it can be claimed with a single CAS in shared memory:
//   bits 0..21  pid (Linux pids are < 2^22, PID_MAX_LIMIT)
//   bits 22..63 start time, clock ticks after boot (/proc/<pid>/stat field 22)
// Key 0 means "nobody". A reused pid has another start time, so a dead
// process is never mistaken for the new one.
//
// All processes of a box must share a pid namespace (and see the same /proc).
#pragma once

#include <cstdint>

namespace shmbox::detail {

constexpr std::uint64_t kPidMask = (1ull << 22) - 1;

constexpr std::uint32_t key_pid(std::uint64_t key) noexcept {
  return static_cast<std::uint32_t>(key & kPidMask);
}

// The key of the calling process (cached; recomputed after fork).
std::uint64_t self_key() noexcept;

// The key of `pid`, or 0 when it does not exist or is a zombie.
std::uint64_t key_of_pid(std::uint32_t pid) noexcept;

// True when the process named by `key` is still running (not exited, not a
// zombie, pid not reused). A slow or stopped process is alive.
bool process_alive(std::uint64_t key) noexcept;

// True when `fd` (a descriptor of this process) is an eventfd. Descriptor
// numbers read from shared memory are checked with this before anything is
// written to a descriptor copied from another process (pidfd_getfd): a
// scribbled number must not make us write into one of its files.
bool is_eventfd(int fd) noexcept;

// Monotonic and wall clocks in nanoseconds.
std::uint64_t mono_ns() noexcept;
std::uint64_t unix_ns() noexcept;

}  // namespace shmbox::detail
