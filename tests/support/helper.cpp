// tests/support/helper.cpp - shmbox-test-helper: the separate program that multi-process
// tests start (fork + exec) as a producer or as an owner.
//
//   produce NAME ID COUNT [--size B] [--retry] [--no-wait] [--lane L] [--pause-us US]
//       attach, print "ready ENTRY ATTACHED_NS" (Producer::adopt's arguments), wait for a line on stdin (unless --no-wait),
//       post COUNT messages [id, seq, padding], print "done <tallies>".
//       --retry: post the same message again until it is stored.
//       --pause-us: sleep that long after each message (a steady trickle).
//       --max-call-ms: exit 4 ("late: ...") if one post call takes longer.
//       --stop-on-timeout: stop after the first post that timed out.
//       --any-owner: the box may belong to another user.
//       --loan: zero-copy: loan a slot, write the message in place, commit.
//       --abort-every K (with --loan): every K-th message first takes a loan
//         and aborts it, then posts the message with a new loan.
//       --timeout-ms T: the wait of a loan or batch on a full block box (default 100).
//       --batch N: post_batch in chunks of N; what a batch did not store (a
//         suffix) is posted again (--retry) or skipped one message at a time
//         (its outcome tallied). stored_evicted counts as stored here.
//   consume NAME TOTAL IDLE_MS [--batch N] [--lifo] [--in-place | --one | --poll]
//       acquire, print "owned <epoch>", receive until TOTAL messages or
//       IDLE_MS without any, checking every payload against its pattern and
//       (unless --lifo) per-producer order; print a summary. --in-place:
//       receive with receive_in_place (zero-copy); --one: Owner::receive,
//       one message per call; --poll: a try_receive loop.
//   own NAME [--accept-requests] [--fork-child]
//       acquire, print "owned <epoch>", then wait until stdin closes.
//       --fork-child: first fork a child (no exec) that waits for stdin to
//       close too, and print "child <pid>".
//       --accept-requests: accept give-away requests; each line "serve" on
//       stdin makes one try_receive (which serves a pending request) and
//       prints its status (e.g. "empty", or "not-owner" once given away).
//   event-loop NAME [--fd-when-told]
//       acquire, accept give-away requests, arm notify, print "owned <epoch>",
//       then sleep in poll(2) on notify_fd only (up to 60 s per poll): on
//       each readable fd call wait(out, 0); print "notified" (and take what
//       is there, then re-arm) or, once the box was given away, "given-away"
//       and exit 0. --fd-when-told: print "owned <epoch>" before notify_fd()
//       (the process's doorbell is made there), wait for a line on stdin,
//       then take notify_fd, arm, and print "armed".
//   decoy-eventfd NAME
//       acquire, take notify_fd, arm notify, make a second eventfd of its own
//       (a decoy: another box's fd, an application's semaphore), print
//       "owned <notify_fd> <decoy_fd>"; then for each line on stdin print
//       "decoy <count> notify <count>": each eventfd's count, read and reset
//       (0: nothing was written to it), until stdin closes.
//   notify-many FDS NAME...
//       acquires every box; the first FDS are woken through their own
//       notify_fd, the others through one NotifyGroup (tag: the box's index
//       among the NAMEs); arms each (notify) and prints "armed". Then, until
//       stdin closes: for each box whose fd (or tag) is ready, wait(out, 0):
//       "notified" takes its messages, arms it again and prints "woken <index>
//       <messages, ','-separated>"; anything else prints "spurious <index>".
//   post-each MSG PAUSE_US NAME...
//       opens each box (any owner), attaches, posts MSG into it and sleeps
//       PAUSE_US; prints "posted <stored> <of>" (the posts that stored it).
//   notify-then-exit NAME
//       acquire, take notify_fd (the process's doorbell is made), print
//       "owned <epoch>", wait for a line on stdin, drop the Owner handle and
//       _exit(0) (no exit handlers: a forked worker's way out).
//   idle-wait NAME MS
//       acquire, accept give-away requests, print "owned <epoch>", then call
//       wait(out, MS) once with nothing armed (passive); print "event <what
//       it returned>" (none, not-owner, ...) and exit 0.
//   map NAME
//       opens the box (maps it) without any role, prints "mapped", waits until stdin closes.
//   wait-one NAME TIMEOUT_MS
//       acquire, print "owned", block in receive; print "got <n bytes>" or "timeout".
//   serve NAME [--heir|--listen] [--data D] [--two-phase | --one] [--batch N] [--max N] [--idle-ms MS]
//             [--give-to PID] [--give-data D] [--give-when-told] [--hold]
//       becomes the owner (acquire; or enlist as heir / listen and await a
//       transfer, printing "enlisted <position>" first), prints
//       "owner epoch=E reason=R from=P data=D" (--hold: then waits for a line on
//       stdin), then either gives the box away
//       (after a line on stdin with --give-when-told; "gave 1|0", then waits for stdin to close and prints "after <status>"
//       of one more receive), or receives and prints "m <id> <seq> <0|1 redelivered>"
//       per message (two-phase: print and flush a batch, then commit it; --one:
//       Owner::receive, one message per call) until
//       --max messages, --idle-ms without any ("idle"), or not_owner ("not-owner");
//       last line "done <count>".
//   scribble NAME REGION SEED COUNT PAUSE_US
//       maps the segment raw and writes COUNT runs of 1..16 random bytes at
//       random offsets of REGION (header, owner, heirs, lanes, producers, ring,
//       all), pausing PAUSE_US between writes; prints "scribbled <count>".
//   pool-worker [--log PATH]
//       a pool member (the pool's command): PoolMember::from_env(), prints
//       "ready <index> <generation> <pid>", then receives one message at a
//       time: health pings are answered; "crash" kills itself (SIGKILL),
//       "exit" exits 0, "hang" prints "hanging <index> <generation>" and
//       stops receiving (sleeps until killed); anything else is printed as
//       "got <index> <generation> <message>"; when a receive times out
//       (200 ms) and PoolMember::stopped() (its pool is gone, its entry
//       stopped or replaced), prints "stopped <index> <generation>" and
//       exits 0. Every line goes to stdout
//       (the supervisor's) and, with --log, is appended to PATH (one write
//       per line), where tests look for it.
//   pool-take NAME TIMEOUT_MS [--group] [--hold] [--fail] [--post MSG]... [--again]
//       opens pool NAME (--group: takes from group NAME, Pool::take_group),
//       takes a member, prints "took <member> <box> <generation> <worker pid>"
//       or "error <errc name> <explanation>" (exit 3); posts each --post
//       message ("posted <status>"); with --hold waits for a line on stdin;
//       gives it back (ok, or fail with --fail) and prints "returned <status>";
//       --again then gives the same token back once more ("again <status>").
//   pool-churn NAME SEED [--hold-ms MAX] [--fail-every K] [--timeout-ms T]
//       opens pool NAME, prints "churning <pid>", then until stdin closes (or
//       a line arrives): takes a member (waiting up to T ms, default 200),
//       posts one message, holds it 0..MAX ms (default 20, pseudo-random
//       from SEED), gives it back ok, or fail every K-th lease on average
//       (default 5). Last line "done takes=N ok=N fail=N stale=N
//       double=N error=N refused=N" (the give backs' answers, the takes refused).
//   pool-supervise NAME
//       opens pool NAME, prints "supervising <pid>", runs Pool::supervise
//       (printing "log <line>" per event) until stdin closes; then prints
//       "stopped" (or "error ...") and exits 0.
//   prio-produce NAME ID COUNT [--seed S] [--range R] [--function] [--loan-every K] [--lane L] [--timeout-ms T]
//       a producer of a priority box: prints "ready", waits for a line on
//       stdin, posts COUNT messages "ID:SEQ:PRIO" with pseudo-random
//       priorities in [0, R) (--function: computed from PRIO by the handle's
//       priority function instead of given at post; every K-th by a loan),
//       prints "done stored=N full=N dropped=N timeout=N error=N".
//
//   buf-produce NAME ID COUNT (--top-n-distinct N | --equal | --keys K) [--seed S] [--no-register]
//   buf-own NAME
//       a producer and an owner of a custom-buffer box (examples/buffers):
//       see their functions. buf-produce exits 3 when attach fails.
//
//   try-open WHAT NAME
//       one library call on NAME, WHAT: box (Box::open), inspect
//       (Box::inspect), producer (Producer::attach), pool (Pool::open),
//       pool-any (Pool::open with any_owner), inspect-pool (inspect_pool),
//       verify (shmbox::verify); prints "ok" (verify: "ok" or "problems
//       <first problem>") or "error <errc> <explain()>", exits 0 (tests/ownership/planted.cpp
//       runs it under a deadline: a hang is the failure).
//
//   hold-bytes NAME WHAT...
//       what another user of a 0666 box can do (run it under setpriv): takes
//       exclusive OFD locks, through a descriptor of its own, on the bytes
//       WHAT names: owner (the owner record's key), producers (every
//       producer entry), heirs (every heir entry; heirs:N the first N), request (the give-away
//       request), attach (byte 0); prints "held N", holds them until stdin
//       closes.
//
//   forge-reply-box SERVICE VICTIM TEXT
//       issue 53 item 1, as the attacker did it (run it as another user): a
//       Requester of 0666 service SERVICE whose own reply box is then
//       rewritten to policy drop-oldest with dead letters VICTIM and filled
//       with TEXT, then one request asked: a reply would evict TEXT into
//       VICTIM. Prints "asked STATUS" (the reply's wait, 2 s).
//
//   sigbus-outside NAME
//       maps box NAME (the SIGBUS guard is installed, lib/base/bus_guard.hpp),
//       then maps a file of its own (a memfd), truncates it and reads it: it
//       must die of SIGBUS (the guard keeps only faults in box mappings).
//       Exits 1 if it lives. --chain: first installs a SIGBUS handler of its
//       own that chains to the one before it (the guard), as full-screen
//       'shmbox watch' does, and maps the box again (the guard puts itself
//       back on top, chaining to that handler): the two chain to each other.
//
// Exit 0 on success, 1 on a failure it can name, 2 on bad arguments.
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <iterator>
#include <map>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "../../examples/buffers/dedupe.hpp"
#include "../../examples/buffers/top_n.hpp"
#include "segment/layout.hpp"
#include "segment/liveness.hpp"
#include "segment/segment.hpp"
#include "shmbox/shmbox.hpp"

