// `shmbox metrics --listen ADDR:PORT`: the host's exposition over HTTP. The
// listener runs as a separate process (fork + exec of the CLI), found by its
// "listening on" line; the requests are plain sockets (http_client.hpp).
// Each GET builds a fresh exposition: a post between two GETs shows in the
// second. / hints at /metrics, other paths are 404; a port in use is exit 1
// naming the address, a malformed one exit 2; SIGTERM ends it with exit 0.
#include <doctest/doctest.h>

#include <chrono>
#include <string>
#include <vector>

#include "http_client.hpp"
#include "prometheus_check.hpp"
#include "support.hpp"

using namespace std::chrono_literals;
using namespace promcheck;

namespace {

using shmtest::cli;  // tests/support/support.hpp

// The value of `name`{box=BOX,lane=0} in an exposition (NaN: absent); the
// text must pass the strict checker.
double lane0(const std::string& text, const std::string& name, const std::string& box) {
  prometheus_checker pc("");
  const auto problems = pc.check(text);
  for (const auto& p : problems) FAIL_CHECK(p);
  return value_of(pc.samples(), name, {{"box", box}, {"lane", "0"}});
}

}  // namespace

TEST_CASE("cli metrics --listen: GET /metrics is the exposition, fresh on every request; / hints, /nope is 404; "
          "SIGTERM ends it with exit 0") {
  if (!httptest::listen_built()) {
    MESSAGE("shmbox was built without cpp-httplib (apt-get install libcpp-httplib-dev): --listen not tested");
    return;
  }
  shmtest::segment_guard box(shmtest::unique_name("mhttp"));
  REQUIRE(cli({"create", box.name, "--capacity", "4"}).code == 0);
  REQUIRE(cli({"post", box.name, "a", "b"}).code == 0);

  httptest::listener l;
  INFO("listener said: ", l.line);
  REQUIRE(l.port > 0);
  CHECK(l.line == "listening on http://127.0.0.1:" + std::to_string(l.port) + "/metrics");

  const auto first = httptest::get(l.port, "/metrics");
  INFO("error: ", first.error);
  REQUIRE(first.status == 200);
  CHECK(first.header("Content-Type") == "text/plain; version=0.0.4; charset=utf-8");
  CHECK(lane0(first.body, "shmbox_depth_messages", box.name) == 2);
  CHECK(lane0(first.body, "shmbox_posted_total", box.name) == 2);
  promtool_check(find_promtool(), first.body);

  // Posts between two scrapes show in the second (one refused: a full reject box).
  CHECK(cli({"post", box.name, "c", "d", "e"}).code == 3);
  const auto second = httptest::get(l.port, "/metrics");
  INFO("error: ", second.error);
  REQUIRE(second.status == 200);
  CHECK(lane0(second.body, "shmbox_depth_messages", box.name) == 4);
  CHECK(lane0(second.body, "shmbox_posted_total", box.name) == 5);
  CHECK(lane0(second.body, "shmbox_rejected_total", box.name) == 1);
  // A removed box is gone from the next one.
  REQUIRE(cli({"rm", box.name}).code == 0);
  const auto third = httptest::get(l.port, "/metrics");
  REQUIRE(third.status == 200);
  CHECK(third.body.find(box.name) == std::string::npos);

  const auto root = httptest::get(l.port, "/");
  CHECK(root.status == 200);
  CHECK(root.body.find("/metrics") != std::string::npos);
  CHECK(root.body.find('\n') == root.body.size() - 1);  // one line
  const auto nope = httptest::get(l.port, "/nope");
  CHECK(nope.status == 404);
  CHECK(nope.body.find("/metrics") != std::string::npos);

  l.process.kill(SIGTERM);
  const int st = l.process.wait(20s);
  CHECK_FALSE(l.process.timed_out());
  CHECK(shmtest::exited_with(st, 0));
  // Other segments of the machine (other tests plant garbage concurrently:
  // boxes, bridge statuses) may be warned about, a warning line each; never ours.
  const std::string err = l.process.read_stderr();
  INFO("listener stderr:\n", err);
  CHECK(err.find(box.name) == std::string::npos);
  for (const auto& line : shmtest::lines_of(err)) CHECK(line.rfind("shmbox: warning: ", 0) == 0);
}

TEST_CASE("cli metrics --listen: SIGINT ends it with exit 0; a port in use is exit 1 naming the address; a malformed "
          "ADDR:PORT is exit 2") {
  if (!httptest::listen_built()) {
    MESSAGE("shmbox was built without cpp-httplib (apt-get install libcpp-httplib-dev): --listen not tested");
    return;
  }
  httptest::listener l;
  INFO("listener said: ", l.line);
  REQUIRE(l.port > 0);
  // A second listener on the same address: refused (no SO_REUSEPORT sharing).
  const std::string address = "127.0.0.1:" + std::to_string(l.port);
  const auto taken = cli({"metrics", "--listen", address}, 20s);
  INFO("second listener: code ", taken.code, ", stdout: ", taken.out, ", stderr: ", taken.err);
  CHECK(taken.code == 1);
  CHECK(taken.out.empty());
  CHECK(shmtest::lines_of(taken.err).size() == 1);
  CHECK(taken.err.find(address) != std::string::npos);
  // The first one still answers.
  CHECK(httptest::get(l.port, "/metrics").status == 200);

  for (const char* bad : {"9812", "127.0.0.1", "127.0.0.1:", "127.0.0.1:65536", "127.0.0.1:-1", "::1:9812", ":9812",
                          "127.0.0.1:80x", "[]:9812", "a b:9812"}) {
    CAPTURE(bad);
    const auto r = cli({"metrics", "--listen", bad}, 20s);
    CHECK(r.code == 2);
    CHECK(r.out.empty());
    CHECK(shmtest::lines_of(r.err).size() == 1);
  }

  l.process.kill(SIGINT);
  const int st = l.process.wait(20s);
  CHECK_FALSE(l.process.timed_out());
  CHECK(shmtest::exited_with(st, 0));
}
