// `shmbox watch`: the line-per-refresh form (a pipe, or --plain) and the
// full-screen form on a pseudo-terminal (script(1), and forkpty for what
// script hides: the termios of the terminal), on boxes in every state.
#include <doctest/doctest.h>
#include <dirent.h>
#include <fcntl.h>
#include <pty.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <termios.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "checks.hpp"
#include "segment/layout.hpp"
#include "support.hpp"

using namespace std::chrono_literals;
using shmtest::cat;

namespace {

using shmtest::cli;  // tests/support/support.hpp

// "2026-11-22T06:20:01.123Z box=jobs depth=12/1024 ..." -> {"box": "jobs", ...}
// (the time under "time").
std::map<std::string, std::string> fields(const std::string& line) {
  std::map<std::string, std::string> f;
  std::istringstream in(line);
  std::string tok;
  bool first = true;
  while (in >> tok) {
    const auto eq = tok.find('=');
    if (first && eq == std::string::npos) f["time"] = tok;
    else if (eq != std::string::npos) f[tok.substr(0, eq)] = tok.substr(eq + 1);
    else f["?bare"] += tok;  // not key=value: a format error the checks below catch
    first = false;
  }
  return f;
}

// A plain data line: a UTC time, then key=value only.
void check_plain_line(const std::string& line) {
  CAPTURE(line);
  const auto f = fields(line);
  CHECK(f.count("?bare") == 0);
  REQUIRE(f.count("time") == 1);
  const std::string& t = f.at("time");
  CHECK(t.size() == 24);  // 2026-11-22T06:20:01.123Z
  CHECK(t[10] == 'T');
  CHECK(t.back() == 'Z');
  for (const char* k : {"box", "depth", "posted/s", "delivered/s", "dropped/s", "rejected/s", "posted", "delivered", "dropped",
                        "rejected", "owner", "owner_status", "epoch", "state", "requests", "heirs", "heirs_alive",
                        "producers", "orphaned", "transfer", "segment"})
    CHECK_MESSAGE(f.count(k) == 1, k);
  // Never a negative number anywhere.
  CHECK(line.find("=-1") == std::string::npos);
  for (std::size_t p = line.find("=-"); p != std::string::npos; p = line.find("=-", p + 1))
    CHECK_MESSAGE((p + 2 == line.size() || line[p + 2] == ' '), "only a bare '-' (no rate yet) may follow '='");
}

// The data lines (not the '#' header) of a plain run's output.
std::vector<std::string> data_lines(const std::string& out) {
  std::vector<std::string> v;
  std::istringstream in(out);
  std::string l;
  while (std::getline(in, l))
    if (!l.empty() && l[0] != '#') v.push_back(l);
  return v;
}

double number(const std::map<std::string, std::string>& f, const std::string& key) {
  REQUIRE_MESSAGE(f.count(key) == 1, key);
  const std::string& v = f.at(key);
  REQUIRE_MESSAGE(v != "-", key);
  char* end = nullptr;
  const double d = std::strtod(v.c_str(), &end);
  const std::string what = key + "=" + v;
  REQUIRE_MESSAGE(end != v.c_str(), what);
  return d;
}

// Reads lines of a plain watch until one satisfies `pred` (bounded).
template <class Pred>
std::optional<std::string> line_where(shmtest::child& c, Pred pred, std::chrono::milliseconds timeout = 20s) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < until) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
    auto l = c.read_line(left);
    if (!l) return std::nullopt;
    if (!l->empty() && (*l)[0] != '#' && pred(fields(*l))) return l;
  }
  return std::nullopt;
}

// Reads the child's output, whole lines, until it contains every one of `needles` (bounded); returns all read so far.
std::string read_until(shmtest::child& c, const std::vector<std::string>& needles, std::string& acc,
                       std::chrono::milliseconds timeout = 20s) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  auto all_there = [&] {
    for (const auto& n : needles)
      if (acc.find(n) == std::string::npos) return false;
    return true;
  };
  while (!all_there() && std::chrono::steady_clock::now() < until) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
    auto l = c.read_line(left);
    if (!l) break;
    acc += *l + "\n";
  }
  return acc;
}

const std::string kAltOn = "\x1b[?1049h", kAltOff = "\x1b[?1049l", kCursorOff = "\x1b[?25l", kCursorOn = "\x1b[?25h";

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char ch : s) q += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return q + "'";
}

