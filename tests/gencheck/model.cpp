// tests/gencheck/model.cpp - the reference model's transitions (model.hpp):
// what a post, a receive, a commit, a death and a takeover may do to a box,
// step by step as lib/ring/ring.hpp orders them (the labels P1-P6, E1-E4,
// T1-T7, H1, C1-C4, R1-R4, L1-L3 are that file's). Each transition lists
// every state it may leave: for a call that returned, the states whose
// answer is the one the call gave; for a call its process died in, the state
// after every atomic step of it (a kill lands between two of them).
#include "model.hpp"

#include <algorithm>
#include <functional>
#include <optional>
#include <sstream>
#include <unordered_map>

namespace gencheck {

// ---------------------------------------------------------------------------
// tally, kinds, the model's views
// ---------------------------------------------------------------------------

tally tally::of(const shmbox::counters& c) {
  tally t;
  t.posted = c.posted;
  t.delivered = c.delivered;
  t.rejected = c.rejected;
  t.too_large = c.too_large;
  t.timeouts = c.timeouts;
  t.dropped_newest = c.dropped_newest;
  t.dropped_oldest = c.dropped_oldest;
  t.filtered = c.filtered;
  t.abandoned = c.abandoned;
  t.aborted = c.aborted;
  t.redelivered = c.redelivered;
  t.quota_refused = c.quota_refused;
  t.stashed = c.stashed;
  t.unstashed = c.unstashed;
  t.shrunk = c.shrunk;
  return t;
}

std::uint64_t tally::out() const {
  return delivered + rejected + too_large + timeouts + dropped_newest + dropped_oldest + filtered + abandoned + aborted;
}

namespace {
template <class F>
void each_field(const tally& a, const tally& b, F&& f) {
  f("posted", a.posted, b.posted);
  f("delivered", a.delivered, b.delivered);
  f("rejected", a.rejected, b.rejected);
  f("too_large", a.too_large, b.too_large);
  f("timeouts", a.timeouts, b.timeouts);
  f("dropped_newest", a.dropped_newest, b.dropped_newest);
  f("dropped_oldest", a.dropped_oldest, b.dropped_oldest);
  f("filtered", a.filtered, b.filtered);
  f("abandoned", a.abandoned, b.abandoned);
  f("aborted", a.aborted, b.aborted);
  f("redelivered", a.redelivered, b.redelivered);
  f("quota_refused", a.quota_refused, b.quota_refused);
  f("stashed", a.stashed, b.stashed);
  f("unstashed", a.unstashed, b.unstashed);
  f("shrunk", a.shrunk, b.shrunk);
}
}  // namespace

std::string tally::diff(const tally& box) const {
  std::string s;
  each_field(*this, box, [&](const char* name, std::uint64_t mine, std::uint64_t theirs) {
    if (mine == theirs) return;
    if (!s.empty()) s += ", ";
    s += std::string(name) + " " + std::to_string(theirs) + " (model " + std::to_string(mine) + ")";
  });
  return s;
}

std::string tally::str() const {
  std::string s;
  each_field(*this, *this, [&](const char* name, std::uint64_t v, std::uint64_t) {
    if (v == 0) return;
    if (!s.empty()) s += " ";
    s += std::string(name) + "=" + std::to_string(v);
  });
  return s.empty() ? "-" : s;
}

const char* to_string(kind k) {
  switch (k) {
    case kind::message: return "message";
    case kind::hole: return "hole";
    case kind::held: return "held";
    case kind::orphaned: return "orphaned";
    case kind::readopted: return "readopted";
    case kind::owner_ghost: return "owner-ghost";
    case kind::owner_done: return "owner-done";
    case kind::prod_ghost: return "producer-ghost";
    case kind::prod_evicting: return "producer-evicting";
    case kind::sorting_counted: return "sorting-counted";
  }
  return "?";
}

bool in_depth(kind k) {
  return k == kind::message || k == kind::hole || k == kind::held || k == kind::orphaned || k == kind::readopted ||
         k == kind::sorting_counted;
}

std::uint64_t model::depth(std::uint32_t lane) const {
  std::uint64_t n = 0;
  for (const auto& [key, e] : lanes[lane].at) n += in_depth(e.k) || (taken_ghost_in_depth && e.k == kind::owner_ghost && e.still_taken);
  return n;
}

std::uint64_t model::overcount(std::uint32_t lane) const {
  std::uint64_t n = 0;
  for (const auto& [key, e] : lanes[lane].at)
    n += (taken_ghost_in_depth && e.k == kind::owner_ghost && e.still_taken) || e.k == kind::sorting_counted;
  return n;
}

std::uint64_t model::lazy(std::uint32_t lane) const {
  std::uint64_t n = 0;
  for (const auto& [key, e] : lanes[lane].at) n += e.k == kind::owner_done || e.k == kind::prod_evicting;
  return n;
}

std::vector<msg_id> model::visible(std::uint32_t lane) const {
  const lane_state& L = lanes[lane];
  std::vector<std::pair<std::pair<std::int64_t, std::uint64_t>, msg_id>> v;
  for (const auto& [key, e] : L.at)
    if (e.k == kind::message || (priority && (e.k == kind::readopted || e.k == kind::orphaned)))
      v.push_back({{priority ? e.prio : 0, key}, e.id});
  std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  if (L.lifo) std::reverse(v.begin(), v.end());  // newest (largest stamp) first
  std::vector<msg_id> out;
  for (const auto& [k, id] : v) out.push_back(id);
  return out;
}

std::vector<msg_id> model::maybe_visible(std::uint32_t lane) const {
  std::vector<msg_id> out;
  if (priority)
    for (const auto& [key, e] : lanes[lane].at)
      if (e.k == kind::readopted || e.k == kind::orphaned) out.push_back(e.id);
  return out;
}

std::size_t model::hash() const {
  std::uint64_t h = owner_live;
  auto add = [&](std::uint64_t v) { h = mix(h ^ v); };
  for (const lane_state& L : lanes) {
    add(L.tail);
    add(L.head_stale);
    add(L.c.posted ^ (L.c.delivered << 16) ^ (L.c.abandoned << 32) ^ (L.c.redelivered << 48) ^ L.c.dropped_oldest ^
        (L.c.dropped_newest << 8) ^ (L.c.timeouts << 24) ^ (L.c.rejected << 40));
    for (const auto& [key, e] : L.at)
      add(key ^ (std::uint64_t(e.k) << 48) ^ (std::uint64_t(e.flag) << 56) ^ (std::uint64_t(e.flagged_take) << 58) ^
          (std::uint64_t(e.redelivery_due) << 59) ^ (std::uint64_t(e.still_taken) << 60) ^ (std::uint64_t(e.id.prod) << 32) ^
          (std::uint64_t(e.where) << 61));
  }
  for (const auto& [l, k] : pending) add(k ^ (std::uint64_t{l} << 56));
  for (const auto& [e, a] : announced) add(e ^ (a.second << 16) ^ (std::uint64_t{a.first} << 60));
  for (const fate_event& f : fates) add(f.id.prod ^ (std::uint64_t{f.id.seq} << 24) ^ (std::uint64_t(f.f) << 56));
  return static_cast<std::size_t>(h);
}

std::string model::broken() const {
  for (std::uint32_t l = 0; l < lanes.size(); ++l) {
    const tally& c = lanes[l].c;
    if (c.posted + overcount(l) + lanes[l].phantom != c.out() + depth(l) + lazy(l))
      return "the model's own lane " + std::to_string(l) + " does not add up: posted " + std::to_string(c.posted) +
             ", counted " + std::to_string(c.out()) + ", depth " + std::to_string(depth(l)) + ", lazy " +
             std::to_string(lazy(l));
  }
  return {};
}

std::string model::describe() const {
  std::ostringstream o;
  o << (owner_live ? "owner live" : "no owner") << "; pending " << pending.size();
  for (std::uint32_t l = 0; l < lanes.size(); ++l) {
    const lane_state& L = lanes[l];
    o << "\n    lane " << l << " [" << shmbox::to_string(L.pol) << (L.lifo ? "" : "") << ", " << L.limit << "/" << L.slots
      << (L.quota ? ", quota " + std::to_string(L.quota) : "") << "] tail " << L.tail << ":";
    for (const auto& [key, e] : L.at) {
      o << " " << key << "=" << to_string(e.id);
      if (e.k != kind::message) o << "(" << to_string(e.k) << ")";
      if (priority) o << "^" << e.prio;
      if (e.flag == 1) o << "!";
      if (e.flag == 2) o << "?";
      if (priority) o << "@" << int(e.where);
    }
    o << "\n      counters: " << L.c.str();
  }
  return o.str();
}

std::string to_string(const post_reply& r) {
  return std::string(shmbox::to_string(r.st)) + (r.evicted ? " (evicted " + std::to_string(r.evicted) + ")" : "");
}

std::string to_string(const std::vector<delivery>& d) {
  if (d.empty()) return "nothing";
  std::string s;
  for (const delivery& x : d) {
    if (!s.empty()) s += " ";
    s += to_string(x.id) + "@" + std::to_string(x.lane) + (x.flagged ? "!" : "");
  }
  return s;
}

// ---------------------------------------------------------------------------
// Repairs (R1-R3): a dead holder's slot finished by whoever needs it
// ---------------------------------------------------------------------------

namespace {

bool held_by_dead(kind k) {
  return k == kind::hole || k == kind::orphaned || k == kind::owner_ghost || k == kind::owner_done ||
         k == kind::prod_ghost || k == kind::prod_evicting;
}

// Counts and frees every owner_done entry of a lane (finish_dead_commit: a
// dead owner's DONE slots, counted once for all of them).
void finish_done(model& m, std::uint32_t l) {
  lane_state& L = m.lanes[l];
  for (auto it = L.at.begin(); it != L.at.end();) {
    if (it->second.k != kind::owner_done) {
      ++it;
      continue;
    }
    ++L.c.delivered;
    if (it->second.flagged_take) ++L.c.redelivered;
    m.fates.push_back({it->second.id, l, fate::delivered});
    it = L.at.erase(it);
  }
}

// A producer (or the owner) repairs the slot at `key`, held by a dead
// process: R1 (a hole: abandoned), R2 (a dead evictor's: counted, freed),
// R3 (a dead owner's: committed ones freed; with `evict`, an uncommitted one
// is evicted, counted dropped_oldest). Returns false when it cannot.
bool repair(model& m, std::uint32_t l, std::uint64_t key, bool evict, std::uint32_t* evicted) {
  lane_state& L = m.lanes[l];
  auto it = L.at.find(key);
  if (it == L.at.end()) return false;
  entry& e = it->second;
  switch (e.k) {
    case kind::hole:
      ++L.c.abandoned;
      m.fates.push_back({e.id, l, fate::abandoned});
      L.at.erase(it);
      return true;
    case kind::prod_evicting:
      ++L.c.dropped_oldest;
      m.fates.push_back({e.id, l, fate::evicted});
      L.at.erase(it);
      return true;
    case kind::prod_ghost:
      L.at.erase(it);
      return true;
    case kind::owner_ghost:
      if (e.redelivery_due) ++L.c.redelivered;  // T5b finished by whoever frees it (R3)
      L.at.erase(it);
      return true;
    case kind::owner_done:
      finish_done(m, l);
      return true;
    case kind::orphaned:
      if (!evict) return false;
      ++L.c.dropped_oldest;
      m.fates.push_back({e.id, l, fate::evicted});
      L.at.erase(it);
      if (evicted != nullptr) ++*evicted;
      return true;
    default:
      return false;
  }
}

// ---------------------------------------------------------------------------
// POST (P1-P6, E1-E4; lifo L1-L2)
// ---------------------------------------------------------------------------

struct post_branch {
  std::vector<model> stages;  // the state after each atomic step (the last: the call's end)
  post_reply r;
};

std::uint64_t own_waiting(const model& m, const post_call& c) {
  std::uint64_t n = 0;
  for (const auto& [key, e] : m.lanes[c.lane].at)
    if (e.k == kind::message && (m.quota_per_entry ? e.writer == c.writer : e.id.prod == c.id.prod)) ++n;
  return n;
}

class post_sim {
 public:
  post_sim(const post_call& c, std::vector<post_branch>& out) : c_(c), out_(out) {}

