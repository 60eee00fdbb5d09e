// tests/adversary/attacker.cpp - the second user's loop, its options, and its
// actions on root's segments: truncate and flip sizes, hold bytes, write
// random bytes, rewrite dead-letter names (attacker.hpp says what it does).
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstring>
#include <sstream>

#include "attacker.hpp"
#include "pool/pool_layout.hpp"
#include "segment/layout.hpp"

namespace adv::attack {

// ---------------------------------------------------------------------------
// segments of root's

std::vector<std::string> attacker::writable() {
  std::vector<std::string> out = o_.write;
  for (const auto& p : o_.write_prefix)
    for (const auto& e : shm_entries(p))
      if (!plants_.count(e)) out.push_back(e);
  return out;
}

// Opens root's segment `entry` as a regular file, never following a link
// or waiting; -1 if it is not one (or is one of ours).
int attacker::open_root(const std::string& entry, int flags, struct stat* st) {
  if (plants_.count(entry)) return -1;
  const int fd = ::open(path_of(entry).c_str(), flags | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return -1;
  if (::fstat(fd, st) != 0 || !S_ISREG(st->st_mode)) {
    ::close(fd);
    return -1;
  }
  return fd;
}

void attacker::act_truncate() {
  const auto w = writable();
  if (w.empty()) return;
  const std::string entry = r_.pick(w);
  struct stat st {};
  const int fd = open_root(entry, O_RDWR, &st);
  if (fd < 0) return void(++t_["truncate_refused"]);
  const off_t orig = first_size_.emplace(st.st_ino, st.st_size).first->second;
  const off_t sizes[] = {0, 1, 64, 4096, 8192, orig / 2, orig - 1, orig, orig + 4096};
  const off_t to = std::max<off_t>(0, sizes[r_.below(std::size(sizes))]);
  if (::ftruncate(fd, to) == 0) {
    ++t_["truncate"];
    if (!r_.chance(3)) restores_.push_back({entry, st.st_ino, orig, now_ms() + r_.below(300)});
  } else {
    ++t_["truncate_failed"];
  }
  ::close(fd);
}

void attacker::act_lock() {
  auto w = writable();
  const std::size_t n_write = w.size();
  w.insert(w.end(), o_.read.begin(), o_.read.end());
  if (w.empty()) return;
  const std::size_t i = static_cast<std::size_t>(r_.below(w.size()));
  const bool may_write = i < n_write;
  struct stat st {};
  const int fd = open_root(w[i], may_write ? O_RDWR : O_RDONLY, &st);
  if (fd < 0) return void(++t_["lock_refused"]);
  struct flock l {};
  l.l_whence = SEEK_SET;
  switch (r_.below(4)) {
    case 0: l.l_start = 0, l.l_len = 0; break;  // the whole file: every role byte at once
    case 1: l.l_start = 0, l.l_len = 1; break;  // the attach byte
    case 2: l.l_start = static_cast<off_t>(r_.below(256)), l.l_len = 1; break;
    default: l.l_start = static_cast<off_t>(r_.below(static_cast<std::uint64_t>(std::max<off_t>(1, std::min<off_t>(st.st_size, 2 << 20))))), l.l_len = 1;
  }
  l.l_type = may_write && !r_.chance(4) ? F_WRLCK : F_RDLCK;
  if (::fcntl(fd, F_OFD_SETLK, &l) != 0) {
    ++t_["lock_busy"];
    ::close(fd);
    return;
  }
  ++t_[l.l_type == F_WRLCK ? "lock_exclusive" : "lock_shared"];
  if (locks_.size() >= 24) {
    ::close(locks_.front().fd);
    locks_.erase(locks_.begin());
  }
  static constexpr std::uint64_t kHold[] = {5, 50, 300, 1500};
  locks_.push_back({fd, now_ms() + kHold[r_.below(4)]});
}

void attacker::act_scribble() {
  const auto w = writable();
  if (w.empty()) return;
  struct stat st {};
  const int fd = open_root(r_.pick(w), O_RDWR, &st);
  if (fd < 0 || st.st_size <= 0) {
    if (fd >= 0) ::close(fd);
    return void(++t_["scribble_refused"]);
  }
  const auto size = static_cast<std::uint64_t>(st.st_size);
  // Where: the first page (headers, owner record; mostly aligned words), the
  // rings and tables past a box's lane headers (its header stays whole, so
  // root's processes keep using the box), or anywhere.
  std::uint64_t lo = 0, hi = size;
  const unsigned where = static_cast<unsigned>(r_.below(3));
  if (where == 0) {
    hi = std::min<std::uint64_t>(size, 4096);
  } else if (where == 1) {
    shmbox::detail::segment_header h{};
    if (::pread(fd, &h, sizeof h, 0) == static_cast<ssize_t>(sizeof h) && h.magic == shmbox::detail::kMagic && h.lanes_offset < size)
      lo = h.lanes_offset + std::uint64_t{h.lane_count} * sizeof(shmbox::detail::lane_header);
    if (lo >= size) lo = 0;
  }
  static constexpr std::uint64_t kBursts[] = {1, 16, 256, 4096};
  const std::uint64_t n = kBursts[r_.below(4)];
  std::uint64_t writes = 0;
  for (std::uint64_t k = 0; k < n; ++k) {
    unsigned char b[16];
    std::size_t len = 8;
    std::uint64_t at = lo + r_.below(hi - lo);
    if (where == 0) at &= ~std::uint64_t{3};
    if (r_.chance(2)) {
      len = 1 + static_cast<std::size_t>(r_.below(16));
      for (auto& c : b) c = static_cast<unsigned char>(r_.next());
    } else {
      const std::uint64_t kValues[] = {0, 1, ~std::uint64_t{0}, 0x7fffffff, 0x80000000, size, size * 2, r_.below(1024), r_.next()};
      const std::uint64_t v = kValues[r_.below(std::size(kValues))];
      std::memcpy(b, &v, 8);
    }
    len = static_cast<std::size_t>(std::min<std::uint64_t>(len, size - at));  // never past the end: no growing
    if (::pwrite(fd, b, len, static_cast<off_t>(at)) > 0) ++writes;
  }
  ::close(fd);
  ++t_["scribble"];
  t_["writes"] += writes;
}

// Names the victim as the dead letters of a writable box (and turns its
// lanes drop-oldest, so that posts evict) or pool: what a writer of a 0666
// segment can do to what root's processes follow (T4).
void attacker::act_config() {
  if (o_.victim.empty()) return;
  const auto w = writable();
  if (w.empty()) return;
  const std::string entry = r_.pick(w);
  struct stat st {};
  const int fd = open_root(entry, O_RDWR, &st);
  if (fd < 0) return void(++t_["config_refused"]);
  const auto size = static_cast<std::uint64_t>(st.st_size);
  bool done = false;
  if (entry.rfind("shmbox-pool.", 0) == 0) {
    namespace d = shmbox::detail;
    const std::uint64_t at = d::kPoolConfigOffset + offsetof(d::pool_config, dead_letters);
    char name[128] = {};
    std::memcpy(name, o_.victim.data(), std::min<std::size_t>(o_.victim.size(), 127));
    done = at + sizeof name <= size && ::pwrite(fd, name, sizeof name, static_cast<off_t>(at)) == static_cast<ssize_t>(sizeof name);
  } else {
    shmbox::detail::segment_header h{};
    if (::pread(fd, &h, sizeof h, 0) == static_cast<ssize_t>(sizeof h) && h.config_offset + 256 <= size) {
      const auto len = static_cast<std::uint32_t>(o_.victim.size());
      done = ::pwrite(fd, &len, 4, static_cast<off_t>(h.config_offset)) == 4 &&
             ::pwrite(fd, o_.victim.data(), len, static_cast<off_t>(h.config_offset + 4)) == static_cast<ssize_t>(len);
      const auto policy = static_cast<std::uint32_t>(shmbox::policy::drop_oldest);
      for (std::uint32_t l = 0; l < std::min<std::uint32_t>(h.lane_count, shmbox::kMaxLanes); ++l) {
        const std::uint64_t at = h.lanes_offset + l * sizeof(shmbox::detail::lane_header) + offsetof(shmbox::detail::lane_header, policy);
        if (at + 4 <= size) [[maybe_unused]] const ssize_t n = ::pwrite(fd, &policy, 4, static_cast<off_t>(at));
      }
    }
  }
  ::close(fd);
  ++t_[done ? "config" : "config_failed"];
}

// ---------------------------------------------------------------------------
// the loop

void attacker::upkeep(bool final) {
  const std::uint64_t now = now_ms();
  std::erase_if(locks_, [&](const held& h) {
    if (!final && h.until > now) return false;
    ::close(h.fd);
    return true;
  });
  std::erase_if(restores_, [&](const restore& r) {
    if (!final && r.at > now) return false;
    struct stat st {};
    const int fd = open_root(r.entry, O_RDWR, &st);
    if (fd >= 0) {
      if (st.st_ino == r.ino && ::ftruncate(fd, r.size) == 0) ++t_["truncate_restored"];
      ::close(fd);
    }
    return true;
  });
  std::erase_if(http_, [&](http_conn& c) {
    if (!c.held) {
      char buf[4096];
      for (ssize_t n; (n = ::recv(c.fd, buf, sizeof buf, MSG_DONTWAIT)) != 0;) {
        if (n < 0) {
          if (errno == EAGAIN || errno == EINTR) break;
          c.got += "\n(reset)";
          n = 0;
          break;
        }
        if (c.got.size() < 256) c.got.append(buf, static_cast<std::size_t>(std::min<ssize_t>(n, 256)));
      }
      const bool closed = [&] {
        pollfd p{c.fd, POLLIN, 0};
        char b;
        return ::poll(&p, 1, 0) == 1 && ::recv(c.fd, &b, 1, MSG_DONTWAIT | MSG_PEEK) == 0;
      }();
      const bool answered = c.got.rfind("HTTP/1.", 0) == 0 && c.got.find("\r\n") != std::string::npos;
      if (!answered && !closed && now < c.deadline && !final) return false;
      if (answered) ++t_["http." + c.got.substr(9, 3)];
      else if (closed || c.got.find("(reset)") != std::string::npos) ++t_["http_closed"];
      else if (!final) ++t_["http_stalled"], ++t_["http_stalled." + std::to_string(c.kind)];
    } else if (!final && now < c.deadline) {
      return false;
    }
    ::close(c.fd);
    return true;
  });
}

void attacker::commands() {
  if (!stdin_open_) return;
  pollfd p{0, POLLIN, 0};
  if (::poll(&p, 1, 0) != 1) return;
  char buf[4096];
  const ssize_t n = ::read(0, buf, sizeof buf - 1);
  if (n <= 0) return void(stdin_open_ = false);
  std::istringstream in(std::string(buf, static_cast<std::size_t>(n)));
  for (std::string l; std::getline(in, l);) {
    const auto f = shmtest::fields(l);
    if (f.size() >= 3 && f[0] == "plant") {
      unplant(f[1]);
      say("planted " + f[1] + " " + plant_at(f[1], f[2], f.size() > 3 ? f[3] : ""));
    }
  }
}

int attacker::run() {
  ::umask(0);
  ::signal(SIGPIPE, SIG_IGN);
  struct action {
    const char* name;
    bool possible;
    unsigned weight;
    void (attacker::*fn)();
  };
  const bool can_write = !o_.write.empty() || !o_.write_prefix.empty();
  std::vector<action> all = {
      {"plant", !o_.plant.empty() || !o_.plant_next.empty(), 3, &attacker::act_plant},
      {"truncate", can_write, 1, &attacker::act_truncate},
      {"lock", can_write || !o_.read.empty(), 2, &attacker::act_lock},
      {"scribble", can_write, 3, &attacker::act_scribble},
      {"config", can_write && !o_.victim.empty(), 1, &attacker::act_config},
      {"forge", !o_.service.empty(), 4, &attacker::act_forge},
      {"http", o_.http_port != 0, 3, &attacker::act_http},
      {"bell", !o_.bells.empty(), 2, &attacker::act_bell},
  };
  std::vector<const action*> deck;
  for (const auto& a : all)
    if (a.possible && (o_.actions.empty() || o_.actions.count(a.name)))
      for (unsigned w = 0; w < a.weight; ++w) deck.push_back(&a);
  say("ready uid=" + std::to_string(::geteuid()) + " seed=" + std::to_string(o_.seed) + " kinds=" + std::to_string(deck.size()));
  const std::uint64_t end = now_ms() + static_cast<std::uint64_t>(o_.ms);
  while (now_ms() < end && !deck.empty()) {
    commands();
    upkeep(false);
    const action* a = deck[static_cast<std::size_t>(r_.below(deck.size()))];
    (this->*(a->fn))();
    ++t_[a->name + std::string("_tried")];
    ++t_["actions"];
    if (r_.chance(2)) ::usleep(static_cast<useconds_t>(r_.below(1500)));  // root needs the CPU too
  }
  upkeep(true);
  while (!plants_.empty()) unplant(plants_.begin()->first);
  svc_.reset();
  std::string line = "done seed=" + std::to_string(o_.seed);
  for (const auto& [k, v] : t_) line += " " + k + "=" + std::to_string(v);
  say(line);
  return 0;
}

}  // namespace adv::attack

namespace adv {

int attacker_main(int argc, char** argv) {
  attack::options o;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    const std::string v = i + 1 < argc ? argv[i + 1] : "";
    auto take = [&] { ++i; return v; };
    if (a == "--probe") {
      std::printf("uid %u\n", static_cast<unsigned>(::geteuid()));
      return 0;
    } else if (a == "--seed") o.seed = std::strtoull(take().c_str(), nullptr, 10);
    else if (a == "--ms") o.ms = std::strtol(take().c_str(), nullptr, 10);
    else if (a == "--plant") {
      const std::string cv = take();
      const auto colon = cv.find(':');
      o.plant.emplace_back(cv.substr(0, colon), cv.substr(colon + 1));
    } else if (a == "--plant-next") o.plant_next.push_back(take());
    else if (a == "--write") o.write.push_back(take());
    else if (a == "--write-prefix") o.write_prefix.push_back(take());
    else if (a == "--read") o.read.push_back(take());
    else if (a == "--bell") o.bells.push_back(take());
    else if (a == "--bell-box") o.bell_boxes.push_back(take());
    else if (a == "--service") o.service = take();
    else if (a == "--victim") o.victim = take();
    else if (a == "--http") o.http_port = static_cast<int>(std::strtol(take().c_str(), nullptr, 10));
    else if (a == "--link-target") o.link_targets.push_back(take());
    else if (a == "--impersonate") o.impersonate = true;
    else if (a == "--actions") {
      std::istringstream in(take());
      for (std::string w; std::getline(in, w, ',');) o.actions.insert(w);
    } else {
      std::fprintf(stderr, "shmbox-adversary attack: unknown option %s\n", a.c_str());
      return 2;
    }
  }
  if (o.link_targets.empty()) o.link_targets = o.write;
  return attack::attacker(std::move(o)).run();
}

}  // namespace adv
