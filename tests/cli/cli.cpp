// The CLI driven as a user drives it: commands, output, exit codes
// (0 ok, 1 failure, 2 usage, 3 refused/timed out) and one-line errors.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>
#include <string>
#include <vector>

#include "support.hpp"

using shmtest::run;

namespace {

using shmtest::cli;  // tests/support/support.hpp

// Errors go to stderr as one line that starts with "shmbox: ".
void check_one_line_error(const shmtest::run_result& r) {
  CHECK(r.err.rfind("shmbox: ", 0) == 0);
  CHECK(r.err.find('\n') == r.err.size() - 1);
}

}  // namespace

TEST_CASE("cli: create and stat say what is per lane") {
  shmtest::segment_guard g(shmtest::unique_name("cli-lanes"));
  auto r = cli({"create", g.name, "--capacity", "32", "--lanes", "2"});
  CHECK(r.code == 0);
  CHECK(r.out.find("capacity 32 per lane x 2 lanes = 64 messages") != std::string::npos);
  r = cli({"stat", g.name});
  CHECK(r.code == 0);
  CHECK(r.out.find("capacity     32 per lane x 2 lanes = 64 messages of up to") != std::string::npos);
  CHECK(r.out.find("depth        0 / 64 (all lanes; per lane below)") != std::string::npos);
  shmtest::segment_guard one(shmtest::unique_name("cli-lane"));
  r = cli({"create", one.name, "--capacity", "32"});
  CHECK(r.out.find("capacity 32 messages,") != std::string::npos);
  r = cli({"create", "--help"});
  CHECK(r.out.find("messages each lane holds") != std::string::npos);
}

TEST_CASE("cli: create, post, recv, stat, rm") {
  shmtest::segment_guard g(shmtest::unique_name("cli"));
  auto r = cli({"create", g.name, "--capacity", "4", "--slot-size", "32", "--policy", "drop-oldest"});
  CHECK(r.code == 0);
  CHECK(r.out.find(shmtest::cat("created box '", g.name, "'")) != std::string::npos);

  r = cli({"post", g.name, "one", "two", "three"});
  CHECK(r.code == 0);
  CHECK(r.err.empty());
  r = cli({"post", g.name}, "four\nfive\n");  // one message per line of stdin
  CHECK(r.code == 0);

  r = cli({"stat", g.name});
  CHECK(r.code == 0);
  CHECK(r.out.find("drop-oldest") != std::string::npos);
  CHECK(r.out.find("depth        4 / 4") != std::string::npos);
  CHECK(r.out.find("dropped_oldest 1") != std::string::npos);

  r = cli({"recv", g.name, "--max", "2"});
  CHECK(r.code == 0);
  CHECK(r.out == "two\nthree\n");
  r = cli({"recv", g.name, "--all"});
  CHECK(r.code == 0);
  CHECK(r.out == "four\nfive\n");
  r = cli({"recv", g.name, "--timeout", "50"});
  CHECK(r.code == 3);  // timed out with none
  CHECK(r.out.empty());

  r = cli({"rm", g.name});
  CHECK(r.code == 0);
  r = cli({"stat", g.name});
  CHECK(r.code == 1);
  check_one_line_error(r);
  CHECK(r.err.find("does not exist") != std::string::npos);
  CHECK(r.err.find("shmbox create") != std::string::npos);
}

TEST_CASE("cli: stat --json has the documented keys") {
  shmtest::segment_guard g(shmtest::unique_name("clijson"));
  REQUIRE(cli({"create", g.name, "--capacity", "8"}).code == 0);
  REQUIRE(cli({"post", g.name, "a", "b"}).code == 0);
  auto r = cli({"stat", g.name, "--json"});
  REQUIRE(r.code == 0);
  const auto j = nlohmann::json::parse(r.out);
  for (const char* k : {"name", "capacity", "slot_size", "policy", "depth", "owner", "counters"}) CHECK_MESSAGE(j.contains(k), k);
  CHECK(j["name"] == g.name);
  CHECK(j["capacity"] == 8);
  CHECK(j["slot_size"] == 256);
  CHECK(j["policy"] == "reject");
  CHECK(j["depth"] == 2);
  CHECK(j["owner"]["pid"] == 0);
  CHECK(j["owner"]["alive"] == false);
  for (const char* k : {"posted", "delivered", "rejected", "dropped_newest", "dropped_oldest", "timeouts", "abandoned"})
    CHECK_MESSAGE(j["counters"].contains(k), k);
  CHECK(j["counters"]["posted"] == 2);
}

