// tools/shmbox.cpp - the shmbox command line.
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
#include "base/shm_file.hpp"
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

json counters_json(const shmbox::counters& c) {
  return json{{"posted", c.posted},
              {"filtered", c.filtered},
              {"buffer_dropped", c.buffer_dropped},
              {"stored", c.stored},
              {"delivered", c.delivered},
              {"rejected", c.rejected},
              {"too_large", c.too_large},
              {"timeouts", c.timeouts},
              {"dropped_newest", c.dropped_newest},
              {"shrunk", c.shrunk},
              {"dropped_oldest", c.dropped_oldest},
              {"abandoned", c.abandoned},
              {"aborted", c.aborted},
              {"redelivered", c.redelivered},
              {"dead_lettered", c.dead_lettered},
              {"dead_letter_failed", c.dead_letter_failed},
              {"stashed", c.stashed},
              {"unstashed", c.unstashed}};
}

// " (resizable up to N)" for a box whose lanes have a reserve ("" none).
std::string reserve_text(const shmbox::box_info& i) {
  std::uint64_t reserve = 0;
  for (const auto& l : i.lanes) reserve += l.max_capacity != 0 ? l.max_capacity : l.capacity;
  for (const auto& l : i.lanes)
    if (l.max_capacity != 0) return " (resizable up to " + std::to_string(reserve) + ": shmbox resize)";
  return "";
}

json lanes_json(const shmbox::box_info& i) {
  json lanes = json::array();
  for (std::size_t l = 0; l < i.lanes.size(); ++l)
    lanes.push_back(json{{"lane", l},
                         {"capacity", i.lanes[l].capacity},
                         {"max_capacity", i.lanes[l].max_capacity == 0 ? json(nullptr) : json(i.lanes[l].max_capacity)},
                         {"policy", std::string(shmbox::to_string(i.lanes[l].overflow))},
                         {"depth", i.lanes[l].depth},
                         {"parked", i.lanes[l].parked},
                         {"counters", counters_json(i.lanes[l].count)}});
  return lanes;
}

json heirs_json(const shmbox::box_info& i) {
  json heirs = json::array();
  for (const auto& h : i.heirs)
    heirs.push_back(json{{"entry", h.entry},
                         {"pid", h.pid},
                         {"pid_ns", h.pid_ns},
                         {"same_namespace", h.same_namespace},
                         {"alive", h.alive},
                         {"listener", h.listener},
                         {"data", h.data}});
  return heirs;
}

json transfer_json(const shmbox::transfer_record& t) {
  if (t.epoch == 0) return nullptr;
  return json{{"from", t.from_pid},
              {"to", t.to_pid},
              {"from_pid_ns", t.from_pid_ns},
              {"to_pid_ns", t.to_pid_ns},
              {"reason", std::string(shmbox::to_string(t.reason))},
              {"data", t.data},
              {"epoch", t.epoch}};
}

json producers_json(const shmbox::box_info& i) {
  json producers = json::array();
  for (const auto& p : i.producers)
    producers.push_back(json{{"entry", p.entry},
                             {"pid", p.pid},
                             {"pid_ns", p.pid_ns},
                             {"same_namespace", p.same_namespace},
                             {"alive", p.alive},
                             {"stored", p.stored},
                             {"refused", p.refused},
                             {"aborted", p.aborted}});
  return producers;
}

// `shmbox stat --json`'s "bridges": one object per bridge (export, import).
json bridges_json(const std::vector<bridge_info>& bridges) {
  json out = json::array();
  for (const bridge_info& b : bridges) {
    json counters = json::object();
    for (std::uint32_t c = 0; c < kBridgeCounters; ++c) counters[std::string(to_string(static_cast<bridge_counter>(c)))] = b.counters[c];
    out.push_back(json{{"role", to_string(b.role)},
                       {"pid", b.pid},
                       {"alive", b.alive},
                       {"nats", b.nats},
                       {"stream", b.stream},
                       {"subject", b.subject},
                       {"durable", b.durable.empty() ? json(nullptr) : json(b.durable)},
                       {"started_unix_ns", b.started_unix_ns},
                       {"counters", counters}});
  }
  return out;
}

