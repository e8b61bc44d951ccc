/* controld web stage (ctl_web.h): libmicrohttpd's HTTPS server, with GnuTLS.
 *
 * libmicrohttpd (not nng's HTTP server, nor libwebsockets) because it offers what this needs
 * as plain API: an accept-policy callback run before the TLS handshake (--allow), the client's
 * address on each connection (lockout, history's `who`), the key and certificate from memory
 * (the remote control's PEM), suspending a connection until the control loop's reply arrives
 * and resuming it from another thread, and a callback response that can suspend itself: an
 * idle server-sent-events stream costs no wakeup at all.
 *
 * Threads: MHD's one polling thread runs every handler below; nng's threads complete relayed
 * requests (call_done) and resume their connections; the control loop runs ctl_web_tick(). */
#include "controld/ctl_web.h"

#include <arpa/inet.h>
#include <errno.h>
#include <mbedtls/md.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "control.pb-c.h"
#include "controld/ctl_compile.h"
#include "controld/ctl_fw.h"
#include "controld/ctl_health.h"
#include "controld/ctl_listen.h"
#include "controld/ctl_rpc.h"
#include "controld/ctl_rpc_cmd.h"
#include "controld/ctl_script_rt.h"
#include "controld/ctl_store.h"
#include "controld/ctl_web_conn.h"
#include "controld/ctl_web_files.h"
#include "controld/ctl_webapi.h"
#include "fgx/chan_relay.h"
#include "fgx/log.h"

#define WEB_BODY_MAX (16u << 20) /* an import file or a pcap-sized script at most */
/* A relayed request waits at most this long: a change may compile for --compile-timeout. */
#define WEB_CALL_TIMEOUT_MS ((CTL_COMPILE_TIMEOUT_MAX + 60) * 1000)
#define WEB_CONN_TIMEOUT_S 60 /* an idle keep-alive connection (a live stream is never idle) */
/* A page past a cap of live streams is told why and when to try again (429, 503). */
#define WEB_STREAMS_RETRY_S "30"
#define WEB_STREAM_QUEUE 1024 /* messages a slow page may lag behind before it is cut */
#define WEB_REPLAY 512        /* event messages kept for Last-Event-ID */
#define WEB_EVENTS_BATCH 1000
#define WEB_SLOW_MS 1000 /* stats, history and sessions are looked at this often */
#define WEB_COOKIE "fgex_session"

static const char sec_csp[] = "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'";

/* ---- live messages: built once, shared by every stream ---- */

struct web_msg {
    int refs;
    uint64_t seq; /* an event's seq (replayed for Last-Event-ID); 0: another message */
    size_t len;
    char data[];
};

static struct web_msg *msg_new(uint64_t seq, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static struct web_msg *msg_new(uint64_t seq, const char *fmt, ...)
{
    struct web_msg *m;
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        return NULL;
    m = malloc(sizeof(*m) + (size_t)n + 1);
    if (!m)
        return NULL;
    va_start(ap, fmt);
    vsnprintf(m->data, (size_t)n + 1, fmt, ap);
    va_end(ap);
    m->refs = 1;
    m->seq = seq;
    m->len = (size_t)n;
    return m;
}

static struct web_msg *msg_ref(struct web_msg *m)
{
    __atomic_add_fetch(&m->refs, 1, __ATOMIC_RELAXED);
    return m;
}

static void msg_unref(struct web_msg *m)
{
    if (m && __atomic_sub_fetch(&m->refs, 1, __ATOMIC_ACQ_REL) == 0)
        free(m);
}

/* One open /api/live. Under the server's live lock but for gone (set by MHD's thread when
 * the connection ended; the stream is freed by the next tick). */
struct web_stream {
    struct web_stream *next;
    struct ctl_web *w;
    struct MHD_Connection *conn;
    char token[CTL_AUTH_TOKEN_LEN + 1];
    struct fgx_peer src;
    struct web_msg *q[WEB_STREAM_QUEUE];
    unsigned head, n; /* ring */
    size_t off;       /* of q[head] already sent */
    bool suspended;   /* by the reader, with nothing to send: the next message resumes it */
    bool closing;     /* end the response once the queue is sent */
    int gone;
};

/* ---- one HTTP request ---- */

enum web_kind { K_NONE, K_CMD, K_LOGIN, K_LOGOUT, K_SESSION, K_LIVE };

struct web_req {
    struct ctl_web *w;
    struct MHD_Connection *conn;
    char *body;
    size_t blen;
    bool too_big;
    bool started; /* the relayed call is out: the connection is suspended until it is done */
    int done;     /* set by call_done (atomic) */
    enum web_kind kind;
    const struct ctl_webapi_cmd *cmd;
    struct fgx_peer peer;
    char token[CTL_AUTH_TOKEN_LEN + 1];
    void *req; /* the serialized Request sent */
    size_t reqlen;
    int rv; /* the call's result */
    void *rep;
    size_t replen;
    bool has_last_event_id; /* K_LIVE: Last-Event-ID sent, the last event seen */
    uint64_t last_event_id;
};

struct ctl_web {
    struct MHD_Daemon *httpd;
    struct ctl_web_conns *conns; /* the connections' limits (ctl_web_conn.h) */
    unsigned streams_max;
    uint16_t port;
    struct ctl_auth *auth;
    struct ctl_metrics *metrics;
    struct fgx_chan *relay;
    pthread_mutex_t relay_lock; /* a call starting vs. the relay closing (ctl_web_stop) */
    uint8_t secret[32];         /* the CSRF tokens' key, drawn at each start */
    int stopping;
    int waiting; /* requests suspended on the loop */
    /* live */
    pthread_mutex_t lock;
    struct web_stream *streams;
    int nstreams; /* atomic reads from the loop */
    struct web_msg *replay[WEB_REPLAY];
    unsigned replay_head, replay_n;
    uint64_t last_seq;     /* the newest event sent (under lock: hello) */
    uint64_t health_seq;   /* the loop's own: the newest health log entry sent */
    uint64_t last_history; /* the loop's own */
    uint64_t next_slow_ms; /* the loop's own */
    uint64_t last_sent_ms; /* the loop's own: the last message to every stream */
    void *last_stats;      /* the loop's own: the stats Reply last sent */
    size_t last_stats_len;
    uint64_t script_count; /* the loop's own: ctl_script_rt_log_count() last looked at */
    struct web_script_pos {
        uint32_t service_id;
        uint64_t last; /* the newest entry of its log sent */
    } * script_pos;
    size_t nscript_pos;
    /* The page's own script changes, which the history does not record: set by MHD's thread
     * (under lock), sent by the loop's next tick. */
    bool changed_script;
    /* Firewall changes, which the history does not record either, whoever made them: the
     * loop's own. */
    uint64_t fw_gen;     /* ctl_fw_gen() when the last was announced (or looked at) */
    uint64_t next_fw_ms; /* none announced before: one a second at most */
    bool primed;
    bool watched;        /* the loop's own: a stream was open at the last tick */
    uint64_t first_open; /* unix seconds when a stream opened while none was (under lock) */
};

static uint64_t web_now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Before TLS: a peer outside --allow is closed at once (ctl_auth_admit logs it). */
static enum MHD_Result web_admit(void *cls, const struct sockaddr *addr, socklen_t addrlen)
{
    struct ctl_web *w = cls;
    struct fgx_peer peer;

    (void)addrlen;
    (void)fgx_peer_from_sockaddr(addr, &peer);
    if (peer.family != 4 && peer.family != 6)
        return MHD_NO;
    if (!ctl_auth_admit(&peer, w->auth))
        return MHD_NO;
    return ctl_web_conns_admit(w->conns, &peer) ? MHD_YES : MHD_NO;
}

/* ---- replies ---- */

static void sec_headers(struct MHD_Response *r, bool api)
{
    MHD_add_response_header(r, "Content-Security-Policy", sec_csp);
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(r, "Referrer-Policy", "no-referrer");
    if (api)
        MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
}

/* Queue body (copied) with status; extra: NULL-terminated name/value pairs. api (non-zero: an
 * API reply) is an int, not a bool: va_start after a parameter that undergoes promotion is
 * undefined behaviour. */
static enum MHD_Result respond(struct MHD_Connection *conn, unsigned status, const char *ctype,
                               const void *body, size_t len, int api, ...)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
    enum MHD_Result rv;
    const char *name;
    va_list ap;

    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    sec_headers(r, api);
    va_start(ap, api);
    while ((name = va_arg(ap, const char *)) != NULL) {
        const char *value = va_arg(ap, const char *);

        if (value)
            MHD_add_response_header(r, name, value);
    }
    va_end(ap);
    rv = MHD_queue_response(conn, status, r);
    MHD_destroy_response(r);
    return rv;
}

