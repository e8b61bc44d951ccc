/* scriptworker, the loop: frames from the data-path workers (nng) to the interpreters, their
 * verdicts and logs back, each call's deadline watched; an interpreter past it, or dead, is
 * replaced, and the calls it held are answered (TIMEOUT for the one it was running, ERROR for
 * those behind it: their connections' state went with it). */
#include "sw.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fgx/log.h"

static void peer_send(struct sw *w, uint32_t pipe, const struct fgx_sw_hdr *h, const void *p)
{
    nng_msg *m;

    if (pipe >= w->npeers || nng_msg_alloc(&m, 0) != 0)
        return;
    if (nng_msg_append(m, h, sizeof(*h)) != 0 || (h->len && nng_msg_append(m, p, h->len) != 0)) {
        nng_msg_free(m);
        return;
    }
    /* pair1 in polyamorous mode drops what a pipe's short queue cannot take at once: wait for
     * it a little (NNG_OPT_SENDTIMEO, SW_SEND_MS) rather than lose a verdict; a peer that does
     * not read for that long gets its own timeout (fail_open) */
    if (nng_sendmsg(w->socks[pipe], m, 0) != 0) {
        nng_msg_free(m);
        w->send_lost++;
    }
}

static void verdict(struct sw *w, const struct sw_call *call, uint8_t code, uint16_t flags,
                    const char *fn, const char *detail)
{
    char buf[512];
    int n = snprintf(buf, sizeof(buf), "%s%c%s", fn ? fn : "", 0, detail ? detail : "");
    struct fgx_sw_hdr h = {.type = FGX_SW_VERDICT,
                           .code = code,
                           .hash = flags,
                           .service = call->service,
                           .conn = call->conn,
                           .seq = call->seq,
                           .len = (uint32_t)(n < (int)sizeof(buf) ? n : (int)sizeof(buf) - 1)};

    peer_send(w, call->pipe, &h, buf);
}

static void log_send(struct sw *w, uint32_t pipe, uint32_t service, const char *kind,
                     const char *fn, const char *text)
{
    char buf[1024];
    int n = snprintf(buf, sizeof(buf), "%s%c%s%c%s", kind, 0, fn ? fn : "", 0, text);
    struct fgx_sw_hdr h = {.type = FGX_SW_LOG,
                           .service = service,
                           .len = (uint32_t)(n < (int)sizeof(buf) ? n : (int)sizeof(buf) - 1)};

    peer_send(w, pipe, &h, buf);
}

static struct sw_script *script_find(struct sw *w, uint32_t service)
{
    for (size_t i = 0; i < w->nscripts; i++)
        if (w->scripts[i].service == service)
            return &w->scripts[i];
    return NULL;
}

/* Kill c, answer what it held, start a new one. why: "timeout" or "died". */
static void child_replace(struct sw *w, struct sw_child *c, bool timeout)
{
    char fn[128] = "";
    uint32_t svc = 0;

    if (c->page) {
        char page[SW_PAGE];

        memcpy(page, c->page, SW_PAGE);
        page[SW_PAGE - 1] = '\0';
        svc = (uint32_t)strtoul(page, NULL, 10);
        (void)snprintf(fn, sizeof(fn), "%s", page + strlen(page) + 1);
    }
    sw_child_kill(c);
    for (size_t i = 0; i < c->qlen; i++) {
        const struct sw_call *call = &c->q[(c->qhead + i) % SW_QMAX];

        if (i == 0 && timeout) {
            /* the log first: whoever waits for the verdict finds the reason already there */
            log_send(w, call->pipe, call->service, "timeout", fn,
                     "the call did not return within the deadline: its verdict is the "
                     "service's fail-open choice; the interpreter was replaced");
            verdict(w, call, FGX_SW_TIMEOUT, 0, fn, "past the deadline");
        } else {
            verdict(w, call, FGX_SW_ERROR, 0, "", "interpreter replaced");
        }
        if (i == 0 && !timeout)
            log_send(w, call->pipe, call->service, "restart", fn,
                     "the Python interpreter died; it was replaced");
    }
    (void)svc;
    c->qlen = c->qhead = 0;
    c->restarts++;
    if (sw_child_spawn(w, c) < 0)
        fgx_err("cannot replace an interpreter: its connections get fail-open verdicts");
}

