// tests/adversary/attacker.cpp - the second user: `shmbox-adversary attack`, run
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
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <set>

#include "adversary.hpp"
#include "segment/envelope.hpp"
#include "segment/layout.hpp"
#include "pool/pool_layout.hpp"

namespace adv {
namespace {

namespace env = shmbox::detail::envelope;

std::uint64_t now_ms() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<ms>(steady::now().time_since_epoch()).count());
}
void say(const std::string& line) {
  const std::string l = line + "\n";
  [[maybe_unused]] const ssize_t n = ::write(1, l.data(), l.size());
}
std::string path_of(const std::string& entry) { return "/dev/shm/" + entry; }

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

// ---------------------------------------------------------------------------
// segments of root's

std::vector<std::string> attacker::writable() {
  std::vector<std::string> out = o_.write;
  for (const auto& p : o_.write_prefix)
    for (const auto& e : shm_entries(p))
      if (!plants_.count(e)) out.push_back(e);
  return out;
}

// Opens root's segment `entry` as a regular file, never following a link
// or waiting; -1 if it is not one (or is one of ours).
int attacker::open_root(const std::string& entry, int flags, struct stat* st) {
  if (plants_.count(entry)) return -1;
  const int fd = ::open(path_of(entry).c_str(), flags | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return -1;
  if (::fstat(fd, st) != 0 || !S_ISREG(st->st_mode)) {
    ::close(fd);
    return -1;
  }
  return fd;
}

void attacker::act_truncate() {
  const auto w = writable();
  if (w.empty()) return;
  const std::string entry = r_.pick(w);
  struct stat st {};
  const int fd = open_root(entry, O_RDWR, &st);
  if (fd < 0) return void(++t_["truncate_refused"]);
  const off_t orig = first_size_.emplace(st.st_ino, st.st_size).first->second;
  const off_t sizes[] = {0, 1, 64, 4096, 8192, orig / 2, orig - 1, orig, orig + 4096};
  const off_t to = std::max<off_t>(0, sizes[r_.below(std::size(sizes))]);
  if (::ftruncate(fd, to) == 0) {
    ++t_["truncate"];
    if (!r_.chance(3)) restores_.push_back({entry, st.st_ino, orig, now_ms() + r_.below(300)});
  } else {
    ++t_["truncate_failed"];
  }
  ::close(fd);
}

void attacker::act_lock() {
  auto w = writable();
  const std::size_t n_write = w.size();
  w.insert(w.end(), o_.read.begin(), o_.read.end());
  if (w.empty()) return;
  const std::size_t i = static_cast<std::size_t>(r_.below(w.size()));
  const bool may_write = i < n_write;
  struct stat st {};
  const int fd = open_root(w[i], may_write ? O_RDWR : O_RDONLY, &st);
  if (fd < 0) return void(++t_["lock_refused"]);
  struct flock l {};
  l.l_whence = SEEK_SET;
  switch (r_.below(4)) {
    case 0: l.l_start = 0, l.l_len = 0; break;  // the whole file: every role byte at once
    case 1: l.l_start = 0, l.l_len = 1; break;  // the attach byte
    case 2: l.l_start = static_cast<off_t>(r_.below(256)), l.l_len = 1; break;
    default: l.l_start = static_cast<off_t>(r_.below(static_cast<std::uint64_t>(std::max<off_t>(1, std::min<off_t>(st.st_size, 2 << 20))))), l.l_len = 1;
  }
  l.l_type = may_write && !r_.chance(4) ? F_WRLCK : F_RDLCK;
  if (::fcntl(fd, F_OFD_SETLK, &l) != 0) {
    ++t_["lock_busy"];
    ::close(fd);
    return;
  }
  ++t_[l.l_type == F_WRLCK ? "lock_exclusive" : "lock_shared"];
  if (locks_.size() >= 24) {
    ::close(locks_.front().fd);
    locks_.erase(locks_.begin());
  }
  static constexpr std::uint64_t kHold[] = {5, 50, 300, 1500};
  locks_.push_back({fd, now_ms() + kHold[r_.below(4)]});
}

void attacker::act_scribble() {
  const auto w = writable();
  if (w.empty()) return;
  struct stat st {};
  const int fd = open_root(r_.pick(w), O_RDWR, &st);
  if (fd < 0 || st.st_size <= 0) {
    if (fd >= 0) ::close(fd);
    return void(++t_["scribble_refused"]);
  }
  const auto size = static_cast<std::uint64_t>(st.st_size);
  // Where: the first page (headers, owner record; mostly aligned words), the
  // rings and tables past a box's lane headers (its header stays whole, so
  // root's processes keep using the box), or anywhere.
  std::uint64_t lo = 0, hi = size;
  const unsigned where = static_cast<unsigned>(r_.below(3));
  if (where == 0) {
    hi = std::min<std::uint64_t>(size, 4096);
  } else if (where == 1) {
    shmbox::detail::segment_header h{};
    if (::pread(fd, &h, sizeof h, 0) == static_cast<ssize_t>(sizeof h) && h.magic == shmbox::detail::kMagic && h.lanes_offset < size)
      lo = h.lanes_offset + std::uint64_t{h.lane_count} * sizeof(shmbox::detail::lane_header);
    if (lo >= size) lo = 0;
  }
  static constexpr std::uint64_t kBursts[] = {1, 16, 256, 4096};
  const std::uint64_t n = kBursts[r_.below(4)];
  std::uint64_t writes = 0;
  for (std::uint64_t k = 0; k < n; ++k) {
    unsigned char b[16];
    std::size_t len = 8;
    std::uint64_t at = lo + r_.below(hi - lo);
    if (where == 0) at &= ~std::uint64_t{3};
    if (r_.chance(2)) {
      len = 1 + static_cast<std::size_t>(r_.below(16));
      for (auto& c : b) c = static_cast<unsigned char>(r_.next());
    } else {
      const std::uint64_t kValues[] = {0, 1, ~std::uint64_t{0}, 0x7fffffff, 0x80000000, size, size * 2, r_.below(1024), r_.next()};
      const std::uint64_t v = kValues[r_.below(std::size(kValues))];
      std::memcpy(b, &v, 8);
    }
    len = static_cast<std::size_t>(std::min<std::uint64_t>(len, size - at));  // never past the end: no growing
    if (::pwrite(fd, b, len, static_cast<off_t>(at)) > 0) ++writes;
  }
  ::close(fd);
  ++t_["scribble"];
  t_["writes"] += writes;
}

// Names the victim as the dead letters of a writable box (and turns its
// lanes drop-oldest, so that posts evict) or pool: what a writer of a 0666
// segment can do to what root's processes follow (T4).
void attacker::act_config() {
  if (o_.victim.empty()) return;
  const auto w = writable();
  if (w.empty()) return;
  const std::string entry = r_.pick(w);
  struct stat st {};
  const int fd = open_root(entry, O_RDWR, &st);
  if (fd < 0) return void(++t_["config_refused"]);
  const auto size = static_cast<std::uint64_t>(st.st_size);
  bool done = false;
  if (entry.rfind("shmbox-pool.", 0) == 0) {
    namespace d = shmbox::detail;
    const std::uint64_t at = d::kPoolConfigOffset + offsetof(d::pool_config, dead_letters);
    char name[128] = {};
    std::memcpy(name, o_.victim.data(), std::min<std::size_t>(o_.victim.size(), 127));
    done = at + sizeof name <= size && ::pwrite(fd, name, sizeof name, static_cast<off_t>(at)) == static_cast<ssize_t>(sizeof name);
  } else {
    shmbox::detail::segment_header h{};
    if (::pread(fd, &h, sizeof h, 0) == static_cast<ssize_t>(sizeof h) && h.config_offset + 256 <= size) {
      const auto len = static_cast<std::uint32_t>(o_.victim.size());
      done = ::pwrite(fd, &len, 4, static_cast<off_t>(h.config_offset)) == 4 &&
             ::pwrite(fd, o_.victim.data(), len, static_cast<off_t>(h.config_offset + 4)) == static_cast<ssize_t>(len);
      const auto policy = static_cast<std::uint32_t>(shmbox::policy::drop_oldest);
      for (std::uint32_t l = 0; l < std::min<std::uint32_t>(h.lane_count, shmbox::kMaxLanes); ++l) {
        const std::uint64_t at = h.lanes_offset + l * sizeof(shmbox::detail::lane_header) + offsetof(shmbox::detail::lane_header, policy);
        if (at + 4 <= size) [[maybe_unused]] const ssize_t n = ::pwrite(fd, &policy, 4, static_cast<off_t>(at));
      }
    }
  }
  ::close(fd);
  ++t_[done ? "config" : "config_failed"];
}

// ---------------------------------------------------------------------------
// planting

std::vector<std::string> attacker::kinds_for(const std::string& cls) const {
  std::vector<std::string> k{"fifo", "dangling", "dir", "socket", "garbage", "empty"};
  if (!o_.victim.empty()) k.push_back("link_victim");
  if (cls == "box" || cls == "dl" || cls == "member" || cls == "reply") {
    k.insert(k.end(), {"hostile_box", "lookalike_box"});
    if (!o_.link_targets.empty()) k.push_back("link_root");
  } else if (cls == "pool") {
    k.push_back("hostile_pool");
  } else if (cls == "bridge") {
    k.insert(k.end(), {"status_image", "status_image"});
  } else if (cls == "bell") {
    k.insert(k.end(), {"fifo_bell", "fifo_bell"});
    if (!o_.bells.empty()) k.push_back("link_bell");
  }
  return k;
}

// A box of ours at `entry` ("shmbox.NAME"): hostile (a tiny drop-oldest or
// lifo box, full, whose dead letters are the victim) or a lookalike of a
// requester's reply box (one lane, reject); its owner held when asked.
std::string attacker::make_box(const std::string& entry, plant& p, bool lookalike, unsigned mode, bool hold_owner) {
  const std::string name = entry.substr(7);
  shmbox::options o;
  o.mode = mode;
  if (lookalike) {
    o.capacity = 64;
    o.slot_size = 256;
  } else {
    o.capacity = static_cast<std::uint32_t>(1u << r_.below(3));
    o.slot_size = r_.chance(2) ? 64 : 4096;
    static constexpr shmbox::policy kPolicies[] = {shmbox::policy::drop_oldest, shmbox::policy::lifo, shmbox::policy::reject,
                                                   shmbox::policy::drop_newest, shmbox::policy::block};
    o.overflow = kPolicies[r_.below(5)];
    if (!o_.victim.empty()) o.dead_letters = o_.victim;
    o.dead_letter_refused = r_.chance(2) && !o.dead_letters.empty();
  }
  auto b = shmbox::Box::create(name, o);
  if (!b) return "box_failed";
  p.box = name;
  if (!lookalike) {
    if (auto pr = shmbox::Producer::attach(*b))
      for (std::uint32_t i = 0; i < o.capacity; ++i)
        if (shmbox::is_stored(pr->post("hostile filler", {.timeout = ms(0)}))) ++p.own_posts;
  }
  if (hold_owner) {
    if (auto ow = shmbox::Owner::acquire(*b)) p.owner.emplace(std::move(*ow));
  }
  return lookalike ? "lookalike_box" : "hostile_box";
}

std::string attacker::plant_at(const std::string& entry, const std::string& cls, std::string kind) {
  const std::string path = path_of(entry);
  if (kind.empty()) kind = r_.pick(kinds_for(cls));
  static constexpr unsigned kModes[] = {0600, 0644, 0666};
  const unsigned mode = kModes[r_.below(3)];
  plant p;
  p.cls = cls;
  p.since = now_ms();
  bool ok = false;
  if (kind == "fifo" || kind == "fifo_bell") {
    ok = ::mkfifo(path.c_str(), kind == "fifo_bell" ? 0622 : mode) == 0;
  } else if (kind == "link_victim") {
    ok = ::symlink(("/dev/shm/shmbox." + o_.victim).c_str(), path.c_str()) == 0;
  } else if (kind == "link_root") {
    ok = ::symlink(path_of(r_.pick(o_.link_targets)).c_str(), path.c_str()) == 0;
  } else if (kind == "link_bell") {
    ok = ::symlink(path_of(r_.pick(o_.bells)).c_str(), path.c_str()) == 0;
  } else if (kind == "hardlink_root") {
    ok = !o_.link_targets.empty() &&  // fs.protected_hardlinks: only to what we may read and write
         ::link(path_of(r_.pick(o_.link_targets)).c_str(), path.c_str()) == 0;
  } else if (kind == "dangling") {
    ok = ::symlink((path + ".gone").c_str(), path.c_str()) == 0;
  } else if (kind == "dir") {
    ok = ::mkdir(path.c_str(), 0755) == 0;
  } else if (kind == "socket") {
    const int s = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    if (s >= 0 && path.size() < sizeof a.sun_path) {
      std::memcpy(a.sun_path, path.c_str(), path.size() + 1);
      ok = ::bind(s, reinterpret_cast<const sockaddr*>(&a), sizeof a) == 0;
    }
    if (s >= 0) ::close(s);
    if (!ok && path.size() >= sizeof a.sun_path) kind = "fifo", ok = ::mkfifo(path.c_str(), mode) == 0;
  } else if (kind == "garbage" || kind == "empty" || kind == "status_image") {
    const int fd = ::open(path.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_NOFOLLOW | O_CLOEXEC, mode);
    if (fd >= 0) {
      std::string bytes;
      if (kind == "garbage") {
        static constexpr std::size_t kSizes[] = {1, 100, 3896, 4096, 8192, 65536};
        bytes.resize(kSizes[r_.below(std::size(kSizes))]);
        for (auto& c : bytes) c = static_cast<char>(r_.next());
      } else if (kind == "status_image") {  // bridge/status_layout.hpp, every counter hostile
        bytes.assign(3896, '\0');
        const std::uint64_t magic = 0x0145'4744'4952'4253ULL, pid = static_cast<std::uint64_t>(::getpid());
        const std::uint32_t version = 3, role = entry.size() > 7 && entry.substr(entry.size() - 7) == ".import" ? 2 : 1, state = 1;
        std::memcpy(bytes.data(), &magic, 8);
        std::memcpy(bytes.data() + 8, &version, 4);
        std::memcpy(bytes.data() + 12, &role, 4);
        std::memcpy(bytes.data() + 16, &pid, 8);
        std::memcpy(bytes.data() + 32, "nats://planted.example:4222", 27);
        for (int c = 0; c < 32; ++c) std::memcpy(bytes.data() + 800 + 8 * c, &kHostileValue, 8);
        std::memcpy(bytes.data() + 1056, &state, 4);
      }
      ok = bytes.empty() || ::write(fd, bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size());
      ::fchmod(fd, mode);
      ::close(fd);
    }
  } else if (kind == "hostile_box" || kind == "lookalike_box") {
    const bool lookalike = kind == "lookalike_box";
    kind = make_box(entry, p, lookalike, lookalike ? 0666 : mode, lookalike || r_.chance(2));
    ok = kind != "box_failed";
  } else if (kind == "hostile_pool") {
    shmbox::pool_options po;
    po.init_count = 0;
    po.max_count = 1;
    po.command = "exec /bin/true";
    po.mode = mode;
    if (!o_.victim.empty()) po.dead_letters = o_.victim;
    ok = shmbox::Pool::create(entry.substr(12), po).has_value();
  }
  if (!ok) {
    ++t_["plant_failed"];
    ++t_["plant_failed." + kind];
    return "failed";
  }
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) p.dev = st.st_dev, p.ino = st.st_ino;
  p.kind = kind;
  plants_[entry] = std::move(p);
  ++t_["plant"];
  ++t_["plant." + kind];
  return kind;
}

