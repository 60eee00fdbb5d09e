#include "process.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>

namespace shmbox::detail {
namespace {

// Reads /proc/<pid>/stat and returns the process key, or 0 when the process is
// gone or a zombie. Field 2 (comm) may hold spaces and ')', so parsing starts
// after the last ')'.
std::uint64_t read_key(std::uint32_t pid) noexcept {
  if (pid == 0 || pid > kPidMask) return 0;
  char path[48];
  std::snprintf(path, sizeof path, "/proc/%u/stat", pid);
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
  return (start << 22) | pid;
}

}  // namespace

std::uint64_t key_of_pid(std::uint32_t pid) noexcept { return read_key(pid); }

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
  static thread_local std::uint32_t cached_pid = 0;
  static thread_local std::uint64_t cached_key = 0;
  const auto pid = static_cast<std::uint32_t>(::getpid());
  if (pid != cached_pid || cached_key == 0) {
    cached_key = read_key(pid);
    cached_pid = pid;
  }
  return cached_key;
}

bool process_alive(std::uint64_t key) noexcept {
  if (key == 0) return false;
  return read_key(key_pid(key)) == key;
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
