/* Unit tests for libcommon/fwc.c, the firewall's interval compiler: the DAG it builds must give
 * every packet the verdict of the first rule that matches it, as a plain walk of the list does,
 * on random rule sets built to overlap, touch and nest, and on hand-made edge cases. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fgx/fwc.h"

#define NO_MATCH 0xffffffffu

static uint8_t W4[FGX_FWC_NDIMS];

static void init_w(void)
{
    fgx_fwc_widths(4, W4);
}

/* Big-endian v into w bytes. */
static void put(uint8_t *k, uint8_t w, uint64_t v)
{
    memset(k, 0, FGX_FWC_KEY_MAX);
    for (int i = w - 1; i >= 0 && w - 1 - i < 8; i--) {
        k[i] = (uint8_t)v;
        v >>= 8;
    }
}

static void set_range(struct fgx_fwc_rule *r, int d, uint64_t lo, uint64_t hi)
{
    put(r->f[d].lo, W4[d], lo);
    put(r->f[d].hi, W4[d], hi);
}

static void rule_any(struct fgx_fwc_rule *r, uint32_t verdict)
{
    memset(r, 0, sizeof(*r));
    for (int d = 0; d < FGX_FWC_NDIMS; d++)
        fgx_fwc_range_full(&r->f[d], W4[d]);
    r->verdict = verdict;
}

/* The reference: walk the list. */
static uint32_t naive(const struct fgx_fwc_rule *rs, size_t n,
                      const uint8_t key[FGX_FWC_NDIMS][FGX_FWC_KEY_MAX])
{
    for (size_t i = 0; i < n; i++) {
        int d;

        for (d = 0; d < FGX_FWC_NDIMS; d++)
            if (memcmp(key[d], rs[i].f[d].lo, W4[d]) < 0 ||
                memcmp(key[d], rs[i].f[d].hi, W4[d]) > 0)
                break;
        if (d == FGX_FWC_NDIMS)
            return rs[i].verdict;
    }
    return NO_MATCH;
}

static uint32_t compiled(const struct fgx_fwc_prog *p,
                         const uint8_t key[FGX_FWC_NDIMS][FGX_FWC_KEY_MAX])
{
    uint32_t v;

    return fgx_fwc_eval(p, W4, key, &v) ? v : NO_MATCH;
}

/* Small domains, so that random rules overlap and touch: values 0..span-1 per field, a third
 * of the fields "any", and the top of the field reachable (ranges up to the maximum). */
static const uint64_t span[FGX_FWC_NDIMS] = {4, 3, 5, 12, 16, 16, 12};

static uint64_t field_max(int d)
{
    return W4[d] >= 8 ? UINT64_MAX : (1ull << (8 * W4[d])) - 1;
}

/* A value near the small domain, or at the very top of the field. */
static uint64_t pick(unsigned *seed, int d)
{
    if (rand_r(seed) % 10 == 0)
        return field_max(d) - (uint64_t)(rand_r(seed) % 2);
    return (uint64_t)(rand_r(seed) % (int)span[d]);
}

static void random_rule(unsigned *seed, struct fgx_fwc_rule *r, uint32_t verdict)
{
    rule_any(r, verdict);
    for (int d = 0; d < FGX_FWC_NDIMS; d++) {
        uint64_t a, b;

        if (rand_r(seed) % 3 == 0)
            continue;
        /* interface names are rarer in real lists */
        if ((d == FGX_FWC_IIF || d == FGX_FWC_OIF) && rand_r(seed) % 2)
            continue;
        a = pick(seed, d);
        b = rand_r(seed) % 2 ? a : pick(seed, d);
        if (a > b) {
            uint64_t t = a;
            a = b;
            b = t;
        }
        set_range(r, d, a, b);
    }
}

static void random_key(unsigned *seed, uint8_t key[FGX_FWC_NDIMS][FGX_FWC_KEY_MAX])
{
    for (int d = 0; d < FGX_FWC_NDIMS; d++)
        put(key[d], W4[d], pick(seed, d) + (rand_r(seed) % 8 == 0 ? 1 : 0));
}

