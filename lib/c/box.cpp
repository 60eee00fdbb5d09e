// lib/c/box.cpp - the C API's boxes (shmbox.h): create, open, inspect,
// remove, list, what a box says of itself, resize, give-away requests, and
// looking at one (shmbox_box_info, shmbox_verify).
#include "shmbox/shmbox.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

#include "c/c_common.hpp"
#include "shmbox/inspect.hpp"
#include "shmbox/shmbox.hpp"

namespace sb = shmbox;
using namespace shmbox::detail::capi;

namespace {

// The C copy of a box's or lane's counters.
void fill_counters(shmbox_counters& c, const sb::counters& k) noexcept {
  c = {};
  c.struct_size = sizeof c;
  c.posted = k.posted;
  c.stored = k.stored;
  c.delivered = k.delivered;
  c.rejected = k.rejected;
  c.too_large = k.too_large;
  c.timeouts = k.timeouts;
  c.dropped_newest = k.dropped_newest;
  c.dropped_oldest = k.dropped_oldest;
  c.shrunk = k.shrunk;
  c.filtered = k.filtered;
  c.buffer_dropped = k.buffer_dropped;
  c.abandoned = k.abandoned;
  c.aborted = k.aborted;
  c.redelivered = k.redelivered;
  c.dead_lettered = k.dead_lettered;
  c.dead_letter_failed = k.dead_letter_failed;
  c.stashed = k.stashed;
  c.unstashed = k.unstashed;
  c.quota_refused = k.quota_refused;
}

// A string into a fixed char array, cut to fit, always terminated.
template <std::size_t N>
void copy_text(char (&dst)[N], std::string_view s) noexcept {
  const std::size_t n = std::min(s.size(), N - 1);
  std::memcpy(dst, s.data(), n);
  dst[n] = '\0';
}

// A C overflow policy, if it is one.
std::optional<sb::policy> to_policy(std::int32_t v) noexcept {
  if (v < 0 || v > static_cast<std::int32_t>(sb::policy::block)) return std::nullopt;
  return static_cast<sb::policy>(v);
}

}  // namespace

// The definitions keep the C linkage of their declarations in shmbox.h.

// ---- Boxes ----------------------------------------------------------------

void shmbox_options_init(shmbox_options* o) {
  if (o == nullptr) return;
  const sb::options d;
  *o = {};
  o->struct_size = sizeof *o;
  o->capacity = d.capacity;
  o->max_capacity = d.max_capacity;
  o->slot_size = d.slot_size;
  o->overflow = static_cast<int32_t>(d.overflow);
  o->mode = d.mode;
  o->max_producers = d.max_producers;
  o->block_timeout_ms = d.block_timeout.count();
  o->lease_ms = d.lease.count();
  o->default_lane = SHMBOX_DEFAULT;
  o->spin_ns = -1;
  o->stash = d.stash;
}

int shmbox_box_create(const char* name, const shmbox_options* o, shmbox_box** out) {
  return guarded("shmbox_box_create", [&]() -> int {
    if (name == nullptr || out == nullptr) return bad("shmbox_box_create", "name and out must not be NULL");
    *out = nullptr;
    shmbox_options c;
    shmbox_options_init(&c);
    if (o != nullptr && !copy_in(o, c)) return bad("shmbox_box_create", "options.struct_size is not set (shmbox_options_init)");
    sb::options opts;
    opts.capacity = c.capacity;
    opts.max_capacity = c.max_capacity;
    opts.slot_size = c.slot_size;
    const auto pol = to_policy(c.overflow);
    if (!pol) return bad("shmbox_box_create", "options.overflow is not an enum shmbox_policy value");
    opts.overflow = *pol;
    opts.mode = c.mode;
    opts.max_producers = c.max_producers;
    if (c.block_timeout_ms < 0 || c.lease_ms < 0) return bad("shmbox_box_create", "a negative block_timeout_ms or lease_ms");
    opts.block_timeout = std::chrono::milliseconds(c.block_timeout_ms);
    opts.lease = std::chrono::milliseconds(c.lease_ms);
    if (c.lane_count > 0) {
      if (c.lanes == nullptr) return bad("shmbox_box_create", "options.lanes is NULL but lane_count is not 0");
      if (c.lane_count > SHMBOX_MAX_LANES) {
        return record(sb::errc::invalid_argument, "shmbox_box_create: " + std::to_string(c.lane_count) +
                                                      " lanes; a box has 1 to " + std::to_string(SHMBOX_MAX_LANES));
      }
      for (std::uint32_t i = 0; i < c.lane_count; ++i) {
        sb::lane_options l;
        l.capacity = c.lanes[i].capacity;
        l.max_capacity = c.lanes[i].max_capacity;
        if (c.lanes[i].overflow != SHMBOX_DEFAULT) {
          const auto lp = to_policy(c.lanes[i].overflow);
          if (!lp) return bad("shmbox_box_create", "a lane's overflow is not an enum shmbox_policy value");
          l.overflow = *lp;
        }
        opts.lanes.push_back(l);
      }
    }
    if (c.default_lane >= 0) opts.default_lane = static_cast<std::uint32_t>(c.default_lane);
    if (c.dead_letters != nullptr) opts.dead_letters = c.dead_letters;
    opts.dead_letter_refused = c.dead_letter_refused != 0;
    if (c.spin_ns >= 0) opts.spin = std::chrono::nanoseconds(c.spin_ns);
    opts.stash = c.stash;
    opts.priority = c.priority != 0;
    opts.quota = c.quota;
    auto b = sb::Box::create(name, opts);
    if (!b) return record(b.error());
    *out = new shmbox_box{std::move(*b)};
    return SHMBOX_OK;
  });
}

