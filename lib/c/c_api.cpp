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

namespace {

// A C filter as a C++ one: the message gets room for at least the slot size.
sb::filter_fn wrap_filter(shmbox_filter_fn fn, void* ctx, std::size_t slot) {
  if (fn == nullptr) return {};
  return [fn, ctx, slot](std::string& m) {
    std::size_t n = m.size();
    const std::size_t cap = std::max(n, slot);
    m.resize(cap);
    const int v = fn(ctx, m.data(), &n, cap);
    m.resize(std::min(n, cap));
    switch (v) {
      case SHMBOX_DELIVER: return sb::filter_verdict::deliver;
      case SHMBOX_DROP: return sb::filter_verdict::drop;
      default: return sb::filter_verdict::skip;  // SHMBOX_SKIP, and anything else: keep it in the box
    }
  };
}

// Marks a recv status the C++ layer reported as an error on this thread too.
int recv_result(shmbox_owner* o, sb::recv_status s) {
  if (s == sb::recv_status::error) {
    o->last = SHMBOX_OK;
    record(o->o->last_error());
  }
  return static_cast<int>(s);
}

int owner_bad(shmbox_owner* o, const char* fn, const char* what) {
  o->last = record(sb::errc::invalid_argument, std::string(fn) + ": " + what);
  return SHMBOX_RECV_ERROR;
}

}  // namespace

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

// ---- Owners -----------------------------------------------------------------

int shmbox_owner_acquire(const char* name, shmbox_owner** out) {
  return guarded("shmbox_owner_acquire", [&]() -> int {
    if (name == nullptr || out == nullptr) return bad("shmbox_owner_acquire", "name and out must not be NULL");
    *out = nullptr;
    auto o = sb::Owner::acquire(std::string_view(name));
    if (!o) return record(o.error());
    auto* h = new shmbox_owner;
    h->own.emplace(std::move(*o));
    init_owner(*h, &*h->own);
    *out = h;
    return SHMBOX_OK;
  });
}

int shmbox_owner_acquire_box(const shmbox_box* b, shmbox_owner** out) {
  return guarded("shmbox_owner_acquire_box", [&]() -> int {
    if (!live(b) || out == nullptr) return bad("shmbox_owner_acquire_box", "box and out must not be NULL (nor closed)");
    *out = nullptr;
    auto o = sb::Owner::acquire(b->box);
    if (!o) return record(o.error());
    auto* h = new shmbox_owner;
    h->own.emplace(std::move(*o));
    init_owner(*h, &*h->own);
    *out = h;
    return SHMBOX_OK;
  });
}

void shmbox_owner_close(shmbox_owner* o) {
  if (closable(o, "shmbox_owner_close")) delete o;
}

namespace {

// Copies one message in place into the caller's buffer (a receive).
struct copy_one {
  void* buf;
  std::size_t* size;
  shmbox_msg_info* info;
  void operator()(const sb::message_view& v) const noexcept {
    std::memcpy(buf, v.data.data(), v.data.size());
    if (size != nullptr) *size = v.data.size();
    if (info != nullptr) *info = {v.lane, v.redelivered ? 1 : 0};
  }
};

int receive_copy(shmbox_owner* o, void* buf, size_t cap, size_t* size, shmbox_msg_info* info, std::chrono::nanoseconds t,
                 const char* fn) {
  if (!live(o)) {
    bad(fn, "owner must not be NULL (nor closed)");
    return SHMBOX_RECV_ERROR;
  }
  if (buf == nullptr || cap < o->slot_size) {
    return owner_bad(o, fn,
                     ("buf must hold the box's slot size (" + std::to_string(o->slot_size) + " bytes; cap is " +
                      std::to_string(cap) + "); nothing was taken")
                         .c_str());
  }
  if (size != nullptr) *size = 0;
  o->last = SHMBOX_OK;
  sb::receive_options ro;
  ro.max = 1;
  ro.timeout = t;
  const sb::recv_status s = o->o->receive_in_place(copy_one{buf, size, info}, ro);  // one copy, as Owner::receive makes
  return recv_result(o, s);
}

sb::receive_options recv_opts(std::size_t max, std::int64_t timeout_ns) noexcept {
  sb::receive_options ro;
  ro.max = max;
  ro.timeout = to_ns(timeout_ns);
  return ro;
}

// receive_batch and read: `take` fills the handle's batch.
template <class Take>
int into_batch(shmbox_owner* o, const char* fn, size_t* count, Take&& take) {
  if (count != nullptr) *count = 0;
  if (!live(o)) {
    bad(fn, "owner must not be NULL (nor closed)");
    return SHMBOX_RECV_ERROR;
  }
  try {
    o->last = SHMBOX_OK;
    o->batch.clear();
    o->current = &o->batch;
    const sb::recv_status s = take(*o->o, o->batch);
    if (count != nullptr) *count = o->batch.size();
    return recv_result(o, s);
  } catch (...) {
    return owner_bad(o, fn, "out of memory");
  }
}

// wait and deliver: the handle's delivery, emptied, is what the batch functions read.
void start_delivery(shmbox_owner* o) noexcept {
  o->last = SHMBOX_OK;
  o->del.messages.clear();
  o->del.count = 0;
  o->del.dropped = 0;
  o->current = &o->del.messages;
}

}  // namespace

