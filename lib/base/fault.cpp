#include "base/fault.hpp"

#if defined(SHMBOX_FAULT_INJECTION)
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

namespace shmbox::detail {
namespace {
struct fault_config {
  std::string point;
  long trigger = 0;
  bool stop = false;  // ":stop" suffix: SIGSTOP instead of SIGKILL (a slow, not dead, process)
  std::atomic<long> hits{0};
};

fault_config& config() noexcept {
  static fault_config cfg;
  static std::once_flag once;
  std::call_once(once, [] {
    const char* env = std::getenv("SHMBOX_FAULT");
    if (env == nullptr || *env == '\0') return;
    std::string s(env);
    if (s.size() > 5 && s.compare(s.size() - 5, 5, ":stop") == 0) {
      cfg.stop = true;
      s.resize(s.size() - 5);
    }
    const auto colon = s.find(':');
    cfg.point = s.substr(0, colon);
    cfg.trigger = colon == std::string::npos ? 1 : std::strtol(s.c_str() + colon + 1, nullptr, 10);
    if (cfg.trigger < 1) cfg.trigger = 1;
  });
  return cfg;
}
}  // namespace

const bool g_fault_armed = [] {
  const char* env = std::getenv("SHMBOX_FAULT");
  return env != nullptr && *env != '\0';
}();

void fault_point(const char* name) noexcept {
  fault_config& cfg = config();
  if (cfg.point.empty() || cfg.point != name) return;
  if (cfg.hits.fetch_add(1, std::memory_order_relaxed) + 1 == cfg.trigger) {
    if (cfg.stop) {
      ::kill(::getpid(), SIGSTOP);  // resumes on SIGCONT and carries on
      return;
    }
    ::kill(::getpid(), SIGKILL);
    ::pause();
  }
}
}  // namespace shmbox::detail
#endif
