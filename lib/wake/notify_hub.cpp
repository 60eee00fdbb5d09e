// lib/wake/notify_hub.cpp - the notify hub (notify_hub.hpp): one helper thread per
// process for every notify_fd and notify group, and the doorbell FIFO it
// makes and reads. The waker's side of a doorbell (the ring), its records
// and gc's removal of doorbells nobody reads: doorbell.cpp.
#include "wake/notify_hub.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "ownership/handover.hpp"
#include "segment/layout.hpp"
#include "base/process.hpp"
#include "ring/ring.hpp"
#include "base/shm_file.hpp"
#include "ring/wake.hpp"

namespace shmbox::detail {

namespace {

// The doorbell's name, for the exit handler (a fork child that made its own
// hub has its own name and pid here).
char g_bell_name[96];
std::atomic<pid_t> g_bell_pid{0};
std::atomic<std::uint64_t> g_bell_dev{0}, g_bell_ino{0};  // its FIFO: removed only if still at the name
void unlink_bell_at_exit() {
  // relaxed: written before the thread that could run this handler exists
  if (g_bell_pid.load(std::memory_order_relaxed) != ::getpid()) return;
  struct stat named {};
  if (::lstat(g_bell_name, &named) == 0 && named.st_dev == g_bell_dev.load(std::memory_order_relaxed) &&
      named.st_ino == g_bell_ino.load(std::memory_order_relaxed))
    ::unlink(g_bell_name);
}

struct bell_key_hash {
  std::size_t operator()(const bell_record& r) const noexcept { return std::hash<std::uint64_t>()(r.ino * 31 + r.dev); }
};
struct bell_key_eq {
  bool operator()(const bell_record& a, const bell_record& b) const noexcept { return a.dev == b.dev && a.ino == b.ino; }
};

class hub {
 public:
  struct entry {
    std::uint64_t id;             // the registration (hub_add)
    int efd;                      // a notify_fd, or -1: a group member
    notify_group_state* group;    // the member's group (kept alive by its Owner until hub_remove)
    std::uint64_t tag;
    mapped_box* m;
    owner_record* rec;            // m's, kept here: the scan touches no more than it must
    const lane_header* lane0;
    bool one_fifo_lane;
    std::uint64_t key, epoch;
    bell_record file;
    const hub_watch* watch;          // what the Owner handle waits to be told (kept alive by it until hub_remove)
    std::uint64_t request_seen = 0;  // the give-away request last signalled
    std::uint32_t wake_seen = 0;     // wake_seq at the last scan
    std::uint32_t watch_seen = 0;    // *watch at the last scan
    std::uint32_t told = 0;          // the *watch (arming) the hub last told the owner of
    bool waiting_seen = false;       // the last scan found it waiting to be told with messages waiting (and did not wake it)
  };

  const pid_t pid = ::getpid();

  bool start() noexcept {
    ep_ = ::epoll_create1(EPOLL_CLOEXEC);
    ctl_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (ep_ < 0 || ctl_ < 0) return false;
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = ctl_;
    if (::epoll_ctl(ep_, EPOLL_CTL_ADD, ctl_, &ev) != 0) return false;
    try {
      std::thread([this] { run(); }).detach();
    } catch (...) {
      return false;
    }
    return true;
  }

  std::uint64_t add(mapped_box& m, int efd, std::uint64_t key, std::uint64_t epoch, const hub_watch* watch,
                    notify_group_state* group, std::uint64_t tag) {
    std::uint64_t id;
    {
      std::lock_guard<std::mutex> g(mu_);
      id = ++last_id_;
      entry e{id, efd, group, tag, &m, m.owner(), m.lanes[0].hdr, m.lane_count() == 1 && !m.lanes[0].is_lifo(),
              key, epoch, {m.dev, m.ino}, watch};
      e.wake_seen = owner_wake_seq(*m.owner());
      e.watch_seen = watch_of(e);
      e.request_seen = pending_request(m);
      entries_.push_back(e);
      try {
        index_.emplace(id, entries_.size() - 1);
        by_file_.emplace(e.file, id);
      } catch (...) {
        index_.erase(id);
        entries_.pop_back();
        throw;
      }
      // The doorbell exists while a notify owner does (made again after the
      // last one went and took it along): in place before notify_fd() returns.
      if (bell_r_.load(std::memory_order_relaxed) < 0) make_bell();
    }
    write_eventfd(ctl_);  // the hub now has something to scan: it sets its timeout
    return id;
  }

