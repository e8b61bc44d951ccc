/* proxyworker, script filters (issue 16): a side's bytes, for a service with a script, go to
 * scriptworker's interpreters (fgx/swproto.h, fgx/swlink.h: a socket per thread and
 * interpreter, read from the thread's event loop) before they are forwarded; the side is not read again until the verdict is
 * back. ACCEPT forwards them; REJECT resets both sides as a regex block does; DROP keeps the
 * connection open and discards everything either side sends from then on (a black hole, as
 * Firegex's DROP: nothing tells the peers); an exception, a call past the deadline or no
 * scriptworker at all: the service's fail_open choice. Services without a script never get
 * here (one pointer test per read). An HTTP/2 stream of an HTTP service is a connection of its
 * own there (px_script_stream_chunk(), its verdicts to px_h2_script_verdict()). */
#include "px.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>

#include "fgx/log.h"
#include "fgx/ruleset.h"
#include "fgx/swlink.h"
#include "fgx/swproto.h"

#define PX_SW_SLOTS 65536u  /* connections of a thread waiting on or known to scriptworker */
/* scriptworker gives a CPU-starved call up to 20 deadlines (scriptworker/sw.h); past that and
 * this grace, scriptworker itself is not answering */
#define PX_SW_STARVED 20
#define PX_SW_GRACE_MS 1000

struct px_sw {
    struct fgx_swlink link; /* the socket, the frames' seq, the files sent */
    struct event *rev;
    struct px_conn **slot;
    uint32_t cursor;
    uint64_t serial;
};

static uint16_t conn_hash(const struct px_conn *c)
{
    /* symmetric: the same whichever side is which */
    uint64_t a = fgx_hash64(&c->client, sizeof(c->client), 0);
    uint64_t b = fgx_hash64(&c->server, sizeof(c->server), 0);

    return (uint16_t)((a ^ b) >> 17);
}

static void held_free(struct px_conn *c)
{
    for (int i = 0; i < 2; i++) {
        free(c->hold[i]);
        c->hold[i] = NULL;
        c->hold_len[i] = 0;
    }
    if (c->sw_timer)
        evtimer_del(c->sw_timer);
}

/* The verdict for c's held side (or both, on a timeout of scriptworker itself). */
static void apply(struct px_conn *c, int side, uint8_t code, const char *fn)
{
    const struct fgx_wsvc *svc = fgx_wcfg_service(c->t->cfg, c->service_id);
    bool fail_open = svc ? svc->fail_open : false;
    struct px_svc_ctr *sc = px_stats_svc(&c->t->ctr, c->service_id);

    if (code == FGX_SW_ERROR || code == FGX_SW_TIMEOUT) {
        PX_CTR_ADD(code == FGX_SW_TIMEOUT ? &c->t->ctr.script_timeouts : &c->t->ctr.script_errors,
                   1);
        code = fail_open ? FGX_SW_ACCEPT : FGX_SW_REJECT;
        /* the failure is its own event (scriptworker's log entry), not a block by a function */
    } else if ((code == FGX_SW_REJECT || code == FGX_SW_DROP) && side >= 0) {
        px_match_event_script(c, side,
                              code == FGX_SW_REJECT ? FGX_DP_SCRIPT_REJECT : FGX_DP_SCRIPT_DROP, fn,
                              c->hold[side], c->hold_len[side]);
    }
    if (c->udp && (code == FGX_SW_REJECT || code == FGX_SW_DROP)) {
        /* a datagram: refused alone, the flow and its state go on (px_udp.c) */
        PX_CTR_ADD(&sc->script_blocked, side >= 0 ? 1 : 0);
        for (int i = 0; i < 2; i++)
            if (side < 0 || i == side) {
                free(c->hold[i]);
                c->hold[i] = NULL;
                c->hold_len[i] = 0;
            }
        if (c->sw_timer && !c->hold[0] && !c->hold[1])
            evtimer_del(c->sw_timer);
        px_udp_next(c); /* those that waited behind it */
        return;
    }
    if (code == FGX_SW_REJECT) {
        PX_CTR_ADD(&sc->script_blocked, 1);
        px_relay_close(c, true);
        return;
    }
    if (code == FGX_SW_DROP) {
        PX_CTR_ADD(&sc->script_blocked, 1);
        c->sw_drop = true;
        held_free(c);
        for (int i = 0; i < 2; i++)
            if (!c->eof[i])
                event_add(c->s[i].rev, NULL);
        return;
    }
    for (int i = 0; i < 2; i++) {
        uint8_t *data = c->hold[i];
        size_t len = c->hold_len[i];

        if (side >= 0 && i != side)
            continue;
        if (!data)
            continue;
        c->hold[i] = NULL;
        c->hold_len[i] = 0;
        if (!px_relay_forward_held(c, i, data, len)) {
            free(data);
            return; /* closed */
        }
        free(data);
    }
    if (c->sw_timer && !c->hold[0] && !c->hold[1])
        evtimer_del(c->sw_timer);
    if (c->udp)
        px_udp_next(c); /* those that waited behind it */
}

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    struct px_conn *c = arg;

    (void)fd;
    (void)what;
    static __thread unsigned long long last_log;

    /* scriptworker did not answer at all (down, restarting): as an error */
    fgx_log_ratelimited(&last_log, FGX_LOG_WARN,
                        "script: no verdict from scriptworker in time: fail-open verdict");
    apply(c, -1, FGX_SW_ERROR, "");
}

