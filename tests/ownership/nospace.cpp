// A box bigger than the free space of /dev/shm fails cleanly with no_space at
// creation (posix_fallocate), leaves nothing behind, and never SIGBUSes later.
// Needs to mount a small private tmpfs over /dev/shm in a new mount namespace
// (root or CAP_SYS_ADMIN); exits 77 (skipped) where that is not allowed.
#include <sched.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "shmbox/shmbox.hpp"

int main() {
  const pid_t pid = ::fork();
  if (pid == 0) {
    // The child gets its own mount namespace: the machine's /dev/shm is untouched.
    if (::unshare(CLONE_NEWNS) != 0) _exit(77);
    if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) _exit(77);
    if (::mount("tmpfs", "/dev/shm", "tmpfs", 0, "size=1m") != 0) _exit(77);
    shmbox::options o;
    o.capacity = 4096;
    o.slot_size = 1024;  // about 4.5 MiB: more than the 1 MiB tmpfs
    auto big = shmbox::Box::create("nospace", o);
    if (big) {
      std::fprintf(stderr, "FAIL: creating a 4.5 MiB box in a 1 MiB /dev/shm succeeded\n");
      _exit(1);
    }
    if (big.error() != shmbox::errc::no_space) {
      std::fprintf(stderr, "FAIL: expected no_space, got: %s\n", shmbox::explain(big.error()).c_str());
      _exit(1);
    }
    const std::string why = shmbox::explain(big.error());
    std::printf("clear error: %s\n", why.c_str());
    std::fflush(stdout);  // _exit does not flush
    if (why.find("free") == std::string::npos || why.find("nospace") == std::string::npos) _exit(1);
    if (shmbox::Box::inspect("nospace")) {
      std::fprintf(stderr, "FAIL: a half-made segment was left behind\n");
      _exit(1);
    }
    // A box that fits is created and fully usable (every page is backed).
    o.capacity = 64;
    auto small = shmbox::Box::create("fits", o);
    if (!small) _exit(1);
    auto p = shmbox::Producer::attach(*small);
    for (int i = 0; i < 64; ++i)
      if (p->post(std::string(1024, 'x')) != shmbox::post_status::stored) _exit(1);
    (void)shmbox::Box::remove("fits");
    _exit(0);
  }
  int st = 0;
  ::waitpid(pid, &st, 0);
  if (WIFEXITED(st)) return WEXITSTATUS(st);
  std::fprintf(stderr, "FAIL: child died with signal %d\n", WTERMSIG(st));
  return 1;
}
