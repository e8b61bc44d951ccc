/* Message channels: nng req/rep sockets behind fgx/chan.h, so that nng stays in this file.
 * nng's own error codes are translated here, once, into negative errnos. */
#include "fgx/chan.h"
#include "fgx/chan_tls.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
#include <nng/protocol/reqrep0/req.h>
#include <nng/supplemental/tls/tls.h>
#include <nng/supplemental/util/platform.h>

#include "fgx/log.h"

#define CHAN_REFUSED_RING 64

struct fgx_chan {
    nng_socket sock;
    int peers; /* pipes connected now; updated by nng's pipe callbacks */
    /* TLS admission (fgx/chan_tls.h). nng reports REM_POST even for a pipe closed in ADD_PRE,
     * so the ids of refused pipes are kept to leave peers alone when they go. */
    fgx_chan_admit_fn admit;
    void *admit_arg;
    nng_mtx *refused_mtx;
    int refused[CHAN_REFUSED_RING];
    unsigned refused_next;
    struct fgx_chan_req *spare; /* the context the next fgx_chan_recv_req() receives on */
};

/* One received request and the nng context its reply must go back through. */
struct fgx_chan_req {
    nng_ctx ctx;
    nng_aio *aio;
};

static void chan_req_free(struct fgx_chan_req *r)
{
    if (!r)
        return;
    nng_aio_free(r->aio);
    nng_ctx_close(r->ctx);
    free(r);
}

static int chan_errno(int rv)
{
    switch (rv) {
    case 0:
        return 0;
    case NNG_ETIMEDOUT:
        return -ETIMEDOUT;
    case NNG_ECLOSED:
        return -EPIPE;
    case NNG_ECONNREFUSED:
    case NNG_ENOENT:
        return -ECONNREFUSED;
    case NNG_ENOMEM:
        return -ENOMEM;
    case NNG_EADDRINUSE:
        return -EADDRINUSE;
    case NNG_EINVAL:
    case NNG_EADDRINVAL:
        return -EINVAL;
    case NNG_EPERM:
        return -EPERM;
    case NNG_ENOTSUP:
        return -ENOTSUP;
    case NNG_EPEERAUTH:
    case NNG_ECRYPTO:
        return -EKEYREJECTED;
    case NNG_ECONNRESET:
    case NNG_ECONNSHUT:
    case NNG_ECONNABORTED:
        /* The peer closed the connection: e.g. controld refusing a peer outside --allow. */
        return -ECONNRESET;
    default:
        return -EIO;
    }
}

static void chan_pipe_cb(nng_pipe p, nng_pipe_ev ev, void *arg)
{
    struct fgx_chan *c = arg;

    if (ev == NNG_PIPE_EV_ADD_POST) {
        __atomic_add_fetch(&c->peers, 1, __ATOMIC_RELAXED);
    } else if (ev == NNG_PIPE_EV_REM_POST) {
        bool refused = false;

        if (c->refused_mtx) {
            nng_mtx_lock(c->refused_mtx);
            for (unsigned i = 0; i < CHAN_REFUSED_RING && !refused; i++) {
                if (c->refused[i] == nng_pipe_id(p) && c->refused[i] != 0) {
                    c->refused[i] = 0;
                    refused = true;
                }
            }
            nng_mtx_unlock(c->refused_mtx);
        }
        if (!refused)
            __atomic_sub_fetch(&c->peers, 1, __ATOMIC_RELAXED);
    }
}

static int chan_open(enum fgx_chan_role role, struct fgx_chan **out)
{
    struct fgx_chan *c = calloc(1, sizeof(*c));
    int rv;

    if (!c)
        return -ENOMEM;
    rv = role == FGX_CHAN_REQ ? nng_req0_open(&c->sock) : nng_rep0_open(&c->sock);
    if (rv != 0) {
        fgx_err("nng: cannot open a socket: %s", nng_strerror(rv));
        free(c);
        return chan_errno(rv);
    }
    nng_pipe_notify(c->sock, NNG_PIPE_EV_ADD_POST, chan_pipe_cb, c);
    nng_pipe_notify(c->sock, NNG_PIPE_EV_REM_POST, chan_pipe_cb, c);
    /* Messages carry whole rulesets: hyperscan databases of thousands of patterns. */
    nng_socket_set_size(c->sock, NNG_OPT_RECVMAXSZ, 512u << 20);
    if (role == FGX_CHAN_REQ)
        nng_socket_set_ms(c->sock, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE);
    *out = c;
    return 0;
}

