/* controld supervision stage: the nfq worker's life cycle (spawn, reap, restart with backoff)
 * and the req side of the data-path channel it dials. A restarted worker gets the full ruleset
 * from the caller, which learns of the restart from ctl_sup_poll().
 *
 * Liveness (issue 24): a heartbeat every SUP_HB_PERIOD_MS, on a context of its own beside the
 * pushes; a worker that leaves one unanswered for SUP_HB_MISS_MS, or whose answer shows a
 * data-path thread that has not turned its loop for SUP_HB_MISS_MS, is killed (SIGKILL) and
 * replaced at once. Workers outlive an unclean death of controld (no PDEATHSIG); the next
 * controld finds the one named in RUN_DIR/NAME.pid, and adopts it when it answers a heartbeat
 * on the same channel address, instead of starting another. */
#include "controld/ctl_supervise.h"
#include "controld/ctl_health.h"
#include "controld/ctl_priv.h"
#include "controld/ctl_proc.h"
#include "controld/ctl_script_sup.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fgx/chan.h"
#include "controld/ctl_health.h"
#include "fgx/log.h"
#include "fgx/priv.h"

/* A dead worker is a gap in filtering (fail-closed: an outage of the service), so the backoff
 * stays short: it only keeps a worker that crashes at once from spinning, and is capped so that
 * filtering is back within about a second even in a crash loop. */
#define SUP_BACKOFF_MIN_MS 100
#define SUP_BACKOFF_MAX_MS 1000
#define SUP_STABLE_MS 5000
#define SUP_STOP_GRACE_MS 2000
#define SUP_HANDOVER_MS 5000
#define SUP_HB_PERIOD_MS 200
#define SUP_HB_MISS_MS 1000
/* A new worker's first answer may take this long (it dials, then loads nothing yet). */
#define SUP_HB_FIRST_MS 5000
/* Unanswered that long, the worker is not asked anything else (a push, stats): the loop does
 * not wait on a worker that is about to be replaced. */
#define SUP_HB_SLOW_MS 400
/* A restarted controld waits that long for the worker its predecessor left to say hello. */
#define SUP_ADOPT_WAIT_MS 3000

struct ctl_sup {
    char *run_dir, *worker_path, *log_level, *user;
    unsigned threads, queue_base, proxy_port, max_conns, nfq_flows, nfq_script_flows;
    unsigned udp_idle_s;
    bool has_max_per_src, has_first_byte;
    unsigned max_per_src, first_byte_s;
    bool no_synack_log;
    const char *name; /* "nfqworker" or "proxyworker", for paths and logs */
    struct fgx_chan *chan;
    struct ctl_proc proc;
    pid_t pid; /* proc.pid, kept beside it for the many readers */
    bool acked; /* the current worker acknowledged a ruleset: it is running */
    /* The database hashes of the ruleset the current worker acknowledged last: sent as their
     * hash only next time (a rule change then ships only what changed). Emptied whenever it
     * is not certain what the worker runs (a new worker, a push without an ACK). */
    uint64_t *known;
    size_t nknown;
    bool spawned_once;
    uint64_t generation;
    uint32_t restarts;
    uint32_t seccomp_kills; /* deaths by a system call outside its allow-list (SIGSYS) */
    uint64_t instance;
    uint64_t started_ms, restart_at_ms, backoff_ms;
    uint64_t started_unix;
    bool restart_requested;
    uint64_t kill_at_ms; /* a requested stop turns into SIGKILL then */
    /* A planned restart of the nfq worker: the old worker's flows, for the next one before its
     * first ruleset (FGX_DP_FLOWS). NULL: nothing to hand over (a crash, or it failed). */
    struct fgx_dp_msg handover;
    /* Liveness: the heartbeat in flight (NULL: none), when it left, the last answer */
    struct fgx_chan_pending *hb;
    uint64_t hb_sent_ms, hb_ok_ms;
    uint64_t polled_ms; /* the last heartbeat poll: a long gap means controld itself stalled */
    bool hb_ever; /* the current process answered one */
    uint64_t config; /* hash of the worker's command line, in its pid file */
    uint64_t worker_id; /* from its answers; 0: not known yet */
    uint64_t spawn_seq;
    bool replacing; /* killed as hung: restart at once when it is gone */
    char reason[96]; /* why the last one was replaced ("" none) */
};

static uint64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static int worker_path_default(const char *name, char **out)
{
    char exe[PATH_MAX], path[PATH_MAX + 32];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    char *slash;

    if (n == -1) {
        fgx_err("cannot read /proc/self/exe: %s", strerror(errno));
        return -errno;
    }
    exe[n] = '\0';
    slash = strrchr(exe, '/');
    if (slash)
        *slash = '\0';
    /* Next to controld (the build tree), else where `make install` puts the workers:
     * PREFIX/lib/fgex beside PREFIX/sbin, found from controld's own place so that a copy
     * under DESTDIR or another PREFIX finds its own. */
    snprintf(path, sizeof(path), "%s/%s", slash ? exe : ".", name);
    if (access(path, X_OK) == -1)
        (void)snprintf(path, sizeof(path), "%s/../lib/fgex/%s", slash ? exe : ".", name);
    *out = strdup(path);
    return *out ? 0 : -ENOMEM;
}

