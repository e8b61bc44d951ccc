/* scriptworker, the loop: the data-path threads' sockets to this parent (they say who they
 * are, and hear of a call that went past its deadline), the interpreters' pages watched for
 * such a call, and an interpreter past it, or dead, replaced. The frames of the data path
 * never pass through here. */
#include "sw.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "fgx/log.h"

/* To the thread whose link id is id, without waiting (a few hundred bytes: its socket has
 * room, or it is not reading and its own timer decides). */
static void link_send(struct sw *w, uint64_t id, const struct fgx_sw_hdr *h1, const void *p1,
                      const struct fgx_sw_hdr *h2, const void *p2)
{
    struct iovec iov[4] = {{(void *)h1, sizeof(*h1)}, {(void *)p1, h1->len}};
    struct msghdr mh = {.msg_iov = iov, .msg_iovlen = 2};

    if (h2 != NULL) {
        iov[2] = (struct iovec){(void *)h2, sizeof(*h2)};
        iov[3] = (struct iovec){(void *)p2, h2->len};
        mh.msg_iovlen = 4;
    }
    for (unsigned i = 0; i < w->nlinks; i++)
        if (w->links[i].id == id) {
            if (sendmsg(w->links[i].fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL) == -1)
                fgx_warn("cannot tell a data-path thread of a replaced interpreter: %s",
                         strerror(errno));
            return;
        }
}

/* Kill c, tell the thread whose call it was running, start a new one. The thread answers
 * its other calls to c itself (ERROR) when c's socket ends. */
static void child_replace(struct sw *w, struct sw_child *c, bool timeout)
{
    struct fgx_sw_page pg = {0};
    char fn[sizeof(pg.function) + 1], logb[512], vb[sizeof(fn) + 32];

    if (c->page != NULL)
        memcpy(&pg, (const void *)c->page, sizeof(pg));
    (void)snprintf(fn, sizeof(fn), "%.*s", (int)sizeof(pg.function), pg.function);
    if (pg.start_ns != 0) {
        const char *text = timeout ? "the call did not return within the deadline: its verdict "
                                     "is the service's fail-open choice; the interpreter was "
                                     "replaced"
                                   : "the Python interpreter died; it was replaced";
        int ln = snprintf(logb, sizeof(logb), "%s%c%s%c%s", timeout ? "timeout" : "restart", 0, fn,
                          0, text);
        int vn = snprintf(vb, sizeof(vb), "%s%c%s", fn, 0, "past the deadline");
        struct fgx_sw_hdr lh = {.type = FGX_SW_LOG,
                                .service = pg.service,
                                .conn = pg.conn, /* the thread adds its addresses */
                                .len = (uint32_t)(ln < (int)sizeof(logb) ? ln : 0)};
        struct fgx_sw_hdr vh = {.type = FGX_SW_VERDICT,
                                .code = FGX_SW_TIMEOUT,
                                .service = pg.service,
                                .conn = pg.conn,
                                .seq = pg.seq,
                                .len = (uint32_t)(vn < (int)sizeof(vb) ? vn : 0)};

        /* the log first: whoever waits for the verdict finds the reason already there; both
         * before the kill, so the thread reads them before its socket to c ends */
        link_send(w, pg.link, &lh, logb, timeout ? &vh : NULL, vb);
    }
    sw_child_kill(c);
    c->restarts++;
    if (sw_child_spawn(w, c) < 0)
        fgx_err("cannot replace an interpreter: its connections get fail-open verdicts");
}

/* c's page: a call past its deadline replaces c. Returns the tick c needs: SW_TICK_MS while
 * it is called, SW_TICK_IDLE_MS while it has files, 1000 ms without. An idle box pays
 * 20 wake-ups a second for a loaded file, not 100; a call that starts while the parent sleeps
 * is seen within SW_TICK_IDLE_MS, well inside any deadline's check. */
