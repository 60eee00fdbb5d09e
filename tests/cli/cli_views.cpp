// The CLI's views of boxes: `stat --prometheus` (checked by a strict checker
// of the text exposition format 0.0.4 written here, and by `promtool check
// metrics` when it is installed), `ls` (a table of every box: normal,
// orphaned, corrupt and empty segments) and `stat`'s producer table and
// give-away flag, text and --json.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "prometheus_check.hpp"
#include "support.hpp"

using json = nlohmann::json;
using namespace promcheck;

namespace {

using shmtest::cli;  // tests/support/support.hpp

// The CLI on a pseudo-terminal of `cols` columns (forkpty): what it wrote
// there ("\r\n" -> "\n"), read to its exit (bounded: 20 s, then killed).
std::string cli_on_terminal(const std::vector<std::string>& args, unsigned short cols) {
  winsize ws{};
  ws.ws_col = cols;
  ws.ws_row = 50;
  std::vector<std::string> argv{shmtest::cli_path()};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> a;
  for (auto& v : argv) a.push_back(v.data());
  a.push_back(nullptr);
  int master = -1;
  const pid_t pid = ::forkpty(&master, nullptr, nullptr, &ws);
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::execv(a[0], a.data());
    ::_exit(127);
  }
  std::string out;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < until) {
    pollfd p{master, POLLIN, 0};
    if (::poll(&p, 1, 200) <= 0) continue;
    char buf[4096];
    const ssize_t n = ::read(master, buf, sizeof buf);
    if (n <= 0) break;  // EIO: the child closed the terminal (exited)
    out.append(buf, static_cast<std::size_t>(n));
  }
  ::kill(pid, SIGKILL);
  int st = 0;
  ::waitpid(pid, &st, 0);
  ::close(master);
  std::string text;
  for (const char c : out)
    if (c != '\r') text += c;
  return text;
}

json stat_json(const std::string& name) {
  const auto r = cli({"stat", name, "--json"});
  REQUIRE_MESSAGE(r.code == 0, r.err);
  return json::parse(r.out);
}

// Polls `done` until it holds or `timeout` passes (a bounded handshake on
// state the CLI reports, not a sleep that hopes). Returns whether it held.
bool eventually(const std::function<bool()>& done, std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= until) return done();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

using shmtest::fields;
using shmtest::lines_of;

// A segment named shmbox.<name> in /dev/shm holding `bytes` (nothing: size 0).

// A process that acquires the box, then dies (SIGKILL): the box is owned by a dead process.
void own_then_die(const std::string& name) {
  shmtest::child owner({shmtest::helper_path(), "own", name}, {}, true);
  REQUIRE(owner.read_line().value_or("").rfind("owned", 0) == 0);
  owner.kill(SIGKILL);
  owner.wait();
}

const char* const kCounterFamilies[] = {
    "shmbox_posted_total",         "shmbox_stored_total",          "shmbox_delivered_total",      "shmbox_rejected_total",
    "shmbox_too_large_total",      "shmbox_timeouts_total",        "shmbox_dropped_newest_total", "shmbox_dropped_oldest_total",
    "shmbox_filtered_total",       "shmbox_abandoned_total",       "shmbox_aborted_total",        "shmbox_redelivered_total",
    "shmbox_dead_lettered_total", "shmbox_dead_letter_failed_total", "shmbox_stashed_total", "shmbox_unstashed_total",
    "shmbox_buffer_dropped_total"};

const char* const kGaugeFamilies[] = {"shmbox_depth_messages",     "shmbox_capacity_messages", "shmbox_slot_size_bytes",
                                      "shmbox_segment_bytes",      "shmbox_producers_attached", "shmbox_owner_alive",
                                      "shmbox_owner_epoch",        "shmbox_heirs",              "shmbox_orphaned",
                                      "shmbox_box_info",           "shmbox_parked_messages"};

}  // namespace