/* A JSON reply (o is consumed). */
static enum MHD_Result respond_json(struct MHD_Connection *conn, unsigned status, json_t *o,
                                    const char *h1, const char *v1, const char *h2, const char *v2)
{
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    enum MHD_Result rv;

    json_decref(o);
    if (!s)
        return MHD_NO;
    rv = respond(conn, status, "application/json", s, strlen(s), true, h1, v1, h2, v2, NULL);
    free(s);
    return rv;
}

static enum MHD_Result respond_error(struct MHD_Connection *conn, unsigned status, const char *msg,
                                     int exitc)
{
    return respond_json(conn, status,
                        exitc >= 0 ? json_pack("{s:s, s:i}", "error", msg, "exit", exitc)
                                   : json_pack("{s:s}", "error", msg),
                        NULL, NULL, NULL, NULL);
}

/* ---- sessions and CSRF ---- */

/* hex(HMAC-SHA256(secret, token)): what the page must send back in X-CSRF-Token. A forged
 * page cannot read it (no cookie access, no cross-origin reads), and it dies with the session
 * and with controld (a fresh secret at each start). */
static void csrf_of(const struct ctl_web *w, const char *token, char out[65])
{
    static const char hex[] = "0123456789abcdef";
    uint8_t mac[32];

    mbedtls_md_hmac(mbedtls_md_info_from_type(MBEDTLS_MD_SHA256), w->secret, sizeof(w->secret),
                    (const unsigned char *)token, strlen(token), mac);
    for (size_t i = 0; i < 32; i++) {
        out[2 * i] = hex[mac[i] >> 4];
        out[2 * i + 1] = hex[mac[i] & 15];
    }
    out[64] = '\0';
}

static bool ct_streq(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    unsigned char d = la != lb;

    for (size_t i = 0; i < la && i < lb; i++)
        d |= (unsigned char)(a[i] ^ b[i]);
    return d == 0;
}

/* The session cookie's token, when it looks like one (64 hex digits). */
static bool cookie_token(struct MHD_Connection *conn, char out[CTL_AUTH_TOKEN_LEN + 1])
{
    const char *v = MHD_lookup_connection_value(conn, MHD_COOKIE_KIND, WEB_COOKIE);

    if (!v || strlen(v) != CTL_AUTH_TOKEN_LEN ||
        strspn(v, "0123456789abcdef") != CTL_AUTH_TOKEN_LEN)
        return false;
    memcpy(out, v, CTL_AUTH_TOKEN_LEN + 1);
    return true;
}

/* An Origin header, when present, must be this server's own: https://HOST of the request. */
static bool origin_ok(struct MHD_Connection *conn)
{
    const char *origin = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Origin");
    const char *host = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST);

    if (!origin)
        return true;
    if (!host || strncasecmp(origin, "https://", 8) != 0)
        return false;
    return strcasecmp(origin + 8, host) == 0;
}

static json_t *session_json(const struct ctl_web *w, const char *token)
{
    char csrf[65];

    csrf_of(w, token, csrf);
    /* The session lives CTL_AUTH_SESSION_IDLE_MS past its last use: this one. */
    return json_pack("{s:s, s:I}", "csrf", csrf, "expires",
                     (json_int_t)(time(NULL) + CTL_AUTH_SESSION_IDLE_MS / 1000));
}

/* ---- relaying into the control loop ---- */

static void call_done(void *arg, int rv, void *reply, size_t len)
{
    struct web_req *q = arg;
    struct ctl_web *w = q->w;

    q->rv = rv;
    q->rep = reply;
    q->replen = len;
    __atomic_store_n(&q->done, 1, __ATOMIC_RELEASE);
    MHD_resume_connection(q->conn);
    __atomic_sub_fetch(&w->waiting, 1, __ATOMIC_RELEASE);
}

/* Send q->req as the browser's request and suspend the connection until the reply. */
static enum MHD_Result relay(struct web_req *q)
{
    struct ctl_web *w = q->w;
    int rv;

    pthread_mutex_lock(&w->relay_lock);
    if (w->stopping) {
        pthread_mutex_unlock(&w->relay_lock);
        return respond_error(q->conn, MHD_HTTP_SERVICE_UNAVAILABLE, "controld is stopping", 1);
    }
    q->started = true;
    /* Suspended first: the reply may come back before this function returns. */
    MHD_suspend_connection(q->conn);
    __atomic_add_fetch(&w->waiting, 1, __ATOMIC_RELEASE);
    rv = fgx_chan_call_async(w->relay, &q->peer, q->req, q->reqlen, WEB_CALL_TIMEOUT_MS, call_done,
                             q);
    pthread_mutex_unlock(&w->relay_lock);
    if (rv < 0) {
        __atomic_sub_fetch(&w->waiting, 1, __ATOMIC_RELEASE);
        q->rv = rv;
        __atomic_store_n(&q->done, 1, __ATOMIC_RELEASE);
        MHD_resume_connection(q->conn);
    }
    return MHD_YES;
}

static int pack_request(Fgx__Ctl__Request *r, void **out, size_t *len)
{
    *len = fgx__ctl__request__get_packed_size(r);
    *out = malloc(*len ? *len : 1);
    if (!*out)
        return -ENOMEM;
    fgx__ctl__request__pack(r, *out);
    return 0;
}