json info_json(const shmbox::box_info& i) {
  return json{{"name", i.name},
              {"capacity", i.capacity},
              {"slot_size", i.slot_size},
              {"policy", std::string(shmbox::to_string(i.overflow))},
              {"depth", i.depth},
              {"owner", json{{"pid", i.owner.pid},
                             {"pid_ns", i.owner.pid_ns},
                             {"same_namespace", i.owner.same_namespace},
                             {"alive", i.owner.alive},
                             {"epoch", i.owner.epoch},
                             {"state", i.owner.state},
                             {"lease_expired", i.owner.expired},
                             {"accepts_requests", i.accepts_requests}}},
              {"orphaned", i.orphaned},
              {"lease_ms", i.lease.count()},
              {"spin_ns", i.spin.count()},
              {"default_lane", i.default_lane},
              {"dead_letters", i.dead_letters.empty() ? json(nullptr) : json(i.dead_letters)},
              {"dead_letter_refused", i.dead_letter_refused},
              {"stash", i.stash == 0 ? json(nullptr) : json{{"entries", i.stash}, {"parked", i.parked}}},
              {"ordering", !i.buffer.empty() ? "buffer" : i.priority ? "priority" : "fifo"},
              {"buffer", i.buffer.empty() ? json(nullptr) : json(i.buffer)},
              {"heirs", heirs_json(i)},
              {"last_transfer", transfer_json(i.last_transfer)},
              {"producers_attached", i.producers_attached},
              {"producers", producers_json(i)},
              {"max_producers", i.max_producers},
              {"block_timeout_ms", i.block_timeout.count()},
              {"segment_bytes", i.segment_bytes},
              {"mode", octal(i.mode)},
              {"uid", i.uid},
              {"lanes", lanes_json(i)},
              {"counters", counters_json(i.count)}};
}

// The PID-NS column: "this" for the caller's pid namespace, else its inode.
std::string ns_cell(std::uint64_t pid_ns, bool same) {
  if (same) return "this";
  return pid_ns == 0 ? "other" : std::to_string(pid_ns);
}

// "" for a process of this pid namespace, else ", pid namespace 4026532177"
// (its pid means another process here, or none).
std::string ns_note(std::uint64_t pid_ns, bool same) {
  if (same) return "";
  return pid_ns == 0 ? ", other pid namespace" : ", pid namespace " + std::to_string(pid_ns);
}

std::string owner_text(const shmbox::owner_info& o) {
  if (o.pid == 0) return "none";
  return "pid " + std::to_string(o.pid) + " (" + (o.expired ? "lease expired" : o.alive ? "alive" : "dead") +
         ns_note(o.pid_ns, o.same_namespace) + "), epoch " + std::to_string(o.epoch);
}

std::string transfer_text(const shmbox::transfer_record& t) {
  if (t.epoch == 0) return "none";
  return std::string(shmbox::to_string(t.reason)) + " from pid " + std::to_string(t.from_pid) + " to pid " +
         std::to_string(t.to_pid) + " (epoch " + std::to_string(t.epoch) +
         (t.to_pid_ns != t.from_pid_ns && t.from_pid != 0 ? ", across pid namespaces" : "") + ")" +
         (t.data.empty() ? std::string() : ", data '" + escaped(t.data) + "'");
}

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
  if (a.lanes > 1 || !a.lane_capacity.empty() || !a.lane_policy.empty()) {
    o.lanes.resize(a.lanes);
    for (const auto& lc : a.lane_capacity) {
      const auto [lane, v] = lane_pair(lc);
      if (lane >= a.lanes) {
        say("--lane-capacity " + lc + ": the box has lanes 0.." + std::to_string(a.lanes - 1) + " (see --lanes)");
        return kExitUsage;
      }
      o.lanes[lane].capacity = static_cast<std::uint32_t>(std::stoul(v));
    }
    for (const auto& lp : a.lane_policy) {
      const auto [lane, v] = lane_pair(lp);
      if (lane >= a.lanes) {
        say("--lane-policy " + lp + ": the box has lanes 0.." + std::to_string(a.lanes - 1) + " (see --lanes)");
        return kExitUsage;
      }
      o.lanes[lane].overflow = shmbox::parse_policy(v);
    }
  }
  auto box = shmbox::Box::create(a.name, o);
  if (!box) return fail(box.error());
  std::cout << "created box '" << a.name << "': capacity " << box->capacity() << ", slot size " << o.slot_size
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
      prefix.clear();
      if (a.verbose)
        prefix.append("lane=").append(std::to_string(batch.lane(i))).append(" redelivered=").append(batch.redelivered(i) ? "yes " : "no ");
      written = out.add(prefix, batch[i]);
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

