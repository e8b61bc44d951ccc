/* A data-path worker's link to scriptworker (issue 16): the one nng pair1 socket a packet or
 * proxy thread has to it, the frames of fgx/swproto.h over it, the service files it was sent
 * and scriptworker's log entries until STATS takes them. nfqworker and proxyworker share it;
 * what a verdict does to a packet or a connection stays in each worker. Embedded in the
 * thread's script state (_init/_release): sending is one call, no allocation beyond nng's
 * message. */
#ifndef FGX_SWLINK_H
#define FGX_SWLINK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <nng/nng.h>

#include "fgx/dp.h"
#include "fgx/swproto.h"
#include "fgx/wcfg.h"

/* A service's file as scriptworker has it: sent again only when this changes. */
struct fgx_swlink_sent {
    uint32_t id;
    uint64_t hash; /* of the file and its deadline */
};

struct fgx_swlink {
    nng_socket sock;
    bool up; /* dialled: false without a URL (or a socket), every send is then -ENOTCONN */
    int fd;  /* readable while a frame waits: the thread's loop polls it; -1 when not up */
    /* the last frame's seq: SCRIPT and DATA frames number on one counter, so a verdict's seq
     * names one frame of this link */
    uint32_t seq;
    struct fgx_swlink_sent *sent;
    size_t nsent;
    int resend;   /* __atomic: set on nng's thread when a (new) scriptworker connected */
    nng_msg *msg; /* the frame fgx_swlink_recv() returned last, freed by the next call */
};

/* Dial URL-peer (scriptworker listens on one socket per sender: scriptworker/sw.h) without
 * blocking: nng redials while scriptworker starts or restarts. url NULL or empty: l stays down
 * and 0. Returns 0 or -errno (-EIO: nng refused, logged); fgx_swlink_release() either way. */
int fgx_swlink_init(struct fgx_swlink *l, const char *url, unsigned peer);
void fgx_swlink_release(struct fgx_swlink *l);

/* One frame, the header then h->len bytes of p, without waiting. 0, -ENOTCONN (down), -ENOMEM,
 * or -EAGAIN (nng's queue full or no peer: logged, rate-limited). */
int fgx_swlink_send(struct fgx_swlink *l, const struct fgx_sw_hdr *h, const void *p);

/* A new ruleset generation: SCRIPT for every service whose file (or deadline) scriptworker
 * does not have, UNSCRIPT for those that have none any more. Ahead of any DATA under it, on the
 * same ordered pipe. One allocation per generation, none when down. */
void fgx_swlink_switch(struct fgx_swlink *l, const struct fgx_wcfg *cfg);

/* Before a DATA frame: a scriptworker that (re)connected has no file, it gets them all again.
 * Inline: the common case on the packet path is one atomic load. */
static inline void fgx_swlink_resend(struct fgx_swlink *l, const struct fgx_wcfg *cfg)
{
    if (__atomic_load_n(&l->resend, __ATOMIC_ACQUIRE)) {
        __atomic_store_n(&l->resend, 0, __ATOMIC_RELAXED);
        l->nsent = 0;
        fgx_swlink_switch(l, cfg);
    }
}

/* The next VERDICT frame from scriptworker, without waiting: its header in *h, the bytes after
 * it ("function\0detail") at *payload (*len of them; both may be NULL), valid until the next
 * call or fgx_swlink_release() (the message is kept rather than copied). On the way, LOG
 * frames go to the process's log queue; other frames (ACK) and ones shorter than a header are
 * skipped: no sender acts on them. Returns 0 or -EAGAIN (none waits, or down). */
int fgx_swlink_recv(struct fgx_swlink *l, struct fgx_sw_hdr *h, const uint8_t **payload,
                    size_t *len);

/* A VERDICT's function name (its payload up to the first NUL) into fn, cut to cap - 1 bytes
 * and NUL-terminated (cap > 0): the name a block's event carries. */
void fgx_swlink_verdict_fn(const uint8_t *payload, size_t len, char *fn, size_t cap);

/* A LOG frame's payload "kind\0function\0text" into the process's queue (every thread's link,
 * FGX_SWLINK_LOG_MAX entries: past that, or out of memory, counted as lost; one without both
 * separators is ignored). */
void fgx_swlink_log_push(uint32_t service, const char *payload, size_t len);

/* The queued entries move into out (script_logs, malloc'd; the strings out's), with the count
 * of lost ones so far. 0 or -ENOMEM (the entries stay queued). */
int fgx_swlink_logs_take(struct fgx_dp_stats *out);

#define FGX_SWLINK_LOG_MAX 1024

#endif
