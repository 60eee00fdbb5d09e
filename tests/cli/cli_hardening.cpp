// The CLI against what acceptance testing threw at it (issue 13): numbers
// that are not plain decimals, arguments with control characters, files
// that are not boxes at box paths (a FIFO, a symbolic link), a scribbled
// header, and resource limits (ulimit -f, ulimit -v) at creation.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "segment/layout.hpp"
#include "shmbox/shmbox.hpp"
#include "support.hpp"

using namespace std::chrono_literals;

namespace {

using shmtest::cli;  // tests/support/support.hpp

// Errors go to stderr as one line that starts with "shmbox: ".
void check_one_line_error(const shmtest::run_result& r) {
  CHECK(r.err.rfind("shmbox: ", 0) == 0);
  CHECK(r.err.find('\n') == r.err.size() - 1);
}

nlohmann::json stat_json(const std::string& name) {
  const auto r = cli({"stat", name, "--json"});
  REQUIRE_MESSAGE(r.code == 0, r.err);
  return nlohmann::json::parse(r.out);
}

}  // namespace

TEST_CASE("cli numbers: decimal only, range-checked, usage error otherwise; --mode is octal") {
  shmtest::segment_guard g(shmtest::unique_name("hnum"));
  // Leading zeros are decimal: 010 is ten, not eight (octal); 0200 ms is 200.
  auto r = cli({"create", g.name, "--capacity", "010", "--lease-ms", "0200", "--block-timeout", "00"});
  REQUIRE_MESSAGE(r.code == 0, r.err);
  auto j = stat_json(g.name);
  CHECK(j["capacity"] == 10);
  CHECK(j["lease_ms"] == 200);
  CHECK(j["block_timeout_ms"] == 0);
  REQUIRE(cli({"rm", g.name}).code == 0);
  // --mode is always octal, with or without its leading 0.
  REQUIRE(cli({"create", g.name, "--mode", "660"}).code == 0);
  CHECK(stat_json(g.name)["mode"] == "0660");
  REQUIRE(cli({"rm", g.name}).code == 0);

  const std::vector<std::vector<std::string>> usage_errors = {
      {"create", g.name, "--capacity", "0x10"},
      {"create", g.name, "--capacity", " 5"},
      {"create", g.name, "--capacity", "+5"},
      {"create", g.name, "--capacity", "5 "},
      {"create", g.name, "--capacity", "-1"},
      {"create", g.name, "--capacity", "1e3"},
      {"create", g.name, "--capacity", "99999999999999999999999"},
      {"create", g.name, "--lease-ms", "-0"},
      {"create", g.name, "--slot-size", "0b11"},
      {"create", g.name, "--mode", "1777"},
      {"create", g.name, "--mode", "4700"},
      {"create", g.name, "--dead-letters", g.name},
      {"recv", g.name, "--max", "-1"},
      {"recv", g.name, "--timeout", "0x10"},
      {"post", g.name, "--lane", "+1", "x"},
      {"watch", g.name, "--count", "-1"},
      {"watch", g.name, "--interval", "0100"},  // 100 decimal is fine, but the box does not exist: see below
      {"give-away", g.name, "-5"},
  };
  for (const auto& args : usage_errors) {
    if (args.size() > 3 && args[2] == "--interval") continue;
    const auto r2 = cli(args);
    CAPTURE(args[2]);
    CAPTURE(r2.err);
    CHECK(r2.code == 2);
    check_one_line_error(r2);
  }
  // Nothing was created by any of them.
  CHECK(cli({"stat", g.name}).code == 1);
  // "0100" is a decimal 100 for --interval (in range): the command runs and
  // fails only because the box does not exist.
  CHECK(cli({"watch", g.name, "--interval", "0100", "--count", "1"}).code == 1);
  // The message names the option, the range and what is wrong.
  r = cli({"create", g.name, "--capacity", "0x10"});
  CHECK(r.err.find("--capacity") != std::string::npos);
  CHECK(r.err.find("not a decimal number 1..16777216") != std::string::npos);
  r = cli({"create", g.name, "--mode", "1777"});
  CHECK(r.err.find("above 0777") != std::string::npos);
  r = cli({"create", g.name, "--dead-letters", g.name});
  CHECK(r.err.find("its own dead-letter box") != std::string::npos);
}

