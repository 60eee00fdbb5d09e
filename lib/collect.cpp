// lib/collect.cpp - Box::collect ('shmbox gc'): removes boxes nobody uses.
//
// A box is in use while any of these is alive: its owner (even one whose
// lease expired: it may resume), an heir or listener, a producer entry's
// holder, or any process that has the segment mapped (/proc/*/maps; processes
// whose maps we may not read are judged by the tables alone). The check and
// the unlink are not atomic: a process that opens the box in between keeps a
// working mapping of a segment that no longer has a name. The mapping scan is
// repeated just before each unlink to keep that window small.
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
  const int fd = ::shm_open(shm_path(name).c_str(), O_RDONLY | O_CLOEXEC, 0);
  if (fd < 0) return false;
  struct stat st {};
  segment_header h{};
  bool dead = false;
  if (::fstat(fd, &st) == 0) {
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
    if (!opts.dry_run) {
      if (mapped_by_others().count(name) != 0) continue;  // someone opened it meanwhile
      if (::shm_unlink(shm_path(name).c_str()) != 0) {
        if (errno == ENOENT) continue;  // someone else removed it
        return fail_errno(errno, "box '" + name + "': cannot remove /dev/shm" + shm_path(name));
      }
    }
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace shmbox
