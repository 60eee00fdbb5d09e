/* shmbox/shmbox.h - the C API of shmbox (C99; also usable from C++).
 *
 * The same boxes as the C++ API (shmbox/shmbox.hpp), through opaque handles,
 * plain error codes and C types only: for C programs and for other languages
 * (the Python package in python/ is built on it).
 *
 * Conventions:
 *   - Functions that make or find something return an int error code
 *     (SHMBOX_OK = 0, else one of enum shmbox_error) and write the handle or
 *     value through their last argument. shmbox_last_error_message() gives the
 *     sentence for a person ("box 'jobs': no box of that name; create it ...").
 *   - Posting returns a shmbox_post_status and receiving a shmbox_recv_status,
 *     as the C++ API does: a full box is an outcome, not an error. Their
 *     *_ERROR values come with the handle's last error
 *     (shmbox_producer_last_error, shmbox_owner_last_error).
 *   - Names are NUL-terminated; messages are (pointer, size) and may hold any
 *     bytes. Timeouts are in nanoseconds: SHMBOX_FOREVER (any negative value)
 *     waits for ever, 0 does not wait.
 *   - Option and result structs begin with `struct_size`: set it to
 *     sizeof(the struct) (the *_init functions do). A later release may add
 *     fields at the end; the library reads and writes only the first
 *     struct_size bytes, so a program built against this header keeps
 *     working.
 *   - A handle is used by one thread at a time; different handles (even of
 *     one box) may be used by different threads at once. Every handle is
 *     freed by its *_close function (NULL is ignored). Nothing throws, and
 *     nothing aborts the program on bad input: NULL handles or pointers,
 *     out-of-range values, an unset struct_size, closing a borrowed handle
 *     (shmbox_lease_producer, shmbox_member_owner: it is closed with its
 *     lease or member) are errors (SHMBOX_E_INVALID_ARGUMENT; getters return
 *     0, "" or -1), and nothing is done.
 *   - What is undefined: after h's *_close, h is invalid, as a pointer is
 *     after free(). Passing it to any function again, a second close
 *     included, is undefined behaviour: set it to NULL after the close. (The
 *     library catches it where it can: every handle carries a tag that its
 *     close clears, checked by every function, so such a call usually
 *     returns SHMBOX_E_INVALID_ARGUMENT and does nothing instead of freeing
 *     twice; but not once the allocator has given that memory to another
 *     handle of the same kind, and memory checkers such as AddressSanitizer
 *     report it as the use after free it is.) The same holds for a borrowed
 *     handle once its lease or member is closed.
 *   - fork(): a child inherits copies of its parent's handles, not their
 *     roles (shmbox/box.hpp says more). Closing a copy in the child frees
 *     only the child's memory and descriptors: the parent stays owner, heir,
 *     producer, pool client and lease holder. Calls through a copy fail:
 *     owner calls with SHMBOX_RECV_NOT_OWNER (SHMBOX_EVENT_NOT_OWNER), the
 *     others with SHMBOX_E_INHERITED_HANDLE. The child opens its own.
 *   - What C cannot reach: custom buffers (options::buffer) are C++ objects;
 *     a box that uses one answers SHMBOX_E_BUFFER_UNKNOWN here.
 *
 * ABI: every function is exported with the symbol version SHMBOX_0.1
 * (lib/shmbox.map), except those marked (SHMBOX_0.2), (SHMBOX_0.3), (SHMBOX_0.4) or (SHMBOX_0.5), added later: a
 * program that uses one fails to load on an older library, at start. The
 * soname policy is in README.md ("The C API").
 */
#ifndef SHMBOX_SHMBOX_H
#define SHMBOX_SHMBOX_H

#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__) || defined(__clang__)
#define SHMBOX_C_API __attribute__((visibility("default")))
#else
#define SHMBOX_C_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Versions, errors ------------------------------------------------- */

/* The version of this header, "MAJOR.MINOR.PATCH". */
#define SHMBOX_VERSION_STRING "0.1.0"
/* The library's version (the one it was built as, which may differ from
 * SHMBOX_VERSION_STRING if the program was built against another release). */
SHMBOX_C_API const char* shmbox_version(void);

/* Error codes (the C++ API's shmbox::errc, value for value). */
enum shmbox_error {
  SHMBOX_OK = 0,
  SHMBOX_E_INVALID_NAME = 1,       /* a name that is empty, too long, or has characters other than [A-Za-z0-9._-] */
  SHMBOX_E_INVALID_ARGUMENT = 2,   /* an argument or option out of its documented range */
  SHMBOX_E_EXISTS = 3,             /* a box of that name exists already */
  SHMBOX_E_NOT_FOUND = 4,          /* no box of that name */
  SHMBOX_E_PERMISSION_DENIED = 5,  /* the segment's mode or owner does not let this process in */
  SHMBOX_E_NO_SPACE = 6,           /* /dev/shm has no room for the segment */
  SHMBOX_E_TOO_LARGE = 7,          /* beyond the documented size limits */
  SHMBOX_E_NOT_A_BOX = 8,          /* the segment is not a shmbox segment */
  SHMBOX_E_VERSION_MISMATCH = 9,   /* made by an incompatible layout version */
  SHMBOX_E_TRUNCATED = 10,         /* the segment is smaller than its header says */
  SHMBOX_E_CORRUPT = 11,           /* the segment breaks an invariant */
  SHMBOX_E_INCOMPLETE = 12,        /* being created, or its creator died half-way */
  SHMBOX_E_NOT_OWNER = 13,         /* another live process owns the box, or this handle lost it */
  SHMBOX_E_ALREADY_OWNER = 14,     /* this process holds an owner handle for the box already */
  SHMBOX_E_PRODUCER_TABLE_FULL = 15,
  SHMBOX_E_HEIR_TABLE_FULL = 16,
  SHMBOX_E_TIMED_OUT = 17,
  SHMBOX_E_SYSTEM = 18,            /* an unexpected errno from the kernel, or out of memory */
  SHMBOX_E_REFUSED = 19,           /* the owner does not do what was asked */
  SHMBOX_E_NO_MEMBERS_STARTING = 20,     /* pool: none free, one is being started */
  SHMBOX_E_NO_MEMBERS_AT_CAPACITY = 21,  /* pool: none free, max_count members exist */
  SHMBOX_E_NO_MEMBERS_QUEUE_FULL = 22,   /* pool: none free, queue_max takers wait already */
  SHMBOX_E_POOL_REMOVED = 23,
  SHMBOX_E_POOL_CLIENTS_FULL = 24,
  SHMBOX_E_STASH_FULL = 25,
  SHMBOX_E_BUFFER_UNKNOWN = 26,    /* the box uses a custom buffer (C++ only) */
  SHMBOX_E_BUFFER_BROKEN = 27,
  SHMBOX_E_INHERITED_HANDLE = 28   /* the handle was made by another process: a fork child opens its own */
};

