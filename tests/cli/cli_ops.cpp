// The operator commands that act on a live box without being its owner:
// `shmbox dump` (read the messages without taking them) and `shmbox
// give-away NAME PID` (ask the owner to hand the box over), driven as a user
// drives them, on boxes in every state: idle, busy with 4 producers and an
// owner, orphaned, corrupt, mid-failover.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "segment/layout.hpp"
#include "segment/segment.hpp"
#include "shmbox/inspect.hpp"
#include "support.hpp"

using namespace std::chrono_literals;

namespace {

using shmtest::cli;  // tests/support/support.hpp

nlohmann::json json_of(const shmtest::run_result& r) {
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  return nlohmann::json::parse(r.out);
}

using shmtest::eventually;

std::uint64_t owner_pid(const std::string& box) {
  return json_of(cli({"stat", box, "--json"}))["owner"]["pid"].get<std::uint64_t>();
}

bool has_heir(const std::string& box, pid_t pid) {
  for (const auto& h : json_of(cli({"heirs", box, "--json"})))
    if (h["pid"] == pid && h["alive"] == true) return true;
  return false;
}

// The helper's messages: (id, seq) then bytes that are a function of both.
bool well_formed(const std::string& m) {
  if (m.size() < 16) return false;
  std::uint64_t id = 0, seq = 0;
  std::memcpy(&id, m.data(), 8);
  std::memcpy(&seq, m.data() + 8, 8);
  for (std::size_t i = 16; i < m.size(); ++i)
    if (m[i] != static_cast<char>((id * 131 + seq * 7 + i) & 0xFF)) return false;
  return true;
}

std::string unhex(const std::string& h) {
  std::string out;
  for (std::size_t i = 0; i + 1 < h.size(); i += 2) out += static_cast<char>(std::stoi(h.substr(i, 2), nullptr, 16));
  return out;
}

}  // namespace

TEST_CASE("dump shows the messages in delivery order without taking them") {
  shmtest::segment_guard g(shmtest::unique_name("dump"));
  REQUIRE(cli({"create", g.name, "--capacity", "8", "--slot-size", "64"}).code == 0);
  REQUIRE(cli({"post", g.name, "one", "two", "tab\there", "back\\slash"}).code == 0);
  auto r = cli({"dump", g.name});
  CHECK(r.code == 0);
  CHECK(r.out ==
        "lane 0  #0  3 bytes  one\n"
        "lane 0  #1  3 bytes  two\n"
        "lane 0  #2  8 bytes  tab\\x09here\n"
        "lane 0  #3  10 bytes  back\\\\slash\n");
  CHECK(r.err.find("showing 4 of 4") != std::string::npos);
  r = cli({"dump", g.name, "--max", "1", "--hex"});
  CHECK(r.code == 0);
  CHECK(r.out == "lane 0  #0  3 bytes\n  00000000  6f 6e 65 " + std::string(13 * 3 + 1, ' ') + " |one|\n");
  // Nothing was taken: the owner still gets all four, and nothing was counted.
  const auto c = json_of(cli({"stat", g.name, "--json"}))["counters"];
  CHECK(c["delivered"] == 0);
  r = cli({"recv", g.name, "--all"});  // one line each: a tab and a backslash escaped (--raw: the bytes)
  CHECK(r.out == "one\ntwo\ntab\\there\nback\\\\slash\n");
  r = cli({"dump", g.name});
  CHECK(r.code == 0);
  CHECK(r.out.empty());
  CHECK(r.err.find("showing 0 of 0") != std::string::npos);
}