int fgx_chan_listen(const char *url, enum fgx_chan_role role, struct fgx_chan **out)
{
    struct fgx_chan *c;
    nng_listener l;
    int rv;

    rv = chan_open(role, &c);
    if (rv < 0)
        return rv;
    rv = nng_listener_create(&l, c->sock, url);
    if (rv == 0 && strncmp(url, "ipc://", 6) == 0)
        rv = nng_listener_set_int(l, NNG_OPT_IPC_PERMISSIONS, 0600);
    if (rv == 0)
        rv = nng_listener_start(l, 0);
    if (rv != 0) {
        fgx_err("nng: cannot listen on %s: %s", url, nng_strerror(rv));
        nng_close(c->sock);
        free(c);
        return chan_errno(rv);
    }
    *out = c;
    return 0;
}

static long long now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int fgx_chan_dial(const char *url, enum fgx_chan_role role, int block_ms, struct fgx_chan **out)
{
    struct fgx_chan *c;
    int rv;

    rv = chan_open(role, &c);
    if (rv < 0)
        return rv;
    if (block_ms <= 0) {
        /* Dial in the background, retrying until the peer appears. */
        rv = nng_dial(c->sock, url, NULL, NNG_FLAG_NONBLOCK);
    } else {
        long long deadline = now_ms() + block_ms;
        for (;;) {
            rv = nng_dial(c->sock, url, NULL, 0);
            if (rv == 0 || now_ms() >= deadline ||
                (rv != NNG_ECONNREFUSED && rv != NNG_ENOENT && rv != NNG_ETIMEDOUT))
                break;
            nng_msleep(20);
        }
    }
    if (rv != 0) {
        /* The caller tells the user why; logging here too would say it twice. */
        nng_close(c->sock);
        free(c);
        return chan_errno(rv);
    }
    *out = c;
    return 0;
}

int fgx_chan_dial_tls(const char *url, enum fgx_chan_role role, const char *ca_pem_path,
                      const char *server_name, int block_ms, struct fgx_chan **out)
{
    nng_tls_config *cfg = NULL;
    struct fgx_chan *c;
    long long deadline = now_ms() + (block_ms > 0 ? block_ms : 0);
    int rv;

    rv = chan_open(role, &c);
    if (rv < 0)
        return rv;
    rv = nng_tls_config_alloc(&cfg, NNG_TLS_MODE_CLIENT);
    if (rv == 0)
        rv = nng_tls_config_ca_file(cfg, ca_pem_path);
    /* Required: a server whose certificate does not chain to the pin is dropped in the
     * handshake, before a request leaves this process. */
    if (rv == 0)
        rv = nng_tls_config_auth_mode(cfg, NNG_TLS_AUTH_MODE_REQUIRED);
    if (rv == 0 && server_name)
        rv = nng_tls_config_server_name(cfg, server_name);
    if (rv != 0) {
        fgx_err("nng: cannot set up TLS for %s: %s", url, nng_strerror(rv));
        goto out;
    }
    /* A dialer whose first synchronous dial failed does not retry: make a new one each time. */
    for (;;) {
        nng_dialer d = NNG_DIALER_INITIALIZER;

        rv = nng_dialer_create(&d, c->sock, url);
        if (rv == 0)
            rv = nng_dialer_set_ptr(d, NNG_OPT_TLS_CONFIG, cfg);
        if (rv == 0)
            rv = nng_dialer_start(d, block_ms > 0 ? 0 : NNG_FLAG_NONBLOCK);
        if (rv == 0)
            break;
        if (nng_dialer_id(d) > 0)
            nng_dialer_close(d);
        if (block_ms <= 0 || now_ms() >= deadline ||
            (rv != NNG_ECONNREFUSED && rv != NNG_ETIMEDOUT))
            break;
        nng_msleep(50);
    }
out:
    /* The dialer holds its own reference to the configuration. */
    if (cfg)
        nng_tls_config_free(cfg);
    if (rv != 0) {
        nng_close(c->sock);
        free(c);
        return chan_errno(rv);
    }
    *out = c;
    return 0;
}

int fgx_chan_send(struct fgx_chan *c, const void *buf, size_t len, int timeout_ms)
{
    nng_socket_set_ms(c->sock, NNG_OPT_SENDTIMEO, timeout_ms < 0 ? NNG_DURATION_INFINITE
                                                                   : timeout_ms);
    return chan_errno(nng_send(c->sock, (void *)buf, len, 0));
}

