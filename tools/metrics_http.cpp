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
// THE SERVER. It is written here, on poll(2), in one thread: GET and HEAD
// over HTTP/1.1 and 1.0, nothing else. The exporter runs as a user that can
// read every box (often root) and serves every local user, so each resource
// a client can make it spend has a hard bound, and each is tested
// (tests/cli/cli_metrics_http_bounds.cpp). Why not a library:
//   * cpp-httplib 0.11 (Debian 12, what this used before) cannot bound the
//     number of header lines nor a request's total time, reads some bodies
//     whole, honours 2,700 byte ranges by building 2,700 copies of the
//     text, and answers from a small thread pool that two slowloris
//     connections fill: the acceptance test found all of these.
//   * GNU libmicrohttpd (Debian 12: libmicrohttpd-dev) is event-driven with
//     a connection limit and a memory pool per connection, but its timeout
//     (MHD_OPTION_CONNECTION_TIMEOUT) is an idle timeout, renewed by every
//     byte: a client that sends one byte a second keeps its connection
//     forever, and at the limit new connections are refused, not made room
//     for. Patching around both would be more code than this file's loop.
//   What a scraper needs is a few hundred lines; written here, every bound is
//   a constant below and every read, write and wait is in view.
//
// THE BOUNDS (one request, one connection, the whole server):
//   B1 a request head is at most http::kMaxHead (8 KiB) and
//      http::kMaxHeaderLines (64) lines: 414 or 431 past them, at once
//      (http_head.hpp). A connection buffers at most kMaxHead + kMaxBody
//      bytes; it is not read while its answer is pending or being written.
//   B2 a body: a Content-Length up to http::kMaxBody (1 KiB) is read and
//      dropped; a longer one, or any Transfer-Encoding, is refused (413,
//      501) without reading it. Other methods than GET and HEAD: 405.
//   B3 time: a head (and its small body) must be complete kHeadTimeout
//      (10 s) after its first byte, else 408; an answer must be written
//      within kReplyTimeout (30 s); a connection idle between requests is
//      closed after kIdleTimeout (2 min); after an answer that closes it,
//      at most kLingerBytes of the client's leftovers are drained, for at
//      most kLingerTimeout (2 s), so that the answer is not lost to a reset.
//   B4 connections: at most kMaxConnections (256) are open. When a new one
//      comes at the cap, one is closed to make room: first one that has
//      been answered (idle after an answer, or draining), else the oldest
//      that has been unfinished (idle, sending its head, or reading its
//      answer) for kEvictAfter (1 s). Only a connection whose exposition
//      is being built is never evicted. So idle or slow clients, however
//      many, delay a scrape by about 1 s at most; the listen queue
//      (SOMAXCONN) holds the newcomers meanwhile. Why 1 s and not at once:
//      a client that has connected has not always sent its request yet (a
//      burst of 1,000 scrapes connects before it writes), and closing it
//      would fail a good request. What this does not bound: a flood of new
//      connections faster than the cap per kEvictAfter (256 a second)
//      keeps the listen queue full, and a scrape waits in it; that is the
//      kernel's queue, not this process's memory, and a per-source
//      connection limit in the firewall is its answer.
//   B5 memory: every GET /metrics waiting when a build starts gets that
//      build's text (shared, not copied: it was built after each of their
//      heads came); the texts held by answers being written are at most
//      kMaxExpositions (4): a fifth build first closes the connections still
//      reading the oldest one (the slowest readers). So the server holds
//      at most 64 x 9 KiB of requests and 4 expositions, whatever clients
//      do (256 x 9 KiB is 2.3 MiB).
//   B6 CPU: one exposition is built at a time (one thread), so a flood of
//      scrapes costs one core at most, and a scrape waits for at most the
//      build in progress and its own.
//
//   B7 stderr: a warning (an unreadable segment, first seen) is written only
//      when stderr can take it without blocking; otherwise it is counted and
//      the count said later. A stderr pipe nobody reads stops nothing.
//
// Signals: SIGTERM and SIGINT are blocked and read from a signalfd that the
// loop polls with the sockets: exit 0. A build is not interrupted (it takes
// under a second for 10,000 boxes).
//
// The socket gets SO_REUSEADDR only (SO_REUSEPORT would let a second
// listener bind the same port without an error and take half the scrapes).
// An address that means every address (0, 0.0.0.0, ::) is served as asked,
// with a warning on stderr that names the port and what to give instead:
// Prometheus on another host is a normal setup, and a flag would break it.
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "commands.hpp"
#include "http_head.hpp"

