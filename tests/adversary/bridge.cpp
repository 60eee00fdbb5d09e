// tests/adversary/bridge.cpp - the bridge status surface (adversary.hpp;
// bridge/status_layout.hpp, THE TRUST RULE T3): root's boxes a and b, with
// (when shmbox-bridge and nats-server are here) root's export bridge of a and
// import bridge into b through a JetStream stream of a nats-server on
// loopback, while the second user plants every kind of file, and status
// images whose every counter is kHostileValue, at the status names root's
// readers look at (the roles no bridge runs: a.import, b.export, and both of
// a box c with none), and holds the bytes of the live statuses (mode 0644)
// and of the boxes shared. Root's `stat` (text, --json, --prometheus) and
// `metrics` answer within their deadline and never show a planted counter;
// the bridges carry every message from a to b once, and end on SIGTERM.
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include "../cli/http_client.hpp"
#include "adversary.hpp"

namespace adv {

namespace {

std::string executable_or_empty(const std::string& path) { return !path.empty() && ::access(path.c_str(), X_OK) == 0 ? path : ""; }

}  // namespace

TEST_CASE("adversary: bridge status - planted status segments and held status bytes beside root's export and import bridges") {
  say_skipped("bridge status");
  const std::string p = shmtest::unique_name("adv-br") + "-";
  shm_sweeper sweep;
  sweep.prefixes = {"shmbox." + p, "shmbox-bridge." + p};
  canary victim(p + "canary");
  counted_box counted(p + "counted", {.capacity = 64, .slot_size = 64});
  const std::string a = p + "a", b = p + "b", c = p + "c";
  for (const auto& n : {a, b, c}) REQUIRE(shmbox::Box::create(n, {.capacity = 256, .slot_size = 128, .mode = 0644}));

  const std::string bridge = executable_or_empty(shmtest::env_or("SHMBOX_BRIDGE", ""));
  const std::string nats = executable_or_empty(shmtest::env_or("SHMBOX_NATS_SERVER", "/usr/sbin/nats-server"));
  const bool live = !bridge.empty() && !nats.empty();
  if (!live) MESSAGE("bridge status: skipped the live bridges (no SHMBOX_BRIDGE or nats-server): root's readers only");
  const std::string store = (std::filesystem::temp_directory_path() / (p + "nats")).string();
  struct store_guard {
    std::string dir;
    ~store_guard() {
      std::error_code ignored;
      std::filesystem::remove_all(dir, ignored);
    }
  } remove_store{store};
  std::unique_ptr<proc> server, exporter, importer;
  std::vector<std::unique_ptr<proc>> roles;
  if (live) {
    const int port = httptest::free_port();
    const std::string url = "nats://127.0.0.1:" + std::to_string(port);
    server = std::make_unique<proc>("nats-server", std::vector<std::string>{nats, "-js", "-a", "127.0.0.1", "-p", std::to_string(port), "-sd", store});
    REQUIRE(shmtest::eventually([&] { return server->err_text().find("Server is ready") != std::string::npos; }, 20s));
    exporter = std::make_unique<proc>("root export bridge of a",
                                      std::vector<std::string>{bridge, "export", a, "--nats", url, "--stream", p + "s", "--subject", p + "x", "--create-stream"});
    REQUIRE_MESSAGE(!exporter->expect("ready export", 30s).empty(), exporter->err_text());
    importer = std::make_unique<proc>("root import bridge into b", std::vector<std::string>{bridge, "import", "--nats", url, "--stream", p + "s",
                                                                                         "--durable", p + "d", "--into", b});
    REQUIRE_MESSAGE(!importer->expect("ready import", 30s).empty(), importer->err_text());
    roles.push_back(start_role("root owner of b", {"own", b}));
    roles.push_back(start_role("root producer of a", {"produce", a, "--pause-us", "2000"}));
  }

  std::vector<std::string> targets{"--read", "shmbox-bridge." + a + ".export", "--read", "shmbox-bridge." + b + ".import",
                                   "--read", "shmbox." + a, "--read", "shmbox." + b};
  for (const std::string& s : {a + ".import", b + ".export", c + ".import", c + ".export"})
    targets.insert(targets.end(), {"--plant", "bridge:shmbox-bridge." + s});
  if (second_user()) targets.insert(targets.end(), {"--victim", victim.name});
  auto attacker = start_attacker("bridge status", targets);

  // Root's readers, all along: bounded, alive, never showing a planted counter.
  const std::string hostile = std::to_string(kHostileValue);
  std::map<std::string, std::uint64_t> runs;
  std::uint64_t slowest = 0;
  const auto until = steady::now() + attack_time();
  for (std::uint64_t i = 0; steady::now() < until; ++i) {
    const std::string& box = i % 3 == 0 ? a : i % 3 == 1 ? b : c;
    std::vector<std::string> args;
    switch (i % 4) {
      case 0: args = {"stat", box}; break;
      case 1: args = {"stat", box, "--json"}; break;
      case 2: args = {"stat", box, "--prometheus"}; break;
      default: args = {"metrics"};
    }
    const cli_call r = run_cli(args, 30s);
    INFO("shmbox " << args[0] << " " << (args.size() > 1 ? args[1] : "") << ": exit " << r.code << "\n" << r.err);
    CHECK_FALSE(r.hung);
    CHECK(r.signal == 0);
    CHECK(r.code == 0);
    if (second_user()) CHECK(r.out.find(hostile) == std::string::npos);  // one uid: its own statuses are trusted (T3)
    slowest = std::max<std::uint64_t>(slowest, static_cast<std::uint64_t>(r.took.count()));
    ++runs[args[0]];
  }
  const auto t = finish_attacker(*attacker, "bridge status");
  CHECK(slowest < 10'000);
  CHECK(tally(t, "plant.status_image") > 0);

  if (live) {
    // Everything a's producer stored reaches b, once (the bridges' exactly-once).
    auto end = std::map<std::string, proc::ending>{};
    end["root producer of a"] = roles[1]->finish(30s);
    const std::uint64_t stored = tally(end["root producer of a"].t, "stored");
    std::uint64_t in_b = 0;
    CHECK(shmtest::eventually([&] {
      auto bx = shmbox::Box::inspect(b);
      in_b = bx ? shmbox::info(*bx).count.stored : 0;
      return in_b >= stored;
    }, 30s));
    end["root owner of b"] = roles[0]->finish(30s);
    report("bridge status", end);
    check_none_late(end);
    CHECK(in_b == stored);
    CHECK(tally(end["root owner of b"].t, "received") == stored);
    for (proc* br : {exporter.get(), importer.get()}) {
      br->signal(SIGTERM);
      const int st = br->wait(30s);
      INFO(br->label() << ": " << br->all_lines() << "\nstderr: " << br->err_text());
      CHECK_FALSE(br->hung());
      CHECK(shmtest::exited_with(st, 0));
    }
    MESSAGE("bridge status: " << stored << " messages from a to b through the bridges, each once, beside the attack");
  }
  MESSAGE("bridge status: " << runs["stat"] << " stat and " << runs["metrics"] << " metrics runs of root's, the slowest "
                            << slowest << " ms, none showing a planted counter");
  counted.stop_and_check();
  victim.check();
}

}  // namespace adv
