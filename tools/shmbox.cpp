// tools/shmbox.cpp - the shmbox command line: main, what the command files
// share (commands.hpp), and the message commands create, post and recv
// (ask and recv's --reply-with: request_cmds.cpp).
// The other families: views.cpp (stat, ls, heirs), box_ops.cpp (rm, verify,
// gc, dump, resize, give-away), watch.cpp, metrics.cpp (metrics, and the
// --prometheus text of stat), pool_cmds.cpp.
//
// Exit codes: 0 success, 1 failure, 2 usage error, 3 refused (post: a message
// was not stored; recv: nothing arrived before the timeout).
#include <limits.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <limits>
#include <map>
#include <optional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_args.hpp"
#include "commands.hpp"
#include "shmbox/shmbox.hpp"

namespace shmbox_cli {

int fail(const std::error_code& ec) {
  say(shmbox::explain(ec));
  return kExitFail;
}

std::string octal(std::uint32_t mode) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%04o", mode);
  return buf;
}

shmbox::options box_options(const create_args& a) {
  shmbox::options o;
  o.capacity = a.capacity;
  o.slot_size = a.slot_size;
  o.overflow = *shmbox::parse_policy(a.policy);  // validated by the option's check
  o.mode = static_cast<std::uint32_t>(std::stoul(a.mode, nullptr, 8));
  o.max_producers = a.max_producers;
  o.block_timeout = std::chrono::milliseconds(a.block_timeout_ms);
  o.lease = std::chrono::milliseconds(a.lease_ms);
  o.spin = std::chrono::microseconds(a.spin_us);
  o.dead_letters = a.dead_letters;
  o.dead_letter_refused = a.dead_letter_refused;
  o.max_capacity = a.max_capacity;
  o.stash = a.stash;
  o.priority = a.priority;
  o.buffer = a.buffer;
  if (a.lanes > 1) o.lanes.resize(a.lanes);
  return o;
}

int post_messages(shmbox::Producer& producer, const std::string& box, const std::vector<std::string>& messages,
                  const shmbox::post_options& how) {
  int worst = kExitOk;
  std::size_t index = 0;
  auto post_one = [&](const std::string& msg) {
    ++index;
    const shmbox::post_status st = producer.post(msg, how);
    if (shmbox::is_stored(st)) return;
    const std::string which = "message " + std::to_string(index);
    switch (st) {
      case shmbox::post_status::full:
        say(which + " refused: full (box '" + box + "' is full, policy reject)");
        break;
      case shmbox::post_status::dropped:
        say(which + " refused: dropped (box '" + box + "' is full, policy drop-newest)");
        break;
      case shmbox::post_status::timeout:
        say(which + " refused: timeout (no space in box '" + box + "' before the timeout)");
        break;
      case shmbox::post_status::over_quota:
        say(which + " refused: over quota (this producer already has its quota of messages waiting in box '" + box +
            "'; see 'shmbox stat " + box + "')");
        break;
      case shmbox::post_status::too_large:
        say(which + " refused: too large (" + std::to_string(msg.size()) + " bytes; box '" + box + "' takes at most " +
            std::to_string(producer.max_message_size()) + ", see --slot-size)");
        worst = kExitFail;
        return;
      default:
        say(which + ": " + shmbox::explain(producer.last_error()));
        worst = kExitFail;
        return;
    }
    if (worst == kExitOk) worst = kExitRefused;
  };
  if (!messages.empty()) {
    for (const auto& m : messages) post_one(m);
  } else {
    std::string line;
    while (std::getline(std::cin, line)) post_one(line);
  }
  return worst;
}

}  // namespace shmbox_cli

