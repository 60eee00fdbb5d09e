// tests/adversary/pools.cpp - the pools surface (adversary.hpp): root's 0600
// pool, whose members retire and are replaced all along (max_lifetime),
// while the second user plants every kind of file and boxes of its own at
// the member box names the pool derives (<pool>.m<index>.<generation>) and
// at pool names root opens; and root's 0666 pool (0666 member boxes) whose
// segment and member boxes it truncates, locks and writes, and whose dead
// letters it renames to root's canary, under a supervisor and takers.
// The 0600 pool's ledger stays exact (pool_support.hpp check_counts) and
// the takers' own count of takes is the pool's; every supervisor and taker
// ends when told; a process of root's the tables could name is never
// signalled; the canary is untouched.
#include "adversary.hpp"
#include "../pool/pool_support.hpp"

namespace adv {

TEST_CASE("adversary: pools - planted member and pool names, and a 0666 pool and its member boxes written under its supervisor and takers") {
  say_skipped("pools");
  const std::string p = shmtest::unique_name("adv-pl") + "-";
  shm_sweeper sweep;
  sweep.prefixes = {"shmbox." + p, "shmbox-pool." + p};
  pooltest::pool_guard g1(p + "p1"), g2(p + "p2");  // after the sweeper: runs first, kills the workers
  canary victim(p + "canary");
  counted_box counted(p + "counted", {.capacity = 64, .slot_size = 64});
  proc bystander("a process of root's", {"/bin/sleep", "600"});

  auto o1 = pooltest::small_pool(g1.name, 1, 3);
  o1.max_lifetime = 1500ms;  // members retire and new generations are named all along
  o1.max_lifetime_jitter = 500ms;
  REQUIRE(shmbox::Pool::create(g1.name, o1));
  REQUIRE(shmbox::Box::create(p + "pdl", {.capacity = 1024, .slot_size = 256, .overflow = shmbox::policy::drop_oldest, .mode = 0666}));
  auto o2 = pooltest::small_pool(g2.name, 1, 3);
  o2.mode = 0666;
  o2.member.mode = 0666;
  o2.dead_letters = p + "pdl";
  REQUIRE(shmbox::Pool::create(g2.name, o2));

  std::vector<std::unique_ptr<proc>> takers;
  auto sup1 = std::make_unique<proc>("root supervisor of p1 (0600)",
                                     std::vector<std::string>{shmtest::helper_path(), "pool-supervise", g1.name});
  REQUIRE(!sup1->expect("supervising", 20s).empty());
  auto sup2 = std::make_unique<proc>("root supervisor of p2 (0666)",
                                     std::vector<std::string>{shmtest::cli_path(), "pool", "run", g2.name, "--command",
                                                              o2.command, "--dead-letters", p + "pdl"});
  pooltest::check_settled(g1.name, 1);
  REQUIRE(shmtest::eventually([&] {
    auto i = shmbox::inspect_pool(g2.name);
    return i && i->free >= 1;
  }, 20s));
  for (int k = 0; k < 2; ++k) {
    takers.push_back(std::make_unique<proc>("root taker of p1 #" + std::to_string(k),
                                            std::vector<std::string>{shmtest::helper_path(), "pool-churn", g1.name, std::to_string(k),
                                                                     "--hold-ms", "5", "--fail-every", "4", "--timeout-ms", "300"}));
    REQUIRE(!takers.back()->expect("churning", 20s).empty());
  }
  takers.push_back(std::make_unique<proc>("root taker of p2",
                                          std::vector<std::string>{shmtest::helper_path(), "pool-churn", g2.name, "7",
                                                                   "--hold-ms", "5", "--timeout-ms", "300"}));
  REQUIRE(!takers.back()->expect("churning", 20s).empty());
  auto churn = start_role("root churn of names " + p + "q*", {"churn", p + "q", "2"});

  std::vector<std::string> targets{"--write", "shmbox-pool." + g2.name, "--write-prefix", "shmbox." + g2.name + ".m",
                                   "--plant-next", "shmbox." + g1.name + ".m"};
  for (int m = 0; m < 3; ++m)
    for (int gen = 1; gen <= 12; ++gen)
      targets.insert(targets.end(), {"--plant", "member:shmbox." + g1.name + ".m" + std::to_string(m) + "." + std::to_string(gen)});
  for (int q = 0; q < 2; ++q)
    targets.insert(targets.end(), {"--plant", "pool:shmbox-pool." + p + "q" + std::to_string(q), "--plant",
                                   "box:shmbox." + p + "q" + std::to_string(q)});
  if (second_user()) targets.insert(targets.end(), {"--victim", victim.name});
  auto attacker = start_attacker("pools", targets);
  const auto t = finish_attacker(*attacker, "pools");

  std::map<std::string, proc::ending> end;
  for (auto& k : takers) end[k->label()] = k->finish(30s);
  end[churn->label()] = churn->finish(30s);
  // The ledger's identities hold once nothing is starting or stopping: a
  // member whose next start waits out the supervisor's back-off after the
  // planted names made its starts fail is a member without a start yet.
  CHECK(pooltest::settles(g1.name, [](const shmbox::pool_info& i) {
    return i.starting == 0 && i.stopping == 0 && i.checking == 0 && i.in_use == 0 && i.ledger_settled;
  }, 30s));
  end[sup1->label()] = sup1->finish(30s, "stopped");
  sup2->signal(SIGTERM);
  const int st2 = sup2->wait(30s);
  INFO("supervisor of p2: " << sup2->all_lines() << "\nstderr: " << sup2->err_text());
  CHECK_FALSE(sup2->hung());
  CHECK(shmtest::exited_with(st2, 0));
  report("pools", end);
  check_none_late(end);

  // p1's ledger is root's alone: exact.
  const shmbox::pool_info i1 = pooltest::snapshot(g1.name);
  pooltest::check_counts(i1);
  // Each lease the takers got was given back and answered ok; the pool
  // counts a few more takes: those whose member box was gone by the time
  // the taker linked it (a member retiring), given back as failed at once
  // (pool_take.cpp make_lease), which the taker saw as a refused take.
  std::uint64_t takes = 0;
  for (auto& [who, e] : end)
    if (who.rfind("root taker of p1", 0) == 0) {
      takes += tally(e.t, "takes");
      CHECK(tally(e.t, "double") == 0);
      CHECK(tally(e.t, "error") == 0);
      if (!second_user()) continue;  // one uid: a box planted at a member's name is the pool's uid's, and used
      CHECK(tally(e.t, "ok") == tally(e.t, "takes"));
      CHECK(tally(e.t, "stale") == 0);
    }
  CHECK(takes <= i1.count.takes);
  CHECK(takes > 0);
  MESSAGE("pools: p1 (0600): " << takes << " takes by its takers (" << i1.count.takes - takes
                               << " more given back at once, their member box gone), ledger exact; " << i1.count.starts
                               << " members started, " << i1.count.start_failures << " start failures");
  CHECK(shmtest::process_state(bystander.pid()) != '?');
  CHECK(shmtest::process_state(bystander.pid()) != 'Z');
  CHECK(tally(t, "plant") > 0);
  if (second_user()) CHECK(tally(t, "foreign_posts.member") == 0);
  counted.stop_and_check();
  victim.check();
}

}  // namespace adv