namespace {

// Bytes 16.. of every message are a pattern of (id, seq): a torn or mixed-up
// payload does not match it.
char pattern_byte(std::uint64_t id, std::uint64_t seq, std::size_t i) {
  return static_cast<char>((id * 131 + seq * 7 + i) & 0xFF);
}

int usage() {
  std::fprintf(stderr, "usage: shmbox-test-helper produce|consume|own|wait-one|pool-worker|pool-take|pool-supervise ...\n");
  return 2;
}

bool has_flag(int argc, char** argv, const char* flag) {
  for (int i = 0; i < argc; ++i)
    if (std::strcmp(argv[i], flag) == 0) return true;
  return false;
}

long flag_value(int argc, char** argv, const char* flag, long fallback) {
  for (int i = 0; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], flag) == 0) return std::strtol(argv[i + 1], nullptr, 10);
  return fallback;
}

int produce(int argc, char** argv) {
  if (argc < 5) return usage();
  const std::string name = argv[2];
  const std::uint64_t id = std::strtoull(argv[3], nullptr, 10);
  const std::uint64_t count = std::strtoull(argv[4], nullptr, 10);
  const auto size = static_cast<std::size_t>(flag_value(argc, argv, "--size", 64));
  const bool retry = has_flag(argc, argv, "--retry");
  const auto lane = static_cast<std::uint32_t>(flag_value(argc, argv, "--lane", 0));
  const auto pause_us = static_cast<useconds_t>(flag_value(argc, argv, "--pause-us", 0));
  const long max_call_ms = flag_value(argc, argv, "--max-call-ms", 0);
  const bool stop_on_timeout = has_flag(argc, argv, "--stop-on-timeout");
  auto box = shmbox::Box::open(name, {.any_owner = has_flag(argc, argv, "--any-owner")});
  auto p = box ? shmbox::Producer::attach(*box) : shmbox::result<shmbox::Producer>(box.error());
  if (!p) {
    std::printf("error %s\n", shmbox::explain(p.error()).c_str());
    return 1;
  }
  std::printf("ready %u %llu\n", p->entry_index(), static_cast<unsigned long long>(p->attached_ns()));  // what Producer::adopt needs
  std::fflush(stdout);
  if (!has_flag(argc, argv, "--no-wait")) {
    std::string go;
    std::getline(std::cin, go);
  }
  std::vector<char> buf(std::max<std::size_t>(size, 16), 'x');
  std::map<shmbox::post_status, std::uint64_t> tally;
  const bool use_loan = has_flag(argc, argv, "--loan");
  const long abort_every = flag_value(argc, argv, "--abort-every", 0);
  const auto batch = static_cast<std::size_t>(flag_value(argc, argv, "--batch", 0));
  const auto timeout = std::chrono::milliseconds(flag_value(argc, argv, "--timeout-ms", 100));
  auto fill = [&](std::vector<char>& b, std::uint64_t seq) {
    std::memcpy(b.data(), &id, 8);
    std::memcpy(b.data() + 8, &seq, 8);
    for (std::size_t i = 16; i < size; ++i) b[i] = pattern_byte(id, seq, i);
  };
  std::uint64_t aborted = 0;  // loans taken and aborted (--abort-every)
  std::uint64_t evictions = 0;  // messages this producer's posts evicted or replaced
  auto post_one = [&](std::uint64_t seq) {
    if (!use_loan) return p->post(buf.data(), size, {.lane = lane});
    if (abort_every > 0 && seq % static_cast<std::uint64_t>(abort_every) == 0) {
      shmbox::slot_loan a = p->loan({.lane = lane, .timeout = timeout});
      if (a) {
        std::memset(a.data(), 0xEE, a.capacity());  // scribble: an aborted loan must never be delivered
        a.abort();
        ++aborted;
      }
    }
    shmbox::slot_loan l = p->loan({.lane = lane, .timeout = timeout});
    if (!l) return l.status();
    std::memcpy(l.data(), buf.data(), size);
    return l.commit(size);
  };
  if (batch > 0) {
    // Chunks of `batch` messages through post_batch.
    std::vector<std::vector<char>> bufs(batch, std::vector<char>(std::max<std::size_t>(size, 16)));
    std::vector<std::string_view> views(batch);
    for (std::uint64_t first = 0; first < count; first += batch) {
      const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(batch, count - first));
      for (std::size_t i = 0; i < n; ++i) {
        fill(bufs[i], first + i);
        views[i] = std::string_view(bufs[i].data(), size);
      }
      // Stored messages are always a prefix: the rest is retried (--retry),
      // in order, or skipped over one at a time (its outcome tallied).
      std::span<const std::string_view> left(views.data(), n);
      while (!left.empty()) {
        shmbox::post_status why = shmbox::post_status::stored;
        const std::size_t k = p->post_batch(left, {.lane = lane, .timeout = timeout}, &why);
        tally[shmbox::post_status::stored] += k;
        left = left.subspan(k);
        if (left.empty()) break;
        if (why == shmbox::post_status::error) {
          std::printf("error %s\n", shmbox::explain(p->last_error()).c_str());
          return 1;
        }
        ++tally[why];
        if (!retry) left = left.subspan(1);
      }
      if (pause_us != 0) ::usleep(pause_us);
    }
    std::printf("done stored=%" PRIu64 " evicted=%" PRIu64 " full=%" PRIu64 " dropped=%" PRIu64 " timeout=%" PRIu64
                " too_large=%" PRIu64 "\n",
                tally[shmbox::post_status::stored], tally[shmbox::post_status::stored_evicted],
                tally[shmbox::post_status::full], tally[shmbox::post_status::dropped],
                tally[shmbox::post_status::timeout], tally[shmbox::post_status::too_large]);
    return 0;
  }
  for (std::uint64_t seq = 0; seq < count; ++seq) {
    fill(buf, seq);
    for (;;) {
      const auto t0 = std::chrono::steady_clock::now();
      const shmbox::post_status st = post_one(seq);
      const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0);
      if (max_call_ms > 0 && took.count() > max_call_ms) {
        std::printf("late: one post took %lld ms\n", static_cast<long long>(took.count()));
        return 4;
      }
      ++tally[st];
      evictions += p->last_evicted();
      if (st == shmbox::post_status::error) {
        std::printf("error %s\n", shmbox::explain(p->last_error()).c_str());
        return 1;
      }
      if (shmbox::is_stored(st) || !retry) break;
    }
    if (stop_on_timeout && tally[shmbox::post_status::timeout] != 0) break;
    if (pause_us != 0) ::usleep(pause_us);
  }
  std::printf("done stored=%" PRIu64 " evicted=%" PRIu64 " full=%" PRIu64 " dropped=%" PRIu64 " timeout=%" PRIu64
              " too_large=%" PRIu64 " aborted=%" PRIu64 " evictions=%" PRIu64 " over_quota=%" PRIu64 "\n",
              tally[shmbox::post_status::stored], tally[shmbox::post_status::stored_evicted],
              tally[shmbox::post_status::full], tally[shmbox::post_status::dropped], tally[shmbox::post_status::timeout],
              tally[shmbox::post_status::too_large], aborted, evictions, tally[shmbox::post_status::over_quota]);
  return 0;
}