namespace {

using namespace shmbox_cli;
using json = nlohmann::ordered_json;

// ---- create ---------------------------------------------------------------

// "L=VALUE" -> (L, VALUE); validated by the option's check.
std::pair<std::uint32_t, std::string> lane_pair(const std::string& s) {
  const auto eq = s.find('=');
  return {static_cast<std::uint32_t>(std::stoul(s.substr(0, eq))), s.substr(eq + 1)};
}

int cmd_create(const create_args& a) {
  shmbox::options o = box_options(a);
  if (a.default_lane >= 0) {
    if (a.default_lane >= a.lanes) {
      std::cerr << "shmbox: --default-lane " << a.default_lane << ": the box has lanes 0.." << a.lanes - 1 << " (see --lanes)\n";
      return kExitUsage;
    }
    o.default_lane = static_cast<std::uint32_t>(a.default_lane);
  }
  const bool quota_share = !a.quota.empty() && a.quota.back() == '%';  // --quota P%: per lane, of its capacity
  if (a.lanes > 1 || !a.lane_capacity.empty() || !a.lane_policy.empty() || !a.lane_quota.empty() || quota_share) {
    o.lanes.resize(a.lanes);
    // --lane-capacity, --lane-policy, --lane-quota: "L=VALUE", L one of the box's lanes.
    auto per_lane = [&](const char* flag, const std::vector<std::string>& specs, auto set) {
      for (const auto& spec : specs) {
        const auto [lane, v] = lane_pair(spec);
        if (lane >= a.lanes) {
          say(std::string(flag) + " " + spec + ": the box has lanes 0.." + std::to_string(a.lanes - 1) + " (see --lanes)");
          return false;
        }
        set(o.lanes[lane], v);
      }
      return true;
    };
    if (!per_lane("--lane-capacity", a.lane_capacity,
                  [](shmbox::lane_options& lo, const std::string& v) { lo.capacity = static_cast<std::uint32_t>(std::stoul(v)); }) ||
        !per_lane("--lane-policy", a.lane_policy,
                  [](shmbox::lane_options& lo, const std::string& v) { lo.overflow = shmbox::parse_policy(v); }))
      return kExitUsage;
    // --quota P%: of each lane's capacity (at least 1); --lane-quota L=N overrides one lane
    if (quota_share) {
      const std::uint64_t pct = std::stoul(a.quota);
      for (auto& lo : o.lanes) {
        const std::uint64_t cap = lo.capacity != 0 ? lo.capacity : o.capacity;
        lo.quota = static_cast<std::uint32_t>(std::max<std::uint64_t>(1, cap * pct / 100));
      }
    }
    if (!per_lane("--lane-quota", a.lane_quota,
                  [](shmbox::lane_options& lo, const std::string& v) { lo.quota = static_cast<std::uint32_t>(std::stoul(v)); }))
      return kExitUsage;
  }
  if (!a.quota.empty() && !quota_share) o.quota = static_cast<std::uint32_t>(std::stoul(a.quota));
  auto box = shmbox::Box::create(a.name, o);
  if (!box) return fail(box.error());
  std::cout << "created box '" << a.name << "': capacity " << capacity_text(shmbox::info(*box)) << ", slot size " << o.slot_size
            << " bytes, policy " << shmbox::to_string(o.overflow) << ", " << box->lane_count()
            << (box->lane_count() == 1 ? " lane" : " lanes")
            << (box->lane_count() == 1 ? std::string() : " (plain posts go to lane " + std::to_string(box->default_lane()) + ")")
            << ", mode " << octal(o.mode) << "\n";
  return kExitOk;
}

// ---- post -----------------------------------------------------------------

int cmd_post(const post_args& a) {
  auto box = shmbox::Box::open(a.name, {.any_owner = a.any_owner});
  if (!box) return fail(box.error());
  auto producer = shmbox::Producer::attach(*box);
  if (!producer) return fail(producer.error());
  // No --lane: a plain post, into the box's default lane; no --timeout: the box's block timeout.
  shmbox::post_options how;
  if (a.lane >= 0) how.lane = static_cast<std::uint32_t>(a.lane);
  if (a.timeout_ms >= 0) how.timeout = std::chrono::milliseconds(a.timeout_ms);
  how.priority = a.priority;
  return post_messages(*producer, a.name, a.messages, how);
}

// ---- recv -----------------------------------------------------------------

volatile sig_atomic_t g_stop = 0;
void on_stop_signal(int) { g_stop = 1; }

// recv's output: whole lines only. Lines are gathered and written with
// write(2) at line boundaries, each write at most PIPE_BUF bytes (unless one
// line is longer: then that line alone). A pipe takes a write of up to
// PIPE_BUF bytes whole, so a reader never sees a cut line, even when recv is
// killed mid-stream: what it printed is whole messages, and what it did not
// print is not committed (see receive_and_print).
class line_output {
 public:
  bool add(std::string_view prefix, std::string_view msg) {
    const std::size_t n = prefix.size() + msg.size() + 1;
    if (!buf_.empty() && buf_.size() + n > PIPE_BUF && !flush()) return false;
    buf_.append(prefix).append(msg).push_back('\n');
    return buf_.size() < PIPE_BUF || flush();
  }
  bool flush() {
    const bool ok = shmbox_cli::write_all(STDOUT_FILENO, buf_.data(), buf_.size());
    buf_.clear();
    return ok;
  }

