/* HTTP/2 stage of proxyworker, for services of the HTTP kind (--proto http): a connection whose
 * client opens with the HTTP/2 preface (h2 after TLS with ALPN h2, or h2c with prior knowledge)
 * is terminated here with libnghttp2 on both sides: a server session toward the client, a
 * client session toward the service. Each client stream becomes one service stream; its
 * request and its response are rendered as the HTTP/1.1 exchange they would have been
 * (px_h2_render.c) and scanned per stream, in both directions, with the service's databases
 * (px_match_scan_h2()). A match resets that stream on both sides (RST_STREAM CANCEL) and is a
 * block event naming the stream; the connection's other streams go on. A client that opens with
 * anything else is HTTP/1.1 (or whatever it is) and goes the plain relay's way, unchanged.
 *
 * Bytes: the relay reads a side into the thread's buffer and hands them here (px_h2_read());
 * what the sessions have to send is written by px_h2_flush(), the rest of a write kept in the
 * side's pend as the relay does. Bodies wait in per-stream queues until the other session
 * sends them (flow control is nghttp2's); when more than PX_H2_QUEUE_MAX waits toward a side, the
 * side they come from is not read until it drains. libnghttp2 (Debian's) does all framing,
 * HPACK and flow control: none of it is written here. */
#include "px.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <nghttp2/nghttp2.h>

#include "fgx/log.h"
#include "px_h2_render.h"

#define PX_H2_QUEUE_MAX (1u << 20) /* body bytes waiting toward one side */
#define PX_H2_HDR_MAX (64u << 10)  /* one header block, names and values */
#define PX_H2_STREAMS 100          /* concurrent streams a client may open */

static const uint8_t preface[PX_H2_PREFACE_LEN] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

struct px_h2_chunk {
    struct px_h2_chunk *next;
    size_t len, off;
    uint8_t data[];
};

/* A header block as it arrives: names and values in one arena, offsets into it. */
struct px_h2_field {
    uint32_t no, nl, vo, vl;
};

struct px_h2_fields {
    uint8_t *arena;
    size_t used, cap;
    struct px_h2_field *f;
    size_t n, fcap;
};

struct px_h2_stream {
    struct px_h2_stream *prev, *next;
    int32_t id[2];  /* [0] the client's stream, [1] the service's (0: not opened) */
    bool closed[2]; /* closed in session i */
    bool eof[2];    /* side i ended its half (END_STREAM) */
    bool blocked;
    struct fgx_reasm dir[2]; /* [0] scans the rendered request, [1] the response */
    struct fgx_wdb *db[2];
    struct px_h2_fields hf[2];   /* side i's header block being received */
    struct px_h2_chunk *qh[2], *qt[2]; /* body bytes toward side i */
    struct px_h2_fields tr[2];   /* trailers toward side i, sent after the body */
    bool has_tr[2];
};

struct px_h2 {
    nghttp2_session *sess[2]; /* [0] with the client (server), [1] with the service (client) */
    struct px_h2_stream *streams;
    size_t queued[2]; /* body bytes waiting toward side i */
    bool paused[2];   /* side i is not read while the other's queue drains */
    uint8_t sniff[PX_H2_PREFACE_LEN];
    size_t sniff_len;
};

static void fields_free(struct px_h2_fields *f)
{
    free(f->arena);
    free(f->f);
    memset(f, 0, sizeof(*f));
}

static int fields_add(struct px_h2_fields *f, const uint8_t *name, size_t nl, const uint8_t *value,
                      size_t vl)
{
    if (f->used + nl + vl > PX_H2_HDR_MAX)
        return -E2BIG;
    if (f->used + nl + vl > f->cap) {
        size_t cap = f->cap ? f->cap : 1024;
        uint8_t *a;

        while (cap < f->used + nl + vl)
            cap *= 2;
        if ((a = realloc(f->arena, cap)) == NULL)
            return -ENOMEM;
        f->arena = a;
        f->cap = cap;
    }
    if (f->n == f->fcap) {
        size_t cap = f->fcap ? 2 * f->fcap : 16;
        struct px_h2_field *p = realloc(f->f, cap * sizeof(*p));

        if (p == NULL)
            return -ENOMEM;
        f->f = p;
        f->fcap = cap;
    }
    f->f[f->n] = (struct px_h2_field){(uint32_t)f->used, (uint32_t)nl, (uint32_t)(f->used + nl),
                                      (uint32_t)vl};
    memcpy(f->arena + f->used, name, nl);
    memcpy(f->arena + f->used + nl, value, vl);
    f->used += nl + vl;
    f->n++;
    return 0;
}

