// Bad inputs at the segment level: foreign, truncated, corrupt, wrong-version
// and half-created segments; bad options; modes; a scribbled ring. Each must
// be a clear error, never a crash or a hang.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <optional>
#include <random>
#include <string>

#include "segment/layout.hpp"
#include "segment/segment.hpp"
#include "shmbox/shmbox.hpp"
#include "checks.hpp"
#include "support.hpp"

using namespace std::chrono_literals;
using shmbox::errc;

namespace {

// Writes `bytes` to /dev/shm/shmbox.<name> (creating it).
void write_raw(const std::string& name, const std::string& bytes) {
  const int fd = ::shm_open(("/shmbox." + name).c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
  REQUIRE(fd >= 0);
  REQUIRE(::write(fd, bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size()));
  ::close(fd);
}

// Maps a box's segment read-write to poke at it, as a hostile process would.
struct raw_map {
  void* addr = MAP_FAILED;
  std::size_t size = 0;
  explicit raw_map(const std::string& name) {
    const int fd = ::shm_open(("/shmbox." + name).c_str(), O_RDWR, 0);
    REQUIRE(fd >= 0);
    struct stat st {};
    ::fstat(fd, &st);
    size = static_cast<std::size_t>(st.st_size);
    addr = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);
    REQUIRE(addr != MAP_FAILED);
  }
  ~raw_map() { ::munmap(addr, size); }
  shmbox::detail::segment_header* header() const { return static_cast<shmbox::detail::segment_header*>(addr); }
};

void check_open_fails(const std::string& name, errc expected, const char* words) {
  auto r = shmbox::Box::open(name);
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error() == expected);
  const std::string why = shmbox::explain(r.error());
  CHECK_MESSAGE(why.find(words) != std::string::npos, why);
  CHECK(why.find(name) != std::string::npos);  // the sentence names the box
  // Producer and owner refuse it the same way; the CLI's read-only path too.
  CHECK(shmbox::Producer::attach(name).error() == expected);
  CHECK(shmbox::Owner::acquire(name).error() == expected);
  CHECK(shmbox::Box::inspect(name).error() == expected);
  CHECK(shmbox::Box::snapshot(name).error() == expected);
}

}  // namespace

TEST_CASE("segment: a missing box is not_found and says how to create one") {
  const std::string name = shmtest::unique_name("missing");
  check_open_fails(name, errc::not_found, "shmbox create");
  CHECK(shmbox::Box::remove(name).error() == errc::not_found);
}

TEST_CASE("segment: creating an existing box fails with exists") {
  shmtest::segment_guard g(shmtest::unique_name("twice"));
  REQUIRE(shmbox::Box::create(g.name));
  auto again = shmbox::Box::create(g.name);
  REQUIRE_FALSE(again);
  CHECK(again.error() == errc::exists);
  CHECK(shmbox::explain(again.error()).find("shmbox rm") != std::string::npos);
}

TEST_CASE("segment: a file of random bytes is not a box") {
  shmtest::segment_guard g(shmtest::unique_name("random"));
  std::mt19937_64 rng(42);
  std::string bytes(65536, '\0');
  for (auto& b : bytes) b = static_cast<char>(rng());
  write_raw(g.name, bytes);
  check_open_fails(g.name, errc::not_a_box, "not a shmbox segment");
}

TEST_CASE("segment: a file shorter than a header is truncated") {
  shmtest::segment_guard g(shmtest::unique_name("tiny"));
  write_raw(g.name, std::string(100, 'x'));
  check_open_fails(g.name, errc::truncated, "smaller than a shmbox header");
}

TEST_CASE("segment: a box cut short after creation is truncated") {
  shmtest::segment_guard g(shmtest::unique_name("cut"));
  shmbox::options o;
  o.capacity = 4096;
  o.slot_size = 256;
  REQUIRE(shmbox::Box::create(g.name, o));
  const int fd = ::shm_open(("/shmbox." + g.name).c_str(), O_RDWR, 0);
  REQUIRE(fd >= 0);
  REQUIRE(::ftruncate(fd, 64 * 1024) == 0);
  ::close(fd);
  check_open_fails(g.name, errc::truncated, "truncated");
}