/* The pieces in turn, as the kernel goes through them. */
static uint32_t compiled_pieces(const struct fgx_fwc_piece *ps, size_t n,
                                const uint8_t key[FGX_FWC_NDIMS][FGX_FWC_KEY_MAX])
{
    for (size_t i = 0; i < n; i++) {
        uint32_t v = compiled(&ps[i].prog, key);

        if (v != NO_MATCH)
            return v;
    }
    return NO_MATCH;
}

static void check_random(unsigned seed, size_t nrules, size_t npkts, uint32_t nverdicts,
                         const struct fgx_fwc_limits *lim)
{
    struct fgx_fwc_rule *rs = calloc(nrules, sizeof(*rs));
    struct fgx_fwc_piece *ps = NULL;
    size_t nps = 0;
    uint8_t key[FGX_FWC_NDIMS][FGX_FWC_KEY_MAX];
    unsigned s = seed;

    cr_assert_not_null(rs);
    for (size_t i = 0; i < nrules; i++)
        random_rule(&s, &rs[i], (uint32_t)(rand_r(&s) % (int)nverdicts));
    cr_assert_eq(fgx_fwc_compile_pieces(rs, nrules, W4, lim, &ps, &nps), 0, "seed %u", seed);
    cr_assert_geq(nps, 1);
    for (size_t k = 0; k < npkts; k++) {
        random_key(&s, key);
        cr_assert_eq(compiled_pieces(ps, nps, key), naive(rs, nrules, key),
                     "seed %u, packet %zu", seed, k);
    }
    /* every rule's own corners: where off-by-ones live */
    for (size_t i = 0; i < nrules; i++) {
        for (int corner = 0; corner < 4; corner++) {
            for (int d = 0; d < FGX_FWC_NDIMS; d++)
                memcpy(key[d], (corner >> (d % 2)) & 1 ? rs[i].f[d].hi : rs[i].f[d].lo,
                       FGX_FWC_KEY_MAX);
            cr_assert_eq(compiled_pieces(ps, nps, key), naive(rs, nrules, key),
                         "seed %u, corner of %zu", seed, i);
        }
    }
    fgx_fwc_pieces_free(ps, nps);
    free(rs);
}

Test(fwc, random_rule_sets_match_first_match_walk, .init = init_w)
{
    for (unsigned seed = 1; seed <= 300; seed++)
        check_random(seed, 1 + seed % 40, 400, 2 + seed % 3, NULL);
}

/* With tight limits the list is cut in pieces; the pieces in turn still give the first match. */
Test(fwc, random_rule_sets_in_pieces, .init = init_w)
{
    struct fgx_fwc_limits lim = {.max_elems = 40, .max_work = 4000};

    for (unsigned seed = 500; seed < 600; seed++)
        check_random(seed, 10 + seed % 50, 400, 3, &lim);
}

Test(fwc, random_large_rule_sets, .init = init_w)
{
    for (unsigned seed = 1000; seed < 1010; seed++)
        check_random(seed, 300, 3000, 3, NULL);
}

