// `shmbox pool ...` driven as a user drives it: bad arguments (exit 2, one
// line that says what to do), create + stat (text, --json, --prometheus), ls,
// rm, take with no member (exit 3), and a pool supervised by `shmbox pool run`
// whose members are `shmbox recv $SHMBOX_BOX --follow` (a member may be any
// program that takes its box): take, give back ok and failed, watch, the POOL
// column of `shmbox ls`, and run stopping on SIGTERM with exit 0.
//
// Each test's pool has its own name (t-<run>-...), and a guard removes it at
// once (stopping its members), its member boxes and its segment, also when the
// test fails.
#include <doctest/doctest.h>
#include <dirent.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "prometheus_check.hpp"
#include "shmbox/shmbox.hpp"
#include "support.hpp"

using json = nlohmann::json;
using namespace std::chrono_literals;

namespace {

using shmtest::cli;  // tests/support/support.hpp

void check_one_line_error(const shmtest::run_result& r) {
  CHECK(r.err.rfind("shmbox: ", 0) == 0);
  CHECK(r.err.find('\n') == r.err.size() - 1);
}

bool exists(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

std::string pool_path(const std::string& pool) { return "/dev/shm/shmbox-pool." + pool; }

// Names in /dev/shm of the member boxes of `pool` (shmbox.<pool>.m<index>.<generation>).
std::vector<std::string> member_segments(const std::string& pool) {
  std::vector<std::string> out;
  const std::string prefix = "shmbox." + pool + ".m";
  if (DIR* d = ::opendir("/dev/shm")) {
    while (const dirent* e = ::readdir(d))
      if (std::string(e->d_name).rfind(prefix, 0) == 0) out.emplace_back(e->d_name);
    ::closedir(d);
  }
  return out;
}

// Removes the pool at once when it goes out of scope (the library stops the
// members); then unlinks what is left of it, and kills a member process that
// outlived that (a worker whose command line names the pool).
struct pool_guard {
  std::string name;
  explicit pool_guard(std::string n) : name(std::move(n)) { clean(); }
  ~pool_guard() { clean(); }
  pool_guard(const pool_guard&) = delete;
  pool_guard& operator=(const pool_guard&) = delete;

  void clean() {
    std::vector<std::uint32_t> workers;
    if (auto info = shmbox::inspect_pool(name))
      for (const auto& m : info->members)
        if (m.worker_pid != 0) workers.push_back(m.worker_pid);
    (void)shmbox::Pool::remove(name, shmbox::removal::immediate, 5s);
    for (const std::uint32_t pid : workers) {
      const std::string cmdline = shmtest::read_text("/proc/" + std::to_string(pid) + "/cmdline");
      if (cmdline.find(name) != std::string::npos) ::kill(static_cast<pid_t>(pid), SIGKILL);
    }
    ::shm_unlink(("/shmbox-pool." + name).c_str());
    for (const auto& seg : member_segments(name)) ::shm_unlink(("/" + seg).c_str());
  }
};

json pool_json(const std::string& pool) {
  const auto r = cli({"pool", "stat", pool, "--json"});
  INFO(r.err);
  REQUIRE(r.code == 0);
  return json::parse(r.out);
}

using shmtest::fields;
using shmtest::lines_of;

// "2026-11-24T11:39:35.123Z "
bool starts_with_utc_stamp(const std::string& l) {
  if (l.size() < 25) return false;
  const std::string shape = "dddd-dd-ddTdd:dd:dd.dddZ ";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 'd' ? !std::isdigit(static_cast<unsigned char>(l[i])) : l[i] != shape[i]) return false;
  }
  return true;
}

// A member command: the CLI receiving from the member's box until SIGTERM
// (what it prints goes nowhere: a member's stdout may be the supervisor's).
std::string recv_member_command() {
  return "exec '" + shmtest::cli_path() + "' recv \"$SHMBOX_BOX\" --follow >/dev/null";
}

}  // namespace

