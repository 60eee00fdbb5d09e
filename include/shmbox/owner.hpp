// shmbox/owner.hpp - receiving from a box: one owner process at a time.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "shmbox/box.hpp"
#include "shmbox/error.hpp"
#include "shmbox/export.hpp"
#include "shmbox/types.hpp"

namespace shmbox {

namespace detail {
struct access;  // the library's own way in (lib/base/access.hpp)
struct notify_group_state;
}

class Owner;

// One descriptor for many owners in an event loop (10,000 boxes within a
// descriptor limit of 20,000): each member Owner (Owner::join) is named by
// the tag it joined with when its armed notify or active state fires, or
// when it is asked to give its box away. fd() is readable while some tag
// is ready; ready() drains it and hands out the tags. Then, for each tag,
// do what notify_fd()'s readability asks: wait(out, 0), receive, arm again.
// Wakers reach members through this process's doorbell and notify hub
// (docs/owner-states.md): one thread hop more than a notify_fd's. A group
// and its members may go in any order; a tag may be handed out once more
// after its Owner left (the tags are the caller's: look them up).
class SHMBOX_API NotifyGroup {
 public:
  // A group with no member yet (its eventfd); errc::system_error if none can be had.
  static result<NotifyGroup> create();
  NotifyGroup(NotifyGroup&&) noexcept;
  NotifyGroup& operator=(NotifyGroup&&) noexcept;
  ~NotifyGroup();
  // Readable (poll, epoll) while some member's tag is ready; -1 for a moved-from group.
  int fd() const noexcept;
  // Appends the tags ready since the last call (each once) to `tags` and
  // makes fd() unreadable until the next; returns how many it appended.
  std::size_t ready(std::vector<std::uint64_t>& tags);

 private:
  friend class Owner;
  NotifyGroup() = default;
  std::shared_ptr<detail::notify_group_state> s_;
};

// One received message.
struct message {
  std::string data;          // the bytes, exactly as posted
  bool redelivered = false;  // a previous owner read it and died before committing
  std::uint32_t lane = 0;
  std::uint64_t position = kNoPosition;  // its lane position (message_id; Owner::id_of)
  std::int64_t priority = 0;  // a priority box: its priority (stash() keeps it); a custom-buffer box: its key; else 0
  // A request (shmbox/request.hpp): where its reply goes, opaque (empty: not a
  // request; `data` is the request's bytes without it). Owner::reply answers it.
  std::string reply_to{};
  // A request delivered again (redelivered) that an owner already answered
  // before it died: Owner::reply will send nothing (already_replied).
  bool answered = false;
  bool is_request() const noexcept { return !reply_to.empty(); }
};

// One message seen in place (zero-copy receive): `data` points into the
// box's shared memory and is valid only inside the callback.
struct message_view {
  std::string_view data;
  bool redelivered = false;
  std::uint32_t lane = 0;
  std::uint64_t position = kNoPosition;  // its lane position (message_id; Owner::id_of)
  std::int64_t priority = 0;  // as message::priority
  std::string_view reply_to{};  // as message::reply_to (in the box: valid only inside the callback)
  bool answered = false;        // as message::answered
  // As message::is_request: Owner::reply answers it.
  bool is_request() const noexcept { return !reply_to.empty(); }
};

// A reusable set of received messages. Receiving into it reuses its memory,
// so a steady stream of messages allocates nothing. Views stay valid until
// the next receive into (or clear() of) this batch.
class batch {
 public:
  // How many messages it holds; empty() when none.
  std::size_t size() const noexcept { return entries_.size(); }
  bool empty() const noexcept { return entries_.empty(); }
  // The bytes of message i, exactly as posted.
  std::string_view operator[](std::size_t i) const noexcept {
    return {bytes_.data() + entries_[i].offset, entries_[i].size};
  }
  // True when a previous owner read message i and died before committing it.
  bool redelivered(std::size_t i) const noexcept { return entries_[i].redelivered; }
  std::uint32_t lane(std::size_t i) const noexcept { return entries_[i].lane; }
  // Message i's lane position (message_id; Owner::id_of).
  std::uint64_t position(std::size_t i) const noexcept { return entries_[i].position; }
  // Message i's priority (message::priority).
  std::int64_t priority(std::size_t i) const noexcept { return entries_[i].priority; }
  // Message i's reply address (message::reply_to; empty: not a request) and answered mark.
  std::string_view reply_to(std::size_t i) const noexcept {
    return {bytes_.data() + entries_[i].offset + entries_[i].size, entries_[i].trailer};
  }
  bool is_request(std::size_t i) const noexcept { return entries_[i].trailer != 0; }
  bool answered(std::size_t i) const noexcept { return entries_[i].answered; }
  // Forgets the messages, keeps the memory.
  void clear() noexcept {
    bytes_.clear();
    entries_.clear();
  }

