// examples/loans/producer.cpp - zero-copy posting: the producer borrows a
// slot of the box (Producer::loan), writes the message straight into the
// shared memory, and publishes it with slot_loan::commit. Nothing is copied
// on the way in.
//
//   example-loan-producer [BOX [COUNT]]   (defaults: "example-readings", 1000)
//
// Each message is a line of text "reading N value V". Start
// example-loan-owner first (it makes the box); exit status 0 once every
// message is committed.
#include <shmbox/shmbox.hpp>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

int main(int argc, char** argv) {
  const std::string name = argc > 1 ? argv[1] : "example-readings";
  const std::uint64_t count = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 1000;

  // Wait up to 10 s for the owner to create the box (not_found: not yet;
  // incomplete: being created right now).
  auto producer = shmbox::Producer::attach(name);
  for (int tries = 0; !producer && tries < 1000 &&
                      (producer.error() == shmbox::errc::not_found || producer.error() == shmbox::errc::incomplete);
       ++tries) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    producer = shmbox::Producer::attach(name);
  }
  if (!producer) {
    std::fprintf(stderr, "producer: attach '%s': %s\n", name.c_str(), shmbox::explain(producer.error()).c_str());
    return 1;
  }

  for (std::uint64_t i = 0; i < count; ++i) {
    // Claims a slot; a full box answers as post() would (the owner made a
    // `block` box: wait for room, here up to 5 s).
    shmbox::slot_loan loan = producer->loan({.timeout = std::chrono::seconds(5)});
    if (!loan) {
      std::fprintf(stderr, "producer: loan %llu: %s", static_cast<unsigned long long>(i),
                   shmbox::to_string(loan.status()).data());
      if (loan.status() == shmbox::post_status::error)
        std::fprintf(stderr, ": %s", shmbox::explain(producer->last_error()).c_str());
      std::fprintf(stderr, "\n");
      return 1;
    }
    // Write in place: up to loan.capacity() bytes at loan.data(). Keep the
    // loan short: messages posted after it wait behind it (FIFO order).
    char* out = static_cast<char*>(loan.data());
    const int n = std::snprintf(out, loan.capacity(), "reading %llu value %llu", static_cast<unsigned long long>(i),
                                static_cast<unsigned long long>(i * 3));
    if (n < 0 || static_cast<std::uint32_t>(n) >= loan.capacity()) {
      loan.abort();  // gives the slot back without a message (counted as aborted)
      std::fprintf(stderr, "producer: message %llu does not fit in %u bytes\n", static_cast<unsigned long long>(i),
                   loan.capacity());
      return 1;
    }
    // Publishes the first n bytes. (A loan destroyed without commit is aborted.)
    const shmbox::post_status st = loan.commit(static_cast<std::size_t>(n));
    if (!shmbox::is_stored(st)) {
      std::fprintf(stderr, "producer: commit %llu: %s\n", static_cast<unsigned long long>(i), shmbox::to_string(st).data());
      return 1;
    }
  }
  std::printf("posted %llu messages through loans\n", static_cast<unsigned long long>(count));
  return 0;
}
