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

#include "cli_args.hpp"
#include "shmbox/shmbox.hpp"

namespace {

using namespace shmbox_cli;
using json = nlohmann::ordered_json;

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
              {"aborted", c.aborted},
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
              {"spin_ns", i.spin.count()},
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
  o.spin = std::chrono::microseconds(a.spin_us);
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

int cmd_post(const post_args& a) {
  auto box = shmbox::Box::open(a.name, {.any_owner = a.any_owner});
  if (!box) return fail(box.error());
  auto producer = shmbox::Producer::attach(*box);
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
      if (a.follow || sliced) continue;
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
    auto box = shmbox::Box::open(a.name, {.any_owner = a.any_owner});
    if (!box) return fail(box.error());
    auto heir = shmbox::Heir::enlist(*box, a.data);
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
  auto box = shmbox::Box::open(a.name, {.any_owner = a.any_owner});
  if (!box) return fail(box.error());
  auto owner = shmbox::Owner::acquire(*box);
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
            << "spin         " << i.spin.count() / 1000 << " us before sleeping (adaptive wait)\n"
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
            << "aborted      " << c.aborted << " (loans given back)\n"
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

// ---- verify / gc -------------------------------------------------------------
int cmd_verify(const std::string& name, bool as_json) {
  auto r = shmbox::Box::verify(name);
  if (!r) return fail(r.error());
  if (as_json) {
    std::cout << json{{"box", r->box},
                      {"ok", r->ok},
                      {"problems", r->problems},
                      {"checked", json{{"slots", r->slots}, {"producers", r->producers}, {"heirs", r->heirs}}}}
                     .dump(2)
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
  auto r = shmbox::Box::collect({.dry_run = a.dry_run, .include_nonempty = a.include_nonempty, .prefix = a.prefix});
  if (!r) return fail(r.error());
  if (a.json) {
    json all = json::array();
    for (const auto& c : *r) all.push_back(json{{"name", c.name}, {"depth", c.depth}, {"why", c.why}, {"removed", !a.dry_run}});
    std::cout << all.dump(2) << "\n";
    return kExitOk;
  }
  for (const auto& c : *r)
    std::cout << (a.dry_run ? "would remove " : "removed ") << c.name << " (" << c.why
              << (c.depth != 0 ? ", " + std::to_string(c.depth) + " messages lost" : std::string()) << ")\n";
  if (r->empty()) std::cout << "nothing to collect\n";
  return kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
  parsed a;
  const int early = parse_args(argc, argv, a);
  if (early >= 0) return early;
  switch (a.cmd) {
    case command::create: return cmd_create(a.create);
    case command::post: return cmd_post(a.post);
    case command::recv: return cmd_recv(a.recv);
    case command::stat: return cmd_stat(a.name, a.json);
    case command::ls: return cmd_ls(a.json);
    case command::heirs: return cmd_heirs(a.name, a.json);
    case command::rm: return cmd_rm(a.name);
    case command::verify: return cmd_verify(a.name, a.json);
    case command::gc: return cmd_gc(a);
    case command::none: break;
  }
  return kExitUsage;
}
