/* controld apply stage: committed state -> worker (ruleset push, wait for its ACK) and kernel
 * (ctl_nft_sync), ordered so that traffic is never queued to a worker that does not know its
 * service yet; and worker counters -> persisted per-filter totals. */
#include "controld/ctl_apply.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

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
    struct ctl_nft_service *copy = NULL;
    int rv;

    if (!ctx->nft)
        return 0;
    if (ctx->nft_valid && ctl_ruleset_nft_equal(ctx->nft_cur, ctx->nnft_cur, rs->nft, rs->nnft))
        return 0;
    ctx->nft_valid = false;
    rv = ctl_nft_sync(ctx->nft, rs->nft, rs->nnft);
    if (rv < 0)
        return rv;
    if (rs->nnft) {
        copy = malloc(rs->nnft * sizeof(*copy));
        if (!copy)
            return 0; /* applied; we only forget what we know, so the next change resyncs */
        memcpy(copy, rs->nft, rs->nnft * sizeof(*copy));
    }
    free(ctx->nft_cur);
    ctx->nft_cur = copy;
    ctx->nnft_cur = rs->nnft;
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
    bool removes =
        ctx->nft_valid && nft_only_removes(ctx->nft_cur, ctx->nnft_cur, rs->nft, rs->nnft);
    int rv_push = 0, rv_nft;

    if (removes) {
        rv_nft = apply_nft(ctx, rs);
        if (ctx->sup)
            rv_push = ctl_sup_push(ctx->sup, &rs->dp, push_timeout_ms);
    } else {
        if (ctx->sup)
            rv_push = ctl_sup_push(ctx->sup, &rs->dp, push_timeout_ms);
        rv_nft = apply_nft(ctx, rs);
    }
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
        fgx_info("applied generation %llu: %zu running nfqueue service(s)",
                 (unsigned long long)rs.dp.generation, rs.nnft);
    ctl_ruleset_release(&rs);
    return rv;
}

static struct ctl_stat_last *stat_last(struct ctl_ctx *ctx, uint32_t filter_id)
{
    for (size_t i = 0; i < ctx->nlast; i++)
        if (ctx->last[i].filter_id == filter_id)
            return &ctx->last[i];
    if (ctx->nlast == ctx->caplast) {
        size_t ncap = ctx->caplast ? ctx->caplast * 2 : 32;
        struct ctl_stat_last *n = realloc(ctx->last, ncap * sizeof(*n));
        if (!n)
            return NULL;
        ctx->last = n;
        ctx->caplast = ncap;
    }
    ctx->last[ctx->nlast] = (struct ctl_stat_last){.filter_id = filter_id};
    return &ctx->last[ctx->nlast++];
}

int ctl_stats_refresh(struct ctl_ctx *ctx, int timeout_ms)
{
    struct ctl_sup_info info;
    struct fgx_dp_msg m;
    struct ctl_txn *t = NULL;
    bool dirty = false;
    int rv;

    if (!ctx->sup)
        return 0;
    ctl_sup_info(ctx->sup, &info);
    if (info.instance != ctx->stats_instance) {
        /* A new worker counts from zero: what the old one reported is already persisted. */
        ctx->nlast = 0;
        ctx->stats_instance = info.instance;
    }
    rv = ctl_sup_stats(ctx->sup, timeout_ms, &m);
    if (rv < 0)
        return rv;
    rv = ctl_txn_begin(ctx->store, true, &t);
    if (rv < 0)
        goto out;
    for (size_t i = 0; i < m.u.stats.nfilters; i++) {
        const struct fgx_dp_filter_stat *fs = &m.u.stats.filters[i];
        struct ctl_stat_last *l = stat_last(ctx, fs->filter_id);
        struct ctl_filter f;
        uint64_t delta;

        if (!l) {
            rv = -ENOMEM;
            goto out;
        }
        delta = fs->blocked >= l->blocked ? fs->blocked - l->blocked : fs->blocked;
        l->blocked = fs->blocked;
        if (delta == 0)
            continue;
        if (ctl_store_filter_get(t, fs->filter_id, &f) < 0)
            continue; /* removed since: its total went with it */
        ctl_filter_release(&f);
        rv = ctl_store_blocked_add(t, fs->filter_id, delta);
        if (rv < 0)
            goto out;
        dirty = true;
    }
    if (dirty) {
        rv = ctl_txn_commit(t);
        t = NULL;
    }
out:
    ctl_txn_abort(t);
    fgx_dp_msg_release(&m);
    return rv;
}

void ctl_ctx_release(struct ctl_ctx *ctx)
{
    free(ctx->nft_cur);
    ctx->nft_cur = NULL;
    free(ctx->last);
    ctx->last = NULL;
    ctx->nlast = ctx->caplast = 0;
}