/* What `code` means, in general ("no box of that name"); never NULL, static. */
SHMBOX_C_API const char* shmbox_strerror(int code);
/* The sentence about the most recent error a function of this API returned
 * on this thread, naming the box and the numbers involved; "" when none.
 * Valid until the next failing call on this thread. */
SHMBOX_C_API const char* shmbox_last_error_message(void);
/* The code of that error (SHMBOX_OK when none). */
SHMBOX_C_API int shmbox_last_error(void);

/* Wait for ever (any negative timeout does). */
#define SHMBOX_FOREVER ((int64_t)-1)
/* shmbox_post_options.timeout_ns: the box's block_timeout (the default). */
#define SHMBOX_BOX_TIMEOUT INT64_MIN
/* "Unset" for the int32 option fields below that say so (lane, overflow). */
#define SHMBOX_DEFAULT (-1)

/* A message's id (shmbox::message_id): the box's id (random, fixed when the
 * box is made), the lane, and the lane position its post claimed (the claim
 * order across all producers; a lifo lane's: its stamp). A message
 * redelivered after its owner died keeps its id, so it is a deduplication
 * key and a trace handle. `position` SHMBOX_NO_POSITION: no id (a message
 * an owner parked in the stash). A plain value: no struct_size. */
#define SHMBOX_NO_POSITION UINT64_MAX
typedef struct shmbox_message_id {
  uint64_t box;
  uint64_t position;
  uint32_t lane;
  uint32_t reserved; /* 0 */
} shmbox_message_id;

/* The room shmbox_message_id_format needs at most (with the NUL). */
#define SHMBOX_MESSAGE_ID_MAX 64
/* Writes the id as "BOXID-LANE-POSITION" (16 hex digits, then decimals:
 * "9f3c0a1b2c3d4e5f-1-42", the form the CLI and the NATS bridge show) into
 * buf, NUL-terminated: SHMBOX_OK, or SHMBOX_E_INVALID_ARGUMENT (NULL, `cap`
 * too small, or an id without a position; buf then gets "" if cap > 0).
 * (SHMBOX_0.2) */
SHMBOX_C_API int shmbox_message_id_format(const shmbox_message_id* id, char* buf, size_t cap);
/* Reads that form back into *out: SHMBOX_OK, or SHMBOX_E_INVALID_ARGUMENT
 * for anything else (out untouched). (SHMBOX_0.2) */
SHMBOX_C_API int shmbox_message_id_parse(const char* text, shmbox_message_id* out);

/* ---- Boxes -------------------------------------------------------------- */

typedef struct shmbox_box shmbox_box;
typedef struct shmbox_producer shmbox_producer;
typedef struct shmbox_owner shmbox_owner;
typedef struct shmbox_heir shmbox_heir;

/* What a post does when the box is full (shmbox::policy). */
enum shmbox_policy {
  SHMBOX_REJECT = 0,       /* nothing is stored; the post returns SHMBOX_FULL */
  SHMBOX_DROP_NEWEST = 1,  /* the new message is discarded: SHMBOX_DROPPED */
  SHMBOX_DROP_OLDEST = 2,  /* the oldest is evicted: SHMBOX_STORED_EVICTED */
  SHMBOX_LIFO = 3,         /* newest first; the top is replaced: SHMBOX_STORED_EVICTED */
  SHMBOX_BLOCK = 4         /* the post waits for room up to its timeout: SHMBOX_TIMEOUT */
};

/* Documented limits (shmbox/types.hpp). */
#define SHMBOX_MAX_LANES 8
#define SHMBOX_MAX_NAME 128

/* One lane of a new box (shmbox::lane_options). */
typedef struct shmbox_lane_options {
  uint32_t capacity;      /* messages; 0: the box's capacity */
  int32_t overflow;       /* an enum shmbox_policy, or SHMBOX_DEFAULT: the box's */
  uint32_t max_capacity;  /* resizable up to this; 0: the box's max_capacity */
} shmbox_lane_options;

/* A new box's capacity and behaviour (shmbox::options; its comments say more). */
typedef struct shmbox_options {
  uint32_t struct_size;       /* sizeof(shmbox_options) */
  uint32_t capacity;          /* messages (default 1024) */
  uint32_t max_capacity;      /* resizable up to this (shmbox_box_resize); 0: not resizable */
  uint32_t slot_size;         /* largest message in bytes (default 256) */
  int32_t overflow;           /* enum shmbox_policy (default SHMBOX_REJECT) */
  uint32_t mode;              /* file mode of /dev/shm/shmbox.<name> (default 0600) */
  uint32_t max_producers;     /* producer handles attached at once (default 64) */
  int64_t block_timeout_ms;   /* default wait of a post into a full block box (default 1000) */
  int64_t lease_ms;           /* owner lease; 0: only death ends it (default 0) */
  uint32_t lane_count;        /* entries in `lanes`; 0: one lane of capacity and overflow */
  const shmbox_lane_options* lanes;
  int32_t default_lane;       /* the lane of a plain post, or SHMBOX_DEFAULT */
  const char* dead_letters;   /* a box that receives what this one drops; NULL: none */
  int32_t dead_letter_refused; /* nonzero: also refused posts go there */
  int64_t spin_ns;            /* adaptive wait before sleeping; negative: the default (50 us) */
  uint32_t stash;             /* stash entries (shmbox_owner_stash); 0: none */
  int32_t priority;           /* nonzero: a priority box */
  uint32_t quota;             /* messages each producer may have waiting in a lane (shmbox::options::quota); 0: none */
} shmbox_options;

/* Fills `o` with the defaults above (and its struct_size). */
SHMBOX_C_API void shmbox_options_init(shmbox_options* o);

/* Creates /dev/shm/shmbox.<name>; SHMBOX_E_EXISTS if it is there.
 * `o` NULL: the defaults. On success *out is a handle (shmbox_box_close). */
SHMBOX_C_API int shmbox_box_create(const char* name, const shmbox_options* o, shmbox_box** out);
/* Opens an existing box read-write. A segment owned by another user is
 * refused (SHMBOX_E_PERMISSION_DENIED) unless any_owner is nonzero. */
SHMBOX_C_API int shmbox_box_open(const char* name, int any_owner, shmbox_box** out);
/* Opens an existing box read-only, for looking at it. */
SHMBOX_C_API int shmbox_box_inspect(const char* name, shmbox_box** out);
/* Frees the handle (the box stays). */
SHMBOX_C_API void shmbox_box_close(shmbox_box* b);
/* Unlinks the box's segment; processes that have it mapped keep using it. */
SHMBOX_C_API int shmbox_box_remove(const char* name);
/* Checks a name against the rules (1..128 of [A-Za-z0-9._-], no leading '.'). */
SHMBOX_C_API int shmbox_validate_name(const char* name);
/* Calls fn(ctx, name) for every shmbox segment in /dev/shm (valid or not). */
SHMBOX_C_API int shmbox_box_list(void (*fn)(void* ctx, const char* name), void* ctx);

