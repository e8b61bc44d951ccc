/* Control stage of a worker (nfqworker, proxyworker): the thread that talks to controld. It loads
 * each pushed ruleset off the data path, publishes it with one pointer store, waits until every
 * data-path thread has switched and only then acknowledges; it answers statistics requests with
 * the threads' counters and the match events since the previous request. */
#include "fgx/wctl.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "fgx/chan.h"
#include "fgx/log.h"

/* How often the control loop looks at the stop flag while no request comes: SIGTERM does not
 * interrupt nng's receive, so this is how long a stopping worker keeps its parent waiting
 * (controld stops its workers one after another). An idle wake-up off the packet path. */
#define RECV_TIMEOUT_MS 100
#define SEND_TIMEOUT_MS 5000

/* The process's identity for controld (struct fgx_dp_heartbeat), drawn once; the generation
 * every thread uses now, for heartbeats (read without the serving lock). */
static uint64_t worker_id;
static uint64_t applied_generation; /* __atomic */

uint64_t fgx_wctl_now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* ---- counters ---- */

void *fgx_ctr_slot_get(void *table, size_t nslots, size_t size, uint32_t id)
{
    size_t i = (id * 2654435761u) % nslots, n;
    struct fgx_ctr_slot *s = NULL;

    for (n = 0; n < nslots; n++, i = (i + 1) % nslots) {
        s = (struct fgx_ctr_slot *)((char *)table + i * size);
        if (!s->used) {
            s->id = id;
            __atomic_store_n(&s->used, 1, __ATOMIC_RELEASE);
            return s;
        }
        if (s->id == id)
            return s;
    }
    return s;
}

/* The slot of filter id, claimed with both counters zero if new; NULL when the table is full. */
static struct fgx_filter_ctr *filter_slot(struct fgx_filter_ctr *table, size_t nslots, uint32_t id)
{
    size_t i = (id * 2654435761u) % nslots, n;

    for (n = 0; n < nslots; n++, i = (i + 1) % nslots) {
        struct fgx_filter_ctr *f = &table[i];

        if (!f->slot.used) {
            f->slot.id = id;
            __atomic_store_n(&f->blocked, 0, __ATOMIC_RELAXED);
            __atomic_store_n(&f->matched, 0, __ATOMIC_RELAXED);
            __atomic_store_n(&f->slot.used, 1, __ATOMIC_RELEASE);
            return f;
        }
        if (f->slot.id == id)
            return f;
    }
    return NULL;
}

void fgx_ctr_filter_blocked(struct fgx_filter_ctr *table, size_t nslots, uint32_t id)
{
    struct fgx_filter_ctr *f = filter_slot(table, nslots, id);

    if (f != NULL)
        FGX_CTR_ADD(&f->blocked, 1);
}

void fgx_ctr_filter_matched(struct fgx_filter_ctr *table, size_t nslots, uint32_t id)
{
    struct fgx_filter_ctr *f = filter_slot(table, nslots, id);

    if (f != NULL)
        FGX_CTR_ADD(&f->matched, 1);
}

uint64_t fgx_ctr_load(const uint64_t *p)
{
    return __atomic_load_n(p, __ATOMIC_RELAXED);
}

bool fgx_ctr_slot_used(const struct fgx_ctr_slot *s)
{
    return __atomic_load_n(&s->used, __ATOMIC_ACQUIRE) != 0;
}

/* ---- summing into a STATS ---- */

int fgx_wstats_begin(struct fgx_wstats *st, struct fgx_dp_stats *out, uint64_t generation,
                     size_t scap, size_t fcap, size_t ecap)
{
    memset(out, 0, sizeof(*out));
    st->out = out;
    st->scap = scap;
    st->fcap = fcap;
    st->ecap = ecap;
    out->services = calloc(scap, sizeof(*out->services));
    out->filters = calloc(fcap, sizeof(*out->filters));
    out->events = calloc(ecap, sizeof(*out->events));
    if (out->services == NULL || out->filters == NULL || out->events == NULL) {
        free(out->services);
        free(out->filters);
        free(out->events);
        memset(out, 0, sizeof(*out));
        st->scap = st->fcap = st->ecap = 0;
        fgx_err("stats: out of memory");
        return -ENOMEM;
    }
    out->generation = generation;
    return 0;
}

