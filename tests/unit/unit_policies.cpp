// Each overflow policy, pobox's worked example, counters, sizes, blocking and
// ownership, in one process (the multi-process versions are in processes.cpp).
#include <doctest/doctest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "segment/layout.hpp"
#include "segment/segment.hpp"
#include "shmbox/shmbox.hpp"
#include "checks.hpp"
#include "support.hpp"

using namespace std::chrono_literals;
using shmbox::policy;
using shmbox::post_status;

namespace {

std::vector<std::string> receive_all(shmbox::Owner& o) {
  std::vector<shmbox::message> msgs;
  while (o.receive_batch(msgs, {.max = 1000, .timeout = 0ns}) == shmbox::recv_status::ok) {
  }
  std::vector<std::string> out;
  for (auto& m : msgs) out.push_back(m.data);
  return out;
}


struct example_case {
  policy pol;
  std::vector<post_status> statuses;
  std::vector<std::string> delivered;
  std::uint64_t rejected, dropped_newest, dropped_oldest, timeouts;
};

}  // namespace

TEST_CASE("policies: pobox's worked example (capacity 3, post a b c d e, receive everything)") {
  const example_case cases[] = {
      {policy::drop_oldest,
       {post_status::stored, post_status::stored, post_status::stored, post_status::stored_evicted,
        post_status::stored_evicted},
       {"c", "d", "e"}, 0, 0, 2, 0},
      {policy::drop_newest,
       {post_status::stored, post_status::stored, post_status::stored, post_status::dropped, post_status::dropped},
       {"a", "b", "c"}, 0, 2, 0, 0},
      {policy::lifo,
       {post_status::stored, post_status::stored, post_status::stored, post_status::stored_evicted,
        post_status::stored_evicted},
       {"e", "b", "a"}, 0, 2, 0, 0},
      {policy::reject,
       {post_status::stored, post_status::stored, post_status::stored, post_status::full, post_status::full},
       {"a", "b", "c"}, 2, 0, 0, 0},
      {policy::block,
       {post_status::stored, post_status::stored, post_status::stored, post_status::timeout, post_status::timeout},
       {"a", "b", "c"}, 0, 0, 0, 2},
  };
  for (const auto& c : cases) {
    CAPTURE(shmbox::to_string(c.pol));
    shmtest::segment_guard g(shmtest::unique_name("example"));
    auto box = shmbox::Box::create(g.name, {.capacity = 3, .slot_size = 16, .overflow = c.pol, .block_timeout = 20ms});
    REQUIRE(box);
    auto p = shmbox::Producer::attach(*box);
    REQUIRE(p);
    const char* msgs[] = {"a", "b", "c", "d", "e"};
    for (int i = 0; i < 5; ++i) CHECK(p->post(msgs[i]) == c.statuses[i]);
    CHECK(box->depth_approx() == 3);
    auto owner = shmbox::Owner::acquire(*box);
    REQUIRE(owner);
    CHECK(receive_all(*owner) == c.delivered);
    const shmbox::counters k = box->read_counters();
    CHECK(k.posted == 5);
    CHECK(k.delivered == 3);
    CHECK(k.rejected == c.rejected);
    CHECK(k.dropped_newest == c.dropped_newest);
    CHECK(k.dropped_oldest == c.dropped_oldest);
    CHECK(k.timeouts == c.timeouts);
    CHECK(k.abandoned == 0);
    CHECK(box->depth_approx() == 0);
    shmtest::check_invariant(*box);
  }
}

TEST_CASE("policies: the default policy is reject") {
  CHECK(shmbox::options{}.overflow == policy::reject);
  shmtest::segment_guard g(shmtest::unique_name("default"));
  auto box = shmbox::Box::create(g.name);
  REQUIRE(box);
  CHECK(box->overflow() == policy::reject);
  CHECK(box->capacity() == 1024);
}