// Takes our plant at `entry` away (only if it is still the file we put
// there), counting what others posted into a box of ours.
bool attacker::unplant(const std::string& entry) {
  auto it = plants_.find(entry);
  if (it == plants_.end()) return false;
  plant& p = it->second;
  p.owner.reset();
  if (!p.box.empty() && p.kind != "hostile_pool") {
    if (auto b = shmbox::Box::inspect(p.box)) {
      const std::uint64_t posted = shmbox::info(*b).count.posted;
      if (posted > p.own_posts) t_["foreign_posts." + p.cls] += posted - p.own_posts;
    }
  }
  struct stat st {};
  const std::string path = path_of(entry);
  if (::lstat(path.c_str(), &st) == 0 && st.st_ino == p.ino && st.st_dev == p.dev && st.st_uid == ::geteuid()) {
    if (S_ISDIR(st.st_mode)) ::rmdir(path.c_str());
    else ::unlink(path.c_str());
  }
  plants_.erase(it);
  return true;
}

void attacker::act_plant() {
  if (!o_.plant_next.empty() && (o_.plant.empty() || r_.chance(2))) {
    // A member's next generations: "PREFIX<index>.<generation>" now, so
    // "PREFIX<index>.<generation + 1..3>" next (pool.cpp member_box_name).
    const std::string& prefix = r_.pick(o_.plant_next);
    const auto now = shm_entries(prefix);
    if (now.empty()) return;
    const std::string e = r_.pick(now);
    const auto dot = e.rfind('.');
    if (dot == std::string::npos || dot < prefix.size()) return;
    const std::uint64_t gen = std::strtoull(e.c_str() + dot + 1, nullptr, 10);
    const std::string next = e.substr(0, dot + 1) + std::to_string(gen + 1 + r_.below(3));
    struct stat st {};
    if (plants_.count(next) || ::lstat(path_of(next).c_str(), &st) == 0) return void(++t_["plant_occupied"]);
    if (plant_at(next, "member") == "failed") return;
    ++t_["plant_next"];
    next_plants_.push_back(next);
    while (next_plants_.size() > 64) {
      unplant(next_plants_.front());
      next_plants_.erase(next_plants_.begin());
    }
    return;
  }
  if (o_.plant.empty()) return;
  const auto& [cls, entry] = r_.pick(o_.plant);
  if (unplant(entry)) return void(++t_["unplant"]);
  struct stat st {};
  if (::lstat(path_of(entry).c_str(), &st) == 0) return void(++t_["plant_occupied"]);  // root's: the sticky /dev/shm keeps it
  plant_at(entry, cls);
}