/* A worker's command line, in buffers of its own. */
struct sup_argv {
    char url[PATH_MAX + 16], threads[16], base[16], port[16], conns[16], flows[16];
    char per_src[16], first[16], sflows[16], uidle[16];
    char *argv[20]; /* spare slots (and the NULL after them) for the options */
};

static void sup_argv_build(const struct ctl_sup *s, struct sup_argv *a)
{
    char **argv = a->argv;
    int argc = 11;

    memset(a->argv, 0, sizeof(a->argv));
    argv[0] = s->worker_path;
    argv[1] = "--control";
    argv[2] = a->url;
    argv[3] = "--threads";
    argv[4] = a->threads;
    argv[5] = "--queue-base";
    argv[6] = a->base;
    argv[7] = "--log-level";
    argv[8] = s->log_level;
    argv[9] = "--user";
    argv[10] = s->user;
    snprintf(a->url, sizeof(a->url), "ipc://%s/%s.sock", s->run_dir,
             s->proxy_port ? "proxy" : "nfq");
    snprintf(a->threads, sizeof(a->threads), "%u", s->threads);
    snprintf(a->base, sizeof(a->base), "%u", s->queue_base);
    snprintf(a->port, sizeof(a->port), "%u", s->proxy_port);
    snprintf(a->conns, sizeof(a->conns), "%u", s->max_conns);
    snprintf(a->flows, sizeof(a->flows), "%u", s->nfq_flows);
    snprintf(a->sflows, sizeof(a->sflows), "%u", s->nfq_script_flows);
    snprintf(a->per_src, sizeof(a->per_src), "%u", s->max_per_src);
    snprintf(a->first, sizeof(a->first), "%u", s->first_byte_s);
    snprintf(a->uidle, sizeof(a->uidle), "%u", s->udp_idle_s);
    if (s->udp_idle_s) {
        argv[argc++] = "--udp-idle";
        argv[argc++] = a->uidle;
    }
    if (s->proxy_port) {
        /* proxyworker: --listen-port instead of --queue-base, and its limits when set */
        argv[5] = "--listen-port";
        argv[6] = a->port;
        if (s->max_conns) {
            argv[argc++] = "--max-conns";
            argv[argc++] = a->conns;
        }
        if (s->has_max_per_src) {
            argv[argc++] = "--max-conns-per-src";
            argv[argc++] = a->per_src;
        }
        if (s->has_first_byte) {
            argv[argc++] = "--first-byte-timeout";
            argv[argc++] = a->first;
        }
        /* where the services' scripts run (issue 16) */
        argv[argc++] = "--script-url";
        argv[argc++] = (char *)ctl_script_sup_url();
    } else {
        if (s->no_synack_log)
            argv[argc++] = "--no-synack-log";
        if (s->nfq_flows) {
            argv[argc++] = "--flows";
            argv[argc++] = a->flows;
        }
        if (s->nfq_script_flows) {
            argv[argc++] = "--script-flows";
            argv[argc++] = a->sflows;
        }
        /* scripts on nfqueue services (issue 16): the packet threads dial it too */
        argv[argc++] = "--script-url";
        argv[argc++] = (char *)ctl_script_sup_url();
    }
}

