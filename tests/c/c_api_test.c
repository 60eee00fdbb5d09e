/* tests/c/c_api_test.c - the C API (include/shmbox/shmbox.h), compiled as C99.
 *
 * `c-api-test` runs every case below in this process and in child
 * processes it starts by exec'ing itself (/proc/self/exe ROLE ARGS...): C
 * producers posting into a C owner, an owner killed with SIGKILL while it
 * holds read messages and a C heir taking over, a give-away to a C
 * listener, notify_fd with poll(), active with a C filter, loans, batches,
 * the stash, priorities, info/verify, and bad input. Each process has an
 * alarm (SIGALRM removes this run's boxes and exits 1), and every box is
 * removed at exit. Exit 0 when every CHECK held.
 */
#define _POSIX_C_SOURCE 200809L
#include "shmbox/shmbox.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int failures = 0;

#define CHECK(cond)                                                                                          \
  do {                                                                                                       \
    if (!(cond)) {                                                                                           \
      fprintf(stderr, "%s:%d: CHECK failed: %s (last error %d: %s)\n", __FILE__, __LINE__, #cond,            \
              shmbox_last_error(), shmbox_last_error_message());                                             \
      ++failures;                                                                                            \
    }                                                                                                        \
  } while (0)

#define REQUIRE(cond)                                                                                        \
  do {                                                                                                       \
    if (!(cond)) {                                                                                           \
      fprintf(stderr, "%s:%d: REQUIRE failed: %s (last error %d: %s)\n", __FILE__, __LINE__, #cond,          \
              shmbox_last_error(), shmbox_last_error_message());                                             \
      exit(1);                                                                                               \
    }                                                                                                        \
  } while (0)

/* ---- This run's boxes: named t-<run>-capi-<pid>-<what>, removed at exit
 * and on the alarm (shm_unlink only: async-signal-safe). */
#define MAX_BOXES 32
static char box_names[MAX_BOXES][160];
static char box_paths[MAX_BOXES][180];
static int box_count = 0;

static const char* new_name(const char* what) {
  const char* run = getenv("SHMBOX_TEST_RUN");
  REQUIRE(box_count < MAX_BOXES);
  snprintf(box_names[box_count], sizeof box_names[0], "t-%s-capi-%ld-%s", run ? run : "c", (long)getpid(), what);
  snprintf(box_paths[box_count], sizeof box_paths[0], "/shmbox.%s", box_names[box_count]);
  return box_names[box_count++];
}

static void remove_boxes(void) {
  int i;
  for (i = 0; i < box_count; ++i) shmbox_box_remove(box_names[i]);
}

static void on_alarm(int sig) {
  static const char msg[] = "c-api-test: timed out\n";
  int i;
  (void)sig;
  for (i = 0; i < box_count; ++i) shm_unlink(box_paths[i]);
  if (write(2, msg, sizeof msg - 1) < 0) _exit(1);
  _exit(1);
}

static void set_alarm(unsigned seconds) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_alarm;
  sigaction(SIGALRM, &sa, NULL);
  alarm(seconds);
}

/* ---- Child processes: this program again, stdout a pipe to the parent. */
typedef struct child {
  pid_t pid;
  FILE* out; /* the child's stdout */
} child;

static child spawn(const char* role, const char* a1, const char* a2, const char* a3) {
  child c;
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  c.pid = fork();
  REQUIRE(c.pid >= 0);
  if (c.pid == 0) {
    const char* argv[6];
    argv[0] = "c-api-test";
    argv[1] = role;
    argv[2] = a1;
    argv[3] = a2;
    argv[4] = a3;
    argv[5] = NULL;
    close(fds[0]);
    dup2(fds[1], 1);
    close(fds[1]);
    execv("/proc/self/exe", (char* const*)argv);
    _exit(127);
  }
  close(fds[1]);
  c.out = fdopen(fds[0], "r");
  REQUIRE(c.out != NULL);
  return c;
}

/* Reads the child's next line (the handshake), "" at EOF. */
static void read_line(child* c, char* buf, size_t n) {
  if (fgets(buf, (int)n, c->out) == NULL) buf[0] = '\0';
  buf[strcspn(buf, "\n")] = '\0';
}

/* Waits for the child; returns its exit status (128+signal when killed). */
static int reap(child* c) {
  int st = 0;
  while (waitpid(c->pid, &st, 0) < 0 && errno == EINTR) {
  }
  fclose(c->out);
  if (WIFEXITED(st)) return WEXITSTATUS(st);
  return 128 + WTERMSIG(st);
}

/* ---- Child roles ------------------------------------------------------------ */

/* produce NAME ID N: posts "ID:0".."ID:N-1" (waiting while the box is full),
 * half of them as loans, then prints "done". */
static int role_produce(const char* name, const char* id, const char* count) {
  shmbox_producer* p = NULL;
  shmbox_post_options o;
  long n = atol(count), i;
  char msg[64];
  REQUIRE(shmbox_producer_attach(name, &p) == SHMBOX_OK);
  shmbox_post_options_init(&o);
  o.timeout_ns = SHMBOX_FOREVER;
  for (i = 0; i < n; ++i) {
    int len = snprintf(msg, sizeof msg, "%s:%ld", id, i);
    if (i % 2 == 0) {
      REQUIRE(shmbox_post_ex(p, msg, (size_t)len, &o) == SHMBOX_STORED);
    } else {
      void* data = NULL;
      uint32_t cap = 0;
      REQUIRE(shmbox_loan(p, &o, &data, &cap) == SHMBOX_STORED);
      REQUIRE(cap >= (uint32_t)len);
      memcpy(data, msg, (size_t)len);
      REQUIRE(shmbox_loan_commit(p, (size_t)len) == SHMBOX_STORED);
    }
  }
  shmbox_producer_close(p);
  printf("done\n");
  return 0;
}

/* read-and-hang NAME K: owns the box, reads K messages without committing,
 * prints "ready" and waits to be killed. */
static int role_read_and_hang(const char* name, const char* k) {
  shmbox_owner* o = NULL;
  size_t n = 0;
  REQUIRE(shmbox_owner_acquire(name, &o) == SHMBOX_OK);
  REQUIRE(shmbox_read(o, (size_t)atol(k), 5000000000LL, &n) == SHMBOX_RECV_OK);
  REQUIRE(n == (size_t)atol(k));
  printf("ready\n");
  fflush(stdout);
  for (;;) pause();
}

/* listen NAME: waits as a listener for a give-away, then prints
 * "got REASON DATA COUNT" with the messages it received. */
static int role_listen(const char* name) {
  shmbox_heir* h = NULL;
  shmbox_owner* o = NULL;
  shmbox_transfer t;
  char buf[256];
  size_t size = 0, got = 0;
  REQUIRE(shmbox_heir_listen(name, &h) == SHMBOX_OK);
  printf("ready\n");
  fflush(stdout);
  REQUIRE(shmbox_heir_await(h, 20000000000LL, &o) == SHMBOX_OK);
  memset(&t, 0, sizeof t);
  t.struct_size = sizeof t;
  REQUIRE(shmbox_owner_transfer(o, &t) == SHMBOX_OK);
  while (shmbox_try_receive(o, buf, sizeof buf, &size, NULL) == SHMBOX_RECV_OK) ++got;
  printf("got %d %s %zu\n", t.reason, t.data, got);
  shmbox_owner_close(o);
  shmbox_heir_close(h);
  return 0;
}

/* member: a pool's member command (PoolMember through the C API). Each
 * message names a box; the member posts "got <n>" into it, n counting the
 * messages it has received, and answers the supervisor's health pings. */
static int role_member(void) {
  shmbox_member* m = NULL;
  shmbox_owner* o;
  char buf[256];
  long n = 0;
  REQUIRE(shmbox_member_from_env(&m) == SHMBOX_OK);
  o = shmbox_member_owner(m);
  REQUIRE(o != NULL && shmbox_owner_max_message_size(o) <= sizeof buf - 1);
  for (;;) {
    size_t size = 0;
    shmbox_msg_info mi;
    int st = shmbox_receive(o, buf, sizeof buf, &size, &mi, 200000000LL);
    if (st == SHMBOX_RECV_TIMEOUT) {
      if (shmbox_member_stopped(m)) break; /* its pool is gone, or it was stopped */
      continue;
    }
    if (st == SHMBOX_RECV_NOT_OWNER) break;
    REQUIRE(st == SHMBOX_RECV_OK);
    if (mi.lane == 0 && shmbox_member_answer_ping(m, buf, size)) continue;
    buf[size] = '\0';
    ++n;
    {
      shmbox_producer* reply = NULL;
      char text[64];
      int len = snprintf(text, sizeof text, "got %ld", n);
      if (shmbox_producer_attach(buf, &reply) == SHMBOX_OK) {
        shmbox_post(reply, text, (size_t)len);
        shmbox_producer_close(reply);
      }
    }
  }
  shmbox_member_close(m);
  return 0;
}

/* ---- Cases -------------------------------------------------------------- */

static shmbox_box* create_box(const char* name, uint32_t capacity, int overflow) {
  shmbox_options opts;
  shmbox_box* b = NULL;
  shmbox_options_init(&opts);
  opts.capacity = capacity;
  opts.slot_size = 64;
  opts.overflow = overflow;
  REQUIRE(shmbox_box_create(name, &opts, &b) == SHMBOX_OK);
  return b;
}