/* The box's name (valid while the handle is). */
SHMBOX_C_API const char* shmbox_box_name(const shmbox_box* b);
/* Messages all lanes hold together. */
SHMBOX_C_API uint32_t shmbox_box_capacity(const shmbox_box* b);
/* The largest message, in bytes. */
SHMBOX_C_API uint32_t shmbox_box_slot_size(const shmbox_box* b);
/* How many lanes the box has (lane 0 is the control lane). */
SHMBOX_C_API uint32_t shmbox_box_lane_count(const shmbox_box* b);
/* The lane of a plain post. */
SHMBOX_C_API uint32_t shmbox_box_default_lane(const shmbox_box* b);
/* The box's overflow policy (enum shmbox_policy). */
SHMBOX_C_API int shmbox_box_overflow(const shmbox_box* b);
/* Messages in the box now, from two counters (exact when idle). */
SHMBOX_C_API uint64_t shmbox_box_depth(const shmbox_box* b);
/* SHMBOX_OK while the segment is whole under this handle; SHMBOX_E_TRUNCATED
 * once a process that may write it shrank it while this process had it mapped
 * (what lay beyond the new end reads as zeros: shmbox::Box::intact,
 * docs/guarantees.md "Trust" T5). (SHMBOX_0.5) */
SHMBOX_C_API int shmbox_box_intact(const shmbox_box* b);

/* Every message that is posted ends in exactly one of these, or in the box:
 *   posted = delivered + rejected + too_large + timeouts + dropped_newest
 *          + dropped_oldest + filtered + abandoned + aborted + depth
 * (shmbox::counters; the same fields in the same order). */
typedef struct shmbox_counters {
  uint32_t struct_size;  /* sizeof(shmbox_counters) */
  uint32_t reserved_;
  uint64_t posted, stored, delivered, rejected, too_large, timeouts;
  uint64_t dropped_newest, dropped_oldest, shrunk, filtered, buffer_dropped;
  uint64_t abandoned, aborted, redelivered, dead_lettered, dead_letter_failed;
  uint64_t stashed, unstashed;
  uint64_t quota_refused;  /* posts refused at their producer's quota (of rejected, dropped_newest, timeouts) */
  uint64_t reserved2_;
} shmbox_counters;

/* Sums the box's counters into *out (set out->struct_size first). */
SHMBOX_C_API int shmbox_box_counters(const shmbox_box* b, shmbox_counters* out);

/* What shmbox_box_resize did (shmbox::resize_report). */
typedef struct shmbox_resize_report {
  uint32_t struct_size;
  uint32_t lane, before, after, max_capacity;
  uint64_t dropped;  /* messages the shrink dropped by the lane's policy */
} shmbox_resize_report;

/* Moves lane `lane`'s limit (SHMBOX_DEFAULT: the only lane) to `limit`,
 * between 1 and its reserved max_capacity, while producers and the owner run
 * (shmbox::Box::resize). `report` may be NULL. */
SHMBOX_C_API int shmbox_box_resize(const shmbox_box* b, uint32_t limit, int32_t lane, shmbox_resize_report* report);
/* Asks the owner (if it accepts requests) to give the box to process `pid`
 * of this pid namespace, which waits for it as heir or listener; returns
 * once it did (SHMBOX_E_REFUSED, SHMBOX_E_NOT_OWNER, SHMBOX_E_TIMED_OUT, ...). */
SHMBOX_C_API int shmbox_box_request_give_away(const shmbox_box* b, uint32_t pid, int64_t timeout_ns);
/* The same for heir-table entry `entry` (any pid namespace). */
SHMBOX_C_API int shmbox_box_request_give_away_to_heir(const shmbox_box* b, uint32_t entry, int64_t timeout_ns);

/* ---- Looking at a box ------------------------------------------------------ */

/* One lane as anyone sees it (shmbox::lane_info). */
typedef struct shmbox_lane_info {
  uint32_t struct_size;
  uint32_t capacity;      /* its limit now */
  uint32_t max_capacity;  /* 0: not resizable */
  int32_t overflow;       /* enum shmbox_policy */
  uint64_t depth;
  uint64_t parked;        /* its messages in the owner's stash */
  shmbox_counters count;  /* (an array of these is walked by its elements' struct_size) */
  uint32_t quota;         /* per-producer quota; 0: none */
} shmbox_lane_info;

/* One entry of the heir table, in registration order (shmbox::heir_info). */
typedef struct shmbox_heir_info {
  uint32_t struct_size;
  uint32_t entry;
  uint32_t pid;          /* in the heir's own pid namespace */
  int32_t same_namespace;
  int32_t alive;
  int32_t listener;      /* waits only for give-away */
  uint32_t data_size;    /* bytes of data (it may hold NULs) */
  uint64_t pid_ns;
  char data[65];         /* its registered data, NUL-terminated */
} shmbox_heir_info;

/* Why a box changed owner (shmbox::transfer_reason). */
enum shmbox_transfer_reason {
  SHMBOX_TRANSFER_NONE = 0,
  SHMBOX_TRANSFER_OWNER_DIED = 1,
  SHMBOX_TRANSFER_GIVE_AWAY = 2,
  SHMBOX_TRANSFER_LEASE_EXPIRED = 3
};

/* How an owner got its box (shmbox::transfer_record). */
typedef struct shmbox_transfer {
  uint32_t struct_size;
  int32_t reason;          /* enum shmbox_transfer_reason */
  uint32_t from_pid, to_pid;
  uint64_t from_pid_ns, to_pid_ns;
  uint64_t epoch;
  uint32_t data_size;      /* bytes of data (it may hold NULs) */
  char data[65];           /* the heir's registered data or the give-away data, NUL-terminated */
} shmbox_transfer;

/* pobox's owner states (shmbox::owner_mode). */
enum shmbox_owner_mode { SHMBOX_PASSIVE = 0, SHMBOX_NOTIFY = 1, SHMBOX_ACTIVE = 2 };

