// tools/commands.hpp - the shmbox commands that live in their own files, and
// what those files share.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <system_error>
#include <vector>

#include "bridge_status.hpp"
#include "cli_args.hpp"
#include "shmbox/box.hpp"
#include "shmbox/inspect.hpp"
#include "shmbox/owner.hpp"
#include "shmbox/pool.hpp"
#include "shmbox/producer.hpp"

namespace shmbox_cli {

// ---- tools/shmbox.cpp ---------------------------------------------------------

// Says shmbox::explain(ec) (one line on stderr); returns kExitFail.
int fail(const std::error_code& ec);
// "0600".
std::string octal(std::uint32_t mode);
// The box options of `shmbox create` (and of each member box of `shmbox pool
// create`): geometry, policy, lanes (all of `capacity` and `policy`), mode,
// producers, block timeout, lease, spin, dead letters. Validated by the parser.
shmbox::options box_options(const create_args& a);
// Posts each of `messages`, or with none each line of stdin, into `box`
// through `producer`; a message not stored gets a line on stderr. Returns
// kExitOk, kExitRefused (some were refused: full, dropped, timeout) or
// kExitFail (too large, or the box cannot be used).
int post_messages(shmbox::Producer& producer, const std::string& box, const std::vector<std::string>& messages,
                  const shmbox::post_options& how);

// ---- tools/request_cmds.cpp ---------------------------------------------------

// `shmbox ask NAME [MESSAGE...]`: each message (or line of stdin) a request;
// prints each reply on a line, in request order. kExitRefused if a request
// was refused or got no reply in time (a line on stderr says which).
int cmd_ask(const ask_args& a);
// `shmbox recv --reply-with CMD`: answers request i of `batch` (read, not yet
// committed) with CMD's output; a request that an owner which died had
// answered already is not run again. false (a line on stderr) when CMD could
// not be run or the reply could not be sent; the request is committed all
// the same (its requester got, or will get, a status for it).
bool answer_request(shmbox::Owner& owner, const shmbox::batch& batch, std::size_t i, const std::string& box,
                    const std::string& cmd);

// ---- tools/views.cpp ----------------------------------------------------------

// `shmbox stat NAME`: the box's state and counters (text, --json, or
// --prometheus with metrics.cpp's text).
int cmd_stat(const std::string& name, bool as_json, bool prometheus);
// `shmbox ls`: one row per segment (every box, and what is not one). On a
// terminal (not `plain`) the rows fit its width: a long name is cut in the
// middle; otherwise every name is in full and no row is cut or wrapped.
int cmd_ls(bool as_json, bool plain);
// Every segment named like a box (/dev/shm/shmbox.*), inspected read-only:
// its figures, or why it cannot be read (error, and explain(error) taken at
// once). Those removed between the listing and the reading are left out. What
// `shmbox ls` and `shmbox metrics` show; list_error: /dev/shm not listed.
struct listed_box {
  std::string name;
  std::optional<shmbox::box_info> info;
  std::error_code error;
  std::string sentence;
};
std::vector<listed_box> inspect_all_boxes(std::error_code& list_error);
// `shmbox heirs NAME`: the box's registered heirs.
int cmd_heirs(const std::string& name, bool as_json);
// A box's last transfer of ownership, one line ("none" if it never changed hands).
std::string transfer_text(const shmbox::transfer_record& t);
// Its capacity, saying what is per lane: "32 messages" (one lane), "32 per
// lane x 2 lanes = 64 messages", "96 messages in all (per lane: 32, 64)".
std::string capacity_text(const shmbox::box_info& i);
// "N messages per producer" for a box whose lanes have a quota ("" none).
std::string quota_text(const shmbox::box_info& i);

// ---- tools/box_ops.cpp --------------------------------------------------------

// `shmbox rm NAME` (its bridges' status segments go with it), `shmbox verify
// NAME`, `shmbox gc`, `shmbox dump NAME`, `shmbox resize NAME`, `shmbox
// give-away NAME`. Each returns the exit code.
int cmd_rm(const std::string& name);
int cmd_verify(const std::string& name, bool as_json);
int cmd_gc(const parsed& a);
int cmd_dump(const parsed& a);
int cmd_resize(const parsed& a);
int cmd_give_away(const parsed& a);

// ---- tools/watch.cpp ----------------------------------------------------------

// `shmbox watch NAME`: a live view until q, Ctrl-C, SIGTERM or --count
// refreshes; a line per refresh when stdout is not a terminal.
int cmd_watch(const parsed& a);

// ---- tools/live_view.cpp ------------------------------------------------------

// The width of the terminal on stdout; `fallback` when it does not say.
std::size_t terminal_columns(std::size_t fallback);

// write(2) all of [p, p + n) to `fd`: a write cut short (a signal, a full
// pipe taking part of it) is completed, EINTR retried (also from a signal
// handler: async-signal-safe). false on an error (errno set).
bool write_all(int fd, const char* p, std::size_t n);

// One line of a full-screen frame.
struct view_line {
  std::string text;
  const char* attr = nullptr;  // SGR for the whole line (bold, reverse), or none
};

// What a live view shows (`shmbox watch`, `shmbox pool watch`); the loop,
// the terminal, the keys and the signals are run_live_view's.
class live_view {
 public:
  virtual ~live_view() = default;
  virtual std::string header(std::uint32_t interval_ms) = 0;  // plain mode: the '#' line, with its '\n'
  virtual void refresh() = 0;                                 // takes a new sample
  virtual std::string line() = 0;                             // plain mode: the last sample, one line with its '\n'
  virtual std::vector<view_line> frame(std::uint32_t interval_ms, bool utf8) = 0;  // full screen: the last sample
};

// Runs `view` until q, Ctrl-C, SIGTERM or w.count refreshes: full screen on a
// terminal (unless w.plain), else a line per refresh. Returns the exit code.
int run_live_view(live_view& view, const watch_args& w);

// Helpers of the views.
std::string utc_stamp(std::chrono::system_clock::time_point t);  // "2026-11-24T11:39:35.123Z"
// The bold first line of a frame: `title` left, local time and interval right, 79 columns.
std::string title_line(const std::string& title, std::chrono::system_clock::time_point when, std::uint32_t interval_ms);
std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));  // snprintf into a string (512 bytes at most)
std::string printable(const std::string& s);  // text from a segment made safe for a terminal
// [#####.....]: depth/capacity in `width` cells (eighths of a cell in UTF-8).
std::string bar(std::uint64_t depth, std::uint32_t capacity, unsigned width, bool utf8);
// (now - before) / seconds; 0 for a counter that went backwards.
double per_second(std::uint64_t now, std::uint64_t before, double seconds);
std::string rate_string(double per_second);  // "1500", "2.5", "0"

