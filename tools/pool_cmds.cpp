// tools/pool_cmds.cpp - `shmbox pool create|run|ls|stat|watch|rm|take`: pools
// of members (include/shmbox/pool.hpp is the contract).
//
// Exit codes as in the rest of the CLI: 0 success, 1 failure, 2 usage error
// (the parser), 3 refused: `pool take` found no member (no_members_*, or none
// before its --timeout), `pool rm` timed out with the pool still there.
//
// `pool run` supervises until SIGINT or SIGTERM (or the pool's removal) and
// prints the supervisor's log lines to stdout, each "<UTC time> <event>" in
// one write(2), so a reader of a pipe sees them at once and whole.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "commands.hpp"
#include "shmbox/shmbox.hpp"

namespace shmbox_cli {
namespace {

using json = nlohmann::ordered_json;

// A refusal, not a failure: nothing was wrong, there was no member (yet), or
// the wait ran out.
bool is_refusal(const std::error_code& ec) {
  return ec == shmbox::errc::no_members_starting || ec == shmbox::errc::no_members_at_capacity ||
         ec == shmbox::errc::no_members_queue_full || ec == shmbox::errc::timed_out;
}

int fail_or_refuse(const std::error_code& ec) {
  say(shmbox::explain(ec));
  return is_refusal(ec) ? kExitRefused : kExitFail;
}

// "never" (0), "250 ms", "5 s", "1.5 s", "2 min".
std::string duration_cell(std::chrono::milliseconds d, const char* zero = "0") {
  const long long ms = d.count();
  if (ms == 0) return zero;
  if (ms < 1000) return std::to_string(ms) + " ms";
  if (ms % 60'000 == 0) return std::to_string(ms / 60'000) + " min";
  if (ms % 1000 == 0) return std::to_string(ms / 1000) + " s";
  return format("%.1f s", static_cast<double>(ms) / 1000.0);
}

std::string alive_text(std::uint32_t pid, bool alive) {
  if (pid == 0) return "none";
  return std::to_string(pid) + (alive ? " alive" : " dead");
}

std::string text_or(const std::string& s, const char* none) { return s.empty() ? std::string(none) : s; }

// ---- create -------------------------------------------------------------------

int pool_create(const pool_args& a) {
  const pool_create_args& c = a.create;
  shmbox::pool_options o;
  o.init_count = c.init;
  o.max_count = c.max;
  o.cull_after = std::chrono::milliseconds(c.cull_after_ms);
  o.queue_max = c.queue_max;
  o.max_clients = c.max_clients;
  o.command = c.command;
  o.member = box_options(c.member);  // dead_letters is the pool's, below
  o.group = c.group;
  o.dead_letters = c.dead_letters;
  o.start_timeout = std::chrono::milliseconds(c.start_timeout_ms);
  o.stop_grace = std::chrono::milliseconds(c.stop_grace_ms);
  o.health_interval = std::chrono::milliseconds(c.health_interval_ms);
  o.health_timeout = std::chrono::milliseconds(c.health_timeout_ms);
  o.max_lifetime = std::chrono::milliseconds(c.max_lifetime_ms);
  o.max_lifetime_jitter = std::chrono::milliseconds(c.lifetime_jitter_ms);
  o.auto_grow_threshold = c.auto_grow;
  o.table_size = c.table_size;
  o.init_command = c.init_command;
  o.mode = o.member.mode;
  auto r = shmbox::Pool::create(a.name, o);
  if (!r) return fail(r.error());
  std::cout << "created pool '" << a.name << "': " << o.init_count << " to " << o.max_count << " members running '"
            << escaped(o.command) << "', each with a box of " << o.member.capacity << " x " << o.member.slot_size
            << " bytes; start them with 'shmbox pool run " << a.name << "'\n";
  return kExitOk;
}

// ---- run ----------------------------------------------------------------------

std::atomic<bool> g_stop_supervising{false};
static_assert(std::atomic<bool>::is_always_lock_free, "set from a signal handler");

void on_stop_supervising(int) { g_stop_supervising.store(true); }
void on_sigpipe(int) {}  // a log reader that went away: EPIPE, not the supervisor's death

// Caught, not ignored: a caught signal is back to its default in the members
// the supervisor starts (execve resets handlers, not SIG_IGN).
void catch_signal(int sig, void (*fn)(int)) {
  struct sigaction sa {};
  sa.sa_handler = fn;
  sigemptyset(&sa.sa_mask);
  ::sigaction(sig, &sa, nullptr);
}

// "<UTC time> <text>\n" in one write: whole lines, at once, on any stdout.
void log_line(std::string_view text) {
  const std::string l = utc_stamp(std::chrono::system_clock::now()) + " " + escaped(text) + "\n";
  (void)write_all(STDOUT_FILENO, l.data(), l.size());
}

int pool_run(const pool_args& a) {
  catch_signal(SIGINT, on_stop_supervising);
  catch_signal(SIGTERM, on_stop_supervising);
  catch_signal(SIGPIPE, on_sigpipe);
  auto pool = shmbox::Pool::open(a.name, {.any_owner = a.any_owner});
  if (!pool) return fail(pool.error());
  log_line("pool '" + a.name + "': supervisor process " + std::to_string(::getpid()) +
           " running (SIGINT or SIGTERM stops it)");
  const auto r = pool->supervise(
      {.stop = &g_stop_supervising, .log = log_line, .command = a.run_command, .dead_letters = a.run_dead_letters,
       .init_command = a.run_init_command});
  if (!r && r.error() != shmbox::errc::pool_removed) {
    log_line("pool '" + a.name + "': supervisor failed: " + shmbox::explain(r.error()));
    return fail(r.error());
  }
  log_line(g_stop_supervising.load() ? "pool '" + a.name + "': supervisor stopped by signal"
                                     : "pool '" + a.name + "': removed; supervisor done");
  return kExitOk;
}

// ---- ls -----------------------------------------------------------------------

json supervisor_json(const shmbox::pool_info& i) {
  return json{{"pid", i.supervisor_pid},
              {"pid_ns", i.supervisor_pid_ns},
              {"alive", i.supervisor_alive},
              {"epoch", i.supervisor_epoch},
              {"standbys", i.standbys}};
}

json gauges_json(const shmbox::pool_info& i) {
  return json{{"free", i.free},         {"in_use", i.in_use}, {"starting", i.starting}, {"checking", i.checking},
              {"stopping", i.stopping}, {"queued", i.queued}, {"clients", i.clients}};
}

}  // namespace

std::vector<listed_pool> inspect_all_pools(std::error_code& list_error) {
  std::vector<listed_pool> pools;
  auto names = shmbox::Pool::list();
  if (!names) {
    list_error = names.error();
    return pools;
  }
  for (const auto& n : *names) {
    auto info = shmbox::inspect_pool(n);
    if (!info && info.error() == shmbox::errc::not_found) continue;  // removed since list()
    listed_pool p{n, std::nullopt, info.error(), info ? std::string() : shmbox::explain(info.error())};
    if (info) p.info = std::move(*info);
    pools.push_back(std::move(p));
  }
  return pools;
}

namespace {

int pool_ls(bool as_json) {
  std::error_code list_error;
  const std::vector<listed_pool> pools = inspect_all_pools(list_error);
  if (list_error) return fail(list_error);
  if (as_json) {
    json all = json::array();
    for (const auto& p : pools) {
      if (!p.info) {
        all.push_back(json{{"name", p.name}, {"status", "unusable"}, {"error", p.sentence}});
        continue;
      }
      const shmbox::pool_info& i = *p.info;
      json j{{"name", i.name},
             {"status", "ok"},
             {"group", i.group.empty() ? json(nullptr) : json(i.group)},
             {"init", i.init_count},
             {"max", i.max_count}};
      j.update(gauges_json(i));
      j["supervisor"] = supervisor_json(i);
      j["removing"] = i.removing.empty() ? json(nullptr) : json(i.removing);
      all.push_back(std::move(j));
    }
    std::cout << all.dump(2, ' ', false, json::error_handler_t::replace) << "\n";
    return kExitOk;
  }
  if (pools.empty()) return kExitOk;
  std::size_t name_w = 4, group_w = 5, sup_w = 10;
  for (const auto& p : pools) {
    name_w = std::max(name_w, p.name.size());
    if (!p.info) continue;
    group_w = std::max(group_w, p.info->group.size());
    sup_w = std::max(sup_w, alive_text(p.info->supervisor_pid, p.info->supervisor_alive).size());
  }
  const int nw = static_cast<int>(name_w), gw = static_cast<int>(group_w), sw = static_cast<int>(sup_w);
  std::printf("%-*s %-*s %5s %6s %8s %4s %6s %-*s %s\n", nw, "NAME", gw, "GROUP", "FREE", "IN-USE", "STARTING", "MAX",
              "QUEUED", sw, "SUPERVISOR", "MARKS");
  for (const auto& p : pools) {
    if (!p.info) {
      // A name from /dev/shm may hold any bytes: escaped, as every string the CLI prints from outside.
      std::printf("%-*s unusable: %s\n", nw, escaped(p.name).c_str(), escaped(p.sentence).c_str());
      continue;
    }
    const shmbox::pool_info& i = *p.info;
    std::string marks;
    if (!i.removing.empty()) marks = "REMOVING(" + i.removing + ")";
    if (i.supervisor_pid == 0 || !i.supervisor_alive) marks += std::string(marks.empty() ? "" : " ") + "NO-SUPERVISOR";
    std::string line = format("%-*s %-*s %5u %6u %8u %4u %6u %-*s %s", nw, escaped(i.name).c_str(), gw,
                              text_or(printable(i.group), "-").c_str(), i.free, i.in_use, i.starting, i.max_count, i.queued,
                              sw, alive_text(i.supervisor_pid, i.supervisor_alive).c_str(), marks.c_str());
    while (!line.empty() && line.back() == ' ') line.pop_back();
    std::printf("%s\n", line.c_str());
  }
  std::fflush(stdout);
  return kExitOk;
}

// ---- stat ---------------------------------------------------------------------

json members_json(const shmbox::pool_info& i) {
  json members = json::array();
  for (const auto& m : i.members)
    members.push_back(json{{"index", m.index},
                           {"state", std::string(shmbox::to_string(m.state))},
                           {"box", m.box},
                           {"generation", m.generation},
                           {"worker", json{{"pid", m.worker_pid}, {"pid_ns", m.worker_pid_ns}, {"alive", m.worker_alive}}},
                           {"taker", json{{"pid", m.taker_pid}, {"pid_ns", m.taker_pid_ns}, {"alive", m.taker_alive}}},
                           {"leases", m.leases},
                           {"idle_ms", m.idle.count()},
                           {"stopping_why", m.stopping_why.empty() ? json(nullptr) : json(m.stopping_why)},
                           {"depth", m.depth}});
  return members;
}

json counters_json(const shmbox::pool_counters& c) {
  json j = json::object();
  for (const pool_counter_field& f : pool_counter_fields()) j[f.key] = c.*f.field;
  return j;
}

// The ledger (pool.hpp): "holds" true, false (a gap in a settled snapshot), or null (the table kept changing).
json ledger_json(const shmbox::pool_info& i) {
  return json{{"holds", i.ledger_gap == 0 ? json(true) : i.ledger_settled ? json(false) : json(nullptr)},
              {"gap", i.ledger_gap},
              {"settled", i.ledger_settled}};
}

// One line: whether takes == returns_ok + returns_fail + killed_in_use + revoked_in_use + in use.
std::string ledger_text(const shmbox::pool_info& i) {
  const shmbox::pool_counters& c = i.count;
  const std::string terms = format("ok %llu + fail %llu + holder died %llu + revoked %llu + in use %u",
                                   static_cast<unsigned long long>(c.returns_ok), static_cast<unsigned long long>(c.returns_fail),
                                   static_cast<unsigned long long>(c.killed_in_use), static_cast<unsigned long long>(c.revoked_in_use),
                                   i.in_use);
  const auto takes = static_cast<unsigned long long>(c.takes);
  if (i.ledger_gap == 0) return format("holds: takes %llu = %s", takes, terms.c_str());
  const std::string gap = format("%lld", static_cast<long long>(i.ledger_gap));
  if (!i.ledger_settled)
    return "not checked: takes or give backs kept changing the table (gap " + gap + " in flight); read it again";
  return format("OFF BY %s: takes %llu != %s", gap.c_str(), takes, terms.c_str());
}

json pool_json(const shmbox::pool_info& i) {
  return json{{"name", i.name},
              {"group", i.group.empty() ? json(nullptr) : json(i.group)},
              {"command", i.command},
              {"init_command", i.init_command.empty() ? json(nullptr) : json(i.init_command)},
              {"dead_letters", i.dead_letters.empty() ? json(nullptr) : json(i.dead_letters)},
              {"init", i.init_count},
              {"max", i.max_count},
              {"table_size", i.table_size},
              {"reconfigurations", i.reconfigurations},
              {"queue_max", i.queue_max},
              {"max_clients", i.max_clients},
              {"cull_after_ms", i.cull_after.count()},
              {"start_timeout_ms", i.start_timeout.count()},
              {"stop_grace_ms", i.stop_grace.count()},
              {"health_interval_ms", i.health_interval.count()},
              {"health_timeout_ms", i.health_timeout.count()},
              {"max_lifetime_ms", i.max_lifetime.count()},
              {"max_lifetime_jitter_ms", i.max_lifetime_jitter.count()},
              {"auto_grow_threshold", i.auto_grow_threshold ? json(*i.auto_grow_threshold) : json(nullptr)},
              {"member_box", json{{"capacity", i.member_capacity},
                                  {"slot_size", i.member_slot_size},
                                  {"policy", std::string(shmbox::to_string(i.member_overflow))}}},
              {"gauges", gauges_json(i)},
              {"supervisor", supervisor_json(i)},
              {"removing", i.removing.empty() ? json(nullptr) : json(i.removing)},
              {"segment_bytes", i.segment_bytes},
              {"mode", octal(i.mode)},
              {"uid", i.uid},
              {"members", members_json(i)},
              {"counters", counters_json(i.count)},
              {"ledger", ledger_json(i)}};
}

std::string worker_cell(const shmbox::member_info& m) {
  if (m.worker_pid == 0) return m.worker_alive ? "? alive" : "-";
  return std::to_string(m.worker_pid) + (m.worker_alive ? " alive" : " dead");
}

std::string taker_cell(const shmbox::member_info& m) {
  if (m.state != shmbox::member_state::in_use || m.taker_pid == 0) return "-";
  return std::to_string(m.taker_pid) + (m.taker_alive ? " alive" : " dead");
}

std::string idle_cell(const shmbox::member_info& m) {
  return m.state == shmbox::member_state::free ? duration_cell(m.idle, "0 ms") : std::string("-");
}

void print_members(const shmbox::pool_info& i) {
  if (i.members.empty()) {
    std::printf("members: none started%s\n", i.supervisor_alive ? "" : " (no supervisor: run 'shmbox pool run NAME')");
    return;
  }
  std::size_t box_w = 3;
  for (const auto& m : i.members) box_w = std::max(box_w, m.box.size());
  const int bw = static_cast<int>(box_w);
  std::printf("%-5s %-9s %-*s %-12s %-12s %8s %9s %8s  %s\n", "INDEX", "STATE", bw, "BOX", "WORKER", "TAKER", "LEASES", "IDLE",
              "DEPTH", "STOPPING-WHY");
  for (const auto& m : i.members) {
    std::string line = format("%-5u %-9s %-*s %-12s %-12s %8llu %9s %8llu  %s", m.index,
                              std::string(shmbox::to_string(m.state)).c_str(), bw, printable(m.box).c_str(),
                              worker_cell(m).c_str(), taker_cell(m).c_str(), static_cast<unsigned long long>(m.leases),
                              idle_cell(m).c_str(), static_cast<unsigned long long>(m.depth),
                              m.stopping_why.empty() ? "-" : printable(m.stopping_why).c_str());
    std::printf("%s\n", line.c_str());
  }
}

int pool_stat(const pool_args& a, bool as_json, bool prometheus) {
  auto info = shmbox::inspect_pool(a.name);
  if (!info) return fail(info.error());
  const shmbox::pool_info& i = *info;
  if (prometheus) {
    std::cout << prometheus_pool_text(i);
    return kExitOk;
  }
  if (as_json) {
    std::cout << pool_json(i).dump(2, ' ', false, json::error_handler_t::replace) << "\n";
    return kExitOk;
  }
  std::cout << "pool          " << i.name << "\n"
            << "command       " << escaped(i.command) << "\n"
            << "init command  " << text_or(escaped(i.init_command), "none") << "\n"
            << "group         " << text_or(escaped(i.group), "none") << "\n"
            << "members       " << i.free << " free, " << i.in_use << " in use, " << i.starting << " starting, "
            << i.checking << " checking, " << i.stopping << " stopping (init " << i.init_count << ", max " << i.max_count
            << (i.table_size != i.max_count ? ", table " + std::to_string(i.table_size) : std::string())
            << (i.reconfigurations != 0 ? "; reconfigured " + std::to_string(i.reconfigurations) + "x" : std::string()) << ")\n"
            << "queue         " << i.queued << " waiting (at most " << i.queue_max << ")\n"
            << "clients       " << i.clients << " (at most " << i.max_clients << ")\n"
            << "supervisor    "
            << (i.supervisor_pid == 0 ? std::string("none (start one: shmbox pool run " + i.name + ")")
                                      : "pid " + std::to_string(i.supervisor_pid) + (i.supervisor_alive ? " (alive)" : " (dead)"))
            << ", epoch " << i.supervisor_epoch << ", " << i.standbys << " standing by\n"
            << "removing      " << text_or(i.removing, "no") << "\n"
            << "member box    " << i.member_capacity << " messages of up to " << i.member_slot_size << " bytes, policy "
            << shmbox::to_string(i.member_overflow) << "\n"
            << "dead letters  " << (i.dead_letters.empty() ? std::string("none (counted as lost)") : "-> box '" + escaped(i.dead_letters) + "'")
            << "\n"
            << "cull after    " << duration_cell(i.cull_after, "never") << "\n"
            << "max lifetime  "
            << (i.max_lifetime.count() == 0 ? std::string("none")
                                            : duration_cell(i.max_lifetime) + (i.max_lifetime_jitter.count() == 0
                                                                                   ? std::string()
                                                                                   : " +/- " + duration_cell(i.max_lifetime_jitter)))
            << "\n"
            << "auto grow     "
            << (i.auto_grow_threshold ? "when a take leaves " + std::to_string(*i.auto_grow_threshold) + " free or fewer"
                                      : std::string("no"))
            << "\n"
            << "start timeout " << duration_cell(i.start_timeout) << "\n"
            << "stop grace    " << duration_cell(i.stop_grace) << "\n"
            << "health        "
            << (i.health_interval.count() == 0 ? std::string("no checks")
                                               : "every " + duration_cell(i.health_interval) + ", answer within " +
                                                     duration_cell(i.health_timeout))
            << "\n"
            << "segment       /dev/shm/shmbox-pool." << i.name << ", " << i.segment_bytes << " bytes, mode " << octal(i.mode)
            << ", uid " << i.uid << "\n";
  std::cout.flush();
  print_members(i);
  for (const pool_counter_field& f : pool_counter_fields())
    std::printf("%-23s %llu\n", f.key, static_cast<unsigned long long>(i.count.*f.field));
  std::printf("%-23s %s\n", "ledger", ledger_text(i).c_str());
  std::fflush(stdout);
  return kExitOk;
}

// ---- watch --------------------------------------------------------------------

std::uint64_t refused_of(const shmbox::pool_counters& c) {
  return c.no_members_at_capacity + c.no_members_queue_full + c.no_members_starting + c.take_timeouts;
}

std::uint64_t replaced_of(const shmbox::pool_counters& c) {
  return c.returns_fail + c.killed_free_unhealthy + c.killed_in_use + c.crashed + c.start_failures + c.expired_free +
         c.expired_returned;
}

class pool_view final : public live_view {
 public:
  pool_view(std::string name, shmbox::pool_info first) : name_(std::move(name)), cur_{std::move(first), clock::now(), wall::now()} {}

