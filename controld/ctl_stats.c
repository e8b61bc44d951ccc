/* controld statistics stage: a worker reports counters cumulative since it started, so each
 * total here is what earlier processes contributed plus the growth seen from the current one;
 * a new process (a new supervisor instance) restarts the "last seen" values at zero. Totals go
 * to LMDB every CTL_STATS_FLUSH_MS (bounded write rate) and on exit; events are written in the
 * same loop turn they arrive, before any request can see their seq, so a seq is never reused. */
#include "controld/ctl_stats.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "controld/ctl_game.h"
#include "controld/ctl_health.h"
#include "controld/ctl_rates.h"
#include "fgx/log.h"
#include <time.h>

static const char key_event_seq[] = "event_seq";
static const char key_queue_drops[] = "nfq_queue_drops";
static const char key_events_lost[] = "nfq_events_lost";
/* Each worker's own cumulative counts as of the totals last written (issue 24), with its
 * worker id: a controld that adopts that very process after a restart goes on from them, so
 * the totals neither fall back nor count anything twice. */
static const char *const key_bases[] = {"worker_bases_nfq", "worker_bases_px"};
#define BASES_MAGIC 0x42584746u /* "FGXB" */

struct bases_head {
    uint32_t magic, nsvc, nflt, pad;
    uint64_t worker_id, queue_drops_last;
};

struct bases_svc {
    uint32_t id, pad;
    struct ctl_svc_totals last;
    uint64_t lost, tls, c2s, s2c, flows;
};

struct bases_flt {
    uint32_t id, pad;
    uint64_t last, mlast;
};

/* The two workers count apart, each since its own process started: [W_NFQ] and [W_PX]. */
enum { W_NFQ, W_PX, W_KINDS };

struct svc_slot {
    uint32_t id;
    struct ctl_svc_totals total, last[W_KINDS];
    uint64_t flows_active[W_KINDS];
    uint64_t events_lost, lost_last[W_KINDS];
    uint64_t tls_failed, tls_last[W_KINDS]; /* since controld started, not persisted */
    /* its own --max-conns reached (issue 27): persisted, with the first and last time */
    uint64_t limit_hits, limit_hlast[W_KINDS], limit_first, limit_last;
    uint64_t flags_out, flags_to_checker;   /* the same */
    /* the traffic history's bases (ctl_rates.h): bytes each way, connections seen */
    uint64_t c2s_last[W_KINDS], s2c_last[W_KINDS], flows_last[W_KINDS];
};

struct flt_slot {
    uint32_t id;
    uint32_t service_id; /* 0 until known (from the store) */
    uint64_t blocked, last[W_KINDS];
    uint64_t matched, mlast[W_KINDS]; /* a log filter's matches, folded the same way */
};

struct ctl_stats {
    struct svc_slot *svc;
    size_t nsvc, capsvc;
    struct flt_slot *flt;
    size_t nflt, capflt;
    bool have_instance[W_KINDS];
    uint64_t instance[W_KINDS];
    struct ctl_worker_counters worker;
    struct ctl_worker_counters px_worker;
    uint64_t queue_drops_last;
    struct ctl_event *ring; /* keep slots; ring[head] is the oldest */
    size_t keep, head, count;
    size_t unpruned; /* events written to LMDB since the last prune */
    bool burst;      /* a report brought CTL_EVENTS_BURST events or more */
    unsigned long long lost_log_ns;
    struct fgx_cidr checker[CTL_GAME_ADDRS_MAX]; /* the game's (ctl_stats_game_set()) */
    struct ctl_game_finder *finder;              /* its flags in excerpts, or NULL */
    size_t nchecker;
    size_t unsaved; /* the newest `unsaved` events are not in LMDB yet */
    uint64_t next_seq;
    bool dirty;
    /* A worker process was replaced: what the gone one counted since the last flush is in
     * memory only (no process holds it to be adopted), so the next flush is due at once. */
    bool flush_now;
    uint64_t flushed_ms;
    /* The last flush failed (a full disk, say): the next tries wait CTL_STATS_FLUSH_MS each,
     * events included, and the warning is given once, not per try. */
    bool failing;
    uint64_t failed_ms;
    struct ctl_rates_pending rates; /* per-minute growth not yet in LMDB (ctl_rates.h) */
    uint32_t pruned_minute;         /* when old rate series were last pruned */
    /* Blocked connections' captures that came with their events, not in LMDB yet (at most
     * caps_keep: the oldest go first if the store cannot keep up). */
    struct ctl_cap_pending *caps;
    size_t ncaps;
    size_t caps_keep;
    /* the stored bases of each kind (key_bases), until the first report of a process; NULL:
     * none */
    void *bases[W_KINDS];
    size_t bases_len[W_KINDS];
};

struct ctl_cap_pending {
    uint64_t seq;
    void *data;
    size_t len;
};

static void caps_push(struct ctl_stats *s, uint64_t seq, const void *data, size_t len)
{
    struct ctl_cap_pending *p;
    void *copy;

    if (s->caps_keep == 0)
        return;
    copy = malloc(len ? len : 1);
    if (copy == NULL)
        return;
    memcpy(copy, data, len);
    if (s->ncaps == s->caps_keep) {
        free(s->caps[0].data);
        memmove(s->caps, s->caps + 1, (s->ncaps - 1) * sizeof(*s->caps));
        s->ncaps--;
    }
    if (s->caps == NULL) {
        s->caps = calloc(s->caps_keep, sizeof(*s->caps));
        if (s->caps == NULL) {
            free(copy);
            return;
        }
    }
    p = &s->caps[s->ncaps++];
    p->seq = seq;
    p->data = copy;
    p->len = len;
}

void ctl_stats_captures_keep(struct ctl_stats *s, size_t keep)
{
    s->caps_keep = keep;
}

