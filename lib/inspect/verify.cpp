// lib/inspect/verify.cpp - verify(): the invariants of a segment, checked while it
// may be in use. Every check below holds at every instant of the protocol
// (ring.hpp, lease.cpp), so what it reports is damage, not a race; values
// that move (tails, counters) are read so that a concurrent step cannot make
// a healthy box look broken.
#include <algorithm>
#include <chrono>
#include <map>
#include <thread>

#include "base/access.hpp"
#include "base/errors.hpp"
#include "segment/layout.hpp"
#include "segment/liveness.hpp"
#include "base/process.hpp"
#include "ring/ring.hpp"
#include "segment/segment.hpp"
#include "shmbox/box.hpp"
#include "shmbox/inspect.hpp"

namespace shmbox {
namespace {

using namespace detail;

struct checker {
  const mapped_box& m;
  verify_report& r;
  void problem(std::string what) {
    r.ok = false;
    if (r.problems.size() < 64) r.problems.push_back(std::move(what));
    else if (r.problems.size() == 64) r.problems.push_back("(more problems not listed)");
  }

  bool valid_op(std::uint64_t op) const {
    return op == 0 || (op_kind_of(op) <= op_kind::stash_commit && op_lane(op) < m.lane_count());
  }
  bool producer_actor(std::uint32_t a) const { return a >= 1 && a <= m.max_producers(); }

  // Every bounded field of the header, read again from the segment: open
  // refuses the ones it cannot use (geometry, policy, lease, block timeout)
  // and bounds the spin; this names each that is out of range.
  void header() {
    const segment_header* h = m.header();
    const std::uint32_t block_ms = h->block_timeout_ms, lease_ms = h->lease_ms, spin_ns = h->spin_ns, pol = h->default_policy;
    if (block_ms > kMaxHeaderMs)
      problem("header: block timeout " + std::to_string(block_ms) + " ms is more than a day (" + std::to_string(kMaxHeaderMs) + " ms)");
    if (lease_ms > kMaxHeaderMs)
      problem("header: lease " + std::to_string(lease_ms) + " ms is more than a day (" + std::to_string(kMaxHeaderMs) + " ms)");
    if (std::chrono::nanoseconds(spin_ns) > kMaxSpin)
      problem("header: spin " + std::to_string(spin_ns) + " ns is more than " +
              std::to_string(std::chrono::nanoseconds(kMaxSpin).count()) + " ns (it is bounded when used)");
    if (pol > static_cast<std::uint32_t>(policy::block)) problem("header: policy " + std::to_string(pol) + " is unknown");
  }