// ---------------------------------------------------------------------------
// forged requests (lib/segment/envelope.hpp)

bool attacker::service_producer() {
  if (svc_) return true;
  if (now_ms() < svc_retry_at_) return false;
  svc_retry_at_ = now_ms() + 100;
  auto b = shmbox::Box::open(o_.service, {.any_owner = true});
  if (!b) return ++t_["forge_open_failed"], false;
  auto p = shmbox::Producer::attach(*b);
  if (!p) return ++t_["forge_attach_failed"], false;
  svc_box_.emplace(std::move(*b));
  svc_.emplace(std::move(*p));
  return true;
}

void attacker::act_forge() {
  if (o_.service.empty() || !service_producer()) return;
  std::vector<std::string> kinds{"plain", "bad_check", "bad_version", "no_box", "planted_fifo", "planted_link",
                                 "planted_dir", "planted_socket", "planted_garbage", "planted_empty", "hostile_box",
                                 "hostile_badid", "lookalike", "lookalike_dead", "lookalike_0600", "answered",
                                 "trailer_only", "largest", "short_magic", "zero", "ones"};
  if (!o_.victim.empty()) kinds.push_back("planted_victim_link");
  if (o_.impersonate) kinds.insert(kinds.end(), {"root_token", "root_token", "replay", "hardlink_reply"});
  const std::string kind = r_.pick(kinds);
  const std::size_t max = svc_->max_message_size();
  std::string body = "forged:" + kind;
  shmbox::detail::request_envelope e{r_.next(), r_.next(), r_.next() % 1000, 0};
  std::string msg;
  // A reply name of this service for a token of ours, with something planted there.
  auto plant_reply = [&](const std::string& what, unsigned mode = 0666) {
    const std::string entry = "shmbox." + o_.service + ".r" + env::reply_box_name("", e.token).substr(2);
    if (what == "lookalike_box" || what == "hostile_box") {
      plant p;
      p.cls = "reply";
      p.since = now_ms();
      p.kind = make_box(entry, p, what == "lookalike_box", mode, kind != "lookalike_dead");
      if (p.kind == "box_failed") return ++t_["plant_failed"], std::string();
      struct stat st {};
      if (::lstat(path_of(entry).c_str(), &st) == 0) p.dev = st.st_dev, p.ino = st.st_ino;
      if (auto b = shmbox::Box::inspect(p.box)) e.reply_box = b->id();
      plants_[entry] = std::move(p);
    } else if (plant_at(entry, "reply", what) == "failed") {
      return std::string();
    }
    reply_plants_.push_back(entry);
    while (reply_plants_.size() > 32) {
      unplant(reply_plants_.front());
      reply_plants_.erase(reply_plants_.begin());
    }
    return entry;
  };
  if (kind == "plain") {
    msg = body;
  } else if (kind == "bad_check" || kind == "bad_version" || kind == "answered") {
    env::append_request(msg, e);
    msg.insert(0, body);
    std::byte* t = reinterpret_cast<std::byte*>(msg.data() + msg.size() - shmbox::detail::kRequestTrailer);
    if (kind == "bad_check") t[28] ^= std::byte{1};
    if (kind == "answered") t[shmbox::detail::kRequestFlagsAt] = std::byte{shmbox::detail::kAnswered};
    if (kind == "bad_version") {
      t[24] = std::byte{2};
      env::store32(t + 28, env::check_of(e.reply_box, e.token, e.seq, 2));
    }
  } else if (kind.rfind("planted_", 0) == 0) {
    const std::string what = kind == "planted_link" ? "dangling" : kind == "planted_victim_link" ? "link_victim" : kind.substr(8);
    if (plant_reply(what).empty()) return;
    env::append_request(msg, e);
    msg.insert(0, body);
  } else if (kind == "hostile_box" || kind == "hostile_badid" || kind.rfind("lookalike", 0) == 0) {
    if (plant_reply(kind.rfind("lookalike", 0) == 0 ? "lookalike_box" : "hostile_box", kind == "lookalike_0600" ? 0600 : 0666).empty())
      return;
    if (kind == "hostile_badid") e.reply_box ^= 1;
    env::append_request(msg, e);
    msg.insert(0, body);
  } else if (kind == "trailer_only") {
    env::append_request(msg, e);
  } else if (kind == "largest") {
    env::append_request(msg, e);
    msg.insert(0, std::string(max > msg.size() ? max - msg.size() : 0, 'L'));
  } else if (kind == "short_magic") {
    env::append_request(msg, e);
    msg = std::string(body.size(), 'S') + msg.substr(1);
    msg.resize(39);
  } else if (kind == "zero" || kind == "ones") {
    const std::uint64_t v = kind == "zero" ? 0 : ~std::uint64_t{0};
    env::append_request(msg, {v, v, v, 0});
    msg.insert(0, body);
  } else if (kind == "hardlink_reply") {  // our token's reply name: a hard link to a reply box of root's (0666, as its service)
    std::vector<std::string> theirs;
    for (const auto& r : shm_entries("shmbox." + o_.service + ".r"))
      if (!plants_.count(r)) theirs.push_back(r);
    if (theirs.empty()) return;
    const std::string root_box = r_.pick(theirs);
    const std::string entry = "shmbox." + o_.service + ".r" + env::reply_box_name("", e.token).substr(2);
    if (::link(path_of(root_box).c_str(), path_of(entry).c_str()) != 0) return void(++t_["plant_failed.hardlink_reply"]);
    ++t_["plant.hardlink_reply"];  // root's file now: ours to leave (the sticky /dev/shm), the driver's sweep removes it
    if (auto b = shmbox::Box::inspect(root_box.substr(7))) e.reply_box = b->id();
    env::append_request(msg, e);
    msg.insert(0, body);
  } else if (kind == "root_token" || kind == "replay") {
    const auto roots = shm_entries("shmbox." + o_.service + ".r");
    std::vector<std::string> theirs;
    for (const auto& r : roots)
      if (!plants_.count(r)) theirs.push_back(r);
    if (kind == "replay") {  // a request copied from the service box, asked again
      for (const auto& m : shmbox::peek(*svc_box_, 16))
        if (m.envelope == "request") msg = m.data;  // the body only: peek leaves the trailer out
      if (msg.empty() || theirs.empty()) return;
    }
    if (theirs.empty()) return;
    const std::string entry = r_.pick(theirs);
    e.token = std::strtoull(entry.substr(entry.size() - 16).c_str(), nullptr, 16);
    if (auto b = shmbox::Box::inspect(entry.substr(7))) e.reply_box = b->id();
    e.seq = r_.below(64);
    if (msg.empty()) msg = body;
    env::append_request(msg, e);
  } else {  // no_box
    env::append_request(msg, e);
    msg.insert(0, body);
  }
  if (msg.size() > max) msg.resize(max);
  const auto st = svc_->post(msg, {.timeout = ms(0)});
  ++t_["forge"];
  ++t_["forge." + kind];
  if (shmbox::is_stored(st)) ++t_["forge_stored"];
  if (st == shmbox::post_status::error) svc_.reset(), svc_box_.reset();
}

