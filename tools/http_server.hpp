// tools/http_server.hpp - the HTTP server of `shmbox metrics --listen`
// (metrics_http.cpp): GET and HEAD over HTTP/1.1 and 1.0 on poll(2), in one
// thread, with every resource a client can make it spend bounded.
//
// Why its own and not a library. The exporter runs as a user that can read
// every box (often root) and answers every local user, so each resource
// needs a hard bound that a test can check
// (tests/cli/cli_metrics_http_bounds.cpp):
//   * cpp-httplib 0.11 (Debian 12, what this used before) cannot bound the
//     number of header lines nor a request's total time, reads some bodies
//     whole (one chunk of 256 MiB, a Content-Length of 300 MB), honours
//     2,700 byte ranges by building 2,700 copies of the text, and answers
//     from a small thread pool that two slowloris connections fill: the
//     acceptance test found all of these.
//   * GNU libmicrohttpd (Debian 12: libmicrohttpd-dev) is event-driven with
//     a connection limit and a memory pool per connection, but its timeout
//     (MHD_OPTION_CONNECTION_TIMEOUT) is an idle timeout, renewed by every
//     byte: a client that sends one byte a second keeps its connection
//     forever, and at the limit new connections are refused, not made room
//     for. Working around both would be more code than this loop.
//   What a scraper needs is a few hundred lines; written here, every bound is
//   a constant in http_server.cpp or http_head.hpp, and every accept, read,
//   write and wait is in view.
//
// THE BOUNDS (one request, one connection, the whole server):
//   B1 a request head is at most kMaxHead (8 KiB) and kMaxHeaderLines (64)
//      lines: 414 or 431 past them, at once (http_head.hpp). A connection
//      buffers at most kMaxHead + kMaxBody bytes; it is not read while its
//      answer is pending or being written.
//   B2 a body: a Content-Length up to kMaxBody (1 KiB) is read and dropped;
//      a longer one, or any Transfer-Encoding, is refused (413, 501)
//      without reading it. Other methods than GET and HEAD: 405. Range is
//      ignored: an answer is the whole text, once.
//   B3 time: a head (and its small body) must be complete kHeadTimeout
//      (10 s) after its first byte, else 408; an answer must be written
//      within kReplyTimeout (30 s); a connection idle between requests is
//      closed after kIdleTimeout (2 min); after an answer that closes it,
//      at most kLingerBytes (64 KiB) of the client's leftovers are drained,
//      for at most kLingerTimeout (2 s), so that the answer is not lost to
//      a reset.
//   B4 connections: at most kMaxConnections (256) are open. When a new one
//      comes at the cap, one is closed to make room: first one that has
//      been answered (idle after an answer, or draining), else the oldest
//      that has been unfinished (idle, sending its head, or reading its
//      answer) for kEvictAfter (1 s). Only a connection waiting for a build
//      is never evicted. So idle or slow clients, however many, delay a
//      scrape by about 1 s at most; the listen queue (SOMAXCONN) holds the
//      newcomers meanwhile. Why 1 s and not at once: a client that has
//      connected has not always sent its request yet (a burst of 1,000
//      scrapes connects before it writes), and closing it would fail a good
//      request. What this does not bound: a flood of new connections faster
//      than the cap per kEvictAfter (256 a second) keeps the listen queue
//      full, and a scrape waits in it; that is the kernel's queue, not this
//      process's memory, and a per-source connection limit in the firewall
//      is its answer.
//   B5 memory: every GET /metrics waiting when a build starts gets that
//      build's text (shared, not copied: it was built after each of their
//      heads came); the texts held by answers being written are at most
//      kMaxTexts (4): a fifth build first closes the connections still
//      reading the oldest one (the slowest readers). So the server holds at
//      most 256 x 9 KiB of requests (2.3 MiB) and 4 texts, whatever
//      clients do.
//   B6 CPU: one text is built at a time (one thread), so a flood of scrapes
//      costs one core at most, and a scrape waits for at most the build in
//      progress and its own.
//   B7 stderr: a warning is written only when stderr can take it without
//      blocking; otherwise it is counted and the count said later. A stderr
//      pipe nobody reads stops nothing.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace shmbox_cli::http {

// One build of the served text: the answer to GET /metrics.
struct page {
  int status = 200;                   // 200, or 500 when it could not be built
  const char* content_type = "";      // of `body`
  std::string body;                   // the text; for a 500, the line (with its '\n') that says why
  std::vector<std::string> warnings;  // for stderr: each said when the last build did not have it
};

// Serves GET|HEAD /metrics (a page from `build`, one build at a time,
// shared by the requests waiting when it starts), / (a line pointing at
// /metrics) and 404s, on `listen_fd` (bound, listening, non-blocking) until
// `signal_fd` (a signalfd) is readable: true. false when the listening
// socket fails for good (said on stderr). A build that throws is a 500.
bool serve(int listen_fd, int signal_fd, const std::function<page()>& build);

}  // namespace shmbox_cli::http
