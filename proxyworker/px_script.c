/* proxyworker, script filters (issue 16): a side's bytes, for a service with a script, go to
 * scriptworker (fgx/swproto.h, over one nng pair1 socket per thread, read from the thread's
 * event loop) before they are forwarded; the side is not read again until the verdict is
 * back. ACCEPT forwards them; REJECT resets both sides as a regex block does; DROP keeps the
 * connection open and discards everything either side sends from then on (a black hole, as
 * Firegex's DROP: nothing tells the peers); an exception, a call past the deadline or no
 * scriptworker at all: the service's fail_open choice. Services without a script never get
 * here (one pointer test per read). */
#include "px.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <nng/nng.h>
#include <nng/protocol/pair1/pair.h>

#include "fgx/log.h"
#include "fgx/ruleset.h"
#include "fgx/swproto.h"

#define PX_SW_SLOTS 65536u  /* connections of a thread waiting on or known to scriptworker */
/* scriptworker gives a CPU-starved call up to 20 deadlines (scriptworker/sw.h); past that and
 * this grace, scriptworker itself is not answering */
#define PX_SW_STARVED 20
#define PX_SW_GRACE_MS 1000

struct px_sw_sent {
    uint32_t id;
    uint64_t hash;
};

struct px_sw {
    nng_socket sock;
    bool up;
    struct event *rev;
    struct px_conn **slot;
    uint32_t cursor;
    uint64_t serial;
    uint32_t seq;
    struct px_sw_sent *sent;
    size_t nsent;
    int resend; /* __atomic: set by nng when a (new) scriptworker connected: send every file */
};

static int sw_send(struct px_sw *sw, const struct fgx_sw_hdr *h, const void *p)
{
    nng_msg *m;
    int rv;

    if (!sw->up)
        return -ENOTCONN;
    rv = nng_msg_alloc(&m, sizeof(*h) + h->len);
    if (rv != 0)
        return -ENOMEM;
    memcpy(nng_msg_body(m), h, sizeof(*h));
    if (h->len)
        memcpy((uint8_t *)nng_msg_body(m) + sizeof(*h), p, h->len);
    rv = nng_sendmsg(sw->sock, m, NNG_FLAG_NONBLOCK);
    if (rv != 0) {
        static __thread unsigned long long last_log;

        fgx_log_ratelimited(&last_log, FGX_LOG_WARN, "script: cannot send to scriptworker: %s",
                            nng_strerror(rv));
        nng_msg_free(m);
        return -EAGAIN;
    }
    return 0;
}

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
        nng_msg *m;
        int side;

        if (nng_recvmsg(sw->sock, &m, NNG_FLAG_NONBLOCK) != 0)
            return;
        if (nng_msg_len(m) < sizeof(h)) {
            nng_msg_free(m);
            continue;
        }
        memcpy(&h, nng_msg_body(m), sizeof(h));
        if (h.type == FGX_SW_LOG) {
            px_script_log_push(t, h.service, (const char *)nng_msg_body(m) + sizeof(h),
                               nng_msg_len(m) - sizeof(h));
            nng_msg_free(m);
            continue;
        }
        if (h.type != FGX_SW_VERDICT) {
            nng_msg_free(m);
            continue;
        }
        c = sw->slot[h.conn % PX_SW_SLOTS];
        if (!c || c->sw_id != h.conn) {
            nng_msg_free(m);
            continue; /* closed meanwhile */
        }
        side = c->hold[0] && c->hold_seq[0] == h.seq   ? 0
               : c->hold[1] && c->hold_seq[1] == h.seq ? 1
                                                      : -2;
        if (side == -2) {
            nng_msg_free(m);
            continue; /* its timer already decided */
        }
        if (h.code == FGX_SW_ERROR && nng_msg_len(m) > sizeof(h)) {
            static __thread unsigned long long last_log;
            const char *p = (const char *)nng_msg_body(m) + sizeof(h);
            size_t n = nng_msg_len(m) - sizeof(h), fl = strnlen(p, n);

            fgx_log_ratelimited(&last_log, FGX_LOG_WARN, "script: error verdict: %.*s",
                                fl < n ? (int)(n - fl - 1) : 0, fl < n ? p + fl + 1 : "");
        }
        {
            /* the verdict's payload: "function\0detail" */
            char fn[FGX_DP_SCRIPT_FN_MAX];
            const char *p = (const char *)nng_msg_body(m) + sizeof(h);
            size_t n = nng_msg_len(m) - sizeof(h), fl = strnlen(p, n);

            if (fl >= sizeof(fn))
                fl = sizeof(fn) - 1;
            memcpy(fn, p, fl);
            fn[fl] = '\0';
            nng_msg_free(m);
            apply(c, side, h.code, fn);
        }
    }
}

