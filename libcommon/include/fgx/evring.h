/* Match events of one data-path thread, waiting for the worker's control thread to put them in
 * a STATS: a preallocated single-producer single-consumer ring, so recording an event never
 * allocates, locks or waits. head and tail only grow (wrapping); the slot is their value mod
 * FGX_EVRING_SIZE. */
#ifndef FGX_EVRING_H
#define FGX_EVRING_H

#include <stddef.h>
#include <stdint.h>

#include "fgx/dp.h"

#define FGX_EVRING_SIZE 256 /* a power of two */

struct fgx_evring {
    uint32_t head;          /* __atomic: written by the producer */
    uint32_t tail;          /* __atomic: written by the consumer */
    uint64_t lost;          /* __atomic: written by the producer; events the ring refused */
    uint64_t lost_reported; /* consumer only: lost as of the previous drain */
    struct fgx_dp_event ev[FGX_EVRING_SIZE];
};

/* Producer: the slot to fill, or NULL when the ring is full (the event is counted lost). Fill
 * it, then fgx_evring_commit() makes it visible. */
struct fgx_dp_event *fgx_evring_claim(struct fgx_evring *r);
void fgx_evring_commit(struct fgx_evring *r);
/* Consumer: move up to max waiting events to out, in order; adds to *lost the events lost since
 * the previous drain. Returns how many were moved. */
size_t fgx_evring_drain(struct fgx_evring *r, struct fgx_dp_event *out, size_t max,
                        uint64_t *lost);

#endif