static void on_readable(evutil_socket_t fd, short what, void *arg)
{
    struct px_thread *t = arg;
    struct px_sw *sw = t->sw;

    (void)fd;
    (void)what;
    for (;;) {
        struct fgx_sw_hdr h;
        struct px_conn *c;
        const uint8_t *pl;
        size_t pl_len;
        int side;

        /* a VERDICT (LOG frames went to the log queue there) */
        if (fgx_swlink_recv(&sw->link, &h, &pl, &pl_len) != 0)
            return;
        c = sw->slot[h.conn % PX_SW_SLOTS];
        if (c && c->sw_id != h.conn && c->h2 != NULL) {
            /* one of c's HTTP/2 streams, a connection of its own there (px_h2.c) */
            char fn[FGX_DP_SCRIPT_FN_MAX];

            size_t fl = strnlen((const char *)pl, pl_len);

            fgx_swlink_verdict_fn(pl, pl_len, fn, sizeof(fn));
            /* an edit's bytes follow the function's name, as on a connection's chunk */
            px_h2_script_verdict(c, h.conn, h.seq, h.code, fn, fl < pl_len ? pl + fl + 1 : pl,
                                 fl < pl_len ? pl_len - fl - 1 : 0);
            continue;
        }
        if (!c || c->sw_id != h.conn)
            continue; /* closed meanwhile */
        side = c->hold[0] && c->hold_seq[0] == h.seq   ? 0
               : c->hold[1] && c->hold_seq[1] == h.seq ? 1
                                                      : -2;
        if (side == -2)
            continue; /* its timer already decided */
        if (h.code == FGX_SW_ERROR && pl_len > 0) {
            static __thread unsigned long long last_log;
            const char *p = (const char *)pl;
            size_t n = pl_len, fl = strnlen(p, n);

            fgx_log_ratelimited(&last_log, FGX_LOG_WARN, "script: error verdict: %.*s",
                                fl < n ? (int)(n - fl - 1) : 0, fl < n ? p + fl + 1 : "");
        }
        {
            char fn[FGX_DP_SCRIPT_FN_MAX];

            fgx_swlink_verdict_fn(pl, pl_len, fn, sizeof(fn));
            if (h.code == FGX_SW_EDIT) {
                /* a function edited the held bytes: what it gave goes instead, of any length
                 * (the interpreter logged the edit, for the function's "edited" count) */
                size_t fl = strnlen((const char *)pl, pl_len);
                size_t n = fl < pl_len ? pl_len - fl - 1 : 0;
                uint8_t *nb = malloc(n ? n : 1);

                if (!nb) {
                    apply(c, side, FGX_SW_ERROR, fn);
                    continue;
                }
                if (n)
                    memcpy(nb, pl + fl + 1, n);
                free(c->hold[side]);
                c->hold[side] = nb;
                c->hold_len[side] = n;
                h.code = FGX_SW_ACCEPT;
            }
            apply(c, side, h.code, fn);
        }
    }
}

/* The link's lookup: a call's log entry (an exception, a timeout) gets its connection's
 * addresses, so its event names the client. */
