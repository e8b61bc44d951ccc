/* TLS stage of proxyworker, for services with a certificate: the client's handshake is
 * completed with the service's certificate and key, the relay stage moves plaintext (so the
 * match stage scans exactly what plain TCP would carry, stream semantics and all), and the
 * proxy opens its own TLS connection to the real service (or speaks plaintext to it: upstream
 * plain).
 *
 * OpenSSL drives each side's socket itself (a socket BIO on the non-blocking descriptor), from
 * the relay's own events: no memory BIOs, so no copy of every record through them, and the
 * door stays open to kTLS (SSL_OP_ENABLE_KTLS: the kernel then does the record crypto, which
 * OpenSSL only offers on socket BIOs). bufferevent_openssl was the other choice; it would have
 * replaced the relay's own backpressure (one read kept per side, never more) with bufferevent
 * watermarks and added a copy into its evbuffers.
 *
 * The handshake, never blocking the loop:
 *   HELLO    the client's ClientHello arrives; the ClientHello callback takes its SNI and ALPN
 *            offer and (upstream TLS) pauses the client's handshake (SSL_CLIENT_HELLO_RETRY).
 *   UPSTREAM the proxy's handshake with the service, offering the client's SNI and ALPN list.
 *   FINISH   the client's handshake resumes; the ALPN callback gives the client the protocol
 *            the service chose (none when it chose none).
 *   DONE     the relay moves plaintext both ways.
 * A failure at any step (a client that does not speak TLS, a bad handshake, a service that
 * refuses TLS) resets both sides and counts the service's tls_failed; a handshake that stalls
 * is closed by the first-byte timeout (px_relay_expire()), counted the same way. No client
 * certificates are asked for, no 0-RTT data is accepted (max_early_data 0), no renegotiation. */
#include "px.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <arpa/inet.h>

#include <event2/event.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "fgx/log.h"
#include "px_tls_hello.h"

/* A read stops once fewer than this many bytes of the scratch buffer are left (each SSL_read
 * then has room for a whole record); what OpenSSL still holds then is read at once after
 * (SSL_has_pending()). */
#define PX_TLS_RECORD_MAX 16384

#define PX_TLS_READ_BUF (64u << 10)
/* Sessions to the services kept per thread: one per service and server name, direct-mapped. */
#define PX_TLS_CACHE_SLOTS 64

enum { PX_TLS_HELLO, PX_TLS_UPSTREAM, PX_TLS_FINISH, PX_TLS_DONE };

struct px_tls_ctx {
    SSL_CTX *srv; /* toward clients: the service's certificate */
    SSL_CTX *cli; /* toward the service; NULL: upstream plain */
};

struct px_tls {
    SSL *ssl[2]; /* [0] with the client, [1] with the service (NULL: upstream plain) */
    int state;
    bool plain_up;
    uint8_t *alpn; /* the client's ALPN offer, wire format (malloc'd) */
    size_t alpn_len;
    const uint8_t *alpn_sel; /* the service's choice (in ssl[1]) */
    unsigned alpn_sel_len;
    uint64_t ctx_hash; /* the service's certificate generation (fgx_wtls.hash) */
    char sni[256];
};

static int px_tls_conn_idx = -1;

/* The proxy resumes its own sessions to a service: the service's handshake is then a PSK one,
 * with no certificate to sign or verify, which is most of what a handshake costs (nginx's
 * proxy_ssl_session_reuse does the same). Per thread, so no lock: a thread's connections
 * share its sessions, refreshed by every new ticket the service sends. */
struct px_tls_slot {
    uint64_t key; /* service id, the server name's hash and the certificate's */
    SSL_SESSION *sess;
};

struct px_tls_cache {
    struct px_tls_slot slot[PX_TLS_CACHE_SLOTS];
};

