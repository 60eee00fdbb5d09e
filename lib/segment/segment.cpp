// lib/segment/segment.cpp - creating, opening and validating box segments.
//
// Creation is race-free and never exposes a half-made box: the segment is
// created with O_EXCL, its mode set with fchmod (no umask race), its pages
// reserved with posix_fallocate (a full /dev/shm is an error now, never a
// SIGBUS later), initialised, and only then is `ready` stored with release.
// Openers check magic, layout version, `ready`, and recompute the geometry
// from the header's parameters before they trust a single offset.
#include "segment/segment.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <new>
#include <thread>
#include <utility>

#include "base/errors.hpp"
#include "segment/liveness.hpp"
#include "base/process.hpp"
#include "base/bus_guard.hpp"
#include "base/shm_file.hpp"

namespace shmbox::detail {
namespace {

constexpr std::uint64_t kOpenWaitNs = 1'000'000'000;  // how long an opener waits for a box being created
constexpr std::uint64_t kSnapshotWaitNs = 10'000'000;  // how long a snapshot does (then: incomplete)

std::string quote(std::string_view name) { return "box '" + std::string(name) + "'"; }

std::string human_bytes(std::uint64_t b) {
  char buf[64];
  if (b >= (1ull << 30)) std::snprintf(buf, sizeof buf, "%.1f GiB", static_cast<double>(b) / (1ull << 30));
  else if (b >= (1ull << 20)) std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(b) / (1ull << 20));
  else if (b >= (1ull << 10)) std::snprintf(buf, sizeof buf, "%.1f KiB", static_cast<double>(b) / (1ull << 10));
  else std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(b));
  return buf;
}

// liveness.hpp L3: a shared lock on the attach byte. gc holds it exclusively
// only while it checks and unlinks (no waiting inside): wait that out, but
// not past `give_up_ns` (a process that holds it on purpose). false with
// errno (EAGAIN: still held).
bool attach_lock(int fd, std::uint64_t give_up_ns) {
  // liveness.hpp L7: polled until the deadline; a signal ends the wait.
  return wait_lock_byte(fd, kAttachByte, F_RDLCK, give_up_ns == 0 ? 1 : give_up_ns);
}

// The soft limit `resource` (RLIMIT_FSIZE, RLIMIT_AS) when it is below
// `bytes`, else 0: a box that size cannot be made or mapped under it.
std::uint64_t limit_below(int resource, std::uint64_t bytes) {
  struct rlimit rl {};
  if (::getrlimit(resource, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= bytes) return 0;
  return rl.rlim_cur;
}

// The sentences for a segment larger than this process's file-size or
// address-space limit. Under `ulimit -f`, posix_fallocate past the limit
// would raise SIGXFSZ (which kills) before it returns EFBIG: so the limit is
// checked before the segment is created.
std::string fsize_sentence(const std::string& who, std::uint64_t bytes, std::uint64_t limit) {
  return who + " needs a segment of " + human_bytes(bytes) + " but this process's file-size limit (ulimit -f, RLIMIT_FSIZE) is " +
         human_bytes(limit) + ": raise it or lower --capacity/--slot-size";
}
std::string as_sentence(const std::string& who, std::uint64_t bytes, std::uint64_t limit) {
  return who + ": cannot map " + human_bytes(bytes) + ": this process's address-space limit (ulimit -v, RLIMIT_AS) is " +
         human_bytes(limit) + ": raise it or lower --capacity/--slot-size";
}

// mmap of a segment of `bytes` failed with `err`: ENOMEM is the address
// space (a limit, or memory for the page tables), not room in /dev/shm.
std::error_code mmap_failed(int err, const std::string& who, std::uint64_t bytes) {
  if (err != ENOMEM) return fail_errno(err, who + ": mmap");
  struct rlimit rl {};
  if (::getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
    return fail(errc::too_large, as_sentence(who, bytes, rl.rlim_cur) + " (part of it is in use already)");
  return fail(errc::too_large, who + ": cannot map " + human_bytes(bytes) +
                                   ": not enough address space or memory in this process (mmap: ENOMEM); lower --capacity/--slot-size");
}

struct fd_guard {
  int fd = -1;
  ~fd_guard() {
    if (fd >= 0) ::close(fd);
  }
};

// `policies`, `quotas`: the validated policy and quota of each lane (never
// re-read from shared memory).
void fill_lanes(mapped_box& m, const std::uint32_t* policies, const std::uint32_t* quotas) {
  for (std::uint32_t l = 0; l < m.lane_count(); ++l) {
    lane_view& v = m.lanes[l];
    v.hdr = reinterpret_cast<lane_header*>(m.base + m.geo.lanes_offset) + l;
    v.slots = m.base + m.geo.slots_offset[l];
    v.index = l;
    v.capacity = m.geo.params.lane_capacity[l];
    v.pow2 = (v.capacity & (v.capacity - 1)) == 0;
    v.mask = v.capacity - 1;
    v.stride = m.geo.slot_stride;
    v.payload = m.geo.params.slot_payload;
    v.pol = static_cast<policy>(policies[l]);
    v.resizable = v.hdr->limit.load(std::memory_order_relaxed) != 0;  // relaxed: set before `ready`
    v.gated = v.resizable || m.geo.params.stash_entries != 0;
    v.priority_offset = m.geo.priority_offset;
    v.buffered = !m.buffer_name.empty();
    v.quota = quotas[l];
    // THE GATE of a stash or priority lane (not resizable) limits nothing while
    // nothing of the lane is parked: the fast path posts then (fast_gate), and
    // leaves every other case to fifo_claim. A custom buffer's gate is the ring's.
    // A priority lane's posts also write the priority word: a fast path of
    // their own (fast_priority), so that the FIFO box's stays as it was.
    const bool fifo_fast = !v.is_lifo() && !v.resizable && v.quota == 0;
    v.fast = fifo_fast && !v.is_priority();
    v.fast_priority = fifo_fast && v.is_priority();
    v.fast_gate = fifo_fast && v.gated && !v.buffered;
  }
}

}  // namespace

namespace {

constexpr std::align_val_t kSnapshotAlign{4096};  // as a mapping is: every layout alignment holds

// Reads up to `bytes` of fd from offset 0 into `to`; how many it got (a file
// truncated meanwhile gives fewer), or -1 (errno).
ssize_t read_whole(int fd, std::byte* to, std::size_t bytes) {
  std::size_t got = 0;
  while (got < bytes) {
    const ssize_t n = ::pread(fd, to + got, bytes - got, static_cast<off_t>(got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return -1;
    if (n == 0) break;
    got += static_cast<std::size_t>(n);
  }
  return static_cast<ssize_t>(got);
}

}  // namespace

mapped_box::~mapped_box() {
  if (base != nullptr && snapshot) {
    ::operator delete(base, kSnapshotAlign);
  } else if (base != nullptr) {
    bus_guard_remove(bus_ticket);  // T5: before the munmap
    ::munmap(base, mapped_bytes);
  }
  untrack_mapping(*this);
  // The lock description (liveness.hpp L1): no role lock is left on it (each
  // role_lock keeps its mapping). The attach lock went with the mapping.
  if (fd >= 0) ::close(fd);
}

bool mapped_box::shrank() const noexcept { return bus_guard_faults(bus_ticket) != 0; }

std::string shm_path(std::string_view name) { return "/shmbox." + std::string(name); }

result<void> validate_box_name(std::string_view name) {
  auto bad = [&](const std::string& why) {
    return fail(errc::invalid_name, "invalid box name '" + std::string(name) + "': " + why +
                                        " (use 1 to 128 characters of A-Z a-z 0-9 . _ -, not starting with '.')");
  };
  if (name.empty()) return bad("it is empty");
  if (name.size() > kMaxNameLength) return bad("it is " + std::to_string(name.size()) + " characters long");
  if (name.front() == '.') return bad("it starts with '.'");
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                    c == '_' || c == '-';
    if (!ok) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "character 0x%02x", static_cast<unsigned char>(c));
      return bad(std::string("it contains ") + (c == '/' ? "'/'" : buf));
    }
  }
  return {};
}