static int sup_spawn(struct ctl_sup *s)
{
    struct sup_argv a;
    char **argv = a.argv;
    pid_t pid;

    sup_argv_build(s, &a);
    pid = fork();
    if (pid == -1) {
        int rv = -errno;
        fgx_err("cannot fork %s: %s", s->name, strerror(errno));
        return rv;
    }
    if (pid == 0) {
        sigset_t all;

        /* No PR_SET_PDEATHSIG: a worker outlives controld's unclean death and keeps filtering
         * until the next controld adopts it (RUN_DIR/NAME.pid); a clean stop stops it. */
        sigemptyset(&all);
        sigprocmask(SIG_SETMASK, &all, NULL);
        signal(SIGPIPE, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        signal(SIGINT, SIG_DFL);
        signal(SIGCHLD, SIG_DFL);
        /* The LMDB environment, the pid-file lock and nng's sockets stay with controld. */
        close_range(3, ~0u, 0);
        execv(s->worker_path, argv);
        fgx_err("cannot run %s: %s", s->worker_path, strerror(errno));
        _exit(127);
    }
    ctl_proc_child(&s->proc, pid);
    s->pid = pid;
    s->acked = false;
    s->nknown = 0;
    /* told apart from every worker id (which the process itself draws) by the top bit */
    s->instance = (1ull << 63) | ++s->spawn_seq;
    s->worker_id = 0;
    s->hb_ever = false;
    s->started_ms = now_ms();
    s->hb_ok_ms = s->started_ms;
    (void)ctl_proc_pidfile_write(s->run_dir, s->name, pid, s->config);
    s->started_unix = (uint64_t)time(NULL);
    if (s->spawned_once)
        s->restarts++;
    s->spawned_once = true;
    fgx_info("started %s (pid %d, %u threads)", s->name, (int)pid, s->threads);
    return 0;
}

static int sup_call(struct ctl_sup *s, const struct fgx_dp_msg *req, int timeout_ms,
                    struct fgx_dp_msg *reply);

/* The worker a controld before this one left running (RUN_DIR/NAME.pid): adopted when it
 * answers a heartbeat on the channel within SUP_ADOPT_WAIT_MS, so that it goes on filtering
 * with every connection it carries; else killed, since it holds the queues (or the proxy's
 * port) a new one needs. Returns whether it was adopted. */
static bool sup_adopt(struct ctl_sup *s)
{
    struct fgx_dp_msg req = {.type = FGX_DP_HEARTBEAT_REQUEST}, reply = {0};
    struct ctl_proc old = CTL_PROC_INIT;
    pid_t pid = ctl_proc_pidfile_read(s->run_dir, s->name, s->config);
    int rv;

    if (pid < 0) {
        /* started with other options (threads, queues, port, limits): it cannot serve
         * this controld's rules */
        pid = -pid;
        if (ctl_proc_adopt(&old, pid) == 0) {
            ctl_health_note(0, CTL_HEALTH_INFO, "worker-stale", 0,
                            "%s pid %d, left by the previous controld, runs with other options: "
                            "replaced",
                            s->name, (int)pid);
            ctl_proc_stop(&old, SUP_STOP_GRACE_MS, s->name);
        }
        return false;
    }
    if (pid == 0 || ctl_proc_adopt(&old, pid) < 0)
        return false;
    rv = sup_call(s, &req, SUP_ADOPT_WAIT_MS, &reply);
    if (rv == 0 && reply.type == FGX_DP_HEARTBEAT && (pid_t)reply.u.heartbeat.pid == pid) {
        s->proc = old;
        s->pid = pid;
        s->worker_id = s->instance = reply.u.heartbeat.worker_id;
        s->generation = reply.u.heartbeat.generation;
        s->acked = s->generation != 0;
        s->hb_ever = true;
        s->started_ms = s->hb_ok_ms = now_ms();
        s->started_unix = (uint64_t)time(NULL);
        s->spawned_once = true;
        ctl_health_note(0, CTL_HEALTH_INFO, "worker-adopted", 0,
                        "adopted %s pid %d (generation %llu): it kept filtering while controld "
                        "was away",
                        s->name, (int)pid, (unsigned long long)s->generation);
        fgx_dp_msg_release(&reply);
        return true;
    }
    if (rv == 0)
        fgx_dp_msg_release(&reply);
    ctl_health_note(0, CTL_HEALTH_WARN, "worker-stale", 0,
                    "%s pid %d, left by the previous controld, did not answer within %d s: "
                    "killed, a new one starts",
                    s->name, (int)pid, SUP_ADOPT_WAIT_MS / 1000);
    ctl_proc_stop(&old, 0, s->name);
    return false;
}

int ctl_sup_start(const struct ctl_sup_config *cfg, struct ctl_sup **out)
{
    struct ctl_sup *s = calloc(1, sizeof(*s));
    char url[PATH_MAX + 16];
    int rv = -ENOMEM;

    if (!s)
        return -ENOMEM;
    s->run_dir = strdup(cfg->run_dir);
    s->log_level = strdup(cfg->log_level ? cfg->log_level : "info");
    s->user = strdup(ctl_priv_get() ? ctl_priv_get()->user : FGX_PRIV_USER_DEFAULT);
    if (!s->run_dir || !s->log_level || !s->user)
        goto err;
    if (cfg->worker_path) {
        s->worker_path = strdup(cfg->worker_path);
        if (!s->worker_path)
            goto err;
    } else {
        rv = worker_path_default(cfg->proxy_port ? "proxyworker" : "nfqworker", &s->worker_path);
        if (rv < 0)
            goto err;
    }
    s->threads = cfg->threads ? cfg->threads : 1;
    s->queue_base = cfg->queue_base;
    s->proxy_port = cfg->proxy_port;
    s->max_conns = cfg->max_conns;
    s->has_max_per_src = cfg->has_max_per_src;
    s->max_per_src = cfg->max_per_src;
    s->has_first_byte = cfg->has_first_byte;
    s->first_byte_s = cfg->first_byte_s;
    s->no_synack_log = cfg->no_synack_log;
    s->nfq_flows = cfg->nfq_flows;
    s->nfq_script_flows = cfg->nfq_script_flows;
    s->udp_idle_s = cfg->udp_idle_s;
    s->name = cfg->proxy_port ? "proxyworker" : "nfqworker";
    s->backoff_ms = SUP_BACKOFF_MIN_MS;
    snprintf(url, sizeof(url), "ipc://%s/%s.sock", s->run_dir, s->proxy_port ? "proxy" : "nfq");
    rv = fgx_chan_listen(url, FGX_CHAN_REQ, &s->chan);
    if (rv < 0)
        goto err;
    /* the worker dials it as its user (after its drop, again when the channel breaks) */
    rv = ctl_priv_socket_share(url + strlen("ipc://"));
    if (rv < 0)
        goto err;
    {
        struct sup_argv a;

        sup_argv_build(s, &a);
        s->config = ctl_proc_config(a.argv);
    }
    if (sup_adopt(s)) {
        *out = s;
        return 0;
    }
    rv = sup_spawn(s);
    if (rv < 0)
        s->restart_at_ms = now_ms() + s->backoff_ms;
    *out = s;
    return 0;
err:
    ctl_sup_stop(s);
    return rv;
}

/* The worker is gone (status from waitpid(), -1 unknown: an adopted one): schedule its
 * restart. */
static void sup_reaped(struct ctl_sup *s, int status, uint64_t now)
{
    if (s->restart_requested || s->replacing) {
        /* Asked for, or killed as hung: restart at once, and leave the crash backoff as it
         * was. */
        fgx_info("%s (pid %d) stopped for a %s restart", s->name, (int)s->pid,
                 s->replacing ? "hung worker's" : "requested");
        s->restart_at_ms = now;
    } else {
        if (status == -1)
            fgx_warn("%s (pid %d) ended (not controld's child: its status is not known)",
                     s->name, (int)s->pid);
        else if (WIFSIGNALED(status) && WTERMSIG(status) == SIGSYS) {
            /* SECCOMP_RET_KILL_PROCESS: the worker tried a system call outside its list
             * (fgx/priv.h), an exploit's or a bug's; it is replaced as after a crash */
            s->seccomp_kills++;
            ctl_health_note(0, CTL_HEALTH_ERROR, "worker-seccomp", s->seccomp_kills,
                            "%s killed by seccomp (%s); restarting it", s->name,
                            ctl_priv_seccomp_syscall(s->pid));
        } else if (WIFSIGNALED(status))
            fgx_warn("%s (pid %d) killed by signal %d", s->name, (int)s->pid, WTERMSIG(status));
        else
            fgx_warn("%s (pid %d) exited with status %d", s->name, (int)s->pid,
                     WEXITSTATUS(status));
        if (now - s->started_ms >= SUP_STABLE_MS)
            s->backoff_ms = SUP_BACKOFF_MIN_MS;
        s->restart_at_ms = now + s->backoff_ms;
        /* A death hands nothing over: a handover kept from a planned restart would be stale. */
        fgx_dp_msg_release(&s->handover);
        fgx_info("restarting %s in %llu ms", s->name, (unsigned long long)s->backoff_ms);
        if (status == -1)
            ctl_health_note(0, CTL_HEALTH_WARN, "worker-restart", 0,
                            "%s (pid %d) ended; restarting it in %llu ms (meanwhile fail_open "
                            "services pass unfiltered, the others are not served)",
                            s->name, (int)s->pid, (unsigned long long)s->backoff_ms);
        else
            ctl_health_note(0, CTL_HEALTH_WARN, "worker-restart", 0,
                            "%s (pid %d) %s %d; restarting it in %llu ms (meanwhile fail_open "
                            "services pass unfiltered, the others are not served)",
                            s->name, (int)s->pid,
                            WIFSIGNALED(status) ? "was killed by signal" : "exited with",
                            WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status),
                            (unsigned long long)s->backoff_ms);
        s->backoff_ms =
            s->backoff_ms * 2 > SUP_BACKOFF_MAX_MS ? SUP_BACKOFF_MAX_MS : s->backoff_ms * 2;
    }
    s->pid = 0;
    s->acked = false;
    s->started_unix = 0;
    s->restart_requested = false;
    s->replacing = false;
    s->kill_at_ms = 0;
    fgx_chan_call_cancel(s->hb);
    s->hb = NULL;
}