/* A Request of case c with an Empty body (status, logout). */
static int simple_request(Fgx__Ctl__Request__ReqCase c, const char *token, void **out, size_t *len)
{
    Fgx__Ctl__Request r = FGX__CTL__REQUEST__INIT;
    Fgx__Ctl__Empty e = FGX__CTL__EMPTY__INIT;

    r.token = (char *)token;
    r.req_case = c;
    if (c == FGX__CTL__REQUEST__REQ_STATUS)
        r.status = &e;
    else
        r.logout = &e;
    return pack_request(&r, out, len);
}

/* ---- the live stream ---- */

static bool stream_push(struct web_stream *s, struct web_msg *m)
{
    if (s->closing || __atomic_load_n(&s->gone, __ATOMIC_ACQUIRE))
        return false;
    if (s->n == WEB_STREAM_QUEUE) {
        /* Too far behind: cut it; EventSource reconnects and resumes from Last-Event-ID. */
        s->closing = true;
    } else {
        s->q[(s->head + s->n++) % WEB_STREAM_QUEUE] = msg_ref(m);
    }
    if (s->suspended) {
        s->suspended = false;
        MHD_resume_connection(s->conn);
    }
    return true;
}

/* To every stream (under w->lock); m is consumed. */
static void broadcast(struct ctl_web *w, struct web_msg *m)
{
    if (!m)
        return;
    w->last_sent_ms = web_now_ms();
    for (struct web_stream *s = w->streams; s; s = s->next)
        stream_push(s, m);
    if (m->seq) {
        if (w->replay_n == WEB_REPLAY) {
            msg_unref(w->replay[w->replay_head]);
            w->replay_head = (w->replay_head + 1) % WEB_REPLAY;
            w->replay_n--;
        }
        w->replay[(w->replay_head + w->replay_n++) % WEB_REPLAY] = msg_ref(m);
    }
    msg_unref(m);
}

/* MHD's content reader for /api/live: what is queued, or nothing and the connection suspended
 * until broadcast() queues more (an idle stream costs no wakeup). */
static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    struct web_stream *s = cls;
    struct ctl_web *w = s->w;
    size_t n = 0;

    (void)pos;
    pthread_mutex_lock(&w->lock);
    while (s->n && n < max) {
        struct web_msg *m = s->q[s->head];
        size_t k = m->len - s->off;

        if (k > max - n)
            k = max - n;
        memcpy(buf + n, m->data + s->off, k);
        n += k;
        s->off += k;
        if (s->off == m->len) {
            msg_unref(m);
            s->head = (s->head + 1) % WEB_STREAM_QUEUE;
            s->n--;
            s->off = 0;
        }
    }
    if (n == 0) {
        if (s->closing || __atomic_load_n(&w->stopping, __ATOMIC_ACQUIRE)) {
            pthread_mutex_unlock(&w->lock);
            return MHD_CONTENT_READER_END_OF_STREAM;
        }
        s->suspended = true;
        MHD_suspend_connection(s->conn);
    }
    pthread_mutex_unlock(&w->lock);
    return (ssize_t)n;
}

/* MHD's thread, when the stream's connection ended: the next tick frees it (broadcast() may
 * hold it meanwhile; MHD never ends a suspended connection, so it is not resumed after). */
static void stream_gone(void *cls)
{
    struct web_stream *s = cls;

    __atomic_store_n(&s->gone, 1, __ATOMIC_RELEASE);
}

static void stream_free(struct web_stream *s)
{
    while (s->n) {
        msg_unref(s->q[s->head]);
        s->head = (s->head + 1) % WEB_STREAM_QUEUE;
        s->n--;
    }
    free(s);
}

/* A suspended stream is not read by libmicrohttpd, so a page that closed is seen only at the
 * next message (a keepalive: 25 s); a cap looks at the socket itself. */
static bool stream_dead(const struct web_stream *s)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(s->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    struct pollfd p;

    if (!ci)
        return false;
    p = (struct pollfd){.fd = ci->connect_fd, .events = POLLRDHUP};
    return poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

/* Past a cap of live streams (per session, per address, in all): *rv is the answer, 429 or
 * 503 with why and when to try again; the streams already open are left alone. */
static bool live_refuse(struct web_req *q, enum MHD_Result *rv)
{
    struct ctl_web *w = q->w;
    unsigned session = 0, src = 0, all = 0;
    enum ctl_limit_hit hit = CTL_HIT_N;
    char msg[160];

    pthread_mutex_lock(&w->lock);
    for (struct web_stream *s = w->streams; s; s = s->next) {
        if (s->closing || __atomic_load_n(&s->gone, __ATOMIC_ACQUIRE))
            continue;
        if (stream_dead(s)) {
            /* its page went while it waited: ended now, not counted */
            s->closing = true;
            if (s->suspended) {
                s->suspended = false;
                MHD_resume_connection(s->conn);
            }
            continue;
        }
        all++;
        session += strcmp(s->token, q->token) == 0;
        src += fgx_conn_same_src(&s->src, &q->peer);
    }
    pthread_mutex_unlock(&w->lock);
    if (session >= CTL_WEB_STREAMS_PER_SESSION) {
        hit = CTL_HIT_STREAM_SESSION;
        snprintf(msg, sizeof(msg),
                 "too many live streams for this session (%u open): close a tab of the page",
                 session);
    } else if (src >= CTL_WEB_STREAMS_PER_SRC) {
        hit = CTL_HIT_STREAM_SRC;
        snprintf(msg, sizeof(msg),
                 "too many live streams from this address (%u open): close a tab of the page", src);
    } else if (all >= w->streams_max) {
        hit = CTL_HIT_STREAM_FULL;
        snprintf(msg, sizeof(msg), "the server holds its most live streams (%u)", all);
    }
    if (hit == CTL_HIT_N)
        return false;
    ctl_listen_hit(CTL_LISTENER_WEB, hit, &q->peer, 1);
    *rv = respond_json(q->conn,
                       hit == CTL_HIT_STREAM_FULL ? MHD_HTTP_SERVICE_UNAVAILABLE
                                                  : MHD_HTTP_TOO_MANY_REQUESTS,
                       json_pack("{s:s, s:i, s:i}", "error", msg, "exit", 1, "retry_after",
                                 atoi(WEB_STREAMS_RETRY_S)),
                       "Retry-After", WEB_STREAMS_RETRY_S, NULL, NULL);
    return true;
}

/* The session is good: answer with the stream, its hello and what Last-Event-ID missed. */
static enum MHD_Result live_start(struct web_req *q)
{
    struct ctl_web *w = q->w;
    struct web_stream *s = calloc(1, sizeof(*s));
    struct MHD_Response *r;
    struct web_msg *hello;
    enum MHD_Result rv;

    if (!s)
        return MHD_NO;
    if (live_refuse(q, &rv)) {
        free(s);
        return rv;
    }
    s->w = w;
    s->conn = q->conn;
    s->src = q->peer;
    memcpy(s->token, q->token, sizeof(s->token));
    r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_read, s, stream_gone);
    if (!r) {
        free(s);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    sec_headers(r, true);
    pthread_mutex_lock(&w->lock);
    hello = msg_new(0, "retry: 2000\nevent: hello\ndata: {\"last_seq\":%llu}\n\n",
                    (unsigned long long)w->last_seq);
    if (hello) {
        stream_push(s, hello);
        msg_unref(hello);
    }
    if (q->has_last_event_id)
        for (unsigned i = 0; i < w->replay_n; i++) {
            struct web_msg *m = w->replay[(w->replay_head + i) % WEB_REPLAY];

            if (m->seq > q->last_event_id)
                stream_push(s, m);
        }
    if (!w->streams)
        w->first_open = (uint64_t)time(NULL);
    s->next = w->streams;
    w->streams = s;
    __atomic_add_fetch(&w->nstreams, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&w->lock);
    rv = MHD_queue_response(q->conn, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return rv;
}

/* ---- the handlers ---- */

static enum MHD_Result serve_static(struct MHD_Connection *conn, const char *url,
                                    const char *method)
{
    static const struct {
        const char *ext, *ctype;
    } types[] = {
        {".html", "text/html; charset=utf-8"},
        {".js", "text/javascript; charset=utf-8"},
        {".css", "text/css; charset=utf-8"},
        {".svg", "image/svg+xml"},
        {".json", "application/json"},
        {".png", "image/png"},
        {".ico", "image/x-icon"},
        {".txt", "text/plain; charset=utf-8"},
        {".webmanifest", "application/manifest+json"},
    };
    const char *path = strcmp(url, "/") == 0 ? "/index.html" : url;
    const char *ctype = "application/octet-stream", *dot;

    if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0)
        return respond(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "text/plain", "405 use GET\n", 12, false,
                       "Allow", "GET, HEAD", NULL);
    for (const struct ctl_web_file *f = ctl_web_files; f->path; f++) {
        if (strcmp(f->path, path) != 0)
            continue;
        dot = strrchr(path, '.');
        for (size_t i = 0; dot && i < sizeof(types) / sizeof(types[0]); i++)
            if (strcmp(dot, types[i].ext) == 0)
                ctype = types[i].ctype;
        return respond(conn, MHD_HTTP_OK, ctype, f->data, f->len, false, "Cache-Control",
                       "no-cache", NULL);
    }
    return respond(conn, MHD_HTTP_NOT_FOUND, "text/plain", "404 not found\n", 14, false, NULL);
}

static enum MHD_Result serve_metrics(struct ctl_web *w, struct MHD_Connection *conn,
                                     const char *method)
{
    enum MHD_Result rv;
    char *text;
    size_t len;

    if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0)
        return respond(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "text/plain", "405 use GET\n", 12, false,
                       "Allow", "GET, HEAD", NULL);
    if (!w->metrics || ctl_metrics_text(w->metrics, &text, &len) < 0)
        return MHD_NO;
    rv = respond(conn, MHD_HTTP_OK, "text/plain; version=0.0.4; charset=utf-8", text, len, false,
                 NULL);
    free(text);
    return rv;
}

