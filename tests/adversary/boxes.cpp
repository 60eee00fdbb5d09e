// tests/adversary/boxes.cpp - the boxes surface (adversary.hpp): names root
// creates and opens (a churn of library calls) planted with every kind of
// file and with boxes of the attacker's; root's 0666 boxes truncated,
// size-flipped, locked and written under their root owners and producers
// (a block box's producer with no owner: its waits end by their deadline);
// root's 0644 box's bytes held shared.
#include "adversary.hpp"

namespace adv {

using shmbox::policy;

TEST_CASE("adversary: boxes - planted names, and root's 0666 boxes truncated, locked and written under their owners and producers") {
  say_skipped("boxes");
  const std::string p = shmtest::unique_name("adv-box") + "-";
  shm_sweeper sweep;
  sweep.prefixes = {"shmbox." + p, "shmbox-pool." + p};
  canary victim(p + "canary");
  counted_box counted(p + "counted", {.capacity = 64, .slot_size = 64});

  // Root's boxes that anyone may write (0666) or read (0644), each in use by root.
  REQUIRE(shmbox::Box::create(p + "open", {.capacity = 64, .slot_size = 256, .overflow = policy::drop_oldest, .mode = 0666,
                                           .lanes = {{}, {}, {.overflow = policy::lifo}}}));
  REQUIRE(shmbox::Box::create(p + "blk", {.capacity = 8, .overflow = policy::block, .mode = 0666,
                                          .block_timeout = ms(200)}));
  REQUIRE(shmbox::Box::create(p + "ro", {.capacity = 32, .mode = 0644}));
  std::vector<std::unique_ptr<proc>> roles;
  roles.push_back(start_role("root owner of open (0666)", {"own", p + "open"}));
  roles.push_back(start_role("root producer of open (0666)", {"produce", p + "open", "--pause-us", "100"}));
  roles.push_back(start_role("root producer of open (0666), 2", {"produce", p + "open", "--size", "200", "--reattach-every", "500"}));
  roles.push_back(start_role("root producer of blk (0666 block, no owner)", {"produce", p + "blk", "--timeout-ms", "100"}));
  roles.push_back(start_role("root owner of ro (0644)", {"own", p + "ro"}));
  roles.push_back(start_role("root producer of ro (0644)", {"produce", p + "ro"}));
  roles.push_back(start_role("root churn of names " + p + "n*", {"churn", p + "n", "6"}));

  std::vector<std::string> targets{"--write", "shmbox." + p + "open", "--write", "shmbox." + p + "blk", "--read",
                                   "shmbox." + p + "ro"};
  for (int i = 0; i < 6; ++i) targets.insert(targets.end(), {"--plant", "box:shmbox." + p + "n" + std::to_string(i)});
  if (second_user()) targets.insert(targets.end(), {"--victim", victim.name});
  auto attacker = start_attacker("boxes", targets);
  const auto t = finish_attacker(*attacker, "boxes");

  auto end = finish_all(roles);
  report("boxes", end);
  counted.stop_and_check();
  victim.check();
  check_none_late(end);
  // The churn met the plants: its calls answered (refused or not) in time,
  // and never posted into a box of the attacker's.
  CHECK(tally(t, "actions") > 0);
  CHECK(tally(t, "plant") > 0);
  if (second_user()) CHECK(tally(t, "foreign_posts.box") == 0);
  CHECK(tally(end["root producer of open (0666)"].t, "posted") > 0);
}

}  // namespace adv
