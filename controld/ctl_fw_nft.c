/* controld stage: the firewall's nftables table. Takes the plan ctl_fw.c compiled (per hook
 * and family, the pieces of interval DAGs from libcommon/fwc.c) and writes it as one inet
 * table, replaced whole in one netlink batch, so a packet meets the old list or the new one,
 * never a mix.
 *
 * Layout:
 *   input / output / forward (base chains, priority filter, the policy as chain policy):
 *     the control port from --allow peers and lo; the options (invalid, loopback,
 *     established, ICMP, DHCP); then per family and piece "meta nfproto F jump ROOT" (or the
 *     root's verdict when the piece's first rule matches every packet)
 *   one regular chain per DAG node: "<load the node's field> vmap @m<node>", the map an
 *     interval verdict map whose elements goto the child node's chain or give the verdict.
 *     A packet whose value is in no interval falls off the node chain, back to the base
 *     chain (goto keeps the jump's return point): the piece did not match it.
 *   reject : "meta l4proto tcp reject with tcp reset; reject" (ICMP port unreachable), the
 *     target of every reject verdict. */
#include "controld/ctl_fw_nft.h"
#include "controld/ctl_nftx.h"

/* glibc's first, so that the linux/ headers defer to its definitions */
#include <netinet/in.h>

#include <errno.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nf_conntrack_common.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netlink.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <libmnl/libmnl.h>
#include <libnftnl/chain.h>
#include <libnftnl/common.h>
#include <libnftnl/expr.h>
#include <libnftnl/rule.h>
#include <libnftnl/set.h>

#include "fgx/dp.h"
#include "fgx/log.h"

#define FW_DEFAULT_TABLE "fgex_fw"
#define FW_NAME_LEN 32
#define FW_MSG_MAX 4096          /* a table, chain, set or rule message */
#define FW_ELEMS_PER_MSG 512     /* set elements per NEWSETELEM message */
#define FW_ELEM_BYTES 160        /* upper bound of one element in a message */
/* nft's datatype ids, so that `nft list` prints the keys as what they are */
#define FW_TYPE_IPV4 7
#define FW_TYPE_IPV6 8
#define FW_TYPE_PROTO 12
#define FW_TYPE_SERVICE 13
#define FW_TYPE_IFNAME 41

struct fw_view;

struct ctl_fw_nft {
    struct ctl_nftx_sock sock; /* the netlink socket and its sequence numbers (ctl_nftx.h) */
    char *table;
    struct fw_view *cur; /* what the kernel holds; NULL: unknown, rebuild it whole */
};

/* What a batch of the firewall counts besides its messages (the transaction's arg). */
struct fw_state {
    uint32_t set_id;
    size_t elems_added, elems_removed;
};

static struct fw_state *fw_of(const struct ctl_nftx *tx)
{
    return tx->arg;
}

static const char *hook_chain[CTL_FW_NHOOKS] = {"input", "output", "forward"};
static const int hook_num[CTL_FW_NHOOKS] = {NF_INET_LOCAL_IN, NF_INET_LOCAL_OUT, NF_INET_FORWARD};
static const char hook_letter[CTL_FW_NHOOKS] = {'i', 'o', 'f'};

/* The label of a message of the firewall's batch, for the log. */
static const char *fw_label(uint16_t type)
{
    static const char *const names[] = {
        [NFT_MSG_NEWTABLE] = "add table",      [NFT_MSG_DELTABLE] = "delete table",
        [NFT_MSG_NEWCHAIN] = "add chain",      [NFT_MSG_DELCHAIN] = "delete chain",
        [NFT_MSG_NEWRULE] = "add rule",        [NFT_MSG_DELRULE] = "flush chain",
        [NFT_MSG_NEWSET] = "add map",          [NFT_MSG_DELSET] = "delete map",
        [NFT_MSG_NEWSETELEM] = "add elements", [NFT_MSG_DELSETELEM] = "delete elements",
    };

    return type < sizeof(names) / sizeof(names[0]) && names[type] ? names[type] : "?";
}

/* hook < 0: a regular chain. */
static void tx_chain(struct ctl_nftx *tx, const char *name, int hook, bool drop)
{
    ctl_nftx_chain(tx, name, "filter", hook, 0, drop ? NF_DROP : NF_ACCEPT);
}

/* ---- rules (ctl_nftx.h builds the common expressions) ---- */

/* A verdict of the compiled list as an nftables verdict. */
static void e_fw_verdict(struct ctl_nftx_rule *rl, uint32_t v)
{
    if (v == CTL_FW_REJECT)
        ctl_nftx_verdict(rl, NFT_GOTO, "reject");
    else
        ctl_nftx_verdict(rl, v == CTL_FW_DROP ? NF_DROP : NF_ACCEPT, NULL);
}

static void e_lookup(struct ctl_nftx_rule *rl, const char *set, uint32_t set_id)
{
    struct nftnl_expr *e = ctl_nftx_expr(rl, "lookup");

    if (!e)
        return;
    nftnl_expr_set_u32(e, NFTNL_EXPR_LOOKUP_SREG, NFT_REG_1);
    nftnl_expr_set_u32(e, NFTNL_EXPR_LOOKUP_DREG, NFT_REG_VERDICT);
    nftnl_expr_set_str(e, NFTNL_EXPR_LOOKUP_SET, set);
    nftnl_expr_set_u32(e, NFTNL_EXPR_LOOKUP_SET_ID, set_id);
}

static void e_reject(struct ctl_nftx_rule *rl, uint32_t type, uint8_t code)
{
    struct nftnl_expr *e = ctl_nftx_expr(rl, "reject");

    if (!e)
        return;
    nftnl_expr_set_u32(e, NFTNL_EXPR_REJECT_TYPE, type);
    nftnl_expr_set_u8(e, NFTNL_EXPR_REJECT_CODE, code);
}

static void m_ifname(struct ctl_nftx_rule *rl, bool out, const char *name)
{
    char key[16] = {0};

    (void)snprintf(key, sizeof(key), "%s", name);
    ctl_nftx_meta(rl, out ? NFT_META_OIFNAME : NFT_META_IIFNAME);
    ctl_nftx_cmp(rl, NFT_CMP_EQ, key, sizeof(key));
}

