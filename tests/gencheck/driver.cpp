// tests/gencheck/driver.cpp - one run of the generative checker (driver.hpp).
//
// The driver is the scheduler: it tells one process at a time to do one call
// and waits for its answer, so that between two steps the box does not move
// and the reference model can say what each call must return. The
// exceptions are the point: a process killed at a random moment or at a
// crash point (SHMBOX_FAULT) inside a call, whose effect the model then
// lists as the few states the box may be in, and heirs taking the box over
// when its owner dies. After every step the box is observed (counters, depth
// and peek per lane, owner record) and the model's states that disagree are
// dropped; none left is a discrepancy, printed with the seed and the step.
//
// What holds whatever the model says is checked on its own too: the
// counting identity per lane, counters that never decrease, no torn or
// invented message, no message delivered twice without the redelivered
// flag, per-producer FIFO among first deliveries (FIFO lanes), and at the
// end, once the box is drained, every stored message delivered unless its
// lane's policy may evict it.
#include "run.hpp"

#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>

namespace gencheck {

namespace {
// The box of the run in progress, for the signal handler (gencheck.cpp):
// a SIGTERM (meson's timeout) or SIGINT unlinks it before the process ends.
char g_box_path[256];
void set_current_box(const std::string& name) {
  const std::string path = name.empty() ? std::string() : "/shmbox." + name;
  std::snprintf(g_box_path, sizeof g_box_path, "%s", path.c_str());
}
}  // namespace

run_result run::go() {
  run_result res;
  name_ = shmtest::unique_name("gencheck");
  shmtest::segment_guard guard(name_);
  set_current_box(name_);
  try {
    setup();
    for (step_ = 1; step_ <= opt_.steps && (opt_.stop_at == 0 || step_ <= opt_.stop_at); ++step_) one_step();
    if (opt_.stop_at == 0 || opt_.stop_at > opt_.steps) drain();
  } catch (const failure& f) {
    res.ok = false;
    res.failed_step = step_;
    res.failure = f.what;
  } catch (const std::exception& e) {  // the checker's own error: reported as a failure too
    res.ok = false;
    res.failed_step = step_;
    res.failure = std::string("the checker failed: ") + e.what();
  }
  shutdown();
  set_current_box({});
  res.totals = totals_;
  res.totals.steps = std::min<std::uint64_t>(step_, opt_.steps);
  return res;
}

void run::setup() {
  shmbox::options o;
  o.capacity = cfg_.capacity[0];
  o.slot_size = cfg_.slot_size;
  o.max_producers = cfg_.max_producers;
  o.block_timeout = 50ms;
  o.lease = std::chrono::milliseconds(cfg_.lease_ms);
  o.priority = cfg_.priority;
  o.default_lane = cfg_.default_lane;
  o.spin = 20us;
  for (std::uint32_t l = 0; l < cfg_.lanes; ++l)
    o.lanes.push_back({.capacity = cfg_.capacity[l], .overflow = cfg_.policy[l], .quota = cfg_.quota[l]});
  auto created = shmbox::Box::create(name_, o);
  if (!created) fail("create: " + shmbox::explain(created.error()) + " (" + cfg_.describe() + ")");
  box_.emplace(std::move(*created));
  model m;
  m.priority = cfg_.priority;
  m.fenced = cfg_.lease_ms > 0;
  m.quota_per_entry = opt_.tolerate.count("quota-inheritance") != 0;
  m.pinned_gate_may_refuse = opt_.tolerate.count("priority-read-gate") != 0;
  m.sorting_counted_delivered = opt_.tolerate.count("priority-sorting-delivered") != 0;
  m.gap_ends_run = opt_.tolerate.count("priority-gap-order") != 0;
  for (std::uint32_t l = 0; l < cfg_.lanes; ++l) {
    lane_state L;
    L.pol = cfg_.policy[l];
    L.slots = L.limit = cfg_.capacity[l];
    L.quota = cfg_.quota[l];
    L.lifo = L.pol == policy::lifo;
    m.lanes.push_back(L);
  }
  cands_ = {m};
  ledger_fd_ = ::memfd_create("gencheck-ledger", 0);  // no CLOEXEC: the roles map it
  if (ledger_fd_ < 0 || ::ftruncate(ledger_fd_, sizeof(ledger)) != 0) fail("memfd for the ledger");
  void* p = ::mmap(nullptr, sizeof(ledger), PROT_READ | PROT_WRITE, MAP_SHARED, ledger_fd_, 0);
  if (p == MAP_FAILED) fail("mmap of the ledger");
  L_ = static_cast<ledger*>(p);
  last_obs_ = observe();
  check_box_start();
}

void run::check_box_start() {
  for (std::uint32_t l = 0; l < cfg_.lanes; ++l)
    if (box_->capacity(l) != cfg_.capacity[l])
      fail("lane " + std::to_string(l) + " holds " + std::to_string(box_->capacity(l)) + ", asked for " +
           std::to_string(cfg_.capacity[l]));
}

void run::shutdown() {
  for (proc& p : producers_) p.c.reset();
  for (proc& p : heirs_) p.c.reset();
  if (owner_) owner_->c.reset();
  producers_.clear();
  heirs_.clear();
  owner_.reset();
  box_.reset();
  (void)shmbox::Box::remove(name_);
  if (L_ != nullptr) ::munmap(L_, sizeof(ledger));
  if (ledger_fd_ >= 0) ::close(ledger_fd_);
  L_ = nullptr;
  ledger_fd_ = -1;
}

std::unique_ptr<shmtest::child> run::start(const std::vector<std::string>& args, const std::string& fault) {
  std::vector<std::string> argv{opt_.self};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<std::string> env;
  if (!fault.empty()) env.push_back("SHMBOX_FAULT=" + fault);
  return std::make_unique<shmtest::child>(argv, env, true);
}

// The answer to `cmd`; nullopt when the process died without giving it. A
// process alive and silent past `limit` is a hang: a failure.
std::optional<std::string> run::ask(proc& p, const std::string& cmd, std::chrono::milliseconds limit) {
  p.c->write_stdin(cmd + "\n");
  return answer(p, cmd, limit);
}

std::optional<std::string> run::answer(proc& p, const std::string& cmd, std::chrono::milliseconds limit) {
  auto line = p.c->read_line(limit);
  if (line) return line;
  const int st = p.c->wait(5s);
  if (p.c->timed_out()) fail("'" + cmd + "' got no answer in " + std::to_string(limit.count()) + " ms (a hang)");
  if (!shmtest::killed_by(st, SIGKILL))
    fail("'" + cmd + "': the process ended with status " + std::to_string(st) + " without answering");
  if (!p.fault.empty()) ++totals_.fault_kills;
  return std::nullopt;
}

// `cmd`, then SIGKILL after `delay_ns`: the answer if it got out first.
std::optional<std::string> run::ask_then_kill(proc& p, const std::string& cmd, std::uint64_t delay_ns) {
  p.c->write_stdin(cmd + "\n");
  pause_ns(delay_ns);
  p.c->kill(SIGKILL);
  (void)p.c->wait(10s);
  ++totals_.kills;
  return p.c->read_line(50ms);
}

void run::spawn_producer(const std::string& fault) {
  proc p;
  p.prod = next_prod_++;
  if (p.prod >= kMaxProducers) fail("out of producer numbers (the ledger holds " + std::to_string(kMaxProducers) + ")");
  p.fault = fault;
  p.c = start({"producer", name_, std::to_string(p.prod), std::to_string(ledger_fd_)}, fault);
  const auto line = p.c->read_line(20s);
  if (!line || line->rfind("ready ", 0) != 0) fail("producer start: " + line.value_or("no answer"));
  p.entry = static_cast<std::uint32_t>(std::stoul(line->substr(6)));
  note("producer p" + std::to_string(p.prod) + " attached at entry " + std::to_string(p.entry) +
       (fault.empty() ? "" : " (armed: " + fault + ")"));
  if (dead_entries_.erase(p.entry) != 0) {
    const std::uint32_t e = p.entry;
    apply([e](const model& m, std::string&) { return entry_reused(m, e); }, "entry reuse");
  }
  producers_.push_back(std::move(p));
}

void run::producer_died(std::size_t i) {
  dead_entries_.insert(producers_[i].entry);
  producers_.erase(producers_.begin() + static_cast<std::ptrdiff_t>(i));
}

// A new owner: acquire (no heir may be waiting), or nothing when it died inside.
void run::spawn_owner(const std::string& fault) {
  proc p;
  p.fault = fault;
  p.c = start({"owner", name_, "acquire"}, fault);
  const auto line = answer(p, "acquire", 20s);
  if (!line) {  // died inside its takeover (a crash point)
    apply([](const model& m, std::string&) { return acquire_cut(m); }, "acquire cut short");
    note("a new owner died inside acquire (" + fault + ")");
    return;
  }
  if (line->rfind("owned ", 0) != 0) fail("acquire: " + *line);
  apply([](const model& m, std::string&) { return std::vector<model>{acquire(m)}; }, "acquire");
  note("owner acquired: " + *line + (fault.empty() ? "" : " (armed: " + fault + ")"));
  owner_ = std::move(p);
}

void run::spawn_heir(const std::string& fault) {
  proc p;
  p.fault = fault;
  p.c = start({"owner", name_, "heir"}, fault);
  const auto line = p.c->read_line(20s);
  if (!line || line->rfind("enlisted ", 0) != 0) fail("heir start: " + line.value_or("no answer"));
  note("heir enlisted (" + *line + ")" + (fault.empty() ? "" : " armed: " + fault));
  heirs_.push_back(std::move(p));
}

// The owner is gone (the model says so already): its first live heir must
// take the box over; an heir that dies inside the takeover passes it on.
void run::await_takeover(const char* why) {
  owner_.reset();
  const std::uint64_t deadline = now_ns() + 10'000'000'000ull;
  while (!heirs_.empty()) {
    for (std::size_t i = 0; i < heirs_.size(); ++i) {
      auto line = heirs_[i].c->read_line(2ms);
      if (!line) {
        if (shmtest::process_state(heirs_[i].c->pid()) != 'Z' && ::kill(heirs_[i].c->pid(), 0) == 0) continue;
        // dead: inside its takeover (a crash point), or killed before
        (void)heirs_[i].c->wait(5s);
        if (!heirs_[i].fault.empty()) ++totals_.fault_kills;
        apply([](const model& m, std::string&) { return acquire_cut(m); }, "takeover cut short");
        note("an heir died inside its takeover (" + heirs_[i].fault + ")");
        heirs_.erase(heirs_.begin() + static_cast<std::ptrdiff_t>(i));
        break;
      }
      if (line->rfind("owned ", 0) != 0) fail(std::string(why) + ": heir said " + *line);
      apply([](const model& m, std::string&) { return std::vector<model>{acquire(m)}; }, "takeover");
      ++totals_.takeovers;
      note(std::string("heir took over (") + why + "): " + *line);
      owner_ = std::move(heirs_[i]);
      heirs_.erase(heirs_.begin() + static_cast<std::ptrdiff_t>(i));
      return;
    }
    if (now_ns() > deadline) fail(std::string(why) + ": no heir took the box over within 10 s");
  }
}

// The owner process died: the model's states are without it already.
void run::owner_died(const char* why) {
  (void)owner_->c->wait(5s);
  await_takeover(why);
}

// A lease box: an heir that took the box from a live owner whose lease ran
// out while it waited for the driver (a loaded machine). Between steps: as
// if the owner had died there.
void run::poll_lease_takeover() {
  if (cfg_.lease_ms == 0 || !owner_) return;
  for (std::size_t i = 0; i < heirs_.size(); ++i) {
    auto line = heirs_[i].c->read_line(0ms);
    if (!line) continue;
    if (line->rfind("owned ", 0) != 0) fail("heir said " + *line);
    apply([](const model& m, std::string&) { return std::vector<model>{acquire(owner_gone(m))}; }, "lease takeover");
    note("the owner's lease ran out; heir took over: " + *line);
    ++totals_.takeovers;
    retire_stale_owner();
    owner_ = std::move(heirs_[i]);
    heirs_.erase(heirs_.begin() + static_cast<std::ptrdiff_t>(i));
    return;
  }
}

// A deposed (stale) owner must refuse everything and hand out nothing.
void run::retire_stale_owner() {
  proc old = std::move(*owner_);
  owner_.reset();
  ::kill(old.c->pid(), SIGCONT);
  const auto r = ask(old, "recv 8 0", 10s);
  if (r && r->rfind("g not-owner 0", 0) != 0) fail("a deposed owner's receive answered: " + *r);
  const auto c = ask(old, "commit", 10s);
  if (c && c->rfind("c not-owner", 0) != 0) fail("a deposed owner's commit answered: " + *c);
  old.c->write_stdin("exit\n");
  (void)old.c->wait(5s);
}

std::string run::model_now() const {
  std::string s = "\n  model (" + std::to_string(cands_.size()) + " possible state" + (cands_.size() == 1 ? "" : "s") + "; the first, or the closest to the box):\n    " +
                  cands_.front().describe();
  return s;
}

observation run::observe() {
  observation o;
  const shmbox::box_info i = shmbox::info(*box_);
  for (const auto& l : i.lanes) {
    o.count.push_back(tally::of(l.count));
    o.depth.push_back(l.depth);
  }
  o.peek.resize(i.lanes.size());
  for (const shmbox::peeked_message& p : shmbox::peek(*box_, 1u << 16)) {
    if (p.stash == "reading") continue;  // a priority box's message being read: held, as ring slots being read (not listed)
    const auto id = decode(p.data);
    if (!id) fail("peek shows a torn or unknown message of " + std::to_string(p.data.size()) + " bytes in lane " + std::to_string(p.lane));
    if (p.lane < o.peek.size()) o.peek[p.lane].push_back(*id);
  }
  o.owner_alive = i.owner.alive;
  o.epoch = i.owner.epoch;
  return o;
}

std::string run::ids(const std::vector<msg_id>& v) {
  std::string s;
  for (const msg_id& m : v) s += (s.empty() ? "" : " ") + to_string(m);
  return "[" + s + "]";
}

// How a state of the model differs from the box ("" when it agrees);
// `distance` (if given) counts the differences, to name the closest state.
std::string run::mismatch(const model& m, const observation& o, std::size_t* distance) const {
  if (distance != nullptr) {
    std::size_t d = 0;
    for (std::uint32_t l = 0; l < m.lanes.size(); ++l) {
      const tally& a = m.lanes[l].c;
      const std::uint64_t* x = &a.posted;
      const std::uint64_t* y = &o.count[l].posted;
      for (std::size_t k = 0; k < sizeof(tally) / sizeof(std::uint64_t); ++k) d += x[k] > y[k] ? x[k] - y[k] : y[k] - x[k];
      d += m.depth(l) > o.depth[l] ? m.depth(l) - o.depth[l] : o.depth[l] - m.depth(l);
      d += m.visible(l) != o.peek[l];
    }
    *distance = d;
  }
  for (std::uint32_t l = 0; l < m.lanes.size(); ++l) {
    if (!(m.lanes[l].c == o.count[l])) return "lane " + std::to_string(l) + " counters: " + m.lanes[l].c.diff(o.count[l]);
    if (m.depth(l) != o.depth[l])
      return "lane " + std::to_string(l) + " depth " + std::to_string(o.depth[l]) + " (model " + std::to_string(m.depth(l)) + ")";
    // (visible() lists the maybe-visible ones in their place: those the box does not list are left out)
    auto v = m.visible(l);
    const auto maybe = m.maybe_visible(l);
    if (!maybe.empty())
      std::erase_if(v, [&](const msg_id& id) {
        return std::find(maybe.begin(), maybe.end(), id) != maybe.end() &&
               std::find(o.peek[l].begin(), o.peek[l].end(), id) == o.peek[l].end();
      });
    if (v != o.peek[l]) return "lane " + std::to_string(l) + " holds " + ids(o.peek[l]) + " (model " + ids(v) + ")";
  }
  if (m.owner_live != o.owner_alive)
    return std::string("the owner record says ") + (o.owner_alive ? "a live owner" : "no live owner") + " (model: " +
           (m.owner_live ? "live" : "none") + ")";
  return {};
}

// After every step: what holds whatever the model says, then the model's
// states that agree with the box.
void run::settle(const std::string& what) {
  const observation o = observe();
  for (std::uint32_t l = 0; l < o.count.size(); ++l) {
    const tally& c = o.count[l];
    const tally& was = last_obs_.count[l];
    bool down = false;
    const std::uint64_t* now_f = &c.posted;
    const std::uint64_t* was_f = &was.posted;
    for (std::size_t k = 0; k < sizeof(tally) / sizeof(std::uint64_t); ++k) {
      // (known bug priority-sorting-delivered: a takeover takes a mid-move message back out of delivered)
      if (&now_f[k] == &c.delivered && cfg_.priority && opt_.tolerate.count("priority-sorting-delivered") != 0) continue;
      down |= now_f[k] < was_f[k];
    }
    if (down) fail(what + ": a counter of lane " + std::to_string(l) + " went down: " + was.diff(c));
  }
  // Known bug (--tolerate phantom-abandon; fixed, the switch stays): in a priority box a post that
  // waits at a closed gate "repairs" the finished position at a stale head
  // and counts it abandoned, as often as it looks: the model takes the box's word for how often.
  // (Real repairs of dead claims first: as many as the depth says went.)
  if (cfg_.priority && opt_.tolerate.count("phantom-abandon") != 0)
    for (model& m : cands_)
      for (std::uint32_t l = 0; l < m.lanes.size(); ++l) {
        if (o.count[l].abandoned <= m.lanes[l].c.abandoned) continue;
        std::uint64_t extra = o.count[l].abandoned - m.lanes[l].c.abandoned;
        lane_state& L = m.lanes[l];
        for (auto it = L.at.begin(); it != L.at.end() && extra > 0 && m.depth(l) > o.depth[l];) {
          if (it->second.k != kind::hole) {
            ++it;
            continue;
          }
          it = L.at.erase(it);
          ++L.c.abandoned;
          --extra;
        }
        L.phantom += extra;
        L.c.abandoned += extra;
      }
  std::vector<model> keep;
  std::string why;
  std::size_t best = SIZE_MAX;
  std::optional<model> closest;
  for (model& m : cands_) {
    std::size_t d = 0;
    const std::string w = mismatch(m, o, &d);
    if (w.empty()) {
      keep.push_back(std::move(m));
    } else if (d < best) {
      best = d;
      why = w;
      closest = m;
    }
  }
  if (keep.empty() && std::getenv("GENCHECK_DUMP") != nullptr)  // (debugging the model: every state it had)
    if (FILE* f = std::fopen(std::getenv("GENCHECK_DUMP"), "w")) {
      for (const model& m : cands_) std::fprintf(f, "--- %s\n    %s\n", mismatch(m, o).c_str(), m.describe().c_str());
      std::fclose(f);
    }
  if (keep.empty() && closest) cands_.insert(cands_.begin(), *closest);  // (model_now() shows the closest)
  // The counting identity, on the box alone: exact unless every state of
  // the model that agrees says a dead process left a count unfinished
  // that the protocol finishes later (R4, R2: owner_done, prod_evicting).
  for (std::uint32_t l = 0; l < o.count.size(); ++l) {
    const tally& c = o.count[l];
    const std::uint64_t right = c.out() + o.depth[l];
    if (c.posted == right) continue;
    bool explained = !keep.empty();
    for (const model& m : keep)
      explained &= static_cast<std::int64_t>(m.lazy(l) - m.lanes[l].phantom) ==
                   static_cast<std::int64_t>(c.posted - right);
    if (explained) {
      ++totals_.lazy_identity;
      continue;
    }
    fail(what + ": lane " + std::to_string(l) + " breaks the counting identity: posted " + std::to_string(c.posted) +
         " != delivered + refused + dropped + filtered + abandoned + aborted + depth = " + std::to_string(right) +
         (keep.empty() ? "; and the box disagrees with every state of the model: " + why : std::string()) +
         "\n  box: " + o.describe() + model_now());
  }
  if (keep.empty()) fail(what + ": the box disagrees with every state of the model: " + why + "\n  box: " + o.describe() + model_now());
  // A priority box's message a dead owner had taken is back in the store
  // (QUEUED, listed by peek) or re-taken in its ring slot (not listed):
  // peek says which, and the states that differed only there are one.
  // And when that still leaves many states (kills multiply them), what
  // the box cannot show until much later is let go: whether a message of a
  // priority box left its ring slot, and whether it must come back flagged
  // or may (a little less strict, only in those states).
  if (cfg_.priority) {
    const bool weaken = keep.size() > 24;
    std::vector<model> merged;
    std::unordered_multimap<std::size_t, std::size_t> seen;
    for (model& m : keep) {
      for (std::uint32_t l = 0; l < m.lanes.size(); ++l)
        for (auto& [key, e] : m.lanes[l].at) {
          if ((e.k == kind::readopted || e.k == kind::orphaned) &&
              std::find(o.peek[l].begin(), o.peek[l].end(), e.id) != o.peek[l].end()) {
            e.k = kind::message;
            e.where = 1;
          }
          if (weaken && e.k == kind::message) {
            if (e.where == 1) e.where = 2;
            if (e.flag == 1) e.flag = 2;
          }
        }
      const std::size_t h = m.hash();
      bool dup = false;
      for (auto [it, end] = seen.equal_range(h); it != end && !dup; ++it) dup = merged[it->second] == m;
      if (dup) continue;
      seen.emplace(h, merged.size());
      merged.push_back(std::move(m));
    }
    keep = std::move(merged);
  }
  cands_ = std::move(keep);
  last_obs_ = o;
  record_fates();
  if (opt_.verbose && cands_.size() > 1) note("(" + std::to_string(cands_.size()) + " possible states)");
  if (const char* at = std::getenv("GENCHECK_DUMP_STEP"); at != nullptr && std::strtoull(at, nullptr, 0) == step_)
    if (FILE* f = std::fopen(std::getenv("GENCHECK_DUMP"), "w")) {  // (debugging the model: every state it keeps)
      for (const model& m : cands_) {
        std::fprintf(f, "---\n    %s\n    announced:", m.describe().c_str());
        for (const auto& [e, a] : m.announced) std::fprintf(f, " %u->%u/%llu", e, a.first, (unsigned long long)a.second);
        std::fprintf(f, "\n");
      }
      std::fclose(f);
    }
}

void run::record_fates() {
  bool same = true;
  for (const model& m : cands_) same &= m.fates == cands_.front().fates;
  for (const model& m : cands_)
    for (const fate_event& f : m.fates) {
      if (!same) {
        uncertain_.insert(f.id);
        continue;
      }
      fates_[f.id] = f.f;
      if (f.f == fate::evicted || f.f == fate::replaced) ++totals_.evicted;
      if (f.f == fate::abandoned) ++totals_.abandoned;
    }
  for (model& m : cands_) m.fates.clear();
}

// An owner's answer "g STATUS N MSG...": its messages, checked for what
// must hold whatever the model says.
std::vector<delivery> run::deliveries(const std::string& line, recv_status& st) {
  std::istringstream in(line);
  std::string g, status;
  std::size_t n = 0;
  in >> g >> status >> n;
  const auto s = parse_recv_status(status);
  if (g != "g" || !s) fail("owner answered: " + line);
  st = *s;
  if (st == recv_status::error) fail("receive failed: " + line);
  std::vector<delivery> out;
  for (std::size_t i = 0; i < n; ++i) {
    std::string w;
    in >> w;
    if (w.rfind("torn:", 0) == 0) fail("the owner received a torn or unknown message: " + w);
    delivery d;
    unsigned flag = 0;
    if (std::sscanf(w.c_str(), "%u:%u:%u:%u", &d.lane, &d.id.prod, &d.id.seq, &flag) != 4) fail("owner answered: " + line);
    d.flagged = flag != 0;
    out.push_back(d);
  }
  if ((st == recv_status::ok) != !out.empty()) fail("receive said " + status + " with " + std::to_string(out.size()) + " messages");
  for (const delivery& d : out) check_delivery(d);
  return out;
}

void run::check_delivery(const delivery& d) {
  const std::string who = to_string(d.id) + " (lane " + std::to_string(d.lane) + ")";
  if (d.id.prod >= next_prod_ || d.id.seq + std::uint64_t{1} > L_->prod[d.id.prod].attempt.load())
    fail("delivered " + who + ", which nobody posted");
  if (const auto it = status_.find(d.id); it != status_.end() && !shmbox::is_stored(it->second))
    fail("delivered " + who + ", whose post returned " + std::string(shmbox::to_string(it->second)));
  auto& [plain, flagged] = delivered_[d.id];
  if (!d.flagged && plain + flagged > 0) fail("delivered " + who + " again without the redelivered flag");
  const bool first = plain + flagged == 0;
  (d.flagged ? flagged : plain) += 1;
  ++totals_.delivered;
  if (d.flagged) ++totals_.redelivered;
  if (first && !cfg_.priority && cfg_.policy[d.lane] != policy::lifo) {
    auto& last = last_first_[{d.id.prod, d.lane}];
    if (last != 0 && d.id.seq + 1 <= last)
      fail("delivered " + who + " after seq " + std::to_string(last - 1) + " of the same producer: not FIFO");
    last = d.id.seq + 1;
  }
}

void run::note(const std::string& s) {
  if (opt_.verbose) std::printf("    %7.3f %s\n", static_cast<double>(now_ns() - t0_) / 1e9, s.c_str());
}


std::string config::describe() const {
  std::ostringstream o;
  o << lanes << " lane" << (lanes == 1 ? "" : "s") << ":";
  for (std::uint32_t l = 0; l < lanes; ++l) {
    o << " " << shmbox::to_string(policy[l]) << "/" << capacity[l];
    if (quota[l] != 0) o << "q" << quota[l];
  }
  o << "; default lane " << default_lane << ", slot " << slot_size << " B, " << max_producers << " producer entries";
  if (priority) o << ", priority";
  if (lease_ms != 0) o << ", lease " << lease_ms << " ms";
  return o.str();
}

config make_config(std::uint64_t seed) {
  std::mt19937_64 r(mix(seed ^ 0x636f6e666967ull));
  config c;
  c.seed = seed;
  c.lanes = 1 + static_cast<std::uint32_t>(r() % 3);
  const std::uint64_t features = r() % 100;
  c.priority = features < 15;
  c.lease_ms = features >= 15 && features < 30 ? 1000 : 0;
  const bool quotas = features >= 30 && features < 50;
  for (std::uint32_t l = 0; l < c.lanes; ++l) {
    static constexpr policy all[] = {policy::reject, policy::drop_newest, policy::drop_oldest, policy::lifo, policy::block};
    static constexpr policy keep_old[] = {policy::reject, policy::drop_newest, policy::block};
    const policy p = c.priority || quotas ? keep_old[r() % 3] : all[r() % 5];
    c.policy.push_back(p);
    // Small lanes, so that full happens often; 1-3 more often than the rest.
    c.capacity.push_back(static_cast<std::uint32_t>(r() % 3 == 0 ? 1 + r() % 3 : 1 + r() % 16));
    c.quota.push_back(quotas && r() % 3 != 0 ? static_cast<std::uint32_t>(1 + r() % std::min<std::uint32_t>(3, c.capacity.back())) : 0);
  }
  c.default_lane = c.lanes == 1 ? 0 : 1 + static_cast<std::uint32_t>(r() % (c.lanes - 1));
  c.slot_size = 32 + static_cast<std::uint32_t>(r() % 64);
  c.max_producers = 2 + static_cast<std::uint32_t>(r() % 4);
  return c;
}

run_result run_one(const config& cfg, const run_options& opt) { return run(cfg, opt).go(); }

void unlink_current_box() noexcept {
  if (g_box_path[0] != '\0') ::shm_unlink(g_box_path);  // (async-signal-safe)
}

}  // namespace gencheck
