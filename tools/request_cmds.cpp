// tools/request_cmds.cpp - request/reply from the shell (docs/request-reply.md):
// `shmbox ask` (a Requester) and the service side of `shmbox recv
// --reply-with CMD` (Owner::reply with CMD's output).
//
// CMD is the operator's, given on the command line; what the segment says
// (the request's bytes) only reaches its standard input. It runs with
// /bin/sh -c, SHMBOX_BOX and SHMBOX_MESSAGE_ID in its environment.
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <deque>
#include <iostream>
#include <string>
#include <vector>

#include "commands.hpp"
#include "shmbox/request.hpp"

extern char** environ;

namespace shmbox_cli {

int cmd_ask(const ask_args& a) {
  auto req = shmbox::Requester::attach(a.name, {.any_owner = a.any_owner});
  if (!req) return fail(req.error());
  shmbox::post_options how;
  if (a.lane >= 0) how.lane = static_cast<std::uint32_t>(a.lane);
  how.timeout = std::chrono::milliseconds(a.timeout_ms);
  const auto timeout = std::chrono::milliseconds(a.timeout_ms);
  int worst = kExitOk;
  std::size_t index = 0;
  // Up to 32 requests on their way at once; replies printed in request order.
  std::deque<std::pair<std::size_t, std::uint64_t>> waiting;
  std::string reply;
  auto settle = [&] {
    const auto [i, ticket] = waiting.front();
    waiting.pop_front();
    const shmbox::reply_status st = req->wait(ticket, reply, timeout);
    if (st == shmbox::reply_status::ok) {
      if (!a.raw) reply = message_line(reply);  // the service's bytes: no escape sequence reaches the terminal
      reply.push_back('\n');
      if (!write_all(STDOUT_FILENO, reply.data(), reply.size())) worst = kExitFail;
      return;
    }
    if (st == shmbox::reply_status::timeout)
      say("request " + std::to_string(i) + ": no reply within " + std::to_string(a.timeout_ms) + " ms (does box '" +
          a.name + "' have an owner that answers requests, e.g. 'shmbox recv " + a.name +
          " --follow --reply-with CMD'? a larger --timeout waits longer)");
    else
      say("request " + std::to_string(i) + ": " + shmbox::explain(req->last_error()));
    if (worst == kExitOk) worst = kExitRefused;
  };
  auto ask_one = [&](const std::string& msg) {
    ++index;
    while (waiting.size() >= 32) settle();
    const shmbox::ask_result r = req->ask(msg, how);
    if (r) {
      waiting.emplace_back(index, r.ticket);
      return;
    }
    if (r.status == shmbox::post_status::too_large) {
      say("request " + std::to_string(index) + " refused: too large (" + std::to_string(msg.size()) + " bytes; box '" +
          a.name + "' takes requests of at most " + std::to_string(req->max_request_size()) + ")");
      worst = kExitFail;
      return;
    }
    say("request " + std::to_string(index) + " refused: " + std::string(shmbox::to_string(r.status)) +
        (r.status == shmbox::post_status::error ? " (" + shmbox::explain(req->last_error()) + ")" : std::string()));
    if (worst == kExitOk) worst = kExitRefused;
  };
  if (!a.messages.empty()) {
    for (const auto& m : a.messages) ask_one(m);
  } else {
    std::string line;
    while (std::getline(std::cin, line)) ask_one(line);
  }
  while (!waiting.empty()) settle();
  return worst;
}

namespace {

// Runs `cmd` with /bin/sh -c, `input` on its stdin (a memfd: no pipe to
// deadlock on), and returns its stdout (at most `limit` + 1 bytes are kept)
// and wait status. -1 when it could not be started.
int run_command(const std::string& cmd, const std::string& input, const std::vector<std::string>& env_extra,
                std::size_t limit, std::string& output) {
  output.clear();
  const int in = ::memfd_create("shmbox-request", MFD_CLOEXEC);
  if (in < 0) return -1;
  if (!write_all(in, input.data(), input.size()) || ::lseek(in, 0, SEEK_SET) != 0) {
    ::close(in);
    return -1;
  }
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) {
    ::close(in);
    return -1;
  }
  std::vector<std::string> env_strings(env_extra);
  for (char** e = environ; *e != nullptr; ++e)
    if (std::strncmp(*e, "SHMBOX_BOX=", 11) != 0 && std::strncmp(*e, "SHMBOX_MESSAGE_ID=", 18) != 0)
      env_strings.emplace_back(*e);
  std::vector<char*> envp;
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  const char* argv[] = {"/bin/sh", "-c", cmd.c_str(), nullptr};
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(in);
    ::close(out[0]);
    ::close(out[1]);
    return -1;
  }
  if (pid == 0) {
    ::dup2(in, STDIN_FILENO);
    ::dup2(out[1], STDOUT_FILENO);
    ::signal(SIGPIPE, SIG_DFL);
    ::execve("/bin/sh", const_cast<char* const*>(argv), envp.data());
    ::_exit(127);
  }
  ::close(in);
  ::close(out[1]);
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(out[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    if (output.size() <= limit) output.append(buf, std::min<std::size_t>(static_cast<std::size_t>(n), limit + 1 - output.size()));
  }
  ::close(out[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return status;
}

}  // namespace

bool answer_request(shmbox::Owner& owner, const shmbox::batch& batch, std::size_t i, const std::string& box,
                    const std::string& cmd) {
  const std::string id = shmbox::to_string(owner.id_of(batch.lane(i), batch.position(i)));
  if (batch.answered(i)) return true;  // the owner before us answered it (it died before committing)
  std::string output;
  const int status = run_command(cmd, std::string(batch[i]), {"SHMBOX_BOX=" + box, "SHMBOX_MESSAGE_ID=" + id},
                                 std::size_t{1} << 20, output);
  if (status < 0) {
    say("request " + id + ": cannot run '" + cmd + "' (" + std::strerror(errno) + "); no reply sent");
    return false;
  }
  if (!output.empty() && output.back() == '\n') output.pop_back();
  if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0))
    say("request " + id + ": '" + cmd + "' " +
        (WIFEXITED(status) ? "exited with status " + std::to_string(WEXITSTATUS(status))
                           : "was killed by signal " + std::to_string(WTERMSIG(status))) +
        "; its output is the reply all the same");
  const shmbox::reply_status st = owner.reply(batch, i, output);
  if (st == shmbox::reply_status::ok || st == shmbox::reply_status::already_replied) return true;
  if (st == shmbox::reply_status::too_large)
    say("request " + id + ": the reply (" + std::to_string(output.size()) + " bytes) is larger than its requester takes; " +
        shmbox::explain(owner.last_error()));
  else if (st == shmbox::reply_status::requester_gone)
    say("request " + id + ": its requester is gone; the reply is counted lost (and dead-lettered, if the box has a dead-letter box)");
  else if (st == shmbox::reply_status::full)
    say("request " + id + ": its requester's reply box is full; the reply is counted lost");
  else
    say("request " + id + ": " + std::string(shmbox::to_string(st)) + " (" + shmbox::explain(owner.last_error()) + ")");
  return false;
}

}  // namespace shmbox_cli