int fgx_chan_recv(struct fgx_chan *c, void **buf, size_t *len, int timeout_ms)
{
    void *nbuf = NULL;
    size_t nlen = 0;
    int rv;

    nng_socket_set_ms(c->sock, NNG_OPT_RECVTIMEO, timeout_ms < 0 ? NNG_DURATION_INFINITE
                                                                   : timeout_ms);
    rv = nng_recv(c->sock, &nbuf, &nlen, NNG_FLAG_ALLOC);
    if (rv != 0)
        return chan_errno(rv);
    /* Hand out plain malloc memory so callers never need nng_free(). */
    *buf = malloc(nlen ? nlen : 1);
    if (!*buf) {
        nng_free(nbuf, nlen);
        return -ENOMEM;
    }
    memcpy(*buf, nbuf, nlen);
    *len = nlen;
    nng_free(nbuf, nlen);
    return 0;
}

int fgx_chan_call(struct fgx_chan *c, const void *req, size_t reqlen, void **reply, size_t *replylen,
                  int timeout_ms)
{
    int rv = fgx_chan_send(c, req, reqlen, timeout_ms);

    if (rv < 0)
        return rv;
    return fgx_chan_recv(c, reply, replylen, timeout_ms);
}

int fgx_chan_peers(struct fgx_chan *c)
{
    return __atomic_load_n(&c->peers, __ATOMIC_RELAXED);
}

void fgx_chan_close(struct fgx_chan *c)
{
    if (!c)
        return;
    chan_req_free(c->spare);
    nng_close(c->sock);
    if (c->refused_mtx)
        nng_mtx_free(c->refused_mtx);
    free(c);
}

/* ---- TLS listeners and senders' addresses (fgx/chan_tls.h) ---- */

static void peer_from_sockaddr(const nng_sockaddr *sa, struct fgx_peer *peer)
{
    static const uint8_t v4mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

    memset(peer, 0, sizeof(*peer));
    if (sa->s_family == NNG_AF_INET) {
        peer->family = 4;
        memcpy(peer->addr, &sa->s_in.sa_addr, 4);
        peer->port = ntohs(sa->s_in.sa_port);
    } else if (sa->s_family == NNG_AF_INET6) {
        if (memcmp(sa->s_in6.sa_addr, v4mapped, sizeof(v4mapped)) == 0) {
            peer->family = 4;
            memcpy(peer->addr, sa->s_in6.sa_addr + 12, 4);
        } else {
            peer->family = 6;
            memcpy(peer->addr, sa->s_in6.sa_addr, 16);
        }
        peer->port = ntohs(sa->s_in6.sa_port);
    }
}

static int pipe_peer(nng_pipe p, struct fgx_peer *peer)
{
    nng_sockaddr sa;
    int rv = nng_pipe_get_addr(p, NNG_OPT_REMADDR, &sa);

    if (rv != 0)
        return chan_errno(rv);
    peer_from_sockaddr(&sa, peer);
    return 0;
}

static void chan_admit_cb(nng_pipe p, nng_pipe_ev ev, void *arg)
{
    struct fgx_chan *c = arg;
    struct fgx_peer peer;

    if (ev != NNG_PIPE_EV_ADD_PRE || !c->admit)
        return;
    /* A peer whose address cannot be read is not admitted: the check must not fail open. */
    if (pipe_peer(p, &peer) == 0 && (peer.family == 0 || c->admit(&peer, c->admit_arg)))
        return;
    nng_mtx_lock(c->refused_mtx);
    c->refused[c->refused_next++ % CHAN_REFUSED_RING] = nng_pipe_id(p);
    nng_mtx_unlock(c->refused_mtx);
    nng_pipe_close(p);
}

int fgx_chan_listen_tls(struct fgx_chan *c, const char *url, const char *cert_pem,
                        const char *key_pem, fgx_chan_admit_fn admit, void *arg)
{
    nng_tls_config *cfg = NULL;
    nng_listener l;
    int rv;

    if (admit && !c->refused_mtx) {
        rv = nng_mtx_alloc(&c->refused_mtx);
        if (rv != 0)
            return chan_errno(rv);
        c->admit = admit;
        c->admit_arg = arg;
        nng_pipe_notify(c->sock, NNG_PIPE_EV_ADD_PRE, chan_admit_cb, c);
    }
    rv = nng_tls_config_alloc(&cfg, NNG_TLS_MODE_SERVER);
    if (rv == 0)
        rv = nng_tls_config_auth_mode(cfg, NNG_TLS_AUTH_MODE_NONE);
    if (rv == 0)
        rv = nng_tls_config_own_cert(cfg, cert_pem, key_pem, NULL);
    if (rv != 0) {
        fgx_err("nng: cannot set up TLS for %s: %s", url, nng_strerror(rv));
        goto out;
    }
    rv = nng_listener_create(&l, c->sock, url);
    if (rv == 0)
        rv = nng_listener_set_ptr(l, NNG_OPT_TLS_CONFIG, cfg);
    if (rv == 0)
        rv = nng_listener_start(l, 0);
    if (rv != 0)
        fgx_err("nng: cannot listen on %s: %s", url, nng_strerror(rv));
out:
    /* The listener holds its own reference. */
    if (cfg)
        nng_tls_config_free(cfg);
    return chan_errno(rv);
}

