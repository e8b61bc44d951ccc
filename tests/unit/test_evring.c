/* Unit tests for the data path's event ring (libcommon/evring.c): order, bounds, loss accounting
 * and wrap-around, plus one producer and one consumer on two threads. */
#include <criterion/criterion.h>

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "fgx/evring.h"

static struct fgx_evring *ring;

static void setup(void)
{
    ring = calloc(1, sizeof(*ring));
    cr_assert_not_null(ring);
}

static void teardown(void)
{
    free(ring);
}

TestSuite(evring, .init = setup, .fini = teardown);

static bool push_svc(uint32_t service_id, uint32_t filter_id)
{
    struct fgx_dp_event *e = fgx_evring_claim(ring, service_id);

    if (e == NULL)
        return false;
    memset(e, 0, sizeof(*e));
    e->filter_id = filter_id;
    fgx_evring_commit(ring);
    return true;
}

static bool push(uint32_t filter_id)
{
    return push_svc(1, filter_id);
}

static uint64_t lost_of(uint32_t service_id)
{
    for (size_t i = 0; i < FGX_EVRING_LOST_SLOTS; i++)
        if (ring->lost_svc[i].used && ring->lost_svc[i].id == service_id)
            return ring->lost_svc[i].n;
    return 0;
}

Test(evring, holds_a_burst_of_thousands)
{
    /* 1,100 blocks in 2.4 s once lost 303 events with a 256-entry ring drained each second. */
    for (uint32_t i = 0; i < 4096; i++)
        cr_assert(push(i), "event %u refused", i);
    cr_assert_eq(fgx_evring_pending(ring), 4096);
}

Test(evring, refused_events_are_counted_per_service)
{
    static struct fgx_dp_event out[FGX_EVRING_SIZE];
    uint64_t lost = 0;
    uint32_t i;

    for (i = 0; i < FGX_EVRING_SIZE; i++)
        cr_assert(push_svc(1, i));
    cr_assert_not(push_svc(7, 1));
    cr_assert_not(push_svc(7, 2));
    cr_assert_not(push_svc(9, 3));
    cr_assert_eq(lost_of(7), 2);
    cr_assert_eq(lost_of(9), 1);
    cr_assert_eq(lost_of(1), 0, "a service that lost nothing has no count");
    cr_assert_eq(fgx_evring_drain(ring, out, FGX_EVRING_SIZE, &lost), FGX_EVRING_SIZE);
    cr_assert_eq(lost, 3);
    cr_assert_eq(fgx_evring_pending(ring), 0);
    /* cumulative per service: the worker reports them like its other service counters */
    cr_assert_eq(lost_of(7), 2);
}

Test(evring, more_losing_services_than_slots_are_still_counted)
{
    uint64_t sum = 0;
    uint32_t i;

    for (i = 0; i < FGX_EVRING_SIZE; i++)
        cr_assert(push(i));
    for (i = 0; i < 2 * FGX_EVRING_LOST_SLOTS; i++)
        cr_assert_not(push_svc(100 + i, 0));
    for (i = 0; i < FGX_EVRING_LOST_SLOTS; i++)
        sum += ring->lost_svc[i].n;
    cr_assert_eq(sum, 2 * FGX_EVRING_LOST_SLOTS, "every refused event is in some count");
}

Test(evring, drains_in_order_and_only_once)
{
    struct fgx_dp_event out[8];
    uint64_t lost = 0;

    cr_assert_eq(fgx_evring_drain(ring, out, 8, &lost), 0);
    cr_assert(push(1));
    cr_assert(push(2));
    cr_assert(push(3));
    cr_assert_eq(fgx_evring_drain(ring, out, 2, &lost), 2);
    cr_assert_eq(out[0].filter_id, 1);
    cr_assert_eq(out[1].filter_id, 2);
    cr_assert_eq(fgx_evring_drain(ring, out, 8, &lost), 1);
    cr_assert_eq(out[0].filter_id, 3);
    cr_assert_eq(fgx_evring_drain(ring, out, 8, &lost), 0);
    cr_assert_eq(lost, 0);
}

Test(evring, full_ring_keeps_the_oldest_and_counts_the_rest_once)
{
    static struct fgx_dp_event out[FGX_EVRING_SIZE];
    uint64_t lost = 0;
    uint32_t i;

    for (i = 0; i < FGX_EVRING_SIZE; i++)
        cr_assert(push(i));
    cr_assert_not(push(1000));
    cr_assert_not(push(1001));
    cr_assert_eq(fgx_evring_drain(ring, out, FGX_EVRING_SIZE, &lost), FGX_EVRING_SIZE);
    cr_assert_eq(lost, 2);
    for (i = 0; i < FGX_EVRING_SIZE; i++)
        cr_assert_eq(out[i].filter_id, i);
    /* lost is reported as a difference: the next drain adds nothing unless more are lost */
    lost = 0;
    cr_assert(push(7));
    cr_assert_eq(fgx_evring_drain(ring, out, FGX_EVRING_SIZE, &lost), 1);
    cr_assert_eq(lost, 0);
}

Test(evring, indices_wrap_around)
{
    struct fgx_dp_event out[4];
    uint64_t lost = 0;
    uint32_t i;

    ring->head = ring->tail = UINT32_MAX - 2;
    for (i = 0; i < 6; i++) {
        cr_assert(push(i));
        cr_assert_eq(fgx_evring_drain(ring, out, 4, &lost), 1);
        cr_assert_eq(out[0].filter_id, i);
    }
    cr_assert_eq(ring->head, 3);
    cr_assert_eq(lost, 0);
}

#define MANY 200000u

static void *producer(void *arg)
{
    uint32_t i = 0;

    (void)arg;
    while (i < MANY)
        if (push(i))
            i++;
    return NULL;
}

Test(evring, one_producer_one_consumer_see_every_event_in_order)
{
    static struct fgx_dp_event out[64];
    pthread_t th;
    uint32_t expect = 0;
    uint64_t lost = 0;

    cr_assert_eq(pthread_create(&th, NULL, producer, NULL), 0);
    while (expect < MANY) {
        size_t n = fgx_evring_drain(ring, out, 64, &lost), i;

        for (i = 0; i < n; i++, expect++)
            cr_assert_eq(out[i].filter_id, expect);
    }
    pthread_join(th, NULL);
    /* refused pushes were retried by the producer, so they count as lost but nothing is missing */
    cr_assert_eq(lost, __atomic_load_n(&ring->lost, __ATOMIC_RELAXED));
}
