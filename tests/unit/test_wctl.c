/* Unit tests for the workers' shared control side (libcommon/wctl.c): the per-thread counter
 * tables, the summing of threads' counters and event rings into a STATS, publishing a ruleset
 * generation to threads (acknowledged only once each uses it), and one request served over a
 * real channel. */
#include <criterion/criterion.h>

#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fgx/chan.h"
#include "fgx/ruleset.h"
#include "fgx/wctl.h"

struct svc_ctr {
    struct fgx_ctr_slot slot;
    uint64_t n;
};

TestSuite(wctl);

Test(wctl, counter_slots_are_one_per_id_and_never_missing)
{
    static struct svc_ctr tab[8];
    struct svc_ctr *a, *b, *c;
    uint32_t id;

    a = fgx_ctr_slot_get(tab, 8, sizeof(tab[0]), 3);
    b = fgx_ctr_slot_get(tab, 8, sizeof(tab[0]), 11); /* 3 and 11 collide mod 8 */
    cr_assert_neq(a, b);
    cr_assert_eq(fgx_ctr_slot_get(tab, 8, sizeof(tab[0]), 3), a);
    cr_assert_eq(fgx_ctr_slot_get(tab, 8, sizeof(tab[0]), 11), b);
    cr_assert(fgx_ctr_slot_used(&a->slot));
    cr_assert_eq(a->slot.id, 3);
    cr_assert_eq(b->slot.id, 11);
    for (id = 100; id < 106; id++)
        cr_assert_not_null(fgx_ctr_slot_get(tab, 8, sizeof(tab[0]), id));
    /* full: a new id still gets a slot to count in (blurred, never a crash) */
    c = fgx_ctr_slot_get(tab, 8, sizeof(tab[0]), 999);
    cr_assert_not_null(c);
    cr_assert(c >= tab && c < tab + 8);
    FGX_CTR_ADD(&a->n, 2);
    FGX_CTR_ADD(&a->n, 3);
    cr_assert_eq(fgx_ctr_load(&a->n), 5);
}

static void add_service(struct fgx_dp_service_stat *ss, const struct fgx_ctr_slot *slot)
{
    const struct svc_ctr *sc = (const void *)slot;

    ss->packets += fgx_ctr_load(&sc->n);
}

Test(wctl, services_of_all_threads_are_summed_per_id)
{
    static struct svc_ctr tab[2][8];
    struct fgx_dp_stats out;
    struct fgx_wstats ws;
    struct svc_ctr *sc;
    unsigned k;
    size_t i;

    for (k = 0; k < 2; k++) {
        sc = fgx_ctr_slot_get(tab[k], 8, sizeof(tab[k][0]), 4);
        FGX_CTR_ADD(&sc->n, 10 * (k + 1));
    }
    sc = fgx_ctr_slot_get(tab[1], 8, sizeof(tab[1][0]), 12);
    FGX_CTR_ADD(&sc->n, 5);
    cr_assert_eq(fgx_wstats_begin(&ws, &out, 1, 8, 1, 1), 0);
    for (k = 0; k < 2; k++)
        fgx_wstats_services(&ws, tab[k], 8, sizeof(tab[k][0]), add_service);
    fgx_wstats_end(&ws);
    cr_assert_eq(out.nservices, 2);
    for (i = 0; i < 2; i++)
        cr_assert_eq(out.services[i].packets, out.services[i].service_id == 4 ? 30 : 5);
    free(out.services);
    free(out.filters);
    free(out.events);
}

static void push(struct fgx_evring *r, uint64_t time_ns, uint32_t filter_id)
{
    struct fgx_dp_event *e = fgx_evring_claim(r, 1);

    cr_assert_not_null(e);
    memset(e, 0, sizeof(*e));
    e->time_ns = time_ns;
    e->filter_id = filter_id;
    fgx_evring_commit(r);
}

