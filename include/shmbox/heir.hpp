// shmbox/heir.hpp - waiting to be given a box: heirs and listeners.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string_view>

#include "shmbox/box.hpp"
#include "shmbox/error.hpp"
#include "shmbox/export.hpp"
#include "shmbox/owner.hpp"

namespace shmbox {

// A process waiting to be given a box: as an heir (it takes the box over when
// the owner dies, exits or lets its lease expire, first live heir first, in
// registration order) or as a listener (only give_away). The entry is
// withdrawn when the handle is destroyed (not by a fork child's copy: the
// entry is the parent's, and the copy's await_transfer fails with
// errc::inherited_handle; box.hpp: handles and fork()).
class SHMBOX_API Heir {
 public:
  // Registers this process as an heir of `box`; `data` (up to 64 bytes) is
  // handed to it in the transfer record.
  static result<Heir> enlist(std::string_view box, std::string_view data = {});
  static result<Heir> enlist(const Box& box, std::string_view data = {});
  // Waits only for give_away offers to this process.
  static result<Heir> listen(std::string_view box);
  static result<Heir> listen(const Box& box);

  Heir(Heir&&) noexcept;
  Heir& operator=(Heir&&) noexcept;
  ~Heir();

  // Blocks until this process is given the box, at most `timeout`: returns
  // the Owner handle (see Owner::transfer()), or errc::timed_out. The owner's
  // death is seen at once through a pidfd when the owner is in this pid
  // namespace, else through its lock in the segment: a watcher thread of
  // this process waits for it (F_OFD_SETLKW) and is woken by the kernel when
  // the owner dies. (Such a thread is never stopped: it ends when the lock
  // is let go; a later heir of the same box reuses it.)
  result<Owner> await_transfer(std::chrono::nanoseconds timeout);
  // A descriptor for poll/epoll (asio, libuv, ...): readable when
  // await_transfer(0) may succeed (also when the owner is in another pid
  // namespace).
  int fd() const noexcept;
  // 0 when this process is next in line (listeners: always 0).
  std::uint32_t position() const;

 private:
  struct SHMBOX_LOCAL state;
  SHMBOX_LOCAL explicit Heir(std::unique_ptr<state> s);
  friend struct detail::access;
  std::unique_ptr<state> s_;
};

}  // namespace shmbox
