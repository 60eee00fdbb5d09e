// tests/cli/prometheus_check.hpp - a strict checker of the Prometheus text
// exposition format 0.0.4 and of this project's conventions for it, and
// `promtool check metrics` when promtool is installed: for `shmbox stat
// --prometheus` (tests/cli/cli_views.cpp), `shmbox pool stat --prometheus`
// (tests/cli/cli_pool.cpp) and `shmbox metrics` (tests/cli/cli_metrics.cpp).
#pragma once

#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "support.hpp"

namespace promcheck {

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
// (and are >= 0), nothing else does, no ':' in names, every sample labelled
// box (`shmbox stat`) or pool (`shmbox pool stat`): the checker's required label
// ("" for none: `shmbox metrics` mixes both, and its own gauges have neither).

inline bool is_metric_name(const std::string& s) {
  if (s.empty()) return false;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' || (i > 0 && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

// Whether `s` is well-formed UTF-8 (the format's text is).
inline bool is_utf8(const std::string& s) {
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

inline bool is_label_name(const std::string& s) {
  if (s.empty() || s.rfind("__", 0) == 0) return false;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (i > 0 && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

// A Go-style float as the format allows: decimal (with exponent), NaN, +Inf, -Inf, Inf.
inline bool parse_value(const std::string& s, double& out) {
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

inline bool parse_timestamp(const std::string& s) {
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
  explicit prometheus_checker(std::string required_label = "box") : required_(std::move(required_label)) {}

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
  std::string required_;  // the label every sample has
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
    if (!required_.empty() && s.labels.count(required_) == 0)
      problem(lineno, "sample of " + s.name + " without a " + required_ + " label");
    if (f.type == "counter" && !(s.value >= 0)) problem(lineno, "counter " + s.name + " is negative or NaN");
    samples_.push_back(std::move(s));
  }
};

// Where `promtool` is on PATH ("" if nowhere).
inline std::string find_promtool() {
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
inline void promtool_check(const std::string& promtool, const std::string& text) {
  if (promtool.empty()) return;
  const auto r = shmtest::run({promtool, "check", "metrics"}, text);
  INFO("promtool stdout: ", r.out);
  INFO("promtool stderr: ", r.err);
  CHECK(r.code == 0);
  CHECK(r.out.empty());
  CHECK(r.err.empty());
}

// The value of the one sample of `name` whose labels include `labels` (NaN: none; fails on two).
inline double value_of(const std::vector<sample>& samples, const std::string& name,
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


}  // namespace promcheck
