/* nfqworker's internal types, shared by its stages: config (rulesets as the packet threads see
 * them), recv (NFQUEUE netlink loop, one per thread), match (per-packet decisions), verdict
 * (batched verdicts), reset (TCP resets), stats (counters) and ctl (the control thread). */
#ifndef NFQ_H
#define NFQ_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fgx/addr.h"
#include "fgx/dp.h"
#include "fgx/flow.h"
#include "fgx/reasm.h"

#define NFQ_FLOWS_PER_THREAD 65536
#define NFQ_HOLD_POOL_BYTES (4u << 20)
#define NFQ_HOLD_FLOW_BYTES (64u << 10)
#define NFQ_HOLD_MAX_MS 2000
#define NFQ_FLOW_IDLE_MS 120000
#define NFQ_TICK_MS 1000
#define NFQ_RCVBUF (32 << 20)
#define NFQ_QUEUE_MAXLEN 8192
#define NFQ_RXBUF (0xffff + 4096)
#define NFQ_TXBUF (64 << 10)
#define NFQ_RX_BATCH 64
#define NFQ_FLUSH_BYTES (256u << 10) /* received bytes after which a batch's verdicts go out */

#define NFQ_EVENTS 256 /* match events waiting per thread; a power of two */

#define NFQ_SVC_SLOTS 1024    /* per-thread service counters (open addressing) */
#define NFQ_FILTER_SLOTS 8192 /* per-thread filter counters (open addressing) */

/* A loaded hyperscan database, shared by configs and flows; freed at the last unref. */
struct nfq_db {
    int refs; /* __atomic */
    uint64_t hash;
    struct hs_database *db;
    uint32_t *ids; /* the filter ids compiled into db, ascending (owned); NULL: not known */
    size_t nids;
};

struct nfq_service {
    uint32_t id;
    uint8_t ipproto;
    uint16_t port;
    struct fgx_cidr addr;
    bool fail_open;
    struct nfq_db *db[2]; /* [0] c2s, [1] s2c; NULL: nothing to match */
};

/* One generation of the ruleset. Published by the control thread with one atomic store; each
 * packet thread holds a reference on the one it uses. */
struct nfq_config {
    int refs; /* __atomic */
    uint64_t generation;
    size_t nservices;
    struct nfq_service svc[];
};

/* Counters: written by the owner thread only, read with relaxed atomic loads by the control
 * thread. A slot's id is stored (release) after its fields are ready, never removed. */
/* Bump a counter of the calling thread so that the control thread's relaxed loads are race-free. */
#define NFQ_CTR_ADD(p, n) __atomic_store_n((p), *(p) + (n), __ATOMIC_RELAXED)

struct nfq_svc_ctr {
    uint32_t used; /* __atomic */
    uint32_t id;
    uint64_t packets, bytes, accepted, dropped, flows_active;
};

struct nfq_filter_ctr {
    uint32_t used; /* __atomic */
    uint32_t id;
    uint64_t blocked;
};

struct nfq_counters {
    uint64_t truncated, malformed, verdict_errors, queue_drops, unclassified, flows;
    struct nfq_svc_ctr svc[NFQ_SVC_SLOTS];
    struct nfq_filter_ctr filter[NFQ_FILTER_SLOTS];
};

/* Match events of one packet thread, waiting for the control thread to put them in a STATS:
 * a single-producer single-consumer ring, so neither side locks or waits. head and tail only
 * grow (wrapping), the slot is their value mod NFQ_EVENTS. */
struct nfq_event_ring {
    uint32_t head;          /* __atomic: written by the packet thread */
    uint32_t tail;          /* __atomic: written by the control thread */
    uint64_t lost;          /* __atomic: written by the packet thread; events the ring refused */
    uint64_t lost_reported; /* control thread only: lost as of the previous drain */
    struct fgx_dp_event ev[NFQ_EVENTS];
};

struct nfq_worker;
struct mnl_socket;

#define NFQ_RESET_PENDING 32

struct nfq_reset {
    uint8_t family;
    uint16_t sport, dport;
    uint32_t seq;
    uint8_t saddr[16], daddr[16];
};

