/* controld control API, the worker family: list the supervised workers with their counters,
 * and restart one (the nfq worker hands its flows over, ctl_supervise.c; a hung one is killed
 * and replaced), saying which pid each restarted worker had and has now. */
#include "controld/ctl_rpc_cmd.h"
#include "controld/ctl_script_sup.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "fgx/log.h"

static void do_worker_list(struct ctl_rpc *r, const Fgx__Ctl__Request *q)
{
    (void)q;
    ctl_stats_refresh(r->ctx, CTL_RPC_STATS_TIMEOUT_MS);
    r->reply.n_workers = ctl_rpc_reply_workers(r);
    r->reply.workers = r->workers;
}

static pid_t sup_pid(const struct ctl_sup *s)
{
    struct ctl_sup_info info;

    if (!s)
        return 0;
    ctl_sup_info(s, &info);
    return info.pid;
}

/* The workers' list as the reply, each restarted one with the pid it had (old_pid). */
static void reply_restarted(struct ctl_rpc *r, pid_t nfq, pid_t px, pid_t sw)
{
    r->reply.n_workers = ctl_rpc_reply_workers(r);
    r->reply.workers = r->workers;
    for (size_t i = 0; i < r->reply.n_workers; i++) {
        Fgx__Ctl__Worker *w = r->workers[i];
        pid_t old = strcmp(w->kind, "nfq") == 0     ? nfq
                    : strcmp(w->kind, "proxy") == 0 ? px
                                                    : sw;

        if (old > 0) {
            w->has_old_pid = 1;
            w->old_pid = (int32_t)old;
        }
    }
}

/* The script worker: replaced at once (its interpreters keep no state worth a handover), back
 * when its new parent answers a heartbeat. */
static int script_restart(int timeout_ms)
{
    struct ctl_script_sup_info info;
    pid_t old = ctl_script_sup_pid();
    int waited = 0;

    (void)ctl_script_sup_restart();
    for (; waited < timeout_ms; waited += 10) {
        ctl_script_sup_poll();
        ctl_script_sup_info(&info);
        if (info.pid > 0 && info.pid != old && info.hb_age_ms >= 0)
            return 0;
        usleep(10000);
    }
    return -ETIMEDOUT;
}

static void do_worker_restart(struct ctl_rpc *r, const Fgx__Ctl__Request *q)
{
    const char *kind = q->worker_restart ? q->worker_restart->kind : NULL;
    pid_t old_nfq = sup_pid(r->ctx->sup), old_px = sup_pid(r->ctx->px_sup), old_sw = 0;
    int rv;

    if (!kind || (strcmp(kind, "nfq") != 0 && strcmp(kind, "proxy") != 0 &&
                  strcmp(kind, "script") != 0 && strcmp(kind, "all") != 0)) {
        ctl_rpc_fail(r, FGX__CTL__CODE__CODE_INVALID,
                     "unknown worker kind \"%s\": use nfq, proxy, script or all",
                     kind ? kind : "");
        return;
    }
    if (strcmp(kind, "script") == 0) {
        old_sw = ctl_script_sup_pid();
        if (!ctl_script_sup_url()[0]) {
            ctl_rpc_fail(r, FGX__CTL__CODE__CODE_INVALID, "no script worker runs");
            return;
        }
        rv = script_restart(CTL_RESTART_TIMEOUT_MS);
        reply_restarted(r, 0, 0, old_sw);
        if (rv < 0)
            ctl_rpc_fail(r, FGX__CTL__CODE__CODE_UNAVAILABLE,
                         "the script worker was restarted but did not answer within %d s",
                         CTL_RESTART_TIMEOUT_MS / 1000);
        return;
    }
    if (strcmp(kind, "nfq") == 0)
        old_px = 0;
    if (strcmp(kind, "proxy") == 0)
        old_nfq = 0;
    if (strcmp(kind, "proxy") == 0 || strcmp(kind, "all") == 0) {
        if (!r->ctx->px_sup) {
            if (strcmp(kind, "proxy") == 0)
                ctl_rpc_fail(r, FGX__CTL__CODE__CODE_INVALID, "no proxy worker runs");
        } else {
            rv = ctl_px_worker_restart(r->ctx, CTL_RESTART_TIMEOUT_MS);
            if (rv < 0) {
                reply_restarted(r, 0, old_px, 0);
                ctl_rpc_fail(r, FGX__CTL__CODE__CODE_UNAVAILABLE,
                             "the proxy worker was restarted but did not confirm the ruleset: %s",
                             strerror(-rv));
                return;
            }
        }
        if (strcmp(kind, "proxy") == 0) {
            reply_restarted(r, 0, old_px, 0);
            return;
        }
    }
    if (!r->ctx->sup) {
        if (strcmp(kind, "nfq") == 0)
            ctl_rpc_fail(r, FGX__CTL__CODE__CODE_INVALID, "no nfq worker runs");
        return; /* "all": nothing exists, nothing to restart */
    }
    rv = ctl_worker_restart(r->ctx, CTL_RESTART_TIMEOUT_MS);
    reply_restarted(r, old_nfq, old_px, 0);
    if (rv == -ETIMEDOUT)
        ctl_rpc_fail(r, FGX__CTL__CODE__CODE_UNAVAILABLE,
                     "the nfq worker was restarted but did not confirm the ruleset within %d s",
                     CTL_RESTART_TIMEOUT_MS / 1000);
    else if (rv < 0)
        ctl_rpc_fail(r, FGX__CTL__CODE__CODE_ERROR, "cannot restart the nfq worker: %s",
                     strerror(-rv));
}

const struct ctl_rpc_cmd ctl_rpc_worker_cmds[] = {
    {FGX__CTL__REQUEST__REQ_WORKER_LIST, do_worker_list, 0},
    {FGX__CTL__REQUEST__REQ_WORKER_RESTART, do_worker_restart, 0},
    {0, NULL, 0},
};
