/* A data-path thread's link to scriptworker (issue 16): its sockets straight to each Python
 * interpreter and to scriptworker's parent (fgx/swproto.h), the frames over them, the service
 * files the interpreters were sent and their log entries until STATS takes them. nfqworker and
 * proxyworker share it; what a verdict does to a packet or a connection stays in each worker.
 * Embedded in the thread's script state (_init/_release). No thread of its own and no
 * allocation per frame: a DATA frame is one send(2) to the interpreter that judges its
 * connection, its VERDICT one recv(2) from the thread's own event loop (fd: an epoll set of
 * the sockets). */
#ifndef FGX_SWLINK_H
#define FGX_SWLINK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fgx/dp.h"
#include "fgx/swproto.h"
#include "fgx/wcfg.h"

/* The owner's lookup of a connection by its link conn id: true with e's family, addresses and
 * ports filled, false when the connection is gone. Called on the owner's thread, inside
 * fgx_swlink_recv(). */
typedef bool (*fgx_swlink_conn_fn)(void *arg, uint64_t conn, struct fgx_dp_script_log *e);

/* An interpreter's ACK of a SCRIPT for service (code 0 loaded, 1 refused), inside
 * fgx_swlink_recv(). */
typedef void (*fgx_swlink_ack_fn)(void *arg, uint32_t service, uint8_t code);

/* A service's file as the interpreters have it: sent again only when this changes. */
struct fgx_swlink_sent {
    uint32_t id;
    uint64_t hash; /* of the file and its deadline */
};

/* A DATA frame sent, its VERDICT not yet read: an interpreter answers in order, so the oldest
 * is at the head; what a replaced interpreter leaves unanswered gets an ERROR from here. */
struct fgx_swlink_call {
    uint64_t conn;
    uint32_t seq, service;
    bool answered; /* the parent's TIMEOUT came for it first */
};

#define FGX_SWLINK_CALLS 4096 /* per interpreter: past it a DATA frame is refused (-EAGAIN) */

struct fgx_swlink_py {
    int fd;     /* -1: down */
    bool fresh; /* connected, not yet sent the files */
    uint32_t files_seq; /* the seq counter when the files were last sent to it */
    struct fgx_swlink_call *calls; /* FGX_SWLINK_CALLS, a ring */
    uint32_t head, ncalls;
    uint8_t *out; /* frames that need no answer (CLOSE): they go ahead of the next message */
    size_t outlen;
};

struct fgx_swlink {
    bool up; /* configured (a URL): false, every send is -ENOTCONN */
    int fd;  /* epoll set of the sockets: readable while a frame waits; -1 when not up */
    uint32_t seq; /* SCRIPT and DATA frames number on one counter */
    char path[108];
    uint64_t id;   /* this thread's link id (HELLO) */
    int ctl;       /* scriptworker's parent; -1: down */
    unsigned nprocs; /* interpreters, counted when ctl connected */
    struct fgx_swlink_py py[FGX_SW_PROCS_MAX];
    bool need;        /* something is down or fresh: fgx_swlink_resend() has work */
    uint64_t retry_ms; /* the next connection attempt */
    struct fgx_swlink_sent *sent;
    size_t nsent;
    /* receiving: the message being read, from which socket (-1: ctl), where in it */
    uint8_t *rbuf;
    size_t rlen, roff;
    int rfrom;
    /* false once an interpreter's socket ended: the parent's is read to its end (a TIMEOUT)
     * before that interpreter's calls are answered ERROR */
    bool ctl_drained;
    int ready[FGX_SW_PROCS_MAX + 1]; /* sockets epoll said are readable (-1: ctl) */
    unsigned nready;
    /* the owner's: fills a log entry's connection (family, addresses) from the conn id of a
     * LOG frame that names one; NULL: entries carry none */
    fgx_swlink_conn_fn conn_fn;
    void *conn_arg;
    /* the owner's: told of each ACK (a SCRIPT loaded, code 0, or refused, 1) with conn_arg, so
     * that one who waits for a file to load knows (`fgexctl script proxy`); NULL: skipped */
    fgx_swlink_ack_fn ack_fn;
};

