// tools/live_view.cpp - the loop, the terminal and the signals of a live
// view (run_live_view in commands.hpp): `shmbox watch` (tools/watch.cpp) and
// `shmbox pool watch` (tools/pool_cmds.cpp) each bring their live_view, what
// it shows; this file runs it. Also the helpers the views share (bar, rates,
// the title line).
//
// * On a terminal (stdout a tty, no --plain): the alternate screen, redrawn
//   in place each refresh; stdin without echo and not line-buffered, so `q`
//   quits at once. Ctrl-C, SIGTERM, SIGHUP and SIGQUIT quit too; Ctrl-Z
//   suspends with the terminal restored. The terminal (termios, cursor, main
//   screen) is restored on every exit path, including errors and fatal signals.
// * Otherwise (or --plain): a `#` header line, then one line per refresh,
//   `<UTC time> key=value ...`, written with one write(2) each. SIGINT,
//   SIGTERM and SIGHUP end it with exit 0, as does a reader that goes away.
//
// Between refreshes the process sleeps in ppoll(2) on stdin (the key) with
// the interval as its timeout; the quit signals are blocked except inside
// that ppoll, so none is lost between a check and the sleep.
#include <langinfo.h>
#include <locale.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdarg>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <optional>
#include <string>
#include <vector>

#include "commands.hpp"

namespace shmbox_cli {

bool write_all(int fd, const char* p, std::size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += w;
    n -= static_cast<std::size_t>(w);
  }
  return true;
}
namespace {

using steady = std::chrono::steady_clock;
using wall = std::chrono::system_clock;

// ---- signals and the terminal ------------------------------------------------

volatile sig_atomic_t g_quit = 0;    // SIGINT, SIGTERM, SIGHUP, SIGQUIT
volatile sig_atomic_t g_redraw = 0;  // SIGWINCH, SIGCONT
volatile sig_atomic_t g_tstp = 0;    // SIGTSTP (Ctrl-Z)

void on_quit(int) { g_quit = 1; }
void on_redraw(int) { g_redraw = 1; }
void on_tstp(int) { g_tstp = 1; }

// What to undo on the terminal; also read by the fatal-signal handler, so
// only async-signal-safe calls touch it there.
termios g_saved_tio{};
volatile sig_atomic_t g_tio_changed = 0;  // stdin's termios differs from g_saved_tio
volatile sig_atomic_t g_screen_on = 0;    // alternate screen entered, cursor hidden

constexpr char kEnterScreen[] = "\x1b[?1049h\x1b[?25l\x1b[H\x1b[2J";  // alternate screen, hide cursor, clear
constexpr char kLeaveScreen[] = "\x1b[?25h\x1b[?1049l";              // show cursor, main screen

// Async-signal-safe.
void restore_terminal() {
  if (g_screen_on != 0) {
    g_screen_on = 0;
    const int saved = errno;
    (void)write_all(STDOUT_FILENO, kLeaveScreen, sizeof kLeaveScreen - 1);
    errno = saved;
  }
  if (g_tio_changed != 0) {
    g_tio_changed = 0;
    ::tcsetattr(STDIN_FILENO, TCSAFLUSH, &g_saved_tio);  // TCSAFLUSH: keys typed after q do not reach the shell
  }
}

// A crash (or a truncated segment: SIGBUS) must not leave the terminal
// without echo on the alternate screen: restore it, then die of the signal.
void on_fatal(int sig) {
  restore_terminal();
  ::signal(sig, SIG_DFL);
  ::raise(sig);  // blocked in this handler; delivered (default action) when it returns
}

// SIGBUS: the box's segment shrinking under the view is the SIGBUS guard's
// (the library's, installed when the box was mapped: docs/guarantees.md,
// Trust T5), which turns it into zeros and a TRUNCATED banner. So the
// handler installed before ours runs first: if it rescued the fault, the
// view goes on; if it gave up (it then put back the default action), the
// terminal is restored and the fault, happening again, kills as on_fatal.
struct sigaction g_bus_before {};
void on_bus(int sig, siginfo_t* info, void* context) {
  const struct sigaction before = g_bus_before;
  if ((before.sa_flags & SA_SIGINFO) != 0 && before.sa_sigaction != nullptr) {
    before.sa_sigaction(sig, info, context);
    struct sigaction now {};
    if (::sigaction(SIGBUS, nullptr, &now) == 0 && now.sa_handler != SIG_DFL) return;  // rescued
  }
  on_fatal(sig);
}

void set_handler(int sig, void (*fn)(int)) {
  struct sigaction sa {};
  sa.sa_handler = fn;
  sigemptyset(&sa.sa_mask);
  ::sigaction(sig, &sa, nullptr);
}

// Enters (and, destroyed, leaves) the full-screen mode.
class screen_session {
 public:
  screen_session() { enter(); }
  ~screen_session() { restore_terminal(); }
  screen_session(const screen_session&) = delete;
  screen_session& operator=(const screen_session&) = delete;