TEST_CASE("dump: lanes in order, lifo newest first, JSON with base16 for bytes that are not UTF-8") {
  shmtest::segment_guard g(shmtest::unique_name("dumpl"));
  REQUIRE(cli({"create", g.name, "--capacity", "8", "--lanes", "2", "--lane-policy", "1=lifo"}).code == 0);
  REQUIRE(cli({"post", g.name, "--lane", "1", "old", "new"}).code == 0);
  REQUIRE(cli({"post", g.name, "--lane", "0", "ctl"}).code == 0);
  const auto j = json_of(cli({"dump", g.name, "--json"}));
  REQUIRE(j.size() == 3);
  CHECK(j[0]["lane"] == 0);
  CHECK(j[0]["text"] == "ctl");
  CHECK(j[1]["text"] == "new");  // lifo: newest first, as the owner receives them
  CHECK(j[2]["text"] == "old");
  // A message that is not UTF-8 (a producer's raw bytes) comes out as base16.
  shmtest::segment_guard g2(shmtest::unique_name("dumpb"));
  REQUIRE(cli({"create", g2.name}).code == 0);
  REQUIRE(cli({"post", g2.name}, std::string("\xff\xfe", 2) + "\n").code == 0);
  const auto b = json_of(cli({"dump", g2.name, "--json"}));
  REQUIRE(b.size() == 1);
  CHECK_FALSE(b[0].contains("text"));
  CHECK(b[0]["base16"] == "fffe");
}

TEST_CASE("dump on a busy box (4 producers, an owner) shows only whole messages, and disturbs nobody") {
  shmtest::segment_guard g(shmtest::unique_name("dumpbusy"));
  REQUIRE(cli({"create", g.name, "--capacity", "64", "--slot-size", "200", "--policy", "drop-oldest"}).code == 0);
  const int per = 20000;  // at a steady pace (--pause-us), so that the box is busy while we dump
  shmtest::child owner({shmtest::helper_path(), "consume", g.name, "1000000", "2000", "--lifo"});
  REQUIRE(owner.read_line().value_or("").rfind("owned", 0) == 0);
  std::vector<std::unique_ptr<shmtest::child>> producers;
  for (int id = 1; id <= 4; ++id)
    producers.push_back(std::make_unique<shmtest::child>(std::vector<std::string>{
        shmtest::helper_path(), "produce", g.name, std::to_string(id), std::to_string(per), "--no-wait", "--size", "200",
        "--pause-us", "20"}));
  int dumps = 0, seen = 0;
  auto dump_once = [&] {
    const auto j = json_of(cli({"dump", g.name, "--json", "--max", "64"}));
    ++dumps;
    for (const auto& m : j) {
      const std::string bytes = m.contains("base16") ? unhex(m["base16"].get<std::string>()) : m["text"].get<std::string>();
      CHECK_MESSAGE(well_formed(bytes), "a torn or mixed-up message in the dump");
      ++seen;
    }
  };
  // First with the owner stopped (a handshake, not luck): the producers fill
  // the box, so these dumps see messages however fast the owner drains it
  // on this machine (under ASan it emptied the box before every dump once).
  owner.kill(SIGSTOP);
  REQUIRE(shmtest::wait_for_state(owner.pid(), 'T', 10s));
  auto box = shmbox::Box::inspect(g.name);
  REQUIRE(box);
  CHECK(shmtest::eventually([&] { return shmbox::info(*box).depth > 0; }, 30s));
  while (seen == 0 && dumps < 20) dump_once();
  owner.kill(SIGCONT);
  // Then while it runs.
  while (dumps < 200) dump_once();
  for (auto& p : producers) CHECK(shmtest::exited_with(p->wait(60s), 0));
  const std::string out = owner.read_all(60s);
  CHECK(shmtest::exited_with(owner.wait(10s), 0));
  INFO(out);
  CHECK(out.find("torn=0") != std::string::npos);
  CHECK(out.find("dups=0") != std::string::npos);
  CHECK(out.find("redelivered=0") != std::string::npos);  // the dumps took nothing
  CHECK(seen > 0);  // the dumps did see messages (how many depends on the machine's load)
  MESSAGE(dumps << " dumps saw " << seen << " messages");
}