Test(wctl, stats_merge_threads_in_time_order_and_sum_counts_and_losses)
{
    static struct fgx_filter_ctr filt[2][16];
    struct fgx_evring *ring = calloc(2, sizeof(*ring));
    struct fgx_dp_msg m = {.type = FGX_DP_STATS};
    struct fgx_dp_stats *st = &m.u.stats;
    struct fgx_dp_service_stat *ss;
    struct fgx_wstats ws;
    unsigned k, i;

    cr_assert_not_null(ring);
    for (k = 0; k < 2; k++)
        for (i = 0; i < 3; i++)
            push(&ring[k], 10 * (2 * i + k + 1), k);
    ring[1].lost = 4; /* as if four more had found the ring full */
    fgx_ctr_filter_blocked(filt[0], 16, 7);
    fgx_ctr_filter_blocked(filt[1], 16, 7);
    fgx_ctr_filter_blocked(filt[1], 16, 7);
    fgx_ctr_filter_blocked(filt[1], 16, 8);

    cr_assert_eq(fgx_wstats_begin(&ws, st, 42, 1, 16, 2 * FGX_EVRING_SIZE), 0);
    for (k = 0; k < 2; k++) {
        fgx_wstats_events(&ws, &ring[k]);
        fgx_wstats_filters(&ws, filt[k], 16);
    }
    ss = fgx_wstats_service(&ws, 5);
    cr_assert_not_null(ss);
    ss->packets = 1;
    cr_assert_eq(fgx_wstats_service(&ws, 5), ss);
    cr_assert_null(fgx_wstats_service(&ws, 6), "room for one service only");
    fgx_wstats_end(&ws);
    cr_assert_eq(st->generation, 42);
    cr_assert_eq(st->nservices, 1);
    cr_assert_eq(st->nevents, 6);
    for (i = 0; i < 6; i++) {
        cr_assert_eq(st->events[i].time_ns, 10 * (i + 1));
        cr_assert_eq(st->events[i].filter_id, i % 2);
    }
    cr_assert_eq(st->events_lost, 4);
    cr_assert_eq(st->nfilters, 2);
    for (i = 0; i < 2; i++)
        cr_assert_eq(st->filters[i].blocked, st->filters[i].filter_id == 7 ? 3 : 1);
    cr_assert_gt(st->rss_bytes, 0);
    fgx_dp_msg_release(&m);

    /* drained: the next report has neither the events nor the losses again */
    m.type = FGX_DP_STATS;
    cr_assert_eq(fgx_wstats_begin(&ws, st, 42, 1, 16, 2 * FGX_EVRING_SIZE), 0);
    for (k = 0; k < 2; k++)
        fgx_wstats_events(&ws, &ring[k]);
    fgx_wstats_end(&ws);
    cr_assert_eq(st->nevents, 0);
    cr_assert_null(st->events);
    cr_assert_eq(st->events_lost, 0);
    fgx_dp_msg_release(&m);
    free(ring);
}

/* ---- publishing: a fake worker whose threads switch on their own, some time after a wake ---- */

#define NTHREADS 3

struct fake {
    struct fgx_wcfg *current;
    int stop;
    int quit;
    struct fgx_wcfg *applied[NTHREADS]; /* __atomic */
    int woken[NTHREADS];                /* __atomic */
    bool frozen;                        /* threads never switch */
    pthread_t tid[NTHREADS];
};

static struct fake fk;

static void *fake_thread(void *arg)
{
    unsigned i = (unsigned)(uintptr_t)arg;

    while (!__atomic_load_n(&fk.quit, __ATOMIC_ACQUIRE)) {
        if (__atomic_exchange_n(&fk.woken[i], 0, __ATOMIC_ACQ_REL) &&
            !__atomic_load_n(&fk.frozen, __ATOMIC_ACQUIRE)) {
            usleep(2000 * (i + 1));
            __atomic_store_n(&fk.applied[i], __atomic_load_n(&fk.current, __ATOMIC_ACQUIRE),
                             __ATOMIC_RELEASE);
        }
        usleep(200);
    }
    return NULL;
}

static void fake_wake(void *worker, unsigned i)
{
    cr_assert_eq(worker, &fk);
    __atomic_store_n(&fk.woken[i], 1, __ATOMIC_RELEASE);
}

static bool fake_uses(void *worker, unsigned i, const struct fgx_wcfg *c)
{
    (void)worker;
    return __atomic_load_n(&fk.applied[i], __ATOMIC_ACQUIRE) == c;
}

static int vetted;

