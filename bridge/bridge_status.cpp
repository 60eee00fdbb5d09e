// bridge/bridge_status.cpp - the bridge's status segment (bridge_status.hpp).
#include "bridge_status.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/shm_file.hpp"
#include "shmbox/types.hpp"
#include "status_layout.hpp"

namespace shmbox_cli {

namespace {

std::string segment_name(std::string_view box, bridge_role r) {
  return "/shmbox-bridge." + std::string(box) + "." + std::string(to_string(r));
}

std::uint64_t unix_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<std::uint64_t>(ts.tv_nsec);
}

// The lock another open file description holds on byte 0: F_WRLCK, a
// working bridge's (taking it needs a descriptor open for writing: under T3
// the owner's or root's); F_RDLCK, a reader's (anyone who may read the file
// may take one; no bridge does); F_UNLCK, none; -1: the kernel cannot say.
int lock_on_byte0(int fd) {
  struct flock fl{};
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  fl.l_start = 0;
  fl.l_len = 1;
  if (fcntl(fd, F_OFD_GETLK, &fl) != 0) return -1;
  return fl.l_type;
}

// T3's refusal of a status segment: what the file is, whose, why it is not
// trusted (`why`: its owner is not one expected, `owner_ok` false, or others
// may write it), and what to do.
std::string untrusted(const shmbox::detail::shm_file& f, std::string_view box, bridge_role r, bool owner_ok, const std::string& why) {
  return f.path + " (" + shmbox::detail::shm_describe(f.st) + ") " + why +
         (owner_ok ? ": made by an earlier shmbox with the box's mode, or chmod'ed since? "
                   : ": someone else's file (planted?); ") +
         "if no " + std::string(to_string(r)) + " bridge of box '" + std::string(box) + "' runs, remove it: rm " + f.path;
}

// pread of all `n` bytes at 0 (fewer: the file is shorter, e.g. cut short meanwhile).
std::size_t read_all(int fd, void* buf, std::size_t n) {
  std::size_t got = 0;
  while (got < n) {
    const ssize_t k = pread(fd, static_cast<char*>(buf) + got, n - got, static_cast<off_t>(got));
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) break;
    got += static_cast<std::size_t>(k);
  }
  return got;
}

template <std::size_t N>
void put(char (&dst)[N], std::string_view s) {
  const std::size_t n = s.size() < N - 1 ? s.size() : N - 1;
  std::memcpy(dst, s.data(), n);
  std::memset(dst + n, 0, N - n);
}

template <std::size_t N>
std::string get(const char (&src)[N]) {
  char copy[N];
  std::memcpy(copy, src, N);  // another process may write it meanwhile: bounded by N, cut at the first NUL
  return std::string(copy, strnlen(copy, N));
}

}  // namespace

static_assert(kBridgeCounters <= kBridgeStatusCounterSlots);
static_assert(kBridgeLanes == shmbox::kMaxLanes, "the export record has one entry per lane");

std::string_view to_string(bridge_role r) noexcept { return r == bridge_role::import_ ? "import" : "export"; }

std::string_view to_string(bridge_counter c) noexcept {
  switch (c) {
    case bridge_counter::published: return "published";
    case bridge_counter::acked: return "acked";
    case bridge_counter::publish_errors: return "publish_errors";
    case bridge_counter::dedupe_hits: return "dedupe_hits";
    case bridge_counter::redeliveries: return "redeliveries";
    case bridge_counter::remote_drops: return "remote_drops";
    case bridge_counter::imported: return "imported";
    case bridge_counter::naks: return "naks";
    case bridge_counter::local_drops: return "local_drops";
    case bridge_counter::publish_unsent: return "publish_unsent";
    case bridge_counter::publish_refused: return "publish_refused";
    case bridge_counter::ack_timeouts: return "ack_timeouts";
    case bridge_counter::fetch_errors: return "fetch_errors";
    case bridge_counter::reconnects: return "reconnects";
    case bridge_counter::stream_recreated: return "stream_recreated";
    case bridge_counter::durable_recreated: return "durable_recreated";
    case bridge_counter::duplicates: return "duplicates";
    case bridge_counter::uncertain_posts: return "uncertain_posts";
    case bridge_counter::resyncs: return "resyncs";
    case bridge_counter::count_: break;
  }
  return "unknown";
}