  // stdin without echo and not line-buffered (if it is a terminal), then the
  // alternate screen with the cursor hidden. False if stdout cannot be written.
  bool enter() {
    if (::isatty(STDIN_FILENO) == 1 && ::tcgetattr(STDIN_FILENO, &g_saved_tio) == 0) {
      termios raw = g_saved_tio;
      raw.c_lflag &= ~static_cast<tcflag_t>(ICANON | ECHO);  // ISIG stays: Ctrl-C and Ctrl-Z still signal
      raw.c_cc[VMIN] = 1;
      raw.c_cc[VTIME] = 0;
      g_tio_changed = 1;
      ::tcsetattr(STDIN_FILENO, TCSANOW, &raw);
    }
    g_screen_on = 1;
    return write_all(STDOUT_FILENO, kEnterScreen, sizeof kEnterScreen - 1);
  }
};

// ---- the terminal's size and character set ----------------------------------

struct term_size {
  unsigned rows = 24, cols = 80;
};

term_size terminal_size() {
  term_size t;
  winsize w{};
  if (::ioctl(STDOUT_FILENO, TIOCGWINSZ, &w) == 0) {
    if (w.ws_row > 0) t.rows = w.ws_row;
    if (w.ws_col > 0) t.cols = w.ws_col;
  }
  return t;
}

bool utf8_locale() {
  ::setlocale(LC_CTYPE, "");
  const char* cs = ::nl_langinfo(CODESET);
  return cs != nullptr && (std::strcmp(cs, "UTF-8") == 0 || std::strcmp(cs, "utf8") == 0);
}

// ---- the frame's bytes ---------------------------------------------------------

// At most `cols` cells of `s` (UTF-8: one cell per code point; our text has no wide characters).
std::string clip(const std::string& s, unsigned cols) {
  unsigned cells = 0;
  for (std::size_t k = 0; k < s.size(); ++k) {
    if ((static_cast<unsigned char>(s[k]) & 0xC0) == 0x80) continue;
    if (cells == cols) return s.substr(0, k);
    ++cells;
  }
  return s;
}

// The frame as bytes: home, each line cleared to its end, the rest cleared.
// Never writes the last column or past the last row (no scrolling).
std::string frame_bytes(const std::vector<view_line>& lines, term_size ts) {
  std::string b = "\x1b[H";
  const unsigned cols = ts.cols > 1 ? ts.cols - 1 : 1;
  const std::size_t n = std::min<std::size_t>(lines.size(), ts.rows);
  for (std::size_t k = 0; k < n; ++k) {
    const std::string text = clip(lines[k].text, cols);
    if (lines[k].attr != nullptr && !text.empty()) {
      b += lines[k].attr;
      b += text;
      b += "\x1b[0m";
    } else {
      b += text;
    }
    b += "\x1b[K";
    if (k + 1 < n) b += "\r\n";
  }
  b += "\x1b[J";
  return b;
}
// ---- the loop ----------------------------------------------------------------

class watcher {
 public:
  watcher(live_view& view, const watch_args& w, bool full_screen) : view_(view), w_(w), full_(full_screen) {}

  int run() {
    sigset_t block, old;
    sigemptyset(&block);
    for (int s : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) sigaddset(&block, s);
    if (full_) {
      sigaddset(&block, SIGWINCH);
      sigaddset(&block, SIGTSTP);
      sigaddset(&block, SIGCONT);
    }
    ::sigprocmask(SIG_BLOCK, &block, &old);
    wait_mask_ = old;
    for (int s : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGWINCH, SIGTSTP, SIGCONT}) sigdelset(&wait_mask_, s);
    for (int s : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) set_handler(s, on_quit);
    ::signal(SIGPIPE, SIG_IGN);  // a reader that goes away is EPIPE: the end, not a death
    if (full_) {
      set_handler(SIGWINCH, on_redraw);
      set_handler(SIGCONT, on_redraw);
      set_handler(SIGTSTP, on_tstp);
      for (int s : {SIGSEGV, SIGABRT, SIGFPE, SIGILL}) set_handler(s, on_fatal);
      struct sigaction bus {};
      bus.sa_sigaction = on_bus;
      bus.sa_flags = SA_SIGINFO;
      sigemptyset(&bus.sa_mask);
      ::sigaction(SIGBUS, &bus, &g_bus_before);
      return run_full_screen();
    }
    return run_plain();
  }