static bool conn_where(void *arg, uint64_t conn, struct fgx_dp_script_log *e)
{
    struct px_sw *sw = arg;
    const struct px_conn *c = sw->slot[conn % PX_SW_SLOTS];
    uint8_t fc, fs;

    if (!c || (c->sw_id != conn && c->h2 == NULL)) /* c's own, or one of its streams' */
        return false;
    fc = px_sa_split(&c->client, e->caddr, &e->cport);
    fs = px_sa_split(&c->server, e->saddr, &e->sport);
    if (fc == 0 || fc != fs) {
        e->family = 0;
        return false;
    }
    e->family = fc;
    return true;
}

int px_script_thread_init(struct px_thread *t, const char *url)
{
    struct px_sw *sw = calloc(1, sizeof(*sw));
    int rv;

    t->sw = sw;
    if (!sw)
        return -ENOMEM;
    sw->slot = calloc(PX_SW_SLOTS, sizeof(*sw->slot));
    if (!sw->slot)
        return -ENOMEM;
    /* its own sockets to the interpreters (fgx/swproto.h); no URL: no scriptworker, scripted
     * services get their fail-open verdict */
    rv = fgx_swlink_init(&sw->link, url, ((uint64_t)getpid() << 16) | t->idx);
    if (rv != 0 || !sw->link.up)
        return rv;
    sw->link.conn_fn = conn_where;
    sw->link.conn_arg = sw;
    sw->rev = event_new(t->base, sw->link.fd, EV_READ | EV_PERSIST, on_readable, t);
    if (!sw->rev || event_add(sw->rev, NULL) != 0)
        return -ENOMEM;
    return 0;
}

void px_script_thread_release(struct px_thread *t)
{
    struct px_sw *sw = t->sw;

    if (!sw)
        return;
    if (sw->rev)
        event_free(sw->rev);
    fgx_swlink_release(&sw->link);
    free(sw->slot);
    free(sw);
    t->sw = NULL;
}

void px_script_switch(struct px_thread *t)
{
    if (t->sw)
        fgx_swlink_switch(&t->sw->link, t->cfg);
}

/* One DATA frame of c's connection *id there (0: this frame opens one, in a free slot that
 * names c: c's own or one of its HTTP/2 streams'), seq given. 0, -ENOSPC (no free slot), or
 * what sending gave. */
static int data_send(struct px_conn *c, uint64_t *id, int side, uint8_t flags, uint32_t seq,
                     const uint8_t *data, size_t len)
{
    struct px_sw *sw = c->t->sw;
    struct fgx_sw_hdr h;
    uint8_t open = 0;

    if (!*id) {
        uint32_t i;

        for (i = 0; i < PX_SW_SLOTS && sw->slot[(sw->cursor + i) % PX_SW_SLOTS]; i++)
            ;
        if (i == PX_SW_SLOTS)
            return -ENOSPC;
        sw->cursor = (sw->cursor + i) % PX_SW_SLOTS;
        /* the slot in the low 16 bits (PX_SW_SLOTS), a serial above: a late verdict never
         * meets a newer connection in the same slot */
        *id = (++sw->serial << 16) | sw->cursor;
        sw->slot[sw->cursor] = c;
        c->sw_hash = conn_hash(c);
        /* the first chunk opens the connection there: one frame, not two */
        open = FGX_SW_DATA_OPEN | (c->family == 6 ? FGX_SW_DATA_V6 : 0);
    }
    h = (struct fgx_sw_hdr){.type = FGX_SW_DATA,
                            .code = (uint8_t)(side | open | flags),
                            .hash = c->sw_hash,
                            .service = c->service_id,
                            .conn = *id,
                            .seq = seq,
                            .len = (uint32_t)len};
    if (open) {
        /* the addresses, for RawPacket's client_ip, server_port, ... */
        struct fgx_sw_addr a = {0};
        uint16_t cp = 0, sp = 0;
        uint8_t fc = px_sa_split(&c->client, a.caddr, &cp);
        uint8_t fs = px_sa_split(&c->server, a.saddr, &sp);
        a.cport = cp;
        a.sport = sp;
        return fc != 0 && fc == fs && fc == c->family
                   ? fgx_swlink_send_addr(&sw->link, &h, &a, data)
                   : fgx_swlink_send(&sw->link, &h, data);
    }
    return fgx_swlink_send(&sw->link, &h, data);
}