/* A snapshot of a box, read without locks (shmbox::box_info). */
typedef struct shmbox_info {
  uint32_t struct_size;
  uint32_t capacity, slot_size, max_producers, producers_attached;
  int32_t overflow;                 /* enum shmbox_policy */
  uint32_t mode, uid;
  uint64_t depth;                   /* exact scan */
  uint64_t segment_bytes;
  int64_t block_timeout_ms, lease_ms, spin_ns;
  uint32_t owner_pid;               /* 0: no owner; in the owner's pid namespace */
  int32_t owner_alive, owner_expired, owner_same_namespace;
  uint64_t owner_pid_ns, epoch;
  int32_t owner_mode;               /* enum shmbox_owner_mode */
  int32_t accepts_requests, orphaned;
  uint32_t lane_count, heir_count, default_lane;
  uint32_t stash;                   /* stash entries; 0: none */
  uint64_t parked;
  int32_t priority;                 /* a priority box */
  char buffer[49];                  /* its custom buffer type, "" none */
  char dead_letters[129];           /* its dead-letter box, "" none */
  shmbox_transfer last_transfer;    /* epoch 0: none yet */
  shmbox_counters count;            /* all lanes */
  /* Request/reply (shmbox::reply_counts; SHMBOX_0.4: an older library
   * leaves them as it found them, so zero them first): what the box's
   * owners did with the requests they answered, every owner so far. */
  uint64_t replies_sent;            /* stored in requesters' reply boxes */
  uint64_t replies_lost;            /* the requester dead or gone, or its reply box full */
  uint64_t replies_skipped;         /* not sent: the request was answered already */
  int32_t reply_box;                /* a requester's reply box (gc removes it with its requester) */
  uint32_t reserved3_;
} shmbox_info;

/* Fills *out (set out->struct_size) and up to lanes_cap lanes and heirs_cap
 * heirs (either array may be NULL with cap 0; set each entry's struct_size);
 * out->lane_count and out->heir_count say how many there are. */
SHMBOX_C_API int shmbox_box_info(const shmbox_box* b, shmbox_info* out, shmbox_lane_info* lanes, size_t lanes_cap,
                                 shmbox_heir_info* heirs, size_t heirs_cap);
/* Checks the segment's invariants (shmbox::verify): *ok is 1 when no problem
 * was found; fn (may be NULL) gets one sentence per problem. An error code
 * only when the box could not be looked at (not found, permission). */
SHMBOX_C_API int shmbox_verify(const char* name, void (*fn)(void* ctx, const char* problem), void* ctx, int* ok);

/* A message shmbox_peek shows (shmbox::peeked_message). The library sets
 * struct_size to its own size: read only the fields your header has.
 * (SHMBOX_0.2) */
typedef struct shmbox_peek_info {
  uint32_t struct_size;
  uint32_t lane;
  shmbox_message_id id;  /* the id its owner will receive it with (position SHMBOX_NO_POSITION: parked in the stash) */
  const char* stash;     /* "" in its lane; in the owner's stash (listed first): "parked", "unstashed", "reading";
                            a priority box's ordered store: "sorted"; a custom buffer's store: "buffered" */
  const char* envelope;  /* (SHMBOX_0.4; check struct_size) "request": data is a request's body as its owner
                            receives it (its reply address left out); "reply": a reply's body, in a
                            requester's reply box; "" a plain message */
} shmbox_peek_info;
/* Calls fn(ctx, data, size, info) for each of up to `max` messages the box
 * holds, in delivery order, without taking them: anyone who may read the
 * box may peek, owner or not (a snapshot of a moving box: a message taken
 * meanwhile is left out). The pointers are valid during the call only.
 * *count (may be NULL) gets how many. (SHMBOX_0.2) */
SHMBOX_C_API int shmbox_peek(const shmbox_box* b, size_t max,
                             void (*fn)(void* ctx, const void* data, size_t size, const shmbox_peek_info* info), void* ctx,
                             size_t* count);

/* ---- Producers ---------------------------------------------------------- */

/* Outcome of one post (shmbox::post_status). */
enum shmbox_post_status {
  SHMBOX_STORED = 0,
  SHMBOX_STORED_EVICTED = 1,  /* stored after evicting (drop-oldest) or replacing the top (lifo) */
  SHMBOX_DROPPED = 2,         /* drop-newest: discarded, counted */
  SHMBOX_FULL = 3,            /* reject: nothing stored, counted */
  SHMBOX_TIMEOUT = 4,         /* block: no room before the timeout, counted */
  SHMBOX_POST_TOO_LARGE = 5,  /* larger than the slot size, counted */
  SHMBOX_POST_ERROR = 6,      /* see shmbox_producer_last_error */
  SHMBOX_OVER_QUOTA = 7       /* the producer has its lane's quota waiting: nothing stored, counted */
};

/* The status's name, as the C++ API's to_string says it: "stored",
 * "stored-evicted", "dropped", "full", "timeout", "too-large", "error",
 * "over-quota";
 * "unknown" for a value that is none of them. Static, never NULL.
 * (SHMBOX_0.2) */
SHMBOX_C_API const char* shmbox_post_status_string(int status);

/* Where one post goes and how long it may wait (shmbox::post_options). */
typedef struct shmbox_post_options {
  uint32_t struct_size;
  int32_t lane;          /* SHMBOX_DEFAULT: the box's default lane; 0: the control lane */
  int64_t timeout_ns;    /* how long a post into a full block box may wait; SHMBOX_FOREVER;
                            SHMBOX_BOX_TIMEOUT (the default): the box's block_timeout */
  int64_t spin_ns;       /* negative: the box's */
  int32_t has_priority;  /* nonzero: `priority` is this message's priority (priority boxes) */
  int32_t reserved_;
  int64_t priority;
  int32_t quiet_timeout; /* nonzero: a timeout leaves no trace (not counted, not dead-lettered), for a
                            caller that waits in slices and posts again (shmbox::post_options) */
  int32_t reserved2_;
} shmbox_post_options;

/* Fills `o` with "the box's defaults" for every field. */
SHMBOX_C_API void shmbox_post_options_init(shmbox_post_options* o);

/* Takes a producer entry in box `name` (shmbox_producer_close gives it back). */
SHMBOX_C_API int shmbox_producer_attach(const char* name, shmbox_producer** out);
/* The same in a box this process has open. */
SHMBOX_C_API int shmbox_producer_attach_box(const shmbox_box* b, shmbox_producer** out);
/* Gives the entry back (an open loan is aborted); posted messages stay. */
SHMBOX_C_API void shmbox_producer_close(shmbox_producer* p);
/* Posts one message into the box's default lane (enum shmbox_post_status).
 * SHMBOX_POST_TOO_LARGE and SHMBOX_POST_ERROR leave a sentence in
 * shmbox_last_error_message(); the other outcomes do not. */
SHMBOX_C_API int shmbox_post(shmbox_producer* p, const void* data, size_t size);
/* Posts one message with options (`o` NULL: the defaults). */
SHMBOX_C_API int shmbox_post_ex(shmbox_producer* p, const void* data, size_t size, const shmbox_post_options* o);
/* Posts n messages in order until one is not stored; returns how many were
 * (a prefix). *last (may be NULL) gets the outcome of the first not stored,
 * or of the last one when all were. */
