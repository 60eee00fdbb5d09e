// lib/segment/liveness.cpp - role locks, probes and death watches (the rules are in liveness.hpp).
#include "segment/liveness.hpp"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <mutex>
#include <utility>
#include <vector>

#include "base/process.hpp"
#include "segment/layout.hpp"
#include "segment/segment.hpp"
#include "base/shm_file.hpp"

namespace shmbox::detail {
namespace {

struct flock one_byte(short type, std::uint64_t off) noexcept {
  struct flock fl {};
  fl.l_type = type;
  fl.l_whence = SEEK_SET;
  fl.l_start = static_cast<off_t>(off);
  fl.l_len = 1;
  fl.l_pid = 0;  // must be 0 for OFD locks
  return fl;
}

// A release watcher's wait (release_watch.hpp): in the kernel, for as long
// as the byte is held, in a thread of its own that no call waits for (L7).
bool block_for_byte(int fd, std::uint64_t off, short type) noexcept {
  if (fd < 0) return false;
  struct flock fl = one_byte(type, off);
  int rc;
  do {
    rc = ::fcntl(fd, F_OFD_SETLKW, &fl);
  } while (rc != 0 && errno == EINTR);
  return rc == 0;
}

// L6: the descriptors of every role_lock of this process that has one of
// its own, and the list of mappings (lock_description), so that a fork child
// can let go of them. The mutex is held across fork (prepare/parent/child),
// so the lists and the descriptors agree in the child. It also guards every
// mapping's held bytes (L1).
std::mutex registry_mutex;
std::vector<int>* registry = nullptr;
mapped_box* mappings = nullptr;  // head of the list through track_prev / track_next

// L6 for one mapping, in the fork child: a lock description of its own at
// the same number; the held bytes void.
void own_description_in_child(mapped_box& m) noexcept {
  ++m.held_gen;
  m.held.clear();
  m.held_count.store(0, std::memory_order_relaxed);  // relaxed: one thread in the child
  if (m.fd < 0) return;
  char path[48];
  std::snprintf(path, sizeof path, "/proc/self/fd/%d", m.fd);
  const int fresh = ::open(path, (m.read_only ? O_RDONLY : O_RDWR) | O_CLOEXEC | O_NONBLOCK);
  if (fresh < 0 || ::dup3(fresh, m.fd, O_CLOEXEC) < 0) {
    ::close(m.fd);  // no /proc: no probes in the child (lock_held_fd(-1) says "held")
    m.fd = -1;
  }
  if (fresh >= 0) ::close(fresh);
}

void before_fork() { registry_mutex.lock(); }
void after_fork_parent() { registry_mutex.unlock(); }
void after_fork_child() {
  if (registry != nullptr && !registry->empty()) {
    const int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    for (const int fd : *registry) {
      // The child's copy of the description goes; the number stays valid
      // (pointing at /dev/null) for the handle that still holds it.
      if (null_fd >= 0) ::dup3(null_fd, fd, O_CLOEXEC);
      else ::close(fd);
    }
    if (null_fd >= 0) ::close(null_fd);
    registry->clear();
  }
  for (mapped_box* m = mappings; m != nullptr; m = m->track_next) own_description_in_child(*m);
  registry_mutex.unlock();
}

void install_fork_handlers() {
  static const bool installed = [] {
    ::pthread_atfork(before_fork, after_fork_parent, after_fork_child);
    return true;
  }();
  (void)installed;
}

void register_fd_locked(int fd) {
  install_fork_handlers();
  if (registry == nullptr) registry = new std::vector<int>();  // never freed: used until exit
  registry->push_back(fd);
}

std::pair<std::uint64_t, std::uint32_t>* held_entry(const mapped_box& m, std::uint64_t off) noexcept {
  for (auto& e : m.held)
    if (e.first == off) return &e;
  return nullptr;
}

}  // namespace

// A lock of `type` on byte `off` of `fd`'s description, waiting for a
// conflicting holder until `give_up_ns` (0: kRoleLockWaitNs from now) by
// polling, never in the kernel; a signal ends the wait (L7). Signals are
// blocked while we look, and the pauses are ppoll()s that unblock them
// atomically: a signal that comes at any moment of the wait, during a look
// included, is delivered in the next pause and ends it (EINTR), the
// pselect() pattern; a plain sleep would miss one that came during the look.
bool wait_lock_byte(int fd, std::uint64_t off, short type, std::uint64_t give_up_ns) noexcept {
  if (fd < 0) return false;
  struct flock fl = one_byte(type, off);
  if (::fcntl(fd, F_OFD_SETLK, &fl) == 0) return true;  // the usual case: nothing to wait for
  if (errno != EAGAIN && errno != EACCES && errno != EINTR) return false;
  if (give_up_ns == 0) give_up_ns = mono_ns() + kRoleLockWaitNs;
  sigset_t all, before;
  ::sigfillset(&all);
  ::pthread_sigmask(SIG_BLOCK, &all, &before);
  long pause_ns = 50'000;
  bool locked = false;
  int err = EAGAIN;
  for (;;) {
    if (::fcntl(fd, F_OFD_SETLK, &fl) == 0) {
      locked = true;
      break;
    }
    if (errno != EAGAIN && errno != EACCES && errno != EINTR) {
      err = errno;
      break;
    }
    if (mono_ns() >= give_up_ns) break;  // EAGAIN: held past the deadline
    const struct timespec pause {0, pause_ns};
    if (::ppoll(nullptr, 0, &pause, &before) < 0 && errno == EINTR) {
      err = EINTR;  // a signal's handler ran: its program may want to stop
      break;
    }
    pause_ns = std::min(pause_ns * 2, 1'000'000L);
  }
  ::pthread_sigmask(SIG_SETMASK, &before, nullptr);
  if (!locked) errno = err;
  return locked;
}

std::uint64_t owner_byte(const mapped_box& m) noexcept { return m.geo.owner_offset + offsetof(owner_record, key); }
std::uint64_t request_byte(const mapped_box& m) noexcept {
  return m.geo.owner_offset + offsetof(owner_record, request_pid);
}
std::uint64_t actor_byte(const mapped_box& m, std::uint32_t actor_index) noexcept {
  return m.geo.actors_offset + std::uint64_t{actor_index % kOwnerActors} * m.geo.actor_stride;
}
std::uint64_t heir_byte(const mapped_box& m, std::uint32_t entry) noexcept {
  return m.geo.heirs_offset + std::uint64_t{entry} * sizeof(heir_entry);
}
std::uint64_t producer_byte(const mapped_box& m, std::uint32_t entry) noexcept {
  return m.geo.producers_offset + std::uint64_t{entry} * m.geo.producer_stride;
}

bool lock_held_fd(int fd, std::uint64_t off) noexcept {
  if (fd < 0) return true;
  struct flock fl = one_byte(F_WRLCK, off);
  if (::fcntl(fd, F_OFD_GETLK, &fl) != 0) return true;  // cannot tell: never call a process dead
  return fl.l_type != F_UNLCK;
}

bool lock_held(const mapped_box& m, std::uint64_t off) noexcept {
  // acquire: pairs with the release increment in role_lock::hold (L2's ordering).
  if (m.held_count.load(std::memory_order_acquire) != 0) {
    std::lock_guard<std::mutex> g(registry_mutex);
    if (const auto* e = held_entry(m, off); e != nullptr && e->second != 0) return true;  // ours: we live
  }
  return lock_held_fd(m.fd, off);
}

void lock_description(mapped_box& m) noexcept {
  if (!m.snapshot && m.base != nullptr && m.fd >= 0) {
    // A snapshot maps nothing: its one description serves.
    if (const int fd = reopen_segment(m); fd >= 0) {
      ::close(m.fd);  // the mapping keeps the mapped description, and its attach lock (L3)
      m.fd = fd;
    }
  }
  std::lock_guard<std::mutex> g(registry_mutex);
  install_fork_handlers();
  m.track_prev = nullptr;
  m.track_next = mappings;
  if (mappings != nullptr) mappings->track_prev = &m;
  mappings = &m;
  m.tracked = true;
}

void untrack_mapping(mapped_box& m) noexcept {
  if (!m.tracked) return;
  std::lock_guard<std::mutex> g(registry_mutex);
  if (m.track_prev != nullptr) m.track_prev->track_next = m.track_next;
  else mappings = m.track_next;
  if (m.track_next != nullptr) m.track_next->track_prev = m.track_prev;
  m.tracked = false;
}

bool try_lock_byte(int fd, std::uint64_t off, bool exclusive) noexcept {
  struct flock fl = one_byte(exclusive ? F_WRLCK : F_RDLCK, off);
  return ::fcntl(fd, F_OFD_SETLK, &fl) == 0;
}

void unlock_byte(int fd, std::uint64_t off) noexcept {
  if (fd < 0) return;
  struct flock fl = one_byte(F_UNLCK, off);
  ::fcntl(fd, F_OFD_SETLK, &fl);
}

int reopen_segment(const mapped_box& m) noexcept {
  const int flags = (m.read_only ? O_RDONLY : O_RDWR) | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK;
  char path[48];
  std::snprintf(path, sizeof path, "/proc/self/fd/%d", m.fd);
  // Opening the magic link opens the same file again (a new open file
  // description), even when its name was unlinked meanwhile.
  int fd = ::open(path, flags & ~O_NOFOLLOW);
  if (fd >= 0) return fd;
  // No /proc: by name (shm_file.hpp S1-S3), checked to be the same file.
  const shm_file f = open_shm_file(shm_path(m.name), flags & (O_RDONLY | O_WRONLY | O_RDWR), shm_expect::segment);
  fd = f.fd;
  if (fd < 0) {
    errno = f.refused != 0 ? ENOENT : f.error;  // something else is at the name now: not our file
    return -1;
  }
  if (static_cast<std::uint64_t>(f.st.st_ino) != m.ino || static_cast<std::uint64_t>(f.st.st_dev) != m.dev) {
    ::close(fd);
    errno = ENOENT;
    return -1;
  }
  return fd;
}

role_lock::role_lock(role_lock&& o) noexcept
    : fd_(std::exchange(o.fd_, -1)), m_(std::move(o.m_)), gen_(o.gen_), pid_(o.pid_), bytes_(std::move(o.bytes_)) {
  o.bytes_.clear();
}
role_lock& role_lock::operator=(role_lock&& o) noexcept {
  if (this != &o) {
    reset();
    fd_ = std::exchange(o.fd_, -1);
    m_ = std::move(o.m_);
    gen_ = o.gen_;
    pid_ = o.pid_;
    bytes_ = std::move(o.bytes_);
    o.bytes_.clear();
  }
  return *this;
}

bool role_lock::lock(const mapped_box& m, std::uint64_t off, std::uint64_t give_up_ns) noexcept {
  if (give_up_ns == 0) give_up_ns = mono_ns() + kRoleLockWaitNs;  // L7
  if (fd_ < 0) {
    if (m_ != nullptr && m_.get() != &m) reset();  // another box: let go of the first
    if (m_ == nullptr) m_ = m.weak_from_this().lock();
    if (m_ != nullptr) return hold(off, give_up_ns);
  }
  // Not held by a shared_ptr: a description of our own.
  return open_with([&m] { return reopen_segment(m); }) && lock_open(off, give_up_ns);
}

// L1's one description: count the byte, and lock it when we are its first
// holder in this process. The kernel lock is taken under the mutex without
// waiting; when another description holds the byte exclusively for a moment
// (a watcher, L5), we wait for it outside the mutex and count it after.
bool role_lock::hold(std::uint64_t off, std::uint64_t give_up_ns) noexcept {
  const mapped_box& m = *m_;
  try {
    bytes_.reserve(bytes_.size() + 1);
  } catch (...) {
    errno = ENOMEM;
    return false;
  }
  for (;;) {
    {
      std::lock_guard<std::mutex> g(registry_mutex);
      if (bytes_.empty() || gen_ != m.held_gen) {  // L6: what was taken in our parent is void here
        bytes_.clear();
        gen_ = m.held_gen;
        pid_ = static_cast<std::uint32_t>(::getpid());
      }
      if (std::find(bytes_.begin(), bytes_.end(), off) != bytes_.end()) return true;  // ours already
      if (m.fd < 0) {
        errno = EBADF;
        return false;
      }
      auto* e = held_entry(m, off);
      const bool counted = e != nullptr && e->second != 0;
      if (counted || try_lock_byte(m.fd, off, false)) {
        if (e == nullptr) {
          try {
            m.held.emplace_back(off, 0);
          } catch (...) {
            unlock_byte(m.fd, off);
            errno = ENOMEM;
            return false;
          }
          e = &m.held.back();
        }
        // release: pairs with lock_held's acquire (L2's ordering).
        if (e->second++ == 0) m.held_count.fetch_add(1, std::memory_order_release);
        bytes_.push_back(off);
        return true;
      }
      if (errno != EAGAIN && errno != EACCES && errno != EINTR) return false;
    }
    // Held exclusively by another description: wait for it (it holds the
    // byte for a moment, or, L7, until our deadline), then count it above
    // (the lock is ours already, and taking it again there does not wait).
    if (!wait_lock_byte(m.fd, off, F_RDLCK, give_up_ns)) return false;
  }
}

void role_lock::let_go(std::uint64_t off) noexcept {
  std::lock_guard<std::mutex> g(registry_mutex);
  const auto it = std::find(bytes_.begin(), bytes_.end(), off);
  if (it == bytes_.end()) return;
  bytes_.erase(it);
  const mapped_box& m = *m_;
  // L6: our parent's; nothing to unlock here (H4: nor in a raw clone() child,
  // whose description is its parent's).
  if (gen_ != m.held_gen || pid_ != static_cast<std::uint32_t>(::getpid())) return;
  auto* e = held_entry(m, off);
  if (e == nullptr || e->second == 0) return;
  if (--e->second == 0) {
    unlock_byte(m.fd, off);  // the last holder in this process
    m.held_count.fetch_sub(1, std::memory_order_relaxed);  // relaxed: a probe that still sees it asks under the mutex
  }
}

bool role_lock::open_file(int segment_fd) noexcept {
  return open_with([segment_fd] {
    char path[48];
    std::snprintf(path, sizeof path, "/proc/self/fd/%d", segment_fd);
    return ::open(path, O_RDWR | O_CLOEXEC | O_NONBLOCK);
  });
}

template <class Open>
bool role_lock::open_with(Open open_description) noexcept {
  if (fd_ >= 0) return true;
  std::lock_guard<std::mutex> g(registry_mutex);
  fd_ = open_description();
  if (fd_ < 0) return false;
  try {
    register_fd_locked(fd_);
  } catch (...) {
    ::close(fd_);
    fd_ = -1;
    return false;
  }
  return true;
}

// L3: gc may hold the byte exclusively for a moment: wait (L7: not past the deadline).
bool role_lock::lock_open(std::uint64_t off, std::uint64_t give_up_ns) noexcept {
  return wait_lock_byte(fd_, off, F_RDLCK, give_up_ns);
}

bool role_lock::open_segment(const mapped_box& m) noexcept {
  return open_with([&m] { return reopen_segment(m); });
}

bool role_lock::wait_exclusive(std::uint64_t off) noexcept { return block_for_byte(fd_, off, F_WRLCK); }

void role_lock::unlock(std::uint64_t off) noexcept {
  if (m_ != nullptr) let_go(off);
  else unlock_byte(fd_, off);
}

void role_lock::reset() noexcept {
  if (m_ != nullptr) {
    while (!bytes_.empty()) let_go(bytes_.back());
    m_.reset();
  }
  if (fd_ < 0) return;
  std::lock_guard<std::mutex> g(registry_mutex);
  if (registry != nullptr) registry->erase(std::remove(registry->begin(), registry->end(), fd_), registry->end());
  ::close(fd_);  // drops every lock of the description
  fd_ = -1;
}

}  // namespace shmbox::detail
