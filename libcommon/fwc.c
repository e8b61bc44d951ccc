/* The firewall's interval compiler (fgx/fwc.h): ordered first-match rules -> a DAG of interval
 * lookups, one field per level, handed to controld's nftables stage (ctl_fw_nft.c).
 *
 * A node holds the rules still possible for the packet (in their order) and the fields not yet
 * looked at. It splits the next field some of those rules narrow into elementary intervals
 * (every rule's bounds are cut points, so inside one interval each rule either contains the
 * whole interval or none of it); each interval's child keeps the rules that contain it, in
 * order. A list whose first rule covers every field left is a leaf: that rule is the first
 * match for every packet that gets there, and what follows it is dead. Because the intervals of
 * a node are disjoint and cover the field, following the one interval that holds the packet's
 * value at each level and taking the first rule left is exactly the first match of the list.
 *
 * Identical children (same field, same rule list) are made once (a hash table of lists), so
 * are nodes that come out alike from different lists (a hash table of nodes by content), and
 * adjacent intervals going to the same child are merged. The worst case is still the product
 * of the fields' interval counts (rules that overlap on every field, like n source addresses
 * times n ports), so the compile counts its elements and its work and returns -E2BIG past the
 * limits; controld then compiles the list in consecutive pieces, each a DAG of its own looked
 * up in turn (still first match: a piece only falls through when none of its rules match). */
#include "fgx/fwc.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

void fgx_fwc_widths(int family, uint8_t width[FGX_FWC_NDIMS])
{
    width[FGX_FWC_IIF] = 16;
    width[FGX_FWC_OIF] = 16;
    width[FGX_FWC_PROTO] = 1;
    width[FGX_FWC_DPORT] = 2;
    width[FGX_FWC_SPORT] = 2;
    width[FGX_FWC_DADDR] = family == 6 ? 16 : 4;
    width[FGX_FWC_SADDR] = family == 6 ? 16 : 4;
}

void fgx_fwc_range_full(struct fgx_fwc_range *r, uint8_t width)
{
    memset(r, 0, sizeof(*r));
    memset(r->hi, 0xff, width);
}

static bool key_is_max(const uint8_t *k, uint8_t w)
{
    for (uint8_t i = 0; i < w; i++)
        if (k[i] != 0xff)
            return false;
    return true;
}

static bool key_is_zero(const uint8_t *k, uint8_t w)
{
    for (uint8_t i = 0; i < w; i++)
        if (k[i] != 0)
            return false;
    return true;
}

/* k += 1; the caller has checked that k is not the maximum. */
static void key_inc(uint8_t *k, uint8_t w)
{
    for (int i = w - 1; i >= 0; i--)
        if (++k[i] != 0)
            return;
}

static void key_dec(uint8_t *k, uint8_t w)
{
    for (int i = w - 1; i >= 0; i--)
        if (k[i]-- != 0)
            return;
}

/* ---- state ---- */

struct memo_ent {
    uint64_t hash;
    uint32_t off, len; /* the list in pool */
    uint8_t dim, used;
    struct fgx_fwc_target to;
};

struct event {
    uint8_t key[FGX_FWC_KEY_MAX];
    uint32_t pos;
    uint8_t end; /* 0: the rule starts here; 1: it ended just before */
};

struct fwc {
    const struct fgx_fwc_rule *rules;
    const uint8_t *width;
    struct fgx_fwc_limits lim;
    size_t work;
    /* full[i] bit d: rule i covers the whole field d */
    uint8_t *full;
    /* fullfrom[i]: the lowest d such that rule i covers every field from d on */
    uint8_t *fullfrom;
    uint32_t *pool;
    size_t npool, cappool;
    struct memo_ent *memo;
    size_t nmemo, capmemo;
    struct fgx_fwc_prog *p;
    size_t capnodes, capelems;
    /* nodes by content (field and elements): two lists that split alike share one node */
    uint32_t *nodeset; /* node index + 1, 0: empty */
    size_t capnodeset;
    int err;
};

static int grow(void **buf, size_t *cap, size_t need, size_t size)
{
    size_t ncap = *cap ? *cap : 64;
    void *nb;

    if (need <= *cap)
        return 0;
    while (ncap < need)
        ncap *= 2;
    nb = realloc(*buf, ncap * size);
    if (!nb)
        return -ENOMEM;
    *buf = nb;
    *cap = ncap;
    return 0;
}

