// Files any local user may plant in /dev/shm (issue 20, items 13 and 14): a
// FIFO, a symbolic link to a real box segment of ours, a dangling link, a
// directory, a unix socket and a character device (as root; else a link to
// /dev/null), each put at each kind of shmbox path: a box (shmbox.NAME), a
// pool (shmbox-pool.NAME), a bridge status segment (shmbox-bridge.BOX.import
// and .export) and a notify doorbell (shmbox-bell.HEX). For each, every
// reading command of the CLI and the library's opens (run by the test helper)
// is run as a separate process under a deadline: it must return in time (a
// hang is killed and fails the test; before lib/base/shm_file.hpp, `shmbox stat BOX
// --prometheus` waited forever on a FIFO at the bridge status path), exit with
// an error (or succeed and show the file as not a segment), name what the
// file is, and leave it where it was (gc may remove none of these).
#include <doctest/doctest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "wake/notify_hub.hpp"
#include "shmbox/shmbox.hpp"
#include "support.hpp"

using json = nlohmann::json;
using namespace std::chrono_literals;

namespace {

constexpr auto kDeadline = 10s;  // per command; the longest legitimate wait here is under 2 s

struct outcome {
  int code = -1;  // exit code, -1 if killed
  bool hung = false;
  std::string out, err;
  std::string all() const { return out + err; }
};

// Runs argv as a separate process with one deadline for all of it; a
// process still running then is killed (and reported as hung).
outcome run_bounded(const std::vector<std::string>& argv) {
  shmtest::child c(argv, {}, false, true);
  const auto until = std::chrono::steady_clock::now() + kDeadline;
  outcome o;
  o.out = c.read_all(kDeadline);
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
  const int st = c.wait(std::max(left, std::chrono::milliseconds(0)));
  o.hung = c.timed_out();
  o.err = c.read_stderr();  // the process is gone: end of file
  o.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return o;
}

outcome cli(std::vector<std::string> args) {
  args.insert(args.begin(), shmtest::cli_path());
  return run_bounded(args);
}

// The test helper's "try-open WHAT NAME": one library call, in a process of its own.
outcome library(const std::string& what, const std::string& name) {
  return run_bounded({shmtest::helper_path(), "try-open", what, name});
}

enum class plant { fifo, link_to_box, dangling_link, directory, socket, device };
constexpr plant kPlants[] = {plant::fifo, plant::link_to_box, plant::dangling_link, plant::directory, plant::socket, plant::device};

const char* plant_name(plant p) {
  switch (p) {
    case plant::fifo: return "fifo";
    case plant::link_to_box: return "link to a box";
    case plant::dangling_link: return "dangling link";
    case plant::directory: return "directory";
    case plant::socket: return "socket";
    case plant::device: return "device";
  }
  return "?";
}

// A file put at a path, and what the tools must call it.
struct planted {
  std::string path;
  std::string kind;  // "a FIFO", "a symbolic link", ...
  struct stat st {};
};

// Removes every path given to it (a directory with rmdir) when it goes out of scope, also when a check failed.
struct plant_guard {
  std::vector<std::string> paths;
  plant_guard() = default;
  plant_guard(const plant_guard&) = delete;
  plant_guard& operator=(const plant_guard&) = delete;
  ~plant_guard() {
    for (const auto& p : paths) remove(p);
  }
  static void remove(const std::string& p) {
    struct stat st {};
    if (::lstat(p.c_str(), &st) != 0) return;
    if (S_ISDIR(st.st_mode)) ::rmdir(p.c_str());
    else ::unlink(p.c_str());
  }
};

// Puts a file of kind `p` at `path` (nothing may be there). `box_segment`:
// a real box's segment, the target of plant::link_to_box (following the link
// would find a valid box: the tools must not).
planted plant_at(plant_guard& guard, const std::string& path, plant p, const std::string& box_segment) {
  guard.paths.push_back(path);
  plant_guard::remove(path);
  planted f{path, "", {}};
  switch (p) {
    case plant::fifo:
      // 0644, not a doorbell's 0622 (what gc may take for one of ours).
      REQUIRE(::mkfifo(path.c_str(), 0644) == 0);
      f.kind = "a FIFO";
      break;
    case plant::link_to_box:
      REQUIRE(::symlink(box_segment.c_str(), path.c_str()) == 0);
      f.kind = "a symbolic link";
      break;
    case plant::dangling_link:
      REQUIRE(::symlink((path + ".missing").c_str(), path.c_str()) == 0);
      f.kind = "a symbolic link";
      break;
    case plant::directory:
      REQUIRE(::mkdir(path.c_str(), 0755) == 0);
      f.kind = "a directory";
      break;
    case plant::socket: {
      const int s = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
      REQUIRE(s >= 0);
      sockaddr_un a{};
      a.sun_family = AF_UNIX;
      REQUIRE(path.size() < sizeof a.sun_path);
      std::memcpy(a.sun_path, path.c_str(), path.size() + 1);
      const int rc = ::bind(s, reinterpret_cast<const sockaddr*>(&a), sizeof a);
      ::close(s);  // the socket file stays
      REQUIRE(rc == 0);
      f.kind = "a unix socket";
      break;
    }
    case plant::device:
      // /dev/null's numbers; without root (or on a nodev /dev/shm), a link to it.
      if (::geteuid() == 0 && ::mknod(path.c_str(), S_IFCHR | 0666, ::makedev(1, 3)) == 0) {
        f.kind = "a character device";
      } else {
        REQUIRE(::symlink("/dev/null", path.c_str()) == 0);
        f.kind = "a symbolic link";
      }
      break;
  }
  REQUIRE(::lstat(path.c_str(), &f.st) == 0);
  return f;
}

// The planted file is still there, the same file, untouched.
bool still_there(const planted& f) {
  struct stat now {};
  return ::lstat(f.path.c_str(), &now) == 0 && now.st_ino == f.st.st_ino && now.st_dev == f.st.st_dev &&
         (now.st_mode & S_IFMT) == (f.st.st_mode & S_IFMT);
}

// What a command is aimed at, which decides what is expected of it.
enum class aim { box, pool, box_list, pool_list, gc, bell_gc };

struct command {
  std::vector<std::string> args;
  aim at;
};

// Every reading command of the CLI, for a box name and a pool name; `prefix`
// bounds gc to this test's names (a real gc of the whole machine is not for
// a test run beside others). gc without --prefix (also the doorbells) only
// as a dry run.
std::vector<command> reading_commands(const std::string& box, const std::string& pool, const std::string& prefix) {
  return {
      {{"stat", box}, aim::box},
      {{"stat", box, "--json"}, aim::box},
      {{"stat", box, "--prometheus"}, aim::box},
      {{"dump", box}, aim::box},
      {{"dump", box, "--json"}, aim::box},
      {{"heirs", box}, aim::box},
      {{"verify", box}, aim::box},
      {{"verify", box, "--json"}, aim::box},
      {{"watch", box, "--count", "1", "--plain", "--interval", "50"}, aim::box},
      {{"ls"}, aim::box_list},
      {{"ls", "--json"}, aim::box_list},
      {{"gc", "--dry-run", "--prefix", prefix}, aim::gc},
      {{"gc", "--prefix", prefix}, aim::gc},
      {{"gc", "--dry-run"}, aim::bell_gc},
      {{"pool", "stat", pool}, aim::pool},
      {{"pool", "stat", pool, "--json"}, aim::pool},
      {{"pool", "stat", pool, "--prometheus"}, aim::pool},
      {{"pool", "watch", pool, "--count", "1", "--plain", "--interval", "50"}, aim::pool},
      {{"pool", "take", pool, "--timeout", "0"}, aim::pool},
      {{"pool", "take", pool, "--timeout", "0", "--any-owner"}, aim::pool},
      {{"pool", "ls"}, aim::pool_list},
      {{"pool", "ls", "--json"}, aim::pool_list},
  };
}

// The library's opens, run by the helper: what each is aimed at.
const std::pair<const char*, aim> kLibraryCalls[] = {
    {"box", aim::box},   {"inspect", aim::box},  {"producer", aim::box},     {"verify", aim::box},
    {"pool", aim::pool}, {"pool-any", aim::pool}, {"inspect-pool", aim::pool},
};

std::string joined(const std::vector<std::string>& args) {
  std::string s;
  for (const auto& a : args) s += (s.empty() ? "" : " ") + a;
  return s;
}

// The line of `text` that starts with `name` + " " (a row of ls / pool ls), or "".
std::string row_of(const std::string& text, const std::string& name) {
  for (const auto& l : shmtest::lines_of(text))
    if (l.rfind(name + " ", 0) == 0) return l;
  return {};
}

// A name for a doorbell no process has: "shmbox-bell." and 16 hex digits.
std::string unused_bell_entry(unsigned n) {
  char b[64];
  std::snprintf(b, sizeof b, "shmbox-bell.fee1%06x%06x", static_cast<unsigned>(::getpid()) & 0xffffff, n & 0xffffff);
  return b;
}

// The checks of one command aimed at `at` with file `f` planted at a path of kind `path_kind`.
void check_command(const outcome& o, aim at, aim path_kind, const planted& f, const std::string& name) {
  CHECK_FALSE(o.hung);
  // Never glibc's "Invalid argument" (shm_open's EISDIR) nor an unexpected error for a planted file.
  CHECK(o.all().find("Invalid argument") == std::string::npos);
  CHECK(o.all().find("unexpected system error") == std::string::npos);
  if (at == aim::bell_gc) {
    // The planted file at a doorbell path is not a doorbell of ours: never listed for removal.
    if (path_kind == aim::bell_gc) CHECK(o.out.find("would remove " + name) == std::string::npos);
    CHECK((o.code == 0 || o.code == 3));
    return;
  }
  if (at != path_kind) return;  // aimed elsewhere: bounded and harmless is all
  switch (at) {
    case aim::box:
    case aim::pool:
      // An error, one that says what the file is (verify: on stdout, as its problem).
      CHECK(o.code == 1);
      CHECK(o.all().find(f.kind) != std::string::npos);
      CHECK(o.all().find(f.path) != std::string::npos);
      break;
    case aim::box_list:
    case aim::pool_list:
      CHECK(o.code == 0);
      if (o.out.rfind("[", 0) == 0) {  // --json: its own entry, its own error
        bool found = false;
        for (const auto& e : json::parse(o.out)) {
          if (e["name"] != name) continue;
          found = true;
          CHECK(e["status"] != "ok");
          CHECK(e["error"].get<std::string>().find(f.kind) != std::string::npos);
          CHECK(e["error"].get<std::string>().find(f.path) != std::string::npos);
        }
        CHECK(found);
      } else {
        const std::string row = row_of(o.out, name);
        CAPTURE(row);
        CHECK(row.find(f.kind.substr(2)) != std::string::npos);  // "FIFO", "symbolic link", ...
        if (at == aim::box_list) CHECK(row.find("NOT-A-BOX") != std::string::npos);
      }
      break;
    case aim::gc:
      // Skipped and said why (exit 3), never removed.
      CHECK(o.code == 3);
      CHECK(o.out.find("skipped " + name) != std::string::npos);
      CHECK(row_of(o.out, "skipped " + name).find(f.kind) != std::string::npos);
      break;
    default: break;
  }
}

// Plants each kind of file at `path_of(name)` for a fresh name and runs every command and library call.
template <class PathOf>
void run_matrix(aim path_kind, PathOf path_of) {
  const std::string prefix = shmtest::unique_name("plant") + "-";
  // A real box: what plant::link_to_box points at. Held open here, so gc leaves it alone.
  shmtest::segment_guard real(prefix + "real");
  auto real_box = shmbox::Box::create(real.name, {.capacity = 4});
  REQUIRE(real_box);
  unsigned n = 0;
  for (const plant p : kPlants) {
    CAPTURE(std::string(plant_name(p)));
    const std::string name = path_kind == aim::bell_gc ? unused_bell_entry(n) : prefix + std::to_string(n);
    ++n;
    plant_guard guard;
    const planted f = plant_at(guard, path_of(name), p, "/dev/shm/shmbox." + real.name);
    for (const command& c : reading_commands(name, name, prefix)) {
      if (c.at == aim::bell_gc && path_kind != aim::bell_gc) continue;  // gc of the whole machine: once per doorbell plant only
      CAPTURE(joined(c.args));
      const outcome o = cli(c.args);
      CAPTURE(o.out);
      CAPTURE(o.err);
      check_command(o, c.at, path_kind, f, name);
      CHECK(still_there(f));
    }
    for (const auto& [what, at] : kLibraryCalls) {
      CAPTURE(what);
      const outcome o = library(what, name);
      CAPTURE(o.out);
      CAPTURE(o.err);
      CHECK_FALSE(o.hung);
      CHECK(o.code == 0);
      if (at == path_kind) {
        CHECK(o.out.rfind(what == std::string("verify") ? "problems " : "error not_a_box ", 0) == 0);
        CHECK(o.out.find(f.kind) != std::string::npos);
      }
      CHECK(still_there(f));
    }
  }
}

}  // namespace