result<std::shared_ptr<mapped_box>> create_segment(std::string_view name, const options& o, std::uint32_t flags) {
  if (auto r = validate_box_name(name); !r) return r.error();
  const std::string who = quote(name);
  if (o.capacity < 1 || o.capacity > kMaxCapacity)
    return fail(errc::invalid_argument, who + ": capacity " + std::to_string(o.capacity) + " is outside 1.." +
                                            std::to_string(kMaxCapacity));
  if (o.slot_size < 1 || o.slot_size > kMaxSlotSize)
    return fail(errc::invalid_argument, who + ": slot size " + std::to_string(o.slot_size) + " is outside 1.." +
                                            std::to_string(kMaxSlotSize) + " bytes");
  if (o.max_producers < 1 || o.max_producers > kMaxProducers)
    return fail(errc::invalid_argument, who + ": max producers " + std::to_string(o.max_producers) +
                                            " is outside 1.." + std::to_string(kMaxProducers));
  if (static_cast<std::uint8_t>(o.overflow) > static_cast<std::uint8_t>(policy::block))
    return fail(errc::invalid_argument, who + ": unknown overflow policy");
  if ((o.mode & ~0777u) != 0 || (o.mode & 0600u) != 0600u) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "%04o", o.mode);
    return fail(errc::invalid_argument, who + ": mode " + buf +
                                            " must be permission bits only (at most 0777) and include 0600 for the creator");
  }
  if (o.block_timeout.count() < 0 || o.block_timeout.count() > 86'400'000)
    return fail(errc::invalid_argument, who + ": block timeout must be 0 ms to 1 day");
  if (o.lease.count() < 0 || o.lease.count() > 86'400'000)
    return fail(errc::invalid_argument, who + ": lease must be 0 (none) to 1 day in ms");
  if (o.spin.count() < 0 || o.spin > kMaxSpin)
    return fail(errc::invalid_argument, who + ": spin must be 0 (sleep at once) to 1 s");
  if (!o.dead_letters.empty()) {
    if (auto r = validate_box_name(o.dead_letters); !r)
      return fail(errc::invalid_name, who + ": dead-letter box: " + explain(r.error()));
    if (o.dead_letters == name)
      return fail(errc::invalid_argument, who + " cannot be its own dead-letter box");
  } else if (o.dead_letter_refused) {
    return fail(errc::invalid_argument, who + ": dead_letter_refused needs a dead-letter box (options::dead_letters, --dead-letters)");
  }

  geometry_params p;
  std::uint32_t policies[kMaxLanes] = {};
  std::uint32_t limits[kMaxLanes] = {};  // resizable lanes: the limit (lane_header::limit); 0: not resizable
  std::uint32_t quotas[kMaxLanes] = {};  // lane_header::quota (ring.hpp THE QUOTA); 0: none
  if (o.lanes.size() > kMaxLanes)
    return fail(errc::invalid_argument, who + ": " + std::to_string(o.lanes.size()) + " lanes; a box has 1 to " +
                                            std::to_string(kMaxLanes));
  p.lane_count = o.lanes.empty() ? 1 : static_cast<std::uint32_t>(o.lanes.size());
  for (std::uint32_t l = 0; l < p.lane_count; ++l) {
    static const lane_options kBoxWide{};
    const lane_options& lo = o.lanes.empty() ? kBoxWide : o.lanes[l];
    p.lane_capacity[l] = lo.capacity != 0 ? lo.capacity : o.capacity;
    if (p.lane_capacity[l] > kMaxCapacity)
      return fail(errc::invalid_argument, who + ": lane " + std::to_string(l) + " capacity " +
                                              std::to_string(p.lane_capacity[l]) + " is over " + std::to_string(kMaxCapacity));
    const policy pol = lo.overflow.value_or(o.overflow);
    if (static_cast<std::uint8_t>(pol) > static_cast<std::uint8_t>(policy::block))
      return fail(errc::invalid_argument, who + ": unknown overflow policy for lane " + std::to_string(l));
    policies[l] = static_cast<std::uint32_t>(pol);
    if (const std::uint32_t reserve = lo.max_capacity != 0 ? lo.max_capacity : o.max_capacity; reserve != 0) {
      const std::string lane_name = p.lane_count > 1 ? "lane " + std::to_string(l) : "the box";
      if (pol == policy::lifo)
        return fail(errc::invalid_argument, who + ": " + lane_name + " is lifo; a lifo lane cannot be resizable (no max capacity)");
      if (p.lane_capacity[l] == 0)
        return fail(errc::invalid_argument, who + ": " + lane_name + ": capacity 0");
      if (reserve < p.lane_capacity[l] || reserve > kMaxCapacity)
        return fail(errc::invalid_argument, who + ": " + lane_name + " max capacity " + std::to_string(reserve) + " must be " +
                                                std::to_string(p.lane_capacity[l]) + " (its capacity) to " + std::to_string(kMaxCapacity));
      limits[l] = p.lane_capacity[l];
      p.lane_capacity[l] = reserve;  // the slots; the lane holds `limit` of them
    }
    if (const std::uint32_t quota = lo.quota != 0 ? lo.quota : o.quota; quota != 0) {  // ring.hpp THE QUOTA
      const std::string lane_name = p.lane_count > 1 ? "lane " + std::to_string(l) : "the box";
      const char* why = pol == policy::lifo ? " is lifo; a quota needs a reject, drop_newest or block lane"
                        : pol == policy::drop_oldest
                            ? " is drop_oldest; a quota needs a reject, drop_newest or block lane (evicting a producer's own "
                              "oldest would leave a hole in the ring that costs every producer room until the owner passes it)"
                        : limits[l] != 0    ? " is resizable; a lane cannot have both a quota and a max capacity yet"
                        : o.stash != 0      ? " has a stash; a box with a stash cannot have quotas yet"
                        : o.priority || !o.buffer.empty() ? " orders its messages in the owner's store; a quota needs a plain FIFO box (no --priority, --buffer)"
                                                          : nullptr;
      if (why != nullptr) return fail(errc::invalid_argument, who + ": " + lane_name + why);
      if (quota > p.lane_capacity[l])
        return fail(errc::invalid_argument, who + ": " + lane_name + " quota " + std::to_string(quota) +
                                                " is over its capacity " + std::to_string(p.lane_capacity[l]) +
                                                " (a quota is messages per producer: 1 to the capacity)");
      quotas[l] = quota;
    }
  }
  // A plain post goes to the default lane: lane 1 when there are several
  // (lane 0, the control lane, takes only explicit posts), else lane 0.
  const std::uint32_t default_lane = o.default_lane.value_or(p.lane_count > 1 ? 1 : 0);
  if (default_lane >= p.lane_count)
    return fail(errc::invalid_argument, who + ": default lane " + std::to_string(default_lane) + " is not one of its " +
                                            std::to_string(p.lane_count) + " lanes (0.." + std::to_string(p.lane_count - 1) + ")");
  p.slot_payload = o.slot_size;
  p.max_producers = o.max_producers;
  p.stash_entries = o.stash;
  if (o.stash != 0) {
    if (o.stash > kMaxCapacity)
      return fail(errc::invalid_argument, who + ": stash of " + std::to_string(o.stash) + " entries is over " + std::to_string(kMaxCapacity));
    for (std::uint32_t l = 0; l < p.lane_count; ++l)
      if (policies[l] == static_cast<std::uint32_t>(policy::lifo))
        return fail(errc::invalid_argument, who + ": " + (p.lane_count > 1 ? "lane " + std::to_string(l) : std::string("the box")) +
                                                " is lifo; a box with a stash needs FIFO lanes (parked messages count against a lane's limit, which a lifo lane has no gate for)");
    if (o.lease.count() != 0)
      return fail(errc::invalid_argument, who + ": a lease box cannot have a stash (a stale owner's stash entries could not be fenced); drop --lease or --stash");
  }
  const bool buffered = !o.buffer.empty();
  if (buffered) {  // ring.hpp CUSTOM BUFFERS
    if (!valid_buffer_name(o.buffer))
      return fail(errc::invalid_argument, who + ": buffer type '" + o.buffer + "' is not a valid name (1-" +
                                              std::to_string(kMaxBufferName) + " characters of A-Z a-z 0-9 . _ -)");
    if (o.priority)
      return fail(errc::invalid_argument, who + ": a box is a priority box or a custom-buffer box, not both (a buffer can order by the key: post_options::priority); drop --priority or --buffer");
  }
  if (o.priority || buffered) {  // ring.hpp PRIORITY BOXES, CUSTOM BUFFERS
    const std::string kind = buffered ? "a custom-buffer box" : "a priority box";
    const std::string flag = buffered ? "--buffer" : "--priority";
    for (std::uint32_t l = 0; l < p.lane_count; ++l) {
      const std::string lane_name = p.lane_count > 1 ? "lane " + std::to_string(l) : std::string("the box");
      if (policies[l] == static_cast<std::uint32_t>(policy::lifo))
        return fail(errc::invalid_argument, who + ": " + lane_name + " is lifo; " + kind + " orders by " + (buffered ? "its buffer" : "priority") + ", not by stack: use reject, drop_newest or block");
      if (policies[l] == static_cast<std::uint32_t>(policy::drop_oldest))
        return fail(errc::invalid_argument, who + ": " + lane_name + " is drop_oldest, which " + kind + " does not support yet (the oldest message may already be in the owner's store, where producers cannot evict it): use reject, drop_newest or block");
    }
    if (o.lease.count() != 0)
      return fail(errc::invalid_argument, who + ": a lease box cannot be " + kind + " (a stale owner's stored messages could not be fenced); drop --lease or " + flag);
    if (o.stash != 0 && buffered)
      return fail(errc::invalid_argument, who + ": " + kind + " cannot have a stash yet; drop --stash or " + flag);
    // The store the owner moves messages into: one entry per slot of every
    // lane; a custom-buffer box one more, for the message push_drop decides on.
    // A priority box's stash follows in the same pool (ring.hpp THE STASH).
    p.priority = true;
    for (std::uint32_t l = 0; l < p.lane_count; ++l) p.stash_entries += p.lane_capacity[l];
    if (buffered) p.stash_entries += 1;
  }
  geometry g;
  if (!compute_geometry(p, g))
    return fail(errc::too_large, who + ": " + std::to_string(o.capacity) + " slots of " + std::to_string(o.slot_size) +
                                     " bytes exceed the segment limit of " + human_bytes(kMaxSegmentBytes));

  // Limits of this process that the segment would exceed: said before anything is created.
  if (const std::uint64_t limit = limit_below(RLIMIT_FSIZE, g.total_bytes); limit != 0)
    return fail(errc::too_large, fsize_sentence(who, g.total_bytes, limit));
  if (const std::uint64_t limit = limit_below(RLIMIT_AS, g.total_bytes); limit != 0)
    return fail(errc::too_large, as_sentence(who, g.total_bytes, limit));

  const std::string path = shm_path(name);
  fd_guard fd;
  fd.fd = ::shm_open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd.fd < 0) {
    if (errno == EEXIST) return fail(errc::exists, who + " already exists (/dev/shm" + path + "): pick another name or remove it with 'shmbox rm " + std::string(name) + "'");
    return fail_errno(errno, who + ": cannot create /dev/shm" + path);
  }
  auto unlink_and = [&](std::error_code ec) {
    ::shm_unlink(path.c_str());
    return ec;
  };
  // liveness.hpp L3, L4: attached, and creating, until `ready` is stored.
  // A gc that found the new empty file may hold the attach byte for a moment.
  if (!attach_lock(fd.fd, mono_ns() + kOpenWaitNs) || !try_lock_byte(fd.fd, kCreatorByte, false))
    return unlink_and(fail_errno(errno, who + ": cannot lock /dev/shm" + path + " (open file description locks)"));
  if (::fchmod(fd.fd, o.mode) != 0) return unlink_and(fail_errno(errno, who + ": fchmod"));
  // posix_fallocate returns the error instead of setting errno.
  if (const int rc = ::posix_fallocate(fd.fd, 0, static_cast<off_t>(g.total_bytes)); rc != 0) {
    std::string sentence = who + " needs " + human_bytes(g.total_bytes) + " of shared memory";
    struct statvfs vfs {};
    if (::statvfs("/dev/shm", &vfs) == 0)
      sentence += "; /dev/shm has " + human_bytes(std::uint64_t{vfs.f_bavail} * vfs.f_frsize) + " free";
    if (rc == EFBIG) {  // the file-size limit (lowered since the check above), with SIGXFSZ ignored or blocked
      struct rlimit rl {};
      if (::getrlimit(RLIMIT_FSIZE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
        return unlink_and(fail(errc::too_large, fsize_sentence(who, g.total_bytes, rl.rlim_cur)));
    }
    if (rc == ENOSPC || rc == EFBIG || rc == ENOMEM)
      return unlink_and(fail(errc::no_space, sentence + ": free space in /dev/shm or lower --capacity/--slot-size"));
    return unlink_and(fail_errno(rc, sentence));
  }
  void* addr = ::mmap(nullptr, g.total_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd.fd, 0);
  if (addr == MAP_FAILED) return unlink_and(mmap_failed(errno, who, g.total_bytes));

  auto m = std::make_shared<mapped_box>();
  m->name = std::string(name);
  m->base = static_cast<std::byte*>(addr);
  m->mapped_bytes = g.total_bytes;
  m->bus_ticket = bus_guard_add(addr, g.total_bytes, true);  // T5 (shm_file.hpp): a shrink is not a death
  {
    struct stat st {};
    if (::fstat(fd.fd, &st) == 0) {
      m->dev = static_cast<std::uint64_t>(st.st_dev);
      m->ino = static_cast<std::uint64_t>(st.st_ino);
    }
  }
  m->fd = std::exchange(fd.fd, -1);
  m->geo = g;
  m->default_policy = o.overflow;
  m->block_timeout_ms = static_cast<std::uint32_t>(o.block_timeout.count());
  m->mode = o.mode;
  m->uid = static_cast<std::uint32_t>(::geteuid());
  m->lease_ms_ = static_cast<std::uint32_t>(o.lease.count());
  m->spin_ns = static_cast<std::uint32_t>(o.spin.count());
  m->default_lane = default_lane;

  // The pages are fresh from fallocate and read as zero: every counter, key
  // and op word starts at 0 (none). Only non-zero initial values are written.
  segment_header* h = m->header();
  h->magic = kMagic;
  h->layout_version = kLayoutVersion;
  h->total_bytes = g.total_bytes;
  h->creator_key = self_key();
  h->created_unix_ns = unix_ns();
  h->lane_count = p.lane_count;
  h->max_producers = p.max_producers;
  h->slot_payload = p.slot_payload;
  h->slot_stride = g.slot_stride;
  h->default_policy = static_cast<std::uint32_t>(o.overflow);
  h->block_timeout_ms = m->block_timeout_ms;
  h->spin_ns = m->spin_ns;
  h->default_lane = default_lane;
  h->owner_offset = g.owner_offset;
  h->lanes_offset = g.lanes_offset;
  h->producers_offset = g.producers_offset;
  h->producer_stride = g.producer_stride;
  h->lease_ms = m->lease_ms_;
  h->actors_offset = g.actors_offset;
  h->heirs_offset = g.heirs_offset;
  h->actor_stride = g.actor_stride;
  h->config_offset = g.config_offset;
  h->stash_entries = p.stash_entries;
  h->stash_stride = g.stash_stride;
  h->stash_offset = g.stash_offset;
  h->ordering = buffered ? kOrderingBuffer : p.priority ? kOrderingPriority : kOrderingFifo;
  auto* cfg = reinterpret_cast<box_config*>(m->base + g.config_offset);
  cfg->buffer_len = static_cast<std::uint32_t>(o.buffer.size());
  std::memcpy(cfg->buffer, o.buffer.data(), o.buffer.size());
  m->buffer_name = o.buffer;
  cfg->dead_letters_len = static_cast<std::uint32_t>(o.dead_letters.size());
  std::memcpy(cfg->dead_letters, o.dead_letters.data(), o.dead_letters.size());
  m->dead_letters = o.dead_letters;
  cfg->flags = (o.dead_letter_refused ? kConfigDeadLetterRefused : 0) |
               (std::any_of(quotas, quotas + p.lane_count, [](std::uint32_t q) { return q != 0; }) ? kConfigQuota : 0) |
               (flags & kConfigReplyBox);
  m->reply_box = (flags & kConfigReplyBox) != 0;
  m->dead_letter_refused = o.dead_letter_refused;
  m->owner()->lease_ms = m->lease_ms_;
  for (std::uint32_t i = 0; i < kHeirSlots; ++i) m->heir(i)->wake_fd.store(-1, std::memory_order_relaxed);
  for (std::uint32_t l = 0; l < kMaxLanes; ++l) h->lane_capacity[l] = p.lane_capacity[l];
  for (std::uint32_t l = 0; l < p.lane_count; ++l) {
    auto* lh = reinterpret_cast<lane_header*>(m->base + g.lanes_offset) + l;
    lh->capacity = p.lane_capacity[l];
    lh->policy = policies[l];
    lh->slots_offset = g.slots_offset[l];
    lh->limit.store(limits[l], std::memory_order_relaxed);  // relaxed: published by the release on `ready`
    lh->quota = quotas[l];
  }
  fill_lanes(*m, policies, quotas);
  for (std::uint32_t l = 0; l < p.lane_count; ++l) {
    const lane_view& v = m->lanes[l];
    for (std::uint64_t i = 0; i < v.capacity; ++i) {
      // FIFO: slot i starts empty for position i. lifo: every slot starts free.
      const std::uint64_t seq = v.is_lifo() ? make_seq(0, slot_state::free, kActorNone) : make_seq(i, slot_state::empty, kActorNone);
      v.slot_at_index(i)->seq.store(seq, std::memory_order_relaxed);  // relaxed: published by the release on `ready`
    }
  }
  // release: publishes every store above; pairs with the acquire load of
  // `ready` in open_segment.
  h->ready.store(kReady, std::memory_order_release);
  unlock_byte(m->fd, kCreatorByte);
  lock_description(*m);  // liveness.hpp L1
  return m;
}

result<std::shared_ptr<mapped_box>> open_segment(std::string_view name, bool read_only, bool any_owner, bool attach,
                                                 bool snapshot, std::uint64_t wait_ns) {
  if (auto r = validate_box_name(name); !r) return r.error();
  const std::string who = quote(name);
  const std::string path = shm_path(name);
  fd_guard fd;
  // A FIFO, link, directory, socket or device planted at the box path is
  // refused without blocking, following or opening it (shm_file.hpp S1-S3).
  const shm_file f = open_shm_file(path, read_only ? O_RDONLY : O_RDWR, shm_expect::segment);
  fd.fd = f.fd;
  if (fd.fd < 0) {
    if (f.refused != 0) return fail(errc::not_a_box, who + ": " + shm_refusal(f, "a shmbox box"));
    if (f.error == ENOENT)
      return fail(errc::not_found, who + " does not exist (no /dev/shm" + path + "): create it with 'shmbox create " + std::string(name) + "'");
    if (f.error == EACCES)
      return fail(errc::permission_denied, who + ": permission denied on /dev/shm" + path +
                                               ": it belongs to another user or its mode does not let you " +
                                               (read_only ? "read it" : "write it"));
    return fail_errno(f.error, who + ": cannot open /dev/shm" + path);
  }

  // A snapshot (ls, metrics: every box of the host) waits only briefly: an
  // empty file or a header never made ready, planted by anyone, must not
  // cost each listing a second.
  // A snapshot (ls, metrics) of another user's segment waits for nothing: a
  // thousand empty or never-ready files planted by a user must not cost
  // every listing or scrape ten seconds (THE TRUST RULE); its own boxes being
  // created get kSnapshotWaitNs.
  const std::uint64_t wait = wait_ns != 0 ? wait_ns
                             : snapshot   ? (f.st.st_uid == ::geteuid() ? kSnapshotWaitNs : 0)
                                          : kOpenWaitNs;
  const std::uint64_t give_up = mono_ns() + wait;
  // Another user's segment is refused before anything waits on it (a file
  // planted at the name costs nothing); checked again below.
  if (!read_only && !any_owner && f.st.st_uid != ::geteuid())
    return fail(errc::permission_denied, who + ": /dev/shm" + path + " belongs to uid " + std::to_string(f.st.st_uid) +
                                             ", not to this user (uid " + std::to_string(::geteuid()) +
                                             "); open a box of another user only on purpose: Box::open(name, {.any_owner = true}), or --any-owner");
  // liveness.hpp L3: attached before anything is read. gc holds the byte
  // exclusively only while it checks and unlinks (no waiting inside): wait
  // it out, but not forever (a process that holds it on purpose).
  if (attach && !attach_lock(fd.fd, give_up)) {
    if (errno != EAGAIN && errno != EACCES)
      return fail_errno(errno, who + ": cannot lock /dev/shm" + path + " (open file description locks)");
    return fail(errc::system_error, who + ": /dev/shm" + path + " is held by 'shmbox gc' or another process that is removing it; retry");
  }
  // A creator sizes the segment right after creating it; wait briefly for that.
  struct stat st {};
  for (;;) {
    if (::fstat(fd.fd, &st) != 0) return fail_errno(errno, who + ": fstat");
    // Unlinked (by gc or rm) between our shm_open and our attach lock.
    if (st.st_nlink == 0)
      return fail(errc::not_found, who + " was removed while it was being opened (by 'shmbox gc' or 'shmbox rm'): create it again");
    if (!read_only && !any_owner && st.st_uid != ::geteuid())
      return fail(errc::permission_denied, who + ": /dev/shm" + path + " belongs to uid " + std::to_string(st.st_uid) +
                                               ", not to this user (uid " + std::to_string(::geteuid()) +
                                               "); open a box of another user only on purpose: Box::open(name, {.any_owner = true}), or --any-owner");
    // Only an empty file can be a box whose creator has not sized it yet.
    if (st.st_size != 0 || mono_ns() > give_up) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (st.st_size < static_cast<off_t>(kSegmentHeaderBytes))
    return fail(st.st_size == 0 ? errc::incomplete : errc::truncated,
                who + ": /dev/shm" + path + " is " + std::to_string(st.st_size) +
                    " bytes, smaller than a shmbox header; it is not a usable box (remove it with 'shmbox rm " + std::string(name) + "')");
  if (static_cast<std::uint64_t>(st.st_size) > kMaxSegmentBytes + 4096)
    return fail(errc::not_a_box, who + ": /dev/shm" + path + " is larger than any shmbox box");

  auto bytes = static_cast<std::size_t>(st.st_size);
  auto m = std::make_shared<mapped_box>();
  // A snapshot reads the file into private memory: no mapping, and a
  // truncation after this read cannot reach us (a short read is what the
  // file held: the geometry check below says truncated).
  const auto read_copy = [&]() -> bool {
    // Before m->fd takes the descriptor below, and after (the wait for `ready`).
    const ssize_t got = read_whole(fd.fd >= 0 ? fd.fd : m->fd, m->base, bytes);
    if (got < 0) return false;
    if (static_cast<std::size_t>(got) < bytes) std::memset(m->base + got, 0, bytes - static_cast<std::size_t>(got));
    m->mapped_bytes = static_cast<std::size_t>(got);
    return true;
  };
  if (snapshot && read_only && bytes <= kSnapshotMaxBytes) {
    m->base = static_cast<std::byte*>(::operator new(bytes, kSnapshotAlign, std::nothrow));
    if (m->base == nullptr) return fail(errc::system_error, who + ": no memory for a copy of " + std::to_string(bytes) + " bytes");
    m->snapshot = true;
    if (!read_copy()) return fail_errno(errno, who + ": cannot read /dev/shm" + path);
    if (m->mapped_bytes < kSegmentHeaderBytes)
      return fail(errc::truncated, who + ": /dev/shm" + path + " shrank to " + std::to_string(m->mapped_bytes) +
                                       " bytes while it was read; it is not a usable box (remove it with 'shmbox rm " +
                                       std::string(name) + "')");
  } else {
    void* addr = ::mmap(nullptr, bytes, read_only ? PROT_READ : PROT_READ | PROT_WRITE, MAP_SHARED, fd.fd, 0);
    if (addr == MAP_FAILED) return mmap_failed(errno, who, bytes);
    m->base = static_cast<std::byte*>(addr);
    m->mapped_bytes = bytes;
    m->bus_ticket = bus_guard_add(addr, bytes, !read_only);  // T5 (shm_file.hpp): a shrink is not a death
  }
  m->name = std::string(name);
  m->read_only = read_only;
  m->dev = static_cast<std::uint64_t>(st.st_dev);
  m->ino = static_cast<std::uint64_t>(st.st_ino);
  m->fd = std::exchange(fd.fd, -1);
  m->mode = st.st_mode & 07777;
  m->uid = st.st_uid;

  auto* live = m->header();
  // Wait for `ready` (acquire: pairs with the creator's release), or give up.
  while (live->ready.load(std::memory_order_acquire) != kReady) {
    const std::uint64_t magic = live->magic;
    if (magic != 0 && magic != kMagic) break;  // foreign: reported below
    const std::uint64_t creator = live->creator_key;
    // L4: the creator holds its byte until `ready`; it took it before sizing.
    if (creator != 0 && !lock_held(*m, kCreatorByte))
      return fail(errc::incomplete, who + ": its creator (pid " + std::to_string(key_pid(creator)) +
                                        ") died before finishing it; remove it with 'shmbox rm " + std::string(name) + "'");
    if (mono_ns() > give_up) {
      return fail(errc::incomplete, who + " is not ready: it is being created, or its creator died; retry, or remove it with 'shmbox rm " + std::string(name) + "'");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    // A copy does not change: read it again (the size is the one fstat gave).
    if (m->snapshot && !read_copy()) return fail_errno(errno, who + ": cannot read /dev/shm" + path);
  }
  if (m->snapshot) bytes = m->mapped_bytes;
  // One private copy of the header; nothing below reads geometry from shared memory again.
  segment_header h;
  std::memcpy(static_cast<void*>(&h), live, sizeof h);
  if (h.magic != kMagic) return fail(errc::not_a_box, who + ": /dev/shm" + path + " is not a shmbox segment (wrong magic number)");
  if (h.layout_version != kLayoutVersion)
    return fail(errc::version_mismatch, who + " has layout version " + std::to_string(h.layout_version) +
                                            "; this shmbox reads version " + std::to_string(kLayoutVersion) +
                                            ": use a matching shmbox or recreate the box");
  geometry_params p;
  p.lane_count = h.lane_count;
  for (std::uint32_t l = 0; l < kMaxLanes; ++l) p.lane_capacity[l] = h.lane_capacity[l];
  p.slot_payload = h.slot_payload;
  p.max_producers = h.max_producers;
  p.stash_entries = h.stash_entries;
  if (h.ordering > kOrderingBuffer)
    return fail(errc::corrupt, who + ": unknown ordering " + std::to_string(h.ordering) +
                                   " in header: a newer shmbox created it, or it is corrupt");
  p.priority = h.ordering == kOrderingPriority || h.ordering == kOrderingBuffer;
  if (p.priority) {
    // The store is exactly one entry per slot (ring.hpp PRIORITY BOXES), and
    // one more in a custom-buffer box (CUSTOM BUFFERS); a priority box's
    // stash (options::stash) follows (THE STASH).
    std::uint64_t slots = h.ordering == kOrderingBuffer ? 1 : 0;
    for (std::uint32_t l = 0; l < kMaxLanes && l < p.lane_count; ++l) slots += p.lane_capacity[l];
    const std::uint64_t stash = p.stash_entries >= slots ? p.stash_entries - slots : 0;
    if (p.stash_entries < slots || stash > kMaxCapacity || (h.ordering == kOrderingBuffer && stash != 0))
      return fail(errc::corrupt, who + ": a priority box with " + std::to_string(p.stash_entries) + " store entries for " +
                                     std::to_string(slots) + " slots (corrupt header)");
  }
  geometry g;
  if (!compute_geometry(p, g)) return fail(errc::corrupt, who + ": header geometry is out of range (corrupt header)");
  if (h.total_bytes != g.total_bytes || h.slot_stride != g.slot_stride || h.producer_stride != g.producer_stride ||
      h.owner_offset != g.owner_offset || h.lanes_offset != g.lanes_offset || h.producers_offset != g.producers_offset ||
      h.actors_offset != g.actors_offset || h.heirs_offset != g.heirs_offset || h.actor_stride != g.actor_stride ||
      h.config_offset != g.config_offset || h.stash_stride != g.stash_stride || h.stash_offset != g.stash_offset)
    return fail(errc::corrupt, who + ": header offsets disagree with its geometry (corrupt header)");
  if (g.total_bytes > bytes)
    return fail(errc::truncated, who + ": segment is " + std::to_string(bytes) + " bytes but its header says " +
                                     std::to_string(g.total_bytes) + "; it was truncated: remove and recreate it");
  if (h.default_policy > static_cast<std::uint32_t>(policy::block))
    return fail(errc::corrupt, who + ": unknown policy " + std::to_string(h.default_policy) + " in header");
  m->geo = g;
  if (h.lease_ms > kMaxHeaderMs) return fail(errc::corrupt, who + ": lease of " + std::to_string(h.lease_ms) + " ms in header (corrupt)");
  // A post on a full block box waits this long: bounded like the lease.
  if (h.block_timeout_ms > kMaxHeaderMs)
    return fail(errc::corrupt, who + ": block timeout of " + std::to_string(h.block_timeout_ms) +
                                   " ms in header, more than a day (corrupt); remove and recreate the box");
  m->default_policy = static_cast<policy>(h.default_policy);
  m->block_timeout_ms = h.block_timeout_ms;
  m->lease_ms_ = h.lease_ms;
  // The spin comes from shared memory: bounded before use.
  m->spin_ns = std::min<std::uint32_t>(h.spin_ns, static_cast<std::uint32_t>(std::chrono::nanoseconds(kMaxSpin).count()));
  if (h.default_lane >= h.lane_count)
    return fail(errc::corrupt, who + ": default lane " + std::to_string(h.default_lane) + " in header, but it has " +
                                   std::to_string(h.lane_count) + " lanes (corrupt header)");
  m->default_lane = h.default_lane;
  bool quota_flag = false;  // kConfigQuota: some lane has a quota
  {
    box_config cfg;
    std::memcpy(static_cast<void*>(&cfg), m->base + g.config_offset, sizeof cfg);
    if (cfg.dead_letters_len > kMaxNameLength)
      return fail(errc::corrupt, who + ": dead-letter name of " + std::to_string(cfg.dead_letters_len) + " bytes (corrupt)");
    m->dead_letters.assign(cfg.dead_letters, cfg.dead_letters_len);
    if (!m->dead_letters.empty() && !validate_box_name(m->dead_letters))
      return fail(errc::corrupt, who + ": the dead-letter box name in the segment is not a valid name (corrupt)");
    if ((cfg.flags & ~kConfigKnownFlags) != 0)
      return fail(errc::corrupt, who + ": unknown settings (flags " + std::to_string(cfg.flags) +
                                     ") in the segment: a newer shmbox created it, or it is corrupt");
    if ((cfg.flags & kConfigDeadLetterRefused) != 0 && m->dead_letters.empty())
      return fail(errc::corrupt, who + ": refused posts go to dead letters, but no dead-letter box is named (corrupt)");
    m->dead_letter_refused = (cfg.flags & kConfigDeadLetterRefused) != 0;
    m->reply_box = (cfg.flags & kConfigReplyBox) != 0;
    quota_flag = (cfg.flags & kConfigQuota) != 0;
    if (cfg.buffer_len > kMaxBufferName || (cfg.buffer_len != 0) != (h.ordering == kOrderingBuffer))
      return fail(errc::corrupt, who + ": buffer type name of " + std::to_string(cfg.buffer_len) + " bytes for ordering " +
                                     std::to_string(h.ordering) + " (corrupt)");
    m->buffer_name.assign(cfg.buffer, cfg.buffer_len);
    if (!m->buffer_name.empty() && !valid_buffer_name(m->buffer_name))
      return fail(errc::corrupt, who + ": the buffer type name in the segment is not a valid name (corrupt)");
  }
  std::uint32_t policies[kMaxLanes] = {};
  std::uint32_t quotas[kMaxLanes] = {};
  for (std::uint32_t l = 0; l < p.lane_count; ++l) {
    const auto* lh = reinterpret_cast<const lane_header*>(m->base + g.lanes_offset) + l;
    const std::uint32_t cap = lh->capacity, pol = lh->policy;
    const std::uint64_t so = lh->slots_offset;
    if (cap != p.lane_capacity[l] || so != g.slots_offset[l] || pol > static_cast<std::uint32_t>(policy::block))
      return fail(errc::corrupt, who + ": lane " + std::to_string(l) + " description disagrees with the header (corrupt)");
    // A resizable lane's limit (lane_view::limit bounds it on every read as well).
    if (const std::uint32_t lim = lh->limit.load(std::memory_order_relaxed);
        lim > cap || (lim != 0 && pol == static_cast<std::uint32_t>(policy::lifo)) ||
        (p.stash_entries != 0 && pol == static_cast<std::uint32_t>(policy::lifo)) ||
        (p.priority && pol == static_cast<std::uint32_t>(policy::drop_oldest)))
      return fail(errc::corrupt, who + ": lane " + std::to_string(l) + " limit " + std::to_string(lim) + " with " +
                                     std::to_string(cap) + " slots (corrupt)");
    // A quota (ring.hpp THE QUOTA): as create allows it, and announced by the config flag, so that
    // no library that would post past it opens the box.
    // Read once (volatile: not re-read by the compiler): what is checked is what the lane keeps.
    const std::uint32_t quota = *static_cast<const volatile std::uint32_t*>(&lh->quota);
    if (quota != 0 && (quota > cap || pol == static_cast<std::uint32_t>(policy::lifo) ||
                       pol == static_cast<std::uint32_t>(policy::drop_oldest) || lh->limit.load(std::memory_order_relaxed) != 0 ||
                       p.stash_entries != 0 || !quota_flag))
      return fail(errc::corrupt, who + ": lane " + std::to_string(l) + " quota " + std::to_string(quota) + " with " +
                                     std::to_string(cap) + " slots, policy " + std::to_string(pol) + " (corrupt)");
    quotas[l] = quota;
    policies[l] = pol;
  }
  fill_lanes(*m, policies, quotas);
  lock_description(*m);  // liveness.hpp L1
  return m;
}


std::uint64_t mapped_box::incarnation() const noexcept {
  // The header is immutable once ready (a hostile writer can only change the
  // id it shows): copied out, then mixed (splitmix64's finalizer), so that
  // boxes created in the same nanosecond by different processes differ.
  std::uint64_t created = 0, creator = 0;
  std::memcpy(&created, &header()->created_unix_ns, sizeof created);
  std::memcpy(&creator, &header()->creator_key, sizeof creator);
  std::uint64_t z = created ^ (creator * 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace shmbox::detail