static void test_errors(void) {
  const char* name = new_name("errors");
  shmbox_box* b = NULL;
  shmbox_producer* p = NULL;
  shmbox_owner* o = NULL;
  shmbox_options bad_opts;
  char big[200];
  char small[8];
  size_t size = 0;
  shmbox_counters c;

  CHECK(shmbox_box_create("no/slash", NULL, &b) == SHMBOX_E_INVALID_NAME);
  CHECK(b == NULL);
  CHECK(shmbox_last_error() == SHMBOX_E_INVALID_NAME);
  CHECK(strlen(shmbox_last_error_message()) > 10);
  CHECK(shmbox_validate_name("ok-name.1") == SHMBOX_OK);
  CHECK(shmbox_validate_name("") == SHMBOX_E_INVALID_NAME);
  CHECK(shmbox_producer_attach(name, &p) == SHMBOX_E_NOT_FOUND);
  CHECK(strstr(shmbox_last_error_message(), name) != NULL || strstr(shmbox_last_error_message(), "no box") != NULL);
  CHECK(shmbox_box_create(NULL, NULL, &b) == SHMBOX_E_INVALID_ARGUMENT);
  CHECK(strstr(shmbox_last_error_message(), "shmbox_box_create") != NULL);
  CHECK(strcmp(shmbox_strerror(SHMBOX_E_NOT_FOUND), "no box of that name: create it first (shmbox create NAME)") == 0);
  CHECK(strlen(shmbox_strerror(9999)) > 0);

  /* struct_size unset, overflow out of range */
  memset(&bad_opts, 0, sizeof bad_opts);
  CHECK(shmbox_box_create(name, &bad_opts, &b) == SHMBOX_E_INVALID_ARGUMENT);
  shmbox_options_init(&bad_opts);
  bad_opts.overflow = 9;
  CHECK(shmbox_box_create(name, &bad_opts, &b) == SHMBOX_E_INVALID_ARGUMENT);
  /* an options struct from an older, shorter header: the fields it has count */
  shmbox_options_init(&bad_opts);
  bad_opts.capacity = 8;
  bad_opts.slot_size = 64;
  bad_opts.struct_size = (uint32_t)offsetof(shmbox_options, overflow);
  REQUIRE(shmbox_box_create(name, &bad_opts, &b) == SHMBOX_OK);
  CHECK(shmbox_box_capacity(b) == 8 && shmbox_box_slot_size(b) == 64);
  {
    shmbox_box* again = NULL;
    CHECK(shmbox_box_create(name, NULL, &again) == SHMBOX_E_EXISTS);
    CHECK(again == NULL);
  }

  REQUIRE(shmbox_producer_attach_box(b, &p) == SHMBOX_OK);
  memset(big, 'x', sizeof big);
  CHECK(shmbox_post(p, big, sizeof big) == SHMBOX_POST_TOO_LARGE);
  CHECK(shmbox_last_error() == SHMBOX_E_TOO_LARGE && strstr(shmbox_last_error_message(), "200 bytes") != NULL);
  CHECK(shmbox_post(p, NULL, 5) == SHMBOX_POST_ERROR);
  CHECK(shmbox_loan_commit(p, 3) == SHMBOX_POST_ERROR); /* no open loan */
  CHECK(shmbox_producer_max_message_size(p) == 64);
  CHECK(shmbox_post(p, "one", 3) == SHMBOX_STORED);

  REQUIRE(shmbox_owner_acquire(name, &o) == SHMBOX_OK);
  {
    shmbox_owner* second = NULL;
    CHECK(shmbox_owner_acquire(name, &second) == SHMBOX_E_ALREADY_OWNER);
    CHECK(second == NULL);
  }
  /* a buffer smaller than the slot: refused before anything is taken */
  CHECK(shmbox_receive(o, small, sizeof small, &size, NULL, 0) == SHMBOX_RECV_ERROR);
  CHECK(shmbox_owner_last_error(o) == SHMBOX_E_INVALID_ARGUMENT);
  CHECK(strstr(shmbox_last_error_message(), "slot size") != NULL);
  CHECK(shmbox_box_depth(b) == 1);
  CHECK(shmbox_receive(o, big, sizeof big, &size, NULL, 0) == SHMBOX_RECV_OK);
  CHECK(size == 3 && memcmp(big, "one", 3) == 0);
  CHECK(shmbox_try_receive(o, big, sizeof big, &size, NULL) == SHMBOX_RECV_EMPTY);
  CHECK(shmbox_receive(o, big, sizeof big, &size, NULL, 1000000) == SHMBOX_RECV_TIMEOUT);
  {
    const void* d = NULL;
    CHECK(shmbox_batch_message(o, 0, &d, &size, NULL) == SHMBOX_E_INVALID_ARGUMENT);
  }

  memset(&c, 0, sizeof c);
  CHECK(shmbox_box_counters(b, &c) == SHMBOX_E_INVALID_ARGUMENT); /* struct_size unset */
  c.struct_size = sizeof c;
  REQUIRE(shmbox_box_counters(b, &c) == SHMBOX_OK);
  CHECK(c.posted == 2 && c.too_large == 1 && c.delivered == 1);
  /* a result struct from an older header: nothing written past its size */
  {
    unsigned char raw[sizeof(shmbox_counters)];
    shmbox_counters* shortc = (shmbox_counters*)raw;
    memset(raw, 0xab, sizeof raw);
    shortc->struct_size = (uint32_t)offsetof(shmbox_counters, delivered);
    REQUIRE(shmbox_box_counters(b, shortc) == SHMBOX_OK);
    CHECK(shortc->posted == 2 && shortc->stored == 1);
    CHECK(raw[offsetof(shmbox_counters, delivered)] == 0xab);
    CHECK(shortc->struct_size == offsetof(shmbox_counters, delivered));
  }

  shmbox_owner_close(o);
  shmbox_producer_close(p);
  shmbox_box_close(b);
  CHECK(shmbox_box_remove(name) == SHMBOX_OK);
  CHECK(shmbox_box_remove(name) == SHMBOX_E_NOT_FOUND);
  /* NULL handles are ignored or refused, never a crash */
  shmbox_box_close(NULL);
  shmbox_owner_close(NULL);
  CHECK(shmbox_post(NULL, "x", 1) == SHMBOX_POST_ERROR);
  CHECK(shmbox_receive(NULL, big, sizeof big, &size, NULL, 0) == SHMBOX_RECV_ERROR);
  CHECK(shmbox_box_capacity(NULL) == 0);
}

/* Two C producer processes into a C owner (copy, batch and in-place
 * receives), with a box small enough that they wait for room. */
typedef struct seen {
  long next[3]; /* per producer: the next index expected */
  long total;
  int bad;
} seen;

static void see(seen* s, const void* data, size_t size) {
  char text[64];
  int id = 0;
  long i = -1;
  if (size >= sizeof text) {
    s->bad++;
    return;
  }
  memcpy(text, data, size);
  text[size] = '\0';
  if (sscanf(text, "%d:%ld", &id, &i) != 2 || id < 1 || id > 2 || i != s->next[id]) {
    fprintf(stderr, "unexpected message '%s'\n", text);
    s->bad++;
    return;
  }
  s->next[id]++;
  s->total++;
}

static void see_view(void* ctx, const void* data, size_t size, const shmbox_msg_info* info) {
  (void)info;
  see((seen*)ctx, data, size);
}

static void test_producers_to_owner(void) {
  const char* name = new_name("procs");
  const long per = 3000;
  shmbox_box* b = create_box(name, 16, SHMBOX_BLOCK);
  shmbox_owner* o = NULL;
  child p1, p2;
  seen s;
  char buf[64];
  size_t size = 0, n = 0, i;
  int round = 0;
  shmbox_counters c;

  memset(&s, 0, sizeof s);
  REQUIRE(shmbox_owner_acquire_box(b, &o) == SHMBOX_OK);
  p1 = spawn("produce", name, "1", "3000");
  p2 = spawn("produce", name, "2", "3000");
  while (s.total < 2 * per && s.bad == 0) {
    int st;
    switch (round++ % 3) {
      case 0:
        st = shmbox_receive(o, buf, sizeof buf, &size, NULL, 10000000000LL);
        REQUIRE(st == SHMBOX_RECV_OK);
        see(&s, buf, size);
        break;
      case 1:
        st = shmbox_receive_batch(o, 7, 10000000000LL, &n);
        REQUIRE(st == SHMBOX_RECV_OK && n >= 1 && n <= 7 && shmbox_batch_size(o) == n);
        for (i = 0; i < n; ++i) {
          const void* d = NULL;
          REQUIRE(shmbox_batch_message(o, i, &d, &size, NULL) == SHMBOX_OK);
          see(&s, d, size);
        }
        break;
      default:
        st = shmbox_receive_in_place(o, see_view, &s, 5, 10000000000LL, &n);
        REQUIRE(st == SHMBOX_RECV_OK && n >= 1 && n <= 5);
        break;
    }
  }
  CHECK(s.bad == 0);
  CHECK(s.total == 2 * per);
  CHECK(s.next[1] == per && s.next[2] == per);
  {
    char line[64];
    read_line(&p1, line, sizeof line);
    CHECK(strcmp(line, "done") == 0);
    read_line(&p2, line, sizeof line);
    CHECK(strcmp(line, "done") == 0);
  }
  CHECK(reap(&p1) == 0);
  CHECK(reap(&p2) == 0);
  memset(&c, 0, sizeof c);
  c.struct_size = sizeof c;
  REQUIRE(shmbox_box_counters(b, &c) == SHMBOX_OK);
  CHECK(c.posted == (uint64_t)(2 * per) && c.delivered == (uint64_t)(2 * per) && c.timeouts == 0);
  shmbox_owner_close(o);
  shmbox_box_close(b);
}

/* An owner killed with read, uncommitted messages: the C heir takes over
 * with every message, the read ones flagged redelivered. */