struct fgx_dp_service_stat *fgx_wstats_service(struct fgx_wstats *st, uint32_t id)
{
    struct fgx_dp_stats *s = st->out;
    size_t i;

    for (i = 0; i < s->nservices; i++)
        if (s->services[i].service_id == id)
            return &s->services[i];
    if (s->nservices == st->scap)
        return NULL;
    s->services[s->nservices].service_id = id;
    return &s->services[s->nservices++];
}

void fgx_wstats_services(struct fgx_wstats *st, const void *table, size_t nslots, size_t size,
                         fgx_wstats_svc_fn add)
{
    size_t i;

    for (i = 0; i < nslots; i++) {
        const struct fgx_ctr_slot *s = (const void *)((const char *)table + i * size);
        struct fgx_dp_service_stat *ss;

        if (!fgx_ctr_slot_used(s))
            continue;
        ss = fgx_wstats_service(st, s->id);
        if (ss != NULL)
            add(ss, s);
    }
}

static struct fgx_dp_filter_stat *filter_find(struct fgx_wstats *st, uint32_t id)
{
    struct fgx_dp_stats *s = st->out;
    size_t i;

    for (i = 0; i < s->nfilters; i++)
        if (s->filters[i].filter_id == id)
            return &s->filters[i];
    if (s->nfilters == st->fcap)
        return NULL;
    s->filters[s->nfilters].filter_id = id;
    return &s->filters[s->nfilters++];
}

void fgx_wstats_filters(struct fgx_wstats *st, const struct fgx_filter_ctr *table, size_t nslots)
{
    size_t i;

    for (i = 0; i < nslots; i++) {
        struct fgx_dp_filter_stat *fs;

        if (!fgx_ctr_slot_used(&table[i].slot))
            continue;
        fs = filter_find(st, table[i].slot.id);
        if (fs != NULL) {
            fs->blocked += fgx_ctr_load(&table[i].blocked);
            fs->matched += fgx_ctr_load(&table[i].matched);
        }
    }
}

void fgx_wstats_events(struct fgx_wstats *st, struct fgx_evring *r)
{
    struct fgx_dp_stats *s = st->out;

    size_t from = s->nevents;

    s->nevents +=
        fgx_evring_drain(r, s->events + s->nevents, st->ecap - s->nevents, &s->events_lost);
    /* A ring's events never carry a capture: the worker attaches one afterwards, if any. */
    for (size_t i = from; i < s->nevents; i++) {
        s->events[i].capture = NULL;
        s->events[i].capture_len = 0;
    }
    /* What the ring refused, by service (cumulative, like the services' other counters). */
    for (size_t i = 0; i < FGX_EVRING_LOST_SLOTS; i++) {
        const struct fgx_evring_lost *l = &r->lost_svc[i];
        struct fgx_dp_service_stat *ss;

        if (!__atomic_load_n(&l->used, __ATOMIC_ACQUIRE))
            continue;
        ss = fgx_wstats_service(st, l->id);
        if (ss != NULL)
            ss->events_lost += __atomic_load_n(&l->n, __ATOMIC_RELAXED);
    }
}

static int event_cmp(const void *a, const void *b)
{
    const struct fgx_dp_event *x = a, *y = b;

    return x->time_ns < y->time_ns ? -1 : x->time_ns > y->time_ns;
}

static int statm_fd = -1; /* /proc/self/statm, opened before the privileges go */

int fgx_wstats_open(void)
{
    if (statm_fd != -1)
        return 0;
    statm_fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
    return statm_fd == -1 ? -errno : 0;
}

