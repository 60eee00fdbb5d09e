// tools/http_server.cpp - the HTTP server of `shmbox metrics --listen`:
// what it does and every bound it keeps (B1-B7) are in http_server.hpp; the
// request head is read by http_head.cpp. One thread: each turn of the loop
// builds the text for the GET /metrics requests waiting, polls the signalfd,
// the listening socket and each connection for its next step, then reads,
// writes, accepts and applies the deadlines.
#include "http_server.hpp"

#include <poll.h>
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

#include "cli_args.hpp"
#include "http_head.hpp"

namespace shmbox_cli::http {

namespace {

using steady = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr std::size_t kMaxConnections = 256;   // B4
constexpr std::size_t kMaxTexts = 4;           // B5
constexpr auto kHeadTimeout = 10s;             // B3: first byte of a request to its complete head and body
constexpr auto kReplyTimeout = 30s;            // B3: to write one answer
constexpr auto kIdleTimeout = 120s;            // B3: between requests (longer than a 1 min scrape interval)
constexpr auto kLingerTimeout = 2s;            // B3: draining after an answer that closes
constexpr std::size_t kLingerBytes = 64 * 1024;
constexpr auto kEvictAfter = 1s;               // B4
constexpr auto kAcceptPause = 100ms;           // accept failed for want of files or memory: try again after this
constexpr std::size_t kMaxBuffered = kMaxHead + kMaxBody;  // B1
constexpr const char* kPlainType = "text/plain; charset=utf-8";

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
  head_scan scan;               // where the head's end is looked for in `in`
  std::size_t need = 0;         // != 0: the head is read; `in` must reach this (head + body) for the request
  request req;                  // the request being answered
  std::string reply_head;       // status line and headers
  std::shared_ptr<const std::string> reply_body;  // an exposition (shared, B5) or a line of text
  bool send_body = true;        // false for HEAD
  std::size_t sent = 0;         // bytes of reply_head + body written
  bool close_after = false;     // shut the write side and linger after this answer
  std::size_t drained = 0;      // lingering: bytes read and dropped
};

class server {
 public:
  server(int listen_fd, int signal_fd, const std::function<page()>& build)
      : listen_fd_(listen_fd), signal_fd_(signal_fd), build_(build) {}
  ~server() {
    for (const auto& c : connections_) close_connection(*c);
  }
  server(const server&) = delete;
  server& operator=(const server&) = delete;
  // serve()'s loop: true on a signal, false when accept fails for good.
  bool run();

 private:
  void accept_ready(steady::time_point now);
  connection* victim(steady::time_point now);
  std::optional<steady::time_point> next_victim_time(steady::time_point now);
  void read_ready(connection& c, steady::time_point now);
  void advance(connection& c, steady::time_point now);
  void route(connection& c, steady::time_point now);
  void answer(connection& c, steady::time_point now, int status, const char* type,
              std::shared_ptr<const std::string> body, bool close);
  void refuse(connection& c, steady::time_point now, const refusal& r);
  void write_ready(connection& c, steady::time_point now);
  void answer_pending(steady::time_point now);
  void expire(steady::time_point now);
  void close_connection(connection& c);
  std::size_t open_count() const;
  void warn(const std::string& line);

  int listen_fd_, signal_fd_;
  const std::function<page()>& build_;
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

bool server::run() {
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
      return false;
    }
    now = steady::now();
    if (fds[0].revents != 0) return true;  // SIGTERM or SIGINT: nothing more to do
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
    if (failed_) return false;
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
      const refusal r = scan_head(c.in, c.scan);
      if (r.status != 0) return refuse(c, now, r);
      if (c.scan.end == 0) return;  // more to come
      c.req = parse_head(std::string_view(c.in).substr(0, c.scan.end));
      if (c.req.refused.status != 0) return refuse(c, now, c.req.refused);
      c.need = c.scan.end + c.req.body;  // <= kMaxHead + kMaxBody (B1, B2)
    }
    if (c.in.size() < c.need) return;  // the body is still coming
    c.in.erase(0, c.need);
    c.need = 0;
    c.scan = {};
    route(c, now);
  }
}