/* Kill the worker as hung (why: for the health log) and replace it at once: SIGKILL, since a
 * stopped or deadlocked process handles no SIGTERM. */
static void sup_replace(struct ctl_sup *s, const char *why)
{
    (void)snprintf(s->reason, sizeof(s->reason), "%s", why);
    ctl_health_note(0, CTL_HEALTH_WARN, "worker-hung", 0, "%s pid %d replaced: %s", s->name,
                    (int)s->pid, why);
    fgx_chan_call_cancel(s->hb);
    s->hb = NULL;
    fgx_dp_msg_release(&s->handover);
    s->nknown = 0;
    (void)ctl_proc_signal(&s->proc, SIGKILL);
    s->replacing = true;
}

/* What one heartbeat answer says: a data-path thread that has not turned its loop. */
static void sup_hb_judge(struct ctl_sup *s, const struct fgx_dp_heartbeat *h, uint64_t now)
{
    char why[96];

    s->hb_ok_ms = now;
    s->hb_ever = true;
    if (h->worker_id != 0)
        s->worker_id = s->instance = h->worker_id;
    for (uint32_t i = 0; i < h->nthreads; i++) {
        if (h->stale_ms[i] >= SUP_HB_MISS_MS) {
            (void)snprintf(why, sizeof(why), "thread %u made no progress for %.1f s", i,
                           h->stale_ms[i] / 1000.0);
            sup_replace(s, why);
            return;
        }
    }
}

