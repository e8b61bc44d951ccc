/* Message channels: nng req/rep sockets behind fgx/chan.h, so that nng stays in this file.
 * nng's own error codes are translated here, once, into negative errnos. */
#include "fgx/chan.h"
#include "fgx/chan_relay.h"
#include "fgx/chan_tls.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <linux/tcp.h> /* struct tcp_info with tcpi_bytes_received */

#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
#include <nng/protocol/reqrep0/req.h>
#include <nng/supplemental/tls/tls.h>
#include <nng/supplemental/util/platform.h>

#include "fgx/connlimit.h"
#include "fgx/log.h"

#define CHAN_REFUSED_RING 64
/* The TLS guard: connections tracked at once (beyond that a new one is closed at once), and
 * how often it looks. */
#define CHAN_GUARD_MAX 4096
#define CHAN_GUARD_PERIOD_MS 200
/* nng listens with a backlog of its own (128) and has no option for it: a burst of idle
 * connections past it left real clients' handshakes in SYN-RECV for seconds. The guard sets
 * this one on the listening socket (listen(2) again changes it). */
#define CHAN_LISTEN_BACKLOG 4096

/* A TLS pipe that completed nng's negotiation, and whether it has sent a request yet. */
struct chan_live {
    uint32_t pipe;
    struct fgx_peer peer;
    bool active;
};

/* A TCP connection to the TLS listener, as seen by the guard's look at the process's fds. */
struct chan_seen {
    ino_t ino;
    uint64_t first_ms;
    uint64_t sweep;   /* the last sweep that saw it */
    uint64_t live_rx; /* 1 + bytes received when first seen negotiated; 0: not yet */
    bool sent;        /* it has sent more since: a request, unless it is a slow drip */
};

struct chan_guard {
    nng_thread *thr;
    int stop;
    int handshake_ms;
    struct fgx_connlimit lim;
    fgx_chan_guard_fn cut_fn;
    fgx_chan_guard_gauge_fn gauge_fn;
    void *arg;
    uint16_t port; /* the listener's TCP port */
    nng_mtx *mtx;  /* live[] */
    struct chan_live live[CHAN_GUARD_MAX];
    size_t nlive;
    /* the guard thread's own */
    struct chan_seen seen[CHAN_GUARD_MAX];
    size_t nseen;
    uint64_t sweep;
};

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
    uint16_t tls_port;        /* of the last TLS listener, for the guard */
    struct chan_guard *guard; /* NULL until fgx_chan_tls_guard() */
    uint32_t relay_id;        /* the relay listener's id (fgx/chan_relay.h); 0: none */
    nng_mtx *calls_mtx;       /* calls_done */
    struct chan_call *calls_done; /* finished async calls, freed outside nng's callbacks */
    int calls;                    /* outstanding async calls */
};

/* One received request and the nng context its reply must go back through. */
struct fgx_chan_req {
    nng_ctx ctx;
    nng_aio *aio;
};

static void calls_reap(struct fgx_chan *c);

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

static int pipe_peer(nng_pipe p, struct fgx_peer *peer);

static void guard_pipe_add(struct chan_guard *g, nng_pipe p)
{
    struct chan_live l = {.pipe = (uint32_t)nng_pipe_id(p)};

    if (pipe_peer(p, &l.peer) < 0 || l.peer.family == 0)
        return; /* local: nothing to guard */
    nng_mtx_lock(g->mtx);
    if (g->nlive < CHAN_GUARD_MAX)
        g->live[g->nlive++] = l;
    /* else: untracked, so taken for one that never negotiated and closed at its deadline */
    nng_mtx_unlock(g->mtx);
}

static void guard_pipe_rem(struct chan_guard *g, nng_pipe p)
{
    uint32_t id = (uint32_t)nng_pipe_id(p);

    nng_mtx_lock(g->mtx);
    for (size_t i = 0; i < g->nlive; i++) {
        if (g->live[i].pipe == id) {
            g->live[i] = g->live[--g->nlive];
            break;
        }
    }
    nng_mtx_unlock(g->mtx);
}