TEST_CASE("dump on an orphaned box shows its messages; on a corrupt segment it fails with one line") {
  shmtest::segment_guard g(shmtest::unique_name("dumporph"));
  REQUIRE(cli({"create", g.name}).code == 0);
  shmtest::child owner({shmtest::helper_path(), "own", g.name}, {}, true);
  REQUIRE(owner.read_line().value_or("").rfind("owned", 0) == 0);
  REQUIRE(cli({"post", g.name, "kept"}).code == 0);
  owner.kill(SIGKILL);
  owner.wait();
  CHECK(json_of(cli({"stat", g.name, "--json"}))["orphaned"] == true);
  auto r = cli({"dump", g.name});
  CHECK(r.code == 0);
  CHECK(r.out == "lane 0  #0  4 bytes  kept\n");

  shmtest::segment_guard bad(shmtest::unique_name("dumpbad"));
  shmtest::write_raw_segment(bad.name, std::string(8192, 'x'));
  r = cli({"dump", bad.name});
  CHECK(r.code == 1);
  CHECK(r.err.rfind("shmbox: ", 0) == 0);
  CHECK(r.err.find("not a shmbox") != std::string::npos);
  r = cli({"dump", shmtest::unique_name("nosuch")});
  CHECK(r.code == 1);
}

TEST_CASE("give-away: an owner that accepts requests hands the box to a waiting heir") {
  shmtest::segment_guard g(shmtest::unique_name("give"));
  REQUIRE(cli({"create", g.name}).code == 0);
  shmtest::child owner({shmtest::cli_path(), "recv", g.name, "--follow", "--accept-give-away"}, {}, false, true);
  REQUIRE(eventually([&] { return owner_pid(g.name) == static_cast<std::uint64_t>(owner.pid()); }));
  shmtest::child heir({shmtest::cli_path(), "recv", g.name, "--heir", "--follow"}, {}, false, true);
  REQUIRE(eventually([&] { return has_heir(g.name, heir.pid()); }));
  CHECK(json_of(cli({"stat", g.name, "--json"}))["owner"]["accepts_requests"] == true);

  REQUIRE(cli({"post", g.name, "before"}).code == 0);
  CHECK(owner.read_line().value_or("") == "before");
  auto r = cli({"give-away", g.name, std::to_string(heir.pid())});
  INFO("give-away said: ", r.err);
  CHECK(r.code == 0);
  CHECK(r.out.find("to pid " + std::to_string(heir.pid())) != std::string::npos);
  // The old owner stops by itself, exit 0; the heir owns the box and receives.
  CHECK(shmtest::exited_with(owner.wait(10s), 0));
  CHECK(owner.read_stderr().find("given away on request") != std::string::npos);
  const auto st = json_of(cli({"stat", g.name, "--json"}));
  CHECK(st["owner"]["pid"] == heir.pid());
  CHECK(st["owner"]["epoch"] == 2);
  CHECK(st["last_transfer"]["reason"] == "give-away");
  CHECK(st["last_transfer"]["from"] == owner.pid());
  CHECK(st["last_transfer"]["data"] == "requested");
  CHECK(st["owner"]["accepts_requests"] == false);  // a new owner starts with requests off
  REQUIRE(cli({"post", g.name, "after"}).code == 0);
  CHECK(heir.read_line().value_or("") == "after");
  heir.kill(SIGTERM);
  CHECK(shmtest::exited_with(heir.wait(), 0));
}

