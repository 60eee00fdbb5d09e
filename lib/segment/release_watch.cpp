// lib/segment/release_watch.cpp - watcher threads blocked in F_OFD_SETLKW
// (release_watch.hpp).
#include "segment/release_watch.hpp"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <utility>
#include <vector>

#include "base/process.hpp"
#include "segment/liveness.hpp"
#include "segment/segment.hpp"

namespace shmbox::detail {
namespace {

using watch_key = std::tuple<std::uint64_t, std::uint64_t, std::uint64_t>;  // dev, ino, byte

struct registry;
struct watcher {
  registry* reg = nullptr;
  watch_key key;
  std::uint64_t off = 0;
  role_lock desc;                                       // its own description (L6-registered)
  std::vector<std::pair<std::uint64_t, int>> subs;      // subscription id, eventfd
};

// The registry of this process (a fork child makes its own: `pid`). Never
// freed: watcher threads may outlive every handle, until exit.
struct registry {
  pid_t pid = ::getpid();
  std::mutex mu;
  std::map<watch_key, watcher*> by_key;
  std::map<std::uint64_t, watcher*> by_id;  // live subscriptions
  std::uint64_t next_id = 1;
};
std::mutex g_mu;
std::atomic<registry*> g_reg{nullptr};

// This process's registry, made on first use (a fork child makes its own;
// the parent's is left as it was: its threads do not exist in the child, its
// mutex may be held). acquire/release: the registry is built before its
// pointer is seen.
registry* this_process_registry() {
  registry* r = g_reg.load(std::memory_order_acquire);
  if (r != nullptr && r->pid == ::getpid()) return r;
  std::lock_guard<std::mutex> g(g_mu);
  r = g_reg.load(std::memory_order_acquire);
  if (r == nullptr || r->pid != ::getpid()) {
    r = new registry();
    g_reg.store(r, std::memory_order_release);
  }
  return r;
}

// The registry if this process made one (never makes one).
registry* existing_registry() noexcept {
  registry* r = g_reg.load(std::memory_order_acquire);
  return r != nullptr && r->pid == ::getpid() ? r : nullptr;
}

void* run(void* arg) {
  auto* w = static_cast<watcher*>(arg);
  registry* reg = w->reg;
  // This thread's first use of the allocator makes its arena (mmap, munmap,
  // mprotect of a new heap), and its first use would come after the wait, in
  // the failover's path, with `reg->mu` held while the heir waits for it: so
  // now, before the wait. (volatile: a malloc/free pair may otherwise be
  // left out by the compiler.)
  void* volatile warm = std::malloc(64);
  std::free(warm);
  // Blocks until nobody else holds the byte; then lets go at once.
  if (w->desc.wait_exclusive(w->off)) w->desc.unlock(w->off);
  {
    std::lock_guard<std::mutex> g(reg->mu);
    reg->by_key.erase(w->key);
    for (const auto& [id, efd] : w->subs) {
      reg->by_id.erase(id);
      write_eventfd(efd);  // under mu: release_watch_remove waits for this, then closes efd
    }
    w->subs.clear();
  }
  delete w;  // (its role_lock closes the description)
  return nullptr;
}

}  // namespace

std::uint64_t release_watch_add(const mapped_box& m, std::uint64_t off, int efd) noexcept {
  try {
    registry* reg = this_process_registry();
    std::lock_guard<std::mutex> g(reg->mu);
    const watch_key k{m.dev, m.ino, off};
    watcher* w = nullptr;
    if (const auto it = reg->by_key.find(k); it != reg->by_key.end()) {
      w = it->second;
    } else {
      auto fresh = std::make_unique<watcher>();
      fresh->reg = reg;
      fresh->key = k;
      fresh->off = off;
      if (m.read_only || !fresh->desc.open_segment(m)) return 0;  // an exclusive lock needs a read-write description
      // The thread takes no signal of the application's (they go to its
      // own threads), and needs little stack.
      pthread_attr_t attr;
      if (::pthread_attr_init(&attr) != 0) return 0;
      ::pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
      ::pthread_attr_setstacksize(&attr, 256 * 1024);
      sigset_t all, old;
      sigfillset(&all);
      ::pthread_sigmask(SIG_SETMASK, &all, &old);
      pthread_t t;
      w = fresh.get();
      reg->by_key.emplace(k, w);  // before the thread runs: it erases it under mu
      const int rc = ::pthread_create(&t, &attr, run, w);
      ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
      ::pthread_attr_destroy(&attr);
      if (rc != 0) {
        reg->by_key.erase(k);
        return 0;
      }
      fresh.release();  // the thread owns it now
    }
    const std::uint64_t id = reg->next_id++;
    w->subs.emplace_back(id, efd);
    reg->by_id.emplace(id, w);
    return id;
  } catch (...) {
    return 0;
  }
}

void release_watch_remove(std::uint64_t id) noexcept {
  registry* reg = id == 0 ? nullptr : existing_registry();
  if (reg == nullptr) return;  // (a fork child's copy of a parent's subscription: not ours)
  std::lock_guard<std::mutex> g(reg->mu);
  const auto it = reg->by_id.find(id);
  if (it == reg->by_id.end()) return;  // already written
  auto& subs = it->second->subs;
  for (auto s = subs.begin(); s != subs.end(); ++s)
    if (s->first == id) {
      subs.erase(s);
      break;
    }
  reg->by_id.erase(it);
}

bool release_watch_active(std::uint64_t id) noexcept {
  registry* reg = id == 0 ? nullptr : existing_registry();
  if (reg == nullptr) return false;
  std::lock_guard<std::mutex> g(reg->mu);
  return reg->by_id.count(id) != 0;
}

}  // namespace shmbox::detail