TEST_CASE("policies: names parse with - or _ and print with -") {
  CHECK(shmbox::parse_policy("drop-oldest") == policy::drop_oldest);
  CHECK(shmbox::parse_policy("drop_newest") == policy::drop_newest);
  CHECK(shmbox::parse_policy("lifo") == policy::lifo);
  CHECK_FALSE(shmbox::parse_policy("fifo"));
  CHECK(shmbox::to_string(policy::block) == "block");
}

TEST_CASE("FIFO order holds over many laps of a ring whose capacity is not a power of two") {
  for (auto pol : {policy::reject, policy::drop_oldest, policy::block, policy::drop_newest}) {
    shmtest::segment_guard g(shmtest::unique_name("laps"));
    auto box = shmbox::Box::create(g.name, {.capacity = 3, .slot_size = 32, .overflow = pol});
    REQUIRE(box);
    auto p = shmbox::Producer::attach(*box);
    auto owner = shmbox::Owner::acquire(*box);
    REQUIRE(p);
    REQUIRE(owner);
    int next = 0;
    for (int i = 0; i < 1000; ++i) {
      REQUIRE(p->post(std::to_string(i)) == post_status::stored);
      if (i % 2 == 1) {
        for (const auto& m : receive_all(*owner)) CHECK(m == std::to_string(next++));
      }
    }
    for (const auto& m : receive_all(*owner)) CHECK(m == std::to_string(next++));
    CHECK(next == 1000);
    shmtest::check_invariant(*box);
  }
}

TEST_CASE("drop_oldest keeps the newest `capacity` messages over many laps without an owner") {
  shmtest::segment_guard g(shmtest::unique_name("dropold"));
  auto box = shmbox::Box::create(g.name, {.capacity = 5, .slot_size = 16, .overflow = policy::drop_oldest});
  auto p = shmbox::Producer::attach(*box);
  for (int i = 0; i < 1003; ++i) REQUIRE(shmbox::is_stored(p->post(std::to_string(i))));
  auto owner = shmbox::Owner::acquire(*box);
  CHECK(receive_all(*owner) == std::vector<std::string>{"998", "999", "1000", "1001", "1002"});
  CHECK(box->read_counters().dropped_oldest == 998);
  shmtest::check_invariant(*box);
}

TEST_CASE("lifo delivers newest first and replaces the top when full") {
  shmtest::segment_guard g(shmtest::unique_name("lifo"));
  auto box = shmbox::Box::create(g.name, {.capacity = 4, .slot_size = 16, .overflow = policy::lifo});
  auto p = shmbox::Producer::attach(*box);
  auto owner = shmbox::Owner::acquire(*box);
  for (const char* m : {"1", "2"}) REQUIRE(p->post(m) == post_status::stored);
  shmbox::message one;
  REQUIRE(owner->try_receive(one) == shmbox::recv_status::ok);
  CHECK(one.data == "2");
  for (const char* m : {"3", "4", "5", "6"}) p->post(m);  // 1 3 4 5, then 6 replaces 5
  CHECK(receive_all(*owner) == std::vector<std::string>{"6", "4", "3", "1"});
  CHECK(box->read_counters().dropped_newest == 1);
  shmtest::check_invariant(*box);
}

TEST_CASE("messages: exact bytes, empty messages, and too_large never truncates") {
  for (auto pol : {policy::reject, policy::lifo}) {
    shmtest::segment_guard g(shmtest::unique_name("sizes"));
    auto box = shmbox::Box::create(g.name, {.capacity = 8, .slot_size = 100, .overflow = pol});
    auto p = shmbox::Producer::attach(*box);
    CHECK(p->max_message_size() == 100);
    std::string binary(100, '\0');
    for (int i = 0; i < 100; ++i) binary[static_cast<std::size_t>(i)] = static_cast<char>(i * 7);
    CHECK(p->post(binary) == post_status::stored);
    CHECK(p->post(std::string(101, 'x')) == post_status::too_large);
    CHECK(p->post("") == post_status::stored);
    auto owner = shmbox::Owner::acquire(*box);
    auto got = receive_all(*owner);
    REQUIRE(got.size() == 2);
    if (pol == policy::lifo) std::swap(got[0], got[1]);
    CHECK(got[0] == binary);
    CHECK(got[1].empty());
    CHECK(box->read_counters().too_large == 1);
    shmtest::check_invariant(*box);
  }
}