static void test_heir_takes_over(void) {
  const char* name = new_name("heir");
  shmbox_box* b = create_box(name, 16, SHMBOX_REJECT);
  shmbox_producer* p = NULL;
  shmbox_heir* h = NULL;
  shmbox_owner* o = NULL;
  shmbox_transfer t;
  shmbox_info info;
  shmbox_heir_info heirs[2];
  child owner;
  char line[64], buf[64];
  size_t size = 0;
  shmbox_msg_info mi;
  int i, redelivered = 0;

  REQUIRE(shmbox_producer_attach_box(b, &p) == SHMBOX_OK);
  for (i = 0; i < 5; ++i) {
    char m[8];
    int len = snprintf(m, sizeof m, "m%d", i);
    REQUIRE(shmbox_post(p, m, (size_t)len) == SHMBOX_STORED);
  }

  /* the owner first: a box without an owner goes to its waiting heir */
  owner = spawn("read-and-hang", name, "2", "");
  read_line(&owner, line, sizeof line);
  REQUIRE(strcmp(line, "ready") == 0);
  REQUIRE(shmbox_heir_enlist(name, "c-heir", 6, &h) == SHMBOX_OK);
  CHECK(shmbox_heir_position(h) == 0);
  CHECK(shmbox_heir_fd(h) >= 0);
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  memset(heirs, 0, sizeof heirs);
  heirs[0].struct_size = heirs[1].struct_size = sizeof heirs[0];
  REQUIRE(shmbox_box_info(b, &info, NULL, 0, heirs, 2) == SHMBOX_OK);
  CHECK(info.heir_count == 1 && heirs[0].alive && !heirs[0].listener && strcmp(heirs[0].data, "c-heir") == 0);
  CHECK(heirs[0].data_size == 6);
  CHECK(info.depth == 5);
  CHECK(info.owner_pid == (uint32_t)owner.pid && info.owner_alive);
  kill(owner.pid, SIGKILL);
  CHECK(reap(&owner) == 128 + SIGKILL);

  REQUIRE(shmbox_heir_await(h, 10000000000LL, &o) == SHMBOX_OK);
  memset(&t, 0, sizeof t);
  t.struct_size = sizeof t;
  REQUIRE(shmbox_owner_transfer(o, &t) == SHMBOX_OK);
  CHECK(t.reason == SHMBOX_TRANSFER_OWNER_DIED);
  CHECK(t.from_pid == (uint32_t)owner.pid && t.to_pid == (uint32_t)getpid());
  CHECK(strcmp(t.data, "c-heir") == 0 && t.data_size == 6);
  CHECK(shmbox_owner_epoch(o) == t.epoch);
  for (i = 0; i < 5; ++i) {
    char want[8];
    snprintf(want, sizeof want, "m%d", i);
    REQUIRE(shmbox_receive(o, buf, sizeof buf, &size, &mi, 1000000000LL) == SHMBOX_RECV_OK);
    CHECK(size == strlen(want) && memcmp(buf, want, size) == 0);
    redelivered += mi.redelivered;
  }
  CHECK(redelivered == 2);
  CHECK(shmbox_try_receive(o, buf, sizeof buf, &size, NULL) == SHMBOX_RECV_EMPTY);
  {
    int ok = 0;
    CHECK(shmbox_verify(name, NULL, NULL, &ok) == SHMBOX_OK);
    CHECK(ok == 1);
  }
  shmbox_owner_close(o);
  shmbox_heir_close(h);
  shmbox_producer_close(p);
  shmbox_box_close(b);
}

/* A fork child (no exec) that uses and closes its copies of this process's
 * owner, producer, heir and box handles: every call through a copy fails
 * (the owner's not-owner, the others SHMBOX_E_INHERITED_HANDLE), and its
 * closes free only the child's copies: this process is still the owner
 * (receive works, info shows it), the producer and the heir, whose entry
 * still takes over when box B's owner dies. The child leaves by _exit: its
 * exit() would run this process's atexit handlers (they remove the boxes). */
static void test_fork_roles(void) {
  const char* name = new_name("fork");
  const char* other = new_name("fork-heir");
  shmbox_box* b = create_box(name, 8, SHMBOX_REJECT);
  shmbox_box* b2 = create_box(other, 8, SHMBOX_REJECT);
  shmbox_owner* o = NULL;
  shmbox_owner* o2 = NULL;
  shmbox_producer* p = NULL;
  shmbox_producer* p2 = NULL;
  shmbox_heir* h = NULL;
  shmbox_info info;
  shmbox_heir_info heirs[2];
  child owner2;
  char line[64], buf[64];
  size_t size = 0;
  uint64_t epoch;
  pid_t kid;
  int st = 0;

  REQUIRE(shmbox_owner_acquire_box(b, &o) == SHMBOX_OK);
  REQUIRE(shmbox_producer_attach_box(b, &p) == SHMBOX_OK);
  epoch = shmbox_owner_epoch(o);
  /* box B: owned by another process, this one its heir */
  REQUIRE(shmbox_producer_attach_box(b2, &p2) == SHMBOX_OK);
  REQUIRE(shmbox_post(p2, "b0", 2) == SHMBOX_STORED);
  owner2 = spawn("read-and-hang", other, "1", "");
  read_line(&owner2, line, sizeof line);
  REQUIRE(strcmp(line, "ready") == 0);
  REQUIRE(shmbox_heir_enlist(other, "c-fork", 6, &h) == SHMBOX_OK);

  fflush(NULL);
  kid = fork();
  REQUIRE(kid >= 0);
  if (kid == 0) {
    int code = 0;
    shmbox_owner* stolen = NULL;
    if (shmbox_try_receive(o, buf, sizeof buf, &size, NULL) != SHMBOX_RECV_NOT_OWNER) code = 10;
    else if (shmbox_owner_notify_fd(o) != -1) code = 11;
    else if (shmbox_post(p, "child", 5) != SHMBOX_POST_ERROR) code = 12;
    else if (shmbox_last_error() != SHMBOX_E_INHERITED_HANDLE) code = 13;
    else if (shmbox_producer_last_error(p) != SHMBOX_E_INHERITED_HANDLE) code = 14;
    else if (shmbox_heir_await(h, 0, &stolen) != SHMBOX_E_INHERITED_HANDLE) code = 15;
    shmbox_owner_close(o);
    shmbox_producer_close(p);
    shmbox_producer_close(p2);
    shmbox_heir_close(h);
    shmbox_box_close(b);
    shmbox_box_close(b2);
    _exit(code);
  }
  while (waitpid(kid, &st, 0) < 0 && errno == EINTR) {
  }
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);

  /* still the owner of A, under the same epoch, and its producer */
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  REQUIRE(shmbox_box_info(b, &info, NULL, 0, NULL, 0) == SHMBOX_OK);
  CHECK(info.owner_pid == (uint32_t)getpid() && info.owner_alive);
  CHECK(info.epoch == epoch);
  CHECK(info.depth == 0);
  CHECK(shmbox_post(p, "after", 5) == SHMBOX_STORED);
  CHECK(shmbox_receive(o, buf, sizeof buf, &size, NULL, 5000000000LL) == SHMBOX_RECV_OK);
  CHECK(size == 5 && memcmp(buf, "after", 5) == 0);
  /* still B's heir: it takes over when B's owner dies */
  memset(heirs, 0, sizeof heirs);
  heirs[0].struct_size = heirs[1].struct_size = sizeof heirs[0];
  REQUIRE(shmbox_box_info(b2, &info, NULL, 0, heirs, 2) == SHMBOX_OK);
  CHECK(info.heir_count == 1 && heirs[0].alive && heirs[0].pid == (uint32_t)getpid());
  kill(owner2.pid, SIGKILL);
  CHECK(reap(&owner2) == 128 + SIGKILL);
  CHECK(shmbox_heir_await(h, 10000000000LL, &o2) == SHMBOX_OK);
  if (o2 != NULL) {
    CHECK(shmbox_receive(o2, buf, sizeof buf, &size, NULL, 1000000000LL) == SHMBOX_RECV_OK);
    CHECK(size == 2 && memcmp(buf, "b0", 2) == 0);
    shmbox_owner_close(o2);
  }
  shmbox_heir_close(h);
  shmbox_producer_close(p2);
  shmbox_producer_close(p);
  shmbox_owner_close(o);
  shmbox_box_close(b2);
  shmbox_box_close(b);
}

/* A give-away to a listener in another process, with data. */
static void test_give_away(void) {
  const char* name = new_name("give");
  shmbox_box* b = create_box(name, 8, SHMBOX_REJECT);
  shmbox_owner* o = NULL;
  shmbox_producer* p = NULL;
  child l;
  char line[128];

  REQUIRE(shmbox_owner_acquire_box(b, &o) == SHMBOX_OK);
  REQUIRE(shmbox_producer_attach_box(b, &p) == SHMBOX_OK);
  CHECK(shmbox_post(p, "a", 1) == SHMBOX_STORED);
  CHECK(shmbox_post(p, "b", 1) == SHMBOX_STORED);
  l = spawn("listen", name, "", "");
  read_line(&l, line, sizeof line);
  REQUIRE(strcmp(line, "ready") == 0);
  CHECK(shmbox_owner_give_away(o, (uint32_t)getpid(), "x", 1, 1000000) == 0); /* not to itself */
  CHECK(shmbox_last_error() == SHMBOX_E_INVALID_ARGUMENT);
  CHECK(shmbox_owner_max_message_size(o) == 64);
  if (shmbox_owner_give_away(o, (uint32_t)l.pid, "hello", 5, 10000000000LL) != 1) {
    fprintf(stderr, "give-away failed: %s\n", shmbox_last_error_message());
    CHECK(!"give-away to the listener");
  }
  {
    char buf[64];
    size_t size = 0;
    CHECK(shmbox_receive(o, buf, sizeof buf, &size, NULL, 0) == SHMBOX_RECV_NOT_OWNER);
  }
  read_line(&l, line, sizeof line);
  CHECK(strcmp(line, "got 2 hello 2") == 0);
  CHECK(reap(&l) == 0);
  shmbox_producer_close(p);
  shmbox_owner_close(o);
  shmbox_box_close(b);
}

/* notify through the fd and poll(); active with a C filter that drops
 * messages starting with 'x' and rewrites the others. */