static uint64_t list_hash(uint8_t dim, const uint32_t *l, size_t n)
{
    uint64_t h = 1469598103934665603ull ^ dim;

    for (size_t i = 0; i < n; i++) {
        h ^= l[i];
        h *= 1099511628211ull;
    }
    return h ^ (h >> 29);
}

static struct memo_ent *memo_find(struct fwc *c, uint8_t dim, const uint32_t *l, size_t n,
                                  uint64_t h)
{
    size_t mask = c->capmemo - 1;

    if (c->capmemo == 0)
        return NULL;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
        struct memo_ent *e = &c->memo[i];

        if (!e->used)
            return e;
        if (e->hash == h && e->dim == dim && e->len == n &&
            memcmp(&c->pool[e->off], l, n * sizeof(*l)) == 0)
            return e;
    }
}

static int memo_rehash(struct fwc *c)
{
    size_t ncap = c->capmemo ? c->capmemo * 2 : 1024;
    struct memo_ent *old = c->memo, *nm = calloc(ncap, sizeof(*nm));
    size_t ocap = c->capmemo;

    if (!nm)
        return -ENOMEM;
    c->memo = nm;
    c->capmemo = ncap;
    for (size_t i = 0; i < ocap; i++) {
        if (old[i].used) {
            size_t j = old[i].hash & (ncap - 1);

            while (nm[j].used)
                j = (j + 1) & (ncap - 1);
            nm[j] = old[i];
        }
    }
    free(old);
    return 0;
}

static int memo_put(struct fwc *c, uint8_t dim, const uint32_t *l, size_t n, uint64_t h,
                    struct fgx_fwc_target to)
{
    struct memo_ent *e;

    if ((c->nmemo + 1) * 2 > c->capmemo && memo_rehash(c) < 0)
        return -ENOMEM;
    if (grow((void **)&c->pool, &c->cappool, c->npool + n, sizeof(*c->pool)) < 0)
        return -ENOMEM;
    memcpy(&c->pool[c->npool], l, n * sizeof(*l));
    e = memo_find(c, dim, l, n, h);
    e->used = 1;
    e->hash = h;
    e->dim = dim;
    e->off = (uint32_t)c->npool;
    e->len = (uint32_t)n;
    e->to = to;
    c->npool += n;
    c->nmemo++;
    return 0;
}

static int cmp_event(const void *a, const void *b, void *w)
{
    const struct event *x = a, *y = b;
    int r = memcmp(x->key, y->key, *(const uint8_t *)w);

    return r;
}

/* qsort_r with the key width as its argument */
static void sort_events(struct event *ev, size_t n, uint8_t w)
{
    qsort_r(ev, n, sizeof(*ev), cmp_event, &w);
}

/* ---- nodes by content ---- */

static uint64_t node_hash(uint8_t dim, const struct fgx_fwc_elem *e, size_t n)
{
    uint64_t h = 1469598103934665603ull ^ dim;

    for (size_t i = 0; i < n; i++) {
        const uint8_t *b = (const uint8_t *)&e[i];

        for (size_t k = 0; k < 2 * FGX_FWC_KEY_MAX; k++) {
            h ^= b[k];
            h *= 1099511628211ull;
        }
        h ^= (uint64_t)e[i].to.is_node << 40 ^ e[i].to.v;
        h *= 1099511628211ull;
    }
    return h ^ (h >> 31);
}

static bool node_equal(const struct fwc *c, uint32_t idx, uint8_t dim, const struct fgx_fwc_elem *e,
                       size_t n)
{
    const struct fgx_fwc_node *nd = &c->p->nodes[idx];

    if (nd->dim != dim || nd->n != n)
        return false;
    for (size_t i = 0; i < n; i++) {
        const struct fgx_fwc_elem *a = &c->p->elems[nd->first + i];

        if (memcmp(a->lo, e[i].lo, FGX_FWC_KEY_MAX) != 0 ||
            memcmp(a->hi, e[i].hi, FGX_FWC_KEY_MAX) != 0 || a->to.is_node != e[i].to.is_node ||
            a->to.v != e[i].to.v)
            return false;
    }
    return true;
}

/* The slot of a node equal to (dim, e[0..n)), or the empty slot where it would go. */
static uint32_t *nodeset_slot(struct fwc *c, uint64_t h, uint8_t dim, const struct fgx_fwc_elem *e,
                              size_t n)
{
    size_t mask = c->capnodeset - 1;

    for (size_t i = h & mask;; i = (i + 1) & mask) {
        uint32_t *slot = &c->nodeset[i];

        if (*slot == 0 || node_equal(c, *slot - 1, dim, e, n))
            return slot;
    }
}