/* The pipe sent a request: it is a client, not a connection that stays silent. */
static void guard_pipe_active(struct chan_guard *g, nng_pipe p)
{
    uint32_t id = (uint32_t)nng_pipe_id(p);

    if (!g)
        return;
    nng_mtx_lock(g->mtx);
    for (size_t i = 0; i < g->nlive; i++)
        if (g->live[i].pipe == id)
            g->live[i].active = true;
    nng_mtx_unlock(g->mtx);
}

static void chan_pipe_cb(nng_pipe p, nng_pipe_ev ev, void *arg)
{
    struct fgx_chan *c = arg;
    struct chan_guard *g = __atomic_load_n(&c->guard, __ATOMIC_ACQUIRE);

    if (ev == NNG_PIPE_EV_ADD_POST) {
        __atomic_add_fetch(&c->peers, 1, __ATOMIC_RELAXED);
        if (g)
            guard_pipe_add(g, p);
    } else if (ev == NNG_PIPE_EV_REM_POST) {
        if (g)
            guard_pipe_rem(g, p);
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

struct fgx_chan_ctx {
    nng_ctx ctx;
    nng_aio *aio;
};

int fgx_chan_ctx_open(struct fgx_chan *c, struct fgx_chan_ctx **out)
{
    struct fgx_chan_ctx *x = calloc(1, sizeof(*x));
    int rv;

    if (!x)
        return -ENOMEM;
    rv = nng_ctx_open(&x->ctx, c->sock);
    if (rv == 0 && (rv = nng_aio_alloc(&x->aio, NULL, NULL)) != 0)
        nng_ctx_close(x->ctx);
    if (rv != 0) {
        fgx_err("nng: cannot open a context: %s", nng_strerror(rv));
        free(x);
        return chan_errno(rv);
    }
    *out = x;
    return 0;
}

int fgx_chan_ctx_recv(struct fgx_chan_ctx *x, void **buf, size_t *len, int timeout_ms)
{
    nng_msg *msg;
    int rv;

    nng_aio_set_timeout(x->aio, timeout_ms < 0 ? NNG_DURATION_INFINITE : timeout_ms);
    nng_ctx_recv(x->ctx, x->aio);
    nng_aio_wait(x->aio);
    rv = nng_aio_result(x->aio);
    if (rv != 0)
        return chan_errno(rv);
    msg = nng_aio_get_msg(x->aio);
    *len = nng_msg_len(msg);
    *buf = malloc(*len ? *len : 1);
    if (*buf)
        memcpy(*buf, nng_msg_body(msg), *len);
    nng_msg_free(msg);
    return *buf ? 0 : -ENOMEM;
}

int fgx_chan_ctx_send(struct fgx_chan_ctx *x, const void *buf, size_t len, int timeout_ms)
{
    nng_msg *msg = NULL;
    int rv = nng_msg_alloc(&msg, len);

    if (rv != 0)
        return chan_errno(rv);
    memcpy(nng_msg_body(msg), buf, len);
    nng_aio_set_msg(x->aio, msg);
    nng_aio_set_timeout(x->aio, timeout_ms < 0 ? NNG_DURATION_INFINITE : timeout_ms);
    nng_ctx_send(x->ctx, x->aio);
    nng_aio_wait(x->aio);
    rv = nng_aio_result(x->aio);
    if (rv != 0)
        nng_msg_free(msg); /* not sent: still ours */
    return chan_errno(rv);
}

void fgx_chan_ctx_close(struct fgx_chan_ctx *x)
{
    if (!x)
        return;
    nng_aio_stop(x->aio);
    nng_aio_free(x->aio);
    nng_ctx_close(x->ctx);
    free(x);
}

/* A call in flight on its own context: sent, then received, by nng's callbacks. state is
 * __atomic: 0 running, 1 done (rv, reply and rlen set); efd (an eventfd) is readable from then
 * on, for a caller that waits on it beside other things (fgx_chan_call_fd()). */
struct fgx_chan_pending {
    nng_ctx ctx;
    nng_aio *aio;
    bool sent;
    int state;
    int efd;
    int rv;
    void *reply;
    size_t rlen;
};

static void pending_cb(void *arg)
{
    struct fgx_chan_pending *p = arg;
    int rv = nng_aio_result(p->aio);
    nng_msg *msg;

    if (!p->sent && rv == 0) {
        p->sent = true;
        nng_ctx_recv(p->ctx, p->aio);
        return;
    }
    if (!p->sent)
        nng_msg_free(nng_aio_get_msg(p->aio)); /* not sent: still ours */
    p->rv = chan_errno(rv);
    if (rv == 0) {
        msg = nng_aio_get_msg(p->aio);
        p->rlen = nng_msg_len(msg);
        p->reply = malloc(p->rlen ? p->rlen : 1);
        if (p->reply)
            memcpy(p->reply, nng_msg_body(msg), p->rlen);
        else
            p->rv = -ENOMEM;
        nng_msg_free(msg);
    }
    __atomic_store_n(&p->state, 1, __ATOMIC_RELEASE);
    (void)eventfd_write(p->efd, 1);
}

int fgx_chan_call_begin(struct fgx_chan *c, const void *req, size_t len, int timeout_ms,
                        struct fgx_chan_pending **out)
{
    struct fgx_chan_pending *p = calloc(1, sizeof(*p));
    nng_msg *msg = NULL;
    int rv;

    if (!p)
        return -ENOMEM;
    p->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (p->efd == -1) {
        rv = -errno;
        free(p);
        return rv;
    }
    rv = nng_ctx_open(&p->ctx, c->sock);
    if (rv != 0) {
        close(p->efd);
        free(p);
        return chan_errno(rv);
    }
    rv = nng_aio_alloc(&p->aio, pending_cb, p);
    if (rv == 0)
        rv = nng_msg_alloc(&msg, len);
    if (rv != 0) {
        nng_aio_free(p->aio);
        nng_ctx_close(p->ctx);
        close(p->efd);
        free(p);
        return chan_errno(rv);
    }
    memcpy(nng_msg_body(msg), req, len);
    nng_aio_set_msg(p->aio, msg);
    nng_aio_set_timeout(p->aio, timeout_ms < 0 ? NNG_DURATION_INFINITE : timeout_ms);
    nng_ctx_send(p->ctx, p->aio);
    *out = p;
    return 0;
}

static void pending_free(struct fgx_chan_pending *p)
{
    /* nng_aio_stop waits for the callback: after it nothing touches p */
    nng_aio_stop(p->aio);
    nng_aio_free(p->aio);
    nng_ctx_close(p->ctx);
    close(p->efd);
    free(p->reply);
    free(p);
}

int fgx_chan_call_fd(const struct fgx_chan_pending *p)
{
    return p->efd;
}

int fgx_chan_call_end(struct fgx_chan_pending *p, void **reply, size_t *len)
{
    int rv;

    if (!__atomic_load_n(&p->state, __ATOMIC_ACQUIRE))
        return -EINPROGRESS;
    rv = p->rv;
    if (rv == 0) {
        *reply = p->reply;
        *len = p->rlen;
        p->reply = NULL;
    }
    pending_free(p);
    return rv;
}

void fgx_chan_call_cancel(struct fgx_chan_pending *p)
{
    if (p)
        pending_free(p);
}

int fgx_chan_peers(struct fgx_chan *c)
{
    return __atomic_load_n(&c->peers, __ATOMIC_RELAXED);
}

static void guard_free(struct chan_guard *g);

void fgx_chan_close(struct fgx_chan *c)
{
    struct chan_guard *g;

    if (!c)
        return;
    chan_req_free(c->spare);
    g = c->guard;

    /* The pipe callbacks stop using the guard, nng closes its pipes, then the guard's thread
     * is joined and its memory freed. */
    __atomic_store_n(&c->guard, NULL, __ATOMIC_RELEASE);
    nng_close(c->sock);
    guard_free(g);
    if (c->calls_mtx) {
        /* Closing the socket ended every async call: wait for their callbacks. */
        while (__atomic_load_n(&c->calls, __ATOMIC_ACQUIRE) > 0)
            nng_msleep(5);
        calls_reap(c);
        nng_mtx_free(c->calls_mtx);
    }
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
    if (rv != 0) {
        fgx_err("nng: cannot listen on %s: %s", url, nng_strerror(rv));
    } else {
        nng_sockaddr sa;

        if (nng_listener_get_addr(l, NNG_OPT_LOCADDR, &sa) == 0)
            c->tls_port = ntohs(sa.s_family == NNG_AF_INET ? sa.s_in.sa_port : sa.s_in6.sa_port);
    }
out:
    /* The listener holds its own reference. */
    if (cfg)
        nng_tls_config_free(cfg);
    return chan_errno(rv);
}

/* A received request's body into *buf (malloc'd, the caller's), its sender into *peer (family
 * -1 when the sender left already: its reply would go nowhere anyway). Frees msg. */
static int msg_take(struct fgx_chan *c, nng_msg *msg, void **buf, size_t *len,
                    struct fgx_peer *peer)
{
    size_t nlen = nng_msg_len(msg);

    const uint8_t *body = nng_msg_body(msg);

    guard_pipe_active(c->guard, nng_msg_get_pipe(msg));
    if (pipe_peer(nng_msg_get_pipe(msg), peer) < 0) {
        memset(peer, 0, sizeof(*peer));
        peer->family = -1;
    }
    if (c->relay_id &&
        nng_listener_id(nng_pipe_listener(nng_msg_get_pipe(msg))) == (int)c->relay_id) {
        /* A relayed request: its first bytes name the real sender, which is never local. */
        if (nlen >= sizeof(*peer)) {
            memcpy(peer, body, sizeof(*peer));
            body += sizeof(*peer);
            nlen -= sizeof(*peer);
        } else {
            nlen = 0;
        }
        if (peer->family != 4 && peer->family != 6) {
            memset(peer, 0, sizeof(*peer));
            peer->family = -1;
        }
    }
    *buf = malloc(nlen ? nlen : 1);
    if (!*buf) {
        nng_msg_free(msg);
        return -ENOMEM;
    }
    memcpy(*buf, body, nlen);
    *len = nlen;
    nng_msg_free(msg);
    return 0;
}

int fgx_chan_recv_peer(struct fgx_chan *c, void **buf, size_t *len, int timeout_ms,
                       struct fgx_peer *peer)
{
    nng_msg *msg = NULL;
    int rv;

    nng_socket_set_ms(c->sock, NNG_OPT_RECVTIMEO, timeout_ms < 0 ? NNG_DURATION_INFINITE
                                                                   : timeout_ms);
    rv = nng_recvmsg(c->sock, &msg, 0);
    if (rv != 0)
        return chan_errno(rv);
    return msg_take(c, msg, buf, len, peer);
}

/* ---- requests answered out of order (fgx/chan_tls.h) ---- */

int fgx_chan_recv_req(struct fgx_chan *c, void **buf, size_t *len, int timeout_ms,
                      struct fgx_peer *peer, struct fgx_chan_req **req)
{
    struct fgx_chan_req *r = c->spare;
    nng_msg *msg;
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
    rv = msg_take(c, msg, buf, len, peer);
    if (rv != 0)
        return rv;
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

/* ---- the TLS guard: connections that never complete a handshake or send a request ----
 *
 * nng's TLS transport hands a connection to the socket only once the TLS handshake and its own
 * negotiation are done, and sets no deadline on either: a peer that connects and sends nothing
 * (or half a ClientHello) holds a socket, memory and an mbedTLS context for ever, and the
 * admission callback never sees it. So a thread looks, a few times a second, at the process's
 * own sockets connected to the listener's port (nng runs in this process, so they are ours),
 * and shuts down (shutdown(2): nng then sees the end of the stream and closes it) those that
 * have not sent a first request within the deadline and, past per_peer such connections from
 * one address, the oldest of them. Peers outside the admission check are left to it (it
 * closes them once nng has negotiated, which fgexctl reports as such), or to the deadline. */

static uint64_t guard_now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

bool fgx_peer_from_sockaddr(const struct sockaddr *sa, struct fgx_peer *peer)
{
    static const uint8_t v4mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

    memset(peer, 0, sizeof(*peer));
    if (!sa)
        return false;
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)sa;

        peer->family = 4;
        memcpy(peer->addr, &in->sin_addr, 4);
        peer->port = ntohs(in->sin_port);
        return true;
    }
    if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;

        if (memcmp(&in6->sin6_addr, v4mapped, sizeof(v4mapped)) == 0) {
            peer->family = 4;
            memcpy(peer->addr, (const uint8_t *)&in6->sin6_addr + 12, 4);
        } else {
            peer->family = 6;
            memcpy(peer->addr, &in6->sin6_addr, 16);
        }
        peer->port = ntohs(in6->sin6_port);
        return true;
    }
    return false;
}

