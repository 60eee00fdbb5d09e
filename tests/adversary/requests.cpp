// tests/adversary/requests.cpp - the reply boxes surface (adversary.hpp): a
// 0666 service answering root's requesters while the second user forges
// requests of every kind (lib/segment/envelope.hpp) and plants every kind of
// file, and boxes of its own, at the reply names its requests derive.
//   1. forged requests only: root's calls are all answered, each with its
//      own reply, and the service box's counters add up exactly;
//   2. then everything: the service box and root's reply boxes (0666, the
//      service's mode) truncated, locked and written, forged requests
//      naming root's own reply boxes: nothing crashes or hangs.
#include "adversary.hpp"

namespace adv {

TEST_CASE("adversary: reply boxes - forged requests of every kind and planted reply names, then the service and reply boxes written") {
  say_skipped("reply boxes");
  const std::string p = shmtest::unique_name("adv-rq") + "-";
  shm_sweeper sweep;
  sweep.prefixes = {"shmbox." + p};
  canary victim(p + "canary");
  counted_box counted(p + "counted", {.capacity = 64, .slot_size = 64});
  const ms half = attack_time() / 2;

  // 1. Forged requests into service A; root's two requesters ask it all along.
  const std::string a = p + "svc-a";
  REQUIRE(shmbox::Box::create(a, {.capacity = 64, .slot_size = 256, .overflow = shmbox::policy::block, .mode = 0666,
                                  .block_timeout = ms(2000)}));
  {
    std::vector<std::unique_ptr<proc>> roles;
    roles.push_back(start_role("root service A", {"serve", a}));
    roles.push_back(start_role("root requester A1", {"ask", a, "--tag", "a1"}));
    roles.push_back(start_role("root requester A2", {"ask", a, "--tag", "a2"}));
    std::vector<std::string> targets{"--service", a, "--actions", "forge"};
    if (second_user()) targets.insert(targets.end(), {"--victim", victim.name});
    auto attacker = start_attacker("reply boxes (forged requests)", targets, half);
    const auto t = finish_attacker(*attacker, "reply boxes (forged requests)");
    // Requesters first (their last calls are answered), then the service (it drains the box).
    std::map<std::string, proc::ending> end;
    for (auto& r : roles)
      if (r->label() != "root service A") end[r->label()] = r->finish(30s);
    end["root service A"] = roles.front()->finish(30s);
    report("reply boxes (forged requests)", end);
    check_none_late(end);
    std::uint64_t genuine = 0;
    for (const char* who : {"root requester A1", "root requester A2"}) {
      const auto& e = end[who];
      INFO(who << ": " << e.done);
      CHECK(tally(e.t, "asked") > 0);
      CHECK(tally(e.t, "ok") == tally(e.t, "asked"));
      CHECK(tally(e.t, "wrong") == 0);
      CHECK(tally(e.t, "stray") == 0);
      CHECK(tally(e.t, "duplicates") == 0);
      genuine += tally(e.t, "ok");
    }
    std::uint64_t kinds = 0;
    for (const auto& [k, v] : t)
      if (k.rfind("forge.", 0) == 0 && v > 0) ++kinds;
    CHECK(kinds >= 19);
    MESSAGE("reply boxes: " << genuine << " of " << genuine << " root calls answered correctly among "
                            << tally(t, "forge") << " forged requests of " << kinds << " kinds");
    auto box = shmbox::Box::inspect(a);
    REQUIRE(box);
    const shmbox::box_info i = shmbox::info(*box);
    CHECK(identity_problem(i.count, i.depth) == "");
    CHECK(i.depth == 0);
    const auto& s = end["root service A"].t;
    CHECK(tally(s, "received") == i.count.delivered);
    // Replies went to root's requesters and to the attacker's own lookalike reply boxes, nowhere else.
    CHECK(tally(s, "reply_ok") == genuine + tally(t, "foreign_posts.reply"));
    CHECK(i.replies.sent == tally(s, "reply_ok"));
  }
  victim.check();

  // 2. Everything, on service B: its segment and root's reply boxes are 0666.
  const std::string b = p + "svc-b";
  REQUIRE(shmbox::Box::create(b, {.capacity = 64, .slot_size = 256, .overflow = shmbox::policy::block, .mode = 0666,
                                  .block_timeout = ms(500)}));
  {
    std::vector<std::unique_ptr<proc>> roles;
    roles.push_back(start_role("root service B", {"serve", b}));
    roles.push_back(start_role("root requester B1", {"ask", b, "--tag", "b1", "--timeout-ms", "1000"}));
    roles.push_back(start_role("root requester B2", {"ask", b, "--tag", "b2", "--timeout-ms", "1000"}));
    std::vector<std::string> targets{"--service", b, "--impersonate", "--write", "shmbox." + b, "--write-prefix",
                                     "shmbox." + b + ".r"};
    if (second_user()) targets.insert(targets.end(), {"--victim", victim.name});
    auto attacker = start_attacker("reply boxes (everything)", targets, half);
    const auto t = finish_attacker(*attacker, "reply boxes (everything)");
    auto end = finish_all(roles);
    report("reply boxes (everything)", end);
    check_none_late(end);
    CHECK(tally(t, "forge_tried") > 0);  // (forged requests need the service box whole: the attack breaks it soon)
    CHECK(tally(t, "writes") > 0);
  }
  counted.stop_and_check();
  victim.check();
}

}  // namespace adv
