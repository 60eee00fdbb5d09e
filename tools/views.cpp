// tools/views.cpp - what boxes look like, text or --json: `shmbox stat NAME`
// (its --prometheus text is tools/metrics.cpp's), `shmbox ls` (a table of
// every segment) and `shmbox heirs NAME`.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cli_args.hpp"
#include "commands.hpp"
#include "base/shm_file.hpp"
#include "shmbox/shmbox.hpp"

namespace shmbox_cli {

namespace {

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
              {"unstashed", c.unstashed},
              {"quota_refused", c.quota_refused}};
}

// " (resizable up to N)" for a box whose lanes have a reserve ("" none).
std::string per_lane_list(const shmbox::box_info& i) {
  std::string out;
  for (const auto& l : i.lanes) out += (out.empty() ? "" : ", ") + std::to_string(l.capacity);
  return out;
}

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
                         {"quota", i.lanes[l].quota == 0 ? json(nullptr) : json(i.lanes[l].quota)},
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
                             {"aborted", p.aborted},
                             {"waiting", p.waiting},
                             {"quota_refused", p.quota_refused}});
  return producers;
}

// `shmbox stat --json`'s "bridges": one object per bridge (export, import).
json bridges_json(const std::vector<bridge_info>& bridges) {
  json out = json::array();
  for (const bridge_info& b : bridges) {
    json counters = json::object();
    for (std::uint32_t c = 0; c < kBridgeCounters; ++c)
      if (counts(b.role, static_cast<bridge_counter>(c))) counters[std::string(to_string(static_cast<bridge_counter>(c)))] = b.counters[c];
    out.push_back(json{{"role", to_string(b.role)},
                       {"pid", b.pid},
                       {"alive", b.alive},
                       {"nats", b.nats},
                       {"stream", b.stream},
                       {"subject", b.subject},
                       {"durable", b.durable.empty() ? json(nullptr) : json(b.durable)},
                       {"started_unix_ns", b.started_unix_ns},
                       {"state", to_string(b.state)},
                       {"state_unix_ns", b.state_unix_ns},
                       {"last_error", b.last_error.empty() ? json(nullptr) : json(b.last_error)},
                       {"last_error_unix_ns", b.error_unix_ns},
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
              {"counters", counters_json(i.count)},
              {"replies", json{{"sent", i.replies.sent}, {"lost", i.replies.lost}, {"skipped", i.replies.skipped}}}};
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


}  // namespace

// "16 messages per producer per lane" ("" when no lane has a quota).
std::string quota_text(const shmbox::box_info& i) {
  if (std::none_of(i.lanes.begin(), i.lanes.end(), [](const auto& l) { return l.quota != 0; })) return {};
  if (std::all_of(i.lanes.begin(), i.lanes.end(), [&](const auto& l) { return l.quota == i.lanes[0].quota; }))
    return std::to_string(i.lanes[0].quota) + " messages per producer" + (i.lanes.size() > 1 ? " per lane" : "");
  std::string out;
  for (const auto& l : i.lanes) out += (out.empty() ? "" : ", ") + (l.quota == 0 ? std::string("none") : std::to_string(l.quota));
  return "per producer, per lane: " + out;
}

std::string capacity_text(const shmbox::box_info& i) {
  if (i.lanes.size() <= 1) return std::to_string(i.capacity) + " messages";
  const bool equal = std::all_of(i.lanes.begin(), i.lanes.end(), [&](const auto& l) { return l.capacity == i.lanes[0].capacity; });
  if (equal)
    return std::to_string(i.lanes[0].capacity) + " per lane x " + std::to_string(i.lanes.size()) + " lanes = " +
           std::to_string(i.capacity) + " messages";
  return std::to_string(i.capacity) + " messages in all (per lane: " + per_lane_list(i) + ")";
}

std::string transfer_text(const shmbox::transfer_record& t) {
  if (t.epoch == 0) return "none";
  return std::string(shmbox::to_string(t.reason)) + " from pid " + std::to_string(t.from_pid) + " to pid " +
         std::to_string(t.to_pid) + " (epoch " + std::to_string(t.epoch) +
         (t.to_pid_ns != t.from_pid_ns && t.from_pid != 0 ? ", across pid namespaces" : "") + ")" +
         (t.data.empty() ? std::string() : ", data '" + escaped(t.data) + "'");
}

// ---- stat ----------------------------------------------------------------------
int cmd_stat(const std::string& name, bool as_json, bool prometheus) {
  auto box = shmbox::Box::inspect(name);
  if (!box) return fail(box.error());
  const shmbox::box_info i = shmbox::info(*box);
  if (auto whole = box->intact(); !whole) return fail(whole.error());  // truncated while read (T5)
  // A file planted at a bridge status path (or one the trust rule refuses:
  // another user's, writable by others): said on stderr, the box shown all the same.
  // THE TRUST RULE T4: dead letters that producers will not follow, said.
  if (!i.dead_letters.empty()) {
    struct stat from {}, to {};
    const std::string from_path = "/dev/shm/shmbox." + i.name, to_path = "/dev/shm/shmbox." + i.dead_letters;
    if (::lstat(from_path.c_str(), &from) == 0 && ::lstat(to_path.c_str(), &to) == 0 && S_ISREG(from.st_mode) &&
        S_ISREG(to.st_mode) && !shmbox::detail::shm_writers_within(from, to))
      say("warning: box '" + i.name + "' (" + shmbox::detail::shm_describe(from) + ") names box '" + i.dead_letters + "' (" +
          shmbox::detail::shm_describe(to) + ") as its dead letters, but users who may write the first may not write the "
          "second: producers do not forward to it, they count dead_letter_failed (docs/guarantees.md, Trust T4)");
  }
  std::vector<std::string> bridge_problems;
  const std::vector<bridge_info> bridges = read_bridges(i.name, i.uid, &bridge_problems);
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
            << "capacity     " << capacity_text(i) << " of up to " << i.slot_size << " bytes" << reserve_text(i) << "\n"
            << "depth        " << i.depth << " / " << i.capacity
            << (i.lanes.size() > 1 ? " (all lanes; per lane below)" : "")
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
            << (quota_text(i).empty() ? std::string()
                                      : "quota        " + quota_text(i) + ": " + std::to_string(c.quota_refused) +
                                            " posts refused at it (of rejected, dropped_newest, timeouts)\n")
            << "filtered     " << c.filtered
            << (c.buffer_dropped != 0 ? " (" + std::to_string(c.buffer_dropped) + " of them dropped by the custom buffer)" : std::string())
            << "\n"
            << "abandoned    " << c.abandoned << "\n"
            << "aborted      " << c.aborted << " (loans given back)\n"
            << "redelivered  " << c.redelivered << "\n";
  const shmbox::reply_counts& r = i.replies;
  if (r.sent + r.lost + r.skipped != 0)  // request/reply (docs/request-reply.md)
    std::cout << "replies      " << r.sent << " sent, " << r.lost << " lost (requester gone, or its reply box full), "
              << r.skipped << " skipped (answered already)\n";
  for (const bridge_info& b : bridges) {
    std::cout << "bridge       " << to_string(b.role) << (b.role == bridge_role::export_ ? " to " : " from ") << "stream '"
              << printable(b.stream) << "' subject '" << printable(b.subject) << "'"
              << (b.durable.empty() ? std::string() : " durable '" + printable(b.durable) + "'") << " at " << printable(b.nats)
              << ", pid " << b.pid << (b.alive ? " (working)" : " (not running)") << ", state " << to_string(b.state) << "\n            ";
    for (std::uint32_t c = 0; c < kBridgeCounters; ++c) {
      const auto which = static_cast<bridge_counter>(c);
      if (counts(b.role, which)) std::cout << " " << to_string(which) << " " << b.counters[c];
    }
    std::cout << "\n";
    if (!b.last_error.empty()) std::cout << "             last error: " << printable(b.last_error) << "\n";
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
    // With quotas, each producer's messages waiting now and its posts at its quota.
    const bool quotas = !quota_text(i).empty();
    std::printf("%-6s %-8s %-6s %12s %12s %12s", "ENTRY", "PID", "ALIVE", "STORED", "REFUSED", "ABORTED");
    if (quotas) std::printf(" %8s %13s", "WAITING", "QUOTA-REFUSED");
    std::printf("  %s\n", "PID-NS");
    for (const auto& p : i.producers) {
      std::printf("%-6u %-8u %-6s %12llu %12llu %12llu", p.entry, p.pid, p.alive ? "yes" : "no",
                  static_cast<unsigned long long>(p.stored), static_cast<unsigned long long>(p.refused),
                  static_cast<unsigned long long>(p.aborted));
      if (quotas)
        std::printf(" %8llu %13llu", static_cast<unsigned long long>(p.waiting), static_cast<unsigned long long>(p.quota_refused));
      std::printf("  %s\n", ns_cell(p.pid_ns, p.same_namespace).c_str());
    }
  }
  std::fflush(stdout);
  return kExitOk;
}


namespace {

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

}  // namespace

std::vector<listed_box> inspect_all_boxes(std::error_code& list_error) {
  std::vector<listed_box> boxes;
  auto names = shmbox::Box::list();
  if (!names) {
    list_error = names.error();
    return boxes;
  }
  for (const auto& n : *names) {
    // A private copy: no mapping to fault in and unmap per box (10,000 boxes
    // in one scrape: bench/scrape.cpp), and no truncation can reach us.
    auto box = shmbox::Box::snapshot(n);
    if (!box && box.error() == shmbox::errc::not_found) continue;  // removed since list()
    listed_box b{n, std::nullopt, box ? std::error_code() : box.error(), box ? std::string() : shmbox::explain(box.error())};
    if (box) b.info = shmbox::info(*box);
    // A segment over the snapshot's size is mapped: truncated while it was
    // read, its figures are zeros (docs/guarantees.md, "Trust" T5).
    if (auto whole = box ? box->intact() : shmbox::result<void>{}; !whole) {
      b.info.reset();
      b.error = whole.error();
      b.sentence = shmbox::explain(whole.error());
    }
    boxes.push_back(std::move(b));
  }
  return boxes;
}

int cmd_ls(bool as_json, bool plain) {
  std::error_code list_error;
  const std::vector<listed_box> boxes = inspect_all_boxes(list_error);
  if (list_error) return fail(list_error);
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
  for (const listed_box& b : boxes) {
    const std::string& n = b.name;
    if (!b.info) {
      auto [mark, reason] = unusable_reason(b.error);
      // A corrupt header: the library's sentence (when it is about this
      // segment) says which part, e.g. "header offsets disagree with its geometry".
      const std::string& said = b.sentence;
      const std::string prefix = "box '" + n + "': ";
      if (b.error == shmbox::errc::corrupt && said.rfind(prefix, 0) == 0 && said.size() - prefix.size() <= 64)
        reason = said.substr(prefix.size());
      // A FIFO, link, directory, socket, device... at the box path: not a box
      // at all (the library refused it unopened; lstat says which, for the row).
      struct stat st {};
      if (b.error == shmbox::errc::not_a_box && ::lstat(("/dev/shm/shmbox." + n).c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
        mark = "NOT-A-BOX";
        reason = std::string(shmbox::detail::file_kind(st.st_mode)) + (S_ISLNK(st.st_mode) ? " (not followed)" : "") + ", not a box";
      }
      if (as_json) {
        std::string status = mark;  // "corrupt", "incomplete", "no_access", "unusable"
        for (auto& ch : status) ch = ch == '-' ? '_' : static_cast<char>(ch - 'A' + 'a');
        all.push_back(json{{"name", n}, {"error", b.sentence}, {"status", status}, {"reason", reason}});
      } else {
        rows.push_back({n, {}, mark + "  unusable: " + reason, {}});
      }
      continue;
    }
    const shmbox::box_info& i = *b.info;
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
  // On a terminal the rows fit its width (100 when it does not say): NAME
  // gets what the other columns leave (at least 12), POOL at most 13 of it;
  // a longer name or pool is cut in the middle with "~". Not on a terminal,
  // or with --plain: every name and pool in full, a row per box, never cut.
  const std::size_t columns = plain || ::isatty(STDOUT_FILENO) == 0 ? 0 : terminal_columns(100);
  constexpr std::size_t kPoolReserve = 12;
  const std::size_t rest_without_pool = rest;
  if (columns != 0) {
    if (pool_width != 0) rest += std::clamp<std::size_t>(pool_width, 4, kPoolReserve) + 1;
    name_width = std::min(name_width, columns > rest + 12 ? columns - rest - 1 : std::size_t{12});
    const std::size_t used = name_width + rest_without_pool + 1;  // up to the POOL cell
    if (pool_width != 0 && used + pool_width >= columns) pool_width = used + 4 < columns ? columns - 1 - used : 4;
  }
  auto fit = [](const std::string& s, std::size_t w) {  // "t-long~-tail": its head and tail, w columns
    if (s.size() <= w || w < 4) return s;
    const std::size_t head = (w - 1) / 2, tail = w - 1 - head;
    return s.substr(0, head) + "~" + s.substr(s.size() - tail);
  };
  auto pool_cell = [&](const std::string& pool) { return fit(pool, pool_width); };
  // A line, never wider than the terminal: what NAME could not give up (the
  // other columns, a long reason) is cut at its end with "~", not wrapped.
  auto emit = [&](std::string line) {
    if (columns != 0 && line.size() > columns) {
      line.resize(columns - 1);
      line += '~';
    }
    std::cout << line << "\n";
  };
  auto pad = [](const std::string& s, std::size_t w, bool to_right) {
    if (s.size() >= w) return s;
    return to_right ? std::string(w - s.size(), ' ') + s : s + std::string(w - s.size(), ' ');
  };
  auto print_line = [&](const std::string& name, const std::vector<std::string>& cells, const std::string& marks,
                        const std::string& pool) {
    std::string line = pad(name, name_width, false);
    // Appended piecewise: GCC 12 warns (-Wrestrict, a false positive) on " " + std::string here.
    for (std::size_t c = 0; c < cells.size(); ++c) (line += ' ') += pad(cells[c], width[c], right[c]);
    if (marks_width != 0) (line += ' ') += pad(marks, marks_width, false);
    if (!pool.empty()) (line += ' ') += pool_cell(pool);
    while (!line.empty() && line.back() == ' ') line.pop_back();
    emit(line);
  };
  print_line("NAME", heads, marks_width != 0 ? "MARKS" : "", pool_width != 0 ? "POOL" : "");
  for (const auto& r : rows) {
    if (r.cells.empty()) {  // unusable: the name (cut to fit on a terminal), then the mark and reason
      std::string line = pad(fit(r.name, name_width), name_width, false);
      (line += ' ') += r.marks;
      emit(line);
      continue;
    }
    print_line(fit(r.name, name_width), r.cells, r.marks, r.pool);
  }
  return kExitOk;
}

int cmd_heirs(const std::string& name, bool as_json) {
  auto box = shmbox::Box::inspect(name);
  if (!box) return fail(box.error());
  const shmbox::box_info i = shmbox::info(*box);
  if (auto whole = box->intact(); !whole) return fail(whole.error());  // truncated while read (T5)
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

}  // namespace shmbox_cli