int shmbox_box_open(const char* name, int any_owner, shmbox_box** out) {
  return guarded("shmbox_box_open", [&]() -> int {
    if (name == nullptr || out == nullptr) return bad("shmbox_box_open", "name and out must not be NULL");
    *out = nullptr;
    auto b = sb::Box::open(name, {.any_owner = any_owner != 0});
    if (!b) return record(b.error());
    *out = new shmbox_box{std::move(*b)};
    return SHMBOX_OK;
  });
}

int shmbox_box_inspect(const char* name, shmbox_box** out) {
  return guarded("shmbox_box_inspect", [&]() -> int {
    if (name == nullptr || out == nullptr) return bad("shmbox_box_inspect", "name and out must not be NULL");
    *out = nullptr;
    auto b = sb::Box::inspect(name);
    if (!b) return record(b.error());
    *out = new shmbox_box{std::move(*b)};
    return SHMBOX_OK;
  });
}

void shmbox_box_close(shmbox_box* b) {
  if (closable(b, "shmbox_box_close")) delete b;
}

int shmbox_box_remove(const char* name) {
  return guarded("shmbox_box_remove", [&]() -> int {
    if (name == nullptr) return bad("shmbox_box_remove", "name must not be NULL");
    auto r = sb::Box::remove(name);
    return r ? SHMBOX_OK : record(r.error());
  });
}

int shmbox_validate_name(const char* name) {
  return guarded("shmbox_validate_name", [&]() -> int {
    if (name == nullptr) return bad("shmbox_validate_name", "name must not be NULL");
    auto r = sb::Box::validate_name(name);
    return r ? SHMBOX_OK : record(r.error());
  });
}

int shmbox_box_list(void (*fn)(void* ctx, const char* name), void* ctx) {
  return guarded("shmbox_box_list", [&]() -> int {
    if (fn == nullptr) return bad("shmbox_box_list", "fn must not be NULL");
    auto names = sb::Box::list();
    if (!names) return record(names.error());
    for (const auto& n : *names) fn(ctx, n.c_str());
    return SHMBOX_OK;
  });
}

const char* shmbox_box_name(const shmbox_box* b) { return !live(b) ? "" : b->box.name().c_str(); }
uint32_t shmbox_box_capacity(const shmbox_box* b) { return !live(b) ? 0 : b->box.capacity(); }
uint32_t shmbox_box_slot_size(const shmbox_box* b) { return !live(b) ? 0 : b->box.slot_size(); }
uint32_t shmbox_box_lane_count(const shmbox_box* b) { return !live(b) ? 0 : b->box.lane_count(); }
uint32_t shmbox_box_default_lane(const shmbox_box* b) { return !live(b) ? 0 : b->box.default_lane(); }
int shmbox_box_overflow(const shmbox_box* b) { return !live(b) ? -1 : static_cast<int>(b->box.overflow()); }
uint64_t shmbox_box_depth(const shmbox_box* b) { return !live(b) ? 0 : b->box.depth_approx(); }

