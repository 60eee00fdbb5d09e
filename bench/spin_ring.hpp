// bench/spin_ring.hpp - "the practical limit": a minimal single-producer,
// single-consumer spin ring in POSIX shared memory.
//
// WHAT IT IS FOR
// The throughput benchmark compares shmbox with this ring to show how far
// shmbox is from the fastest simple way to move fixed 64-byte messages from
// one process to another through shared memory; the round-trip benchmark
// (rtt.cpp) uses a pair of them, with 64-byte and 1 KiB messages. It is NOT a usable mailbox:
// exactly one producer and one consumer, no blocking (both sides burn a CPU
// while they wait), no crash recovery, no message lengths, no counters, no
// owner, no validation of the segment. Everything shmbox does beyond moving
// bytes is missing here, so "shmbox / spin ring" is the price of those
// features (plus any inefficiency).
//
// PAYLOAD SIZE
//   BasicSpinRing<Payload> moves fixed messages of Payload bytes; SpinRing is
//   BasicSpinRing<64> (the original 64-byte ring, unchanged). The payload
//   size is recorded in the header, and open() refuses a ring made with
//   another size.
//
// LAYOUT (one segment, /dev/shm/<name>)
//   header  (128 bytes): magic, capacity, payload size
//   slot[capacity]: an 8-byte sequence word + the payload, aligned and padded
//                   to a multiple of 128 bytes (64 B payload: 128 bytes = two
//                   cache lines, so that the adjacent line prefetcher does
//                   not couple neighbouring slots; 1 KiB payload: 1152 bytes).
//   capacity is a power of two: position p lives in slot p & (capacity - 1).
//
// PROTOCOL (Vyukov-style per-slot sequence numbers; positions never wrap)
//   Initially slot[i].seq = i ("free for position i").
//   push (producer at private position p):
//     spin while slot.seq != p            (acquire: the consumer's reads of
//                                          the previous lap happen before our writes)
//     copy the payload in
//     slot.seq = p + 1                    (release: publishes the payload)
//   pop (consumer at private position p):
//     spin while slot.seq != p + 1        (acquire: pairs with the release above)
//     copy the payload out
//     slot.seq = p + capacity             (release: frees the slot for the next lap)
//   Producer and consumer never share a head/tail word: each keeps its own
//   position, and the only shared writes are the two stores of seq per
//   message. That is the minimum for a correct cross-process hand-off.
//
// WAITING
//   Both sides spin (with the CPU's pause hint). Only after kSpinsBeforeYield
//   consecutive failed checks (tens of microseconds, far longer than any wait
//   when each side has its own core) does a waiter call sched_yield() between
//   checks: on an oversubscribed machine, pure spinning would otherwise burn
//   whole time slices while the other side waits for the CPU, and the "limit"
//   would measure the scheduler instead of the ring.
#pragma once

#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>
#include <system_error>
#include <utility>

namespace shmbench {

inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

// One failed check of a spin wait; `spins` counts them.
inline void spin_wait(std::uint32_t& spins) noexcept {
  constexpr std::uint32_t kSpinsBeforeYield = 1024;
  if (spins < kSpinsBeforeYield) {
    ++spins;
    cpu_relax();
  } else {
    ::sched_yield();
  }
}

template <std::size_t Payload>
class BasicSpinRing {
 public:
  static_assert(Payload > 0, "a spin ring moves at least one byte");
  static constexpr std::size_t kPayload = Payload;
  static constexpr std::uint64_t kMagic = 0x676e69726e697073ull;  // "spinring"

  // Creates /dev/shm/<name> (fails if it exists) with `capacity` slots.
  static BasicSpinRing create(const std::string& name, std::uint32_t capacity) {
    if (capacity == 0 || (capacity & (capacity - 1)) != 0)
      throw std::invalid_argument("spin ring capacity must be a power of two");
    const int fd = ::shm_open(shm_name(name).c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) throw std::system_error(errno, std::generic_category(), "shm_open(create) " + name);
    const std::size_t bytes = sizeof(header) + std::size_t{capacity} * sizeof(slot);
    if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
      const int e = errno;
      ::close(fd);
      ::shm_unlink(shm_name(name).c_str());
      throw std::system_error(e, std::generic_category(), "ftruncate " + name);
    }
    BasicSpinRing r(fd, bytes, name);
    for (std::uint32_t i = 0; i < capacity; ++i) ::new (&r.slots_[i].seq) std::atomic<std::uint64_t>(i);
    r.hdr_->capacity = capacity;
    r.hdr_->payload = kPayload;
    // release: a process that maps the ring later sees initialised slots
    // (shm_open + mmap in another process is ordered by the kernel anyway).
    std::atomic_ref<std::uint64_t>(r.hdr_->magic).store(kMagic, std::memory_order_release);
    r.mask_ = capacity - 1;
    return r;
  }