TEST_CASE("segment: a snapshot says what inspect says, as of the call; a truncation afterwards cannot reach it") {
  shmtest::segment_guard g(shmtest::unique_name("snap"));
  std::optional<shmbox::Box> snap;
  {
    auto box = shmbox::Box::create(g.name, {.capacity = 8, .slot_size = 64});
    REQUIRE(box);
    auto owner = shmbox::Owner::acquire(*box);
    REQUIRE(owner);
    auto producer = shmbox::Producer::attach(g.name);
    REQUIRE(producer);
    for (const char* m : {"one", "two", "three"}) REQUIRE(shmbox::is_stored(producer->post(m)));

    auto s = shmbox::Box::snapshot(g.name);
    REQUIRE(s);
    snap.emplace(std::move(*s));
    auto live = shmbox::Box::inspect(g.name);
    REQUIRE(live);
    const shmbox::box_info a = shmbox::info(*snap), b = shmbox::info(*live);
    CHECK(a.depth == 3);
    CHECK(a.depth == b.depth);
    CHECK(a.capacity == b.capacity);
    CHECK(a.segment_bytes == b.segment_bytes);
    CHECK(a.producers_attached == 1);
    CHECK(a.owner.alive);  // liveness is the kernel's, asked when read
    CHECK(a.owner.pid == b.owner.pid);
    CHECK(a.lanes.at(0).count.posted == 3);

    // A post after the snapshot shows in the live view, not in the copy.
    REQUIRE(shmbox::is_stored(producer->post("four")));
    CHECK(shmbox::info(*snap).depth == 3);
    CHECK(shmbox::info(*live).depth == 4);
  }  // every mapping of it gone: they would fault on the cut file below
  CHECK_FALSE(shmbox::info(*snap).owner.alive);

  // Cut the file to nothing: the copy reads on (a mapping would be SIGBUS).
  const int fd = ::shm_open(("/shmbox." + g.name).c_str(), O_RDWR, 0);
  REQUIRE(fd >= 0);
  REQUIRE(::ftruncate(fd, 0) == 0);
  ::close(fd);
  const auto peeked = shmbox::peek(*snap, 10);
  REQUIRE(peeked.size() == 3);
  CHECK(peeked[0].data == "one");
  CHECK(peeked[2].data == "three");
  CHECK(shmbox::info(*snap).depth == 3);
}

TEST_CASE("segment: a snapshot of a box larger than the copy limit maps it, as inspect does") {
  shmtest::segment_guard g(shmtest::unique_name("snapbig"));
  REQUIRE(shmbox::Box::create(g.name, {.capacity = 8192, .slot_size = 256}));
  auto p = shmbox::Producer::attach(g.name);
  REQUIRE(p);
  REQUIRE(shmbox::is_stored(p->post("x")));
  auto snap = shmbox::Box::snapshot(g.name);
  REQUIRE(snap);
  const shmbox::box_info s = shmbox::info(*snap);
  CHECK(s.segment_bytes > shmbox::detail::kSnapshotMaxBytes);
  CHECK(s.depth == 1);
}

TEST_CASE("segment: another layout version is refused") {
  shmtest::segment_guard g(shmtest::unique_name("version"));
  REQUIRE(shmbox::Box::create(g.name));
  {
    raw_map m(g.name);
    m.header()->layout_version = 99;
  }
  check_open_fails(g.name, errc::version_mismatch, "layout version 99");
}

TEST_CASE("segment: a header whose geometry is out of range or inconsistent is corrupt") {
  using hdr = shmbox::detail::segment_header;
  struct poke {
    const char* what;
    void (*apply)(hdr*);
  };
  const poke pokes[] = {
      {"zero lanes", [](hdr* h) { h->lane_count = 0; }},
      {"huge slot", [](hdr* h) { h->slot_payload = 0xFFFFFFFF; }},
      {"zero producers", [](hdr* h) { h->max_producers = 0; }},
      {"offsets", [](hdr* h) { h->lanes_offset += 64; }},
      {"stride", [](hdr* h) { h->slot_stride = 64; }},
      {"capacity", [](hdr* h) { h->lane_capacity[0] = 7; }},
      {"policy", [](hdr* h) { h->default_policy = 42; }},
      {"default lane", [](hdr* h) { h->default_lane = h->lane_count; }},  // must be one of its lanes
  };
  for (const auto& p : pokes) {
    CAPTURE(p.what);
    shmtest::segment_guard g(shmtest::unique_name("geom"));
    shmbox::options o;
    o.capacity = 16;
    o.slot_size = 200;
    REQUIRE(shmbox::Box::create(g.name, o));
    {
      raw_map m(g.name);
      p.apply(m.header());
    }
    auto r = shmbox::Box::open(g.name);
    REQUIRE_FALSE(r);
    // Changing the capacity makes the recomputed size disagree with the file.
    CHECK((r.error() == errc::corrupt || r.error() == errc::truncated));
  }
}

TEST_CASE("segment: a box whose creator died before it was ready is incomplete") {
  shmtest::segment_guard g(shmtest::unique_name("halfmade"));
  REQUIRE(shmbox::Box::create(g.name));
  {
    raw_map m(g.name);
    m.header()->ready.store(0);
    // A creator key whose start time cannot belong to a live process.
    m.header()->creator_key = (1ull << 62) | static_cast<std::uint64_t>(::getpid());
  }
  const auto t0 = std::chrono::steady_clock::now();
  check_open_fails(g.name, errc::incomplete, "died before finishing");
  // The opener waited for the creator a bounded time, not forever.
  CHECK(std::chrono::steady_clock::now() - t0 < 30s);
}

