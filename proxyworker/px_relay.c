/* Relay stage of proxyworker: bytes a side sent -> read into the thread's scratch buffer ->
 * scanned there by the match stage -> written to the other side in the same callback. A steady
 * connection costs one read and one write per chunk and no event changes. Backpressure: what the
 * other side does not take is kept (at most one read) and this side is not read until it is
 * written, so a slow reader never makes the proxy buffer more. A FIN is passed on once what
 * preceded it is written (half-close); a RST or a block resets both sides; an idle connection is
 * closed. */
#include "px.h"

#include <errno.h>
#include <linux/sockios.h>
#include <stdalign.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <event2/event.h>

#include "fgx/log.h"

static struct px_list *conn_list(struct px_conn *c)
{
    return &c->t->list[c->silent ? PX_LIST_SILENT : PX_LIST_ACTIVE];
}

static void lru_unlink(struct px_conn *c)
{
    struct px_list *l = conn_list(c);

    if (c->prev != NULL)
        c->prev->next = c->next;
    else
        l->head = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    else
        l->tail = c->prev;
    c->prev = c->next = NULL;
}

static void lru_append(struct px_conn *c)
{
    struct px_list *l = conn_list(c);

    c->prev = l->tail;
    c->next = NULL;
    if (l->tail != NULL)
        l->tail->next = c;
    else
        l->head = c;
    l->tail = c;
}

/* Activity on c. A silent connection stays where it is, by its accept time, until a byte
 * moves (speak()). */
static void touch(struct px_conn *c)
{
    struct px_thread *t = c->t;

    t->now_ms = px_now_ms();
    if (c->silent)
        return;
    c->last_ms = t->now_ms;
    if (t->list[PX_LIST_ACTIVE].tail != c) {
        lru_unlink(c);
        lru_append(c);
    }
}

/* A byte moved on c (either side: a service that speaks first makes a connection as live as
 * a client that does): off the silent list, out of the first-byte timeout's reach. */
static void speak(struct px_conn *c)
{
    lru_unlink(c);
    c->silent = false;
    c->last_ms = c->t->now_ms;
    lru_append(c);
}

#define CONN_HEAD ((sizeof(struct px_conn) + alignof(max_align_t) - 1) & ~(alignof(max_align_t) - 1))

struct px_conn *px_conn_new(void)
{
    size_t ev = (event_get_struct_event_size() + alignof(max_align_t) - 1) &
                ~(alignof(max_align_t) - 1);
    uint8_t *mem = calloc(1, CONN_HEAD + 4 * ev);
    struct px_conn *c = (struct px_conn *)(void *)mem;
    int i;

    if (c == NULL)
        return NULL;
    for (i = 0; i < 2; i++) {
        c->s[i].fd = -1;
        c->s[i].rev = (struct event *)(void *)(mem + CONN_HEAD + (size_t)(2 * i) * ev);
        c->s[i].wev = (struct event *)(void *)(mem + CONN_HEAD + (size_t)(2 * i + 1) * ev);
    }
    return c;
}

static void reset_now(int fd)
{
    struct linger l = {1, 0};

    (void)setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
    close(fd);
}

static const struct timeval reset_poll = {0, 1000};

/* Bytes sent to fd's peer and not acknowledged yet. */
static int unacked(int fd)
{
    int outq = 0, unsent = 0;

    if (ioctl(fd, SIOCOUTQ, &outq) == -1 || ioctl(fd, SIOCOUTQNSD, &unsent) == -1)
        return 0;
    return outq - unsent;
}

/* A reset is taken only at the exact next sequence number the peer expects. Segments still on
 * their way to a local peer (another CPU's backlog, say) would arrive after it and make it look
 * out of place: the peer would answer with a challenge ACK and keep the connection. So a socket
 * with bytes in flight is reset once they are acknowledged (or after PX_RESET_WAIT_MS); the
 * connection is gone from the relay at once either way. */