TEST_CASE("planted at a box path: every reading command and open answers at once, names the file, leaves it") {
  run_matrix(aim::box, [](const std::string& name) { return "/dev/shm/shmbox." + name; });
}

TEST_CASE("planted at a pool path: every reading command and open answers at once, names the file, leaves it") {
  run_matrix(aim::pool, [](const std::string& name) { return "/dev/shm/shmbox-pool." + name; });
}

TEST_CASE("planted at a doorbell path: every command answers at once; gc never takes it for a doorbell") {
  run_matrix(aim::bell_gc, [](const std::string& entry) { return "/dev/shm/" + entry; });
}

TEST_CASE("planted at a bridge status path: stat (text, --json, --prometheus) shows the box at once and says what the file is") {
  const std::string prefix = shmtest::unique_name("pbridge") + "-";
  shmtest::segment_guard box(prefix + "box");
  auto held = shmbox::Box::create(box.name, {.capacity = 4});  // held: gc leaves it
  REQUIRE(held);
  for (const char* role : {"import", "export"}) {
    CAPTURE(role);
    unsigned n = 0;
    for (const plant p : kPlants) {
      CAPTURE(std::string(plant_name(p)));
      plant_guard guard;
      const planted f = plant_at(guard, "/dev/shm/shmbox-bridge." + box.name + "." + role, p,
                                 "/dev/shm/shmbox." + box.name);
      for (const command& c : reading_commands(box.name, prefix + "nopool" + std::to_string(n++), prefix)) {
        if (c.at == aim::bell_gc) continue;  // gc of the whole machine: only in the doorbell case
        CAPTURE(joined(c.args));
        const outcome o = cli(c.args);
        CAPTURE(o.out);
        CAPTURE(o.err);
        CHECK_FALSE(o.hung);
        CHECK(o.all().find("Invalid argument") == std::string::npos);
        CHECK(still_there(f));
        if (c.args[0] != "stat") continue;
        // The box is shown (exit 0, stdout as usual); stderr says what is at the status path and what to do.
        CHECK(o.code == 0);
        CHECK(o.err.find("warning: the " + std::string(role) + " bridge status of box '" + box.name + "' is not shown") !=
              std::string::npos);
        CHECK(o.err.find(f.kind) != std::string::npos);
        CHECK(o.err.find(f.path) != std::string::npos);
        if (c.args.size() == 3 && c.args[2] == "--json") CHECK(json::parse(o.out)["name"] == box.name);
        if (c.args.size() == 3 && c.args[2] == "--prometheus") CHECK(o.out.find("shmbox_") != std::string::npos);
      }
    }
  }
}