// `shmbox watch ...` on a pseudo-terminal made by script(1), whose stdin is
// ours to write (keys go through the terminal: q, Ctrl-C as \x03).
std::vector<std::string> under_script(const std::string& watch_args, unsigned cols = 80, unsigned rows = 24) {
  const std::string cmd = cat("stty cols ", std::to_string(cols), " rows ", std::to_string(rows), " && exec ",
                              shell_quote(shmtest::cli_path()), " watch ", watch_args);
  return {"/usr/bin/script", "-qefc", cmd, "/dev/null"};
}

// The child of `parent` (script execs the watch in its child), found through /proc.
pid_t child_of(pid_t parent, std::chrono::milliseconds timeout = 10s) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  do {
    if (DIR* d = ::opendir("/proc")) {
      while (const dirent* e = ::readdir(d)) {
        const pid_t pid = static_cast<pid_t>(std::atoi(e->d_name));
        if (pid <= 0) continue;
        const std::string all = shmtest::read_text(cat("/proc/", std::string(e->d_name), "/stat"));
        const auto close = all.rfind(')');
        if (close == std::string::npos) continue;
        std::istringstream in(all.substr(close + 2));
        char state = 0;
        pid_t ppid = 0;
        in >> state >> ppid;
        if (ppid == parent) {
          ::closedir(d);
          return pid;
        }
      }
      ::closedir(d);
    }
    std::this_thread::sleep_for(5ms);
  } while (std::chrono::steady_clock::now() < until);
  return -1;
}

// Removes the escape sequences (CSI ... final byte) and carriage returns.
std::string strip_escapes(const std::string& s) {
  std::string out;
  for (std::size_t k = 0; k < s.size(); ++k) {
    if (s[k] == '\x1b' && k + 1 < s.size() && s[k + 1] == '[') {
      k += 2;
      while (k < s.size() && !(s[k] >= 0x40 && s[k] <= 0x7e)) ++k;
      continue;
    }
    if (s[k] == '\r') continue;
    out += s[k];
  }
  return out;
}

// The last frame in a full-screen output: what follows the last "home" (ESC [ H).
std::string last_frame(const std::string& out) {
  const auto p = out.rfind("\x1b[H");
  return p == std::string::npos ? out : out.substr(p);
}

std::size_t cells(const std::string& s) {  // UTF-8 code points
  std::size_t n = 0;
  for (const char ch : s) n += (static_cast<unsigned char>(ch) & 0xC0) != 0x80;
  return n;
}

// `shmbox watch` on a pseudo-terminal of our own (forkpty): we hold the
// master, so we can read the terminal's settings while it runs and after it
// is gone. The child is killed and reaped on destruction.
class pty_watch {
 public:
  pty_watch(const std::vector<std::string>& args, unsigned cols, unsigned rows, bool stdin_devnull = false) {
    winsize ws{};
    ws.ws_col = static_cast<unsigned short>(cols);
    ws.ws_row = static_cast<unsigned short>(rows);
    std::vector<std::string> argv{shmtest::cli_path(), "watch"};
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<char*> a;
    for (auto& s : argv) a.push_back(s.data());
    a.push_back(nullptr);
    // The child waits for a byte on `go` before it runs watch, so the
    // terminal's settings are read before watch can change them.
    int go[2];
    REQUIRE(::pipe2(go, O_CLOEXEC) == 0);
    pid_ = ::forkpty(&master_, nullptr, nullptr, &ws);
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      char c;
      if (::read(go[0], &c, 1) != 1) ::_exit(126);
      if (stdin_devnull) {
        const int fd = ::open("/dev/null", O_RDONLY);
        ::dup2(fd, 0);
      }
      ::execv(a[0], a.data());
      ::_exit(127);
    }
    ::close(go[0]);
    initial_ = settings();
    REQUIRE(::write(go[1], "g", 1) == 1);
    ::close(go[1]);
  }
  ~pty_watch() {
    if (!status_) {
      ::kill(pid_, SIGKILL);
      int st = 0;
      ::waitpid(pid_, &st, 0);
    }
    ::close(master_);
  }
  pty_watch(const pty_watch&) = delete;
  pty_watch& operator=(const pty_watch&) = delete;

  pid_t pid() const { return pid_; }

  // Reads until `needle` is in the output (bounded); true if it is.
  bool read_until(const std::string& needle, std::chrono::milliseconds timeout = 20s) {
    const auto until = std::chrono::steady_clock::now() + timeout;
    while (out_.find(needle) == std::string::npos) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
      if (left.count() <= 0 || !read_some(left)) break;
    }
    return out_.find(needle) != std::string::npos;
  }
  // Reads until the terminal closes (the child exited; EIO) or the timeout.
  void read_to_end(std::chrono::milliseconds timeout = 20s) {
    const auto until = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
      if (left.count() <= 0 || !read_some(left)) break;
    }
  }
  void type(const std::string& keys) { REQUIRE(::write(master_, keys.data(), keys.size()) == static_cast<ssize_t>(keys.size())); }
  // The terminal's settings before watch started.
  const termios& initial_settings() const { return initial_; }
  termios settings() const {
    termios t{};
    ::tcgetattr(master_, &t);
    return t;
  }
  // Waits (bounded) for the exit; the raw status, or nullopt on timeout.
  std::optional<int> wait(std::chrono::milliseconds timeout) {
    const auto until = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      int st = 0;
      if (::waitpid(pid_, &st, WNOHANG) == pid_) {
        status_ = st;
        return st;
      }
      if (std::chrono::steady_clock::now() > until) return std::nullopt;
      std::this_thread::sleep_for(2ms);
    }
  }
  const std::string& output() const { return out_; }

 private:
  bool read_some(std::chrono::milliseconds timeout) {
    pollfd p{master_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(timeout.count())) <= 0) return false;
    char buf[8192];
    const ssize_t n = ::read(master_, buf, sizeof buf);
    if (n <= 0) return false;  // EIO: the slave side is closed
    out_.append(buf, static_cast<std::size_t>(n));
    return true;
  }
  pid_t pid_ = -1;
  int master_ = -1;
  termios initial_{};
  std::string out_;
  std::optional<int> status_;
};

}  // namespace