static int nodeset_grow(struct fwc *c)
{
    size_t ncap = c->capnodeset ? c->capnodeset * 2 : 1024;
    uint32_t *old = c->nodeset, *nn = calloc(ncap, sizeof(*nn));
    size_t ocap = c->capnodeset;

    if (!nn)
        return -ENOMEM;
    c->nodeset = nn;
    c->capnodeset = ncap;
    for (size_t i = 0; i < ocap; i++) {
        if (old[i]) {
            const struct fgx_fwc_node *nd = &c->p->nodes[old[i] - 1];
            uint64_t h = node_hash(nd->dim, &c->p->elems[nd->first], nd->n);

            *nodeset_slot(c, h, nd->dim, &c->p->elems[nd->first], nd->n) = old[i];
        }
    }
    free(old);
    return 0;
}

/* ---- the split ---- */

/* Resolve the list l[0..n) (rule indices, in order) from field dim on. Returns 0 with *has set
 * to 0 when no rule remains, or with *to filled. l is the caller's scratch and stays valid. */
static int resolve(struct fwc *c, uint8_t dim, const uint32_t *l, size_t n, int *has,
                   struct fgx_fwc_target *to);

static int split(struct fwc *c, uint8_t d, const uint32_t *l, size_t m, struct fgx_fwc_target *to)
{
    uint8_t w = c->width[d];
    size_t nwords = (m + 63) / 64, nev = 0, nlocal = 0, caplocal = 0;
    uint64_t *active = calloc(nwords ? nwords : 1, sizeof(*active));
    struct event *ev = malloc(2 * m * sizeof(*ev));
    uint32_t *child = malloc(m * sizeof(*child));
    struct fgx_fwc_elem *local = NULL;
    uint8_t cur[FGX_FWC_KEY_MAX];
    bool prev_adjacent = false;
    int rc = 0;
    size_t i;

    if (!active || !ev || !child) {
        rc = -ENOMEM;
        goto out;
    }
    for (i = 0; i < m; i++) {
        const struct fgx_fwc_range *r = &c->rules[l[i]].f[d];

        memcpy(ev[nev].key, r->lo, FGX_FWC_KEY_MAX);
        ev[nev].pos = (uint32_t)i;
        ev[nev++].end = 0;
        if (!key_is_max(r->hi, w)) {
            memcpy(ev[nev].key, r->hi, FGX_FWC_KEY_MAX);
            key_inc(ev[nev].key, w);
            ev[nev].pos = (uint32_t)i;
            ev[nev++].end = 1;
        }
    }
    sort_events(ev, nev, w);
    memset(cur, 0, sizeof(cur));
    i = 0;
    for (;;) {
        int has = 0;
        size_t nc = 0;
        struct fgx_fwc_target ct;
        uint8_t hi[FGX_FWC_KEY_MAX];
        bool last;

        /* the events at cur: an end and a start at one point are one interval boundary */
        while (i < nev && memcmp(ev[i].key, cur, w) == 0) {
            uint64_t bit = 1ull << (ev[i].pos % 64);

            if (ev[i].end)
                active[ev[i].pos / 64] &= ~bit;
            else
                active[ev[i].pos / 64] |= bit;
            i++;
        }
        last = i == nev;
        memset(hi, 0, sizeof(hi));
        if (last) {
            memset(hi, 0xff, w);
        } else {
            memcpy(hi, ev[i].key, w);
            key_dec(hi, w);
        }
        for (size_t wd = 0; wd < nwords; wd++) {
            uint64_t b = active[wd];

            while (b) {
                child[nc++] = l[wd * 64 + (size_t)__builtin_ctzll(b)];
                b &= b - 1;
            }
        }
        c->work += nwords + nc;
        if (c->work > c->lim.max_work) {
            rc = -E2BIG;
            goto out;
        }
        rc = resolve(c, (uint8_t)(d + 1), child, nc, &has, &ct);
        if (rc < 0)
            goto out;
        if (!has) {
            prev_adjacent = false;
        } else if (prev_adjacent && local[nlocal - 1].to.is_node == ct.is_node &&
                   local[nlocal - 1].to.v == ct.v) {
            memcpy(local[nlocal - 1].hi, hi, FGX_FWC_KEY_MAX);
        } else {
            if (grow((void **)&local, &caplocal, nlocal + 1, sizeof(*local)) < 0) {
                rc = -ENOMEM;
                goto out;
            }
            memset(&local[nlocal], 0, sizeof(local[nlocal]));
            memcpy(local[nlocal].lo, cur, w);
            memcpy(local[nlocal].hi, hi, w);
            local[nlocal].to = ct;
            nlocal++;
            prev_adjacent = true;
        }
        if (last)
            break;
        memcpy(cur, ev[i].key, w);
    }
    {
        uint64_t h = node_hash(d, local, nlocal);
        uint32_t *slot;

        if ((c->p->nnodes + 1) * 2 > c->capnodeset && nodeset_grow(c) < 0) {
            rc = -ENOMEM;
            goto out;
        }
        slot = nodeset_slot(c, h, d, local, nlocal);
        if (*slot) {
            to->is_node = 1;
            to->v = *slot - 1;
            goto out;
        }
    }
    if (c->p->nelems + nlocal > c->lim.max_elems) {
        rc = -E2BIG;
        goto out;
    }
    if (grow((void **)&c->p->elems, &c->capelems, c->p->nelems + nlocal, sizeof(*local)) < 0 ||
        grow((void **)&c->p->nodes, &c->capnodes, c->p->nnodes + 1, sizeof(*c->p->nodes)) < 0) {
        rc = -ENOMEM;
        goto out;
    }
    memcpy(&c->p->elems[c->p->nelems], local, nlocal * sizeof(*local));
    c->p->nodes[c->p->nnodes].dim = d;
    c->p->nodes[c->p->nnodes].first = c->p->nelems;
    c->p->nodes[c->p->nnodes].n = nlocal;
    c->p->nelems += nlocal;
    to->is_node = 1;
    to->v = (uint32_t)c->p->nnodes++;
    *nodeset_slot(c, node_hash(d, local, nlocal), d, local, nlocal) = to->v + 1;
out:
    free(local);
    free(child);
    free(ev);
    free(active);
    return rc;
}

