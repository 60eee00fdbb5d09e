// Ownership across processes: the lease, heirs, give-away, stale owners,
// orphans and failover under load (pobox's ownership suites, each party a
// separate program: shmbox-test-helper serve/produce).
#include <doctest/doctest.h>
#include <poll.h>

#include <chrono>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "checks.hpp"
#include "ownership/lease.hpp"
#include "base/process.hpp"
#include "segment/segment.hpp"
#include "shmbox/shmbox.hpp"
#include "support.hpp"

using namespace std::chrono_literals;
using shmtest::child;
using shmtest::line_starting;

namespace {

std::unique_ptr<child> serve(const std::string& box, std::vector<std::string> extra = {}) {
  std::vector<std::string> argv{shmtest::helper_path(), "serve", box};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return std::make_unique<child>(argv, std::vector<std::string>{}, true);
}

std::unique_ptr<child> produce(const std::string& box, int id, std::uint64_t count, std::vector<std::string> extra = {}) {
  std::vector<std::string> argv{shmtest::helper_path(), "produce", box, std::to_string(id), std::to_string(count),
                                "--no-wait"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return std::make_unique<child>(argv, std::vector<std::string>{}, true);
}

// "owner epoch=2 reason=owner-died from=123 data=x" -> its fields.
std::map<std::string, std::string> owner_line(const std::string& line) {
  std::map<std::string, std::string> f;
  std::istringstream in(line);
  std::string word;
  in >> word;
  if (word != "owner") return f;
  while (in >> word) {
    const auto eq = word.find('=');
    if (eq != std::string::npos) f[word.substr(0, eq)] = word.substr(eq + 1);
  }
  return f;
}


// Messages "m <id> <seq> <redelivered>" printed by a serving process, until "done".
struct received {
  std::vector<std::tuple<std::uint64_t, std::uint64_t, bool>> msgs;
  bool done = false;
};
received collect(child& c, std::chrono::milliseconds timeout = 60s) {
  received r;
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < until) {
    auto l = c.read_line(std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now()));
    if (!l) break;
    std::istringstream in(*l);
    std::string tag;
    in >> tag;
    if (tag == "m") {
      std::uint64_t id = 0, seq = 0;
      int again = 0;
      if (in >> id >> seq >> again) r.msgs.emplace_back(id, seq, again != 0);
    } else if (tag == "done") {
      r.done = true;
      break;
    }
  }
  return r;
}

// After a transfer the box is passive. (That no wake-up of the previous owner
// is left armed is checked in-process right after a takeover, below: a
// serving child may legitimately be asleep with its own bit armed.)
void check_clean_transfer(const std::string& box) {
  auto m = shmbox::detail::open_segment(box, true);
  REQUIRE(m);
  CHECK(shmbox::detail::state_mode((*m)->owner()->state.load()) == shmbox::detail::owner_state::passive);
}

std::vector<shmbox::detail::heir_view> heirs_of(const std::string& box) {
  auto m = shmbox::detail::open_segment(box, true);
  REQUIRE(m);
  return shmbox::detail::list_heirs(**m, false);
}

}  // namespace

TEST_CASE("owner killed with kill -9: its heir takes over at once, messages intact") {
  shmtest::segment_guard g(shmtest::unique_name("heir"));
  REQUIRE(shmbox::Box::create(g.name, {.capacity = 64, .slot_size = 64}));
  auto owner = serve(g.name, {"--idle-ms", "60000"});
  REQUIRE(line_starting(*owner, "owner").find("reason=none") != std::string::npos);
  auto heir = serve(g.name, {"--heir", "--data", "hello", "--idle-ms", "500"});
  REQUIRE(line_starting(*heir, "enlisted") == "enlisted 0");
  // Messages the owner has not received yet stay in the box for the heir.
  owner->kill(SIGSTOP);
  auto p = produce(g.name, 1, 10);
  CHECK(shmtest::exited_with(p->wait(30s), 0));
  owner->kill(SIGKILL);
  owner->wait();
  const auto f = owner_line(line_starting(*heir, "owner"));
  CHECK(f.at("epoch") == "2");
  CHECK(f.at("reason") == "owner-died");
  CHECK(f.at("from") == std::to_string(owner->pid()));
  CHECK(f.at("data") == "hello");
  const received r = collect(*heir);
  CHECK(r.done);
  REQUIRE(r.msgs.size() == 10);
  for (std::size_t i = 0; i < r.msgs.size(); ++i) CHECK(std::get<1>(r.msgs[i]) == i);
  CHECK(heirs_of(g.name).empty());  // the heir that inherited left the table
  check_clean_transfer(g.name);
}

