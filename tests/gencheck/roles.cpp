// tests/gencheck/roles.cpp - the processes the generative checker's driver
// starts (fork + exec of shmbox-gencheck with a role as first argument):
//
//   producer BOX PROD LEDGER_FD   attaches, prints "ready ENTRY", then posts
//                                 what the driver says (protocol.hpp), each
//                                 post recorded in the ledger before and after
//   owner BOX acquire|heir        takes the box (Owner::acquire) or enlists as
//                                 heir and waits for it (Heir::await_transfer),
//                                 prints "owned EPOCH REASON", then receives
//                                 what the driver says, printing every message
//
// Each does one thing at a time, when told, so that between two commands the
// box does not change: the driver's model can then say what each call must
// return. A role may be killed (SIGKILL, or SHMBOX_FAULT at a crash point)
// at any instruction; that is the point.
#include <poll.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "protocol.hpp"
#include "shmbox/shmbox.hpp"

namespace gencheck {

namespace {

using namespace std::chrono_literals;

// One line from stdin (without '\n'); false at EOF. `idle` (if set) is called
// every `every` while no line comes (a lease owner renews its lease there).
template <class Idle>
bool read_command(std::string& line, std::chrono::milliseconds every, Idle&& idle) {
  static std::string buf;
  for (;;) {
    if (const auto nl = buf.find('\n'); nl != std::string::npos) {
      line = buf.substr(0, nl);
      buf.erase(0, nl + 1);
      return true;
    }
    pollfd p{0, POLLIN, 0};
    const int r = ::poll(&p, 1, static_cast<int>(every.count()));
    if (r == 0) {
      idle();
      continue;
    }
    char tmp[4096];
    const ssize_t n = ::read(0, tmp, sizeof tmp);
    if (n <= 0) return false;
    buf.append(tmp, static_cast<std::size_t>(n));
  }
}

void say(const std::string& s) {
  std::fwrite(s.data(), 1, s.size(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

std::vector<std::string> words(const std::string& l) {
  std::vector<std::string> w;
  std::istringstream in(l);
  for (std::string s; in >> s;) w.push_back(s);
  return w;
}

std::uint64_t num(const std::vector<std::string>& w, std::size_t i) {
  return i < w.size() ? std::strtoull(w[i].c_str(), nullptr, 10) : 0;
}

ledger* map_ledger(const char* fd) {
  void* p = ::mmap(nullptr, sizeof(ledger), PROT_READ | PROT_WRITE, MAP_SHARED, std::atoi(fd), 0);
  return p == MAP_FAILED ? nullptr : static_cast<ledger*>(p);
}

int producer_main(const std::string& name, std::uint32_t prod, ledger* L) {
  auto box = shmbox::Box::open(name);
  auto p = box ? shmbox::Producer::attach(*box) : shmbox::result<shmbox::Producer>(box.error());
  if (!p) {
    say("error " + shmbox::explain(p.error()));
    return 1;
  }
  say("ready " + std::to_string(p->entry_index()));
  ledger_record& rec = L->prod[prod];
  std::string line;
  while (read_command(line, 1000ms, [] {})) {
    const auto w = words(line);
    if (w.empty()) continue;
    if (w[0] == "exit") return 0;
    if (w[0] == "post") {
      const auto lane = static_cast<std::uint32_t>(num(w, 1));
      const auto seq = static_cast<std::uint32_t>(num(w, 2));
      const auto prio = static_cast<std::int64_t>(std::strtoll(w.size() > 3 ? w[3].c_str() : "0", nullptr, 10));
      const auto timeout = std::chrono::milliseconds(num(w, 4));
      const std::string bytes = encode({prod, seq}, num(w, 5));
      rec.attempt.store(std::uint64_t{seq} + 1);
      const shmbox::post_status st = p->post(bytes, {.lane = lane, .timeout = timeout, .priority = prio});
      rec.status.store(static_cast<std::uint32_t>(st));
      rec.evicted.store(p->last_evicted());
      rec.done.store(std::uint64_t{seq} + 1);
      std::string out = "r " + std::to_string(seq) + " " + std::string(shmbox::to_string(st)) + " " +
                        std::to_string(p->last_evicted());
      if (st == shmbox::post_status::error) out += " " + shmbox::explain(p->last_error());
      say(out);
      continue;
    }
    if (w[0] == "resize") {
      auto r = box->resize(static_cast<std::uint32_t>(num(w, 2)), static_cast<std::uint32_t>(num(w, 1)));
      if (r)
        say("z ok " + std::to_string(r->before) + " " + std::to_string(r->after) + " " + std::to_string(r->dropped));
      else
        say("z error " + shmbox::explain(r.error()));
      continue;
    }
    say("error unknown command: " + line);
  }
  return 0;
}

// One received message, as the owner prints it and keeps it (for stash K).
struct got {
  std::string data;
  std::uint32_t lane = 0;
  std::int64_t priority = 0;
  bool redelivered = false;
};

std::string describe(const std::vector<got>& msgs) {
  std::string out;
  for (const got& g : msgs) {
    const auto m = decode(g.data);
    if (!m) {
      out += " torn:" + std::to_string(g.lane) + ":" + std::to_string(g.data.size());
      continue;
    }
    out += " " + std::to_string(g.lane) + ":" + std::to_string(m->prod) + ":" + std::to_string(m->seq) + ":" +
           (g.redelivered ? "1" : "0");
  }
  return out;
}

int serve(shmbox::Owner& o, std::chrono::milliseconds lease) {
  say("owned " + std::to_string(o.epoch()) + " " + std::string(shmbox::to_string(o.transfer().reason)));
  std::vector<got> last;
  std::string line;
  // A lease owner renews while the driver thinks (the driver stops it with
  // SIGSTOP when it wants the lease to run out).
  const auto every = lease.count() > 0 ? std::max<std::chrono::milliseconds>(lease / 4, 5ms) : 1000ms;
  auto renew = [&] {
    if (lease.count() > 0) o.renew();
  };
  auto answer = [&](shmbox::recv_status st) {
    std::string out = "g " + std::string(shmbox::to_string(st)) + " " + std::to_string(last.size()) + describe(last);
    if (st == shmbox::recv_status::error) out += " error:" + shmbox::explain(o.last_error());
    say(out);
  };
  while (read_command(line, every, renew)) {
    const auto w = words(line);
    if (w.empty()) continue;
    if (w[0] == "exit") return 0;
    if (w[0] == "recv") {
      std::vector<shmbox::message> ms;
      const auto st = o.receive_batch(ms, {.max = num(w, 1), .timeout = std::chrono::milliseconds(num(w, 2))});
      last.clear();
      for (auto& m : ms) last.push_back({std::move(m.data), m.lane, m.priority, m.redelivered});
      answer(st);
    } else if (w[0] == "try") {
      shmbox::message m;
      const auto st = o.try_receive(m);
      last.clear();
      if (st == shmbox::recv_status::ok) last.push_back({std::move(m.data), m.lane, m.priority, m.redelivered});
      answer(st);
    } else if (w[0] == "read") {
      shmbox::batch b;
      const auto st = o.read(b, {.max = num(w, 1), .timeout = std::chrono::milliseconds(num(w, 2))});
      last.clear();
      for (std::size_t i = 0; i < b.size(); ++i) last.push_back({std::string(b[i]), b.lane(i), b.priority(i), b.redelivered(i)});
      answer(st);
    } else if (w[0] == "commit") {
      std::size_t lost = 0;
      const auto st = o.commit(&lost);
      say("c " + std::string(shmbox::to_string(st)) + " " + std::to_string(lost));
    } else if (w[0] == "stash") {
      const std::size_t k = num(w, 1);
      if (k >= last.size()) {
        say("s error no-such-message");
        continue;
      }
      const auto st = o.stash(last[k].data, last[k].lane, last[k].priority);
      say("s " + std::string(shmbox::to_string(st)) +
          (st == shmbox::recv_status::error ? " " + shmbox::explain(o.last_error()) : std::string()));
    } else if (w[0] == "unstash") {
      say("u " + std::to_string(o.unstash_all()));
    } else {
      say("error unknown command: " + line);
    }
  }
  return 0;
}

int owner_main(const std::string& name, bool heir) {
  auto box = shmbox::Box::open(name);
  if (!box) {
    say("error " + shmbox::explain(box.error()));
    return 1;
  }
  const auto lease = shmbox::info(*box).lease;
  if (!heir) {
    auto o = shmbox::Owner::acquire(*box);
    if (!o) {
      say("error " + shmbox::explain(o.error()));
      return 1;
    }
    return serve(*o, lease);
  }
  auto h = shmbox::Heir::enlist(*box, "gencheck");
  if (!h) {
    say("error " + shmbox::explain(h.error()));
    return 1;
  }
  say("enlisted " + std::to_string(h->position()));
  for (;;) {
    // The driver gone (its end of our stdin closed): so are we.
    pollfd p{0, POLLIN, 0};
    if (::poll(&p, 1, 0) == 1 && (p.revents & (POLLHUP | POLLIN)) != 0) {
      char c;
      if (::read(0, &c, 1) <= 0) return 0;
    }
    auto o = h->await_transfer(200ms);
    if (o) return serve(*o, lease);
    if (o.error() != shmbox::errc::timed_out) {
      say("error " + shmbox::explain(o.error()));
      return 1;
    }
  }
}

}  // namespace

// The role processes' entry (gencheck.cpp's main calls it for argv[1] a role).
int role_main(int argc, char** argv) {
  const std::string role = argv[1];
  if (role == "producer" && argc == 5) {
    ledger* L = map_ledger(argv[4]);
    if (L == nullptr) return 1;
    return producer_main(argv[2], static_cast<std::uint32_t>(std::strtoul(argv[3], nullptr, 10)), L);
  }
  if (role == "owner" && argc == 4) return owner_main(argv[2], std::strcmp(argv[3], "heir") == 0);
  std::fprintf(stderr, "shmbox-gencheck: bad role arguments\n");
  return 2;
}

}  // namespace gencheck
