/* Capture rings (fgx/capture.h): a data-path thread's record of its services' recent
 * connections -> encoded fgx.dp.Capture messages for controld (a block's event, a capture
 * request), and their decoding for controld and fgexctl. */
#include "fgx/capture.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "datapath.pb-c.h"
#include "fgx/dp.h"
#include "fgx/log.h"
#include "fgx/wcfg.h"

/* Generations are unique across every ring of the process, so a flow's ref into a ring that was
 * freed and made again (capture bounds changed) can never name another connection. */
static uint32_t cap_gen_next(void)
{
    static uint32_t gen;
    uint32_t g;

    do
        g = __atomic_add_fetch(&gen, 1, __ATOMIC_RELAXED);
    while (g == 0);
    return g;
}

int fgx_cap_ring_new(uint32_t service_id, uint32_t conns, uint32_t bytes, struct fgx_cap_ring **out)
{
    struct fgx_cap_ring *r;

    *out = NULL;
    if (conns < 1 || conns > FGX_CAP_CONNS_MAX || bytes < 1 || bytes > FGX_CAP_BYTES_MAX)
        return -EINVAL;
    r = calloc(1, sizeof(*r));
    if (r == NULL)
        return -ENOMEM;
    r->service_id = service_id;
    r->conns = conns;
    r->bytes = bytes;
    r->last = conns;
    /* calloc of a large area maps fresh zero pages: nothing is touched until written. */
    r->c = calloc(conns, sizeof(*r->c));
    r->area = malloc((size_t)conns * 2 * bytes);
    if (r->c == NULL || r->area == NULL) {
        free(r->c);
        free(r->area);
        free(r);
        return -ENOMEM;
    }
    pthread_mutex_init(&r->lock, NULL);
    *out = r;
    return 0;
}

void fgx_cap_ring_free(struct fgx_cap_ring *r)
{
    if (r == NULL)
        return;
    pthread_mutex_destroy(&r->lock);
    free(r->c);
    free(r->area);
    free(r);
}

static struct fgx_cap_conn *ref_conn(struct fgx_cap_ring *r, const struct fgx_cap_ref *ref)
{
    if (ref->gen == 0 || ref->slot >= r->conns || r->c[ref->slot].gen != ref->gen)
        return NULL;
    return &r->c[ref->slot];
}

void fgx_cap_open(struct fgx_cap_ring *r, uint8_t ipproto, uint8_t family, const uint8_t *caddr,
                  uint16_t cport, const uint8_t *saddr, uint16_t sport, uint64_t now_ns,
                  struct fgx_cap_ref *ref)
{
    size_t alen = family == 4 ? 4 : 16;
    struct fgx_cap_conn *c = NULL;
    uint32_t i, s = 0;

    ref->gen = 0;
    pthread_mutex_lock(&r->lock);
    for (i = 0; i < r->conns; i++) {
        s = (r->next + i) % r->conns;
        if (!r->c[s].pinned) {
            c = &r->c[s];
            break;
        }
    }
    if (c != NULL) {
        memset(c, 0, offsetof(struct fgx_cap_conn, seg));
        c->gen = cap_gen_next();
        c->ipproto = ipproto;
        c->family = family;
        memcpy(c->caddr, caddr, alen);
        memcpy(c->saddr, saddr, alen);
        c->cport = cport;
        c->sport = sport;
        c->start_ns = now_ns;
        r->next = (s + 1) % r->conns;
        r->last = s;
        ref->slot = s;
        ref->gen = c->gen;
    }
    pthread_mutex_unlock(&r->lock);
}

/* Mark [off, off + len) seen at now. Contiguous with the last mark and of the same kind: the
 * mark grows (a bulk stream costs one mark, not one per segment, once they run out). */