void server::route(connection& c, steady::time_point now) {
  const bool close = !c.req.keep_alive;
  if (c.req.path == "/metrics") {
    c.at = phase::pending;  // answered by the next build (answer_pending)
    c.since = now;
    c.deadline = steady::time_point::max();
  } else if (c.req.path == "/") {
    answer(c, now, 200, kPlainType,
           std::make_shared<const std::string>("shmbox metrics: the Prometheus exposition is at /metrics\n"), close);
  } else {
    const std::string& p = c.req.raw_path;
    answer(c, now, 404, kPlainType,
           std::make_shared<const std::string>("not found: " + (p.size() > 200 ? p.substr(0, 200) + "..." : p) +
                                               " (the metrics are at /metrics)\n"),
           close);
  }
}

void server::refuse(connection& c, steady::time_point now, const refusal& r) {
  c.req.head_only = false;
  answer(c, now, r.status, kPlainType, std::make_shared<const std::string>(r.text + "\n"), true);
}

void server::answer(connection& c, steady::time_point now, int status, const char* type,
                    std::shared_ptr<const std::string> body, bool close) {
  c.reply_head = "HTTP/1.1 " + std::to_string(status) + " " + reason_phrase(status) + "\r\nContent-Type: " + type +
                 "\r\nContent-Length: " + std::to_string(body->size()) + "\r\n" +
                 (status == 405 ? "Allow: GET, HEAD\r\n" : "") + "Connection: " + (close ? "close" : "keep-alive") + "\r\n\r\n";
  c.reply_body = std::move(body);
  c.send_body = !c.req.head_only;
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
// their heads arrived (B5, B6); a 500 when the build fails.
void server::answer_pending(steady::time_point now) {
  std::vector<connection*> waiting;
  for (const auto& c : connections_)
    if (c->fd >= 0 && c->at == phase::pending) waiting.push_back(c.get());
  if (waiting.empty()) return;

  // B5: room for one more text. If kMaxTexts are still being
  // written, the slowest readers (those of the oldest text) are closed,
  // which frees it.
  std::erase_if(texts_, [](const std::weak_ptr<const std::string>& t) { return t.expired(); });
  while (texts_.size() >= kMaxTexts) {
    const std::shared_ptr<const std::string> oldest = texts_.front().lock();
    for (const auto& c : connections_)
      if (c->fd >= 0 && oldest != nullptr && c->reply_body == oldest) close_connection(*c);
    texts_.pop_front();
  }

  page built;
  try {
    built = build_();
  } catch (const std::exception& e) {  // e.g. bad_alloc: this scrape fails, the exporter lives
    built = {500, kPlainType, std::string("cannot build the text: ") + e.what() + "\n", {}};
  }
  std::shared_ptr<const std::string> text;
  if (built.status == 200) {
    // A warning goes to stderr when it is new, not on every scrape of a
    // segment that stays unreadable (it is counted in the text each time).
    std::set<std::string> current(built.warnings.begin(), built.warnings.end());
    for (const std::string& w : current)
      if (warned_.count(w) == 0) warn(w);
    warned_ = std::move(current);
    text = std::make_shared<const std::string>(std::move(built.body));
    texts_.push_back(text);
  } else {
    warn(built.body.substr(0, built.body.find('\n')));
    text = std::make_shared<const std::string>(std::move(built.body));
  }
  now = steady::now();  // a build can take a while: the answers' deadlines start after it
  for (connection* c : waiting) {
    if (c->fd < 0) continue;
    answer(*c, now, built.status, built.content_type, text, !c->req.keep_alive);
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

}  // namespace

bool serve(int listen_fd, int signal_fd, const std::function<page()>& build) {
  return server(listen_fd, signal_fd, build).run();
}

}  // namespace shmbox_cli::http
