// The notify doorbells (lib/wake/notify_hub.hpp, route 2) against another
// local user (issue 53 item 8), and the hub's scan (route 3) that makes up
// for a ring that never reached the hub:
//   - odd-sized garbage written into a live doorbell (mode 0622: anyone may
//     write it) never costs a genuine ring: every box is woken;
//   - a FIFO another user planted at a non-root owner's doorbell name (or at
//     its temporary name) is never written by producers nor read by the hub,
//     and the owner is still woken (by its scan);
//   - a ring lost from the FIFO (another reader drained it) is made up by
//     the scan, although the producer has already set the box back to
//     passive.
// The second users are uids 65534 (nobody), 65533 and 65532: the tests run
// them when they run as root (setpriv for programs, or a fork that calls
// setgid/setuid, as tests/pool/pool_security.cpp does), and say "skipped"
// otherwise.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "base/process.hpp"
#include "segment/segment.hpp"
#include "shmbox/shmbox.hpp"
#include "support.hpp"
#include "wake/notify_hub.hpp"

using namespace std::chrono_literals;

namespace {

// `argv` run as `uid` (and gid `uid`, no other groups).
std::vector<std::string> as_uid(unsigned uid, std::vector<std::string> argv) {
  std::vector<std::string> out{"/usr/bin/setpriv", "--reuid=" + std::to_string(uid), "--regid=" + std::to_string(uid),
                               "--clear-groups", "--"};
  out.insert(out.end(), argv.begin(), argv.end());
  return out;
}

// Root, setpriv, and a helper and CLI that uids 65532-65534 may run.
bool other_users_can_run() {
  if (::geteuid() != 0 || ::access("/usr/bin/setpriv", X_OK) != 0) {
    MESSAGE("skipped: needs root and setpriv (to run programs as uids 65532-65534)");
    return false;
  }
  for (const unsigned uid : {65532u, 65533u, 65534u}) {
    const auto r = shmtest::run(as_uid(uid, {shmtest::cli_path(), "--version"}));
    if (r.code != 0) {
      MESSAGE("skipped: uid " << uid << " cannot run " << shmtest::cli_path() << ": " << r.err);
      return false;
    }
  }
  return true;
}

// Runs `f` in a fork child as `uid` (when we are root); true if it returned true.
template <typename F>
bool as_other_user(unsigned uid, F f) {
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    if (::geteuid() == 0 && (::setgid(uid) != 0 || ::setuid(uid) != 0)) ::_exit(3);
    ::_exit(f() ? 0 : 1);
  }
  int st = 0;
  ::waitpid(pid, &st, 0);
  return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

// A fork child that, as `uid`, writes odd-sized random garbage (1, 3, 15, 17
// bytes, and any size of 1..40) into the FIFO `path` until it is killed
// (the destructor), at most 16 KiB of it (a FIFO nobody reads meanwhile
// is never filled: a full doorbell is another case, notify_hub.hpp).
// started() says whether it could open the FIFO.
class garbage_writer {
 public:
  garbage_writer(unsigned uid, const std::string& path) {
    int p[2];
    REQUIRE(::pipe2(p, O_CLOEXEC) == 0);
    pid_ = ::fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      // Only system calls from here: the parent has threads (its notify hub).
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::setgid(uid) != 0 || ::setuid(uid) != 0) ::_exit(3);
      const int fd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
      const char ok = fd >= 0 ? '1' : '0';
      [[maybe_unused]] ssize_t w = ::write(p[1], &ok, 1);
      if (fd < 0) ::_exit(1);
      std::uint64_t x = 0x9e3779b97f4a7c15ull ^ static_cast<std::uint64_t>(::getpid());
      auto next = [&x] {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        return x;
      };
      static constexpr std::size_t kSizes[] = {1, 3, 15, 17};
      std::size_t total = 0;
      for (std::uint64_t i = 0; total < 16 * 1024; ++i) {
        unsigned char b[64];
        for (unsigned char& c : b) c = static_cast<unsigned char>(next());
        const std::size_t n = i % 5 < 4 ? kSizes[i % 5] : 1 + next() % 40;
        w = ::write(fd, b, n);
        total += n;
        const timespec pause{0, 100'000};
        ::nanosleep(&pause, nullptr);
      }
      ::pause();
      ::_exit(0);
    }
    ::close(p[1]);
    pollfd pf{p[0], POLLIN, 0};
    char ok = '0';
    if (::poll(&pf, 1, 10'000) == 1) [[maybe_unused]] const ssize_t n = ::read(p[0], &ok, 1);
    ::close(p[0]);
    started_ = ok == '1';
  }
  ~garbage_writer() {
    ::kill(pid_, SIGKILL);
    int st = 0;
    ::waitpid(pid_, &st, 0);
  }
  garbage_writer(const garbage_writer&) = delete;
  garbage_writer& operator=(const garbage_writer&) = delete;
  bool started() const { return started_; }

 private:
  pid_t pid_ = -1;
  bool started_ = false;
};

// The owner key recorded in box `name`'s segment.
std::uint64_t owner_key_of(const std::string& name) {
  auto seg = shmbox::detail::open_segment(name, true);
  REQUIRE(seg);
  return (*seg)->owner()->key.load();
}

}  // namespace

// DOORBELL RECORDS (notify_hub.hpp), the reader alone: a genuine record
// comes out whatever garbage is written before and after it (any size,
// random bytes, or bytes made to look like a record's start or end), and
// however the reads cut the bytes.
TEST_CASE("doorbells: bell_reader finds every genuine record among garbage of every size, however the reads cut it") {
  using shmbox::detail::bell_reader;
  using shmbox::detail::bell_record;
  std::uint64_t x = 0x243f6a8885a308d3ull;
  auto next = [&x] {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
  };
  const std::vector<std::string> crafted = {"B", "B1", "Bdeadbeef:", "B12:3", "\nB12:", ":", "\n\n", std::string(40, 'a'),
                                            std::string(1, '\0')};
  for (int round = 0; round < 2000; ++round) {
    std::string stream;
    std::vector<bell_record> genuine;
    for (int k = 0; k < 8; ++k) {
      // Garbage: crafted, or 0..40 random bytes (some '\n', 'B', ':', hex).
      if (next() % 3 == 0) {
        stream += crafted[next() % crafted.size()];
      } else {
        static const char kAlphabet[] = "\nB:0123456789abcdefXYZ";
        for (std::uint64_t n = next() % 41; n > 0; --n)
          stream += next() % 2 ? kAlphabet[next() % (sizeof kAlphabet - 1)] : static_cast<char>(next());
      }
      const bell_record r{next() >> (next() % 64), next()};
      char rec[shmbox::detail::kBellRecordMax];
      const std::size_t len = shmbox::detail::format_bell_record(r, rec);
      REQUIRE(len > 0);
      stream.append(rec, len);
      genuine.push_back(r);
    }
    bell_reader reader;
    std::vector<bell_record> got;
    for (std::size_t at = 0; at < stream.size();) {
      const std::size_t n = std::min<std::size_t>(stream.size() - at, 1 + next() % 64);
      reader.feed(stream.data() + at, n, [&](const bell_record& r) { got.push_back(r); });
      at += n;
    }
    // Each genuine record, in order (a forged one may come between them).
    std::size_t found = 0;
    for (const bell_record& r : got)
      if (found < genuine.size() && r.dev == genuine[found].dev && r.ino == genuine[found].ino) ++found;
    CHECK(found == genuine.size());
    if (found != genuine.size()) break;
  }
}

// Before: the hub read the doorbell in 16-byte records; one odd-sized write
// shifted every record after it in the same read, the genuine ones were read
// as boxes nobody has, and the producers had set their boxes back to
// passive, which the scan skipped: boxes stayed unwoken until their owner
// exited. Two rounds: the owner running (garbage and rings meet in a read
// now and then), and the owner stopped while they queue up in the FIFO
// (they all meet: every ring after the first odd write was lost).
TEST_CASE("doorbells: odd-sized garbage from another user never costs a ring: 5 notify_fds and a group of 200 are all woken") {
  if (!other_users_can_run()) return;
  constexpr std::size_t kFds = 5, kMembers = 200, kBoxes = kFds + kMembers;
  std::deque<shmtest::segment_guard> guards;
  std::vector<std::string> names;
  for (std::size_t i = 0; i < kBoxes; ++i) {
    guards.emplace_back(shmtest::unique_name("bellg" + std::to_string(i) + "-"));
    names.push_back(guards.back().name);
    REQUIRE(shmbox::Box::create(names.back(), {.capacity = 4, .slot_size = 16, .mode = 0666}));
  }
  std::vector<std::string> owner_argv{shmtest::helper_path(), "notify-many", std::to_string(kFds)};
  owner_argv.insert(owner_argv.end(), names.begin(), names.end());
  shmtest::child owner(owner_argv, {}, true);
  REQUIRE(owner.read_line(60s).value_or("") == "armed");
  const std::string bell = shmbox::detail::bell_path(owner_key_of(names[0]));
  struct stat st {};
  REQUIRE(::lstat(bell.c_str(), &st) == 0);
  REQUIRE(S_ISFIFO(st.st_mode));
  // The rings the owner's hub took (bell_rings): how the wake-ups came.
  std::vector<std::shared_ptr<shmbox::detail::mapped_box>> segs;
  for (const std::string& n : names) {
    auto seg = shmbox::detail::open_segment(n, true);
    REQUIRE(seg);
    segs.push_back(*seg);
  }
  auto rings = [&] {
    std::vector<std::uint32_t> v;
    for (const auto& seg : segs) v.push_back(seg->owner()->bell_rings.load());
    return v;
  };

  for (const bool stopped : {false, true}) {
    CAPTURE(stopped);
    const std::string msg = stopped ? "m2" : "m1";
    const std::vector<std::uint32_t> rings_before = rings();
    if (stopped) {
      owner.kill(SIGSTOP);
      REQUIRE(shmtest::wait_for_state(owner.pid(), 'T', 30s));
    }
    {
      // uid 65534 writes garbage while a producer of the same user (it may
      // not take the owner's eventfds, so it rings for the notify_fds too)
      // posts one message into each box.
      garbage_writer garbage(65534, bell);
      REQUIRE(garbage.started());
      std::this_thread::sleep_for(20ms);
      std::vector<std::string> argv{shmtest::helper_path(), "post-each", msg, "300"};
      argv.insert(argv.end(), names.begin(), names.end());
      shmtest::child producer(as_uid(65534, argv));
      REQUIRE(producer.read_line(60s).value_or("") == "posted " + std::to_string(kBoxes) + " " + std::to_string(kBoxes));
    }
    if (stopped) owner.kill(SIGCONT);
    // Every box woken, once, with its message, within the scan's bound (two
    // looks a second apart) of the last post.
    std::map<std::size_t, int> woken;
    std::size_t spurious = 0, wrong = 0;
    const auto until = std::chrono::steady_clock::now() + 3s;
    while (woken.size() < kBoxes) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
      if (left.count() <= 0) break;
      const auto line = owner.read_line(left);
      if (!line) break;
      const auto f = shmtest::fields(*line);
      if (f.size() >= 2 && f[0] == "spurious") ++spurious;
      if (f.size() < 2 || f[0] != "woken") continue;
      ++woken[std::stoul(f[1])];
      wrong += f.size() == 3 && f[2] == msg ? 0 : 1;
    }
    CHECK(woken.size() == kBoxes);
    std::size_t twice = 0;
    for (const auto& [box, n] : woken) twice += n > 1 ? 1 : 0;
    CHECK(twice == 0);
    CHECK(wrong == 0);
    CHECK(spurious == 0);
    // Each through its ring (route 2), none left to the scan (route 3): a
    // genuine ring is never lost to garbage.
    const std::vector<std::uint32_t> rings_after = rings();
    std::size_t rung = 0;
    for (std::size_t i = 0; i < kBoxes; ++i) rung += rings_after[i] == rings_before[i] + 1 ? 1 : 0;
    CHECK(rung == kBoxes);
    if (woken.size() < kBoxes) break;
  }
  owner.close_stdin();
  CHECK(shmtest::exited_with(owner.wait(30s), 0));
}

