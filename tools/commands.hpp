// tools/commands.hpp - the shmbox commands that live in their own files.
#pragma once

#include <string>

#include "cli_args.hpp"
#include "shmbox/box.hpp"

namespace shmbox_cli {

// tools/watch.cpp: `shmbox watch NAME`: a live view until q, Ctrl-C, SIGTERM
// or --count refreshes; a line per refresh when stdout is not a terminal.
int cmd_watch(const parsed& a);

// tools/metrics.cpp: the box's figures in the Prometheus text exposition
// format (version 0.0.4): one metric family per counter, labelled by box and lane.
std::string prometheus_text(const shmbox::box_info& info);

}  // namespace shmbox_cli