static uint16_t sockaddr_port(const struct sockaddr_storage *ss)
{
    if (ss->ss_family == AF_INET)
        return ntohs(((const struct sockaddr_in *)ss)->sin_port);
    if (ss->ss_family == AF_INET6)
        return ntohs(((const struct sockaddr_in6 *)ss)->sin6_port);
    return 0;
}

static bool peer_same_host(const struct fgx_peer *a, const struct fgx_peer *b)
{
    return a->family == b->family && memcmp(a->addr, b->addr, a->family == 4 ? 4 : 16) == 0;
}

/* A pending connection found by this sweep. */
struct guard_cand {
    int fd;
    ino_t ino;
    uint64_t first_ms;
    struct fgx_peer peer;
    bool silent; /* not one byte received */
};

static struct chan_seen *guard_seen(struct chan_guard *g, ino_t ino, uint64_t now)
{
    for (size_t i = 0; i < g->nseen; i++) {
        if (g->seen[i].ino == ino) {
            g->seen[i].sweep = g->sweep;
            return &g->seen[i];
        }
    }
    if (g->nseen == CHAN_GUARD_MAX)
        return NULL;
    g->seen[g->nseen] = (struct chan_seen){.ino = ino, .first_ms = now, .sweep = g->sweep};
    return &g->seen[g->nseen++];
}

