// tools/shmbox.cpp - the shmbox command line.
//
// Exit codes: 0 success, 1 failure, 2 usage error, 3 refused (post: a message
// was not stored; recv: nothing arrived before the timeout).
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "shmbox/shmbox.hpp"

namespace {

using json = nlohmann::ordered_json;
constexpr int kExitOk = 0, kExitFail = 1, kExitUsage = 2, kExitRefused = 3;

int fail(const std::error_code& ec) {
  std::cerr << "shmbox: " << shmbox::explain(ec) << "\n";
  return kExitFail;
}

std::string octal(std::uint32_t mode) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%04o", mode);
  return buf;
}

json counters_json(const shmbox::counters& c) {
  return json{{"posted", c.posted},
              {"filtered", c.filtered},
              {"stored", c.stored},
              {"delivered", c.delivered},
              {"rejected", c.rejected},
              {"too_large", c.too_large},
              {"timeouts", c.timeouts},
              {"dropped_newest", c.dropped_newest},
              {"dropped_oldest", c.dropped_oldest},
              {"abandoned", c.abandoned},
              {"redelivered", c.redelivered},
              {"dead_lettered", c.dead_lettered},
              {"dead_letter_failed", c.dead_letter_failed}};
}

json lanes_json(const shmbox::box_info& i) {
  json lanes = json::array();
  for (std::size_t l = 0; l < i.lanes.size(); ++l)
    lanes.push_back(json{{"lane", l},
                         {"capacity", i.lanes[l].capacity},
                         {"policy", std::string(shmbox::to_string(i.lanes[l].overflow))},
                         {"depth", i.lanes[l].depth},
                         {"counters", counters_json(i.lanes[l].count)}});
  return lanes;
}

json heirs_json(const shmbox::box_info& i) {
  json heirs = json::array();
  for (const auto& h : i.heirs)
    heirs.push_back(json{{"pid", h.pid}, {"alive", h.alive}, {"listener", h.listener}, {"data", h.data}});
  return heirs;
}

json transfer_json(const shmbox::transfer_record& t) {
  if (t.epoch == 0) return nullptr;
  return json{{"from", t.from_pid},
              {"to", t.to_pid},
              {"reason", std::string(shmbox::to_string(t.reason))},
              {"data", t.data},
              {"epoch", t.epoch}};
}

json info_json(const shmbox::box_info& i) {
  return json{{"name", i.name},
              {"capacity", i.capacity},
              {"slot_size", i.slot_size},
              {"policy", std::string(shmbox::to_string(i.overflow))},
              {"depth", i.depth},
              {"owner", json{{"pid", i.owner.pid},
                             {"alive", i.owner.alive},
                             {"epoch", i.owner.epoch},
                             {"state", i.owner.state},
                             {"lease_expired", i.owner.expired}}},
              {"orphaned", i.orphaned},
              {"lease_ms", i.lease.count()},
              {"dead_letters", i.dead_letters.empty() ? json(nullptr) : json(i.dead_letters)},
              {"heirs", heirs_json(i)},
              {"last_transfer", transfer_json(i.last_transfer)},
              {"producers_attached", i.producers_attached},
              {"max_producers", i.max_producers},
              {"block_timeout_ms", i.block_timeout.count()},
              {"segment_bytes", i.segment_bytes},
              {"mode", octal(i.mode)},
              {"uid", i.uid},
              {"lanes", lanes_json(i)},
              {"counters", counters_json(i.count)}};
}

std::string owner_text(const shmbox::owner_info& o) {
  if (o.pid == 0) return "none";
  return "pid " + std::to_string(o.pid) + (o.expired ? " (lease expired)" : o.alive ? " (alive)" : " (dead)") +
         ", epoch " + std::to_string(o.epoch);
}

std::string transfer_text(const shmbox::transfer_record& t) {
  if (t.epoch == 0) return "none";
  return std::string(shmbox::to_string(t.reason)) + " from pid " + std::to_string(t.from_pid) + " to pid " +
         std::to_string(t.to_pid) + " (epoch " + std::to_string(t.epoch) + ")" +
         (t.data.empty() ? std::string() : ", data '" + t.data + "'");
}

// ---- create ---------------------------------------------------------------
struct create_args {
  std::string name;
  std::uint32_t capacity = 1024;
  std::uint32_t slot_size = 256;
  std::string policy = "reject";
  std::string mode = "0600";
  std::uint32_t max_producers = 64;
  std::uint32_t block_timeout_ms = 1000;
  std::uint32_t lease_ms = 0;
  std::uint32_t lanes = 1;
  std::vector<std::string> lane_capacity;  // "L=N"
  std::vector<std::string> lane_policy;    // "L=POLICY"
  std::string dead_letters;
};

