// tools/cli_args.cpp - the shmbox command line's parser (CLI11).
#include "cli_args.hpp"

#include <CLI/CLI.hpp>
#include <charconv>
#include <cstdio>
#include <iostream>
#include <limits>
#include <utility>

#include "shmbox/shmbox.hpp"

namespace shmbox_cli {

namespace {
// C escapes for backslash, newline, CR, tab and the bytes that can act on a
// terminal (C0 controls, DEL, UTF-8's C1 controls C2 80-9F); other bytes of
// 0x80 and above are kept (`keep_text`: UTF-8 text stays readable) or escaped too.
std::string c_escaped(std::string_view text, bool keep_text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    const auto next = i + 1 < text.size() ? static_cast<unsigned char>(text[i + 1]) : 0;
    const bool c1 = keep_text && c == 0xc2 && next >= 0x80 && next <= 0x9f;
    char esc[16];
    switch (c) {
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c1) {
          std::snprintf(esc, sizeof esc, "\\x%02x\\x%02x", c, next);
          out += esc;
          ++i;
        } else if ((c >= 0x20 && c < 0x7f) || (keep_text && c >= 0x80)) {
          out += static_cast<char>(c);
        } else {
          std::snprintf(esc, sizeof esc, "\\x%02x", c);
          out += esc;
        }
    }
  }
  return out;
}
}  // namespace

std::string message_line(std::string_view text) { return c_escaped(text, true); }
std::string escaped(std::string_view text) { return c_escaped(text, false); }

void say(std::string_view line) { std::cerr << "shmbox: " << escaped(line) << "\n"; }

std::optional<listen_address> parse_listen_address(std::string_view text) {
  const auto colon = text.rfind(':');
  if (colon == std::string_view::npos) return std::nullopt;
  std::string_view host = text.substr(0, colon);
  const std::string_view port = text.substr(colon + 1);
  if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string_view::npos) return std::nullopt;
  listen_address out;
  const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), out.port, 10);
  if (ec != std::errc{} || end != port.data() + port.size() || out.port > 65535) return std::nullopt;
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);  // [IPv6]: hex digits, ':' and '.' (an IPv4 tail)
    if (host.empty() || host.find(':') == std::string_view::npos ||
        host.find_first_not_of("0123456789abcdefABCDEF:.") != std::string_view::npos)
      return std::nullopt;
  } else if (host.empty() || host.size() > 253 ||
             host.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-") != std::string_view::npos) {
    return std::nullopt;  // also an IPv6 address without brackets (its ':')
  }
  out.host = std::string(host);
  return out;
}

namespace {

// A decimal number in [lo, hi], digits only: no sign, no spaces, no 0x or 0
// (octal) prefixes; leading zeros are read as decimal (010 is 10). The
// string is rewritten to its plain decimal form, so that CLI11's own
// conversion (which would read 010 as octal and 0x10 as hex) sees only that:
// add it with ->transform (a ->check validator works on a copy).
CLI::Validator decimal(std::uint64_t lo, std::uint64_t hi) {
  return CLI::Validator(
      [lo, hi](std::string& s) -> std::string {
        const std::string range = std::to_string(lo) + ".." + std::to_string(hi);
        if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos)
          return "'" + s + "' is not a decimal number " + range + " (digits only: no sign, spaces or 0x)";
        std::uint64_t v = 0;
        const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v, 10);
        if (ec != std::errc{} || end != s.data() + s.size() || v < lo || v > hi) return s + " is outside " + range;
        s = std::to_string(v);
        return {};
      },
      "N in " + std::to_string(lo) + ".." + std::to_string(hi));
}


// "1h", "2m", "1500ms", "2s"; "0" for zero: how a duration in ms is shown in help and errors.
std::string duration_text(std::uint64_t ms) {
  if (ms == 0) return "0";
  if (ms % 3'600'000 == 0) return std::to_string(ms / 3'600'000) + "h";
  if (ms % 60'000 == 0) return std::to_string(ms / 60'000) + "m";
  if (ms % 1000 == 0) return std::to_string(ms / 1000) + "s";
  return std::to_string(ms) + "ms";
}

// A duration in [lo_ms, hi_ms]: digits with an optional unit, ms (the
// default, as in every other option of the CLI), s, m or h: 250, 250ms, 2s,
// 1m. The string is rewritten to plain milliseconds for CLI11's conversion
// (add it with ->transform).
CLI::Validator duration_ms(std::uint64_t lo, std::uint64_t hi) {
  return CLI::Validator(
      [lo, hi](std::string& s) -> std::string {
        const std::string range = duration_text(lo) + ".." + duration_text(hi);
        const auto digits = s.find_first_not_of("0123456789");
        const std::string unit = digits == std::string::npos ? "ms" : s.substr(digits);
        std::uint64_t scale = 0;
        if (unit == "ms") scale = 1;
        else if (unit == "s") scale = 1000;
        else if (unit == "m") scale = 60'000;
        else if (unit == "h") scale = 3'600'000;
        std::uint64_t v = 0;
        const auto [end, ec] = std::from_chars(s.data(), s.data() + (digits == std::string::npos ? s.size() : digits), v, 10);
        if (scale == 0 || digits == 0 || ec != std::errc{} || end != s.data() + (digits == std::string::npos ? s.size() : digits))
          return "'" + s + "' is not a duration such as 500ms, 2s, 1m or 1h (a plain number is milliseconds)";
        if (v > hi / scale || v * scale < lo || v * scale > hi) return "'" + s + "' is outside " + range;
        s = std::to_string(v * scale);
        return {};
      },
      "DURATION in " + duration_text(lo) + ".." + duration_text(hi));
}

CLI::Validator box_name_check() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        auto r = shmbox::Box::validate_name(s);
        return r ? std::string() : shmbox::explain(r.error());
      },
      "NAME");
}