static struct svc_slot *svc_slot(struct ctl_stats *s, uint32_t id, bool create)
{
    for (size_t i = 0; i < s->nsvc; i++)
        if (s->svc[i].id == id)
            return &s->svc[i];
    if (!create)
        return NULL;
    if (s->nsvc == s->capsvc) {
        size_t ncap = s->capsvc ? s->capsvc * 2 : 16;
        struct svc_slot *n = realloc(s->svc, ncap * sizeof(*n));
        if (!n)
            return NULL;
        s->svc = n;
        s->capsvc = ncap;
    }
    s->svc[s->nsvc] = (struct svc_slot){.id = id};
    return &s->svc[s->nsvc++];
}

static struct flt_slot *flt_slot(struct ctl_stats *s, uint32_t id, bool create)
{
    for (size_t i = 0; i < s->nflt; i++)
        if (s->flt[i].id == id)
            return &s->flt[i];
    if (!create)
        return NULL;
    if (s->nflt == s->capflt) {
        size_t ncap = s->capflt ? s->capflt * 2 : 32;
        struct flt_slot *n = realloc(s->flt, ncap * sizeof(*n));
        if (!n)
            return NULL;
        s->flt = n;
        s->capflt = ncap;
    }
    s->flt[s->nflt] = (struct flt_slot){.id = id};
    return &s->flt[s->nflt++];
}

/* Growth of a cumulative counter; one that went backwards was reset, so all of it is new. */
static uint64_t grow(uint64_t *last, uint64_t cur)
{
    uint64_t d = cur >= *last ? cur - *last : cur;

    *last = cur;
    return d;
}

static void ring_push(struct ctl_stats *s, const struct ctl_event *e)
{
    if (s->count < s->keep) {
        s->ring[(s->head + s->count) % s->keep] = *e;
        s->count++;
    } else {
        s->ring[s->head] = *e;
        s->head = (s->head + 1) % s->keep;
    }
    if (s->unsaved < s->keep)
        s->unsaved++;
}

/* i = 0 is the oldest kept event. */
static const struct ctl_event *ring_at(const struct ctl_stats *s, size_t i)
{
    return &s->ring[(s->head + i) % s->keep];
}

/* The meta key of a service's lost events total. */
static void lost_key(char *buf, size_t size, uint32_t service_id)
{
    (void)snprintf(buf, size, "svc_events_lost:%u", (unsigned)service_id);
}

/* The three persisted numbers of a service's own connection limit (issue 27). */
static void limit_key(char *buf, size_t size, const char *what, uint32_t service_id)
{
    (void)snprintf(buf, size, "svc_limit_%s:%u", what, (unsigned)service_id);
}

static int limit_load(struct ctl_txn *t, struct svc_slot *v)
{
    char key[48];
    int rv;

    limit_key(key, sizeof(key), "hits", v->id);
    rv = ctl_store_u64_get(t, key, &v->limit_hits);
    limit_key(key, sizeof(key), "first", v->id);
    if (rv == 0)
        rv = ctl_store_u64_get(t, key, &v->limit_first);
    limit_key(key, sizeof(key), "last", v->id);
    if (rv == 0)
        rv = ctl_store_u64_get(t, key, &v->limit_last);
    return rv;
}

static int limit_save(struct ctl_txn *t, const struct svc_slot *v)
{
    char key[48];
    int rv;

    limit_key(key, sizeof(key), "hits", v->id);
    rv = ctl_store_u64_put(t, key, v->limit_hits);
    limit_key(key, sizeof(key), "first", v->id);
    if (rv == 0)
        rv = ctl_store_u64_put(t, key, v->limit_first);
    limit_key(key, sizeof(key), "last", v->id);
    if (rv == 0)
        rv = ctl_store_u64_put(t, key, v->limit_last);
    return rv;
}

static int stats_load(struct ctl_stats *s, struct ctl_store *st)
{
    struct ctl_service *svcs = NULL;
    struct ctl_filter *flts = NULL;
    struct ctl_event *evs = NULL;
    size_t nsvcs = 0, nflts = 0, nevs = 0;
    struct ctl_txn *t;
    int rv;

    rv = ctl_txn_begin(st, false, &t);
    if (rv < 0)
        return rv;
    rv = ctl_store_service_list(t, &svcs, &nsvcs);
    if (rv == 0)
        rv = ctl_store_filter_list(t, 0, &flts, &nflts);
    for (size_t i = 0; rv == 0 && i < nsvcs; i++) {
        struct svc_slot *v = svc_slot(s, svcs[i].id, true);
        char key[40];

        rv = v ? ctl_store_svc_totals_get(t, svcs[i].id, &v->total) : -ENOMEM;
        lost_key(key, sizeof(key), svcs[i].id);
        if (rv == 0)
            rv = ctl_store_u64_get(t, key, &v->events_lost);
        if (rv == 0)
            rv = limit_load(t, v);
    }
    for (size_t i = 0; rv == 0 && i < nflts; i++) {
        struct flt_slot *f = flt_slot(s, flts[i].id, true);
        rv = f ? ctl_store_blocked_get(t, flts[i].id, &f->blocked) : -ENOMEM;
        if (f)
            f->service_id = flts[i].service_id;
        if (rv == 0)
            rv = ctl_store_matched_get(t, flts[i].id, &f->matched);
    }
    if (rv == 0)
        rv = ctl_store_u64_get(t, key_event_seq, &s->next_seq);
    if (rv == 0)
        rv = ctl_store_u64_get(t, key_queue_drops, &s->worker.queue_drops_total);
    if (rv == 0)
        rv = ctl_store_u64_get(t, key_events_lost, &s->worker.events_lost_total);
    for (int k = 0; rv == 0 && k < W_KINDS; k++)
        rv = ctl_store_bytes_get(t, key_bases[k], &s->bases[k], &s->bases_len[k]);
    if (rv == 0)
        rv = ctl_store_event_list(t, s->keep, &evs, &nevs);
    ctl_txn_abort(t);
    if (rv < 0)
        goto out;
    if (s->next_seq == 0)
        s->next_seq = 1;
    for (size_t i = 0; i < nevs; i++) {
        ring_push(s, &evs[i]);
        if (evs[i].seq >= s->next_seq) /* a seq written without its counter: never reuse it */
            s->next_seq = evs[i].seq + 1;
    }
    s->unsaved = 0;
    /* More than keep may be stored (a larger --events-keep before, or a prune pending): the
     * next write prunes them. */
    s->unpruned = s->keep;
out:
    free(evs);
    ctl_filters_free(flts, nflts);
    free(svcs);
    return rv;
}

