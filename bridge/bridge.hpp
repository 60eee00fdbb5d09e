// bridge/bridge.hpp - what the parts of shmbox-bridge share: the exit codes,
// the stop flag, the NATS connection (bridge.cpp) and the two directions,
// run_export (export.cpp) and run_import (import.cpp). main and the command
// line are bridge.cpp's.
#pragma once

#include <nats/nats.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>

#include "bridge_status.hpp"

namespace shmbox_bridge {

using shmbox_cli::bridge_counter;
using shmbox_cli::bridge_role;
using shmbox_cli::bridge_state;
using shmbox_cli::bridge_status;

inline constexpr int kExitOk = 0, kExitFail = 1, kExitUsage = 2;

// Set by SIGINT and SIGTERM: the bridge finishes its round and stops.
extern std::atomic<bool> g_stop;

// "shmbox-bridge: WHAT" on stderr; returns kExitFail.
int die(const std::string& what);
// nats.c's text for `s`, with its last error's detail.
std::string nats_error(natsStatus s);

struct common_args {
  std::string url = "nats://127.0.0.1:4222";  // or a comma-separated list
  std::string stream, subject, user, password, token;
  std::string password_file, token_file;      // the secret from a file instead of argv
  std::string creds, nkey;                    // a .creds file (JWT + seed); an NKey seed file
  std::string tls_ca, tls_cert, tls_key;      // PEM files
  // Fills user/password/token from the files and SHMBOX_NATS_USER,
  // SHMBOX_NATS_PASSWORD, SHMBOX_NATS_TOKEN (argv first, then the file, then
  // the environment) and checks they go together; false with `error`.
  bool resolve_secrets(std::string& error);
};

// What nats.c's connection callbacks see. They run on nats.c's threads,
// possibly after the connection is destroyed: so it is never freed (one per
// process), and `closed` under `mu` ends their writes for good.
struct link_events {
  std::mutex mu;
  bool closed = false;
  bridge_status* status = nullptr;  // where the callbacks write the state
  std::string shown;                // the URL(s) without credentials
  bool quiet = false;               // a helper connection (the import's acks): the main one reports
  link_events* next = nullptr;      // the one made before it (g_link_events)
};

// Every link_events made, chained from here: never freed (above), and
// reachable to the end, so that LeakSanitizer does not take it for a leak.
inline std::atomic<link_events*> g_link_events{nullptr};
inline link_events* make_link_events() {
  auto* e = new link_events;
  e->next = g_link_events.load(std::memory_order_relaxed);
  // relaxed: only the chain's reachability matters; nobody walks it
  while (!g_link_events.compare_exchange_weak(e->next, e, std::memory_order_relaxed)) {
  }
  return e;
}

// A NATS connection with its JetStream context; once up it reconnects for
// ever (bounded backoff), saying so on stderr and in the status segment.
struct nats_link {
  natsOptions* opts = nullptr;
  natsConnection* nc = nullptr;
  jsCtx* js = nullptr;
  link_events* events = make_link_events();  // never freed (above)
  std::string shown;                      // the URL(s) without credentials
  nats_link() = default;
  nats_link(const nats_link&) = delete;
  nats_link& operator=(const nats_link&) = delete;
  ~nats_link() {
    {
      std::lock_guard<std::mutex> g(events->mu);
      events->closed = true;  // a disconnect now is not news, and the status segment goes away
    }
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
bool connect(nats_link& l, const common_args& a, bridge_status& st, jsOptions* js_opts, bool send_asap, std::string& error);
// Whether the connection is up now (not reconnecting).
bool connected(const nats_link& l);
// Writes the state (and, on a change, one line on stderr: `line` if given).
void report_state(bridge_status& st, shmbox_cli::bridge_state s, const std::string& line = {});
// The state `stopped` (the bridge exits with `rc`, returned).
int stop(bridge_status& st, int rc);
// The last error, in the status segment and (when `say`) on stderr.
void report_error(bridge_status& st, const std::string& what, bool say);
// A crash point for the tests: SHMBOX_BRIDGE_CRASH=NAME[:N] in the
// environment kills the bridge (SIGKILL) the N-th time (default 1st) it
// passes NAME. Points: import.after_fetch, import.after_intent,
// import.after_post, import.before_ack (import.cpp).
void crash_point(const char* name) noexcept;
// Seconds-granular rate limit: true at most once per `every` for each caller's `last`.
bool every(std::chrono::steady_clock::time_point& last, std::chrono::milliseconds every);
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
  int replicas = 1;                 // a created stream's replicas (1..5)
  std::int64_t max_bytes = -1;      // a created stream's byte limit (-1: none)
  double max_age_s = 0;             // a created stream's age limit (0: none)
};
int run_export(const export_args& a);

// ---- import.cpp: pull the stream into the box, ack what the box took ----------

struct import_args : common_args {
  std::string into, durable;
  std::uint32_t max_batch = 256;
  std::uint32_t nak_delay_ms = 500;
  std::uint32_t ack_wait_ms = 30000;
  double stream_grace_s = 30;       // how long a missing stream is waited for before exit 1
};
int run_import(import_args a);

}  // namespace shmbox_bridge