TEST_CASE("cli pool: bad arguments are usage errors (exit 2) with one line that says what to do") {
  pool_guard g(shmtest::unique_name("pbad"));
  struct bad {
    std::vector<std::string> args;
    const char* says;
  };
  const std::vector<bad> cases = {
      {{"pool"}, "shmbox pool --help"},
      {{"pool", "frobnicate"}, "shmbox pool --help"},
      {{"pool", "create", g.name}, "--command is required"},
      {{"pool", "create", g.name, "--command", ""}, "give the members' command"},
      {{"pool", "create", "bad/name", "--command", "true"}, "invalid pool name"},
      {{"pool", "create", std::string(101, 'p'), "--command", "true"}, "1..100 characters"},
      {{"pool", "create", g.name, "--command", "true", "--init", "5", "--max", "4"}, "--init 5 is more than --max 4"},
      {{"pool", "create", g.name, "--command", "true", "--max", "0"}, "outside 1..256"},
      {{"pool", "create", g.name, "--command", "true", "--max", "257"}, "outside 1..256"},
      {{"pool", "create", g.name, "--command", "true", "--queue-max", "65", "--max-clients", "64"}, "--queue-max 65 is more than --max-clients 64"},
      {{"pool", "create", g.name, "--command", "true", "--cull-after", "5 minutes"}, "not a duration"},
      {{"pool", "create", g.name, "--command", "true", "--cull-after", "1sec"}, "not a duration"},
      {{"pool", "create", g.name, "--command", "true", "--start-timeout", "0"}, "outside 1ms..24h"},
      {{"pool", "create", g.name, "--command", "true", "--policy", "fifo"}, "reject, drop-newest, drop-oldest, lifo or block"},
      {{"pool", "create", g.name, "--command", "true", "--mode", "0400"}, "must include 0600"},
      {{"pool", "create", g.name, "--command", "true", "--capacity", "0"}, "outside 1.."},
      {{"pool", "create", g.name, "--command", "true", "--dead-letters", "bad/box"}, "invalid box name"},
      {{"pool", "create", g.name, "--command", std::string(shmbox::kMaxPoolCommand + 1, 'x')}, "put a longer one in a script"},
      {{"pool", "take", g.name, "--timeout", "soon"}, "not a duration"},
      {{"pool", "rm", g.name, "--timeout", "-1"}, "not a duration"},
      {{"pool", "stat", g.name, "--json", "--prometheus"}, "excludes"},
      {{"pool", "watch", g.name, "--interval", "10"}, "outside 50ms..1h"},
      {{"pool", "stat"}, "NAME is required"},
  };
  for (const auto& c : cases) {
    std::string line;
    for (const auto& w : c.args) line += w.substr(0, 40) + " ";
    CAPTURE(line);
    const auto r = cli(c.args);
    CAPTURE(r.err);
    CHECK(r.code == 2);
    check_one_line_error(r);
    CHECK(r.err.find(c.says) != std::string::npos);
  }
  CHECK_FALSE(exists(pool_path(g.name)));  // nothing was created
  // Errors under `pool` point at that command's own help.
  CHECK(cli({"pool", "create", g.name}).err.find("(run 'shmbox pool create --help')") != std::string::npos);
  // A pool that is not there: a failure (1), not a usage error.
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"pool", "stat", g.name}, {"pool", "take", g.name, "--timeout", "0"}, {"pool", "rm", g.name},
        {"pool", "watch", g.name, "--count", "1"}, {"pool", "run", g.name}}) {
    CAPTURE(args[1]);
    const auto r = cli(args, {}, 20s);
    CHECK(r.code == 1);
    check_one_line_error(r);
  }
}

