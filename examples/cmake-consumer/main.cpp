// A program that uses an installed shmbox: creates a box, posts a few
// messages into it as a producer, receives them as the owner, checks them
// and removes the box. Built by CMake (CMakeLists.txt here), meson
// (../meson-consumer) and pkg-config in tests/package/package_test.sh.
//
//   ./shmbox-consumer BOX_NAME     exit 0 when every message came back in order
#include <shmbox/shmbox.hpp>

#include <chrono>
#include <cstdio>
#include <string>

namespace {

int run(const std::string& name) {
  shmbox::options opts;
  opts.capacity = 16;   // messages
  opts.slot_size = 64;  // bytes per message, at most
  auto box = shmbox::Box::create(name, opts);
  if (!box) {
    std::fprintf(stderr, "create: %s\n", shmbox::explain(box.error()).c_str());
    return 1;
  }

  constexpr int kMessages = 5;
  auto producer = shmbox::Producer::attach(name);
  if (!producer) {
    std::fprintf(stderr, "attach: %s\n", shmbox::explain(producer.error()).c_str());
    return 1;
  }
  for (int i = 0; i < kMessages; ++i) {
    const shmbox::post_status st = producer->post("message " + std::to_string(i));
    if (!shmbox::is_stored(st)) {
      std::fprintf(stderr, "post %d: %s\n", i, shmbox::to_string(st).data());
      return 1;
    }
  }

  auto owner = shmbox::Owner::acquire(name);
  if (!owner) {
    std::fprintf(stderr, "acquire: %s\n", shmbox::explain(owner.error()).c_str());
    return 1;
  }
  for (int i = 0; i < kMessages; ++i) {
    shmbox::message m;
    const shmbox::recv_status st = owner->receive(m, {.timeout = std::chrono::seconds(5)});
    const std::string want = "message " + std::to_string(i);
    if (st != shmbox::recv_status::ok || m.data != want) {
      std::fprintf(stderr, "receive %d: status %d, got '%s', want '%s'\n", i, static_cast<int>(st),
                   m.data.c_str(), want.c_str());
      return 1;
    }
  }
  shmbox::message extra;
  if (owner->try_receive(extra) != shmbox::recv_status::empty) {
    std::fprintf(stderr, "the box should be empty, got '%s'\n", extra.data.c_str());
    return 1;
  }
  std::printf("ok: %d messages through box '%s'\n", kMessages, name.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s BOX_NAME\n", argv[0]);
    return 2;
  }
  const std::string name = argv[1];
  const int rc = run(name);
  // Remove the box however run() ended (it has not been made when create failed).
  if (auto removed = shmbox::Box::remove(name); !removed && rc == 0) {
    std::fprintf(stderr, "remove: %s\n", shmbox::explain(removed.error()).c_str());
    return 1;
  }
  return rc;
}
