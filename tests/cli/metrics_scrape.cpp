// A real Prometheus server scrapes `shmbox metrics --listen`: Debian's
// prometheus binary (SHMBOX_PROMETHEUS, else prometheus on PATH) with a
// scrape interval of 1 s and the listener as its one static target, its TSDB
// in a temporary directory. The test posts into a box (some refused by a full
// reject box), then asks Prometheus's HTTP API until the depth and the
// counters it stored are the box's; then receives and waits for the new
// depth. Skipped (a MESSAGE) only when no prometheus binary is installed.
// Both processes are killed and the directory removed whatever happens.
#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "http_client.hpp"
#include "support.hpp"

using namespace std::chrono_literals;

namespace {

using shmtest::cli;  // tests/support/support.hpp

// SHMBOX_PROMETHEUS, or prometheus on PATH, or /usr/bin/prometheus; "" if none.
std::string find_prometheus() {
  if (const char* p = std::getenv("SHMBOX_PROMETHEUS"); p != nullptr && *p != '\0') return ::access(p, X_OK) == 0 ? p : "";
  const char* path = std::getenv("PATH");
  std::istringstream dirs(std::string(path != nullptr ? path : "") + ":/usr/bin");
  for (std::string d; std::getline(dirs, d, ':');) {
    const std::string p = (d.empty() ? "." : d) + "/prometheus";
    if (::access(p.c_str(), X_OK) == 0) return p;
  }
  return {};
}

// A temporary directory, removed with everything in it at the end of scope.
struct temp_dir {
  std::string path;
  temp_dir() {
    char tmpl[] = "/tmp/shmbox-prometheus-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) throw std::runtime_error("mkdtemp failed");
    path = tmpl;
  }
  ~temp_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;
};

// The one value of an instant query's answer, as Prometheus writes it ("3"),
// "" when it has no sample (yet) or the answer is not one.
std::string query_value(int port, const std::string& promql, std::string* raw) {
  const auto r = httptest::get(port, "/api/v1/query?query=" + httptest::url_encode(promql), 10s);
  *raw = r.error.empty() ? r.body : r.error;
  if (r.status != 200) return {};
  const auto j = nlohmann::json::parse(r.body, nullptr, false);
  if (j.is_discarded() || j.value("status", "") != "success") return {};
  const auto& result = j["data"]["result"];
  if (!result.is_array() || result.size() != 1) return {};
  const auto& value = result[0]["value"];  // [ <time>, "<value>" ]
  return value.is_array() && value.size() == 2 && value[1].is_string() ? value[1].get<std::string>() : "";
}

// The last lines of a file (prometheus's log, for a failure's message).
std::string tail_of(const std::string& path, std::size_t lines = 20) {
  const auto all = shmtest::lines_of(shmtest::read_text(path));
  std::string out;
  for (std::size_t i = all.size() > lines ? all.size() - lines : 0; i < all.size(); ++i) out += all[i] + "\n";
  return out;
}

}  // namespace

TEST_CASE("metrics scrape: a real Prometheus server scrapes shmbox metrics --listen every second and stores the box's "
          "depth and counters as they change") {
  const std::string prometheus = find_prometheus();
  if (prometheus.empty()) {
    MESSAGE("no prometheus binary (Debian: apt-get install prometheus): the real-server scrape is not tested");
    return;
  }
  shmtest::segment_guard box(shmtest::unique_name("mscrape"));
  temp_dir dir;
  httptest::listener l;
  INFO("listener said: ", l.line);
  REQUIRE(l.port > 0);

  const std::string config = dir.path + "/prometheus.yml", log = dir.path + "/prometheus.log";
  {
    std::ofstream f(config);
    f << "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n"
         "scrape_configs:\n  - job_name: shmbox\n    static_configs:\n      - targets: ['127.0.0.1:"
      << l.port << "']\n";
  }
  INFO("prometheus log (last lines): ", tail_of(log));

  // Its port is picked free just before; another program may take it
  // meanwhile: then prometheus exits at once, and the test tries another.
  std::optional<shmtest::child> server;
  int port = 0;
  for (int attempt = 0; attempt < 3 && !server; ++attempt) {
    port = httptest::free_port();
    REQUIRE(port > 0);
    // stderr (its log) to a file: a pipe nobody reads would fill and stop it.
    server.emplace(std::vector<std::string>{"/bin/sh", "-c", "exec \"$@\" 2>>\"$0\"", log, prometheus,
                                            "--config.file=" + config, "--storage.tsdb.path=" + dir.path + "/data",
                                            "--web.listen-address=127.0.0.1:" + std::to_string(port),
                                            "--storage.tsdb.retention.time=1h", "--log.level=info"});
    // Ready: /-/ready answers 200 (bounded: a loaded 2-core machine is slow to start it).
    const bool ready = shmtest::eventually([&] {
      if (::waitpid(server->pid(), nullptr, WNOHANG) == server->pid()) return true;  // exited: checked below
      return httptest::get(port, "/-/ready", 2s).status == 200;
    }, 60s);
    REQUIRE(ready);
    if (httptest::get(port, "/-/ready", 2s).status != 200) server.reset();  // it exited: port taken?
  }
  REQUIRE(server);

  // 3 messages fit, 2 are refused (policy reject).
  REQUIRE(cli({"create", box.name, "--capacity", "3"}).code == 0);
  CHECK(cli({"post", box.name, "a", "b", "c", "d", "e"}).code == 3);
  const std::string sel = "{box=\"" + box.name + "\",lane=\"0\"}";
  std::string raw;
  const auto sees = [&](const std::string& promql, const std::string& want) {
    return shmtest::eventually([&] { return query_value(port, promql, &raw) == want; }, 30s);
  };
  CHECK(sees("up{job=\"shmbox\"}", "1"));
  INFO("last answer: ", raw);
  CHECK(sees("shmbox_depth_messages" + sel, "3"));
  CHECK(sees("shmbox_posted_total" + sel, "5"));
  CHECK(sees("shmbox_rejected_total" + sel, "2"));
  CHECK(sees("shmbox_capacity_messages" + sel, "3"));

  // The owner takes two: Prometheus's next scrapes see depth 1 and 2 delivered.
  const auto got = cli({"recv", box.name, "--max", "2"});
  CHECK(got.code == 0);
  CHECK(sees("shmbox_depth_messages" + sel, "1"));
  CHECK(sees("shmbox_delivered_total" + sel, "2"));
  CHECK(sees("sum by (box) (shmbox_posted_total{box=\"" + box.name + "\"})", "5"));

  server->kill(SIGTERM);
  CHECK_FALSE(shmtest::killed_by(server->wait(30s), SIGKILL));  // stopped on SIGTERM, not after the wait
  l.process.kill(SIGTERM);
  CHECK(shmtest::exited_with(l.process.wait(20s), 0));
}