// ---- the line-per-refresh form -------------------------------------------------

TEST_CASE("watch: not a terminal: a '#' header, then one key=value line per refresh; rates from the 2nd") {
  shmtest::segment_guard g(shmtest::unique_name("watch"));
  REQUIRE(cli({"create", g.name, "--capacity", "64", "--policy", "drop-oldest"}).code == 0);
  REQUIRE(cli({"post", g.name, "a", "b", "c", "d", "e"}).code == 0);

  const auto started = std::chrono::steady_clock::now();
  auto r = cli({"watch", g.name, "--interval", "100", "--count", "3"});
  const auto took = std::chrono::steady_clock::now() - started;
  CAPTURE(r.out);
  CAPTURE(r.err);
  REQUIRE(r.code == 0);
  CHECK(r.err.empty());
  CHECK(r.out.find("\x1b") == std::string::npos);  // no escapes on a pipe
  REQUIRE(r.out.rfind("# ", 0) == 0);
  CHECK(r.out.find(cat("box=", g.name, " policy=drop-oldest capacity=64 slot_size=256")) != std::string::npos);
  const auto lines = data_lines(r.out);
  REQUIRE(lines.size() == 3);
  CHECK(took >= 180ms);  // 3 refreshes, 100 ms apart (the last one ends it)
  for (std::size_t k = 0; k < lines.size(); ++k) {
    check_plain_line(lines[k]);
    const auto f = fields(lines[k]);
    CHECK(f.at("box") == g.name);
    CHECK(f.at("depth") == "5/64");
    CHECK(f.at("posted") == "5");
    CHECK(f.at("owner") == "0");
    CHECK(f.at("owner_status") == "none");
    CHECK(f.at("segment") == "present");
    for (const char* k2 : {"posted/s", "delivered/s", "dropped/s", "rejected/s"}) {
      if (k == 0) CHECK(f.at(k2) == "-");  // no rate on the first refresh
      else CHECK(number(f, k2) == 0);
    }
  }
}

