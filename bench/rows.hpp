// bench/rows.hpp - how every benchmark reports its measurements, so that
// bench/run.sh can put them into one table (bench/table.cpp).
//
// One line per measurement on stdout, fields separated by tabs:
//   row  <group> <mechanism> <metric> <median> <min> <max> <unit> <note>
//   skip <group> <mechanism> <why>
// Groups: tput-64-1p, tput-64-4p, tput-1k-1p, tput-1k-4p (metric "rate",
// unit "Mmsg/s"), rtt-busy-64, rtt-busy-1k, rtt-sleep-64 (metrics "p50",
// "p99", "p99.9", unit "us"), wake, failover (metrics "p50", "p99", unit
// "us"), memory (metric "bytes", unit "B", mechanism = the configuration),
// pool-rtt (metrics "p50", "p99", "p99.9" in "us", and "ratio-p50",
// "ratio-p99" in "x": to the box-rtt row of the same repetition).
// Human-readable output goes to stderr.
#pragma once

#include <fcntl.h>
#include <sched.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

namespace shmbench {

inline void print_row(std::string_view group, std::string_view mech, std::string_view metric, double median,
                      double min, double max, std::string_view unit, std::string_view note = {}) {
  std::printf("row\t%.*s\t%.*s\t%.*s\t%.10g\t%.10g\t%.10g\t%.*s\t%.*s\n", int(group.size()), group.data(),
              int(mech.size()), mech.data(), int(metric.size()), metric.data(), median, min, max, int(unit.size()),
              unit.data(), int(note.size()), note.data());
  std::fflush(stdout);
}

inline void print_skip(std::string_view group, std::string_view mech, std::string_view why) {
  std::printf("skip\t%.*s\t%.*s\t%.*s\n", int(group.size()), group.data(), int(mech.size()), mech.data(),
              int(why.size()), why.data());
  std::fflush(stdout);
}

// Median, min and max of repeated measurements (v is sorted in place).
struct summary {
  double median = 0, min = 0, max = 0;
};
inline summary summarize(std::vector<double>& v) {
  summary s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  s.median = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
  s.min = v.front();
  s.max = v.back();
  return s;
}

// The q-quantile (0..1) of sorted samples (nearest rank).
inline double quantile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  std::size_t i = static_cast<std::size_t>(q * static_cast<double>(sorted.size()));
  if (i >= sorted.size()) i = sorted.size() - 1;
  return sorted[i];
}

// The metrics of the round-trip groups: p50, p99 and p99.9 of one run's
// samples (nearest rank).
inline constexpr const char* kPercentileMetric[3] = {"p50", "p99", "p99.9"};
inline std::array<double, 3> percentiles(std::vector<double>& samples) {  // sorts `samples`
  std::sort(samples.begin(), samples.end());
  return {quantile(samples, 0.50), quantile(samples, 0.99), quantile(samples, 0.999)};
}

// The contents of `path`, or what could be read of it; never throws (a /proc
// file of a process that exits mid-read fails with ESRCH, which std::ifstream
// would turn into an exception).
inline std::string read_text(const std::string& path) {
  std::string out;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return out;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return out;
}