  void run(model m, std::uint32_t evicted, std::vector<model> stages, int rounds = 0, bool slot_free = false) {
    if (rounds > 64) return;  // (a model bug: a post that never ends)
    const lane_state& L = m.lanes[c_.lane];
    if (c_.too_large) return refuse(std::move(m), std::move(stages), evicted, &tally::too_large, post_status::too_large);
    if (L.lifo) return lifo(std::move(m), evicted, std::move(stages), rounds);
    // Is the lane full at the tail? A FIFO ring: slot(t) still holds t - slots.
    // A priority box's lane: its ring and store hold its limit (THE GATE).
    const bool gate_closed = m.priority && L.at.size() >= L.limit;
    const std::uint64_t q = L.tail - L.slots;
    // (a priority box's message may have left its ring slot for the store)
    const auto qe = L.tail >= L.slots && !slot_free ? L.at.find(q) : L.at.end();
    const bool movable = qe != L.at.end() && m.priority &&
                         (qe->second.k == kind::message || qe->second.k == kind::readopted ||
                          qe->second.k == kind::orphaned || qe->second.k == kind::held);
    if (movable && qe->second.where == 2) run(m, evicted, stages, rounds + 1, true);  // moved: the slot is free
    const bool occupied = qe != L.at.end() && (!movable || qe->second.where == 0 || qe->second.where == 2);
    if (m.priority && m.pinned_gate_may_refuse && !gate_closed && !occupied) {
      // (the known bug: the gate counts the ring from a published head that
      // lags, pinned by a held ring slot or left by an owner that died)
      bool pinned = L.head_stale;
      for (const auto& [key, e] : L.at) pinned |= e.k == kind::held || e.k == kind::readopted || e.k == kind::orphaned;
      if (pinned) full(m, evicted, stages);
    }
    if (!gate_closed && !occupied) {
      if (L.quota != 0 && own_waiting(m, c_) >= L.quota) {
        switch (L.pol) {
          case policy::reject: return refuse(std::move(m), std::move(stages), evicted, &tally::rejected, post_status::over_quota, true);
          case policy::drop_newest:
            return refuse(std::move(m), std::move(stages), evicted, &tally::dropped_newest, post_status::over_quota, true);
          default: return refuse(std::move(m), std::move(stages), evicted, &tally::timeouts, post_status::timeout, true);
        }
      }
      return claim(std::move(m), evicted, std::move(stages));
    }
    if (gate_closed) {
      // A priority lane at its limit: the head (the ring's first, if it is a
      // dead claim) is repaired by a waiting post; the policy answers otherwise.
      if (L.pol == policy::block && !L.at.empty() && L.at.begin()->second.k == kind::hole) {
        model r = m;
        repair(r, c_.lane, L.at.begin()->first, false, nullptr);
        stages.push_back(r);
        return run(std::move(r), evicted, std::move(stages), rounds + 1);
      }
      return full(std::move(m), evicted, std::move(stages));
    }
    const entry& e = L.at.at(q);
    if (e.k == kind::message) {
      if (L.pol != policy::drop_oldest) return full(std::move(m), evicted, std::move(stages));
      // E1-E4: evict the oldest, then claim again.
      model a = m;
      a.lanes[c_.lane].at[q].k = kind::prod_evicting;  // E2: taken, not yet counted
      model b = a;
      b.lanes[c_.lane].at[q].k = kind::prod_ghost;  // E3: counted
      ++b.lanes[c_.lane].c.dropped_oldest;
      b.fates.push_back({e.id, c_.lane, fate::evicted});
      model d = b;
      d.lanes[c_.lane].at.erase(q);  // E4: free
      stages.push_back(a);
      stages.push_back(b);
      stages.push_back(d);
      return run(std::move(d), evicted + 1, std::move(stages), rounds + 1);
    }
    // Busy: held by the live owner (it waits, then times out), or by a dead
    // process (block and drop_oldest wait and repair it; reject and
    // drop_newest answer at once, repairing it only now and then).
    const bool dead = held_by_dead(e.k);
    if (L.pol == policy::reject || L.pol == policy::drop_newest) {
      if (dead) {
        model r = m;
        if (repair(r, c_.lane, q, false, nullptr)) {
          auto st2 = stages;
          st2.push_back(r);
          full(std::move(r), evicted, std::move(st2));
        }
      }
      return full(std::move(m), evicted, std::move(stages));
    }
    if (dead) {
      model r = m;
      std::uint32_t ev = evicted;
      if (repair(r, c_.lane, q, L.pol == policy::drop_oldest, &ev)) {
        stages.push_back(r);
        return run(std::move(r), ev, std::move(stages), rounds + 1);
      }
    }
    return refuse(std::move(m), std::move(stages), evicted, &tally::timeouts, post_status::timeout);
  }

