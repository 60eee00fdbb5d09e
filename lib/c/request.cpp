// lib/c/request.cpp - the C API's request/reply (shmbox.h; shmbox/request.hpp):
// requesters, and an owner's replies to what it received.
#include <algorithm>
#include <cstring>
#include <string>
#include <string_view>

#include "c/c_common.hpp"
#include "shmbox/shmbox.h"
#include "shmbox/shmbox.hpp"

namespace sb = shmbox;
using namespace shmbox::detail::capi;

// The definitions keep the C linkage of their declarations in shmbox.h.

const char* shmbox_reply_status_string(int status) {
  if (status < SHMBOX_REPLY_OK || status > SHMBOX_REPLY_ERROR) return "unknown";
  return sb::to_string(static_cast<sb::reply_status>(status)).data();  // static, NUL-terminated literals
}

void shmbox_requester_options_init(shmbox_requester_options* o) {
  if (o == nullptr) return;
  std::memset(o, 0, sizeof *o);
  o->struct_size = sizeof *o;
  o->max_outstanding = sb::requester_options{}.max_outstanding;
}

int shmbox_requester_attach(const char* service, const shmbox_requester_options* o, shmbox_requester** out) {
  return guarded("shmbox_requester_attach", [&]() -> int {
    if (service == nullptr || out == nullptr) return bad("shmbox_requester_attach", "service and out must not be NULL");
    *out = nullptr;
    shmbox_requester_options c{};
    shmbox_requester_options_init(&c);
    if (o != nullptr && !copy_in(o, c)) return bad("shmbox_requester_attach", "o->struct_size is not set (shmbox_requester_options_init sets it)");
    auto r = sb::Requester::attach(service, {.max_outstanding = c.max_outstanding,
                                             .max_reply_size = c.max_reply_size,
                                             .any_owner = c.any_owner != 0});
    if (!r) return record(r.error());
    *out = new shmbox_requester(std::move(*r));
    return SHMBOX_OK;
  });
}

void shmbox_requester_close(shmbox_requester* r) {
  if (closable(r, "shmbox_requester_close")) delete r;
}

int shmbox_ask(shmbox_requester* r, const void* data, size_t size, int64_t timeout_ns, uint64_t* ticket) {
  if (ticket != nullptr) *ticket = 0;
  if (!live(r) || (data == nullptr && size > 0) || ticket == nullptr) {
    bad("shmbox_ask", "requester and ticket must not be NULL (nor closed), nor data when size is not 0");
    return SHMBOX_POST_ERROR;
  }
  try {
    sb::post_options po;
    if (timeout_ns != SHMBOX_BOX_TIMEOUT) po.timeout = to_ns(timeout_ns);
    const sb::ask_result a = r->req.ask(std::string_view(static_cast<const char*>(data), size), po);
    if (a) *ticket = a.ticket;
    else if (a.status == sb::post_status::error || a.status == sb::post_status::too_large ||
             a.status == sb::post_status::full)
      record(r->req.last_error());
    return static_cast<int>(a.status);
  } catch (...) {
    record(sb::errc::system_error, "shmbox_ask: out of memory");
    return SHMBOX_POST_ERROR;
  }
}

int shmbox_ask_wait(shmbox_requester* r, uint64_t ticket, void* buf, size_t cap, size_t* size, int64_t timeout_ns, int keep) {
  if (size != nullptr) *size = 0;
  if (!live(r) || buf == nullptr || size == nullptr) {
    bad("shmbox_ask_wait", "requester, buf and size must not be NULL (nor closed)");
    return SHMBOX_REPLY_ERROR;
  }
  if (cap < r->req.max_reply_size()) {
    record(sb::errc::invalid_argument, "shmbox_ask_wait: buf must hold the largest reply (" +
                                           std::to_string(r->req.max_reply_size()) + " bytes; cap is " +
                                           std::to_string(cap) + "); nothing was taken");
    return SHMBOX_REPLY_ERROR;
  }
  try {
    const sb::reply_status st = r->req.wait(ticket, r->reply, to_ns(timeout_ns), keep != 0);
    if (st == sb::reply_status::ok) {
      const std::size_t n = std::min(cap, r->reply.size());
      std::memcpy(buf, r->reply.data(), n);
      *size = n;
    } else if (st == sb::reply_status::error || st == sb::reply_status::not_owner) {
      record(r->req.last_error());
    }
    return static_cast<int>(st);
  } catch (...) {
    record(sb::errc::system_error, "shmbox_ask_wait: out of memory");
    return SHMBOX_REPLY_ERROR;
  }
}