/* The socket behind fd, if it is a TCP connection to the guarded port: its inode and peer. */
static bool guard_conn(const struct chan_guard *g, int fd, ino_t *ino, struct fgx_peer *peer)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    struct stat st;
    int type;
    socklen_t tl = sizeof(type);

    if (fstat(fd, &st) == -1 || !S_ISSOCK(st.st_mode))
        return false;
    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl) == -1 || type != SOCK_STREAM)
        return false;
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) == -1 || sockaddr_port(&ss) != g->port)
        return false;
    sl = sizeof(ss);
    if (getpeername(fd, (struct sockaddr *)&ss, &sl) == -1) /* the listener itself */
        return false;
    *ino = st.st_ino;
    return fgx_peer_from_sockaddr((const struct sockaddr *)&ss, peer);
}

/* Shut the connection down if fd still is the socket that was looked at. */
static bool guard_cut(int fd, ino_t ino)
{
    struct stat st;

    if (fstat(fd, &st) == -1 || st.st_ino != ino)
        return false;
    return shutdown(fd, SHUT_RDWR) == 0;
}

/* Whether the connection to peer has not sent a request yet: it has not completed nng's
 * negotiation, or it has and controld's loop has not read a request from it. seen->sent notes
 * that the kernel received more on it after the negotiation: a request that waits in nng's
 * queue while the loop is busy, or a request dripped byte by byte, which nng would wait for
 * for ever; such a connection gets a longer deadline, not none. */