// "L=VALUE" -> (L, VALUE); validated by the option's check.
std::pair<std::uint32_t, std::string> lane_pair(const std::string& s) {
  const auto eq = s.find('=');
  return {static_cast<std::uint32_t>(std::stoul(s.substr(0, eq))), s.substr(eq + 1)};
}

int cmd_create(const create_args& a) {
  shmbox::options o;
  o.capacity = a.capacity;
  o.slot_size = a.slot_size;
  o.overflow = *shmbox::parse_policy(a.policy);  // validated by the option's check
  o.mode = static_cast<std::uint32_t>(std::stoul(a.mode, nullptr, 8));
  o.max_producers = a.max_producers;
  o.block_timeout = std::chrono::milliseconds(a.block_timeout_ms);
  o.lease = std::chrono::milliseconds(a.lease_ms);
  o.dead_letters = a.dead_letters;
  if (a.lanes > 1 || !a.lane_capacity.empty() || !a.lane_policy.empty()) {
    o.lanes.resize(a.lanes);
    for (const auto& lc : a.lane_capacity) {
      const auto [lane, v] = lane_pair(lc);
      if (lane >= a.lanes) {
        std::cerr << "shmbox: --lane-capacity " << lc << ": the box has lanes 0.." << a.lanes - 1 << " (see --lanes)\n";
        return kExitUsage;
      }
      o.lanes[lane].capacity = static_cast<std::uint32_t>(std::stoul(v));
    }
    for (const auto& lp : a.lane_policy) {
      const auto [lane, v] = lane_pair(lp);
      if (lane >= a.lanes) {
        std::cerr << "shmbox: --lane-policy " << lp << ": the box has lanes 0.." << a.lanes - 1 << " (see --lanes)\n";
        return kExitUsage;
      }
      o.lanes[lane].overflow = shmbox::parse_policy(v);
    }
  }
  auto box = shmbox::Box::create(a.name, o);
  if (!box) return fail(box.error());
  std::cout << "created box '" << a.name << "': capacity " << box->capacity() << ", slot size " << o.slot_size
            << " bytes, policy " << shmbox::to_string(o.overflow) << ", " << box->lane_count()
            << (box->lane_count() == 1 ? " lane" : " lanes") << ", mode " << octal(o.mode) << "\n";
  return kExitOk;
}

// ---- post -----------------------------------------------------------------
struct post_args {
  std::string name;
  std::vector<std::string> messages;
  long long timeout_ms = -1;  // -1: the box's block timeout
  std::uint32_t lane = 0;
};

int cmd_post(const post_args& a) {
  auto producer = shmbox::Producer::attach(a.name);
  if (!producer) return fail(producer.error());
  int worst = kExitOk;
  std::size_t index = 0;
  auto post_one = [&](const std::string& msg) {
    ++index;
    const shmbox::post_status st = a.timeout_ms < 0 ? producer->post_to(a.lane, msg)
                                                    : producer->post_to(a.lane, msg, std::chrono::milliseconds(a.timeout_ms));
    if (shmbox::is_stored(st)) return true;
    const std::string which = "message " + std::to_string(index);
    switch (st) {
      case shmbox::post_status::full:
        std::cerr << "shmbox: " << which << " refused: full (box '" << a.name << "' is full, policy reject)\n";
        break;
      case shmbox::post_status::dropped:
        std::cerr << "shmbox: " << which << " refused: dropped (box '" << a.name << "' is full, policy drop-newest)\n";
        break;
      case shmbox::post_status::timeout:
        std::cerr << "shmbox: " << which << " refused: timeout (no space in box '" << a.name << "' before the timeout)\n";
        break;
      case shmbox::post_status::too_large:
        std::cerr << "shmbox: " << which << " refused: too large (" << msg.size() << " bytes; box '" << a.name
                  << "' takes at most " << producer->max_message_size() << ", see --slot-size)\n";
        worst = kExitFail;
        return false;
      default:
        std::cerr << "shmbox: " << which << ": " << shmbox::explain(producer->last_error()) << "\n";
        worst = kExitFail;
        return false;
    }
    if (worst == kExitOk) worst = kExitRefused;
    return false;
  };
  if (!a.messages.empty()) {
    for (const auto& m : a.messages) post_one(m);
  } else {
    std::string line;
    while (std::getline(std::cin, line)) post_one(line);
  }
  return worst;
}

