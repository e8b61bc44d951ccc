/* Relay stage of proxyworker: bytes a side sent -> scanned in place by the match stage -> moved
 * (evbuffer chains handed over, not copied) to the other side's output. Backpressure: a side
 * is not read while the other's output holds PX_HWM bytes or more, so a slow reader never makes
 * the proxy buffer without bound. A FIN is passed on once what preceded it is written
 * (half-close); a RST or a block resets both sides; an idle connection is closed. */
#include "px.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

#include "fgx/log.h"

static void lru_unlink(struct px_thread *t, struct px_conn *c)
{
    if (c->prev != NULL)
        c->prev->next = c->next;
    else
        t->head = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    else
        t->tail = c->prev;
    c->prev = c->next = NULL;
}

static void lru_append(struct px_thread *t, struct px_conn *c)
{
    c->prev = t->tail;
    c->next = NULL;
    if (t->tail != NULL)
        t->tail->next = c;
    else
        t->head = c;
    t->tail = c;
}

static void touch(struct px_conn *c)
{
    struct px_thread *t = c->t;

    t->now_ms = px_now_ms();
    c->last_ms = t->now_ms;
    if (t->tail != c) {
        lru_unlink(t, c);
        lru_append(t, c);
    }
}

void px_relay_close(struct px_conn *c, bool reset)
{
    struct px_thread *t = c->t;
    struct px_svc_ctr *sc = px_stats_svc(&t->ctr, c->service_id);
    int i;

    for (i = 0; i < 2; i++) {
        if (c->bev[i] == NULL)
            continue;
        if (reset) {
            struct linger l = {1, 0};
            int fd = (int)bufferevent_getfd(c->bev[i]);

            if (fd >= 0)
                (void)setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
        }
        bufferevent_free(c->bev[i]);
        c->bev[i] = NULL;
    }
    if (reset)
        PX_CTR_ADD(&sc->reset, 1);
    PX_CTR_ADD(&sc->open, (uint64_t)-1);
    PX_CTR_ADD(&t->ctr.conns, (uint64_t)-1);
    __atomic_sub_fetch(&t->w->nconns, 1, __ATOMIC_RELAXED);
    px_match_conn_release(c);
    lru_unlink(t, c);
    free(c);
}

/* Done once both FINs went through and were written on: the connection closes cleanly. */
static bool finished(const struct px_conn *c)
{
    return c->shut[0] && c->shut[1];
}

/* Pass side from's FIN to the other side once everything before it is written there. */
static void pass_fin(struct px_conn *c, int from)
{
    int to = 1 - from;
    struct evbuffer *out = bufferevent_get_output(c->bev[to]);

    if (!c->eof[from] || c->shut[to])
        return;
    if (evbuffer_get_length(out) > 0 || (to == 1 && !c->connected)) {
        /* The write callback fires when the output is empty. */
        bufferevent_setwatermark(c->bev[to], EV_WRITE, 0, 0);
        return;
    }
    if (shutdown((int)bufferevent_getfd(c->bev[to]), SHUT_WR) == -1 && errno != ENOTCONN) {
        px_relay_close(c, true);
        return;
    }
    c->shut[to] = true;
    if (finished(c))
        px_relay_close(c, false);
}

/* Scan and move what side sent. Returns false when the connection was closed (a match). */
static bool relay(struct px_conn *c, int side)
{
    int to = 1 - side;
    struct evbuffer *in = bufferevent_get_input(c->bev[side]);
    struct evbuffer *out = bufferevent_get_output(c->bev[to]);
    size_t len = evbuffer_get_length(in);
    struct px_svc_ctr *sc;

    if (len == 0)
        return true;
    touch(c);
    if (px_match_scan(c, side) != 0) {
        px_relay_close(c, true);
        return false;
    }
    sc = px_stats_svc(&c->t->ctr, c->service_id);
    PX_CTR_ADD(&sc->reads, 1);
    PX_CTR_ADD(&sc->bytes, len);
    evbuffer_add_buffer(out, in);
    if (evbuffer_get_length(out) >= PX_HWM) {
        bufferevent_disable(c->bev[side], EV_READ);
        c->paused[side] = true;
        bufferevent_setwatermark(c->bev[to], EV_WRITE, PX_HWM / 2, 0);
    }
    return true;
}

static void on_read(struct bufferevent *bev, void *arg)
{
    struct px_conn *c = arg;

    (void)relay(c, bev == c->bev[0] ? 0 : 1);
}

static void on_write(struct bufferevent *bev, void *arg)
{
    struct px_conn *c = arg;
    int side = bev == c->bev[0] ? 0 : 1, from = 1 - side;

    if (c->paused[from] && evbuffer_get_length(bufferevent_get_output(bev)) < PX_HWM) {
        c->paused[from] = false;
        if (!c->eof[from])
            bufferevent_enable(c->bev[from], EV_READ);
    }
    if (c->eof[from] && !c->shut[side])
        pass_fin(c, from);
}

static void on_event(struct bufferevent *bev, short what, void *arg)
{
    struct px_conn *c = arg;
    int side = bev == c->bev[0] ? 0 : 1;

    if (what & BEV_EVENT_CONNECTED) {
        c->connected = true;
        touch(c);
        if (c->eof[0])
            pass_fin(c, 0);
        return;
    }
    if (what & BEV_EVENT_EOF) {
        touch(c);
        /* Bytes that came with the FIN are in the input still: relay them first. */
        if (!relay(c, side))
            return;
        c->eof[side] = true;
        bufferevent_disable(bev, EV_READ);
        pass_fin(c, side);
        return;
    }
    if (what & (BEV_EVENT_ERROR | BEV_EVENT_TIMEOUT)) {
        /* A reset (or a refused upstream connect) is passed on as a reset. */
        if (side == 1 && !c->connected)
            PX_CTR_ADD(&c->t->ctr.connect_failed, 1);
        px_relay_close(c, true);
    }
}

void px_relay_start(struct px_conn *c)
{
    struct px_thread *t = c->t;
    int i;

    PX_CTR_ADD(&px_stats_svc(&t->ctr, c->service_id)->accepted, 1);
    PX_CTR_ADD(&px_stats_svc(&t->ctr, c->service_id)->open, 1);
    lru_append(t, c);
    for (i = 0; i < 2; i++) {
        bufferevent_setcb(c->bev[i], on_read, on_write, on_event, c);
        bufferevent_set_max_single_read(c->bev[i], PX_READ_MAX);
        /* libevent writes at most 16 KiB per call by default: four syscalls per read. */
        bufferevent_set_max_single_write(c->bev[i], PX_READ_MAX);
        bufferevent_enable(c->bev[i], EV_READ | EV_WRITE);
    }
}

void px_relay_expire(struct px_thread *t)
{
    static __thread unsigned long long last_log;
    size_t n = 0;

    while (t->head != NULL && t->head->last_ms + t->w->idle_ms < t->now_ms) {
        px_relay_close(t->head, true);
        n++;
    }
    if (n > 0)
        fgx_log_ratelimited(&last_log, FGX_LOG_DEBUG, "%zu idle connection(s) closed", n);
}