TEST_CASE("cli views: the Prometheus checker itself accepts valid text and catches each broken rule") {
  prometheus_checker pc;
  const std::string good =
      "# HELP shmbox_x_total Some help with \\\\ and \\n escaped.\n"
      "# TYPE shmbox_x_total counter\n"
      "shmbox_x_total{box=\"a\\\"b\\\\c\\nd\",lane=\"0\"} 1\n"
      "shmbox_x_total{box=\"a\",lane=\"1\",} 2.5e3 1700000000000\n"
      "\n"
      "# a comment\n"
      "# HELP shmbox_g A gauge.\n"
      "# TYPE shmbox_g gauge\n"
      "shmbox_g{box=\"a\"} -Inf\n"
      "shmbox_g { box = \"b\" }\t+Inf\n"
      "shmbox_g{box=\"c\xc3\xa9\xe2\x82\xac\xf0\x9f\x93\xa6\"} NaN\n";
  CHECK(pc.check(good).empty());
  REQUIRE(pc.samples().size() == 5);
  CHECK(pc.samples()[0].labels.at("box") == "a\"b\\c\nd");
  CHECK(pc.samples()[1].value == 2500.0);

  const std::string head = "# HELP shmbox_x_total h\n# TYPE shmbox_x_total counter\n";
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"no final line feed", head + "shmbox_x_total{box=\"a\"} 1"},
      {"no TYPE", "# HELP shmbox_x_total h\nshmbox_x_total{box=\"a\"} 1\n"},
      {"no HELP", "# TYPE shmbox_x_total counter\nshmbox_x_total{box=\"a\"} 1\n"},
      {"TYPE after samples", "# HELP shmbox_x_total h\nshmbox_x_total{box=\"a\"} 1\n# TYPE shmbox_x_total counter\n"},
      {"second TYPE", head + "# TYPE shmbox_x_total counter\nshmbox_x_total{box=\"a\"} 1\n"},
      {"second HELP", head + "# HELP shmbox_x_total again\nshmbox_x_total{box=\"a\"} 1\n"},
      {"family repeated", head + "shmbox_x_total{box=\"a\"} 1\n# HELP shmbox_g g\n# TYPE shmbox_g gauge\nshmbox_g{box=\"a\"} 1\n"
                                 "shmbox_x_total{box=\"b\"} 1\n"},
      {"duplicate label set", head + "shmbox_x_total{box=\"a\",lane=\"0\"} 1\nshmbox_x_total{lane=\"0\",box=\"a\"} 2\n"},
      {"label twice", head + "shmbox_x_total{box=\"a\",box=\"b\"} 1\n"},
      {"counter without _total", "# HELP shmbox_x h\n# TYPE shmbox_x counter\nshmbox_x{box=\"a\"} 1\n"},
      {"gauge with _total", "# HELP shmbox_g_total h\n# TYPE shmbox_g_total gauge\nshmbox_g_total{box=\"a\"} 1\n"},
      {"bad escape in label value", head + "shmbox_x_total{box=\"a\\tb\"} 1\n"},
      {"unescaped quote", head + "shmbox_x_total{box=\"a\"b\"} 1\n"},
      {"bad escape in HELP", "# HELP shmbox_x_total a \\q\n# TYPE shmbox_x_total counter\nshmbox_x_total{box=\"a\"} 1\n"},
      {"bad metric name", head + "9shmbox_x_total{box=\"a\"} 1\n"},
      {"bad label name", head + "shmbox_x_total{box=\"a\",1lane=\"0\"} 1\n"},
      {"reserved label name", head + "shmbox_x_total{box=\"a\",__lane=\"0\"} 1\n"},
      {"value not a float", head + "shmbox_x_total{box=\"a\"} 1,5\n"},
      {"hex value", head + "shmbox_x_total{box=\"a\"} 0x10\n"},
      {"bad timestamp", head + "shmbox_x_total{box=\"a\"} 1 1.5\n"},
      {"negative counter", head + "shmbox_x_total{box=\"a\"} -1\n"},
      {"unknown type", "# HELP shmbox_x h\n# TYPE shmbox_x gauges\nshmbox_x{box=\"a\"} 1\n"},
      {"no box label", head + "shmbox_x_total{lane=\"0\"} 1\n"},
      {"unterminated labels", head + "shmbox_x_total{box=\"a\" 1\n"},
      {"label value not UTF-8", head + "shmbox_x_total{box=\"a\xff\"} 1\n"},
      {"surrogate in UTF-8", head + "shmbox_x_total{box=\"a\xed\xa0\x80\"} 1\n"},
  };
  for (const auto& [what, text] : bad) {
    CAPTURE(what);
    CHECK_FALSE(pc.check(text).empty());
  }
}

