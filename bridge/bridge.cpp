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
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <string_view>
#include <vector>

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
namespace {

// ---- secrets: from a file or the environment instead of argv (which `ps` shows)

// The file's text without its trailing newline; false with `error`.
bool read_secret(const std::string& path, const char* what, std::string& out, std::string& error) {
  FILE* f = std::fopen(path.c_str(), "re");
  if (f == nullptr) {
    error = std::string("cannot read the ") + what + " file '" + path + "': " + std::strerror(errno);
    return false;
  }
  char buf[4096];
  const std::size_t n = std::fread(buf, 1, sizeof buf, f);
  std::fclose(f);
  out.assign(buf, n);
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  if (out.empty() || n == sizeof buf) {
    error = std::string("the ") + what + " file '" + path + "' " + (out.empty() ? "is empty" : "is longer than 4 KiB");
    return false;
  }
  return true;
}

// ---- NKeys: the public key of a user seed (the server checks the nonce's
// signature against it; nats.c signs with the seed but needs both).

constexpr char kBase32[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";

std::uint16_t crc16(const unsigned char* p, std::size_t n) {  // CRC-16/XMODEM, as the NKeys encoding uses
  std::uint16_t crc = 0;
  for (std::size_t i = 0; i < n; ++i) {
    crc ^= static_cast<std::uint16_t>(p[i]) << 8;
    for (int b = 0; b < 8; ++b) crc = (crc & 0x8000) != 0 ? static_cast<std::uint16_t>((crc << 1) ^ 0x1021) : static_cast<std::uint16_t>(crc << 1);
  }
  return crc;
}

bool base32_decode(std::string_view in, std::vector<unsigned char>& out) {
  std::uint32_t acc = 0;
  int bits = 0;
  for (const char ch : in) {
    const char* at = std::strchr(kBase32, ch);
    if (ch == '\0' || at == nullptr) return false;
    acc = (acc << 5) | static_cast<std::uint32_t>(at - kBase32);
    bits += 5;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<unsigned char>(acc >> bits));
    }
  }
  return true;
}

std::string base32_encode(const unsigned char* p, std::size_t n) {
  std::string out;
  std::uint32_t acc = 0;
  int bits = 0;
  for (std::size_t i = 0; i < n; ++i) {
    acc = (acc << 8) | p[i];
    bits += 8;
    while (bits >= 5) {
      bits -= 5;
      out += kBase32[(acc >> bits) & 31];
    }
  }
  if (bits > 0) out += kBase32[(acc << (5 - bits)) & 31];
  return out;
}

constexpr unsigned char kPrefixSeed = 18 << 3, kPrefixUser = 20 << 3;

}  // namespace

// The NKey user public key ("U...") of the seed ("SU...") in `seed_file`.
bool nkey_public_key(const std::string& seed_file, std::string& pub, std::string& error) {
  std::string text;
  if (!read_secret(seed_file, "NKey seed", text, error)) return false;
  std::string seed;
  for (std::size_t at = text.find("SU"); at != std::string::npos && seed.empty(); at = text.find("SU", at + 2)) {
    std::size_t end = at;
    while (end < text.size() && std::strchr(kBase32, text[end]) != nullptr && text[end] != '\0') ++end;
    if (end - at == 58) seed = text.substr(at, 58);
  }
  std::vector<unsigned char> raw;
  if (seed.empty() || !base32_decode(seed, raw) || raw.size() != 36) {
    error = "the NKey file '" + seed_file + "' holds no user seed (a line of 58 characters starting SU, as `nk -gen user` writes)";
    return false;
  }
  const std::uint16_t crc = static_cast<std::uint16_t>(raw[34] | (raw[35] << 8));
  const unsigned char prefix = static_cast<unsigned char>(((raw[0] & 7) << 5) | ((raw[1] & 0xf8) >> 3));
  if (crc16(raw.data(), 34) != crc || (raw[0] & 0xf8) != kPrefixSeed || prefix != kPrefixUser) {
    error = "the NKey seed in '" + seed_file + "' is damaged (checksum) or not a user seed (SU...)";
    return false;
  }
  EVP_PKEY* key = EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, nullptr, raw.data() + 2, 32);
  unsigned char out[35];
  std::size_t len = 32;
  const bool ok = key != nullptr && EVP_PKEY_get_raw_public_key(key, out + 1, &len) == 1 && len == 32;
  EVP_PKEY_free(key);
  OPENSSL_cleanse(raw.data(), raw.size());
  if (!ok) {
    error = "cannot derive the public key of the NKey seed in '" + seed_file + "' (OpenSSL's Ed25519)";
    return false;
  }
  out[0] = kPrefixUser;
  const std::uint16_t c = crc16(out, 33);
  out[33] = static_cast<unsigned char>(c & 0xff);
  out[34] = static_cast<unsigned char>(c >> 8);
  pub = base32_encode(out, 35);
  return true;
}

