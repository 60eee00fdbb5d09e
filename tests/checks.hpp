// tests/checks.hpp - checks the doctest suites share.
#pragma once

#include <doctest/doctest.h>
#include <sys/types.h>

#include <fstream>
#include <iterator>
#include <sstream>
#include <string>

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