static void m_port_range(struct ctl_nftx_rule *rl, bool dst, uint16_t lo, uint16_t hi)
{
    uint16_t l = htons(lo), h = htons(hi);
    struct nftnl_expr *e;

    ctl_nftx_payload(rl, NFT_PAYLOAD_TRANSPORT_HEADER, dst ? 2 : 0, 2);
    if (lo == hi) {
        ctl_nftx_cmp(rl, NFT_CMP_EQ, &l, 2);
        return;
    }
    e = ctl_nftx_expr(rl, "range");
    if (!e)
        return;
    nftnl_expr_set_u32(e, NFTNL_EXPR_RANGE_SREG, NFT_REG_1);
    nftnl_expr_set_u32(e, NFTNL_EXPR_RANGE_OP, NFT_RANGE_EQ);
    nftnl_expr_set(e, NFTNL_EXPR_RANGE_FROM_DATA, &l, 2);
    nftnl_expr_set(e, NFTNL_EXPR_RANGE_TO_DATA, &h, 2);
}

static void m_cidr(struct ctl_nftx_rule *rl, const struct fgx_cidr *c, bool dst)
{
    uint8_t mask[16] = {0}, addr[16];
    uint32_t alen = c->family == 4 ? 4 : 16, off;

    ctl_nftx_meta_u8(rl, NFT_META_NFPROTO, c->family == 4 ? NFPROTO_IPV4 : NFPROTO_IPV6);
    if (c->prefix == 0)
        return;
    off = c->family == 4 ? (dst ? 16 : 12) : (dst ? 24 : 8);
    ctl_nftx_payload(rl, NFT_PAYLOAD_NETWORK_HEADER, off, alen);
    memset(mask, 0xff, c->prefix / 8u);
    if (c->prefix % 8u)
        mask[c->prefix / 8u] = (uint8_t)(0xff00u >> (c->prefix % 8u));
    ctl_nftx_and(rl, mask, alen);
    memcpy(addr, c->addr, alen);
    ctl_nftx_cmp(rl, NFT_CMP_EQ, addr, alen);
}

static void m_ct_state(struct ctl_nftx_rule *rl, uint32_t bits)
{
    struct nftnl_expr *e = ctl_nftx_expr(rl, "ct");
    uint32_t zero = 0;

    if (!e)
        return;
    nftnl_expr_set_u32(e, NFTNL_EXPR_CT_KEY, NFT_CT_STATE);
    nftnl_expr_set_u32(e, NFTNL_EXPR_CT_DREG, NFT_REG_1);
    ctl_nftx_and(rl, &bits, sizeof(bits));
    ctl_nftx_cmp(rl, NFT_CMP_NEQ, &zero, sizeof(zero));
}

/* ---- the compiled DAGs as maps ---- */

/* One element of a map as the kernel holds it: an interval's start (with its verdict) or the
 * value after its end. */
struct fw_elem {
    uint8_t key[FGX_FWC_KEY_MAX];
    uint8_t end;  /* NFT_SET_ELEM_INTERVAL_END */
    uint8_t kind; /* FW_EK_* */
    char chain[FW_NAME_LEN];
};

enum { FW_EK_ACCEPT, FW_EK_DROP, FW_EK_GOTO };

/* A DAG node: its chain "<name>" holds "<field> vmap @m<name>". */
struct fw_map {
    char name[FW_NAME_LEN];
    uint8_t dim, klen, fam; /* fam 0: IPv4 offsets, 1: IPv6 (for address fields) */
    /* every interval is one value: a hash map (one lookup whatever its size) holding just the
     * values, where a value in none of them is simply absent; else an interval map */
    bool points;
    struct fw_elem *elems;  /* by (key, end) */
    size_t n;
};

struct fw_view {
    struct fw_map *maps; /* by name */
    size_t n, cap;
    /* per hook and family slot (0 IPv4, 1 IPv6, 2 both): each piece's root, "" for none,
     * or its verdict (FW_ROOT_*) */
    struct fw_root {
        char chain[FW_NAME_LEN];
        int verdict; /* -1: jump chain; else CTL_FW_* */
    } *roots[CTL_FW_NHOOKS][3];
    size_t nroots[CTL_FW_NHOOKS][3];
};

static void view_release(struct fw_view *v)
{
    for (size_t i = 0; i < v->n; i++)
        free(v->maps[i].elems);
    free(v->maps);
    for (int h = 0; h < CTL_FW_NHOOKS; h++)
        for (int f = 0; f < 3; f++)
            free(v->roots[h][f]);
    memset(v, 0, sizeof(*v));
}

static int cmp_map(const void *a, const void *b)
{
    return strcmp(((const struct fw_map *)a)->name, ((const struct fw_map *)b)->name);
}

static int cmp_elem(const struct fw_elem *a, const struct fw_elem *b, uint8_t klen)
{
    int r = memcmp(a->key, b->key, klen);

    return r ? r : (int)a->end - (int)b->end;
}

static const struct fw_map *view_find(const struct fw_view *v, const char *name)
{
    size_t lo = 0, hi = v->n;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int r = strcmp(v->maps[mid].name, name);

        if (r == 0)
            return &v->maps[mid];
        if (r < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const uint8_t *b = p;

    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 1099511628211ull;
    }
    return h;
}

/* Naming a program's nodes. A node is named by the path that first reaches it from its
 * piece's root (the field and the start of the interval taken at each level) and its own
 * field, so the same node of the next compile has the same name even when rules elsewhere
 * came or went: its map is then updated element by element, not rebuilt (adding one rule to
 * 10,000 costs a few elements, not 20,000). */
struct fw_namer {
    const struct fgx_fwc_prog *p;
    const uint8_t *width;
    char (*names)[FW_NAME_LEN]; /* per node, "" until named */
    char prefix[8];
};

/* A 1- or 2-byte key as a number. */
static unsigned key_num(const uint8_t *k, uint8_t klen)
{
    return klen == 1 ? k[0] : (unsigned)k[0] << 8 | k[1];
}

/* A node becomes a hash map when its intervals are single values, or short runs of them on a
 * port or protocol (two adjacent rules with one verdict merge into a run: a hash map holds it
 * value by value, so adding such a rule does not turn the map into another kind, which would
 * rebuild it whole). */
