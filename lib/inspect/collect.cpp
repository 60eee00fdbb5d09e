// lib/inspect/collect.cpp - collect() ('shmbox gc'): removes boxes nobody uses.
//
// A box is in use while any process has it mapped: its owner (even one whose
// lease expired: it may resume), an heir or listener, a producer, or anyone
// else who opened it. The kernel says so, in any pid namespace: every such
// process holds the attach byte of the segment (liveness.hpp L3), and gc
// checks and unlinks while holding that byte exclusively, so "nobody uses
// it" and the unlink are one step as far as any opener can tell.
//
// What it cannot remove it skips and lists (collected_box::skipped): a box
// of another user it may read but not unlink (EPERM/EACCES in the sticky
// /dev/shm), and a file at a box path that is not a regular file (a FIFO,
// a link, a directory, a socket, a device: never followed, opened or
// removed). The rest is collected all the same. Doorbells: only those
// notify_hub.cpp proves are ours and unread (collect_bells).
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

#include "base/access.hpp"
#include "base/errors.hpp"
#include "segment/layout.hpp"
#include "ownership/lease.hpp"
#include "segment/liveness.hpp"
#include "wake/notify_hub.hpp"
#include "base/process.hpp"
#include "segment/segment.hpp"
#include "base/shm_file.hpp"
#include "shmbox/box.hpp"
#include "shmbox/inspect.hpp"

