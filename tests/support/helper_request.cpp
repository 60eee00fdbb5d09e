// tests/support/helper_request.cpp - the test helper's request/reply commands
// (tests/request/request.cpp runs them as separate programs):
//
// ask SERVICE COUNT TAG [--pipeline K] [--timeout-ms T] [--max-outstanding M]:
//   a Requester; prints "ready REPLYBOX", waits for a line on stdin, then
//   asks COUNT requests "TAG:i" with up to K waiting at once (default 1) and
//   checks that each reply is "re:TAG:i". Prints "done ok=N timeout=N
//   wrong=N error=N duplicates=N late=N stray=N".
// ask-hold SERVICE TAG [--timeout-ms T] [--any-owner]: asks one request "TAG", prints
//   "asked TICKET REPLYBOX", waits for its reply (default: for ever) and
//   prints "reply DATA" or "status STATUS", then "stats duplicates=N late=N
//   stray=N"; a line "again" on stdin asks once more ("TAG+", "TAG++", ...).
// respond BOX: owns BOX and answers lines on stdin:
//   "read N"  -> "read K D1 D2 ..." (Owner::read of up to N, 5 s for the
//                first; a redelivered one ends in '*', an answered one in '!')
//   "reply"   -> "replied S1 S2 ..." (Owner::reply "re:D" to each message read)
//   "commit"  -> "committed" / "commit-failed"
//   "stash-back" -> "stashed D" / "stash-failed" (receives one, stashes it,
//                unstashes it: the next read takes it from the stash)
//   "serve N" -> receives and answers N requests in place, then "served N"
//   "stats"   -> "replies R lost L skipped S"
//   Prints "owned EPOCH" first. Runs until stdin closes or it is killed.
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <deque>
#include <iostream>
#include <sstream>
#include <string>
#include <string_view>

#include "shmbox/shmbox.hpp"

