// tests/adversary/common.cpp - adversary.hpp: processes, the second user, the
// canary, the counted box, the sweep of /dev/shm.
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <sstream>

#include "adversary.hpp"

extern char** environ;

namespace adv {

run_params& params() {
  static run_params p;
  return p;
}

ms attack_time() { return ms(static_cast<long>(params().seconds * 1000)); }

std::uint64_t surface_seed(std::string_view surface) {
  std::uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a
  for (const char c : surface) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ULL;
  return params().seed ^ h;
}

bool second_user() {
  static const bool ok = [] {
    if (::geteuid() != 0 || ::access("/usr/bin/setpriv", X_OK) != 0) return false;
    const auto r = shmtest::run(as_second_user({params().self, "attack", "--probe"}), {}, 20s);
    return r.code == 0 && r.out.find("uid " + std::to_string(kSecondUid)) != std::string::npos;
  }();
  return ok;
}

void say_skipped(const char* surface) {
  if (!second_user())
    MESSAGE(std::string(surface) << ": no second user (needs root, setpriv, and uid " << kSecondUid << " able to run " << params().self
                    << "): the attacker runs as this uid; skipped: hostile configs naming the canary, links to it, "
                       "the hard link, and the checks that another user's files are refused (planted boxes, member "
                       "boxes, bridge statuses: this uid's own are trusted)");
}

std::vector<std::string> as_second_user(std::vector<std::string> argv) {
  if (::geteuid() != 0 || ::access("/usr/bin/setpriv", X_OK) != 0) return argv;
  std::vector<std::string> out{"/usr/bin/setpriv", "--reuid=" + std::to_string(kSecondUid),
                               "--regid=" + std::to_string(kSecondUid), "--clear-groups", "--"};
  out.insert(out.end(), argv.begin(), argv.end());
  return out;
}

std::map<std::string, std::uint64_t> tallies(const std::string& line) {
  std::map<std::string, std::uint64_t> t;
  std::istringstream in(line);
  for (std::string w; in >> w;) {
    const auto eq = w.find('=');
    if (eq == std::string::npos || eq + 1 >= w.size()) continue;
    const std::string v = w.substr(eq + 1);
    if (v.find_first_not_of("0123456789") != std::string::npos) continue;
    t[w.substr(0, eq)] = std::strtoull(v.c_str(), nullptr, 10);
  }
  return t;
}

std::uint64_t tally(const std::map<std::string, std::uint64_t>& t, const std::string& key) {
  const auto it = t.find(key);
  return it == t.end() ? 0 : it->second;
}

std::string octal(unsigned mode) {
  char b[8];
  std::snprintf(b, sizeof b, "%04o", mode & 07777);
  return b;
}

// ---------------------------------------------------------------------------
// proc

proc::proc(std::string label, const std::vector<std::string>& argv, const std::vector<std::string>& env)
    : label_(std::move(label)) {
  int out[2], in[2];
  if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(in, O_CLOEXEC) != 0) throw std::runtime_error("pipe");
  char err_template[] = "/tmp/shmbox-adversary-err-XXXXXX";
  const int err = ::mkostemp(err_template, O_CLOEXEC);
  if (err < 0) throw std::runtime_error("mkostemp");
  err_path_ = err_template;
  // Everything the child needs is made before fork(): this process has
  // threads (the readers of other processes), so the child calls only
  // async-signal-safe functions before exec.
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string kv = *e;
    bool replaced = false;
    for (const auto& mine : env)
      if (kv.substr(0, kv.find('=') + 1) == mine.substr(0, mine.find('=') + 1)) replaced = true;
    if (!replaced) env_strings.push_back(kv);
  }
  env_strings.insert(env_strings.end(), env.begin(), env.end());
  std::vector<char*> envp;
  for (auto& kv : env_strings) envp.push_back(kv.data());
  envp.push_back(nullptr);
  pid_ = ::fork();
  if (pid_ < 0) throw std::runtime_error("fork");
  if (pid_ == 0) {
    ::dup2(in[0], 0);
    ::dup2(out[1], 1);
    ::dup2(err, 2);
    ::execve(args[0], args.data(), envp.data());
    static const char msg[] = "exec failed\n";
    [[maybe_unused]] const ssize_t n = ::write(2, msg, sizeof msg - 1);
    ::_exit(127);
  }
  ::close(out[1]);
  ::close(in[0]);
  ::close(err);
  out_ = out[0];
  in_ = in[1];
  thread_ = std::thread([this] { reader(); });
}

