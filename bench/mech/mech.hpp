// bench/mech/mech.hpp - the mechanisms the throughput benchmark
// (throughput.cpp) and the round-trip benchmark (rtt.cpp) measure, one
// implementation of each for both:
//   shmbox          bench/mech/shmbox.hpp (the only place that calls shmbox)
//   spin-ring       the hand-written SPSC spin ring (spin_ring.hpp): the
//                   practical limit of shared memory (single producer);
//                   EndCtx::locked_push adds one locked read-modify-write of
//                   a private line before each push (spin-ring-locked)
//   lockfree-spsc   boost::lockfree::spsc_queue in a Boost.Interprocess managed
//                   segment, busy-polling (single producer)
//   boost-mq        Boost.Interprocess message_queue (blocks while full/empty)
//   posix-mq        POSIX message queue, mq_send / mq_receive (blocking)
//   pipe            a pipe of room for `capacity` messages; every write is one
//                   whole message (<= PIPE_BUF: atomic)
//   unix-socket     a unix socket: SOCK_DGRAM bound in the abstract namespace,
//                   every sender connected to it (throughput: several
//                   producers), or a SOCK_SEQPACKET socketpair per direction
//                   (round trips), one message per send
// A Queue (common.hpp) is the parent's side of one direction, made by
// make_queue(); a child opens its End with with_end(). Every End has:
//   unsigned char* tx_buffer()    where a sender may build its message: send()
//                                 of it copies nothing more (lockfree-spsc)
//   std::uint64_t send(m)         sends the message of size bytes at m; blocks
//                                 (or spins) while full; returns the repeated
//                                 posts (shmbox block boxes; 0 elsewhere)
//   void recv(fn)                 waits for one or more messages (at most
//                                 EndCtx::batch) and calls fn(data, size) for
//                                 each; the data is valid during the call
//   bool idle()                   nothing more has arrived (never waits)
// Blocking mechanisms block, busy-polling ones (spin-ring, lockfree-spsc) spin
// with spin_wait (spin_ring.hpp: the pause hint, sched_yield() after 1024
// failed checks). Every End throws bench_failure on an error.
#pragma once

#include <fcntl.h>
#include <mqueue.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "../harness.hpp"
#include "../spin_ring.hpp"
#include "common.hpp"
#include "shmbox.hpp"

#if defined(SHMBOX_HAVE_BOOST)
#include <boost/interprocess/exceptions.hpp>
#include <boost/interprocess/ipc/message_queue.hpp>
#include <boost/interprocess/managed_shared_memory.hpp>
#include <boost/lockfree/spsc_queue.hpp>
#endif

namespace shmbench {

enum class Kind { shmbox, spin_ring, lockfree_spsc, boost_mq, posix_mq, pipe, unix_socket };

struct KindInfo {
  Kind kind;
  const char* name;  // of its rows (shmbox: the benchmarks name its variants)
  const char* tag;   // in the names of its queues
  bool needs_boost;
};
inline constexpr KindInfo kKinds[] = {  // in the order of Kind
    {Kind::shmbox, "shmbox", "box", false},
    {Kind::spin_ring, "spin-ring", "ring", false},
    {Kind::lockfree_spsc, "lockfree-spsc", "spsc", true},
    {Kind::boost_mq, "boost-mq", "bmq", true},
    {Kind::posix_mq, "posix-mq", "pmq", false},
    {Kind::pipe, "pipe", "pipe", false},
    {Kind::unix_socket, "unix-socket", "sock", false},
};
constexpr const KindInfo& info_of(Kind k) { return kKinds[static_cast<int>(k)]; }

constexpr std::size_t kPipeChunk = 64 * 1024;  // pipe receiver with a batch > 1: bytes per read
static_assert(kMaxMsgSize <= PIPE_BUF, "pipe writes of one message must be atomic");

#if defined(SHMBOX_HAVE_BOOST)
// Runs f() and turns Boost.Interprocess's exceptions into bench_failure.
template <class F>
auto boost_call(const char* what, F&& f) {
  try {
    return f();
  } catch (const boost::interprocess::interprocess_exception& e) {
    throw bench_failure(std::string(what) + ": " + e.what());
  }
}
#endif

// --- spin ring ------------------------------------------------------------------

template <std::size_t S>
class SpinRingQueue final : public Queue {
 public:
  SpinRingQueue(const std::string& name, std::size_t, const QueueOpts& o) : Queue(name), track_("/dev/shm/" + name) {
    (void)BasicSpinRing<S>::create(name, o.capacity);  // the ring outlives the handle
  }

