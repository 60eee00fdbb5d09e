// examples/heir/heir.cpp - an heir: registers to inherit a box, waits until
// its owner dies, prints how it got the box (the transfer record) and
// receives what is left in it: the numbers up to COUNT-1, as posted by
// example-producer.
//
//   example-heir [BOX [COUNT [DATA]]]    (defaults: "example-work", 10, "standby-1")
//
// DATA (up to 64 bytes) is handed back to the heir in the transfer record,
// e.g. to say which standby it is. It prints "enlisted" once registered,
// then "took over ..." and "received N messages (first F, R redelivered)";
// it removes the box at the end. Exit status 0 when the messages came
// complete and in order.
#include <shmbox/shmbox.hpp>

#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace {

int run(const std::string& name, std::uint64_t count, const std::string& data, bool& owned) {
  // The heir table has a fixed number of entries; the first live heir, in
  // registration order, takes the box over when the owner dies.
  auto heir = shmbox::Heir::enlist(name, data);
  if (!heir) {
    std::fprintf(stderr, "heir: enlist '%s': %s\n", name.c_str(), shmbox::explain(heir.error()).c_str());
    return 1;
  }
  std::printf("enlisted (position %u)\n", heir->position());
  std::fflush(stdout);

  // Blocks until this process owns the box or the timeout passes. The
  // owner's death is seen at once through a pidfd (within 5 ms when the
  // owner runs in another pid namespace). Heir::fd() is the same wait for an
  // event loop: readable when await_transfer(0) may succeed.
  auto owner = heir->await_transfer(std::chrono::seconds(30));
  if (!owner) {
    std::fprintf(stderr, "heir: await_transfer: %s\n", shmbox::explain(owner.error()).c_str());
    return 1;
  }
  owned = true;
  const shmbox::transfer_record& t = owner->transfer();
  std::printf("took over '%s': reason %s, from pid %u, epoch %llu, heir data '%s'\n", t.box.c_str(),
              shmbox::to_string(t.reason).data(), t.from_pid, static_cast<unsigned long long>(t.epoch), t.data.c_str());

  // The messages the dead owner left are all here, in order; the one it
  // had read without committing comes first, flagged redelivered.
  std::uint64_t received = 0;
  std::uint64_t redelivered = 0;
  std::uint64_t first = 0;
  std::uint64_t next = 0;
  while (received == 0 || next < count) {
    shmbox::message m;
    const shmbox::recv_status st = owner->receive(m, {.timeout = std::chrono::seconds(10)});
    if (st != shmbox::recv_status::ok) {
      std::fprintf(stderr, "heir: receive: %s\n",
                   st == shmbox::recv_status::error ? shmbox::explain(owner->last_error()).c_str()
                                                    : shmbox::to_string(st).data());
      return 1;
    }
    std::uint64_t value = 0;
    const auto [end, ec] = std::from_chars(m.data.data(), m.data.data() + m.data.size(), value);
    if (ec != std::errc{} || end != m.data.data() + m.data.size() || (received > 0 && value != next)) {
      std::fprintf(stderr, "heir: unexpected message '%s' (expected %llu)\n", m.data.c_str(),
                   static_cast<unsigned long long>(next));
      return 1;
    }
    if (received == 0) first = value;
    if (m.redelivered) ++redelivered;
    next = value + 1;
    ++received;
  }
  std::printf("received %llu messages (first %llu, %llu redelivered)\n", static_cast<unsigned long long>(received),
              static_cast<unsigned long long>(first), static_cast<unsigned long long>(redelivered));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string name = argc > 1 ? argv[1] : "example-work";
  const std::uint64_t count = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 10;
  const std::string data = argc > 3 ? argv[3] : "standby-1";
  bool owned = false;
  const int rc = run(name, count, data, owned);
  // This program ends the box's life: it is its last owner. (An heir that
  // never got the box leaves it alone.)
  if (!owned) return rc;
  if (auto removed = shmbox::Box::remove(name); !removed && rc == 0) {
    std::fprintf(stderr, "heir: remove: %s\n", shmbox::explain(removed.error()).c_str());
    return 1;
  }
  return rc;
}
