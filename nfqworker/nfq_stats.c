/* Stats stage of nfqworker: per-thread counters (written by their thread, no locks) summed on
 * request by the control thread (fgx/wctl.h does the summing both workers share), with the
 * kernel's own view of the queues. */
#include "nfq.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "fgx/log.h"
#include "fgx/swlink.h"
#include "fgx/wctl.h"

struct nfq_svc_ctr *nfq_stats_svc(struct nfq_counters *c, uint32_t id)
{
    return fgx_ctr_slot_get(c->svc, NFQ_SVC_SLOTS, sizeof(c->svc[0]), id);
}

void nfq_stats_filter_blocked(struct nfq_counters *c, uint32_t id)
{
    fgx_ctr_filter_blocked(c->filter, NFQ_FILTER_SLOTS, id);
}

void nfq_stats_filter_matched(struct nfq_counters *c, uint32_t id)
{
    fgx_ctr_filter_matched(c->filter, NFQ_FILTER_SLOTS, id);
}

void nfq_stats_open(struct nfq_worker *w)
{
    w->queue_fd = open("/proc/net/netfilter/nfnetlink_queue", O_RDONLY | O_CLOEXEC);
    if (w->queue_fd == -1)
        fgx_warn("cannot open /proc/net/netfilter/nfnetlink_queue (%s): the kernel's drops on "
                 "the queues will read 0",
                 strerror(errno));
}

/* Kernel drops on our queues: /proc/net/netfilter/nfnetlink_queue has one line per queue,
 * "queue portid waiting copy_mode copy_range queue_dropped user_dropped id_sequence 1", read
 * from its start each time through the descriptor opened before the drop. */
static uint64_t kernel_queue_drops(const struct nfq_worker *w)
{
    unsigned q, portid, waiting, mode, range, qdrop, udrop;
    unsigned lo = w->queue_base, hi = w->queue_base + 2 * w->nthreads;
    uint64_t sum = 0;
    char buf[16384], *line, *save = NULL;
    ssize_t n = 0, r;

    if (w->queue_fd == -1)
        return 0;
    /* a seq_file gives a page a read: read on until it ends or the buffer is full */
    while ((size_t)n < sizeof(buf) - 1 &&
           (r = pread(w->queue_fd, buf + n, sizeof(buf) - 1 - (size_t)n, n)) > 0)
        n += r;
    buf[n] = '\0';
    for (line = strtok_r(buf, "\n", &save); line != NULL; line = strtok_r(NULL, "\n", &save)) {
        if (sscanf(line, "%u %u %u %u %u %u %u", &q, &portid, &waiting, &mode, &range, &qdrop,
                   &udrop) == 7 &&
            q >= lo && q < hi)
            sum += (uint64_t)qdrop + udrop;
    }
    return sum;
}

static void add_service(struct fgx_dp_service_stat *ss, const struct fgx_ctr_slot *slot)
{
    const struct nfq_svc_ctr *sc = (const void *)slot;

    ss->packets += fgx_ctr_load(&sc->packets);
    ss->bytes_c2s += fgx_ctr_load(&sc->bytes[0]);
    ss->bytes_s2c += fgx_ctr_load(&sc->bytes[1]);
    ss->bytes += fgx_ctr_load(&sc->bytes[0]) + fgx_ctr_load(&sc->bytes[1]);
    ss->flows_new += fgx_ctr_load(&sc->flows_new);
    ss->accepted += fgx_ctr_load(&sc->accepted);
    ss->dropped += fgx_ctr_load(&sc->dropped);
    ss->flows_active += fgx_ctr_load(&sc->flows_active);
}

int nfq_stats_collect(struct nfq_worker *w, struct fgx_dp_stats *out)
{
    struct fgx_wstats st;
    struct fgx_wcfg *cur;
    size_t waiting = 0;
    unsigned k;
    int ret;

    /* Room for what waits now: events committed meanwhile wait for the next collection. */
    for (k = 0; k < w->nthreads; k++)
        waiting += fgx_evring_pending(&w->threads[k].events);
    cur = __atomic_load_n(&w->current, __ATOMIC_ACQUIRE);
    ret = fgx_wstats_begin(&st, out, cur != NULL ? cur->generation : 0, NFQ_SVC_SLOTS,
                           NFQ_FILTER_SLOTS, waiting + 1);
    if (ret != 0)
        return ret;
    for (k = 0; k < w->nthreads; k++) {
        struct nfq_counters *c = &w->threads[k].ctr;
        size_t from = out->nevents;

        fgx_wstats_events(&st, &w->threads[k].events);
        fgx_cap_set_events(&w->threads[k].caps, out, from, out->nevents);
        out->truncated += fgx_ctr_load(&c->truncated);
        out->malformed += fgx_ctr_load(&c->malformed);
        out->evasion += fgx_ctr_load(&c->evasion);
        out->midstream_resets += fgx_ctr_load(&c->midstream_resets);
        out->script_refused += fgx_ctr_load(&c->script_refused);
        out->script_errors += fgx_ctr_load(&c->script_errors);
        out->script_timeouts += fgx_ctr_load(&c->script_timeouts);
        out->script_blocked += fgx_ctr_load(&c->script_blocked);
        out->script_final += fgx_ctr_load(&c->script_final);
        out->script_held += fgx_ctr_load(&c->script_held);
        out->script_flows += fgx_ctr_load(&c->script_flows);
        out->script_reclaimed += fgx_ctr_load(&c->script_reclaimed);
        out->flows_evicted += w->threads[k].flows ? fgx_flow_evicted(w->threads[k].flows) : 0;
        out->verdict_errors += fgx_ctr_load(&c->verdict_errors);
        out->queue_drops += fgx_ctr_load(&c->queue_drops);
        out->flows += fgx_ctr_load(&c->flows);
        fgx_wstats_services(&st, c->svc, NFQ_SVC_SLOTS, sizeof(c->svc[0]), add_service);
        fgx_wstats_filters(&st, c->filter, NFQ_FILTER_SLOTS);
    }
    fgx_wstats_end(&st);
    out->queue_drops += kernel_queue_drops(w);
    (void)fgx_swlink_logs_take(out); /* scriptworker's log entries (fgx/swlink.h) */
    return 0;
}
