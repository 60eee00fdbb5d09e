#include "shmbox/producer.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <functional>
#include <optional>
#include <utility>

#include "base/access.hpp"
#include "base/errors.hpp"
#include "base/fault.hpp"
#include "segment/layout.hpp"
#include "base/process.hpp"
#include "base/shm_file.hpp"
#include "ring/ring.hpp"
#include "ring/ring_fast.hpp"
#include "segment/segment.hpp"

namespace shmbox {

struct Producer::state {
  std::shared_ptr<detail::mapped_box> m;
  detail::producer_ctx ctx;
  // Dead letters: a producer on the dead-letter box, attached on first use.
  std::unique_ptr<Producer> dead_letters;
  bool dead_letters_tried = false;
  // PRIORITY BOXES: set_priority_function's function, and an open loan's priority.
  std::function<std::int64_t(std::string_view)> priority_fn;
  std::optional<std::int64_t> loan_priority;
  // CUSTOM BUFFERS: the registered type's key function (after priority_fn).
  std::shared_ptr<const buffer_type> buf_type;
  // process.hpp H3: a fork child's copy gives nothing back: the entry (and
  // any claim it announces) is its parent's; its role lock is void in the
  // child (liveness.hpp L6) and goes with ctx.
  ~state() {
    if (ctx.born.here_for_sure()) detail::release_producer_entry(ctx);
  }

  // A post through a handle inherited by a fork child: refused (H3). A post
  // through the parent's entry could leave a claim that the repairers
  // attribute to the parent, alive, and so never repair.
  bool inherited() noexcept {
    if (ctx.born.here()) [[likely]] return false;
    report_inherited();
    return true;
  }
  // Out of line, as every error report of the posting calls: their strings
  // would otherwise give the fast path a stack frame.
  [[gnu::cold, gnu::noinline]] void report_inherited() noexcept {
    ctx.last_error = detail::fail(errc::inherited_handle,
                                  ctx.born.inherited_sentence("Producer", "box '" + m->name + "'",
                                                              "the producer entry is its parent's; attach a Producer "
                                                              "in the child (Producer::attach)"));
  }

  // The priority (a custom-buffer box: the key) of a message posted with
  // priority `given` (post_options::priority). A function that throws gives 0:
  // the message is posted all the same.
  std::int64_t priority_of(const std::optional<std::int64_t>& given, std::string_view bytes) const noexcept {
    if (given) return *given;
    try {
      if (priority_fn) return priority_fn(bytes);
      return buf_type && buf_type->key ? buf_type->key(bytes) : 0;
    } catch (...) {
      return 0;
    }
  }

  // Forwards one lost message, "[origin reason] bytes", best effort (the
  // dead-letter box's own policy, no waiting), and counts the outcome.
  void forward(std::uint32_t lane, std::string_view reason, std::string_view bytes) noexcept {
    detail::producer_lane_counters* c = m->producer_counters(ctx.entry, lane);
    if (!dead_letters_tried) {
      dead_letters_tried = true;
      // T4: followed only when whoever may write this box may write it too
      // (a refusal is said through last_error, and counted as a failure).
      auto p = detail::access::attach_named(m->fd, "box '" + m->name + "'", m->dead_letters);
      if (p) {
        dead_letters = std::make_unique<Producer>(std::move(*p));
        dead_letters->s_->ctx.capture = false;  // a dead-letter box's own losses go no further
      } else {
        ctx.last_error = p.error();
      }
    }
    bool ok = false;
    if (dead_letters) {
      std::string letter;
      letter.reserve(m->name.size() + reason.size() + bytes.size() + 4);
      letter.append("[").append(m->name).append(" ").append(reason).append("] ").append(bytes);
      // (A constant, not a temporary: GCC 12 warned, falsely, of the
      // temporary's disengaged optional lane read once post() was inlined here.)
      static constexpr post_options kNoWait{.timeout = std::chrono::nanoseconds(0)};
      ok = is_stored(dead_letters->post(letter, kNoWait));
    }
    a64_bump(ok ? c->dead_lettered : c->dead_letter_failed);
  }
  static void a64_bump(detail::a64& v) noexcept { v.store(v.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed); }

