// lib/request/requester.cpp - the Requester (shmbox/request.hpp): a producer on
// the service box, and the owner of a reply box of its own. The envelopes
// are in envelope.hpp; the owner's side is reply.cpp.
#include "shmbox/request.hpp"

#include <sys/random.h>
#include <sys/stat.h>

#include <algorithm>
#include <deque>
#include <unordered_map>
#include <unordered_set>

#include "base/access.hpp"
#include "base/errors.hpp"
#include "base/process.hpp"
#include "segment/envelope.hpp"
#include "segment/layout.hpp"
#include "segment/segment.hpp"
#include "shmbox/owner.hpp"

namespace shmbox {

struct Requester::state {
  std::string service;
  std::uint64_t service_id = 0;
  Producer producer;
  std::string reply_name;
  std::uint64_t token = 0;
  std::uint64_t reply_box_id = 0;
  std::optional<Owner> replies;
  requester_options opts;
  detail::made_here born;
  std::uint64_t next_seq = 1;
  std::uint32_t max_request = 0;
  // Requests waiting for their reply; a reply that came is kept until its wait.
  struct waiting {
    bool ready = false;
    std::string reply;
  };
  std::unordered_map<std::uint64_t, waiting> pending;
  // Requests that timed out or were forgotten (the most recent kOverKept):
  // a reply to one of them is late; to an older, answered one, a duplicate.
  static constexpr std::size_t kOverKept = 4096;
  std::unordered_set<std::uint64_t> over;
  std::deque<std::uint64_t> over_order;
  requester_stats stats;
  std::error_code last_error;
  std::string scratch;
  message in;
  // notify_fd: the reply box owner's, armed (notify) while the caller waits elsewhere.
  int efd = -1;
  bool armed = false;
  delivery notified;
  void arm() {
    replies->notify();
    armed = true;
  }

  state(std::string s, Producer p) : service(std::move(s)), producer(std::move(p)) {}
  ~state() {
    if (!born.here_for_sure()) return;  // a fork child's copy: the reply box is its parent's
    // Our reply box, and only it: what sits at its name now is unlinked only
    // when it is the file we made (gc may have removed ours, and anyone may
    // have put a file of theirs there since).
    std::uint64_t dev = 0, ino = 0;
    if (replies) {
      const auto& m = detail::access::owner_box(*replies);
      dev = m->dev;
      ino = m->ino;
    }
    replies.reset();
    struct stat st {};
    const std::string path = "/dev/shm" + detail::shm_path(reply_name);
    if (!reply_name.empty() && ::lstat(path.c_str(), &st) == 0 && static_cast<std::uint64_t>(st.st_dev) == dev &&
        static_cast<std::uint64_t>(st.st_ino) == ino)
      (void)Box::remove(reply_name);
  }

  void mark_over(std::uint64_t seq) {
    if (over.insert(seq).second) over_order.push_back(seq);
    while (over_order.size() > kOverKept) {
      over.erase(over_order.front());
      over_order.pop_front();
    }
    ++stats.timed_out;
  }

  // Files one message of the reply box. Returns true when it answers `want`
  // (its body is then in `out`).
  bool file(const message& m, std::uint64_t want, std::string* out) {
    std::size_t body = 0;
    const auto e = detail::envelope::parse_reply(m.data, body);
    if (!e || e->token != token || e->service_box != service_id || e->seq == 0 || e->seq >= next_seq) {
      ++stats.stray;
      return false;
    }
    auto it = pending.find(e->seq);
    if (it == pending.end()) {
      if (over.count(e->seq) != 0) ++stats.late;
      else ++stats.duplicates;  // answered already (and handed out)
      return false;
    }
    if (it->second.ready) {
      ++stats.duplicates;
      return false;
    }
    if (e->seq == want && out != nullptr) {
      out->assign(m.data, 0, body);
      pending.erase(it);
      ++stats.replied;
      return true;
    }
    it->second.ready = true;
    it->second.reply.assign(m.data, 0, body);
    return false;
  }

