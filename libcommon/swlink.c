/* A data-path thread's link to scriptworker (fgx/swlink.h): the part of the script stage that
 * nfqworker and proxyworker do alike: the sockets, the frames, the files, the log entries. */
#include "fgx/swlink.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "fgx/log.h"
#include "fgx/ruleset.h"

#define SWL_RETRY_MS 100  /* between attempts to reach a scriptworker that is not there */
#define SWL_OUT_MAX 16384 /* CLOSE frames waiting for an interpreter: past this, sent alone */
#define SWL_CTL (-1)      /* "from the parent's socket", where an interpreter's index goes */
#define SWL_CTL_TAG FGX_SW_PROCS_MAX /* the parent's socket in the epoll set */

static const char synth_detail[] = "\0interpreter replaced";

static uint64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void warn_send(const char *what)
{
    static __thread unsigned long long last_log;

    fgx_log_ratelimited(&last_log, FGX_LOG_WARN, "script: cannot send to scriptworker: %s",
                        what);
}

/* A socket to PATH (or PATH.i), its HELLO sent. -errno when nobody listens there. */
static int sock_connect(const struct fgx_swlink *l, int idx)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    struct fgx_sw_hdr hello = {.type = FGX_SW_HELLO, .conn = l->id};
    int fd, sz = (int)FGX_SW_MSG_MAX * 2, n;

    n = idx < 0 ? snprintf(a.sun_path, sizeof(a.sun_path), "%s", l->path)
                : snprintf(a.sun_path, sizeof(a.sun_path), "%s.%d", l->path, idx);
    if (n < 0 || (size_t)n >= sizeof(a.sun_path))
        return -ENAMETOOLONG;
    fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd == -1)
        return -errno;
    /* the largest DATA frame is one message, and the send buffer bounds a message: root may
     * go past net.core.wmem_max */
    if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &sz, sizeof(sz)) == -1)
        (void)setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) == -1 ||
        send(fd, &hello, sizeof(hello), MSG_NOSIGNAL) != (ssize_t)sizeof(hello)) {
        int e = -errno;

        close(fd);
        return e;
    }
    return fd;
}

static int watch(struct fgx_swlink *l, int fd, uint32_t tag)
{
    struct epoll_event ev = {.events = EPOLLIN, .data.u32 = tag};

    return epoll_ctl(l->fd, EPOLL_CTL_ADD, fd, &ev) == -1 ? -errno : 0;
}

/* Interpreter i's socket ended (replaced, or scriptworker gone): its calls are answered by
 * fgx_swlink_recv(), after whatever the parent said last (a TIMEOUT among them). */
static void py_down(struct fgx_swlink *l, unsigned i)
{
    struct fgx_swlink_py *y = &l->py[i];

    if (y->fd >= 0)
        close(y->fd); /* out of the epoll set with it */
    y->fd = -1;
    y->fresh = false;
    y->outlen = 0;
    l->ctl_drained = false;
    l->need = true;
}

static void ctl_down(struct fgx_swlink *l)
{
    if (l->ctl >= 0)
        close(l->ctl);
    l->ctl = -1;
    /* scriptworker went: its interpreters with it */
    for (unsigned i = 0; i < FGX_SW_PROCS_MAX; i++)
        if (l->py[i].fd >= 0)
            py_down(l, i);
    l->nprocs = 0;
    l->need = true;
}

