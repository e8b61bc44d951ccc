/* The listeners' connection limits (fgx/connlimit.h): which connections go when a source, or
 * every source together, holds too many. */
#include "fgx/connlimit.h"

#include <stdlib.h>
#include <string.h>

static size_t src_len(const struct fgx_peer *p)
{
    return p->family == 4 ? 4 : 8; /* IPv6: one /64, as an attacker holds one */
}

bool fgx_conn_same_src(const struct fgx_peer *a, const struct fgx_peer *b)
{
    return a->family == b->family && memcmp(a->addr, b->addr, src_len(a)) == 0;
}

/* What goes first within a source: 0 silent, 1 in its handshake or first request, 2 idle,
 * 3 busy (never). The arrival counts as one that is about to speak. */
static int tier(const struct fgx_conn_cand *c)
{
    if (c->kind == FGX_CONN_BUSY)
        return 3;
    if (c->kind == FGX_CONN_IDLE)
        return 2;
    return c->silent && !c->arrival ? 0 : 1;
}

static int cand_cmp(const void *pa, const void *pb)
{
    const struct fgx_conn_cand *a = pa, *b = pb;
    int d = a->src.family - b->src.family;

    if (d == 0)
        d = memcmp(a->src.addr, b->src.addr, src_len(&a->src));
    if (d == 0)
        d = tier(a) - tier(b);
    if (d == 0)
        d = a->since_ms < b->since_ms ? -1 : a->since_ms > b->since_ms;
    if (d == 0)
        d = a->arrival - b->arrival; /* the arrival is the newest of its equals */
    if (d == 0)
        d = a->tag < b->tag ? -1 : a->tag > b->tag;
    return d;
}

/* The end of the source group starting at i. */
static size_t group_end(const struct fgx_conn_cand *c, size_t n, size_t i)
{
    size_t j = i + 1;

    while (j < n && fgx_conn_same_src(&c[i].src, &c[j].src))
        j++;
    return j;
}

/* For the global limit: the next connection to take, from the source holding the most (with
 * two at least: a source's last connection stays); SIZE_MAX if none can be taken. */
static size_t full_victim(const struct fgx_conn_cand *c, size_t n)
{
    size_t best = SIZE_MAX, best_count = 0;

    for (size_t i = 0, j; i < n; i = j) {
        size_t count = 0, first = SIZE_MAX;

        j = group_end(c, n, i);
        for (size_t k = i; k < j; k++) {
            if (c[k].cut)
                continue;
            count++;
            if (first == SIZE_MAX && tier(&c[k]) < 3)
                first = k;
        }
        if (count < 2 || first == SIZE_MAX)
            continue;
        if (count > best_count || (count == best_count && c[first].since_ms < c[best].since_ms)) {
            best = first;
            best_count = count;
        }
    }
    return best;
}

size_t fgx_connlimit_pick(const struct fgx_connlimit *lim, struct fgx_conn_cand *c, size_t n)
{
    size_t total = 0, cuts = 0, arrival = SIZE_MAX, arrival_others = 0, limit;

    if (n == 0)
        return 0;
    for (size_t i = 0; i < n; i++)
        c[i].cut = FGX_CUT_NONE;
    qsort(c, n, sizeof(*c), cand_cmp);
    /* 1: per source */
    for (size_t i = 0, j; i < n; i = j) {
        size_t count;

        j = group_end(c, n, i);
        count = j - i;
        for (size_t k = i; k < j && lim->per_src && count > lim->per_src; k++) {
            if (tier(&c[k]) < 3) {
                c[k].cut = FGX_CUT_PER_SRC;
                count--;
                cuts++;
            }
        }
        for (size_t k = i; k < j; k++)
            if (c[k].arrival) {
                arrival = k;
                arrival_others = count - (c[k].cut ? 0 : 1);
            }
        total += count;
    }
    if (lim->max == 0)
        return cuts;
    /* 2: in all; an arrival whose source holds some already stays out of the reserve */
    limit = lim->max;
    if (arrival != SIZE_MAX && !c[arrival].cut && arrival_others > 0 && lim->reserve < lim->max)
        limit = lim->max - lim->reserve;
    while (total > limit) {
        size_t v = full_victim(c, n);

        if (v == SIZE_MAX) {
            /* nothing can be taken: the arrival, if any, is refused */
            if (arrival != SIZE_MAX && !c[arrival].cut) {
                c[arrival].cut = FGX_CUT_FULL;
                cuts++;
            }
            break;
        }
        c[v].cut = FGX_CUT_FULL;
        cuts++;
        total--;
        if (v == arrival)
            break;
    }
    return cuts;
}