#define FW_RUN_MAX 64

static bool node_points(const struct fgx_fwc_prog *p, const struct fgx_fwc_node *nd, uint8_t klen)
{
    size_t total = 0;

    for (size_t i = 0; i < nd->n; i++) {
        const struct fgx_fwc_elem *el = &p->elems[nd->first + i];
        unsigned w;

        if (memcmp(el->lo, el->hi, klen) == 0) {
            total++;
            continue;
        }
        if (klen > 2)
            return false;
        w = key_num(el->hi, klen) - key_num(el->lo, klen) + 1;
        if (w > FW_RUN_MAX)
            return false;
        total += w;
    }
    return total <= 4 * nd->n + FW_RUN_MAX;
}

static void name_nodes(struct fw_namer *nm, uint32_t idx, uint64_t path)
{
    const struct fgx_fwc_node *nd = &nm->p->nodes[idx];
    uint8_t points = node_points(nm->p, nd, nm->width[nd->dim]);
    /* the kind of map is in the name: a hash map and an interval map cannot be diffed */
    uint64_t h = fnv(fnv(path, &nd->dim, 1), &points, 1);

    (void)snprintf(nm->names[idx], FW_NAME_LEN, "%s%016llx", nm->prefix, (unsigned long long)h);
    for (size_t i = 0; i < nd->n; i++) {
        const struct fgx_fwc_elem *el = &nm->p->elems[nd->first + i];

        if (el->to.is_node && nm->names[el->to.v][0] == '\0')
            name_nodes(nm, el->to.v, fnv(h, el->lo, FGX_FWC_KEY_MAX));
    }
}

static int map_push_elem(struct fw_map *m, size_t *cap, const uint8_t *key, bool end, uint8_t kind,
                         const char *chain)
{
    struct fw_elem *e;

    if (m->n == *cap) {
        size_t ncap = *cap ? *cap * 2 : 8;
        struct fw_elem *ne = realloc(m->elems, ncap * sizeof(*ne));

        if (!ne)
            return -ENOMEM;
        m->elems = ne;
        *cap = ncap;
    }
    e = &m->elems[m->n++];
    memset(e, 0, sizeof(*e));
    memcpy(e->key, key, m->klen);
    e->end = end;
    e->kind = kind;
    if (chain)
        (void)snprintf(e->chain, sizeof(e->chain), "%s", chain);
    return 0;
}

/* A hash map's elements: one per value. An interval map's as nft writes them: a start per
 * interval and an end (the value after it, even where the next interval starts) unless it
 * reaches the top of the field; an end at 0 first when the first interval does not start at 0.
 * Already in (key, end) order. */
static int map_fill(struct fw_map *m, const struct fgx_fwc_prog *p, const struct fgx_fwc_node *nd,
                    char (*names)[FW_NAME_LEN])
{
    static const uint8_t zero[FGX_FWC_KEY_MAX];
    size_t cap = 0;
    int rc = 0;

    for (size_t i = 0; i < nd->n && rc == 0; i++) {
        const struct fgx_fwc_elem *el = &p->elems[nd->first + i];
        uint8_t after[FGX_FWC_KEY_MAX];
        bool top = true;
        uint8_t kind = el->to.is_node || el->to.v == CTL_FW_REJECT ? FW_EK_GOTO
                       : el->to.v == CTL_FW_DROP                   ? FW_EK_DROP
                                                                   : FW_EK_ACCEPT;
        const char *chain = el->to.is_node ? names[el->to.v] : kind == FW_EK_GOTO ? "reject" : NULL;

        if (m->points) {
            uint8_t k[FGX_FWC_KEY_MAX] = {0};
            unsigned lo = m->klen <= 2 ? key_num(el->lo, m->klen) : 0;
            unsigned hi = m->klen <= 2 ? key_num(el->hi, m->klen) : 0;

            if (m->klen > 2) {
                rc = map_push_elem(m, &cap, el->lo, false, kind, chain);
                continue;
            }
            for (unsigned v = lo; v <= hi && rc == 0; v++) {
                if (m->klen == 1) {
                    k[0] = (uint8_t)v;
                } else {
                    k[0] = (uint8_t)(v >> 8);
                    k[1] = (uint8_t)v;
                }
                rc = map_push_elem(m, &cap, k, false, kind, chain);
            }
            continue;
        }
        if (i == 0 && memcmp(el->lo, zero, m->klen) != 0)
            rc = map_push_elem(m, &cap, zero, true, 0, NULL);
        if (rc == 0)
            rc = map_push_elem(m, &cap, el->lo, false, kind, chain);
        memcpy(after, el->hi, FGX_FWC_KEY_MAX);
        for (int k = 0; k < m->klen; k++)
            if (after[k] != 0xff)
                top = false;
        if (!top && rc == 0) {
            for (int k = m->klen - 1; k >= 0; k--)
                if (++after[k] != 0)
                    break;
            rc = map_push_elem(m, &cap, after, true, 0, NULL);
        }
    }
    return rc;
}

