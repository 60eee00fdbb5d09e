// lib/base/bus_guard.hpp - THE TRUST RULE T5 (shm_file.hpp): a mapping that
// another process may shrink under us.
//
// Anyone who may write a segment may also ftruncate it; a process that has
// it mapped then gets SIGBUS on the next access beyond the new end, which
// kills it. So every mapping of a box or pool segment is registered here
// (once, when it is mapped: nothing is done on any access), and a SIGBUS
// handler, installed the first time and again whenever something replaced
// it, looks the faulting address up:
//  B1 In a registered mapping: the pages from the faulting one to the end
//     of the mapping are replaced (mmap MAP_FIXED, private and anonymous)
//     by zero pages with the mapping's protection, the mapping's fault
//     count goes up, and the faulting instruction runs again on zeros.
//     A segment of zeros is one more scribbled segment: every reader
//     bounds-checks what it reads (T7), so the box costs its own messages
//     and nothing else; the handles and the inspect calls report it
//     (bus_guard_faults: errc::truncated).
//  B2 Anywhere else: the fault is not ours. It goes to whatever handler was
//     installed before ours (ASan's, a test framework's, the program's), or,
//     if there was none, the default action is restored and the fault
//     happens again: the process dies of SIGBUS exactly as without us.
//     A handler we chain to that chains back to us (installed after us,
//     then ours installed again on top of it) is a cycle: the second time
//     round in one thread, the default action, as if there were none.
// The table is lock-free for the handler (chunks of entries, never freed,
// linked once); adding and removing take no lock either. An entry's base is
// published last (release) and cleared first, and the handler reads it
// before and after its length: a mapping being registered or removed is
// either seen whole or not at all.
//
// A process that installs its own SIGBUS handler after ours, without
// chaining, turns the guard off until the next mapping is registered (which
// installs ours again, chaining to it).
#pragma once

#include <cstddef>
#include <cstdint>

namespace shmbox::detail {

// Registers the shared mapping [base, base + bytes) (base page-aligned, as
// mmap returned it; `writable`: mapped PROT_READ | PROT_WRITE). Returns its
// ticket (>= 0), or -1 when the handler could not be installed or no memory
// was left for the table (then a truncation kills the process, as it would
// without the guard).
int bus_guard_add(void* base, std::size_t bytes, bool writable) noexcept;

// Unregisters it, before munmap. A ticket of -1 is ignored.
void bus_guard_remove(int ticket) noexcept;

// How many SIGBUS faults were caught in the mapping since it was registered
// (0: none): non-zero means its file shrank under this process, and what was
// beyond the new end reads as zeros from then on. -1: 0.
std::uint32_t bus_guard_faults(int ticket) noexcept;

}  // namespace shmbox::detail