 private:
  TrackedName track_;
};

template <std::size_t S>
class SpinRingEnd {
 public:
  explicit SpinRingEnd(const EndCtx& c) : locked_(c.locked_push) {
    if (!c.tx.empty()) tx_.emplace(BasicSpinRing<S>::open(c.tx));
    if (!c.rx.empty()) rx_.emplace(BasicSpinRing<S>::open(c.rx));
  }
  unsigned char* tx_buffer() noexcept { return out_; }
  std::uint64_t send(const unsigned char* m) {
    // What every claim among several producers does (a CAS or fetch_add on
    // x86: a locked instruction, which waits for the store buffer to drain),
    // on a line no one else touches: the cost of the lock alone, without
    // contention. Before the payload, where a claim is.
    if (locked_) claims_.fetch_add(1, std::memory_order_seq_cst);
    tx_->push(m);  // spins while full
    return 0;
  }
  template <class F>
  void recv(F&& fn) {
    rx_->pop(in_);  // spins while empty
    fn(in_, S);
  }
  bool idle() { return !rx_->try_pop(in_); }

 private:
  std::optional<BasicSpinRing<S>> tx_, rx_;
  bool locked_;
  alignas(64) std::atomic<std::uint64_t> claims_{0};  // spin-ring-locked's private line
  alignas(64) unsigned char out_[S], in_[S];
};

// --- boost::lockfree::spsc_queue in Boost.Interprocess shared memory ---------------

#if defined(SHMBOX_HAVE_BOOST)
namespace bip = boost::interprocess;

// The queue element: one message of S bytes, copied in by push, out by pop.
template <std::size_t S>
struct SpscElement {
  alignas(8) unsigned char bytes[S];
};
template <std::size_t S, std::uint32_t Capacity = 1024>
using SpscQueue = boost::lockfree::spsc_queue<SpscElement<S>, boost::lockfree::capacity<Capacity>>;
inline constexpr const char* kSpscObject = "queue";  // the queue's name inside its segment

// The segment stays mapped in the parent for verify().
template <std::size_t S>
class SpscQueueSegment final : public Queue {
 public:
  SpscQueueSegment(const std::string& name, std::size_t, const QueueOpts&) : Queue(name), track_("/dev/shm/" + name) {
    boost_call("spsc_queue segment", [&] {
      seg_.emplace(bip::create_only, name.c_str(), sizeof(SpscQueue<S>) + 64 * 1024);
      q_ = seg_->template construct<SpscQueue<S>>(kSpscObject)();
    });
  }
  void verify(std::uint64_t) override {
    if (q_->read_available() != 0) throw bench_failure("spsc_queue " + name_ + " is not empty after the run");
  }