 private:
  std::string buf_;
};

// Prints messages as the owner: --max/--all as asked, or (--follow) until a
// signal. Returns the exit code. Two-phase: each batch is read (Owner::read),
// printed in whole lines, and committed only once it is all written. A recv
// killed (or failing to write) before the commit has committed nothing it did
// not print: the next owner receives that batch again, flagged redelivered
// (at-least-once towards the output; a repeat says so with --verbose).
int receive_and_print(shmbox::Owner& owner, const recv_args& a) {
  if (a.accept_give_away) owner.accept_give_away_requests(true);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(a.timeout_ms);
  const std::size_t want = (a.all || a.follow) ? std::numeric_limits<std::size_t>::max() : a.max;
  std::size_t got = 0;
  shmbox::batch batch;
  line_output out;
  std::string prefix;
  while (got < want && g_stop == 0) {
    batch.clear();
    std::chrono::nanoseconds left;
    bool sliced = false;  // waiting in slices of 200 ms, to notice SIGINT/SIGTERM
    if (a.follow) {
      left = std::chrono::milliseconds(200);
    } else {
      // Wait (up to the deadline) only while nothing has arrived; with --all,
      // stop once the box is empty after the first message.
      left = std::chrono::duration_cast<std::chrono::nanoseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() < 0 || (a.all && got > 0)) left = std::chrono::nanoseconds(0);
      if (left > std::chrono::milliseconds(200)) {
        left = std::chrono::milliseconds(200);
        sliced = true;
      }
    }
    const std::size_t chunk = std::min<std::size_t>(want - got, 4096);
    const shmbox::recv_status st = owner.read(batch, {.max = chunk, .timeout = left});
    bool written = true;
    for (std::size_t i = 0; i < batch.size() && written; ++i) {
      if (!a.reply_with.empty() && batch.is_request(i)) {  // a service: answered, not printed (request_cmds.cpp)
        (void)answer_request(owner, batch, i, a.name, a.reply_with);
        continue;
      }
      prefix.clear();
      if (a.verbose)
        prefix.append("lane=").append(std::to_string(batch.lane(i))).append(" redelivered=").append(batch.redelivered(i) ? "yes " : "no ");
      written = a.raw ? out.add(prefix, batch[i]) : out.add(prefix, message_line(batch[i]));
    }
    if (!batch.empty()) {
      if (!written || !out.flush()) {
        const int err = errno;
        std::cerr << "shmbox: cannot write to standard output (" << std::strerror(err) << "); the " << batch.size()
                  << " messages read last stay in box '" << a.name
                  << "' and go to its next owner, flagged redelivered\n";
        return kExitFail;
      }
      // Printed: now commit. Lost ones (the lease expired meanwhile) were
      // printed and go to the new owner too, flagged redelivered.
      std::size_t lost = 0;
      if (owner.commit(&lost) != shmbox::recv_status::ok) return fail(owner.last_error());
    }
    got += batch.size();
    if (st == shmbox::recv_status::ok) continue;
    if (st == shmbox::recv_status::timeout || st == shmbox::recv_status::empty) {
      if (a.follow || sliced) continue;
      break;
    }
    if (st == shmbox::recv_status::not_owner && a.accept_give_away) {
      // Given away on request (shmbox give-away): done, not a failure.
      say("box '" + a.name + "' was given away on request");
      return kExitOk;
    }
    return fail(owner.last_error());
  }
  if (a.follow) return kExitOk;  // interrupted: the box passes to its heir, if any
  return got > 0 ? kExitOk : kExitRefused;
}

