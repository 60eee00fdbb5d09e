// tests/adversary/roles.cpp - root's workload: `shmbox-adversary role ROLE ...`,
// each a separate process the driver starts (adversary.hpp start_role). Each
// prints "ready" once it works, runs until its stdin closes, then prints one
// "done key=value..." line: what its calls returned, and how many took
// longer than their deadline plus kSlackMs ("late"; max_ms: the longest).
//
//   produce BOX [--any-owner] [--timeout-ms T] [--pause-us U] [--reattach-every K] [--size B]
//       posts "<pid>:<seq>" messages; a post that says error, and every K
//       posts, attaches again (a new Producer: the dead letters are named
//       again). posted= is the number of post calls, stored=/evicted=/...
//       what they returned.
//   own BOX
//       receives (50 ms waits); not_owner or error: acquires again. At the
//       end, drains what is left (received= counts every message).
//   serve BOX
//       the service of request/reply: answers each request "re:<bytes>"
//       (Owner::reply never waits: its calls are timed too); counts plain
//       messages and each reply status.
//   ask BOX --tag T [--timeout-ms T]
//       a Requester: call("<tag>:<i>") again and again; ok= replies that are
//       exactly "re:<tag>:<i>", wrong= others; and the requester's stats
//       (stray, duplicates, late replies).
//   spray NAME... [--pause-us U]
//       one producer on each box, posting into them in turn.
//   group [--when-told] NAME...
//       owns every box through one NotifyGroup (the doorbell route, notify_hub.hpp):
//       says "owned key=<its process key in hex>" (its doorbell's name),
//       with --when-told waits for a line first, then joins and arms them
//       all and says "ready"; each tag handed out: wait(0), take all,
//       arm again. received= every message, woken= the notifications,
//       spurious= tags that found nothing armed and fired.
//   churn PREFIX N
//       library calls on the names PREFIX0..PREFIX<N-1> (the attacker plants
//       at them): create (then post, acquire, receive, remove), open,
//       inspect, attach, acquire, verify, Pool::open, collect (dry run).
//       Any answer is fine but a late one; counts errors by call.
#include <poll.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <string>

#include "adversary.hpp"
#include "base/process.hpp"

namespace adv {
namespace {

constexpr long kSlackMs = 3000;  // what a loaded 2-core machine may add to a call's own deadline

std::uint64_t now_ms() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<ms>(steady::now().time_since_epoch()).count());
}

void say(const std::string& line) {
  const std::string l = line + "\n";
  [[maybe_unused]] const ssize_t n = ::write(1, l.data(), l.size());
}

// stdin has closed (or said something): time to stop.
bool told_to_stop() {
  pollfd p{0, POLLIN, 0};
  return ::poll(&p, 1, 0) != 0;
}

