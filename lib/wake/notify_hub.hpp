// lib/wake/notify_hub.hpp - THE NOTIFY HUB: the one helper thread a process runs
// for all of its Owner handles' notify_fd()s, however many boxes it owns.
//
// An owner in an event loop waits on its notify_fd (an eventfd). Whoever
// wakes the owner makes that descriptor readable:
//   1. a producer (P6) or a give-away requester that may take the owner's
//      descriptor (pidfd_getfd: same user, same pid namespace) writes the
//      eventfd itself: no thread is involved at all;
//   2. one that may not (another user, another container) rings the owner
//      process's DOORBELL: a FIFO, /dev/shm/shmbox-bell.<owner key in hex>,
//      mode 0622, into which it writes one record naming the box's file
//      (DOORBELL RECORDS below: one atomic write). The hub thread reads the
//      doorbell and writes the eventfd of the box so named, if its handle
//      waits to be told (bell_rings counts these, in the owner record). A
//      FIFO in /dev/shm reaches the owner from any user and any pid, user or
//      network namespace that shares /dev/shm, as the boxes do;
//   3. nobody (a producer that died between publishing and waking, P5-P6; a
//      ring that never reached the hub: a full, missing or refused doorbell,
//      a record another reader took): the hub's SCAN finds it. Every kScanNs
//      the hub looks at the next registered boxes (kScanBudgetNs): one whose
//      Owner handle waits to be told (its hub_watch, below: armed and not yet
//      told by the hub for this arming) with messages waiting at this look
//      and the one before, the same arming at both, no wake-up between them
//      and its notify_fd not left unread; a give-away request not yet
//      signalled; or (after a doorbell overflow) a wake_seq that moved: it
//      writes that box's eventfd (or fires its tag). What the handle waits
//      for is read from the handle, not from the owner record: a producer
//      that woke the owner has set the record back to passive already
//      (pobox), also when its ring was lost, and a scan that looked at the
//      record skipped exactly the boxes whose wake-up went missing (issue
//      53: a box stuck until its owner exited). (Two looks, not one: a
//      producer between its ring and its revert of notify to passive,
//      wake.cpp, may have told the owner already through its eventfd.)
// So one thread serves 10,000 boxes: it sleeps in epoll_wait on the doorbell
// and wakes for a ring or for the scan (a few loads per box; with no box
// registered it sleeps without a timeout).
//
// The doorbell is created under a temporary name (<name>.new), opened for
// reading (and once for writing, so that it never reads end-of-file), then
// renamed into place: its name never exists without a reader. The hub reads
// only that FIFO, and only once it has seen that it is the one it just made:
// the inode mkfifo made, its own uid's, writable by nobody else; a file
// another user put at the temporary name (or the name) stays theirs (the
// sticky /dev/shm keeps the hub from removing or replacing it), and the hub
// has no doorbell then. After the rename, the name must be its FIFO.
//   It exists while the process has a notify owner: the first notify_fd()
// makes it, and it goes with the last such Owner handle (hub_remove unlinks
// and closes it before it returns; a waker still holding it gets EPIPE and
// opens the name again, ring_bell), or at exit. So a forked owner that
// drops its handles and _exits leaves nothing. One that was killed (or
// _exits holding an Owner) leaves it, and `shmbox gc` removes every
// doorbell nobody reads (opening one for writing fails with ENXIO). A
// doorbell name taken by someone else (another user's file in the sticky
// /dev/shm) leaves the hub without one: route 3 still works (and wakers
// refuse a FIFO of an untrusted uid at the name: ring_bell).
//
// A fork child starts its own hub (its own key, its own doorbell) when it
// first calls notify_fd(); it inherits none of the parent's registrations.
//
// NOTIFY GROUPS (shmbox::NotifyGroup, Owner::join): one eventfd for many
// owners, and the names of those that fired. A member has no eventfd of its
// own: its owner record says kNotifyByBell instead of a descriptor number,
// so every waker rings the doorbell (route 2: it names the box), and the hub
// turns a ring, or its scan's finding (route 3), into the member's tag on
// the group's ready list and one write of the group's eventfd. So an owned
// box in a group costs no descriptor beyond its segment's, and a process
// can own 10,000 boxes within 20,000 descriptors; a wake-up takes one
// thread hop more than a notify_fd's written by its waker (route 1).
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "segment/segment.hpp"

