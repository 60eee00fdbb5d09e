// examples/heir/owner.cpp - an owner that dies: creates a box, owns it,
// receives FIRST messages, then reads one more WITHOUT committing it and
// stops there, as if it crashed half-way through handling it. Kill it (kill
// -9) and the box's heir (example-heir) takes it over: the messages still in
// the box are intact, and the one this owner read but never committed is
// delivered again, flagged `redelivered`.
//
//   example-heir-owner [BOX [FIRST]]     (defaults: "example-work", 4)
//
// It prints "ready" once it owns the box, then "holding message N" when it
// is ready to be killed. It removes nothing: the box belongs to whoever
// owns it next.
#include <shmbox/shmbox.hpp>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

int main(int argc, char** argv) {
  const std::string name = argc > 1 ? argv[1] : "example-work";
  const int first = argc > 2 ? std::atoi(argv[2]) : 4;

  shmbox::options opts;
  opts.capacity = 64;
  opts.slot_size = 32;
  auto box = shmbox::Box::create(name, opts);
  if (!box) {
    std::fprintf(stderr, "owner: create '%s': %s\n", name.c_str(), shmbox::explain(box.error()).c_str());
    return 1;
  }
  auto owner = shmbox::Owner::acquire(*box);
  if (!owner) {
    std::fprintf(stderr, "owner: acquire: %s\n", shmbox::explain(owner.error()).c_str());
    (void)shmbox::Box::remove(name);
    return 1;
  }
  std::printf("ready (pid %d)\n", static_cast<int>(::getpid()));
  std::fflush(stdout);

  // receive() copies a message out and commits it in one call: once it
  // returns, the message has left the box for good.
  for (int i = 0; i < first; ++i) {
    shmbox::message m;
    const shmbox::recv_status st = owner->receive(m, {.timeout = std::chrono::seconds(10)});
    if (st != shmbox::recv_status::ok) {
      std::fprintf(stderr, "owner: receive: %s\n",
                   st == shmbox::recv_status::error ? shmbox::explain(owner->last_error()).c_str()
                                                    : shmbox::to_string(st).data());
      return 1;
    }
    std::printf("received %s\n", m.data.c_str());
  }

  // read() takes a message without committing it: it stays in the box,
  // pinned, until commit(). An owner that dies before commit() loses
  // nothing: the next owner receives the message again, flagged.
  shmbox::batch pending;
  const shmbox::recv_status st = owner->read(pending, {.max = 1, .timeout = std::chrono::seconds(10)});
  if (st != shmbox::recv_status::ok) {
    std::fprintf(stderr, "owner: read: %s\n",
                 st == shmbox::recv_status::error ? shmbox::explain(owner->last_error()).c_str()
                                                  : shmbox::to_string(st).data());
    return 1;
  }
  std::printf("holding message %.*s\n", static_cast<int>(pending[0].size()), pending[0].data());
  std::fflush(stdout);

  // Stand for a crash: wait to be killed. (Exiting normally would hand the
  // box over too: the heir's reason is owner-died either way.)
  ::sleep(60);
  std::fprintf(stderr, "owner: nobody killed me\n");
  return 1;
}
