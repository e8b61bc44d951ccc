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
 * HPACK and flow control: none of it is written here.
 *
 * gRPC: a side whose head says content-type application/grpc has its body deframed
 * (px_grpc.c): each length-prefixed message is scanned on its own (the side's reasm started
 * again for it), inflated where it was compressed, and its raw bytes forwarded once it is whole
 * and passed; a match resets the stream as above, and a message that cannot be judged resets it
 * too (logged, a scan error).
 *
 * Filter files (px_script.c): on a service with a script each stream is a connection of its own
 * to the interpreters, shown its rendering (chunked where the head has no length, so that an
 * HTTP/1.1 parser frames it); a side's head, body bytes and end wait for the verdict on the
 * frame that carried them (struct px_h2_act), a REJECT resets the stream. An edit of a frame
 * (sw_edit()) is parsed back into the parts it carried: the head's lines to a header block,
 * body bytes (chunk framing undone) to DATA, a last chunk's trailer section to trailers; a head
 * with a Content-Length waits for its body's verdicts (up to PX_H2_HOLD_MAX) so that it goes on
 * with the length of the body as edited.
 *
 * Toward a service that speaks HTTP/1.1 only (--upstream http1, c->h1up) there is no client
 * session: each stream's request is rendered as HTTP/1.1 (Host from :authority, the body as it
 * came with its Content-Length, else chunked) and written on the one upstream connection, one
 * request at a time in the order the streams' headers came (the next waits for the answer
 * before it: keep-alive, no pipelining); the service's responses are parsed with http-parser
 * (Debian's libhttp-parser) and submitted on their stream as HTTP/2 responses, minus the
 * hop-by-hop fields, chunked trailers as HTTP/2 trailers. When that connection ends (the
 * service closed it, or a request blocked halfway through its body leaves it unusable), the
 * next request goes on a new one (plaintext services); when none can be had, the streams not
 * answered are refused (REFUSED_STREAM: a client may retry them) and a GOAWAY ends the
 * client's connection once what was answered is sent. */
#include "px.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <http_parser.h>
#include <nghttp2/nghttp2.h>
#include <sys/socket.h>

#include "fgx/log.h"
#include "fgx/swproto.h"
#include "px_grpc.h"
#include "px_h2_render.h"

#define PX_H2_QUEUE_MAX (1u << 20) /* body bytes waiting toward one side */
#define PX_H2_HDR_MAX (64u << 10)  /* one header block, names and values */
#define PX_H2_STREAMS 100          /* concurrent streams a client may open */
#define PX_H1_PUMP (64u << 10)     /* request bytes framed toward an HTTP/1.1 service at once */
#define PX_H1_REOPENS 3            /* new connections to it in a row without an answer */
#define PX_H2_GRPC_HELD (8u << 20) /* gRPC bytes of messages not complete, all streams together */
/* Flow-control windows fgex announces on both sessions (per stream, and the connection's): the
 * protocol's default 64 KiB would bound a bulk stream to 64 KiB per round trip through the
 * proxy (bench/h2, docs/benchmarks.md); what arrives is still bounded by PX_H2_QUEUE_MAX, past
 * which the sending side is not read. */
#define PX_H2_WINDOW (1 << 20)
#define PX_H2_CONN_WINDOW (4 << 20)
/* Body bytes a head with a Content-Length waits behind for the filter file (sw_pass()): an edit
 * of a longer body passes with the length it came with. Below PX_H2_QUEUE_MAX / 2, where a
 * paused side reads again. */
#define PX_H2_HOLD_MAX (PX_H2_QUEUE_MAX / 4)

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

/* A part of a side's stream shown to the filter file, passed on at its verdict: a head (its
 * fields, moved here), body bytes, or the rendering's end. */
struct px_h2_act {
    struct px_h2_act *next;
    uint32_t seq; /* the frame whose verdict passes it; 0: not sent yet */
    bool head, end;
    bool chunked; /* body bytes or an end rendered with the chunked framing */
    enum px_h2_kind kind;
    struct px_h2_fields f;
    struct px_h2_chunk *k;
};

struct px_h2_stream {
    struct px_h2_stream *prev, *next;
    struct px_conn *c;
    int32_t id[2];  /* [0] the client's stream, [1] the service's (0: not opened) */
    bool closed[2]; /* closed in session i */
    bool eof[2];    /* side i ended its half (END_STREAM) */
    bool blocked;
    struct fgx_reasm dir[2]; /* [0] scans the rendered request, [1] the response */
    struct fgx_cap_ref cap;  /* the rendered exchange's capture (px_match_scan_h2()) */
    struct fgx_wdb *db[2];
    struct px_h2_fields hf[2];   /* side i's header block being received */
    struct px_h2_chunk *qh[2], *qt[2]; /* body bytes toward side i */
    struct px_h2_fields tr[2];   /* trailers toward side i, sent after the body */
    bool has_tr[2];
    /* toward an HTTP/1.1 service: the request's head as written to it, its place in the line of
     * requests, whether its body goes chunked and whether it asked HEAD (an answer without body) */
    uint8_t *h1req;
    size_t h1req_len;
    struct px_h2_stream *h1next;
    bool h1q, h1chunked, h1head;
    bool h1again; /* GET or HEAD without body: may be sent again if no answer began */
    /* a gRPC stream (content-type application/grpc on side i's head): side i's body deframed,
     * each message scanned on its own and forwarded once it passed (px_grpc.c) */
    bool grpc_on[2];
    struct px_grpc grpc[2];
    /* a service with a filter file (px_script.c): the stream is a connection of its own to the
     * interpreters, its HTTP/1.1 rendering the bytes (chunked where the head has no length);
     * side i's parts wait in ah/at until the verdict on the frame that carried them */
    bool scripted;
    bool sw_chunked[2];
    bool head_req; /* the request is HEAD: its answer has no body */
    uint64_t sw_id;
    struct px_h2_act *ah[2], *at[2];
    uint8_t *sw_next[2], *sw_sent[2]; /* rendered, not sent yet; sent, its verdict awaited */
    size_t sw_next_len[2], sw_next_cap[2], sw_sent_len[2], sw_sent_cap[2];
    uint32_t sw_seq[2]; /* the frame awaited (0: none) */
    struct event *sw_timer;
    uint8_t sw_dirs; /* the sides the file judges (bit i: side i) */
    /* a judged head with a Content-Length, held until its body passed too (or PX_H2_HOLD_MAX
     * of it did), so that the length it goes on with is the body's after an edit */
    struct px_h2_act *hh[2];
    size_t hh_body[2];
    bool edited[2]; /* a frame of side i's went on as the file edited it */
};

/* The one connection to an HTTP/1.1 service (c->h1up): the line of requests (head: the one
 * being written or answered), what is written of it, the response's parser. */
struct px_h1up {
    struct px_h2_stream *qh, *qt;
    bool head_sent, req_done; /* of qh's request */
    bool dead;                /* no more requests on this connection (h1_end()) */
    bool ended;               /* h1_end() ran: no more at all */
    bool down;                /* the connection closed: a new one for the next request */
    unsigned reopens;         /* new connections since the last answer */
    http_parser p;
    bool in_value, in_trailers;
    bool answering; /* a byte of qh's answer came */
    uint8_t *hn, *hv; /* the header field arriving (http-parser may hand it in pieces) */
    size_t hnl, hvl, hncap, hvcap;
    uint8_t *out; /* framed request bytes to write */
    size_t out_len, out_cap;
};

struct px_h2 {
    nghttp2_session *sess[2]; /* [0] with the client (server), [1] with the service (client) */
    struct px_h2_stream *streams;
    size_t queued[2]; /* body bytes waiting toward side i */
    bool paused[2];   /* side i is not read while the other's queue drains */
    uint8_t sniff[PX_H2_PREFACE_LEN];
    size_t sniff_len;
    struct px_h1up *h1; /* toward an HTTP/1.1 service (sess[1] NULL then) */
    size_t grpc_held;   /* bytes of gRPC messages not complete yet, over the streams */
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

/* Side ended its half and all of it passed (nothing waits for the filter file's verdict). */
static bool side_done(const struct px_h2_stream *st, int side)
{
    return st->eof[side] && st->ah[side] == NULL;
}

static void h1_unlink(struct px_h1up *u, struct px_h2_stream *st);
static int buf_add(uint8_t **b, size_t *len, size_t *cap, const void *p, size_t n, size_t max);
static bool h1_needs_client(const struct px_h2 *h);
static void h1_drop(struct px_conn *c, struct px_h2_stream *st);
static int h1_request(struct px_conn *c, struct px_h2_stream *st, const struct px_h2_fields *fl,
                      bool end);

static struct px_h2_stream *stream_new(struct px_conn *c, int32_t id)
{
    struct px_thread *t = c->t;
    struct px_h2_stream *st = calloc(1, sizeof(*st));

    if (st == NULL)
        return NULL;
    st->id[0] = id;
    st->c = c;
    if (c->epoch != t->epoch)
        px_match_attach(c);
    {
        const struct fgx_wsvc *svc = c->absent ? NULL : fgx_wcfg_service(t->cfg, c->service_id);

        st->scripted = svc != NULL && svc->script != NULL;
        st->sw_dirs = st->scripted ? svc->script_dirs : 0;
    }
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
    struct px_h2_act *a, *an;

    for (k = st->qh[to]; k != NULL; k = n) {
        n = k->next;
        h->queued[to] -= k->len - k->off;
        free(k);
    }
    st->qh[to] = st->qt[to] = NULL;
    /* and what waits for the filter file's verdict on its way there */
    for (a = st->ah[1 - to]; a != NULL; a = an) {
        an = a->next;
        if (a->k != NULL) {
            h->queued[to] -= a->k->len;
            free(a->k);
        }
        fields_free(&a->f);
        free(a);
    }
    st->ah[1 - to] = st->at[1 - to] = NULL;
    if ((a = st->hh[1 - to]) != NULL) {
        fields_free(&a->f);
        free(a);
        st->hh[1 - to] = NULL;
    }
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
        h->grpc_held -= st->grpc[d].len;
        px_grpc_release(&st->grpc[d]);
        free(st->sw_next[d]);
        free(st->sw_sent[d]);
    }
    if (st->sw_timer != NULL)
        event_free(st->sw_timer);
    px_script_stream_close(c, st->sw_id);
    if (st->h1q)
        h1_unlink(h->h1, st);
    free(st->h1req);
    free(st);
}

static void stream_maybe_free(struct px_conn *c, struct px_h2_stream *st)
{
    if (st->closed[0] && (st->id[1] <= 0 || st->closed[1]))
        stream_free(c, st);
}

/* st ends here: reset on both sides, nothing more of it passed on. */
static void stream_block(struct px_conn *c, struct px_h2_stream *st)
{
    st->blocked = true;
    for (int d = 0; d < 2; d++) {
        queue_drop(c->h2, st, d);
        if (d == 1 && c->h2->h1 != NULL)
            h1_drop(c, st);
        else if (st->id[d] > 0 && !st->closed[d])
            (void)nghttp2_submit_rst_stream(c->h2->sess[d], NGHTTP2_FLAG_NONE, st->id[d],
                                            NGHTTP2_CANCEL);
    }
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
    rc = px_match_scan_h2(c, &st->dir[side], &st->cap, side, (uint32_t)st->id[0], data, len);
    if (rc != -EACCES)
        return rc;
    stream_block(c, st);
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

/* ---- gRPC streams ---- */

/* The field of that name in f (the last one), or NULL. */
static const struct px_h2_field *fields_get(const struct px_h2_fields *f, const char *name)
{
    size_t n = strlen(name);
    const struct px_h2_field *r = NULL;

    for (size_t i = 0; i < f->n; i++)
        if (f->f[i].nl == n && memcmp(f->arena + f->f[i].no, name, n) == 0)
            r = &f->f[i];
    return r;
}

/* side's head fl says whether its body is gRPC messages, and how they are compressed. */
static void grpc_detect(struct px_h2_stream *st, int side, const struct px_h2_fields *fl)
{
    const struct px_h2_field *ct = fields_get(fl, "content-type");
    const struct px_h2_field *enc = fields_get(fl, "grpc-encoding");

    if (ct == NULL || !px_grpc_content_type(fl->arena + ct->vo, ct->vl))
        return;
    px_grpc_init(&st->grpc[side],
                 enc != NULL ? px_grpc_encoding(fl->arena + enc->vo, enc->vl) : PX_GRPC_IDENTITY);
    st->grpc_on[side] = true;
}

static const char *grpc_why(int err)
{
    switch (err) {
    case -EPROTO: return "a flag not 0 or 1, or compressed with no encoding zlib undoes";
    case -EMSGSIZE: return "longer than 4 MiB, as sent or decompressed";
    case -EBADMSG: return "it does not decompress";
    case -EPIPE: return "the stream ended inside it";
    case -ENOBUFS: return "the connection's incomplete messages past 8 MiB";
    default: return "no memory";
    }
}

/* A message of side's that cannot be judged: the stream is reset, never passed unjudged. */
static void grpc_refuse(struct px_conn *c, struct px_h2_stream *st, int side, int err)
{
    static __thread unsigned long long last_log;
    struct px_grpc *g = &st->grpc[side];

    PX_CTR_ADD(&c->t->ctr.scan_errors, 1);
    fgx_log_ratelimited(&last_log, FGX_LOG_WARN,
                        "service %u: h2#%d: a gRPC message from the %s cannot be judged (%s): "
                        "stream reset",
                        c->service_id, st->id[0], side == 0 ? "client" : "service", grpc_why(err));
    stream_block(c, st);
    c->h2->grpc_held -= g->len;
    px_grpc_release(g);
}

struct grpc_scan {
    struct px_conn *c;
    struct px_h2_stream *st;
    int side;
};

static int grpc_msg(void *arg, const uint8_t *msg, size_t len)
{
    struct grpc_scan *a = arg;

    /* each message a scan of its own: its first byte is a start (^), and no pattern matches
     * across two messages, or across the head and a message */
    (void)fgx_reasm_start(a->c->t->reasm, &a->st->dir[a->side], 0);
    return stream_scan(a->c, a->st, a->side, msg, len);
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
    if (st->qh[to] == NULL && side_done(st, from)) {
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

/* side's head (request or response: fields fl, which ended the stream if end), judged:
 * passed on to the other session. */
static int head_pass(struct px_conn *c, struct px_h2_stream *st, int side, enum px_h2_kind kind,
                     struct px_h2_fields *fl, bool end)
{
    struct px_h2 *h = c->h2;
    nghttp2_data_provider prd = {.source.ptr = st, .read_callback = on_read_data};
    struct px_h2_hdr *hd;
    nghttp2_nv *nv;

    (void)side;
    if (fields_arrays(fl, &nv, &hd) != 0)
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    if (kind == PX_H2_REQUEST && h->h1 != NULL) {
        if (h1_request(c, st, fl, end) != 0) {
            (void)nghttp2_submit_rst_stream(h->sess[0], NGHTTP2_FLAG_NONE, st->id[0],
                                            NGHTTP2_REFUSED_STREAM);
            st->blocked = true;
        }
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
        else if (nghttp2_submit_response(h->sess[0], st->id[0], nv, fl->n, end ? NULL : &prd) !=
                 0) {
            if (h->h1 != NULL)
                st->blocked = true; /* its answer is read and dropped */
            else
                (void)nghttp2_submit_rst_stream(h->sess[1], NGHTTP2_FLAG_NONE, st->id[1],
                                                NGHTTP2_CANCEL);
        }
    }
    free(nv);
    free(hd);
    return 0;
}

/* ---- the filter file (px_script.c): each stream a connection of its own there ---- */

static int sw_add(struct px_h2_stream *st, int side, const void *p, size_t n)
{
    return buf_add(&st->sw_next[side], &st->sw_next_len[side], &st->sw_next_cap[side], p, n,
                   SIZE_MAX / 2);
}

static void act_add(struct px_h2_stream *st, int side, struct px_h2_act *a)
{
    if (st->at[side] != NULL)
        st->at[side]->next = a;
    else
        st->ah[side] = a;
    st->at[side] = a;
}

static void on_sw_timer(evutil_socket_t fd, short what, void *arg);

/* The judged head held for its body (st->hh[side]) goes on: with a Content-Length that counts
 * the body as it passed when an edit may have changed it and all of it passed. */
static void head_release(struct px_conn *c, struct px_h2_stream *st, int side)
{
    struct px_h2_act *a = st->hh[side];
    int rc = 0;

    st->hh[side] = NULL;
    if (st->edited[side] && side_done(st, side)) {
        struct px_h2_fields nf = {0};
        char num[24];
        int nl = snprintf(num, sizeof(num), "%zu", st->hh_body[side]);
        bool done = false;

        for (size_t i = 0; rc == 0 && i < a->f.n; i++) {
            const struct px_h2_field *f = &a->f.f[i];
            bool cl = f->nl == 14 && memcmp(a->f.arena + f->no, "content-length", 14) == 0;

            if (cl && done)
                continue; /* one length, not two */
            rc =
                fields_add(&nf, a->f.arena + f->no, f->nl,
                           cl ? (const uint8_t *)num : a->f.arena + f->vo, cl ? (size_t)nl : f->vl);
            done |= cl;
        }
        fields_free(&a->f);
        a->f = nf;
    }
    if (rc != 0 || head_pass(c, st, side, a->kind, &a->f, false) != 0)
        stream_block(c, st);
    fields_free(&a->f);
    free(a);
}

/* side's judged head a waits for its body: it has a Content-Length and a body to come, and
 * the file judges side (an edit may change the body's length). */
static bool head_holds(const struct px_h2_stream *st, int side, const struct px_h2_act *a)
{
    return !a->end && a->kind != PX_H2_TRAILERS && (st->sw_dirs & (1u << side)) != 0 &&
           fields_has(&a->f, "content-length");
}

/* The parts of side's whose frame seq was accepted go on, in order. */
static void sw_pass(struct px_conn *c, struct px_h2_stream *st, int side, uint32_t seq)
{
    struct px_h2 *h = c->h2;
    int to = 1 - side;

    while (st->ah[side] != NULL && st->ah[side]->seq == seq && !st->blocked) {
        struct px_h2_act *a = st->ah[side];

        st->ah[side] = a->next;
        if (st->ah[side] == NULL)
            st->at[side] = NULL;
        if (a->head && head_holds(st, side, a)) {
            a->next = NULL;
            st->hh[side] = a;
            st->hh_body[side] = 0;
            continue;
        }
        if (a->head) {
            if (head_pass(c, st, side, a->kind, &a->f, a->end) != 0)
                stream_block(c, st);
        } else if (a->k != NULL) {
            a->k->next = NULL;
            if (st->hh[side] != NULL)
                st->hh_body[side] += a->k->len;
            if (st->qt[to] != NULL)
                st->qt[to]->next = a->k;
            else
                st->qh[to] = a->k;
            st->qt[to] = a->k;
            a->k = NULL;
        }
        fields_free(&a->f);
        free(a);
    }
    if (st->hh[side] != NULL && !st->blocked &&
        (side_done(st, side) || st->hh_body[side] >= PX_H2_HOLD_MAX ||
         h->queued[to] > PX_H2_QUEUE_MAX / 2))
        head_release(c, st, side);
    if (!st->blocked && st->id[to] > 0 && h->sess[to] != NULL)
        (void)nghttp2_session_resume_data(h->sess[to], st->id[to]);
}

/* What side rendered since its last frame goes to the interpreters, unless a frame of its
 * waits for its verdict (then it goes at that verdict). */
static void sw_kick(struct px_conn *c, struct px_h2_stream *st, int side)
{
    static __thread unsigned long long last_log;
    uint64_t ms = 0;
    uint32_t seq = 0;
    uint8_t *p;
    size_t cap;
    int rv;

    if (st->sw_seq[side] != 0 || st->sw_next_len[side] == 0 || st->blocked)
        return;
    if (st->sw_next_len[side] > FGX_SW_MAX_PAYLOAD)
        rv = px_script_fail_open(c) ? 0 : -1;
    else
        rv = px_script_stream_chunk(c, &st->sw_id, side, st->sw_next[side],
                                    st->sw_next_len[side], &seq, &ms);
    /* the frame sent is kept (the event's excerpt), the other buffer takes what comes next */
    p = st->sw_sent[side];
    cap = st->sw_sent_cap[side];
    st->sw_sent[side] = st->sw_next[side];
    st->sw_sent_cap[side] = st->sw_next_cap[side];
    st->sw_sent_len[side] = st->sw_next_len[side];
    st->sw_next[side] = p;
    st->sw_next_cap[side] = cap;
    st->sw_next_len[side] = 0;
    if (rv == 0) {
        sw_pass(c, st, side, 0);
        return;
    }
    if (rv < 0) {
        fgx_log_ratelimited(&last_log, FGX_LOG_WARN,
                            "service %u: h2#%d: the filter file cannot judge it (no "
                            "scriptworker): stream reset (fail-closed)",
                            c->service_id, st->id[0]);
        stream_block(c, st);
        return;
    }
    for (struct px_h2_act *a = st->ah[side]; a != NULL; a = a->next)
        if (a->seq == 0)
            a->seq = seq;
    st->sw_seq[side] = seq;
    if (st->sw_timer == NULL)
        st->sw_timer = evtimer_new(c->t->base, on_sw_timer, st);
    if (st->sw_timer != NULL) {
        struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000};

        evtimer_add(st->sw_timer, &tv);
    }
}

/* side's head, judged by the regexes: rendered for the file; it goes on at the verdict. */
static int sw_head(struct px_conn *c, struct px_h2_stream *st, int side, enum px_h2_kind kind,
                   struct px_h2_fields *fl, const struct px_h2_hdr *hd, bool end)
{
    static const char te[] = "Transfer-Encoding: chunked\r\n\r\n";
    static const char cl0[] = "Content-Length: 0\r\n\r\n";
    size_t len = px_h2_render_head(kind, hd, fl->n, NULL, 0);
    const struct px_h2_field *f = fields_get(fl, kind == PX_H2_REQUEST ? ":method" : ":status");
    bool interim = kind == PX_H2_RESPONSE && f != NULL && f->vl == 3 && fl->arena[f->vo] == '1';
    struct px_h2_act *a = calloc(1, sizeof(*a));
    uint8_t *buf = malloc(len + sizeof(te) + sizeof(cl0));

    if (a == NULL || buf == NULL) {
        free(a);
        free(buf);
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    }
    if (kind == PX_H2_REQUEST)
        st->head_req = f != NULL && f->vl == 4 && memcmp(fl->arena + f->vo, "HEAD", 4) == 0;
    (void)px_h2_render_head(kind, hd, fl->n, buf, len);
    /* HTTP/2 needs no length; HTTP/1.1 does: a body without one is rendered chunked */
    st->sw_chunked[side] = !end && !interim && !fields_has(fl, "content-length") &&
                           !(kind == PX_H2_RESPONSE && st->head_req);
    if (st->sw_chunked[side]) {
        memcpy(buf + len - 2, te, sizeof(te) - 1);
        len += sizeof(te) - 1 - 2;
    } else if (kind == PX_H2_RESPONSE && end && !interim && !st->head_req &&
               !fields_has(fl, "content-length") &&
               !(f != NULL && f->vl == 3 &&
                 (memcmp(fl->arena + f->vo, "204", 3) == 0 ||
                  memcmp(fl->arena + f->vo, "304", 3) == 0))) {
        /* an answer that ends with its head (gRPC's trailers-only status): without a length
         * HTTP/1.1 would read its body up to the connection's end */
        memcpy(buf + len - 2, cl0, sizeof(cl0) - 1);
        len += sizeof(cl0) - 1 - 2;
    }
    a->head = true;
    a->end = end;
    a->kind = kind;
    a->f = *fl;
    memset(fl, 0, sizeof(*fl));
    act_add(st, side, a);
    if (sw_add(st, side, buf, len) != 0) {
        free(buf);
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    }
    free(buf);
    sw_kick(c, st, side);
    return 0;
}

/* Body bytes of side's (k, counted in queued already): rendered for the file. 0 or -EIO. */
static int sw_body(struct px_conn *c, struct px_h2_stream *st, int side, struct px_h2_chunk *k)
{
    struct px_h2_act *a = calloc(1, sizeof(*a));
    char sz[24];
    int l = snprintf(sz, sizeof(sz), "%zx\r\n", k->len);

    if (a == NULL) {
        free(k);
        return -EIO;
    }
    a->k = k;
    a->chunked = st->sw_chunked[side];
    act_add(st, side, a);
    if ((st->sw_chunked[side] && sw_add(st, side, sz, (size_t)l) != 0) ||
        sw_add(st, side, k->data, k->len) != 0 ||
        (st->sw_chunked[side] && sw_add(st, side, "\r\n", 2) != 0))
        return -EIO;
    sw_kick(c, st, side);
    return 0;
}

/* side ended its half: a chunked rendering's end (its trailers as the trailer section). */
static void sw_end(struct px_conn *c, struct px_h2_stream *st, int side)
{
    const struct px_h2_fields *tr = &st->tr[1 - side];
    struct px_h2_act *a;
    int rc;

    if (!st->scripted || st->blocked)
        return;
    if (!st->sw_chunked[side]) {
        if (st->hh[side] != NULL && st->ah[side] == NULL) {
            /* its body all passed before the end came: the held head goes now */
            head_release(c, st, side);
            if (!st->blocked && st->id[1 - side] > 0 && c->h2->sess[1 - side] != NULL)
                (void)nghttp2_session_resume_data(c->h2->sess[1 - side], st->id[1 - side]);
        }
        return;
    }
    st->sw_chunked[side] = false;
    if ((a = calloc(1, sizeof(*a))) == NULL) {
        stream_block(c, st);
        return;
    }
    a->chunked = true;
    act_add(st, side, a);
    rc = sw_add(st, side, "0\r\n", 3);
    for (size_t i = 0; rc == 0 && st->has_tr[1 - side] && i < tr->n; i++) {
        const struct px_h2_field *f = &tr->f[i];
        uint8_t name[256];
        size_t nl = f->nl < sizeof(name) ? f->nl : sizeof(name);

        /* title-cased, as the head's fields are rendered */
        for (size_t j = 0; j < nl; j++) {
            uint8_t ch = tr->arena[f->no + j];

            name[j] = (j == 0 || name[j - 1] == '-') && ch >= 'a' && ch <= 'z'
                          ? (uint8_t)(ch - 'a' + 'A')
                          : ch;
        }
        rc = sw_add(st, side, name, nl);
        if (rc == 0)
            rc = sw_add(st, side, ": ", 2);
        if (rc == 0)
            rc = sw_add(st, side, tr->arena + f->vo, f->vl);
        if (rc == 0)
            rc = sw_add(st, side, "\r\n", 2);
    }
    if (rc != 0 || sw_add(st, side, "\r\n", 2) != 0) {
        stream_block(c, st);
        return;
    }
    sw_kick(c, st, side);
}

/* ---- an edit of the rendering (UNSTABLE_MANGLE, l4_data, data): parsed back ---- */

/* The line at *p (without its CRLF) in *l, *ll; *p past it. false: no CRLF before e. */
static bool edit_line(const uint8_t **p, const uint8_t *e, const uint8_t **l, size_t *ll)
{
    for (const uint8_t *q = *p; q + 1 < e; q++)
        if (q[0] == '\r' && q[1] == '\n') {
            *l = *p;
            *ll = (size_t)(q - *p);
            *p = q + 2;
            return true;
        }
    return false;
}

/* "Name: value" lines up to the empty one, names lower-cased as HTTP/2 wants them. */
static int edit_lines(const uint8_t **p, const uint8_t *e, struct px_h2_fields *f)
{
    const uint8_t *l;
    size_t ll;

    while (edit_line(p, e, &l, &ll)) {
        const uint8_t *colon = ll > 0 ? memchr(l, ':', ll) : NULL;
        size_t nl, vo, vl;
        int rc;

        if (ll == 0)
            return 0;
        if (colon == NULL || colon == l || l[0] == ' ' || l[0] == '\t')
            return -EINVAL; /* not a field (a folded line included) */
        nl = (size_t)(colon - l);
        for (vo = nl + 1; vo < ll && (l[vo] == ' ' || l[vo] == '\t'); vo++)
            ;
        for (vl = ll - vo; vl > 0 && (l[vo + vl - 1] == ' ' || l[vo + vl - 1] == '\t'); vl--)
            ;
        for (size_t i = 0; i < nl; i++)
            if (l[i] <= ' ' || l[i] >= 0x7f)
                return -EINVAL;
        if ((rc = fields_add(f, l, nl, l + vo, vl)) != 0)
            return rc;
        for (size_t i = 0; i < nl; i++) {
            uint8_t *ch = f->arena + f->f[f->n - 1].no + i;

            if (*ch >= 'A' && *ch <= 'Z')
                *ch = (uint8_t)(*ch - 'A' + 'a');
        }
    }
    return -EINVAL; /* no empty line: the head does not end */
}

static bool edit_is(const uint8_t *p, size_t n, const char *s)
{
    return n == strlen(s) && memcmp(p, s, n) == 0;
}

/* Fields HTTP/2 has no place for (RFC 9113 8.2.2; TE but "trailers"), or that a pseudo-header
 * carries (Host). */
static bool edit_skip(const struct px_h2_fields *f, const struct px_h2_field *x)
{
    const uint8_t *n = f->arena + x->no, *v = f->arena + x->vo;

    if (edit_is(n, x->nl, "te"))
        return !edit_is(v, x->vl, "trailers");
    return edit_is(n, x->nl, "connection") || edit_is(n, x->nl, "keep-alive") ||
           edit_is(n, x->nl, "proxy-connection") || edit_is(n, x->nl, "transfer-encoding") ||
           edit_is(n, x->nl, "upgrade") || edit_is(n, x->nl, "host");
}

/* An edited head (at *p, *p past it) as the HTTP/2 header block it says: the request line to
 * :method and :path, Host to :authority, :scheme (and :protocol) kept from the head it
 * replaces (old); the status line to :status. */
static int edit_head(const uint8_t **p, const uint8_t *e, enum px_h2_kind kind,
                     const struct px_h2_fields *old, struct px_h2_fields *nf)
{
    struct px_h2_fields hf = {0};
    const uint8_t *l, *sp1, *sp2;
    size_t ll;
    int rc;

    if (!edit_line(p, e, &l, &ll) || ll == 0 || (sp1 = memchr(l, ' ', ll)) == NULL)
        return -EINVAL;
    if ((rc = edit_lines(p, e, &hf)) != 0) {
        fields_free(&hf);
        return rc;
    }
    if (kind == PX_H2_REQUEST) {
        const struct px_h2_field *host = fields_get(&hf, "host");
        size_t ml = (size_t)(sp1 - l);

        for (sp2 = l + ll - 1; sp2 > sp1 && *sp2 != ' '; sp2--)
            ;
        if (sp2 <= sp1 + 1 || ml == 0 || l + ll - sp2 < 6 || memcmp(sp2 + 1, "HTTP/", 5) != 0) {
            fields_free(&hf);
            return -EINVAL;
        }
        rc = fields_add(nf, (const uint8_t *)":method", 7, l, ml);
        for (const char *const *ps = (const char *const[]){":scheme", ":protocol", NULL};
             rc == 0 && *ps != NULL; ps++) {
            const struct px_h2_field *o = fields_get(old, *ps);

            if (o != NULL)
                rc = fields_add(nf, (const uint8_t *)*ps, strlen(*ps), old->arena + o->vo, o->vl);
        }
        if (rc == 0 && edit_is(l, ml, "CONNECT") && !fields_has(old, ":protocol"))
            rc =
                fields_add(nf, (const uint8_t *)":authority", 10, sp1 + 1, (size_t)(sp2 - sp1 - 1));
        else {
            if (rc == 0 && host != NULL)
                rc = fields_add(nf, (const uint8_t *)":authority", 10, hf.arena + host->vo,
                                host->vl);
            if (rc == 0)
                rc = fields_add(nf, (const uint8_t *)":path", 5, sp1 + 1, (size_t)(sp2 - sp1 - 1));
        }
    } else {
        /* "HTTP/1.1 200 OK": the three digits */
        const uint8_t *st = sp1 + 1;

        if (l + ll - st < 3 || st[0] < '1' || st[0] > '5' || st[1] < '0' || st[1] > '9' ||
            st[2] < '0' || st[2] > '9' || (l + ll - st > 3 && st[3] != ' ')) {
            fields_free(&hf);
            return -EINVAL;
        }
        rc = fields_add(nf, (const uint8_t *)":status", 7, st, 3);
    }
    for (size_t i = 0; rc == 0 && i < hf.n; i++)
        if (!edit_skip(&hf, &hf.f[i]))
            rc = fields_add(nf, hf.arena + hf.f[i].no, hf.f[i].nl, hf.arena + hf.f[i].vo,
                            hf.f[i].vl);
    fields_free(&hf);
    return rc;
}

/* Whole chunks, as rendered (a frame's body bytes are whole chunks; the last one's trailers
 * into tr, *last set): their data into b. */
static int edit_dechunk(const uint8_t *p, const uint8_t *e, uint8_t **b, size_t *bl, size_t *bc,
                        struct px_h2_fields *tr, bool *last)
{
    while (p < e) {
        const uint8_t *l;
        size_t ll, n = 0, i;
        int rc;

        if (!edit_line(&p, e, &l, &ll))
            return -EINVAL;
        for (i = 0; i < ll && i < 15 && l[i] != ';'; i++) {
            uint8_t ch = l[i];
            unsigned d = ch >= '0' && ch <= '9'   ? (unsigned)(ch - '0')
                         : ch >= 'a' && ch <= 'f' ? (unsigned)(ch - 'a' + 10)
                         : ch >= 'A' && ch <= 'F' ? (unsigned)(ch - 'A' + 10)
                                                  : 16u;

            if (d == 16)
                return -EINVAL;
            n = n * 16 + d;
        }
        if (i == 0 || (i < ll && l[i] != ';'))
            return -EINVAL;
        if (n == 0) {
            *last = true;
            return p < e ? edit_lines(&p, e, tr) : 0;
        }
        if ((size_t)(e - p) < n + 2 || p[n] != '\r' || p[n + 1] != '\n')
            return -EINVAL;
        if ((rc = buf_add(b, bl, bc, p, n, SIZE_MAX / 2)) != 0)
            return rc;
        p += n + 2;
    }
    return 0;
}

/* The file edited side's frame seq: its bytes (data, len) take the place of the parts it
 * carried (st->ah[side] with that seq): a head becomes the header block it says, body bytes
 * one chunk of what it says (the chunked framing undone where the rendering had it), the last
 * chunk's trailer section the trailers. 0, or -errno: the edit is not HTTP/1.1 that fits the
 * parts it replaces (nothing changed). */
static int sw_edit(struct px_conn *c, struct px_h2_stream *st, int side, uint32_t seq,
                   const uint8_t *data, size_t len)
{
    struct px_h2 *h = c->h2;
    int to = 1 - side;
    const uint8_t *p = data, *e = data + len;
    struct px_h2_act *a, *an, *head = NULL, *end = NULL, *nb = NULL, *list = NULL, *tail = NULL;
    struct px_h2_fields nf = {0}, tr = {0};
    uint8_t *b = NULL;
    size_t bl = 0, bc = 0;
    bool chunked = false, last = false;
    int rc = 0;

    for (a = st->ah[side]; a != NULL && a->seq == seq; a = a->next) {
        if (a->head && head != NULL)
            return -ENOTSUP; /* an interim answer and the final one: which head is which */
        if (a->head)
            head = a;
        else if (a->k == NULL)
            end = a;
        chunked |= a->chunked;
    }
    if (head != NULL && head->kind != PX_H2_TRAILERS)
        rc = edit_head(&p, e, head->kind, &head->f, &nf);
    if (rc == 0 && chunked)
        rc = edit_dechunk(p, e, &b, &bl, &bc, &tr, &last);
    else if (rc == 0 && p < e)
        rc = buf_add(&b, &bl, &bc, p, (size_t)(e - p), SIZE_MAX / 2);
    if (rc == 0 && bl > 0) {
        if ((nb = calloc(1, sizeof(*nb))) == NULL || (nb->k = malloc(sizeof(*nb->k) + bl)) == NULL)
            rc = -ENOMEM;
    }
    if (rc != 0) {
        if (nb != NULL)
            free(nb);
        fields_free(&nf);
        fields_free(&tr);
        free(b);
        return rc;
    }
    if (nb != NULL) {
        nb->seq = seq;
        nb->k->next = NULL;
        nb->k->len = bl;
        nb->k->off = 0;
        memcpy(nb->k->data, b, bl);
        h->queued[to] += bl;
    }
    free(b);
    if (head != NULL) {
        fields_free(&head->f);
        head->f = nf;
        /* a body the edit gave a head that ended the stream: the body ends it now */
        if (nb != NULL && head->end)
            head->end = false;
    }
    /* the frame's parts again: the head, the new body, the end; the parts after them */
    for (a = st->ah[side]; a != NULL && a->seq == seq; a = an) {
        an = a->next;
        if (a->k != NULL) {
            h->queued[to] -= a->k->len;
            free(a->k);
            free(a);
        }
    }
    {
        struct px_h2_act *const parts[3] = {head, nb, end};

        for (int i = 0; i < 3; i++) {
            if (parts[i] == NULL)
                continue;
            if (tail != NULL)
                tail->next = parts[i];
            else
                list = parts[i];
            tail = parts[i];
        }
    }
    if (tail != NULL) {
        tail->next = a; /* the first part of a later frame, or none */
        st->ah[side] = list;
        if (a == NULL)
            st->at[side] = tail;
    } else {
        st->ah[side] = a;
        if (a == NULL)
            st->at[side] = NULL;
    }
    if (last && end != NULL) {
        fields_free(&st->tr[to]);
        st->tr[to] = tr;
        st->has_tr[to] = tr.n > 0;
    } else
        fields_free(&tr);
    st->edited[side] = true;
    return 0;
}

/* The verdict on side's frame in flight. */
static void sw_verdict(struct px_conn *c, struct px_h2_stream *st, int side, uint8_t code,
                       const char *fn, const uint8_t *data, size_t len)
{
    struct px_thread *t = c->t;
    uint32_t seq = st->sw_seq[side];

    st->sw_seq[side] = 0;
    if (code == FGX_SW_EDIT) {
        static __thread unsigned long long last_log;
        int rc = sw_edit(c, st, side, seq, data, len);

        if (rc == 0)
            code = FGX_SW_ACCEPT;
        else {
            /* the service's fail policy, as for a function's exception */
            fgx_log_ratelimited(&last_log, FGX_LOG_WARN,
                                "service %u: h2#%d: %s edited the %s into what is not the "
                                "HTTP/1.1 of its parts (%s): fail-%s verdict",
                                c->service_id, st->id[0], fn, side == 0 ? "request" : "response",
                                rc == -ENOMEM    ? "no memory"
                                : rc == -ENOTSUP ? "two heads in one chunk"
                                                 : "a line or chunk that does not parse",
                                px_script_fail_open(c) ? "open" : "closed");
            code = FGX_SW_ERROR;
        }
    }
    if (code == FGX_SW_ERROR || code == FGX_SW_TIMEOUT) {
        PX_CTR_ADD(code == FGX_SW_TIMEOUT ? &t->ctr.script_timeouts : &t->ctr.script_errors, 1);
        code = px_script_fail_open(c) ? FGX_SW_ACCEPT : FGX_SW_REJECT;
    } else if (code == FGX_SW_REJECT || code == FGX_SW_DROP) {
        t->scan_stream = (uint32_t)st->id[0];
        px_match_event_script(c, side,
                              code == FGX_SW_REJECT ? FGX_DP_SCRIPT_REJECT : FGX_DP_SCRIPT_DROP, fn,
                              st->sw_sent[side], st->sw_sent_len[side]);
        t->scan_stream = 0;
    }
    st->sw_sent_len[side] = 0;
    if (code == FGX_SW_REJECT || code == FGX_SW_DROP) {
        PX_CTR_ADD(&px_stats_svc(&t->ctr, c->service_id)->script_blocked, 1);
        if (code == FGX_SW_REJECT) {
            stream_block(c, st);
            return;
        }
        /* DROP: nothing more of the stream goes anywhere, and the client is told nothing (as
         * a dropped connection's peers are not); the service's half is reset */
        st->blocked = true;
        for (int d = 0; d < 2; d++)
            queue_drop(c->h2, st, d);
        if (c->h2->h1 != NULL)
            h1_drop(c, st);
        else if (st->id[1] > 0 && !st->closed[1])
            (void)nghttp2_submit_rst_stream(c->h2->sess[1], NGHTTP2_FLAG_NONE, st->id[1],
                                            NGHTTP2_CANCEL);
        return;
    }
    sw_pass(c, st, side, seq);
    sw_kick(c, st, side);
}

static void on_sw_timer(evutil_socket_t fd, short what, void *arg)
{
    static __thread unsigned long long last_log;
    struct px_h2_stream *st = arg;
    struct px_conn *c = st->c;

    (void)fd;
    (void)what;
    /* scriptworker did not answer at all (down, restarting): as an error */
    fgx_log_ratelimited(&last_log, FGX_LOG_WARN,
                        "script: no verdict from scriptworker in time for h2#%d: fail-%s verdict",
                        st->id[0], px_script_fail_open(c) ? "open" : "closed");
    for (int d = 0; d < 2; d++)
        if (st->sw_seq[d] != 0 && !st->blocked)
            sw_verdict(c, st, d, FGX_SW_ERROR, "", NULL, 0);
    (void)px_h2_flush(c);
}

void px_h2_script_verdict(struct px_conn *c, uint64_t sw_id, uint32_t seq, uint8_t code,
                          const char *fn, const uint8_t *data, size_t len)
{
    struct px_h2_stream *st;
    int side;

    for (st = c->h2->streams; st != NULL && st->sw_id != sw_id; st = st->next)
        ;
    if (st == NULL || st->blocked)
        return; /* closed meanwhile */
    side = st->sw_seq[0] == seq ? 0 : st->sw_seq[1] == seq ? 1 : -1;
    if (side < 0)
        return; /* its timer already decided */
    sw_verdict(c, st, side, code, fn, data, len);
    if (st->sw_timer != NULL && st->sw_seq[0] == 0 && st->sw_seq[1] == 0)
        evtimer_del(st->sw_timer);
    (void)px_h2_flush(c);
}

/* A header block of side's is complete: scanned, then passed on to the other session (with a
 * filter file: once it judged the block too). */
static int headers_done(struct px_conn *c, struct px_h2_stream *st, int side, bool end)
{
    struct px_h2_fields *fl = &st->hf[side];
    struct px_h2_hdr *hd;
    nghttp2_nv *nv;
    enum px_h2_kind kind = side == 0 ? (fields_has(fl, ":method") ? PX_H2_REQUEST : PX_H2_TRAILERS)
                                     : (fields_has(fl, ":status") ? PX_H2_RESPONSE : PX_H2_TRAILERS);
    int rc;

    if (fields_arrays(fl, &nv, &hd) != 0)
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    /* a gRPC side's trailers (grpc-status, grpc-message) are scanned on their own as well */
    if (st->grpc_on[side])
        (void)fgx_reasm_start(c->t->reasm, &st->dir[side], 0);
    rc = scan_head(c, st, side, kind, hd, fl->n);
    if (rc == -EIO) {
        rc = NGHTTP2_ERR_CALLBACK_FAILURE;
        goto out;
    }
    rc = 0;
    if (st->blocked)
        goto out;
    if (kind != PX_H2_TRAILERS && !st->grpc_on[side])
        grpc_detect(st, side, fl);
    if (kind == PX_H2_TRAILERS) {
        /* sent after the body that precedes them (on_read_data()); a filter file sees them
         * as the chunked rendering's trailer section (sw_end()) */
        fields_free(&st->tr[1 - side]);
        st->tr[1 - side] = *fl;
        st->has_tr[1 - side] = true;
        memset(fl, 0, sizeof(*fl));
    } else if (st->scripted) {
        rc = sw_head(c, st, side, kind, fl, hd, end);
    } else {
        rc = head_pass(c, st, side, kind, fl, end);
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
    if (end && st->grpc_on[side] && px_grpc_pending(&st->grpc[side]) > 0) {
        grpc_refuse(c, st, side, -EPIPE);
        return 0;
    }
    if (end)
        sw_end(c, st, side);
    if (end && st->id[1 - side] > 0 && c->h2->sess[1 - side] != NULL)
        (void)nghttp2_session_resume_data(c->h2->sess[1 - side], st->id[1 - side]);
    return 0;
}

/* Body bytes of side's on st, judged: queued toward the other side. 0, or -EIO (the
 * connection goes). */
static int body_queue(struct px_conn *c, struct px_h2_stream *st, int side, const uint8_t *data,
                      size_t len)
{
    struct px_h2 *h = c->h2;
    int to = 1 - side;
    struct px_h2_chunk *k;

    if ((k = malloc(sizeof(*k) + len)) == NULL)
        return -EIO;
    k->next = NULL;
    k->len = len;
    k->off = 0;
    memcpy(k->data, data, len);
    h->queued[to] += len;
    if (st->scripted) {
        /* on its way once the filter file judged it too */
        if (sw_body(c, st, side, k) != 0)
            return -EIO;
    } else {
        if (st->qt[to] != NULL)
            st->qt[to]->next = k;
        else
            st->qh[to] = k;
        st->qt[to] = k;
    }
    if (h->queued[to] > PX_H2_QUEUE_MAX && side == 0 && h1_needs_client(h)) {
        /* The request being written needs more of the client's body: not reading the client
         * would stall it. A stream waiting its turn that brings more is refused instead (the
         * client may send it again), which bounds what waits. */
        if (st != h->h1->qh) {
            (void)nghttp2_submit_rst_stream(h->sess[0], NGHTTP2_FLAG_NONE, st->id[0],
                                            NGHTTP2_REFUSED_STREAM);
            st->blocked = true;
            h1_drop(c, st);
            queue_drop(h, st, 1);
        }
    } else if (h->queued[to] > PX_H2_QUEUE_MAX && !h->paused[side]) {
        h->paused[side] = true;
        event_del(c->s[side].rev);
        /* heads held for their bodies would wait for bytes that are not read now */
        for (struct px_h2_stream *x = h->streams, *xn; x != NULL; x = xn) {
            xn = x->next;
            if (x->hh[side] != NULL && x->ah[side] == NULL && !x->blocked)
                head_release(c, x, side);
        }
    }
    if (!st->scripted && st->id[to] > 0 && h->sess[to] != NULL)
        (void)nghttp2_session_resume_data(h->sess[to], st->id[to]);
    return 0;
}

/* The same on a gRPC side: the bytes wait until their message is complete; each message that
 * completes is scanned, and what passed goes on. */
static int grpc_in(struct px_conn *c, struct px_h2_stream *st, int side, const uint8_t *data,
                   size_t len)
{
    struct px_h2 *h = c->h2;
    struct px_grpc *g = &st->grpc[side];
    struct grpc_scan a = {c, st, side};
    size_t before = g->len;
    int rc = px_grpc_feed(g, data, len, grpc_msg, &a);

    if (rc == 0 && g->ready > 0)
        rc = body_queue(c, st, side, g->buf, g->ready);
    px_grpc_consume(g);
    h->grpc_held += g->len;
    h->grpc_held -= before;
    if (st->blocked) {
        /* matched (an event), or refused on its way */
        h->grpc_held -= g->len;
        px_grpc_release(g);
        return 0;
    }
    if (rc == -EIO)
        return -EIO;
    if (rc == 0 && h->grpc_held > PX_H2_GRPC_HELD)
        rc = -ENOBUFS;
    if (rc != 0)
        grpc_refuse(c, st, side, rc);
    return 0;
}

/* Body bytes of side's on st: scanned, then queued toward the other side. 0, or -EIO (the
 * connection goes). */
static int body_in(struct px_conn *c, struct px_h2_stream *st, int side, const uint8_t *data,
                   size_t len)
{
    int rc;

    if (st->grpc_on[side])
        return grpc_in(c, st, side, data, len);
    rc = stream_scan(c, st, side, data, len);
    if (rc == -EACCES)
        return 0;
    if (rc != 0)
        return -EIO;
    return body_queue(c, st, side, data, len);
}

static int on_data_chunk(nghttp2_session *s, uint8_t flags, int32_t sid, const uint8_t *data,
                         size_t len, void *ud)
{
    struct px_conn *c = ud;
    struct px_h2_stream *st = nghttp2_session_get_stream_user_data(s, sid);

    (void)flags;
    if (st == NULL || st->blocked)
        return 0;
    return body_in(c, st, side_of(c, s), data, len) != 0 ? NGHTTP2_ERR_CALLBACK_FAILURE : 0;
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
    if (c->h2->h1 != NULL)
        h1_drop(c, st);
    else if (!st->blocked && st->id[o] > 0 && !st->closed[o] && (err != 0 || side == 0))
        (void)nghttp2_submit_rst_stream(c->h2->sess[o], NGHTTP2_FLAG_NONE, st->id[o],
                                        err != 0 ? err : NGHTTP2_CANCEL);
    stream_maybe_free(c, st);
    return 0;
}

/* ---- toward an HTTP/1.1 service (c->h1up) ---- */

static int buf_add(uint8_t **b, size_t *len, size_t *cap, const void *p, size_t n, size_t max)
{
    if (*len + n > max)
        return -E2BIG;
    if (*len + n > *cap) {
        size_t nc = *cap ? *cap : 256;
        uint8_t *a;

        while (nc < *len + n)
            nc *= 2;
        if ((a = realloc(*b, nc)) == NULL)
            return -ENOMEM;
        *b = a;
        *cap = nc;
    }
    if (n > 0)
        memcpy(*b + *len, p, n);
    *len += n;
    return 0;
}

static int out_add(struct px_h1up *u, const void *p, size_t n)
{
    return buf_add(&u->out, &u->out_len, &u->out_cap, p, n, SIZE_MAX / 2);
}

static void h1_unlink(struct px_h1up *u, struct px_h2_stream *st)
{
    struct px_h2_stream **pp = &u->qh, *prev = NULL;

    while (*pp != NULL && *pp != st) {
        prev = *pp;
        pp = &(*pp)->h1next;
    }
    if (*pp == NULL)
        return;
    if (st == u->qh)
        u->head_sent = u->req_done = false;
    *pp = st->h1next;
    if (u->qt == st)
        u->qt = prev;
    st->h1next = NULL;
    st->h1q = false;
}

/* st will not be answered to its client (blocked, reset, or its stream closed). Not yet
 * written: it leaves the line. Written: its answer is still read, and dropped, so that the
 * connection stays in step; written halfway (a request body cut): the connection is unusable. */
static void h1_drop(struct px_conn *c, struct px_h2_stream *st)
{
    struct px_h1up *u = c->h2->h1;

    if (!st->h1q)
        return;
    if (st != u->qh || !u->head_sent) {
        h1_unlink(u, st);
        st->closed[1] = true;
        return;
    }
    st->blocked = true;
    queue_drop(c->h2, st, 1);
    if (!u->req_done)
        u->dead = true;
}

/* Hop-by-hop fields (RFC 9110 7.6.1) and those HTTP/1.1 frames itself: not passed on. */
static bool hop_by_hop(const uint8_t *n, size_t nl)
{
    static const char *const names[] = {"connection", "keep-alive", "proxy-connection",
                                        "transfer-encoding", "upgrade", "te", "host"};

    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (strlen(names[i]) == nl && memcmp(names[i], n, nl) == 0)
            return true;
    return false;
}

/* st's request (its header block fl, which ended the stream if end) as the HTTP/1.1 head to
 * write, into the line. 0, or -errno (the stream is refused). */
static int h1_request(struct px_conn *c, struct px_h2_stream *st, const struct px_h2_fields *fl,
                      bool end)
{
    struct px_h1up *u = c->h2->h1;
    struct px_h2_hdr *h = malloc((fl->n ? fl->n : 1) * sizeof(*h));
    size_t n = 0, len;
    bool has_cl = false, has_auth = fields_has(fl, ":authority");
    static const char te[] = "Transfer-Encoding: chunked\r\n\r\n";

    if (u->dead || h == NULL) {
        free(h);
        return -EPIPE;
    }
    for (size_t i = 0; i < fl->n; i++) {
        const uint8_t *nm = fl->arena + fl->f[i].no;
        size_t nl = fl->f[i].nl;

        /* Host: from :authority when there is one (RFC 9113 8.3.1), else the client's own */
        if (hop_by_hop(nm, nl) && !(nl == 4 && !has_auth))
            continue;
        if (nl == 14 && memcmp(nm, "content-length", 14) == 0)
            has_cl = true;
        if (nl == 7 && memcmp(nm, ":method", 7) == 0) {
            const uint8_t *v = fl->arena + fl->f[i].vo;

            st->h1head = fl->f[i].vl == 4 && memcmp(v, "HEAD", 4) == 0;
            st->h1again = end && (st->h1head || (fl->f[i].vl == 3 && memcmp(v, "GET", 3) == 0));
        }
        h[n++] = (struct px_h2_hdr){nm, fl->arena + fl->f[i].vo, nl, fl->f[i].vl};
    }
    /* No length and a body to come: chunked, as an HTTP/1.1 client without one sends it. */
    st->h1chunked = !end && !has_cl;
    len = px_h2_render_head(PX_H2_REQUEST, h, n, NULL, 0);
    st->h1req = malloc(len + sizeof(te));
    if (st->h1req == NULL) {
        free(h);
        return -ENOMEM;
    }
    (void)px_h2_render_head(PX_H2_REQUEST, h, n, st->h1req, len);
    free(h);
    if (st->h1chunked) {
        memcpy(st->h1req + len - 2, te, sizeof(te) - 1);
        len += sizeof(te) - 1 - 2;
    }
    st->h1req_len = len;
    st->id[1] = 1; /* it has a service side: freed once that is over too (closed[1]) */
    st->h1q = true;
    if (u->qt != NULL)
        u->qt->h1next = st;
    else
        u->qh = st;
    u->qt = st;
    return 0;
}

/* The request being written waits for more of its body from the client. */
static bool h1_needs_client(const struct px_h2 *h)
{
    const struct px_h2_stream *st = h->h1 != NULL ? h->h1->qh : NULL;

    return st != NULL && !h->h1->req_done && st->qh[1] == NULL && !st->eof[0];
}

/* Frames what the request at the head of the line has to send next into u->out. */
static void h1_pump(struct px_conn *c)
{
    struct px_h2 *h = c->h2;
    struct px_h1up *u = h->h1;
    struct px_h2_stream *st = u->qh;
    char sz[24];

    if (st == NULL || u->dead || u->req_done)
        return;
    if (!u->head_sent) {
        if (out_add(u, st->h1req, st->h1req_len) != 0) {
            u->dead = true;
            return;
        }
        /* kept while it may be sent again (h1_down()) */
        if (!st->h1again) {
            free(st->h1req);
            st->h1req = NULL;
        }
        u->head_sent = true;
        u->answering = false;
    }
    while (st->qh[1] != NULL && u->out_len < PX_H1_PUMP) {
        struct px_h2_chunk *k = st->qh[1];
        size_t n = k->len - k->off;
        int l = snprintf(sz, sizeof(sz), "%zx\r\n", n);

        if ((st->h1chunked && out_add(u, sz, (size_t)l) != 0) ||
            out_add(u, k->data + k->off, n) != 0 ||
            (st->h1chunked && out_add(u, "\r\n", 2) != 0)) {
            u->dead = true;
            return;
        }
        st->qh[1] = k->next;
        if (st->qh[1] == NULL)
            st->qt[1] = NULL;
        h->queued[1] -= n;
        free(k);
    }
    resume_from(c, 1);
    /* what waits behind it must not keep the client unread while it needs the client */
    if (h->paused[0] && h1_needs_client(h)) {
        h->paused[0] = false;
        event_add(c->s[0].rev, NULL);
        if (c->tls != NULL && px_tls_side(c, 0))
            event_active(c->s[0].rev, EV_READ, 0);
    }
    if (st->qh[1] != NULL || !side_done(st, 0))
        return;
    if (st->h1chunked) {
        int rc = out_add(u, "0\r\n", 3);

        /* the client's trailers, as a chunked body's trailer section */
        for (size_t i = 0; rc == 0 && st->has_tr[1] && i < st->tr[1].n; i++) {
            const struct px_h2_field *f = &st->tr[1].f[i];

            rc = out_add(u, st->tr[1].arena + f->no, f->nl);
            if (rc == 0)
                rc = out_add(u, ": ", 2);
            if (rc == 0)
                rc = out_add(u, st->tr[1].arena + f->vo, f->vl);
            if (rc == 0)
                rc = out_add(u, "\r\n", 2);
        }
        if (rc != 0 || out_add(u, "\r\n", 2) != 0) {
            u->dead = true;
            return;
        }
    }
    u->req_done = true;
}

/* The connection to the service is over or unusable: the streams not answered are refused (or
 * reset, one answered halfway) and the client is told no more (GOAWAY); what was answered is
 * still sent, then the connection ends (px_h2_flush()). */
/* The same, when a new connection can take the next requests (plaintext to the service, not
 * too many new ones in a row): the one written or answered is reset if it was not answered
 * whole (it may have had its effect: never sent twice), the others wait for the new one. */
static void h1_down(struct px_conn *c)
{
    struct px_h2 *h = c->h2;
    struct px_h1up *u = h->h1;
    struct px_h2_stream *st = u->qh;

    /* A GET or HEAD the service closed on before a byte of answer (a keep-alive connection it
     * closed meanwhile, as servers do when idle) is sent again on the new connection. */
    if (st != NULL && u->head_sent && !u->answering && st->h1again && !st->blocked &&
        st->h1req != NULL)
        u->head_sent = u->req_done = false;
    if (st != NULL && u->head_sent) {
        if (!st->blocked && !st->closed[0])
            (void)nghttp2_submit_rst_stream(h->sess[0], NGHTTP2_FLAG_NONE, st->id[0],
                                            NGHTTP2_INTERNAL_ERROR);
        h1_unlink(u, st);
        st->closed[1] = true;
        queue_drop(h, st, 0);
        stream_maybe_free(c, st);
    }
    http_parser_init(&u->p, HTTP_RESPONSE);
    u->p.data = c;
    u->head_sent = u->req_done = u->dead = false;
    u->out_len = 0;
    u->down = true;
    event_del(c->s[1].rev);
}

static void h1_end(struct px_conn *c, const char *why)
{
    static __thread unsigned long long last_log;
    struct px_h2 *h = c->h2;
    struct px_h1up *u = h->h1;
    bool lost = false;

    if (u->ended)
        return;
    if (!(c->tls != NULL && px_tls_side(c, 1)) && u->reopens < PX_H1_REOPENS) {
        h1_down(c);
        return;
    }
    u->ended = u->dead = true;
    while (u->qh != NULL) {
        struct px_h2_stream *st = u->qh;

        if (!st->blocked && !st->closed[0]) {
            (void)nghttp2_submit_rst_stream(h->sess[0], NGHTTP2_FLAG_NONE, st->id[0],
                                            u->head_sent ? NGHTTP2_INTERNAL_ERROR
                                                         : NGHTTP2_REFUSED_STREAM);
            lost = true;
        }
        h1_unlink(u, st);
        st->closed[1] = true;
        queue_drop(h, st, 0);
        stream_maybe_free(c, st);
    }
    (void)nghttp2_submit_goaway(h->sess[0], NGHTTP2_FLAG_NONE,
                                nghttp2_session_get_last_proc_stream_id(h->sess[0]),
                                NGHTTP2_NO_ERROR, NULL, 0);
    event_del(c->s[1].rev);
    if (lost)
        fgx_log_ratelimited(&last_log, FGX_LOG_INFO,
                            "service %u: its HTTP/1.1 connection %s: the client's streams not "
                            "answered are refused",
                            c->service_id, why);
}

static struct px_h2_stream *h1_cur(http_parser *p)
{
    struct px_conn *c = p->data;

    return c->h2->h1->qh;
}

/* The header field that arrived (name and value complete) onto st's block. */
static int h1_field_done(struct px_conn *c, struct px_h2_stream *st)
{
    struct px_h1up *u = c->h2->h1;
    int rc = 0;

    if (u->hnl == 0)
        return 0;
    for (size_t i = 0; i < u->hnl; i++)
        if (u->hn[i] >= 'A' && u->hn[i] <= 'Z')
            u->hn[i] = (uint8_t)(u->hn[i] - 'A' + 'a');
    while (u->hvl > 0 && (u->hv[u->hvl - 1] == ' ' || u->hv[u->hvl - 1] == '\t'))
        u->hvl--;
    if (!hop_by_hop(u->hn, u->hnl) || (u->hnl == 4 && memcmp(u->hn, "host", 4) == 0))
        rc = fields_add(&st->hf[1], u->hn, u->hnl, u->hv != NULL ? u->hv : (const uint8_t *)"",
                        u->hvl);
    u->hnl = u->hvl = 0;
    u->in_value = false;
    return rc;
}

static int h1_on_begin(http_parser *p)
{
    struct px_conn *c = p->data;
    struct px_h1up *u = c->h2->h1;
    struct px_h2_stream *st = h1_cur(p);

    /* an answer to no request written: the service is out of step */
    if (st == NULL || !u->head_sent)
        return -1;
    u->answering = true;
    st->hf[1].used = st->hf[1].n = 0;
    u->hnl = u->hvl = 0;
    u->in_value = u->in_trailers = false;
    return 0;
}

static int h1_on_field(http_parser *p, const char *at, size_t len)
{
    struct px_conn *c = p->data;
    struct px_h1up *u = c->h2->h1;

    if (u->in_value && h1_field_done(c, h1_cur(p)) != 0)
        return -1;
    return buf_add(&u->hn, &u->hnl, &u->hncap, at, len, PX_H2_HDR_MAX) != 0 ? -1 : 0;
}

static int h1_on_value(http_parser *p, const char *at, size_t len)
{
    struct px_conn *c = p->data;
    struct px_h1up *u = c->h2->h1;

    u->in_value = true;
    return buf_add(&u->hv, &u->hvl, &u->hvcap, at, len, PX_H2_HDR_MAX) != 0 ? -1 : 0;
}

static int h1_on_headers(http_parser *p)
{
    struct px_conn *c = p->data;
    struct px_h1up *u = c->h2->h1;
    struct px_h2_stream *st = h1_cur(p);
    struct px_h2_fields fl = {0};
    char status[8];
    int n = snprintf(status, sizeof(status), "%u", p->status_code % 1000);

    if (h1_field_done(c, st) != 0)
        return -1;
    u->in_trailers = true;
    if (p->status_code == 101)
        return -1; /* an upgrade no HTTP/2 request asked for */
    if (st->blocked)
        return st->h1head ? 1 : 0;
    /* :status first, as HTTP/2 wants pseudo-fields */
    if (fields_add(&fl, (const uint8_t *)":status", 7, (const uint8_t *)status, (size_t)n) != 0)
        return -1;
    for (size_t i = 0; i < st->hf[1].n; i++) {
        const struct px_h2_field *f = &st->hf[1].f[i];

        if (fields_add(&fl, st->hf[1].arena + f->no, f->nl, st->hf[1].arena + f->vo, f->vl) !=
            0) {
            fields_free(&fl);
            return -1;
        }
    }
    fields_free(&st->hf[1]);
    st->hf[1] = fl;
    if (headers_done(c, st, 1, false) != 0)
        return -1;
    st->hf[1].used = st->hf[1].n = 0; /* from here: trailers */
    return st->h1head ? 1 : 0;
}

static int h1_on_body(http_parser *p, const char *at, size_t len)
{
    struct px_conn *c = p->data;
    struct px_h2_stream *st = h1_cur(p);

    if (st->blocked)
        return 0;
    return body_in(c, st, 1, (const uint8_t *)at, len) != 0 ? -1 : 0;
}

static int h1_on_complete(http_parser *p)
{
    struct px_conn *c = p->data;
    struct px_h2 *h = c->h2;
    struct px_h1up *u = h->h1;
    struct px_h2_stream *st = h1_cur(p);

    if (h1_field_done(c, st) != 0)
        return -1;
    /* an interim answer (100 Continue, 103): passed on by headers_done(); the real one follows */
    if (p->status_code / 100 == 1)
        return 0;
    if (!st->blocked && st->hf[1].n > 0 && headers_done(c, st, 1, true) != 0)
        return -1;
    if (!st->blocked && st->grpc_on[1] && px_grpc_pending(&st->grpc[1]) > 0)
        grpc_refuse(c, st, 1, -EPIPE);
    if (!st->blocked) {
        st->eof[1] = true;
        sw_end(c, st, 1);
        if (!st->closed[0])
            (void)nghttp2_session_resume_data(h->sess[0], st->id[0]);
    }
    /* Answered: the next request may go (unless the service said it closes). */
    u->reopens = 0;
    if (!http_should_keep_alive(p))
        u->dead = true;
    h1_unlink(u, st);
    st->closed[1] = true;
    stream_maybe_free(c, st);
    return 0;
}

static const http_parser_settings h1_settings = {
    .on_message_begin = h1_on_begin,
    .on_header_field = h1_on_field,
    .on_header_value = h1_on_value,
    .on_headers_complete = h1_on_headers,
    .on_body = h1_on_body,
    .on_message_complete = h1_on_complete,
};

static int h1_start(struct px_conn *c)
{
    struct px_h1up *u = calloc(1, sizeof(*u));

    if (u == NULL)
        return -ENOMEM;
    http_parser_init(&u->p, HTTP_RESPONSE);
    u->p.data = c;
    c->h2->h1 = u;
    return 0;
}

static void h1_free(struct px_h1up *u)
{
    if (u == NULL)
        return;
    free(u->hn);
    free(u->hv);
    free(u->out);
    free(u);
}

/* The service's bytes: parsed. false: they were not HTTP/1.1 answers (the connection goes). */
static bool h1_recv(struct px_conn *c, const uint8_t *buf, size_t n)
{
    static __thread unsigned long long last_log;
    struct px_h1up *u = c->h2->h1;
    size_t got;

    if (u->ended)
        return true;
    got = http_parser_execute(&u->p, &h1_settings, (const char *)buf, n);
    if (HTTP_PARSER_ERRNO(&u->p) == HPE_OK && got == n)
        return true;
    fgx_log_ratelimited(&last_log, FGX_LOG_INFO,
                        "service %u: HTTP/1.1 from the service: %s (connection reset)",
                        c->service_id, http_errno_description(HTTP_PARSER_ERRNO(&u->p)));
    return false;
}

/* ---- the connection ---- */

static int h2_start(struct px_conn *c)
{
    struct px_h2 *h = c->h2;
    nghttp2_session_callbacks *cb;
    nghttp2_settings_entry srv[] = {{NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, PX_H2_STREAMS},
                                    {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, PX_H2_WINDOW}};
    nghttp2_settings_entry cli[] = {{NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
                                    {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, PX_H2_WINDOW}};
    int rc = -ENOMEM;

    if (nghttp2_session_callbacks_new(&cb) != 0)
        return -ENOMEM;
    nghttp2_session_callbacks_set_on_begin_headers_callback(cb, on_begin_headers);
    nghttp2_session_callbacks_set_on_header_callback(cb, on_header);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cb, on_frame_recv);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, on_data_chunk);
    nghttp2_session_callbacks_set_on_stream_close_callback(cb, on_stream_close);
    if (nghttp2_session_server_new(&h->sess[0], cb, c) != 0 ||
        (c->h1up ? h1_start(c) != 0 : nghttp2_session_client_new(&h->sess[1], cb, c) != 0))
        goto out;
    for (int d = 0; d < 2; d++)
        if (h->sess[d] != NULL &&
            (nghttp2_submit_settings(h->sess[d], NGHTTP2_FLAG_NONE, d == 0 ? srv : cli, 2) != 0 ||
             nghttp2_session_set_local_window_size(h->sess[d], NGHTTP2_FLAG_NONE, 0,
                                                   PX_H2_CONN_WINDOW) != 0))
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
    h1_free(h->h1);
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

/* Toward an HTTP/1.1 service: the requests' bytes, as the socket takes them. false: c closed. */
static bool h1_flush(struct px_conn *c)
{
    struct px_h1up *u = c->h2->h1;
    struct px_side *s = &c->s[1];

    if (u->dead && !u->ended)
        h1_end(c, "is closing");
    /* a request waits and the connection closed: a new one */
    if (u->down && u->qh != NULL && !u->ended) {
        u->down = false;
        u->reopens++;
        if (px_relay_reopen(c) != 0) {
            u->reopens = PX_H1_REOPENS;
            h1_end(c, "could not be opened again");
        }
    }
    while (s->pend == NULL && !u->ended && !u->down && c->connected) {
        ssize_t w;

        h1_pump(c);
        if (u->out_len == 0)
            break;
        w = side_send(c, 1, u->out, u->out_len);
        if (w < 0) {
            h1_end(c, "failed");
            break;
        }
        if ((size_t)w < u->out_len) {
            /* the rest waits in pend, written when the side is writable (px_relay.c) */
            s->pend = malloc(u->out_len - (size_t)w);
            if (s->pend == NULL) {
                px_relay_close(c, true);
                return false;
            }
            memcpy(s->pend, u->out + w, u->out_len - (size_t)w);
            s->pend_off = 0;
            s->pend_len = u->out_len - (size_t)w;
            event_add(s->wev, NULL);
        }
        u->out_len = 0;
    }
    if (u->dead && !u->ended)
        h1_end(c, u->qh != NULL && u->head_sent && !u->req_done
                      ? "is unusable (a request cut short)"
                      : "is closing");
    return true;
}

bool px_h2_flush(struct px_conn *c)
{
    struct px_h2 *h = c->h2;

    if (h->h1 != NULL && !h1_flush(c))
        return false;
    for (int d = 0; d < 2; d++) {
        struct px_side *s = &c->s[d];

        while (h->sess[d] != NULL && s->pend == NULL) {
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
        if (h->sess[d] != NULL && c->s[d].pend == NULL && !nghttp2_session_want_read(h->sess[d]) &&
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

    if (c->h2on && side == 1 && h->h1 != NULL) {
        if (!h1_recv(c, buf, n)) {
            px_relay_close(c, true);
            return -1;
        }
        return px_h2_flush(c) ? 1 : -1;
    }
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
    if (h2_start(c) != 0) {
        px_relay_close(c, true);
        return -1;
    }
    c->h2on = true;
    hear_service(c);
    return px_h2_read(c, side, buf, len);
}

bool px_h2_upstream_eof(struct px_conn *c)
{
    struct px_h1up *u = c->h2->h1;

    /* an answer that ends with the connection (no length, not chunked) is complete now */
    if (!u->ended && !u->down)
        (void)http_parser_execute(&u->p, &h1_settings, NULL, 0);
    if (!u->down)
        h1_end(c, "was closed by the service");
    return px_h2_flush(c);
}