TEST_CASE("cli pool: create, stat (text, --json), ls, a second create fails, rm removes it") {
  pool_guard g(shmtest::unique_name("pstat"));
  const std::string group = shmtest::unique_name("pgroup");
  auto r = cli({"pool", "create", g.name, "--command", "exec sleep 30", "--init", "2", "--max", "6", "--cull-after", "2m",
                "--queue-max", "8", "--max-clients", "32", "--capacity", "128", "--slot-size", "512", "--policy", "drop-oldest",
                "--group", group, "--start-timeout", "3s", "--stop-grace", "250ms", "--health-interval", "10s",
                "--health-timeout", "1500", "--mode", "0660", "--max-lifetime", "1h", "--lifetime-jitter", "5m",
                "--auto-grow", "1"});
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK(r.out.find("created pool '" + g.name + "'") != std::string::npos);
  CHECK(r.out.find("shmbox pool run " + g.name) != std::string::npos);  // what to do next
  CHECK(exists(pool_path(g.name)));

  const json j = pool_json(g.name);
  CHECK(j["name"] == g.name);
  CHECK(j["command"] == "exec sleep 30");
  CHECK(j["group"] == group);
  CHECK(j["dead_letters"].is_null());
  CHECK(j["init"] == 2);
  CHECK(j["max"] == 6);
  CHECK(j["queue_max"] == 8);
  CHECK(j["max_clients"] == 32);
  CHECK(j["cull_after_ms"] == 120000);
  CHECK(j["start_timeout_ms"] == 3000);
  CHECK(j["stop_grace_ms"] == 250);
  CHECK(j["health_interval_ms"] == 10000);
  CHECK(j["health_timeout_ms"] == 1500);
  CHECK(j["max_lifetime_ms"] == 3600000);
  CHECK(j["max_lifetime_jitter_ms"] == 300000);
  CHECK(j["auto_grow_threshold"] == 1);
  CHECK(j["member_box"]["capacity"] == 128);
  CHECK(j["member_box"]["slot_size"] == 512);
  CHECK(j["member_box"]["policy"] == "drop-oldest");
  CHECK(j["mode"] == "0660");
  CHECK(j["uid"] == ::geteuid());
  CHECK(j["segment_bytes"].get<std::uint64_t>() > 0);
  CHECK(j["removing"].is_null());
  CHECK(j["supervisor"]["pid"] == 0);  // nobody runs it yet
  CHECK(j["supervisor"]["alive"] == false);
  CHECK(j["members"].empty());
  for (const char* gauge : {"free", "in_use", "starting", "checking", "stopping", "queued"}) {
    CAPTURE(gauge);
    CHECK(j["gauges"][gauge] == 0);
  }
  REQUIRE(j["counters"].is_object());
  CHECK(j["counters"].size() == sizeof(shmbox::pool_counters) / sizeof(std::uint64_t));  // every counter of shmbox::pool_counters (all 64-bit)
  for (const auto& [key, value] : j["counters"].items()) {
    CAPTURE(key);
    CHECK(value == 0);
  }
  CHECK(j["ledger"] == json{{"holds", true}, {"gap", 0}, {"settled", true}});

  r = cli({"pool", "stat", g.name});
  REQUIRE(r.code == 0);
  for (const std::string& text : {"pool          " + g.name, std::string("exec sleep 30"), std::string("init 2, max 6"),
                                  std::string("none (start one: shmbox pool run"), std::string("cull after    2 min"),
                                  std::string("max lifetime  60 min +/- 5 min"),
                                  std::string("auto grow     when a take leaves 1 free or fewer"),
                                  std::string("128 messages of up to 512 bytes, policy drop-oldest"),
                                  std::string("takes                   0"), std::string("members: none started"),
                                  std::string("ledger                  holds: takes 0 = ok 0 + fail 0 + holder died 0 + revoked 0 + in use 0")}) {
    CAPTURE(text);
    CHECK(r.out.find(text) != std::string::npos);
  }

  // ls: its line, with the gauges and no supervisor; --json.
  r = cli({"pool", "ls"});
  REQUIRE(r.code == 0);
  const auto lines = lines_of(r.out);
  REQUIRE(!lines.empty());
  CHECK(lines[0].rfind("NAME", 0) == 0);
  for (const char* col : {"GROUP", "FREE", "IN-USE", "STARTING", "MAX", "QUEUED", "SUPERVISOR"}) CHECK(lines[0].find(col) != std::string::npos);
  bool listed = false;
  for (const auto& l : lines) {
    const auto f = fields(l);
    if (f.empty() || f[0] != g.name) continue;
    listed = true;
    CAPTURE(l);
    REQUIRE(f.size() >= 8);
    CHECK(f[1] == group);
    CHECK(f[2] == "0");  // free
    CHECK(f[3] == "0");  // in use
    CHECK(f[4] == "0");  // starting
    CHECK(f[5] == "6");  // max
    CHECK(f[6] == "0");  // queued
    CHECK(f[7] == "none");
    CHECK(l.find("NO-SUPERVISOR") != std::string::npos);
  }
  CHECK(listed);
  r = cli({"pool", "ls", "--json"});
  REQUIRE(r.code == 0);
  bool in_json = false;
  for (const auto& e : json::parse(r.out)) {
    if (e["name"] != g.name) continue;
    in_json = true;
    CHECK(e["status"] == "ok");
    CHECK(e["group"] == group);
    CHECK(e["max"] == 6);
    CHECK(e["init"] == 2);
    CHECK(e["free"] == 0);
    CHECK(e["supervisor"]["pid"] == 0);
  }
  CHECK(in_json);

  // A second create of the same name fails (1) and says so; the first is intact.
  r = cli({"pool", "create", g.name, "--command", "true"});
  CHECK(r.code == 1);
  check_one_line_error(r);
  CHECK(pool_json(g.name)["max"] == 6);

  // rm: gone, from ls too; stat then fails.
  r = cli({"pool", "rm", g.name, "--timeout", "5s"});
  INFO(r.err);
  CHECK(r.code == 0);
  CHECK(r.out.find("removed pool '" + g.name + "'") != std::string::npos);
  CHECK_FALSE(exists(pool_path(g.name)));
  CHECK(cli({"pool", "ls"}).out.find(g.name) == std::string::npos);
  r = cli({"pool", "stat", g.name});
  CHECK(r.code == 1);
  check_one_line_error(r);
}

