// lib/segment/liveness.cpp - role locks, probes and death watches (the rules are in liveness.hpp).
#include "segment/liveness.hpp"

#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <mutex>
#include <vector>

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

// A lock of `type` on byte `off` of `fd`'s description, waiting (F_OFD_SETLKW)
// for as long as another description holds a conflicting one.
bool wait_lock_byte(int fd, std::uint64_t off, short type) noexcept {
  if (fd < 0) return false;
  struct flock fl = one_byte(type, off);
  int rc;
  do {
    rc = ::fcntl(fd, F_OFD_SETLKW, &fl);
  } while (rc != 0 && errno == EINTR);
  return rc == 0;
}

// L6: the descriptors of every role_lock of this process, so that a fork
// child can let go of them. The mutex is held across fork (prepare/parent/
// child), so the list and the descriptors agree in the child.
std::mutex registry_mutex;
std::vector<int>* registry = nullptr;

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
  registry_mutex.unlock();
}

void register_fd_locked(int fd) {
  static const bool installed = [] {
    ::pthread_atfork(before_fork, after_fork_parent, after_fork_child);
    return true;
  }();
  (void)installed;
  if (registry == nullptr) registry = new std::vector<int>();  // never freed: used until exit
  registry->push_back(fd);
}

}  // namespace

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

bool lock_held(const mapped_box& m, std::uint64_t off) noexcept { return lock_held_fd(m.fd, off); }

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

role_lock::role_lock(role_lock&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
role_lock& role_lock::operator=(role_lock&& o) noexcept {
  if (this != &o) {
    reset();
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

bool role_lock::lock(const mapped_box& m, std::uint64_t off) noexcept {
  return open_with([&m] { return reopen_segment(m); }) && lock_open(off);
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

// L3: gc may hold the byte exclusively for a moment: wait.
bool role_lock::lock_open(std::uint64_t off) noexcept { return wait_lock_byte(fd_, off, F_RDLCK); }

bool role_lock::open_segment(const mapped_box& m) noexcept {
  return open_with([&m] { return reopen_segment(m); });
}

bool role_lock::wait_exclusive(std::uint64_t off) noexcept { return wait_lock_byte(fd_, off, F_WRLCK); }

void role_lock::unlock(std::uint64_t off) noexcept { unlock_byte(fd_, off); }

void role_lock::reset() noexcept {
  if (fd_ < 0) return;
  std::lock_guard<std::mutex> g(registry_mutex);
  if (registry != nullptr) registry->erase(std::remove(registry->begin(), registry->end(), fd_), registry->end());
  ::close(fd_);  // drops every lock of the description
  fd_ = -1;
}

}  // namespace shmbox::detail
