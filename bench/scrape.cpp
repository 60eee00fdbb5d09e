// bench/scrape.cpp - shmbox-bench-scrape: what one Prometheus scrape of
// `shmbox metrics` costs on a host with many boxes.
//
// WHAT IT MEASURES (N boxes, --boxes N, default 10000; --quick: 500)
//   cli    `shmbox metrics` run as a child process (fork + exec, stdout read
//          through a pipe): wall time, the child's CPU time (user + system,
//          from wait4's rusage) and the bytes of the exposition. What a
//          textfile collector pays every time it runs it.
//   http   GET /metrics from `shmbox metrics --listen 127.0.0.1:0` (started
//          once): wall time of the request over a plain loopback socket, and
//          the listener's CPU time (utime + stime of /proc/<pid>/stat, over
//          all the requests, divided by their number: its clock ticks are
//          10 ms). What a Prometheus server scraping it pays.
//   startup `shmbox --version` the same way as cli: the part of cli that is
//          process start-up, not the exposition.
// Each figure: median (and min, max) of --reps scrapes (default 7; --quick 3),
// after one warm-up scrape. The ratio to 5 s says how much of a 5-second
// scrape interval one scrape takes (the target: well under 1; the table
// checks http wall <= 0.1 x 5 s).
//
// METHOD
// * The N boxes are created with the library (capacity 4, 64-byte slots, one
//   lane; the Box handles dropped at once), named shmbench-scr-<pid>-<i>, and
//   removed when the benchmark ends, fails or gets SIGINT/SIGTERM/SIGHUP/
//   SIGQUIT; a later run removes what a SIGKILLed one left (the pid is dead).
//   The listener dies with the benchmark (PR_SET_PDEATHSIG).
// * Before creating them it checks that /dev/shm has room for N segments
//   (the first box's allocated size x N, and 10% to spare); if not, it
//   measures the largest N that fits and says so (a skip row for N).
// * The exposition covers EVERY box on the machine, not only ours: the row's
//   note gives shmbox_metrics_exported_segments{kind="box"} of the text, the
//   number that was really scraped.
// WHAT WOULD MAKE THE NUMBERS WRONG
// * Other load on the machine (a CI run): wall times grow, CPU times much
//   less; the load average is printed.
// * The boxes are idle and empty: depth and counters are read the same way
//   whatever their values, so this is the cost of a busy host too, but a box
//   being resized or handed over meanwhile can make a read retry.
// * The request's Accept-Encoding is absent: a Prometheus server asks for gzip
//   and the listener then compresses, which costs more CPU and fewer bytes.
//
// Rows on stdout (rows.hpp): group "scrape", mechanism "cli N boxes",
// "http N boxes", "startup"; metrics wall (ms), cpu (ms), bytes (B),
// ratio-5s (x). A readable table on stderr.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <string>
#include <string_view>
#include <vector>

#include "harness.hpp"
#include "numbered_boxes.hpp"
#include "rows.hpp"
#include "shmbox/shmbox.hpp"

using namespace shmbench;

namespace {

constexpr std::string_view kProg = "shmbox-bench-scrape";
constexpr std::string_view kMarker = "shmbench-scr-";  // in every box name we create
constexpr double kIntervalMs = 5000;                   // the scrape interval the target is stated for

struct Args {
  int boxes = 10000;
  int reps = 7;
  bool quick = false;
  std::string cli;  // the shmbox CLI (default: ../tools/shmbox beside this program's directory)
};

// ---- the boxes, and their removal (also from the fatal-signal handler) ------

using namespace numbered_boxes;  // g_names, box_name, unlink_all_boxes, BoxesGuard (bench/numbered_boxes.hpp)

// ---- processes ---------------------------------------------------------------

double ms_of(const timeval& t) { return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_usec) / 1e3; }

// Starts argv with stdout on a pipe (returned in *out), stderr to /dev/null;
// the child dies with us.
pid_t spawn(const std::vector<std::string>& argv, int* out) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) throw bench_failure("pipe");
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) throw bench_failure("fork");
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    ::dup2(p[1], 1);
    const int null = ::open("/dev/null", O_WRONLY);
    if (null >= 0) ::dup2(null, 2);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  ::close(p[1]);
  *out = p[0];
  return pid;
}

