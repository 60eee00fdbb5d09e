// lib/pool/pool_supervisor.cpp - the pool's supervisor: takes the role, starts,
// restarts, culls and checks members (Pool::supervise, `shmbox pool run`); its
// stop side (P1-P5, SP, E: signals, drain, removal) is in pool_stop.cpp.
//
// THE SUPERVISOR ROLE (SR). Supervisors are clients with role standby and a
// place in line (pool_client::order). pool_state::supervisor_{client,key}
// names the one that acts; it is alive while its client is (TL1).
//  SR1 A standby looks every 10 ms; when the supervisor is dead (or there is
//      none) the first live standby in line takes the role under the table
//      lock: supervisor_* = itself, supervisor_epoch + 1.
//  SR2 Everything the supervisor does to a member is a sequence of steps,
//      each recorded in the member's entry before or after the step, so a
//      successor resumes from what the entry says (nothing lives only in
//      the dead supervisor's memory):
//   START (entry `starting`):
//     S1 started_ns = now (the start has begun)
//     S2 the member box <pool>.m<i>.<gen> is created (an existing one is a
//        predecessor's S2: used as it is, when it is a regular file of this
//        user or of the pool's owner)                        [supervisor.after_box]
//     S2a anything else at that name (a FIFO, link or directory, another
//        user's file or box: names are predictable, and any local user may
//        plant one) was planted: it is not opened, adopted or removed (not
//        ours: in a sticky /dev/shm only its owner or root may remove it, and
//        it could be planted again); the entry moves on to the next
//        generation whose name is free (at most kPlantedSkip names a tick:
//        no worker can exist yet, worker_start being 0), S1's time is
//        renewed, and the next tick makes that box. A planted file costs
//        the pool a look, never an entry.
//     S3 worker_start = 1: a worker may exist from now on (counted in `starts`)
//     S4 posix_spawn of /bin/sh -c COMMAND in a new process group  [supervisor.after_spawn]
//     S5 worker_pid, worker_ns, worker_start = its start time
//     S6a its box has a live owner and the pool has an init command: it
//        runs (our child, its own group; kept in this process's memory
//        only), and S6 follows when it exits 0. SHMBOX_WORKER_PID is in its
//        environment only when a pid is proven to be the member's worker
//        (SP below: the entry's pid, else its box's owner's): both are
//        claims any writer of the pool (or of the box) can forge. It
//        failing, or running past start_timeout: the entry is stopped
//        (init_failed) and the hook's group SIGKILLed. A successor finds the
//        entry still `starting` with a live owner and runs the hook again: at
//        least once, never skipped.
//                                                          [supervisor.after_init_spawn]
//     S6 its box has a live owner (and S6a passed): make_available (free,
//        or granted to the oldest waiter)
//     A successor that finds worker_start == 1 and no pid does not start
//     another worker (S4 may have run): it waits for an owner until
//     start_timeout, then stops the entry. So no entry ever gets two workers.
//   STOP (entry `stopping`, why):
//     P1 the worker (process group, and the box's owner when it is in our
//        pid namespace) gets SIGTERM (culled, removed, expired) or SIGKILL (failed,
//        consumer died, unhealthy, crashed, start timeout), each only on
//        proof (SP below); stop_signal_ns = now              [supervisor.after_signal]
//     P2 after stop_grace: SIGKILL
//     P3 once the box has no live owner: the supervisor takes the box
//        (Owner::acquire) and moves every message to the dead-letter box,
//        or counts it as lost without one: read, post, record, commit
//        (drain() says how a successor skips what was recorded: only a
//        supervisor killed between one post and its record posts that
//        message twice; none is lost). A box of a third user, or a file at
//        the name that is no box of ours (S2a: a FIFO, an empty, foreign or
//        damaged file), has nothing of ours to drain: left alone, and P5
//        follows (it never keeps the entry `stopping`). [supervisor.mid_drain]
//     P4 the box is unlinked, then the supervisor lets go of it
//                                                           [supervisor.after_unlink]
//     P5 the entry becomes `starting` with a new generation (failed,
//        consumer died, crashed, unhealthy: pooler replaces a member whose
//        state is unknown; expired: one past its max_lifetime) or `empty`
//        (culled, removed, start timeout).
//     A worker in another pid namespace cannot be signalled from here: its
//     entry stays `stopping` until it exits or a supervisor in its
//     namespace takes over.
//
// SIGNAL PROOF (SP). Every pid in the member table (worker_pid) and every
// key in a member box (its owner) can be written by any process that can
// write the segment (a 0666 pool, a scribbler), with a real victim's pid and
// start time. So a pid read there is only a candidate; the supervisor
// signals it only on evidence such a writer cannot forge (process.hpp):
//  SP1 it is this process's own unreaped child, spawned for that very member
//      box (children_): a zombie's pid is not reused, and we set its group.
//      children_ is looked at when the signal is sent, never a list made
//      before (reap() may have reaped the child since, and its pid and group
//      id may name another process now); the child itself is signalled
//      through the pidfd opened right after its spawn (never a reused pid,
//      even for a child reaped behind our back: SIGCHLD ignored), its group
//      only while that pidfd says the child is not reaped;
//  SP2 or its environment, which only its own user (and root) can read and
//      nobody else can change, carries SHMBOX_POOL_ID=<this pool's
//      incarnation> and SHMBOX_BOX=<that member's box>, which S4 gives every
//      worker (and its children inherit): a successor supervisor after a
//      takeover proves the workers its predecessor started this way. Its
//      group gets the signal too when it leads one.
// A candidate without proof is not signalled: counted (refused_signals) and
// logged once. Files are held to the same rule: a doorbell is removed only
// when the kernel says nobody reads it (remove_unread_bell), a member box
// only after we took its ownership (P3), the pool segment only when it is
// still the file we opened (finish_removal).
//
// REMOVAL (RM). The word pool_state::removing (1 graceful, 2 immediate)
// asks whoever supervises to remove the pool.
//  RM1 Pool::remove sets it under the table lock (never lowering it) and
//      wakes the supervisor, which from then on starts nothing (no replenish,
//      P5 replaces nothing, an entry `starting` is stopped as removed) and
//      stops free and checking members at once, members in use when given
//      back (graceful) or at once (immediate). The last member gone, it
//      removes the segment (finish_removal).
//  RM2 With no supervisor alive, the remover stands by and becomes one
//      (SR1), as a REMOVER: `how` is its own (supervisor::removal_), never
//      read back from the word, which any writer of the pool can reset; it
//      writes the word again at every tick, and whatever the table says it
//      never starts a process: no S1-S6, no init command (S6a), no
//      replenish, no replacement at P5, and spawn() refuses. It has no
//      command to run anyway: Pool::remove clears the ones it read from the
//      segment. So a writer that resets `removing` and asks for starts
//      (entries set `starting`) while the owner's `pool rm --timeout` runs
//      gets its entries stopped, never a process run as the pool's owner.
//
// THE END (E). A supervisor that ends because its pool is gone (unlinked
// from outside, or removed: finish_removal) stops every worker it can prove
// is this pool's, whatever the table says by then (it may be garbage):
// its children (SP1) and every process of this pid namespace whose
// environment carries SHMBOX_POOL_ID=<incarnation> (SP2): SIGTERM, up to
// stop_grace, then SIGKILL. Their boxes are drained and removed (P3, P4)
// where the table still names them. A worker can see the end by itself too
// (PoolMember::stopped()).
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/mman.h>
#include <sys/syscall.h>
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

