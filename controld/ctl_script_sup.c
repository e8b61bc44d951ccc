/* controld, the script worker's supervision (ctl_script_sup.h). Liveness (issue 24): controld
 * keeps one connection to the parent's own socket (PATH, fgx/swproto.h) and sends a PING every
 * SSUP_HB_PERIOD_MS, which the parent's loop sends back; one left unanswered for
 * SSUP_HB_MISS_MS means the parent is stopped or stuck, and it is killed and replaced at once.
 * Like the data-path workers it outlives an unclean death of controld, and the next controld
 * adopts it when it answers a PING on the same socket (its pid in RUN_DIR/scriptworker.pid,
 * checked against the socket's peer). */
#include "controld/ctl_script_sup.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "controld/ctl_health.h"
#include "controld/ctl_priv.h"
#include "controld/ctl_proc.h"
#include "controld/ctl_script.h"
#include "fgx/log.h"
#include "fgx/priv.h"
#include "fgx/swproto.h"

#define SSUP_NAME "scriptworker"
#define SSUP_HB_PERIOD_MS 200
#define SSUP_HB_MISS_MS 1000
#define SSUP_HB_FIRST_MS 5000 /* a new parent starts its interpreters before it listens */
#define SSUP_ADOPT_WAIT_MS 3000
#define SSUP_STOP_GRACE_MS 1000

static struct {
    char path[PATH_MAX];
    char url[PATH_MAX + 16];
    char run_dir[PATH_MAX];
    char log_level[16];
    struct ctl_proc proc;
    unsigned restarts;
    uint64_t next_ms;    /* when a dead worker may be started again */
    unsigned backoff_ms; /* doubles while it keeps dying young */
    uint64_t started_ms;
    uint64_t started_unix; /* for `worker list` */
    /* liveness: the connection to the parent's socket (-1: none yet), the PING in flight */
    int hb_fd;
    bool hb_wait, hb_ever, replacing;
    uint64_t hb_sent_ms, hb_ok_ms;
    uint64_t hb_seq;
    char reason[96];
} sup = {.proc = CTL_PROC_INIT, .hb_fd = -1};

static uint64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void hb_close(void)
{
    if (sup.hb_fd != -1)
        close(sup.hb_fd);
    sup.hb_fd = -1;
    sup.hb_wait = false;
}

/* The parent's own socket, PATH (the url without ipc://); -1 while it is not there. */
static int hb_connect(void)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    const char *path = sup.url + 6;
    int fd;

    if (strlen(path) >= sizeof(a.sun_path))
        return -1;
    memcpy(a.sun_path, path, strlen(path) + 1);
    fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd == -1)
        return -1;
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) == -1) {
        close(fd);
        return -1;
    }
    return fd;
}

static int hb_send(uint64_t now)
{
    struct fgx_sw_hdr h = {.type = FGX_SW_PING, .conn = ++sup.hb_seq};

    if (send(sup.hb_fd, &h, sizeof(h), MSG_DONTWAIT | MSG_NOSIGNAL) != (ssize_t)sizeof(h))
        return -1;
    sup.hb_wait = true;
    sup.hb_sent_ms = now;
    return 0;
}

/* Read what came back: 1 when the PING in flight was answered, 0 not yet, -1 the socket
 * ended (the parent went). */
static int hb_read(void)
{
    int got = 0;

    for (;;) {
        struct fgx_sw_hdr h;
        ssize_t n = recv(sup.hb_fd, &h, sizeof(h), MSG_DONTWAIT);

        if (n == -1 && (errno == EAGAIN || errno == EINTR))
            return got;
        if (n <= 0)
            return -1;
        if ((size_t)n == sizeof(h) && h.type == FGX_SW_PING && h.conn == sup.hb_seq)
            got = 1;
    }
}

/* scriptworker's command line, in buffers of its own: what spawn() runs and what the pid file
 * records of it (ctl_proc_config()), so that a controld started with other options replaces
 * the scriptworker it finds rather than adopting it. */
struct ssup_argv {
    char procs[16], suid[16], smem[16];
    char *argv[24];
};

static void ssup_argv_build(struct ssup_argv *a)
{
    const struct ctl_priv *pv = ctl_priv_get();
    char *const argv[] = {sup.path,
                          "--listen",
                          sup.url,
                          "--python-dir",
                          (char *)ctl_script_pydir(),
                          "--procs",
                          a->procs,
                          "--log-level",
                          sup.log_level,
                          "--user",
                          (char *)(pv ? pv->user : FGX_PRIV_USER_DEFAULT),
                          "--script-uid",
                          a->suid,
                          "--script-memory",
                          a->smem,
                          "--hide",
                          (char *)(pv ? pv->state_dir : "/var/lib/fgex"),
                          "--hide",
                          (char *)(pv ? pv->run_dir : "/run/fgex"),
                          NULL};

    (void)snprintf(a->procs, sizeof(a->procs), "%u", CTL_SCRIPT_PROCS);
    (void)snprintf(a->suid, sizeof(a->suid), "%u",
                   pv ? pv->script_uid : CTL_PRIV_SCRIPT_UID_DEFAULT);
    (void)snprintf(a->smem, sizeof(a->smem), "%u",
                   pv ? pv->script_mem_mib : CTL_PRIV_SCRIPT_MEM_MIB_DEFAULT);
    memcpy(a->argv, argv, sizeof(argv));
}

