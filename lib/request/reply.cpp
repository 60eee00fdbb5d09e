// lib/request/reply.cpp - Owner::reply (shmbox/owner.hpp, shmbox/request.hpp): the
// owner's side of request/reply. The envelopes and THE ANSWERED MARK are in
// envelope.hpp.
//
// Where a reply goes is decided by this process, not by the segment: the
// reply box's name is this box's own name, ".r", and the request's token in
// hex (so a forged request can point only at a reply box of this service),
// it is opened like any box (no links, no FIFOs: shm_file.hpp), its id must
// be the one the request carries, and it must have a live owner (the
// requester) at the time of the reply. The reply is posted without waiting.
#include <algorithm>
#include <cstring>

#include "base/access.hpp"
#include "base/errors.hpp"
#include "base/fault.hpp"
#include "base/process.hpp"
#include "handles/owner_state.hpp"
#include "segment/envelope.hpp"
#include "segment/liveness.hpp"
#include "segment/segment.hpp"
#include "shmbox/producer.hpp"

namespace shmbox {
namespace detail {

// Producers on requesters' reply boxes, kept between replies.
struct reply_cache {
  struct entry {
    std::uint64_t token = 0;
    std::uint64_t id = 0;
    std::shared_ptr<mapped_box> m;
    std::optional<Producer> p;
    std::uint64_t used = 0;
    std::uint64_t next_probe_ns = 0;  // the kernel is asked at most every kProbeNs
  };
  // Asking the kernel whether a requester lives (F_OFD_GETLK) costs more than
  // the rest of a reply; a requester that let go cleared its key (a load says
  // so), one that was killed is found by the next probe: at most kProbeNs of
  // replies go into its reply box, which gc removes with them (kConfigReplyBox).
  static constexpr std::uint64_t kProbeNs = 1'000'000;
  std::uint64_t next_sweep_ns = 0;
  static constexpr std::size_t kKept = 64;
  std::vector<entry> entries;
  std::uint64_t clock = 0;
  std::unique_ptr<Producer> dead_letters;
  bool dead_letters_tried = false;

  // A live requester's reply box has a live owner (liveness.hpp L1).
  static bool requester_alive(const mapped_box& rb) noexcept {
    const std::uint64_t key = rb.owner()->key.load(std::memory_order_acquire);
    return role_alive(rb, owner_byte(rb), key);
  }
  // The same, asking the kernel only every kProbeNs (the key every time).
  static bool requester_alive(entry& e, std::uint64_t now) noexcept {
    if (e.m->owner()->key.load(std::memory_order_acquire) == 0) return false;
    if (now < e.next_probe_ns) return true;
    e.next_probe_ns = now + kProbeNs;
    return requester_alive(*e.m);
  }

  // Forgets reply boxes whose requester is gone, so that `shmbox gc` can
  // remove them (a producer handle here would keep them "in use").
  void sweep() noexcept {
    std::erase_if(entries, [](const entry& e) { return !requester_alive(*e.m); });
  }

