// tools/cli_args.hpp - the shmbox command line's arguments, parsed apart from
// running them (so the parser can be fuzzed without touching /dev/shm).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "shmbox/pool.hpp"

namespace shmbox_cli {

constexpr int kExitOk = 0, kExitFail = 1, kExitUsage = 2, kExitRefused = 3;

struct create_args {
  std::string name;
  std::uint32_t capacity = 1024;
  std::uint32_t slot_size = 256;
  std::string policy = "reject";
  std::string mode = "0600";
  std::uint32_t max_producers = 64;
  std::uint32_t block_timeout_ms = 1000;
  std::uint32_t lease_ms = 0;
  std::uint32_t spin_us = 50;
  std::uint32_t lanes = 1;
  long long default_lane = -1;  // -1: lane 1 with several lanes, else 0
  std::vector<std::string> lane_capacity;  // "L=N"
  std::vector<std::string> lane_policy;    // "L=POLICY"
  std::string dead_letters;
  bool dead_letter_refused = false;
  std::uint32_t stash = 0;  // create: the owner's stash entries (0: none)
  bool priority = false;    // create: a priority box
  std::string buffer;       // create: a custom-buffer box's buffer type ("" none)
  std::uint32_t max_capacity = 0;  // create: resizable up to this (0: not resizable)
  std::string quota;                      // create: per-producer quota of every lane, "N" or "P%" ("" none)
  std::vector<std::string> lane_quota;    // create: "L=N", one lane's quota
};

struct resize_args {
  std::uint32_t limit = 0;
  long long lane = -1;  // -1: the only lane
};

struct post_args {
  std::string name;
  std::vector<std::string> messages;
  long long timeout_ms = -1;  // -1: the box's block timeout
  long long lane = -1;        // -1: the box's default lane (a plain post); --control: 0
  std::optional<std::int64_t> priority;  // a priority box: the messages' priority (unset: 0)
  bool any_owner = false;
};

struct recv_args {
  std::string name;
  std::size_t max = 1;
  bool all = false;
  bool follow = false;
  bool heir = false;
  std::string data;
  long long timeout_ms = 0;
  bool timeout_given = false;  // --timeout was given (with --heir it bounds the wait to be given the box)
  bool verbose = false;
  bool any_owner = false;
  bool accept_give_away = false;  // serve `shmbox give-away` requests while receiving
  std::string reply_with;  // answer each request with this shell command's output (its stdin: the request)
  bool raw = false;        // print each message's bytes as they are (default: message_line)
};

struct ask_args {
  std::string name;
  std::vector<std::string> messages;
  long long timeout_ms = 5000;  // per request, from its post to its reply
  long long lane = -1;          // -1: the box's default lane
  bool any_owner = false;
  bool raw = false;             // print each reply's bytes as they are (default: message_line)
};

struct watch_args {
  std::uint32_t interval_ms = 1000;
  std::uint64_t count = 0;  // refreshes before it stops by itself (0: until q, Ctrl-C or SIGTERM)
  bool plain = false;       // a line per interval even on a terminal
};

struct dump_args {
  std::size_t max = 100;
  bool hex = false;
};

struct give_away_args {
  std::uint32_t pid = 0;    // a process of the caller's pid namespace, or
  std::int64_t heir = -1;   // an heir-table entry (--heir N), in any namespace
  std::uint32_t timeout_ms = 5000;
  bool any_owner = false;
};

// `shmbox pool create`: the pool's parameters (defaults: shmbox::pool_options).
// Durations are in milliseconds (the parser reads 250, 250ms, 2s, 1m, 1h).
struct pool_create_args {
  std::string command;
  std::string init_command;  // --init-command CMD ("" none)
  std::uint32_t init = shmbox::pool_options{}.init_count;
  std::uint32_t max = shmbox::pool_options{}.max_count;
  std::uint64_t cull_after_ms = static_cast<std::uint64_t>(shmbox::pool_options{}.cull_after.count());
  std::uint32_t queue_max = shmbox::pool_options{}.queue_max;
  std::uint32_t max_clients = shmbox::pool_options{}.max_clients;
  std::string group;
  std::string dead_letters;
  std::uint64_t start_timeout_ms = static_cast<std::uint64_t>(shmbox::pool_options{}.start_timeout.count());
  std::uint64_t stop_grace_ms = static_cast<std::uint64_t>(shmbox::pool_options{}.stop_grace.count());
  std::uint64_t health_interval_ms = static_cast<std::uint64_t>(shmbox::pool_options{}.health_interval.count());
  std::uint64_t health_timeout_ms = static_cast<std::uint64_t>(shmbox::pool_options{}.health_timeout.count());
  std::uint64_t max_lifetime_ms = 0;         // 0: none
  std::uint64_t lifetime_jitter_ms = 0;
  std::optional<std::uint32_t> auto_grow;    // --auto-grow N
  std::uint32_t table_size = 0;              // --table-size N (0: --max)
  // Each member box: capacity, slot size, policy, lanes, max producers, block
  // timeout, spin and mode (also the pool segment's); `name` is unused.
  create_args member;
};

// `shmbox pool ...`
struct pool_args {
  std::string name;
  pool_create_args create;
  std::uint64_t timeout_ms = 0;  // rm: for the members to stop; take: for a member
  std::uint64_t idle_ms = 0;     // cull: the least idle time of a member it stops
  bool now = false;              // rm, rm-group: immediate removal
  bool fail = false;             // take: give the member back as failed
  bool any_owner = false;        // run, take: the pool may belong to another user
  std::vector<std::string> messages;  // take
  std::optional<std::string> run_command;       // run --command
  std::optional<std::string> run_dead_letters;  // run --dead-letters
  std::optional<std::string> run_init_command;  // run --init-command
  // reconfigure: the values given (the others are kept)
  std::optional<std::uint32_t> new_init, new_max, new_queue_max, new_auto_grow;
  std::optional<std::uint64_t> new_cull_after_ms;
  bool no_auto_grow = false;
};

enum class command {
  none, create, post, recv, ask, stat, ls, heirs, rm, verify, gc, watch, dump, give_away, resize, metrics,
  pool_create, pool_run, pool_ls, pool_stat, pool_watch, pool_rm, pool_rm_group, pool_take, pool_cull, pool_reconfigure,
};

struct parsed {
  command cmd = command::none;
  create_args create;
  post_args post;
  recv_args recv;
  ask_args ask;
  watch_args watch;
  dump_args dump;
  give_away_args give_away;
  resize_args resize;
  pool_args pool;
  std::string name;  // stat, heirs, rm, verify, watch, dump, give-away, resize
  bool json = false;
  bool prometheus = false;        // stat
  bool plain = false;             // ls: names in full, never cut to a terminal's width
  bool dry_run = false;           // gc
  bool include_nonempty = false;  // gc
  std::string prefix;             // gc
  std::string listen;             // metrics --listen: "ADDR:PORT" (checked by parse_listen_address)
};

// Where `shmbox metrics --listen` listens: "HOST:PORT" or "[IPv6]:PORT", PORT
// a decimal 0..65535 (0: a free port the kernel picks). HOST is an IPv4 or
// IPv6 address or a host name ([A-Za-z0-9.-], resolved when bound); an IPv6
// address needs its brackets. nullopt when `text` is not of that form.
struct listen_address {
  std::string host;  // without brackets
  int port = 0;
};
std::optional<listen_address> parse_listen_address(std::string_view text);

// `text` as one line of printable ASCII: control characters and bytes outside
// 0x20..0x7e are escaped (\n, \r, \t, \x1b, \xff; a backslash doubles). Every
// name, argument or string from a segment that the CLI prints on stderr goes
// through it, so an error stays one line and puts no escape sequence on a terminal.
std::string escaped(std::string_view text);
// A message (recv) or reply (ask) as one line of text that cannot act on a
// terminal: backslash, C0 controls (newline, escape, ...), DEL and C1
// controls (U+0080-U+009F, UTF-8 C2 80-9F) become C escapes (\\ \n \r \t
// \xNN); everything else, UTF-8 text included, is kept. --raw prints the bytes.
std::string message_line(std::string_view text);
// Writes "shmbox: " + escaped(line) + "\n" to stderr: every error line of the CLI.
void say(std::string_view line);

// Parses argv into `out`. Returns -1 when `out` holds a command to run;
// otherwise the exit code to leave with: 0 after --help or --version, 2 after
// a usage error (one line on stderr).
int parse_args(int argc, char** argv, parsed& out);

}  // namespace shmbox_cli
