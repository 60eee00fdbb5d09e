// tools/metrics_http.cpp - `shmbox metrics --listen ADDR:PORT`: the host's
// exposition (metrics.cpp, metrics_exposition) served over HTTP for a
// Prometheus server to scrape.
//
//   GET /metrics   a fresh exposition per request (Content-Type
//                  text/plain; version=0.0.4); nothing is cached, so a
//                  scrape sees the boxes as they are. 500 when /dev/shm
//                  cannot be listed.
//   GET /          one line pointing at /metrics.
//   anything else  404, one line.
//
// The server is cpp-httplib (Debian: libcpp-httplib-dev). It is kept small:
// one thread accepts, kWorkers threads answer (a Prometheus server keeps its
// connection alive, so two let a second client in beside it), and one
// exposition is built at a time (lock below): a flood of requests costs one
// core at most. Requests are bounded: headers by httplib (8 KiB), bodies to
// kMaxBody, reads and writes by timeouts.
//
// Signals: SIGTERM and SIGINT are blocked before any thread starts (every
// thread inherits the mask) and taken by sigwait in the main thread, which
// stops the server: exit 0. The thread that serves reports its own end
// with SIGUSR1 to the main thread, so a server that fails is not waited for.
//
// The socket gets SO_REUSEADDR only: httplib's default also sets
// SO_REUSEPORT, with which a second listener on the same port would bind
// without an error and take half of the scrapes.
#include <netdb.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "commands.hpp"

#ifdef SHMBOX_HAVE_HTTPLIB
#include <httplib.h>
#endif

namespace shmbox_cli {

#ifndef SHMBOX_HAVE_HTTPLIB

int cmd_metrics_listen(const std::string& listen) {
  say("--listen " + listen + ": this shmbox was built without cpp-httplib; install libcpp-httplib-dev "
      "(apt-get install libcpp-httplib-dev) and build it again, or run 'shmbox metrics' without --listen");
  return kExitUsage;
}

#else

namespace {

constexpr std::size_t kWorkers = 2;        // threads that answer requests
constexpr std::size_t kMaxBody = 4096;     // a scrape is a GET: no body worth reading
constexpr time_t kTimeoutSeconds = 10;     // read and write timeouts of a connection
constexpr const char* kExpositionType = "text/plain; version=0.0.4; charset=utf-8";
constexpr const char* kPlainType = "text/plain; charset=utf-8";

// "http://HOST:PORT/metrics", an IPv6 host in brackets.
std::string metrics_url(const std::string& host, int port) {
  const std::string h = host.find(':') == std::string::npos ? host : "[" + host + "]";
  return "http://" + h + ":" + std::to_string(port) + "/metrics";
}

}  // namespace

int cmd_metrics_listen(const std::string& listen) {
  const std::optional<listen_address> where = parse_listen_address(listen);
  if (!where) {  // the parser checked it; kept for callers that did not
    say("--listen '" + listen + "' is not ADDR:PORT (run 'shmbox metrics --help')");
    return kExitUsage;
  }
  // A host name that does not resolve: say so here; httplib would only fail.
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (const int gai = ::getaddrinfo(where->host.c_str(), std::to_string(where->port).c_str(), &hints, &found); gai != 0) {
    say("cannot listen on " + listen + ": " + ::gai_strerror(gai));
    return kExitFail;
  }
  ::freeaddrinfo(found);

  // Before any thread exists (httplib starts its own): see the top.
  sigset_t waited;
  ::sigemptyset(&waited);
  ::sigaddset(&waited, SIGTERM);
  ::sigaddset(&waited, SIGINT);
  ::sigaddset(&waited, SIGUSR1);
  ::pthread_sigmask(SIG_BLOCK, &waited, nullptr);
  ::signal(SIGPIPE, SIG_IGN);  // a scraper that hangs up: the write fails, the process lives

  httplib::Server server;
  server.new_task_queue = [] { return new httplib::ThreadPool(kWorkers); };
  server.set_socket_options([](socket_t s) {
    const int yes = 1;
    ::setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  server.set_payload_max_length(kMaxBody);
  server.set_read_timeout(kTimeoutSeconds);
  server.set_write_timeout(kTimeoutSeconds);

  std::mutex building;            // one exposition at a time
  std::set<std::string> warned;   // the last scrape's warnings (guarded by `building`)
  server.Get("/metrics", [&](const httplib::Request&, httplib::Response& res) {
    const std::lock_guard<std::mutex> hold(building);
    std::vector<std::string> warnings;
    std::error_code list_error;
    std::string text = metrics_exposition(warnings, list_error);
    if (list_error) {
      const std::string why = shmbox::explain(list_error);
      say(why);
      res.status = 500;
      res.set_content(why + "\n", kPlainType);
      return;
    }
    // A warning goes to stderr when it is new, not on every scrape of a
    // segment that stays unreadable (it is counted in the text each time).
    std::set<std::string> now(warnings.begin(), warnings.end());
    for (const std::string& w : now)
      if (warned.count(w) == 0) say(w);
    warned = std::move(now);
    res.body = std::move(text);
    res.set_header("Content-Type", kExpositionType);
  });
  server.Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("shmbox metrics: the Prometheus exposition is at /metrics\n", kPlainType);
  });
  server.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (res.status == 404) res.set_content("not found: " + req.path + " (the metrics are at /metrics)\n", kPlainType);
  });

  errno = 0;
  int port = where->port;
  bool bound = false;
  if (port == 0) {
    port = server.bind_to_any_port(where->host);
    bound = port > 0;
  } else {
    bound = server.bind_to_port(where->host, port);
  }
  const int bind_errno = errno;
  if (!bound) {
    say("cannot listen on " + listen + ": " +
        (bind_errno != 0 ? std::string(std::strerror(bind_errno)) : std::string("the address cannot be bound here")));
    return kExitFail;
  }

  const pthread_t main_thread = ::pthread_self();
  std::atomic<bool> served_ok{false}, serving_ended{false};
  std::thread serving([&] {
    served_ok = server.listen_after_bind();
    serving_ended = true;
    ::pthread_kill(main_thread, SIGUSR1);
  });
  // stop() is a no-op until the accept loop runs: wait for it (a signal
  // meanwhile stays pending), then say where it listens.
  while (!server.is_running() && !serving_ended) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  int code = kExitOk;
  if (serving_ended) {
    say("cannot serve on " + listen + ": the server stopped at once");
    code = kExitFail;
  } else {
    const std::string line = "listening on " + metrics_url(where->host, port) + "\n";
    if (!write_all(STDOUT_FILENO, line.data(), line.size())) {
      say(std::string("cannot write to standard output: ") + std::strerror(errno));
      code = kExitFail;
      server.stop();
    } else {
      int sig = 0;
      ::sigwait(&waited, &sig);
      if (sig == SIGUSR1) {
        say("the server on " + listen + " stopped: " + (served_ok ? "closed" : "accept failed"));
        code = kExitFail;
      }
      server.stop();
    }
  }
  serving.join();
  return code;
}

#endif

}  // namespace shmbox_cli
