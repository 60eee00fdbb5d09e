// lib/base/futex.hpp - shared (not PRIVATE) futexes on words in the segment.
//
// Only the wait/wake system calls live here; the handshakes that decide when
// to call them (and their memory ordering) are in wake.hpp / wake.cpp (the
// ownership hand-over's waits on transfer_seq: box.cpp, lease.cpp, owner.cpp).
#pragma once

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <ctime>

namespace shmbox::detail {

// Sleeps while *word == expected, until woken or until the absolute
// CLOCK_MONOTONIC time `deadline_ns` (UINT64_MAX: no deadline). Returns false
// on timeout; true otherwise (woken, value changed, or interrupted): callers
// re-check their condition either way.
inline bool futex_wait(std::atomic<std::uint32_t>* word, std::uint32_t expected,
                       std::uint64_t deadline_ns) noexcept {
  timespec ts{};
  timespec* tsp = nullptr;
  if (deadline_ns != UINT64_MAX) {
    ts.tv_sec = static_cast<time_t>(deadline_ns / 1'000'000'000ull);
    ts.tv_nsec = static_cast<long>(deadline_ns % 1'000'000'000ull);
    tsp = &ts;
  }
  // FUTEX_WAIT_BITSET takes an absolute CLOCK_MONOTONIC timeout, so a loop
  // that re-waits after a spurious wake-up keeps its original deadline.
  const long rc = ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), FUTEX_WAIT_BITSET,
                            expected, tsp, nullptr, FUTEX_BITSET_MATCH_ANY);
  return !(rc == -1 && errno == ETIMEDOUT);
}

// Wakes up to `count` sleepers on *word.
inline void futex_wake(std::atomic<std::uint32_t>* word, int count = INT_MAX) noexcept {
  ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), FUTEX_WAKE, count, nullptr, nullptr, 0);
}

}  // namespace shmbox::detail
