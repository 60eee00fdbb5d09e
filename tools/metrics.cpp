// tools/metrics.cpp - `shmbox stat NAME --prometheus`: a box's figures in the
// Prometheus text exposition format, version 0.0.4
// (https://prometheus.io/docs/instrumenting/exposition_formats/).
//
// Every metric family is written once: a `# HELP` line, a `# TYPE` line, then
// its samples. Names are `shmbox_<what>` in base units (bytes, seconds,
// messages); counters end in `_total`. Every sample carries box="NAME";
// per-lane figures (every counter, depth, capacity, lane policy) also carry
// lane="L", one sample per lane and no box-wide sum beside them (sum them
// with `sum by (box)`: the box's counters are exactly the lanes' sums).
// Label values are escaped (\\, \", \n), and so is HELP text (\\, \n).
//
// `shmbox pool stat NAME --prometheus` is written the same way, labelled by
// pool="NAME": shmbox_pool_<counter>_total for each counter of
// shmbox::pool_counters, gauges for the members in each state (label state),
// the queue, the clients and the supervisor, and per member its box's depth
// and its leases (labels member, box).
//
// `shmbox metrics` writes all of it for the whole host in one exposition:
// every box `shmbox ls` lists (with its bridges) and every pool, through the
// same writers into one `exposition`, which keeps each family's HELP and TYPE
// once and its samples together whichever box they come from. A segment it
// cannot read, or a bridge status the trust rule refuses (lib/base/shm_file.hpp
// T3: bridge/bridge_status.hpp read_bridges), is skipped (a warning on stderr)
// and counted in shmbox_metrics_unreadable_segments{kind}; shmbox_metrics_exported_segments
// {kind} counts the rest (kind: box, pool, bridge). Those two have no box or
// pool label.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <deque>
#include <optional>
#include <set>
#include <string>
#include <span>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "commands.hpp"