 private:
  void refuse(model m, std::vector<model> stages, std::uint32_t evicted, std::uint64_t tally::*counter, post_status st,
              bool quota = false) {
    lane_state& L = m.lanes[c_.lane];
    ++L.c.posted;
    ++(L.c.*counter);
    if (quota) ++L.c.quota_refused;
    stages.push_back(m);
    out_.push_back({std::move(stages), {st, evicted}});
  }

  void full(model m, std::uint32_t evicted, std::vector<model> stages) {
    switch (m.lanes[c_.lane].pol) {
      case policy::reject: return refuse(std::move(m), std::move(stages), evicted, &tally::rejected, post_status::full);
      case policy::drop_newest:
        return refuse(std::move(m), std::move(stages), evicted, &tally::dropped_newest, post_status::dropped);
      default: return refuse(std::move(m), std::move(stages), evicted, &tally::timeouts, post_status::timeout);
    }
  }

  // P2-P5: announce, claim the tail (a hole until published), then publish.
  void claim(model m, std::uint32_t evicted, std::vector<model> stages) {
    if (!m.lanes[c_.lane].lifo) {
      model a = m;
      a.announced[c_.writer] = {c_.lane, a.lanes[c_.lane].tail};  // P2 (dies here: a stale claim op)
      stages.push_back(std::move(a));
    }
    lane_state& L = m.lanes[c_.lane];
    const std::uint64_t key = L.tail++;
    ++L.c.posted;
    L.at[key] = entry{kind::hole, c_.id, c_.prio, c_.writer, 0, false};
    stages.push_back(m);
    m.lanes[c_.lane].at[key].k = kind::message;
    stages.push_back(m);
    out_.push_back({std::move(stages), {evicted ? post_status::stored_evicted : post_status::stored, evicted}});
  }