/* Connect to scriptworker at URL (ipc://PATH, fgx/swproto.h) without waiting; while it is not
 * there, sending is refused and the connection is tried again (at most every 100 ms) before
 * later DATA frames. id: the thread's link id (unique among the threads of all workers). url
 * NULL or empty: l stays down and 0. Returns 0 or -errno; fgx_swlink_release() either way. */
int fgx_swlink_init(struct fgx_swlink *l, const char *url, uint64_t id);
void fgx_swlink_release(struct fgx_swlink *l);

/* One frame, without waiting: DATA, OPEN, CLOSE to the interpreter of h->hash; SCRIPT and
 * UNSCRIPT to every interpreter. A CLOSE waits for the next message to that interpreter. 0,
 * -ENOTCONN (down), -ENOMEM, or -EAGAIN (its socket or its calls full: logged, rate-limited). */
int fgx_swlink_send(struct fgx_swlink *l, const struct fgx_sw_hdr *h, const void *p);
/* A DATA frame with a's addresses ahead of its h->len bytes at p (FGX_SW_DATA_ADDR). */
int fgx_swlink_send_addr(struct fgx_swlink *l, const struct fgx_sw_hdr *h,
                         const struct fgx_sw_addr *a, const void *p);

/* A new ruleset generation: SCRIPT for every service whose file (or deadline) the interpreters
 * do not have, UNSCRIPT for those that have none any more. Ahead of any DATA under it, on the
 * same ordered sockets. One allocation per generation, none when down. */
void fgx_swlink_switch(struct fgx_swlink *l, const struct fgx_wcfg *cfg);

/* fgx_swlink_resend()'s slow path. */
void fgx_swlink_reconnect(struct fgx_swlink *l, const struct fgx_wcfg *cfg);

/* Before a DATA frame: a socket down is connected again (rate-limited), and an interpreter
 * newly connected (a replaced one, a restarted scriptworker) gets every file first. Inline:
 * the common case on the packet path is one test. */
static inline void fgx_swlink_resend(struct fgx_swlink *l, const struct fgx_wcfg *cfg)
{
    if (l->need)
        fgx_swlink_reconnect(l, cfg);
}

/* The next VERDICT, without waiting: its header in *h, the bytes after it ("function\0detail")
 * at *payload (*len of them; both may be NULL), valid until the next call or
 * fgx_swlink_release(). On the way, LOG frames go to the process's log queue; ACK, HELLO and
 * short frames are skipped. The calls of an interpreter that went away are answered here, as
 * FGX_SW_ERROR "interpreter replaced", once the parent's socket was read to its end (its
 * TIMEOUT for the call the interpreter was stuck in, and the log entries: a "timeout" or a
 * "restart", come from there). Returns 0 or -EAGAIN (none waits, or down). */
int fgx_swlink_recv(struct fgx_swlink *l, struct fgx_sw_hdr *h, const uint8_t **payload,
                    size_t *len);

/* A VERDICT's function name (its payload up to the first NUL) into fn, cut to cap - 1 bytes
 * and NUL-terminated (cap > 0): the name a block's event carries. */
void fgx_swlink_verdict_fn(const uint8_t *payload, size_t len, char *fn, size_t cap);

/* A LOG frame's payload "kind\0function\0text" into the process's queue (every thread's link,
 * FGX_SWLINK_LOG_MAX entries: past that, or out of memory, counted as lost; one without both
 * separators is ignored). where: the call's connection (its family and addresses), or NULL. */
void fgx_swlink_log_push(uint32_t service, const char *payload, size_t len,
                         const struct fgx_dp_script_log *where);

/* The queued entries move into out (script_logs, malloc'd; the strings out's), with the count
 * of lost ones so far. 0 or -ENOMEM (the entries stay queued). */
int fgx_swlink_logs_take(struct fgx_dp_stats *out);

#define FGX_SWLINK_LOG_MAX 1024

#endif