int shmbox_receive(shmbox_owner* o, void* buf, size_t cap, size_t* size, shmbox_msg_info* info, int64_t timeout_ns) {
  try {
    return receive_copy(o, buf, cap, size, info, to_ns(timeout_ns), "shmbox_receive");
  } catch (...) {
    record(sb::errc::system_error, "shmbox_receive: out of memory");
    return SHMBOX_RECV_ERROR;
  }
}

int shmbox_try_receive(shmbox_owner* o, void* buf, size_t cap, size_t* size, shmbox_msg_info* info) {
  try {
    const int s = receive_copy(o, buf, cap, size, info, std::chrono::nanoseconds(0), "shmbox_try_receive");
    return s == SHMBOX_RECV_TIMEOUT ? SHMBOX_RECV_EMPTY : s;
  } catch (...) {
    record(sb::errc::system_error, "shmbox_try_receive: out of memory");
    return SHMBOX_RECV_ERROR;
  }
}

int shmbox_receive_batch(shmbox_owner* o, size_t max, int64_t timeout_ns, size_t* count) {
  return into_batch(o, "shmbox_receive_batch", count,
                    [&](sb::Owner& w, sb::batch& b) { return w.receive_batch(b, recv_opts(max, timeout_ns)); });
}

int shmbox_batch_message(const shmbox_owner* o, size_t i, const void** data, size_t* size, shmbox_msg_info* info) {
  if (!live(o) || data == nullptr || size == nullptr) return bad("shmbox_batch_message", "owner, data and size must not be NULL (nor closed)");
  if (i >= o->current->size()) {
    return record(sb::errc::invalid_argument, "shmbox_batch_message: message " + std::to_string(i) +
                                                  " of a batch of " + std::to_string(o->current->size()));
  }
  const std::string_view v = (*o->current)[i];
  *data = v.data();
  *size = v.size();
  if (info != nullptr) *info = {o->current->lane(i), o->current->redelivered(i) ? 1 : 0};
  return SHMBOX_OK;
}

size_t shmbox_batch_size(const shmbox_owner* o) { return !live(o) ? 0 : o->current->size(); }

int shmbox_receive_in_place(shmbox_owner* o, void (*fn)(void* ctx, const void* data, size_t size, const shmbox_msg_info* info),
                            void* ctx, size_t max, int64_t timeout_ns, size_t* count) {
  if (count != nullptr) *count = 0;
  if (!live(o) || fn == nullptr) {
    bad("shmbox_receive_in_place", "owner and fn must not be NULL (nor closed)");
    return SHMBOX_RECV_ERROR;
  }
  try {
    o->last = SHMBOX_OK;
    std::size_t n = 0;
    const sb::recv_status s = o->o->receive_in_place(
        [&](const sb::message_view& v) {
          const shmbox_msg_info info{v.lane, v.redelivered ? 1 : 0};
          ++n;
          fn(ctx, v.data.data(), v.data.size(), &info);
        },
        recv_opts(max, timeout_ns));
    if (count != nullptr) *count = n;
    return recv_result(o, s);
  } catch (...) {
    return owner_bad(o, "shmbox_receive_in_place", "out of memory");
  }
}

int shmbox_read(shmbox_owner* o, size_t max, int64_t timeout_ns, size_t* count) {
  return into_batch(o, "shmbox_read", count, [&](sb::Owner& w, sb::batch& b) { return w.read(b, recv_opts(max, timeout_ns)); });
}