static uint64_t cache_key(const struct px_conn *c)
{
    const struct px_tls *x = c->tls;
    uint64_t h = 1469598103934665603ull ^ c->service_id;

    for (const char *p = x->sni; *p != '\0'; p++)
        h = (h ^ (uint8_t)*p) * 1099511628211ull;
    return (h ^ x->ctx_hash) | 1; /* never 0: 0 is a free slot */
}

static struct px_tls_slot *cache_slot(struct px_conn *c, uint64_t key, bool make)
{
    struct px_thread *t = c->t;

    if (t->tls_cache == NULL &&
        (!make || (t->tls_cache = calloc(1, sizeof(*t->tls_cache))) == NULL))
        return NULL;
    return &t->tls_cache->slot[key % PX_TLS_CACHE_SLOTS];
}

void px_tls_thread_release(struct px_thread *t)
{
    if (t->tls_cache == NULL)
        return;
    for (size_t i = 0; i < PX_TLS_CACHE_SLOTS; i++)
        SSL_SESSION_free(t->tls_cache->slot[i].sess);
    free(t->tls_cache);
    t->tls_cache = NULL;
}

/* A new session (ticket) from a service: kept for the next connection of this thread. */
static int on_new_session(SSL *ssl, SSL_SESSION *sess)
{
    struct px_conn *c = SSL_get_ex_data(ssl, px_tls_conn_idx);
    uint64_t key;
    struct px_tls_slot *s;

    if (c == NULL || c->tls == NULL || !SSL_SESSION_is_resumable(sess))
        return 0;
    key = cache_key(c);
    s = cache_slot(c, key, true);
    if (s == NULL)
        return 0;
    SSL_SESSION_free(s->sess);
    s->key = key;
    s->sess = sess;
    return 1; /* the reference is ours now */
}

/* The reason of the newest OpenSSL error of this thread, or else of the socket's (sys_err, an
 * errno from SSL_ERROR_SYSCALL; 0: none), and an empty queue afterwards. */
static const char *ssl_reason_sys(char *buf, size_t len, int sys_err)
{
    unsigned long e = ERR_peek_last_error();

    if (e != 0)
        ERR_error_string_n(e, buf, len);
    else if (sys_err != 0)
        (void)snprintf(buf, len, "socket: %s", strerror(sys_err));
    else
        (void)snprintf(buf, len, "%s", "connection closed");
    ERR_clear_error();
    return buf;
}

static const char *ssl_reason(char *buf, size_t len)
{
    return ssl_reason_sys(buf, len, 0);
}

/* ---- loading (the control thread) ---- */

static int tls_fail_load(uint32_t id, const char *what)
{
    char r[160];

    fgx_err("service %u: TLS %s: %s; its connections are refused", id, what,
            ssl_reason(r, sizeof(r)));
    return -EINVAL;
}

static void ctx_free(void *p)
{
    struct px_tls_ctx *x = p;

    if (x == NULL)
        return;
    SSL_CTX_free(x->srv);
    SSL_CTX_free(x->cli);
    free(x);
}

static int on_client_hello(SSL *ssl, int *al, void *arg);
static int on_alpn_select(SSL *ssl, const unsigned char **out, unsigned char *outlen,
                          const unsigned char *in, unsigned int inlen, void *arg);

/* The certificate chain (leaf first) and key from PEM in memory. */
static int ctx_use_pem(SSL_CTX *ctx, const struct fgx_dp_service *s)
{
    BIO *b = BIO_new_mem_buf(s->tls_cert.data, (int)s->tls_cert.len);
    X509 *x = NULL;
    EVP_PKEY *k = NULL;
    int ret = -EINVAL, n = 0;

    if (b == NULL)
        return -ENOMEM;
    while ((x = PEM_read_bio_X509(b, NULL, NULL, NULL)) != NULL) {
        int ok = n == 0 ? SSL_CTX_use_certificate(ctx, x) : (int)SSL_CTX_add0_chain_cert(ctx, x);

        if (n == 0 || !ok)
            X509_free(x);
        if (!ok)
            goto out;
        n++;
    }
    ERR_clear_error(); /* the end of the PEM data */
    BIO_free(b);
    b = BIO_new_mem_buf(s->tls_key.data, (int)s->tls_key.len);
    if (b == NULL || n == 0)
        goto out;
    k = PEM_read_bio_PrivateKey(b, NULL, NULL, NULL);
    if (k == NULL || SSL_CTX_use_PrivateKey(ctx, k) != 1 || SSL_CTX_check_private_key(ctx) != 1)
        goto out;
    ret = 0;
out:
    EVP_PKEY_free(k);
    BIO_free(b);
    return ret;
}