  void owner_record() {
    const detail::owner_record* o = m.owner();
    const std::uint64_t key = o->key.load(std::memory_order_acquire);
    const std::uint64_t epoch = o->epoch.load(std::memory_order_acquire);
    if (key != 0 && key_pid(key) == 0) problem("owner record: key " + std::to_string(key) + " names pid 0");
    if (epoch == UINT64_MAX) problem("owner record: epoch " + std::to_string(epoch) + " is the last value it can hold (no box gets there)");
    const std::uint32_t word = o->state.load(std::memory_order_relaxed);
    const auto state = static_cast<std::uint32_t>(state_mode(word));
    if (state > static_cast<std::uint32_t>(owner_state::active))
      problem("owner record: state word " + std::to_string(word) + ": mode " + std::to_string(state) +
              " is not passive, notify or active");
    if (o->lease_ms != m.lease_ms())
      problem("owner record: lease " + std::to_string(o->lease_ms) + " ms disagrees with the header's " + std::to_string(m.lease_ms()));
    const std::uint32_t reason = o->tr_reason.load(std::memory_order_relaxed);
    if (reason > static_cast<std::uint32_t>(detail::transfer_reason::lease_expired))
      problem("owner record: transfer reason " + std::to_string(reason) + " is unknown");
    if (o->tr_data_len.load(std::memory_order_relaxed) > kHeirDataMax)
      problem("owner record: transfer data length " + std::to_string(o->tr_data_len.load()) + " exceeds " + std::to_string(kHeirDataMax));
    // tr_epoch and offer_epoch are written after the epoch they name.
    const std::uint64_t epoch_after = o->epoch.load(std::memory_order_acquire);
    if (o->tr_epoch.load(std::memory_order_acquire) > epoch_after)
      problem("owner record: last transfer at epoch " + std::to_string(o->tr_epoch.load()) + ", after the current epoch " + std::to_string(epoch_after));
    if (o->offer_data_len.load(std::memory_order_relaxed) > kHeirDataMax)
      problem("owner record: give-away data length " + std::to_string(o->offer_data_len.load()) + " exceeds " + std::to_string(kHeirDataMax));
    if (o->offer_key.load(std::memory_order_relaxed) != 0 && o->offer_epoch.load(std::memory_order_relaxed) > epoch_after)
      problem("owner record: a give-away offer made at epoch " + std::to_string(o->offer_epoch.load()) + ", after the current epoch");
    if (o->fd_fallback.load(std::memory_order_relaxed) > 1)
      problem("owner record: fd_fallback is " + std::to_string(o->fd_fallback.load()) + " (0 or 1)");
    if (const std::uint32_t n = o->notify_fd_plus1.load(std::memory_order_relaxed); n > (1u << 24) && n != kNotifyByBell)
      problem("owner record: notify descriptor " + std::to_string(o->notify_fd_plus1.load() - 1) + " is out of range");
    (void)epoch;
    for (std::uint32_t i = 0; i < kOwnerActors; ++i) {
      const owner_actor* a = m.actor(i);
      const std::uint64_t op = a->op.load(std::memory_order_relaxed);
      if (!valid_op(op)) problem("owner actor " + std::to_string(i) + ": pending op " + std::to_string(op) + " is invalid");
      const std::uint64_t ae = a->epoch.load(std::memory_order_relaxed);
      // (a new owner stores its key before its epoch: epoch 0 may still show)
      if (a->key.load(std::memory_order_relaxed) != 0 && ae != 0 && ae % kOwnerActors != i)
        problem("owner actor " + std::to_string(i) + " holds epoch " + std::to_string(ae) + ", which belongs to actor " +
                std::to_string(ae % kOwnerActors));
    }
  }

  void heirs() {
    const std::uint64_t heir_seq = m.owner()->heir_seq.load(std::memory_order_acquire);
    for (std::uint32_t i = 0; i < kHeirSlots; ++i) {
      const heir_entry* e = m.heir(i);
      const std::uint64_t key = e->key.load(std::memory_order_acquire);
      if (key == 0) continue;
      ++r.heirs;
      const std::string where = "heir entry " + std::to_string(i);
      if (key_pid(key) == 0) problem(where + ": key names pid 0");
      const std::uint64_t seq = e->seq.load(std::memory_order_acquire);
      // seq is taken from heir_seq before it is stored; re-read heir_seq after.
      if (seq > std::max(heir_seq, m.owner()->heir_seq.load(std::memory_order_acquire)))
        problem(where + ": registration number " + std::to_string(seq) + " was never handed out");
      if ((e->flags.load(std::memory_order_relaxed) & ~kHeirListenerOnly) != 0)
        problem(where + ": unknown flags " + std::to_string(e->flags.load()));
      if (e->data_len.load(std::memory_order_relaxed) > kHeirDataMax)
        problem(where + ": data length " + std::to_string(e->data_len.load()) + " exceeds " + std::to_string(kHeirDataMax));
    }
  }

  void producers() {
    for (std::uint32_t i = 0; i < m.max_producers(); ++i) {
      const producer_entry* pe = m.producer(i);
      const std::uint64_t key = pe->key.load(std::memory_order_acquire);
      if (key != 0) ++r.producers;
      if (key != 0 && key_pid(key) == 0) problem("producer entry " + std::to_string(i) + ": key names pid 0");
      const std::uint64_t op = pe->op.load(std::memory_order_relaxed);
      if (!valid_op(op)) problem("producer entry " + std::to_string(i) + ": pending op " + std::to_string(op) + " is invalid");
    }
  }