static bool guard_pending(struct chan_guard *g, int fd, const struct fgx_peer *peer,
                          struct chan_seen *seen)
{
    struct chan_live *l = NULL;
    bool pending = true;

    nng_mtx_lock(g->mtx);
    for (size_t i = 0; i < g->nlive && !l; i++)
        if (g->live[i].peer.port == peer->port && peer_same_host(&g->live[i].peer, peer))
            l = &g->live[i];
    if (l && l->active) {
        pending = false;
    } else if (l && seen) {
        struct tcp_info ti;
        socklen_t tl = sizeof(ti);

        memset(&ti, 0, sizeof(ti));
        if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &tl) == 0 &&
            tl >= offsetof(struct tcp_info, tcpi_bytes_received) + sizeof(ti.tcpi_bytes_received)) {
            if (seen->live_rx == 0)
                seen->live_rx = ti.tcpi_bytes_received + 1;
            else if (ti.tcpi_bytes_received + 1 > seen->live_rx)
                seen->sent = true;
        }
    }
    nng_mtx_unlock(g->mtx);
    return pending;
}

static bool fd_silent(int fd)
{
    struct tcp_info ti;
    socklen_t tl = sizeof(ti);

    memset(&ti, 0, sizeof(ti));
    return getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &tl) == 0 &&
           tl >= offsetof(struct tcp_info, tcpi_bytes_received) + sizeof(ti.tcpi_bytes_received) &&
           ti.tcpi_bytes_received == 0;
}