static void reset_side(struct px_thread *t, int fd)
{
    struct px_reset *r;

    if (unacked(fd) <= 0 || t->reset_timer == NULL || (r = malloc(sizeof(*r))) == NULL) {
        reset_now(fd);
        return;
    }
    r->fd = fd;
    r->deadline_ms = px_now_ms() + PX_RESET_WAIT_MS;
    r->next = t->resets;
    t->resets = r;
    if (!evtimer_pending(t->reset_timer, NULL))
        evtimer_add(t->reset_timer, &reset_poll);
}

void px_relay_resets(struct px_thread *t, bool now)
{
    struct px_reset **pp = &t->resets, *r;
    uint64_t ms = px_now_ms();

    while ((r = *pp) != NULL) {
        if (now || ms >= r->deadline_ms || unacked(r->fd) <= 0) {
            *pp = r->next;
            reset_now(r->fd);
            free(r);
            continue;
        }
        pp = &r->next;
    }
    if (t->resets != NULL && t->reset_timer != NULL)
        evtimer_add(t->reset_timer, &reset_poll);
}

void px_relay_close(struct px_conn *c, bool reset)
{
    struct px_thread *t = c->t;
    struct px_svc_ctr *sc = px_stats_svc(&t->ctr, c->service_id);
    int i;

    /* Counted before the sockets close: whoever sees the reset may ask for the counters. */
    if (reset)
        PX_CTR_ADD(&sc->reset, 1);
    PX_CTR_ADD(&sc->open, (uint64_t)-1);
    PX_CTR_ADD(&t->ctr.conns, (uint64_t)-1);
    if (!c->keep_src)
        px_src_put(&t->w->src, &c->client, t->idx);
    if (!c->keep_slot)
        __atomic_sub_fetch(&t->w->nconns, 1, __ATOMIC_RELAXED);
    for (i = 0; i < 2; i++) {
        struct px_side *s = &c->s[i];

        if (c->assigned) {
            event_del(s->rev);
            event_del(s->wev);
        }
        if (s->fd >= 0) {
            if (!reset)
                close(s->fd);
            else if (i == 1 && !c->connected)
                reset_now(s->fd);
            else
                reset_side(t, s->fd);
            s->fd = -1;
        }
        free(s->pend);
        s->pend = NULL;
    }
    px_h2_conn_free(c);
    px_tls_conn_free(c);
    px_script_conn_close(c);
    px_match_conn_release(c);
    lru_unlink(c);
    free(c);
}

/* Pass side from's FIN to the other side once everything before it is written there. Returns
 * false when the connection was closed. */
static bool pass_fin(struct px_conn *c, int from)
{
    int to = 1 - from;

    if (!c->eof[from] || c->shut[to] || c->s[to].pend != NULL)
        return true;
    if (c->tls != NULL && px_tls_side(c, to))
        px_tls_shutdown(c, to);
    if (shutdown(c->s[to].fd, SHUT_WR) == -1 && errno != ENOTCONN) {
        px_relay_close(c, true);
        return false;
    }
    c->shut[to] = true;
    if (c->shut[0] && c->shut[1]) {
        px_relay_close(c, false);
        return false;
    }
    return true;
}

/* Write len bytes to side to; keep what it does not take and stop reading side from until it
 * is written. Returns false when the connection was closed. */
static bool forward(struct px_conn *c, int from, const uint8_t *data, size_t len)
{
    struct px_side *s = &c->s[1 - from];
    ssize_t n = c->tls != NULL && px_tls_side(c, 1 - from) ? px_tls_send(c, 1 - from, data, len)
                                          : send(s->fd, data, len, MSG_NOSIGNAL | MSG_DONTWAIT);

    if (n == -1) {
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
            px_relay_close(c, true);
            return false;
        }
        n = 0;
    }
    if ((size_t)n == len)
        return true;
    s->pend = malloc(len - (size_t)n);
    if (s->pend == NULL) {
        static __thread unsigned long long last_log;

        fgx_log_ratelimited(&last_log, FGX_LOG_ERROR, "relay: out of memory, connection reset");
        px_relay_close(c, true);
        return false;
    }
    memcpy(s->pend, data + n, len - (size_t)n);
    s->pend_off = 0;
    s->pend_len = len - (size_t)n;
    event_del(c->s[from].rev);
    event_add(s->wev, NULL);
    return true;
}

