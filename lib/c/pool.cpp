// lib/c/pool.cpp - the C API's pools (shmbox.h): open, take a lease (a
// member box's producer) and give it back, and the member's side (its
// owner, pings, stop).
#include "shmbox/shmbox.h"

#include <string_view>

#include "base/access.hpp"
#include "c/c_common.hpp"
#include "shmbox/shmbox.hpp"

namespace sb = shmbox;
using namespace shmbox::detail::capi;

// The definitions keep the C linkage of their declarations in shmbox.h.

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

int shmbox_pool_cull(shmbox_pool* p, int64_t idle_ms, int64_t timeout_ns, uint32_t* culled) {
  return guarded("shmbox_pool_cull", [&]() -> int {
    if (!live(p)) return bad("shmbox_pool_cull", "pool must not be NULL (nor closed)");
    if (culled != nullptr) *culled = 0;
    auto n = p->pool.cull(std::chrono::milliseconds(idle_ms), to_ns(timeout_ns));
    if (!n) return record(n.error());
    if (culled != nullptr) *culled = *n;
    return SHMBOX_OK;
  });
}

int shmbox_pool_reconfigure(shmbox_pool* p, const shmbox_pool_changes* changes, int64_t timeout_ns) {
  return guarded("shmbox_pool_reconfigure", [&]() -> int {
    if (!live(p) || changes == nullptr) return bad("shmbox_pool_reconfigure", "pool and changes must not be NULL (nor the pool closed)");
    shmbox_pool_changes c{};
    if (!copy_in(changes, c)) return bad("shmbox_pool_reconfigure", "changes->struct_size is not set (sizeof(shmbox_pool_changes))");
    if ((c.set & ~31u) != 0) return bad("shmbox_pool_reconfigure", "changes->set has bits that are no SHMBOX_POOL_SET_*");
    sb::pool_changes pc;
    if ((c.set & SHMBOX_POOL_SET_INIT_COUNT) != 0) pc.init_count = c.init_count;
    if ((c.set & SHMBOX_POOL_SET_MAX_COUNT) != 0) pc.max_count = c.max_count;
    if ((c.set & SHMBOX_POOL_SET_QUEUE_MAX) != 0) pc.queue_max = c.queue_max;
    if ((c.set & SHMBOX_POOL_SET_AUTO_GROW) != 0) pc.auto_grow_threshold = c.auto_grow_threshold;
    if ((c.set & SHMBOX_POOL_SET_CULL_AFTER) != 0) pc.cull_after = std::chrono::milliseconds(c.cull_after_ms);
    if (auto r = p->pool.reconfigure(pc, to_ns(timeout_ns)); !r) return record(r.error());
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
