// examples/producer-owner/producer.cpp - a producer: attaches to a box
// (waiting up to 10 s for its owner to create it) and posts the numbers
// 0..COUNT-1 as text, one message each.
//
//   example-producer [BOX [COUNT]]     (defaults: "example-jobs", 1000)
//
// Any number of producer processes may post into one box; this one exits 0
// once every message is stored, 1 on the first that is not.
#include <shmbox/shmbox.hpp>

#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

namespace {

// Attaches to box `name`, retrying while it does not exist yet (the owner
// makes it), so the two programs can be started in either order.
shmbox::result<shmbox::Producer> attach_when_there(const std::string& name, std::chrono::seconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  for (;;) {
    auto producer = shmbox::Producer::attach(name);
    // not_found: not created yet; incomplete: being created right now.
    const bool later = !producer && (producer.error() == shmbox::errc::not_found ||
                                     producer.error() == shmbox::errc::incomplete);
    if (!later || std::chrono::steady_clock::now() >= until) return producer;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::string name = argc > 1 ? argv[1] : "example-jobs";
  const std::uint64_t count = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 1000;

  auto producer = attach_when_there(name, std::chrono::seconds(10));
  if (!producer) {
    std::fprintf(stderr, "producer: attach '%s': %s\n", name.c_str(), shmbox::explain(producer.error()).c_str());
    return 1;
  }

  for (std::uint64_t i = 0; i < count; ++i) {
    char text[24];
    const auto end = std::to_chars(text, text + sizeof text, i).ptr;
    // A post returns a status, never throws. The owner made a `block` box: a
    // post into a full box waits for room, here for at most 5 s.
    const shmbox::post_status st = producer->post(std::string_view(text, end - text), {.timeout = std::chrono::seconds(5)});
    if (!shmbox::is_stored(st)) {
      std::fprintf(stderr, "producer: post %llu: %s", static_cast<unsigned long long>(i), shmbox::to_string(st).data());
      if (st == shmbox::post_status::error) std::fprintf(stderr, ": %s", shmbox::explain(producer->last_error()).c_str());
      std::fprintf(stderr, "\n");
      return 1;
    }
  }
  std::printf("posted %llu messages\n", static_cast<unsigned long long>(count));
  return 0;
}