/* A read of n bytes from side: the connection spoke; its service's counters. */
static void count_read(struct px_conn *c, int side, size_t n)
{
    struct px_svc_ctr *sc = px_stats_svc(&c->t->ctr, c->service_id);

    if (c->silent)
        speak(c);
    PX_CTR_ADD(&sc->reads, 1);
    PX_CTR_ADD(&sc->bytes[side != 0], (uint64_t)n);
}

static void on_readable(evutil_socket_t fd, short what, void *arg)
{
    struct px_conn *c = arg;
    struct px_thread *t = c->t;
    int side = fd == c->s[0].fd ? 0 : 1;
    bool tls = false, tls_eof = false, counted = false;
    ssize_t n;

    if (c->tls != NULL && px_tls_handshaking(c)) {
        (void)px_tls_step(c, side);
        return;
    }
    if ((tls = c->tls != NULL && px_tls_side(c, side)))
        n = px_tls_recv(c, side, t->buf, PX_READ_MAX, &tls_eof);
    else
        n = recv(fd, t->buf, PX_READ_MAX, MSG_DONTWAIT);
    if (n == -1) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
            return;
        /* A reset (or any error) is passed on as a reset. A TLS peer that resets after our
         * close_notify and FIN reached it is a client closing without reading them (most do):
         * an end, not a reset. */
        px_relay_close(c, !(tls && c->shut[side]));
        return;
    }
    touch(c);
    if (n == 0 && side == 1 && c->h2on && c->h1up) {
        /* an HTTP/1.1 service's end: what it answered still reaches the client (px_h2.c) */
        c->eof[1] = true;
        event_del(c->s[1].rev);
        (void)px_h2_upstream_eof(c);
        return;
    }
    if (n == 0 && c->h2 != NULL) {
        /* HTTP/2 has no half-close: either side's end is the connection's */
        px_relay_close(c, false);
        return;
    }
    if (n == 0) {
        c->eof[side] = true;
        event_del(c->s[side].rev);
        (void)pass_fin(c, side);
        return;
    }
    /* The HTTP kind: HTTP/2 is terminated (px_h2.c); anything else goes on below. */
    if (c->http && !c->http1) {
        size_t len = (size_t)n;
        int r;

        count_read(c, side, (size_t)n); /* the bytes on the wire, before the rendering */
        counted = true;
        r = px_h2_read(c, side, t->buf, &len);
        if (r == 1 && tls_eof)
            px_relay_close(c, false);
        if (r != 0)
            return;
        n = (ssize_t)len;
    }
    if (px_match_scan(c, side, t->buf, (size_t)n) != 0) {
        px_relay_close(c, true);
        return;
    }
    /* Bulk reads yield to everything else (PX_PRIO_HEAVY); a light read brings the side back.
     * The event is not active inside its own callback, so its priority can change here. */
    {
        int prio = (size_t)n >= PX_HEAVY_READ ? PX_PRIO_HEAVY : PX_PRIO_NORMAL;

        if (event_get_priority(c->s[side].rev) != prio)
            (void)event_priority_set(c->s[side].rev, prio);
    }
    if (!counted)
        count_read(c, side, (size_t)n);
    /* A service with a script: the bytes wait for its verdict (px_script.c), the side is not
     * read meanwhile; the FIN, if it came, is read once the side is read again. */
    switch (px_script_chunk(c, side, t->buf, (size_t)n)) {
    case 0:
        break;
    case 1:
        return;
    default:
        px_relay_close(c, true);
        return;
    }
    if (!forward(c, side, t->buf, (size_t)n))
        return;
    /* The peer's FIN came before this wake-up (EPOLLRDHUP) and the read took all that preceded
     * it: pass the FIN on now rather than after another wake-up and an empty read. */
    if (tls ? tls_eof : (what & EV_CLOSED) && (size_t)n < PX_READ_MAX) {
        c->eof[side] = true;
        event_del(c->s[side].rev);
        (void)pass_fin(c, side);
    }
}