/* An earlier rule wins over a later one that also matches, whatever their verdicts. */
Test(fwc, first_match_order, .init = init_w)
{
    struct fgx_fwc_rule rs[3];
    struct fgx_fwc_prog p;
    uint8_t key[FGX_FWC_NDIMS][FGX_FWC_KEY_MAX];

    rule_any(&rs[0], 1);
    set_range(&rs[0], FGX_FWC_DPORT, 80, 80);
    set_range(&rs[0], FGX_FWC_SADDR, 0x0a000005, 0x0a000005);
    rule_any(&rs[1], 2);
    set_range(&rs[1], FGX_FWC_DPORT, 1, 1000);
    rule_any(&rs[2], 3);
    cr_assert_eq(fgx_fwc_compile(rs, 3, W4, NULL, &p), 0);
    for (int d = 0; d < FGX_FWC_NDIMS; d++)
        put(key[d], W4[d], 0);
    put(key[FGX_FWC_DPORT], 2, 80);
    put(key[FGX_FWC_SADDR], 4, 0x0a000005);
    cr_assert_eq(compiled(&p, key), 1);
    put(key[FGX_FWC_SADDR], 4, 0x0a000006);
    cr_assert_eq(compiled(&p, key), 2);
    put(key[FGX_FWC_DPORT], 2, 1001);
    cr_assert_eq(compiled(&p, key), 3);
    fgx_fwc_prog_release(&p);

    /* the same rules the other way round: the catch-all first shadows everything */
    {
        struct fgx_fwc_rule rev[3] = {rs[2], rs[1], rs[0]};

        cr_assert_eq(fgx_fwc_compile(rev, 3, W4, NULL, &p), 0);
        cr_assert_eq(p.nnodes, 0);
        cr_assert(p.has_root && !p.root.is_node && p.root.v == 3);
        cr_assert_eq(compiled(&p, key), 3);
        fgx_fwc_prog_release(&p);
    }
}

/* Adjacent ranges with one verdict become one interval; with different ones they stay two,
 * and the values around their common bound go each its own way. */
Test(fwc, adjacent_ranges, .init = init_w)
{
    struct fgx_fwc_rule rs[3];
    struct fgx_fwc_prog p;
    uint8_t key[FGX_FWC_NDIMS][FGX_FWC_KEY_MAX] = {{0}};

    rule_any(&rs[0], 7);
    set_range(&rs[0], FGX_FWC_DPORT, 10, 19);
    rule_any(&rs[1], 7);
    set_range(&rs[1], FGX_FWC_DPORT, 20, 29);
    rule_any(&rs[2], 8);
    set_range(&rs[2], FGX_FWC_DPORT, 30, 65535);
    cr_assert_eq(fgx_fwc_compile(rs, 3, W4, NULL, &p), 0);
    cr_assert_eq(p.nnodes, 1);
    cr_assert_eq(p.nelems, 2, "10-29 merged, 30-65535 apart: %zu", p.nelems);
    put(key[FGX_FWC_DPORT], 2, 9);
    cr_assert_eq(compiled(&p, key), NO_MATCH);
    put(key[FGX_FWC_DPORT], 2, 10);
    cr_assert_eq(compiled(&p, key), 7);
    put(key[FGX_FWC_DPORT], 2, 29);
    cr_assert_eq(compiled(&p, key), 7);
    put(key[FGX_FWC_DPORT], 2, 30);
    cr_assert_eq(compiled(&p, key), 8);
    put(key[FGX_FWC_DPORT], 2, 65535);
    cr_assert_eq(compiled(&p, key), 8);
    fgx_fwc_prog_release(&p);
}

/* The benchmark's shape: n rules on distinct ports, all misses but the last: a packet costs
 * one lookup per narrowed field (proto, then port), not n comparisons. */
Test(fwc, ten_thousand_port_rules_stay_two_levels, .init = init_w)
{
    size_t n = 10000;
    struct fgx_fwc_rule *rs = calloc(n, sizeof(*rs));
    struct fgx_fwc_prog p;
    uint8_t key[FGX_FWC_NDIMS][FGX_FWC_KEY_MAX] = {{0}};

    cr_assert_not_null(rs);
    for (size_t i = 0; i < n; i++) {
        rule_any(&rs[i], i + 1 < n ? 1 : 2);
        set_range(&rs[i], FGX_FWC_PROTO, 17, 17);
        set_range(&rs[i], FGX_FWC_DPORT, 20000 + 2 * i, 20000 + 2 * i);
    }
    cr_assert_eq(fgx_fwc_compile(rs, n, W4, NULL, &p), 0);
    cr_assert_eq(p.nnodes, 2);
    cr_assert_leq(p.nelems, 1 + n);
    put(key[FGX_FWC_PROTO], 1, 17);
    put(key[FGX_FWC_DPORT], 2, 20000 + 2 * (n - 1));
    cr_assert_eq(compiled(&p, key), 2);
    put(key[FGX_FWC_DPORT], 2, 20001);
    cr_assert_eq(compiled(&p, key), NO_MATCH);
    fgx_fwc_prog_release(&p);
    free(rs);
}