 private:
  TrackedName track_;
  std::optional<bip::managed_shared_memory> seg_;
  SpscQueue<S>* q_ = nullptr;
};

template <std::size_t S>
class SpscEnd {
 public:
  explicit SpscEnd(const EndCtx& c) {
    if (!c.tx.empty()) tx_ = open(c.tx, tx_seg_);
    if (!c.rx.empty()) rx_ = open(c.rx, rx_seg_);
  }
  // push() takes an element: the sender's own (tx_buffer(), no copy), the
  // one just popped (an echo: no copy), or any other message, first copied
  // into an element (spsc_queue has no in-place construction here).
  unsigned char* tx_buffer() noexcept { return out_.bytes; }
  std::uint64_t send(const unsigned char* m) {
    const SpscElement<S>* e = m == in_.bytes ? &in_ : &out_;
    if (e == &out_ && m != out_.bytes) std::memcpy(out_.bytes, m, S);
    for (std::uint32_t spins = 0; !tx_->push(*e);) spin_wait(spins);  // busy-polls while full
    return 0;
  }
  template <class F>
  void recv(F&& fn) {
    for (std::uint32_t spins = 0; !rx_->pop(in_);) spin_wait(spins);  // busy-polls while empty
    fn(in_.bytes, S);
  }
  bool idle() { return rx_->read_available() == 0; }

 private:
  static SpscQueue<S>* open(const std::string& name, std::optional<bip::managed_shared_memory>& seg) {
    return boost_call("spsc_queue segment", [&] {
      seg.emplace(bip::open_only, name.c_str());
      const auto [q, n] = seg->template find<SpscQueue<S>>(kSpscObject);
      if (q == nullptr || n != 1) throw bench_failure("no spsc_queue in segment " + name);
      return q;
    });
  }
  std::optional<bip::managed_shared_memory> tx_seg_, rx_seg_;
  SpscQueue<S>* tx_ = nullptr;
  SpscQueue<S>* rx_ = nullptr;
  SpscElement<S> out_{}, in_{};
};

// --- Boost.Interprocess message_queue ---------------------------------------------

class BoostMqQueue final : public Queue {
 public:
  BoostMqQueue(const std::string& name, std::size_t size, const QueueOpts& o)
      : Queue(name), track_("/dev/shm/" + name) {
    boost_call("message_queue create", [&] {
      bip::message_queue mq(bip::create_only, name.c_str(), o.capacity, size);  // the queue outlives the handle
    });
  }
  void verify(std::uint64_t) override {
    const auto n = boost_call("message_queue open",
                              [&] { return bip::message_queue(bip::open_only, name_.c_str()).get_num_msg(); });
    if (n != 0) throw bench_failure("message_queue " + name_ + " is not empty after the run");
  }

 private:
  TrackedName track_;
};

class BoostMqEnd {
 public:
  explicit BoostMqEnd(const EndCtx& c) : size_(c.size) {
    boost_call("message_queue open", [&] {
      if (!c.tx.empty()) tx_.emplace(bip::open_only, c.tx.c_str());
      if (!c.rx.empty()) rx_.emplace(bip::open_only, c.rx.c_str());
    });
  }
  unsigned char* tx_buffer() noexcept { return buf_; }
  std::uint64_t send(const unsigned char* m) {
    boost_call("message_queue send", [&] { tx_->send(m, size_, 0); });  // blocks (condition variable) while full
    return 0;
  }
  template <class F>
  void recv(F&& fn) {
    bip::message_queue::size_type got = 0;
    unsigned prio = 0;
    boost_call("message_queue receive", [&] { rx_->receive(buf_, size_, got, prio); });  // blocks while empty
    fn(buf_, static_cast<std::size_t>(got));
  }
  bool idle() {
    bip::message_queue::size_type got = 0;
    unsigned prio = 0;
    return !boost_call("message_queue try_receive", [&] { return rx_->try_receive(buf_, size_, got, prio); });
  }