// ---- stat / ls / rm ---------------------------------------------------------
int cmd_stat(const std::string& name, bool as_json, bool prometheus) {
  auto box = shmbox::Box::inspect(name);
  if (!box) return fail(box.error());
  const shmbox::box_info i = shmbox::info(*box);
  // A file planted at a bridge status path: said on stderr, the box shown all the same.
  std::vector<std::string> bridge_problems;
  const std::vector<bridge_info> bridges = read_bridges(i.name, &bridge_problems);
  for (const std::string& p : bridge_problems) say("warning: " + p);
  if (prometheus) {
    std::cout << prometheus_text(i) << prometheus_bridge_text(i.name, bridges);
    return kExitOk;
  }
  if (as_json) {
    // Strings from the segment (heir data, transfer data) may be any bytes:
    // what is not UTF-8 becomes U+FFFD instead of an exception.
    json j = info_json(i);
    j["bridges"] = bridges_json(bridges);
    std::cout << j.dump(2, ' ', false, json::error_handler_t::replace) << "\n";
    return kExitOk;
  }
  const auto& c = i.count;
  std::cout << "box          " << i.name << "\n"
            << "policy       " << shmbox::to_string(i.overflow) << "\n"
            << "capacity     " << i.capacity << " messages of up to " << i.slot_size << " bytes" << reserve_text(i) << "\n"
            << "depth        " << i.depth << " / " << i.capacity
            << (i.parked != 0 ? " (+ " + std::to_string(i.parked) + " parked in the owner's stash)" : std::string()) << "\n"
            << "stash        "
            << (i.stash == 0 ? std::string("none")
                             : std::to_string(i.parked) + " parked of " + std::to_string(i.stash) + " entries (stashed " +
                                   std::to_string(c.stashed) + ", unstashed " + std::to_string(c.unstashed) +
                                   "; parked messages count against their lane's capacity)")
            << "\n"
            << "ordering     "
            << (!i.buffer.empty() ? "custom buffer '" + i.buffer + "' (its owner's buffer orders and drops; lanes first)"
                : i.priority        ? std::string("priority (lowest value first, FIFO among equals; lanes first)")
                                    : std::string("fifo"))
            << "\n"
            << "owner        " << owner_text(i.owner) << ", " << i.owner.state
            << (i.orphaned ? ", ORPHANED (no live heir: any process may claim it)" : "") << "\n"
            << "give-away    "
            << (!i.owner.alive ? "no live owner to ask"
                : i.accepts_requests ? "the owner hands the box over on request (shmbox give-away " + i.name + " PID)"
                                     : std::string("the owner does not accept requests"))
            << "\n"
            << "lease        " << (i.lease.count() == 0 ? std::string("none (only death ends it)") : std::to_string(i.lease.count()) + " ms") << "\n"
            << "spin         " << i.spin.count() / 1000 << " us before sleeping (adaptive wait)\n"
            << "default lane " << i.default_lane
            << (i.lanes.size() > 1 ? " (plain posts; lane 0, the control lane, takes only --lane 0 / --control)\n"
                                   : " (the only lane)\n")
            << "heirs        " << i.heirs.size() << "\n"
            << "dead letters " << (i.dead_letters.empty() ? std::string("none") : "-> box '" + i.dead_letters + "'")
            << (i.dead_letter_refused ? " (drops and refused posts)" : "")
            << (i.dead_letters.empty() ? std::string() : ", " + std::to_string(c.dead_lettered) + " forwarded, " +
                                                             std::to_string(c.dead_letter_failed) + " not taken")
            << "\n"
            << "transfer     " << transfer_text(i.last_transfer) << "\n"
            << "producers    " << i.producers_attached << " attached (of " << i.max_producers << " entries)\n"
            << "segment      /dev/shm/shmbox." << i.name << ", " << i.segment_bytes << " bytes, mode " << octal(i.mode)
            << "\n"
            << "posted       " << c.posted << "\n"
            << "stored       " << c.stored << "\n"
            << "delivered    " << c.delivered << "\n"
            << "rejected     " << c.rejected << "\n"
            << "too_large    " << c.too_large << "\n"
            << "timeouts     " << c.timeouts << "\n"
            << "dropped_newest " << c.dropped_newest
            << (c.shrunk != 0 ? " (" + std::to_string(c.shrunk) + " of them stored, dropped by a shrink)" : std::string()) << "\n"
            << "dropped_oldest " << c.dropped_oldest << "\n"
            << "filtered     " << c.filtered
            << (c.buffer_dropped != 0 ? " (" + std::to_string(c.buffer_dropped) + " of them dropped by the custom buffer)" : std::string())
            << "\n"
            << "abandoned    " << c.abandoned << "\n"
            << "aborted      " << c.aborted << " (loans given back)\n"
            << "redelivered  " << c.redelivered << "\n";
  for (const bridge_info& b : bridges) {
    std::cout << "bridge       " << to_string(b.role) << (b.role == bridge_role::export_ ? " to " : " from ") << "stream '"
              << printable(b.stream) << "' subject '" << printable(b.subject) << "'"
              << (b.durable.empty() ? std::string() : " durable '" + printable(b.durable) + "'") << " at " << printable(b.nats)
              << ", pid " << b.pid << (b.alive ? " (working)" : " (not running)") << "\n            ";
    for (std::uint32_t c = 0; c < kBridgeCounters; ++c) {
      const auto which = static_cast<bridge_counter>(c);
      const bool mine = b.role == bridge_role::export_ ? c <= static_cast<std::uint32_t>(bridge_counter::redeliveries)
                                                       : c >= static_cast<std::uint32_t>(bridge_counter::redeliveries);
      if (mine) std::cout << " " << to_string(which) << " " << b.counters[c];
    }
    std::cout << "\n";
  }
  if (i.lanes.size() > 1) {
    std::printf("%-5s %-12s %12s %10s %10s %10s %10s %10s\n", "LANE", "POLICY", "DEPTH/CAP", "POSTED", "DELIVERED",
                "REJECTED", "DROPPED", "ABANDONED");
    for (std::size_t l = 0; l < i.lanes.size(); ++l) {
      const auto& li = i.lanes[l];
      const std::string depth = std::to_string(li.depth) + "/" + std::to_string(li.capacity);
      std::printf("%-5zu %-12s %12s %10llu %10llu %10llu %10llu %10llu\n", l,
                  std::string(shmbox::to_string(li.overflow)).c_str(), depth.c_str(),
                  static_cast<unsigned long long>(li.count.posted), static_cast<unsigned long long>(li.count.delivered),
                  static_cast<unsigned long long>(li.count.rejected + li.count.timeouts),
                  static_cast<unsigned long long>(li.count.dropped_newest + li.count.dropped_oldest + li.count.filtered),
                  static_cast<unsigned long long>(li.count.abandoned));
    }
  }
  if (!i.producers.empty()) {
    // The producer table: entries held by live processes, and by dead ones
    // until a new producer reuses the entry.
    std::printf("%-6s %-8s %-6s %12s %12s %12s  %s\n", "ENTRY", "PID", "ALIVE", "STORED", "REFUSED", "ABORTED", "PID-NS");
    for (const auto& p : i.producers)
      std::printf("%-6u %-8u %-6s %12llu %12llu %12llu  %s\n", p.entry, p.pid, p.alive ? "yes" : "no",
                  static_cast<unsigned long long>(p.stored), static_cast<unsigned long long>(p.refused),
                  static_cast<unsigned long long>(p.aborted), ns_cell(p.pid_ns, p.same_namespace).c_str());
  }
  std::fflush(stdout);
  return kExitOk;
}

