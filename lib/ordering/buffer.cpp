// lib/ordering/buffer.cpp - CUSTOM BUFFERS (ring.hpp): the registry of buffer types,
// and the owner's side: pushing moved messages into a lane's buffer,
// dropping what it names, delivering what it pops, rebuilding it at a
// takeover or after it broke its contract.
#include <algorithm>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "base/errors.hpp"
#include "base/fault.hpp"
#include "ring/ring.hpp"
#include "ring/ring_internal.hpp"
#include "segment/segment.hpp"

namespace shmbox {

namespace {

struct registry {
  std::mutex mu;
  std::map<std::string, std::shared_ptr<const buffer_type>, std::less<>> types;
};

registry& the_registry() {
  static registry r;
  return r;
}

}  // namespace

result<void> register_buffer(std::string_view name, buffer_type type) {
  if (!detail::valid_buffer_name(name))
    return detail::fail(errc::invalid_argument, "buffer type '" + std::string(name) + "': use 1-" +
                                                    std::to_string(detail::kMaxBufferName) + " characters of A-Z a-z 0-9 . _ -");
  if (!type.make)
    return detail::fail(errc::invalid_argument, "buffer type '" + std::string(name) + "': buffer_type::make is empty (it makes each lane's buffer)");
  auto t = std::make_shared<const buffer_type>(std::move(type));
  registry& r = the_registry();
  const std::lock_guard lock(r.mu);
  r.types[std::string(name)] = std::move(t);
  return {};
}

bool buffer_registered(std::string_view name) { return detail::find_buffer(name) != nullptr; }

namespace detail {

bool valid_buffer_name(std::string_view name) noexcept {
  if (name.empty() || name.size() > kMaxBufferName) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
  });
}

std::shared_ptr<const buffer_type> find_buffer(std::string_view name) {
  registry& r = the_registry();
  const std::lock_guard lock(r.mu);
  const auto it = r.types.find(name);
  return it == r.types.end() ? nullptr : it->second;
}

std::error_code buffer_unknown_error(const mapped_box& m, std::string_view doing) {
  return fail(errc::buffer_unknown, "box '" + m.name + "' delivers through custom buffer '" + m.buffer_name +
                                        "', which this process has not registered: call shmbox::register_buffer(\"" +
                                        m.buffer_name + "\", ...) before " + std::string(doing));
}

namespace {

// Ids name a store entry and the low half of its ring position, so a stale
// or made-up id is told apart from the entry's current message.
std::uint64_t make_id(std::uint32_t entry, std::uint64_t order) noexcept { return (order << 32) | entry; }

// The fallback when the registered type cannot make a buffer (its make threw,
// or returned null): FIFO, refusing the new message when full. The box keeps
// delivering; last_error says why.
class fifo_fallback final : public buffer {
 public:
  std::optional<std::uint64_t> push(const buffered& m) override {
    q_.push_back(m.id);
    return std::nullopt;
  }
  std::uint64_t push_drop(const buffered& m) override { return m.id; }
  std::optional<std::uint64_t> pop() override {
    if (q_.empty()) return std::nullopt;
    const std::uint64_t id = q_.front();
    q_.pop_front();
    return id;
  }
  std::vector<std::uint64_t> drop(std::size_t n) override {
    std::vector<std::uint64_t> out;
    while (n-- > 0 && !q_.empty()) {
      out.push_back(q_.back());
      q_.pop_back();
    }
    return out;
  }
  std::size_t size() const override { return q_.size(); }