static void guard_report(struct chan_guard *g, const struct fgx_peer *peer, int why, unsigned n)
{
    if (n && g->cut_fn)
        g->cut_fn(peer, why, n, g->arg);
}

static void guard_sweep(struct chan_guard *g, struct guard_cand *cand, struct fgx_conn_cand *pick)
{
    static unsigned long long last_ns;
    unsigned cut_late = 0, cut_many = 0;
    uint64_t now = guard_now_ms();
    size_t n = 0, keep = 0;
    struct dirent *de;
    DIR *d;

    g->sweep++;
    d = opendir("/proc/self/fd");
    if (!d)
        return;
    while ((de = readdir(d)) != NULL && n < CHAN_GUARD_MAX) {
        struct guard_cand *k = &cand[n];
        struct chan_seen *seen;
        char *end;
        long fd = strtol(de->d_name, &end, 10);

        if (*end != '\0' || end == de->d_name || fd == dirfd(d))
            continue;
        if (!guard_conn(g, (int)fd, &k->ino, &k->peer))
            continue;
        seen = guard_seen(g, k->ino, now);
        if (!guard_pending(g, (int)fd, &k->peer, seen))
            continue;
        k->fd = (int)fd;
        k->first_ms = seen ? seen->first_ms : 0; /* no room to track it: as if expired */
        if (now - k->first_ms >= (uint64_t)g->handshake_ms * (seen && seen->sent ? 3 : 1)) {
            if (guard_cut(k->fd, k->ino)) {
                cut_late++;
                guard_report(g, &k->peer, FGX_GUARD_LATE, 1);
            }
            continue;
        }
        k->silent = fd_silent(k->fd);
        n++;
    }
    /* Past per_peer pending connections from one address (those that sent nothing first,
     * then the oldest: a real client from a busy address, a team behind one NAT, has sent its
     * hello and keeps its turn), and past max in all (from the address holding the most,
     * never an address's only one). */
    for (size_t i = 0; i < n; i++)
        pick[i] = (struct fgx_conn_cand){.src = cand[i].peer,
                                         .since_ms = cand[i].first_ms,
                                         .tag = (uint32_t)i,
                                         .kind = FGX_CONN_PENDING,
                                         .silent = cand[i].silent};
    fgx_connlimit_pick(&g->lim, pick, n);
    for (size_t i = 0; i < n; i++) {
        const struct guard_cand *k = &cand[pick[i].tag];

        if (pick[i].cut && guard_cut(k->fd, k->ino)) {
            cut_many++;
            guard_report(g, &k->peer,
                         pick[i].cut == FGX_CUT_PER_SRC ? FGX_GUARD_PER_PEER : FGX_GUARD_FULL, 1);
        }
    }
    closedir(d);
    /* Forget the connections no longer there. */
    for (size_t i = 0; i < g->nseen; i++)
        if (g->seen[i].sweep == g->sweep)
            g->seen[keep++] = g->seen[i];
    g->nseen = keep;
    if (g->gauge_fn)
        g->gauge_fn((unsigned)(n - cut_many), g->arg);
    if (cut_late || cut_many)
        fgx_log_ratelimited(&last_ns, FGX_LOG_WARN,
                            "control: closed %u connection(s) that sent no request within %d "
                            "ms, and %u past %u pending from one address or %u in all",
                            cut_late, g->handshake_ms, cut_many, g->lim.per_src, g->lim.max);
}

