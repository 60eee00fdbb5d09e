// bench/mech/round_trip.hpp - one run of round trips (ping-pong) between two
// processes over two queues of one mechanism (bench/mech/mech.hpp): the
// pinger A sends a message, waits for the echo and times the pair; the
// echoer B checks every ping and sends it back. Used by rtt.cpp (its METHOD
// says what is measured) and pool.cpp (box-rtt).
#pragma once

#include <signal.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "../harness.hpp"
#include "mech.hpp"

namespace shmbench {

inline constexpr std::int32_t kPinger = 0;  // A: sends pings, measures
inline constexpr std::int32_t kEchoer = 1;  // B: echoes

// ===========================================================================
// The two roles
// ===========================================================================
// Each child has one End (bench/mech/mech.hpp) that sends on one queue and
// receives from the other.

struct RttChild {
  Kind kind{};
  EndCtx end;
  std::int32_t who = kPinger;
  std::uint64_t warmup = 0, count = 0;
  ChildEnds ends;  // its ends of the run's pipes (the "done" barrier is not used)
};

// A: sends pings, times each round trip, reports the run's percentiles.
template <class End>
void pinger(const RttChild& c, End& end) {
  const std::uint64_t total = c.warmup + c.count;
  MessageBuffer msg(0, c.end.size);
  Checker check({total}, c.end.size, "echo");
  const auto on = [&](const unsigned char* p, std::size_t n) { check.on(p, n); };
  std::vector<std::int64_t> ns(c.count, 0);  // allocated and touched before the start
  c.ends.ready_and_wait(kPinger);

  for (std::uint64_t i = 0; i < total; ++i) {
    msg.set_seq(i);
    const auto t0 = bench_clock::now();
    end.send(msg.bytes);
    end.recv(on);  // the echo, checked (zero-copy: in place)
    const auto t1 = bench_clock::now();
    if (i >= c.warmup) ns[i - c.warmup] = std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count();
  }

  std::vector<double> us(ns.size());
  double sum = 0;
  for (std::size_t i = 0; i < ns.size(); ++i) sum += us[i] = static_cast<double>(ns[i]) / 1000.0;
  const std::array<double, 3> p = shmbench::percentiles(us);  // sorts us
  Record r = make_record(rec_kind::result, kPinger, us.size());
  std::copy(p.begin(), p.end(), r.us);
  r.us[3] = us.front();
  r.us[4] = us.back();
  r.us[5] = sum / static_cast<double>(us.size());
  c.ends.send(r);
}

// B: echoes every ping after checking it (a wrong message is never echoed),
// from where it received it (zero-copy: from the ping's slot into a loaned
// pong slot, inside the receive callback).
template <class End>
void echoer(const RttChild& c, End& end) {
  Checker check({c.warmup + c.count}, c.end.size, "ping");
  const auto echo = [&](const unsigned char* p, std::size_t n) {
    check.on(p, n);
    end.send(p);
  };
  c.ends.ready_and_wait(kEchoer);
  while (!check.complete()) end.recv(echo);
  c.ends.send(rec_kind::produced, kEchoer, check.received());  // the number of messages echoed
}

inline void rtt_child_main(const RttChild& c) {
  ::signal(SIGPIPE, SIG_IGN);  // a write to a dead peer's pipe/socket is an error (EPIPE), not a silent death
  with_end(c.kind, c.end, [&](auto& end) { c.who == kPinger ? pinger(c, end) : echoer(c, end); });
}

// ===========================================================================
// The parent: one run
// ===========================================================================

// What one run measures.
struct RoundTrips {
  Kind kind{};
  std::size_t size = 64;  // bytes per message
  shmbox_send send = shmbox_send::post;
  shmbox_recv recv = shmbox_recv::poll;
  std::uint32_t capacity = 1024;  // slots per queue
  long posix_depth = 8;           // POSIX queues
  std::uint64_t count = 0, warmup = 0;
  std::string names;  // the queues are <names>-ping and <names>-pong
  int timeout_s = 120;
  shmbox_box box = shmbox_box::fifo;  // shmbox: the kind of both boxes (common.hpp)
};

// One measured run (harness.hpp, ONE RUN): fresh queues (ping: A -> B, pong:
// B -> A), the pinger and the echoer; the pinger's percentiles.
inline Record run_round_trips(const RoundTrips& cfg) {
  QueueOpts opts;
  opts.capacity = cfg.capacity;
  const std::uint64_t count = cfg.count, warmup = cfg.warmup;
  opts.posix_depth = cfg.posix_depth;
  opts.shmbox_block = false;  // reject: never full here, one message in flight
  opts.socket_pair = true;
  opts.box = cfg.box;
  const std::unique_ptr<Queue> ping = make_queue(cfg.kind, cfg.names + "-ping", cfg.size, opts);
  const std::unique_ptr<Queue> pong = make_queue(cfg.kind, cfg.names + "-pong", cfg.size, opts);
  Run run;  // declared after the queues: children die before they are removed

  for (const std::int32_t who : {kPinger, kEchoer}) {
    RttChild c;
    c.kind = cfg.kind;
    c.end.size = cfg.size;
    c.end.send_mode = cfg.send;
    c.end.recv_mode = cfg.recv;
    (who == kPinger ? ping : pong)->sender(c.end);
    (who == kPinger ? pong : ping)->receiver(c.end);
    c.who = who;
    c.warmup = warmup;
    c.count = count;
    c.ends = run.child_ends();
    // --pin: the echoer on the last CPU, the pinger on the first (by `who`,
    // 0 and 1, they would share one on a 2-CPU machine).
    run.spawn(who == kPinger ? "pinger" : "echoer", who, [c] { rtt_child_main(c); },
              fds_not_of(c.end, {ping.get(), pong.get()}), who == kEchoer ? -1 : 0);
  }
  run.watch(cfg.timeout_s);
  ping->close_fds();  // only the children keep these: EOF on a pipe/socket means the peer is gone
  pong->close_fds();
  run.wait_ready(2);  // both children have opened/attached/mapped everything
  ping->opened();
  pong->opened();
  run.release();
  const Run::Finished f = run.wait_finished(1);  // the echoer's count and the pinger's result
  run.wait_exit();

  const std::uint64_t total = warmup + count;
  if (f.sent != total || f.result.a != count)
    throw bench_failure("count mismatch: echoed " + std::to_string(f.sent) + " of " + std::to_string(total) +
                        ", measured " + std::to_string(f.result.a) + " of " + std::to_string(count));
  ping->verify(total);
  pong->verify(total);
  return f.result;
}

}  // namespace shmbench