TEST_CASE("cli views: stat --prometheus of a two-lane box owned by a dead process is valid 0.0.4 text") {
  shmtest::segment_guard dl(shmtest::unique_name("vdl"));
  shmtest::segment_guard g(shmtest::unique_name("vprom"));
  REQUIRE(cli({"create", dl.name, "--capacity", "1"}).code == 0);  // takes one dead letter, refuses the next
  // Lane 0: block, capacity 1; lane 1: drop-oldest, capacity 2, dead letters to dl.
  REQUIRE(cli({"create", g.name, "--lanes", "2", "--capacity", "2", "--slot-size", "16", "--lane-capacity", "0=1",
               "--lane-policy", "0=block", "--lane-policy", "1=drop-oldest", "--dead-letters", dl.name, "--lease-ms", "250"})
              .code == 0);
  CHECK(cli({"post", g.name, "--lane", "0", "--timeout", "10", "c1", "c2"}).code == 3);       // stored, timeout
  CHECK(cli({"post", g.name, "--lane", "1", "a", "b", "c", "d"}).code == 0);                  // 2 evicted: 1 dead-lettered, 1 not
  CHECK(cli({"post", g.name, "--lane", "1", "this one is far too large"}).code == 1);         // too large
  CHECK(cli({"recv", g.name, "--max", "1"}).out == "c1\n");                                   // delivered (lane 0 first)
  {
    // A loan given back (aborted), then a loan committed.
    shmtest::child p({shmtest::helper_path(), "produce", g.name, "7", "1", "--no-wait", "--loan", "--abort-every", "1",
                      "--size", "16", "--lane", "0"});
    REQUIRE(p.read_line().value_or("").rfind("ready", 0) == 0);
    CHECK(p.read_line().value_or("").rfind("done stored=1", 0) == 0);
    CHECK(shmtest::exited_with(p.wait(), 0));
  }
  own_then_die(g.name);

  const std::string promtool = find_promtool();
  if (promtool.empty())
    MESSAGE("promtool is not installed (Debian: apt-get install prometheus): only the built-in checker ran");
  const auto r = cli({"stat", g.name, "--prometheus"});
  REQUIRE(r.code == 0);
  CHECK(r.err.empty());
  INFO("exposition:\n", r.out);
  prometheus_checker pc;
  const auto problems = pc.check(r.out);
  for (const auto& p : problems) FAIL_CHECK(p);
  CHECK(problems.empty());
  promtool_check(promtool, r.out);

  const auto& s = pc.samples();
  // Every counter family is there, typed counter, with exactly one sample per lane.
  for (const char* fam : kCounterFamilies) {
    CAPTURE(fam);
    CHECK(pc.type_of(fam) == "counter");
    CHECK(std::count_if(s.begin(), s.end(), [&](const sample& x) { return x.name == fam; }) == 2);
    for (const char* lane : {"0", "1"}) CHECK(!std::isnan(value_of(s, fam, {{"box", g.name}, {"lane", lane}})));
  }
  for (const char* fam : kGaugeFamilies) {
    CAPTURE(fam);
    CHECK(pc.type_of(fam) == "gauge");
  }
  const std::map<std::string, std::string> lane0{{"box", g.name}, {"lane", "0"}}, lane1{{"box", g.name}, {"lane", "1"}},
      box{{"box", g.name}};
  CHECK(value_of(s, "shmbox_posted_total", lane0) == 4);  // c1, c2, the aborted loan, the committed one
  CHECK(value_of(s, "shmbox_stored_total", lane0) >= 2);   // (a FIFO lane counts claimed positions)
  CHECK(value_of(s, "shmbox_timeouts_total", lane0) == 1);
  CHECK(value_of(s, "shmbox_delivered_total", lane0) == 1);
  CHECK(value_of(s, "shmbox_aborted_total", lane0) == 1);
  CHECK(value_of(s, "shmbox_depth_messages", lane0) == 1);
  CHECK(value_of(s, "shmbox_capacity_messages", lane0) == 1);
  CHECK(value_of(s, "shmbox_posted_total", lane1) == 5);
  CHECK(value_of(s, "shmbox_too_large_total", lane1) == 1);
  CHECK(value_of(s, "shmbox_dropped_oldest_total", lane1) == 2);
  CHECK(value_of(s, "shmbox_dead_lettered_total", lane1) == 1);
  CHECK(value_of(s, "shmbox_dead_letter_failed_total", lane1) == 1);
  CHECK(value_of(s, "shmbox_depth_messages", lane1) == 2);
  CHECK(value_of(s, "shmbox_capacity_messages", lane1) == 2);
  // posted = delivered + rejected + too_large + timeouts + dropped_newest + dropped_oldest + filtered
  //          + abandoned + aborted + depth, lane by lane.
  for (const auto* lane : {&lane0, &lane1}) {
    double out = value_of(s, "shmbox_depth_messages", *lane);
    for (const char* fam : {"shmbox_delivered_total", "shmbox_rejected_total", "shmbox_too_large_total",
                            "shmbox_timeouts_total", "shmbox_dropped_newest_total", "shmbox_dropped_oldest_total",
                            "shmbox_filtered_total", "shmbox_abandoned_total", "shmbox_aborted_total"})
      out += value_of(s, fam, *lane);
    CHECK(value_of(s, "shmbox_posted_total", *lane) == out);
  }
  CHECK(value_of(s, "shmbox_lane_info", {{"box", g.name}, {"lane", "0"}, {"policy", "block"}}) == 1);
  CHECK(value_of(s, "shmbox_lane_info", {{"box", g.name}, {"lane", "1"}, {"policy", "drop-oldest"}}) == 1);
  CHECK(value_of(s, "shmbox_box_info", {{"box", g.name}, {"dead_letters", dl.name}}) == 1);
  CHECK(value_of(s, "shmbox_slot_size_bytes", box) == 16);
  CHECK(value_of(s, "shmbox_lease_seconds", box) == 0.25);
  CHECK(value_of(s, "shmbox_owner_alive", box) == 0);
  CHECK(value_of(s, "shmbox_owner_epoch", box) == 2);  // recv, then the helper that died
  CHECK(value_of(s, "shmbox_orphaned", box) == 1);
  CHECK(value_of(s, "shmbox_heirs", box) == 0);
  CHECK(value_of(s, "shmbox_producers_attached", box) == 0);
  CHECK(value_of(s, "shmbox_segment_bytes", box) > 0);

  // The dead-letter box: one lane, no owner ever; also valid.
  const auto d = cli({"stat", dl.name, "--prometheus"});
  REQUIRE(d.code == 0);
  CHECK(pc.check(d.out).empty());
  promtool_check(promtool, d.out);
  CHECK(value_of(pc.samples(), "shmbox_stored_total", {{"box", dl.name}, {"lane", "0"}}) == 1);
  CHECK(value_of(pc.samples(), "shmbox_rejected_total", {{"box", dl.name}, {"lane", "0"}}) == 1);
  CHECK(value_of(pc.samples(), "shmbox_owner_pid", {{"box", dl.name}}) == 0);
}