static int resolve(struct fwc *c, uint8_t dim, const uint32_t *l, size_t n, int *has,
                   struct fgx_fwc_target *to)
{
    struct memo_ent *e;
    uint8_t d = FGX_FWC_NDIMS;
    uint64_t h;
    size_t m;
    int rc;

    *has = 0;
    if (n == 0)
        return 0;
    /* Everything after the first rule that covers the fields left is dead. */
    for (m = 0; m < n; m++)
        if (c->fullfrom[l[m]] <= dim)
            break;
    if (m == 0) {
        *has = 1;
        to->is_node = 0;
        to->v = c->rules[l[0]].verdict;
        return 0;
    }
    if (m < n)
        m++;
    /* The next field that some rule still possible narrows. */
    for (uint8_t k = dim; k < FGX_FWC_NDIMS && d == FGX_FWC_NDIMS; k++)
        for (size_t i = 0; i < m; i++)
            if (!(c->full[l[i]] & (1u << k))) {
                d = k;
                break;
            }
    /* l[0] does not cover every field from dim on, so some field is narrowed */
    h = list_hash(d, l, m);
    e = memo_find(c, d, l, m, h);
    if (e && e->used) {
        *has = 1;
        *to = e->to;
        return 0;
    }
    rc = split(c, d, l, m, to);
    if (rc < 0)
        return rc;
    *has = 1;
    return memo_put(c, d, l, m, h, *to);
}

