/* A data-path worker's link to scriptworker (fgx/swlink.h): the part of the script stage that
 * nfqworker and proxyworker do alike: the socket, the frames, the files, the log entries. */
#include "fgx/swlink.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nng/protocol/pair1/pair.h>

#include "fgx/log.h"
#include "fgx/ruleset.h"

/* nng's thread: a scriptworker (re)started knows no file yet; the sending thread sends them
 * before its next DATA frame (fgx_swlink_resend()). */
static void on_pipe_add(nng_pipe p, nng_pipe_ev ev, void *arg)
{
    struct fgx_swlink *l = arg;

    (void)p;
    (void)ev;
    __atomic_store_n(&l->resend, 1, __ATOMIC_RELEASE);
}

int fgx_swlink_init(struct fgx_swlink *l, const char *url, unsigned peer)
{
    char u[4200];
    int rv;

    memset(l, 0, sizeof(*l));
    l->fd = -1;
    if (url == NULL || *url == '\0')
        return 0;
    rv = nng_pair1_open(&l->sock);
    if (rv != 0)
        goto out;
    /* small queues: a frame that does not fit is judged by fail_open, never waited for */
    rv = nng_socket_set_int(l->sock, NNG_OPT_SENDBUF, 8192);
    if (rv == 0)
        rv = nng_socket_set_int(l->sock, NNG_OPT_RECVBUF, 8192);
    if (rv == 0)
        rv = nng_pipe_notify(l->sock, NNG_PIPE_EV_ADD_POST, on_pipe_add, l);
    if (rv == 0) {
        (void)snprintf(u, sizeof(u), "%s-%u", url, peer);
        /* non-blocking: nng keeps redialling while scriptworker starts or restarts */
        rv = nng_dial(l->sock, u, NULL, NNG_FLAG_NONBLOCK);
    }
    if (rv == 0)
        rv = nng_socket_get_int(l->sock, NNG_OPT_RECVFD, &l->fd);
    if (rv != 0) {
        nng_close(l->sock);
        l->fd = -1;
    }
out:
    if (rv != 0) {
        fgx_err("scriptworker at %s: %s", url, nng_strerror(rv));
        return -EIO;
    }
    l->up = true;
    return 0;
}

void fgx_swlink_release(struct fgx_swlink *l)
{
    if (l->up)
        nng_close(l->sock);
    if (l->msg != NULL)
        nng_msg_free(l->msg);
    free(l->sent);
    memset(l, 0, sizeof(*l));
    l->fd = -1;
}

int fgx_swlink_send(struct fgx_swlink *l, const struct fgx_sw_hdr *h, const void *p)
{
    nng_msg *m;
    int rv;

    if (!l->up)
        return -ENOTCONN;
    if (nng_msg_alloc(&m, sizeof(*h) + h->len) != 0)
        return -ENOMEM;
    memcpy(nng_msg_body(m), h, sizeof(*h));
    if (h->len)
        memcpy((uint8_t *)nng_msg_body(m) + sizeof(*h), p, h->len);
    rv = nng_sendmsg(l->sock, m, NNG_FLAG_NONBLOCK);
    if (rv != 0) {
        static __thread unsigned long long last_log;

        fgx_log_ratelimited(&last_log, FGX_LOG_WARN, "script: cannot send to scriptworker: %s",
                            nng_strerror(rv));
        nng_msg_free(m);
        return -EAGAIN;
    }
    return 0;
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

            /* ahead of any DATA under it, on the same ordered pipe */
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
}

int fgx_swlink_recv(struct fgx_swlink *l, struct fgx_sw_hdr *h, const uint8_t **payload,
                    size_t *len)
{
    if (l->msg != NULL) {
        nng_msg_free(l->msg);
        l->msg = NULL;
    }
    if (!l->up)
        return -EAGAIN;
    for (;;) {
        nng_msg *m;
        const uint8_t *body;
        size_t n;

        if (nng_recvmsg(l->sock, &m, NNG_FLAG_NONBLOCK) != 0)
            return -EAGAIN;
        n = nng_msg_len(m);
        if (n < sizeof(*h)) {
            nng_msg_free(m);
            continue;
        }
        body = nng_msg_body(m);
        memcpy(h, body, sizeof(*h));
        if (h->type == FGX_SW_LOG)
            fgx_swlink_log_push(h->service, (const char *)body + sizeof(*h), n - sizeof(*h));
        if (h->type != FGX_SW_VERDICT) {
            nng_msg_free(m);
            continue;
        }
        l->msg = m;
        if (payload != NULL)
            *payload = body + sizeof(*h);
        if (len != NULL)
            *len = n - sizeof(*h);
        return 0;
    }
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

void fgx_swlink_log_push(uint32_t service, const char *payload, size_t len)
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
