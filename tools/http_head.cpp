// tools/http_head.cpp - the head of one HTTP/1.x request, checked and read
// (http_head.hpp says what and why). Strict where leniency has been the
// start of request smuggling (a bare CR, a folded line, a space before a
// header's colon, Content-Length twice or beside Transfer-Encoding), lenient
// where RFC 9112 asks for it (a bare LF ends a line, empty lines before the
// request line, an absolute-form target, a later HTTP/1.x read as 1.1).
#include "http_head.hpp"

#include <cstdint>

namespace shmbox_cli::http {

namespace {

constexpr std::string_view kExample = "send 'GET /metrics HTTP/1.1' with a Host header";

bool is_tchar(unsigned char c) {  // RFC 9110 5.6.2: token characters
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return true;
  return std::string_view("!#$%&'*+-.^_`|~").find(static_cast<char>(c)) != std::string_view::npos;
}

bool is_token(std::string_view s) {
  if (s.empty()) return false;
  for (const unsigned char c : s)
    if (!is_tchar(c)) return false;
  return true;
}

char lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

bool same_word(std::string_view a, std::string_view b) {  // ASCII case-insensitive
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (lower(a[i]) != lower(b[i])) return false;
  return true;
}

std::string_view trim(std::string_view s) {  // optional whitespace: SP and HTAB
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// Whether a comma-separated list (Connection) holds `word`.
bool list_has(std::string_view list, std::string_view word) {
  for (;;) {
    const auto comma = list.find(',');
    if (same_word(trim(list.substr(0, comma)), word)) return true;
    if (comma == std::string_view::npos) return false;
    list.remove_prefix(comma + 1);
  }
}

// The last non-empty element of a comma-separated list (Transfer-Encoding's
// last coding, the one that frames the body).
std::string_view last_item(std::string_view list) {
  std::string_view last;
  for (;;) {
    const auto comma = list.find(',');
    if (const std::string_view item = trim(list.substr(0, comma)); !item.empty()) last = item;
    if (comma == std::string_view::npos) return last;
    list.remove_prefix(comma + 1);
  }
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// At most `n` characters of `s`, for a refusal's text (what the client sent
// is visible ASCII by then).
std::string shown(std::string_view s, std::size_t n = 64) {
  return s.size() <= n ? std::string(s) : std::string(s.substr(0, n)) + "...";
}

request refuse(int status, std::string text) {
  request r;
  r.refused = {status, std::move(text)};
  return r;
}

}  // namespace

refusal scan_head(std::string_view buffer, head_scan& scan) {
  // Only the first kMaxHead bytes can hold a head; what comes after them is
  // a body or the next request, looked at after this head is done.
  const std::size_t limit = buffer.size() < kMaxHead ? buffer.size() : kMaxHead;
  for (std::size_t i = scan.scanned; i < limit; ++i) {
    const auto c = static_cast<unsigned char>(buffer[i]);
    if (c != '\n') {
      // The request line is visible ASCII and single spaces (a CR only
      // before its LF, checked by parse_head): anything else is not HTTP
      // (a TLS hello, binary), refused now rather than after 8 KiB or 10 s.
      if (scan.lines == 0 && c != '\r' && (c < 0x20 || c >= 0x7f))
        return {400, "not an HTTP/1.x request (byte 0x" + std::string(1, "0123456789abcdef"[c >> 4]) +
                         std::string(1, "0123456789abcdef"[c & 15]) + " in the request line): " + std::string(kExample) +
                         ", in plain text (this server has no TLS)"};
      continue;
    }
    const std::size_t length = i - scan.line_start;  // without the LF
    const bool empty = length == 0 || (length == 1 && buffer[scan.line_start] == '\r');
    scan.line_start = i + 1;
    if (empty && scan.lines == 0) continue;  // before the request line: skipped (RFC 9112 2.2)
    if (empty) {
      scan.end = i + 1;
      scan.scanned = i + 1;
      return {};
    }
    ++scan.lines;
    if (scan.lines - 1 > kMaxHeaderLines)
      return {431, "more than " + std::to_string(kMaxHeaderLines) + " header lines: send fewer headers (" +
                       std::string(kExample) + ")"};
  }
  scan.scanned = limit;
  if (limit == kMaxHead) {
    if (scan.lines == 0)
      return {414, "request line longer than " + std::to_string(kMaxHead) + " bytes: ask for /metrics with a shorter target"};
    return {431, "request head longer than " + std::to_string(kMaxHead) + " bytes: send fewer and shorter headers (" +
                     std::string(kExample) + ")"};
  }
  return {};
}

request parse_head(std::string_view head) {
  // The lines, each without its LF and the CR before it; a CR anywhere else
  // is refused (a bare CR is a line end to some parsers, not to others).
  std::string_view lines[kMaxHeaderLines + 1];
  std::size_t count = 0;
  for (std::size_t start = 0; start < head.size();) {
    std::size_t lf = head.find('\n', start);
    if (lf == std::string_view::npos) lf = head.size();  // not from scan_head; read as the last line
    std::string_view line = head.substr(start, lf - start);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    start = lf + 1;
    if (line.find('\r') != std::string_view::npos) return refuse(400, "a CR not followed by LF: end each line with CRLF");
    if (line.empty() && count == 0) continue;  // before the request line (scan_head let it pass)
    if (line.empty()) break;                    // the end of the head
    if (count == kMaxHeaderLines + 1)
      return refuse(431, "more than " + std::to_string(kMaxHeaderLines) + " header lines: send fewer headers");
    lines[count++] = line;
  }
  if (count == 0) return refuse(400, "no request line: " + std::string(kExample));

  // The request line: METHOD SP TARGET SP HTTP/x.y, nothing else.
  const std::string_view line = lines[0];
  const auto sp1 = line.find(' ');
  const auto sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || line.find(' ', sp2 + 1) != std::string_view::npos || sp1 == 0 || sp2 == sp1 + 1 ||
      sp2 + 1 == line.size())
    return refuse(400, "the request line is not METHOD TARGET VERSION with one space between them: " + std::string(kExample));
  const std::string_view method = line.substr(0, sp1), target = line.substr(sp1 + 1, sp2 - sp1 - 1),
                         version = line.substr(sp2 + 1);
  if (!is_token(method)) return refuse(400, "the method is not a token: " + std::string(kExample));
  if (version.size() != 8 || version.substr(0, 5) != "HTTP/" || version[5] < '0' || version[5] > '9' || version[6] != '.' ||
      version[7] < '0' || version[7] > '9')
    return refuse(400, std::string("'") + shown(version) + "' is not an HTTP version: " + std::string(kExample));
  if (version[5] != '1') return refuse(505, "HTTP version " + std::string(version.substr(5)) + " is not served: use HTTP/1.1 or HTTP/1.0");
  const bool http11 = version[7] != '0';  // RFC 9110 2.5: a later 1.x is answered as 1.1
  for (const unsigned char c : target)
    if (c <= 0x20 || c >= 0x7f) return refuse(400, "the target holds a byte that must be percent-encoded: ask for /metrics");

  // The header lines that matter; every line is checked.
  std::size_t hosts = 0, lengths = 0;
  std::string_view length, encodings;
  bool has_encoding = false, close_asked = false;
  for (std::size_t i = 1; i < count; ++i) {
    const std::string_view h = lines[i];
    const std::string where = "header line " + std::to_string(i);
    if (h.front() == ' ' || h.front() == '\t')
      return refuse(400, where + " is folded (starts with a space): send each header on one line");
    const auto colon = h.find(':');
    if (colon == std::string_view::npos || !is_token(h.substr(0, colon)))
      return refuse(400, where + " is not 'Name: value' (a token for a name, no space before the colon)");
    const std::string_view name = h.substr(0, colon), value = trim(h.substr(colon + 1));
    for (const unsigned char c : value)
      if ((c < 0x20 && c != '\t') || c == 0x7f) return refuse(400, where + " holds a control character in its value");
    if (same_word(name, "host")) {
      ++hosts;
    } else if (same_word(name, "content-length")) {
      ++lengths;
      length = value;
    } else if (same_word(name, "transfer-encoding")) {
      has_encoding = true;
      encodings = value;  // several lines: the last one's last coding decides below
    } else if (same_word(name, "connection")) {
      close_asked = close_asked || list_has(value, "close");
    }
  }

  if (method != "GET" && method != "HEAD")
    return refuse(405, "method " + shown(method) + " is not served here, only GET and HEAD (the metrics are at GET /metrics)");
  if (http11 ? hosts != 1 : hosts > 1)
    return refuse(400, std::string(http11 ? "an HTTP/1.1 request needs exactly one Host header" : "more than one Host header") +
                           ": " + std::string(kExample));
  request r;
  if (has_encoding) {
    if (lengths > 0) return refuse(400, "Content-Length and Transfer-Encoding together: send neither (GET /metrics has no body)");
    if (!http11) return refuse(400, "Transfer-Encoding in an HTTP/1.0 request: send GET /metrics without a body");
    if (same_word(last_item(encodings), "chunked"))
      return refuse(413, "a chunked request body is not read here: send GET /metrics without a body");
    return refuse(501, "Transfer-Encoding '" + shown(encodings) + "' is not implemented: send GET /metrics without a body");
  }
  if (lengths > 1) return refuse(400, "Content-Length more than once: send GET /metrics without a body");
  if (lengths == 1) {
    if (length.empty() || length.find_first_not_of("0123456789") != std::string_view::npos)
      return refuse(400, "Content-Length '" + shown(length) + "' is not a decimal number: send GET /metrics without a body");
    std::uint64_t n = 0;
    for (const char c : length) {
      n = n * 10 + static_cast<std::uint64_t>(c - '0');
      if (n > kMaxBody)
        return refuse(413, "a request body over " + std::to_string(kMaxBody) + " bytes is not read here: send GET /metrics without a body");
    }
    r.body = static_cast<std::size_t>(n);
  }

  // The target: origin-form (/path?query) or absolute-form
  // (http://host/path?query), which a server must accept (RFC 9112 3.2.2).
  std::string_view path = target;
  if (path.front() != '/') {
    std::size_t after = 0;
    if (same_word(path.substr(0, 7), "http://")) after = 7;
    else if (same_word(path.substr(0, 8), "https://")) after = 8;
    else return refuse(400, "the target '" + shown(target) + "' is not a path starting with '/': ask for /metrics");
    const auto slash = path.find('/', after);
    path = slash == std::string_view::npos ? std::string_view("/") : path.substr(slash);
  }
  path = path.substr(0, path.find('?'));
  r.raw_path = std::string(path);
  for (std::size_t i = 0; i < path.size(); ++i) {
    if (path[i] != '%') {
      r.path += path[i];
      continue;
    }
    const int hi = i + 2 < path.size() ? hex_value(path[i + 1]) : -1, lo = hi >= 0 ? hex_value(path[i + 2]) : -1;
    if (lo < 0 || (hi == 0 && lo == 0))
      return refuse(400, "a bad percent-escape in the path (% and two hex digits, not %00): ask for /metrics");
    r.path += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  r.head_only = method == "HEAD";
  r.keep_alive = http11 && !close_asked;
  return r;
}

const char* reason_phrase(int status) {
  switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 505: return "HTTP Version Not Supported";
    default: return "Unknown";
  }
}

}  // namespace shmbox_cli::http