  // L1-L2: a free slot, else replace the newest published message.
  void lifo(model m, std::uint32_t evicted, std::vector<model> stages, int rounds) {
    lane_state& L = m.lanes[c_.lane];
    if (L.at.size() < L.slots) return claim(std::move(m), evicted, std::move(stages));
    for (auto it = L.at.rbegin(); it != L.at.rend(); ++it) {
      if (it->second.k != kind::message) continue;
      const msg_id gone = it->second.id;
      L.at.erase(it->first);
      ++L.c.dropped_newest;
      m.fates.push_back({gone, c_.lane, fate::replaced});
      const std::uint64_t key = L.tail++;
      ++L.c.posted;
      L.at[key] = entry{kind::hole, c_.id, c_.prio, c_.writer, 0, false};
      stages.push_back(m);
      m.lanes[c_.lane].at[key].k = kind::message;
      stages.push_back(m);
      out_.push_back({std::move(stages), {post_status::stored_evicted, evicted + 1}});
      return;
    }
    // No published message: busy. Dead writers' slots are repaired
    // (producer_maybe_repair_lifo; a dead owner's are the next owner's).
    model r = m;
    bool any = false;
    std::vector<std::uint64_t> keys;
    for (const auto& [key, e] : L.at)
      if (e.k == kind::hole || e.k == kind::prod_ghost || e.k == kind::prod_evicting || e.k == kind::owner_done) keys.push_back(key);
    for (const std::uint64_t key : keys) any |= repair(r, c_.lane, key, false, nullptr);
    if (any) {
      stages.push_back(r);
      return run(std::move(r), evicted, std::move(stages), rounds + 1);
    }
    refuse(std::move(m), std::move(stages), evicted, &tally::timeouts, post_status::timeout);
  }