// ---- ls ----------------------------------------------------------------------
// One row per segment. DROPS counts every posted message that will never be
// delivered from this box: rejected + too_large + timeouts + dropped_newest +
// dropped_oldest + filtered + abandoned (so posted = delivered + depth +
// aborted + DROPS; dead-lettered messages are among the drops too). MARKS:
// ORPHANED (owner dead or expired, no live heir), FOREIGN (the segment belongs
// to another uid). A segment that cannot be opened as a box gets a mark
// (CORRUPT, INCOMPLETE, NO-ACCESS, UNUSABLE; NOT-A-BOX for a FIFO, link or
// anything else that is not a regular file) and a short reason instead of
// the columns. POOL, last: the pool a member box belongs to (shmbox pool
// stat); empty for other boxes, and the column is left out when no listed box
// is a member (so existing parsers of ls still find DROPS or MARKS last).

std::uint64_t drops_of(const shmbox::counters& c) {
  return c.rejected + c.too_large + c.timeouts + c.dropped_newest + c.dropped_oldest + c.filtered + c.abandoned;
}

// A mark and a short reason for a segment Box::inspect cannot open.
std::pair<std::string, std::string> unusable_reason(const std::error_code& ec) {
  if (ec.category() == shmbox::category()) {
    switch (static_cast<shmbox::errc>(ec.value())) {
      case shmbox::errc::not_a_box: return {"CORRUPT", "not a shmbox segment (wrong magic)"};
      case shmbox::errc::version_mismatch: return {"CORRUPT", "made by an incompatible layout version"};
      case shmbox::errc::truncated: return {"CORRUPT", "truncated (smaller than its header says)"};
      case shmbox::errc::corrupt: return {"CORRUPT", "header breaks an invariant"};
      case shmbox::errc::incomplete: return {"INCOMPLETE", "being created, or its creator died half-way"};
      case shmbox::errc::permission_denied: return {"NO-ACCESS", "permission denied"};
      case shmbox::errc::invalid_name: return {"UNUSABLE", "not a valid box name"};
      default: break;
    }
  }
  return {"UNUSABLE", ec.message()};
}

// "[####......]": the fill of a box, 10 characters, rounded up so that a
// box holding anything shows at least one '#'.
std::string fill_bar(std::uint64_t depth, std::uint64_t capacity) {
  constexpr std::uint64_t kWidth = 10;
  std::uint64_t n = 0;
  if (capacity != 0) n = std::min<std::uint64_t>(kWidth, (depth * kWidth + capacity - 1) / capacity);
  return "[" + std::string(n, '#') + std::string(kWidth - n, '.') + "]";
}