static void fake_vet(void *worker, const struct fgx_dp_ruleset *rs)
{
    (void)worker;
    vetted = (int)rs->nservices;
}

static int fake_stats(void *worker, struct fgx_dp_stats *out)
{
    struct fgx_wstats ws;

    (void)worker;
    return fgx_wstats_begin(&ws, out, 77, 1, 1, 1) == 0 ? (fgx_wstats_end(&ws), 0) : -ENOMEM;
}

static const struct fgx_wctl ctl = {
    .worker = &fk,
    .nthreads = NTHREADS,
    .current = &fk.current,
    .stop = &fk.stop,
    .wake = fake_wake,
    .uses = fake_uses,
    .vet = fake_vet,
    .stats = fake_stats,
};

static void fake_start(void)
{
    unsigned i;

    memset(&fk, 0, sizeof(fk));
    for (i = 0; i < NTHREADS; i++)
        cr_assert_eq(pthread_create(&fk.tid[i], NULL, fake_thread, (void *)(uintptr_t)i), 0);
}

static void fake_stop(void)
{
    unsigned i;

    __atomic_store_n(&fk.quit, 1, __ATOMIC_RELEASE);
    for (i = 0; i < NTHREADS; i++)
        pthread_join(fk.tid[i], NULL);
    fgx_wcfg_unref(fk.current);
}

static struct fgx_blob evil;

static void ruleset(uint64_t gen, const struct fgx_blob *b, struct fgx_dp_service *s,
                    struct fgx_dp_ruleset *rs)
{
    memset(s, 0, sizeof(*s));
    s->id = 1;
    s->ipproto = IPPROTO_TCP;
    s->port = 80;
    s->db[0] = *b;
    memset(rs, 0, sizeof(*rs));
    rs->generation = gen;
    rs->nservices = 1;
    rs->services = s;
}

static void compile_evil(void)
{
    struct fgx_pattern p = {5, "evil[0-9]+", FGX_DIR_C2S, false};
    char err[256];

    cr_assert_eq(fgx_ruleset_compile(&p, 1, FGX_DIR_C2S, IPPROTO_TCP, &evil, err, sizeof(err)), 0,
                 "%s", err);
}

Test(wctl, apply_returns_once_every_thread_uses_the_new_generation, .init = fake_start,
     .fini = fake_stop)
{
    struct fgx_dp_service s;
    struct fgx_dp_ruleset rs;
    struct fgx_wdb *db;
    unsigned i;

    compile_evil();
    ruleset(1, &evil, &s, &rs);
    cr_assert_eq(fgx_wctl_apply(&ctl, &rs), 0);
    cr_assert_eq(vetted, 1);
    cr_assert_not_null(fk.current);
    cr_assert_eq(fk.current->generation, 1);
    for (i = 0; i < NTHREADS; i++)
        cr_assert_eq(__atomic_load_n(&fk.applied[i], __ATOMIC_ACQUIRE), fk.current);
    db = fk.current->svc[0].db[0];
    /* the next generation reuses the loaded database; the old generation is released */
    ruleset(2, &evil, &s, &rs);
    cr_assert_eq(fgx_wctl_apply(&ctl, &rs), 0);
    cr_assert_eq(fk.current->generation, 2);
    cr_assert_eq(fk.current->svc[0].db[0], db);
    cr_assert_eq(__atomic_load_n(&db->refs, __ATOMIC_RELAXED), 1);
    for (i = 0; i < NTHREADS; i++)
        cr_assert_eq(__atomic_load_n(&fk.applied[i], __ATOMIC_ACQUIRE), fk.current);
    fgx_blob_release(&evil);
}

Test(wctl, refused_ruleset_publishes_nothing, .init = fake_start, .fini = fake_stop)
{
    struct fgx_blob bad = {.data = "not a database", .len = 14, .hash = 42};
    struct fgx_dp_service s;
    struct fgx_dp_ruleset rs;

    ruleset(1, &bad, &s, &rs);
    cr_assert_eq(fgx_wctl_apply(&ctl, &rs), -EINVAL);
    cr_assert_null(fk.current);
    cr_assert_null(fk.applied[0]);
}