extern char** environ;

namespace shmbox::detail {

supervisor::~supervisor() {
  for (const auto& [pid, c] : children_)
    if (c.pidfd >= 0) ::close(c.pidfd);
}

bool supervisor::am_supervisor() const noexcept {
  const pool_state* st = h_.state();
  return h_.client >= 0 && st->supervisor_key.load(std::memory_order_relaxed) == h_.key &&
         st->supervisor_client.load(std::memory_order_relaxed) == static_cast<std::uint64_t>(h_.client);
}

bool supervisor::first_in_line() const noexcept {
  const std::uint64_t mine = h_.client_at(static_cast<std::uint32_t>(h_.client))->order.load(std::memory_order_relaxed);
  for (std::uint32_t c = 0; c < h_.max_clients(); ++c) {
    if (static_cast<std::int32_t>(c) == h_.client) continue;
    const pool_client* e = h_.client_at(c);
    if (e->role.load(std::memory_order_relaxed) != static_cast<std::uint64_t>(pool_role::standby)) continue;
    const std::uint64_t order = e->order.load(std::memory_order_relaxed);
    if (order != 0 && order < mine && client_alive(h_, c, e->key.load(std::memory_order_relaxed))) return false;
  }
  return true;
}

void supervisor::take_over() {
  table_txn t(h_, mono_ns() + kTxnWaitNs);
  if (!t.locked()) return;
  pool_state* st = h_.state();
  const std::uint64_t c = t.read(st->supervisor_client);
  if (c < h_.max_clients() && client_alive(h_, static_cast<std::uint32_t>(c), t.read(st->supervisor_key))) return;
  const std::uint64_t epoch = t.read(st->supervisor_epoch) + 1;
  const bool successor = t.read(st->supervisor_key) != 0;
  t.write(st->supervisor_client, static_cast<std::uint64_t>(h_.client));
  t.write(st->supervisor_key, h_.key);
  t.write(st->supervisor_epoch, epoch);
  t.write(h_.client_at(static_cast<std::uint32_t>(h_.client))->role, static_cast<std::uint64_t>(pool_role::supervisor));
  t.commit("super");
  rt_.clear();
  log((successor ? "took over as supervisor of pool '" : "supervising pool '") + h_.name + "' (epoch " + std::to_string(epoch) + ")");
}

bool supervisor::segment_gone() const noexcept {
  struct stat st {};
  return ::fstat(h_.fd, &st) == 0 && st.st_nlink == 0;
}

supervisor::member_rt& supervisor::rt(std::uint32_t m, std::uint64_t gen) {
  member_rt& r = rt_[m];
  if (r.generation != gen) {
    r = member_rt{};
    r.generation = gen;
  }
  if (!r.box) {
    // Read-only, and no 1 s wait for a box being made (a file planted at the
    // name would cost it every tick): kNamedWaitNs; a box its worker is still
    // making is looked at again next tick.
    if (auto mapped = open_segment(member_name(m, gen), true, false, true, false, kNamedWaitNs)) {
      Box b = access::make_box(std::move(*mapped));
      // S2a: only a box of this user or the pool's owner says who the
      // member's worker is. A third user's box at the name (a forged
      // generation can name one) is as no box: its live owner is not ours.
      if (const std::uint32_t uid = access::box(b)->uid; ours(uid)) {
        r.box.emplace(std::move(b));
      } else if (!r.foreign_logged) {
        r.foreign_logged = true;
        log("member " + std::to_string(m) + ": box '" + member_name(m, gen) + "' belongs to uid " + std::to_string(uid) +
            ", not to this pool's users: not taken as its worker's");
      }
    }
  }
  return r;
}

bool supervisor::planted(const std::string& name, std::string& what) const {
  const std::string path = std::string(kShmDir) + shm_path(name);
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return false;  // gone meanwhile: the next tick makes it
    what = "cannot be looked at: " + std::string(std::strerror(errno));
    return true;
  }
  if (S_ISREG(st.st_mode) && ours(st.st_uid)) return false;
  what = std::string(file_kind(st.st_mode)) + " of uid " + std::to_string(st.st_uid);
  return true;
}