static void guard_main(void *arg)
{
    struct chan_guard *g = arg;
    struct guard_cand *cand = calloc(CHAN_GUARD_MAX, sizeof(*cand));
    struct fgx_conn_cand *pick = calloc(CHAN_GUARD_MAX, sizeof(*pick));

    if (!cand || !pick) {
        fgx_err("control: no memory for the TLS connection guard");
        free(cand);
        free(pick);
        return;
    }
    while (!__atomic_load_n(&g->stop, __ATOMIC_ACQUIRE)) {
        nng_msleep(CHAN_GUARD_PERIOD_MS);
        guard_sweep(g, cand, pick);
    }
    free(cand);
    free(pick);
}

static void guard_free(struct chan_guard *g)
{
    if (!g)
        return;
    __atomic_store_n(&g->stop, 1, __ATOMIC_RELEASE);
    if (g->thr)
        nng_thread_destroy(g->thr); /* joins */
    if (g->mtx)
        nng_mtx_free(g->mtx);
    free(g);
}

/* The TLS listener's own socket: the one bound to its port that has no peer. */
static void guard_backlog(uint16_t port)
{
    struct dirent *de;
    DIR *d = opendir("/proc/self/fd");

    if (!d)
        return;
    while ((de = readdir(d)) != NULL) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof(ss);
        char *end;
        long fd = strtol(de->d_name, &end, 10);
        int type;
        socklen_t tl = sizeof(type);

        if (*end != '\0' || end == de->d_name || fd == dirfd(d))
            continue;
        if (getsockopt((int)fd, SOL_SOCKET, SO_TYPE, &type, &tl) == -1 || type != SOCK_STREAM)
            continue;
        if (getsockname((int)fd, (struct sockaddr *)&ss, &sl) == -1 || sockaddr_port(&ss) != port)
            continue;
        sl = sizeof(ss);
        if (getpeername((int)fd, (struct sockaddr *)&ss, &sl) == 0 || errno != ENOTCONN)
            continue;
        if (listen((int)fd, CHAN_LISTEN_BACKLOG) == -1)
            fgx_warn("control: cannot raise the TLS listener's backlog: %s", strerror(errno));
    }
    closedir(d);
}

int fgx_chan_tls_guard(struct fgx_chan *c, const struct fgx_chan_guard_config *cfg)
{
    struct chan_guard *g;
    int rv;

    if (c->guard || c->tls_port == 0 || cfg->handshake_ms <= 0 || cfg->per_peer == 0)
        return -EINVAL;
    g = calloc(1, sizeof(*g));
    if (!g)
        return -ENOMEM;
    g->handshake_ms = cfg->handshake_ms;
    g->lim = (struct fgx_connlimit){.max = cfg->max, .per_src = cfg->per_peer};
    g->cut_fn = cfg->cut;
    g->gauge_fn = cfg->gauge;
    g->arg = cfg->arg;
    g->port = c->tls_port;
    rv = nng_mtx_alloc(&g->mtx);
    if (rv != 0) {
        free(g);
        return chan_errno(rv);
    }
    guard_backlog(g->port);
    /* Pipes that negotiated before now are not tracked: the guard starts right after the
     * listener, before the loop serves anything, so there are none worth keeping. */
    __atomic_store_n(&c->guard, g, __ATOMIC_RELEASE);
    rv = nng_thread_create(&g->thr, guard_main, g);
    if (rv != 0) {
        fgx_err("control: cannot start the TLS connection guard: %s", nng_strerror(rv));
        __atomic_store_n(&c->guard, NULL, __ATOMIC_RELEASE);
        g->thr = NULL;
        guard_free(g);
        return chan_errno(rv);
    }
    return 0;
}

/* ---- the relay (fgx/chan_relay.h) ---- */

int fgx_chan_listen_relay(struct fgx_chan *c, const char *url)
{
    nng_listener l;
    int rv;

    if (strncmp(url, "inproc://", 9) != 0)
        return -EINVAL;
    rv = nng_listener_create(&l, c->sock, url);
    if (rv == 0) {
        c->relay_id = (uint32_t)nng_listener_id(l);
        rv = nng_listener_start(l, 0);
    }
    if (rv != 0) {
        fgx_err("nng: cannot listen on %s: %s", url, nng_strerror(rv));
        c->relay_id = 0;
    }
    return chan_errno(rv);
}