TEST_CASE("watch: 4 producers posting at a steady pace: producers=4, posted/s > 0") {
  shmtest::segment_guard g(shmtest::unique_name("watchrate"));
  REQUIRE(cli({"create", g.name, "--capacity", "256", "--policy", "drop-oldest"}).code == 0);
  std::vector<std::unique_ptr<shmtest::child>> producers;
  for (int id = 1; id <= 4; ++id) {
    producers.push_back(std::make_unique<shmtest::child>(std::vector<std::string>{
        shmtest::helper_path(), "produce", g.name, std::to_string(id), "100000000", "--no-wait", "--pause-us", "1000"}));
    REQUIRE(producers.back()->read_line().value_or("").rfind("ready", 0) == 0);  // attached, posting
  }
  auto r = cli({"watch", g.name, "--interval", "100", "--count", "5"});
  CAPTURE(r.out);
  REQUIRE(r.code == 0);
  const auto lines = data_lines(r.out);
  REQUIRE(lines.size() == 5);
  double last_posted = -1;
  for (std::size_t k = 0; k < lines.size(); ++k) {
    check_plain_line(lines[k]);
    const auto f = fields(lines[k]);
    CHECK(f.at("producers") == "4");
    const double posted = number(f, "posted");
    CHECK(posted > last_posted);  // they keep posting
    last_posted = posted;
    if (k == 0) {
      CHECK(f.at("posted/s") == "-");
    } else {
      CHECK(number(f, "posted/s") > 0);
      CHECK(number(f, "delivered/s") == 0);  // nobody receives
      CHECK(number(f, "dropped/s") >= 0);
    }
  }
  // Once full (256 slots), drop-oldest evicts: dropped/s shows it.
  const auto f = fields(lines.back());
  if (number(f, "posted") > 300) CHECK(number(f, "dropped") > 0);
}

TEST_CASE("watch: SIGINT and SIGTERM end the line form with exit 0; so does a reader that goes away") {
  shmtest::segment_guard g(shmtest::unique_name("watchsig"));
  REQUIRE(cli({"create", g.name}).code == 0);
  for (const int sig : {SIGINT, SIGTERM}) {
    CAPTURE(sig);
    shmtest::child w({shmtest::cli_path(), "watch", g.name, "--interval", "60000"});
    REQUIRE(w.read_line().value_or("").rfind("# ", 0) == 0);
    const auto first = w.read_line();  // handshake: the first refresh is out; it sleeps a minute now
    REQUIRE(first.has_value());
    check_plain_line(*first);
    w.kill(sig);
    const int st = w.wait(10s);  // long before the next refresh
    CHECK_FALSE(w.timed_out());
    CHECK(shmtest::exited_with(st, 0));
    CHECK(w.read_all(5s).empty());  // nothing after the signal
  }
  // `watch | head -n 3`: EPIPE at the next line ends it quietly with 0.
  auto r = shmtest::run({"/bin/bash", "-c",
                         cat(shell_quote(shmtest::cli_path()), " watch ", g.name,
                             " --interval 50 | head -n 3 > /dev/null; echo \"${PIPESTATUS[0]}\"")},
                        {}, 30s);
  CHECK(r.out == "0\n");
  CHECK(r.err.empty());
}

TEST_CASE("watch: a box removed while watching: the last state stays, marked removed, then replaced") {
  shmtest::segment_guard g(shmtest::unique_name("watchrm"));
  REQUIRE(cli({"create", g.name, "--capacity", "16"}).code == 0);
  REQUIRE(cli({"post", g.name, "x", "y"}).code == 0);
  shmtest::child w({shmtest::cli_path(), "watch", g.name, "--interval", "50"});
  REQUIRE(line_where(w, [](const auto& f) { return f.at("segment") == "present"; }).has_value());
  REQUIRE(cli({"rm", g.name}).code == 0);
  const auto removed = line_where(w, [](const auto& f) { return f.at("segment") == "removed"; });
  REQUIRE(removed.has_value());
  check_plain_line(*removed);
  CHECK(fields(*removed).at("depth") == "2/16");  // the mapping stays valid: its last state
  REQUIRE(cli({"create", g.name, "--capacity", "8"}).code == 0);  // a new box by the same name
  const auto replaced = line_where(w, [](const auto& f) { return f.at("segment") == "replaced"; });
  REQUIRE(replaced.has_value());
  CHECK(fields(*replaced).at("depth") == "2/16");  // still the old one: said so
  w.kill(SIGTERM);
  CHECK(shmtest::exited_with(w.wait(10s), 0));
}