/* The block as nghttp2 and the renderer take it (malloc'd arrays, the caller frees both). */
static int fields_arrays(const struct px_h2_fields *f, nghttp2_nv **nv, struct px_h2_hdr **h)
{
    *nv = malloc((f->n ? f->n : 1) * sizeof(**nv));
    *h = malloc((f->n ? f->n : 1) * sizeof(**h));
    if (*nv == NULL || *h == NULL) {
        free(*nv);
        free(*h);
        return -ENOMEM;
    }
    for (size_t i = 0; i < f->n; i++) {
        uint8_t *n = f->arena + f->f[i].no, *v = f->arena + f->f[i].vo;

        (*nv)[i] = (nghttp2_nv){n, v, f->f[i].nl, f->f[i].vl, NGHTTP2_NV_FLAG_NONE};
        (*h)[i] = (struct px_h2_hdr){n, v, f->f[i].nl, f->f[i].vl};
    }
    return 0;
}

static bool fields_has(const struct px_h2_fields *f, const char *name)
{
    size_t n = strlen(name);

    for (size_t i = 0; i < f->n; i++)
        if (f->f[i].nl == n && memcmp(f->arena + f->f[i].no, name, n) == 0)
            return true;
    return false;
}

/* ---- streams ---- */

static struct px_h2_stream *stream_new(struct px_conn *c, int32_t id)
{
    struct px_thread *t = c->t;
    struct px_h2_stream *st = calloc(1, sizeof(*st));

    if (st == NULL)
        return NULL;
    st->id[0] = id;
    if (c->epoch != t->epoch)
        px_match_attach(c);
    for (int d = 0; d < 2; d++) {
        struct fgx_wdb *db = c->absent ? NULL : c->dbref[d];

        fgx_reasm_init(&st->dir[d]);
        (void)fgx_reasm_start(t->reasm, &st->dir[d], 0);
        fgx_wdb_ref(db);
        st->db[d] = db;
        (void)fgx_reasm_switch_db(t->reasm, &st->dir[d], db != NULL ? db->db : NULL,
                                  db != NULL ? db->hash : 0, db != NULL ? db->ids : NULL,
                                  db != NULL ? db->nids : 0, NULL, NULL);
    }
    st->next = c->h2->streams;
    if (st->next != NULL)
        st->next->prev = st;
    c->h2->streams = st;
    return st;
}

static void queue_drop(struct px_h2 *h, struct px_h2_stream *st, int to)
{
    struct px_h2_chunk *k, *n;

    for (k = st->qh[to]; k != NULL; k = n) {
        n = k->next;
        h->queued[to] -= k->len - k->off;
        free(k);
    }
    st->qh[to] = st->qt[to] = NULL;
}

static void stream_free(struct px_conn *c, struct px_h2_stream *st)
{
    struct px_h2 *h = c->h2;

    if (st->prev != NULL)
        st->prev->next = st->next;
    else
        h->streams = st->next;
    if (st->next != NULL)
        st->next->prev = st->prev;
    for (int d = 0; d < 2; d++) {
        if (h->sess[d] != NULL && st->id[d] > 0)
            (void)nghttp2_session_set_stream_user_data(h->sess[d], st->id[d], NULL);
        queue_drop(h, st, d);
        fields_free(&st->hf[d]);
        fields_free(&st->tr[d]);
        fgx_reasm_release(c->t->reasm, &st->dir[d]);
        fgx_wdb_unref(st->db[d]);
    }
    free(st);
}

static void stream_maybe_free(struct px_conn *c, struct px_h2_stream *st)
{
    if (st->closed[0] && (st->id[1] <= 0 || st->closed[1]))
        stream_free(c, st);
}

/* Scan the rendering of side's part of st. 0: pass; -EACCES: st is blocked (reset on both
 * sides, event recorded); -EIO: the scan failed (the connection goes). */