// The owner of member m's box; nullopt when the box does not exist (or cannot be opened).
std::optional<owner_view> supervisor::box_owner(std::uint32_t m, std::uint64_t gen) {
  member_rt& r = rt(m, gen);
  if (!r.box) return std::nullopt;
  return view_owner(*access::box(*r.box));
}

pid_t supervisor::spawn(std::uint32_t m, std::uint64_t gen, const std::string& what, bool init, std::string& error) {
  if (removal_ != 0 || what.empty()) {  // RM2: a remover runs nothing (and nothing is not a command)
    error = removal_ != 0 ? "a removal starts nothing" : "no command";
    return -1;
  }
  std::vector<std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string_view v = *e;
    if (v.starts_with("SHMBOX_POOL=") || v.starts_with("SHMBOX_BOX=") || v.starts_with("SHMBOX_MEMBER=") ||
        v.starts_with("SHMBOX_MEMBER_GENERATION=") || v.starts_with("SHMBOX_POOL_ID=") || v.starts_with("SHMBOX_WORKER_PID="))
      continue;
    env.emplace_back(v);
  }
  env.push_back("SHMBOX_POOL=" + h_.name);
  env.push_back(pool_id_);  // SP2: the proof a successor checks before it signals this worker
  env.push_back("SHMBOX_BOX=" + member_name(m, gen));
  env.push_back("SHMBOX_MEMBER=" + std::to_string(m));
  env.push_back("SHMBOX_MEMBER_GENERATION=" + std::to_string(gen));
  if (init) {
    if (const pid_t worker = proven_worker(m, gen); worker > 0) env.push_back("SHMBOX_WORKER_PID=" + std::to_string(worker));  // S6a
  }
  std::vector<char*> envp;
  for (auto& s : env) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string command = what;
  char sh[] = "sh", dash_c[] = "-c";
  char* argv[] = {sh, dash_c, command.data(), nullptr};
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  posix_spawnattr_setpgroup(&attr, 0);  // its own group: stopped as a group, untouched by our terminal's signals
  sigset_t none, defaults;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  sigemptyset(&defaults);
  for (const int s : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGCHLD, SIGUSR1, SIGUSR2}) sigaddset(&defaults, s);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, "/bin/sh", nullptr, &attr, argv, envp.data());
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    error = std::strerror(rc);
    return -1;
  }
  if (init) {
    hooks_.emplace(pid, std::make_pair(m, gen));
  } else {
    // SP1: our unreaped child, so the pidfd is for it (pidfds are close-on-exec).
    const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
    children_.emplace(pid, child_rt{member_name(m, gen), pidfd});
  }
  return pid;
}