int fgx_fwc_compile(const struct fgx_fwc_rule *rules, size_t n, const uint8_t width[FGX_FWC_NDIMS],
                    const struct fgx_fwc_limits *lim, struct fgx_fwc_prog *out)
{
    struct fwc c = {.rules = rules, .width = width, .p = out};
    uint32_t *all = NULL;
    int rc = 0, has = 0;

    memset(out, 0, sizeof(*out));
    c.lim.max_elems = lim && lim->max_elems ? lim->max_elems : FGX_FWC_DEFAULT_MAX_ELEMS;
    c.lim.max_work = lim && lim->max_work ? lim->max_work : FGX_FWC_DEFAULT_MAX_WORK;
    if (n > UINT32_MAX)
        return -E2BIG;
    c.full = calloc(n ? n : 1, 1);
    c.fullfrom = calloc(n ? n : 1, 1);
    all = malloc((n ? n : 1) * sizeof(*all));
    if (!c.full || !c.fullfrom || !all) {
        rc = -ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        uint8_t from = FGX_FWC_NDIMS;

        for (int d = 0; d < FGX_FWC_NDIMS; d++) {
            const struct fgx_fwc_range *r = &rules[i].f[d];

            if (memcmp(r->lo, r->hi, width[d]) > 0) {
                rc = -EINVAL;
                goto out;
            }
            if (key_is_zero(r->lo, width[d]) && key_is_max(r->hi, width[d]))
                c.full[i] |= (uint8_t)(1u << d);
        }
        while (from > 0 && (c.full[i] & (1u << (from - 1))))
            from--;
        c.fullfrom[i] = from;
        all[i] = (uint32_t)i;
    }
    rc = resolve(&c, 0, all, n, &has, &out->root);
    if (rc < 0)
        goto out;
    out->has_root = has;
out:
    if (rc < 0)
        fgx_fwc_prog_release(out);
    free(all);
    free(c.full);
    free(c.fullfrom);
    free(c.pool);
    free(c.memo);
    free(c.nodeset);
    return rc;
}

void fgx_fwc_prog_release(struct fgx_fwc_prog *p)
{
    if (!p)
        return;
    free(p->nodes);
    free(p->elems);
    memset(p, 0, sizeof(*p));
}

int fgx_fwc_eval(const struct fgx_fwc_prog *p, const uint8_t width[FGX_FWC_NDIMS],
                 const uint8_t key[FGX_FWC_NDIMS][FGX_FWC_KEY_MAX], uint32_t *verdict)
{
    struct fgx_fwc_target t = p->root;

    if (!p->has_root)
        return 0;
    while (t.is_node) {
        const struct fgx_fwc_node *nd = &p->nodes[t.v];
        const uint8_t *k = key[nd->dim];
        uint8_t w = width[nd->dim];
        size_t lo = 0, hi = nd->n;

        /* the first element whose hi >= k, then check its lo */
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;

            if (memcmp(p->elems[nd->first + mid].hi, k, w) < 0)
                lo = mid + 1;
            else
                hi = mid;
        }
        if (lo == nd->n || memcmp(p->elems[nd->first + lo].lo, k, w) > 0)
            return 0;
        t = p->elems[nd->first + lo].to;
    }
    *verdict = t.v;
    return 1;
}

struct pieces {
    struct fgx_fwc_piece *v;
    size_t n, cap;
};

static int pieces_add(const struct fgx_fwc_rule *rules, size_t first, size_t n,
                      const uint8_t width[FGX_FWC_NDIMS], const struct fgx_fwc_limits *lim,
                      struct pieces *ps)
{
    struct fgx_fwc_prog prog;
    int rc;

    if (n == 0)
        return 0;
    rc = fgx_fwc_compile(rules + first, n, width, lim, &prog);
    if (rc == -E2BIG && n > 1) {
        rc = pieces_add(rules, first, n / 2, width, lim, ps);
        return rc < 0 ? rc : pieces_add(rules, first + n / 2, n - n / 2, width, lim, ps);
    }
    if (rc < 0)
        return rc;
    if (grow((void **)&ps->v, &ps->cap, ps->n + 1, sizeof(*ps->v)) < 0) {
        fgx_fwc_prog_release(&prog);
        return -ENOMEM;
    }
    ps->v[ps->n].first = first;
    ps->v[ps->n].n = n;
    ps->v[ps->n].prog = prog;
    ps->n++;
    return 0;
}

int fgx_fwc_compile_pieces(const struct fgx_fwc_rule *rules, size_t n,
                           const uint8_t width[FGX_FWC_NDIMS], const struct fgx_fwc_limits *lim,
                           struct fgx_fwc_piece **pieces, size_t *npieces)
{
    struct pieces ps = {0};
    int rc = pieces_add(rules, 0, n, width, lim, &ps);

    if (rc < 0) {
        fgx_fwc_pieces_free(ps.v, ps.n);
        return rc;
    }
    *pieces = ps.v;
    *npieces = ps.n;
    return 0;
}

void fgx_fwc_pieces_free(struct fgx_fwc_piece *pieces, size_t npieces)
{
    for (size_t i = 0; i < npieces; i++)
        fgx_fwc_prog_release(&pieces[i].prog);
    free(pieces);
}
