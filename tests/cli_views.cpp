// The CLI's views of boxes: `stat --prometheus` (checked by a strict checker
// of the text exposition format 0.0.4 written here, and by `promtool check
// metrics` when it is installed), `ls` (a table of every box: normal,
// orphaned, corrupt and empty segments) and `stat`'s producer table and
// give-away flag, text and --json.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "support.hpp"

using json = nlohmann::json;

namespace {

shmtest::run_result cli(std::vector<std::string> args, const std::string& input = {}) {
  args.insert(args.begin(), shmtest::cli_path());
  return shmtest::run(args, input);
}

json stat_json(const std::string& name) {
  const auto r = cli({"stat", name, "--json"});
  REQUIRE_MESSAGE(r.code == 0, r.err);
  return json::parse(r.out);
}

// Polls `done` until it holds or `timeout` passes (a bounded handshake on
// state the CLI reports, not a sleep that hopes). Returns whether it held.
bool eventually(const std::function<bool()>& done, std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= until) return done();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

// The blank-separated words of a line.
std::vector<std::string> fields(const std::string& l) {
  std::vector<std::string> f;
  std::istringstream in(l);
  for (std::string w; in >> w;) f.push_back(w);
  return f;
}

// A segment named shmbox.<name> in /dev/shm holding `bytes` (nothing: size 0).

// A process that acquires the box, then dies (SIGKILL): the box is owned by a dead process.
void own_then_die(const std::string& name) {
  shmtest::child owner({shmtest::helper_path(), "own", name}, {}, true);
  REQUIRE(owner.read_line().value_or("").rfind("owned", 0) == 0);
  owner.kill(SIGKILL);
  owner.wait();
}

// ---- a strict checker of the Prometheus text exposition format 0.0.4 ----------
//
// https://prometheus.io/docs/instrumenting/exposition_formats/ :
//   lines end in '\n', the text too; empty lines are ignored;
//   "# HELP name docstring" (docstring escapes: \\ and \n), at most one per name;
//   "# TYPE name counter|gauge|histogram|summary|untyped", at most one per name,
//     before the first sample of that name; other '#' lines are comments;
//   samples: name [{label="value",...[,]}] value [timestamp], blanks between
//     tokens, label values escaped (\\, \", \n), values Go floats (NaN, +Inf,
//     -Inf too), timestamps int64 milliseconds;
//   names [a-zA-Z_:][a-zA-Z0-9_:]*, label names [a-zA-Z_][a-zA-Z0-9_]*, not __*;
//   all lines of one metric family form one group; no two samples of a family
//     with the same label set (nor a label twice in one sample).
// And this project's conventions: every family has HELP and TYPE before its
// samples, only counters and gauges, names shmbox_*, counters end in _total
// (and are >= 0), nothing else does, no ':' in names, every sample labelled box.

bool is_metric_name(const std::string& s) {
  if (s.empty()) return false;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' || (i > 0 && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

// Whether `s` is well-formed UTF-8 (the format's text is).
bool is_utf8(const std::string& s) {
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    std::size_t n = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (std::size_t k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    const auto c1 = static_cast<unsigned char>(s[i + 1 < s.size() ? i + 1 : i]);
    if ((c == 0xE0 && c1 < 0xA0) || (c == 0xED && c1 > 0x9F) || (c == 0xF0 && c1 < 0x90) || (c == 0xF4 && c1 > 0x8F))
      return false;  // overlong, surrogate, beyond U+10FFFF
    i += n;
  }
  return true;
}

bool is_label_name(const std::string& s) {
  if (s.empty() || s.rfind("__", 0) == 0) return false;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (i > 0 && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

// A Go-style float as the format allows: decimal (with exponent), NaN, +Inf, -Inf, Inf.
bool parse_value(const std::string& s, double& out) {
  if (s == "NaN") return out = std::nan(""), true;
  if (s == "+Inf" || s == "Inf") return out = HUGE_VAL, true;
  if (s == "-Inf") return out = -HUGE_VAL, true;
  std::size_t i = 0;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
  std::size_t digits = 0;
  while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i, ++digits;
  if (i < s.size() && s[i] == '.') {
    ++i;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i, ++digits;
  }
  if (digits == 0) return false;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
    std::size_t exp_digits = 0;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i, ++exp_digits;
    if (exp_digits == 0) return false;
  }
  if (i != s.size()) return false;
  out = std::strtod(s.c_str(), nullptr);
  return true;
}

bool parse_timestamp(const std::string& s) {
  std::size_t i = (!s.empty() && s[0] == '-') ? 1 : 0;
  if (i == s.size() || s.size() - i > 19) return false;
  for (; i < s.size(); ++i)
    if (s[i] < '0' || s[i] > '9') return false;
  return true;
}

struct sample {
  std::string name;
  std::map<std::string, std::string> labels;  // unescaped values
  double value = 0;
};

struct family_state {
  std::string type;  // "" until its TYPE line
  bool help = false;
  bool has_samples = false;
  std::set<std::map<std::string, std::string>> label_sets;
};

class prometheus_checker {
 public:
  // Problems found in `text` (empty: it is valid), one sentence each with its line.
  std::vector<std::string> check(const std::string& text) {
    problems_.clear();
    samples_.clear();
    families_.clear();
    closed_.clear();
    current_.clear();
    if (text.empty()) problem(0, "empty exposition");
    else if (text.back() != '\n') problem(0, "the text does not end with a line feed");
    if (!is_utf8(text)) problem(0, "the text is not UTF-8");
    std::size_t start = 0, lineno = 0;
    while (start < text.size()) {
      std::size_t nl = text.find('\n', start);
      if (nl == std::string::npos) nl = text.size();
      ++lineno;
      line(lineno, text.substr(start, nl - start));
      start = nl + 1;
    }
    for (const auto& [name, f] : families_) {
      if (f.type.empty()) problem(0, "family " + name + " has no TYPE line");
      if (!f.help) problem(0, "family " + name + " has no HELP line");
    }
    return problems_;
  }

  const std::vector<sample>& samples() const { return samples_; }
  const std::string& type_of(const std::string& family) { return families_[family].type; }

 private:
  std::vector<std::string> problems_;
  std::vector<sample> samples_;
  std::map<std::string, family_state> families_;
  std::set<std::string> closed_;  // families whose group has ended
  std::string current_;           // the family of the group being read

  void problem(std::size_t lineno, const std::string& what) {
    problems_.push_back((lineno != 0 ? "line " + std::to_string(lineno) + ": " : std::string()) + what);
  }

  // Lines of family `f` start or continue its group; a family seen before
  // whose group ended may not come back.
  void enter(std::size_t lineno, const std::string& f) {
    if (f == current_) return;
    if (closed_.count(f) != 0) problem(lineno, "family " + f + " appears again after other families (not one group)");
    if (!current_.empty()) closed_.insert(current_);
    current_ = f;
  }

  static bool blank(char c) { return c == ' ' || c == '\t'; }

  void line(std::size_t lineno, const std::string& l) {
    if (l.empty()) return;  // ignored by the format
    if (l.find('\r') != std::string::npos) problem(lineno, "carriage return in line");
    if (l[0] == '#') return comment(lineno, l);
    sample_line(lineno, l);
  }

  void comment(std::size_t lineno, const std::string& l) {
    // "#" blanks keyword blanks name [blanks rest]
    std::size_t i = 1;
    while (i < l.size() && blank(l[i])) ++i;
    std::size_t j = i;
    while (j < l.size() && !blank(l[j])) ++j;
    const std::string keyword = l.substr(i, j - i);
    if (keyword != "HELP" && keyword != "TYPE") return;  // a plain comment
    if (i == 1) return;                                // "#HELP": a comment, but suspicious
    i = j;
    while (i < l.size() && blank(l[i])) ++i;
    j = i;
    while (j < l.size() && !blank(l[j])) ++j;
    const std::string name = l.substr(i, j - i);
    if (!is_metric_name(name)) return problem(lineno, "bad metric name '" + name + "' in " + keyword);
    std::string rest;
    if (j < l.size()) {
      std::size_t k = j;
      while (k < l.size() && blank(l[k])) ++k;
      rest = l.substr(k);
    }
    enter(lineno, name);
    family_state& f = families_[name];
    if (keyword == "HELP") {
      if (f.help) problem(lineno, "second HELP line for " + name);
      f.help = true;
      for (std::size_t k = 0; k < rest.size(); ++k)
        if (rest[k] == '\\') {
          if (k + 1 >= rest.size() || (rest[k + 1] != '\\' && rest[k + 1] != 'n'))
            problem(lineno, "invalid escape in HELP of " + name);
          ++k;
        }
      if (rest.empty()) problem(lineno, "empty HELP for " + name);
      return;
    }
    if (!f.type.empty()) problem(lineno, "second TYPE line for " + name);
    if (f.has_samples) problem(lineno, "TYPE of " + name + " after its samples");
    static const std::set<std::string> kTypes = {"counter", "gauge", "histogram", "summary", "untyped"};
    if (kTypes.count(rest) == 0) problem(lineno, "unknown type '" + rest + "' for " + name);
    if (rest != "counter" && rest != "gauge") problem(lineno, name + " is a " + rest + " (only counters and gauges expected)");
    f.type = rest;
    if (name.rfind("shmbox_", 0) != 0) problem(lineno, name + " does not start with shmbox_");
    if (name.find(':') != std::string::npos) problem(lineno, name + " has ':' (reserved for recording rules)");
    const bool total = name.size() > 6 && name.compare(name.size() - 6, 6, "_total") == 0;
    if (rest == "counter" && !total) problem(lineno, "counter " + name + " does not end in _total");
    if (rest != "counter" && total) problem(lineno, "non-counter " + name + " ends in _total");
  }

  void sample_line(std::size_t lineno, const std::string& l) {
    sample s;
    std::size_t i = 0;
    while (i < l.size() && (std::isalnum(static_cast<unsigned char>(l[i])) || l[i] == '_' || l[i] == ':')) ++i;
    s.name = l.substr(0, i);
    if (!is_metric_name(s.name)) return problem(lineno, "bad metric name at the start of '" + l + "'");
    while (i < l.size() && blank(l[i])) ++i;
    if (i < l.size() && l[i] == '{') {
      ++i;
      for (;;) {
        while (i < l.size() && blank(l[i])) ++i;
        if (i < l.size() && l[i] == '}') {
          ++i;
          break;
        }
        std::size_t j = i;
        while (j < l.size() && (std::isalnum(static_cast<unsigned char>(l[j])) || l[j] == '_')) ++j;
        const std::string lname = l.substr(i, j - i);
        if (!is_label_name(lname)) return problem(lineno, "bad label name '" + lname + "'");
        i = j;
        while (i < l.size() && blank(l[i])) ++i;
        if (i >= l.size() || l[i] != '=') return problem(lineno, "expected '=' after label " + lname);
        ++i;
        while (i < l.size() && blank(l[i])) ++i;
        if (i >= l.size() || l[i] != '"') return problem(lineno, "expected '\"' to open the value of " + lname);
        ++i;
        std::string value;
        bool closed = false;
        while (i < l.size()) {
          const char c = l[i++];
          if (c == '"') {
            closed = true;
            break;
          }
          if (c != '\\') {
            value += c;
            continue;
          }
          if (i >= l.size()) break;
          const char e = l[i++];
          if (e == '\\') value += '\\';
          else if (e == '"') value += '"';
          else if (e == 'n') value += '\n';
          else return problem(lineno, std::string("invalid escape \\") + e + " in the value of " + lname);
        }
        if (!closed) return problem(lineno, "unterminated value of label " + lname);
        if (!s.labels.emplace(lname, value).second) problem(lineno, "label " + lname + " twice");
        while (i < l.size() && blank(l[i])) ++i;
        if (i < l.size() && l[i] == ',') {
          ++i;
          continue;
        }
        if (i < l.size() && l[i] == '}') {
          ++i;
          break;
        }
        return problem(lineno, "expected ',' or '}' after label " + lname);
      }
    }
    if (i >= l.size() || !blank(l[i])) return problem(lineno, "expected a blank before the value in '" + l + "'");
    while (i < l.size() && blank(l[i])) ++i;
    std::size_t j = i;
    while (j < l.size() && !blank(l[j])) ++j;
    if (!parse_value(l.substr(i, j - i), s.value)) return problem(lineno, "value '" + l.substr(i, j - i) + "' is not a float");
    i = j;
    while (i < l.size() && blank(l[i])) ++i;
    if (i < l.size()) {
      j = i;
      while (j < l.size() && !blank(l[j])) ++j;
      if (!parse_timestamp(l.substr(i, j - i))) return problem(lineno, "bad timestamp '" + l.substr(i, j - i) + "'");
      i = j;
      while (i < l.size() && blank(l[i])) ++i;
      if (i < l.size()) return problem(lineno, "trailing text after the timestamp");
    }
    // The family: counters and gauges are named as their samples.
    enter(lineno, s.name);
    family_state& f = families_[s.name];
    if (f.type.empty()) problem(lineno, "sample of " + s.name + " before its TYPE line");
    if (!f.help) problem(lineno, "sample of " + s.name + " before its HELP line");
    f.has_samples = true;
    if (!f.label_sets.insert(s.labels).second) problem(lineno, "duplicate label set for " + s.name);
    if (s.labels.count("box") == 0) problem(lineno, "sample of " + s.name + " without a box label");
    if (f.type == "counter" && !(s.value >= 0)) problem(lineno, "counter " + s.name + " is negative or NaN");
    samples_.push_back(std::move(s));
  }
};

// Where `promtool` is on PATH ("" if nowhere).
std::string find_promtool() {
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin");
  for (std::string d; std::getline(dirs, d, ':');) {
    const std::string p = (d.empty() ? "." : d) + "/promtool";
    if (::access(p.c_str(), X_OK) == 0) return p;
  }
  return {};
}

// Checks `text` with `promtool check metrics` (a no-op when promtool is "":
// not installed; the test case says so once).
void promtool_check(const std::string& promtool, const std::string& text) {
  if (promtool.empty()) return;
  const auto r = shmtest::run({promtool, "check", "metrics"}, text);
  INFO("promtool stdout: ", r.out);
  INFO("promtool stderr: ", r.err);
  CHECK(r.code == 0);
  CHECK(r.out.empty());
  CHECK(r.err.empty());
}

const char* const kCounterFamilies[] = {
    "shmbox_posted_total",         "shmbox_stored_total",          "shmbox_delivered_total",      "shmbox_rejected_total",
    "shmbox_too_large_total",      "shmbox_timeouts_total",        "shmbox_dropped_newest_total", "shmbox_dropped_oldest_total",
    "shmbox_filtered_total",       "shmbox_abandoned_total",       "shmbox_aborted_total",        "shmbox_redelivered_total",
    "shmbox_dead_lettered_total", "shmbox_dead_letter_failed_total"};

const char* const kGaugeFamilies[] = {"shmbox_depth_messages",     "shmbox_capacity_messages", "shmbox_slot_size_bytes",
                                      "shmbox_segment_bytes",      "shmbox_producers_attached", "shmbox_owner_alive",
                                      "shmbox_owner_epoch",        "shmbox_heirs",              "shmbox_orphaned",
                                      "shmbox_box_info"};

// The value of the one sample of `name` whose labels include `labels` (NaN: none; fails on two).
double value_of(const std::vector<sample>& samples, const std::string& name,
                const std::map<std::string, std::string>& labels) {
  double v = std::nan("");
  int found = 0;
  for (const auto& s : samples) {
    if (s.name != name) continue;
    const bool match = std::all_of(labels.begin(), labels.end(), [&](const auto& kv) {
      const auto it = s.labels.find(kv.first);
      return it != s.labels.end() && it->second == kv.second;
    });
    if (match) v = s.value, ++found;
  }
  CHECK_MESSAGE(found <= 1, name);
  return v;
}

}  // namespace

TEST_CASE("cli views: the Prometheus checker itself accepts valid text and catches each broken rule") {
  prometheus_checker pc;
  const std::string good =
      "# HELP shmbox_x_total Some help with \\\\ and \\n escaped.\n"
      "# TYPE shmbox_x_total counter\n"
      "shmbox_x_total{box=\"a\\\"b\\\\c\\nd\",lane=\"0\"} 1\n"
      "shmbox_x_total{box=\"a\",lane=\"1\",} 2.5e3 1700000000000\n"
      "\n"
      "# a comment\n"
      "# HELP shmbox_g A gauge.\n"
      "# TYPE shmbox_g gauge\n"
      "shmbox_g{box=\"a\"} -Inf\n"
      "shmbox_g { box = \"b\" }\t+Inf\n"
      "shmbox_g{box=\"c\xc3\xa9\xe2\x82\xac\xf0\x9f\x93\xa6\"} NaN\n";
  CHECK(pc.check(good).empty());
  REQUIRE(pc.samples().size() == 5);
  CHECK(pc.samples()[0].labels.at("box") == "a\"b\\c\nd");
  CHECK(pc.samples()[1].value == 2500.0);

  const std::string head = "# HELP shmbox_x_total h\n# TYPE shmbox_x_total counter\n";
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"no final line feed", head + "shmbox_x_total{box=\"a\"} 1"},
      {"no TYPE", "# HELP shmbox_x_total h\nshmbox_x_total{box=\"a\"} 1\n"},
      {"no HELP", "# TYPE shmbox_x_total counter\nshmbox_x_total{box=\"a\"} 1\n"},
      {"TYPE after samples", "# HELP shmbox_x_total h\nshmbox_x_total{box=\"a\"} 1\n# TYPE shmbox_x_total counter\n"},
      {"second TYPE", head + "# TYPE shmbox_x_total counter\nshmbox_x_total{box=\"a\"} 1\n"},
      {"second HELP", head + "# HELP shmbox_x_total again\nshmbox_x_total{box=\"a\"} 1\n"},
      {"family repeated", head + "shmbox_x_total{box=\"a\"} 1\n# HELP shmbox_g g\n# TYPE shmbox_g gauge\nshmbox_g{box=\"a\"} 1\n"
                                 "shmbox_x_total{box=\"b\"} 1\n"},
      {"duplicate label set", head + "shmbox_x_total{box=\"a\",lane=\"0\"} 1\nshmbox_x_total{lane=\"0\",box=\"a\"} 2\n"},
      {"label twice", head + "shmbox_x_total{box=\"a\",box=\"b\"} 1\n"},
      {"counter without _total", "# HELP shmbox_x h\n# TYPE shmbox_x counter\nshmbox_x{box=\"a\"} 1\n"},
      {"gauge with _total", "# HELP shmbox_g_total h\n# TYPE shmbox_g_total gauge\nshmbox_g_total{box=\"a\"} 1\n"},
      {"bad escape in label value", head + "shmbox_x_total{box=\"a\\tb\"} 1\n"},
      {"unescaped quote", head + "shmbox_x_total{box=\"a\"b\"} 1\n"},
      {"bad escape in HELP", "# HELP shmbox_x_total a \\q\n# TYPE shmbox_x_total counter\nshmbox_x_total{box=\"a\"} 1\n"},
      {"bad metric name", head + "9shmbox_x_total{box=\"a\"} 1\n"},
      {"bad label name", head + "shmbox_x_total{box=\"a\",1lane=\"0\"} 1\n"},
      {"reserved label name", head + "shmbox_x_total{box=\"a\",__lane=\"0\"} 1\n"},
      {"value not a float", head + "shmbox_x_total{box=\"a\"} 1,5\n"},
      {"hex value", head + "shmbox_x_total{box=\"a\"} 0x10\n"},
      {"bad timestamp", head + "shmbox_x_total{box=\"a\"} 1 1.5\n"},
      {"negative counter", head + "shmbox_x_total{box=\"a\"} -1\n"},
      {"unknown type", "# HELP shmbox_x h\n# TYPE shmbox_x gauges\nshmbox_x{box=\"a\"} 1\n"},
      {"no box label", head + "shmbox_x_total{lane=\"0\"} 1\n"},
      {"unterminated labels", head + "shmbox_x_total{box=\"a\" 1\n"},
      {"label value not UTF-8", head + "shmbox_x_total{box=\"a\xff\"} 1\n"},
      {"surrogate in UTF-8", head + "shmbox_x_total{box=\"a\xed\xa0\x80\"} 1\n"},
  };
  for (const auto& [what, text] : bad) {
    CAPTURE(what);
    CHECK_FALSE(pc.check(text).empty());
  }
}

