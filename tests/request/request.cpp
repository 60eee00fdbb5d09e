// Request/reply (shmbox/request.hpp, Owner::reply; lib/segment/envelope.hpp):
// requesters and owners are separate programs (the helper's `ask`,
// `ask-hold` and `respond`), killed where the issue says: the owner after
// its reply and before its commit, the requester while it waits.
#include <doctest/doctest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "checks.hpp"
#include "shmbox/shmbox.hpp"
#include "support.hpp"

using namespace std::chrono_literals;
using shmbox::reply_status;
using shmtest::child;
using shmtest::line_field;

namespace {

// "asked TICKET REPLYBOX" -> REPLYBOX
std::string reply_box_of(const std::string& asked) { return asked.substr(asked.rfind(' ') + 1); }

void kill_and_reap(child& c) {
  ::kill(c.pid(), SIGKILL);
  int st = 0;
  ::waitpid(c.pid(), &st, 0);
}

// Removes the reply boxes of a service (what gc would) when the test ends.
struct reply_boxes_guard {
  std::string service;
  ~reply_boxes_guard() {
    if (auto names = shmbox::Box::list())
      for (const auto& n : *names)
        if (n.rfind(service + ".r", 0) == 0) (void)shmbox::Box::remove(n);
  }
};

// Receives one message (up to 10 s): the test's own owner loop.
shmbox::message receive_one(shmbox::Owner& o) {
  shmbox::message m;
  REQUIRE(o.receive(m, {.timeout = 10s}) == shmbox::recv_status::ok);
  return m;
}

}  // namespace

TEST_CASE("request: the owner sees the request's bytes and its reply address apart, and answers it once") {
  shmtest::segment_guard g(shmtest::unique_name("req"));
  reply_boxes_guard rg{g.name};
  auto box = shmbox::Box::create(g.name, {.capacity = 16, .slot_size = 128});
  REQUIRE(box);
  auto owner = shmbox::Owner::acquire(*box);
  REQUIRE(owner);
  child r({shmtest::helper_path(), "ask-hold", g.name, "hello"}, {}, true);
  const auto asked = r.read_line(30s);
  REQUIRE(asked.has_value());
  REQUIRE(asked->rfind("asked 1 ", 0) == 0);
  CHECK(reply_box_of(*asked).rfind(g.name + ".r", 0) == 0);
  // A plain message next to it is not a request.
  auto p = shmbox::Producer::attach(*box);
  REQUIRE(p);
  REQUIRE(p->post("plain") == shmbox::post_status::stored);

  shmbox::message m = receive_one(*owner);
  CHECK(m.data == "hello");  // the bytes as asked, without the address
  CHECK(m.is_request());
  CHECK_FALSE(m.answered);
  shmbox::message plain = receive_one(*owner);
  CHECK(plain.data == "plain");
  CHECK_FALSE(plain.is_request());
  CHECK(owner->reply(plain, "x") == reply_status::not_a_request);

  CHECK(owner->reply(m, "re:hello") == reply_status::ok);
  CHECK(r.read_line(10s) == "reply re:hello");
  CHECK(r.read_line(10s) == "stats duplicates=0 late=0 stray=0");
  const auto i = shmbox::info(*box);
  CHECK(i.replies.sent == 1);
  CHECK(i.replies.lost == 0);
}

// peek (shmbox dump, shmbox_peek, Box.peek) shows what the owner and the
// requester receive: the body, the trailer apart (peeked_message::envelope).
TEST_CASE("request: peek shows a request as its owner receives it, and a reply as its requester does") {
  shmtest::segment_guard g(shmtest::unique_name("reqpeek"));
  reply_boxes_guard rg{g.name};
  auto box = shmbox::Box::create(g.name, {.capacity = 16, .slot_size = 128});
  REQUIRE(box);
  auto req = shmbox::Requester::attach(g.name);
  REQUIRE(req);
  auto p = shmbox::Producer::attach(*box);
  REQUIRE(p);
  const shmbox::ask_result a = req->ask("hello");
  REQUIRE(a);
  REQUIRE(p->post("plain") == shmbox::post_status::stored);
  // A plain message that ends in a request's magic, but whose check word does not check out: all of it.
  std::string forged(40, 'x');
  forged.replace(32, 8, std::string("\x01SHMBXRQ", 8));
  REQUIRE(p->post(forged) == shmbox::post_status::stored);
  auto seen = shmbox::peek(*box, 16);
  REQUIRE(seen.size() == 3);
  CHECK(seen[0].data == "hello");
  CHECK(seen[0].envelope == "request");
  CHECK(seen[1].data == "plain");
  CHECK(seen[1].envelope.empty());
  CHECK(seen[2].data == forged);
  CHECK(seen[2].envelope.empty());
  // The reply, in the reply box.
  auto owner = shmbox::Owner::acquire(*box);
  REQUIRE(owner);
  shmbox::message m = receive_one(*owner);
  REQUIRE(m.is_request());
  CHECK(owner->reply(m, "re:hello") == reply_status::ok);
  auto rb = shmbox::Box::inspect(req->reply_box());
  REQUIRE(rb);
  seen = shmbox::peek(*rb, 16);
  REQUIRE(seen.size() == 1);
  CHECK(seen[0].data == "re:hello");
  CHECK(seen[0].envelope == "reply");
  std::string out;
  CHECK(req->wait(a.ticket, out, 10s) == reply_status::ok);
  CHECK(out == "re:hello");
}