/* The view the plan asks for: every node of every piece as a named map, and the roots. */
static int view_build(const struct ctl_fw_plan *p, struct fw_view *v)
{
    static const char famc[3] = {'4', '6', 'x'};
    int rc = 0;

    memset(v, 0, sizeof(*v));
    if (!p->present)
        return 0;
    for (int h = 0; h < CTL_FW_NHOOKS; h++) {
        const struct ctl_fw_plan_hook *ph = &p->hook[h];

        for (int fs = 0; fs < 3; fs++) {
            const struct fgx_fwc_piece *ps = fs == 2 ? ph->pieces[0] : ph->pieces[fs];
            size_t nps = fs == 2 ? ph->npieces[0] : ph->npieces[fs];
            uint8_t width[FGX_FWC_NDIMS];

            if ((fs == 2) != ph->shared)
                continue;
            fgx_fwc_widths(fs == 1 ? 6 : 4, width);
            v->roots[h][fs] = calloc(nps ? nps : 1, sizeof(*v->roots[h][fs]));
            if (!v->roots[h][fs])
                return -ENOMEM;
            v->nroots[h][fs] = nps;
            for (size_t k = 0; k < nps; k++) {
                const struct fgx_fwc_prog *pg = &ps[k].prog;
                struct fw_namer nm = {.p = pg, .width = width};
                struct fw_root *rt = &v->roots[h][fs][k];

                rt->verdict = pg->has_root && !pg->root.is_node ? (int)pg->root.v : -1;
                if (!pg->has_root || !pg->root.is_node)
                    continue;
                nm.names = calloc(pg->nnodes, sizeof(*nm.names));
                if (!nm.names)
                    return -ENOMEM;
                (void)snprintf(nm.prefix, sizeof(nm.prefix), "%c%c", hook_letter[h], famc[fs]);
                name_nodes(&nm, pg->root.v, fnv(1469598103934665603ull, &k, sizeof(k)));
                (void)snprintf(rt->chain, sizeof(rt->chain), "%s", nm.names[pg->root.v]);
                for (size_t i = 0; i < pg->nnodes && rc == 0; i++) {
                    struct fw_map *m;

                    if (nm.names[i][0] == '\0')
                        continue; /* not reachable (cannot happen: every node has a parent) */
                    if (v->n == v->cap) {
                        size_t ncap = v->cap ? v->cap * 2 : 16;
                        struct fw_map *nmaps = realloc(v->maps, ncap * sizeof(*nmaps));

                        if (!nmaps) {
                            rc = -ENOMEM;
                            break;
                        }
                        v->maps = nmaps;
                        v->cap = ncap;
                    }
                    m = &v->maps[v->n++];
                    memset(m, 0, sizeof(*m));
                    (void)snprintf(m->name, sizeof(m->name), "%s", nm.names[i]);
                    m->dim = pg->nodes[i].dim;
                    m->klen = width[m->dim];
                    m->fam = fs == 1;
                    m->points = node_points(pg, &pg->nodes[i], m->klen);
                    rc = map_fill(m, pg, &pg->nodes[i], nm.names);
                }
                free(nm.names);
                if (rc < 0)
                    return rc;
            }
        }
    }
    if (v->n > 1)
        qsort(v->maps, v->n, sizeof(*v->maps), cmp_map);
    for (size_t i = 1; i < v->n; i++) {
        if (strcmp(v->maps[i - 1].name, v->maps[i].name) == 0) {
            /* two paths hashed alike: the caller rebuilds under fresh names */
            fgx_warn("nft: two firewall maps got the name %s", v->maps[i].name);
            return -EEXIST;
        }
    }
    return 0;
}

/* ---- the messages for the maps ---- */

/* The field a node looks up, into register 1. */
static void e_field(struct ctl_nftx_rule *rl, uint8_t dim, int fam)
{
    switch (dim) {
    case FGX_FWC_IIF:
        ctl_nftx_meta(rl, NFT_META_IIFNAME);
        break;
    case FGX_FWC_OIF:
        ctl_nftx_meta(rl, NFT_META_OIFNAME);
        break;
    case FGX_FWC_PROTO:
        ctl_nftx_meta(rl, NFT_META_L4PROTO);
        break;
    case FGX_FWC_DPORT:
        ctl_nftx_payload(rl, NFT_PAYLOAD_TRANSPORT_HEADER, 2, 2);
        break;
    case FGX_FWC_SPORT:
        ctl_nftx_payload(rl, NFT_PAYLOAD_TRANSPORT_HEADER, 0, 2);
        break;
    case FGX_FWC_DADDR:
        ctl_nftx_payload(rl, NFT_PAYLOAD_NETWORK_HEADER, fam == 0 ? 16 : 24, fam == 0 ? 4 : 16);
        break;
    default: /* FGX_FWC_SADDR */
        ctl_nftx_payload(rl, NFT_PAYLOAD_NETWORK_HEADER, fam == 0 ? 12 : 8, fam == 0 ? 4 : 16);
        break;
    }
}

static uint32_t field_type(uint8_t dim, int fam)
{
    switch (dim) {
    case FGX_FWC_IIF:
    case FGX_FWC_OIF:
        return FW_TYPE_IFNAME;
    case FGX_FWC_PROTO:
        return FW_TYPE_PROTO;
    case FGX_FWC_DPORT:
    case FGX_FWC_SPORT:
        return FW_TYPE_SERVICE;
    default:
        return fam == 0 ? FW_TYPE_IPV4 : FW_TYPE_IPV6;
    }
}

static struct nftnl_set *set_new(struct ctl_nftx *tx, const char *name, uint32_t id)
{
    struct nftnl_set *s = nftnl_set_alloc();

    if (!s || nftnl_set_set_str(s, NFTNL_SET_TABLE, tx->table) != 0 ||
        nftnl_set_set_str(s, NFTNL_SET_NAME, name) != 0) {
        nftnl_set_free(s);
        ctl_nftx_fail(tx, -ENOMEM);
        return NULL;
    }
    nftnl_set_set_u32(s, NFTNL_SET_FAMILY, NFPROTO_INET);
    if (id)
        nftnl_set_set_u32(s, NFTNL_SET_ID, id);
    return s;
}

/* Elements of map m going in (NEWSETELEM) or out (DELSETELEM), FW_ELEMS_PER_MSG a message. */
struct fw_elem_batch {
    struct ctl_nftx *tx;
    const struct fw_map *m;
    uint16_t type;
    uint32_t set_id;
    struct nftnl_set *s;
    size_t count;
};

static void batch_flush(struct fw_elem_batch *b)
{
    char set[FW_NAME_LEN + 1];
    struct nlmsghdr *nlh;

    if (b->count == 0 || !b->s)
        return;
    nlh = ctl_nftx_hdr(b->tx, b->type, b->type == NFT_MSG_NEWSETELEM ? NLM_F_CREATE : 0,
                       FW_MSG_MAX + b->count * FW_ELEM_BYTES, fw_label(b->type));
    if (nlh) {
        nftnl_set_elems_nlmsg_build_payload(nlh, b->s);
        ctl_nftx_next(b->tx, nlh);
    }
    if (b->type == NFT_MSG_NEWSETELEM)
        fw_of(b->tx)->elems_added += b->count;
    else
        fw_of(b->tx)->elems_removed += b->count;
    nftnl_set_free(b->s);
    (void)snprintf(set, sizeof(set), "m%s", b->m->name);
    b->s = set_new(b->tx, set, b->set_id);
    b->count = 0;
}