static int upper_filter(void* ctx, void* data, size_t* size, size_t cap) {
  char* s = (char*)data;
  size_t i;
  int* calls = (int*)ctx;
  ++*calls;
  if (*size > 0 && s[0] == 'x') return SHMBOX_DROP;
  if (*size > 0 && s[0] == 's') return SHMBOX_SKIP;
  for (i = 0; i < *size; ++i) s[i] = (char)(s[i] >= 'a' && s[i] <= 'z' ? s[i] - 32 : s[i]);
  if (*size + 1 <= cap) s[(*size)++] = '!';
  return SHMBOX_DELIVER;
}

static void test_notify_and_filter(void) {
  const char* name = new_name("notify");
  shmbox_box* b = create_box(name, 16, SHMBOX_REJECT);
  shmbox_owner* o = NULL;
  shmbox_producer* p = NULL;
  struct pollfd pfd;
  child pr;
  char line[64];
  uint64_t dropped = 99;
  int fd, calls = 0;
  size_t i, size = 0;
  const void* d = NULL;

  REQUIRE(shmbox_owner_acquire_box(b, &o) == SHMBOX_OK);
  fd = shmbox_owner_notify_fd(o);
  REQUIRE(fd >= 0);
  shmbox_owner_notify(o);
  CHECK(shmbox_owner_mode(o) == SHMBOX_NOTIFY);
  CHECK(shmbox_owner_wait(o, 0, &dropped) == SHMBOX_EVENT_NONE);
  pfd.fd = fd;
  pfd.events = POLLIN;
  pfd.revents = 0;
  CHECK(poll(&pfd, 1, 0) == 0);
  pr = spawn("produce", name, "1", "4");
  CHECK(poll(&pfd, 1, 10000) == 1);
  CHECK(shmbox_owner_wait(o, 0, &dropped) == SHMBOX_EVENT_NOTIFIED);
  CHECK(shmbox_owner_mode(o) == SHMBOX_PASSIVE);
  read_line(&pr, line, sizeof line);
  CHECK(strcmp(line, "done") == 0);
  CHECK(reap(&pr) == 0);
  /* take the 4 posted, then arm active with the filter */
  CHECK(shmbox_receive_batch(o, 10, 0, &i) == SHMBOX_RECV_OK && i == 4);
  REQUIRE(shmbox_producer_attach_box(b, &p) == SHMBOX_OK);
  CHECK(shmbox_post(p, "abc", 3) == SHMBOX_STORED);
  CHECK(shmbox_post(p, "xdrop", 5) == SHMBOX_STORED);
  CHECK(shmbox_post(p, "de", 2) == SHMBOX_STORED);
  CHECK(shmbox_post(p, "stay", 4) == SHMBOX_STORED);
  CHECK(shmbox_post(p, "after", 5) == SHMBOX_STORED);
  shmbox_owner_active(o, upper_filter, &calls, 10);
  CHECK(shmbox_owner_wait(o, 5000000000LL, &dropped) == SHMBOX_EVENT_DELIVERED);
  CHECK(dropped == 1);
  CHECK(shmbox_batch_size(o) == 2);
  REQUIRE(shmbox_batch_message(o, 0, &d, &size, NULL) == SHMBOX_OK);
  CHECK(size == 4 && memcmp(d, "ABC!", 4) == 0);
  REQUIRE(shmbox_batch_message(o, 1, &d, &size, NULL) == SHMBOX_OK);
  CHECK(size == 3 && memcmp(d, "DE!", 3) == 0);
  CHECK(calls == 4);
  /* "stay" and "after" are still there: a plain deliver takes them */
  CHECK(shmbox_owner_deliver(o, 10, NULL, NULL, &dropped) == SHMBOX_RECV_OK);
  CHECK(shmbox_batch_size(o) == 2 && dropped == 0);
  CHECK(shmbox_owner_deliver(o, 10, NULL, NULL, &dropped) == SHMBOX_RECV_EMPTY);
  {
    shmbox_counters c;
    memset(&c, 0, sizeof c);
    c.struct_size = sizeof c;
    REQUIRE(shmbox_box_counters(b, &c) == SHMBOX_OK);
    CHECK(c.filtered == 1 && c.posted == 9 && c.delivered == 8);
  }
  shmbox_producer_close(p);
  shmbox_owner_close(o);
  shmbox_box_close(b);
}

/* A notify group: two owners, one descriptor; a producer process wakes the
 * second; its tag comes out once; joining refused after a notify fd. */
static void test_notify_group(void) {
  const char* n1 = new_name("grp1");
  const char* n2 = new_name("grp2");
  shmbox_box* b1 = create_box(n1, 8, SHMBOX_REJECT);
  shmbox_box* b2 = create_box(n2, 8, SHMBOX_REJECT);
  shmbox_owner *o1 = NULL, *o2 = NULL;
  shmbox_notify_group* g = NULL;
  struct pollfd pfd;
  child pr;
  char line[64];
  uint64_t tags[4] = {0, 0, 0, 0}, dropped = 0;
  size_t k;

  CHECK(shmbox_notify_group_create(NULL) == SHMBOX_E_INVALID_ARGUMENT);
  REQUIRE(shmbox_notify_group_create(&g) == SHMBOX_OK);
  REQUIRE(shmbox_owner_acquire_box(b1, &o1) == SHMBOX_OK);
  REQUIRE(shmbox_owner_acquire_box(b2, &o2) == SHMBOX_OK);
  CHECK(shmbox_owner_join(o1, g, 71) == SHMBOX_OK);
  CHECK(shmbox_owner_join(o2, g, 72) == SHMBOX_OK);
  CHECK(shmbox_owner_notify_fd(o1) == -1); /* a member has none */
  shmbox_owner_notify(o1);
  shmbox_owner_notify(o2);
  pfd.fd = shmbox_notify_group_fd(g);
  pfd.events = POLLIN;
  pfd.revents = 0;
  REQUIRE(pfd.fd >= 0);
  CHECK(poll(&pfd, 1, 0) == 0);
  pr = spawn("produce", n2, "1", "2");
  CHECK(poll(&pfd, 1, 10000) == 1);
  read_line(&pr, line, sizeof line);
  CHECK(strcmp(line, "done") == 0);
  CHECK(reap(&pr) == 0);
  k = shmbox_notify_group_ready(g, tags, 4);
  CHECK(k == 1 && tags[0] == 72);
  CHECK(shmbox_notify_group_ready(g, tags, 4) == 0);
  CHECK(shmbox_owner_wait(o2, 0, &dropped) == SHMBOX_EVENT_NOTIFIED);
  CHECK(shmbox_receive_batch(o2, 10, 0, &k) == SHMBOX_RECV_OK && k == 2);
  CHECK(shmbox_notify_group_ready(NULL, tags, 4) == 0);
  shmbox_owner_leave_group(o1);
  CHECK(shmbox_owner_notify_fd(o1) >= 0);
  CHECK(shmbox_owner_join(o1, g, 71) == SHMBOX_E_INVALID_ARGUMENT); /* one or the other */
  shmbox_notify_group_close(g);
  shmbox_owner_close(o1);
  shmbox_owner_close(o2);
  shmbox_box_close(b1);
  shmbox_box_close(b2);
}

/* Batches, drop-newest, two-phase read, the stash, priorities, lanes. */
static int64_t leading_number(void* ctx, const void* data, size_t size) {
  (void)ctx;
  return size > 0 ? (int64_t)(((const char*)data)[0] - '0') : 0;
}

static void test_batch_stash_priority(void) {
  const char* name = new_name("misc");
  const char* pname = new_name("prio");
  shmbox_box* b = create_box(name, 4, SHMBOX_DROP_NEWEST);
  shmbox_box* pb = NULL;
  shmbox_producer* p = NULL;
  shmbox_owner* o = NULL;
  shmbox_options opts;
  const char* msgs[6] = {"m0", "m1", "m2", "m3", "m4", "m5"};
  const void* data[6];
  size_t sizes[6], n = 0, lost = 7, i, size = 0;
  int last = -1;
  char buf[64];

  for (i = 0; i < 6; ++i) {
    data[i] = msgs[i];
    sizes[i] = 2;
  }
  REQUIRE(shmbox_producer_attach_box(b, &p) == SHMBOX_OK);
  CHECK(shmbox_post_batch(p, data, sizes, 6, NULL, &last) == 4);
  CHECK(last == SHMBOX_DROPPED);
  REQUIRE(shmbox_owner_acquire_box(b, &o) == SHMBOX_OK);
  CHECK(shmbox_read(o, 2, 0, &n) == SHMBOX_RECV_OK && n == 2);
  CHECK(shmbox_commit(o, &lost) == SHMBOX_RECV_OK && lost == 0);
  /* no stash in this box */
  CHECK(shmbox_stash(o, "m2", 2, 0) == SHMBOX_RECV_ERROR);
  CHECK(shmbox_owner_last_error(o) == SHMBOX_E_INVALID_ARGUMENT);
  shmbox_owner_close(o);
  shmbox_producer_close(p);
  shmbox_box_close(b);

  /* a priority box with a stash-free, two-lane layout: lane 0 first, then priority order */
  shmbox_options_init(&opts);
  opts.capacity = 16;
  opts.slot_size = 32;
  opts.priority = 1;
  {
    shmbox_lane_options lanes[2];
    lanes[0].capacity = 4;
    lanes[0].overflow = SHMBOX_DEFAULT;
    lanes[0].max_capacity = 0;
    lanes[1].capacity = 16;
    lanes[1].overflow = SHMBOX_DEFAULT;
    lanes[1].max_capacity = 0;
    opts.lane_count = 2;
    opts.lanes = lanes;
    REQUIRE(shmbox_box_create(pname, &opts, &pb) == SHMBOX_OK);
  }
  CHECK(shmbox_box_lane_count(pb) == 2 && shmbox_box_default_lane(pb) == 1);
  REQUIRE(shmbox_producer_attach_box(pb, &p) == SHMBOX_OK);
  shmbox_producer_set_priority_function(p, leading_number, NULL);
  CHECK(shmbox_post(p, "5five", 5) == SHMBOX_STORED);
  CHECK(shmbox_post(p, "2two", 4) == SHMBOX_STORED);
  CHECK(shmbox_post(p, "9nine", 5) == SHMBOX_STORED);
  {
    shmbox_post_options po;
    shmbox_post_options_init(&po);
    po.has_priority = 1;
    po.priority = 1; /* overrides the function's 7 */
    CHECK(shmbox_post_ex(p, "7one", 4, &po) == SHMBOX_STORED);
    po.lane = 0;
    po.has_priority = 0;
    CHECK(shmbox_post_ex(p, "control", 7, &po) == SHMBOX_STORED);
    po.lane = 5;
    CHECK(shmbox_post_ex(p, "nolane", 6, &po) == SHMBOX_POST_ERROR);
    CHECK(shmbox_producer_last_error(p) == SHMBOX_E_INVALID_ARGUMENT);
  }
  REQUIRE(shmbox_owner_acquire_box(pb, &o) == SHMBOX_OK);
  {
    const char* want[5] = {"control", "7one", "2two", "5five", "9nine"};
    shmbox_msg_info mi;
    for (i = 0; i < 5; ++i) {
      REQUIRE(shmbox_receive(o, buf, sizeof buf, &size, &mi, 1000000000LL) == SHMBOX_RECV_OK);
      CHECK(size == strlen(want[i]) && memcmp(buf, want[i], size) == 0);
      CHECK(mi.lane == (i == 0 ? 0u : 1u));
    }
  }
  {
    shmbox_info info;
    shmbox_lane_info lanes[4];
    memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    memset(lanes, 0, sizeof lanes);
    for (i = 0; i < 4; ++i) lanes[i].struct_size = sizeof lanes[0];
    REQUIRE(shmbox_box_info(pb, &info, lanes, 4, NULL, 0) == SHMBOX_OK);
    CHECK(info.priority == 1 && info.lane_count == 2 && info.capacity == 20);
    CHECK(lanes[0].capacity == 4 && lanes[1].capacity == 16);
    CHECK(lanes[0].count.delivered == 1 && lanes[1].count.delivered == 4);
    CHECK(info.owner_pid == (uint32_t)getpid() && info.owner_alive && info.owner_same_namespace);
    CHECK(info.count.delivered == 5 && info.depth == 0);
    CHECK(lanes[2].struct_size == sizeof lanes[0] && lanes[2].capacity == 0); /* untouched */
  }
  shmbox_owner_close(o);
  shmbox_producer_close(p);
  shmbox_box_close(pb);
}

