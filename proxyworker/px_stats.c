/* Stats stage of proxyworker: per-thread counters (written by their thread, no locks) and match
 * events, summed and drained on request by the control thread into a STATS for controld.
 *
 * Per service, the proxy reports in the NFQUEUE layer's terms: "packets" are reads relayed,
 * "bytes" bytes relayed, "accepted" connections relayed, "dropped" connections reset (blocked,
 * refused upstream, idle) and "flows_active" connections open. Of the worker-wide numbers only
 * two mean the same thing here: "flows" is the proxied connections open now and "rss_bytes" the
 * resident memory. queue_drops, truncated, verdict_errors and malformed describe packets on an
 * NFQUEUE and stay 0: the proxy has no queue, never sees a cut packet and gives no verdicts. Its
 * own failures have fields of their own: connections refused at the limit, for no service,
 * whose service was unreachable, and failed scans. */
#include "px_stats.h"

#include "px.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fgx/log.h"

static uint64_t ld(const uint64_t *p)
{
    return __atomic_load_n(p, __ATOMIC_RELAXED);
}

/* Never fails: a thread that meets more services than there are slots counts them in the last
 * slot it probed, which only blurs statistics. */
struct px_svc_ctr *px_stats_svc(struct px_counters *c, uint32_t id)
{
    size_t i = (id * 2654435761u) % PX_SVC_SLOTS, n;

    for (n = 0; n < PX_SVC_SLOTS; n++, i = (i + 1) % PX_SVC_SLOTS) {
        struct px_svc_ctr *s = &c->svc[i];

        if (!s->used) {
            s->id = id;
            __atomic_store_n(&s->used, 1, __ATOMIC_RELEASE);
            return s;
        }
        if (s->id == id)
            return s;
    }
    return &c->svc[i];
}

void px_stats_filter_blocked(struct px_counters *c, uint32_t id)
{
    size_t i = (id * 2654435761u) % PX_FILTER_SLOTS, n;

    for (n = 0; n < PX_FILTER_SLOTS; n++, i = (i + 1) % PX_FILTER_SLOTS) {
        struct px_filter_ctr *f = &c->filter[i];

        if (!f->used) {
            f->id = id;
            __atomic_store_n(&f->blocked, 1, __ATOMIC_RELAXED);
            __atomic_store_n(&f->used, 1, __ATOMIC_RELEASE);
            return;
        }
        if (f->id == id) {
            __atomic_store_n(&f->blocked, f->blocked + 1, __ATOMIC_RELAXED);
            return;
        }
    }
}

static uint64_t rss_bytes(void)
{
    unsigned long size, rss;
    uint64_t ret = 0;
    FILE *f;

    f = fopen("/proc/self/statm", "re");
    if (f == NULL)
        return 0;
    if (fscanf(f, "%lu %lu", &size, &rss) == 2)
        ret = (uint64_t)rss * (uint64_t)sysconf(_SC_PAGESIZE);
    fclose(f);
    return ret;
}

void px_stats_own(struct px_worker *w, struct px_own_stats *out)
{
    unsigned k;

    memset(out, 0, sizeof(*out));
    for (k = 0; k < w->nthreads; k++) {
        const struct px_counters *c = &w->threads[k].ctr;

        out->conns_refused += ld(&c->limit_refused);
        out->unclassified += ld(&c->unclassified);
        out->connect_failed += ld(&c->connect_failed);
        out->scan_errors += ld(&c->scan_errors);
    }
}

static struct fgx_dp_service_stat *svc_find(struct fgx_dp_stats *s, uint32_t id, size_t cap)
{
    size_t i;

    for (i = 0; i < s->nservices; i++)
        if (s->services[i].service_id == id)
            return &s->services[i];
    if (s->nservices == cap)
        return NULL;
    s->services[s->nservices].service_id = id;
    return &s->services[s->nservices++];
}

static struct fgx_dp_filter_stat *filter_find(struct fgx_dp_stats *s, uint32_t id, size_t cap)
{
    size_t i;

    for (i = 0; i < s->nfilters; i++)
        if (s->filters[i].filter_id == id)
            return &s->filters[i];
    if (s->nfilters == cap)
        return NULL;
    s->filters[s->nfilters].filter_id = id;
    return &s->filters[s->nfilters++];
}

static int event_cmp(const void *a, const void *b)
{
    const struct fgx_dp_event *x = a, *y = b;

    return x->time_ns < y->time_ns ? -1 : x->time_ns > y->time_ns;
}

int px_stats_collect(struct px_worker *w, struct fgx_dp_stats *out)
{
    size_t scap = PX_SVC_SLOTS, fcap = PX_FILTER_SLOTS, i;
    struct px_own_stats own;
    struct fgx_wcfg *cur;
    unsigned k;

    memset(out, 0, sizeof(*out));
    out->services = calloc(scap, sizeof(*out->services));
    out->filters = calloc(fcap, sizeof(*out->filters));
    out->events = calloc((size_t)w->nthreads * FGX_EVRING_SIZE, sizeof(*out->events));
    if (out->services == NULL || out->filters == NULL || out->events == NULL) {
        free(out->services);
        free(out->filters);
        free(out->events);
        memset(out, 0, sizeof(*out));
        fgx_err("stats: out of memory");
        return -ENOMEM;
    }
    cur = __atomic_load_n(&w->current, __ATOMIC_ACQUIRE);
    out->generation = cur != NULL ? cur->generation : 0;
    for (k = 0; k < w->nthreads; k++) {
        struct px_counters *c = &w->threads[k].ctr;

        /* Events first: a block is counted before its event is committed, so every event
         * reported here is already in the counters read below. */
        out->nevents += fgx_evring_drain(&w->threads[k].events, out->events + out->nevents,
                                         FGX_EVRING_SIZE, &out->events_lost);
        out->flows += ld(&c->conns);
        for (i = 0; i < PX_SVC_SLOTS; i++) {
            struct px_svc_ctr *sc = &c->svc[i];
            struct fgx_dp_service_stat *ss;

            if (!__atomic_load_n(&sc->used, __ATOMIC_ACQUIRE))
                continue;
            ss = svc_find(out, sc->id, scap);
            if (ss == NULL)
                continue;
            ss->packets += ld(&sc->reads);
            ss->bytes += ld(&sc->bytes);
            ss->accepted += ld(&sc->accepted);
            ss->dropped += ld(&sc->reset);
            ss->flows_active += ld(&sc->open);
        }
        for (i = 0; i < PX_FILTER_SLOTS; i++) {
            struct px_filter_ctr *fc = &c->filter[i];
            struct fgx_dp_filter_stat *fs;

            if (!__atomic_load_n(&fc->used, __ATOMIC_ACQUIRE))
                continue;
            fs = filter_find(out, fc->id, fcap);
            if (fs != NULL)
                fs->blocked += ld(&fc->blocked);
        }
    }
    if (out->nevents == 0) {
        free(out->events);
        out->events = NULL;
    }
    /* Each ring is in order; merged, the threads' events are put back in time order, since
     * controld numbers them as they come. */
    if (out->nevents > 1)
        qsort(out->events, out->nevents, sizeof(*out->events), event_cmp);
    out->rss_bytes = rss_bytes();
    px_stats_own(w, &own);
    out->conns_refused = own.conns_refused;
    out->unclassified = own.unclassified;
    out->connect_failed = own.connect_failed;
    out->scan_errors = own.scan_errors;
    return 0;
}