/* Liveness: look at the heartbeat in flight, judge, send the next. Never blocks. */
static void sup_hb_poll(struct ctl_sup *s, uint64_t now)
{
    struct fgx_dp_msg req = {.type = FGX_DP_HEARTBEAT_REQUEST}, reply;
    void *buf = NULL;
    size_t len = 0;
    char why[96];
    bool away;
    int rv;

    if (s->pid <= 0 || s->restart_requested || s->replacing)
        return;
    /* After a long gap since the last look (controld itself stopped, say) an answer may
     * still be on its way in: judged at the next look, not this one. */
    away = now - s->polled_ms > 2 * SUP_HB_PERIOD_MS;
    s->polled_ms = now;
    if (s->hb) {
        rv = fgx_chan_call_end(s->hb, &buf, &len);
        if (rv == -EINPROGRESS) {
            if (away)
                return;
            /* Judged by how long this one waits, not by the last answer's age: a loop of
             * controld's that was busy a while sent none meanwhile, through no fault of the
             * worker's. */
            if (s->hb_ever ? now - s->hb_sent_ms < SUP_HB_MISS_MS
                           : now - s->started_ms < SUP_HB_FIRST_MS)
                return;
            if (s->hb_ever)
                (void)snprintf(why, sizeof(why), "no heartbeat for %.1f s",
                               (now - s->hb_ok_ms) / 1000.0);
            else
                (void)snprintf(why, sizeof(why), "no heartbeat within %.1f s of its start",
                               (now - s->started_ms) / 1000.0);
            sup_replace(s, why);
            return;
        }
        s->hb = NULL;
        if (rv == 0 && fgx_dp_decode(buf, len, &reply) == 0) {
            if (reply.type == FGX_DP_HEARTBEAT)
                sup_hb_judge(s, &reply.u.heartbeat, now);
            fgx_dp_msg_release(&reply);
        }
        /* the answer's buffer, before buf holds the next request */
        free(buf);
        buf = NULL;
        if (s->replacing)
            return;
    }
    if (now - s->hb_sent_ms >= SUP_HB_PERIOD_MS && fgx_dp_encode(&req, &buf, &len) == 0) {
        if (fgx_chan_call_begin(s->chan, buf, len, 2 * SUP_HB_MISS_MS, &s->hb) < 0)
            s->hb = NULL;
        s->hb_sent_ms = now;
        free(buf);
        return;
    }
}

/* Take in the heartbeat in flight if its answer came (the loop may not have looked for a
 * while: a long request, a restart that polls another worker). */
static void sup_hb_collect(struct ctl_sup *s)
{
    struct fgx_dp_msg reply;
    void *buf = NULL;
    size_t len = 0;
    int rv;

    if (s->hb == NULL || s->replacing)
        return;
    rv = fgx_chan_call_end(s->hb, &buf, &len);
    if (rv == -EINPROGRESS)
        return;
    s->hb = NULL;
    if (rv == 0 && fgx_dp_decode(buf, len, &reply) == 0) {
        if (reply.type == FGX_DP_HEARTBEAT)
            sup_hb_judge(s, &reply.u.heartbeat, now_ms());
        fgx_dp_msg_release(&reply);
    }
    free(buf);
}

/* A heartbeat has waited long enough that the worker is not asked anything else: it is about
 * to be replaced, and the loop must not wait on it. */
static bool sup_unresponsive(struct ctl_sup *s)
{
    sup_hb_collect(s);
    return s->replacing ||
           (s->hb != NULL && s->hb_ever && now_ms() - s->hb_sent_ms >= SUP_HB_SLOW_MS);
}

int ctl_sup_poll(struct ctl_sup *s, bool *respawned)
{
    uint64_t now = now_ms();
    int status = 0;

    *respawned = false;
    if (s->pid > 0) {
        if (ctl_proc_reap(&s->proc, &status) == 0) {
            if (s->restart_requested && s->kill_at_ms != 0 && now >= s->kill_at_ms) {
                fgx_warn("%s (pid %d) ignored SIGTERM; killing it", s->name, (int)s->pid);
                (void)ctl_proc_signal(&s->proc, SIGKILL);
                s->kill_at_ms = 0;
            }
            sup_hb_poll(s, now);
            return 0;
        }
        sup_reaped(s, status, now);
        if (now < s->restart_at_ms)
            return 0;
    }
    if (now < s->restart_at_ms)
        return 0;
    if (sup_spawn(s) < 0) {
        s->restart_at_ms = now + s->backoff_ms;
        return 0;
    }
    *respawned = true;
    return 0;
}

static void sup_take_flows(struct ctl_sup *s);

/* One heartbeat, waited for (a requested restart asks first whether the worker can hand its
 * flows over at all). */