  const post_call& c_;
  std::vector<post_branch>& out_;
};

std::vector<post_branch> simulate_post(const model& m, const post_call& c) {
  std::vector<post_branch> out;
  post_sim(c, out).run(m, 0, {});
  return out;
}

void add_unique(std::vector<model>& v, model m) {
  if (std::find(v.begin(), v.end(), m) == v.end()) v.push_back(std::move(m));
}

}  // namespace

std::vector<model> post_done(const model& m, const post_call& c, post_reply r, std::string& why) {
  std::vector<model> out;
  std::string expected;
  for (post_branch& b : simulate_post(m, c)) {
    if (b.r.st == r.st && b.r.evicted == r.evicted) add_unique(out, std::move(b.stages.back()));
    else expected += (expected.empty() ? "" : " or ") + to_string(b.r);
  }
  if (out.empty()) why = "expected " + (expected.empty() ? std::string("nothing") : expected);
  return out;
}

std::vector<post_reply> post_outcomes(const model& m, const post_call& c) {
  std::vector<post_reply> out;
  for (const post_branch& b : simulate_post(m, c)) out.push_back(b.r);
  return out;
}

std::vector<model> post_cut(const model& m, const post_call& c) {
  std::vector<model> out{m};
  for (post_branch& b : simulate_post(m, c))
    for (model& s : b.stages) add_unique(out, std::move(s));
  return out;
}

// ---------------------------------------------------------------------------
// TAKE (T1-T7, H1; lifo L3; a priority box's order), COMMIT (C1-C4)
// ---------------------------------------------------------------------------

namespace {

struct take_out {
  model m;
  std::vector<delivery> got;
};

class take_sim {
 public:
  take_sim(const take_call& c, const std::vector<delivery>* reply, bool stages)
      : c_(c), reply_(reply), want_stages_(stages) {}

  std::vector<take_out> finals;
  std::vector<model> stages;  // every intermediate state (a killed call)

  void start(const model& m) {
    stage(m);
    lane(m, 0, {}, 0);
  }

 private:
  bool hold() const { return c_.how == take_kind::read || fenced_; }

  void stage(const model& m) {
    if (want_stages_) add_unique(stages, m);
  }

  // Whether a delivery of (lane, entry) agrees with the reply so far.
  bool matches(const std::vector<delivery>& got, std::uint32_t l, const entry& e, bool flagged) const {
    if (reply_ == nullptr) return true;
    if (got.size() >= reply_->size()) return false;
    const delivery& d = (*reply_)[got.size()];
    return d.lane == l && d.id == e.id && d.flagged == flagged;
  }

  // The call ends: T7 (published heads), a lease box's commit (of what it
  // took, and of what earlier reads hold: owner_commit commits o.pending;
  // only when the call took something).
  void finish(model m, const std::vector<delivery>& got) {
    if (reply_ != nullptr && got != *reply_) return;
    if (fenced_ && c_.how != take_kind::read && !got.empty()) {
      commit_all(m, true);
      if (reply_ == nullptr) return;  // (stages recorded inside)
    }
    finals.push_back({std::move(m), got});
  }

  // C1-C4 for everything pending (a lease box's receive commits at once).
  void commit_all(model& m, bool record) {
    const auto pending = m.pending;
    std::vector<char> redelivery;
    for (const auto& [pl, key] : pending) redelivery.push_back(m.lanes[pl].at.at(key).flagged_take);
    for (std::uint32_t l = 0; l < m.lanes.size(); ++l)
      for (int round = 0; round < 2; ++round) {
        std::vector<std::uint64_t> keys;
        for (std::size_t i = 0; i < pending.size(); ++i)
          if (pending[i].first == l && redelivery[i] == (round == 1)) keys.push_back(pending[i].second);
        if (keys.empty()) continue;
        lane_state& L = m.lanes[l];
        for (const std::uint64_t key : keys) {
          L.at[key].k = kind::owner_done;  // C2
          if (record) stage(m);
        }
        for (const std::uint64_t key : keys) {  // C3
          L.at[key].k = kind::owner_ghost;
          ++L.c.delivered;
          if (round == 1) ++L.c.redelivered;
          m.fates.push_back({L.at[key].id, l, fate::delivered});
        }
        if (record) stage(m);
        for (const std::uint64_t key : keys) {  // C4
          L.at.erase(key);
          if (record) stage(m);
        }
      }
    m.pending.clear();
  }

