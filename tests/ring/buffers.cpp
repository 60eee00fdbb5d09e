// Custom buffers (options::buffer, shmbox/buffer.hpp, ring.hpp CUSTOM
// BUFFERS): pobox's custom buffers across processes, with the two examples
// of examples/buffers. The N most important of everything 4 producer
// processes post (top-n), one message per key (dedupe), exact counts; a
// process that has not registered the type (producer, owner, heir, the CLI);
// an owner SIGKILLed, or killed at each step of moving and dropping, whose
// heir rebuilds the buffer from the store and loses nothing; a buffer that
// breaks its contract; a shrink that asks the buffer to drop.
#include <doctest/doctest.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../../examples/buffers/dedupe.hpp"
#include "../../examples/buffers/top_n.hpp"
#include "checks.hpp"
#include "shmbox/shmbox.hpp"
#include "support.hpp"

using namespace std::chrono_literals;
using shmbox::recv_status;

namespace {

void register_examples() {
  REQUIRE(shmbox_examples::register_top_n());
  REQUIRE(shmbox_examples::register_dedupe());
}

// Everything deliverable now, in delivery order.
std::vector<shmbox::message> drain(shmbox::Owner& o) {
  std::vector<shmbox::message> got;
  for (int i = 0; i < 100000; ++i) {
    const recv_status st = o.receive_batch(got, {.max = 64, .timeout = 0ns});
    if (st == recv_status::error) continue;  // (a broken buffer: rebuilt; try again)
    if (st != recv_status::ok) break;
  }
  return got;
}

// "KEY:ID:SEQ" (buf-produce's messages), parsed.
struct tagged {
  std::string key, id;
  std::uint64_t seq = 0;
};
tagged parse(const std::string& m) {
  tagged t;
  const auto a = m.find(':'), b = m.rfind(':');
  REQUIRE(a != std::string::npos);
  REQUIRE(b > a);
  t.key = m.substr(0, a);
  t.id = m.substr(a + 1, b - a - 1);
  t.seq = std::stoull(m.substr(b + 1));
  return t;
}

using shmtest::tag;

using shmtest::ask;

// Runs `n` buf-produce processes (each posts `count`, blocking on a full
// lane) while this process, the owner, pumps the box; returns when every
// producer is done and every message has left the lanes for the store.
void produce_while_pumping(shmbox::Box& box, shmbox::Owner& o, int n, int count, const std::vector<std::string>& extra) {
  std::vector<std::unique_ptr<shmtest::child>> kids;
  for (int i = 0; i < n; ++i) {
    std::vector<std::string> argv{shmtest::helper_path(), "buf-produce", box.name(), tag('p', i), std::to_string(count)};
    argv.insert(argv.end(), extra.begin(), extra.end());
    kids.push_back(std::make_unique<shmtest::child>(argv, std::vector<std::string>{}, true));
    REQUIRE(shmtest::line_starting(*kids.back(), "ready", 20s) == "ready");
  }
  for (auto& k : kids) k->write_stdin("go\n");
  const std::uint64_t total = static_cast<std::uint64_t>(n) * static_cast<std::uint64_t>(count);
  // Every message claimed a position (stored counts claims) ...
  REQUIRE(shmtest::eventually(
      [&] {
        o.pump();
        return box.read_counters().stored == total;
      },
      60s));
  // ... and is published once its producer says done; then the last pump moves it.
  for (auto& k : kids) {
    CHECK(shmtest::line_starting(*k, "done", 30s) == "done stored=" + std::to_string(count) + " other=0");
    CHECK(shmtest::exited_with(k->wait(30s), 0));
  }
  while (o.pump() > 0) {
  }
}

}  // namespace

