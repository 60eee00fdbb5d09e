// Hostile pool segments: files planted at a pool's path, damaged headers, and
// a table another process writes garbage over while takers use it. Opening
// must refuse with a clear error; take, give back, inspection and the
// supervisor must never crash, never write outside the segment, and never
// hang past their timeouts (also under ASan and UBSan).
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <random>
#include <string>
#include <thread>

#include "segment/layout.hpp"
#include "pool/pool_layout.hpp"
#include "pool/pool_table.hpp"
#include "shmbox/shmbox.hpp"
#include "support.hpp"

using namespace std::chrono_literals;

namespace {

std::string unique_pool(const char* what) { return shmtest::unique_name(std::string("ph-") + what); }

// Removes the pool's segment (and any member boxes left) even when a check fails.
struct pool_guard {
  std::string name;
  explicit pool_guard(std::string n) : name(std::move(n)) { ::shm_unlink(("/shmbox-pool." + name).c_str()); }
  ~pool_guard() {
    ::shm_unlink(("/shmbox-pool." + name).c_str());
    if (auto boxes = shmbox::Box::list())
      for (const auto& b : *boxes)
        if (b.rfind(name + ".m", 0) == 0) (void)shmbox::Box::remove(b);
  }
};

shmbox::pool_options small_pool() {
  shmbox::pool_options o;
  o.init_count = 0;
  o.max_count = 4;
  o.queue_max = 2;
  o.max_clients = 8;
  o.command = "exec /bin/false";
  return o;
}

// A supervisor of pool `name` in a thread of this process, stopped and
// joined when it goes out of scope: also when a REQUIRE fails, so that the
// test unwinds (its pool_guard removes the pool) instead of aborting on a
// joinable thread.
struct supervisor_thread {
  std::atomic<bool> stop{false};
  std::thread t;
  explicit supervisor_thread(const std::string& name)
      : t([this, name] {
          if (auto p = shmbox::Pool::open(name)) (void)p->supervise({.stop = &stop});
        }) {}
  ~supervisor_thread() {
    stop = true;
    t.join();
  }
};

// The pool segment mapped raw, to damage it on purpose.
struct raw_pool {
  unsigned char* base = nullptr;
  std::size_t size = 0;
  explicit raw_pool(const std::string& name) {
    const int fd = ::shm_open(("/shmbox-pool." + name).c_str(), O_RDWR, 0);
    REQUIRE(fd >= 0);
    struct stat st {};
    REQUIRE(::fstat(fd, &st) == 0);
    size = static_cast<std::size_t>(st.st_size);
    base = static_cast<unsigned char*>(::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
    ::close(fd);
    REQUIRE(base != MAP_FAILED);
  }
  ~raw_pool() { ::munmap(base, size); }
  shmbox::detail::pool_header* header() const { return reinterpret_cast<shmbox::detail::pool_header*>(base); }
  shmbox::detail::pool_state* state() const {
    return reinterpret_cast<shmbox::detail::pool_state*>(base + shmbox::detail::kPoolStateOffset);
  }
};

void write_file(const std::string& path, const std::string& bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  REQUIRE(fd >= 0);
  REQUIRE(::write(fd, bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size()));
  ::close(fd);
}

}  // namespace

TEST_CASE("pool names and options are checked, with a sentence that says what to do") {
  CHECK(shmbox::Pool::create("", small_pool()).error() == shmbox::errc::invalid_name);
  CHECK(shmbox::Pool::create("a/b", small_pool()).error() == shmbox::errc::invalid_name);
  CHECK(shmbox::Pool::create(std::string(101, 'p'), small_pool()).error() == shmbox::errc::invalid_name);
  const std::string name = unique_pool("opts");
  pool_guard g(name);
  auto o = small_pool();
  o.init_count = 5;
  auto r = shmbox::Pool::create(name, o);
  CHECK(r.error() == shmbox::errc::invalid_argument);
  CHECK(shmbox::explain(r.error()).find("init_count 5 is more than max_count 4") != std::string::npos);
  o = small_pool();
  o.command.clear();
  CHECK(shmbox::Pool::create(name, o).error() == shmbox::errc::invalid_argument);
  o = small_pool();
  o.queue_max = 9;  // more than max_clients
  CHECK(shmbox::Pool::create(name, o).error() == shmbox::errc::invalid_argument);
  o = small_pool();
  o.max_count = shmbox::kMaxPoolMembers + 1;
  CHECK(shmbox::Pool::create(name, o).error() == shmbox::errc::invalid_argument);
  o = small_pool();
  o.member.slot_size = 0;
  CHECK(shmbox::Pool::create(name, o).error() == shmbox::errc::invalid_argument);
  REQUIRE(shmbox::Pool::create(name, small_pool()));
  auto again = shmbox::Pool::create(name, small_pool());
  CHECK(again.error() == shmbox::errc::exists);
  CHECK(shmbox::explain(again.error()).find("shmbox pool rm") != std::string::npos);
  CHECK(shmbox::Pool::open(unique_pool("none")).error() == shmbox::errc::not_found);
}

TEST_CASE("files planted at a pool's path are refused, never followed or trusted") {
  const std::string name = unique_pool("planted");
  pool_guard g(name);
  const std::string path = "/dev/shm/shmbox-pool." + name;
  SUBCASE("random bytes") {
    write_file(path, std::string(8192, '\x5a'));
    CHECK(shmbox::Pool::open(name).error() == shmbox::errc::not_a_box);
    CHECK(shmbox::inspect_pool(name).error() == shmbox::errc::not_a_box);
  }
  SUBCASE("too short") {
    write_file(path, std::string(100, '\0'));
    CHECK(shmbox::Pool::open(name).error() == shmbox::errc::truncated);
  }
  SUBCASE("a symbolic link") {
    REQUIRE(::symlink("/etc/passwd", path.c_str()) == 0);
    CHECK(shmbox::Pool::open(name).error() == shmbox::errc::not_a_box);
  }
  SUBCASE("a FIFO (an open must not block)") {
    REQUIRE(::mkfifo(path.c_str(), 0600) == 0);
    CHECK(shmbox::Pool::open(name).error() == shmbox::errc::not_a_box);
  }
  SUBCASE("a box's segment copied to a pool's name") {
    const std::string box = name + "-box";
    REQUIRE(shmbox::Box::create(box));
    const int in = ::shm_open(("/shmbox." + box).c_str(), O_RDONLY, 0);
    REQUIRE(in >= 0);
    struct stat st {};
    REQUIRE(::fstat(in, &st) == 0);
    std::string bytes(static_cast<std::size_t>(st.st_size), '\0');
    REQUIRE(::pread(in, bytes.data(), bytes.size(), 0) == static_cast<ssize_t>(bytes.size()));
    ::close(in);
    (void)shmbox::Box::remove(box);
    write_file(path, bytes);
    CHECK(shmbox::Pool::open(name).error() == shmbox::errc::not_a_box);
  }
}

TEST_CASE("a pool whose header or configuration was damaged is refused as corrupt") {
  const std::string name = unique_pool("header");
  pool_guard g(name);
  REQUIRE(shmbox::Pool::create(name, small_pool()));
  raw_pool raw(name);
  SUBCASE("another layout version") {
    raw.header()->layout_version = 99;
    CHECK(shmbox::Pool::open(name).error() == shmbox::errc::version_mismatch);
  }
  SUBCASE("a member table larger than the segment") {
    raw.header()->max_count = 250;
    CHECK(shmbox::Pool::open(name).error() == shmbox::errc::corrupt);
  }
  SUBCASE("init_count above max_count") {
    raw.header()->init_count = 1000;
    CHECK(shmbox::Pool::open(name).error() == shmbox::errc::corrupt);
  }
  SUBCASE("a command without its terminating NUL") {
    auto* cfg = reinterpret_cast<shmbox::detail::pool_config*>(raw.base + shmbox::detail::kPoolConfigOffset);
    std::memset(cfg->command, 'x', sizeof cfg->command);
    CHECK(shmbox::Pool::open(name).error() == shmbox::errc::corrupt);
  }
  SUBCASE("a name that is not the pool's") {
    auto* cfg = reinterpret_cast<shmbox::detail::pool_config*>(raw.base + shmbox::detail::kPoolConfigOffset);
    cfg->name[0] = '!';
    CHECK(shmbox::Pool::open(name).error() == shmbox::errc::corrupt);
  }
}

TEST_CASE("a journal with offsets outside the table is dropped, not applied") {
  const std::string name = unique_pool("journal");
  pool_guard g(name);
  REQUIRE(shmbox::Pool::create(name, small_pool()));
  raw_pool raw(name);
  auto* st = raw.state();
  // A "committed" journal whose writes aim at the header, the lock word and past the end.
  st->journal_offset[0] = 16;  // total_bytes in the header
  st->journal_value[0] = 1;
  st->journal_offset[1] = raw.size + 64;
  st->journal_value[1] = 7;
  st->journal_offset[2] = shmbox::detail::kPoolStateOffset;  // the lock word
  st->journal_value[2] = 0xFFFF;
  st->journal_count = 3;
  st->journal_valid = 1;
  auto pool = shmbox::Pool::open(name);
  REQUIRE(pool);
  auto l = pool->take(0ns);  // takes the lock, finds the journal, drops it
  CHECK(!l);
  CHECK(st->journal_valid.load() == 0);
  CHECK(raw.header()->total_bytes == raw.size);
  CHECK(st->lock.load() == 0);
  // Counts too many writes: dropped as well.
  st->journal_count = 1u << 20;
  st->journal_valid = 1;
  CHECK(!pool->take(0ns));
  CHECK(st->journal_valid.load() == 0);
}

TEST_CASE("a lock word naming nobody alive is taken over; a stopped-looking holder costs only the timeout") {
  const std::string name = unique_pool("lock");
  pool_guard g(name);
  REQUIRE(shmbox::Pool::create(name, small_pool()));
  raw_pool raw(name);
  auto pool = shmbox::Pool::open(name);
  REQUIRE(pool);
  for (const std::uint32_t garbage : {3u, 0x7FFFu, 0x1234u, 0x80000005u, 0xFFFFFFFFu}) {
    raw.state()->lock = garbage;  // client 2 (free entry), the anonymous holder (nobody holds its byte), out of range
    const auto t0 = std::chrono::steady_clock::now();
    auto l = pool->take(0ns);
    CHECK(l.error() == shmbox::errc::no_members_starting);  // a start was asked for: the table was ours
    CHECK(std::chrono::steady_clock::now() - t0 < 2s);
    CHECK(raw.state()->lock.load() == 0);
  }
}

TEST_CASE("forged cull words: an answer is never more than max_count; a forged seq pair is never taken as served") {
  const std::string name = unique_pool("cullforge");
  pool_guard g(name);
  REQUIRE(shmbox::Pool::create(name, small_pool()));
  raw_pool raw(name);
  supervisor_thread supervisor(name);
  auto pool = shmbox::Pool::open(name);
  REQUIRE(pool);
  REQUIRE(shmtest::eventually([&] {
    auto i = shmbox::inspect_pool(name);
    return i && i->supervisor_alive;
  }, 10s));
  // A served count far beyond the table, and the next seq already "served":
  // the request must get a seq no answer holds yet, and its answer is the
  // supervisor's (0: no member to cull), never the forged one (4, capped).
  // The forged words are written without the table lock while the
  // supervisor runs, and any tick between the forging and the request's
  // section makes the pair consistent again (the guard is then not
  // exercised): the round is repeated until the request picked its seq
  // past the forged answer. Without the guard, such a round returns 4.
  int exercised = 0;
  for (int round = 0; round < 50 && exercised == 0; ++round) {
    const std::uint64_t s = raw.state()->cull_asked.load() >> 32;
    raw.state()->cull_asked = ((s + 1) << 32) | 5;
    raw.state()->cull_done = ((s + 2) << 32) | 0xFFFFFFFFu;
    auto c = pool->cull(0ms, 10s);
    INFO("round " << round << ": " << shmbox::explain(c.error()));
    REQUIRE(c);
    CHECK(*c == 0);  // the supervisor's own answer
    if (*c != 0) break;
    const std::uint64_t picked = raw.state()->cull_asked.load() >> 32;
    CHECK((raw.state()->cull_done.load() >> 32) == picked);  // the answer is to the request's own seq
    if (picked == s + 3) ++exercised;  // it saw the forged pair and stepped past the forged answer
  }
  CHECK(exercised == 1);
  // A forged answer ahead of the request is taken (the words are the pool's:
  // a writer of the segment may lie about its own culls), capped at max_count
  // (4); or the supervisor answered first (0).
  raw.state()->cull_done = (std::uint64_t{0x100} << 32) | 0xFFFFFFFFu;
  raw.state()->cull_asked = std::uint64_t{0x10} << 32;
  auto capped = pool->cull(0ms, 10s);
  REQUIRE(capped);
  CHECK(*capped <= 4);
}

TEST_CASE("forged live limits (RC1): every value stays within the header's bounds; a forged reconfigure pair is never taken as applied") {
  const std::string name = unique_pool("liveforge");
  pool_guard g(name);
  REQUIRE(shmbox::Pool::create(name, small_pool()));  // max_count 4, max_clients 8, members never start (/bin/false)
  raw_pool raw(name);
  auto* st = raw.state();
  st->live_max_count = std::uint64_t{1} << 40;
  st->live_init_count = ~std::uint64_t{0};
  st->live_queue_max = 1'000'000;
  st->live_cull_after_ms = ~std::uint64_t{0} >> 1;
  st->live_auto_grow = 77;
  {
    auto i = shmbox::inspect_pool(name);
    REQUIRE(i);
    CHECK(i->max_count == 4);  // the member entries, whatever the word says
    CHECK(i->init_count <= i->max_count);
    CHECK(i->queue_max <= 8);
    CHECK(i->cull_after <= std::chrono::hours(24));
    REQUIRE(i->auto_grow_threshold);
    CHECK(*i->auto_grow_threshold <= 4);
  }
  auto pool = shmbox::Pool::open(name);
  REQUIRE(pool);
  // A take within the clamped limits: a start is asked for (never beyond the table).
  auto t = pool->take(0ms);
  REQUIRE(!t);
  CHECK((t.error() == shmbox::errc::no_members_starting || t.error() == shmbox::errc::no_members_at_capacity));
  // A forged "applied" ahead of the request: the request gets a seq that is
  // not answered yet. Forged before any supervisor runs (a supervisor's tick
  // would make the pair consistent again: a tick sets reconf_done to
  // reconf_asked), so the request sees it for certain; then a supervisor
  // answers the request's own seq.
  st->reconf_asked = 41;
  st->reconf_done = 42;
  auto r = pool->reconfigure({.init_count = 0, .max_count = 3}, 10s);
  INFO(shmbox::explain(r.error()));
  REQUIRE(r);  // no supervisor: set, applied by the next one (RC3)
  CHECK(st->reconf_asked.load() == 43);  // not 42, which the forged pair says is applied
  CHECK(st->reconf_done.load() == 42);
  supervisor_thread supervisor(name);
  CHECK(shmtest::eventually([&] { return st->reconf_done.load() == 43; }, 10s));
  auto i = shmbox::inspect_pool(name);
  REQUIRE(i);
  CHECK(i->max_count == 3);
  CHECK(i->init_count == 0);
}

TEST_CASE("garbage over the whole table: take, give back, inspection and a supervisor survive it") {
  const std::string name = unique_pool("garbage");
  pool_guard g(name);
  REQUIRE(shmbox::Pool::create(name, small_pool()));
  raw_pool raw(name);
  std::mt19937_64 rng(0x5eed);
  supervisor_thread supervisor(name);
  auto pool = shmbox::Pool::open(name);
  REQUIRE(pool);
  const std::size_t table = shmbox::detail::kPoolStateOffset + offsetof(shmbox::detail::pool_state, journal_valid);
  for (int round = 0; round < 200; ++round) {
    // Scribble a few words anywhere after the header (state, journal, clients, members).
    for (int k = 0; k < 8; ++k) {
      const std::size_t off = table + (rng() % ((raw.size - table) / 8)) * 8;
      std::uint64_t v = rng();
      if (rng() % 2 != 0) v &= 0xFFFF;  // small values hit the states and indexes
      std::memcpy(raw.base + off, &v, sizeof v);
    }
    if (rng() % 4 == 0) raw.state()->lock = 0;  // sometimes let the table go
    auto l = pool->take(std::chrono::milliseconds(rng() % 3));
    if (l) (void)l->give_back(rng() % 2 != 0 ? shmbox::outcome::ok : shmbox::outcome::fail);
    const shmbox::lease_token junk{static_cast<std::uint32_t>(rng()), rng(), rng()};
    const auto rs = pool->give_back(junk, shmbox::outcome::ok);
    CHECK((rs == shmbox::return_status::stale || rs == shmbox::return_status::double_return ||
           rs == shmbox::return_status::error));
    // A cull (CU) over forged cull_asked / cull_done words: an answer within
    // max_count, or one of its documented errors; never a hang past its timeout.
    if (round % 10 == 0) {
      const auto before = std::chrono::steady_clock::now();
      auto c = pool->cull(0ms, 20ms);
      CHECK(std::chrono::steady_clock::now() - before < 5s);
      if (c) CHECK(*c <= 4);
      else
        CHECK((c.error() == shmbox::errc::timed_out || c.error() == shmbox::errc::refused ||
               c.error() == shmbox::errc::pool_removed || c.error() == shmbox::errc::pool_clients_full));
    }
    // A reconfigure (RC) over forged live words: ok, or one of its documented errors.
    if (round % 10 == 5) {
      const auto before = std::chrono::steady_clock::now();
      auto r = pool->reconfigure({.init_count = 0, .max_count = static_cast<std::uint32_t>(1 + rng() % 4)}, 20ms);
      CHECK(std::chrono::steady_clock::now() - before < 5s);
      if (!r)
        CHECK((r.error() == shmbox::errc::timed_out || r.error() == shmbox::errc::refused || r.error() == shmbox::errc::pool_removed ||
               r.error() == shmbox::errc::pool_clients_full || r.error() == shmbox::errc::invalid_argument));
    }
    // (Garbage in `removing` makes the supervisor remove the pool: not found is fine then.)
    auto info = shmbox::inspect_pool(name);
    CHECK((info || info.error() == shmbox::errc::not_found));
  }
}