static void test_stash(void) {
  const char* name = new_name("stash");
  shmbox_box* b = NULL;
  shmbox_producer* p = NULL;
  shmbox_owner* o = NULL;
  shmbox_options opts;
  shmbox_msg_info mi;
  char buf[64];
  size_t size = 0;

  shmbox_options_init(&opts);
  opts.capacity = 8;
  opts.slot_size = 32;
  opts.stash = 2;
  REQUIRE(shmbox_box_create(name, &opts, &b) == SHMBOX_OK);
  REQUIRE(shmbox_producer_attach_box(b, &p) == SHMBOX_OK);
  REQUIRE(shmbox_owner_acquire_box(b, &o) == SHMBOX_OK);
  CHECK(shmbox_post(p, "first", 5) == SHMBOX_STORED);
  CHECK(shmbox_post(p, "second", 6) == SHMBOX_STORED);
  REQUIRE(shmbox_receive(o, buf, sizeof buf, &size, &mi, 0) == SHMBOX_RECV_OK);
  CHECK(shmbox_stash(o, buf, size, mi.lane) == SHMBOX_RECV_OK);
  CHECK(shmbox_stashed(o) == 1);
  REQUIRE(shmbox_receive(o, buf, sizeof buf, &size, NULL, 0) == SHMBOX_RECV_OK);
  CHECK(size == 6 && memcmp(buf, "second", 6) == 0);
  CHECK(shmbox_unstash_all(o) == 1);
  REQUIRE(shmbox_receive(o, buf, sizeof buf, &size, NULL, 0) == SHMBOX_RECV_OK);
  CHECK(size == 5 && memcmp(buf, "first", 5) == 0);
  CHECK(shmbox_stashed(o) == 0);
  shmbox_owner_close(o);
  shmbox_producer_close(p);
  shmbox_box_close(b);
}

static void count_name(void* ctx, const char* name) {
  int* found = (int*)ctx;
  if (box_count > 0 && strcmp(name, box_names[box_count - 1]) == 0) ++*found;
}

static void test_list_and_resize(void) {
  const char* name = new_name("list");
  shmbox_box* b = NULL;
  shmbox_box* ro = NULL;
  shmbox_options opts;
  shmbox_resize_report r;
  int found = 0;

  shmbox_options_init(&opts);
  opts.capacity = 4;
  opts.max_capacity = 16;
  REQUIRE(shmbox_box_create(name, &opts, &b) == SHMBOX_OK);
  CHECK(shmbox_box_list(count_name, &found) == SHMBOX_OK);
  CHECK(found == 1);
  memset(&r, 0, sizeof r);
  r.struct_size = sizeof r;
  CHECK(shmbox_box_resize(b, 12, SHMBOX_DEFAULT, &r) == SHMBOX_OK);
  CHECK(r.before == 4 && r.after == 12 && r.max_capacity == 16);
  CHECK(shmbox_box_resize(b, 17, SHMBOX_DEFAULT, NULL) == SHMBOX_E_INVALID_ARGUMENT);
  REQUIRE(shmbox_box_inspect(name, &ro) == SHMBOX_OK);
  CHECK(shmbox_box_capacity(ro) == 12);
  CHECK(strcmp(shmbox_box_name(ro), name) == 0);
  CHECK(strcmp(shmbox_version(), SHMBOX_VERSION_STRING) == 0);
  shmbox_box_close(ro);
  shmbox_box_close(b);
}

/* THE TRUST RULE T5: a segment truncated under a handle is SHMBOX_E_TRUNCATED
 * for that handle (its pages beyond the new end read as zeros), not a SIGBUS. */
static void test_intact(void) {
  const char* name = new_name("intact");
  char path[200];
  shmbox_box* b = NULL;
  shmbox_options opts;
  shmbox_counters c;

  shmbox_options_init(&opts);
  opts.capacity = 64;
  opts.slot_size = 4096;
  REQUIRE(shmbox_box_create(name, &opts, &b) == SHMBOX_OK);
  CHECK(shmbox_box_intact(b) == SHMBOX_OK);
  snprintf(path, sizeof path, "/dev/shm/shmbox.%s", name);
  REQUIRE(truncate(path, 4096) == 0);
  memset(&c, 0, sizeof c);
  c.struct_size = sizeof c;
  (void)shmbox_box_counters(b, &c); /* reads the lanes and producers beyond the new end */
  CHECK(shmbox_box_intact(b) == SHMBOX_E_TRUNCATED);
  CHECK(strstr(shmbox_last_error_message(), "shrank") != NULL);
  CHECK(shmbox_box_intact(NULL) == SHMBOX_E_INVALID_ARGUMENT);
  shmbox_box_close(b);
}

/* A quota (shmbox_options.quota): each producer's share of a lane;
 * over it SHMBOX_OVER_QUOTA, counted in quota_refused (and rejected). The
 * lane array of shmbox_box_info is walked by its elements' struct_size: an
 * older caller's shorter elements get their fields, not a shifted copy. */
static void test_quota(void) {
  const char* name = new_name("quota");
  shmbox_box* b = NULL;
  shmbox_box* bad = NULL;
  shmbox_producer* p1 = NULL;
  shmbox_producer* p2 = NULL;
  shmbox_options opts;
  shmbox_lane_options lo[2];
  shmbox_counters c;
  shmbox_info info;
  shmbox_lane_info lanes[2];
  /* Two elements as a caller built before quotas lays them out: shorter
   * (read and written through memcpy at the caller's stride). */
  enum { kOld = offsetof(shmbox_lane_info, quota) };
  shmbox_lane_info old_lanes[2];
  unsigned char* old_bytes = (unsigned char*)old_lanes;
  uint32_t u32;
  uint64_t u64;
  int k;

  shmbox_options_init(&opts);
  memset(lo, 0, sizeof lo);
  lo[0].overflow = lo[1].overflow = SHMBOX_DEFAULT;
  opts.capacity = 8;
  opts.quota = 2;
  opts.lane_count = 2;
  opts.lanes = lo;
  REQUIRE(shmbox_box_create(name, &opts, &b) == SHMBOX_OK);
  REQUIRE(shmbox_producer_attach_box(b, &p1) == SHMBOX_OK);
  REQUIRE(shmbox_producer_attach_box(b, &p2) == SHMBOX_OK);
  CHECK(shmbox_post(p1, "a", 1) == SHMBOX_STORED);
  CHECK(shmbox_post(p1, "b", 1) == SHMBOX_STORED);
  CHECK(shmbox_post(p1, "c", 1) == SHMBOX_OVER_QUOTA);
  CHECK(shmbox_post(p2, "d", 1) == SHMBOX_STORED);
  CHECK(strcmp(shmbox_post_status_string(SHMBOX_OVER_QUOTA), "over-quota") == 0);
  memset(&c, 0, sizeof c);
  c.struct_size = sizeof c;
  CHECK(shmbox_box_counters(b, &c) == SHMBOX_OK);
  CHECK(c.quota_refused == 1 && c.rejected == 1 && c.stored == 3);
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  memset(lanes, 0, sizeof lanes);
  lanes[0].struct_size = lanes[1].struct_size = sizeof lanes[0];
  CHECK(shmbox_box_info(b, &info, lanes, 2, NULL, 0) == SHMBOX_OK);
  CHECK(lanes[0].quota == 2 && lanes[1].quota == 2);
  CHECK(lanes[1].count.quota_refused == 1 && lanes[1].depth == 3 && lanes[0].depth == 0);
  memset(old_lanes, 0, sizeof old_lanes);
  u32 = kOld;
  for (k = 0; k < 2; ++k) memcpy(old_bytes + k * kOld + offsetof(shmbox_lane_info, struct_size), &u32, sizeof u32);
  CHECK(shmbox_box_info(b, &info, old_lanes, 2, NULL, 0) == SHMBOX_OK);
  memcpy(&u64, old_bytes + kOld + offsetof(shmbox_lane_info, depth), sizeof u64);
  CHECK(u64 == 3);
  memcpy(&u32, old_bytes + kOld + offsetof(shmbox_lane_info, capacity), sizeof u32);
  CHECK(u32 == 8);
  memcpy(&u32, old_bytes + kOld + offsetof(shmbox_lane_info, struct_size), sizeof u32);
  CHECK(u32 == kOld);
  for (k = 2 * kOld; k < (int)sizeof old_lanes; ++k) CHECK(old_bytes[k] == 0);  /* nothing past the caller's 2 elements */
  opts.overflow = SHMBOX_DROP_OLDEST;
  CHECK(shmbox_box_create(new_name("quota-bad"), &opts, &bad) == SHMBOX_E_INVALID_ARGUMENT);
  CHECK(bad == NULL);
  shmbox_producer_close(p1);
  shmbox_producer_close(p2);
  shmbox_box_close(b);
}

