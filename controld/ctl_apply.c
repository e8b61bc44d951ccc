/* controld apply stage: committed state -> worker (ruleset push, wait for its ACK) and kernel
 * (ctl_nft_sync), ordered so that traffic is never queued to a worker that does not know its
 * service yet; worker counters -> the statistics stage; requested worker restarts. */
#include "controld/ctl_apply.h"
#include "controld/ctl_nft_px.h"
#include "controld/ctl_script_rt.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fgx/log.h"

/* true when every service in b is queued identically in a: the change only removes rules. */
static bool nft_only_removes(const struct ctl_nft_service *a, size_t na,
                             const struct ctl_nft_service *b, size_t nb)
{
    for (size_t i = 0; i < nb; i++) {
        bool found = false;
        for (size_t j = 0; j < na && !found; j++)
            found = ctl_ruleset_nft_equal(&a[j], 1, &b[i], 1);
        if (!found)
            return false;
    }
    return true;
}

static int apply_nft(struct ctl_ctx *ctx, const struct ctl_ruleset *rs)
{
    struct ctl_nft_service *copy = NULL, *pxcopy = NULL;
    int rv;

    if (!ctx->nft)
        return 0;
    if (ctx->nft_valid && ctl_ruleset_nft_equal(ctx->nft_cur, ctx->nnft_cur, rs->nft, rs->nnft) &&
        ctl_ruleset_nft_equal(ctx->px_cur, ctx->npx_cur, rs->px, rs->npx))
        return 0;
    ctx->nft_valid = false;
    rv = ctl_nft_sync_layers(ctx->nft, rs->nft, rs->nnft, rs->px, rs->npx, ctx->px_port);
    if (rv < 0)
        return rv;
    if (rs->nnft) {
        copy = malloc(rs->nnft * sizeof(*copy));
        if (!copy)
            return 0; /* applied; we only forget what we know, so the next change resyncs */
        memcpy(copy, rs->nft, rs->nnft * sizeof(*copy));
    }
    if (rs->npx) {
        pxcopy = malloc(rs->npx * sizeof(*pxcopy));
        if (!pxcopy) {
            free(copy);
            return 0;
        }
        memcpy(pxcopy, rs->px, rs->npx * sizeof(*pxcopy));
    }
    free(ctx->nft_cur);
    ctx->nft_cur = copy;
    ctx->nnft_cur = rs->nnft;
    free(ctx->px_cur);
    ctx->px_cur = pxcopy;
    ctx->npx_cur = rs->npx;
    ctx->nft_valid = true;
    return 0;
}

int ctl_apply(struct ctl_ctx *ctx, const struct ctl_ruleset *rs, int *worker_err)
{
    return ctl_apply_timeout(ctx, rs, CTL_PUSH_TIMEOUT_MS, worker_err);
}

int ctl_apply_timeout(struct ctl_ctx *ctx, const struct ctl_ruleset *rs, int push_timeout_ms,
                      int *worker_err)
{
    /* Per layer: a worker whose rules only go away hears of it after the rules are gone;
     * one that gains anything, before the rules send it traffic. */
    bool removes =
        ctx->nft_valid && nft_only_removes(ctx->nft_cur, ctx->nnft_cur, rs->nft, rs->nnft);
    bool px_removes =
        ctx->nft_valid && nft_only_removes(ctx->px_cur, ctx->npx_cur, rs->px, rs->npx);
    /* One deadline for both workers: a change waits for them at most push_timeout_ms (and a
     * short floor for the second), not once each, while the control loop answers `busy`. */
    uint64_t deadline = ctl_sup_now_ms() + (uint64_t)(push_timeout_ms > 0 ? push_timeout_ms : 0);
    int rv_push = 0, rv_px = 0, rv_nft;

    if (!removes && ctx->sup)
        rv_push = ctl_sup_push(ctx->sup, &rs->dp, deadline);
    if (!px_removes && ctx->px_sup)
        rv_px = ctl_sup_push(ctx->px_sup, &rs->px_dp, deadline);
    rv_nft = apply_nft(ctx, rs);
    if (removes && ctx->sup)
        rv_push = ctl_sup_push(ctx->sup, &rs->dp, deadline);
    if (px_removes && ctx->px_sup)
        rv_px = ctl_sup_push(ctx->px_sup, &rs->px_dp, deadline);
    /* The proxy worker matters only while it carries services: one that is down with nothing
     * to carry gets the state when it is back, and fails no request. */
    if (rv_push == 0 && rs->px_dp.nservices > 0)
        rv_push = rv_px;
    if (ctx->sup)
        ctx->worker_stale = rv_push < 0;
    if (worker_err)
        *worker_err = rv_push;
    return rv_nft;
}