// ---- recv -----------------------------------------------------------------
struct recv_args {
  std::string name;
  std::size_t max = 1;
  bool all = false;
  bool follow = false;
  bool heir = false;
  std::string data;
  long long timeout_ms = 0;
  bool verbose = false;
};

volatile sig_atomic_t g_stop = 0;
void on_stop_signal(int) { g_stop = 1; }

// Prints messages as the owner: --max/--all as asked, or (--follow) until a
// signal. Returns the exit code.
int receive_and_print(shmbox::Owner& owner, const recv_args& a) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(a.timeout_ms);
  const std::size_t want = (a.all || a.follow) ? std::numeric_limits<std::size_t>::max() : a.max;
  std::size_t got = 0;
  shmbox::batch batch;
  while (got < want && g_stop == 0) {
    batch.clear();
    std::chrono::nanoseconds left;
    if (a.follow) {
      left = std::chrono::milliseconds(200);  // wake now and then to notice a signal
    } else {
      // Wait (up to the deadline) only while nothing has arrived; with --all,
      // stop once the box is empty after the first message.
      left = std::chrono::duration_cast<std::chrono::nanoseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() < 0 || (a.all && got > 0)) left = std::chrono::nanoseconds(0);
    }
    const std::size_t chunk = std::min<std::size_t>(want - got, 4096);
    const shmbox::recv_status st = owner.receive_batch(batch, chunk, left);
    for (std::size_t i = 0; i < batch.size(); ++i) {
      if (a.verbose) std::cout << "lane=" << batch.lane(i) << " redelivered=" << (batch.redelivered(i) ? "yes" : "no") << " ";
      std::cout.write(batch[i].data(), static_cast<std::streamsize>(batch[i].size()));
      std::cout.put('\n');
    }
    std::cout.flush();
    got += batch.size();
    if (st == shmbox::recv_status::ok) continue;
    if (st == shmbox::recv_status::timeout || st == shmbox::recv_status::empty) {
      if (a.follow) continue;
      break;
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
    auto heir = shmbox::Heir::enlist(a.name, a.data);
    if (!heir) return fail(heir.error());
    std::cerr << "shmbox: waiting as heir of box '" << a.name << "' (position " << heir->position() << ")\n";
    for (;;) {
      auto owner = heir->await_transfer(std::chrono::milliseconds(200));
      if (owner) {
        std::cerr << "shmbox: given box '" << a.name << "': " << transfer_text(owner->transfer()) << "\n";
        return receive_and_print(*owner, a);
      }
      if (owner.error() != shmbox::errc::timed_out) return fail(owner.error());
      if (g_stop != 0) return kExitRefused;  // interrupted before being given the box
    }
  }
  auto owner = shmbox::Owner::acquire(a.name);
  if (!owner) return fail(owner.error());
  return receive_and_print(*owner, a);
}

// ---- stat / ls / rm ---------------------------------------------------------
int cmd_stat(const std::string& name, bool as_json) {
  auto box = shmbox::Box::inspect(name);
  if (!box) return fail(box.error());
  const shmbox::box_info i = box->info();
  if (as_json) {
    std::cout << info_json(i).dump(2) << "\n";
    return kExitOk;
  }
  const auto& c = i.count;
  std::cout << "box          " << i.name << "\n"
            << "policy       " << shmbox::to_string(i.overflow) << "\n"
            << "capacity     " << i.capacity << " messages of up to " << i.slot_size << " bytes\n"
            << "depth        " << i.depth << " / " << i.capacity << "\n"
            << "owner        " << owner_text(i.owner) << ", " << i.owner.state
            << (i.orphaned ? ", ORPHANED (no live heir: any process may claim it)" : "") << "\n"
            << "lease        " << (i.lease.count() == 0 ? std::string("none (only death ends it)") : std::to_string(i.lease.count()) + " ms") << "\n"
            << "heirs        " << i.heirs.size() << "\n"
            << "dead letters " << (i.dead_letters.empty() ? std::string("none") : "-> box '" + i.dead_letters + "'")
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
            << "dropped_newest " << c.dropped_newest << "\n"
            << "dropped_oldest " << c.dropped_oldest << "\n"
            << "filtered     " << c.filtered << "\n"
            << "abandoned    " << c.abandoned << "\n"
            << "redelivered  " << c.redelivered << "\n";
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
  return kExitOk;
}