// Acquires the box as owner; on failure prints "error <why>" and returns nothing.
std::optional<shmbox::Owner> acquire_or_say(const std::string& name) {
  auto o = shmbox::Owner::acquire(name);
  if (!o) {
    std::printf("error %s\n", shmbox::explain(o.error()).c_str());
    std::fflush(stdout);
    return std::nullopt;
  }
  return std::move(*o);
}

int consume(int argc, char** argv) {
  if (argc < 5) return usage();
  const std::string name = argv[2];
  const std::uint64_t total = std::strtoull(argv[3], nullptr, 10);
  const auto idle = std::chrono::milliseconds(std::strtol(argv[4], nullptr, 10));
  const auto batch = static_cast<std::size_t>(flag_value(argc, argv, "--batch", 256));
  auto o = acquire_or_say(name);
  if (!o) return 1;
  std::printf("owned %" PRIu64 "\n", o->epoch());
  std::fflush(stdout);
  std::map<std::uint64_t, std::uint64_t> next;  // producer id -> next expected seq (or more)
  std::map<std::uint64_t, std::uint64_t> per;
  std::map<std::uint64_t, std::vector<bool>> seen;  // exactly-once check that does not rely on order
  std::uint64_t dups = 0;
  const bool lifo = has_flag(argc, argv, "--lifo");  // newest first: order is not checked
  std::uint64_t got = 0, order_errors = 0, redelivered = 0, short_msgs = 0, torn = 0;
  const bool in_place = has_flag(argc, argv, "--in-place");
  auto check = [&](std::string_view data, bool was_redelivered) {
    ++got;
    redelivered += was_redelivered ? 1 : 0;
    if (data.size() < 16) {
      ++short_msgs;
      return;
    }
    std::uint64_t id = 0, seq = 0;
    std::memcpy(&id, data.data(), 8);
    std::memcpy(&seq, data.data() + 8, 8);
    ++per[id];
    for (std::size_t i = 16; i < data.size(); ++i)
      if (data[i] != pattern_byte(id, seq, i)) {
        ++torn;
        break;
      }
    auto& bits = seen[id];
    if (seq < (1u << 24)) {
      if (bits.size() <= seq) bits.resize(seq + 1);
      if (bits[seq]) ++dups;
      bits[seq] = true;
    }
    if (lifo) return;
    auto it = next.find(id);
    if (it != next.end() && seq < it->second) ++order_errors;  // a duplicate or out of order
    next[id] = seq + 1;
  };
  std::vector<shmbox::message> msgs;
  const bool one = has_flag(argc, argv, "--one"), poll = has_flag(argc, argv, "--poll");
  shmbox::message m;
  // --poll: a try_receive loop (yielding while empty), IDLE_MS without a message ends it.
  auto poll_one = [&] {
    const auto until = std::chrono::steady_clock::now() + idle;
    for (;;) {
      const shmbox::recv_status st = o->try_receive(m);
      if (st != shmbox::recv_status::empty) return st;
      if (std::chrono::steady_clock::now() >= until) return shmbox::recv_status::timeout;
      ::sched_yield();
    }
  };
  while (got < total) {
    msgs.clear();
    const shmbox::recv_status st =
        in_place ? o->receive_in_place([&](const shmbox::message_view& v) { check(v.data, v.redelivered); }, {.max = batch, .timeout = idle})
        : poll   ? poll_one()
        : one    ? o->receive(m, {.timeout = idle})
                 : o->receive_batch(msgs, {.max = batch, .timeout = idle});
    if ((one || poll) && st == shmbox::recv_status::ok) check(m.data, m.redelivered);
    if (st == shmbox::recv_status::timeout) break;
    if (st != shmbox::recv_status::ok) {
      std::printf("error %s\n", shmbox::explain(o->last_error()).c_str());
      return 1;
    }
    for (const auto& m : msgs) check(m.data, m.redelivered);
  }
  std::printf("done got=%" PRIu64 " order_errors=%" PRIu64 " redelivered=%" PRIu64 " short=%" PRIu64 " torn=%" PRIu64 " dups=%" PRIu64,
              got, order_errors, redelivered, short_msgs, torn, dups);
  for (const auto& [id, n] : per) std::printf(" p%" PRIu64 "=%" PRIu64, id, n);
  std::printf("\n");
  return 0;
}

int own(int argc, char** argv) {
  if (argc < 3) return usage();
  auto o = acquire_or_say(argv[2]);
  if (!o) return 1;
  if (has_flag(argc, argv, "--accept-requests")) o->accept_give_away_requests(true);
  if (has_flag(argc, argv, "--fork-child")) {
    // A child that inherits every descriptor (no exec) and outlives us:
    // it must not keep the owner's role alive (liveness.hpp L6).
    std::fflush(stdout);
    const pid_t kid = ::fork();
    if (kid < 0) return 1;
    if (kid == 0) {
      std::string ignored;
      while (std::getline(std::cin, ignored)) {
      }
      ::_exit(0);
    }
    std::printf("child %d\n", static_cast<int>(kid));
  }
  std::printf("owned %" PRIu64 "\n", o->epoch());
  std::fflush(stdout);
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line != "serve") continue;
    shmbox::message m;
    std::printf("%s\n", std::string(shmbox::to_string(o->try_receive(m))).c_str());
    std::fflush(stdout);
  }
  return 0;
}

// An owner driven line by line on stdin (the stash tests, and the
// redelivery counts of every kind of box; the example buffer types are
// registered): each command answers one line.
//   read N        read() up to N messages (5 s for the first): "read K d1 d2* ..." (* redelivered)
//   stash-read    stash every message of the last read (a priority box's: with its priority), then commit: "stashed K"
//   commit        commit the last read: "committed"
//   unstash       "unstashed K"
//   recv N T      receive_batch up to N, waiting T ms for the first: "got K d1 d2* ..." (* redelivered)
//   stat          "parked P front F"
// prio-produce BOX ID COUNT [--seed S] [--range R] [--function] [--loan-every K] [--lane L] [--timeout-ms T]:
// posts COUNT messages "ID:SEQ:PRIO" into a priority box, each with a
// pseudo-random priority in [0, R) from (S, ID). --function: the priority
// is not given at post but computed by the handle's priority function from
// the message's PRIO field (actor-ts's priorityFor; a deadline in a test).
// Every K-th message is posted with a loan. Prints "ready", waits for a
// line on stdin, posts, and prints "done stored=N full=N dropped=N timeout=N".
void say(const std::string& line);
std::string errc_name(std::error_code ec);

