// examples/producer-owner/owner.cpp - the owner side of a box: creates the
// box, owns it, receives COUNT messages (the numbers 0..COUNT-1, as text),
// prints how many and their sum, and removes the box.
//
//   example-owner [BOX [COUNT [WAIT_SECONDS]]]
//       BOX           the box's name (default "example-jobs")
//       COUNT         messages to receive before exiting (default 1000)
//       WAIT_SECONDS  how long to wait for each message (default 10)
//
// Start it first, then example-producer with the same BOX and COUNT (from
// any process, any terminal). It prints "ready" once it owns the box and
// "received N messages, sum S" at the end; exit status 0 when every message
// came in order, 1 otherwise.
#include <shmbox/shmbox.hpp>

#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace {

int run(const std::string& name, std::uint64_t count, std::chrono::seconds wait, bool& created) {
  // The box's shape is fixed at creation. `block`: a producer that finds the
  // box full waits for room (up to its timeout) instead of losing messages.
  shmbox::options opts;
  opts.capacity = 64;  // messages the box holds at once
  opts.slot_size = 32;  // the largest message, in bytes
  opts.overflow = shmbox::policy::block;
  auto box = shmbox::Box::create(name, opts);
  if (!box) {
    std::fprintf(stderr, "owner: create '%s': %s\n", name.c_str(), shmbox::explain(box.error()).c_str());
    return 1;
  }
  created = true;

  // One owner at a time receives from a box.
  auto owner = shmbox::Owner::acquire(*box);
  if (!owner) {
    std::fprintf(stderr, "owner: acquire: %s\n", shmbox::explain(owner.error()).c_str());
    return 1;
  }
  std::printf("ready\n");
  std::fflush(stdout);  // whoever started us may wait for this line

  std::uint64_t received = 0;
  std::uint64_t sum = 0;
  shmbox::message m;
  while (received < count) {
    // Waits (polling briefly, then asleep on a futex: no CPU while idle).
    const shmbox::recv_status st = owner->receive(m, {.timeout = wait});
    if (st != shmbox::recv_status::ok) {
      std::fprintf(stderr, "owner: receive: %s", shmbox::to_string(st).data());
      if (st == shmbox::recv_status::error) std::fprintf(stderr, ": %s", shmbox::explain(owner->last_error()).c_str());
      std::fprintf(stderr, " (after %llu of %llu messages)\n", static_cast<unsigned long long>(received),
                   static_cast<unsigned long long>(count));
      return 1;
    }
    // The message is the bytes the producer posted: here a decimal number.
    std::uint64_t value = 0;
    const auto [end, ec] = std::from_chars(m.data.data(), m.data.data() + m.data.size(), value);
    if (ec != std::errc{} || end != m.data.data() + m.data.size() || value != received) {
      std::fprintf(stderr, "owner: message %llu is '%s'\n", static_cast<unsigned long long>(received), m.data.c_str());
      return 1;
    }
    sum += value;
    ++received;
  }
  std::printf("received %llu messages, sum %llu\n", static_cast<unsigned long long>(received),
              static_cast<unsigned long long>(sum));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string name = argc > 1 ? argv[1] : "example-jobs";
  const std::uint64_t count = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 1000;
  const std::chrono::seconds wait{argc > 3 ? std::atoi(argv[3]) : 10};
  bool created = false;
  const int rc = run(name, count, wait, created);
  // A box outlives the processes that use it until it is removed (never
  // remove one this program did not create: it may be someone else's).
  // Removing unlinks it from /dev/shm at once; processes that still have it
  // open can finish.
  if (!created) return rc;
  if (auto removed = shmbox::Box::remove(name); !removed && rc == 0) {
    std::fprintf(stderr, "owner: remove: %s\n", shmbox::explain(removed.error()).c_str());
    return 1;
  }
  return rc;
}