static void on_child_frame(struct sw *w, struct sw_child *c, const struct fgx_sw_hdr *h,
                           const uint8_t *p)
{
    if (h->type == FGX_SW_VERDICT) {
        struct sw_call call;
        const char *fn = (const char *)p;
        size_t fl = strnlen(fn, h->len);
        char fname[128], detail[256];

        if (c->qlen == 0)
            return;
        call = c->q[c->qhead];
        c->qhead = (c->qhead + 1) % SW_QMAX;
        c->qlen--;
        sw_child_head_start(c);
        (void)snprintf(fname, sizeof(fname), "%.*s", (int)fl, fn);
        (void)snprintf(detail, sizeof(detail), "%.*s", fl < h->len ? (int)(h->len - fl - 1) : 0,
                       fl < h->len ? fn + fl + 1 : "");
        /* the interpreter's flags (FGX_SW_VERDICT_FINAL) go on as they are */
        verdict(w, &call, h->code, h->hash, fname, detail);
    } else if (h->type == FGX_SW_LOG) {
        struct fgx_sw_hdr out = *h;
        const struct sw_script *s = script_find(w, h->service);
        uint32_t pipe = c->qlen ? c->q[c->qhead].pipe : s ? s->pipe : w->last_pipe;

        out.conn = 0;
        peer_send(w, pipe, &out, p);
    }
    /* ACK of seq 0: the interpreter is ready. Of a file: the parent acknowledged it when it
     * gave it to every interpreter. */
    if (h->type == FGX_SW_ACK && h->seq == 0 && h->service == 0 && !c->ready) {
        c->ready = true;
        sw_child_head_start(c);
    }
}

/* Read what c wrote; whole frames are handled. Returns -1 when c is gone (EOF, error). */
static int child_read(struct sw *w, struct sw_child *c)
{
    for (;;) {
        ssize_t n;

        if (c->rcap - c->rlen < 65536) {
            size_t cap = c->rcap ? c->rcap * 2 : 131072;
            uint8_t *g = realloc(c->rbuf, cap);

            if (!g)
                return -1;
            c->rbuf = g;
            c->rcap = cap;
        }
        n = read(c->out, c->rbuf + c->rlen, c->rcap - c->rlen);
        if (n == 0)
            return -1;
        if (n == -1)
            return errno == EAGAIN || errno == EINTR ? 0 : -1;
        c->rlen += (size_t)n;
        for (;;) {
            struct fgx_sw_hdr h;

            if (c->rlen < sizeof(h))
                break;
            memcpy(&h, c->rbuf, sizeof(h));
            if (h.len > FGX_SW_MAX_PAYLOAD)
                return -1;
            if (c->rlen < sizeof(h) + h.len)
                break;
            on_child_frame(w, c, &h, c->rbuf + sizeof(h));
            memmove(c->rbuf, c->rbuf + sizeof(h) + h.len, c->rlen - sizeof(h) - h.len);
            c->rlen -= sizeof(h) + h.len;
        }
    }
}

static int script_store(struct sw *w, uint32_t pipe, const struct fgx_sw_hdr *h, const void *p)
{
    struct sw_script *s = script_find(w, h->service);
    uint8_t *frame = malloc(sizeof(*h) + h->len);

    if (!frame)
        return -ENOMEM;
    memcpy(frame, h, sizeof(*h));
    memcpy(frame + sizeof(*h), p, h->len);
    if (!s) {
        struct sw_script *g = realloc(w->scripts, (w->nscripts + 1) * sizeof(*g));

        if (!g) {
            free(frame);
            return -ENOMEM;
        }
        w->scripts = g;
        s = &w->scripts[w->nscripts++];
        memset(s, 0, sizeof(*s));
    }
    free(s->frame);
    s->service = h->service;
    s->deadline_ms = h->conn ? (uint32_t)h->conn : 100;
    s->pipe = pipe;
    s->frame = frame;
    s->len = sizeof(*h) + h->len;
    return 0;
}

static void script_drop(struct sw *w, uint32_t service)
{
    struct sw_script *s = script_find(w, service);

    if (!s)
        return;
    free(s->frame);
    *s = w->scripts[--w->nscripts];
}

static void on_peer_frame(struct sw *w, uint32_t pipe, struct fgx_sw_hdr *h, const uint8_t *p)
{
    struct fgx_sw_hdr ack = {.type = FGX_SW_ACK, .service = h->service, .seq = h->seq};
    struct sw_child *c = &w->child[h->hash % w->nprocs];
    uint64_t conn = h->conn;

    w->last_pipe = pipe;
    switch (h->type) {
    case FGX_SW_SCRIPT:
    case FGX_SW_UNSCRIPT:
        if (h->type == FGX_SW_SCRIPT) {
            const struct sw_script *old = script_find(w, h->service);

            /* each sender gives the same file: the interpreters hear of it once, and the
             * connections already under it keep their state */
            if (old && old->len == sizeof(*h) + h->len && old->deadline_ms == (uint32_t)h->conn &&
                memcmp(old->frame + sizeof(*h), p, h->len) == 0) {
                peer_send(w, pipe, &ack, NULL);
                return;
            }
            if (script_store(w, pipe, h, p) < 0)
                ack.code = 1;
        } else {
            script_drop(w, h->service);
        }
        /* every interpreter reads its frames in order: once this is in every queue, no
         * later connection can meet the old file */
        for (unsigned i = 0; i < w->nprocs; i++)
            if (w->child[i].pid > 0 && (sw_child_queue(&w->child[i], h, p) < 0 ||
                                        sw_child_flush(&w->child[i]) < 0))
                child_replace(w, &w->child[i], false);
        peer_send(w, pipe, &ack, NULL);
        return;
    case FGX_SW_OPEN:
    case FGX_SW_CLOSE:
    case FGX_SW_DATA:
        break;
    default:
        return;
    }
    /* connections of two senders never share a number in the interpreters */
    h->conn = conn ^ ((uint64_t)pipe << 48);
    if (h->type == FGX_SW_DATA) {
        const struct sw_script *s = script_find(w, h->service);
        struct sw_call call = {.pipe = pipe, .conn = conn, .seq = h->seq, .service = h->service};

        if (c->pid <= 0 || c->qlen == SW_QMAX || !s) {
            verdict(w, &call, FGX_SW_ERROR, 0, "", c->qlen == SW_QMAX ? "overload" : "no script");
            return;
        }
        call.budget_ms = s->deadline_ms;
        call.deadline_ms = UINT64_MAX;
        c->q[(c->qhead + c->qlen) % SW_QMAX] = call;
        c->qlen++;
        if (c->qlen == 1)
            sw_child_head_start(c);
    }
    if (c->pid > 0 && (sw_child_queue(c, h, p) < 0 || sw_child_flush(c) < 0))
        child_replace(w, c, false);
}