pid_t supervisor::proven_worker(std::uint32_t m, std::uint64_t gen) {
  const std::string box = member_name(m, gen);
  const std::string box_entry = "SHMBOX_BOX=" + box;
  const auto proven = [&](pid_t pid) {
    if (pid <= 1 || pid == ::getpid()) return false;
    if (const auto c = children_.find(pid); c != children_.end()) return c->second.box == box;  // SP1
    const int pidfd = pidfd_with_environ(static_cast<std::uint32_t>(pid), {pool_id_, box_entry});  // SP2
    if (pidfd < 0) return false;
    ::close(pidfd);
    return true;
  };
  const pool_member* e = h_.member_at(m);
  if (in_this_ns(e->worker_ns.load(std::memory_order_relaxed))) {
    const auto pid = static_cast<pid_t>(e->worker_pid.load(std::memory_order_relaxed) & kPidMask);
    if (proven(pid)) return pid;
  }
  if (auto v = box_owner(m, gen); v && v->alive && in_this_ns(v->pid_ns)) {
    const auto pid = static_cast<pid_t>(key_pid(v->key));
    if (proven(pid)) return pid;
  }
  return 0;
}

supervisor::init_step supervisor::run_init(std::uint32_t m, std::uint64_t gen, std::uint64_t now, std::uint64_t started) {
  member_rt& r = rt(m, gen);
  if (r.init_done) return init_step::done;
  if (r.init_pid == 0) {
    std::string error;
    const pid_t pid = spawn(m, gen, h_.init_command, true, error);
    if (pid < 0) {
      log("member " + std::to_string(m) + ": cannot run its init command (/bin/sh: " + error + ")");
      return init_step::failed;
    }
    r.init_pid = pid;
    log("member " + std::to_string(m) + ": running its init command (pid " + std::to_string(pid) + ")");
    SHMBOX_FAULT("supervisor.after_init_spawn");
    return init_step::running;
  }
  int status = 0;
  const pid_t w = ::waitpid(r.init_pid, &status, WNOHANG);
  if (w == r.init_pid) {
    hooks_.erase(r.init_pid);
    r.init_pid = 0;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
      r.init_done = true;
      return init_step::done;
    }
    log("member " + std::to_string(m) + ": its init command failed (" +
        (WIFEXITED(status) ? "exit status " + std::to_string(WEXITSTATUS(status)) : "signal " + std::to_string(WTERMSIG(status))) +
        "): stopping it");
    return init_step::failed;
  }
  if (now - started > std::uint64_t{h_.hdr.start_timeout_ms} * kMs) {
    log("member " + std::to_string(m) + ": its init command still runs after start_timeout (" + std::to_string(h_.hdr.start_timeout_ms) +
        " ms): stopping both");
    ::kill(-r.init_pid, SIGKILL);  // our unreaped child leads its group (SP1)
    r.init_pid = 0;                // reaped by reap()
    return init_step::failed;
  }
  return init_step::running;
}

void supervisor::kill_hooks() noexcept {
  for (const auto& [pid, member] : hooks_) {
    ::kill(-pid, SIGKILL);
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
  }
  hooks_.clear();
  for (auto& [m, r] : rt_) r.init_pid = 0;
}

void supervisor::reap() noexcept {
  for (auto it = children_.begin(); it != children_.end();) {
    int status = 0;
    const pid_t r = ::waitpid(it->first, &status, WNOHANG);
    if (r != it->first && !(r < 0 && errno == ECHILD)) {
      ++it;
      continue;
    }
    if (it->second.pidfd >= 0) ::close(it->second.pidfd);
    it = children_.erase(it);  // SP1: from here on its pid is not ours to signal
  }
  // Init commands no member waits for any more (timed out, or their member
  // stopped or replaced meanwhile): killed, then reaped.
  for (auto it = hooks_.begin(); it != hooks_.end();) {
    const auto [m, gen] = it->second;
    const auto r = rt_.find(m);
    if (r != rt_.end() && r->second.generation == gen && r->second.init_pid == it->first) {
      ++it;
      continue;
    }
    ::kill(-it->first, SIGKILL);
    int status = 0;
    const pid_t w = ::waitpid(it->first, &status, WNOHANG);
    it = w == it->first || (w < 0 && errno == ECHILD) ? hooks_.erase(it) : std::next(it);
  }
}

