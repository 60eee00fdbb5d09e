#include "base/process.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>

namespace shmbox::detail {
namespace {

// The inode of the pid namespace of /proc/<who>/ns/pid ("self" or a pid), 0 if unknown.
std::uint64_t pid_ns_of(const char* who) noexcept {
  char path[48];
  std::snprintf(path, sizeof path, "/proc/%s/ns/pid", who);
  struct stat st {};
  if (::stat(path, &st) != 0) return 0;
  return static_cast<std::uint64_t>(st.st_ino);
}

// The start time (clock ticks after boot) of /proc/<who>/stat, or 0 when the
// process is gone or a zombie. Field 2 (comm) may hold spaces and ')', so
// parsing starts after the last ')'.
std::uint64_t start_ticks(const char* who) noexcept {
  char path[48];
  std::snprintf(path, sizeof path, "/proc/%s/stat", who);
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char buf[1024];
  ssize_t n;
  do {
    n = ::read(fd, buf, sizeof buf - 1);
  } while (n < 0 && errno == EINTR);
  ::close(fd);
  if (n <= 0) return 0;
  buf[n] = '\0';
  const char* p = std::strrchr(buf, ')');
  if (p == nullptr || p[1] != ' ') return 0;
  p += 2;
  const char state = *p;
  if (state == 'Z' || state == 'X' || state == 'x') return 0;
  // Fields after ')' start at field 3 (state); start time is field 22.
  int field = 3;
  while (*p != '\0' && field < 22) {
    if (*p == ' ') ++field;
    ++p;
  }
  if (field != 22) return 0;
  std::uint64_t start = 0;
  while (*p >= '0' && *p <= '9') start = start * 10 + static_cast<std::uint64_t>(*p++ - '0');
  return start;
}

// 42 random bits, never 0 (getrandom; if it fails, the start time, the
// clock and an address mixed, which is still unique in practice).
std::uint64_t incarnation() noexcept {
  std::uint64_t z = 0;
  if (::getrandom(&z, sizeof z, GRND_NONBLOCK) != static_cast<ssize_t>(sizeof z)) {
    timespec ts{};
    ::clock_gettime(CLOCK_MONOTONIC, &ts);
    z = start_ticks("self") * 0x9E37'79B9'7F4A'7C15ull ^ static_cast<std::uint64_t>(ts.tv_nsec) ^
        (static_cast<std::uint64_t>(ts.tv_sec) << 30) ^ reinterpret_cast<std::uintptr_t>(&z);
    z = (z ^ (z >> 30)) * 0xBF58'476D'1CE4'E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D0'49BB'1331'11EBull;
    z ^= z >> 31;
  }
  z &= (1ull << 42) - 1;
  return z == 0 ? 1 : z;
}

}  // namespace

std::uint64_t self_pid_ns() noexcept {
  // A process never changes its pid namespace, but a fork child may be in a
  // new one (unshare(CLONE_NEWPID) then fork): cached per pid.
  static thread_local std::uint32_t cached_pid = 0;
  static thread_local std::uint64_t cached_ns = 0;
  const auto pid = static_cast<std::uint32_t>(::getpid());
  if (pid != cached_pid) {
    cached_ns = pid_ns_of("self");
    cached_pid = pid;
  }
  return cached_ns;
}

std::uint64_t process_start_ticks(std::uint32_t pid) noexcept {
  char who[16];
  std::snprintf(who, sizeof who, "%u", pid);
  return start_ticks(who);
}

bool pid_running(std::uint32_t pid) noexcept {
  return pid != 0 && pid <= kPidMask && process_start_ticks(pid) != 0;
}

bool process_maps_file(std::uint32_t pid, std::uint64_t dev, std::uint64_t ino) noexcept {
  char path[48];
  std::snprintf(path, sizeof path, "/proc/%u/maps", pid);
  FILE* f = std::fopen(path, "re");
  if (f == nullptr) return false;
  char line[512];
  bool found = false;
  const unsigned want_major = static_cast<unsigned>(::major(dev)), want_minor = static_cast<unsigned>(::minor(dev));
  while (!found && std::fgets(line, sizeof line, f) != nullptr) {
    // address perms offset major:minor inode path
    unsigned maj = 0, min = 0;
    unsigned long long inode = 0;
    if (std::sscanf(line, "%*s %*s %*s %x:%x %llu", &maj, &min, &inode) == 3)
      found = inode == ino && maj == want_major && min == want_minor;
  }
  std::fclose(f);
  return found;
}

int eventfd_of(std::uint32_t pid, int num, std::uint64_t dev, std::uint64_t ino, int seg_num) noexcept {
  if (pid == 0 || pid > kPidMask || num < 0) return -1;
  const long pidfd = ::syscall(SYS_pidfd_open, static_cast<pid_t>(pid), 0);
  if (pidfd < 0) return -1;
  int out = -1;
  // The process is in the box: it has the segment open (seg_num, when the
  // owner published it), or mapped. After pidfd_open: the pidfd pins the
  // process it names; /proc/<pid> is that process while it lives (a pid is
  // not reused before it is reaped).
  bool in_box = false;
  if (seg_num >= 0) {
    const long sfd = ::syscall(SYS_pidfd_getfd, static_cast<int>(pidfd), seg_num, 0);
    struct stat st {};
    in_box = sfd >= 0 && ::fstat(static_cast<int>(sfd), &st) == 0 && S_ISREG(st.st_mode) &&
             static_cast<std::uint64_t>(st.st_dev) == dev && static_cast<std::uint64_t>(st.st_ino) == ino;
    if (sfd >= 0) ::close(static_cast<int>(sfd));
  }
  if (in_box || process_maps_file(pid, dev, ino)) {
    const long fd = ::syscall(SYS_pidfd_getfd, static_cast<int>(pidfd), num, 0);
    if (fd >= 0 && is_eventfd(static_cast<int>(fd))) out = static_cast<int>(fd);
    else if (fd >= 0) ::close(static_cast<int>(fd));
  }
  ::close(static_cast<int>(pidfd));
  return out;
}

namespace {

// Whether the NUL-separated environment block of /proc/<pid>/environ holds
// every entry (at most 4 MiB are read: an environment is far smaller).
bool environ_holds(std::uint32_t pid, std::initializer_list<std::string_view> entries) noexcept {
  char path[48];
  std::snprintf(path, sizeof path, "/proc/%u/environ", pid);
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return false;
  std::string block;
  try {
    char buf[8192];
    for (;;) {
      const ssize_t n = ::read(fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0 || block.size() > (4u << 20)) break;
      block.append(buf, static_cast<std::size_t>(n));
    }
  } catch (...) {
    ::close(fd);
    return false;
  }
  ::close(fd);
  std::size_t found = 0;
  for (const std::string_view want : entries) {
    bool here = false;
    for (std::size_t at = 0; at < block.size() && !here;) {
      const std::size_t end = std::min(block.find('\0', at), block.size());
      here = std::string_view(block).substr(at, end - at) == want;
      at = end + 1;
    }
    found += here ? 1 : 0;
  }
  return found == entries.size() && entries.size() > 0;
}

}  // namespace

int pidfd_with_environ(std::uint32_t pid, std::initializer_list<std::string_view> entries) noexcept {
  if (pid <= 1 || pid > kPidMask || pid == static_cast<std::uint32_t>(::getpid())) return -1;
  const long pidfd = ::syscall(SYS_pidfd_open, static_cast<pid_t>(pid), 0);
  if (pidfd < 0) return -1;
  // The pidfd first: while it says alive, /proc/<pid> is the process it names.
  if (environ_holds(pid, entries) && pidfd_signal(static_cast<int>(pidfd), 0)) return static_cast<int>(pidfd);
  ::close(static_cast<int>(pidfd));
  return -1;
}

bool pidfd_signal(int pidfd, int sig) noexcept {
  return pidfd >= 0 && ::syscall(SYS_pidfd_send_signal, pidfd, sig, nullptr, 0) == 0;
}

std::vector<std::pair<std::uint32_t, int>> processes_with_environ(std::string_view entry) {
  std::vector<std::pair<std::uint32_t, int>> out;
  DIR* d = ::opendir("/proc");
  if (d == nullptr) return out;
  while (const dirent* e = ::readdir(d)) {
    char* end = nullptr;
    const unsigned long pid = std::strtoul(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || pid > kPidMask) continue;
    if (const int fd = pidfd_with_environ(static_cast<std::uint32_t>(pid), {entry}); fd >= 0) {
      try {
        out.emplace_back(static_cast<std::uint32_t>(pid), fd);
      } catch (...) {
        ::close(fd);
      }
    }
  }
  ::closedir(d);
  return out;
}

bool is_eventfd(int fd) noexcept {
  if (fd < 0) return false;
  char path[48], target[64];
  std::snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  const ssize_t n = ::readlink(path, target, sizeof target - 1);
  if (n <= 0) return false;
  target[n] = '\0';
  return std::strcmp(target, "anon_inode:[eventfd]") == 0;
}

std::uint64_t self_key() noexcept {
  // One key for the whole process (every thread), drawn once; a fork child
  // (another pid) draws its own. Two threads drawing at once: one CAS wins
  // and both use its key.
  static std::atomic<std::uint64_t> cached{0};
  const auto pid = static_cast<std::uint32_t>(::getpid());
  if (pid == 0 || pid > kPidMask) return 0;
  std::uint64_t k = cached.load(std::memory_order_acquire);  // acquire: pairs with the CAS below
  while (k == 0 || key_pid(k) != pid) {
    const std::uint64_t mine = (incarnation() << 22) | pid;
    // acq_rel: publishes our key; on failure k is the key another thread installed
    if (cached.compare_exchange_weak(k, mine, std::memory_order_acq_rel, std::memory_order_acquire)) return mine;
  }
  return k;
}


// H2: +1 in every fork child. Installed when the library is loaded, so that
// no handle can be made before it.
std::atomic<std::uint32_t> g_fork_generation{0};

namespace {
void next_fork_generation() noexcept {
  // relaxed: the one thread of the new child reads it later (process.hpp H2)
  g_fork_generation.store(g_fork_generation.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}
[[maybe_unused]] const bool g_fork_handler_installed = ::pthread_atfork(nullptr, nullptr, next_fork_generation) == 0;
}  // namespace

std::string made_here::inherited_sentence(std::string_view what, std::string_view box, std::string_view instead) const {
  std::string s;
  if (!box.empty()) s.append(box).append(": ");
  s.append("this ").append(what).append(" handle was made by process ").append(std::to_string(pid));
  s.append("; in a fork child it does not act for its parent (it only frees its own copy): ");
  s.append(instead);
  return s;
}

std::uint64_t mono_ns() noexcept {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<std::uint64_t>(ts.tv_nsec);
}

std::uint64_t unix_ns() noexcept {
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<std::uint64_t>(ts.tv_nsec);
}

}  // namespace shmbox::detail