bool counts(bridge_role r, bridge_counter c) noexcept {
  switch (c) {
    case bridge_counter::redeliveries:
    case bridge_counter::reconnects: return true;
    case bridge_counter::published:
    case bridge_counter::acked:
    case bridge_counter::publish_errors:
    case bridge_counter::dedupe_hits:
    case bridge_counter::publish_unsent:
    case bridge_counter::publish_refused:
    case bridge_counter::ack_timeouts:
    case bridge_counter::stream_recreated: return r == bridge_role::export_;
    case bridge_counter::remote_drops:
    case bridge_counter::imported:
    case bridge_counter::naks:
    case bridge_counter::local_drops:
    case bridge_counter::fetch_errors:
    case bridge_counter::durable_recreated:
    case bridge_counter::duplicates:
    case bridge_counter::uncertain_posts:
    case bridge_counter::resyncs: return r == bridge_role::import_;
    case bridge_counter::count_: break;
  }
  return false;
}

std::string_view to_string(bridge_state s) noexcept {
  switch (s) {
    case bridge_state::starting: return "starting";
    case bridge_state::connected: return "connected";
    case bridge_state::reconnecting: return "reconnecting";
    case bridge_state::stream_missing: return "stream_missing";
    case bridge_state::consumer_missing: return "consumer_missing";
    case bridge_state::stopped: return "stopped";
    case bridge_state::count_: break;
  }
  return "unknown";
}

std::string_view help(bridge_counter c) noexcept {
  switch (c) {
    case bridge_counter::published: return "Messages the bridge published to JetStream (republishes included).";
    case bridge_counter::acked: return "Exported messages JetStream acknowledged, then committed in the box.";
    case bridge_counter::publish_errors:
      return "Publishes refused, failed or not acknowledged in time (published again); the sum of publish_unsent, publish_refused, ack_timeouts.";
    case bridge_counter::dedupe_hits: return "Acknowledgements marked duplicate: a republish JetStream already stored (Nats-Msg-Id).";
    case bridge_counter::redeliveries:
      return "Export: messages a dead bridge had read (flagged redelivered); import: messages JetStream delivered again.";
    case bridge_counter::remote_drops: return "Import: messages an export put in the stream that never reached the import (discarded, expired, lost with the stream); counted by the gaps in each source lane's ordinals.";
    case bridge_counter::imported: return "Imported messages posted into the box (stored or dropped by its policy), then acked; each counted once.";
    case bridge_counter::naks: return "Imported messages the box refused (full under reject, block timeout), nak'ed for later.";
    case bridge_counter::local_drops: return "Of the imported: messages the box's drop-newest or drop-oldest policy dropped.";
    case bridge_counter::publish_unsent: return "Publishes that could not be sent (no server, disconnected); published again.";
    case bridge_counter::publish_refused:
      return "Publishes JetStream refused (stream full under discard new, stream missing); published again.";
    case bridge_counter::ack_timeouts: return "Publishes not acknowledged within --ack-timeout; published again.";
    case bridge_counter::fetch_errors: return "Import fetches that failed (no server, consumer or stream missing).";
    case bridge_counter::reconnects: return "Connections to NATS lost and made again.";
    case bridge_counter::stream_recreated: return "Times the stream had disappeared and --create-stream made it again.";
    case bridge_counter::durable_recreated: return "Times the durable consumer had disappeared and the import made it again.";
    case bridge_counter::duplicates: return "Messages delivered again that the import had posted already (acked, not posted twice).";
    case bridge_counter::uncertain_posts:
      return "Posts a killed import had in flight whose outcome could not be learned (its producer entry was taken); posted again.";
    case bridge_counter::resyncs:
      return "Times deliveries were lost on the way (a fetch's reply, a consumer leader's failover) and the durable was made again from its first unacknowledged message.";
    case bridge_counter::count_: break;
  }
  return "";
}