proc::~proc() {
  if (!status_) {
    ::kill(pid_, SIGKILL);
    int st = 0;
    ::waitpid(pid_, &st, 0);
  }
  close_stdin();
  // The pipe may never end: a child of the process (a pool's worker) keeps
  // its write end. The reader looks at stop_ between its polls.
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  if (out_ >= 0) ::close(out_);
  ::unlink(err_path_.c_str());
}

void proc::reader() {
  char buf[8192];
  std::string partial;
  for (;;) {
    pollfd pf{out_, POLLIN, 0};
    const int ready = ::poll(&pf, 1, 100);
    if (ready == 0 || (ready < 0 && errno == EINTR)) {
      if (!stop_) continue;
      std::lock_guard<std::mutex> lock(mu_);
      eof_ = true;
      cv_.notify_all();
      return;
    }
    const ssize_t n = ::read(out_, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    std::lock_guard<std::mutex> lock(mu_);
    if (n <= 0) {
      if (!partial.empty()) lines_.push_back(partial);
      eof_ = true;
      cv_.notify_all();
      return;
    }
    all_.append(buf, static_cast<std::size_t>(n));
    if (all_.size() > (1u << 20)) all_.erase(0, all_.size() - (1u << 19));
    partial.append(buf, static_cast<std::size_t>(n));
    for (std::size_t nl; (nl = partial.find('\n')) != std::string::npos;) {
      lines_.push_back(partial.substr(0, nl));
      partial.erase(0, nl + 1);
    }
    while (lines_.size() > 100'000) lines_.pop_front();  // a chatty process nobody reads (a supervisor's log): the newest
    cv_.notify_all();
  }
}

std::optional<std::string> proc::line(ms timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, timeout, [this] { return !lines_.empty() || eof_; });
  if (lines_.empty()) return std::nullopt;
  std::string l = std::move(lines_.front());
  lines_.pop_front();
  return l;
}

std::string proc::expect(const std::string& prefix, ms timeout) {
  const auto until = steady::now() + timeout;
  while (steady::now() < until) {
    const auto l = line(std::chrono::duration_cast<ms>(until - steady::now()));
    if (!l) break;
    if (l->rfind(prefix, 0) == 0) return *l;
  }
  return {};
}

void proc::say(const std::string& line) {
  const std::string l = line + "\n";
  if (in_ >= 0) [[maybe_unused]] const ssize_t n = ::write(in_, l.data(), l.size());
}

void proc::close_stdin() {
  if (in_ >= 0) ::close(in_);
  in_ = -1;
}

void proc::signal(int sig) const {
  if (!status_) ::kill(pid_, sig);
}

int proc::wait(ms timeout) {
  if (status_) return *status_;
  const auto until = steady::now() + timeout;
  int st = 0;
  for (;;) {
    const pid_t r = ::waitpid(pid_, &st, WNOHANG);
    if (r == pid_) break;
    if (steady::now() > until) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &st, 0);
      hung_ = true;
      break;
    }
    std::this_thread::sleep_for(2ms);
  }
  status_ = st;
  return st;
}

std::string proc::err_text() const {
  std::string t = shmtest::read_text(err_path_);
  if (t.size() > 4096) t = "..." + t.substr(t.size() - 4096);
  return t;
}

std::string proc::all_lines() const {
  std::lock_guard<std::mutex> lock(mu_);
  return all_.size() > 4096 ? "..." + all_.substr(all_.size() - 4096) : all_;
}

proc::ending proc::finish(ms limit, const std::string& last) {
  ending e;
  const auto until = steady::now() + limit;
  close_stdin();
  e.done = expect(last, limit);
  e.status = wait(std::max(ms(1000), std::chrono::duration_cast<ms>(until - steady::now())));
  e.hung = hung_;
  e.t = tallies(e.done);
  e.took = std::chrono::duration_cast<ms>(steady::now() - (until - limit));
  INFO(label_ << " (pid " << pid_ << ") said: " << all_lines() << "\nstderr: " << err_text());
  CHECK_MESSAGE(!e.done.empty(), label_ << ": no '" << last << "' line within " << limit.count() << " ms");
  CHECK_MESSAGE(!e.hung, label_ << ": still running " << limit.count() << " ms after it was told to stop (killed)");
  CHECK_MESSAGE(!WIFSIGNALED(e.status), label_ << ": killed by signal " << (WIFSIGNALED(e.status) ? WTERMSIG(e.status) : 0));
  CHECK_MESSAGE(shmtest::exited_with(e.status, 0), label_ << ": exit status " << e.status);
  return e;
}