int ctl_stats_open(struct ctl_store *st, struct ctl_stats **out)
{
    return ctl_stats_open_keep(st, CTL_EVENTS_KEEP, out);
}

int ctl_stats_open_keep(struct ctl_store *st, size_t keep, struct ctl_stats **out)
{
    struct ctl_stats *s = calloc(1, sizeof(*s));
    int rv = -ENOMEM;

    if (keep < 1 || keep > CTL_EVENTS_KEEP_MAX) {
        free(s);
        return -EINVAL;
    }
    if (!s)
        goto err;
    s->keep = keep;
    s->caps_keep = CTL_CAPTURES_KEEP;
    s->ring = calloc(keep, sizeof(*s->ring));
    if (!s->ring)
        goto err;
    rv = stats_load(s, st);
    if (rv < 0)
        goto err;
    *out = s;
    return 0;
err:
    fgx_err("cannot load the statistics: %s", ctl_store_strerror(rv));
    ctl_stats_free(s);
    return rv;
}

void ctl_stats_free(struct ctl_stats *s)
{
    if (!s)
        return;
    free(s->svc);
    ctl_game_finder_free(s->finder);
    for (size_t i = 0; i < s->ncaps; i++)
        free(s->caps[i].data);
    free(s->caps);
    free(s->flt);
    free(s->ring);
    for (int k = 0; k < W_KINDS; k++)
        free(s->bases[k]);
    ctl_rates_pending_release(&s->rates);
    free(s);
}

static void event_from_dp(const struct fgx_dp_event *d, uint64_t seq,
                          const struct ctl_service *svcs, size_t nsvcs, struct ctl_event *e)
{
    int af = d->family == 6 ? AF_INET6 : AF_INET;

    memset(e, 0, sizeof(*e));
    e->seq = seq;
    e->time_ns = d->time_ns;
    e->service_id = d->service_id;
    e->filter_id = d->filter_id;
    for (size_t i = 0; i < nsvcs; i++) {
        if (svcs[i].id == d->service_id) {
            (void)snprintf(e->service, sizeof(e->service), "%s", svcs[i].name);
            break;
        }
    }
    e->dir = d->dir;
    e->ipproto = d->ipproto;
    /* A worker names the sender of the matching bytes; an event names the connection's client
     * (the attacker, whichever way the bytes went) as src and the service as dst, so that --top
     * src and a pcap asked by src find the attacker, never the vulnbox. fgx_dp_decode() checked
     * the family; inet_ntop() cannot fail on these buffers. */
    {
        bool s2c = d->dir == FGX_DIR_S2C;

        inet_ntop(af, s2c ? d->dst : d->src, e->src, sizeof(e->src));
        inet_ntop(af, s2c ? d->src : d->dst, e->dst, sizeof(e->dst));
        e->sport = s2c ? d->dport : d->sport;
        e->dport = s2c ? d->sport : d->dport;
    }
    e->excerpt_len = d->excerpt_len <= FGX_DP_EXCERPT_MAX ? d->excerpt_len : FGX_DP_EXCERPT_MAX;
    e->match_end = d->match_end <= e->excerpt_len ? d->match_end : e->excerpt_len;
    memcpy(e->excerpt, d->excerpt, e->excerpt_len);
    e->log = d->log;
    e->h2_stream = d->h2_stream;
    e->edge = d->edge;
    if (d->script_verdict != 0) {
        /* a script's block: the verdict as its kind, the function where a filter's id would be */
        (void)snprintf(e->script_kind, sizeof(e->script_kind), "%s",
                       d->script_verdict == FGX_DP_SCRIPT_DROP ? "drop" : "reject");
        (void)snprintf(e->script_fn, sizeof(e->script_fn), "%s", d->script_fn);
    }
}

void ctl_stats_game_set(struct ctl_stats *s, const struct ctl_game *g)
{
    s->nchecker = ctl_game_is_set(g) ? g->nchecker : 0;
    memcpy(s->checker, g->checker, s->nchecker * sizeof(s->checker[0]));
    ctl_game_finder_free(s->finder);
    s->finder = NULL;
    (void)ctl_game_finder_new(g, &s->finder); /* a failure is said there; no hash then */
}

/* A flag of the game's format left a service (the s2c match of CTL_GAME_FLAG_ID): counted per
 * connection (SINGLEMATCH reports it once per stream). True when it went to the checker. */
static bool flag_read(struct ctl_stats *s, const struct fgx_dp_event *d)
{
    struct svc_slot *v = svc_slot(s, d->service_id, true);
    /* the matching bytes' receiver is the client: the worker's dst of an s2c match */
    const uint8_t *peer = d->dir == FGX_DIR_S2C ? d->dst : d->src;
    bool checker = false;

    for (size_t i = 0; i < s->nchecker && !checker; i++)
        checker = fgx_cidr_contains(&s->checker[i], d->family == 6 ? 6 : 4, peer);
    if (v) {
        if (checker)
            v->flags_to_checker++;
        else
            v->flags_out++;
    }
    return checker;
}

/* A new process of kind k reports: when it is the one whose bases were stored (an adopted
 * worker), its counts so far go on from them; otherwise it counts from zero. The stored bases
 * are used once. */
