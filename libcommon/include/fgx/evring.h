/* Match events of one data-path thread, waiting for the worker's control thread to put them in
 * a STATS: a preallocated single-producer single-consumer ring, so recording an event never
 * allocates, locks or waits. head and tail only grow (wrapping); the slot is their value mod
 * FGX_EVRING_SIZE. */
#ifndef FGX_EVRING_H
#define FGX_EVRING_H

#include <stddef.h>
#include <stdint.h>

#include "fgx/dp.h"

/* A power of two. An event is ~250 bytes, so a thread's ring is ~2 MiB: a burst of 8,192
 * blocks by one thread between two collections (controld collects every second, and every
 * FGX_EVRING_FAST_MS while events keep coming) is kept whole. */
#define FGX_EVRING_SIZE 8192
/* Services whose refused events a ring counts apart (more share the last slot probed). */
#define FGX_EVRING_LOST_SLOTS 64

/* Events of one service a ring refused; the slot head is fgx_ctr_slot's layout (fgx/wctl.h). */
struct fgx_evring_lost {
    uint32_t used; /* __atomic: set once id is stored */
    uint32_t id;
    uint64_t n; /* __atomic: written by the producer, cumulative */
};

struct fgx_evring {
    uint32_t head;          /* __atomic: written by the producer */
    uint32_t tail;          /* __atomic: written by the consumer */
    uint64_t lost;          /* __atomic: written by the producer; events the ring refused */
    uint64_t lost_reported; /* consumer only: lost as of the previous drain */
    struct fgx_evring_lost lost_svc[FGX_EVRING_LOST_SLOTS]; /* lost by service */
    struct fgx_dp_event ev[FGX_EVRING_SIZE];
};

/* Producer: the slot to fill, or NULL when the ring is full (the event is counted lost, in
 * total and for service_id). Fill it, then fgx_evring_commit() makes it visible. */
struct fgx_dp_event *fgx_evring_claim(struct fgx_evring *r, uint32_t service_id);
void fgx_evring_commit(struct fgx_evring *r);
/* Consumer: move up to max waiting events to out, in order; adds to *lost the events lost since
 * the previous drain. Returns how many were moved. */
/* Consumer: how many events wait now (more may come meanwhile). */
size_t fgx_evring_pending(const struct fgx_evring *r);
size_t fgx_evring_drain(struct fgx_evring *r, struct fgx_dp_event *out, size_t max, uint64_t *lost);

#endif