void supervisor::handle_starting(std::uint32_t m, std::uint64_t word, std::uint64_t gen, std::uint64_t now) {
  pool_member* e = h_.member_at(m);
  std::uint64_t started = e->started_ns.load(std::memory_order_relaxed);
  if (started == 0) {  // S1
    if (now < backoff_until_ns_) return;
    if (!with_member(m, word, gen, "start", [&](table_txn& t, pool_member* me) { t.write(me->started_ns, now); })) return;
    started = now;
  }
  const std::string name = member_name(m, gen);
  const std::uint64_t worker_start = e->worker_start.load(std::memory_order_relaxed);
  if (worker_start == 0) {
    auto b = Box::create(name, member_box_options(h_));
    if (std::string what; !b && b.error() == errc::exists && planted(name, what)) {  // S2a
      std::uint64_t next = gen + 1;
      for (std::uint32_t k = 1; k < kPlantedSkip; ++k, ++next) {
        struct stat st {};
        if (::lstat((std::string(kShmDir) + shm_path(member_name(m, next))).c_str(), &st) != 0 && errno == ENOENT) break;
      }
      if (with_member(m, word, gen, "skip", [&](table_txn& t, pool_member* me) {
            t.write(me->generation, next);
            t.write(me->started_ns, now);
          }))
        log("member " + std::to_string(m) + ": /dev/shm" + shm_path(name) + " is " + what +
            ", not a box of this pool: left alone; the member moves on to generation " + std::to_string(next));
      return;
    }
    if (!b && b.error() != errc::exists) {  // S2 (an existing box is a predecessor's S2)
      log("member " + std::to_string(m) + ": cannot create its box: " + explain(b.error()));
      with_member(m, word, gen, "stop", [&](table_txn& t, pool_member*) { stop_member(h_, t, m, member_stop::start_timeout); });
      start_failed(now);
      return;
    }
    SHMBOX_FAULT("supervisor.after_box");
    if (!with_member(m, word, gen, "spawn", [&](table_txn& t, pool_member* me) {  // S3
          t.write(me->worker_start, 1);
          t.add(pool_counter::starts);
        }))
      return;
    std::string error;
    const pid_t pid = spawn(m, gen, h_.command, false, error);  // S4
    SHMBOX_FAULT("supervisor.after_spawn");
    if (pid < 0) {
      log("member " + std::to_string(m) + ": cannot start /bin/sh: " + error);
      with_member(m, word, gen, "stop", [&](table_txn& t, pool_member*) { stop_member(h_, t, m, member_stop::start_timeout); });
      start_failed(now);
      return;
    }
    const std::uint64_t ticks = process_start_ticks(static_cast<std::uint32_t>(pid));
    with_member(m, word, gen, "spawned", [&](table_txn& t, pool_member* me) {  // S5
      t.write(me->worker_pid, static_cast<std::uint64_t>(pid));
      t.write(me->worker_ns, self_pid_ns());
      t.write(me->worker_start, ticks > 1 ? ticks : 2);
    });
    log("started member " + std::to_string(m) + " (pid " + std::to_string(pid) + ", box " + name + ")");
    return;
  }
  if (auto v = box_owner(m, gen); v && v->alive) {  // S6
    if (!h_.init_command.empty()) {  // S6a
      const init_step s = run_init(m, gen, now, started);
      if (s == init_step::running) return;
      if (s == init_step::failed) {
        start_failed(now);
        with_member(m, word, gen, "stop", [&](table_txn& t, pool_member*) { stop_member(h_, t, m, member_stop::init_failed); });
        return;
      }
    }
    if (with_member(m, word, gen, "ready", [&](table_txn& t, pool_member*) { make_available(h_, t, m, false); }))
      log("member " + std::to_string(m) + " is ready (box " + name + ")");
    return;
  }
  if (now - started > std::uint64_t{h_.hdr.start_timeout_ms} * kMs) {
    start_failed(now);
    if (with_member(m, word, gen, "stop", [&](table_txn& t, pool_member*) { stop_member(h_, t, m, member_stop::start_timeout); }))
      log("member " + std::to_string(m) + " did not take its box within " + std::to_string(h_.hdr.start_timeout_ms) +
          " ms: stopping it");
  }
}


bool supervisor::handle_checking(std::uint32_t m, std::uint64_t word, std::uint64_t gen, std::uint64_t now) {
  pool_member* e = h_.member_at(m);
  const std::uint64_t seq = e->ping_seq.load(std::memory_order_relaxed);
  // Acquire: pairs with the member's release store in PoolMember::answer_ping.
  if (e->ping_ack.load(std::memory_order_acquire) == seq) {
    with_member(m, word, gen, "healthy", [&](table_txn& t, pool_member*) { make_available(h_, t, m, true); });
    return false;
  }
  if (now - e->ping_sent_ns.load(std::memory_order_relaxed) > std::uint64_t{h_.hdr.health_timeout_ms} * kMs) {
    if (with_member(m, word, gen, "stop", [&](table_txn& t, pool_member*) { stop_member(h_, t, m, member_stop::unhealthy); })) {
      log("member " + std::to_string(m) + " did not answer its health check within " + std::to_string(h_.hdr.health_timeout_ms) +
          " ms: replacing it");
      return true;
    }
  }
  return false;
}