TEST_CASE("cli views: stat --prometheus of a two-lane box owned by a dead process is valid 0.0.4 text") {
  shmtest::segment_guard dl(shmtest::unique_name("vdl"));
  shmtest::segment_guard g(shmtest::unique_name("vprom"));
  REQUIRE(cli({"create", dl.name, "--capacity", "1"}).code == 0);  // takes one dead letter, refuses the next
  // Lane 0: block, capacity 1; lane 1: drop-oldest, capacity 2, dead letters to dl.
  REQUIRE(cli({"create", g.name, "--lanes", "2", "--capacity", "2", "--slot-size", "16", "--lane-capacity", "0=1",
               "--lane-policy", "0=block", "--lane-policy", "1=drop-oldest", "--dead-letters", dl.name, "--lease-ms", "250"})
              .code == 0);
  CHECK(cli({"post", g.name, "--lane", "0", "--timeout", "10", "c1", "c2"}).code == 3);       // stored, timeout
  CHECK(cli({"post", g.name, "--lane", "1", "a", "b", "c", "d"}).code == 0);                  // 2 evicted: 1 dead-lettered, 1 not
  CHECK(cli({"post", g.name, "--lane", "1", "this one is far too large"}).code == 1);         // too large
  CHECK(cli({"recv", g.name, "--max", "1"}).out == "c1\n");                                   // delivered (lane 0 first)
  {
    // A loan given back (aborted), then a loan committed.
    shmtest::child p({shmtest::helper_path(), "produce", g.name, "7", "1", "--no-wait", "--loan", "--abort-every", "1",
                      "--size", "16", "--lane", "0"});
    REQUIRE(p.read_line().value_or("").rfind("ready", 0) == 0);
    CHECK(p.read_line().value_or("").rfind("done stored=1", 0) == 0);
    CHECK(shmtest::exited_with(p.wait(), 0));
  }
  own_then_die(g.name);

  const std::string promtool = find_promtool();
  if (promtool.empty())
    MESSAGE("promtool is not installed (Debian: apt-get install prometheus): only the built-in checker ran");
  const auto r = cli({"stat", g.name, "--prometheus"});
  REQUIRE(r.code == 0);
  CHECK(r.err.empty());
  INFO("exposition:\n", r.out);
  prometheus_checker pc;
  const auto problems = pc.check(r.out);
  for (const auto& p : problems) FAIL_CHECK(p);
  CHECK(problems.empty());
  promtool_check(promtool, r.out);

  const auto& s = pc.samples();
  // Every counter family is there, typed counter, with exactly one sample per lane.
  for (const char* fam : kCounterFamilies) {
    CAPTURE(fam);
    CHECK(pc.type_of(fam) == "counter");
    CHECK(std::count_if(s.begin(), s.end(), [&](const sample& x) { return x.name == fam; }) == 2);
    for (const char* lane : {"0", "1"}) CHECK(!std::isnan(value_of(s, fam, {{"box", g.name}, {"lane", lane}})));
  }
  for (const char* fam : kGaugeFamilies) {
    CAPTURE(fam);
    CHECK(pc.type_of(fam) == "gauge");
  }
  const std::map<std::string, std::string> lane0{{"box", g.name}, {"lane", "0"}}, lane1{{"box", g.name}, {"lane", "1"}},
      box{{"box", g.name}};
  CHECK(value_of(s, "shmbox_posted_total", lane0) == 4);  // c1, c2, the aborted loan, the committed one
  CHECK(value_of(s, "shmbox_stored_total", lane0) >= 2);   // (a FIFO lane counts claimed positions)
  CHECK(value_of(s, "shmbox_timeouts_total", lane0) == 1);
  CHECK(value_of(s, "shmbox_delivered_total", lane0) == 1);
  CHECK(value_of(s, "shmbox_aborted_total", lane0) == 1);
  CHECK(value_of(s, "shmbox_depth_messages", lane0) == 1);
  CHECK(value_of(s, "shmbox_capacity_messages", lane0) == 1);
  CHECK(value_of(s, "shmbox_posted_total", lane1) == 5);
  CHECK(value_of(s, "shmbox_too_large_total", lane1) == 1);
  CHECK(value_of(s, "shmbox_dropped_oldest_total", lane1) == 2);
  CHECK(value_of(s, "shmbox_dead_lettered_total", lane1) == 1);
  CHECK(value_of(s, "shmbox_dead_letter_failed_total", lane1) == 1);
  CHECK(value_of(s, "shmbox_depth_messages", lane1) == 2);
  CHECK(value_of(s, "shmbox_capacity_messages", lane1) == 2);
  // posted = delivered + rejected + too_large + timeouts + dropped_newest + dropped_oldest + filtered
  //          + abandoned + aborted + depth, lane by lane.
  for (const auto* lane : {&lane0, &lane1}) {
    double out = value_of(s, "shmbox_depth_messages", *lane);
    for (const char* fam : {"shmbox_delivered_total", "shmbox_rejected_total", "shmbox_too_large_total",
                            "shmbox_timeouts_total", "shmbox_dropped_newest_total", "shmbox_dropped_oldest_total",
                            "shmbox_filtered_total", "shmbox_abandoned_total", "shmbox_aborted_total"})
      out += value_of(s, fam, *lane);
    CHECK(value_of(s, "shmbox_posted_total", *lane) == out);
  }
  CHECK(value_of(s, "shmbox_lane_info", {{"box", g.name}, {"lane", "0"}, {"policy", "block"}}) == 1);
  CHECK(value_of(s, "shmbox_lane_info", {{"box", g.name}, {"lane", "1"}, {"policy", "drop-oldest"}}) == 1);
  CHECK(value_of(s, "shmbox_box_info", {{"box", g.name}, {"dead_letters", dl.name}}) == 1);
  CHECK(value_of(s, "shmbox_slot_size_bytes", box) == 16);
  CHECK(value_of(s, "shmbox_lease_seconds", box) == 0.25);
  CHECK(value_of(s, "shmbox_owner_alive", box) == 0);
  CHECK(value_of(s, "shmbox_owner_epoch", box) == 2);  // recv, then the helper that died
  CHECK(value_of(s, "shmbox_orphaned", box) == 1);
  CHECK(value_of(s, "shmbox_heirs", box) == 0);
  CHECK(value_of(s, "shmbox_producers_attached", box) == 0);
  CHECK(value_of(s, "shmbox_segment_bytes", box) > 0);

  // The dead-letter box: one lane, no owner ever; also valid.
  const auto d = cli({"stat", dl.name, "--prometheus"});
  REQUIRE(d.code == 0);
  CHECK(pc.check(d.out).empty());
  promtool_check(promtool, d.out);
  CHECK(value_of(pc.samples(), "shmbox_stored_total", {{"box", dl.name}, {"lane", "0"}}) == 1);
  CHECK(value_of(pc.samples(), "shmbox_rejected_total", {{"box", dl.name}, {"lane", "0"}}) == 1);
  CHECK(value_of(pc.samples(), "shmbox_owner_pid", {{"box", dl.name}}) == 0);
}

