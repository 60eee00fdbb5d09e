/* A C program that uses an installed shmbox through its C API
 * (<shmbox/shmbox.h>): creates a box, posts a few messages into it as a
 * producer, receives them as the owner, checks them and removes the box.
 * Built with pkg-config in tests/package/package_test.sh:
 *
 *   cc -std=c99 main.c $(pkg-config --cflags --libs shmbox) -o shmbox-c-consumer
 *   ./shmbox-c-consumer BOX_NAME     exit 0 when every message came back in order
 */
#include <shmbox/shmbox.h>

#include <stdio.h>
#include <string.h>

/* Prints what failed with the library's sentence (it names the box and
 * says what to do) and returns 1. */
static int failed(const char* what) {
  fprintf(stderr, "%s: %s\n", what, shmbox_last_error_message());
  return 1;
}

static int run(const char* name) {
  enum { kMessages = 5 };
  shmbox_options opts;
  shmbox_box* box = NULL;
  shmbox_producer* producer = NULL;
  shmbox_owner* owner = NULL;
  char buf[64];
  int i, rc = 1;

  shmbox_options_init(&opts); /* the defaults, and opts.struct_size */
  opts.capacity = 16;         /* messages */
  opts.slot_size = 64;        /* bytes per message, at most */
  if (shmbox_box_create(name, &opts, &box) != SHMBOX_OK) return failed("create");

  if (shmbox_producer_attach(name, &producer) != SHMBOX_OK) {
    rc = failed("attach");
    goto out;
  }
  for (i = 0; i < kMessages; ++i) {
    int len = snprintf(buf, sizeof buf, "message %d", i);
    int st = shmbox_post(producer, buf, (size_t)len);
    if (st != SHMBOX_STORED) { /* a full box is a status, not an error: SHMBOX_FULL, ... */
      fprintf(stderr, "post %d: status %d\n", i, st);
      goto out;
    }
  }

  if (shmbox_owner_acquire(name, &owner) != SHMBOX_OK) {
    rc = failed("acquire");
    goto out;
  }
  for (i = 0; i < kMessages; ++i) {
    char want[64];
    size_t size = 0;
    /* the buffer holds the box's slot size, so no message is ever cut */
    int st = shmbox_receive(owner, buf, sizeof buf, &size, NULL, 5000000000LL /* 5 s */);
    int wlen = snprintf(want, sizeof want, "message %d", i);
    if (st != SHMBOX_RECV_OK || size != (size_t)wlen || memcmp(buf, want, size) != 0) {
      fprintf(stderr, "receive %d: status %d, got '%.*s', want '%s'\n", i, st, (int)size, buf, want);
      goto out;
    }
  }
  printf("ok: %d messages through box '%s' (libshmbox %s, C API)\n", kMessages, name, shmbox_version());
  rc = 0;
out:
  shmbox_owner_close(owner);
  shmbox_producer_close(producer);
  shmbox_box_close(box);
  if (shmbox_box_remove(name) != SHMBOX_OK && rc == 0) rc = failed("remove");
  return rc;
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s BOX_NAME\n", argv[0]);
    return 2;
  }
  return run(argv[1]);
}