std::unique_ptr<proc> start_role(const std::string& label, std::vector<std::string> args,
                                 const std::vector<std::string>& env) {
  args.insert(args.begin(), {params().self, "role"});
  auto p = std::make_unique<proc>(label, args, env);
  const std::string ready = p->expect("ready", 30s);
  INFO(label << " said: " << p->all_lines() << "\nstderr: " << p->err_text());
  REQUIRE_MESSAGE(!ready.empty(), label << ": no 'ready' within 30 s");
  return p;
}

std::unique_ptr<proc> start_attacker(const std::string& surface, std::vector<std::string> targets, ms seconds) {
  std::vector<std::string> argv{params().self, "attack", "--seed", std::to_string(surface_seed(surface)), "--ms",
                                std::to_string(seconds.count())};
  argv.insert(argv.end(), targets.begin(), targets.end());
  auto p = std::make_unique<proc>("attacker of " + surface, as_second_user(argv));
  const std::string ready = p->expect("ready", 30s);
  INFO("attacker said: " << p->all_lines() << "\nstderr: " << p->err_text());
  REQUIRE_MESSAGE(!ready.empty(), "the attacker of " << surface << " did not start");
  MESSAGE(surface << ": attacker " << ready << " (seed " << surface_seed(surface) << " from the run's --seed "
                  << params().seed << ")");
  return p;
}

std::map<std::string, std::uint64_t> finish_attacker(proc& a, const std::string& surface) {
  // It stops by itself after its time; closing its stdin tells it nothing more.
  const auto e = a.finish(attack_time() + 60s);
  MESSAGE(surface << ": attacker (seed " << surface_seed(surface) << ") " << e.done);
  return e.t;
}

void report(const std::string& surface, const std::map<std::string, proc::ending>& ends) {
  std::string all;
  for (const auto& [who, e] : ends) all += "\n  " + who + " (ended " + std::to_string(e.took.count()) + " ms after told): " + e.done;
  MESSAGE(surface << ": root's processes:" << all);
}

std::map<std::string, proc::ending> finish_all(std::vector<std::unique_ptr<proc>>& roles, ms limit) {
  std::map<std::string, proc::ending> ends;
  for (auto& r : roles) ends[r->label()] = r->finish(limit);
  return ends;
}

void check_none_late(const std::map<std::string, proc::ending>& ends) {
  for (const auto& [who, e] : ends) {
    INFO(who << ": " << e.done);
    CHECK(tally(e.t, "late") == 0);
  }
}

// ---------------------------------------------------------------------------
// /dev/shm

std::vector<std::string> shm_entries(const std::string& prefix) {
  std::vector<std::string> out;
  if (DIR* d = ::opendir("/dev/shm")) {
    while (const dirent* e = ::readdir(d)) {
      const std::string n = e->d_name;
      if (n.size() >= prefix.size() && n.compare(0, prefix.size(), prefix) == 0) out.push_back(n);
    }
    ::closedir(d);
  }
  return out;
}

namespace {
void remove_entry(const std::string& entry) {
  const std::string path = "/dev/shm/" + entry;
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return;
  if (S_ISDIR(st.st_mode)) {
    if (DIR* d = ::opendir(path.c_str())) {  // the attacker makes empty ones; anything inside goes too
      while (const dirent* e = ::readdir(d)) {
        const std::string n = e->d_name;
        if (n != "." && n != "..") ::unlink((path + "/" + n).c_str());
      }
      ::closedir(d);
    }
    ::rmdir(path.c_str());
  } else {
    ::unlink(path.c_str());
  }
}
}  // namespace

void shm_sweeper::sweep() const {
  for (const auto& p : prefixes)
    for (const auto& e : shm_entries(p)) remove_entry(e);
  for (const auto& e : entries) remove_entry(e);
}

// ---------------------------------------------------------------------------
// the canary and the counted box

namespace {
std::string segment_bytes(const std::string& name) {
  return shmtest::read_text("/dev/shm/shmbox." + name);
}
}  // namespace

canary::canary(std::string n) : name(std::move(n)) {
  auto box = shmbox::Box::create(name, {.capacity = 16, .slot_size = 128, .overflow = shmbox::policy::drop_oldest});
  REQUIRE(box);
  {
    auto p = shmbox::Producer::attach(*box);  // its entry goes with it: the segment is then left alone
    REQUIRE(p);
    for (int i = 0; i < 8; ++i)
      REQUIRE(p->post("canary message " + std::to_string(i) + " of root's, mode 0600") == shmbox::post_status::stored);
  }
  const shmbox::box_info i = shmbox::info(*box);
  count = i.count;
  depth = i.depth;
  for (const auto& m : shmbox::peek(*box, 64)) messages.push_back(m.data);
  bytes = segment_bytes(name);
  REQUIRE(bytes.size() > 4096);
}