int fgx_swlink_init(struct fgx_swlink *l, const char *url, uint64_t id)
{
    memset(l, 0, sizeof(*l));
    l->fd = l->ctl = -1;
    for (unsigned i = 0; i < FGX_SW_PROCS_MAX; i++)
        l->py[i].fd = -1;
    l->ctl_drained = true;
    if (url == NULL || *url == '\0')
        return 0;
    if (strncmp(url, "ipc://", 6) == 0)
        url += 6;
    /* PATH.15 must fit a socket address */
    if (strlen(url) + 4 > sizeof(((struct sockaddr_un *)0)->sun_path) ||
        strlen(url) >= sizeof(l->path)) {
        fgx_err("scriptworker at %s: the path is too long for a socket", url);
        return -ENAMETOOLONG;
    }
    (void)snprintf(l->path, sizeof(l->path), "%s", url);
    l->fd = epoll_create1(EPOLL_CLOEXEC);
    l->rbuf = malloc(FGX_SW_REPLY_MAX);
    if (l->fd == -1 || l->rbuf == NULL) {
        int e = l->fd == -1 ? -errno : -ENOMEM;

        fgx_err("scriptworker at %s: %s", url, strerror(-e));
        return e;
    }
    l->id = id;
    l->up = true;
    l->need = true;
    fgx_swlink_reconnect(l, NULL); /* scriptworker usually listens already */
    return 0;
}

void fgx_swlink_release(struct fgx_swlink *l)
{
    if (l->ctl >= 0)
        close(l->ctl);
    for (unsigned i = 0; i < FGX_SW_PROCS_MAX; i++) {
        if (l->py[i].fd >= 0)
            close(l->py[i].fd);
        free(l->py[i].calls);
        free(l->py[i].out);
    }
    if (l->fd >= 0)
        close(l->fd);
    free(l->rbuf);
    free(l->sent);
    memset(l, 0, sizeof(*l));
    l->fd = l->ctl = -1;
}

/* One message to interpreter i: what waits in its out queue, then the frame (h NULL: only the
 * queue). The socket is non-blocking: a full one is -EAGAIN, never a wait. */
static int py_send(struct fgx_swlink *l, unsigned i, const struct fgx_sw_hdr *h, const void *p)
{
    struct fgx_swlink_py *y = &l->py[i];
    struct iovec iov[3];
    struct msghdr mh = {.msg_iov = iov};
    size_t total = 0;

    if (y->outlen > 0)
        iov[mh.msg_iovlen++] = (struct iovec){.iov_base = y->out, .iov_len = y->outlen};
    if (h != NULL) {
        iov[mh.msg_iovlen++] = (struct iovec){.iov_base = (void *)h, .iov_len = sizeof(*h)};
        if (h->len > 0)
            iov[mh.msg_iovlen++] = (struct iovec){.iov_base = (void *)p, .iov_len = h->len};
    }
    for (size_t k = 0; k < mh.msg_iovlen; k++)
        total += iov[k].iov_len;
    if (total == 0)
        return 0;
    if (sendmsg(y->fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL) != (ssize_t)total) {
        /* an ended socket is found by the reader (its end is readable), which answers its
         * calls: nothing is closed here */
        int e = errno;

        warn_send(strerror(e));
        return e == EAGAIN || e == ENOBUFS || e == EMSGSIZE ? -EAGAIN : -ENOTCONN;
    }
    y->outlen = 0;
    return 0;
}

/* Every file of cfg to interpreter i, newly connected: ahead of its first DATA frame. */
static void py_files(struct fgx_swlink *l, unsigned i, const struct fgx_wcfg *cfg)
{
    for (size_t k = 0; k < cfg->nservices; k++) {
        const struct fgx_wsvc *s = &cfg->svc[k];
        struct fgx_sw_hdr h;

        if (s->script == NULL)
            continue;
        h = (struct fgx_sw_hdr){.type = FGX_SW_SCRIPT,
                                .service = s->id,
                                .conn = s->script_deadline_ms,
                                .seq = ++l->seq,
                                .len = (uint32_t)s->script_len};
        (void)py_send(l, i, &h, s->script);
    }
    l->py[i].fresh = false;
    l->py[i].files_seq = l->seq;
}

/* Interpreter i said it has no file for a service this thread sent (FGX_SW_VERDICT_NOFILE,
 * to a DATA frame numbered seq): it gets every file again before the next DATA frame, once
 * for all the calls sent before the files went. */
