// `shmbox metrics --listen`: the exporter's bounds against a hostile local
// client (issue 53, findings 4 and 5). The listener runs as a separate
// process (fork + exec of the CLI); the attacks are plain sockets
// (http_client.hpp). Each case is one finding of the acceptance test, and
// each failed against the cpp-httplib server this one replaced:
//   * 2,700 byte ranges in one 8 KB request: answered with ONE exposition
//     (200, Range ignored), the listener's peak resident memory (VmHWM)
//     barely moves (cpp-httplib built 2,700 copies: 206, ~150 MB here);
//   * an endless header section: cut at 8 KiB with 431, memory flat (it kept
//     every line: unbounded);
//   * a large body (one chunk of 256 MiB, or Content-Length 300 MB): refused
//     (413, 405 for a POST) without reading it (it read 64 MiB whole, and its
//     resident memory grew by as much);
//   * 20 idle and 2 slowloris connections: a scrape is still answered within
//     3 s (2 worker threads were stuck on them: scrapes timed out);
//   * more connections than the cap (300 idle ones): the oldest are closed,
//     the listener's open files stay bounded and a scrape is answered
//     within about a second (the scrape timed out);
//   * a head that trickles in a byte at a time is cut 10 s after its first
//     byte (408) (each byte restarted cpp-httplib's read timeout);
//   * --listen 0:PORT / 0.0.0.0:PORT says on stderr that it listens on every
//     address (it said nothing);
//   * a stderr that nobody reads (a 4 KiB pipe, full of warnings about
//     planted segments) does not stop the scrapes (the thread that answered
//     blocked on its write: scrapes timed out).
// Every wait is bounded (a poll timeout or the exchange's); the trickle's
// pace is the attack itself, not a synchronisation.
#include <doctest/doctest.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>

#include <chrono>
#include <deque>
#include <string>
#include <vector>

#include "http_client.hpp"
#include "prometheus_check.hpp"
#include "support.hpp"

using namespace std::chrono_literals;
using httptest::steady;

namespace {

using shmtest::cli;  // tests/support/support.hpp

constexpr long kMemorySlackKib = 16 * 1024;  // what an attack may add to the listener's peak resident memory

// What a flood got: bytes the client managed to send, what the server said,
// and whether it closed (or reset) the connection.
struct flood_result {
  std::size_t sent = 0;
  std::string answer;
  bool closed = false;   // EOF, reset or broken pipe
  bool stalled = false;  // neither side moved for 10 s
};

// Sends `head`, then `filler` over and over up to `limit` bytes in all,
// reading whatever the server says meanwhile; stops as soon as the server
// has answered and closed (or reset) the connection. After `limit`, waits up
// to 10 s more for the server's answer or close.
flood_result flood(int port, const std::string& head, const std::string& filler, std::size_t limit) {
  flood_result r;
  httptest::connection c(port);
  REQUIRE_MESSAGE(c.fd >= 0, c.error);
  std::size_t at = 0;  // offset in the current piece (head first, then filler)
  bool in_head = true;
  for (;;) {
    const bool sending = r.sent < limit;
    pollfd p{c.fd, static_cast<short>(POLLIN | (sending ? POLLOUT : 0)), 0};
    if (::poll(&p, 1, 10000) <= 0) {
      r.stalled = true;
      return r;
    }
    if ((p.revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
      char buf[65536];
      const ssize_t n = ::recv(c.fd, buf, sizeof buf, 0);
      if (n > 0) {
        r.answer.append(buf, static_cast<std::size_t>(n));
        continue;
      }
      if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
        r.closed = true;
        return r;
      }
    }
    if (sending && (p.revents & POLLOUT) != 0) {
      const std::string& piece = in_head ? head : filler;
      const ssize_t n = ::send(c.fd, piece.data() + at, piece.size() - at, MSG_NOSIGNAL);
      if (n < 0 && errno != EAGAIN && errno != EINTR) {
        r.closed = true;  // EPIPE / ECONNRESET: the server closed; its answer may still be readable
        char buf[65536];
        for (ssize_t m; (m = ::recv(c.fd, buf, sizeof buf, 0)) > 0;) r.answer.append(buf, static_cast<std::size_t>(m));
        return r;
      }
      if (n > 0) {
        r.sent += static_cast<std::size_t>(n);
        at += static_cast<std::size_t>(n);
        if (at == piece.size()) at = 0, in_head = false;
      }
    }
  }
}

// The listener's peak resident memory now, in KiB (its /proc status).
long peak_kib(httptest::listener& l) { return httptest::proc_kib(l.process.pid(), "VmHWM"); }

// The files the listener has open (its sockets among them).
std::size_t open_files(pid_t pid) {
  std::size_t n = 0;
  if (DIR* d = ::opendir(("/proc/" + std::to_string(pid) + "/fd").c_str())) {
    while (const dirent* e = ::readdir(d))
      if (e->d_name[0] != '.') ++n;
    ::closedir(d);
  }
  return n;
}

// Whether the server closed `c` within `timeout` (EOF or reset; bytes it
// sends first, e.g. a 408, are read and returned in *said).
bool closed_within(httptest::connection& c, std::chrono::milliseconds timeout, std::string* said = nullptr) {
  const auto deadline = steady::now() + timeout;
  std::string got;
  for (;;) {
    const int r = c.receive(got, deadline);
    if (r == 0) break;
    if (r < 0) return false;
  }
  if (said != nullptr) *said += got;
  return true;
}

// A scrape answered: 200 and a valid exposition.
void check_scrape(const httptest::response& r) {
  INFO("error: ", r.error);
  REQUIRE(r.status == 200);
  promcheck::prometheus_checker pc("");
  for (const auto& p : pc.check(r.body)) FAIL_CHECK(p);
}

}  // namespace

