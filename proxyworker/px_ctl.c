/* Control stage of proxyworker: the proxy as the shared control loop (fgx/wctl.h, libcommon/
 * wctl.c) serves it. That loop loads each pushed ruleset off the event loops, publishes it, wakes
 * every loop and acknowledges once each uses it; what is the proxy's own is here: how a loop is
 * woken, that a stopped loop need not switch, and that it ignores a UDP service. */
#include "px.h"

#include <stdbool.h>

#include "fgx/log.h"

static void wake(void *worker, unsigned i)
{
    struct px_worker *w = worker;

    px_thread_wake(&w->threads[i]);
}

static bool uses(void *worker, unsigned i, const struct fgx_wcfg *c)
{
    struct px_worker *w = worker;

    return !w->threads[i].started || __atomic_load_n(&w->threads[i].applied, __ATOMIC_ACQUIRE) == c;
}

/* The proxy carries TCP and UDP (px_udp.c): another protocol here is a controld bug, said once
 * and otherwise ignored by the lookups. */
static void vet(void *worker, const struct fgx_dp_ruleset *rs)
{
    size_t i;

    (void)worker;
    for (i = 0; i < rs->nservices; i++)
        if (rs->services[i].ipproto != IPPROTO_TCP && rs->services[i].ipproto != IPPROTO_UDP)
            fgx_warn(
                "generation %llu: service %u is neither TCP nor UDP and is ignored by the proxy",
                (unsigned long long)rs->generation, rs->services[i].id);
}

static int stats(void *worker, struct fgx_dp_stats *out)
{
    return px_stats_collect(worker, out);
}

static int captures(void *worker, uint32_t service_id, struct fgx_blob **caps, size_t *n)
{
    return px_stats_captures(worker, service_id, caps, n);
}

static uint64_t alive(void *worker, unsigned i)
{
    struct px_worker *w = worker;

    return __atomic_load_n(&w->threads[i].alive_ms, __ATOMIC_RELAXED);
}

static void ctl_init(struct px_worker *w, struct fgx_wctl *out)
{
    /* Zeroed first: every optional callback the proxy does not have is NULL. */
    *out = (struct fgx_wctl){0};
    out->worker = w;
    out->nthreads = w->nthreads;
    out->current = &w->current;
    out->stop = &w->stop;
    out->wake = wake;
    out->uses = uses;
    out->vet = vet;
    out->stats = stats;
    out->tls_load = px_tls_load;
    out->captures = captures;
    out->alive = alive;
}

int px_ctl_apply(struct px_worker *w, const struct fgx_dp_ruleset *rs)
{
    struct fgx_wctl ctl;

    ctl_init(w, &ctl);
    return fgx_wctl_apply(&ctl, rs);
}

int px_ctl_run(struct px_worker *w, const char *url)
{
    struct fgx_wctl ctl;

    ctl_init(w, &ctl);
    return fgx_wctl_run(&ctl, url);
}