int shmbox_box_intact(const shmbox_box* b) {
  return guarded("shmbox_box_intact", [&]() -> int {
    if (!live(b)) return bad("shmbox_box_intact", "box must not be NULL (nor closed)");
    auto r = b->box.intact();
    return r ? SHMBOX_OK : record(r.error());
  });
}

int shmbox_box_counters(const shmbox_box* b, shmbox_counters* out) {
  return guarded("shmbox_box_counters", [&]() -> int {
    if (!live(b) || out == nullptr) return bad("shmbox_box_counters", "box and out must not be NULL (nor closed)");
    shmbox_counters c;
    fill_counters(c, b->box.read_counters());
    if (!copy_out(out, c)) return bad("shmbox_box_counters", "out->struct_size is not set");
    return SHMBOX_OK;
  });
}

int shmbox_box_resize(const shmbox_box* b, uint32_t limit, int32_t lane, shmbox_resize_report* report) {
  return guarded("shmbox_box_resize", [&]() -> int {
    if (!live(b)) return bad("shmbox_box_resize", "box must not be NULL (nor closed)");
    std::optional<std::uint32_t> l;
    if (lane >= 0) l = static_cast<std::uint32_t>(lane);
    auto r = b->box.resize(limit, l);
    if (!r) return record(r.error());
    if (report != nullptr) {
      shmbox_resize_report c{sizeof c, r->lane, r->before, r->after, r->max_capacity, r->dropped};
      if (!copy_out(report, c)) return bad("shmbox_box_resize", "report->struct_size is not set");
    }
    return SHMBOX_OK;
  });
}

int shmbox_box_request_give_away(const shmbox_box* b, uint32_t pid, int64_t timeout_ns) {
  return guarded("shmbox_box_request_give_away", [&]() -> int {
    if (!live(b)) return bad("shmbox_box_request_give_away", "box must not be NULL (nor closed)");
    auto r = b->box.request_give_away(pid, to_ns(timeout_ns));
    return r ? SHMBOX_OK : record(r.error());
  });
}

int shmbox_box_request_give_away_to_heir(const shmbox_box* b, uint32_t entry, int64_t timeout_ns) {
  return guarded("shmbox_box_request_give_away_to_heir", [&]() -> int {
    if (!live(b)) return bad("shmbox_box_request_give_away_to_heir", "box must not be NULL (nor closed)");
    auto r = b->box.request_give_away_to_heir(entry, to_ns(timeout_ns));
    return r ? SHMBOX_OK : record(r.error());
  });
}

// ---- Looking at a box ---------------------------------------------------------

