// `shmbox metrics`: one Prometheus exposition for the whole host. Checked by
// the strict checker of prometheus_check.hpp and `promtool check metrics`
// when it is installed: each family's HELP and TYPE once with the samples of
// every box and pool under it, the same lines as `stat --prometheus` and
// `pool stat --prometheus` (dashboards keep working), and segments that are
// not boxes skipped at once, warned about on stderr and counted.
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "prometheus_check.hpp"
#include "support.hpp"

using namespace std::chrono_literals;
using namespace promcheck;

namespace {

using shmtest::cli;  // tests/support/support.hpp

// Removes `path` (a file, FIFO, link or empty directory) before and after the
// test, even when a check fails: what the test plants at a pool or bridge
// status path, or a directory at a box path (segment_guard unlinks box paths).
// A pool the test creates is never run: its segment is all there is of it.
struct path_guard {
  std::string path;
  explicit path_guard(std::string p) : path(std::move(p)) { remove(); }
  ~path_guard() { remove(); }
  path_guard(const path_guard&) = delete;
  path_guard& operator=(const path_guard&) = delete;
  void remove() const {
    if (::unlink(path.c_str()) != 0) ::rmdir(path.c_str());
  }
};

// Lines of `text` that start with `prefix`.
std::vector<std::string> lines_starting(const std::string& text, const std::string& prefix) {
  std::vector<std::string> out;
  for (const auto& l : shmtest::lines_of(text))
    if (l.rfind(prefix, 0) == 0) out.push_back(l);
  return out;
}

// Checks `text` as one exposition (checker and promtool) and that every
// family has exactly one HELP and one TYPE line. The checker keeps the samples.
void check_exposition(prometheus_checker& pc, const std::string& text) {
  const auto problems = pc.check(text);
  for (const auto& p : problems) FAIL_CHECK(p);
  CHECK(problems.empty());
  promtool_check(find_promtool(), text);
  std::map<std::string, int> help, type;
  for (const auto& l : lines_starting(text, "# HELP ")) ++help[shmtest::fields(l)[2]];
  for (const auto& l : lines_starting(text, "# TYPE ")) ++type[shmtest::fields(l)[2]];
  CHECK(type.size() > 40);  // the box's, the pool's and the exporter's families
  CHECK(help.size() == type.size());
  for (const auto& [family, n] : type) {
    CAPTURE(family);
    CHECK(n == 1);
    CHECK(help[family] == 1);
  }
  // Every sample is a box's or a pool's, but the exporter's own two gauges.
  for (const auto& s : pc.samples()) {
    CAPTURE(s.name);
    if (s.name.rfind("shmbox_metrics_", 0) == 0) CHECK(s.labels.count("kind") == 1);
    else CHECK(s.labels.count("box") + s.labels.count("pool") >= 1);
  }
}

}  // namespace