static void bases_apply(struct ctl_stats *s, int k, uint64_t instance)
{
    const struct bases_head *h = s->bases[k];
    const struct bases_svc *bs;
    const struct bases_flt *bf;

    if (h == NULL || s->bases_len[k] < sizeof(*h) || h->magic != BASES_MAGIC ||
        h->worker_id != instance ||
        s->bases_len[k] != sizeof(*h) + h->nsvc * sizeof(*bs) + h->nflt * sizeof(*bf))
        goto out;
    bs = (const void *)(h + 1);
    bf = (const void *)(bs + h->nsvc);
    for (uint32_t i = 0; i < h->nsvc; i++) {
        struct svc_slot *v = svc_slot(s, bs[i].id, true);

        if (!v)
            continue;
        v->last[k] = bs[i].last;
        v->lost_last[k] = bs[i].lost;
        v->tls_last[k] = bs[i].tls;
        v->c2s_last[k] = bs[i].c2s;
        v->s2c_last[k] = bs[i].s2c;
        v->flows_last[k] = bs[i].flows;
    }
    for (uint32_t i = 0; i < h->nflt; i++) {
        struct flt_slot *f = flt_slot(s, bf[i].id, true);

        if (!f)
            continue;
        f->last[k] = bf[i].last;
        f->mlast[k] = bf[i].mlast;
    }
    if (k == W_NFQ)
        s->queue_drops_last = h->queue_drops_last;
out:
    free(s->bases[k]);
    s->bases[k] = NULL;
    s->bases_len[k] = 0;
}

/* The bases of kind k as they are now, beside the totals written in the same transaction. */
static int bases_put(struct ctl_stats *s, struct ctl_txn *t, int k)
{
    size_t len = sizeof(struct bases_head) + s->nsvc * sizeof(struct bases_svc) +
                 s->nflt * sizeof(struct bases_flt);
    struct bases_head *h;
    struct bases_svc *bs;
    struct bases_flt *bf;
    int rv;

    if (!s->have_instance[k])
        return 0;
    h = calloc(1, len);
    if (!h)
        return -ENOMEM;
    *h = (struct bases_head){.magic = BASES_MAGIC,
                             .nsvc = (uint32_t)s->nsvc,
                             .nflt = (uint32_t)s->nflt,
                             .worker_id = s->instance[k],
                             .queue_drops_last = k == W_NFQ ? s->queue_drops_last : 0};
    bs = (void *)(h + 1);
    bf = (void *)(bs + s->nsvc);
    for (size_t i = 0; i < s->nsvc; i++)
        bs[i] = (struct bases_svc){.id = s->svc[i].id,
                                   .last = s->svc[i].last[k],
                                   .lost = s->svc[i].lost_last[k],
                                   .tls = s->svc[i].tls_last[k],
                                   .c2s = s->svc[i].c2s_last[k],
                                   .s2c = s->svc[i].s2c_last[k],
                                   .flows = s->svc[i].flows_last[k]};
    for (size_t i = 0; i < s->nflt; i++)
        bf[i] = (struct bases_flt){
            .id = s->flt[i].id, .last = s->flt[i].last[k], .mlast = s->flt[i].mlast[k]};
    rv = ctl_store_bytes_put(t, key_bases[k], h, len);
    free(h);
    return rv;
}

/* Fold what one worker reported (cumulative since its process `instance` started) into the
 * totals, and number its events. Returns 0 or -ENOMEM (what was folded stays). */