int prio_produce(int argc, char** argv) {
  if (argc < 5) return usage();
  const std::string id = argv[3];
  const std::uint64_t count = std::strtoull(argv[4], nullptr, 10);
  const auto range = static_cast<std::uint64_t>(flag_value(argc, argv, "--range", 16));
  const auto lane = static_cast<std::uint32_t>(flag_value(argc, argv, "--lane", 0));
  const long loan_every = flag_value(argc, argv, "--loan-every", 0);
  const auto timeout = std::chrono::milliseconds(flag_value(argc, argv, "--timeout-ms", 0));
  std::mt19937_64 rng(static_cast<std::uint64_t>(flag_value(argc, argv, "--seed", 1)) * 1000003u + std::hash<std::string>{}(id));
  auto p = shmbox::Producer::attach(argv[2]);
  if (!p) {
    say("error " + shmbox::explain(p.error()));
    return 1;
  }
  const bool by_function = has_flag(argc, argv, "--function");
  if (by_function)
    p->set_priority_function([](std::string_view m) -> std::int64_t {
      return std::strtoll(std::string(m.substr(m.rfind(':') + 1)).c_str(), nullptr, 10);
    });
  say("ready");
  std::string go;
  std::getline(std::cin, go);
  std::map<shmbox::post_status, std::uint64_t> tally;
  for (std::uint64_t seq = 0; seq < count; ++seq) {
    const auto prio = static_cast<std::int64_t>(rng() % range);
    std::string msg = id;
    msg += ':';
    msg += std::to_string(seq);
    msg += ':';
    msg += std::to_string(prio);
    shmbox::post_options how{.lane = lane, .timeout = timeout};
    if (!by_function) how.priority = prio;
    shmbox::post_status st;
    if (loan_every > 0 && seq % static_cast<std::uint64_t>(loan_every) == 0) {
      shmbox::slot_loan l = p->loan(how);
      st = l.status();
      if (l) {
        std::memcpy(l.data(), msg.data(), msg.size());
        st = l.commit(msg.size());
      }
    } else {
      st = p->post(msg, how);
    }
    ++tally[shmbox::is_stored(st) ? shmbox::post_status::stored : st];
  }
  say("done stored=" + std::to_string(tally[shmbox::post_status::stored]) + " full=" + std::to_string(tally[shmbox::post_status::full]) +
      " dropped=" + std::to_string(tally[shmbox::post_status::dropped]) + " timeout=" + std::to_string(tally[shmbox::post_status::timeout]) +
      " error=" + std::to_string(tally[shmbox::post_status::error]));
  return 0;
}

// buf-produce BOX ID COUNT (--top-n-distinct N | --equal | --keys K) [--seed S] [--no-register]:
// a producer of a custom-buffer box (examples/buffers). Registers both example
// types (not with --no-register: then attach must fail), prints "ready",
// waits for a line on stdin, posts COUNT messages "KEY:ID:SEQ" with no
// timeout limit (block), and prints "done stored=N other=N". KEY:
// --top-n-distinct N: an importance unique across N producers (ID is
// "pINDEX"), in a shuffled order; --equal: 5; --keys K: "kX", X in [0, K).
int buf_produce(int argc, char** argv) {
  if (argc < 5) return usage();
  const std::string id = argv[3];
  const std::uint64_t count = std::strtoull(argv[4], nullptr, 10);
  if (!has_flag(argc, argv, "--no-register")) {
    if (!shmbox_examples::register_top_n() || !shmbox_examples::register_dedupe()) {
      say("error register");
      return 1;
    }
  }
  auto p = shmbox::Producer::attach(argv[2]);
  if (!p) {
    say("error " + errc_name(p.error()) + " " + shmbox::explain(p.error()));
    return 3;
  }
  std::mt19937_64 rng(static_cast<std::uint64_t>(flag_value(argc, argv, "--seed", 1)) * 1000003u + std::hash<std::string>{}(id));
  const long producers = flag_value(argc, argv, "--top-n-distinct", 0);
  const long keys = flag_value(argc, argv, "--keys", 0);
  std::vector<std::uint64_t> order(count);
  for (std::uint64_t i = 0; i < count; ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), rng);
  const long index = std::strtol(id.c_str() + 1, nullptr, 10);
  say("ready");
  std::string go;
  std::getline(std::cin, go);
  std::uint64_t stored = 0, other = 0;
  for (std::uint64_t seq = 0; seq < count; ++seq) {
    std::string msg;
    if (producers > 0)
      msg = std::to_string(order[seq] * static_cast<std::uint64_t>(producers) + static_cast<std::uint64_t>(index));
    else if (keys > 0)
      msg = "k" + std::to_string(rng() % static_cast<std::uint64_t>(keys));
    else
      msg = "5";
    msg += ':';
    msg += id;
    msg += ':';
    msg += std::to_string(seq);
    const shmbox::post_status st = p->post(msg, {.timeout = std::chrono::nanoseconds::max()});
    ++(shmbox::is_stored(st) ? stored : other);
  }
  say("done stored=" + std::to_string(stored) + " other=" + std::to_string(other));
  return 0;
}

// buf-own BOX: the owner of a custom-buffer box (both example types
// registered). Prints "owned EPOCH", then answers lines on stdin: "pump" ->
// "pumped N"; "recv N" -> "got M1,M2,..." (up to N messages, no waiting;
// a redelivered one ends in '*'). Runs until killed or stdin closes.
int buf_own(int argc, char** argv) {
  if (argc < 3) return usage();
  if (!shmbox_examples::register_top_n() || !shmbox_examples::register_dedupe()) {
    say("error register");
    return 1;
  }
  auto o = acquire_or_say(argv[2]);
  if (!o) return 1;
  say("owned " + std::to_string(o->epoch()));
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream in(line);
    std::string cmd;
    std::size_t n = 0;
    in >> cmd >> n;
    if (cmd == "pump") {
      say("pumped " + std::to_string(o->pump()));
    } else if (cmd == "recv") {
      std::vector<shmbox::message> got;
      o->receive_batch(got, {.max = n, .timeout = std::chrono::nanoseconds(0)});
      std::string out = "got ";
      for (std::size_t i = 0; i < got.size(); ++i) out += (i ? "," : "") + got[i].data + (got[i].redelivered ? "*" : "");
      say(out);
    } else {
      say("error unknown command " + cmd);
    }
  }
  return 0;
}

int stash_owner(int argc, char** argv) {
  if (argc < 3) return usage();
  // (custom-buffer boxes too: the example types, as buf-own)
  if (!shmbox_examples::register_top_n() || !shmbox_examples::register_dedupe()) {
    say("error register");
    return 1;
  }
  auto o = acquire_or_say(argv[2]);
  if (!o) return 1;
  std::printf("owned %" PRIu64 "\n", o->epoch());
  std::fflush(stdout);
  shmbox::batch last;
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream in(line);
    std::string cmd;
    in >> cmd;
    std::string out;
    if (cmd == "read") {
      std::size_t n = 0;
      in >> n;
      last.clear();
      const auto st = o->read(last, {.max = n, .timeout = std::chrono::seconds(5)});
      out = "read " + std::to_string(last.size());
      for (std::size_t i = 0; i < last.size(); ++i) {
        out += ' ';
        out += last[i];
        if (last.redelivered(i)) out += '*';
      }
      if (st == shmbox::recv_status::error) out += " error " + shmbox::explain(o->last_error());
    } else if (cmd == "read-ids") {  // as read, then each message's id (Owner::id_of)
      std::size_t n = 0;
      in >> n;
      last.clear();
      (void)o->read(last, {.max = n, .timeout = std::chrono::seconds(5)});
      out = "ids " + std::to_string(last.size());
      for (std::size_t i = 0; i < last.size(); ++i) {
        out += ' ';
        out += shmbox::to_string(o->id_of(last.lane(i), last.position(i)));
      }
    } else if (cmd == "stash-read") {
      std::size_t k = 0;
      std::string err;
      for (std::size_t i = 0; i < last.size(); ++i) {
        if (o->stash(last[i], last.lane(i), last.priority(i)) == shmbox::recv_status::ok) ++k;
        else err = shmbox::explain(o->last_error());
      }
      const auto st = o->commit();
      out = "stashed " + std::to_string(k) + (st == shmbox::recv_status::ok ? "" : " commit-failed") +
            (err.empty() ? "" : " error " + err);
    } else if (cmd == "commit") {
      out = o->commit() == shmbox::recv_status::ok ? "committed" : "commit-failed";
    } else if (cmd == "unstash") {
      out = "unstashed " + std::to_string(o->unstash_all());
    } else if (cmd == "recv") {
      std::size_t n = 0;
      long ms = 0;
      in >> n >> ms;
      std::vector<shmbox::message> got;
      const auto st = o->receive_batch(got, {.max = n, .timeout = std::chrono::milliseconds(ms)});
      out = "got " + std::to_string(got.size());
      for (const auto& m : got) {
        out += ' ';
        out += m.data;
        if (m.redelivered) out += '*';
      }
      if (st == shmbox::recv_status::error) out += " error " + shmbox::explain(o->last_error());
    } else if (cmd == "deliver-posting") {
      // A delivery of up to N whose filter, at the first message it sees,
      // posts "late" (priority P) into the box: a message published while
      // the owner's take is under way (a priority box's THE IN-ORDER RUN, R5).
      std::size_t n = 0;
      std::int64_t prio = 0;
      in >> n >> prio;
      auto p = shmbox::Producer::attach(argv[2]);
      bool posted = false;
      const shmbox::filter_fn post_once = [&](std::string&) {
        if (!posted && p) posted = p->post("late", {.priority = prio}) == shmbox::post_status::stored;
        return shmbox::filter_verdict::deliver;
      };
      shmbox::delivery d;
      const auto st = o->deliver(d, n, post_once);
      out = std::string(posted ? "posted" : "not-posted") + " delivered " + std::to_string(d.count);
      for (std::size_t i = 0; i < d.count; ++i) {
        out += ' ';
        out += std::string(d.messages[i]);
      }
      if (st == shmbox::recv_status::error) out += " error " + shmbox::explain(o->last_error());
    } else if (cmd == "stat") {
      out = "parked " + std::to_string(o->stashed()) + " front " + std::to_string(o->unstashed_waiting());
    } else {
      out = "unknown " + cmd;
    }
    std::printf("%s\n", out.c_str());
    std::fflush(stdout);
  }
  return 0;
}