TEST_CASE("metrics --listen bounds: 2,700 byte ranges in one 8 KB request get one exposition (200, Range ignored), "
          "and the listener's peak memory stays flat") {
  // 20 boxes: an exposition of ~55 KB (more with other tests' segments), so
  // that 2,700 copies of it (what a server that honours the ranges builds)
  // would be ~150 MB.
  std::deque<shmtest::segment_guard> boxes;
  for (int i = 0; i < 20; ++i) {
    boxes.emplace_back(shmtest::unique_name("mrange"));
    REQUIRE(cli({"create", boxes.back().name, "--capacity", "4", "--lanes", "4"}).code == 0);
  }
  httptest::listener l;
  INFO("listener said: ", l.line);
  REQUIRE(l.port > 0);
  const auto plain = httptest::get(l.port, "/metrics");
  check_scrape(plain);
  const long before = peak_kib(l);
  REQUIRE(before > 0);

  // HTTP/1.0, no other header: the request stays under 8 KiB.
  std::string ranges = "bytes=0-";
  for (int i = 1; i < 2700; ++i) ranges += ",0-";
  const std::string request = "GET /metrics HTTP/1.0\r\nRange: " + ranges + "\r\n\r\n";
  REQUIRE(request.size() <= 8192);
  std::string rest;
  const auto r = httptest::exchange(l.port, request, 60s, &rest);
  const long after = peak_kib(l);
  INFO("error: ", r.error, "; answer of ", r.body.size(), " bytes (a plain scrape: ", plain.body.size(), ")");
  INFO("peak resident memory: ", before, " KiB before, ", after, " KiB after");
  CHECK(after - before < kMemorySlackKib);
  CHECK(r.status == 200);
  CHECK(r.header("Content-Range").empty());
  CHECK(rest.empty());
  // One exposition: the strict checker refuses a family twice (or a
  // multipart boundary); and not much longer than the plain scrape.
  CHECK(r.body.size() < 2 * plain.body.size() + 65536);
  check_scrape(r);
  check_scrape(httptest::get(l.port, "/metrics"));  // it lives on
}

TEST_CASE("metrics --listen bounds: an endless header section is cut at 8 KiB (431 and closed), without growing the "
          "listener's memory") {
  httptest::listener l;
  INFO("listener said: ", l.line);
  REQUIRE(l.port > 0);
  check_scrape(httptest::get(l.port, "/metrics"));
  const long before = peak_kib(l);

  const std::string head = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n";
  const std::string filler = "X-Filler: " + std::string(100, 'a') + "\r\n";
  constexpr std::size_t kLimit = 32u << 20;  // what a server that reads every line takes in
  const flood_result f = flood(l.port, head, filler, kLimit);
  INFO("sent ", f.sent, " bytes; closed ", f.closed, ", stalled ", f.stalled, "; answer: ", f.answer.substr(0, 300));
  CHECK(f.sent < kLimit);
  CHECK(f.closed);
  // The answer comes before the close (what the client may miss is its own
  // unsent bytes, not the status).
  CHECK(f.answer.rfind("HTTP/1.1 431 ", 0) == 0);
  const long after = peak_kib(l);
  INFO("peak resident memory: ", before, " KiB before, ", after, " KiB after");
  CHECK(after - before < kMemorySlackKib);
  check_scrape(httptest::get(l.port, "/metrics"));
}

