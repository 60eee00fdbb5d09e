// tests/adversary/attacker.hpp - the second user: `shmbox-adversary attack`, run
// as uid 65534 (setpriv) when the suite runs as root (adversary.hpp).
//
//   attack --seed S --ms T [targets] [--actions a,b,...]
//   attack --probe            prints "uid N" (can this user run us?)
// Targets (each may repeat):
//   --plant CLASS:ENTRY   a /dev/shm entry root derives (CLASS: box, dl,
//                         member, reply, pool, bridge, bell): plant a file of
//                         a kind the class allows there, or take ours away
//   --plant-next PREFIX   pool member boxes "PREFIX<index>.<generation>": the
//                         names in /dev/shm say each member's generation (even
//                         of a 0600 pool), so plant at the next ones
//   --write ENTRY         a segment of root's that anyone may write (0666):
//                         truncate / flip its size, hold its bytes
//                         exclusively, write random bytes, rewrite its config
//   --write-prefix P      every entry starting with P, as found at the time
//                         (requesters' reply boxes, pool member boxes)
//   --read ENTRY          a segment it may only read: hold its bytes shared
//   --bell ENTRY          a doorbell (mode 0622): garbage, forged records, floods
//   --bell-box BOX        a box whose file a forged doorbell record names
//   --service BOX         a 0666 service box: forged requests of many kinds
//   --impersonate         forged requests may name root's live reply boxes
//   --victim BOX          root's 0600 canary: what hostile configs name
//                         (dead letters) and links point at
//   --link-target ENTRY   a segment of root's that links planted at a name may
//                         point at (default: the --write segments); a hard
//                         link (fs.protected_hardlinks: to a file we may read
//                         and write) is planted only by command ("plant ENTRY
//                         CLASS hardlink_root"): the sticky /dev/shm keeps us
//                         from removing it again, it is root's file
//   --http PORT           the exporter: malformed, slow and idle requests
// Actions: plant, truncate, lock, scribble, config, forge, http, bell (all
// that have targets, unless --actions says which). The choices come from
// the seed alone. Commands on stdin: "plant ENTRY CLASS" plants there now
// (a random kind) and answers "planted ENTRY KIND". At the end it lets go
// of its locks, puts sizes back, removes its plants (counting the posts
// others made into its boxes: foreign_posts.CLASS) and prints one line,
// "done seed=S actions=N <action>=N ... writes=N forge.<kind>=N ...".
//
// Its parts: attacker.cpp (the loop, the segment actions: truncate, lock,
// scribble, config; the options), attacker_plant.cpp (planting, forged
// requests), attacker_wire.cpp (HTTP, doorbells).
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "adversary.hpp"
#include "segment/envelope.hpp"

namespace adv::attack {

namespace env = shmbox::detail::envelope;

inline std::uint64_t now_ms() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<ms>(steady::now().time_since_epoch()).count());
}
inline void say(const std::string& line) {
  const std::string l = line + "\n";
  [[maybe_unused]] const ssize_t n = ::write(1, l.data(), l.size());
}
inline std::string path_of(const std::string& entry) { return "/dev/shm/" + entry; }

struct options {
  std::uint64_t seed = 1;
  long ms = 10000;
  std::vector<std::pair<std::string, std::string>> plant;  // (class, entry)
  std::vector<std::string> plant_next;                     // member box prefixes
  std::vector<std::string> write, write_prefix, read, bells, bell_boxes, link_targets;
  std::string service, victim;
  int http_port = 0;
  bool impersonate = false;
  std::set<std::string> actions;
};

// What we put at an entry.
struct plant {
  std::string cls, kind;
  dev_t dev = 0;
  ino_t ino = 0;
  std::string box;                      // a box (or pool) of ours: its name
  std::optional<shmbox::Owner> owner;   // held: a "live requester"
  std::uint64_t own_posts = 0;          // what we posted into it ourselves
  std::uint64_t since = 0;
};

struct http_conn {
  int fd = -1;
  std::uint64_t deadline = 0;  // answer (or close) expected by then; held connections: closed then
  bool held = false;           // idle / slow: ours to close
  std::size_t kind = 0;        // its request's index
  std::string got;
};

class attacker {
 public:
  explicit attacker(options o) : o_(std::move(o)), r_(o_.seed) {}
  int run();

 private:
  // -- the actions
  void act_plant();
  void act_truncate();
  void act_lock();
  void act_scribble();
  void act_config();
  void act_forge();
  void act_http();
  void act_bell();
  // -- planting
  std::string plant_at(const std::string& entry, const std::string& cls, std::string kind = "");
  bool unplant(const std::string& entry);
  std::vector<std::string> kinds_for(const std::string& cls) const;
  std::string make_box(const std::string& entry, plant& p, bool lookalike, unsigned mode, bool hold_owner);
  // -- helpers
  std::vector<std::string> writable();  // root's writable segments present now
  int open_root(const std::string& entry, int flags, struct stat* st);
  void upkeep(bool final);
  void commands();
  bool service_producer();

  options o_;
  rng r_;
  std::map<std::string, std::uint64_t> t_;
  std::map<std::string, plant> plants_;
  std::vector<std::string> reply_plants_;  // entries, oldest first
  std::vector<std::string> next_plants_;   // the same, at members' next generations
  struct held { int fd; std::uint64_t until; };
  std::vector<held> locks_;
  struct restore { std::string entry; ino_t ino; off_t size; std::uint64_t at; };
  std::vector<restore> restores_;
  std::map<ino_t, off_t> first_size_;
  std::vector<http_conn> http_;
  std::optional<shmbox::Box> svc_box_;
  std::optional<shmbox::Producer> svc_;
  std::uint64_t svc_retry_at_ = 0;
  bool stdin_open_ = true;
};

}  // namespace adv::attack
