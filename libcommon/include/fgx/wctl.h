/* The control side that both workers (nfqworker, proxyworker) share: per-thread counter tables
 * the data-path threads write without locks, the summing of those tables and of the event rings
 * into a STATS, publishing a new ruleset generation to the threads, and the loop that serves
 * controld's RULESET and STATS_REQUEST on a FGX_CHAN_REP channel (fgx/dp.h). What a counter
 * means stays the worker's own; this file only knows where they are and how they are summed. */
#ifndef FGX_WCTL_H
#define FGX_WCTL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fgx/dp.h"
#include "fgx/evring.h"
#include "fgx/wcfg.h"

struct fgx_chan;

/* ---- counters ---- */

/* Bump a counter of the calling thread so that the control thread's relaxed loads are race-free:
 * a counter is written by its owner thread only. */
#define FGX_CTR_ADD(p, n) __atomic_store_n((p), *(p) + (n), __ATOMIC_RELAXED)

/* Head of a slot of an open-addressed counter table. id is stored, then used (release), so a
 * reader that sees used (acquire) sees the id; a slot is never removed. */
struct fgx_ctr_slot {
    uint32_t used; /* __atomic */
    uint32_t id;
};

struct fgx_filter_ctr {
    struct fgx_ctr_slot slot;
    uint64_t blocked;
    uint64_t matched; /* a log filter's matches */
};

/* The slot of id in a table of nslots entries of size bytes, each beginning with a struct
 * fgx_ctr_slot; claimed if new. Never NULL: a thread that meets more ids than there are slots
 * counts them in the last slot it probed, which only blurs statistics. Owner thread only. */
void *fgx_ctr_slot_get(void *table, size_t nslots, size_t size, uint32_t id);
/* One more block by filter id. Owner thread only. */
void fgx_ctr_filter_blocked(struct fgx_filter_ctr *table, size_t nslots, uint32_t id);
/* One more match of log filter id. Owner thread only. */
void fgx_ctr_filter_matched(struct fgx_filter_ctr *table, size_t nslots, uint32_t id);
/* Any thread: a counter's value as of now. */
uint64_t fgx_ctr_load(const uint64_t *p);
/* Any thread: whether a slot is in use (then its id and counters can be read). */
bool fgx_ctr_slot_used(const struct fgx_ctr_slot *s);

/* ---- summing into a STATS ---- */

struct fgx_wstats {
    struct fgx_dp_stats *out;
    size_t scap, fcap, ecap;
};

/* Start *out (zeroed) for generation with room for scap services, fcap filters and ecap events
 * (arrays malloc'd; fgx_dp_msg_release() frees them). On failure *out is left empty. */
int fgx_wstats_begin(struct fgx_wstats *st, struct fgx_dp_stats *out, uint64_t generation,
                     size_t scap, size_t fcap, size_t ecap);
/* The entry of service id, added if new; NULL once scap services are in (fgx_wstats_services()
 * uses it; a worker may, for a service count of its own). */
struct fgx_dp_service_stat *fgx_wstats_service(struct fgx_wstats *st, uint32_t id);
/* Add one thread's service table (nslots entries of size bytes, each beginning with a struct
 * fgx_ctr_slot): add() adds the counters of one slot in use to its service's entry. */
typedef void (*fgx_wstats_svc_fn)(struct fgx_dp_service_stat *ss, const struct fgx_ctr_slot *slot);
void fgx_wstats_services(struct fgx_wstats *st, const void *table, size_t nslots, size_t size,
                         fgx_wstats_svc_fn add);
/* Add one thread's filter table. */
void fgx_wstats_filters(struct fgx_wstats *st, const struct fgx_filter_ctr *table, size_t nslots);
/* Move a thread's waiting events in. Drain every ring before reading its thread's counters: a
 * block is counted before its event is committed, so each event reported is in the counters. */
void fgx_wstats_events(struct fgx_wstats *st, struct fgx_evring *r);
/* Finish: events in time order (controld numbers them as they come), the resident memory. */
void fgx_wstats_end(struct fgx_wstats *st);
/* Open what the resident memory is read from (/proc/self/statm), once, while the worker may
 * still open files: call it before the worker drops its privileges (fgx/priv.h), whose filter
 * refuses every later open. Returns 0 or -errno (the memory then reads 0). */
