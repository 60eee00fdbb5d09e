// lib/c/c_api.cpp - the C API (include/shmbox/shmbox.h) over the C++ one.
//
// Every function catches everything (nothing unwinds into C), checks its
// pointers, and reports failures as an error code plus this thread's
// sentence (shmbox_last_error_message). Option and result structs are
// read and written through their struct_size only (copy_in, copy_out), so
// a program built against an older, shorter struct keeps working.
// The handles and the checks every function makes: c_common.hpp.
#include "shmbox/shmbox.h"

#include <algorithm>
#include <cstring>
#include <new>
#include <optional>
#include <string>

#include "base/access.hpp"
#include "base/errors.hpp"
#include "c/c_common.hpp"
#include "handles/owner_state.hpp"
#include "shmbox/inspect.hpp"
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
static_assert(SHMBOX_RECV_ERROR == static_cast<int>(sb::recv_status::error));
static_assert(SHMBOX_EVENT_ERROR == static_cast<int>(sb::owner_event::error));
static_assert(SHMBOX_ACTIVE == static_cast<int>(sb::owner_mode::active));
static_assert(SHMBOX_SKIP == static_cast<int>(sb::filter_verdict::skip));
static_assert(SHMBOX_TRANSFER_LEASE_EXPIRED == static_cast<int>(sb::transfer_reason::lease_expired));
static_assert(SHMBOX_RETURN_ERROR == static_cast<int>(sb::return_status::error));
static_assert(SHMBOX_MAX_LANES == sb::kMaxLanes);
static_assert(SHMBOX_MAX_NAME == sb::kMaxNameLength);
static_assert(sizeof(shmbox_counters) == 8 + 18 * 8, "shmbox_counters mirrors shmbox::counters");

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

// ---- Pools -----------------------------------------------------------------

int shmbox_pool_open(const char* name, int any_owner, shmbox_pool** out) {
  return guarded("shmbox_pool_open", [&]() -> int {
    if (name == nullptr || out == nullptr) return bad("shmbox_pool_open", "name and out must not be NULL");
    *out = nullptr;
    auto p = sb::Pool::open(name, {.any_owner = any_owner != 0});
    if (!p) return record(p.error());
    *out = new shmbox_pool{std::move(*p)};
    return SHMBOX_OK;
  });
}

void shmbox_pool_close(shmbox_pool* p) {
  if (closable(p, "shmbox_pool_close")) delete p;
}

int shmbox_pool_take(shmbox_pool* p, int64_t timeout_ns, shmbox_lease** out) {
  return guarded("shmbox_pool_take", [&]() -> int {
    if (!live(p) || out == nullptr) return bad("shmbox_pool_take", "pool and out must not be NULL (nor closed)");
    *out = nullptr;
    auto l = p->pool.take(to_ns(timeout_ns));
    if (!l) return record(l.error());
    *out = new shmbox_lease{std::move(*l)};
    return SHMBOX_OK;
  });
}

const char* shmbox_lease_box(const shmbox_lease* l) { return !live(l) ? "" : l->lease.box().c_str(); }
shmbox_producer* shmbox_lease_producer(shmbox_lease* l) { return !live(l) ? nullptr : &l->producer; }
uint32_t shmbox_lease_worker_pid(const shmbox_lease* l) { return !live(l) ? 0 : l->lease.worker_pid(); }

int shmbox_lease_give_back(shmbox_lease* l, int outcome) {
  if (!live(l) || (outcome != SHMBOX_OUTCOME_OK && outcome != SHMBOX_OUTCOME_FAIL)) {
    bad("shmbox_lease_give_back", "lease must not be NULL (nor closed); outcome is SHMBOX_OUTCOME_OK or SHMBOX_OUTCOME_FAIL");
    return SHMBOX_RETURN_ERROR;
  }
  try {
    if (l->producer.loan) l->producer.loan.abort();
    const sb::return_status r = l->lease.give_back(static_cast<sb::outcome>(outcome));
    if (r == sb::return_status::error) record(sb::detail::access::lease_error(l->lease));
    return static_cast<int>(r);
  } catch (...) {
    record(sb::errc::system_error, "shmbox_lease_give_back: out of memory");
    return SHMBOX_RETURN_ERROR;
  }
}

void shmbox_lease_close(shmbox_lease* l) {
  if (!closable(l, "shmbox_lease_close")) return;
  if (l->producer.loan) l->producer.loan.abort();
  clear_tag(&l->producer);  // its producer goes with it
  delete l;
}

int shmbox_member_from_env(shmbox_member** out) {
  return guarded("shmbox_member_from_env", [&]() -> int {
    if (out == nullptr) return bad("shmbox_member_from_env", "out must not be NULL");
    *out = nullptr;
    auto m = sb::PoolMember::from_env();
    if (!m) return record(m.error());
    auto* c = new shmbox_member{std::move(*m)};
    init_owner(c->owner, &c->member.owner());
    *out = c;
    return SHMBOX_OK;
  });
}

shmbox_owner* shmbox_member_owner(shmbox_member* m) { return !live(m) ? nullptr : &m->owner; }

int shmbox_member_answer_ping(shmbox_member* m, const void* data, size_t size) {
  if (!live(m) || (data == nullptr && size > 0)) return 0;
  return m->member.answer_ping(std::string_view(static_cast<const char*>(data), size)) ? 1 : 0;
}

int shmbox_member_stopped(shmbox_member* m) { return !live(m) || m->member.stopped() ? 1 : 0; }

void shmbox_member_close(shmbox_member* m) {
  if (!closable(m, "shmbox_member_close")) return;
  clear_tag(&m->owner);  // its owner goes with it
  delete m;
}