std::string without_credentials(std::string_view url) {
  std::string out;
  std::size_t start = 0;
  while (start <= url.size()) {  // a comma-separated list of URLs
    std::size_t end = url.find(',', start);
    if (end == std::string_view::npos) end = url.size();
    std::string_view one = url.substr(start, end - start);
    const std::size_t scheme = one.find("://");
    const std::size_t host = scheme == std::string_view::npos ? 0 : scheme + 3;
    const std::size_t at = one.rfind('@');
    if (!out.empty()) out += ',';
    if (at != std::string_view::npos && at >= host)
      out += std::string(one.substr(0, host)) + std::string(one.substr(at + 1));
    else
      out += std::string(one);
    start = end + 1;
  }
  return out;
}

std::optional<std::set<std::string>> boxes_with_bridge_status() {
  std::vector<std::string> names;  // NAME.<role>
  if (!shmbox::detail::shm_names("shmbox-bridge.", names)) return std::nullopt;
  std::set<std::string> out;
  for (const std::string_view n : names)
    for (const bridge_role r : {bridge_role::export_, bridge_role::import_}) {
      const std::string_view role = to_string(r);
      const std::size_t tail = role.size() + 1;
      if (n.size() > tail && n[n.size() - tail] == '.' && n.substr(n.size() - role.size()) == role)
        out.emplace(n.substr(0, n.size() - tail));
    }
  return out;
}

std::vector<bridge_info> read_bridges(std::string_view box, std::uint32_t box_uid, std::vector<std::string>* problems) {
  namespace d = shmbox::detail;
  std::vector<bridge_info> out;
  for (const bridge_role r : {bridge_role::export_, bridge_role::import_}) {
    const auto not_shown = [&](const std::string& why) {
      if (problems != nullptr)
        problems->push_back("the " + std::string(to_string(r)) + " bridge status of box '" + std::string(box) + "' is not shown: " + why);
    };
    // Anyone may plant a FIFO (an open for reading would wait for a writer
    // forever: a Prometheus scrape that never returns), a link, a directory
    // ... at this name: refused unopened (lib/base/shm_file.hpp S1-S3).
    const d::shm_file f = d::open_shm_file(segment_name(box, r), O_RDONLY, d::shm_expect::segment);
    if (f.refused != 0) not_shown(d::shm_refusal(f, "a shmbox bridge status segment"));
    if (f.fd < 0) continue;  // none (ENOENT), or not ours to read (EACCES: a 0600 status of another user)
    const int fd = f.fd;
    // T3: shown only as written by the box's owner, this user or root, and
    // by nobody else. (Anyone may make a file at this name with a live
    // bridge's state, pid and counters, and hold its lock: that would show a
    // connected bridge of someone else's box, muting or firing its alerts.)
    const bool owner_ok = d::shm_owned_by(f.st, {static_cast<uid_t>(box_uid), geteuid(), 0});
    if (!owner_ok || !d::shm_private_to_owner(f.st)) {
      not_shown(untrusted(f, box, r, owner_ok,
                          !owner_ok ? "belongs to neither the box's owner (uid " + std::to_string(box_uid) + "), this user (uid " +
                                          std::to_string(geteuid()) + ") nor root"
                                    : "may be written by others than its owner (group or other write permission)"));
      close(fd);
      continue;
    }
    // T5: a private copy, never a mapping: a segment cut short under the
    // reader (ftruncate by its owner) is a short read here, not a SIGBUS.
    alignas(bridge_status_segment) unsigned char raw[sizeof(bridge_status_segment)];
    if (read_all(fd, raw, sizeof raw) < sizeof raw) {  // being made (a bridge sizes it), or cut short: nothing to show
      close(fd);
      continue;
    }
    // The copy is this process's alone: its atomics are plain loads here.
    const auto* p = reinterpret_cast<const bridge_status_segment*>(raw);
    if (p->magic == kBridgeStatusMagic && p->version == kBridgeStatusVersion && p->role == static_cast<std::uint32_t>(r)) {
      bridge_info i;
      i.role = r;
      i.pid = static_cast<std::uint32_t>(p->pid.load(std::memory_order_relaxed));
      // Only a write lock is a bridge's: a read lock is any reader's (no bridge takes one).
      i.alive = lock_on_byte0(fd) == F_WRLCK;
      i.started_unix_ns = p->started_unix_ns.load(std::memory_order_relaxed);
      i.nats = get(p->nats);
      i.stream = get(p->stream);
      i.subject = get(p->subject);
      i.durable = get(p->durable);
      for (std::uint32_t c = 0; c < kBridgeCounters; ++c) i.counters[c] = p->counters[c].load(std::memory_order_relaxed);
      const std::uint32_t state = p->state.load(std::memory_order_relaxed);  // any value a writer left: bounded here
      i.state = state < static_cast<std::uint32_t>(bridge_state::count_) ? static_cast<bridge_state>(state) : bridge_state::starting;
      i.state_unix_ns = p->state_unix_ns.load(std::memory_order_relaxed);
      i.error_unix_ns = p->error_unix_ns.load(std::memory_order_relaxed);
      i.last_error = get(p->last_error);
      if (!i.alive && i.state != bridge_state::stopped) i.state = bridge_state::stopped;  // killed: it could not say so
      out.push_back(std::move(i));
    } else if (p->magic != 0 && p->magic != kBridgeStatusMagic) {  // 0: a bridge is starting it
      not_shown(f.path + " is not a shmbox bridge status segment (wrong magic number): remove it if it is garbage: rm " + f.path);
    }
    close(fd);
  }
  return out;
}