  entry* find(std::uint64_t token, std::uint64_t id) noexcept {
    for (entry& e : entries)
      if (e.token == token && e.id == id) return &e;
    return nullptr;
  }
};

void reply_cache_deleter::operator()(reply_cache* c) const noexcept { delete c; }

void reply_cache_idle(reply_cache* c, std::uint64_t now) noexcept {
  if (c == nullptr || c->entries.empty() || now < c->next_sweep_ns) return;
  c->sweep();
  c->next_sweep_ns = now + 100'000'000;
}

}  // namespace detail

namespace {

constexpr post_options kNoWait{.timeout = std::chrono::nanoseconds(0)};

void bump(detail::a64& v) noexcept { v.store(v.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed); }

// THE ANSWERED MARK: the request's flags byte in the slot, or in the stash
// entry (THE STASH, a priority box's store), if this owner holds the request
// read and not yet committed (or, in place, is inside the callback:
// `in_place` points at the trailer there). A stash entry is recognised by its
// lane, its ring position where it has one (a priority box's store) and the
// trailer itself (an unstashed message has no position): a forged copy of a
// trailer in another entry of the box is marked too, which costs only that
// box's requests.
void mark_answered(detail::owner_ctx& o, std::uint32_t lane, std::uint64_t position, std::size_t body,
                   std::string_view trailer, const char* in_place) noexcept {
  std::byte* flags = nullptr;
  // In place: only inside this box's mapping (a view the caller made up, or
  // copied, is not written: then the request is looked up among those read).
  const auto at = reinterpret_cast<std::uintptr_t>(in_place), base = reinterpret_cast<std::uintptr_t>(o.m->base);
  if (in_place != nullptr && !o.m->snapshot && at >= base && at - base + detail::kRequestTrailer <= o.m->mapped_bytes) {
    flags = o.m->base + (at - base) + detail::kRequestFlagsAt;
  } else {
    detail::mapped_box& m = *o.m;
    if (lane >= m.lane_count() || trailer.size() != detail::kRequestTrailer) return;
    const detail::lane_view& L = m.lanes[lane];
    for (const detail::pending_slot& p : o.pending) {
      if (p.lane != lane) continue;
      std::byte* t = nullptr;
      if (p.stash) {
        if (p.where >= m.stash_entries()) continue;
        detail::stash_entry* e = m.stash_at(static_cast<std::uint32_t>(p.where));
        // Still ours (TAKEN by us) and still this request.
        if (e->state.load(std::memory_order_acquire) != p.seq) continue;
        if (position != kNoPosition && (e->order.load(std::memory_order_relaxed) & detail::kPosMask) != position) continue;
        const std::uint32_t len = e->length.load(std::memory_order_relaxed);
        if (len != body + detail::kRequestTrailer || len > m.geo.params.slot_payload) continue;
        t = detail::mapped_box::stash_payload(e) + body;
      } else {
        // A lifo lane: `where` is the slot's index, the position its stamp (unique
        // per post: a replaced top has another). A FIFO lane: `where` is the position.
        detail::slot_header* s = nullptr;
        if (L.is_lifo()) {
          if (p.where >= L.capacity || (position != kNoPosition && detail::seq_pos(p.seq) != position)) continue;
          s = L.slot_at_index(static_cast<std::uint32_t>(p.where));
        } else {
          if (position == kNoPosition || p.where != position) continue;
          s = L.slot_for(position);
        }
        // Still ours (TAKEN by us) and still this request.
        if (s->seq.load(std::memory_order_acquire) != p.seq) continue;
        const std::uint32_t len = s->length.load(std::memory_order_relaxed);
        if (len != body + detail::kRequestTrailer || len > L.payload) continue;
        t = detail::lane_view::payload_of(s) + body;
      }
      if (std::memcmp(t, trailer.data(), detail::kRequestFlagsAt) != 0) continue;
      flags = t + detail::kRequestFlagsAt;
      break;
    }
  }
  if (flags == nullptr) return;
  std::atomic_ref<std::byte> f(*flags);
  f.store(f.load(std::memory_order_relaxed) | std::byte{detail::kAnswered}, std::memory_order_release);
}

}  // namespace

reply_status Owner::reply(const message& request, std::string_view data) {
  return reply_impl(request.reply_to, request.answered, request.lane, request.position, request.data.size(), nullptr,
                    data);
}

reply_status Owner::reply(const message_view& request, std::string_view data) {
  return reply_impl(request.reply_to, request.answered, request.lane, request.position, request.data.size(),
                    request.reply_to.empty() ? nullptr : request.reply_to.data(), data);
}

reply_status Owner::reply(const batch& requests, std::size_t i, std::string_view data) {
  if (i >= requests.size()) {
    s_->ctx.last_error = detail::fail(errc::invalid_argument, "Owner::reply: the batch has " +
                                                                  std::to_string(requests.size()) + " messages; no message " +
                                                                  std::to_string(i));
    return reply_status::error;
  }
  return reply_impl(requests.reply_to(i), requests.answered(i), requests.lane(i), requests.position(i), requests[i].size(),
                    nullptr, data);
}

reply_status Owner::reply_impl(std::string_view reply_to, bool answered, std::uint32_t lane, std::uint64_t position,
                               std::size_t body, const char* in_place, std::string_view data) {
  if (!s_) return reply_status::not_owner;
  state& st = *s_;
  detail::owner_ctx& o = st.ctx;
  if (!st.still_owner()) {
    o.last_error = st.not_owner_error("box '" + st.m->name + "': this handle no longer owns the box");
    return reply_status::not_owner;
  }
  const auto env = detail::envelope::parse_request(reply_to);
  if (!env) {
    o.last_error = detail::fail(errc::invalid_argument, "box '" + st.m->name + "': the message is not a request (no reply address)");
    return reply_status::not_a_request;
  }
  if (answered) {  // THE ANSWERED MARK: a dead owner replied before it died
    bump(o.act->replies_skipped);
    return reply_status::already_replied;
  }
  if (!st.replies) st.replies.reset(new detail::reply_cache);
  detail::reply_cache& c = *st.replies;
  ++c.clock;
  const std::uint64_t now = detail::mono_ns();
  if (now >= c.next_sweep_ns || c.entries.size() >= detail::reply_cache::kKept) {  // at most every 100 ms
    c.sweep();
    c.next_sweep_ns = now + 100'000'000;
  }
  auto lost = [&](reply_status why, std::string_view reason) {
    bump(o.act->replies_lost);
    if (!st.m->dead_letters.empty()) {
      if (!c.dead_letters_tried) {
        c.dead_letters_tried = true;
        // T4: the service box's dead letters, followed only when whoever may write the service may write them.
        auto p = detail::access::attach_named(st.m->fd, "box '" + st.m->name + "'", st.m->dead_letters);
        if (p) c.dead_letters = std::make_unique<Producer>(std::move(*p));
        else o.last_error = p.error();
      }
      if (c.dead_letters) {
        std::string letter;
        letter.append("[").append(st.m->name).append(" ").append(reason).append("] ").append(data);
        (void)c.dead_letters->post(letter, kNoWait);
      }
    }
    return why;
  };
  detail::reply_cache::entry* e = c.find(env->token, env->reply_box);
  if (e == nullptr) {
    const std::string name = detail::envelope::reply_box_name(st.m->name, env->token);
    // any_owner: a requester of another user (a 0666 service) owns its reply
    // box; the name (ours, and a token) and the id decide, not the file's owner.
    // A name this process derived from a request: no waiting for a box being made (kNamedWaitNs).
    auto mapped = detail::open_segment(name, false, true, true, false, detail::kNamedWaitNs);
    std::optional<Box> box;
    if (mapped) box.emplace(detail::access::make_box(std::move(*mapped)));
    // A reply box, made by a Requester (kConfigReplyBox), with the id the
    // request names, and configured as a Requester makes it: one lane,
    // policy reject, no dead letters, no stash, priority or buffer. Anyone may
    // plant a box at this name (a forged request names any token): a reply
    // posted into it must do nothing but store the reply or be refused, so
    // it may not evict, forward or reorder anything (THE TRUST RULE T4).
    if (!box || box->id() != env->reply_box || !detail::access::box(*box)->reply_box)
      return lost(reply_status::requester_gone, "reply-requester-gone");
    if (const detail::mapped_box& rm = *detail::access::box(*box);
        rm.lane_count() != 1 || rm.lanes[0].pol != policy::reject || !rm.dead_letters.empty() || rm.priority() ||
        rm.stash_entries() != 0 || rm.buffered() || rm.lanes[0].resizable) {
      o.last_error = detail::fail(errc::refused, "box '" + st.m->name + "': reply box '" + name +
                                                     "' is not made as a requester makes one (one lane, policy reject, no dead "
                                                     "letters): planted; no reply is posted into it");
      return lost(reply_status::requester_gone, "reply-box-refused");
    }
    // Each producer entry's lock byte is tried once, never waited for
    // (liveness.hpp L7): a reply box whose bytes another user holds costs
    // this reply, not the service's time.
    auto p = detail::access::attach_producer(*box, detail::mono_ns());
    if (!p) {
      o.last_error = p.error();
      return lost(reply_status::requester_gone, "reply-requester-gone");
    }
    if (c.entries.size() >= detail::reply_cache::kKept)
      c.entries.erase(std::min_element(c.entries.begin(), c.entries.end(),
                                       [](const auto& a, const auto& b) { return a.used < b.used; }));
    c.entries.push_back({env->token, env->reply_box, detail::access::box(*box), std::move(*p), 0});
    e = &c.entries.back();
  }
  e->used = c.clock;
  if (!detail::reply_cache::requester_alive(*e, now)) {
    c.entries.erase(c.entries.begin() + (e - c.entries.data()));
    return lost(reply_status::requester_gone, "reply-requester-gone");
  }
  if (data.size() + detail::kReplyTrailer > e->p->max_message_size()) {
    o.last_error = detail::fail(errc::too_large, "box '" + st.m->name + "': a reply of " + std::to_string(data.size()) +
                                                     " bytes is larger than the " +
                                                     std::to_string(e->p->max_message_size() - detail::kReplyTrailer) +
                                                     " bytes this requester takes (requester_options::max_reply_size)");
    return reply_status::too_large;
  }
  std::string& buf = st.reply_scratch;
  buf.assign(data);
  detail::envelope::append_reply(buf, {st.m->incarnation(), position, lane, env->token, env->seq});
  const post_status ps = e->p->post(buf, kNoWait);
  if (!is_stored(ps)) {
    // timeout: a block lane that is full, which a post that may not wait meets as full.
    if (ps == post_status::full || ps == post_status::timeout) return lost(reply_status::full, "reply-box-full");
    o.last_error = e->p->last_error();
    return lost(reply_status::requester_gone, "reply-requester-gone");
  }
  SHMBOX_FAULT("owner.reply_before_mark");
  mark_answered(o, lane, position, body, reply_to, in_place);
  SHMBOX_FAULT("owner.reply_after_mark");
  bump(o.act->replies);
  return reply_status::ok;
}

std::string_view to_string(reply_status s) noexcept {
  switch (s) {
    case reply_status::ok: return "ok";
    case reply_status::timeout: return "timeout";
    case reply_status::already_replied: return "already-replied";
    case reply_status::not_a_request: return "not-a-request";
    case reply_status::requester_gone: return "requester-gone";
    case reply_status::full: return "full";
    case reply_status::too_large: return "too-large";
    case reply_status::not_owner: return "not-owner";
    case reply_status::error: return "error";
  }
  return "unknown";
}

}  // namespace shmbox