std::string owner_cell(const shmbox::owner_info& o) {
  if (o.pid == 0) return "none";
  return std::to_string(o.pid) + (o.same_namespace ? "" : "*") + (o.expired ? " expired" : o.alive ? " alive" : " dead");
}

int cmd_ls(bool as_json) {
  auto names = shmbox::Box::list();
  if (!names) return fail(names.error());
  const std::uint32_t my_uid = ::geteuid();
  // The pool each member box belongs to (the POOL column, "pool" in JSON).
  const std::map<std::string, std::string> pools = pool_of_boxes();
  json all = json::array();
  struct row {
    std::string name;
    std::vector<std::string> cells;  // the columns after NAME; empty for an unusable segment
    std::string marks;
    std::string pool;  // "" when the box is no pool's member
  };
  std::vector<row> rows;
  for (const auto& n : *names) {
    auto box = shmbox::Box::inspect(n);
    if (!box) {
      if (box.error() == shmbox::errc::not_found) continue;  // removed since list()
      auto [mark, reason] = unusable_reason(box.error());
      // A corrupt header: the library's sentence (when it is about this
      // segment) says which part, e.g. "header offsets disagree with its geometry".
      const std::string said = shmbox::explain(box.error()), prefix = "box '" + n + "': ";
      if (box.error() == shmbox::errc::corrupt && said.rfind(prefix, 0) == 0 && said.size() - prefix.size() <= 64)
        reason = said.substr(prefix.size());
      // A FIFO, link, directory, socket, device... at the box path: not a box
      // at all (the library refused it unopened; lstat says which, for the row).
      struct stat st {};
      if (box.error() == shmbox::errc::not_a_box && ::lstat(("/dev/shm/shmbox." + n).c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
        mark = "NOT-A-BOX";
        reason = std::string(shmbox::detail::file_kind(st.st_mode)) + (S_ISLNK(st.st_mode) ? " (not followed)" : "") + ", not a box";
      }
      if (as_json) {
        std::string status = mark;  // "corrupt", "incomplete", "no_access", "unusable"
        for (auto& ch : status) ch = ch == '-' ? '_' : static_cast<char>(ch - 'A' + 'a');
        all.push_back(json{{"name", n}, {"error", shmbox::explain(box.error())}, {"status", status}, {"reason", reason}});
      } else {
        rows.push_back({n, {}, mark + "  unusable: " + reason, {}});
      }
      continue;
    }
    const shmbox::box_info i = shmbox::info(*box);
    const bool foreign = i.uid != my_uid;
    const auto member_of = pools.find(n);
    const std::string pool = member_of == pools.end() ? std::string() : member_of->second;
    if (as_json) {
      json j = info_json(i);
      j["status"] = "ok";
      j["drops"] = drops_of(i.count);
      j["foreign"] = foreign;
      j["pool"] = pool.empty() ? json(nullptr) : json(pool);
      all.push_back(std::move(j));
      continue;
    }
    std::string marks;
    if (i.orphaned) marks += "ORPHANED";
    if (foreign) marks += std::string(marks.empty() ? "" : " ") + "FOREIGN";
    rows.push_back({n,
                    {std::string(shmbox::to_string(i.overflow)), std::to_string(i.depth) + "/" + std::to_string(i.capacity),
                     fill_bar(i.depth, i.capacity), owner_cell(i.owner), i.owner.pid == 0 ? "-" : i.owner.state,
                     std::to_string(i.heirs.size()), std::to_string(drops_of(i.count))},
                    marks,
                    pool});
  }
  if (as_json) {
    std::cout << all.dump(2, ' ', false, json::error_handler_t::replace) << "\n";  // as in stat --json
    return kExitOk;
  }
  if (rows.empty()) return kExitOk;
  // Column widths from the content; NAME gets what is left of 100 columns
  // (a longer name goes on a line of its own, its row below it).
  const std::vector<std::string> heads = {"POLICY", "DEPTH/CAP", "FILL", "OWNER", "STATE", "HEIRS", "DROPS"};
  const std::vector<bool> right = {false, true, false, false, false, true, true};
  std::vector<std::size_t> width(heads.size());
  for (std::size_t c = 0; c < heads.size(); ++c) width[c] = heads[c].size();
  // MARKS and POOL, the last columns, are there only when some row has one
  // (a row without one ends at DROPS or MARKS).
  std::size_t marks_width = 0, pool_width = 0, name_width = 4;
  for (const auto& r : rows) {
    name_width = std::max(name_width, r.name.size());
    if (r.cells.empty()) continue;
    for (std::size_t c = 0; c < heads.size(); ++c) width[c] = std::max(width[c], r.cells[c].size());
    marks_width = std::max(marks_width, r.marks.size());
    pool_width = std::max(pool_width, r.pool.size());
  }
  if (marks_width != 0 && pool_width != 0) marks_width = std::max<std::size_t>(marks_width, 5);  // "MARKS"
  std::size_t rest = 0;
  for (const std::size_t w : width) rest += w + 1;
  if (marks_width != 0) rest += marks_width + 1;
  // POOL takes from NAME at most 13 columns; past what is left of the 100, a
  // pool name is cut ("~" at its end; the box's own name starts with it).
  constexpr std::size_t kColumns = 100, kPoolReserve = 12;
  const std::size_t rest_without_pool = rest;
  if (pool_width != 0) rest += std::clamp<std::size_t>(pool_width, 4, kPoolReserve) + 1;
  name_width = std::min(name_width, kColumns > rest + 12 ? kColumns - rest - 1 : std::size_t{12});
  const std::size_t used = name_width + rest_without_pool + 1;  // up to the POOL cell
  if (pool_width != 0 && used + pool_width >= kColumns) pool_width = used + 4 < kColumns ? kColumns - 1 - used : 4;
  auto pool_cell = [&](const std::string& pool) {
    return pool.size() <= pool_width ? pool : pool.substr(0, pool_width - 1) + "~";
  };
  auto pad = [](const std::string& s, std::size_t w, bool to_right) {
    if (s.size() >= w) return s;
    return to_right ? std::string(w - s.size(), ' ') + s : s + std::string(w - s.size(), ' ');
  };
  auto print_line = [&](const std::string& name, const std::vector<std::string>& cells, const std::string& marks,
                        const std::string& pool) {
    std::string line = pad(name, name_width, false);
    for (std::size_t c = 0; c < cells.size(); ++c) line += " " + pad(cells[c], width[c], right[c]);
    if (marks_width != 0) line += " " + pad(marks, marks_width, false);
    if (!pool.empty()) line += " " + pool_cell(pool);
    while (!line.empty() && line.back() == ' ') line.pop_back();
    std::cout << line << "\n";
  };
  print_line("NAME", heads, marks_width != 0 ? "MARKS" : "", pool_width != 0 ? "POOL" : "");
  for (const auto& r : rows) {
    if (r.cells.empty()) {  // unusable: the name in full, then the mark and reason
      std::cout << pad(r.name, name_width, false) << " " << r.marks << "\n";
      continue;
    }
    if (r.name.size() > name_width) {
      std::cout << r.name << "\n";
      print_line("", r.cells, r.marks, r.pool);
    } else {
      print_line(r.name, r.cells, r.marks, r.pool);
    }
  }
  return kExitOk;
}

int cmd_heirs(const std::string& name, bool as_json) {
  auto box = shmbox::Box::inspect(name);
  if (!box) return fail(box.error());
  const shmbox::box_info i = shmbox::info(*box);
  if (as_json) {
    std::cout << heirs_json(i).dump(2, ' ', false, json::error_handler_t::replace) << "\n";
    return kExitOk;
  }
  if (i.heirs.empty()) {
    std::cout << "box '" << name << "' has no heirs\n";
    return kExitOk;
  }
  std::printf("%-6s %-6s %-8s %-6s %-9s %-12s %s\n", "ORDER", "ENTRY", "PID", "ALIVE", "ROLE", "PID-NS", "DATA");
  int n = 0;
  for (const auto& h : i.heirs)
    std::printf("%-6d %-6u %-8u %-6s %-9s %-12s %s\n", n++, h.entry, h.pid, h.alive ? "yes" : "no",
                h.listener ? "listener" : "heir", ns_cell(h.pid_ns, h.same_namespace).c_str(), escaped(h.data).c_str());
  return kExitOk;
}

int cmd_rm(const std::string& name) {
  auto r = shmbox::Box::remove(name);
  if (!r) return fail(r.error());
  remove_bridge_status(name);  // the box's bridges' counters go with it
  return kExitOk;
}

// ---- verify / gc -------------------------------------------------------------
int cmd_verify(const std::string& name, bool as_json) {
  auto r = shmbox::verify(name);
  if (!r) return fail(r.error());
  if (as_json) {
    std::cout << json{{"box", r->box},
                      {"ok", r->ok},
                      {"problems", r->problems},
                      {"checked", json{{"slots", r->slots}, {"producers", r->producers}, {"heirs", r->heirs}}}}
                     .dump(2, ' ', false, json::error_handler_t::replace)
              << "\n";
  } else if (r->ok) {
    std::cout << "box '" << name << "': ok (" << r->slots << " slots, " << r->producers << " producers, " << r->heirs
              << " heirs checked)\n";
  } else {
    std::cout << "box '" << name << "': CORRUPT, " << r->problems.size() << " problem(s):\n";
    for (const auto& p : r->problems) std::cout << "  " << p << "\n";
    std::cout << "Its processes report errors instead of using the damaged parts; to start over, remove it with 'shmbox rm "
              << name << "' and create it again.\n";
  }
  return r->ok ? kExitOk : kExitFail;
}

int cmd_gc(const parsed& a) {
  auto r = shmbox::collect({.dry_run = a.dry_run, .include_nonempty = a.include_nonempty, .prefix = a.prefix});
  if (!r) return fail(r.error());
  // Boxes it could not remove (another user's, or not a box) are listed as
  // skipped, the rest is collected; the exit status then is 3.
  std::size_t skipped = 0;
  for (const auto& c : *r) skipped += c.skipped ? 1 : 0;
  const int code = skipped != 0 ? kExitRefused : kExitOk;
  if (a.json) {
    json all = json::array();
    for (const auto& c : *r)
      all.push_back(json{{"name", c.name}, {"depth", c.depth}, {"why", c.why}, {"removed", !a.dry_run && !c.skipped}, {"skipped", c.skipped}});
    std::cout << all.dump(2, ' ', false, json::error_handler_t::replace) << "\n";
    return code;
  }
  for (const auto& c : *r) {
    if (c.skipped) {
      std::cout << "skipped " << c.name << " (" << escaped(c.why) << ")\n";
      continue;
    }
    std::cout << (a.dry_run ? "would remove " : "removed ") << c.name << " (" << c.why
              << (c.depth != 0 ? ", " + std::to_string(c.depth) + " messages lost" : std::string()) << ")\n";
  }
  if (r->size() == skipped) std::cout << "nothing to collect\n";
  if (skipped != 0)
    say("gc: skipped " + std::to_string(skipped) + " box(es) it may not remove or that are not boxes (listed above); collected the rest");
  return code;
}

}  // namespace