  std::string header(std::uint32_t interval_ms) override {
    const shmbox::pool_info& i = cur_.info;
    return "# shmbox pool watch: pool=" + i.name + " init=" + std::to_string(i.init_count) + " max=" +
           std::to_string(i.max_count) + " queue_max=" + std::to_string(i.queue_max) + " group=" + text_or(printable(i.group), "-") +
           " interval_ms=" + std::to_string(interval_ms) + "\n";
  }

  void refresh() override {
    auto info = shmbox::inspect_pool(name_);
    if (!first_) prev_ = cur_;
    first_ = false;
    if (info) {
      cur_ = {std::move(*info), clock::now(), wall::now()};
      gone_.clear();
    } else {
      // Keep the last state seen; say why there is no newer one.
      cur_.at = clock::now();
      cur_.when = wall::now();
      gone_ = info.error() == shmbox::errc::not_found ? "removed" : "unreadable";
    }
  }

  std::string line() override {
    const shmbox::pool_info& i = cur_.info;
    const shmbox::pool_counters& c = i.count;
    std::string l = utc_stamp(cur_.when);
    auto kv = [&l](const char* k, const std::string& v) { l.append(" ").append(k).append("=").append(v); };
    kv("pool", i.name);
    kv("free", std::to_string(i.free));
    kv("in_use", std::to_string(i.in_use));
    kv("starting", std::to_string(i.starting));
    kv("checking", std::to_string(i.checking));
    kv("stopping", std::to_string(i.stopping));
    kv("max", std::to_string(i.max_count));
    kv("queued", std::to_string(i.queued));
    kv("takes/s", rate(&shmbox::pool_counters::takes));
    kv("returns/s", rate_of([](const shmbox::pool_counters& k) { return k.returns_ok + k.returns_fail; }));
    kv("refused/s", rate_of(refused_of));
    kv("takes", std::to_string(c.takes));
    kv("returns_ok", std::to_string(c.returns_ok));
    kv("returns_fail", std::to_string(c.returns_fail));
    kv("refused", std::to_string(refused_of(c)));
    kv("replaced", std::to_string(replaced_of(c)));
    kv("culled", std::to_string(c.killed_free_culled));
    kv("starts", std::to_string(c.starts));
    kv("supervisor", std::to_string(i.supervisor_pid));
    kv("supervisor_status", i.supervisor_pid == 0 ? "none" : i.supervisor_alive ? "alive" : "dead");
    kv("epoch", std::to_string(i.supervisor_epoch));
    kv("standbys", std::to_string(i.standbys));
    kv("removing", text_or(i.removing, "no"));
    kv("segment", gone_.empty() ? "present" : gone_);
    return l + "\n";
  }