int fgx_chan_recv_peer(struct fgx_chan *c, void **buf, size_t *len, int timeout_ms,
                       struct fgx_peer *peer)
{
    nng_msg *msg = NULL;
    size_t nlen;
    int rv;

    nng_socket_set_ms(c->sock, NNG_OPT_RECVTIMEO, timeout_ms < 0 ? NNG_DURATION_INFINITE
                                                                   : timeout_ms);
    rv = nng_recvmsg(c->sock, &msg, 0);
    if (rv != 0)
        return chan_errno(rv);
    if (pipe_peer(nng_msg_get_pipe(msg), peer) < 0) {
        /* The sender left already; its reply would go nowhere anyway. */
        memset(peer, 0, sizeof(*peer));
        peer->family = -1;
    }
    nlen = nng_msg_len(msg);
    *buf = malloc(nlen ? nlen : 1);
    if (!*buf) {
        nng_msg_free(msg);
        return -ENOMEM;
    }
    memcpy(*buf, nng_msg_body(msg), nlen);
    *len = nlen;
    nng_msg_free(msg);
    return 0;
}

/* ---- requests answered out of order (fgx/chan_tls.h) ---- */

int fgx_chan_recv_req(struct fgx_chan *c, void **buf, size_t *len, int timeout_ms,
                      struct fgx_peer *peer, struct fgx_chan_req **req)
{
    struct fgx_chan_req *r = c->spare;
    nng_msg *msg;
    size_t nlen;
    int rv;

    if (!r) {
        r = calloc(1, sizeof(*r));
        if (!r)
            return -ENOMEM;
        rv = nng_ctx_open(&r->ctx, c->sock);
        if (rv == 0 && (rv = nng_aio_alloc(&r->aio, NULL, NULL)) != 0)
            nng_ctx_close(r->ctx);
        if (rv != 0) {
            fgx_err("nng: cannot open a request context: %s", nng_strerror(rv));
            free(r);
            return chan_errno(rv);
        }
        c->spare = r;
    }
    nng_aio_set_timeout(r->aio, timeout_ms < 0 ? NNG_DURATION_INFINITE : timeout_ms);
    nng_ctx_recv(r->ctx, r->aio);
    nng_aio_wait(r->aio);
    rv = nng_aio_result(r->aio);
    if (rv != 0)
        return chan_errno(rv);
    msg = nng_aio_get_msg(r->aio);
    if (pipe_peer(nng_msg_get_pipe(msg), peer) < 0) {
        memset(peer, 0, sizeof(*peer));
        peer->family = -1;
    }
    nlen = nng_msg_len(msg);
    *buf = malloc(nlen ? nlen : 1);
    if (!*buf) {
        nng_msg_free(msg);
        return -ENOMEM;
    }
    memcpy(*buf, nng_msg_body(msg), nlen);
    *len = nlen;
    nng_msg_free(msg);
    /* This context now belongs to the request; the next receive opens another. */
    c->spare = NULL;
    *req = r;
    return 0;
}

int fgx_chan_reply(struct fgx_chan *c, struct fgx_chan_req *req, const void *buf, size_t len,
                   int timeout_ms)
{
    nng_msg *msg = NULL;
    int rv;

    if (!req)
        return -EINVAL;
    rv = nng_msg_alloc(&msg, len);
    if (rv == 0) {
        memcpy(nng_msg_body(msg), buf, len);
        nng_aio_set_msg(req->aio, msg);
        nng_aio_set_timeout(req->aio, timeout_ms < 0 ? NNG_DURATION_INFINITE : timeout_ms);
        nng_ctx_send(req->ctx, req->aio);
        nng_aio_wait(req->aio);
        rv = nng_aio_result(req->aio);
        if (rv != 0)
            nng_msg_free(msg); /* not sent: still ours */
    }
    /* Keep one context for the next receive; more are closed. */
    if (!c->spare)
        c->spare = req;
    else
        chan_req_free(req);
    return chan_errno(rv);
}
