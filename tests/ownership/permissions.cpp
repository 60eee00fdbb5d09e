// Permissions and identity, with a real second uid (nobody, via setpriv):
// a 0600 box keeps other users out; --mode 0660 lets the group in; a
// read-write open refuses a segment of another user unless asked
// (--any-owner / Box::open(name, {.any_owner = true})). Needs root (CI runs
// as root); otherwise each case says it was skipped.
#include <doctest/doctest.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "shmbox/shmbox.hpp"
#include "support.hpp"

namespace {
using shmtest::as_nobody;
bool usable() { return shmtest::nobody_can_run_cli(); }
}  // namespace

TEST_CASE("permissions: another user cannot open a 0600 box, to post, receive or read it") {
  if (!usable()) return;
  shmtest::segment_guard g(shmtest::unique_name("perm600"));
  auto box = shmbox::Box::create(g.name, {.capacity = 8});
  REQUIRE(box);
  CHECK(shmbox::info(*box).mode == 0600);
  for (const std::vector<std::string>& cmd : {std::vector<std::string>{"post", g.name, "x"}, {"recv", g.name, "--all"},
                                              {"stat", g.name}, {"verify", g.name}}) {
    CAPTURE(cmd[0]);
    const auto r = as_nobody(0, cmd);  // even with root's group: 0600 has no group bits
    CHECK(r.code == 1);
    CHECK(r.err.find("permission denied") != std::string::npos);
  }
  CHECK(box->read_counters().posted == 0);
}