TEST_CASE("cli pool: stat --prometheus is valid exposition text with a family per counter and gauge, labelled by pool") {
  pool_guard g(shmtest::unique_name("pprom"));
  REQUIRE(cli({"pool", "create", g.name, "--command", "exec sleep 30", "--max", "3", "--dead-letters", "dl"}).code == 0);
  const auto r = cli({"pool", "stat", g.name, "--prometheus"});
  INFO(r.err);
  REQUIRE(r.code == 0);
  INFO(r.out);
  promcheck::prometheus_checker pc("pool");
  const auto problems = pc.check(r.out);
  for (const auto& p : problems) CAPTURE(p);
  CHECK(problems.empty());
  promcheck::promtool_check(promcheck::find_promtool(), r.out);
  const auto& s = pc.samples();
  const std::map<std::string, std::string> pool{{"pool", g.name}};
  for (const char* counter :
       {"takes", "returns_ok", "returns_fail", "no_members_at_capacity", "no_members_queue_full", "no_members_starting",
        "take_timeouts", "queue_max_reached", "granted", "killed_free_culled", "killed_free_unhealthy", "killed_in_use",
        "revoked_in_use", "crashed", "start_failures", "starts", "double_returns", "stale_returns", "dead_lettered", "lost"}) {
    const std::string family = std::string("shmbox_pool_") + counter + "_total";
    CAPTURE(family);
    CHECK(pc.type_of(family) == "counter");
    CHECK(promcheck::value_of(s, family, pool) == 0);
  }
  for (const char* state : {"free", "in_use", "starting", "checking", "stopping"})
    CHECK(promcheck::value_of(s, "shmbox_pool_members", {{"pool", g.name}, {"state", state}}) == 0);
  CHECK(pc.type_of("shmbox_pool_members") == "gauge");
  CHECK(promcheck::value_of(s, "shmbox_pool_members_max", pool) == 3);
  CHECK(promcheck::value_of(s, "shmbox_pool_members_init", pool) == 1);
  CHECK(promcheck::value_of(s, "shmbox_pool_queued", pool) == 0);
  CHECK(promcheck::value_of(s, "shmbox_pool_supervisor_alive", pool) == 0);
  CHECK(promcheck::value_of(s, "shmbox_pool_info", {{"pool", g.name}, {"dead_letters", "dl"}, {"group", ""}}) == 1);
  CHECK(promcheck::value_of(s, "shmbox_pool_segment_bytes", pool) > 0);
  CHECK(pc.type_of("shmbox_pool_ledger_gap") == "gauge");
  CHECK(promcheck::value_of(s, "shmbox_pool_ledger_gap", pool) == 0);
}

TEST_CASE("cli pool: take with --timeout 0 and no supervisor is refused (exit 3) with the no-members error") {
  pool_guard g(shmtest::unique_name("ptake0"));
  REQUIRE(cli({"pool", "create", g.name, "--command", "exec sleep 30", "--init", "1", "--max", "2"}).code == 0);
  const auto r = cli({"pool", "take", g.name, "--timeout", "0", "never posted"}, {}, 20s);
  CAPTURE(r.out);
  CAPTURE(r.err);
  CHECK(r.code == 3);
  check_one_line_error(r);
  CHECK(r.out.empty());  // no member: nothing printed, nothing posted
  const json c = pool_json(g.name)["counters"];
  CHECK(c["takes"] == 0);
  // One refusal: no member free and none could be handed over (one is to be started, or max reached).
  CHECK(c["no_members_starting"].get<int>() + c["no_members_at_capacity"].get<int>() == 1);
}