namespace shmbox::detail {

#pragma GCC visibility push(hidden)

// The scan (route 3): every kScanNs, the next registered boxes, round robin,
// for at most kScanBudgetNs. Looking at an idle box costs a few cache and
// TLB misses (its owner record and lane header pages, each box a mapping of
// its own: about 1-5 us in a VM with nested paging, far less on bare metal),
// so the scan is budgeted in time, not in boxes: 0.2 ms of CPU per second
// whatever their number. A wake-up nobody delivered (a producer killed
// between publishing and waking; the next post wakes the owner anyway) is
// found at the second look at its box: within 2 s while a round sees all
// boxes (up to a few hundred boxes, measured: bench/boxes.cpp), and within
// about 2 x boxes x cost-per-box / 0.2 ms seconds beyond.
constexpr std::uint64_t kScanNs = 1'000'000'000;
constexpr std::uint64_t kScanBudgetNs = 200'000;

// DOORBELL RECORDS. A ring is one write(2) of one record, a line:
//   '\n' 'B' <dev: 1-16 lowercase hex digits> ':' <ino: the same> '\n'
// Anyone may write into a doorbell (mode 0622), any number of bytes. A
// write of at most PIPE_BUF bytes into a FIFO is atomic: its bytes lie
// together in the FIFO, never mixed with another writer's. So a genuine
// record is a line of its own whatever is written around it: its leading
// '\n' ends whatever came before, its trailing '\n' ends it, and nothing
// inside it is a '\n'. The hub (bell_reader) takes each line that is a
// record and drops every other line (garbage; one longer than a record is
// dropped up to its end): odd-sized writes cannot shift a genuine record
// out of place, as they did to the fixed 16-byte binary records before
// (issue 53: the genuine record after one 3-byte write was read as garbage).
// Not a magic and a check found by scanning byte by byte: the check would
// be public (every producer computes it), so a writer who knows a box's dev
// and ino (stat) could write a prefix that the next genuine record's first
// bytes complete into a valid record; the scan takes it and starts after
// the genuine record's start, which is lost. Delimiters leave no record
// that spans another's bytes. A record is still only a hint, forged for
// free: the hub acts on one only for a box its handle waits on, and a
// forged one costs that owner one spurious wake-up (its wait() looks at
// the box and says none). A ring that does not arrive (a full doorbell, a
// record another reader took) is the scan's (route 3).
//   Changed from the binary records of earlier builds (same name): a ring
// of an earlier producer is garbage to this hub, and this producer's to an
// earlier hub; across builds the wake-up comes from this hub's scan.
struct bell_record {  // what a record names: the box's segment file
  std::uint64_t dev = 0;
  std::uint64_t ino = 0;
};
inline constexpr std::size_t kBellLineMax = 1 + 16 + 1 + 16;  // 'B', dev, ':', ino
inline constexpr std::size_t kBellRecordMax = kBellLineMax + 2;  // with the two '\n'
static_assert(kBellRecordMax <= 512, "a ring must be one atomic write: at most PIPE_BUF (512 bytes in POSIX)");

// Writes the record naming `r` into `out`; its length.
std::size_t format_bell_record(const bell_record& r, char (&out)[kBellRecordMax]) noexcept;

// The hub's side of DOORBELL RECORDS: splits the bytes read from a
// doorbell, across reads, into lines, and hands out those that are records.
class bell_reader {
 public:
  // Feeds `n` bytes; calls on_record(const bell_record&) for each record
  // line they complete.
  template <typename F>
  void feed(const char* bytes, std::size_t n, F&& on_record) {
    for (std::size_t i = 0; i < n; ++i) {
      const char c = bytes[i];
      if (c == '\n') {
        bell_record r;
        if (!overlong_ && parse(line_, len_, r)) on_record(r);
        len_ = 0;
        overlong_ = false;
      } else if (len_ < kBellLineMax) {
        line_[len_++] = c;
      } else {
        overlong_ = true;  // not a record, whatever follows: dropped up to its '\n'
      }
    }
  }
  // Forgets a partial line (a new doorbell).
  void reset() noexcept {
    len_ = 0;
    overlong_ = false;
  }
  // Whether line[0, len) (no '\n') is a record; if so, what it names.
  static bool parse(const char* line, std::size_t len, bell_record& out) noexcept;