int idle_wait(int argc, char** argv) {
  if (argc < 4) return usage();
  auto o = acquire_or_say(argv[2]);
  if (!o) return 1;
  o->accept_give_away_requests(true);
  std::printf("owned %" PRIu64 "\n", o->epoch());
  std::fflush(stdout);
  shmbox::delivery d;
  const shmbox::owner_event ev = o->wait(d, std::chrono::milliseconds(std::strtol(argv[3], nullptr, 10)));
  const char* names[] = {"none", "notified", "delivered", "not-owner", "error"};
  std::printf("event %s\n", names[static_cast<int>(ev)]);
  return 0;
}

int event_loop(int argc, char** argv) {
  if (argc < 3) return usage();
  auto o = acquire_or_say(argv[2]);
  if (!o) return 1;
  o->accept_give_away_requests(true);
  const bool when_told = has_flag(argc, argv, "--fd-when-told");
  if (when_told) {
    std::printf("owned %" PRIu64 "\n", o->epoch());
    std::fflush(stdout);
    std::string go;
    std::getline(std::cin, go);
  }
  const int fd = o->notify_fd();
  if (fd < 0) {
    std::printf("error %s\n", shmbox::explain(o->last_error()).c_str());
    return 1;
  }
  o->notify();
  std::printf(when_told ? "armed\n" : "owned %" PRIu64 "\n", o->epoch());
  std::fflush(stdout);
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    const int r = ::poll(&p, 1, 60'000);
    if (r == 0) {
      std::printf("poll timeout\n");
      return 1;
    }
    if (r < 0) continue;  // EINTR
    shmbox::delivery d;
    const shmbox::owner_event ev = o->wait(d, std::chrono::nanoseconds(0));
    if (ev == shmbox::owner_event::not_owner) {
      std::printf("given-away\n");
      return 0;
    }
    if (ev == shmbox::owner_event::notified) {
      std::printf("notified\n");
      std::fflush(stdout);
      std::vector<shmbox::message> got;
      o->receive_batch(got, {.max = 1024, .timeout = std::chrono::nanoseconds(0)});
      o->notify();
    }
  }
}

int decoy_eventfd(int argc, char** argv) {
  if (argc < 3) return usage();
  auto o = acquire_or_say(argv[2]);
  if (!o) return 1;
  const int fd = o->notify_fd();
  if (fd < 0) {
    std::printf("error %s\n", shmbox::explain(o->last_error()).c_str());
    return 1;
  }
  o->notify();
  const int decoy = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (decoy < 0) return 1;
  std::printf("owned %d %d\n", fd, decoy);
  std::fflush(stdout);
  const auto count = [](int f) {
    std::uint64_t n = 0;
    return ::read(f, &n, sizeof n) == static_cast<ssize_t>(sizeof n) ? n : 0;
  };
  std::string line;
  while (std::getline(std::cin, line)) {
    const std::uint64_t d = count(decoy);
    std::printf("decoy %" PRIu64 " notify %" PRIu64 "\n", d, count(fd));
    std::fflush(stdout);
  }
  return 0;
}

int notify_many(int argc, char** argv) {
  if (argc < 4) return usage();
  const auto fds = static_cast<std::size_t>(std::strtoul(argv[2], nullptr, 10));
  std::vector<shmbox::Owner> owners;
  auto group = shmbox::NotifyGroup::create();
  if (!group) return 1;
  std::vector<pollfd> polled{{group->fd(), POLLIN, 0}, {0, POLLIN, 0}};  // the group, stdin, then each notify_fd
  for (int i = 3; i < argc; ++i) {
    auto o = acquire_or_say(argv[i]);
    if (!o) return 1;
    owners.push_back(std::move(*o));
    const std::size_t index = owners.size() - 1;
    if (index < fds) {
      const int fd = owners.back().notify_fd();
      if (fd < 0) return 1;
      polled.push_back({fd, POLLIN, 0});
    } else if (!owners.back().join(*group, index)) {
      return 1;
    }
    owners.back().notify();
  }
  std::printf("armed\n");
  std::fflush(stdout);
  auto look = [&](std::size_t index) {
    shmbox::delivery d;
    if (owners[index].wait(d, std::chrono::nanoseconds(0)) != shmbox::owner_event::notified) {
      std::printf("spurious %zu\n", index);
      return;
    }
    std::string got;
    shmbox::message m;
    while (owners[index].try_receive(m) == shmbox::recv_status::ok) got += (got.empty() ? "" : ",") + m.data;
    owners[index].notify();  // armed again before it says so
    std::printf("woken %zu %s\n", index, got.c_str());
  };
  for (;;) {
    for (pollfd& p : polled) p.revents = 0;
    if (::poll(polled.data(), polled.size(), 60'000) <= 0) continue;
    if (polled[1].revents != 0) {
      char c;
      if (::read(0, &c, 1) <= 0) return 0;  // stdin closed
    }
    if (polled[0].revents != 0) {
      std::vector<std::uint64_t> tags;
      group->ready(tags);
      for (const std::uint64_t t : tags)
        if (t < owners.size()) look(t);
    }
    for (std::size_t i = 2; i < polled.size(); ++i)
      if (polled[i].revents != 0) look(i - 2);
    std::fflush(stdout);
  }
}

int post_each(int argc, char** argv) {
  if (argc < 5) return usage();
  const std::string msg = argv[2];
  const auto pause_us = static_cast<useconds_t>(std::strtoul(argv[3], nullptr, 10));
  int stored = 0;
  for (int i = 4; i < argc; ++i) {
    auto box = shmbox::Box::open(argv[i], {.any_owner = true});
    auto p = box ? shmbox::Producer::attach(*box) : shmbox::result<shmbox::Producer>(box.error());
    if (!p) {
      std::printf("error %s %s\n", argv[i], shmbox::explain(p.error()).c_str());
      continue;
    }
    if (p->post(msg) == shmbox::post_status::stored) ++stored;
    if (pause_us != 0) ::usleep(pause_us);
  }
  std::printf("posted %d %d\n", stored, argc - 4);
  return 0;
}

int notify_then_exit(int argc, char** argv) {
  if (argc < 3) return usage();
  auto o = acquire_or_say(argv[2]);
  if (!o) return 1;
  if (o->notify_fd() < 0) {
    std::printf("error %s\n", shmbox::explain(o->last_error()).c_str());
    return 1;
  }
  std::printf("owned %" PRIu64 "\n", o->epoch());
  std::fflush(stdout);
  std::string line;
  std::getline(std::cin, line);
  o.reset();
  ::_exit(0);
}

int wait_one(int argc, char** argv) {
  if (argc < 4) return usage();
  auto o = acquire_or_say(argv[2]);
  if (!o) return 1;
  std::printf("owned %" PRIu64 "\n", o->epoch());
  std::fflush(stdout);
  shmbox::message m;
  const auto st = o->receive(m, {.timeout = std::chrono::milliseconds(std::strtol(argv[3], nullptr, 10))});
  if (st == shmbox::recv_status::ok) std::printf("got %s\n", m.data.c_str());
  else std::printf("%s\n", std::string(shmbox::to_string(st)).c_str());
  return 0;
}

std::string flag_string(int argc, char** argv, const char* flag, const char* fallback) {
  for (int i = 0; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], flag) == 0) return argv[i + 1];
  return fallback;
}