  // An open loan holds this entry's claim (its op word): no other post until it is closed.
  bool loan_blocks() noexcept {
    if (!ctx.loan_open) return false;
    ctx.last_error = detail::fail(errc::invalid_argument, "box '" + m->name +
                                                              "': this Producer has an open loan; commit or abort it first");
    return true;
  }

  // This call's adaptive wait and whether its timeout counts (post_options).
  void set_spin(const post_options& o) noexcept {
    ctx.quiet_timeout = o.quiet_timeout;
    ctx.spin_ns = o.spin ? static_cast<std::uint64_t>(std::clamp(*o.spin, std::chrono::nanoseconds(0),
                                                                 std::chrono::nanoseconds(kMaxSpin)).count())
                         : m->spin_ns;
  }

  // The lane and the wait of a call with options `o`.
  std::uint32_t lane_of(const post_options& o) const noexcept { return o.lane ? *o.lane : m->default_lane; }
  std::uint64_t timeout_of(const post_options& o) const noexcept {
    return o.timeout ? detail::timeout_ns(*o.timeout) : std::uint64_t{m->block_timeout_ms} * 1'000'000;
  }

  // Forwards what this handle's last claim evicted or replaced (dead letters).
  void forward_captured(std::uint32_t lane) noexcept {
    const policy pol = m->lanes[lane].pol;
    for (const std::string& lost : ctx.captured)
      forward(lane, pol == policy::lifo ? "replaced" : "dropped-oldest", lost);
    ctx.captured.clear();
  }

  // The common case (a FIFO lane with room, nothing parked in a stash
  // box's lane, a message that fits, no loan open): detail::post_fast,
  // without the general path's machinery.
  bool try_fast(std::uint32_t lane, const void* data, std::size_t size) noexcept {
    const detail::lane_view& L = m->lanes[lane];
    return !ctx.loan_open && size <= L.payload && L.fast && detail::post_fast(ctx, L, data, size);
  }

  // Every post: the fast path, else the general one with this call's wait.
  post_status post(std::uint32_t lane, const void* data, std::size_t size, const post_options& o) noexcept {
    if (try_fast(lane, data, size)) [[likely]] return post_status::stored;
    return post_general(lane, data, size, o);
  }
  // Out of line: the fast path above needs no stack frame of its own.
  [[gnu::noinline]] post_status post_general(std::uint32_t lane, const void* data, std::size_t size,
                                             const post_options& o) noexcept {
    const detail::lane_view& L = m->lanes[lane];
    if (L.is_priority()) {
      ctx.priority = priority_of(o.priority, std::string_view(static_cast<const char*>(data), size));
      // a priority lane's fast path (nothing in its store: THE GATE), with the priority word
      if (!ctx.loan_open && size <= L.payload && L.fast_priority && detail::post_fast_priority(ctx, L, data, size, ctx.priority))
        return post_status::stored;
    }
    if (loan_blocks()) return post_status::error;
    set_spin(o);
    const std::uint64_t timeout_ns = timeout_of(o);
    const post_status st = detail::post_message(ctx, lane, data, size, timeout_ns);
    if (ctx.capture) forward_lost(lane, st, std::string_view(static_cast<const char*>(data), size), o);
    return st;
  }

