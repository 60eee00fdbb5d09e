// Zero-copy posts (loans), batch posts, zero-copy receive and the adaptive
// wait: what each call returns and counts, for every policy, and (with
// separate helper processes) that nothing is lost, repeated or torn.
#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "checks.hpp"
#include "shmbox/shmbox.hpp"

using namespace std::chrono_literals;
using shmbox::policy;
using shmbox::post_status;
using shmbox::recv_status;

namespace {

const policy kPolicies[] = {policy::reject, policy::drop_newest, policy::drop_oldest, policy::lifo, policy::block};

std::vector<std::string> drain(shmbox::Owner& o) {
  std::vector<std::string> out;
  shmbox::message m;
  while (o.try_receive(m) == recv_status::ok) out.push_back(m.data);
  return out;
}

// "m7" (built by appends: g++ 12 warns falsely (-Wrestrict) on "m" + std::to_string(7)).
std::string numbered(char tag, int i) {
  std::string s(1, tag);
  s += std::to_string(i);
  return s;
}

post_status loan_post(shmbox::Producer& p, std::string_view msg, std::chrono::nanoseconds timeout = 20ms) {
  shmbox::slot_loan l = p.loan({.timeout = timeout});
  if (!l) return l.status();
  std::memcpy(l.data(), msg.data(), msg.size());
  return l.commit(msg.size());
}

}  // namespace

TEST_CASE("a loan is written in place and committed; abort and destruction give the slot back") {
  shmtest::segment_guard g(shmtest::unique_name("loan"));
  // An aborted loan's position is skipped by the owner; its slot is free
  // again from the next lap on, so 5 positions need more than 4 slots here.
  auto box = shmbox::Box::create(g.name, {.capacity = 8, .slot_size = 64});
  REQUIRE(box);
  auto p = shmbox::Producer::attach(*box);
  auto o = shmbox::Owner::acquire(*box);
  REQUIRE(p);
  REQUIRE(o);

  CHECK(p->post("a") == post_status::stored);
  {
    shmbox::slot_loan l = p->loan();
    REQUIRE(l);
    CHECK(l.status() == post_status::stored);
    CHECK(l.capacity() == 64);
    std::memset(l.data(), 'X', l.capacity());  // never delivered
    // One open loan per handle: other posts are refused until it is closed.
    CHECK(p->post("refused") == post_status::error);
    CHECK(p->last_error() == shmbox::errc::invalid_argument);
    CHECK(!p->loan());
    l.abort();
    CHECK(!l);
    l.abort();  // twice: nothing more
  }
  { shmbox::slot_loan dropped = p->loan(); }  // destroyed uncommitted: aborted
  CHECK(loan_post(*p, "b") == post_status::stored);
  {
    shmbox::slot_loan l = p->loan();
    REQUIRE(l);
    std::memcpy(l.data(), "c", 1);
    CHECK(l.commit(65) == post_status::too_large);  // still open: write less
    CHECK(l);
    CHECK(l.commit(1) == post_status::stored);
    CHECK(!l);
    CHECK(l.commit(1) == post_status::error);
  }
  CHECK(drain(*o) == std::vector<std::string>{"a", "b", "c"});
  const shmbox::counters c = box->read_counters();
  CHECK(c.aborted == 2);
  CHECK(c.delivered == 3);
  CHECK(c.posted == 5);
  shmtest::check_invariant(*box);

  // Moving a loan moves the claim.
  shmbox::slot_loan a = p->loan();
  REQUIRE(a);
  std::memcpy(a.data(), "d", 1);
  shmbox::slot_loan b = std::move(a);
  CHECK(!a);
  CHECK(b.commit(1) == post_status::stored);
  CHECK(drain(*o) == std::vector<std::string>{"d"});
  shmtest::check_invariant(*box);
}