  std::vector<view_line> frame(std::uint32_t interval_ms, bool utf8) override {
    const shmbox::pool_info& i = cur_.info;
    const shmbox::pool_counters& c = i.count;
    std::vector<view_line> out;
    auto add = [&out](std::string t, const char* attr = nullptr) { out.push_back({std::move(t), attr}); };
    add(title_line("shmbox pool watch  " + i.name, cur_.when, interval_ms), "\x1b[1m");
    std::string sub = format("members %u..%u  queue max %u  group %s", i.init_count, i.max_count, i.queue_max,
                             text_or(printable(i.group), "-").c_str());
    sub.append(sub.size() < 68 ? 68 - sub.size() : 1, ' ');
    add(sub + "  q: quit");
    if (!gone_.empty()) add(" " + std::string(gone_ == "removed" ? "REMOVED" : "UNREADABLE") + ": showing the last state seen ", "\x1b[7m");
    if (!i.removing.empty()) add(" REMOVING (" + i.removing + "): no new takes ", "\x1b[7m");
    add("");
    add(format("%-9s %5s  %s", "IN USE", format("%u/%u", i.in_use, i.max_count).c_str(), bar(i.in_use, i.max_count, 32, utf8).c_str()));
    add(format("%-9s %5u   starting %u  checking %u  stopping %u  queued %u", "FREE", i.free, i.starting, i.checking,
               i.stopping, i.queued));
    add("");
    add(format("%-12s %12s %16s", "LEASES", "PER SECOND", "TOTAL"), "\x1b[1m");
    auto row = [&](const char* what, const std::string& per_s, std::uint64_t total, const std::string& detail) {
      add(format("%-12s %12s %16llu   %s", what, per_s.c_str(), static_cast<unsigned long long>(total), detail.c_str()));
    };
    row("takes", rate(&shmbox::pool_counters::takes), c.takes,
        format("granted to waiters %llu", static_cast<unsigned long long>(c.granted)));
    row("returned ok", rate(&shmbox::pool_counters::returns_ok), c.returns_ok, "");
    row("failed", rate(&shmbox::pool_counters::returns_fail), c.returns_fail, "");
    row("refused", rate_of(refused_of), refused_of(c),
        format("at max %llu  queue full %llu  starting %llu  timed out %llu",
               static_cast<unsigned long long>(c.no_members_at_capacity), static_cast<unsigned long long>(c.no_members_queue_full),
               static_cast<unsigned long long>(c.no_members_starting), static_cast<unsigned long long>(c.take_timeouts)));
    add(format("%-12s started %llu  culled %llu  crashed %llu  did not start %llu", "members",
               static_cast<unsigned long long>(c.starts), static_cast<unsigned long long>(c.killed_free_culled),
               static_cast<unsigned long long>(c.crashed), static_cast<unsigned long long>(c.start_failures)));
    add(format("%-12s unhealthy %llu  holder died %llu  dead-lettered %llu  lost %llu", "",
               static_cast<unsigned long long>(c.killed_free_unhealthy), static_cast<unsigned long long>(c.killed_in_use),
               static_cast<unsigned long long>(c.dead_lettered), static_cast<unsigned long long>(c.lost)));
    add(format("%-12s expired %llu (at give-back %llu)  grown ahead %llu", "",
               static_cast<unsigned long long>(c.expired_free + c.expired_returned),
               static_cast<unsigned long long>(c.expired_returned), static_cast<unsigned long long>(c.auto_grow_starts)));
    add("");
    add(format("%-10s %s  epoch %llu  %u standing by", "SUPERVISOR", alive_text(i.supervisor_pid, i.supervisor_alive).c_str(),
               static_cast<unsigned long long>(i.supervisor_epoch), i.standbys),
        i.supervisor_alive ? nullptr : "\x1b[7m");
    add("");
    add(format("%-5s %-9s %-12s %-12s %8s %9s %8s  %s", "INDEX", "STATE", "WORKER", "TAKER", "LEASES", "IDLE", "DEPTH", "WHY"),
        "\x1b[1m");
    for (const auto& m : i.members)
      add(format("%-5u %-9s %-12s %-12s %8llu %9s %8llu  %s", m.index, std::string(shmbox::to_string(m.state)).c_str(),
                 worker_cell(m).c_str(), taker_cell(m).c_str(), static_cast<unsigned long long>(m.leases),
                 idle_cell(m).c_str(), static_cast<unsigned long long>(m.depth), printable(m.stopping_why).c_str()));
    return out;
  }