void remove_bridge_status(std::string_view box) {
  for (const bridge_role r : {bridge_role::export_, bridge_role::import_}) (void)shm_unlink(segment_name(box, r).c_str());
}

std::optional<bridge_status> bridge_status::open(std::string_view box, bridge_role role, std::uint32_t mode, std::string& error) {
  namespace d = shmbox::detail;
  const std::string name = segment_name(box, role);
  const std::string not_started = "the " + std::string(to_string(role)) + " bridge of box '" + std::string(box) + "' is not started (" +
                                  (role == bridge_role::import_ ? "nothing was posted or acked" : "nothing was read or published") + "): ";
  // Written by this uid alone (and root, who may write anything); readable by
  // whom the box lets read it (its g+r, o+r), so that their `shmbox stat`
  // shows it.
  const mode_t create_mode = 0600 | (static_cast<mode_t>(mode) & 0044);
  // Made here (O_EXCL: nothing was at the name), or found there and adopted
  // only under T3 below. A FIFO, link, directory ... there is refused
  // unopened (lib/base/shm_file.hpp S1-S3).
  d::shm_file f;
  bool made = false;
  for (int attempt = 0; attempt < 3 && !made; ++attempt) {
    f = d::open_shm_file(name, O_RDWR | O_CREAT | O_EXCL, d::shm_expect::segment, create_mode);
    made = f.fd >= 0;
    if (made || f.refused != 0 || f.error != EEXIST) break;
    f = d::open_shm_file(name, O_RDWR, d::shm_expect::segment);
    if (f.fd >= 0 || f.refused != 0 || f.error != ENOENT) break;  // ENOENT: removed meanwhile: make it again
  }
  if (f.refused != 0) {
    error = not_started + "cannot use its status segment: " + d::shm_refusal(f, "a shmbox bridge status segment");
    return std::nullopt;
  }
  // EACCES with a file seen: another user's that this one may not write
  // (refused below for what it is); anything else: said as it is.
  const bool seen = f.fd >= 0 || (f.error == EACCES && f.st.st_nlink != 0);
  if (!seen) {
    error = not_started + "cannot open its status segment /dev/shm" + name + ": " + std::strerror(f.error);
    return std::nullopt;
  }
  // T3: what the segment records (the import's posted sequences and source
  // positions, the export's ordinals, the counters) decides what this bridge
  // posts, acks and shows: adopted only when it is this uid's and nobody else
  // may write it. (Anyone may make a file at this name first: with posted_seq
  // 2^62 in it, an import would ack every message and post none.)
  if (!made) {
    const bool owner_ok = d::shm_owned_by(f.st, {geteuid()});
    if (f.fd < 0 || !owner_ok || !d::shm_private_to_owner(f.st)) {
      const std::string rule = "a bridge adopts only a status segment of its own uid (" + std::to_string(geteuid()) +
                               ") that nobody else may write (what it records decides what the bridge posts and acks)";
      error = not_started + "its status segment " +
              untrusted(f, box, role, owner_ok,
                        owner_ok ? "may be written by others than its owner, and " + rule
                                 : "belongs to uid " + std::to_string(f.st.st_uid) + ", and " + rule);
      if (f.fd >= 0) close(f.fd);
      return std::nullopt;
    }
  }
  const int fd = f.fd;
  // Exactly create_mode, whatever the umask (the descriptor is the file made here: no race).
  if (made && fchmod(fd, create_mode) != 0) {
    error = not_started + "cannot set the mode of /dev/shm" + name + ": " + std::strerror(errno);
    (void)shm_unlink(name.c_str());
    close(fd);
    return std::nullopt;
  }
  // Its pages now: a full /dev/shm is this error, never a SIGBUS at a later write.
  if (static_cast<std::uint64_t>(f.st.st_size) < sizeof(bridge_status_segment) || made) {
    const int rc = posix_fallocate(fd, 0, sizeof(bridge_status_segment));
    if (rc != 0) {
      error = not_started + "cannot size /dev/shm" + name + ": " + std::strerror(rc) + (rc == ENOSPC ? " (/dev/shm is full)" : "");
      if (made) (void)shm_unlink(name.c_str());
      close(fd);
      return std::nullopt;
    }
  }
  void* mem = mmap(nullptr, sizeof(bridge_status_segment), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (mem == MAP_FAILED) {
    error = not_started + "cannot map /dev/shm" + name + ": " + std::strerror(errno);
    close(fd);
    return std::nullopt;
  }
  auto* p = static_cast<bridge_status_segment*>(mem);
  if (p->magic != kBridgeStatusMagic || p->version != kBridgeStatusVersion || p->role != static_cast<std::uint32_t>(role)) {
    if (p->magic != 0 && p->magic != kBridgeStatusMagic) {
      error = not_started + "/dev/shm" + name + " is not a shmbox bridge status segment (wrong magic number): if it is garbage, remove it: rm /dev/shm" + name;
      munmap(mem, sizeof(bridge_status_segment));
      close(fd);
      return std::nullopt;
    }
    // New (zero-filled by posix_fallocate) or of another version: start it afresh.
    for (auto& c : p->counters) c.store(0, std::memory_order_relaxed);
    p->pid.store(0, std::memory_order_relaxed);
    p->state.store(static_cast<std::uint32_t>(bridge_state::starting), std::memory_order_relaxed);
    p->state_unix_ns.store(0, std::memory_order_relaxed);
    p->error_unix_ns.store(0, std::memory_order_relaxed);
    std::memset(p->last_error, 0, sizeof p->last_error);
    std::memset(static_cast<void*>(&p->import_record), 0, sizeof p->import_record + sizeof p->cursors + sizeof p->export_record);
    p->version = kBridgeStatusVersion;
    p->role = static_cast<std::uint32_t>(role);
    std::atomic_thread_fence(std::memory_order_release);
    p->magic = kBridgeStatusMagic;
  }
  bridge_status s;
  s.p_ = p;
  s.fd_ = fd;
  s.path_ = f.path;
  return s;
}

bridge_status::bridge_status(bridge_status&& o) noexcept
    : p_(o.p_), fd_(o.fd_), active_(o.active_), locked_(o.locked_), path_(std::move(o.path_)) {
  o.p_ = nullptr;
  o.fd_ = -1;
}

bridge_status::~bridge_status() {
  if (p_ != nullptr) munmap(p_, sizeof(bridge_status_segment));
  if (fd_ >= 0) close(fd_);  // drops the lock: the bridge no longer works the box
}

bool bridge_status::relock() noexcept {
  if (!locked_ && fd_ >= 0) {
    struct flock fl{};
    fl.l_type = F_WRLCK;
    fl.l_whence = SEEK_SET;
    fl.l_start = 0;
    fl.l_len = 1;
    // Never waits (T6): F_OFD_SETLK, not SETLKW; a holder that stays is asked again later.
    locked_ = fcntl(fd_, F_OFD_SETLK, &fl) == 0;
  }
  return locked_;
}

bool bridge_status::activate(std::string_view nats, std::string_view stream, std::string_view subject, std::string_view durable,
                             bool exclusive, std::uint64_t* holder, bool* read_lock) {
  // Export: held by a previous bridge that lost the box (it still shows
  // alive), or a reader's read lock: works on, relock() later.
  if (!relock() && exclusive) {
    if (holder != nullptr) *holder = p_->pid.load(std::memory_order_relaxed);
    if (read_lock != nullptr) *read_lock = lock_on_byte0(fd_) == F_RDLCK;
    return false;
  }
  p_->pid.store(static_cast<std::uint64_t>(getpid()), std::memory_order_relaxed);
  p_->started_unix_ns.store(unix_ns(), std::memory_order_relaxed);
  put(p_->nats, without_credentials(nats));
  put(p_->stream, stream);
  put(p_->subject, subject);
  put(p_->durable, durable);
  active_ = true;
  return true;
}

bool bridge_status::set_state(bridge_state s) noexcept {
  if (!active_) return false;
  const auto v = static_cast<std::uint32_t>(s);
  if (p_->state.exchange(v, std::memory_order_relaxed) == v) return false;
  p_->state_unix_ns.store(unix_ns(), std::memory_order_relaxed);
  return true;
}

bridge_state bridge_status::state() const noexcept {
  const std::uint32_t v = p_->state.load(std::memory_order_relaxed);
  return v < static_cast<std::uint32_t>(bridge_state::count_) ? static_cast<bridge_state>(v) : bridge_state::starting;
}

bridge_status::import_recovery bridge_status::recovery() const noexcept {
  const bridge_import_record& r = p_->import_record;
  import_recovery out;
  // acquire: pairs with begin_post's release (the intent before the flag).
  out.posting = r.posting.load(std::memory_order_acquire) == 1;
  out.entry = r.entry.load(std::memory_order_relaxed);
  out.attached_ns = r.attached_ns.load(std::memory_order_relaxed);
  out.intent.src = {r.src_box.load(std::memory_order_relaxed), r.src_lane.load(std::memory_order_relaxed),
                    r.src_position.load(std::memory_order_relaxed), r.src_ordinal.load(std::memory_order_relaxed)};
  out.intent.stream_seq = r.stream_seq.load(std::memory_order_relaxed);
  out.intent.lane = static_cast<std::uint32_t>(r.lane.load(std::memory_order_relaxed));
  out.intent.stored_before = r.stored_before.load(std::memory_order_relaxed);
  out.intent.refused_before = r.refused_before.load(std::memory_order_relaxed);
  out.intent.imported_before = r.imported_before.load(std::memory_order_relaxed);
  out.intent.drops_before = r.drops_before.load(std::memory_order_relaxed);
  out.intent.gap = r.gap.load(std::memory_order_relaxed);
  out.done = r.done.load(std::memory_order_relaxed) == 1;
  return out;
}

void bridge_status::set_entry(std::uint32_t entry, std::uint64_t attached_ns) noexcept {
  p_->import_record.entry.store(entry, std::memory_order_relaxed);
  p_->import_record.attached_ns.store(attached_ns, std::memory_order_relaxed);
}

void bridge_status::begin_post(const post_intent& i) noexcept {
  bridge_import_record& r = p_->import_record;
  r.src_box.store(i.src.box, std::memory_order_relaxed);
  r.src_lane.store(i.src.lane, std::memory_order_relaxed);
  r.src_position.store(i.src.position, std::memory_order_relaxed);
  r.stream_seq.store(i.stream_seq, std::memory_order_relaxed);
  r.lane.store(i.lane, std::memory_order_relaxed);
  r.stored_before.store(i.stored_before, std::memory_order_relaxed);
  r.refused_before.store(i.refused_before, std::memory_order_relaxed);
  r.imported_before.store(i.imported_before, std::memory_order_relaxed);
  r.src_ordinal.store(i.src.next_ordinal, std::memory_order_relaxed);
  r.drops_before.store(i.drops_before, std::memory_order_relaxed);
  r.gap.store(i.gap, std::memory_order_relaxed);
  r.done.store(0, std::memory_order_relaxed);
  // release: the intent is whole before the flag says so (a process killed
  // between two stores leaves them in program order; this keeps the compiler to it).
  r.posting.store(1, std::memory_order_release);
}

void bridge_status::finish(const post_intent& i, bool imported) noexcept {
  bridge_import_record& r = p_->import_record;
  // seq_cst: a full barrier, so that no step below is seen before it (a
  // process killed after a step leaves `done` set: its successor finishes).
  r.done.store(1, std::memory_order_seq_cst);
  // Each counter once: a dead import that added it already moved it.
  if (imported && get(bridge_counter::imported) == i.imported_before) add(bridge_counter::imported);
  if (i.gap != 0 && get(bridge_counter::remote_drops) == i.drops_before) add(bridge_counter::remote_drops, i.gap);
  advance(i.src);
  if (i.stream_seq != 0) {
    if (i.stream_seq > posted_seq()) set_posted_seq(i.stream_seq);
    if (i.stream_seq > last_stream_seq()) set_last_stream_seq(i.stream_seq);
  }
  end_post();
}

void bridge_status::end_post() noexcept { p_->import_record.posting.store(0, std::memory_order_release); }

bool bridge_status::cursor(std::uint64_t box, std::uint64_t lane, std::uint64_t& position, std::uint64_t& next_ordinal) const noexcept {
  for (const bridge_cursor& c : p_->cursors)
    if (c.box_id.load(std::memory_order_relaxed) == box && c.lane.load(std::memory_order_relaxed) == lane) {
      position = c.position.load(std::memory_order_relaxed);
      next_ordinal = c.next_ordinal.load(std::memory_order_relaxed);
      return true;
    }
  return false;
}

void bridge_status::advance(const source_id& src) noexcept {
  if (src.box == 0) return;
  for (bridge_cursor& c : p_->cursors)
    if (c.box_id.load(std::memory_order_relaxed) == src.box && c.lane.load(std::memory_order_relaxed) == src.lane) {
      // A later message of the source: its ordinal follows (a message
      // without one, or a redelivery below the cursor, leaves none known).
      if (src.position > c.position.load(std::memory_order_relaxed)) {
        c.next_ordinal.store(src.next_ordinal, std::memory_order_relaxed);
        c.position.store(src.position, std::memory_order_release);
      }
      return;
    }
  // A new source: the next entry round robin (more than kBridgeCursors source
  // lanes and the oldest one's duplicates are no longer recognised).
  const std::uint64_t k = p_->import_record.next_cursor.fetch_add(1, std::memory_order_relaxed) % kBridgeCursors;
  bridge_cursor& c = p_->cursors[k];
  c.box_id.store(0, std::memory_order_relaxed);  // no half-made entry matches: box last
  c.lane.store(src.lane, std::memory_order_relaxed);
  c.position.store(src.position, std::memory_order_relaxed);
  c.next_ordinal.store(src.next_ordinal, std::memory_order_relaxed);
  c.box_id.store(src.box, std::memory_order_release);
}

std::uint64_t bridge_status::last_stream_seq() const noexcept {
  return p_->import_record.last_stream_seq.load(std::memory_order_relaxed);
}

void bridge_status::set_last_stream_seq(std::uint64_t seq) noexcept {
  p_->import_record.last_stream_seq.store(seq, std::memory_order_relaxed);
}

std::uint64_t bridge_status::posted_seq() const noexcept { return p_->import_record.posted_seq.load(std::memory_order_relaxed); }

void bridge_status::set_posted_seq(std::uint64_t seq) noexcept { p_->import_record.posted_seq.store(seq, std::memory_order_release); }

std::uint64_t bridge_status::stream_created_ns() const noexcept {
  return p_->import_record.stream_created_ns.load(std::memory_order_relaxed);
}

void bridge_status::set_stream(std::uint64_t created_ns, std::uint64_t base) noexcept {
  p_->import_record.stream_created_ns.store(created_ns, std::memory_order_relaxed);
  p_->import_record.last_stream_seq.store(base, std::memory_order_relaxed);
  p_->import_record.posted_seq.store(base, std::memory_order_relaxed);
}

std::string bridge_status::bound_sequences(std::uint64_t stream_last, std::uint64_t base, std::string_view stream) {
  bridge_import_record& r = p_->import_record;
  const std::uint64_t posted = posted_seq(), last = last_stream_seq();
  if (posted <= stream_last && last <= stream_last) return {};
  set_stream(r.stream_created_ns.load(std::memory_order_relaxed), base);
  for (bridge_cursor& c : p_->cursors) c.box_id.store(0, std::memory_order_relaxed);
  r.next_cursor.store(0, std::memory_order_relaxed);
  return path_ + " says stream sequences up to " + std::to_string(posted) + " were posted (up to " + std::to_string(last) +
         " seen), beyond stream '" + std::string(stream) + "''s last sequence " + std::to_string(stream_last) +
         ": no import of this stream recorded that (written over?); not used: the record starts again at the durable's ack floor " +
         std::to_string(base) + ", its source positions forgotten (a message a killed import posted and did not ack may be posted again)";
}

std::uint64_t bridge_status::lane_ordinal(std::uint32_t lane, std::uint64_t first_position) noexcept {
  if (lane >= kBridgeLanes) return 0;
  bridge_export_record& r = p_->export_record;
  const std::uint64_t pending = r.pending[lane].load(std::memory_order_acquire);  // pairs with begin_commit's release
  if (pending != 0) {
    // A dead export's commit: its first message again (redelivered, not
    // committed) keeps `sent`; a later one means the commit was done.
    if (first_position > pending - 1) r.sent[lane].store(r.after[lane].load(std::memory_order_relaxed), std::memory_order_relaxed);
    r.pending[lane].store(0, std::memory_order_release);
  }
  return r.sent[lane].load(std::memory_order_relaxed);
}

void bridge_status::begin_commit(std::uint32_t lane, std::uint64_t after, std::uint64_t first_position) noexcept {
  if (lane >= kBridgeLanes) return;
  bridge_export_record& r = p_->export_record;
  r.after[lane].store(after, std::memory_order_relaxed);
  r.pending[lane].store(first_position + 1, std::memory_order_release);
}

void bridge_status::end_commit(std::uint32_t lane) noexcept {
  if (lane >= kBridgeLanes) return;
  bridge_export_record& r = p_->export_record;
  r.sent[lane].store(r.after[lane].load(std::memory_order_relaxed), std::memory_order_relaxed);
  r.pending[lane].store(0, std::memory_order_release);
}

std::string bridge_status::bound_ordinals(const std::uint64_t* delivered, std::uint32_t lanes, std::string_view box) {
  bridge_export_record& r = p_->export_record;
  std::string said;
  for (std::uint32_t l = 0; l < kBridgeLanes; ++l) {
    const std::uint64_t most = l < lanes ? delivered[l] : 0;
    // A commit made moved `delivered` past `after` (sent <= delivered before
    // it, and the batch's messages of the lane were counted): beyond it, the
    // commit was not made, which is what lane_ordinal would find out too.
    if (r.pending[l].load(std::memory_order_acquire) != 0 && r.after[l].load(std::memory_order_relaxed) > most)
      r.pending[l].store(0, std::memory_order_release);
    const std::uint64_t sent = r.sent[l].load(std::memory_order_relaxed);
    if (sent <= most) continue;
    r.pending[l].store(0, std::memory_order_relaxed);
    r.after[l].store(0, std::memory_order_relaxed);
    r.sent[l].store(0, std::memory_order_relaxed);
    said += (said.empty() ? "" : ", ") + std::string("lane ") + std::to_string(l) + ": next ordinal " + std::to_string(sent) +
            ", delivered " + std::to_string(most);
  }
  if (said.empty()) return said;
  return path_ + " numbers messages beyond what box '" + std::string(box) + "' delivered (" + said +
         "): no export of this box numbered that many (the record of a box made again under this name, or written over); "
         "not used: those lanes number from 0 again (the import takes that for a count started over: nothing counted lost)";
}

void bridge_status::set_error(std::string_view what) noexcept {
  if (!active_) return;
  put(p_->last_error, what);
  p_->error_unix_ns.store(unix_ns(), std::memory_order_relaxed);
}

void bridge_status::add(bridge_counter c, std::uint64_t n) noexcept {
  p_->counters[static_cast<std::uint32_t>(c)].fetch_add(n, std::memory_order_relaxed);
}

std::uint64_t bridge_status::get(bridge_counter c) const noexcept {
  return p_->counters[static_cast<std::uint32_t>(c)].load(std::memory_order_relaxed);
}

}  // namespace shmbox_cli
