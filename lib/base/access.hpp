// lib/base/access.hpp - the library's one way into the public handles' private
// parts (the public classes befriend only this): the mapping behind a Box,
// handles built from library state, and batch appends. Not installed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

#include "shmbox/box.hpp"
#include "shmbox/heir.hpp"
#include "shmbox/owner.hpp"
#include "shmbox/pool.hpp"

namespace shmbox::detail {

class role_lock;

struct access {
  static const std::shared_ptr<mapped_box>& box(const Box& b) noexcept { return b.m_; }
  static Box make_box(std::shared_ptr<mapped_box> m) { return Box(std::move(m)); }
  // The mapping behind an Owner (c_api.cpp).
  static const std::shared_ptr<mapped_box>& owner_box(const Owner& o) noexcept;
  // The mapping behind a Producer (producer.cpp): a pool probes its member box's owner (pool_table.hpp LV).
  static const std::shared_ptr<mapped_box>& producer_box(const Producer& p) noexcept;
  // Producer::attach that tries each producer entry's lock byte until
  // `give_up_ns` (mono_ns; liveness.hpp L7): a reply tries each once.
  static result<Producer> attach_producer(const Box& box, std::uint64_t give_up_ns);
  // THE TRUST RULE T4 (base/shm_file.hpp): a producer on box `name`, which
  // the segment open at `namer_fd` names (its dead letters), followed only
  // when every user who may write that segment may write box `name` too.
  // `namer`: what names it, for the sentence ("box 'x'", "pool 'p'").
  static result<Producer> attach_named(int namer_fd, std::string_view namer, std::string_view name);
  // `trailer`: the last bytes of `size` that are a request's reply address (lib/segment/envelope.hpp).
  static void append(batch& b, const void* data, std::size_t size, bool redelivered, std::uint32_t lane,
                     std::uint64_t position, std::int64_t priority, std::uint32_t trailer = 0, bool answered = false) {
    b.append(data, size, redelivered, lane, position, priority, trailer, answered);
  }
  // An Owner handle for the epoch this process has just taken (handover.hpp):
  // runs recovery (ring.hpp R4) and reads the transfer record. owner.cpp.
  static Owner adopt_owner(std::shared_ptr<mapped_box> m, std::uint64_t epoch, role_lock&& lease);
  // An Heir or listener entry for this process. heir.cpp.
  static result<Heir> make_heir(std::shared_ptr<mapped_box> m, std::string_view data, bool listener);
  // Pools (lib/pool/: pool.cpp, pool_take.cpp, pool_member.cpp, pool_inspect.cpp).
  static const std::shared_ptr<pool_handle>& pool(const Pool& p) noexcept { return p.h_; }
  static Pool make_pool(std::shared_ptr<pool_handle> h) { return Pool(std::move(h)); }
  static result<Lease> make_lease(const std::shared_ptr<pool_handle>& h, std::uint32_t member, std::uint64_t generation,
                                  std::uint64_t lease);
  // Why a Lease's last give_back returned return_status::error (its pool's last error).
  static std::error_code lease_error(const Lease& l) noexcept;
  static result<PoolMember> make_member(std::string_view pool, std::string_view box, std::uint32_t index, std::uint64_t generation);
};

}  // namespace shmbox::detail