// The destination stores its key, then steps the epoch. The old owner sees
// its key go and clears the request; a requester that looked at that moment
// saw "request cleared, epoch unchanged" and said refused although the box
// was given (CI, 2026-11-21). Stop the destination in between to hold that
// moment open.
TEST_CASE("give-away: the requester waits for a destination stopped between taking the key and stepping the epoch") {
  shmtest::segment_guard g(shmtest::unique_name("givestop"));
  REQUIRE(cli({"create", g.name}).code == 0);
  shmtest::child owner({shmtest::cli_path(), "recv", g.name, "--follow", "--accept-give-away"}, {}, false, true);
  REQUIRE(eventually([&] { return owner_pid(g.name) == static_cast<std::uint64_t>(owner.pid()); }));
  shmtest::child heir({shmtest::cli_path(), "recv", g.name, "--heir", "--follow"}, {"SHMBOX_FAULT=takeover.after_cas:1:stop"},
                      false, true);
  REQUIRE(eventually([&] { return has_heir(g.name, heir.pid()); }));
  shmtest::child give({shmtest::cli_path(), "give-away", g.name, std::to_string(heir.pid()), "--timeout", "30000"}, {}, false,
                      true);
  REQUIRE(shmtest::wait_for_state(heir.pid(), 'T', 30s));  // holds the key, epoch not stepped
  CHECK(shmtest::exited_with(owner.wait(10s), 0));       // the old owner saw its key go and served the request
  // Give the requester time to look (it wakes when the request is served):
  // it must keep waiting, not answer.
  CHECK_FALSE(shmtest::wait_for_state(give.pid(), 'Z', 300ms));
  heir.kill(SIGCONT);
  const int st = give.wait(30s);
  INFO("give-away said: ", give.read_stderr());
  CHECK(shmtest::exited_with(st, 0));
  CHECK(give.read_all(5s).find("to pid " + std::to_string(heir.pid())) != std::string::npos);
  const auto info = json_of(cli({"stat", g.name, "--json"}));
  CHECK(info["owner"]["pid"] == heir.pid());
  CHECK(info["owner"]["epoch"] == 2);
  CHECK(info["last_transfer"]["reason"] == "give-away");
  heir.kill(SIGTERM);
  CHECK(shmtest::exited_with(heir.wait(), 0));
}

// An owner in an event loop sleeps in poll(2) on notify_fd, not on the
// futex: the request must make that fd readable (the owner's notify_fd
// thread does), or it is served only when something else wakes the loop.
TEST_CASE("give-away: an owner in an event loop (poll on notify_fd) serves the request") {
  shmtest::segment_guard g(shmtest::unique_name("giveloop"));
  REQUIRE(cli({"create", g.name}).code == 0);
  shmtest::child owner({shmtest::helper_path(), "event-loop", g.name});
  REQUIRE(owner.read_line().value_or("").rfind("owned", 0) == 0);
  REQUIRE(cli({"post", g.name, "wakes the loop"}).code == 0);  // the loop works: a post makes the fd readable
  CHECK(owner.read_line().value_or("") == "notified");
  shmtest::child heir({shmtest::cli_path(), "recv", g.name, "--heir", "--follow"}, {}, false, true);
  REQUIRE(eventually([&] { return has_heir(g.name, heir.pid()); }));
  // Nothing is posted now: only the request can wake the loop, and the
  // helper polls for up to 60 s, longer than this request waits.
  const auto r = cli({"give-away", g.name, std::to_string(heir.pid()), "--timeout", "20000"});
  INFO("give-away said: ", r.err);
  CHECK(r.code == 0);
  CHECK(owner.read_line().value_or("") == "given-away");
  CHECK(shmtest::exited_with(owner.wait(10s), 0));
  CHECK(owner_pid(g.name) == static_cast<std::uint64_t>(heir.pid()));
  heir.kill(SIGTERM);
  CHECK(shmtest::exited_with(heir.wait(), 0));
}

