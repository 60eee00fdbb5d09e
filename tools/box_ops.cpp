// tools/box_ops.cpp - the operator commands on boxes: `shmbox rm`, `verify`,
// `gc` (every box), `dump` (the messages, read without taking them), `resize`
// and `give-away`.
#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cli_args.hpp"
#include "commands.hpp"
#include "shmbox/shmbox.hpp"

namespace shmbox_cli {

namespace {

using json = nlohmann::ordered_json;

// The bytes of a message as a hexdump: offset, 16 bytes in hex, the printable ones.
void print_hex(std::string_view data) {
  for (std::size_t off = 0; off < data.size(); off += 16) {
    std::printf("  %08zx  ", off);
    for (std::size_t i = 0; i < 16; ++i) {
      if (off + i < data.size()) std::printf("%02x ", static_cast<unsigned char>(data[off + i]));
      else std::printf("   ");
      if (i == 7) std::printf(" ");
    }
    std::printf(" |");
    for (std::size_t i = 0; i < 16 && off + i < data.size(); ++i) {
      const auto c = static_cast<unsigned char>(data[off + i]);
      std::putchar(c >= 0x20 && c < 0x7f ? c : '.');
    }
    std::printf("|\n");
  }
}

std::string to_hex(std::string_view data) {
  static const char* digits = "0123456789abcdef";
  std::string h;
  h.reserve(data.size() * 2);
  for (const char c : data) {
    h += digits[static_cast<unsigned char>(c) >> 4];
    h += digits[static_cast<unsigned char>(c) & 0xF];
  }
  return h;
}

// Messages as they lie in the box, read-only: the owner and the producers
}  // namespace

// ---- rm --------------------------------------------------------------------------
int cmd_rm(const std::string& name) {
  auto r = shmbox::Box::remove(name);
  if (!r) return fail(r.error());
  remove_bridge_status(name);  // the box's bridges' counters go with it
  return kExitOk;
}

// ---- verify / gc -------------------------------------------------------------
int cmd_verify(const std::string& name, bool as_json) {
  auto r = shmbox::verify(name);
  if (!r) return fail(r.error());
  if (as_json) {
    std::cout << json{{"box", r->box},
                      {"ok", r->ok},
                      {"problems", r->problems},
                      {"checked", json{{"slots", r->slots}, {"producers", r->producers}, {"heirs", r->heirs}}}}
                     .dump(2, ' ', false, json::error_handler_t::replace)
              << "\n";
  } else if (r->ok) {
    std::cout << "box '" << name << "': ok (" << r->slots << " slots, " << r->producers << " producers, " << r->heirs
              << " heirs checked)\n";
  } else {
    std::cout << "box '" << name << "': CORRUPT, " << r->problems.size() << " problem(s):\n";
    for (const auto& p : r->problems) std::cout << "  " << p << "\n";
    std::cout << "Its processes report errors instead of using the damaged parts; to start over, remove it with 'shmbox rm "
              << name << "' and create it again.\n";
  }
  return r->ok ? kExitOk : kExitFail;
}

int cmd_gc(const parsed& a) {
  auto r = shmbox::collect({.dry_run = a.dry_run, .include_nonempty = a.include_nonempty, .prefix = a.prefix});
  if (!r) return fail(r.error());
  // Boxes it could not remove (another user's, or not a box) are listed as
  // skipped, the rest is collected; the exit status then is 3.
  std::size_t skipped = 0;
  for (const auto& c : *r) skipped += c.skipped ? 1 : 0;
  const int code = skipped != 0 ? kExitRefused : kExitOk;
  if (a.json) {
    json all = json::array();
    for (const auto& c : *r)
      all.push_back(json{{"name", c.name}, {"depth", c.depth}, {"why", c.why}, {"removed", !a.dry_run && !c.skipped}, {"skipped", c.skipped}});
    std::cout << all.dump(2, ' ', false, json::error_handler_t::replace) << "\n";
    return code;
  }
  for (const auto& c : *r) {
    if (c.skipped) {
      std::cout << "skipped " << c.name << " (" << escaped(c.why) << ")\n";
      continue;
    }
    std::cout << (a.dry_run ? "would remove " : "removed ") << c.name << " (" << c.why
              << (c.depth != 0 ? ", " + std::to_string(c.depth) + " messages lost" : std::string()) << ")\n";
  }
  if (r->size() == skipped) std::cout << "nothing to collect\n";
  if (skipped != 0)
    say("gc: skipped " + std::to_string(skipped) + " box(es) it may not remove or that are not boxes (listed above); collected the rest");
  return code;
}


// ---- dump / resize / give-away ---------------------------------------------------
// are not disturbed (shmbox::peek writes nothing).
int cmd_dump(const parsed& a) {
  auto box = shmbox::Box::inspect(a.name);
  if (!box) return fail(box.error());
  const std::vector<shmbox::peeked_message> msgs = shmbox::peek(*box, a.dump.max);
  if (auto whole = box->intact(); !whole) return fail(whole.error());  // truncated while read (T5)
  if (a.json) {
    json out = json::array();
    for (const auto& m : msgs) {
      // JSON strings must be UTF-8: bytes that are not go as base16.
      json one{{"lane", m.lane}, {"position", m.position}, {"size", m.data.size()}};
      // A message in its lane: its shmbox::message_id (Nats-Msg-Id when bridged).
      if (m.stash.empty()) one["id"] = shmbox::to_string(shmbox::message_id{box->id(), m.lane, m.position});
      if (!m.stash.empty()) one["stash"] = m.stash;
      if (!m.envelope.empty()) one["envelope"] = m.envelope;  // request/reply: the body only, as its owner receives it
      try {
        (void)json(m.data).dump();  // throws on bytes that are not UTF-8
        one["text"] = m.data;
      } catch (const json::exception&) {
        one["base16"] = to_hex(m.data);
      }
      out.push_back(std::move(one));
    }
    std::cout << out.dump(2) << "\n";
    return kExitOk;
  }
  const shmbox::box_info bi = shmbox::info(*box);
  char box_id[17];
  std::snprintf(box_id, sizeof box_id, "%016llx", static_cast<unsigned long long>(box->id()));
  std::cerr << "box '" << a.name << "' (id " << box_id << ": a message's id is ID-LANE-#POSITION): showing " << msgs.size() << " of " << bi.depth << " message(s), "
            << (!bi.buffer.empty() ? "per lane, the owner's store first in arrival order ([stash: buffered]: its custom buffer '" + bi.buffer + "' decides the delivery order), then the lane\n"
                : bi.priority ? std::string("in delivery order per lane (a priority box: lowest priority first; [stash: sorted]: in the owner's store)\n")
                              : std::string("oldest first per lane (lifo lanes: newest first; the owner's stash first)\n"));
  for (const auto& m : msgs) {
    std::printf("lane %u  #%llu  %zu bytes%s%s%s", m.lane, static_cast<unsigned long long>(m.position), m.data.size(),
                m.stash.empty() ? "" : ("  [stash: " + m.stash + "]").c_str(), m.envelope.empty() ? "" : ("  [" + m.envelope + "]").c_str(),
                a.dump.hex ? "\n" : "  ");
    if (a.dump.hex) {
      print_hex(m.data);
    } else {
      // One line per message: unprintable bytes escaped, so a message never breaks the listing.
      std::string line;
      for (const char ch : m.data) {
        const auto c = static_cast<unsigned char>(ch);
        if (c == '\\') line += "\\\\";
        else if (c >= 0x20 && c < 0x7f) line += ch;
        else {
          char esc[8];
          std::snprintf(esc, sizeof esc, "\\x%02x", c);
          line += esc;
        }
      }
      std::printf("%s\n", line.c_str());
    }
  }
  return kExitOk;
}

int cmd_resize(const parsed& a) {
  auto box = shmbox::Box::open(a.name);
  if (!box) return fail(box.error());
  std::optional<std::uint32_t> lane;
  if (a.resize.lane >= 0) lane = static_cast<std::uint32_t>(a.resize.lane);
  const auto r = box->resize(a.resize.limit, lane);
  if (!r) {
    say(shmbox::explain(r.error()));
    return r.error() == shmbox::errc::invalid_argument ? kExitUsage : kExitFail;
  }
  if (a.json) {
    std::cout << json{{"box", a.name},          {"lane", r->lane},   {"before", r->before},
                      {"after", r->after},      {"max_capacity", r->max_capacity}, {"dropped", r->dropped}}
                     .dump()
              << "\n";
    return kExitOk;
  }
  const shmbox::policy pol = shmbox::info(*box).lanes.at(r->lane).overflow;
  std::cout << "box '" << a.name << "'" << (box->lane_count() > 1 ? " lane " + std::to_string(r->lane) : std::string())
            << ": limit " << r->before << " -> " << r->after << " (max capacity " << r->max_capacity << ")";
  if (r->dropped != 0)
    std::cout << "; " << r->dropped << " dropped (" << shmbox::to_string(pol) << ": the "
              << (pol == shmbox::policy::drop_oldest ? "oldest" : "newest") << ")";
  std::cout << "\n";
  return kExitOk;
}

int cmd_give_away(const parsed& a) {
  auto box = shmbox::Box::open(a.name, {.any_owner = a.give_away.any_owner});
  if (!box) return fail(box.error());
  const shmbox::box_info before = shmbox::info(*box);
  const auto timeout = std::chrono::milliseconds(a.give_away.timeout_ms);
  const auto r = a.give_away.heir >= 0
                     ? box->request_give_away_to_heir(static_cast<std::uint32_t>(a.give_away.heir), timeout)
                     : box->request_give_away(a.give_away.pid, timeout);
  if (!r) {
    say(shmbox::explain(r.error()));
    return r.error() == shmbox::errc::refused || r.error() == shmbox::errc::timed_out ? kExitRefused : kExitFail;
  }
  std::uint32_t to = a.give_away.pid;
  for (const auto& h : before.heirs)
    if (a.give_away.heir >= 0 && h.entry == static_cast<std::uint32_t>(a.give_away.heir)) to = h.pid;
  std::cout << "box '" << a.name << "' given by pid " << before.owner.pid << " to pid " << to
            << (a.give_away.heir >= 0 ? " (heir entry " + std::to_string(a.give_away.heir) + ")" : std::string()) << "\n";
  return kExitOk;
}
}  // namespace shmbox_cli