int cmd_ls(bool as_json) {
  auto names = shmbox::Box::list();
  if (!names) return fail(names.error());
  json all = json::array();
  if (!as_json && !names->empty())
    std::printf("%-24s %-12s %15s %-26s %s\n", "NAME", "POLICY", "DEPTH/CAP", "OWNER", "DROPPED");
  for (const auto& n : *names) {
    auto box = shmbox::Box::inspect(n);
    if (!box) {
      if (as_json) all.push_back(json{{"name", n}, {"error", shmbox::explain(box.error())}});
      else std::printf("%-24s %s\n", n.c_str(), ("unusable: " + shmbox::explain(box.error())).c_str());
      continue;
    }
    const shmbox::box_info i = box->info();
    if (as_json) {
      all.push_back(info_json(i));
      continue;
    }
    const std::string depth = std::to_string(i.depth) + "/" + std::to_string(i.capacity);
    const std::uint64_t dropped = i.count.dropped_newest + i.count.dropped_oldest + i.count.rejected + i.count.timeouts;
    std::printf("%-24s %-12s %15s %-26s %llu\n", n.c_str(), std::string(shmbox::to_string(i.overflow)).c_str(),
                depth.c_str(), owner_text(i.owner).c_str(), static_cast<unsigned long long>(dropped));
  }
  if (as_json) std::cout << all.dump(2) << "\n";
  return kExitOk;
}

int cmd_heirs(const std::string& name, bool as_json) {
  auto box = shmbox::Box::inspect(name);
  if (!box) return fail(box.error());
  const shmbox::box_info i = box->info();
  if (as_json) {
    std::cout << heirs_json(i).dump(2) << "\n";
    return kExitOk;
  }
  if (i.heirs.empty()) {
    std::cout << "box '" << name << "' has no heirs\n";
    return kExitOk;
  }
  std::printf("%-6s %-8s %-6s %-9s %s\n", "ORDER", "PID", "ALIVE", "ROLE", "DATA");
  int n = 0;
  for (const auto& h : i.heirs)
    std::printf("%-6d %-8u %-6s %-9s %s\n", n++, h.pid, h.alive ? "yes" : "no", h.listener ? "listener" : "heir",
                h.data.c_str());
  return kExitOk;
}

