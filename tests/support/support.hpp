// tests/support/support.hpp - what multi-process tests share: unique box names, a
// guard that unlinks a segment even when the test fails, and child processes
// (fork + exec of a helper program) with line handshakes and timeouts.
#pragma once

#include <doctest/doctest.h>
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace shmtest {

// The contents of `path`, or what could be read of it. Never throws: a /proc
// file of a process that exits while it is read fails with ESRCH, and
// std::ifstream turns a read error into an exception (basic_filebuf::underflow).
inline std::string read_text(const std::string& path) {
  std::string out;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return out;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return out;
}

// The state letter of /proc/<pid>/stat ('R', 'S', 'T' stopped, 'Z' ...), '?' if gone.
inline char process_state(pid_t pid) {
  const std::string all = read_text("/proc/" + std::to_string(pid) + "/stat");
  const auto close = all.rfind(')');
  return close == std::string::npos || close + 2 >= all.size() ? '?' : all[close + 2];
}

// Handshake with a process or thread (tid): waits, bounded, until its
// /proc state is `state` ('T' stopped, 'S' asleep in the kernel). Returns
// whether it got there.
inline bool wait_for_state(pid_t pid, char state, std::chrono::milliseconds timeout) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (process_state(pid) != state && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return process_state(pid) == state;
}


// Handshake before a fork() without exec in a process with threads (the
// library's notify hub is one): waits, bounded, until every other thread of
// this process is parked in epoll_wait, poll or read (/proc/self/task/T/syscall).
// A thread caught at fork() inside the allocator leaves its lock held in the
// child for ever; glibc's malloc takes its locks around fork(), the
// sanitizers' allocator in GCC 12 does not, and a child that calls exit()
// then hangs in LeakSanitizer's exit check. False if a thread did not park
// (or its syscall file cannot be read).
inline bool threads_parked(std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  const auto parked = [] {
    const std::string self = std::to_string(::syscall(SYS_gettid));
    DIR* d = ::opendir("/proc/self/task");
    if (d == nullptr) return false;
    bool all = true;
    while (const dirent* e = ::readdir(d)) {
      const std::string tid = e->d_name;
      if (tid == "." || tid == ".." || tid == self) continue;
      const std::string sys = read_text("/proc/self/task/" + tid + "/syscall");
      const long nr = sys.empty() || !std::isdigit(static_cast<unsigned char>(sys[0])) ? -1 : std::strtol(sys.c_str(), nullptr, 10);
      all &= nr == SYS_epoll_wait || nr == SYS_epoll_pwait || nr == SYS_poll || nr == SYS_ppoll || nr == SYS_read;
    }
    ::closedir(d);
    return all;
  };
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (!parked()) {
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}


// Bounded polling of a condition (a handshake on state another process
// changes, not a sleep): true as soon as it holds, false after `limit`.
template <class Pred>
bool eventually(Pred pred, std::chrono::milliseconds limit = std::chrono::seconds(30)) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < until) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return pred();
}

// Concatenates strings. (GCC 12 warns falsely, PR105329, on "literal" + std::string.)
template <class... Parts>
std::string cat(const Parts&... parts) {
  std::string s;
  ((s += parts), ...);
  return s;
}

// A segment /dev/shm/shmbox.<name> holding exactly `bytes` (garbage, a
// foreign file, an empty one): what a box name may point to when it is not
// a box. Throws when it cannot be written.
inline void write_raw_segment(const std::string& name, const std::string& bytes) {
  const int fd = ::shm_open(("/shmbox." + name).c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) throw std::runtime_error("shm_open " + name + ": " + std::strerror(errno));
  const bool ok = bytes.empty() || ::write(fd, bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size());
  ::close(fd);
  if (!ok) throw std::runtime_error("write " + name);
}

// The prefix of every box name the tests make: "t-", or "t-<run>-" when
// SHMBOX_TEST_RUN is set (scripts/test.sh and .ci/run set it), so that the
// check that a run left nothing in /dev/shm looks at this run's names only,
// not at boxes of other users or of other test runs going on meanwhile.
inline std::string test_prefix() {
  const char* run = std::getenv("SHMBOX_TEST_RUN");
  return run != nullptr && *run != '\0' ? "t-" + std::string(run) + "-" : "t-";
}

// A name no other test (or concurrent test run) uses; starts with test_prefix().
inline std::string unique_name(const std::string& what) {
  static std::atomic<int> counter{0};
  return test_prefix() + what + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter.fetch_add(1));
}

// Unlinks /dev/shm/shmbox.<name> when it goes out of scope.
struct segment_guard {
  std::string name;
  explicit segment_guard(std::string n) : name(std::move(n)) { ::shm_unlink(("/shmbox." + name).c_str()); }
  ~segment_guard() { ::shm_unlink(("/shmbox." + name).c_str()); }
  segment_guard(const segment_guard&) = delete;
  segment_guard& operator=(const segment_guard&) = delete;
};