  void remove(std::uint64_t id) {
    std::lock_guard<std::mutex> g(mu_);
    const auto it = index_.find(id);
    if (it == index_.end()) return;
    const std::size_t i = it->second;
    auto [lo, hi] = by_file_.equal_range(entries_[i].file);
    for (auto f = lo; f != hi; ++f)
      if (f->second == id) {
        by_file_.erase(f);
        break;
      }
    index_.erase(it);
    // Swap-remove: the scan's cursor may visit the moved entry twice or once
    // late in this round; it never skips one for longer than a round.
    if (i + 1 != entries_.size()) {
      entries_[i] = entries_.back();
      index_[entries_[i].id] = i;
    }
    entries_.pop_back();
    // The last notify owner went: so does the doorbell, before this returns
    // (a worker that drops its handles and _exits leaves nothing).
    if (entries_.empty()) drop_bell();
  }

  std::uint64_t scans() const noexcept { return scans_.load(std::memory_order_relaxed); }  // relaxed: a count

 private:
  std::mutex mu_;
  std::vector<entry> entries_;
  std::unordered_map<std::uint64_t, std::size_t> index_;  // registration -> its entry
  std::uint64_t last_id_ = 0;
  std::size_t cursor_ = 0;                      // where the scan goes on
  std::atomic<std::uint64_t> scans_{0};         // scans made (hub_scans)
  std::unordered_multimap<bell_record, std::uint64_t, bell_key_hash, bell_key_eq> by_file_;

  // Under mu_: the entry's owner is told (its eventfd, or its group), for
  // the arming `watch` (hub_watch; 0: none, e.g. a give-away request).
  static void signal(entry& e, std::uint32_t watch) noexcept {
    if (watch != 0) e.told = watch;
    if (e.group != nullptr) e.group->fire(e.tag);
    else write_eventfd(e.efd);
  }
  // What the entry's Owner handle waits to be told (hub_watch). acquire:
  // pairs with the release store of Owner::state::publish_watch (made after
  // the handle armed its lanes).
  static std::uint32_t watch_of(const entry& e) noexcept { return e.watch->load(std::memory_order_acquire); }
  // Its notify_fd is readable: the owner has a wake-up it has not taken yet
  // (written by a producer itself, route 1, which the hub does not see), and
  // will look at its box when it takes it.
  static bool fd_unread(const entry& e) noexcept {
    if (e.efd < 0) return false;
    pollfd p{e.efd, POLLIN, 0};
    return ::poll(&p, 1, 0) == 1;
  }
  int ep_ = -1, ctl_ = -1;
  // The doorbell's two ends. Made by add() when there is none, dropped by
  // remove() when no entry is left, read by the hub thread: each under mu_
  // (a read never meets a close; an epoll event that names a descriptor
  // closed since, or a new doorbell under the same number, finds it empty or
  // reads the new one: the reads do not block). relaxed: mu_ orders the
  // changes; the atomic lets run() compare an event's fd without mu_.
  std::atomic<int> bell_r_{-1};
  int bell_w_ = -1;
  bell_reader bell_lines_;  // what was read from bell_r_ (under mu_)