static bool sup_answers(struct ctl_sup *s)
{
    struct fgx_dp_msg req = {.type = FGX_DP_HEARTBEAT_REQUEST}, reply = {0};
    bool ok;

    if (sup_unresponsive(s))
        return false;
    ok = sup_call(s, &req, SUP_HB_MISS_MS, &reply) == 0 && reply.type == FGX_DP_HEARTBEAT;
    if (ok) {
        sup_hb_judge(s, &reply.u.heartbeat, now_ms());
        ok = !s->replacing;
    }
    fgx_dp_msg_release(&reply);
    return ok;
}

int ctl_sup_restart(struct ctl_sup *s)
{
    int rv;

    if (s->pid <= 0) {
        s->restart_at_ms = 0; /* down, waiting out a backoff: now is a fine time */
        return 0;
    }
    if (s->replacing)
        return 0; /* already on its way out */
    if (!sup_answers(s)) {
        /* A hung worker hands nothing over and handles no SIGTERM. */
        if (!s->replacing)
            sup_replace(s, "it did not answer a requested restart's heartbeat within 1 s");
        return 0;
    }
    sup_take_flows(s);
    rv = ctl_proc_signal(&s->proc, SIGTERM);
    if (rv < 0 && rv != -ESRCH) {
        fgx_err("cannot stop %s (pid %d): %s", s->name, (int)s->pid, strerror(-rv));
        return rv;
    }
    s->restart_requested = true;
    s->kill_at_ms = now_ms() + SUP_STOP_GRACE_MS;
    fgx_info("restarting %s (pid %d) on request", s->name, (int)s->pid);
    return 0;
}

static int sup_call(struct ctl_sup *s, const struct fgx_dp_msg *req, int timeout_ms,
                    struct fgx_dp_msg *reply);

/* Before a planned restart of the nfq worker: ask it for its flows (it stops its data path and
 * exits after answering), to give them to the next one. Without them (an old worker, a
 * timeout) the connections open across the restart meet their services' midstream policy. */
static void sup_take_flows(struct ctl_sup *s)
{
    struct fgx_dp_msg req = {.type = FGX_DP_FLOWS_REQUEST}, reply = {0};
    int rv;

    fgx_dp_msg_release(&s->handover);
    if (s->proxy_port || !s->acked)
        return;
    rv = sup_call(s, &req, SUP_HANDOVER_MS, &reply);
    if (rv == 0 && reply.type == FGX_DP_FLOWS) {
        fgx_info("%s handed over %zu bytes of flows", s->name, reply.u.flows.len);
        s->handover = reply;
        return;
    }
    fgx_warn("%s handed no flows over (%s): open connections meet the midstream policy", s->name,
             rv < 0                                        ? strerror(-rv)
             : reply.type == FGX_DP_ERROR && reply.u.error ? reply.u.error
                                                           : "unexpected reply");
    if (rv == 0)
        fgx_dp_msg_release(&reply);
}

/* One request, one decoded reply. */
/* How long an answer may still take after its worker ended. */
#define SUP_CALL_GRACE_MS 200

/* One call on the worker's channel that ends when the worker does: a worker killed while
 * controld waits for its answer (a ruleset push, a handover) is seen within milliseconds, not
 * at the call's timeout, which left its services unserved for seconds more (bench/soak). The
 * reply as for fgx_chan_call(); -ECONNRESET when the worker ended first. */
static int sup_call_wait(struct ctl_sup *s, const void *req, size_t len, int timeout_ms,
                         void **rbuf, size_t *rlen)
{
    struct fgx_chan_pending *p;
    struct pollfd pfd[2];
    int rv, wfd;

    rv = fgx_chan_call_begin(s->chan, req, len, timeout_ms, &p);
    if (rv < 0)
        return rv;
    wfd = ctl_proc_watch_fd(&s->proc); /* -1: none to watch (an adoption's first call) */
    pfd[0] = (struct pollfd){.fd = fgx_chan_call_fd(p), .events = POLLIN};
    pfd[1] = (struct pollfd){.fd = wfd, .events = POLLIN};
    for (;;) {
        rv = fgx_chan_call_end(p, rbuf, rlen);
        if (rv != -EINPROGRESS)
            break;
        /* nng ends the call at its timeout; the poll waits for that or the worker's end */
        if (poll(pfd, wfd != -1 ? 2 : 1, -1) == -1 && errno != EINTR) {
            rv = -errno;
            fgx_chan_call_cancel(p);
            break;
        }
        if (wfd != -1 && (pfd[1].revents & (POLLIN | POLLHUP | POLLERR))) {
            /* an answer sent just before the end (a handover's worker exits after it) may
             * still be on its way through nng */
            (void)poll(pfd, 1, SUP_CALL_GRACE_MS);
            rv = fgx_chan_call_end(p, rbuf, rlen);
            if (rv != -EINPROGRESS)
                break;
            fgx_chan_call_cancel(p);
            fgx_warn("%s (pid %d) ended while controld waited for its answer", s->name,
                     (int)s->pid);
            rv = -ECONNRESET;
            break;
        }
    }
    if (wfd != -1)
        close(wfd);
    return rv;
}