// Issue 13 item 8: an owner asleep in Owner::wait with nothing armed
// (passive) serves a give-away request, as docs/ownership.md promises ("the next
// time it receives or waits"). Before: wait() with nothing armed returned at
// once, so an owner parked there never served it (the request timed out).
TEST_CASE("give-away: an owner asleep in wait() with nothing armed serves the request") {
  shmtest::segment_guard g(shmtest::unique_name("giveidle"));
  REQUIRE(cli({"create", g.name}).code == 0);
  shmtest::child owner({shmtest::helper_path(), "idle-wait", g.name, "60000"});
  REQUIRE(owner.read_line().value_or("").rfind("owned", 0) == 0);
  shmtest::child heir({shmtest::cli_path(), "recv", g.name, "--heir", "--follow"}, {}, false, true);
  REQUIRE(eventually([&] { return has_heir(g.name, heir.pid()); }));
  // Handshake: the owner is asleep in the kernel (in wait's futex), not
  // returned from wait.
  REQUIRE(shmtest::wait_for_state(owner.pid(), 'S', 30s));
  CHECK(owner_pid(g.name) == static_cast<std::uint64_t>(owner.pid()));
  const auto r = cli({"give-away", g.name, std::to_string(heir.pid()), "--timeout", "20000"});
  INFO("give-away said: ", r.err);
  CHECK(r.code == 0);
  CHECK(owner.read_line().value_or("") == "event not-owner");  // wait() returned: the box was given
  CHECK(shmtest::exited_with(owner.wait(10s), 0));
  CHECK(owner_pid(g.name) == static_cast<std::uint64_t>(heir.pid()));
  heir.kill(SIGTERM);
  CHECK(shmtest::exited_with(heir.wait(), 0));
}

// The request word in the owner record (0: none pending).
std::uint64_t request_word(const std::string& box) {
  auto seg = shmbox::detail::open_segment(box, true);
  REQUIRE(seg);
  return (*seg)->owner()->request_pid.load();
}

// A give-away whose asker is killed while it waits (Ctrl-C) must not hand the
// box over later, nor block the next request.
TEST_CASE("give-away: a request whose asker was killed is void; the next request replaces it") {
  shmtest::segment_guard g(shmtest::unique_name("givedead"));
  REQUIRE(cli({"create", g.name}).code == 0);
  // An owner that accepts requests but serves them only when told ("serve").
  shmtest::child owner({shmtest::helper_path(), "own", g.name, "--accept-requests"}, {}, true);
  REQUIRE(owner.read_line().value_or("").rfind("owned", 0) == 0);
  shmtest::child heir({shmtest::cli_path(), "recv", g.name, "--heir", "--follow"}, {}, false, true);
  REQUIRE(eventually([&] { return has_heir(g.name, heir.pid()); }));
  const std::string heir_pid = std::to_string(heir.pid());

  shmtest::child asker({shmtest::cli_path(), "give-away", g.name, heir_pid, "--timeout", "60000"}, {}, false, true);
  REQUIRE(eventually([&] { return request_word(g.name) != 0; }));
  asker.kill(SIGKILL);
  CHECK(shmtest::killed_by(asker.wait(), SIGKILL));
  CHECK(request_word(g.name) != 0);  // left behind

  // A new request takes the dead one's place (no "another request is
  // pending"), then times out, withdrawn, because the owner serves nothing.
  auto r = cli({"give-away", g.name, heir_pid, "--timeout", "200"});
  CHECK(r.code == 3);
  CHECK(r.err.find("another give-away request") == std::string::npos);
  CHECK(r.err.find("withdrawn") != std::string::npos);
  CHECK(request_word(g.name) == 0);

  // Killed again; this time the owner comes round first: it drops the dead
  // asker's request and keeps the box.
  shmtest::child asker2({shmtest::cli_path(), "give-away", g.name, heir_pid, "--timeout", "60000"}, {}, false, true);
  REQUIRE(eventually([&] { return request_word(g.name) != 0; }));
  asker2.kill(SIGKILL);
  CHECK(shmtest::killed_by(asker2.wait(), SIGKILL));
  owner.write_stdin("serve\n");
  CHECK(owner.read_line().value_or("") == "empty");
  CHECK(request_word(g.name) == 0);
  CHECK(owner_pid(g.name) == static_cast<std::uint64_t>(owner.pid()));

  // A live asker is served.
  shmtest::child asker3({shmtest::cli_path(), "give-away", g.name, heir_pid, "--timeout", "60000"}, {}, false, true);
  REQUIRE(eventually([&] { return request_word(g.name) != 0; }));
  owner.write_stdin("serve\n");
  CHECK(owner.read_line().value_or("") == "not-owner");
  CHECK(shmtest::exited_with(asker3.wait(30s), 0));
  CHECK(owner_pid(g.name) == static_cast<std::uint64_t>(heir.pid()));
  CHECK(request_word(g.name) == 0);
  owner.close_stdin();
  CHECK(shmtest::exited_with(owner.wait(10s), 0));
  heir.kill(SIGTERM);
  CHECK(shmtest::exited_with(heir.wait(), 0));
}

