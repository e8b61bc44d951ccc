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
 * whose service was unreachable, and failed scans; those refused at the per-source limit,
 * closed to make room at the limit, closed before a first byte, and those that relayed bytes
 * unscanned while their service was away, reset or scanned afresh at its return. */
#include "px_stats.h"

#include "px.h"

#include <stdlib.h>
#include <string.h>

#include "fgx/swlink.h"
#include "fgx/wctl.h"

struct px_svc_ctr *px_stats_svc(struct px_counters *c, uint32_t id)
{
    return fgx_ctr_slot_get(c->svc, PX_SVC_SLOTS, sizeof(c->svc[0]), id);
}

uint64_t px_stats_svc_open(const struct px_worker *w, uint32_t id)
{
    uint64_t n = 0;

    for (unsigned k = 0; k < w->nthreads; k++) {
        const struct px_svc_ctr *tab = w->threads[k].ctr.svc;
        size_t i = (id * 2654435761u) % PX_SVC_SLOTS;

        /* fgx_ctr_slot_get()'s probe, without claiming: a slot's id is set before its used
         * flag is released, so an id read after used is the owner's */
        for (size_t m = 0; m < PX_SVC_SLOTS; m++, i = (i + 1) % PX_SVC_SLOTS) {
            if (!__atomic_load_n(&tab[i].slot.used, __ATOMIC_ACQUIRE))
                break;
            if (tab[i].slot.id == id) {
                n += fgx_ctr_load(&tab[i].open);
                break;
            }
        }
    }
    return n;
}

void px_stats_filter_blocked(struct px_counters *c, uint32_t id)
{
    fgx_ctr_filter_blocked(c->filter, PX_FILTER_SLOTS, id);
}

void px_stats_filter_matched(struct px_counters *c, uint32_t id)
{
    fgx_ctr_filter_matched(c->filter, PX_FILTER_SLOTS, id);
}

void px_stats_own(struct px_worker *w, struct px_own_stats *out)
{
    unsigned k;

    memset(out, 0, sizeof(*out));
    for (k = 0; k < w->nthreads; k++) {
        const struct px_counters *c = &w->threads[k].ctr;

        out->conns_refused += fgx_ctr_load(&c->limit_refused);
        out->unclassified += fgx_ctr_load(&c->unclassified);
        out->connect_failed += fgx_ctr_load(&c->connect_failed);
        out->scan_errors += fgx_ctr_load(&c->scan_errors);
        out->src_refused += fgx_ctr_load(&c->src_refused);
        out->evicted += fgx_ctr_load(&c->evicted);
        out->silent_closed += fgx_ctr_load(&c->silent_closed);
        out->midstream_reset += fgx_ctr_load(&c->midstream_reset);
        out->midstream_rescan += fgx_ctr_load(&c->midstream_rescan);
    }
}

static void add_service(struct fgx_dp_service_stat *ss, const struct fgx_ctr_slot *slot)
{
    const struct px_svc_ctr *sc = (const void *)slot;

    ss->packets += fgx_ctr_load(&sc->reads);
    ss->bytes_c2s += fgx_ctr_load(&sc->bytes[0]);
    ss->bytes_s2c += fgx_ctr_load(&sc->bytes[1]);
    ss->bytes += fgx_ctr_load(&sc->bytes[0]) + fgx_ctr_load(&sc->bytes[1]);
    ss->flows_new += fgx_ctr_load(&sc->accepted); /* connections relayed */
    ss->accepted += fgx_ctr_load(&sc->accepted);
    ss->dropped += fgx_ctr_load(&sc->reset);
    ss->flows_active += fgx_ctr_load(&sc->open);
    ss->tls_failed += fgx_ctr_load(&sc->tls_failed);
    ss->limit_hits += fgx_ctr_load(&sc->limit_hits);
}

int px_stats_collect(struct px_worker *w, struct fgx_dp_stats *out)
{
    struct px_own_stats own;
    struct fgx_wstats st;
    struct fgx_wcfg *cur;
    size_t waiting = 0;
    unsigned k;
    int ret;

    /* Room for what waits now: events committed meanwhile wait for the next collection. */
    for (k = 0; k < w->nthreads; k++)
        waiting += fgx_evring_pending(&w->threads[k].events);
    cur = __atomic_load_n(&w->current, __ATOMIC_ACQUIRE);
    ret = fgx_wstats_begin(&st, out, cur != NULL ? cur->generation : 0, PX_SVC_SLOTS,
                           PX_FILTER_SLOTS, waiting + 1);
    if (ret != 0)
        return ret;
    for (k = 0; k < w->nthreads; k++) {
        struct px_counters *c = &w->threads[k].ctr;

        size_t from = out->nevents;

        fgx_wstats_events(&st, &w->threads[k].events);
        fgx_cap_set_events(&w->threads[k].caps, out, from, out->nevents);
        out->flows += fgx_ctr_load(&c->conns);
        fgx_wstats_services(&st, c->svc, PX_SVC_SLOTS, sizeof(c->svc[0]), add_service);
        fgx_wstats_filters(&st, c->filter, PX_FILTER_SLOTS);
    }
    fgx_wstats_end(&st);
    px_stats_own(w, &own);
    out->conns_refused = own.conns_refused;
    out->unclassified = own.unclassified;
    out->connect_failed = own.connect_failed;
    out->scan_errors = own.scan_errors;
    (void)fgx_swlink_logs_take(out); /* scriptworker's log entries (fgx/swlink.h) */
    out->src_refused = own.src_refused;
    out->evicted = own.evicted;
    out->silent_closed = own.silent_closed;
    out->midstream_reset = own.midstream_reset;
    out->midstream_rescan = own.midstream_rescan;
    return 0;
}

int px_stats_captures(struct px_worker *w, uint32_t id, struct fgx_blob **caps, size_t *n)
{
    size_t cap = 0;
    int rv = 0;

    *caps = NULL;
    *n = 0;
    for (unsigned k = 0; k < w->nthreads && rv == 0; k++)
        rv = fgx_cap_set_collect(&w->threads[k].caps, id, caps, n, &cap);
    if (rv != 0) {
        for (size_t i = 0; i < *n; i++)
            free((*caps)[i].data);
        free(*caps);
        *caps = NULL;
        *n = 0;
    }
    return rv;
}
