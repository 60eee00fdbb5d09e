// Pools against writers of their segment (issue 29): nothing written in a
// pool segment or a member box may make a supervisor signal, unlink or run
// anything that is not provably the pool's own; the table lock cannot be
// wedged by a word; SIGTERM always stops a supervisor; workers do not
// outlive their pool; `pool rm --now` removes what is at a pool's name.
//
// Every party is a separate program: supervisors are `shmbox pool run` (the
// CLI) or `shmbox-test-helper pool-supervise`, members `pool-worker`, the
// victim a plain /bin/sleep. The tests write the segments themselves, as a
// hostile writer would (as uid 65534 when they run as root).
#include <doctest/doctest.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <optional>
#include <vector>
#include <random>
#include <string>

#include "base/access.hpp"
#include "segment/layout.hpp"
#include "pool/pool_layout.hpp"
#include "segment/liveness.hpp"
#include "wake/notify_hub.hpp"
#include "pool_support.hpp"
#include "pool/pool_table.hpp"
#include "base/process.hpp"
#include "segment/segment.hpp"

using namespace std::chrono_literals;
using namespace pooltest;
namespace detail = shmbox::detail;

namespace {

bool alive(pid_t pid) {
  const char st = shmtest::process_state(pid);
  return st != '?' && st != 'Z' && st != 'X';
}

// Runs `f` in a child process as uid/gid 65534 when this process is root (a
// second user), else in a child of our own uid; true when it exited 0.
template <class F>
bool as_other_user(F f) {
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    if (::geteuid() == 0 && (::setgid(65534) != 0 || ::setuid(65534) != 0)) ::_exit(3);
    ::_exit(f() ? 0 : 1);
  }
  int st = 0;
  ::waitpid(pid, &st, 0);
  return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

std::string file_in_tmp(const std::string& what) {
  return (std::filesystem::temp_directory_path() / shmtest::unique_name(what)).string();
}

bool exists(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

std::string sh_quote(const std::string& s) { return "'" + s + "'"; }

// What another user (uid 65534, when we are root) can do to a 0666 pool:
// rewrite a string of its configuration with `text`.
template <std::size_t N>
bool rewrite_as_other_user(const std::string& pool, char (detail::pool_config::*field)[N], const std::string& text) {
  return as_other_user([&] {
    const int fd = ::shm_open(("/shmbox-pool." + pool).c_str(), O_RDWR, 0);
    if (fd < 0 || text.size() >= N) return false;
    void* p = ::mmap(nullptr, detail::kPoolConfigOffset + sizeof(detail::pool_config), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);
    if (p == MAP_FAILED) return false;
    auto* cfg = reinterpret_cast<detail::pool_config*>(static_cast<char*>(p) + detail::kPoolConfigOffset);
    std::memset(cfg->*field, 0, N);
    std::memcpy(cfg->*field, text.data(), text.size());
    return true;
  });
}

// Removes files when it goes out of scope.
struct unlink_guard {
  std::vector<std::string> paths;
  ~unlink_guard() {
    for (const auto& p : paths) ::unlink(p.c_str());
  }
};

// A process of another user (uid/gid 65534 when we are root, else of our
// own uid) that runs `setup` once, says so, then `step` about every
// millisecond until told to stop (stop(), or the destructor). It exits 2
// when `setup` fails. What `setup` makes (a descriptor, a mapping, an
// Owner) lives in the child's copy of the variables the lambdas capture.
class other_user_process {
 public:
  template <class Setup, class Step>
  other_user_process(Setup setup, Step step) {
    int ready[2], stop[2];
    REQUIRE(::pipe2(ready, O_CLOEXEC) == 0);
    REQUIRE(::pipe2(stop, O_CLOEXEC) == 0);
    pid_ = ::fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      ::close(ready[0]);
      ::close(stop[1]);
      if (::geteuid() == 0 && (::setgroups(0, nullptr) != 0 || ::setgid(65534) != 0 || ::setuid(65534) != 0)) ::_exit(3);
      if (!setup()) ::_exit(2);
      const char one = 1;
      if (::write(ready[1], &one, 1) != 1) ::_exit(4);
      for (;;) {
        pollfd p{stop[0], POLLIN, 0};
        if (::poll(&p, 1, 1) > 0) ::_exit(0);  // closed: stop
        step();
      }
    }
    ::close(ready[1]);
    ::close(stop[0]);
    ready_ = ready[0];
    stop_ = stop[1];
  }
  other_user_process(const other_user_process&) = delete;
  other_user_process& operator=(const other_user_process&) = delete;
  ~other_user_process() { stop(); }

  // Waits until its setup is done; false when it failed (or took too long).
  bool ready(std::chrono::milliseconds limit = 10s) {
    pollfd p{ready_, POLLIN, 0};
    char c = 0;
    return ::poll(&p, 1, static_cast<int>(limit.count())) > 0 && ::read(ready_, &c, 1) == 1;
  }
  // Stops it; its exit status.
  int stop() {
    if (pid_ <= 0) return status_;
    ::close(stop_);
    ::close(ready_);
    ::waitpid(pid_, &status_, 0);
    pid_ = -1;
    return status_;
  }
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  int ready_ = -1, stop_ = -1;
  int status_ = -1;
};

// A whole pool segment mapped read-write by whoever calls it (a child of
// other_user_process): base, or nullptr.
unsigned char* map_pool(const std::string& pool) {
  const int fd = ::shm_open(("/shmbox-pool." + pool).c_str(), O_RDWR, 0);
  if (fd < 0) return nullptr;
  struct stat st {};
  void* p = ::fstat(fd, &st) == 0 ? ::mmap(nullptr, static_cast<std::size_t>(st.st_size), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                                  : MAP_FAILED;
  ::close(fd);
  return p == MAP_FAILED ? nullptr : static_cast<unsigned char*>(p);
}
detail::pool_state* state_of(unsigned char* base) { return reinterpret_cast<detail::pool_state*>(base + detail::kPoolStateOffset); }
detail::pool_member* member_of(unsigned char* base, std::uint32_t m) {
  return reinterpret_cast<detail::pool_member*>(base + reinterpret_cast<detail::pool_header*>(base)->members_offset) + m;
}

}  // namespace

TEST_CASE("pool security: a forged member entry names a victim of the supervisor's uid: not signalled, counted") {
  pool_guard g(shmtest::unique_name("psig"));
  REQUIRE(shmbox::Pool::create(g.name, small_pool(g.name, 1, 2)));
  auto sup = supervisor(g.name);
  check_settled(g.name, 1);
  child victim({"/bin/sleep", "120"});
  REQUIRE(shmtest::eventually([&] { return detail::process_start_ticks(static_cast<std::uint32_t>(victim.pid())) != 0; }, 5s));
  const std::uint64_t ticks = detail::process_start_ticks(static_cast<std::uint32_t>(victim.pid()));

  // What uid 65534 did to a 0666 pool: one member entry naming the victim,
  // with its real start time, as a member being stopped because it failed.
  raw_pool raw(g.name);
  detail::pool_member* e = raw.member(1);
  e->generation.store(77);
  e->worker_pid.store(static_cast<std::uint64_t>(victim.pid()));
  e->worker_ns.store(detail::self_pid_ns());
  e->worker_start.store(ticks);
  e->stop_signal_ns.store(0);
  e->state.store(detail::make_member_state(member_state::stopping, detail::member_stop::failed));

  CHECK(settles(g.name, [](const shmbox::pool_info& i) { return i.count.refused_signals >= 1; }, 15s));
  const std::string said = line_starting(*sup, "log member 1: pid " + std::to_string(victim.pid()), 10s);
  CHECK(said.find("not signalled") != std::string::npos);
  CHECK(alive(victim.pid()));
  // The entry is handled all the same (a failed member is replaced), and the real member is untouched.
  CHECK(settles(g.name, [](const shmbox::pool_info& i) {
    const auto* m = find_member(i, 1);
    return m == nullptr || m->state != member_state::stopping;
  }));
  CHECK(alive(victim.pid()));
  check_take_works(g.name);
}

TEST_CASE("pool security: a member box whose owner record names a victim and its live doorbell: neither is touched") {
  pool_guard g(shmtest::unique_name("pbell"));
  REQUIRE(shmbox::Pool::create(g.name, small_pool(g.name, 1, 1)));
  auto sup = supervisor(g.name);
  check_settled(g.name, 1);
  const shmbox::pool_info before = snapshot(g.name);
  REQUIRE(before.members.size() == 1);
  const std::string box_name = before.members[0].box;
  child victim({"/bin/sleep", "120"});

  // A key naming the victim's pid (any incarnation bits), and a doorbell at
  // that key's path that a live process reads (this test).
  const std::uint64_t forged = (std::uint64_t{0x1234567} << 22) | static_cast<std::uint64_t>(victim.pid());
  const std::string bell = detail::bell_path(forged);
  REQUIRE(::mkfifo(bell.c_str(), 0600) == 0);
  struct bell_guard {
    std::string path;
    int fd;
    ~bell_guard() {
      if (fd >= 0) ::close(fd);
      ::unlink(path.c_str());
    }
  } reader{bell, ::open(bell.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC)};
  REQUIRE(reader.fd >= 0);
  // The writer also holds the owner's byte (liveness.hpp L1) through its own
  // description of the box, so the forged record stays "alive" after the
  // real worker is gone: the supervisor meets the forged owner at every step.
  const int holder = ::shm_open(("/shmbox." + box_name).c_str(), O_RDWR | O_CLOEXEC, 0);
  REQUIRE(holder >= 0);
  {
    auto b = shmbox::Box::open(box_name);
    REQUIRE(b);
    const auto& m = detail::access::box(*b);
    REQUIRE(detail::try_lock_byte(holder, detail::owner_byte(*m), false));
    detail::owner_record* rec = m->owner();
    rec->key.store(forged);
    rec->owner_pid_ns.store(detail::self_pid_ns());
  }
  raw_pool raw(g.name);
  raw.member(0)->state.store(detail::make_member_state(member_state::stopping, detail::member_stop::culled));

  CHECK(settles(g.name, [](const shmbox::pool_info& i) { return i.count.refused_signals >= 1; }, 15s));
  const auto workers = live_workers(g.name);  // the real worker was proven (SP1) and stopped
  CHECK(shmtest::eventually([&] { return live_workers(g.name).empty(); }, 10s));
  // Past stop_grace (1 s), the supervisor's SIGKILL round meets the forged owner again.
  const auto t0 = std::chrono::steady_clock::now();
  CHECK(shmtest::eventually([&] { return since(t0) > 1500ms && !alive(victim.pid()); }, 2500ms) == false);
  CHECK(alive(victim.pid()));
  ::close(holder);  // the "owner" is gone: the box is drained and removed (P3, P4)
  CHECK(settles(g.name, [&](const shmbox::pool_info&) { return !shmbox::Box::inspect(box_name); }));
  CHECK(alive(victim.pid()));
  CHECK(exists(bell));  // the live doorbell was not unlinked
}

TEST_CASE("pool security: a pool others can write runs only the command on the supervisor's own command line") {
  pool_guard g(shmtest::unique_name("pcmd"));
  const std::string mark_a = file_in_tmp("cmd-a"), mark_b = file_in_tmp("cmd-b");
  struct files_guard {
    std::string a, b;
    ~files_guard() {
      ::unlink(a.c_str());
      ::unlink(b.c_str());
    }
  } files{mark_a, mark_b};
  auto opts = small_pool(g.name, 1, 1);
  const std::string good = "touch " + sh_quote(mark_a) + "; " + opts.command;
  const std::string evil = "touch " + sh_quote(mark_b) + "; " + opts.command;
  opts.command = good;
  opts.mode = 0666;
  REQUIRE(shmbox::Pool::create(g.name, opts));
  // Another user rewrites the stored command (root: uid 65534 does it).
  CHECK(rewrite_as_other_user(g.name, &detail::pool_config::command, evil));

  // Without --command: refused at once, nothing run.
  const auto refused = shmtest::run({shmtest::cli_path(), "pool", "run", g.name}, {}, 20s);
  CHECK(refused.code != 0);
  CHECK(refused.err.find("--command") != std::string::npos);
  CHECK(refused.err.find("written by other users") != std::string::npos);
  CHECK(!exists(mark_b));
  CHECK(!exists(mark_a));

  // With it: that command, not the stored one.
  child run({shmtest::cli_path(), "pool", "run", g.name, "--command", good});
  check_settled(g.name, 1);
  CHECK(exists(mark_a));
  CHECK(!exists(mark_b));
  run.kill(SIGTERM);
  CHECK(shmtest::exited_with(run.wait(10s), 0));
  CHECK(!run.timed_out());

  if (::geteuid() == 0) {
    // A 0600 pool that belongs to another user: its owner may have written it.
    REQUIRE(::fchmodat(AT_FDCWD, ("/dev/shm/shmbox-pool." + g.name).c_str(), 0600, 0) == 0);
    REQUIRE(::chown(("/dev/shm/shmbox-pool." + g.name).c_str(), 65534, 65534) == 0);
    const auto foreign = shmtest::run({shmtest::cli_path(), "pool", "run", g.name, "--any-owner"}, {}, 20s);
    CHECK(foreign.code != 0);
    CHECK(foreign.err.find("--command") != std::string::npos);
    CHECK(!exists(mark_b));
  }
}

TEST_CASE("pool security: a pool others can write runs only the init command on the supervisor's own command line") {
  pool_guard g(shmtest::unique_name("pinitcmd"));
  const std::string mark_a = file_in_tmp("init-a"), mark_b = file_in_tmp("init-b");
  struct files_guard {
    std::string a, b;
    ~files_guard() {
      ::unlink(a.c_str());
      ::unlink(b.c_str());
    }
  } files{mark_a, mark_b};
  auto opts = small_pool(g.name, 1, 1);
  const std::string good = "touch " + sh_quote(mark_a), evil = "touch " + sh_quote(mark_b);
  REQUIRE(good.size() < shmbox::kMaxPoolInitCommand);
  opts.init_command = good;
  opts.mode = 0666;
  REQUIRE(shmbox::Pool::create(g.name, opts));
  // Another user rewrites the stored init command.
  CHECK(rewrite_as_other_user(g.name, &detail::pool_config::init_command, evil));
  // --command alone is not enough: the stored init command is not run either.
  const auto refused = shmtest::run({shmtest::cli_path(), "pool", "run", g.name, "--command", opts.command}, {}, 20s);
  CHECK(refused.code != 0);
  CHECK(refused.err.find("--init-command") != std::string::npos);
  CHECK(!exists(mark_a));
  CHECK(!exists(mark_b));
  child run({shmtest::cli_path(), "pool", "run", g.name, "--command", opts.command, "--init-command", good});
  check_settled(g.name, 1);
  CHECK(exists(mark_a));
  CHECK(!exists(mark_b));
  run.kill(SIGTERM);
  CHECK(shmtest::exited_with(run.wait(10s), 0));
}

TEST_CASE("pool security: a lock word naming the supervisor's own live client wedges nothing; SIGTERM stops it") {
  pool_guard g(shmtest::unique_name("pwedge"));
  REQUIRE(shmbox::Pool::create(g.name, small_pool(g.name, 1, 1)));
  child run({shmtest::cli_path(), "pool", "run", g.name});
  check_settled(g.name, 1);
  raw_pool raw(g.name);
  const auto sup_client = static_cast<std::uint32_t>(raw.state()->supervisor_client.load());
  raw.state()->lock.store(sup_client + 1);
  const auto t0 = std::chrono::steady_clock::now();
  const auto took = shmtest::run({shmtest::cli_path(), "pool", "take", g.name, "--timeout", "1s", "hello"}, {}, 20s);
  INFO(took.out << took.err);
  CHECK(took.code == 0);
  CHECK(since(t0) < 5s);
  raw.state()->lock.store(sup_client + 1);
  run.kill(SIGTERM);
  CHECK(shmtest::exited_with(run.wait(5s), 0));
  CHECK(!run.timed_out());
}

TEST_CASE("pool security: a table byte held without the protocol costs waits their deadline; pool rm --now removes the pool") {
  pool_guard g(shmtest::unique_name("pheld"));
  REQUIRE(shmbox::Pool::create(g.name, small_pool(g.name, 1, 1)));
  {
    child run({shmtest::cli_path(), "pool", "run", g.name});
    check_settled(g.name, 1);
    run.kill(SIGTERM);  // the members keep running
    REQUIRE(shmtest::exited_with(run.wait(5s), 0));
  }
  const auto workers = live_workers(g.name);
  REQUIRE(workers.size() == 1);
  // A writer of the segment takes the table's kernel lock (TL2) and keeps it.
  const int fd = ::shm_open(("/shmbox-pool." + g.name).c_str(), O_RDWR | O_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  struct fd_guard {
    int fd;
    ~fd_guard() { ::close(fd); }
  } hold{fd};
  REQUIRE(detail::try_lock_byte(fd, detail::kPoolTableByte, true));

  auto t0 = std::chrono::steady_clock::now();
  const auto took = shmtest::run({shmtest::cli_path(), "pool", "take", g.name, "--timeout", "500ms", "x"}, {}, 20s);
  CHECK(took.code != 0);
  CHECK(took.err.find("pool rm " + g.name + " --now") != std::string::npos);
  CHECK(since(t0) < 5s);

  // A supervisor waiting for the table ends on SIGTERM, at once.
  {
    child run({shmtest::cli_path(), "pool", "run", g.name});
    REQUIRE(!line_starting(run, "", 10s).empty());  // its first line: it runs
    t0 = std::chrono::steady_clock::now();
    run.kill(SIGTERM);
    run.wait(10s);
    CHECK(!run.timed_out());
    CHECK(since(t0) < 2s);
  }

  const auto rm = shmtest::run({shmtest::cli_path(), "pool", "rm", g.name, "--now", "--timeout", "1s"}, {}, 30s);
  INFO(rm.out << rm.err);
  CHECK(rm.code == 0);
  CHECK(!pool_segment_exists(g.name));
  // Its worker, with no supervisor left, sees its pool gone by itself (PoolMember::stopped).
  CHECK(shmtest::eventually([&] { return live_workers(g.name).empty(); }, 10s));
}

namespace {

// Member `m` of pool `pool` (free, with a live worker): taken, told to
// "hang" (it stops receiving, so it never looks at PoolMember::stopped()),
// given back.
void make_hang(const std::string& pool) {
  auto p = shmbox::Pool::open(pool);
  REQUIRE(p);
  auto l = p->take(5s);
  REQUIRE(l);
  REQUIRE(l->producer().post("hang") == shmbox::post_status::stored);
  REQUIRE(worker_said(pool, "hanging " + std::to_string(l->token().member)));
  REQUIRE(l->give_back(shmbox::outcome::ok) == shmbox::return_status::ok);
}

}  // namespace

TEST_CASE("pool security: a supervisor whose pool is unlinked stops the workers it started") {
  pool_guard g(shmtest::unique_name("pgone"));
  REQUIRE(shmbox::Pool::create(g.name, small_pool(g.name, 2, 2)));
  auto sup = supervisor(g.name);
  check_settled(g.name, 2);
  make_hang(g.name);
  make_hang(g.name);
  REQUIRE(live_workers(g.name).size() == 2);
  REQUIRE(::shm_unlink(("/shmbox-pool." + g.name).c_str()) == 0);
  CHECK(shmtest::eventually([&] { return live_workers(g.name).empty(); }, 10s));
  CHECK(shmtest::exited_with(sup->wait(10s), 0));
}

TEST_CASE("pool security: pool rm --now of a pool whose member table is garbage leaves no worker running") {
  pool_guard g(shmtest::unique_name("pgarb"));
  REQUIRE(shmbox::Pool::create(g.name, small_pool(g.name, 2, 2)));
  auto sup = supervisor(g.name);
  check_settled(g.name, 2);
  make_hang(g.name);
  make_hang(g.name);
  {
    raw_pool raw(g.name);
    std::mt19937_64 rng(29);
    for (std::uint32_t m = 0; m < 2; ++m) {
      raw.member(m)->state.store(0xEE00 | 0xEE);  // no state at all
      raw.member(m)->generation.store(rng());
      raw.member(m)->worker_pid.store(rng());
    }
  }
  const auto rm = shmtest::run({shmtest::cli_path(), "pool", "rm", g.name, "--now", "--timeout", "10s"}, {}, 30s);
  INFO(rm.out << rm.err);
  CHECK(rm.code == 0);
  CHECK(shmtest::eventually([&] { return live_workers(g.name).empty(); }, 10s));
}

TEST_CASE("pool security: a worker alone (its supervisor killed) ends when its pool is unlinked") {
  pool_guard g(shmtest::unique_name("palone"));
  REQUIRE(shmbox::Pool::create(g.name, small_pool(g.name, 1, 1)));
  {
    auto sup = supervisor(g.name);
    check_settled(g.name, 1);
    sup->kill(SIGKILL);
    sup->wait(5s);
  }
  REQUIRE(live_workers(g.name).size() == 1);
  REQUIRE(::shm_unlink(("/shmbox-pool." + g.name).c_str()) == 0);
  CHECK(worker_said(g.name, "stopped 0"));
  CHECK(shmtest::eventually([&] { return live_workers(g.name).empty(); }, 10s));
}

TEST_CASE("pool security: pool rm --now removes garbage at a pool's name; a graceful rm says so; a FIFO stays") {
  const std::string name = shmtest::unique_name("prmg");
  const std::string path = "/dev/shm/shmbox-pool." + name;
  struct guard {
    std::string path;
    ~guard() { ::unlink(path.c_str()); }
  } cleanup{path};
  auto rm = [&](bool now) {
    std::vector<std::string> argv{shmtest::cli_path(), "pool", "rm", name, "--timeout", "1s"};
    if (now) argv.push_back("--now");
    return shmtest::run(argv, {}, 20s);
  };

  SUBCASE("an empty file") {
    const int fd = ::shm_open(("/shmbox-pool." + name).c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
    REQUIRE(fd >= 0);
    ::close(fd);
  }
  SUBCASE("a damaged header (breaks the invariants)") {
    REQUIRE(shmbox::Pool::create(name, small_pool(name, 0, 2)));
    raw_pool raw(name);
    raw.header()->init_count = 9;
  }
  SUBCASE("a creator that died before finishing it") {
    REQUIRE(shmbox::Pool::create(name, small_pool(name, 0, 2)));
    raw_pool raw(name);
    raw.header()->ready.store(0);
    raw.header()->creator_key = 12345;  // nobody holds the creator's byte
  }
  const auto graceful = rm(false);
  CHECK(graceful.code != 0);
  CHECK(graceful.err.find("--now") != std::string::npos);
  CHECK(exists(path));
  const auto now = rm(true);
  INFO(now.out << now.err);
  CHECK(now.code == 0);
  CHECK(!exists(path));
}

TEST_CASE("pool security: pool rm --now does not remove a FIFO planted at a pool's name") {
  const std::string name = shmtest::unique_name("prmf");
  const std::string path = "/dev/shm/shmbox-pool." + name;
  REQUIRE(::mkfifo(path.c_str(), 0600) == 0);
  struct guard {
    std::string path;
    ~guard() { ::unlink(path.c_str()); }
  } cleanup{path};
  const auto r = shmtest::run({shmtest::cli_path(), "pool", "rm", name, "--now", "--timeout", "1s"}, {}, 20s);
  CHECK(r.code != 0);
  CHECK(r.err.find("is a FIFO") != std::string::npos);
  CHECK(exists(path));
}

// --- Issue 53 (trust review): F1, F3, F4, F8, F9, F10, F12 ------------------

TEST_CASE("pool security: pool rm --timeout of a pool others can write starts nothing, whatever they write while it runs") {
  pool_guard g(shmtest::unique_name("prmstart"));
  const std::string mark = file_in_tmp("rm-cmd"), mark_init = file_in_tmp("rm-init");
  unlink_guard files{{mark, mark_init}};
  auto opts = small_pool(g.name, 1, 2);
  const std::string good = opts.command;
  opts.mode = 0666;
  REQUIRE(shmbox::Pool::create(g.name, opts));
  // Member 0 in use (so that the graceful removal below waits, as the pool's
  // supervisor), and no supervisor running: the remover becomes it.
  auto pool = shmbox::Pool::open(g.name);
  REQUIRE(pool);
  std::optional<shmbox::Lease> lease;
  {
    child run({shmtest::cli_path(), "pool", "run", g.name, "--command", good});
    check_settled(g.name, 1);
    auto l = pool->take(10s);
    REQUIRE(l);
    lease.emplace(std::move(*l));
    run.kill(SIGTERM);
    REQUIRE(shmtest::exited_with(run.wait(10s), 0));
  }
  // Another user rewrites the stored commands, then, while the owner's
  // `pool rm --timeout` runs, keeps resetting `removing` and asking for a
  // start of member 1 (plain writes, as any writer of a 0666 pool can).
  const std::string evil = "touch " + sh_quote(mark) + "; " + good;
  REQUIRE(evil.size() < shmbox::kMaxPoolCommand);
  CHECK(rewrite_as_other_user(g.name, &detail::pool_config::command, evil));
  CHECK(rewrite_as_other_user(g.name, &detail::pool_config::init_command, "touch " + sh_quote(mark_init)));
  unsigned char* base = nullptr;
  other_user_process writer([&] { return (base = map_pool(g.name)) != nullptr; },
                            [&] {
                              state_of(base)->removing.store(0);
                              detail::pool_member* e = member_of(base, 1);
                              if (detail::member_state_of(e->state.load()) != static_cast<std::uint32_t>(member_state::empty)) return;
                              e->generation.store(e->generation.load() + 1);
                              e->worker_start.store(0);
                              e->worker_pid.store(0);
                              e->started_ns.store(0);
                              e->stop_signal_ns.store(0);
                              e->state.store(detail::make_member_state(member_state::starting));
                            });
  REQUIRE(writer.ready());
  {
    // (Not shmtest::run: a process it started would keep its stdout and
    // stderr open, and a read of them to the end would never end.)
    child rm({shmtest::cli_path(), "pool", "rm", g.name, "--timeout", "3s"});
    const int st = rm.wait(30s);
    CHECK(!rm.timed_out());
    CHECK(!shmtest::exited_with(st, 0));  // member 0 is still in use: the graceful removal times out
  }
  writer.stop();
  // Member 1 was asked for again and again (each forged start takes the
  // next generation): the remover stopped it each time, never started it.
  INFO(describe(snapshot(g.name)));
  CHECK(raw_pool(g.name).member(1)->generation.load() > 2);
  CHECK(!shmtest::eventually([&] { return exists(mark) || exists(mark_init); }, 1s));
  for (const auto& w : live_workers(g.name)) CHECK(w.index == 0);  // no worker for member 1
  (void)lease->give_back(shmbox::outcome::ok);
}

TEST_CASE("pool security: after the grace, a supervisor's SIGKILL goes only to its workers not reaped yet") {
  if (::access("/usr/bin/strace", X_OK) != 0) {
    MESSAGE("skipped: needs /usr/bin/strace");
    return;
  }
  pool_guard g(shmtest::unique_name("preap"));
  auto opts = small_pool(g.name, 2, 2);
  // Member 1 ignores SIGTERM (SIG_IGN survives the exec): the SIGKILL round
  // after the grace happens, while member 0 dies at SIGTERM and is reaped.
  opts.command = "if [ \"$SHMBOX_MEMBER\" = 1 ]; then trap '' TERM; fi; " + opts.command;
  opts.stop_grace = 1500ms;
  REQUIRE(shmbox::Pool::create(g.name, opts));
  const std::string trace = file_in_tmp("sup-strace");
  unlink_guard files{{trace}};
  // The supervisor under strace: its kill(2), pidfd_send_signal(2) and wait4(2) calls, in order.
  child sup({"/usr/bin/strace", "-qq", "-o", trace, "-e", "trace=kill,pidfd_send_signal,wait4", shmtest::helper_path(),
             "pool-supervise", g.name},
            {}, true);
  REQUIRE(line_starting(sup, "supervising ").rfind("supervising ", 0) == 0);
  check_settled(g.name, 2);
  {  // both hang: neither sees its pool gone by itself
    auto p = shmbox::Pool::open(g.name);
    REQUIRE(p);
    auto held = take_leases(*p, 2);
    for (auto& l : held) REQUIRE(l.producer().post("hang") == shmbox::post_status::stored);
    REQUIRE(worker_said(g.name, "hanging 0"));
    REQUIRE(worker_said(g.name, "hanging 1"));
    for (auto& l : held) REQUIRE(l.give_back(shmbox::outcome::ok) == shmbox::return_status::ok);
  }
  pid_t first = 0;
  for (const auto& w : live_workers(g.name))
    if (w.index == 0) first = w.pid;
  REQUIRE(first > 0);
  REQUIRE(::shm_unlink(("/shmbox-pool." + g.name).c_str()) == 0);  // E: the supervisor stops its workers
  CHECK(shmtest::eventually([&] { return live_workers(g.name).empty(); }, 15s));
  CHECK(shmtest::exited_with(sup.wait(15s), 0));
  // After the wait4 that reaped member 0's worker, nothing was sent to its pid or group.
  std::istringstream in(shmtest::read_text(trace));
  const std::string reaped = "wait4(" + std::to_string(first) + ",";
  const std::string pid_arg = "(" + std::to_string(first) + ",", group_arg = "(-" + std::to_string(first) + ",";
  bool seen_reap = false, sigterm_sent = false;
  std::string line, late;
  while (std::getline(in, line)) {
    if (line.rfind("kill" + group_arg, 0) == 0 && line.find("SIGTERM") != std::string::npos) sigterm_sent = true;
    if (line.rfind(reaped, 0) == 0 && line.find(" = " + std::to_string(first)) != std::string::npos) seen_reap = true;
    else if (seen_reap && (line.rfind("kill" + pid_arg, 0) == 0 || line.rfind("kill" + group_arg, 0) == 0)) late += line + "\n";
  }
  CHECK(sigterm_sent);  // the grace began with SIGTERM to its group
  CHECK(seen_reap);     // and it was reaped during the grace
  CHECK_MESSAGE(late.empty(), "sent after pid " << first << " was reaped:\n" << late);
}

namespace {

// What another user plants at member box names (they are predictable:
// <pool>.m<index>.<generation>): a FIFO, an empty file, a 0600 file of
// bytes, a box of its own whose owner lives (`owner`: kept by the child).
bool plant(const std::string& box, int kind, std::optional<shmbox::Owner>& owner) {
  const std::string path = "/dev/shm/shmbox." + box;
  switch (kind) {
    case 0: return ::mkfifo(path.c_str(), 0600) == 0;
    case 1: {
      const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0600);
      return fd >= 0 && ::close(fd) == 0;
    }
    case 2: {
      const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0600);
      const std::string bytes(8192, '\x5a');
      return fd >= 0 && ::write(fd, bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size()) && ::close(fd) == 0;
    }
    default: {
      if (!shmbox::Box::create(box, {.capacity = 4, .slot_size = 64})) return false;
      auto o = shmbox::Owner::acquire(box);
      if (!o) return false;
      owner.emplace(std::move(*o));
      return true;
    }
  }
}

}  // namespace

TEST_CASE("pool security: files another user plants at a pool's next member names are skipped, never adopted; nothing wedges") {
  pool_guard g(shmtest::unique_name("pplant"));
  auto opts = small_pool(g.name, 1, 2);
  opts.start_timeout = 1000ms;
  REQUIRE(shmbox::Pool::create(g.name, opts));
  auto sup = supervisor(g.name);
  const shmbox::pool_info settled = check_settled(g.name, 1);
  REQUIRE(settled.members.size() == 1);
  const std::uint32_t m0 = settled.members[0].index, m1 = 1 - m0;
  const std::uint64_t g0 = settled.members[0].generation;
  // The next four names of both entries: one of each kind (a live stranger's box first for the entry never started).
  std::optional<shmbox::Owner> owner_a, owner_b;
  std::vector<std::string> planted;
  other_user_process stranger(
      [&] {
        for (int k = 0; k < 4; ++k) {
          if (!plant(detail::member_box_name(g.name, m0, g0 + 1 + k), k, owner_a)) return false;
          if (!plant(detail::member_box_name(g.name, m1, 1 + k), 3 - k, owner_b)) return false;
        }
        return true;
      },
      [] {});
  REQUIRE(stranger.ready());
  for (int k = 0; k < 4; ++k) {
    planted.push_back(detail::member_box_name(g.name, m0, g0 + 1 + k));
    planted.push_back(detail::member_box_name(g.name, m1, 1 + k));
  }
  auto p = shmbox::Pool::open(g.name);
  REQUIRE(p);
  {  // member 0 fails: replaced, under its next name (planted)
    auto l = p->take(10s);
    REQUIRE(l);
    CHECK(l->give_back(shmbox::outcome::fail) == shmbox::return_status::ok);
  }
  {  // two at once: member 1 starts too (its first name is a stranger's live box)
    auto held = take_leases(*p, 2);
    for (auto& l : held) {
      CHECK(l.producer().post("x") == shmbox::post_status::stored);
      CHECK(l.give_back(shmbox::outcome::ok) == shmbox::return_status::ok);
    }
  }
  CHECK(settles(g.name, [](const shmbox::pool_info& i) { return i.members.size() == 2 && i.free == 2 && i.stopping == 0; }, 15s));
  const shmbox::pool_info now = snapshot(g.name);
  INFO(describe(now));
  for (const auto& m : now.members) {
    CHECK(m.worker_alive);
    CHECK(m.generation > (m.index == m0 ? g0 + 4 : 4));  // every planted name skipped
  }
  check_take_works(g.name);
  // What was planted is the stranger's: left where it is, its box's owner untouched.
  for (const auto& b : planted) CHECK(exists("/dev/shm/shmbox." + b));
  CHECK(alive(stranger.pid()));
}

TEST_CASE("pool security: a member entry forged to name what a stranger planted is not taken for its worker, nor kept stopping") {
  pool_guard g(shmtest::unique_name("pforgebox"));
  REQUIRE(shmbox::Pool::create(g.name, small_pool(g.name, 1, 1)));
  auto sup = supervisor(g.name);
  const shmbox::pool_info settled = check_settled(g.name, 1);
  const std::uint64_t forged_gen = settled.members[0].generation + 100;
  int kind = 3;
  SUBCASE("a box of its own, its owner alive") { kind = 3; }
  SUBCASE("a FIFO") { kind = 0; }
  SUBCASE("a file of bytes") { kind = 2; }
  std::optional<shmbox::Owner> owner;
  other_user_process stranger([&] { return plant(detail::member_box_name(g.name, 0, forged_gen), kind, owner); }, [] {});
  REQUIRE(stranger.ready());
  {  // a writer of the pool points the free member at it
    raw_pool raw(g.name);
    raw.member(0)->generation.store(forged_gen);
  }
  // The supervisor finds no worker of its own behind the entry: it is
  // stopped (the planted file is nothing of ours to drain) and replaced.
  CHECK(settles(g.name, [&](const shmbox::pool_info& i) {
    return i.free == 1 && i.stopping == 0 && i.members.size() == 1 && i.members[0].generation > forged_gen && i.members[0].worker_alive;
  }, 15s));
  check_take_works(g.name);
  CHECK(exists("/dev/shm/shmbox." + detail::member_box_name(g.name, 0, forged_gen)));  // the stranger's, left alone
}

TEST_CASE("pool security: groups gather only this user's pools; another user's pool naming the group is left out") {
  if (::geteuid() != 0) {
    MESSAGE("skipped: needs root (a second user's pool)");
    return;
  }
  const std::string group = shmtest::unique_name("grp");
  pool_guard ours(shmtest::unique_name("pgrp-ours")), theirs(shmtest::unique_name("pgrp-theirs"));
  auto opts = small_pool(ours.name, 0, 1);
  opts.group = group;
  REQUIRE(shmbox::Pool::create(ours.name, opts));
  auto sup = supervisor(ours.name);
  // uid 65534's pool of the same group, claiming four free members: it would come first.
  CHECK(as_other_user([&] {
    auto o = small_pool(theirs.name, 0, 4);
    o.group = group;
    return static_cast<bool>(shmbox::Pool::create(theirs.name, o));
  }));
  {
    raw_pool raw(theirs.name);
    for (std::uint32_t m = 0; m < 4; ++m) raw.member(m)->state.store(detail::make_member_state(member_state::free));
  }
  auto l = shmbox::Pool::take_group(group, 10s);
  INFO(shmbox::explain(l.error()));
  REQUIRE(l);
  CHECK(l->box().rfind(ours.name + ".m", 0) == 0);
  CHECK(l->give_back(shmbox::outcome::ok) == shmbox::return_status::ok);
  auto removed = shmbox::Pool::remove_group(group, shmbox::removal::immediate, 10s);
  INFO(shmbox::explain(removed.error()));
  REQUIRE(removed);
  CHECK(*removed == std::vector<std::string>{ours.name});
  CHECK(!pool_segment_exists(ours.name));
  CHECK(pool_segment_exists(theirs.name));
}

TEST_CASE("pool security: a group writer's member mode never gives member boxes more writers than the pool has") {
  if (::geteuid() != 0) {
    MESSAGE("skipped: needs root (a group writer of another uid)");
    return;
  }
  pool_guard g(shmtest::unique_name("pmmode"));
  auto opts = small_pool(g.name, 1, 1);
  opts.mode = 0660;
  opts.member.mode = 0600;
  REQUIRE(shmbox::Pool::create(g.name, opts));
  const std::string path = "/dev/shm/shmbox-pool." + g.name;
  REQUIRE(::chown(path.c_str(), 0, 65534) == 0);  // group 65534 may write it
  CHECK(as_other_user([&] {  // uid/gid 65534: a writer by its group
    unsigned char* base = map_pool(g.name);
    if (base == nullptr) return false;
    reinterpret_cast<detail::pool_header*>(base)->member_mode = 0666;
    return true;
  }));
  child run({shmtest::cli_path(), "pool", "run", g.name, "--command", opts.command});
  const shmbox::pool_info settled = check_settled(g.name, 1);
  struct stat st {};
  REQUIRE(::stat(("/dev/shm/shmbox." + settled.members[0].box).c_str(), &st) == 0);
  INFO("member box mode " << std::oct << (st.st_mode & 07777));
  CHECK((st.st_mode & 022) == 0);  // the pool's group (65534) is not the box's: no g+w; nor o+w
  run.kill(SIGTERM);
  CHECK(shmtest::exited_with(run.wait(10s), 0));
}

TEST_CASE("pool security: the init command gets SHMBOX_WORKER_PID only for a proven worker, never a pid the table names") {
  pool_guard g(shmtest::unique_name("pinitpid"));
  const std::string said = file_in_tmp("init-pid");
  unlink_guard files{{said}};
  auto opts = small_pool(g.name, 1, 1);
  opts.init_command = "echo \"${SHMBOX_WORKER_PID:-none}\" >> " + sh_quote(said);
  REQUIRE(opts.init_command.size() < shmbox::kMaxPoolInitCommand);
  REQUIRE(shmbox::Pool::create(g.name, opts));
  child victim({"/bin/sleep", "120"});
  // A supervisor killed right after it spawned the worker (S4): no pid in
  // the entry. (Kept until the end: its stdout is the worker's.)
  auto first = supervisor(g.name, "supervisor.after_spawn:1");
  first->wait(10s);
  REQUIRE(worker_said(g.name, "ready 0"));
  const auto workers = live_workers(g.name);
  REQUIRE(workers.size() == 1);
  {  // a writer names the victim as the entry's worker
    raw_pool raw(g.name);
    raw.member(0)->worker_pid.store(static_cast<std::uint64_t>(victim.pid()));
    raw.member(0)->worker_ns.store(detail::self_pid_ns());
  }
  auto sup = supervisor(g.name);  // the successor runs the init command (S6a)
  REQUIRE(shmtest::eventually([&] { return !shmtest::read_text(said).empty(); }, 15s));
  const std::string line = shmtest::read_text(said);
  INFO("init command said: " << line);
  CHECK(line.find(std::to_string(victim.pid())) == std::string::npos);
  CHECK(line == std::to_string(workers[0].pid) + "\n");  // the box's owner, proven (SP2)
  check_take_works(g.name);
}

TEST_CASE("pool security: client entries whose bytes another user holds are skipped: a take registers at once") {
  pool_guard g(shmtest::unique_name("pclibyte"));
  auto opts = small_pool(g.name, 1, 1);
  opts.mode = 0666;
  opts.max_clients = 8;
  opts.queue_max = 4;
  REQUIRE(shmbox::Pool::create(g.name, opts));
  child run({shmtest::cli_path(), "pool", "run", g.name, "--command", opts.command});  // client entry 0
  check_settled(g.name, 1);
  // Another user holds the bytes of client entries 1..6 exclusively (a 0666 pool lets it).
  int fd = -1;
  other_user_process holder(
      [&] {
        fd = ::shm_open(("/shmbox-pool." + g.name).c_str(), O_RDWR, 0);
        if (fd < 0) return false;
        detail::pool_header h{};
        if (::pread(fd, &h, sizeof h, 0) != static_cast<ssize_t>(sizeof h)) return false;
        for (std::uint64_t c = 1; c <= 6; ++c)
          if (!detail::try_lock_byte(fd, h.clients_offset + c * sizeof(detail::pool_client), true)) return false;
        return true;
      },
      [] {});
  REQUIRE(holder.ready());
  const auto t0 = std::chrono::steady_clock::now();
  const auto took = shmtest::run({shmtest::cli_path(), "pool", "take", g.name, "--timeout", "5s", "hello"}, {}, 20s);
  INFO(took.out << took.err);
  CHECK(took.code == 0);
  CHECK(since(t0) < 900ms);  // not a second per held entry, nor one for the first
  // Entry 7 held too: no entry left; the take says so after one deadline (1 s), not one per entry.
  other_user_process last(
      [&] {
        fd = ::shm_open(("/shmbox-pool." + g.name).c_str(), O_RDWR, 0);
        detail::pool_header h{};
        return fd >= 0 && ::pread(fd, &h, sizeof h, 0) == static_cast<ssize_t>(sizeof h) &&
               detail::try_lock_byte(fd, h.clients_offset + 7 * sizeof(detail::pool_client), true);
      },
      [] {});
  REQUIRE(last.ready());
  const auto t1 = std::chrono::steady_clock::now();
  const auto refused = shmtest::run({shmtest::cli_path(), "pool", "take", g.name, "--timeout", "5s", "hello"}, {}, 20s);
  CHECK(refused.code != 0);
  CHECK(refused.err.find("without the protocol") != std::string::npos);
  CHECK(since(t1) < 3s);
  run.kill(SIGTERM);
  CHECK(shmtest::exited_with(run.wait(10s), 0));
}
