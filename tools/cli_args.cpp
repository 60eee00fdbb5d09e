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

std::string escaped(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c >= 0x20 && c < 0x7f) {
          out += ch;
        } else {
          char esc[8];
          std::snprintf(esc, sizeof esc, "\\x%02x", c);
          out += esc;
        }
    }
  }
  return out;
}

void say(std::string_view line) { std::cerr << "shmbox: " << escaped(line) << "\n"; }

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

}  // namespace

int parse_args(int argc, char** argv, parsed& out) {
  CLI::App app{"shmbox: bounded mailboxes in POSIX shared memory.\n"
               "Many producer processes post into a box; one owner process receives from it."};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("shmbox 0.1.0"));
  app.footer("Run 'shmbox COMMAND --help' for a command's options; the manual is shmbox(1).\n"
             "Exit status: 0 success, 1 failure (one line on stderr says why), 2 usage error,\n"
             "3 refused (post: not stored; recv: nothing before the timeout; give-away: refused;\n"
             "gc: skipped boxes it may not remove or that are not boxes, collected the rest).");

  auto check_name = CLI::Validator(
      [](std::string& s) -> std::string {
        auto r = shmbox::Box::validate_name(s);
        return r ? std::string() : shmbox::explain(r.error());
      },
      "NAME");
  auto check_policy = CLI::Validator(
      [](std::string& s) -> std::string {
        return shmbox::parse_policy(s) ? std::string()
                                       : "unknown policy '" + s + "' (use reject, drop-newest, drop-oldest, lifo or block)";
      },
      "POLICY");
  auto check_mode = CLI::Validator(
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

  auto* create = app.add_subcommand("create", "Create a box; its capacity is fixed at creation");
  create->add_option("NAME", out.create.name, "box name (the segment is /dev/shm/shmbox.NAME)")->required()->check(check_name);
  create->add_option("--capacity", out.create.capacity, "messages the box holds (a power of two is fastest)")
      ->transform(decimal(1, shmbox::kMaxCapacity))
      ->capture_default_str();
  create->add_option("--slot-size", out.create.slot_size, "largest message in bytes")
      ->transform(decimal(1, shmbox::kMaxSlotSize))
      ->capture_default_str();
  create->add_option("--policy", out.create.policy, "when full: reject|drop-newest|drop-oldest|lifo|block")
      ->check(check_policy)
      ->capture_default_str();
  create->add_option("--mode", out.create.mode, "file mode of the segment, always octal (0660 or 660), at most 0777")->check(check_mode)->capture_default_str();
  create->add_option("--max-producers", out.create.max_producers, "producer handles attached at once")
      ->transform(decimal(1, shmbox::kMaxProducers))
      ->capture_default_str();
  create->add_option("--block-timeout", out.create.block_timeout_ms, "policy block: default wait of a post, in ms")
      ->transform(decimal(0, 86'400'000))
      ->capture_default_str();
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
  create->add_option("--lanes", out.create.lanes, "lanes (rings) in the box: lane 0 is the control lane, read first; then by number")
      ->transform(decimal(1, shmbox::kMaxLanes))
      ->capture_default_str();
  create->add_option("--default-lane", out.create.default_lane,
                     "the lane of a plain post (default: 1 with several lanes, so that ordinary traffic never takes "
                     "the control lane's room; 0 with one)")
      ->transform(decimal(0, shmbox::kMaxLanes - 1));
  create->add_option("--lane-capacity", out.create.lane_capacity, "capacity of one lane (repeatable); default --capacity")
      ->check(check_lane_pair(false));
  create->add_option("--lane-policy", out.create.lane_policy, "policy of one lane (repeatable); default --policy")
      ->check(check_lane_pair(true));
  create->add_option("--dead-letters", out.create.dead_letters,
                     "a box that receives, with their origin, the messages this one drops or evicts")
      ->check(check_name);
  create->add_option("--lease-ms", out.create.lease_ms,
                     "lease deadline: an owner that stops receiving this long loses the box to its heir (0: none)")
      ->transform(decimal(0, 86'400'000))
      ->capture_default_str();
  create->add_option("--spin-us", out.create.spin_us,
                     "adaptive wait: a blocking receive or post polls this long before it sleeps (0: sleep at once)")
      ->transform(decimal(0, 1'000'000))
      ->capture_default_str();

  auto* post = app.add_subcommand("post", "Post messages: each argument is one; with none, one per line of stdin");
  post->add_option("NAME", out.post.name, "box name")->required()->check(check_name);
  post->add_option("MESSAGE", out.post.messages, "messages to post");
  post->add_option("--timeout", out.post.timeout_ms, "policy block: how long to wait for space, in ms (default: the box's)")
      ->transform(decimal(0, 86'400'000));
  post->add_flag("--any-owner", out.post.any_owner, "post into a box whose segment belongs to another user");
  auto* lane_opt = post->add_option("--lane", out.post.lane, "the lane to post into (0: the control lane; default: the box's default lane)")
                       ->transform(decimal(0, shmbox::kMaxLanes - 1));
  post->add_flag_callback("--control", [&out] { out.post.lane = 0; }, "post into the control lane (the same as --lane 0)")
      ->excludes(lane_opt);

  auto* recv = app.add_subcommand("recv", "Receive messages as the box's owner, one per line, in delivery order");
  recv->add_option("NAME", out.recv.name, "box name")->required()->check(check_name);
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
  auto* heir_opt = recv->add_flag("--heir", out.recv.heir, "register as heir, wait until given the box, then receive as owner");
  recv->add_option("--data", out.recv.data, "with --heir: data (up to 64 bytes) handed over with the box")->needs(heir_opt)->check(
      CLI::Validator([](std::string& v) { return v.size() <= 64 ? std::string() : std::string("at most 64 bytes"); }, "DATA"));

  recv->add_flag("--accept-give-away", out.recv.accept_give_away,
                 "while receiving, hand the box over when 'shmbox give-away NAME PID' asks for it");

  auto* stat = app.add_subcommand("stat", "Show a box: geometry, lanes, counters, owner, heirs, producers, last transfer");
  stat->add_option("NAME", out.name, "box name")->required()->check(check_name);
  auto* stat_json = stat->add_flag("--json", out.json, "one JSON object");
  stat->add_flag("--prometheus", out.prometheus,
                 "the counters in the Prometheus text exposition format, labelled by box and lane")
      ->excludes(stat_json);

  auto* watch = app.add_subcommand("watch", "A live view of a box: depth per lane, rates, owner and heirs (q or Ctrl-C quits)");
  watch->add_option("NAME", out.name, "box name")->required()->check(check_name);
  watch->add_option("--interval", out.watch.interval_ms, "refresh every MS milliseconds")
      ->transform(decimal(50, 3'600'000))
      ->capture_default_str();
  watch->add_option("--count", out.watch.count, "stop after N refreshes (0: until q, Ctrl-C or SIGTERM)")
      ->transform(decimal(0, std::numeric_limits<std::uint64_t>::max()))
      ->capture_default_str();
  watch->add_flag("--plain", out.watch.plain, "a line per refresh, also on a terminal (the default when not a terminal)");

  auto* dump = app.add_subcommand("dump", "Show the messages in a box without taking them (the owner is not disturbed)");
  dump->add_option("NAME", out.name, "box name")->required()->check(check_name);
  dump->add_option("--max", out.dump.max, "show at most N messages")
      ->transform(decimal(1, std::numeric_limits<std::size_t>::max()))
      ->capture_default_str();
  auto* dump_hex = dump->add_flag("--hex", out.dump.hex, "hexdump each message");
  dump->add_flag("--json", out.json, "a JSON array: lane, position, size, text (base16 for bytes that are not UTF-8)")
      ->excludes(dump_hex);

  auto* give = app.add_subcommand("give-away", "Ask a box's owner to hand the box to a waiting process (if the owner accepts requests)");
  give->add_option("NAME", out.name, "box name")->required()->check(check_name);
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

  auto* ls = app.add_subcommand("ls", "List every box on this machine, a line each");
  ls->add_flag("--json", out.json, "a JSON array");

  auto* heirs = app.add_subcommand("heirs", "Show the heir table in order, with liveness");
  heirs->add_option("NAME", out.name, "box name")->required()->check(check_name);
  heirs->add_flag("--json", out.json, "a JSON array");

  auto* rm = app.add_subcommand("rm", "Remove a box (processes that have it open keep using it)");
  rm->add_option("NAME", out.name, "box name")->required()->check(check_name);

  auto* verify = app.add_subcommand("verify", "Check a box's segment against every invariant; exit 1 with the reasons when broken");
  verify->add_option("NAME", out.name, "box name")->required()->check(check_name);
  verify->add_flag("--json", out.json, "one JSON object");

  auto* gc = app.add_subcommand("gc", "Remove boxes nobody uses: owner, heirs and producers all dead, and empty");
  gc->add_flag("--dry-run", out.dry_run, "only say what would be removed");
  gc->add_flag("--include-nonempty", out.include_nonempty, "also boxes that still hold messages (they are lost)");
  gc->add_option("--prefix", out.prefix, "only boxes whose names start with PREFIX");
  gc->add_flag("--json", out.json, "a JSON array of the boxes removed");

  // Examples, shown at the end of each command's --help.
  const std::pair<CLI::App*, const char*> examples[] = {
      {create, "Example: shmbox create jobs --capacity 4096 --slot-size 512 --policy drop-oldest"},
      {post, "Example: shmbox post jobs 'hello'    printf 'a\\nb\\n' | shmbox post jobs    shmbox post jobs --control stop"},
      {recv, "Example: shmbox recv jobs --follow --accept-give-away    shmbox recv jobs --heir --data backup --follow"},
      {stat, "Example: shmbox stat jobs --json | jq .counters    shmbox stat jobs --prometheus > jobs.prom"},
      {watch, "Example: shmbox watch jobs --interval 500    shmbox watch jobs --count 10 > jobs.log"},
      {dump, "Example: shmbox dump jobs --max 10 --hex"},
      {give, "Example: shmbox give-away jobs 4242    (4242 runs 'shmbox recv jobs --heir'; the owner runs\n"
             "         'shmbox recv jobs --follow --accept-give-away'). Exit 3 when the owner refuses."},
      {ls, "Example: shmbox ls    shmbox ls --json | jq '.[].name'"},
      {heirs, "Example: shmbox heirs jobs --json"},
      {rm, "Example: shmbox rm jobs"},
      {verify, "Example: shmbox verify jobs || echo broken"},
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
    say(std::string(e.what()) + " (run 'shmbox --help')");
    return kExitUsage;
  }


  out.recv.timeout_given = recv_timeout->count() > 0;
  if (create->parsed() && !out.create.dead_letters.empty() && out.create.dead_letters == out.create.name) {
    say("--dead-letters " + out.create.dead_letters + ": a box cannot be its own dead-letter box (run 'shmbox create --help')");
    return kExitUsage;
  }

  const std::pair<CLI::App*, command> commands[] = {{create, command::create}, {post, command::post}, {recv, command::recv},
                                                   {stat, command::stat},     {ls, command::ls},     {heirs, command::heirs},
                                                   {rm, command::rm},         {verify, command::verify}, {gc, command::gc},
                                                   {watch, command::watch},   {dump, command::dump},   {give, command::give_away}};
  for (const auto& [sub, cmd] : commands)
    if (sub->parsed()) out.cmd = cmd;
  return out.cmd == command::none ? kExitUsage : -1;
}

}  // namespace shmbox_cli