static enum MHD_Result query_arg(void *cls, enum MHD_ValueKind kind, const char *key,
                                 const char *value)
{
    json_t *o = cls, *old;
    json_t *v = json_string(value ? value : "true");

    (void)kind;
    if (!v)
        return MHD_NO;
    old = json_object_get(o, key);
    if (!old) {
        json_object_set_new(o, key, v);
    } else if (json_is_array(old)) {
        json_array_append_new(old, v);
    } else {
        /* a repeated key (addr=..&addr=..): an array, as a repeatable option takes */
        json_t *a = json_pack("[O, o]", old, v);

        json_object_set_new(o, key, a);
    }
    return MHD_YES;
}

/* The request's parameters: the query string of a GET, the JSON object of a POST's body. */
static json_t *params_of(struct web_req *q, bool get, const char **err)
{
    json_t *o;
    json_error_t je;

    if (get) {
        o = json_object();
        if (o)
            MHD_get_connection_values(q->conn, MHD_GET_ARGUMENT_KIND, query_arg, o);
        return o;
    }
    if (q->blen == 0)
        return json_object();
    o = json_loadb(q->body, q->blen, JSON_REJECT_DUPLICATES, &je);
    if (!o || !json_is_object(o)) {
        json_decref(o);
        *err = "the request's body is not a JSON object";
        return NULL;
    }
    return o;
}

/* The route's checks before anything is relayed: origin, session, CSRF, method. */
static enum MHD_Result api_begin(struct web_req *q, const char *url, const char *method)
{
    struct MHD_Connection *conn = q->conn;
    bool get = strcmp(method, MHD_HTTP_METHOD_GET) == 0;
    bool post = strcmp(method, MHD_HTTP_METHOD_POST) == 0;
    const char *csrf_sent, *err = NULL;
    char csrf[65];
    json_t *params, *perr = NULL;
    int status = 400, rv;

    if (!origin_ok(conn))
        return respond_error(conn, MHD_HTTP_FORBIDDEN, "origin", -1);
    if (strcmp(url, "/api/login") == 0) {
        Fgx__Ctl__Request r = FGX__CTL__REQUEST__INIT;
        Fgx__Ctl__Login l = FGX__CTL__LOGIN__INIT;
        json_t *pw;

        if (!post)
            return respond(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "application/json",
                           "{\"error\":\"use POST\"}", 20, true, "Allow", "POST", NULL);
        params = params_of(q, false, &err);
        pw = params ? json_object_get(params, "password") : NULL;
        if (!json_is_string(pw) || strlen(json_string_value(pw)) != json_string_length(pw)) {
            json_decref(params);
            return respond_error(conn, MHD_HTTP_BAD_REQUEST,
                                 err ? err : "login takes {\"password\": \"...\"}", 2);
        }
        l.password = (char *)json_string_value(pw);
        r.req_case = FGX__CTL__REQUEST__REQ_LOGIN;
        r.login = &l;
        rv = pack_request(&r, &q->req, &q->reqlen);
        json_decref(params);
        if (rv < 0)
            return MHD_NO;
        q->kind = K_LOGIN;
        return relay(q);
    }
    if (!cookie_token(conn, q->token))
        return respond_error(conn, MHD_HTTP_UNAUTHORIZED, "login required", 7);
    if (!get) {
        csrf_sent = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "X-CSRF-Token");
        csrf_of(q->w, q->token, csrf);
        if (!csrf_sent || !ct_streq(csrf_sent, csrf))
            return respond_error(conn, MHD_HTTP_FORBIDDEN, "csrf", -1);
    }
    if (strcmp(url, "/api/logout") == 0 || strcmp(url, "/api/session") == 0 ||
        strcmp(url, "/api/live") == 0) {
        bool logout = url[5] == 'l' && url[7] == 'g';

        if (logout ? !post : !get)
            return respond(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "application/json",
                           "{\"error\":\"method\"}", 18, true, "Allow", logout ? "POST" : "GET",
                           NULL);
        q->kind = logout ? K_LOGOUT : url[5] == 's' ? K_SESSION : K_LIVE;
        if (q->kind == K_LIVE) {
            const char *lei = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Last-Event-ID");

            q->has_last_event_id = lei != NULL;
            q->last_event_id = lei ? strtoull(lei, NULL, 10) : 0;
        }
        /* The session is checked where sessions live: a status request in the loop. */
        if (simple_request(logout ? FGX__CTL__REQUEST__REQ_LOGOUT : FGX__CTL__REQUEST__REQ_STATUS,
                           q->token, &q->req, &q->reqlen) < 0)
            return MHD_NO;
        return relay(q);
    }
    if (strncmp(url, "/api/cmd/", 9) != 0)
        return respond_error(conn, MHD_HTTP_NOT_FOUND, "no such endpoint", -1);
    q->cmd = ctl_webapi_find(url + 9);
    if (!q->cmd)
        return respond_error(conn, MHD_HTTP_NOT_FOUND, "no such command", 2);
    if (!get && !post)
        return respond(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "application/json",
                       "{\"error\":\"method\"}", 18, true, "Allow", "GET, POST", NULL);
    if (get && !ctl_webapi_read_only(q->cmd))
        return respond(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "application/json",
                       "{\"error\":\"this command changes the configuration: use POST\"}", 60, true,
                       "Allow", "POST", NULL);
    params = params_of(q, get, &err);
    if (!params)
        return err ? respond_error(conn, MHD_HTTP_BAD_REQUEST, err, 2) : MHD_NO;
    rv = ctl_webapi_request(q->cmd, params, q->token, &q->req, &q->reqlen, &status, &perr);
    json_decref(params);
    if (rv == -EINVAL)
        return respond_json(conn, (unsigned)status, perr, NULL, NULL, NULL, NULL);
    if (rv < 0) {
        json_decref(perr);
        return MHD_NO;
    }
    q->kind = K_CMD;
    return relay(q);
}