static void batch_start(struct fw_elem_batch *b, struct ctl_nftx *tx, const struct fw_map *m,
                        uint16_t type, uint32_t set_id)
{
    char set[FW_NAME_LEN + 1];

    memset(b, 0, sizeof(*b));
    b->tx = tx;
    b->m = m;
    b->type = type;
    b->set_id = set_id;
    (void)snprintf(set, sizeof(set), "m%s", m->name);
    b->s = set_new(tx, set, set_id);
}

static void batch_add(struct fw_elem_batch *b, const struct fw_elem *el)
{
    struct nftnl_set_elem *e;

    if (!b->s)
        return;
    e = nftnl_set_elem_alloc();
    if (!e) {
        ctl_nftx_fail(b->tx, -ENOMEM);
        return;
    }
    nftnl_set_elem_set(e, NFTNL_SET_ELEM_KEY, el->key, b->m->klen);
    if (el->end) {
        nftnl_set_elem_set_u32(e, NFTNL_SET_ELEM_FLAGS, NFT_SET_ELEM_INTERVAL_END);
    } else if (b->type == NFT_MSG_NEWSETELEM) {
        if (el->kind == FW_EK_GOTO) {
            nftnl_set_elem_set_u32(e, NFTNL_SET_ELEM_VERDICT, (uint32_t)NFT_GOTO);
            nftnl_set_elem_set_str(e, NFTNL_SET_ELEM_CHAIN, el->chain);
        } else {
            nftnl_set_elem_set_u32(e, NFTNL_SET_ELEM_VERDICT,
                                   el->kind == FW_EK_DROP ? NF_DROP : NF_ACCEPT);
        }
    }
    nftnl_set_elem_add(b->s, e);
    if (++b->count >= FW_ELEMS_PER_MSG)
        batch_flush(b);
}

static void batch_end(struct fw_elem_batch *b)
{
    batch_flush(b);
    nftnl_set_free(b->s);
    b->s = NULL;
}

/* A new map: its set with every element, then its chain's lookup (the chain exists). */
static void map_create(struct ctl_nftx *tx, const struct fw_map *m)
{
    char set[FW_NAME_LEN + 1];
    struct fw_elem_batch b;
    struct nftnl_set *s;
    struct nlmsghdr *nlh;
    struct ctl_nftx_rule rl;
    uint32_t id = ++fw_of(tx)->set_id;

    (void)snprintf(set, sizeof(set), "m%s", m->name);
    s = set_new(tx, set, id);
    if (!s)
        return;
    nftnl_set_set_u32(s, NFTNL_SET_FLAGS, m->points ? NFT_SET_MAP : NFT_SET_MAP | NFT_SET_INTERVAL);
    nftnl_set_set_u32(s, NFTNL_SET_KEY_TYPE, field_type(m->dim, m->fam));
    nftnl_set_set_u32(s, NFTNL_SET_KEY_LEN, m->klen);
    nftnl_set_set_u32(s, NFTNL_SET_DATA_TYPE, NFT_DATA_VERDICT);
    nftnl_set_set_u32(s, NFTNL_SET_DATA_LEN, 0);
    nlh = ctl_nftx_hdr(tx, NFT_MSG_NEWSET, NLM_F_CREATE, FW_MSG_MAX, fw_label(NFT_MSG_NEWSET));
    if (nlh) {
        nftnl_set_nlmsg_build_payload(nlh, s);
        ctl_nftx_next(tx, nlh);
    }
    nftnl_set_free(s);
    batch_start(&b, tx, m, NFT_MSG_NEWSETELEM, id);
    for (size_t i = 0; i < m->n; i++)
        batch_add(&b, &m->elems[i]);
    batch_end(&b);
    ctl_nftx_rule_start(tx, m->name, &rl);
    e_field(&rl, m->dim, m->fam);
    e_lookup(&rl, set, id);
    ctl_nftx_rule_end(&rl);
}

static bool elem_same(const struct fw_elem *a, const struct fw_elem *b)
{
    return a->kind == b->kind && (a->kind != FW_EK_GOTO || strcmp(a->chain, b->chain) == 0);
}

static bool map_same(const struct fw_map *old, const struct fw_map *m)
{
    if (old->n != m->n)
        return false;
    for (size_t i = 0; i < m->n; i++)
        if (cmp_elem(&old->elems[i], &m->elems[i], m->klen) != 0 ||
            !elem_same(&old->elems[i], &m->elems[i]))
            return false;
    return true;
}

/* A map in both views: what changed. A hash map element by element; an interval map is
 * emptied and filled again when anything in it changed, in the same batch: the kernel's
 * interval set refuses a bound added inside an interval it still holds (a split interval),
 * so its elements cannot be patched one by one. The big maps of long lists are hash maps
 * (ports, protocols, host addresses); interval maps hold ranges, and there are few of them. */
static void map_update(struct ctl_nftx *tx, const struct fw_map *old, const struct fw_map *m)
{
    struct fw_elem_batch del, add;
    size_t i = 0, j = 0;

    if (!m->points) {
        char set[FW_NAME_LEN + 1];
        struct nftnl_set *s;
        struct nlmsghdr *nlh;

        if (map_same(old, m))
            return;
        (void)snprintf(set, sizeof(set), "m%s", m->name);
        s = set_new(tx, set, 0);
        if (!s)
            return;
        /* DELSETELEM without elements: every element goes */
        nlh = ctl_nftx_hdr(tx, NFT_MSG_DELSETELEM, 0, FW_MSG_MAX, fw_label(NFT_MSG_DELSETELEM));
        if (nlh) {
            nftnl_set_elems_nlmsg_build_payload(nlh, s);
            ctl_nftx_next(tx, nlh);
        }
        nftnl_set_free(s);
        fw_of(tx)->elems_removed += old->n;
        batch_start(&add, tx, m, NFT_MSG_NEWSETELEM, 0);
        for (size_t k = 0; k < m->n; k++)
            batch_add(&add, &m->elems[k]);
        batch_end(&add);
        return;
    }

    batch_start(&del, tx, m, NFT_MSG_DELSETELEM, 0);
    batch_start(&add, tx, m, NFT_MSG_NEWSETELEM, 0);
    while (i < old->n || j < m->n) {
        int c = i == old->n ? 1 : j == m->n ? -1 : cmp_elem(&old->elems[i], &m->elems[j], m->klen);

        if (c < 0) {
            batch_add(&del, &old->elems[i++]);
        } else if (c > 0) {
            batch_add(&add, &m->elems[j++]);
        } else {
            if (!elem_same(&old->elems[i], &m->elems[j])) {
                batch_add(&del, &old->elems[i]);
                batch_add(&add, &m->elems[j]);
            }
            i++;
            j++;
        }
    }
    /* deletions first: an element replaced at the same key goes out before it comes back */
    batch_end(&del);
    batch_end(&add);
}