void shmbox_ask_forget(shmbox_requester* r, uint64_t ticket) {
  if (live(r)) r->req.forget(ticket);
}

int shmbox_requester_notify_fd(shmbox_requester* r) {
  if (!live(r)) {
    bad("shmbox_requester_notify_fd", "requester must not be NULL (nor closed)");
    return -1;
  }
  try {
    const int fd = r->req.notify_fd();
    if (fd < 0) record(r->req.last_error());
    return fd;
  } catch (...) {
    record(sb::errc::system_error, "shmbox_requester_notify_fd: out of memory");
    return -1;
  }
}

size_t shmbox_requester_max_reply(const shmbox_requester* r) { return live(r) ? r->req.max_reply_size() : 0; }

size_t shmbox_requester_max_request(const shmbox_requester* r) { return live(r) ? r->req.max_request_size() : 0; }

int shmbox_requester_stats_get(const shmbox_requester* r, shmbox_requester_stats* out) {
  if (!live(r) || out == nullptr) return bad("shmbox_requester_stats_get", "requester and out must not be NULL (nor closed)");
  const sb::requester_stats s = r->req.stats();
  shmbox_requester_stats c{};
  c.struct_size = sizeof c;
  c.asked = s.asked;
  c.replied = s.replied;
  c.timed_out = s.timed_out;
  c.duplicates = s.duplicates;
  c.late = s.late;
  c.stray = s.stray;
  if (!copy_out(out, c)) return bad("shmbox_requester_stats_get", "out->struct_size is not set");
  return SHMBOX_OK;
}

namespace {

int reply_result(shmbox_owner* o, sb::reply_status st) {
  if (st == sb::reply_status::error || st == sb::reply_status::too_large || st == sb::reply_status::not_owner)
    record(o->o->last_error());
  return static_cast<int>(st);
}

}  // namespace

int shmbox_reply_batch(shmbox_owner* o, size_t i, const void* data, size_t size) {
  if (!live(o) || (data == nullptr && size > 0)) {
    bad("shmbox_reply_batch", "owner must not be NULL (nor closed), nor data when size is not 0");
    return SHMBOX_REPLY_ERROR;
  }
  try {
    if (i >= o->current->size()) {
      record(sb::errc::invalid_argument, "shmbox_reply_batch: message " + std::to_string(i) + " of a batch of " +
                                             std::to_string(o->current->size()));
      return SHMBOX_REPLY_ERROR;
    }
    return reply_result(o, o->o->reply(*o->current, i, std::string_view(static_cast<const char*>(data), size)));
  } catch (...) {
    record(sb::errc::system_error, "shmbox_reply_batch: out of memory");
    return SHMBOX_REPLY_ERROR;
  }
}

int shmbox_reply_last(shmbox_owner* o, const void* data, size_t size) {
  if (!live(o) || (data == nullptr && size > 0)) {
    bad("shmbox_reply_last", "owner must not be NULL (nor closed), nor data when size is not 0");
    return SHMBOX_REPLY_ERROR;
  }
  try {
    // A one-message receive committed its message: nothing left to mark.
    return reply_result(o, o->o->reply(o->last_request, std::string_view(static_cast<const char*>(data), size)));
  } catch (...) {
    record(sb::errc::system_error, "shmbox_reply_last: out of memory");
    return SHMBOX_REPLY_ERROR;
  }
}