static int stream_scan(struct px_conn *c, struct px_h2_stream *st, int side, const uint8_t *data,
                       size_t len)
{
    int rc;

    if (len == 0)
        return 0;
    /* the service is away, its traffic unfiltered (px_match.c): the midstream policy applies
     * at its return */
    if (c->absent) {
        c->unscanned = true;
        return 0;
    }
    rc = px_match_scan_h2(c, &st->dir[side], side, (uint32_t)st->id[0], data, len);
    if (rc != -EACCES)
        return rc;
    st->blocked = true;
    for (int d = 0; d < 2; d++) {
        queue_drop(c->h2, st, d);
        if (st->id[d] > 0 && !st->closed[d])
            (void)nghttp2_submit_rst_stream(c->h2->sess[d], NGHTTP2_FLAG_NONE, st->id[d],
                                            NGHTTP2_CANCEL);
    }
    return -EACCES;
}

static int scan_head(struct px_conn *c, struct px_h2_stream *st, int side, enum px_h2_kind kind,
                     const struct px_h2_hdr *h, size_t n)
{
    size_t len = px_h2_render_head(kind, h, n, NULL, 0);
    uint8_t *buf = malloc(len);
    int rc;

    if (buf == NULL)
        return -EIO;
    (void)px_h2_render_head(kind, h, n, buf, len);
    rc = stream_scan(c, st, side, buf, len);
    free(buf);
    return rc;
}

/* ---- sessions' callbacks ---- */

static int side_of(struct px_conn *c, nghttp2_session *s)
{
    return s == c->h2->sess[0] ? 0 : 1;
}

static void resume_from(struct px_conn *c, int to)
{
    struct px_h2 *h = c->h2;
    int from = 1 - to;

    if (h->paused[from] && h->queued[to] < PX_H2_QUEUE_MAX / 2) {
        h->paused[from] = false;
        event_add(c->s[from].rev, NULL);
        if (c->tls != NULL && px_tls_side(c, from))
            event_active(c->s[from].rev, EV_READ, 0);
    }
}

static ssize_t on_read_data(nghttp2_session *s, int32_t sid, uint8_t *buf, size_t len,
                            uint32_t *flags, nghttp2_data_source *src, void *ud)
{
    struct px_conn *c = ud;
    struct px_h2_stream *st = src->ptr;
    int to = side_of(c, s), from = 1 - to;
    size_t got = 0;

    while (got < len && st->qh[to] != NULL) {
        struct px_h2_chunk *k = st->qh[to];
        size_t n = k->len - k->off < len - got ? k->len - k->off : len - got;

        memcpy(buf + got, k->data + k->off, n);
        k->off += n;
        got += n;
        if (k->off == k->len) {
            st->qh[to] = k->next;
            if (st->qh[to] == NULL)
                st->qt[to] = NULL;
            free(k);
        }
    }
    c->h2->queued[to] -= got;
    resume_from(c, to);
    if (st->qh[to] == NULL && st->eof[from]) {
        *flags |= NGHTTP2_DATA_FLAG_EOF;
        if (st->has_tr[to]) {
            nghttp2_nv *nv;
            struct px_h2_hdr *h;

            if (fields_arrays(&st->tr[to], &nv, &h) == 0) {
                *flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
                (void)nghttp2_submit_trailer(s, sid, nv, st->tr[to].n);
                free(nv);
                free(h);
            }
            st->has_tr[to] = false;
            fields_free(&st->tr[to]);
        }
        return (ssize_t)got;
    }
    return got == 0 ? NGHTTP2_ERR_DEFERRED : (ssize_t)got;
}

static int on_begin_headers(nghttp2_session *s, const nghttp2_frame *f, void *ud)
{
    struct px_conn *c = ud;
    int side = side_of(c, s);
    struct px_h2_stream *st = nghttp2_session_get_stream_user_data(s, f->hd.stream_id);

    if (f->hd.type != NGHTTP2_HEADERS)
        return 0;
    if (st == NULL && side == 0 && f->headers.cat == NGHTTP2_HCAT_REQUEST) {
        st = stream_new(c, f->hd.stream_id);
        if (st == NULL)
            return NGHTTP2_ERR_CALLBACK_FAILURE;
        (void)nghttp2_session_set_stream_user_data(s, f->hd.stream_id, st);
    }
    if (st != NULL)
        st->hf[side].used = st->hf[side].n = 0;
    return 0;
}