struct nfq_thread {
    struct nfq_worker *w;
    unsigned idx;
    unsigned queue[2]; /* [0] fail-closed, [1] fail-open */
    pthread_t tid;
    bool started;
    struct mnl_socket *nl;
    unsigned portid;
    int efd; /* eventfd: the control thread's "look at the config" */
    int raw4, raw6;
    struct nfq_config *cfg;  /* in use, referenced */
    struct nfq_config *applied; /* __atomic: cfg, as the control thread may compare it */
    struct fgx_flow_table *flows;
    struct fgx_reasm_ctx *reasm;
    uint64_t now_ms;
    char *rxbuf;
    char *txbuf;
    size_t txlen;
    /* Resets wait for the batch's verdicts: the bytes accepted before the match must reach the
     * receiver first, or the reset's sequence number would be ahead of it (and be ignored). */
    struct nfq_reset resets[NFQ_RESET_PENDING];
    unsigned nresets;
    struct nfq_counters ctr;
    struct nfq_event_ring events;
};

struct nfq_worker {
    unsigned nthreads;
    unsigned queue_base;
    struct nfq_config *current; /* __atomic: the newest published config */
    struct nfq_thread *threads;
    int stop;                   /* __atomic */
};

/* ---- nfq_config.c ---- */
/* Build a config from rs, reusing databases of prev (may be NULL) whose hash is unchanged and
 * loading the others. *out has one reference, owned by the caller. */
int nfq_config_build(const struct fgx_dp_ruleset *rs, const struct nfq_config *prev,
                     struct nfq_config **out);
void nfq_config_ref(struct nfq_config *c);
void nfq_config_unref(struct nfq_config *c);
void nfq_db_ref(struct nfq_db *d);
void nfq_db_unref(struct nfq_db *d);
/* The service of c with this id, or NULL. */
const struct nfq_service *nfq_config_service(const struct nfq_config *c, uint32_t id);

/* ---- nfq_recv.c ---- */
int nfq_thread_init(struct nfq_worker *w, struct nfq_thread *t, unsigned idx);
void nfq_thread_release(struct nfq_thread *t);
void *nfq_thread_main(void *arg);
/* Wake a thread so it picks up a new config or notices stop. */
void nfq_thread_wake(struct nfq_thread *t);
uint64_t nfq_now_ms(void);

/* ---- nfq_match.c ---- */
/* One queued packet: decide now (verdict added to the batch) or hold it. */
void nfq_match_packet(struct nfq_thread *t, unsigned queue, uint32_t id, const uint8_t *data,
                      size_t len, uint32_t cap_len);
/* Pick up the published config if it is newer (between packets). */
void nfq_match_switch(struct nfq_thread *t);
/* Release what a flow holds (fgx_flow_release_fn). */
void nfq_match_flow_release(void *arg, struct fgx_flow *f);
/* Verdict for a held segment (fgx_reasm_verdict_fn). */
void nfq_match_held_verdict(void *arg, uint64_t cookie, bool accept);

/* ---- nfq_verdict.c ---- */
void nfq_verdict_add(struct nfq_thread *t, unsigned queue, uint32_t id, bool accept);
void nfq_verdict_flush(struct nfq_thread *t);

/* ---- nfq_reset.c ---- */
int nfq_reset_open(struct nfq_thread *t);
void nfq_reset_close(struct nfq_thread *t);
void nfq_reset_flush(struct nfq_thread *t);
/* Queue a TCP RST from (saddr, sport) to (daddr, dport) with sequence number seq; it is sent
 * by nfq_reset_flush(), which nfq_verdict_flush() calls once the verdicts are out. */
void nfq_reset_send(struct nfq_thread *t, int family, const uint8_t *saddr, uint16_t sport,
                    const uint8_t *daddr, uint16_t dport, uint32_t seq);

/* ---- nfq_stats.c ---- */
struct nfq_svc_ctr *nfq_stats_svc(struct nfq_counters *c, uint32_t id);
void nfq_stats_filter_blocked(struct nfq_counters *c, uint32_t filter_id);
/* Sum every thread's counters into *out (arrays malloc'd; fgx_dp_msg_release() frees them). */
int nfq_stats_collect(struct nfq_worker *w, struct fgx_dp_stats *out);

/* ---- nfq_event.c ---- */
/* Producer side (the ring's packet thread): the slot to fill, or NULL when the ring is full (the
 * event is then counted lost). Fill it, then nfq_event_commit() makes it visible. */
struct fgx_dp_event *nfq_event_claim(struct nfq_event_ring *r);
void nfq_event_commit(struct nfq_event_ring *r);
/* Consumer side (the control thread): move up to max waiting events to out, in order; adds to
 * *lost the events lost since the previous drain. Returns how many were moved. */
size_t nfq_event_drain(struct nfq_event_ring *r, struct fgx_dp_event *out, size_t max,
                       uint64_t *lost);

/* ---- nfq_ctl.c ---- */
/* Serve the control channel at url until stop is set. */
int nfq_ctl_run(struct nfq_worker *w, const char *url);

#endif