SHMBOX_C_API size_t shmbox_post_batch(shmbox_producer* p, const void* const* data, const size_t* sizes, size_t n,
                                      const shmbox_post_options* o, int* last);
/* Zero-copy post: claims a slot and returns its status; when stored, *data
 * and *capacity are the slot's payload to write in place, then
 * shmbox_loan_commit (or shmbox_loan_abort). One open loan per handle. */
SHMBOX_C_API int shmbox_loan(shmbox_producer* p, const shmbox_post_options* o, void** data, uint32_t* capacity);
/* Publishes the first `size` bytes of the open loan: its status, or
 * SHMBOX_POST_TOO_LARGE (size > capacity: still open) or SHMBOX_POST_ERROR. */
SHMBOX_C_API int shmbox_loan_commit(shmbox_producer* p, size_t size);
/* Gives the open loan's slot back without a message (counted aborted). */
SHMBOX_C_API void shmbox_loan_abort(shmbox_producer* p);
/* Priority boxes: fn(ctx, data, size) gives the priority of each message
 * posted without has_priority (NULL: 0). It must not call this handle. */
SHMBOX_C_API void shmbox_producer_set_priority_function(shmbox_producer* p,
                                                        int64_t (*fn)(void* ctx, const void* data, size_t size),
                                                        void* ctx);
/* The largest message the box takes, in bytes. */
SHMBOX_C_API uint32_t shmbox_producer_max_message_size(const shmbox_producer* p);
/* Why the most recent post that returned SHMBOX_POST_ERROR did so (an error
 * code; its sentence is shmbox_last_error_message on the posting thread). */
SHMBOX_C_API int shmbox_producer_last_error(const shmbox_producer* p);
/* Messages the most recent call evicted (drop-oldest) or replaced (lifo). */
SHMBOX_C_API uint32_t shmbox_producer_last_evicted(const shmbox_producer* p);
/* This handle's entry in the producer table. */
SHMBOX_C_API uint32_t shmbox_producer_entry(const shmbox_producer* p);

/* ---- Owners -------------------------------------------------------------- */

/* Outcome of one receive (shmbox::recv_status). */
enum shmbox_recv_status {
  SHMBOX_RECV_OK = 0,
  SHMBOX_RECV_EMPTY = 1,      /* nothing there (shmbox_try_receive) */
  SHMBOX_RECV_TIMEOUT = 2,    /* nothing arrived before the timeout */
  SHMBOX_RECV_NOT_OWNER = 3,  /* this handle no longer owns the box */
  SHMBOX_RECV_ERROR = 4       /* see shmbox_owner_last_error */
};

/* The status's name, as the C++ API's to_string says it: "ok", "empty",
 * "timeout", "not-owner", "error";
 * "unknown" for another value. Static, never NULL. (SHMBOX_0.2) */
SHMBOX_C_API const char* shmbox_recv_status_string(int status);

/* What comes with a received message besides its bytes. */
typedef struct shmbox_msg_info {
  uint32_t lane;
  int32_t redelivered;  /* a previous owner read it and died before committing */
} shmbox_msg_info;

/* What comes with a received message, extensible (struct_size first; set
 * it, or call shmbox_msg_meta_init). (SHMBOX_0.2) */
typedef struct shmbox_msg_meta {
  uint32_t struct_size;
  uint32_t lane;
  int32_t redelivered;  /* a previous owner read it and died before committing */
  int32_t reserved;
  int64_t priority;     /* its priority in a priority box; 0 otherwise */
  shmbox_message_id id;
  /* Request/reply (SHMBOX_0.3; 0 from older libraries): a request
   * (shmbox_reply_last / shmbox_reply_batch answer it), and one an owner
   * that died had answered already. */
  int32_t is_request;
  int32_t answered;
} shmbox_msg_meta;
SHMBOX_C_API void shmbox_msg_meta_init(shmbox_msg_meta* meta);

/* Takes ownership of box `name` (SHMBOX_E_NOT_OWNER when another live
 * process owns it; a dead owner's box is taken over with its messages). */
SHMBOX_C_API int shmbox_owner_acquire(const char* name, shmbox_owner** out);
/* The same for a box this process has open. */
SHMBOX_C_API int shmbox_owner_acquire_box(const shmbox_box* b, shmbox_owner** out);
/* Releases ownership (to the first live heir, if any); messages stay. */
SHMBOX_C_API void shmbox_owner_close(shmbox_owner* o);

/* Waits up to timeout_ns for a message and copies it into buf: *size gets
 * its length, *info (may be NULL) its lane and flag. `cap` must be at least
 * the box's slot size (else SHMBOX_RECV_ERROR, SHMBOX_E_INVALID_ARGUMENT,
 * nothing taken), so a message is never cut. */
SHMBOX_C_API int shmbox_receive(shmbox_owner* o, void* buf, size_t cap, size_t* size, shmbox_msg_info* info,
                                int64_t timeout_ns);
/* The same without waiting: SHMBOX_RECV_EMPTY when nothing is there. */
SHMBOX_C_API int shmbox_try_receive(shmbox_owner* o, void* buf, size_t cap, size_t* size, shmbox_msg_info* info);
/* shmbox_receive with the message's id and priority: *meta (may be NULL;
 * else its struct_size set) gets them. A timeout of 0 does not wait
 * (SHMBOX_RECV_TIMEOUT when nothing is there). (SHMBOX_0.2) */
SHMBOX_C_API int shmbox_receive_meta(shmbox_owner* o, void* buf, size_t cap, size_t* size, shmbox_msg_meta* meta,
                                     int64_t timeout_ns);
/* Receives up to `max` messages (waiting up to timeout_ns for the first)
 * into the handle's batch: *count gets how many; read them with
 * shmbox_batch_message until the next receive, read, wait or deliver. */
SHMBOX_C_API int shmbox_receive_batch(shmbox_owner* o, size_t max, int64_t timeout_ns, size_t* count);
/* Message i of the handle's batch: *data (in the handle, not the box) and *size. */
SHMBOX_C_API int shmbox_batch_message(const shmbox_owner* o, size_t i, const void** data, size_t* size,
                                      shmbox_msg_info* info);
/* The same with the message's id and priority in *meta (may be NULL; else
 * its struct_size set). (SHMBOX_0.2) */
SHMBOX_C_API int shmbox_batch_message_meta(const shmbox_owner* o, size_t i, const void** data, size_t* size,
                                           shmbox_msg_meta* meta);
/* Messages in the handle's batch. */
SHMBOX_C_API size_t shmbox_batch_size(const shmbox_owner* o);
/* Zero-copy receive: calls fn(ctx, data, size, info) for each of up to `max`
 * messages in place in the box (waiting up to timeout_ns for the first);
 * each is committed when fn returns. fn must not keep the pointer, nor call
 * this handle. *count (may be NULL) gets how many. */