TEST_CASE("options: out-of-range values are invalid, oversized boxes too large") {
  shmtest::segment_guard g(shmtest::unique_name("opts"));
  struct bad {
    shmbox::options o;
    errc e;
    const char* words;
  };
  shmbox::options base;
  auto with = [&](auto f) {
    shmbox::options o = base;
    f(o);
    return o;
  };
  const bad cases[] = {
      {with([](auto& o) { o.capacity = 0; }), errc::invalid_argument, "capacity 0"},
      {with([](auto& o) { o.capacity = shmbox::kMaxCapacity + 1; }), errc::invalid_argument, "capacity"},
      {with([](auto& o) { o.slot_size = 0; }), errc::invalid_argument, "slot size 0"},
      {with([](auto& o) { o.max_producers = 0; }), errc::invalid_argument, "max producers"},
      {with([](auto& o) { o.mode = 0400; }), errc::invalid_argument, "0600"},
      {with([](auto& o) { o.mode = 01777; }), errc::invalid_argument, "permission bits"},
      {with([](auto& o) { o.default_lane = 1; }), errc::invalid_argument, "default lane 1"},  // one lane: only 0
      {with([](auto& o) {
         o.lanes.resize(3);
         o.default_lane = 3;
       }),
       errc::invalid_argument, "default lane 3 is not one of its 3 lanes"},
      {with([](auto& o) {
         o.capacity = shmbox::kMaxCapacity;
         o.slot_size = 1u << 16;
       }),
       errc::too_large, "segment limit"},
  };
  for (const auto& c : cases) {
    auto r = shmbox::Box::create(g.name, c.o);
    REQUIRE_FALSE(r);
    CHECK(r.error() == c.e);
    CHECK_MESSAGE(shmbox::explain(r.error()).find(c.words) != std::string::npos, shmbox::explain(r.error()));
    CHECK_FALSE(shmbox::Box::inspect(g.name));  // nothing was left behind
  }
}

TEST_CASE("modes: 0600 by default, exactly the asked mode regardless of umask") {
  const mode_t old = ::umask(077);
  for (std::uint32_t mode : {0600u, 0660u, 0644u}) {
    shmtest::segment_guard g(shmtest::unique_name("mode"));
    shmbox::options o;
    o.mode = mode;
    REQUIRE(shmbox::Box::create(g.name, o));
    struct stat st {};
    REQUIRE(::stat(("/dev/shm/shmbox." + g.name).c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == mode);
    CHECK(shmbox::info(*shmbox::Box::inspect(g.name)).mode == mode);
  }
  ::umask(old);
  CHECK(shmbox::options{}.mode == 0600);
}

TEST_CASE("scribbled ring: owner and producer report corruption, never crash or hang") {
  for (auto pol : {shmbox::policy::reject, shmbox::policy::lifo, shmbox::policy::drop_oldest}) {
    CAPTURE(shmbox::to_string(pol));
    shmtest::segment_guard g(shmtest::unique_name("scribble"));
    auto box = shmbox::Box::create(g.name, {.capacity = 8, .slot_size = 32, .overflow = pol});
    auto p = shmbox::Producer::attach(*box);
    for (int i = 0; i < 4; ++i) {
      std::string msg = "m";
      msg += std::to_string(i);
      REQUIRE(shmbox::is_stored(p->post(msg)));
    }
    {
      raw_map m(g.name);
      auto* h = m.header();
      auto* base = static_cast<std::byte*>(m.addr);
      auto* lane = reinterpret_cast<shmbox::detail::lane_header*>(base + h->lanes_offset);
      auto* slot1 = reinterpret_cast<shmbox::detail::slot_header*>(base + lane->slots_offset + h->slot_stride);
      slot1->length.store(0xFFFFFF);  // a length far beyond the slot
      auto* slot2 = reinterpret_cast<shmbox::detail::slot_header*>(base + lane->slots_offset + 2 * h->slot_stride);
      slot2->seq.store(0xDEADBEEFDEADBEEFull);  // a sequence word of garbage
    }
    auto owner = shmbox::Owner::acquire(*box);
    REQUIRE(owner);
    std::vector<shmbox::message> got;
    shmbox::recv_status last = shmbox::recv_status::ok;
    for (int i = 0; i < 10 && last != shmbox::recv_status::timeout; ++i) last = owner->receive_batch(got, {.max = 16, .timeout = 10ms});
    // Every message that survived is intact; the damaged ones are gone, counted.
    for (const auto& m : got) CHECK(m.data.size() == 2);
    CHECK(got.size() <= 3);
    CHECK(owner->last_error() == errc::corrupt);
    CHECK(shmbox::explain(owner->last_error()).find("corrupt") != std::string::npos);
    // Posting into the damaged box returns a status (stored or error), never hangs.
    for (int i = 0; i < 20; ++i) {
      const auto st = p->post("after", {.timeout = 10ms});
      CHECK(st != shmbox::post_status::too_large);
    }
  }
}