static void seg_mark(struct fgx_cap_conn *c, int d, uint32_t off, uint32_t len, uint64_t now_ns,
                     bool blocked)
{
    struct fgx_cap_seg *last = c->nseg[d] > 0 ? &c->seg[d][c->nseg[d] - 1] : NULL;

    if (last != NULL && c->nseg[d] == FGX_CAP_SEGS) {
        /* Out of marks: the bytes still count, under the last mark. */
        if (off + len > last->off + last->len)
            last->len = off + len - last->off;
        last->blocked |= blocked;
        return;
    }
    c->seg[d][c->nseg[d]++] = (struct fgx_cap_seg){off, len, now_ns, blocked};
}

static void cap_write(struct fgx_cap_ring *r, struct fgx_cap_conn *c, int d, uint64_t off,
                      const uint8_t *data, size_t len, uint64_t now_ns, bool blocked)
{
    uint8_t *dst = r->area + ((size_t)(c - r->c) * 2 + (size_t)d) * r->bytes;
    bool again = off + len <= c->contig[d];
    size_t keep;

    if (off + len > c->seen[d])
        c->seen[d] = off + len;
    if (off <= c->contig[d] && off + len > c->contig[d])
        c->contig[d] = off + len;
    /* A retransmission of bytes already seen adds nothing (an honest one repeats them; one
     * that differs is dropped before it gets here), unless it is the one blocked. */
    if (off >= r->bytes || len == 0 || (again && !blocked))
        return;
    keep = len < r->bytes - off ? len : r->bytes - off;
    memcpy(dst + off, data, keep);
    if (off + keep > c->len[d])
        c->len[d] = (uint32_t)(off + keep);
    seg_mark(c, d, (uint32_t)off, (uint32_t)keep, now_ns, blocked);
    if (blocked)
        c->blocked = true;
}

void fgx_cap_add(struct fgx_cap_ring *r, const struct fgx_cap_ref *ref, int d, uint32_t isn,
                 uint32_t seq, const uint8_t *data, size_t len, uint64_t now_ns, bool blocked)
{
    struct fgx_cap_conn *c;
    int32_t off;

    pthread_mutex_lock(&r->lock);
    c = ref_conn(r, ref);
    if (c == NULL)
        goto out;
    if (!c->has_isn[d]) {
        c->isn[d] = isn;
        c->has_isn[d] = true;
    }
    off = (int32_t)(seq - c->isn[d]);
    if (off < 0) {
        /* Starts before the direction did (a retransmission reaching back): its tail only. */
        if ((size_t) - (int64_t)off >= len)
            goto out;
        data += -(int64_t)off;
        len -= (size_t) - (int64_t)off;
        off = 0;
    }
    cap_write(r, c, d, (uint64_t)off, data, len, now_ns, blocked);
out:
    pthread_mutex_unlock(&r->lock);
}

void fgx_cap_append(struct fgx_cap_ring *r, const struct fgx_cap_ref *ref, int d,
                    const uint8_t *data, size_t len, uint64_t now_ns, bool blocked)
{
    struct fgx_cap_conn *c;

    pthread_mutex_lock(&r->lock);
    c = ref_conn(r, ref);
    if (c != NULL) {
        if (!c->has_isn[d]) {
            /* No wire numbers: a stream starts at 1, so its made-up SYN takes 0. */
            c->isn[d] = 1;
            c->has_isn[d] = true;
        }
        cap_write(r, c, d, c->seen[d], data, len, now_ns, blocked);
    }
    pthread_mutex_unlock(&r->lock);
}

uint16_t fgx_cap_stream_port(uint16_t cport, uint32_t stream)
{
    uint64_t p = (uint64_t)cport + (stream > 0 ? (stream - 1) / 2 : 0);

    return p <= 65535 ? (uint16_t)p : (uint16_t)(1024 + (p - 65536) % 64512);
}

