// bridge/bridge_status.hpp - the NATS bridge's counters, where `shmbox stat`
// finds them: a small shared-memory segment per bridged box and direction,
// /dev/shm/shmbox-bridge.BOX.ROLE, written by the bridge that works the box
// (an export bridge that owns it, or the import bridge), read by anyone it
// lets read it. Needs no NATS: the CLI reads it, bridge/bridge.cpp writes it.
//
// Trust (lib/base/shm_file.hpp, THE TRUST RULE T3): the name is one any
// local user may take first. The bridge makes the segment writable by its
// own uid only and adopts an existing one only when it is its own uid's and
// nobody else may write it, else it does not start; a reader shows a status
// for box B only when its owner is B's owner, the reader's uid or root, and
// nobody else may write it.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace shmbox_cli {

struct bridge_status_segment;  // bridge/status_layout.hpp

enum class bridge_role : std::uint32_t { export_ = 1, import_ = 2 };
std::string_view to_string(bridge_role r) noexcept;  // "export", "import"

// The counters, in segment order (the names are the JSON keys and, with
// shmbox_bridge_ and _total, the Prometheus families).
enum class bridge_counter : std::uint32_t {
  published,       // publishes sent (republishes included)
  acked,           // export: messages JetStream acknowledged (then committed in the box)
  publish_errors,  // export: publishes refused, failed or not acknowledged in time (published again)
  dedupe_hits,     // export: acknowledgements that said "duplicate" (a republish JetStream already had)
  redeliveries,    // export: messages read flagged redelivered (a bridge died holding them);
                   // import: messages JetStream delivered more than once
  remote_drops,    // import: messages an export delivered into the stream that never reached this box (gaps in
                   // a source lane's ordinals: memory storage lost, discard old, max age, a deleted stream);
                   // before a source's first message, gaps in the stream sequence
  imported,        // import: messages posted into the box (stored, or dropped by its policy), then acked; once each
  naks,            // import: messages refused by the box (full under reject, block timeout) and nak'ed
  local_drops,     // import: of imported, messages the box's drop-newest / drop-oldest policy dropped
  // publish_errors by cause (their sum is publish_errors):
  publish_unsent,    // export: publishes that could not be sent (no server, disconnected, too many pending)
  publish_refused,   // export: publishes JetStream answered with an error (stream full under discard new, stream missing)
  ack_timeouts,      // export: publishes sent and not acknowledged within --ack-timeout
  fetch_errors,      // import: fetches that failed (no server, consumer or stream missing), not counting empty ones
  reconnects,        // both: connections to NATS lost and made again
  stream_recreated,  // export: the stream had disappeared and --create-stream made it again
  durable_recreated, // import: the durable consumer had disappeared and was made again
  duplicates,        // import: messages delivered again that were posted already (acked, not posted twice)
  uncertain_posts,   // import: a killed import's post in flight whose outcome could not be learned (posted again)
  resyncs,           // import: deliveries lost on the way (a fetch's reply, a consumer leader's failover): durable made again
  count_
};
inline constexpr std::uint32_t kBridgeCounters = static_cast<std::uint32_t>(bridge_counter::count_);
std::string_view to_string(bridge_counter c) noexcept;
// Whether a bridge of role `r` ever counts `c` (stat and metrics show only those).
bool counts(bridge_role r, bridge_counter c) noexcept;

// What the working bridge is doing now (the status segment's `state`).
enum class bridge_state : std::uint32_t {
  starting,          // connecting, checking the stream, waiting for the box
  connected,         // working
  reconnecting,      // the connection to NATS is lost; nats.c reconnects (bounded backoff)
  stream_missing,    // the stream is gone (import: waits for it a while, then exits 1)
  consumer_missing,  // import: the durable is gone (re-created at once)
  stopped,           // exited (cleanly or with an error: see last_error)
  count_
};
std::string_view to_string(bridge_state s) noexcept;  // "connected", "stream_missing", ...
// One line of help per counter (Prometheus HELP, docs/across-hosts.md).
std::string_view help(bridge_counter c) noexcept;

// What a reader sees.
struct bridge_info {
  bridge_role role = bridge_role::export_;
  std::uint32_t pid = 0;     // the bridge working the box, as it saw itself (0: none yet)
  bool alive = false;        // a bridge holds the segment's write lock now (in any pid namespace)
  std::uint64_t started_unix_ns = 0;
  std::string nats, stream, subject, durable;  // as the working bridge was started (credentials removed)
  std::uint64_t counters[kBridgeCounters] = {};
  bridge_state state = bridge_state::starting;
  std::uint64_t state_unix_ns = 0;  // since when
  std::string last_error;           // empty: none
  std::uint64_t error_unix_ns = 0;
};