static int fold(struct ctl_stats *s, int k, uint64_t instance, const struct fgx_dp_stats *m,
                const struct ctl_service *svcs, size_t nsvcs)
{
    uint32_t minute = (uint32_t)(time(NULL) / 60);
    uint64_t lost, d;
    int rv = 0;

    if (!s->have_instance[k] || instance != s->instance[k]) {
        /* A new process counts from zero; what the old one reported is in the totals, and
         * only there until they are written: should controld die before its next flush, the
         * adopted new process could not give it back (soak, issue 25: blocked went down). */
        if (s->have_instance[k])
            s->flush_now = true;
        for (size_t i = 0; i < s->nsvc; i++) {
            memset(&s->svc[i].last[k], 0, sizeof(s->svc[i].last[k]));
            s->svc[i].lost_last[k] = 0;
            s->svc[i].tls_last[k] = 0;
            s->svc[i].c2s_last[k] = s->svc[i].s2c_last[k] = s->svc[i].flows_last[k] = 0;
        }
        for (size_t i = 0; i < s->nflt; i++)
            s->flt[i].last[k] = s->flt[i].mlast[k] = 0;
        if (k == W_NFQ)
            s->queue_drops_last = 0;
        s->have_instance[k] = true;
        s->instance[k] = instance;
        bases_apply(s, k, instance);
    }
    for (size_t i = 0; i < s->nsvc; i++)
        s->svc[i].flows_active[k] = 0; /* a service the worker no longer reports has no flow */
    for (size_t i = 0; i < m->nservices; i++) {
        const struct fgx_dp_service_stat *c = &m->services[i];
        struct svc_slot *v = svc_slot(s, c->service_id, true);

        if (!v) {
            rv = -ENOMEM;
            continue;
        }
        v->total.packets += grow(&v->last[k].packets, c->packets);
        v->total.bytes += grow(&v->last[k].bytes, c->bytes);
        v->total.accepted += grow(&v->last[k].accepted, c->accepted);
        v->total.dropped += grow(&v->last[k].dropped, c->dropped);
        v->flows_active[k] = c->flows_active;
        v->tls_failed += grow(&v->tls_last[k], c->tls_failed);
        d = grow(&v->limit_hlast[k], c->limit_hits);
        if (d > 0) {
            uint64_t now = (uint64_t)time(NULL);

            v->limit_hits += d;
            if (v->limit_first == 0)
                v->limit_first = now;
            v->limit_last = now;
        }
        /* Traffic over time, per minute (ctl_rates.h): three entries a service a minute. */
        d = grow(&v->c2s_last[k], c->bytes_c2s);
        if (d > 0 && ctl_rates_note_service(&s->rates, CTL_RATE_BYTES_C2S, v->id, minute, d) < 0)
            rv = -ENOMEM;
        d = grow(&v->s2c_last[k], c->bytes_s2c);
        if (d > 0 && ctl_rates_note_service(&s->rates, CTL_RATE_BYTES_S2C, v->id, minute, d) < 0)
            rv = -ENOMEM;
        d = grow(&v->flows_last[k], c->flows_new);
        if (d > 0 && ctl_rates_note_service(&s->rates, CTL_RATE_FLOWS, v->id, minute, d) < 0)
            rv = -ENOMEM;
        lost = grow(&v->lost_last[k], c->events_lost);
        if (lost > 0) {
            v->events_lost += lost;
            /* Never silent, but one line per minute at most, not one per report. */
            fgx_log_ratelimited(&s->lost_log_ns, FGX_LOG_WARN,
                                "events lost: %llu block(s) of service %u had no event recorded "
                                "(a worker's event queue was full); counted in fgexctl stats",
                                (unsigned long long)lost, (unsigned)c->service_id);
        }
        s->dirty = true;
    }
    for (size_t i = 0; i < m->nfilters; i++) {
        const struct fgx_dp_filter_stat *c = &m->filters[i];
        struct flt_slot *f = flt_slot(s, c->filter_id, true);

        if (!f) {
            rv = -ENOMEM;
            continue;
        }
        d = grow(&f->last[k], c->blocked);
        f->blocked += d;
        /* Hit rates over time: blocks, and a log filter's matches. */
        if (d > 0 && ctl_rates_note(&s->rates, CTL_RATE_BLOCKED, f->id, f->service_id, minute,
                                    d) < 0)
            rv = -ENOMEM;
        d = grow(&f->mlast[k], c->matched);
        f->matched += d;
        if (d > 0 && ctl_rates_note(&s->rates, CTL_RATE_MATCHED, f->id, f->service_id, minute,
                                    d) < 0)
            rv = -ENOMEM;
        s->dirty = true;
    }
    s->worker.events_lost_total += m->events_lost; /* per report, not cumulative */
    if (m->nevents >= CTL_EVENTS_BURST)
        s->burst = true;
    for (size_t i = 0; i < m->nevents; i++) {
        struct ctl_event e;

        if (m->events[i].filter_id == CTL_GAME_FLAG_ID && m->events[i].log &&
            flag_read(s, &m->events[i]))
            continue; /* the checker's read: counted, no event */
        event_from_dp(&m->events[i], s->next_seq++, svcs, nsvcs, &e);
        if (e.filter_id == CTL_GAME_FLAG_ID) {
            size_t flen = 0;

            if (ctl_game_finder_hash(s->finder, e.excerpt, e.match_end, e.flag_sha256, &flen) <
                0)
                e.flag_sha256[0] = '\0';
            else if (m->events[i].stream_end >= flen)
                e.flag_offset = m->events[i].stream_end - flen;
        }
        ring_push(s, &e);
        if (m->events[i].capture != NULL)
            caps_push(s, e.seq, m->events[i].capture, m->events[i].capture_len);
    }
    if (rv < 0)
        fgx_err("statistics: out of memory; some counters were not kept");
    return rv;
}

/* The limits hit and the traffic let through unscanned, in the health log (the box's: the
 * workers count them for all their services), one entry per kind every few seconds at most.
 * Each counter has the same name in the worker's report and in its ctl_worker_counters. */
struct health_ctr {
    const char *kind;
    enum ctl_health_level level;
    const char *what; /* after the count: "16 <what> in the last 5 s" */
    size_t report, kept; /* offsets in struct fgx_dp_stats and struct ctl_worker_counters */
};

#define HEALTH_CTR(field, kind, level, what)                                                     \
    {kind, level, what, offsetof(struct fgx_dp_stats, field),                                    \
     offsetof(struct ctl_worker_counters, field)}

static const struct health_ctr health_nfq_ctrs[] = {
    HEALTH_CTR(queue_drops, "queue-full", CTL_HEALTH_WARN,
               "packets dropped at the nfq worker's full queues"),
    HEALTH_CTR(flows_evicted, "flow-table-full", CTL_HEALTH_WARN,
               "flows pushed out of the nfq worker's full flow table (--nfq-flows), met as "
               "midstream when they next send"),
    HEALTH_CTR(midstream_resets, "midstream", CTL_HEALTH_WARN,
               "connections picked up midstream (their start unseen) reset"),
    HEALTH_CTR(script_errors, "script-error", CTL_HEALTH_WARN,
               "script calls failed: the service's fail_open choice was their verdict"),
    HEALTH_CTR(script_timeouts, "script-late", CTL_HEALTH_WARN,
               "script calls past their deadline: the service's fail_open choice was their "
               "verdict"),
    HEALTH_CTR(script_reclaimed, "script-flows-full", CTL_HEALTH_WARN,
               "scripted flows given up for room (--nfq-script-flows): the service's fail_open "
               "choice was their verdict"),
    HEALTH_CTR(script_refused, "script-full", CTL_HEALTH_WARN,
               "segments of scripted flows dropped: no room to wait for the script"),
};

static const struct health_ctr health_px_ctrs[] = {
    HEALTH_CTR(conns_refused, "limit-conns", CTL_HEALTH_WARN,
               "connections refused at the proxy's connection limit (--proxy-max-conns)"),
    HEALTH_CTR(src_refused, "limit-per-src", CTL_HEALTH_WARN,
               "connections refused: their source had its limit open "
               "(--proxy-max-conns-per-src)"),
    HEALTH_CTR(evicted, "limit-evicted", CTL_HEALTH_WARN,
               "idle connections closed to make room at the proxy's connection limits"),
    HEALTH_CTR(midstream_reset, "midstream", CTL_HEALTH_WARN,
               "connections relayed unscanned while their service was away, then reset"),
    HEALTH_CTR(midstream_rescan, "midstream-unscanned", CTL_HEALTH_ERROR,
               "connections passed unfiltered while their service was away (midstream), "
               "scanned from then on"),
};

