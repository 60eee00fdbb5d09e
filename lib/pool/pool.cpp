// lib/pool/pool.cpp - pools (shmbox/pool.hpp): the pool segment (create, open,
// validate, list), supervise, remove, take_group. Take, give back and leases are in
// pool_take.cpp, the member side in pool_member.cpp, inspection in
// pool_inspect.cpp; the table protocol is in pool_table.hpp.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <random>
#include <thread>

#include "base/access.hpp"
#include "base/errors.hpp"
#include "base/futex.hpp"
#include "ownership/lease.hpp"
#include "pool/pool_layout.hpp"
#include "pool/pool_table.hpp"
#include "pool/pool_internal.hpp"
#include "base/process.hpp"
#include "segment/segment.hpp"
#include "base/bus_guard.hpp"
#include "base/shm_file.hpp"
#include "shmbox/inspect.hpp"
#include "shmbox/pool.hpp"

namespace shmbox {
namespace detail {
namespace {

constexpr std::uint64_t kEmptyPoolGraceNs = 50'000'000;  // an empty pool file nobody is creating: judged after this

void copy_string(char* dst, std::size_t cap, std::string_view s) noexcept {
  std::memcpy(dst, s.data(), std::min(s.size(), cap - 1));
}
// At most `cap` bytes, up to the first NUL; false when there is none (scribbled).
bool read_string(const char* src, std::size_t cap, std::string& out) {
  const void* nul = std::memchr(src, '\0', cap);
  if (nul == nullptr) return false;
  out.assign(src, static_cast<const char*>(nul));
  return true;
}

struct fd_closer {
  int fd = -1;
  ~fd_closer() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

std::string pool_incarnation(const pool_header& h) {
  // splitmix64 of the two words: equal inputs, equal ids; any change, another.
  std::uint64_t z = h.creator_key ^ (h.created_unix_ns * 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  char b[17];
  std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(z));
  return b;
}

std::string pool_shm_path(std::string_view name) { return "/shmbox-pool." + std::string(name); }

std::string member_box_name(std::string_view pool, std::uint32_t index, std::uint64_t gen) {
  return std::string(pool) + ".m" + std::to_string(index) + "." + std::to_string(gen);
}

result<void> validate_pool_name(std::string_view name) {
  if (name.size() > kMaxPoolName)
    return fail(errc::invalid_name, "invalid pool name '" + std::string(name) + "': at most " + std::to_string(kMaxPoolName) +
                                        " characters (its member boxes are named <pool>.m<index>.<generation>)");
  if (auto r = validate_box_name(name); !r)
    return fail(errc::invalid_name, "invalid pool name '" + std::string(name) +
                                        "': use 1 to 100 characters of A-Z a-z 0-9 . _ -, not starting with '.'");
  return {};
}

pool_handle::~pool_handle() {
  // process.hpp H3: a fork child's copy leaves the client entry (and the
  // leases it holds) to its parent; its lock descriptor points at /dev/null
  // there (L6) and closes with `role`.
  if (born.here_for_sure()) release_client(*this);
  if (base != nullptr) {
    bus_guard_remove(bus_ticket);  // T5: before the munmap
    ::munmap(base, bytes);
  }
  if (fd >= 0) ::close(fd);
}

std::error_code refuse_inherited(const pool_handle& h, std::string_view what, std::string_view instead) {
  if (h.born.here()) return {};
  return fail(errc::inherited_handle, h.born.inherited_sentence(what, quote_pool(h.name), instead));
}

bool compute_pool_geometry(std::uint32_t max_clients, std::uint32_t max_count, std::uint64_t& clients_offset,
                           std::uint64_t& members_offset, std::uint64_t& total_bytes) noexcept {
  if (max_clients < 1 || max_clients > kMaxPoolClients || max_count < 1 || max_count > kMaxPoolMembers) return false;
  clients_offset = kPoolStateOffset + kPoolStateBytes;
  members_offset = clients_offset + std::uint64_t{max_clients} * sizeof(pool_client);
  total_bytes = members_offset + std::uint64_t{max_count} * sizeof(pool_member);
  total_bytes = (total_bytes + 4095) / 4096 * 4096;
  return true;
}

result<std::shared_ptr<pool_handle>> open_pool_segment(std::string_view name, bool read_only, bool any_owner) {
  if (auto r = validate_pool_name(name); !r) return r.error();
  const std::string who = quote_pool(name);
  const std::string path = pool_shm_path(name);
  // What to do with a file at the pool's path that is not a usable pool.
  const std::string remove_it = ": remove it with 'shmbox pool rm " + std::string(name) + " --now'";
  fd_closer fd;
  // A FIFO, link, directory, socket or device planted at the pool's path is
  // refused without blocking, following or opening it (shm_file.hpp S1-S3).
  const shm_file f = open_shm_file(path, read_only ? O_RDONLY : O_RDWR, shm_expect::segment);
  fd.fd = f.fd;
  if (fd.fd < 0) {
    if (f.refused != 0) return fail(errc::not_a_box, who + ": " + shm_refusal(f, "a shmbox pool"));
    if (f.error == ENOENT)
      return fail(errc::not_found, who + " does not exist (no /dev/shm" + path + "): create it with 'shmbox pool create " +
                                       std::string(name) + " --command CMD'");
    if (f.error == EACCES)
      return fail(errc::permission_denied, who + ": permission denied on /dev/shm" + path +
                                               ": it belongs to another user or its mode does not let you " +
                                               (read_only ? "read it" : "write it"));
    return fail_errno(f.error, who + ": cannot open /dev/shm" + path);
  }
  struct stat st {};
  const std::uint64_t first_look = mono_ns();
  if (::fstat(fd.fd, &st) != 0) return fail_errno(errno, who + ": fstat");
  // THE TRUST RULE (shm_file.hpp T6): a pool being created is waited for
  // (up to 2 s; 50 ms for an empty file nobody holds the creator byte of)
  // only when it is this user's. Another user's file is judged as it is now:
  // anyone can plant empty files, or hold their creator byte, at any number
  // of pool names, and 'pool ls', every metrics scrape and the group
  // functions open every pool name there is.
  const bool ours = st.st_uid == ::geteuid();
  const std::uint64_t give_up = first_look + (ours ? 2'000'000'000ull : 0);
  const std::uint64_t grace = ours ? kEmptyPoolGraceNs : 0;
  for (;;) {
    if (::fstat(fd.fd, &st) != 0) return fail_errno(errno, who + ": fstat");
    if (!read_only && !any_owner && st.st_uid != ::geteuid())
      return fail(errc::permission_denied, who + ": /dev/shm" + path + " belongs to uid " + std::to_string(st.st_uid) +
                                               ", not to this user (uid " + std::to_string(::geteuid()) +
                                               "); open another user's pool only on purpose: Pool::open(name, {.any_owner = true}), or --any-owner");
    if (st.st_size != 0 || mono_ns() >= give_up) break;
    // An empty file: a creator sizes it right away, holding its byte (L4)
    // from just after its O_EXCL create. Nobody holding it for a moment:
    // nobody is creating it.
    if (!lock_held_fd(fd.fd, kPoolCreatorByte) && mono_ns() - first_look > grace) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (st.st_size == 0) return fail(errc::incomplete, who + " is not a valid pool (an empty file)" + remove_it);
  if (st.st_size < static_cast<off_t>(kPoolStateOffset + kPoolStateBytes))
    return fail(errc::truncated, who + " is not a valid pool (" + std::to_string(st.st_size) + " bytes, too small for one)" + remove_it);
  if (static_cast<std::uint64_t>(st.st_size) > (1ull << 30))
    return fail(errc::not_a_box, who + " is not a valid pool (" + std::to_string(st.st_size) + " bytes, larger than any pool)" + remove_it);
  const auto bytes = static_cast<std::size_t>(st.st_size);
  void* addr = ::mmap(nullptr, bytes, read_only ? PROT_READ : PROT_READ | PROT_WRITE, MAP_SHARED, fd.fd, 0);
  if (addr == MAP_FAILED) return fail_errno(errno, who + ": mmap");
  auto h = std::make_shared<pool_handle>();
  h->name = std::string(name);
  h->base = static_cast<std::byte*>(addr);
  h->bytes = bytes;
  h->bus_ticket = bus_guard_add(addr, bytes, !read_only);  // T5 (shm_file.hpp): a shrink is not a death
  h->read_only = read_only;
  h->fd = std::exchange(fd.fd, -1);
  h->dev = static_cast<std::uint64_t>(st.st_dev);
  h->ino = static_cast<std::uint64_t>(st.st_ino);
  h->mode = st.st_mode & 07777;
  h->uid = st.st_uid;
  h->gid = st.st_gid;

  auto* live = reinterpret_cast<pool_header*>(h->base);
  // Acquire: pairs with the creator's release of `ready`.
  while (live->ready.load(std::memory_order_acquire) != kReady) {
    if (live->magic != 0 && live->magic != kPoolMagic) break;
    // L4: a creator holds its byte until `ready`.
    if (!lock_held_fd(h->fd, kPoolCreatorByte)) {
      if (live->creator_key != 0)
        return fail(errc::incomplete, who + " is not a valid pool (its creator died before finishing it)" + remove_it);
      if (mono_ns() - first_look >= grace)
        return fail(errc::incomplete, who + " is not a valid pool (no pool header, and nobody is creating one)" + remove_it);
    }
    if (mono_ns() >= give_up)
      return fail(errc::incomplete, who + " is not ready: it is being created; retry, or if it stays so" + remove_it);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::memcpy(static_cast<void*>(&h->hdr), live, sizeof h->hdr);
  const pool_header& p = h->hdr;
  if (p.magic != kPoolMagic)
    return fail(errc::not_a_box, who + " is not a valid pool (/dev/shm" + path + " has no pool header: wrong magic number)" + remove_it);
  if (p.layout_version != kPoolLayoutVersion)
    return fail(errc::version_mismatch, who + " was made by an incompatible shmbox (pool layout " + std::to_string(p.layout_version) +
                                            ", this library reads " + std::to_string(kPoolLayoutVersion) +
                                            "): use a matching shmbox, or" + remove_it);
  std::uint64_t co = 0, mo = 0, total = 0;
  if (!compute_pool_geometry(p.max_clients, p.max_count, co, mo, total) || co != p.clients_offset || mo != p.members_offset ||
      total != p.total_bytes || p.init_count > p.max_count || p.queue_max > p.max_clients || p.member_lanes < 1 ||
      p.member_lanes > kMaxLanes || p.cull_after_ms > kMaxPoolMs || p.start_timeout_ms > kMaxPoolMs ||
      p.stop_grace_ms > kMaxPoolMs || p.health_interval_ms > kMaxPoolMs || p.health_timeout_ms > kMaxPoolMs ||
      p.max_lifetime_ms > kMaxPoolMs || (p.max_lifetime_jitter_ms != 0 && p.max_lifetime_jitter_ms >= p.max_lifetime_ms) ||
      p.auto_grow_plus1 > p.max_count + 1)
    return fail(errc::corrupt, who + " is not a valid pool (its header breaks the pool's invariants)" + remove_it + " and create it again");
  if (total > bytes)
    return fail(errc::truncated, who + " is not a valid pool (the segment is shorter than its header says)" + remove_it + " and create it again");
  const auto* cfg = reinterpret_cast<const pool_config*>(h->base + kPoolConfigOffset);
  std::string cfg_name;
  if (!read_string(cfg->name, sizeof cfg->name, cfg_name) || !read_string(cfg->group, sizeof cfg->group, h->group) ||
      !read_string(cfg->dead_letters, sizeof cfg->dead_letters, h->dead_letters) ||
      !read_string(cfg->command, sizeof cfg->command, h->command) ||
      !read_string(cfg->init_command, sizeof cfg->init_command, h->init_command) || cfg_name != name)
    return fail(errc::corrupt, who + " is not a valid pool (its configuration is not valid text)" + remove_it + " and create it again");
  return h;
}

options member_box_options(const pool_handle& h) {
  options o;
  const pool_header& p = h.hdr;
  o.capacity = p.member_lane_capacity[0];
  o.slot_size = p.member_slot_size;
  o.overflow = static_cast<policy>(p.member_policy);
  o.max_producers = p.member_max_producers;
  o.mode = p.member_mode;
  o.block_timeout = std::chrono::milliseconds(p.member_block_timeout_ms);
  o.spin = std::chrono::nanoseconds(p.member_spin_ns);
  o.dead_letters = h.dead_letters;
  if (p.member_lanes > 1) {
    for (std::uint32_t l = 0; l < p.member_lanes; ++l)
      o.lanes.push_back({p.member_lane_capacity[l], static_cast<policy>(p.member_lane_policy[l])});
  }
  if (p.member_default_lane < kMaxLanes) o.default_lane = p.member_default_lane;
  return o;
}

namespace {

std::string validate(std::string_view name, const pool_options& o) {
  const std::string who = quote_pool(name);
  if (o.max_count < 1 || o.max_count > kMaxPoolMembers)
    return who + ": max_count " + std::to_string(o.max_count) + " is outside 1.." + std::to_string(kMaxPoolMembers);
  if (o.init_count > o.max_count)
    return who + ": init_count " + std::to_string(o.init_count) + " is more than max_count " + std::to_string(o.max_count);
  if (o.table_size != 0 && (o.table_size < o.max_count || o.table_size > kMaxPoolMembers))
    return who + ": table_size " + std::to_string(o.table_size) + " must be between max_count (" + std::to_string(o.max_count) +
           ") and " + std::to_string(kMaxPoolMembers) + " (0: max_count)";
  if (o.max_clients < 1 || o.max_clients > kMaxPoolClients)
    return who + ": max_clients " + std::to_string(o.max_clients) + " is outside 1.." + std::to_string(kMaxPoolClients);
  if (o.queue_max > o.max_clients)
    return who + ": queue_max " + std::to_string(o.queue_max) + " is more than max_clients " + std::to_string(o.max_clients) +
           " (each waiting taker is a client)";
  if (o.command.empty()) return who + ": no member command: give the program that serves a member's box (--command)";
  if (o.command.size() >= kMaxPoolCommand || o.command.find('\0') != std::string::npos)
    return who + ": the member command must be under " + std::to_string(kMaxPoolCommand) + " bytes, without NUL";
  if (o.group.size() >= 128 || o.group.find('\0') != std::string::npos) return who + ": group names are at most 127 bytes";
  if (o.init_command.size() >= kMaxPoolInitCommand || o.init_command.find('\0') != std::string::npos)
    return who + ": the init command must be under " + std::to_string(kMaxPoolInitCommand) +
           " bytes, without NUL (put a longer one in a script)";
  for (const auto ms : {o.cull_after, o.start_timeout, o.stop_grace, o.health_interval, o.health_timeout, o.max_lifetime,
                        o.max_lifetime_jitter})
    if (ms.count() < 0 || ms.count() > kMaxPoolMs) return who + ": durations must be between 0 and one day";
  if (o.max_lifetime_jitter.count() > 0 && o.max_lifetime_jitter >= o.max_lifetime)
    return who + ": max_lifetime_jitter (" + std::to_string(o.max_lifetime_jitter.count()) + " ms) must be less than max_lifetime (" +
           std::to_string(o.max_lifetime.count()) + " ms): a member's lifetime is max_lifetime +/- the jitter";
  if (o.auto_grow_threshold && *o.auto_grow_threshold > o.max_count)
    return who + ": auto_grow_threshold " + std::to_string(*o.auto_grow_threshold) + " is more than max_count " +
           std::to_string(o.max_count) + " (there can never be more free members than that)";
  if (o.start_timeout.count() == 0) return who + ": start_timeout must be more than 0";
  if (o.health_interval.count() > 0 && o.health_timeout.count() == 0) return who + ": a health check needs a health_timeout";
  if (o.mode > 07777 || o.member.mode > 07777) return who + ": mode must be an octal file mode";
  return {};
}

}  // namespace
}  // namespace detail

using namespace detail;

// --- Pool ----------------------------------------------------------------

Pool::Pool(std::shared_ptr<detail::pool_handle> h) : h_(std::move(h)) {}
Pool::Pool(Pool&&) noexcept = default;
Pool& Pool::operator=(Pool&&) noexcept = default;
Pool::~Pool() = default;

const std::string& Pool::name() const noexcept { return h_->name; }
std::error_code Pool::last_error() const noexcept { return h_->last_error; }

result<void> Pool::create(std::string_view name, const pool_options& opts) {
  if (auto r = validate_pool_name(name); !r) return r.error();
  const std::string who = quote_pool(name);
  if (std::string why = validate(name, opts); !why.empty()) return fail(errc::invalid_argument, why);
  if (!opts.dead_letters.empty()) {
    if (auto r = validate_box_name(opts.dead_letters); !r) return r.error();
  }
  // The member boxes must be creatable: checked now with their names' rules and geometry limits.
  const options mo = [&] {
    options o = opts.member;
    o.dead_letters = opts.dead_letters;
    o.lease = std::chrono::milliseconds(0);
    return o;
  }();
  const std::uint32_t lanes = mo.lanes.empty() ? 1 : static_cast<std::uint32_t>(mo.lanes.size());
  if (lanes > kMaxLanes || mo.capacity < 1 || mo.capacity > kMaxCapacity || mo.slot_size < 1 || mo.slot_size > kMaxSlotSize ||
      mo.max_producers < 1 || mo.max_producers > kMaxProducers || mo.block_timeout.count() < 0 ||
      mo.block_timeout.count() > kMaxHeaderMs || mo.spin.count() < 0 || mo.spin > kMaxSpin ||
      (mo.default_lane && *mo.default_lane >= lanes))
    return fail(errc::invalid_argument, who + ": the member box options are out of range (see shmbox::options)");
  const std::uint32_t entries = std::max(opts.table_size, opts.max_count);
  std::uint64_t co = 0, mo_off = 0, total = 0;
  if (!compute_pool_geometry(opts.max_clients, entries, co, mo_off, total))
    return fail(errc::invalid_argument, who + ": max_clients or max_count out of range");

  const std::string path = pool_shm_path(name);
  fd_closer fd;
  fd.fd = ::shm_open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd.fd < 0) {
    if (errno == EEXIST)
      return fail(errc::exists, who + " already exists (/dev/shm" + path + "): pick another name or remove it with 'shmbox pool rm " +
                                    std::string(name) + "'");
    return fail_errno(errno, who + ": cannot create /dev/shm" + path);
  }
  auto unlink_and = [&](std::error_code ec) {
    ::shm_unlink(path.c_str());
    return ec;
  };
  // L4: the creator's byte is held until `ready`.
  if (!try_lock_byte(fd.fd, kPoolCreatorByte, false)) return unlink_and(fail_errno(errno, who + ": cannot lock its segment"));
  if (::fchmod(fd.fd, opts.mode) != 0) return unlink_and(fail_errno(errno, who + ": fchmod"));
  if (const int rc = ::posix_fallocate(fd.fd, 0, static_cast<off_t>(total)); rc != 0) {
    if (rc == ENOSPC || rc == EFBIG || rc == ENOMEM)
      return unlink_and(fail(errc::no_space, who + " needs " + std::to_string(total) + " bytes of shared memory: free space in /dev/shm"));
    return unlink_and(fail_errno(rc, who + ": posix_fallocate"));
  }
  void* addr = ::mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd.fd, 0);
  if (addr == MAP_FAILED) return unlink_and(fail_errno(errno, who + ": mmap"));
  const int bus_ticket = bus_guard_add(addr, total, true);  // T5: the mode may already let others truncate it
  auto* base = static_cast<std::byte*>(addr);
  auto* h = reinterpret_cast<pool_header*>(base);
  // Fresh pages read as zero: every state, key and counter starts at 0 (empty, none).
  h->magic = kPoolMagic;
  h->layout_version = kPoolLayoutVersion;
  h->total_bytes = total;
  h->creator_key = self_key();
  h->created_unix_ns = unix_ns();
  h->init_count = opts.init_count;
  h->max_count = entries;  // the table; max_count itself is a live word when it is less (RC1)
  if (entries != opts.max_count)
    reinterpret_cast<pool_state*>(base + kPoolStateOffset)->live_max_count.store(std::uint64_t{opts.max_count} + 1, std::memory_order_relaxed);
  h->queue_max = opts.queue_max;
  h->max_clients = opts.max_clients;
  h->cull_after_ms = static_cast<std::uint32_t>(opts.cull_after.count());
  h->start_timeout_ms = static_cast<std::uint32_t>(opts.start_timeout.count());
  h->stop_grace_ms = static_cast<std::uint32_t>(opts.stop_grace.count());
  h->health_interval_ms = static_cast<std::uint32_t>(opts.health_interval.count());
  h->health_timeout_ms = static_cast<std::uint32_t>(opts.health_timeout.count());
  h->max_lifetime_ms = static_cast<std::uint32_t>(opts.max_lifetime.count());
  h->max_lifetime_jitter_ms = static_cast<std::uint32_t>(opts.max_lifetime_jitter.count());
  h->auto_grow_plus1 = opts.auto_grow_threshold ? *opts.auto_grow_threshold + 1 : 0;
  h->member_slot_size = mo.slot_size;
  h->member_policy = static_cast<std::uint32_t>(mo.overflow);
  h->member_lanes = lanes;
  h->member_max_producers = mo.max_producers;
  h->member_mode = mo.mode;
  h->member_block_timeout_ms = static_cast<std::uint32_t>(mo.block_timeout.count());
  h->member_spin_ns = static_cast<std::uint32_t>(mo.spin.count());
  for (std::uint32_t l = 0; l < lanes; ++l) {
    const bool one = mo.lanes.empty();
    h->member_lane_capacity[l] = one || mo.lanes[l].capacity == 0 ? mo.capacity : mo.lanes[l].capacity;
    h->member_lane_policy[l] = static_cast<std::uint32_t>(one || !mo.lanes[l].overflow ? mo.overflow : *mo.lanes[l].overflow);
  }
  h->member_default_lane = mo.default_lane ? *mo.default_lane : kMaxLanes;
  h->clients_offset = co;
  h->members_offset = mo_off;
  auto* cfg = reinterpret_cast<pool_config*>(base + kPoolConfigOffset);
  copy_string(cfg->name, sizeof cfg->name, name);
  copy_string(cfg->group, sizeof cfg->group, opts.group);
  copy_string(cfg->dead_letters, sizeof cfg->dead_letters, opts.dead_letters);
  copy_string(cfg->command, sizeof cfg->command, opts.command);
  copy_string(cfg->init_command, sizeof cfg->init_command, opts.init_command);
  h->ready.store(kReady, std::memory_order_release);  // pairs with the acquire in open_pool_segment
  bus_guard_remove(bus_ticket);
  ::munmap(addr, total);
  return {};
}

result<Pool> Pool::open(std::string_view name, const open_options& opts) {
  auto h = open_pool_segment(name, false, opts.any_owner);
  if (!h) return h.error();
  return Pool(std::move(*h));
}

result<std::vector<std::string>> Pool::list() {
  std::vector<std::string> names;
  if (!shm_names("shmbox-pool.", names)) return fail_errno(errno, "cannot list /dev/shm");
  // compare(), not <: a string operator<=> instantiated here would be exported (tests/unit/exported_symbols.py).
  std::sort(names.begin(), names.end(), [](const std::string& a, const std::string& b) { return a.compare(b) < 0; });
  return names;
}

namespace detail {
namespace {

// Whether a user other than this process's could have written the pool's
// stored configuration: the segment is group- or other-writable, or is
// another user's (its owner may write it). Such a pool's stored command and
// dead-letter box are never used by a supervisor (pool.hpp, supervise_options).
bool writable_by_others(const pool_handle& h) noexcept { return h.uid != ::geteuid() || (h.mode & 022) != 0; }

std::string mode_text(std::uint32_t mode) {
  char b[8];
  std::snprintf(b, sizeof b, "%04o", mode & 07777);
  return b;
}

// T4 for the member boxes a supervisor makes out of a pool others may
// write: no more writers than the pool has (as shm_writers_within(box,
// pool) would say), whatever member mode is stored: everyone only when
// everyone may write the pool; the box's group (this process's, which
// creates it) only when it is the pool's group and the pool is g+w; only
// permission bits, and always the creator's 0600 (Box::create requires it).
std::uint32_t member_mode_within(const pool_handle& h, std::uint32_t mode) noexcept {
  mode = (mode & 0777) | 0600;
  if ((h.mode & S_IWOTH) == 0) {
    mode &= ~static_cast<std::uint32_t>(S_IWOTH);
    if ((h.mode & S_IWGRP) == 0 || h.gid != ::getegid()) mode &= ~static_cast<std::uint32_t>(S_IWGRP);
  }
  return mode;
}

}  // namespace
}  // namespace detail

result<void> Pool::supervise(const supervise_options& opts) {
  if (const std::error_code ec = refuse_inherited(*h_, "Pool", "open the pool in the child (Pool::open) to supervise it")) return ec;
  std::lock_guard<std::recursive_mutex> g(h_->mu);
  if (opts.command) {
    if (opts.command->empty() || opts.command->size() >= kMaxPoolCommand || opts.command->find('\0') != std::string::npos)
      return fail(errc::invalid_argument, quote_pool(h_->name) + ": the member command must be 1 to " +
                                              std::to_string(kMaxPoolCommand - 1) + " bytes, without NUL");
  }
  if (opts.dead_letters && !opts.dead_letters->empty()) {
    if (auto r = validate_box_name(*opts.dead_letters); !r) return r.error();
  }
  if (opts.init_command && (opts.init_command->size() >= kMaxPoolInitCommand || opts.init_command->find('\0') != std::string::npos))
    return fail(errc::invalid_argument, quote_pool(h_->name) + ": the init command must be under " +
                                            std::to_string(kMaxPoolInitCommand) + " bytes, without NUL");
  if (writable_by_others(*h_)) {
    const std::string why = quote_pool(h_->name) + " can be written by other users (mode " + mode_text(h_->mode) + ", owner uid " +
                            std::to_string(h_->uid) + "), so its stored ";
    if (!opts.command)
      return fail(errc::permission_denied,
                  why + "member command may not be what its creator wrote: give the command to run on the supervisor's own command line "
                        "('shmbox pool run " + h_->name + " --command CMD')");
    if (!opts.dead_letters && !h_->dead_letters.empty())
      return fail(errc::permission_denied,
                  why + "dead-letter box name may not be what its creator wrote: give it on the supervisor's own command line ("
                        "'--dead-letters " + h_->dead_letters + "', or --dead-letters '' to count those messages as lost)");
    if (!opts.init_command && !h_->init_command.empty())
      return fail(errc::permission_denied,
                  why + "init command may not be what its creator wrote: give it on the supervisor's own command line ("
                        "'--init-command CMD', or --init-command '' for none)");
  }
  if (writable_by_others(*h_)) {
    // T4: the stored member mode may be a writer's too: the member boxes get no more writers than the pool.
    const std::uint32_t mode = member_mode_within(*h_, h_->hdr.member_mode);
    if (mode != h_->hdr.member_mode && opts.log)
      opts.log("member boxes are made with mode " + mode_text(mode) + ", not the stored " + mode_text(h_->hdr.member_mode) +
               ": no more users may write them than may write the pool (mode " + mode_text(h_->mode) + ")");
    h_->hdr.member_mode = mode;
  }
  if (opts.command) h_->command = *opts.command;
  if (opts.dead_letters) h_->dead_letters = *opts.dead_letters;
  if (opts.init_command) h_->init_command = *opts.init_command;
  // TL3: every wait for the table below ends when opts.stop is set (SIGTERM
  // to `shmbox pool run` while a stopped process holds the table).
  h_->stop = opts.stop;
  struct unset_stop {
    pool_handle& h;
    ~unset_stop() { h.stop = nullptr; }
  } unset{*h_};
  const auto stopped = [&] { return opts.stop != nullptr && opts.stop->load(); };
  if (auto r = ensure_client(*h_, pool_role::standby, mono_ns() + 5'000'000'000ull); !r) return stopped() ? result<void>{} : r.error();
  pool_client* me = h_->client_at(static_cast<std::uint32_t>(h_->client));
  if (me->role.load(std::memory_order_relaxed) == static_cast<std::uint64_t>(pool_role::taker)) {
    // A handle that took members before: it joins the line of standbys now (SR1).
    table_txn t(*h_, mono_ns() + 5'000'000'000ull);
    if (!t.locked()) return stopped() ? result<void>{} : table_busy(h_->name, "retry");
    const std::uint64_t order = t.read(h_->state()->next_order) + 1;
    t.write(h_->state()->next_order, order);
    t.write(me->order, order);
    t.write(me->role, static_cast<std::uint64_t>(pool_role::standby));
    t.commit("client");
  }
  return run_supervisor(*h_, opts, UINT64_MAX);
}

result<void> Pool::remove(std::string_view name, removal how, std::chrono::nanoseconds timeout) {
  const std::uint64_t deadline = saturating_deadline(timeout);
  auto hr = open_pool_segment(name, false, false);
  if (!hr) {
    // Garbage at a pool's name (an empty file, a creator that died, a damaged
    // or foreign header): removed at once on request, never gracefully.
    if (how == removal::immediate && unusable_pool_file(hr.error())) return remove_pool_file(name, hr.error());
    return hr.error();
  }
  auto h = std::move(*hr);
  // A removal starts nothing (pool_supervisor.cpp RM2): it needs no command,
  // and keeps none that it read from the segment.
  h->command.clear();
  h->init_command.clear();
  // A configuration others could have written is not acted on (Pool::supervise):
  // messages of the members stopped here are counted lost, not posted to a box it names.
  if (writable_by_others(*h)) h->dead_letters.clear();
  std::lock_guard<std::recursive_mutex> g(h->mu);
  if (auto r = ensure_client(*h, pool_role::standby, std::max<std::uint64_t>(deadline, mono_ns() + 1'000'000'000ull)); !r) {
    if (how == removal::immediate && r.error() == errc::timed_out) return remove_pool_file(name, r.error(), h->ino, h->dev);
    return r.error();
  }
  {
    table_txn t(*h, std::max<std::uint64_t>(deadline, mono_ns() + 1'000'000'000ull));
    if (!t.locked()) {
      // A table nobody lets go of (a stopped process, or one that holds the
      // lock without the protocol): immediate removal unlinks the segment;
      // its supervisor sees it gone and stops its workers (E).
      if (how == removal::immediate) return remove_pool_file(name, table_busy(name, "retry"), h->ino, h->dev);
      return table_busy(name, "retry");
    }
    const std::uint64_t want = how == removal::immediate ? 2 : 1;
    if (t.read(h->state()->removing) < want) t.write(h->state()->removing, want);
    for (std::uint32_t c = 0; c < h->max_clients(); ++c)
      if (t.read(h->client_at(c)->wait_ticket) != 0) t.wake_client(c);
    t.wake_supervisor();
    t.commit("remove");
  }
  // The running supervisor stops the members and removes the segment; with
  // none, this call does it, as a remover that starts nothing (RM2).
  return run_supervisor(*h, {}, deadline, how == removal::immediate ? 2 : 1);
}

namespace detail {

bool unusable_pool_file(std::error_code ec) noexcept {
  return ec == errc::incomplete || ec == errc::truncated || ec == errc::corrupt || ec == errc::version_mismatch ||
         ec == errc::not_a_box;
}

result<void> remove_pool_file(std::string_view name, std::error_code why, std::uint64_t ino, std::uint64_t dev) {
  const std::string path = pool_shm_path(name);
  // Only a regular file, not followed, and (when given) still the file we judged.
  shm_file f = open_shm_file(path, O_RDONLY, shm_expect::segment);
  fd_closer fd{f.fd};
  if (f.refused != 0) return fail(errc::not_a_box, quote_pool(name) + ": " + shm_refusal(f, "a shmbox pool"));
  if (fd.fd < 0) return why;  // gone meanwhile, or unreadable: the first sentence stands
  const struct stat& st = f.st;
  if (ino != 0 && (static_cast<std::uint64_t>(st.st_ino) != ino || static_cast<std::uint64_t>(st.st_dev) != dev)) return {};  // replaced meanwhile: not ours to judge
  if (::shm_unlink(path.c_str()) != 0 && errno != ENOENT) {
    if (errno == EPERM || errno == EACCES)
      return fail(errc::permission_denied, quote_pool(name) + ": cannot remove /dev/shm" + path + ": it belongs to uid " +
                                               std::to_string(st.st_uid) + "; that user or root may remove it");
    return fail_errno(errno, quote_pool(name) + ": cannot remove /dev/shm" + path);
  }
  return {};
}

}  // namespace detail

namespace {

// The pools of `group` (pooler's group_pools), as inspect_pool sees them
// without the ledger's snapshot; pools that cannot be read are left out. Only
// pools Pool::open accepts: this user's. A group is a label that any user may
// write into a pool of their own, so another user's pool naming it is not
// taken from or removed (T3); `others` counts those.
result<std::vector<pool_info>> group_pools(std::string_view group, std::uint32_t* others = nullptr) {
  auto names = Pool::list();
  if (!names) return names.error();
  std::vector<pool_info> out;
  for (const auto& n : *names) {
    auto info = inspect_pool_impl(n, false);
    if (!info || info->group != group) continue;
    if (info->uid != ::geteuid()) {
      if (others != nullptr) ++*others;
      continue;
    }
    out.push_back(std::move(*info));
  }
  return out;
}

}  // namespace

result<std::uint32_t> Pool::cull(std::chrono::milliseconds idle, std::chrono::nanoseconds timeout) {
  if (const std::error_code ec = refuse_inherited(*h_, "Pool", "open the pool in the child (Pool::open) to cull it")) return ec;
  std::lock_guard<std::recursive_mutex> g(h_->mu);
  if (idle.count() < 0 || idle.count() > kMaxPoolMs)
    return fail(errc::invalid_argument, quote_pool(h_->name) + ": cull's idle time must be 0 to " + std::to_string(kMaxPoolMs) +
                                            " ms (24 h), not " + std::to_string(idle.count()) + " ms");
  if (h_->read_only) return fail(errc::permission_denied, quote_pool(h_->name) + " was opened read-only; open it with Pool::open to cull it");
  const std::uint64_t deadline = saturating_deadline(timeout);
  if (auto r = ensure_client(*h_, pool_role::taker, deadline); !r) return r.error();
  pool_state* st = h_->state();
  std::uint32_t mine = 0;
  {
    table_txn t(*h_, deadline);
    if (!t.locked()) return table_busy(h_->name, "retry");
    if (t.read(st->removing) != 0)
      return fail(errc::pool_removed, quote_pool(h_->name) + " is being removed: its members stop anyway");
    if (!supervisor_alive(*h_))
      return fail(errc::refused, quote_pool(h_->name) + " has no running supervisor to stop its members: start one ('shmbox pool run " +
                                     h_->name + "'), then cull");
    // CU (pool_supervisor.cpp): a new seq, and the least idle time of the
    // requests not served yet (this one and any still pending).
    const std::uint64_t asked = t.read(st->cull_asked);
    const std::uint64_t done = t.read(st->cull_done);
    std::uint64_t idle_ms = static_cast<std::uint64_t>(idle.count());
    if ((asked >> 32) != (done >> 32)) idle_ms = std::min<std::uint64_t>(idle_ms, asked & 0xFFFFFFFFu);
    mine = static_cast<std::uint32_t>((asked >> 32) + 1);
    if (mine == static_cast<std::uint32_t>(done >> 32)) ++mine;  // (a forged pair: never a seq already answered)
    t.write(st->cull_asked, (std::uint64_t{mine} << 32) | idle_ms);
    t.wake_supervisor();
    t.commit("cull");
  }
  // The answer: cull_done carries our seq or a later one (a pass that
  // served a later request served ours too: it asked no more idle time).
  for (;;) {
    const std::uint64_t done = st->cull_done.load(std::memory_order_relaxed);
    if (static_cast<std::int32_t>(static_cast<std::uint32_t>(done >> 32) - mine) >= 0)
      return std::min<std::uint32_t>(static_cast<std::uint32_t>(done & 0xFFFFFFFFu), h_->max_count());
    if (st->removing.load(std::memory_order_relaxed) != 0)
      return fail(errc::pool_removed, quote_pool(h_->name) + " is being removed: its members stop anyway");
    if (mono_ns() >= deadline)
      return fail(errc::timed_out, quote_pool(h_->name) + ": its supervisor did not answer the cull before the timeout (is 'shmbox pool run " +
                                       h_->name + "' still running, or stopped?); the request stays and is served when it runs");
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

result<void> Pool::reconfigure(const pool_changes& c, std::chrono::nanoseconds timeout) {
  if (const std::error_code ec = refuse_inherited(*h_, "Pool", "open the pool in the child (Pool::open) to reconfigure it")) return ec;
  std::lock_guard<std::recursive_mutex> g(h_->mu);
  const std::string who = quote_pool(h_->name);
  if (h_->read_only) return fail(errc::permission_denied, who + " was opened read-only; open it with Pool::open to reconfigure it");
  if (c.cull_after && (c.cull_after->count() < 0 || c.cull_after->count() > kMaxPoolMs))
    return fail(errc::invalid_argument, who + ": cull_after must be between 0 and one day");
  if (c.max_count && (*c.max_count < 1 || *c.max_count > h_->max_count()))
    return fail(errc::invalid_argument, who + ": max_count " + std::to_string(*c.max_count) + " is outside 1.." +
                                            std::to_string(h_->max_count()) + ", its table_size (fixed at creation: create the pool with a larger "
                                            "--table-size to leave room)");
  if (c.queue_max && *c.queue_max > h_->max_clients())
    return fail(errc::invalid_argument, who + ": queue_max " + std::to_string(*c.queue_max) + " is more than its max_clients " +
                                            std::to_string(h_->max_clients()) + " (each waiting taker is a client)");
  const std::uint64_t deadline = saturating_deadline(timeout);
  if (auto r = ensure_client(*h_, pool_role::taker, deadline); !r) return r.error();
  pool_state* st = h_->state();
  std::uint64_t mine = 0;
  bool supervised = false;
  {
    table_txn t(*h_, deadline);
    if (!t.locked()) return table_busy(h_->name, "retry");
    if (t.read(st->removing) != 0) return fail(errc::pool_removed, who + " is being removed: it cannot be reconfigured");
    const pool_limits old = live_limits(*h_, t);
    pool_limits now = old;
    if (c.max_count) now.max_count = *c.max_count;
    if (c.init_count) now.init_count = *c.init_count;
    if (c.queue_max) now.queue_max = *c.queue_max;
    if (c.cull_after) now.cull_after_ms = static_cast<std::uint32_t>(c.cull_after->count());
    if (c.auto_grow_threshold) now.auto_grow_plus1 = *c.auto_grow_threshold == kNoAutoGrow ? 0 : *c.auto_grow_threshold + 1;
    if (!c.init_count) now.init_count = std::min(now.init_count, now.max_count);  // a lowered max_count takes init_count down with it
    if (now.init_count > now.max_count)
      return fail(errc::invalid_argument, who + ": init_count " + std::to_string(now.init_count) + " would be more than max_count " +
                                              std::to_string(now.max_count) + ": raise max_count too");
    if (c.auto_grow_threshold && now.auto_grow_plus1 > now.max_count + 1)
      return fail(errc::invalid_argument, who + ": auto_grow_threshold " + std::to_string(now.auto_grow_plus1 - 1) +
                                              " would be more than max_count " + std::to_string(now.max_count));
    now.auto_grow_plus1 = std::min(now.auto_grow_plus1, now.max_count + 1);  // a lowered max_count takes the threshold down with it
    // pooler: lowering max_count below the members alive stops that many
    // free ones, and is refused when fewer are free.
    const table_counts n = count_table(*h_, t);
    const auto gauge = [&](member_state s) { return n.by_state[static_cast<std::uint32_t>(s)]; };
    const std::uint32_t alive = gauge(member_state::free) + gauge(member_state::in_use) + gauge(member_state::checking);
    if (now.max_count < old.max_count && alive > now.max_count && gauge(member_state::free) < alive - now.max_count)
      return fail(errc::refused, who + ": max_count " + std::to_string(now.max_count) + " would need " +
                                     std::to_string(alive - now.max_count) + " of its " + std::to_string(alive) + " members stopped, and only " +
                                     std::to_string(gauge(member_state::free)) +
                                     " are free (pooler's not_enough_free_workers_to_shutdown): nothing changed; retry when more are given back");
    t.write(st->live_init_count, std::uint64_t{now.init_count} + 1);
    t.write(st->live_max_count, std::uint64_t{now.max_count} + 1);
    t.write(st->live_queue_max, std::uint64_t{now.queue_max} + 1);
    t.write(st->live_cull_after_ms, std::uint64_t{now.cull_after_ms} + 1);
    t.write(st->live_auto_grow, std::uint64_t{now.auto_grow_plus1} + 1);
    mine = t.read(st->reconf_asked) + 1;
    if (mine == t.read(st->reconf_done)) ++mine;  // (a forged pair: never one already answered)
    t.write(st->reconf_asked, mine);
    t.wake_supervisor();
    supervised = supervisor_alive(*h_);
    t.commit("reconfigure");
    // RC2: the newest waiters beyond a lowered queue_max are refused.
    if (n.waiters > now.queue_max) {
      std::vector<std::pair<std::uint64_t, std::uint32_t>> line;  // (ticket, client)
      for (std::uint32_t i = 0; i < h_->max_clients(); ++i) {
        const pool_client* w = h_->client_at(i);
        const std::uint64_t ticket = t.read(w->wait_ticket);
        if (ticket != 0 && t.read(w->granted) == 0 && client_alive(*h_, i, t.read(w->key))) line.emplace_back(ticket, i);
      }
      std::sort(line.begin(), line.end());
      for (std::size_t k = now.queue_max; k < line.size(); ++k) {
        if (t.room() < 2) t.commit("shrink queue");
        pool_client* w = h_->client_at(line[k].second);
        t.write(w->wait_ticket, 0);
        t.write(w->granted, kGrantRefused);
        t.wake_client(line[k].second);
      }
      t.commit("shrink queue");
    }
  }
  if (!supervised) return {};  // applied by the next supervisor (RC3)
  for (;;) {
    const std::uint64_t done = st->reconf_done.load(std::memory_order_relaxed);
    if (static_cast<std::int64_t>(done - mine) >= 0) return {};
    if (st->removing.load(std::memory_order_relaxed) != 0)
      return fail(errc::pool_removed, who + " is being removed: its members stop anyway");
    if (mono_ns() >= deadline)
      return fail(errc::timed_out, who + ": the new values are set, but its supervisor did not apply them before the timeout (is 'shmbox pool run " +
                                       h_->name + "' still running, or stopped?); it applies them when it runs");
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

result<std::vector<std::string>> Pool::remove_group(std::string_view group, removal how, std::chrono::nanoseconds timeout) {
  const std::uint64_t deadline = saturating_deadline(timeout);
  auto pools = group_pools(group);
  if (!pools) return pools.error();
  std::vector<std::string> mine;
  for (const auto& info : *pools) mine.push_back(info.name);
  // First every pool stops taking (a take_group would otherwise move to the
  // pools not yet reached), then each is waited for, within one deadline.
  for (const auto& n : mine) (void)Pool::remove(n, how, std::chrono::nanoseconds(0));
  std::vector<std::string> removed;
  std::string failed;
  std::error_code first;
  for (const auto& n : mine) {
    const std::uint64_t now = mono_ns();
    auto r = Pool::remove(n, how, std::chrono::nanoseconds(deadline > now ? deadline - now : 0));
    if (r || r.error() == errc::not_found) {
      removed.push_back(n);
      continue;
    }
    if (!first) first = r.error();
    failed += (failed.empty() ? "" : "; ") + explain(r.error());
  }
  if (first)
    return fail(first.category() == category() ? static_cast<errc>(first.value()) : errc::system_error,
                "group '" + std::string(group) + "': " + std::to_string(mine.size() - removed.size()) + " of " +
                    std::to_string(mine.size()) + " pools not removed: " + failed);
  return removed;
}

result<Lease> Pool::take_group(std::string_view group, std::chrono::nanoseconds timeout) {
  std::uint32_t others = 0;
  auto in_group = group_pools(group, &others);
  if (!in_group) return in_group.error();
  struct candidate {
    std::string name;
    std::uint32_t free, in_use;
  };
  std::vector<candidate> pools;
  for (const auto& info : *in_group)
    if (info.removing.empty()) pools.push_back({info.name, info.free, info.in_use});
  if (pools.empty())
    return fail(errc::not_found, "no pool of group '" + std::string(group) + "'" +
                                     (others == 0 ? std::string()
                                                  : " of yours (" + std::to_string(others) + " of other users name it: a group gathers only your own pools)") +
                                     ": create one with 'shmbox pool create NAME --group " + std::string(group) + " --command CMD'");
  // Most free first; ties: fewest in use; pools still tied in a random
  // order, so that equally free pools share the load (pooler picks a random
  // member pool). Random rather than round robin: a take_group is often
  // the only one its process makes (`pool take`, a short-lived client), and
  // a per-process counter would send every such process to the same pool.
  static thread_local std::mt19937_64 rng(mono_ns() ^ unix_ns() ^ (std::uint64_t{static_cast<std::uint32_t>(::getpid())} << 32));
  std::shuffle(pools.begin(), pools.end(), rng);
  std::stable_sort(pools.begin(), pools.end(), [](const candidate& a, const candidate& b) {
    return a.free != b.free ? a.free > b.free : a.in_use < b.in_use;
  });
  std::error_code last;
  for (const auto& c : pools) {
    auto p = Pool::open(c.name);
    if (!p) {
      last = p.error();
      continue;
    }
    auto l = p->take(std::chrono::nanoseconds(0));
    if (l) return l;
    last = l.error();
  }
  if (timeout_ns(timeout) == 0) return last;
  auto p = Pool::open(pools.front().name);
  if (!p) return p.error();
  return p->take(timeout);
}

}  // namespace shmbox