std::uint64_t supervisor::tick() {
  reap();
  const pool_header& p = h_.hdr;
  pool_state* st = h_.state();
  // CU: the explicit cull this tick serves, read before its scan of the
  // members, so that the pass sees the table as it was when the request was
  // made or later (a request made during the scan has a later seq: the next
  // tick, woken by it, serves that one with a fresh scan). RC3: likewise the
  // reconfigure it applies (answered at its end) and the limits in force.
  // Read under the lock when the tick gets it, so that they are at least as
  // new as the section that made the request (the lock orders the two).
  std::uint64_t asked = 0, cull_done = 0, reconf = 0;
  pool_limits lim;
  bool under_lock = false;
  {
    table_txn t(h_, mono_ns() + kTxnWaitNs);
    if (t.locked()) {
      sweep_dead_clients(h_, t);
      // RM2: a remover says again how it removes (a writer may have reset the word).
      if (removal_ != 0 && t.read(st->removing) < removal_) {
        if (t.room() < 1) t.commit("sweep");
        t.write(st->removing, removal_);
      }
      asked = t.read(st->cull_asked);
      cull_done = t.read(st->cull_done);
      reconf = t.read(st->reconf_asked);
      lim = live_limits(h_, t);
      under_lock = true;
      t.commit("sweep");
    }
  }
  if (!under_lock) {  // (answers nothing this tick: see the replenish section)
    asked = cull_done = st->cull_done.load(std::memory_order_relaxed);
    lim = live_limits(h_);
  }
  const std::uint64_t now = mono_ns();
  // RM2: a remover goes by its own `how`, whatever the word says now.
  const std::uint64_t removing_v = std::max(st->removing.load(std::memory_order_relaxed), removal_);
  const bool explicit_cull = (asked >> 32) != (cull_done >> 32);
  // One probe per started member every kWorkerCheckNs, not every tick (a tick
  // is 2-5 ms while anything is in use, for the holders' deaths).
  const bool check_workers = now - last_worker_check_ns_ >= kWorkerCheckNs;
  if (check_workers) last_worker_check_ns_ = now;
  bool busy = false, in_use = false;
  std::uint32_t live = 0;  // members neither empty nor stopping
  std::vector<std::pair<std::uint64_t, std::uint32_t>> idle;  // (idle since, member) of free members
  for (std::uint32_t m = 0; m < p.max_count; ++m) {
    pool_member* e = h_.member_at(m);
    const std::uint64_t word = e->state.load(std::memory_order_relaxed);
    const std::uint64_t gen = e->generation.load(std::memory_order_relaxed);
    const auto s = static_cast<member_state>(member_state_of(word));
    switch (s) {
      case member_state::empty: rt_.erase(m); continue;
      case member_state::starting:
        busy = true;
        ++live;
        // RM1, RM2 (a remover's removing_v is never 0): stopped, never started.
        if (removing_v != 0) with_member(m, word, gen, "stop", [&](table_txn& t, pool_member*) { stop_member(h_, t, m, member_stop::removed); });
        else handle_starting(m, word, gen, now);
        continue;
      case member_state::stopping: busy = true; handle_stopping(m, word, gen, now); continue;
      case member_state::free:
      case member_state::checking:
      case member_state::in_use: break;
      default: continue;  // garbage: left alone (inspection shows nothing for it)
    }
    ++live;
    if (s == member_state::in_use) in_use = true;
    if (s == member_state::checking) busy = true;
    // A worker that died on its own: its member is replaced (a lease on it becomes stale).
    if (auto v = check_workers || s == member_state::checking ? box_owner(m, gen) : std::optional<owner_view>(owner_view{.alive = true});
        !v || !v->alive) {
      if (now - e->started_ns.load(std::memory_order_relaxed) < kQuickDeathNs) start_failed(now);
      if (with_member(m, word, gen, "stop", [&](table_txn& t, pool_member*) { stop_member(h_, t, m, member_stop::crashed); }))
        log("member " + std::to_string(m) + "'s worker died: replacing it");
      busy = true;
      continue;
    }
    if (removing_v != 0 && (s != member_state::in_use || removing_v == 2)) {
      with_member(m, word, gen, "stop", [&](table_txn& t, pool_member*) { stop_member(h_, t, m, member_stop::removed); });
      busy = true;
      continue;
    }
    if (s == member_state::checking) {
      // A member under a health check is free and idle all the same: a cull
      // considers it in its place (idle since it was given back), or it
      // would stop a member idle for less in its stead.
      // (One it stops as unhealthy is neither idle nor alive any more.)
      if (handle_checking(m, word, gen, now)) --live;
      else idle.emplace_back(e->idle_since_ns.load(std::memory_order_relaxed), m);
      continue;
    }
    if (s != member_state::free) continue;
    // max_lifetime: a free member past it is retired and replaced (P5);
    // seen within kIdleTickNs (a take that finds it first retires it itself).
    if (p.max_lifetime_ms != 0 && now >= member_expiry(h_, m, gen, e->started_ns.load(std::memory_order_relaxed))) {
      if (with_member(m, word, gen, "expire", [&](table_txn& t, pool_member*) { stop_member(h_, t, m, member_stop::expired); }))
        log("member " + std::to_string(m) + " reached its max_lifetime: replacing it");
      --live;
      busy = true;
      continue;
    }
    const std::uint64_t since = e->idle_since_ns.load(std::memory_order_relaxed);
    idle.emplace_back(since, m);
    if (p.health_interval_ms > 0) {
      const std::uint64_t last = std::max(since, e->ping_sent_ns.load(std::memory_order_relaxed));
      if (now - last > std::uint64_t{p.health_interval_ms} * kMs) {
        const std::uint64_t seq = e->ping_seq.load(std::memory_order_relaxed) + 1;
        const std::uint64_t checking = make_member_state(member_state::checking);
        if (with_member(m, word, gen, "check", [&](table_txn& t, pool_member* me) {
              t.write(me->state, checking);
              t.write(me->ping_seq, seq);
              t.write(me->ping_sent_ns, now);
            })) {
          member_rt& r = rt(m, gen);
          if (!r.pinger) {
            if (auto pr = Producer::attach(member_name(m, gen))) r.pinger.emplace(std::move(*pr));
          }
          // A ping that cannot be posted (full box) is not answered: the check fails by its timeout.
          if (r.pinger) (void)r.pinger->post(ping_message(seq), {.lane = 0, .timeout = std::chrono::nanoseconds(0)});
          busy = true;
        }
      }
    }
  }
  // Culling: free members idle longer than cull_after, or (CU) at least as
  // long as an explicit cull asks, longest idle first, down to init_count;
  // and (RC3) free members, longest idle first, while more than a lowered
  // max_count are alive.
  // CU: a pending request (cull_asked's seq not yet in cull_done) is
  // answered after this pass with the number it stopped; one that came in
  // meanwhile has a later seq and is served by the next tick. A supervisor
  // killed before the answer leaves the request pending for its successor,
  // which culls what is still idle enough and answers (a second pass stops
  // nothing the first one did).
  std::uint32_t culled = 0;
  if ((lim.cull_after_ms > 0 || explicit_cull || live > lim.max_count) && removing_v == 0) {
    const std::uint64_t explicit_ns = (asked & 0xFFFFFFFFu) * kMs;  // (a forged value: at most ~49 days, no overflow)
    auto idle_enough = [&](std::uint64_t idle_ns) {
      return (explicit_cull && idle_ns >= explicit_ns) || (lim.cull_after_ms > 0 && idle_ns > std::uint64_t{lim.cull_after_ms} * kMs);
    };
    std::sort(idle.begin(), idle.end());
    for (const auto& entry : idle) {
      const std::uint64_t since = entry.first;
      const std::uint32_t m = entry.second;  // (a named copy: clang 14 does not let a lambda capture a structured binding)
      if (live <= lim.max_count && (live <= lim.init_count || !idle_enough(now - since))) break;
      pool_member* e = h_.member_at(m);
      const std::uint64_t gen = e->generation.load(std::memory_order_relaxed);
      auto cull_if = [&](member_state was) {
        return with_member(m, make_member_state(was), gen, "cull", [&](table_txn& t, pool_member*) { stop_member(h_, t, m, member_stop::culled); });
      };
      if (cull_if(member_state::free) || cull_if(member_state::checking)) {
        log((live > lim.max_count ? "stopping member " + std::to_string(m) + " (above max_count " + std::to_string(lim.max_count) + ")"
                                   : "culling member " + std::to_string(m)) +
            " (idle " + std::to_string((now - since) / kMs) + " ms)");
        --live;
        ++culled;
        busy = true;
      }
    }
  }
  if (explicit_cull) {
    SHMBOX_FAULT("supervisor.before_cull_answer");
    table_txn t(h_, mono_ns() + kTxnWaitNs);
    if (t.locked()) {
      t.write(h_.state()->cull_done, (asked & ~std::uint64_t{0xFFFFFFFFu}) | culled);
      t.commit("culled");
      log("explicit cull: stopped " + std::to_string(culled) + " idle member" + (culled == 1 ? "" : "s"));
    }
  }
  // Replenish: init_count members, and one starting for each waiter that no free or starting member will serve.
  {
    table_txn t(h_, mono_ns() + kTxnWaitNs);
    if (t.locked()) {
      if (removal_ == 0 && t.read(h_.state()->removing) == 0) {  // RM2: a remover never replenishes
        table_counts n = count_table(h_, t);
        auto& starting = n.by_state[static_cast<std::uint32_t>(member_state::starting)];
        // (request_start writes 10 words: a section commits before its journal would overflow)
        auto start_one = [&] {
          if (t.room() < 12) t.commit("replenish");
          if (!request_start(h_, t)) return false;
          ++n.members;
          ++starting;
          busy = true;
          return true;
        };
        const pool_limits now_lim = live_limits(h_, t);
        while (n.members < now_lim.max_count && (n.members < now_lim.init_count || n.waiters > starting) && start_one()) {
        }
        // auto_grow_threshold: takes asked (grow_asked moved); pooler starts
        // init_count minus those starting already, within max_count.
        const std::uint64_t asked = t.read(h_.state()->grow_asked);
        if (asked != t.read(h_.state()->grow_done)) {
          std::uint32_t grow = now_lim.init_count > starting ? now_lim.init_count - starting : 0;
          t.write(h_.state()->grow_done, asked);
          while (grow > 0 && n.members < now_lim.max_count && start_one()) {
            t.add(pool_counter::auto_grow_starts);
            --grow;
          }
        }
        // RC3: this tick applied the reconfigure read at its start.
        if (under_lock && t.read(h_.state()->reconf_done) != reconf) {
          if (t.room() < 1) t.commit("replenish");
          t.write(h_.state()->reconf_done, reconf);
        }
        t.commit("replenish");
      } else if (count_table(h_, t).members == 0) {
        done_ = finish_removal();
      }
    }
  }
  if (busy) return kBusyTickNs;
  std::uint64_t sleep = in_use ? kInUseTickNs : kIdleTickNs;
  if (p.health_interval_ms > 0) sleep = std::min<std::uint64_t>(sleep, std::uint64_t{p.health_interval_ms} * kMs / 4 + kMs);
  if (lim.cull_after_ms > 0) sleep = std::min<std::uint64_t>(sleep, std::uint64_t{lim.cull_after_ms} * kMs / 4 + kMs);
  return sleep;
}