static int child_watch(struct sw *w, struct sw_child *c, uint64_t now)
{
    uint64_t start = c->page->start_ns, start_ms;
    uint32_t calls = c->page->calls;
    int tick = c->page->nscripts > 0 ? SW_TICK_IDLE_MS : 1000;
    uint64_t cpu;

    if (calls != c->calls || start != 0) {
        c->calls = calls;
        c->active_ms = now;
    }
    if (now < c->active_ms + SW_IDLE_AFTER_MS)
        tick = SW_TICK_MS;
    if (start == 0) {
        c->seen_start_ns = 0;
        return tick;
    }
    start_ms = start / 1000000;
    if (start != c->seen_start_ns) {
        c->seen_start_ns = start;
        c->seen_ms = now;
        c->budget_ms = c->page->deadline_ms ? c->page->deadline_ms : 100;
        c->deadline_ms = start_ms + c->budget_ms;
        c->cpu0_ms = sw_child_cpu_ms(c);
    }
    if (now < c->deadline_ms)
        return tick;
    cpu = sw_child_cpu_ms(c) - c->cpu0_ms;
    /* An interpreter that spent less than half the deadline on the CPU (since this parent saw
     * the call) was waiting for one (a loaded box), not stuck in a loop: it gets more time, up
     * to SW_STARVED_MAX deadlines of wall time. */
    if ((cpu * 2 < c->budget_ms || now - c->seen_ms < c->budget_ms / 2) &&
        now < start_ms + (uint64_t)c->budget_ms * SW_STARVED_MAX) {
        c->deadline_ms = now + c->budget_ms / 2 + 1;
        return tick;
    }
    child_replace(w, c, true);
    return SW_TICK_MS;
}

static void link_close(struct sw *w, unsigned i)
{
    close(w->links[i].fd);
    w->links[i] = w->links[--w->nlinks];
}

static void links_accept(struct sw *w)
{
    for (;;) {
        int fd = accept4(w->ctl, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);

        if (fd == -1)
            return;
        if (w->nlinks == SW_LINKS_MAX) {
            fgx_warn("more than %d data-path threads: one is not told of timeouts",
                     SW_LINKS_MAX);
            close(fd);
            continue;
        }
        w->links[w->nlinks++] = (struct sw_link){.fd = fd};
    }
}

/* What a thread says here: its HELLO, or that it went. */
static void link_read(struct sw *w, unsigned i)
{
    for (;;) {
        uint8_t buf[256];
        struct fgx_sw_hdr h;
        ssize_t n = recv(w->links[i].fd, buf, sizeof(buf), MSG_DONTWAIT);

        if (n == -1 && (errno == EAGAIN || errno == EINTR))
            return;
        if (n <= 0) {
            link_close(w, i);
            return;
        }
        if ((size_t)n >= sizeof(h)) {
            memcpy(&h, buf, sizeof(h));
            if (h.type == FGX_SW_HELLO)
                w->links[i].id = h.conn;
            /* controld's heartbeat: answered from this loop, so the answer says it turns */
            if (h.type == FGX_SW_PING)
                (void)send(w->links[i].fd, &h, sizeof(h), MSG_DONTWAIT | MSG_NOSIGNAL);
        }
    }
}

int sw_loop_run(struct sw *w)
{
    struct pollfd pfd[1 + SW_LINKS_MAX + SW_PROCS_MAX];
    int tick = 1000;

    while (!*w->stop) {
        unsigned nl = w->nlinks, n = 0;
        uint64_t now;
        int rv;

        pfd[n++] = (struct pollfd){.fd = w->ctl, .events = POLLIN};
        for (unsigned i = 0; i < nl; i++)
            pfd[n++] = (struct pollfd){.fd = w->links[i].fd, .events = POLLIN};
        for (unsigned i = 0; i < w->nprocs; i++) {
            struct sw_child *c = &w->child[i];

            if (c->pid <= 0 && sw_now_ms() >= c->spawned_ms + 100 && sw_child_spawn(w, c) < 0)
                c->spawned_ms = sw_now_ms(); /* tried again in a while */
            pfd[n++] = (struct pollfd){.fd = c->pid > 0 ? c->out : -1, .events = POLLIN};
        }
        /* the pages are read often only while calls are made (child_watch()) */
        rv = poll(pfd, n, tick);
        if (rv == -1 && errno != EINTR)
            return -errno;
        if (rv > 0) {
            for (unsigned i = nl; i-- > 0;)
                if (pfd[1 + i].revents)
                    link_read(w, i);
            if (pfd[0].revents & POLLIN)
                links_accept(w);
            for (unsigned i = 0; i < w->nprocs; i++) {
                struct sw_child *c = &w->child[i];
                uint8_t b[64];

                /* it writes nothing: readable means it ended */
                if (c->pid > 0 && pfd[1 + nl + i].revents &&
                    (read(c->out, b, sizeof(b)) == 0 || (errno != EAGAIN && errno != EINTR)))
                    child_replace(w, c, false);
            }
        }
        now = sw_now_ms();
        tick = 1000;
        for (unsigned i = 0; i < w->nprocs; i++)
            if (w->child[i].pid > 0) {
                int t = child_watch(w, &w->child[i], now);

                tick = t < tick ? t : tick;
            }
    }
    return 0;
}