int ctl_apply_full(struct ctl_ctx *ctx, int push_timeout_ms)
{
    struct ctl_ruleset rs;
    struct ctl_txn *t;
    char err[512];
    int rv;

    rv = ctl_txn_begin(ctx->store, true, &t);
    if (rv < 0)
        return rv;
    rv = ctl_ruleset_build(t, &rs, err, sizeof(err));
    if (rv < 0) {
        fgx_err("cannot build the ruleset: %s", err);
        ctl_txn_abort(t);
        return rv;
    }
    rv = ctl_txn_commit(t);
    if (rv == 0) {
        int rv_push = 0;
        rv = ctl_apply_timeout(ctx, &rs, push_timeout_ms, &rv_push);
        if (rv == 0)
            rv = rv_push;
    }
    if (rv == 0)
        fgx_info("applied generation %llu: %zu running nfqueue and %zu proxy service(s)",
                 (unsigned long long)rs.dp.generation, rs.nnft, rs.npx);
    ctl_ruleset_release(&rs);
    return rv;
}

/* A script call past its deadline, or one that raised, is an event as well as a log entry:
 * `fgexctl events` shows it beside the blocks. */
static void script_events(struct ctl_ctx *ctx, const struct fgx_dp_stats *st,
                          const struct ctl_service *svcs, size_t nsvcs)
{
    struct timespec ts;
    uint64_t now;

    clock_gettime(CLOCK_REALTIME, &ts);
    now = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
    for (size_t i = 0; i < st->nscript_logs; i++) {
        const struct fgx_dp_script_log *e = &st->script_logs[i];
        const char *name = NULL;

        if (!e->kind || (strcmp(e->kind, "timeout") != 0 && strcmp(e->kind, "exception") != 0))
            continue;
        for (size_t k = 0; k < nsvcs; k++)
            if (svcs[k].id == e->service_id)
                name = svcs[k].name;
        ctl_stats_event_script(ctx->stats, now, e, name);
    }
}

/* The proxy worker's counters and events into the same statistics. Quiet when it is down. */
static void stats_refresh_proxy(struct ctl_ctx *ctx, int timeout_ms)
{
    struct ctl_service *svcs = NULL;
    struct ctl_sup_info info;
    struct ctl_txn *t;
    struct fgx_dp_msg m;
    size_t nsvcs = 0;

    if (!ctx->px_sup || !ctx->stats)
        return;
    ctl_sup_info(ctx->px_sup, &info);
    if (ctl_sup_stats(ctx->px_sup, timeout_ms, &m) < 0) {
        /* A dead proxy relays nothing: its connections must not stay in flows_active. */
        if (info.pid <= 0)
            ctl_stats_px_worker_down(ctx->stats);
        return;
    }
    if ((m.u.stats.nevents > 0 || m.u.stats.nscript_logs > 0) &&
        ctl_txn_begin(ctx->store, false, &t) == 0) {
        if (ctl_store_service_list(t, &svcs, &nsvcs) < 0)
            nsvcs = 0;
        ctl_txn_abort(t);
    }
    /* the process says who it is: an adopted worker's counts go on from its stored bases */
    (void)ctl_stats_ingest_proxy(ctx->stats, m.u.stats.worker_id ? m.u.stats.worker_id : info.instance,
                                 &m.u.stats, svcs, nsvcs);
    ctl_script_rt_ingest(&m.u.stats);
    script_events(ctx, &m.u.stats, svcs, nsvcs);
    if (ctl_script_rt_save(ctx->store) < 0)
        fgx_warn("state store: cannot save the script counters (tried again at the next "
                 "report)");
    free(svcs);
    fgx_dp_msg_release(&m);
    /* Saved before any request can read a new event's seq. */
    ctl_stats_flush(ctx->stats, ctx->store, ctl_sup_now_ms(), false);
}

