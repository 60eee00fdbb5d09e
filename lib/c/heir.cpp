// lib/c/heir.cpp - the C API's heirs (shmbox.h): enlist or listen, await
// a transfer (the box's new owner), the heir's fd and place in line.
#include "shmbox/shmbox.h"

#include <string_view>

#include "c/c_common.hpp"
#include "shmbox/shmbox.hpp"

namespace sb = shmbox;
using namespace shmbox::detail::capi;

// The definitions keep the C linkage of their declarations in shmbox.h.

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
