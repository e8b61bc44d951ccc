/* Control stage of nfqworker: the packet threads as the shared control loop (fgx/wctl.h,
 * libcommon/wctl.c) serves them. That loop loads each pushed ruleset off the packet path,
 * publishes it with one pointer store, waits until every packet thread has switched and only
 * then acknowledges; it also answers statistics requests (nfq_stats.c). */
#include "nfq.h"

#include <stdbool.h>

static void wake(void *worker, unsigned i)
{
    struct nfq_worker *w = worker;

    nfq_thread_wake(&w->threads[i]);
}

static bool uses(void *worker, unsigned i, const struct fgx_wcfg *c)
{
    struct nfq_worker *w = worker;

    return __atomic_load_n(&w->threads[i].applied, __ATOMIC_ACQUIRE) == c;
}

static int stats(void *worker, struct fgx_dp_stats *out)
{
    return nfq_stats_collect(worker, out);
}

static int flows_export(void *worker, void **data, size_t *len)
{
    return nfq_handover_export(worker, data, len);
}

static int flows_import(void *worker, const void *data, size_t len)
{
    return nfq_handover_import(worker, data, len);
}

static int captures(void *worker, uint32_t service_id, struct fgx_blob **caps, size_t *n)
{
    return nfq_cap_request(worker, service_id, caps, n);
}

static uint64_t alive(void *worker, unsigned i)
{
    struct nfq_worker *w = worker;

    return __atomic_load_n(&w->threads[i].alive_ms, __ATOMIC_RELAXED);
}

int nfq_ctl_run(struct nfq_worker *w, const char *url)
{
    struct fgx_wctl ctl = {
        .worker = w,
        .nthreads = w->nthreads,
        .current = &w->current,
        .stop = &w->stop,
        .wake = wake,
        .uses = uses,
        .stats = stats,
        .flows_export = flows_export,
        .flows_import = flows_import,
        .captures = captures,
        .alive = alive,
    };

    return fgx_wctl_run(&ctl, url);
}