/* Before w takes m's numbers: what rose since the last report (all of it from a new
 * process) goes to the health log. */
static void health_rises(const struct health_ctr *c, size_t n,
                         const struct ctl_worker_counters *w, uint64_t instance,
                         const struct fgx_dp_stats *m)
{
    uint64_t now = ctl_health_mono_ms();

    for (size_t i = 0; i < n; i++) {
        uint64_t cur, was;

        memcpy(&cur, (const char *)m + c[i].report, sizeof(cur));
        memcpy(&was, (const char *)w + c[i].kept, sizeof(was));
        if (w->valid && w->instance == instance && cur >= was)
            cur -= was;
        ctl_health_count(0, c[i].level, c[i].kind, c[i].what, cur, now);
    }
}

int ctl_stats_ingest(struct ctl_stats *s, uint64_t instance, const struct fgx_dp_stats *m,
                     const struct ctl_service *svcs, size_t nsvcs)
{
    struct ctl_worker_counters *w = &s->worker;
    int rv = fold(s, W_NFQ, instance, m, svcs, nsvcs);

    health_rises(health_nfq_ctrs, sizeof(health_nfq_ctrs) / sizeof(health_nfq_ctrs[0]), w,
                 instance, m);

    w->valid = true;
    w->instance = instance;
    w->queue_drops = m->queue_drops;
    w->flows = m->flows;
    w->rss_bytes = m->rss_bytes;
    w->truncated = m->truncated;
    w->verdict_errors = m->verdict_errors;
    w->malformed = m->malformed;
    w->evasion = m->evasion;
    w->midstream_resets = m->midstream_resets;
    w->flows_evicted = m->flows_evicted;
    w->script_refused = m->script_refused;
    w->script_errors = m->script_errors;
    w->script_timeouts = m->script_timeouts;
    w->script_blocked = m->script_blocked;
    w->script_final = m->script_final;
    w->script_held = m->script_held;
    w->script_flows = m->script_flows;
    w->script_reclaimed = m->script_reclaimed;
    w->queue_drops_total += grow(&s->queue_drops_last, m->queue_drops);
    return rv;
}

int ctl_stats_ingest_proxy(struct ctl_stats *s, uint64_t instance, const struct fgx_dp_stats *m,
                           const struct ctl_service *svcs, size_t nsvcs)
{
    struct ctl_worker_counters *w = &s->px_worker;
    int rv = fold(s, W_PX, instance, m, svcs, nsvcs);

    health_rises(health_px_ctrs, sizeof(health_px_ctrs) / sizeof(health_px_ctrs[0]), w,
                 instance, m);

    w->valid = true;
    w->instance = instance;
    w->flows = m->flows;
    w->rss_bytes = m->rss_bytes;
    w->conns_refused = m->conns_refused;
    w->unclassified = m->unclassified;
    w->connect_failed = m->connect_failed;
    w->scan_errors = m->scan_errors;
    w->src_refused = m->src_refused;
    w->evicted = m->evicted;
    w->silent_closed = m->silent_closed;
    w->midstream_reset = m->midstream_reset;
    w->midstream_rescan = m->midstream_rescan;
    return rv;
}

void ctl_stats_event_script(struct ctl_stats *s, uint64_t time_ns,
                            const struct fgx_dp_script_log *le, const char *service)
{
    struct ctl_event e;

    memset(&e, 0, sizeof(e));
    e.seq = s->next_seq++;
    e.time_ns = time_ns;
    e.service_id = le->service_id;
    (void)snprintf(e.service, sizeof(e.service), "%s", service ? service : "");
    e.dir = FGX_DIR_C2S;
    e.ipproto = IPPROTO_TCP;
    if ((le->family == 4 || le->family == 6) &&
        inet_ntop(le->family == 4 ? AF_INET : AF_INET6, le->caddr, e.src, sizeof(e.src)) &&
        inet_ntop(le->family == 4 ? AF_INET : AF_INET6, le->saddr, e.dst, sizeof(e.dst))) {
        e.sport = le->cport;
        e.dport = le->sport;
    } else {
        e.src[0] = e.dst[0] = '\0';
    }
    (void)snprintf(e.script_kind, sizeof(e.script_kind), "%s", le->kind ? le->kind : "");
    (void)snprintf(e.script_fn, sizeof(e.script_fn), "%s", le->function ? le->function : "");
    ring_push(s, &e);
}

void ctl_stats_worker_down(struct ctl_stats *s)
{
    for (size_t i = 0; i < s->nsvc; i++)
        s->svc[i].flows_active[W_NFQ] = 0;
    s->worker.valid = false;
    s->worker.queue_drops = s->worker.flows = s->worker.rss_bytes = 0;
    s->worker.truncated = s->worker.verdict_errors = s->worker.malformed = 0;
    s->worker.evasion = 0;
    s->worker.midstream_resets = s->worker.flows_evicted = 0;
    s->worker.script_refused = s->worker.script_errors = s->worker.script_timeouts = 0;
    s->worker.script_blocked = s->worker.script_final = s->worker.script_held = 0;
    s->worker.script_flows = s->worker.script_reclaimed = 0;
}

void ctl_stats_px_worker_down(struct ctl_stats *s)
{
    for (size_t i = 0; i < s->nsvc; i++)
        s->svc[i].flows_active[W_PX] = 0;
    s->px_worker.valid = false;
    s->px_worker.flows = s->px_worker.rss_bytes = 0;
    s->px_worker.conns_refused = s->px_worker.unclassified = 0;
    s->px_worker.connect_failed = s->px_worker.scan_errors = 0;
    s->px_worker.src_refused = s->px_worker.evicted = s->px_worker.silent_closed = 0;
    s->px_worker.midstream_reset = s->px_worker.midstream_rescan = 0;
}

