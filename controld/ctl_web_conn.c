/* controld web stage, its connections (ctl_web_conn.h): one slot per connection of the web
 * listener, its address, state and age, under one lock, weighed by fgx_connlimit_pick(). */
#include "controld/ctl_web_conn.h"

#include <errno.h>
#include <linux/tcp.h> /* struct tcp_info with tcpi_bytes_received */
#include <netinet/in.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "controld/ctl_listen.h"
#include "fgx/connlimit.h"
#include "fgx/log.h"

struct web_conn {
    struct MHD_Connection *conn; /* NULL: a free slot */
    struct fgx_peer src;
    int fd;
    uint64_t since_ms; /* accepted (pending) or its last request ended (idle) */
    uint8_t kind;      /* enum fgx_conn_kind */
    bool spoke;        /* it received bytes once: never silent again */
    bool cut;          /* shut down; libmicrohttpd has not closed it yet */
    int32_t next_free;
};

struct ctl_web_conns {
    pthread_mutex_t lock;
    struct fgx_connlimit lim;
    uint64_t handshake_ms;
    unsigned cap; /* slots: lim.max + CTL_WEB_CONN_SLACK */
    unsigned used;
    int32_t free_head;
    struct web_conn *v;
    struct fgx_conn_cand *cand; /* cap + 1, admission's scratch */
};

static uint64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

int ctl_web_conns_new(unsigned max, unsigned per_src, unsigned handshake_s,
                      struct ctl_web_conns **out)
{
    struct ctl_web_conns *wc = calloc(1, sizeof(*wc));

    if (!wc || max == 0)
        goto err;
    wc->lim = (struct fgx_connlimit){.max = max, .per_src = per_src, .reserve = max / 8};
    wc->handshake_ms = (uint64_t)handshake_s * 1000;
    wc->cap = max + CTL_WEB_CONN_SLACK;
    wc->v = calloc(wc->cap, sizeof(*wc->v));
    wc->cand = calloc(wc->cap + 1, sizeof(*wc->cand));
    if (!wc->v || !wc->cand)
        goto err;
    for (unsigned i = 0; i < wc->cap; i++)
        wc->v[i].next_free = i + 1 < wc->cap ? (int32_t)i + 1 : -1;
    pthread_mutex_init(&wc->lock, NULL);
    ctl_listen_limits(CTL_LISTENER_WEB, max, per_src, handshake_s);
    *out = wc;
    return 0;
err:
    if (wc) {
        free(wc->v);
        free(wc->cand);
    }
    free(wc);
    return -ENOMEM;
}

void ctl_web_conns_free(struct ctl_web_conns *wc)
{
    if (!wc)
        return;
    pthread_mutex_destroy(&wc->lock);
    free(wc->v);
    free(wc->cand);
    free(wc);
}

unsigned ctl_web_conns_mhd_limit(const struct ctl_web_conns *wc)
{
    return wc->cap + 16;
}

/* Whether the connection has received nothing yet (under lock). */
static bool conn_silent(struct web_conn *c)
{
    struct tcp_info ti;
    socklen_t tl = sizeof(ti);

    if (c->spoke || c->kind != FGX_CONN_PENDING)
        return false;
    memset(&ti, 0, sizeof(ti));
    if (getsockopt(c->fd, IPPROTO_TCP, TCP_INFO, &ti, &tl) == 0 &&
        tl >= offsetof(struct tcp_info, tcpi_bytes_received) + sizeof(ti.tcpi_bytes_received) &&
        ti.tcpi_bytes_received > 0)
        c->spoke = true;
    return !c->spoke;
}

/* Shut a tracked connection down (under lock: libmicrohttpd closes its fd only after its
 * NOTIFY_CLOSED, which takes the lock, so the fd is still this connection's). */
static void conn_cut(struct web_conn *c)
{
    if (c->cut)
        return;
    c->cut = true;
    (void)shutdown(c->fd, SHUT_RDWR);
}

/* Pending connections past the deadline go (under lock). */
static void sweep_locked(struct ctl_web_conns *wc, uint64_t now)
{
    for (unsigned i = 0; i < wc->cap; i++) {
        struct web_conn *c = &wc->v[i];

        if (!c->conn || c->cut || c->kind != FGX_CONN_PENDING ||
            now - c->since_ms < wc->handshake_ms)
            continue;
        conn_cut(c);
        ctl_listen_hit(CTL_LISTENER_WEB, CTL_HIT_TIMEOUT, &c->src, 1);
    }
}

