// lib/segment/envelope.hpp - what a request and a reply carry besides their bytes
// (Requester, Owner::reply; docs/request-reply.md). Not installed.
//
// A REQUEST is an ordinary message whose last kRequestTrailer bytes are a
// trailer: the requester's token (its reply box is "<service>.r<token as 16
// hex digits>": the name is never read from the segment, so a request can
// only ever direct a reply into a reply box of the same service), the reply
// box's Box::id (a box made again under that name is another requester: its
// id differs), the requester's sequence number of the request (the
// correlation: the bytes are the same when the request is delivered again to
// an heir), a flags byte and a check word over all of it. The owner's
// receive recognises the trailer by its magic and check word and hands out
// the bytes before it (message::data) and the trailer apart
// (message::reply_to).
//
// THE ANSWERED MARK. An owner that replies to a request it has read and not
// yet committed (Owner::read, or inside receive_in_place) sets kAnswered in
// the trailer's flags byte, in the slot (or the stash entry: THE STASH, a
// priority box's store; not a lifo lane's), AFTER the reply is stored in the
// reply box. An heir that receives the request again (redelivered) sees the
// mark (message::answered) and Owner::reply sends nothing (already_replied).
// The window between the reply's store and the mark is a few instructions: an
// owner killed there leaves no mark, the heir replies again, and the
// requester drops the second reply for that sequence number (counted
// duplicate). Either way the requester sees exactly one reply. A mark on a
// message delivered for the first time is ignored (nobody answered it: a
// producer may have written it).
//
// A REPLY is a message in the reply box with a trailer of kReplyTrailer
// bytes: the service box's id, the request's lane and position (its
// message_id), the token and sequence number it answers, a check word and its
// own magic. The requester delivers the first reply for a sequence number it
// waits for and counts the rest (duplicate, late, stray).
//
// Everything here is read from shared memory that other processes write:
// parse() only reads inside [data, data + size) and says no to anything that
// does not check out; a forged trailer can at most cost its own request.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