  // Route 2's doorbell; without one (the name is taken, /dev/shm refuses a
  // FIFO) wakers fall back to route 3.
  void make_bell() noexcept {
    const std::string path = bell_path(self_key());
    const std::string tmp = path + ".new";
    const std::string tmp_name = bell_shm_name(bell_entry(self_key())) + ".new";  // for open_shm_file
    const uid_t me = ::geteuid();
    int r = -1;
    struct stat mine {};
    for (int attempt = 0; attempt < 3 && r < 0; ++attempt) {
      // Ours, left by a process of ours that died here (or a gc race); a
      // file of another user stays (sticky /dev/shm) and mkfifo fails: then
      // there is no doorbell (route 3).
      ::unlink(tmp.c_str());
      if (::mkfifo(tmp.c_str(), 0600) != 0) return;
      struct stat made {};
      if (::lstat(tmp.c_str(), &made) != 0) continue;
      // Our reader first (a gc that finds no reader may remove it meanwhile:
      // then try again), then the mode, then our own writer (no end-of-file
      // when the last waker closes), then the real name. Each open: a FIFO,
      // not followed, not waiting (shm_file.hpp S1-S3).
      const shm_file f = open_shm_file(tmp_name, O_RDONLY, shm_expect::doorbell);
      if (f.fd < 0) continue;
      // Read only the FIFO we made (T3: our uid, nobody else may write it
      // yet, the inode mkfifo made): a /dev/shm without the sticky bit would
      // let another user put theirs at the name between mkfifo and open.
      if (!shm_owned_by(f.st, {me}) || !shm_private_to_owner(f.st) || f.st.st_ino != made.st_ino ||
          f.st.st_dev != made.st_dev) {
        ::close(f.fd);
        return;
      }
      r = f.fd;
      mine = f.st;
    }
    if (r < 0) return;
    struct stat named {};
    if (::fchmod(r, 0622) != 0 || (bell_w_ = open_shm_file(tmp_name, O_WRONLY, shm_expect::doorbell).fd) < 0 ||
        ::rename(tmp.c_str(), path.c_str()) != 0 || ::lstat(path.c_str(), &named) != 0 || named.st_ino != mine.st_ino ||
        named.st_dev != mine.st_dev) {
      // (A name another user holds: rename fails, EPERM in the sticky
      // /dev/shm. Not ours at the name after the rename: not used either.)
      struct stat left {};
      if (::lstat(tmp.c_str(), &left) == 0 && left.st_ino == mine.st_ino && left.st_dev == mine.st_dev) ::unlink(tmp.c_str());
      if (bell_w_ >= 0) ::close(bell_w_);
      ::close(r);
      bell_w_ = -1;
      return;
    }
    std::snprintf(g_bell_name, sizeof g_bell_name, "%s", path.c_str());
    g_bell_dev.store(mine.st_dev, std::memory_order_relaxed);  // relaxed: as g_bell_pid below
    g_bell_ino.store(mine.st_ino, std::memory_order_relaxed);
    static std::once_flag once;
    std::call_once(once, [] { std::atexit(unlink_bell_at_exit); });
    g_bell_pid.store(pid, std::memory_order_relaxed);  // relaxed: read by this process's exit handler only
    bell_r_.store(r, std::memory_order_relaxed);
    bell_lines_.reset();
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = r;
    ::epoll_ctl(ep_, EPOLL_CTL_ADD, r, &ev);
  }

  // Under mu_, when no entry is left: the doorbell goes (notify_hub.hpp),
  // its name first (if it still is ours: our reader's file), so that no
  // waker opens it any more; a waker that holds it open gets EPIPE
  // (ring_bell then opens the name again). Records still in it name boxes
  // nobody here waits for any more.
  void drop_bell() noexcept {
    const int r = bell_r_.load(std::memory_order_relaxed);
    if (r < 0) return;
    ::epoll_ctl(ep_, EPOLL_CTL_DEL, r, nullptr);
    g_bell_pid.store(0, std::memory_order_relaxed);  // the exit handler has nothing to remove
    struct stat mine {}, named {};
    if (::fstat(r, &mine) == 0 && ::lstat(g_bell_name, &named) == 0 && S_ISFIFO(named.st_mode) &&
        named.st_dev == mine.st_dev && named.st_ino == mine.st_ino)
      ::unlink(g_bell_name);
    ::close(bell_w_);
    ::close(r);
    bell_w_ = -1;
    bell_r_.store(-1, std::memory_order_relaxed);
  }

