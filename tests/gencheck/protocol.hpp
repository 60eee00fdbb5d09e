// tests/gencheck/protocol.hpp - what the generative checker's driver and its
// role processes share: the messages the producers post, the ledger in a
// memfd where a producer records each post before and after the call, and
// the command lines the driver sends to the roles (roles.cpp answers them).
//
// A message is (producer, seq): the producer is the driver's number for one
// producer process (an incarnation: a restarted producer is a new one), seq
// counts its posts from 0. Its bytes: producer (4), seq (4), a check word
// (8), then a pattern of (producer, seq) up to its size, so that a torn,
// mixed-up or invented message is seen by whoever receives it.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

#include "shmbox/types.hpp"

namespace gencheck {

struct msg_id {
  std::uint32_t prod = 0;
  std::uint32_t seq = 0;
  friend auto operator<=>(const msg_id&, const msg_id&) = default;
};

inline std::string to_string(msg_id m) { return "p" + std::to_string(m.prod) + "#" + std::to_string(m.seq); }

constexpr std::size_t kHeader = 16;  // producer, seq, check word

inline std::uint64_t mix(std::uint64_t x) {  // splitmix64's finaliser
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
inline std::uint64_t check_word(msg_id m) { return mix((std::uint64_t{m.prod} << 32) | m.seq); }
inline char pattern_byte(msg_id m, std::size_t i) { return static_cast<char>((check_word(m) >> (i % 7 * 8)) + i); }

// The bytes of message m, `size` long (at least kHeader).
inline std::string encode(msg_id m, std::size_t size) {
  std::string b(size < kHeader ? kHeader : size, '\0');
  const std::uint64_t c = check_word(m);
  std::memcpy(b.data(), &m.prod, 4);
  std::memcpy(b.data() + 4, &m.seq, 4);
  std::memcpy(b.data() + 8, &c, 8);
  for (std::size_t i = kHeader; i < b.size(); ++i) b[i] = pattern_byte(m, i);
  return b;
}

// The message these bytes are, or nullopt when they are not one of ours
// intact (torn, truncated, invented).
inline std::optional<msg_id> decode(std::string_view b) {
  if (b.size() < kHeader) return std::nullopt;
  msg_id m;
  std::uint64_t c = 0;
  std::memcpy(&m.prod, b.data(), 4);
  std::memcpy(&m.seq, b.data() + 4, 4);
  std::memcpy(&c, b.data() + 8, 8);
  if (c != check_word(m)) return std::nullopt;
  for (std::size_t i = kHeader; i < b.size(); ++i)
    if (b[i] != pattern_byte(m, i)) return std::nullopt;
  return m;
}

// The ledger: one record per producer process, in a memfd that every role
// maps. A producer stores `attempt` = seq + 1 before it calls post and
// `status`, `evicted`, then `done` = seq + 1 after the call returns: a
// process killed with attempt != done was inside the call (in flight).
constexpr std::uint32_t kMaxProducers = 1u << 14;  // producer processes per run
struct ledger_record {
  std::atomic<std::uint64_t> attempt;
  std::atomic<std::uint64_t> done;
  std::atomic<std::uint32_t> status;  // shmbox::post_status of the post `done` names
  std::atomic<std::uint32_t> evicted;
};
struct ledger {
  ledger_record prod[kMaxProducers];
};

// Commands (one line each; the answer is one line, or one per post):
//   producer:  post LANE SEQ PRIO TIMEOUT_MS SIZE   -> "r SEQ STATUS EVICTED"
//              resize LANE LIMIT                    -> "z ok BEFORE AFTER DROPPED" | "z error WHAT"
//              exit
//   owner:     recv MAX TIMEOUT_MS   (receive_batch)   -> "g STATUS N MSG..."
//              try                   (try_receive)     -> "g STATUS N MSG..."
//              read MAX TIMEOUT_MS   (read, uncommitted) -> "g STATUS N MSG..."
//              commit                               -> "c STATUS LOST"
//              stash K   (stash message K of the last answer) -> "s STATUS"
//              unstash                              -> "u N"
//              exit      (releases the box: the heir takes it)
// A MSG is LANE:PROD:SEQ:FLAG (FLAG 1: redelivered), or "torn:LANE:BYTES".
// Roles print "ready ENTRY" (producer), "enlisted POS" (heir), "owned EPOCH
// REASON" (owner, heir once it has the box) or "error WHAT" first.

}  // namespace gencheck