TEST_CASE("cli errors escape control characters: one line, no escape sequence reaches the terminal") {
  const std::string evil = "a\nb\x1b[31mred\x07\tz\x9b";
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"stat", evil}, {"create", "ok", "--capacity", evil}, {"create", "ok", "--policy", evil},
        {"post", evil, "x"}, {"create", "ok", "--lane-capacity", evil}, {"create", "ok", "--dead-letters", evil},
        {"frobnicate", evil}, {"recv", "ok", "--data", evil}}) {
    const auto r = cli(args);
    CAPTURE(r.err);
    CHECK(r.code != 0);
    check_one_line_error(r);
    for (const char c : r.err.substr(0, r.err.size() - 1)) {
      const auto u = static_cast<unsigned char>(c);
      CHECK_MESSAGE((u >= 0x20 && u < 0x7f), "byte " << static_cast<int>(u) << " in the error line");
    }
  }
  const auto r = cli({"stat", evil});
  CHECK(r.err.find("a\\nb\\x1b[31mred\\x07\\tz\\x9b") != std::string::npos);
}

TEST_CASE("a FIFO or a symbolic link at a box path: every reading command answers at once, ls and gc go on") {
  const std::string prefix = shmtest::unique_name("hfifo") + "-";
  shmtest::segment_guard fifo(prefix + "fifo"), link(prefix + "link"), box(prefix + "box");
  REQUIRE(::mkfifo(("/dev/shm/shmbox." + fifo.name).c_str(), 0600) == 0);
  REQUIRE(::symlink("/etc/passwd", ("/dev/shm/shmbox." + link.name).c_str()) == 0);
  REQUIRE(cli({"create", box.name, "--capacity", "4"}).code == 0);

  // Before the fix, opening the FIFO for reading blocked forever: each of
  // these is given 10 s and must fail cleanly, naming what the file is.
  for (const char* verb_text : {"stat", "verify", "dump", "heirs", "watch", "post", "recv"}) {
    const std::string verb = verb_text;
    std::vector<std::string> args{verb, fifo.name};
    if (verb == "watch") args.insert(args.end(), {"--count", "1", "--plain"});
    if (verb == "post") args.push_back("x");
    const auto r = cli(args, {}, 10s);
    CAPTURE(verb);
    CAPTURE(r.err);
    CHECK(r.code == 1);
    if (verb == "verify") {
      CHECK(r.out.find("is a FIFO, not a shmbox box") != std::string::npos);
    } else {
      check_one_line_error(r);
      CHECK(r.err.find("is a FIFO, not a shmbox box") != std::string::npos);
    }
  }
  // A link is refused and not followed (before: "unexpected system error").
  auto r = cli({"stat", link.name}, {}, 10s);
  CHECK(r.code == 1);
  check_one_line_error(r);
  CHECK(r.err.find("is a symbolic link") != std::string::npos);
  CHECK(r.err.find("not followed") != std::string::npos);
  CHECK(r.err.find("unexpected system error") == std::string::npos);
  r = cli({"post", link.name, "x"}, {}, 10s);
  CHECK(r.code == 1);
  CHECK(r.err.find("is a symbolic link") != std::string::npos);

  // ls lists both as not boxes, and the real box normally.
  r = cli({"ls"}, {}, 10s);
  CHECK(r.code == 0);
  bool fifo_row = false, link_row = false, box_row = false;
  const auto lines = shmtest::lines_of(r.out);
  for (std::size_t k = 0; k < lines.size(); ++k) {
    const std::string& line = lines[k];
    if (line.rfind(fifo.name + " ", 0) == 0) fifo_row = line.find("NOT-A-BOX") != std::string::npos && line.find("a FIFO") != std::string::npos;
    if (line.rfind(link.name + " ", 0) == 0) link_row = line.find("NOT-A-BOX") != std::string::npos && line.find("symbolic link") != std::string::npos;
    // A name wider than the NAME column (other boxes and pools on the machine
    // make the other columns wide) stands alone, its columns on the next line.
    if (line.rfind(box.name + " ", 0) == 0) box_row = line.find("0/4") != std::string::npos;
    if (line == box.name && k + 1 < lines.size()) box_row = lines[k + 1].find("0/4") != std::string::npos;
  }
  CHECK(fifo_row);
  CHECK(link_row);
  CHECK(box_row);
  r = cli({"ls", "--json"}, {}, 10s);
  REQUIRE(r.code == 0);
  int not_boxes = 0;
  for (const auto& e : nlohmann::json::parse(r.out))
    if (e["name"] == fifo.name || e["name"] == link.name) not_boxes += e["status"] == "not_a_box" ? 1 : 0;
  CHECK(not_boxes == 2);

  // gc skips and lists them, removes the idle box, and says so in its status.
  r = cli({"gc", "--prefix", prefix}, {}, 10s);
  CAPTURE(r.out);
  CHECK(r.code == 3);
  CHECK(r.out.find("removed " + box.name) != std::string::npos);
  CHECK(r.out.find("skipped " + fifo.name) != std::string::npos);
  CHECK(r.out.find("skipped " + link.name) != std::string::npos);
  check_one_line_error(r);
  struct stat st {};
  CHECK(::lstat(("/dev/shm/shmbox." + fifo.name).c_str(), &st) == 0);
  CHECK(::lstat(("/dev/shm/shmbox." + box.name).c_str(), &st) != 0);
  // rm removes them like any stale segment.
  CHECK(cli({"rm", fifo.name}).code == 0);
  CHECK(cli({"rm", link.name}).code == 0);
  CHECK(::lstat("/etc/passwd", &st) == 0);  // the link's target is untouched
}