  // Reads everything waiting in the doorbell and wakes the boxes its
  // records name (DOORBELL RECORDS: anything else is dropped). True if so
  // much was waiting that rings may have been lost (a waker found the FIFO
  // full): then the scan also looks at wake_seq.
  bool read_bell() {
    char bytes[4096];
    std::size_t total = 0;
    for (;;) {
      std::lock_guard<std::mutex> g(mu_);
      const int r = bell_r_.load(std::memory_order_relaxed);
      if (r < 0) break;  // dropped meanwhile
      const ssize_t n = ::read(r, bytes, sizeof bytes);
      if (n <= 0) break;
      total += static_cast<std::size_t>(n);
      bell_lines_.feed(bytes, static_cast<std::size_t>(n), [&](const bell_record& rec) {
        auto [lo, hi] = by_file_.equal_range(rec);
        for (auto f = lo; f != hi; ++f) {
          entry& e = entries_[index_.at(f->second)];
          // A ring is a hint (anyone may write a doorbell): the owner is told
          // when its handle waits to be told, or a give-away request waits.
          const std::uint32_t watch = watch_of(e);
          if (watch == 0 && !(pending_request(*e.m) != 0 && accepts_requests(*e.m, e.epoch))) continue;
          // Counted first: whoever the eventfd wakes sees the count. relaxed: a
          // diagnostic count (shmbox stat); the write(2) below comes after it.
          e.rec->bell_rings.fetch_add(1, std::memory_order_relaxed);
          signal(e, watch);
        }
      });
    }
    return total >= 32 * 1024;
  }

  // Route 3: what nobody woke us for. Round robin, for at most kScanBudgetNs
  // per scan (see there).
  void scan(bool wake_moved) {
    std::lock_guard<std::mutex> g(mu_);
    const std::uint64_t start = mono_ns();
    const std::size_t n = entries_.size();
    for (std::size_t k = 0; k < n; ++k) {
      if ((k & 15) == 15 && mono_ns() - start >= kScanBudgetNs) break;
      if (cursor_ >= entries_.size()) cursor_ = 0;
      entry& e = entries_[cursor_++];
      const mapped_box& m = *e.m;
      const owner_record* rec = e.rec;
      // acquire: pairs with the owner change (O2/O3) as still_owner does; a
      // handle that lost the box learns it itself.
      if (rec->key.load(std::memory_order_acquire) != e.key || rec->epoch.load(std::memory_order_acquire) != e.epoch)
        continue;
      bool wake = false;
      const std::uint64_t request = pending_request(m);
      if (request != e.request_seen) {
        e.request_seen = request;
        wake |= request != 0 && accepts_requests(m, e.epoch);
      }
      const std::uint32_t w = owner_wake_seq(*rec);
      const bool woken = w != e.wake_seen;  // somebody woke the box since the last scan
      e.wake_seen = w;
      // The handle waits to be told (its arming), and the hub has not told
      // it for this arming (a ring, or an earlier scan). Not the owner
      // record's state: a producer sets it back to passive once it has woken
      // the owner, also when that wake-up never arrived (notify_hub.hpp, 3).
      const std::uint32_t watch = watch_of(e);
      const bool untold = watch != 0 && watch != e.told;
      wake |= wake_moved && woken && untold;  // (a round after an overflow: the boxes it reaches)
      // With messages waiting: a wake-up may have been lost (a producer died
      // between publishing and waking; its ring never reached us).
      bool waiting = false;
      if (!wake && untold) {
        if (e.one_fifo_lane) {
          // One FIFO lane (the common box): claimed past the published head.
          // acquire: pairs with P3 (tail) and T7 (head), as lane_depth_scan.
          const lane_header* h = e.lane0;
          waiting = (h->tail.load(std::memory_order_acquire) >> 1) != h->head.load(std::memory_order_acquire);
        } else {
          std::uint64_t depth = 0;
          for (std::uint32_t l = 0; l < m.lane_count() && depth == 0; ++l) depth += lane_depth_scan(m, l);
          waiting = depth != 0;
        }
      }
      // Lost only if so at two scans in a row, for the same arming, with
      // nobody waking it between them: a producer inside its wake-up (P6)
      // has written the eventfd or rung already and bumps wake_seq after
      // (wake.cpp), so one look in that window would tell the owner (or its
      // group) a second time for one notification (found by CI: a group's
      // tag fired twice). And not while its notify_fd is unread: a producer
      // wrote it itself (route 1) and the owner has yet to take it.
      wake |= waiting && e.waiting_seen && watch == e.watch_seen && !woken && !fd_unread(e);
      e.waiting_seen = waiting && !wake;
      e.watch_seen = watch;
      if (wake) signal(e, watch);
    }
    scans_.fetch_add(1, std::memory_order_relaxed);  // relaxed: a count for tests (hub_scans)
  }

