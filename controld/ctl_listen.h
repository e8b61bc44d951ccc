/* controld's listeners: the listening socket for "ADDR:PORT" of the HTTP ones (metrics, web),
 * made here so that both bind alike (libmicrohttpd is handed the socket); and what the guards
 * of the two TLS listeners (web: ctl_web_conn.c, control: chan.c's guard) closed or refused,
 * counted for `status` and noted in the health log, one entry per source and listener a minute
 * at most. */
#ifndef CTL_LISTEN_H
#define CTL_LISTEN_H

#include <stdint.h>

#include "fgx/chan_tls.h"
#include "fgx/connlimit.h"

/* The listen(2) backlog: a burst of connections (a flood, or every page of a team at once)
 * waits in the kernel's queue instead of losing its SYNs for a second (the kernel caps it at
 * net.core.somaxconn). */
#define CTL_LISTEN_BACKLOG 4096

enum ctl_listener { CTL_LISTENER_CONTROL = 0, CTL_LISTENER_WEB = 1, CTL_LISTENER_N };

enum ctl_limit_hit {
    CTL_HIT_TIMEOUT = 0,    /* no first request within the handshake timeout */
    CTL_HIT_PER_SRC,        /* more than per_src from one address */
    CTL_HIT_FULL,           /* the listener full: taken from the address holding the most */
    CTL_HIT_STREAM_SESSION, /* /api/live: more than its streams per session */
    CTL_HIT_STREAM_SRC,     /* /api/live: more than its streams per address */
    CTL_HIT_STREAM_FULL,    /* /api/live: more than its streams in all */
    CTL_HIT_N
};

/* What `status` shows of a listener. */
struct ctl_listen_view {
    bool on;
    unsigned max, per_src, handshake_s;
    unsigned streams_per_session, streams_per_src, streams_max; /* web */
    unsigned open, pending, streams;                            /* now */
    uint64_t hits[CTL_HIT_N];                                   /* since controld started */
};

/* Set a listener's limits as it starts (its view turns on). */
void ctl_listen_limits(enum ctl_listener l, unsigned max, unsigned per_src, unsigned handshake_s);
void ctl_listen_stream_limits(unsigned per_session, unsigned per_src, unsigned max);
/* Its connections open now (any thread). */
void ctl_listen_gauge(enum ctl_listener l, unsigned open, unsigned pending, unsigned streams);
/* n connections from src closed or refused for hit (any thread): counted, and noted in the
 * health log unless src had an entry of this listener within the last minute. */
void ctl_listen_hit(enum ctl_listener l, enum ctl_limit_hit hit, const struct fgx_peer *src,
                    unsigned n);
void ctl_listen_view_get(enum ctl_listener l, struct ctl_listen_view *out);
const char *ctl_listener_name(enum ctl_listener l);
/* Forget every count and note (unit tests). */
void ctl_listen_reset(void);

/* The control listener's guard reports here (fgx_chan_guard_config's cut and gauge). */
void ctl_listen_control_cut(const struct fgx_peer *peer, int why, unsigned n, void *arg);
void ctl_listen_control_gauge(unsigned pending, void *arg);

/* Raise the soft limit of open descriptors to the hard one: every connection the listeners
 * hold is one. Logs what it is; returns the soft limit now. */
unsigned long ctl_listen_raise_nofile(void);

/* Listen on "ADDR:PORT" ("127.0.0.1:9100", "[::1]:9100", ":9100" for every address; PORT 0
 * picks a free one): *fd (non-blocking, close-on-exec) and the port bound. what names the
 * listener in log lines. Returns 0, -EINVAL for a bad address, or the socket error. */
int ctl_listen_tcp(const char *what, const char *addr, int *fd, uint16_t *port);

#endif