// ---------------------------------------------------------------------------
// HTTP (the exporter)

void attacker::act_http() {
  if (o_.http_port == 0) return;
  static const std::vector<std::string> kRequests = {
      "GARBAGE\r\n\r\n",
      "GET\r\n\r\n",
      "GET /metrics\r\n\r\n",
      "GET /metrics HTTP/9.9\r\n\r\n",
      "GET /metrics HTTP/1.1\r\n\r\n",
      "GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n",
      "GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999999\r\n\r\n",
      "GET /metrics HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nZZZ\r\n",
      "GET /metrics HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
      "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello",
      "GET /../../etc/passwd HTTP/1.1\r\nHost: x\r\n\r\n",
      "GET /metrics?%zz HTTP/1.1\r\nHost: x\r\n\r\n",
      "GET /metrics HTTP/1.1\r\nHost: x\r\nRange: bytes=0-,0-,0-,0-\r\n\r\n",
      "GET /" + std::string(9000, 'a') + " HTTP/1.1\r\n\r\n",
      std::string("GET /metrics HTTP/1.1\r\nHost: x\r\nX: a\0b\r\n\r\n", 44),
      "GET /metrics HTTP/1.1\n\n",
      "\r\n\r\n\r\nGET /metrics HTTP/1.1\r\nHost: x\r\n\r\n",
      "GET /metrics HTTP/1.1\r\nHost: x\r\n Folded: y\r\n\r\n",
      "GET /metrics HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n",
      "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\nGET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
      "HEAD /metrics HTTP/1.0\r\n\r\n",
      "OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n",
      "GET http://evil.example/metrics HTTP/1.1\r\nHost: x\r\n\r\n",
      "GET /metrics HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 10\r\n\r\n0123456789",
      "BINARY",
  };
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(o_.http_port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 && errno != EINPROGRESS) {
    ::close(fd);
    return void(++t_["http_connect_failed"]);
  }
  pollfd p{fd, POLLOUT, 0};
  if (::poll(&p, 1, 1000) != 1) {
    ::close(fd);
    return void(++t_["http_connect_failed"]);
  }
  http_conn c;
  c.fd = fd;
  // Held, closed later: idle, a half head (slowloris), one byte, a body promised and never sent.
  static constexpr const char* kHeld[] = {"", "GET /metrics HTTP/1.1\r\nHost: x\r\nUser-Agent: slow", "G",
                                          "GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n01"};
  const std::uint64_t pick = r_.below(kRequests.size() + std::size(kHeld));
  if (pick >= kRequests.size()) {
    const char* s = kHeld[pick - kRequests.size()];
    [[maybe_unused]] const ssize_t n = ::send(fd, s, std::strlen(s), MSG_NOSIGNAL);
    c.held = true;
    c.deadline = now_ms() + 100 + r_.below(6000);
    ++t_["http_held"];
  } else {
    std::string req = kRequests[pick];
    if (req == "BINARY") {  // random bytes, then the end of a head: an answer is due
      req.resize(100 + r_.below(2000));
      for (auto& ch : req) ch = static_cast<char>(r_.next());
      req += "\r\n\r\n";
    }
    [[maybe_unused]] const ssize_t n = ::send(fd, req.data(), req.size(), MSG_NOSIGNAL);
    c.deadline = now_ms() + 5000;
    c.kind = static_cast<std::size_t>(pick);
    ++t_["http_sent"];
  }
  http_.push_back(std::move(c));
}

