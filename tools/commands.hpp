// tools/commands.hpp - the shmbox commands that live in their own files.
#pragma once

#include <cstddef>
#include <string>

#include "cli_args.hpp"
#include "shmbox/box.hpp"
#include "shmbox/inspect.hpp"

namespace shmbox_cli {

// tools/watch.cpp: write(2) all of [p, p + n) to `fd`: a write cut short (a
// signal, a full pipe taking part of it) is completed, EINTR retried (also
// from a signal handler: async-signal-safe). false on an error (errno set).
bool write_all(int fd, const char* p, std::size_t n);

// tools/watch.cpp: `shmbox watch NAME`: a live view until q, Ctrl-C, SIGTERM
// or --count refreshes; a line per refresh when stdout is not a terminal.
int cmd_watch(const parsed& a);

// tools/metrics.cpp: the box's figures in the Prometheus text exposition
// format (version 0.0.4): one metric family per counter, labelled by box and lane.
std::string prometheus_text(const shmbox::box_info& info);

}  // namespace shmbox_cli