TEST_CASE("request: 8 requesters x 10,000 requests through one service box: every reply to its own request") {
  shmtest::segment_guard g(shmtest::unique_name("req8"));
  reply_boxes_guard rg{g.name};
  REQUIRE(shmbox::Box::create(g.name, {.capacity = 256, .slot_size = 128, .overflow = shmbox::policy::block,
                                       .block_timeout = 10000ms}));
  constexpr int kRequesters = 8;
  constexpr int kEach = 10000;
  child service({shmtest::helper_path(), "respond", g.name}, {}, true);
  REQUIRE(service.read_line(30s).value_or("").rfind("owned ", 0) == 0);
  service.write_stdin(shmtest::cat("serve ", std::to_string(kRequesters * kEach), "\n"));
  std::vector<std::unique_ptr<child>> rs;
  for (int k = 0; k < kRequesters; ++k) {
    rs.push_back(std::make_unique<child>(
        std::vector<std::string>{shmtest::helper_path(), "ask", g.name, std::to_string(kEach), shmtest::cat("r", std::to_string(k)),
                                 "--pipeline", std::to_string(1 + k % 4)},
        std::vector<std::string>{}, true));
    REQUIRE(rs.back()->read_line(30s).value_or("").rfind("ready ", 0) == 0);
  }
  for (auto& c : rs) c->write_stdin("go\n");
  for (int k = 0; k < kRequesters; ++k) {
    CAPTURE(k);
    const auto done = rs[k]->read_line(240s);
    REQUIRE(done.has_value());
    INFO(*done);
    CHECK(line_field(*done, "ok") == std::to_string(kEach));
    CHECK(line_field(*done, "wrong") == "0");
    CHECK(line_field(*done, "timeout") == "0");
    CHECK(line_field(*done, "error") == "0");
    CHECK(line_field(*done, "duplicates") == "0");
    CHECK(line_field(*done, "stray") == "0");
  }
  CHECK(service.read_line(60s) == shmtest::cat("served ", std::to_string(kRequesters * kEach)));
  const auto i = shmbox::info(shmbox::Box::open(g.name).value());
  CHECK(i.replies.sent == static_cast<std::uint64_t>(kRequesters * kEach));
  CHECK(i.replies.lost == 0);
}

