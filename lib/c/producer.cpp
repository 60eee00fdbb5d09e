// lib/c/producer.cpp - the C API's producers (shmbox.h): attach, post,
// post a batch, loans (a slot written in place), priority functions.
#include "shmbox/shmbox.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "c/c_common.hpp"
#include "shmbox/shmbox.hpp"

namespace sb = shmbox;
using namespace shmbox::detail::capi;

namespace {

// Post options from the C struct (NULL: the defaults).
bool convert(const shmbox_post_options* o, sb::post_options& out) noexcept {
  if (o == nullptr) return true;
  shmbox_post_options c;
  shmbox_post_options_init(&c);
  if (!copy_in(o, c)) return false;
  if (c.lane >= 0) out.lane = static_cast<std::uint32_t>(c.lane);
  if (c.timeout_ns != SHMBOX_BOX_TIMEOUT) out.timeout = to_ns(c.timeout_ns);
  if (c.spin_ns >= 0) out.spin = std::chrono::nanoseconds(c.spin_ns);
  if (c.has_priority != 0) out.priority = c.priority;
  out.quiet_timeout = c.quiet_timeout != 0;
  return true;
}

}  // namespace

// The definitions keep the C linkage of their declarations in shmbox.h.

// ---- Producers ----------------------------------------------------------

void shmbox_post_options_init(shmbox_post_options* o) {
  if (o == nullptr) return;
  *o = {};
  o->struct_size = sizeof *o;
  o->lane = SHMBOX_DEFAULT;
  o->timeout_ns = SHMBOX_BOX_TIMEOUT;
  o->spin_ns = -1;
}

int shmbox_producer_attach(const char* name, shmbox_producer** out) {
  return guarded("shmbox_producer_attach", [&]() -> int {
    if (name == nullptr || out == nullptr) return bad("shmbox_producer_attach", "name and out must not be NULL");
    *out = nullptr;
    auto p = sb::Producer::attach(std::string_view(name));
    if (!p) return record(p.error());
    auto* h = new shmbox_producer;
    h->own.emplace(std::move(*p));
    h->p = &*h->own;
    *out = h;
    return SHMBOX_OK;
  });
}

int shmbox_producer_attach_box(const shmbox_box* b, shmbox_producer** out) {
  return guarded("shmbox_producer_attach_box", [&]() -> int {
    if (!live(b) || out == nullptr) return bad("shmbox_producer_attach_box", "box and out must not be NULL (nor closed)");
    *out = nullptr;
    auto p = sb::Producer::attach(b->box);
    if (!p) return record(p.error());
    auto* h = new shmbox_producer;
    h->own.emplace(std::move(*p));
    h->p = &*h->own;
    *out = h;
    return SHMBOX_OK;
  });
}

void shmbox_producer_close(shmbox_producer* p) {
  if (closable(p, "shmbox_producer_close")) delete p;  // the loan (if open) aborts first: declared last
}

namespace {

// The sentence of a post that was too large or failed (off the fast path).
void post_failed(const shmbox_producer* p, sb::post_status s, std::size_t size) noexcept {
  try {
    if (s == sb::post_status::too_large) {
      record(sb::errc::too_large, "message of " + std::to_string(size) + " bytes is larger than the box's slot size of " +
                                      std::to_string(p->p->max_message_size()) + " bytes (counted too_large)");
    } else {
      record(p->p->last_error());
    }
  } catch (...) {
    record_code(s == sb::post_status::too_large ? SHMBOX_E_TOO_LARGE : SHMBOX_E_SYSTEM);
  }
}

}  // namespace

int shmbox_post(shmbox_producer* p, const void* data, size_t size) {
  if (!live(p) || (data == nullptr && size > 0)) {
    bad("shmbox_post", "producer must not be NULL (nor closed), nor data when size is not 0");
    return SHMBOX_POST_ERROR;
  }
  const sb::post_status s = p->p->post(data, size);
  if (s == sb::post_status::too_large || s == sb::post_status::error) post_failed(p, s, size);
  return static_cast<int>(s);
}

int shmbox_post_ex(shmbox_producer* p, const void* data, size_t size, const shmbox_post_options* o) {
  sb::post_options po;
  if (!live(p) || (data == nullptr && size > 0) || !convert(o, po)) {
    bad("shmbox_post_ex", "producer must not be NULL (nor closed), nor data when size is not 0; set options.struct_size");
    return SHMBOX_POST_ERROR;
  }
  const sb::post_status s = p->p->post(data, size, po);
  if (s == sb::post_status::too_large || s == sb::post_status::error) post_failed(p, s, size);
  return static_cast<int>(s);
}