namespace shmbox_cli {

namespace {

using steady = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr std::size_t kMaxConnections = 256;   // B4
constexpr std::size_t kMaxExpositions = 4;     // B5
constexpr auto kHeadTimeout = 10s;             // B3: first byte of a request to its complete head and body
constexpr auto kReplyTimeout = 30s;            // B3: to write one answer
constexpr auto kIdleTimeout = 120s;            // B3: between requests (longer than a 1 min scrape interval)
constexpr auto kLingerTimeout = 2s;            // B3: draining after an answer that closes
constexpr std::size_t kLingerBytes = 64 * 1024;
constexpr auto kEvictAfter = 1s;               // B4
constexpr auto kAcceptPause = 100ms;           // accept failed for want of files or memory: try again after this
constexpr std::size_t kMaxBuffered = http::kMaxHead + http::kMaxBody;  // B1
constexpr const char* kExpositionType = "text/plain; version=0.0.4; charset=utf-8";
constexpr const char* kPlainType = "text/plain; charset=utf-8";

// "http://HOST:PORT/metrics", an IPv6 host in brackets.
std::string metrics_url(const std::string& host, int port) {
  const std::string h = host.find(':') == std::string::npos ? host : "[" + host + "]";
  return "http://" + h + ":" + std::to_string(port) + "/metrics";
}

// What a connection is doing; each phase has its deadline (B3).
enum class phase {
  idle,       // no byte of a request yet: kIdleTimeout from the accept or the last answer
  reading,    // a head (and a small body) arriving: kHeadTimeout from its first byte
  pending,    // a GET /metrics waiting for the next build: no deadline (the server's own work)
  writing,    // an answer going out: kReplyTimeout
  lingering,  // answered, write side shut, the client's leftovers drained: kLingerTimeout
};

struct connection {
  int fd = -1;  // -1: closed, removed at the end of the loop's turn
  phase at = phase::idle;
  steady::time_point since;     // when `at` began (the eviction order, B4)
  steady::time_point deadline;  // when `at` ends
  bool answered = false;        // at least one answer written
  std::string in;               // read, not yet consumed: <= kMaxBuffered (B1)
  http::head_scan scan;         // where the head's end is looked for in `in`
  std::size_t need = 0;         // != 0: the head is read; `in` must reach this (head + body) for the request
  http::request request;        // the request being answered
  std::string reply_head;       // status line and headers
  std::shared_ptr<const std::string> reply_body;  // an exposition (shared, B5) or a line of text
  bool send_body = true;        // false for HEAD
  std::size_t sent = 0;         // bytes of reply_head + body written
  bool close_after = false;     // shut the write side and linger after this answer
  std::size_t drained = 0;      // lingering: bytes read and dropped
};

class server {
 public:
  server(int listen_fd, int signal_fd) : listen_fd_(listen_fd), signal_fd_(signal_fd) {}
  ~server() {
    for (const auto& c : connections_) close_connection(*c);
  }
  server(const server&) = delete;
  server& operator=(const server&) = delete;
  // Serves until SIGTERM or SIGINT (kExitOk); kExitFail when the listening
  // socket fails for good.
  int run();

 private:
  void accept_ready(steady::time_point now);
  connection* victim(steady::time_point now);
  std::optional<steady::time_point> next_victim_time(steady::time_point now);
  void read_ready(connection& c, steady::time_point now);
  void advance(connection& c, steady::time_point now);
  void route(connection& c, steady::time_point now);
  void answer(connection& c, steady::time_point now, int status, const char* type,
              std::shared_ptr<const std::string> body, bool close);
  void refuse(connection& c, steady::time_point now, const http::refusal& r);
  void write_ready(connection& c, steady::time_point now);
  void answer_pending(steady::time_point now);
  void expire(steady::time_point now);
  void close_connection(connection& c);
  std::size_t open_count() const;
  void warn(const std::string& line);