 private:
  std::size_t size_;
  std::optional<bip::message_queue> tx_, rx_;
  alignas(64) unsigned char buf_[kMaxMsgSize];
};
#endif

// --- POSIX message queue -------------------------------------------------------------

// Named "/<name>"; `depth` messages of `size` bytes. The parent keeps a
// descriptor (for verify()) and unlinks the name as soon as every child has
// the queue open, so that nothing is left even if it is killed with SIGKILL
// (without /dev/mqueue mounted, a leftover queue could not even be found).
class PosixMqQueue final : public Queue {
 public:
  PosixMqQueue(const std::string& name, std::size_t size, const QueueOpts& o)
      : Queue("/" + name), track_(name_, TrackedName::mqueue) {
    if (const int e = create_posix_mq(name_, o.posix_depth, size); e != 0)  // lives on until mq_unlink
      throw bench_failure(errno_text("mq_open(create) " + name_ + " (depth " + std::to_string(o.posix_depth) +
                                         ", message size " + std::to_string(size) + ")",
                                     e));
    q_ = ::mq_open(name_.c_str(), O_RDONLY | O_CLOEXEC);
    if (q_ == mqd_t(-1)) throw bench_failure(errno_text("mq_open " + name_));
  }
  ~PosixMqQueue() override { ::mq_close(q_); }
  void opened() override { ::mq_unlink(name_.c_str()); }
  void verify(std::uint64_t) override {
    mq_attr a{};
    if (::mq_getattr(q_, &a) != 0 || a.mq_curmsgs != 0)
      throw bench_failure("POSIX queue " + name_ + " is not empty after the run");
  }

 private:
  TrackedName track_;
  mqd_t q_ = mqd_t(-1);
};

class PosixMqEnd {
 public:
  explicit PosixMqEnd(const EndCtx& c) : size_(c.size) {
    if (!c.tx.empty()) tx_ = open(c.tx, O_WRONLY);
    if (!c.rx.empty()) rx_ = open(c.rx, O_RDONLY);
  }
  ~PosixMqEnd() {
    if (tx_ != mqd_t(-1)) ::mq_close(tx_);
    if (rx_ != mqd_t(-1)) ::mq_close(rx_);
  }
  PosixMqEnd(const PosixMqEnd&) = delete;
  PosixMqEnd& operator=(const PosixMqEnd&) = delete;
  unsigned char* tx_buffer() noexcept { return buf_; }
  std::uint64_t send(const unsigned char* m) {
    while (::mq_send(tx_, reinterpret_cast<const char*>(m), size_, 0) != 0)  // blocks while full
      if (errno != EINTR) throw bench_failure(errno_text("mq_send"));
    return 0;
  }
  template <class F>
  void recv(F&& fn) {
    ssize_t n;
    // The buffer must hold mq_msgsize (= the message size) bytes; blocks while empty.
    while ((n = ::mq_receive(rx_, reinterpret_cast<char*>(buf_), size_, nullptr)) < 0)
      if (errno != EINTR) throw bench_failure(errno_text("mq_receive"));
    fn(buf_, static_cast<std::size_t>(n));
  }
  bool idle() {
    timespec now{};
    ::clock_gettime(CLOCK_REALTIME, &now);  // an absolute time that has passed: do not wait
    const ssize_t n = ::mq_timedreceive(rx_, reinterpret_cast<char*>(buf_), size_, nullptr, &now);
    if (n < 0 && errno != ETIMEDOUT) throw bench_failure(errno_text("mq_timedreceive"));
    return n < 0;
  }

 private:
  static mqd_t open(const std::string& name, int flags) {
    const mqd_t q = ::mq_open(name.c_str(), flags | O_CLOEXEC);
    if (q == mqd_t(-1)) throw bench_failure(errno_text("mq_open " + name));
    return q;
  }
  std::size_t size_;
  mqd_t tx_ = mqd_t(-1), rx_ = mqd_t(-1);
  alignas(64) unsigned char buf_[kMaxMsgSize];
};

// --- pipe ------------------------------------------------------------------------------

class PipeQueue final : public Queue {
 public:
  PipeQueue(const std::string& name, std::size_t size, const QueueOpts& o) : Queue(name) {
    // Room for `capacity` messages, like the other queues (pipe-max-size is 1 MiB by default).
    if (::fcntl(p_.w.get(), F_SETPIPE_SZ, static_cast<int>(o.capacity * size)) < 0)
      throw bench_failure(errno_text("F_SETPIPE_SZ " + std::to_string(o.capacity * size)));
    tx_fd_ = p_.w.get();
    rx_fd_ = p_.r.get();
  }
  void close_fds() override {
    p_.r.close();
    p_.w.close();
  }

