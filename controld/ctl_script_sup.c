/* controld, the script worker's supervision (ctl_script_sup.h). */
#include "controld/ctl_script_sup.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "controld/ctl_priv.h"
#include "controld/ctl_script.h"
#include "fgx/log.h"
#include "fgx/priv.h"

static struct {
    char path[PATH_MAX];
    char url[PATH_MAX + 16];
    char log_level[16];
    pid_t pid;
    unsigned restarts;
    uint64_t next_ms;    /* when a dead worker may be started again */
    unsigned backoff_ms; /* doubles while it keeps dying young */
    uint64_t started_ms;
    uint64_t started_unix; /* for `worker list` */
} sup;

static uint64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static int spawn(void)
{
    const struct ctl_priv *pv = ctl_priv_get();
    char procs[16], suid[16], smem[16];
    pid_t parent = getpid(), pid;

    (void)snprintf(procs, sizeof(procs), "%u", CTL_SCRIPT_PROCS);
    (void)snprintf(suid, sizeof(suid), "%u",
                   pv ? pv->script_uid : CTL_PRIV_SCRIPT_UID_DEFAULT);
    (void)snprintf(smem, sizeof(smem), "%u",
                   pv ? pv->script_mem_mib : CTL_PRIV_SCRIPT_MEM_MIB_DEFAULT);
    pid = fork();
    if (pid == -1) {
        fgx_err("cannot fork scriptworker: %s", strerror(errno));
        return -errno;
    }
    if (pid == 0) {
        sigset_t all;

        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent)
            _exit(1);
        sigemptyset(&all);
        sigprocmask(SIG_SETMASK, &all, NULL);
        signal(SIGPIPE, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        signal(SIGINT, SIG_DFL);
        signal(SIGCHLD, SIG_DFL);
        close_range(3, ~0u, 0);
        execl(sup.path, sup.path, "--listen", sup.url, "--python-dir",
              ctl_script_pydir(), "--procs", procs, "--log-level", sup.log_level, "--user",
              pv ? pv->user : FGX_PRIV_USER_DEFAULT, "--script-uid", suid, "--script-memory",
              smem, "--hide", pv ? pv->state_dir : "/var/lib/fgex", "--hide",
              pv ? pv->run_dir : "/run/fgex", (char *)NULL);
        fgx_err("cannot run %s: %s", sup.path, strerror(errno));
        _exit(127);
    }
    sup.pid = pid;
    sup.started_ms = now_ms();
    sup.started_unix = (uint64_t)time(NULL);
    fgx_info("started scriptworker (pid %d, %u Python interpreters)", (int)pid,
             CTL_SCRIPT_PROCS);
    return 0;
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
    (void)snprintf(sup.log_level, sizeof(sup.log_level), "%s", log_level ? log_level : "info");
    sup.backoff_ms = 100;
    return spawn();
}

void ctl_script_sup_poll(void)
{
    int status;
    pid_t r;

    if (sup.pid > 0) {
        r = waitpid(sup.pid, &status, WNOHANG);
        if (r != sup.pid)
            return;
        fgx_warn("scriptworker (pid %d) %s %d; script verdicts follow each service's fail-open "
                 "choice until it is back",
                 (int)sup.pid, WIFSIGNALED(status) ? "killed by signal" : "exited with",
                 WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
        sup.pid = 0;
        /* one that lived a while is restarted at once; one that keeps dying, less and less */
        sup.backoff_ms = now_ms() - sup.started_ms > 10000 ? 100
                         : sup.backoff_ms < 5000           ? sup.backoff_ms * 2
                                                           : 5000;
        sup.next_ms = now_ms() + sup.backoff_ms;
        return;
    }
    if (sup.path[0] && now_ms() >= sup.next_ms && spawn() == 0)
        sup.restarts++;
}

void ctl_script_sup_stop(void)
{
    if (sup.pid <= 0)
        return;
    (void)kill(sup.pid, SIGTERM);
    for (int i = 0; i < 50; i++) {
        if (waitpid(sup.pid, NULL, WNOHANG) == sup.pid) {
            sup.pid = 0;
            return;
        }
        usleep(20000);
    }
    (void)kill(sup.pid, SIGKILL);
    (void)waitpid(sup.pid, NULL, 0);
    sup.pid = 0;
}

const char *ctl_script_sup_url(void)
{
    return sup.url;
}

pid_t ctl_script_sup_pid(void)
{
    return sup.pid;
}

unsigned ctl_script_sup_restarts(void)
{
    return sup.restarts;
}

uint64_t ctl_script_sup_started(void)
{
    return sup.pid > 0 ? sup.started_unix : 0;
}