static uint64_t rss_bytes(void)
{
    unsigned long size, rss;
    char buf[128];
    ssize_t n;

    if (statm_fd == -1 && fgx_wstats_open() != 0)
        return 0;
    n = pread(statm_fd, buf, sizeof(buf) - 1, 0);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    if (sscanf(buf, "%lu %lu", &size, &rss) != 2)
        return 0;
    return (uint64_t)rss * (uint64_t)sysconf(_SC_PAGESIZE);
}

void fgx_wstats_end(struct fgx_wstats *st)
{
    struct fgx_dp_stats *s = st->out;

    if (s->nevents == 0) {
        free(s->events);
        s->events = NULL;
    }
    /* Each ring is in order; merged, the threads' events are put back in time order, since
     * controld numbers them as they come. */
    if (s->nevents > 1)
        qsort(s->events, s->nevents, sizeof(*s->events), event_cmp);
    s->rss_bytes = rss_bytes();
}

/* ---- ruleset publishing and the control loop ---- */

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};

    nanosleep(&ts, NULL);
}

/* Publish c (the caller's reference moves to *current), wake every thread and wait until all
 * use it. The old generation's reference is dropped only then: a thread that loaded the old
 * pointer may still be taking its own reference on it until it reports the new one. */
static int publish(const struct fgx_wctl *ctl, struct fgx_wcfg *c)
{
    struct fgx_wcfg *old = __atomic_exchange_n(ctl->current, c, __ATOMIC_ACQ_REL);
    unsigned i;
    int ret = 0;

    for (i = 0; i < ctl->nthreads; i++)
        ctl->wake(ctl->worker, i);
    for (i = 0; i < ctl->nthreads;) {
        if (__atomic_load_n(ctl->stop, __ATOMIC_ACQUIRE)) {
            ret = -ECANCELED;
            break;
        }
        if (ctl->uses(ctl->worker, i, c)) {
            i++;
            continue;
        }
        sleep_ms(1);
    }
    fgx_wcfg_unref(old);
    if (ret == 0)
        __atomic_store_n(&applied_generation, c->generation, __ATOMIC_RELEASE);
    return ret;
}

int fgx_wctl_apply(const struct fgx_wctl *ctl, const struct fgx_dp_ruleset *rs)
{
    struct fgx_wcfg *c = NULL;
    int ret;

    if (ctl->vet != NULL)
        ctl->vet(ctl->worker, rs);
    ret = fgx_wcfg_build(rs, __atomic_load_n(ctl->current, __ATOMIC_ACQUIRE), &c);
    if (ret != 0)
        return ret;
    if (ctl->tls_load != NULL) {
        ret = fgx_wcfg_tls(c, rs, __atomic_load_n(ctl->current, __ATOMIC_ACQUIRE), ctl->tls_load,
                           ctl->worker);
        if (ret != 0) {
            fgx_wcfg_unref(c);
            return ret;
        }
    }
    return publish(ctl, c);
}

static void on_ruleset(const struct fgx_wctl *ctl, const struct fgx_dp_ruleset *rs,
                       struct fgx_dp_msg *reply)
{
    char *err;
    int ret;

    ret = fgx_wctl_apply(ctl, rs);
    if (ret == 0) {
        fgx_info("generation %llu applied: %zu service(s)", (unsigned long long)rs->generation,
                 rs->nservices);
        reply->type = FGX_DP_ACK;
        reply->u.ack_generation = rs->generation;
        return;
    }
    reply->type = FGX_DP_ERROR;
    if (asprintf(&err, "generation %llu not applied: %s", (unsigned long long)rs->generation,
                 strerror(-ret)) == -1)
        err = NULL;
    reply->u.error = err;
}

