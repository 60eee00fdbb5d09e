#include "shmbox/box.hpp"
#include "shmbox/inspect.hpp"

#include <unistd.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "base/errors.hpp"
#include "base/futex.hpp"
#include "base/access.hpp"
#include "ownership/handover.hpp"
#include "ownership/lease.hpp"
#include "segment/liveness.hpp"
#include "base/process.hpp"
#include "base/shm_file.hpp"
#include "ring/ring.hpp"
#include "segment/segment.hpp"

namespace shmbox {

std::string_view to_string(policy p) noexcept {
  switch (p) {
    case policy::reject: return "reject";
    case policy::drop_newest: return "drop-newest";
    case policy::drop_oldest: return "drop-oldest";
    case policy::lifo: return "lifo";
    case policy::block: return "block";
  }
  return "unknown";
}

std::optional<policy> parse_policy(std::string_view s) noexcept {
  std::string norm(s);
  std::replace(norm.begin(), norm.end(), '_', '-');
  for (policy p : {policy::reject, policy::drop_newest, policy::drop_oldest, policy::lifo, policy::block})
    if (norm == to_string(p)) return p;
  return std::nullopt;
}

Box::Box(std::shared_ptr<detail::mapped_box> m) : m_(std::move(m)) {}
Box::Box(Box&&) noexcept = default;
Box& Box::operator=(Box&&) noexcept = default;
Box::~Box() = default;

result<Box> Box::create(std::string_view name, const options& opts) {
  auto m = detail::create_segment(name, opts);
  if (!m) return m.error();
  return Box(std::move(*m));
}

result<Box> Box::open(std::string_view name, const open_options& opts) {
  auto m = detail::open_segment(name, false, opts.any_owner);
  if (!m) return m.error();
  return Box(std::move(*m));
}

result<Box> Box::inspect(std::string_view name) {
  auto m = detail::open_segment(name, true);
  if (!m) return m.error();
  return Box(std::move(*m));
}

result<Box> Box::snapshot(std::string_view name) {
  auto m = detail::open_segment(name, true, false, true, true);
  if (!m) return m.error();
  return Box(std::move(*m));
}

result<void> Box::validate_name(std::string_view name) { return detail::validate_box_name(name); }

result<void> Box::remove(std::string_view name) {
  if (auto r = detail::validate_box_name(name); !r) return r;
  const std::string path = detail::shm_path(name);
  if (::shm_unlink(path.c_str()) != 0) {
    if (errno == ENOENT) return detail::fail(errc::not_found, "box '" + std::string(name) + "' does not exist (no /dev/shm" + path + ")");
    return detail::fail_errno(errno, "box '" + std::string(name) + "': cannot remove /dev/shm" + path);
  }
  return {};
}

result<std::vector<std::string>> Box::list() {
  std::vector<std::string> names;
  if (!detail::shm_names("shmbox.", names)) return detail::fail_errno(errno, "cannot list /dev/shm");
  // compare(), not <: a string operator<=> instantiated here would be exported (tests/unit/exported_symbols.py).
  std::sort(names.begin(), names.end(), [](const std::string& a, const std::string& b) { return a.compare(b) < 0; });
  return names;
}

result<void> Box::intact() const {
  if (!m_->shrank()) return {};
  struct stat st {};
  const std::string now = m_->fd >= 0 && ::fstat(m_->fd, &st) == 0
                              ? std::to_string(st.st_size) + " bytes now, owned by uid " + std::to_string(st.st_uid)
                              : "its size now unknown";
  return detail::fail(errc::truncated, "box '" + m_->name + "': its segment shrank while this process had it mapped (" +
                                           std::to_string(m_->mapped_bytes) + " bytes mapped, " + now +
                                           "): a process that may write it truncated it; what it held beyond the new end "
                                           "is lost to this process; remove and recreate the box, and keep it 0600 or within a group you trust");
}

const std::string& Box::name() const noexcept { return m_->name; }
std::uint32_t Box::capacity() const noexcept {
  std::uint32_t n = 0;
  for (std::uint32_t l = 0; l < m_->lane_count(); ++l) n += m_->lanes[l].limit();  // a resizable lane's limit now
  return n;
}
std::uint32_t Box::lane_count() const noexcept { return m_->lane_count(); }
std::uint32_t Box::default_lane() const noexcept { return m_->default_lane; }
std::uint32_t Box::slot_size() const noexcept { return m_->geo.params.slot_payload; }
policy Box::overflow() const noexcept { return m_->default_policy; }
std::uint64_t Box::id() const noexcept { return m_->incarnation(); }

std::string to_string(const message_id& id) {
  if (!id.valid()) return {};
  char buf[64];
  const int n = std::snprintf(buf, sizeof buf, "%016llx-%u-%llu", static_cast<unsigned long long>(id.box), id.lane,
                              static_cast<unsigned long long>(id.position));
  return std::string(buf, n > 0 ? static_cast<std::size_t>(n) : 0);
}

std::optional<message_id> parse_message_id(std::string_view s) noexcept {
  // Exactly: 16 hex digits, '-', a decimal lane below kMaxLanes, '-', a decimal position.
  if (s.size() < 20 || s[16] != '-') return std::nullopt;
  message_id id;
  for (std::size_t i = 0; i < 16; ++i) {
    const char c = s[i];
    const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (d < 0) return std::nullopt;
    id.box = (id.box << 4) | static_cast<std::uint64_t>(d);
  }
  auto number = [](std::string_view t, std::uint64_t& out) {
    if (t.empty() || t.size() > 19 || (t.size() > 1 && t[0] == '0')) return false;
    out = 0;
    for (const char c : t) {
      if (c < '0' || c > '9') return false;
      out = out * 10 + static_cast<std::uint64_t>(c - '0');
    }
    return true;
  };
  const std::string_view rest = s.substr(17);
  const std::size_t dash = rest.find('-');
  if (dash == std::string_view::npos) return std::nullopt;
  std::uint64_t lane = 0, position = 0;
  if (!number(rest.substr(0, dash), lane) || lane >= kMaxLanes || !number(rest.substr(dash + 1), position) ||
      position == kNoPosition)
    return std::nullopt;
  id.lane = static_cast<std::uint32_t>(lane);
  id.position = position;
  return id;
}

std::uint64_t Box::depth_approx(std::uint32_t lane) const noexcept {
  if (lane >= m_->lane_count()) return 0;
  const detail::lane_view& L = m_->lanes[lane];
  if (L.is_lifo()) return detail::lane_depth_scan(*m_, lane);
  // acquire: pairs with the release stores of head (T7); tail is an RMW chain
  const std::uint64_t t = L.hdr->tail.load(std::memory_order_acquire) >> 1;
  const std::uint64_t h = L.hdr->head.load(std::memory_order_acquire);
  std::uint64_t n = h >= t ? 0 : std::min<std::uint64_t>(t - h, L.capacity);
  // A priority box's lane also holds the messages in the owner's store
  // (ring.hpp PRIORITY BOXES), counted in `parked` with its stash's (THE
  // STASH: not in the depth; stashed - unstashed of the lane). relaxed: an estimate.
  if (L.is_priority()) {
    std::uint64_t stash = 0;
    if (m_->user_stash() != 0)
      for (std::uint32_t a = 0; a < detail::kOwnerActors; ++a) {
        const detail::owner_lane_counters* oc = m_->actor_counters(a, lane);
        stash += oc->stashed.load(std::memory_order_relaxed) - oc->unstashed.load(std::memory_order_relaxed);
      }
    const std::uint64_t parked = L.hdr->parked.load(std::memory_order_relaxed);
    n += std::min<std::uint64_t>(parked > stash ? parked - stash : 0, L.capacity);
  }
  return n;
}

std::uint64_t Box::depth_approx() const noexcept {
  std::uint64_t n = 0;
  for (std::uint32_t l = 0; l < m_->lane_count(); ++l) n += depth_approx(l);
  return n;
}

std::uint32_t Box::capacity(std::uint32_t lane) const noexcept {
  return lane < m_->lane_count() ? m_->lanes[lane].limit() : 0;
}

result<void> Box::request_give_away(std::uint32_t pid, std::chrono::nanoseconds timeout) const {
  return detail::request_give_away_to_pid(*m_, pid, detail::timeout_ns(timeout));
}

result<void> Box::request_give_away_to_heir(std::uint32_t entry, std::chrono::nanoseconds timeout) const {
  return detail::request_give_away_to_entry(*m_, entry, detail::timeout_ns(timeout));
}

}  // namespace shmbox