TEST_CASE("cli views: ls with a long name: cut in the middle to fit a terminal; in full, one row, on a pipe or with --plain") {
  const std::string base = shmtest::unique_name("vlong");
  shmtest::segment_guard longer(base + "-" + std::string(120 - base.size(), 'n') + "-tail");
  shmtest::segment_guard shorter(shmtest::unique_name("vshort"));
  REQUIRE(cli({"create", longer.name, "--capacity", "4"}).code == 0);
  REQUIRE(cli({"create", shorter.name, "--capacity", "4"}).code == 0);
  auto row_starting = [](const std::vector<std::string>& lines, const std::string& start) {
    for (const auto& l : lines)
      if (l.rfind(start, 0) == 0) return l;
    return std::string();
  };
  // A pipe: every name in full, its row on one line (scripts split rows on whitespace).
  const auto piped = cli({"ls"});
  REQUIRE(piped.code == 0);
  const auto plines = lines_of(piped.out);
  const std::string prow = row_starting(plines, longer.name + " ");
  CHECK(fields(prow).size() >= 8);
  CHECK(fields(row_starting(plines, shorter.name + " ")).size() >= 8);
  for (const auto& l : plines) CHECK(l != longer.name);  // never a name alone on its line
  // A terminal of 80 columns: every line fits (cut at its end with ~ if the
  // other columns need more); the long name is cut in the middle with ~.
  const std::string out = cli_on_terminal({"ls"}, 80);
  INFO("ls on 80 columns:\n", out);
  const auto tlines = lines_of(out);
  REQUIRE(!tlines.empty());
  for (const auto& l : tlines) {
    CAPTURE(l);
    CHECK(l.size() <= 80);
  }
  // Our row: its NAME is the long name's head, "~", the long name's tail
  // (other tests' boxes, running at the same time, share the name's prefix).
  auto cut_of_longer = [&](const std::string& first) {
    const std::size_t tilde = first.find('~');
    if (tilde == std::string::npos || first.size() > longer.name.size()) return false;
    const std::size_t tail = first.size() - tilde - 1;
    return tail >= 3 && longer.name.compare(0, tilde, first, 0, tilde) == 0 &&
           longer.name.compare(longer.name.size() - tail, tail, first, tilde + 1, tail) == 0;
  };
  std::string cut;
  for (const auto& l : tlines)
    if (!fields(l).empty() && cut_of_longer(fields(l)[0])) cut = l;
  REQUIRE(!cut.empty());
  // Its first columns (a row may lose its last ones to the width when other
  // boxes on the machine make the columns wide: cut at its end with ~).
  CHECK(fields(cut).size() >= 3);
  CHECK(fields(cut)[1] == "reject");
  CHECK(fields(cut)[2] == "0/4");
  CHECK(cut.find(longer.name) == std::string::npos);
  // --plain on a terminal: in full again.
  const auto pl = lines_of(cli_on_terminal({"ls", "--plain"}, 80));
  CHECK(fields(row_starting(pl, longer.name + " ")).size() >= 8);
}