TEST_CASE("several heirs: the first live one in table order wins; a dead first heir is skipped") {
  shmtest::segment_guard g(shmtest::unique_name("heirs"));
  REQUIRE(shmbox::Box::create(g.name, {.capacity = 64, .slot_size = 64}));
  auto owner = serve(g.name, {"--idle-ms", "60000"});
  REQUIRE(!line_starting(*owner, "owner").empty());
  auto h1 = serve(g.name, {"--heir", "--data", "one", "--idle-ms", "300"});
  REQUIRE(line_starting(*h1, "enlisted") == "enlisted 0");
  auto h2 = serve(g.name, {"--heir", "--data", "two", "--idle-ms", "300"});
  REQUIRE(line_starting(*h2, "enlisted") == "enlisted 1");
  auto h3 = serve(g.name, {"--heir", "--data", "three", "--idle-ms", "60000"});
  REQUIRE(line_starting(*h3, "enlisted") == "enlisted 2");
  h1->kill(SIGKILL);  // the first heir dies before the owner
  h1->wait();
  owner->kill(SIGKILL);
  owner->wait();
  const auto f = owner_line(line_starting(*h2, "owner"));
  CHECK(f.at("data") == "two");
  CHECK(f.at("reason") == "owner-died");
  CHECK(f.at("epoch") == "2");
  // h3 is still waiting, now behind h2; the dead h1 was removed.
  const auto table = heirs_of(g.name);
  REQUIRE(table.size() == 1);
  CHECK(table[0].data == "three");
  CHECK(shmbox::detail::key_pid(table[0].key) == static_cast<std::uint32_t>(h3->pid()));
  // When h2 exits normally, h3 takes over (pobox's monitor mode).
  CHECK(line_starting(*h2, "done").rfind("done", 0) == 0);
  CHECK(shmtest::exited_with(h2->wait(30s), 0));
  const auto f3 = owner_line(line_starting(*h3, "owner"));
  CHECK(f3.at("data") == "three");
  CHECK(f3.at("from") == std::to_string(h2->pid()));
  CHECK(f3.at("epoch") == "3");
  check_clean_transfer(g.name);
}

TEST_CASE("owner exits normally with an heir registered: the heir takes over (monitor mode)") {
  shmtest::segment_guard g(shmtest::unique_name("monitor"));
  REQUIRE(shmbox::Box::create(g.name, {.capacity = 64, .slot_size = 64}));
  auto owner = serve(g.name, {"--max", "3", "--idle-ms", "60000"});  // takes 3 messages, then exits normally
  REQUIRE(line_starting(*owner, "owner").find("reason=none") != std::string::npos);
  auto heir = serve(g.name, {"--heir", "--data", "next", "--idle-ms", "500"});
  REQUIRE(line_starting(*heir, "enlisted") == "enlisted 0");
  auto p = produce(g.name, 1, 5);
  CHECK(shmtest::exited_with(p->wait(30s), 0));
  CHECK(shmtest::exited_with(owner->wait(30s), 0));
  const auto f = owner_line(line_starting(*heir, "owner"));
  CHECK(f.at("reason") == "owner-died");
  CHECK(f.at("data") == "next");
  CHECK(f.at("from") == std::to_string(owner->pid()));
  CHECK(f.at("epoch") == "2");
  const received r = collect(*heir);
  REQUIRE(r.msgs.size() == 2);  // the two the first owner left
  CHECK(std::get<1>(r.msgs[0]) == 3);
  CHECK(std::get<1>(r.msgs[1]) == 4);
  check_clean_transfer(g.name);
}

