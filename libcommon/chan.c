/* Message channels: nng req/rep sockets behind fgx/chan.h, so that nng stays in this file.
 * nng's own error codes are translated here, once, into negative errnos. */
#include "fgx/chan.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
#include <nng/protocol/reqrep0/req.h>
#include <nng/supplemental/util/platform.h>

#include "fgx/log.h"

struct fgx_chan {
    nng_socket sock;
    int peers; /* pipes connected now; updated by nng's pipe callbacks */
};

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
    default:
        return -EIO;
    }
}

static void chan_pipe_cb(nng_pipe p, nng_pipe_ev ev, void *arg)
{
    struct fgx_chan *c = arg;

    (void)p;
    if (ev == NNG_PIPE_EV_ADD_POST)
        __atomic_add_fetch(&c->peers, 1, __ATOMIC_RELAXED);
    else if (ev == NNG_PIPE_EV_REM_POST)
        __atomic_sub_fetch(&c->peers, 1, __ATOMIC_RELAXED);
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
    nng_close(c->sock);
    free(c);
}