TEST_CASE("cli pool: a corrupt pool segment is listed as unusable; stat fails with one line") {
  const std::string name = shmtest::unique_name("pjunk");
  pool_guard g(name);
  {
    std::ofstream f(pool_path(name), std::ios::binary);
    f << std::string(8192, '\x5a');
  }
  auto r = cli({"pool", "ls"});
  CHECK(r.code == 0);
  bool marked = false;
  for (const auto& l : lines_of(r.out))
    if (l.rfind(name + " ", 0) == 0) marked = l.find("unusable: ") != std::string::npos;
  CHECK(marked);
  r = cli({"pool", "ls", "--json"});
  REQUIRE(r.code == 0);
  bool in_json = false;
  for (const auto& e : json::parse(r.out))
    if (e["name"] == name) in_json = e["status"] == "unusable" && e.contains("error");
  CHECK(in_json);
  for (const std::vector<std::string>& args : {std::vector<std::string>{"pool", "stat", name},
                                               {"pool", "stat", name, "--json"},
                                               {"pool", "stat", name, "--prometheus"}}) {
    r = cli(args);
    CHECK(r.code == 1);
    check_one_line_error(r);
  }
  CHECK(cli({"ls"}).code == 0);  // the box listing is not disturbed by it
}

TEST_CASE("cli pool: run supervises members; take posts into a member's box and gives it back; ls shows the pool; "
          "SIGTERM stops run with exit 0") {
  pool_guard g(shmtest::unique_name("prun"));
  REQUIRE(cli({"pool", "create", g.name, "--command", recv_member_command(), "--init", "1", "--max", "2", "--capacity", "16",
               "--stop-grace", "500ms"})
              .code == 0);
  shmtest::child run({shmtest::cli_path(), "pool", "run", g.name});
  // run's first line: a timestamp, then what it runs.
  const auto first = run.read_line(10s);
  REQUIRE(first.has_value());
  CAPTURE(*first);
  CHECK(starts_with_utc_stamp(*first));
  CHECK(first->find("supervisor process " + std::to_string(run.pid())) != std::string::npos);

  // The supervisor starts the init member; it takes its box: free.
  REQUIRE(shmtest::eventually([&] { return pool_json(g.name)["gauges"]["free"] == 1; }, 20s));
  json j = pool_json(g.name);
  CHECK(j["supervisor"]["pid"] == run.pid());
  CHECK(j["supervisor"]["alive"] == true);
  REQUIRE(j["members"].size() == 1);
  const json m0 = j["members"][0];
  CHECK(m0["state"] == "free");
  const std::string box = m0["box"].get<std::string>();
  CHECK(box.rfind(g.name + ".m", 0) == 0);
  CHECK(m0["worker"]["alive"] == true);

  // take: posts the messages into that box, prints it, gives it back ok.
  auto r = cli({"pool", "take", g.name, "--timeout", "5s", "one", "two"});
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK(r.out.find("box=" + box) != std::string::npos);
  CHECK(r.out.find("member=" + std::to_string(m0["index"].get<int>())) != std::string::npos);
  // Messages from stdin when none are given.
  r = cli({"pool", "take", g.name, "--timeout", "5s"}, "three\nfour\n");
  REQUIRE(r.code == 0);
  j = pool_json(g.name);
  CHECK(j["counters"]["takes"] == 2);
  CHECK(j["counters"]["returns_ok"] == 2);
  CHECK(j["members"][0]["leases"] == 2);
  CHECK(j["ledger"]["holds"] == true);
  // The member (shmbox recv) received the four messages: its box's counters.
  REQUIRE(shmtest::eventually([&] {
    const auto st = cli({"stat", box, "--json"});
    return st.code == 0 && json::parse(st.out)["counters"]["delivered"] == 4;
  }));

  // ls: the member box's row ends with the pool's name; --json says it too.
  r = cli({"ls"});
  REQUIRE(r.code == 0);
  const auto lines = lines_of(r.out);
  REQUIRE(!lines.empty());
  CHECK(fields(lines[0]).back() == "POOL");
  bool row = false;
  for (std::size_t k = 0; k < lines.size(); ++k) {
    const bool starts = lines[k].rfind(box + " ", 0) == 0;
    const bool alone = lines[k] == box && k + 1 < lines.size();  // a long name on its own line
    if (!starts && !alone) continue;
    const std::string cols = starts ? lines[k] : lines[k + 1];
    CAPTURE(cols);
    // The pool's name, or (when the other columns leave no room) its start and "~".
    const std::string last = fields(cols).back();
    row = last == g.name || (last.size() >= 4 && last.back() == '~' && g.name.rfind(last.substr(0, last.size() - 1), 0) == 0);
  }
  CHECK(row);
  r = cli({"ls", "--json"});
  REQUIRE(r.code == 0);
  bool member_json = false;
  for (const auto& e : json::parse(r.out))
    if (e["name"] == box) member_json = e["pool"] == g.name;
  CHECK(member_json);

  // pool ls: a live supervisor, one free member.
  r = cli({"pool", "ls"});
  bool pool_row = false;
  for (const auto& l : lines_of(r.out)) {
    const auto f = fields(l);
    if (f.size() >= 9 && f[0] == g.name) pool_row = f[2] == "1" && f[7] == std::to_string(run.pid()) && f[8] == "alive";
  }
  CHECK(pool_row);

  // stat's member table.
  r = cli({"pool", "stat", g.name});
  REQUIRE(r.code == 0);
  CHECK(r.out.find("INDEX STATE") != std::string::npos);
  CHECK(r.out.find(box) != std::string::npos);

  // watch without a terminal: a header, then a line per refresh.
  r = cli({"pool", "watch", g.name, "--count", "2", "--interval", "50ms"}, {}, 20s);
  REQUIRE(r.code == 0);
  const auto w = lines_of(r.out);
  REQUIRE(w.size() == 3);
  CHECK(w[0].rfind("# shmbox pool watch: pool=" + g.name, 0) == 0);
  for (std::size_t k = 1; k < 3; ++k) {
    CAPTURE(w[k]);
    CHECK(starts_with_utc_stamp(w[k]));
    CHECK(w[k].find(" pool=" + g.name + " free=1 in_use=0") != std::string::npos);
    CHECK(w[k].find(" takes=2 ") != std::string::npos);
    CHECK(w[k].find(" supervisor_status=alive ") != std::string::npos);
  }

  // --fail: the member is stopped and replaced (a new generation).
  r = cli({"pool", "take", g.name, "--timeout", "5s", "--fail", "five"});
  REQUIRE(r.code == 0);
  CHECK(pool_json(g.name)["counters"]["returns_fail"] == 1);
  REQUIRE(shmtest::eventually([&] {
    const json p = pool_json(g.name);
    for (const auto& m : p["members"])
      if (m["state"] == "free" && m["box"] != box) return true;
    return false;
  }, 20s));

  // SIGTERM: run stops with exit 0; its log lines all carry a timestamp.
  run.kill(SIGTERM);
  const int st = run.wait(20s);
  CHECK_FALSE(run.timed_out());
  CHECK(shmtest::exited_with(st, 0));
  for (std::optional<std::string> l = run.read_line(1s); l; l = run.read_line(1s)) {
    CAPTURE(*l);
    CHECK(starts_with_utc_stamp(*l));
  }

  // rm --now: the members stop, the pool and its boxes go.
  r = cli({"pool", "rm", g.name, "--now", "--timeout", "10s"}, {}, 30s);
  INFO(r.err);
  CHECK(r.code == 0);
  CHECK_FALSE(exists(pool_path(g.name)));
  CHECK(shmtest::eventually([&] { return member_segments(g.name).empty(); }, 10s));
}

