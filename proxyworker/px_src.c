/* Per-source accounting of proxyworker: how many connections each client source has open on
 * each thread, so that one address (or one IPv6 /64, what a single host can spread its addresses
 * over) cannot take every connection the proxy may hold. Counted per thread because a thread can
 * only make room among its own connections: the kernel spreads a source's connections over the
 * threads by hash, unevenly at times, and a thread at its share always holds some to close. Also the memory-derived default of the
 * connection limit. */
#include "px.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

int px_src_init(struct px_src_table *t, unsigned max_conns)
{
    size_t n = 16;

    memset(t, 0, sizeof(*t));
    /* At most max_conns sources are in at once (each holds a connection): a load of 1/2 keeps
     * the probes short. */
    while (n < (size_t)max_conns * 2)
        n <<= 1;
    t->slot = calloc(n, sizeof(*t->slot));
    if (t->slot == NULL)
        return -ENOMEM;
    t->mask = n - 1;
    if (getrandom(&t->seed, sizeof(t->seed), GRND_NONBLOCK) != (ssize_t)sizeof(t->seed))
        t->seed = (uint64_t)(uintptr_t)t ^ 0x9e3779b97f4a7c15ull;
    pthread_mutex_init(&t->lock, NULL);
    return 0;
}

void px_src_release(struct px_src_table *t)
{
    if (t->slot == NULL)
        return;
    pthread_mutex_destroy(&t->lock);
    free(t->slot);
    t->slot = NULL;
}

static void src_key(const struct sockaddr_storage *ss, unsigned thread, uint64_t *key, uint32_t *fam)
{
    if (ss->ss_family == AF_INET) {
        uint32_t a;

        memcpy(&a, &((const struct sockaddr_in *)ss)->sin_addr, 4);
        *key = a;
        *fam = 4 | thread << 8;
    } else {
        memcpy(key, &((const struct sockaddr_in6 *)ss)->sin6_addr, 8);
        *fam = 6 | thread << 8;
    }
}

static size_t src_hash(const struct px_src_table *t, uint64_t key, uint32_t fam)
{
    uint64_t x = key ^ t->seed ^ ((uint64_t)fam << 61);

    /* splitmix64's finaliser: every key bit reaches every slot bit. */
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return (size_t)x & t->mask;
}

/* The slot holding key, or the free slot where it would go. The table is never full. */
static size_t src_find(const struct px_src_table *t, uint64_t key, uint32_t fam)
{
    size_t i = src_hash(t, key, fam);

    while (t->slot[i].count != 0 && (t->slot[i].key != key || t->slot[i].fam != fam))
        i = (i + 1) & t->mask;
    return i;
}

bool px_src_take(struct px_src_table *t, const struct sockaddr_storage *ss, unsigned thread,
                 unsigned limit)
{
    uint64_t key;
    uint32_t fam;
    size_t i;
    bool ok = true;

    src_key(ss, thread, &key, &fam);
    pthread_mutex_lock(&t->lock);
    i = src_find(t, key, fam);
    if (t->slot[i].count == 0) {
        /* A new source; the table has room for twice the connection limit's sources. */
        if (t->used >= t->mask) {
            ok = false;
            goto out;
        }
        t->slot[i].key = key;
        t->slot[i].fam = fam;
        t->used++;
    } else if (limit != 0 && t->slot[i].count >= limit) {
        ok = false;
        goto out;
    }
    t->slot[i].count++;
out:
    pthread_mutex_unlock(&t->lock);
    return ok;
}

void px_src_put(struct px_src_table *t, const struct sockaddr_storage *ss, unsigned thread)
{
    uint64_t key;
    uint32_t fam;
    size_t i, j;

    src_key(ss, thread, &key, &fam);
    pthread_mutex_lock(&t->lock);
    i = src_find(t, key, fam);
    if (t->slot[i].count == 0 || --t->slot[i].count != 0)
        goto out;
    /* The source's last connection: free its slot, moving back the entries of the probe run
     * after it that may live there (backward-shift deletion keeps every key findable without
     * tombstones). */
    t->used--;
    for (j = (i + 1) & t->mask; t->slot[j].count != 0; j = (j + 1) & t->mask) {
        size_t h = src_hash(t, t->slot[j].key, t->slot[j].fam);

        /* j's entry may move to i when its home h is not in (i, j] (cyclically). */
        if (i <= j ? (h > i && h <= j) : (h > i || h <= j))
            continue;
        t->slot[i] = t->slot[j];
        t->slot[j].count = 0;
        i = j;
    }
out:
    pthread_mutex_unlock(&t->lock);
}

unsigned px_src_count(struct px_src_table *t, const struct sockaddr_storage *ss, unsigned thread)
{
    uint64_t key;
    uint32_t fam;
    unsigned n;

    src_key(ss, thread, &key, &fam);
    pthread_mutex_lock(&t->lock);
    n = t->slot[src_find(t, key, fam)].count;
    pthread_mutex_unlock(&t->lock);
    return n;
}

bool px_src_same(const struct sockaddr_storage *a, const struct sockaddr_storage *b)
{
    uint64_t ka, kb;
    uint32_t fa, fb;

    src_key(a, 0, &ka, &fa);
    src_key(b, 0, &kb, &fb);
    return ka == kb && fa == fb;
}

unsigned px_max_conns_default(uint64_t phys, uint64_t nofile)
{
    uint64_t n = phys / PX_MEM_SHARE / PX_CONN_COST;

    if (n < PX_MAX_CONNS_MIN)
        n = PX_MAX_CONNS_MIN;
    if (n > PX_MAX_CONNS_MAX)
        n = PX_MAX_CONNS_MAX;
    /* Each connection holds two descriptors; keep 64 for listeners, the control channel and
     * the resets still waiting. A connection the descriptors cannot take would be refused by
     * accept() itself, before any limit could make room. */
    if (nofile > 0 && n > (nofile > 128 ? (nofile - 64) / 2 : 32))
        n = nofile > 128 ? (nofile - 64) / 2 : 32;
    return (unsigned)n;
}