int shmbox_commit(shmbox_owner* o, size_t* lost) {
  if (lost != nullptr) *lost = 0;
  if (!live(o)) {
    bad("shmbox_commit", "owner must not be NULL (nor closed)");
    return SHMBOX_RECV_ERROR;
  }
  o->last = SHMBOX_OK;
  return recv_result(o, o->o->commit(lost));
}

int shmbox_stash(shmbox_owner* o, const void* data, size_t size, uint32_t lane) {
  if (!live(o) || (data == nullptr && size > 0)) {
    bad("shmbox_stash", "owner must not be NULL (nor closed), nor data when size is not 0");
    return SHMBOX_RECV_ERROR;
  }
  try {
    o->last = SHMBOX_OK;
    return recv_result(o, o->o->stash(std::string_view(static_cast<const char*>(data), size), lane));
  } catch (...) {
    return owner_bad(o, "shmbox_stash", "out of memory");
  }
}

size_t shmbox_unstash_all(shmbox_owner* o) { return !live(o) ? 0 : o->o->unstash_all(); }
size_t shmbox_stashed(const shmbox_owner* o) { return !live(o) ? 0 : o->o->stashed(); }

size_t shmbox_pump(shmbox_owner* o) {
  if (!live(o)) return 0;
  try {
    return o->o->pump();
  } catch (...) {
    record(sb::errc::system_error, "shmbox_pump: out of memory");
    return 0;
  }
}

int shmbox_owner_mode(const shmbox_owner* o) { return !live(o) ? -1 : static_cast<int>(o->o->mode()); }

void shmbox_owner_passive(shmbox_owner* o) {
  if (!live(o)) return;
  try {
    o->o->passive();
  } catch (...) {
  }
}

void shmbox_owner_notify(shmbox_owner* o) {
  if (!live(o)) return;
  try {
    o->o->notify();
  } catch (...) {
  }
}

void shmbox_owner_active(shmbox_owner* o, shmbox_filter_fn filter, void* ctx, size_t max) {
  if (!live(o)) return;
  try {
    o->o->active(wrap_filter(filter, ctx, o->slot_size), max);
  } catch (...) {
    // Could not copy the filter: the box stays as it was.
  }
}

int shmbox_owner_wait(shmbox_owner* o, int64_t timeout_ns, uint64_t* dropped) {
  if (dropped != nullptr) *dropped = 0;
  if (!live(o)) {
    bad("shmbox_owner_wait", "owner must not be NULL (nor closed)");
    return SHMBOX_EVENT_ERROR;
  }
  try {
    start_delivery(o);
    const sb::owner_event e = o->o->wait(o->del, to_ns(timeout_ns));
    if (dropped != nullptr) *dropped = o->del.dropped;
    if (e == sb::owner_event::error) record(o->o->last_error());
    return static_cast<int>(e);
  } catch (...) {
    owner_bad(o, "shmbox_owner_wait", "out of memory");
    return SHMBOX_EVENT_ERROR;
  }
}

int shmbox_owner_deliver(shmbox_owner* o, size_t max, shmbox_filter_fn filter, void* ctx, uint64_t* dropped) {
  if (dropped != nullptr) *dropped = 0;
  if (!live(o)) {
    bad("shmbox_owner_deliver", "owner must not be NULL (nor closed)");
    return SHMBOX_RECV_ERROR;
  }
  try {
    start_delivery(o);
    const sb::recv_status s = o->o->deliver(o->del, max, wrap_filter(filter, ctx, o->slot_size));
    if (dropped != nullptr) *dropped = o->del.dropped;
    return recv_result(o, s);
  } catch (...) {
    return owner_bad(o, "shmbox_owner_deliver", "out of memory");
  }
}

int shmbox_owner_notify_fd(shmbox_owner* o) {
  if (!live(o)) return -1;
  try {
    return o->o->notify_fd();
  } catch (...) {
    return -1;
  }
}

int shmbox_owner_give_away(shmbox_owner* o, uint32_t pid, const void* data, size_t size, int64_t timeout_ns) {
  if (!live(o) || (data == nullptr && size > 0)) {
    bad("shmbox_owner_give_away", "owner must not be NULL (nor closed), nor data when size is not 0");
    return 0;
  }
  try {
    if (o->o->give_away(pid, std::string_view(static_cast<const char*>(data), size), to_ns(timeout_ns))) return 1;
    record(o->o->last_error());
    return 0;
  } catch (...) {
    return 0;
  }
}

