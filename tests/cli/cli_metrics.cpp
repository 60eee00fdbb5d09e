// `shmbox metrics`: one Prometheus exposition for the whole host. Checked by
// the strict checker of prometheus_check.hpp and `promtool check metrics`
// when it is installed: each family's HELP and TYPE once with the samples of
// every box and pool under it, the same lines as `stat --prometheus` and
// `pool stat --prometheus` (dashboards keep working), and segments that are
// not boxes skipped at once, warned about on stderr and counted.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "../../bridge/status_layout.hpp"
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

// ---- bridge status segments and THE TRUST RULE (lib/base/shm_file.hpp T3, T5;
// issue 53 item 3). A status segment is shown for box B only when its owner
// is B's owner, this user or root, and nobody else may write it; it is read
// through a private copy (pread), so a truncation cannot kill the reader.
namespace {

namespace bl = shmbox_cli;  // bridge/status_layout.hpp

// The bytes a working bridge of `role` (1 export, 2 import) leaves in its
// status segment: state connected, pid `pid`, its first counter (published,
// or imported) = `count`.
std::string status_image(std::uint32_t role, std::uint64_t count, std::uint64_t pid) {
  std::string img(sizeof(bl::bridge_status_segment), '\0');
  const auto put = [&img](std::size_t off, const auto v) { std::memcpy(img.data() + off, &v, sizeof v); };
  put(offsetof(bl::bridge_status_segment, magic), bl::kBridgeStatusMagic);
  put(offsetof(bl::bridge_status_segment, version), bl::kBridgeStatusVersion);
  put(offsetof(bl::bridge_status_segment, role), role);
  put(offsetof(bl::bridge_status_segment, pid), pid);
  put(offsetof(bl::bridge_status_segment, state), std::uint32_t{1});  // connected
  const std::size_t counter = role == 1 ? 0 : 6;                      // published, imported (bridge_status.hpp)
  put(offsetof(bl::bridge_status_segment, counters) + 8 * counter, count);
  const std::string nats = "nats://planted:4222";
  std::memcpy(img.data() + offsetof(bl::bridge_status_segment, nats), nats.data(), nats.size());
  return img;
}

// A process of uid 65534 (forked from this root test) that makes `path`
// with `mode`, writes `image` into it, holds the exclusive lock on byte 0
// that a working bridge holds (or, `read_lock`, opens an existing file
// read-only and holds a read lock on byte 0, as any reader may), and stays
// until it goes out of scope.
class other_user_holder {
 public:
  other_user_holder(const std::string& path, mode_t mode, const std::string& image, bool read_lock = false) {
    int ready[2], done[2];
    REQUIRE(::pipe2(ready, O_CLOEXEC) == 0);
    REQUIRE(::pipe2(done, O_CLOEXEC) == 0);
    pid_ = ::fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      ::close(ready[0]);
      ::close(done[1]);
      if (::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(3);
      const int fd = read_lock ? ::open(path.c_str(), O_RDONLY | O_CLOEXEC)
                               : ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
      if (fd < 0) ::_exit(4);
      if (!read_lock && (::fchmod(fd, mode) != 0 || ::pwrite(fd, image.data(), image.size(), 0) != static_cast<ssize_t>(image.size())))
        ::_exit(5);
      struct flock fl {};
      fl.l_type = read_lock ? F_RDLCK : F_WRLCK;
      fl.l_whence = SEEK_SET;
      fl.l_len = 1;
      if (::fcntl(fd, F_OFD_SETLK, &fl) != 0) ::_exit(6);
      const char r = 'r';
      if (::write(ready[1], &r, 1) != 1) ::_exit(7);
      char c;
      while (::read(done[0], &c, 1) > 0) {
      }
      ::_exit(0);
    }
    ::close(ready[1]);
    ::close(done[0]);
    done_ = done[1];
    char r = 0;
    const bool up = ::read(ready[0], &r, 1) == 1;
    ::close(ready[0]);
    if (!up) {
      stop();
      FAIL("the uid 65534 process could not set up " << path << " (exit " << WEXITSTATUS(status_) << ")");
    }
  }
  ~other_user_holder() { stop(); }
  other_user_holder(const other_user_holder&) = delete;
  other_user_holder& operator=(const other_user_holder&) = delete;