/* The loop's reply is in: answer. */
static enum MHD_Result api_finish(struct web_req *q)
{
    struct MHD_Connection *conn = q->conn;
    Fgx__Ctl__Reply *r = NULL;
    enum MHD_Result rv;
    char cookie[160], retry[16];

    if (q->rv < 0)
        return respond_error(
            conn, q->rv == -ETIMEDOUT ? MHD_HTTP_GATEWAY_TIMEOUT : MHD_HTTP_SERVICE_UNAVAILABLE,
            q->rv == -ETIMEDOUT ? "controld did not answer in time" : "controld is not answering",
            q->rv == -ETIMEDOUT ? 6 : 1);
    if (q->kind == K_CMD) {
        const char *ctype = "application/json";
        char *disp = NULL;
        void *body = NULL;
        size_t blen = 0;
        int status = 500;

        if (ctl_webapi_reply(q->cmd, q->req, q->reqlen, q->rep, q->replen, &status, &ctype, &body,
                             &blen, &disp) < 0)
            return MHD_NO;
        if (status == 200) {
            const char *what = ctl_webapi_changes(q->cmd);

            /* (a firewall change is seen by the loop: ctl_fw_gen()) */
            if (what && strcmp(what, "script") == 0) {
                pthread_mutex_lock(&q->w->lock);
                q->w->changed_script = true;
                pthread_mutex_unlock(&q->w->lock);
            }
        }
        rv = respond(conn, (unsigned)status, ctype, body, blen, true, "Content-Disposition", disp,
                     NULL);
        free(body);
        free(disp);
        return rv;
    }
    r = fgx__ctl__reply__unpack(NULL, q->replen, q->rep);
    if (!r)
        return respond_error(conn, MHD_HTTP_INTERNAL_SERVER_ERROR,
                             "controld sent an unreadable reply", 1);
    if (r->code == FGX__CTL__CODE__CODE_AUTH && q->kind != K_LOGOUT) {
        if (q->kind == K_LOGIN && r->has_retry_after) {
            snprintf(retry, sizeof(retry), "%u", r->retry_after);
            rv = respond_json(
                conn, MHD_HTTP_TOO_MANY_REQUESTS,
                json_pack("{s:s, s:i}", "error", r->error ? r->error : "locked out", "exit", 7),
                "Retry-After", retry, NULL, NULL);
        } else {
            rv = respond_error(conn, MHD_HTTP_UNAUTHORIZED, r->error ? r->error : "login required",
                               7);
        }
    } else if (r->code != FGX__CTL__CODE__CODE_OK) {
        rv = respond_error(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, r->error ? r->error : "error", 1);
    } else if (q->kind == K_LOGIN) {
        if (!r->token || strlen(r->token) != CTL_AUTH_TOKEN_LEN) {
            rv = respond_error(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "no session token", 1);
        } else {
            snprintf(cookie, sizeof(cookie),
                     WEB_COOKIE "=%s; Path=/; HttpOnly; Secure; SameSite=Strict", r->token);
            rv = respond_json(conn, MHD_HTTP_OK, session_json(q->w, r->token),
                              MHD_HTTP_HEADER_SET_COOKIE, cookie, NULL, NULL);
        }
    } else if (q->kind == K_LOGOUT) {
        rv = respond_json(conn, MHD_HTTP_OK, json_object(), MHD_HTTP_HEADER_SET_COOKIE,
                          WEB_COOKIE "=; Path=/; Max-Age=0; HttpOnly; Secure; SameSite=Strict",
                          NULL, NULL);
    } else if (q->kind == K_SESSION) {
        rv = respond_json(conn, MHD_HTTP_OK, session_json(q->w, q->token), NULL, NULL, NULL, NULL);
    } else {
        rv = live_start(q);
    }
    fgx__ctl__reply__free_unpacked(r, NULL);
    return rv;
}

static enum MHD_Result web_handler(void *cls, struct MHD_Connection *conn, const char *url,
                                   const char *method, const char *version, const char *upload,
                                   size_t *upload_size, void **con_cls)
{
    struct ctl_web *w = cls;
    struct web_req *q = *con_cls;
    const union MHD_ConnectionInfo *ci;

    (void)version;
    if (!q) {
        ctl_web_conns_busy(w->conns, conn);
        q = calloc(1, sizeof(*q));
        if (!q)
            return MHD_NO;
        q->w = w;
        q->conn = conn;
        ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        (void)fgx_peer_from_sockaddr(ci ? ci->client_addr : NULL, &q->peer);
        *con_cls = q;
        return MHD_YES;
    }
    if (*upload_size) {
        /* The body, kept whole: the API's bodies are JSON objects. */
        if (!q->too_big && q->blen + *upload_size <= WEB_BODY_MAX) {
            char *nb = realloc(q->body, q->blen + *upload_size + 1);

            if (!nb)
                return MHD_NO;
            q->body = nb;
            memcpy(q->body + q->blen, upload, *upload_size);
            q->blen += *upload_size;
        } else {
            q->too_big = true;
        }
        *upload_size = 0;
        return MHD_YES;
    }
    if (q->started) {
        if (!__atomic_load_n(&q->done, __ATOMIC_ACQUIRE))
            return MHD_YES; /* resumed by nothing of ours: keep waiting */
        return api_finish(q);
    }
    if (q->peer.family != 4 && q->peer.family != 6)
        return MHD_NO;
    if (strcmp(url, "/metrics") == 0)
        return serve_metrics(w, conn, method);
    if (strcmp(url, "/api") == 0 || strncmp(url, "/api/", 5) == 0) {
        if (q->too_big)
            return respond_error(conn, MHD_HTTP_CONTENT_TOO_LARGE, "the request is too large", 2);
        return api_begin(q, url, method);
    }
    return serve_static(conn, url, method);
}