  void slot_actor(const std::string& where, slot_state st, std::uint32_t actor) {
    const bool ok = [&] {
      switch (st) {
        case slot_state::empty:
        case slot_state::free: return actor == kActorNone;
        case slot_state::full:
        case slot_state::writing: return producer_actor(actor);
        case slot_state::taken: return producer_actor(actor) || is_owner_actor(actor);
        case slot_state::done:
        case slot_state::dropped: return is_owner_actor(actor);
      }
      return false;
    }();
    if (!ok) problem(where + ": actor " + std::to_string(actor) + " cannot hold a slot in this state");
  }

  void length(const std::string& where, const lane_view& L, const slot_header* s, slot_state st) {
    if (st == slot_state::empty || st == slot_state::free || st == slot_state::writing) return;
    const std::uint32_t len = s->length.load(std::memory_order_relaxed);
    if (len > L.payload) problem(where + ": message length " + std::to_string(len) + " exceeds the slot size " + std::to_string(L.payload));
  }

  void fifo_lane(const lane_view& L) {
    const std::string lane = "lane " + std::to_string(L.index);
    // head is read before the tail: the owner only moves head up to a tail
    // it has seen, so head <= tail holds for these two loads.
    const std::uint64_t h = L.hdr->head.load(std::memory_order_acquire);
    const std::uint64_t t0 = L.hdr->tail.load(std::memory_order_acquire) >> 1;
    if (h > t0) problem(lane + ": head " + std::to_string(h) + " is past the tail " + std::to_string(t0));
    // A drop-oldest lane's evictors take the oldest message without moving
    // head (only the owner does): with no owner receiving, the tail runs on
    // past head + capacity, and the owner skips the evicted positions.
    else if (t0 - h > L.capacity && L.pol != policy::drop_oldest)
      problem(lane + ": " + std::to_string(t0 - h) + " positions between head and tail, more than the capacity " + std::to_string(L.capacity));
    std::vector<std::uint64_t> seqs(L.capacity);
    std::map<std::uint32_t, std::uint64_t> waiting;  // a quota lane: FULL slots per producer actor
    for (std::uint32_t i = 0; i < L.capacity; ++i) seqs[i] = L.slot_at_index(i)->seq.load(std::memory_order_acquire);
    const std::uint64_t t1 = L.hdr->tail.load(std::memory_order_acquire) >> 1;
    for (std::uint32_t i = 0; i < L.capacity; ++i) {
      ++r.slots;
      const std::string where = lane + " slot " + std::to_string(i);
      const std::uint64_t s = seqs[i];
      const slot_state st = seq_state(s);
      if (st == slot_state::writing || st == slot_state::free || static_cast<std::uint32_t>(st) > 6) {
        problem(where + ": state " + std::to_string(static_cast<std::uint32_t>(st)) + " does not exist in a FIFO lane");
        continue;
      }
      // Every slot holds a position of the last lap or the next: within one
      // capacity of the tail, and in its own slot.
      const std::int64_t lo = pos_diff(seq_pos(s), t0), hi = pos_diff(seq_pos(s), t1);
      if (lo < -static_cast<std::int64_t>(L.capacity) || hi > static_cast<std::int64_t>(L.capacity)) {
        problem(where + ": position " + std::to_string(seq_pos(s)) + " is too far from the tail " + std::to_string(t1));
        continue;
      }
      const std::uint64_t full_pos = t1 + static_cast<std::uint64_t>(hi);  // modulo 2^64: a scribbled tail may be anything
      if (L.slot_index(full_pos) != i) {
        problem(where + ": holds position " + std::to_string(full_pos) + ", which belongs to slot " + std::to_string(L.slot_index(full_pos)));
        continue;
      }
      if (st != slot_state::empty && hi >= 0)
        problem(where + ": position " + std::to_string(full_pos) + " is not claimed yet but the slot is not empty");
      slot_actor(where, st, seq_actor(s));
      length(where, L, L.slot_at_index(i), st);
      // THE QUOTA counts a holder's own messages: those since it took the entry
      // (its attached_tail; relaxed: a hint written once at attach, layout.hpp)
      if (st == slot_state::full && L.quota != 0 && producer_actor(seq_actor(s)) &&
          full_pos >= m.producer_counters(seq_actor(s) - 1, L.index)->attached_tail.load(std::memory_order_relaxed))
        ++waiting[seq_actor(s)];
    }
    // THE QUOTA (ring.hpp): no producer entry's holder has more than the quota waiting.
    for (const auto& [actor, n] : waiting)
      if (n > L.quota)
        problem(lane + ": producer entry " + std::to_string(actor - 1) + " has " + std::to_string(n) +
                " messages waiting since its holder attached, over the lane's quota of " + std::to_string(L.quota));
  }