TEST_CASE("cli: post says which message was refused and exits 3; too large exits 1") {
  shmtest::segment_guard g(shmtest::unique_name("clifull"));
  REQUIRE(cli({"create", g.name, "--capacity", "2", "--slot-size", "8"}).code == 0);
  auto r = cli({"post", g.name, "a", "b", "c"});
  CHECK(r.code == 3);
  CHECK(r.err.find("message 3 refused: full") != std::string::npos);
  r = cli({"post", g.name, "this is longer than eight bytes"});
  CHECK(r.code == 1);
  CHECK(r.err.find("too large") != std::string::npos);
  CHECK(r.err.find("at most 8") != std::string::npos);

  shmtest::segment_guard nb(shmtest::unique_name("clinewest"));
  REQUIRE(cli({"create", nb.name, "--capacity", "1", "--policy", "drop-newest"}).code == 0);
  r = cli({"post", nb.name, "kept", "dropped"});
  CHECK(r.code == 3);
  CHECK(r.err.find("message 2 refused: dropped") != std::string::npos);

  shmtest::segment_guard bl(shmtest::unique_name("cliblock"));
  REQUIRE(cli({"create", bl.name, "--capacity", "1", "--policy", "block"}).code == 0);
  r = cli({"post", bl.name, "--timeout", "20", "kept", "waited"});
  CHECK(r.code == 3);
  CHECK(r.err.find("message 2 refused: timeout") != std::string::npos);
}

TEST_CASE("cli: recv refuses when another live process owns the box") {
  shmtest::segment_guard g(shmtest::unique_name("cliowned"));
  REQUIRE(cli({"create", g.name}).code == 0);
  shmtest::child owner({shmtest::helper_path(), "own", g.name}, {}, true);
  REQUIRE(owner.read_line().value_or("").rfind("owned", 0) == 0);
  auto r = cli({"recv", g.name});
  CHECK(r.code == 1);
  check_one_line_error(r);
  CHECK(r.err.find(shmtest::cat("owned by live process ", std::to_string(owner.pid()))) != std::string::npos);
  r = cli({"stat", g.name});
  CHECK(r.out.find(shmtest::cat("pid ", std::to_string(owner.pid()), " (alive)")) != std::string::npos);
}

TEST_CASE("cli: recv waiting on an empty box stops at SIGTERM, long before its timeout") {
  shmtest::segment_guard g(shmtest::unique_name("clisig"));
  REQUIRE(cli({"create", g.name}).code == 0);
  shmtest::child r({shmtest::cli_path(), "recv", g.name, "--timeout", "600000"});
  // Handshake: it owns the box (stat says so) and sleeps.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < until &&
         (cli({"stat", g.name}).out.find(shmtest::cat("pid ", std::to_string(r.pid()), " (alive)")) == std::string::npos ||
          shmtest::process_state(r.pid()) != 'S'))
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  r.kill(SIGTERM);
  const int st = r.wait(std::chrono::seconds(10));  // a child that outlives this is killed: the check fails
  CHECK(shmtest::exited_with(st, 3));  // refused: nothing arrived
}

