// tools/http_head.hpp - what the head of one HTTP/1.x request says, for
// `shmbox metrics --listen` (http_server.cpp): the bytes checked against
// the request bounds and read, with no I/O, so that every limit on what a
// client sends is here and the server only moves bytes.
//
// A head is the request line, the header lines and the empty line that ends
// them (RFC 9112 section 2). Two steps:
//   scan_head   looks at the bytes as they arrive (each byte once) for the
//               end of the head, and refuses early what can never become a
//               request: a request line with a byte no request line holds
//               (TLS, binary), more than kMaxHeaderLines header lines, no
//               end within kMaxHead bytes.
//   parse_head  reads a complete head once: the method, target, version and
//               the few headers that matter (Host, Content-Length,
//               Transfer-Encoding, Connection). Range and the others are
//               ignored: an answer is always the whole text.
// Every refusal carries its status and one line that says what to send
// instead.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace shmbox_cli::http {

constexpr std::size_t kMaxHead = 8192;       // request line + header lines + the empty line, bytes
constexpr std::size_t kMaxHeaderLines = 64;  // header lines (the request line not counted)
constexpr std::size_t kMaxBody = 1024;       // a body (Content-Length) this short is read and dropped; chunked never

// A refusal: the status to answer and its one line of text (no '\n').
struct refusal {
  int status = 0;  // 0: none
  std::string text;
};

// Where scan_head is in a buffer; zero it for each new request.
struct head_scan {
  std::size_t scanned = 0;      // bytes of the buffer looked at so far
  std::size_t line_start = 0;   // offset of the line being scanned
  std::size_t lines = 0;        // complete lines so far (the request line included)
  std::size_t end = 0;          // the head's length through its empty line; 0: not found yet
};

// Looks at the bytes of `buffer` that `scan` has not seen (the buffer only
// grows between calls). Returns a refusal (status != 0) for what can never
// become a request; otherwise scan.end != 0 once the head is complete.
// Empty lines before the request line are let pass (RFC 9112 2.2); they
// count against kMaxHead.
refusal scan_head(std::string_view buffer, head_scan& scan);

// What a complete head asks for.
struct request {
  refusal refused;          // status != 0: answer that and close
  bool head_only = false;   // HEAD: the answer's headers without its body
  bool keep_alive = false;  // HTTP/1.1 without "Connection: close"
  std::string path;         // the target's path, percent-decoded, without its query
  std::string raw_path;     // the same as sent (for a 404's text)
  std::size_t body = 0;     // Content-Length (<= kMaxBody): bytes after the head to read and drop
};

// Reads `head` (scan_head's complete head: scan.end bytes).
request parse_head(std::string_view head);

// "OK", "Not Found", ...: the reason phrase of a status this server sends.
const char* reason_phrase(int status);

}  // namespace shmbox_cli::http