void fgx_cap_udp(struct fgx_cap_ring *r, uint8_t family, const uint8_t *caddr, uint16_t cport,
                 const uint8_t *saddr, uint16_t sport, uint64_t now_ns, struct fgx_cap_ref *ref)
{
    size_t alen = family == 4 ? 4 : 16;
    struct fgx_cap_conn *c;

    pthread_mutex_lock(&r->lock);
    c = r->last < r->conns ? &r->c[r->last] : NULL;
    if (c != NULL && c->gen != 0 && !c->pinned && c->family == family && c->cport == cport &&
        c->sport == sport && memcmp(c->caddr, caddr, alen) == 0 &&
        memcmp(c->saddr, saddr, alen) == 0) {
        ref->slot = r->last;
        ref->gen = c->gen;
        pthread_mutex_unlock(&r->lock);
        return;
    }
    pthread_mutex_unlock(&r->lock);
    fgx_cap_open(r, 17 /* IPPROTO_UDP */, family, caddr, cport, saddr, sport, now_ns, ref);
}

bool fgx_cap_pin(struct fgx_cap_ring *r, const struct fgx_cap_ref *ref, uint32_t filter_id)
{
    struct fgx_cap_conn *c;
    bool ok = false;

    pthread_mutex_lock(&r->lock);
    c = ref_conn(r, ref);
    if (c != NULL) {
        c->pinned = c->blocked = true;
        c->filter_id = filter_id;
        if (r->last == ref->slot)
            r->last = r->conns; /* no more datagrams join a blocked run */
        ok = true;
    }
    pthread_mutex_unlock(&r->lock);
    return ok;
}

/* Every mark of d holding any of [off, end) blocked, and the connection (under the lock). Bytes
 * past the bound have no mark: the connection alone says it. */
static void cap_block_range(struct fgx_cap_conn *c, int d, uint64_t off, uint64_t end,
                            bool silent)
{
    for (unsigned i = 0; i < c->nseg[d]; i++) {
        struct fgx_cap_seg *s = &c->seg[d][i];

        if (s->len > 0 && s->off < end && (uint64_t)s->off + s->len > off)
            s->blocked = true;
    }
    c->blocked = true;
    c->silent = silent;
}

bool fgx_cap_block_seq(struct fgx_cap_ring *r, const struct fgx_cap_ref *ref, int d, uint32_t seq,
                       uint32_t len, bool silent)
{
    struct fgx_cap_conn *c;
    bool ok = false;

    pthread_mutex_lock(&r->lock);
    c = ref_conn(r, ref);
    if (c != NULL) {
        ok = true;
        if (c->has_isn[d]) {
            /* as fgx_cap_add(): bytes before the direction's start are none of its */
            int64_t off = (int32_t)(seq - c->isn[d]), end = off + (int64_t)len;

            if (end > 0)
                cap_block_range(c, d, off > 0 ? (uint64_t)off : 0, (uint64_t)end, silent);
        }
        c->blocked = true;
        c->silent = silent;
    }
    pthread_mutex_unlock(&r->lock);
    return ok;
}

bool fgx_cap_block_tail(struct fgx_cap_ring *r, const struct fgx_cap_ref *ref, int d, size_t len,
                        bool silent)
{
    struct fgx_cap_conn *c;
    bool ok = false;

    pthread_mutex_lock(&r->lock);
    c = ref_conn(r, ref);
    if (c != NULL) {
        ok = true;
        cap_block_range(c, d, c->seen[d] > len ? c->seen[d] - len : 0, c->seen[d], silent);
    }
    pthread_mutex_unlock(&r->lock);
    return ok;
}

bool fgx_cap_pin_keep(struct fgx_cap_ring *r, const struct fgx_cap_ref *ref)
{
    struct fgx_cap_conn *c;
    bool ok = false;

    pthread_mutex_lock(&r->lock);
    c = ref_conn(r, ref);
    if (c != NULL && !c->pinned) {
        c->pinned = true;
        ok = true;
    }
    pthread_mutex_unlock(&r->lock);
    return ok;
}

