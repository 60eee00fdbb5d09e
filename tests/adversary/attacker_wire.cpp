// tests/adversary/attacker_wire.cpp - the second user's requests to the
// exporter (malformed, slow, idle) and writes into doorbells (garbage, forged
// records, floods) (attacker.hpp).
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <cstring>

#include "attacker.hpp"

namespace adv::attack {

// ---------------------------------------------------------------------------
// HTTP (the exporter)

void attacker::act_http() {
  if (o_.http_port == 0) return;
  static const std::vector<std::string> kRequests = {
      "GARBAGE\r\n\r\n",
      "GET\r\n\r\n",
      "GET /metrics\r\n\r\n",
      "GET /metrics HTTP/9.9\r\n\r\n",
      "GET /metrics HTTP/1.1\r\n\r\n",
      "GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n",
      "GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999999\r\n\r\n",
      "GET /metrics HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nZZZ\r\n",
      "GET /metrics HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
      "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello",
      "GET /../../etc/passwd HTTP/1.1\r\nHost: x\r\n\r\n",
      "GET /metrics?%zz HTTP/1.1\r\nHost: x\r\n\r\n",
      "GET /metrics HTTP/1.1\r\nHost: x\r\nRange: bytes=0-,0-,0-,0-\r\n\r\n",
      "GET /" + std::string(9000, 'a') + " HTTP/1.1\r\n\r\n",
      [] {  // a NUL inside a header (its length from the array: 42 bytes, not a count by hand)
        static constexpr char s[] = "GET /metrics HTTP/1.1\r\nHost: x\r\nX: a\0b\r\n\r\n";
        return std::string(s, sizeof s - 1);
      }(),
      "GET /metrics HTTP/1.1\n\n",
      "\r\n\r\n\r\nGET /metrics HTTP/1.1\r\nHost: x\r\n\r\n",
      "GET /metrics HTTP/1.1\r\nHost: x\r\n Folded: y\r\n\r\n",
      "GET /metrics HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n",
      "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\nGET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
      "HEAD /metrics HTTP/1.0\r\n\r\n",
      "OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n",
      "GET http://evil.example/metrics HTTP/1.1\r\nHost: x\r\n\r\n",
      "GET /metrics HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 10\r\n\r\n0123456789",
      "BINARY",
  };
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(o_.http_port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 && errno != EINPROGRESS) {
    ::close(fd);
    return void(++t_["http_connect_failed"]);
  }
  pollfd p{fd, POLLOUT, 0};
  if (::poll(&p, 1, 1000) != 1) {
    ::close(fd);
    return void(++t_["http_connect_failed"]);
  }
  http_conn c;
  c.fd = fd;
  // Held, closed later: idle, a half head (slowloris), one byte, a body promised and never sent.
  static constexpr const char* kHeld[] = {"", "GET /metrics HTTP/1.1\r\nHost: x\r\nUser-Agent: slow", "G",
                                          "GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n01"};
  const std::uint64_t pick = r_.below(kRequests.size() + std::size(kHeld));
  if (pick >= kRequests.size()) {
    const char* s = kHeld[pick - kRequests.size()];
    [[maybe_unused]] const ssize_t n = ::send(fd, s, std::strlen(s), MSG_NOSIGNAL);
    c.held = true;
    c.deadline = now_ms() + 100 + r_.below(6000);
    ++t_["http_held"];
  } else {
    std::string req = kRequests[pick];
    if (req == "BINARY") {  // random bytes, then the end of a head: an answer is due
      req.resize(100 + r_.below(2000));
      for (auto& ch : req) ch = static_cast<char>(r_.next());
      req += "\r\n\r\n";
    }
    [[maybe_unused]] const ssize_t n = ::send(fd, req.data(), req.size(), MSG_NOSIGNAL);
    c.deadline = now_ms() + 5000;
    c.kind = static_cast<std::size_t>(pick);
    ++t_["http_sent"];
  }
  http_.push_back(std::move(c));
}

// ---------------------------------------------------------------------------
// doorbells (lib/wake/notify_hub.hpp DOORBELL RECORDS)

void attacker::act_bell() {
  if (o_.bells.empty()) return;
  const std::string entry = r_.pick(o_.bells);
  struct stat st {};
  if (plants_.count(entry) || ::lstat(path_of(entry).c_str(), &st) != 0 || !S_ISFIFO(st.st_mode)) return void(++t_["bell_absent"]);
  const int fd = ::open(path_of(entry).c_str(), O_WRONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return void(++t_["bell_unopened"]);
  char line[128];
  std::string bytes;
  switch (r_.below(5)) {
    case 0:  // odd-sized garbage
      bytes.resize(1 + r_.below(40));
      for (auto& c : bytes) c = static_cast<char>(r_.next());
      ++t_["bell.garbage"];
      break;
    case 1:  // a record naming nothing
      std::snprintf(line, sizeof line, "\nB%" PRIx64 ":%" PRIx64 "\n", r_.next(), r_.next());
      bytes = line;
      ++t_["bell.record_random"];
      break;
    case 2: {  // a record naming a real box of root's: a spurious wake-up at most
      if (o_.bell_boxes.empty()) break;
      struct stat b {};
      if (::stat(("/dev/shm/shmbox." + r_.pick(o_.bell_boxes)).c_str(), &b) != 0) break;
      std::snprintf(line, sizeof line, "\nB%" PRIx64 ":%" PRIx64 "\n", static_cast<std::uint64_t>(b.st_dev),
                    static_cast<std::uint64_t>(b.st_ino));
      bytes = line;
      ++t_["bell.record_box"];
      break;
    }
    case 3:  // half a record, the rest never
      bytes = "\nB12";
      ++t_["bell.partial"];
      break;
    default: {  // a flood: the FIFO full, rings lost until the hub reads (its scan makes them up)
      const std::string chunk(512, 'F');
      std::uint64_t n = 0;
      while (n < 128 && ::write(fd, chunk.data(), chunk.size()) > 0) ++n;
      t_["bell_bytes"] += n * 512;
      ++t_["bell.flood"];
    }
  }
  if (!bytes.empty() && ::write(fd, bytes.data(), bytes.size()) > 0) t_["bell_bytes"] += bytes.size();
  ::close(fd);
  ++t_["bell"];
}

}  // namespace adv::attack