 private:
  enum class wake { time, quit, error };

  // A write to stdout failed: EPIPE (the reader left) ends quietly.
  int write_failed() {
    const int e = errno;
    restore_terminal();
    if (e == EPIPE) return kExitOk;
    say(std::string("watch: cannot write to stdout: ") + std::strerror(e));
    return kExitFail;
  }

  int run_plain() {
    const std::string header = view_.header(w_.interval_ms);
    if (!write_all(STDOUT_FILENO, header.data(), header.size())) return write_failed();
    auto next = steady::now();
    for (std::uint64_t n = 1;; ++n) {
      if (g_quit != 0) return kExitOk;
      view_.refresh();
      const std::string l = view_.line();
      if (!write_all(STDOUT_FILENO, l.data(), l.size())) return write_failed();
      if (w_.count != 0 && n >= w_.count) return kExitOk;
      next = next_refresh(next);
      const wake w = wait_until(next, nullptr);
      if (w == wake::quit) return kExitOk;
      if (w == wake::error) return poll_failed();
    }
  }

  int run_full_screen() {
    const bool utf8 = utf8_locale();
    screen_session screen;  // restores the terminal however this returns
    key_fd_ = STDIN_FILENO;
    auto draw = [&]() {
      const std::string b = frame_bytes(view_.frame(w_.interval_ms, utf8), terminal_size());
      return write_all(STDOUT_FILENO, b.data(), b.size());
    };
    auto next = steady::now();
    for (std::uint64_t n = 1;; ++n) {
      if (g_quit != 0) return kExitOk;
      view_.refresh();
      if (!draw()) return write_failed();
      // After the last of --count refreshes the frame stays up one interval
      // (leaving the alternate screen at once would show nothing).
      next = next_refresh(next);
      for (;;) {
        const wake w = wait_until(next, &screen);
        if (w == wake::quit) return kExitOk;
        if (w == wake::error) return poll_failed();
        if (g_redraw == 0) break;
        g_redraw = 0;  // resized or resumed: the same figures, drawn again
        if (!draw()) return write_failed();
      }
      if (w_.count != 0 && n >= w_.count) return kExitOk;
    }
  }

  int poll_failed() {
    const int e = errno;
    restore_terminal();
    say(std::string("watch: waiting for the next refresh failed: ") + std::strerror(e));
    return kExitFail;
  }

  // The next refresh time on the interval's grid; after a long stop (Ctrl-Z,
  // SIGSTOP) the grid starts again from now instead of catching up.
  steady::time_point next_refresh(steady::time_point last) const {
    const auto interval = std::chrono::milliseconds(w_.interval_ms);
    const auto now = steady::now();
    auto next = last + interval;
    if (next <= now) next = now + (now - next > interval ? interval : std::chrono::milliseconds(0));
    return next;
  }

  // Sleeps in ppoll until `until`, a quit (signal or q), or (full screen) a
  // redraw request. The quit signals are unblocked only inside ppoll.
  wake wait_until(steady::time_point until, screen_session* screen) {
    for (;;) {
      if (g_quit != 0) return wake::quit;
      if (g_tstp != 0 && screen != nullptr) {
        g_tstp = 0;
        suspend(*screen);
        g_redraw = 1;
      }
      if (g_redraw != 0 && screen != nullptr) return wake::time;
      const auto left = until - steady::now();
      if (left <= steady::duration::zero()) return wake::time;
      const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(left).count();
      timespec ts{static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
      pollfd p{key_fd_, POLLIN, 0};
      const int r = ::ppoll(key_fd_ >= 0 ? &p : nullptr, key_fd_ >= 0 ? 1 : 0, &ts, &wait_mask_);
      if (r < 0) {
        if (errno == EINTR) continue;
        return wake::error;
      }
      if (r > 0 && read_keys()) return wake::quit;
    }
  }

  // True on q or Q. Stops listening at end of file (or an error), so a
  // closed stdin never turns the wait into a busy loop.
  bool read_keys() {
    char buf[64];
    const ssize_t n = ::read(key_fd_, buf, sizeof buf);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) return false;
    if (n <= 0) {
      key_fd_ = -1;
      return false;
    }
    for (ssize_t k = 0; k < n; ++k)
      if (buf[k] == 'q' || buf[k] == 'Q') return true;
    return false;
  }