static void web_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                          enum MHD_RequestTerminationCode toe)
{
    struct ctl_web *w = cls;
    struct web_req *q = *con_cls;

    (void)toe;
    ctl_web_conns_idle(w->conns, conn);
    if (!q)
        return;
    free(q->body);
    free(q->req);
    free(q->rep);
    free(q);
    *con_cls = NULL;
}

__attribute__((format(printf, 2, 0)))
static void web_log(void *cls, const char *fmt, va_list ap)
{
    char line[512];

    (void)cls;
    vsnprintf(line, sizeof(line), fmt, ap);
    line[strcspn(line, "\n")] = '\0';
    fgx_debug("web: %s", line);
}

/* ---- the live messages, from the control loop ---- */

/* Run a read-only request in the loop's own thread (the trusted local path), *rep unpacked. */
static Fgx__Ctl__Reply *loop_query(struct ctl_ctx *ctx, Fgx__Ctl__Request *r, void **raw,
                                   size_t *rawlen)
{
    Fgx__Ctl__Reply *rep;
    void *req, *buf = NULL;
    size_t len, blen = 0;
    int rv;

    if (pack_request(r, &req, &len) < 0)
        return NULL;
    ctx->stats_no_refresh = true;
    rv = ctl_rpc_handle(ctx, req, len, &buf, &blen);
    ctx->stats_no_refresh = false;
    free(req);
    if (rv < 0)
        return NULL;
    rep = fgx__ctl__reply__unpack(NULL, blen, buf);
    if (raw && rep) {
        *raw = buf;
        *rawlen = blen;
    } else {
        free(buf);
    }
    if (rep && rep->code != FGX__CTL__CODE__CODE_OK) {
        fgx__ctl__reply__free_unpacked(rep, NULL);
        if (raw) {
            free(*raw);
            *raw = NULL;
        }
        return NULL;
    }
    return rep;
}

static struct web_msg *json_msg(uint64_t seq, const char *event, json_t *o)
{
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    struct web_msg *m = NULL;

    json_decref(o);
    if (!s)
        return NULL;
    if (seq)
        m = msg_new(seq, "id: %llu\nevent: %s\ndata: %s\n\n", (unsigned long long)seq, event, s);
    else
        m = msg_new(0, "event: %s\ndata: %s\n\n", event, s);
    free(s);
    return m;
}

static void tick_events(struct ctl_web *w, struct ctl_ctx *ctx)
{
    Fgx__Ctl__Request r = FGX__CTL__REQUEST__INIT;
    Fgx__Ctl__EventsQuery eq = FGX__CTL__EVENTS_QUERY__INIT;
    Fgx__Ctl__Reply *rep;
    uint64_t last = ctl_stats_last_seq(ctx->stats);

    if (last <= w->last_seq)
        return;
    eq.has_after_seq = true;
    eq.after_seq = w->last_seq;
    eq.has_limit = true;
    eq.limit = WEB_EVENTS_BATCH;
    r.req_case = FGX__CTL__REQUEST__REQ_EVENTS;
    r.events = &eq;
    rep = loop_query(ctx, &r, NULL, NULL);
    pthread_mutex_lock(&w->lock);
    for (size_t i = 0; rep && i < rep->n_events; i++) {
        const Fgx__Ctl__Event *e = rep->events[i];

        if (e->seq <= w->last_seq)
            continue;
        broadcast(w, json_msg(e->seq, "event", ctl_webapi_event_json(e)));
        w->last_seq = e->seq;
    }
    /* Events the batch did not reach (or that went already) are not looked for again. */
    if (w->last_seq < last && (!rep || rep->n_events < WEB_EVENTS_BATCH))
        w->last_seq = last;
    pthread_mutex_unlock(&w->lock);
    if (rep)
        fgx__ctl__reply__free_unpacked(rep, NULL);
}

/* The health log's new entries (service log), each as a `health` message: the page shows the
 * service's own and the box's in the service's view. */
static void tick_health(struct ctl_web *w, struct ctl_ctx *ctx)
{
    Fgx__Ctl__Request r = FGX__CTL__REQUEST__INIT;
    Fgx__Ctl__HealthLogQuery q = FGX__CTL__HEALTH_LOG_QUERY__INIT;
    Fgx__Ctl__Reply *rep;
    uint64_t last = ctl_health_last_seq();

    if (last == w->health_seq)
        return;
    if (last < w->health_seq) { /* a reset (unit tests): start again */
        w->health_seq = last;
        return;
    }
    q.has_after_seq = true;
    q.after_seq = w->health_seq;
    q.has_limit = true;
    q.limit = WEB_EVENTS_BATCH;
    r.req_case = FGX__CTL__REQUEST__REQ_SERVICE_LOG;
    r.service_log = &q;
    rep = loop_query(ctx, &r, NULL, NULL);
    pthread_mutex_lock(&w->lock);
    for (size_t i = 0; rep && i < rep->n_health_log; i++)
        broadcast(w, json_msg(0, "health", ctl_webapi_health_json(rep->health_log[i])));
    pthread_mutex_unlock(&w->lock);
    /* what the batch did not reach is old news by the next one: not looked for again */
    w->health_seq = rep && rep->has_health_last ? rep->health_last : last;
    if (rep)
        fgx__ctl__reply__free_unpacked(rep, NULL);
}

/* What a history entry changed, for the page's `change` event: from the words the history
 * describes it with (ctl_history_describe()), or for a request it has no words for, from the
 * request's number (control.proto: 290..300 the firewall's, 340..346 the scripts'). */
static const char *change_what(const char *kind, const char *what)
{
    static const struct {
        const char *word, *what;
    } words[] = {{"service ", "services"}, {"filter ", "filters"}, {"fw ", "fw"},
                 {"script ", "script"},    {"passwd", "auth"},     {"auth ", "auth"}};
    unsigned req;

    if (kind && (strcmp(kind, "undo") == 0 || strcmp(kind, "redo") == 0))
        return "services";
    for (size_t i = 0; what && i < sizeof(words) / sizeof(words[0]); i++)
        if (strncmp(what, words[i].word, strlen(words[i].word)) == 0)
            return words[i].what;
    if (what && sscanf(what, "request %u", &req) == 1)
        return req >= 290 && req <= 300 ? "fw" : req >= 340 && req <= 346 ? "script" : "services";
    return "services"; /* an import: the whole configuration */
}

/* The newest history entry, sent as `change` when it is new and made at or after since (unix
 * seconds; UINT64_MAX: never sent, only noted). */