TEST_CASE("give_away to a live process, with and without data; the heir table is unchanged") {
  for (const std::string gift : {"", "a-gift"}) {
    CAPTURE(gift);
    shmtest::segment_guard g(shmtest::unique_name("give"));
    REQUIRE(shmbox::Box::create(g.name, {.capacity = 64, .slot_size = 64}));
    auto dest = serve(g.name, {"--listen", "--idle-ms", "60000"});  // a listener does not inherit
    REQUIRE(line_starting(*dest, "enlisted") == "enlisted 0");
    auto giver = serve(g.name, {"--give-to", std::to_string(dest->pid()), "--give-data", gift, "--give-when-told"});
    REQUIRE(line_starting(*giver, "owner").find("epoch=1") != std::string::npos);
    auto heir = serve(g.name, {"--heir", "--data", "original", "--idle-ms", "60000"});
    REQUIRE(line_starting(*heir, "enlisted") == "enlisted 0");
    giver->write_stdin("go\n");
    CHECK(line_starting(*giver, "gave") == "gave 1");
    const auto f = owner_line(line_starting(*dest, "owner"));
    CHECK(f.at("reason") == "give-away");
    CHECK(f.at("data") == gift);
    CHECK(f.at("from") == std::to_string(giver->pid()));
    CHECK(f.at("epoch") == "2");
    check_clean_transfer(g.name);
    giver->close_stdin();
    CHECK(line_starting(*giver, "after") == "after not-owner");  // the giver is no longer the owner
    const auto table = heirs_of(g.name);
    REQUIRE(table.size() == 1);  // unchanged by the give-away
    CHECK(table[0].data == "original");
    // A later owner death goes to the original heir.
    dest->kill(SIGKILL);
    dest->wait();
    const auto fh = owner_line(line_starting(*heir, "owner"));
    CHECK(fh.at("reason") == "owner-died");
    CHECK(fh.at("data") == "original");
    CHECK(fh.at("from") == std::to_string(dest->pid()));
    CHECK(fh.at("epoch") == "3");
  }
}

TEST_CASE("give_away returns false and changes nothing: dest dead, dest the owner, not listening, caller not the owner") {
  shmtest::segment_guard g(shmtest::unique_name("givefalse"));
  auto box = shmbox::Box::create(g.name, {.capacity = 64, .slot_size = 64});
  REQUIRE(box);
  auto owner = shmbox::Owner::acquire(*box);
  REQUIRE(owner);
  auto gone = produce(g.name, 1, 0);  // a process that has exited: its pid is dead
  CHECK(shmtest::exited_with(gone->wait(30s), 0));
  CHECK_FALSE(owner->give_away(static_cast<std::uint32_t>(gone->pid()), "x", 1s));
  CHECK_FALSE(owner->give_away(static_cast<std::uint32_t>(::getpid()), "x", 1s));
  shmtest::child idle({"/bin/sleep", "30"});  // alive, but not waiting for the box
  CHECK_FALSE(owner->give_away(static_cast<std::uint32_t>(idle.pid()), "x", 200ms));
  CHECK(owner->epoch() == 1);
  CHECK(shmbox::info(*box).owner.epoch == 1);  // nothing changed
  auto p = produce(g.name, 1, 1);
  CHECK(shmtest::exited_with(p->wait(30s), 0));
  shmbox::message m;
  CHECK(owner->try_receive(m) == shmbox::recv_status::ok);  // still the owner
  auto dest = serve(g.name, {"--listen", "--idle-ms", "60000"});
  REQUIRE(line_starting(*dest, "enlisted") == "enlisted 0");
  CHECK(owner->give_away(static_cast<std::uint32_t>(dest->pid()), "", 10s));
  CHECK(line_starting(*dest, "owner").find("reason=give-away") != std::string::npos);
  // Now this handle is not the owner: giving away again is false.
  CHECK_FALSE(owner->give_away(static_cast<std::uint32_t>(dest->pid()), "", 200ms));
  CHECK(owner->try_receive(m) == shmbox::recv_status::not_owner);
}