int fgx_wstats_open(void);

/* ---- ruleset publishing and the control loop ---- */

/* A worker as the control thread sees it. The callbacks get worker. */
struct fgx_wctl {
    void *worker;
    unsigned nthreads;
    struct fgx_wcfg **current; /* __atomic: the newest published generation (referenced) */
    const int *stop;           /* __atomic: nonzero ends the loop and any wait */
    /* Make thread i look at *current (or notice stop). */
    void (*wake)(void *worker, unsigned i);
    /* Whether thread i uses c now (or never will have to: not running). */
    bool (*uses)(void *worker, unsigned i, const struct fgx_wcfg *c);
    /* Optional: look at a ruleset before it is loaded (to warn about what the worker ignores). */
    void (*vet)(void *worker, const struct fgx_dp_ruleset *rs);
    /* Fill a STATS (see fgx_wstats_*). */
    int (*stats)(void *worker, struct fgx_dp_stats *out);
    /* Optional (a planned restart): stop the data path, hand back every flow as a malloc'd
     * blob of the worker's own format, and let the process end (set stop) after the reply. */
    int (*flows_export)(void *worker, void **data, size_t *len);
    /* Optional: take the flows of the worker before this one (data is the caller's; copy what
     * is kept), before the first ruleset. */
    int (*flows_import)(void *worker, const void *data, size_t len);
    /* Optional (proxyworker): load a TLS service's certificate and key, off the data path. A
     * worker without it ignores them (nfqworker: controld never sends it a TLS service). */
    fgx_wtls_load_fn tls_load;
    /* Optional: every capture of a service (fgx/capture.h), each encoded and malloc'd, in a
     * malloc'd array (*n 0: none). */
    int (*captures)(void *worker, uint32_t service_id, struct fgx_blob **caps, size_t *n);
    /* Liveness (issue 24): when data-path thread i last turned its loop (fgx_wctl_now_ms());
     * 0: not running. Optional: without it a heartbeat names no thread. */
    uint64_t (*alive)(void *worker, unsigned i);
};

/* The clock of the data path's loop stamps (CLOCK_MONOTONIC_COARSE, in ms: a few ns a read). */
uint64_t fgx_wctl_now_ms(void);
/* A data-path thread's stamp at each turn of its loop (owner thread only; read with
 * __atomic loads by the control side). */
static inline void fgx_wctl_stamp(uint64_t *alive_ms, uint64_t now_ms)
{
    __atomic_store_n(alive_ms, now_ms, __ATOMIC_RELAXED);
}

/* Load rs (reusing *current's databases), publish it with one pointer store, wake every thread
 * and return once all use it; the previous generation's reference is dropped only then. Returns
 * 0, -ECANCELED (stop) or fgx_wcfg_build()'s error (nothing published). */
int fgx_wctl_apply(const struct fgx_wctl *ctl, const struct fgx_dp_ruleset *rs);
/* Answer one request (encoded, malloc'd: freed here as soon as it is decoded, so a ruleset's
 * databases are not held twice while they load) on ch. */
void fgx_wctl_serve(const struct fgx_wctl *ctl, struct fgx_chan *ch, void *buf, size_t len);
/* Dial url as FGX_CHAN_REP and serve until stop is set: two threads receive, so that a
 * heartbeat is answered while the other loads a ruleset; other requests take turns. */
int fgx_wctl_run(const struct fgx_wctl *ctl, const char *url);

/* ---- the worker process ---- */

/* A decimal unsigned in min..max (an option's value): 0 or -EINVAL. */
int fgx_wctl_parse_uint(const char *s, unsigned min, unsigned max, unsigned *out);
/* SIGTERM and SIGINT set *stop (__atomic; it must outlive the process's handlers); SIGPIPE is
 * ignored, so a vanished peer is an error return and not a death. */
void fgx_wctl_signals(int *stop);

#endif