  // Ctrl-Z: the terminal as the shell expects it, stop, and on SIGCONT take it again.
  void suspend(screen_session& screen) {
    restore_terminal();
    sigset_t tstp;
    sigemptyset(&tstp);
    sigaddset(&tstp, SIGTSTP);
    ::signal(SIGTSTP, SIG_DFL);
    ::raise(SIGTSTP);                                // pending while blocked
    ::sigprocmask(SIG_UNBLOCK, &tstp, nullptr);      // delivered here: stopped until SIGCONT
    ::sigprocmask(SIG_BLOCK, &tstp, nullptr);
    set_handler(SIGTSTP, on_tstp);
    screen.enter();
  }

  live_view& view_;
  const watch_args& w_;
  bool full_;
  sigset_t wait_mask_{};
  int key_fd_ = -1;
};

}  // namespace

int run_live_view(live_view& view, const watch_args& w) {
  const bool full_screen = !w.plain && ::isatty(STDOUT_FILENO) == 1;
  try {
    watcher loop(view, w, full_screen);
    return loop.run();
  } catch (const std::exception& e) {
    restore_terminal();
    say(std::string("watch: ") + e.what());
    return kExitFail;
  }
}

// ---- the helpers of the views (commands.hpp) ---------------------------------

// A counter that went backwards (a scribbled segment) is a rate of 0, never negative.
double per_second(std::uint64_t now, std::uint64_t before, double seconds) {
  if (now <= before || seconds <= 0) return 0;
  return static_cast<double>(now - before) / seconds;
}

std::string rate_string(double v) {
  char buf[32];
  if (v >= 100 || v == std::floor(v)) std::snprintf(buf, sizeof buf, "%.0f", v);
  else std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}
std::string utc_stamp(wall::time_point t) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
  const time_t secs = static_cast<time_t>(ms / 1000);
  tm g{};
  ::gmtime_r(&secs, &g);
  char buf[48];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", g.tm_year + 1900, g.tm_mon + 1, g.tm_mday,
                g.tm_hour, g.tm_min, g.tm_sec, static_cast<int>(ms % 1000));
  return buf;
}

namespace {

std::string local_clock(wall::time_point t) {
  const time_t secs = wall::to_time_t(t);
  tm l{};
  ::localtime_r(&secs, &l);
  char buf[16];
  std::snprintf(buf, sizeof buf, "%02d:%02d:%02d", l.tm_hour, l.tm_min, l.tm_sec);
  return buf;
}

std::string interval_text(std::uint32_t ms) {
  char buf[32];
  if (ms < 1000) std::snprintf(buf, sizeof buf, "%u ms", ms);
  else std::snprintf(buf, sizeof buf, "%.1f s", ms / 1000.0);
  return buf;
}

}  // namespace

std::string title_line(const std::string& title, wall::time_point when, std::uint32_t interval_ms) {
  std::string t = title;
  const std::string right = local_clock(when) + "  every " + interval_text(interval_ms);
  // A long name is cut so that the line keeps to 79 columns.
  if (t.size() + 1 + right.size() > 79) t = t.substr(0, 79 - 1 - right.size());
  t.append(79 - t.size() - right.size(), ' ');
  return t + right;
}
std::string format(const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return buf;
}

// [#####.....]: depth/capacity in `width` cells (eighths of a cell in UTF-8).
std::string bar(std::uint64_t depth, std::uint32_t capacity, unsigned width, bool utf8) {
  const double f = capacity == 0 ? 0 : std::min(1.0, static_cast<double>(depth) / capacity);
  std::string b = "[";
  if (utf8) {
    static const char* const part[] = {"", "▏", "▎", "▍", "▌", "▋", "▊", "▉"};
    unsigned eighths = static_cast<unsigned>(std::lround(f * width * 8));
    if (eighths == 0 && depth > 0) eighths = 1;
    unsigned cells = 0;
    for (; eighths >= 8 && cells < width; eighths -= 8, ++cells) b += "█";
    if (cells < width && eighths > 0) {
      b += part[eighths];
      ++cells;
    }
    for (; cells < width; ++cells) b += "·";
  } else {
    unsigned full = static_cast<unsigned>(std::lround(f * width));
    if (full == 0 && depth > 0) full = 1;
    b.append(full, '#');
    b.append(width - full, '.');
  }
  return b + "]";
}

// Text read from the segment, safe to put on a terminal: printable ASCII
// only (a scribbled segment must not be able to send escape sequences).
std::string printable(const std::string& s) {
  std::string out;
  for (const char ch : s) out += (ch >= 0x20 && ch < 0x7f) ? ch : '?';
  return out;
}
std::size_t terminal_columns(std::size_t fallback) {
  winsize w{};
  return ::ioctl(STDOUT_FILENO, TIOCGWINSZ, &w) == 0 && w.ws_col > 0 ? w.ws_col : fallback;
}

}  // namespace shmbox_cli