TEST_CASE("cli views: ls shows a normal box, an orphaned box and corrupt segments, within 100 columns") {
  shmtest::segment_guard ok(shmtest::unique_name("vls"));
  shmtest::segment_guard orphan(shmtest::unique_name("vorph"));
  shmtest::segment_guard junk(shmtest::unique_name("vjunk"));
  shmtest::segment_guard empty(shmtest::unique_name("vempty"));
  REQUIRE(cli({"create", ok.name, "--capacity", "10", "--policy", "drop-newest"}).code == 0);
  REQUIRE(cli({"post", ok.name, "1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11"}).code == 3);  // 1 dropped
  REQUIRE(cli({"create", orphan.name, "--capacity", "4"}).code == 0);
  own_then_die(orphan.name);
  std::string garbage;
  for (int i = 0; i < 8192; ++i) garbage += static_cast<char>((i * 37 + 11) & 0xFF);
  shmtest::write_raw_segment(junk.name, garbage);
  shmtest::write_raw_segment(empty.name, "");

  const auto r = cli({"ls"});
  CHECK(r.code == 0);
  CHECK(r.err.empty());
  // On a terminal of 100 columns (not on one, a row is as long as its name).
  const std::string out = cli_on_terminal({"ls"}, 100);
  INFO("ls:\n", out);
  const auto lines = lines_of(out);
  REQUIRE(!lines.empty());
  CHECK(lines[0].rfind("NAME", 0) == 0);
  for (const char* col : {"POLICY", "DEPTH/CAP", "OWNER", "STATE", "HEIRS", "DROPS"})
    CHECK(lines[0].find(col) != std::string::npos);
  CHECK(lines[0].size() <= 100);
  // A box's row: "NAME columns..." (its name cut in the middle with ~ when
  // other boxes on the machine leave NAME less room than it takes).
  std::vector<std::string> our_lines;
  auto row_of = [&](const std::string& name) {
    for (const std::string& l : lines) {
      const std::string first = fields(l).empty() ? std::string() : fields(l)[0];
      const std::size_t cut = first.find('~');
      const bool same = first == name || (cut != std::string::npos && name.rfind(first.substr(0, cut), 0) == 0 &&
                                          name.size() >= first.size() - cut - 1 &&
                                          name.compare(name.size() - (first.size() - cut - 1), std::string::npos, first, cut + 1) == 0);
      if (same) {
        our_lines.push_back(l);
        return l;
      }
    }
    return std::string();
  };
  const std::string ok_row = row_of(ok.name), orphan_row = row_of(orphan.name), junk_row = row_of(junk.name),
                    empty_row = row_of(empty.name);
  REQUIRE(!ok_row.empty());
  REQUIRE(!orphan_row.empty());
  REQUIRE(!junk_row.empty());
  REQUIRE(!empty_row.empty());
  for (const auto& l : our_lines) {
    CAPTURE(l);
    CHECK(l.size() <= 100);
  }
  // The full box: policy, depth, a full bar, no owner, its one drop.
  CHECK(ok_row.find("drop-newest") != std::string::npos);
  CHECK(ok_row.find("10/10") != std::string::npos);
  CHECK(ok_row.find("[##########]") != std::string::npos);
  CHECK(ok_row.find("none") != std::string::npos);
  CHECK(fields(ok_row).back() == "1");  // DROPS, the last column (no marks)
  CHECK(ok_row.find("ORPHANED") == std::string::npos);
  // The orphaned box: a dead owner, marked.
  CHECK(orphan_row.find("0/4") != std::string::npos);
  CHECK(orphan_row.find("[..........]") != std::string::npos);
  CHECK(orphan_row.find(" dead") != std::string::npos);
  CHECK(orphan_row.find("passive") != std::string::npos);
  CHECK(orphan_row.find("ORPHANED") != std::string::npos);
  // Garbage: marked, with a short reason instead of the columns.
  CHECK(junk_row.find("CORRUPT") != std::string::npos);
  CHECK(junk_row.find("unusable: not a shmbox segment") != std::string::npos);
  const bool empty_marked = empty_row.find("CORRUPT") != std::string::npos || empty_row.find("INCOMPLETE") != std::string::npos;
  CHECK(empty_marked);
  CHECK(empty_row.find("unusable: ") != std::string::npos);

  const auto js = cli({"ls", "--json"});
  REQUIRE(js.code == 0);
  const auto arr = json::parse(js.out);
  REQUIRE(arr.is_array());
  std::map<std::string, json> by_name;
  for (const auto& e : arr) by_name[e["name"].get<std::string>()] = e;
  REQUIRE(by_name.count(ok.name) == 1);
  REQUIRE(by_name.count(orphan.name) == 1);
  REQUIRE(by_name.count(junk.name) == 1);
  REQUIRE(by_name.count(empty.name) == 1);
  CHECK(by_name[ok.name]["status"] == "ok");
  CHECK(by_name[ok.name]["depth"] == 10);
  CHECK(by_name[ok.name]["policy"] == "drop-newest");
  CHECK(by_name[ok.name]["drops"] == 1);
  CHECK(by_name[ok.name]["foreign"] == false);
  CHECK(by_name[ok.name]["orphaned"] == false);
  CHECK(by_name[orphan.name]["orphaned"] == true);
  CHECK(by_name[orphan.name]["owner"]["alive"] == false);
  CHECK(by_name[junk.name]["status"] == "corrupt");
  CHECK(by_name[junk.name].contains("error"));
  CHECK(by_name[junk.name]["reason"] == "not a shmbox segment (wrong magic)");
  CHECK(by_name[empty.name].contains("error"));
}

