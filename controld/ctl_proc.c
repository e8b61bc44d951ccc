/* controld, the worker processes as processes (ctl_proc.h). */
#include "controld/ctl_proc.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdint.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/pidfd.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "controld/ctl_priv.h"
#include "fgx/log.h"
#include "fgx/priv.h"

static uint64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

void ctl_proc_child(struct ctl_proc *p, pid_t pid)
{
    p->pid = pid;
    p->pidfd = -1;
    p->adopted = false;
}

int ctl_proc_adopt(struct ctl_proc *p, pid_t pid)
{
    int fd = pidfd_open(pid, 0);

    if (fd == -1) {
        int rv = -errno;

        fgx_warn("cannot watch process %d: %s", (int)pid, strerror(errno));
        return rv;
    }
    p->pid = pid;
    p->pidfd = fd;
    p->adopted = true;
    return 0;
}

int ctl_proc_watch_fd(const struct ctl_proc *p)
{
    if (p->pid <= 0) {
        errno = ESRCH;
        return -1;
    }
    return p->pidfd != -1 ? fcntl(p->pidfd, F_DUPFD_CLOEXEC, 0) : pidfd_open(p->pid, 0);
}

static void proc_clear(struct ctl_proc *p)
{
    if (p->pidfd != -1)
        close(p->pidfd);
    p->pid = 0;
    p->pidfd = -1;
    p->adopted = false;
}

int ctl_proc_reap(struct ctl_proc *p, int *status)
{
    *status = -1;
    if (p->pid <= 0)
        return 1;
    if (p->adopted) {
        struct pollfd pfd = {.fd = p->pidfd, .events = POLLIN};

        /* a pidfd is readable once its process ended; its parent (init, or a subreaper)
         * reaps it */
        if (poll(&pfd, 1, 0) <= 0)
            return 0;
    } else {
        pid_t r = waitpid(p->pid, status, WNOHANG);

        if (r == 0 || (r == -1 && errno == EINTR))
            return 0;
        if (r == -1)
            *status = -1;
    }
    proc_clear(p);
    return 1;
}

int ctl_proc_signal(const struct ctl_proc *p, int sig)
{
    const struct ctl_priv *pv = ctl_priv_get();

    if (p->pid <= 0)
        return -ESRCH;
    /* an adopted process's pid may be reaped and reused by someone else: its pidfd is not. A
     * worker that dropped runs as the workers' user: signalled as that uid (no CAP_KILL) */
    return fgx_signal_as(p->pid, p->adopted ? p->pidfd : -1, pv ? pv->uid : 0, sig);
}

void ctl_proc_stop(struct ctl_proc *p, int grace_ms, const char *name)
{
    uint64_t deadline = now_ms() + (uint64_t)grace_ms;
    int status;

    if (p->pid <= 0)
        return;
    (void)ctl_proc_signal(p, SIGTERM);
    while (ctl_proc_reap(p, &status) == 0) {
        if (now_ms() >= deadline) {
            fgx_warn("%s (pid %d) ignored SIGTERM; killing it", name, (int)p->pid);
            (void)ctl_proc_signal(p, SIGKILL);
            deadline = UINT64_MAX;
        }
        usleep(10000);
    }
}

static int pidfile_path(const char *run_dir, const char *name, const char *ext, char *out,
                        size_t len)
{
    int n = snprintf(out, len, "%s/%s.pid%s", run_dir, name, ext);

    return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

/* /proc/PID/stat of a worker after its drop. Under the unit's ProtectProc=invisible (hidepid)
 * a process this one may not ptrace-read is not in /proc at all, and root without
 * CAP_SYS_PTRACE may not read one of another uid: the file is opened again with this thread's
 * fs uid and effective gid the workers' (raw calls: this thread alone; setfsuid keeps the
 * network capabilities effective, which the kernel wants to cover the worker's). The workers
 * stay dumpable after their drop for it (fgx_priv_drop()). */
static FILE *stat_open_as_workers(const char *path)
{
    const struct ctl_priv *pv = ctl_priv_get();
    gid_t egid = getegid();
    FILE *f;
    int e;

    if (pv == NULL || geteuid() != 0)
        return NULL;
    if (egid != pv->gid && syscall(SYS_setresgid, (gid_t)-1, pv->gid, (gid_t)-1) == -1)
        return NULL;
    (void)syscall(SYS_setfsuid, pv->uid);
    f = fopen(path, "re");
    e = errno;
    (void)syscall(SYS_setfsuid, (uid_t)0);
    /* back to our own: refused, this thread would go on with another group's access */
    if (egid != pv->gid && syscall(SYS_setresgid, (gid_t)-1, egid, (gid_t)-1) == -1)
        abort();
    errno = e;
    return f;
}

/* Field 22 of /proc/PID/stat (clock ticks since boot), or 0. */
static unsigned long long proc_starttime(pid_t pid)
{
    char path[64], buf[1024], *p;
    unsigned long long v = 0;
    FILE *f;
    size_t n;

    (void)snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    f = fopen(path, "re");
    if (f == NULL && errno == ENOENT)
        f = stat_open_as_workers(path);
    if (f == NULL)
        return 0;
    n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    p = strrchr(buf, ')'); /* the name may hold spaces and parentheses */
    if (p == NULL)
        return 0;
    /* after ") ": state is field 3; starttime is field 22 */
    if (sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d "
                      "%*d %llu",
               &v) != 1)
        return 0;
    return v;
}

uint64_t ctl_proc_config(char *const *argv)
{
    uint64_t h = 1469598103934665603ull;

    for (; *argv; argv++)
        for (const unsigned char *c = (const unsigned char *)*argv;; c++) {
            h = (h ^ *c) * 1099511628211ull;
            if (*c == '\0')
                break;
        }
    return h;
}

int ctl_proc_pidfile_write(const char *run_dir, const char *name, pid_t pid, uint64_t config)
{
    char path[PATH_MAX], tmp[PATH_MAX];
    FILE *f;
    int rv;

    if (pidfile_path(run_dir, name, "", path, sizeof(path)) < 0 ||
        pidfile_path(run_dir, name, ".new", tmp, sizeof(tmp)) < 0)
        return -ENAMETOOLONG;
    f = fopen(tmp, "we");
    if (f == NULL) {
        rv = -errno;
        fgx_warn("cannot write %s: %s", tmp, strerror(errno));
        return rv;
    }
    (void)fprintf(f, "%d %llu %llx\n", (int)pid, proc_starttime(pid), (unsigned long long)config);
    if (fclose(f) != 0 || rename(tmp, path) == -1) {
        rv = -errno;
        fgx_warn("cannot write %s: %s", path, strerror(errno));
        (void)unlink(tmp);
        return rv;
    }
    return 0;
}

pid_t ctl_proc_pidfile_read(const char *run_dir, const char *name, uint64_t config)
{
    char path[PATH_MAX];
    unsigned long long start = 0, cfg = 0;
    int pid = 0;
    FILE *f;

    if (pidfile_path(run_dir, name, "", path, sizeof(path)) < 0)
        return 0;
    f = fopen(path, "re");
    if (f == NULL)
        return 0;
    if (fscanf(f, "%d %llu %llx", &pid, &start, &cfg) != 3)
        pid = 0;
    fclose(f);
    if (pid <= 0 || start == 0 || proc_starttime(pid) != start)
        return 0;
    return cfg == config ? pid : -pid;
}

void ctl_proc_pidfile_remove(const char *run_dir, const char *name)
{
    char path[PATH_MAX];

    if (pidfile_path(run_dir, name, "", path, sizeof(path)) == 0)
        (void)unlink(path);
}
