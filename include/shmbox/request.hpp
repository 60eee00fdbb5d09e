// shmbox/request.hpp - request/reply over a box (Akka's ask): a Requester
// posts requests into a service box and waits for their replies; the box's
// owner answers each with Owner::reply. docs/request-reply.md has the whole
// story; in short:
//
//  * Each Requester has a reply box of its own, "<service>.r<16 hex digits>",
//    made and owned by it (removed when it is destroyed; a dead requester's
//    is removed by `shmbox gc`). A request carries the reply box's token and
//    id and the request's sequence number, at the end of its bytes; the
//    owner sees the bytes without them (message::data) and the address apart
//    (message::reply_to).
//  * Exactly one reply per request: the requester hands out the first reply
//    for a request it waits for and counts any other (requester_stats). A
//    request delivered again to an heir after its owner died is answered
//    once: the heir sees message::answered when the dead owner had replied
//    (Owner::reply then sends nothing), and a second reply that gets through
//    anyway (the owner died between storing its reply and marking the
//    request) is dropped as a duplicate.
//  * A request that times out is over: a reply that arrives later is
//    counted late, never handed to another request. Replies never cross to
//    another requester: the token is random, the reply box's id is checked,
//    and no pid is involved (pid reuse changes nothing).
//  * A dead requester's replies are not kept: the owner finds it dead (its
//    reply box has no live owner) and counts the reply undeliverable, and
//    sends it to the service box's dead letters if it has some.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "shmbox/error.hpp"
#include "shmbox/export.hpp"
#include "shmbox/producer.hpp"
#include "shmbox/types.hpp"

namespace shmbox {

struct requester_options {
  // Requests that may wait for their reply at once (the reply box's
  // capacity): ask() refuses more (full) until one is answered, timed out
  // or forgotten.
  std::uint32_t max_outstanding = 64;
  // The largest reply, in bytes. 0: the service box's largest message.
  std::uint32_t max_reply_size = 0;
  // A service box whose segment belongs to another user (open_options::any_owner).
  bool any_owner = false;
};

// What a requester saw of its replies.
struct requester_stats {
  std::uint64_t asked = 0;       // requests posted (stored in the service box)
  std::uint64_t replied = 0;     // replies handed out
  std::uint64_t timed_out = 0;   // requests whose wait ran out (or that were forgotten)
  std::uint64_t duplicates = 0;  // a second reply to a request already answered (dropped)
  std::uint64_t late = 0;        // a reply to a request that had timed out (dropped)
  std::uint64_t stray = 0;       // a message in the reply box that answers no request of ours (dropped)
};

// One request's handle: what ask() returns (a request not posted has
// status() other than stored and no ticket).
struct ask_result {
  post_status status = post_status::error;  // the post of the request (stored: it is in the box)
  std::uint64_t ticket = 0;                 // its sequence number: wait(ticket, ...)
  explicit operator bool() const noexcept { return is_stored(status); }
};

// A requester: one thread at a time, like a Producer. Not for a fork child
// (its copy's calls fail: the reply box belongs to the parent).
class SHMBOX_API Requester {
 public:
  // Attaches to the service box (as a Producer) and makes this requester's
  // reply box, with the service box's file mode. The service box's name may
  // be at most kMaxNameLength - 18 characters (the reply box's name is 18
  // longer).
  static result<Requester> attach(std::string_view service, const requester_options& o = {});

  Requester(Requester&&) noexcept;
  Requester& operator=(Requester&&) noexcept;
  ~Requester();  // removes the reply box; replies still on their way are counted by their owner (requester_gone)

  // Posts a request (post_options as for Producer::post: lane, timeout of a
  // `block` box, ...). Its bytes and the reply address together must fit the
  // service box's slot (max_request_size()). status full also when
  // max_outstanding requests are waiting already (nothing posted).
  ask_result ask(std::string_view request, const post_options& o = {});
  // Waits up to `timeout` for the reply to `ticket`: ok (the reply in
  // `out`), timeout (the request is over: a later reply is counted late),
  // error (an unknown ticket, one already answered or over; last_error()).
  // Replies to other tickets that arrive meanwhile are kept for their wait.
  // `keep_on_timeout`: a timeout leaves the request waiting (an event loop
  // polling with timeout 0, a caller waiting in slices); call forget()
  // when you give up on it.
  reply_status wait(std::uint64_t ticket, std::string& out, std::chrono::nanoseconds timeout,
                    bool keep_on_timeout = false);
  // ask() then wait(): timeout covers both (a post into a full `block` box waits within it).
  reply_status call(std::string_view request, std::string& out, std::chrono::nanoseconds timeout,
                    const post_options& o = {});
  // Gives up on a request: a reply that comes later is counted late.
  void forget(std::uint64_t ticket) noexcept;
  // For event loops (epoll, asyncio): readable when a reply may have come;
  // then wait(ticket, out, 0ns, true) for each ticket you wait for. Owned by
  // the handle.
  int notify_fd();

  // Requests waiting for their reply (asked, not yet answered, timed out or forgotten).
  std::size_t outstanding() const noexcept;
  // What this requester saw of its replies (requester_stats).
  requester_stats stats() const noexcept;
  // The reply box's name ("<service>.r<16 hex digits>").
  std::string reply_box() const;
  // The largest request this service box takes (its slot less the 40 bytes of the reply address).
  std::size_t max_request_size() const noexcept;
  // The largest reply this requester takes (requester_options::max_reply_size).
  std::size_t max_reply_size() const noexcept;
  // Why the last call that returned error (or post_status::error, too_large, full) did so.
  std::error_code last_error() const noexcept;

 private:
  struct SHMBOX_LOCAL state;
  SHMBOX_LOCAL explicit Requester(std::unique_ptr<state> s);
  std::unique_ptr<state> s_;
};

}  // namespace shmbox