static void tick_history(struct ctl_web *w, struct ctl_ctx *ctx, uint64_t since)
{
    Fgx__Ctl__Request r = FGX__CTL__REQUEST__INIT;
    Fgx__Ctl__HistoryQuery hq = FGX__CTL__HISTORY_QUERY__INIT;
    Fgx__Ctl__Reply *rep;
    const Fgx__Ctl__Change *c;

    hq.has_limit = true;
    hq.limit = 1;
    r.req_case = FGX__CTL__REQUEST__REQ_HISTORY;
    r.history = &hq;
    rep = loop_query(ctx, &r, NULL, NULL);
    if (!rep)
        return;
    c = rep->n_changes ? rep->changes[rep->n_changes - 1] : NULL;
    if (c && c->seq > w->last_history) {
        if (c->time >= since) {
            json_t *o = json_pack("{s:s, s:I}", "what", change_what(c->kind, c->what), "history",
                                  (json_int_t)c->seq);

            pthread_mutex_lock(&w->lock);
            broadcast(w, json_msg(0, "change", o));
            pthread_mutex_unlock(&w->lock);
        }
        w->last_history = c->seq;
    }
    fgx__ctl__reply__free_unpacked(rep, NULL);
}

static void tick_stats(struct ctl_web *w, struct ctl_ctx *ctx)
{
    Fgx__Ctl__Request r = FGX__CTL__REQUEST__INIT;
    Fgx__Ctl__StatsQuery sq = FGX__CTL__STATS_QUERY__INIT;
    Fgx__Ctl__Reply *rep;
    void *raw = NULL;
    size_t rawlen = 0;

    r.req_case = FGX__CTL__REQUEST__REQ_STATS;
    r.stats = &sq;
    rep = loop_query(ctx, &r, &raw, &rawlen);
    if (!rep)
        return;
    fgx__ctl__reply__free_unpacked(rep, NULL);
    /* Sent only when a counter moved: the same reply is the same counters. */
    if (w->last_stats && w->last_stats_len == rawlen && memcmp(w->last_stats, raw, rawlen) == 0) {
        free(raw);
        return;
    }
    pthread_mutex_lock(&w->lock);
    broadcast(w, json_msg(0, "stats", ctl_webapi_stats_json(raw, rawlen)));
    pthread_mutex_unlock(&w->lock);
    free(w->last_stats);
    w->last_stats = raw;
    w->last_stats_len = rawlen;
}

static struct web_script_pos *script_pos(struct ctl_web *w, uint32_t service_id)
{
    struct web_script_pos *grown;

    for (size_t i = 0; i < w->nscript_pos; i++)
        if (w->script_pos[i].service_id == service_id)
            return &w->script_pos[i];
    grown = realloc(w->script_pos, (w->nscript_pos + 1) * sizeof(*grown));
    if (!grown)
        return NULL;
    w->script_pos = grown;
    grown[w->nscript_pos] = (struct web_script_pos){.service_id = service_id};
    return &grown[w->nscript_pos++];
}

/* The services' script log entries since the last look (only when any log grew); send: false
 * when priming (what was logged before is not news). */
static void tick_script_log(struct ctl_web *w, struct ctl_ctx *ctx, bool send)
{
    struct ctl_service *svcs = NULL;
    struct ctl_txn *t;
    size_t n = 0;
    uint64_t count = ctl_script_rt_log_count();

    if (count == w->script_count)
        return;
    w->script_count = count;
    if (ctl_txn_begin(ctx->store, false, &t) < 0)
        return;
    if (ctl_store_service_list(t, &svcs, &n) < 0)
        n = 0;
    ctl_txn_abort(t);
    for (size_t i = 0; i < n; i++) {
        struct ctl_script_reply sr = {0};
        struct web_script_pos *pos = script_pos(w, svcs[i].id);
        uint64_t last = 0;

        if (!pos)
            break;
        /* a log removed with its script starts again from 1 */
        if (ctl_script_rt_log(ctx, svcs[i].id, pos->last, &sr, &last) == 0 && last < pos->last)
            pos->last = 0;
        for (size_t k = 0; send && k < sr.nentries; k++) {
            json_t *o = ctl_webapi_script_log_json(sr.entry_ptrs[k]);

            /* which service's log: the page shows one service's at a time */
            if (o && !json_object_get(o, "service"))
                json_object_set_new(o, "service", json_string(svcs[i].name));
            pthread_mutex_lock(&w->lock);
            broadcast(w, json_msg(0, "script_log", o));
            pthread_mutex_unlock(&w->lock);
        }
        if (last > pos->last)
            pos->last = last;
        /* ctl_script_reply_free() frees the struct too: this one is on the stack */
        for (size_t k = 0; sr.texts && k < sr.nentries * 3; k++)
            free(sr.texts[k]);
        free(sr.texts);
        free(sr.entries);
        free(sr.entry_ptrs);
    }
    free(svcs);
}

/* Streams whose connection ended go; those whose session ended get `logout` and close. */
static void tick_sessions(struct ctl_web *w, struct ctl_ctx *ctx)
{
    static const char bye[] = "event: logout\ndata: {}\n\n";
    struct web_stream **pp = &w->streams;
    uint64_t now = ctl_rpc_mono_ms();

    pthread_mutex_lock(&w->lock);
    while (*pp) {
        struct web_stream *s = *pp;

        if (__atomic_load_n(&s->gone, __ATOMIC_ACQUIRE) && !s->suspended) {
            *pp = s->next;
            stream_free(s);
            __atomic_sub_fetch(&w->nstreams, 1, __ATOMIC_RELEASE);
            continue;
        }
        if (!s->closing && ctx->auth && !ctl_auth_session_alive(ctx->auth, s->token, now)) {
            struct web_msg *m = msg_new(0, "%s", bye);

            if (m) {
                stream_push(s, m);
                msg_unref(m);
            }
            s->closing = true;
        }
        pp = &s->next;
    }
    pthread_mutex_unlock(&w->lock);
}