TEST_CASE("cli: usage errors exit 2 with one line; --help exits 0") {
  shmtest::segment_guard g(shmtest::unique_name("cliusage"));
  const std::vector<std::vector<std::string>> usage_errors = {
      {},
      {"frobnicate"},
      {"create"},
      {"create", "bad/name"},
      {"create", g.name, "--policy", "fifo"},
      {"create", g.name, "--capacity", "0"},
      {"create", g.name, "--mode", "999"},
      {"create", g.name, "--mode", "0400"},
      {"recv", g.name, "--max", "2", "--all"},
      {"post", g.name, "--timeout", "-5"},
  };
  for (const auto& args : usage_errors) {
    auto r = cli(args);
    CAPTURE(r.err);
    CHECK(r.code == 2);
    check_one_line_error(r);
  }
  CHECK(cli({"create", "bad/name"}).err.find("invalid box name") != std::string::npos);
  CHECK(cli({"create", g.name, "--policy", "fifo"}).err.find("reject, drop-newest, drop-oldest, lifo or block") != std::string::npos);
  CHECK_FALSE(shmtest::run({shmtest::cli_path(), "stat", g.name}).code == 0);  // nothing was created
  auto help = cli({"--help"});
  CHECK(help.code == 0);
  for (const char* cmd : {"create", "post", "recv", "stat", "ls", "rm"}) CHECK(help.out.find(cmd) != std::string::npos);
  auto sub = cli({"create", "--help"});
  CHECK(sub.code == 0);
  CHECK(sub.out.find("--slot-size") != std::string::npos);
}

TEST_CASE("cli: create twice fails; mode is applied") {
  shmtest::segment_guard g(shmtest::unique_name("climode"));
  REQUIRE(cli({"create", g.name, "--mode", "0660"}).code == 0);
  auto j = nlohmann::json::parse(cli({"stat", g.name, "--json"}).out);
  CHECK(j["mode"] == "0660");
  auto r = cli({"create", g.name});
  CHECK(r.code == 1);
  check_one_line_error(r);
  CHECK(r.err.find("already exists") != std::string::npos);
}

TEST_CASE("cli: ls lists boxes, marks an unusable segment, and --json parses") {
  shmtest::segment_guard a(shmtest::unique_name("clils"));
  shmtest::segment_guard junk(shmtest::unique_name("clijunk"));
  REQUIRE(cli({"create", a.name, "--policy", "lifo", "--capacity", "16"}).code == 0);
  REQUIRE(cli({"post", a.name, "x"}).code == 0);
  shmtest::write_raw_segment(junk.name, std::string(4096, 'z'));
  auto r = cli({"ls"});
  CHECK(r.code == 0);
  CHECK(r.out.find(a.name) != std::string::npos);
  CHECK(r.out.find("1/16") != std::string::npos);
  CHECK(r.out.find(shmtest::cat(junk.name, " ")) != std::string::npos);
  CHECK(r.out.find("unusable") != std::string::npos);
  auto js = cli({"ls", "--json"});
  CHECK(js.code == 0);
  const auto arr = nlohmann::json::parse(js.out);
  bool saw_box = false, saw_junk = false;
  for (const auto& e : arr) {
    if (e["name"] == a.name) saw_box = e["policy"] == "lifo" && e["depth"] == 1;
    if (e["name"] == junk.name) saw_junk = e.contains("error");
  }
  CHECK(saw_box);
  CHECK(saw_junk);
  // stat on the unusable segment is a clean, one-line failure.
  auto st = cli({"stat", junk.name});
  CHECK(st.code == 1);
  check_one_line_error(st);
  CHECK(st.err.find("not a shmbox segment") != std::string::npos);
}