  // Dead letters of one post (the box names a dead-letter box): what it
  // dropped or refused, and what its claim evicted or replaced. Out of line:
  // post() above stays small enough to inline its fast path into its callers.
  __attribute__((noinline, cold)) void forward_lost(std::uint32_t lane, post_status st, std::string_view bytes,
                                                    const post_options& o) noexcept {
    if (st == post_status::dropped) forward(lane, "dropped-newest", bytes);
    // THE QUOTA: a drop_newest lane's message discarded, as a drop; a reject lane's refused, as a refusal
    if (st == post_status::over_quota && m->lanes[lane].pol == policy::drop_newest) forward(lane, "over-quota", bytes);
    if (m->dead_letter_refused) {  // options::dead_letter_refused: the refusals too
      if (st == post_status::full) forward(lane, "rejected", bytes);
      else if (st == post_status::over_quota && m->lanes[lane].pol != policy::drop_newest) forward(lane, "over-quota", bytes);
      else if (st == post_status::timeout && !o.quiet_timeout) forward(lane, "timed-out", bytes);
      else if (st == post_status::too_large) forward(lane, "too-large", bytes);
    }
    forward_captured(lane);
  }

  bool valid_lane(std::uint32_t lane) noexcept {
    if (lane < m->lane_count()) [[likely]] return true;
    report_no_lane(lane);
    return false;
  }
  [[gnu::cold, gnu::noinline]] void report_no_lane(std::uint32_t lane) noexcept {
    ctx.last_error = detail::fail(errc::invalid_argument, "box '" + m->name + "' has " + std::to_string(m->lane_count()) +
                                                              " lanes; no lane " + std::to_string(lane));
  }
};

namespace {
}  // namespace

const std::shared_ptr<detail::mapped_box>& detail::access::producer_box(const Producer& p) noexcept { return p.s_->m; }

std::string_view to_string(post_status s) noexcept {
  switch (s) {
    case post_status::stored: return "stored";
    case post_status::stored_evicted: return "stored-evicted";
    case post_status::dropped: return "dropped";
    case post_status::full: return "full";
    case post_status::timeout: return "timeout";
    case post_status::too_large: return "too-large";
    case post_status::error: return "error";
    case post_status::over_quota: return "over-quota";
  }
  return "unknown";
}

Producer::Producer(std::unique_ptr<state> s) : s_(std::move(s)) {}
Producer::Producer(Producer&&) noexcept = default;
Producer& Producer::operator=(Producer&&) noexcept = default;
Producer::~Producer() = default;

result<Producer> Producer::attach(std::string_view name) {
  auto box = Box::open(name);
  if (!box) return box.error();
  return attach(*box);
}

result<Producer> Producer::attach(const Box& box) { return take_entry(box, nullptr, 0); }

result<Producer> Producer::adopt(const Box& box, std::uint32_t entry, std::uint64_t attached_ns) {
  return take_entry(box, &entry, attached_ns);
}

// attach (entry null: any free or dead entry) and adopt (that dead producer's entry).
result<Producer> Producer::take_entry(const Box& box, const std::uint32_t* entry, std::uint64_t attached_ns,
                                      std::uint64_t give_up_ns) {
  const auto& m = detail::access::box(box);
  if (m->read_only)
    return detail::fail(errc::permission_denied, "box '" + m->name + "' was opened read-only; open it with Box::open to post");
  auto s = std::make_unique<state>();
  s->m = m;
  if (m->buffered()) {  // CUSTOM BUFFERS: posts carry the type's key
    s->buf_type = detail::find_buffer(m->buffer_name);
    if (!s->buf_type) return detail::buffer_unknown_error(*m, entry == nullptr ? "Producer::attach" : "Producer::adopt");
  }
  if (entry != nullptr) {
    if (!detail::adopt_producer_entry(*m, *entry, attached_ns, s->ctx))
      return detail::fail(errc::not_found, "box '" + m->name + "': producer entry " + std::to_string(*entry) +
                                               " is not the dead producer's any more (free, held by a live process, or taken over since)");
  } else if (std::uint32_t locked_out = 0; !detail::claim_producer_entry(*m, s->ctx, &locked_out, give_up_ns)) {
    if (locked_out != 0)  // liveness.hpp L7: held by someone who may write the segment, or a signal
      return detail::fail(errc::producer_table_full,
                          "box '" + m->name + "': no producer entry could be taken: " + std::to_string(locked_out) +
                              " free entries' lock bytes were held by another process past the deadline (" +
                              (m->mode & 022 ? "the box is writable by others, who may hold them" : "a process of this user holds them") +
                              "), the rest by live producers; if it stays so, remove and recreate the box");
    return detail::fail(errc::producer_table_full, "box '" + m->name + "': all " + std::to_string(m->max_producers()) +
                                                       " producer entries are held by live processes; create the box with more --max-producers");
  }
  s->ctx.capture = !m->dead_letters.empty();
  return Producer(std::move(s));
}

result<Producer> detail::access::attach_producer(const Box& box, std::uint64_t give_up_ns) {
  return Producer::take_entry(box, nullptr, 0, give_up_ns);
}

result<Producer> detail::access::attach_named(int namer_fd, std::string_view namer, std::string_view name) {
  struct stat from {};
  if (namer_fd < 0 || ::fstat(namer_fd, &from) != 0)
    return detail::fail(errc::system_error, std::string(namer) + ": cannot tell who may write it (fstat); box '" +
                                                std::string(name) + "', which it names, is not followed");
  // A name read from a segment: no waiting for a box being made there (kNamedWaitNs).
  auto mapped = detail::open_segment(name, false, false, true, false, detail::kNamedWaitNs);
  if (!mapped) return mapped.error();
  const Box box = detail::access::make_box(std::move(*mapped));
  struct stat to {};
  if (::fstat(detail::access::box(box)->fd, &to) != 0 || !detail::shm_writers_within(from, to))
    return detail::fail(errc::permission_denied,
                        std::string(namer) + " (" + detail::shm_describe(from) + ") names box '" + std::string(name) + "' (" +
                            detail::shm_describe(to) + ") but users who may write " + std::string(namer) +
                            " may not write it: the name is not followed (docs/guarantees.md, Trust T4); make box '" +
                            std::string(name) + "' writable by them too, or " + std::string(namer) +
                            " writable by fewer users");
  // One name: a box shmbox made has only the name it was made under. A
  // second name is a hard link someone made, and anyone who may read and
  // write a file may link it (fs.protected_hardlinks): at a name nobody made
  // yet, a link to a 0666 box of this user would pass the check above and
  // carry a 0600 box's dead letters where everyone may read them.
  if (to.st_nlink != 1)
    return detail::fail(errc::permission_denied,
                        std::string(namer) + " names box '" + std::string(name) + "', whose segment has " +
                            std::to_string(to.st_nlink) + " names (a hard link someone made): the name is not followed "
                            "(docs/guarantees.md, Trust T4); remove /dev/shm/shmbox." + std::string(name));
  return Producer::attach(box);
}

std::uint64_t Producer::attached_ns() const noexcept {
  return s_ && s_->ctx.pe != nullptr ? s_->ctx.pe->attached_unix_ns.load(std::memory_order_relaxed) : 0;
}

post_status Producer::post(const void* data, std::size_t size, const post_options& o) noexcept {
  if (!s_ || s_->inherited()) return post_status::error;  // (inherited: one relaxed load, process.hpp H2)
  s_->ctx.evicted = 0;
  const std::uint32_t lane = s_->lane_of(o);
  if (o.lane && !s_->valid_lane(lane)) return post_status::error;
  return s_->post(lane, data, size, o);
}

void Producer::set_priority_function(std::function<std::int64_t(std::string_view)> fn) noexcept {
  if (s_) s_->priority_fn = std::move(fn);
}

// ---------------------------------------------------------------------------
// Loans (zero-copy posts)
// ---------------------------------------------------------------------------

slot_loan Producer::loan(const post_options& o) noexcept {
  slot_loan l;
  if (!s_ || s_->inherited()) return l;
  s_->ctx.evicted = 0;
  const std::uint32_t lane = s_->lane_of(o);
  detail::slot_claim k;
  // The fast path (see try_fast): checks inline, the errors below.
  if (lane < s_->m->lane_count() && !s_->ctx.loan_open && s_->m->lanes[lane].fast &&
      detail::claim_fast_inline(s_->ctx, s_->m->lanes[lane], k)) {
    l.status_ = post_status::stored;
  } else {
    if (!s_->valid_lane(lane) || s_->loan_blocks()) return l;
    s_->set_spin(o);
    l.status_ = detail::claim_slot(s_->ctx, lane, 0, s_->timeout_of(o), k);
    if (s_->ctx.capture) {
      if (l.status_ == post_status::dropped) s_->forward(lane, "dropped-newest", "(a loan: no bytes yet)");
      s_->forward_captured(lane);
    }
    if (!is_stored(l.status_)) return l;
  }
  SHMBOX_FAULT("producer.loan_open");
  s_->loan_priority = o.priority;
  s_->ctx.loan_open = true;
  l.ctx_ = s_.get();
  l.data_ = detail::lane_view::payload_of(k.slot);
  l.capacity_ = s_->m->lanes[lane].payload;
  l.lane_ = lane;
  l.where_ = k.where;
  l.stamp_ = s_->m->lanes[lane].is_lifo() ? k.stamp : slot_loan::kNotLifo;
  l.wake_ = k.wake;
  l.priority_ = s_->m->lanes[lane].is_priority();
  return l;
}

namespace {
// A loan's slot: the header in front of its payload.
detail::slot_header* slot_of(void* data) noexcept {
  return reinterpret_cast<detail::slot_header*>(static_cast<std::byte*>(data) - sizeof(detail::slot_header));
}
// The claim a loan holds.
detail::slot_claim claim_of(void* data, std::uint32_t lane, std::uint64_t where, std::uint64_t stamp, bool wake) noexcept {
  return {slot_of(data), lane, where, stamp, wake};
}
}  // namespace

slot_loan::slot_loan(slot_loan&& o) noexcept
    : ctx_(std::exchange(o.ctx_, nullptr)),
      data_(o.data_),
      where_(o.where_),
      capacity_(o.capacity_),
      lane_(o.lane_),
      stamp_(o.stamp_),
      wake_(o.wake_),
      priority_(o.priority_),
      status_(o.status_) {}

slot_loan& slot_loan::operator=(slot_loan&& o) noexcept {
  if (this != &o) {
    abort();
    ctx_ = std::exchange(o.ctx_, nullptr);
    data_ = o.data_;
    capacity_ = o.capacity_;
    lane_ = o.lane_;
    where_ = o.where_;
    stamp_ = o.stamp_;
    wake_ = o.wake_;
    priority_ = o.priority_;
    status_ = o.status_;
  }
  return *this;
}

post_status slot_loan::commit(std::size_t size) noexcept {
  if (ctx_ == nullptr) return post_status::error;
  if (ctx_->inherited()) {  // process.hpp H3: the parent's copy of the loan commits the slot
    ctx_ = nullptr;
    data_ = nullptr;
    return post_status::error;
  }
  if (size > capacity_) return post_status::too_large;  // still open: the caller may write less
  if (priority_) {  // (a priority lane's loans are never the fast path's)
    const std::string_view bytes(static_cast<const char*>(data_), size);
    detail::set_priority(ctx_->m->lanes[lane_], slot_of(data_), ctx_->priority_of(ctx_->loan_priority, bytes));
  }
  // FIFO: from the fields, not through a slot_claim copied from them (that
  // copy's wide loads of fields stored one by one stalled store forwarding).
  if (stamp_ == kNotLifo) detail::fifo_publish_inline(ctx_->ctx, slot_of(data_), where_, wake_, size);
  else detail::publish_slot(ctx_->ctx, claim_of(data_, lane_, where_, stamp_, wake_), size);
  ctx_->ctx.loan_open = false;
  ctx_ = nullptr;
  data_ = nullptr;
  return status_;
}

void slot_loan::abort() noexcept {
  if (ctx_ == nullptr) return;
  if (!ctx_->ctx.born.here_for_sure()) {  // process.hpp H3: the parent's copy of the loan aborts or commits it
    ctx_ = nullptr;
    data_ = nullptr;
    return;
  }
  detail::abort_slot(ctx_->ctx, claim_of(data_, lane_, where_, stamp_, wake_));
  ctx_->ctx.loan_open = false;
  ctx_ = nullptr;
  data_ = nullptr;
}

// ---------------------------------------------------------------------------
// Batches
// ---------------------------------------------------------------------------

std::size_t Producer::post_batch(std::span<const std::string_view> msgs, const post_options& o,
                                 post_status* last) noexcept {
  post_status st = post_status::stored;
  std::size_t i = 0;
  if (s_) s_->ctx.evicted = 0;  // this call's evictions, all messages
  const std::uint32_t lane = s_ ? s_->lane_of(o) : 0;
  if (!s_ || s_->inherited() || !s_->valid_lane(lane) || s_->loan_blocks()) {
    st = post_status::error;
  } else {
    const std::uint32_t payload = s_->m->lanes[lane].payload;
    while (i < msgs.size()) {
      // The run of messages that fit, from i: claimed together when there is room.
      std::size_t fit = 0;
      while (i + fit < msgs.size() && fit < detail::kMaxClaimRun && msgs[i + fit].size() <= payload) ++fit;
      if (fit > 0) {
        if (const std::size_t k = detail::post_run(s_->ctx, lane, msgs.data() + i, fit); k > 0) {
          st = post_status::stored;
          i += k;
          continue;
        }
      }
      // No room for a run (full, busy, lifo) or too large: this one as post() does it.
      st = s_->post(lane, msgs[i].data(), msgs[i].size(), o);
      if (!is_stored(st)) break;
      ++i;
    }
  }
  if (last != nullptr) *last = st;
  return i;
}

// ---------------------------------------------------------------------------
// Resize (Box::resize; here because it posts through a Producer's entry and
// forwards what it drops as this file's dead letters do)
// ---------------------------------------------------------------------------

result<resize_report> Box::resize(std::uint32_t limit, std::optional<std::uint32_t> lane) const {
  if (!lane && m_->lane_count() > 1)
    return detail::fail(errc::invalid_argument, "box '" + m_->name + "' has " + std::to_string(m_->lane_count()) +
                                                    " lanes: name the lane to resize (--lane L)");
  auto p = Producer::attach(*this);
  if (!p) return p.error();
  Producer::state& s = *p->s_;
  const std::uint32_t l = lane.value_or(0);
  s.ctx.evicted = 0;
  auto r = detail::resize_lane(s.ctx, l, limit);
  if (!r) return r.error();
  if (s.ctx.capture) {
    for (const std::string& lost : s.ctx.captured)
      s.forward(l, m_->lanes[l].pol == policy::drop_oldest ? "dropped-oldest" : "dropped-newest", lost);
    s.ctx.captured.clear();
  }
  return resize_report{.lane = l, .before = r->before, .after = r->after, .max_capacity = r->max_capacity, .dropped = r->dropped};
}

std::uint32_t Producer::max_message_size() const noexcept { return s_ ? s_->m->geo.params.slot_payload : 0; }
std::error_code Producer::last_error() const noexcept { return s_ ? s_->ctx.last_error : make_error_code(errc::not_found); }
std::uint32_t Producer::entry_index() const noexcept { return s_ ? s_->ctx.entry : 0; }
std::uint32_t Producer::last_evicted() const noexcept { return s_ ? s_->ctx.evicted : 0; }

}  // namespace shmbox