int cmd_recv(const recv_args& a) {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
  if (a.heir) {
    auto box = shmbox::Box::open(a.name, {.any_owner = a.any_owner});
    if (!box) return fail(box.error());
    auto heir = shmbox::Heir::enlist(*box, a.data);
    if (!heir) return fail(heir.error());
    say("waiting as heir of box '" + a.name + "' (position " + std::to_string(heir->position()) + ")");
    // --timeout bounds the wait to be given the box (then, as owner, the
    // wait for messages as usual); without it the heir waits until given
    // the box or interrupted.
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::milliseconds(a.timeout_ms);
    for (;;) {
      auto slice = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::milliseconds(200));
      if (a.timeout_given)
        slice = std::clamp(std::chrono::duration_cast<std::chrono::nanoseconds>(give_up - std::chrono::steady_clock::now()),
                           std::chrono::nanoseconds(0), slice);
      auto owner = heir->await_transfer(slice);
      if (owner) {
        say("given box '" + a.name + "': " + transfer_text(owner->transfer()));
        return receive_and_print(*owner, a);
      }
      if (owner.error() != shmbox::errc::timed_out) return fail(owner.error());
      if (g_stop != 0) return kExitRefused;  // interrupted before being given the box
      if (a.timeout_given && std::chrono::steady_clock::now() >= give_up) {
        const shmbox::owner_info o = shmbox::info(*box).owner;
        say("box '" + a.name + "' was not given to this heir within " + std::to_string(a.timeout_ms) + " ms (owner: " +
            (o.pid == 0 ? std::string("none") : "pid " + std::to_string(o.pid) + (o.alive ? ", alive" : ", dead")) +
            "); it withdrew; wait longer with a larger --timeout, or without one");
        return kExitRefused;
      }
    }
  }
  auto box = shmbox::Box::open(a.name, {.any_owner = a.any_owner});
  if (!box) return fail(box.error());
  auto owner = shmbox::Owner::acquire(*box);
  if (!owner) return fail(owner.error());
  return receive_and_print(*owner, a);
}

// ---- bridge -------------------------------------------------------------------
// `shmbox bridge ARGS`: runs shmbox-bridge ARGS (docs/bridge.md), the one
// executable that links libnats: from this executable's directory, else PATH.
int run_bridge(int argc, char** argv) {
  std::vector<char*> args;
  std::string exe = "shmbox-bridge";
  args.push_back(exe.data());
  for (int i = 2; i < argc; ++i) args.push_back(argv[i]);
  args.push_back(nullptr);
  char self[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n > 0) {
    std::string dir(self, static_cast<std::size_t>(n));
    dir.resize(dir.rfind('/') + 1);
    const std::string beside = dir + "shmbox-bridge";
    execv(beside.c_str(), args.data());
  }
  execvp("shmbox-bridge", args.data());
  std::cerr << "shmbox: bridge: shmbox-bridge is not installed (" << std::strerror(errno)
            << "): it is built when libnats-dev is present (apt-get install libnats-dev, then meson setup -Dbridge=enabled)\n";
  return kExitFail;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "bridge") == 0) return run_bridge(argc, argv);
  parsed a;
  const int early = parse_args(argc, argv, a);
  if (early >= 0) return early;
  switch (a.cmd) {
    case command::create: return cmd_create(a.create);
    case command::post: return cmd_post(a.post);
    case command::recv: return cmd_recv(a.recv);
    case command::ask: return cmd_ask(a.ask);
    case command::stat: return cmd_stat(a.name, a.json, a.prometheus);
    case command::ls: return cmd_ls(a.json, a.plain);
    case command::heirs: return cmd_heirs(a.name, a.json);
    case command::rm: return cmd_rm(a.name);
    case command::verify: return cmd_verify(a.name, a.json);
    case command::gc: return cmd_gc(a);
    case command::watch: return cmd_watch(a);
    case command::dump: return cmd_dump(a);
    case command::give_away: return cmd_give_away(a);
    case command::resize: return cmd_resize(a);
    case command::metrics: return cmd_metrics(a.listen);
    case command::pool_create:
    case command::pool_run:
    case command::pool_ls:
    case command::pool_stat:
    case command::pool_watch:
    case command::pool_rm:
    case command::pool_rm_group:
    case command::pool_cull:
    case command::pool_reconfigure:
    case command::pool_take: return cmd_pool(a);
    case command::none: break;
  }
  return kExitUsage;
}