// Before: a producer rang whatever FIFO was at the doorbell's name: another
// user's plant took every wake-up, and the box, set back to passive by the
// producer, was skipped by the owner's scan.
TEST_CASE("doorbells: a FIFO another user planted at a non-root owner's doorbell (or temporary) name is never rung nor read; the owner is still woken") {
  if (!other_users_can_run()) return;
  for (const bool at_temporary : {false, true}) {
    CAPTURE(at_temporary);
    shmtest::segment_guard g(shmtest::unique_name(at_temporary ? "belltmp" : "bellplant"));
    // The owner: uid 65534, in its own box (0666: any user may post).
    REQUIRE(shmtest::run(as_uid(65534, {shmtest::cli_path(), "create", g.name, "--capacity", "8", "--slot-size", "16",
                                        "--mode", "0666"})).code == 0);
    shmtest::child owner(as_uid(65534, {shmtest::helper_path(), "event-loop", g.name, "--fd-when-told"}), {}, true);
    REQUIRE(owner.read_line(30s).value_or("").rfind("owned", 0) == 0);
    // uid 65533 plants a FIFO (0622, as a doorbell) at the name the owner's
    // hub is about to make, before it makes it.
    const std::string bell = shmbox::detail::bell_path(owner_key_of(g.name));
    const std::string planted = at_temporary ? bell + ".new" : bell;
    ::unlink(planted.c_str());
    REQUIRE(as_other_user(65533, [&] { return ::mkfifo(planted.c_str(), 0622) == 0 && ::chmod(planted.c_str(), 0622) == 0; }));
    // A plant at the name has a reader (its planter's, as far as a writer
    // can tell): we hold it, and see what producers write into it.
    const int planted_r = at_temporary ? -1 : ::open(planted.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (!at_temporary) REQUIRE(planted_r >= 0);
    owner.write_stdin("go\n");
    REQUIRE(owner.read_line(30s).value_or("") == "armed");
    if (at_temporary) {
      // The hub did not take the plant at its temporary name for its own
      // doorbell: nobody reads it (an open for writing finds no reader).
      const int w = ::open(planted.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
      CHECK(w < 0);
      CHECK(errno == ENXIO);
      if (w >= 0) ::close(w);
    }
    auto seg = shmbox::detail::open_segment(g.name, true);
    REQUIRE(seg);
    for (int round = 1; round <= 2; ++round) {
      CAPTURE(round);
      // Armed (again, after round 1: the owner takes what is there, then
      // arms): its sleeping bit is in the lane, which makes a post wake it.
      REQUIRE(shmtest::eventually([&] { return ((*seg)->lanes[0].hdr->tail.load() & 1) != 0; }, 10s));
      // A producer of a third user (65532): it may not take the owner's
      // eventfd, so it would ring the doorbell.
      REQUIRE(shmtest::run(as_uid(65532, {shmtest::helper_path(), "post-each", "x", "0", g.name})).out == "posted 1 1\n");
      // Woken all the same: the hub's scan, two looks a second apart.
      CHECK(owner.read_line(4s).value_or("(none)") == "notified");
    }
    if (!at_temporary) {
      char buf[64];
      CHECK(::read(planted_r, buf, sizeof buf) <= 0);  // nothing was written into the plant (end of file, or EAGAIN)
      ::close(planted_r);
    }
    // Refused and counted, once per wake-up (a free name is not a refusal).
    CHECK((*seg)->owner()->bell_refused.load() == (at_temporary ? 0u : 2u));
    owner.close_stdin();
    ::unlink(planted.c_str());
  }
}

// Before: the scan looked only at boxes whose owner record said notify or
// active; a producer that rang sets the box back to passive, so a ring that
// never reached the hub left the owner asleep with its message.
TEST_CASE("doorbells: a ring lost from the FIFO is made up by the hub's scan, though its producer set the box back to passive") {
  if (!shmtest::nobody_can_run_cli()) return;
  shmtest::segment_guard g(shmtest::unique_name("belllost"));
  REQUIRE(shmbox::Box::create(g.name, {.capacity = 8, .slot_size = 16, .mode = 0666}));
  shmtest::child owner({shmtest::helper_path(), "event-loop", g.name});
  REQUIRE(owner.read_line(30s).value_or("").rfind("owned", 0) == 0);
  const std::string bell = shmbox::detail::bell_path(owner_key_of(g.name));
  // The owner (and its hub) stopped; a producer of another user rings.
  owner.kill(SIGSTOP);
  REQUIRE(shmtest::wait_for_state(owner.pid(), 'T', 30s));
  REQUIRE(shmtest::as_nobody(65534, {"post", "--any-owner", g.name, "lost"}).code == 0);
  auto seg = shmbox::detail::open_segment(g.name, true);
  REQUIRE(seg);
  CHECK(shmbox::detail::state_mode((*seg)->owner()->state.load()) == shmbox::detail::owner_state::passive);
  // Another reader (we may: root, or the owner's user) takes the ring away.
  const int r = ::open(bell.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  REQUIRE(r >= 0);
  char buf[4096];
  CHECK(::read(r, buf, sizeof buf) > 0);
  ::close(r);
  owner.kill(SIGCONT);
  CHECK(owner.read_line(4s).value_or("(none)") == "notified");
  owner.kill(SIGKILL);
  (void)owner.wait(30s);
  ::unlink(bell.c_str());  // (killed: it leaves its doorbell behind)
}