TEST_CASE("request: an owner killed after its reply and before its commit, at each point: the requester sees exactly one reply, the heir knows what it can") {
  // killed: SIGKILLed from here after its reply returned ok, before its commit;
  // owner.reply_after_mark: killed there (marked, not committed, not counted):
  //   the heir sees the request answered and sends nothing;
  // owner.reply_before_mark: the reply stored, the request not marked: the heir
  //   replies again and the requester drops that duplicate (counted).
  // Where the request is read from: a FIFO lane's slot; a priority box's
  // store (a later message of a lower priority was there first, so the lane
  // is sorted); the stash (received, stashed and unstashed by the owner); a
  // lifo lane's slot (found by its index and stamp).
  struct way {
    const char* fault;  // nullptr: SIGKILL from the test
    bool marked;
    std::uint64_t sent;  // replies counted at the end (the dead owner's only when it returned)
  };
  enum class from { slot, store, stash, lifo };
  for (const from f : {from::slot, from::store, from::stash, from::lifo})
  for (const way w : {way{nullptr, true, 2}, way{"owner.reply_after_mark", true, 1}, way{"owner.reply_before_mark", false, 2}}) {
    const std::string how = w.fault != nullptr ? w.fault : "SIGKILL";
    CAPTURE(how);
    const std::string where = f == from::slot ? "a slot" : f == from::store ? "a priority box's store" : f == from::stash ? "the stash" : "a lifo lane";
    CAPTURE(where);
    shmtest::segment_guard g(shmtest::unique_name("reqkill"));
    reply_boxes_guard rg{g.name};
    auto box = shmbox::Box::create(g.name, {.capacity = 16, .slot_size = 128,
                                            .overflow = f == from::lifo ? shmbox::policy::lifo : shmbox::policy::reject,
                                            .stash = f == from::stash ? 4u : 0u,
                                            .priority = f == from::store});
    REQUIRE(box);
    child a({shmtest::helper_path(), "respond", g.name},
            w.fault != nullptr ? std::vector<std::string>{shmtest::cat("SHMBOX_FAULT=", w.fault)} : std::vector<std::string>{},
            true);
    REQUIRE(a.read_line(30s).value_or("").rfind("owned ", 0) == 0);
    auto low = shmbox::Producer::attach(*box);
    REQUIRE(low);
    if (f == from::store) REQUIRE(low->post("low", {.priority = 5}) == shmbox::post_status::stored);
    child r({shmtest::helper_path(), "ask-hold", g.name, "q1"}, {}, true);
    REQUIRE(r.read_line(30s).value_or("").rfind("asked 1 ", 0) == 0);
    if (f == from::stash) {
      a.write_stdin("stash-back\n");
      REQUIRE(a.read_line(10s) == "stashed q1");
    }
    a.write_stdin("read 1\n");
    CHECK(a.read_line(10s) == "read 1 q1");
    a.write_stdin("reply\n");
    if (w.fault == nullptr) {
      CHECK(a.read_line(10s) == "replied ok");
      kill_and_reap(a);  // read, replied, never committed
    } else {
      CHECK_FALSE(a.read_line(10s).has_value());  // killed at the fault point
      int st = 0;
      REQUIRE(::waitpid(a.pid(), &st, 0) == a.pid());
      CHECK((WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL));
    }
    CHECK(r.read_line(10s) == "reply re:q1");  // the reply got through
    CHECK(r.read_line(10s) == "stats duplicates=0 late=0 stray=0");

    // The heir: the request again, flagged redelivered (and answered if the mark was made).
    auto heir = shmbox::Owner::acquire(*box);
    REQUIRE(heir);
    shmbox::batch b;
    REQUIRE(heir->read(b, {.max = 4, .timeout = 5s}) == shmbox::recv_status::ok);
    REQUIRE(b.size() == (f == from::store ? 2u : 1u));  // (the store: "low" after it)
    CHECK(b[0] == "q1");
    if (f == from::store) CHECK(b[1] == "low");
    CHECK(b.redelivered(0));
    CHECK(b.answered(0) == w.marked);
    CHECK(heir->reply(b, 0, "re:q1") == (w.marked ? reply_status::already_replied : reply_status::ok));
    CHECK(heir->commit() == shmbox::recv_status::ok);
    // The requester asks again: the reply it gets is the new request's.
    r.write_stdin("again\n");
    REQUIRE(r.read_line(10s).value_or("").rfind("asked 2 ", 0) == 0);
    shmbox::message m = receive_one(*heir);
    CHECK(m.data == "q1+");
    CHECK_FALSE(m.redelivered);
    CHECK(heir->reply(m, shmtest::cat("re:", m.data)) == reply_status::ok);
    CHECK(r.read_line(10s) == "reply re:q1+");
    // the heir's second reply to q1 (not marked) dropped and counted; none when marked
    CHECK(r.read_line(10s) == (w.marked ? "stats duplicates=0 late=0 stray=0" : "stats duplicates=1 late=0 stray=0"));
    const auto i = shmbox::info(*box);
    CHECK(i.replies.sent == w.sent);
    CHECK(i.replies.skipped == (w.marked ? 1u : 0u));
  }
}