namespace {

void out(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

long flag(int argc, char** argv, const char* name, long fallback) {
  for (int i = 0; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return std::strtol(argv[i + 1], nullptr, 10);
  return fallback;
}

// "re:" + what (appended: GCC 12 warns falsely, -Wrestrict, on "literal" + std::string).
std::string re(std::string_view what) {
  std::string r = "re:";
  r.append(what);
  return r;
}

std::chrono::nanoseconds timeout_of(long ms) {
  return ms < 0 ? std::chrono::nanoseconds::max() : std::chrono::nanoseconds(std::chrono::milliseconds(ms));
}

}  // namespace

int helper_ask(int argc, char** argv) {
  if (argc < 5) return 2;
  const std::string service = argv[2], tag = argv[4];
  const std::uint64_t count = std::strtoull(argv[3], nullptr, 10);
  const auto pipeline = static_cast<std::size_t>(flag(argc, argv, "--pipeline", 1));
  const auto timeout = timeout_of(flag(argc, argv, "--timeout-ms", 10000));
  auto r = shmbox::Requester::attach(
      service, {.max_outstanding = static_cast<std::uint32_t>(flag(argc, argv, "--max-outstanding", 64))});
  if (!r) {
    out("error " + shmbox::explain(r.error()));
    return 1;
  }
  out("ready " + r->reply_box());
  std::string go;
  std::getline(std::cin, go);
  std::uint64_t ok = 0, timeouts = 0, wrong = 0, errors = 0;
  std::deque<std::pair<std::uint64_t, std::uint64_t>> waiting;  // (ticket, i)
  std::string reply;
  auto settle = [&] {
    const auto [ticket, i] = waiting.front();
    waiting.pop_front();
    const auto st = r->wait(ticket, reply, timeout);
    if (st == shmbox::reply_status::ok) {
      if (reply == re(tag + ":" + std::to_string(i))) ++ok;
      else ++wrong;
    } else if (st == shmbox::reply_status::timeout) {
      ++timeouts;
    } else {
      ++errors;
    }
  };
  for (std::uint64_t i = 0; i < count; ++i) {
    while (waiting.size() >= pipeline) settle();
    const auto a = r->ask(tag + ":" + std::to_string(i), {.timeout = std::chrono::seconds(10)});
    if (!a) {
      ++errors;
      continue;
    }
    waiting.emplace_back(a.ticket, i);
  }
  while (!waiting.empty()) settle();
  const auto s = r->stats();
  out("done ok=" + std::to_string(ok) + " timeout=" + std::to_string(timeouts) + " wrong=" + std::to_string(wrong) +
      " error=" + std::to_string(errors) + " duplicates=" + std::to_string(s.duplicates) + " late=" +
      std::to_string(s.late) + " stray=" + std::to_string(s.stray));
  return 0;
}

int helper_ask_hold(int argc, char** argv) {
  if (argc < 4) return 2;
  bool any_owner = false;  // --any-owner: a service of another user
  for (int i = 4; i < argc; ++i) any_owner |= std::string_view(argv[i]) == "--any-owner";
  auto r = shmbox::Requester::attach(argv[2], {.any_owner = any_owner});
  if (!r) {
    out("error " + shmbox::explain(r.error()));
    return 1;
  }
  std::string request = argv[3], line;
  do {
    const auto a = r->ask(request);
    if (!a) {
      out("error " + std::string(shmbox::to_string(a.status)));
      return 1;
    }
    out("asked " + std::to_string(a.ticket) + " " + r->reply_box());
    std::string reply;
    const auto st = r->wait(a.ticket, reply, timeout_of(flag(argc, argv, "--timeout-ms", -1)));
    if (st == shmbox::reply_status::ok) out("reply " + reply);
    else out("status " + std::string(shmbox::to_string(st)));
    const auto s = r->stats();
    out("stats duplicates=" + std::to_string(s.duplicates) + " late=" + std::to_string(s.late) +
        " stray=" + std::to_string(s.stray));
    request += "+";  // "again": the next request is the last one and '+'
  } while (std::getline(std::cin, line) && line == "again");
  return 0;
}

int helper_respond(int argc, char** argv) {
  if (argc < 3) return 2;
  auto o = shmbox::Owner::acquire(argv[2]);
  if (!o) {
    out("error " + shmbox::explain(o.error()));
    return 1;
  }
  out("owned " + std::to_string(o->epoch()));
  shmbox::batch last;
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream in(line);
    std::string cmd;
    in >> cmd;
    if (cmd == "read") {
      std::size_t n = 0;
      in >> n;
      last.clear();
      (void)o->read(last, {.max = n, .timeout = std::chrono::seconds(5)});
      std::string s = "read " + std::to_string(last.size());
      for (std::size_t i = 0; i < last.size(); ++i) {
        s += ' ';
        s += last[i];
        if (last.redelivered(i)) s += '*';
        if (last.answered(i)) s += '!';
      }
      out(s);
    } else if (cmd == "reply") {
      std::string s = "replied";
      for (std::size_t i = 0; i < last.size(); ++i)
        s.append(" ").append(shmbox::to_string(o->reply(last, i, re(last[i]))));
      out(s);
    } else if (cmd == "commit") {
      out(o->commit() == shmbox::recv_status::ok ? "committed" : "commit-failed");
    } else if (cmd == "stash-back") {  // receive one, stash it, unstash it: the next read takes it from the stash
      shmbox::message m;
      const bool ok = o->receive(m, {.timeout = std::chrono::seconds(5)}) == shmbox::recv_status::ok &&
                      o->stash(m) == shmbox::recv_status::ok && o->unstash_all() == 1;
      out(ok ? "stashed " + m.data : "stash-failed");
    } else if (cmd == "serve") {
      std::size_t n = 0, served = 0;
      in >> n;
      while (served < n) {
        const auto st = o->receive_in_place(
            [&](const shmbox::message_view& m) {
              if (m.is_request()) {
                (void)o->reply(m, re(m.data));
                ++served;
              }
            },
            {.max = 64, .timeout = std::chrono::seconds(30)});
        if (st != shmbox::recv_status::ok) break;
      }
      out("served " + std::to_string(served));
    } else if (cmd == "stats") {
      const auto i = shmbox::info(shmbox::Box::open(argv[2]).value());
      out("replies " + std::to_string(i.replies.sent) + " lost " + std::to_string(i.replies.lost) + " skipped " +
          std::to_string(i.replies.skipped));
    } else {
      out("unknown " + cmd);
    }
  }
  return 0;
}
