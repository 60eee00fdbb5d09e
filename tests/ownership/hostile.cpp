// Hostile segments: another process writes over a box while it is in use.
// The owner, the producers and the CLI must never crash (also under ASan and
// UBSan), never hang past their timeouts, and report corruption as an error;
// `shmbox verify` must name each kind of damage. And `shmbox gc` removes only
// boxes nobody uses.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "checks.hpp"
#include "segment/layout.hpp"
#include "shmbox/shmbox.hpp"
#include "support.hpp"

using namespace std::chrono_literals;
using shmbox::policy;
using shmtest::child;

namespace {

// The segment mapped raw, to damage it on purpose.
struct raw_segment {
  unsigned char* base = nullptr;
  std::size_t size = 0;
  explicit raw_segment(const std::string& name) {
    const int fd = ::shm_open(("/shmbox." + name).c_str(), O_RDWR, 0);
    struct stat st {};
    REQUIRE(fd >= 0);
    REQUIRE(::fstat(fd, &st) == 0);
    size = static_cast<std::size_t>(st.st_size);
    base = static_cast<unsigned char*>(::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
    ::close(fd);
    REQUIRE(base != MAP_FAILED);
  }
  ~raw_segment() { ::munmap(base, size); }
  struct geometry {
    std::uint64_t owner_offset, heirs_offset, lanes_offset, producers_offset, actors_offset;
    std::uint32_t producer_stride, slot_stride;
  };
  template <class T>
  T get(std::uint64_t offset) const {
    T v{};
    std::memcpy(&v, base + offset, sizeof v);
    return v;
  }
  geometry header() const {
    using H = shmbox::detail::segment_header;
    return {get<std::uint64_t>(offsetof(H, owner_offset)),     get<std::uint64_t>(offsetof(H, heirs_offset)),
            get<std::uint64_t>(offsetof(H, lanes_offset)),     get<std::uint64_t>(offsetof(H, producers_offset)),
            get<std::uint64_t>(offsetof(H, actors_offset)),
            get<std::uint32_t>(offsetof(H, producer_stride)),  get<std::uint32_t>(offsetof(H, slot_stride))};
  }
  template <class T>
  void put(std::uint64_t offset, T value) {
    REQUIRE(offset + sizeof value <= size);
    std::memcpy(base + offset, &value, sizeof value);
  }
  std::uint64_t slot(std::uint32_t i) const {  // offset of slot i of lane 0
    const auto h = header();
    const auto slots = get<std::uint64_t>(h.lanes_offset + offsetof(shmbox::detail::lane_header, slots_offset));
    return slots + std::uint64_t{i} * h.slot_stride;
  }
};

bool mentions(const shmbox::verify_report& r, const std::string& what) {
  for (const auto& p : r.problems)
    if (p.find(what) != std::string::npos) return true;
  return false;
}

std::string problems_of(const shmbox::verify_report& r) {
  std::string all;
  for (const auto& p : r.problems) all += p + "; ";
  return all;
}

}  // namespace

TEST_CASE("verify: a healthy box (idle, or in use by an owner and a producer) is ok") {
  shmtest::segment_guard g(shmtest::unique_name("vok"));
  auto box = shmbox::Box::create(g.name, {.capacity = 16, .slot_size = 32, .lanes = {{}, {.capacity = 8, .overflow = policy::lifo}}});
  REQUIRE(box);
  auto r = shmbox::verify(g.name);
  REQUIRE(r);
  CHECK(r->ok);
  CHECK(r->slots == 24);
  auto p = shmbox::Producer::attach(*box);
  auto o = shmbox::Owner::acquire(*box);
  REQUIRE(p);
  REQUIRE(o);
  for (int i = 0; i < 40; ++i) (void)p->post(shmtest::cat("m", std::to_string(i)), {.lane = static_cast<std::uint32_t>(i % 2)});
  shmbox::message m;
  CHECK(o->try_receive(m) == shmbox::recv_status::ok);
  r = shmbox::verify(g.name);
  REQUIRE(r);
  CAPTURE(problems_of(*r));
  CHECK(r->ok);
  CHECK(r->producers == 1);
  const auto cli = shmtest::run({shmtest::cli_path(), "verify", g.name});
  CHECK(cli.code == 0);
  CHECK(cli.out.find("ok") != std::string::npos);
}

TEST_CASE("verify: each kind of damage is named, exit 1; the owner and the CLI report it instead of crashing") {
  using shmbox::detail::make_seq;
  using shmbox::detail::slot_state;
  struct damage {
    const char* what;     // the words verify must use
    std::function<void(raw_segment&)> apply;
  };
  const damage cases[] = {
      {"wrong magic", [](raw_segment& s) { s.put<std::uint64_t>(0, 0x1234); }},
      {"layout version", [](raw_segment& s) { s.put<std::uint32_t>(8, 99); }},
      {"geometry", [](raw_segment& s) { s.put<std::uint32_t>(offsetof(shmbox::detail::segment_header, lane_count), 9); }},
      {"does not exist in a FIFO lane", [](raw_segment& s) { s.put<std::uint64_t>(s.slot(3), make_seq(3, slot_state::writing, 1)); }},
      {"exceeds the slot size", [](raw_segment& s) { s.put<std::uint32_t>(s.slot(1) + 8, 1u << 30); }},
      {"belongs to slot", [](raw_segment& s) { s.put<std::uint64_t>(s.slot(2), make_seq(1, slot_state::full, 1)); }},
      {"too far from the tail", [](raw_segment& s) { s.put<std::uint64_t>(s.slot(2), make_seq(1'000'002, slot_state::full, 1)); }},
      {"cannot hold a slot", [](raw_segment& s) { s.put<std::uint64_t>(s.slot(0), make_seq(0, slot_state::full, 4000)); }},
      {"past the tail", [](raw_segment& s) {
         s.put<std::uint64_t>(s.header().lanes_offset + offsetof(shmbox::detail::lane_header, head), 1000);
       }},
      {"mode 3 is not", [](raw_segment& s) { s.put<std::uint32_t>(s.header().owner_offset + offsetof(shmbox::detail::owner_record, state), 7); }},
      {"transfer reason", [](raw_segment& s) { s.put<std::uint32_t>(s.header().owner_offset + offsetof(shmbox::detail::owner_record, tr_reason), 77); }},
      {"heir entry 0: data length", [](raw_segment& s) {
         const auto h = s.header().heirs_offset;
         s.put<std::uint64_t>(h + offsetof(shmbox::detail::heir_entry, key), (1ull << 22) | 1);
         s.put<std::uint32_t>(h + offsetof(shmbox::detail::heir_entry, data_len), 5000);
       }},
      {"producer entry 2: pending op", [](raw_segment& s) {
         const auto h = s.header();
         s.put<std::uint64_t>(h.producers_offset + 2ull * h.producer_stride + offsetof(shmbox::detail::producer_entry, op),
                              shmbox::detail::make_op(shmbox::detail::op_kind::claim, 7, 0));
       }},
      {"counters: posted", [](raw_segment& s) {  // owner actor 3 claims 5 deliveries that never happened
         s.put<std::uint64_t>(s.header().actors_offset + 3 * 2 * 64 + 64 + offsetof(shmbox::detail::owner_lane_counters, delivered), 5);
       }},
  };
  for (const damage& d : cases) {
    CAPTURE(std::string(d.what));
    shmtest::segment_guard g(shmtest::unique_name("vbad"));
    {
      auto box = shmbox::Box::create(g.name, {.capacity = 8, .slot_size = 32});
      REQUIRE(box);
      auto p = shmbox::Producer::attach(*box);
      REQUIRE(p);
      for (int i = 0; i < 3; ++i) CHECK(p->post("hello") == shmbox::post_status::stored);
    }
    {
      raw_segment s(g.name);
      d.apply(s);
    }
    auto r = shmbox::verify(g.name);
    REQUIRE(r);
    CAPTURE(problems_of(*r));
    CHECK_FALSE(r->ok);
    CHECK(mentions(*r, d.what));
    const auto cli = shmtest::run({shmtest::cli_path(), "verify", g.name, "--json"});
    CHECK(cli.code == 1);
    CHECK(cli.out.find("\"ok\": false") != std::string::npos);
    // The other commands and an owner say it is broken, or carry on where it
    // is not; none crashes or hangs.
    for (const char* cmd : {"stat", "ls", "heirs"}) {
      const auto c = std::string(cmd) == "ls" ? shmtest::run({shmtest::cli_path(), cmd}, {}, 20s)
                                              : shmtest::run({shmtest::cli_path(), cmd, g.name}, {}, 20s);
      CAPTURE(std::string(cmd));
      CHECK((c.code == 0 || c.code == 1));
    }
    const auto recv = shmtest::run({shmtest::cli_path(), "recv", g.name, "--all", "--timeout", "100"}, {}, 20s);
    CHECK((recv.code == 0 || recv.code == 1 || recv.code == 3));
  }
}

TEST_CASE("hostile segment: random bytes over each region while an owner receives and producers post") {
  const char* const regions[] = {"header", "owner", "heirs", "lanes", "producers", "ring", "all"};
  const policy pols[] = {policy::block, policy::drop_oldest, policy::lifo};
  int run_no = 0, reported = 0, posted_some = 0;
  for (const char* region : regions) {
    for (const policy pol : pols) {
      const std::string where = region;
      CAPTURE(where);
      CAPTURE(shmbox::to_string(pol));
      shmtest::segment_guard g(shmtest::unique_name("hostile"));
      REQUIRE(shmbox::Box::create(g.name, {.capacity = 64, .slot_size = 64, .overflow = pol, .block_timeout = 50ms,
                                           .lanes = {{}, {.capacity = 32}}}));
      child owner({shmtest::helper_path(), "serve", g.name, "--idle-ms", "300"});
      REQUIRE(owner.read_line().value_or("").rfind("owner", 0) == 0);
      // Producers trickle for about as long as the scribbler writes.
      // Each post may wait 50 ms (block timeout); one that takes over 2 s is a hang.
      const std::vector<std::string> limits{"--no-wait", "--pause-us", "50", "--max-call-ms", "2050", "--stop-on-timeout"};
      auto producer = [&](const char* id, const char* lane) {
        std::vector<std::string> argv{shmtest::helper_path(), "produce", g.name, id, "5000", "--lane", lane};
        argv.insert(argv.end(), limits.begin(), limits.end());
        return std::make_unique<child>(argv);
      };
      auto p1 = producer("1", "0");
      auto p2 = producer("2", "1");
      child scribbler({shmtest::helper_path(), "scribble", g.name, region, std::to_string(1000 + run_no++), "3000", "100"});
      // While it scribbles, operators look at the box.
      for (int i = 0; i < 3; ++i)
        for (const char* cmd : {"verify", "stat", "ls"}) {
          const auto c = std::string(cmd) == "ls" ? shmtest::run({shmtest::cli_path(), cmd}, {}, 20s)
                                                  : shmtest::run({shmtest::cli_path(), cmd, g.name}, {}, 20s);
          CAPTURE(std::string(cmd));
          CAPTURE(c.err);
          CHECK((c.code == 0 || c.code == 1));  // never a signal, never a timeout
        }
      CHECK(shmtest::exited_with(scribbler.wait(60s), 0));
      // Everyone finishes within its timeouts: exit 0, or 1 with a reason.
      for (child* c : {&owner, p1.get(), p2.get()}) {
        const std::string out = c->read_all(60s);
        const int st = c->wait(60s);
        CAPTURE(out);
        CHECK_FALSE(c->timed_out());
        CHECK(WIFEXITED(st));
        CHECK((WEXITSTATUS(st) == 0 || WEXITSTATUS(st) == 1));
        if (WIFEXITED(st) && WEXITSTATUS(st) == 1) {
          CHECK(out.find("error") != std::string::npos);  // a reason, not a crash
          ++reported;
        }
        if (c != &owner && out.find("done stored=0 evicted=0") == std::string::npos) ++posted_some;
      }
      const auto v = shmtest::run({shmtest::cli_path(), "verify", g.name}, {}, 20s);
      CHECK((v.code == 0 || v.code == 1));
    }
  }
  // Not vacuous: producers did post while the bytes flew, and the damage
  // was met and reported (not only survived).
  CHECK(posted_some > 0);
  CHECK(reported > 0);
  MESSAGE("processes that reported corruption: " << reported << "; producers that stored messages: " << posted_some);
}

TEST_CASE("gc: removes only boxes nobody uses, and non-empty ones only when asked") {
  // A prefix of our own: gc must not touch boxes of other tests running now.
  const std::string prefix = shmtest::unique_name("gc") + "-";
  shmtest::segment_guard idle(prefix + "idle");          // nobody, empty: collected
  shmtest::segment_guard full(prefix + "full");          // nobody, 2 messages: only with include_nonempty
  shmtest::segment_guard owned(prefix + "owned");        // a live owner: never
  shmtest::segment_guard dead(prefix + "dead");          // its owner was killed: collected
  shmtest::segment_guard mapped(prefix + "mapped");      // only opened (mapped) by a live process: never
  shmtest::segment_guard listened(prefix + "listened");  // a live listener waits for it: never
  for (const auto* g : {&idle, &full, &owned, &dead, &mapped, &listened}) REQUIRE(shmbox::Box::create(g->name, {.capacity = 8}));
  {
    auto p = shmbox::Producer::attach(full.name);
    REQUIRE(p);
    CHECK(p->post("a") == shmbox::post_status::stored);
    CHECK(p->post("b") == shmbox::post_status::stored);
  }
  child owner({shmtest::helper_path(), "own", owned.name}, {}, true);
  REQUIRE(owner.read_line().value_or("").rfind("owned", 0) == 0);
  {
    child victim({shmtest::helper_path(), "own", dead.name}, {}, true);
    REQUIRE(victim.read_line().value_or("").rfind("owned", 0) == 0);
    victim.kill(SIGKILL);
    victim.wait(10s);
  }
  child opener({shmtest::helper_path(), "map", mapped.name}, {}, true);
  REQUIRE(opener.read_line().value_or("") == "mapped");
  child listener({shmtest::helper_path(), "serve", listened.name, "--listen"}, {}, true);
  REQUIRE(listener.read_line().value_or("").rfind("enlisted", 0) == 0);

  auto names_of = [](const std::vector<shmbox::collected_box>& v) {
    std::vector<std::string> n;
    for (const auto& c : v) n.push_back(c.name);
    return n;
  };
  auto has = [](const std::vector<std::string>& v, const std::string& n) { return std::find(v.begin(), v.end(), n) != v.end(); };
  auto dry = shmbox::collect({.dry_run = true, .prefix = prefix});
  REQUIRE(dry);
  auto n = names_of(*dry);
  CHECK(n.size() == 2);
  CHECK(has(n, idle.name));
  CHECK(has(n, dead.name));
  CHECK(shmbox::Box::inspect(idle.name));  // a dry run removes nothing

  const auto cli = shmtest::run({shmtest::cli_path(), "gc", "--prefix", prefix});
  CHECK(cli.code == 0);
  CHECK(cli.out.find("removed " + idle.name) != std::string::npos);
  CHECK_FALSE(shmbox::Box::inspect(idle.name));
  CHECK_FALSE(shmbox::Box::inspect(dead.name));
  for (const auto* g : {&full, &owned, &mapped, &listened}) CHECK(shmbox::Box::inspect(g->name));

  auto all = shmbox::collect({.include_nonempty = true, .prefix = prefix});
  REQUIRE(all);
  n = names_of(*all);
  CHECK(n == std::vector<std::string>{full.name});
  CHECK_FALSE(shmbox::Box::inspect(full.name));
  for (const auto* g : {&owned, &mapped, &listened}) CHECK(shmbox::Box::inspect(g->name));
  // Once their processes are gone, they go too.
  owner.close_stdin();
  opener.close_stdin();
  CHECK(shmtest::exited_with(owner.wait(10s), 0));
  CHECK(shmtest::exited_with(opener.wait(10s), 0));
  listener.kill(SIGKILL);
  listener.wait(10s);
  auto rest = shmbox::collect({.prefix = prefix});
  REQUIRE(rest);
  CHECK(rest->size() == 3);
}