TEST_CASE("cli views: stat shows the producers of live and dead processes, and whether the owner takes requests") {
  shmtest::segment_guard g(shmtest::unique_name("vprod"));
  REQUIRE(cli({"create", g.name, "--capacity", "3", "--slot-size", "32"}).code == 0);
  auto producer_of = [](const json& st, long pid) {
    for (const auto& p : st["producers"])
      if (p["pid"] == pid) return p;
    return json::object();
  };
  // No owner yet: nobody to ask.
  auto st = stat_json(g.name);
  CHECK(st["producers"].empty());
  CHECK(st["owner"]["accepts_requests"] == false);
  CHECK(cli({"stat", g.name}).out.find("give-away    no live owner to ask") != std::string::npos);

  // Each helper posts its first message, then sleeps (--pause-us) holding its
  // entry; the handshake is the entry's counters in stat --json.
  auto producer = [&](const char* id, std::vector<std::string> extra) {
    std::vector<std::string> argv = {shmtest::helper_path(), "produce", g.name, id, "3", "--no-wait", "--size", "16",
                                     "--pause-us", "60000000"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return std::make_unique<shmtest::child>(argv);
  };
  // A: one message stored; then it dies.
  auto a = producer("1", {});
  REQUIRE(a->read_line().value_or("").rfind("ready", 0) == 0);
  REQUIRE(eventually([&] { return producer_of(stat_json(g.name), a->pid()).value("stored", 0) == 1; }));
  // C: a loan given back (aborted), then a loan committed: with the given-back
  // position, not yet passed by an owner, the three positions are taken.
  auto c = producer("3", {"--loan", "--abort-every", "1"});
  REQUIRE(c->read_line().value_or("").rfind("ready", 0) == 0);
  REQUIRE(eventually([&] {
    const json s = stat_json(g.name);
    return s["depth"] == 2 && producer_of(s, c->pid()).value("aborted", 0) == 1;
  }));
  // B: its first message finds the box full (refused).
  auto b = producer("2", {});
  REQUIRE(b->read_line().value_or("").rfind("ready", 0) == 0);
  REQUIRE(eventually([&] { return producer_of(stat_json(g.name), b->pid()).value("refused", 0) == 1; }));
  a->kill(SIGKILL);
  a->wait();

  st = stat_json(g.name);
  INFO("stat --json:\n", st.dump(2));
  REQUIRE(st["producers"].size() == 3);
  const json pa = producer_of(st, a->pid()), pb = producer_of(st, b->pid()), pc = producer_of(st, c->pid());
  REQUIRE(!pa.empty());
  REQUIRE(!pb.empty());
  REQUIRE(!pc.empty());
  for (const char* k : {"entry", "pid", "alive", "stored", "refused", "aborted"}) {
    CHECK_MESSAGE(pa.contains(k), k);
    CHECK_MESSAGE(pb.contains(k), k);
    CHECK_MESSAGE(pc.contains(k), k);
  }
  CHECK(pa["alive"] == false);
  CHECK(pa["stored"] == 1);
  CHECK(pa["refused"] == 0);
  CHECK(pa["aborted"] == 0);
  CHECK(pb["alive"] == true);
  CHECK(pb["stored"] == 0);
  CHECK(pb["refused"] == 1);
  CHECK(pb["aborted"] == 0);
  CHECK(pc["alive"] == true);
  CHECK(pc["stored"] >= 1);  // the committed loan (the library also counts the claim of the aborted one)
  CHECK(pc["refused"] == 0);
  CHECK(pc["aborted"] == 1);
  CHECK(pa["entry"] != pb["entry"]);
  CHECK(st["producers_attached"] == 2);
  // The keys tests/cli/cli.cpp and the README rely on are all still there.
  for (const char* k : {"name", "capacity", "slot_size", "policy", "depth", "owner", "orphaned", "lease_ms", "heirs",
                        "last_transfer", "dead_letters", "lanes", "counters", "spin_ns", "mode"})
    CHECK_MESSAGE(st.contains(k), k);

  const std::string text = cli({"stat", g.name}).out;
  INFO("stat:\n", text);
  const auto lines = lines_of(text);
  auto table_row = [&](long pid) {
    for (const auto& l : lines) {
      std::istringstream in(l);
      std::string entry, p;
      in >> entry >> p;
      if (p == std::to_string(pid) && !entry.empty() && std::isdigit(static_cast<unsigned char>(entry[0]))) return l;
    }
    return std::string();
  };
  CHECK(text.find("ENTRY") != std::string::npos);
  CHECK(text.find("REFUSED") != std::string::npos);
  const auto ra = fields(table_row(a->pid())), rb = fields(table_row(b->pid())), rc = fields(table_row(c->pid()));
  REQUIRE(ra.size() == 7);
  REQUIRE(rb.size() == 7);
  REQUIRE(rc.size() == 7);
  // The last column: the pid namespace ("this": the CLI's own).
  CHECK(ra == std::vector<std::string>{pa["entry"].dump(), std::to_string(a->pid()), "no", "1", "0", "0", "this"});
  CHECK(rb == std::vector<std::string>{pb["entry"].dump(), std::to_string(b->pid()), "yes", "0", "1", "0", "this"});
  CHECK(rc == std::vector<std::string>{pc["entry"].dump(), std::to_string(c->pid()), "yes", pc["stored"].dump(), "0", "1",
                                       "this"});

  // An owner that does not take give-away requests, then one that does.
  {
    shmtest::child o({shmtest::helper_path(), "own", g.name}, {}, true);
    REQUIRE(o.read_line().value_or("").rfind("owned", 0) == 0);
    st = stat_json(g.name);
    CHECK(st["owner"]["pid"] == o.pid());
    CHECK(st["owner"]["accepts_requests"] == false);
    CHECK(cli({"stat", g.name}).out.find("give-away    the owner does not accept requests") != std::string::npos);
    o.close_stdin();
    CHECK(shmtest::exited_with(o.wait(std::chrono::seconds(20)), 0));
  }
  shmtest::child follow({shmtest::cli_path(), "recv", g.name, "--follow", "--accept-give-away"}, {}, false, true);
  REQUIRE(eventually([&] {
    const json s = stat_json(g.name);
    return s["owner"]["pid"] == follow.pid() && s["owner"]["accepts_requests"] == true;
  }));
  CHECK(cli({"stat", g.name}).out.find("give-away    the owner hands the box over on request") != std::string::npos);
  follow.kill(SIGTERM);
  CHECK(shmtest::exited_with(follow.wait(std::chrono::seconds(20)), 0));
}
