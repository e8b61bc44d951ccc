/* controld control API, the worker family: list the supervised workers with their counters,
 * and restart one (the nfq worker hands its flows over, ctl_supervise.c). */
#include "controld/ctl_rpc_cmd.h"

#include <errno.h>
#include <string.h>

#include "fgx/log.h"

static void do_worker_list(struct ctl_rpc *r, const Fgx__Ctl__Request *q)
{
    (void)q;
    ctl_stats_refresh(r->ctx, CTL_RPC_STATS_TIMEOUT_MS);
    r->reply.n_workers = ctl_rpc_reply_workers(r);
    r->reply.workers = r->workers;
}

static void do_worker_restart(struct ctl_rpc *r, const Fgx__Ctl__Request *q)
{
    const char *kind = q->worker_restart ? q->worker_restart->kind : NULL;
    int rv;

    if (!kind ||
        (strcmp(kind, "nfq") != 0 && strcmp(kind, "proxy") != 0 && strcmp(kind, "all") != 0)) {
        ctl_rpc_fail(r, FGX__CTL__CODE__CODE_INVALID,
                     "unknown worker kind \"%s\": use nfq, proxy or all", kind ? kind : "");
        return;
    }
    if (strcmp(kind, "proxy") == 0 || strcmp(kind, "all") == 0) {
        if (!r->ctx->px_sup) {
            if (strcmp(kind, "proxy") == 0)
                ctl_rpc_fail(r, FGX__CTL__CODE__CODE_INVALID, "no proxy worker runs");
        } else {
            rv = ctl_px_worker_restart(r->ctx, CTL_RESTART_TIMEOUT_MS);
            if (rv < 0) {
                r->reply.n_workers = ctl_rpc_reply_workers(r);
                r->reply.workers = r->workers;
                ctl_rpc_fail(r, FGX__CTL__CODE__CODE_UNAVAILABLE,
                             "the proxy worker was restarted but did not confirm the ruleset: %s",
                             strerror(-rv));
                return;
            }
        }
        if (strcmp(kind, "proxy") == 0) {
            r->reply.n_workers = ctl_rpc_reply_workers(r);
            r->reply.workers = r->workers;
            return;
        }
    }
    if (!r->ctx->sup) {
        if (strcmp(kind, "nfq") == 0)
            ctl_rpc_fail(r, FGX__CTL__CODE__CODE_INVALID, "no nfq worker runs");
        return; /* "all": nothing exists, nothing to restart */
    }
    rv = ctl_worker_restart(r->ctx, CTL_RESTART_TIMEOUT_MS);
    r->reply.n_workers = ctl_rpc_reply_workers(r);
    r->reply.workers = r->workers;
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
