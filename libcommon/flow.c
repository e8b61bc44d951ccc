/* Flow stage of the data path: a decoded, classified TCP packet -> its flow entry (both
 * directions in one), which carries the reassembly state handed on to the match stage. */
#include "fgx/flow.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fgx/log.h"

/* The starts of an embryonic flow's two streams, kept after its entry went: 16 bytes instead
 * of a whole flow, so a flood of SYN-ACKs costs a fixed table. */
struct flow_anchor {
    uint64_t hash; /* anchor_tag() of the key's hash; 0: empty */
    uint32_t seq[2];
};

struct fgx_flow_table {
    fgx_flow_release_fn release;
    void *arg;
    size_t capacity, count;
    size_t nbuckets; /* power of two */
    int32_t *buckets;
    int32_t free_head;
    size_t unused; /* flows[unused..] were never handed out (their pages never touched) */
    int32_t lru_head[2], lru_tail[2]; /* per class; head: least recently used */
    size_t ncls[2];
    size_t embryonic_cap;
    size_t nanchors; /* power of two */
    struct flow_anchor *anchors;
    uint64_t evicted; /* __atomic: flows with stream state pushed out */
    struct fgx_flow *flows;
};

void fgx_flow_key_from_pkt(const struct fgx_pkt *pkt, enum fgx_dir dir, struct fgx_flow_key *out)
{
    size_t alen = pkt->family == 4 ? 4 : 16;
    bool c2s = dir == FGX_DIR_C2S;

    memset(out, 0, sizeof(*out));
    out->family = pkt->family;
    out->ipproto = pkt->ipproto;
    out->cport = c2s ? pkt->sport : pkt->dport;
    out->sport = c2s ? pkt->dport : pkt->sport;
    memcpy(out->caddr, c2s ? pkt->saddr : pkt->daddr, alen);
    memcpy(out->saddr, c2s ? pkt->daddr : pkt->saddr, alen);
}

static uint64_t key_hash(const struct fgx_flow_key *k)
{
    uint64_t w[sizeof(*k) / 8], h = 0x9e3779b97f4a7c15ULL;
    size_t i;

    memcpy(w, k, sizeof(w));
    for (i = 0; i < sizeof(w) / 8; i++) {
        h ^= w[i];
        h *= 0xff51afd7ed558ccdULL;
        h ^= h >> 33;
    }
    return h;
}

/* An anchor slot's tag for a key: never 0, the empty slot's. */
static uint64_t anchor_tag(uint64_t h)
{
    return h | 1;
}

_Static_assert(sizeof(struct fgx_flow_key) % 8 == 0, "flow key hashed as 64-bit words");

int fgx_flow_table_new(size_t capacity, fgx_flow_release_fn fn, void *arg,
                       struct fgx_flow_table **out)
{
    struct fgx_flow_table *t;
    size_t i;

    *out = NULL;
    if (capacity == 0 || capacity > INT32_MAX / 4)
        return -EINVAL;
    t = calloc(1, sizeof(*t));
    if (t == NULL)
        goto nomem;
    t->release = fn;
    t->arg = arg;
    t->capacity = capacity;
    for (t->nbuckets = 1; t->nbuckets < capacity * 2; t->nbuckets <<= 1)
        ;
    /* 16 bytes each, four per flow: a flood pushes an honest handshake's anchor out only after
     * some 4 * capacity more SYN-ACKs, seconds even at a hundred thousand a second. */
    for (t->nanchors = 1; t->nanchors < capacity * 4; t->nanchors <<= 1)
        ;
    t->embryonic_cap = capacity / 4 > 0 ? capacity / 4 : 1;
    t->buckets = malloc(t->nbuckets * sizeof(*t->buckets));
    /* calloc: the kernel hands out zero pages lazily, so an idle table costs little memory */
    t->flows = calloc(capacity, sizeof(*t->flows));
    t->anchors = calloc(t->nanchors, sizeof(*t->anchors));
    if (t->buckets == NULL || t->flows == NULL || t->anchors == NULL)
        goto nomem;
    for (i = 0; i < t->nbuckets; i++)
        t->buckets[i] = -1;
    t->free_head = -1;
    t->lru_head[0] = t->lru_tail[0] = t->lru_head[1] = t->lru_tail[1] = -1;
    *out = t;
    return 0;
nomem:
    fgx_err("flow table: cannot allocate %zu flows", capacity);
    if (t != NULL) {
        free(t->buckets);
        free(t->flows);
        free(t->anchors);
        free(t);
    }
    return -ENOMEM;
}