/* shmbox_peek's view of a request (shmbox_peek_info.envelope, SHMBOX_0.4):
 * counts the messages peeked, and those that are requests whose body is "three". */
typedef struct peeked_requests {
  int n, three;
} peeked_requests;

static void on_peek_request(void* ctx, const void* data, size_t size, const shmbox_peek_info* info) {
  peeked_requests* pr = (peeked_requests*)ctx;
  ++pr->n;
  if (info->struct_size >= offsetof(shmbox_peek_info, envelope) + sizeof info->envelope && info->envelope != NULL &&
      strcmp(info->envelope, "request") == 0 && size == 5 && memcmp(data, "three", 5) == 0)
    ++pr->three;
}

/* Request/reply (shmbox_requester_*, shmbox_ask*, shmbox_reply_*): the
 * requester and the owner in one process (tests/request/request.cpp has
 * them in separate ones, killed). */
static void test_request(void) {
  const char* name = new_name("req");
  shmbox_box* b = NULL;
  shmbox_owner* o = NULL;
  shmbox_producer* p = NULL;
  shmbox_requester* r = NULL;
  shmbox_options opts;
  shmbox_requester_options ro;
  shmbox_requester_stats st;
  shmbox_msg_meta meta;
  char buf[256];
  size_t n = 0, count = 0;
  uint64_t t1 = 0, t2 = 0, t3 = 0;

  shmbox_options_init(&opts);
  opts.capacity = 8;
  opts.slot_size = 128;
  REQUIRE(shmbox_box_create(name, &opts, &b) == SHMBOX_OK);
  REQUIRE(shmbox_owner_acquire_box(b, &o) == SHMBOX_OK);
  shmbox_requester_options_init(&ro);
  ro.max_outstanding = 3;
  REQUIRE(shmbox_requester_attach(name, &ro, &r) == SHMBOX_OK);
  CHECK(shmbox_requester_max_request(r) == 128 - 40);
  CHECK(shmbox_requester_max_reply(r) == 128);
  CHECK(shmbox_requester_notify_fd(r) >= 0);
  CHECK(shmbox_ask(r, "one", 3, 0, &t1) == SHMBOX_STORED && t1 == 1);
  CHECK(shmbox_ask(r, "two", 3, 0, &t2) == SHMBOX_STORED && t2 == 2);
  /* One receive, answered after it (shmbox_reply_last). */
  shmbox_msg_meta_init(&meta);
  CHECK(shmbox_receive_meta(o, buf, sizeof buf, &n, &meta, 0) == SHMBOX_RECV_OK);
  CHECK(n == 3 && memcmp(buf, "one", 3) == 0);
  CHECK(meta.is_request == 1 && meta.answered == 0);
  CHECK(shmbox_reply_last(o, "ONE", 3) == SHMBOX_REPLY_OK);
  /* A read one, answered before its commit (shmbox_reply_batch). */
  CHECK(shmbox_read(o, 4, 0, &count) == SHMBOX_RECV_OK && count == 1);
  CHECK(shmbox_reply_batch(o, 0, "TWO", 3) == SHMBOX_REPLY_OK);
  CHECK(shmbox_reply_batch(o, 1, "x", 1) == SHMBOX_REPLY_ERROR);
  CHECK(shmbox_commit(o, NULL) == SHMBOX_RECV_OK);
  CHECK(shmbox_ask_wait(r, t2, buf, 8, &n, 0, 0) == SHMBOX_REPLY_ERROR); /* buf smaller than the largest reply */
  CHECK(shmbox_ask_wait(r, t2, buf, sizeof buf, &n, 1000000000, 0) == SHMBOX_REPLY_OK);
  CHECK(n == 3 && memcmp(buf, "TWO", 3) == 0);
  CHECK(shmbox_ask_wait(r, t1, buf, sizeof buf, &n, 0, 0) == SHMBOX_REPLY_OK); /* it came meanwhile: kept */
  CHECK(n == 3 && memcmp(buf, "ONE", 3) == 0);
  CHECK(shmbox_ask_wait(r, t1, buf, sizeof buf, &n, 0, 0) == SHMBOX_REPLY_ERROR); /* answered already */
  /* A plain post is no request. */
  REQUIRE(shmbox_producer_attach_box(b, &p) == SHMBOX_OK);
  CHECK(shmbox_post(p, "plain", 5) == SHMBOX_STORED);
  shmbox_msg_meta_init(&meta);
  CHECK(shmbox_receive_meta(o, buf, sizeof buf, &n, &meta, 0) == SHMBOX_RECV_OK);
  CHECK(meta.is_request == 0);
  CHECK(shmbox_reply_last(o, "x", 1) == SHMBOX_REPLY_NOT_A_REQUEST);
  /* A timeout ends the request; keep leaves it waiting. */
  CHECK(shmbox_ask(r, "three", 5, 0, &t3) == SHMBOX_STORED);
  CHECK(shmbox_ask_wait(r, t3, buf, sizeof buf, &n, 0, 1) == SHMBOX_REPLY_TIMEOUT);
  CHECK(shmbox_ask_wait(r, t3, buf, sizeof buf, &n, 1000000, 0) == SHMBOX_REPLY_TIMEOUT);
  CHECK(shmbox_ask_wait(r, t3, buf, sizeof buf, &n, 0, 0) == SHMBOX_REPLY_ERROR);
  {
    /* "three" is still in the box: peek shows its body, as its owner would receive it. */
    peeked_requests pr = {0, 0};
    CHECK(shmbox_peek(b, 8, on_peek_request, &pr, NULL) == SHMBOX_OK);
    CHECK(pr.n == 1 && pr.three == 1);
  }
  memset(&st, 0, sizeof st);
  st.struct_size = sizeof st;
  CHECK(shmbox_requester_stats_get(r, &st) == SHMBOX_OK);
  CHECK(st.asked == 3 && st.replied == 2 && st.timed_out == 1 && st.late == 0);
  /* The box's reply counters (SHMBOX_0.4 fields of shmbox_info): ONE and TWO
   * sent; the failed shmbox_reply_batch counted nowhere. */
  {
    shmbox_info info;
    memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    REQUIRE(shmbox_box_info(b, &info, NULL, 0, NULL, 0) == SHMBOX_OK);
    CHECK(info.replies_sent == 2 && info.replies_lost == 0 && info.replies_skipped == 0);
    CHECK(info.reply_box == 0);
  }
  CHECK(strcmp(shmbox_reply_status_string(SHMBOX_REPLY_ALREADY_REPLIED), "already-replied") == 0);
  CHECK(strcmp(shmbox_reply_status_string(99), "unknown") == 0);
  CHECK(shmbox_requester_attach(NULL, NULL, &r) == SHMBOX_E_INVALID_ARGUMENT);
  CHECK(shmbox_ask(NULL, "x", 1, 0, &t1) == SHMBOX_POST_ERROR);
  shmbox_requester_close(r);
  shmbox_producer_close(p);
  shmbox_owner_close(o);
  shmbox_box_close(b);
}

/* Runs the CLI ($SHMBOX_CLI) with up to 20 arguments; its exit status. */
static int cli(const char* const* args) {
  const char* path = getenv("SHMBOX_CLI");
  const char* argv[22];
  int i, st = 0;
  pid_t pid;
  REQUIRE(path != NULL);
  argv[0] = path;
  for (i = 0; args[i] != NULL && i < 20; ++i) argv[i + 1] = args[i];
  argv[i + 1] = NULL;
  pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    int devnull = open("/dev/null", O_WRONLY);
    if (devnull >= 0) dup2(devnull, 1);
    execv(path, (char* const*)argv);
    _exit(127);
  }
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static char pool_name[160];

static void remove_pool(void) {
  if (pool_name[0] != '\0') {
    const char* args[] = {"pool", "rm", pool_name, "--now", "--timeout", "10s", NULL};
    cli(args);
  }
}

/* A pool of C members (this program's `member` role) supervised by `shmbox
 * pool run`: a C taker leases a member, posts through the lease's producer
 * (each message names a reply box the member answers into), gives it back,
 * and a second give-back is a double return. Needs $SHMBOX_CLI. */