int px_tls_load(void *worker, const struct fgx_dp_service *s, struct fgx_wtls *out)
{
    struct px_tls_ctx *x = calloc(1, sizeof(*x));
    const uint64_t opts = SSL_OP_NO_RENEGOTIATION | SSL_OP_IGNORE_UNEXPECTED_EOF |
                          SSL_OP_ENABLE_KTLS | SSL_OP_CIPHER_SERVER_PREFERENCE;
    const long mode = SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER;

    (void)worker;
    if (x == NULL) {
        fgx_err("service %u: TLS: out of memory", s->id);
        return -ENOMEM;
    }
    out->ctx = x;
    out->ctx_free = ctx_free;
    x->srv = SSL_CTX_new(TLS_server_method());
    if (x->srv == NULL || SSL_CTX_set_min_proto_version(x->srv, TLS1_2_VERSION) != 1)
        return tls_fail_load(s->id, "server context");
    SSL_CTX_set_options(x->srv, opts);
    SSL_CTX_set_mode(x->srv, mode);
    /* One recv() takes several records rather than two per record (header, then body). */
    SSL_CTX_set_read_ahead(x->srv, 1);
    SSL_CTX_set_default_read_buffer_len(x->srv, PX_TLS_READ_BUF);
    SSL_CTX_set_verify(x->srv, SSL_VERIFY_NONE, NULL); /* no client certificates */
    SSL_CTX_set_max_early_data(x->srv, 0);             /* no 0-RTT */
    SSL_CTX_set_num_tickets(x->srv, 1);                /* one resumption per client is enough */
    /* Clients resume with stateless tickets; a server-side cache would only cost memory, a
     * lock per handshake and a walk over it every 255 handshakes (OPENSSL_LH_doall_arg). */
    SSL_CTX_set_session_cache_mode(x->srv, SSL_SESS_CACHE_OFF);
    SSL_CTX_set_recv_max_early_data(x->srv, 0);
    SSL_CTX_set_client_hello_cb(x->srv, on_client_hello, NULL);
    SSL_CTX_set_alpn_select_cb(x->srv, on_alpn_select, NULL);
    if (ctx_use_pem(x->srv, s) != 0)
        return tls_fail_load(s->id, "certificate and key");
    if (s->tls_upstream_plain)
        return 0;
    x->cli = SSL_CTX_new(TLS_client_method());
    if (x->cli == NULL || SSL_CTX_set_min_proto_version(x->cli, TLS1_2_VERSION) != 1)
        return tls_fail_load(s->id, "client context");
    SSL_CTX_set_options(x->cli, opts & ~(uint64_t)SSL_OP_CIPHER_SERVER_PREFERENCE);
    SSL_CTX_set_mode(x->cli, mode);
    SSL_CTX_set_read_ahead(x->cli, 1);
    SSL_CTX_set_default_read_buffer_len(x->cli, PX_TLS_READ_BUF);
    /* The service is the team's own, on this box, with whatever certificate it has (often
     * self-signed): it is not verified. */
    SSL_CTX_set_verify(x->cli, SSL_VERIFY_NONE, NULL);
    SSL_CTX_set_session_cache_mode(x->cli,
                                   SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
    SSL_CTX_sess_set_new_cb(x->cli, on_new_session);
    return 0;
}

/* ---- a connection's handshakes ---- */

/* sys_err: the errno of an SSL_ERROR_SYSCALL (a reset, say), or 0: it says which socket
 * failed and how, where OpenSSL's queue is empty. */
static void tls_failed_sys(struct px_conn *c, const char *what, int sys_err)
{
    static __thread unsigned long long last_log;
    char a[INET6_ADDRSTRLEN] = "?", r[160];
    const void *ip = c->client.ss_family == AF_INET
                         ? (const void *)&((const struct sockaddr_in *)&c->client)->sin_addr
                         : (const void *)&((const struct sockaddr_in6 *)&c->client)->sin6_addr;

    PX_CTR_ADD(&px_stats_svc(&c->t->ctr, c->service_id)->tls_failed, 1);
    inet_ntop(c->client.ss_family, ip, a, sizeof(a));
    fgx_log_ratelimited(&last_log, FGX_LOG_INFO, "service %u: client %s: %s: %s (reset)",
                        c->service_id, a, what, ssl_reason_sys(r, sizeof(r), sys_err));
    px_relay_close(c, true);
}

static void tls_failed(struct px_conn *c, const char *what)
{
    tls_failed_sys(c, what, 0);
}

void px_tls_timed_out(struct px_conn *c)
{
    static __thread unsigned long long last_log;

    PX_CTR_ADD(&px_stats_svc(&c->t->ctr, c->service_id)->tls_failed, 1);
    fgx_log_ratelimited(&last_log, FGX_LOG_INFO,
                        "service %u: a TLS handshake stalled past the first-byte timeout (reset)",
                        c->service_id);
}

bool px_tls_handshaking(const struct px_conn *c)
{
    return c->tls != NULL && c->tls->state != PX_TLS_DONE;
}

/* The server_name extension's host name, or "" (px_tls_hello.c). */
static void hello_sni(SSL *ssl, char *out, size_t len)
{
    const unsigned char *p;
    size_t n;

    out[0] = '\0';
    if (SSL_client_hello_get0_ext(ssl, TLSEXT_TYPE_server_name, &p, &n))
        px_tls_hello_sni(p, n, out, len);
}

/* The ALPN extension's protocol list, kept for the service's handshake (px_tls_hello.c). */
static int hello_alpn(SSL *ssl, struct px_tls *x)
{
    const unsigned char *p;
    const uint8_t *list;
    size_t n, len;
    int rc;

    if (!SSL_client_hello_get0_ext(ssl, TLSEXT_TYPE_application_layer_protocol_negotiation, &p, &n))
        return 0;
    rc = px_tls_hello_alpn(p, n, &list, &len);
    if (rc != 0)
        return rc;
    x->alpn = malloc(len);
    if (x->alpn == NULL)
        return -ENOMEM;
    memcpy(x->alpn, list, len);
    x->alpn_len = len;
    return 0;
}

static int on_client_hello(SSL *ssl, int *al, void *arg)
{
    struct px_conn *c = SSL_get_ex_data(ssl, px_tls_conn_idx);
    struct px_tls *x = c->tls;

    (void)arg;
    if (x->state != PX_TLS_HELLO)
        return SSL_CLIENT_HELLO_SUCCESS; /* resumed: the service's handshake is done */
    hello_sni(ssl, x->sni, sizeof(x->sni));
    if (hello_alpn(ssl, x) != 0) {
        *al = SSL_AD_DECODE_ERROR;
        return SSL_CLIENT_HELLO_ERROR;
    }
    if (x->plain_up)
        return SSL_CLIENT_HELLO_SUCCESS;
    /* Pause here until the service has chosen its protocol: SSL_do_handshake() returns
     * SSL_ERROR_WANT_CLIENT_HELLO_CB and px_tls_step() starts the service's handshake. */
    return SSL_CLIENT_HELLO_RETRY;
}

/* sel (sel_len bytes) found in the client's list in: *out points into in. */
static bool alpn_pick(const unsigned char **out, unsigned char *outlen, const unsigned char *in,
                      unsigned int inlen, const uint8_t *sel, unsigned sel_len)
{
    for (unsigned i = 0; i < inlen; i += 1u + in[i]) {
        if (i + 1u + in[i] > inlen)
            break;
        if (in[i] == sel_len && memcmp(in + i + 1, sel, sel_len) == 0) {
            *out = in + i + 1;
            *outlen = in[i];
            return true;
        }
    }
    return false;
}

static int on_alpn_select(SSL *ssl, const unsigned char **out, unsigned char *outlen,
                          const unsigned char *in, unsigned int inlen, void *arg)
{
    struct px_conn *c = SSL_get_ex_data(ssl, px_tls_conn_idx);
    struct px_tls *x = c->tls;

    (void)arg;
    /* The HTTP kind speaking plaintext to its service chooses itself: h2 (then h2c upstream,
     * px_h2.c), else http/1.1; toward an HTTP/1.1-only service too (it is offered that alone). */
    if (c->http && (x->plain_up || c->h1up))
        return alpn_pick(out, outlen, in, inlen, (const uint8_t *)"h2", 2) ||
                       alpn_pick(out, outlen, in, inlen, (const uint8_t *)"http/1.1", 8)
                   ? SSL_TLSEXT_ERR_OK
                   : SSL_TLSEXT_ERR_NOACK;
    /* The service's choice, found in the client's own list (it was offered that list). */
    if (x->alpn_sel == NULL || x->alpn_sel_len == 0)
        return SSL_TLSEXT_ERR_NOACK;
    return alpn_pick(out, outlen, in, inlen, x->alpn_sel, x->alpn_sel_len) ? SSL_TLSEXT_ERR_OK
                                                                           : SSL_TLSEXT_ERR_NOACK;
}

int px_tls_conn_start(struct px_conn *c, const struct fgx_wtls *wt)
{
    const struct px_tls_ctx *ctx = wt->ctx;
    struct px_tls *x;

    if (wt->failed || ctx == NULL || ctx->srv == NULL)
        return -EINVAL;
    x = calloc(1, sizeof(*x));
    if (x == NULL)
        return -ENOMEM;
    x->plain_up = wt->upstream_plain || ctx->cli == NULL;
    x->ctx_hash = wt->hash;
    x->ssl[0] = SSL_new(ctx->srv);
    if (!x->plain_up)
        x->ssl[1] = SSL_new(ctx->cli);
    if (x->ssl[0] == NULL || (!x->plain_up && x->ssl[1] == NULL) ||
        SSL_set_fd(x->ssl[0], c->s[0].fd) != 1 ||
        (x->ssl[1] != NULL && SSL_set_fd(x->ssl[1], c->s[1].fd) != 1)) {
        SSL_free(x->ssl[0]);
        SSL_free(x->ssl[1]);
        free(x);
        ERR_clear_error();
        return -ENOMEM;
    }
    SSL_set_accept_state(x->ssl[0]);
    SSL_set_ex_data(x->ssl[0], px_tls_conn_idx, c);
    if (x->ssl[1] != NULL) {
        SSL_set_connect_state(x->ssl[1]);
        SSL_set_ex_data(x->ssl[1], px_tls_conn_idx, c);
    }
    c->tls = x;
    return 0;
}

void px_tls_conn_free(struct px_conn *c)
{
    struct px_tls *x = c->tls;

    if (x == NULL)
        return;
    /* No close_notify: the sockets are closed (or reset) by the relay, never written here.
     * But the session with the service stays good for the next connection: freed without a
     * shutdown, OpenSSL would mark it not resumable, and it is shared by the thread's cache. */
    if (x->ssl[1] != NULL && SSL_is_init_finished(x->ssl[1]))
        SSL_set_shutdown(x->ssl[1], SSL_SENT_SHUTDOWN | SSL_RECEIVED_SHUTDOWN);
    SSL_free(x->ssl[0]);
    SSL_free(x->ssl[1]);
    free(x->alpn);
    free(x);
    c->tls = NULL;
}

/* After a WANT_READ or WANT_WRITE of side's handshake: wait for that. */
static void want(struct px_conn *c, int side, int err)
{
    if (err == SSL_ERROR_WANT_WRITE)
        event_add(c->s[side].wev, NULL);
    else
        event_add(c->s[side].rev, NULL);
}

/* Both handshakes are done: relay plaintext. */
static void tls_done(struct px_conn *c)
{
    c->tls->state = PX_TLS_DONE;
    event_add(c->s[0].rev, NULL);
    event_active(c->s[0].rev, EV_READ, 0);
    /* The HTTP kind: the service is heard once the client said what it speaks (px_h2.c). */
    if (c->http)
        return;
    event_add(c->s[1].rev, NULL);
    /* With read-ahead, the records that followed a side's last handshake message (a client's
     * request right behind its Finished, a service's ticket or greeting) may already sit in
     * OpenSSL, with no socket event left to announce them. */
    event_active(c->s[1].rev, EV_READ, 0);
}

static bool step_client(struct px_conn *c)
{
    struct px_tls *x = c->tls;
    int r, e, sys_err;

    ERR_clear_error();
    errno = 0;
    r = SSL_do_handshake(x->ssl[0]);
    sys_err = errno;
    if (r == 1) {
        tls_done(c);
        return true;
    }
    e = SSL_get_error(x->ssl[0], r);
    if (e == SSL_ERROR_WANT_CLIENT_HELLO_CB) {
        /* Paused (on_client_hello()): the service's handshake, with the client's SNI and
         * ALPN offer; the client is not read until it is done. */
        x->state = PX_TLS_UPSTREAM;
        if (x->sni[0] != '\0' && SSL_set_tlsext_host_name(x->ssl[1], x->sni) != 1) {
            tls_failed(c, "the client's server name could not be passed on");
            return false;
        }
        /* an HTTP/1.1-only service is offered http/1.1 alone: the proxy speaks h2 itself */
        if (c->h1up && SSL_set_alpn_protos(x->ssl[1], (const uint8_t *)"\x08http/1.1", 9)) {
            tls_failed(c, "ALPN http/1.1 could not be offered to the service");
            return false;
        }
        if (!c->h1up && x->alpn != NULL &&
            SSL_set_alpn_protos(x->ssl[1], x->alpn, (unsigned)x->alpn_len)) {
            tls_failed(c, "the client's ALPN offer could not be passed on");
            return false;
        }
        {
            uint64_t key = cache_key(c);
            struct px_tls_slot *s = cache_slot(c, key, false);

            if (s != NULL && s->key == key && s->sess != NULL)
                (void)SSL_set_session(x->ssl[1], s->sess);
        }
        event_del(c->s[0].rev);
        return px_tls_step(c, 1);
    }
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
        want(c, 0, e);
        return true;
    }
    tls_failed_sys(c, x->state == PX_TLS_HELLO ? "TLS handshake with the client failed"
                                               : "TLS handshake with the client failed after "
                                                 "the service's",
                   e == SSL_ERROR_SYSCALL ? sys_err : 0);
    return false;
}