static void lru_unlink(struct fgx_flow_table *t, struct fgx_flow *f)
{
    if (f->lprev >= 0)
        t->flows[f->lprev].lnext = f->lnext;
    else
        t->lru_head[f->cls] = f->lnext;
    if (f->lnext >= 0)
        t->flows[f->lnext].lprev = f->lprev;
    else
        t->lru_tail[f->cls] = f->lprev;
    t->ncls[f->cls]--;
}

static void lru_append(struct fgx_flow_table *t, struct fgx_flow *f)
{
    int32_t i = (int32_t)(f - t->flows);

    f->lnext = -1;
    f->lprev = t->lru_tail[f->cls];
    if (t->lru_tail[f->cls] >= 0)
        t->flows[t->lru_tail[f->cls]].lnext = i;
    else
        t->lru_head[f->cls] = i;
    t->lru_tail[f->cls] = i;
    t->ncls[f->cls]++;
}

static struct flow_anchor *anchor_slot(struct fgx_flow_table *t, uint64_t h)
{
    /* The bucket index uses the low bits; the anchors take the high ones, so that flows that
     * share a bucket do not also share an anchor slot. */
    return &t->anchors[(h >> 32) & (t->nanchors - 1)];
}

/* An embryonic flow leaves: keep where its streams start. One that passed a byte (a flow
 * promoted late would not be here) or never started has nothing to keep. */
static void anchor_keep(struct fgx_flow_table *t, const struct fgx_flow *f)
{
    struct flow_anchor *a;
    int d;

    for (d = 0; d < 2; d++)
        if (!f->dir[d].active || f->dir[d].next_seq != f->dir[d].floor_seq)
            return;
    a = anchor_slot(t, key_hash(&f->key));
    a->hash = anchor_tag(key_hash(&f->key));
    a->seq[0] = f->dir[0].next_seq;
    a->seq[1] = f->dir[1].next_seq;
}

void fgx_flow_anchor_put(struct fgx_flow_table *t, const struct fgx_flow_key *key,
                         const uint32_t seq[2])
{
    uint64_t h = key_hash(key);
    struct flow_anchor *a = anchor_slot(t, h);

    a->hash = anchor_tag(h);
    a->seq[0] = seq[0];
    a->seq[1] = seq[1];
}

bool fgx_flow_anchor_take(struct fgx_flow_table *t, const struct fgx_flow_key *key, uint32_t seq[2])
{
    uint64_t h = key_hash(key);
    struct flow_anchor *a = anchor_slot(t, h);

    if (a->hash != anchor_tag(h))
        return false;
    seq[0] = a->seq[0];
    seq[1] = a->seq[1];
    a->hash = 0;
    return true;
}

uint64_t fgx_flow_evicted(const struct fgx_flow_table *t)
{
    return __atomic_load_n(&t->evicted, __ATOMIC_RELAXED);
}

struct fgx_flow *fgx_flow_lookup(struct fgx_flow_table *t, const struct fgx_flow_key *key,
                                 uint64_t now_ms)
{
    int32_t i = t->buckets[key_hash(key) & (t->nbuckets - 1)];

    for (; i >= 0; i = t->flows[i].hnext) {
        struct fgx_flow *f = &t->flows[i];

        if (memcmp(&f->key, key, sizeof(*key)) == 0) {
            f->last_ms = now_ms;
            lru_unlink(t, f);
            lru_append(t, f);
            return f;
        }
    }
    return NULL;
}

void fgx_flow_remove(struct fgx_flow_table *t, struct fgx_flow *f)
{
    int32_t i = (int32_t)(f - t->flows);
    int32_t *pp = &t->buckets[key_hash(&f->key) & (t->nbuckets - 1)];

    if (t->release != NULL)
        t->release(t->arg, f);
    while (*pp >= 0 && *pp != i)
        pp = &t->flows[*pp].hnext;
    if (*pp == i)
        *pp = f->hnext;
    lru_unlink(t, f);
    f->hnext = t->free_head;
    t->free_head = i;
    t->count--;
}

/* Push out the least recently used flow of class cls. An embryonic one is remembered. */
static void evict(struct fgx_flow_table *t, int cls)
{
    struct fgx_flow *f = &t->flows[t->lru_head[cls]];

    if (cls == FGX_FLOW_EMBRYONIC)
        anchor_keep(t, f);
    else
        __atomic_store_n(&t->evicted, t->evicted + 1, __ATOMIC_RELAXED);
    fgx_flow_remove(t, f);
}