  // Hands out entry `key` of lane l (flagged or not).
  void take(model m, std::uint32_t l, std::uint64_t key, bool flagged, std::vector<delivery> got, std::size_t n_lane) {
    lane_state& L = m.lanes[l];
    entry& e = L.at.at(key);
    got.push_back({l, e.id, flagged});
    e.k = kind::held;  // T3 / H1
    e.flagged_take = flagged;
    e.flag = 1;        // should it come back: flagged
    if (hold()) {
      m.pending.push_back({l, key});
      stage(m);
    } else {
      stage(m);
      e.k = kind::owner_ghost;  // T5: counted
      e.still_taken = true;
      ++L.c.delivered;
      m.fates.push_back({e.id, l, fate::delivered});
      if (flagged) {  // T5b: a redelivery's count, one step later
        e.redelivery_due = true;
        stage(m);
        e.redelivery_due = false;
        ++L.c.redelivered;
      }
      stage(m);
      L.at.erase(key);  // T6
      stage(m);
    }
    if (c_.how == take_kind::try_one) {
      finish(std::move(m), got);
      return;
    }
    lane(std::move(m), l, std::move(got), n_lane + 1);
  }

  // Delivers `key` with the flag its entry asks for (both, when either may be).
  void deliver(const model& m, std::uint32_t l, std::uint64_t key, const std::vector<delivery>& got, std::size_t n_lane) {
    const entry& e = m.lanes[l].at.at(key);
    const bool must = e.flag == 1;  // (a dead owner's taken message: flag 1, or 2 when caught mid-move)
    const bool may = must || e.flag == 2;
    if (!must && matches(got, l, e, false)) take(m, l, key, false, got, n_lane);
    if (may && matches(got, l, e, true)) take(m, l, key, true, got, n_lane);
  }

  void lane(model m, std::uint32_t l, std::vector<delivery> got, std::size_t n_lane) {
    if (reply_ == nullptr) {
      // A killed call: what it handed out is unknown, so paths that reach
      // the same state at the same point end alike (flags that may be
      // either way would otherwise make 2^k paths): explore each once.
      const std::size_t h = mix(m.hash() ^ (std::uint64_t{l} << 40) ^ (std::uint64_t{n_lane} << 20) ^ got.size());
      auto [it, end] = visited_.equal_range(h);
      for (; it != end; ++it)
        if (it->second.l == l && it->second.n_lane == n_lane && it->second.got == got.size() && it->second.m == m) return;
      visited_.emplace(h, seen_state{m, l, n_lane, got.size()});
    }
    if (l >= m.lanes.size()) return finish(std::move(m), got);
    if (got.size() >= c_.max) return finish(std::move(m), got);
    const lane_state& L = m.lanes[l];
    auto next_lane = [&](model x) { lane(std::move(x), l + 1, got, 0); };
    auto repair_and_stay = [&](std::uint64_t key) {
      model r = m;
      if (!repair(r, l, key, false, nullptr)) return;
      stage(r);
      lane(std::move(r), l, got, n_lane);
    };
    if (L.lifo) {
      // L3: a takeover's messages first (in slot order, which the model does
      // not know: any of them), then the newest published one.
      bool any_readopted = false;
      for (const auto& [key, e] : L.at)
        if (e.k == kind::readopted) {
          any_readopted = true;
          deliver(m, l, key, got, n_lane);
        }
      if (any_readopted) return;
      for (auto it = L.at.rbegin(); it != L.at.rend(); ++it)
        if (it->second.k == kind::message) return deliver(m, l, it->first, got, n_lane);
      // Nothing published: dead writers' slots may be repaired (when nothing was taken yet).
      if (n_lane == 0 && m.pending.empty()) {
        model r = m;
        bool any = false;
        std::vector<std::uint64_t> keys;
        for (const auto& [key, e] : L.at)
          if (e.k == kind::hole || e.k == kind::prod_ghost || e.k == kind::prod_evicting) keys.push_back(key);
        for (const std::uint64_t key : keys) any |= repair(r, l, key, false, nullptr);
        if (any) {
          stage(r);
          next_lane(r);
        }
      }
      return next_lane(m);
    }
    if (m.priority) {
      // The lowest (priority, position) among what is there before the first
      // dead claim; that claim may be repaired at any point.
      std::optional<std::uint64_t> first_hole, best;
      for (const auto& [key, e] : L.at) {
        if (e.k == kind::hole) {
          first_hole = key;
          break;
        }
        if (e.k != kind::message && e.k != kind::readopted && e.k != kind::orphaned) continue;
        if (!best || std::pair(e.prio, key) < std::pair(L.at.at(*best).prio, *best)) best = key;
      }
      // (the move into the store is a take of its own, from a count of 0:
      // it may repair the claim after the in-order run handed out what was before it)
      if (first_hole) repair_and_stay(*first_hole);
      if (m.gap_ends_run) {
        // (the known bug: the lowest of the run before the first gap)
        std::optional<std::uint64_t> prefix_best;
        std::optional<std::uint64_t> prev;
        for (const auto& [key, e] : L.at) {
          if (e.k == kind::hole || (prev && key != *prev + 1)) break;
          prev = key;
          if (e.k != kind::message && e.k != kind::readopted && e.k != kind::orphaned) continue;
          if (!prefix_best || std::pair(e.prio, key) < std::pair(L.at.at(*prefix_best).prio, *prefix_best)) prefix_best = key;
        }
        if (prefix_best && prefix_best != best) deliver(m, l, *prefix_best, got, n_lane);
      }
      if (best) return deliver(m, l, *best, got, n_lane);
      return next_lane(m);
    }
    // FIFO, T1: the first position the owner has not passed.
    for (const auto& [key, e] : L.at) {
      switch (e.k) {
        case kind::held:
        case kind::prod_ghost:
        case kind::prod_evicting:
        case kind::owner_ghost:
        case kind::owner_done:
        case kind::sorting_counted:  // (priority boxes only)
          continue;  // ours already, or someone else's to finish: skipped
        case kind::message:
        case kind::readopted:
        case kind::orphaned:
          return deliver(m, l, key, got, n_lane);
        case kind::hole:
          // Claimed, not published. Once this call took a message from the
          // lane it stops here; else it may find the claimant dead and repair.
          if (n_lane == 0) repair_and_stay(key);
          return next_lane(m);
      }
    }
    next_lane(m);
  }