 private:
  using clock = std::chrono::steady_clock;
  using wall = std::chrono::system_clock;
  struct sample {
    shmbox::pool_info info;
    clock::time_point at;
    wall::time_point when;
  };

  template <class Of>
  std::string rate_of(Of of) const {
    if (!prev_) return "-";
    const double s = std::chrono::duration<double>(cur_.at - prev_->at).count();
    return rate_string(per_second(of(cur_.info.count), of(prev_->info.count), s));
  }
  std::string rate(std::uint64_t shmbox::pool_counters::*field) const {
    return rate_of([field](const shmbox::pool_counters& k) { return k.*field; });
  }

  std::string name_;
  sample cur_;
  std::optional<sample> prev_;
  bool first_ = true;
  std::string gone_;  // "", "removed", "unreadable"
};

int pool_watch(const parsed& a) {
  auto info = shmbox::inspect_pool(a.pool.name);
  if (!info) return fail(info.error());
  pool_view view(a.pool.name, std::move(*info));
  return run_live_view(view, a.watch);
}

// ---- rm -----------------------------------------------------------------------

int pool_rm(const pool_args& a) {
  const auto how = a.now ? shmbox::removal::immediate : shmbox::removal::graceful;
  const auto r = shmbox::Pool::remove(a.name, how, std::chrono::milliseconds(a.timeout_ms));
  if (!r) {
    if (r.error() != shmbox::errc::timed_out) return fail(r.error());
    say(shmbox::explain(r.error()) + "; see 'shmbox pool stat " + a.name + "', or stop them at once with 'shmbox pool rm " +
        a.name + " --now'");
    return kExitRefused;
  }
  std::cout << "removed pool '" << a.name << "'\n";
  return kExitOk;
}

int pool_rm_group(const pool_args& a) {
  const auto how = a.now ? shmbox::removal::immediate : shmbox::removal::graceful;
  auto r = shmbox::Pool::remove_group(a.name, how, std::chrono::milliseconds(a.timeout_ms));
  if (!r) {
    if (r.error() != shmbox::errc::timed_out) return fail(r.error());
    say(shmbox::explain(r.error()) + "; see 'shmbox pool ls', or stop them at once with 'shmbox pool rm-group " + a.name + " --now'");
    return kExitRefused;
  }
  if (r->empty()) std::cout << "no pool of group '" << a.name << "': nothing to remove\n";
  for (const auto& n : *r) std::cout << "removed pool '" << n << "'\n";
  return kExitOk;
}

// ---- cull ---------------------------------------------------------------------

int pool_cull(const pool_args& a) {
  auto pool = shmbox::Pool::open(a.name, {.any_owner = a.any_owner});
  if (!pool) return fail(pool.error());
  auto n = pool->cull(std::chrono::milliseconds(a.idle_ms), std::chrono::milliseconds(a.timeout_ms));
  if (!n) {
    if (n.error() != shmbox::errc::timed_out) return fail(n.error());
    say(shmbox::explain(n.error()));
    return kExitRefused;
  }
  std::cout << "culled " << *n << " member" << (*n == 1 ? "" : "s") << " of pool '" << a.name << "'\n";
  return kExitOk;
}

// ---- reconfigure --------------------------------------------------------------

int pool_reconfigure(const pool_args& a) {
  shmbox::pool_changes c;
  c.init_count = a.new_init;
  c.max_count = a.new_max;
  c.queue_max = a.new_queue_max;
  if (a.new_cull_after_ms) c.cull_after = std::chrono::milliseconds(*a.new_cull_after_ms);
  c.auto_grow_threshold = a.no_auto_grow ? std::optional<std::uint32_t>(shmbox::kNoAutoGrow) : a.new_auto_grow;
  if (!c.init_count && !c.max_count && !c.queue_max && !c.cull_after && !c.auto_grow_threshold) {
    say("pool reconfigure: nothing to change: give --init, --max, --cull-after, --queue-max, --auto-grow or --no-auto-grow");
    return kExitUsage;
  }
  auto pool = shmbox::Pool::open(a.name, {.any_owner = a.any_owner});
  if (!pool) return fail(pool.error());
  if (auto r = pool->reconfigure(c, std::chrono::milliseconds(a.timeout_ms)); !r) {
    say(shmbox::explain(r.error()));
    return r.error() == shmbox::errc::refused || r.error() == shmbox::errc::timed_out ? kExitRefused : kExitFail;
  }
  auto info = shmbox::inspect_pool(a.name);
  if (!info) return fail(info.error());
  std::cout << "pool '" << a.name << "': init " << info->init_count << ", max " << info->max_count << " (table " << info->table_size
            << "), cull after " << duration_cell(info->cull_after, "never") << ", queue max " << info->queue_max << ", auto-grow "
            << (info->auto_grow_threshold ? std::to_string(*info->auto_grow_threshold) : std::string("off"))
            << (info->supervisor_alive ? "" : "; no supervisor runs: members start and stop when one does ('shmbox pool run " + a.name + "')")
            << "\n";
  return kExitOk;
}

// ---- take ---------------------------------------------------------------------

int pool_take(const pool_args& a) {
  auto pool = shmbox::Pool::open(a.name, {.any_owner = a.any_owner});
  if (!pool) return fail(pool.error());
  auto lease = pool->take(std::chrono::milliseconds(a.timeout_ms));
  if (!lease) return fail_or_refuse(lease.error());
  const shmbox::lease_token t = lease->token();
  const int posted = post_messages(lease->producer(), lease->box(), a.messages, {});
  std::cout << "member=" << t.member << " box=" << lease->box() << " generation=" << t.generation
            << " worker_pid=" << lease->worker_pid() << std::endl;
  const shmbox::return_status st = lease->give_back(a.fail ? shmbox::outcome::fail : shmbox::outcome::ok);
  if (st != shmbox::return_status::ok) {
    say("pool '" + a.name + "': giving back member " + std::to_string(t.member) + ": " + std::string(shmbox::to_string(st)) +
        (st == shmbox::return_status::error ? " (" + shmbox::explain(pool->last_error()) + ")" : std::string()));
    return kExitFail;
  }
  return posted;
}

}  // namespace

std::map<std::string, std::string> pool_of_boxes() {
  std::map<std::string, std::string> owner_pool;
  std::error_code list_error;  // no pools to show: every box is "-"
  for (const auto& p : inspect_all_pools(list_error))
    if (p.info)
      for (const auto& m : p.info->members)
        if (!m.box.empty()) owner_pool[m.box] = p.name;
  return owner_pool;
}

int cmd_pool(const parsed& a) {
  switch (a.cmd) {
    case command::pool_create: return pool_create(a.pool);
    case command::pool_run: return pool_run(a.pool);
    case command::pool_ls: return pool_ls(a.json);
    case command::pool_stat: return pool_stat(a.pool, a.json, a.prometheus);
    case command::pool_watch: return pool_watch(a);
    case command::pool_rm: return pool_rm(a.pool);
    case command::pool_rm_group: return pool_rm_group(a.pool);
    case command::pool_cull: return pool_cull(a.pool);
    case command::pool_reconfigure: return pool_reconfigure(a.pool);
    case command::pool_take: return pool_take(a.pool);
    default: return kExitUsage;
  }
}

}  // namespace shmbox_cli