namespace shmbox_cli {
namespace {

// The length of the well-formed UTF-8 sequence at v[i] (0: none there).
std::size_t utf8_length(std::string_view v, std::size_t i) {
  const auto b = [&](std::size_t k) { return static_cast<unsigned char>(v[k]); };
  const unsigned char c = b(i);
  if (c < 0x80) return 1;
  std::size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the allowed range of the second byte
  if (c >= 0xC2 && c <= 0xDF) n = 2;
  else if (c >= 0xE0 && c <= 0xEF) n = 3, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
  else if (c >= 0xF0 && c <= 0xF4) n = 4, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
  else return 0;
  if (i + n > v.size() || b(i + 1) < lo || b(i + 1) > hi) return 0;
  for (std::size_t k = 2; k < n; ++k)
    if (b(i + k) < 0x80 || b(i + k) > 0xBF) return 0;
  return n;
}

// A label value between double quotes: backslash, double quote and line feed
// escaped; bytes that are not UTF-8 (label values must be) become U+FFFD.
// (Box names are [A-Za-z0-9._-]; the dead-letter name comes from the segment.)
std::string escape_label_value(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (std::size_t i = 0; i < v.size();) {
    const char c = v[i];
    const std::size_t n = utf8_length(v, i);
    if (n == 0) {
      out += "\xEF\xBF\xBD";
      ++i;
      continue;
    }
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out.append(v.substr(i, n));
    i += n;
  }
  return out;
}

// HELP text: backslash and line feed escaped.
std::string escape_help(std::string_view v) {
  std::string out;
  for (const char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

// `count` units of 10^-decimals as an exact decimal ("1.5", "0.00005", "0").
std::string fixed_point(std::uint64_t count, int decimals) {
  std::uint64_t scale = 1;
  for (int d = 0; d < decimals; ++d) scale *= 10;
  std::string s = std::to_string(count / scale);
  std::string frac = std::to_string(count % scale);
  if (count % scale == 0) return s;
  frac.insert(0, static_cast<std::size_t>(decimals) - frac.size(), '0');
  while (!frac.empty() && frac.back() == '0') frac.pop_back();
  return s + "." + frac;
}

std::string seconds_from_ms(std::int64_t ms) { return fixed_point(ms < 0 ? 0 : static_cast<std::uint64_t>(ms), 3); }
std::string seconds_from_ns(std::int64_t ns) { return fixed_point(ns < 0 ? 0 : static_cast<std::uint64_t>(ns), 9); }

// One exposition: every family's HELP and TYPE once, then all its samples,
// whichever subjects (boxes, pools) they come from. Families are written in
// the order they were first named; a family's samples in the order they came.
// One box's text (stat --prometheus) and the whole host's (shmbox metrics)
// are both written through it, by the same writers below.
class exposition {
 public:
  // The label every sample gets from now on: `key`="value" (box="jobs",
  // pool="workers"); "" for none (the exporter's own gauges).
  void subject(std::string_view key, std::string_view value) {
    first_ = key.empty() ? std::string() : std::string(key) + "=\"" + escape_label_value(value) + "\"";
  }

  // Names the family the next samples belong to: its HELP and TYPE are
  // written with the first subject that names it.
  void family(std::string_view name, std::string_view type, std::string_view help) {
    const auto [it, added] = index_.try_emplace(std::string(name), families_.size());
    if (added) {
      families_.push_back({});
      std::string& out = families_.back();
      out += "# HELP ";
      out += name;
      out += ' ';
      out += escape_help(help);
      out += "\n# TYPE ";
      out += name;
      out += ' ';
      out += type;
      out += '\n';
    }
    current_ = &families_[it->second];
  }

  // One sample of the current family: name{box="...",<extra>} value. `extra`
  // is `,k="v",...` (values escaped).
  void sample(std::string_view name, const std::string& value, const std::string& extra = {}) {
    std::string& out = *current_;
    out += name;
    if (!first_.empty() || !extra.empty()) {
      out += '{';
      if (first_.empty()) out.append(extra, 1);  // without its leading ','
      else (out += first_) += extra;
      out += '}';
    }
    out += ' ';
    out += value;
    out += '\n';
  }

  // A family with a single sample labelled by the subject only.
  void single(std::string_view name, std::string_view type, std::string_view help, const std::string& value) {
    family(name, type, help);
    sample(name, value);
  }

  // The text: the families in order, each whole.
  std::string take() {
    std::size_t n = 0;
    for (const std::string& f : families_) n += f.size();
    std::string out;
    out.reserve(n);
    for (const std::string& f : families_) out += f;
    families_.clear();
    index_.clear();
    current_ = nullptr;
    return out;
  }

 private:
  std::string first_;
  std::deque<std::string> families_;  // each: HELP, TYPE, samples (a deque: current_ stays valid)
  std::unordered_map<std::string, std::size_t> index_;
  std::string* current_ = nullptr;
};

std::string label(std::string_view key, std::string_view value) {
  return std::string(",") + std::string(key) + "=\"" + escape_label_value(value) + "\"";
}

std::string num(std::uint64_t v) { return std::to_string(v); }
std::string flag(bool b) { return b ? "1" : "0"; }

// One counter family, one sample per lane.
struct counter_family {
  const char* name;
  const char* help;
  std::uint64_t shmbox::counters::*field;
};

constexpr counter_family kCounters[] = {
    {"shmbox_posted_total", "Messages posted to the lane (each message of a batch counts once; a loan when it claims its slot).",
     &shmbox::counters::posted},
    {"shmbox_stored_total", "Messages that entered the lane.", &shmbox::counters::stored},
    {"shmbox_delivered_total", "Messages the owner received and committed.", &shmbox::counters::delivered},
    {"shmbox_rejected_total", "Messages refused because the lane was full (policy reject).", &shmbox::counters::rejected},
    {"shmbox_too_large_total", "Messages refused because they were larger than the slot size.",
     &shmbox::counters::too_large},
    {"shmbox_timeouts_total", "Posts that found no space before their timeout (policy block).",
     &shmbox::counters::timeouts},
    {"shmbox_dropped_newest_total", "New messages discarded on a full lane (drop-newest), or lifo tops replaced.",
     &shmbox::counters::dropped_newest},
    {"shmbox_dropped_oldest_total", "Messages evicted to make room (drop-oldest).", &shmbox::counters::dropped_oldest},
    {"shmbox_filtered_total", "Messages dropped by the owner's filter (and by a custom buffer).", &shmbox::counters::filtered},
    {"shmbox_buffer_dropped_total", "Of shmbox_filtered_total: messages the box's custom buffer dropped.",
     &shmbox::counters::buffer_dropped},
    {"shmbox_abandoned_total", "Messages lost because their producer died between claiming a slot and publishing it.",
     &shmbox::counters::abandoned},
    {"shmbox_aborted_total", "Loans given back unposted.", &shmbox::counters::aborted},
    {"shmbox_redelivered_total", "Messages delivered again after an owner died before committing them.",
     &shmbox::counters::redelivered},
    {"shmbox_dead_lettered_total", "Dropped or evicted messages stored in the dead-letter box.",
     &shmbox::counters::dead_lettered},
    {"shmbox_dead_letter_failed_total", "Dropped or evicted messages the dead-letter box did not take.",
     &shmbox::counters::dead_letter_failed},
    {"shmbox_stashed_total", "Messages of the lane the owner parked in its stash.", &shmbox::counters::stashed},
    {"shmbox_unstashed_total", "Parked messages of the lane the owner received back.", &shmbox::counters::unstashed},
};

// A box's families, labelled box="NAME".
void write_box(exposition& e, const shmbox::box_info& i) {
  e.subject("box", i.name);
  const auto lane_label = [](std::size_t l) { return label("lane", std::to_string(l)); };

  e.family("shmbox_box_info", "gauge", "Constant 1; the labels tell the box's default policy and dead-letter box (\"\": none).");
  e.sample("shmbox_box_info", "1",
           label("policy", shmbox::to_string(i.overflow)) + label("dead_letters", i.dead_letters));

  e.single("shmbox_lanes", "gauge", "Lanes of the box (lane 0 is the control lane).", num(i.lanes.size()));

  e.family("shmbox_lane_info", "gauge", "Constant 1 per lane; the policy label tells the lane's overflow policy.");
  for (std::size_t l = 0; l < i.lanes.size(); ++l)
    e.sample("shmbox_lane_info", "1", lane_label(l) + label("policy", shmbox::to_string(i.lanes[l].overflow)));

  e.family("shmbox_capacity_messages", "gauge", "Messages the lane holds at most.");
  for (std::size_t l = 0; l < i.lanes.size(); ++l) e.sample("shmbox_capacity_messages", num(i.lanes[l].capacity), lane_label(l));

  e.family("shmbox_depth_messages", "gauge", "Messages in the lane now.");
  for (std::size_t l = 0; l < i.lanes.size(); ++l) e.sample("shmbox_depth_messages", num(i.lanes[l].depth), lane_label(l));

  e.family("shmbox_parked_messages", "gauge", "Messages of the lane parked in the owner's stash (they count against its capacity).");
  for (std::size_t l = 0; l < i.lanes.size(); ++l) e.sample("shmbox_parked_messages", num(i.lanes[l].parked), lane_label(l));

  e.single("shmbox_slot_size_bytes", "gauge", "Largest message the box takes.", num(i.slot_size));
  e.single("shmbox_segment_bytes", "gauge", "Size of the shared-memory segment.", num(i.segment_bytes));
  e.single("shmbox_producers_attached", "gauge", "Producer entries held by live processes.", num(i.producers_attached));
  e.single("shmbox_producers_max", "gauge", "Producer entries of the box (live producers at once, at most).",
           num(i.max_producers));
  e.single("shmbox_owner_pid", "gauge", "Process id of the owner (0: none).", num(i.owner.pid));
  e.single("shmbox_owner_alive", "gauge", "1 if the owner process is alive (the kernel holds its lock, in any pid namespace).",
           flag(i.owner.alive));
  e.single("shmbox_owner_pid_namespace", "gauge",
           "Inode of the owner's pid namespace (0: none or unknown); differs from the exporter's for another container.",
           num(i.owner.pid ? i.owner.pid_ns : 0));
  e.single("shmbox_owner_same_pid_namespace", "gauge", "1 if the owner runs in the exporter's pid namespace (its pid means it here).",
           flag(i.owner.pid != 0 && i.owner.same_namespace));
  e.single("shmbox_owner_lease_expired", "gauge", "1 if the owner is alive but its lease expired without renewal.",
           flag(i.owner.expired));
  e.single("shmbox_owner_epoch", "gauge", "Owner epoch: +1 on every change of owner.", num(i.owner.epoch));

  e.family("shmbox_owner_state", "gauge", "1 for the owner's current state, 0 for the others.");
  for (const char* s : {"passive", "notify", "active"})
    e.sample("shmbox_owner_state", flag(i.owner.state == s), label("state", s));

  e.single("shmbox_owner_accepts_requests", "gauge", "1 if the owner hands the box over on request (shmbox give-away).",
           flag(i.accepts_requests));
  e.single("shmbox_heirs", "gauge", "Entries of the heir table (heirs and listeners, live or dead).", num(i.heirs.size()));
  e.single("shmbox_orphaned", "gauge", "1 if the owner died (or its lease expired) and no live heir is waiting.",
           flag(i.orphaned));
  e.single("shmbox_lease_seconds", "gauge", "Lease of an owner that does not receive (0: only death ends a lease).",
           seconds_from_ms(i.lease.count()));
  e.single("shmbox_block_timeout_seconds", "gauge", "Default wait of a post on a full block lane.",
           seconds_from_ms(i.block_timeout.count()));
  e.single("shmbox_spin_seconds", "gauge", "How long a blocking call polls before it sleeps (adaptive wait).",
           seconds_from_ns(i.spin.count()));

  for (const counter_family& c : kCounters) {
    e.family(c.name, "counter", c.help);
    for (std::size_t l = 0; l < i.lanes.size(); ++l) e.sample(c.name, num(i.lanes[l].count.*c.field), lane_label(l));
  }
}

// The box's NATS bridges, labelled box="BOX" and role; nothing when it has none.
void write_bridges(exposition& e, const std::string& box, const std::vector<bridge_info>& bridges) {
  if (bridges.empty()) return;
  e.subject("box", box);
  const auto role = [](const bridge_info& b) { return label("role", to_string(b.role)); };
  e.family("shmbox_bridge_info", "gauge", "Constant 1 per bridge of the box (export or import); labels: stream, subject, durable, server.");
  for (const bridge_info& b : bridges)
    e.sample("shmbox_bridge_info", "1",
             role(b) + label("stream", b.stream) + label("subject", b.subject) + label("durable", b.durable) + label("nats", b.nats));
  e.family("shmbox_bridge_alive", "gauge", "1 if a bridge process works the box now (holds its status segment's lock).");
  for (const bridge_info& b : bridges) e.sample("shmbox_bridge_alive", flag(b.alive), role(b));
  e.family("shmbox_bridge_pid", "gauge", "Process id of the bridge that works the box (last one).");
  for (const bridge_info& b : bridges) e.sample("shmbox_bridge_pid", num(b.pid), role(b));
  e.family("shmbox_bridge_state", "gauge", "1 for the state the bridge is in (label state), 0 for the others.");
  for (const bridge_info& b : bridges)
    for (std::uint32_t s = 0; s < static_cast<std::uint32_t>(bridge_state::count_); ++s)
      e.sample("shmbox_bridge_state", flag(b.state == static_cast<bridge_state>(s)), role(b) + label("state", to_string(static_cast<bridge_state>(s))));
  e.family("shmbox_bridge_last_error_timestamp_seconds", "gauge", "When the bridge last met an error (Unix time; 0: never); stat says which.");
  for (const bridge_info& b : bridges) e.sample("shmbox_bridge_last_error_timestamp_seconds", seconds_from_ns(static_cast<std::int64_t>(b.error_unix_ns)), role(b));
  // A counter only for the roles that count it (no always-zero series).
  for (std::uint32_t c = 0; c < kBridgeCounters; ++c) {
    const auto which = static_cast<bridge_counter>(c);
    if (std::none_of(bridges.begin(), bridges.end(), [&](const bridge_info& b) { return counts(b.role, which); })) continue;
    const std::string name = "shmbox_bridge_" + std::string(to_string(which)) + "_total";
    e.family(name, "counter", help(which));
    for (const bridge_info& b : bridges)
      if (counts(b.role, which)) e.sample(name, num(b.counters[c]), role(b));
  }
}

// ---- pools ----------------------------------------------------------------------

constexpr pool_counter_field kPoolCounters[] = {
    {"takes", "Leases given (members taken).", &shmbox::pool_counters::takes},
    {"returns_ok", "Members given back ok.", &shmbox::pool_counters::returns_ok},
    {"returns_fail", "Members given back as failed (stopped and replaced).", &shmbox::pool_counters::returns_fail},
    {"no_members_at_capacity", "Takes refused: none free and max members reached.",
     &shmbox::pool_counters::no_members_at_capacity},
    {"no_members_queue_full", "Takes refused: the queue of waiting takers was full.",
     &shmbox::pool_counters::no_members_queue_full},
    {"no_members_starting", "Takes with timeout 0 refused while a member was being started.",
     &shmbox::pool_counters::no_members_starting},
    {"take_timeouts", "Takes that waited in vain.", &shmbox::pool_counters::take_timeouts},
    {"queue_max_reached", "Times the queue of waiting takers became full.", &shmbox::pool_counters::queue_max_reached},
    {"granted", "Members handed straight to a waiting taker.", &shmbox::pool_counters::granted},
    {"killed_free_culled", "Idle members stopped by cull-after.", &shmbox::pool_counters::killed_free_culled},
    {"killed_free_unhealthy", "Free members stopped because they failed the health check.",
     &shmbox::pool_counters::killed_free_unhealthy},
    {"killed_in_use", "Members stopped because their holder died holding them.", &shmbox::pool_counters::killed_in_use},
    {"revoked_in_use", "Leases ended by the pool: their member was stopped under them (worker died, removed at once).",
     &shmbox::pool_counters::revoked_in_use},
    {"crashed", "Members whose worker died on its own (restarted).", &shmbox::pool_counters::crashed},
    {"start_failures", "Members that did not own their box within the start timeout.", &shmbox::pool_counters::start_failures},
    {"starts", "Worker processes started.", &shmbox::pool_counters::starts},
    {"double_returns", "Give-backs of a lease given back already.", &shmbox::pool_counters::double_returns},
    {"stale_returns", "Give-backs of a lease the pool had ended (its member was stopped under it).",
     &shmbox::pool_counters::stale_returns},
    {"dead_lettered", "Messages of stopped members moved to the dead-letter box.", &shmbox::pool_counters::dead_lettered},
    {"lost", "Messages of stopped members that no dead-letter box took.", &shmbox::pool_counters::lost},
    {"refused_signals", "Signals not sent: the process a pool entry named was not proven to be this pool's worker.",
     &shmbox::pool_counters::refused_signals},
    {"expired_free", "Free members retired at their max lifetime (and replaced).", &shmbox::pool_counters::expired_free},
    {"expired_returned", "Members retired at their give-back: their max lifetime passed while in use.",
     &shmbox::pool_counters::expired_returned},
    {"auto_grow_starts", "Members started ahead of demand (auto-grow threshold).", &shmbox::pool_counters::auto_grow_starts},
};

// A pool's families, labelled pool="NAME".
void write_pool(exposition& e, const shmbox::pool_info& i) {
  e.subject("pool", i.name);
  e.family("shmbox_pool_info", "gauge", "Constant 1; the labels tell the pool's group and dead-letter box (\"\": none).");
  e.sample("shmbox_pool_info", "1", label("group", i.group) + label("dead_letters", i.dead_letters));

  e.family("shmbox_pool_members", "gauge", "Members in each state now.");
  const std::pair<const char*, std::uint32_t> states[] = {
      {"free", i.free}, {"in_use", i.in_use}, {"starting", i.starting}, {"checking", i.checking}, {"stopping", i.stopping}};
  for (const auto& [state, n] : states) e.sample("shmbox_pool_members", num(n), label("state", state));

  e.single("shmbox_pool_members_init", "gauge", "Members the supervisor keeps started.", num(i.init_count));
  e.single("shmbox_pool_members_max", "gauge", "Members the pool may have at most.", num(i.max_count));
  e.single("shmbox_pool_queued", "gauge", "Takers waiting for a member now.", num(i.queued));
  e.single("shmbox_pool_queue_max", "gauge", "Takers that may wait at once.", num(i.queue_max));
  e.single("shmbox_pool_clients", "gauge", "Live pool handles (takers, supervisors, standbys).", num(i.clients));
  e.single("shmbox_pool_clients_max", "gauge", "Pool handles that may be open at once.", num(i.max_clients));
  e.single("shmbox_pool_supervisor_pid", "gauge", "Process id of the supervisor (0: none).", num(i.supervisor_pid));
  e.single("shmbox_pool_supervisor_alive", "gauge", "1 if the supervisor process is alive.", flag(i.supervisor_alive));
  e.single("shmbox_pool_supervisor_epoch", "gauge", "Supervisor epoch: +1 on every change of supervisor.",
           num(i.supervisor_epoch));
  e.single("shmbox_pool_standbys", "gauge", "Live supervisors standing by.", num(i.standbys));
  e.single("shmbox_pool_removing", "gauge", "1 while the pool is being removed.", flag(!i.removing.empty()));
  e.single("shmbox_pool_cull_after_seconds", "gauge", "Idle time after which a free member is stopped (0: never).",
           seconds_from_ms(i.cull_after.count()));
  e.single("shmbox_pool_max_lifetime_seconds", "gauge", "Lifetime after which a member is replaced (0: none).",
           seconds_from_ms(i.max_lifetime.count()));
  e.single("shmbox_pool_start_timeout_seconds", "gauge", "Time a new member has to own its box.",
           seconds_from_ms(i.start_timeout.count()));
  e.single("shmbox_pool_health_interval_seconds", "gauge", "Interval of the health checks (0: none).",
           seconds_from_ms(i.health_interval.count()));
  e.single("shmbox_pool_segment_bytes", "gauge", "Size of the pool's shared-memory segment.", num(i.segment_bytes));
  e.single("shmbox_pool_ledger_gap", "gauge",
           "Takes minus the leases ended (ok, fail, holder died, revoked) and in use: 0 when the pool's ledger holds.",
           std::to_string(i.ledger_gap));

  e.family("shmbox_pool_member_depth_messages", "gauge", "Messages in each member's box now.");
  for (const auto& m : i.members)
    e.sample("shmbox_pool_member_depth_messages", num(m.depth), label("member", std::to_string(m.index)) + label("box", m.box));
  e.family("shmbox_pool_member_leases_total", "counter", "Times each member was taken (a replacement starts at 0).");
  for (const auto& m : i.members)
    e.sample("shmbox_pool_member_leases_total", num(m.leases), label("member", std::to_string(m.index)) + label("box", m.box));

  // One family per counter: shmbox_pool_<key>_total.
  for (const pool_counter_field& c : kPoolCounters) {
    const std::string name = std::string("shmbox_pool_") + c.key + "_total";
    e.family(name, "counter", c.help);
    e.sample(name, num(i.count.*c.field));
  }
}

}  // namespace

std::string prometheus_text(const shmbox::box_info& i) {
  exposition e;
  write_box(e, i);
  return e.take();
}

std::string prometheus_bridge_text(const std::string& box, const std::vector<bridge_info>& bridges) {
  exposition e;
  write_bridges(e, box, bridges);
  return e.take();
}

std::string prometheus_pool_text(const shmbox::pool_info& i) {
  exposition e;
  write_pool(e, i);
  return e.take();
}

std::span<const pool_counter_field> pool_counter_fields() { return kPoolCounters; }

// ---- shmbox metrics ---------------------------------------------------------------

std::string metrics_exposition(std::vector<std::string>& warnings, std::error_code& list_error) {
  // What `shmbox ls` and `shmbox pool ls` list, read once each.
  const std::vector<listed_box> boxes = inspect_all_boxes(list_error);
  if (list_error) return {};
  const std::vector<listed_pool> pools = inspect_all_pools(list_error);
  if (list_error) return {};

  exposition e;
  // The exporter's own gauges come first; their samples are known at the end.
  constexpr const char* kExported = "shmbox_metrics_exported_segments";
  constexpr const char* kUnreadable = "shmbox_metrics_unreadable_segments";
  constexpr const char* kExportedHelp = "Boxes, pools and bridges (label kind) whose figures this exposition holds.";
  constexpr const char* kUnreadableHelp =
      "Segments (label kind) named like a box, pool or bridge status that could not be read (permission denied, corrupt, "
      "incomplete, not a regular file) or are not trusted (a bridge status of another user, or writable by others): skipped, "
      "each with a warning on stderr.";
  e.subject("", "");
  e.family(kExported, "gauge", kExportedHelp);
  e.family(kUnreadable, "gauge", kUnreadableHelp);

  // One scan for bridge statuses instead of two failed opens per box.
  const std::optional<std::set<std::string>> bridged = boxes_with_bridge_status();
  std::uint64_t exported_boxes = 0, exported_pools = 0, exported_bridges = 0;
  std::uint64_t unreadable_boxes = 0, unreadable_pools = 0, unreadable_bridges = 0;
  for (const listed_box& b : boxes) {
    if (!b.info) {
      ++unreadable_boxes;
      warnings.push_back("warning: not exported: " + b.sentence);
      continue;
    }
    write_box(e, *b.info);
    ++exported_boxes;
    if (bridged && bridged->count(b.info->name) == 0) continue;
    std::vector<std::string> problems;
    // A status the trust rule refuses (another user's, writable by others) is one of these too.
    const std::vector<bridge_info> bridges = read_bridges(b.info->name, b.info->uid, &problems);
    for (const std::string& p : problems) warnings.push_back("warning: " + p);
    unreadable_bridges += problems.size();
    write_bridges(e, b.info->name, bridges);
    exported_bridges += bridges.size();
  }
  for (const listed_pool& p : pools) {
    if (!p.info) {
      ++unreadable_pools;
      warnings.push_back("warning: not exported: " + p.sentence);
      continue;
    }
    write_pool(e, *p.info);
    ++exported_pools;
  }

  e.subject("", "");
  e.family(kExported, "gauge", kExportedHelp);
  e.sample(kExported, num(exported_boxes), label("kind", "box"));
  e.sample(kExported, num(exported_pools), label("kind", "pool"));
  e.sample(kExported, num(exported_bridges), label("kind", "bridge"));
  e.family(kUnreadable, "gauge", kUnreadableHelp);
  e.sample(kUnreadable, num(unreadable_boxes), label("kind", "box"));
  e.sample(kUnreadable, num(unreadable_pools), label("kind", "pool"));
  e.sample(kUnreadable, num(unreadable_bridges), label("kind", "bridge"));
  return e.take();
}

int cmd_metrics(const std::string& listen) {
  if (!listen.empty()) return cmd_metrics_listen(listen);
  std::vector<std::string> warnings;
  std::error_code list_error;
  const std::string text = metrics_exposition(warnings, list_error);
  if (list_error) return fail(list_error);
  for (const std::string& w : warnings) say(w);

  // One write of the whole text: a textfile collector's `> f.$$ && mv` needs
  // to know that it all went out.
  if (!write_all(STDOUT_FILENO, text.data(), text.size())) {
    say(std::string("cannot write the exposition to standard output: ") + std::strerror(errno));
    return kExitFail;
  }
  return kExitOk;
}

}  // namespace shmbox_cli