static int flush_events(struct ctl_stats *s, struct ctl_txn *t)
{
    int rv = 0;

    size_t batch = s->keep / CTL_EVENTS_PRUNE_DIV;

    /* All of them in the caller's one transaction. */
    for (size_t i = s->count - s->unsaved; rv == 0 && i < s->count; i++)
        rv = ctl_store_event_put(t, ring_at(s, i));
    if (rv == 0 && s->unpruned + s->unsaved > batch)
        rv = ctl_store_event_trim(t, s->keep);
    if (rv == 0)
        rv = ctl_store_u64_put(t, key_event_seq, s->next_seq);
    return rv;
}

void ctl_stats_counters_reset(struct ctl_stats *s)
{
    /* `last` stays: it is the worker's own cumulative count, the base for the next growth. */
    for (size_t i = 0; i < s->nsvc; i++)
        s->svc[i].total = (struct ctl_svc_totals){0};
    for (size_t i = 0; i < s->nflt; i++)
        s->flt[i].blocked = s->flt[i].matched = 0;
    s->dirty = true;
}

/* A removed filter's service, as last known: its blocks still count in that service's rate. */
static uint32_t slot_service(void *arg, uint32_t filter_id)
{
    struct ctl_stats *s = arg;
    struct flt_slot *f = flt_slot(s, filter_id, false);

    return f ? f->service_id : 0;
}

/* Pending per-minute growth into LMDB; old series pruned once an hour, not at every flush.
 * The traffic of the current minute waits for its end, unless force. */
static int flush_rates(struct ctl_stats *s, struct ctl_txn *t, bool force)
{
    uint32_t now = (uint32_t)(time(NULL) / 60);
    int rv = 0;

    if (s->rates.n > 0)
        rv = ctl_rates_flush(&s->rates, t, now, force, slot_service, s);
    if (rv == 0 && now - s->pruned_minute >= 60) {
        rv = ctl_rates_prune(t, now);
        if (rv == 0)
            s->pruned_minute = now;
    }
    return rv;
}

/* Write every total whose service or filter still exists. The others stay in memory, unsaved:
 * a worker keeps reporting a removed filter's count (its slots are never freed), and `last`
 * must stay its base, so that an undo that brings the filter back (ctl_stats_blocked_set())
 * does not count its old blocks again. */
static int flush_counters(struct ctl_stats *s, struct ctl_txn *t, bool force)
{
    size_t keep = 0;
    int rv = 0;

    for (size_t i = 0; rv == 0 && i < s->nsvc; i++) {
        struct ctl_service svc;

        rv = ctl_store_service_get(t, s->svc[i].id, &svc);
        if (rv == -ENOENT) {
            rv = 0;
            s->svc[keep++] = s->svc[i];
            continue;
        }
        if (rv == 0)
            rv = ctl_store_svc_totals_put(t, s->svc[i].id, &s->svc[i].total);
        if (rv == 0 && s->svc[i].events_lost > 0) {
            char key[40];

            lost_key(key, sizeof(key), s->svc[i].id);
            rv = ctl_store_u64_put(t, key, s->svc[i].events_lost);
        }
        /* Written once there is one: a service that never reached its limit stores nothing. */
        if (rv == 0 && s->svc[i].limit_hits > 0)
            rv = limit_save(t, &s->svc[i]);
        s->svc[keep++] = s->svc[i];
    }
    if (rv < 0)
        return rv;
    s->nsvc = keep;
    keep = 0;
    for (size_t i = 0; rv == 0 && i < s->nflt; i++) {
        struct ctl_filter f;

        rv = ctl_store_filter_get(t, s->flt[i].id, &f);
        if (rv == -ENOENT) {
            rv = 0;
            s->flt[keep++] = s->flt[i];
            continue;
        }
        s->flt[i].service_id = f.service_id;
        ctl_filter_release(&f);
        if (rv == 0)
            rv = ctl_store_blocked_set(t, s->flt[i].id, s->flt[i].blocked);
        /* Written once there is one: a block-only filter's store stays as it was. */
        if (rv == 0 && s->flt[i].matched > 0)
            rv = ctl_store_matched_set(t, s->flt[i].id, s->flt[i].matched);
        s->flt[keep++] = s->flt[i];
    }
    if (rv < 0)
        return rv;
    s->nflt = keep;
    rv = ctl_store_u64_put(t, key_queue_drops, s->worker.queue_drops_total);
    if (rv == 0)
        rv = ctl_store_u64_put(t, key_events_lost, s->worker.events_lost_total);
    for (int k = 0; rv == 0 && k < W_KINDS; k++)
        rv = bases_put(s, t, k);
    if (rv == 0)
        rv = flush_rates(s, t, force);
    return rv;
}

int ctl_stats_flush(struct ctl_stats *s, struct ctl_store *st, uint64_t now_ms, bool force)
{
    bool counters =
        s->dirty && (force || s->flush_now || now_ms - s->flushed_ms >= CTL_STATS_FLUSH_MS);
    struct ctl_txn *t = NULL;
    int rv;

    if (s->unsaved == 0 && s->ncaps == 0 && !counters)
        return 0;
    if (s->failing && !force && now_ms - s->failed_ms < CTL_STATS_FLUSH_MS)
        return -EAGAIN;
    rv = ctl_txn_begin(st, true, &t);
    if (rv < 0)
        goto out;
    ctl_txn_label(t, "saving events and counters", true);
    if (s->unsaved > 0) {
        rv = flush_events(s, t);
        if (rv < 0)
            goto out;
    }
    for (size_t i = 0; rv == 0 && i < s->ncaps; i++)
        rv = ctl_store_capture_put(t, s->caps[i].seq, s->caps[i].data, s->caps[i].len);
    if (rv == 0 && s->ncaps > 0)
        rv = ctl_store_capture_trim(t, s->caps_keep);
    if (rv < 0)
        goto out;
    if (counters) {
        rv = flush_counters(s, t, force);
        if (rv < 0)
            goto out;
    }
    rv = ctl_txn_commit(t);
    t = NULL;
    if (rv < 0)
        goto out;
    if (s->unpruned + s->unsaved > s->keep / CTL_EVENTS_PRUNE_DIV)
        s->unpruned = 0;
    else
        s->unpruned += s->unsaved;
    s->unsaved = 0;
    for (size_t i = 0; i < s->ncaps; i++)
        free(s->caps[i].data);
    s->ncaps = 0;
    if (counters)
        s->dirty = s->flush_now = false;
out:
    ctl_txn_abort(t);
    if (counters)
        s->flushed_ms = now_ms;
    if (rv < 0) {
        if (!s->failing)
            fgx_warn("cannot save the statistics and events: %s (retried every %u s; they are "
                     "kept in memory meanwhile)",
                     ctl_store_strerror(rv), CTL_STATS_FLUSH_MS / 1000);
        s->failing = true;
        s->failed_ms = now_ms;
    } else if (s->failing) {
        fgx_info("statistics and events saved again");
        s->failing = false;
    }
    return rv;
}