TEST_CASE("request: a requester SIGKILLed while it waits: its reply is counted lost, goes to dead letters, and gc takes its reply box") {
  shmtest::segment_guard g(shmtest::unique_name("reqdead"));
  shmtest::segment_guard dl(shmtest::unique_name("reqdl"));
  reply_boxes_guard rg{g.name};
  REQUIRE(shmbox::Box::create(dl.name, {.capacity = 8, .slot_size = 256}));
  auto box = shmbox::Box::create(g.name, {.capacity = 16, .slot_size = 128, .dead_letters = dl.name});
  REQUIRE(box);
  auto owner = shmbox::Owner::acquire(*box);
  REQUIRE(owner);
  std::string reply_box;
  {
    child r({shmtest::helper_path(), "ask-hold", g.name, "d1"}, {}, true);
    const auto asked = r.read_line(30s);
    REQUIRE(asked.has_value());
    reply_box = reply_box_of(*asked);
    kill_and_reap(r);
  }
  shmbox::message m = receive_one(*owner);
  CHECK(m.data == "d1");
  CHECK(owner->reply(m, "re:d1") == reply_status::requester_gone);
  const auto i = shmbox::info(*box);
  CHECK(i.replies.lost == 1);
  CHECK(i.replies.sent == 0);
  auto dead = shmbox::Owner::acquire(dl.name);
  REQUIRE(dead);
  shmbox::message letter = receive_one(*dead);
  CHECK(letter.data == shmtest::cat("[", g.name, " reply-requester-gone] re:d1"));
  // Nobody holds the dead requester's reply box now: gc removes it, also with
  // replies in it (a reply that got in before the owner found the requester dead).
  CHECK(shmbox::info(shmbox::Box::open(reply_box).value()).reply_box);
  {
    auto p = shmbox::Producer::attach(reply_box);
    REQUIRE(p);
    REQUIRE(p->post("a reply nobody will read") == shmbox::post_status::stored);
  }
  auto removed = shmbox::collect({.prefix = reply_box});
  REQUIRE(removed);
  REQUIRE(removed->size() == 1);
  CHECK_FALSE(removed->front().skipped);
  CHECK(removed->front().depth == 1);
  CHECK(removed->front().why.find("a dead requester's reply box (1 replies nobody can read)") != std::string::npos);
  CHECK_FALSE(shmbox::Box::open(reply_box));
  // An ordinary box is not removed with its messages.
  shmtest::segment_guard other(shmtest::unique_name("reqplain"));
  {
    auto b = shmbox::Box::create(other.name, {.capacity = 4});
    REQUIRE(b);
    REQUIRE(shmbox::Producer::attach(*b)->post("kept") == shmbox::post_status::stored);
  }
  auto kept = shmbox::collect({.prefix = other.name});
  REQUIRE(kept);
  CHECK(kept->empty());
}

TEST_CASE("request: a request that timed out is over: its late reply is counted, never handed to the next request") {
  shmtest::segment_guard g(shmtest::unique_name("reqlate"));
  reply_boxes_guard rg{g.name};
  REQUIRE(shmbox::Box::create(g.name, {.capacity = 16, .slot_size = 128}));
  child a({shmtest::helper_path(), "respond", g.name}, {}, true);
  REQUIRE(a.read_line(30s).value_or("").rfind("owned ", 0) == 0);
  auto req = shmbox::Requester::attach(g.name);
  REQUIRE(req);
  const auto t1 = req->ask("slow");
  REQUIRE(t1);
  std::string out;
  CHECK(req->wait(t1.ticket, out, 20ms) == reply_status::timeout);
  CHECK(req->wait(t1.ticket, out, 0ns) == reply_status::error);  // over: not waitable again
  a.write_stdin("read 1\n");
  CHECK(a.read_line(10s) == "read 1 slow");
  a.write_stdin("reply\n");
  CHECK(a.read_line(10s) == "replied ok");  // the requester is alive: the reply is stored
  a.write_stdin("commit\n");
  CHECK(a.read_line(10s) == "committed");
  const auto t2 = req->ask("next");
  REQUIRE(t2);
  CHECK(t2.ticket != t1.ticket);
  a.write_stdin("read 1\n");
  CHECK(a.read_line(10s) == "read 1 next");
  a.write_stdin("reply\n");
  CHECK(a.read_line(10s) == "replied ok");
  CHECK(req->wait(t2.ticket, out, 10s) == reply_status::ok);
  CHECK(out == "re:next");
  CHECK(req->stats().late == 1);
  CHECK(req->stats().timed_out == 1);
  CHECK(req->stats().replied == 1);
}