 private:
  friend struct detail::access;  // the library appends while receiving
  // `trailer`: how many of the `size` bytes are a request's reply address (kept after the body).
  void append(const void* data, std::size_t size, bool redelivered, std::uint32_t lane, std::uint64_t position,
              std::int64_t priority, std::uint32_t trailer = 0, bool answered = false) {
    const auto* p = static_cast<const char*>(data);
    entries_.push_back({bytes_.size(), size - trailer, redelivered, lane, position, priority, trailer, answered});
    bytes_.insert(bytes_.end(), p, p + size);
  }
  struct entry {
    std::size_t offset;
    std::size_t size;
    bool redelivered;
    std::uint32_t lane;
    std::uint64_t position;
    std::int64_t priority;
    std::uint32_t trailer;
    bool answered;
  };
  std::vector<char> bytes_;
  std::vector<entry> entries_;
};

// pobox's owner states. The state lives in the segment (`shmbox stat` shows it).
enum class owner_mode : std::uint8_t {
  passive,  // messages accumulate; nothing is signalled
  notify,   // one-shot: when data is (or becomes) present, the owner is woken; passive again as
            // soon as that notification is sent (wait() reports it)
  active,   // one-shot: the next delivery happens as soon as data is there; then passive
};
SHMBOX_API std::string_view to_string(owner_mode m) noexcept;  // "passive", "notify", "active"

// What a filter makes of one message.
enum class filter_verdict : std::uint8_t {
  deliver,  // hand it out (the filter may have rewritten it)
  drop,     // remove it from the box (counted as filtered)
  skip,     // stop here: this message and all after it stay in the box
};
// Sees each message in delivery order and may rewrite it. A user state is
// threaded through the calls by capturing it in the function object (the
// Owner keeps the object given to active() until the delivery is made).
using filter_fn = std::function<filter_verdict(std::string& message)>;

// One delivery (pobox's {mail, Box, Msgs, Count, Lost}).
struct delivery {
  batch messages;             // delivered, in order, as the filter left them
  std::size_t count = 0;      // messages.size()
  std::uint64_t dropped = 0;  // drops since the last delivery (the policies' overflow drops and a custom
                              // buffer's, buffer_dropped) + this delivery's filter drops
  bool empty() const noexcept { return count == 0; }  // everything dropped, or the first message skipped
};

// What Owner::wait() saw.
enum class owner_event : std::uint8_t {
  none,       // the timeout passed
  notified,   // notify fired: data is there (the box is passive again)
  delivered,  // active fired: the delivery is in `out` (the box is passive again)
  not_owner,  // this handle no longer owns the box
  error,      // see last_error()
};

// How full the box is, for the owner (read without locks).
struct usage_info {
  std::vector<std::uint64_t> depth;     // messages per lane
  std::uint64_t depth_total = 0;
  std::vector<std::uint32_t> capacity;  // per lane
  std::uint64_t capacity_total = 0;
  std::uint64_t dropped_since_delivery = 0;  // overflow and custom-buffer drops since the last delivery (deliver())
};

// How one receive waits and how much it takes. E.g. receive(m) waits for
// ever; receive(m, {.timeout = 100ms}); receive_batch(b, {.max = 64,
// .timeout = 0ns}) takes what is there without waiting.
struct receive_options {
  // Batch forms: at most this many messages (the one-message forms take one).
  std::size_t max = SIZE_MAX;
  // How long to wait for the first message: nanoseconds::max() (the
  // default) waits for ever; 0 does not wait (status timeout when nothing is
  // there; try_receive says empty).
  std::chrono::nanoseconds timeout = std::chrono::nanoseconds::max();
  // How long to poll before sleeping on the futex (at most kMaxSpin).
  // Unset: the box's options::spin.
  std::optional<std::chrono::nanoseconds> spin{};
};

// The owner handle. Receiving copies a message out and commits it in one call.
// A fork child's copy of an Owner does not own the box (box.hpp: handles and
// fork()): its calls return not_owner (last_error() names the process that
// made it), notify_fd() -1, and destroying it leaves the box to the parent.
class SHMBOX_API Owner {
 public:
  // Takes ownership of the box by name. Fails with errc::not_owner when another
  // live process owns it. A dead owner's box is taken over, with its messages.
  static result<Owner> acquire(std::string_view name);
  static result<Owner> acquire(const Box& box);

  Owner(Owner&&) noexcept;
  Owner& operator=(Owner&&) noexcept;
  ~Owner();  // releases ownership (not from a fork child's copy); the messages stay in the box