// Handshake: waits until process `pid` sleeps in the kernel (state S in
// /proc/<pid>/stat), at most `timeout_ns`. False on timeout (or no process).
inline bool wait_until_sleeping(pid_t pid, long timeout_ns = 2'000'000'000) {
  timespec start{};
  ::clock_gettime(CLOCK_MONOTONIC, &start);
  for (;;) {
    const std::string all = read_text("/proc/" + std::to_string(pid) + "/stat");
    const auto close = all.rfind(')');
    if (close == std::string::npos || close + 2 >= all.size()) return false;
    if (all[close + 2] == 'S') return true;
    timespec now{};
    ::clock_gettime(CLOCK_MONOTONIC, &now);
    if ((now.tv_sec - start.tv_sec) * 1'000'000'000L + (now.tv_nsec - start.tv_nsec) > timeout_ns) return false;
    sched_yield();
  }
}

// CPU time (user + system, all threads) process `pid` has used, in
// microseconds (clock-tick resolution, 10 ms here), -1 if unreadable; 0 pid: this process.
inline double cpu_us(pid_t pid) {
  const std::string all = read_text(pid == 0 ? std::string("/proc/self/stat") : "/proc/" + std::to_string(pid) + "/stat");
  const auto close = all.rfind(')');
  if (close == std::string::npos) return -1;
  unsigned long long utime = 0, stime = 0;  // fields 14 and 15; field 3 (state) follows ") "
  if (std::sscanf(all.c_str() + close + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &utime, &stime) != 2)
    return -1;
  return static_cast<double>(utime + stime) * 1e6 / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

// A figure with three significant digits or so ("1234", "12.3", "1.23").
inline std::string fmt(double v) {
  char b[32];
  std::snprintf(b, sizeof b, v >= 1000 || v <= -1000 ? "%.0f" : v >= 100 || v <= -100 ? "%.1f" : "%.2f", v);
  return b;
}

// The load average of the last minute ("0.52"), for the logs.
inline std::string load_average() {
  double l = 0;
  return ::getloadavg(&l, 1) == 1 ? fmt(l) : "?";
}

// What the repetitions of a benchmark measured: one value per repetition
// for each (group, mechanism, metric), and the skips, in the order first
// added, grouped by group and mechanism. print() writes the rows (median,
// min and max of the repetitions) on stdout and the same as a table on
// stderr: a block per group, a line per mechanism, a cell "metric median
// (min..max) unit" per metric.
class Results {
 public:
  // One repetition's value; `note` (the row's last field) replaces the one before.
  void add(std::string_view group, std::string_view mech, std::string_view metric, std::string_view unit,
           double value, std::string_view note = {}) {
    series& s = at(group, mech, metric);
    s.unit = std::string(unit);  // a new string (assigning the view trips GCC 12's -Wrestrict)
    s.note = std::string(note);
    s.values.push_back(value);
  }
  void skip(std::string_view group, std::string_view mech, std::string_view why) {
    place({std::string(group), std::string(mech), {}, {}, std::string(why), {}, true});
  }
  void print() {
    std::string group, mech, line;
    const auto flush = [&] {
      if (!mech.empty()) std::fprintf(stderr, "  %-18s%s\n", mech.c_str(), line.c_str());
      line.clear();
    };
    for (series& s : entries_) {
      if (s.group != group || s.mech != mech) {
        flush();
        if (s.group != group) std::fprintf(stderr, "\n%s\n", s.group.c_str());
        group = s.group;
        mech = s.mech;
      }
      if (s.skipped) {
        print_skip(s.group, s.mech, s.note);
        line += " skipped: " + s.note;
        continue;
      }
      const summary m = summarize(s.values);
      print_row(s.group, s.mech, s.metric, m.median, m.min, m.max, s.unit, s.note);
      line += " " + s.metric + " " + fmt(m.median) + " (" + fmt(m.min) + ".." + fmt(m.max) + ") " + s.unit + " ";
    }
    flush();
  }

 private:
  struct series {
    std::string group, mech, metric, unit, note;
    std::vector<double> values;
    bool skipped = false;
  };
  series& at(std::string_view group, std::string_view mech, std::string_view metric) {
    for (series& s : entries_)
      if (!s.skipped && s.group == group && s.mech == mech && s.metric == metric) return s;
    return place({std::string(group), std::string(mech), std::string(metric), {}, {}, {}, false});
  }
  // After the last entry of its mechanism, else of its group, else at the end.
  series& place(series&& s) {
    std::size_t group_end = entries_.size(), mech_end = entries_.size();
    bool in_group = false, in_mech = false;
    for (std::size_t i = 0; i < entries_.size(); ++i) {
      if (entries_[i].group != s.group) continue;
      group_end = i + 1, in_group = true;
      if (entries_[i].mech == s.mech) mech_end = i + 1, in_mech = true;
    }
    const std::size_t at = in_mech ? mech_end : in_group ? group_end : entries_.size();
    return *entries_.insert(entries_.begin() + static_cast<std::ptrdiff_t>(at), std::move(s));
  }
  std::vector<series> entries_;
};

}  // namespace shmbench
