/* controld's health log, its store stage (ctl_health_store.h): the ring (ctl_health.c) says
 * which entries are not written yet; they go to LMDB in one transaction, and each service's
 * records are trimmed to CTL_HEALTH_KEEP there. */
#include "controld/ctl_health_store.h"

#include <errno.h>
#include <stdlib.h>

#include "controld/ctl_health.h"
#include "fgx/log.h"

#define HEALTH_SAVE_BATCH 256

static bool failing;
static uint64_t failed_ms;

int ctl_health_load(struct ctl_store *st)
{
    struct ctl_health_entry *stored = NULL;
    struct ctl_txn *t;
    size_t n = 0;
    int rv;

    rv = ctl_txn_begin(st, false, &t);
    if (rv < 0)
        goto out;
    rv = ctl_store_health_list(t, &stored, &n);
    ctl_txn_abort(t);
    if (rv < 0)
        goto out;
    ctl_health_restore(stored, n);
out:
    if (rv < 0)
        fgx_err("cannot read the health log: %s; it starts empty", ctl_store_strerror(rv));
    free(stored);
    return rv;
}

int ctl_health_save(struct ctl_store *st, uint64_t now_ms, bool force)
{
    static struct ctl_health_entry batch[HEALTH_SAVE_BATCH];
    uint32_t trimmed[HEALTH_SAVE_BATCH];
    size_t n, ntrimmed = 0;
    struct ctl_txn *t = NULL;
    int rv;

    ctl_health_tick(now_ms);
    if (failing && !force && now_ms - failed_ms < CTL_HEALTH_RETRY_MS)
        return -EAGAIN;
    n = ctl_health_unsaved(batch, HEALTH_SAVE_BATCH);
    if (n == 0)
        return 0;
    rv = ctl_txn_begin(st, true, &t);
    for (size_t i = 0; rv == 0 && i < n; i++)
        rv = ctl_store_health_put(t, &batch[i]);
    for (size_t i = 0; rv == 0 && i < n; i++) {
        size_t k;

        for (k = 0; k < ntrimmed && trimmed[k] != batch[i].service_id; k++)
            ;
        if (k < ntrimmed)
            continue;
        trimmed[ntrimmed++] = batch[i].service_id;
        rv = ctl_store_health_trim(t, batch[i].service_id, CTL_HEALTH_KEEP);
    }
    if (rv == 0) {
        rv = ctl_txn_commit(t);
        t = NULL;
    }
    if (t)
        ctl_txn_abort(t);
    if (rv < 0) {
        /* The entries stay in memory (shown as ever) and are written once the store takes
         * them again. */
        if (!failing)
            fgx_warn("cannot save the health log: %s (retried every %u s; kept in memory "
                     "meanwhile)",
                     ctl_store_strerror(rv), CTL_HEALTH_RETRY_MS / 1000);
        failing = true;
        failed_ms = now_ms;
        return rv;
    }
    ctl_health_saved(batch[n - 1].seq);
    if (failing)
        fgx_info("the health log is saved again");
    failing = false;
    return 0;
}
