// lib/collect.cpp - Box::collect ('shmbox gc'): removes boxes nobody uses.
//
// A box is in use while any of these is alive: its owner (even one whose
// lease expired: it may resume), an heir or listener, a producer entry's
// holder, or any process that has the segment mapped (/proc/*/maps; processes
// whose maps we may not read are judged by the tables alone). The check and
// the unlink are not atomic: a process that opens the box in between keeps a
// working mapping of a segment that no longer has a name. The mapping scan is
// repeated just before each unlink to keep that window small.
//
// What it cannot remove it skips and lists (collected_box::skipped): a box
// of another user it may read but not unlink (EPERM/EACCES in the sticky
// /dev/shm), and a file at a box path that is not a regular file (a FIFO,
// a link). The rest is collected all the same.
#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <string>

#include "errors.hpp"
#include "layout.hpp"
#include "lease.hpp"
#include "process.hpp"
#include "segment.hpp"
#include "shmbox/box.hpp"

namespace shmbox {
namespace {

using namespace detail;

// Names of shmbox segments that some other process has mapped.
std::set<std::string> mapped_by_others() {
  std::set<std::string> names;
  DIR* d = ::opendir("/proc");
  if (d == nullptr) return names;
  const std::string self = std::to_string(::getpid());
  constexpr std::string_view marker = "/dev/shm/shmbox.";
  while (const dirent* e = ::readdir(d)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9' || self == e->d_name) continue;
    std::ifstream maps(std::string("/proc/") + e->d_name + "/maps");
    std::string line;
    while (std::getline(maps, line)) {
      const auto at = line.find(marker);
      if (at == std::string::npos) continue;
      std::string n = line.substr(at + marker.size());
      if (const auto sp = n.find(' '); sp != std::string::npos) n.resize(sp);  // " (deleted)"
      names.insert(n);
    }
  }
  ::closedir(d);
  return names;
}

// A segment that never became ready: collectable once its creator is dead
// (or, with no creator recorded, once it is older than a creation can take).
bool abandoned_creation(const std::string& name, std::string& why) {
  // O_NONBLOCK | O_NOFOLLOW: as in open_segment, a FIFO or link put here
  // since must neither block us nor be followed.
  const int fd = ::shm_open(shm_path(name).c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW, 0);
  if (fd < 0) return false;
  struct stat st {};
  segment_header h{};
  bool dead = false;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
    const bool old = ::time(nullptr) - st.st_mtime > 10;
    if (static_cast<std::size_t>(st.st_size) >= sizeof h && ::pread(fd, &h, sizeof h, 0) == static_cast<ssize_t>(sizeof h) &&
        h.magic == kMagic) {
      dead = h.creator_key != 0 ? !process_alive(h.creator_key) : old;
    } else {
      dead = st.st_size == 0 && old;  // created, never sized
    }
  }
  ::close(fd);
  if (dead) why = "half-created: its creator died before it was ready";
  return dead;
}

// Whether /dev/shm/shmbox.<name> is there and is not a regular file (not followed if a link).
bool not_a_regular_file(const std::string& name) {
  struct stat st {};
  return ::lstat(("/dev/shm" + shm_path(name)).c_str(), &st) == 0 && !S_ISREG(st.st_mode);
}

// The uid that owns /dev/shm/shmbox.<name> (for the message), or -1 as unsigned.
unsigned uid_of(const std::string& name) {
  struct stat st {};
  return ::lstat(("/dev/shm" + shm_path(name)).c_str(), &st) == 0 ? st.st_uid : static_cast<unsigned>(-1);
}

// Whether this process may unlink /dev/shm/shmbox.<name>, for a dry run (a
// real run tries and skips on EPERM/EACCES): /dev/shm is sticky, so only
// the file's owner, the directory's owner or root may.
bool may_unlink(const std::string& name) {
  const uid_t me = ::geteuid();
  struct stat dir {}, st {};
  if (me == 0 || ::stat("/dev/shm", &dir) != 0 || ::lstat(("/dev/shm" + shm_path(name)).c_str(), &st) != 0) return true;
  if (::euidaccess("/dev/shm", W_OK) != 0) return false;
  return (dir.st_mode & S_ISVTX) == 0 || st.st_uid == me || dir.st_uid == me;
}

}  // namespace

result<std::vector<collected_box>> Box::collect(const collect_options& opts) {
  auto names = list();
  if (!names) return names.error();
  std::vector<collected_box> out;
  const std::set<std::string> mapped = mapped_by_others();
  for (const std::string& name : *names) {
    if (name.compare(0, opts.prefix.size(), opts.prefix) != 0 || mapped.count(name) != 0) continue;
    collected_box c;
    c.name = name;
    auto m = open_segment(name, true);
    if (!m) {
      // A FIFO, link, directory... at a box path is not a box: listed as
      // skipped (its sentence says what it is), never removed or waited on.
      if (m.error() == errc::not_a_box && not_a_regular_file(name)) {
        c.skipped = true;
        c.why = explain(m.error());
        out.push_back(std::move(c));
        continue;
      }
      // Foreign and corrupt segments are for a person to judge ('shmbox verify', 'shmbox rm').
      if (m.error() != errc::incomplete || !abandoned_creation(name, c.why)) continue;
    } else {
      const Box box(*m);
      const box_info i = box.info();
      bool live = i.owner.alive || i.producers_attached != 0;
      for (const heir_info& h : i.heirs) live |= h.alive;
      if (live) continue;
      if (i.depth != 0 && !opts.include_nonempty) continue;
      c.depth = i.depth;
      c.why = i.owner.pid != 0 ? "owner, heirs and producers are dead" : "never owned; no live heir or producer";
    }
    if (opts.dry_run && !may_unlink(name)) {
      c.skipped = true;
      c.why = "unused (" + c.why + ") but would not be removed: permission denied on /dev/shm" + shm_path(name) +
              "; its owner (uid " + std::to_string(uid_of(name)) + ") or root may remove it";
    }
    if (!opts.dry_run) {
      if (mapped_by_others().count(name) != 0) continue;  // someone opened it meanwhile
      if (::shm_unlink(shm_path(name).c_str()) != 0) {
        const int err = errno;
        if (err == ENOENT) continue;  // someone else removed it
        if (err != EPERM && err != EACCES)
          return fail_errno(err, "box '" + name + "': cannot remove /dev/shm" + shm_path(name));
        // Readable but not ours to remove (another user's box in the sticky
        // /dev/shm): skip it, say so, and go on with the rest.
        c.skipped = true;
        c.why = "unused (" + c.why + ") but not removed: permission denied on /dev/shm" + shm_path(name) +
                "; its owner (uid " + std::to_string(uid_of(name)) + ") or root may remove it";
      }
    }
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace shmbox