result<void> supervisor::run(std::uint64_t deadline) {
  pool_state* st = h_.state();
  h_.stop = o_.stop;  // TL3: a wait for the table ends when we are told to stop
  struct unset_stop {
    pool_handle& h;
    ~unset_stop() { h.stop = nullptr; }
  } unset{h_};
  for (;;) {
    if (o_.stop != nullptr && o_.stop->load()) break;
    if (segment_gone()) {  // E: unlinked from outside (pool rm --now of a wedged or corrupt pool, a person)
      {  // also a standby: the supervisor may be dead
        stop_own_workers();
        // Their boxes, where the table still names them: drained and removed (P3, P4).
        rt_.clear();
        for (std::uint32_t m = 0; m < h_.max_count(); ++m) {
          const pool_member* e = h_.member_at(m);
          const std::uint32_t s = member_state_of(e->state.load(std::memory_order_relaxed));
          if (s != 0 && s <= static_cast<std::uint32_t>(member_state::stopping))
            drain(m, e->generation.load(std::memory_order_relaxed), member_stop::removed);
        }
        log("pool '" + h_.name + "' was removed from outside; supervisor done");
      }
      return {};
    }
    const std::uint64_t now = mono_ns();
    if (now >= deadline)
      return fail(errc::timed_out, "pool '" + h_.name + "': not removed before the timeout (members in use are stopped when they are given back)");
    const std::uint32_t seen = st->work.load();  // seq_cst: before looking at the table
    std::uint64_t sleep = kStandbyTickNs;
    if (!am_supervisor()) {
      const std::uint64_t c = st->supervisor_client.load(std::memory_order_relaxed);
      const bool alive = c < h_.max_clients() &&
                         client_alive(h_, static_cast<std::uint32_t>(c), st->supervisor_key.load(std::memory_order_relaxed));
      if (!alive && first_in_line()) take_over();
      if (!am_supervisor() && !standby_logged_) {
        standby_logged_ = true;
        log("standing by: pool '" + h_.name + "' has a live supervisor (pid " +
            std::to_string(key_pid(st->supervisor_key.load(std::memory_order_relaxed))) + ")");
      }
    }
    if (am_supervisor()) {
      sleep = tick();
      if (done_) {  // E: removed; entries the table could not name (garbage) may still have workers
        stop_own_workers();
        return {};
      }
    }
    futex_wait(&st->work, seen, std::min(deadline, mono_ns() + sleep));
  }
  // Stopped: a standby takes over at once (the members keep running; an init
  // command still running is killed: the standby runs it again, S6a).
  kill_hooks();
  h_.stop = nullptr;  // the resignation below is not interrupted by the stop that asked for it
  if (am_supervisor()) {
    table_txn t(h_, mono_ns() + kTxnWaitNs);
    if (t.locked()) {
      t.write(st->supervisor_key, 0);
      t.write(h_.client_at(static_cast<std::uint32_t>(h_.client))->role, static_cast<std::uint64_t>(pool_role::taker));
      t.commit("resign");
    }
    log("supervisor stopped; the members keep running");
  }
  return {};
}

result<void> run_supervisor(pool_handle& h, const supervise_options& opts, std::uint64_t deadline_ns, std::uint64_t removal) {
  supervisor s(h, opts, removal);
  return s.run(deadline_ns);
}

}  // namespace shmbox::detail