// The requester's time runs out while the owner is in the middle of handing
// the box over: it must not say "not served, withdrawn"; it waits once more
// for the answer and then says the box may still be given. The owner stops
// right after posting its offer (give_away.after_offer), the heir is stopped
// so it cannot take the offer meanwhile.
TEST_CASE("give-away: time runs out while the owner is handing over: the requester says it may still be given") {
  shmtest::segment_guard g(shmtest::unique_name("givemid"));
  REQUIRE(cli({"create", g.name}).code == 0);
  shmtest::child owner({shmtest::helper_path(), "own", g.name, "--accept-requests"},
                       {"SHMBOX_FAULT=give_away.after_offer:1:stop"}, true);
  REQUIRE(owner.read_line().value_or("").rfind("owned", 0) == 0);
  shmtest::child heir({shmtest::cli_path(), "recv", g.name, "--heir", "--follow"}, {}, false, true);
  REQUIRE(eventually([&] { return has_heir(g.name, heir.pid()); }));
  heir.kill(SIGSTOP);
  REQUIRE(shmtest::wait_for_state(heir.pid(), 'T', 30s));
  shmtest::child asker({shmtest::cli_path(), "give-away", g.name, std::to_string(heir.pid()), "--timeout", "300"}, {},
                       false, true);
  REQUIRE(eventually([&] { return request_word(g.name) != 0; }));
  owner.write_stdin("serve\n");
  REQUIRE(shmtest::wait_for_state(owner.pid(), 'T', 30s));  // offer posted, request marked as being served
  CHECK((request_word(g.name) & shmbox::detail::kRequestServing) != 0);
  const auto serving_since = std::chrono::steady_clock::now();
  const int st = asker.wait(30s);
  const std::string err = asker.read_stderr();
  INFO("give-away said: ", err);
  CHECK(shmtest::exited_with(st, 3));
  CHECK(err.find("may still be given") != std::string::npos);
  // It waited the extra 2 s for the answer (a lower bound: not a speed check).
  CHECK(std::chrono::steady_clock::now() - serving_since >= 1500ms);
  // Let both go on: the heir takes the offer, the owner sees the box given.
  heir.kill(SIGCONT);
  owner.kill(SIGCONT);
  CHECK(owner.read_line().value_or("") == "not-owner");
  REQUIRE(eventually([&] { return owner_pid(g.name) == static_cast<std::uint64_t>(heir.pid()); }));
  CHECK(request_word(g.name) == 0);
  owner.close_stdin();
  CHECK(shmtest::exited_with(owner.wait(10s), 0));
  heir.kill(SIGTERM);
  CHECK(shmtest::exited_with(heir.wait(), 0));
}