TEST_CASE("receive_batch into a reusable batch: exact bytes, order, memory reused") {
  shmtest::segment_guard g(shmtest::unique_name("batch"));
  auto box = shmbox::Box::create(g.name, {.capacity = 64, .slot_size = 100});
  auto p = shmbox::Producer::attach(*box);
  auto owner = shmbox::Owner::acquire(*box);
  shmbox::batch b;
  CHECK(owner->receive_batch(b, {.max = 10, .timeout = 0ns}) == shmbox::recv_status::timeout);
  CHECK(b.empty());
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < 20; ++i) REQUIRE(p->post(std::string(static_cast<std::size_t>(i * 5), static_cast<char>('a' + i))) == post_status::stored);
    b.clear();
    CHECK(owner->receive_batch(b, {.max = 15, .timeout = 0ns}) == shmbox::recv_status::ok);
    CHECK(owner->receive_batch(b, {.max = 15, .timeout = 0ns}) == shmbox::recv_status::ok);  // appends
    REQUIRE(b.size() == 20);
    for (std::size_t i = 0; i < b.size(); ++i) {
      CHECK(b[i] == std::string(i * 5, static_cast<char>('a' + i)));
      CHECK_FALSE(b.redelivered(i));
      CHECK(b.lane(i) == 0);
    }
  }
  CHECK(box->read_counters().delivered == 60);
  shmtest::check_invariant(*box);
}

TEST_CASE("one message reused across receives: each receive holds exactly the new bytes, longer, shorter or as long") {
  shmtest::segment_guard g(shmtest::unique_name("reuse"));
  auto box = shmbox::Box::create(g.name, {.capacity = 16, .slot_size = 100});
  auto p = shmbox::Producer::attach(*box);
  auto owner = shmbox::Owner::acquire(*box);
  // as long as the last (copied over it), longer, shorter, empty, as long as an empty one
  const std::vector<std::string> sent = {"abcdef", "ghijkl", std::string(100, 'z'), "mn", "", "", "op", "qr"};
  for (const auto& s : sent) REQUIRE(p->post(s) == post_status::stored);
  shmbox::message m;
  for (std::size_t i = 0; i < sent.size(); ++i) {
    REQUIRE((i % 2 == 0 ? owner->try_receive(m) : owner->receive(m, {.timeout = 0ns})) == shmbox::recv_status::ok);
    CHECK(m.data == sent[i]);
    CHECK(m.position == i);
    CHECK(m.reply_to.empty());
  }
  CHECK(owner->try_receive(m) == shmbox::recv_status::empty);
  shmtest::check_invariant(*box);
}