static uint64_t sup_config(void)
{
    struct ssup_argv a;

    ssup_argv_build(&a);
    return ctl_proc_config(a.argv);
}

static int spawn(void)
{
    struct ssup_argv a;
    pid_t pid;

    ssup_argv_build(&a);
    pid = fork();
    if (pid == -1) {
        fgx_err("cannot fork scriptworker: %s", strerror(errno));
        return -errno;
    }
    if (pid == 0) {
        sigset_t all;

        /* No PR_SET_PDEATHSIG: it outlives controld's unclean death (ctl_supervise.c) */
        sigemptyset(&all);
        sigprocmask(SIG_SETMASK, &all, NULL);
        signal(SIGPIPE, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        signal(SIGINT, SIG_DFL);
        signal(SIGCHLD, SIG_DFL);
        close_range(3, ~0u, 0);
        execv(sup.path, a.argv);
        fgx_err("cannot run %s: %s", sup.path, strerror(errno));
        _exit(127);
    }
    ctl_proc_child(&sup.proc, pid);
    hb_close();
    sup.hb_ever = false;
    sup.started_ms = sup.hb_ok_ms = sup.hb_sent_ms = now_ms();
    sup.started_unix = (uint64_t)time(NULL);
    (void)ctl_proc_pidfile_write(sup.run_dir, SSUP_NAME, pid, sup_config());
    fgx_info("started scriptworker (pid %d, %u Python interpreters)", (int)pid,
             CTL_SCRIPT_PROCS);
    return 0;
}

/* The scriptworker an earlier controld left running: adopted when its socket's peer is that
 * pid and it answers a PING within SSUP_ADOPT_WAIT_MS; else killed. */
static bool adopt(void)
{
    pid_t pid = ctl_proc_pidfile_read(sup.run_dir, SSUP_NAME, sup_config());
    struct ctl_proc old = CTL_PROC_INIT;
    uint64_t deadline = now_ms() + SSUP_ADOPT_WAIT_MS;
    struct ucred cr;
    socklen_t crlen = sizeof(cr);

    if (pid < 0 && ctl_proc_adopt(&old, -pid) == 0) {
        ctl_proc_stop(&old, SSUP_STOP_GRACE_MS, SSUP_NAME); /* other options */
        return false;
    }
    if (pid <= 0 || ctl_proc_adopt(&old, pid) < 0)
        return false;
    while ((sup.hb_fd = hb_connect()) == -1 && now_ms() < deadline)
        usleep(20000);
    if (sup.hb_fd != -1 &&
        getsockopt(sup.hb_fd, SOL_SOCKET, SO_PEERCRED, &cr, &crlen) == 0 && cr.pid == pid &&
        hb_send(now_ms()) == 0) {
        while (now_ms() < deadline) {
            struct pollfd pfd = {.fd = sup.hb_fd, .events = POLLIN};

            if (poll(&pfd, 1, 50) > 0 && hb_read() == 1) {
                sup.proc = old;
                sup.hb_wait = false;
                sup.hb_ever = true;
                sup.started_ms = sup.hb_ok_ms = now_ms();
                sup.started_unix = (uint64_t)time(NULL);
                ctl_health_note(0, CTL_HEALTH_INFO, "worker-adopted", 0,
                                "adopted scriptworker pid %d: it kept judging while controld "
                                "was away",
                                (int)pid);
                return true;
            }
        }
    }
    hb_close();
    ctl_health_note(0, CTL_HEALTH_WARN, "worker-stale", 0,
                    "scriptworker pid %d, left by the previous controld, did not answer within "
                    "%d s: killed, a new one starts",
                    (int)pid, SSUP_ADOPT_WAIT_MS / 1000);
    ctl_proc_stop(&old, 0, SSUP_NAME);
    return false;
}

int ctl_script_sup_start(const char *run_dir, const char *log_level)
{
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    char *slash;

    if (n == -1)
        return -errno;
    exe[n] = '\0';
    slash = strrchr(exe, '/');
    if (slash)
        *slash = '\0';
    (void)snprintf(sup.path, sizeof(sup.path), "%.4000s/scriptworker", exe);
    if (access(sup.path, X_OK) == -1)
        (void)snprintf(sup.path, sizeof(sup.path), "%.4000s/../lib/fgex/scriptworker", exe);
    (void)snprintf(sup.url, sizeof(sup.url), "ipc://%.4000s/script.sock", run_dir);
    (void)snprintf(sup.run_dir, sizeof(sup.run_dir), "%.4000s", run_dir);
    (void)snprintf(sup.log_level, sizeof(sup.log_level), "%s", log_level ? log_level : "info");
    sup.backoff_ms = 100;
    if (adopt())
        return 0;
    return spawn();
}

/* Kill the parent (as hung, unless requested) and replace it at once. */
static void replace(bool requested, const char *why)
{
    if (!requested)
        (void)snprintf(sup.reason, sizeof(sup.reason), "%s", why);
    ctl_health_note(0, requested ? CTL_HEALTH_INFO : CTL_HEALTH_WARN,
                    requested ? "worker-restart" : "worker-hung", 0,
                    "scriptworker pid %d replaced: %s", (int)sup.proc.pid, why);
    hb_close();
    (void)ctl_proc_signal(&sup.proc, SIGKILL);
    sup.replacing = true;
}

static void hb_poll(uint64_t now)
{
    char why[96];
    int r;

    if (sup.replacing)
        return;
    if (sup.hb_fd == -1) {
        sup.hb_fd = hb_connect();
        if (sup.hb_fd == -1) {
            if (now - sup.started_ms >= SSUP_HB_FIRST_MS && !sup.hb_ever) {
                (void)snprintf(why, sizeof(why), "its socket was not there %.1f s after its start",
                               (now - sup.started_ms) / 1000.0);
                replace(false, why);
            }
            return;
        }
    }
    r = hb_read();
    if (r < 0) {
        hb_close(); /* it went: reaped next; or a new connection next time */
        return;
    }
    if (r == 1) {
        sup.hb_wait = false;
        sup.hb_ever = true;
        sup.hb_ok_ms = now;
    }
    if (sup.hb_wait && now - sup.hb_sent_ms >= SSUP_HB_MISS_MS) {
        (void)snprintf(why, sizeof(why), "no heartbeat for %.1f s", (now - sup.hb_ok_ms) / 1000.0);
        replace(false, why);
        return;
    }
    if (!sup.hb_wait && now - sup.hb_sent_ms >= SSUP_HB_PERIOD_MS && hb_send(now) < 0)
        hb_close();
}

void ctl_script_sup_poll(void)
{
    int status;

    if (sup.proc.pid > 0) {
        pid_t pid = sup.proc.pid;
        bool replaced = sup.replacing;

        if (ctl_proc_reap(&sup.proc, &status) == 0) {
            hb_poll(now_ms());
            return;
        }
        hb_close();
        sup.replacing = false;
        if (status == -1)
            fgx_warn("scriptworker (pid %d) ended; script verdicts follow each service's "
                     "fail-open choice until it is back",
                     (int)pid);
        else
            fgx_warn("scriptworker (pid %d) %s %d; script verdicts follow each service's "
                     "fail-open choice until it is back",
                     (int)pid, WIFSIGNALED(status) ? "killed by signal" : "exited with",
                     WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
        /* one that lived a while, or was killed as hung, is restarted at once; one that keeps
         * dying, less and less */
        sup.backoff_ms = replaced || now_ms() - sup.started_ms > 10000 ? 100
                         : sup.backoff_ms < 5000                         ? sup.backoff_ms * 2
                                                                         : 5000;
        sup.next_ms = replaced ? now_ms() : now_ms() + sup.backoff_ms;
        if (!replaced)
            return;
    }
    if (sup.path[0] && now_ms() >= sup.next_ms && spawn() == 0)
        sup.restarts++;
}

int ctl_script_sup_restart(void)
{
    if (sup.proc.pid <= 0) {
        sup.next_ms = 0;
        return 0;
    }
    if (!sup.replacing)
        replace(true, "restart requested");
    return 0;
}

void ctl_script_sup_stop_begin(void)
{
    if (sup.proc.pid > 0)
        (void)ctl_proc_signal(&sup.proc, SIGTERM);
}

void ctl_script_sup_stop(void)
{
    hb_close();
    if (sup.proc.pid <= 0)
        return;
    ctl_proc_stop(&sup.proc, SSUP_STOP_GRACE_MS, SSUP_NAME);
    ctl_proc_pidfile_remove(sup.run_dir, SSUP_NAME);
}

const char *ctl_script_sup_url(void)
{
    return sup.url;
}

pid_t ctl_script_sup_pid(void)
{
    return sup.proc.pid;
}

unsigned ctl_script_sup_restarts(void)
{
    return sup.restarts;
}

uint64_t ctl_script_sup_started(void)
{
    return sup.proc.pid > 0 ? sup.started_unix : 0;
}

void ctl_script_sup_info(struct ctl_script_sup_info *out)
{
    uint64_t now = now_ms();

    out->pid = sup.proc.pid;
    out->state = sup.proc.pid <= 0 ? "down" : sup.replacing ? "replacing" : "running";
    out->restarts = sup.restarts;
    out->started = ctl_script_sup_started();
    out->hb_age_ms = sup.proc.pid > 0 && sup.hb_ever ? (int64_t)(now - sup.hb_ok_ms) : -1;
    out->adopted = sup.proc.adopted;
    out->replaced_why = sup.reason;
}