TEST_CASE("buffers: creation errors; a process without the type registered gets buffer_unknown") {
  register_examples();
  shmtest::segment_guard g(shmtest::unique_name("buferr"));
  using shmbox::policy;
  for (const policy p : {policy::lifo, policy::drop_oldest}) {
    const auto r = shmbox::Box::create(g.name, {.capacity = 8, .overflow = p, .buffer = "top-n"});
    REQUIRE_FALSE(r);
    CHECK(shmbox::explain(r.error()).find("reject, drop_newest or block") != std::string::npos);
  }
  CHECK(shmbox::Box::create(g.name, {.capacity = 8, .lease = 1000ms, .buffer = "top-n"}).error() == shmbox::errc::invalid_argument);
  CHECK(shmbox::Box::create(g.name, {.capacity = 8, .stash = 2, .buffer = "top-n"}).error() == shmbox::errc::invalid_argument);
  CHECK(shmbox::Box::create(g.name, {.capacity = 8, .priority = true, .buffer = "top-n"}).error() == shmbox::errc::invalid_argument);
  CHECK(shmbox::Box::create(g.name, {.capacity = 8, .buffer = "no/slash"}).error() == shmbox::errc::invalid_argument);
  CHECK(shmbox::Box::create(g.name, {.capacity = 8, .buffer = std::string(49, 'x')}).error() == shmbox::errc::invalid_argument);
  CHECK_FALSE(shmbox::register_buffer("ok-name", {}));  // no make
  CHECK_FALSE(shmbox::register_buffer("", {.make = [](const shmbox::buffer_context&) { return std::unique_ptr<shmbox::buffer>(); }}));

  // A box whose type nobody here registered: creating it is fine (a process
  // may create boxes for others); posting, owning and inheriting are not.
  auto box = shmbox::Box::create(g.name, {.capacity = 8, .buffer = "never-registered"});
  REQUIRE(box);
  CHECK_FALSE(shmbox::buffer_registered("never-registered"));
  CHECK(shmbox::info(*box).buffer == "never-registered");
  const auto p = shmbox::Producer::attach(*box);
  REQUIRE_FALSE(p);
  CHECK(p.error() == shmbox::errc::buffer_unknown);
  CHECK(shmbox::explain(p.error()).find("register_buffer(\"never-registered\"") != std::string::npos);
  const auto o = shmbox::Owner::acquire(*box);
  REQUIRE_FALSE(o);
  CHECK(o.error() == shmbox::errc::buffer_unknown);
  CHECK(shmbox::info(*box).owner.pid == 0);  // refused before the lease: nobody owns it
  const auto h = shmbox::Heir::enlist(*box);
  REQUIRE_FALSE(h);
  CHECK(h.error() == shmbox::errc::buffer_unknown);

  // The CLI registers no buffer type: its post says what to do, stat shows the box.
  shmtest::segment_guard g2(shmtest::unique_name("bufcli"));
  auto made = shmtest::run({shmtest::cli_path(), "create", g2.name, "--capacity", "4", "--buffer", "top-n"});
  REQUIRE(made.code == 0);
  const auto post = shmtest::run({shmtest::cli_path(), "post", g2.name, "hello"});
  CHECK(post.code == 1);
  CHECK(post.err.find("register_buffer") != std::string::npos);
  const auto stat = shmtest::run({shmtest::cli_path(), "stat", g2.name, "--json"});
  REQUIRE(stat.code == 0);
  const auto js = nlohmann::json::parse(stat.out);
  CHECK(js["ordering"] == "buffer");
  CHECK(js["buffer"] == "top-n");
  CHECK(js["counters"]["buffer_dropped"] == 0);
  const auto text = shmtest::run({shmtest::cli_path(), "stat", g2.name});
  CHECK(text.out.find("custom buffer 'top-n'") != std::string::npos);

  // A producer process that has not registered the type: attach fails, clearly.
  shmtest::child kid({shmtest::helper_path(), "buf-produce", g2.name, "p0", "1", "--equal", "--no-register"});
  const std::string said = shmtest::line_starting(kid, "error", 20s);
  CHECK(said.find("buffer_unknown") != std::string::npos);
  CHECK(said.find("register_buffer") != std::string::npos);
  CHECK(shmtest::exited_with(kid.wait(20s), 3));
}

