// bridge/bridge.hpp - what the parts of shmbox-bridge share: the exit codes,
// the stop flag, the NATS connection (bridge.cpp) and the two directions,
// run_export (export.cpp) and run_import (import.cpp). main and the command
// line are bridge.cpp's.
#pragma once

#include <nats/nats.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>

#include "bridge_status.hpp"

namespace shmbox_bridge {

using shmbox_cli::bridge_counter;
using shmbox_cli::bridge_role;
using shmbox_cli::bridge_status;

inline constexpr int kExitOk = 0, kExitFail = 1, kExitUsage = 2;

// Set by SIGINT and SIGTERM: the bridge finishes its round and stops.
extern std::atomic<bool> g_stop;

// "shmbox-bridge: WHAT" on stderr; returns kExitFail.
int die(const std::string& what);
// nats.c's text for `s`, with its last error's detail.
std::string nats_error(natsStatus s);

struct common_args {
  std::string url = "nats://127.0.0.1:4222";
  std::string stream, subject, user, password, token;
};

// A NATS connection with its JetStream context; reconnects for ever once up.
struct nats_link {
  natsOptions* opts = nullptr;
  natsConnection* nc = nullptr;
  jsCtx* js = nullptr;
  nats_link() = default;
  nats_link(const nats_link&) = delete;
  nats_link& operator=(const nats_link&) = delete;
  ~nats_link() {
    if (js != nullptr) jsCtx_Destroy(js);
    if (nc != nullptr) {
      natsConnection_FlushTimeout(nc, 1000);  // the last acks
      natsConnection_Destroy(nc);
    }
    if (opts != nullptr) natsOptions_Destroy(opts);
  }
};
// Connects (one attempt: a bad URL or bad credentials end the bridge with a
// clear line) and opens JetStream. `js_opts` may set the async-ack handler.
bool connect(nats_link& l, const common_args& a, jsOptions* js_opts, bool send_asap, std::string& error);
// NATS subject matching: '*' one token, '>' the rest.
bool subject_matches(std::string_view pattern, std::string_view subject);
// A line saying why the stream of `a` cannot be read (missing, or the error).
std::string describe_stream_error(const common_args& a, natsStatus s, jsErrCode jerr);

// ---- export.cpp: own the box, publish what it reads, commit what JetStream acked

struct export_args : common_args {
  std::string box;
  bool create_stream = false;
  std::string storage = "file";
  double dedupe_window_s = 120;
  std::uint32_t max_inflight = 0;  // 0: min(256, capacity / 2)
  std::uint32_t ack_timeout_ms = 2000;
};
int run_export(const export_args& a);

// ---- import.cpp: pull the stream into the box, ack what the box took ----------

struct import_args : common_args {
  std::string into, durable;
  std::uint32_t max_batch = 256;
  std::uint32_t nak_delay_ms = 500;
  std::uint32_t ack_wait_ms = 30000;
};
int run_import(import_args a);

}  // namespace shmbox_bridge