TEST_CASE("watch: counters that go backwards (a scribbled segment) never give a negative rate") {
  shmtest::segment_guard g(shmtest::unique_name("watchback"));
  REQUIRE(cli({"create", g.name, "--capacity", "1"}).code == 0);
  REQUIRE(cli({"post", g.name, "kept", "refused", "refused"}).code == 3);
  shmtest::child w({shmtest::cli_path(), "watch", g.name, "--interval", "50"});
  const auto before = line_where(w, [](const auto& f) { return f.at("rejected") == "2"; });
  REQUIRE(before.has_value());
  {
    // Scribble: every producer entry's lane-0 `rejected` counter back to 0.
    const int fd = ::shm_open(("/shmbox." + g.name).c_str(), O_RDWR, 0);
    REQUIRE(fd >= 0);
    struct stat st {};
    REQUIRE(::fstat(fd, &st) == 0);
    void* p = ::mmap(nullptr, static_cast<std::size_t>(st.st_size), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);
    REQUIRE(p != MAP_FAILED);
    auto* base = static_cast<unsigned char*>(p);
    const auto* h = reinterpret_cast<const shmbox::detail::segment_header*>(base);
    for (std::uint32_t e = 0; e < h->max_producers; ++e) {
      auto* pc = reinterpret_cast<shmbox::detail::producer_lane_counters*>(
          base + h->producers_offset + std::uint64_t{e} * h->producer_stride + sizeof(shmbox::detail::producer_entry));
      pc->rejected.store(0);
    }
    ::munmap(p, static_cast<std::size_t>(st.st_size));
  }
  const auto after = line_where(w, [](const auto& f) { return f.at("rejected") == "0"; });
  REQUIRE(after.has_value());
  check_plain_line(*after);
  const auto f = fields(*after);
  CHECK(f.at("posted") == "1");  // posted went backwards too (3 -> 1)
  CHECK(number(f, "rejected/s") == 0);
  CHECK(number(f, "posted/s") == 0);
  w.kill(SIGTERM);
  CHECK(shmtest::exited_with(w.wait(10s), 0));
}

// ---- states --------------------------------------------------------------------

TEST_CASE("watch: an orphaned box (owner killed, no heir) shows the owner dead and ORPHANED") {
  shmtest::segment_guard g(shmtest::unique_name("watchorphan"));
  REQUIRE(cli({"create", g.name}).code == 0);
  REQUIRE(cli({"post", g.name, "left", "behind"}).code == 0);
  pid_t owner_pid = 0;
  {
    shmtest::child owner({shmtest::helper_path(), "own", g.name}, {}, true);
    REQUIRE(owner.read_line().value_or("").rfind("owned", 0) == 0);
    owner_pid = owner.pid();
    owner.kill(SIGKILL);
    CHECK(shmtest::killed_by(owner.wait(10s), SIGKILL));  // reaped: its pid is gone
  }
  auto r = cli({"watch", g.name, "--count", "1", "--interval", "50"});
  CAPTURE(r.out);
  REQUIRE(r.code == 0);
  const auto lines = data_lines(r.out);
  REQUIRE(lines.size() == 1);
  check_plain_line(lines[0]);
  const auto f = fields(lines[0]);
  CHECK(f.at("owner") == std::to_string(owner_pid));
  CHECK(f.at("owner_status") == "dead");
  CHECK(f.at("orphaned") == "yes");
  CHECK(f.at("depth") == "2/1024");

  // The full-screen form says so too.
  pty_watch w({g.name, "--interval", "60000"}, 80, 24);
  REQUIRE(w.read_until("ORPHANED"));
  const std::string frame = strip_escapes(last_frame(w.output()));
  CHECK(frame.find(cat("pid ", std::to_string(owner_pid), "  DEAD")) != std::string::npos);
  w.type("q");
  const auto st = w.wait(10s);
  REQUIRE(st.has_value());
  CHECK(shmtest::exited_with(*st, 0));
}

TEST_CASE("watch: a box that does not exist, and segments that are not boxes: exit 1, one clear line") {
  shmtest::segment_guard missing(shmtest::unique_name("watchnone"));
  auto r = cli({"watch", missing.name, "--count", "1"});
  CHECK(r.code == 1);
  CHECK(r.out.empty());
  CHECK(r.err.rfind("shmbox: ", 0) == 0);
  CHECK(r.err.find('\n') == r.err.size() - 1);
  CHECK(r.err.find("does not exist") != std::string::npos);

  for (const std::size_t size : {std::size_t{4096}, std::size_t{0}, std::size_t{100}}) {
    CAPTURE(size);
    shmtest::segment_guard junk(shmtest::unique_name("watchjunk"));
    shmtest::write_raw_segment(junk.name, std::string(size, 'z'));
    r = cli({"watch", junk.name, "--count", "1"});
    CAPTURE(r.err);
    CHECK(WIFEXITED(r.status));  // no crash
    CHECK(r.code == 1);
    CHECK(r.out.empty());
    CHECK(r.err.rfind("shmbox: ", 0) == 0);
    CHECK(r.err.find('\n') == r.err.size() - 1);
    // The same on a terminal: the error comes before any screen change.
    pty_watch w({junk.name}, 80, 24);
    const auto st = w.wait(10s);
    REQUIRE(st.has_value());
    CHECK(shmtest::exited_with(*st, 1));
    w.read_to_end(2s);
    CHECK(w.output().find(kAltOn) == std::string::npos);
    CHECK(w.output().find("shmbox: ") != std::string::npos);
  }

  CHECK(cli({"watch", missing.name, "--interval", "10"}).code == 2);  // usage: below 50 ms
  CHECK(cli({"watch"}).code == 2);
}