 private:
  char line_[kBellLineMax] = {};
  std::size_t len_ = 0;
  bool overlong_ = false;
};

// The doorbell of the owner process with key `key` ("/dev/shm/shmbox-bell.<hex>"),
// and its name in /dev/shm ("shmbox-bell.<hex>").
std::string bell_path(std::uint64_t key);
std::string bell_entry(std::uint64_t key);
// "/<entry>": the name of /dev/shm/<entry> as open_shm_file() takes it.
std::string bell_shm_name(std::string_view entry);
// The prefix every doorbell name has in /dev/shm (for gc and ls).
inline constexpr const char* kBellPrefix = "shmbox-bell.";

// A notify group (NOTIFY GROUPS): its eventfd and the tags that fired.
struct notify_group_state {
  int efd = -1;
  std::mutex mu;
  std::vector<std::uint64_t> ready;         // tags fired since the last take(), each once
  std::unordered_set<std::uint64_t> queued;  // ... and as a set
  ~notify_group_state();
  // Puts `tag` on the ready list (once) and makes efd readable.
  void fire(std::uint64_t tag) noexcept;
  // Drains efd and moves the ready list to the end of `out`; how many.
  std::size_t take(std::vector<std::uint64_t>& out);
};

// What an Owner handle waits to be told, published for its hub (route 3):
// 0 while nothing (passive; or its arming found messages at once and told
// itself, `due`), else (its arming's generation << 1) | 1 until its wait()
// reports the notification or delivery. A new generation for every arming
// (notify(), active()): the scan never tells an arming the hub has told
// already (through a ring, or an earlier scan). Written by the Owner's
// thread, read by the hub's.
using hub_watch = std::atomic<std::uint32_t>;

// Registers owner handle `efd` (its notify_fd) of box `m`, owned as (key,
// epoch), with this process's hub, starting the hub on first use; or, with
// `group`, a member of that group with `tag` (efd -1). `watch`: the handle's
// hub_watch (it outlives the registration). Returns the registration
// (non-zero), or 0 if the hub thread cannot be started (then the caller
// reports the error).
std::uint64_t hub_add(mapped_box& m, int efd, std::uint64_t key, std::uint64_t epoch, const hub_watch* watch,
                      notify_group_state* group = nullptr, std::uint64_t tag = 0) noexcept;
// Removes it: once this returns, the hub never touches its efd or group again.
void hub_remove(std::uint64_t registration) noexcept;

// How many scans (route 3) this process's hub has made (0: no hub yet).
// For tests: a scan happened between two calls that differ.
std::uint64_t hub_scans() noexcept;

// Rings the doorbell of the owner with key `key` for box `m`, through a
// descriptor this process keeps open for that key (a few keys are kept; one
// whose reader went is opened again). False when there is no doorbell to
// ring (or it is full), or the FIFO at its name is not to be trusted: the
// key comes from a segment others can write, and anyone can make a FIFO at
// a name in /dev/shm that is still free, or hold the name before its owner
// does. THE TRUST RULE T3 (shm_file.hpp) for a doorbell: its owner uid
// must be the box segment's owner, root, or this process's (euid): the
// uid of the owner process itself is recorded nowhere a waker can trust (a
// segment writer may write any key, pid or uid into the owner record). A
// FIFO of another uid is not written (its planter would take the wake-up
// and learn of it), refused, and counted in the owner record
// (bell_refused); the owner's scan (route 3) wakes it instead. So an owner
// whose uid is none of these (another user's box) is woken by its scan,
// not its doorbell, by a producer of a third user.
bool ring_bell(const mapped_box& m, std::uint64_t key) noexcept;

// The doorbells in /dev/shm that nobody reads (their process is gone): their
// file names; removed unless `dry_run`. Only what remove_unread_bell proves.
std::vector<std::string> collect_bells(bool dry_run);

// Removes /dev/shm/<entry> (unless `dry_run`) if it is proven a doorbell
// that nobody reads: named kBellPrefix + 16 hex digits (+ ".new", make_bell's
// temporary name), a FIFO (never followed), mode 0622 as make_bell leaves it
// (0600 or less for a temporary one), with no reader (an open for writing
// fails with ENXIO), and still that file just before the unlink. Anything
// else at such a name (a FIFO of another mode, a link, a directory, ...)
// is left alone. Whose it is is not asked: an unread doorbell is garbage
// whoever made it (its hub is gone), and only its owner or root may unlink
// it in the sticky /dev/shm. True if it was (or, dry run, would be) removed.
bool remove_unread_bell(std::string_view entry, bool dry_run) noexcept;

#pragma GCC visibility pop

}  // namespace shmbox::detail