void say(const std::string& line) {
  std::string l = line + "\n";
  // One write per line: a process killed mid-run never leaves half a line.
  [[maybe_unused]] const ssize_t n = ::write(1, l.data(), l.size());
}

int map_only(int argc, char** argv) {
  if (argc < 3) return usage();
  auto box = shmbox::Box::open(argv[2]);
  if (!box) {
    say("error " + shmbox::explain(box.error()));
    return 1;
  }
  say("mapped");
  std::string line;
  while (std::getline(std::cin, line)) {
  }
  return 0;
}

int hold_bytes(int argc, char** argv) {
  if (argc < 4) return usage();
  auto m = shmbox::detail::open_segment(argv[2], true, true);
  if (!m) {
    say("error " + shmbox::explain(m.error()));
    return 1;
  }
  const int fd = ::open(("/dev/shm/shmbox." + std::string(argv[2])).c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    say(std::string("error open: ") + std::strerror(errno));
    return 1;
  }
  std::vector<std::uint64_t> bytes;
  for (int a = 3; a < argc; ++a) {
    const std::string what = argv[a];
    if (what == "owner") bytes.push_back(shmbox::detail::owner_byte(**m));
    if (what == "request") bytes.push_back(shmbox::detail::request_byte(**m));
    if (what == "attach") bytes.push_back(shmbox::detail::kAttachByte);
    if (what == "producers")
      for (std::uint32_t i = 0; i < (*m)->max_producers(); ++i) bytes.push_back(shmbox::detail::producer_byte(**m, i));
    if (what == "heirs")
      for (std::uint32_t i = 0; i < shmbox::detail::kHeirSlots; ++i) bytes.push_back(shmbox::detail::heir_byte(**m, i));
    if (what.rfind("heirs:", 0) == 0)  // heirs:N, the first N heir entries
      for (std::uint32_t i = 0; i < std::min<std::uint32_t>(shmbox::detail::kHeirSlots, std::stoul(what.substr(6))); ++i)
        bytes.push_back(shmbox::detail::heir_byte(**m, i));
  }
  std::size_t held = 0;
  for (const std::uint64_t b : bytes) held += shmbox::detail::try_lock_byte(fd, b, true) ? 1 : 0;
  m->reset();  // our mapping's attach lock goes; the locks stay with `fd`
  say("held " + std::to_string(held));
  std::string line;
  while (std::getline(std::cin, line)) {
  }
  return 0;
}

int forge_reply_box(int argc, char** argv) {
  if (argc < 5) return usage();
  const std::string service = argv[2], victim = argv[3], text = argv[4];
  auto rq = shmbox::Requester::attach(service, {.max_outstanding = 1, .any_owner = true});
  if (!rq) {
    say("error " + shmbox::explain(rq.error()));
    return 1;
  }
  auto names = shmbox::Box::list();
  std::string reply_box;
  for (const std::string& n : names ? *names : std::vector<std::string>{})
    if (n.rfind(service + ".r", 0) == 0 && n.size() > service.size() + 2) {
      struct stat st {};
      if (::stat(("/dev/shm/shmbox." + n).c_str(), &st) == 0 && st.st_uid == ::geteuid()) reply_box = n;
    }
  auto m = shmbox::detail::open_segment(reply_box, false);
  if (!m) {
    say("error " + shmbox::explain(m.error()));
    return 1;
  }
  auto* lane = reinterpret_cast<shmbox::detail::lane_header*>((*m)->base + (*m)->geo.lanes_offset);
  lane->policy = static_cast<std::uint32_t>(shmbox::policy::drop_oldest);
  auto* cfg = reinterpret_cast<shmbox::detail::box_config*>((*m)->base + (*m)->geo.config_offset);
  std::memcpy(cfg->dead_letters, victim.data(), victim.size());
  cfg->dead_letters_len = static_cast<std::uint32_t>(victim.size());
  {
    auto box = shmbox::Box::open(reply_box);
    auto p = box ? shmbox::Producer::attach(*box) : shmbox::result<shmbox::Producer>(box.error());
    if (!p || !shmbox::is_stored(p->post(text))) {
      say("error cannot fill the reply box");
      return 1;
    }
  }
  const auto a = rq->ask("forged");
  std::string out;
  const shmbox::reply_status st = a ? rq->wait(a.ticket, out, std::chrono::seconds(2)) : shmbox::reply_status::error;
  say("asked " + std::string(shmbox::to_string(st)));
  return 0;
}

struct sigaction g_bus_chained {};
// Chains to the handler before it; if that did not rescue the fault (it put
// back the default action), the default action.
void chaining_bus(int sig, siginfo_t* info, void* context) {
  const struct sigaction before = g_bus_chained;
  if ((before.sa_flags & SA_SIGINFO) != 0 && before.sa_sigaction != nullptr) {
    before.sa_sigaction(sig, info, context);
    struct sigaction now {};
    if (::sigaction(SIGBUS, nullptr, &now) == 0 && now.sa_handler != SIG_DFL) return;
  }
  ::signal(sig, SIG_DFL);
}

int sigbus_outside(int argc, char** argv) {
  if (argc < 3) return usage();
  auto box = shmbox::Box::open(argv[2]);
  if (!box) {
    say("error " + shmbox::explain(box.error()));
    return 1;
  }
  std::optional<shmbox::Box> again;
  if (has_flag(argc, argv, "--chain")) {
    struct sigaction sa {};
    sa.sa_sigaction = chaining_bus;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGBUS, &sa, &g_bus_chained);
    auto b = shmbox::Box::open(argv[2]);  // the guard installs itself again, on top
    if (!b) return 1;
    again.emplace(std::move(*b));
  }
  const int fd = ::memfd_create("sigbus-outside", MFD_CLOEXEC);
  if (fd < 0 || ::ftruncate(fd, 65536) != 0) return 1;
  void* p = ::mmap(nullptr, 65536, PROT_READ, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED || ::ftruncate(fd, 0) != 0) return 1;
  const volatile char* c = static_cast<const char*>(p);
  say("read " + std::to_string(static_cast<int>(c[4096])));  // SIGBUS here
  return 1;
}