TEST_CASE("cli metrics: one exposition for two boxes and a pool: each family's HELP and TYPE once, both boxes' values, "
          "every line of stat --prometheus in it") {
  shmtest::segment_guard lanes(shmtest::unique_name("mlanes")), full(shmtest::unique_name("mfull"));
  const std::string pool = shmtest::unique_name("mpool");
  path_guard pool_segment("/dev/shm/shmbox-pool." + pool);
  // Three lanes of 2: plain posts go to lane 1 (2 stored, 1 rejected), one into lane 2.
  REQUIRE(cli({"create", lanes.name, "--lanes", "3", "--capacity", "2"}).code == 0);
  CHECK(cli({"post", lanes.name, "x", "y", "z"}).code == 3);
  CHECK(cli({"post", lanes.name, "--lane", "2", "w"}).code == 0);
  // A full reject box: 1 stored, 1 rejected.
  REQUIRE(cli({"create", full.name, "--capacity", "1"}).code == 0);
  CHECK(cli({"post", full.name, "a", "b"}).code == 3);
  REQUIRE(cli({"pool", "create", pool, "--command", "exec sleep 30", "--max", "3"}).code == 0);

  if (find_promtool().empty())
    MESSAGE("promtool is not installed (Debian: apt-get install prometheus): only the built-in checker ran");
  const auto r = cli({"metrics"}, 30s);
  INFO("stderr:\n", r.err);
  REQUIRE(r.code == 0);
  INFO("exposition:\n", r.out);
  // Other segments of the machine may be warned about; never ours.
  for (const std::string& ours : {lanes.name, full.name, pool}) CHECK(r.err.find(ours) == std::string::npos);
  prometheus_checker pc("");
  check_exposition(pc, r.out);

  const auto& s = pc.samples();
  const auto lane = [](const std::string& box, const char* l) {
    return std::map<std::string, std::string>{{"box", box}, {"lane", l}};
  };
  CHECK(value_of(s, "shmbox_depth_messages", lane(lanes.name, "0")) == 0);
  CHECK(value_of(s, "shmbox_depth_messages", lane(lanes.name, "1")) == 2);
  CHECK(value_of(s, "shmbox_depth_messages", lane(lanes.name, "2")) == 1);
  CHECK(value_of(s, "shmbox_posted_total", lane(lanes.name, "1")) == 3);
  CHECK(value_of(s, "shmbox_rejected_total", lane(lanes.name, "1")) == 1);
  CHECK(value_of(s, "shmbox_rejected_total", lane(lanes.name, "2")) == 0);
  CHECK(value_of(s, "shmbox_lanes", {{"box", lanes.name}}) == 3);
  CHECK(value_of(s, "shmbox_depth_messages", lane(full.name, "0")) == 1);
  CHECK(value_of(s, "shmbox_posted_total", lane(full.name, "0")) == 2);
  CHECK(value_of(s, "shmbox_rejected_total", lane(full.name, "0")) == 1);
  CHECK(value_of(s, "shmbox_capacity_messages", lane(full.name, "0")) == 1);
  CHECK(std::isnan(value_of(s, "shmbox_depth_messages", lane(full.name, "1"))));  // one lane only
  CHECK(value_of(s, "shmbox_pool_members_max", {{"pool", pool}}) == 3);
  CHECK(value_of(s, "shmbox_metrics_exported_segments", {{"kind", "box"}}) >= 2);
  CHECK(value_of(s, "shmbox_metrics_exported_segments", {{"kind", "pool"}}) >= 1);
  CHECK(!std::isnan(value_of(s, "shmbox_metrics_unreadable_segments", {{"kind", "box"}})));

  // Dashboards built on stat --prometheus keep working: each of its lines
  // (HELP, TYPE, samples: names, labels, values) is in the host's text as is.
  for (const std::vector<std::string>& per : {std::vector<std::string>{"stat", lanes.name, "--prometheus"},
                                                {"stat", full.name, "--prometheus"},
                                                {"pool", "stat", pool, "--prometheus"}}) {
    const auto one = cli(per);
    REQUIRE(one.code == 0);
    std::size_t lines = 0;
    for (const auto& l : shmtest::lines_of(one.out)) {
      CAPTURE(l);
      CHECK(r.out.find("\n" + l + "\n") != std::string::npos);
      ++lines;
    }
    CHECK(lines > 50);
  }
}