TEST_CASE("buffers: top-n from 4 producer processes keeps the N most important of all, most important first; counts exact") {
  register_examples();
  constexpr int kProducers = 4, kEach = 50, kN = 8;
  shmtest::segment_guard g(shmtest::unique_name("buftop"));
  auto box = shmbox::Box::create(g.name, {.capacity = kN, .overflow = shmbox::policy::block, .buffer = "top-n"});
  REQUIRE(box);
  auto o = shmbox::Owner::acquire(*box);
  REQUIRE(o);
  produce_while_pumping(*box, *o, kProducers, kEach, {"--top-n-distinct", std::to_string(kProducers)});
  const auto got = drain(*o);
  // Importances are 0..199, each once: the top 8 are 199 down to 192.
  REQUIRE(got.size() == static_cast<std::size_t>(kN));
  for (int i = 0; i < kN; ++i) CHECK(parse(got[i].data).key == std::to_string(kProducers * kEach - 1 - i));
  const auto c = box->read_counters();
  CHECK(c.posted == kProducers * kEach);
  CHECK(c.delivered == kN);
  CHECK(c.buffer_dropped == kProducers * kEach - kN);
  CHECK(c.filtered == c.buffer_dropped);
  shmtest::check_invariant(*box);
}

TEST_CASE("buffers: top-n with equal importance keeps the first arrivals (each producer's first messages), FIFO") {
  register_examples();
  constexpr int kProducers = 4, kEach = 30, kN = 8;
  shmtest::segment_guard g(shmtest::unique_name("bufeq"));
  auto box = shmbox::Box::create(g.name, {.capacity = kN, .overflow = shmbox::policy::block, .buffer = "top-n"});
  REQUIRE(box);
  auto o = shmbox::Owner::acquire(*box);
  REQUIRE(o);
  produce_while_pumping(*box, *o, kProducers, kEach, {"--equal"});
  const auto got = drain(*o);
  REQUIRE(got.size() == static_cast<std::size_t>(kN));
  // Ties keep the older message: what is left of each producer is a prefix
  // of what it posted, in its order.
  std::map<std::string, std::uint64_t> next;
  for (const auto& m : got) {
    const tagged t = parse(m.data);
    CHECK(t.seq == next[t.id]);
    next[t.id] = t.seq + 1;
  }
  CHECK(box->read_counters().buffer_dropped == kProducers * kEach - kN);
  shmtest::check_invariant(*box);
}

TEST_CASE("buffers: dedupe from 4 producer processes holds one message per key, FIFO; duplicates counted") {
  register_examples();
  constexpr int kProducers = 4, kEach = 40, kKeys = 6;
  shmtest::segment_guard g(shmtest::unique_name("bufdup"));
  auto box = shmbox::Box::create(g.name, {.capacity = 16, .overflow = shmbox::policy::block, .buffer = "dedupe"});
  REQUIRE(box);
  auto o = shmbox::Owner::acquire(*box);
  REQUIRE(o);
  produce_while_pumping(*box, *o, kProducers, kEach, {"--keys", std::to_string(kKeys)});
  const auto got = drain(*o);
  std::set<std::string> keys;
  for (const auto& m : got) CHECK(keys.insert(parse(m.data).key).second);  // one per key
  CHECK(got.size() == keys.size());
  CHECK(got.size() <= static_cast<std::size_t>(kKeys));
  CHECK(got.size() >= 3);  // 160 draws of 6 keys: every key is there unless the generator is broken
  const auto c = box->read_counters();
  CHECK(c.delivered == got.size());
  CHECK(c.buffer_dropped == kProducers * kEach - got.size());
  shmtest::check_invariant(*box);

  // Once delivered, a key may come again; while waiting, it is a duplicate.
  auto p = shmbox::Producer::attach(*box);
  REQUIRE(p);
  CHECK(shmbox::is_stored(p->post("a:x:0")));
  CHECK(shmbox::is_stored(p->post("a:x:1")));
  CHECK(shmbox::is_stored(p->post("b:x:2")));
  CHECK(o->pump() == 3);
  CHECK(shmbox::is_stored(p->post("a:x:3")));
  auto again = drain(*o);
  REQUIRE(again.size() == 2);
  CHECK(again[0].data == "a:x:0");
  CHECK(again[1].data == "b:x:2");
  CHECK(shmbox::is_stored(p->post("a:x:4")));
  again = drain(*o);
  REQUIRE(again.size() == 1);
  CHECK(again[0].data == "a:x:4");
  shmtest::check_invariant(*box);
}