// The bridges of box `box` (export, import), those whose segment exists.
// A file at a status path that is not a bridge's (a FIFO, a link, a
// directory..., or a wrong magic number) is skipped, never waited on nor
// followed, with a sentence in `problems` (if given) saying what it is; so
// is one the trust rule refuses (T3): its owner is not `box_uid` (the box
// segment's owner), this process's uid or root, or someone else may write
// it (g+w, o+w). Each sentence is one segment not shown. The segment is
// read through a private copy (pread), never mapped: a truncation under
// the reader costs that one status, never a SIGBUS (T5).
std::vector<bridge_info> read_bridges(std::string_view box, std::uint32_t box_uid, std::vector<std::string>* problems = nullptr);

// The boxes that have something at a bridge status path (one scan of
// /dev/shm): a tool that looks at many boxes calls read_bridges only for
// these. Empty if /dev/shm cannot be read (read_bridges then says nothing
// either way: call it for every box).
std::optional<std::set<std::string>> boxes_with_bridge_status();

// Removes the box's bridge status segments, if any (`shmbox rm`).
void remove_bridge_status(std::string_view box);

// The writer's side (bridge/bridge.cpp).
class bridge_status {
 public:
  // Creates /dev/shm/shmbox-bridge.BOX.ROLE (mode 0600 plus the read bits
  // of `mode`, the box's: no one but this uid may write it), or adopts the
  // one there when it is this uid's and nobody else may write it (T3); a
  // file of another uid, or one others may write, is refused: nullopt with
  // `error` saying what it is, whose, and to remove it. Counters and records
  // survive a bridge's restart (a standby continues them).
  static std::optional<bridge_status> open(std::string_view box, bridge_role role, std::uint32_t mode, std::string& error);
  bridge_status(bridge_status&&) noexcept;
  bridge_status& operator=(bridge_status&&) = delete;
  ~bridge_status();
  // Marks this process as the working bridge: takes the segment's lock
  // (waiting for none: an active bridge and its standby do not overlap, the
  // box's ownership orders them), writes pid, start time and the settings.
  // `exclusive`: false (writing nothing) when another process holds the lock
  // (a second import into the same box); `holder` is then its pid as
  // written, and `read_lock` whether what is held is a read lock (no bridge
  // takes one: a process that may read the segment holds it). Not exclusive
  // (an export, ordered by the box's ownership): works on without the lock
  // when it is held (by the export that had the box, still exiting, or a
  // reader's read lock): locked() is false until relock() gets it.
  bool activate(std::string_view nats, std::string_view stream, std::string_view subject, std::string_view durable,
                bool exclusive = false, std::uint64_t* holder = nullptr, bool* read_lock = nullptr);
  bool locked() const noexcept { return locked_; }  // holds the lock: readers see it alive
  bool relock() noexcept;                           // activated and not locked(): tries the lock again; locked()
  // The state now, and since when; set only on a change (returns whether it
  // changed) and only once activated (a standby writes nothing).
  // set_error too.
  bool set_state(bridge_state s) noexcept;
  bridge_state state() const noexcept;
  // The last error met (display, cut to 255 bytes), with the time now.
  void set_error(std::string_view what) noexcept;

