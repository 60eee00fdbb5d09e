// fuzz/segment_fuzz.cpp - libFuzzer harness: open, verify, inspect, own,
// receive from and post into a box whose segment holds arbitrary bytes.
//
// At start-up a child process creates a few real boxes through the public API
// (several policies, lanes, lease, dead letters, heirs), leaves them in
// interesting states (messages queued, an owner that read without
// committing, producers and heirs that never detached) and exits, so every
// process key in the templates names a dead process. The parent snapshots the
// segments' bytes as templates and removes them.
//
// Input format (every field optional; missing bytes read as 0):
//   byte 0     bits 0..2: template index (mod the number of templates);
//              bit 3 (kShortWaits): timeouts of 1 ms instead of 0;
//              bit 4 (kNotifyFd): the owner makes its notify eventfd;
//              bit 5 (kByName): acquire/attach/enlist by name, not by handle
//   byte 1     which calls to make (kDo* bits below); 0 means "all but
//              kDoPostFirst and kDoTruncate"
//   then       patches, each: u32 offset (little endian, mod the segment
//              size), u8 length, `length` bytes written at offset (clipped;
//              bytes past the end of the input read as 0)
//   with kDoTruncate, the first 4 bytes after byte 1 are a u32 giving the
//   segment size (mod template size, at least 1) before the patches.
//
// Each input is written to /dev/shm/shmbox.fuzz-<pid> (and, for a template
// with dead letters, a fresh box fuzz-<pid>.dl is created), then the calls
// run, with zero (or 1 ms) timeouts, in one process, and both segments are
// removed. Errors and exceptions are fine; a crash, a sanitizer report or a
// hang is a bug. Every pid the library reads from the segment is only
// looked up (/proc/<pid>/stat, pidfd_open); the harness never signals one.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "segment/layout.hpp"  // lib/: header field offsets, kMagic, kReady
#include "shmbox/shmbox.hpp"