TEST_CASE("buffers: an owner killed (SIGKILL, or at each step of moving and dropping): its heir rebuilds the buffer and loses nothing") {
  register_examples();
  // "": a plain SIGKILL after the owner has received two; else the owner
  // dies at that crash point during its pumps.
  for (const std::string fault : {"", "owner.mid_sort:11", "owner.before_buffer_drop:1", "owner.before_buffer_drop:5",
                                  "owner.mid_unstash:1", "owner.mid_unstash:4"}) {
    CAPTURE(fault);
    constexpr int kN = 8, kTotal = 20;
    shmtest::segment_guard g(shmtest::unique_name("bufkill"));
    auto box = shmbox::Box::create(g.name, {.capacity = kN, .buffer = "top-n"});
    REQUIRE(box);
    std::vector<std::string> env;
    if (!fault.empty()) env.push_back("SHMBOX_FAULT=" + fault);
    shmtest::child owner({shmtest::helper_path(), "buf-own", g.name}, env, true);
    REQUIRE(shmtest::line_starting(owner, "owned", 20s).rfind("owned", 0) == 0);
    auto heir = shmbox::Heir::enlist(*box);
    REQUIRE(heir);
    auto p = shmbox::Producer::attach(*box);
    REQUIRE(p);
    // Importances 3, 10, 17, ... (i * 7 + 3 mod 20: all distinct): posted 8
    // at a time (the lane holds 8), pumped by the owner in between; once the
    // owner has died at its crash point, by the heir.
    std::optional<shmbox::Owner> o;
    bool died = false;
    auto take_over = [&] {
      owner.kill(SIGKILL);
      owner.wait(20s);
      auto t = heir->await_transfer(20s);
      REQUIRE(t);
      o.emplace(std::move(*t));
    };
    for (int i = 0; i < kTotal; ++i) {
      std::string msg = std::to_string((i * 7 + 3) % kTotal);
      msg += ":m:";
      msg += std::to_string(i);
      CHECK(shmbox::is_stored(p->post(msg, {.timeout = 0ns})));
      if ((i + 1) % kN != 0 && i + 1 != kTotal) continue;
      if (o) {
        o->pump();
      } else if (ask(owner, "pump").rfind("pumped", 0) != 0) {
        died = true;  // killed at its crash point
        take_over();
        o->pump();
      }
    }
    std::vector<std::string> first;
    if (!o) {
      const std::string a = ask(owner, "recv 2");
      CHECK(a == "got 19:m:8,18:m:5");  // the two most important of all 20
      first = {"19:m:8", "18:m:5"};
      take_over();
    }
    CHECK((died || fault.empty()));  // every crash point is reached
    o->pump();
    const auto got = drain(*o);
    // Together: the 8 most important of all 20, most important first, each once.
    std::vector<std::string> all = first;
    for (const auto& m : got) all.push_back(m.data);
    REQUIRE(all.size() == static_cast<std::size_t>(kN));
    for (int i = 0; i < kN; ++i) CHECK(parse(all[i]).key == std::to_string(kTotal - 1 - i));
    const auto c = box->read_counters();
    CHECK(c.posted == kTotal);
    CHECK(c.delivered == kN);
    CHECK(c.buffer_dropped == kTotal - kN);
    shmtest::check_invariant(*box);
    const auto v = shmbox::verify(g.name);
    REQUIRE(v);
    CHECK_MESSAGE(v->ok, (v->problems.empty() ? std::string() : v->problems[0]));
  }
}