TEST_CASE("a loan on a full box answers as post does, for every policy") {
  for (const policy pol : kPolicies) {
    CAPTURE(shmbox::to_string(pol));
    shmtest::segment_guard g(shmtest::unique_name("loanfull"));
    auto box = shmbox::Box::create(g.name, {.capacity = 2, .slot_size = 16, .overflow = pol, .block_timeout = 20ms});
    REQUIRE(box);
    auto p = shmbox::Producer::attach(*box);
    REQUIRE(p);
    CHECK(loan_post(*p, "1") == post_status::stored);
    CHECK(loan_post(*p, "2") == post_status::stored);
    const post_status st = loan_post(*p, "3");
    switch (pol) {
      case policy::reject: CHECK(st == post_status::full); break;
      case policy::drop_newest: CHECK(st == post_status::dropped); break;
      case policy::drop_oldest: CHECK(st == post_status::stored_evicted); break;
      case policy::lifo: CHECK(st == post_status::stored_evicted); break;
      case policy::block: CHECK(st == post_status::timeout); break;
    }
    // An aborted loan on a full lifo/drop_oldest box still evicted or replaced.
    { shmbox::slot_loan l = p->loan({.timeout = 0ns}); }
    auto o = shmbox::Owner::acquire(*box);
    REQUIRE(o);
    const auto got = drain(*o);
    if (pol == policy::drop_oldest) CHECK(got == std::vector<std::string>{"3"});  // "1", then "2" evicted
    else if (pol == policy::lifo) CHECK(got == std::vector<std::string>{"1"});    // "2", then "3" replaced
    else CHECK(got == std::vector<std::string>{"1", "2"});
    CHECK(box->read_counters().aborted == ((pol == policy::drop_oldest || pol == policy::lifo) ? 1u : 0u));
    shmtest::check_invariant(*box);
  }
}

TEST_CASE("loans interleaved with posts and aborts keep FIFO order, and lifo order for lifo") {
  for (const policy pol : kPolicies) {
    CAPTURE(shmbox::to_string(pol));
    shmtest::segment_guard g(shmtest::unique_name("loanmix"));
    auto box = shmbox::Box::create(g.name, {.capacity = 64, .slot_size = 16, .overflow = pol});
    REQUIRE(box);
    auto p = shmbox::Producer::attach(*box);
    auto o = shmbox::Owner::acquire(*box);
    REQUIRE(p);
    REQUIRE(o);
    std::vector<std::string> sent;
    for (int round = 0; round < 5; ++round) {  // 5 x 10 < 64: never full
      for (int i = 0; i < 10; ++i) {
        const std::string m = std::to_string(round * 10 + i);
        if (i % 3 == 0) {
          shmbox::slot_loan dropped = p->loan();
          REQUIRE(dropped);
        }
        CHECK(is_stored(i % 2 ? p->post(m) : loan_post(*p, m)));
        sent.push_back(m);
      }
      std::vector<std::string> want(sent.end() - 10, sent.end());
      if (pol == policy::lifo) std::reverse(want.begin(), want.end());
      CHECK(drain(*o) == want);
    }
    CHECK(box->read_counters().aborted == 20);
    shmtest::check_invariant(*box);
  }
}

TEST_CASE("a committed loan wakes an owner asleep in receive") {
  shmtest::segment_guard g(shmtest::unique_name("loanwake"));
  auto box = shmbox::Box::create(g.name, {.capacity = 8, .slot_size = 64, .spin = 0ns});
  REQUIRE(box);
  auto o = shmbox::Owner::acquire(*box);
  REQUIRE(o);
  const pid_t owner_tid = ::gettid();
  std::thread t([&] {
    auto p = shmbox::Producer::attach(g.name);
    REQUIRE(p);
    // Handshake: the owner thread is asleep (state S: the futex) before the loan.
    CHECK(shmtest::wait_for_state(owner_tid, 'S', 10s));
    CHECK(loan_post(*p, "wake") == post_status::stored);
  });
  shmbox::message m;
  CHECK(o->receive(m, {.timeout = 10s, .spin = 0ns}) == recv_status::ok);
  CHECK(m.data == "wake");
  t.join();
}

