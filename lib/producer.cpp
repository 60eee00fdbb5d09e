#include "shmbox/producer.hpp"

#include "errors.hpp"
#include "layout.hpp"
#include "process.hpp"
#include "ring.hpp"
#include "segment.hpp"

namespace shmbox {

struct Producer::state {
  std::shared_ptr<detail::mapped_box> m;
  detail::producer_ctx ctx;
  // Dead letters: a producer on the dead-letter box, attached on first use.
  std::unique_ptr<Producer> dead_letters;
  bool dead_letters_tried = false;
  ~state() { detail::release_producer_entry(ctx); }

  // Forwards one lost message, "[origin reason] bytes", best effort (the
  // dead-letter box's own policy, no waiting), and counts the outcome.
  void forward(std::uint32_t lane, std::string_view reason, std::string_view bytes) noexcept {
    detail::producer_lane_counters* c = m->producer_counters(ctx.entry, lane);
    if (!dead_letters_tried) {
      dead_letters_tried = true;
      auto p = Producer::attach(m->dead_letters);
      if (p) {
        dead_letters = std::make_unique<Producer>(std::move(*p));
        dead_letters->s_->ctx.capture = false;  // a dead-letter box's own losses go no further
      }
    }
    bool ok = false;
    if (dead_letters) {
      std::string letter;
      letter.reserve(m->name.size() + reason.size() + bytes.size() + 4);
      letter.append("[").append(m->name).append(" ").append(reason).append("] ").append(bytes);
      ok = is_stored(dead_letters->post(letter, std::chrono::nanoseconds(0)));
    }
    a64_bump(ok ? c->dead_lettered : c->dead_letter_failed);
  }
  static void a64_bump(detail::a64& v) noexcept { v.store(v.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed); }

  post_status post(std::uint32_t lane, const void* data, std::size_t size, std::uint64_t timeout_ns) noexcept {
    const post_status st = detail::post_message(ctx, lane, data, size, timeout_ns);
    if (!ctx.capture) return st;
    const policy pol = m->lanes[lane].pol;
    if (st == post_status::dropped)
      forward(lane, "dropped-newest", std::string_view(static_cast<const char*>(data), size));
    for (const std::string& lost : ctx.captured)
      forward(lane, pol == policy::lifo ? "replaced" : "dropped-oldest", lost);
    ctx.captured.clear();
    return st;
  }
};

std::string_view to_string(post_status s) noexcept {
  switch (s) {
    case post_status::stored: return "stored";
    case post_status::stored_evicted: return "stored-evicted";
    case post_status::dropped: return "dropped";
    case post_status::full: return "full";
    case post_status::timeout: return "timeout";
    case post_status::too_large: return "too-large";
    case post_status::error: return "error";
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

result<Producer> Producer::attach(const Box& box) {
  const auto& m = box.m_;
  if (m->read_only)
    return detail::fail(errc::permission_denied, "box '" + m->name + "' was opened read-only; open it with Box::open to post");
  auto s = std::make_unique<state>();
  s->m = m;
  if (!detail::claim_producer_entry(*m, s->ctx))
    return detail::fail(errc::producer_table_full, "box '" + m->name + "': all " + std::to_string(m->max_producers()) +
                                                       " producer entries are held by live processes; create the box with more --max-producers");
  s->ctx.capture = !m->dead_letters.empty();
  return Producer(std::move(s));
}

post_status Producer::post(const void* data, std::size_t size) noexcept {
  if (!s_) return post_status::error;
  return s_->post(0, data, size, std::uint64_t{s_->m->block_timeout_ms} * 1'000'000);
}

post_status Producer::post(const void* data, std::size_t size, std::chrono::nanoseconds timeout) noexcept {
  if (!s_) return post_status::error;
  const std::uint64_t timeout_ns = timeout == std::chrono::nanoseconds::max() ? UINT64_MAX
                                   : timeout.count() < 0                     ? 0
                                                                             : static_cast<std::uint64_t>(timeout.count());
  return s_->post(0, data, size, timeout_ns);
}

post_status Producer::post_to(std::uint32_t lane, const void* data, std::size_t size) noexcept {
  if (!s_) return post_status::error;
  return post_to(lane, data, size, std::chrono::milliseconds(s_->m->block_timeout_ms));
}

post_status Producer::post_to(std::uint32_t lane, const void* data, std::size_t size,
                              std::chrono::nanoseconds timeout) noexcept {
  if (!s_) return post_status::error;
  if (lane >= s_->m->lane_count()) {
    s_->ctx.last_error = detail::fail(errc::invalid_argument, "box '" + s_->m->name + "' has " +
                                                                  std::to_string(s_->m->lane_count()) + " lanes; no lane " +
                                                                  std::to_string(lane));
    return post_status::error;
  }
  const std::uint64_t timeout_ns = timeout == std::chrono::nanoseconds::max() ? UINT64_MAX
                                   : timeout.count() < 0                     ? 0
                                                                             : static_cast<std::uint64_t>(timeout.count());
  return s_->post(lane, data, size, timeout_ns);
}

std::uint32_t Producer::max_message_size() const noexcept { return s_ ? s_->m->geo.params.slot_payload : 0; }
std::error_code Producer::last_error() const noexcept { return s_ ? s_->ctx.last_error : make_error_code(errc::not_found); }
std::uint32_t Producer::entry_index() const noexcept { return s_ ? s_->ctx.entry : 0; }

}  // namespace shmbox
