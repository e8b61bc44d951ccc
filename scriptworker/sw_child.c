/* scriptworker, its Python interpreters: start one on its listening socket, kill it. */
#include "sw.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fgx/log.h"
#include "fgx/priv.h"
#include "fgx/python.h"

_Static_assert(sizeof(struct fgx_sw_page) <= FGX_SW_PAGE, "the page holds its fields");

uint64_t sw_now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

int sw_listen(const char *path, gid_t gid)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    int fd, e;

    if (strlen(path) >= sizeof(a.sun_path))
        return -ENAMETOOLONG;
    memcpy(a.sun_path, path, strlen(path) + 1);
    fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (fd == -1)
        return -errno;
    (void)unlink(path);
    if (bind(fd, (struct sockaddr *)&a, sizeof(a)) == -1 || listen(fd, SW_BACKLOG) == -1) {
        e = -errno;
        close(fd);
        return e;
    }
    /* the data-path threads dial it as the workers' user */
    e = fgx_sock_share(path, gid);
    if (e < 0) {
        close(fd);
        return e;
    }
    return fd;
}

int sw_child_spawn(struct sw *w, struct sw_child *c)
{
    static const char prog[] = "import sys; sys.path.insert(0, sys.argv[1]); "
                               "import fgex.serve as s; sys.exit(s.main())";
    int to[2] = {-1, -1}, from[2] = {-1, -1}, rv;
    pid_t pid;
    void *page;

    c->page_fd = memfd_create("fgex-sw-page", MFD_CLOEXEC);
    if (c->page_fd == -1 || ftruncate(c->page_fd, FGX_SW_PAGE) == -1)
        goto err;
    page = mmap(NULL, FGX_SW_PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, c->page_fd, 0);
    if (page == MAP_FAILED)
        goto err;
    memset(page, 0, FGX_SW_PAGE);
    c->page = page;
    if (pipe2(to, O_CLOEXEC) == -1 || pipe2(from, O_CLOEXEC) == -1)
        goto err;
    w->sandbox.uid = c->uid = (uid_t)(w->script_uid + (unsigned)(c - w->child));
    pid = fgx_sandbox_fork();
    if (pid < 0) {
        errno = -pid;
        goto err;
    }
    if (pid == 0) {
        sigset_t none;

        /* an interpreter stuck in a loop reads no stdin: it goes with us all the same (pid 1
         * of its own namespace, it cannot see us: had we died already, its stdin is at EOF) */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        signal(SIGPIPE, SIG_DFL);
        /* out of the way first: either may be 3 or 4 itself */
        int pg = fcntl(c->page_fd, F_DUPFD_CLOEXEC, 10), ls = fcntl(c->lfd, F_DUPFD_CLOEXEC, 10);

        (void)dup2(to[0], 0);
        (void)dup2(from[1], 1);
        (void)dup2(pg, 3);
        (void)dup2(ls, 4);
        if (fgx_sandbox_enter(&w->sandbox) < 0)
            _exit(126);
        {
            const char *args[] = {"-c", prog, FGX_SANDBOX_PYDIR, NULL};

            (void)fgx_python_exec(args);
        }
        _exit(127);
    }
    close(to[0]);
    close(from[1]);
    c->pid = pid;
    c->cpu_clock_ok = clock_getcpuclockid(pid, &c->cpu_clock) == 0;
    c->in = to[1];
    c->out = from[0];
    (void)fcntl(c->out, F_SETFL, O_NONBLOCK);
    c->seen_start_ns = 0;
    c->spawned_ms = sw_now_ms();
    return 0;
err:
    rv = -errno;
    fgx_err("cannot start a Python interpreter: %s", strerror(errno));
    for (int i = 0; i < 2; i++) {
        if (to[i] != -1)
            close(to[i]);
        if (from[i] != -1)
            close(from[i]);
    }
    sw_child_kill(c);
    return rv ? rv : -EIO;
}

void sw_child_kill(struct sw_child *c)
{
    if (c->pid > 0) {
        (void)fgx_signal_as(c->pid, -1, c->uid, SIGKILL); /* its script uid: no CAP_KILL */
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
        munmap((void *)c->page, FGX_SW_PAGE);
    c->page = NULL;
    if (c->page_fd != -1)
        close(c->page_fd);
    c->page_fd = -1;
}

uint64_t sw_child_cpu_ms(const struct sw_child *c)
{
    struct timespec ts;

    /* one clock_gettime() on the interpreter's CPU clock (Linux lets a process read
     * another's), not an open, read, parse and close of /proc/PID/stat */
    if (c->cpu_clock_ok && clock_gettime(c->cpu_clock, &ts) == 0)
        return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
    return 0;
}