  // Takes the next message if there is one (empty if not). Owner only.
  recv_status try_receive(message& out);
  // Waits for a message (by default forever; see receive_options): polls
  // for the spin time, then sleeps on a futex (no CPU while idle).
  recv_status receive(message& out, const receive_options& o = {});
  // Appends up to o.max messages to `out`: waits up to o.timeout for the
  // first, then takes what is there without waiting. Returns ok if any was
  // appended.
  recv_status receive_batch(std::vector<message>& out, const receive_options& o = {});
  // The same into a reusable batch (appends; call out.clear() to reuse it).
  recv_status receive_batch(batch& out, const receive_options& o = {});

  // Zero-copy receive: calls fn(const message_view&) for each of up to o.max
  // messages (waiting up to o.timeout for the first), in place in the box;
  // each message is committed and its slot released when fn returns. fn
  // must not keep the view, and must not call this Owner. If the process
  // dies inside fn, that message is delivered again (flagged) to the next
  // owner. A lease box copies each message once before fn (it commits before
  // it hands anything out; see read()). Returns ok if fn was called.
  template <class F>
  recv_status receive_in_place(F&& fn, const receive_options& o = {}) {
    auto thunk = [](void* f, const message_view& v) { (*static_cast<std::remove_reference_t<F>*>(f))(v); };
    return receive_in_place_impl(thunk, static_cast<void*>(&fn), o);
  }

  // Two-phase receive: takes up to o.max messages (waiting up to o.timeout
  // for the first) without committing them: they stay in the box, pinned,
  // until commit(). If this owner dies first, the next owner receives them
  // again, flagged redelivered. Receives meanwhile (lease box or not) hand
  // out the messages after them and leave them to commit(). Owner only.
  recv_status read(batch& out, const receive_options& o = {});
  // Commits everything read since the last commit. Returns ok, or not_owner
  // when the box was taken away meanwhile (lease expired): `*lost` (if given)
  // says how many of them went back to the new owner.
  recv_status commit(std::size_t* lost = nullptr);

  // --- Request/reply (shmbox/request.hpp). Answers a request this owner
  // received (message::is_request()): the reply goes to the requester's reply
  // box, correlated by the request itself, and the requester receives exactly
  // one reply per request. A request read and not yet committed (read(), or
  // inside receive_in_place's function, where reply() may be called) is
  // marked answered in the box after its reply is stored: an heir that
  // receives it again (redelivered) sees message::answered and reply() sends
  // nothing (already_replied). An owner killed between storing a reply and
  // marking it (a few instructions) leaves no mark: the heir's reply is then
  // dropped by the requester as a duplicate (counted there). Never waits:
  // a dead requester (requester_gone) or a full reply box (full) costs that
  // reply, counted in the box's reply counters and sent to its dead letters.
  // Replies may be up to the box's slot size (the Requester's
  // max_reply_size). Owner only; the reply boxes' producer handles are kept
  // (up to 64, least recently used first to go).
  reply_status reply(const message& request, std::string_view data);
  reply_status reply(const message_view& request, std::string_view data);
  reply_status reply(const batch& requests, std::size_t i, std::string_view data);

  // --- The stash (actor-ts's stash / unstashAll; boxes created with
  // options::stash). stash() parks a copy of a message this owner received,
  // to be handled later; unstash_all() makes every parked message the next
  // ones delivered, before anything in the lanes, in stash order (after any
  // unstashed earlier and not yet received). In a priority box each rejoins
  // its own priority in its lane instead: delivered before the messages of
  // that priority waiting there, in stash order among the unstashed ones
  // (actor-ts's stash with its PriorityMailbox). Parked messages stay in the
  // box's shared memory: they count against their lane's limit (producers
  // see room for limit - parked) and survive this owner: if it dies or lets
  // go, the next owner receives them first, flagged redelivered, whether
  // they were unstashed or not. To move a message into the stash with no
  // window where a crash loses it, read() it, stash() it, then commit(): a
  // crash between stash and commit delivers it twice (both flagged), never
  // zero times. Counted per lane: stashed, and unstashed when received back.
  // Errors (recv_status::error, last_error()): no stash in this box
  // (invalid_argument), a message larger than the slot (too_large), the
  // stash full or the lane left no room (full). A priority box keeps the
  // message's priority (message::priority; the form with data takes it as
  // an argument, 0 when not given, as a post). Owner only.
  recv_status stash(const message& m);
  recv_status stash(std::string_view data, std::uint32_t lane);
  recv_status stash(std::string_view data, std::uint32_t lane, std::int64_t priority);
  // Returns how many messages it unstashed.
  std::size_t unstash_all();
  // Parked now (not yet unstashed), and unstashed but not yet received.
  std::size_t stashed() const noexcept;
  std::size_t unstashed_waiting() const noexcept;

