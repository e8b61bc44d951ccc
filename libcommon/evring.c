/* Event ring of the data path: a match event recorded by a data-path thread -> drained by its
 * worker's control thread into the next STATS for controld. */
#include "fgx/evring.h"

#include <string.h>

/* Count a refused event for its service: open addressing over a fixed table, so no allocation
 * on the packet path; a service that finds the table full is counted in the last slot probed. */
static void lost_svc_add(struct fgx_evring *r, uint32_t id)
{
    uint32_t i = (id * 2654435761u) % FGX_EVRING_LOST_SLOTS, k;
    struct fgx_evring_lost *l = NULL;

    for (k = 0; k < FGX_EVRING_LOST_SLOTS; k++) {
        l = &r->lost_svc[(i + k) % FGX_EVRING_LOST_SLOTS];
        if (!l->used) {
            l->id = id;
            __atomic_store_n(&l->used, 1, __ATOMIC_RELEASE);
            break;
        }
        if (l->id == id)
            break;
    }
    __atomic_store_n(&l->n, l->n + 1, __ATOMIC_RELAXED);
}

size_t fgx_evring_pending(const struct fgx_evring *r)
{
    return __atomic_load_n(&r->head, __ATOMIC_ACQUIRE) - r->tail;
}

struct fgx_dp_event *fgx_evring_claim(struct fgx_evring *r, uint32_t service_id)
{
    uint32_t head = r->head; /* only the producer writes it */
    uint32_t tail = __atomic_load_n(&r->tail, __ATOMIC_ACQUIRE);

    if (head - tail >= FGX_EVRING_SIZE) {
        /* Nobody collected for a while: the newest event is the one given up, so that what was
         * already queued stays consistent for the reader. */
        __atomic_store_n(&r->lost, r->lost + 1, __ATOMIC_RELAXED);
        lost_svc_add(r, service_id);
        return NULL;
    }
    return &r->ev[head % FGX_EVRING_SIZE];
}

void fgx_evring_commit(struct fgx_evring *r)
{
    __atomic_store_n(&r->head, r->head + 1, __ATOMIC_RELEASE);
}

size_t fgx_evring_drain(struct fgx_evring *r, struct fgx_dp_event *out, size_t max,
                        uint64_t *lost)
{
    uint32_t tail = r->tail; /* only the consumer writes it */
    uint32_t head = __atomic_load_n(&r->head, __ATOMIC_ACQUIRE);
    uint64_t l = __atomic_load_n(&r->lost, __ATOMIC_RELAXED);
    size_t n = 0;

    while (tail != head && n < max) {
        memcpy(&out[n++], &r->ev[tail % FGX_EVRING_SIZE], sizeof(*out));
        tail++;
    }
    /* The slots are the producer's again only once copied out. */
    __atomic_store_n(&r->tail, tail, __ATOMIC_RELEASE);
    *lost += l - r->lost_reported;
    r->lost_reported = l;
    return n;
}
