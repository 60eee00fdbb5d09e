// tests/cli/http_client.hpp - what the tests of `shmbox metrics --listen`
// need of HTTP: a loopback connection (every wait bounded), one exchange of
// raw request bytes read to the server's close, one GET (HTTP/1.0,
// Connection: close), answers taken one by one from a stream (keep-alive,
// pipelining), a free loopback port, percent-encoding of a query, the
// listener started as a separate process with its line handshake, and a
// process's memory from /proc.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <optional>
#include <string>

#include "support.hpp"

namespace httptest {

using steady = std::chrono::steady_clock;

// Milliseconds left until `deadline`, 0 when it passed (a poll timeout).
inline int left_ms(steady::time_point deadline) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - steady::now()).count();
  return ms < 0 ? 0 : static_cast<int>(ms);
}

// What an exchange got: status 0 when it could not connect or was cut short (error says why).
struct response {
  int status = 0;
  std::string headers;  // the header lines, as sent ("\r\n" between them)
  std::string body;
  std::string error;
  // The value of header `name` (case-insensitive), "" if absent.
  std::string header(const std::string& name) const {
    std::size_t p = 0;
    while (p < headers.size()) {
      std::size_t e = headers.find("\r\n", p);
      if (e == std::string::npos) e = headers.size();
      const std::string line = headers.substr(p, e - p);
      const auto colon = line.find(':');
      if (colon != std::string::npos && colon == name.size()) {
        bool same = true;
        for (std::size_t i = 0; i < colon; ++i)
          same &= std::tolower(static_cast<unsigned char>(line[i])) == std::tolower(static_cast<unsigned char>(name[i]));
        if (same) {
          std::size_t v = colon + 1;
          while (v < line.size() && line[v] == ' ') ++v;
          return line.substr(v);
        }
      }
      p = e + 2;
    }
    return {};
  }
};

// The first answer of `stream` (an HTTP/1.x status line, headers, and a body
// of Content-Length bytes, none for a HEAD): taken off the front of the
// stream; nullopt while it is not all there. With no Content-Length the body
// is the rest of the stream (the server's close ends it).
inline std::optional<response> take_response(std::string& stream, bool to_head = false, bool closed = false) {
  const auto end = stream.find("\r\n\r\n");
  if (end == std::string::npos) return std::nullopt;
  response r;
  if (std::sscanf(stream.c_str(), "HTTP/1.%*d %d", &r.status) != 1) {
    r.error = "not an HTTP answer: " + stream.substr(0, 200);
    r.status = 0;
    stream.clear();
    return r;
  }
  const auto first = stream.find("\r\n");
  r.headers = stream.substr(first + 2, end - first - 2);
  const std::string length = r.header("Content-Length");
  std::size_t body = 0;
  if (to_head) {
    body = 0;
  } else if (!length.empty()) {
    body = static_cast<std::size_t>(std::strtoull(length.c_str(), nullptr, 10));
  } else if (closed) {
    body = stream.size() - end - 4;
  } else {
    return std::nullopt;
  }
  if (stream.size() - end - 4 < body) return std::nullopt;
  r.body = stream.substr(end + 4, body);
  stream.erase(0, end + 4 + body);
  return r;
}

// A TCP connection to 127.0.0.1:<port>, non-blocking; closed at the end of
// scope. fd is -1 when it could not connect (error says why). `wait_connected`
// false: connect() is started and not waited for (what an idle client that
// the server has not accepted yet is).
struct connection {
  int fd = -1;
  std::string error;