 private:
  void stop() {
    if (done_ >= 0) ::close(done_);
    done_ = -1;
    if (pid_ > 0) ::waitpid(pid_, &status_, 0);
    pid_ = -1;
  }
  pid_t pid_ = -1;
  int done_ = -1;
  int status_ = 0;
};

// A status segment at `path` made by this process (root): `image`, `mode` exactly.
void write_status(const std::string& path, const std::string& image, mode_t mode) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  REQUIRE(fd >= 0);
  REQUIRE(::fchmod(fd, mode) == 0);
  REQUIRE(::pwrite(fd, image.data(), image.size(), 0) == static_cast<ssize_t>(image.size()));
  ::close(fd);
}

bool can_be_another_user() {
  if (::geteuid() == 0) return true;
  MESSAGE("skipped: needs root (a second uid, 65534, is a forked child)");
  return false;
}

// `shmbox stat BOX --json`'s bridges, and its stderr.
std::pair<nlohmann::json, std::string> stat_bridges(const std::string& box) {
  const auto r = cli({"stat", box, "--json"}, 20s);
  INFO("stat stderr:\n", r.err);
  REQUIRE(r.code == 0);
  return {nlohmann::json::parse(r.out)["bridges"], r.err};
}

}  // namespace

TEST_CASE("cli metrics and stat: a bridge status another user planted, its lock held, is not shown for root's box; "
          "a warning says why and the metrics count it") {
  if (!can_be_another_user()) return;
  shmtest::segment_guard box(shmtest::unique_name("mtrust"));
  REQUIRE(cli({"create", box.name, "--capacity", "4", "--mode", "0666"}).code == 0);
  for (const char* role : {"export", "import"}) {
    CAPTURE(role);
    const std::string path = "/dev/shm/shmbox-bridge." + box.name + "." + role;
    for (const mode_t mode : {mode_t{0644}, mode_t{0666}}) {
      CAPTURE(mode);
      path_guard guard(path);
      // A live, connected bridge with chosen counters: what would mute (or fire) ShmboxBridgeDisconnected.
      other_user_holder planter(path, mode, status_image(std::string(role) == "export" ? 1 : 2, 1000000000000ull, 4242));

      const auto r = cli({"metrics"}, 30s);
      INFO("metrics stderr:\n", r.err);
      REQUIRE(r.code == 0);
      prometheus_checker pc("");
      const auto problems = pc.check(r.out);
      CHECK(problems.empty());
      const auto& s = pc.samples();
      CHECK(std::isnan(value_of(s, "shmbox_bridge_info", {{"box", box.name}, {"role", role}})));
      CHECK(std::isnan(value_of(s, "shmbox_bridge_alive", {{"box", box.name}, {"role", role}})));
      CHECK(r.out.find("shmbox_bridge_published_total{box=\"" + box.name) == std::string::npos);
      CHECK(r.out.find("shmbox_bridge_imported_total{box=\"" + box.name) == std::string::npos);
      CHECK(value_of(s, "shmbox_metrics_unreadable_segments", {{"kind", "bridge"}}) >= 1);
      // The warning names the file, whose it is and what to do.
      std::size_t said = 0;
      for (const auto& l : shmtest::lines_of(r.err))
        if (l.find(path) != std::string::npos) {
          ++said;
          CHECK(l.find("is not shown") != std::string::npos);
          CHECK(l.find("uid 65534") != std::string::npos);
          CHECK(l.find("rm " + path) != std::string::npos);
        }
      CHECK(said == 1);

      const auto [bridges, err] = stat_bridges(box.name);
      CHECK(bridges.empty());
      CHECK(err.find("warning: the " + std::string(role) + " bridge status of box '" + box.name + "' is not shown") !=
            std::string::npos);
      CHECK(err.find("uid 65534") != std::string::npos);
    }
  }
}

