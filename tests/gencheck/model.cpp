// tests/gencheck/model.cpp - the reference model (model.hpp): its views
// (depth, peek's list, the identity), the repairs of dead processes' slots,
// and the posts (model_take.cpp: the owner's side). The transitions say
// what a post, a receive, a commit, a death and a takeover may do to a box,
// step by step as lib/ring/ring.hpp orders them (the labels P1-P6, E1-E4,
// T1-T7, H1, C1-C4, R1-R4, L1-L3 are that file's). Each transition lists
// every state it may leave: for a call that returned, the states whose
// answer is the one the call gave; for a call its process died in, the state
// after every atomic step of it (a kill lands between two of them).
#include "model.hpp"
#include "model_internal.hpp"

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
    case kind::sorting_freed: return "sorting-freed";
  }
  return "?";
}

bool in_depth(kind k) {
  // (not an owner_ghost, nor sorting_counted: a ring slot its owner
  // committed, T5, is counted delivered and not in the depth, even while it
  // is still TAKEN, lane_depth_scan; before, it was in both: the bug
  // taken-ghost-depth)
  return k == kind::message || k == kind::hole || k == kind::held || k == kind::orphaned || k == kind::readopted;
}

std::uint64_t model::depth(std::uint32_t lane) const {
  std::uint64_t n = 0;
  for (const auto& [key, e] : lanes[lane].at) n += in_depth(e.k);
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
    add(L.head_repaired);
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
    if (c.posted + lanes[l].phantom != c.out() + depth(l) + lazy(l))
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
    case kind::sorting_counted:  // (known bug priority-sorting-delivered, fixed) R3 frees the committed ring slot
      e.k = kind::sorting_freed;
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

namespace {

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
      // A priority lane at its limit: a waiting post (block) looks at
      // slot(head), the owner's published head, and repairs a dead claim
      // there (R1); the policy answers otherwise. The head is the first
      // position the owner's last call did not take from its ring: past the
      // messages it moved into the store (where 1; where 2: maybe), and
      // unknown after an owner died (head_stale). Only that position, once:
      // repaired, it is finished, and the head does not move until the
      // owner's next call publishes it (a finished slot is not repaired:
      // phantom-abandon, fixed).
      if (L.pol == policy::block && !L.head_repaired) {
        bool sure = !L.head_stale;
        for (const auto& [key, e] : L.at) {
          if (e.k == kind::hole) {
            model r = m;
            repair(r, c_.lane, key, false, nullptr);
            r.lanes[c_.lane].head_repaired = true;
            auto st2 = stages;
            st2.push_back(r);
            run(std::move(r), evicted, std::move(st2), rounds + 1);
            if (sure) return;
            break;
          }
          const bool movable_kind = e.k == kind::message || e.k == kind::readopted || e.k == kind::orphaned || e.k == kind::held;
          if (movable_kind && e.where == 1) continue;  // in the store: before the head
          if (movable_kind && e.where == 2) {  // maybe in the store
            sure = false;
            continue;
          }
          break;  // the ring holds it, and the post waits there
        }
      }
      return full(std::move(m), evicted, std::move(stages));
    }
    const entry& e = L.at.at(q);
    if (e.k == kind::message) {
      if (L.pol != policy::drop_oldest) return full(std::move(m), evicted, std::move(stages));
      // E1-E4: evict the oldest, then claim again.
      model a = m;
      a.lanes[c_.lane].at[q].k = kind::prod_evicting;  // E2: taken, not yet counted
      // Held by the evictor now: its entry's next holder finishes the eviction
      // (entry_reused), not the poster's. (Before, the model kept the poster's
      // entry here and freed the slot when the poster's entry was reused.)
      a.lanes[c_.lane].at[q].writer = c_.writer;
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
    // A priority box's post that waits (block) repairs what it waits on: a
    // dead owner's committed ring slot (known bug priority-sorting-delivered) is freed (R3).
    if (m.lanes[c_.lane].pol == policy::block && m.sorting_counted_delivered) {
      model r = m;
      bool any = false;
      for (auto& [key, e] : r.lanes[c_.lane].at)
        if (e.k == kind::sorting_counted) {
          e.k = kind::sorting_freed;
          any = true;
        }
      if (any) {
        auto st2 = stages;
        st2.push_back(r);
        refuse(std::move(r), std::move(st2), evicted, &tally::timeouts, post_status::timeout);
      }
    }
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

}  // namespace

void add_unique(std::vector<model>& v, model m) {
  if (std::find(v.begin(), v.end(), m) == v.end()) v.push_back(std::move(m));
}

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

}  // namespace gencheck