static void test_pool(void) {
  const char* reply = new_name("reply");
  shmbox_box* rb = create_box(reply, 16, SHMBOX_REJECT);
  shmbox_owner* ro = NULL;
  shmbox_pool* pool = NULL;
  shmbox_lease* lease = NULL;
  char command[512], line[256], buf[64];
  const char* run = getenv("SHMBOX_TEST_RUN");
  child sup;
  long i;

  if (getenv("SHMBOX_CLI") == NULL) {
    fprintf(stderr, "c-api-test: SHMBOX_CLI is not set: the pool case needs the CLI (meson test sets it)\n");
    ++failures;
    return;
  }
  snprintf(pool_name, sizeof pool_name, "t-%s-capi-%ld-pool", run ? run : "c", (long)getpid());
  atexit(remove_pool);
  {
    char exe[256];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    REQUIRE(n > 0);
    exe[n] = '\0';
    snprintf(command, sizeof command, "exec '%s' member", exe);
  }
  {
    const char* args[] = {"pool", "create", pool_name, "--command", command, "--init", "1", "--max", "2",
                          "--capacity", "16", "--slot-size", "128", NULL};
    REQUIRE(cli(args) == 0);
  }
  REQUIRE(shmbox_owner_acquire_box(rb, &ro) == SHMBOX_OK);
  {
    /* the supervisor: `shmbox pool run`, as a child (stdout: its event lines) */
    int fds[2];
    REQUIRE(pipe(fds) == 0);
    sup.pid = fork();
    REQUIRE(sup.pid >= 0);
    if (sup.pid == 0) {
      const char* path = getenv("SHMBOX_CLI");
      close(fds[0]);
      dup2(fds[1], 1);
      execl(path, path, "pool", "run", pool_name, (char*)NULL);
      _exit(127);
    }
    close(fds[1]);
    sup.out = fdopen(fds[0], "r");
    REQUIRE(sup.out != NULL);
  }
  REQUIRE(shmbox_pool_open(pool_name, 0, &pool) == SHMBOX_OK);
  /* the take waits (up to 20 s) for the supervisor to start the member */
  REQUIRE(shmbox_pool_take(pool, 20000000000LL, &lease) == SHMBOX_OK);
  CHECK(strncmp(shmbox_lease_box(lease), pool_name, strlen(pool_name)) == 0);
  for (i = 1; i <= 3; ++i) {
    char want[32];
    size_t size = 0;
    REQUIRE(shmbox_post(shmbox_lease_producer(lease), reply, strlen(reply)) == SHMBOX_STORED);
    REQUIRE(shmbox_receive(ro, buf, sizeof buf, &size, NULL, 10000000000LL) == SHMBOX_RECV_OK);
    snprintf(want, sizeof want, "got %ld", i);
    CHECK(size == strlen(want) && memcmp(buf, want, size) == 0);
  }
  CHECK(shmbox_lease_worker_pid(lease) > 0);
  /* the lease's producer is borrowed: its close is refused (nothing freed),
   * and it keeps working */
  shmbox_producer_close(shmbox_lease_producer(lease));
  CHECK(shmbox_last_error() == SHMBOX_E_INVALID_ARGUMENT);
  CHECK(shmbox_post(shmbox_lease_producer(lease), reply, strlen(reply)) == SHMBOX_STORED);
  {
    size_t size = 0;
    REQUIRE(shmbox_receive(ro, buf, sizeof buf, &size, NULL, 10000000000LL) == SHMBOX_RECV_OK);
    CHECK(size == 5 && memcmp(buf, "got 4", 5) == 0);
  }
  {
    /* a fork child closes its copies of the lease and the pool: nothing is
     * given back (the lease is still ours to give back ok) */
    pid_t kid;
    int st = 0;
    fflush(NULL);
    kid = fork();
    REQUIRE(kid >= 0);
    if (kid == 0) {
      int code = shmbox_lease_give_back(lease, SHMBOX_OUTCOME_OK) == SHMBOX_RETURN_ERROR &&
                         shmbox_last_error() == SHMBOX_E_INHERITED_HANDLE
                     ? 0
                     : 20;
      shmbox_lease_close(lease);
      shmbox_pool_close(pool);
      _exit(code);
    }
    while (waitpid(kid, &st, 0) < 0 && errno == EINTR) {
    }
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  }
  CHECK(shmbox_lease_give_back(lease, SHMBOX_OUTCOME_OK) == SHMBOX_RETURN_OK);
  CHECK(shmbox_lease_give_back(lease, SHMBOX_OUTCOME_OK) == SHMBOX_RETURN_DOUBLE);
  CHECK(shmbox_lease_give_back(lease, 7) == SHMBOX_RETURN_ERROR);
  shmbox_lease_close(lease);
  /* taken again: the same member (the most recently returned), which has
   * now received 5 messages in all */
  REQUIRE(shmbox_pool_take(pool, 10000000000LL, &lease) == SHMBOX_OK);
  {
    size_t size = 0;
    REQUIRE(shmbox_post(shmbox_lease_producer(lease), reply, strlen(reply)) == SHMBOX_STORED);
    REQUIRE(shmbox_receive(ro, buf, sizeof buf, &size, NULL, 10000000000LL) == SHMBOX_RECV_OK);
    CHECK(size == 5 && memcmp(buf, "got 5", 5) == 0);
  }
  {
    /* shmbox_pool_cull: a second member, started for a second take and
     * given back, is culled (down to --init 1); the one in use never is */
    shmbox_lease* second = NULL;
    uint32_t culled = 99;
    REQUIRE(shmbox_pool_take(pool, 20000000000LL, &second) == SHMBOX_OK);
    CHECK(shmbox_lease_give_back(second, SHMBOX_OUTCOME_OK) == SHMBOX_RETURN_OK);
    shmbox_lease_close(second);
    CHECK(shmbox_pool_cull(pool, 3600000, 10000000000LL, &culled) == SHMBOX_OK);
    CHECK(culled == 0);
    CHECK(shmbox_pool_cull(pool, 0, 10000000000LL, &culled) == SHMBOX_OK);
    CHECK(culled == 1);
    CHECK(shmbox_pool_cull(pool, -1, 0, NULL) == SHMBOX_E_INVALID_ARGUMENT);
  }
  {
    /* shmbox_pool_reconfigure: max 2 -> 1 with the one member in use (none
     * to stop): applied by the supervisor; a second take is then refused at
     * capacity instead of starting a member. Bad arguments change nothing. */
    shmbox_pool_changes c;
    shmbox_lease* second = NULL;
    memset(&c, 0, sizeof c);
    c.struct_size = sizeof c;
    c.set = SHMBOX_POOL_SET_MAX_COUNT;
    c.max_count = 3; /* above the table (2 entries) */
    CHECK(shmbox_pool_reconfigure(pool, &c, 10000000000LL) == SHMBOX_E_INVALID_ARGUMENT);
    c.max_count = 1;
    CHECK(shmbox_pool_reconfigure(pool, &c, 10000000000LL) == SHMBOX_OK);
    CHECK(shmbox_pool_take(pool, 0, &second) == SHMBOX_E_NO_MEMBERS_AT_CAPACITY);
    CHECK(second == NULL);
    c.set = 64;
    CHECK(shmbox_pool_reconfigure(pool, &c, 0) == SHMBOX_E_INVALID_ARGUMENT);
    c.struct_size = 0;
    c.set = SHMBOX_POOL_SET_MAX_COUNT;
    CHECK(shmbox_pool_reconfigure(pool, &c, 0) == SHMBOX_E_INVALID_ARGUMENT);
    CHECK(shmbox_pool_reconfigure(pool, NULL, 0) == SHMBOX_E_INVALID_ARGUMENT);
    c.struct_size = sizeof c;
    c.set = SHMBOX_POOL_SET_MAX_COUNT | SHMBOX_POOL_SET_AUTO_GROW;
    c.max_count = 2;
    c.auto_grow_threshold = SHMBOX_NO_AUTO_GROW;
    CHECK(shmbox_pool_reconfigure(pool, &c, 10000000000LL) == SHMBOX_OK);
  }
  {
    /* a worker left alone (its supervisor killed) ends by itself when its
     * pool is unlinked: shmbox_member_stopped */
    const uint32_t worker = shmbox_lease_worker_pid(lease);
    char stat_path[64];
    int ended = 0;
    CHECK(shmbox_lease_give_back(lease, SHMBOX_OUTCOME_OK) == SHMBOX_RETURN_OK);
    shmbox_lease_close(lease);
    shmbox_pool_close(pool);
    kill(sup.pid, SIGKILL); /* (its pipe stays open: the member inherited it) */
    CHECK(reap(&sup) == 128 + SIGKILL);
    REQUIRE(worker > 0);
    snprintf(line, sizeof line, "/shmbox-pool.%s", pool_name);
    CHECK(shm_unlink(line) == 0);
    snprintf(stat_path, sizeof stat_path, "/proc/%u/stat", (unsigned)worker);
    for (i = 0; i < 1000 && !ended; ++i) { /* up to 10 s */
      FILE* f = fopen(stat_path, "r");
      char state = '?';
      if (f != NULL) {
        if (fgets(line, sizeof line, f) != NULL && strrchr(line, ')') != NULL) state = strrchr(line, ')')[2];
        fclose(f);
      }
      ended = f == NULL || state == 'Z' || state == 'X';
      if (!ended) {
        const struct timespec ten_ms = {0, 10000000L};
        nanosleep(&ten_ms, NULL);
      }
    }
    CHECK(ended);
  }
  {
    /* the member boxes left behind (nobody drained them): gc, by prefix */
    char prefix[200];
    const char* args[] = {"gc", "--include-nonempty", "--prefix", prefix, NULL};
    snprintf(prefix, sizeof prefix, "%s.m", pool_name);
    CHECK(cli(args) == 0);
  }
  pool_name[0] = '\0';
  shmbox_owner_close(ro);
  shmbox_box_close(rb);
}

/* SHMBOX_0.2: status names, message ids on received messages (the same id
 * peek shows, kept by a redelivery, formatted and parsed back), peek, usage. */
typedef struct peeked {
  size_t n;
  shmbox_message_id ids[8];
  char data[8][16];
  int stash_empty;
} peeked;

