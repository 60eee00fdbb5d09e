// tests/adversary/doorbells.cpp - the doorbells surface (adversary.hpp; the
// doorbell protocol is lib/wake/notify_hub.hpp): two root processes own a
// notify group of boxes each. The second user writes garbage, forged records
// (naming nothing, and naming root's boxes) and floods into the first's
// doorbell (mode 0622: anyone may write it), and plants a file of a random
// kind at the second's doorbell name before that process makes it. Root's
// producer posts into every box all along, and producers killed between
// publishing and waking (fault point producer.before_wake) leave boxes whose
// wake-up nobody sends. Every message is received, every box is empty
// within a deadline of the last post, and each box's counters add up.
#include "adversary.hpp"
#include "wake/notify_hub.hpp"

namespace adv {

TEST_CASE("adversary: doorbells - garbage, forged records and floods in a group owner's doorbell, a file planted at another's") {
  say_skipped("doorbells");
  const std::string p = shmtest::unique_name("adv-bell") + "-";
  shm_sweeper sweep;
  sweep.prefixes = {"shmbox." + p};
  canary victim(p + "canary");
  counted_box counted(p + "counted", {.capacity = 64, .slot_size = 64});
  // Each group: 90 boxes the producer posts into all along, and 10 quiet
  // ones that only the killed producers post into: their wake-up is sent by
  // nobody (the hub's scan must find them: notify_hub.hpp route 3).
  constexpr int kPerGroup = 100, kQuiet = 10;
  std::vector<std::string> a_boxes, b_boxes, all, busy, quiet;
  for (int i = 0; i < 2 * kPerGroup; ++i) {
    const std::string n = p + "g" + std::to_string(i);
    REQUIRE(shmbox::Box::create(n, {.capacity = 64, .slot_size = 64}));
    (i < kPerGroup ? a_boxes : b_boxes).push_back(n);
    all.push_back(n);
    (i % kPerGroup < kPerGroup - kQuiet ? busy : quiet).push_back(n);
  }
  const auto bell_entry = [](const std::string& owned) {
    const std::string hex = owned.substr(owned.find("key=") + 4);
    return shmbox::detail::bell_path(std::strtoull(hex.c_str(), nullptr, 16)).substr(9);  // after "/dev/shm/"
  };

  // A: its doorbell exists; B: told to make it only after the attacker has planted at its name.
  std::vector<std::string> args{params().self, "role", "group"};
  args.insert(args.end(), a_boxes.begin(), a_boxes.end());
  proc a("root group owner A", args);
  const std::string a_owned = a.expect("owned key=", 30s);
  REQUIRE(!a_owned.empty());
  REQUIRE(!a.expect("ready", 30s).empty());
  args = {params().self, "role", "group", "--when-told"};
  args.insert(args.end(), b_boxes.begin(), b_boxes.end());
  proc b("root group owner B", args);
  const std::string b_owned = b.expect("owned key=", 30s);
  REQUIRE(!b_owned.empty());
  sweep.entries = {bell_entry(a_owned), bell_entry(b_owned), bell_entry(b_owned) + ".new"};

  std::vector<std::string> targets{"--bell", bell_entry(a_owned)};
  for (int i = 0; i < 8; ++i) targets.insert(targets.end(), {"--bell-box", all[static_cast<std::size_t>(i * 25)]});
  auto attacker = start_attacker("doorbells", targets);
  attacker->say("plant " + bell_entry(b_owned) + " bell");
  const std::string planted = attacker->expect("planted ", 10s);
  CHECK(planted.find(" failed") == std::string::npos);
  b.say("go");
  REQUIRE(!b.expect("ready", 30s).empty());

  std::vector<std::string> spray_args{"spray"};
  spray_args.insert(spray_args.end(), busy.begin(), busy.end());
  auto spray = start_role("root producer of " + std::to_string(busy.size()) + " busy boxes", spray_args);
  // Producers killed between publishing and waking, one at a time, while the attack goes on.
  rng r(surface_seed("doorbells") + 1);
  int killed = 0;
  const auto until = steady::now() + attack_time();
  auto last_kill = steady::now();
  while (steady::now() < until) {
    proc k("a producer killed before its wake-up", {shmtest::helper_path(), "produce", r.pick(quiet), "9", "1", "--no-wait"},
           {"SHMBOX_FAULT=producer.before_wake:1"});
    const int st = k.wait(20s);
    CHECK(shmtest::killed_by(st, SIGKILL));
    killed += shmtest::killed_by(st, SIGKILL) ? 1 : 0;
    last_kill = steady::now();
    std::this_thread::sleep_for(ms(100 + r.below(400)));
  }
  // Every box emptied by its owner, without another post to wake it: the
  // quiet ones by the scan, within a few of its rounds (kScanNs: 1 s).
  std::size_t left = 0;
  const bool emptied = shmtest::eventually([&] {
    left = 0;
    for (const auto& n : quiet)
      if (auto bx = shmbox::Box::inspect(n); !bx || shmbox::info(*bx).depth != 0) ++left;
    return left == 0;
  }, 30s);
  const auto took = std::chrono::duration_cast<ms>(steady::now() - last_kill);
  INFO(left << " quiet boxes still hold messages");
  CHECK(emptied);
  CHECK(took < 10s);
  const auto t = finish_attacker(*attacker, "doorbells");
  const auto sprayed = spray->finish(30s);
  CHECK(shmtest::eventually([&] {
    for (const auto& n : busy)
      if (auto bx = shmbox::Box::inspect(n); !bx || shmbox::info(*bx).depth != 0) return false;
    return true;
  }, 30s));
  MESSAGE("doorbells: " << quiet.size() << " quiet boxes emptied " << took.count() << " ms after the last of " << killed
                        << " producers killed between publishing and waking; " << busy.size() << " busy boxes; "
                        << tally(t, "bell") << " doorbell writes, " << tally(t, "bell_bytes")
                        << " bytes; planted at B's doorbell name: " << planted);

  std::map<std::string, proc::ending> end{{spray->label(), sprayed}};
  end[a.label()] = a.finish(30s);
  end[b.label()] = b.finish(30s);
  report("doorbells", end);
  check_none_late(end);
  std::uint64_t stored = 0, delivered = 0;
  for (const auto& n : all) {
    auto bx = shmbox::Box::inspect(n);
    REQUIRE(bx);
    const shmbox::box_info i = shmbox::info(*bx);
    INFO(n);
    CHECK(identity_problem(i.count, i.depth) == "");
    stored += i.count.stored;
    delivered += i.count.delivered;
  }
  CHECK(stored == tally(sprayed.t, "stored") + static_cast<std::uint64_t>(killed));
  CHECK(delivered == stored);
  CHECK(tally(end[a.label()].t, "received") + tally(end[b.label()].t, "received") == delivered);
  CHECK(tally(end[a.label()].t, "received_at_end") + tally(end[b.label()].t, "received_at_end") == 0);
  counted.stop_and_check();
  victim.check();
}

}  // namespace adv