static int on_header(nghttp2_session *s, const nghttp2_frame *f, const uint8_t *name, size_t nl,
                     const uint8_t *value, size_t vl, uint8_t flags, void *ud)
{
    struct px_conn *c = ud;
    struct px_h2_stream *st = nghttp2_session_get_stream_user_data(s, f->hd.stream_id);

    (void)flags;
    if (st == NULL || st->blocked)
        return 0;
    /* Too large a block (or no memory for it): that stream is reset, the others go on. */
    if (fields_add(&st->hf[side_of(c, s)], name, nl, value, vl) != 0)
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    return 0;
}

/* A header block of side's is complete: scanned, then passed on to the other session. */
static int headers_done(struct px_conn *c, struct px_h2_stream *st, int side, bool end)
{
    struct px_h2 *h = c->h2;
    struct px_h2_fields *fl = &st->hf[side];
    nghttp2_data_provider prd = {.source.ptr = st, .read_callback = on_read_data};
    struct px_h2_hdr *hd;
    nghttp2_nv *nv;
    enum px_h2_kind kind = side == 0 ? (fields_has(fl, ":method") ? PX_H2_REQUEST : PX_H2_TRAILERS)
                                     : (fields_has(fl, ":status") ? PX_H2_RESPONSE : PX_H2_TRAILERS);
    int rc;

    if (fields_arrays(fl, &nv, &hd) != 0)
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    rc = scan_head(c, st, side, kind, hd, fl->n);
    if (rc == -EIO) {
        rc = NGHTTP2_ERR_CALLBACK_FAILURE;
        goto out;
    }
    rc = 0;
    if (st->blocked)
        goto out;
    if (kind == PX_H2_TRAILERS) {
        /* sent after the body that precedes them (on_read_data()) */
        fields_free(&st->tr[1 - side]);
        st->tr[1 - side] = *fl;
        st->has_tr[1 - side] = true;
        memset(fl, 0, sizeof(*fl));
    } else if (kind == PX_H2_REQUEST) {
        int32_t id = nghttp2_submit_request(h->sess[1], NULL, nv, fl->n, end ? NULL : &prd, st);

        if (id < 0) {
            (void)nghttp2_submit_rst_stream(h->sess[0], NGHTTP2_FLAG_NONE, st->id[0],
                                            NGHTTP2_REFUSED_STREAM);
            st->blocked = true;
        } else
            st->id[1] = id;
    } else {
        bool interim = false;

        for (size_t i = 0; i < fl->n; i++)
            if (hd[i].namelen == 7 && memcmp(hd[i].name, ":status", 7) == 0)
                interim = hd[i].valuelen == 3 && hd[i].value[0] == '1';
        if (interim)
            (void)nghttp2_submit_headers(h->sess[0], NGHTTP2_FLAG_NONE, st->id[0], NULL, nv,
                                         fl->n, NULL);
        else if (nghttp2_submit_response(h->sess[0], st->id[0], nv, fl->n, end ? NULL : &prd) != 0)
            (void)nghttp2_submit_rst_stream(h->sess[1], NGHTTP2_FLAG_NONE, st->id[1],
                                            NGHTTP2_CANCEL);
    }
out:
    free(nv);
    free(hd);
    return rc;
}