TEST_CASE("cli views: ls shows a normal box, an orphaned box and corrupt segments, within 100 columns") {
  shmtest::segment_guard ok(shmtest::unique_name("vls"));
  shmtest::segment_guard orphan(shmtest::unique_name("vorph"));
  shmtest::segment_guard junk(shmtest::unique_name("vjunk"));
  shmtest::segment_guard empty(shmtest::unique_name("vempty"));
  REQUIRE(cli({"create", ok.name, "--capacity", "10", "--policy", "drop-newest"}).code == 0);
  REQUIRE(cli({"post", ok.name, "1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11"}).code == 3);  // 1 dropped
  REQUIRE(cli({"create", orphan.name, "--capacity", "4"}).code == 0);
  own_then_die(orphan.name);
  std::string garbage;
  for (int i = 0; i < 8192; ++i) garbage += static_cast<char>((i * 37 + 11) & 0xFF);
  shmtest::write_raw_segment(junk.name, garbage);
  shmtest::write_raw_segment(empty.name, "");

  const auto r = cli({"ls"});
  CHECK(r.code == 0);
  CHECK(r.err.empty());
  INFO("ls:\n", r.out);
  const auto lines = lines_of(r.out);
  REQUIRE(!lines.empty());
  CHECK(lines[0].rfind("NAME", 0) == 0);
  for (const char* col : {"POLICY", "DEPTH/CAP", "OWNER", "STATE", "HEIRS", "DROPS"})
    CHECK(lines[0].find(col) != std::string::npos);
  CHECK(lines[0].size() <= 100);
  // A box's row: "NAME columns..." or, when NAME is wider than its column
  // (other boxes on the machine may make the other columns wide), NAME alone
  // on a line and the columns on the next; returned as one line.
  std::vector<std::string> our_lines;
  auto row_of = [&](const std::string& name) {
    for (std::size_t k = 0; k < lines.size(); ++k) {
      if (lines[k].rfind(name + " ", 0) == 0) {
        our_lines.push_back(lines[k]);
        return lines[k];
      }
      if (lines[k] == name && k + 1 < lines.size()) {
        our_lines.push_back(lines[k + 1]);
        return name + lines[k + 1];
      }
    }
    return std::string();
  };
  const std::string ok_row = row_of(ok.name), orphan_row = row_of(orphan.name), junk_row = row_of(junk.name),
                    empty_row = row_of(empty.name);
  REQUIRE(!ok_row.empty());
  REQUIRE(!orphan_row.empty());
  REQUIRE(!junk_row.empty());
  REQUIRE(!empty_row.empty());
  for (const auto& l : our_lines) {
    CAPTURE(l);
    CHECK(l.size() <= 100);
  }
  // The full box: policy, depth, a full bar, no owner, its one drop.
  CHECK(ok_row.find("drop-newest") != std::string::npos);
  CHECK(ok_row.find("10/10") != std::string::npos);
  CHECK(ok_row.find("[##########]") != std::string::npos);
  CHECK(ok_row.find("none") != std::string::npos);
  CHECK(fields(ok_row).back() == "1");  // DROPS, the last column (no marks)
  CHECK(ok_row.find("ORPHANED") == std::string::npos);
  // The orphaned box: a dead owner, marked.
  CHECK(orphan_row.find("0/4") != std::string::npos);
  CHECK(orphan_row.find("[..........]") != std::string::npos);
  CHECK(orphan_row.find(" dead") != std::string::npos);
  CHECK(orphan_row.find("passive") != std::string::npos);
  CHECK(orphan_row.find("ORPHANED") != std::string::npos);
  // Garbage: marked, with a short reason instead of the columns.
  CHECK(junk_row.find("CORRUPT") != std::string::npos);
  CHECK(junk_row.find("unusable: not a shmbox segment") != std::string::npos);
  const bool empty_marked = empty_row.find("CORRUPT") != std::string::npos || empty_row.find("INCOMPLETE") != std::string::npos;
  CHECK(empty_marked);
  CHECK(empty_row.find("unusable: ") != std::string::npos);

  const auto js = cli({"ls", "--json"});
  REQUIRE(js.code == 0);
  const auto arr = json::parse(js.out);
  REQUIRE(arr.is_array());
  std::map<std::string, json> by_name;
  for (const auto& e : arr) by_name[e["name"].get<std::string>()] = e;
  REQUIRE(by_name.count(ok.name) == 1);
  REQUIRE(by_name.count(orphan.name) == 1);
  REQUIRE(by_name.count(junk.name) == 1);
  REQUIRE(by_name.count(empty.name) == 1);
  CHECK(by_name[ok.name]["status"] == "ok");
  CHECK(by_name[ok.name]["depth"] == 10);
  CHECK(by_name[ok.name]["policy"] == "drop-newest");
  CHECK(by_name[ok.name]["drops"] == 1);
  CHECK(by_name[ok.name]["foreign"] == false);
  CHECK(by_name[ok.name]["orphaned"] == false);
  CHECK(by_name[orphan.name]["orphaned"] == true);
  CHECK(by_name[orphan.name]["owner"]["alive"] == false);
  CHECK(by_name[junk.name]["status"] == "corrupt");
  CHECK(by_name[junk.name].contains("error"));
  CHECK(by_name[junk.name]["reason"] == "not a shmbox segment (wrong magic)");
  CHECK(by_name[empty.name].contains("error"));
}