TEST_CASE("cli pool: its one member held: take is refused (3) at once or after --timeout; rm times out (3) and then "
          "refuses takes (1); the give-back ends the removal and run exits 0") {
  pool_guard g(shmtest::unique_name("pheld"));
  REQUIRE(cli({"pool", "create", g.name, "--command", recv_member_command(), "--init", "1", "--max", "1"}).code == 0);
  shmtest::child run({shmtest::cli_path(), "pool", "run", g.name});
  REQUIRE(run.read_line(10s).has_value());
  REQUIRE(shmtest::eventually([&] { return pool_json(g.name)["gauges"]["free"] == 1; }, 20s));
  // A take that holds the member while its stdin stays open.
  shmtest::child holder({shmtest::cli_path(), "pool", "take", g.name, "--timeout", "5s"}, {}, true);
  REQUIRE(shmtest::eventually([&] { return pool_json(g.name)["gauges"]["in_use"] == 1; }, 20s));
  CHECK(pool_json(g.name)["members"][0]["taker"]["pid"] == holder.pid());

  auto r = cli({"pool", "take", g.name, "--timeout", "0", "x"});
  CHECK(r.code == 3);  // none free, max reached
  check_one_line_error(r);
  r = cli({"pool", "take", g.name, "--timeout", "200ms", "x"});
  CHECK(r.code == 3);  // none before the timeout
  check_one_line_error(r);
  json c = pool_json(g.name)["counters"];
  CHECK(c["no_members_at_capacity"] == 1);
  CHECK(c["take_timeouts"] == 1);

  // Graceful removal waits for the member in use: timed out, exit 3, still there and marked.
  r = cli({"pool", "rm", g.name, "--timeout", "300ms"});
  CHECK(r.code == 3);
  check_one_line_error(r);
  CHECK(r.err.find("--now") != std::string::npos);  // what to do
  CHECK(exists(pool_path(g.name)));
  CHECK(pool_json(g.name)["removing"] == "graceful");
  bool marked = false;
  for (const auto& l : lines_of(cli({"pool", "ls"}).out))
    if (l.rfind(g.name + " ", 0) == 0) marked = l.find("REMOVING(graceful)") != std::string::npos;
  CHECK(marked);
  r = cli({"pool", "take", g.name, "--timeout", "0", "x"});
  CHECK(r.code == 1);  // no new takes: a failure, not a refusal to retry
  check_one_line_error(r);

  // The holder posts and gives back: the member stops, the pool goes, run exits 0.
  holder.write_stdin("last\n");
  holder.close_stdin();
  CHECK(shmtest::exited_with(holder.wait(20s), 0));
  CHECK(shmtest::eventually([&] { return !exists(pool_path(g.name)); }, 20s));
  CHECK(shmtest::exited_with(run.wait(20s), 0));
  CHECK_FALSE(run.timed_out());
}