static int sup_call(struct ctl_sup *s, const struct fgx_dp_msg *req, int timeout_ms,
                    struct fgx_dp_msg *reply)
{
    void *buf = NULL, *rbuf = NULL;
    size_t len, rlen;
    int rv;

    rv = fgx_dp_encode(req, &buf, &len);
    if (rv < 0) {
        fgx_err("cannot encode a message for %s: %s", s->name, strerror(-rv));
        return rv;
    }
    rv = sup_call_wait(s, buf, len, timeout_ms, &rbuf, &rlen);
    free(buf);
    if (rv < 0)
        return rv;
    rv = fgx_dp_decode(rbuf, rlen, reply);
    free(rbuf);
    if (rv < 0)
        fgx_err("%s sent an undecodable reply", s->name);
    return rv;
}

static bool known_has(const struct ctl_sup *s, uint64_t hash)
{
    size_t i;

    for (i = 0; i < s->nknown; i++)
        if (s->known[i] == hash)
            return true;
    return false;
}

/* The worker acknowledged rs: its databases are what it holds now. */
static void known_set(struct ctl_sup *s, const struct fgx_dp_ruleset *rs)
{
    uint64_t *k = realloc(s->known, (rs->nservices * 2 + 1) * sizeof(*k));
    size_t i;
    int d;

    s->nknown = 0;
    if (k == NULL)
        return; /* then everything goes in full: slower, never wrong */
    s->known = k;
    for (i = 0; i < rs->nservices; i++)
        for (d = 0; d < 2; d++)
            if (rs->services[i].db[d].len > 0 && rs->services[i].db[d].hash != 0 &&
                !known_has(s, rs->services[i].db[d].hash))
                s->known[s->nknown++] = rs->services[i].db[d].hash;
}

/* A copy of rs's service table (sharing everything else) where the databases the worker holds
 * travel as their hash. *out NULL: none does, send rs itself. */
static int strip_known(const struct ctl_sup *s, const struct fgx_dp_ruleset *rs,
                       struct fgx_dp_service **out)
{
    struct fgx_dp_service *v;
    bool any = false;
    size_t i;
    int d;

    *out = NULL;
    for (i = 0; i < rs->nservices && !any; i++)
        for (d = 0; d < 2; d++)
            any |= rs->services[i].db[d].len > 0 && known_has(s, rs->services[i].db[d].hash);
    if (!any)
        return 0;
    v = malloc(rs->nservices * sizeof(*v));
    if (v == NULL)
        return -ENOMEM;
    memcpy(v, rs->services, rs->nservices * sizeof(*v));
    for (i = 0; i < rs->nservices; i++)
        for (d = 0; d < 2; d++)
            if (v[i].db[d].len > 0 && v[i].db[d].hash != 0 && known_has(s, v[i].db[d].hash)) {
                v[i].db[d].data = NULL;
                v[i].db[d].len = 0;
                v[i].db_known[d] = true;
            }
    *out = v;
    return 0;
}

/* What is left of a push's deadline for its next call on the worker's channel: one deadline
 * for the handover, the stripped ruleset and the full one again (three calls of the whole
 * timeout each held the control loop three times as long), with a floor of
 * SUP_CALL_FLOOR_MS so a worker that answers at once is still heard after a slow call. */
#define SUP_CALL_FLOOR_MS 100

static int sup_left(uint64_t deadline)
{
    uint64_t now = now_ms();

    return now + SUP_CALL_FLOOR_MS >= deadline ? SUP_CALL_FLOOR_MS : (int)(deadline - now);
}

uint64_t ctl_sup_now_ms(void)
{
    return now_ms();
}