TEST_CASE("request: notify_fd turns readable when a reply comes (an event loop's wait)") {
  shmtest::segment_guard g(shmtest::unique_name("reqfd"));
  reply_boxes_guard rg{g.name};
  REQUIRE(shmbox::Box::create(g.name, {.capacity = 16, .slot_size = 128}));
  child a({shmtest::helper_path(), "respond", g.name}, {}, true);
  REQUIRE(a.read_line(30s).value_or("").rfind("owned ", 0) == 0);
  auto req = shmbox::Requester::attach(g.name);
  REQUIRE(req);
  const int fd = req->notify_fd();
  REQUIRE(fd >= 0);
  const auto t = req->ask("ev");
  REQUIRE(t);
  std::string out;
  CHECK(req->wait(t.ticket, out, 0ns, true) == reply_status::timeout);  // kept
  pollfd p{fd, POLLIN, 0};
  CHECK(::poll(&p, 1, 0) == 0);  // nothing yet
  a.write_stdin("serve 1\n");
  REQUIRE(::poll(&p, 1, 10000) == 1);
  CHECK(req->wait(t.ticket, out, 0ns, true) == reply_status::ok);
  CHECK(out == "re:ev");
  CHECK(a.read_line(10s) == "served 1");
}

TEST_CASE("request: where a reply may go is this process's decision, not the segment's") {
  shmtest::segment_guard g(shmtest::unique_name("reqfx"));
  reply_boxes_guard rg{g.name};
  auto box = shmbox::Box::create(g.name, {.capacity = 16, .slot_size = 128});
  REQUIRE(box);
  auto owner = shmbox::Owner::acquire(*box);
  REQUIRE(owner);
  SUBCASE("a reply box made again under the requester's name is another requester's: nothing goes there") {
    std::string reply_box;
    {
      child r({shmtest::helper_path(), "ask-hold", g.name, "z1"}, {}, true);
      const auto asked = r.read_line(30s);
      REQUIRE(asked.has_value());
      reply_box = reply_box_of(*asked);
      kill_and_reap(r);
    }
    REQUIRE(shmbox::Box::remove(reply_box));
    auto again = shmbox::Box::create(reply_box, {.capacity = 4, .slot_size = 256});
    REQUIRE(again);
    auto its_owner = shmbox::Owner::acquire(*again);  // alive, but not the one who asked
    REQUIRE(its_owner);
    shmbox::message m = receive_one(*owner);
    CHECK(owner->reply(m, "re:z1") == reply_status::requester_gone);
    CHECK(shmbox::info(*again).depth == 0);
  }
  SUBCASE("a forged request: a token of no requester, an answered mark on a first delivery") {
    auto req = shmbox::Requester::attach(g.name);
    REQUIRE(req);
    const auto t = req->ask("f1");
    REQUIRE(t);
    shmbox::message m = receive_one(*owner);
    REQUIRE(m.is_request());
    // The same address with another token (a byte of it changed, the check word fixed is not needed:
    // a broken check word makes it no request at all).
    std::string forged = m.data + m.reply_to;
    forged[forged.size() - 40 + 8] ^= 1;
    auto p = shmbox::Producer::attach(*box);
    REQUIRE(p);
    REQUIRE(p->post(forged) == shmbox::post_status::stored);
    shmbox::message f = receive_one(*owner);
    CHECK_FALSE(f.is_request());  // the check word no longer matches: plain bytes
    CHECK(f.data == forged);
    // The mark set by a producer on a request delivered the first time: ignored.
    std::string marked = m.data + m.reply_to;
    marked[marked.size() - 40 + 25] = 1;
    REQUIRE(p->post(marked) == shmbox::post_status::stored);
    shmbox::message mk = receive_one(*owner);
    REQUIRE(mk.is_request());
    CHECK_FALSE(mk.answered);
    CHECK(owner->reply(mk, "first") == reply_status::ok);
    CHECK(owner->reply(m, "second") == reply_status::ok);  // same ticket: the requester keeps one
    std::string out;
    CHECK(req->wait(t.ticket, out, 10s) == reply_status::ok);
    CHECK(out == "first");
  }
}