TEST_CASE("metrics --listen bounds: a large body (chunked, or a long Content-Length) is refused without being read") {
  httptest::listener l;
  INFO("listener said: ", l.line);
  REQUIRE(l.port > 0);
  check_scrape(httptest::get(l.port, "/metrics"));
  const std::string host = "Host: 127.0.0.1\r\n";
  struct body_case {
    std::string head;  // then 64 KiB of 'b' again and again
    int status;
  };
  const std::vector<body_case> cases = {
      // One chunk of 256 MiB: the shape cpp-httplib read whole.
      {"GET /metrics HTTP/1.1\r\n" + host + "Transfer-Encoding: chunked\r\n\r\n10000000\r\n", 413},
      {"POST /metrics HTTP/1.1\r\n" + host + "Transfer-Encoding: chunked\r\n\r\n10000000\r\n", 405},
      {"GET /metrics HTTP/1.1\r\n" + host + "Content-Length: 300000000\r\n\r\n", 413},
  };
  for (const auto& c : cases) {
    CAPTURE(c.head);
    const long before = peak_kib(l);
    constexpr std::size_t kLimit = 64u << 20;
    const flood_result f = flood(l.port, c.head, std::string(0x10000, 'b'), kLimit);
    INFO("sent ", f.sent, " bytes; closed ", f.closed, ", stalled ", f.stalled, "; answer: ", f.answer.substr(0, 300));
    // The kernel's socket buffers take some megabytes whatever the server
    // does; a server that reads the body takes all of it.
    CHECK(f.sent < 16u << 20);
    CHECK(f.closed);
    CHECK(f.answer.rfind("HTTP/1.1 " + std::to_string(c.status) + " ", 0) == 0);
    const long after = peak_kib(l);
    INFO("peak resident memory: ", before, " KiB before, ", after, " KiB after");
    CHECK(after - before < kMemorySlackKib);
  }
  check_scrape(httptest::get(l.port, "/metrics"));
}

TEST_CASE("metrics --listen bounds: 20 idle and 2 slowloris connections do not keep a scrape from being answered "
          "within 3 s") {
  httptest::listener l;
  INFO("listener said: ", l.line);
  REQUIRE(l.port > 0);
  std::vector<httptest::connection> held;
  for (int i = 0; i < 20; ++i) {
    held.emplace_back(l.port);
    REQUIRE_MESSAGE(held.back().fd >= 0, held.back().error);
  }
  for (int i = 0; i < 2; ++i) {  // half a request, and then nothing
    held.emplace_back(l.port);
    REQUIRE_MESSAGE(held.back().fd >= 0, held.back().error);
    REQUIRE(held.back().send_all("GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: slow", steady::now() + 5s));
  }
  const auto t0 = steady::now();
  const auto r = httptest::get(l.port, "/metrics", 3s);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(steady::now() - t0).count();
  INFO("the scrape took ", ms, " ms");
  check_scrape(r);
  // And again: the first answer did not depend on a lucky order.
  check_scrape(httptest::get(l.port, "/metrics", 3s));
  MESSAGE("a scrape beside 20 idle and 2 slowloris connections: ", ms, " ms");
}

TEST_CASE("metrics --listen bounds: past the connection cap (256) the oldest idle connections are closed, the "
          "listener's open files stay bounded, and a scrape is answered") {
  httptest::listener l;
  INFO("listener said: ", l.line);
  REQUIRE(l.port > 0);
  const std::size_t files_before = open_files(l.process.pid());
  std::vector<httptest::connection> idle;
  for (int i = 0; i < 300; ++i) {
    idle.emplace_back(l.port);
    REQUIRE_MESSAGE(idle.back().fd >= 0, idle.back().error);
  }
  // A connection is evicted once it has been idle for a second: the scrape
  // may wait that long in the listen queue.
  const auto t0 = steady::now();
  const auto r = httptest::get(l.port, "/metrics", 5s);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(steady::now() - t0).count();
  INFO("the scrape took ", ms, " ms");
  check_scrape(r);
  CHECK(closed_within(idle.front(), 5s));
  const std::size_t files = open_files(l.process.pid());
  INFO("open files: ", files_before, " before, ", files, " with 300 idle connections");
  CHECK(files <= files_before + 256);
  MESSAGE("a scrape past the cap of 256 (300 idle connections): ", ms, " ms; listener's files ", files_before, " -> ", files);
}

TEST_CASE("metrics --listen bounds: a request head that trickles in is cut 10 s after its first byte (408)") {
  httptest::listener l;
  INFO("listener said: ", l.line);
  REQUIRE(l.port > 0);
  httptest::connection c(l.port);
  REQUIRE_MESSAGE(c.fd >= 0, c.error);
  const auto first_byte = steady::now();
  REQUIRE(c.send_all("GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ", steady::now() + 5s));
  // One more byte every 500 ms (the attack's pace: each wait is also the
  // wait for the server's answer), for 20 s at most.
  std::string said;
  bool cut = false;
  while (!cut && steady::now() - first_byte < 20s) {
    const int got = c.receive(said, steady::now() + 500ms);
    if (got == 0) {
      cut = true;
    } else if (got < 0 && ::send(c.fd, "a", 1, MSG_NOSIGNAL) != 1) {
      closed_within(c, 5s, &said);  // a broken pipe: the server closed; read what it said first
      cut = true;
    }
  }
  const auto s = std::chrono::duration_cast<std::chrono::milliseconds>(steady::now() - first_byte).count();
  INFO("cut after ", s, " ms; the server said: ", said);
  REQUIRE(cut);
  CHECK(s >= 9000);
  CHECK(s < 15000);
  CHECK(said.rfind("HTTP/1.1 408 ", 0) == 0);
  check_scrape(httptest::get(l.port, "/metrics"));
}

