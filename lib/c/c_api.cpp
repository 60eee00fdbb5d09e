// lib/c/c_api.cpp - the C API (include/shmbox/shmbox.h) over the C++ one:
// this thread's error state, the versions, and the helpers of more than one
// handle family.
//
// Every function catches everything (nothing unwinds into C), checks its
// pointers, and reports failures as an error code plus this thread's
// sentence (shmbox_last_error_message). Option and result structs are
// read and written through their struct_size only (copy_in, copy_out), so
// a program built against an older, shorter struct keeps working.
//
// One file per handle family: box.cpp, producer.cpp, owner.cpp, heir.cpp,
// pool.cpp (pools, leases, members). What they share (the handles, the
// checks every function makes): c_common.hpp.
#include "shmbox/shmbox.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <system_error>

#include "base/access.hpp"
#include "base/errors.hpp"
#include "c/c_common.hpp"
#include "handles/owner_state.hpp"
#include "shmbox/shmbox.hpp"

namespace sb = shmbox;
using namespace shmbox::detail::capi;

// The C enums are the C++ ones, value for value.
static_assert(SHMBOX_E_BUFFER_BROKEN == static_cast<int>(sb::errc::buffer_broken));
static_assert(SHMBOX_E_INHERITED_HANDLE == static_cast<int>(sb::errc::inherited_handle));
static_assert(SHMBOX_E_STASH_FULL == static_cast<int>(sb::errc::stash_full));
static_assert(SHMBOX_E_TIMED_OUT == static_cast<int>(sb::errc::timed_out));
static_assert(SHMBOX_E_POOL_CLIENTS_FULL == static_cast<int>(sb::errc::pool_clients_full));
static_assert(SHMBOX_BLOCK == static_cast<int>(sb::policy::block));
static_assert(SHMBOX_POST_ERROR == static_cast<int>(sb::post_status::error));
static_assert(SHMBOX_POST_TOO_LARGE == static_cast<int>(sb::post_status::too_large));
static_assert(SHMBOX_OVER_QUOTA == static_cast<int>(sb::post_status::over_quota));
static_assert(SHMBOX_RECV_ERROR == static_cast<int>(sb::recv_status::error));
static_assert(SHMBOX_EVENT_ERROR == static_cast<int>(sb::owner_event::error));
static_assert(SHMBOX_ACTIVE == static_cast<int>(sb::owner_mode::active));
static_assert(SHMBOX_SKIP == static_cast<int>(sb::filter_verdict::skip));
static_assert(SHMBOX_TRANSFER_LEASE_EXPIRED == static_cast<int>(sb::transfer_reason::lease_expired));
static_assert(SHMBOX_RETURN_ERROR == static_cast<int>(sb::return_status::error));
static_assert(SHMBOX_MAX_LANES == sb::kMaxLanes);
static_assert(SHMBOX_MAX_NAME == sb::kMaxNameLength);
static_assert(sizeof(shmbox_counters) == 8 + 20 * 8, "shmbox_counters mirrors shmbox::counters");

namespace {

// This thread's most recent failure, as the C API reported it. A plain
// array, not a std::string: a C program's atexit handler runs after this
// thread's thread_local destructors, and may still call us.
thread_local int t_code = SHMBOX_OK;
thread_local char t_message[1024];

}  // namespace

namespace shmbox::detail::capi {

int record(std::error_code ec) {
  t_code = ec.category() == sb::category() ? ec.value() : SHMBOX_E_SYSTEM;
  if (t_code == SHMBOX_OK) t_code = SHMBOX_E_SYSTEM;
  const std::string s = sb::explain(ec);
  const std::size_t n = std::min(s.size(), sizeof t_message - 1);
  std::memcpy(t_message, s.data(), n);
  t_message[n] = '\0';
  return t_code;
}

int record(sb::errc e, const std::string& sentence) { return record(sb::detail::fail(e, sentence)); }

void record_code(int code) noexcept { t_code = code; }

int bad(const char* fn, const char* what) {
  return record(sb::errc::invalid_argument, std::string(fn) + ": " + what);
}

void fill_transfer(shmbox_transfer& t, const sb::transfer_record& r) noexcept {
  t = {};
  t.struct_size = sizeof t;
  t.reason = static_cast<int32_t>(r.reason);
  t.from_pid = r.from_pid;
  t.to_pid = r.to_pid;
  t.from_pid_ns = r.from_pid_ns;
  t.to_pid_ns = r.to_pid_ns;
  t.epoch = r.epoch;
  t.data_size = static_cast<std::uint32_t>(std::min<std::size_t>(r.data.size(), sizeof t.data - 1));
  std::memcpy(t.data, r.data.data(), t.data_size);
  t.data[t.data_size] = '\0';
}

void init_owner(shmbox_owner& h, sb::Owner* o) {
  h.o = o;
  h.slot_size = access::make_box(access::owner_box(*o)).slot_size();
}

}  // namespace shmbox::detail::capi