static void on_heartbeat(const struct fgx_wctl *ctl, struct fgx_dp_msg *reply)
{
    struct fgx_dp_heartbeat *h = &reply->u.heartbeat;
    uint64_t now = fgx_wctl_now_ms();
    unsigned i;

    reply->type = FGX_DP_HEARTBEAT;
    h->pid = (uint32_t)getpid();
    h->worker_id = worker_id;
    h->generation = __atomic_load_n(&applied_generation, __ATOMIC_ACQUIRE);
    h->nthreads = 0;
    for (i = 0; ctl->alive != NULL && i < ctl->nthreads && i < FGX_DP_HB_THREADS_MAX; i++) {
        uint64_t t = ctl->alive(ctl->worker, i);

        h->stale_ms[h->nthreads++] = t == 0 || t >= now ? 0
                                     : now - t > UINT32_MAX ? UINT32_MAX
                                                            : (uint32_t)(now - t);
    }
}

/* Serialises the requests that are not heartbeats: each thread of fgx_wctl_run() may receive
 * any request, and a ruleset is applied by one at a time. */
static pthread_mutex_t serve_mtx = PTHREAD_MUTEX_INITIALIZER;

/* The encoded answer to one request (buf consumed); *out malloc'd, NULL when none can be
 * made (logged). */
static void answer(const struct fgx_wctl *ctl, void *buf, size_t len, void **out, size_t *outlen)
{
    struct fgx_dp_msg req = {0}, reply = {0};
    bool locked = false;
    int ret;

    *out = NULL;
    ret = fgx_dp_decode(buf, len, &req);
    free(buf);
    if (ret == 0 && req.type != FGX_DP_HEARTBEAT_REQUEST) {
        pthread_mutex_lock(&serve_mtx);
        locked = true;
    }
    if (ret == 0 && req.type == FGX_DP_HEARTBEAT_REQUEST) {
        on_heartbeat(ctl, &reply); /* never waits for the lock */
    } else if (ret != 0) {
        fgx_warn("control: undecodable message of %zu bytes", len);
        reply.type = FGX_DP_ERROR;
        reply.u.error = strdup("undecodable message");
    } else if (req.type == FGX_DP_RULESET) {
        on_ruleset(ctl, &req.u.ruleset, &reply);
    } else if (req.type == FGX_DP_STATS_REQUEST) {
        reply.type = FGX_DP_STATS;
        if (ctl->stats(ctl->worker, &reply.u.stats) != 0) {
            reply.type = FGX_DP_ERROR;
            reply.u.error = strdup("out of memory");
        } else {
            reply.u.stats.worker_id = worker_id;
        }
    } else if (req.type == FGX_DP_FLOWS_REQUEST && ctl->flows_export != NULL) {
        reply.type = FGX_DP_FLOWS;
        if (ctl->flows_export(ctl->worker, &reply.u.flows.data, &reply.u.flows.len) != 0) {
            reply.type = FGX_DP_ERROR;
            reply.u.error = strdup("cannot hand the flows over");
        }
    } else if (req.type == FGX_DP_CAPTURE_REQUEST) {
        reply.type = FGX_DP_CAPTURES;
        if (ctl->captures != NULL &&
            ctl->captures(ctl->worker, req.u.capture_service, &reply.u.captures.caps,
                          &reply.u.captures.n) != 0) {
            reply.type = FGX_DP_ERROR;
            reply.u.error = strdup("cannot collect the captures");
        }
    } else if (req.type == FGX_DP_FLOWS && ctl->flows_import != NULL) {
        reply.type = FGX_DP_ACK;
        reply.u.ack_generation = 0;
        if (ctl->flows_import(ctl->worker, req.u.flows.data, req.u.flows.len) != 0) {
            reply.type = FGX_DP_ERROR;
            reply.u.error = strdup("cannot take the flows over");
        }
    } else {
        reply.type = FGX_DP_ERROR;
        reply.u.error = strdup("unexpected message type");
    }
    if (locked)
        pthread_mutex_unlock(&serve_mtx);
    fgx_dp_msg_release(&req);
    ret = fgx_dp_encode(&reply, out, outlen);
    fgx_dp_msg_release(&reply);
    if (ret != 0) {
        fgx_err("control: cannot encode a reply: %s", strerror(-ret));
        *out = NULL;
    }
}

