// tests/support/checks.hpp - checks the doctest suites share.
#pragma once

#include <doctest/doctest.h>
#include <sys/types.h>

#include <chrono>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "shmbox/shmbox.hpp"
#include "support.hpp"

namespace shmtest {

// Every posted message is in exactly one counter or still in the box:
//   posted = delivered + rejected + too_large + timeouts + dropped + abandoned + aborted + depth
//   stored = delivered + dropped_oldest + abandoned + aborted + depth (+ replaced tops, lifo; + shrunk:
//            the newest a shrink dropped, Box::resize)
inline void check_invariant(const shmbox::Box& box) {
  const shmbox::counters c = box.read_counters();
  const std::uint64_t depth = shmbox::info(box).depth;
  CHECK(c.posted == c.delivered + c.rejected + c.too_large + c.timeouts + c.dropped_newest + c.dropped_oldest +
                        c.filtered + c.abandoned + c.aborted + depth);
  CHECK(c.stored == c.delivered + c.dropped_oldest + c.filtered + c.abandoned + c.aborted + depth +
                        (box.overflow() == shmbox::policy::lifo ? c.dropped_newest : c.shrunk));
}

// REDELIVERIES ARE COUNTED ONCE, in any kind of box (the caller made it and
// posted at least 5 messages of distinct texts). Owner A, a helper process,
// reads 3 of them (`stash`: and parks them, committing the read) and is
// SIGKILLed. Owner B, another helper (killed at `point` when it passes
// there: SHMBOX_FAULT; "" none), receives 2 (`two_phase`: read, then
// commit). This process then takes the box and drains it. Every message A
// read is handed out again exactly once, flagged, by B or by us, and so is
// each message B had taken when it died (we get those flagged too): the
// box's `redelivered` counter must say exactly how many, and the counters
// must still add up.
inline void check_redeliveries_counted(const shmbox::Box& box, const std::string& point, bool two_phase, bool stash) {
  using namespace std::chrono_literals;
  CAPTURE(point);
  CAPTURE(two_phase);
  std::set<std::string> read_by_a;
  {
    child a({helper_path(), "stash-owner", box.name()}, {}, true);
    REQUIRE(line_starting(a, "owned").size() > 0);
    const auto f = fields(ask(a, "read 3"));
    REQUIRE(f.size() == 5);  // "read 3 x y z"
    read_by_a.insert(f.begin() + 2, f.end());
    if (stash) REQUIRE(ask(a, "stash-read") == "stashed 3");
    a.kill(SIGKILL);
    REQUIRE(killed_by(a.wait(10s), SIGKILL));
  }
  {
    std::vector<std::string> env;
    if (!point.empty()) env.push_back("SHMBOX_FAULT=" + point);
    child b({helper_path(), "stash-owner", box.name()}, env, true);
    REQUIRE(line_starting(b, "owned").size() > 0);
    b.write_stdin(two_phase ? "read 2\ncommit\n" : "recv 2 1000\n");
    (void)line_starting(b, two_phase ? "commit" : "got", 10s);  // or nothing: killed at `point`
    b.close_stdin();
    (void)b.wait(10s);
  }
  auto c = shmbox::Owner::acquire(box);
  REQUIRE(c);
  std::vector<shmbox::message> got;
  while (c->receive_batch(got, {.max = 100, .timeout = 0ns}) == shmbox::recv_status::ok) {
  }
  std::uint64_t expect = read_by_a.size();
  for (const auto& m : got) {
    CHECK_MESSAGE((m.redelivered || read_by_a.count(m.data) == 0), m.data << " read by A came back unflagged");
    if (m.redelivered && read_by_a.count(m.data) == 0) ++expect;  // B had taken it
  }
  CHECK(box.read_counters().redelivered == expect);
  check_invariant(box);
  const auto v = shmbox::verify(box.name());
  REQUIRE(v);
  CHECK_MESSAGE(v->ok, (v->problems.empty() ? std::string() : v->problems[0]));
}

// utime + stime of a process, in clock ticks (/proc/<pid>/stat fields 14, 15).
inline long cpu_ticks(pid_t pid) {
  const std::string all = shmtest::read_text("/proc/" + std::to_string(pid) + "/stat");
  const auto close = all.rfind(')');
  if (close == std::string::npos) return -1;
  std::istringstream in(all.substr(close + 2));
  std::string field;
  long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && in >> field; ++i) {
    if (i == 14) utime = std::stol(field);
    if (i == 15) stime = std::stol(field);
  }
  return utime + stime;
}

}  // namespace shmtest
