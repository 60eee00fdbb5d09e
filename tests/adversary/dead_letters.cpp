// tests/adversary/dead_letters.cpp - the dead letters surface (adversary.hpp):
// the dead-letter names of root's boxes planted with every kind of file and
// boxes of the attacker's (and, by command, a hard link to a 0666 box of
// root's), and the dead-letter name inside a 0666 box of root's rewritten to
// name root's 0600 canary, while root's producers evict into them and name
// their dead letters again every 50 posts (THE TRUST RULE T4 each time).
#include "adversary.hpp"

namespace adv {

using shmbox::policy;

TEST_CASE("adversary: dead letters - planted at the dead-letter names of root's boxes, and rewritten in a 0666 box to name root's 0600 canary") {
  say_skipped("dead letters");
  const std::string p = shmtest::unique_name("adv-dl") + "-";
  shm_sweeper sweep;
  sweep.prefixes = {"shmbox." + p};
  canary victim(p + "canary");
  counted_box counted(p + "counted", {.capacity = 64, .slot_size = 64});
  // src1: root's 0600 box whose dead-letter box root made (the control: exact);
  // src2: root's 0600 box whose dead-letter box does not exist (the attacker plants at its name);
  // src3: root's 0666 box whose dead-letter box is root's 0666 dl3 (the attacker rewrites the name).
  // No owners: every post after the fourth evicts, and each eviction is forwarded.
  const shmbox::options tiny{.capacity = 4, .slot_size = 128, .overflow = policy::drop_oldest};
  REQUIRE(shmbox::Box::create(p + "dl1", {.capacity = 1u << 16, .slot_size = 256, .overflow = policy::drop_oldest}));
  shmbox::options o = tiny;
  o.dead_letters = p + "dl1";
  REQUIRE(shmbox::Box::create(p + "src1", o));
  o.dead_letters = p + "dl2";
  REQUIRE(shmbox::Box::create(p + "src2", o));
  REQUIRE(shmbox::Box::create(p + "dl3", {.capacity = 1024, .slot_size = 256, .overflow = policy::drop_oldest, .mode = 0666}));
  // src4: root's 0600 box whose dead-letter name holds a hard link the attacker made to root's 0666 dl3.
  o.dead_letters = p + "dl4";
  REQUIRE(shmbox::Box::create(p + "src4", o));
  o.dead_letters = p + "dl3";
  o.mode = 0666;
  REQUIRE(shmbox::Box::create(p + "src3", o));
  std::vector<std::unique_ptr<proc>> roles;
  // Each attaches again every 50 posts: a new Producer names its dead letters again (T4 each time).
  for (const char* b : {"src1", "src2", "src3", "src4"})
    roles.push_back(start_role(std::string("root producer of ") + b, {"produce", p + b, "--reattach-every", "50"}));

  std::vector<std::string> targets{"--plant", "dl:shmbox." + p + "dl2", "--write", "shmbox." + p + "src3",
                                   "--link-target", "shmbox." + p + "dl3", "--actions", "plant,config,lock"};
  if (second_user()) targets.insert(targets.end(), {"--victim", victim.name});
  auto attacker = start_attacker("dead letters", targets);
  attacker->say("plant shmbox." + p + "dl4 dl hardlink_root");
  const std::string linked = attacker->expect("planted ", 10s);
  const auto t = finish_attacker(*attacker, "dead letters");
  auto end = finish_all(roles);
  report("dead letters", end);
  counted.stop_and_check();
  victim.check();
  check_none_late(end);

  auto info_of = [](const std::string& name) {
    auto b = shmbox::Box::inspect(name);
    REQUIRE(b);
    return shmbox::info(*b);
  };
  const auto s1 = info_of(p + "src1"), d1 = info_of(p + "dl1"), s2 = info_of(p + "src2");
  // The control: every eviction forwarded once, all of it in dl1, the identity exact.
  CHECK(identity_problem(s1.count, s1.depth) == "");
  CHECK(s1.count.dropped_oldest > 0);
  CHECK(s1.count.dead_lettered == s1.count.dropped_oldest);
  CHECK(s1.count.dead_letter_failed == 0);
  CHECK(d1.count.posted == s1.count.dead_lettered);
  // src2: every eviction counted once, forwarded or refused; nothing went into a file of the attacker's.
  CHECK(identity_problem(s2.count, s2.depth) == "");
  CHECK(s2.count.dead_lettered + s2.count.dead_letter_failed == s2.count.dropped_oldest);
  CHECK(tally(t, "plant") > 0);
  if (second_user()) {
    CHECK(tally(t, "foreign_posts.dl") == 0);
    // What src2 did forward went into a file of root's: a hard link the attacker made to root's 0666 box.
    if (s2.count.dead_lettered > 0)
      MESSAGE("dead letters: src2 (0600) forwarded " << s2.count.dead_lettered
                                                     << " messages into a file of root's that the attacker linked at its "
                                                        "dead-letter name (plant.hardlink_root="
                                                     << tally(t, "plant.hardlink_root") << ")");
  }
  // src4: its dead letters are root's, mode 0600: they must not land in a box everyone may read.
  const auto s4 = info_of(p + "src4");
  CHECK(identity_problem(s4.count, s4.depth) == "");
  CHECK(s4.count.dead_lettered + s4.count.dead_letter_failed == s4.count.dropped_oldest);
  if (second_user() && linked.find("hardlink_root") != std::string::npos) {
    INFO("the attacker made /dev/shm/shmbox." << p << "dl4 a hard link to root's 0666 box " << p << "dl3 (" << linked << ")");
    CHECK_MESSAGE(s4.count.dead_lettered == 0, "root's 0600 box src4 forwarded " << s4.count.dead_lettered
                                                   << " of its messages into a box everyone may read and write");
  }
  CHECK(tally(end["root producer of src1"].t, "posted") == s1.count.posted);
  CHECK(tally(end["root producer of src2"].t, "posted") == s2.count.posted);
}

}  // namespace adv
