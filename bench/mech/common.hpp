// bench/mech/common.hpp - what every mechanism of bench/mech/ has: the
// parent's Queue (one direction, created fresh for a run) and the EndCtx a
// child opens its End from. See bench/mech/mech.hpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace shmbench {

// How a shmbox end sends and receives (the benchmarks' shmbox-* rows; see
// bench/mech/shmbox.hpp). The baselines ignore it.
enum class shmbox_send { post, loan };
// Which kind of box (the shmbox-<kind> rows): a plain FIFO box, a priority
// box (every message at priority 0: FIFO among equals, so the order check
// holds; the store and the heap are paid all the same), a box with a stash
// of 64 entries (nothing is stashed: the cost of the gate), a custom-buffer
// box (a FIFO buffer type registered by every end), a resizable box
// (max_capacity twice the capacity), or a box with a per-producer quota of a
// quarter of its capacity (options::quota: each producer waits, in a block
// box, once it has that many messages waiting).
enum class shmbox_box { fifo, priority, stash, buffer, resizable, quota };
enum class shmbox_recv {
  batch,          // receive_batch of up to `batch` messages, waiting up to 1 s
  in_place,       // receive_in_place of up to `batch`, waiting up to 1 s
  poll,           // try_receive into a reused message; spin_wait while empty
  poll_in_place,  // receive_in_place(fn, 1, 0 ns); spin_wait while empty
  adaptive,       // receive(m, {.timeout = 1 s}): the box's spin, then the futex
  futex,          // receive(m, {.timeout = 1 s, .spin = 0 ns}): sleeps at once
};

// What a child needs to open its end: the queue it sends on and the one it
// receives from (a producer or consumer of the throughput benchmark has one
// of them, a round-trip role both).
struct EndCtx {
  std::size_t size = 0;   // bytes per message
  std::size_t batch = 1;  // the most messages one recv() takes
  std::string tx, rx;     // names of the queues ("": none)
  int tx_fd = -1, rx_fd = -1;  // pipe and socket queues
  shmbox_send send_mode = shmbox_send::post;
  shmbox_recv recv_mode = shmbox_recv::batch;
  // spin ring: one locked read-modify-write per push (spin-ring-locked), the
  // one instruction a claim among several producers cannot do without
  bool locked_push = false;
};

// How the parent makes a queue (make_queue, bench/mech/mech.hpp).
struct QueueOpts {
  std::uint32_t capacity = 1024;  // messages a queue holds (lockfree-spsc: always 1024)
  long posix_depth = 10;          // posix-mq: its depth (the system limits it: fs.mqueue.msg_max)
  bool shmbox_block = true;       // shmbox: policy block, else reject
  bool socket_pair = false;       // unix-socket: a SOCK_SEQPACKET socketpair, else SOCK_DGRAM
  std::uint32_t max_producers = 64;  // shmbox: producer handles attached at once (the box's default: 64)
  shmbox_box box = shmbox_box::fifo;  // shmbox: the kind of box
};

// The parent's side of one queue (one direction) of a run: created fresh,
// removed when the object goes away (also on failure; the signal handler of
// harness.hpp covers the rest).
class Queue {
 public:
  explicit Queue(std::string name) : name_(std::move(name)) {}
  virtual ~Queue() = default;
  Queue(const Queue&) = delete;
  Queue& operator=(const Queue&) = delete;

  // A child that sends on / receives from this queue.
  void sender(EndCtx& c) const { c.tx = name_, c.tx_fd = tx_fd_; }
  void receiver(EndCtx& c) const { c.rx = name_, c.rx_fd = rx_fd_; }
  // The parent closes the descriptors children inherit once every child
  // runs (EOF on a pipe or socket then means that the peer is gone).
  virtual void close_fds() {}
  // Every child has opened the queue (reported "ready").
  virtual void opened() {}
  // After a successful run in which `total` messages went through: what the
  // mechanism itself can confirm (counters, an empty queue).
  virtual void verify(std::uint64_t /*total*/) {}

 protected:
  std::string name_;
  int tx_fd_ = -1, rx_fd_ = -1;

  friend std::vector<int> fds_not_of(const EndCtx& c, std::initializer_list<const Queue*> qs);
};

// The descriptors of the queues `qs` that are not c's own: a child closes them.
inline std::vector<int> fds_not_of(const EndCtx& c, std::initializer_list<const Queue*> qs) {
  std::vector<int> v;
  for (const Queue* q : qs)
    for (int fd : {q->tx_fd_, q->rx_fd_})
      if (fd >= 0 && fd != c.tx_fd && fd != c.rx_fd) v.push_back(fd);
  return v;
}

}  // namespace shmbench