TEST_CASE("metrics --listen bounds: 0:PORT and 0.0.0.0:PORT say on stderr that they listen on every address; "
          "127.0.0.1 does not") {
  for (const std::string address : {"0:0", "0.0.0.0:0", "127.0.0.1:0"}) {
    CAPTURE(address);
    httptest::listener l(address);
    INFO("listener said: ", l.line);
    REQUIRE(l.port > 0);
    check_scrape(httptest::get(l.port, "/metrics"));
    l.process.kill(SIGTERM);
    const int st = l.process.wait(20s);
    CHECK(shmtest::exited_with(st, 0));
    const std::string err = l.process.read_stderr();
    INFO("stderr:\n", err);
    std::size_t every = 0;
    for (const auto& line : shmtest::lines_of(err))
      if (line.find("every address") != std::string::npos) {
        ++every;
        CHECK(line.find(std::to_string(l.port)) != std::string::npos);  // names the port
        CHECK(line.find("127.0.0.1") != std::string::npos);             // and says what to give instead
      }
    CHECK(every == (address == "127.0.0.1:0" ? 0u : 1u));
  }
}

TEST_CASE("metrics --listen bounds: a stderr that nobody reads does not stop the scrapes; the warnings it could not "
          "take are counted and the count said once it is read") {
  // 24 garbage segments with long names: a warning line of ~300 bytes each
  // at the first scrape, more than the 4 KiB pipe below holds.
  std::deque<shmtest::segment_guard> planted;
  for (int i = 0; i < 24; ++i) {
    planted.emplace_back(shmtest::unique_name("mstderr") + "-" + std::string(80, 'x') + std::to_string(i));
    shmtest::write_raw_segment(planted.back().name, std::string(4096, 'z'));
  }
  // The listener's stderr: a FIFO this test holds open and does not read
  // (O_RDWR: opening the write end then never waits), shrunk to one page.
  char dir_template[] = "/tmp/shmbox-stderr-XXXXXX";
  REQUIRE(::mkdtemp(dir_template) != nullptr);
  const std::string dir = dir_template, fifo = dir + "/stderr";
  struct cleanup {
    std::string dir, fifo;
    ~cleanup() {
      ::unlink(fifo.c_str());
      ::rmdir(dir.c_str());
    }
  } remove_them{dir, fifo};
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  const int held = ::open(fifo.c_str(), O_RDWR | O_NONBLOCK | O_CLOEXEC);
  REQUIRE(held >= 0);
  struct closer {
    int fd;
    ~closer() { ::close(fd); }
  } close_held{held};
  REQUIRE(::fcntl(held, F_SETPIPE_SZ, 4096) >= 0);

  shmtest::child process({"/bin/sh", "-c", "exec \"$@\" 2>\"$0\"", fifo, shmtest::cli_path(), "metrics", "--listen", "127.0.0.1:0"});
  const std::string line = shmtest::line_starting(process, "listening on http://127.0.0.1:", 20s);
  INFO("listener said: ", line);
  REQUIRE(!line.empty());
  const int port = std::atoi(line.c_str() + std::string("listening on http://127.0.0.1:").size());
  for (int i = 0; i < 3; ++i) check_scrape(httptest::get(port, "/metrics", 10s));

  // Read what it could write; one more planted segment gives a new warning,
  // and the count of the lines dropped comes before it.
  std::string said;
  char buf[65536];
  for (ssize_t n; (n = ::read(held, buf, sizeof buf)) > 0;) said.append(buf, static_cast<std::size_t>(n));
  CHECK(said.size() <= 4096);
  planted.emplace_back(shmtest::unique_name("mstderr") + "-last");
  shmtest::write_raw_segment(planted.back().name, std::string(4096, 'z'));
  check_scrape(httptest::get(port, "/metrics", 10s));
  std::string later;
  for (ssize_t n; (n = ::read(held, buf, sizeof buf)) > 0;) later.append(buf, static_cast<std::size_t>(n));
  INFO("stderr first: ", said, "\nthen: ", later);
  CHECK(later.find("were not written: standard error was full") != std::string::npos);
  CHECK(later.find(planted.back().name) != std::string::npos);
  process.kill(SIGTERM);
  CHECK(shmtest::exited_with(process.wait(20s), 0));
}
