// lib/segment/release_watch.hpp - RELEASE WATCHES: being told by the kernel,
// not by polling, that nobody holds a role byte any more (liveness.hpp L5).
//
// An heir whose owner is in another pid namespace cannot use a pidfd (the
// owner's pid means another process here). What it shares with the owner is
// the segment file, and the owner holds a shared OFD lock on its role byte
// while it lives (L1). So a WATCHER thread of this process blocks in
// F_OFD_SETLKW for an exclusive lock on that byte, through a description of
// its own. The kernel grants it the moment the last holder lets go (exits,
// is killed at any instruction, releases the role), in whatever namespace;
// the watcher unlocks at once (a successor's role_lock::lock waits only that
// long) and writes the eventfd of every subscriber: the heir's, which is in
// its epoll set, so an event-loop heir (Heir::fd) becomes readable too.
//
// A pending exclusive request blocks nobody (Linux grants new shared locks
// past it), and while the watcher holds the byte for that moment, probes
// (L2) say "held": they err towards alive, never towards dead.
//
// Stopping. A thread blocked in F_OFD_SETLKW can be stopped only by a signal
// (a handler the library would have to install process-wide) or by
// pthread_cancel (whose unwinding GCC 12's AddressSanitizer cannot follow).
// So a watcher is never stopped: a subscriber that goes (release_watch_remove)
// only leaves its list, and the watcher ends when the byte is let go. Until
// then it stays, one thread (64 KiB of stack) and one descriptor, and is
// shared: every subscriber of the same byte of the same file, now or later,
// uses the one watcher. So there are at most as many as there are distinct
// role bytes this process has watched whose holders still live.
//
// fork: the watcher's description is a role_lock (registered for L6): a fork
// child's copy points at /dev/null, so a child never keeps a byte the
// watcher had been granted. The child has no watcher threads; its watches
// are its own (a new registry, by pid).
#pragma once

#include <cstdint>

namespace shmbox::detail {

struct mapped_box;

#pragma GCC visibility push(hidden)

// Writes eventfd `efd` once nobody holds byte `off` of box `m`'s segment
// (at once if nobody holds it now). Returns a subscription (non-zero), or 0
// if no watcher could be started (the caller polls, L2).
std::uint64_t release_watch_add(const mapped_box& m, std::uint64_t off, int efd) noexcept;
// Ends subscription `id` (0: nothing): once this returns, `efd` is never
// written for it again.
void release_watch_remove(std::uint64_t id) noexcept;
// Whether subscription `id` still waits (false once its watcher has written).
bool release_watch_active(std::uint64_t id) noexcept;

#pragma GCC visibility pop

}  // namespace shmbox::detail