TEST_CASE("stale owner: stopped past its lease deadline, its heir takes over; after SIGCONT it gets not_owner") {
  shmtest::segment_guard g(shmtest::unique_name("lease"));
  REQUIRE(shmbox::Box::create(g.name, {.capacity = 64, .slot_size = 64, .lease = 200ms}));
  auto owner = serve(g.name, {"--idle-ms", "60000"});
  REQUIRE(!line_starting(*owner, "owner").empty());
  auto heir = serve(g.name, {"--heir", "--data", "h", "--idle-ms", "1000"});
  REQUIRE(line_starting(*heir, "enlisted") == "enlisted 0");
  // A live owner that keeps receiving keeps its lease: no takeover for a while.
  auto early = produce(g.name, 1, 3);
  CHECK(shmtest::exited_with(early->wait(30s), 0));
  const received first = [&] {
    received r;
    for (int i = 0; i < 3; ++i) {
      auto l = owner->read_line(10s);
      if (l && l->rfind("m ", 0) == 0) r.msgs.emplace_back(1, 0, false);
    }
    return r;
  }();
  CHECK(first.msgs.size() == 3);
  owner->kill(SIGSTOP);
  const auto f = owner_line(line_starting(*heir, "owner", 30s));
  CHECK(f.at("reason") == "lease-expired");
  CHECK(f.at("from") == std::to_string(owner->pid()));
  auto later = produce(g.name, 2, 5);
  CHECK(shmtest::exited_with(later->wait(30s), 0));
  owner->kill(SIGCONT);
  CHECK(line_starting(*owner, "not-owner", 30s) == "not-owner");  // never a message after losing the lease
  const received r = collect(*heir);
  REQUIRE(r.msgs.size() == 5);  // every one of them went to the heir
  for (std::size_t i = 0; i < r.msgs.size(); ++i) CHECK(std::get<1>(r.msgs[i]) == i);
  auto box = shmbox::Box::inspect(g.name);
  shmtest::check_invariant(*box);
}

TEST_CASE("orphan: the owner dies with no heir; posts go on; a new process claims the box and gets everything") {
  shmtest::segment_guard g(shmtest::unique_name("orphan"));
  REQUIRE(shmbox::Box::create(g.name, {.capacity = 256, .slot_size = 64}));
  auto owner = serve(g.name, {"--idle-ms", "60000"});
  REQUIRE(!line_starting(*owner, "owner").empty());
  owner->kill(SIGKILL);
  owner->wait();
  auto box = shmbox::Box::inspect(g.name);
  CHECK_FALSE(shmbox::info(*box).owner.alive);
  auto p = produce(g.name, 1, 100);
  CHECK(shmtest::exited_with(p->wait(30s), 0));
  CHECK(shmbox::info(*box).depth == 100);
  auto claimer = serve(g.name, {"--idle-ms", "300"});
  const auto f = owner_line(line_starting(*claimer, "owner"));
  CHECK(f.at("reason") == "owner-died");
  CHECK(f.at("from") == std::to_string(owner->pid()));
  const received r = collect(*claimer);
  REQUIRE(r.msgs.size() == 100);
  for (std::size_t i = 0; i < r.msgs.size(); ++i) CHECK(std::get<1>(r.msgs[i]) == i);
  check_clean_transfer(g.name);
}