 private:
  Pipe p_;
};

// The receiver reads 64 KiB at a time with a batch > 1 (and splits them into
// messages), else exactly one message.
class PipeEnd {
 public:
  explicit PipeEnd(const EndCtx& c)
      : tx_(c.tx_fd), rx_(c.rx_fd), size_(c.size), batch_(c.batch), buf_(kPipeChunk + 2 * c.size) {}
  unsigned char* tx_buffer() noexcept { return buf_.data(); }
  std::uint64_t send(const unsigned char* m) {
    for (;;) {  // <= PIPE_BUF bytes: all of it or nothing (blocks while the pipe is full)
      const ssize_t w = ::write(tx_, m, size_);
      if (w == static_cast<ssize_t>(size_)) return 0;
      if (w < 0 && errno == EINTR) continue;
      throw bench_failure(w < 0 ? errno_text("write to the pipe")
                                : "short write of " + std::to_string(w) + " bytes to the pipe");
    }
  }
  template <class F>
  void recv(F&& fn) {
    for (;;) {
      unsigned char* in = buf_.data() + size_;  // buf_[0, size_) is the sender's
      const ssize_t n = ::read(rx_, in + have_, batch_ > 1 ? kPipeChunk : size_ - have_);  // blocks while empty
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) throw bench_failure(errno_text("read of the pipe"));
      if (n == 0) throw bench_failure("end of file on the pipe (the peer closed it)");
      have_ += static_cast<std::size_t>(n);
      std::size_t at = 0;  // whole messages are delivered, a partial one waits for its rest
      for (; have_ - at >= size_; at += size_) fn(in + at, size_);
      if (at > 0 && at < have_) std::memmove(in, in + at, have_ - at);
      have_ -= at;
      if (at > 0) return;
    }
  }
  bool idle() {
    pollfd pfd{rx_, POLLIN, 0};  // POLLHUP alone: every writer has closed, nothing is left
    return have_ == 0 && (::poll(&pfd, 1, 0) == 0 || !(pfd.revents & POLLIN));
  }

 private:
  int tx_, rx_;
  std::size_t size_, batch_;
  std::vector<unsigned char> buf_;  // the sender's message, then what the receiver read
  std::size_t have_ = 0;
};

// --- unix socket ---------------------------------------------------------------------------

// The receiver's address: abstract namespace (no file), "\0<name>".
inline sockaddr_un socket_address(const std::string& name, socklen_t& len) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  if (name.size() + 1 > sizeof a.sun_path) throw bench_failure("socket name too long: " + name);
  std::memcpy(a.sun_path + 1, name.data(), name.size());
  len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  return a;
}

// `pair`: a socketpair(AF_UNIX, SOCK_SEQPACKET), one end the sender's, the
// other the receiver's; else a SOCK_DGRAM socket bound to "\0<name>" (the
// receiver's, bound before any sender connects).
class SocketQueue final : public Queue {
 public:
  SocketQueue(const std::string& name, std::size_t, const QueueOpts& o) : Queue(name) {
    const bool pair = o.socket_pair;
    int sv[2] = {-1, -1};
    if (pair) {
      if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0)
        throw bench_failure(errno_text("socketpair(AF_UNIX, SOCK_SEQPACKET)"));
    } else {
      sv[1] = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
      if (sv[1] < 0) throw bench_failure(errno_text("socket"));
    }
    tx_ = Fd(sv[0]);
    rx_ = Fd(sv[1]);
    tx_fd_ = sv[0];
    rx_fd_ = sv[1];
    socklen_t len = 0;
    const sockaddr_un a = socket_address(name, len);
    if (!pair && ::bind(rx_.get(), reinterpret_cast<const sockaddr*>(&a), len) != 0)
      throw bench_failure(errno_text("bind @" + name));
  }
  void close_fds() override {
    tx_.close();
    rx_.close();
  }

 private:
  Fd tx_, rx_;
};