// A pool name: a box name (the members' boxes are named after it) of at most kMaxPoolName bytes.
CLI::Validator pool_name_check() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        if (s.size() > shmbox::kMaxPoolName || !shmbox::Box::validate_name(s))
          return "invalid pool name '" + escaped(s) + "': use 1.." + std::to_string(shmbox::kMaxPoolName) +
                 " characters of A-Z a-z 0-9 . _ - (not starting with '.')";
        return {};
      },
      "POOL");
}

CLI::Validator policy_check() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        return shmbox::parse_policy(s) ? std::string()
                                       : "unknown policy '" + s + "' (use reject, drop-newest, drop-oldest, lifo or block)";
      },
      "POLICY");
}

CLI::Validator mode_check() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        // Always octal, with or without the leading 0 (600 is 0600); only
        // permission bits: no setuid, setgid or sticky bit.
        if (s.empty() || s.size() > 4 || s.find_first_not_of("01234567") != std::string::npos)
          return "mode '" + s + "' is not an octal permission such as 0600 or 0660";
        const unsigned long mode = std::stoul(s, nullptr, 8);
        if (mode > 0777u) return "mode " + s + " has bits above 0777 (setuid, setgid, sticky): use permission bits only";
        if ((mode & 0600u) != 0600u) return "mode " + s + " must include 0600 (owner read and write)";
        return {};
      },
      "OCTAL");
}

// The options of a box's geometry and behaviour that `create` and `pool
// create` (for each member box) share.
// `whose`: nullptr for a box, else what the options are of (" (each member box)").
void add_box_options(CLI::App* sub, create_args& c, const char* whose) {
  const std::string of = whose == nullptr ? std::string() : std::string(" (") + whose + ")";
  sub->add_option("--capacity", c.capacity, "messages each lane holds (a power of two is fastest; with --lanes N the box holds N times as many)" + of)
      ->transform(decimal(1, shmbox::kMaxCapacity))
      ->capture_default_str();
  sub->add_option("--slot-size", c.slot_size, "largest message in bytes" + of)
      ->transform(decimal(1, shmbox::kMaxSlotSize))
      ->capture_default_str();
  sub->add_option("--policy", c.policy, "when full: reject|drop-newest|drop-oldest|lifo|block" + of)
      ->check(policy_check())
      ->capture_default_str();
  sub->add_option("--mode", c.mode,
                  std::string(whose == nullptr ? "file mode of the segment" : "file mode of the pool segment and of each member box") +
                      ", always octal (0660 or 660), at most 0777" +
                      (whose == nullptr ? std::string("; whoever may write it may post, scribble and lose its messages, nothing else")
                                        : std::string("; group/other write lets those users change the pool's table and stored "
                                                      "command: 'pool run' then needs --command")))
      ->check(mode_check())
      ->capture_default_str();
  sub->add_option("--max-producers", c.max_producers, "producer handles attached at once" + of)
      ->transform(decimal(1, shmbox::kMaxProducers))
      ->capture_default_str();
  sub->add_option("--block-timeout", c.block_timeout_ms, "policy block: default wait of a post, in ms" + of)
      ->transform(decimal(0, 86'400'000))
      ->capture_default_str();
  sub->add_option("--lanes", c.lanes, "lanes (rings) in the box: lane 0 is the control lane, read first; then by number" + of)
      ->transform(decimal(1, shmbox::kMaxLanes))
      ->capture_default_str();
  sub->add_option("--spin-us", c.spin_us,
                  "adaptive wait: a blocking receive or post polls this long before it sleeps (0: sleep at once)" + of)
      ->transform(decimal(0, 1'000'000))
      ->capture_default_str();
}

// The options of `watch` and `pool watch`.
void add_watch_options(CLI::App* sub, watch_args& w) {
  sub->add_option("--interval", w.interval_ms, "refresh this often (500 or 500ms, 2s, 1m)")
      ->transform(duration_ms(50, 3'600'000))
      ->capture_default_str();
  sub->add_option("--count", w.count, "stop after N refreshes (0: until q, Ctrl-C or SIGTERM)")
      ->transform(decimal(0, std::numeric_limits<std::uint64_t>::max()))
      ->capture_default_str();
  sub->add_flag("--plain", w.plain, "a line per refresh, also on a terminal (the default when not a terminal)");
}

// `shmbox pool ...`: its subcommands, which set out.cmd when parsed.
struct pool_commands {
  CLI::App* group = nullptr;
  std::vector<std::pair<CLI::App*, command>> subs;
};