TEST_CASE("an heir's fd becomes readable the moment the owner dies (poll, no timeout needed)") {
  shmtest::segment_guard g(shmtest::unique_name("heirfd"));
  REQUIRE(shmbox::Box::create(g.name, {.capacity = 16, .slot_size = 64}));
  auto owner = serve(g.name, {"--idle-ms", "60000"});
  REQUIRE(!line_starting(*owner, "owner").empty());
  auto heir = shmbox::Heir::enlist(g.name, "in-process");
  REQUIRE(heir);
  CHECK(heir->position() == 0);
  auto none = heir->await_transfer(0ns);
  CHECK(none.error() == shmbox::errc::timed_out);
  pollfd pfd{heir->fd(), POLLIN, 0};
  CHECK(::poll(&pfd, 1, 0) == 0);  // nothing yet
  // The owner is asleep in receive, its sleeping bit armed in the tail.
  auto seg = shmbox::detail::open_segment(g.name, true);
  const auto until = std::chrono::steady_clock::now() + 30s;
  while (((*seg)->lanes[0].hdr->tail.load() & 1) == 0 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(1ms);
  REQUIRE(((*seg)->lanes[0].hdr->tail.load() & 1) == 1);
  owner->kill(SIGKILL);
  CHECK(::poll(&pfd, 1, 30'000) == 1);  // readable: the owner died
  owner->wait();
  const auto wakes = (*seg)->owner()->wake_calls.load();
  auto mine = heir->await_transfer(0ns);
  REQUIRE(mine);
  // No stray wake-up: the dead owner's bit is cleared, so posts make no wake call.
  CHECK(((*seg)->lanes[0].hdr->tail.load() & 1) == 0);
  auto p = produce(g.name, 1, 3);
  CHECK(shmtest::exited_with(p->wait(30s), 0));
  CHECK((*seg)->owner()->wake_calls.load() == wakes);
  check_clean_transfer(g.name);
  CHECK(mine->transfer().reason == shmbox::transfer_reason::owner_died);
  CHECK(mine->transfer().data == "in-process");
  CHECK(mine->transfer().from_pid == static_cast<std::uint32_t>(owner->pid()));
}

TEST_CASE("a waiting heir and an idle owner use no CPU (they sleep: epoll on a pidfd, futex)") {
  shmtest::segment_guard g(shmtest::unique_name("idlecpu"));
  REQUIRE(shmbox::Box::create(g.name, {.capacity = 16, .slot_size = 64}));
  auto owner = serve(g.name, {"--idle-ms", "60000"});
  REQUIRE(!line_starting(*owner, "owner").empty());
  auto heir = serve(g.name, {"--heir", "--idle-ms", "60000"});
  REQUIRE(line_starting(*heir, "enlisted") == "enlisted 0");
  const long owner_before = shmtest::cpu_ticks(owner->pid()), heir_before = shmtest::cpu_ticks(heir->pid());
  std::this_thread::sleep_for(1s);  // measuring idleness over a second: not synchronisation
  const long owner_used = shmtest::cpu_ticks(owner->pid()) - owner_before;
  const long heir_used = shmtest::cpu_ticks(heir->pid()) - heir_before;
  MESSAGE("CPU over 1 s idle, in 1/100 s ticks: owner " << owner_used << ", heir " << heir_used);
  CHECK(owner_used <= 2);  // a busy loop would be ~100
  CHECK(heir_used <= 2);
}

TEST_CASE("heir table: at least 8 heirs in registration order, data up to 64 bytes, withdrawal") {
  shmtest::segment_guard g(shmtest::unique_name("table"));
  REQUIRE(shmbox::Box::create(g.name, {.capacity = 16, .slot_size = 64}));
  auto owner = serve(g.name, {"--idle-ms", "60000"});  // another process owns it: the heirs wait
  REQUIRE(!line_starting(*owner, "owner").empty());
  std::vector<shmbox::Heir> heirs;
  for (int i = 0; i < 8; ++i) {
    auto h = shmbox::Heir::enlist(g.name, std::string(static_cast<std::size_t>(i * 8), static_cast<char>('a' + i)));
    REQUIRE(h);
    CHECK(h->position() == static_cast<std::uint32_t>(i));
    heirs.push_back(std::move(*h));
  }
  CHECK(shmbox::Heir::enlist(g.name, std::string(65, 'x')).error() == shmbox::errc::invalid_argument);
  auto table = heirs_of(g.name);
  REQUIRE(table.size() == 8);
  for (std::size_t i = 0; i < table.size(); ++i) CHECK(table[i].data == std::string(i * 8, static_cast<char>('a' + i)));
  heirs.erase(heirs.begin() + 2);  // withdraw the third
  CHECK(heirs_of(g.name).size() == 7);
  CHECK(heirs[2].position() == 2);  // the fourth moved up
}

TEST_CASE("failover under load: 4 producers, the owner killed 20 times mid-batch, heirs waiting: nothing lost") {
  shmtest::segment_guard g(shmtest::unique_name("failover"));
  REQUIRE(shmbox::Box::create(g.name, {.capacity = 256, .slot_size = 64, .overflow = shmbox::policy::block,
                                       .block_timeout = 60s}));
  constexpr std::uint64_t kPer = 20'000;
  std::mt19937 rng(7);
  std::vector<std::unique_ptr<child>> owners;  // every process that owned the box, in order
  auto current = serve(g.name, {"--two-phase", "--batch", "32", "--idle-ms", "60000"});
  REQUIRE(!line_starting(*current, "owner").empty());
  auto next = serve(g.name, {"--heir", "--two-phase", "--batch", "32", "--idle-ms", "60000"});
  REQUIRE(line_starting(*next, "enlisted") == "enlisted 0");
  std::vector<std::unique_ptr<child>> producers;
  for (int id = 0; id < 4; ++id) producers.push_back(produce(g.name, id, kPer));
  std::map<std::uint64_t, std::map<std::uint64_t, int>> seen;  // id -> seq -> times
  std::uint64_t flagged = 0;
  auto note = [&](const std::string& line) {
    std::istringstream in(line);
    std::string tag;
    std::uint64_t id = 0, seq = 0;
    int again = 0;
    if (in >> tag >> id >> seq >> again && tag == "m") {
      ++seen[id][seq];
      flagged += again;
    }
  };
  auto absorb = [&](child& c, std::chrono::milliseconds for_how_long) {
    const auto until = std::chrono::steady_clock::now() + for_how_long;
    while (std::chrono::steady_clock::now() < until) {
      auto l = c.read_line(std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now()));
      if (!l) break;
      note(*l);
    }
  };
  // Everything a dead child wrote (its lines are whole: one write per batch).
  auto absorb_rest = [&](child& c) {
    std::istringstream all(c.read_all(10s));
    for (std::string l; std::getline(all, l);) note(l);
  };
  for (int kill = 0; kill < 20; ++kill) {
    absorb(*current, std::chrono::milliseconds(5 + rng() % 40));  // let it work a random while
    current->kill(SIGKILL);
    current->wait();
    absorb_rest(*current);  // whatever it printed before dying
    REQUIRE(!line_starting(*next, "owner").empty());
    owners.push_back(std::move(current));
    current = std::move(next);
    next = serve(g.name, {"--heir", "--two-phase", "--batch", "32", "--idle-ms", "60000"});
    REQUIRE(line_starting(*next, "enlisted").rfind("enlisted", 0) == 0);
  }
  for (auto& p : producers) CHECK(shmtest::exited_with(p->wait(120s), 0));
  // The last owner drains what is left: stop when it has been idle.
  next->kill(SIGKILL);
  current->close_stdin();
  std::uint64_t total = 0;
  for (int rounds = 0; rounds < 200; ++rounds) {
    absorb(*current, 100ms);
    total = 0;
    for (const auto& [id, seqs] : seen) total += seqs.size();
    if (total == 4 * kPer) break;
  }
  std::uint64_t dups = 0;
  for (std::uint64_t id = 0; id < 4; ++id) {
    CHECK(seen[id].size() == kPer);  // every stored message delivered at least once: none lost
    for (const auto& [seq, times] : seen[id]) dups += static_cast<std::uint64_t>(times - 1);
  }
  CHECK(dups <= flagged);  // every repeat came flagged redelivered
  MESSAGE("20 owner kills under load: " << total << " distinct messages, " << dups << " repeats, " << flagged
                                        << " flagged redelivered");
  current->kill(SIGKILL);
}

// An event-loop heir second in line: when the owner dies, the first heir
// takes the box; the event-loop heir's fd woke for that death, and
// await_transfer(0) says timed_out. Its fd must then watch the NEW owner: not
// stay readable (a dead process's pidfd is readable for ever: an event loop
// would spin), and become readable again when the new owner dies.
TEST_CASE("an event-loop heir second in line: after the first heir took over, its fd watches the new owner") {
  shmtest::segment_guard g(shmtest::unique_name("heirfd2"));
  REQUIRE(shmbox::Box::create(g.name, {.capacity = 16, .slot_size = 64}));
  auto owner = serve(g.name, {"--idle-ms", "60000"});
  REQUIRE(!line_starting(*owner, "owner").empty());
  auto first = serve(g.name, {"--heir", "--data", "first", "--idle-ms", "60000", "--hold"});
  REQUIRE(!line_starting(*first, "enlisted").empty());
  auto heir = shmbox::Heir::enlist(g.name, "second");
  REQUIRE(heir);
  CHECK(heir->position() == 1);
  pollfd pfd{heir->fd(), POLLIN, 0};
  CHECK(::poll(&pfd, 1, 0) == 0);
  owner->kill(SIGKILL);
  owner->wait();
  CHECK(line_starting(*first, "owner").find("reason=owner-died") != std::string::npos);  // the first heir has it
  REQUIRE(::poll(&pfd, 1, 30'000) == 1);  // we woke for the death too
  CHECK(heir->await_transfer(0ns).error() == shmbox::errc::timed_out);
  CHECK(heir->position() == 0);
  CHECK(::poll(&pfd, 1, 200) == 0);  // quiet now: watching the live new owner, not the dead one
  first->kill(SIGKILL);
  first->wait();
  REQUIRE(::poll(&pfd, 1, 30'000) == 1);
  auto mine = heir->await_transfer(0ns);
  REQUIRE(mine);
  CHECK(mine->transfer().reason == shmbox::transfer_reason::owner_died);
}

// A receive while reads are uncommitted (Owner::read, then receive_batch,
// try_receive or deliver before commit): it hands out the messages after
// the held ones, commits only those, and leaves the reads to commit(); the
// same in a lease box (which takes, commits, then hands out) as in any
// other. (Before, a lease box's receive committed the reads too and paired
// its own messages with the held ones by index: read(2) then
// receive_batch(max 1) returned 2 messages, one of them a copy, unflagged;
// more reads than the call took read past its staging: gencheck's
// lease-read-receive.)
TEST_CASE("a receive while reads are uncommitted returns the next messages and leaves the reads to commit(), lease or not") {
  struct kind {
    const char* name;
    shmbox::options opts;
  };
  const kind kinds[] = {{"fifo", {.capacity = 8}},
                        {"fifo, lease", {.capacity = 8, .lease = 30'000ms}},
                        {"drop_oldest, lease", {.capacity = 8, .overflow = shmbox::policy::drop_oldest, .lease = 30'000ms}},
                        {"lifo", {.capacity = 8, .overflow = shmbox::policy::lifo}},
                        {"lifo, lease", {.capacity = 8, .overflow = shmbox::policy::lifo, .lease = 30'000ms}}};
  for (const kind& k : kinds) {
    const std::string kind_name = k.name;
    CAPTURE(kind_name);
    const bool lifo = k.opts.overflow == shmbox::policy::lifo;
    shmtest::segment_guard g(shmtest::unique_name("readrecv"));
    auto box = shmbox::Box::create(g.name, k.opts);
    REQUIRE(box);
    auto p = shmbox::Producer::attach(*box);
    REQUIRE(p);
    for (const char* m : {"m0", "m1", "m2", "m3", "m4", "m5"}) REQUIRE(p->post(m) == shmbox::post_status::stored);
    // Delivery order: m0 .. m5, or newest first in a lifo lane.
    auto nth = [&](int i) { return "m" + std::to_string(lifo ? 5 - i : i); };
    auto owner = shmbox::Owner::acquire(*box);
    REQUIRE(owner);
    shmbox::batch held;
    REQUIRE(owner->read(held, {.max = 2, .timeout = 0ns}) == shmbox::recv_status::ok);
    REQUIRE(held.size() == 2);
    CHECK(held[0] == nth(0));
    CHECK(held[1] == nth(1));
    std::vector<shmbox::message> got;
    REQUIRE(owner->receive_batch(got, {.max = 1, .timeout = 0ns}) == shmbox::recv_status::ok);
    REQUIRE(got.size() == 1);
    CHECK(got[0].data == nth(2));
    CHECK_FALSE(got[0].redelivered);
    shmbox::message one;
    REQUIRE(owner->try_receive(one) == shmbox::recv_status::ok);
    CHECK(one.data == nth(3));
    CHECK_FALSE(one.redelivered);
    // A filter's delivery (the lease box's staging with drop marks): m4 dropped.
    shmbox::delivery d;
    REQUIRE(owner->deliver(d, 1, [](std::string&) { return shmbox::filter_verdict::drop; }) == shmbox::recv_status::ok);
    CHECK(d.count == 0);
    // The reads are still held: not delivered, still in the depth.
    shmbox::counters c = box->read_counters();
    CHECK(c.delivered == 2);
    CHECK(c.filtered == 1);
    CHECK(shmbox::info(*box).depth == 3);  // the 2 read, and the last one
    shmtest::check_invariant(*box);
    CHECK(owner->commit() == shmbox::recv_status::ok);
    c = box->read_counters();
    CHECK(c.delivered == 4);
    CHECK(c.redelivered == 0);
    got.clear();
    REQUIRE(owner->receive_batch(got, {.max = 8, .timeout = 0ns}) == shmbox::recv_status::ok);
    REQUIRE(got.size() == 1);
    CHECK(got[0].data == nth(5));
    CHECK(box->read_counters().delivered == 5);
    CHECK(shmbox::info(*box).depth == 0);
    shmtest::check_invariant(*box);
  }
}

// An heir that took the box over keeps its Heir handle (enlist, await_transfer,
// then serve, as `shmbox recv --heir` does; or it took the box with
// Owner::acquire while its Heir handle waited). Its heir entry was withdrawn
// at the takeover; the liveness lock of that entry's byte must not speak for
// anyone else: a later heir that enlists and dies must read as dead, and the
// live heirs behind it must take the box when the owner hangs past its
// lease. (Before, the Heir handle kept the byte locked and a new heir could
// enlist in the entry: a dead heir there read as alive for as long as the
// owner lived, and a hung owner was never replaced: gencheck's
// heir-entry-lock.)
TEST_CASE("an heir that took over keeps its Heir handle: a later heir in its old entry dies as dead, and the next heir takes a hung owner's box") {
  for (const bool by_acquire : {false, true}) {
    CAPTURE(by_acquire);
    shmtest::segment_guard g(shmtest::unique_name("heirlock"));
    REQUIRE(shmbox::Box::create(g.name, {.capacity = 16, .slot_size = 64, .lease = 1000ms}));
    auto box = shmbox::Box::inspect(g.name);
    REQUIRE(box);
    auto first = serve(g.name, {"--idle-ms", "60000"});
    REQUIRE(!line_starting(*first, "owner").empty());
    auto x = shmbox::Heir::enlist(g.name, "x");  // this process: X
    REQUIRE(x);
    first->kill(SIGKILL);
    first->wait();
    auto owner = by_acquire ? shmbox::Owner::acquire(g.name) : x->await_transfer(10s);
    REQUIRE(owner);
    CHECK(owner->transfer().reason == shmbox::transfer_reason::owner_died);
    // Heir A enlists and is killed while it waits; X keeps renewing meanwhile.
    owner->renew();
    auto a = serve(g.name, {"--heir", "--data", "a", "--idle-ms", "60000"});
    REQUIRE(line_starting(*a, "enlisted").rfind("enlisted", 0) == 0);
    a->kill(SIGKILL);
    a->wait();
    owner->renew();
    for (const shmbox::heir_info& h : shmbox::info(*box).heirs) {
      CAPTURE(h.entry);
      CHECK(h.pid != static_cast<std::uint32_t>(::getpid()));  // X's entry is withdrawn
      if (h.pid == static_cast<std::uint32_t>(a->pid())) CHECK_FALSE(h.alive);
    }
    // Heir B enlists; X hangs (receives and renews no more): B takes the box
    // once X's lease has run out.
    auto b = serve(g.name, {"--heir", "--data", "b", "--idle-ms", "300"});
    REQUIRE(line_starting(*b, "enlisted").rfind("enlisted", 0) == 0);
    const auto f = owner_line(line_starting(*b, "owner", 10s));
    REQUIRE(f.count("reason") == 1);
    CHECK(f.at("reason") == "lease-expired");
    CHECK(f.at("from") == std::to_string(::getpid()));
    shmbox::message m;
    CHECK(owner->try_receive(m) == shmbox::recv_status::not_owner);
  }
}