TEST_CASE("cli pool: cull stops idle members now, down to --init, and says how many; with no supervisor it fails saying "
          "what to run; rm-group removes every pool of a group") {
  const std::string group = shmtest::unique_name("pgrp");
  pool_guard g(shmtest::unique_name("pxcull"));
  REQUIRE(cli({"pool", "create", g.name, "--command", recv_member_command(), "--init", "0", "--max", "1", "--group", group})
              .code == 0);
  auto r = cli({"pool", "cull", g.name});
  CHECK(r.code == 1);
  check_one_line_error(r);
  CHECK(r.err.find("shmbox pool run " + g.name) != std::string::npos);
  shmtest::child run({shmtest::cli_path(), "pool", "run", g.name});
  REQUIRE(run.read_line(10s).has_value());
  // --init 0: the take starts a member; given back, it stays free (no --cull-after).
  r = cli({"pool", "take", g.name, "--timeout", "20s", "x"}, {}, 30s);
  INFO(r.err);
  REQUIRE(r.code == 0);
  REQUIRE(shmtest::eventually([&] { return pool_json(g.name)["gauges"]["free"] == 1; }, 20s));
  r = cli({"pool", "cull", g.name, "--idle", "1h"});
  CHECK(r.code == 0);
  CHECK(r.out == "culled 0 members of pool '" + g.name + "'\n");
  r = cli({"pool", "cull", g.name, "--timeout", "20s"}, {}, 30s);
  INFO(r.err);
  CHECK(r.code == 0);
  CHECK(r.out == "culled 1 member of pool '" + g.name + "'\n");
  CHECK(pool_json(g.name)["counters"]["killed_free_culled"] == 1);
  CHECK(shmtest::eventually([&] { return member_segments(g.name).empty(); }, 20s));
  r = cli({"pool", "rm-group", group + "-none"});
  CHECK(r.code == 0);
  CHECK(r.out == "no pool of group '" + group + "-none': nothing to remove\n");
  r = cli({"pool", "rm-group", group, "--timeout", "20s"}, {}, 30s);
  INFO(r.err);
  CHECK(r.code == 0);
  CHECK(r.out == "removed pool '" + g.name + "'\n");
  CHECK_FALSE(exists(pool_path(g.name)));
  CHECK(shmtest::exited_with(run.wait(20s), 0));
}

