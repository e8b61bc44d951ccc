/* Flow stage of the data path: a decoded, classified TCP packet -> its flow entry (both
 * directions in one), which carries the reassembly state handed on to the match stage. */
#include "fgx/flow.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fgx/log.h"

struct fgx_flow_table {
    fgx_flow_release_fn release;
    void *arg;
    size_t capacity, count;
    size_t nbuckets; /* power of two */
    int32_t *buckets;
    int32_t free_head;
    size_t unused; /* flows[unused..] were never handed out (their pages never touched) */
    int32_t lru_head, lru_tail; /* head: least recently used */
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

static size_t key_hash(const struct fgx_flow_key *k)
{
    uint64_t w[sizeof(*k) / 8], h = 0x9e3779b97f4a7c15ULL;
    size_t i;

    memcpy(w, k, sizeof(w));
    for (i = 0; i < sizeof(w) / 8; i++) {
        h ^= w[i];
        h *= 0xff51afd7ed558ccdULL;
        h ^= h >> 33;
    }
    return (size_t)h;
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
    t->buckets = malloc(t->nbuckets * sizeof(*t->buckets));
    /* calloc: the kernel hands out zero pages lazily, so an idle table costs little memory */
    t->flows = calloc(capacity, sizeof(*t->flows));
    if (t->buckets == NULL || t->flows == NULL)
        goto nomem;
    for (i = 0; i < t->nbuckets; i++)
        t->buckets[i] = -1;
    t->free_head = -1;
    t->lru_head = t->lru_tail = -1;
    *out = t;
    return 0;
nomem:
    fgx_err("flow table: cannot allocate %zu flows", capacity);
    if (t != NULL) {
        free(t->buckets);
        free(t->flows);
        free(t);
    }
    return -ENOMEM;
}

static void lru_unlink(struct fgx_flow_table *t, struct fgx_flow *f)
{
    if (f->lprev >= 0)
        t->flows[f->lprev].lnext = f->lnext;
    else
        t->lru_head = f->lnext;
    if (f->lnext >= 0)
        t->flows[f->lnext].lprev = f->lprev;
    else
        t->lru_tail = f->lprev;
}

static void lru_append(struct fgx_flow_table *t, struct fgx_flow *f)
{
    int32_t i = (int32_t)(f - t->flows);

    f->lnext = -1;
    f->lprev = t->lru_tail;
    if (t->lru_tail >= 0)
        t->flows[t->lru_tail].lnext = i;
    else
        t->lru_head = i;
    t->lru_tail = i;
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

struct fgx_flow *fgx_flow_insert(struct fgx_flow_table *t, const struct fgx_flow_key *key,
                                 uint64_t now_ms)
{
    struct fgx_flow *f;
    size_t b;
    int32_t i;

    if (t->free_head < 0 && t->unused == t->capacity)
        fgx_flow_remove(t, &t->flows[t->lru_head]);
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
    fgx_reasm_init(&f->dir[0]);
    fgx_reasm_init(&f->dir[1]);
    b = key_hash(key) & (t->nbuckets - 1);
    f->hnext = t->buckets[b];
    t->buckets[b] = i;
    lru_append(t, f);
    t->count++;
    return f;
}

size_t fgx_flow_expire(struct fgx_flow_table *t, uint64_t now_ms, uint64_t idle_ms)
{
    size_t n = 0;

    while (t->lru_head >= 0 && t->flows[t->lru_head].last_ms + idle_ms < now_ms) {
        fgx_flow_remove(t, &t->flows[t->lru_head]);
        n++;
    }
    return n;
}

size_t fgx_flow_sweep(struct fgx_flow_table *t, bool (*keep)(void *arg, struct fgx_flow *f),
                      void *arg)
{
    int32_t i = t->lru_head, next;
    size_t n = 0;

    for (; i >= 0; i = next) {
        next = t->flows[i].lnext;
        if (!keep(arg, &t->flows[i])) {
            fgx_flow_remove(t, &t->flows[i]);
            n++;
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
    while (t->lru_head >= 0)
        fgx_flow_remove(t, &t->flows[t->lru_head]);
    free(t->buckets);
    free(t->flows);
    free(t);
}
