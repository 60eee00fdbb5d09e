// tests/adversary/exporter.cpp - the exporter surface (adversary.hpp):
// `shmbox metrics --listen` as root, scraped all along by two clients of
// root's, while the second user writes, truncates and locks the 0666 boxes
// and pool it exports, holds the bytes of a 0644 box, plants every kind of
// file (and bridge statuses whose every counter is kHostileValue) at box,
// pool and bridge status names, and sends malformed, slow and idle requests.
// Every scrape is answered within its deadline with a valid exposition
// (tests/cli/prometheus_check.hpp, the strict checker) that never shows a
// planted counter for a box of root's; every malformed request is answered or closed (none
// stalls); the exporter ends on SIGTERM with exit 0.
#include <mutex>
#include <thread>

#include "../cli/http_client.hpp"
#include "../cli/prometheus_check.hpp"
#include "adversary.hpp"

namespace adv {

namespace {

// What the scrapers saw (their threads do no doctest checks: the test does, after).
struct scrapes {
  std::vector<std::string> roots_boxes;  // box="..." labels a planted counter must never carry
  std::mutex mu;
  std::uint64_t valid = 0, invalid = 0, slowest_ms = 0;
  std::vector<std::string> problems;  // the first few
  void add(const httptest::response& r, ms took) {
    std::vector<std::string> found;
    if (r.status != 200) found.push_back("status " + std::to_string(r.status) + " " + r.error);
    else
      for (auto& p : promcheck::prometheus_checker("").check(r.body)) found.push_back(p);
    // A planted status counter shown for a box of root's (the attacker's own
    // boxes may show the attacker's statuses: T3 trusts a box's owner with them).
    for (const auto& l : shmtest::lines_of(r.body))
      if (l.find(std::to_string(kHostileValue)) != std::string::npos)
        for (const auto& b : roots_boxes)
          if (l.find("box=\"" + b + "\"") != std::string::npos) found.push_back("a planted counter shown: " + l);
    std::lock_guard<std::mutex> lock(mu);
    slowest_ms = std::max<std::uint64_t>(slowest_ms, static_cast<std::uint64_t>(took.count()));
    (found.empty() ? valid : invalid) += 1;
    for (auto& f : found)
      if (problems.size() < 8) problems.push_back(std::move(f));
  }
};

}  // namespace

TEST_CASE("adversary: exporter - scrapes of metrics --listen while every segment it exports is written, and malformed and slow requests") {
  say_skipped("exporter");
  const std::string p = shmtest::unique_name("adv-exp") + "-";
  shm_sweeper sweep;
  sweep.prefixes = {"shmbox." + p, "shmbox-pool." + p, "shmbox-bridge." + p};
  canary victim(p + "canary");
  counted_box counted(p + "counted", {.capacity = 64, .slot_size = 64});
  for (int i = 0; i < 3; ++i)
    REQUIRE(shmbox::Box::create(p + "w" + std::to_string(i), {.capacity = 64, .slot_size = 128, .mode = 0666,
                                                               .lanes = {{}, {}, {.overflow = shmbox::policy::lifo}}}));
  REQUIRE(shmbox::Box::create(p + "r0", {.capacity = 16, .mode = 0644}));
  shmbox::pool_options po;
  po.init_count = 0;
  po.max_count = 2;
  po.command = "exec /bin/true";
  po.mode = 0666;
  REQUIRE(shmbox::Pool::create(p + "pp", po));
  std::vector<std::unique_ptr<proc>> roles;
  roles.push_back(start_role("root owner of w0 (0666)", {"own", p + "w0"}));
  roles.push_back(start_role("root producer of w0 (0666)", {"produce", p + "w0"}));

  proc exporter("root exporter (metrics --listen)", {shmtest::cli_path(), "metrics", "--listen", "127.0.0.1:0"});
  const std::string line = exporter.expect("listening on http://127.0.0.1:", 20s);
  REQUIRE(!line.empty());
  const int port = std::atoi(line.c_str() + std::string("listening on http://127.0.0.1:").size());
  REQUIRE(port > 0);

  std::vector<std::string> targets{"--http", std::to_string(port), "--read", "shmbox." + p + "r0", "--write",
                                   "shmbox-pool." + p + "pp"};
  for (int i = 0; i < 3; ++i) targets.insert(targets.end(), {"--write", "shmbox." + p + "w" + std::to_string(i)});
  for (int i = 0; i < 4; ++i) targets.insert(targets.end(), {"--plant", "box:shmbox." + p + "n" + std::to_string(i)});
  for (int i = 0; i < 2; ++i) targets.insert(targets.end(), {"--plant", "pool:shmbox-pool." + p + "q" + std::to_string(i)});
  for (const char* b : {"w0.export", "w1.import", "r0.export", "n0.import"})
    targets.insert(targets.end(), {"--plant", "bridge:shmbox-bridge." + p + b});
  if (second_user()) targets.insert(targets.end(), {"--victim", victim.name});
  auto attacker = start_attacker("exporter", targets);

  scrapes seen;
  if (second_user())  // one uid: a status of its own at a box's name is trusted (T3)
    for (const char* b : {"w0", "w1", "w2", "r0", "counted", "canary"}) seen.roots_boxes.push_back(p + b);
  std::atomic<bool> stop{false};
  std::vector<std::thread> scrapers;
  for (int k = 0; k < 2; ++k)
    scrapers.emplace_back([&] {
      while (!stop) {
        const auto t0 = steady::now();
        const auto r = httptest::get(port, "/metrics", 10s);
        seen.add(r, std::chrono::duration_cast<ms>(steady::now() - t0));
      }
    });
  const auto t = finish_attacker(*attacker, "exporter");
  stop = true;
  for (auto& s : scrapers) s.join();

  const auto last = httptest::get(port, "/metrics", 10s);  // it lives on
  CHECK(last.status == 200);
  exporter.signal(SIGTERM);
  const int st = exporter.wait(20s);
  INFO("exporter stderr: " << exporter.err_text());
  CHECK_FALSE(exporter.hung());
  CHECK(shmtest::exited_with(st, 0));
  auto end = finish_all(roles);
  report("exporter", end);
  check_none_late(end);

  std::string problems;
  for (const auto& pr : seen.problems) problems += "\n  " + pr;
  INFO("the first problems:" << problems);
  CHECK(seen.valid > 0);
  CHECK(seen.invalid == 0);
  CHECK(seen.slowest_ms < 10'000);
  CHECK(tally(t, "http_sent") > 0);
  CHECK(tally(t, "http_stalled") == 0);
  std::uint64_t answered = 0;
  for (const auto& [k, v] : t)
    if (k.rfind("http.", 0) == 0) answered += v;
  MESSAGE("exporter: " << seen.valid << " of " << seen.valid + seen.invalid << " scrapes valid (the slowest " << seen.slowest_ms
                       << " ms) under " << tally(t, "writes") << " hostile writes, " << tally(t, "truncate") << " truncations, "
                       << tally(t, "plant") << " planted files; " << answered << " malformed requests answered, "
                       << tally(t, "http_closed") << " closed, " << tally(t, "http_held") << " held idle or slow");
  counted.stop_and_check();
  victim.check();
}

}  // namespace adv