bool common_args::resolve_secrets(std::string& error) {
  const auto from = [&](std::string& v, const std::string& file, const char* what, const char* env) {
    if (v.empty() && !file.empty()) return read_secret(file, what, v, error);
    if (const char* e = std::getenv(env); v.empty() && e != nullptr && *e != '\0') v = e;
    return true;
  };
  if (!from(password, password_file, "password", "SHMBOX_NATS_PASSWORD") || !from(token, token_file, "token", "SHMBOX_NATS_TOKEN"))
    return false;
  if (const char* e = std::getenv("SHMBOX_NATS_USER"); user.empty() && e != nullptr && *e != '\0') user = e;
  const bool up = !user.empty() || !password.empty();
  if (up && (user.empty() || password.empty())) {
    error = "a NATS user needs a password and a password a user: --user with --password, --password-file or SHMBOX_NATS_PASSWORD";
    return false;
  }
  const int ways = (up ? 1 : 0) + (!token.empty() ? 1 : 0) + (!creds.empty() ? 1 : 0) + (!nkey.empty() ? 1 : 0);
  if (ways > 1) {
    error = "give one way to authenticate: user and password, a token, --creds or --nkey (the environment's SHMBOX_NATS_* count too)";
    return false;
  }
  // nats.c reads these at connect; say now, and which option, if one cannot be read.
  for (const auto& [option, path] : {std::pair<const char*, const std::string*>{"--creds", &creds}, {"--nkey", &nkey},
                                     {"--tls-ca", &tls_ca}, {"--tls-cert", &tls_cert}, {"--tls-key", &tls_key}})
    if (!path->empty() && access(path->c_str(), R_OK) != 0) {
      error = std::string("cannot read the ") + option + " file '" + *path + "': " + std::strerror(errno);
      return false;
    }
  if (tls_cert.empty() != tls_key.empty()) {
    error = "--tls-cert and --tls-key go together (the client certificate and its private key)";
    return false;
  }
  return true;
}

namespace {

extern "C" void on_disconnected(natsConnection*, void* closure) {
  auto* e = static_cast<link_events*>(closure);
  std::lock_guard<std::mutex> g(e->mu);
  if (e->closed || e->quiet || g_stop.load()) return;
  report_state(*e->status, bridge_state::reconnecting, "disconnected from NATS at '" + e->shown + "'; reconnecting");
}

extern "C" void on_reconnected(natsConnection* nc, void* closure) {
  auto* e = static_cast<link_events*>(closure);
  char url[256] = {};
  (void)natsConnection_GetConnectedUrl(nc, url, sizeof url);
  std::lock_guard<std::mutex> g(e->mu);
  if (e->closed || e->quiet) return;
  e->status->add(bridge_counter::reconnects);
  report_state(*e->status, bridge_state::connected, "reconnected to NATS at '" + shmbox_cli::without_credentials(url) + "'");
}

extern "C" void on_async_error(natsConnection*, natsSubscription*, natsStatus err, void* closure) {
  auto* e = static_cast<link_events*>(closure);
  std::lock_guard<std::mutex> g(e->mu);
  if (!e->closed && !e->quiet) report_error(*e->status, std::string("NATS: ") + natsStatus_GetText(err), false);
}

// 100 ms, doubling per pass over the server list, at most 2 s, plus up to 100 ms of jitter.
extern "C" int64_t reconnect_delay(natsConnection*, int attempts, void*) {
  const int doublings = std::min(std::max(attempts - 1, 0), 5);
  return std::min<int64_t>(100LL << doublings, 2000) + static_cast<int64_t>(std::rand() % 100);
}

// "a,b , c" -> {"a", "b", "c"}
std::vector<std::string> split_urls(const std::string& list) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= list.size()) {
    std::size_t end = list.find(',', start);
    if (end == std::string::npos) end = list.size();
    std::string one = list.substr(start, end - start);
    one.erase(0, one.find_first_not_of(" \t"));
    one.erase(one.find_last_not_of(" \t") + 1);
    if (!one.empty()) out.push_back(one);
    start = end + 1;
  }
  return out;
}

}  // namespace