int ctl_sup_push(struct ctl_sup *s, const struct fgx_dp_ruleset *rs, uint64_t deadline)
{
    struct fgx_dp_msg req = {.type = FGX_DP_RULESET, .u.ruleset = *rs};
    struct fgx_dp_msg reply;
    struct fgx_dp_service *stripped = NULL;
    int rv;

    if (s->pid <= 0) {
        /* Nothing to wait for: the restarted worker gets the full ruleset anyway. */
        fgx_warn("%s is down; generation %llu goes to it when it is back", s->name,
                 (unsigned long long)rs->generation);
        return -ENOTCONN;
    }
    if (sup_unresponsive(s)) {
        /* about to be replaced: its successor gets the full ruleset */
        fgx_warn("%s does not answer; generation %llu goes to its successor", s->name,
                 (unsigned long long)rs->generation);
        return -ETIMEDOUT;
    }
    if (s->handover.type == FGX_DP_FLOWS && !s->restart_requested) {
        /* The new worker takes the old one's flows before its first ruleset. */
        rv = sup_call(s, &s->handover, sup_left(deadline), &reply);
        if (rv == 0 && reply.type == FGX_DP_ACK)
            fgx_info("%s took the flows over", s->name);
        else
            fgx_warn("%s did not take the flows over", s->name);
        if (rv == 0)
            fgx_dp_msg_release(&reply);
        fgx_dp_msg_release(&s->handover);
    }
    if (strip_known(s, rs, &stripped) == 0 && stripped != NULL)
        req.u.ruleset.services = stripped;
    rv = sup_call(s, &req, sup_left(deadline), &reply);
    if (rv == 0 && stripped != NULL && reply.type == FGX_DP_ERROR) {
        /* It does not hold what we thought (it applied a push whose ACK we missed, say):
         * once more, in full. */
        fgx_info("%s: generation %llu again with every database (%s)", s->name,
                 (unsigned long long)rs->generation, reply.u.error ? reply.u.error : "refused");
        fgx_dp_msg_release(&reply);
        req.u.ruleset.services = rs->services;
        rv = sup_call(s, &req, sup_left(deadline), &reply);
    }
    free(stripped);
    s->nknown = 0;
    if (rv < 0) {
        fgx_warn("%s did not confirm generation %llu: %s", s->name,
                 (unsigned long long)rs->generation, strerror(-rv));
        return rv;
    }
    if (reply.type == FGX_DP_ACK && reply.u.ack_generation == rs->generation) {
        s->acked = true;
        s->generation = reply.u.ack_generation;
        known_set(s, rs);
        fgx_debug("%s applied generation %llu", s->name, (unsigned long long)s->generation);
    } else if (reply.type == FGX_DP_ERROR) {
        fgx_err("%s refused generation %llu: %s", s->name, (unsigned long long)rs->generation,
                reply.u.error ? reply.u.error : "no reason given");
        rv = -EPROTO;
    } else {
        fgx_err("%s answered generation %llu with an unexpected message", s->name,
                (unsigned long long)rs->generation);
        rv = -EPROTO;
    }
    fgx_dp_msg_release(&reply);
    return rv;
}

int ctl_sup_stats(struct ctl_sup *s, int timeout_ms, struct fgx_dp_msg *out)
{
    struct fgx_dp_msg req = {.type = FGX_DP_STATS_REQUEST};
    int rv;

    if (s->pid <= 0 || fgx_chan_peers(s->chan) == 0)
        return -ENOTCONN;
    if (sup_unresponsive(s))
        return -ETIMEDOUT;
    rv = sup_call(s, &req, timeout_ms, out);
    if (rv < 0)
        return rv;
    if (out->type != FGX_DP_STATS) {
        fgx_dp_msg_release(out);
        return -EPROTO;
    }
    return 0;
}

int ctl_sup_captures(struct ctl_sup *s, uint32_t service_id, int timeout_ms, struct fgx_dp_msg *out)
{
    struct fgx_dp_msg req = {.type = FGX_DP_CAPTURE_REQUEST, .u.capture_service = service_id};
    int rv;

    if (s->pid <= 0 || fgx_chan_peers(s->chan) == 0)
        return -ENOTCONN;
    if (sup_unresponsive(s))
        return -ETIMEDOUT;
    rv = sup_call(s, &req, timeout_ms, out);
    if (rv < 0)
        return rv;
    if (out->type != FGX_DP_CAPTURES) {
        fgx_dp_msg_release(out);
        return -EPROTO;
    }
    return 0;
}

void ctl_sup_info(const struct ctl_sup *cs, struct ctl_sup_info *out)
{
    /* A heartbeat answer that came meanwhile is taken in first, so the age shown is true:
     * the supervisor's own state, not the caller's (hence the cast). */
    struct ctl_sup *s = (struct ctl_sup *)cs;

    sup_hb_collect(s);
    out->pid = s->pid;
    out->state = s->pid <= 0 ? "down" : s->acked ? "running" : "starting";
    out->generation = s->generation;
    out->restarts = s->restarts;
    out->instance = s->instance;
    out->started = s->pid > 0 ? s->started_unix : 0;
    out->hb_age_ms = s->pid > 0 && s->hb_ever ? (int64_t)(now_ms() - s->hb_ok_ms) : -1;
    out->adopted = s->proc.adopted;
    out->replaced_why = s->reason;
    if (s->replacing)
        out->state = "replacing";
}

void ctl_sup_stop_begin(struct ctl_sup *s)
{
    if (s && s->pid > 0)
        (void)ctl_proc_signal(&s->proc, SIGTERM);
}

void ctl_sup_stop(struct ctl_sup *s)
{
    if (!s)
        return;
    fgx_chan_call_cancel(s->hb);
    s->hb = NULL;
    if (s->pid > 0) {
        /* a clean stop: the worker goes with controld (an unclean death leaves it running) */
        ctl_proc_stop(&s->proc, SUP_STOP_GRACE_MS, s->name);
        s->pid = 0;
        ctl_proc_pidfile_remove(s->run_dir, s->name);
    }
    fgx_chan_close(s->chan);
    fgx_dp_msg_release(&s->handover);
    free(s->known);
    free(s->run_dir);
    free(s->worker_path);
    free(s->log_level);
    free(s->user);
    free(s);
}