TEST_CASE("cli metrics: a FIFO, garbage, a link and a directory at box paths, FIFOs at a pool and a bridge status "
          "path: skipped at once, a warning each on stderr, counted; the good box exported") {
  const std::string prefix = shmtest::unique_name("mplant") + "-";
  shmtest::segment_guard good(prefix + "good"), fifo(prefix + "fifo"), junk(prefix + "junk"), link(prefix + "link");
  path_guard dir("/dev/shm/shmbox." + prefix + "dir"), pool_fifo("/dev/shm/shmbox-pool." + prefix + "pfifo"),
      bridge_fifo("/dev/shm/shmbox-bridge." + good.name + ".export");
  REQUIRE(cli({"create", good.name, "--capacity", "4"}).code == 0);
  REQUIRE(cli({"post", good.name, "a", "b", "c"}).code == 0);
  REQUIRE(::mkfifo(("/dev/shm/shmbox." + fifo.name).c_str(), 0600) == 0);
  std::string garbage;
  for (int i = 0; i < 8192; ++i) garbage += static_cast<char>((i * 37 + 11) & 0xFF);
  shmtest::write_raw_segment(junk.name, garbage);
  REQUIRE(::symlink("/etc/passwd", ("/dev/shm/shmbox." + link.name).c_str()) == 0);
  REQUIRE(::mkdir(dir.path.c_str(), 0700) == 0);
  REQUIRE(::mkfifo(pool_fifo.path.c_str(), 0600) == 0);
  REQUIRE(::mkfifo(bridge_fifo.path.c_str(), 0600) == 0);
  // Empty files at box paths (a creator that never sized its segment, or
  // planted): a read-write open waits a second for the creator; a scrape must
  // not pay that per file (12 of them: 12 s before, well under 10 s now).
  std::vector<std::unique_ptr<shmtest::segment_guard>> empties;
  for (int i = 0; i < 12; ++i) {
    empties.push_back(std::make_unique<shmtest::segment_guard>(prefix + "empty" + std::to_string(i)));
    shmtest::write_raw_segment(empties.back()->name, "");
  }

  // Opening a FIFO for reading would block: the command is killed after 20 s
  // (exit code -1 then) and must answer well before.
  const auto start = std::chrono::steady_clock::now();
  const auto r = cli({"metrics"}, 20s);
  const auto took = std::chrono::steady_clock::now() - start;
  INFO("stderr:\n", r.err);
  REQUIRE(r.code == 0);
  CHECK(took < 10s);
  INFO("exposition:\n", r.out);
  prometheus_checker pc("");
  check_exposition(pc, r.out);
  const auto& s = pc.samples();
  CHECK(value_of(s, "shmbox_depth_messages", {{"box", good.name}, {"lane", "0"}}) == 3);
  CHECK(value_of(s, "shmbox_posted_total", {{"box", good.name}, {"lane", "0"}}) == 3);
  CHECK(value_of(s, "shmbox_metrics_unreadable_segments", {{"kind", "box"}}) >= 4 + 12);
  CHECK(value_of(s, "shmbox_metrics_unreadable_segments", {{"kind", "pool"}}) >= 1);
  CHECK(value_of(s, "shmbox_metrics_unreadable_segments", {{"kind", "bridge"}}) >= 1);
  // The planted bridge path is not a bridge of the good box.
  CHECK(std::isnan(value_of(s, "shmbox_bridge_info", {{"box", good.name}})));

  // Warnings go to stderr, a line each naming the file; stdout has none of them.
  for (const auto& l : shmtest::lines_of(r.err)) {
    CAPTURE(l);
    CHECK(l.rfind("shmbox: warning: ", 0) == 0);
  }
  for (const std::string& planted :
       {"shmbox." + fifo.name, "shmbox." + junk.name, "shmbox." + link.name, dir.path, pool_fifo.path, bridge_fifo.path}) {
    CAPTURE(planted);
    std::size_t said = 0;
    for (const auto& l : shmtest::lines_of(r.err)) said += l.find(planted) != std::string::npos ? 1 : 0;
    CHECK(said == 1);
    CHECK(r.out.find(planted) == std::string::npos);
  }
  for (const auto& e : empties) {
    CAPTURE(e->name);
    std::size_t said = 0;
    for (const auto& l : shmtest::lines_of(r.err)) said += l.find("'" + e->name + "'") != std::string::npos ? 1 : 0;
    CHECK(said == 1);
  }
  CHECK(r.out.find(fifo.name) == std::string::npos);
  CHECK(r.out.find("shmbox: warning") == std::string::npos);
}