TEST_CASE("buffers: a redelivery from the buffer is counted once (redelivered), also when its owner is killed handing it out") {
  register_examples();
  for (const bool two_phase : {false, true}) {
    for (const char* point : {"", "owner.after_take:1", "owner.mid_unstash:1", "owner.mid_unstash:2"}) {
      shmtest::segment_guard g(shmtest::unique_name("bufagain"));
      auto box = shmbox::Box::create(g.name, {.capacity = 8, .buffer = "dedupe"});
      REQUIRE(box);
      {
        auto p = shmbox::Producer::attach(*box);
        REQUIRE(p);
        for (int i = 1; i <= 6; ++i) REQUIRE(p->post(tag('k', i)) == shmbox::post_status::stored);
      }
      shmtest::check_redeliveries_counted(*box, point, two_phase, false);
    }
  }
}

TEST_CASE("buffers: a delivery's drop count (pobox's Lost) has the buffer's drops since the last delivery, and the policy's") {
  register_examples();
  shmtest::segment_guard g(shmtest::unique_name("buflost"));
  auto box = shmbox::Box::create(g.name, {.capacity = 3, .overflow = shmbox::policy::reject, .buffer = "dedupe"});
  REQUIRE(box);
  auto o = shmbox::Owner::acquire(*box);
  REQUIRE(o);
  // A producer process posts `count` messages of one key ("5:ID:SEQ").
  auto produce = [&](int id, int count) {
    shmtest::child p({shmtest::helper_path(), "buf-produce", g.name, tag('p', id), std::to_string(count), "--equal"}, {}, true);
    REQUIRE(shmtest::line_starting(p, "ready", 20s) == "ready");
    p.write_stdin("go\n");
    const std::string done = shmtest::line_starting(p, "done", 30s);
    CHECK(shmtest::exited_with(p.wait(30s), 0));
    return done;
  };
  const auto identity = shmbox::filter_fn([](std::string&) { return shmbox::filter_verdict::deliver; });
  // 5 posted while the owner does not run: the lane takes 3 (2 refused by the
  // policy); the delivery moves them into the buffer, which keeps the first.
  CHECK(produce(0, 5) == "done stored=3 other=2");
  shmbox::delivery d;
  o->active(identity);
  REQUIRE(o->wait(d, 10s) == shmbox::owner_event::delivered);
  CHECK(d.count == 1);
  CHECK(d.dropped == 2 + 2);  // rejected + buffer_dropped
  CHECK(box->read_counters().buffer_dropped == 2);
  CHECK(o->usage().dropped_since_delivery == 0);
  // Pumped between deliveries: the buffer's drops wait for the next delivery, once.
  CHECK(produce(1, 3) == "done stored=3 other=0");
  CHECK(o->pump() == 3);
  CHECK(o->usage().dropped_since_delivery == 2);
  o->active(identity);
  REQUIRE(o->wait(d, 10s) == shmbox::owner_event::delivered);
  CHECK(d.count == 1);
  CHECK(d.dropped == 2);
  CHECK(o->usage().dropped_since_delivery == 0);
  const auto c = box->read_counters();
  CHECK(c.buffer_dropped == 4);
  CHECK(c.rejected == 2);
  shmtest::check_invariant(*box);
}