Test(wctl, stop_ends_the_wait_for_a_thread_that_never_switches, .init = fake_start,
     .fini = fake_stop)
{
    struct fgx_dp_service s;
    struct fgx_dp_ruleset rs;

    compile_evil();
    __atomic_store_n(&fk.frozen, true, __ATOMIC_RELEASE);
    __atomic_store_n(&fk.stop, 1, __ATOMIC_RELEASE);
    ruleset(1, &evil, &s, &rs);
    cr_assert_eq(fgx_wctl_apply(&ctl, &rs), -ECANCELED);
    /* published all the same (the threads may already use it): released by fake_stop() */
    cr_assert_not_null(fk.current);
    fgx_blob_release(&evil);
}

/* ---- one request over a real channel ---- */

static struct fgx_dp_msg *call(struct fgx_chan *req, struct fgx_chan *rep, const void *buf,
                               size_t len, struct fgx_dp_msg *reply)
{
    void *in = NULL, *out = NULL;
    size_t inlen = 0, outlen = 0;

    cr_assert_eq(fgx_chan_send(req, buf, len, 2000), 0);
    cr_assert_eq(fgx_chan_recv(rep, &in, &inlen, 2000), 0);
    fgx_wctl_serve(&ctl, rep, in, inlen);
    cr_assert_eq(fgx_chan_recv(req, &out, &outlen, 2000), 0);
    cr_assert_eq(fgx_dp_decode(out, outlen, reply), 0);
    free(out);
    return reply;
}

Test(wctl, serves_ruleset_stats_and_garbage, .init = fake_start, .fini = fake_stop)
{
    struct fgx_dp_msg m = {0}, r = {0};
    struct fgx_chan *req = NULL, *rep = NULL;
    char url[96];
    void *buf = NULL;
    size_t len = 0;

    snprintf(url, sizeof(url), "ipc:///tmp/fgx-test-wctl-%d.sock", (int)getpid());
    cr_assert_eq(fgx_chan_listen(url, FGX_CHAN_REQ, &req), 0);
    cr_assert_eq(fgx_chan_dial(url, FGX_CHAN_REP, 2000, &rep), 0);

    compile_evil();
    m.type = FGX_DP_RULESET;
    m.u.ruleset.generation = 9;
    m.u.ruleset.nservices = 1;
    m.u.ruleset.services = calloc(1, sizeof(*m.u.ruleset.services));
    cr_assert_not_null(m.u.ruleset.services);
    m.u.ruleset.services[0].id = 1;
    m.u.ruleset.services[0].ipproto = IPPROTO_TCP;
    m.u.ruleset.services[0].port = 80;
    m.u.ruleset.services[0].db[0] = evil;
    cr_assert_eq(fgx_dp_encode(&m, &buf, &len), 0);
    free(m.u.ruleset.services);
    call(req, rep, buf, len, &r);
    free(buf);
    cr_assert_eq(r.type, FGX_DP_ACK);
    cr_assert_eq(r.u.ack_generation, 9);
    cr_assert_eq(fk.current->generation, 9);
    fgx_dp_msg_release(&r);

    memset(&m, 0, sizeof(m));
    m.type = FGX_DP_STATS_REQUEST;
    cr_assert_eq(fgx_dp_encode(&m, &buf, &len), 0);
    call(req, rep, buf, len, &r);
    free(buf);
    cr_assert_eq(r.type, FGX_DP_STATS);
    cr_assert_eq(r.u.stats.generation, 77);
    fgx_dp_msg_release(&r);

    call(req, rep, "\xff\xff\xff", 3, &r);
    cr_assert_eq(r.type, FGX_DP_ERROR);
    cr_assert_not_null(r.u.error);
    fgx_dp_msg_release(&r);

    fgx_chan_close(rep);
    fgx_chan_close(req);
    unlink(url + 6);
    fgx_blob_release(&evil);
}

/* ---- liveness (issue 24): the heartbeat, answered while a ruleset is being applied ---- */

static uint64_t alive_at[NTHREADS];

static uint64_t fake_alive(void *worker, unsigned i)
{
    (void)worker;
    return alive_at[i];
}

static const struct fgx_wctl hb_ctl = {
    .worker = &fk,
    .nthreads = NTHREADS,
    .current = &fk.current,
    .stop = &fk.stop,
    .wake = fake_wake,
    .uses = fake_uses,
    .stats = fake_stats,
    .alive = fake_alive,
};