  // --- Priority and custom-buffer boxes (options::priority, options::buffer).
  // Moves what the lanes hold into the box's store now, without delivering:
  // a custom buffer sees every message (push / push_drop) and drops what it
  // decides, so an owner that pumps when its notify_fd wakes keeps its
  // buffer in charge while it is busy (pobox's passive mode). Receives pump
  // too. Returns how many messages it moved (0 in other boxes, or when this
  // handle is not the owner). last_error(): buffer_broken if the buffer
  // broke its contract (it was rebuilt from the store; nothing is lost).
  std::size_t pump();
  // Hands the box to process `dest_pid` of this pid namespace, which must be
  // waiting for it (Heir::await_transfer, as heir or listener). Returns true
  // once dest owns the box (this handle is then no longer the owner); false,
  // with nothing changed, when dest is not running here or not waiting, is
  // this process, did not take the box within `timeout`, when this handle is
  // not the owner, or when data is longer than 64 bytes or reads are
  // uncommitted. Owner only.
  bool give_away(std::uint32_t dest_pid, std::string_view data, std::chrono::nanoseconds timeout);
  // The same for the heir or listener in heir-table entry `entry`
  // (heir_info::entry, `shmbox heirs`), in whatever pid namespace it runs
  // (a pid names a process of one namespace only). Owner only.
  bool give_away_to_heir(std::uint32_t entry, std::string_view data, std::chrono::nanoseconds timeout);
  // Lets operators and scripts ask for the box (Box::request_give_away,
  // `shmbox give-away NAME PID`): while accepted, a request is served the
  // next time this owner receives or waits, by give_away(pid, "requested").
  // The call that served it returns not_owner once the box is given. A
  // request makes notify_fd (if this handle has one) readable, so an event
  // loop's next wait() serves it. Off by default; a new owner starts with it off.
  void accept_give_away_requests(bool accept) noexcept;
  // Renews the lease of a box created with a lease (receiving renews it).
  void renew() noexcept;
  // Depth and capacity per lane and in total, and the drops since the last delivery.
  usage_info usage() const;

  // --- pobox's owner states (one-shot arming; after each wake or delivery the box is passive)
  owner_mode mode() const noexcept;
  void passive();
  // Arms notify. The post that wakes the owner sends the notification and sets
  // the box back to passive; if the box already has data, the notification is
  // sent at once and the box stays passive. wait() reports it (notified) once.
  void notify();
  // Arms active: the next delivery, through `filter` (none: deliver all), of up
  // to `max` messages, is made as soon as data is there (by wait()).
  void active(filter_fn filter = {}, std::size_t max = SIZE_MAX);
  // Waits up to `timeout` for the armed state to fire: notify -> notified;
  // active -> the delivery is made into `out` and delivered is returned.
  // With nothing armed it sleeps until the timeout (none). Either way it
  // serves give-away requests (then not_owner, as when the box is lost).
  owner_event wait(delivery& out, std::chrono::nanoseconds timeout);
  // A delivery now, through `filter`, of up to `max` messages, whatever the
  // state: ok (a delivery, maybe empty: all dropped or the first skipped),
  // empty (nothing in the box: no delivery), not_owner or error. Resets the
  // drop count reported with deliveries.
  recv_status deliver(delivery& out, std::size_t max, const filter_fn& filter);
  // For event loops (epoll, poll, asio, libuv): readable when an armed notify
  // or active fired; then call wait(out, 0). Works with producers in any
  // process; each Owner handle has its own. Owned by the handle. -1 (and
  // last_error() says why) for a member of a NotifyGroup.
  int notify_fd();
  // Instead of a notify_fd of its own: this owner's notifications make
  // `group`'s fd readable and its ready() hand out `tag`. An Owner is in one
  // group at most; join again to move (or to change the tag). Refused
  // (invalid_argument) once notify_fd() was called; not_owner as wait().
  result<void> join(NotifyGroup& group, std::uint64_t tag);
  // Leaves its group (nothing if in none); so does destroying the Owner.
  void leave_group() noexcept;

  // How this owner got the box.
  const transfer_record& transfer() const noexcept;
  // The epoch this handle owns the box under.
  std::uint64_t epoch() const noexcept;
  // The id of a message this owner received (message::lane and ::position,
  // or a batch's lane(i) and position(i)): the box's Box::id with them.
  message_id id_of(std::uint32_t lane, std::uint64_t position) const noexcept;
  // Why the last call returned recv_status::error.
  std::error_code last_error() const noexcept;

 private:
  struct SHMBOX_LOCAL state;
  recv_status receive_in_place_impl(void (*fn)(void*, const message_view&), void* ctx, const receive_options& o);
  reply_status reply_impl(std::string_view reply_to, bool answered, std::uint32_t lane, std::uint64_t position,
                          std::size_t body, const char* in_place, std::string_view data);
  SHMBOX_LOCAL explicit Owner(std::unique_ptr<state> s);
  std::unique_ptr<state> s_;
  friend struct detail::access;
};

}  // namespace shmbox