/* The upstream connect finished (side 1 writable for the first time): start reading both. */
static void connected(struct px_conn *c)
{
    int err = 0;
    socklen_t len = sizeof(err);

    if (getsockopt(c->s[1].fd, SOL_SOCKET, SO_ERROR, &err, &len) == -1)
        err = errno;
    if (err != 0) {
        PX_CTR_ADD(&c->t->ctr.connect_failed, 1);
        px_relay_close(c, true);
        return;
    }
    c->connected = true;
    touch(c);
    if (c->tls != NULL) {
        px_tls_connected(c);
        return;
    }
    event_add(c->s[0].rev, NULL);
    /* The HTTP kind: the service is heard once the client's first bytes said what it speaks
     * (px_h2_read()); an h2 service's SETTINGS must not make the connection look HTTP/1.1. */
    if (!c->http)
        event_add(c->s[1].rev, NULL);
}

static void on_writable(evutil_socket_t fd, short what, void *arg);

/* A new connection to the service for an HTTP/1.1-only one (px_h2.c) is up, or failed. */
static void reconnected(struct px_conn *c)
{
    int err = 0;
    socklen_t len = sizeof(err);

    if (getsockopt(c->s[1].fd, SOL_SOCKET, SO_ERROR, &err, &len) == -1)
        err = errno;
    c->connected = true;
    touch(c);
    if (err != 0) {
        PX_CTR_ADD(&c->t->ctr.connect_failed, 1);
        (void)px_h2_upstream_eof(c);
        return;
    }
    event_add(c->s[1].rev, NULL);
    (void)px_h2_flush(c);
}

/* Where the service is reached: the client's original destination, on the port the service
 * listens on for the address the client came by (an edge's to=PORT) when it named one. */
static struct sockaddr_storage upstream_addr(const struct px_conn *c)
{
    struct sockaddr_storage up = c->server;

    if (c->up_port != 0 && up.ss_family == AF_INET)
        ((struct sockaddr_in *)&up)->sin_port = htons(c->up_port);
    else if (c->up_port != 0 && up.ss_family == AF_INET6)
        ((struct sockaddr_in6 *)&up)->sin6_port = htons(c->up_port);
    return up;
}

int px_relay_reopen(struct px_conn *c)
{
    struct px_thread *t = c->t;
    socklen_t len = c->family == 4 ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
    struct sockaddr_storage up = upstream_addr(c);
    int fd;

    for (int i = 0;; i++) {
        if (px_accept_onward(t, &c->client, i + 1 == PX_ONWARD_RETRIES, &fd) != 0)
            return -EIO;
        event_del(c->s[1].rev);
        event_del(c->s[1].wev);
        close(c->s[1].fd);
        c->s[1].fd = fd;
        event_assign(c->s[1].rev, t->base, fd, EV_READ | EV_CLOSED | EV_PERSIST, on_readable, c);
        event_assign(c->s[1].wev, t->base, fd, EV_WRITE, on_writable, c);
        free(c->s[1].pend);
        c->s[1].pend = NULL;
        c->eof[1] = c->shut[1] = false;
        if (connect(fd, (struct sockaddr *)&up, len) == 0) {
            c->connected = true;
            event_add(c->s[1].rev, NULL);
            return 0;
        }
        if (errno != EADDRNOTAVAIL || i + 1 == PX_ONWARD_RETRIES)
            break;
    }
    if (errno != EINPROGRESS) {
        PX_CTR_ADD(&t->ctr.connect_failed, 1);
        return -errno;
    }
    c->connected = false;
    event_add(c->s[1].wev, NULL);
    return 0;
}