void report_state(bridge_status& st, bridge_state s, const std::string& line) {
  if (st.set_state(s) && !line.empty()) std::cerr << "shmbox-bridge: " << line << std::endl;
}

int stop(bridge_status& st, int rc) {
  st.set_state(bridge_state::stopped);
  return rc;
}

void report_error(bridge_status& st, const std::string& what, bool say) {
  st.set_error(what);
  if (say) std::cerr << "shmbox-bridge: " << what << std::endl;
}

bool every(std::chrono::steady_clock::time_point& last, std::chrono::milliseconds period) {
  const auto now = std::chrono::steady_clock::now();
  if (now - last < period) return false;
  last = now;
  return true;
}

void crash_point(const char* name) noexcept {
  static const char* const spec = std::getenv("SHMBOX_BRIDGE_CRASH");
  static long passes = 0;
  if (spec == nullptr) return;
  const std::size_t n = std::strlen(name);
  if (std::strncmp(spec, name, n) != 0 || (spec[n] != '\0' && spec[n] != ':')) return;
  const long at = spec[n] == ':' ? std::strtol(spec + n + 1, nullptr, 10) : 1;
  if (++passes >= at) raise(SIGKILL);
}

bool connected(const nats_link& l) { return natsConnection_Status(l.nc) == NATS_CONN_STATUS_CONNECTED; }