namespace shmbox::detail {

constexpr std::uint64_t kRequestMagic = 0x5152'5842'4d48'5301ULL;  // "\x01SHMBXRQ" little-endian
constexpr std::uint64_t kReplyMagic = 0x5052'5842'4d48'5301ULL;    // "\x01SHMBXRP"
constexpr std::uint8_t kEnvelopeVersion = 1;
constexpr std::uint8_t kAnswered = 1;  // request flags: an owner replied (THE ANSWERED MARK)

// The request trailer, at the end of the payload (unaligned: memcpy only).
//   0 reply box id | 8 token | 16 seq | 24 version | 25 flags | 26 0 0 | 28 check | 32 magic
constexpr std::size_t kRequestTrailer = 40;
constexpr std::size_t kRequestFlagsAt = 25;
// The reply trailer.
//   0 service box id | 8 request position | 16 request lane | 20 version | 21 0 0 0 | 24 token |
//   32 seq | 40 check | 44 0 0 0 0 | 48 magic
constexpr std::size_t kReplyTrailer = 56;
// A reply box's name: the service's, ".r", 16 hex digits.
constexpr std::size_t kReplySuffix = 18;

struct request_envelope {
  std::uint64_t reply_box = 0;  // Box::id of the reply box
  std::uint64_t token = 0;      // the requester's (names its reply box)
  std::uint64_t seq = 0;        // the requester's correlation
  std::uint8_t flags = 0;
};

struct reply_envelope {
  std::uint64_t service_box = 0;
  std::uint64_t position = 0;
  std::uint32_t lane = 0;
  std::uint64_t token = 0;
  std::uint64_t seq = 0;
};

namespace envelope {

inline std::uint64_t load64(const std::byte* p) noexcept {
  std::uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
inline std::uint32_t load32(const std::byte* p) noexcept {
  std::uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
inline void store64(std::byte* p, std::uint64_t v) noexcept { std::memcpy(p, &v, 8); }
inline void store32(std::byte* p, std::uint32_t v) noexcept { std::memcpy(p, &v, 4); }

// A 32-bit mix of the words a trailer carries (not a MAC: it tells a trailer
// from bytes that happen to end in the magic, nothing more).
inline std::uint32_t check_of(std::uint64_t a, std::uint64_t b, std::uint64_t c, std::uint64_t d) noexcept {
  std::uint64_t h = 0x9e37'79b9'7f4a'7c15ULL;
  for (std::uint64_t w : {a, b, c, d}) {
    h ^= w + 0x9e37'79b9'7f4a'7c15ULL + (h << 6) + (h >> 2);
    h *= 0xbf58'476d'1ce4'e5b9ULL;
  }
  return static_cast<std::uint32_t>(h ^ (h >> 32));
}

// Bytes of the body when [data, data + size) ends in a request trailer; size
// when it does not. Cheap enough for every message: a length test and one
// 8-byte compare; the check word only when the magic matches.
inline std::size_t request_body(const std::byte* data, std::size_t size) noexcept {
  if (size < kRequestTrailer) return size;
  const std::byte* t = data + size - kRequestTrailer;
  if (load64(t + 32) != kRequestMagic) [[likely]]
    return size;
  const std::uint64_t version = static_cast<std::uint8_t>(t[24]);
  if (version != kEnvelopeVersion) return size;
  if (load32(t + 28) != check_of(load64(t), load64(t + 8), load64(t + 16), version)) return size;
  return size - kRequestTrailer;
}

// The trailer's fields; nullopt unless `t` (exactly kRequestTrailer bytes) is one.
inline std::optional<request_envelope> parse_request(std::string_view t) noexcept {
  if (t.size() != kRequestTrailer) return std::nullopt;
  const auto* p = reinterpret_cast<const std::byte*>(t.data());
  if (request_body(p, t.size()) != 0) return std::nullopt;
  return request_envelope{load64(p), load64(p + 8), load64(p + 16), static_cast<std::uint8_t>(p[kRequestFlagsAt])};
}

inline void append_request(std::string& out, const request_envelope& e) {
  std::byte t[kRequestTrailer] = {};
  store64(t, e.reply_box);
  store64(t + 8, e.token);
  store64(t + 16, e.seq);
  t[24] = std::byte{kEnvelopeVersion};
  t[kRequestFlagsAt] = std::byte{0};
  store32(t + 28, check_of(e.reply_box, e.token, e.seq, kEnvelopeVersion));
  store64(t + 32, kRequestMagic);
  out.append(reinterpret_cast<const char*>(t), sizeof t);
}

inline std::uint32_t reply_check(const reply_envelope& e) noexcept {
  return check_of(e.service_box ^ e.token, e.position, (std::uint64_t{e.lane} << 8) | kEnvelopeVersion, e.seq);
}

inline void append_reply(std::string& out, const reply_envelope& e) {
  std::byte t[kReplyTrailer] = {};
  store64(t, e.service_box);
  store64(t + 8, e.position);
  store32(t + 16, e.lane);
  t[20] = std::byte{kEnvelopeVersion};
  store64(t + 24, e.token);
  store64(t + 32, e.seq);
  store32(t + 40, reply_check(e));
  store64(t + 48, kReplyMagic);
  out.append(reinterpret_cast<const char*>(t), sizeof t);
}

// A reply's envelope and body length; nullopt for anything else.
inline std::optional<reply_envelope> parse_reply(std::string_view msg, std::size_t& body) noexcept {
  if (msg.size() < kReplyTrailer) return std::nullopt;
  const auto* t = reinterpret_cast<const std::byte*>(msg.data() + msg.size() - kReplyTrailer);
  if (load64(t + 48) != kReplyMagic || static_cast<std::uint8_t>(t[20]) != kEnvelopeVersion) return std::nullopt;
  reply_envelope e{load64(t), load64(t + 8), load32(t + 16), load64(t + 24), load64(t + 32)};
  if (load32(t + 40) != reply_check(e)) return std::nullopt;
  body = msg.size() - kReplyTrailer;
  return e;
}

// "<service>.r<token as 16 lowercase hex digits>"
inline std::string reply_box_name(std::string_view service, std::uint64_t token) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string n(service);
  n += ".r";
  for (int s = 60; s >= 0; s -= 4) n += kHex[(token >> s) & 0xf];
  return n;
}

}  // namespace envelope
}  // namespace shmbox::detail