  bool inherited() {
    if (born.here()) return false;
    last_error = detail::fail(errc::inherited_handle,
                              born.inherited_sentence("Requester", "box '" + service + "'",
                                                      "the reply box is its parent's; attach a Requester in the child"));
    return true;
  }
};

Requester::Requester(std::unique_ptr<state> s) : s_(std::move(s)) {}
Requester::Requester(Requester&&) noexcept = default;
Requester& Requester::operator=(Requester&&) noexcept = default;
Requester::~Requester() = default;

result<Requester> Requester::attach(std::string_view service, const requester_options& o) {
  if (auto v = Box::validate_name(service); !v) return v.error();
  if (service.size() + detail::kReplySuffix > kMaxNameLength)
    return detail::fail(errc::invalid_name, "box '" + std::string(service) + "': a service box's name may be at most " +
                                                std::to_string(kMaxNameLength - detail::kReplySuffix) +
                                                " characters (its requesters' reply boxes are named 18 longer)");
  if (o.max_outstanding == 0 || o.max_outstanding > kMaxCapacity)
    return detail::fail(errc::invalid_argument, "requester_options::max_outstanding must be 1.." +
                                                    std::to_string(kMaxCapacity));
  auto box = Box::open(service, {.any_owner = o.any_owner});
  if (!box) return box.error();
  auto p = Producer::attach(*box);
  if (!p) return p.error();
  auto s = std::make_unique<state>(std::string(service), std::move(*p));
  s->opts = o;
  s->service_id = box->id();
  const std::uint32_t slot = s->producer.max_message_size();
  if (slot <= detail::kRequestTrailer)
    return detail::fail(errc::invalid_argument, "box '" + s->service + "' takes messages of at most " + std::to_string(slot) +
                                                    " bytes: too small for requests (a request adds " +
                                                    std::to_string(detail::kRequestTrailer) + " bytes)");
  s->max_request = slot - static_cast<std::uint32_t>(detail::kRequestTrailer);
  const std::uint32_t max_reply = o.max_reply_size != 0 ? o.max_reply_size : slot;
  if (max_reply > kMaxSlotSize - detail::kReplyTrailer)
    return detail::fail(errc::invalid_argument, "requester_options::max_reply_size may be at most " +
                                                    std::to_string(kMaxSlotSize - detail::kReplyTrailer) + " bytes");
  // The reply box: only this requester's token names it. Another box of that
  // name (a collision of 64 random bits, or one planted there) is left alone:
  // a new token is drawn.
  options bo;
  bo.capacity = o.max_outstanding;
  bo.slot_size = max_reply + static_cast<std::uint32_t>(detail::kReplyTrailer);
  bo.overflow = policy::reject;
  bo.mode = detail::access::box(*box)->mode & 0666;
  std::error_code last;
  for (int attempt = 0; attempt < 4; ++attempt) {
    std::uint64_t token = 0;
    if (::getrandom(&token, sizeof token, 0) != static_cast<ssize_t>(sizeof token) || token == 0)
      token = detail::mono_ns() ^ (std::uint64_t{static_cast<std::uint32_t>(::getpid())} << 32) ^ attempt;
    const std::string name = detail::envelope::reply_box_name(service, token);
    auto made = detail::create_segment(name, bo, detail::kConfigReplyBox);  // gc knows it for what it is
    if (!made) {
      last = made.error();
      if (last == errc::exists) continue;
      return last;
    }
    std::optional<Box> rb(detail::access::make_box(std::move(*made)));
    s->reply_name = name;  // from here on the destructor removes it
    s->token = token;
    auto ow = Owner::acquire(*rb);
    if (!ow) return ow.error();
    s->replies.emplace(std::move(*ow));
    // The reply address carries the box's id: a box made again under this
    // name (after this one is gone) is not this requester.
    s->reply_box_id = rb->id();
    s->opts.max_reply_size = max_reply;
    s->scratch.reserve(s->max_request + detail::kRequestTrailer);
    s->pending.reserve(std::min<std::uint32_t>(o.max_outstanding, 1024));
    s->in.data.reserve(bo.slot_size);
    return Requester(std::move(s));
  }
  return last;
}

ask_result Requester::ask(std::string_view request, const post_options& o) {
  state& s = *s_;
  if (s.inherited()) return {post_status::error, 0};
  if (request.size() > s.max_request) {
    s.last_error = detail::fail(errc::too_large, "box '" + s.service + "': a request of " + std::to_string(request.size()) +
                                                     " bytes is larger than the " + std::to_string(s.max_request) +
                                                     " bytes a request may have here (the slot less the reply address)");
    return {post_status::too_large, 0};
  }
  if (s.pending.size() >= s.opts.max_outstanding) {
    s.last_error = detail::fail(errc::invalid_argument, "box '" + s.service + "': " +
                                                            std::to_string(s.opts.max_outstanding) +
                                                            " requests wait for their replies already (max_outstanding)");
    return {post_status::full, 0};
  }
  const std::uint64_t seq = s.next_seq;
  s.scratch.assign(request);
  detail::envelope::append_request(s.scratch, {s.reply_box_id, s.token, seq, 0});
  const post_status st = s.producer.post(s.scratch, o);
  if (!is_stored(st)) {
    if (st == post_status::error) s.last_error = s.producer.last_error();
    return {st, 0};
  }
  ++s.next_seq;
  s.pending.emplace(seq, state::waiting{});
  ++s.stats.asked;
  return {st, seq};
}

reply_status Requester::wait(std::uint64_t ticket, std::string& out, std::chrono::nanoseconds timeout,
                             bool keep_on_timeout) {
  state& s = *s_;
  if (s.inherited()) return reply_status::error;
  auto it = s.pending.find(ticket);
  if (it == s.pending.end()) {
    s.last_error = detail::fail(errc::invalid_argument,
                                "reply box '" + s.reply_name + "': request " + std::to_string(ticket) +
                                    (ticket != 0 && ticket < s.next_seq ? " was answered, timed out or forgotten already"
                                                                        : " was never asked"));
    return reply_status::error;
  }
  if (it->second.ready) {
    out = std::move(it->second.reply);
    s.pending.erase(it);
    ++s.stats.replied;
    return reply_status::ok;
  }
  Owner& ow = *s.replies;
  if (s.armed) {  // notify_fd's arming: drained and disarmed while we receive
    (void)ow.wait(s.notified, std::chrono::nanoseconds(0));
    ow.passive();
    s.armed = false;
  }
  const std::uint64_t limit = detail::timeout_ns(timeout);
  const std::uint64_t deadline = limit == UINT64_MAX ? UINT64_MAX : detail::mono_ns() + limit;
  for (;;) {
    const std::uint64_t now = limit == UINT64_MAX ? 0 : detail::mono_ns();
    const std::uint64_t left = deadline == UINT64_MAX ? UINT64_MAX : (deadline > now ? deadline - now : 0);
    const recv_status st =
        ow.receive(s.in, {.timeout = left == UINT64_MAX ? std::chrono::nanoseconds::max() : std::chrono::nanoseconds(left)});
    if (st == recv_status::ok) {
      if (s.file(s.in, ticket, &out)) return reply_status::ok;
      continue;
    }
    if (st == recv_status::timeout || st == recv_status::empty) break;
    s.last_error = ow.last_error();
    return st == recv_status::not_owner ? reply_status::not_owner : reply_status::error;
  }
  if (!keep_on_timeout) {
    s.pending.erase(ticket);
    s.mark_over(ticket);
  } else if (s.efd >= 0) {
    s.arm();  // notify_fd: readable at the next reply (at once if one came meanwhile)
  }
  return reply_status::timeout;
}

reply_status Requester::call(std::string_view request, std::string& out, std::chrono::nanoseconds timeout,
                             const post_options& o) {
  const std::uint64_t start = detail::mono_ns();
  post_options po = o;
  if (!po.timeout) po.timeout = timeout;
  const ask_result a = ask(request, po);
  if (!a) {
    if (a.status == post_status::too_large) return reply_status::too_large;
    if (a.status == post_status::timeout) return reply_status::timeout;
    if (a.status == post_status::error) return reply_status::error;
    s_->last_error = detail::fail(errc::refused, "box '" + s_->service + "': the request was not stored (" +
                                                     std::string(to_string(a.status)) + ")");
    return reply_status::error;
  }
  const std::uint64_t limit = detail::timeout_ns(timeout);
  const std::uint64_t spent = detail::mono_ns() - start;
  const std::chrono::nanoseconds left =
      limit == UINT64_MAX ? std::chrono::nanoseconds::max()
                          : std::chrono::nanoseconds(limit > spent ? limit - spent : 0);
  return wait(a.ticket, out, left);
}

void Requester::forget(std::uint64_t ticket) noexcept {
  if (s_->pending.erase(ticket) != 0) s_->mark_over(ticket);
}

int Requester::notify_fd() {
  if (s_->inherited()) return -1;
  if (s_->efd < 0) s_->efd = s_->replies->notify_fd();
  if (s_->efd >= 0 && !s_->armed) s_->arm();
  return s_->efd;
}

std::size_t Requester::outstanding() const noexcept { return s_->pending.size(); }
requester_stats Requester::stats() const noexcept { return s_->stats; }
std::string Requester::reply_box() const { return s_->reply_name; }
std::size_t Requester::max_request_size() const noexcept { return s_->max_request; }
std::size_t Requester::max_reply_size() const noexcept { return s_->opts.max_reply_size; }
std::error_code Requester::last_error() const noexcept { return s_->last_error; }

}  // namespace shmbox