  int listen_fd_, signal_fd_;
  std::vector<std::unique_ptr<connection>> connections_;
  // Built expositions still being written, oldest first (B5); weak: a text
  // is freed as soon as its last answer is written, not at the next build.
  std::deque<std::weak_ptr<const std::string>> texts_;
  std::set<std::string> warned_;                          // the last build's warnings
  steady::time_point accept_paused_until_{};
  bool said_accept_failure_ = false;
  bool failed_ = false;
  std::size_t unsaid_ = 0;  // lines warn() could not write
};

int server::run() {
  std::vector<pollfd> fds;
  std::vector<connection*> polled;
  for (;;) {
    steady::time_point now = steady::now();
    answer_pending(now);
    now = steady::now();

    // What to wait for: the signals, new connections (when there is room,
    // or a connection to make room with), and each connection's next step.
    fds.assign({{signal_fd_, POLLIN, 0}, {-1, POLLIN, 0}});  // the listening socket: polled only when set below
    polled.clear();
    std::optional<steady::time_point> wake;
    const auto earliest = [&](steady::time_point t) { wake = wake ? std::min(*wake, t) : t; };
    if (now < accept_paused_until_) {
      earliest(accept_paused_until_);
    } else if (open_count() < kMaxConnections || victim(now) != nullptr) {
      fds[1].fd = listen_fd_;
    } else if (const auto t = next_victim_time(now)) {
      earliest(*t);  // at the cap: look again when one becomes evictable
    }
    for (const auto& c : connections_) {
      if (c->fd >= 0 && c->at == phase::pending) earliest(now);  // a pipelined GET /metrics queued by the last build
      if (c->fd < 0 || c->at == phase::pending) continue;
      fds.push_back({c->fd, static_cast<short>(c->at == phase::writing ? POLLOUT : POLLIN), 0});
      polled.push_back(c.get());
      earliest(c->deadline);
    }
    int timeout_ms = -1;
    if (wake) {
      const auto ms = std::chrono::ceil<std::chrono::milliseconds>(*wake - now).count();
      timeout_ms = static_cast<int>(std::clamp<long long>(ms, 0, 3'600'000));
    }
    const int ready = ::poll(fds.data(), fds.size(), timeout_ms);
    if (ready < 0) {
      if (errno == EINTR) continue;
      warn(std::string("cannot wait for connections: poll: ") + std::strerror(errno));
      return kExitFail;
    }
    now = steady::now();
    if (fds[0].revents != 0) return kExitOk;  // SIGTERM or SIGINT: nothing more to do
    // The connections first: a head that arrived meanwhile is read before
    // accept_ready() looks for a connection to evict.
    for (std::size_t i = 0; i < polled.size(); ++i) {
      connection& c = *polled[i];
      const short got = fds[i + 2].revents;
      if (got == 0 || c.fd < 0) continue;
      if (c.at == phase::writing) {
        write_ready(c, now);
        advance(c, now);  // a pipelined request already buffered
      } else {
        read_ready(c, now);
      }
    }
    if ((fds[1].revents & POLLIN) != 0) accept_ready(now);
    if (failed_) return kExitFail;
    // Deadlines after the reads: a head that came in while a build kept the
    // loop busy has been read above, and is not refused as late.
    expire(now);
    std::erase_if(connections_, [](const std::unique_ptr<connection>& c) { return c->fd < 0; });
  }
}

std::size_t server::open_count() const {
  return static_cast<std::size_t>(std::count_if(connections_.begin(), connections_.end(),
                                                [](const std::unique_ptr<connection>& c) { return c->fd >= 0; }));
}

// B4: the connection to close for a new one at the cap, or none. Answered
// ones (idle after an answer, or lingering) first, whatever their age; then
// the oldest unfinished one, once it has been so for kEvictAfter.
connection* server::victim(steady::time_point now) {
  connection* best = nullptr;
  for (const auto& c : connections_) {
    if (c->fd < 0) continue;
    if (c->at == phase::lingering || (c->at == phase::idle && c->answered))
      if (best == nullptr || c->since < best->since) best = c.get();
  }
  if (best != nullptr) return best;
  for (const auto& c : connections_) {
    if (c->fd < 0 || c->at == phase::pending || now - c->since < kEvictAfter) continue;
    if (best == nullptr || c->since < best->since) best = c.get();
  }
  return best;
}

// When victim() will find one (at the cap, none now): the oldest
// unfinished connection's kEvictAfter; nullopt if all are pending.
std::optional<steady::time_point> server::next_victim_time(steady::time_point now) {
  std::optional<steady::time_point> t;
  for (const auto& c : connections_)
    if (c->fd >= 0 && c->at != phase::pending) t = std::min(t.value_or(now + kEvictAfter), c->since + kEvictAfter);
  return t;
}

void server::accept_ready(steady::time_point now) {
  // At most a cap's worth per turn: the others wait in the listen queue
  // while the open connections are served.
  for (std::size_t n = 0; n < kMaxConnections; ++n) {
    const bool full = open_count() >= kMaxConnections;
    if (full && victim(now) == nullptr) return;
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      switch (errno) {
        case EAGAIN: return;
        case EINTR: case ECONNABORTED: case EPROTO: case EPERM: case ENETDOWN: case ENOPROTOOPT: case EHOSTDOWN:
        case ENONET: case EHOSTUNREACH: case EOPNOTSUPP: case ENETUNREACH:
          continue;  // that connection failed, not the socket (accept(2): treat as EAGAIN)
        case EMFILE: case ENFILE: case ENOBUFS: case ENOMEM:
          if (!said_accept_failure_)
            warn(std::string("warning: cannot accept a connection: ") + std::strerror(errno) +
                " (raise the open-file limit, ulimit -n, or free memory); trying again every 100 ms");
          said_accept_failure_ = true;
          accept_paused_until_ = now + kAcceptPause;
          return;
        default:
          warn(std::string("cannot accept connections: ") + std::strerror(errno));
          failed_ = true;
          return;
      }
    }
    if (full) close_connection(*victim(now));
    auto c = std::make_unique<connection>();
    c->fd = fd;
    c->since = now;
    c->deadline = now + kIdleTimeout;
    connection& added = *c;
    connections_.push_back(std::move(c));
    read_ready(added, now);  // its request is often there already
  }
}

void server::read_ready(connection& c, steady::time_point now) {
  char buf[16384];
  if (c.at == phase::lingering) {
    // B3: drop what the client still sends, until it closes or the bounds.
    const ssize_t n = ::recv(c.fd, buf, sizeof buf, 0);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
    if (n > 0) c.drained += static_cast<std::size_t>(n);
    if (n <= 0 || c.drained >= kLingerBytes) close_connection(c);
    return;
  }
  // B1: never more than kMaxBuffered in `in`; advance() consumes or refuses
  // before it is full, so a full buffer here is not reached.
  const std::size_t room = kMaxBuffered - std::min(c.in.size(), kMaxBuffered);
  if (room == 0) return close_connection(c);
  const ssize_t n = ::recv(c.fd, buf, std::min(room, sizeof buf), 0);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
  if (n <= 0) return close_connection(c);  // the client closed (or reset): no one to answer
  c.in.append(buf, static_cast<std::size_t>(n));
  advance(c, now);
}

// Moves `c` on with what is buffered: starts a request's clock at its first
// byte, finds the end of its head, reads it, waits for its small body, and
// answers or queues it. Loops over pipelined requests while their answers
// go out at once.
void server::advance(connection& c, steady::time_point now) {
  while (c.fd >= 0 && (c.at == phase::idle || c.at == phase::reading) && !c.in.empty()) {
    if (c.at == phase::idle) {
      c.at = phase::reading;
      c.since = now;
      c.deadline = now + kHeadTimeout;  // B3: from the request's first byte
    }
    if (c.need == 0) {
      const http::refusal r = http::scan_head(c.in, c.scan);
      if (r.status != 0) return refuse(c, now, r);
      if (c.scan.end == 0) return;  // more to come
      c.request = http::parse_head(std::string_view(c.in).substr(0, c.scan.end));
      if (c.request.refused.status != 0) return refuse(c, now, c.request.refused);
      c.need = c.scan.end + c.request.body;  // <= kMaxHead + kMaxBody (B1, B2)
    }
    if (c.in.size() < c.need) return;  // the body is still coming
    c.in.erase(0, c.need);
    c.need = 0;
    c.scan = {};
    route(c, now);
  }
}

void server::route(connection& c, steady::time_point now) {
  const bool close = !c.request.keep_alive;
  if (c.request.path == "/metrics") {
    c.at = phase::pending;  // answered by the next build (answer_pending)
    c.since = now;
    c.deadline = steady::time_point::max();
  } else if (c.request.path == "/") {
    answer(c, now, 200, kPlainType,
           std::make_shared<const std::string>("shmbox metrics: the Prometheus exposition is at /metrics\n"), close);
  } else {
    const std::string& p = c.request.raw_path;
    answer(c, now, 404, kPlainType,
           std::make_shared<const std::string>("not found: " + (p.size() > 200 ? p.substr(0, 200) + "..." : p) +
                                               " (the metrics are at /metrics)\n"),
           close);
  }
}

void server::refuse(connection& c, steady::time_point now, const http::refusal& r) {
  c.request.head_only = false;
  answer(c, now, r.status, kPlainType, std::make_shared<const std::string>(r.text + "\n"), true);
}

void server::answer(connection& c, steady::time_point now, int status, const char* type,
                    std::shared_ptr<const std::string> body, bool close) {
  c.reply_head = "HTTP/1.1 " + std::to_string(status) + " " + http::reason_phrase(status) + "\r\nContent-Type: " + type +
                 "\r\nContent-Length: " + std::to_string(body->size()) + "\r\n" +
                 (status == 405 ? "Allow: GET, HEAD\r\n" : "") + "Connection: " + (close ? "close" : "keep-alive") + "\r\n\r\n";
  c.reply_body = std::move(body);
  c.send_body = !c.request.head_only;
  c.sent = 0;
  c.close_after = close;
  c.at = phase::writing;
  c.since = now;
  c.deadline = now + kReplyTimeout;  // B3
  write_ready(c, now);               // most answers fit the socket's buffer at once
}

void server::write_ready(connection& c, steady::time_point now) {
  const std::size_t head = c.reply_head.size(), total = head + (c.send_body ? c.reply_body->size() : 0);
  while (c.sent < total) {
    iovec parts[2];
    int count = 0;
    if (c.sent < head) parts[count++] = {c.reply_head.data() + c.sent, head - c.sent};
    const std::size_t body_from = c.sent > head ? c.sent - head : 0;
    if (total > head) parts[count++] = {const_cast<char*>(c.reply_body->data()) + body_from, total - head - body_from};
    msghdr m{};
    m.msg_iov = parts;
    m.msg_iovlen = static_cast<std::size_t>(count);
    // Non-blocking: the kernel takes what fits its buffer; the rest waits
    // for POLLOUT. MSG_NOSIGNAL: a client gone is EPIPE, not SIGPIPE.
    const ssize_t n = ::sendmsg(c.fd, &m, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    if (n <= 0) return close_connection(c);
    c.sent += static_cast<std::size_t>(n);
  }
  c.reply_body.reset();  // the exposition is freed when its last reader is done (B5)
  c.reply_head.clear();
  c.answered = true;
  c.since = now;
  if (c.close_after) {
    // Shut the write side and drain what the client still sends: closing
    // with unread bytes would reset the connection, and the client could
    // lose the answer before reading it.
    ::shutdown(c.fd, SHUT_WR);
    c.in.clear();
    c.at = phase::lingering;
    c.deadline = now + kLingerTimeout;
  } else {
    c.at = phase::idle;
    c.deadline = now + kIdleTimeout;
  }
}

// Every GET /metrics waiting gets one build's text: built now, after each of
// their heads arrived (B5, B6).
void server::answer_pending(steady::time_point now) {
  std::vector<connection*> waiting;
  for (const auto& c : connections_)
    if (c->fd >= 0 && c->at == phase::pending) waiting.push_back(c.get());
  if (waiting.empty()) return;

  // B5: room for one more text. If kMaxExpositions are still being
  // written, the slowest readers (those of the oldest text) are closed,
  // which frees it.
  std::erase_if(texts_, [](const std::weak_ptr<const std::string>& t) { return t.expired(); });
  while (texts_.size() >= kMaxExpositions) {
    const std::shared_ptr<const std::string> oldest = texts_.front().lock();
    for (const auto& c : connections_)
      if (c->fd >= 0 && oldest != nullptr && c->reply_body == oldest) close_connection(*c);
    texts_.pop_front();
  }

  int status = 200;
  const char* type = kExpositionType;
  std::shared_ptr<const std::string> text;
  try {
    std::vector<std::string> warnings;
    std::error_code list_error;
    std::string built = metrics_exposition(warnings, list_error);
    if (list_error) {
      const std::string why = shmbox::explain(list_error);
      warn(why);
      status = 500;
      type = kPlainType;
      text = std::make_shared<const std::string>(why + "\n");
    } else {
      // A warning goes to stderr when it is new, not on every scrape of a
      // segment that stays unreadable (it is counted in the text each time).
      std::set<std::string> current(warnings.begin(), warnings.end());
      for (const std::string& w : current)
        if (warned_.count(w) == 0) warn(w);
      warned_ = std::move(current);
      text = std::make_shared<const std::string>(std::move(built));
      texts_.push_back(text);
    }
  } catch (const std::exception& e) {  // e.g. bad_alloc: this scrape fails, the exporter lives
    const std::string why = std::string("cannot build the exposition: ") + e.what();
    warn(why);
    status = 500;
    type = kPlainType;
    text = std::make_shared<const std::string>(why + "\n");
  }
  now = steady::now();  // a build can take a while: the answers' deadlines start after it
  for (connection* c : waiting) {
    if (c->fd < 0) continue;
    answer(*c, now, status, type, text, !c->request.keep_alive);
    advance(*c, now);  // a pipelined request already buffered
  }
}

// B3: each phase's deadline.
void server::expire(steady::time_point now) {
  for (const auto& c : connections_) {
    if (c->fd < 0 || now < c->deadline) continue;
    if (c->at == phase::reading)
      refuse(*c, now, {408, "the request head was not complete " + std::to_string(kHeadTimeout.count()) +
                                " s after its first byte: send the whole request at once"});
    else
      close_connection(*c);  // idle, or an answer not taken in time, or lingering done
  }
}

// A line on stderr, unless stderr cannot take it now: a pipe that nobody
// reads would block the write, and with it every scrape. poll() says POLLOUT
// on a pipe when a page (4 KiB) is free, more than a line (say() escapes it,
// a box name is at most 128 characters). A line not written is counted, and
// the count is said before the next line that is.
void server::warn(const std::string& line) {
  pollfd p{STDERR_FILENO, POLLOUT, 0};
  if (::poll(&p, 1, 0) != 1 || (p.revents & POLLOUT) == 0 || (p.revents & (POLLERR | POLLHUP | POLLNVAL)) != 0) {
    ++unsaid_;
    return;
  }
  if (unsaid_ > 0)
    say("warning: " + std::to_string(unsaid_) + " earlier line(s) were not written: standard error was full (is it read?)");
  unsaid_ = 0;
  say(line);
}

void server::close_connection(connection& c) {
  if (c.fd < 0) return;
  ::close(c.fd);
  c.fd = -1;
  c.reply_body.reset();
  c.in.clear();
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
    code = server(listen_fd, signal_fd).run();
  }
  ::close(signal_fd);
  ::close(listen_fd);
  return code;
}

}  // namespace shmbox_cli
