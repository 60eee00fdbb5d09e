// examples/loans/owner.cpp - zero-copy receiving: Owner::receive_in_place
// hands each message to a callback as a view into the box's shared memory;
// the slot is committed and released when the callback returns. Nothing is
// copied on the way out.
//
//   example-loan-owner [BOX [COUNT]]   (defaults: "example-readings", 1000)
//
// It makes the box, prints "ready", receives COUNT messages "reading N
// value V" from example-loan-producer, prints "received N messages, sum of
// values S" and removes the box; exit status 0 when they came in order.
#include <shmbox/shmbox.hpp>

#include <chrono>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

namespace {

// Reads "reading SEQ value VALUE" from `text`; false if it is anything else.
bool parse_reading(std::string_view text, std::uint64_t& seq, std::uint64_t& value) {
  constexpr std::string_view kReading = "reading ";
  constexpr std::string_view kValue = " value ";
  if (!text.starts_with(kReading)) return false;
  const char* p = text.data() + kReading.size();
  const char* end = text.data() + text.size();
  auto r = std::from_chars(p, end, seq);
  if (r.ec != std::errc{} || !std::string_view(r.ptr, end - r.ptr).starts_with(kValue)) return false;
  r = std::from_chars(r.ptr + kValue.size(), end, value);
  return r.ec == std::errc{} && r.ptr == end;
}

int run(const std::string& name, std::uint64_t count, bool& created) {
  shmbox::options opts;
  opts.capacity = 64;
  opts.slot_size = 64;  // what loan().capacity() offers the producer
  opts.overflow = shmbox::policy::block;
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
  std::printf("ready\n");
  std::fflush(stdout);

  std::uint64_t received = 0;
  std::uint64_t sum = 0;
  bool bad = false;
  while (received < count && !bad) {
    // Up to 64 messages per call, waiting up to 10 s for the first. The
    // view points into the box and is valid only inside the callback: use
    // it (or copy what you keep) there. The callback must not call the Owner.
    const shmbox::recv_status st = owner->receive_in_place(
        [&](const shmbox::message_view& v) {
          // Parse in place: the view is not NUL-terminated, so bound every
          // read by its size (std::from_chars takes an end pointer).
          std::uint64_t seq = 0;
          std::uint64_t value = 0;
          if (!parse_reading(v.data, seq, value) || seq != received) {
            if (!bad)
              std::fprintf(stderr, "owner: message %llu is '%.*s'\n", static_cast<unsigned long long>(received),
                           static_cast<int>(v.data.size()), v.data.data());
            bad = true;
            return;
          }
          sum += value;
          ++received;
        },
        {.max = 64, .timeout = std::chrono::seconds(10)});
    if (st != shmbox::recv_status::ok) {
      std::fprintf(stderr, "owner: receive_in_place: %s (after %llu of %llu messages)\n",
                   st == shmbox::recv_status::error ? shmbox::explain(owner->last_error()).c_str()
                                                    : shmbox::to_string(st).data(),
                   static_cast<unsigned long long>(received), static_cast<unsigned long long>(count));
      return 1;
    }
  }
  if (bad) return 1;
  std::printf("received %llu messages, sum of values %llu\n", static_cast<unsigned long long>(received),
              static_cast<unsigned long long>(sum));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string name = argc > 1 ? argv[1] : "example-readings";
  const std::uint64_t count = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 1000;
  bool created = false;
  const int rc = run(name, count, created);
  if (!created) return rc;  // never remove a box this program did not make
  if (auto removed = shmbox::Box::remove(name); !removed && rc == 0) {
    std::fprintf(stderr, "owner: remove: %s\n", shmbox::explain(removed.error()).c_str());
    return 1;
  }
  return rc;
}