pool_commands add_pool_commands(CLI::App& app, parsed& out) {
  pool_commands pc;
  auto* pool = app.add_subcommand("pool", "Pools of members: worker processes that each own a box, taken and given back by consumers");
  pool->require_subcommand(1);
  pc.group = pool;
  pool_args& p = out.pool;
  pool_create_args& c = p.create;
  constexpr std::uint64_t kDay = 86'400'000;

  auto* create = pool->add_subcommand("create", "Create a pool; 'shmbox pool run NAME' then starts its members");
  create->add_option("NAME", p.name, "pool name (the segment is /dev/shm/shmbox-pool.NAME)")->required()->check(pool_name_check());
  create->add_option("--command", c.command,
                     "what a member runs (/bin/sh -c CMD, with SHMBOX_POOL, SHMBOX_BOX, SHMBOX_MEMBER and "
                     "SHMBOX_MEMBER_GENERATION set); it must take $SHMBOX_BOX within --start-timeout")
      ->required()
      ->check(CLI::Validator(
          [](std::string& v) {
            if (v.empty()) return std::string("empty: give the members' command, e.g. --command 'exec my-worker'");
            if (v.size() > shmbox::kMaxPoolCommand)
              return std::to_string(v.size()) + " bytes; at most " + std::to_string(shmbox::kMaxPoolCommand) +
                     " (put a longer one in a script)";
            return std::string();
          },
          "CMD"));
  create->add_option("--init", c.init, "members the supervisor keeps started")
      ->transform(decimal(0, shmbox::kMaxPoolMembers))
      ->capture_default_str();
  create->add_option("--max", c.max, "members at most (started on demand)")
      ->transform(decimal(1, shmbox::kMaxPoolMembers))
      ->capture_default_str();
  create->add_option("--cull-after", c.cull_after_ms, "free members idle this long are stopped, down to --init (0: never)")
      ->transform(duration_ms(0, kDay))
      ->capture_default_str();
  create->add_option("--queue-max", c.queue_max, "takers that may wait for a member at once (0: a take never waits)")
      ->transform(decimal(0, shmbox::kMaxPoolClients))
      ->capture_default_str();
  create->add_option("--max-clients", c.max_clients, "pool handles (takers, supervisors) open at once")
      ->transform(decimal(1, shmbox::kMaxPoolClients))
      ->capture_default_str();
  add_box_options(create, c.member, "each member box");
  create->add_option("--group", c.group, "a group name: a take from the group (Pool::take_group) goes to its freest pool")
      ->check(pool_name_check());
  create->add_option("--dead-letters", c.dead_letters,
                     "a box that receives the messages left in a stopped member's box (none: they are counted as lost)")
      ->check(box_name_check());
  create->add_option("--start-timeout", c.start_timeout_ms, "a member that does not own its box by then is stopped")
      ->transform(duration_ms(1, kDay))
      ->capture_default_str();
  create->add_option("--stop-grace", c.stop_grace_ms, "stopping a member: SIGTERM, then SIGKILL after this")
      ->transform(duration_ms(0, kDay))
      ->capture_default_str();
  create->add_option("--health-interval", c.health_interval_ms, "ping each free member this often (0: no health checks)")
      ->transform(duration_ms(0, kDay))
      ->capture_default_str();
  create->add_option("--health-timeout", c.health_timeout_ms, "a member that does not answer a ping within this is replaced")
      ->transform(duration_ms(1, kDay))
      ->capture_default_str();
  create->add_option("--max-lifetime", c.max_lifetime_ms,
                     "a member older than this is replaced: when free at once, when in use at its give back (0: never)")
      ->transform(duration_ms(0, kDay))
      ->capture_default_str();
  create->add_option("--lifetime-jitter", c.lifetime_jitter_ms,
                     "each member's lifetime is --max-lifetime +/- up to this, its own (less than --max-lifetime)")
      ->transform(duration_ms(0, kDay))
      ->capture_default_str();
  create->add_option("--auto-grow", c.auto_grow,
                     "a take that leaves this many free members or fewer starts more ahead of demand (--init of them at once)")
      ->transform(decimal(0, shmbox::kMaxPoolMembers));
  create->add_option("--init-command", c.init_command,
                     "run (/bin/sh -c CMD, the member's environment plus SHMBOX_WORKER_PID) once a new member owns its box, "
                     "before it is first handed out; it must exit 0 within --start-timeout, else the member is stopped")
      ->check(CLI::Validator(
          [](std::string& v) {
            if (v.size() >= shmbox::kMaxPoolInitCommand)
              return std::to_string(v.size()) + " bytes; at most " + std::to_string(shmbox::kMaxPoolInitCommand - 1) +
                     " (put a longer one in a script)";
            return std::string();
          },
          "CMD"));
  create->add_option("--table-size", c.table_size,
                     "member entries in the pool's table, fixed: the most 'pool reconfigure --max' can raise --max to (default: --max)")
      ->transform(decimal(1, shmbox::kMaxPoolMembers));
  pc.subs.emplace_back(create, command::pool_create);

  auto* run = pool->add_subcommand("run", "Supervise a pool: start, restart and cull its members until SIGINT/SIGTERM or removal");
  run->add_option("NAME", p.name, "pool name")->required()->check(pool_name_check());
  run->add_option_function<std::string>(
         "--command", [&p](const std::string& v) { p.run_command = v; },
         "the member command to run instead of the stored one; required for a pool other users can write "
         "(a supervisor never runs a command someone else could have written)")
      ->type_name("CMD");
  run->add_option_function<std::string>(
         "--dead-letters", [&p](const std::string& v) { p.run_dead_letters = v; },
         "the dead-letter box instead of the stored one (\"\": count those messages lost); required for a pool other users "
         "can write when it names one")
      ->type_name("BOX");
  run->add_option_function<std::string>(
         "--init-command", [&p](const std::string& v) { p.run_init_command = v; },
         "the init command to run instead of the stored one (\"\": none); required for a pool other users can write when it "
         "names one")
      ->type_name("CMD");
  run->add_flag("--any-owner", p.any_owner, "supervise a pool that belongs to another user (it then needs --command)");
  pc.subs.emplace_back(run, command::pool_run);

  auto* ls = pool->add_subcommand("ls", "List every pool, a line each: members free, in use, starting, queue, supervisor");
  ls->add_flag("--json", out.json, "a JSON array");
  pc.subs.emplace_back(ls, command::pool_ls);

  auto* stat = pool->add_subcommand("stat", "Show a pool: parameters, gauges, supervisor, members and counters");
  stat->add_option("NAME", p.name, "pool name")->required()->check(pool_name_check());
  auto* stat_json = stat->add_flag("--json", out.json, "one JSON object");
  stat->add_flag("--prometheus", out.prometheus, "the gauges and counters in the Prometheus text exposition format, labelled by pool")
      ->excludes(stat_json);
  pc.subs.emplace_back(stat, command::pool_stat);

  auto* watch = pool->add_subcommand("watch", "A live view of a pool: members, takes and returns per second (q or Ctrl-C quits)");
  watch->add_option("NAME", p.name, "pool name")->required()->check(pool_name_check());
  add_watch_options(watch, out.watch);
  pc.subs.emplace_back(watch, command::pool_watch);

  auto* rm = pool->add_subcommand("rm", "Remove a pool: its members stop (in use: when given back), then its segment goes");
  rm->add_option("NAME", p.name, "pool name")->required()->check(pool_name_check());
  rm->add_flag("--now", p.now, "stop every member now, also those in use (their leases become stale)");
  p.timeout_ms = 10'000;
  rm->add_option("--timeout", p.timeout_ms, "wait this long for the members to stop and the segment to go (exit 3 if not)")
      ->transform(duration_ms(0, kDay))
      ->capture_default_str();
  pc.subs.emplace_back(rm, command::pool_rm);

  auto* rm_group = pool->add_subcommand("rm-group", "Remove every pool of a group (pooler's rm_group), as 'pool rm' does each");
  rm_group->add_option("GROUP", p.name, "group name (pool create --group)")->required()->check(pool_name_check());
  rm_group->add_flag("--now", p.now, "stop every member now, also those in use (their leases become stale)");
  rm_group->add_option("--timeout", p.timeout_ms, "wait this long for all of them to go (exit 3 if some did not)")
      ->transform(duration_ms(0, kDay))
      ->capture_default_str();
  pc.subs.emplace_back(rm_group, command::pool_rm_group);

  auto* cull = pool->add_subcommand("cull", "Stop idle free members now, longest idle first, down to the pool's --init (its supervisor does it)");
  cull->add_option("NAME", p.name, "pool name")->required()->check(pool_name_check());
  cull->add_option("--idle", p.idle_ms, "only members idle at least this long (0: every free member)")
      ->transform(duration_ms(0, kDay))
      ->capture_default_str();
  cull->add_option("--timeout", p.timeout_ms, "wait this long for the supervisor's answer (exit 3 if none)")
      ->transform(duration_ms(0, kDay))
      ->capture_default_str();
  cull->add_flag("--any-owner", p.any_owner, "cull a pool whose segment belongs to another user");
  pc.subs.emplace_back(cull, command::pool_cull);

  auto* reconf = pool->add_subcommand("reconfigure",
                                      "Change a running pool's --init, --max, --cull-after, --queue-max or --auto-grow (pooler's reconfigure)");
  reconf->add_option("NAME", p.name, "pool name")->required()->check(pool_name_check());
  reconf->add_option("--init", p.new_init, "members the supervisor keeps started (raised: it starts them now)")
      ->transform(decimal(0, shmbox::kMaxPoolMembers));
  reconf->add_option("--max", p.new_max,
                     "members at most, up to the pool's table size (lowered: free members stop now; refused, exit 3, when too few are free)")
      ->transform(decimal(1, shmbox::kMaxPoolMembers));
  reconf->add_option("--cull-after", p.new_cull_after_ms, "free members idle this long are stopped, down to --init (0: never)")
      ->transform(duration_ms(0, kDay));
  reconf->add_option("--queue-max", p.new_queue_max, "takers that may wait at once (lowered: the newest waiters beyond it are refused)")
      ->transform(decimal(0, shmbox::kMaxPoolClients));
  auto* grow = reconf->add_option("--auto-grow", p.new_auto_grow, "start members ahead of demand when a take leaves this few free")
                   ->transform(decimal(0, shmbox::kMaxPoolMembers));
  reconf->add_flag("--no-auto-grow", p.no_auto_grow, "no longer start members ahead of demand")->excludes(grow);
  reconf->add_option("--timeout", p.timeout_ms, "wait this long for the supervisor to apply them (exit 3 if it did not)")
      ->transform(duration_ms(0, kDay))
      ->capture_default_str();
  reconf->add_flag("--any-owner", p.any_owner, "reconfigure a pool whose segment belongs to another user");
  pc.subs.emplace_back(reconf, command::pool_reconfigure);

  auto* take = pool->add_subcommand("take", "Take a member, post messages into its box, print it, give it back");
  take->add_option("NAME", p.name, "pool name")->required()->check(pool_name_check());
  take->add_option("MESSAGE", p.messages, "messages to post into the member's box (none: one per line of stdin)");
  auto* take_timeout = take->add_option("--timeout", p.timeout_ms, "wait this long for a member (0: never wait; exit 3 if none)")
                           ->transform(duration_ms(0, kDay));
  take->add_flag("--fail", p.fail, "give the member back as failed: it is stopped and replaced");
  take->add_flag("--any-owner", p.any_owner,
                 "take from a pool whose segment belongs to another user (its member boxes are that user's too)");
  pc.subs.emplace_back(take, command::pool_take);
  // rm and take share timeout_ms; take's default (5s) is set after parsing when --timeout is not given.
  take->callback([&p, take_timeout] {
    if (take_timeout->count() == 0) p.timeout_ms = 5000;
  });

  const std::pair<CLI::App*, const char*> examples[] = {
      {pool, "Example: shmbox pool create jobs --command 'exec my-worker' --max 8    shmbox pool run jobs"},
      {create, "Example: shmbox pool create jobs --command 'exec my-worker' --init 2 --max 8 --cull-after 5m --capacity 64"},
      {run, "Example: shmbox pool run jobs >> jobs-supervisor.log    (a second one stands by and takes over)"},
      {ls, "Example: shmbox pool ls    shmbox pool ls --json | jq '.[].name'"},
      {stat, "Example: shmbox pool stat jobs --json | jq .members    shmbox pool stat jobs --prometheus > jobs.prom"},
      {watch, "Example: shmbox pool watch jobs --interval 500ms    shmbox pool watch jobs --count 10 > jobs.log"},
      {rm, "Example: shmbox pool rm jobs --timeout 30s    shmbox pool rm jobs --now\n"
           "Exit status 3: members in use kept the pool past --timeout (it is still being removed)."},
      {rm_group, "Example: shmbox pool rm-group web --timeout 30s    shmbox pool rm-group web --now\n"
                 "Exit status 3: some pool outlived --timeout (each is named with its reason; the others are removed)."},
      {cull, "Example: shmbox pool cull jobs    shmbox pool cull jobs --idle 5m\n"
             "Exit status 3: no supervisor answered before --timeout (the request stays until one runs)."},
      {reconf, "Example: shmbox pool reconfigure jobs --max 16 --init 4    shmbox pool reconfigure jobs --cull-after 1m\n"
               "Exit status 3: refused (--max would stop members in use), or not applied by the supervisor before --timeout."},
      {take, "Example: shmbox pool take jobs --timeout 2s 'job 1' 'job 2'    echo job | shmbox pool take jobs --fail\n"
             "Exit status 3: no member before the timeout (or none free, with --timeout 0)."},
  };
  for (const auto& [sub, text] : examples) sub->footer(text);
  return pc;
}

}  // namespace

