// lib/wake/doorbell.cpp - a notify doorbell from outside its hub (notify_hub.hpp):
// its name, its records (DOORBELL RECORDS), the ring a waker makes when it
// cannot write the owner's eventfd itself (with THE TRUST RULE's check of
// whose FIFO it rings), and gc's removal of the doorbells nobody reads.
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "base/shm_file.hpp"
#include "segment/layout.hpp"
#include "wake/notify_hub.hpp"

namespace shmbox::detail {

std::string bell_shm_name(std::string_view entry) {
  std::string s(1, '/');  // (not "/" + std::string: GCC 12 warns falsely about it, PR105329)
  s.append(entry);
  return s;
}

std::string bell_entry(std::uint64_t key) {
  char b[64];
  std::snprintf(b, sizeof b, "%s%016" PRIx64, kBellPrefix, key);
  return b;
}

std::string bell_path(std::uint64_t key) { return std::string(kShmDir) + "/" + bell_entry(key); }

std::size_t format_bell_record(const bell_record& r, char (&out)[kBellRecordMax]) noexcept {
  char text[kBellRecordMax + 1];  // (snprintf's '\0' too)
  const int n = std::snprintf(text, sizeof text, "\nB%" PRIx64 ":%" PRIx64 "\n", r.dev, r.ino);
  if (n <= 0 || static_cast<std::size_t>(n) > sizeof out) return 0;
  std::memcpy(out, text, static_cast<std::size_t>(n));
  return static_cast<std::size_t>(n);
}

bool bell_reader::parse(const char* line, std::size_t len, bell_record& out) noexcept {
  // 'B', 1-16 hex digits, ':', 1-16 hex digits: nothing else (format_bell_record).
  if (len < 4 || line[0] != 'B') return false;
  std::size_t i = 1;
  auto number = [&](std::uint64_t& v) {
    const std::size_t from = i;
    v = 0;
    for (; i < len && i - from < 16; ++i) {
      const char c = line[i];
      const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
      if (d < 0) break;
      v = v << 4 | static_cast<std::uint64_t>(d);
    }
    return i > from;
  };
  bell_record r;
  if (!number(r.dev) || i >= len || line[i++] != ':' || !number(r.ino) || i != len) return false;
  out = r;
  return true;
}

namespace {

// The doorbells this process rings (ring_bell): a few kept open, by owner
// key, so that a producer of 10,000 boxes of one owner holds one descriptor
// for them, not one per box. The mutex is held across the write (no
// descriptor is closed while a thread writes it) and across fork (a child's
// copy is never left locked).
struct bell_slot {
  std::uint64_t key = 0;
  int fd = -1;
};
constexpr std::size_t kBellSlots = 16;
std::mutex g_bells_mu;
bell_slot g_bells[kBellSlots];
std::size_t g_bells_next = 0;  // the slot a new key takes (round robin)
void bells_lock() { g_bells_mu.lock(); }
void bells_unlock() { g_bells_mu.unlock(); }

}  // namespace

bool ring_bell(const mapped_box& m, std::uint64_t key) noexcept {
  static const bool installed = [] {
    ::pthread_atfork(bells_lock, bells_unlock, bells_unlock);
    return true;
  }();
  (void)installed;
  std::lock_guard<std::mutex> g(g_bells_mu);
  bell_slot* slot = nullptr;
  for (auto& s : g_bells)  // (one whose doorbell was refused or gone too: it takes no other key's slot)
    if (s.key == key && (slot == nullptr || s.fd >= 0)) slot = &s;
  if (slot == nullptr) {
    slot = &g_bells[g_bells_next++ % kBellSlots];
    if (slot->fd >= 0) ::close(slot->fd);
    *slot = bell_slot{};
  }
  int& fd = slot->fd;
  std::uint64_t& fd_key = slot->key;
  auto open_bell = [&] {
    if (fd >= 0) ::close(fd);
    fd_key = key;
    // A FIFO, never a link, a regular file or a device (not even opened):
    // the key was read from a segment others can write (shm_file.hpp S1-S3).
    const shm_file f = open_shm_file(bell_shm_name(bell_entry(key)), O_WRONLY, shm_expect::doorbell);
    fd = f.fd;
    // THE TRUST RULE T3 for a doorbell (notify_hub.hpp ring_bell): its
    // owner is the segment's owner, root or us; else refused and counted.
    if (fd >= 0 && !shm_owned_by(f.st, {static_cast<uid_t>(m.uid), 0, ::geteuid()})) {
      ::close(fd);
      fd = -1;
      // relaxed: a diagnostic count (as bell_rings)
      m.owner()->bell_refused.fetch_add(1, std::memory_order_relaxed);
    }
  };
  // One record (DOORBELL RECORDS), one write; a doorbell whose reader went
  // (EPIPE) is closed (fd -1).
  char record[kBellRecordMax];
  const std::size_t record_len = format_bell_record({m.dev, m.ino}, record);
  auto ring = [&] {
    if (fd < 0 || record_len == 0) return false;
    // A doorbell whose reader is gone raises SIGPIPE: blocked for the write,
    // and taken back if it came (the owner is dead, or dropped its doorbell).
    sigset_t pipe_only, old;
    sigemptyset(&pipe_only);
    sigaddset(&pipe_only, SIGPIPE);
    ::pthread_sigmask(SIG_BLOCK, &pipe_only, &old);
    const ssize_t n = ::write(fd, record, record_len);
    const bool pipe_gone = n < 0 && errno == EPIPE;
    if (pipe_gone) {
      const timespec zero{0, 0};
      ::sigtimedwait(&pipe_only, nullptr, &zero);
    }
    ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
    if (pipe_gone) {
      ::close(fd);
      fd = -1;
    }
    return n == static_cast<ssize_t>(record_len);  // (full, EAGAIN: the scan finds it; never a part: atomic)
  };
  // A doorbell comes and goes with its process's notify owners (make_bell,
  // drop_bell): a cached descriptor whose reader went is opened by name
  // again, once; none cached is opened now.
  const bool cached = fd_key == key && fd >= 0;
  if (!cached) open_bell();
  if (ring()) return true;
  if (!cached || fd >= 0) return false;  // just opened, or the doorbell is full
  open_bell();
  return ring();
}

bool remove_unread_bell(std::string_view entry, bool dry_run) noexcept {
  // The name: the prefix, 16 hex digits (bell_entry), maybe ".new" (make_bell's temporary).
  const std::size_t plen = std::strlen(kBellPrefix);
  if (entry.size() < plen + 16 || entry.compare(0, plen, kBellPrefix) != 0) return false;
  for (std::size_t i = plen; i < plen + 16; ++i)
    if (std::strchr("0123456789abcdef", entry[i]) == nullptr || entry[i] == '\0') return false;
  const std::string_view rest = entry.substr(plen + 16);
  if (!rest.empty() && rest != ".new") return false;
  try {
    // A FIFO, nobody reading it: an open for writing fails with ENXIO (its st: lstat's).
    const shm_file f = open_shm_file(bell_shm_name(entry), O_WRONLY, shm_expect::doorbell);
    if (f.fd >= 0) ::close(f.fd);
    if (f.fd >= 0 || f.refused != 0 || f.error != ENXIO) return false;
    // make_bell's mode: 0622 once in place, 0600 (less under a umask) before.
    const mode_t mode = f.st.st_mode & 07777;
    if (rest.empty() ? mode != 0622 : (mode & ~mode_t{0622}) != 0) return false;
    if (dry_run) return true;
    struct stat now {};
    if (::lstat(f.path.c_str(), &now) != 0 || !S_ISFIFO(now.st_mode) || now.st_ino != f.st.st_ino || now.st_dev != f.st.st_dev)
      return false;  // replaced meanwhile
    return ::unlink(f.path.c_str()) == 0;
  } catch (...) {
    return false;
  }
}

std::vector<std::string> collect_bells(bool dry_run) {
  std::vector<std::string> out;
  DIR* d = ::opendir(std::string(kShmDir).c_str());
  if (d == nullptr) return out;
  while (const dirent* e = ::readdir(d))
    if (remove_unread_bell(e->d_name, dry_run)) out.emplace_back(e->d_name);
  ::closedir(d);
  return out;
}

}  // namespace shmbox::detail