  // THE STASH (ring.hpp): each entry in a known state, with a lane and a
  // length in range; each lane's parked count as its entries say (an owner
  // between two steps may be one off: a problem only when idle).
  void stash() {
    std::uint64_t held[kMaxLanes] = {};
    for (std::uint32_t i = 0; i < m.stash_entries(); ++i) {
      stash_entry* e = m.stash_at(i);
      const std::uint64_t s = e->state.load(std::memory_order_acquire);
      if (s == 0) continue;
      const stash_kind k = stash_kind_of(s);
      const std::uint32_t len = e->length.load(std::memory_order_relaxed), lane = e->lane.load(std::memory_order_relaxed);
      // A priority box's store holds sorted entries (SORTING, QUEUED, TAKEN,
      // DONE); a stash (a priority box's too) the others (WRITING ... DONE).
      const bool sorted = stash_sorted(s);
      if (k == stash_kind::free || k > stash_kind::queued || (s & ~(0xFFull | kStashRedelivered | kStashSorted | kStashDropped | (~0ull << 16))) != 0 ||
          ((s & kStashDropped) != 0 && (k != stash_kind::done || !sorted)) || (sorted ? !m.priority() : m.user_stash() == 0) ||
          (sorted && (k == stash_kind::writing || k == stash_kind::parked || k == stash_kind::front)) ||
          (!sorted && (k == stash_kind::sorting || k == stash_kind::queued))) {
        problem("stash entry " + std::to_string(i) + ": state word " + std::to_string(s) + " is invalid");
        continue;
      }
      if (lane >= m.lane_count() || len > m.geo.params.slot_payload) {
        problem("stash entry " + std::to_string(i) + ": lane " + std::to_string(lane) + ", length " + std::to_string(len) +
                " out of range");
        continue;
      }
      if (k != stash_kind::writing && k != stash_kind::done) ++held[lane];
    }
    for (std::uint32_t l = 0; l < m.lane_count(); ++l) {
      const std::uint64_t parked = m.lanes[l].hdr->parked.load(std::memory_order_acquire);
      if (parked > held[l] + 1 || held[l] > parked + 1)
        problem("lane " + std::to_string(l) + ": parked says " + std::to_string(parked) + " but the stash holds " +
                std::to_string(held[l]) + " of its messages");
    }
  }

  void lifo_lane(const lane_view& L) {
    const std::string lane = "lane " + std::to_string(L.index);
    std::vector<std::uint64_t> seqs(L.capacity);
    for (std::uint32_t i = 0; i < L.capacity; ++i) seqs[i] = L.slot_at_index(i)->seq.load(std::memory_order_acquire);
    // Stamps are taken from lifo_stamp before a slot shows them: read it after.
    const std::uint64_t next = L.hdr->lifo_stamp.load(std::memory_order_acquire) >> 1;
    for (std::uint32_t i = 0; i < L.capacity; ++i) {
      ++r.slots;
      const std::string where = lane + " slot " + std::to_string(i);
      const std::uint64_t s = seqs[i];
      const slot_state st = seq_state(s);
      if (st == slot_state::empty || static_cast<std::uint32_t>(st) > 6) {
        problem(where + ": state " + std::to_string(static_cast<std::uint32_t>(st)) + " does not exist in a lifo lane");
        continue;
      }
      if (st != slot_state::free && pos_diff(seq_pos(s), next) > 0)
        problem(where + ": stamp " + std::to_string(seq_pos(s)) + " was never handed out (next is " + std::to_string(next) + ")");
      slot_actor(where, st, seq_actor(s));
      length(where, L, L.slot_at_index(i), st);
    }
  }