/* Rules that overlap on every field multiply; past the limit the compile says so and keeps
 * nothing, and the same list in pieces compiles (what controld does). */
Test(fwc, blowup_is_bounded, .init = init_w)
{
    size_t n = 400;
    struct fgx_fwc_rule *rs = calloc(n, sizeof(*rs));
    struct fgx_fwc_limits lim = {.max_elems = 5000, .max_work = 0};
    struct fgx_fwc_prog p;

    cr_assert_not_null(rs);
    /* source i x port i: each source-interval's child keeps its own port and every other
     * rule's range that covers it */
    for (size_t i = 0; i < n; i++) {
        rule_any(&rs[i], (uint32_t)(i % 2));
        set_range(&rs[i], FGX_FWC_SADDR, i, n + i);
        set_range(&rs[i], FGX_FWC_DPORT, i, 2 * n - i);
    }
    cr_assert_eq(fgx_fwc_compile(rs, n, W4, &lim, &p), -E2BIG);
    cr_assert_eq(p.nodes, NULL);
    cr_assert_eq(fgx_fwc_compile(rs, 20, W4, &lim, &p), 0);
    fgx_fwc_prog_release(&p);
    free(rs);
}

Test(fwc, bad_range_refused, .init = init_w)
{
    struct fgx_fwc_rule r;
    struct fgx_fwc_prog p;

    rule_any(&r, 1);
    set_range(&r, FGX_FWC_DPORT, 10, 9);
    cr_assert_eq(fgx_fwc_compile(&r, 1, W4, NULL, &p), -EINVAL);
}

Test(fwc, empty_list_falls_through, .init = init_w)
{
    struct fgx_fwc_prog p;
    uint8_t key[FGX_FWC_NDIMS][FGX_FWC_KEY_MAX] = {{0}};

    cr_assert_eq(fgx_fwc_compile(NULL, 0, W4, NULL, &p), 0);
    cr_assert_eq(p.has_root, 0);
    cr_assert_eq(compiled(&p, key), NO_MATCH);
    fgx_fwc_prog_release(&p);
}

/* "both" is two rules (TCP, UDP) with different indices: their subtrees come out alike and are
 * one node each, not two. */
Test(fwc, alike_nodes_are_shared, .init = init_w)
{
    struct fgx_fwc_rule rs[2];
    struct fgx_fwc_prog p;
    uint8_t key[FGX_FWC_NDIMS][FGX_FWC_KEY_MAX] = {{0}};

    for (int i = 0; i < 2; i++) {
        rule_any(&rs[i], 2);
        set_range(&rs[i], FGX_FWC_PROTO, i ? 17 : 6, i ? 17 : 6);
        set_range(&rs[i], FGX_FWC_DPORT, 80, 80);
        set_range(&rs[i], FGX_FWC_SADDR, 0x0a000000, 0x0affffff);
    }
    cr_assert_eq(fgx_fwc_compile(rs, 2, W4, NULL, &p), 0);
    cr_assert_eq(p.nnodes, 3, "proto, dport, saddr: %zu nodes", p.nnodes);
    put(key[FGX_FWC_PROTO], 1, 17);
    put(key[FGX_FWC_DPORT], 2, 80);
    put(key[FGX_FWC_SADDR], 4, 0x0a010203);
    cr_assert_eq(compiled(&p, key), 2);
    put(key[FGX_FWC_PROTO], 1, 1);
    cr_assert_eq(compiled(&p, key), NO_MATCH);
    fgx_fwc_prog_release(&p);
}