TEST_CASE("gc removes only a doorbell it proves is ours and unread") {
  const std::string dir = "/dev/shm/";
  plant_guard guard;
  auto fifo = [&](const std::string& entry, mode_t mode) {
    guard.paths.push_back(dir + entry);
    plant_guard::remove(dir + entry);
    REQUIRE(::mkfifo((dir + entry).c_str(), 0600) == 0);
    REQUIRE(::chmod((dir + entry).c_str(), mode) == 0);  // exactly, whatever the umask
  };
  auto exists = [&](const std::string& entry) {
    struct stat st {};
    return ::lstat((dir + entry).c_str(), &st) == 0;
  };
  // As make_bell leaves one (0622), nobody reading: removed; its temporary name too.
  const std::string unread = unused_bell_entry(100), unread_new = unused_bell_entry(101) + ".new";
  fifo(unread, 0622);
  fifo(unread_new, 0600);
  // Being read: kept. Another mode, another name: not ours, kept.
  const std::string read = unused_bell_entry(102), other_mode = unused_bell_entry(103), other_name = "shmbox-bell.not-hex-digits";
  fifo(read, 0622);
  const int reader = ::open((dir + read).c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  REQUIRE(reader >= 0);
  fifo(other_mode, 0644);
  fifo(other_name, 0622);
  // A regular file, a directory and a link to a FIFO at doorbell names: not FIFOs, kept (the link not followed).
  const std::string file = unused_bell_entry(104), directory = unused_bell_entry(105), link = unused_bell_entry(106);
  guard.paths.push_back(dir + file);
  REQUIRE(::close(::open((dir + file).c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0622)) == 0);
  guard.paths.push_back(dir + directory);
  REQUIRE(::mkdir((dir + directory).c_str(), 0755) == 0);
  guard.paths.push_back(dir + link);
  REQUIRE(::symlink((dir + unread).c_str(), (dir + link).c_str()) == 0);

  // gc --dry-run (every doorbell: no --prefix) lists the unread ones only; it removes nothing.
  const outcome dry = cli({"gc", "--dry-run"});
  CAPTURE(dry.out);
  CHECK_FALSE(dry.hung);
  CHECK(dry.out.find("would remove " + unread + " ") != std::string::npos);
  CHECK(dry.out.find("would remove " + unread_new + " ") != std::string::npos);
  for (const auto& kept : {read, other_mode, other_name, file, directory, link})
    CHECK(dry.out.find("would remove " + kept) == std::string::npos);
  CHECK(exists(unread));
  // What collect_bells() does for each name (a real gc without --prefix would
  // collect other test runs' idle boxes too: not here).
  for (const auto& entry : {read, other_mode, other_name, file, directory, link}) {
    CAPTURE(entry);
    CHECK_FALSE(shmbox::detail::remove_unread_bell(entry, false));
    CHECK(exists(entry));
  }
  CHECK(shmbox::detail::remove_unread_bell(unread, false));
  CHECK_FALSE(exists(unread));
  CHECK(shmbox::detail::remove_unread_bell(unread_new, false));
  CHECK_FALSE(exists(unread_new));
  ::close(reader);
}

TEST_CASE("pool ls: each unusable pool's row has its own sentence; an empty or headerless pool names pool rm --now") {
  const std::string prefix = shmtest::unique_name("pls") + "-";
  // Sorted by name: two refusals of the same kind (not_a_box) around a third
  // (incomplete), so that a sentence left from another row would show.
  const std::string fifo_pool = prefix + "a-fifo", empty_pool = prefix + "b-empty", junk_pool = prefix + "c-junk",
                    dir_pool = prefix + "d-dir";
  const auto path = [](const std::string& pool) { return "/dev/shm/shmbox-pool." + pool; };
  plant_guard guard;
  guard.paths = {path(fifo_pool), path(empty_pool), path(junk_pool), path(dir_pool)};
  REQUIRE(::mkfifo(path(fifo_pool).c_str(), 0600) == 0);
  REQUIRE(::close(::open(path(empty_pool).c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0600)) == 0);
  {
    const int fd = ::open(path(junk_pool).c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
    REQUIRE(fd >= 0);
    const std::string junk(8192, '\x5a');
    CHECK(::write(fd, junk.data(), junk.size()) == static_cast<ssize_t>(junk.size()));
    ::close(fd);
  }
  REQUIRE(::mkdir(path(dir_pool).c_str(), 0755) == 0);

  const outcome ls = cli({"pool", "ls"});
  CAPTURE(ls.out);
  CHECK_FALSE(ls.hung);
  CHECK(ls.code == 0);
  const std::string fifo_row = row_of(ls.out, fifo_pool), empty_row = row_of(ls.out, empty_pool),
                    junk_row = row_of(ls.out, junk_pool), dir_row = row_of(ls.out, dir_pool);
  CHECK(fifo_row.find(path(fifo_pool) + " is a FIFO, not a shmbox pool") != std::string::npos);
  CHECK(empty_row.find("pool '" + empty_pool + "' is not a valid pool (an empty file): remove it with 'shmbox pool rm " +
                       empty_pool + " --now'") != std::string::npos);
  CHECK(junk_row.find("pool '" + junk_pool + "' is not a valid pool") != std::string::npos);
  CHECK(junk_row.find("wrong magic number") != std::string::npos);
  CHECK(junk_row.find("'shmbox pool rm " + junk_pool + " --now'") != std::string::npos);
  CHECK(dir_row.find(path(dir_pool) + " is a directory, not a shmbox pool") != std::string::npos);
  CHECK(dir_row.find("rmdir " + path(dir_pool)) != std::string::npos);
  // No row speaks of a box.
  for (const auto& row : {fifo_row, empty_row, junk_row, dir_row}) CHECK(row.find("shmbox rm ") == std::string::npos);

  const outcome js = cli({"pool", "ls", "--json"});
  REQUIRE_FALSE(js.hung);
  int own = 0;
  for (const auto& e : json::parse(js.out)) {
    const std::string n = e["name"], error = e.value("error", "");
    if (n == fifo_pool) own += error.find("a FIFO") != std::string::npos;
    if (n == empty_pool) own += error.find("(an empty file)") != std::string::npos;
    if (n == junk_pool) own += error.find("wrong magic number") != std::string::npos;
    if (n == dir_pool) own += error.find("a directory") != std::string::npos;
  }
  CHECK(own == 4);

  // stat and take say the same of the empty pool and of the directory.
  for (const auto& args : {std::vector<std::string>{"pool", "stat", empty_pool}, {"pool", "take", empty_pool, "--timeout", "0"}}) {
    const outcome o = cli(args);
    CAPTURE(o.err);
    CHECK(o.code == 1);
    CHECK(o.err.find("is not a valid pool (an empty file): remove it with 'shmbox pool rm " + empty_pool + " --now'") !=
          std::string::npos);
  }
  for (const auto& args : {std::vector<std::string>{"pool", "stat", dir_pool}, {"pool", "take", dir_pool, "--timeout", "0"}}) {
    const outcome o = cli(args);
    CAPTURE(o.err);
    CHECK(o.code == 1);
    CHECK(o.err.find("is a directory, not a shmbox pool") != std::string::npos);
    CHECK(o.err.find("Invalid argument") == std::string::npos);
  }
}
