// lib/pool/pool.cpp - pools (shmbox/pool.hpp): the pool segment, take and give back,
// leases, the member side, inspection. The table protocol is in pool_table.hpp.
#include <dirent.h>
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
#include "base/process.hpp"
#include "segment/segment.hpp"
#include "base/shm_file.hpp"
#include "shmbox/inspect.hpp"
#include "shmbox/pool.hpp"

namespace shmbox {
namespace detail {
namespace {

constexpr std::uint64_t kWaitSliceNs = 10'000'000;       // a waiting take re-checks its grant every 10 ms
constexpr std::uint64_t kReturnLockWaitNs = 5'000'000'000ull;  // give_back waits this long for the table lock
constexpr std::uint32_t kMaxPoolMs = 86'400'000;
constexpr std::uint64_t kEmptyPoolGraceNs = 50'000'000;  // an empty pool file nobody is creating: judged after this

std::string quote_pool(std::string_view name) { return "pool '" + std::string(name) + "'"; }

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

std::uint64_t saturating_deadline(std::chrono::nanoseconds timeout) noexcept {
  const std::uint64_t t = timeout_ns(timeout);
  const std::uint64_t now = mono_ns();
  return t == UINT64_MAX || t > UINT64_MAX - now ? UINT64_MAX : now + t;
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
  if (base != nullptr) ::munmap(base, bytes);
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
  const std::uint64_t give_up = first_look + 2'000'000'000ull;
  for (;;) {
    if (::fstat(fd.fd, &st) != 0) return fail_errno(errno, who + ": fstat");
    if (!read_only && !any_owner && st.st_uid != ::geteuid())
      return fail(errc::permission_denied, who + ": /dev/shm" + path + " belongs to uid " + std::to_string(st.st_uid) +
                                               ", not to this user (uid " + std::to_string(::geteuid()) +
                                               "); open another user's pool only on purpose: Pool::open(name, {.any_owner = true}), or --any-owner");
    if (st.st_size != 0 || mono_ns() > give_up) break;
    // An empty file: a creator sizes it right away, holding its byte (L4)
    // from just after its O_EXCL create. Nobody holding it for a moment:
    // nobody is creating it.
    if (!lock_held_fd(fd.fd, kPoolCreatorByte) && mono_ns() - first_look > kEmptyPoolGraceNs) break;
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
  h->read_only = read_only;
  h->fd = std::exchange(fd.fd, -1);
  h->dev = static_cast<std::uint64_t>(st.st_dev);
  h->ino = static_cast<std::uint64_t>(st.st_ino);
  h->mode = st.st_mode & 07777;
  h->uid = st.st_uid;

  auto* live = reinterpret_cast<pool_header*>(h->base);
  // Acquire: pairs with the creator's release of `ready`.
  while (live->ready.load(std::memory_order_acquire) != kReady) {
    if (live->magic != 0 && live->magic != kPoolMagic) break;
    // L4: a creator holds its byte until `ready`.
    if (!lock_held_fd(h->fd, kPoolCreatorByte)) {
      if (live->creator_key != 0)
        return fail(errc::incomplete, who + " is not a valid pool (its creator died before finishing it)" + remove_it);
      if (mono_ns() - first_look > kEmptyPoolGraceNs)
        return fail(errc::incomplete, who + " is not a valid pool (no pool header, and nobody is creating one)" + remove_it);
    }
    if (mono_ns() > give_up)
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
      p.stop_grace_ms > kMaxPoolMs || p.health_interval_ms > kMaxPoolMs || p.health_timeout_ms > kMaxPoolMs)
    return fail(errc::corrupt, who + " is not a valid pool (its header breaks the pool's invariants)" + remove_it + " and create it again");
  if (total > bytes)
    return fail(errc::truncated, who + " is not a valid pool (the segment is shorter than its header says)" + remove_it + " and create it again");
  const auto* cfg = reinterpret_cast<const pool_config*>(h->base + kPoolConfigOffset);
  std::string cfg_name;
  if (!read_string(cfg->name, sizeof cfg->name, cfg_name) || !read_string(cfg->group, sizeof cfg->group, h->group) ||
      !read_string(cfg->dead_letters, sizeof cfg->dead_letters, h->dead_letters) ||
      !read_string(cfg->command, sizeof cfg->command, h->command) || cfg_name != name)
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
  if (o.max_clients < 1 || o.max_clients > kMaxPoolClients)
    return who + ": max_clients " + std::to_string(o.max_clients) + " is outside 1.." + std::to_string(kMaxPoolClients);
  if (o.queue_max > o.max_clients)
    return who + ": queue_max " + std::to_string(o.queue_max) + " is more than max_clients " + std::to_string(o.max_clients) +
           " (each waiting taker is a client)";
  if (o.command.empty()) return who + ": no member command: give the program that serves a member's box (--command)";
  if (o.command.size() >= kMaxPoolCommand || o.command.find('\0') != std::string::npos)
    return who + ": the member command must be under " + std::to_string(kMaxPoolCommand) + " bytes, without NUL";
  if (o.group.size() >= 128 || o.group.find('\0') != std::string::npos) return who + ": group names are at most 127 bytes";
  for (const auto ms : {o.cull_after, o.start_timeout, o.stop_grace, o.health_interval, o.health_timeout})
    if (ms.count() < 0 || ms.count() > kMaxPoolMs) return who + ": durations must be between 0 and one day";
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
  std::uint64_t co = 0, mo_off = 0, total = 0;
  if (!compute_pool_geometry(opts.max_clients, opts.max_count, co, mo_off, total))
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
  auto* base = static_cast<std::byte*>(addr);
  auto* h = reinterpret_cast<pool_header*>(base);
  // Fresh pages read as zero: every state, key and counter starts at 0 (empty, none).
  h->magic = kPoolMagic;
  h->layout_version = kPoolLayoutVersion;
  h->total_bytes = total;
  h->creator_key = self_key();
  h->created_unix_ns = unix_ns();
  h->init_count = opts.init_count;
  h->max_count = opts.max_count;
  h->queue_max = opts.queue_max;
  h->max_clients = opts.max_clients;
  h->cull_after_ms = static_cast<std::uint32_t>(opts.cull_after.count());
  h->start_timeout_ms = static_cast<std::uint32_t>(opts.start_timeout.count());
  h->stop_grace_ms = static_cast<std::uint32_t>(opts.stop_grace.count());
  h->health_interval_ms = static_cast<std::uint32_t>(opts.health_interval.count());
  h->health_timeout_ms = static_cast<std::uint32_t>(opts.health_timeout.count());
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
  h->ready.store(kReady, std::memory_order_release);  // pairs with the acquire in open_pool_segment
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
  DIR* d = ::opendir("/dev/shm");
  if (d == nullptr) return fail_errno(errno, "cannot list /dev/shm");
  constexpr std::string_view prefix = "shmbox-pool.";
  while (const dirent* e = ::readdir(d)) {
    const std::string_view n = e->d_name;
    if (n.size() > prefix.size() && n.substr(0, prefix.size()) == prefix) names.emplace_back(n.substr(prefix.size()));
  }
  ::closedir(d);
  // compare(), not <: a string operator<=> instantiated here would be exported (tests/exported_symbols.py).
  std::sort(names.begin(), names.end(), [](const std::string& a, const std::string& b) { return a.compare(b) < 0; });
  return names;
}

// --- take and give back ---------------------------------------------------

namespace detail {
namespace {

bool removing(const pool_handle& h) noexcept { return h.state()->removing.load(std::memory_order_relaxed) != 0; }

bool supervisor_alive(const pool_handle& h) noexcept {
  const pool_state* st = h.state();
  const std::uint64_t c = st->supervisor_client.load(std::memory_order_relaxed);
  return c < h.max_clients() && client_alive(h, static_cast<std::uint32_t>(c), st->supervisor_key.load(std::memory_order_relaxed));
}

// The free member taken first: the most recently returned (highest stamp; pooler's head of the free list).
std::int64_t best_free(const pool_handle& h, const table_txn& t) noexcept {
  std::int64_t best = -1;
  std::uint64_t best_stamp = 0;
  for (std::uint32_t m = 0; m < h.max_count(); ++m) {
    const pool_member* e = h.member_at(m);
    if (member_state_of(t.read(e->state)) != static_cast<std::uint32_t>(member_state::free)) continue;
    const std::uint64_t stamp = t.read(e->stamp);
    if (best < 0 || stamp > best_stamp) {
      best = m;
      best_stamp = stamp;
    }
  }
  return best;
}

// Under the lock: member `m` to this handle.
void assign(pool_handle& h, table_txn& t, std::uint32_t m, std::uint64_t& gen, std::uint64_t& lease) noexcept {
  pool_member* e = h.member_at(m);
  lease = t.read(e->leases) + 1;
  gen = t.read(e->generation);
  t.write(e->leases, lease);
  t.write(e->taker_client, static_cast<std::uint64_t>(h.client));
  t.write(e->taker_key, h.key);
  t.write(e->state, make_member_state(member_state::in_use));
  t.add(pool_counter::takes);
}

// Under the lock: a grant made to this handle (make_available), if it is
// still ours: the member is in use by us under that lease. Clears it either way.
bool collect_grant(pool_handle& h, table_txn& t, std::uint32_t& m, std::uint64_t& gen, std::uint64_t& lease) noexcept {
  pool_client* me = h.client_at(static_cast<std::uint32_t>(h.client));
  const std::uint64_t g = t.read(me->granted);
  if (g == 0) return false;
  t.write(me->granted, 0);
  m = static_cast<std::uint32_t>((g & 0xFFFF) - 1);
  lease = g >> 16;
  if (m >= h.max_count()) return false;
  const pool_member* e = h.member_at(m);
  gen = t.read(e->generation);
  return member_state_of(t.read(e->state)) == static_cast<std::uint32_t>(member_state::in_use) &&
         t.read(e->taker_key) == h.key && t.read(e->taker_client) == static_cast<std::uint64_t>(h.client) &&
         t.read(e->leases) == lease;
}

// LV's probe (one fcntl), made before the table section for the member the
// section will most likely pick, so that the lock is not held through it:
// the section uses it when it does pick that member of that generation (a
// generation is one worker: dead once, dead for good), and probes itself
// otherwise. A worker that dies between the probe and the section is seen
// as one that dies just after it would be: by the next probe or the supervisor.
struct probe {
  std::uint32_t m = 0;
  std::uint64_t gen = 0;
  bool made = false;
  bool alive = false;
};

probe probe_member(pool_handle& h, std::uint32_t m) {
  probe p;
  if (m >= h.max_count()) return p;
  p.m = m;
  p.gen = h.member_at(m)->generation.load(std::memory_order_relaxed);  // relaxed: a guess, checked under the lock
  p.alive = member_alive(h, m, p.gen);
  p.made = true;
  return p;
}

// Without the lock: the member best_free would pick now (a guess).
probe probe_best_free(pool_handle& h) {
  std::int64_t best = -1;
  std::uint64_t best_stamp = 0;
  for (std::uint32_t m = 0; m < h.max_count(); ++m) {
    const pool_member* e = h.member_at(m);
    // relaxed: a guess, checked under the lock
    if (member_state_of(e->state.load(std::memory_order_relaxed)) != static_cast<std::uint32_t>(member_state::free)) continue;
    const std::uint64_t stamp = e->stamp.load(std::memory_order_relaxed);
    if (best < 0 || stamp > best_stamp) {
      best = m;
      best_stamp = stamp;
    }
  }
  return best < 0 ? probe{} : probe_member(h, static_cast<std::uint32_t>(best));
}

bool alive_as_probed(pool_handle& h, const probe& p, std::uint32_t m, std::uint64_t gen) {
  return p.made && p.m == m && p.gen == gen ? p.alive : member_alive(h, m, gen);
}

// LV1: the freshest free member whose box has a live owner, assigned to
// this handle; the dead ones found on the way are stopped (crashed).
bool take_live_free(pool_handle& h, table_txn& t, const probe& guess, std::uint32_t& m, std::uint64_t& gen,
                    std::uint64_t& lease) {
  for (std::int64_t best = best_free(h, t); best >= 0; best = best_free(h, t)) {
    if (t.room() < 8) t.commit("stop");  // stops of dead members so far; assign needs 5 writes
    m = static_cast<std::uint32_t>(best);
    if (alive_as_probed(h, guess, m, t.read(h.member_at(m)->generation))) {
      assign(h, t, m, gen, lease);
      return true;
    }
    stop_member(h, t, m, member_stop::crashed);
  }
  return false;
}

// LV2: a grant to this handle (collect_grant) whose member's box has a live
// owner. A dead one is stopped (crashed; its lease revoked, LG4).
bool collect_live_grant(pool_handle& h, table_txn& t, const probe& guess, std::uint32_t& m, std::uint64_t& gen,
                        std::uint64_t& lease) {
  if (!collect_grant(h, t, m, gen, lease)) return false;
  if (alive_as_probed(h, guess, m, gen)) return true;
  stop_member(h, t, m, member_stop::crashed);
  return false;
}

// The member a grant to this handle names (a guess before the lock).
std::uint32_t granted_member(const pool_handle& h) noexcept {
  const std::uint64_t g = h.client_at(static_cast<std::uint32_t>(h.client))->granted.load(std::memory_order_relaxed);
  return static_cast<std::uint32_t>((g & 0xFFFF) - 1);  // 0 (none) gives 0xFFFFFFFF: no member
}

std::error_code no_supervisor_sentence(const pool_handle& h, errc e, std::string what) {
  if (!supervisor_alive(h)) what += "; no supervisor is running: start one with 'shmbox pool run " + h.name + "'";
  return fail(e, what);
}

}  // namespace

return_status give_back_impl(pool_handle& h, const lease_token& tok, outcome o) {
  // Before the mutex: a thread of the parent may have held it at the fork.
  if (const std::error_code ec = refuse_inherited(h, "Pool", "open the pool in the child (Pool::open) to give a lease back by its token")) {
    h.last_error = ec;
    return return_status::error;
  }
  std::lock_guard<std::recursive_mutex> g(h.mu);
  if (auto r = ensure_client(h, pool_role::taker, mono_ns() + kReturnLockWaitNs); !r) {
    h.last_error = r.error();
    return return_status::error;
  }
  // LV3's probe, before the section (the lock is not held through a system call).
  const bool alive = tok.member >= h.max_count() || member_alive(h, tok.member, tok.generation);
  table_txn t(h, mono_ns() + kReturnLockWaitNs);
  if (!t.locked()) {
    h.last_error = table_busy(h.name, "the lease was not given back");
    return return_status::error;
  }
  if (tok.member >= h.max_count()) {
    t.add(pool_counter::stale_returns);
    t.commit("return");
    return return_status::stale;
  }
  pool_member* e = h.member_at(tok.member);
  const std::uint64_t word = t.read(e->state);
  const auto s = static_cast<member_state>(member_state_of(word));
  const std::uint64_t gen = t.read(e->generation), leases = t.read(e->leases);
  if (gen == tok.generation && s == member_state::in_use && leases == tok.lease) {
    if (!alive) {
      // LV3: its worker died under the lease; the supervisor has not seen it
      // yet. The lease ends as revoked (LG4), the answer is stale.
      stop_member(h, t, tok.member, member_stop::crashed);
      t.add(pool_counter::stale_returns);
      t.commit("return");
      return return_status::stale;
    }
    if (o == outcome::ok) {
      t.add(pool_counter::returns_ok);  // LG1
      if (t.read(h.state()->removing) != 0) stop_member(h, t, tok.member, member_stop::removed, /*given_back=*/true);
      else make_available(h, t, tok.member, false);
    } else {
      t.add(pool_counter::returns_fail);  // LG2
      stop_member(h, t, tok.member, member_stop::failed, /*given_back=*/true);
    }
    t.commit("return");
    return return_status::ok;
  }
  // Given back already (and maybe taken again since), or replaced under the
  // lease (its worker died, the pool was removed at once): a stopped
  // member's entry cannot tell which, so only a failed return it still shows counts as double.
  const member_stop why = member_stop_of(word);
  const bool again = gen == tok.generation &&
                     (((s == member_state::free || s == member_state::checking) && leases >= tok.lease) ||
                      (s == member_state::in_use && leases > tok.lease) ||
                      (s == member_state::stopping && why == member_stop::failed && leases == tok.lease));
  if (again) {
    t.add(pool_counter::double_returns);
    t.commit("return");
    return return_status::double_return;
  }
  t.add(pool_counter::stale_returns);
  t.commit("return");
  return return_status::stale;
}

// Under the lock, with no member to hand out: refuses (timeout 0, queue
// full) or queues this handle (ticket into `my_ticket`) and asks for a start
// when one is needed. Returns the refusal, or {} when queued.
std::error_code queue_or_refuse(pool_handle& h, table_txn& t, bool wait, std::uint64_t& my_ticket) {
  pool_client* me = h.client_at(static_cast<std::uint32_t>(h.client));
  sweep_dead_clients(h, t);
  t.commit("sweep");  // the sweep may fill most of the journal; a start request and a queue entry follow
  const table_counts n = count_table(h, t);
  const std::uint32_t starting = n.by_state[static_cast<std::uint32_t>(member_state::starting)];
  const bool can_start = n.members < h.max_count();
  const bool start_needed = starting < n.waiters + 1;
  const pool_header& p = h.hdr;
  if (!wait) {
    const bool started = can_start && start_needed && request_start(h, t);
    if (started || starting > 0) {
      t.add(pool_counter::no_members_starting);
      t.commit("refuse");
      return no_supervisor_sentence(h, errc::no_members_starting,
                                    quote_pool(h.name) + ": no member is free; one is being started: take again, or take with a timeout");
    }
    t.add(pool_counter::no_members_at_capacity);
    t.commit("refuse");
    return fail(errc::no_members_at_capacity, quote_pool(h.name) + ": no member is free and all " + std::to_string(p.max_count) +
                                                  " (max_count) are in use: take with a timeout to queue for one");
  }
  if (n.waiters >= p.queue_max) {
    t.add(pool_counter::no_members_queue_full);
    t.commit("refuse");
    return fail(errc::no_members_queue_full, quote_pool(h.name) + ": no member is free and " + std::to_string(n.waiters) +
                                                 " takers wait already (queue_max " + std::to_string(p.queue_max) + "): retry later");
  }
  const std::uint64_t ticket = t.read(h.state()->next_ticket) + 1;
  t.write(h.state()->next_ticket, ticket);
  t.write(me->wait_ticket, ticket);
  t.write(me->granted, 0);
  if (n.waiters + 1 == p.queue_max) t.add(pool_counter::queue_max_reached);
  if (can_start && start_needed) request_start(h, t);
  t.commit("queue");
  my_ticket = ticket;
  return {};
}

// make_lease runs after the table lock is released (each `return
// make_lease` below is outside the section): it may give the member back.
result<Lease> take_impl(const std::shared_ptr<pool_handle>& hp, std::chrono::nanoseconds timeout) {
  pool_handle& h = *hp;
  // Before the mutex: a thread of the parent may have held it at the fork.
  if (const std::error_code ec = refuse_inherited(h, "Pool", "its client entry is its parent's; open the pool in the child (Pool::open)"))
    return ec;
  std::lock_guard<std::recursive_mutex> g(h.mu);
  const std::uint64_t deadline = saturating_deadline(timeout);
  const bool wait = timeout_ns(timeout) > 0;
  const std::uint64_t lock_deadline = std::max<std::uint64_t>(deadline, mono_ns() + 50'000'000ull);
  if (auto r = ensure_client(h, pool_role::taker, lock_deadline); !r) return r.error();
  pool_client* me = h.client_at(static_cast<std::uint32_t>(h.client));
  std::uint32_t m = 0;
  std::uint64_t gen = 0, lease = 0;
  std::uint64_t my_ticket = 0;  // our place in the queue (FIFO by ticket)
  bool got = false;
  {
    // LV: the member this take will most likely get, probed before the section.
    const probe guess = granted_member(h) < h.max_count() ? probe_member(h, granted_member(h)) : probe_best_free(h);
    table_txn t(h, lock_deadline);
    if (!t.locked()) return table_busy(h.name, "retry");
    if (t.read(h.state()->removing) != 0) return fail(errc::pool_removed, quote_pool(h.name) + " is being removed: no new takes");
    if (collect_live_grant(h, t, guess, m, gen, lease)) {  // a grant that arrived after an earlier wait gave up (LV2)
      t.commit("collect");
      got = true;
    } else if (take_live_free(h, t, guess, m, gen, lease)) {  // LV1
      t.commit("take");
      got = true;
    } else if (const std::error_code refused = queue_or_refuse(h, t, wait, my_ticket)) {
      return refused;
    }
  }
  if (got) return access::make_lease(hp, m, gen, lease);
  // Wait for a grant (make_available hands a returned or new member to the oldest waiter).
  for (;;) {
    const std::uint32_t seen = me->wake.load();  // seq_cst: before the grant re-check below
    const bool granted = me->granted.load() != 0;
    const std::uint64_t now = mono_ns();
    if (!granted && now < deadline && !removing(h)) {
      futex_wait(&me->wake, seen, std::min(deadline, now + kWaitSliceNs));
      continue;
    }
    {
      const probe guess = probe_member(h, granted_member(h));  // LV2's probe, before the section
      table_txn t(h, std::max<std::uint64_t>(deadline, now + 50'000'000ull));
      if (!t.locked()) return table_busy(h.name, "retry");
      if (collect_live_grant(h, t, guess, m, gen, lease)) {
        t.commit("collect");
        got = true;
      } else if (t.read(me->wait_ticket) == 0 && t.read(h.state()->removing) == 0) {
        // LV2: our grant's member died before we collected it (the grant took
        // us out of the queue): a free member, or back to our place in line.
        if (take_live_free(h, t, guess, m, gen, lease)) {
          t.commit("take");
          got = true;
        } else {
          t.write(me->wait_ticket, my_ticket);
        }
      }
      if (!got) {
        if (t.read(h.state()->removing) != 0 || mono_ns() >= deadline) {
          t.write(me->wait_ticket, 0);
          const bool gone = t.read(h.state()->removing) != 0;
          if (!gone) t.add(pool_counter::take_timeouts);
          t.commit("cancel");
          if (gone) return fail(errc::pool_removed, quote_pool(h.name) + " is being removed: no new takes");
          return no_supervisor_sentence(h, errc::timed_out, quote_pool(h.name) + ": no member became free before the timeout");
        }
        t.commit("collect");
        continue;
      }
    }
    return access::make_lease(hp, m, gen, lease);
  }
}

}  // namespace detail

result<Lease> Pool::take(std::chrono::nanoseconds timeout) {
  auto r = take_impl(h_, timeout);
  if (!r) h_->last_error = r.error();
  return r;
}

return_status Pool::give_back(const lease_token& t, outcome o) { return give_back_impl(*h_, t, o); }

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
  }
  if (opts.command) h_->command = *opts.command;
  if (opts.dead_letters) h_->dead_letters = *opts.dead_letters;
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
  // The running supervisor stops the members and removes the segment; with none, this call does it.
  return run_supervisor(*h, {}, deadline);
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

// inspect_pool, optionally without the ledger's snapshot (take_group: it may
// wait up to 20 ms for a busy pool's table to stand still).
result<pool_info> inspect_pool_impl(std::string_view name, bool with_ledger);
}  // namespace detail

result<Lease> Pool::take_group(std::string_view group, std::chrono::nanoseconds timeout) {
  auto names = Pool::list();
  if (!names) return names.error();
  struct candidate {
    std::string name;
    std::uint32_t free, in_use;
  };
  std::vector<candidate> pools;
  for (const auto& n : *names) {
    auto info = inspect_pool_impl(n, false);
    if (!info || info->group != group || !info->removing.empty()) continue;
    pools.push_back({n, info->free, info->in_use});
  }
  if (pools.empty())
    return fail(errc::not_found, "no pool of group '" + std::string(group) + "': create one with 'shmbox pool create NAME --group " +
                                     std::string(group) + " --command CMD'");
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

// --- Lease ---------------------------------------------------------------

struct Lease::state {
  std::shared_ptr<pool_handle> h;  // (h->born: made in the same process, by a take)
  lease_token token;
  std::string box;
  std::shared_ptr<Producer> producer;
  std::uint32_t worker_pid = 0;
  bool returned = false;
};

namespace detail {
namespace {

// This handle's link to member m's box for generation `gen`: a Producer on
// it, made on first use (and dropped when it cannot be made).
result<pool_handle::member_link*> link_member(pool_handle& h, std::uint32_t m, std::uint64_t gen) {
  if (auto it = h.links.find(m); it != h.links.end() && it->second.generation == gen && it->second.producer) return &it->second;
  // The member's box is the pool owner's (its supervisor made it): a taker
  // of another user's pool (opened with any_owner, or readable and writable
  // by mode) opens it as such; a box of a third user at that name is refused.
  const std::string name = member_box_name(h.name, m, gen);
  auto b = Box::open(name, {.any_owner = true});
  if (!b) return b.error();  // a link to another generation stays (a probe of a stale token's generation)
  if (const std::uint32_t uid = access::box(*b)->uid; uid != h.uid && uid != ::geteuid())
    return fail(errc::permission_denied, "pool '" + h.name + "': member box '" + name + "' belongs to uid " + std::to_string(uid) +
                                             ", neither the pool's (uid " + std::to_string(h.uid) +
                                             ") nor yours: not used (remove it if it was planted)");
  auto p = Producer::attach(*b);
  if (!p) return p.error();
  auto& link = h.links[m];
  link.generation = gen;
  link.producer = std::make_shared<Producer>(std::move(*p));
  const pool_member* e = h.member_at(m);
  link.worker_pid = in_this_ns(e->worker_ns.load(std::memory_order_relaxed))
                        ? static_cast<std::uint32_t>(e->worker_pid.load(std::memory_order_relaxed) & kPidMask)
                        : 0;
  return &link;
}

}  // namespace

bool member_alive(pool_handle& h, std::uint32_t m, std::uint64_t gen) {
  auto link = link_member(h, m, gen);
  if (!link) return link.error() != errc::not_found;  // gone: dead; other errors: make_lease reports them
  // L2: one F_OFD_GETLK on the owner byte, through the Producer's mapping.
  return view_owner(*access::producer_box(*std::static_pointer_cast<Producer>((*link)->producer))).alive;
}

}  // namespace detail

result<Lease> detail::access::make_lease(const std::shared_ptr<pool_handle>& h, std::uint32_t m, std::uint64_t gen,
                                         std::uint64_t lease) {
  auto s = std::make_unique<Lease::state>();
  s->h = h;
  s->token = {m, gen, lease};
  s->box = member_box_name(h->name, m, gen);
  auto link = link_member(*h, m, gen);
  if (!link) {
    // The member's box is gone (removed by hand, a scribbled table), or
    // cannot take another producer: it is given back as failed.
    // The sentence is kept (the give-back may leave one of its own for explain()).
    const std::error_code ec = link.error();
    const std::string said = explain(ec);
    give_back_impl(*h, s->token, outcome::fail);
    h->last_error = ec.category() == category() ? fail(static_cast<errc>(ec.value()), said) : ec;
    return h->last_error;
  }
  s->producer = std::static_pointer_cast<Producer>((*link)->producer);
  s->worker_pid = (*link)->worker_pid;
  return Lease(std::move(s));
}

std::error_code detail::access::lease_error(const Lease& l) noexcept { return l.s_ ? l.s_->h->last_error : std::error_code{}; }

Lease::Lease(std::unique_ptr<state> s) : s_(std::move(s)) {}
Lease::Lease(Lease&&) noexcept = default;
Lease& Lease::operator=(Lease&& o) noexcept {
  if (this != &o) {
    if (s_ && !s_->returned && s_->h->born.here_for_sure()) give_back(outcome::fail);
    s_ = std::move(o.s_);
  }
  return *this;
}
Lease::~Lease() {
  // process.hpp H3: in a fork child the lease stays its parent's (not given
  // back as failed: the parent still uses the member).
  if (s_ && !s_->returned && s_->h->born.here_for_sure()) give_back(outcome::fail);
}
const std::string& Lease::box() const noexcept { return s_->box; }
Producer& Lease::producer() noexcept { return *s_->producer; }
lease_token Lease::token() const noexcept { return s_->token; }
std::uint32_t Lease::worker_pid() const noexcept { return s_->worker_pid; }
bool Lease::returned() const noexcept { return s_->returned; }

return_status Lease::give_back(outcome o) {
  if (const std::error_code ec = refuse_inherited(*s_->h, "Lease", "the lease is its parent's to give back")) {
    s_->h->last_error = ec;
    return return_status::error;
  }
  if (s_->returned) {
    // Detected here, counted in the pool like any double return.
    std::lock_guard<std::recursive_mutex> g(s_->h->mu);
    table_txn t(*s_->h, mono_ns() + kReturnLockWaitNs);
    if (t.locked()) {
      t.add(pool_counter::double_returns);
      t.commit("return");
    }
    return return_status::double_return;
  }
  const return_status r = give_back_impl(*s_->h, s_->token, o);
  if (r != return_status::error) s_->returned = true;
  return r;
}

// --- PoolMember ----------------------------------------------------------

namespace {
constexpr std::string_view kPingPrefix = "\x01shmbox-pool-ping ";
}

std::string detail::ping_message(std::uint64_t seq) { return std::string(kPingPrefix) + std::to_string(seq); }

struct PoolMember::state {
  std::shared_ptr<pool_handle> h;
  std::uint32_t index = 0;
  std::uint64_t generation = 0;
  std::optional<Owner> owner;
};

PoolMember::PoolMember(std::unique_ptr<state> s) : s_(std::move(s)) {}
PoolMember::PoolMember(PoolMember&&) noexcept = default;
PoolMember& PoolMember::operator=(PoolMember&&) noexcept = default;
PoolMember::~PoolMember() = default;
Owner& PoolMember::owner() noexcept { return *s_->owner; }
bool PoolMember::stopped() const noexcept {
  const pool_handle& h = *s_->h;
  struct stat st {};
  if (::fstat(h.fd, &st) != 0 || st.st_nlink == 0) return true;  // the pool's segment was unlinked
  const pool_member* e = h.member_at(s_->index);
  const auto s = static_cast<member_state>(member_state_of(e->state.load(std::memory_order_relaxed)));
  return e->generation.load(std::memory_order_relaxed) != s_->generation || s == member_state::empty || s == member_state::stopping;
}
std::uint32_t PoolMember::index() const noexcept { return s_->index; }

result<PoolMember> PoolMember::from_env() {
  const char* pool = std::getenv("SHMBOX_POOL");
  const char* box = std::getenv("SHMBOX_BOX");
  const char* index = std::getenv("SHMBOX_MEMBER");
  const char* gen = std::getenv("SHMBOX_MEMBER_GENERATION");
  if (pool == nullptr || box == nullptr || index == nullptr || gen == nullptr)
    return fail(errc::invalid_argument,
                "not started as a pool member: SHMBOX_POOL, SHMBOX_BOX, SHMBOX_MEMBER and SHMBOX_MEMBER_GENERATION must be set "
                "(a pool's supervisor, 'shmbox pool run', sets them)");
  char* end = nullptr;
  const unsigned long long i = std::strtoull(index, &end, 10);
  if (*index == '\0' || *end != '\0' || i >= kMaxPoolMembers)
    return fail(errc::invalid_argument, "SHMBOX_MEMBER='" + std::string(index) + "' is not a member index");
  const unsigned long long g = std::strtoull(gen, &end, 10);
  if (*gen == '\0' || *end != '\0')
    return fail(errc::invalid_argument, "SHMBOX_MEMBER_GENERATION='" + std::string(gen) + "' is not a number");
  return access::make_member(pool, box, static_cast<std::uint32_t>(i), g);
}

result<PoolMember> detail::access::make_member(std::string_view pool, std::string_view box, std::uint32_t index,
                                               std::uint64_t generation) {
  auto h = open_pool_segment(pool, false, false);
  if (!h) return h.error();
  if (index >= (*h)->max_count() || member_box_name(pool, index, generation) != box)
    return fail(errc::invalid_argument, "SHMBOX_BOX='" + std::string(box) + "' is not member " + std::to_string(index) + " of " +
                                            quote_pool(pool));
  auto still_ours = [&] {
    const pool_member* e = (*h)->member_at(index);
    const auto s = static_cast<member_state>(member_state_of(e->state.load(std::memory_order_relaxed)));
    return e->generation.load(std::memory_order_relaxed) == generation && s != member_state::empty && s != member_state::stopping;
  };
  if (!still_ours())
    return fail(errc::refused, quote_pool(pool) + ": member " + std::to_string(index) + " generation " + std::to_string(generation) +
                                   " was replaced or stopped before it started; this worker is not needed");
  auto o = Owner::acquire(box);
  if (!o) return o.error();
  if (!still_ours())
    return fail(errc::refused, quote_pool(pool) + ": member " + std::to_string(index) + " was stopped while it started");
  auto s = std::make_unique<PoolMember::state>();
  s->h = std::move(*h);
  s->index = index;
  s->generation = generation;
  s->owner.emplace(std::move(*o));
  return PoolMember(std::move(s));
}

bool PoolMember::answer_ping(std::string_view msg) noexcept {
  if (msg.size() <= kPingPrefix.size() || msg.substr(0, kPingPrefix.size()) != kPingPrefix) return false;
  std::uint64_t seq = 0;
  for (const char c : msg.substr(kPingPrefix.size())) {
    if (c < '0' || c > '9') return false;
    seq = seq * 10 + static_cast<std::uint64_t>(c - '0');
  }
  if (!s_->h->born.here()) return true;  // process.hpp H3: a ping is the worker's (the parent's) to answer
  pool_member* e = s_->h->member_at(s_->index);
  // Release: pairs with the supervisor's acquire load of ping_ack. Only for our own generation.
  if (e->generation.load(std::memory_order_relaxed) == s_->generation) e->ping_ack.store(seq, std::memory_order_release);
  return true;
}

// --- inspection ------------------------------------------------------------

std::string_view to_string(return_status s) noexcept {
  switch (s) {
    case return_status::ok: return "ok";
    case return_status::double_return: return "double-return";
    case return_status::stale: return "stale";
    case return_status::error: return "error";
  }
  return "?";
}

std::string_view to_string(member_state s) noexcept {
  switch (s) {
    case member_state::empty: return "empty";
    case member_state::starting: return "starting";
    case member_state::free: return "free";
    case member_state::in_use: return "in-use";
    case member_state::checking: return "checking";
    case member_state::stopping: return "stopping";
  }
  return "?";
}

namespace {

// The words of the table inspection reports, read in one pass, bracketed
// by two looks at the lock: `settled` when the lock was free and no journal
// pending both before and after, and the counters the same at both ends (a
// section that ran in between and gave or ended a lease changed a counter:
// each one counts). Then the in_use members and the counters belong
// together, and LG can be checked.
struct table_snapshot {
  struct member_words {
    std::uint64_t state, generation, leases, taker_client, taker_key, worker_pid, worker_ns, idle_since_ns;
  };
  std::array<std::uint64_t, kPoolCounterSlots> counters{};
  std::vector<member_words> members;
  bool settled = false;
  std::uint64_t counter(pool_counter k) const noexcept { return counters[static_cast<std::uint32_t>(k)]; }
  // LG: takes - (returns_ok + returns_fail + killed_in_use + revoked_in_use + in_use).
  std::int64_t ledger_gap() const noexcept {
    std::uint64_t in_use = 0;
    for (const auto& m : members)
      if (member_state_of(m.state) == static_cast<std::uint32_t>(member_state::in_use)) ++in_use;
    return static_cast<std::int64_t>(counter(pool_counter::takes) - counter(pool_counter::returns_ok) -
                                     counter(pool_counter::returns_fail) - counter(pool_counter::killed_in_use) -
                                     counter(pool_counter::revoked_in_use) - in_use);
  }
};

table_snapshot read_table(const pool_handle& h) {
  const pool_state* st = h.state();
  // seq_cst loads of the lock word: a 0 seen after a holder's release (TL4's
  // exchange) orders the words it wrote before the relaxed reads below.
  // And the kernel's lock (TL2) not held: no holder between its two steps.
  auto quiet = [st, &h] { return st->lock.load() == 0 && st->journal_valid.load() == 0 && !lock_held_fd(h.fd, kPoolTableByte); };
  auto read_counters = [st](std::array<std::uint64_t, kPoolCounterSlots>& out) {
    for (std::uint32_t k = 0; k < kPoolCounterSlots; ++k) out[k] = st->counters[k].load(std::memory_order_relaxed);
  };
  table_snapshot t;
  t.members.resize(h.max_count());
  const bool quiet_before = quiet();
  read_counters(t.counters);
  for (std::uint32_t m = 0; m < h.max_count(); ++m) {
    const pool_member* e = h.member_at(m);
    t.members[m] = {e->state.load(std::memory_order_relaxed),        e->generation.load(std::memory_order_relaxed),
                    e->leases.load(std::memory_order_relaxed),       e->taker_client.load(std::memory_order_relaxed),
                    e->taker_key.load(std::memory_order_relaxed),    e->worker_pid.load(std::memory_order_relaxed),
                    e->worker_ns.load(std::memory_order_relaxed),    e->idle_since_ns.load(std::memory_order_relaxed)};
  }
  std::array<std::uint64_t, kPoolCounterSlots> after{};
  read_counters(after);
  t.settled = quiet_before && after == t.counters && quiet();
  return t;
}

}  // namespace

result<pool_info> inspect_pool(std::string_view name) { return inspect_pool_impl(name, true); }

result<pool_info> detail::inspect_pool_impl(std::string_view name, bool with_ledger) {
  auto hr = open_pool_segment(name, true, true);
  if (!hr) return hr.error();
  const pool_handle& h = **hr;
  const pool_header& p = h.hdr;
  pool_info info;
  info.name = h.name;
  info.group = h.group;
  info.dead_letters = h.dead_letters;
  info.command = h.command;
  info.init_count = p.init_count;
  info.max_count = p.max_count;
  info.queue_max = p.queue_max;
  info.max_clients = p.max_clients;
  info.cull_after = std::chrono::milliseconds(p.cull_after_ms);
  info.start_timeout = std::chrono::milliseconds(p.start_timeout_ms);
  info.stop_grace = std::chrono::milliseconds(p.stop_grace_ms);
  info.health_interval = std::chrono::milliseconds(p.health_interval_ms);
  info.health_timeout = std::chrono::milliseconds(p.health_timeout_ms);
  info.member_capacity = p.member_lane_capacity[0];
  info.member_slot_size = p.member_slot_size;
  info.member_overflow = static_cast<policy>(p.member_policy);
  info.mode = h.mode;
  info.uid = h.uid;
  info.segment_bytes = h.bytes;
  // The member table and the counters from one snapshot: with the ledger,
  // retried (1 ms apart, 20 times at most) until one is settled and LG
  // holds in it; a real gap is still there 20 ms later.
  table_snapshot t = read_table(h);
  for (int attempt = 1; with_ledger && attempt < 20 && !(t.settled && t.ledger_gap() == 0); ++attempt) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    t = read_table(h);
  }
  if (with_ledger) {
    info.ledger_gap = t.ledger_gap();
    info.ledger_settled = t.settled;
  }
  const pool_state* st = h.state();
  const std::uint64_t removing_v = st->removing.load(std::memory_order_relaxed);
  info.removing = removing_v == 1 ? "graceful" : removing_v == 2 ? "immediate" : "";
  const std::uint64_t sup_client = st->supervisor_client.load(std::memory_order_relaxed);
  const std::uint64_t sup_key = st->supervisor_key.load(std::memory_order_relaxed);
  info.supervisor_epoch = st->supervisor_epoch.load(std::memory_order_relaxed);
  if (sup_key != 0 && sup_client < p.max_clients) {
    info.supervisor_pid = key_pid(sup_key);
    info.supervisor_pid_ns = h.client_at(static_cast<std::uint32_t>(sup_client))->pid_ns.load(std::memory_order_relaxed);
    info.supervisor_alive = client_alive(h, static_cast<std::uint32_t>(sup_client), sup_key);
  }
  for (std::uint32_t c = 0; c < p.max_clients; ++c) {
    const pool_client* e = h.client_at(c);
    const std::uint64_t key = e->key.load(std::memory_order_relaxed);
    if (!client_alive(h, c, key)) continue;
    ++info.clients;
    if (e->wait_ticket.load(std::memory_order_relaxed) != 0) ++info.queued;
    if (e->role.load(std::memory_order_relaxed) == static_cast<std::uint64_t>(pool_role::standby) &&
        !(key == sup_key && c == sup_client))
      ++info.standbys;
  }
  const std::uint64_t now = mono_ns();
  for (std::uint32_t m = 0; m < p.max_count; ++m) {
    const table_snapshot::member_words& e = t.members[m];
    const std::uint32_t s = member_state_of(e.state);
    if (s == 0 || s > static_cast<std::uint32_t>(member_state::stopping)) continue;
    member_info mi;
    mi.index = m;
    mi.state = static_cast<member_state>(s);
    mi.generation = e.generation;
    mi.box = member_box_name(h.name, m, mi.generation);
    mi.worker_pid = static_cast<std::uint32_t>(e.worker_pid & kPidMask);
    mi.worker_pid_ns = e.worker_ns;
    mi.leases = e.leases;
    if (mi.state == member_state::in_use) {
      mi.taker_pid = key_pid(e.taker_key);
      if (e.taker_client < p.max_clients) {
        mi.taker_pid_ns = h.client_at(static_cast<std::uint32_t>(e.taker_client))->pid_ns.load(std::memory_order_relaxed);
        mi.taker_alive = client_alive(h, static_cast<std::uint32_t>(e.taker_client), e.taker_key);
      }
    }
    if (mi.state == member_state::free && e.idle_since_ns != 0 && e.idle_since_ns < now)
      mi.idle = std::chrono::milliseconds((now - e.idle_since_ns) / 1'000'000);
    if (mi.state == member_state::stopping) mi.stopping_why = std::string(to_string(member_stop_of(e.state)));
    if (auto b = Box::inspect(mi.box)) {
      const box_info bi = shmbox::info(*b);
      mi.worker_alive = bi.owner.alive;
      mi.depth = bi.depth;
    }
    switch (mi.state) {
      case member_state::free: ++info.free; break;
      case member_state::in_use: ++info.in_use; break;
      case member_state::starting: ++info.starting; break;
      case member_state::checking: ++info.checking; break;
      case member_state::stopping: ++info.stopping; break;
      case member_state::empty: break;
    }
    info.members.push_back(std::move(mi));
  }
  auto c = [&](pool_counter k) { return t.counter(k); };
  pool_counters& n = info.count;
  n.takes = c(pool_counter::takes);
  n.returns_ok = c(pool_counter::returns_ok);
  n.returns_fail = c(pool_counter::returns_fail);
  n.no_members_at_capacity = c(pool_counter::no_members_at_capacity);
  n.no_members_queue_full = c(pool_counter::no_members_queue_full);
  n.no_members_starting = c(pool_counter::no_members_starting);
  n.take_timeouts = c(pool_counter::take_timeouts);
  n.queue_max_reached = c(pool_counter::queue_max_reached);
  n.granted = c(pool_counter::granted);
  n.killed_free_culled = c(pool_counter::killed_free_culled);
  n.killed_free_unhealthy = c(pool_counter::killed_free_unhealthy);
  n.killed_in_use = c(pool_counter::killed_in_use);
  n.crashed = c(pool_counter::crashed);
  n.start_failures = c(pool_counter::start_failures);
  n.starts = c(pool_counter::starts);
  n.double_returns = c(pool_counter::double_returns);
  n.stale_returns = c(pool_counter::stale_returns);
  n.dead_lettered = c(pool_counter::dead_lettered);
  n.lost = c(pool_counter::lost);
  n.revoked_in_use = c(pool_counter::revoked_in_use);
  n.refused_signals = c(pool_counter::refused_signals);
  return info;
}

}  // namespace shmbox