SHMBOX_C_API int shmbox_receive_in_place(shmbox_owner* o,
                                         void (*fn)(void* ctx, const void* data, size_t size,
                                                    const shmbox_msg_info* info),
                                         void* ctx, size_t max, int64_t timeout_ns, size_t* count);
/* Two-phase receive: up to `max` messages into the handle's batch, not
 * committed: a next owner receives them again (flagged) if this one dies. */
SHMBOX_C_API int shmbox_read(shmbox_owner* o, size_t max, int64_t timeout_ns, size_t* count);
/* Commits everything read: SHMBOX_RECV_OK, or SHMBOX_RECV_NOT_OWNER (the box
 * was taken meanwhile; *lost, may be NULL, gets how many went back). */
SHMBOX_C_API int shmbox_commit(shmbox_owner* o, size_t* lost);

/* The stash (boxes created with a stash): parks a copy of a received
 * message (enum shmbox_recv_status; SHMBOX_RECV_ERROR with
 * SHMBOX_E_STASH_FULL, SHMBOX_E_TOO_LARGE or SHMBOX_E_INVALID_ARGUMENT).
 * A priority box's: unstashed, it rejoins priority 0 (Owner::stash with a
 * priority has no C form yet). */
SHMBOX_C_API int shmbox_stash(shmbox_owner* o, const void* data, size_t size, uint32_t lane);
/* Makes every parked message the next ones received; returns how many. */
SHMBOX_C_API size_t shmbox_unstash_all(shmbox_owner* o);
/* Parked now (not yet unstashed). */
SHMBOX_C_API size_t shmbox_stashed(const shmbox_owner* o);
/* Priority boxes: moves what the lanes hold into the ordered store without
 * delivering; returns how many it moved. */
SHMBOX_C_API size_t shmbox_pump(shmbox_owner* o);

/* ---- Request/reply (docs/request-reply.md; all SHMBOX_0.3) ------------- */

/* What a request/reply call did (shmbox::reply_status, value for value). */
enum shmbox_reply_status {
  SHMBOX_REPLY_OK = 0,               /* requester: the reply is in buf; owner: the reply is stored */
  SHMBOX_REPLY_TIMEOUT = 1,          /* no reply in time (the request is over unless `keep`) */
  SHMBOX_REPLY_ALREADY_REPLIED = 2,  /* owner: answered already (by an owner that died); nothing sent */
  SHMBOX_REPLY_NOT_A_REQUEST = 3,    /* owner: the message carries no reply address */
  SHMBOX_REPLY_REQUESTER_GONE = 4,   /* owner: the requester is dead or gone: counted lost, dead-lettered */
  SHMBOX_REPLY_FULL = 5,             /* owner: the requester's reply box is full: counted lost */
  SHMBOX_REPLY_TOO_LARGE = 6,        /* the request or reply is larger than the box takes */
  SHMBOX_REPLY_NOT_OWNER = 7,        /* owner: this handle no longer owns the box */
  SHMBOX_REPLY_ERROR = 8             /* see shmbox_last_error_message */
};
/* "ok", "timeout", "already-replied", "not-a-request", "requester-gone",
 * "full", "too-large", "not-owner", "error"; "unknown" for another value. */
SHMBOX_C_API const char* shmbox_reply_status_string(int status);

typedef struct shmbox_requester shmbox_requester;
typedef struct shmbox_requester_options {
  uint32_t struct_size;
  uint32_t max_outstanding;  /* requests waiting for their reply at once (default 64) */
  uint32_t max_reply_size;   /* the largest reply in bytes; 0: the service box's slot size */
  int32_t any_owner;         /* a service box of another user */
} shmbox_requester_options;
/* Sets struct_size and the defaults. */
SHMBOX_C_API void shmbox_requester_options_init(shmbox_requester_options* o);
/* Attaches to service box `service` and makes this requester's reply box
 * (o may be NULL: the defaults). */
SHMBOX_C_API int shmbox_requester_attach(const char* service, const shmbox_requester_options* o, shmbox_requester** out);
/* Removes the reply box. */
SHMBOX_C_API void shmbox_requester_close(shmbox_requester* r);
/* Posts a request (a full `block` box waits up to timeout_ns; SHMBOX_BOX_TIMEOUT:
 * the box's): returns an enum shmbox_post_status; *ticket gets the request's
 * ticket when it is stored. SHMBOX_FULL also when max_outstanding requests wait. */
SHMBOX_C_API int shmbox_ask(shmbox_requester* r, const void* data, size_t size, int64_t timeout_ns, uint64_t* ticket);
/* Waits up to timeout_ns for the reply to `ticket` and copies it into buf
 * (cap at least shmbox_requester_max_reply): an enum shmbox_reply_status.
 * A timeout ends the request unless `keep` is non-zero. */
SHMBOX_C_API int shmbox_ask_wait(shmbox_requester* r, uint64_t ticket, void* buf, size_t cap, size_t* size,
                                 int64_t timeout_ns, int keep);
/* Gives up on a request: its reply, if it comes, is counted late. */
SHMBOX_C_API void shmbox_ask_forget(shmbox_requester* r, uint64_t ticket);
/* Readable when a reply may have come (then shmbox_ask_wait with timeout 0
 * and keep 1); -1 on error. Owned by the handle. */
SHMBOX_C_API int shmbox_requester_notify_fd(shmbox_requester* r);
/* The largest reply and the largest request, in bytes. */
SHMBOX_C_API size_t shmbox_requester_max_reply(const shmbox_requester* r);
SHMBOX_C_API size_t shmbox_requester_max_request(const shmbox_requester* r);
/* Its counters: asked, replied, timed_out, duplicates, late, stray. */
typedef struct shmbox_requester_stats {
  uint32_t struct_size;
  uint32_t reserved;
  uint64_t asked, replied, timed_out, duplicates, late, stray;
} shmbox_requester_stats;
SHMBOX_C_API int shmbox_requester_stats_get(const shmbox_requester* r, shmbox_requester_stats* out);

/* The owner's side: answers message i of the handle's batch (shmbox_read,
 * shmbox_receive_batch, a delivery), or the message the last
 * shmbox_receive / shmbox_try_receive / shmbox_receive_meta took. Returns an
 * enum shmbox_reply_status. A request read and not yet committed is marked
 * answered, so that an heir does not answer it again. */
SHMBOX_C_API int shmbox_reply_batch(shmbox_owner* o, size_t i, const void* data, size_t size);
SHMBOX_C_API int shmbox_reply_last(shmbox_owner* o, const void* data, size_t size);

/* What a filter makes of one message (shmbox::filter_verdict). */
enum shmbox_verdict { SHMBOX_DELIVER = 0, SHMBOX_DROP = 1, SHMBOX_SKIP = 2 };
/* A filter sees each message in delivery order: data has room for `cap`
 * bytes (at least *size, at least the slot size); it may rewrite the message
 * in place and set *size (<= cap). Returns an enum shmbox_verdict. */