  // ---- the import's record (status_layout.hpp): exactly once across its crashes.
  // Values read back are this uid's own (open() adopts nothing else: T3),
  // from an earlier run, and still bounded before use (bound_sequences,
  // bound_ordinals; recovery's producer entry is taken back only when the
  // box says it is a dead producer's with that attach time).
  struct source_id {
    std::uint64_t box = 0, lane = 0, position = 0;  // box 0: none (a message without a shmbox id)
    std::uint64_t next_ordinal = 0;                 // its Shmbox-Ordinal + 1 (0: it carries none)
  };
  struct post_intent {
    source_id src;
    std::uint64_t stream_seq = 0;
    std::uint32_t lane = 0;  // of the box posted into
    std::uint64_t stored_before = 0, refused_before = 0;
    std::uint64_t imported_before = 0;  // the imported counter before the post
    std::uint64_t drops_before = 0;     // the remote_drops counter before it
    std::uint64_t gap = 0;              // messages lost before this one (remote_drops once it is done with)
  };
  struct import_recovery {
    std::uint64_t entry = 0, attached_ns = 0;  // the last import's producer entry (attached_ns 0: none)
    bool posting = false;                      // it died with a post in flight: `intent`
    bool done = false;                         // ... and that message was done with (finish() had begun)
    post_intent intent;
  };
  import_recovery recovery() const noexcept;
  void set_entry(std::uint32_t entry, std::uint64_t attached_ns) noexcept;
  // Before a post: the intent, then posting = 1 (release). After it: finish
  // (when the message is done with) or end_post (when it comes back).
  void begin_post(const post_intent& i) noexcept;
  // The message of the intent is done with: done = 1, then remote_drops +=
  // gap and imported += 1 (`imported`), each unless it moved since the
  // intent, the cursor, the sequences; then end_post. Also what a restarted
  // import does for a dead one's post that landed.
  void finish(const post_intent& i, bool imported) noexcept;
  void end_post() noexcept;
  // The source's (box, lane) highest position posted and the ordinal expected
  // next (0: none known); false: no cursor.
  bool cursor(std::uint64_t box, std::uint64_t lane, std::uint64_t& position, std::uint64_t& next_ordinal) const noexcept;
  void advance(const source_id& src) noexcept;
  std::uint64_t last_stream_seq() const noexcept;  // the highest sequence seen (remote_drops: gaps above it)
  void set_last_stream_seq(std::uint64_t seq) noexcept;
  std::uint64_t posted_seq() const noexcept;  // the highest sequence done with (posted, dropped, terminated)
  void set_posted_seq(std::uint64_t seq) noexcept;
  std::uint64_t stream_created_ns() const noexcept;
  // A stream made again (another creation time): its sequences start over,
  // so last_stream_seq and posted_seq go back to `base`.
  void set_stream(std::uint64_t created_ns, std::uint64_t base) noexcept;
  // The record's sequences against what JetStream proves: the import can
  // have handled no sequence beyond the stream's last one (`stream_last`).
  // A record that says it did (written over, or another stream's that kept
  // its key) is not used: its sequences go back to `base` (the durable's
  // ack floor: a message posted but not acked may be posted again), its
  // source cursors are cleared, and the sentence saying so is returned
  // ("" when the record is within bounds).
  std::string bound_sequences(std::uint64_t stream_last, std::uint64_t base, std::string_view stream);
  // ---- the export's ordinals (status_layout.hpp: export record).
  // The ordinal of lane `lane`'s next message, whose position is
  // `first_position` (the first message of the lane this batch): resolves a
  // commit a dead export left in flight.
  std::uint64_t lane_ordinal(std::uint32_t lane, std::uint64_t first_position) noexcept;
  // Around the box's commit of a batch, per lane in it: `after` the lane's
  // ordinal once committed, `first_position` its first message's position.
  void begin_commit(std::uint32_t lane, std::uint64_t after, std::uint64_t first_position) noexcept;
  void end_commit(std::uint32_t lane) noexcept;
  // The record's ordinals against what the box proves (call once, owning the
  // box): a lane's ordinal counts messages the box delivered, so it is at
  // most the lane's `delivered` counter (`delivered[l]`, `lanes` of them).
  // A commit in flight whose `after` is beyond it was not made (cleared);
  // an ordinal beyond it (written over, or the record of a box made again
  // under this name) is not used: the lane numbers from 0 again (the import
  // takes a lower ordinal for a count started over: nothing counted lost),
  // and the sentence saying so is returned ("" when all are within bounds).
  std::string bound_ordinals(const std::uint64_t* delivered, std::uint32_t lanes, std::string_view box);

  void add(bridge_counter c, std::uint64_t n = 1) noexcept;
  std::uint64_t get(bridge_counter c) const noexcept;
  const std::string& path() const noexcept { return path_; }  // "/dev/shm/shmbox-bridge.BOX.ROLE"

 private:
  bridge_status() = default;
  bridge_status_segment* p_ = nullptr;  // the segment's layout: bridge/status_layout.hpp
  int fd_ = -1;
  bool active_ = false;  // activate()d: this process is the working bridge
  bool locked_ = false;  // holds the write lock on byte 0 (readers: alive)
  std::string path_;
};

// "nats://user:secret@host:4222" -> "nats://host:4222" (what is shown and stored).
std::string without_credentials(std::string_view url);

}  // namespace shmbox_cli