static void on_writable(evutil_socket_t fd, short what, void *arg)
{
    struct px_conn *c = arg;
    int side = fd == c->s[0].fd ? 0 : 1, from = 1 - side;
    struct px_side *s = &c->s[side];
    ssize_t n;

    (void)what;
    if (side == 1 && !c->connected) {
        if (c->h2on)
            reconnected(c);
        else
            connected(c);
        return;
    }
    if (c->tls != NULL && px_tls_handshaking(c)) {
        (void)px_tls_step(c, side);
        return;
    }
    if (s->pend == NULL)
        return;
    if (c->tls != NULL && px_tls_side(c, side))
        n = px_tls_send(c, side, s->pend + s->pend_off, s->pend_len);
    else
        n = send(fd, s->pend + s->pend_off, s->pend_len, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n == -1) {
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
            px_relay_close(c, true);
            return;
        }
        n = 0;
    }
    touch(c);
    s->pend_off += (size_t)n;
    s->pend_len -= (size_t)n;
    if (s->pend_len > 0) {
        event_add(s->wev, NULL);
        return;
    }
    free(s->pend);
    s->pend = NULL;
    if (c->h2on) {
        (void)px_h2_flush(c);
        return;
    }
    if (!c->eof[from]) {
        event_add(c->s[from].rev, NULL);
        /* Plaintext OpenSSL already holds has no socket event to bring it. */
        if (c->tls != NULL && px_tls_side(c, from))
            event_active(c->s[from].rev, EV_READ, 0);
    } else
        (void)pass_fin(c, from);
}

bool px_relay_forward_held(struct px_conn *c, int side, const uint8_t *data, size_t len)
{
    if (c->udp)
        return px_udp_forward(c, side, data, len);
    if (!forward(c, side, data, len))
        return false;
    /* forward() stopped reading side when the other did not take everything; else read on */
    if (c->s[1 - side].pend == NULL && !c->eof[side])
        event_add(c->s[side].rev, NULL);
    return true;
}

void px_relay_start(struct px_conn *c)
{
    struct px_thread *t = c->t;
    socklen_t len = c->family == 4 ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
    struct sockaddr_storage up = upstream_addr(c);
    int i;

    PX_CTR_ADD(&px_stats_svc(&t->ctr, c->service_id)->accepted, 1);
    PX_CTR_ADD(&px_stats_svc(&t->ctr, c->service_id)->open, 1);
    c->silent = true;
    lru_append(c);
    for (i = 0; i < 2; i++) {
        event_assign(c->s[i].rev, t->base, c->s[i].fd, EV_READ | EV_CLOSED | EV_PERSIST,
                     on_readable, c);
        event_assign(c->s[i].wev, t->base, c->s[i].fd, EV_WRITE, on_writable, c);
    }
    c->assigned = true;
    /* The client is not read before the service answers: nothing waits in the proxy for it.
     * EADDRNOTAVAIL: the onward port's 4-tuple is still in use (a connection to this service
     * from that client address and port, open or in TIME_WAIT): another port, the kernel's
     * choice the last time. */
    for (i = 0;; i++) {
        int fd;

        if (connect(c->s[1].fd, (struct sockaddr *)&up, len) == 0) {
            connected(c);
            return;
        }
        if (errno != EADDRNOTAVAIL || i == PX_ONWARD_RETRIES ||
            px_accept_onward(t, &c->client, i + 1 == PX_ONWARD_RETRIES, &fd) != 0)
            break;
        close(c->s[1].fd);
        c->s[1].fd = fd;
        event_assign(c->s[1].rev, t->base, fd, EV_READ | EV_CLOSED | EV_PERSIST, on_readable, c);
        event_assign(c->s[1].wev, t->base, fd, EV_WRITE, on_writable, c);
    }
    if (errno != EINPROGRESS) {
        PX_CTR_ADD(&t->ctr.connect_failed, 1);
        px_relay_close(c, true);
        return;
    }
    event_add(c->s[1].wev, NULL);
}