static bool step_upstream(struct px_conn *c)
{
    struct px_tls *x = c->tls;
    int r, e, sys_err;

    ERR_clear_error();
    errno = 0;
    r = SSL_do_handshake(x->ssl[1]);
    sys_err = errno;
    if (r != 1) {
        e = SSL_get_error(x->ssl[1], r);
        if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
            want(c, 1, e);
            return true;
        }
        tls_failed_sys(c, "TLS handshake with the service failed",
                       e == SSL_ERROR_SYSCALL ? sys_err : 0);
        return false;
    }
    SSL_get0_alpn_selected(x->ssl[1], &x->alpn_sel, &x->alpn_sel_len);
    /* The service's bytes (a ticket, a greeting) wait until the client's handshake is done. */
    event_del(c->s[1].rev);
    x->state = PX_TLS_FINISH;
    event_add(c->s[0].rev, NULL);
    return step_client(c);
}

bool px_tls_step(struct px_conn *c, int side)
{
    struct px_tls *x = c->tls;

    switch (x->state) {
    case PX_TLS_HELLO:
    case PX_TLS_FINISH:
        if (side == 0)
            return step_client(c);
        /* The service is not heard until the client's handshake is done. */
        event_del(c->s[1].rev);
        return true;
    case PX_TLS_UPSTREAM:
        if (side == 1)
            return step_upstream(c);
        event_del(c->s[0].rev);
        return true;
    default:
        return true;
    }
}

