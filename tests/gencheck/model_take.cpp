// tests/gencheck/model_take.cpp - the reference model's transitions on the
// owner's side (model.hpp): receives and reads (T1-T7, H1; a lifo lane's L3;
// a priority box's order, its store and the moves into it), commits
// (C1-C4), an owner's death, a takeover (R4) and a producer entry taken
// over from a dead holder. model.cpp has the posts and the repairs both use.
#include <algorithm>
#include <optional>
#include <unordered_map>

#include "model.hpp"
#include "model_internal.hpp"

namespace gencheck {

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
    held_before_ = m.pending.size();
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

  // The call ends: T7 (published heads), a lease box's commit of what it
  // took (only when it took something; earlier reads stay held for commit(),
  // as in any box: owner_commit from held_before).
  void finish(model m, const std::vector<delivery>& got) {
    if (reply_ != nullptr && got != *reply_) return;
    if (fenced_ && c_.how != take_kind::read && !got.empty()) {
      commit_all(m, true);
      if (reply_ == nullptr) return;  // (stages recorded inside)
    }
    finals.push_back({std::move(m), got});
  }

  // C1-C4 for what this call took (a lease box's receive commits at once).
  void commit_all(model& m, bool record) {
    const std::vector<std::pair<std::uint32_t, std::uint64_t>> pending(
        m.pending.begin() + static_cast<std::ptrdiff_t>(held_before_), m.pending.end());
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
    m.pending.resize(held_before_);
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
      // Nothing published: dead writers' slots may be repaired (when nothing
      // was taken from the lane; a call that waits makes several passes, and
      // an earlier one may have found nothing held yet).
      if (n_lane == 0) {
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
        case kind::prod_ghost:
        case kind::prod_evicting:
          // T1b: held by a dead evictor. The cursor never passes it: with
          // nothing taken from the lane yet (and nothing held) the owner
          // finishes it (R2) once it has been stuck kRepairGraceNs, which a
          // call that does not wait may not have seen yet: it stops here.
          // (Before, the model skipped it as the C++ did before T1b.)
          if (n_lane == 0 && m.pending.empty()) repair_and_stay(key);
          return next_lane(m);
        case kind::held:
        case kind::owner_ghost:
        case kind::owner_done:
        case kind::sorting_counted:  // (priority boxes only)
        case kind::sorting_freed:
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
  std::size_t held_before_ = 0;  // m.pending when the call began: earlier reads
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
    for (auto& L : f.m.lanes) {  // T7: the call published every lane's head
      L.head_stale = false;
      L.head_repaired = false;
    }
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
        if (y.sorting_counted_delivered) {  // (the known bug: past T5 of the move; past T6 too)
          z.lanes[l].at[key].k = kind::sorting_counted;
          ++z.lanes[l].c.delivered;
          add_unique(out, z);
          z.lanes[l].at[key].k = kind::sorting_freed;
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
  for (auto& L : x.lanes) {  // (the head may have moved: unknown)
    L.head_stale = true;
    L.head_repaired = false;
  }
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
      if (it->second.k == kind::sorting_counted || it->second.k == kind::sorting_freed) {  // kept: QUEUED, no longer counted delivered
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
