// lib/pool/pool_stop.cpp - the supervisor's stop side: signals on proof (SP),
// stopping a member (P1-P5: signal, grace, drain, unlink), the end (E) and the
// removal of the pool. The protocol is at the top of pool_supervisor.cpp.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <thread>
#include <vector>

#include "base/access.hpp"
#include "base/errors.hpp"
#include "base/fault.hpp"
#include "base/futex.hpp"
#include "ownership/lease.hpp"
#include "wake/notify_hub.hpp"
#include "pool/pool_layout.hpp"
#include "pool/pool_table.hpp"
#include "pool/pool_supervisor.hpp"
#include "base/process.hpp"
#include "segment/segment.hpp"
#include "base/shm_file.hpp"
#include "shmbox/owner.hpp"
#include "shmbox/producer.hpp"

namespace shmbox::detail {
namespace {

// P5: a member stopped for these reasons is replaced (pooler replaces a member whose state is unknown,
// and one past its max_lifetime).
bool replaces(member_stop why) noexcept {
  return why == member_stop::failed || why == member_stop::consumer_died || why == member_stop::crashed ||
         why == member_stop::unhealthy || why == member_stop::expired;
}

}  // namespace

bool supervisor::signal_worker(std::uint32_t m, std::uint64_t gen, int sig) {
  const pool_member* e = h_.member_at(m);
  bool sent = false;
  const auto pid = static_cast<pid_t>(e->worker_pid.load(std::memory_order_relaxed) & kPidMask);
  if (pid > 1 && in_this_ns(e->worker_ns.load(std::memory_order_relaxed)))
    sent = signal_proven(m, gen, pid, sig, "the member table") || sent;
  // The box's owner (sh -c may have forked the real worker), when it is alive
  // in our namespace. Its key is a claim like any other: proven first (SP).
  if (auto v = box_owner(m, gen); v && v->alive && in_this_ns(v->pid_ns))
    sent = signal_proven(m, gen, static_cast<pid_t>(key_pid(v->key)), sig, "its box's owner record") || sent;
  return sent;
}

bool supervisor::signal_proven(std::uint32_t m, std::uint64_t gen, pid_t pid, int sig, const char* named_by) {
  const std::string box = member_name(m, gen);
  if (pid <= 1 || pid == ::getpid()) return false;
  if (const auto child = children_.find(pid); child != children_.end() && child->second.box == box)  // SP1
    return signal_child(pid, child->second, sig);
  const std::string box_entry = "SHMBOX_BOX=" + box;
  if (const int pidfd = pidfd_with_environ(static_cast<std::uint32_t>(pid), {pool_id_, box_entry}); pidfd >= 0) {  // SP2
    // Its group too when it leads one (a group's id is not reused while its leader lives: the pidfd says it does).
    const bool group = ::getpgid(pid) == pid && pidfd_signal(pidfd, 0) && ::kill(-pid, sig) == 0;
    const bool sent = pidfd_signal(pidfd, sig) || group;
    ::close(pidfd);
    return sent;
  }
  if (refused_.size() < 4096 && refused_.emplace(m, gen, pid).second) {
    count(pool_counter::refused_signals);
    log("member " + std::to_string(m) + ": pid " + std::to_string(pid) + ", named by " + named_by +
        ", is not proven to be this pool's worker (its environment lacks " + box_entry +
        " of this pool): not signalled (a forged or stale entry)");
  }
  return false;
}

bool supervisor::signal_child(pid_t pid, const child_rt& c, int sig) noexcept {
  // Its group while the child is not reaped (zombie or alive: its pid, which
  // is the group's id, is not reused); then the child, through its pidfd.
  const bool unreaped = c.pidfd < 0 || pidfd_signal(c.pidfd, 0);
  const bool group = unreaped && ::kill(-pid, sig) == 0;
  const bool sent = c.pidfd >= 0 ? pidfd_signal(c.pidfd, sig) : ::kill(pid, sig) == 0;
  return sent || group;
}

void supervisor::stop_own_workers() {
  kill_hooks();
  reap();
  // SP1 and SP2, whatever the table says now.
  std::vector<std::pair<pid_t, int>> targets;  // (pid, pidfd or -1 for our children)
  for (const auto& [pid, c] : children_) targets.emplace_back(pid, -1);
  for (const auto& [pid, fd] : processes_with_environ(pool_id_)) {
    if (children_.count(static_cast<pid_t>(pid)) != 0) {
      ::close(fd);
      continue;
    }
    targets.emplace_back(static_cast<pid_t>(pid), fd);
  }
  if (targets.empty()) return;
  auto signal_all = [&](int sig) {
    for (const auto& [pid, fd] : targets) {
      if (fd < 0) {
        // SP1: only while it is still our unreaped child. all_gone() reaps
        // during the grace: a child reaped then is no longer in children_,
        // and its pid (and group id) may be another process's by now.
        if (const auto c = children_.find(pid); c != children_.end()) signal_child(pid, c->second, sig);
      } else {
        if (::getpgid(pid) == pid && pidfd_signal(fd, 0)) ::kill(-pid, sig);
        pidfd_signal(fd, sig);
      }
    }
  };
  auto all_gone = [&] {
    reap();
    for (const auto& [pid, fd] : targets) {
      if (fd < 0 ? children_.count(pid) != 0 : pidfd_signal(fd, 0)) return false;
    }
    return true;
  };
  log("pool '" + h_.name + "' is gone: stopping its " + std::to_string(targets.size()) + " worker process(es)");
  signal_all(SIGTERM);
  const std::uint64_t until = mono_ns() + std::min<std::uint64_t>(h_.hdr.stop_grace_ms, 10'000) * kMs;
  while (!all_gone() && mono_ns() < until) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  if (!all_gone()) signal_all(SIGKILL);
  const std::uint64_t reap_until = mono_ns() + 1000 * kMs;
  while (!all_gone() && mono_ns() < reap_until) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  for (const auto& [pid, fd] : targets)
    if (fd >= 0) ::close(fd);
}

bool supervisor::drain(std::uint32_t m, std::uint64_t gen, member_stop why) {
  const std::string name = member_name(m, gen);
  auto b = Box::open(name, {.any_owner = true});
  if (!b) {
    const std::error_code ec = b.error();
    if (ec == errc::not_found) return true;  // nothing left to drain
    // S2a: no box of ours either: a file planted at the name (a FIFO, an
    // empty, foreign or damaged file, one we may not open) or a box left
    // half made. Nothing of ours to drain: left alone, as a third user's box
    // below (before, such a file kept the entry `stopping` for ever).
    if (ec == errc::not_a_box || ec == errc::permission_denied || ec == errc::incomplete || ec == errc::truncated ||
        ec == errc::corrupt || ec == errc::version_mismatch) {
      if (refused_.size() < 4096 && refused_.emplace(m, gen, -1).second)
        log("member " + std::to_string(m) + ": '" + name + "' is not a box of this pool (" + explain(ec) + "): left alone");
      return true;
    }
    return false;  // another error (no memory, a signal): tried again at the next tick
  }
  // SP for files: a member box is made by a supervisor of this pool, as this
  // user or the pool's owner. A box of a third user at a member's name (a
  // forged generation can name one) is not ours to drain or remove.
  if (const std::uint32_t uid = access::box(*b)->uid; !ours(uid)) {
    if (refused_.size() < 4096 && refused_.emplace(m, gen, -1).second)
      log("member " + std::to_string(m) + ": box '" + name + "' belongs to uid " + std::to_string(uid) +
          ", not to this pool's users: left alone");
    return true;
  }
  const std::uint64_t dead_worker = view_owner(*access::box(*b)).key;
  auto o = Owner::acquire(*b);
  if (!o) return false;  // a live owner: not yet
  // The stopped worker's doorbell (notify_hub.hpp), which a killed process
  // cannot remove itself. The key is the box's word, so only a doorbell that
  // the kernel says nobody reads goes (SP: a forged key names a live one).
  if (dead_worker != 0 && dead_worker != self_key()) (void)remove_unread_bell(bell_entry(dead_worker), false);
  if (!h_.dead_letters.empty() && !dead_letters_) {
    // T4: the pool's dead letters, followed only when whoever may write the pool may write them.
    if (auto p = access::attach_named(h_.fd, "pool '" + h_.name + "'", h_.dead_letters)) dead_letters_.emplace(std::move(*p));
  }
  // P3: everything is read without committing, then committed once. Each
  // message forwarded (or counted lost) is recorded in the entry
  // (drain_count) in the same locked section as its count; a successor
  // reads the same messages again, flagged redelivered and in the same
  // order, and skips the ones already recorded. Only a supervisor killed
  // between one post and its record posts that one message twice.
  pool_member* e = h_.member_at(m);
  const std::uint64_t recorded = e->drain_count.load(std::memory_order_relaxed);
  std::uint64_t moved = 0, lost = 0, index = 0;
  batch msgs;
  for (;;) {
    msgs.clear();
    if (o->read(msgs, {.max = 64, .timeout = std::chrono::nanoseconds(0)}) != recv_status::ok) break;
    for (std::size_t i = 0; i < msgs.size(); ++i, ++index) {
      if (msgs.redelivered(i) && index < recorded) continue;  // a predecessor forwarded it
      bool ok = false;
      if (dead_letters_) {
        // As a box's own dead letters: "[origin reason] message" (docs/policies.md, Dead letters).
        std::string letter;
        letter.append("[").append(name).append(" ").append(to_string(why)).append("] ").append(msgs[i]);
        ok = is_stored(dead_letters_->post(letter, {.timeout = std::chrono::nanoseconds(0)}));
      }
      table_txn t(h_, mono_ns() + kTxnWaitNs);
      if (t.locked()) {
        t.write(e->drain_count, index + 1);
        t.add(ok ? pool_counter::dead_lettered : pool_counter::lost);
        t.commit("drain");
      }
      ++(ok ? moved : lost);
    }
  }
  SHMBOX_FAULT("supervisor.mid_drain");
  o->commit();
  ::shm_unlink(shm_path(name).c_str());  // P4: the name first, then our ownership (the Owner's destructor)
  SHMBOX_FAULT("supervisor.after_unlink");
  if (moved + lost > 0)
    log("member " + std::to_string(m) + ": " + std::to_string(moved) + " messages to the dead-letter box, " + std::to_string(lost) +
        " lost");
  return true;
}

void supervisor::handle_stopping(std::uint32_t m, std::uint64_t word, std::uint64_t gen, std::uint64_t now) {
  const member_stop why = member_stop_of(word);
  pool_member* e = h_.member_at(m);
  const auto v = box_owner(m, gen);
  const bool owned = v && v->alive;
  const bool gentle = why == member_stop::culled || why == member_stop::removed || why == member_stop::expired;
  const std::uint64_t signalled = e->stop_signal_ns.load(std::memory_order_relaxed);
  if (signalled == 0) {  // P1
    const bool sent = signal_worker(m, gen, gentle ? SIGTERM : SIGKILL);
    with_member(m, word, gen, "signal", [&](table_txn& t, pool_member* me) { t.write(me->stop_signal_ns, now); });
    SHMBOX_FAULT("supervisor.after_signal");
    log("stopping member " + std::to_string(m) + " (" + std::string(to_string(why)) + ")" +
        (sent || !owned ? "" : ": its worker is in another pid namespace and cannot be signalled from here"));
    return;
  }
  if (owned) {
    if (now - signalled > std::uint64_t{h_.hdr.stop_grace_ms} * kMs) {  // P2
      if (!signal_worker(m, gen, SIGKILL) && !rt(m, gen).unsignalable_logged) {
        rt(m, gen).unsignalable_logged = true;
        log("member " + std::to_string(m) + ": its worker (pid " + std::to_string(key_pid(v->key)) +
            " of another pid namespace) cannot be signalled from here; waiting for it to exit");
      }
    }
    return;
  }
  if (!gentle || now - signalled > std::uint64_t{h_.hdr.stop_grace_ms} * kMs) signal_worker(m, gen, SIGKILL);
  rt_.erase(m);  // drop our read-only mapping before the box goes
  if (!drain(m, gen, why)) return;  // P3, P4
  // A worker that died soon after its start, seen first by a take or give back (pool_table.hpp LV): backs off as tick() does.
  if (why == member_stop::crashed && now - e->started_ns.load(std::memory_order_relaxed) < kQuickDeathNs) start_failed(now);
  const bool replace = replaces(why) && removal_ == 0 && h_.state()->removing.load(std::memory_order_relaxed) == 0;  // RM1, RM2
  with_member(m, word, gen, "stopped", [&](table_txn& t, pool_member* me) {  // P5
    t.write(me->worker_pid, 0);
    t.write(me->worker_ns, 0);
    t.write(me->worker_start, 0);
    t.write(me->stop_signal_ns, 0);
    t.write(me->state, make_member_state(member_state::empty));
    if (replace) request_start(h_, t);  // the first empty entry: this one, or an earlier one
  });
  log("member " + std::to_string(m) + " stopped (" + std::string(to_string(why)) + ")" + (replace ? ": replacing it" : ""));
}

bool supervisor::finish_removal() {
  // Every entry is empty: the segment goes (if it is still the one we have open).
  const std::string path = pool_shm_path(h_.name);
  const int fd = open_shm_file(path, O_RDONLY, shm_expect::segment).fd;
  if (fd >= 0) {
    struct stat st {};
    const bool same = ::fstat(fd, &st) == 0 && static_cast<std::uint64_t>(st.st_ino) == h_.ino &&
                      static_cast<std::uint64_t>(st.st_dev) == h_.dev;
    ::close(fd);
    if (same) ::shm_unlink(path.c_str());
  }
  log("pool '" + h_.name + "' removed");
  return true;
}

}  // namespace shmbox::detail