TEST_CASE("post_batch stores a prefix and says why it stopped, for every policy") {
  for (const policy pol : kPolicies) {
    CAPTURE(shmbox::to_string(pol));
    shmtest::segment_guard g(shmtest::unique_name("batch"));
    auto box = shmbox::Box::create(g.name, {.capacity = 8, .slot_size = 16, .overflow = pol, .block_timeout = 10ms});
    REQUIRE(box);
    auto p = shmbox::Producer::attach(*box);
    REQUIRE(p);
    std::vector<std::string> msgs;
    for (int i = 0; i < 12; ++i) msgs.push_back(numbered('m', i));
    msgs[5] = std::string(17, 'x');  // too large, in the middle
    std::vector<std::string_view> views(msgs.begin(), msgs.end());
    std::span<const std::string_view> left(views);
    post_status why = post_status::error;
    std::size_t n = p->post_batch(left, {}, &why);
    CHECK(n == 5);
    CHECK(why == post_status::too_large);
    left = left.subspan(n + 1);  // skip the large one
    n = p->post_batch(left, {}, &why);
    // 6..8 fill the box; 9 finds it full.
    const bool evicting = pol == policy::drop_oldest || pol == policy::lifo;
    CHECK(n == (evicting ? 6u : 3u));
    switch (pol) {
      case policy::reject: CHECK(why == post_status::full); break;
      case policy::drop_newest: CHECK(why == post_status::dropped); break;
      case policy::drop_oldest:
      case policy::lifo: CHECK(why == post_status::stored_evicted); break;
      case policy::block: CHECK(why == post_status::timeout); break;
    }
    auto o = shmbox::Owner::acquire(*box);
    REQUIRE(o);
    const auto got = drain(*o);
    if (pol == policy::drop_oldest)
      CHECK(got == std::vector<std::string>{"m3", "m4", "m6", "m7", "m8", "m9", "m10", "m11"});
    else if (pol == policy::lifo)  // the top was replaced by 9, then 10, then 11
      CHECK(got == std::vector<std::string>{"m11", "m7", "m6", "m4", "m3", "m2", "m1", "m0"});
    else
      CHECK(got == std::vector<std::string>{"m0", "m1", "m2", "m3", "m4", "m6", "m7", "m8"});
    const shmbox::counters c = box->read_counters();
    CHECK(c.posted == (evicting ? 12u : 10u));  // the messages after a stop were not tried
    CHECK(c.too_large == 1);
    shmtest::check_invariant(*box);
  }
}

TEST_CASE("post_batch: long batches, wrap-around, and an open loan refuses it") {
  shmtest::segment_guard g(shmtest::unique_name("batchlong"));
  auto box = shmbox::Box::create(g.name, {.capacity = 1000, .slot_size = 16});  // not a power of two
  REQUIRE(box);
  auto p = shmbox::Producer::attach(*box);
  auto o = shmbox::Owner::acquire(*box);
  REQUIRE(p);
  REQUIRE(o);
  std::uint64_t next = 0, want = 0;
  for (int round = 0; round < 7; ++round) {  // 7 x 700 positions: laps around the ring
    std::vector<std::string> msgs;
    for (int i = 0; i < 700; ++i) msgs.push_back(std::to_string(next++));
    std::vector<std::string_view> views(msgs.begin(), msgs.end());
    CHECK(p->post_batch(views) == 700);  // > kMaxClaimRun: several runs
    for (const std::string& m : drain(*o)) CHECK(m == std::to_string(want++));
  }
  CHECK(want == next);
  shmbox::slot_loan l = p->loan();
  REQUIRE(l);
  const std::string_view one[] = {"x"};
  post_status st = post_status::stored;
  CHECK(p->post_batch(one, {}, &st) == 0);
  CHECK(st == post_status::error);
  l.abort();
  CHECK(p->post_batch(one, {}, &st) == 1);
  CHECK(st == post_status::stored);
  shmtest::check_invariant(*box);
}

TEST_CASE("receive_in_place shows messages in place, commits them, and survives an exception") {
  for (const bool lease : {false, true}) {
    CAPTURE(lease);
    shmtest::segment_guard g(shmtest::unique_name("inplace"));
    shmbox::options opt{.capacity = 16, .slot_size = 32};
    if (lease) opt.lease = 5000ms;
    auto box = shmbox::Box::create(g.name, opt);
    REQUIRE(box);
    auto p = shmbox::Producer::attach(*box);
    auto o = shmbox::Owner::acquire(*box);
    REQUIRE(p);
    REQUIRE(o);
    for (int i = 0; i < 6; ++i) CHECK(p->post(numbered('v', i)) == post_status::stored);
    std::vector<std::string> seen;
    CHECK(o->receive_in_place([&](const shmbox::message_view& v) { seen.emplace_back(v.data); }, {.max = 2, .timeout = 0ns}) ==
          recv_status::ok);
    CHECK(seen == std::vector<std::string>{"v0", "v1"});
    // An exception ends the call: the message that threw counts as delivered, the rest stay.
    CHECK_THROWS_AS(o->receive_in_place([&](const shmbox::message_view& v) {
                          seen.emplace_back(v.data);
                          throw std::runtime_error("stop");
                        }, {.max = 10, .timeout = 0ns}),
                    std::runtime_error);
    CHECK(seen.back() == "v2");
    CHECK(drain(*o) == std::vector<std::string>{"v3", "v4", "v5"});
    CHECK(o->receive_in_place([&](const shmbox::message_view&) {}, {.max = 4, .timeout = 0ns}) == recv_status::timeout);
    CHECK(box->read_counters().delivered == 6);
    shmtest::check_invariant(*box);
  }
}