/* A table-level message for a chain or set by name: delete it, or flush a chain's rules. */
static void tx_del_chain_rules(struct ctl_nftx *tx, const char *chain)
{
    struct nftnl_rule *r = nftnl_rule_alloc();
    struct nlmsghdr *nlh;

    if (!r || nftnl_rule_set_str(r, NFTNL_RULE_TABLE, tx->table) != 0 ||
        nftnl_rule_set_str(r, NFTNL_RULE_CHAIN, chain) != 0) {
        ctl_nftx_fail(tx, -ENOMEM);
        goto out;
    }
    nftnl_rule_set_u32(r, NFTNL_RULE_FAMILY, NFPROTO_INET);
    nlh = ctl_nftx_hdr(tx, NFT_MSG_DELRULE, 0, FW_MSG_MAX, fw_label(NFT_MSG_DELRULE));
    if (nlh) {
        nftnl_rule_nlmsg_build_payload(nlh, r);
        ctl_nftx_next(tx, nlh);
    }
out:
    nftnl_rule_free(r);
}

static void tx_del_set(struct ctl_nftx *tx, const char *name)
{
    char set[FW_NAME_LEN + 1];
    struct nftnl_set *s;
    struct nlmsghdr *nlh;

    (void)snprintf(set, sizeof(set), "m%s", name);
    s = set_new(tx, set, 0);
    if (!s)
        return;
    nlh = ctl_nftx_hdr(tx, NFT_MSG_DELSET, 0, FW_MSG_MAX, fw_label(NFT_MSG_DELSET));
    if (nlh) {
        nftnl_set_nlmsg_build_payload(nlh, s);
        ctl_nftx_next(tx, nlh);
    }
    nftnl_set_free(s);
}

static void tx_del_chain(struct ctl_nftx *tx, const char *name)
{
    struct nftnl_chain *c = nftnl_chain_alloc();
    struct nlmsghdr *nlh;

    if (!c || nftnl_chain_set_str(c, NFTNL_CHAIN_TABLE, tx->table) != 0 ||
        nftnl_chain_set_str(c, NFTNL_CHAIN_NAME, name) != 0) {
        ctl_nftx_fail(tx, -ENOMEM);
        goto out;
    }
    nftnl_chain_set_u32(c, NFTNL_CHAIN_FAMILY, NFPROTO_INET);
    nlh = ctl_nftx_hdr(tx, NFT_MSG_DELCHAIN, 0, FW_MSG_MAX, fw_label(NFT_MSG_DELCHAIN));
    if (nlh) {
        nftnl_chain_nlmsg_build_payload(nlh, c);
        ctl_nftx_next(tx, nlh);
    }
out:
    nftnl_chain_free(c);
}

static void build_guard_port(struct ctl_nftx *tx, const struct ctl_fw_plan *p, enum ctl_fw_hook h,
                             uint16_t hport)
{
    uint16_t port = htons(hport);
    bool out = h == CTL_FW_OUT;
    struct ctl_nftx_rule rl;

    if (hport == 0 || h == CTL_FW_FWD)
        return;
    /* the local CLI over TCP, or a tunnel to it */
    ctl_nftx_rule_start(tx, hook_chain[h], &rl);
    m_ifname(&rl, out, "lo");
    ctl_nftx_meta_u8(&rl, NFT_META_L4PROTO, IPPROTO_TCP);
    ctl_nftx_payload(&rl, NFT_PAYLOAD_TRANSPORT_HEADER, out ? 0 : 2, 2);
    ctl_nftx_cmp(&rl, NFT_CMP_EQ, &port, 2);
    ctl_nftx_verdict(&rl, NF_ACCEPT, NULL);
    ctl_nftx_rule_end(&rl);
    for (size_t i = 0; i < (p->nallow ? p->nallow : 1); i++) {
        ctl_nftx_rule_start(tx, hook_chain[h], &rl);
        if (p->nallow)
            m_cidr(&rl, &p->allow[i], out);
        ctl_nftx_meta_u8(&rl, NFT_META_L4PROTO, IPPROTO_TCP);
        ctl_nftx_payload(&rl, NFT_PAYLOAD_TRANSPORT_HEADER, out ? 0 : 2, 2);
        ctl_nftx_cmp(&rl, NFT_CMP_EQ, &port, 2);
        ctl_nftx_verdict(&rl, NF_ACCEPT, NULL);
        ctl_nftx_rule_end(&rl);
    }
}

static void build_guard(struct ctl_nftx *tx, const struct ctl_fw_plan *p, enum ctl_fw_hook h)
{
    build_guard_port(tx, p, h, p->ctl_port);
    if (p->web_port != p->ctl_port)
        build_guard_port(tx, p, h, p->web_port);
}