inline std::string env_or(const char* var, const char* fallback) {
  const char* v = std::getenv(var);
  return v != nullptr && *v != '\0' ? v : fallback;
}
inline std::string helper_path() { return env_or("SHMBOX_HELPER", "./shmbox-test-helper"); }
inline std::string cli_path() { return env_or("SHMBOX_CLI", "./shmbox"); }

// A child process started with fork + exec; its stdout (and optionally stdin)
// are pipes. The destructor kills and reaps it, so a failing test leaves no
// process behind.
class child {
 public:
  child(const std::vector<std::string>& argv, const std::vector<std::string>& env = {}, bool with_stdin = false,
        bool capture_stderr = false) {
    int out[2], in[2] = {-1, -1}, err[2] = {-1, -1};
    if (::pipe2(out, O_CLOEXEC) != 0) throw std::runtime_error("pipe");
    if (with_stdin && ::pipe2(in, O_CLOEXEC) != 0) throw std::runtime_error("pipe");
    if (capture_stderr && ::pipe2(err, O_CLOEXEC) != 0) throw std::runtime_error("pipe");
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    pid_ = ::fork();
    if (pid_ < 0) throw std::runtime_error("fork");
    if (pid_ == 0) {
      ::dup2(out[1], 1);
      if (with_stdin) ::dup2(in[0], 0);
      if (capture_stderr) ::dup2(err[1], 2);
      for (const auto& e : env) ::putenv(const_cast<char*>(e.c_str()));
      ::execv(args[0], args.data());
      std::fprintf(stderr, "exec %s: %s\n", args[0], std::strerror(errno));
      ::_exit(127);
    }
    ::close(out[1]);
    out_ = out[0];
    if (with_stdin) {
      ::close(in[0]);
      in_ = in[1];
    }
    if (capture_stderr) {
      ::close(err[1]);
      err_ = err[0];
    }
  }
  child(const child&) = delete;
  child& operator=(const child&) = delete;
  ~child() {
    if (pid_ > 0 && !status_) {
      ::kill(pid_, SIGKILL);
      int st = 0;
      ::waitpid(pid_, &st, 0);
    }
    if (out_ >= 0) ::close(out_);
    if (in_ >= 0) ::close(in_);
    if (err_ >= 0) ::close(err_);
  }

  pid_t pid() const { return pid_; }

  // The next line of the child's stdout, or nullopt after `timeout` or EOF.
  std::optional<std::string> read_line(std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      if (const auto nl = buf_.find('\n'); nl != std::string::npos) {
        std::string line = buf_.substr(0, nl);
        buf_.erase(0, nl + 1);
        return line;
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return std::nullopt;
      pollfd p{out_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      char tmp[4096];
      const ssize_t n = ::read(out_, tmp, sizeof tmp);
      if (n <= 0) return std::nullopt;
      buf_.append(tmp, static_cast<std::size_t>(n));
    }
  }

  // Everything the child writes to stdout until it closes it (or timeout).
  std::string read_all(std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) break;
      pollfd p{out_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      char tmp[65536];
      const ssize_t n = ::read(out_, tmp, sizeof tmp);
      if (n <= 0) break;
      buf_.append(tmp, static_cast<std::size_t>(n));
    }
    std::string all;
    all.swap(buf_);
    return all;
  }

  std::string read_stderr() {
    std::string all;
    if (err_ < 0) return all;
    char tmp[4096];
    for (;;) {
      const ssize_t n = ::read(err_, tmp, sizeof tmp);
      if (n <= 0) break;
      all.append(tmp, static_cast<std::size_t>(n));
    }
    return all;
  }

  void write_stdin(const std::string& s) {
    std::size_t off = 0;
    while (off < s.size()) {
      const ssize_t n = ::write(in_, s.data() + off, s.size() - off);
      if (n <= 0) return;
      off += static_cast<std::size_t>(n);
    }
  }
  void close_stdin() {
    if (in_ >= 0) ::close(in_);
    in_ = -1;
  }

  // Waits for the child to exit; kills it after `timeout`. Returns the raw
  // wait status (use exited_with / killed_by).
  int wait(std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
    if (status_) return *status_;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    int st = 0;
    for (;;) {
      const pid_t r = ::waitpid(pid_, &st, WNOHANG);
      if (r == pid_) break;
      if (std::chrono::steady_clock::now() > deadline) {
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, &st, 0);
        timed_out_ = true;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    status_ = st;
    return st;
  }
  bool timed_out() const { return timed_out_; }
  void kill(int sig = SIGKILL) { ::kill(pid_, sig); }

 private:
  pid_t pid_ = -1;
  int out_ = -1, in_ = -1, err_ = -1;
  std::string buf_;
  std::optional<int> status_;
  bool timed_out_ = false;
};

// The value of " key=value" in a helper's line ("" if absent).
inline std::string line_field(const std::string& line, const std::string& key) {
  const std::string k = " " + key + "=";
  const auto at = line.find(k);
  if (at == std::string::npos) return {};
  const auto from = at + k.size();
  return line.substr(from, line.find(' ', from) - from);
}

// Reads lines of `c` until one starts with `prefix` (or the timeout); returns it ("" if none).
inline std::string line_starting(child& c, const std::string& prefix,
                                 std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < until) {
    auto l = c.read_line(std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now()));
    if (!l) break;
    if (l->rfind(prefix, 0) == 0) return *l;
  }
  return {};
}