namespace {
// Breaks the contract on purpose: pop() names an id it never held, once.
class liar final : public shmbox::buffer {
 public:
  explicit liar(bool* lied) : lied_(lied) {}
  std::optional<std::uint64_t> push(const shmbox::buffered& m) override {
    q_.push_back(m.id);
    return std::nullopt;
  }
  std::uint64_t push_drop(const shmbox::buffered& m) override { return m.id; }
  std::optional<std::uint64_t> pop() override {
    if (!*lied_) {
      *lied_ = true;
      return 0xdead'beefull;
    }
    if (q_.empty()) return std::nullopt;
    const auto id = q_.front();
    q_.erase(q_.begin());
    return id;
  }
  std::vector<std::uint64_t> drop(std::size_t) override { return {}; }
  std::size_t size() const override { return q_.size(); }

 private:
  bool* lied_;
  std::vector<std::uint64_t> q_;
};
}  // namespace

TEST_CASE("buffers: a buffer that breaks its contract: the receive says buffer_broken, the box loses nothing") {
  static bool lied = false;
  REQUIRE(shmbox::register_buffer("liar", {.make = [](const shmbox::buffer_context&) -> std::unique_ptr<shmbox::buffer> {
                                             return std::make_unique<liar>(&lied);
                                           }}));
  REQUIRE(shmbox::register_buffer("thrower", {.make = [](const shmbox::buffer_context&) -> std::unique_ptr<shmbox::buffer> {
                                                throw std::runtime_error("no");
                                              }}));
  for (const std::string type : {"liar", "thrower"}) {
    CAPTURE(type);
    lied = false;
    shmtest::segment_guard g(shmtest::unique_name("bufliar"));
    auto box = shmbox::Box::create(g.name, {.capacity = 8, .buffer = type});
    REQUIRE(box);
    auto o = shmbox::Owner::acquire(*box);
    REQUIRE(o);
    if (type == "thrower") CHECK(o->last_error() == shmbox::errc::buffer_broken);  // its lanes deliver FIFO
    auto p = shmbox::Producer::attach(*box);
    REQUIRE(p);
    for (const char* m : {"a", "b", "c"}) CHECK(shmbox::is_stored(p->post(m)));
    std::vector<shmbox::message> got;
    if (type == "liar") {
      CHECK(o->receive_batch(got, {.max = 8, .timeout = 0ns}) == recv_status::error);
      CHECK(o->last_error() == shmbox::errc::buffer_broken);
      CHECK(shmbox::explain(o->last_error()).find("nothing was lost") != std::string::npos);
    }
    got = drain(*o);
    REQUIRE(got.size() == 3);
    CHECK(got[0].data == "a");
    CHECK(got[2].data == "c");
    shmtest::check_invariant(*box);
  }
}

TEST_CASE("buffers: a shrink (Box::resize) asks the buffer which to drop; growing gives room back") {
  register_examples();
  shmtest::segment_guard g(shmtest::unique_name("bufresize"));
  auto box = shmbox::Box::create(g.name, {.capacity = 8, .max_capacity = 16, .buffer = "top-n"});
  REQUIRE(box);
  auto o = shmbox::Owner::acquire(*box);
  REQUIRE(o);
  auto p = shmbox::Producer::attach(*box);
  REQUIRE(p);
  for (int i = 0; i < 8; ++i) CHECK(shmbox::is_stored(p->post(std::to_string(i) + ":r:" + std::to_string(i))));
  CHECK(o->pump() == 8);
  const auto r = box->resize(3);
  REQUIRE(r);
  CHECK(r->dropped == 0);  // the lane's ring was empty: the store is the buffer's to shrink
  o->pump();
  CHECK(box->read_counters().buffer_dropped == 5);
  auto got = drain(*o);
  REQUIRE(got.size() == 3);
  CHECK(got[0].data == "7:r:7");
  CHECK(got[2].data == "5:r:5");
  REQUIRE(box->resize(16));
  for (int i = 0; i < 16; ++i) CHECK(shmbox::is_stored(p->post(std::to_string(i) + ":s:" + std::to_string(i), {.timeout = 0ns})));
  CHECK(o->pump() == 16);
  CHECK(drain(*o).size() == 16);
  shmtest::check_invariant(*box);
}