// ---- tools/metrics.cpp --------------------------------------------------------

// The box's figures in the Prometheus text exposition format (version 0.0.4):
// one metric family per counter, labelled by box and lane.
std::string prometheus_text(const shmbox::box_info& info);
// The box's NATS bridges (bridge_status.hpp): shmbox_bridge_info and one
// shmbox_bridge_<counter>_total family per counter, labelled by role; "" when
// the box has none.
std::string prometheus_bridge_text(const std::string& box, const std::vector<bridge_info>& bridges);
// The pool's gauges and counters, the same way: one family each, labelled by pool.
std::string prometheus_pool_text(const shmbox::pool_info& info);
// One exposition for every box (with its bridges) and pool on this machine
// that the caller can read: the families above, each once, and
// shmbox_metrics_{exported,unreadable}_segments by kind. A segment that cannot
// be read is skipped, with a line ("warning: ...") added to `warnings`.
// list_error: /dev/shm could not be listed (the text is then "").
std::string metrics_exposition(std::vector<std::string>& warnings, std::error_code& list_error);
// `shmbox metrics`: metrics_exposition() on stdout, its warnings on stderr;
// with `listen` ("ADDR:PORT", checked by the parser) cmd_metrics_listen().
// Returns the exit code.
int cmd_metrics(const std::string& listen);

// ---- tools/metrics_http.cpp ---------------------------------------------------

// `shmbox metrics --listen ADDR:PORT`: serves metrics_exposition() on GET
// /metrics until SIGTERM or SIGINT (exit 0), with every request, connection
// and answer bounded (the file's header lists the bounds); prints
// "listening on http://ADDR:PORT/metrics" (the real port when PORT is 0)
// once bound, after a warning on stderr when ADDR is every address (0,
// 0.0.0.0, ::). Exit 1 when the address cannot be bound.
int cmd_metrics_listen(const std::string& listen);

// Every counter of shmbox::pool_counters, in order, once: its key ("takes";
// the JSON key, the stat line, shmbox_pool_<key>_total), what it counts, the field.
struct pool_counter_field {
  const char* key;
  const char* help;
  std::uint64_t shmbox::pool_counters::*field;
};
std::span<const pool_counter_field> pool_counter_fields();

// ---- tools/pool_cmds.cpp ------------------------------------------------------

// `shmbox pool create|run|ls|stat|watch|rm|take`.
int cmd_pool(const parsed& a);
// Every pool segment (/dev/shm/shmbox-pool.*), inspected, as inspect_all_boxes
// does boxes (`shmbox pool ls`, `shmbox metrics`).
struct listed_pool {
  std::string name;
  std::optional<shmbox::pool_info> info;
  std::error_code error;
  std::string sentence;  // explain(error), taken at once: explain() keeps only this thread's last sentence
};
std::vector<listed_pool> inspect_all_pools(std::error_code& list_error);
// Member box name -> pool name, for every pool that can be inspected now.
std::map<std::string, std::string> pool_of_boxes();

}  // namespace shmbox_cli