TEST_CASE("watch: mid-failover: the owner is killed, its heir takes over; later lines show it, epoch higher") {
  shmtest::segment_guard g(shmtest::unique_name("watchfail"));
  REQUIRE(cli({"create", g.name}).code == 0);
  shmtest::child owner({shmtest::helper_path(), "serve", g.name, "--idle-ms", "60000"});
  const auto owned = owner.read_line();
  REQUIRE(owned.value_or("").rfind("owner epoch=", 0) == 0);
  const std::string epoch1 = owned->substr(12, owned->find(' ', 12) - 12);
  shmtest::child heir({shmtest::helper_path(), "serve", g.name, "--heir", "--idle-ms", "60000"});
  REQUIRE(heir.read_line().value_or("").rfind("enlisted", 0) == 0);

  shmtest::child w({shmtest::cli_path(), "watch", g.name, "--plain", "--interval", "50", "--count", "20"});
  const auto before = line_where(w, [](const auto&) { return true; });
  REQUIRE(before.has_value());
  check_plain_line(*before);
  auto f = fields(*before);
  CHECK(f.at("owner") == std::to_string(owner.pid()));
  CHECK(f.at("owner_status") == "alive");
  CHECK(f.at("epoch") == epoch1);
  CHECK(f.at("heirs") == "1");
  CHECK(f.at("heirs_alive") == "1");
  CHECK(f.at("orphaned") == "no");

  owner.kill(SIGKILL);
  const auto taken = heir.read_line();  // handshake: the heir owns the box now
  REQUIRE(taken.value_or("").rfind("owner epoch=", 0) == 0);
  CHECK(taken->find("reason=owner-died") != std::string::npos);

  const auto after = line_where(w, [&](const auto& l) { return l.at("owner") == std::to_string(heir.pid()); });
  REQUIRE_MESSAGE(after.has_value(), "no line showed the heir as owner within the 20 refreshes");
  check_plain_line(*after);
  f = fields(*after);
  CHECK(f.at("owner_status") == "alive");
  CHECK(std::stoull(f.at("epoch")) > std::stoull(epoch1));
  CHECK(f.at("transfer") == cat("owner-died:", std::to_string(owner.pid()), "->", std::to_string(heir.pid())));
  CHECK(f.at("orphaned") == "no");
  // The rest of the 20 lines come, and it ends by itself with 0.
  const std::string rest = w.read_all(20s);
  for (const auto& l : data_lines(rest)) check_plain_line(l);
  CHECK(shmtest::exited_with(w.wait(10s), 0));
}

// ---- the full-screen form on a pseudo-terminal -----------------------------------

TEST_CASE("watch: on a terminal (script): alternate screen, q quits at once, the screen is restored") {
  shmtest::segment_guard g(shmtest::unique_name("watchtty"));
  REQUIRE(cli({"create", g.name, "--capacity", "32"}).code == 0);
  REQUIRE(cli({"post", g.name, "one", "two", "three"}).code == 0);
  // A minute between refreshes: q must not wait for the next one.
  shmtest::child s(under_script(cat(g.name, " --interval 60000")), {}, true);
  std::string out;
  read_until(s, {kAltOn, g.name, "PRODUCERS"}, out);  // the frame's last line has no newline
  CAPTURE(out);
  REQUIRE(out.find(kAltOn) != std::string::npos);
  CHECK(out.find(kCursorOff) != std::string::npos);
  CHECK(out.find(g.name) != std::string::npos);
  CHECK(out.find("3/32") != std::string::npos);
  const auto typed = std::chrono::steady_clock::now();
  s.write_stdin("q");
  out += s.read_all(15s);
  const int st = s.wait(15s);
  CHECK(std::chrono::steady_clock::now() - typed < 10s);
  CHECK_FALSE(s.timed_out());
  CHECK(shmtest::exited_with(st, 0));
  // It ends by showing the cursor and leaving the alternate screen, and prints nothing after.
  const std::string tail = out.substr(out.rfind(kCursorOn) == std::string::npos ? 0 : out.rfind(kCursorOn));
  CHECK(tail == kCursorOn + kAltOff);
}

