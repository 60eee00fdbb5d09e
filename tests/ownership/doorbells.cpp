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

// The owner key recorded in box `name`'s segment.
std::uint64_t owner_key_of(const std::string& name) {
  auto seg = shmbox::detail::open_segment(name, true);
  REQUIRE(seg);
  return (*seg)->owner()->key.load();
}

}  // namespace

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
}