static void on_peek(void* ctx, const void* data, size_t size, const shmbox_peek_info* info) {
  peeked* pk = (peeked*)ctx;
  if (pk->n < 8 && size < 16) {
    memcpy(pk->data[pk->n], data, size);
    pk->data[pk->n][size] = '\0';
    pk->ids[pk->n] = info->id;
  }
  if (info->struct_size < sizeof *info || info->stash == NULL || info->stash[0] != '\0') pk->stash_empty = 0;
  if (info->envelope == NULL || info->envelope[0] != '\0') pk->stash_empty = 0; /* plain messages: no envelope */
  ++pk->n;
}

static int same_id(const shmbox_message_id* a, const shmbox_message_id* b) {
  return a->box == b->box && a->lane == b->lane && a->position == b->position;
}

static void test_ids_peek_usage(void) {
  const char* name = new_name("ids");
  shmbox_box* b = create_box(name, 4, SHMBOX_REJECT);
  shmbox_producer* p = NULL;
  shmbox_owner* o = NULL;
  shmbox_msg_meta meta;
  shmbox_message_id parsed, untouched;
  shmbox_usage u;
  peeked pk;
  char buf[64], text[SHMBOX_MESSAGE_ID_MAX];
  const void* d = NULL;
  size_t size = 0, n = 0, i;

  CHECK(strcmp(shmbox_post_status_string(SHMBOX_STORED), "stored") == 0);
  CHECK(strcmp(shmbox_post_status_string(SHMBOX_FULL), "full") == 0);
  CHECK(strcmp(shmbox_post_status_string(SHMBOX_POST_TOO_LARGE), "too-large") == 0);
  CHECK(strcmp(shmbox_post_status_string(SHMBOX_POST_ERROR), "error") == 0);
  CHECK(strcmp(shmbox_post_status_string(8), "unknown") == 0 && strcmp(shmbox_post_status_string(-1), "unknown") == 0);
  CHECK(strcmp(shmbox_recv_status_string(SHMBOX_RECV_OK), "ok") == 0);
  CHECK(strcmp(shmbox_recv_status_string(SHMBOX_RECV_NOT_OWNER), "not-owner") == 0);
  CHECK(strcmp(shmbox_recv_status_string(SHMBOX_RECV_EMPTY), "empty") == 0);
  CHECK(strcmp(shmbox_recv_status_string(42), "unknown") == 0);

  REQUIRE(shmbox_producer_attach_box(b, &p) == SHMBOX_OK);
  for (i = 0; i < 4; ++i) {
    snprintf(buf, sizeof buf, "id%u", (unsigned)i);
    CHECK(shmbox_post(p, buf, strlen(buf)) == SHMBOX_STORED);
  }
  CHECK(shmbox_post(p, "over", 4) == SHMBOX_FULL);

  /* peek: anyone, no owner needed; the messages stay */
  memset(&pk, 0, sizeof pk);
  pk.stash_empty = 1;
  CHECK(shmbox_peek(b, 8, on_peek, &pk, &n) == SHMBOX_OK && n == 4 && pk.n == 4 && pk.stash_empty);
  CHECK(strcmp(pk.data[0], "id0") == 0 && strcmp(pk.data[3], "id3") == 0);
  for (i = 1; i < 4; ++i) CHECK(pk.ids[i].box == pk.ids[0].box && pk.ids[i].position > pk.ids[i - 1].position);
  CHECK(pk.ids[0].box != 0 && pk.ids[0].position != SHMBOX_NO_POSITION);
  n = 9;
  CHECK(shmbox_peek(b, 2, on_peek, &pk, &n) == SHMBOX_OK && n == 2);
  CHECK(shmbox_peek(NULL, 2, on_peek, &pk, &n) == SHMBOX_E_INVALID_ARGUMENT && n == 0);
  CHECK(shmbox_peek(b, 2, NULL, &pk, NULL) == SHMBOX_E_INVALID_ARGUMENT);

  REQUIRE(shmbox_owner_acquire_box(b, &o) == SHMBOX_OK);
  memset(&u, 0, sizeof u);
  u.struct_size = sizeof u;
  CHECK(shmbox_owner_usage(o, &u) == SHMBOX_OK);
  CHECK(u.lanes == 1 && u.depth[0] == 4 && u.depth_total == 4 && u.capacity[0] == 4 && u.capacity_total == 4);
  u.struct_size = 0;
  CHECK(shmbox_owner_usage(o, &u) == SHMBOX_E_INVALID_ARGUMENT);

  /* an unset struct_size: an error, nothing taken */
  memset(&meta, 0, sizeof meta);
  CHECK(shmbox_receive_meta(o, buf, sizeof buf, &size, &meta, 0) == SHMBOX_RECV_ERROR);
  CHECK(shmbox_owner_last_error(o) == SHMBOX_E_INVALID_ARGUMENT);
  /* the id a receive gives is the one peek showed */
  shmbox_msg_meta_init(&meta);
  CHECK(meta.struct_size == sizeof meta && meta.id.position == SHMBOX_NO_POSITION);
  CHECK(shmbox_receive_meta(o, buf, sizeof buf, &size, &meta, 0) == SHMBOX_RECV_OK);
  CHECK(size == 3 && memcmp(buf, "id0", 3) == 0 && meta.lane == 0 && meta.redelivered == 0 && meta.priority == 0);
  CHECK(same_id(&meta.id, &pk.ids[0]));
  CHECK(shmbox_message_id_format(&meta.id, text, sizeof text) == SHMBOX_OK);
  CHECK(strlen(text) >= 20 && text[16] == '-');
  CHECK(shmbox_message_id_parse(text, &parsed) == SHMBOX_OK && same_id(&parsed, &meta.id) && parsed.reserved == 0);
  CHECK(shmbox_message_id_format(&meta.id, text, 5) == SHMBOX_E_INVALID_ARGUMENT && text[0] == '\0');
  untouched = parsed;
  CHECK(shmbox_message_id_parse("not-an-id", &parsed) == SHMBOX_E_INVALID_ARGUMENT && same_id(&parsed, &untouched));
  CHECK(shmbox_message_id_parse("", &parsed) == SHMBOX_E_INVALID_ARGUMENT);
  CHECK(shmbox_message_id_parse(NULL, &parsed) == SHMBOX_E_INVALID_ARGUMENT);
  parsed.position = SHMBOX_NO_POSITION;
  CHECK(shmbox_message_id_format(&parsed, text, sizeof text) == SHMBOX_E_INVALID_ARGUMENT && text[0] == '\0');

  /* a two-phase read, given back unread by closing: the next owner gets it flagged, same id */
  CHECK(shmbox_read(o, 1, 0, &n) == SHMBOX_RECV_OK && n == 1);
  shmbox_msg_meta_init(&meta);
  CHECK(shmbox_batch_message_meta(o, 0, &d, &size, &meta) == SHMBOX_OK && size == 3 && memcmp(d, "id1", 3) == 0);
  CHECK(same_id(&meta.id, &pk.ids[1]));
  CHECK(shmbox_batch_message_meta(o, 1, &d, &size, &meta) == SHMBOX_E_INVALID_ARGUMENT);
  shmbox_owner_close(o);
  o = NULL;
  REQUIRE(shmbox_owner_acquire_box(b, &o) == SHMBOX_OK);
  CHECK(shmbox_receive_batch(o, 8, 0, &n) == SHMBOX_RECV_OK && n == 3);
  for (i = 0; i < n; ++i) {
    shmbox_msg_meta_init(&meta);
    CHECK(shmbox_batch_message_meta(o, i, &d, &size, &meta) == SHMBOX_OK);
    CHECK(same_id(&meta.id, &pk.ids[i + 1]));
    CHECK(meta.redelivered == (i == 0 ? 1 : 0));
  }
  /* a struct from an older, shorter header: only its bytes are written */
  {
    union {
      struct {
        uint32_t struct_size;
        uint32_t lane;
        uint32_t canary;
      } s;
      shmbox_msg_meta aligned; /* aligned as the library's struct */
    } older;
    memset(&older, 0, sizeof older);
    older.s.struct_size = 8;
    older.s.lane = 77;
    older.s.canary = 0xabcdu;
    CHECK(shmbox_batch_message_meta(o, 0, &d, &size, &older.aligned) == SHMBOX_OK);
    CHECK(older.s.struct_size == 8 && older.s.lane == 0 && older.s.canary == 0xabcdu);
  }
  memset(&u, 0, sizeof u);
  u.struct_size = sizeof u;
  CHECK(shmbox_owner_usage(o, &u) == SHMBOX_OK && u.depth_total == 0);
  shmbox_owner_close(o);
  shmbox_producer_close(p);
  shmbox_box_close(b);
}

int main(int argc, char** argv) {
  if (argc >= 2 && strcmp(argv[1], "produce") == 0 && argc >= 5) {
    set_alarm(60);
    return role_produce(argv[2], argv[3], argv[4]);
  }
  if (argc >= 2 && strcmp(argv[1], "read-and-hang") == 0 && argc >= 4) {
    set_alarm(60);
    return role_read_and_hang(argv[2], argv[3]);
  }
  if (argc >= 2 && strcmp(argv[1], "listen") == 0 && argc >= 3) {
    set_alarm(60);
    return role_listen(argv[2]);
  }
  if (argc >= 2 && strcmp(argv[1], "member") == 0) return role_member();
  if (argc != 1) {
    fprintf(stderr, "usage: c-api-test (runs every case)\n");
    return 2;
  }
  set_alarm(120);
  atexit(remove_boxes);
  test_errors();
  test_producers_to_owner();
  test_heir_takes_over();
  test_fork_roles();
  test_give_away();
  test_notify_and_filter();
  test_notify_group();
  test_batch_stash_priority();
  test_stash();
  test_list_and_resize();
  test_intact();
  test_quota();
  test_request();
  test_pool();
  test_ids_peek_usage();
  if (failures > 0) {
    fprintf(stderr, "c-api-test: %d check(s) failed\n", failures);
    return 1;
  }
  printf("c-api-test: every check held\n");
  return 0;
}