TEST_CASE("cli: recv --follow, recv --heir with its transfer record, heirs, and stat's ownership fields") {
  shmtest::segment_guard g(shmtest::unique_name("clifollow"));
  REQUIRE(cli({"create", g.name, "--capacity", "16", "--lease-ms", "0"}).code == 0);
  shmtest::child owner({shmtest::cli_path(), "recv", g.name, "--follow"}, {}, false, true);
  // Handshake: the follower owns the box once stat says so.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (nlohmann::json::parse(cli({"stat", g.name, "--json"}).out)["owner"]["pid"] != owner.pid() &&
         std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  shmtest::child heir({shmtest::cli_path(), "recv", g.name, "--heir", "--data", "backup", "--follow"}, {}, false, true);
  while (nlohmann::json::parse(cli({"heirs", g.name, "--json"}).out).empty() && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  auto heirs = nlohmann::json::parse(cli({"heirs", g.name, "--json"}).out);
  REQUIRE(heirs.size() == 1);
  CHECK(heirs[0]["pid"] == heir.pid());
  CHECK(heirs[0]["alive"] == true);
  CHECK(heirs[0]["data"] == "backup");
  CHECK(cli({"heirs", g.name}).out.find("backup") != std::string::npos);

  REQUIRE(cli({"post", g.name, "one", "two"}).code == 0);
  CHECK(owner.read_line().value_or("") == "one");
  CHECK(owner.read_line().value_or("") == "two");
  // recv prints, then commits (at-least-once towards its output): kill it
  // only once it has committed both, or the heir gets them again, flagged.
  CHECK(shmtest::eventually([&] {
    return nlohmann::json::parse(cli({"stat", g.name, "--json"}).out)["counters"]["delivered"] == 2;
  }));
  owner.kill(SIGKILL);
  owner.wait();
  REQUIRE(cli({"post", g.name, "three"}).code == 0);
  CHECK(heir.read_line().value_or("") == "three");  // the heir took over and receives
  auto st = nlohmann::json::parse(cli({"stat", g.name, "--json"}).out);
  CHECK(st["owner"]["pid"] == heir.pid());
  CHECK(st["owner"]["alive"] == true);
  CHECK(st["owner"]["epoch"] == 2);
  CHECK(st["owner"]["state"] == "passive");
  CHECK(st["orphaned"] == false);
  CHECK(st["heirs"].empty());
  CHECK(st["last_transfer"]["from"] == owner.pid());
  CHECK(st["last_transfer"]["reason"] == "owner-died");
  CHECK(st["last_transfer"]["data"] == "backup");
  CHECK(st["counters"].contains("redelivered"));
  auto human = cli({"stat", g.name}).out;
  CHECK(human.find("owner-died from pid " + std::to_string(owner.pid())) != std::string::npos);
  // SIGTERM ends --follow cleanly (exit 0); the transfer record went to stderr.
  heir.kill(SIGTERM);
  CHECK(shmtest::exited_with(heir.wait(), 0));
  const std::string err = heir.read_stderr();
  CHECK(err.find("given box '" + g.name + "': owner-died from pid " + std::to_string(owner.pid())) != std::string::npos);
  CHECK(err.find("data 'backup'") != std::string::npos);
}

TEST_CASE("cli: an orphaned box is shown as such and can be claimed by recv") {
  shmtest::segment_guard g(shmtest::unique_name("cliorphan"));
  REQUIRE(cli({"create", g.name, "--lease-ms", "500"}).code == 0);
  shmtest::child owner({shmtest::helper_path(), "own", g.name}, {}, true);
  REQUIRE(owner.read_line().value_or("").rfind("owned", 0) == 0);
  owner.kill(SIGKILL);
  owner.wait();
  REQUIRE(cli({"post", g.name, "kept"}).code == 0);
  auto st = nlohmann::json::parse(cli({"stat", g.name, "--json"}).out);
  CHECK(st["orphaned"] == true);
  CHECK(st["lease_ms"] == 500);
  CHECK(cli({"stat", g.name}).out.find("ORPHANED") != std::string::npos);
  auto r = cli({"recv", g.name});
  CHECK(r.code == 0);
  CHECK(r.out == "kept\n");
  st = nlohmann::json::parse(cli({"stat", g.name, "--json"}).out);
  CHECK(st["orphaned"] == false);
  CHECK(st["last_transfer"]["reason"] == "owner-died");
}

TEST_CASE("cli: lanes, post --lane, recv --verbose, per-lane stat, dead letters, bad lane options") {
  shmtest::segment_guard g(shmtest::unique_name("clilanes"));
  shmtest::segment_guard dl(shmtest::unique_name("clidl"));
  REQUIRE(cli({"create", dl.name, "--capacity", "16"}).code == 0);
  auto r = cli({"create", g.name, "--lanes", "3", "--capacity", "4", "--lane-capacity", "0=2", "--lane-policy",
                "2=drop-oldest", "--dead-letters", dl.name});
  REQUIRE(r.code == 0);
  CHECK(r.out.find("3 lanes") != std::string::npos);
  REQUIRE(cli({"post", g.name, "--lane", "2", "a", "b", "c", "d", "e"}).code == 0);  // one evicted
  REQUIRE(cli({"post", g.name, "--lane", "1", "x"}).code == 0);
  REQUIRE(cli({"post", g.name, "--lane", "0", "ctl"}).code == 0);
  auto st = nlohmann::json::parse(cli({"stat", g.name, "--json"}).out);
  REQUIRE(st["lanes"].size() == 3);
  CHECK(st["lanes"][0]["capacity"] == 2);
  CHECK(st["lanes"][1]["policy"] == "reject");
  CHECK(st["lanes"][2]["policy"] == "drop-oldest");
  CHECK(st["lanes"][2]["depth"] == 4);
  CHECK(st["lanes"][2]["counters"]["dropped_oldest"] == 1);
  CHECK(st["dead_letters"] == dl.name);
  CHECK(st["counters"]["dead_lettered"] == 1);
  CHECK(st["owner"]["state"] == "passive");
  auto human = cli({"stat", g.name}).out;
  CHECK(human.find("LANE") != std::string::npos);
  CHECK(human.find(shmtest::cat("-> box '", dl.name, "'")) != std::string::npos);
  r = cli({"recv", g.name, "--all", "--verbose"});
  CHECK(r.code == 0);
  CHECK(r.out == "lane=0 redelivered=no ctl\nlane=1 redelivered=no x\nlane=2 redelivered=no b\n"
                 "lane=2 redelivered=no c\nlane=2 redelivered=no d\nlane=2 redelivered=no e\n");
  CHECK(cli({"recv", dl.name, "--all"}).out == shmtest::cat("[", g.name, " dropped-oldest] a\n"));
  // Bad lane options are usage errors, one line each.
  for (const std::vector<std::string>& bad :
       {std::vector<std::string>{"create", "x1", "--lanes", "9"}, {"create", "x2", "--lanes", "2", "--lane-capacity", "5=3"},
        {"create", "x3", "--lane-capacity", "1x=3"}, {"create", "x4", "--lane-policy", "0=fifo"},
        {"post", g.name, "--lane", "8", "m"}}) {
    auto e = cli(bad);
    CAPTURE(e.err);
    CHECK(e.code == 2);
  }
  auto e = cli({"post", g.name, "--lane", "5", "m"});  // a lane this box does not have
  CHECK(e.code == 1);
  CHECK(e.err.find("has 3 lanes") != std::string::npos);
}

namespace {
// "m-<n>-" padded with dots to 60 bytes: message n of the kill test.
std::string numbered(int n) {
  std::string s = shmtest::cat("m-", std::to_string(n), "-");
  s.resize(60, '.');
  return s;
}
// Parses `recv --verbose` lines "lane=L redelivered=yes|no TEXT"; a line that
// is not exactly that (a cut line) is returned in `bad`.
struct verbose_lines {
  std::vector<std::pair<std::string, bool>> msgs;  // text, redelivered
  std::vector<std::string> bad;
};
verbose_lines parse_verbose(const std::string& out) {
  verbose_lines v;
  std::size_t at = 0;
  while (at < out.size()) {
    const auto nl = out.find('\n', at);
    if (nl == std::string::npos) {  // no newline: a cut last line
      v.bad.push_back(out.substr(at));
      break;
    }
    const std::string line = out.substr(at, nl - at);
    at = nl + 1;
    const std::string yes = "lane=0 redelivered=yes ", no = "lane=0 redelivered=no ";
    const bool r = line.rfind(yes, 0) == 0;
    const std::string text = line.substr(r ? yes.size() : line.rfind(no, 0) == 0 ? no.size() : 0);
    if ((!r && line.rfind(no, 0) != 0) || text.size() != 60 || text.rfind("m-", 0) != 0) v.bad.push_back(line);
    else v.msgs.emplace_back(text, r);
  }
  return v;
}
}  // namespace

// recv prints, then commits (Owner::read + commit), in whole lines. A recv
// killed while its output is stuck (the reader stopped reading: the pipe is
// full and recv is blocked in write) has committed nothing it did not print:
// every message is in its output or comes back, flagged redelivered, to the
// next recv. Before: recv committed each batch before printing it, and the
// kill lost the rest of the batch.
TEST_CASE("cli: recv killed mid-stream loses nothing: every message is printed or redelivered") {
  shmtest::segment_guard g(shmtest::unique_name("clikill"));
  REQUIRE(cli({"create", g.name, "--capacity", "4096", "--slot-size", "64"}).code == 0);
  constexpr int kFirst = 10, kMore = 3000;  // 3000 lines of ~84 bytes: far more than a pipe holds
  std::string input;
  for (int n = 0; n < kFirst; ++n) input += numbered(n) + "\n";
  REQUIRE(cli({"post", g.name}, input).code == 0);
  shmtest::child recv({shmtest::cli_path(), "recv", g.name, "--follow", "--verbose"});
  std::string out1;
  // Handshake: the first messages are printed (and then committed, before
  // recv reads again).
  for (int n = 0; n < kFirst; ++n) {
    const auto line = recv.read_line();
    REQUIRE(line.has_value());
    out1 += *line + "\n";
  }
  input.clear();
  for (int n = kFirst; n < kFirst + kMore; ++n) input += numbered(n) + "\n";
  REQUIRE(cli({"post", g.name}, input).code == 0);
  // One more line: recv is printing the new messages; we stop reading, so it
  // blocks once the pipe is full. Kill it there.
  const auto line = recv.read_line();
  REQUIRE(line.has_value());
  out1 += *line + "\n";
  recv.kill(SIGKILL);
  CHECK(shmtest::killed_by(recv.wait(), SIGKILL));
  out1 += recv.read_all(std::chrono::seconds(10));  // what it wrote before it died

  const auto r2 = cli({"recv", g.name, "--all", "--verbose"});
  const verbose_lines first = parse_verbose(out1), second = parse_verbose(r2.out);
  INFO("a cut line: ", first.bad.empty() ? std::string("none") : first.bad.front());
  CHECK(first.bad.empty());  // whole lines only
  CHECK(second.bad.empty());
  std::map<std::string, int> seen_first;
  for (const auto& [text, redelivered] : first.msgs) {
    CHECK_FALSE(redelivered);
    ++seen_first[text];
  }
  std::map<std::string, int> seen_second;
  int unflagged_repeats = 0;
  for (const auto& [text, redelivered] : second.msgs) {
    ++seen_second[text];
    if (seen_first.count(text) != 0 && !redelivered) ++unflagged_repeats;  // a repeat must say so
  }
  CHECK(unflagged_repeats == 0);
  int lost = 0, dups = 0;
  for (int n = 0; n < kFirst + kMore; ++n) {
    const std::string m = numbered(n);
    if (seen_first[m] + seen_second[m] == 0) ++lost;
    if (seen_first[m] > 1 || seen_second[m] > 1) ++dups;
  }
  INFO("printed by the killed recv: ", first.msgs.size(), ", by the next: ", second.msgs.size());
  CHECK(lost == 0);
  CHECK(dups == 0);
  // The first kFirst were committed before recv read again: not delivered twice.
  for (int n = 0; n < kFirst; ++n) CHECK(seen_second[numbered(n)] == 0);
  // Counters: everything delivered once, the uncommitted ones again (flagged).
  const auto st = nlohmann::json::parse(cli({"stat", g.name, "--json"}).out);
  CHECK(st["depth"] == 0);
  CHECK(st["counters"]["delivered"] == kFirst + kMore);
}

// Issue 13 item 9: a plain `shmbox post` on a box with several lanes goes to
// the default user lane (1, or --default-lane), the control lane only takes
// --lane 0 / --control. Before: plain posts went to lane 0, the control lane.
TEST_CASE("cli: plain posts go to the default lane; --control and --lane 0 to the control lane; --default-lane") {
  shmtest::segment_guard g(shmtest::unique_name("clidefl"));
  auto r = cli({"create", g.name, "--lanes", "3", "--capacity", "4"});
  REQUIRE(r.code == 0);
  CHECK(r.out.find("plain posts go to lane 1") != std::string::npos);
  REQUIRE(cli({"post", g.name, "plain"}).code == 0);
  REQUIRE(cli({"post", g.name, "--control", "ctl"}).code == 0);
  REQUIRE(cli({"post", g.name, "--lane", "0", "ctl2"}).code == 0);
  auto st = nlohmann::json::parse(cli({"stat", g.name, "--json"}).out);
  CHECK(st["default_lane"] == 1);
  CHECK(st["lanes"][0]["depth"] == 2);
  CHECK(st["lanes"][1]["depth"] == 1);
  CHECK(cli({"stat", g.name}).out.find("default lane 1") != std::string::npos);
  r = cli({"recv", g.name, "--all", "--verbose"});
  CHECK(r.out == "lane=0 redelivered=no ctl\nlane=0 redelivered=no ctl2\nlane=1 redelivered=no plain\n");

  shmtest::segment_guard g2(shmtest::unique_name("clidefl2"));
  REQUIRE(cli({"create", g2.name, "--lanes", "3", "--default-lane", "2"}).code == 0);
  REQUIRE(cli({"post", g2.name}, "a\nb\n").code == 0);
  st = nlohmann::json::parse(cli({"stat", g2.name, "--json"}).out);
  CHECK(st["default_lane"] == 2);
  CHECK(st["lanes"][2]["depth"] == 2);
  // One lane: lane 0 is the default.
  shmtest::segment_guard g3(shmtest::unique_name("clidefl3"));
  REQUIRE(cli({"create", g3.name}).code == 0);
  CHECK(nlohmann::json::parse(cli({"stat", g3.name, "--json"}).out)["default_lane"] == 0);
  // Usage errors: a lane the box will not have; --control with --lane.
  auto e = cli({"create", "x-defl", "--lanes", "3", "--default-lane", "3"});
  CHECK(e.code == 2);
  CHECK(e.err.find("--default-lane 3") != std::string::npos);
  CHECK(cli({"create", "x-defl", "--default-lane", "9"}).code == 2);
  CHECK(cli({"post", g.name, "--control", "--lane", "1", "m"}).code == 2);
}

// The same with the library's crash points (lib/base/fault.hpp): recv killed while
// taking, mid-commit and right after committing a batch. Nothing is lost and
// nothing comes twice without the redelivered flag. Before: recv committed
// before printing, so a kill at owner.after_commit lost the whole batch.
TEST_CASE("cli: recv killed at the owner's crash points loses nothing") {
  for (const std::string point : {"owner.after_take:3", "owner.mid_commit:1", "owner.after_commit:1"}) {
    CAPTURE(point);
    shmtest::segment_guard g(shmtest::unique_name("clifault"));
    REQUIRE(cli({"create", g.name, "--capacity", "64", "--slot-size", "64"}).code == 0);
    constexpr int kCount = 20;
    std::string input;
    for (int n = 0; n < kCount; ++n) input += numbered(n) + "\n";
    REQUIRE(cli({"post", g.name}, input).code == 0);
    shmtest::child recv({shmtest::cli_path(), "recv", g.name, "--all", "--verbose"}, {shmtest::cat("SHMBOX_FAULT=", point)});
    const std::string out1 = recv.read_all(std::chrono::seconds(30));
    CHECK(shmtest::killed_by(recv.wait(), SIGKILL));
    const auto r2 = cli({"recv", g.name, "--all", "--verbose"});
    const verbose_lines first = parse_verbose(out1), second = parse_verbose(r2.out);
    CHECK(first.bad.empty());
    CHECK(second.bad.empty());
    std::map<std::string, int> in_first, in_second;
    for (const auto& [text, redelivered] : first.msgs) ++in_first[text];
    int unflagged_repeats = 0;
    for (const auto& [text, redelivered] : second.msgs) {
      ++in_second[text];
      if (in_first.count(text) != 0 && !redelivered) ++unflagged_repeats;
    }
    CHECK(unflagged_repeats == 0);
    int lost = 0;
    for (int n = 0; n < kCount; ++n) lost += in_first[numbered(n)] + in_second[numbered(n)] == 0 ? 1 : 0;
    INFO("printed by the killed recv: ", first.msgs.size(), ", by the next: ", second.msgs.size());
    CHECK(lost == 0);
  }
}