/* nng's thread: a scriptworker (re)started knows no file yet. */
static void on_pipe_add(nng_pipe p, nng_pipe_ev ev, void *arg)
{
    struct px_sw *sw = arg;

    (void)p;
    (void)ev;
    __atomic_store_n(&sw->resend, 1, __ATOMIC_RELEASE);
}

int px_script_thread_init(struct px_thread *t, const char *url)
{
    struct px_sw *sw = calloc(1, sizeof(*sw));
    int fd, rv;

    t->sw = sw;
    if (!sw)
        return -ENOMEM;
    sw->slot = calloc(PX_SW_SLOTS, sizeof(*sw->slot));
    if (!sw->slot)
        return -ENOMEM;
    if (!url || !*url)
        return 0; /* no scriptworker: scripted services get their fail-open verdict */
    rv = nng_pair1_open(&sw->sock);
    if (rv == 0)
        rv = nng_socket_set_int(sw->sock, NNG_OPT_SENDBUF, 8192);
    if (rv == 0)
        rv = nng_socket_set_int(sw->sock, NNG_OPT_RECVBUF, 8192);
    /* non-blocking: nng keeps redialling while scriptworker starts or restarts */
    if (rv == 0)
        rv = nng_pipe_notify(sw->sock, NNG_PIPE_EV_ADD_POST, on_pipe_add, sw);
    if (rv == 0) {
        char u[4200];

        /* its own socket there: URL-<thread index> (scriptworker/sw.h) */
        (void)snprintf(u, sizeof(u), "%s-%u", url, t->idx);
        rv = nng_dial(sw->sock, u, NULL, NNG_FLAG_NONBLOCK);
    }
    if (rv == 0)
        rv = nng_socket_get_int(sw->sock, NNG_OPT_RECVFD, &fd);
    if (rv != 0) {
        fgx_err("scriptworker at %s: %s", url, nng_strerror(rv));
        return -EIO;
    }
    sw->rev = event_new(t->base, fd, EV_READ | EV_PERSIST, on_readable, t);
    if (!sw->rev || event_add(sw->rev, NULL) != 0)
        return -ENOMEM;
    sw->up = true;
    return 0;
}

void px_script_thread_release(struct px_thread *t)
{
    struct px_sw *sw = t->sw;

    if (!sw)
        return;
    if (sw->rev)
        event_free(sw->rev);
    if (sw->up)
        nng_close(sw->sock);
    free(sw->slot);
    free(sw->sent);
    free(sw);
    t->sw = NULL;
}

void px_script_switch(struct px_thread *t)
{
    struct px_sw *sw = t->sw;
    const struct fgx_wcfg *cfg = t->cfg;
    struct px_sw_sent *now;
    size_t n = 0;

    if (!sw)
        return;
    now = calloc(cfg ? cfg->nservices + 1 : 1, sizeof(*now));
    if (!now)
        return;
    for (size_t i = 0; cfg && i < cfg->nservices; i++) {
        const struct fgx_wsvc *s = &cfg->svc[i];
        uint64_t hash;
        bool known = false;

        if (!s->script)
            continue;
        hash = fgx_hash64(s->script, s->script_len, s->script_deadline_ms);
        for (size_t j = 0; j < sw->nsent && !known; j++)
            known = sw->sent[j].id == s->id && sw->sent[j].hash == hash;
        now[n++] = (struct px_sw_sent){.id = s->id, .hash = hash};
        if (!known) {
            struct fgx_sw_hdr h = {.type = FGX_SW_SCRIPT,
                                   .service = s->id,
                                   .conn = s->script_deadline_ms,
                                   .seq = ++sw->seq,
                                   .len = (uint32_t)s->script_len};

            /* ahead of any of this thread's chunks under it, on the same ordered pipe */
            (void)sw_send(sw, &h, s->script);
        }
    }
    for (size_t j = 0; j < sw->nsent; j++) {
        bool still = false;

        for (size_t k = 0; k < n && !still; k++)
            still = now[k].id == sw->sent[j].id;
        if (!still) {
            struct fgx_sw_hdr h = {.type = FGX_SW_UNSCRIPT, .service = sw->sent[j].id};

            (void)sw_send(sw, &h, NULL);
        }
    }
    free(sw->sent);
    sw->sent = now;
    sw->nsent = n;
}

