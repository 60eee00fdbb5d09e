// tests/adversary/attacker_plant.cpp - the second user's plants (every kind of
// file, boxes and pools of its own, status images, at the names root
// derives) and forged requests (lib/segment/envelope.hpp) (attacker.hpp).
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>

#include "attacker.hpp"

namespace adv::attack {

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

}  // namespace adv::attack
