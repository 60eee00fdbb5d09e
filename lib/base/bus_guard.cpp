// lib/base/bus_guard.cpp - the SIGBUS guard of mappings another process may
// shrink (the rules B1-B2 are in bus_guard.hpp).
#include "base/bus_guard.hpp"

#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <mutex>
#include <new>

namespace shmbox::detail {
namespace {

constexpr std::uintptr_t kFree = 0;
constexpr std::uintptr_t kBusy = 1;  // being filled in or cleared: the handler skips it
constexpr int kChunkEntries = 256;

struct entry {
  std::atomic<std::uintptr_t> base{kFree};
  std::atomic<std::size_t> bytes{0};
  std::atomic<std::uint32_t> writable{0};
  std::atomic<std::uint32_t> faults{0};
};
static_assert(std::atomic<std::uintptr_t>::is_always_lock_free && std::atomic<std::size_t>::is_always_lock_free &&
                  std::atomic<std::uint32_t>::is_always_lock_free,
              "the SIGBUS handler reads these: they must be lock-free");

struct chunk {
  entry entries[kChunkEntries];
  std::atomic<chunk*> next{nullptr};
};

chunk g_first;  // never freed, nor are the chunks linked after it
std::uintptr_t g_page = 4096;

std::mutex g_install;          // guards g_prev and the installation
struct sigaction g_prev {};    // what was installed before ours (B2)
// The threads inside the handler we chain to (B2), by thread id: a SIGBUS
// that comes back to us from there in the same thread is a cycle. Not a
// thread_local: the library may be dlopen'ed (the Python module), where an
// initial-exec variable may find no static TLS left and a dynamic one may
// allocate in the handler. A thread that finds no free place is treated as
// in a cycle (the default action).
constexpr int kChainers = 16;
std::atomic<pid_t> g_chaining[kChainers];

// Takes a place for this thread; -1: it holds one already (a cycle) or none is free.
int enter_chain(pid_t me) noexcept {
  for (const auto& c : g_chaining)
    if (c.load(std::memory_order_relaxed) == me) return -1;  // relaxed: only this thread writes its own id
  for (int i = 0; i < kChainers; ++i) {
    pid_t expected = 0;
    if (g_chaining[i].compare_exchange_strong(expected, me, std::memory_order_relaxed)) return i;
  }
  return -1;
}
std::atomic<bool> g_prev_set{false};

entry* entry_of(int ticket) noexcept {
  if (ticket < 0) return nullptr;
  chunk* c = &g_first;
  for (int n = ticket / kChunkEntries; n > 0 && c != nullptr; --n) c = c->next.load(std::memory_order_acquire);
  return c == nullptr ? nullptr : &c->entries[ticket % kChunkEntries];
}

// B1: the registered mapping that holds `addr`, its pages from addr's to its
// end replaced by zero pages. false: not in any registered mapping.
bool rescue(std::uintptr_t addr) noexcept {
  for (chunk* c = &g_first; c != nullptr; c = c->next.load(std::memory_order_acquire)) {
    for (entry& e : c->entries) {
      // acquire: pairs with the release store of `base` in bus_guard_add (bytes and writable are set before it).
      const std::uintptr_t base = e.base.load(std::memory_order_acquire);
      if (base <= kBusy) continue;
      const std::size_t bytes = e.bytes.load(std::memory_order_relaxed);  // relaxed: ordered by the acquire above
      const bool writable = e.writable.load(std::memory_order_relaxed);
      if (e.base.load(std::memory_order_acquire) != base) continue;  // cleared meanwhile (bus_guard_remove)
      if (addr < base || addr - base >= bytes) continue;
      const std::uintptr_t page = addr & ~(g_page - 1);
      const std::uintptr_t end = (base + bytes + g_page - 1) & ~(g_page - 1);
      void* got = ::mmap(reinterpret_cast<void*>(page), end - page, writable ? PROT_READ | PROT_WRITE : PROT_READ,
                         MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (got == MAP_FAILED) return false;
      e.faults.fetch_add(1, std::memory_order_relaxed);  // relaxed: a count, read by bus_guard_faults
      return true;
    }
  }
  return false;
}

void on_sigbus(int sig, siginfo_t* si, void* context) {
  const int saved_errno = errno;
  if (si != nullptr && si->si_code > 0 && rescue(reinterpret_cast<std::uintptr_t>(si->si_addr))) {
    errno = saved_errno;
    return;
  }
  // B2: not ours. A handler we chain to may chain back to us: installed
  // after us, saving us as its previous one, and then replaced by us again
  // (install() puts ours back on top when a mapping is registered): each
  // calls the other for ever (a stack overflow instead of the fault's
  // death; full-screen 'shmbox pool watch' did). This thread already in
  // the chain: the default action, below.
  const struct sigaction prev = g_prev;
  const bool chains = ((prev.sa_flags & SA_SIGINFO) != 0 && prev.sa_sigaction != nullptr) ||
                      ((prev.sa_flags & SA_SIGINFO) == 0 && prev.sa_handler != SIG_DFL && prev.sa_handler != SIG_IGN &&
                       prev.sa_handler != nullptr);
  const int place = chains ? enter_chain(static_cast<pid_t>(::syscall(SYS_gettid))) : -1;
  if (place >= 0) {
    if ((prev.sa_flags & SA_SIGINFO) != 0) prev.sa_sigaction(sig, si, context);
    else prev.sa_handler(sig);
    g_chaining[place].store(0, std::memory_order_relaxed);  // relaxed: read only by this thread as "mine"
  } else {
    // The default action, as if we had never been installed: a fault happens
    // again when the instruction runs again; a SIGBUS sent with kill() is
    // raised again (delivered when this handler returns).
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    ::sigemptyset(&dfl.sa_mask);
    ::sigaction(SIGBUS, &dfl, nullptr);
    if (si == nullptr || si->si_code <= 0) ::raise(SIGBUS);
  }
  errno = saved_errno;
}

// Installs on_sigbus unless it is the handler now; what it replaces is kept
// for B2.
bool install() noexcept {
  std::lock_guard<std::mutex> g(g_install);
  struct sigaction now {};
  if (::sigaction(SIGBUS, nullptr, &now) != 0) return false;
  if ((now.sa_flags & SA_SIGINFO) != 0 && now.sa_sigaction == on_sigbus) return true;
  if (!g_prev_set.load(std::memory_order_relaxed)) {  // relaxed: under g_install
    const long page = ::sysconf(_SC_PAGESIZE);
    if (page > 0) g_page = static_cast<std::uintptr_t>(page);
  }
  g_prev = now;
  g_prev_set.store(true, std::memory_order_relaxed);  // relaxed: under g_install
  struct sigaction ours {};
  ours.sa_sigaction = on_sigbus;
  ours.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART;
  ::sigemptyset(&ours.sa_mask);
  return ::sigaction(SIGBUS, &ours, nullptr) == 0;
}

}  // namespace

int bus_guard_add(void* base, std::size_t bytes, bool writable) noexcept {
  const auto b = reinterpret_cast<std::uintptr_t>(base);
  if (b <= kBusy || bytes == 0 || !install()) return -1;
  int ticket = 0;
  for (chunk* c = &g_first;; ticket += kChunkEntries) {
    for (int i = 0; i < kChunkEntries; ++i) {
      entry& e = c->entries[i];
      std::uintptr_t expected = kFree;
      // relaxed on success: the entry is published by the release store below.
      if (!e.base.compare_exchange_strong(expected, kBusy, std::memory_order_relaxed)) continue;
      e.bytes.store(bytes, std::memory_order_relaxed);
      e.writable.store(writable ? 1 : 0, std::memory_order_relaxed);
      e.faults.store(0, std::memory_order_relaxed);
      // release: publishes bytes and writable; pairs with the acquire in rescue.
      e.base.store(b, std::memory_order_release);
      return ticket + i;
    }
    chunk* next = c->next.load(std::memory_order_acquire);  // acquire: pairs with the release CAS below
    if (next == nullptr) {
      chunk* fresh = new (std::nothrow) chunk;
      if (fresh == nullptr) return -1;
      // release: the new chunk's (free) entries are seen by whoever follows the link.
      if (c->next.compare_exchange_strong(next, fresh, std::memory_order_release, std::memory_order_acquire)) {
        next = fresh;
      } else {
        delete fresh;  // another thread linked one first: use it
      }
    }
    c = next;
  }
}

void bus_guard_remove(int ticket) noexcept {
  if (entry* e = entry_of(ticket)) e->base.store(kFree, std::memory_order_release);  // release: before the munmap
}

std::uint32_t bus_guard_faults(int ticket) noexcept {
  const entry* e = entry_of(ticket);
  return e == nullptr ? 0 : e->faults.load(std::memory_order_relaxed);  // relaxed: a count
}

}  // namespace shmbox::detail
