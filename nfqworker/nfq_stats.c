/* Stats stage of nfqworker: per-thread counters (written by their thread, no locks) summed on
 * request by the control thread, with the kernel's own view of the queues. */
#include "nfq.h"

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
struct nfq_svc_ctr *nfq_stats_svc(struct nfq_counters *c, uint32_t id)
{
    size_t i = (id * 2654435761u) % NFQ_SVC_SLOTS, n;

    for (n = 0; n < NFQ_SVC_SLOTS; n++, i = (i + 1) % NFQ_SVC_SLOTS) {
        struct nfq_svc_ctr *s = &c->svc[i];

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

void nfq_stats_filter_blocked(struct nfq_counters *c, uint32_t id)
{
    size_t i = (id * 2654435761u) % NFQ_FILTER_SLOTS, n;

    for (n = 0; n < NFQ_FILTER_SLOTS; n++, i = (i + 1) % NFQ_FILTER_SLOTS) {
        struct nfq_filter_ctr *f = &c->filter[i];

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

/* Kernel drops on our queues: /proc/net/netfilter/nfnetlink_queue has one line per queue,
 * "queue portid waiting copy_mode copy_range queue_dropped user_dropped id_sequence 1". */
static uint64_t kernel_queue_drops(const struct nfq_worker *w)
{
    unsigned q, portid, waiting, mode, range, qdrop, udrop;
    unsigned lo = w->queue_base, hi = w->queue_base + 2 * w->nthreads;
    uint64_t sum = 0;
    char line[256];
    FILE *f;

    f = fopen("/proc/net/netfilter/nfnetlink_queue", "re");
    if (f == NULL)
        return 0;
    while (fgets(line, sizeof(line), f) != NULL) {
        if (sscanf(line, "%u %u %u %u %u %u %u", &q, &portid, &waiting, &mode, &range, &qdrop,
                   &udrop) == 7 &&
            q >= lo && q < hi)
            sum += (uint64_t)qdrop + udrop;
    }
    fclose(f);
    return sum;
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

int nfq_stats_collect(struct nfq_worker *w, struct fgx_dp_stats *out)
{
    size_t scap = NFQ_SVC_SLOTS, fcap = NFQ_FILTER_SLOTS, i;
    struct nfq_config *cur;
    unsigned k;

    memset(out, 0, sizeof(*out));
    out->services = calloc(scap, sizeof(*out->services));
    out->filters = calloc(fcap, sizeof(*out->filters));
    out->events = calloc((size_t)w->nthreads * NFQ_EVENTS, sizeof(*out->events));
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
        struct nfq_counters *c = &w->threads[k].ctr;

        /* Events first: a block is counted before its event is committed, so every event
         * reported here is already in the counters read below. */
        out->nevents += nfq_event_drain(&w->threads[k].events, out->events + out->nevents,
                                        NFQ_EVENTS, &out->events_lost);
        out->truncated += ld(&c->truncated);
        out->malformed += ld(&c->malformed);
        out->verdict_errors += ld(&c->verdict_errors);
        out->queue_drops += ld(&c->queue_drops);
        out->flows += ld(&c->flows);
        for (i = 0; i < NFQ_SVC_SLOTS; i++) {
            struct nfq_svc_ctr *sc = &c->svc[i];
            struct fgx_dp_service_stat *ss;

            if (!__atomic_load_n(&sc->used, __ATOMIC_ACQUIRE))
                continue;
            ss = svc_find(out, sc->id, scap);
            if (ss == NULL)
                continue;
            ss->packets += ld(&sc->packets);
            ss->bytes += ld(&sc->bytes);
            ss->accepted += ld(&sc->accepted);
            ss->dropped += ld(&sc->dropped);
            ss->flows_active += ld(&sc->flows_active);
        }
        for (i = 0; i < NFQ_FILTER_SLOTS; i++) {
            struct nfq_filter_ctr *fc = &c->filter[i];
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
    out->queue_drops += kernel_queue_drops(w);
    out->rss_bytes = rss_bytes();
    return 0;
}
