// lib/base/shm_file.hpp - opening a name under /dev/shm, where any local user may
// have planted a FIFO, a symbolic link, a directory, a socket or a device.
//
// Every open of a path in /dev/shm goes through open_shm_file(): box and
// pool segments (segment.cpp, pool.cpp, collect.cpp, liveness.cpp,
// pool_supervisor.cpp), the notify doorbells (notify_hub.cpp), the bridge's
// status segments (bridge/bridge_status.cpp), and whatever is added later.
// It never blocks and never follows, and it does not even open what is not
// of the expected kind:
//   S1 lstat the path: a symbolic link (dangling or not), a directory, a
//      FIFO where a segment is expected, a socket or a device is refused
//      here, unopened (opening a device can have effects; a FIFO opened for
//      reading waits for a writer);
//   S2 open with O_NOFOLLOW (a link that appeared since S1: ELOOP) |
//      O_NONBLOCK (a FIFO that appeared since S1 returns instead of
//      waiting) | O_CLOEXEC;
//   S3 fstat the descriptor: what was opened is of the expected kind, or
//      it is refused (closed) all the same.
// A refusal says what the file is: shm_refusal() makes the sentence, one
// per kind ("... is a FIFO, not a shmbox box ...; remove it ...").
//
// Header-only on purpose: the library uses it, and so do the CLI and
// shmbox-bridge, which link the installed library; that library exports no
// internal symbol (tests/unit/exported_symbols.py), and these inline functions
// are hidden in it like every other detail.
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <string_view>
#include <vector>

namespace shmbox::detail {

inline constexpr std::string_view kShmDir = "/dev/shm";

// What a caller expects at the path: a segment (a regular file) or a doorbell (a FIFO).
enum class shm_expect { segment, doorbell };

// What a file that is not the expected kind is, for "/dev/shm/x is a FIFO, not ...".
inline const char* file_kind(mode_t m) noexcept {
  if (S_ISREG(m)) return "a regular file";
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISDIR(m)) return "a directory";
  if (S_ISSOCK(m)) return "a unix socket";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISLNK(m)) return "a symbolic link";
  return "a file of an unknown type";
}

// What open_shm_file() found.
struct shm_file {
  int fd = -1;         // the open descriptor (the caller closes it), or -1
  int error = 0;       // fd < 0 and refused == 0: the errno (ENOENT: nothing there; EACCES; ...)
  mode_t refused = 0;  // fd < 0: the type (S_IFMT bits) of the file at the path when it is not the kind expected
  struct stat st {};   // fd >= 0: fstat of fd; else what lstat saw, if it saw a file
  std::string path;    // "/dev/shm/<name>"
};

inline bool shm_kind_ok(mode_t m, shm_expect expect) noexcept {
  return expect == shm_expect::doorbell ? S_ISFIFO(m) : S_ISREG(m);
}

// Opens /dev/shm/<name> (`name` as given to shm_open: "/shmbox.x") with
// `flags` (O_RDONLY, O_RDWR or O_WRONLY, maybe O_CREAT: `create_mode`),
// always adding O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC; S1-S3 above. A FIFO
// opened for writing without a reader fails with error ENXIO (a doorbell
// nobody reads).
inline shm_file open_shm_file(std::string_view name, int flags, shm_expect expect, mode_t create_mode = 0) noexcept {
  shm_file f;
  try {
    f.path.reserve(kShmDir.size() + name.size());
    f.path.append(kShmDir).append(name);
  } catch (...) {
    f.error = ENOMEM;
    return f;
  }
  // S1 (and again after a failed S2): whether lstat saw a file of another kind (then refused).
  int lstat_errno = 0;
  const auto refuse_if_wrong = [&f, &lstat_errno, expect]() noexcept {
    lstat_errno = ::lstat(f.path.c_str(), &f.st) == 0 ? 0 : errno;
    if (lstat_errno != 0 || shm_kind_ok(f.st.st_mode, expect)) return false;
    f.refused = f.st.st_mode & S_IFMT;
    return true;
  };
  if (refuse_if_wrong()) return f;  // S1
  if (lstat_errno != 0 && (lstat_errno != ENOENT || (flags & O_CREAT) == 0)) {
    f.error = lstat_errno;
    return f;
  }
  f.fd = ::open(f.path.c_str(), flags | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, create_mode);  // S2
  if (f.fd < 0) {
    const int err = errno;
    if (!refuse_if_wrong()) f.error = err;  // ELOOP, EISDIR, ENXIO, EACCES (a device on a nodev mount): say what it is
    return f;
  }
  if (::fstat(f.fd, &f.st) != 0) {  // S3
    f.error = errno;
    ::close(f.fd);
    f.fd = -1;
  } else if (!shm_kind_ok(f.st.st_mode, expect)) {
    f.refused = f.st.st_mode & S_IFMT;
    ::close(f.fd);
    f.fd = -1;
  }
  return f;
}

// The sentence for a file open_shm_file() refused: what it is, whose, and
// what to do. `what`: what was expected, e.g. "a shmbox box". E.g.
// "/dev/shm/shmbox.x is a FIFO, not a shmbox box; it was not opened (it
// belongs to uid 1000): someone else's file? if it is garbage, remove it: rm /dev/shm/shmbox.x".
inline std::string shm_refusal(const shm_file& f, std::string_view what) {
  std::string s = f.path + " is " + file_kind(f.refused) + ", not " + std::string(what);
  s += S_ISLNK(f.refused) ? "; it was not followed" : "; it was not opened";
  if (f.st.st_uid != ::geteuid()) s += " (it belongs to uid " + std::to_string(f.st.st_uid) + ")";
  s += ": someone else's file? if it is garbage, remove it: ";
  s += (S_ISDIR(f.refused) ? "rmdir " : "rm ") + f.path;
  return s;
}

// The names in /dev/shm that start with `prefix` and are longer, without
// it, in directory order; false (errno set) if /dev/shm cannot be read.
// Box::list, Pool::list and the bridge's status scan.
inline bool shm_names(std::string_view prefix, std::vector<std::string>& out) {
  DIR* d = ::opendir(std::string(kShmDir).c_str());
  if (d == nullptr) return false;
  while (const dirent* e = ::readdir(d)) {
    const std::string_view n = e->d_name;
    if (n.size() > prefix.size() && n.substr(0, prefix.size()) == prefix) out.emplace_back(n.substr(prefix.size()));
  }
  ::closedir(d);
  return true;
}

}  // namespace shmbox::detail