void canary::check() const {
  const std::string now = segment_bytes(name);
  std::size_t first_diff = 0;
  while (first_diff < std::min(now.size(), bytes.size()) && now[first_diff] == bytes[first_diff]) ++first_diff;
  INFO("canary '" << name << "': " << now.size() << " bytes now, " << bytes.size() << " before; first difference at byte " << first_diff);
  CHECK_MESSAGE(now == bytes, "a byte of root's 0600 canary box changed");
  auto box = shmbox::Box::inspect(name);
  REQUIRE(box);
  const shmbox::box_info i = shmbox::info(*box);
  CHECK(i.count.posted == count.posted);
  CHECK(i.count.stored == count.stored);
  CHECK(i.count.dead_lettered == count.dead_lettered);
  CHECK(i.depth == depth);
  std::vector<std::string> seen;
  for (const auto& m : shmbox::peek(*box, 64)) seen.push_back(m.data);
  CHECK(seen == messages);
}

std::string identity_problem(const shmbox::counters& c, std::uint64_t depth) {
  const std::uint64_t right = c.delivered + c.rejected + c.too_large + c.timeouts + c.dropped_newest + c.dropped_oldest +
                              c.filtered + c.abandoned + c.aborted + depth;
  if (c.posted == right) return {};
  std::ostringstream o;
  o << "posted " << c.posted << " != delivered " << c.delivered << " + rejected " << c.rejected << " + too_large "
    << c.too_large << " + timeouts " << c.timeouts << " + dropped_newest " << c.dropped_newest << " + dropped_oldest "
    << c.dropped_oldest << " + filtered " << c.filtered << " + abandoned " << c.abandoned << " + aborted " << c.aborted
    << " + depth " << depth << " (= " << right << ")";
  return o.str();
}

counted_box::counted_box(std::string n, const shmbox::options& o, std::vector<std::string> producer_flags) : name(std::move(n)) {
  REQUIRE(shmbox::Box::create(name, o));
  owner = start_role("root owner of " + name, {"own", name});
  std::vector<std::string> args{"produce", name};
  args.insert(args.end(), producer_flags.begin(), producer_flags.end());
  producer = start_role("root producer of " + name, args);
}

void counted_box::stop_and_check() {
  const auto p = producer->finish(30s);
  const auto o = owner->finish(30s);
  auto box = shmbox::Box::inspect(name);
  REQUIRE(box);
  const shmbox::box_info i = shmbox::info(*box);
  INFO("counted box '" << name << "': producer " << p.done << "; owner " << o.done);
  CHECK(identity_problem(i.count, i.depth) == "");
  CHECK(tally(p.t, "posted") == i.count.posted);
  CHECK(tally(p.t, "stored") + tally(p.t, "evicted") == i.count.stored);
  CHECK(tally(o.t, "received") == i.count.delivered);
  CHECK(i.depth == 0);
  CHECK(tally(p.t, "late") == 0);
  CHECK(tally(o.t, "late") == 0);
  CHECK(tally(p.t, "error") == 0);
  CHECK(tally(o.t, "errors") == 0);
  CHECK(i.count.posted > 0);
  MESSAGE("counted box " << name << " (0600, root's): posted " << i.count.posted << " = delivered " << i.count.delivered
                         << " + the rest " << (i.count.posted - i.count.delivered) << ", exactly");
}

cli_call run_cli(const std::vector<std::string>& args, ms limit) {
  std::vector<std::string> argv{shmtest::cli_path()};
  argv.insert(argv.end(), args.begin(), args.end());
  const auto t0 = steady::now();
  shmtest::child c(argv, {}, true, true);
  c.close_stdin();
  cli_call r;
  r.out = c.read_all(limit);
  const auto left = std::chrono::duration_cast<ms>(limit - (steady::now() - t0));
  const int st = c.wait(std::max(ms(1), left));
  r.took = std::chrono::duration_cast<ms>(steady::now() - t0);
  r.hung = c.timed_out();
  r.err = c.read_stderr();
  if (WIFSIGNALED(st) && !r.hung) r.signal = WTERMSIG(st);
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

}  // namespace adv