namespace {

// Writes `value` over the 32-bit header word at `offset` of box `name`, as a
// stray process with write access could.
void scribble_u32(const std::string& name, std::size_t offset, std::uint32_t value) {
  const int fd = ::shm_open(("/shmbox." + name).c_str(), O_RDWR, 0);
  REQUIRE(fd >= 0);
  const bool ok = ::pwrite(fd, &value, sizeof value, static_cast<off_t>(offset)) == static_cast<ssize_t>(sizeof value);
  ::close(fd);
  REQUIRE(ok);
}

}  // namespace

TEST_CASE("a scribbled block timeout in the header: post refuses the box at once, verify names the field") {
  using H = shmbox::detail::segment_header;
  shmtest::segment_guard g(shmtest::unique_name("hblock"));
  REQUIRE(cli({"create", g.name, "--capacity", "1", "--policy", "block", "--block-timeout", "50"}).code == 0);
  REQUIRE(cli({"post", g.name, "fills it"}).code == 0);
  CHECK(cli({"post", g.name, "waits 50 ms"}, {}, 10s).code == 3);  // the healthy box: a timeout, refused
  CHECK(cli({"verify", g.name}).code == 0);

  scribble_u32(g.name, offsetof(H, block_timeout_ms), 0xFFFFFFFFu);  // 49.7 days
  // Before: the post waited 49.7 days (here: killed after 10 s) and verify said ok.
  auto r = cli({"post", g.name, "would wait"}, {}, 10s);
  CAPTURE(r.err);
  CHECK(r.code == 1);
  check_one_line_error(r);
  CHECK(r.err.find("block timeout of 4294967295 ms in header") != std::string::npos);
  CHECK(r.err.find("corrupt") != std::string::npos);
  r = cli({"verify", g.name}, {}, 10s);
  CAPTURE(r.out);
  CHECK(r.code == 1);
  CHECK(r.out.find("block timeout of 4294967295 ms") != std::string::npos);
  r = cli({"ls", "--json"}, {}, 10s);
  bool marked = false;
  for (const auto& e : nlohmann::json::parse(r.out))
    if (e["name"] == g.name) marked = e["status"] == "corrupt";
  CHECK(marked);

  // One day is the most a box may have; create refuses more.
  scribble_u32(g.name, offsetof(H, block_timeout_ms), 86'400'000u);
  CHECK(cli({"verify", g.name}).code == 0);
  CHECK(cli({"create", "other", "--block-timeout", "86400001"}).code == 2);
}

