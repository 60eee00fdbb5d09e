// shmbox/error.hpp - the library's error codes and result<T>.
//
// Nothing in shmbox throws across the API. Factories return result<T>;
// hot-path calls return a small status enum (see producer.hpp, owner.hpp).
#pragma once

#include <cstdint>
#include <string>
#include <system_error>
#include <type_traits>
#include <utility>
#include <variant>

#include "shmbox/export.hpp"

namespace shmbox {

// Every error the library reports. The category's message() says what to do.
enum class errc : int {
  ok = 0,
  invalid_name,         // box name is empty, too long, or has characters other than [A-Za-z0-9._-]
  invalid_argument,     // an option is out of its documented range
  exists,               // a box of that name already exists
  not_found,            // no box of that name
  permission_denied,    // the segment's mode or owner does not let this process in
  no_space,             // /dev/shm has no room for the segment
  too_large,            // the box would exceed the documented size limits
  not_a_box,            // the segment is not a shmbox segment (wrong magic)
  version_mismatch,     // the segment was made by an incompatible layout version
  truncated,            // the segment is smaller than its header says
  corrupt,              // the segment's header or state breaks an invariant
  incomplete,           // the segment is still being created, or its creator died half-way
  not_owner,            // another live process owns the box, or this handle lost ownership
  already_owner,        // this process already holds an Owner handle for the box
  producer_table_full,  // every producer entry is held by a live process
  heir_table_full,      // every heir entry is held by a live process
  timed_out,            // nothing happened before the timeout (await_transfer)
  system_error,         // an unexpected errno from the kernel (see the log line)
  refused,              // the owner does not do what was asked (give-away requests: see the message)
  no_members_starting,     // pool: no member free now, one is being started (a take with timeout 0)
  no_members_at_capacity,  // pool: no member free and max_count members exist
  no_members_queue_full,   // pool: no member free and queue_max takers wait already
  pool_removed,            // pool: it is being removed; no new takes
  pool_clients_full,       // pool: every client entry is held by a live Pool handle
  stash_full,              // the owner's stash has no free entry, or the message's lane would be left no room
  buffer_unknown,          // the box uses a custom buffer this process has not registered (register_buffer)
  buffer_broken,           // the box's custom buffer broke its contract (buffer.hpp); rebuilt from the store
  inherited_handle,        // the handle was made by another process (a fork parent): a fork child opens its own
};

// The category of errc; name() is "shmbox".
SHMBOX_API const std::error_category& category() noexcept;

// An errc as a std::error_code of category() (found by ADL, so `ec == errc::x` works).
inline std::error_code make_error_code(errc e) noexcept {
  return {static_cast<int>(e), category()};
}

// One sentence about `ec` for a person: when `ec` is the most recent error this
// thread got from shmbox, the sentence names the box and the numbers involved
// ("box 'jobs': message of 300 bytes exceeds the slot size of 256 bytes");
// otherwise it is ec.message().
SHMBOX_API std::string explain(std::error_code ec);

// A value or an error code. Member names follow std::expected so that a move
// to C++23 can make this an alias.
template <class T>
class [[nodiscard]] result {
 public:
  // A value, or an error (implicit, so a function returns either as is).
  result(T value) : v_(std::in_place_index<0>, std::move(value)) {}  // NOLINT: implicit by design
  result(std::error_code ec) : v_(std::in_place_index<1>, ec) {}     // NOLINT
  result(errc e) : v_(std::in_place_index<1>, make_error_code(e)) {}  // NOLINT

  // True when it holds a value (then error() is empty).
  bool has_value() const noexcept { return v_.index() == 0; }
  explicit operator bool() const noexcept { return has_value(); }
  // The value; only when has_value() (std::get throws std::bad_variant_access otherwise).
  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  // The value, as value() does; only when has_value().
  T& operator*() & { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  // The error; an empty error_code when it holds a value. shmbox::explain(error()) for a person.
  std::error_code error() const { return has_value() ? std::error_code{} : std::get<1>(v_); }

 private:
  std::variant<T, std::error_code> v_;
};

template <>
class [[nodiscard]] result<void> {
 public:
  result() = default;
  // An error (implicit, so a function returns it as is); result() is success.
  result(std::error_code ec) : ec_(ec) {}   // NOLINT
  result(errc e) : ec_(make_error_code(e)) {}  // NOLINT
  // True on success.
  bool has_value() const noexcept { return !ec_; }
  explicit operator bool() const noexcept { return has_value(); }
  // The error; an empty error_code on success.
  std::error_code error() const { return ec_; }

 private:
  std::error_code ec_{};
};

}  // namespace shmbox

template <>
struct std::is_error_code_enum<shmbox::errc> : std::true_type {};