// ---- dump / give-away -------------------------------------------------------
// The bytes of a message as a hexdump: offset, 16 bytes in hex, the printable ones.
void print_hex(std::string_view data) {
  for (std::size_t off = 0; off < data.size(); off += 16) {
    std::printf("  %08zx  ", off);
    for (std::size_t i = 0; i < 16; ++i) {
      if (off + i < data.size()) std::printf("%02x ", static_cast<unsigned char>(data[off + i]));
      else std::printf("   ");
      if (i == 7) std::printf(" ");
    }
    std::printf(" |");
    for (std::size_t i = 0; i < 16 && off + i < data.size(); ++i) {
      const auto c = static_cast<unsigned char>(data[off + i]);
      std::putchar(c >= 0x20 && c < 0x7f ? c : '.');
    }
    std::printf("|\n");
  }
}

std::string to_hex(std::string_view data) {
  static const char* digits = "0123456789abcdef";
  std::string h;
  h.reserve(data.size() * 2);
  for (const char c : data) {
    h += digits[static_cast<unsigned char>(c) >> 4];
    h += digits[static_cast<unsigned char>(c) & 0xF];
  }
  return h;
}

// Messages as they lie in the box, read-only: the owner and the producers
// are not disturbed (shmbox::peek writes nothing).
int cmd_dump(const parsed& a) {
  auto box = shmbox::Box::inspect(a.name);
  if (!box) return fail(box.error());
  const std::vector<shmbox::peeked_message> msgs = shmbox::peek(*box, a.dump.max);
  if (a.json) {
    json out = json::array();
    for (const auto& m : msgs) {
      // JSON strings must be UTF-8: bytes that are not go as base16.
      json one{{"lane", m.lane}, {"position", m.position}, {"size", m.data.size()}};
      // A message in its lane: its shmbox::message_id (Nats-Msg-Id when bridged).
      if (m.stash.empty()) one["id"] = shmbox::to_string(shmbox::message_id{box->id(), m.lane, m.position});
      if (!m.stash.empty()) one["stash"] = m.stash;
      try {
        (void)json(m.data).dump();  // throws on bytes that are not UTF-8
        one["text"] = m.data;
      } catch (const json::exception&) {
        one["base16"] = to_hex(m.data);
      }
      out.push_back(std::move(one));
    }
    std::cout << out.dump(2) << "\n";
    return kExitOk;
  }
  const shmbox::box_info bi = shmbox::info(*box);
  char box_id[17];
  std::snprintf(box_id, sizeof box_id, "%016llx", static_cast<unsigned long long>(box->id()));
  std::cerr << "box '" << a.name << "' (id " << box_id << ": a message's id is ID-LANE-#POSITION): showing " << msgs.size() << " of " << bi.depth << " message(s), "
            << (!bi.buffer.empty() ? "per lane, the owner's store first in arrival order ([stash: buffered]: its custom buffer '" + bi.buffer + "' decides the delivery order), then the lane\n"
                : bi.priority ? std::string("in delivery order per lane (a priority box: lowest priority first; [stash: sorted]: in the owner's store)\n")
                              : std::string("oldest first per lane (lifo lanes: newest first; the owner's stash first)\n"));
  for (const auto& m : msgs) {
    std::printf("lane %u  #%llu  %zu bytes%s%s", m.lane, static_cast<unsigned long long>(m.position), m.data.size(),
                m.stash.empty() ? "" : ("  [stash: " + m.stash + "]").c_str(), a.dump.hex ? "\n" : "  ");
    if (a.dump.hex) {
      print_hex(m.data);
    } else {
      // One line per message: unprintable bytes escaped, so a message never breaks the listing.
      std::string line;
      for (const char ch : m.data) {
        const auto c = static_cast<unsigned char>(ch);
        if (c == '\\') line += "\\\\";
        else if (c >= 0x20 && c < 0x7f) line += ch;
        else {
          char esc[8];
          std::snprintf(esc, sizeof esc, "\\x%02x", c);
          line += esc;
        }
      }
      std::printf("%s\n", line.c_str());
    }
  }
  return kExitOk;
}