TEST_CASE("verify names every out-of-range header field, also the ones open bounds instead of refusing") {
  using H = shmbox::detail::segment_header;
  shmtest::segment_guard g(shmtest::unique_name("hspin"));
  REQUIRE(cli({"create", g.name, "--capacity", "4"}).code == 0);
  // The spin is bounded by open (1 s at most), so the box still works ...
  scribble_u32(g.name, offsetof(H, spin_ns), 0xF0000000u);
  CHECK(cli({"post", g.name, "x"}).code == 0);
  // ... but verify says the field is out of range (before: "ok").
  auto r = cli({"verify", g.name});
  CAPTURE(r.out);
  CHECK(r.code == 1);
  CHECK(r.out.find("header: spin 4026531840 ns is more than 1000000000 ns") != std::string::npos);
  r = cli({"verify", g.name, "--json"});
  const auto j = nlohmann::json::parse(r.out);
  CHECK(j["ok"] == false);
  // The lease: refused by open, reported by verify.
  scribble_u32(g.name, offsetof(H, spin_ns), 0);
  CHECK(cli({"verify", g.name}).code == 0);
  scribble_u32(g.name, offsetof(H, lease_ms), 90'000'000u);
  r = cli({"verify", g.name});
  CHECK(r.code == 1);
  CHECK(r.out.find("lease of 90000000 ms in header") != std::string::npos);
}

namespace {

// Runs the CLI under a bash `ulimit` (e.g. "-f 1024").
shmtest::run_result cli_under_ulimit(const std::string& ulimit, const std::vector<std::string>& args) {
  std::vector<std::string> argv{"/bin/bash", "-c", "ulimit " + ulimit + " && exec \"$0\" \"$@\"", shmtest::cli_path()};
  argv.insert(argv.end(), args.begin(), args.end());
  return shmtest::run(argv, {}, 30s);
}

bool segment_exists(const std::string& name) {
  struct stat st {};
  return ::lstat(("/dev/shm/shmbox." + name).c_str(), &st) == 0;
}

}  // namespace

TEST_CASE("create under a file-size limit (ulimit -f) fails with a sentence naming it, and leaves nothing behind") {
  shmtest::segment_guard g(shmtest::unique_name("hfsize"));
  // 4 slots of 1 MiB under a 1 MiB limit: before, SIGXFSZ killed create
  // (exit 153 from bash) and left a 0-byte segment.
  auto r = cli_under_ulimit("-f 1024", {"create", g.name, "--capacity", "4", "--slot-size", "1048576"});
  CAPTURE(r.err);
  CHECK_FALSE(shmtest::killed_by(r.status, SIGXFSZ));
  CHECK(r.code == 1);
  check_one_line_error(r);
  CHECK(r.err.find("file-size limit (ulimit -f, RLIMIT_FSIZE) is 1.0 MiB") != std::string::npos);
  CHECK(r.err.find("no room in /dev/shm") == std::string::npos);
  CHECK_FALSE(segment_exists(g.name));
  // A box that fits under the limit is made as usual.
  r = cli_under_ulimit("-f 1024", {"create", g.name, "--capacity", "4", "--slot-size", "1024"});
  CHECK(r.code == 0);
  CHECK(segment_exists(g.name));
}

TEST_CASE("create and open under an address-space limit (ulimit -v) say which limit, not 'no room in /dev/shm'") {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  MESSAGE("skipped: a sanitizer's shadow memory does not run under ulimit -v");
  return;
#endif
  shmtest::segment_guard g(shmtest::unique_name("has"));
  // A box larger than the limit itself: refused before anything is made.
  auto r = cli_under_ulimit("-v 40000", {"create", g.name, "--capacity", "64", "--slot-size", "1048576"});
  CAPTURE(r.err);
  CHECK(r.code == 1);
  check_one_line_error(r);
  CHECK(r.err.find("address-space limit (ulimit -v, RLIMIT_AS)") != std::string::npos);
  CHECK(r.err.find("no room in /dev/shm") == std::string::npos);
  CHECK_FALSE(segment_exists(g.name));
  // A limit just above the box: the program's own mappings leave no room
  // for it, so mmap fails (ENOMEM): before, "no room in /dev/shm".
  r = cli_under_ulimit("-v 66000", {"create", g.name, "--capacity", "64", "--slot-size", "1048576"});
  CAPTURE(r.err);
  CHECK(r.code == 1);
  CHECK(r.err.find("address-space limit (ulimit -v, RLIMIT_AS)") != std::string::npos);
  CHECK(r.err.find("no room in /dev/shm") == std::string::npos);
  CHECK_FALSE(segment_exists(g.name));
  // The same for a reader of an existing large box.
  REQUIRE(cli({"create", g.name, "--capacity", "64", "--slot-size", "1048576"}).code == 0);
  r = cli_under_ulimit("-v 40000", {"stat", g.name});
  CAPTURE(r.err);
  CHECK(r.code == 1);
  check_one_line_error(r);
  CHECK(r.err.find("address-space limit (ulimit -v, RLIMIT_AS)") != std::string::npos);
}