 private:
  std::deque<std::uint64_t> q_;
};

std::uint64_t queued_state(const owner_ctx& o, std::uint64_t seen) noexcept {
  return make_stash_state(stash_kind::queued, o.epoch, stash_redelivered(seen), true);
}

// The entry an id names, if the lane's buffer holds it.
bool resolve(const owner_ctx& o, std::uint32_t lane, std::uint64_t id, std::uint32_t& entry) noexcept {
  const auto i = static_cast<std::uint32_t>(id & 0xFFFFFFFFu);
  if (i >= o.buf_in.size() || o.buf_in[i] == 0) return false;
  stash_entry* e = o.m->stash_at(i);
  // relaxed: our own entry (QUEUED by us)
  if ((e->order.load(std::memory_order_relaxed) & 0xFFFFFFFFu) != (id >> 32)) return false;
  if (e->lane.load(std::memory_order_relaxed) != lane) return false;
  entry = i;
  return true;
}

void make_buffer(owner_ctx& o, std::uint32_t lane, bool fallback) noexcept {
  o.bufs[lane].reset();
  o.buf_held[lane] = 0;
  if (!fallback && o.buf_type && o.buf_type->make) {
    try {
      o.bufs[lane] = o.buf_type->make(buffer_context{o.m->name, lane, o.m->lanes[lane].limit()});
    } catch (...) {
      o.bufs[lane].reset();
    }
  }
  if (!o.bufs[lane]) {
    if (!fallback)
      o.last_error = fail(errc::buffer_broken, "box '" + o.m->name + "' lane " + std::to_string(lane) + ": custom buffer '" +
                                                   o.m->buffer_name + "' could not make a buffer (make threw, returned null, or the type is not registered); the lane delivers FIFO until a new owner");
    o.bufs[lane] = std::make_unique<fifo_fallback>();
  }
}

// The lane's QUEUED entries that are not given back, in arrival order.
std::vector<std::uint32_t> lane_queued(const owner_ctx& o, std::uint32_t lane) {
  std::vector<std::pair<std::uint64_t, std::uint32_t>> v;
  for (std::uint32_t i = 0; i < o.m->stash_entries(); ++i) {
    stash_entry* e = o.m->stash_at(i);
    const std::uint64_t s = e->state.load(std::memory_order_relaxed);  // relaxed: ours
    if (stash_kind_of(s) != stash_kind::queued || stash_epoch_of(s) != o.epoch) continue;
    if (e->lane.load(std::memory_order_relaxed) != lane) continue;
    if (std::find(o.buf_front[lane].begin(), o.buf_front[lane].end(), i) != o.buf_front[lane].end()) continue;
    v.emplace_back(e->order.load(std::memory_order_relaxed), i);
  }
  std::sort(v.begin(), v.end());
  std::vector<std::uint32_t> out;
  out.reserve(v.size());
  for (const auto& [order, i] : v) out.push_back(i);
  return out;
}

// The buffer broke its contract: a new one, from the store (then, if that
// breaks too, the FIFO fallback). Nothing stored is lost.
void rebuild_lane(owner_ctx& o, std::uint32_t lane, const std::string& why) noexcept;

// Pushes buf_new[lane]; collects the ids to drop. False: contract broken (why set).
bool push_new(owner_ctx& o, std::uint32_t lane, std::vector<std::uint32_t>& victims, std::string& why) {
  buffer& b = *o.bufs[lane];
  const std::uint64_t limit = o.m->lanes[lane].limit();
  auto take_victim = [&](std::uint64_t id) {
    std::uint32_t v = 0;
    if (!resolve(o, lane, id, v)) {
      why = "named id " + std::to_string(id) + ", which it does not hold";
      return false;
    }
    o.buf_in[v] = 0;
    --o.buf_held[lane];
    victims.push_back(v);
    return true;
  };
  for (const std::uint32_t i : o.buf_new[lane]) {
    stash_entry* e = o.m->stash_at(i);
    const std::uint64_t seen = e->state.load(std::memory_order_relaxed);  // relaxed: QUEUED by us (M4)
    if (stash_kind_of(seen) != stash_kind::queued || stash_epoch_of(seen) != o.epoch) continue;
    buffered msg;
    const std::uint64_t order = e->order.load(std::memory_order_relaxed);
    msg.id = make_id(i, order);
    msg.key = static_cast<std::int64_t>(e->priority.load(std::memory_order_relaxed));
    msg.sequence = order;
    msg.lane = lane;
    msg.redelivered = stash_redelivered(seen);
    msg.payload = std::string_view(reinterpret_cast<const char*>(mapped_box::stash_payload(e)),
                                   std::min<std::uint32_t>(e->length.load(std::memory_order_relaxed), o.m->geo.params.slot_payload));
    // (A buffer that holds nothing is never asked to drop: given-back messages fill the lane.)
    const bool full = o.buf_held[lane] != 0 && o.buf_held[lane] + o.buf_front[lane].size() >= limit;
    o.buf_in[i] = 1;
    ++o.buf_held[lane];
    if (full) {
      if (!take_victim(b.push_drop(msg))) return false;
    } else if (const auto v = b.push(msg)) {
      if (!take_victim(*v)) return false;
    }
  }
  o.buf_new[lane].clear();
  // A shrink (Box::resize): the buffer drops what exceeds the limit.
  const std::uint64_t holds = o.buf_held[lane] + o.buf_front[lane].size();
  if (holds > limit && o.buf_held[lane] > 0) {
    const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(holds - limit, o.buf_held[lane]));
    const std::vector<std::uint64_t> ids = b.drop(n);
    if (ids.size() != n) {
      why = "drop(" + std::to_string(n) + ") named " + std::to_string(ids.size()) + " messages";
      return false;
    }
    for (const std::uint64_t id : ids)
      if (!take_victim(id)) return false;
  }
  if (b.size() != o.buf_held[lane]) {
    why = "size() says " + std::to_string(b.size()) + " but it holds " + std::to_string(o.buf_held[lane]);
    return false;
  }
  return true;
}

