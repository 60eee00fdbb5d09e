// `shmbox metrics --listen ADDR:PORT`: the host's exposition over HTTP. The
// listener runs as a separate process (fork + exec of the CLI), found by its
// "listening on" line; the requests are plain sockets (http_client.hpp).
// Each GET builds a fresh exposition: a post between two GETs shows in the
// second. / hints at /metrics, other paths are 404; a port in use is exit 1
// naming the address, a malformed one exit 2; SIGTERM ends it with exit 0.
// The protocol: 62 malformed, refused and odd requests each get their status
// (400, 405, 413, 414, 431, 501, 505; 200 or 404 for the odd but valid), one
// line and the close; HTTP/1.1 keeps a connection (pipelined requests
// answered in order), HEAD gets GET's headers; 1,000 concurrent scrapes are
// all answered. The bounds against hostile clients:
// cli_metrics_http_bounds.cpp.
#include <doctest/doctest.h>

#include <chrono>
#include <cstring>
#include <map>
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

TEST_CASE("cli metrics --listen: malformed, refused and odd requests each get their status, one line of text, and "
          "the connection closed; the listener serves on") {
  httptest::listener l;
  INFO("listener said: ", l.line);
  REQUIRE(l.port > 0);
  const std::string host = "Host: 127.0.0.1\r\n";
  struct exchange_case {
    std::string request;
    int status;
  };
  const std::vector<exchange_case> cases = {
      // The request line.
      {"GET\r\n\r\n", 400},
      {"GET /metrics\r\n\r\n", 400},  // HTTP/0.9
      {"GET  /metrics HTTP/1.0\r\n\r\n", 400},
      {"GET /metrics  HTTP/1.0\r\n\r\n", 400},
      {"GET /metrics HTTP/1.0 \r\n\r\n", 400},
      {" GET /metrics HTTP/1.0\r\n\r\n", 400},
      {"GET /metrics http/1.0\r\n\r\n", 400},
      {"GET /metrics HTTP/1.0x\r\n\r\n", 400},
      {"GET /metrics HTTP/10.0\r\n\r\n", 400},
      {"GET /metrics HTTP/1\r\n\r\n", 400},
      {"GET /metrics HTTP/2.0\r\n\r\n", 505},
      {"GET /metrics HTTP/0.9\r\n\r\n", 505},
      {"G(T /metrics HTTP/1.0\r\n\r\n", 400},
      {std::string("GE\0T /metrics HTTP/1.0\r\n\r\n", 26), 400},
      {"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 400},  // a TLS ClientHello
      {"GET metrics HTTP/1.0\r\n\r\n", 400},
      {"GET * HTTP/1.0\r\n\r\n", 400},
      {"GET /met\x01rics HTTP/1.0\r\n\r\n", 400},
      {"GET /m\xc3\xa9trics HTTP/1.0\r\n\r\n", 400},
      {"GET /metrics%zz HTTP/1.0\r\n\r\n", 400},
      {"GET /metrics%0 HTTP/1.0\r\n\r\n", 400},
      {"GET /metrics%00 HTTP/1.0\r\n\r\n", 400},
      {"GET ftp://127.0.0.1/metrics HTTP/1.0\r\n\r\n", 400},
      // Methods.
      {"POST /metrics HTTP/1.0\r\nContent-Length: 3\r\n\r\nabc", 405},
      {"PUT /metrics HTTP/1.0\r\n\r\n", 405},
      {"DELETE / HTTP/1.0\r\n\r\n", 405},
      {"OPTIONS * HTTP/1.0\r\n\r\n", 405},
      {"CONNECT 127.0.0.1:80 HTTP/1.0\r\n\r\n", 405},
      {"get /metrics HTTP/1.0\r\n\r\n", 405},  // methods are case-sensitive
      // Header lines.
      {"GET /metrics HTTP/1.1\r\n\r\n", 400},                                   // HTTP/1.1 without Host
      {"GET /metrics HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400},              // two Hosts
      {"GET /metrics HTTP/1.0\r\nNo colon here\r\n\r\n", 400},
      {"GET /metrics HTTP/1.0\r\nBad Name: x\r\n\r\n", 400},
      {"GET /metrics HTTP/1.0\r\nName : x\r\n\r\n", 400},
      {"GET /metrics HTTP/1.0\r\n: x\r\n\r\n", 400},
      {"GET /metrics HTTP/1.0\r\nX: a\r\n folded\r\n\r\n", 400},
      {std::string("GET /metrics HTTP/1.0\r\nX: a\0b\r\n\r\n", 33), 400},
      {"GET /metrics HTTP/1.0\r\nX: a\rb\r\n\r\n", 400},
      {"GET /metrics HTTP/1.0\r\nX: a\x7f\r\n\r\n", 400},
      // Bodies: none is read beyond 1 KiB; chunked never.
      {"GET /metrics HTTP/1.0\r\nContent-Length: abc\r\n\r\n", 400},
      {"GET /metrics HTTP/1.0\r\nContent-Length: -1\r\n\r\n", 400},
      {"GET /metrics HTTP/1.0\r\nContent-Length: 1, 1\r\n\r\n", 400},
      {"GET /metrics HTTP/1.0\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", 400},
      {"GET /metrics HTTP/1.0\r\nContent-Length: 1048576\r\n\r\n", 413},
      {"GET /metrics HTTP/1.0\r\nContent-Length: 99999999999999999999999999\r\n\r\n", 413},
      {"GET /metrics HTTP/1.1\r\n" + host + "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 413},
      {"GET /metrics HTTP/1.1\r\n" + host + "Transfer-Encoding: gzip\r\n\r\n", 501},
      {"GET /metrics HTTP/1.1\r\n" + host + "Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\nhello", 400},
      {"GET /metrics HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400},
      // Sizes: the request line, the head, the number of header lines.
      {"GET /" + std::string(9000, 'm') + " HTTP/1.0\r\n\r\n", 414},
      {"GET /metrics HTTP/1.0\r\nX: " + std::string(8300, 'a') + "\r\n\r\n", 431},
      {[] {
         std::string r = "GET /metrics HTTP/1.0\r\n";
         for (int i = 0; i < 65; ++i) r += "X-" + std::to_string(i) + ": a\r\n";
         return r + "\r\n";
       }(),
       431},
      // Accepted, though odd.
      {"GET /metrics HTTP/1.1\nHost: x\nConnection: close\n\n", 200},  // bare LF line ends
      {"\r\nGET /metrics HTTP/1.0\r\n\r\n", 200},                     // an empty line first
      {"GET http://127.0.0.1/metrics HTTP/1.1\r\n" + host + "Connection: close\r\n\r\n", 200},
      {"GET /metrics?name[]=x HTTP/1.0\r\n\r\n", 200},
      {"GET /%6detrics HTTP/1.0\r\n\r\n", 200},
      {"GET /metrics HTTP/1.0\r\nRange: bytes=0-9\r\n\r\n", 200},  // Range is ignored: the whole text
      {"GET /metrics HTTP/1.0\r\nContent-Length: 5\r\n\r\nhello", 200},
      {"GET /metrics HTTP/1.2\r\n" + host + "Connection: close\r\n\r\n", 200},  // a later HTTP/1.x is read as 1.1
      {"GET /metrics/ HTTP/1.0\r\n\r\n", 404},
      {"GET /metricsX HTTP/1.0\r\n\r\n", 404},
  };
  for (const auto& c : cases) {
    CAPTURE(c.request.substr(0, 120));
    std::string rest;
    const auto r = httptest::exchange(l.port, c.request, 20s, &rest);
    INFO("error: ", r.error, "; answer headers: ", r.headers, "; body: ", r.body.substr(0, 300));
    CHECK(r.status == c.status);
    CHECK(rest.empty());  // one answer, then the close
    if (r.status == 200) {
      CHECK(r.body.find("# TYPE shmbox_metrics_exported_segments gauge") != std::string::npos);
      CHECK(r.header("Content-Range").empty());
    } else {
      CHECK(r.header("Connection") == "close");
      CHECK(r.body.find('\n') == r.body.size() - 1);  // one line, saying what to do
      CHECK(r.body.size() > 10);
    }
    if (r.status == 405) CHECK(r.header("Allow") == "GET, HEAD");
  }
  CHECK(httptest::get(l.port, "/metrics").status == 200);
  l.process.kill(SIGTERM);
  CHECK(shmtest::exited_with(l.process.wait(20s), 0));
}

TEST_CASE("cli metrics --listen: HTTP/1.1 keeps the connection for the next request (pipelined too); HEAD gets the "
          "headers of GET without the body") {
  httptest::listener l;
  INFO("listener said: ", l.line);
  REQUIRE(l.port > 0);
  httptest::connection c(l.port);
  REQUIRE_MESSAGE(c.fd >= 0, c.error);
  const auto deadline = httptest::steady::now() + 20s;
  const std::string host = "Host: 127.0.0.1\r\n";
  std::string stream;
  // One request, its answer, and another on the same connection.
  REQUIRE(c.send_all("GET /metrics HTTP/1.1\r\n" + host + "\r\n", deadline));
  std::optional<httptest::response> first;
  while (!(first = httptest::take_response(stream))) REQUIRE(c.receive(stream, deadline) == 1);
  CHECK(first->status == 200);
  CHECK(first->header("Connection") == "keep-alive");
  CHECK(first->body.find("# TYPE shmbox_metrics_exported_segments gauge") != std::string::npos);
  // Three pipelined in one write: answered in order; the last closes.
  REQUIRE(c.send_all("HEAD /metrics HTTP/1.1\r\n" + host + "\r\nGET / HTTP/1.1\r\n" + host + "\r\nGET /metrics HTTP/1.1\r\n" +
                         host + "Connection: close\r\n\r\n",
                     deadline));
  REQUIRE(c.receive_all(stream, deadline));
  const auto head = httptest::take_response(stream, true);
  REQUIRE(head);
  CHECK(head->status == 200);
  CHECK(head->body.empty());
  CHECK(head->header("Content-Type") == "text/plain; version=0.0.4; charset=utf-8");
  CHECK(std::atol(head->header("Content-Length").c_str()) > 0);
  const auto root = httptest::take_response(stream);
  REQUIRE(root);
  CHECK(root->status == 200);
  CHECK(root->body.find("/metrics") != std::string::npos);
  const auto last = httptest::take_response(stream);
  REQUIRE(last);
  CHECK(last->status == 200);
  CHECK(last->header("Connection") == "close");
  CHECK(last->body.find("# TYPE shmbox_metrics_exported_segments gauge") != std::string::npos);
  CHECK(stream.empty());
}

TEST_CASE("cli metrics --listen: 1,000 concurrent scrapes are all answered with the exposition") {
  httptest::listener l;
  INFO("listener said: ", l.line);
  REQUIRE(l.port > 0);
  constexpr std::size_t kClients = 1000;
  struct client {
    explicit client(int port) : c(port, 20s, false) {}
    httptest::connection c;
    std::size_t sent = 0;
    std::string got;
    std::string error;  // why it ended early
    bool done = false;
  };
  const std::string request = "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
  std::vector<client> clients;
  clients.reserve(kClients);
  for (std::size_t i = 0; i < kClients; ++i) {
    clients.emplace_back(l.port);
    REQUIRE_MESSAGE(clients.back().c.fd >= 0, clients.back().c.error);
  }
  // One poll loop drives them all: send when writable, read until the close.
  const auto t0 = httptest::steady::now();
  const auto deadline = t0 + 90s;
  std::size_t left = kClients;
  while (left > 0 && httptest::steady::now() < deadline) {
    std::vector<pollfd> fds;
    std::vector<client*> who;
    for (auto& cl : clients)
      if (!cl.done) {
        fds.push_back({cl.c.fd, static_cast<short>(cl.sent < request.size() ? POLLOUT : POLLIN), 0});
        who.push_back(&cl);
      }
    const int ready = ::poll(fds.data(), fds.size(), httptest::left_ms(deadline));
    if (ready < 0 && errno != EINTR) FAIL("poll: " << std::strerror(errno));
    for (std::size_t i = 0; ready > 0 && i < fds.size(); ++i) {
      client& cl = *who[i];
      if (fds[i].revents == 0) continue;
      const auto end = [&](const char* what) {
        cl.done = true;
        cl.error = std::string(what) + ": " + std::strerror(errno);
        --left;
      };
      if (cl.sent < request.size()) {
        const ssize_t n = ::send(cl.c.fd, request.data() + cl.sent, request.size() - cl.sent, MSG_NOSIGNAL);
        if (n > 0) cl.sent += static_cast<std::size_t>(n);
        else if (errno != EAGAIN && errno != EINTR) end("send");
        continue;
      }
      char buf[65536];
      const ssize_t n = ::recv(cl.c.fd, buf, sizeof buf, 0);
      if (n > 0) {
        cl.got.append(buf, static_cast<std::size_t>(n));
      } else if (n == 0) {
        cl.done = true;
        --left;
      } else if (errno != EAGAIN && errno != EINTR) {
        end("recv");
      }
    }
  }
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(httptest::steady::now() - t0).count();
  std::size_t answered = 0;
  std::map<std::string, int> others;  // what the others got, by kind
  for (auto& cl : clients) {
    const auto r = httptest::take_response(cl.got, false, true);
    if (r && r->status == 200 && cl.got.empty() &&
        r->body.find("# TYPE shmbox_metrics_exported_segments gauge") != std::string::npos)
      ++answered;
    else
      ++others[!cl.done ? "no answer in 90 s" : !cl.error.empty() ? cl.error : r ? "status " + std::to_string(r->status) : "cut short"];
  }
  std::string other_text;
  for (const auto& [what, n] : others) other_text += std::to_string(n) + " got: " + what + "; ";
  INFO("the others: ", other_text);
  INFO("answered in ", ms, " ms");
  CHECK(answered == kClients);
  MESSAGE("1,000 concurrent scrapes: ", answered, " answered in ", ms, " ms");
  CHECK(httptest::get(l.port, "/metrics").status == 200);
}
