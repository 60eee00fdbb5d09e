// bench/numbered_boxes.hpp - many boxes of one benchmark run, named
// <marker><pid>-<i>, and their removal however the run ends (also from the
// fatal-signal handler: unlink_all_boxes is async-signal-safe). Used by
// bench/boxes.cpp and bench/scrape.cpp.
#pragma once

#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>

namespace numbered_boxes {

inline char g_prefix[128];                  // "/dev/shm/shmbox.<marker><pid>-"
inline volatile std::sig_atomic_t g_boxes;  // how many may exist: set to i + 1 before box i is created
inline std::string g_names;                 // "<marker><pid>-": set before any fork

// Names this run's boxes <marker><pid of this process>-<i>.
inline void name_boxes(std::string_view marker) {
  g_names = std::string(marker) + std::to_string(::getpid()) + "-";
  std::snprintf(g_prefix, sizeof g_prefix, "/dev/shm/shmbox.%s", g_names.c_str());
}

inline std::string box_name(int i) { return g_names + std::to_string(i); }

// Async-signal-safe: unlinks /dev/shm/shmbox.<prefix><i> for every i.
inline void unlink_all_boxes() noexcept {
  char path[192];
  const std::size_t len = std::strlen(g_prefix);
  for (int i = 0; i < g_boxes; ++i) {
    std::memcpy(path, g_prefix, len);
    char digits[16];
    int n = 0, v = i;
    do digits[n++] = static_cast<char>('0' + v % 10), v /= 10;
    while (v > 0);
    for (int k = 0; k < n; ++k) path[len + static_cast<std::size_t>(k)] = digits[n - 1 - k];
    path[len + static_cast<std::size_t>(n)] = '\0';
    ::unlink(path);
  }
}

struct BoxesGuard {  // removes the boxes when the run ends, however it ends
  ~BoxesGuard() { unlink_all_boxes(); }
};

}  // namespace numbered_boxes