void fgx_wctl_serve(const struct fgx_wctl *ctl, struct fgx_chan *ch, void *buf, size_t len)
{
    void *out = NULL;
    size_t outlen = 0;
    int ret;

    answer(ctl, buf, len, &out, &outlen);
    if (out == NULL)
        return;
    ret = fgx_chan_send(ch, out, outlen, SEND_TIMEOUT_MS);
    if (ret != 0)
        fgx_warn("control: reply not sent: %s", strerror(-ret));
    free(out);
}

struct second {
    const struct fgx_wctl *ctl;
    struct fgx_chan_ctx *x;
};

/* The second receiver: the same service on a context of its own. */
static void *second_main(void *arg)
{
    struct second *sd = arg;

    while (!__atomic_load_n(sd->ctl->stop, __ATOMIC_ACQUIRE)) {
        void *buf = NULL, *out = NULL;
        size_t len = 0, outlen = 0;
        int ret = fgx_chan_ctx_recv(sd->x, &buf, &len, RECV_TIMEOUT_MS);

        if (ret == -ETIMEDOUT)
            continue;
        if (ret != 0) {
            sleep_ms(100);
            continue;
        }
        answer(sd->ctl, buf, len, &out, &outlen);
        if (out == NULL)
            continue;
        ret = fgx_chan_ctx_send(sd->x, out, outlen, SEND_TIMEOUT_MS);
        if (ret != 0)
            fgx_warn("control: reply not sent: %s", strerror(-ret));
        free(out);
    }
    return NULL;
}

int fgx_wctl_run(const struct fgx_wctl *ctl, const char *url)
{
    struct fgx_chan *ch = NULL;
    struct second sd = {.ctl = ctl};
    pthread_t tid;
    bool second = false;
    int ret;

    if (getrandom(&worker_id, sizeof(worker_id), 0) != sizeof(worker_id) || worker_id == 0)
        worker_id = ((uint64_t)getpid() << 32) ^ (uint64_t)time(NULL);
    ret = fgx_chan_dial(url, FGX_CHAN_REP, 0, &ch);
    if (ret != 0) {
        fgx_err("control: cannot dial %s: %s", url, strerror(-ret));
        return ret;
    }
    /* Without the second receiver the worker still works; its heartbeats then wait for a
     * ruleset being loaded. */
    if (fgx_chan_ctx_open(ch, &sd.x) == 0) {
        ret = pthread_create(&tid, NULL, second_main, &sd);
        second = ret == 0;
        if (ret != 0)
            fgx_warn("control: no second receiver: %s", strerror(ret));
    }
    /* Serve until told to stop. A vanished controld is only silence: the data path goes on
     * with the last ruleset and nng dials again in the background. */
    while (!__atomic_load_n(ctl->stop, __ATOMIC_ACQUIRE)) {
        void *buf = NULL;
        size_t len = 0;

        ret = fgx_chan_recv(ch, &buf, &len, RECV_TIMEOUT_MS);
        if (ret == -ETIMEDOUT)
            continue;
        if (ret != 0) {
            sleep_ms(100);
            continue;
        }
        fgx_wctl_serve(ctl, ch, buf, len);
    }
    if (second)
        pthread_join(tid, NULL);
    fgx_chan_ctx_close(sd.x);
    fgx_chan_close(ch);
    return 0;
}

/* ---- the worker process ---- */

int fgx_wctl_parse_uint(const char *s, unsigned min, unsigned max, unsigned *out)
{
    char *end;
    unsigned long v;

    errno = 0;
    v = strtoul(s, &end, 10);
    if (errno != 0 || *s == '\0' || *end != '\0' || v < min || v > max)
        return -EINVAL;
    *out = (unsigned)v;
    return 0;
}

static int *signal_stop;

static void on_signal(int sig)
{
    (void)sig;
    __atomic_store_n(signal_stop, 1, __ATOMIC_RELEASE);
}

void fgx_wctl_signals(int *stop)
{
    struct sigaction sa;

    signal_stop = stop;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sa.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &sa, NULL);
}