int cmd_rm(const std::string& name) {
  auto r = shmbox::Box::remove(name);
  if (!r) return fail(r.error());
  return kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"shmbox: bounded mailboxes in POSIX shared memory.\n"
               "Many producer processes post into a box; one owner process receives from it."};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("shmbox 0.1.0"));

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
        if (s.empty() || s.size() > 4 || s.find_first_not_of("01234567") != std::string::npos)
          return "mode '" + s + "' is not an octal permission such as 0600 or 0660";
        if ((std::stoul(s, nullptr, 8) & 0600u) != 0600u) return "mode " + s + " must include 0600 (owner read and write)";
        return {};
      },
      "OCTAL");

  create_args ca;
  auto* create = app.add_subcommand("create", "Create a box; its capacity is fixed at creation");
  create->add_option("NAME", ca.name, "box name (the segment is /dev/shm/shmbox.NAME)")->required()->check(check_name);
  create->add_option("--capacity", ca.capacity, "messages the box holds (a power of two is fastest)")
      ->check(CLI::Range(1u, shmbox::kMaxCapacity))
      ->capture_default_str();
  create->add_option("--slot-size", ca.slot_size, "largest message in bytes")
      ->check(CLI::Range(1u, shmbox::kMaxSlotSize))
      ->capture_default_str();
  create->add_option("--policy", ca.policy, "when full: reject|drop-newest|drop-oldest|lifo|block")
      ->check(check_policy)
      ->capture_default_str();
  create->add_option("--mode", ca.mode, "file mode of the segment, octal")->check(check_mode)->capture_default_str();
  create->add_option("--max-producers", ca.max_producers, "producer handles attached at once")
      ->check(CLI::Range(1u, shmbox::kMaxProducers))
      ->capture_default_str();
  create->add_option("--block-timeout", ca.block_timeout_ms, "policy block: default wait of a post, in ms")
      ->check(CLI::Range(0u, 86'400'000u))
      ->capture_default_str();
  auto check_lane_pair = [](bool policy_value) {
    return CLI::Validator(
        [policy_value](std::string& v) -> std::string {
          const auto eq = v.find('=');
          if (eq == std::string::npos || eq == 0 || v.find_first_not_of("0123456789") < eq)
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
  create->add_option("--lanes", ca.lanes, "lanes (rings) in the box: lane 0 is the control lane, read first; then by number")
      ->check(CLI::Range(1u, shmbox::kMaxLanes))
      ->capture_default_str();
  create->add_option("--lane-capacity", ca.lane_capacity, "capacity of one lane (repeatable); default --capacity")
      ->check(check_lane_pair(false));
  create->add_option("--lane-policy", ca.lane_policy, "policy of one lane (repeatable); default --policy")
      ->check(check_lane_pair(true));
  create->add_option("--dead-letters", ca.dead_letters,
                     "a box that receives, with their origin, the messages this one drops or evicts")
      ->check(check_name);
  create->add_option("--lease-ms", ca.lease_ms,
                     "lease deadline: an owner that stops receiving this long loses the box to its heir (0: none)")
      ->check(CLI::Range(0u, 86'400'000u))
      ->capture_default_str();

  post_args pa;
  auto* post = app.add_subcommand("post", "Post messages: each argument is one; with none, one per line of stdin");
  post->add_option("NAME", pa.name, "box name")->required()->check(check_name);
  post->add_option("MESSAGE", pa.messages, "messages to post");
  post->add_option("--timeout", pa.timeout_ms, "policy block: how long to wait for space, in ms (default: the box's)")
      ->check(CLI::Range(0LL, 86'400'000LL));
  post->add_option("--lane", pa.lane, "the lane to post into (0: control lane)")->check(CLI::Range(0u, shmbox::kMaxLanes - 1));

  recv_args ra;
  auto* recv = app.add_subcommand("recv", "Receive messages as the box's owner, one per line, in delivery order");
  recv->add_option("NAME", ra.name, "box name")->required()->check(check_name);
  auto* max_opt = recv->add_option("--max", ra.max, "receive at most N messages")->check(CLI::Range(std::size_t{1}, std::numeric_limits<std::size_t>::max()))->capture_default_str();
  auto* all_opt = recv->add_flag("--all", ra.all, "receive every message in the box")->excludes(max_opt);
  recv->add_option("--timeout", ra.timeout_ms, "wait up to MS for messages")->check(CLI::Range(0LL, 86'400'000LL))->capture_default_str();
  recv->add_flag("--follow", ra.follow, "keep receiving and printing until interrupted (SIGINT/SIGTERM)")
      ->excludes(max_opt)
      ->excludes(all_opt);
  recv->add_flag("--verbose", ra.verbose, "print each message's lane and redelivered flag before it");
  auto* heir_opt = recv->add_flag("--heir", ra.heir, "register as heir, wait until given the box, then receive as owner");
  recv->add_option("--data", ra.data, "with --heir: data (up to 64 bytes) handed over with the box")->needs(heir_opt)->check(
      CLI::Validator([](std::string& v) { return v.size() <= 64 ? std::string() : std::string("at most 64 bytes"); }, "DATA"));

  std::string stat_name;
  bool stat_json = false;
  auto* stat = app.add_subcommand("stat", "Show a box: geometry, depth, owner and every counter");
  stat->add_option("NAME", stat_name, "box name")->required()->check(check_name);
  stat->add_flag("--json", stat_json, "one JSON object");

  bool ls_json = false;
  auto* ls = app.add_subcommand("ls", "List every box on this machine, a line each");
  ls->add_flag("--json", ls_json, "a JSON array");

  std::string heirs_name;
  bool heirs_json_flag = false;
  auto* heirs = app.add_subcommand("heirs", "Show the heir table in order, with liveness");
  heirs->add_option("NAME", heirs_name, "box name")->required()->check(check_name);
  heirs->add_flag("--json", heirs_json_flag, "a JSON array");

  std::string rm_name;
  auto* rm = app.add_subcommand("rm", "Remove a box (processes that have it open keep using it)");
  rm->add_option("NAME", rm_name, "box name")->required()->check(check_name);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::string what = e.what();
    std::cerr << "shmbox: " << what << " (run 'shmbox --help')\n";
    return kExitUsage;
  }

  if (create->parsed()) return cmd_create(ca);
  if (post->parsed()) return cmd_post(pa);
  if (recv->parsed()) return cmd_recv(ra);
  if (stat->parsed()) return cmd_stat(stat_name, stat_json);
  if (ls->parsed()) return cmd_ls(ls_json);
  if (heirs->parsed()) return cmd_heirs(heirs_name, heirs_json_flag);
  if (rm->parsed()) return cmd_rm(rm_name);
  return kExitUsage;
}