  // posted = delivered + rejected + too_large + timeouts + dropped_newest
  //        + dropped_oldest + filtered + abandoned + aborted + depth (box.hpp).
  // The two sides move at slightly different moments while posts and
  // receives are in flight (at most one op per producer entry, and an owner
  // batch of at most the capacity), so a busy box is checked against that
  // bound; a quiet one (or one of the snapshots) must match exactly.
  void counters(const Box& box) {
    std::uint64_t best = UINT64_MAX, posted = 0, accounted = 0;
    for (int attempt = 0; attempt < 20; ++attempt) {
      const shmbox::counters c = box.read_counters();
      std::uint64_t depth = 0;
      for (std::uint32_t l = 0; l < m.lane_count(); ++l) depth += lane_depth_scan(m, l);
      const std::uint64_t out = c.delivered + c.rejected + c.too_large + c.timeouts + c.dropped_newest + c.dropped_oldest +
                                c.filtered + c.abandoned + c.aborted + depth;
      const std::uint64_t diff = c.posted > out ? c.posted - out : out - c.posted;
      if (diff == 0) return;
      if (diff < best) {
        best = diff;
        posted = c.posted;
        accounted = out;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    // Busy: a live owner or producer, or an operation a dead one left for the
    // next process to finish (ring.hpp R1-R4: repairs count it then).
    bool busy = role_alive(m, owner_byte(m), m.owner()->key.load(std::memory_order_acquire));
    for (std::uint32_t i = 0; i < m.max_producers() && !busy; ++i)
      busy = m.producer(i)->op.load(std::memory_order_relaxed) != 0 ||
             role_alive(m, producer_byte(m, i), m.producer(i)->key.load(std::memory_order_acquire));
    for (std::uint32_t i = 0; i < kOwnerActors && !busy; ++i) busy = m.actor(i)->op.load(std::memory_order_relaxed) != 0;
    std::uint64_t capacity = 0;
    for (std::uint32_t l = 0; l < m.lane_count(); ++l) capacity += m.lanes[l].capacity;
    if (busy && best <= capacity + m.max_producers()) return;  // in flight, not lost
    problem("counters: posted " + std::to_string(posted) +
            " but delivered + rejected + too_large + timeouts + dropped_newest + dropped_oldest + filtered + abandoned + aborted + depth = " +
            std::to_string(accounted));
  }
};

}  // namespace

result<verify_report> verify(std::string_view name) {
  verify_report r;
  r.box = std::string(name);
  auto m = detail::open_segment(name, true);
  if (!m) {
    switch (static_cast<errc>(m.error().value())) {
      case errc::not_a_box:
      case errc::version_mismatch:
      case errc::truncated:
      case errc::corrupt:
      case errc::incomplete:
        r.ok = false;
        r.problems.push_back(explain(m.error()));
        return r;
      default:
        return m.error();
    }
  }
  const Box box = detail::access::make_box(*m);
  checker c{**m, r};
  c.header();
  c.owner_record();
  c.heirs();
  c.producers();
  for (std::uint32_t l = 0; l < (*m)->lane_count(); ++l) {
    const lane_view& L = (*m)->lanes[l];
    if (L.is_lifo()) c.lifo_lane(L);
    else c.fifo_lane(L);
  }
  c.stash();
  c.counters(box);
  if (auto whole = box.intact(); !whole) {  // T5: what was checked after the shrink was zeros
    r.ok = false;
    r.problems.push_back(explain(whole.error()));
  }
  return r;
}

}  // namespace shmbox