int shmbox_owner_give_away_to_heir(shmbox_owner* o, uint32_t entry, const void* data, size_t size, int64_t timeout_ns) {
  if (!live(o) || (data == nullptr && size > 0)) {
    bad("shmbox_owner_give_away_to_heir", "owner must not be NULL (nor closed), nor data when size is not 0");
    return 0;
  }
  try {
    if (o->o->give_away_to_heir(entry, std::string_view(static_cast<const char*>(data), size), to_ns(timeout_ns))) {
      return 1;
    }
    record(o->o->last_error());
    return 0;
  } catch (...) {
    return 0;
  }
}

void shmbox_owner_accept_give_away_requests(shmbox_owner* o, int accept) {
  if (live(o)) o->o->accept_give_away_requests(accept != 0);
}

void shmbox_owner_renew(shmbox_owner* o) {
  if (live(o)) o->o->renew();
}

int shmbox_owner_transfer(const shmbox_owner* o, shmbox_transfer* out) {
  return guarded("shmbox_owner_transfer", [&]() -> int {
    if (!live(o) || out == nullptr) return bad("shmbox_owner_transfer", "owner and out must not be NULL (nor closed)");
    shmbox_transfer t;
    fill_transfer(t, o->o->transfer());
    if (!copy_out(out, t)) return bad("shmbox_owner_transfer", "out->struct_size is not set");
    return SHMBOX_OK;
  });
}

uint32_t shmbox_owner_max_message_size(const shmbox_owner* o) { return !live(o) ? 0 : o->slot_size; }

uint64_t shmbox_owner_epoch(const shmbox_owner* o) { return !live(o) ? 0 : o->o->epoch(); }

int shmbox_owner_last_error(const shmbox_owner* o) {
  if (!live(o)) return SHMBOX_E_INVALID_ARGUMENT;
  if (o->last != SHMBOX_OK) return o->last;
  const auto ec = o->o->last_error();
  return !ec ? SHMBOX_OK : ec.category() == sb::category() ? ec.value() : SHMBOX_E_SYSTEM;
}

// ---- Heirs --------------------------------------------------------------

int shmbox_heir_enlist(const char* name, const void* data, size_t size, shmbox_heir** out) {
  return guarded("shmbox_heir_enlist", [&]() -> int {
    if (name == nullptr || out == nullptr || (data == nullptr && size > 0)) {
      return bad("shmbox_heir_enlist", "name and out must not be NULL, nor data when size is not 0");
    }
    *out = nullptr;
    auto h = sb::Heir::enlist(std::string_view(name), std::string_view(static_cast<const char*>(data), size));
    if (!h) return record(h.error());
    *out = new shmbox_heir{std::move(*h)};
    return SHMBOX_OK;
  });
}

int shmbox_heir_listen(const char* name, shmbox_heir** out) {
  return guarded("shmbox_heir_listen", [&]() -> int {
    if (name == nullptr || out == nullptr) return bad("shmbox_heir_listen", "name and out must not be NULL");
    *out = nullptr;
    auto h = sb::Heir::listen(std::string_view(name));
    if (!h) return record(h.error());
    *out = new shmbox_heir{std::move(*h)};
    return SHMBOX_OK;
  });
}

void shmbox_heir_close(shmbox_heir* h) {
  if (closable(h, "shmbox_heir_close")) delete h;
}

int shmbox_heir_await(shmbox_heir* h, int64_t timeout_ns, shmbox_owner** out) {
  return guarded("shmbox_heir_await", [&]() -> int {
    if (!live(h) || out == nullptr) return bad("shmbox_heir_await", "heir and out must not be NULL (nor closed)");
    *out = nullptr;
    auto o = h->heir.await_transfer(to_ns(timeout_ns));
    if (!o) return record(o.error());
    auto* c = new shmbox_owner;
    c->own.emplace(std::move(*o));
    init_owner(*c, &*c->own);
    *out = c;
    return SHMBOX_OK;
  });
}

int shmbox_heir_fd(const shmbox_heir* h) { return !live(h) ? -1 : h->heir.fd(); }

uint32_t shmbox_heir_position(const shmbox_heir* h) {
  if (!live(h)) return 0;
  try {
    return h->heir.position();
  } catch (...) {
    return 0;
  }
}

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

