// lib/inspect/info.cpp - looking into a box without a role: its counters
// (Box::read_counters, per lane), its messages (peek) and its description
// (info: box_info).
#include "shmbox/box.hpp"
#include "shmbox/inspect.hpp"

#include <unistd.h>
#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "base/errors.hpp"
#include "base/futex.hpp"
#include "base/access.hpp"
#include "ownership/handover.hpp"
#include "ownership/lease.hpp"
#include "segment/envelope.hpp"
#include "segment/liveness.hpp"
#include "base/process.hpp"
#include "ring/ring.hpp"
#include "segment/segment.hpp"

namespace shmbox {

namespace {
// The counters of one lane: sums over producer entries and owner actors.
counters lane_counters(const detail::mapped_box& m, std::uint32_t l) {
  const detail::lane_view& L = m.lanes[l];
  std::uint64_t stored = 0, rejected = 0, dropped_new = 0, replaced = 0, evicted = 0, timeouts = 0, too_large = 0,
                abandoned = 0, shrunk = 0, sort_filtered = 0, buffer_dropped = 0;
  counters c;
  for (std::uint32_t i = 0; i < m.max_producers(); ++i) {
    const detail::producer_lane_counters* pc = m.producer_counters(i, l);
    c.dead_lettered += pc->dead_lettered.load(std::memory_order_relaxed);
    c.dead_letter_failed += pc->dead_letter_failed.load(std::memory_order_relaxed);
    c.aborted += pc->aborted.load(std::memory_order_relaxed);
    stored += pc->stored.load(std::memory_order_relaxed);
    rejected += pc->rejected.load(std::memory_order_relaxed);
    dropped_new += pc->dropped_new.load(std::memory_order_relaxed);
    replaced += pc->replaced.load(std::memory_order_relaxed);
    evicted += pc->evicted.load(std::memory_order_relaxed);
    shrunk += pc->shrunk.load(std::memory_order_relaxed);
    timeouts += pc->timeouts.load(std::memory_order_relaxed);
    too_large += pc->too_large.load(std::memory_order_relaxed);
    abandoned += pc->abandoned.load(std::memory_order_relaxed);
    // THE QUOTA: each also counts in the counter its policy names (as `shrunk` does)
    const std::uint64_t qr = pc->quota_rejected.load(std::memory_order_relaxed),
                        qd = pc->quota_dropped.load(std::memory_order_relaxed),
                        qt = pc->quota_timeouts.load(std::memory_order_relaxed);
    rejected += qr;
    dropped_new += qd;
    timeouts += qt;
    c.quota_refused += qr + qd + qt;
  }
  for (std::uint32_t a = 0; a < detail::kOwnerActors; ++a) {
    const detail::owner_lane_counters* oc = m.actor_counters(a, l);
    c.delivered += oc->delivered.load(std::memory_order_relaxed);
    c.redelivered += oc->redelivered.load(std::memory_order_relaxed);
    c.filtered += oc->filtered.load(std::memory_order_relaxed);
    c.stashed += oc->stashed.load(std::memory_order_relaxed);
    c.unstashed += oc->unstashed.load(std::memory_order_relaxed);
    sort_filtered += oc->sort_filtered.load(std::memory_order_relaxed);
    buffer_dropped += oc->buffer_dropped.load(std::memory_order_relaxed);
    abandoned += oc->abandoned.load(std::memory_order_relaxed);
  }
  // A priority box counts a message delivered when it leaves its ring for
  // the owner's store (ring.hpp PRIORITY BOXES): those still in the store
  // are not delivered yet (they are in the lane's depth).
  // And the store's messages the owner's filter dropped are filtered, not delivered.
  // A custom buffer's drops likewise (CUSTOM BUFFERS): filtered, and of it buffer_dropped.
  if (m.priority()) {
    c.delivered -= std::min<std::uint64_t>(c.delivered, detail::sorted_count(m, l) + sort_filtered + buffer_dropped);
    c.filtered += sort_filtered + buffer_dropped;
    c.buffer_dropped = buffer_dropped;
  }
  // FIFO lanes: the tail counts every claimed position exactly (a claim is
  // the tail CAS itself); lifo lanes sum the entries' stored counters.
  if (!L.is_lifo()) stored = L.hdr->tail.load(std::memory_order_relaxed) >> 1;
  c.stored = stored;
  c.rejected = rejected;
  c.too_large = too_large;
  c.timeouts = timeouts;
  c.dropped_newest = dropped_new + replaced + shrunk;  // shrunk: stored, then dropped by a resize (not posts)
  c.shrunk = shrunk;
  c.dropped_oldest = evicted;
  c.abandoned = abandoned;
  c.posted = stored + rejected + dropped_new + timeouts + too_large;
  return c;
}

// A FIFO lane's messages published by `actor` (a producer entry + 1) since
// its current holder took the entry (at position `from`: the entry's
// attached_tail) and not yet taken: what THE QUOTA counts (ring.hpp; exact
// when idle). A previous holder's messages still waiting are not its.
std::uint64_t waiting_of(const detail::lane_view& L, std::uint32_t actor, std::uint64_t from) noexcept {
  using namespace detail;
  // acquire: pairs with P3's release (tail), T7's (head) and P5's (slots), as lane_depth_scan
  const std::uint64_t t = L.hdr->tail.load(std::memory_order_acquire) >> 1;
  std::uint64_t q = std::min(L.hdr->head.load(std::memory_order_acquire), t);
  if (t - q > L.capacity) q = t - L.capacity;
  if (from > q && from <= t) q = from;
  std::uint64_t n = 0;
  for (; q < t; ++q)  // (acquire: as above)
    n += L.slot_for(q)->seq.load(std::memory_order_acquire) == make_seq(q, slot_state::full, actor);
  return n;
}

void add(counters& sum, const counters& c) {
  sum.posted += c.posted;
  sum.stored += c.stored;
  sum.delivered += c.delivered;
  sum.rejected += c.rejected;
  sum.too_large += c.too_large;
  sum.timeouts += c.timeouts;
  sum.dropped_newest += c.dropped_newest;
  sum.shrunk += c.shrunk;
  sum.dropped_oldest += c.dropped_oldest;
  sum.filtered += c.filtered;
  sum.buffer_dropped += c.buffer_dropped;
  sum.abandoned += c.abandoned;
  sum.aborted += c.aborted;
  sum.redelivered += c.redelivered;
  sum.dead_lettered += c.dead_lettered;
  sum.dead_letter_failed += c.dead_letter_failed;
  sum.stashed += c.stashed;
  sum.unstashed += c.unstashed;
  sum.quota_refused += c.quota_refused;
}
}  // namespace

namespace {
std::vector<peeked_message> peek_raw(const Box& box, std::size_t max);
}  // namespace

std::vector<peeked_message> peek(const Box& box, std::size_t max) {
  std::vector<peeked_message> out = peek_raw(box, max);
  // The bytes an owner receives: a request's trailer (or a reply's, in a
  // reply box) is not the message's (lib/segment/envelope.hpp). Read from
  // the copies, never the segment: a forged trailer misleads only the view
  // of its own message.
  const bool reply_box = detail::access::box(box)->reply_box;
  for (peeked_message& p : out) {
    const auto* d = reinterpret_cast<const std::byte*>(p.data.data());
    std::size_t body = detail::envelope::request_body(d, p.data.size());
    if (body < p.data.size()) {
      p.envelope = "request";
    } else if (reply_box && detail::envelope::parse_reply(p.data, body)) {
      p.envelope = "reply";
    } else {
      continue;
    }
    p.data.resize(body);
  }
  return out;
}

namespace {
std::vector<peeked_message> peek_raw(const Box& box, std::size_t max) {
  const detail::mapped_box& m = *detail::access::box(box);
  std::vector<peeked_message> out;
  std::string bytes;
  // Copies one slot if it holds a published message, and keeps the copy only
  // if the slot still holds that message afterwards (a seqlock read: the
  // sequence word changes whenever a slot is taken, evicted or reused).
  auto copy_if_stable = [&](const detail::lane_view& L, detail::slot_header* s, std::uint64_t seen) -> bool {
    const std::uint32_t len = std::min(s->length.load(std::memory_order_relaxed), L.payload);
    bytes.resize(len);
    const auto* src = detail::lane_view::payload_of(s);
    // A producer may rewrite these bytes while we copy (the slot was taken,
    // freed and reused): copy through volatile (one read of each byte, never
    // re-read) and keep the copy only if the sequence word did not change.
    for (std::uint32_t b = 0; b < len; ++b) bytes[b] = static_cast<char>(static_cast<const volatile std::byte*>(src)[b]);
    std::atomic_thread_fence(std::memory_order_acquire);
    return s->seq.load(std::memory_order_relaxed) == seen;
  };
  // The stash first, in stash order (seqlock reads of each entry, as above):
  // parked, unstashed and being read; in a priority box, whose unstashed
  // messages are in their lane's order, the parked ones only.
  auto list_stash = [&](bool parked_only) {
    std::vector<std::pair<std::uint64_t, std::uint32_t>> parked;  // (order, entry)
    for (std::uint32_t i = 0; i < m.stash_entries(); ++i) {
      const std::uint64_t s = m.stash_at(i)->state.load(std::memory_order_acquire);
      const detail::stash_kind k = detail::stash_kind_of(s);
      if (detail::stash_sorted(s)) continue;  // a priority box's store
      if (k == detail::stash_kind::parked || (!parked_only && (k == detail::stash_kind::front || k == detail::stash_kind::taken)))
        parked.emplace_back(m.stash_at(i)->order.load(std::memory_order_relaxed), i);
    }
    std::sort(parked.begin(), parked.end());
    for (const auto& [order, i] : parked) {
      if (out.size() >= max) break;
      detail::stash_entry* e = m.stash_at(i);
      const std::uint64_t seen = e->state.load(std::memory_order_acquire);
      const detail::stash_kind k = detail::stash_kind_of(seen);
      const std::uint32_t lane = e->lane.load(std::memory_order_relaxed);
      const std::uint32_t len = std::min(e->length.load(std::memory_order_relaxed), m.geo.params.slot_payload);
      if (lane >= m.lane_count()) continue;
      bytes.resize(len);
      const auto* src = detail::mapped_box::stash_payload(e);
      for (std::uint32_t b = 0; b < len; ++b) bytes[b] = static_cast<char>(static_cast<const volatile std::byte*>(src)[b]);
      std::atomic_thread_fence(std::memory_order_acquire);
      if (e->state.load(std::memory_order_relaxed) != seen) continue;
      out.push_back({lane, order, bytes,
                     k == detail::stash_kind::parked ? "parked" : k == detail::stash_kind::front ? "unstashed" : "reading",
                     {}});
    }
  };
  if (m.priority()) {
    // A priority box (ring.hpp PRIORITY BOXES): its parked messages, then lane
    // by lane the store's messages (with the stash's unstashed ones, first in
    // their priority) and the ring's not yet sorted ones together, in the
    // owner's order (priority, then ring position). Seqlock reads, as above.
    list_stash(true);
    struct item {
      std::int64_t priority;
      std::uint64_t position;  // an unstashed one: its stash order
      bool store;
      std::uint32_t where;  // entry, or slot index
      std::uint64_t seen;
      bool front = false;  // unstashed (THE STASH)
    };
    for (std::uint32_t l = 0; l < m.lane_count() && out.size() < max; ++l) {
      const detail::lane_view& L = m.lanes[l];
      std::vector<item> items;
      for (std::uint32_t i = 0; i < m.stash_entries(); ++i) {
        detail::stash_entry* e = m.stash_at(i);
        const std::uint64_t seen = e->state.load(std::memory_order_acquire);
        const detail::stash_kind k = detail::stash_kind_of(seen);
        const bool front = !detail::stash_sorted(seen) && (k == detail::stash_kind::front || k == detail::stash_kind::taken);
        if (k != detail::stash_kind::queued && !(k == detail::stash_kind::taken && detail::stash_sorted(seen)) && !front) continue;
        if (e->lane.load(std::memory_order_relaxed) != l) continue;
        items.push_back({static_cast<std::int64_t>(e->priority.load(std::memory_order_relaxed)),
                         e->order.load(std::memory_order_relaxed), true, i, seen, front});
      }
      const std::uint64_t tail = L.hdr->tail.load(std::memory_order_acquire) >> 1;
      const std::uint64_t head = L.hdr->head.load(std::memory_order_acquire);
      std::uint64_t p = tail > L.capacity ? std::max(head, tail - L.capacity) : head;
      if (p > tail) p = tail;  // a scribbled head
      for (; p < tail; ++p) {
        detail::slot_header* s = L.slot_for(p);
        const std::uint64_t seen = s->seq.load(std::memory_order_acquire);
        if (detail::seq_state(seen) != detail::slot_state::full || detail::pos_diff(detail::seq_pos(seen), p) != 0) continue;
        items.push_back({static_cast<std::int64_t>(L.priority_of(s)->load(std::memory_order_relaxed)), p, false,
                         static_cast<std::uint32_t>(L.slot_index(p)), seen});
      }
      // A custom-buffer box (CUSTOM BUFFERS): its buffer's order is the
      // owner's to know: the store's messages in arrival order, then the ring's.
      if (m.buffered())
        std::sort(items.begin(), items.end(), [](const item& a, const item& b) {
          return a.store != b.store ? a.store : a.position < b.position;
        });
      else
        std::sort(items.begin(), items.end(), [](const item& a, const item& b) {
          if (a.priority != b.priority) return a.priority < b.priority;
          return a.front != b.front ? a.front : a.position < b.position;
        });
      for (const item& it : items) {
        if (out.size() >= max) break;
        if (!it.store) {
          if (copy_if_stable(L, L.slot_at_index(it.where), it.seen)) out.push_back({l, it.position, bytes, {}, {}});
          continue;
        }
        detail::stash_entry* e = m.stash_at(it.where);
        const std::uint32_t len = std::min(e->length.load(std::memory_order_relaxed), m.geo.params.slot_payload);
        bytes.resize(len);
        const auto* src = detail::mapped_box::stash_payload(e);
        for (std::uint32_t b = 0; b < len; ++b) bytes[b] = static_cast<char>(static_cast<const volatile std::byte*>(src)[b]);
        std::atomic_thread_fence(std::memory_order_acquire);
        if (e->state.load(std::memory_order_relaxed) != it.seen) continue;
        out.push_back({l, it.position, bytes,
                       detail::stash_kind_of(it.seen) == detail::stash_kind::front ? "unstashed"
                       : detail::stash_kind_of(it.seen) != detail::stash_kind::queued ? "reading"
                       : m.buffered()                                            ? "buffered"
                                                                                 : "sorted",
                       {}});
      }
    }
    return out;
  }
  list_stash(false);
  for (std::uint32_t l = 0; l < m.lane_count() && out.size() < max; ++l) {
    const detail::lane_view& L = m.lanes[l];
    if (L.is_lifo()) {
      std::vector<std::pair<std::uint64_t, std::uint32_t>> full;  // (stamp, slot), newest first
      for (std::uint32_t i = 0; i < L.capacity; ++i) {
        const std::uint64_t seen = L.slot_at_index(i)->seq.load(std::memory_order_acquire);
        if (detail::seq_state(seen) == detail::slot_state::full) full.emplace_back(detail::seq_pos(seen), i);
      }
      std::sort(full.begin(), full.end(), std::greater<>());
      for (const auto& [stamp, i] : full) {
        if (out.size() >= max) break;
        detail::slot_header* s = L.slot_at_index(i);
        const std::uint64_t seen = s->seq.load(std::memory_order_acquire);
        if (detail::seq_state(seen) != detail::slot_state::full || detail::seq_pos(seen) != stamp) continue;
        if (copy_if_stable(L, s, seen)) out.push_back({l, stamp, bytes, {}, {}});
      }
      continue;
    }
    const std::uint64_t tail = L.hdr->tail.load(std::memory_order_acquire) >> 1;
    const std::uint64_t head = L.hdr->head.load(std::memory_order_acquire);
    // The head is published once per receive call and may lag; never look
    // further back than one lap.
    std::uint64_t p = tail > L.capacity ? std::max(head, tail - L.capacity) : head;
    if (p > tail) p = tail;  // a scribbled head
    for (; p < tail && out.size() < max; ++p) {
      detail::slot_header* s = L.slot_for(p);
      const std::uint64_t seen = s->seq.load(std::memory_order_acquire);
      if (detail::seq_state(seen) != detail::slot_state::full || detail::pos_diff(detail::seq_pos(seen), p) != 0) continue;
      if (copy_if_stable(L, s, seen)) out.push_back({l, p, bytes, {}, {}});
    }
  }
  return out;
}
}  // namespace

counters Box::read_counters() const {
  counters total;
  for (std::uint32_t l = 0; l < m_->lane_count(); ++l) add(total, lane_counters(*m_, l));
  return total;
}

box_info info(const Box& box) {
  const detail::mapped_box& m = *detail::access::box(box);
  box_info i;
  i.name = m.name;
  i.capacity = box.capacity();
  i.slot_size = box.slot_size();
  i.overflow = box.overflow();
  i.max_producers = m.max_producers();
  i.segment_bytes = m.geo.total_bytes;
  i.mode = m.mode;
  i.uid = m.uid;
  i.block_timeout = std::chrono::milliseconds(m.block_timeout_ms);
  for (std::uint32_t p = 0; p < m.max_producers(); ++p) {
    const std::uint64_t k = m.producer(p)->key.load(std::memory_order_acquire);
    if (k == 0) continue;
    producer_info pi;
    pi.entry = p;
    pi.pid = detail::key_pid(k);
    pi.alive = detail::role_alive(m, detail::producer_byte(m, p), k);
    pi.pid_ns = m.producer(p)->pid_ns.load(std::memory_order_relaxed);
    pi.same_namespace = pi.pid_ns == detail::self_pid_ns();
    for (std::uint32_t l = 0; l < m.lane_count(); ++l) {
      const detail::producer_lane_counters* pc = m.producer_counters(p, l);
      pi.stored += pc->stored.load(std::memory_order_relaxed);
      pi.refused += pc->rejected.load(std::memory_order_relaxed) + pc->dropped_new.load(std::memory_order_relaxed) +
                    pc->timeouts.load(std::memory_order_relaxed) + pc->too_large.load(std::memory_order_relaxed);
      pi.aborted += pc->aborted.load(std::memory_order_relaxed);
      pi.quota_refused += pc->quota_rejected.load(std::memory_order_relaxed) + pc->quota_dropped.load(std::memory_order_relaxed) +
                          pc->quota_timeouts.load(std::memory_order_relaxed);
      // relaxed: a hint written once when the holder attached (layout.hpp)
      if (!m.lanes[l].is_lifo()) pi.waiting += waiting_of(m.lanes[l], p + 1, pc->attached_tail.load(std::memory_order_relaxed));
    }
    if (pi.alive) ++i.producers_attached;
    i.producers.push_back(pi);
  }
  for (std::uint32_t l = 0; l < m.lane_count(); ++l) {
    lane_info li;
    li.capacity = m.lanes[l].limit();
    li.max_capacity = m.lanes[l].resizable ? m.lanes[l].capacity : 0;
    li.overflow = m.lanes[l].pol;
    li.quota = m.lanes[l].quota;
    li.depth = detail::lane_depth_scan(m, l);
    li.count = lane_counters(m, l);
    li.parked = detail::stash_count(m, l);
    i.parked += li.parked;
    i.depth += li.depth;
    i.lanes.push_back(li);
  }
  i.lease = std::chrono::milliseconds(m.lease_ms());
  i.spin = std::chrono::nanoseconds(m.spin_ns);
  i.default_lane = m.default_lane;
  i.dead_letters = m.dead_letters;
  i.dead_letter_refused = m.dead_letter_refused;
  i.reply_box = m.reply_box;
  i.stash = m.user_stash();
  i.priority = m.priority() && !m.buffered();
  i.buffer = m.buffer_name;
  const detail::owner_view v = detail::view_owner(m);
  i.owner.pid = detail::key_pid(v.key);
  i.owner.pid_ns = v.key != 0 ? v.pid_ns : 0;
  i.owner.same_namespace = v.key != 0 && v.pid_ns == detail::self_pid_ns();
  i.owner.alive = v.alive;
  i.owner.expired = v.expired;
  i.owner.epoch = v.epoch;
  i.accepts_requests = v.alive && detail::accepts_requests(m, v.epoch);
  switch (detail::state_mode(m.owner()->state.load(std::memory_order_relaxed))) {
    case detail::owner_state::notify: i.owner.state = "notify"; break;
    case detail::owner_state::active: i.owner.state = "active"; break;
    default: i.owner.state = "passive"; break;
  }
  bool live_heir = false;
  for (const detail::heir_view& h : detail::list_heirs(m, false)) {
    heir_info hi;
    hi.entry = h.index;
    hi.pid = detail::key_pid(h.key);
    hi.pid_ns = h.pid_ns;
    hi.same_namespace = h.pid_ns == detail::self_pid_ns();
    hi.alive = h.alive;
    hi.listener = h.listener;
    hi.data = h.data;
    i.heirs.push_back(std::move(hi));
    live_heir |= h.alive && !h.listener && h.key != v.key;
  }
  i.orphaned = v.key != 0 && (!v.alive || v.expired) && !live_heir;
  const detail::transfer_view t = detail::read_transfer(m);
  if (t.epoch != 0) {
    i.last_transfer.box = m.name;
    i.last_transfer.epoch = t.epoch;
    i.last_transfer.from_pid = detail::key_pid(t.from_key);
    i.last_transfer.to_pid = detail::key_pid(t.to_key);
    i.last_transfer.from_pid_ns = t.from_ns;
    i.last_transfer.to_pid_ns = t.to_ns;
    i.last_transfer.data = t.data;
    i.last_transfer.reason = static_cast<transfer_reason>(static_cast<std::uint8_t>(t.reason));
  }
  for (const lane_info& li : i.lanes) add(i.count, li.count);
  for (std::uint32_t a = 0; a < detail::kOwnerActors; ++a) {  // request/reply (Owner::reply)
    const detail::owner_actor* act = m.actor(a);
    i.replies.sent += act->replies.load(std::memory_order_relaxed);
    i.replies.lost += act->replies_lost.load(std::memory_order_relaxed);
    i.replies.skipped += act->replies_skipped.load(std::memory_order_relaxed);
  }
  return i;
}

}  // namespace shmbox
