// examples/epoll/owner.cpp - an owner inside an event loop: the box's
// notify_fd() sits in an epoll set beside whatever else the program waits
// on, and the owner arms the box (notify or active) before each wait.
//
//   example-epoll-owner [BOX [COUNT [MODE]]]   (defaults: "example-events", 1000, "active")
//       MODE "notify": epoll says "data is there"; the loop then receives
//                      what is there without waiting (receive_batch, timeout 0).
//       MODE "active": epoll says "a delivery is ready"; wait() hands it over,
//                      already run through a filter (pobox's active state).
//
// Post into it with example-producer (same BOX and COUNT). It prints
// "ready", then "received N messages, sum S, W wake-ups" and removes the
// box; exit status 0 when the numbers 0..COUNT-1 came in order.
#include <shmbox/shmbox.hpp>

#include <sys/epoll.h>
#include <unistd.h>

#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

namespace {

// Counts the numbers 0, 1, 2, ... as they arrive; false on anything else.
struct tally {
  std::uint64_t received = 0;
  std::uint64_t sum = 0;
  bool add(std::string_view text) {
    std::uint64_t value = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc{} || end != text.data() + text.size() || value != received) {
      std::fprintf(stderr, "owner: message %llu is '%.*s'\n", static_cast<unsigned long long>(received),
                   static_cast<int>(text.size()), text.data());
      return false;
    }
    sum += value;
    ++received;
    return true;
  }
};

int run(const std::string& name, std::uint64_t count, bool active, bool& created) {
  shmbox::options opts;
  opts.capacity = 64;
  opts.slot_size = 32;
  opts.overflow = shmbox::policy::block;  // a producer waits for room rather than lose messages
  auto box = shmbox::Box::create(name, opts);
  if (!box) {
    std::fprintf(stderr, "owner: create '%s': %s\n", name.c_str(), shmbox::explain(box.error()).c_str());
    return 1;
  }
  created = true;
  auto owner = shmbox::Owner::acquire(*box);
  if (!owner) {
    std::fprintf(stderr, "owner: acquire: %s\n", shmbox::explain(owner.error()).c_str());
    return 1;
  }

  // The descriptor belongs to the Owner handle (do not close it). It becomes
  // readable when an armed notify or active fires, whichever process posted.
  const int box_fd = owner->notify_fd();
  if (box_fd < 0) {
    std::fprintf(stderr, "owner: notify_fd: %s\n", shmbox::explain(owner->last_error()).c_str());
    return 1;
  }
  const int ep = ::epoll_create1(EPOLL_CLOEXEC);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = box_fd;
  if (ep < 0 || ::epoll_ctl(ep, EPOLL_CTL_ADD, box_fd, &ev) != 0) {
    std::perror("owner: epoll");
    return 1;
  }
  std::printf("ready\n");
  std::fflush(stdout);

  tally got;
  std::uint64_t wakeups = 0;
  shmbox::delivery d;
  int rc = 0;
  while (rc == 0 && got.received < count) {
    // Arm the box. Arming is one-shot: after each wake-up or delivery the
    // box is passive again (messages accumulate, nobody is signalled), so
    // arm it again before every wait. If data is already there, the fd is
    // readable at once.
    if (active) {
      // A filter sees each message and answers deliver (possibly rewritten),
      // drop (counted as filtered) or skip (stop; the rest stays). Here it
      // delivers everything, at most 64 messages per delivery.
      owner->active([](std::string&) { return shmbox::filter_verdict::deliver; }, 64);
    } else {
      owner->notify();
    }

    // The event loop: a real program waits on its sockets, timers, ... here too.
    epoll_event ready[8];
    const int n = ::epoll_wait(ep, ready, 8, 10'000);
    if (n < 0) {
      std::perror("owner: epoll_wait");
      rc = 1;
      break;
    }
    if (n == 0) {
      std::fprintf(stderr, "owner: no wake-up for 10 s (after %llu of %llu messages)\n",
                   static_cast<unsigned long long>(got.received), static_cast<unsigned long long>(count));
      rc = 1;
      break;
    }
    ++wakeups;

    // The fd is readable: wait(d, 0) consumes the wake-up and says what fired.
    switch (owner->wait(d, std::chrono::nanoseconds(0))) {
      case shmbox::owner_event::notified: {
        // Notify: data is there. Take what is there now, without waiting.
        std::vector<shmbox::message> msgs;
        const shmbox::recv_status st = owner->receive_batch(msgs, {.max = 64, .timeout = std::chrono::nanoseconds(0)});
        if (st == shmbox::recv_status::error || st == shmbox::recv_status::not_owner) {
          std::fprintf(stderr, "owner: receive_batch: %s\n",
                       st == shmbox::recv_status::error ? shmbox::explain(owner->last_error()).c_str() : "not owner");
          rc = 1;
        }
        for (const shmbox::message& m : msgs)
          if (rc == 0 && !got.add(m.data)) rc = 1;
        break;
      }
      case shmbox::owner_event::delivered:
        // Active: the delivery is in `d`, already through the filter.
        // d.dropped counts what the box's policy or the filter dropped since
        // the last delivery (none here: a `block` box and a filter that keeps all).
        for (std::size_t i = 0; i < d.messages.size(); ++i)
          if (rc == 0 && !got.add(d.messages[i])) rc = 1;
        if (d.dropped != 0) {
          std::fprintf(stderr, "owner: %llu messages dropped\n", static_cast<unsigned long long>(d.dropped));
          rc = 1;
        }
        break;
      case shmbox::owner_event::none:
        break;  // a spurious wake-up: arm again
      case shmbox::owner_event::not_owner:
        std::fprintf(stderr, "owner: the box was taken away\n");
        rc = 1;
        break;
      case shmbox::owner_event::error:
        std::fprintf(stderr, "owner: wait: %s\n", shmbox::explain(owner->last_error()).c_str());
        rc = 1;
        break;
    }
  }
  ::close(ep);
  if (rc == 0)
    std::printf("received %llu messages, sum %llu, %llu wake-ups\n", static_cast<unsigned long long>(got.received),
                static_cast<unsigned long long>(got.sum), static_cast<unsigned long long>(wakeups));
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string name = argc > 1 ? argv[1] : "example-events";
  const std::uint64_t count = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 1000;
  const std::string mode = argc > 3 ? argv[3] : "active";
  if (mode != "active" && mode != "notify") {
    std::fprintf(stderr, "usage: %s [BOX [COUNT [active|notify]]]\n", argv[0]);
    return 2;
  }
  bool created = false;
  const int rc = run(name, count, mode == "active", created);
  if (!created) return rc;  // never remove a box this program did not make
  if (auto removed = shmbox::Box::remove(name); !removed && rc == 0) {
    std::fprintf(stderr, "owner: remove: %s\n", shmbox::explain(removed.error()).c_str());
    return 1;
  }
  return rc;
}