bool ctl_web_conns_admit(struct ctl_web_conns *wc, const struct fgx_peer *src)
{
    uint64_t now = now_ms();
    unsigned from_src = 0, total = 0;
    size_t n = 0;
    bool keep = true;

    pthread_mutex_lock(&wc->lock);
    sweep_locked(wc, now);
    if (wc->used >= wc->cap) {
        /* every slot taken, some only waiting for libmicrohttpd to close them */
        pthread_mutex_unlock(&wc->lock);
        ctl_listen_hit(CTL_LISTENER_WEB, CTL_HIT_FULL, src, 1);
        return false;
    }
    for (unsigned i = 0; i < wc->cap; i++) {
        const struct web_conn *c = &wc->v[i];

        if (!c->conn || c->cut)
            continue;
        total++;
        from_src += fgx_conn_same_src(&c->src, src);
    }
    /* The common case: under every limit, no need to weigh anything. */
    if (from_src + 1 <= wc->lim.per_src &&
        total + 1 <= (from_src ? wc->lim.max - wc->lim.reserve : wc->lim.max)) {
        pthread_mutex_unlock(&wc->lock);
        return true;
    }
    for (unsigned i = 0; i < wc->cap; i++) {
        struct web_conn *c = &wc->v[i];

        if (!c->conn || c->cut)
            continue;
        wc->cand[n++] = (struct fgx_conn_cand){.src = c->src,
                                               .since_ms = c->since_ms,
                                               .tag = i,
                                               .kind = c->kind,
                                               .silent = conn_silent(c)};
    }
    wc->cand[n++] =
        (struct fgx_conn_cand){.src = *src, .since_ms = now, .tag = UINT32_MAX, .arrival = true};
    fgx_connlimit_pick(&wc->lim, wc->cand, n);
    for (size_t k = 0; k < n; k++) {
        const struct fgx_conn_cand *x = &wc->cand[k];

        if (!x->cut)
            continue;
        if (x->arrival)
            keep = false;
        else
            conn_cut(&wc->v[x->tag]);
        ctl_listen_hit(CTL_LISTENER_WEB, x->cut == FGX_CUT_PER_SRC ? CTL_HIT_PER_SRC : CTL_HIT_FULL,
                       &x->src, 1);
    }
    pthread_mutex_unlock(&wc->lock);
    return keep;
}

void ctl_web_conns_notify(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode code)
{
    struct ctl_web_conns *wc = cls;
    struct web_conn *c;

    if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
        c = *socket_context;
        if (!c)
            return;
        pthread_mutex_lock(&wc->lock);
        c->conn = NULL;
        c->next_free = wc->free_head;
        wc->free_head = (int32_t)(c - wc->v);
        wc->used--;
        pthread_mutex_unlock(&wc->lock);
        *socket_context = NULL;
        return;
    }
    if (code != MHD_CONNECTION_NOTIFY_STARTED)
        return;
    {
        const union MHD_ConnectionInfo *fd =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        const union MHD_ConnectionInfo *ad =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);

        *socket_context = NULL;
        if (!fd)
            return; /* untracked: libmicrohttpd's own timeout still applies */
        pthread_mutex_lock(&wc->lock);
        if (wc->free_head >= 0) {
            c = &wc->v[wc->free_head];
            wc->free_head = c->next_free;
            wc->used++;
            *c = (struct web_conn){.conn = conn,
                                   .fd = fd->connect_fd,
                                   .since_ms = now_ms(),
                                   .kind = FGX_CONN_PENDING,
                                   .next_free = -1};
            (void)fgx_peer_from_sockaddr(ad ? ad->client_addr : NULL, &c->src);
            *socket_context = c;
        }
        pthread_mutex_unlock(&wc->lock);
    }
}

static void set_kind(struct ctl_web_conns *wc, struct MHD_Connection *conn, uint8_t kind)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    struct web_conn *c = ci ? ci->socket_context : NULL;

    if (!c)
        return;
    pthread_mutex_lock(&wc->lock);
    c->kind = kind;
    c->spoke = true;
    c->since_ms = now_ms();
    pthread_mutex_unlock(&wc->lock);
}

void ctl_web_conns_busy(struct ctl_web_conns *wc, struct MHD_Connection *conn)
{
    set_kind(wc, conn, FGX_CONN_BUSY);
}

void ctl_web_conns_idle(struct ctl_web_conns *wc, struct MHD_Connection *conn)
{
    set_kind(wc, conn, FGX_CONN_IDLE);
}

void ctl_web_conns_sweep(struct ctl_web_conns *wc, unsigned streams)
{
    unsigned open = 0, pending = 0;

    if (!wc)
        return;
    pthread_mutex_lock(&wc->lock);
    sweep_locked(wc, now_ms());
    for (unsigned i = 0; i < wc->cap; i++) {
        if (!wc->v[i].conn || wc->v[i].cut)
            continue;
        open++;
        pending += wc->v[i].kind == FGX_CONN_PENDING;
    }
    pthread_mutex_unlock(&wc->lock);
    ctl_listen_gauge(CTL_LISTENER_WEB, open, pending, streams);
}