static void py_refile(struct fgx_swlink *l, unsigned i, uint32_t seq)
{
    struct fgx_swlink_py *y = &l->py[i];

    if (y->fd < 0 || y->fresh || (int32_t)(seq - y->files_seq) <= 0)
        return;
    y->fresh = true;
    l->need = true;
}

void fgx_swlink_reconnect(struct fgx_swlink *l, const struct fgx_wcfg *cfg)
{
    uint64_t now;
    bool tried = false;

    if (!l->up)
        return;
    l->need = false;
    now = now_ms();
    if (l->ctl < 0) {
        char p[sizeof(l->path) + 16];
        unsigned n = 0;
        int fd;

        l->need = true;
        if (now < l->retry_ms)
            return;
        l->retry_ms = now + SWL_RETRY_MS;
        tried = true;
        fd = sock_connect(l, -1);
        if (fd < 0)
            return;
        /* the parent binds its own socket after every interpreter's: they all exist now */
        while (n < FGX_SW_PROCS_MAX &&
               (size_t)snprintf(p, sizeof(p), "%s.%u", l->path, n) < sizeof(p) &&
               access(p, F_OK) == 0)
            n++;
        if (n == 0 || watch(l, fd, SWL_CTL_TAG) < 0) {
            close(fd);
            return;
        }
        l->ctl = fd;
        l->nprocs = n;
        l->need = false;
    }
    for (unsigned i = 0; i < l->nprocs; i++) {
        struct fgx_swlink_py *y = &l->py[i];

        if (y->fd < 0) {
            int fd;

            /* one whose calls are still being answered waits for fgx_swlink_recv() */
            if (y->ncalls > 0 || (!tried && now < l->retry_ms)) {
                l->need = true;
                continue;
            }
            if (!tried) {
                l->retry_ms = now + SWL_RETRY_MS;
                tried = true;
            }
            if (y->calls == NULL)
                y->calls = malloc(FGX_SWLINK_CALLS * sizeof(*y->calls));
            fd = y->calls != NULL ? sock_connect(l, (int)i) : -ENOMEM;
            if (fd >= 0 && watch(l, fd, i) < 0) {
                close(fd);
                fd = -1;
            }
            if (fd < 0) {
                l->need = true;
                continue;
            }
            y->fd = fd;
            y->fresh = true;
            y->head = y->ncalls = 0;
            y->outlen = 0;
        }
        if (y->fresh) {
            if (cfg != NULL)
                py_files(l, i, cfg);
            else
                l->need = true;
        }
    }
}

int fgx_swlink_send(struct fgx_swlink *l, const struct fgx_sw_hdr *h, const void *p)
{
    struct fgx_swlink_py *y;
    unsigned i;
    int rv;

    if (!l->up)
        return -ENOTCONN;
    if (h->type == FGX_SW_SCRIPT || h->type == FGX_SW_UNSCRIPT) {
        /* every interpreter; a fresh one gets the whole list before its first DATA */
        for (i = 0; i < l->nprocs; i++)
            if (l->py[i].fd >= 0 && !l->py[i].fresh)
                (void)py_send(l, i, h, p);
        return 0;
    }
    if (l->nprocs == 0)
        return -ENOTCONN;
    i = h->hash % l->nprocs;
    y = &l->py[i];
    if (y->fd < 0 || y->fresh)
        return -ENOTCONN;
    if (h->type != FGX_SW_DATA) {
        /* nothing answers it: it goes with the next message to that interpreter */
        if (y->outlen + sizeof(*h) + h->len > SWL_OUT_MAX && (rv = py_send(l, i, NULL, NULL)) < 0)
            return rv;
        if (y->out == NULL && (y->out = malloc(SWL_OUT_MAX)) == NULL)
            return -ENOMEM;
        if (y->outlen + sizeof(*h) + h->len > SWL_OUT_MAX)
            return py_send(l, i, h, p);
        memcpy(y->out + y->outlen, h, sizeof(*h));
        if (h->len > 0)
            memcpy(y->out + y->outlen + sizeof(*h), p, h->len);
        y->outlen += sizeof(*h) + h->len;
        return 0;
    }
    if (y->ncalls == FGX_SWLINK_CALLS) {
        warn_send("too many calls waiting for one interpreter");
        return -EAGAIN;
    }
    rv = py_send(l, i, h, p);
    if (rv == 0)
        y->calls[(y->head + y->ncalls++) % FGX_SWLINK_CALLS] =
            (struct fgx_swlink_call){.conn = h->conn, .seq = h->seq, .service = h->service};
    return rv;
}