// The receiver takes one message per recv() (batch 1), or up to `batch`
// datagrams per recvmmsg (MSG_WAITFORONE). A sender without the queue's
// descriptor connects its own SOCK_DGRAM socket: send() then blocks while the
// receiver's queue is full (nothing is dropped).
class SocketEnd {
 public:
  explicit SocketEnd(const EndCtx& c)
      : tx_(c.tx_fd), rx_(c.rx_fd), size_(c.size), batch_(c.batch), room_(c.size + 1), buf_(c.batch * room_),
        iov_(c.batch), msgs_(c.batch) {
    if (tx_ >= 0 || c.tx.empty()) return;
    own_ = Fd(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    if (own_.get() < 0) throw bench_failure(errno_text("socket"));
    socklen_t len = 0;
    const sockaddr_un to = socket_address(c.tx, len);
    if (::connect(own_.get(), reinterpret_cast<const sockaddr*>(&to), len) != 0)
      throw bench_failure(errno_text("connect to the receiver's socket"));
    tx_ = own_.get();
  }
  unsigned char* tx_buffer() noexcept { return buf_.data(); }
  std::uint64_t send(const unsigned char* m) {
    for (;;) {
      const ssize_t w = ::send(tx_, m, size_, MSG_NOSIGNAL);
      if (w == static_cast<ssize_t>(size_)) return 0;
      if (w < 0 && errno == EINTR) continue;
      throw bench_failure(w < 0 ? errno_text("send") : "short send of " + std::to_string(w) + " bytes");
    }
  }
  template <class F>
  void recv(F&& fn) {
    if (batch_ == 1) {
      ssize_t n;
      // One message per recv; MSG_TRUNC returns its real length.
      while ((n = ::recv(rx_, buf_.data(), size_, MSG_TRUNC)) < 0)
        if (errno != EINTR) throw bench_failure(errno_text("recv on the socket"));
      if (n == 0) throw bench_failure("the peer closed the socket");
      if (static_cast<std::size_t>(n) > size_)
        throw bench_failure("a message of " + std::to_string(n) + " bytes, expected " + std::to_string(size_));
      return fn(buf_.data(), static_cast<std::size_t>(n));
    }
    int n;
    do {
      for (std::size_t i = 0; i < batch_; ++i) {  // one byte more: a longer datagram shows (or MSG_TRUNC)
        iov_[i] = {buf_.data() + i * room_, room_};
        msgs_[i] = {};
        msgs_[i].msg_hdr.msg_iov = &iov_[i];
        msgs_[i].msg_hdr.msg_iovlen = 1;
      }
      // Waits for the first datagram, then takes what is there, up to batch_.
      n = ::recvmmsg(rx_, msgs_.data(), static_cast<unsigned>(batch_), MSG_WAITFORONE, nullptr);
      if (n < 0 && errno != EINTR) throw bench_failure(errno_text("recvmmsg"));
    } while (n < 0);
    for (int i = 0; i < n; ++i) {
      if (msgs_[i].msg_hdr.msg_flags & MSG_TRUNC) throw bench_failure("a datagram longer than a message");
      fn(static_cast<const unsigned char*>(iov_[i].iov_base), msgs_[i].msg_len);
    }
  }
  bool idle() {
    unsigned char b[1];
    const ssize_t n = ::recv(rx_, b, sizeof b, MSG_DONTWAIT | MSG_TRUNC);
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) throw bench_failure(errno_text("recv"));
    return n < 0;
  }