TEST_CASE("request: bad input says what to do") {
  shmtest::segment_guard g(shmtest::unique_name("reqbad"));
  reply_boxes_guard rg{g.name};
  CHECK(shmbox::Requester::attach(g.name).error() == shmbox::errc::not_found);
  REQUIRE(shmbox::Box::create(g.name, {.capacity = 4, .slot_size = 64}));
  CHECK(shmbox::Requester::attach(g.name, {.max_outstanding = 0}).error() == shmbox::errc::invalid_argument);
  CHECK(shmbox::Requester::attach(std::string(111, 'a')).error() == shmbox::errc::invalid_name);
  auto req = shmbox::Requester::attach(g.name, {.max_outstanding = 2});
  REQUIRE(req);
  CHECK(req->max_request_size() == 64 - 40);
  CHECK(req->ask(std::string(25, 'x')).status == shmbox::post_status::too_large);
  CHECK(shmbox::explain(req->last_error()).find("24 bytes") != std::string::npos);
  REQUIRE(req->ask("a"));
  REQUIRE(req->ask("b"));
  CHECK(req->ask("c").status == shmbox::post_status::full);  // max_outstanding
  CHECK(shmbox::explain(req->last_error()).find("max_outstanding") != std::string::npos);
  std::string out;
  CHECK(req->wait(99, out, 0ns) == reply_status::error);
  CHECK(shmbox::explain(req->last_error()).find("never asked") != std::string::npos);
  const std::string reply_box = req->reply_box();
  CHECK(shmbox::Box::open(reply_box));
  req = shmbox::Requester::attach(g.name);  // the old one goes: its reply box with it
  CHECK(shmbox::Box::open(reply_box).error() == shmbox::errc::not_found);
}

TEST_CASE("request: from the shell: shmbox ask, and a service that is shmbox recv --reply-with") {
  shmtest::segment_guard g(shmtest::unique_name("reqcli"));
  reply_boxes_guard rg{g.name};
  REQUIRE(shmtest::cli({"create", g.name, "--slot-size", "128"}).code == 0);
  SUBCASE("answered by the command's output, in request order; stat counts the replies") {
    child service({shmtest::cli_path(), "recv", g.name, "--follow", "--reply-with", "tr a-z A-Z"}, {}, true, true);
    const auto r = shmtest::cli({"ask", g.name, "eurusd", "gbpusd", "--timeout", "20000"});
    CHECK(r.code == 0);
    CHECK(r.out == "EURUSD\nGBPUSD\n");
    const auto lines = shmtest::cli({"ask", g.name, "--timeout", "20000"}, "one\ntwo\nthree\n");
    CHECK(lines.code == 0);
    CHECK(lines.out == "ONE\nTWO\nTHREE\n");
    const auto plain = shmtest::cli({"post", g.name, "not a request"});  // printed, not answered
    CHECK(plain.code == 0);
    CHECK(service.read_line(20s) == "not a request");
    const auto st = shmtest::cli({"stat", g.name});
    CHECK(st.out.find("replies      5 sent, 0 lost") != std::string::npos);
    service.kill(SIGTERM);
    CHECK(shmtest::exited_with(service.wait(20s), 0));
  }
  SUBCASE("no service: each request says it got no reply in time, exit 3") {
    const auto r = shmtest::cli({"ask", g.name, "x", "--timeout", "50"});
    CHECK(r.code == 3);
    CHECK(r.err.find("request 1: no reply within 50 ms") != std::string::npos);
    CHECK(r.err.find("--reply-with") != std::string::npos);
    // The request is still in the box: dump shows its body, marked, not its reply address.
    const auto d = shmtest::cli({"dump", g.name});
    CHECK(d.code == 0);
    CHECK(d.out.find("1 bytes  [request]  x\n") != std::string::npos);
    const auto j = shmtest::cli({"dump", g.name, "--json"});
    CHECK(j.out.find("\"envelope\": \"request\"") != std::string::npos);
    CHECK(j.out.find("\"text\": \"x\"") != std::string::npos);
  }
  SUBCASE("a request too large for the box says how large one may be") {
    const auto r = shmtest::cli({"ask", g.name, std::string(100, 'x'), "--timeout", "50"});
    CHECK(r.code == 1);
    CHECK(r.err.find("takes requests of at most 88") != std::string::npos);
  }
}

TEST_CASE("request: a requester of another user (a 0666 service box) gets its reply, nobody else's") {
  if (!shmtest::nobody_can_run_cli()) return;
  shmtest::segment_guard g(shmtest::unique_name("requid"));
  reply_boxes_guard rg{g.name};
  REQUIRE(shmtest::cli({"create", g.name, "--slot-size", "128", "--mode", "0666"}).code == 0);
  child service({shmtest::cli_path(), "recv", g.name, "--follow", "--reply-with", "tr a-z A-Z"}, {}, true, true);
  const auto r = shmtest::as_nobody(65534, {"ask", "--any-owner", g.name, "hello", "--timeout", "20000"});
  CHECK(r.code == 0);
  CHECK(r.out == "HELLO\n");
  INFO(r.err);
  service.kill(SIGTERM);
  CHECK(shmtest::exited_with(service.wait(20s), 0));
}