TEST_CASE("watch: on a terminal (script): Ctrl-C and SIGTERM quit with 0 and restore the screen") {
  shmtest::segment_guard g(shmtest::unique_name("watchttysig"));
  REQUIRE(cli({"create", g.name}).code == 0);
  for (const std::string how : {"ctrl-c", "sigterm", "sigint"}) {
    CAPTURE(how);
    shmtest::child s(under_script(cat(g.name, " --interval 60000")), {}, true);
    std::string out;
    read_until(s, {kAltOn, "PRODUCERS"}, out);
    REQUIRE(out.find(kAltOn) != std::string::npos);
    if (how == "ctrl-c") {
      s.write_stdin("\x03");  // through the terminal: SIGINT to its foreground group
    } else {
      const pid_t watch = child_of(s.pid());
      REQUIRE(watch > 0);
      ::kill(watch, how == "sigterm" ? SIGTERM : SIGINT);
    }
    out += s.read_all(15s);
    const int st = s.wait(15s);
    CHECK_FALSE(s.timed_out());
    CHECK(shmtest::exited_with(st, 0));
    const auto on = out.rfind(kCursorOn);
    REQUIRE(on != std::string::npos);
    CHECK(out.substr(on) == kCursorOn + kAltOff);
  }
}

TEST_CASE("watch: on a terminal (forkpty): no echo while it runs, the terminal settings restored after") {
  shmtest::segment_guard g(shmtest::unique_name("watchtio"));
  REQUIRE(cli({"create", g.name, "--lanes", "3", "--capacity", "16"}).code == 0);
  REQUIRE(cli({"post", g.name, "--lane", "2", "a", "b"}).code == 0);
  for (const std::string how : {"q", "Q", "sigterm", "sighup"}) {
    CAPTURE(how);
    pty_watch w({g.name, "--interval", "60000"}, 80, 24);
    const termios before = w.initial_settings();
    REQUIRE((before.c_lflag & ECHO) != 0);
    REQUIRE((before.c_lflag & ICANON) != 0);
    REQUIRE(w.read_until("TRANSFER"));  // the first frame is drawn
    const termios during = w.settings();
    CHECK((during.c_lflag & ECHO) == 0);
    CHECK((during.c_lflag & ICANON) == 0);
    CHECK((during.c_lflag & ISIG) != 0);  // Ctrl-C still signals
    if (how == "sigterm") ::kill(w.pid(), SIGTERM);
    else if (how == "sighup") ::kill(w.pid(), SIGHUP);
    else w.type(how);
    const auto st = w.wait(10s);
    REQUIRE(st.has_value());
    CHECK(shmtest::exited_with(*st, 0));
    w.read_to_end(2s);
    const termios after = w.settings();
    CHECK((after.c_lflag & ECHO) != 0);
    CHECK((after.c_lflag & ICANON) != 0);
    CHECK(after.c_cc[VMIN] == before.c_cc[VMIN]);
    const auto on = w.output().rfind(kCursorOn);
    REQUIRE(on != std::string::npos);
    CHECK(w.output().substr(on) == kCursorOn + kAltOff);
  }
}