void px_tls_connected(struct px_conn *c)
{
    /* The client speaks first (its ClientHello); the service's side is read from its own
     * handshake on (or, upstream plain, from the end of the client's). */
    event_add(c->s[0].rev, NULL);
}

/* ---- plaintext ---- */

bool px_tls_side(const struct px_conn *c, int side)
{
    return c->tls != NULL && c->tls->ssl[side] != NULL;
}

ssize_t px_tls_recv(struct px_conn *c, int side, uint8_t *buf, size_t cap, bool *eof)
{
    SSL *ssl = c->tls->ssl[side];
    size_t got = 0;

    *eof = false;
    ERR_clear_error();
    while (cap - got >= PX_TLS_RECORD_MAX || got == 0) {
        size_t n = 0;
        int e;

        if (SSL_read_ex(ssl, buf + got, cap - got, &n) == 1) {
            got += n;
            continue;
        }
        e = SSL_get_error(ssl, 0);
        if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
            /* A post-handshake message (a ticket, a key update) that wants the socket
             * writable is retried at the next readable event: rare, and never data lost. */
            if (got == 0) {
                errno = EAGAIN;
                return -1;
            }
            break;
        }
        if (e == SSL_ERROR_ZERO_RETURN) {
            *eof = true;
            break;
        }
        ERR_clear_error();
        if (got > 0)
            break; /* what came before the failure goes on; the failure comes next read */
        errno = ECONNRESET;
        return -1;
    }
    /* Plaintext left in OpenSSL (a read that stopped with the buffer full) has no socket event
     * to bring it: come back at once. */
    if (!*eof && SSL_has_pending(ssl))
        event_active(c->s[side].rev, EV_READ, 0);
    return (ssize_t)got;
}

ssize_t px_tls_send(struct px_conn *c, int side, const uint8_t *data, size_t len)
{
    SSL *ssl = c->tls->ssl[side];
    size_t off = 0;

    ERR_clear_error();
    while (off < len) {
        size_t n = 0;
        int e;

        if (SSL_write_ex(ssl, data + off, len - off, &n) == 1) {
            off += n;
            continue;
        }
        e = SSL_get_error(ssl, 0);
        if (e == SSL_ERROR_WANT_WRITE || e == SSL_ERROR_WANT_READ)
            break; /* the rest is retried with the same bytes from pend */
        ERR_clear_error();
        errno = EPIPE;
        return -1;
    }
    return (ssize_t)off;
}

void px_tls_shutdown(struct px_conn *c, int side)
{
    /* A close_notify before the FIN, best effort: a peer that wants one gets it. */
    ERR_clear_error();
    (void)SSL_shutdown(c->tls->ssl[side]);
    ERR_clear_error();
}

int px_tls_init(void)
{
    px_tls_conn_idx = SSL_get_ex_new_index(0, NULL, NULL, NULL, NULL);
    if (px_tls_conn_idx < 0) {
        fgx_err("OpenSSL: no ex_data index");
        return -ENOMEM;
    }
    return 0;
}