// A helper's answer to one command line (the helper reads commands on stdin).
inline std::string ask(child& c, const std::string& cmd) {
  c.write_stdin(cmd + "\n");
  const auto l = c.read_line(std::chrono::seconds(20));
  return l ? *l : "(no answer to " + cmd + ")";
}

// "<c><i>", e.g. a producer's id or a message (built by appending: g++ 12
// warns, wrongly, on "literal" + std::string).
inline std::string tag(char c, int i) {
  std::string s(1, c);
  s += std::to_string(i);
  return s;
}

// The lines of `text` (without their '\n').
inline std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

// The blank-separated words of a line.
inline std::vector<std::string> fields(const std::string& l) {
  std::vector<std::string> f;
  std::istringstream in(l);
  for (std::string w; in >> w;) f.push_back(w);
  return f;
}

// The manual page (SHMBOX_MANPAGE, set by tests/meson.build) as text, roff's
// "\-" read as "-"; "" when it cannot be read.
inline std::string manual_text() {
  const char* path = std::getenv("SHMBOX_MANPAGE");
  if (path == nullptr) return {};
  std::ifstream f(path);
  const std::string roff((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::string man;
  for (std::size_t p = 0; p < roff.size(); ++p) {
    if (roff[p] == '\\' && p + 1 < roff.size() && roff[p + 1] == '-') ++p;
    man += roff[p];
  }
  return man;
}

// The long options (--name) a --help text shows, but --help.
inline std::vector<std::string> long_options(const std::string& help) {
  std::vector<std::string> opts;
  for (std::size_t p = help.find("--"); p != std::string::npos; p = help.find("--", p + 2)) {
    std::size_t e = p + 2;
    while (e < help.size() && (std::isalnum(static_cast<unsigned char>(help[e])) || help[e] == '-')) ++e;
    const std::string opt = help.substr(p, e - p);
    if (opt != "--help" && opt.size() > 2) opts.push_back(opt);
  }
  return opts;
}

inline bool exited_with(int status, int code) { return WIFEXITED(status) && WEXITSTATUS(status) == code; }
inline bool killed_by(int status, int sig) { return WIFSIGNALED(status) && WTERMSIG(status) == sig; }

// Runs a command to completion: exit status, stdout and stderr.
struct run_result {
  int status = -1;
  int code = -1;  // exit code, or -1 if killed
  std::string out, err;
};

inline run_result run(const std::vector<std::string>& argv, const std::string& stdin_data = {},
                      std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
  child c(argv, {}, true, true);
  c.write_stdin(stdin_data);
  c.close_stdin();
  run_result r;
  r.out = c.read_all(timeout);
  r.status = c.wait(timeout);
  r.err = c.read_stderr();
  r.code = WIFEXITED(r.status) ? WEXITSTATUS(r.status) : -1;
  return r;
}

// The CLI under test (SHMBOX_CLI) with `args`, its stdin `input`, killed
// after `timeout` (code -1 then).
inline run_result cli(std::vector<std::string> args, const std::string& input = {},
                      std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
  args.insert(args.begin(), cli_path());
  return run(args, input, timeout);
}
inline run_result cli(std::vector<std::string> args, std::chrono::milliseconds timeout) {
  return cli(std::move(args), {}, timeout);
}

// A second uid: the CLI under test run as user nobody (setpriv) with primary
// group `gid` and no other groups.
inline run_result as_nobody(unsigned gid, std::vector<std::string> args, std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
  const passwd* pw = ::getpwnam("nobody");
  std::vector<std::string> argv{"/usr/bin/setpriv", "--reuid=" + std::to_string(pw != nullptr ? pw->pw_uid : 65534),
                                "--regid=" + std::to_string(gid), "--clear-groups", "--", cli_path()};
  argv.insert(argv.end(), args.begin(), args.end());
  return run(argv, {}, timeout);
}

// Whether as_nobody can run here: root, setpriv, a 'nobody' user, and a
// build tree that user can read. Says why not (MESSAGE) when it cannot.
inline bool nobody_can_run_cli() {
  if (::geteuid() != 0 || ::access("/usr/bin/setpriv", X_OK) != 0 || ::getpwnam("nobody") == nullptr) {
    MESSAGE("skipped: needs root, setpriv and a 'nobody' user");
    return false;
  }
  const auto r = as_nobody(65534, {"--version"});
  if (r.code != 0) {
    MESSAGE("skipped: nobody cannot run " << cli_path() << ": " << r.err);
    return false;
  }
  return true;
}

}  // namespace shmtest