int serve(int argc, char** argv) {
  if (argc < 3) return usage();
  const std::string name = argv[2];
  const std::string data = flag_string(argc, argv, "--data", "");
  const bool two_phase = has_flag(argc, argv, "--two-phase");
  const bool one = has_flag(argc, argv, "--one");  // Owner::receive, one message per call
  const auto batch_max = static_cast<std::size_t>(flag_value(argc, argv, "--batch", 64));
  const long max = flag_value(argc, argv, "--max", -1);
  const auto idle = std::chrono::milliseconds(flag_value(argc, argv, "--idle-ms", 2000));
  const long give_to = flag_value(argc, argv, "--give-to", 0);
  shmbox::result<shmbox::Owner> owner = shmbox::errc::not_owner;
  if (has_flag(argc, argv, "--heir") || has_flag(argc, argv, "--listen")) {
    auto heir = has_flag(argc, argv, "--heir") ? shmbox::Heir::enlist(name, data) : shmbox::Heir::listen(name);
    if (!heir) {
      say("error " + shmbox::explain(heir.error()));
      return 1;
    }
    say("enlisted " + std::to_string(heir->position()));
    owner = heir->await_transfer(std::chrono::seconds(60));
  } else {
    owner = shmbox::Owner::acquire(name);
  }
  if (!owner) {
    say("error " + shmbox::explain(owner.error()));
    return 1;
  }
  const shmbox::transfer_record& t = owner->transfer();
  say("owner epoch=" + std::to_string(owner->epoch()) + " reason=" + std::string(shmbox::to_string(t.reason)) +
      " from=" + std::to_string(t.from_pid) + " data=" + t.data);
  if (has_flag(argc, argv, "--hold")) {  // owns the box, receives only after a line on stdin
    std::string go;
    std::getline(std::cin, go);
  }
  if (give_to != 0) {
    if (has_flag(argc, argv, "--give-when-told")) {
      std::string go;
      std::getline(std::cin, go);
    }
    const bool gave = owner->give_away(static_cast<std::uint32_t>(give_to), flag_string(argc, argv, "--give-data", ""),
                                       std::chrono::seconds(10));
    say(std::string("gave ") + (gave ? "1" : "0"));
    std::string line;
    while (std::getline(std::cin, line)) {
    }
    shmbox::message m;
    say("after " + std::string(shmbox::to_string(owner->try_receive(m))));
    return 0;
  }
  long count = 0;
  shmbox::batch b;
  for (;;) {
    b.clear();
    const std::size_t want = max < 0 ? batch_max : std::min<std::size_t>(batch_max, static_cast<std::size_t>(max - count));
    if (want == 0) break;
    shmbox::message one_msg;
    const shmbox::recv_status st = one         ? owner->receive(one_msg, {.timeout = idle})
                                   : two_phase ? owner->read(b, {.max = want, .timeout = idle})
                                               : owner->receive_batch(b, {.max = want, .timeout = idle});
    if (st == shmbox::recv_status::timeout) {
      say("idle");
      break;
    }
    if (st == shmbox::recv_status::not_owner) {
      say("not-owner");
      break;
    }
    if (st != shmbox::recv_status::ok) {
      say("error " + shmbox::explain(owner->last_error()));
      return 1;
    }
    std::string lines;
    auto line_of = [&](std::string_view data, bool redelivered) {
      std::uint64_t id = 0, seq = 0;
      if (data.size() >= 16) {
        std::memcpy(&id, data.data(), 8);
        std::memcpy(&seq, data.data() + 8, 8);
      }
      lines += "m " + std::to_string(id) + " " + std::to_string(seq) + (redelivered ? " 1\n" : " 0\n");
    };
    if (one) line_of(one_msg.data, one_msg.redelivered);
    for (std::size_t i = 0; i < b.size(); ++i) line_of(b[i], b.redelivered(i));
    // Printed (one write) before the commit: a kill between the two leaves
    // these messages uncommitted, so the next owner gets them again, flagged.
    [[maybe_unused]] const ssize_t n = ::write(1, lines.data(), lines.size());
    if (two_phase && owner->commit() != shmbox::recv_status::ok) {
      say("not-owner");
      break;
    }
    count += one ? 1 : static_cast<long>(b.size());
  }
  say("done " + std::to_string(count));
  return 0;
}