  explicit connection(int port, std::chrono::milliseconds timeout = std::chrono::seconds(10), bool wait_connected = true) {
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
      error = std::string("socket: ") + std::strerror(errno);
      return;
    }
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 && errno != EINPROGRESS) {
      fail("connect");
      return;
    }
    if (!wait_connected) return;
    pollfd p{fd, POLLOUT, 0};
    if (::poll(&p, 1, static_cast<int>(timeout.count())) <= 0) {
      error = "connect timed out";
      close_fd();
      return;
    }
    int soerr = 0;
    socklen_t len = sizeof soerr;
    ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len);
    if (soerr != 0) {
      errno = soerr;
      fail("connect");
      return;
    }
  }
  ~connection() { close_fd(); }
  connection(const connection&) = delete;
  connection& operator=(const connection&) = delete;
  connection(connection&& o) noexcept : fd(o.fd), error(std::move(o.error)) { o.fd = -1; }

  // Sends all of `bytes` by `deadline`; false (error says why) otherwise.
  bool send_all(const std::string& bytes, steady::time_point deadline) {
    std::size_t sent = 0;
    while (sent < bytes.size()) {
      pollfd p{fd, POLLOUT, 0};
      if (::poll(&p, 1, left_ms(deadline)) <= 0) return error = "send timed out", false;
      const ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
      if (n < 0 && errno != EAGAIN && errno != EINTR) return error = std::string("send: ") + std::strerror(errno), false;
      if (n > 0) sent += static_cast<std::size_t>(n);
    }
    return true;
  }
  // Reads what is there, waiting up to `deadline` for the first byte: appends
  // to `into`. 1: got bytes; 0: the server closed (or reset: error says so);
  // -1: nothing by the deadline.
  int receive(std::string& into, steady::time_point deadline) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, left_ms(deadline)) <= 0) return -1;
    char buf[65536];
    for (;;) {
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n > 0) {
        into.append(buf, static_cast<std::size_t>(n));
        return 1;
      }
      if (n == 0) return 0;
      if (errno == EINTR) continue;
      if (errno == EAGAIN) return -1;
      error = std::string("recv: ") + std::strerror(errno);
      return 0;
    }
  }
  // Everything until the server closes, or until `deadline` (false then).
  bool receive_all(std::string& into, steady::time_point deadline) {
    for (;;) {
      const int got = receive(into, deadline);
      if (got == 0) return true;
      if (got < 0) return false;
    }
  }

 private:
  void fail(const char* what) {
    error = std::string(what) + ": " + std::strerror(errno);
    close_fd();
  }
  void close_fd() {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
};

// `request` (raw bytes) sent on a new connection and the answer read until
// the server closes; `timeout` bounds the whole exchange. The first answer
// is parsed; `rest` gets what came after it.
inline response exchange(int port, const std::string& request, std::chrono::milliseconds timeout = std::chrono::seconds(20),
                         std::string* rest = nullptr, bool to_head = false) {
  response r;
  const auto deadline = steady::now() + timeout;
  connection c(port, timeout);
  if (c.fd < 0) return r.error = c.error, r;
  if (!c.send_all(request, deadline)) return r.error = c.error, r;
  std::string all;
  if (!c.receive_all(all, deadline)) return r.error = "no complete answer in time (" + std::to_string(all.size()) + " bytes)", r;
  auto first = take_response(all, to_head, true);
  if (!first) return r.error = "not a complete HTTP answer (" + std::to_string(all.size()) + " bytes): " + all.substr(0, 200), r;
  if (rest != nullptr) *rest = all;
  return *first;
}

// GET http://127.0.0.1:<port><target> (target: path and query, encoded),
// HTTP/1.0 with Connection: close; `timeout` bounds the whole exchange. A
// body shorter than its Content-Length is an error.
inline response get(int port, const std::string& target, std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  const std::string request = "GET " + target + " HTTP/1.0\r\nHost: 127.0.0.1:" + std::to_string(port) +
                              "\r\nConnection: close\r\nUser-Agent: shmbox-test\r\n\r\n";
  std::string rest;
  response r = exchange(port, request, timeout, &rest);
  if (!r.error.empty()) return r;
  if (!rest.empty()) return response{0, r.headers, r.body, "body longer than Content-Length: " + std::to_string(rest.size()) + " more bytes"};
  return r;
}

// A loopback TCP port free now (bound, read back, closed): what a server
// started next is told to use. Another program may take it meanwhile; the
// caller retries then.
inline int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 && ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  ::close(fd);
  return port;
}

// `s` percent-encoded for a URL's query (unreserved characters kept).
inline std::string url_encode(const std::string& s) {
  std::string out;
  for (const unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      char hex[4];
      std::snprintf(hex, sizeof hex, "%%%02X", c);
      out += hex;
    }
  }
  return out;
}

// `shmbox metrics --listen ADDRESS` (127.0.0.1:0 unless said) as a separate
// process (stderr kept for the checks), its port read from its "listening
// on http://HOST:PORT/metrics" line: a handshake, no sleep. The child's
// destructor kills it whatever happens.
struct listener {
  shmtest::child process;
  int port = 0;
  std::string line;  // what it printed
  explicit listener(const std::string& address = "127.0.0.1:0")
      : process({shmtest::cli_path(), "metrics", "--listen", address}, {}, false, true) {
    line = shmtest::line_starting(process, "listening on http://", std::chrono::seconds(20));
    const auto slash = line.rfind("/metrics");
    const auto colon = line.rfind(':', slash);
    if (slash != std::string::npos && colon != std::string::npos) port = std::atoi(line.c_str() + colon + 1);
  }
};

// A field of /proc/<pid>/status in KiB ("VmRSS": resident now, "VmHWM": the
// most it ever was); -1 when it cannot be read.
inline long proc_kib(pid_t pid, const std::string& field) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  for (std::string l; std::getline(f, l);)
    if (l.rfind(field + ":", 0) == 0) return std::atol(l.c_str() + field.size() + 1);
  return -1;
}

}  // namespace httptest