TEST_CASE("give-away is refused with a reason: owner does not accept, pid not waiting, no owner") {
  shmtest::segment_guard g(shmtest::unique_name("giveno"));
  REQUIRE(cli({"create", g.name}).code == 0);
  // No owner at all.
  auto r = cli({"give-away", g.name, "1"});
  CHECK(r.code == 1);
  CHECK(r.err.find("no live owner") != std::string::npos);

  shmtest::child owner({shmtest::cli_path(), "recv", g.name, "--follow"}, {}, false, true);
  REQUIRE(eventually([&] { return owner_pid(g.name) == static_cast<std::uint64_t>(owner.pid()); }));
  shmtest::child heir({shmtest::cli_path(), "recv", g.name, "--heir", "--follow"}, {}, false, true);
  REQUIRE(eventually([&] { return has_heir(g.name, heir.pid()); }));
  r = cli({"give-away", g.name, std::to_string(heir.pid())});
  CHECK(r.code == 3);
  CHECK(r.err.find("does not accept give-away requests") != std::string::npos);
  CHECK(r.err.find("--accept-give-away") != std::string::npos);
  CHECK(owner_pid(g.name) == static_cast<std::uint64_t>(owner.pid()));  // nothing changed
  owner.kill(SIGTERM);
  CHECK(shmtest::exited_with(owner.wait(), 0));
  // The heir took the box over when the owner left; it does not accept requests.
  REQUIRE(eventually([&] { return owner_pid(g.name) == static_cast<std::uint64_t>(heir.pid()); }));

  shmtest::segment_guard g2(shmtest::unique_name("givenw"));
  REQUIRE(cli({"create", g2.name}).code == 0);
  shmtest::child owner2({shmtest::cli_path(), "recv", g2.name, "--follow", "--accept-give-away"}, {}, false, true);
  REQUIRE(eventually([&] { return owner_pid(g2.name) == static_cast<std::uint64_t>(owner2.pid()); }));
  r = cli({"give-away", g2.name, std::to_string(heir.pid())});  // alive, but not waiting for this box
  CHECK(r.code == 1);
  CHECK(r.err.find("is not waiting for it") != std::string::npos);
  CHECK(owner_pid(g2.name) == static_cast<std::uint64_t>(owner2.pid()));
  r = cli({"give-away", g2.name, std::to_string(owner2.pid())});  // to its own owner
  CHECK(r.code == 1);
  CHECK(r.err.find("already owns it") != std::string::npos);
  r = cli({"give-away", g2.name, "0"});
  CHECK(r.code == 2);  // usage: PID out of range
  heir.kill(SIGTERM);
  owner2.kill(SIGTERM);
  CHECK(shmtest::exited_with(heir.wait(), 0));
  CHECK(shmtest::exited_with(owner2.wait(), 0));
}

TEST_CASE("the manual page documents every command and every option that --help shows") {
  const std::string man = shmtest::manual_text();
  REQUIRE_MESSAGE(!man.empty(), "SHMBOX_MANPAGE (set by tests/meson.build) names the manual page");
  const std::vector<std::string> commands = {"create", "post", "recv",  "ask", "stat", "watch", "dump",
                                             "give-away", "ls", "heirs", "rm", "verify", "gc", "resize", "metrics"};
  const auto top = cli({"--help"});
  CHECK(top.code == 0);
  for (const std::string& c : commands) {
    CAPTURE(c);
    CHECK(top.out.find("  " + c + " ") != std::string::npos);  // listed by shmbox --help
    CHECK(man.find("shmbox " + c) != std::string::npos);     // in the synopsis
    const auto h = cli({c, "--help"});
    CHECK(h.code == 0);
    CHECK(h.out.find("Example: shmbox " + c) != std::string::npos);
    // Every long option of the command's --help is documented.
    for (const std::string& opt : shmtest::long_options(h.out)) {
      CAPTURE(opt);
      CHECK(man.find(opt) != std::string::npos);
    }
  }
}

