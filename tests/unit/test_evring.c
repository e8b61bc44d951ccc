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

static bool push(uint32_t filter_id)
{
    struct fgx_dp_event *e = fgx_evring_claim(ring);

    if (e == NULL)
        return false;
    memset(e, 0, sizeof(*e));
    e->filter_id = filter_id;
    fgx_evring_commit(ring);
    return true;
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
