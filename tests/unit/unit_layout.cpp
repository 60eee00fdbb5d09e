// Unit tests of the shared layout: encoding of sequence and op words, the
// geometry function, and the constants every opener checks.
#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include "segment/layout.hpp"
#include "base/process.hpp"
#include "shmbox/box.hpp"

using namespace shmbox::detail;

TEST_CASE("layout: version, magic and structure sizes") {
  CHECK(kLayoutVersion == 5);
  CHECK(offsetof(segment_header, default_lane) == 164);  // version 4: taken from the reserved bytes
  CHECK(kMagic == 0x01584F424D485301ULL);
  CHECK(sizeof(segment_header) == 256);
  CHECK(sizeof(owner_record) == 384);
  CHECK(sizeof(owner_actor) == 64);
  CHECK(sizeof(heir_entry) == 128);
  CHECK(kHeirSlots >= 8);
  CHECK(sizeof(lane_header) == 256);
  CHECK(sizeof(producer_entry) == 64);
  CHECK(sizeof(producer_lane_counters) == 128);
  CHECK(sizeof(box_config) == 256);
  CHECK(sizeof(owner_lane_counters) == 64);
  CHECK(sizeof(slot_header) == 16);
  CHECK(offsetof(lane_header, head) == 64);  // producers and the owner write different cache lines
  CHECK(offsetof(owner_record, wake_seq) == 64);
}

TEST_CASE("layout: sequence words round-trip position, state and actor") {
  for (std::uint64_t pos : {0ull, 1ull, 12345ull, (1ull << 48) - 1, (1ull << 48) + 7}) {
    for (auto st : {slot_state::empty, slot_state::full, slot_state::taken, slot_state::writing, slot_state::free}) {
      for (std::uint32_t actor : {0u, 1u, 4096u, kOwnerActorBase, kOwnerActorBase + 15}) {
        const std::uint64_t s = make_seq(pos, st, actor);
        CHECK(seq_pos(s) == (pos & kPosMask));
        CHECK(seq_state(s) == st);
        CHECK(seq_actor(s) == actor);
      }
    }
  }
  CHECK(owner_actor_id(0) == kOwnerActorBase);
  CHECK(owner_actor_id(17) == kOwnerActorBase + 1);
  CHECK(owner_actor_id(1) != owner_actor_id(2));  // consecutive epochs never share an actor id
  CHECK(is_owner_actor(owner_actor_id(5)));
  CHECK_FALSE(is_owner_actor(4096));
}

TEST_CASE("layout: pos_diff is a signed distance across the 2^48 wrap") {
  CHECK(pos_diff(seq_pos(make_seq(10, slot_state::empty, 0)), 10) == 0);
  CHECK(pos_diff(seq_pos(make_seq(13, slot_state::empty, 0)), 10) == 3);
  CHECK(pos_diff(seq_pos(make_seq(7, slot_state::empty, 0)), 10) == -3);
  const std::uint64_t near_wrap = (1ull << 48) - 2;
  CHECK(pos_diff(seq_pos(make_seq(near_wrap + 5, slot_state::full, 0)), near_wrap) == 5);
  CHECK(pos_diff(seq_pos(make_seq(near_wrap, slot_state::full, 0)), near_wrap + 5) == -5);
}

TEST_CASE("layout: op words round-trip kind, lane and target") {
  const std::uint64_t op = make_op(op_kind::evict, 3, 987654321);
  CHECK(op_kind_of(op) == op_kind::evict);
  CHECK(op_lane(op) == 3);
  CHECK(op_target(op) == 987654321);
  CHECK(op_kind_of(0) == op_kind::none);
}

TEST_CASE("geometry: offsets, strides and limits") {
  geometry_params p;
  p.lane_count = 1;
  p.lane_capacity[0] = 1000;
  p.slot_payload = 64;
  p.max_producers = 64;
  geometry g;
  REQUIRE(compute_geometry(p, g));
  CHECK(g.slot_stride == 128);  // 16-byte header + 64 payload, padded to cache lines
  CHECK(g.config_offset == 256);
  CHECK(g.owner_offset == 512);
  CHECK(g.actors_offset == 512 + 384);
  CHECK(g.actor_stride == 128);
  CHECK(g.heirs_offset == g.actors_offset + 16 * 128);
  CHECK(g.lanes_offset == g.heirs_offset + 16 * 128);
  CHECK(g.producers_offset == g.lanes_offset + 256);
  CHECK(g.producer_stride == 64 + 128);
  CHECK(g.slots_offset[0] % 4096 == 0);
  CHECK(g.slots_offset[0] >= g.producers_offset + 64 * (64 + 128));
  CHECK(g.total_bytes == (g.slots_offset[0] + 1000 * 128 + 4095) / 4096 * 4096);
  CHECK(g.total_bytes % 4096 == 0);

  p.slot_payload = 48;  // exactly one cache line with its header
  REQUIRE(compute_geometry(p, g));
  CHECK(g.slot_stride == 64);

  geometry_params bad = p;
  bad.lane_capacity[0] = 0;
  CHECK_FALSE(compute_geometry(bad, g));
  bad = p;
  bad.lane_capacity[0] = shmbox::kMaxCapacity + 1;
  CHECK_FALSE(compute_geometry(bad, g));
  bad = p;
  bad.slot_payload = shmbox::kMaxSlotSize + 1;
  CHECK_FALSE(compute_geometry(bad, g));
  bad = p;
  bad.max_producers = 0;
  CHECK_FALSE(compute_geometry(bad, g));
  bad = p;
  bad.lane_count = 0;
  CHECK_FALSE(compute_geometry(bad, g));
  bad = p;
  bad.lane_capacity[3] = 5;  // an unused lane with a capacity
  CHECK_FALSE(compute_geometry(bad, g));
  bad = p;
  bad.lane_capacity[0] = shmbox::kMaxCapacity;
  bad.slot_payload = shmbox::kMaxSlotSize;  // 2^24 slots of 1 MiB: far over the segment limit
  CHECK_FALSE(compute_geometry(bad, g));
}

TEST_CASE("process keys: this process is alive, a made-up key is not; the key carries the pid namespace") {
  const std::uint64_t me = self_key();
  REQUIRE(me != 0);
  CHECK(key_pid(me) == static_cast<std::uint32_t>(::getpid()));
  CHECK(self_key() == me);  // stable for the process
  CHECK((me >> 22) != 0);    // an incarnation
  CHECK(pid_running(key_pid(me)));
  CHECK(self_pid_ns() != 0);
  CHECK(in_this_ns(self_pid_ns()));
  CHECK_FALSE(in_this_ns(0));
  CHECK_FALSE(in_this_ns(self_pid_ns() + 1));
  // A fork child (same start tick, same namespace) gets another incarnation:
  // keys of processes that share pid-namespace, pid or start time differ.
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  const pid_t kid = ::fork();
  if (kid == 0) {
    const std::uint64_t k = self_key();
    [[maybe_unused]] ssize_t n = ::write(fds[1], &k, sizeof k);
    ::_exit(0);
  }
  std::uint64_t theirs = 0;
  REQUIRE(::read(fds[0], &theirs, sizeof theirs) == static_cast<ssize_t>(sizeof theirs));
  ::waitpid(kid, nullptr, 0);
  ::close(fds[0]);
  ::close(fds[1]);
  CHECK(theirs != 0);
  CHECK(theirs != me);
  CHECK((theirs >> 22) != (me >> 22));
}