int ctl_stats_refresh(struct ctl_ctx *ctx, int timeout_ms)
{
    struct ctl_service *svcs = NULL;
    struct ctl_sup_info info;
    struct ctl_txn *t;
    struct fgx_dp_msg m;
    size_t nsvcs = 0;
    int rv;

    if (!ctx->stats || ctx->stats_no_refresh)
        return 0;
    stats_refresh_proxy(ctx, timeout_ms);
    if (!ctx->sup)
        return 0;
    ctl_sup_info(ctx->sup, &info);
    rv = ctl_sup_stats(ctx->sup, timeout_ms, &m);
    if (rv < 0) {
        if (info.pid <= 0)
            ctl_stats_worker_down(ctx->stats);
        return rv;
    }
    /* Events carry the service's name as it is now (a script call's failure too). */
    if ((m.u.stats.nevents > 0 || m.u.stats.nscript_logs > 0) &&
        ctl_txn_begin(ctx->store, false, &t) == 0) {
        if (ctl_store_service_list(t, &svcs, &nsvcs) < 0)
            nsvcs = 0;
        ctl_txn_abort(t);
    }
    rv = ctl_stats_ingest(ctx->stats, m.u.stats.worker_id ? m.u.stats.worker_id : info.instance,
                          &m.u.stats, svcs, nsvcs);
    /* scriptworker's log entries for the NFQUEUE layer's scripted flows (nfq_script.c): the
     * functions' counters, and a call's timeout or exception an event, as the proxy's are */
    ctl_script_rt_ingest(&m.u.stats);
    script_events(ctx, &m.u.stats, svcs, nsvcs);
    if (m.u.stats.nscript_logs > 0 && ctl_script_rt_save(ctx->store) < 0)
        fgx_warn("state store: cannot save the script counters (tried again at the next "
                 "report)");
    free(svcs);
    fgx_dp_msg_release(&m);
    /* Saved before any request can read a new event's seq. */
    ctl_stats_flush(ctx->stats, ctx->store, ctl_sup_now_ms(), false);
    return rv;
}

int ctl_worker_restart(struct ctl_ctx *ctx, int timeout_ms)
{
    uint64_t deadline;
    int rv;

    if (!ctx->sup)
        return -ENOTCONN;
    /* What the old process counted since its last report would otherwise be lost. */
    ctl_stats_refresh(ctx, 300);
    rv = ctl_sup_restart(ctx->sup);
    if (rv < 0)
        return rv;
    /* From here: the old worker's handover (or its kill, when it was hung) is behind us, and
     * the time is the new one's to come up in. */
    deadline = ctl_sup_now_ms() + (uint64_t)timeout_ms;
    while (ctl_sup_now_ms() < deadline) {
        bool respawned = false;

        ctl_sup_poll(ctx->sup, &respawned);
        if (respawned) {
            /* A new generation with the full state; its ACK means every thread uses it. */
            rv = ctl_apply_full(ctx, (int)(deadline - ctl_sup_now_ms() + 1));
            if (rv == 0)
                return 0;
            if (rv != -ETIMEDOUT && rv != -ENOTCONN && rv != -EPIPE)
                return rv;
            /* It died before confirming: the supervisor restarts it again, keep waiting. */
        }
        usleep(10000);
    }
    fgx_warn("the restarted nfqworker did not confirm the ruleset within %d ms", timeout_ms);
    ctx->worker_stale = true; /* the control loop keeps retrying the push */
    return -ETIMEDOUT;
}

int ctl_px_worker_restart(struct ctl_ctx *ctx, int timeout_ms)
{
    uint64_t deadline, next_push = 0;
    bool respawned_once = false;
    struct ctl_sup_info info;
    int rv;

    if (!ctx->px_sup)
        return -ENOTCONN;
    /* What the old process counted since its last report would otherwise be lost. */
    stats_refresh_proxy(ctx, 300);
    rv = ctl_sup_restart(ctx->px_sup);
    if (rv < 0)
        return rv;
    deadline = ctl_sup_now_ms() + (uint64_t)timeout_ms;
    while (ctl_sup_now_ms() < deadline) {
        bool respawned = false;

        ctl_sup_poll(ctx->px_sup, &respawned);
        respawned_once |= respawned;
        ctl_sup_info(ctx->px_sup, &info);
        if (respawned_once && info.pid > 0 && strcmp(info.state, "running") == 0)
            return 0;
        /* The new process gets the full state (both workers: the nfq one keeps what it has,
         * by database hash), again while it has not confirmed it. */
        if (respawned_once && ctl_sup_now_ms() >= next_push) {
            (void)ctl_apply_full(ctx, (int)(deadline - ctl_sup_now_ms() + 1));
            next_push = ctl_sup_now_ms() + 200;
        }
        usleep(10000);
    }
    fgx_warn("the restarted proxyworker did not confirm the ruleset within %d ms", timeout_ms);
    ctx->worker_stale = true;
    return -ETIMEDOUT;
}

void ctl_ctx_release(struct ctl_ctx *ctx)
{
    free(ctx->nft_cur);
    ctx->nft_cur = NULL;
    free(ctx->px_cur);
    ctx->px_cur = NULL;
}