static void *run_main(void *arg)
{
    (void)arg;
    fgx_wctl_run(&hb_ctl, (const char *)arg);
    return NULL;
}

/* A heartbeat's reply: decoded from a call started with fgx_chan_call_begin(). */
static int hb_wait(struct fgx_chan *req, int within_ms, struct fgx_dp_msg *r)
{
    struct fgx_dp_msg m = {.type = FGX_DP_HEARTBEAT_REQUEST};
    struct fgx_chan_pending *p = NULL;
    void *buf = NULL, *out = NULL;
    size_t len = 0, outlen = 0;
    int rv, waited;

    cr_assert_eq(fgx_dp_encode(&m, &buf, &len), 0);
    cr_assert_eq(fgx_chan_call_begin(req, buf, len, 5000, &p), 0);
    free(buf);
    for (waited = 0; (rv = fgx_chan_call_end(p, &out, &outlen)) == -EINPROGRESS; waited++) {
        if (waited >= within_ms) {
            fgx_chan_call_cancel(p);
            return -ETIMEDOUT;
        }
        usleep(1000);
    }
    cr_assert_eq(rv, 0);
    cr_assert_eq(fgx_dp_decode(out, outlen, r), 0);
    free(out);
    return 0;
}

Test(wctl, heartbeat_names_stale_threads_and_is_answered_during_an_apply, .init = fake_start,
     .fini = fake_stop, .timeout = 20)
{
    struct fgx_dp_service s;
    struct fgx_dp_ruleset rs;
    struct fgx_dp_msg m = {0}, r = {0};
    struct fgx_chan *req = NULL;
    pthread_t tid;
    char url[96];
    void *buf = NULL;
    size_t len = 0;
    uint64_t now = fgx_wctl_now_ms();

    alive_at[0] = now;        /* turned its loop just now */
    alive_at[1] = now - 1500; /* stuck for 1.5 s */
    alive_at[2] = 0;          /* not running */
    snprintf(url, sizeof(url), "ipc:///tmp/fgx-test-wctl-hb-%d.sock", (int)getpid());
    cr_assert_eq(fgx_chan_listen(url, FGX_CHAN_REQ, &req), 0);
    cr_assert_eq(pthread_create(&tid, NULL, run_main, url), 0);

    cr_assert_eq(hb_wait(req, 3000, &r), 0, "no heartbeat answer");
    cr_assert_eq(r.type, FGX_DP_HEARTBEAT);
    cr_assert_eq(r.u.heartbeat.pid, (uint32_t)getpid());
    cr_assert_neq(r.u.heartbeat.worker_id, 0);
    cr_assert_eq(r.u.heartbeat.nthreads, NTHREADS);
    cr_assert_lt(r.u.heartbeat.stale_ms[0], 500);
    cr_assert_geq(r.u.heartbeat.stale_ms[1], 1400);
    cr_assert_eq(r.u.heartbeat.stale_ms[2], 0, "a thread that does not run is not stale");
    fgx_dp_msg_release(&r);

    /* A ruleset that cannot complete (the threads never switch): the control thread waits in
     * it, and a heartbeat is still answered at once by the other receiver. */
    compile_evil();
    __atomic_store_n(&fk.frozen, true, __ATOMIC_RELEASE);
    ruleset(5, &evil, &s, &rs);
    m.type = FGX_DP_RULESET;
    m.u.ruleset = rs;
    cr_assert_eq(fgx_dp_encode(&m, &buf, &len), 0);
    cr_assert_eq(fgx_chan_send(req, buf, len, 2000), 0);
    free(buf);
    usleep(100000);
    cr_assert_eq(hb_wait(req, 1000, &r), 0, "the heartbeat waited for the ruleset");
    cr_assert_eq(r.type, FGX_DP_HEARTBEAT);
    cr_assert_eq(r.u.heartbeat.generation, 0, "generation 5 is not applied yet");
    fgx_dp_msg_release(&r);

    __atomic_store_n(&fk.stop, 1, __ATOMIC_RELEASE);
    pthread_join(tid, NULL);
    fgx_chan_close(req);
    unlink(url + 6);
    fgx_blob_release(&evil);
}