bool connect(nats_link& l, const common_args& a, bridge_status& st, jsOptions* js_opts, bool send_asap, std::string& error) {
  l.shown = shmbox_cli::without_credentials(a.url);
  l.events->status = &st;
  l.events->shown = l.shown;
  const std::vector<std::string> urls = split_urls(a.url);
  std::vector<const char*> servers;
  bool tls = !a.tls_ca.empty() || !a.tls_cert.empty();
  for (const std::string& u : urls) {
    servers.push_back(u.c_str());
    tls |= u.rfind("tls://", 0) == 0;
  }
  if (servers.empty()) {
    error = "--nats is empty: give a URL such as nats://host:4222 (or several, comma-separated)";
    return false;
  }
  std::string what = "the server list";
  natsStatus s = natsOptions_Create(&l.opts);
  if (s == NATS_OK) s = natsOptions_SetServers(l.opts, servers.data(), static_cast<int>(servers.size()));
  if (s == NATS_OK) s = natsOptions_SetNoRandomize(l.opts, true);  // the operator's order: the first one first
  if (s == NATS_OK && !a.user.empty()) s = natsOptions_SetUserInfo(l.opts, a.user.c_str(), a.password.c_str());
  if (s == NATS_OK && !a.token.empty()) s = natsOptions_SetToken(l.opts, a.token.c_str());
  if (s == NATS_OK && !a.creds.empty()) {
    what = "--creds '" + a.creds + "'";
    s = natsOptions_SetUserCredentialsFromFiles(l.opts, a.creds.c_str(), nullptr);
  }
  if (s == NATS_OK && !a.nkey.empty()) {
    std::string pub;
    if (!nkey_public_key(a.nkey, pub, error)) return false;
    what = "--nkey '" + a.nkey + "'";
    s = natsOptions_SetNKeyFromSeed(l.opts, pub.c_str(), a.nkey.c_str());
  }
  if (s == NATS_OK && tls) {
    what = "TLS (is libnats built with TLS?)";
    s = natsOptions_SetSecure(l.opts, true);
  }
  if (s == NATS_OK && !a.tls_ca.empty()) {
    what = "--tls-ca '" + a.tls_ca + "' (a PEM file of CA certificates)";
    s = natsOptions_LoadCATrustedCertificates(l.opts, a.tls_ca.c_str());
  }
  if (s == NATS_OK && !a.tls_cert.empty()) {
    what = "--tls-cert '" + a.tls_cert + "' / --tls-key '" + a.tls_key + "' (PEM files: the certificate and its key)";
    s = natsOptions_LoadCertificatesChain(l.opts, a.tls_cert.c_str(), a.tls_key.c_str());
  }
  if (s == NATS_OK) what = "the connection options";
  if (s == NATS_OK) s = natsOptions_SetTimeout(l.opts, 2000);
  if (s == NATS_OK) s = natsOptions_SetAllowReconnect(l.opts, true);
  if (s == NATS_OK) s = natsOptions_SetMaxReconnect(l.opts, -1);
  if (s == NATS_OK) s = natsOptions_SetCustomReconnectDelay(l.opts, reconnect_delay, nullptr);
  if (s == NATS_OK) s = natsOptions_SetPingInterval(l.opts, 2000);
  if (s == NATS_OK) s = natsOptions_SetMaxPingsOut(l.opts, 3);
  if (s == NATS_OK) s = natsOptions_SetDisconnectedCB(l.opts, on_disconnected, l.events);
  if (s == NATS_OK) s = natsOptions_SetReconnectedCB(l.opts, on_reconnected, l.events);
  if (s == NATS_OK) s = natsOptions_SetErrorHandler(l.opts, on_async_error, l.events);
  // nats.c's flusher writes at most every millisecond; the import's fetch
  // requests go out at once instead (a millisecond of latency less; its acks
  // take a second connection, written by the flusher: bridge/import.cpp).
  if (s == NATS_OK && send_asap) s = natsOptions_SetSendAsap(l.opts, true);
  if (s != NATS_OK) {
    error = "bad NATS options for '" + l.shown + "': " + what + ": " + nats_error(s) + " (a URL looks like nats://host:4222)";
    return false;
  }
  s = natsConnection_Connect(&l.nc, l.opts);
  if (s != NATS_OK) {
    const std::string why = nats_error(s);
    std::string hint = "is nats-server running there (nats-server -js -a HOST -p PORT)?";
    if (s == NATS_NOT_PERMITTED || why.find("uthoriz") != std::string::npos)
      hint = "the server refused the credentials: pass --user and --password(-file), --token(-file), --creds or --nkey";
    else if (s == NATS_SSL_ERROR || why.find("SSL") != std::string::npos || why.find("TLS") != std::string::npos)
      hint = "TLS failed: check --tls-ca (the CA that signed the server's certificate), the server's name, and --tls-cert/--tls-key";
    error = "cannot connect to NATS at '" + l.shown + "': " + why + "; " + hint;
    return false;
  }
  s = natsConnection_JetStream(&l.js, l.nc, js_opts);
  if (s != NATS_OK) {
    error = "cannot use JetStream on '" + l.shown + "': " + nats_error(s);
    return false;
  }
  report_state(st, bridge_state::connected);
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
  c->add_option("--nats", a.url, "NATS server URL(s), comma-separated, tried in order (nats://[user:password@]host:port, tls://...)")
      ->capture_default_str();
  c->add_option("--stream", a.stream, "JetStream stream")->required()->check(name_token("a stream name"));
  c->add_option("--user", a.user, "NATS user (with a password; or SHMBOX_NATS_USER)");
  auto* password = c->add_option("--password", a.password, "NATS password (shown by ps: prefer --password-file or SHMBOX_NATS_PASSWORD)");
  auto* password_file = c->add_option("--password-file", a.password_file, "a file holding the NATS password");
  auto* token = c->add_option("--token", a.token, "NATS token (shown by ps: prefer --token-file or SHMBOX_NATS_TOKEN)");
  auto* token_file = c->add_option("--token-file", a.token_file, "a file holding the NATS token");
  c->add_option("--creds", a.creds, "a NATS credentials file (user JWT and NKey seed, as nsc writes it)");
  c->add_option("--nkey", a.nkey, "a file holding an NKey user seed (SU...)");
  c->add_option("--tls-ca", a.tls_ca, "PEM file of the CA(s) that signed the server's certificate (turns TLS on)");
  c->add_option("--tls-cert", a.tls_cert, "PEM file of this client's certificate (with --tls-key)");
  c->add_option("--tls-key", a.tls_key, "PEM file of this client's private key (with --tls-cert)");
  password->excludes(password_file);
  token->excludes(token_file);
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
  e->add_option("--replicas", ex.replicas, "replicas of a created stream (a JetStream cluster: 3 or 5)")->check(CLI::Range(1, 5))->capture_default_str();
  e->add_option("--max-bytes", ex.max_bytes, "bytes a created stream keeps at most (its discard policy applies beyond)")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 50));
  e->add_option("--max-age", ex.max_age_s, "seconds a created stream keeps a message at most (older ones are dropped, counted as remote_drops)")
      ->check(CLI::Range(0.001, 1e8));
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
  i->add_option("--stream-grace", im.stream_grace_s, "seconds a missing stream is waited for (an export may make it again) before exit 1")
      ->check(CLI::Range(0.0, 86400.0))->capture_default_str();
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
  std::string error;
  if (!(e->parsed() ? ex.resolve_secrets(error) : im.resolve_secrets(error))) {
    std::cerr << "shmbox-bridge: " << error << "\n";
    return kExitUsage;
  }
  int rc = kExitFail;
  if (e->parsed()) rc = run_export(ex);
  if (i->parsed()) rc = run_import(im);
  nats_Close();
  return rc;
}