TEST_CASE("permissions: --mode 0660 lets the group in; a box of another user is opened only when asked") {
  if (!usable()) return;
  shmtest::segment_guard g(shmtest::unique_name("perm660"));
  const auto created = shmtest::run({shmtest::cli_path(), "create", g.name, "--capacity", "8", "--mode", "0660"});
  REQUIRE(created.code == 0);
  struct stat st {};
  REQUIRE(::stat(("/dev/shm/shmbox." + g.name).c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0660);
  // Not in the group: out.
  const auto outsider = as_nobody(65534, {"post", "--any-owner", g.name, "x"});
  CHECK(outsider.code == 1);
  CHECK(outsider.err.find("permission denied") != std::string::npos);
  // In the group, but the segment belongs to another user: refused unless asked.
  const auto unasked = as_nobody(st.st_gid, {"post", g.name, "x"});
  CHECK(unasked.code == 1);
  CHECK(unasked.err.find("belongs to uid 0") != std::string::npos);
  CHECK(unasked.err.find("--any-owner") != std::string::npos);
  const auto asked = as_nobody(st.st_gid, {"post", "--any-owner", g.name, "x"});
  CHECK(asked.code == 0);
  // Reading (stat) needs no asking: it changes nothing.
  CHECK(as_nobody(st.st_gid, {"stat", g.name}).code == 0);
  auto box = shmbox::Box::inspect(g.name);
  REQUIRE(box);
  CHECK(box->read_counters().stored == 1);
}

TEST_CASE("permissions: the library refuses another user's segment for read-write unless any_owner") {
  if (!usable()) return;
  shmtest::segment_guard g(shmtest::unique_name("permlib"));
  REQUIRE(shmbox::Box::create(g.name, {.capacity = 8}));
  const passwd* pw = ::getpwnam("nobody");
  REQUIRE(::chown(("/dev/shm/shmbox." + g.name).c_str(), pw->pw_uid, pw->pw_gid) == 0);  // as if nobody had made it
  auto refused = shmbox::Box::open(g.name);
  REQUIRE_FALSE(refused);
  CHECK(refused.error() == shmbox::errc::permission_denied);
  CHECK(shmbox::explain(refused.error()).find("belongs to uid " + std::to_string(pw->pw_uid)) != std::string::npos);
  CHECK_FALSE(shmbox::Producer::attach(g.name));
  CHECK_FALSE(shmbox::Owner::acquire(g.name));
  CHECK_FALSE(shmbox::Heir::enlist(g.name));
  auto asked = shmbox::Box::open(g.name, {.any_owner = true});
  REQUIRE(asked);
  auto p = shmbox::Producer::attach(*asked);
  REQUIRE(p);
  CHECK(p->post("ok") == shmbox::post_status::stored);
  CHECK(shmbox::Box::inspect(g.name));  // read-only inspection is not refused
}

TEST_CASE("permissions: gc run by another user skips a box it may read but not remove, and collects its own") {
  if (!usable()) return;
  const passwd* pw = ::getpwnam("nobody");
  const std::string prefix = shmtest::unique_name("permgc") + "-";
  // readdir order of tmpfs is not creation order: the user's boxes are made
  // before and after root's, so one of them comes after it either way.
  shmtest::segment_guard mine_a(prefix + "mine-a"), roots(prefix + "root"), mine_b(prefix + "mine-b");
  REQUIRE(as_nobody(pw->pw_gid, {"create", mine_a.name, "--capacity", "4"}).code == 0);
  REQUIRE(shmbox::Box::create(roots.name, {.capacity = 4, .mode = 0666}));
  REQUIRE(as_nobody(pw->pw_gid, {"create", mine_b.name, "--capacity", "4"}).code == 0);
  struct stat st {};

  // A dry run says what it would skip, removes nothing.
  auto r = as_nobody(pw->pw_gid, {"gc", "--dry-run", "--prefix", prefix});
  CAPTURE(r.out);
  CAPTURE(r.err);
  CHECK(r.code == 3);
  CHECK(r.out.find("would remove " + mine_a.name) != std::string::npos);
  CHECK(r.out.find("would remove " + mine_b.name) != std::string::npos);
  CHECK(r.out.find("skipped " + roots.name) != std::string::npos);
  CHECK(::stat(("/dev/shm/shmbox." + mine_a.name).c_str(), &st) == 0);

  r = as_nobody(pw->pw_gid, {"gc", "--prefix", prefix});
  CAPTURE(r.out);
  CAPTURE(r.err);
  CHECK(r.code == 3);  // some were skipped
  CHECK(r.out.find("removed " + mine_a.name) != std::string::npos);
  CHECK(r.out.find("removed " + mine_b.name) != std::string::npos);
  CHECK(r.out.find("skipped " + roots.name) != std::string::npos);
  CHECK(r.out.find("permission denied") != std::string::npos);
  CHECK(r.err.find("skipped 1 box(es)") != std::string::npos);
  CHECK(::stat(("/dev/shm/shmbox." + mine_a.name).c_str(), &st) != 0);
  CHECK(::stat(("/dev/shm/shmbox." + mine_b.name).c_str(), &st) != 0);
  CHECK(::stat(("/dev/shm/shmbox." + roots.name).c_str(), &st) == 0);

  // --json marks it too; root then removes it, status 0.
  r = as_nobody(pw->pw_gid, {"gc", "--json", "--prefix", prefix});
  CHECK(r.code == 3);
  CHECK(r.out.find("\"skipped\": true") != std::string::npos);
  r = shmtest::run({shmtest::cli_path(), "gc", "--prefix", prefix});
  CHECK(r.code == 0);
  CHECK(r.out.find("removed " + roots.name) != std::string::npos);
}

TEST_CASE("permissions: pool take --any-owner lets another user take from a 0666 pool; without it, refused naming the flag") {
  if (!usable()) return;
  const std::string pool = shmtest::unique_name("permpool");
  // Removes the pool at once (its supervisor stops the member) even when a check failed, then what is left.
  struct pool_guard {
    std::string name;
    ~pool_guard() {
      (void)shmbox::Pool::remove(name, shmbox::removal::immediate, std::chrono::seconds(5));
      ::shm_unlink(("/shmbox-pool." + name).c_str());
      // A member box the supervisor would not touch (given to a third user below).
      if (auto boxes = shmbox::Box::list())
        for (const auto& b : *boxes)
          if (b.rfind(name + ".m", 0) == 0) ::shm_unlink(("/shmbox." + b).c_str());
    }
  };
  // The member: the CLI receiving from its box (as root, the supervisor's user) until stopped.
  const std::string member = "exec '" + shmtest::cli_path() + "' recv \"$SHMBOX_BOX\" --follow >/dev/null";
  REQUIRE(shmtest::run({shmtest::cli_path(), "pool", "create", pool, "--command", member, "--init", "1", "--max", "1",
                        "--capacity", "8", "--mode", "0666", "--stop-grace", "500ms"})
              .code == 0);
  // A pool others can write: its supervisor runs the command of its own command line only.
  shmtest::child run({shmtest::cli_path(), "pool", "run", pool, "--command", member});
  const pool_guard guard{pool};  // destroyed before `run`: the live supervisor stops the member
  REQUIRE(shmtest::eventually([&] {
    const auto i = shmbox::inspect_pool(pool);
    return i && i->free == 1;
  }));
  const auto i = shmbox::inspect_pool(pool);
  REQUIRE(i);
  REQUIRE(i->members.size() == 1);
  const std::string box = i->members[0].box;

  // Another user's pool: refused unless asked, and the sentence says how to ask.
  const auto unasked = as_nobody(65534, {"pool", "take", pool, "--timeout", "5s", "hello"});
  CAPTURE(unasked.err);
  CHECK(unasked.code == 1);
  CHECK(unasked.err.find("belongs to uid 0") != std::string::npos);
  CHECK(unasked.err.find("--any-owner") != std::string::npos);
  // Asked: the take, the post into the member's box (root's too) and the give-back all work.
  const auto asked = as_nobody(65534, {"pool", "take", pool, "--any-owner", "--timeout", "5s", "hello"});
  CAPTURE(asked.out);
  CAPTURE(asked.err);
  CHECK(asked.code == 0);
  CHECK(asked.out.find("box=" + box) != std::string::npos);
  CHECK(shmtest::eventually([&] {
    const auto b = shmbox::Box::inspect(box);
    return b && b->read_counters().delivered == 1;
  }));
  const auto after = shmbox::inspect_pool(pool);
  REQUIRE(after);
  CHECK(after->count.takes == 1);
  CHECK(after->count.returns_ok == 1);

  // A member box of a third user (here: given to nobody, the pool being root's) is not posted into.
  const passwd* pw = ::getpwnam("nobody");
  REQUIRE(::chown(("/dev/shm/shmbox." + box).c_str(), pw->pw_uid, pw->pw_gid) == 0);
  const auto third = shmtest::run({shmtest::cli_path(), "pool", "take", pool, "--timeout", "5s", "x"});
  CAPTURE(third.err);
  CHECK(third.code == 1);
  CHECK(third.err.find("member box '" + box + "' belongs to uid " + std::to_string(pw->pw_uid) + ", neither the pool's (uid 0)") !=
        std::string::npos);
}