void px_relay_expire(struct px_thread *t)
{
    static __thread unsigned long long last_log;
    struct px_worker *w = t->w;
    uint64_t silent_ms = w->first_byte_ms != 0 && w->first_byte_ms < w->idle_ms ? w->first_byte_ms
                                                                               : w->idle_ms;
    struct px_conn *c, *next;
    bool own = false;
    size_t n = 0, ns = 0;

    /* A service with a first-byte timeout of its own (issue 27) breaks the list's order of
     * expiry: then the whole silent list is walked (it holds only connections that sent
     * nothing, at most the worker's --max-conns); else only its expired head. */
    for (size_t i = 0; t->cfg != NULL && i < t->cfg->nservices && !own; i++)
        own = t->cfg->svc[i].first_byte_ms > 0;
    for (c = t->list[PX_LIST_SILENT].head; c != NULL; c = next) {
        uint64_t lim = own && c->first_byte_ms > 0 && c->first_byte_ms < w->idle_ms
                           ? c->first_byte_ms
                           : silent_ms;

        next = c->next;
        if (c->last_ms + lim >= t->now_ms) {
            if (!own)
                break;
            continue;
        }
        if (lim < w->idle_ms) {
            PX_CTR_ADD(&t->ctr.silent_closed, 1);
            ns++;
        }
        if (c->tls != NULL && px_tls_handshaking(c))
            px_tls_timed_out(c);
        px_relay_close(c, true);
        n++;
    }
    while ((c = t->list[PX_LIST_ACTIVE].head) != NULL && c->last_ms + w->idle_ms < t->now_ms) {
        px_relay_close(c, true);
        n++;
    }
    if (n > 0)
        fgx_log_ratelimited(&last_log, FGX_LOG_DEBUG,
                            "%zu idle connection(s) closed, %zu of them before a first byte", n,
                            ns);
}

bool px_relay_evict(struct px_thread *t)
{
    struct px_conn *c = t->list[PX_LIST_SILENT].head;

    /* A connection that sent nothing yet has cost its service nothing: it goes first, the
     * longest waiting of them. An honest client's first byte follows its handshake within a
     * round trip, and a flood would have to replace every silent connection in that time to
     * push it out; past them, the one idle the longest. */
    if (c == NULL)
        c = t->list[PX_LIST_ACTIVE].head;
    if (c == NULL)
        return false;
    PX_CTR_ADD(&t->ctr.evicted, 1);
    c->keep_slot = true;
    px_relay_close(c, true);
    return true;
}

static struct px_conn *find_src(struct px_conn *c, const struct sockaddr_storage *src)
{
    unsigned n;

    for (n = 0; c != NULL && n < PX_EVICT_SCAN; c = c->next, n++)
        if (px_src_same(&c->client, src))
            return c;
    return NULL;
}

bool px_relay_evict_src(struct px_thread *t, const struct sockaddr_storage *src)
{
    struct px_conn *c = find_src(t->list[PX_LIST_SILENT].head, src);

    /* As px_relay_evict(), within the source: a source at its limit (one flooding, or many
     * clients behind one NAT, a game's checker among them) churns its own connections, the
     * most idle first, and never takes another source's. */
    if (c == NULL)
        c = find_src(t->list[PX_LIST_ACTIVE].head, src);
    if (c == NULL)
        return false;
    PX_CTR_ADD(&t->ctr.evicted, 1);
    c->keep_slot = c->keep_src = true;
    px_relay_close(c, true);
    return true;
}