TEST_CASE("the adaptive wait: set at creation, per call, bounded, and shown by info()") {
  shmtest::segment_guard g(shmtest::unique_name("spin"));
  auto bad = shmbox::Box::create(g.name, {.spin = 2s});
  REQUIRE(!bad);
  CHECK(bad.error() == shmbox::errc::invalid_argument);
  CHECK(!shmbox::Box::create(g.name, {.spin = -1ns}));
  auto box = shmbox::Box::create(g.name, {.capacity = 4, .slot_size = 16, .spin = 7us});
  REQUIRE(box);
  CHECK(shmbox::info(*box).spin == 7us);
  auto o = shmbox::Owner::acquire(*box);
  REQUIRE(o);
  shmbox::message m;
  // No message: each form times out (spinning first or not).
  for (const std::chrono::nanoseconds spin : {0ns, 1000ns, 5'000'000'000ns /* clamped to 1 s */}) {
    CHECK(o->receive(m, {.timeout = 20ms, .spin = spin}) == recv_status::timeout);
  }
  shmbox::batch b;
  CHECK(o->receive_batch(b, {.max = 4, .timeout = 1ms, .spin = 0ns}) == recv_status::timeout);
  CHECK(o->read(b, {.max = 4, .timeout = 1ms}) == recv_status::timeout);
}

TEST_CASE("separate processes: loans with aborts and batches into one box, received in place") {
  for (const policy pol : {policy::block, policy::reject}) {
    CAPTURE(shmbox::to_string(pol));
    shmtest::segment_guard g(shmtest::unique_name("zcipc"));
    auto box = shmbox::Box::create(g.name, {.capacity = 64, .slot_size = 128, .overflow = pol, .block_timeout = 1000ms});
    REQUIRE(box);
    const std::string n = "3000";
    std::vector<std::string> retry;
    if (pol == policy::reject) retry = {"--retry"};
    auto args = [&](std::vector<std::string> a) {
      a.insert(a.end(), retry.begin(), retry.end());
      return a;
    };
    shmtest::child owner({shmtest::helper_path(), "consume", g.name, "9000", "3000", "--in-place", "--batch", "32"});
    REQUIRE(owner.read_line().value_or("").rfind("owned", 0) == 0);
    shmtest::child p1(args({shmtest::helper_path(), "produce", g.name, "1", n, "--no-wait", "--loan", "--abort-every",
                            "3", "--size", "100", "--timeout-ms", "1000"}));
    shmtest::child p2(args({shmtest::helper_path(), "produce", g.name, "2", n, "--no-wait", "--batch", "16", "--size",
                            "64", "--timeout-ms", "1000"}));
    shmtest::child p3(args({shmtest::helper_path(), "produce", g.name, "3", n, "--no-wait", "--size", "128"}));
    for (auto* c : {&p1, &p2, &p3}) CHECK(shmtest::exited_with(c->wait(60s), 0));
    // p1's last line: "done stored=... aborted=N", the loans it took and aborted.
    const std::string p1_out = p1.read_all(10s);
    INFO(p1_out);
    const auto at = p1_out.find(" aborted=");
    REQUIRE(at != std::string::npos);
    const std::uint64_t p1_aborted = std::strtoull(p1_out.c_str() + at + 9, nullptr, 10);
    const std::string out = owner.read_all(60s);
    CHECK(shmtest::exited_with(owner.wait(10s), 0));
    INFO(out);
    CHECK(out.find("got=9000 order_errors=0 redelivered=0 short=0 torn=0 dups=0 p1=3000 p2=3000 p3=3000") !=
          std::string::npos);
    const shmbox::counters c = box->read_counters();
    // Every loan p1 took and aborted is counted, once. block: every third
    // message's abort loan waited for its slot (1000 of them); reject: an
    // abort loan the full box refused is not taken, and a retried message
    // tries again, so the count varies around 1000.
    CHECK(c.aborted == p1_aborted);
    if (pol == policy::block) CHECK(p1_aborted == 1000);
    CHECK(c.delivered == 9000);
    shmtest::check_invariant(*box);
  }
}
