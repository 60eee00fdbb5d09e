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
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "layout.hpp"
#include "support.hpp"

using namespace std::chrono_literals;

namespace {

shmtest::run_result cli(std::vector<std::string> args, const std::string& input = {},
                        std::chrono::milliseconds timeout = 60s) {
  args.insert(args.begin(), shmtest::cli_path());
  return shmtest::run(args, input, timeout);
}

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