typedef int (*shmbox_filter_fn)(void* ctx, void* data, size_t* size, size_t cap);

/* pobox's owner states: the box's state (enum shmbox_owner_mode). */
SHMBOX_C_API int shmbox_owner_mode(const shmbox_owner* o);
/* Disarms: messages accumulate, nothing is signalled. */
SHMBOX_C_API void shmbox_owner_passive(shmbox_owner* o);
/* Arms notify (one-shot): shmbox_owner_wait reports SHMBOX_EVENT_NOTIFIED
 * once data is there. */
SHMBOX_C_API void shmbox_owner_notify(shmbox_owner* o);
/* Arms active (one-shot): the next delivery of up to `max` messages through
 * `filter` (NULL: all; it is called from shmbox_owner_wait with ctx) is made
 * as soon as data is there. */
SHMBOX_C_API void shmbox_owner_active(shmbox_owner* o, shmbox_filter_fn filter, void* ctx, size_t max);

/* How full the box is, for its owner (shmbox::usage_info; read without
 * locks). (SHMBOX_0.2) */
typedef struct shmbox_usage {
  uint32_t struct_size;
  uint32_t lanes;                            /* entries used below */
  uint64_t depth[SHMBOX_MAX_LANES];          /* messages per lane */
  uint32_t capacity[SHMBOX_MAX_LANES];       /* per lane */
  uint64_t depth_total;
  uint64_t capacity_total;
  uint64_t dropped_since_delivery;           /* overflow drops since the last delivery (shmbox_owner_deliver, wait) */
} shmbox_usage;
/* Fills *out (set out->struct_size). (SHMBOX_0.2) */
SHMBOX_C_API int shmbox_owner_usage(const shmbox_owner* o, shmbox_usage* out);

/* What shmbox_owner_wait saw (shmbox::owner_event). */
enum shmbox_event {
  SHMBOX_EVENT_NONE = 0,       /* the timeout passed */
  SHMBOX_EVENT_NOTIFIED = 1,   /* notify fired: data is there */
  SHMBOX_EVENT_DELIVERED = 2,  /* active fired: the delivery is in the handle's batch */
  SHMBOX_EVENT_NOT_OWNER = 3,
  SHMBOX_EVENT_ERROR = 4
};
/* Waits up to timeout_ns for the armed state to fire (enum shmbox_event).
 * A delivery's messages are in the handle's batch (shmbox_batch_message);
 * *dropped (may be NULL) gets the drops since the last delivery plus the
 * filter's. Serves give-away requests. */
SHMBOX_C_API int shmbox_owner_wait(shmbox_owner* o, int64_t timeout_ns, uint64_t* dropped);
/* A delivery now of up to `max` messages through `filter` (NULL: all) into
 * the handle's batch, whatever the state (enum shmbox_recv_status:
 * SHMBOX_RECV_EMPTY when the box is empty). */
SHMBOX_C_API int shmbox_owner_deliver(shmbox_owner* o, size_t max, shmbox_filter_fn filter, void* ctx,
                                      uint64_t* dropped);
/* A descriptor for poll/epoll: readable when an armed notify or active
 * fired (then call shmbox_owner_wait(o, 0, ...)). Owned by the handle; -1 on
 * error. */
SHMBOX_C_API int shmbox_owner_notify_fd(shmbox_owner* o);

/* One descriptor for many owners (shmbox::NotifyGroup; docs/owner-states.md):
 * each member owner (shmbox_owner_join) is named by its tag when its armed
 * notify or active state fires; 10,000 owned boxes within a descriptor
 * limit of 20,000. (SHMBOX_0.4: every function of this group) */
typedef struct shmbox_notify_group shmbox_notify_group;
SHMBOX_C_API int shmbox_notify_group_create(shmbox_notify_group** out);
/* Members keep working (they are told nothing more); NULL is ignored. */
SHMBOX_C_API void shmbox_notify_group_close(shmbox_notify_group* g);
/* Readable (poll, epoll) while some tag is ready; -1 on error. */
SHMBOX_C_API int shmbox_notify_group_fd(const shmbox_notify_group* g);
/* Copies up to `cap` ready tags (each once) into `tags`; returns how many.
 * Tags beyond `cap` stay for the next call (the fd is then not readable
 * for them: call again while it returns `cap`). */
SHMBOX_C_API size_t shmbox_notify_group_ready(shmbox_notify_group* g, uint64_t* tags, size_t cap);
/* Instead of a notify fd of its own, the owner's notifications go to `g`
 * under `tag` (see shmbox::Owner::join). SHMBOX_OK or an error code. */
SHMBOX_C_API int shmbox_owner_join(shmbox_owner* o, shmbox_notify_group* g, uint64_t tag);
SHMBOX_C_API void shmbox_owner_leave_group(shmbox_owner* o);

/* Hands the box to process `pid` of this pid namespace, waiting for it as
 * heir or listener; 1 once it owns the box (this handle then no longer
 * does), 0 with nothing changed (see shmbox::Owner::give_away):
 * shmbox_last_error() and shmbox_last_error_message() say why (not
 * waiting, timed out, not the owner, bad arguments). */
SHMBOX_C_API int shmbox_owner_give_away(shmbox_owner* o, uint32_t pid, const void* data, size_t size,
                                        int64_t timeout_ns);
/* The same for heir-table entry `entry`, in any pid namespace. */
SHMBOX_C_API int shmbox_owner_give_away_to_heir(shmbox_owner* o, uint32_t entry, const void* data, size_t size,
                                                int64_t timeout_ns);
/* Serve (nonzero) or not give-away requests (shmbox_box_request_give_away). */
SHMBOX_C_API void shmbox_owner_accept_give_away_requests(shmbox_owner* o, int accept);
/* Renews the lease of a box created with one (receiving renews it too). */
SHMBOX_C_API void shmbox_owner_renew(shmbox_owner* o);
/* How this owner got the box (set out->struct_size). */
SHMBOX_C_API int shmbox_owner_transfer(const shmbox_owner* o, shmbox_transfer* out);
/* The largest message the box holds (its slot size): the least `cap` of
 * shmbox_receive. */
SHMBOX_C_API uint32_t shmbox_owner_max_message_size(const shmbox_owner* o);
/* The epoch this handle owns the box under. */
SHMBOX_C_API uint64_t shmbox_owner_epoch(const shmbox_owner* o);
/* Why the last call returned an *_ERROR status (an error code). */
SHMBOX_C_API int shmbox_owner_last_error(const shmbox_owner* o);

/* ---- Heirs ------------------------------------------------------------ */