struct run_cost {
  double wall_ms = 0, cpu_ms = 0;
  std::string out;
};

// Runs argv to its end: wall time, its CPU time (wait4), its stdout.
run_cost run_once(const std::vector<std::string>& argv) {
  run_cost c;
  const std::int64_t t0 = now_ns();
  int out = -1;
  const pid_t pid = spawn(argv, &out);
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(out, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    c.out.append(buf, static_cast<std::size_t>(n));
  }
  ::close(out);
  int st = 0;
  rusage ru{};
  if (::wait4(pid, &st, 0, &ru) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
    throw bench_failure(argv[0] + " " + argv[1] + " failed (status " + std::to_string(st) + ")");
  c.wall_ms = static_cast<double>(now_ns() - t0) / 1e6;
  c.cpu_ms = ms_of(ru.ru_utime) + ms_of(ru.ru_stime);
  return c;
}

// utime + stime of a process, in ms (clock ticks).
double process_cpu_ms(pid_t pid) {
  const std::string all = read_text("/proc/" + std::to_string(pid) + "/stat");
  const auto close = all.rfind(')');
  if (close == std::string::npos) return -1;
  std::vector<std::string> f;
  std::size_t p = close + 2;
  while (p < all.size() && f.size() < 15) {
    const auto e = all.find(' ', p);
    f.push_back(all.substr(p, e - p));
    if (e == std::string::npos) break;
    p = e + 1;
  }
  if (f.size() < 13) return -1;
  const double ticks = std::strtod(f[11].c_str(), nullptr) + std::strtod(f[12].c_str(), nullptr);  // fields 14, 15
  return ticks * 1000.0 / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

// GET /metrics on 127.0.0.1:port (HTTP/1.0, Connection: close): the body; throws on an error or after 60 s.
std::string http_get_metrics(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  Fd guard(fd);
  timeval tv{60, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) throw bench_failure("connect to the listener");
  const std::string req = "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
  if (::send(fd, req.data(), req.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(req.size())) throw bench_failure("send");
  std::string all;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw bench_failure("recv from the listener (timeout?)");
    if (n == 0) break;
    all.append(buf, static_cast<std::size_t>(n));
  }
  if (all.rfind("HTTP/1.1 200", 0) != 0) throw bench_failure("GET /metrics: " + all.substr(0, all.find('\r')));
  const auto body = all.find("\r\n\r\n");
  return body == std::string::npos ? std::string() : all.substr(body + 4);
}

// shmbox_metrics_exported_segments{kind="box"} of an exposition (-1: absent).
long exported_boxes(const std::string& text) {
  const std::string key = "shmbox_metrics_exported_segments{kind=\"box\"} ";
  const auto p = text.find(key);
  return p == std::string::npos ? -1 : std::strtol(text.c_str() + p + key.size(), nullptr, 10);
}

Args parse(int argc, char** argv) {
  Args a;
  bool boxes_given = false, reps_given = false;
  for (int i = 1; i < argc; ++i) {
    const std::string s = argv[i];
    const auto value = [&] {
      if (i + 1 >= argc) throw bench_failure(s + " needs a value");
      return std::string(argv[++i]);
    };
    if (s == "--quick") a.quick = true;
    else if (s == "--boxes") a.boxes = std::atoi(value().c_str()), boxes_given = true;
    else if (s == "--reps") a.reps = std::atoi(value().c_str()), reps_given = true;
    else if (s == "--cli") a.cli = value();
    else if (s == "-h" || s == "--help") {
      std::fprintf(stderr, "usage: %.*s [--boxes N (10000)] [--reps R (7)] [--quick (500 boxes, 3 reps)] [--cli PATH]\n",
                   int(kProg.size()), kProg.data());
      std::exit(0);
    } else {
      throw bench_failure("unknown argument '" + s + "' (see --help)");
    }
  }
  if (a.quick && !boxes_given) a.boxes = 500;
  if (a.quick && !reps_given) a.reps = 3;
  if (a.boxes < 1 || a.reps < 1) throw bench_failure("--boxes and --reps must be at least 1");
  if (a.cli.empty()) {
    if (const char* c = std::getenv("SHMBOX_CLI"); c != nullptr && *c != '\0') a.cli = c;
  }
  if (a.cli.empty()) {
    char self[4096];
    const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
    if (n > 0) {
      std::string s(self, static_cast<std::size_t>(n));
      s = s.substr(0, s.rfind('/'));  // .../bench
      a.cli = s.substr(0, s.rfind('/')) + "/tools/shmbox";
    }
  }
  return a;
}

void report(const std::string& mech, const char* metric, std::vector<double> v, const char* unit, const std::string& note) {
  const summary s = summarize(v);
  print_row("scrape", mech, metric, s.median, s.min, s.max, unit, note);
}

int run(const Args& args) {
  install_signal_handlers(unlink_all_boxes);
  remove_stale(kProg, "/dev/shm", kMarker);
  name_boxes(kMarker);
  BoxesGuard guard;

  shmbox::options o;
  o.capacity = 4;
  o.slot_size = 64;
  const auto create = [&](int i) {
    g_boxes = i + 1;  // before it exists: the handler removes it
    auto box = shmbox::Box::create(box_name(i), o);
    if (!box) throw bench_failure("Box::create of box " + std::to_string(i + 1) + ": " + shmbox::explain(box.error()));
  };
  const std::int64_t c0 = now_ns();
  create(0);
  // Room in /dev/shm for N of them (10% to spare)?
  struct stat sb {};
  struct statvfs vs {};
  if (::stat((std::string(g_prefix) + "0").c_str(), &sb) != 0 || ::statvfs("/dev/shm", &vs) != 0)
    throw bench_failure("stat of the first box or of /dev/shm");
  const double per_box = static_cast<double>(sb.st_blocks) * 512;
  const double room = static_cast<double>(vs.f_bavail) * static_cast<double>(vs.f_frsize);
  int n = args.boxes;
  if (per_box * n * 1.1 > room) {
    n = static_cast<int>(room / 1.1 / per_box);
    char why[256];
    std::snprintf(why, sizeof why, "/dev/shm has %.0f MiB free, %d boxes of %.0f KiB need %.0f MiB; measured %d boxes instead",
                  room / 1048576, args.boxes, per_box / 1024, per_box * args.boxes / 1048576, n);
    print_skip("scrape", "http " + std::to_string(args.boxes) + " boxes", why);
    std::fprintf(stderr, "%.*s: %s\n", int(kProg.size()), kProg.data(), why);
    if (n < 1) return 0;
  }
  for (int i = 1; i < n; ++i) create(i);
  const double create_ms = static_cast<double>(now_ns() - c0) / 1e6;
  double load = 0;
  ::getloadavg(&load, 1);

  const std::string suffix = " " + std::to_string(n) + " boxes";
  std::vector<double> wall, cpu, bytes;
  long scraped = -1;

  // 1. The CLI, a process per scrape.
  const std::vector<std::string> metrics_argv = {args.cli, "metrics"};
  (void)run_once(metrics_argv);  // warm-up
  for (int r = 0; r < args.reps; ++r) {
    const run_cost c = run_once(metrics_argv);
    wall.push_back(c.wall_ms);
    cpu.push_back(c.cpu_ms);
    bytes.push_back(static_cast<double>(c.out.size()));
    scraped = exported_boxes(c.out);
  }
  const std::string note = "boxes scraped " + std::to_string(scraped) + " (ours " + std::to_string(n) + ")";
  std::vector<double> ratio;
  for (double w : wall) ratio.push_back(w / kIntervalMs);
  const summary cli_wall = summarize(wall), cli_cpu = summarize(cpu), cli_bytes = summarize(bytes);
  report("cli" + suffix, "wall", wall, "ms", note);
  report("cli" + suffix, "cpu", cpu, "ms", note);
  report("cli" + suffix, "bytes", bytes, "B", note);
  report("cli" + suffix, "ratio-5s", ratio, "x", "wall / 5 s");

  // 2. Start-up alone.
  std::vector<double> sw, sc;
  for (int r = 0; r < args.reps; ++r) {
    const run_cost c = run_once({args.cli, "--version"});
    sw.push_back(c.wall_ms);
    sc.push_back(c.cpu_ms);
  }
  const summary start_wall = summarize(sw), start_cpu = summarize(sc);
  report("startup", "wall", sw, "ms", "shmbox --version");
  report("startup", "cpu", sc, "ms", "shmbox --version");

  // 3. HTTP: one listener, a GET per scrape.
  summary http_wall{}, http_bytes{};
  double http_cpu = -1;
  {
    int out = -1;
    const pid_t pid = spawn({args.cli, "metrics", "--listen", "127.0.0.1:0"}, &out);
    const auto stop = [&] {
      ::kill(pid, SIGTERM);
      int st = 0;
      ::waitpid(pid, &st, 0);
      ::close(out);
    };
    std::string line;
    pollfd p{out, POLLIN, 0};
    char c = 0;
    while (line.find('\n') == std::string::npos && ::poll(&p, 1, 20000) > 0 && ::read(out, &c, 1) == 1) line += c;
    const std::string prefix = "listening on http://127.0.0.1:";
    if (line.rfind(prefix, 0) != 0) {
      stop();
      print_skip("scrape", "http" + suffix, "shmbox metrics --listen did not start");
      std::fprintf(stderr, "%.*s: --listen did not start: skipped\n", int(kProg.size()), kProg.data());
    } else {
      const int port = std::atoi(line.c_str() + prefix.size());
      try {
        (void)http_get_metrics(port);  // warm-up
        std::vector<double> hw, hb, hr;
        const double cpu0 = process_cpu_ms(pid);
        for (int r = 0; r < args.reps; ++r) {
          const std::int64_t t0 = now_ns();
          const std::string body = http_get_metrics(port);
          hw.push_back(static_cast<double>(now_ns() - t0) / 1e6);
          hb.push_back(static_cast<double>(body.size()));
          hr.push_back(hw.back() / kIntervalMs);
        }
        http_cpu = (process_cpu_ms(pid) - cpu0) / args.reps;
        http_wall = summarize(hw);
        http_bytes = summarize(hb);
        report("http" + suffix, "wall", hw, "ms", note);
        print_row("scrape", "http" + suffix, "cpu", http_cpu, http_cpu, http_cpu, "ms",
                  "mean over the requests (clock ticks of 10 ms)");
        report("http" + suffix, "bytes", hb, "B", note);
        report("http" + suffix, "ratio-5s", hr, "x", "wall / 5 s");
      } catch (...) {
        stop();
        throw;
      }
      stop();
    }
  }

  std::fprintf(stderr,
               "%.*s: %d boxes of ours (capacity 4, 64 B slots, %.0f KiB of /dev/shm each), created in %.0f ms; "
               "%ld boxes scraped; load average %.2f; %d scrapes each, medians\n",
               int(kProg.size()), kProg.data(), n, per_box / 1024, create_ms, scraped, load, args.reps);
  std::fprintf(stderr, "  %-22s %10s %10s %12s %14s\n", "scrape", "wall ms", "cpu ms", "bytes", "wall / 5 s");
  std::fprintf(stderr, "  %-22s %10.1f %10.1f %12.0f %14.4f\n", "shmbox metrics (CLI)", cli_wall.median, cli_cpu.median,
               cli_bytes.median, cli_wall.median / kIntervalMs);
  std::fprintf(stderr, "  %-22s %10.1f %10.1f %12s %14s\n", "  of which start-up", start_wall.median, start_cpu.median, "-", "-");
  if (http_cpu >= 0)
    std::fprintf(stderr, "  %-22s %10.1f %10.1f %12.0f %14.4f\n", "GET /metrics (--listen)", http_wall.median, http_cpu,
                 http_bytes.median, http_wall.median / kIntervalMs);
  std::fprintf(stderr, "  (cpu of GET: the listener's, mean per request; per byte: %.1f ns/B over HTTP)\n",
               http_cpu >= 0 && http_bytes.median > 0 ? http_cpu * 1e6 / http_bytes.median : 0.0);
  const double worst = std::max(cli_wall.median, http_cpu >= 0 ? http_wall.median : 0.0);
  std::fprintf(stderr, "  every 5 s on %d boxes: a scrape takes %.1f%% of the interval (%s)\n", n, worst / kIntervalMs * 100,
               worst < kIntervalMs * 0.1 ? "cheap enough" : worst < kIntervalMs ? "fits, but not cheap" : "DOES NOT FIT");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse(argc, argv));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%.*s: %s\n", int(kProg.size()), kProg.data(), e.what());
    return 1;
  }
}