std::string flag(int argc, char** argv, const char* name, const std::string& fallback) {
  for (int i = 0; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return argv[i + 1];
  return fallback;
}
long flag_num(int argc, char** argv, const char* name, long fallback) {
  const std::string v = flag(argc, argv, name, "");
  return v.empty() ? fallback : std::strtol(v.c_str(), nullptr, 10);
}
bool has(int argc, char** argv, const char* name) {
  for (int i = 0; i < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return true;
  return false;
}

// Times calls against their deadline: late counts those over deadline + slack.
struct timer {
  std::uint64_t late = 0, max_ms = 0;
  std::string worst;
  template <class F>
  auto operator()(const char* what, long deadline_ms, F&& f) {
    const auto t0 = now_ms();
    auto r = f();
    const auto took = now_ms() - t0;
    if (took > max_ms) max_ms = took, worst = what;
    if (static_cast<long>(took) > deadline_ms + kSlackMs) {
      ++late;
      std::fprintf(stderr, "late: %s took %" PRIu64 " ms (deadline %ld ms)\n", what, took, deadline_ms);
    }
    return r;
  }
  std::string said() const {
    return " late=" + std::to_string(late) + " max_ms=" + std::to_string(max_ms) + " worst=" + (worst.empty() ? "-" : worst);
  }
};

std::string kv(const std::map<std::string, std::uint64_t>& t) {
  std::string s;
  for (const auto& [k, v] : t) s += " " + k + "=" + std::to_string(v);
  return s;
}

// A Box opened and a Producer attached, again after errors; false while it cannot be.
struct producer_slot {
  std::string name;
  bool any_owner = false;
  std::optional<shmbox::Box> box;
  std::optional<shmbox::Producer> p;
  std::map<std::string, std::uint64_t>& t;
  timer& clock;
  bool ensure() {
    if (p) return true;
    auto b = clock("open", 0, [&] { return shmbox::Box::open(name, {.any_owner = any_owner}); });
    if (!b) return ++t["open_fail"], false;
    auto a = clock("attach", 1000, [&] { return shmbox::Producer::attach(*b); });  // L7: 1 s for all entries
    if (!a) return ++t["attach_fail"], false;
    box.emplace(std::move(*b));
    p.emplace(std::move(*a));
    return true;
  }
  void drop() {
    p.reset();
    box.reset();
  }
};

int role_produce(int argc, char** argv) {
  std::map<std::string, std::uint64_t> t;
  timer clock;
  producer_slot s{argv[3], has(argc, argv, "--any-owner"), {}, {}, t, clock};
  const long timeout_ms = flag_num(argc, argv, "--timeout-ms", 100);
  const long pause_us = flag_num(argc, argv, "--pause-us", 200);
  const long reattach = flag_num(argc, argv, "--reattach-every", 0);
  const auto size = static_cast<std::size_t>(flag_num(argc, argv, "--size", 32));
  while (!s.ensure()) {
    if (told_to_stop()) break;
    ::usleep(10'000);
  }
  say("ready");
  std::string msg(std::max<std::size_t>(size, 24), '.');
  for (std::uint64_t seq = 0;; ++seq) {
    if ((seq % 16 == 0 || !s.p) && told_to_stop()) break;  // (an open of a broken box may take its 1 s)
    if (!s.ensure()) {
      ::usleep(10'000);
      continue;
    }
    std::snprintf(msg.data(), msg.size(), "%d:%" PRIu64 ":", static_cast<int>(::getpid()), seq);
    const auto st = clock("post", timeout_ms, [&] { return s.p->post(msg, {.timeout = ms(timeout_ms)}); });
    ++t["posted"];
    ++t[std::string(shmbox::to_string(st))];
    if (st == shmbox::post_status::error) s.drop();
    if (reattach > 0 && (seq + 1) % static_cast<std::uint64_t>(reattach) == 0) s.drop(), ++t["reattached"];
    if (pause_us > 0) ::usleep(static_cast<useconds_t>(pause_us));
  }
  // post_status names: stored, stored-evicted, dropped, full, timeout, too-large, error, over-quota.
  t["evicted"] = t["stored-evicted"];
  t.erase("stored-evicted");
  say("done" + kv(t) + clock.said());
  return 0;
}

int role_own(int argc, char** argv) {
  (void)argc;
  const std::string name = argv[3];
  std::map<std::string, std::uint64_t> t;
  timer clock;
  std::optional<shmbox::Owner> o;
  auto ensure = [&] {
    if (o) return true;
    auto a = clock("acquire", 1000, [&] { return shmbox::Owner::acquire(name); });
    if (!a) return ++t["acquire_fail"], false;
    o.emplace(std::move(*a));
    return true;
  };
  while (!ensure() && !told_to_stop()) ::usleep(10'000);
  say("ready");
  t["received"] = 0;
  auto take = [&](ms wait) {
    if (!ensure()) return shmbox::recv_status::error;
    shmbox::message m;
    const auto st = clock("receive", wait.count(), [&] { return o->receive(m, {.timeout = wait}); });
    if (st == shmbox::recv_status::ok) ++t["received"];
    if (st == shmbox::recv_status::not_owner || st == shmbox::recv_status::error) {
      ++t[st == shmbox::recv_status::error ? "errors" : "not_owner"];
      o.reset();
    }
    return st;
  };
  for (std::uint64_t i = 0;; ++i) {
    if ((i % 16 == 0 || !o) && told_to_stop()) break;
    if (take(50ms) == shmbox::recv_status::error) ::usleep(10'000);
  }
  // The producers stopped first: take what is left (bounded).
  const auto drain_from = now_ms(), until = drain_from + 10'000;
  const std::uint64_t before = t["received"];
  while (now_ms() < until && take(0ms) == shmbox::recv_status::ok) {
  }
  t["drained"] = t["received"] - before;
  t["drain_ms"] = now_ms() - drain_from;
  say("done" + kv(t) + clock.said());
  return 0;
}

int role_serve(int argc, char** argv) {
  (void)argc;
  const std::string name = argv[3];
  std::map<std::string, std::uint64_t> t;
  timer clock;
  std::optional<shmbox::Owner> o;
  auto ensure = [&] {
    if (o) return true;
    auto a = clock("acquire", 1000, [&] { return shmbox::Owner::acquire(name); });
    if (!a) return ++t["acquire_fail"], false;
    o.emplace(std::move(*a));
    return true;
  };
  while (!ensure() && !told_to_stop()) ::usleep(10'000);
  say("ready");
  auto serve_one = [&](ms wait) {
    if (!ensure()) return shmbox::recv_status::error;
    shmbox::message m;
    const auto st = clock("receive", wait.count(), [&] { return o->receive(m, {.timeout = wait}); });
    if (st == shmbox::recv_status::ok) {
      ++t["received"];
      if (!m.is_request()) {
        ++t["plain"];
      } else {
        ++t["requests"];
        const auto r = clock("reply", 0, [&] { return o->reply(m, "re:" + m.data); });
        ++t["reply_" + std::string(shmbox::to_string(r))];
      }
    } else if (st == shmbox::recv_status::not_owner || st == shmbox::recv_status::error) {
      ++t[st == shmbox::recv_status::error ? "errors" : "not_owner"];
      o.reset();
    }
    return st;
  };
  for (std::uint64_t i = 0;; ++i) {
    if ((i % 16 == 0 || !o) && told_to_stop()) break;
    if (serve_one(50ms) == shmbox::recv_status::error) ::usleep(10'000);
  }
  const auto drain_from = now_ms(), until = drain_from + 10'000;
  while (now_ms() < until && serve_one(0ms) == shmbox::recv_status::ok) {
  }
  t["drain_ms"] = now_ms() - drain_from;
  say("done" + kv(t) + clock.said());
  return 0;
}

int role_ask(int argc, char** argv) {
  const std::string name = argv[3], tag = flag(argc, argv, "--tag", "q");
  const long timeout_ms = flag_num(argc, argv, "--timeout-ms", 5000);
  std::map<std::string, std::uint64_t> t;
  timer clock;
  std::optional<shmbox::Requester> r;
  shmbox::requester_stats sum{};
  auto add_stats = [&] {
    if (!r) return;
    const auto s = r->stats();
    sum.stray += s.stray, sum.duplicates += s.duplicates, sum.late += s.late;
  };
  auto ensure = [&] {
    if (r) return true;
    auto a = clock("attach", 1000, [&] { return shmbox::Requester::attach(name, {.max_outstanding = 4}); });
    if (!a) return ++t["attach_fail"], false;
    r.emplace(std::move(*a));
    return true;
  };
  while (!ensure() && !told_to_stop()) ::usleep(10'000);
  say("ready");
  for (std::uint64_t i = 0;; ++i) {
    if (told_to_stop()) break;
    if (!ensure()) {
      ::usleep(10'000);
      continue;
    }
    const std::string q = tag + ":" + std::to_string(i);
    std::string out;
    const auto st = clock("call", timeout_ms, [&] { return r->call(q, out, ms(timeout_ms)); });
    ++t["asked"];
    if (st == shmbox::reply_status::ok) {
      ++t[out == "re:" + q ? "ok" : "wrong"];
    } else {
      ++t[std::string(shmbox::to_string(st))];
      if (st == shmbox::reply_status::error) add_stats(), r.reset();  // a new reply box
    }
  }
  add_stats();
  say("done" + kv(t) + " stray=" + std::to_string(sum.stray) + " duplicates=" + std::to_string(sum.duplicates) +
      " late_replies=" + std::to_string(sum.late) + clock.said());
  return 0;
}

// The boxes named after the role's own options (words not starting with "--", nor their values).
std::vector<std::string> names_of(int argc, char** argv, std::initializer_list<const char*> valued) {
  std::vector<std::string> out;
  for (int i = 3; i < argc; ++i) {
    bool takes_value = false;
    for (const char* v : valued) takes_value |= std::strcmp(argv[i], v) == 0;
    if (takes_value) ++i;
    else if (std::strncmp(argv[i], "--", 2) != 0) out.push_back(argv[i]);
  }
  return out;
}

int role_spray(int argc, char** argv) {
  const auto names = names_of(argc, argv, {"--pause-us"});
  const long pause_us = flag_num(argc, argv, "--pause-us", 200);
  std::map<std::string, std::uint64_t> t;
  timer clock;
  std::vector<shmbox::Box> boxes;
  std::vector<shmbox::Producer> producers;
  for (const auto& n : names) {
    auto b = shmbox::Box::open(n);
    auto pr = b ? shmbox::Producer::attach(*b) : shmbox::result<shmbox::Producer>(b.error());
    if (!pr) {
      say("error " + n + ": " + shmbox::explain(pr.error()));
      return 1;
    }
    boxes.push_back(std::move(*b));
    producers.push_back(std::move(*pr));
  }
  say("ready");
  for (std::uint64_t seq = 0; !producers.empty(); ++seq) {
    if (seq % 16 == 0 && told_to_stop()) break;
    const std::string msg = std::to_string(seq);
    const auto st = clock("post", 0, [&] { return producers[seq % producers.size()].post(msg); });
    ++t["posted"];
    ++t[std::string(shmbox::to_string(st))];
    if (pause_us > 0) ::usleep(static_cast<useconds_t>(pause_us));
  }
  say("done" + kv(t) + clock.said());
  return 0;
}

int role_group(int argc, char** argv) {
  const auto names = names_of(argc, argv, {});
  std::map<std::string, std::uint64_t> t;
  t["received"] = 0;
  timer clock;
  std::vector<shmbox::Owner> owners;
  for (const auto& n : names) {
    auto o = shmbox::Owner::acquire(n);
    if (!o) {
      say("error " + n + ": " + shmbox::explain(o.error()));
      return 1;
    }
    owners.push_back(std::move(*o));
  }
  char key[32];
  std::snprintf(key, sizeof key, "%016" PRIx64, shmbox::detail::self_key());
  say(std::string("owned key=") + key);
  if (has(argc, argv, "--when-told")) {
    char c;
    while (::read(0, &c, 1) == 1 && c != '\n') {
    }
  }
  auto group = shmbox::NotifyGroup::create();
  if (!group) return 1;
  for (std::size_t i = 0; i < owners.size(); ++i) {
    if (!owners[i].join(*group, i)) return 1;
    owners[i].notify();
  }
  say("ready");
  std::vector<std::uint64_t> tags;
  for (;;) {
    pollfd p[2] = {{group->fd(), POLLIN, 0}, {0, POLLIN, 0}};
    if (::poll(p, 2, 100) < 0) continue;
    if (p[1].revents != 0) break;
    if (p[0].revents == 0) continue;
    tags.clear();
    group->ready(tags);
    for (const std::uint64_t i : tags) {
      if (i >= owners.size()) continue;
      shmbox::delivery d;
      if (clock("wait", 0, [&] { return owners[i].wait(d, std::chrono::nanoseconds(0)); }) != shmbox::owner_event::notified) {
        ++t["spurious"];
        continue;
      }
      ++t["woken"];
      shmbox::message m;
      while (owners[i].try_receive(m) == shmbox::recv_status::ok) ++t["received"];
      owners[i].notify();
    }
  }
  // What is left (the driver waited for every box to be empty: nothing, normally).
  shmbox::message m;
  for (auto& o : owners)
    while (o.try_receive(m) == shmbox::recv_status::ok) ++t["received_at_end"];
  say("done" + kv(t) + clock.said());
  return 0;
}

int role_churn(int argc, char** argv) {
  if (argc < 5) return 2;
  const std::string prefix = argv[3];
  const auto n = static_cast<std::uint64_t>(std::strtoul(argv[4], nullptr, 10));
  rng r(static_cast<std::uint64_t>(::getpid()));
  std::map<std::string, std::uint64_t> t;
  timer clock;
  say("ready");
  auto count = [&](const char* what, bool ok) { ++t[std::string(what) + (ok ? "_ok" : "_refused")]; };
  for (std::uint64_t i = 0; !told_to_stop(); ++i) {
    const std::string name = prefix + std::to_string(r.below(n));
    switch (r.below(9)) {
      case 0: {
        auto b = clock("create", 0, [&] { return shmbox::Box::create(name, {.capacity = 4, .slot_size = 64}); });
        count("create", b.has_value());
        if (!b) break;
        {
          auto p = clock("attach", 1000, [&] { return shmbox::Producer::attach(*b); });
          if (p) (void)clock("post", 0, [&] { return p->post("churn"); });
          auto o = clock("acquire", 1000, [&] { return shmbox::Owner::acquire(*b); });
          shmbox::message m;
          if (o) (void)clock("receive", 0, [&] { return o->try_receive(m); });
        }
        (void)shmbox::Box::remove(name);  // ours: the sticky /dev/shm kept anyone from replacing it
        break;
      }
      case 1: count("open", clock("open", 0, [&] { return shmbox::Box::open(name); }).has_value()); break;
      case 2: {
        auto b = clock("inspect", 0, [&] { return shmbox::Box::inspect(name); });
        count("inspect", b.has_value());
        if (b) (void)clock("info", 0, [&] { return shmbox::info(*b).depth; });
        break;
      }
      case 3: count("attach", clock("attach", 1000, [&] { return shmbox::Producer::attach(name); }).has_value()); break;
      case 4: count("acquire", clock("acquire", 1000, [&] { return shmbox::Owner::acquire(name); }).has_value()); break;
      case 5: count("verify", clock("verify", 0, [&] { return shmbox::verify(name); }).has_value()); break;
      case 6: count("pool_open", clock("pool_open", 0, [&] { return shmbox::Pool::open(name); }).has_value()); break;
      case 7: count("snapshot", clock("snapshot", 0, [&] { return shmbox::Box::snapshot(name); }).has_value()); break;
      default:
        count("collect", clock("collect", 0, [&] { return shmbox::collect({.dry_run = true, .prefix = prefix}); }).has_value());
        break;
    }
    ++t["calls"];
    ::usleep(static_cast<useconds_t>(r.below(2000)));
  }
  say("done" + kv(t) + clock.said());
  return 0;
}

}  // namespace

int role_main(int argc, char** argv) {
  if (argc < 4) return 2;
  const std::string role = argv[2];
  ::signal(SIGPIPE, SIG_IGN);
  rlimit files{};  // a group of many boxes: a descriptor or two per box
  if (::getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
    files.rlim_cur = files.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &files);
  }
  if (role == "produce") return role_produce(argc, argv);
  if (role == "own") return role_own(argc, argv);
  if (role == "serve") return role_serve(argc, argv);
  if (role == "ask") return role_ask(argc, argv);
  if (role == "churn") return role_churn(argc, argv);
  if (role == "spray") return role_spray(argc, argv);
  if (role == "group") return role_group(argc, argv);
  std::fprintf(stderr, "shmbox-adversary role: unknown role '%s'\n", role.c_str());
  return 2;
}

}  // namespace adv
