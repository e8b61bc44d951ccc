/* controld apply stage: carries a committed change to the data path, in the order that lets no
 * unscanned packet through (worker first when traffic starts being queued, nftables first when
 * it stops), fetches the worker's counters for the statistics stage (ctl_stats), and restarts
 * the worker on request. */
#ifndef CTL_APPLY_H
#define CTL_APPLY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "controld/ctl_auth.h"
#include "controld/ctl_nft.h"
#include "controld/ctl_ruleset.h"
#include "controld/ctl_stats.h"
#include "controld/ctl_store.h"
#include "controld/ctl_supervise.h"

#define CTL_PUSH_TIMEOUT_MS 5000
#define CTL_RESTART_TIMEOUT_MS 5000

/* Everything a request handler needs. nft and sup are NULL in unit tests: changes are then
 * stored and compiled but not carried to a kernel or a worker. stats may be NULL too: counters
 * then come from the store as last saved. */
struct ctl_ctx {
    struct ctl_store *store;
    struct ctl_nft *nft;     /* borrowed */
    struct ctl_sup *sup;     /* borrowed */
    struct ctl_sup *px_sup;  /* borrowed; the proxy worker (NULL: none, as in unit tests) */
    uint16_t px_port;        /* the proxy worker's port, where the tproxy rules send traffic */
    struct ctl_stats *stats; /* borrowed */
    struct ctl_auth *auth;   /* borrowed; NULL (unit tests): every request is trusted */
    uint64_t started;        /* unix seconds */
    unsigned threads;
    /* the service set the kernel has now; valid only after a successful sync */
    struct ctl_nft_service *nft_cur;
    size_t nnft_cur;
    struct ctl_nft_service *px_cur; /* the same for the proxy layer */
    size_t npx_cur;
    bool nft_valid;
    bool worker_stale; /* the worker has not confirmed the latest generation: resend it */
    size_t history_keep; /* changes kept in the history (0: CTL_HISTORY_KEEP) */
    struct ctl_fw *fw; /* borrowed; the firewall (ctl_fw.c); NULL: none (unit tests) */
    /* ctl_stats_refresh() returns at once: the web server's live queries (ctl_web.c) read the
     * counters the loop refreshed at most a second ago, no extra worker round trip. */
    bool stats_no_refresh;
    /* borrowed; the watch over fgex's tables (ctl_nftwatch.c); NULL: none (unit tests) */
    struct ctl_nftwatch *watch;
};

/* Push rs to the workers and sync nftables, in the safe order (a worker that gains a service
 * first, then the rules, then a worker that only loses services: a layer switch goes new worker,
 * rules, old worker). Returns 0 or the nftables error.
 * *worker_err (may be NULL) gets 0, or -ETIMEDOUT (or another worker error) when the worker did
 * not confirm; the rules are installed anyway, so that a fail-closed service stays closed. */
int ctl_apply(struct ctl_ctx *ctx, const struct ctl_ruleset *rs, int *worker_err);
int ctl_apply_timeout(struct ctl_ctx *ctx, const struct ctl_ruleset *rs, int push_timeout_ms,
                      int *worker_err);
/* Build the full ruleset from the store and apply it: at startup, for a restarted worker, and
 * to retry a push the worker did not confirm (with a shorter timeout, so the loop stays live). */
int ctl_apply_full(struct ctl_ctx *ctx, int push_timeout_ms);
/* Fetch the worker's counters into ctx->stats and save what is due (ctl_stats_flush()).
 * -ENOTCONN when no worker is connected. */
int ctl_stats_refresh(struct ctl_ctx *ctx, int timeout_ms);
/* Restart the worker (ctl_sup_restart()), give the new process the full state, and return once
 * it acknowledged it: 0, -ETIMEDOUT after timeout_ms, -ENOTCONN when there is no supervisor.
 * Blocks the caller (the control loop) for that long, as a ruleset push does. */
int ctl_worker_restart(struct ctl_ctx *ctx, int timeout_ms);
/* The same for the proxy worker (ctx->px_sup). */
int ctl_px_worker_restart(struct ctl_ctx *ctx, int timeout_ms);
/* Free what ctl_apply() keeps in ctx. */
void ctl_ctx_release(struct ctl_ctx *ctx);

#endif