// ---------------------------------------------------------------------------
// doorbells (lib/wake/notify_hub.hpp DOORBELL RECORDS)

void attacker::act_bell() {
  if (o_.bells.empty()) return;
  const std::string entry = r_.pick(o_.bells);
  struct stat st {};
  if (plants_.count(entry) || ::lstat(path_of(entry).c_str(), &st) != 0 || !S_ISFIFO(st.st_mode)) return void(++t_["bell_absent"]);
  const int fd = ::open(path_of(entry).c_str(), O_WRONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return void(++t_["bell_unopened"]);
  char line[128];
  std::string bytes;
  switch (r_.below(5)) {
    case 0:  // odd-sized garbage
      bytes.resize(1 + r_.below(40));
      for (auto& c : bytes) c = static_cast<char>(r_.next());
      ++t_["bell.garbage"];
      break;
    case 1:  // a record naming nothing
      std::snprintf(line, sizeof line, "\nB%" PRIx64 ":%" PRIx64 "\n", r_.next(), r_.next());
      bytes = line;
      ++t_["bell.record_random"];
      break;
    case 2: {  // a record naming a real box of root's: a spurious wake-up at most
      if (o_.bell_boxes.empty()) break;
      struct stat b {};
      if (::stat(("/dev/shm/shmbox." + r_.pick(o_.bell_boxes)).c_str(), &b) != 0) break;
      std::snprintf(line, sizeof line, "\nB%" PRIx64 ":%" PRIx64 "\n", static_cast<std::uint64_t>(b.st_dev),
                    static_cast<std::uint64_t>(b.st_ino));
      bytes = line;
      ++t_["bell.record_box"];
      break;
    }
    case 3:  // half a record, the rest never
      bytes = "\nB12";
      ++t_["bell.partial"];
      break;
    default: {  // a flood: the FIFO full, rings lost until the hub reads (its scan makes them up)
      const std::string chunk(512, 'F');
      std::uint64_t n = 0;
      while (n < 128 && ::write(fd, chunk.data(), chunk.size()) > 0) ++n;
      t_["bell_bytes"] += n * 512;
      ++t_["bell.flood"];
    }
  }
  if (!bytes.empty() && ::write(fd, bytes.data(), bytes.size()) > 0) t_["bell_bytes"] += bytes.size();
  ::close(fd);
  ++t_["bell"];
}

// ---------------------------------------------------------------------------
// the loop

void attacker::upkeep(bool final) {
  const std::uint64_t now = now_ms();
  std::erase_if(locks_, [&](const held& h) {
    if (!final && h.until > now) return false;
    ::close(h.fd);
    return true;
  });
  std::erase_if(restores_, [&](const restore& r) {
    if (!final && r.at > now) return false;
    struct stat st {};
    const int fd = open_root(r.entry, O_RDWR, &st);
    if (fd >= 0) {
      if (st.st_ino == r.ino && ::ftruncate(fd, r.size) == 0) ++t_["truncate_restored"];
      ::close(fd);
    }
    return true;
  });
  std::erase_if(http_, [&](http_conn& c) {
    if (!c.held) {
      char buf[4096];
      for (ssize_t n; (n = ::recv(c.fd, buf, sizeof buf, MSG_DONTWAIT)) != 0;) {
        if (n < 0) {
          if (errno == EAGAIN || errno == EINTR) break;
          c.got += "\n(reset)";
          n = 0;
          break;
        }
        if (c.got.size() < 256) c.got.append(buf, static_cast<std::size_t>(std::min<ssize_t>(n, 256)));
      }
      const bool closed = [&] {
        pollfd p{c.fd, POLLIN, 0};
        char b;
        return ::poll(&p, 1, 0) == 1 && ::recv(c.fd, &b, 1, MSG_DONTWAIT | MSG_PEEK) == 0;
      }();
      const bool answered = c.got.rfind("HTTP/1.", 0) == 0 && c.got.find("\r\n") != std::string::npos;
      if (!answered && !closed && now < c.deadline && !final) return false;
      if (answered) ++t_["http." + c.got.substr(9, 3)];
      else if (closed || c.got.find("(reset)") != std::string::npos) ++t_["http_closed"];
      else if (!final) ++t_["http_stalled"], ++t_["http_stalled." + std::to_string(c.kind)];
    } else if (!final && now < c.deadline) {
      return false;
    }
    ::close(c.fd);
    return true;
  });
}

void attacker::commands() {
  if (!stdin_open_) return;
  pollfd p{0, POLLIN, 0};
  if (::poll(&p, 1, 0) != 1) return;
  char buf[4096];
  const ssize_t n = ::read(0, buf, sizeof buf - 1);
  if (n <= 0) return void(stdin_open_ = false);
  std::istringstream in(std::string(buf, static_cast<std::size_t>(n)));
  for (std::string l; std::getline(in, l);) {
    const auto f = shmtest::fields(l);
    if (f.size() >= 3 && f[0] == "plant") {
      unplant(f[1]);
      say("planted " + f[1] + " " + plant_at(f[1], f[2], f.size() > 3 ? f[3] : ""));
    }
  }
}

int attacker::run() {
  ::umask(0);
  ::signal(SIGPIPE, SIG_IGN);
  struct action {
    const char* name;
    bool possible;
    unsigned weight;
    void (attacker::*fn)();
  };
  const bool can_write = !o_.write.empty() || !o_.write_prefix.empty();
  std::vector<action> all = {
      {"plant", !o_.plant.empty() || !o_.plant_next.empty(), 3, &attacker::act_plant},
      {"truncate", can_write, 1, &attacker::act_truncate},
      {"lock", can_write || !o_.read.empty(), 2, &attacker::act_lock},
      {"scribble", can_write, 3, &attacker::act_scribble},
      {"config", can_write && !o_.victim.empty(), 1, &attacker::act_config},
      {"forge", !o_.service.empty(), 4, &attacker::act_forge},
      {"http", o_.http_port != 0, 3, &attacker::act_http},
      {"bell", !o_.bells.empty(), 2, &attacker::act_bell},
  };
  std::vector<const action*> deck;
  for (const auto& a : all)
    if (a.possible && (o_.actions.empty() || o_.actions.count(a.name)))
      for (unsigned w = 0; w < a.weight; ++w) deck.push_back(&a);
  say("ready uid=" + std::to_string(::geteuid()) + " seed=" + std::to_string(o_.seed) + " kinds=" + std::to_string(deck.size()));
  const std::uint64_t end = now_ms() + static_cast<std::uint64_t>(o_.ms);
  while (now_ms() < end && !deck.empty()) {
    commands();
    upkeep(false);
    const action* a = deck[static_cast<std::size_t>(r_.below(deck.size()))];
    (this->*(a->fn))();
    ++t_[a->name + std::string("_tried")];
    ++t_["actions"];
    if (r_.chance(2)) ::usleep(static_cast<useconds_t>(r_.below(1500)));  // root needs the CPU too
  }
  upkeep(true);
  while (!plants_.empty()) unplant(plants_.begin()->first);
  svc_.reset();
  std::string line = "done seed=" + std::to_string(o_.seed);
  for (const auto& [k, v] : t_) line += " " + k + "=" + std::to_string(v);
  say(line);
  return 0;
}

}  // namespace

