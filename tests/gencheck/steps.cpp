// tests/gencheck/steps.cpp - the generative checker's steps (run.hpp): a
// post (killed inside it or not), a receive, read or commit (idem), an owner
// that exits, hangs past its lease or is killed between calls, producers and
// heirs started and killed; each chosen from the run's seed alone (the same
// draws in a replay, whatever the box did), then checked (settle). And the
// end of a run: an owner drains the box and every stored message must be
// accounted for.
#include <signal.h>
#include <unistd.h>

#include <array>
#include <cstdio>

#include "run.hpp"

namespace gencheck {

// A post by producer i; kill_ns: SIGKILL it that long after the command (0: no kill).
void run::post(std::size_t i, std::uint32_t lane, bool too_large, std::uint64_t r, std::optional<std::uint64_t> kill_ns) {
  proc& p = producers_[i];
  post_call c;
  c.lane = lane;
  c.id = {p.prod, p.next_seq++};
  c.prio = cfg_.priority ? static_cast<std::int64_t>(r % 4) : 0;
  c.writer = p.entry;
  c.too_large = too_large;
  const std::size_t size = too_large ? slot_size() + 1 + r % 8 : kHeader + r % (slot_size() - kHeader + 1);
  // A post the model says can only time out waits briefly; one that may
  // wait for a repair (a dead process's slot) gets time for it.
  bool only_timeout = true;
  for (const model& m : cands_)
    for (const post_reply& o : post_outcomes(m, c)) only_timeout &= o.st == post_status::timeout;
  const int timeout_ms = only_timeout ? 30 : 500;
  const std::string cmd = "post " + std::to_string(lane) + " " + std::to_string(c.id.seq) + " " + std::to_string(c.prio) + " " +
                          std::to_string(timeout_ms) + " " + std::to_string(size);
  const std::string what = "step " + std::to_string(step_) + ": p" + std::to_string(p.prod) + " posts " + to_string(c.id) +
                           " to lane " + std::to_string(lane) + (too_large ? " (too large)" : "") +
                           (kill_ns ? " and is killed after " + std::to_string(*kill_ns / 1000) + " us" : "");
  ++totals_.posts;
  const auto line = kill_ns ? ask_then_kill(p, cmd, *kill_ns) : ask(p, cmd, std::chrono::milliseconds(timeout_ms) + 20s);
  std::optional<post_reply> reply;
  if (line) {
    std::istringstream in(*line);
    std::string r0, st;
    std::uint32_t seq = 0;
    in >> r0 >> seq >> st;
    const auto s = parse_post_status(st);
    if (r0 != "r" || seq != c.id.seq || !s) fail(what + ": producer answered " + *line);
    reply = post_reply{*s, 0};
    in >> reply->evicted;
  } else if (L_->prod[p.prod].done.load() == c.id.seq + std::uint64_t{1}) {
    reply = post_reply{static_cast<post_status>(L_->prod[p.prod].status.load()), L_->prod[p.prod].evicted.load()};
  }
  const bool started = L_->prod[p.prod].attempt.load() == c.id.seq + std::uint64_t{1};
  if (reply) {
    if (reply->st == post_status::error) fail(what + ": post failed: " + line.value_or("(ledger)"));
    status_[c.id] = reply->st;
    note(what + ": " + to_string(*reply));
    apply([&](const model& m, std::string& why) { return post_done(m, c, *reply, why); }, what + " returned " + to_string(*reply));
  } else if (started) {
    note(what + ": killed inside the call");
    apply([&](const model& m, std::string&) { return post_cut(m, c); }, what + " (killed inside)");
  } else {
    note(what + ": killed before the call");
  }
  if (kill_ns || !line) producer_died(i);
  settle(what);
}

// A receive, try_receive or read by the owner.
void run::take(take_kind how, std::size_t max, int timeout_ms, std::optional<std::uint64_t> kill_ns) {
  const std::string cmd = how == take_kind::try_one ? std::string("try")
                          : (how == take_kind::read ? "read " : "recv ") + std::to_string(max) + " " + std::to_string(timeout_ms);
  const std::string what = "step " + std::to_string(step_) + ": owner " + cmd +
                           (kill_ns ? ", killed after " + std::to_string(*kill_ns / 1000) + " us" : "");
  const take_call c{how, how == take_kind::try_one ? 1 : max, timeout_ms > 0};
  const auto line = kill_ns ? ask_then_kill(*owner_, cmd, *kill_ns) : ask(*owner_, cmd, std::chrono::milliseconds(timeout_ms) + 20s);
  if (line) {
    recv_status st{};
    const std::vector<delivery> got = deliveries(*line, st);
    if (st == recv_status::not_owner) fail(what + ": the owner was told it is not the owner");
    note(what + ": " + to_string(got));
    apply([&](const model& m, std::string& why) { return take_done(m, c, got, why); }, what + " got " + to_string(got));
    if (kill_ns) apply([](const model& m, std::string&) { return std::vector<model>{owner_gone(m)}; }, what);
  } else {
    note(what + ": died inside the call");
    apply([&](const model& m, std::string&) { return take_cut(m, c); }, what + " (died inside)");
  }
  if (kill_ns || !line) owner_died(what.c_str());
  settle(what);
}

void run::commit(std::optional<std::uint64_t> kill_ns) {
  const std::string what = "step " + std::to_string(step_) + ": owner commit" +
                           (kill_ns ? ", killed after " + std::to_string(*kill_ns / 1000) + " us" : "");
  const auto line = kill_ns ? ask_then_kill(*owner_, "commit", *kill_ns) : ask(*owner_, "commit", 20s);
  if (line) {
    if (line->rfind("c ok 0", 0) != 0) fail(what + ": answered " + *line);
    note(what + ": ok");
    apply([](const model& m, std::string& why) { return commit_done(m, why); }, what);
    if (kill_ns) apply([](const model& m, std::string&) { return std::vector<model>{owner_gone(m)}; }, what);
  } else {
    note(what + ": died inside the call");
    apply([](const model& m, std::string&) { return commit_cut(m); }, what + " (died inside)");
  }
  if (kill_ns || !line) owner_died(what.c_str());
  settle(what);
}

void run::owner_exit() {
  const std::string what = "step " + std::to_string(step_) + ": the owner exits (releases the box)";
  owner_->c->write_stdin("exit\n");
  const int st = owner_->c->wait(10s);
  if (!shmtest::exited_with(st, 0)) fail(what + ": it ended with status " + std::to_string(st));
  note(what);
  apply([](const model& m, std::string&) { return std::vector<model>{owner_gone(m)}; }, what);
  await_takeover(what.c_str());
  settle(what);
}

void run::kill_idle(proc& p) {
  p.c->kill(SIGKILL);
  (void)p.c->wait(10s);
  ++totals_.kills;
}

// A lease box: the owner stopped (SIGSTOP) past its lease; its heir must take over.
void run::hang_owner() {
  const std::string what = "step " + std::to_string(step_) + ": the owner hangs past its lease";
  ::kill(owner_->c->pid(), SIGSTOP);
  note(what);
  const std::uint64_t deadline = now_ns() + (cfg_.lease_ms + 10'000ull) * 1'000'000;
  bool heir_died = false;
  for (;;) {
    if (heirs_.empty()) {  // every heir died inside its takeover: the box is left without a live owner
      note("no heir left: the deposed owner is retired");
      apply([](const model& m, std::string&) { return std::vector<model>{owner_gone(m)}; }, what);
      retire_stale_owner();
      settle(what);
      return;
    }
    for (std::size_t i = 0; i < heirs_.size(); ++i) {
      auto line = heirs_[i].c->read_line(5ms);
      if (!line) {
        if (shmtest::process_state(heirs_[i].c->pid()) != 'Z' && ::kill(heirs_[i].c->pid(), 0) == 0) continue;
        (void)heirs_[i].c->wait(5s);  // died inside its takeover (a crash point)
        if (!heirs_[i].fault.empty()) ++totals_.fault_kills;
        apply([](const model& m, std::string&) { return acquire_cut(owner_gone(m)); }, what + ": an heir died taking over");
        note("an heir died inside its takeover (" + heirs_[i].fault + ")");
        heirs_.erase(heirs_.begin() + static_cast<std::ptrdiff_t>(i));
        heir_died = true;
        break;
      }
      if (line->rfind("owned ", 0) != 0) fail(what + ": heir said " + *line);
      // (after an heir that died inside its takeover, the next one takes the
      // box from it: owner-died; that heir may not be reaped yet: look)
      if (!heir_died && line->find("owner-died") != std::string::npos)
        for (std::size_t j = 0; j < heirs_.size() && !heir_died; ++j) {
          if (j == i || heirs_[j].c->read_line(2000ms)) continue;
          (void)heirs_[j].c->wait(5s);
          if (!heirs_[j].fault.empty()) ++totals_.fault_kills;
          apply([](const model& m, std::string&) { return acquire_cut(owner_gone(m)); }, what + ": an heir died taking over");
          note("an heir died inside its takeover (" + heirs_[j].fault + ")");
          heirs_.erase(heirs_.begin() + static_cast<std::ptrdiff_t>(j));
          if (j < i) --i;
          heir_died = true;
        }
      if (line->find("lease-expired") == std::string::npos && !(heir_died && line->find("owner-died") != std::string::npos))
        fail(what + ": heir took over for another reason: " + *line + " (the stopped owner's process is " +
             (shmtest::process_state(owner_->c->pid()) == 'T' ? std::string("stopped, alive)")
                                                              : "in state '" + std::string(1, shmtest::process_state(owner_->c->pid())) + "')"));
      apply([](const model& m, std::string&) { return std::vector<model>{acquire(owner_gone(m))}; }, what);
      ++totals_.takeovers;
      note("heir took over: " + *line);
      retire_stale_owner();
      owner_ = std::move(heirs_[i]);
      heirs_.erase(heirs_.begin() + static_cast<std::ptrdiff_t>(i));
      settle(what);
      return;
    }
    if (now_ns() > deadline) {
      std::string table;
      const shmbox::box_info i = shmbox::info(*box_);
      for (const shmbox::heir_info& h : i.heirs)
        table += " [entry " + std::to_string(h.entry) + " pid " + std::to_string(h.pid) + (h.alive ? " alive" : " dead") +
                 (h.listener ? " listener" : "") + "]";
      std::string ours;
      for (const proc& h : heirs_) ours += " " + std::to_string(h.c->pid());
      fail(what + ": no heir took over within the lease + 10 s; owner pid " + std::to_string(owner_->c->pid()) + " (epoch " +
           std::to_string(i.owner.epoch) + (i.owner.expired ? ", expired" : "") + "), heir table:" + table +
           "; the driver's heirs:" + ours);
    }
  }
}

void run::one_step() {
  for (model& m : cands_) m.fates.clear();
  poll_lease_takeover();
  std::array<std::uint64_t, 6> r{};
  for (auto& x : r) x = rng_();
  // Kills land anywhere from before the call to after it (microseconds to milliseconds).
  static constexpr std::uint64_t kDelays[] = {0, 1'000, 3'000, 10'000, 30'000, 100'000, 300'000, 2'000'000};
  const std::uint64_t delay = kDelays[r[2] % std::size(kDelays)] + r[3] % 2'000;
  const auto timed = [&](bool want) { return want && opt_.timed_kills ? std::optional<std::uint64_t>(delay) : std::nullopt; };
  const std::uint32_t lane = static_cast<std::uint32_t>(r[1] % cfg_.lanes);
  // The actions and their weights (out of 1000).
  const std::uint64_t pick = r[0] % 1000;
  const bool no_owner = !owner_;
  if (no_owner && heirs_.empty() && (pick < 200 || producers_.empty() || pick >= 560)) {
    // An orphaned box: someone claims it (now and then armed with a crash point).
    spawn_owner(r[4] % 6 == 0 ? fault_of(kOwnerPoints, r[5]) : std::string());
    settle("step " + std::to_string(step_) + ": a new owner");
    return;
  }
  if (producers_.empty() || (pick >= 900 && pick < 930 && producers_.size() + 1 < cfg_.max_producers)) {
    spawn_producer(r[4] % 4 == 0 ? fault_of(kProducerPoints, r[5]) : std::string());
    settle("step " + std::to_string(step_) + ": a new producer");
    return;
  }
  const std::size_t pi = r[4] % producers_.size();
  if (pick < 420) return post(pi, lane, false, r[5], std::nullopt);
  if (pick < 430) return post(pi, lane, true, r[5], std::nullopt);
  if (pick < 470) return post(pi, lane, false, r[5], timed(true));
  if (pick < 560) {
    if (no_owner) return post(pi, lane, false, r[5], std::nullopt);
    const std::size_t max = 1 + r[5] % 6;
    if (pick < 500) return take(take_kind::receive, max, r[5] % 3 == 0 ? 20 : 0, std::nullopt);
    if (pick < 515) return take(take_kind::try_one, 1, 0, std::nullopt);
    if (pick < 540) return take(take_kind::read, max, r[5] % 3 == 0 ? 20 : 0, std::nullopt);
    return commit(std::nullopt);
  }
  if (no_owner) return post(pi, lane, false, r[5], std::nullopt);
  if (pick < 600) {
    const std::size_t max = 1 + r[5] % 6;
    if (!opt_.timed_kills) return take(take_kind::receive, max, 0, std::nullopt);
    if (pick < 575) return take(take_kind::receive, max, 0, timed(true));
    if (pick < 590) return take(take_kind::read, max, 0, timed(true));
    return commit(timed(true));
  }
  if (pick < 640) {  // an heir enlists (now and then armed)
    if (heirs_.size() >= 3) return take(take_kind::receive, 4, 0, std::nullopt);
    spawn_heir(r[4] % 3 == 0 ? fault_of(kOwnerPoints, r[5]) : std::string());
    settle("step " + std::to_string(step_) + ": an heir");
    return;
  }
  if (pick < 665) {  // the owner killed between calls
    const std::string what = "step " + std::to_string(step_) + ": the owner is killed between calls";
    kill_idle(*owner_);
    note(what);
    apply([](const model& m, std::string&) { return std::vector<model>{owner_gone(m)}; }, what);
    owner_died(what.c_str());
    settle(what);
    return;
  }
  if (pick < 680) return owner_exit();
  if (pick < 700) {  // a producer killed between calls
    kill_idle(producers_[pi]);
    note("step " + std::to_string(step_) + ": p" + std::to_string(producers_[pi].prod) + " killed between calls");
    producer_died(pi);
    settle("step " + std::to_string(step_) + ": a producer killed");
    return;
  }
  if (pick < 710 && !heirs_.empty()) {  // an heir killed
    kill_idle(heirs_[r[5] % heirs_.size()]);
    heirs_.erase(heirs_.begin() + static_cast<std::ptrdiff_t>(r[5] % heirs_.size()));
    note("step " + std::to_string(step_) + ": an heir killed");
    settle("step " + std::to_string(step_) + ": an heir killed");
    return;
  }
  if (pick < 720 && cfg_.lease_ms > 0 && !heirs_.empty()) return hang_owner();
  if (pick < 740 && producers_.size() > 1) {  // a producer exits (gives its entry back)
    producers_[pi].c->write_stdin("exit\n");
    if (!shmtest::exited_with(producers_[pi].c->wait(10s), 0)) fail("a producer did not exit cleanly");
    producers_.erase(producers_.begin() + static_cast<std::ptrdiff_t>(pi));
    settle("step " + std::to_string(step_) + ": a producer exits");
    return;
  }
  if (pick < 900) return take(take_kind::receive, 1 + r[5] % 8, 0, std::nullopt);
  return post(pi, lane, false, r[5], std::nullopt);
}

// The end: an owner (unarmed) drains the box; every stored message must
// then be accounted for.
void run::drain() {
  step_ = opt_.steps + 1;
  for (model& m : cands_) m.fates.clear();
  poll_lease_takeover();
  for (proc& p : producers_) p.c.reset();  // (killed: idle, between calls)
  for (proc& p : producers_) dead_entries_.insert(p.entry);
  producers_.clear();
  for (int round = 0; round < 100; ++round) {
    if (!owner_) {
      if (!heirs_.empty()) fail("drain: heirs but no owner");
      spawn_owner("");
      settle("drain: a new owner");
      continue;
    }
    if (!owner_->fault.empty()) {  // an armed owner could die in the drain: replaced by an unarmed one
      kill_idle(*owner_);
      apply([](const model& m, std::string&) { return std::vector<model>{owner_gone(m)}; }, "drain");
      owner_died("drain");
      settle("drain: the armed owner retired");
      continue;
    }
    bool pending = false;
    for (const model& m : cands_) pending |= !m.pending.empty();
    if (pending) {
      commit(std::nullopt);
      continue;
    }
    bool empty = true;
    for (const model& m : cands_)
      for (std::uint32_t l = 0; l < m.lanes.size(); ++l) empty &= m.depth(l) == 0;
    if (empty) break;
    take(take_kind::receive, 64, 100, std::nullopt);
  }
  for (std::uint32_t l = 0; l < cfg_.lanes; ++l)
    if (last_obs_.depth[l] != 0) fail("drain: lane " + std::to_string(l) + " still holds " + std::to_string(last_obs_.depth[l]));
  // Every message whose post said stored: delivered, or evicted/replaced where the policy does that.
  for (const auto& [id, st] : status_) {
    if (!shmbox::is_stored(st) || uncertain_.count(id) != 0) continue;
    const auto f = fates_.find(id);
    if (f == fates_.end()) fail("drain: " + to_string(id) + " was stored and is neither delivered nor dropped");
    if (f->second == fate::abandoned) fail("drain: " + to_string(id) + " was stored (its post said so) and counted abandoned");
  }
}

}  // namespace gencheck