// Every command that looks at a box, on a box in every state: it answers (exit
// 0, or 1 with one "shmbox: " line; verify: 1 when the box is broken), never
// dies of a signal and never hangs.
namespace {
void every_reader_answers(const std::string& name, const std::string& state, bool broken) {
  const std::vector<std::vector<std::string>> commands = {
      {"stat", name},         {"stat", name, "--json"}, {"stat", name, "--prometheus"},
      {"heirs", name},        {"heirs", name, "--json"}, {"dump", name},
      {"dump", name, "--hex"}, {"dump", name, "--json"}, {"verify", name},
      {"verify", name, "--json"}, {"watch", name, "--count", "2", "--interval", "50"},
      {"ls"},                 {"ls", "--json"},         {"gc", "--dry-run", "--prefix", name},
      {"metrics"}};
  for (const auto& c : commands) {
    std::string line;
    for (const auto& w : c) line += w + " ";
    CAPTURE(state);
    CAPTURE(line);
    const auto r = cli(c);
    const bool lists = c[0] == "ls" || c[0] == "gc" || c[0] == "metrics";
    if (broken && c[0] == "verify") {
      CHECK(r.code == 1);
      CHECK_FALSE(r.out.empty());  // the report: what is wrong
    } else if (broken && !lists) {
      CHECK(r.code == 1);
      CHECK(r.err.rfind("shmbox: ", 0) == 0);
    } else if (c[0] == "verify") {
      CHECK((r.code == 0 || r.code == 1));  // a busy box may show a transient problem; never a crash
    } else {
      CHECK(r.code == 0);
    }
    if (c.size() > 2 && c[2] == "--json" && r.code == 0) CHECK(nlohmann::json::accept(r.out));
  }
}
}  // namespace

TEST_CASE("every reading command answers on a box in every state") {
  // Garbage, empty and truncated segments.
  shmtest::segment_guard junk(shmtest::unique_name("anyjunk"));
  shmtest::write_raw_segment(junk.name, std::string(4096, '\x5a'));
  every_reader_answers(junk.name, "garbage segment", true);

  shmtest::segment_guard cut(shmtest::unique_name("anycut"));
  REQUIRE(cli({"create", cut.name, "--capacity", "64"}).code == 0);
  REQUIRE(::truncate(("/dev/shm/shmbox." + cut.name).c_str(), 1024) == 0);
  every_reader_answers(cut.name, "truncated segment", true);

  // Orphaned: the owner died, no heir.
  shmtest::segment_guard orph(shmtest::unique_name("anyorph"));
  REQUIRE(cli({"create", orph.name}).code == 0);
  {
    shmtest::child owner({shmtest::helper_path(), "own", orph.name}, {}, true);
    REQUIRE(owner.read_line().value_or("").rfind("owned", 0) == 0);
    REQUIRE(cli({"post", orph.name, "a", "b"}).code == 0);
    owner.kill(SIGKILL);
    owner.wait();
  }
  every_reader_answers(orph.name, "orphaned", false);

  // Busy: 4 producers and an owner, and mid-failover: the owner killed with an
  // heir waiting, while the commands run.
  shmtest::segment_guard busy(shmtest::unique_name("anybusy"));
  REQUIRE(cli({"create", busy.name, "--capacity", "256", "--policy", "drop-oldest"}).code == 0);
  shmtest::child owner({shmtest::helper_path(), "serve", busy.name, "--idle-ms", "20000"});
  REQUIRE(owner.read_line().value_or("").rfind("owner", 0) == 0);
  shmtest::child heir({shmtest::helper_path(), "serve", busy.name, "--heir", "--idle-ms", "20000"});
  REQUIRE(heir.read_line().value_or("").rfind("enlisted", 0) == 0);
  std::vector<std::unique_ptr<shmtest::child>> producers;
  for (int id = 1; id <= 4; ++id)
    producers.push_back(std::make_unique<shmtest::child>(std::vector<std::string>{
        shmtest::helper_path(), "produce", busy.name, std::to_string(id), "200000", "--no-wait", "--pause-us", "5"}));
  every_reader_answers(busy.name, "busy", false);
  owner.kill(SIGKILL);
  owner.wait();
  every_reader_answers(busy.name, "mid-failover", false);
  REQUIRE(eventually([&] { return owner_pid(busy.name) == static_cast<std::uint64_t>(heir.pid()); }));
  for (auto& p : producers) p->kill(SIGKILL);
  heir.kill(SIGKILL);
}