struct chan_call {
    struct chan_call *next; /* in calls_done */
    struct fgx_chan *c;
    nng_ctx ctx;
    nng_aio *aio;
    bool sent;
    fgx_chan_done_fn done;
    void *arg;
};

/* nng's aio and context may not be freed from their own callback: finished calls wait here. */
static void calls_reap(struct fgx_chan *c)
{
    struct chan_call *k;

    if (!c->calls_mtx)
        return;
    nng_mtx_lock(c->calls_mtx);
    k = c->calls_done;
    c->calls_done = NULL;
    nng_mtx_unlock(c->calls_mtx);
    while (k) {
        struct chan_call *next = k->next;

        nng_aio_free(k->aio);
        nng_ctx_close(k->ctx);
        free(k);
        k = next;
    }
}

static void call_finish(struct chan_call *k, int rv, void *reply, size_t len)
{
    struct fgx_chan *c = k->c;

    k->done(k->arg, rv, reply, len);
    nng_mtx_lock(c->calls_mtx);
    k->next = c->calls_done;
    c->calls_done = k;
    nng_mtx_unlock(c->calls_mtx);
    __atomic_sub_fetch(&c->calls, 1, __ATOMIC_RELEASE);
}

static void call_cb(void *arg)
{
    struct chan_call *k = arg;
    int rv = nng_aio_result(k->aio);
    nng_msg *msg;
    void *buf;
    size_t len;

    if (!k->sent) {
        if (rv != 0) {
            nng_msg_free(nng_aio_get_msg(k->aio)); /* not sent: still ours */
            call_finish(k, chan_errno(rv), NULL, 0);
            return;
        }
        k->sent = true;
        nng_ctx_recv(k->ctx, k->aio);
        return;
    }
    if (rv != 0) {
        call_finish(k, chan_errno(rv), NULL, 0);
        return;
    }
    msg = nng_aio_get_msg(k->aio);
    len = nng_msg_len(msg);
    buf = malloc(len ? len : 1);
    if (buf)
        memcpy(buf, nng_msg_body(msg), len);
    nng_msg_free(msg);
    call_finish(k, buf ? 0 : -ENOMEM, buf, buf ? len : 0);
}

int fgx_chan_call_async(struct fgx_chan *c, const struct fgx_peer *peer, const void *req,
                        size_t len, int timeout_ms, fgx_chan_done_fn done, void *arg)
{
    struct chan_call *k;
    nng_msg *msg = NULL;
    int rv;

    if (!c->calls_mtx) {
        /* The first call comes before any other thread uses c for calls. */
        rv = nng_mtx_alloc(&c->calls_mtx);
        if (rv != 0)
            return chan_errno(rv);
    }
    calls_reap(c);
    k = calloc(1, sizeof(*k));
    if (!k)
        return -ENOMEM;
    k->c = c;
    k->done = done;
    k->arg = arg;
    rv = nng_ctx_open(&k->ctx, c->sock);
    if (rv != 0) {
        free(k);
        return chan_errno(rv);
    }
    rv = nng_aio_alloc(&k->aio, call_cb, k);
    if (rv == 0)
        rv = nng_msg_alloc(&msg, sizeof(*peer) + len);
    if (rv != 0) {
        nng_aio_free(k->aio);
        nng_ctx_close(k->ctx);
        free(k);
        return chan_errno(rv);
    }
    memcpy(nng_msg_body(msg), peer, sizeof(*peer));
    memcpy((uint8_t *)nng_msg_body(msg) + sizeof(*peer), req, len);
    nng_aio_set_msg(k->aio, msg);
    nng_aio_set_timeout(k->aio, timeout_ms < 0 ? NNG_DURATION_INFINITE : timeout_ms);
    __atomic_add_fetch(&c->calls, 1, __ATOMIC_RELEASE);
    nng_ctx_send(k->ctx, k->aio);
    return 0;
}

int fgx_chan_calls(struct fgx_chan *c)
{
    return __atomic_load_n(&c->calls, __ATOMIC_ACQUIRE);
}
