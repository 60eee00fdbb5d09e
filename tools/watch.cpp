// tools/watch.cpp - `shmbox watch NAME [--interval MS] [--count N] [--plain]`:
// a live, read-only view of a box, refreshed every interval (top-like): what
// it shows. The loop, the terminal and the signals are run_live_view's
// (tools/live_view.cpp), shared with `shmbox pool watch` (tools/pool_cmds.cpp).
//
// The box is opened with Box::inspect (read-only: nothing in the segment is
// written) and read with shmbox::info() at each refresh. Rates are counter
// deltas over the time between two refreshes (never negative: a counter that
// went backwards, which only a scribbled segment does, counts as 0).
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "commands.hpp"
#include "shmbox/shmbox.hpp"

namespace shmbox_cli {

namespace {

using steady = std::chrono::steady_clock;
using wall = std::chrono::system_clock;

// ---- figures -----------------------------------------------------------------

enum class segment_state { present, removed, replaced, truncated };

const char* to_string(segment_state s) {
  switch (s) {
    case segment_state::removed: return "removed";
    case segment_state::replaced: return "replaced";
    case segment_state::truncated: return "truncated";
    default: return "present";
  }
}

// The file behind the mapping: still there, gone (shmbox rm), or another
// box created under the same name since (our mapping still shows the old one).
// lstat, never stat: a symbolic link put at the name is a replacement, not followed.
class segment_watch {
 public:
  explicit segment_watch(const std::string& name) : path_("/dev/shm/shmbox." + name) {
    struct stat st {};
    if (::lstat(path_.c_str(), &st) == 0) id_ = {st.st_dev, st.st_ino};
  }
  segment_state check() const {
    struct stat st {};
    if (::lstat(path_.c_str(), &st) != 0) return errno == ENOENT ? segment_state::removed : segment_state::present;
    if (id_ && (id_->first != st.st_dev || id_->second != st.st_ino)) return segment_state::replaced;
    return segment_state::present;
  }