TEST_CASE("cli pool: reconfigure changes a running pool within its --table-size and prints the values in force; a lowered --max "
          "that would stop a member in use is refused (3)") {
  pool_guard g(shmtest::unique_name("prcfg"));
  REQUIRE(cli({"pool", "create", g.name, "--command", recv_member_command(), "--init", "0", "--max", "1", "--table-size", "3"}).code == 0);
  auto r = cli({"pool", "reconfigure", g.name});
  CHECK(r.code == 2);
  check_one_line_error(r);
  r = cli({"pool", "reconfigure", g.name, "--max", "4"});
  CHECK(r.code == 1);
  check_one_line_error(r);
  CHECK(r.err.find("table-size") != std::string::npos);
  r = cli({"pool", "reconfigure", g.name, "--auto-grow", "1", "--no-auto-grow"});
  CHECK(r.code == 2);
  // No supervisor: set, and said so.
  r = cli({"pool", "reconfigure", g.name, "--max", "2", "--cull-after", "1m"});
  INFO(r.err);
  CHECK(r.code == 0);
  CHECK(r.out == "pool '" + g.name + "': init 0, max 2 (table 3), cull after 1 min, queue max 16, auto-grow off; no supervisor runs: "
                 "members start and stop when one does ('shmbox pool run " + g.name + "')\n");
  shmtest::child run({shmtest::cli_path(), "pool", "run", g.name});
  REQUIRE(run.read_line(10s).has_value());
  r = cli({"pool", "reconfigure", g.name, "--init", "2", "--timeout", "20s"}, {}, 30s);
  INFO(r.err);
  CHECK(r.code == 0);
  CHECK(r.out == "pool '" + g.name + "': init 2, max 2 (table 3), cull after 1 min, queue max 16, auto-grow off\n");
  CHECK(shmtest::eventually([&] { return pool_json(g.name)["gauges"]["free"] == 2; }, 20s));
  const auto j = pool_json(g.name);
  CHECK(j["init"] == 2);
  CHECK(j["max"] == 2);
  CHECK(j["table_size"] == 3);
  CHECK(j["reconfigurations"] == 2);
  // Both members held by a taker: --max 1 would stop one in use.
  shmtest::child a({shmtest::helper_path(), "pool-take", g.name, "20000", "--hold"}, {}, true);
  shmtest::child b({shmtest::helper_path(), "pool-take", g.name, "20000", "--hold"}, {}, true);
  REQUIRE(a.read_line(20s).value_or("").rfind("took", 0) == 0);
  REQUIRE(b.read_line(20s).value_or("").rfind("took", 0) == 0);
  r = cli({"pool", "reconfigure", g.name, "--max", "1"});
  CHECK(r.code == 3);
  check_one_line_error(r);
  CHECK(r.err.find("not_enough_free") != std::string::npos);
  CHECK(pool_json(g.name)["max"] == 2);
  a.write_stdin("go\n");
  b.write_stdin("go\n");
  CHECK(shmtest::exited_with(a.wait(20s), 0));
  CHECK(shmtest::exited_with(b.wait(20s), 0));
  r = cli({"pool", "rm", g.name, "--timeout", "20s"}, {}, 30s);
  CHECK(r.code == 0);
  CHECK(shmtest::exited_with(run.wait(20s), 0));
}

TEST_CASE("cli pool: the manual page documents every pool command and every option its --help shows") {
  const std::string man = shmtest::manual_text();
  REQUIRE_MESSAGE(!man.empty(), "SHMBOX_MANPAGE (set by tests/meson.build) names the manual page");
  const auto top = cli({"pool", "--help"});
  CHECK(top.code == 0);
  for (const std::string c : {"create", "run", "ls", "stat", "watch", "rm", "rm-group", "cull", "reconfigure", "take"}) {
    CAPTURE(c);
    CHECK(top.out.find("  " + c + " ") != std::string::npos);
    CHECK(man.find("shmbox pool " + c) != std::string::npos);
    const auto h = cli({"pool", c, "--help"});
    CHECK(h.code == 0);
    CHECK(h.out.find("Example: shmbox pool " + c) != std::string::npos);
    for (const std::string& opt : shmtest::long_options(h.out)) {
      CAPTURE(opt);
      CHECK(man.find(opt) != std::string::npos);
    }
  }
}