  const take_call& c_;
  const std::vector<delivery>* reply_;
  bool want_stages_;
  struct seen_state {
    model m;
    std::uint32_t l;
    std::size_t n_lane, got;
  };
  std::unordered_multimap<std::size_t, seen_state> visited_;

 public:
  bool fenced_ = false;
};

}  // namespace

namespace {
// After an owner call in a priority box: what it left may have been moved into the store.
void maybe_moved(model& m) {
  if (!m.priority) return;
  for (auto& L : m.lanes)
    for (auto& [key, e] : L.at)
      if (e.where == 0 && (e.k == kind::message || e.k == kind::readopted || e.k == kind::orphaned || e.k == kind::held))
        e.where = 2;
}
}  // namespace

std::vector<model> take_done(const model& m, const take_call& c, const std::vector<delivery>& got, std::string& why) {
  take_sim s(c, &got, false);
  s.fenced_ = m.fenced;
  s.start(m);
  std::vector<model> out;
  for (take_out& f : s.finals) {
    for (auto& L : f.m.lanes) L.head_stale = false;  // T7: the call published every lane's head
    maybe_moved(f.m);
    add_unique(out, std::move(f.m));
  }
  if (out.empty()) {
    // What it would have handed out (the first way, for the message).
    take_sim any(c, nullptr, false);
    any.fenced_ = m.fenced;
    any.start(m);
    why = "expected " + (any.finals.empty() ? std::string("?") : to_string(any.finals.front().got));
    if (any.finals.size() > 1) why += " (or " + std::to_string(any.finals.size() - 1) + " other ways)";
  }
  return out;
}

std::vector<model> take_cut(const model& m, const take_call& c) {
  take_sim s(c, nullptr, true);
  s.fenced_ = m.fenced;
  s.start(m);
  std::vector<model> out;
  // A priority box's owner moves ring messages into its store before it
  // hands any out (M1-M4); one caught mid-move comes back from the ring,
  // flagged (ring.hpp PRIORITY BOXES, takeover): any message may be flagged.
  // And the message it was moving (SORTING, its ring slot still taken: in
  // the depth, not in peek) comes back either way: any one message of a
  // lane may be caught so.
  auto gone = [&](const model& x) {
    model y = owner_gone(x);
    if (!y.priority) return add_unique(out, std::move(y));
    maybe_moved(y);
    for (auto& L : y.lanes)
      for (auto& [key, e] : L.at)
        if (e.k == kind::message && e.flag == 0) e.flag = 2;
    for (std::uint32_t l = 0; l < y.lanes.size(); ++l)
      for (const auto& [key, e] : y.lanes[l].at) {
        // (a published message, or one re-taken at the takeover: the move
        // takes both, one after the other in position order, so any of those
        // still in the ring when the call began; where it was then: in x)
        if (e.k != kind::message && e.k != kind::orphaned) continue;
        if (x.lanes[l].at.at(key).k == kind::held) continue;  // taken (handed out), not being moved
        if (x.lanes[l].at.at(key).where == 1) continue;
        model z = y;
        z.lanes[l].at[key].k = kind::orphaned;
        add_unique(out, z);
        if (y.sorting_counted_delivered) {  // (the known bug: past T5 of the move)
          z.lanes[l].at[key].k = kind::sorting_counted;
          ++z.lanes[l].c.delivered;
          add_unique(out, std::move(z));
        }
      }
    add_unique(out, std::move(y));
  };
  for (model& x : s.stages) gone(x);
  for (take_out& f : s.finals) gone(f.m);
  return out;
}

std::vector<model> commit_done(const model& m, std::string& why) {
  if (!m.owner_live) {
    why = "no live owner in the model";
    return {};
  }
  model x = m;
  for (std::uint32_t l = 0; l < x.lanes.size(); ++l)
    for (int round = 0; round < 2; ++round)
      for (const auto& [pl, key] : m.pending) {
        if (pl != l) continue;
        const entry& e = m.lanes[l].at.at(key);
        if (e.flagged_take != (round == 1)) continue;
        ++x.lanes[l].c.delivered;
        if (round == 1) ++x.lanes[l].c.redelivered;
        x.fates.push_back({e.id, l, fate::delivered});
        x.lanes[l].at.erase(key);
      }
  x.pending.clear();
  return {x};
}

std::vector<model> commit_cut(const model& m) {
  // C1-C4 lane by lane, the non-redelivered ones first: a kill after any step.
  std::vector<model> out{owner_gone(m)};
  model x = m;
  for (std::uint32_t l = 0; l < x.lanes.size(); ++l)
    for (int round = 0; round < 2; ++round) {
      std::vector<std::uint64_t> keys;
      for (const auto& [pl, key] : m.pending)
        if (pl == l && m.lanes[l].at.at(key).flagged_take == (round == 1)) keys.push_back(key);
      if (keys.empty()) continue;
      lane_state& L = x.lanes[l];
      for (const std::uint64_t key : keys) {
        L.at[key].k = kind::owner_done;
        add_unique(out, owner_gone(x));
      }
      for (const std::uint64_t key : keys) {
        L.at[key].k = kind::owner_ghost;
        ++L.c.delivered;
        if (round == 1) ++L.c.redelivered;
        x.fates.push_back({L.at[key].id, l, fate::delivered});
      }
      add_unique(out, owner_gone(x));
      for (const std::uint64_t key : keys) {
        L.at.erase(key);
        x.pending.erase(std::remove(x.pending.begin(), x.pending.end(), std::pair{l, key}), x.pending.end());
        add_unique(out, owner_gone(x));
      }
    }
  return out;
}

model owner_gone(const model& m) {
  model x = m;
  for (auto& L : x.lanes)
    for (auto& [key, e] : L.at)
      if (e.k == kind::held || e.k == kind::readopted) {
        // Held: handed out, so flagged when it comes back. Readopted: as it
        // was (flagged; or either, caught in a priority box's move).
        if (e.k == kind::held) e.flag = 1;
        e.k = kind::orphaned;
      }
  x.pending.clear();
  x.owner_live = false;
  for (auto& L : x.lanes) L.head_stale = true;
  return x;
}

model acquire(const model& m) {
  model x = m;
  for (std::uint32_t l = 0; l < x.lanes.size(); ++l) {
    finish_done(x, l);
    lane_state& L = x.lanes[l];
    for (auto it = L.at.begin(); it != L.at.end();) {
      if (it->second.k == kind::owner_ghost) {
        if (it->second.redelivery_due) ++L.c.redelivered;  // (R4: T5b finished)
        it = L.at.erase(it);
        continue;
      }
      if (it->second.k == kind::orphaned) it->second.k = kind::readopted;
      if (it->second.k == kind::sorting_counted) {  // kept: QUEUED again, and no longer counted delivered
        it->second.k = kind::message;
        --L.c.delivered;
      }
      ++it;
    }
  }
  x.pending.clear();
  x.owner_live = true;
  return x;
}

std::vector<model> acquire_cut(const model& m) {
  // R4 counts and frees the dead owner's DONE slots first, then frees its
  // committed ones and re-takes the rest; re-taken by an owner that dies
  // too, they are orphaned again. So: before R4, or after its counting.
  std::vector<model> out{owner_gone(m)};
  model x = m;
  for (std::uint32_t l = 0; l < x.lanes.size(); ++l) finish_done(x, l);
  add_unique(out, owner_gone(x));
  model y = acquire(m);
  add_unique(out, owner_gone(y));
  return out;
}

std::vector<model> entry_reused(const model& m, std::uint32_t e) {
  model x = m;
  if (const auto a = x.announced.find(e); a != x.announced.end()) {
    const auto [l, q] = a->second;
    x.announced.erase(a);
    if (const auto h = x.lanes[l].at.find(q); h != x.lanes[l].at.end() && h->second.k == kind::hole) repair(x, l, q, false, nullptr);
  }
  for (std::uint32_t l = 0; l < x.lanes.size(); ++l) {
    std::vector<std::uint64_t> keys;
    for (const auto& [key, en] : x.lanes[l].at)
      if (en.writer == e && (en.k == kind::hole || en.k == kind::prod_ghost || en.k == kind::prod_evicting)) keys.push_back(key);
    for (const std::uint64_t key : keys) repair(x, l, key, false, nullptr);
  }
  return {x};
}

}  // namespace gencheck