void fgx_cap_unpin(struct fgx_cap_ring *r, const struct fgx_cap_ref *ref)
{
    struct fgx_cap_conn *c;

    pthread_mutex_lock(&r->lock);
    c = ref_conn(r, ref);
    if (c != NULL)
        c->pinned = false;
    pthread_mutex_unlock(&r->lock);
}

/* Encode slot c (under the lock). */
static int cap_encode(const struct fgx_cap_ring *r, const struct fgx_cap_conn *c, uint8_t **buf,
                      size_t *len)
{
    Fgx__Dp__Capture m = FGX__DP__CAPTURE__INIT;
    Fgx__Dp__CaptureSeg segs[2 * FGX_CAP_SEGS], *segp[2 * FGX_CAP_SEGS];
    size_t alen = c->family == 4 ? 4 : 16, n = 0;
    const uint8_t *area = r->area + (size_t)(c - r->c) * 2 * r->bytes;
    int d;

    m.service_id = r->service_id;
    m.ipproto = c->ipproto;
    m.caddr.data = (uint8_t *)c->caddr;
    m.caddr.len = alen;
    m.saddr.data = (uint8_t *)c->saddr;
    m.saddr.len = alen;
    m.cport = c->cport;
    m.sport = c->sport;
    m.start_ns = c->start_ns;
    m.has_isn_c2s = m.has_isn_s2c = 1;
    m.isn_c2s = c->isn[0];
    m.isn_s2c = c->isn[1];
    m.has_c2s = m.has_s2c = 1;
    m.c2s.data = (uint8_t *)area;
    m.c2s.len = c->len[0];
    m.s2c.data = (uint8_t *)area + r->bytes;
    m.s2c.len = c->len[1];
    m.has_seen_c2s = m.has_seen_s2c = 1;
    m.seen_c2s = c->seen[0];
    m.seen_s2c = c->seen[1];
    if (r->synth_seq) {
        m.has_synth_seq = 1;
        m.synth_seq = 1;
    }
    if (c->blocked) {
        m.has_blocked = m.has_filter_id = 1;
        m.blocked = 1;
        m.filter_id = c->filter_id;
        if (c->silent) {
            m.has_silent = 1;
            m.silent = 1;
        }
    }
    /* Both directions' marks in time order, as a pcap wants them. */
    {
        unsigned k[2] = {0, 0};

        while (k[0] < c->nseg[0] || k[1] < c->nseg[1]) {
            const struct fgx_cap_seg *s;

            d = k[1] >= c->nseg[1]                                   ? 0
                : k[0] >= c->nseg[0]                                 ? 1
                : c->seg[0][k[0]].time_ns <= c->seg[1][k[1]].time_ns ? 0
                                                                     : 1;
            s = &c->seg[d][k[d]++];
            fgx__dp__capture_seg__init(&segs[n]);
            segs[n].dir = (uint32_t)d + 1;
            segs[n].seq = c->isn[d] + s->off;
            segs[n].len = s->len;
            segs[n].time_ns = s->time_ns;
            if (s->blocked) {
                segs[n].has_blocked = 1;
                segs[n].blocked = 1;
            }
            segp[n] = &segs[n];
            n++;
        }
    }
    m.n_segs = n;
    m.segs = segp;
    *len = fgx__dp__capture__get_packed_size(&m);
    *buf = malloc(*len ? *len : 1);
    if (*buf == NULL)
        return -ENOMEM;
    fgx__dp__capture__pack(&m, *buf);
    return 0;
}

int fgx_cap_take(struct fgx_cap_ring *r, const struct fgx_cap_ref *ref, uint8_t **buf, size_t *len)
{
    struct fgx_cap_conn *c;
    int rv = -ENOENT;

    *buf = NULL;
    pthread_mutex_lock(&r->lock);
    c = ref_conn(r, ref);
    if (c != NULL) {
        rv = cap_encode(r, c, buf, len);
        c->pinned = false;
    }
    pthread_mutex_unlock(&r->lock);
    return rv;
}