TEST_CASE("watch: the frame fits the terminal: 80 columns; a narrow or short one is clipped, never wrapped") {
  shmtest::segment_guard g(shmtest::unique_name("watchfit"));
  REQUIRE(cli({"create", g.name, "--lanes", "8", "--lane-capacity", "3=100000", "--slot-size", "16"}).code == 0);
  shmtest::child owner({shmtest::helper_path(), "own", g.name}, {}, true);  // owns, never receives
  REQUIRE(owner.read_line().value_or("").rfind("owned", 0) == 0);
  REQUIRE(cli({"post", g.name, "--lane", "3", "x"}).code == 0);
  std::vector<std::unique_ptr<shmtest::child>> heirs;  // a long heir list: wrapped, then cut
  for (int k = 0; k < 12; ++k) {
    heirs.push_back(std::make_unique<shmtest::child>(
        std::vector<std::string>{shmtest::helper_path(), "serve", g.name, "--heir", "--idle-ms", "60000"}));
    REQUIRE(heirs.back()->read_line().value_or("").rfind("enlisted", 0) == 0);
  }
  struct size {
    unsigned cols, rows;
  };
  for (const size sz : {size{80, 40}, size{40, 10}, size{200, 60}}) {
    CAPTURE(sz.cols);
    pty_watch w({g.name, "--interval", "60000"}, sz.cols, sz.rows);
    REQUIRE(w.read_until(sz.rows >= 30 ? "TRANSFER" : g.name.substr(0, 20)));
    REQUIRE(w.read_until(std::string("\x1b[J")));  // the whole frame
    const std::string frame = strip_escapes(last_frame(w.output()));
    CAPTURE(frame);
    std::istringstream in(frame);
    std::string l;
    std::size_t rows = 0;
    while (std::getline(in, l)) {
      ++rows;
      CHECK(cells(l) < std::min(sz.cols, 80u));
    }
    CHECK(rows <= sz.rows);
    if (sz.rows >= 30) {
      CHECK(frame.find("1/100000") != std::string::npos);
      // 3 lines of heirs (how many fit depends on the pids' digits), then the count of the rest.
      std::size_t shown = 0;
      for (std::size_t p = frame.find(" pid ", frame.find("HEIRS")); p != std::string::npos && p < frame.find("PRODUCERS");
           p = frame.find(" pid ", p + 1))
        ++shown;
      const std::size_t more_at = frame.find("  +");
      REQUIRE(more_at != std::string::npos);
      const std::size_t more = std::stoul(frame.substr(more_at + 3));
      CHECK(frame.find(" more", more_at) != std::string::npos);
      CHECK(shown + more == 12);
      CHECK(shown >= 6);
      CHECK(frame.find("0 ctl") != std::string::npos);
    }
    w.type("q");
    const auto st = w.wait(10s);
    REQUIRE(st.has_value());
    CHECK(shmtest::exited_with(*st, 0));
  }
}

TEST_CASE("watch: on a terminal with stdin at end of file: it sleeps (no busy loop) and SIGTERM ends it") {
  shmtest::segment_guard g(shmtest::unique_name("watchidle"));
  REQUIRE(cli({"create", g.name}).code == 0);
  pty_watch w({g.name, "--interval", "60000"}, 80, 24, /*stdin_devnull=*/true);
  REQUIRE(w.read_until("TRANSFER"));
  REQUIRE(shmtest::wait_for_state(w.pid(), 'S', 10s));  // asleep in ppoll
  const long t0 = shmtest::cpu_ticks(w.pid());
  std::this_thread::sleep_for(500ms);  // a measurement window, not a synchronisation
  const long used = shmtest::cpu_ticks(w.pid()) - t0;
  CHECK(used <= 5);  // a busy loop would use ~50 ticks
  ::kill(w.pid(), SIGTERM);
  const auto st = w.wait(10s);
  REQUIRE(st.has_value());
  CHECK(shmtest::exited_with(*st, 0));
}

TEST_CASE("watch: --count on a terminal stops by itself after N refreshes") {
  shmtest::segment_guard g(shmtest::unique_name("watchcount"));
  REQUIRE(cli({"create", g.name}).code == 0);
  pty_watch w({g.name, "--interval", "50", "--count", "3"}, 80, 24);
  const auto st = w.wait(20s);
  REQUIRE(st.has_value());
  CHECK(shmtest::exited_with(*st, 0));
  w.read_to_end(2s);
  std::size_t frames = 0;
  for (std::size_t p = w.output().find("TRANSFER"); p != std::string::npos; p = w.output().find("TRANSFER", p + 1)) ++frames;
  CHECK(frames == 3);
  CHECK(w.output().find(kAltOn) != std::string::npos);
  const auto on = w.output().rfind(kCursorOn);
  REQUIRE(on != std::string::npos);
  CHECK(w.output().substr(on) == kCursorOn + kAltOff);
}

TEST_CASE("watch (full screen): the box truncated under it: a TRUNCATED banner, not a death by SIGBUS (issue 53, T5)") {
  shmtest::segment_guard g(shmtest::unique_name("watchtrunc"));
  REQUIRE(cli({"create", g.name, "--capacity", "64", "--slot-size", "1024"}).code == 0);
  REQUIRE(cli({"post", g.name, "a", "b", "c"}).code == 0);
  pty_watch w({g.name, "--interval", "100"}, 100, 30);
  REQUIRE(w.read_until("shmbox watch"));
  // What whoever may write a segment may do: shrink it (its header kept).
  REQUIRE(::truncate(("/dev/shm/shmbox." + g.name).c_str(), 4096) == 0);
  CHECK(w.read_until("TRUNCATED"));
  w.type("q");
  const auto st = w.wait(10s);
  REQUIRE(st.has_value());
  CHECK(shmtest::exited_with(*st, 0));
}