/* Registers this process as an heir of box `name` (data: up to 64 bytes,
 * handed over in the transfer record; may be NULL). */
SHMBOX_C_API int shmbox_heir_enlist(const char* name, const void* data, size_t size, shmbox_heir** out);
/* Waits only for give-away offers to this process. */
SHMBOX_C_API int shmbox_heir_listen(const char* name, shmbox_heir** out);
/* Withdraws the entry. */
SHMBOX_C_API void shmbox_heir_close(shmbox_heir* h);
/* Waits up to timeout_ns to be given the box: *out is then its owner handle
 * (shmbox_owner_transfer says how); SHMBOX_E_TIMED_OUT otherwise. */
SHMBOX_C_API int shmbox_heir_await(shmbox_heir* h, int64_t timeout_ns, shmbox_owner** out);
/* A descriptor for poll/epoll: readable when shmbox_heir_await(h, 0, ...) may succeed. */
SHMBOX_C_API int shmbox_heir_fd(const shmbox_heir* h);
/* 0 when this process is next in line (listeners: always 0). */
SHMBOX_C_API uint32_t shmbox_heir_position(const shmbox_heir* h);

/* ---- Pools (shmbox/pool.hpp) -------------------------------------------- */

typedef struct shmbox_pool shmbox_pool;
typedef struct shmbox_lease shmbox_lease;
typedef struct shmbox_member shmbox_member;

/* How a lease ends (shmbox::outcome). */
enum shmbox_outcome { SHMBOX_OUTCOME_OK = 0, SHMBOX_OUTCOME_FAIL = 1 };
/* What a give-back did (shmbox::return_status). */
enum shmbox_return_status {
  SHMBOX_RETURN_OK = 0,
  SHMBOX_RETURN_DOUBLE = 1,  /* given back already */
  SHMBOX_RETURN_STALE = 2,   /* the member was replaced while leased */
  SHMBOX_RETURN_ERROR = 3
};

/* Opens pool `name` (created by `shmbox pool create`, run by `shmbox pool run`). */
SHMBOX_C_API int shmbox_pool_open(const char* name, int any_owner, shmbox_pool** out);
/* Frees the handle. */
SHMBOX_C_API void shmbox_pool_close(shmbox_pool* p);
/* Takes a free member, waiting up to timeout_ns (0: never waits): *out is
 * the lease (SHMBOX_E_NO_MEMBERS_*, SHMBOX_E_TIMED_OUT, SHMBOX_E_POOL_REMOVED). */
SHMBOX_C_API int shmbox_pool_take(shmbox_pool* p, int64_t timeout_ns, shmbox_lease** out);
/* Culls now (shmbox::Pool::cull): the pool's supervisor stops the free
 * members idle at least idle_ms (0: every free one), down to init_count;
 * waits up to timeout_ns for its answer, the number stopped, in *culled
 * (may be NULL). SHMBOX_E_REFUSED: no supervisor runs; SHMBOX_E_TIMED_OUT,
 * SHMBOX_E_POOL_REMOVED, SHMBOX_E_INVALID_ARGUMENT (idle over 24 h). */
SHMBOX_C_API int shmbox_pool_cull(shmbox_pool* p, int64_t idle_ms, int64_t timeout_ns, uint32_t* culled);

/* shmbox_pool_reconfigure's changes (shmbox::pool_changes): a field is
 * changed when its bit is in `set`, the others are kept. */
enum shmbox_pool_change {
  SHMBOX_POOL_SET_INIT_COUNT = 1,
  SHMBOX_POOL_SET_MAX_COUNT = 2,  /* 1..the pool's table size, fixed at creation */
  SHMBOX_POOL_SET_CULL_AFTER = 4,
  SHMBOX_POOL_SET_QUEUE_MAX = 8,
  SHMBOX_POOL_SET_AUTO_GROW = 16
};
#define SHMBOX_NO_AUTO_GROW 0xFFFFFFFFu /* auto_grow_threshold: none */
typedef struct shmbox_pool_changes {
  uint32_t struct_size; /* sizeof(shmbox_pool_changes) */
  uint32_t set;         /* enum shmbox_pool_change bits */
  uint32_t init_count;
  uint32_t max_count;
  uint32_t queue_max;
  uint32_t auto_grow_threshold; /* SHMBOX_NO_AUTO_GROW: none */
  int64_t cull_after_ms;        /* 0: never */
} shmbox_pool_changes;
/* Changes a running pool's parameters (shmbox::Pool::reconfigure, pooler's
 * reconfigure): with a supervisor running, waits up to timeout_ns until it
 * applied them (SHMBOX_E_TIMED_OUT: set, not applied yet). SHMBOX_E_REFUSED:
 * a lowered max_count would stop members in use (nothing changed);
 * SHMBOX_E_INVALID_ARGUMENT: a value out of range; SHMBOX_E_POOL_REMOVED. */
SHMBOX_C_API int shmbox_pool_reconfigure(shmbox_pool* p, const shmbox_pool_changes* changes, int64_t timeout_ns);
/* The member's box name (valid while the lease is). */
SHMBOX_C_API const char* shmbox_lease_box(const shmbox_lease* l);
/* A producer on the member's box, owned by the lease (closed with it;
 * shmbox_producer_close refuses it). */
SHMBOX_C_API shmbox_producer* shmbox_lease_producer(shmbox_lease* l);
/* The member's worker process (0: unknown here). */
SHMBOX_C_API uint32_t shmbox_lease_worker_pid(const shmbox_lease* l);
/* Ends the lease (enum shmbox_return_status); outcome is enum shmbox_outcome. */
SHMBOX_C_API int shmbox_lease_give_back(shmbox_lease* l, int outcome);
/* Frees the lease; one not given back is given back as failed (not by a
 * fork child's copy: the lease stays the parent's). */
SHMBOX_C_API void shmbox_lease_close(shmbox_lease* l);
/* The worker side, in a pool's member command: takes the member's box. */
SHMBOX_C_API int shmbox_member_from_env(shmbox_member** out);
/* The member's owner handle, owned by the member (closed with it;
 * shmbox_owner_close refuses it). */
SHMBOX_C_API shmbox_owner* shmbox_member_owner(shmbox_member* m);
/* 1 when the message is the supervisor's health ping (then it is answered). */
SHMBOX_C_API int shmbox_member_answer_ping(shmbox_member* m, const void* data, size_t size);
/* 1 when the worker should end: its pool was removed or its entry no longer
 * names this member (stopped, replaced); 0 otherwise. Check it when a
 * receive times out. */
SHMBOX_C_API int shmbox_member_stopped(shmbox_member* m);
/* Frees the member (releases its box). */
SHMBOX_C_API void shmbox_member_close(shmbox_member* m);

#ifdef __cplusplus
}
#endif

#endif /* SHMBOX_SHMBOX_H */