size_t shmbox_post_batch(shmbox_producer* p, const void* const* data, const size_t* sizes, size_t n,
                         const shmbox_post_options* o, int* last) {
  size_t stored = 0;
  const int rc = guarded("shmbox_post_batch", [&]() -> int {
    sb::post_options po;
    if (!live(p) || (n > 0 && (data == nullptr || sizes == nullptr)) || !convert(o, po)) {
      if (last != nullptr) *last = SHMBOX_POST_ERROR;
      return bad("shmbox_post_batch", "producer, data and sizes must not be NULL (nor closed); set options.struct_size");
    }
    // The views live on the stack for small batches (no allocation per call).
    constexpr std::size_t kChunk = 64;
    std::string_view views[kChunk];
    sb::post_status st = sb::post_status::stored;
    for (std::size_t off = 0; off < n;) {
      const std::size_t k = std::min(kChunk, n - off);
      for (std::size_t i = 0; i < k; ++i) {
        if (data[off + i] == nullptr && sizes[off + i] > 0) {
          if (last != nullptr) *last = SHMBOX_POST_ERROR;
          return bad("shmbox_post_batch", "a NULL message with a size above 0");
        }
        views[i] = std::string_view(static_cast<const char*>(data[off + i]), sizes[off + i]);
      }
      const std::size_t done = p->p->post_batch(std::span<const std::string_view>(views, k), po, &st);
      stored += done;
      off += done;
      if (done < k) break;
    }
    if (last != nullptr) *last = static_cast<int>(st);
    if (st == sb::post_status::error) record(p->p->last_error());
    return SHMBOX_OK;
  });
  (void)rc;
  return stored;
}

int shmbox_loan(shmbox_producer* p, const shmbox_post_options* o, void** data, uint32_t* capacity) {
  sb::post_options po;
  if (!live(p) || data == nullptr || capacity == nullptr || !convert(o, po)) {
    bad("shmbox_loan", "producer, data and capacity must not be NULL (nor closed); set options.struct_size");
    return SHMBOX_POST_ERROR;
  }
  *data = nullptr;
  *capacity = 0;
  if (p->loan) {
    bad("shmbox_loan", "this producer has an open loan: commit or abort it first");
    return SHMBOX_POST_ERROR;
  }
  p->loan = p->p->loan(po);
  const sb::post_status s = p->loan.status();
  if (p->loan) {
    *data = p->loan.data();
    *capacity = p->loan.capacity();
  } else if (s == sb::post_status::error) {
    record(p->p->last_error());
  }
  return static_cast<int>(s);
}

int shmbox_loan_commit(shmbox_producer* p, size_t size) {
  if (!live(p) || !p->loan) {
    bad("shmbox_loan_commit", "no open loan on this producer (shmbox_loan first)");
    return SHMBOX_POST_ERROR;
  }
  const sb::post_status s = p->loan.commit(size);
  if (s == sb::post_status::too_large) {
    record(sb::errc::too_large, "shmbox_loan_commit: " + std::to_string(size) + " bytes exceed the loan's " +
                                    std::to_string(p->loan.capacity()) + "; the loan is still open: commit less");
  }
  return static_cast<int>(s);
}

void shmbox_loan_abort(shmbox_producer* p) {
  if (live(p) && p->loan) p->loan.abort();
}

void shmbox_producer_set_priority_function(shmbox_producer* p, int64_t (*fn)(void* ctx, const void* data, size_t size),
                                           void* ctx) {
  if (!live(p)) return;
  try {
    if (fn == nullptr) {
      p->p->set_priority_function({});
    } else {
      p->p->set_priority_function([fn, ctx](std::string_view m) -> std::int64_t { return fn(ctx, m.data(), m.size()); });
    }
  } catch (...) {
    // std::function's allocation failed: the handle keeps its old function.
  }
}

uint32_t shmbox_producer_max_message_size(const shmbox_producer* p) { return !live(p) ? 0 : p->p->max_message_size(); }
int shmbox_producer_last_error(const shmbox_producer* p) {
  if (!live(p)) return SHMBOX_E_INVALID_ARGUMENT;
  const auto ec = p->p->last_error();
  return !ec ? SHMBOX_OK : ec.category() == sb::category() ? ec.value() : SHMBOX_E_SYSTEM;
}
uint32_t shmbox_producer_last_evicted(const shmbox_producer* p) { return !live(p) ? 0 : p->p->last_evicted(); }
uint32_t shmbox_producer_entry(const shmbox_producer* p) { return !live(p) ? 0 : p->p->entry_index(); }