TEST_CASE("block: a post waits for space and stores once the owner frees a slot") {
  shmtest::segment_guard g(shmtest::unique_name("block"));
  shmbox::options o;
  o.capacity = 2;
  o.slot_size = 16;
  o.overflow = policy::block;
  o.block_timeout = 30s;  // the failure mode of this test is a 30 s timeout, not a flaky timing
  auto box = shmbox::Box::create(g.name, o);
  auto p = shmbox::Producer::attach(*box);
  auto owner = shmbox::Owner::acquire(*box);
  REQUIRE(p->post("1") == post_status::stored);
  REQUIRE(p->post("2") == post_status::stored);
  CHECK(p->post("x", {.timeout = 0ms}) == post_status::timeout);  // full, no wait
  std::atomic<int> third{-1};
  std::thread t([&] { third = static_cast<int>(p->post("3")); });
  // Handshake: wait until the producer announces it wants space.
  auto seg = shmbox::detail::open_segment(g.name, true);
  REQUIRE(seg);
  const auto until = std::chrono::steady_clock::now() + 30s;
  while ((*seg)->lanes[0].hdr->space_wanted.load() == 0 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(1ms);
  shmbox::message msg;
  REQUIRE(owner->try_receive(msg) == shmbox::recv_status::ok);
  t.join();
  CHECK(third == static_cast<int>(post_status::stored));
  CHECK(receive_all(*owner) == std::vector<std::string>{"2", "3"});
  CHECK(box->read_counters().timeouts == 1);
  CHECK((*seg)->lanes[0].hdr->space_wake_calls.load() >= 1);
  shmtest::check_invariant(*box);
}

TEST_CASE("receive: try_receive on an empty box is empty; a timed receive times out; a post wakes a sleeping owner") {
  shmtest::segment_guard g(shmtest::unique_name("wake"));
  auto box = shmbox::Box::create(g.name);
  auto owner = shmbox::Owner::acquire(*box);
  auto p = shmbox::Producer::attach(*box);
  shmbox::message m;
  CHECK(owner->try_receive(m) == shmbox::recv_status::empty);
  CHECK(owner->receive(m, {.timeout = 5ms}) == shmbox::recv_status::timeout);

  auto seg = shmbox::detail::open_segment(g.name, true);
  REQUIRE(seg);
  auto* rec = (*seg)->owner();
  const auto wakes_before = rec->wake_calls.load();
  // Nobody sleeps: posts make no futex call (the wake counter counts them).
  for (int i = 0; i < 1000; ++i) REQUIRE(p->post("x") == post_status::stored);
  CHECK(rec->wake_calls.load() == wakes_before);
  std::vector<shmbox::message> drained;
  CHECK(owner->receive_batch(drained, {.max = 2000, .timeout = 0ns}) == shmbox::recv_status::ok);
  CHECK(drained.size() == 1000);

  // Now the owner sleeps (its bit is in the tail); one post wakes it.
  std::atomic<int> status{-1};
  std::thread t([&] { status = static_cast<int>(owner->receive(m, {.timeout = 30s})); });
  const auto until = std::chrono::steady_clock::now() + 30s;
  while (((*seg)->lanes[0].hdr->tail.load() & 1) == 0 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(1ms);
  REQUIRE(((*seg)->lanes[0].hdr->tail.load() & 1) == 1);
  REQUIRE(p->post("wake up") == post_status::stored);
  t.join();
  CHECK(status == static_cast<int>(shmbox::recv_status::ok));
  CHECK(m.data == "wake up");
  CHECK(rec->wake_calls.load() == wakes_before + 1);
}

TEST_CASE("ownership: one owner at a time; released ownership passes on with a new epoch") {
  shmtest::segment_guard g(shmtest::unique_name("own"));
  auto box = shmbox::Box::create(g.name);
  std::uint64_t first_epoch = 0;
  {
    auto a = shmbox::Owner::acquire(*box);
    REQUIRE(a);
    first_epoch = a->epoch();
    auto b = shmbox::Owner::acquire(g.name);
    REQUIRE_FALSE(b);
    CHECK(b.error() == shmbox::errc::already_owner);
    CHECK(shmbox::info(*box).owner.alive);
    CHECK(shmbox::info(*box).owner.pid == static_cast<std::uint32_t>(::getpid()));
  }
  CHECK(shmbox::info(*box).owner.pid == 0);
  auto c = shmbox::Owner::acquire(*box);
  REQUIRE(c);
  CHECK(c->epoch() == first_epoch + 1);
}

TEST_CASE("producers: the table is bounded and entries are given back") {
  shmtest::segment_guard g(shmtest::unique_name("table"));
  auto box = shmbox::Box::create(g.name, {.max_producers = 2});
  auto a = shmbox::Producer::attach(*box);
  auto b = shmbox::Producer::attach(*box);
  REQUIRE(a);
  REQUIRE(b);
  auto c = shmbox::Producer::attach(*box);
  REQUIRE_FALSE(c);
  CHECK(c.error() == shmbox::errc::producer_table_full);
  CHECK(shmbox::explain(c.error()).find("--max-producers") != std::string::npos);
  { auto moved = std::move(*a); }  // destroyed: entry given back
  auto d = shmbox::Producer::attach(*box);
  CHECK(d);
  CHECK(shmbox::info(*box).producers_attached == 2);
}
