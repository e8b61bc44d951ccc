/* scriptworker, its Python interpreters: start one, write frames to it without ever blocking
 * (a stuck interpreter must not stop the parent from noticing), kill it. */
#include "sw.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fgx/log.h"

#define SW_PYTHON "/usr/bin/python3"

uint64_t sw_now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

int sw_child_spawn(struct sw *w, struct sw_child *c)
{
    static const char prog[] = "import sys; sys.path.insert(0, sys.argv[1]); "
                               "import fgex.serve as s; sys.exit(s.main())";
    int to[2] = {-1, -1}, from[2] = {-1, -1}, rv;
    pid_t pid;

    c->page_fd = memfd_create("fgex-sw-page", MFD_CLOEXEC);
    if (c->page_fd == -1 || ftruncate(c->page_fd, SW_PAGE) == -1)
        goto err;
    c->page = mmap(NULL, SW_PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, c->page_fd, 0);
    if (c->page == MAP_FAILED) {
        c->page = NULL;
        goto err;
    }
    memset(c->page, 0, SW_PAGE);
    if (pipe2(to, O_CLOEXEC) == -1 || pipe2(from, O_CLOEXEC) == -1)
        goto err;
    /* room for many frames before a slow interpreter makes us buffer */
    (void)fcntl(to[1], F_SETPIPE_SZ, 1 << 20);
    (void)fcntl(from[1], F_SETPIPE_SZ, 1 << 20);
    pid = fork();
    if (pid == -1)
        goto err;
    if (pid == 0) {
        sigset_t none;

        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        signal(SIGPIPE, SIG_DFL);
        (void)dup2(to[0], 0);
        (void)dup2(from[1], 1);
        (void)dup2(c->page_fd, 3);
        execl(SW_PYTHON, "python3", "-I", "-c", prog, w->pydir, (char *)NULL);
        _exit(127);
    }
    close(to[0]);
    close(from[1]);
    c->pid = pid;
    c->cpu_clock_ok = clock_getcpuclockid(pid, &c->cpu_clock) == 0;
    c->in = to[1];
    c->out = from[0];
    (void)fcntl(c->in, F_SETFL, O_NONBLOCK);
    (void)fcntl(c->out, F_SETFL, O_NONBLOCK);
    c->wlen = c->rlen = 0;
    c->qhead = c->qlen = 0;
    c->ready = false;
    /* every file it must know, before any connection */
    for (size_t i = 0; i < w->nscripts; i++) {
        const struct sw_script *s = &w->scripts[i];

        rv = sw_child_queue(c, (const struct fgx_sw_hdr *)s->frame,
                            s->frame + sizeof(struct fgx_sw_hdr));
        if (rv < 0)
            return rv;
    }
    return sw_child_flush(c);
err:
    rv = -errno;
    fgx_err("cannot start a Python interpreter: %s", strerror(errno));
    for (int i = 0; i < 2; i++) {
        if (to[i] != -1)
            close(to[i]);
        if (from[i] != -1)
            close(from[i]);
    }
    return rv ? rv : -EIO;
}

void sw_child_kill(struct sw_child *c)
{
    if (c->pid > 0) {
        (void)kill(c->pid, SIGKILL);
        while (waitpid(c->pid, NULL, 0) == -1 && errno == EINTR)
            ;
    }
    c->pid = 0;
    if (c->in != -1)
        close(c->in);
    if (c->out != -1)
        close(c->out);
    c->in = c->out = -1;
    if (c->page)
        munmap(c->page, SW_PAGE);
    c->page = NULL;
    if (c->page_fd != -1)
        close(c->page_fd);
    c->page_fd = -1;
    c->wlen = c->rlen = 0;
}

int sw_child_queue(struct sw_child *c, const struct fgx_sw_hdr *h, const void *payload)
{
    size_t need = c->wlen + sizeof(*h) + h->len;

    if (need > c->wcap) {
        size_t cap = c->wcap ? c->wcap : 65536;
        uint8_t *grown;

        while (cap < need)
            cap *= 2;
        if (cap > (64u << 20))
            return -ENOBUFS; /* an interpreter this far behind is as good as stuck */
        grown = realloc(c->wbuf, cap);
        if (!grown)
            return -ENOMEM;
        c->wbuf = grown;
        c->wcap = cap;
    }
    memcpy(c->wbuf + c->wlen, h, sizeof(*h));
    if (h->len)
        memcpy(c->wbuf + c->wlen + sizeof(*h), payload, h->len);
    c->wlen = need;
    return 0;
}

int sw_child_flush(struct sw_child *c)
{
    while (c->wlen > 0) {
        ssize_t n = write(c->in, c->wbuf, c->wlen);

        if (n == -1) {
            if (errno == EAGAIN || errno == EINTR)
                return 0;
            return -errno;
        }
        memmove(c->wbuf, c->wbuf + n, c->wlen - (size_t)n);
        c->wlen -= (size_t)n;
    }
    return 0;
}

void sw_child_head_start(struct sw_child *c)
{
    struct sw_call *call;

    if (!c->qlen || !c->ready)
        return;
    call = &c->q[c->qhead];
    call->started_ms = sw_now_ms();
    call->deadline_ms = call->started_ms + call->budget_ms;
    call->cpu0_ms = sw_child_cpu_ms(c);
}

uint64_t sw_child_cpu_ms(const struct sw_child *c)
{
    struct timespec ts;

    /* Read at every call's start: one clock_gettime() on the interpreter's CPU clock (Linux
     * lets a process read another's), not an open, read, parse and close of /proc/PID/stat. */
    if (c->cpu_clock_ok && clock_gettime(c->cpu_clock, &ts) == 0)
        return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
    return 0;
}
