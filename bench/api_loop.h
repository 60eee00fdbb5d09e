/* bench/api_loop.h - bench/api_loop.c's one function (C linkage). */
#ifndef SHMBENCH_API_LOOP_H
#define SHMBENCH_API_LOOP_H
#ifdef __cplusplus
extern "C" {
#endif
/* Posts `batch` messages of `size` bytes into box `name` and receives them
 * (shmbox_post, shmbox_receive), `rounds` times, checking each message's
 * sequence number: ns per message (post + receive), or -1 on any failure. */
double shmbench_c_post_recv(const char* name, long rounds, unsigned batch, unsigned size);
#ifdef __cplusplus
}
#endif
#endif