int px_script_chunk(struct px_conn *c, int side, const uint8_t *data, size_t len)
{
    struct px_thread *t = c->t;
    struct px_sw *sw = t->sw;
    const struct fgx_wsvc *svc;
    struct fgx_sw_hdr h = {0};
    struct timeval tv;

    if (c->sw_drop)
        return 1; /* DROP: what either side sends goes nowhere */
    svc = c->absent ? NULL : fgx_wcfg_service(t->cfg, c->service_id);
    if (!svc || !svc->script || !(svc->script_dirs & (1u << side)))
        return 0;
    if (!sw || !sw->up)
        return svc->fail_open ? 0 : -1;
    if (__atomic_load_n(&sw->resend, __ATOMIC_ACQUIRE)) {
        /* before this chunk: the files again, for a scriptworker that has none */
        __atomic_store_n(&sw->resend, 0, __ATOMIC_RELAXED);
        sw->nsent = 0;
        px_script_switch(t);
    }
    uint8_t open = 0;

    if (!c->sw_id) {
        uint32_t i;

        for (i = 0; i < PX_SW_SLOTS && sw->slot[(sw->cursor + i) % PX_SW_SLOTS]; i++)
            ;
        if (i == PX_SW_SLOTS)
            return svc->fail_open ? 0 : -1;
        sw->cursor = (sw->cursor + i) % PX_SW_SLOTS;
        /* the slot in the low 16 bits (PX_SW_SLOTS), a serial above: a late verdict never
         * meets a newer connection in the same slot */
        c->sw_id = (++sw->serial << 16) | sw->cursor;
        sw->slot[sw->cursor] = c;
        c->sw_hash = conn_hash(c);
        /* the first chunk opens the connection there: one frame, not two */
        open = FGX_SW_DATA_OPEN | (c->family == AF_INET6 ? FGX_SW_DATA_V6 : 0);
    }
    c->hold[side] = malloc(len);
    if (!c->hold[side])
        return -1;
    memcpy(c->hold[side], data, len);
    c->hold_len[side] = len;
    c->hold_seq[side] = ++sw->seq;
    h = (struct fgx_sw_hdr){.type = FGX_SW_DATA,
                            .code = (uint8_t)(side | open),
                            .hash = c->sw_hash,
                            .service = c->service_id,
                            .conn = c->sw_id,
                            .seq = c->hold_seq[side],
                            .len = (uint32_t)len};
    if (sw_send(sw, &h, data) < 0) {
        free(c->hold[side]);
        c->hold[side] = NULL;
        return svc->fail_open ? 0 : -1;
    }
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

        (void)sw_send(sw, &h, NULL);
        sw->slot[c->sw_id % PX_SW_SLOTS] = NULL;
    }
}

/* ---- scriptworker's log entries, until the next STATS takes them ---- */

#define PX_SW_LOG_MAX 1024

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static struct fgx_dp_script_log log_q[PX_SW_LOG_MAX];
static size_t log_n;
static uint64_t log_lost;

void px_script_log_push(struct px_thread *t, uint32_t service, const char *payload, size_t len)
{
    const char *kind = payload, *fn, *text, *end = payload + len;
    struct fgx_dp_script_log *e;

    (void)t;
    fn = memchr(kind, '\0', len);
    text = fn ? memchr(fn + 1, '\0', (size_t)(end - fn - 1)) : NULL;
    if (!fn || !text)
        return;
    fn++;
    text++;
    pthread_mutex_lock(&log_lock);
    if (log_n == PX_SW_LOG_MAX) {
        log_lost++;
        pthread_mutex_unlock(&log_lock);
        return;
    }
    e = &log_q[log_n];
    e->service_id = service;
    e->kind = strdup(kind);
    e->function = strdup(fn);
    e->text = strndup(text, (size_t)(end - text));
    if (e->kind && e->function && e->text) {
        log_n++;
    } else {
        free(e->kind);
        free(e->function);
        free(e->text);
        log_lost++;
    }
    pthread_mutex_unlock(&log_lock);
}

int px_script_logs_take(struct fgx_dp_stats *out)
{
    pthread_mutex_lock(&log_lock);
    out->script_logs_lost = log_lost;
    if (log_n > 0) {
        out->script_logs = malloc(log_n * sizeof(*out->script_logs));
        if (out->script_logs == NULL) {
            pthread_mutex_unlock(&log_lock);
            return -ENOMEM;
        }
        memcpy(out->script_logs, log_q, log_n * sizeof(*out->script_logs));
        out->nscript_logs = log_n;
        log_n = 0;
    }
    pthread_mutex_unlock(&log_lock);
    return 0;
}