int parse_args(int argc, char** argv, parsed& out) {
  CLI::App app{"shmbox: bounded mailboxes in POSIX shared memory.\n"
               "Many producer processes post into a box; one owner process receives from it."};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("shmbox 0.1.0"));
  app.footer("Run 'shmbox COMMAND --help' for a command's options; the manual is shmbox(1).\n"
             "Exit status: 0 success, 1 failure (one line on stderr says why), 2 usage error,\n"
             "3 refused (post: not stored; recv: nothing before the timeout; give-away: refused;\n"
             "gc: skipped boxes it may not remove or that are not boxes, collected the rest;\n"
             "pool take: no member before the timeout; pool rm, rm-group: a pool outlived the\n"
               "timeout; pool cull: no supervisor answered; pool reconfigure: refused, or not\n"
               "applied before the timeout).");

  // Dispatched by main before parsing (tools/shmbox.cpp run_bridge); listed for --help.
  app.add_subcommand("bridge", "Bridge a box to NATS JetStream: 'shmbox bridge export BOX ...' / 'import ...' (shmbox-bridge --help)")
      ->prefix_command();
  auto* create = app.add_subcommand("create", "Create a box; its capacity is fixed at creation unless --max-capacity reserves room to resize it");
  create->add_option("NAME", out.create.name, "box name (the segment is /dev/shm/shmbox.NAME)")->required()->check(box_name_check());
  add_box_options(create, out.create, nullptr);
  auto check_lane_pair = [](bool policy_value) {
    return CLI::Validator(
        [policy_value](std::string& v) -> std::string {
          const auto eq = v.find('=');
          if (eq == std::string::npos || eq == 0 || eq > 3 || v.find_first_not_of("0123456789") < eq)
            return "'" + v + "' is not LANE=VALUE (e.g. 1=256)";
          if (std::stoul(v.substr(0, eq)) >= shmbox::kMaxLanes) return "lane in '" + v + "' is not 0..7";
          const std::string val = v.substr(eq + 1);
          if (policy_value) return shmbox::parse_policy(val) ? std::string() : "unknown policy in '" + v + "'";
          if (val.empty() || val.find_first_not_of("0123456789") != std::string::npos || val.size() > 9 ||
              std::stoul(val) < 1 || std::stoul(val) > shmbox::kMaxCapacity)
            return "capacity in '" + v + "' is not 1.." + std::to_string(shmbox::kMaxCapacity);
          return {};
        },
        policy_value ? "LANE=POLICY" : "LANE=N");
  };
  create->add_option("--default-lane", out.create.default_lane,
                     "the lane of a plain post (default: 1 with several lanes, so that ordinary traffic never takes "
                     "the control lane's room; 0 with one)")
      ->transform(decimal(0, shmbox::kMaxLanes - 1));
  create->add_option("--lane-capacity", out.create.lane_capacity, "capacity of one lane (repeatable); default --capacity")
      ->check(check_lane_pair(false));
  create->add_option("--lane-policy", out.create.lane_policy, "policy of one lane (repeatable); default --policy")
      ->check(check_lane_pair(true));
  create->add_option("--quota", out.create.quota,
                     "per-producer fairness: each producer may have at most N messages (or P% of its lane's capacity) "
                     "waiting in each lane; a post beyond it gets the lane's policy applied to that producer alone "
                     "(reject, drop-newest: refused 'over-quota'; block: waits for one of its own to be taken); "
                     "reject, drop-newest and block lanes only; not with --max-capacity, --stash, --priority or --buffer")
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            const bool pct = !v.empty() && v.back() == '%';
            const std::string n = pct ? v.substr(0, v.size() - 1) : v;
            if (n.empty() || n.size() > 9 || n.find_first_not_of("0123456789") != std::string::npos || std::stoul(n) < 1 ||
                (pct && std::stoul(n) > 100) || (!pct && std::stoul(n) > shmbox::kMaxCapacity))
              return "'" + v + "' is not a quota: N messages (1.." + std::to_string(shmbox::kMaxCapacity) + ") or P% (1%..100%)";
            return {};
          },
          "N|P%"));
  create->add_option("--lane-quota", out.create.lane_quota, "the quota of one lane (repeatable); default --quota")
      ->check(check_lane_pair(false));
  create->add_option("--dead-letters", out.create.dead_letters,
                     "a box that receives, with their origin, the messages this one drops or evicts")
      ->check(box_name_check());
  create->add_option("--max-capacity", out.create.max_capacity,
                     "resizable: reserve slots for this many messages per lane ('shmbox resize' moves the limit up to it; "
                     "the reserve's memory is taken now; not for lifo lanes)")
      ->transform(decimal(1, shmbox::kMaxCapacity));
  create->add_option("--stash", out.create.stash,
                     "the owner's stash: room for N parked messages (Owner::stash / unstash_all); they count against "
                     "their lane's capacity and survive the owner (with --priority, unstashed ones rejoin their priority); "
                     "not with lifo lanes, --lease-ms or --buffer")
      ->transform(decimal(1, shmbox::kMaxCapacity));
  create->add_flag("--priority", out.create.priority,
                   "a priority box: the owner receives the lowest --priority first, FIFO among equal ones (lanes still "
                   "first); the segment holds a store as large as the slots; policies reject, drop-newest, block; not "
                   "with --lease-ms");
  create->add_option("--buffer", out.create.buffer,
                     "a custom-buffer box: its owner delivers and drops through buffer type NAME (shmbox::register_buffer), "
                     "which every process that posts to it or owns it registers; the CLI registers none, so it cannot post "
                     "to it or receive from it; policies reject, drop-newest, block; not with --priority, --stash or --lease-ms");
  create->add_flag("--dead-letter-refused", out.create.dead_letter_refused,
                   "also forward the posts this box refuses (full, timed out, too large) to --dead-letters");
  create->add_option("--lease-ms", out.create.lease_ms,
                     "lease deadline: an owner that stops receiving this long loses the box to its heir (0: none)")
      ->transform(decimal(0, 86'400'000))
      ->capture_default_str();

  auto* post = app.add_subcommand("post", "Post messages: each argument is one; with none, one per line of stdin");
  post->add_option("NAME", out.post.name, "box name")->required()->check(box_name_check());
  post->add_option("MESSAGE", out.post.messages, "messages to post");
  post->add_option("--timeout", out.post.timeout_ms, "policy block: how long to wait for space, in ms (default: the box's)")
      ->transform(decimal(0, 86'400'000));
  post->add_flag("--any-owner", out.post.any_owner, "post into a box whose segment belongs to another user");
  auto* lane_opt = post->add_option("--lane", out.post.lane, "the lane to post into (0: the control lane; default: the box's default lane)")
                       ->transform(decimal(0, shmbox::kMaxLanes - 1));
  post->add_option("--priority", out.post.priority,
                   "a priority box: the messages' priority, a signed 64-bit number; lower is received first (default 0); a "
                   "custom-buffer box: their key");
  post->add_flag_callback("--control", [&out] { out.post.lane = 0; }, "post into the control lane (the same as --lane 0)")
      ->excludes(lane_opt);

  auto* recv = app.add_subcommand("recv", "Receive messages as the box's owner, one per line, in delivery order");
  recv->add_option("NAME", out.recv.name, "box name")->required()->check(box_name_check());
  auto* max_opt = recv->add_option("--max", out.recv.max, "receive at most N messages")->transform(decimal(1, std::numeric_limits<std::size_t>::max()))->capture_default_str();
  auto* all_opt = recv->add_flag("--all", out.recv.all, "receive every message in the box")->excludes(max_opt);
  auto* recv_timeout = recv->add_option("--timeout", out.recv.timeout_ms,
                                        "wait up to MS for messages (with --heir: first up to MS to be given the box, exit 3 if not)")
                           ->transform(decimal(0, 86'400'000))
                           ->capture_default_str();
  recv->add_flag("--follow", out.recv.follow, "keep receiving and printing until interrupted (SIGINT/SIGTERM)")
      ->excludes(max_opt)
      ->excludes(all_opt);
  recv->add_flag("--any-owner", out.recv.any_owner, "receive from a box whose segment belongs to another user");
  recv->add_flag("--verbose", out.recv.verbose, "print each message's lane and redelivered flag before it");
  recv->add_flag("--raw", out.recv.raw,
                 "print each message's bytes as they are (default: one line each, backslash, control characters and "
                 "newlines as C escapes, so that a message cannot break lines or act on a terminal)");
  auto* heir_opt = recv->add_flag("--heir", out.recv.heir, "register as heir, wait until given the box, then receive as owner");
  recv->add_option("--data", out.recv.data, "with --heir: data (up to 64 bytes) handed over with the box")->needs(heir_opt)->check(
      CLI::Validator([](std::string& v) { return v.size() <= 64 ? std::string() : std::string("at most 64 bytes"); }, "DATA"));

  recv->add_flag("--accept-give-away", out.recv.accept_give_away,
                 "while receiving, hand the box over when 'shmbox give-away NAME PID' asks for it");

  recv->add_option("--reply-with", out.recv.reply_with,
                   "a service: answer each request ('shmbox ask', shmbox::Requester) with the standard output of shell "
                   "command CMD, run with the request on its standard input (one trailing newline of the output is "
                   "dropped; requests an owner that died had answered are not run again); other messages are printed "
                   "as usual");

  auto* ask = app.add_subcommand("ask", "Send requests to a box's owner and print their replies, one per line, in order");
  ask->add_option("NAME", out.ask.name, "the service box")->required()->check(box_name_check());
  ask->add_option("MESSAGE", out.ask.messages, "requests (with none, one per line of stdin)");
  ask->add_option("--timeout", out.ask.timeout_ms, "how long to wait for each reply, in ms")
      ->transform(decimal(0, 86'400'000))
      ->capture_default_str();
  ask->add_option("--lane", out.ask.lane, "the lane to post the requests into (default: the box's default lane)")
      ->transform(decimal(0, shmbox::kMaxLanes - 1));
  ask->add_flag("--any-owner", out.ask.any_owner, "a service box whose segment belongs to another user");
  ask->add_flag("--raw", out.ask.raw,
                "print each reply's bytes as they are (default: one line each, backslash, control characters and "
                "newlines as C escapes, so that a reply cannot break lines or act on a terminal)");

  auto* stat = app.add_subcommand("stat", "Show a box: geometry, lanes, counters, owner, heirs, producers, last transfer");
  stat->add_option("NAME", out.name, "box name")->required()->check(box_name_check());
  auto* stat_json = stat->add_flag("--json", out.json, "one JSON object");
  stat->add_flag("--prometheus", out.prometheus,
                 "the counters in the Prometheus text exposition format, labelled by box and lane")
      ->excludes(stat_json);

  auto* watch = app.add_subcommand("watch", "A live view of a box: depth per lane, rates, owner and heirs (q or Ctrl-C quits)");
  watch->add_option("NAME", out.name, "box name")->required()->check(box_name_check());
  add_watch_options(watch, out.watch);

  auto* dump = app.add_subcommand("dump", "Show the messages in a box without taking them (the owner is not disturbed)");
  dump->add_option("NAME", out.name, "box name")->required()->check(box_name_check());
  dump->add_option("--max", out.dump.max, "show at most N messages")
      ->transform(decimal(1, std::numeric_limits<std::size_t>::max()))
      ->capture_default_str();
  auto* dump_hex = dump->add_flag("--hex", out.dump.hex, "hexdump each message");
  dump->add_flag("--json", out.json, "a JSON array: lane, position, size, text (base16 for bytes that are not UTF-8)")
      ->excludes(dump_hex);

  auto* give = app.add_subcommand("give-away", "Ask a box's owner to hand the box to a waiting process (if the owner accepts requests)");
  give->add_option("NAME", out.name, "box name")->required()->check(box_name_check());
  auto* give_pid = give->add_option("PID", out.give_away.pid,
                                    "the process to hand it to: an heir or listener of the box, by its pid in this pid namespace")
                       ->transform(decimal(1, 4'194'304));
  auto* give_heir = give->add_option("--heir", out.give_away.heir,
                                     "the heir or listener in heir-table entry N (the ENTRY column of 'shmbox heirs'), "
                                     "in any pid namespace (another container)")
                        ->transform(decimal(0, 15))
                        ->excludes(give_pid);
  give->callback([give_pid, give_heir] {
    if (give_pid->count() == 0 && give_heir->count() == 0)
      throw CLI::RequiredError("PID or --heir N (the process to hand the box to)");
  });
  give->add_option("--timeout", out.give_away.timeout_ms, "wait up to MS for the owner to hand it over")
      ->transform(decimal(0, 86'400'000))
      ->capture_default_str();
  give->add_flag("--any-owner", out.give_away.any_owner, "a box whose segment belongs to another user");

  auto* resize = app.add_subcommand("resize", "Change how many messages a resizable box (or lane) holds, up to its max capacity, while it runs");
  resize->add_option("NAME", out.name, "box name")->required()->check(box_name_check());
  resize->add_option("LIMIT", out.resize.limit,
                     "messages it holds from now on; below its depth, its policy drops the excess (drop-oldest: the oldest; "
                     "reject, drop-newest: the newest; block: none, posts wait)")
      ->required()
      ->transform(decimal(1, shmbox::kMaxCapacity));
  resize->add_option("--lane", out.resize.lane, "the lane to resize (required when the box has several)")
      ->transform(decimal(0, shmbox::kMaxLanes - 1));
  resize->add_flag("--json", out.json, "one JSON object: lane, before, after, max_capacity, dropped");

  auto* ls = app.add_subcommand("ls", "List every box on this machine, a line each");
  ls->add_flag("--json", out.json, "a JSON array");
  ls->add_flag("--plain", out.plain,
               "a row per box with its name in full, however long (the default when not a terminal; on a terminal a "
               "name longer than its NAME column is cut in the middle with ~ so that every row fits the width)");

  auto* metrics = app.add_subcommand("metrics", "Every box, pool and bridge on this machine in one Prometheus exposition");
  metrics->add_option("--listen", out.listen,
                      "serve it over HTTP on GET /metrics at ADDR:PORT (127.0.0.1:9812, [::1]:9812; port 0: a free one) "
                      "until SIGTERM or Ctrl-C, a fresh exposition per request")
      ->type_name("ADDR:PORT")
      ->check(CLI::Validator(
          [](std::string& s) -> std::string {
            if (parse_listen_address(s)) return {};
            return "'" + s + "' is not ADDR:PORT (an IPv4 address or host name, or [IPv6], then ':' and a port 0..65535)";
          },
          "ADDR:PORT"));

  auto* heirs = app.add_subcommand("heirs", "Show the heir table in order, with liveness");
  heirs->add_option("NAME", out.name, "box name")->required()->check(box_name_check());
  heirs->add_flag("--json", out.json, "a JSON array");

  auto* rm = app.add_subcommand("rm", "Remove a box (processes that have it open keep using it)");
  rm->add_option("NAME", out.name, "box name")->required()->check(box_name_check());

  auto* verify = app.add_subcommand("verify", "Check a box's segment against every invariant; exit 1 with the reasons when broken");
  verify->add_option("NAME", out.name, "box name")->required()->check(box_name_check());
  verify->add_flag("--json", out.json, "one JSON object");

  auto* gc = app.add_subcommand("gc", "Remove boxes nobody uses: owner, heirs and producers all dead, and empty");
  gc->add_flag("--dry-run", out.dry_run, "only say what would be removed");
  gc->add_flag("--include-nonempty", out.include_nonempty, "also boxes that still hold messages (they are lost)");
  gc->add_option("--prefix", out.prefix, "only boxes whose names start with PREFIX");
  gc->add_flag("--json", out.json, "a JSON array of the boxes removed");

  const pool_commands pool = add_pool_commands(app, out);

  // Examples, shown at the end of each command's --help.
  const std::pair<CLI::App*, const char*> examples[] = {
      {create, "Example: shmbox create jobs --capacity 4096 --slot-size 512 --policy drop-oldest"},
      {post, "Example: shmbox post jobs 'hello'    printf 'a\\nb\\n' | shmbox post jobs    shmbox post jobs --control stop"},
      {recv, "Example: shmbox recv jobs --follow --accept-give-away    shmbox recv jobs --heir --data backup --follow    "
             "shmbox recv prices --follow --reply-with 'tr a-z A-Z'"},
      {ask, "Example: shmbox ask prices eurusd --timeout 1000    printf 'a\\nb\\n' | shmbox ask prices"},
      {stat, "Example: shmbox stat jobs --json | jq .counters    shmbox stat jobs --prometheus > jobs.prom"},
      {watch, "Example: shmbox watch jobs --interval 500    shmbox watch jobs --count 10 > jobs.log"},
      {dump, "Example: shmbox dump jobs --max 10 --hex"},
      {give, "Example: shmbox give-away jobs 4242    (4242 runs 'shmbox recv jobs --heir'; the owner runs\n"
             "         'shmbox recv jobs --follow --accept-give-away'). Exit 3 when the owner refuses."},
      {ls, "Example: shmbox ls    shmbox ls --json | jq '.[].name'"},
      {metrics, "One text exposition (format 0.0.4) for the whole host: what 'shmbox stat NAME --prometheus' and\n"
                "'shmbox pool stat NAME --prometheus' show, for every box, bridge and pool the caller can read (what\n"
                "'shmbox ls' lists), each family's HELP and TYPE once, the samples told apart by their box or pool\n"
                "label. A segment that cannot be read (permission denied, corrupt, incomplete, a FIFO or link at a\n"
                "box path), or a bridge status that is another user's or writable by others, is skipped with a\n"
                "warning on stderr and counted in shmbox_metrics_unreadable_segments;\n"
                "shmbox_metrics_exported_segments counts the rest (label kind: box, pool, bridge). Exit 0 once the\n"
                "text is written.\n"
                "With --listen it serves that text on GET /metrics (Content-Type text/plain; version=0.0.4), built\n"
                "afresh for each request, and prints 'listening on http://ADDR:PORT/metrics' once bound; 0, 0.0.0.0\n"
                "or [::] listen on every address, with a warning. GET and HEAD only, every request, connection and\n"
                "answer bounded (8 KiB heads, no bodies, 10 s to send a request, 256 connections: shmbox(1)). Exit 0\n"
                "on SIGTERM or Ctrl-C, 1 when the address cannot be bound (in use, not local).\n"
                "Example: shmbox metrics > /var/lib/prometheus/node-exporter/shmbox.prom.$$ &&\n"
                "         mv /var/lib/prometheus/node-exporter/shmbox.prom.$$ /var/lib/prometheus/node-exporter/shmbox.prom\n"
                "         shmbox metrics --listen 127.0.0.1:9812    (scrape target 127.0.0.1:9812)"},
      {heirs, "Example: shmbox heirs jobs --json"},
      {rm, "Example: shmbox rm jobs"},
      {verify, "Example: shmbox verify jobs || echo broken"},
      {resize, "Example: shmbox resize jobs 8192    (made with: shmbox create jobs --capacity 1024 --max-capacity 65536)"},
      {gc, "Example: shmbox gc --dry-run --prefix test-\n"
           "Exit status 3: some boxes were skipped (another user's box it may not remove, or a FIFO or link\n"
           "at a box path: listed as 'skipped NAME (why)'); the rest was collected."},
  };
  for (const auto& [sub, text] : examples) sub->footer(text);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // Under `pool`, point at the pool command's own help.
    std::string help = "shmbox --help";
    if (pool.group->parsed()) {
      help = "shmbox pool --help";
      for (const auto& [sub, cmd] : pool.subs)
        if (sub->parsed()) help = "shmbox pool " + sub->get_name() + " --help";
    }
    say(std::string(e.what()) + " (run '" + help + "')");
    return kExitUsage;
  }


  out.recv.timeout_given = recv_timeout->count() > 0;
  if (create->parsed() && !out.create.dead_letters.empty() && out.create.dead_letters == out.create.name) {
    say("--dead-letters " + out.create.dead_letters + ": a box cannot be its own dead-letter box (run 'shmbox create --help')");
    return kExitUsage;
  }
  if (create->parsed() && out.create.dead_letter_refused && out.create.dead_letters.empty()) {
    say("--dead-letter-refused needs --dead-letters BOX: the box the refused posts go to (run 'shmbox create --help')");
    return kExitUsage;
  }

  for (const auto& [sub, cmd] : pool.subs)
    if (sub->parsed()) out.cmd = cmd;
  if (out.cmd == command::pool_create) {
    const pool_create_args& c = out.pool.create;
    if (c.init > c.max) {
      say("--init " + std::to_string(c.init) + " is more than --max " + std::to_string(c.max) +
          ": the supervisor cannot keep more members started than the pool may have (raise --max or lower --init)");
      return kExitUsage;
    }
    if (c.queue_max > c.max_clients) {
      say("--queue-max " + std::to_string(c.queue_max) + " is more than --max-clients " + std::to_string(c.max_clients) +
          ": every waiting taker holds a client entry (raise --max-clients or lower --queue-max)");
      return kExitUsage;
    }
    return -1;
  }
  if (out.cmd != command::none) return -1;

  const std::pair<CLI::App*, command> commands[] = {{create, command::create}, {post, command::post}, {recv, command::recv}, {ask, command::ask},
                                                   {stat, command::stat},     {ls, command::ls},     {heirs, command::heirs},
                                                   {rm, command::rm},         {verify, command::verify}, {gc, command::gc},
                                                   {watch, command::watch},   {dump, command::dump},   {give, command::give_away},
                                                   {resize, command::resize}, {metrics, command::metrics}};
  for (const auto& [sub, cmd] : commands)
    if (sub->parsed()) out.cmd = cmd;
  return out.cmd == command::none ? kExitUsage : -1;
}

}  // namespace shmbox_cli
