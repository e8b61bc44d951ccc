/* Event stage of nfqworker: each block the match stage decides becomes a match event in its
 * thread's ring; the control thread drains every ring into the next STATS for controld. The
 * ring is preallocated and lock-free, so recording an event never allocates nor waits. */
#include "nfq.h"

#include <string.h>

struct fgx_dp_event *nfq_event_claim(struct nfq_event_ring *r)
{
    uint32_t head = r->head; /* only this thread writes it */
    uint32_t tail = __atomic_load_n(&r->tail, __ATOMIC_ACQUIRE);

    if (head - tail >= NFQ_EVENTS) {
        /* Nobody collected for a while: the newest event is the one given up, so that what
         * was already queued stays consistent for the reader. */
        NFQ_CTR_ADD(&r->lost, 1);
        return NULL;
    }
    return &r->ev[head % NFQ_EVENTS];
}

void nfq_event_commit(struct nfq_event_ring *r)
{
    __atomic_store_n(&r->head, r->head + 1, __ATOMIC_RELEASE);
}

size_t nfq_event_drain(struct nfq_event_ring *r, struct fgx_dp_event *out, size_t max,
                       uint64_t *lost)
{
    uint32_t tail = r->tail; /* only this thread writes it */
    uint32_t head = __atomic_load_n(&r->head, __ATOMIC_ACQUIRE);
    uint64_t l = __atomic_load_n(&r->lost, __ATOMIC_RELAXED);
    size_t n = 0;

    while (tail != head && n < max) {
        memcpy(&out[n++], &r->ev[tail % NFQ_EVENTS], sizeof(*out));
        tail++;
    }
    /* The slots are the producer's again only once copied out. */
    __atomic_store_n(&r->tail, tail, __ATOMIC_RELEASE);
    *lost += l - r->lost_reported;
    r->lost_reported = l;
    return n;
}