TEST_CASE("cli views: stat shows the producers of live and dead processes, and whether the owner takes requests") {
  shmtest::segment_guard g(shmtest::unique_name("vprod"));
  REQUIRE(cli({"create", g.name, "--capacity", "3", "--slot-size", "32"}).code == 0);
  auto producer_of = [](const json& st, long pid) {
    for (const auto& p : st["producers"])
      if (p["pid"] == pid) return p;
    return json::object();
  };
  // No owner yet: nobody to ask.
  auto st = stat_json(g.name);
  CHECK(st["producers"].empty());
  CHECK(st["owner"]["accepts_requests"] == false);
  CHECK(cli({"stat", g.name}).out.find("give-away    no live owner to ask") != std::string::npos);

  // Each helper posts its first message, then sleeps (--pause-us) holding its
  // entry; the handshake is the entry's counters in stat --json.
  auto producer = [&](const char* id, std::vector<std::string> extra) {
    std::vector<std::string> argv = {shmtest::helper_path(), "produce", g.name, id, "3", "--no-wait", "--size", "16",
                                     "--pause-us", "60000000"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return std::make_unique<shmtest::child>(argv);
  };
  // A: one message stored; then it dies.
  auto a = producer("1", {});
  REQUIRE(a->read_line().value_or("").rfind("ready", 0) == 0);
  REQUIRE(eventually([&] { return producer_of(stat_json(g.name), a->pid()).value("stored", 0) == 1; }));
  // C: a loan given back (aborted), then a loan committed: with the given-back
  // position, not yet passed by an owner, the three positions are taken.
  auto c = producer("3", {"--loan", "--abort-every", "1"});
  REQUIRE(c->read_line().value_or("").rfind("ready", 0) == 0);
  REQUIRE(eventually([&] {
    const json s = stat_json(g.name);
    return s["depth"] == 2 && producer_of(s, c->pid()).value("aborted", 0) == 1;
  }));
  // B: its first message finds the box full (refused).
  auto b = producer("2", {});
  REQUIRE(b->read_line().value_or("").rfind("ready", 0) == 0);
  REQUIRE(eventually([&] { return producer_of(stat_json(g.name), b->pid()).value("refused", 0) == 1; }));
  a->kill(SIGKILL);
  a->wait();

  st = stat_json(g.name);
  INFO("stat --json:\n", st.dump(2));
  REQUIRE(st["producers"].size() == 3);
  const json pa = producer_of(st, a->pid()), pb = producer_of(st, b->pid()), pc = producer_of(st, c->pid());
  REQUIRE(!pa.empty());
  REQUIRE(!pb.empty());
  REQUIRE(!pc.empty());
  for (const char* k : {"entry", "pid", "alive", "stored", "refused", "aborted"}) {
    CHECK_MESSAGE(pa.contains(k), k);
    CHECK_MESSAGE(pb.contains(k), k);
    CHECK_MESSAGE(pc.contains(k), k);
  }
  CHECK(pa["alive"] == false);
  CHECK(pa["stored"] == 1);
  CHECK(pa["refused"] == 0);
  CHECK(pa["aborted"] == 0);
  CHECK(pb["alive"] == true);
  CHECK(pb["stored"] == 0);
  CHECK(pb["refused"] == 1);
  CHECK(pb["aborted"] == 0);
  CHECK(pc["alive"] == true);
  CHECK(pc["stored"] >= 1);  // the committed loan (the library also counts the claim of the aborted one)
  CHECK(pc["refused"] == 0);
  CHECK(pc["aborted"] == 1);
  CHECK(pa["entry"] != pb["entry"]);
  CHECK(st["producers_attached"] == 2);
  // The keys tests/cli.cpp and the README rely on are all still there.
  for (const char* k : {"name", "capacity", "slot_size", "policy", "depth", "owner", "orphaned", "lease_ms", "heirs",
                        "last_transfer", "dead_letters", "lanes", "counters", "spin_ns", "mode"})
    CHECK_MESSAGE(st.contains(k), k);

  const std::string text = cli({"stat", g.name}).out;
  INFO("stat:\n", text);
  const auto lines = lines_of(text);
  auto table_row = [&](long pid) {
    for (const auto& l : lines) {
      std::istringstream in(l);
      std::string entry, p;
      in >> entry >> p;
      if (p == std::to_string(pid) && !entry.empty() && std::isdigit(static_cast<unsigned char>(entry[0]))) return l;
    }
    return std::string();
  };
  CHECK(text.find("ENTRY") != std::string::npos);
  CHECK(text.find("REFUSED") != std::string::npos);
  const auto ra = fields(table_row(a->pid())), rb = fields(table_row(b->pid())), rc = fields(table_row(c->pid()));
  REQUIRE(ra.size() == 7);
  REQUIRE(rb.size() == 7);
  REQUIRE(rc.size() == 7);
  // The last column: the pid namespace ("this": the CLI's own).
  CHECK(ra == std::vector<std::string>{pa["entry"].dump(), std::to_string(a->pid()), "no", "1", "0", "0", "this"});
  CHECK(rb == std::vector<std::string>{pb["entry"].dump(), std::to_string(b->pid()), "yes", "0", "1", "0", "this"});
  CHECK(rc == std::vector<std::string>{pc["entry"].dump(), std::to_string(c->pid()), "yes", pc["stored"].dump(), "0", "1",
                                       "this"});

  // An owner that does not take give-away requests, then one that does.
  {
    shmtest::child o({shmtest::helper_path(), "own", g.name}, {}, true);
    REQUIRE(o.read_line().value_or("").rfind("owned", 0) == 0);
    st = stat_json(g.name);
    CHECK(st["owner"]["pid"] == o.pid());
    CHECK(st["owner"]["accepts_requests"] == false);
    CHECK(cli({"stat", g.name}).out.find("give-away    the owner does not accept requests") != std::string::npos);
    o.close_stdin();
    CHECK(shmtest::exited_with(o.wait(std::chrono::seconds(20)), 0));
  }
  shmtest::child follow({shmtest::cli_path(), "recv", g.name, "--follow", "--accept-give-away"}, {}, false, true);
  REQUIRE(eventually([&] {
    const json s = stat_json(g.name);
    return s["owner"]["pid"] == follow.pid() && s["owner"]["accepts_requests"] == true;
  }));
  CHECK(cli({"stat", g.name}).out.find("give-away    the owner hands the box over on request") != std::string::npos);
  follow.kill(SIGTERM);
  CHECK(shmtest::exited_with(follow.wait(std::chrono::seconds(20)), 0));
}