 private:
  int tx_, rx_;
  std::size_t size_, batch_, room_;
  std::vector<unsigned char> buf_;
  std::vector<iovec> iov_;
  std::vector<mmsghdr> msgs_;
  Fd own_;
};

// ===========================================================================
// Making queues and opening ends
// ===========================================================================

// Calls fn(mech_types<Queue type, End type>{}) for kind `k` and messages of
// `size` bytes.
template <class Q, class E>
struct mech_types {
  using queue = Q;
  using end = E;
};
template <class F>
decltype(auto) dispatch(Kind k, std::size_t size, F&& fn) {
  switch (k) {
    case Kind::shmbox: return fn(mech_types<ShmboxQueue, ShmboxEnd>{});
    case Kind::spin_ring:
      if (size == 64) return fn(mech_types<SpinRingQueue<64>, SpinRingEnd<64>>{});
      if (size == 1024) return fn(mech_types<SpinRingQueue<1024>, SpinRingEnd<1024>>{});
      // The sizes of run.sh --curves (spin_ring_sizes()).
      if (size == 16) return fn(mech_types<SpinRingQueue<16>, SpinRingEnd<16>>{});
      if (size == 256) return fn(mech_types<SpinRingQueue<256>, SpinRingEnd<256>>{});
      if (size == 4096) return fn(mech_types<SpinRingQueue<4096>, SpinRingEnd<4096>>{});
      if (size == 16384) return fn(mech_types<SpinRingQueue<16384>, SpinRingEnd<16384>>{});
      if (size == 65536) return fn(mech_types<SpinRingQueue<65536>, SpinRingEnd<65536>>{});
      if (size == 262144) return fn(mech_types<SpinRingQueue<262144>, SpinRingEnd<262144>>{});
      if (size == 1048576) return fn(mech_types<SpinRingQueue<1048576>, SpinRingEnd<1048576>>{});
      break;
#if defined(SHMBOX_HAVE_BOOST)
    case Kind::lockfree_spsc:
      if (size == 64) return fn(mech_types<SpscQueueSegment<64>, SpscEnd<64>>{});
      if (size == 1024) return fn(mech_types<SpscQueueSegment<1024>, SpscEnd<1024>>{});
      break;
    case Kind::boost_mq: return fn(mech_types<BoostMqQueue, BoostMqEnd>{});
#else
    case Kind::lockfree_spsc:
    case Kind::boost_mq: break;
#endif
    case Kind::posix_mq: return fn(mech_types<PosixMqQueue, PosixMqEnd>{});
    case Kind::pipe: return fn(mech_types<PipeQueue, PipeEnd>{});
    case Kind::unix_socket: return fn(mech_types<SocketQueue, SocketEnd>{});
  }
  throw bench_failure(std::string(info_of(k).name) + ": not available for " + std::to_string(size) +
                      "-byte messages" + (info_of(k).needs_boost && !kHaveBoost ? " (built without Boost)" : ""));
}

// The message sizes dispatch() has a spin ring for: 16 B .. 1 MiB, powers of 4.
inline bool spin_ring_size(std::size_t size) {
  for (std::size_t s = 16; s <= (std::size_t{1} << 20); s *= 4)
    if (s == size) return true;
  return false;
}

// A fresh queue of kind `k` for messages of `size` bytes, named <name>
// (posix-mq: /<name>; shmbox: the segment is /dev/shm/shmbox.<name>).
inline std::unique_ptr<Queue> make_queue(Kind k, const std::string& name, std::size_t size, const QueueOpts& o) {
  return dispatch(k, size, [&]<class T>(T) -> std::unique_ptr<Queue> {
    return std::make_unique<typename T::queue>(name, size, o);
  });
}

// Opens the End of kind `k` that `c` describes and calls fn(end).
template <class F>
void with_end(Kind k, const EndCtx& c, F&& fn) {
  dispatch(k, c.size, [&]<class T>(T) {
    typename T::end e(c);
    fn(e);
  });
}

}  // namespace shmbench