static int on_frame_recv(nghttp2_session *s, const nghttp2_frame *f, void *ud)
{
    struct px_conn *c = ud;
    int side = side_of(c, s);
    struct px_h2_stream *st;
    bool end = (f->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0;

    if (f->hd.type != NGHTTP2_HEADERS && f->hd.type != NGHTTP2_DATA)
        return 0;
    st = nghttp2_session_get_stream_user_data(s, f->hd.stream_id);
    if (st == NULL || st->blocked)
        return 0;
    if (end)
        st->eof[side] = true;
    if (f->hd.type == NGHTTP2_HEADERS) {
        int rc = headers_done(c, st, side, end);

        if (rc != 0 || st->blocked)
            return rc;
    }
    if (end && st->id[1 - side] > 0)
        (void)nghttp2_session_resume_data(c->h2->sess[1 - side], st->id[1 - side]);
    return 0;
}

static int on_data_chunk(nghttp2_session *s, uint8_t flags, int32_t sid, const uint8_t *data,
                         size_t len, void *ud)
{
    struct px_conn *c = ud;
    struct px_h2 *h = c->h2;
    int side = side_of(c, s), to = 1 - side;
    struct px_h2_stream *st = nghttp2_session_get_stream_user_data(s, sid);
    struct px_h2_chunk *k;
    int rc;

    (void)flags;
    if (st == NULL || st->blocked)
        return 0;
    rc = stream_scan(c, st, side, data, len);
    if (rc == -EACCES)
        return 0;
    if (rc != 0)
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    if ((k = malloc(sizeof(*k) + len)) == NULL)
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    k->next = NULL;
    k->len = len;
    k->off = 0;
    memcpy(k->data, data, len);
    if (st->qt[to] != NULL)
        st->qt[to]->next = k;
    else
        st->qh[to] = k;
    st->qt[to] = k;
    h->queued[to] += len;
    if (h->queued[to] > PX_H2_QUEUE_MAX && !h->paused[side]) {
        h->paused[side] = true;
        event_del(c->s[side].rev);
    }
    if (st->id[to] > 0)
        (void)nghttp2_session_resume_data(h->sess[to], st->id[to]);
    return 0;
}

static int on_stream_close(nghttp2_session *s, int32_t sid, uint32_t err, void *ud)
{
    struct px_conn *c = ud;
    int side = side_of(c, s), o = 1 - side;
    struct px_h2_stream *st = nghttp2_session_get_stream_user_data(s, sid);

    if (st == NULL)
        return 0;
    st->closed[side] = true;
    /* A reset (or the client's end) on one side ends the other's stream too. */
    if (!st->blocked && st->id[o] > 0 && !st->closed[o] && (err != 0 || side == 0))
        (void)nghttp2_submit_rst_stream(c->h2->sess[o], NGHTTP2_FLAG_NONE, st->id[o],
                                        err != 0 ? err : NGHTTP2_CANCEL);
    stream_maybe_free(c, st);
    return 0;
}

/* ---- the connection ---- */

static int h2_start(struct px_conn *c)
{
    struct px_h2 *h = c->h2;
    nghttp2_session_callbacks *cb;
    nghttp2_settings_entry srv[] = {{NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, PX_H2_STREAMS}};
    nghttp2_settings_entry cli[] = {{NGHTTP2_SETTINGS_ENABLE_PUSH, 0}};
    int rc = -ENOMEM;

    if (nghttp2_session_callbacks_new(&cb) != 0)
        return -ENOMEM;
    nghttp2_session_callbacks_set_on_begin_headers_callback(cb, on_begin_headers);
    nghttp2_session_callbacks_set_on_header_callback(cb, on_header);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cb, on_frame_recv);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, on_data_chunk);
    nghttp2_session_callbacks_set_on_stream_close_callback(cb, on_stream_close);
    if (nghttp2_session_server_new(&h->sess[0], cb, c) != 0 ||
        nghttp2_session_client_new(&h->sess[1], cb, c) != 0)
        goto out;
    if (nghttp2_submit_settings(h->sess[0], NGHTTP2_FLAG_NONE, srv, 1) != 0 ||
        nghttp2_submit_settings(h->sess[1], NGHTTP2_FLAG_NONE, cli, 1) != 0)
        goto out;
    rc = 0;
out:
    nghttp2_session_callbacks_del(cb);
    return rc;
}

void px_h2_conn_free(struct px_conn *c)
{
    struct px_h2 *h = c->h2;

    if (h == NULL)
        return;
    while (h->streams != NULL)
        stream_free(c, h->streams);
    nghttp2_session_del(h->sess[0]);
    nghttp2_session_del(h->sess[1]);
    free(h);
    c->h2 = NULL;
}