void ctl_stats_service(const struct ctl_stats *s, uint32_t service_id, struct ctl_svc_counters *out)
{
    memset(out, 0, sizeof(*out));
    for (size_t i = 0; i < s->nsvc; i++) {
        if (s->svc[i].id == service_id) {
            out->packets = s->svc[i].total.packets;
            out->bytes = s->svc[i].total.bytes;
            out->accepted = s->svc[i].total.accepted;
            out->dropped = s->svc[i].total.dropped;
            out->flows_active = s->svc[i].flows_active[W_NFQ] + s->svc[i].flows_active[W_PX];
            out->events_lost = s->svc[i].events_lost;
            out->tls_failed = s->svc[i].tls_failed;
            out->limit_hits = s->svc[i].limit_hits;
            out->limit_first = s->svc[i].limit_first;
            out->limit_last = s->svc[i].limit_last;
            out->flags_out = s->svc[i].flags_out;
            out->flags_to_checker = s->svc[i].flags_to_checker;
            return;
        }
    }
}

void ctl_stats_filter_service(struct ctl_stats *s, uint32_t filter_id, uint32_t service_id)
{
    struct flt_slot *f = flt_slot(s, filter_id, false);

    if (f)
        f->service_id = service_id;
}

int ctl_stats_blocked_set(struct ctl_stats *s, uint32_t filter_id, uint64_t v)
{
    struct flt_slot *f = flt_slot(s, filter_id, true);

    if (!f)
        return -ENOMEM;
    f->blocked = v; /* `last` stays: the worker's own count, the base of the next growth */
    s->dirty = true;
    return 0;
}

int ctl_stats_service_set(struct ctl_stats *s, uint32_t service_id, const struct ctl_svc_totals *v)
{
    struct svc_slot *c = svc_slot(s, service_id, true);

    if (!c)
        return -ENOMEM;
    c->total = *v;
    s->dirty = true;
    return 0;
}

uint64_t ctl_stats_blocked(const struct ctl_stats *s, uint32_t filter_id)
{
    for (size_t i = 0; i < s->nflt; i++)
        if (s->flt[i].id == filter_id)
            return s->flt[i].blocked;
    return 0;
}

uint64_t ctl_stats_matched(const struct ctl_stats *s, uint32_t filter_id)
{
    for (size_t i = 0; i < s->nflt; i++)
        if (s->flt[i].id == filter_id)
            return s->flt[i].matched;
    return 0;
}

const struct ctl_worker_counters *ctl_stats_worker(const struct ctl_stats *s)
{
    return &s->worker;
}

const struct ctl_worker_counters *ctl_stats_px_worker(const struct ctl_stats *s)
{
    return &s->px_worker;
}

size_t ctl_stats_events(const struct ctl_stats *s, uint64_t after_seq, uint32_t service_id,
                        const char *service, size_t limit, const struct ctl_event **out)
{
    bool any = service_id == 0 && service == NULL;
    size_t n = 0;

    /* Newest first into out[], then reversed: the newest `limit` matter, shown oldest first. */
    for (size_t i = s->count; i-- > 0 && n < limit;) {
        const struct ctl_event *e = ring_at(s, i);

        if (e->seq <= after_seq)
            break;
        if (any || (service_id != 0 && e->service_id == service_id) ||
            (service != NULL && strcmp(e->service, service) == 0))
            out[n++] = e;
    }
    for (size_t i = 0; i < n / 2; i++) {
        const struct ctl_event *x = out[i];
        out[i] = out[n - 1 - i];
        out[n - 1 - i] = x;
    }
    return n;
}

size_t ctl_stats_captures_drop(struct ctl_stats *s)
{
    size_t n = s->ncaps;

    for (size_t i = 0; i < s->ncaps; i++)
        free(s->caps[i].data);
    s->ncaps = 0;
    return n;
}

size_t ctl_stats_events_unsaved(const struct ctl_stats *s)
{
    return s->unsaved;
}

size_t ctl_stats_events_kept(const struct ctl_stats *s)
{
    return s->count;
}

uint64_t ctl_stats_last_seq(const struct ctl_stats *s)
{
    return s->next_seq - 1;
}

uint64_t ctl_stats_events_lost(const struct ctl_stats *s, uint32_t service_id)
{
    if (service_id == 0)
        return s->worker.events_lost_total;
    for (size_t i = 0; i < s->nsvc; i++)
        if (s->svc[i].id == service_id)
            return s->svc[i].events_lost;
    return 0;
}

bool ctl_stats_events_burst(struct ctl_stats *s)
{
    bool b = s->burst;

    s->burst = false;
    return b;
}

const struct ctl_event *ctl_stats_event_get(const struct ctl_stats *s, uint64_t seq)
{
    for (size_t i = s->count; i-- > 0;) {
        const struct ctl_event *e = ring_at(s, i);

        if (e->seq == seq)
            return e;
        if (e->seq < seq)
            break;
    }
    return NULL;
}