TEST_CASE("cli stat: a bridge status is shown when the box's owner, this user or root owns it and nobody else may write it") {
  if (!can_be_another_user()) return;
  shmtest::segment_guard box(shmtest::unique_name("mtrustown"));
  REQUIRE(cli({"create", box.name, "--capacity", "4", "--mode", "0644"}).code == 0);
  const std::string path = "/dev/shm/shmbox-bridge." + box.name + ".import";
  {
    // The box belongs to uid 65534 (its bridge runs as that user): its 0644 status is shown, alive.
    REQUIRE(::chown(("/dev/shm/shmbox." + box.name).c_str(), 65534, 65534) == 0);
    path_guard guard(path);
    other_user_holder bridge(path, 0644, status_image(2, 7, 4242));
    const auto [bridges, err] = stat_bridges(box.name);
    CAPTURE(err);
    REQUIRE(bridges.size() == 1);
    CHECK(bridges[0]["alive"] == true);
    CHECK(bridges[0]["state"] == "connected");
    CHECK(bridges[0]["counters"]["imported"] == 7);
    CHECK(err.find(path) == std::string::npos);
  }
  {
    // Root's own status, but others may write it (0666 or 0664): not shown.
    REQUIRE(::chown(("/dev/shm/shmbox." + box.name).c_str(), 0, 0) == 0);
    for (const mode_t mode : {mode_t{0666}, mode_t{0664}}) {
      CAPTURE(mode);
      path_guard guard(path);
      write_status(path, status_image(2, 7, 4242), mode);
      const auto [bridges, err] = stat_bridges(box.name);
      CHECK(bridges.empty());
      CHECK(err.find("is not shown") != std::string::npos);
      CHECK(err.find(path) != std::string::npos);
    }
    // 0644: shown (no bridge holds its lock: stopped).
    path_guard guard(path);
    write_status(path, status_image(2, 7, 4242), 0644);
    const auto [bridges, err] = stat_bridges(box.name);
    CAPTURE(err);
    REQUIRE(bridges.size() == 1);
    CHECK(bridges[0]["alive"] == false);
    CHECK(bridges[0]["state"] == "stopped");
  }
}

TEST_CASE("cli stat: a read lock another user takes on a readable bridge status does not make a dead bridge alive") {
  if (!can_be_another_user()) return;
  shmtest::segment_guard box(shmtest::unique_name("mrdlock"));
  REQUIRE(cli({"create", box.name, "--capacity", "4", "--mode", "0644"}).code == 0);
  const std::string path = "/dev/shm/shmbox-bridge." + box.name + ".export";
  path_guard guard(path);
  write_status(path, status_image(1, 5, 4242), 0644);  // root's, as a bridge that died left it: state connected
  other_user_holder reader(path, 0, "", true);          // uid 65534 may read it, so it may read-lock it
  const auto [bridges, err] = stat_bridges(box.name);
  CAPTURE(err);
  REQUIRE(bridges.size() == 1);
  CHECK(bridges[0]["alive"] == false);  // a bridge holds a write lock; a read lock is nobody's liveness
  CHECK(bridges[0]["state"] == "stopped");
  const auto r = cli({"stat", box.name, "--prometheus"}, 20s);
  REQUIRE(r.code == 0);
  CHECK(r.out.find("shmbox_bridge_alive{box=\"" + box.name + "\",role=\"export\"} 0") != std::string::npos);
}

TEST_CASE("cli metrics and stat: a bridge status truncated and rewritten in a loop while they read it: never a crash") {
  shmtest::segment_guard box(shmtest::unique_name("mtrunc"));
  REQUIRE(cli({"create", box.name, "--capacity", "4"}).code == 0);
  const std::string path = "/dev/shm/shmbox-bridge." + box.name + ".import";
  path_guard guard(path);
  const std::string image = status_image(2, 9, 4242);
  write_status(path, image, 0600);
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  REQUIRE(fd >= 0);
  // Its owner (a bridge restarting, or anyone who may write it) cuts it to
  // nothing and writes it again, over and over.
  std::atomic<bool> stop{false};
  std::thread truncator([&] {
    while (!stop.load()) {
      (void)::ftruncate(fd, 0);
      (void)::pwrite(fd, image.data(), image.size(), 0);
    }
  });
  int runs = 0, signalled = 0, shown = 0;
  std::string last_err;
  const auto until = std::chrono::steady_clock::now() + 6s;
  while (std::chrono::steady_clock::now() < until || runs < 20) {
    const bool metrics = runs % 4 == 3;  // a host-wide scrape now and then, stat --json mostly (cheaper)
    const auto r = metrics ? cli({"metrics"}, 30s) : cli({"stat", box.name, "--json"}, 20s);
    ++runs;
    if (WIFSIGNALED(r.status)) {
      ++signalled;
      last_err = std::string(metrics ? "metrics" : "stat") + " killed by signal " + std::to_string(WTERMSIG(r.status));
    } else if (!metrics && r.code == 0 && !nlohmann::json::parse(r.out)["bridges"].empty()) {
      ++shown;
    }
    if (runs >= 400) break;
  }
  stop.store(true);
  truncator.join();
  ::close(fd);
  MESSAGE(runs << " reads, " << shown << " showed the import bridge, " << signalled << " killed by a signal");
  CHECK_MESSAGE(signalled == 0, last_err);
}
