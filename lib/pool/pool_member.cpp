// lib/pool/pool_member.cpp - the member side of a pool: PoolMember (from_env,
// stopped, the health check's ping and its answer).
#include <sys/stat.h>

#include <cstdlib>
#include <memory>
#include <optional>
#include <string>

#include "base/access.hpp"
#include "base/errors.hpp"
#include "pool/pool_layout.hpp"
#include "pool/pool_table.hpp"
#include "pool/pool_internal.hpp"
#include "shmbox/owner.hpp"
#include "shmbox/pool.hpp"

namespace shmbox {

using namespace detail;

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

}  // namespace shmbox