void fgx_swlink_switch(struct fgx_swlink *l, const struct fgx_wcfg *cfg)
{
    struct fgx_swlink_sent *now;
    size_t n = 0;

    if (!l->up)
        return;
    now = calloc(cfg != NULL ? cfg->nservices + 1 : 1, sizeof(*now));
    if (now == NULL)
        return; /* the old list stays: the next generation compares with it */
    for (size_t i = 0; cfg != NULL && i < cfg->nservices; i++) {
        const struct fgx_wsvc *s = &cfg->svc[i];
        uint64_t hash;
        bool known = false;

        if (s->script == NULL)
            continue;
        hash = fgx_hash64(s->script, s->script_len, s->script_deadline_ms);
        for (size_t j = 0; j < l->nsent && !known; j++)
            known = l->sent[j].id == s->id && l->sent[j].hash == hash;
        now[n++] = (struct fgx_swlink_sent){.id = s->id, .hash = hash};
        if (!known) {
            struct fgx_sw_hdr h = {.type = FGX_SW_SCRIPT,
                                   .service = s->id,
                                   .conn = s->script_deadline_ms,
                                   .seq = ++l->seq,
                                   .len = (uint32_t)s->script_len};

            /* ahead of any DATA under it, on the same ordered sockets */
            (void)fgx_swlink_send(l, &h, s->script);
        }
    }
    for (size_t j = 0; j < l->nsent; j++) {
        bool still = false;

        for (size_t k = 0; k < n && !still; k++)
            still = now[k].id == l->sent[j].id;
        if (!still) {
            struct fgx_sw_hdr h = {.type = FGX_SW_UNSCRIPT, .service = l->sent[j].id};

            (void)fgx_swlink_send(l, &h, NULL);
        }
    }
    free(l->sent);
    l->sent = now;
    l->nsent = n;
    if (l->need && cfg != NULL)
        fgx_swlink_reconnect(l, cfg);
}

/* The next message from a socket into rbuf: 1, 0 when none waits, -1 when the socket ended. */
static int read_msg(struct fgx_swlink *l, int from)
{
    int fd = from == SWL_CTL ? l->ctl : l->py[from].fd;
    ssize_t n;

    if (fd < 0)
        return 0;
    n = recv(fd, l->rbuf, FGX_SW_REPLY_MAX, MSG_DONTWAIT);
    if (n > 0) {
        l->rlen = (size_t)n;
        l->roff = 0;
        l->rfrom = from;
        return 1;
    }
    if (n == -1 && (errno == EAGAIN || errno == EINTR))
        return 0;
    if (from == SWL_CTL)
        ctl_down(l);
    else
        py_down(l, (unsigned)from);
    return -1;
}