int scribble(int argc, char** argv) {
  if (argc < 7) return usage();
  const std::string path = std::string("/shmbox.") + argv[2], region = argv[3];
  std::mt19937_64 rng(std::strtoull(argv[4], nullptr, 10));
  const long count = std::strtol(argv[5], nullptr, 10), pause_us = std::strtol(argv[6], nullptr, 10);
  const int fd = ::shm_open(path.c_str(), O_RDWR, 0);
  struct stat st {};
  if (fd < 0 || ::fstat(fd, &st) != 0 || st.st_size < static_cast<off_t>(sizeof(shmbox::detail::segment_header))) {
    say("error cannot open " + path);
    return 1;
  }
  const auto size = static_cast<std::size_t>(st.st_size);
  auto* base = static_cast<unsigned char*>(::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  ::close(fd);
  if (base == MAP_FAILED) return 1;
  // The regions, from the header as it is now (before we scribble on it).
  using H = shmbox::detail::segment_header;
  struct {
    std::uint64_t owner_offset, heirs_offset, lanes_offset, producers_offset;
    std::uint32_t max_producers, producer_stride;
  } h{};
  std::memcpy(&h.owner_offset, base + offsetof(H, owner_offset), 8);
  std::memcpy(&h.heirs_offset, base + offsetof(H, heirs_offset), 8);
  std::memcpy(&h.lanes_offset, base + offsetof(H, lanes_offset), 8);
  std::memcpy(&h.producers_offset, base + offsetof(H, producers_offset), 8);
  std::memcpy(&h.max_producers, base + offsetof(H, max_producers), 4);
  std::memcpy(&h.producer_stride, base + offsetof(H, producer_stride), 4);
  auto clamp = [&](std::uint64_t v) { return std::min<std::uint64_t>(v, size); };
  std::uint64_t lo = 0, hi = size;
  if (region == "header") hi = sizeof(H);
  else if (region == "owner") lo = clamp(h.owner_offset), hi = clamp(h.heirs_offset);
  else if (region == "heirs") lo = clamp(h.heirs_offset), hi = clamp(h.lanes_offset);
  else if (region == "lanes") lo = clamp(h.lanes_offset), hi = clamp(h.producers_offset);
  else if (region == "producers") lo = clamp(h.producers_offset), hi = clamp(h.producers_offset + std::uint64_t{h.max_producers} * h.producer_stride);
  else if (region == "ring") lo = clamp(h.producers_offset + std::uint64_t{h.max_producers} * h.producer_stride);
  else if (region != "all") return usage();
  if (hi <= lo) {
    say("error empty region");
    return 1;
  }
  long n = 0;
  for (; n < count; ++n) {
    const std::uint64_t at = lo + rng() % (hi - lo);
    const std::uint64_t len = std::min<std::uint64_t>(1 + rng() % 16, hi - at);
    for (std::uint64_t i = 0; i < len; ++i) base[at + i] = static_cast<unsigned char>(rng());
    if (pause_us > 0) ::usleep(static_cast<useconds_t>(pause_us));
  }
  ::munmap(base, size);
  say("scribbled " + std::to_string(n));
  return 0;
}


// The enumerator's name of a shmbox error ("no_members_at_capacity"), for
// tests that compare it; other categories: "system".
std::string errc_name(std::error_code ec) {
  if (ec.category() != shmbox::category()) return "system";
  static const char* const names[] = {
      "ok", "invalid_name", "invalid_argument", "exists", "not_found", "permission_denied", "no_space",
      "too_large", "not_a_box", "version_mismatch", "truncated", "corrupt", "incomplete", "not_owner",
      "already_owner", "producer_table_full", "heir_table_full", "timed_out", "system_error", "refused",
      "no_members_starting", "no_members_at_capacity", "no_members_queue_full", "pool_removed", "pool_clients_full", "stash_full",
      "buffer_unknown", "buffer_broken", "inherited_handle"};
  const int v = ec.value();
  return v >= 0 && v < static_cast<int>(std::size(names)) ? names[v] : "errc-" + std::to_string(v);
}

int pool_worker(int argc, char** argv) {
  const std::string log_path = flag_string(argc, argv, "--log", "");
  const int log_fd = log_path.empty() ? -1 : ::open(log_path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
  auto tell = [log_fd](const std::string& line) {
    // The log first: stdout is the supervisor's, and a dead supervisor's pipe raises SIGPIPE.
    if (log_fd >= 0) {
      const std::string l = line + "\n";
      [[maybe_unused]] const ssize_t n = ::write(log_fd, l.data(), l.size());
    }
    say(line);
  };
  auto member = shmbox::PoolMember::from_env();
  if (!member) {
    tell("error " + errc_name(member.error()) + " " + shmbox::explain(member.error()));
    return 1;
  }
  const char* gen_env = std::getenv("SHMBOX_MEMBER_GENERATION");
  const std::string who = std::to_string(member->index()) + " " + (gen_env != nullptr ? gen_env : "?");
  tell("ready " + who + " " + std::to_string(::getpid()));
  shmbox::Owner& owner = member->owner();
  for (;;) {
    shmbox::message m;
    const shmbox::recv_status st = owner.receive(m, {.timeout = std::chrono::milliseconds(200)});
    if (st == shmbox::recv_status::timeout) {
      if (member->stopped()) {  // the pool is gone, or this member was stopped or replaced
        tell("stopped " + who);
        return 0;
      }
      continue;
    }
    if (st == shmbox::recv_status::not_owner) {
      tell("not-owner " + who);
      return 0;
    }
    if (st != shmbox::recv_status::ok) {
      tell("error " + shmbox::explain(owner.last_error()));
      return 1;
    }
    if (m.lane == 0 && member->answer_ping(m.data)) continue;
    if (m.data == "crash") {
      ::kill(::getpid(), SIGKILL);
      ::pause();
    }
    if (m.data == "exit") return 0;
    if (m.data == "hang") {
      tell("hanging " + who);
      for (;;) ::pause();  // until stopped (SIGTERM, SIGKILL)
    }
    tell("got " + who + " " + m.data);
  }
}

int pool_take(int argc, char** argv) {
  if (argc < 4) return usage();
  const std::string name = argv[2];
  const auto timeout = std::chrono::milliseconds(std::strtol(argv[3], nullptr, 10));
  std::optional<shmbox::Pool> pool;
  shmbox::result<shmbox::Lease> lease = shmbox::errc::not_found;
  if (has_flag(argc, argv, "--group")) {
    lease = shmbox::Pool::take_group(name, timeout);
  } else {
    auto p = shmbox::Pool::open(name);
    if (!p) {
      say("error " + errc_name(p.error()) + " " + shmbox::explain(p.error()));
      return 3;
    }
    pool.emplace(std::move(*p));
    lease = pool->take(timeout);
  }
  if (!lease) {
    say("error " + errc_name(lease.error()) + " " + shmbox::explain(lease.error()));
    return 3;
  }
  const shmbox::lease_token t = lease->token();
  say("took " + std::to_string(t.member) + " " + lease->box() + " " + std::to_string(t.generation) + " " +
      std::to_string(lease->worker_pid()));
  for (int i = 2; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--post") == 0)
      say("posted " + std::string(shmbox::to_string(lease->producer().post(argv[i + 1]))));
  if (has_flag(argc, argv, "--hold")) {
    std::string go;
    std::getline(std::cin, go);
  }
  const shmbox::outcome o = has_flag(argc, argv, "--fail") ? shmbox::outcome::fail : shmbox::outcome::ok;
  say("returned " + std::string(shmbox::to_string(lease->give_back(o))));
  if (has_flag(argc, argv, "--again") && pool) say("again " + std::string(shmbox::to_string(pool->give_back(t, o))));
  return 0;
}

int pool_churn(int argc, char** argv) {
  if (argc < 4) return usage();
  auto pool = shmbox::Pool::open(argv[2]);
  if (!pool) {
    say("error " + errc_name(pool.error()) + " " + shmbox::explain(pool.error()));
    return 3;
  }
  std::minstd_rand rng(static_cast<std::uint32_t>(std::strtoul(argv[3], nullptr, 10)) + 1);
  const long hold_ms = flag_value(argc, argv, "--hold-ms", 20);
  const long fail_every = std::max(1L, flag_value(argc, argv, "--fail-every", 5));
  const auto timeout = std::chrono::milliseconds(flag_value(argc, argv, "--timeout-ms", 200));
  std::uint64_t takes = 0, refused = 0;
  std::map<shmbox::return_status, std::uint64_t> answers;
  say("churning " + std::to_string(::getpid()));
  for (;;) {
    pollfd in{0, POLLIN, 0};
    if (::poll(&in, 1, 0) != 0) break;  // stdin closed (or a line): stop after a whole lease
    auto lease = pool->take(timeout);
    if (!lease) {
      ++refused;
      continue;
    }
    ++takes;
    (void)lease->producer().post("churn", {.timeout = std::chrono::nanoseconds(0)});
    if (hold_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(static_cast<long>(rng() % static_cast<unsigned long>(hold_ms + 1))));
    const bool fail = static_cast<long>(rng() % static_cast<unsigned long>(fail_every)) == 0;
    ++answers[lease->give_back(fail ? shmbox::outcome::fail : shmbox::outcome::ok)];
  }
  auto n = [&](shmbox::return_status s) { return std::to_string(answers[s]); };
  say("done takes=" + std::to_string(takes) + " ok=" + n(shmbox::return_status::ok) + " stale=" + n(shmbox::return_status::stale) +
      " double=" + n(shmbox::return_status::double_return) + " error=" + n(shmbox::return_status::error) +
      " refused=" + std::to_string(refused));
  return 0;
}

int pool_supervise(int argc, char** argv) {
  if (argc < 3) return usage();
  auto pool = shmbox::Pool::open(argv[2]);
  if (!pool) {
    say("error " + errc_name(pool.error()) + " " + shmbox::explain(pool.error()));
    return 3;
  }
  static std::atomic<bool> stop{false};
  std::thread([] {
    std::string line;
    while (std::getline(std::cin, line)) {
    }
    stop = true;
  }).detach();
  say("supervising " + std::to_string(::getpid()));
  const auto r = pool->supervise({.stop = &stop, .log = [](std::string_view line) { say("log " + std::string(line)); }});
  say(r ? "stopped" : "error " + errc_name(r.error()) + " " + shmbox::explain(r.error()));
  std::_Exit(0);  // the stdin thread may still be reading
}

int try_open(int argc, char** argv) {
  if (argc < 4) return usage();
  const std::string what = argv[2], name = argv[3];
  std::error_code ec;
  std::string problem;
  if (what == "box") ec = shmbox::Box::open(name).error();
  else if (what == "inspect") ec = shmbox::Box::inspect(name).error();
  else if (what == "producer") ec = shmbox::Producer::attach(name).error();
  else if (what == "pool") ec = shmbox::Pool::open(name).error();
  else if (what == "pool-any") ec = shmbox::Pool::open(name, {.any_owner = true}).error();
  else if (what == "inspect-pool") ec = shmbox::inspect_pool(name).error();
  else if (what == "verify") {
    auto r = shmbox::verify(name);
    if (!r) ec = r.error();
    else if (!r->ok) problem = r->problems.empty() ? "?" : r->problems.front();
  } else {
    return usage();
  }
  if (ec) say("error " + errc_name(ec) + " " + shmbox::explain(ec));
  else say(problem.empty() ? "ok" : "problems " + problem);
  return 0;
}

}  // namespace

int helper_ask(int argc, char** argv);  // helper_request.cpp
int helper_ask_hold(int argc, char** argv);
int helper_respond(int argc, char** argv);

int main(int argc, char** argv) {
  if (argc < 2) return usage();
  if (std::string(argv[1]) == "try-open") return try_open(argc, argv);
  const std::string cmd = argv[1];
  if (cmd == "ask") return helper_ask(argc, argv);  // helper_request.cpp
  if (cmd == "ask-hold") return helper_ask_hold(argc, argv);
  if (cmd == "respond") return helper_respond(argc, argv);
  if (cmd == "produce") return produce(argc, argv);
  if (cmd == "consume") return consume(argc, argv);
  if (cmd == "own") return own(argc, argv);
  if (cmd == "stash-owner") return stash_owner(argc, argv);
  if (cmd == "prio-produce") return prio_produce(argc, argv);
  if (cmd == "buf-produce") return buf_produce(argc, argv);
  if (cmd == "buf-own") return buf_own(argc, argv);
  if (cmd == "wait-one") return wait_one(argc, argv);
  if (cmd == "event-loop") return event_loop(argc, argv);
  if (cmd == "decoy-eventfd") return decoy_eventfd(argc, argv);
  if (cmd == "post-each") return post_each(argc, argv);
  if (cmd == "notify-many") return notify_many(argc, argv);
  if (cmd == "notify-then-exit") return notify_then_exit(argc, argv);
  if (cmd == "idle-wait") return idle_wait(argc, argv);
  if (cmd == "serve") return serve(argc, argv);
  if (cmd == "scribble") return scribble(argc, argv);
  if (cmd == "map") return map_only(argc, argv);
  if (cmd == "sigbus-outside") return sigbus_outside(argc, argv);
  if (cmd == "hold-bytes") return hold_bytes(argc, argv);
  if (cmd == "forge-reply-box") return forge_reply_box(argc, argv);
  if (cmd == "pool-worker") return pool_worker(argc, argv);
  if (cmd == "pool-take") return pool_take(argc, argv);
  if (cmd == "pool-supervise") return pool_supervise(argc, argv);
  if (cmd == "pool-churn") return pool_churn(argc, argv);
  return usage();
}