namespace shmbox {
namespace {

using namespace detail;

// A segment that never became ready: collectable once its creator is gone
// (it holds the creator byte until ready, liveness.hpp L4; with no creator
// recorded, once it is older than a creation can take).
bool abandoned_creation(int fd, std::string& why) {
  struct stat st {};
  segment_header h{};
  bool dead = false;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
    const bool old = ::time(nullptr) - st.st_mtime > 10;
    if (static_cast<std::size_t>(st.st_size) >= sizeof h && ::pread(fd, &h, sizeof h, 0) == static_cast<ssize_t>(sizeof h) &&
        h.magic == kMagic) {
      dead = h.creator_key != 0 ? !lock_held_fd(fd, kCreatorByte) : old;
    } else {
      dead = st.st_size == 0 && old && !lock_held_fd(fd, kCreatorByte);  // created, never sized
    }
  }
  if (dead) why = "half-created: its creator died before it was ready";
  return dead;
}

struct fd_closer {
  int fd;
  ~fd_closer() {
    if (fd >= 0) ::close(fd);
  }
};

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

result<std::vector<collected_box>> collect(const collect_options& opts) {
  auto names = Box::list();
  if (!names) return names.error();
  std::vector<collected_box> out;
  for (const std::string& name : *names) {
    if (name.compare(0, opts.prefix.size(), opts.prefix) != 0) continue;
    collected_box c;
    c.name = name;
    // A FIFO, link, directory... at a box path is not a box: listed as
    // skipped (its sentence says what it is), never removed or waited on.
    if (not_a_regular_file(name)) {
      auto m = open_segment(name, true, false, /*attach=*/false);  // refused at once (shm_file.hpp S1): its sentence
      c.skipped = true;
      c.why = m ? "not a regular file" : explain(m.error());
      out.push_back(std::move(c));
      continue;
    }
    // liveness.hpp L3: exclusive on the attach byte while we look and unlink.
    // Every process that has the box mapped holds it shared (in whatever pid
    // namespace): if we get it, nobody uses the box, and nobody can start to
    // before we let go; an opener that comes after the unlink sees the file
    // gone (st_nlink 0) and says so, so a post never lands in a removed box.
    // A box we may read but not write (another user's) can only be asked:
    // we will not be allowed to unlink it either (sticky /dev/shm).
    const std::string path = shm_path(name);
    // Never followed, never waited on, and only a regular file (shm_file.hpp S1-S3).
    shm_file f = open_shm_file(path, O_RDWR, shm_expect::segment);
    const bool exclusive = f.fd >= 0;
    if (!exclusive) f = open_shm_file(path, O_RDONLY, shm_expect::segment);
    fd_closer fd{f.fd};
    if (fd.fd < 0) continue;  // gone, replaced by something else, or not ours to read: for a person to judge
    const struct stat st = f.st;  // fstat of fd
    if (exclusive ? !try_lock_byte(fd.fd, kAttachByte, true) : lock_held_fd(fd.fd, kAttachByte)) continue;  // in use
    // A file not yet sized: judged as is (open_segment would wait for its
    // creator while we hold the byte its creator needs).
    if (st.st_size < static_cast<off_t>(kSegmentHeaderBytes)) {
      if (!abandoned_creation(fd.fd, c.why)) continue;
    } else if (auto m = open_segment(name, true, false, /*attach=*/false, /*snapshot=*/false,
                                     // Another user's box being made is judged as it is (T6): anyone
                                     // can plant never-ready files at any number of names, and a wait
                                     // for each would cost every gc a second per file. abandoned_creation
                                     // below still keeps one whose creator is alive.
                                     st.st_uid == ::geteuid() ? 0 : 1);
               !m) {
      // Foreign and corrupt segments are for a person to judge ('shmbox verify', 'shmbox rm').
      if (m.error() != errc::incomplete || !abandoned_creation(fd.fd, c.why)) continue;
    } else {
      const box_info i = info(detail::access::make_box(*m));  // m: the open_segment result of the condition above
      if ((*m)->shrank()) continue;  // truncated while read (T5): zeros, not its state; for a person to judge
      // Every role holder has the box mapped, so this only confirms L3.
      bool live = i.owner.alive || i.producers_attached != 0;
      for (const heir_info& h : i.heirs) live |= h.alive;
      if (live) continue;
      // A dead requester's reply box: nobody can ever read it (its token died with it).
      if (i.depth != 0 && !opts.include_nonempty && !i.reply_box) continue;
      c.depth = i.depth;
      c.why = i.reply_box ? "a dead requester's reply box (" + std::to_string(i.depth) + " replies nobody can read)"
              : i.owner.pid != 0 ? "owner, heirs and producers are dead"
                                 : "never owned; no live heir or producer";
    }
    if (opts.dry_run && !may_unlink(name)) {
      c.skipped = true;
      c.why = "unused (" + c.why + ") but would not be removed: permission denied on /dev/shm" + path +
              "; its owner (uid " + std::to_string(uid_of(name)) + ") or root may remove it";
    }
    if (!opts.dry_run) {
      struct stat now {};
      // Still the file we locked (not removed, nor replaced by a new file or a link, meanwhile)?
      if (::lstat(("/dev/shm" + path).c_str(), &now) == 0 && (now.st_ino != st.st_ino || now.st_dev != st.st_dev)) continue;
      if (::shm_unlink(path.c_str()) != 0) {
        const int err = errno;
        if (err == ENOENT) continue;  // someone else removed it
        if (err != EPERM && err != EACCES) return fail_errno(err, "box '" + name + "': cannot remove /dev/shm" + path);
        // Readable but not ours to remove (another user's box in the sticky
        // /dev/shm): skip it, say so, and go on with the rest.
        c.skipped = true;
        c.why = "unused (" + c.why + ") but not removed: permission denied on /dev/shm" + path + "; its owner (uid " +
                std::to_string(uid_of(name)) + ") or root may remove it";
      }
    }
    out.push_back(std::move(c));
  }
  // The doorbells of owner processes that are gone (notify_hub.hpp): not
  // boxes, but shmbox's files in /dev/shm all the same.
  if (opts.prefix.empty())
    for (std::string& bell : detail::collect_bells(opts.dry_run)) {
      collected_box c;
      c.name = std::move(bell);
      c.why = "the notify doorbell of an owner process that is gone";
      out.push_back(std::move(c));
    }
  return out;
}

}  // namespace shmbox