  // Maps an existing ring created by create().
  static BasicSpinRing open(const std::string& name) {
    const int fd = ::shm_open(shm_name(name).c_str(), O_RDWR | O_CLOEXEC, 0);
    if (fd < 0) throw std::system_error(errno, std::generic_category(), "shm_open " + name);
    struct stat st {};
    if (::fstat(fd, &st) != 0 || static_cast<std::size_t>(st.st_size) < sizeof(header)) {
      ::close(fd);
      throw std::runtime_error("spin ring " + name + " is too small");
    }
    BasicSpinRing r(fd, static_cast<std::size_t>(st.st_size), name);
    if (std::atomic_ref<std::uint64_t>(r.hdr_->magic).load(std::memory_order_acquire) != kMagic ||
        sizeof(header) + r.hdr_->capacity * sizeof(slot) > r.bytes_)
      throw std::runtime_error("spin ring " + name + " is not initialised");
    if (r.hdr_->payload != kPayload)
      throw std::runtime_error("spin ring " + name + " has " + std::to_string(r.hdr_->payload) +
                               "-byte messages, this handle " + std::to_string(kPayload));
    r.mask_ = r.hdr_->capacity - 1;
    return r;
  }

  // Unlinks /dev/shm/<name>; mappings stay valid. No error if it is gone.
  static void remove(const std::string& name) noexcept { ::shm_unlink(shm_name(name).c_str()); }

  BasicSpinRing(BasicSpinRing&& o) noexcept
      : base_(std::exchange(o.base_, nullptr)), bytes_(o.bytes_), hdr_(o.hdr_), slots_(o.slots_), mask_(o.mask_),
        pos_(o.pos_) {}
  BasicSpinRing& operator=(BasicSpinRing&&) = delete;
  BasicSpinRing(const BasicSpinRing&) = delete;
  BasicSpinRing& operator=(const BasicSpinRing&) = delete;
  ~BasicSpinRing() {
    if (base_ != nullptr) ::munmap(base_, bytes_);
  }

  // Producer side: copies kPayload bytes in; spins while the ring is full.
  void push(const void* data) noexcept {
    slot& s = slots_[pos_ & mask_];
    for (std::uint32_t spins = 0; s.seq.load(std::memory_order_acquire) != pos_;) spin_wait(spins);
    std::memcpy(s.payload, data, kPayload);
    s.seq.store(pos_ + 1, std::memory_order_release);
    ++pos_;
  }

  // Consumer side: copies kPayload bytes out; spins while the ring is empty.
  void pop(void* out) noexcept {
    slot& s = slots_[pos_ & mask_];
    for (std::uint32_t spins = 0; s.seq.load(std::memory_order_acquire) != pos_ + 1;) spin_wait(spins);
    std::memcpy(out, s.payload, kPayload);
    s.seq.store(pos_ + mask_ + 1, std::memory_order_release);
    ++pos_;
  }

  // Consumer side: pops if a message is there; never waits.
  bool try_pop(void* out) noexcept {
    slot& s = slots_[pos_ & mask_];
    if (s.seq.load(std::memory_order_acquire) != pos_ + 1) return false;
    std::memcpy(out, s.payload, kPayload);
    s.seq.store(pos_ + mask_ + 1, std::memory_order_release);
    ++pos_;
    return true;
  }

 private:
  struct alignas(128) header {
    std::uint64_t magic;
    std::uint64_t capacity;
    std::uint64_t payload;  // kPayload of the creator
  };
  struct alignas(128) slot {
    std::atomic<std::uint64_t> seq;
    unsigned char payload[kPayload];
  };
  static_assert(sizeof(header) == 128);
  static_assert(sizeof(slot) % 128 == 0 && sizeof(slot) < sizeof(std::uint64_t) + kPayload + 128);
  static_assert(kPayload != 64 || sizeof(slot) == 128, "the 64-byte ring keeps its two-cache-line slots");
  // Cross-process atomics must not hide a lock in process-local memory.
  static_assert(std::atomic<std::uint64_t>::is_always_lock_free);

  static std::string shm_name(const std::string& name) { return "/" + name; }

  BasicSpinRing(int fd, std::size_t bytes, const std::string& name) : bytes_(bytes) {
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    const int e = errno;
    ::close(fd);
    if (p == MAP_FAILED) throw std::system_error(e, std::generic_category(), "mmap " + name);
    base_ = p;
    hdr_ = static_cast<header*>(p);
    slots_ = reinterpret_cast<slot*>(static_cast<unsigned char*>(p) + sizeof(header));
  }

  void* base_ = nullptr;
  std::size_t bytes_ = 0;
  header* hdr_ = nullptr;
  slot* slots_ = nullptr;
  std::uint64_t mask_ = 0;
  std::uint64_t pos_ = 0;  // this handle's private position (producer's or consumer's)
};

// The original ring: 64-byte messages (throughput.cpp, rtt.cpp).
using SpinRing = BasicSpinRing<64>;

}  // namespace shmbench