namespace shmbox::detail {
const std::shared_ptr<mapped_box>& access::owner_box(const Owner& o) noexcept { return o.s_->m; }
}  // namespace shmbox::detail

// The definitions keep the C linkage of their declarations in shmbox.h.

// ---- Versions, errors ------------------------------------------------------

const char* shmbox_version(void) { return SHMBOX_BUILD_VERSION; }  // meson's project version (lib/meson.build)

const char* shmbox_strerror(int code) {
  // One string per code, made once (category().message() returns a std::string).
  static const auto* table = [] {
    auto* t = new std::string[SHMBOX_E_INHERITED_HANDLE + 2];
    for (int i = 0; i <= SHMBOX_E_INHERITED_HANDLE; ++i) t[i] = sb::category().message(i);
    t[SHMBOX_E_INHERITED_HANDLE + 1] = "unknown shmbox error code";
    return t;
  }();
  if (code < 0 || code > SHMBOX_E_INHERITED_HANDLE) return table[SHMBOX_E_INHERITED_HANDLE + 1].c_str();
  return table[code].c_str();
}

const char* shmbox_last_error_message(void) { return t_message; }

int shmbox_last_error(void) { return t_code; }

// ---- Status names, message ids (SHMBOX_0.2) ----------------------------------

const char* shmbox_post_status_string(int status) {
  if (status < SHMBOX_STORED || status > SHMBOX_OVER_QUOTA) return "unknown";
  return sb::to_string(static_cast<sb::post_status>(status)).data();  // static, NUL-terminated literals
}

const char* shmbox_recv_status_string(int status) {
  if (status < SHMBOX_RECV_OK || status > SHMBOX_RECV_ERROR) return "unknown";
  return sb::to_string(static_cast<sb::recv_status>(status)).data();
}

int shmbox_message_id_format(const shmbox_message_id* id, char* buf, size_t cap) {
  return guarded("shmbox_message_id_format", [&]() -> int {
    if (buf != nullptr && cap > 0) buf[0] = '\0';
    if (id == nullptr || buf == nullptr) return bad("shmbox_message_id_format", "id and buf must not be NULL");
    if (id->position == SHMBOX_NO_POSITION)
      return bad("shmbox_message_id_format", "the id has no position (a message parked in the stash has none)");
    const std::string text = sb::to_string(sb::message_id{id->box, id->lane, id->position});
    if (text.size() + 1 > cap)
      return record(sb::errc::invalid_argument, "shmbox_message_id_format: the id takes " + std::to_string(text.size() + 1) +
                                                    " bytes with its NUL, cap is " + std::to_string(cap) +
                                                    " (SHMBOX_MESSAGE_ID_MAX is always enough)");
    std::memcpy(buf, text.c_str(), text.size() + 1);
    return SHMBOX_OK;
  });
}

int shmbox_message_id_parse(const char* text, shmbox_message_id* out) {
  return guarded("shmbox_message_id_parse", [&]() -> int {
    if (text == nullptr || out == nullptr) return bad("shmbox_message_id_parse", "text and out must not be NULL");
    const std::optional<sb::message_id> id = sb::parse_message_id(text);
    if (!id || !id->valid())
      return record(sb::errc::invalid_argument, "shmbox_message_id_parse: '" + std::string(text).substr(0, 80) +
                                                    "' is not a message id (BOXID-LANE-POSITION: 16 hex digits, then decimals)");
    *out = to_c_id(*id);
    return SHMBOX_OK;
  });
}

void shmbox_msg_meta_init(shmbox_msg_meta* meta) {
  if (meta == nullptr) return;
  std::memset(meta, 0, sizeof *meta);
  meta->struct_size = sizeof *meta;
  meta->id.position = SHMBOX_NO_POSITION;
}
