// Message ids (shmbox::message_id, Owner::id_of, to_string, parse_message_id): the box's incarnation, the
// lane and the lane position. What the NATS bridge deduplicates on, so: the
// same for a message redelivered after its owner was SIGKILLed (a separate
// helper process), the same as `peek` shows, different for every message
// and for a box created again under the same name; the string form reads
// back and nothing else does.
#include <doctest/doctest.h>

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <set>
#include <string>
#include <vector>

#include "shmbox/shmbox.hpp"
#include "support.hpp"

using namespace std::chrono_literals;
using shmbox::message_id;
using shmbox::recv_status;

TEST_CASE("message ids: unique per message, as peek shows them, kept by a redelivery after SIGKILL") {
  shmtest::segment_guard g(shmtest::unique_name("msgid"));
  auto box = shmbox::Box::create(g.name, {.capacity = 8, .lanes = std::vector<shmbox::lane_options>(3)});
  REQUIRE(box);
  auto p = shmbox::Producer::attach(*box);
  REQUIRE(p);
  // Lanes 1 and 2, wrapping each ring twice so positions go past the capacity.
  for (int round = 0; round < 2; ++round) {
    {
      for (int i = 0; i < 6; ++i) REQUIRE(shmbox::is_stored(p->post(shmtest::tag('a', round * 10 + i), {.lane = 1})));
      for (int i = 0; i < 3; ++i) REQUIRE(shmbox::is_stored(p->post(shmtest::tag('b', round * 10 + i), {.lane = 2})));
    }
    if (round == 0) {  // the first round is received and committed: positions move on
      auto o = shmbox::Owner::acquire(*box);
      REQUIRE(o);
      shmbox::message m;
      int n = 0;
      while (o->try_receive(m) == recv_status::ok) ++n;
      CHECK(n == 9);
    }
  }
  std::vector<std::string> peeked;
  for (const auto& m : shmbox::peek(*box, 100)) peeked.push_back(shmbox::to_string(message_id{box->id(), m.lane, m.position}));
  REQUIRE(peeked.size() == 9);
  CHECK(std::set<std::string>(peeked.begin(), peeked.end()).size() == 9);

  // A separate owner process reads 5 without committing and is killed.
  std::vector<std::string> first;
  {
    shmtest::child owner({shmtest::helper_path(), "stash-owner", g.name}, {}, true);
    REQUIRE(shmtest::line_starting(owner, "owned").size() > 0);
    first = shmtest::fields(shmtest::ask(owner, "read-ids 5"));
    owner.kill(SIGKILL);
    REQUIRE(shmtest::killed_by(owner.wait(10s), SIGKILL));
  }
  REQUIRE(first.size() == 2 + 5);
  CHECK(first[0] == "ids");
  CHECK(first[1] == "5");
  first.erase(first.begin(), first.begin() + 2);

  auto o = shmbox::Owner::acquire(*box);
  REQUIRE(o);
  shmbox::batch b;
  REQUIRE(o->read(b, {.max = 100, .timeout = 0ns}) == recv_status::ok);
  REQUIRE(b.size() == 9);
  std::vector<std::string> again;
  for (std::size_t i = 0; i < b.size(); ++i) {
    const message_id id = o->id_of(b.lane(i), b.position(i));
    CHECK(id.box == box->id());
    CHECK(id.lane == b.lane(i));
    CHECK(id.valid());
    again.push_back(shmbox::to_string(id));
    CHECK(b.redelivered(i) == (i < 5));  // the five the dead owner held come first, flagged
  }
  CHECK(std::vector<std::string>(again.begin(), again.begin() + 5) == first);  // same ids after the takeover
  CHECK(std::set<std::string>(again.begin(), again.end()) == std::set<std::string>(peeked.begin(), peeked.end()));
  CHECK(o->commit() == recv_status::ok);

  // The one-message forms carry the position too.
  REQUIRE(shmbox::is_stored(p->post("last", {.lane = 2})));
  shmbox::message m;
  REQUIRE(o->try_receive(m) == recv_status::ok);
  CHECK(m.data == "last");
  const message_id last = o->id_of(m.lane, m.position);
  CHECK(last.valid());
  CHECK(std::find(again.begin(), again.end(), shmbox::to_string(last)) == again.end());
}

TEST_CASE("message ids: a box created again under the same name has another id") {
  shmtest::segment_guard g(shmtest::unique_name("msgid2"));
  std::uint64_t first = 0;
  {
    auto box = shmbox::Box::create(g.name, {.capacity = 4});
    REQUIRE(box);
    first = box->id();
    auto again = shmbox::Box::open(g.name);
    REQUIRE(again);
    CHECK(again->id() == first);  // every handle of one box sees the same id
  }
  REQUIRE(shmbox::Box::remove(g.name));
  auto box = shmbox::Box::create(g.name, {.capacity = 4});
  REQUIRE(box);
  CHECK(box->id() != first);
}

TEST_CASE("message ids: the string form reads back; anything else is refused") {
  const message_id id{0x9f3c0a1b2c3d4e5full, 7, 281474976710655ull};
  CHECK(shmbox::to_string(id) == "9f3c0a1b2c3d4e5f-7-281474976710655");
  const auto back = shmbox::parse_message_id(shmbox::to_string(id));
  REQUIRE(back);
  CHECK(*back == id);
  CHECK(shmbox::to_string(message_id{}).empty());  // no position: no id
  CHECK_FALSE(message_id{}.valid());
  for (const char* bad : {"", "9f3c0a1b2c3d4e5f", "9f3c0a1b2c3d4e5f-1", "9f3c0a1b2c3d4e5f-1-", "9F3C0A1B2C3D4E5F-1-2",
                          "9f3c0a1b2c3d4e5-1-2", "9f3c0a1b2c3d4e5fa-1-2", "9f3c0a1b2c3d4e5f-8-2", "9f3c0a1b2c3d4e5f-01-2",
                          "9f3c0a1b2c3d4e5f-1-2x", "9f3c0a1b2c3d4e5f-1--2", "9f3c0a1b2c3d4e5f-1-99999999999999999999",
                          "9f3c0a1b2c3d4e5f-1-18446744073709551615"})
    CHECK_MESSAGE(!shmbox::parse_message_id(bad), bad);
}