static ssize_t side_send(struct px_conn *c, int side, const uint8_t *p, size_t n)
{
    ssize_t w = c->tls != NULL && px_tls_side(c, side)
                    ? px_tls_send(c, side, p, n)
                    : send(c->s[side].fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);

    if (w == -1 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return 0;
    return w;
}

bool px_h2_flush(struct px_conn *c)
{
    struct px_h2 *h = c->h2;

    for (int d = 0; d < 2; d++) {
        struct px_side *s = &c->s[d];

        while (s->pend == NULL) {
            const uint8_t *p;
            ssize_t n = nghttp2_session_mem_send(h->sess[d], &p), w;

            if (n < 0) {
                px_relay_close(c, true);
                return false;
            }
            if (n == 0)
                break;
            w = side_send(c, d, p, (size_t)n);
            if (w < 0) {
                px_relay_close(c, true);
                return false;
            }
            if (w == n)
                continue;
            /* the rest waits in pend, written when the side is writable (px_relay.c) */
            s->pend = malloc((size_t)(n - w));
            if (s->pend == NULL) {
                px_relay_close(c, true);
                return false;
            }
            memcpy(s->pend, p + w, (size_t)(n - w));
            s->pend_off = 0;
            s->pend_len = (size_t)(n - w);
            event_add(s->wev, NULL);
        }
    }
    /* Either session done (a GOAWAY and its streams over): the connection ends. */
    for (int d = 0; d < 2; d++)
        if (c->s[d].pend == NULL && !nghttp2_session_want_read(h->sess[d]) &&
            !nghttp2_session_want_write(h->sess[d])) {
            px_relay_close(c, false);
            return false;
        }
    return true;
}

/* What the client speaks is known: the service's side is read from now on (what it sent
 * meanwhile, an h2 service's SETTINGS say, waits in the socket or in OpenSSL). */
static void hear_service(struct px_conn *c)
{
    event_add(c->s[1].rev, NULL);
    if (c->tls != NULL && px_tls_side(c, 1))
        event_active(c->s[1].rev, EV_READ, 0);
}

int px_h2_read(struct px_conn *c, int side, uint8_t *buf, size_t *len)
{
    static __thread unsigned long long last_log;
    struct px_h2 *h = c->h2;
    size_t n = *len, cmp;
    const struct fgx_wsvc *svc;

    if (c->h2on) {
        ssize_t r = nghttp2_session_mem_recv(h->sess[side], buf, n);

        if (r < 0) {
            fgx_log_ratelimited(&last_log, FGX_LOG_INFO,
                                "service %u: HTTP/2 from the %s: %s (connection reset)",
                                c->service_id, side == 0 ? "client" : "service",
                                nghttp2_strerror((int)r));
            px_relay_close(c, true);
            return -1;
        }
        return px_h2_flush(c) ? 1 : -1;
    }
    /* Not known yet: the client's first bytes say; the service is not read meanwhile. */
    if (side == 1) {
        px_relay_close(c, true);
        return -1;
    }
    if (h != NULL && h->sniff_len > 0) {
        memmove(buf + h->sniff_len, buf, n);
        memcpy(buf, h->sniff, h->sniff_len);
        n += h->sniff_len;
        h->sniff_len = 0;
        *len = n;
    }
    cmp = n < PX_H2_PREFACE_LEN ? n : PX_H2_PREFACE_LEN;
    if (memcmp(buf, preface, cmp) != 0) {
        px_h2_conn_free(c);
        c->http1 = true;
        hear_service(c);
        return 0;
    }
    if (h == NULL && (h = c->h2 = calloc(1, sizeof(*h))) == NULL) {
        px_relay_close(c, true);
        return -1;
    }
    if (n < PX_H2_PREFACE_LEN) {
        memcpy(h->sniff, buf, n);
        h->sniff_len = n;
        return 1;
    }
    svc = fgx_wcfg_service(c->t->cfg, c->service_id);
    if (svc != NULL && svc->script != NULL) {
        /* Script filters are not shown HTTP/2 streams yet: refused, never passed unjudged. */
        fgx_log_ratelimited(&last_log, FGX_LOG_WARN,
                            "service %u: an HTTP/2 client, and the service has a filter file, "
                            "which is not shown HTTP/2 streams yet: connection reset",
                            c->service_id);
        px_relay_close(c, true);
        return -1;
    }
    if (h2_start(c) != 0) {
        px_relay_close(c, true);
        return -1;
    }
    c->h2on = true;
    hear_service(c);
    return px_h2_read(c, side, buf, len);
}