int fgx_cap_ring_collect(struct fgx_cap_ring *r, fgx_cap_each_fn fn, void *arg)
{
    uint32_t i;
    int rv = 0;

    for (i = 0; i < r->conns && rv == 0; i++) {
        uint8_t *buf = NULL;
        size_t len = 0;

        /* One slot at a time, so the data path waits at most one slot's copy. */
        pthread_mutex_lock(&r->lock);
        if (r->c[i].gen != 0 && (r->c[i].seen[0] > 0 || r->c[i].seen[1] > 0))
            rv = cap_encode(r, &r->c[i], &buf, &len);
        pthread_mutex_unlock(&r->lock);
        if (rv == 0 && buf != NULL)
            rv = fn(arg, buf, len);
    }
    return rv;
}

/* ---- a thread's set of rings ---- */

void fgx_cap_set_init(struct fgx_cap_set *s, bool synth_seq)
{
    memset(s, 0, sizeof(*s));
    pthread_mutex_init(&s->lock, NULL);
    s->synth_seq = synth_seq;
}

void fgx_cap_set_release(struct fgx_cap_set *s)
{
    pthread_mutex_lock(&s->lock);
    for (size_t i = 0; i < s->n; i++)
        fgx_cap_ring_free(s->caps[i]);
    free(s->caps);
    s->caps = NULL;
    s->n = 0;
    for (size_t i = 0; i < s->nretired; i++)
        fgx_cap_ring_free(s->retired[i]);
    s->nretired = 0;
    pthread_mutex_unlock(&s->lock);
    pthread_mutex_destroy(&s->lock);
}

struct fgx_cap_ring *fgx_cap_set_ring(const struct fgx_cap_set *s, uint32_t id)
{
    for (size_t i = 0; i < s->n; i++)
        if (s->caps[i]->service_id == id)
            return s->caps[i];
    return NULL;
}

static uint64_t mono_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Under s->lock: retired ring i out of the list (not freed). */
static struct fgx_cap_ring *retired_take(struct fgx_cap_set *s, size_t i)
{
    struct fgx_cap_ring *r = s->retired[i];

    memmove(&s->retired[i], &s->retired[i + 1], (s->nretired - i - 1) * sizeof(s->retired[0]));
    memmove(&s->retired_ns[i], &s->retired_ns[i + 1],
            (s->nretired - i - 1) * sizeof(s->retired_ns[0]));
    s->nretired--;
    return r;
}

/* Under s->lock: r retired at now (the oldest freed to make room). */
static void retired_add(struct fgx_cap_set *s, struct fgx_cap_ring *r, uint64_t now)
{
    if (s->nretired == FGX_CAP_RETIRED_MAX)
        fgx_cap_ring_free(retired_take(s, 0));
    s->retired[s->nretired] = r;
    s->retired_ns[s->nretired++] = now;
}

static bool cfg_has(const struct fgx_wcfg *cfg, uint32_t id)
{
    for (size_t i = 0; i < cfg->nservices; i++)
        if (cfg->svc[i].id == id)
            return true;
    return false;
}