void ctl_web_tick(struct ctl_web *w, struct ctl_ctx *ctx)
{
    uint64_t now, since;
    bool changed_fw = false;

    if (!w)
        return;
    ctl_web_conns_sweep(w->conns, (unsigned)__atomic_load_n(&w->nstreams, __ATOMIC_ACQUIRE));
    if (!w->primed) {
        /* What happened before start is history, not news. */
        w->last_seq = ctx->stats ? ctl_stats_last_seq(ctx->stats) : 0;
        tick_history(w, ctx, UINT64_MAX);
        w->fw_gen = ctl_fw_gen(ctx->fw);
        if (ctx->store)
            tick_script_log(w, ctx, false);
        w->health_seq = ctl_health_last_seq();
        w->primed = true;
        w->last_sent_ms = web_now_ms();
    }
    if (__atomic_load_n(&w->nstreams, __ATOMIC_ACQUIRE) == 0) {
        /* Nobody watches: keep only the positions current (the event seq for hello). */
        if (ctx->stats) {
            pthread_mutex_lock(&w->lock);
            w->last_seq = ctl_stats_last_seq(ctx->stats);
            pthread_mutex_unlock(&w->lock);
        }
        if (ctx->store)
            tick_script_log(w, ctx, false);
        w->fw_gen = ctl_fw_gen(ctx->fw);
        w->health_seq = ctl_health_last_seq();
        w->watched = false;
        return;
    }
    if (!w->watched) {
        /* The first page since nobody watched: a change made before it opened is not news to
         * it (one made since, before this tick, is: the history's seconds tell them apart). */
        pthread_mutex_lock(&w->lock);
        since = w->first_open;
        pthread_mutex_unlock(&w->lock);
        tick_history(w, ctx, since);
        w->watched = true;
    }
    if (ctx->stats)
        tick_events(w, ctx);
    if (ctx->store) {
        tick_script_log(w, ctx, true);
        tick_health(w, ctx);
    }
    now = web_now_ms();
    if (now >= w->next_slow_ms) {
        w->next_slow_ms = now + WEB_SLOW_MS;
        tick_history(w, ctx, 0);
        if (ctx->stats)
            tick_stats(w, ctx);
        tick_sessions(w, ctx);
    }
    /* Any client's firewall change (rules, policy, options, on/off, a deadline set, kept or run
     * out): the first at once, then one a second at most, so that a burst is one or two. A
     * counter compared: nothing to do while nothing changes. */
    if (ctl_fw_gen(ctx->fw) != w->fw_gen && now >= w->next_fw_ms) {
        w->fw_gen = ctl_fw_gen(ctx->fw);
        w->next_fw_ms = now + WEB_SLOW_MS;
        changed_fw = true;
    }
    pthread_mutex_lock(&w->lock);
    for (int i = 0; i < 2; i++) {
        bool *flag = i ? &w->changed_script : &changed_fw;

        if (*flag) {
            *flag = false;
            broadcast(w, json_msg(0, "change",
                                  json_pack("{s:s, s:I}", "what", i ? "script" : "fw", "history",
                                            (json_int_t)w->last_history)));
        }
    }
    pthread_mutex_unlock(&w->lock);
    if (now - w->last_sent_ms >= CTL_WEB_KEEPALIVE_MS) {
        /* Nothing for a while: a comment, so that proxies and the page know the stream lives. */
        pthread_mutex_lock(&w->lock);
        broadcast(w, msg_new(0, ": keepalive\n\n"));
        pthread_mutex_unlock(&w->lock);
    }
}

/* ---- start, stop ---- */

int ctl_web_start(const struct ctl_web_config *cfg, struct ctl_web **out)
{
    struct ctl_web *w = calloc(1, sizeof(*w));
    int rv, fd = -1;

    if (!w)
        return -ENOMEM;
    pthread_mutex_init(&w->lock, NULL);
    pthread_mutex_init(&w->relay_lock, NULL);
    w->auth = cfg->auth;
    w->metrics = cfg->metrics;
    if (getrandom(w->secret, sizeof(w->secret), 0) != (ssize_t)sizeof(w->secret)) {
        rv = -EIO;
        fgx_err("web: cannot draw the CSRF key");
        goto err;
    }
    rv = fgx_chan_dial(cfg->relay_url, FGX_CHAN_REQ, 1000, &w->relay);
    if (rv < 0) {
        fgx_err("web: cannot reach the control channel: %s", strerror(-rv));
        goto err;
    }
    rv = ctl_web_conns_new(cfg->max_conns ? cfg->max_conns : CTL_WEB_MAX_CONNS,
                           cfg->max_per_src ? cfg->max_per_src : CTL_WEB_MAX_PER_SRC,
                           cfg->handshake_s ? cfg->handshake_s : CTL_AUTH_HANDSHAKE_S_DEFAULT,
                           &w->conns);
    if (rv < 0)
        goto err;
    w->streams_max = (cfg->max_conns ? cfg->max_conns : CTL_WEB_MAX_CONNS) / 4;
    if (w->streams_max < CTL_WEB_STREAMS_PER_SRC)
        w->streams_max = CTL_WEB_STREAMS_PER_SRC;
    ctl_listen_stream_limits(CTL_WEB_STREAMS_PER_SESSION, CTL_WEB_STREAMS_PER_SRC, w->streams_max);
    rv = ctl_listen_tcp("web", cfg->listen, &fd, &w->port);
    if (rv < 0)
        goto err;
    w->httpd = MHD_start_daemon(
        MHD_USE_AUTO_INTERNAL_THREAD | MHD_USE_TLS | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG,
        0, web_admit, w, web_handler, w, MHD_OPTION_LISTEN_SOCKET, fd, MHD_OPTION_HTTPS_MEM_KEY,
        cfg->key_pem, MHD_OPTION_HTTPS_MEM_CERT, cfg->cert_pem, MHD_OPTION_NOTIFY_COMPLETED,
        web_completed, w, MHD_OPTION_NOTIFY_CONNECTION, ctl_web_conns_notify, w->conns,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)WEB_CONN_TIMEOUT_S, MHD_OPTION_CONNECTION_LIMIT,
        ctl_web_conns_mhd_limit(w->conns), MHD_OPTION_EXTERNAL_LOGGER, web_log, NULL,
        MHD_OPTION_END);
    if (!w->httpd) {
        fgx_err("web: cannot start the HTTPS server on %s", cfg->listen);
        close(fd);
        rv = -EIO;
        goto err;
    }
    *out = w;
    return 0;
err:
    ctl_web_stop(w);
    return rv;
}

uint16_t ctl_web_port(const struct ctl_web *w)
{
    return w->port;
}

void ctl_web_stop(struct ctl_web *w)
{
    if (!w)
        return;
    /* No call starts after this (relay() checks under the lock); those waiting on the loop end
     * with the relay (call_done resumes them; the close waits for every callback), and every
     * suspended stream is resumed to see `stopping`: MHD may stop only with none suspended. */
    pthread_mutex_lock(&w->relay_lock);
    __atomic_store_n(&w->stopping, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&w->relay_lock);
    fgx_chan_close(w->relay);
    w->relay = NULL;
    pthread_mutex_lock(&w->lock);
    for (struct web_stream *s = w->streams; s; s = s->next) {
        s->closing = true;
        if (s->suspended) {
            s->suspended = false;
            MHD_resume_connection(s->conn);
        }
    }
    pthread_mutex_unlock(&w->lock);
    if (w->httpd)
        MHD_stop_daemon(w->httpd);
    while (w->streams) {
        struct web_stream *s = w->streams;

        w->streams = s->next;
        stream_free(s);
    }
    for (unsigned i = 0; i < w->replay_n; i++)
        msg_unref(w->replay[(w->replay_head + i) % WEB_REPLAY]);
    free(w->last_stats);
    free(w->script_pos);
    ctl_web_conns_free(w->conns);
    pthread_mutex_destroy(&w->lock);
    pthread_mutex_destroy(&w->relay_lock);
    explicit_bzero(w->secret, sizeof(w->secret));
    free(w);
}
