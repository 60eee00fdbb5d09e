// lib/c/c_common.hpp - what the files of the C API (include/shmbox/shmbox.h)
// share: the handles behind its opaque pointers, the error state of the
// calling thread (c_api.cpp keeps it), and the checks every function makes.
// Not installed; nothing here is exported (the library is compiled with
// -fvisibility=hidden, tests/unit/exported_symbols.py checks nm -D). What every
// C function does with errors, pointers and structs: c_api.cpp.
//
// The files, one per handle family: c_api.cpp (the error state, versions,
// helpers of more than one family), box.cpp (boxes, looking at them),
// producer.cpp (producers, loans), owner.cpp (owners, their modes,
// hand-over), heir.cpp, pool.cpp (pools, leases, members).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <exception>
#include <new>
#include <optional>
#include <string>
#include <system_error>
#include <utility>

#include "shmbox/shmbox.h"
#include "shmbox/shmbox.hpp"

// ---- The handles ---------------------------------------------------------
//
// Every handle begins with a tag naming its kind, checked by every function
// (live()) and cleared by its *_close before the memory goes back
// (closable). After a close the pointer is as invalid as a pointer after
// free() (shmbox.h says so): the tag only makes a second close or a call
// through the stale pointer fail cleanly, nothing done, as long as the
// allocator has not given that memory to another handle of the same kind.
// A borrowed handle (a lease's producer, a member's owner) is live until its
// lease or member is closed; its own *_close refuses it.

template <std::uint32_t Tag>
struct tagged {
  static constexpr std::uint32_t kTag = Tag;
  std::uint32_t tag = Tag;  // first: a handle of another kind fails the check too
};

struct shmbox_box : tagged<0x5342'4258> {  // "SBBX"
  explicit shmbox_box(shmbox::Box b) : box(std::move(b)) {}
  shmbox::Box box;
};

struct shmbox_producer : tagged<0x5342'5052> {  // "SBPR"
  std::optional<shmbox::Producer> own;  // empty for a lease's producer (borrowed)
  shmbox::Producer* p = nullptr;
  shmbox::slot_loan loan;
  bool borrowed = false;  // part of a shmbox_lease: closed with it
};

struct shmbox_owner : tagged<0x5342'4f57> {  // "SBOW"
  std::optional<shmbox::Owner> own;  // empty for a pool member's owner (borrowed)
  shmbox::Owner* o = nullptr;
  std::uint32_t slot_size = 0;
  shmbox::batch batch;               // receive_batch, read
  shmbox::delivery del;              // wait, deliver
  const shmbox::batch* current = &batch;  // what shmbox_batch_message reads
  int last = SHMBOX_OK;          // an error of the C layer itself (bad arguments); an int: reset on every call
  bool borrowed = false;         // part of a shmbox_member: closed with it
  shmbox::message last_request;  // the address of what the last one-message receive took (shmbox_reply_last)
};

struct shmbox_notify_group : tagged<0x5342'4e47> {  // "SBNG"
  explicit shmbox_notify_group(shmbox::NotifyGroup g) : group(std::move(g)) {}
  shmbox::NotifyGroup group;
  std::vector<std::uint64_t> pending;  // tags taken from the group, not yet copied out
};

struct shmbox_requester : tagged<0x5342'5251> {  // "SBRQ"
  explicit shmbox_requester(shmbox::Requester r) : req(std::move(r)) {}
  shmbox::Requester req;
  std::string reply;  // shmbox_ask_wait's reply before it is copied out
};

struct shmbox_heir : tagged<0x5342'4852> {  // "SBHR"
  explicit shmbox_heir(shmbox::Heir h) : heir(std::move(h)) {}
  shmbox::Heir heir;
};

struct shmbox_pool : tagged<0x5342'504c> {  // "SBPL"
  explicit shmbox_pool(shmbox::Pool p) : pool(std::move(p)) {}
  shmbox::Pool pool;
};

struct shmbox_lease : tagged<0x5342'4c53> {  // "SBLS"
  explicit shmbox_lease(shmbox::Lease l) : lease(std::move(l)) {
    producer.p = &lease.producer();
    producer.borrowed = true;
  }
  shmbox::Lease lease;
  shmbox_producer producer;
};

struct shmbox_member : tagged<0x5342'4d42> {  // "SBMB"
  explicit shmbox_member(shmbox::PoolMember m) : member(std::move(m)) { owner.borrowed = true; }
  shmbox::PoolMember member;
  shmbox_owner owner;
};

