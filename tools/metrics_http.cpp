// tools/metrics_http.cpp - `shmbox metrics --listen ADDR:PORT`: the host's
// exposition (metrics.cpp, metrics_exposition) served over HTTP for a
// Prometheus server to scrape.
//
//   GET /metrics   a fresh exposition per request (Content-Type
//                  text/plain; version=0.0.4): built after the request's
//                  head has arrived, never cached, so a scrape sees the boxes
//                  as they are. 500 when /dev/shm cannot be listed.
//   GET /          one line pointing at /metrics.
//   anything else  404, one line. HEAD: the same headers without the body.
//   Range          ignored: every answer is the whole text, once.
//
// The HTTP server is the exporter's own, http_server.hpp: one thread on
// poll(2), every request, connection and answer bounded (B1-B7 there, and
// why not cpp-httplib or libmicrohttpd). This file makes its socket and
// hands it the build.
//
// Signals: SIGTERM and SIGINT are blocked and read from a signalfd that the
// server polls with the sockets: exit 0. A build is not interrupted (it
// takes under a second for 10,000 boxes).
//
// The socket gets SO_REUSEADDR only (SO_REUSEPORT would let a second
// listener bind the same port without an error and take half the scrapes).
// An address that means every address (0, 0.0.0.0, ::) is served as asked,
// with a warning on stderr that names the port and what to give instead:
// Prometheus on another host is a normal setup, and a flag would break it.
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "commands.hpp"
#include "http_server.hpp"

namespace shmbox_cli {

namespace {

constexpr const char* kExpositionType = "text/plain; version=0.0.4; charset=utf-8";
constexpr const char* kPlainType = "text/plain; charset=utf-8";

// "http://HOST:PORT/metrics", an IPv6 host in brackets.
std::string metrics_url(const std::string& host, int port) {
  const std::string h = host.find(':') == std::string::npos ? host : "[" + host + "]";
  return "http://" + h + ":" + std::to_string(port) + "/metrics";
}

// One exposition for a GET /metrics; a 500 when /dev/shm cannot be listed.
http::page build_exposition() {
  http::page p;
  std::error_code list_error;
  p.body = metrics_exposition(p.warnings, list_error);
  if (list_error) return {500, kPlainType, shmbox::explain(list_error) + "\n", {}};
  p.content_type = kExpositionType;
  return p;
}

// The listening socket for `where`: the first address it resolves to that
// binds, SO_REUSEADDR only, non-blocking. -1 with *error set otherwise.
int listen_on(const listen_address& where, std::string* error) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (const int gai = ::getaddrinfo(where.host.c_str(), std::to_string(where.port).c_str(), &hints, &found); gai != 0) {
    *error = ::gai_strerror(gai);
    return -1;
  }
  int fd = -1;
  *error = "no address to bind";
  for (const addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      *error = std::strerror(errno);
      continue;
    }
    const int yes = 1;
    if (::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes) != 0 || ::bind(fd, a->ai_addr, a->ai_addrlen) != 0 ||
        ::listen(fd, SOMAXCONN) != 0) {
      *error = std::strerror(errno);
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(found);
  return fd;
}

// The port `fd` is bound to, and whether its address is every address of
// the host (0.0.0.0 or ::).
int bound_port(int fd, bool* every_address) {
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) return -1;
  if (a.ss_family == AF_INET6) {
    const auto& a6 = reinterpret_cast<const sockaddr_in6&>(a);
    *every_address = IN6_IS_ADDR_UNSPECIFIED(&a6.sin6_addr);
    return ntohs(a6.sin6_port);
  }
  const auto& a4 = reinterpret_cast<const sockaddr_in&>(a);
  *every_address = a4.sin_addr.s_addr == htonl(INADDR_ANY);
  return ntohs(a4.sin_port);
}

}  // namespace

int cmd_metrics_listen(const std::string& listen) {
  const std::optional<listen_address> where = parse_listen_address(listen);
  if (!where) {  // the parser checked it; kept for callers that did not
    say("--listen '" + listen + "' is not ADDR:PORT (run 'shmbox metrics --help')");
    return kExitUsage;
  }
  std::string error;
  const int listen_fd = listen_on(*where, &error);
  if (listen_fd < 0) {
    say("cannot listen on " + listen + ": " + error);
    return kExitFail;
  }
  bool every_address = false;
  const int port = bound_port(listen_fd, &every_address);
  if (port <= 0) {
    say("cannot listen on " + listen + ": getsockname: " + std::strerror(errno));
    ::close(listen_fd);
    return kExitFail;
  }

  // SIGTERM and SIGINT come through a signalfd that the loop polls.
  sigset_t stop;
  ::sigemptyset(&stop);
  ::sigaddset(&stop, SIGTERM);
  ::sigaddset(&stop, SIGINT);
  ::sigprocmask(SIG_BLOCK, &stop, nullptr);
  const int signal_fd = ::signalfd(-1, &stop, SFD_CLOEXEC | SFD_NONBLOCK);
  if (signal_fd < 0) {
    say(std::string("cannot take SIGTERM and SIGINT: signalfd: ") + std::strerror(errno));
    ::close(listen_fd);
    return kExitFail;
  }
  ::signal(SIGPIPE, SIG_IGN);  // stdout closed: the write below fails, the process lives

  if (every_address)
    say("warning: listening on every address of this host (" + metrics_url(where->host, port) +
        "): whoever can reach port " + std::to_string(port) +
        " reads the metrics of every box this user can read; give 127.0.0.1:" + std::to_string(port) +
        " (or one interface's address) to keep them on this host");
  int code = kExitOk;
  const std::string line = "listening on " + metrics_url(where->host, port) + "\n";
  if (!write_all(STDOUT_FILENO, line.data(), line.size())) {
    say(std::string("cannot write to standard output: ") + std::strerror(errno));
    code = kExitFail;
  } else {
    code = http::serve(listen_fd, signal_fd, build_exposition) ? kExitOk : kExitFail;
  }
  ::close(signal_fd);
  ::close(listen_fd);
  return code;
}

}  // namespace shmbox_cli