/* A VERDICT read from `from`: true when it answers a call still waiting (and takes it). */
static bool verdict_take(struct fgx_swlink *l, int from, const struct fgx_sw_hdr *h)
{
    struct fgx_swlink_py *y;

    if (from == SWL_CTL) {
        /* the parent's TIMEOUT for the call an interpreter was stuck in */
        for (unsigned i = 0; i < FGX_SW_PROCS_MAX; i++) {
            y = &l->py[i];
            for (uint32_t k = 0; k < y->ncalls; k++) {
                struct fgx_swlink_call *c = &y->calls[(y->head + k) % FGX_SWLINK_CALLS];

                if (c->conn == h->conn && c->seq == h->seq && !c->answered) {
                    c->answered = true;
                    return true;
                }
            }
        }
        return false;
    }
    y = &l->py[from];
    /* the oldest call first: an interpreter answers in order, so it is the one */
    for (uint32_t k = 0; k < y->ncalls; k++) {
        const struct fgx_swlink_call *c = &y->calls[(y->head + k) % FGX_SWLINK_CALLS];

        if (c->conn == h->conn && c->seq == h->seq) {
            bool fresh = !c->answered;

            /* the k calls ahead of it were never answered (this does not happen): their
             * sender's own timer decides them */
            y->head = (y->head + k + 1) % FGX_SWLINK_CALLS;
            y->ncalls -= k + 1;
            return fresh;
        }
    }
    /* a verdict for no call waiting here (a stray, one answered twice): skipped, and the
     * calls waiting stay, for their own verdicts or the ERROR of a replaced interpreter */
    return false;
}

/* The next call of a gone interpreter i, answered here: true with *h filled. */
static bool synth(struct fgx_swlink *l, unsigned i, struct fgx_sw_hdr *h)
{
    struct fgx_swlink_py *y = &l->py[i];

    while (y->ncalls > 0) {
        struct fgx_swlink_call c = y->calls[y->head];

        y->head = (y->head + 1) % FGX_SWLINK_CALLS;
        y->ncalls--;
        if (c.answered)
            continue;
        *h = (struct fgx_sw_hdr){.type = FGX_SW_VERDICT,
                                 .code = FGX_SW_ERROR,
                                 .service = c.service,
                                 .conn = c.conn,
                                 .seq = c.seq,
                                 .len = sizeof(synth_detail) - 1};
        return true;
    }
    y->head = 0;
    return false;
}

int fgx_swlink_recv(struct fgx_swlink *l, struct fgx_sw_hdr *h, const uint8_t **payload,
                    size_t *len)
{
    if (!l->up)
        return -EAGAIN;
    for (;;) {
        if (l->rlen - l->roff >= sizeof(*h)) {
            struct fgx_sw_hdr fh;
            const uint8_t *p = l->rbuf + l->roff + sizeof(fh);

            memcpy(&fh, l->rbuf + l->roff, sizeof(fh));
            if (fh.len > l->rlen - l->roff - sizeof(fh)) {
                l->roff = l->rlen; /* cut short: the rest of the message is not frames */
                continue;
            }
            l->roff += sizeof(fh) + fh.len;
            if (fh.type == FGX_SW_LOG) {
                /* a call's entry names its connection (conn): its addresses, while the
                 * connection is still there (its verdict comes after) */
                struct fgx_dp_script_log where = {0};
                bool known =
                    fh.conn != 0 && l->conn_fn != NULL && l->conn_fn(l->conn_arg, fh.conn, &where);

                fgx_swlink_log_push(fh.service, (const char *)p, fh.len, known ? &where : NULL);
            }
            if (fh.type == FGX_SW_ACK && l->ack_fn != NULL)
                l->ack_fn(l->conn_arg, fh.service, fh.code);
            if (fh.type == FGX_SW_VERDICT && fh.code == FGX_SW_ERROR &&
                (fh.hash & FGX_SW_VERDICT_NOFILE) && l->rfrom != SWL_CTL)
                py_refile(l, (unsigned)l->rfrom, fh.seq);
            if (fh.type != FGX_SW_VERDICT || !verdict_take(l, l->rfrom, &fh))
                continue;
            *h = fh;
            if (payload != NULL)
                *payload = p;
            if (len != NULL)
                *len = fh.len;
            return 0;
        }
        l->rlen = l->roff = 0;
        /* an interpreter went away: what the parent said (its TIMEOUT) comes before the
         * ERRORs for the rest of its calls */
        if (!l->ctl_drained) {
            if (read_msg(l, SWL_CTL) > 0)
                continue;
            l->ctl_drained = true;
        }
        for (unsigned i = 0; i < FGX_SW_PROCS_MAX; i++)
            if (l->py[i].fd < 0 && l->py[i].ncalls > 0 && synth(l, i, h)) {
                if (payload != NULL)
                    *payload = (const uint8_t *)synth_detail;
                if (len != NULL)
                    *len = h->len;
                return 0;
            }
        if (l->nready == 0) {
            struct epoll_event ev[FGX_SW_PROCS_MAX + 1];
            int n = epoll_wait(l->fd, ev, FGX_SW_PROCS_MAX + 1, 0);

            if (n <= 0)
                return -EAGAIN;
            for (int k = 0; k < n; k++)
                l->ready[l->nready++] =
                    ev[k].data.u32 == SWL_CTL_TAG ? SWL_CTL : (int)ev[k].data.u32;
        }
        if (read_msg(l, l->ready[l->nready - 1]) <= 0)
            l->nready--; /* read to the end, or ended */
    }
}