int cmd_resize(const parsed& a) {
  auto box = shmbox::Box::open(a.name);
  if (!box) return fail(box.error());
  std::optional<std::uint32_t> lane;
  if (a.resize.lane >= 0) lane = static_cast<std::uint32_t>(a.resize.lane);
  const auto r = box->resize(a.resize.limit, lane);
  if (!r) {
    say(shmbox::explain(r.error()));
    return r.error() == shmbox::errc::invalid_argument ? kExitUsage : kExitFail;
  }
  if (a.json) {
    std::cout << json{{"box", a.name},          {"lane", r->lane},   {"before", r->before},
                      {"after", r->after},      {"max_capacity", r->max_capacity}, {"dropped", r->dropped}}
                     .dump()
              << "\n";
    return kExitOk;
  }
  const shmbox::policy pol = shmbox::info(*box).lanes.at(r->lane).overflow;
  std::cout << "box '" << a.name << "'" << (box->lane_count() > 1 ? " lane " + std::to_string(r->lane) : std::string())
            << ": limit " << r->before << " -> " << r->after << " (max capacity " << r->max_capacity << ")";
  if (r->dropped != 0)
    std::cout << "; " << r->dropped << " dropped (" << shmbox::to_string(pol) << ": the "
              << (pol == shmbox::policy::drop_oldest ? "oldest" : "newest") << ")";
  std::cout << "\n";
  return kExitOk;
}