namespace {

std::string file_text(const std::string& path) {
  std::ifstream f(path);
  REQUIRE_MESSAGE(f.good(), "cannot read " << path);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

// "a +  b\n  + c" -> "a + b + c": whitespace and line breaks (and the "//" of
// a comment's continuation lines) as single spaces.
std::string normalised(const std::string& text) {
  std::string out;
  std::istringstream in(text);
  for (std::string w; in >> w;) {
    if (w == "//") continue;
    out += (out.empty() ? "" : " ") + w;
  }
  return out;
}

// The terms after "posted =" in "posted = a + b + c".
std::vector<std::string> terms_of(const std::string& identity) {
  std::vector<std::string> terms;
  std::istringstream in(identity.substr(identity.find('=') + 1));
  for (std::string w; in >> w;)
    if (w != "+") terms.push_back(w);
  return terms;
}

}  // namespace

TEST_CASE("the documented counting identity is types.hpp's, word for word, and holds on a box with loans") {
  const std::string root = shmtest::env_or("SHMBOX_SOURCE_ROOT", "..");
  // types.hpp: the comment lines from "//   posted =" to the line before "// (a loan".
  const std::string header = file_text(root + "/include/shmbox/types.hpp");
  const auto from = header.find("//   posted =");
  REQUIRE(from != std::string::npos);
  const std::string code_identity = normalised(header.substr(from, header.find("// (a loan", from) - from));
  CHECK(code_identity.find("aborted") != std::string::npos);
  // docs/guarantees.md (the README's Guarantees and Reliability until issue 33):
  // every `posted = ...` in backticks.
  const std::string readme = file_text(root + "/docs/guarantees.md");
  int found = 0;
  for (auto at = readme.find("`posted ="); at != std::string::npos; at = readme.find("`posted =", at + 1)) {
    const auto end = readme.find('`', at + 1);
    REQUIRE(end != std::string::npos);
    const std::string readme_identity = normalised(readme.substr(at + 1, end - at - 1));
    CHECK(readme_identity == code_identity);
    ++found;
  }
  CHECK(found >= 2);  // Guarantees and Reliability

  // The identity on a real box: posts, a too large one, rejected ones, a
  // committed loan, two aborted loans (one destroyed uncommitted), a receive.
  shmtest::segment_guard g(shmtest::unique_name("hidentity"));
  auto box = shmbox::Box::create(g.name, {.capacity = 4, .slot_size = 16});
  REQUIRE(box);
  auto p = shmbox::Producer::attach(*box);
  REQUIRE(p);
  {
    auto loan = p->loan();
    REQUIRE(loan);
    loan.abort();
  }
  { REQUIRE(p->loan()); }  // destroyed uncommitted: aborted
  {
    auto loan = p->loan();
    REQUIRE(loan);
    std::memcpy(loan.data(), "lent", 4);
    CHECK(shmbox::is_stored(loan.commit(4)));
  }
  CHECK(p->post(std::string(17, 'x')) == shmbox::post_status::too_large);
  for (int i = 0; i < 5; ++i) (void)p->post("m");
  auto owner = shmbox::Owner::acquire(*box);
  REQUIRE(owner);
  shmbox::message msg;
  REQUIRE(owner->try_receive(msg) == shmbox::recv_status::ok);
  const shmbox::counters c = box->read_counters();
  const std::map<std::string, std::uint64_t> value = {
      {"delivered", c.delivered},           {"rejected", c.rejected},     {"too_large", c.too_large},
      {"timeouts", c.timeouts},             {"dropped_newest", c.dropped_newest}, {"dropped_oldest", c.dropped_oldest},
      {"filtered", c.filtered},             {"abandoned", c.abandoned},   {"aborted", c.aborted},
      {"depth", shmbox::info(*box).depth}};
  std::uint64_t sum = 0;
  for (const auto& t : terms_of(code_identity)) {
    CAPTURE(t);
    REQUIRE(value.count(t) == 1);
    sum += value.at(t);
  }
  CHECK(c.aborted == 2);
  CHECK(c.rejected == 2);
  CHECK(c.posted == sum);
  CHECK(c.posted != sum - c.aborted);  // the identity without `aborted` would not hold here
  CHECK(cli({"verify", g.name}).code == 0);
}

TEST_CASE("recv --heir --timeout gives up waiting to be given the box, exit 3, and leaves the heir table") {
  shmtest::segment_guard g(shmtest::unique_name("hheir"));
  REQUIRE(cli({"create", g.name, "--capacity", "4"}).code == 0);
  shmtest::child owner({shmtest::helper_path(), "own", g.name}, {}, true);
  REQUIRE(owner.read_line().value_or("").rfind("owned", 0) == 0);
  // Before: the heir waited for the owner forever (here: killed after 10 s).
  const auto start = std::chrono::steady_clock::now();
  auto r = cli({"recv", g.name, "--heir", "--timeout", "300"}, {}, 10s);
  const auto took = std::chrono::steady_clock::now() - start;
  CAPTURE(r.err);
  CHECK(r.code == 3);
  CHECK(took < 5s);
  CHECK(took >= 300ms);
  CHECK(r.err.find("was not given to this heir within 300 ms (owner: pid " + std::to_string(owner.pid()) + ", alive)") !=
        std::string::npos);
  CHECK(stat_json(g.name)["heirs"].empty());  // it withdrew
  // Given the box in time, it receives as owner: the owner exits, the heir inherits.
  REQUIRE(cli({"post", g.name, "kept"}).code == 0);
  shmtest::child heir({shmtest::cli_path(), "recv", g.name, "--heir", "--timeout", "20000"}, {}, false, true);
  REQUIRE(heir.read_line(100ms) == std::nullopt);  // nothing yet: still waiting
  owner.close_stdin();
  CHECK(shmtest::exited_with(owner.wait(10s), 0));
  CHECK(heir.read_line(10s).value_or("") == "kept");
  CHECK(shmtest::exited_with(heir.wait(10s), 0));
}

TEST_CASE("a scribbled owner epoch: recv says the owner record is corrupt, not 'already owned by this process'") {
  using H = shmbox::detail::segment_header;
  shmtest::segment_guard g(shmtest::unique_name("hepoch"));
  REQUIRE(cli({"create", g.name, "--capacity", "4"}).code == 0);
  const int fd = ::shm_open(("/shmbox." + g.name).c_str(), O_RDWR, 0);
  REQUIRE(fd >= 0);
  std::uint64_t owner_offset = 0;
  REQUIRE(::pread(fd, &owner_offset, sizeof owner_offset, offsetof(H, owner_offset)) == 8);
  const std::uint64_t last = UINT64_MAX;
  REQUIRE(::pwrite(fd, &last, sizeof last,
                   static_cast<off_t>(owner_offset + offsetof(shmbox::detail::owner_record, epoch))) == 8);
  ::close(fd);
  auto r = cli({"recv", g.name}, {}, 10s);
  CAPTURE(r.err);
  CHECK(r.code == 1);
  check_one_line_error(r);
  CHECK(r.err.find("already owned by this process") == std::string::npos);
  CHECK(r.err.find("owner epoch") != std::string::npos);
  CHECK(r.err.find("corrupt") != std::string::npos);
  r = cli({"verify", g.name});
  CHECK(r.code == 1);
  CHECK(r.out.find("owner record: epoch 18446744073709551615") != std::string::npos);
}

TEST_CASE("test box names start with the run's prefix, which scripts/test.sh compares") {
  // scripts/shm_names.sh looks for shmbox.t-<SHMBOX_TEST_RUN>-...
  const char* run = std::getenv("SHMBOX_TEST_RUN");
  const std::string expected = run != nullptr && *run != '\0' ? "t-" + std::string(run) + "-" : "t-";
  CHECK(shmtest::test_prefix() == expected);
  CHECK(shmtest::unique_name("x").rfind(expected + "x-", 0) == 0);
}