void fgx_cap_set_switch(struct fgx_cap_set *s, const struct fgx_wcfg *cfg, unsigned nthreads)
{
    struct fgx_cap_ring **caps = NULL, **old, *back[FGX_CAP_RETIRED_MAX];
    size_t n = 0, nold, nback = 0, i, k;
    unsigned nt = nthreads ? nthreads : 1;
    uint64_t now = mono_ns();

    if (cfg->nservices > 0) {
        caps = calloc(cfg->nservices, sizeof(*caps));
        if (caps == NULL) {
            fgx_err("out of memory for capture rings: capture stays as it was");
            return;
        }
    }
    for (i = 0; i < cfg->nservices; i++) {
        const struct fgx_wsvc *v = &cfg->svc[i];
        uint32_t conns = (v->capture_conns + nt - 1) / nt;
        struct fgx_cap_ring *r;

        if (v->capture_conns == 0 || v->capture_bytes == 0)
            continue;
        r = fgx_cap_set_ring(s, v->id);
        if (r != NULL && r->conns == conns && r->bytes == v->capture_bytes) {
            caps[n++] = r;
            continue;
        }
        if (r == NULL) {
            bool took = false;

            /* back from the other layer: its ring again, with what it captured before */
            for (k = 0; k < s->nretired && !took; k++)
                if (s->retired[k]->service_id == v->id && s->retired[k]->conns == conns &&
                    s->retired[k]->bytes == v->capture_bytes) {
                    caps[n++] = back[nback++] = s->retired[k];
                    took = true;
                }
            if (took)
                continue;
        }
        if (fgx_cap_ring_new(v->id, conns, v->capture_bytes, &r) != 0) {
            fgx_err("no capture ring for service %u (%u x %u bytes)", v->id, conns,
                    v->capture_bytes);
            continue;
        }
        r->synth_seq = s->synth_seq;
        caps[n++] = r;
    }
    pthread_mutex_lock(&s->lock);
    old = s->caps;
    nold = s->n;
    s->caps = caps;
    s->n = n;
    /* the retired rings taken back leave the list; those past their time, or of a service
     * back with other bounds, are freed */
    for (i = s->nretired; i-- > 0;) {
        for (k = 0; k < nback && back[k] != s->retired[i]; k++)
            ;
        if (k < nback)
            (void)retired_take(s, i);
        else if (now - s->retired_ns[i] > FGX_CAP_RETIRED_NS ||
                 cfg_has(cfg, s->retired[i]->service_id))
            fgx_cap_ring_free(retired_take(s, i));
    }
    for (i = 0; i < nold; i++) {
        for (k = 0; k < n && caps[k] != old[i]; k++)
            ;
        if (k < n)
            continue;
        if (!cfg_has(cfg, old[i]->service_id))
            retired_add(s, old[i], now);
        else
            fgx_cap_ring_free(old[i]);
    }
    pthread_mutex_unlock(&s->lock);
    free(old);
}

void fgx_cap_set_events(struct fgx_cap_set *s, struct fgx_dp_stats *out, size_t from, size_t to)
{
    pthread_mutex_lock(&s->lock);
    for (size_t i = from; i < to; i++) {
        struct fgx_dp_event *e = &out->events[i];
        struct fgx_cap_ref ref = {e->cap_slot, e->cap_gen};
        struct fgx_cap_ring *r;

        e->capture = NULL;
        e->capture_len = 0;
        if (e->cap_gen == 0)
            continue;
        r = fgx_cap_set_ring(s, e->service_id);
        if (r != NULL && fgx_cap_take(r, &ref, &e->capture, &e->capture_len) != 0)
            e->capture = NULL;
    }
    pthread_mutex_unlock(&s->lock);
}

struct cap_acc {
    struct fgx_blob **caps;
    size_t *n, *cap;
};

static int cap_acc_add(void *arg, uint8_t *buf, size_t len)
{
    struct cap_acc *a = arg;

    if (*a->n == *a->cap) {
        size_t nc = *a->cap ? *a->cap * 2 : 64;
        struct fgx_blob *p = realloc(*a->caps, nc * sizeof(*p));

        if (p == NULL) {
            free(buf);
            return -ENOMEM;
        }
        *a->caps = p;
        *a->cap = nc;
    }
    (*a->caps)[(*a->n)++] = (struct fgx_blob){.data = buf, .len = len};
    return 0;
}

int fgx_cap_set_collect(struct fgx_cap_set *s, uint32_t id, struct fgx_blob **caps, size_t *n,
                        size_t *cap)
{
    struct cap_acc a = {caps, n, cap};
    struct fgx_cap_ring *r;
    int rv = 0;

    pthread_mutex_lock(&s->lock);
    r = fgx_cap_set_ring(s, id);
    if (r != NULL)
        rv = fgx_cap_ring_collect(r, cap_acc_add, &a);
    /* and what it captured before it left this worker (a layer switch) */
    for (size_t i = 0; rv == 0 && i < s->nretired; i++)
        if (s->retired[i]->service_id == id)
            rv = fgx_cap_ring_collect(s->retired[i], cap_acc_add, &a);
    pthread_mutex_unlock(&s->lock);
    return rv;
}