 private:
  std::string path_;
  std::optional<std::pair<dev_t, ino_t>> id_;
};

struct sample {
  shmbox::box_info info;
  steady::time_point at;
  wall::time_point when;
  segment_state segment = segment_state::present;
};

std::uint64_t dropped_of(const shmbox::counters& c) { return c.dropped_newest + c.dropped_oldest + c.filtered; }
std::uint64_t rejected_of(const shmbox::counters& c) { return c.rejected + c.timeouts; }

// Per second, between two refreshes; unset on the first.
struct rates {
  double posted = 0, delivered = 0, dropped = 0, rejected = 0;
};

rates rates_between(const sample& before, const sample& now) {
  const double s = std::chrono::duration<double>(now.at - before.at).count();
  const shmbox::counters &a = before.info.count, &b = now.info.count;
  return {per_second(b.posted, a.posted, s), per_second(b.delivered, a.delivered, s),
          per_second(dropped_of(b), dropped_of(a), s), per_second(rejected_of(b), rejected_of(a), s)};
}

// "1500", "2.5", "0"; "-" before there is a rate.
std::string rate_text(const std::optional<rates>& r, double rates::*which) {
  if (!r) return "-";
  return rate_string((*r).*which);
}

const char* owner_status(const shmbox::owner_info& o) {
  if (o.pid == 0) return "none";
  if (o.alive && o.expired) return "expired";
  return o.alive ? "alive" : "dead";
}

std::size_t heirs_alive(const shmbox::box_info& i) {
  return static_cast<std::size_t>(std::count_if(i.heirs.begin(), i.heirs.end(), [](const shmbox::heir_info& h) { return h.alive; }));
}

// ---- plain: a line per refresh -----------------------------------------------

std::string plain_header(const shmbox::box_info& i, std::uint32_t interval_ms) {
  return "# shmbox watch: box=" + i.name + " policy=" + std::string(shmbox::to_string(i.overflow)) +
         " capacity=" + std::to_string(i.capacity) + " slot_size=" + std::to_string(i.slot_size) +
         " lanes=" + std::to_string(i.lanes.size()) + " max_producers=" + std::to_string(i.max_producers) +
         " lease_ms=" + std::to_string(i.lease.count()) + " interval_ms=" + std::to_string(interval_ms) + "\n";
}

std::string plain_line(const sample& s, const std::optional<rates>& r) {
  const shmbox::box_info& i = s.info;
  const shmbox::counters& c = i.count;
  std::string l = utc_stamp(s.when);
  auto kv = [&l](const char* k, const std::string& v) {
    l += ' ';
    l += k;
    l += '=';
    l += v;
  };
  kv("box", i.name);
  kv("depth", std::to_string(i.depth) + "/" + std::to_string(i.capacity));
  if (i.lanes.size() > 1) {
    std::string lanes;
    for (const auto& li : i.lanes) {
      if (!lanes.empty()) lanes += ',';
      lanes += std::to_string(li.depth);
      lanes += '/';
      lanes += std::to_string(li.capacity);
    }
    kv("lane_depths", lanes);
  }
  kv("posted/s", rate_text(r, &rates::posted));
  kv("delivered/s", rate_text(r, &rates::delivered));
  kv("dropped/s", rate_text(r, &rates::dropped));
  kv("rejected/s", rate_text(r, &rates::rejected));
  kv("posted", std::to_string(c.posted));
  kv("delivered", std::to_string(c.delivered));
  kv("dropped", std::to_string(dropped_of(c)));
  kv("rejected", std::to_string(rejected_of(c)));
  kv("owner", std::to_string(i.owner.pid));
  kv("owner_status", owner_status(i.owner));
  kv("owner_pid_ns", i.owner.same_namespace || i.owner.pid == 0 ? std::string("this") : std::to_string(i.owner.pid_ns));
  kv("epoch", std::to_string(i.owner.epoch));
  kv("state", i.owner.state);
  kv("requests", i.accepts_requests ? "yes" : "no");
  kv("heirs", std::to_string(i.heirs.size()));
  kv("heirs_alive", std::to_string(heirs_alive(i)));
  kv("producers", std::to_string(i.producers_attached));
  kv("orphaned", i.orphaned ? "yes" : "no");
  const shmbox::transfer_record& t = i.last_transfer;
  kv("transfer", t.epoch == 0 ? std::string("none")
                              : std::string(shmbox::to_string(t.reason)) + ":" + std::to_string(t.from_pid) + "->" +
                                    std::to_string(t.to_pid));
  kv("segment", to_string(s.segment));
  l += '\n';
  return l;
}
// ---- the full-screen view ----------------------------------------------------

std::string percent(std::uint64_t depth, std::uint32_t capacity) {
  if (capacity == 0) return "  -";
  const std::uint64_t p = depth * 100 / capacity;
  if (p == 0 && depth > 0) return " <1%";
  return format("%3llu%%", static_cast<unsigned long long>(std::min<std::uint64_t>(p, 100)));
}

std::vector<view_line> frame_lines(const sample& s, const std::optional<rates>& r, std::uint32_t interval_ms, bool utf8) {
  const shmbox::box_info& i = s.info;
  const shmbox::counters& c = i.count;
  std::vector<view_line> out;
  auto add = [&out](std::string t, const char* attr = nullptr) { out.push_back({std::move(t), attr}); };

  add(title_line("shmbox watch  " + i.name, s.when, interval_ms), "\x1b[1m");
  std::string geo = format("policy %s  capacity %u x %u B  lanes %zu  producers max %u", std::string(shmbox::to_string(i.overflow)).c_str(),
                           i.capacity, i.slot_size, i.lanes.size(), i.max_producers);
  geo.append(geo.size() < 68 ? 68 - geo.size() : 1, ' ');
  add(geo + "  q: quit");
  if (s.segment == segment_state::removed)
    add(" REMOVED: /dev/shm/shmbox." + i.name + " is gone; showing the last state seen ", "\x1b[7m");
  else if (s.segment == segment_state::replaced)
    add(" REPLACED: a new box '" + i.name + "' exists; this is the old one (restart watch) ", "\x1b[7m");
  else if (s.segment == segment_state::truncated)
    add(" TRUNCATED: another process shrank the segment under this view; what it held beyond reads as zeros ", "\x1b[7m");
  add("");

  add(format("%-5s %-11s %17s  %-34s %4s", "LANE", "POLICY", "DEPTH/CAP", "FILL", ""), "\x1b[1m");
  for (std::size_t l = 0; l < i.lanes.size(); ++l) {
    const shmbox::lane_info& li = i.lanes[l];
    const std::string name = i.lanes.size() > 1 && l == 0 ? "0 ctl" : std::to_string(l);
    const std::string dc = std::to_string(li.depth) + "/" + std::to_string(li.capacity);
    add(format("%-5s %-11s %17s  %s %s", name.c_str(), std::string(shmbox::to_string(li.overflow)).c_str(), dc.c_str(),
               bar(li.depth, li.capacity, 32, utf8).c_str(), percent(li.depth, li.capacity).c_str()));
  }
  if (i.lanes.size() > 1) {
    const std::string dc = std::to_string(i.depth) + "/" + std::to_string(i.capacity);
    add(format("%-5s %-11s %17s  %s %s", "all", "", dc.c_str(), bar(i.depth, i.capacity, 32, utf8).c_str(),
               percent(i.depth, i.capacity).c_str()));
  }
  add("");

  add(format("%-12s %12s %16s", "MESSAGES", "PER SECOND", "TOTAL"), "\x1b[1m");
  auto row = [&](const char* what, double rates::*which, std::uint64_t total, const std::string& detail) {
    add(format("%-12s %12s %16llu   %s", what, rate_text(r, which).c_str(), static_cast<unsigned long long>(total),
               detail.c_str()));
  };
  row("posted", &rates::posted, c.posted, "");
  row("delivered", &rates::delivered, c.delivered, format("redelivered %llu", static_cast<unsigned long long>(c.redelivered)));
  row("dropped", &rates::dropped, dropped_of(c),
      format("newest %llu  oldest %llu  filtered %llu", static_cast<unsigned long long>(c.dropped_newest),
             static_cast<unsigned long long>(c.dropped_oldest), static_cast<unsigned long long>(c.filtered)));
  row("rejected", &rates::rejected, rejected_of(c),
      format("full %llu  timeouts %llu", static_cast<unsigned long long>(c.rejected), static_cast<unsigned long long>(c.timeouts)));
  add(format("%-12s too large %llu  abandoned %llu  aborted %llu", "other", static_cast<unsigned long long>(c.too_large),
             static_cast<unsigned long long>(c.abandoned), static_cast<unsigned long long>(c.aborted)));
  add("");

  const shmbox::owner_info& o = i.owner;
  if (o.pid == 0) {
    add(format("%-10s none (epoch %llu)", "OWNER", static_cast<unsigned long long>(o.epoch)));
  } else {
    const char* st = o.alive && o.expired ? "lease EXPIRED" : o.alive ? "alive" : "DEAD";
    add(format("%-10s pid %u%s  %s  epoch %llu  %s  give-away requests: %s", "OWNER", o.pid,
               o.same_namespace ? "" : format(" (pid ns %llu)", static_cast<unsigned long long>(o.pid_ns)).c_str(), st,
               static_cast<unsigned long long>(o.epoch), o.state.c_str(), i.accepts_requests ? "yes" : "no"));
  }
  add(format("%-10s %s", "LEASE", i.lease.count() == 0 ? "none (only death ends it)"
                                                        : format("%lld ms", static_cast<long long>(i.lease.count())).c_str()));
  if (i.heirs.empty()) {
    add(format("%-10s none", "HEIRS"));
  } else {
    // In order, wrapped; at most 3 lines.
    std::vector<std::string> items;
    for (std::size_t h = 0; h < i.heirs.size(); ++h) {
      const shmbox::heir_info& hi = i.heirs[h];
      items.push_back(format("#%zu pid %u%s %s%s", h + 1, hi.pid, hi.same_namespace ? "" : " (other pid ns)",
                             hi.alive ? "alive" : "dead", hi.listener ? " (listener)" : ""));
    }
    std::string cur = format("%-10s ", "HEIRS");
    int lines = 1;
    for (std::size_t k = 0; k < items.size(); ++k) {
      const std::string sep = cur.size() > 11 ? ",  " : "";
      // The third line keeps room for "  +N more" (N < 10000 heirs: 11 columns).
      const std::size_t limit = lines == 3 ? 79 - 11 : 79;
      if (cur.size() + sep.size() + items[k].size() > limit) {
        if (lines == 3) {
          cur += format("  +%zu more", items.size() - k);
          break;
        }
        ++lines;
        add(cur);
        cur = std::string(11, ' ') + items[k];
      } else {
        cur += sep + items[k];
      }
    }
    add(cur);
  }
  add(format("%-10s %u live  (%zu entries held, of %u)", "PRODUCERS", i.producers_attached, i.producers.size(), i.max_producers));
  const shmbox::transfer_record& t = i.last_transfer;
  if (t.epoch == 0)
    add(format("%-10s none", "TRANSFER"));
  else
    add(format("%-10s %s  pid %u -> pid %u  (epoch %llu)", "TRANSFER", std::string(shmbox::to_string(t.reason)).c_str(),
               t.from_pid, t.to_pid, static_cast<unsigned long long>(t.epoch)));
  if (!i.dead_letters.empty()) add(format("%-10s -> box '%s'", "DEAD LTRS", printable(i.dead_letters).c_str()));
  if (i.orphaned) {
    add("");
    add(" ORPHANED: the owner is dead and no live heir waits; any process may claim it ", "\x1b[7m");
  }
  return out;
}
// ---- the box's view ------------------------------------------------------------

class box_view final : public live_view {
 public:
  explicit box_view(shmbox::Box box) : box_(std::move(box)), seg_(box_.name()) {}

  std::string header(std::uint32_t interval_ms) override { return plain_header(shmbox::info(box_), interval_ms); }

  void refresh() override {
    sample s;
    s.info = shmbox::info(box_);
    s.at = steady::now();
    s.when = wall::now();
    s.segment = box_.intact() ? seg_.check() : segment_state::truncated;  // T5 (docs/guarantees.md)
    r_ = prev_ ? std::optional<rates>(rates_between(*prev_, s)) : std::nullopt;
    prev_ = std::move(s);
  }

  std::string line() override { return plain_line(*prev_, r_); }

  std::vector<view_line> frame(std::uint32_t interval_ms, bool utf8) override {
    return frame_lines(*prev_, r_, interval_ms, utf8);
  }

 private:
  shmbox::Box box_;
  segment_watch seg_;
  std::optional<sample> prev_;
  std::optional<rates> r_;
};
}  // namespace

int cmd_watch(const parsed& a) {
  auto box = shmbox::Box::inspect(a.name);
  if (!box) {
    say(shmbox::explain(box.error()));
    return kExitFail;
  }
  box_view view(std::move(*box));
  return run_live_view(view, a.watch);
}

}  // namespace shmbox_cli