// Commits the victims as dropped by the buffer (U2-U4: QUEUED -> DONE(dropped) -> FREE).
void drop_victims(owner_ctx& o, std::uint32_t lane, const std::vector<std::uint32_t>& victims) noexcept {
  if (victims.empty()) return;
  std::vector<std::uint64_t> states;
  states.reserve(victims.size());
  for (const std::uint32_t v : victims) states.push_back(queued_state(o, o.m->stash_at(v)->state.load(std::memory_order_relaxed)));
  const std::vector<char> drops(victims.size(), 1);
  SHMBOX_FAULT("owner.before_buffer_drop");
  commit_entries(o, lane, victims.data(), states.data(), victims.size(), nullptr, 0, drops.data(), true);
}

void rebuild_lane(owner_ctx& o, std::uint32_t lane, const std::string& why) noexcept {
  o.last_error = fail(errc::buffer_broken, "box '" + o.m->name + "' lane " + std::to_string(lane) + ": custom buffer '" +
                                               o.m->buffer_name + "' broke its contract (" + why +
                                               "); it was rebuilt from the store, nothing was lost");
  const std::error_code err = o.last_error;
  for (int attempt = 0; attempt < 2; ++attempt) {
    for (std::uint32_t i = 0; i < o.buf_in.size(); ++i)
      if (o.buf_in[i] != 0 && o.m->stash_at(i)->lane.load(std::memory_order_relaxed) == lane) o.buf_in[i] = 0;
    make_buffer(o, lane, attempt == 1);
    o.buf_new[lane] = lane_queued(o, lane);
    std::vector<std::uint32_t> victims;
    std::string again;
    bool ok = false;
    try {
      ok = push_new(o, lane, victims, again);
    } catch (...) {
      again = "it threw";
    }
    drop_victims(o, lane, victims);
    if (ok) break;
  }
  o.last_error = err;
}

}  // namespace

bool buf_admit(owner_ctx& o, std::uint32_t lane) noexcept {
  if (!o.bufs[lane]) make_buffer(o, lane, false);
  std::vector<std::uint32_t> victims;
  std::string why;
  bool ok = false;
  try {
    ok = push_new(o, lane, victims, why);
  } catch (const std::exception& ex) {
    why = std::string("it threw: ") + ex.what();
  } catch (...) {
    why = "it threw";
  }
  drop_victims(o, lane, victims);
  if (!ok) rebuild_lane(o, lane, why);
  return ok;
}

bool buf_next(owner_ctx& o, std::uint32_t lane, std::uint32_t& entry, bool& broken) noexcept {
  if (!o.buf_front[lane].empty()) {
    entry = o.buf_front[lane].front();
    o.buf_front[lane].pop_front();
    return true;
  }
  if (o.buf_held[lane] == 0 || !o.bufs[lane]) return false;
  std::string why;
  try {
    if (const auto id = o.bufs[lane]->pop()) {
      if (resolve(o, lane, *id, entry)) {
        o.buf_in[entry] = 0;
        --o.buf_held[lane];
        return true;
      }
      why = "pop() named id " + std::to_string(*id) + ", which it does not hold";
    } else {
      why = "pop() returned nothing while it holds " + std::to_string(o.buf_held[lane]);
    }
  } catch (const std::exception& ex) {
    why = std::string("pop() threw: ") + ex.what();
  } catch (...) {
    why = "pop() threw";
  }
  broken = true;
  rebuild_lane(o, lane, why);
  return false;
}

void buf_put_back(owner_ctx& o, std::uint32_t lane, std::uint32_t entry, bool front) noexcept {
  if (front)
    o.buf_front[lane].push_front(entry);
  else
    o.buf_front[lane].push_back(entry);
}

void buf_rebuild(owner_ctx& o, const std::vector<std::uint32_t>& queued) noexcept {
  o.buf_in.assign(o.m->stash_entries(), 0);
  std::vector<std::pair<std::uint64_t, std::uint32_t>> by_lane[kMaxLanes];
  for (const std::uint32_t i : queued) {
    stash_entry* e = o.m->stash_at(i);
    // relaxed: entries this owner has just made QUEUED; the lane is read again (shared memory)
    const std::uint32_t lane = e->lane.load(std::memory_order_relaxed);
    if (lane >= o.m->lane_count()) continue;  // scribbled: never delivered; verify reports it
    by_lane[lane].emplace_back(e->order.load(std::memory_order_relaxed), i);
  }
  for (std::uint32_t l = 0; l < o.m->lane_count(); ++l) {
    o.buf_front[l].clear();
    make_buffer(o, l, false);
    std::sort(by_lane[l].begin(), by_lane[l].end());
    o.buf_new[l].clear();
    for (const auto& [order, i] : by_lane[l]) o.buf_new[l].push_back(i);
    buf_admit(o, l);
  }
}

bool buf_waiting(const owner_ctx& o) noexcept {
  for (std::uint32_t l = 0; l < kMaxLanes; ++l)
    if (o.buf_held[l] != 0 || !o.buf_front[l].empty() || !o.buf_new[l].empty()) return true;
  return false;
}

}  // namespace detail
}  // namespace shmbox
