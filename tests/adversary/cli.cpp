// tests/adversary/cli.cpp - the CLI surface (adversary.hpp): root runs the
// CLI's commands, one after another, chosen by the seed, against root's 0666
// boxes (one in use by a root owner and producer, one idle with messages),
// a 0644 box, a 0666 pool, names the second user plants at (boxes, pools,
// bridge statuses) and root's 0600 canary (reading commands only), while
// the second user writes, truncates and locks the 0666 segments and holds
// the 0644 box's bytes. No run is killed by a signal or outlives its own
// timeout plus the slack; each exits 0, 1, 2 or 3 (shmbox(1)).
#include "adversary.hpp"

namespace adv {

TEST_CASE("adversary: cli - every command of root's against written, truncated, locked and planted names") {
  say_skipped("cli");
  const std::string p = shmtest::unique_name("adv-cli") + "-";
  shm_sweeper sweep;
  sweep.prefixes = {"shmbox." + p, "shmbox-pool." + p, "shmbox-bridge." + p};
  canary victim(p + "canary");
  counted_box counted(p + "counted", {.capacity = 64, .slot_size = 64});
  const std::string o1 = p + "o1", o2 = p + "o2", r1 = p + "r1", pool = p + "pp";
  REQUIRE(shmbox::Box::create(o1, {.capacity = 64, .slot_size = 128, .mode = 0666}));
  REQUIRE(shmbox::Box::create(o2, {.capacity = 64, .slot_size = 128, .overflow = shmbox::policy::drop_oldest, .mode = 0666,
                                   .lanes = {{}, {}}}));
  REQUIRE(shmbox::Box::create(r1, {.capacity = 16, .mode = 0644}));
  for (const auto& n : {o2, r1}) {
    auto bx = shmbox::Box::open(n);
    REQUIRE(bx);
    auto pr = shmbox::Producer::attach(*bx);
    REQUIRE(pr);
    for (int i = 0; i < 8; ++i) (void)pr->post("idle message " + std::to_string(i));
  }
  shmbox::pool_options po;
  po.init_count = 0;
  po.max_count = 2;
  po.command = "exec /bin/true";
  po.mode = 0666;
  REQUIRE(shmbox::Pool::create(pool, po));
  std::vector<std::unique_ptr<proc>> roles;
  roles.push_back(start_role("root owner of o1 (0666)", {"own", o1}));
  roles.push_back(start_role("root producer of o1 (0666)", {"produce", o1}));

  std::vector<std::string> targets{"--write", "shmbox." + o1, "--write", "shmbox." + o2, "--write", "shmbox-pool." + pool,
                                   "--read", "shmbox." + r1};
  for (int i = 0; i < 3; ++i)
    targets.insert(targets.end(), {"--plant", "box:shmbox." + p + "n" + std::to_string(i), "--plant",
                                   "pool:shmbox-pool." + p + "q" + std::to_string(i)});
  for (const std::string& s : {o1 + ".export", r1 + ".import"}) targets.insert(targets.end(), {"--plant", "bridge:shmbox-bridge." + s});
  if (second_user()) targets.insert(targets.end(), {"--victim", victim.name});
  auto attacker = start_attacker("cli", targets);

  // {args with X for the box, its own timeout in ms (0: none), whether it may write}
  struct command {
    std::vector<std::string> args;
    long own_ms;
    bool writes;
  };
  const std::vector<command> commands = {
      {{"ls"}, 0, false},
      {{"ls", "--json"}, 0, false},
      {{"stat", "X"}, 0, false},
      {{"stat", "X", "--json"}, 0, false},
      {{"stat", "X", "--prometheus"}, 0, false},
      {{"dump", "X"}, 0, false},
      {{"dump", "X", "--json"}, 0, false},
      {{"verify", "X"}, 0, false},
      {{"verify", "X", "--json"}, 0, false},
      {{"heirs", "X"}, 0, false},
      {{"watch", "X", "--count", "1", "--plain", "--interval", "50"}, 0, false},
      {{"metrics"}, 0, false},
      {{"gc", "--dry-run", "--prefix", p}, 0, false},
      {{"pool", "ls"}, 0, false},
      {{"pool", "ls", "--json"}, 0, false},
      {{"pool", "stat", "P"}, 0, false},
      {{"pool", "stat", "P", "--prometheus"}, 0, false},
      {{"post", "X", "from root", "--timeout", "200"}, 200, true},
      {{"recv", "X", "--timeout", "200"}, 200, true},
      {{"ask", "X", "a question", "--timeout", "300"}, 300, true},
      {{"give-away", "X", "1", "--timeout", "200"}, 200, true},
      {{"pool", "take", "P", "--timeout", "200"}, 200, true},
  };
  const std::vector<std::string> readable{o1, o2, r1, p + "n0", p + "n1", victim.name}, writable{o1, o2, r1, p + "n0", p + "n1", p + "n2"},
      pools{pool, p + "q0", p + "q1"};
  rng r(surface_seed("cli") + 2);
  std::map<std::string, std::uint64_t> runs, exits;
  std::uint64_t slowest = 0;
  std::string slowest_what;
  const auto until = steady::now() + attack_time();
  while (steady::now() < until) {
    const command& c = r.pick(commands);
    std::vector<std::string> args = c.args;
    for (auto& a : args) {
      if (a == "X") a = c.writes ? r.pick(writable) : r.pick(readable);
      if (a == "P") a = r.pick(pools);
    }
    const cli_call run = run_cli(args, ms(c.own_ms) + 30s);
    std::string what;
    for (const auto& a : args) what += (what.empty() ? "" : " ") + a;
    INFO("shmbox " << what << ": exit " << run.code << " after " << run.took.count() << " ms\n" << run.err);
    CHECK_FALSE(run.hung);
    CHECK(run.signal == 0);
    CHECK(run.code >= 0);
    CHECK(run.code <= 3);
    CHECK(run.took < ms(c.own_ms) + 5s);
    if (static_cast<std::uint64_t>(run.took.count()) > slowest) slowest = static_cast<std::uint64_t>(run.took.count()), slowest_what = what;
    ++runs[args[0] + (args[0] == "pool" ? " " + args[1] : "")];
    ++exits["exit " + std::to_string(run.code)];
  }
  const auto t = finish_attacker(*attacker, "cli");
  auto end = finish_all(roles);
  report("cli", end);
  check_none_late(end);
  std::string summary;
  std::uint64_t total = 0;
  for (const auto& [k, v] : runs) summary += " " + k + "=" + std::to_string(v), total += v;
  for (const auto& [k, v] : exits) summary += "; " + k + ": " + std::to_string(v);
  MESSAGE("cli: " << total << " runs of root's:" << summary << "; the slowest " << slowest << " ms (" << slowest_what << ")");
  CHECK(tally(t, "writes") > 0);
  counted.stop_and_check();
  victim.check();
}

}  // namespace adv
