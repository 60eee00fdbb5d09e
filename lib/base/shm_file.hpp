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
#include <cstdio>
#include <initializer_list>
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

// ===========================================================================
// THE TRUST RULE (docs/guarantees.md, "Trust"): what shmbox may do with an
// object it opens by name, by who owns it and who may write it. Anything at
// a name in /dev/shm may have been planted, written, truncated or locked by
// another local user; these are the checks every surface makes, here once.
//  T1 Kind: only a regular file where a segment is expected, only a FIFO
//     where a doorbell is (S1-S3 above): nothing else is opened.
//  T2 Writers: a file may be written by its owner uid, by its group when
//     g+w, by everyone when o+w, and by root (shm_writers below).
//  T3 Acting on contents: an object whose contents shmbox ACTS ON beyond
//     posting into it (a bridge status it adopts or shows, a doorbell it
//     reads, a segment whose names it follows) is used only when its owner
//     is an expected uid (the service's, the box's owner's, or this
//     process's: shm_owned_by) and nobody else may write it
//     (shm_private_to_owner). Otherwise it is refused, counted and said.
//  T4 Following a name: a name (dead letters, a pool's member, a reply box)
//     read from object A is followed to object B only when everyone who may
//     write A may write B (shm_writers_within): following it can give its
//     writer nothing that posting into B directly would not. And B has one
//     name (st_nlink 1): a hard link another user made at a name nobody made
//     yet, to a box of ours anyone may write, is not ours to follow
//     (access::attach_named).
//  T5 Reading what may shrink: every mapping of a segment is registered with
//     the SIGBUS guard (base/bus_guard.hpp): a truncation under a reader
//     turns into zero pages and an error for that one object, never a
//     death; small objects are read through private copies (pread).
//  T6 Waiting on another process's lock byte: never in the kernel without a
//     deadline (segment/liveness.hpp L7): polled, with a deadline, and a
//     signal ends the wait.
//  T7 Lengths, offsets, counts and names read from shared memory are
//     bounded before use (segment.cpp open_segment, pool.cpp, verify). A
//     descriptor number another process publishes there (an owner's
//     notify eventfd, an heir's wake eventfd) is followed (pidfd_getfd)
//     only in a segment nobody but its user may write (wake.cpp
//     take_owner_eventfd, lease.cpp poke_eventfd): what proves the process
//     is in the box cannot prove which of its eventfds is the box's.
// ===========================================================================

// T2: the three classes of writers of a file (root is always one more).
// Its owner counts whatever the u+w bit says: it may chmod the file.
struct shm_writers {
  uid_t uid = 0;          // its owner
  gid_t gid = 0;          // its group, which may write it when `group`
  bool group = false;     // g+w
  bool everyone = false;  // o+w
};
inline shm_writers writers_of(const struct stat& st) noexcept {
  return {st.st_uid, st.st_gid, (st.st_mode & S_IWGRP) != 0, (st.st_mode & S_IWOTH) != 0};
}

// T3: nobody but its owner (and root) may write it.
inline bool shm_private_to_owner(const struct stat& st) noexcept { return (st.st_mode & (S_IWGRP | S_IWOTH)) == 0; }

// T3: its owner is one of `uids`.
inline bool shm_owned_by(const struct stat& st, std::initializer_list<uid_t> uids) noexcept {
  for (const uid_t u : uids)
    if (st.st_uid == u) return true;
  return false;
}

// T4: everyone who may write `from` may also write `to` (root, who may
// write anything, excepted). Group membership of another uid is not looked
// up: a group writer of `from` is covered only by the same group on `to`
// (or by everyone): conservative, never generous.
inline bool shm_writers_within(const struct stat& from, const struct stat& to) noexcept {
  const shm_writers a = writers_of(from), b = writers_of(to);
  if (b.everyone) return true;
  if (a.everyone) return false;
  if (a.group && !(b.group && b.gid == a.gid)) return false;
  if (a.uid != 0 && b.uid != a.uid) return false;
  return true;
}

// "uid 1000, mode 0666": how a refusal under T3/T4 describes a file.
inline std::string shm_describe(const struct stat& st) {
  char mode[8];
  std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
  return "uid " + std::to_string(st.st_uid) + ", mode " + mode;
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