int fgx_swlink_send_addr(struct fgx_swlink *l, const struct fgx_sw_hdr *h,
                         const struct fgx_sw_addr *a, const void *p)
{
    struct fgx_sw_hdr h2 = *h;
    uint8_t *buf = malloc(sizeof(*a) + h->len);
    int rv;

    if (buf == NULL)
        return -ENOMEM;
    memcpy(buf, a, sizeof(*a));
    if (h->len > 0)
        memcpy(buf + sizeof(*a), p, h->len);
    h2.code |= FGX_SW_DATA_ADDR;
    h2.len = (uint32_t)(sizeof(*a) + h->len);
    rv = fgx_swlink_send(l, &h2, buf);
    free(buf);
    return rv;
}

void fgx_swlink_verdict_fn(const uint8_t *payload, size_t len, char *fn, size_t cap)
{
    size_t fl = strnlen((const char *)payload, len);

    if (fl >= cap)
        fl = cap - 1;
    memcpy(fn, payload, fl);
    fn[fl] = '\0';
}

/* ---- scriptworker's log entries, until the next STATS takes them ---- */

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static struct fgx_dp_script_log log_q[FGX_SWLINK_LOG_MAX];
static size_t log_n;
static uint64_t log_lost;

void fgx_swlink_log_push(uint32_t service, const char *payload, size_t len,
                         const struct fgx_dp_script_log *where)
{
    const char *kind = payload, *fn, *text, *end = payload + len;
    struct fgx_dp_script_log *e;

    fn = memchr(kind, '\0', len);
    text = fn != NULL ? memchr(fn + 1, '\0', (size_t)(end - fn - 1)) : NULL;
    if (fn == NULL || text == NULL)
        return;
    fn++;
    text++;
    pthread_mutex_lock(&log_lock);
    if (log_n == FGX_SWLINK_LOG_MAX) {
        log_lost++;
        pthread_mutex_unlock(&log_lock);
        return;
    }
    e = &log_q[log_n];
    memset(e, 0, sizeof(*e));
    if (where != NULL) {
        e->family = where->family;
        memcpy(e->caddr, where->caddr, sizeof(e->caddr));
        memcpy(e->saddr, where->saddr, sizeof(e->saddr));
        e->cport = where->cport;
        e->sport = where->sport;
    }
    e->service_id = service;
    e->kind = strdup(kind);
    e->function = strdup(fn);
    e->text = strndup(text, (size_t)(end - text));
    if (e->kind != NULL && e->function != NULL && e->text != NULL) {
        log_n++;
    } else {
        free(e->kind);
        free(e->function);
        free(e->text);
        log_lost++;
    }
    pthread_mutex_unlock(&log_lock);
}

int fgx_swlink_logs_take(struct fgx_dp_stats *out)
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