int px_script_chunk(struct px_conn *c, int side, const uint8_t *data, size_t len)
{
    struct px_thread *t = c->t;
    struct px_sw *sw = t->sw;
    const struct fgx_wsvc *svc;
    struct timeval tv;
    int rv;

    if (c->sw_drop)
        return 1; /* DROP: what either side sends goes nowhere */
    svc = c->absent ? NULL : fgx_wcfg_service(t->cfg, c->service_id);
    if (!svc || !svc->script || !(svc->script_dirs & (1u << side)))
        return 0;
    if (!sw || !sw->link.up)
        return svc->fail_open ? 0 : -1;
    if (c->udp && c->hold[side])
        return -1; /* px_udp.c queues behind a held datagram: not reached */
    /* before this chunk: the files again, for a scriptworker that (re)connected */
    fgx_swlink_resend(&sw->link, t->cfg);
    c->hold[side] = malloc(len);
    if (!c->hold[side])
        return -1;
    memcpy(c->hold[side], data, len);
    c->hold_len[side] = len;
    c->hold_seq[side] = ++sw->link.seq;
    /* a UDP flow's frames are each one datagram (RawPacket's l4 "udp") */
    rv = data_send(c, &c->sw_id, side, c->udp ? FGX_SW_DATA_UDP : 0, c->hold_seq[side], data,
                   len);
    if (rv < 0) { /* no free slot, or the send failed */
        free(c->hold[side]);
        c->hold[side] = NULL;
        return svc->fail_open ? 0 : -1;
    }
    if (!c->udp) /* UDP: the listener is every flow's, never stopped for one */
        event_del(c->s[side].rev);
    if (!c->sw_timer)
        c->sw_timer = evtimer_new(t->base, on_timer, c);
    if (c->sw_timer) {
        uint64_t ms = (uint64_t)svc->script_deadline_ms * PX_SW_STARVED + PX_SW_GRACE_MS;

        tv.tv_sec = (time_t)(ms / 1000);
        tv.tv_usec = (suseconds_t)(ms % 1000) * 1000;
        evtimer_add(c->sw_timer, &tv);
    }
    return 1;
}

void px_script_conn_close(struct px_conn *c)
{
    struct px_sw *sw = c->t->sw;

    held_free(c);
    if (c->sw_timer) {
        event_free(c->sw_timer);
        c->sw_timer = NULL;
    }
    if (!sw || !c->sw_id)
        return;
    if (sw->slot[c->sw_id % PX_SW_SLOTS] == c) {
        struct fgx_sw_hdr h = {.type = FGX_SW_CLOSE,
                               .hash = c->sw_hash,
                               .service = c->service_id,
                               .conn = c->sw_id};

        (void)fgx_swlink_send(&sw->link, &h, NULL);
        sw->slot[c->sw_id % PX_SW_SLOTS] = NULL;
    }
}

int px_script_stream_chunk(struct px_conn *c, uint64_t *sw_id, int side, const uint8_t *data,
                           size_t len, uint32_t *seq, uint64_t *deadline_ms)
{
    struct px_thread *t = c->t;
    struct px_sw *sw = t->sw;
    const struct fgx_wsvc *svc = c->absent ? NULL : fgx_wcfg_service(t->cfg, c->service_id);
    int rv;

    if (!svc || !svc->script || !(svc->script_dirs & (1u << side)))
        return 0;
    if (!sw || !sw->link.up)
        return svc->fail_open ? 0 : -1;
    fgx_swlink_resend(&sw->link, t->cfg);
    *seq = ++sw->link.seq;
    /* the bytes are a rendering: an edit of them is parsed back into the stream's head, body
     * and trailers (px_h2.c, sw_edit()) */
    rv = data_send(c, sw_id, side, 0, *seq, data, len);
    if (rv < 0)
        return svc->fail_open ? 0 : -1;
    *deadline_ms = (uint64_t)svc->script_deadline_ms * PX_SW_STARVED + PX_SW_GRACE_MS;
    return 1;
}

bool px_script_fail_open(const struct px_conn *c)
{
    const struct fgx_wsvc *svc = fgx_wcfg_service(c->t->cfg, c->service_id);

    return svc ? svc->fail_open : false;
}

void px_script_stream_close(struct px_conn *c, uint64_t sw_id)
{
    struct px_sw *sw = c->t->sw;

    if (!sw || !sw_id || sw->slot[sw_id % PX_SW_SLOTS] != c)
        return;
    {
        struct fgx_sw_hdr h = {.type = FGX_SW_CLOSE,
                               .hash = c->sw_hash,
                               .service = c->service_id,
                               .conn = sw_id};

        (void)fgx_swlink_send(&sw->link, &h, NULL);
        sw->slot[sw_id % PX_SW_SLOTS] = NULL;
    }
}