static void peer_read(struct sw *w, unsigned peer)
{
    for (;;) {
        nng_msg *m;
        struct fgx_sw_hdr h;
        size_t len;

        if (nng_recvmsg(w->socks[peer], &m, NNG_FLAG_NONBLOCK) != 0)
            return;
        len = nng_msg_len(m);
        if (len >= sizeof(h)) {
            memcpy(&h, nng_msg_body(m), sizeof(h));
            if (h.len == len - sizeof(h))
                on_peer_frame(w, peer, &h,
                              (const uint8_t *)nng_msg_body(m) + sizeof(h));
        }
        nng_msg_free(m);
    }
}

int sw_loop_run(struct sw *w)
{
    struct pollfd pfd[SW_PEERS_MAX + SW_PROCS_MAX];
    const unsigned np = w->npeers;

    while (!*w->stop) {
        uint64_t now = sw_now_ms(), next = now + 1000;
        int timeout, n;

        bool pending = false;

        for (unsigned i = 0; i < np; i++)
            pfd[i] = (struct pollfd){.fd = w->recv_fds[i], .events = POLLIN};
        for (unsigned i = 0; i < w->nprocs; i++) {
            struct sw_child *c = &w->child[i];

            if (c->pid <= 0 && sw_child_spawn(w, c) < 0) {
                pfd[np + i] = (struct pollfd){.fd = -1};
                continue;
            }
            pfd[np + i] = (struct pollfd){.fd = c->out, .events = POLLIN};
            if (c->wlen)
                (void)sw_child_flush(c);
            pending |= c->wlen > 0;
            if (c->qlen && c->q[c->qhead].deadline_ms < next)
                next = c->q[c->qhead].deadline_ms;
        }
        timeout = next > now ? (int)(next - now) : 0;
        if (timeout > 0 && pending)
            timeout = 1; /* something waits for a pipe to take it */
        n = poll(pfd, np + w->nprocs, timeout);
        if (n == -1 && errno != EINTR)
            return -errno;
        for (unsigned i = 0; n > 0 && i < np; i++)
            if (pfd[i].revents & POLLIN)
                peer_read(w, i);
        for (unsigned i = 0; i < w->nprocs; i++)
            if (pfd[np + i].fd != -1 && (pfd[np + i].revents & (POLLIN | POLLHUP | POLLERR)) &&
                child_read(w, &w->child[i]) < 0)
                child_replace(w, &w->child[i], false);
        now = sw_now_ms();
        for (unsigned i = 0; i < w->nprocs; i++) {
            struct sw_child *c = &w->child[i];

            if (c->pid > 0 && c->qlen && c->q[c->qhead].deadline_ms <= now) {
                /* its answer may be on the way: read once more before the verdict */
                if (child_read(w, c) < 0) {
                    child_replace(w, c, false);
                    continue;
                }
                if (c->qlen && c->q[c->qhead].deadline_ms <= now) {
                    struct sw_call *call = &c->q[c->qhead];
                    uint64_t cpu = sw_child_cpu_ms(c) - call->cpu0_ms;

                    /* An interpreter that spent less than half the deadline on the CPU was
                     * waiting for one (a loaded box), not stuck in a loop: it gets more time,
                     * up to SW_STARVED_MAX deadlines of wall time. */
                    if (cpu * 2 < call->budget_ms &&
                        now < call->started_ms + (uint64_t)call->budget_ms * SW_STARVED_MAX) {
                        call->deadline_ms = now + call->budget_ms / 2 + 1;
                        continue;
                    }
                    child_replace(w, c, true);
                }
            }
        }
    }
    return 0;
}