int cmd_give_away(const parsed& a) {
  auto box = shmbox::Box::open(a.name, {.any_owner = a.give_away.any_owner});
  if (!box) return fail(box.error());
  const shmbox::box_info before = shmbox::info(*box);
  const auto timeout = std::chrono::milliseconds(a.give_away.timeout_ms);
  const auto r = a.give_away.heir >= 0
                     ? box->request_give_away_to_heir(static_cast<std::uint32_t>(a.give_away.heir), timeout)
                     : box->request_give_away(a.give_away.pid, timeout);
  if (!r) {
    say(shmbox::explain(r.error()));
    return r.error() == shmbox::errc::refused || r.error() == shmbox::errc::timed_out ? kExitRefused : kExitFail;
  }
  std::uint32_t to = a.give_away.pid;
  for (const auto& h : before.heirs)
    if (a.give_away.heir >= 0 && h.entry == static_cast<std::uint32_t>(a.give_away.heir)) to = h.pid;
  std::cout << "box '" << a.name << "' given by pid " << before.owner.pid << " to pid " << to
            << (a.give_away.heir >= 0 ? " (heir entry " + std::to_string(a.give_away.heir) + ")" : std::string()) << "\n";
  return kExitOk;
}

int main(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "bridge") == 0) return run_bridge(argc, argv);
  parsed a;
  const int early = parse_args(argc, argv, a);
  if (early >= 0) return early;
  switch (a.cmd) {
    case command::create: return cmd_create(a.create);
    case command::post: return cmd_post(a.post);
    case command::recv: return cmd_recv(a.recv);
    case command::stat: return cmd_stat(a.name, a.json, a.prometheus);
    case command::ls: return cmd_ls(a.json);
    case command::heirs: return cmd_heirs(a.name, a.json);
    case command::rm: return cmd_rm(a.name);
    case command::verify: return cmd_verify(a.name, a.json);
    case command::gc: return cmd_gc(a);
    case command::watch: return cmd_watch(a);
    case command::dump: return cmd_dump(a);
    case command::give_away: return cmd_give_away(a);
    case command::resize: return cmd_resize(a);
    case command::pool_create:
    case command::pool_run:
    case command::pool_ls:
    case command::pool_stat:
    case command::pool_watch:
    case command::pool_rm:
    case command::pool_take: return cmd_pool(a);
    case command::none: break;
  }
  return kExitUsage;
}