namespace {

using namespace std::chrono_literals;
namespace sb = shmbox;

constexpr std::uint8_t kDoInspect = 1u << 0;   // Box::inspect + info/read_counters/...
constexpr std::uint8_t kDoVerify = 1u << 1;    // shmbox::verify
constexpr std::uint8_t kDoOwner = 1u << 2;     // Owner::acquire + receives + read/commit + deliver + states
constexpr std::uint8_t kDoProducer = 1u << 3;  // Producer::attach + posts into every lane
constexpr std::uint8_t kDoHeir = 1u << 4;      // Heir::enlist/listen first, await_transfer once the owner left
constexpr std::uint8_t kDoPostFirst = 1u << 5; // producer before owner
constexpr std::uint8_t kDoList = 1u << 6;      // Box::list + shmbox::collect (dry run, own prefix)
constexpr std::uint8_t kDoTruncate = 1u << 7;  // change the segment's size
// Byte 0: bits 0..2 pick the template (mod their number), then:
constexpr std::uint8_t kShortWaits = 1u << 3;  // posts, receives and waits time out after 1 ms instead of 0
                                               // (long enough for the repairs of dead holders to run)
constexpr std::uint8_t kNotifyFd = 1u << 4;    // Owner::notify_fd(): eventfd + waker thread
constexpr std::uint8_t kByName = 1u << 5;      // Owner::acquire/Producer::attach/Heir::enlist by name

struct template_seg {
  const char* what;
  bool dead_letters;
  std::vector<std::uint8_t> bytes;
};

std::vector<template_seg> g_templates;
std::string g_name;     // fuzz-<pid>
std::string g_dl_name;  // fuzz-<pid>.dl (the dead-letter box the templates name)

// While an input runs, sleeps return at once (see nanosleep below), unless
// SEGMENT_FUZZ_REAL_SLEEP is set.
thread_local bool g_in_input = false;
const bool g_real_sleep = std::getenv("SEGMENT_FUZZ_REAL_SLEEP") != nullptr;

// SEGMENT_FUZZ_TRACE=1: print each step and how long it took (to find slow or hanging calls).
const bool g_trace = std::getenv("SEGMENT_FUZZ_TRACE") != nullptr;

struct step {
  const char* what;
  std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
  explicit step(const char* w) : what(w) {
    if (g_trace) std::fprintf(stderr, "segment_fuzz: %s ...\n", what);
  }
  ~step() {
    if (g_trace)
      std::fprintf(stderr, "segment_fuzz: %s: %.3f ms\n", what,
                   std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
};

std::string shm_file(const std::string& box) { return "/shmbox." + box; }

void remove_segments() {
  ::shm_unlink(shm_file(g_name).c_str());
  ::shm_unlink(shm_file(g_dl_name).c_str());
}

void cleanup_at_exit() { remove_segments(); }

void die(const char* what) {
  std::fprintf(stderr, "segment_fuzz: %s\n", what);
  remove_segments();
  std::_Exit(1);
}

// --- templates (built in a child process, which then exits) ----------------

void post_some(sb::Producer& p, std::uint32_t lane, int n, const char* tag) {
  for (int i = 0; i < n; ++i) {
    const std::string msg = std::string(tag) + "-" + std::to_string(lane) + "-" + std::to_string(i);
    (void)p.post(msg, {.lane = lane, .timeout = 0ns});
  }
}

// Runs in the child: builds box `name` in state number `which`, then returns
// WITHOUT destroying the handles that must look like a dead process's (the
// child _exit()s right after).
void build_template(int which, const std::string& name, const std::string& dl_name) {
  sb::options o;
  o.max_producers = 2;
  o.block_timeout = 0ms;
  switch (which) {
    case 0: {  // reject, FIFO; an owner that read one message and died before commit
      o.capacity = 4;
      o.slot_size = 24;
      o.overflow = sb::policy::reject;
      auto box = sb::Box::create(name, o);
      if (!box) std::_Exit(10);
      auto p = sb::Producer::attach(*box);
      if (!p) std::_Exit(11);
      post_some(*p, 0, 6, "r");  // 4 stored, 2 rejected
      auto own = sb::Owner::acquire(*box);
      if (!own) std::_Exit(12);
      sb::message m;
      (void)own->try_receive(m);  // committed
      sb::batch b;
      (void)own->read(b, {.max = 1, .timeout = 0ns});  // read, not committed
      new sb::Producer(std::move(*p));  // leaked on purpose: the entry stays held
      new sb::Owner(std::move(*own));
      return;
    }
    case 1: {  // three lanes (control, drop_oldest, lifo), lease, dead letters, heirs
      o.capacity = 4;
      o.slot_size = 40;
      o.overflow = sb::policy::drop_newest;
      o.max_producers = 3;
      o.lease = 50ms;
      o.lanes = {sb::lane_options{2, std::nullopt}, sb::lane_options{3, sb::policy::drop_oldest},
                 sb::lane_options{4, sb::policy::lifo}};
      o.dead_letters = dl_name;
      auto box = sb::Box::create(name, o);
      if (!box) std::_Exit(20);
      auto heir = sb::Heir::enlist(*box, "heir-data");
      auto listener = sb::Heir::listen(*box);
      auto p = sb::Producer::attach(*box);
      if (!p) std::_Exit(21);
      post_some(*p, 0, 3, "c");
      post_some(*p, 1, 5, "d");
      post_some(*p, 2, 6, "l");
      auto own = sb::Owner::acquire(*box);
      if (!own) std::_Exit(22);
      sb::message m;
      (void)own->try_receive(m);
      (void)own->try_receive(m);
      sb::batch b;
      (void)own->read(b, {.max = 2, .timeout = 0ns});  // lifo + drop_oldest messages held uncommitted
      own->notify();
      if (heir) new sb::Heir(std::move(*heir));
      if (listener) new sb::Heir(std::move(*listener));
      new sb::Producer(std::move(*p));
      new sb::Owner(std::move(*own));
      return;
    }
    case 2: {  // lifo, capacity not a power of two; the owner released the box properly
      o.capacity = 5;
      o.slot_size = 16;
      o.overflow = sb::policy::lifo;
      auto box = sb::Box::create(name, o);
      if (!box) std::_Exit(30);
      auto p = sb::Producer::attach(*box);
      if (!p) std::_Exit(31);
      post_some(*p, 0, 8, "s");  // 3 replacements
      {
        auto own = sb::Owner::acquire(*box);
        if (!own) std::_Exit(32);
        std::vector<sb::message> got;
        (void)own->receive_batch(got, {.max = 2, .timeout = 0ns});
      }  // released
      post_some(*p, 0, 1, "t");
      auto heir = sb::Heir::enlist(*box, "next");
      if (heir) new sb::Heir(std::move(*heir));
      return;  // the producer detaches (destructor)
    }
    case 3: {  // block, two lanes, never owned
      o.capacity = 3;
      o.slot_size = 8;
      o.overflow = sb::policy::block;
      o.block_timeout = 10ms;
      o.lease = 1000ms;
      o.lanes = {sb::lane_options{}, sb::lane_options{2, sb::policy::reject}};
      auto box = sb::Box::create(name, o);
      if (!box) std::_Exit(40);
      auto p = sb::Producer::attach(*box);
      if (!p) std::_Exit(41);
      post_some(*p, 0, 4, "b");
      post_some(*p, 1, 3, "q");
      return;
    }
    case 4: {  // drop_oldest with many evictions, ring wrapped several times; a committed-read owner alive at exit
      o.capacity = 2;
      o.slot_size = 1;
      o.overflow = sb::policy::drop_oldest;
      o.max_producers = 1;
      auto box = sb::Box::create(name, o);
      if (!box) std::_Exit(50);
      auto p = sb::Producer::attach(*box);
      if (!p) std::_Exit(51);
      for (int i = 0; i < 9; ++i) (void)p->post(std::string(1, static_cast<char>('a' + i)), {.timeout = 0ns});
      auto own = sb::Owner::acquire(*box);
      if (!own) std::_Exit(52);
      sb::message m;
      (void)own->try_receive(m);
      (void)p->post("z", {.timeout = 0ns});
      new sb::Owner(std::move(*own));
      return;
    }
    default: {  // fresh, untouched, eight lanes
      o.capacity = 1;
      o.slot_size = 1;
      o.max_producers = 1;
      o.lanes.assign(sb::kMaxLanes, sb::lane_options{});
      auto box = sb::Box::create(name, o);
      if (!box) std::_Exit(60);
      return;
    }
  }
}

constexpr int kTemplateCount = 6;
const char* const kTemplateWhat[kTemplateCount] = {"reject+dead reader", "lanes+lease+dead-letters+heirs", "lifo+released",
                                                   "block+2 lanes",    "drop-oldest wrapped",           "fresh 8 lanes"};

std::vector<std::uint8_t> read_segment(const std::string& box) {
  std::vector<std::uint8_t> out;
  const int fd = ::shm_open(shm_file(box).c_str(), O_RDONLY | O_CLOEXEC, 0);
  if (fd < 0) return out;
  struct stat st {};
  if (::fstat(fd, &st) == 0 && st.st_size > 0) {
    out.resize(static_cast<std::size_t>(st.st_size));
    std::size_t done = 0;
    while (done < out.size()) {
      const ssize_t n = ::pread(fd, out.data() + done, out.size() - done, static_cast<off_t>(done));
      if (n <= 0) break;
      done += static_cast<std::size_t>(n);
    }
    out.resize(done);
  }
  ::close(fd);
  return out;
}

void build_templates() {
  const std::string parent = std::to_string(::getpid());
  std::vector<std::string> names;
  for (int i = 0; i < kTemplateCount; ++i) names.push_back(g_name + ".tpl" + std::to_string(i));
  for (const auto& n : names) ::shm_unlink(shm_file(n).c_str());
  const pid_t child = ::fork();
  if (child < 0) die("fork failed");
  if (child == 0) {
    for (int i = 0; i < kTemplateCount; ++i) build_template(i, names[static_cast<std::size_t>(i)], g_dl_name);
    std::_Exit(0);  // no destructors: held entries stay held by a dead process
  }
  int status = 0;
  while (::waitpid(child, &status, 0) < 0) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    for (const auto& n : names) ::shm_unlink(shm_file(n).c_str());
    std::fprintf(stderr, "segment_fuzz: template child failed (status %d)\n", status);
    die("cannot build templates");
  }
  for (int i = 0; i < kTemplateCount; ++i) {
    auto bytes = read_segment(names[static_cast<std::size_t>(i)]);
    ::shm_unlink(shm_file(names[static_cast<std::size_t>(i)]).c_str());
    if (bytes.size() < sizeof(shmbox::detail::segment_header)) die("template segment missing");
    g_templates.push_back({kTemplateWhat[i], i == 1, std::move(bytes)});
  }
}

// --- one input --------------------------------------------------------------

struct reader {
  const std::uint8_t* p;
  std::size_t n;
  std::size_t at = 0;
  bool more() const { return at < n; }
  std::uint8_t u8() { return at < n ? p[at++] : 0; }
  std::uint32_t u32() {
    std::uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= std::uint32_t{u8()} << (8 * i);
    return v;
  }
};

bool write_segment(const std::vector<std::uint8_t>& bytes) {
  const int fd = ::shm_open(shm_file(g_name).c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n <= 0) break;
    done += static_cast<std::size_t>(n);
  }
  ::close(fd);
  return done == bytes.size();
}

// Box::open waits up to 1 s for a segment whose `ready` word is not set and
// whose creator is alive or unknown (key 0): a box being created. That wait
// is by design, so such inputs are not run (they would only be slow).
bool would_wait_for_creator(const std::vector<std::uint8_t>& seg) {
  using shmbox::detail::segment_header;
  if (seg.size() < sizeof(segment_header)) return false;
  std::uint64_t magic, creator;
  std::uint32_t ready;
  std::memcpy(&magic, seg.data() + offsetof(segment_header, magic), 8);
  std::memcpy(&ready, seg.data() + offsetof(segment_header, ready), 4);
  std::memcpy(&creator, seg.data() + offsetof(segment_header, creator_key), 8);
  if (ready == shmbox::detail::kReady) return false;
  if (magic != 0 && magic != shmbox::detail::kMagic) return false;  // foreign: refused at once
  if (creator == 0) return true;
  const auto pid = static_cast<unsigned>(creator & ((1ull << 22) - 1));
  if (pid == 0) return true;
  char path[32];
  std::snprintf(path, sizeof path, "/proc/%u", pid);
  return ::access(path, F_OK) == 0;  // it may be alive (the library also checks its start time)
}

void touch_info(const sb::box_info& i) {
  volatile std::size_t sink = i.name.size() + i.heirs.size() + i.lanes.size() + i.dead_letters.size() +
                              i.owner.state.size() + i.last_transfer.data.size() + i.depth + i.count.posted;
  for (const auto& h : i.heirs) sink = sink + h.data.size();
  (void)sink;
}

void do_inspect() {
  step st("inspect");
  auto box = sb::Box::inspect(g_name);
  if (!box) return;
  (void)box->name();
  (void)box->capacity();
  (void)box->lane_count();
  (void)box->slot_size();
  (void)box->overflow();
  (void)box->depth_approx();
  (void)box->read_counters();
  touch_info(shmbox::info(*box));
  std::size_t bytes = 0;  // shmbox dump: lengths and positions come from the segment
  for (const auto& m : shmbox::peek(*box, 64)) bytes += m.data.size() + m.lane;
  (void)bytes;
  // Read-only handles must refuse to own, post or ask for a give-away, whatever the segment says.
  (void)sb::Owner::acquire(*box);
  (void)sb::Producer::attach(*box);
  (void)box->request_give_away(static_cast<std::uint32_t>(::getpid()), 0ns);
}

// Options from the high bits of byte 0.
struct plan {
  std::uint8_t what = 0;
  std::chrono::nanoseconds wait{0};  // timeout of posts, receives, waits: 0, or 1 ms with kShortWaits
  bool notify_fd = false;
  bool by_name = false;
};

void owner_calls(sb::Owner& own, const plan& pl) {
  step st("owner calls");
  (void)own.transfer();
  (void)own.epoch();
  (void)own.usage();
  (void)own.mode();
  sb::message m;
  for (int i = 0; i < 8; ++i)
    if (own.try_receive(m) != sb::recv_status::ok) break;
  sb::batch b;
  if (own.read(b, {.max = 3, .timeout = pl.wait}) == sb::recv_status::ok) {
    for (std::size_t i = 0; i < b.size(); ++i) (void)b[i].size();
    std::size_t lost = 0;
    (void)own.commit(&lost);
  }
  (void)own.commit();  // nothing pending
  std::vector<sb::message> v;
  (void)own.receive_batch(v, {.max = 4, .timeout = pl.wait});
  b.clear();
  (void)own.receive_batch(b, {.max = 2, .timeout = 0ns});
  (void)own.receive(m, {.timeout = pl.wait});
  (void)own.receive(m, {.timeout = pl.wait, .spin = 0ns});
  std::size_t seen = 0;  // zero-copy: the views point into the (scribbled) segment
  (void)own.receive_in_place([&seen](const sb::message_view& v) { seen += v.data.size(); }, {.max = 4, .timeout = pl.wait});
  sb::delivery d;
  int n = 0;
  (void)own.deliver(d, 4, [&n](std::string& s) {
    ++n;
    if (n % 3 == 0) return sb::filter_verdict::skip;
    if (n % 2 == 0) return sb::filter_verdict::drop;
    s += "!";
    return sb::filter_verdict::deliver;
  });
  own.active({}, 2);
  (void)own.wait(d, 0ns);
  own.passive();
  own.renew();
  (void)own.give_away(static_cast<std::uint32_t>(::getpid()), "self", 0ns);  // refused at once: we are the owner
  own.accept_give_away_requests(true);  // a request the segment may hold is served by the next receive
  (void)own.try_receive(m);
  own.accept_give_away_requests(false);
  (void)own.last_error();
  (void)own.usage();
  own.notify();  // armed while the producer posts: producers wake us (futex, eventfd)
}

void producer_calls(const sb::Box& box, const plan& pl) {
  step st("producer");
  auto p = pl.by_name ? sb::Producer::attach(g_name) : sb::Producer::attach(box);
  if (!p) return;
  const std::uint32_t max = p->max_message_size();
  (void)p->entry_index();
  std::string big(static_cast<std::size_t>(max) + 1, 'x');
  if (max <= 4096) (void)p->post(big, {.timeout = pl.wait});  // too large
  for (std::uint32_t lane = 0; lane <= box.lane_count(); ++lane) {  // the last lane does not exist
    for (int i = 0; i < 3; ++i) {
      const std::string msg = "m" + std::to_string(lane) + std::to_string(i);
      (void)p->post(msg.substr(0, std::min<std::size_t>(msg.size(), max)), {.lane = lane, .timeout = pl.wait});
    }
  }
  (void)p->post("", {.timeout = pl.wait});
  // Zero-copy posts: one committed, one aborted, one too large to commit.
  for (std::uint32_t lane = 0; lane <= box.lane_count(); ++lane) {
    sb::slot_loan l = p->loan({.lane = lane, .timeout = pl.wait});
    if (l) {
      const std::size_t n = std::min<std::size_t>(l.capacity(), 5);
      std::memcpy(l.data(), "loans", n);
      (void)l.commit(static_cast<std::size_t>(l.capacity()) + 1);  // too large: still open
      (void)l.commit(n);
    }
    sb::slot_loan a = p->loan({.lane = lane, .timeout = pl.wait});
    a.abort();
  }
  // A batch through runs of free slots (and past the end of the box's lanes).
  const std::string_view batch[] = {"b0", "b1", "b2", "b3", "b4", std::string_view(big.data(), big.size())};
  sb::post_status why{};
  (void)p->post_batch(batch, {.timeout = pl.wait}, &why);
  (void)p->post_batch(batch, {.lane = box.lane_count(), .timeout = pl.wait}, &why);
  (void)p->last_error();
  (void)box.request_give_away(static_cast<std::uint32_t>(::getpid()), 0ns);  // owner and heirs from the segment
}

// Heirs enlist first, then an owner receives while a producer posts; the
// owner leaves and the heir takes the box over.
void session(const sb::Box& box, const plan& pl) {
  const std::uint8_t what = pl.what;
  std::optional<sb::Heir> heir, listener;
  if (what & kDoHeir) {
    step st("enlist");
    auto h = pl.by_name ? sb::Heir::enlist(g_name, "fuzz-heir") : sb::Heir::enlist(box, "fuzz-heir");
    if (h) heir.emplace(std::move(*h));
    auto l = pl.by_name ? sb::Heir::listen(g_name) : sb::Heir::listen(box);
    if (l) listener.emplace(std::move(*l));
    if (heir) (void)heir->position();
    if (listener) (void)listener->position();
  }
  std::optional<sb::Owner> own;
  if (what & kDoOwner) {
    step st("Owner::acquire");
    auto o = pl.by_name ? sb::Owner::acquire(g_name) : sb::Owner::acquire(box);
    if (o) own.emplace(std::move(*o));
    if (own && pl.notify_fd) (void)own->notify_fd();
  }
  if ((what & kDoPostFirst) && (what & kDoProducer)) producer_calls(box, pl);
  if (own) owner_calls(*own, pl);
  if (!(what & kDoPostFirst) && (what & kDoProducer)) producer_calls(box, pl);
  if (own) {
    step st("owner again");
    sb::delivery d;
    (void)own->wait(d, pl.wait);  // notified (the producer posted), or none
    own->active();
    (void)own->wait(d, pl.wait);
    sb::message m;
    for (int i = 0; i < 8; ++i)
      if (own->receive(m, {.timeout = pl.wait}) != sb::recv_status::ok) break;
    own.reset();  // releases the box: wakes the heir (its eventfd, through pidfd_getfd)
  }
  if (heir) {
    step st("heir");
    auto o = heir->await_transfer(pl.wait);  // ours if the owner is gone and we are first in line
    if (o) {
      (void)o->transfer();
      sb::message m;
      (void)o->try_receive(m);
      (void)o->usage();
    }
  }
  if (listener) {
    step st("listener");
    (void)listener->await_transfer(0ns);
  }
}

int run_one(const std::uint8_t* data, std::size_t size) {
  if (g_templates.empty()) return 0;
  struct in_input {
    in_input() { g_in_input = true; }
    ~in_input() { g_in_input = false; }
  } mark;
  reader in{data, size};
  const std::uint8_t pick = in.u8();
  const template_seg& t = g_templates[(pick & 7u) % g_templates.size()];
  plan pl;
  pl.wait = (pick & kShortWaits) ? std::chrono::nanoseconds(1ms) : 0ns;
  pl.notify_fd = (pick & kNotifyFd) != 0;
  pl.by_name = (pick & kByName) != 0;
  std::uint8_t what = in.u8();
  if (what == 0) what = 0xFF & ~kDoTruncate & ~kDoPostFirst;  // no flags: everything, in the usual order
  pl.what = what;
  std::vector<std::uint8_t> seg = t.bytes;
  if (what & kDoTruncate) {
    const std::size_t n = in.u32() % seg.size();
    seg.resize(n == 0 ? 1 : n);
  }
  while (in.more()) {
    const std::uint32_t off = in.u32() % static_cast<std::uint32_t>(seg.size());
    const std::size_t len = in.u8();
    for (std::size_t i = 0; i < len && off + i < seg.size(); ++i) seg[off + i] = in.u8();
  }
  if (would_wait_for_creator(seg)) return -1;  // slow by design; not kept in the corpus
  remove_segments();
  if (!write_segment(seg)) die("cannot write the segment to /dev/shm");
  std::optional<sb::Box> dl;
  if (t.dead_letters) {
    sb::options o;
    o.capacity = 2;
    o.slot_size = 128;
    o.max_producers = 2;
    auto b = sb::Box::create(g_dl_name, o);
    if (b) dl.emplace(std::move(*b));
  }

  try {
    if (what & kDoInspect) do_inspect();
    if (what & kDoVerify) {
      step st("verify");
      auto r = sb::verify(g_name);
      if (r) {
        volatile std::size_t k = r->problems.size() + r->slots + r->producers + r->heirs;
        (void)k;
      }
    }
    if (what & (kDoOwner | kDoProducer | kDoHeir)) {
      auto box = [] {
        step st("open");
        return sb::Box::open(g_name);
      }();
      if (box) {
        (void)shmbox::info(*box);
        session(*box, pl);
        touch_info(shmbox::info(*box));
      }
    }
    if (what & kDoList) {
      step st("list+collect");
      (void)sb::Box::list();
      sb::collect_options co;
      co.dry_run = true;  // never removes anything
      co.prefix = g_name;
      (void)sb::collect(co);
    }
    if (what & kDoVerify) {
      step st("verify again");
      (void)sb::verify(g_name);  // after our calls changed the segment
    }
  } catch (const std::exception&) {
    // The API does not throw, but an exception is not a memory error: allowed here.
  }
  dl.reset();
  remove_segments();
  return 0;
}

}  // namespace

// The library sleeps in retry loops that wait for other processes: shmbox::verify
// re-reads the counters 20 times, 5 ms apart, when they do not add up (a box
// in use settles; a scribbled one never does, so that costs 100 ms per
// input). Nothing else runs in this process while an input runs, so those
// sleeps only slow fuzzing down: during an input, nanosleep returns at once
// (std::this_thread::sleep_for calls it). Deadline-bounded loops still end at
// their deadline; a loop without one is a hang either way. libFuzzer's own
// threads, and the template builder, sleep for real.
extern "C" int nanosleep(const struct timespec* req, struct timespec* rem) {
  if (g_in_input && !g_real_sleep) return 0;
  return static_cast<int>(::syscall(SYS_nanosleep, req, rem));
}

extern "C" const char* __ubsan_default_options() { return "halt_on_error=1:print_stacktrace=1"; }

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  g_name = "fuzz-" + std::to_string(::getpid());
  g_dl_name = g_name + ".dl";
  std::atexit(cleanup_at_exit);
  build_templates();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) { return run_one(data, size); }
