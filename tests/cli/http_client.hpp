// tests/cli/http_client.hpp - what the tests of `shmbox metrics --listen`
// need of HTTP: one GET over a plain socket (HTTP/1.0, Connection: close,
// every wait bounded), a free loopback port, percent-encoding of a query,
// and the listener started as a separate process with its line handshake.
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
#include <optional>
#include <string>

#include "support.hpp"

namespace httptest {

// What a GET got: status 0 when it could not connect or was cut short (error says why).
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

// GET http://127.0.0.1:<port><target> (target: path and query, encoded);
// `timeout` bounds the whole exchange.
inline response get(int port, const std::string& target, std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  response r;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  const auto left_ms = [&] {
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    return ms < 0 ? 0 : static_cast<int>(ms);
  };
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return r.error = "socket failed", r;
  struct closer {
    int fd;
    ~closer() { ::close(fd); }
  } close_fd{fd};
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 && errno != EINPROGRESS)
    return r.error = std::string("connect: ") + std::strerror(errno), r;
  pollfd p{fd, POLLOUT, 0};
  if (::poll(&p, 1, left_ms()) <= 0) return r.error = "connect timed out", r;
  int soerr = 0;
  socklen_t len = sizeof soerr;
  ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len);
  if (soerr != 0) return r.error = std::string("connect: ") + std::strerror(soerr), r;

  const std::string request = "GET " + target + " HTTP/1.0\r\nHost: 127.0.0.1:" + std::to_string(port) +
                              "\r\nConnection: close\r\nUser-Agent: shmbox-test\r\n\r\n";
  std::size_t sent = 0;
  while (sent < request.size()) {
    p = {fd, POLLOUT, 0};
    if (::poll(&p, 1, left_ms()) <= 0) return r.error = "send timed out", r;
    const ssize_t n = ::send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno != EAGAIN && errno != EINTR) return r.error = std::string("send: ") + std::strerror(errno), r;
    if (n > 0) sent += static_cast<std::size_t>(n);
  }
  std::string all;
  for (;;) {
    p = {fd, POLLIN, 0};
    if (::poll(&p, 1, left_ms()) <= 0) return r.error = "no complete answer in time (" + std::to_string(all.size()) + " bytes)", r;
    char buf[65536];
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n == 0) break;
    if (n < 0 && errno != EAGAIN && errno != EINTR) return r.error = std::string("recv: ") + std::strerror(errno), r;
    if (n > 0) all.append(buf, static_cast<std::size_t>(n));
  }
  const auto end = all.find("\r\n\r\n");
  int status = 0;
  if (end == std::string::npos || std::sscanf(all.c_str(), "HTTP/1.%*d %d", &status) != 1)
    return r.error = "not an HTTP answer: " + all.substr(0, 200), r;
  const auto first = all.find("\r\n");
  r.headers = all.substr(first + 2, end - first - 2);
  r.body = all.substr(end + 4);
  const std::string length = r.header("Content-Length");
  if (!length.empty() && std::to_string(r.body.size()) != length)
    return r.error = "body of " + std::to_string(r.body.size()) + " bytes, Content-Length " + length, r;
  r.status = status;
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

// Whether this build's shmbox has --listen (tests/meson.build sets
// SHMBOX_HTTPLIB to 1 when it found cpp-httplib); a test without it says so
// and returns.
inline bool listen_built() {
  const char* v = std::getenv("SHMBOX_HTTPLIB");
  return v != nullptr && std::string(v) == "1";
}

// `shmbox metrics --listen 127.0.0.1:0` as a separate process (stderr kept
// for the checks), its port read from its "listening on" line: a handshake,
// no sleep. The child's destructor kills it whatever happens.
struct listener {
  shmtest::child process;
  int port = 0;
  std::string line;  // what it printed
  listener()
      : process({shmtest::cli_path(), "metrics", "--listen", "127.0.0.1:0"}, {}, false, true) {
    line = shmtest::line_starting(process, "listening on ", std::chrono::seconds(20));
    const std::string prefix = "listening on http://127.0.0.1:";
    if (line.rfind(prefix, 0) == 0) port = std::atoi(line.c_str() + prefix.size());
  }
};

}  // namespace httptest