int shmbox_box_info(const shmbox_box* b, shmbox_info* out, shmbox_lane_info* lanes, size_t lanes_cap,
                    shmbox_heir_info* heirs, size_t heirs_cap) {
  return guarded("shmbox_box_info", [&]() -> int {
    if (!live(b) || out == nullptr) return bad("shmbox_box_info", "box and out must not be NULL (nor closed)");
    if ((lanes == nullptr && lanes_cap > 0) || (heirs == nullptr && heirs_cap > 0)) {
      return bad("shmbox_box_info", "a NULL array with a capacity above 0");
    }
    const sb::box_info i = sb::info(b->box);
    shmbox_info c{};
    c.struct_size = sizeof c;
    c.capacity = i.capacity;
    c.slot_size = i.slot_size;
    c.max_producers = i.max_producers;
    c.producers_attached = i.producers_attached;
    c.overflow = static_cast<int32_t>(i.overflow);
    c.mode = i.mode;
    c.uid = i.uid;
    c.depth = i.depth;
    c.segment_bytes = i.segment_bytes;
    c.block_timeout_ms = i.block_timeout.count();
    c.lease_ms = i.lease.count();
    c.spin_ns = i.spin.count();
    c.owner_pid = i.owner.pid;
    c.owner_alive = i.owner.alive;
    c.owner_expired = i.owner.expired;
    c.owner_same_namespace = i.owner.same_namespace;
    c.owner_pid_ns = i.owner.pid_ns;
    c.epoch = i.owner.epoch;
    c.owner_mode = i.owner.state == "notify" ? SHMBOX_NOTIFY : i.owner.state == "active" ? SHMBOX_ACTIVE : SHMBOX_PASSIVE;
    c.accepts_requests = i.accepts_requests;
    c.orphaned = i.orphaned;
    c.lane_count = static_cast<std::uint32_t>(i.lanes.size());
    c.heir_count = static_cast<std::uint32_t>(i.heirs.size());
    c.default_lane = i.default_lane;
    c.stash = i.stash;
    c.parked = i.parked;
    c.priority = i.priority;
    copy_text(c.buffer, i.buffer);
    copy_text(c.dead_letters, i.dead_letters);
    fill_transfer(c.last_transfer, i.last_transfer);
    fill_counters(c.count, i.count);
    c.replies_sent = i.replies.sent;
    c.replies_lost = i.replies.lost;
    c.replies_skipped = i.replies.skipped;
    c.reply_box = i.reply_box;
    if (!copy_out(out, c)) return bad("shmbox_box_info", "out->struct_size is not set");
    for (std::size_t k = 0; k < std::min(lanes_cap, i.lanes.size()); ++k) {
      const auto& l = i.lanes[k];
      shmbox_lane_info li{};
      li.struct_size = sizeof li;
      li.capacity = l.capacity;
      li.max_capacity = l.max_capacity;
      li.overflow = static_cast<int32_t>(l.overflow);
      li.depth = l.depth;
      li.parked = l.parked;
      li.quota = l.quota;
      fill_counters(li.count, l.count);
      // The caller's elements may be of an older, shorter layout: walk by its struct_size.
      const std::uint32_t stride = lanes[0].struct_size;
      if (stride < sizeof(std::uint32_t) || stride % alignof(shmbox_lane_info) != 0)
        return bad("shmbox_box_info", "lanes[i].struct_size is not set (sizeof(shmbox_lane_info) in every element)");
      auto* dst = reinterpret_cast<shmbox_lane_info*>(reinterpret_cast<char*>(lanes) + k * stride);
      if (dst->struct_size != stride || !copy_out(dst, li)) return bad("shmbox_box_info", "lanes[i].struct_size is not set");
    }
    for (std::size_t k = 0; k < std::min(heirs_cap, i.heirs.size()); ++k) {
      const auto& h = i.heirs[k];
      shmbox_heir_info hi{};
      hi.struct_size = sizeof hi;
      hi.entry = h.entry;
      hi.pid = h.pid;
      hi.same_namespace = h.same_namespace;
      hi.alive = h.alive;
      hi.listener = h.listener;
      hi.pid_ns = h.pid_ns;
      hi.data_size = static_cast<std::uint32_t>(std::min<std::size_t>(h.data.size(), sizeof hi.data - 1));
      std::memcpy(hi.data, h.data.data(), hi.data_size);
      hi.data[hi.data_size] = '\0';
      if (!copy_out(&heirs[k], hi)) return bad("shmbox_box_info", "heirs[i].struct_size is not set");
    }
    return SHMBOX_OK;
  });
}

int shmbox_verify(const char* name, void (*fn)(void* ctx, const char* problem), void* ctx, int* ok) {
  return guarded("shmbox_verify", [&]() -> int {
    if (name == nullptr || ok == nullptr) return bad("shmbox_verify", "name and ok must not be NULL");
    *ok = 0;
    auto r = sb::verify(name);
    if (!r) return record(r.error());
    if (fn != nullptr) {
      for (const auto& p : r->problems) fn(ctx, p.c_str());
    }
    *ok = r->ok ? 1 : 0;
    return SHMBOX_OK;
  });
}

int shmbox_peek(const shmbox_box* b, size_t max, void (*fn)(void* ctx, const void* data, size_t size, const shmbox_peek_info* info),
                void* ctx, size_t* count) {
  if (count != nullptr) *count = 0;
  return guarded("shmbox_peek", [&]() -> int {
    if (!live(b) || fn == nullptr) return bad("shmbox_peek", "box and fn must not be NULL (nor closed)");
    const std::uint64_t box_id = b->box.id();
    std::size_t n = 0;
    for (const sb::peeked_message& m : sb::peek(b->box, max)) {
      const bool parked = m.stash == "parked" || m.stash == "unstashed" ||
                          (m.stash == "reading" && m.position == sb::kNoPosition);
      shmbox_peek_info info{};
      info.struct_size = sizeof info;
      info.lane = m.lane;
      info.id = to_c_id(sb::message_id{box_id, m.lane, parked ? sb::kNoPosition : m.position});
      info.stash = m.stash.c_str();
      info.envelope = m.envelope.c_str();
      ++n;
      fn(ctx, m.data.data(), m.data.size(), &info);
    }
    if (count != nullptr) *count = n;
    return SHMBOX_OK;
  });
}