namespace shmbox::detail::capi {

// A handle the caller may use: not NULL, of its kind, not closed (as far as
// the cleared tag tells: see above).
template <class H>
bool live(const H* h) noexcept {
  return h != nullptr && h->tag == H::kTag;
}

// Clears the tag so that it survives the delete that follows: a volatile
// store is not removed as a dead store to an object about to die.
template <class H>
void clear_tag(H* h) noexcept {
  *static_cast<volatile std::uint32_t*>(&h->tag) = 0;
}

// ---- This thread's most recent failure (c_api.cpp) -------------------------

// Records `ec` as this thread's last error (code and sentence); returns the code.
int record(std::error_code ec);
int record(errc e, const std::string& sentence);

// Records only a code, when not even the sentence could be made (out of memory).
void record_code(int code) noexcept;

// An argument the caller got wrong.
int bad(const char* fn, const char* what);

// The start of every *_close: true when `h` is a handle it may free. NULL is
// ignored; a closed handle (as far as its cleared tag tells) or a borrowed
// one is reported (this thread's last error) and left alone.
template <class H>
bool closable(H* h, const char* fn) noexcept {
  if (h == nullptr) return false;
  try {
    if (!live(h)) {
      bad(fn, "not an open handle of this kind: closed already? (after a close the pointer is invalid: set it to NULL)");
      return false;
    }
    if constexpr (requires { h->borrowed; }) {
      if (h->borrowed) {
        bad(fn, "this handle belongs to a lease or pool member (shmbox_lease_producer, shmbox_member_owner): "
                "it is closed with it; nothing was done");
        return false;
      }
    }
  } catch (...) {
    record_code(SHMBOX_E_INVALID_ARGUMENT);
    return false;
  }
  clear_tag(h);
  return true;
}

// Runs `body` (returning an error code) with every exception turned into one.
template <class F>
int guarded(const char* fn, F&& body) noexcept {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    try {
      return record(errc::system_error, std::string(fn) + ": out of memory");
    } catch (...) {
      record_code(SHMBOX_E_SYSTEM);
      return SHMBOX_E_SYSTEM;
    }
  } catch (const std::exception& e) {
    try {
      return record(errc::system_error, std::string(fn) + ": " + e.what());
    } catch (...) {
      record_code(SHMBOX_E_SYSTEM);
      return SHMBOX_E_SYSTEM;
    }
  } catch (...) {
    record_code(SHMBOX_E_SYSTEM);
    return SHMBOX_E_SYSTEM;
  }
}

// ---- Structs, times ---------------------------------------------------------

// Reads a caller's struct of `struct_size` bytes over the defaults in `def`.
template <class T>
bool copy_in(const T* in, T& def) noexcept {
  if (in->struct_size < sizeof(std::uint32_t)) return false;
  std::memcpy(&def, in, std::min<std::size_t>(in->struct_size, sizeof(T)));
  def.struct_size = sizeof(T);
  return true;
}

// Writes `full` into the caller's struct, no more than its struct_size bytes.
template <class T>
bool copy_out(T* out, const T& full) noexcept {
  if (out->struct_size < sizeof(std::uint32_t)) return false;
  const std::uint32_t size = out->struct_size;
  std::memcpy(out, &full, std::min<std::size_t>(size, sizeof(T)));
  out->struct_size = size;
  return true;
}

// A C timeout: a negative one waits for ever.
inline std::chrono::nanoseconds to_ns(std::int64_t ns) noexcept {
  return ns < 0 ? std::chrono::nanoseconds::max() : std::chrono::nanoseconds(ns);
}

// A message id as C has it.
inline shmbox_message_id to_c_id(const shmbox::message_id& id) noexcept {
  shmbox_message_id c{};
  c.box = id.box;
  c.lane = id.lane;
  c.position = id.position;
  return c;
}

// ---- Helpers of more than one handle family (c_api.cpp) ----------------------

// An Owner's last transfer (shmbox_box_info, shmbox_owner_transfer).
void fill_transfer(shmbox_transfer& t, const transfer_record& r) noexcept;

// Points an owner handle at its Owner (its own, an heir's new one, or a pool
// member's) and notes the box's slot size (receive buffers are checked against it).
void init_owner(shmbox_owner& h, Owner* o);

}  // namespace shmbox::detail::capi