static void build_options(struct ctl_nftx *tx, const struct ctl_fw_plan *p, enum ctl_fw_hook h)
{
    const char *c = hook_chain[h];
    struct ctl_nftx_rule rl;

    /* fgex's own packets (the workers' resets, the proxy's connections to the services)
     * carry its mark: the rules are for the traffic it filters, not for fgex itself */
    if (h == CTL_FW_OUT) {
        uint32_t mask = FGX_MARK_MASK, mark = FGX_MARK;

        ctl_nftx_rule_start(tx, c, &rl);
        ctl_nftx_meta(&rl, NFT_META_MARK);
        ctl_nftx_and(&rl, &mask, sizeof(mask));
        ctl_nftx_cmp(&rl, NFT_CMP_EQ, &mark, sizeof(mark));
        ctl_nftx_verdict(&rl, NF_ACCEPT, NULL);
        ctl_nftx_rule_end(&rl);
    }

    /* IPv6 neighbour discovery (router and neighbour solicitations and advertisements,
     * ICMPv6 133-136) whatever the rules, the policy and the icmp option: without it an IPv6
     * peer, the guarded ports' --allow peers included, is unreachable once the neighbour cache
     * forgets it. First: conntrack calls these invalid (they open no connection). ARP needs
     * nothing here: an inet table never sees it. */
    if (h != CTL_FW_FWD) {
        static const uint8_t nd_lo = 133, nd_hi = 136;
        struct nftnl_expr *e;

        ctl_nftx_rule_start(tx, c, &rl);
        ctl_nftx_meta_u8(&rl, NFT_META_L4PROTO, IPPROTO_ICMPV6);
        ctl_nftx_payload(&rl, NFT_PAYLOAD_TRANSPORT_HEADER, 0, 1);
        e = ctl_nftx_expr(&rl, "range");
        if (e) {
            nftnl_expr_set_u32(e, NFTNL_EXPR_RANGE_SREG, NFT_REG_1);
            nftnl_expr_set_u32(e, NFTNL_EXPR_RANGE_OP, NFT_RANGE_EQ);
            nftnl_expr_set(e, NFTNL_EXPR_RANGE_FROM_DATA, &nd_lo, 1);
            nftnl_expr_set(e, NFTNL_EXPR_RANGE_TO_DATA, &nd_hi, 1);
        }
        ctl_nftx_verdict(&rl, NF_ACCEPT, NULL);
        ctl_nftx_rule_end(&rl);
    }
    if (p->drop_invalid) {
        ctl_nftx_rule_start(tx, c, &rl);
        m_ct_state(&rl, NF_CT_STATE_INVALID_BIT);
        ctl_nftx_verdict(&rl, NF_DROP, NULL);
        ctl_nftx_rule_end(&rl);
    }
    if (p->allow_loopback && h != CTL_FW_FWD) {
        ctl_nftx_rule_start(tx, c, &rl);
        m_ifname(&rl, h == CTL_FW_OUT, "lo");
        ctl_nftx_verdict(&rl, NF_ACCEPT, NULL);
        ctl_nftx_rule_end(&rl);
    }
    if (p->allow_established) {
        ctl_nftx_rule_start(tx, c, &rl);
        m_ct_state(&rl, NF_CT_STATE_BIT(IP_CT_ESTABLISHED) | NF_CT_STATE_BIT(IP_CT_RELATED));
        ctl_nftx_verdict(&rl, NF_ACCEPT, NULL);
        ctl_nftx_rule_end(&rl);
    }
    if (p->allow_icmp) {
        ctl_nftx_rule_start(tx, c, &rl);
        ctl_nftx_meta_u8(&rl, NFT_META_L4PROTO, IPPROTO_ICMP);
        ctl_nftx_verdict(&rl, NF_ACCEPT, NULL);
        ctl_nftx_rule_end(&rl);
        ctl_nftx_rule_start(tx, c, &rl);
        ctl_nftx_meta_u8(&rl, NFT_META_L4PROTO, IPPROTO_ICMPV6);
        ctl_nftx_verdict(&rl, NF_ACCEPT, NULL);
        ctl_nftx_rule_end(&rl);
    }
    if (p->allow_dhcp) {
        /* DHCP (67-68) and DHCPv6 (546-547), as client or server of the box */
        ctl_nftx_rule_start(tx, c, &rl);
        ctl_nftx_meta_u8(&rl, NFT_META_L4PROTO, IPPROTO_UDP);
        m_port_range(&rl, true, 67, 68);
        ctl_nftx_verdict(&rl, NF_ACCEPT, NULL);
        ctl_nftx_rule_end(&rl);
        ctl_nftx_rule_start(tx, c, &rl);
        ctl_nftx_meta_u8(&rl, NFT_META_L4PROTO, IPPROTO_UDP);
        m_port_range(&rl, true, 546, 547);
        ctl_nftx_verdict(&rl, NF_ACCEPT, NULL);
        ctl_nftx_rule_end(&rl);
    }
}

static void build_reject(struct ctl_nftx *tx)
{
    struct ctl_nftx_rule rl;

    tx_chain(tx, "reject", -1, false);
    ctl_nftx_rule_start(tx, "reject", &rl);
    ctl_nftx_meta_u8(&rl, NFT_META_L4PROTO, IPPROTO_TCP);
    e_reject(&rl, NFT_REJECT_TCP_RST, 0);
    ctl_nftx_rule_end(&rl);
    ctl_nftx_rule_start(tx, "reject", &rl);
    e_reject(&rl, NFT_REJECT_ICMPX_UNREACH, NFT_REJECT_ICMPX_PORT_UNREACH);
    ctl_nftx_rule_end(&rl);
}

/* The whole change as one transaction, from the view the kernel has (old; none: the table
 * is made afresh, whatever a previous run left) to the new one:
 *   the new maps' chains (empty), then their sets, elements and lookups;
 *   the surviving maps' changed elements (so no element still names a chain that goes);
 *   the base chains: policy, then flushed and written again;
 *   the maps that went: their lookups, sets, then chains. */
