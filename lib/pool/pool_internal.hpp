// lib/pool/pool_internal.hpp - what the files of pools (pool.cpp, pool_take.cpp,
// pool_member.cpp, pool_inspect.cpp) share besides the table (pool_table.hpp).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "base/errors.hpp"
#include "base/process.hpp"
#include "pool/pool_table.hpp"
#include "shmbox/inspect.hpp"
#include "shmbox/pool.hpp"

namespace shmbox::detail {

#pragma GCC visibility push(hidden)

// "pool 'NAME'", the start of a sentence about the pool.
inline std::string quote_pool(std::string_view name) { return "pool '" + std::string(name) + "'"; }

// Now + timeout, UINT64_MAX when that does not fit (or the timeout is infinite).
inline std::uint64_t saturating_deadline(std::chrono::nanoseconds timeout) noexcept {
  const std::uint64_t t = timeout_ns(timeout);
  const std::uint64_t now = mono_ns();
  return t == UINT64_MAX || t > UINT64_MAX - now ? UINT64_MAX : now + t;
}

// inspect_pool, optionally without the ledger's snapshot (take_group: it may
// wait up to 20 ms for a busy pool's table to stand still). pool_inspect.cpp.
result<pool_info> inspect_pool_impl(std::string_view name, bool with_ledger);

#pragma GCC visibility pop

}  // namespace shmbox::detail
