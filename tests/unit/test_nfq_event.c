/* Unit tests for nfqworker's event ring (nfq_event.c): order, bounds, loss accounting and
 * wrap-around, plus one producer and one consumer on two threads. */
#include <criterion/criterion.h>

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "nfqworker/nfq.h"

static struct nfq_event_ring *ring;

static void setup(void)
{
    ring = calloc(1, sizeof(*ring));
    cr_assert_not_null(ring);
}

static void teardown(void)
{
    free(ring);
}

TestSuite(nfq_event, .init = setup, .fini = teardown);

static bool push(uint32_t filter_id)
{
    struct fgx_dp_event *e = nfq_event_claim(ring);

    if (e == NULL)
        return false;
    memset(e, 0, sizeof(*e));
    e->filter_id = filter_id;
    nfq_event_commit(ring);
    return true;
}

Test(nfq_event, drains_in_order_and_only_once)
{
    struct fgx_dp_event out[8];
    uint64_t lost = 0;

    cr_assert_eq(nfq_event_drain(ring, out, 8, &lost), 0);
    cr_assert(push(1));
    cr_assert(push(2));
    cr_assert(push(3));
    cr_assert_eq(nfq_event_drain(ring, out, 2, &lost), 2);
    cr_assert_eq(out[0].filter_id, 1);
    cr_assert_eq(out[1].filter_id, 2);
    cr_assert_eq(nfq_event_drain(ring, out, 8, &lost), 1);
    cr_assert_eq(out[0].filter_id, 3);
    cr_assert_eq(nfq_event_drain(ring, out, 8, &lost), 0);
    cr_assert_eq(lost, 0);
}

Test(nfq_event, full_ring_keeps_the_oldest_and_counts_the_rest_once)
{
    static struct fgx_dp_event out[NFQ_EVENTS];
    uint64_t lost = 0;
    uint32_t i;

    for (i = 0; i < NFQ_EVENTS; i++)
        cr_assert(push(i));
    cr_assert_not(push(1000));
    cr_assert_not(push(1001));
    cr_assert_eq(nfq_event_drain(ring, out, NFQ_EVENTS, &lost), NFQ_EVENTS);
    cr_assert_eq(lost, 2);
    for (i = 0; i < NFQ_EVENTS; i++)
        cr_assert_eq(out[i].filter_id, i);
    /* lost is reported as a difference: the next drain adds nothing unless more are lost */
    lost = 0;
    cr_assert(push(7));
    cr_assert_eq(nfq_event_drain(ring, out, NFQ_EVENTS, &lost), 1);
    cr_assert_eq(lost, 0);
}

Test(nfq_event, indices_wrap_around)
{
    struct fgx_dp_event out[4];
    uint64_t lost = 0;
    uint32_t i;

    ring->head = ring->tail = UINT32_MAX - 2;
    for (i = 0; i < 6; i++) {
        cr_assert(push(i));
        cr_assert_eq(nfq_event_drain(ring, out, 4, &lost), 1);
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

Test(nfq_event, one_producer_one_consumer_see_every_event_in_order)
{
    static struct fgx_dp_event out[64];
    pthread_t th;
    uint32_t expect = 0;
    uint64_t lost = 0;

    cr_assert_eq(pthread_create(&th, NULL, producer, NULL), 0);
    while (expect < MANY) {
        size_t n = nfq_event_drain(ring, out, 64, &lost), i;

        for (i = 0; i < n; i++, expect++)
            cr_assert_eq(out[i].filter_id, expect);
    }
    pthread_join(th, NULL);
    /* refused pushes were retried by the producer, so they count as lost but nothing is missing */
    cr_assert_eq(lost, __atomic_load_n(&ring->lost, __ATOMIC_RELAXED));
}

Test(nfq_event, stats_merge_threads_in_time_order_and_sum_losses)
{
    struct nfq_worker w = {.nthreads = 2, .queue_base = 60000};
    struct fgx_dp_msg m = {.type = FGX_DP_STATS};
    struct fgx_dp_stats *st = &m.u.stats;
    uint64_t times[2][3] = {{10, 30, 50}, {20, 40, 60}};
    unsigned k, i;

    w.threads = calloc(2, sizeof(*w.threads));
    cr_assert_not_null(w.threads);
    for (k = 0; k < 2; k++) {
        for (i = 0; i < 3; i++) {
            struct fgx_dp_event *e = nfq_event_claim(&w.threads[k].events);

            cr_assert_not_null(e);
            e->time_ns = times[k][i];
            e->filter_id = k;
            nfq_event_commit(&w.threads[k].events);
        }
    }
    w.threads[1].events.lost = 4; /* as if four more had found the ring full */
    cr_assert_eq(nfq_stats_collect(&w, st), 0);
    cr_assert_eq(st->nevents, 6);
    for (i = 0; i < 6; i++) {
        cr_assert_eq(st->events[i].time_ns, 10 * (i + 1));
        cr_assert_eq(st->events[i].filter_id, i % 2);
    }
    cr_assert_eq(st->events_lost, 4);
    fgx_dp_msg_release(&m);
    /* drained: the next report has neither the events nor the losses again */
    m.type = FGX_DP_STATS;
    cr_assert_eq(nfq_stats_collect(&w, st), 0);
    cr_assert_eq(st->nevents, 0);
    cr_assert_eq(st->events_lost, 0);
    fgx_dp_msg_release(&m);
    free(w.threads);
}