int fgx_cap_decode(const void *buf, size_t len, struct fgx_cap *out)
{
    Fgx__Dp__Capture *m = fgx__dp__capture__unpack(NULL, len, buf);
    size_t i;

    memset(out, 0, sizeof(*out));
    if (m == NULL)
        return -EINVAL;
    if ((m->caddr.len != 4 && m->caddr.len != 16) || m->saddr.len != m->caddr.len ||
        m->cport > 65535 || m->sport > 65535) {
        fgx__dp__capture__free_unpacked(m, NULL);
        return -EINVAL;
    }
    out->msg = m;
    out->service_id = m->service_id;
    out->ipproto = (uint8_t)m->ipproto;
    out->family = m->caddr.len == 4 ? 4 : 6;
    memcpy(out->caddr, m->caddr.data, m->caddr.len);
    memcpy(out->saddr, m->saddr.data, m->saddr.len);
    out->cport = (uint16_t)m->cport;
    out->sport = (uint16_t)m->sport;
    out->start_ns = m->start_ns;
    out->isn[0] = m->isn_c2s;
    out->isn[1] = m->isn_s2c;
    out->data[0] = m->c2s.data;
    out->len[0] = m->has_c2s ? m->c2s.len : 0;
    out->data[1] = m->s2c.data;
    out->len[1] = m->has_s2c ? m->s2c.len : 0;
    out->seen[0] = m->seen_c2s;
    out->seen[1] = m->seen_s2c;
    out->blocked = m->blocked;
    out->filter_id = m->filter_id;
    out->event_seq = m->event_seq;
    out->synth_seq = m->synth_seq;
    out->silent = m->has_silent && m->silent;
    if (m->n_segs > 0) {
        out->seg = calloc(m->n_segs, sizeof(*out->seg));
        out->seg_dir = calloc(m->n_segs, 1);
        if (out->seg == NULL || out->seg_dir == NULL) {
            fgx_cap_release(out);
            return -ENOMEM;
        }
    }
    for (i = 0; i < m->n_segs; i++) {
        const Fgx__Dp__CaptureSeg *s = m->segs[i];
        int d = s->dir == 2 ? 1 : 0;
        uint32_t off = s->seq - out->isn[d];

        /* A mark outside the bytes kept is cut to them, never trusted. */
        if (off > out->len[d])
            off = (uint32_t)out->len[d];
        out->seg[out->nseg] = (struct fgx_cap_seg){
            off, s->len <= out->len[d] - off ? s->len : (uint32_t)(out->len[d] - off), s->time_ns,
            s->blocked};
        out->seg_dir[out->nseg++] = (uint8_t)d;
    }
    return 0;
}

void fgx_cap_release(struct fgx_cap *c)
{
    if (c->msg != NULL)
        fgx__dp__capture__free_unpacked(c->msg, NULL);
    free(c->seg);
    free(c->seg_dir);
    memset(c, 0, sizeof(*c));
}

int fgx_cap_set_event_seq(const void *buf, size_t len, uint64_t seq, uint8_t **out, size_t *outlen)
{
    Fgx__Dp__Capture *m = fgx__dp__capture__unpack(NULL, len, buf);

    if (m == NULL)
        return -EINVAL;
    m->has_event_seq = 1;
    m->event_seq = seq;
    *outlen = fgx__dp__capture__get_packed_size(m);
    *out = malloc(*outlen ? *outlen : 1);
    if (*out != NULL)
        fgx__dp__capture__pack(m, *out);
    fgx__dp__capture__free_unpacked(m, NULL);
    return *out != NULL ? 0 : -ENOMEM;
}
