/* Which connections a listener closes when one source address, or all of them together, hold
 * too many (issue 24: forty idle connections must not blind a listener). Pure logic, shared by
 * controld's two TLS listeners: the web server's admission (ctl_web_conn.c), where a new
 * connection is weighed against those open, and the control listener's guard (chan.c), which
 * looks at its pending connections a few times a second.
 *
 * The rules, in order:
 *  1. no source holds more than per_src: its excess goes;
 *  2. no more than max in all: what goes is taken from the source that holds the most, and
 *     never a source's last connection, so that an address with no connection open always
 *     gets one in, whatever the others hold; a source that already holds one may not take the
 *     last `reserve` places (a new arrival of such a source needs a place freed below
 *     max - reserve).
 * Within a source what goes first: connections that sent nothing yet (oldest first), then
 * those still in their handshake or first request (oldest first), then idle keep-alive ones
 * (longest idle first). Busy ones (a request running, a live stream) are never taken. */
#ifndef FGX_CONNLIMIT_H
#define FGX_CONNLIMIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fgx/chan_tls.h"

enum fgx_conn_kind {
    FGX_CONN_PENDING = 0, /* no first request yet (TLS handshake included) */
    FGX_CONN_IDLE = 1,    /* between requests (keep-alive) */
    FGX_CONN_BUSY = 2     /* a request running or a live stream: never taken */
};

enum fgx_conn_cut {
    FGX_CUT_NONE = 0,
    FGX_CUT_PER_SRC = 1, /* its source held more than per_src */
    FGX_CUT_FULL = 2     /* the listener was full: taken from the source that held the most */
};

struct fgx_conn_cand {
    struct fgx_peer src;
    uint64_t since_ms; /* when it became what kind says: accepted, or its last request ended */
    uint32_t tag;      /* the caller's */
    uint8_t kind;      /* enum fgx_conn_kind */
    bool silent;       /* pending, and not one byte received yet */
    bool arrival;      /* the connection being admitted (at most one) */
    uint8_t cut;       /* out: enum fgx_conn_cut */
};

struct fgx_connlimit {
    unsigned max;     /* 0: no limit */
    unsigned per_src; /* 0: no limit */
    unsigned reserve; /* < max */
};

/* Whether two addresses are the same source: IPv4 address, or IPv6 /64. */
bool fgx_conn_same_src(const struct fgx_peer *a, const struct fgx_peer *b);

/* Mark in c[0..n) (reordered: by source, then in the order they would go) the connections to
 * close, each with its reason. Returns how many are marked. An arrival marked is one to
 * refuse: nothing else could make room for it. */
size_t fgx_connlimit_pick(const struct fgx_connlimit *lim, struct fgx_conn_cand *c, size_t n);

#endif