int attacker_main(int argc, char** argv) {
  options o;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    const std::string v = i + 1 < argc ? argv[i + 1] : "";
    auto take = [&] { ++i; return v; };
    if (a == "--probe") {
      std::printf("uid %u\n", static_cast<unsigned>(::geteuid()));
      return 0;
    } else if (a == "--seed") o.seed = std::strtoull(take().c_str(), nullptr, 10);
    else if (a == "--ms") o.ms = std::strtol(take().c_str(), nullptr, 10);
    else if (a == "--plant") {
      const std::string cv = take();
      const auto colon = cv.find(':');
      o.plant.emplace_back(cv.substr(0, colon), cv.substr(colon + 1));
    } else if (a == "--plant-next") o.plant_next.push_back(take());
    else if (a == "--write") o.write.push_back(take());
    else if (a == "--write-prefix") o.write_prefix.push_back(take());
    else if (a == "--read") o.read.push_back(take());
    else if (a == "--bell") o.bells.push_back(take());
    else if (a == "--bell-box") o.bell_boxes.push_back(take());
    else if (a == "--service") o.service = take();
    else if (a == "--victim") o.victim = take();
    else if (a == "--http") o.http_port = static_cast<int>(std::strtol(take().c_str(), nullptr, 10));
    else if (a == "--link-target") o.link_targets.push_back(take());
    else if (a == "--impersonate") o.impersonate = true;
    else if (a == "--actions") {
      std::istringstream in(take());
      for (std::string w; std::getline(in, w, ',');) o.actions.insert(w);
    } else {
      std::fprintf(stderr, "shmbox-adversary attack: unknown option %s\n", a.c_str());
      return 2;
    }
  }
  if (o.link_targets.empty()) o.link_targets = o.write;
  return attacker(std::move(o)).run();
}

}  // namespace adv
