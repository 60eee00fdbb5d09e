/* bench/api_loop.c - the C side of bench/api.cpp, compiled as C: the same
 * post + receive loop as the C++ side, through include/shmbox/shmbox.h. */
#define _POSIX_C_SOURCE 200809L
#include "api_loop.h"

#include <stdint.h>
#include <string.h>
#include <time.h>

#include "shmbox/shmbox.h"

static double now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

double shmbench_c_post_recv(const char* name, long rounds, unsigned batch, unsigned size) {
  shmbox_producer* p = NULL;
  shmbox_owner* o = NULL;
  unsigned char msg[4096];
  unsigned char buf[4096];
  uint64_t next = 0, want = 0;
  double t0, t;
  long r;
  unsigned i;
  if (size < sizeof next || size > sizeof msg) return -1;
  if (shmbox_producer_attach(name, &p) != SHMBOX_OK) return -1;
  if (shmbox_owner_acquire(name, &o) != SHMBOX_OK) {
    shmbox_producer_close(p);
    return -1;
  }
  memset(msg, 'c', sizeof msg);
  t0 = now_ns();
  for (r = 0; r < rounds; ++r) {
    for (i = 0; i < batch; ++i) {
      memcpy(msg, &next, sizeof next);
      ++next;
      if (shmbox_post(p, msg, size) != SHMBOX_STORED) goto fail;
    }
    for (i = 0; i < batch; ++i) {
      size_t got = 0;
      uint64_t seq;
      if (shmbox_receive(o, buf, sizeof buf, &got, NULL, 0) != SHMBOX_RECV_OK || got != size) goto fail;
      memcpy(&seq, buf, sizeof seq);
      if (seq != want++) goto fail;
    }
  }
  t = now_ns() - t0;
  shmbox_owner_close(o);
  shmbox_producer_close(p);
  return t / (double)(rounds * (long)batch);
fail:
  shmbox_owner_close(o);
  shmbox_producer_close(p);
  return -1;
}
