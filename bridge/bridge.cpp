// bridge/bridge.cpp - shmbox-bridge: moves messages between a local box and a
// NATS JetStream stream (docs/bridge.md). Export owns a box and publishes
// what it reads, committing only what JetStream acknowledged (two-phase
// read; Nats-Msg-Id = the message's shmbox::message_id, so a republish after
// a crash is stored once). Import pulls with a durable consumer, at most the
// box's free slots, posts, and acks only what the box took.
//
// This file: the NATS connection, the command line and main; the two
// directions are export.cpp and import.cpp (bridge.hpp: what they share).
#include <nats/nats.h>
#include <signal.h>

#include <atomic>
#include <iostream>
#include <string>
#include <string_view>

#include <CLI/CLI.hpp>

#include "bridge.hpp"

namespace shmbox_bridge {

std::atomic<bool> g_stop{false};

int die(const std::string& what) {
  std::cerr << "shmbox-bridge: " << what << "\n";
  return kExitFail;
}

std::string nats_error(natsStatus s) {
  natsStatus last = NATS_OK;
  const char* text = nats_GetLastError(&last);
  std::string out = natsStatus_GetText(s);
  if (text != nullptr && *text != '\0' && out.find(text) == std::string::npos) out += std::string(" (") + text + ")";
  return out;
}
bool connect(nats_link& l, const common_args& a, jsOptions* js_opts, bool send_asap, std::string& error) {
  const std::string shown = shmbox_cli::without_credentials(a.url);
  natsStatus s = natsOptions_Create(&l.opts);
  if (s == NATS_OK) s = natsOptions_SetURL(l.opts, a.url.c_str());
  if (s == NATS_OK && !a.user.empty()) s = natsOptions_SetUserInfo(l.opts, a.user.c_str(), a.password.c_str());
  if (s == NATS_OK && !a.token.empty()) s = natsOptions_SetToken(l.opts, a.token.c_str());
  if (s == NATS_OK) s = natsOptions_SetTimeout(l.opts, 2000);
  if (s == NATS_OK) s = natsOptions_SetAllowReconnect(l.opts, true);
  if (s == NATS_OK) s = natsOptions_SetMaxReconnect(l.opts, -1);
  if (s == NATS_OK) s = natsOptions_SetReconnectWait(l.opts, 250);
  if (s == NATS_OK) s = natsOptions_SetPingInterval(l.opts, 2000);
  if (s == NATS_OK) s = natsOptions_SetMaxPingsOut(l.opts, 3);
  // nats.c's flusher writes at most every millisecond; the import's fetch
  // requests and acks go out at once instead (a millisecond of latency less).
  if (s == NATS_OK && send_asap) s = natsOptions_SetSendAsap(l.opts, true);
  if (s != NATS_OK) {
    error = "bad NATS options for '" + shown + "': " + nats_error(s) + " (a URL looks like nats://host:4222)";
    return false;
  }
  s = natsConnection_Connect(&l.nc, l.opts);
  if (s != NATS_OK) {
    const std::string why = nats_error(s);
    std::string hint = "is nats-server running there (nats-server -js -a HOST -p PORT)?";
    if (s == NATS_NOT_PERMITTED || why.find("uthoriz") != std::string::npos)
      hint = "the server refused the credentials: pass --user and --password, or --token, or user:password@ in the URL";
    error = "cannot connect to NATS at '" + shown + "': " + why + "; " + hint;
    return false;
  }
  s = natsConnection_JetStream(&l.js, l.nc, js_opts);
  if (s != NATS_OK) {
    error = "cannot use JetStream on '" + shown + "': " + nats_error(s);
    return false;
  }
  return true;
}

// NATS subject matching: '*' one token, '>' the rest.
bool subject_matches(std::string_view pattern, std::string_view subject) {
  while (true) {
    const std::size_t pd = pattern.find('.'), sd = subject.find('.');
    const std::string_view pt = pattern.substr(0, pd), st = subject.substr(0, sd);
    if (pt == ">") return !subject.empty();
    if (pt != "*" && pt != st) return false;
    if (pd == std::string_view::npos || sd == std::string_view::npos) return pd == sd;
    pattern.remove_prefix(pd + 1);
    subject.remove_prefix(sd + 1);
  }
}

std::string describe_stream_error(const common_args& a, natsStatus s, jsErrCode jerr) {
  if (jerr == JSStreamNotFoundErr || s == NATS_NOT_FOUND)
    return "stream '" + a.stream + "' does not exist on '" + shmbox_cli::without_credentials(a.url) + "'";
  return "cannot read stream '" + a.stream + "': " + nats_error(s) + (jerr != 0 ? " (JetStream error " + std::to_string(jerr) + ")" : "");
}

}  // namespace shmbox_bridge