static void build_change(struct ctl_nftx *tx, const struct ctl_fw_plan *p,
                         const struct fw_view *old, const struct fw_view *v)
{
    static const uint8_t nfp[3] = {NFPROTO_IPV4, NFPROTO_IPV6, 0};
    struct ctl_nftx_rule rl;

    if (!old) {
        /* Adding first makes the delete valid whether or not the table existed. */
        ctl_nftx_table(tx, NFT_MSG_NEWTABLE, tx->table);
        ctl_nftx_table(tx, NFT_MSG_DELTABLE, tx->table);
    }
    if (!p->present) {
        if (old) {
            ctl_nftx_table(tx, NFT_MSG_NEWTABLE, tx->table);
            ctl_nftx_table(tx, NFT_MSG_DELTABLE, tx->table);
        }
        return;
    }
    if (!old) {
        ctl_nftx_table(tx, NFT_MSG_NEWTABLE, tx->table);
        build_reject(tx);
    }
    for (size_t i = 0; i < v->n; i++)
        if (!old || !view_find(old, v->maps[i].name))
            tx_chain(tx, v->maps[i].name, -1, false);
    for (size_t i = 0; i < v->n; i++)
        if (!old || !view_find(old, v->maps[i].name))
            map_create(tx, &v->maps[i]);
    for (size_t i = 0; old && i < v->n; i++) {
        const struct fw_map *om = view_find(old, v->maps[i].name);

        if (om)
            map_update(tx, om, &v->maps[i]);
    }
    for (int h = 0; h < CTL_FW_NHOOKS; h++) {
        tx_chain(tx, hook_chain[h], hook_num[h], p->hook[h].policy_drop);
        if (old)
            tx_del_chain_rules(tx, hook_chain[h]);
        build_guard(tx, p, h);
        build_options(tx, p, h);
        /* The pieces in list order; each family has its own unless they share (no rule of
         * the hook names an address). */
        for (int fs = 0; fs < 3; fs++) {
            for (size_t k = 0; k < v->nroots[h][fs]; k++) {
                const struct fw_root *rt = &v->roots[h][fs][k];

                if (rt->verdict < 0 && rt->chain[0] == '\0')
                    continue;
                ctl_nftx_rule_start(tx, hook_chain[h], &rl);
                if (fs < 2)
                    ctl_nftx_meta_u8(&rl, NFT_META_NFPROTO, nfp[fs]);
                if (rt->verdict < 0)
                    ctl_nftx_verdict(&rl, NFT_JUMP, rt->chain);
                else
                    e_fw_verdict(&rl, (uint32_t)rt->verdict);
                ctl_nftx_rule_end(&rl);
            }
        }
    }
    for (size_t i = 0; old && i < old->n; i++) {
        if (!view_find(v, old->maps[i].name)) {
            tx_del_chain_rules(tx, old->maps[i].name);
            tx_del_set(tx, old->maps[i].name);
        }
    }
    for (size_t i = 0; old && i < old->n; i++)
        if (!view_find(v, old->maps[i].name))
            tx_del_chain(tx, old->maps[i].name);
}

int ctl_fw_nft_apply(struct ctl_fw_nft *n, const struct ctl_fw_plan *p,
                     struct ctl_fw_nft_stats *st)
{
    struct fw_state fs = {0};
    struct fw_view *v = calloc(1, sizeof(*v));
    struct ctl_nftx tx;
    int rc;

    if (!v)
        return -ENOMEM;
    rc = view_build(p, v);
    if (rc == 0 && v->n > CTL_FW_MAPS_MAX) {
        /* refused before the kernel sees it (CTL_FW_MAPS_MAX): nothing changes */
        if (st)
            st->maps = v->n;
        rc = -E2BIG;
        goto out_view;
    }
    if (rc == -EEXIST && n->cur) {
        /* names that collide cannot be diffed: rebuild (the next compile names alike) */
        view_release(n->cur);
        free(n->cur);
        n->cur = NULL;
        rc = 0;
    }
    ctl_nftx_begin(&tx, &n->sock, n->table, "the firewall table", &fs);
    if (rc < 0)
        goto out;
again:
    build_change(&tx, p, n->cur, v);
    if (tx.err) {
        rc = tx.err;
        fgx_err("nft: building the firewall table: %s", strerror(-rc));
        goto out;
    }
    rc = ctl_nftx_commit(&tx, &n->sock, false);
    if (rc < 0 && n->cur && rc != -ETIMEDOUT) {
        /* A refused difference changed nothing: write the table whole instead, once (what
         * the kernel refuses then is refused for the plan itself). */
        fgx_warn("nft: the firewall change was refused as a difference; writing the table whole");
        view_release(n->cur);
        free(n->cur);
        n->cur = NULL;
        ctl_nftx_restart(&tx, &n->sock);
        fs = (struct fw_state){0};
        goto again;
    }
    if (rc < 0) {
        /* a refused batch changed nothing; anything else leaves the kernel unknown */
        if (rc == -ETIMEDOUT || rc == -EIO || rc == -ENOBUFS) {
            if (n->cur)
                view_release(n->cur);
            free(n->cur);
            n->cur = NULL;
        }
        goto out;
    }
    if (st) {
        size_t total = 0;

        for (size_t i = 0; i < v->n; i++)
            total += v->maps[i].n;
        st->maps = v->n;
        st->elements = total;
        st->added = fs.elems_added;
        st->removed = fs.elems_removed;
        st->messages = tx.nmsgs;
    }
    if (n->cur)
        view_release(n->cur);
    free(n->cur);
    n->cur = NULL;
    /* no table: the next change makes it afresh */
    if (p->present) {
        n->cur = v;
        v = NULL;
    }
out:
    ctl_nftx_release(&tx);
out_view:
    if (v)
        view_release(v);
    free(v);
    return rc;
}

int ctl_fw_nft_open(const char *table, struct ctl_fw_nft **out)
{
    struct ctl_fw_nft *n = calloc(1, sizeof(*n));
    int rc;

    if (!n || !(n->table = strdup(table ? table : FW_DEFAULT_TABLE))) {
        rc = -ENOMEM;
        goto err;
    }
    rc = ctl_nftx_sock_open(&n->sock, (uint32_t)time(NULL) ^ 0x5a5a0000u);
    if (rc < 0)
        goto err;
    *out = n;
    return 0;
err:
    ctl_fw_nft_close(n);
    return rc;
}

const char *ctl_fw_nft_table(const struct ctl_fw_nft *n)
{
    return n->table;
}

uint32_t ctl_fw_nft_portid(const struct ctl_fw_nft *n)
{
    return ctl_nftx_sock_portid(&n->sock);
}

int ctl_fw_nft_fd(const struct ctl_fw_nft *n)
{
    return n->sock.nl ? mnl_socket_get_fd(n->sock.nl) : -1;
}

bool ctl_fw_nft_present(const struct ctl_fw_nft *n)
{
    return n->cur != NULL;
}

void ctl_fw_nft_forget(struct ctl_fw_nft *n)
{
    if (n->cur)
        view_release(n->cur);
    free(n->cur);
    n->cur = NULL;
}

void ctl_fw_nft_close(struct ctl_fw_nft *n)
{
    if (!n)
        return;
    if (n->cur)
        view_release(n->cur);
    free(n->cur);
    ctl_nftx_sock_close(&n->sock);
    free(n->table);
    free(n);
}
