#include "base/errors.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace shmbox {
namespace {

// Trivially destructible on purpose: a shmbox call that fails in an atexit
// handler or a static destructor runs after this thread's thread_local
// destructors, and must not write into a destroyed std::string. Sentences
// longer than the buffer are cut.
struct last_error {
  std::error_code ec;
  std::size_t length;  // of sentence (which may hold NULs: a bad name is quoted as given)
  char sentence[1024];
};
thread_local last_error t_last;

class shmbox_category final : public std::error_category {
 public:
  const char* name() const noexcept override { return "shmbox"; }
  std::string message(int v) const override {
    switch (static_cast<errc>(v)) {
      case errc::ok: return "success";
      case errc::invalid_name:
        return "invalid box name: use 1 to 128 characters of A-Z a-z 0-9 . _ -, not starting with '.'";
      case errc::invalid_argument: return "invalid argument: see the documented limits of shmbox::options";
      case errc::exists: return "a box of that name already exists: pick another name or remove it (shmbox rm NAME)";
      case errc::not_found: return "no box of that name: create it first (shmbox create NAME)";
      case errc::permission_denied:
        return "permission denied: the box belongs to another user or its mode does not let you in (see --mode)";
      case errc::no_space: return "no room in /dev/shm for the box: free space there or make the box smaller";
      case errc::too_large: return "the box would exceed the size limits: lower --capacity or --slot-size";
      case errc::not_a_box: return "the segment is not a shmbox box: remove it if it is stale (shmbox rm NAME)";
      case errc::version_mismatch:
        return "the box was made by an incompatible shmbox version: use that version or recreate the box";
      case errc::truncated: return "the segment is shorter than its header says: it is damaged; remove and recreate it";
      case errc::corrupt: return "the segment is corrupt: its contents break shmbox's invariants; remove and recreate it";
      case errc::incomplete:
        return "the box is still being created or its creator died half-way: retry, or remove it (shmbox rm NAME)";
      case errc::not_owner: return "not the owner: another live process owns the box (see shmbox stat NAME)";
      case errc::already_owner: return "this process already holds an Owner handle for the box: use that one";
      case errc::producer_table_full:
        return "every producer entry is held by a live process: create the box with more --max-producers";
      case errc::heir_table_full: return "every heir entry is held by a live process: withdraw an heir first";
      case errc::timed_out: return "timed out: nothing happened before the timeout";
      case errc::system_error: return "unexpected system error";
      case errc::refused: return "refused: the owner does not do what was asked (see shmbox stat NAME)";
      case errc::no_members_starting:
        return "no member is free; one is being started: take again, or take with a timeout to wait for it";
      case errc::no_members_at_capacity:
        return "no member is free and the pool has max_count members: take with a timeout to queue, or raise max_count";
      case errc::no_members_queue_full:
        return "no member is free and queue_max takers are waiting already: retry later, or raise queue_max";
      case errc::pool_removed: return "the pool is being removed: no new takes (see shmbox pool stat NAME)";
      case errc::pool_clients_full:
        return "every client entry of the pool is held by a live process: close Pool handles or raise max_clients";
      case errc::stash_full:
        return "the stash has no room for it (all entries parked, or its lane would be left no room): unstash first";
      case errc::buffer_unknown:
        return "the box uses a custom buffer this process has not registered: call shmbox::register_buffer first";
      case errc::buffer_broken:
        return "the box's custom buffer broke its contract (see shmbox/buffer.hpp); it was rebuilt from the store";
      case errc::inherited_handle:
        return "the handle was made by another process (a fork child inherits its parent's handles, not its roles): "
               "open, attach or enlist handles of its own in the child";
    }
    return "unknown shmbox error";
  }
};

}  // namespace

const std::error_category& category() noexcept {
  static const shmbox_category c;
  return c;
}

std::string explain(std::error_code ec) {
  if (ec && ec == t_last.ec && t_last.length > 0) return std::string(t_last.sentence, t_last.length);
  return ec.message();
}

namespace detail {

std::error_code fail(errc e, std::string sentence) {
  t_last.ec = make_error_code(e);
  const std::size_t n = std::min(sentence.size(), sizeof t_last.sentence - 1);
  std::memcpy(t_last.sentence, sentence.data(), n);
  t_last.sentence[n] = '\0';
  t_last.length = n;
  return t_last.ec;
}

std::error_code fail_errno(int err, const std::string& what) {
  errc e = errc::system_error;
  switch (err) {
    case ENOENT: e = errc::not_found; break;
    case EEXIST: e = errc::exists; break;
    case EACCES:
    case EPERM: e = errc::permission_denied; break;
    case ENOSPC:
    case EFBIG:
    case ENOMEM: e = errc::no_space; break;
    case ENAMETOOLONG:
    case EINVAL: e = errc::invalid_argument; break;
    default: break;
  }
  return fail(e, what + ": " + std::strerror(err) + " (" + make_error_code(e).message() + ")");
}

}  // namespace detail
}  // namespace shmbox