namespace {

using namespace shmbox_bridge;

extern "C" void on_signal(int) { g_stop.store(true); }

// A stream or consumer name: no spaces, dots, wildcards or path separators (JetStream's rule).
CLI::Validator name_token(const char* what) {
  return CLI::Validator(
      [what](std::string& v) -> std::string {
        if (v.empty()) return std::string(what) + " cannot be empty";
        for (const char ch : v)
          if (ch == '.' || ch == '*' || ch == '>' || ch == '/' || ch == '\\' || ch == ' ' || ch < 0x21 || ch == 0x7f)
            return std::string(what) + " '" + v + "' may not contain '.', '*', '>', '/', '\\' or spaces";
        return {};
      },
      "NAME");
}

void add_common(CLI::App* c, common_args& a) {
  c->add_option("--nats", a.url, "NATS server URL(s), comma-separated (nats://[user:password@]host:port)")->capture_default_str();
  c->add_option("--stream", a.stream, "JetStream stream")->required()->check(name_token("a stream name"));
  auto* user = c->add_option("--user", a.user, "NATS user (with --password)");
  auto* password = c->add_option("--password", a.password, "NATS password (with --user)");
  auto* token = c->add_option("--token", a.token, "NATS token (instead of --user and --password)");
  user->needs(password);
  password->needs(user);
  token->excludes(user)->excludes(password);
}

// A subject to publish to: dot-separated tokens, no wildcard, no space.
CLI::Validator publish_subject() {
  return CLI::Validator(
      [](std::string& v) -> std::string {
        if (v.empty() || v.front() == '.' || v.back() == '.' || v.find("..") != std::string::npos)
          return "'" + v + "' is not a subject: dot-separated tokens, e.g. jobs.host-a";
        for (const char ch : v)
          if (ch == '*' || ch == '>' || ch == ' ' || ch == '\t' || ch == '\r' || ch == '\n')
            return "'" + v + "': a bridge publishes to one subject, without wildcards (* >) or spaces";
        return {};
      },
      "SUBJECT");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"shmbox-bridge: move messages between a local box and a NATS JetStream stream (docs/bridge.md)"};
  app.require_subcommand(1);
  export_args ex;
  auto* e = app.add_subcommand("export", "Own BOX and publish its messages to a stream (a second one stands by as heir)");
  e->add_option("BOX", ex.box, "the box to export")->required();
  add_common(e, ex);
  e->add_option("--subject", ex.subject, "subject to publish to")->required()->check(publish_subject());
  e->add_flag("--create-stream", ex.create_stream, "create the stream if missing, with the box's policy mapped");
  e->add_option("--storage", ex.storage, "storage of a created stream")->check(CLI::IsMember({"file", "memory"}))->capture_default_str();
  e->add_option("--dedupe-window", ex.dedupe_window_s, "seconds: a created stream's duplicate window")
      ->check(CLI::Range(1.0, 86400.0))->capture_default_str();
  e->add_option("--max-inflight", ex.max_inflight, "messages read and published before their acks (default: min(256, capacity/2))")
      ->check(CLI::Range(1u, 65536u));
  e->add_option("--ack-timeout", ex.ack_timeout_ms, "ms to wait for JetStream's acks before publishing again")
      ->check(CLI::Range(10u, 600000u))->capture_default_str();
  import_args im;
  auto* i = app.add_subcommand("import", "Pull a stream with a durable consumer into BOX (acks what the box took)");
  add_common(i, im);
  i->add_option("--durable", im.durable, "durable consumer name (created if missing)")->required()->check(name_token("a durable name"));
  i->add_option("--into", im.into, "the box to post into (it must exist)")->required();
  i->add_option("--subject", im.subject, "filter subject (default: the stream's only subject)");
  i->add_option("--max-batch", im.max_batch, "messages per fetch at most")->check(CLI::Range(1u, 65536u))->capture_default_str();
  i->add_option("--nak-delay", im.nak_delay_ms, "ms before JetStream redelivers a message the box refused")
      ->check(CLI::Range(0u, 3600000u))->capture_default_str();
  i->add_option("--ack-wait", im.ack_wait_ms,
                "ms before JetStream redelivers what an import fetched and never acked (it was killed); a new durable's setting")
      ->check(CLI::Range(100u, 3600000u))->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& err) {
    const int rc = app.exit(err);
    return rc == 0 ? kExitOk : kExitUsage;
  }
  struct sigaction sa{};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
  int rc = kExitFail;
  if (e->parsed()) rc = run_export(ex);
  if (i->parsed()) rc = run_import(im);
  nats_Close();
  return rc;
}
