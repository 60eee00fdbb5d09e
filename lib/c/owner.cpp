// lib/c/owner.cpp - the C API's owners (shmbox.h): acquire, receive (a
// copy, a batch, in place, read and commit), stash, the owner modes
// (passive, notify, active: wait, deliver, the notify fd) and hand-over
// (give away, renew, the transfer record).
#include "shmbox/shmbox.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "c/c_common.hpp"
#include "shmbox/shmbox.hpp"

namespace sb = shmbox;
using namespace shmbox::detail::capi;

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

// The definitions keep the C linkage of their declarations in shmbox.h.

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
  sb::message* keep = nullptr;  // the owner handle's last_request: a request's address, for shmbox_reply_last
  void set_keep(sb::message* m) noexcept { keep = m; }
  void operator()(const sb::message_view& v) const noexcept {
    std::memcpy(buf, v.data.data(), v.data.size());
    if (size != nullptr) *size = v.data.size();
    if (info != nullptr) *info = {v.lane, v.redelivered ? 1 : 0};
    if (keep != nullptr) {
      keep->reply_to.assign(v.reply_to);  // at most 40 bytes: within the string's reserve (receive_copy)
      keep->answered = v.answered;
      keep->redelivered = v.redelivered;
      keep->lane = v.lane;
      keep->position = v.position;
    }
  }
};

// A receive that also keeps the message's id and priority (receive_meta).
struct copy_one_meta {
  copy_one copy;
  const shmbox::Owner* owner;
  shmbox_msg_meta* meta;
  void set_keep(sb::message* m) noexcept { copy.keep = m; }
  void operator()(const sb::message_view& v) const noexcept {
    copy(v);
    if (meta != nullptr) {
      shmbox_msg_meta m{};
      m.struct_size = sizeof m;
      m.lane = v.lane;
      m.redelivered = v.redelivered ? 1 : 0;
      m.priority = v.priority;
      m.id = to_c_id(owner->id_of(v.lane, v.position));
      m.is_request = v.is_request() ? 1 : 0;
      m.answered = v.answered ? 1 : 0;
      (void)copy_out(meta, m);
    }
  }
};

template <class Copy>
int receive_copy(shmbox_owner* o, void* buf, size_t cap, size_t* size, std::chrono::nanoseconds t, const char* fn, Copy&& copy) {
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
  o->last_request.reply_to.clear();
  o->last_request.reply_to.reserve(64);  // copy_one's assign never allocates (noexcept)
  copy.set_keep(&o->last_request);
  const sb::recv_status s = o->o->receive_in_place(copy, ro);  // one copy, as Owner::receive makes
  return recv_result(o, s);
}

int receive_copy(shmbox_owner* o, void* buf, size_t cap, size_t* size, shmbox_msg_info* info, std::chrono::nanoseconds t,
                 const char* fn) {
  return receive_copy(o, buf, cap, size, t, fn, copy_one{buf, size, info});
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

int shmbox_receive_meta(shmbox_owner* o, void* buf, size_t cap, size_t* size, shmbox_msg_meta* meta, int64_t timeout_ns) {
  try {
    if (meta != nullptr && meta->struct_size < sizeof(std::uint32_t)) {
      if (live(o)) return owner_bad(o, "shmbox_receive_meta", "meta->struct_size is not set (shmbox_msg_meta_init sets it); nothing was taken");
      bad("shmbox_receive_meta", "owner must not be NULL (nor closed)");
      return SHMBOX_RECV_ERROR;
    }
    const sb::Owner* w = live(o) ? o->o : nullptr;
    return receive_copy(o, buf, cap, size, to_ns(timeout_ns), "shmbox_receive_meta",
                        copy_one_meta{copy_one{buf, size, nullptr}, w, meta});
  } catch (...) {
    record(sb::errc::system_error, "shmbox_receive_meta: out of memory");
    return SHMBOX_RECV_ERROR;
  }
}

int shmbox_batch_message_meta(const shmbox_owner* o, size_t i, const void** data, size_t* size, shmbox_msg_meta* meta) {
  const int r = shmbox_batch_message(o, i, data, size, nullptr);
  if (r != SHMBOX_OK || meta == nullptr) return r;
  const sb::batch& b = *o->current;
  shmbox_msg_meta m{};
  m.struct_size = sizeof m;
  m.lane = b.lane(i);
  m.redelivered = b.redelivered(i) ? 1 : 0;
  m.priority = b.priority(i);
  m.id = to_c_id(o->o->id_of(b.lane(i), b.position(i)));
  if (!copy_out(meta, m)) return bad("shmbox_batch_message_meta", "meta->struct_size is not set (shmbox_msg_meta_init sets it)");
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

int shmbox_notify_group_create(shmbox_notify_group** out) {
  return guarded("shmbox_notify_group_create", [&]() -> int {
    if (out == nullptr) return bad("shmbox_notify_group_create", "out must not be NULL");
    *out = nullptr;
    auto g = sb::NotifyGroup::create();
    if (!g) return record(g.error());
    *out = new shmbox_notify_group(std::move(*g));
    return SHMBOX_OK;
  });
}

void shmbox_notify_group_close(shmbox_notify_group* g) {
  if (closable(g, "shmbox_notify_group_close")) delete g;
}

int shmbox_notify_group_fd(const shmbox_notify_group* g) { return live(g) ? g->group.fd() : -1; }

size_t shmbox_notify_group_ready(shmbox_notify_group* g, uint64_t* tags, size_t cap) {
  if (!live(g) || (tags == nullptr && cap > 0)) {
    bad("shmbox_notify_group_ready", "group must not be NULL (nor closed), nor tags when cap is not 0");
    return 0;
  }
  try {
    if (g->pending.size() < cap) g->group.ready(g->pending);
    const std::size_t k = std::min(cap, g->pending.size());
    std::copy_n(g->pending.begin(), k, tags);
    g->pending.erase(g->pending.begin(), g->pending.begin() + static_cast<std::ptrdiff_t>(k));
    return k;
  } catch (...) {
    record_code(SHMBOX_E_SYSTEM);
    return 0;
  }
}

int shmbox_owner_join(shmbox_owner* o, shmbox_notify_group* g, uint64_t tag) {
  return guarded("shmbox_owner_join", [&]() -> int {
    if (!live(o) || !live(g)) return bad("shmbox_owner_join", "owner and group must not be NULL (nor closed)");
    auto r = o->o->join(g->group, tag);
    return r ? SHMBOX_OK : record(r.error());
  });
}

void shmbox_owner_leave_group(shmbox_owner* o) {
  if (live(o)) o->o->leave_group();
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

int shmbox_owner_usage(const shmbox_owner* o, shmbox_usage* out) {
  return guarded("shmbox_owner_usage", [&]() -> int {
    if (!live(o) || out == nullptr) return bad("shmbox_owner_usage", "owner and out must not be NULL (nor closed)");
    const sb::usage_info u = o->o->usage();
    shmbox_usage c{};
    c.struct_size = sizeof c;
    c.lanes = static_cast<std::uint32_t>(std::min<std::size_t>(u.depth.size(), SHMBOX_MAX_LANES));
    for (std::uint32_t l = 0; l < c.lanes; ++l) {
      c.depth[l] = u.depth[l];
      if (l < u.capacity.size()) c.capacity[l] = u.capacity[l];
    }
    c.depth_total = u.depth_total;
    c.capacity_total = u.capacity_total;
    c.dropped_since_delivery = u.dropped_since_delivery;
    if (!copy_out(out, c)) return bad("shmbox_owner_usage", "out->struct_size is not set");
    return SHMBOX_OK;
  });
}