static struct fgx_flow *insert(struct fgx_flow_table *t, const struct fgx_flow_key *key,
                               uint64_t now_ms, int cls)
{
    uint64_t h = key_hash(key);
    struct flow_anchor *a = anchor_slot(t, h);
    struct fgx_flow *f;
    size_t b;
    int32_t i;

    if (t->free_head < 0 && t->unused == t->capacity)
        evict(t, t->ncls[FGX_FLOW_EMBRYONIC] > 0 ? FGX_FLOW_EMBRYONIC : FGX_FLOW_STATEFUL);
    /* The key has a flow again: what was remembered of an earlier one is stale from now on. */
    if (a->hash == anchor_tag(h))
        a->hash = 0;
    if (t->free_head >= 0) {
        i = t->free_head;
        t->free_head = t->flows[i].hnext;
    } else {
        i = (int32_t)t->unused++;
    }
    f = &t->flows[i];
    memset(f, 0, sizeof(*f));
    f->key = *key;
    f->last_ms = now_ms;
    f->cls = (uint8_t)cls;
    fgx_reasm_init(&f->dir[0]);
    fgx_reasm_init(&f->dir[1]);
    b = h & (t->nbuckets - 1);
    f->hnext = t->buckets[b];
    t->buckets[b] = i;
    lru_append(t, f);
    t->count++;
    return f;
}

struct fgx_flow *fgx_flow_insert(struct fgx_flow_table *t, const struct fgx_flow_key *key,
                                 uint64_t now_ms)
{
    return insert(t, key, now_ms, FGX_FLOW_STATEFUL);
}

struct fgx_flow *fgx_flow_insert_embryonic(struct fgx_flow_table *t, const struct fgx_flow_key *key,
                                           uint64_t now_ms)
{
    bool full = t->free_head < 0 && t->unused == t->capacity;

    if (t->ncls[FGX_FLOW_EMBRYONIC] >= t->embryonic_cap ||
        (full && t->ncls[FGX_FLOW_EMBRYONIC] > 0))
        evict(t, FGX_FLOW_EMBRYONIC);
    else if (full)
        return NULL;
    return insert(t, key, now_ms, FGX_FLOW_EMBRYONIC);
}

void fgx_flow_promote(struct fgx_flow_table *t, struct fgx_flow *f)
{
    if (f->cls == FGX_FLOW_STATEFUL)
        return;
    lru_unlink(t, f);
    f->cls = FGX_FLOW_STATEFUL;
    lru_append(t, f);
}

size_t fgx_flow_expire(struct fgx_flow_table *t, uint64_t now_ms, uint64_t idle_ms)
{
    size_t n = 0;
    int c;

    for (c = 0; c < 2; c++) {
        while (t->lru_head[c] >= 0 && t->flows[t->lru_head[c]].last_ms + idle_ms < now_ms) {
            struct fgx_flow *f = &t->flows[t->lru_head[c]];

            /* A connection may stay silent past its handshake: its first data still starts
             * from the anchor, not as a connection of unknown past. */
            if (c == FGX_FLOW_EMBRYONIC)
                anchor_keep(t, f);
            fgx_flow_remove(t, f);
            n++;
        }
    }
    return n;
}

size_t fgx_flow_sweep(struct fgx_flow_table *t, bool (*keep)(void *arg, struct fgx_flow *f),
                      void *arg)
{
    size_t n = 0;
    int c;

    /* keep() may promote a flow (its list changes): walk each list from a copy of the next. */
    for (c = 0; c < 2; c++) {
        int32_t i = t->lru_head[c], next;

        for (; i >= 0; i = next) {
            next = t->flows[i].lnext;
            if (!keep(arg, &t->flows[i])) {
                fgx_flow_remove(t, &t->flows[i]);
                n++;
            }
        }
    }
    return n;
}

size_t fgx_flow_count(const struct fgx_flow_table *t)
{
    return t->count;
}

void fgx_flow_table_free(struct fgx_flow_table *t)
{
    if (t == NULL)
        return;
    while (t->lru_head[0] >= 0)
        fgx_flow_remove(t, &t->flows[t->lru_head[0]]);
    while (t->lru_head[1] >= 0)
        fgx_flow_remove(t, &t->flows[t->lru_head[1]]);
    free(t->buckets);
    free(t->flows);
    free(t->anchors);
    free(t);
}