  void run() {
    std::uint64_t next_scan = mono_ns() + kScanNs;
    bool wake_moved = false;
    for (;;) {
      bool idle;
      {
        std::lock_guard<std::mutex> g(mu_);
        idle = entries_.empty();
      }
      const std::uint64_t now = mono_ns();
      const int timeout = idle ? -1 : static_cast<int>((next_scan > now ? next_scan - now : 0) / 1'000'000 + 1);
      epoll_event evs[4];
      const int n = ::epoll_wait(ep_, evs, 4, timeout);
      for (int i = 0; i < n; ++i) {
        if (evs[i].data.fd == bell_r_.load(std::memory_order_relaxed) && evs[i].data.fd >= 0) wake_moved |= read_bell();
        if (evs[i].data.fd == ctl_) {
          std::uint64_t v;
          [[maybe_unused]] const ssize_t r = ::read(ctl_, &v, sizeof v);
        }
      }
      const std::uint64_t after = mono_ns();
      if (idle) next_scan = after + kScanNs;  // (just became busy)
      else if (after >= next_scan) {
        scan(wake_moved);
        wake_moved = false;
        next_scan = after + kScanNs;
      }
    }
  }
};

}  // namespace

notify_group_state::~notify_group_state() {
  if (efd >= 0) ::close(efd);
}

void notify_group_state::fire(std::uint64_t tag) noexcept {
  try {
    std::lock_guard<std::mutex> g(mu);
    if (queued.insert(tag).second) ready.push_back(tag);
  } catch (...) {
    // No memory for the tag: it is not handed out this time; the hub's next
    // scan (route 3) fires an armed member with messages waiting again.
  }
  write_eventfd(efd);
}

std::size_t notify_group_state::take(std::vector<std::uint64_t>& out) {
  std::uint64_t v;
  [[maybe_unused]] const ssize_t n = ::read(efd, &v, sizeof v);  // before the list: a fire after it is readable again
  std::lock_guard<std::mutex> g(mu);
  out.insert(out.end(), ready.begin(), ready.end());
  const std::size_t k = ready.size();
  ready.clear();
  queued.clear();
  return k;
}

namespace {

std::mutex g_hub_mu;
hub* g_hub = nullptr;  // never freed: the thread runs until the process ends

// This process's hub (a fork child gets a new one; the parent's is left as it
// was: its thread does not exist in the child, its mutex may be held).
hub* this_process_hub() {
  std::lock_guard<std::mutex> g(g_hub_mu);
  if (g_hub != nullptr && g_hub->pid == ::getpid()) return g_hub;
  auto* h = new hub();
  if (!h->start()) return nullptr;  // (leaked: a thread may not have started, its fds are few)
  g_hub = h;
  return h;
}

}  // namespace

std::uint64_t hub_add(mapped_box& m, int efd, std::uint64_t key, std::uint64_t epoch, const hub_watch* watch,
                      notify_group_state* group, std::uint64_t tag) noexcept {
  try {
    hub* h = this_process_hub();
    if (h == nullptr) return 0;
    return h->add(m, efd, key, epoch, watch, group, tag);
  } catch (...) {
    return 0;
  }
}

void hub_remove(std::uint64_t registration) noexcept {
  if (registration == 0) return;
  hub* h;
  {
    std::lock_guard<std::mutex> g(g_hub_mu);
    h = g_hub != nullptr && g_hub->pid == ::getpid() ? g_hub : nullptr;
  }
  if (h != nullptr) h->remove(registration);
}

std::uint64_t hub_scans() noexcept {
  std::lock_guard<std::mutex> g(g_hub_mu);
  return g_hub != nullptr && g_hub->pid == ::getpid() ? g_hub->scans() : 0;
}

}  // namespace shmbox::detail
