/* controld stage: nftables. Turns the list of running nfqueue-layer services into one inet
 * table of fgex's own (default "fgex") that hands each service's traffic to the worker threads'
 * NFQUEUE queues. Every change is one netlink batch (one kernel transaction), built with libnftnl
 * and sent with libmnl, so a packet sees either the old rules or the new ones, never a mix.
 *
 * Layout of the table (see ctl_nft.h and fgx/dp.h):
 *   pre  (prerouting, -150: before DNAT) : fgex's own resets accepted; then one lookup per
 *                                          address kind: meta l4proto . ip daddr . th dport
 *                                          vmap @c2s_4 (and @c2s_6, iifname @c2s_if), whose
 *                                          elements (each address of each service) jump
 *                                          to s<id>_c2s
 *   post (postrouting, 300: after SNAT)  : the same by source: @s2c_4, @s2c_6, oifname @s2c_if
 *   s<id>_c2s / s<id>_s2c : TCP: clamp MSS on SYNs, log SYN-ACKs (s2c only; queued when
 *                           the kernel has no log expression) and FINs/RSTs, accept
 *                           segments with no payload, queue the rest; UDP: queue everything
 *   qfc / qfo : spread flows over the worker threads by symhash, to the fail-closed or the
 *               fail-open queue range (bypass when no reader).
 *   synack : the same spread, to the threads' NFLOG groups (a copy; the packet goes on).
 * and for the proxy and external layers (ctl_nft_px.h), when such services run:
 *   pxpre (prerouting, -150) : proxy's own upstream packets (mark == FGX_MARK) accepted;
 *                              packets of a transparent socket, but SYNs without ACK, marked
 *                              CTL_ROUTE_MARK (routed locally by ctl_route.c); then ip daddr .
 *                              th dport vmap @px_4 (@px_6, iifname @px_if) -> px<id>: tproxy
 *                              to the proxy's port (external: to the team's proxy) and mark;
 *                              fail-closed services: drop what tproxy could not take
 *   pxout (output, type route, -150) : the proxy's upstream packets to @pxo_4 / @pxo_6 (or a
 *                              port of @pxo_ip) give their conntrack entry the mark CT_PX; the
 *                              services' replies on such an entry and the box's own packets to
 *                              @pxo_4 / @pxo_6 are marked CTL_ROUTE_MARK, which reroutes them
 *                              through lo (to the proxy).
 * A change of addresses alone is a batch of element adds and deletes (build_delta). */
#include "ctl_nft.h"
#include "controld/ctl_nftx.h"
#include "ctl_nft_px.h"

/* glibc's first, so that the linux/ headers defer to its definitions */
#include <netinet/in.h>

#include <errno.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/x_tables.h>
#include <linux/netfilter/xt_NFQUEUE.h>
#include <linux/netlink.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <libnftnl/common.h>
#include <libnftnl/expr.h>
#include <libnftnl/rule.h>
#include <libnftnl/set.h>

#include "controld/ctl_route.h"
#include "fgx/dp.h"
#include "fgx/log.h"

#define NFT_DEFAULT_TABLE "fgex"
#define NFT_PROBE_TABLE "fgex_probe"
#define NFT_PRIO_PRE (-150)
#define NFT_PRIO_POST 300
#define NFT_SYNACK_CHAIN "synack"
/* The NFQUEUE copy range is 65531 bytes; a SYN's MSS above this would let the peer send
 * segments the worker receives cut short. */
#define NFT_MSS_MAX 65000
/* Upper bound on one encoded set or element message (a rule with an IPv6 prefix and a 255-byte
 * table name is well under 1 KiB): the room reserved for it in the batch. */
#define NFT_MSG_MAX 2048
#define NFT_LABEL_LEN CTL_NFTX_LABEL_LEN
/* A service's elements in one map: an address each, and in the pxo sets its edge's to=PORT */
#define NFT_ELEMS_MAX (2 * CTL_NFT_ADDRS_MAX)
/* Conntrack mark of the proxy's upstream connections: their replies must reach the proxy. */
#define CT_PX (FGX_MARK | 2u)

struct ctl_nft {
    struct ctl_nftx_sock sock; /* the netlink socket and its sequence numbers (ctl_nftx.h) */
    char *table;
    unsigned queue_base;
    unsigned nthreads;
    bool native;
    bool synack_log; /* the kernel has the log expression: SYN-ACKs are copied, not queued */
    bool applied; /* the table holds exactly nfq and px (a change of addresses alone is a delta) */
    /* The last lists applied, so that either layer can be changed alone. */
    struct ctl_nft_service *nfq, *px;
    size_t nnfq, npx;
    uint16_t px_port;
};

typedef void (*nft_build_fn)(struct ctl_nftx *tx, const void *arg);

/* The services' table a builder writes (the transaction's arg). */
static struct ctl_nft *nft_of(const struct ctl_nftx *tx)
{
    return tx->arg;
}

/* ---- messages (ctl_nftx.h builds them) ------------------------------------------------- */

static void tx_chain(struct ctl_nftx *tx, const char *name, int hook, int prio)
{
    ctl_nftx_chain(tx, name, "filter", hook, prio, NF_ACCEPT);
}

/* ---- expressions (all through register 1; the common ones in ctl_nftx.h) ------------- */

static void e_cmp_be16(struct ctl_nftx_rule *rl, uint32_t op, uint16_t v)
{
    uint16_t be = htons(v);

    ctl_nftx_cmp(rl, op, &be, sizeof(be));
}

/* The MSS option's value: TCP option kind 2, 2 bytes at offset 2. */
static void e_mss(struct ctl_nftx_rule *rl, bool write)
{
    struct nftnl_expr *e = ctl_nftx_expr(rl, "exthdr");

    if (!e)
        return;
    nftnl_expr_set_u32(e, NFTNL_EXPR_EXTHDR_OP, NFT_EXTHDR_OP_TCPOPT);
    nftnl_expr_set_u8(e, NFTNL_EXPR_EXTHDR_TYPE, 2);
    nftnl_expr_set_u32(e, NFTNL_EXPR_EXTHDR_OFFSET, 2);
    nftnl_expr_set_u32(e, NFTNL_EXPR_EXTHDR_LEN, 2);
    nftnl_expr_set_u32(e, write ? NFTNL_EXPR_EXTHDR_SREG : NFTNL_EXPR_EXTHDR_DREG, NFT_REG_1);
}

static void e_set_be16(struct ctl_nftx_rule *rl, uint16_t v)
{
    uint16_t be = htons(v);
    struct nftnl_expr *e = ctl_nftx_expr(rl, "immediate");

    if (!e)
        return;
    nftnl_expr_set_u32(e, NFTNL_EXPR_IMM_DREG, NFT_REG_1);
    nftnl_expr_set(e, NFTNL_EXPR_IMM_DATA, &be, sizeof(be));
}

/* Write register 1 (len bytes) into the transport header at offset, the TCP checksum updated
 * (the kernel leaves a partial checksum alone: it is computed later, over the new bytes). */
static void e_payload_write_th(struct ctl_nftx_rule *rl, uint32_t offset, uint32_t len)
{
    struct nftnl_expr *e = ctl_nftx_expr(rl, "payload");

    if (!e)
        return;
    nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_SREG, NFT_REG_1);
    nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_BASE, NFT_PAYLOAD_TRANSPORT_HEADER);
    nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_OFFSET, offset);
    nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_LEN, len);
    nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_CSUM_TYPE, NFT_PAYLOAD_CSUM_INET);
    nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_CSUM_OFFSET, 16);
    nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_FLAGS, 0);
}

static void e_symhash(struct ctl_nftx_rule *rl, uint32_t modulus)
{
    struct nftnl_expr *e = ctl_nftx_expr(rl, "hash");

    if (!e)
        return;
    nftnl_expr_set_u32(e, NFTNL_EXPR_HASH_TYPE, NFT_HASH_SYM);
    nftnl_expr_set_u32(e, NFTNL_EXPR_HASH_MODULUS, modulus);
    nftnl_expr_set_u32(e, NFTNL_EXPR_HASH_OFFSET, 0);
    nftnl_expr_set_u32(e, NFTNL_EXPR_HASH_DREG, NFT_REG_1);
}

static void e_set_u32(struct ctl_nftx_rule *rl, uint32_t v)
{
    struct nftnl_expr *e = ctl_nftx_expr(rl, "immediate");

    if (!e)
        return;
    nftnl_expr_set_u32(e, NFTNL_EXPR_IMM_DREG, NFT_REG_1);
    nftnl_expr_set(e, NFTNL_EXPR_IMM_DATA, &v, sizeof(v));
}

/* meta mark set v */
static void e_mark_set(struct ctl_nftx_rule *rl, uint32_t v)
{
    struct nftnl_expr *e;

    e_set_u32(rl, v);
    e = ctl_nftx_expr(rl, "meta");
    if (!e)
        return;
    nftnl_expr_set_u32(e, NFTNL_EXPR_META_KEY, NFT_META_MARK);
    nftnl_expr_set_u32(e, NFTNL_EXPR_META_SREG, NFT_REG_1);
}

/* ct mark (load) or ct mark set (store register 1) */
static void e_ct_mark(struct ctl_nftx_rule *rl, bool write)
{
    struct nftnl_expr *e = ctl_nftx_expr(rl, "ct");

    if (!e)
        return;
    nftnl_expr_set_u32(e, NFTNL_EXPR_CT_KEY, NFT_CT_MARK);
    nftnl_expr_set_u32(e, write ? NFTNL_EXPR_CT_SREG : NFTNL_EXPR_CT_DREG, NFT_REG_1);
}

/* socket transparent (1 byte into register 1) */
static void e_socket_transparent(struct ctl_nftx_rule *rl)
{
    struct nftnl_expr *e = ctl_nftx_expr(rl, "socket");

    if (!e)
        return;
    nftnl_expr_set_u32(e, NFTNL_EXPR_SOCKET_KEY, NFT_SOCKET_TRANSPARENT);
    nftnl_expr_set_u32(e, NFTNL_EXPR_SOCKET_DREG, NFT_REG_1);
}

/* tproxy to :port, for both families (no address: the socket lookup uses the packet's) */
static void e_tproxy(struct ctl_nftx_rule *rl, uint16_t port)
{
    struct nftnl_expr *e;

    e_set_be16(rl, port);
    e = ctl_nftx_expr(rl, "tproxy");
    if (!e)
        return;
    nftnl_expr_set_u32(e, NFTNL_EXPR_TPROXY_FAMILY, NFPROTO_UNSPEC);
    nftnl_expr_set_u32(e, NFTNL_EXPR_TPROXY_REG_PORT, NFT_REG_1);
}

/* The native queue expression (CONFIG_NFT_QUEUE). */
static void e_queue(struct ctl_nftx_rule *rl, uint16_t num, bool bypass)
{
    struct nftnl_expr *e = ctl_nftx_expr(rl, "queue");

    if (!e)
        return;
    nftnl_expr_set_u16(e, NFTNL_EXPR_QUEUE_NUM, num);
    nftnl_expr_set_u16(e, NFTNL_EXPR_QUEUE_TOTAL, 1);
    nftnl_expr_set_u16(e, NFTNL_EXPR_QUEUE_FLAGS, bypass ? NFT_QUEUE_FLAG_BYPASS : 0);
}

/* The xtables NFQUEUE target through nft_compat, as iptables-nft builds it. The analyzer cannot
 * see that libnftnl takes ownership of the info block. */
// NOLINTBEGIN(clang-analyzer-unix.Malloc)
static void e_nfqueue_target(struct ctl_nftx_rule *rl, uint16_t num, bool bypass)
{
    struct xt_NFQ_info_v3 *info;
    struct nftnl_expr *e = ctl_nftx_expr(rl, "target");

    if (!e)
        return;
    /* nft_compat wants the info padded to XT_ALIGN(targetsize); libnftnl takes ownership. */
    info = calloc(1, XT_ALIGN(sizeof(*info)));
    if (!info) {
        ctl_nftx_fail(rl->tx, -ENOMEM);
        return;
    }
    info->queuenum = num;
    info->queues_total = 1;
    info->flags = bypass ? NFQ_FLAG_BYPASS : 0;
    nftnl_expr_set_str(e, NFTNL_EXPR_TG_NAME, "NFQUEUE");
    nftnl_expr_set_u32(e, NFTNL_EXPR_TG_REV, 3);
    nftnl_expr_set(e, NFTNL_EXPR_TG_INFO, info, XT_ALIGN(sizeof(*info)));
}
// NOLINTEND(clang-analyzer-unix.Malloc)

/* log group G queue-threshold 1: a copy of the packet to the NFLOG group's reader, sent at once
 * (not batched), while the packet itself goes on. */
static void e_log_group(struct ctl_nftx_rule *rl, uint16_t group)
{
    struct nftnl_expr *e = ctl_nftx_expr(rl, "log");

    if (!e)
        return;
    nftnl_expr_set_u16(e, NFTNL_EXPR_LOG_GROUP, group);
    nftnl_expr_set_u16(e, NFTNL_EXPR_LOG_QTHRESHOLD, 1);
}

/* ---- matches ------------------------------------------------------------------------------ */

static void m_mark_eq(struct ctl_nftx_rule *rl, uint32_t op, uint32_t v)
{
    ctl_nftx_meta(rl, NFT_META_MARK);
    ctl_nftx_cmp(rl, op, &v, sizeof(v));
}

static void m_tcp_syn(struct ctl_nftx_rule *rl)
{
    static const uint8_t syn = 0x02;

    ctl_nftx_meta_u8(rl, NFT_META_L4PROTO, IPPROTO_TCP);
    ctl_nftx_payload(rl, NFT_PAYLOAD_TRANSPORT_HEADER, 13, 1);
    ctl_nftx_and(rl, &syn, 1);
    ctl_nftx_cmp_u8(rl, syn);
}

/* tcp doff D */
static void m_tcp_doff(struct ctl_nftx_rule *rl, unsigned doff)
{
    static const uint8_t hi = 0xf0;

    ctl_nftx_meta_u8(rl, NFT_META_L4PROTO, IPPROTO_TCP);
    ctl_nftx_payload(rl, NFT_PAYLOAD_TRANSPORT_HEADER, 12, 1);
    ctl_nftx_and(rl, &hi, 1);
    ctl_nftx_cmp_u8(rl, (uint8_t)(doff << 4));
}

/* ---- the services' address maps ---------------------------------------------------------- */

/* Every address of every service is an element of a few maps and sets shared by all services,
 * so that a packet finds its service in one lookup per address kind whatever the number of
 * services and addresses, and `service addr add|rm` is one element added or deleted in a batch
 * (ctl_nft_sync_layers): no rule or chain is rebuilt, nothing else changes under the other
 * addresses' connections.
 *   c2s_4, c2s_6, c2s_if : verdict maps, l4proto . daddr|iifname . dport -> jump s<id>_c2s
 *   s2c_4, s2c_6, s2c_if : the same by saddr|oifname . sport -> jump s<id>_s2c
 *   px_4, px_6, px_if    : proxy and external layers, l4proto . daddr|iifname . dport -> jump
 *                          px<id> (the proxy relays TCP and UDP, px_udp.c)
 *   pxo_4, pxo_6         : sets, the proxy layer's l4proto . addresses . ports (its upstream
 *                          connections and the box's own clients, in the output hook)
 *   pxo_ip               : set, the ports of the proxy layer's interfaces (an upstream
 *                          connection to an interface's service is known by its port alone)
 * Address maps are intervals over a concatenation (the kernel's pipapo: a prefix is a range,
 * any address all of them); the interface ones are hashes. */
enum nft_map {
    M_C2S_4,
    M_C2S_6,
    M_C2S_IF,
    M_S2C_4,
    M_S2C_6,
    M_S2C_IF,
    M_PX_4,
    M_PX_6,
    M_PX_IF,
    S_PXO_4,
    S_PXO_6,
    S_PXO_IP,
    NFT_MAPS
};

enum nft_key { K_V4, K_V6, K_IF, K_PORT };

struct nft_map_def {
    const char *name;
    enum nft_key key;
    bool l4proto; /* the key starts with the protocol (the nfqueue layer carries TCP and UDP) */
    bool verdict; /* a map to the service's chain; else a plain set */
    bool dst;     /* matched by destination (client -> server) */
};

static const struct nft_map_def nft_maps[NFT_MAPS] = {
    [M_C2S_4] = {"c2s_4", K_V4, true, true, true},
    [M_C2S_6] = {"c2s_6", K_V6, true, true, true},
    [M_C2S_IF] = {"c2s_if", K_IF, true, true, true},
    [M_S2C_4] = {"s2c_4", K_V4, true, true, false},
    [M_S2C_6] = {"s2c_6", K_V6, true, true, false},
    [M_S2C_IF] = {"s2c_if", K_IF, true, true, false},
    [M_PX_4] = {"px_4", K_V4, true, true, true},
    [M_PX_6] = {"px_6", K_V6, true, true, true},
    [M_PX_IF] = {"px_if", K_IF, true, true, true},
    [S_PXO_4] = {"pxo_4", K_V4, true, false, true},
    [S_PXO_6] = {"pxo_6", K_V6, true, false, true},
    [S_PXO_IP] = {"pxo_ip", K_PORT, false, false, true},
};

/* nft's own datatype numbers, so that `nft list` prints the keys as protocols, addresses and
 * ports. */
#define NFT_TYPE_IPADDR 7
#define NFT_TYPE_IP6ADDR 8
#define NFT_TYPE_INET_PROTOCOL 12
#define NFT_TYPE_INET_SERVICE 13
#define NFT_TYPE_IFNAME 41
#define NFT_TYPE_BITS 6
#define NFT_KEY_MAX 24

struct nft_elem {
    uint8_t key[NFT_KEY_MAX], end[NFT_KEY_MAX];
    uint32_t len;
    bool interval;
    char chain[NFT_LABEL_LEN]; /* verdict maps: the chain to jump to */
};

/* Unique within a batch; lets a rule and an element name a map added in the same batch. */
static uint32_t map_id(enum nft_map m)
{
    return (uint32_t)m + 1;
}

static uint32_t key_addr_len(enum nft_key k)
{
    return k == K_V4 ? 4 : k == K_PORT ? 0 : 16;
}

/* Concatenated fields are each padded to a 32-bit register: [protocol] address, port. A set of
 * ports alone is the port's 2 bytes. */
static uint32_t map_key_len(const struct nft_map_def *d)
{
    if (d->key == K_PORT)
        return 2;
    return (d->l4proto ? 4 : 0) + key_addr_len(d->key) + 4;
}

static void tx_map(struct ctl_nftx *tx, enum nft_map m)
{
    const struct nft_map_def *d = &nft_maps[m];
    static const uint32_t addr_type[] = {NFT_TYPE_IPADDR, NFT_TYPE_IP6ADDR, NFT_TYPE_IFNAME, 0};
    uint32_t type = 0;
    uint8_t fields[3];
    size_t nf = 0;
    struct nftnl_set *s = NULL;
    struct nlmsghdr *nlh;
    char label[NFT_LABEL_LEN];

    (void)snprintf(label, sizeof(label), "add %s %s", d->verdict ? "map" : "set", d->name);
    nlh = ctl_nftx_hdr(tx, NFT_MSG_NEWSET, NLM_F_CREATE, NFT_MSG_MAX, label);
    if (!nlh)
        return;
    if (d->l4proto) {
        type = NFT_TYPE_INET_PROTOCOL;
        fields[nf++] = 1;
    }
    if (d->key != K_PORT) {
        type = type << NFT_TYPE_BITS | addr_type[d->key];
        fields[nf++] = (uint8_t)key_addr_len(d->key);
    }
    type = type << NFT_TYPE_BITS | NFT_TYPE_INET_SERVICE;
    fields[nf++] = 2;
    s = nftnl_set_alloc();
    if (!s || nftnl_set_set_str(s, NFTNL_SET_TABLE, tx->table) != 0 ||
        nftnl_set_set_str(s, NFTNL_SET_NAME, d->name) != 0) {
        ctl_nftx_fail(tx, -ENOMEM);
        goto out;
    }
    nftnl_set_set_u32(s, NFTNL_SET_FAMILY, NFPROTO_INET);
    nftnl_set_set_u32(s, NFTNL_SET_ID, map_id(m));
    nftnl_set_set_u32(s, NFTNL_SET_KEY_TYPE, type);
    nftnl_set_set_u32(s, NFTNL_SET_KEY_LEN, map_key_len(d));
    if (d->key == K_V4 || d->key == K_V6) {
        nftnl_set_set_u32(s, NFTNL_SET_FLAGS,
                          NFT_SET_INTERVAL | NFT_SET_CONCAT | (d->verdict ? NFT_SET_MAP : 0));
        if (nftnl_set_set_data(s, NFTNL_SET_DESC_CONCAT, fields, (uint32_t)nf) != 0) {
            ctl_nftx_fail(tx, -ENOMEM);
            goto out;
        }
    } else {
        nftnl_set_set_u32(s, NFTNL_SET_FLAGS, d->verdict ? NFT_SET_MAP : 0);
    }
    if (d->verdict)
        nftnl_set_set_u32(s, NFTNL_SET_DATA_TYPE, NFT_DATA_VERDICT);
    nftnl_set_nlmsg_build_payload(nlh, s);
    ctl_nftx_next(tx, nlh);
out:
    nftnl_set_free(s);
}

static void tx_elem(struct ctl_nftx *tx, uint16_t type, enum nft_map m, const struct nft_elem *el)
{
    const struct nft_map_def *d = &nft_maps[m];
    struct nftnl_set *s = NULL;
    struct nftnl_set_elem *e;
    struct nlmsghdr *nlh;
    char label[NFT_LABEL_LEN];

    (void)snprintf(label, sizeof(label), "%s element of %s",
                   type == NFT_MSG_NEWSETELEM ? "add" : "delete", d->name);
    nlh = ctl_nftx_hdr(tx, type, type == NFT_MSG_NEWSETELEM ? NLM_F_CREATE : 0, NFT_MSG_MAX, label);
    if (!nlh)
        return;
    s = nftnl_set_alloc();
    e = nftnl_set_elem_alloc();
    if (!s || !e || nftnl_set_set_str(s, NFTNL_SET_TABLE, tx->table) != 0 ||
        nftnl_set_set_str(s, NFTNL_SET_NAME, d->name) != 0) {
        nftnl_set_elem_free(e);
        ctl_nftx_fail(tx, -ENOMEM);
        goto out;
    }
    nftnl_set_set_u32(s, NFTNL_SET_FAMILY, NFPROTO_INET);
    nftnl_set_set_u32(s, NFTNL_SET_ID, map_id(m));
    nftnl_set_elem_set(e, NFTNL_SET_ELEM_KEY, el->key, el->len);
    if (el->interval)
        nftnl_set_elem_set(e, NFTNL_SET_ELEM_KEY_END, el->end, el->len);
    if (d->verdict && type == NFT_MSG_NEWSETELEM) {
        nftnl_set_elem_set_u32(e, NFTNL_SET_ELEM_VERDICT, (uint32_t)NFT_JUMP);
        nftnl_set_elem_set_str(e, NFTNL_SET_ELEM_CHAIN, el->chain);
    }
    nftnl_set_elem_add(s, e);
    nftnl_set_elems_nlmsg_build_payload(nlh, s);
    ctl_nftx_next(tx, nlh);
out:
    nftnl_set_free(s);
}

/* The element address a of service s has in map m; false when it has none there. */
static bool elem_of(const struct ctl_nft_service *s, const struct fgx_svcaddr *a, enum nft_map m,
                    struct nft_elem *el)
{
    const struct nft_map_def *d = &nft_maps[m];
    uint32_t at = 0, alen = key_addr_len(d->key);

    memset(el, 0, sizeof(*el));
    el->len = map_key_len(d);
    if (d->key == K_PORT) {
        if (a->ifname[0] == '\0')
            return false;
        el->key[0] = (uint8_t)(a->port >> 8);
        el->key[1] = (uint8_t)a->port;
        return true;
    }
    if ((d->key == K_IF) != (a->ifname[0] != '\0'))
        return false;
    if (d->key != K_IF && a->cidr.family != 0 && a->cidr.family != (d->key == K_V4 ? 4 : 6))
        return false;
    if (d->l4proto) {
        el->key[0] = el->end[0] = s->ipproto;
        at = 4;
    }
    if (d->key == K_IF) {
        memcpy(el->key + at, a->ifname, strnlen(a->ifname, FGX_IFNAME_MAX - 1));
    } else {
        el->interval = true;
        if (a->cidr.family == 0) {
            memset(el->end + at, 0xff, alen);
        } else {
            memcpy(el->key + at, a->cidr.addr, alen);
            memcpy(el->end + at, a->cidr.addr, alen);
            for (unsigned b = a->cidr.prefix; b < alen * 8; b++)
                el->end[at + b / 8] |= (uint8_t)(0x80u >> (b % 8));
        }
    }
    at += alen;
    el->key[at] = el->end[at] = (uint8_t)(a->port >> 8);
    el->key[at + 1] = el->end[at + 1] = (uint8_t)a->port;
    if (d->verdict) {
        if (m == M_PX_4 || m == M_PX_6 || m == M_PX_IF)
            (void)snprintf(el->chain, sizeof(el->chain), "px%u", (unsigned)s->id);
        else
            (void)snprintf(el->chain, sizeof(el->chain), "s%u_%s", (unsigned)s->id,
                           d->dst ? "c2s" : "s2c");
    }
    return true;
}

static bool elem_same(const struct nft_elem *a, const struct nft_elem *b)
{
    return a->len == b->len && a->interval == b->interval && memcmp(a->key, b->key, a->len) == 0 &&
           (!a->interval || memcmp(a->end, b->end, a->len) == 0) && strcmp(a->chain, b->chain) == 0;
}

/* The one address of a service given without a list (the one-address form). */
static const struct fgx_svcaddr *svc_addrs(const struct ctl_nft_service *s, struct fgx_svcaddr *one,
                                           size_t *n)
{
    if (s->naddrs > 0) {
        *n = s->naddrs;
        return s->addrs;
    }
    memset(one, 0, sizeof(*one));
    one->cidr = s->addr;
    one->port = s->port;
    *n = 1;
    return one;
}

static bool map_of_layer(enum nft_map m, const struct ctl_nft_service *s, bool proxy)
{
    if (m <= M_S2C_IF)
        return !proxy;
    if (m <= M_PX_IF)
        return proxy;
    return proxy && !s->external;
}

/* y holds every packet x does: the same port, y any address or a prefix holding x's (not
 * interfaces: their set is keyed by the port alone, where repeats are one element). */
static bool addr_covers(const struct fgx_svcaddr *y, const struct fgx_svcaddr *x)
{
    if (x->ifname[0] != '\0' || y->ifname[0] != '\0' || x->port != y->port)
        return false;
    if (y->cidr.family == 0)
        return true;
    return x->cidr.family == y->cidr.family && y->cidr.prefix <= x->cidr.prefix &&
           fgx_cidr_contains(&y->cidr, x->cidr.family, x->cidr.addr);
}

/* The elements of s in map m, without repeats (two interfaces on one port are one port). */
static size_t svc_elems(const struct ctl_nft_service *s, bool proxy, enum nft_map m,
                        struct nft_elem out[NFT_ELEMS_MAX])
{
    struct fgx_svcaddr one, cand[NFT_ELEMS_MAX];
    const struct fgx_svcaddr *a;
    size_t n, cnt = 0;

    if (!map_of_layer(m, s, proxy))
        return 0;
    a = svc_addrs(s, &one, &n);
    /* the proxy's upstream connections of an edge go to the port the service listens on
     * (to=PORT): the pxo sets hold that port too, where no address of the service on it
     * covers it already (an interval set refuses two that overlap) */
    if (m == S_PXO_4 || m == S_PXO_6 || m == S_PXO_IP) {
        size_t nc = 0;

        for (size_t i = 0; i < n; i++) {
            cand[nc++] = a[i];
            if (a[i].to_port != 0) {
                cand[nc] = a[i];
                cand[nc++].port = a[i].to_port;
            }
        }
        a = cand;
        n = nc;
    }
    for (size_t i = 0; i < n && cnt < NFT_ELEMS_MAX; i++) {
        bool seen = false;

        for (size_t j = 0; j < n && !seen; j++)
            seen = j != i && addr_covers(&a[j], &a[i]) && (!addr_covers(&a[i], &a[j]) || j < i);
        if (seen || !elem_of(s, &a[i], m, &out[cnt]))
            continue;
        for (size_t j = 0; j < cnt && !seen; j++)
            seen = elem_same(&out[j], &out[cnt]);
        if (!seen)
            cnt++;
    }
    return cnt;
}

/* true when some service of the list has an interface address: only then do the packets pay
 * for the interface lookups (a feature no service uses costs nothing). */
static bool list_has_ifname(const struct ctl_nft_service *svcs, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        struct fgx_svcaddr one;
        const struct fgx_svcaddr *a;
        size_t na;

        a = svc_addrs(&svcs[i], &one, &na);
        for (size_t k = 0; k < na; k++)
            if (a[k].ifname[0] != '\0')
                return true;
    }
    return false;
}

static void build_service_elems(struct ctl_nftx *tx, const struct ctl_nft_service *s, bool proxy)
{
    struct nft_elem el[NFT_ELEMS_MAX];

    for (int m = 0; m < NFT_MAPS; m++) {
        size_t n = svc_elems(s, proxy, (enum nft_map)m, el);

        for (size_t i = 0; i < n; i++)
            tx_elem(tx, NFT_MSG_NEWSETELEM, (enum nft_map)m, &el[i]);
    }
}

/* What changes between old and cur (the same service, the same layer), element by element:
 * deletions first, so that a replacement never meets itself. pass 0 deletes, pass 1 adds. */
static void build_service_delta(struct ctl_nftx *tx, const struct ctl_nft_service *old,
                                const struct ctl_nft_service *cur, bool proxy, int pass)
{
    struct nft_elem a[NFT_ELEMS_MAX], b[NFT_ELEMS_MAX];

    for (int m = 0; m < NFT_MAPS; m++) {
        size_t na = svc_elems(pass == 0 ? old : cur, proxy, (enum nft_map)m, a);
        size_t nb = svc_elems(pass == 0 ? cur : old, proxy, (enum nft_map)m, b);

        for (size_t i = 0; i < na; i++) {
            bool kept = false;

            for (size_t j = 0; j < nb && !kept; j++)
                kept = elem_same(&a[i], &b[j]);
            if (!kept)
                tx_elem(tx, pass == 0 ? NFT_MSG_DELSETELEM : NFT_MSG_NEWSETELEM, (enum nft_map)m,
                        &a[i]);
        }
    }
}

static void m_map(struct ctl_nftx_rule *rl, enum nft_map m)
{
    const struct nft_map_def *d = &nft_maps[m];
    uint32_t reg = NFT_REG32_00, port_off = d->dst ? 2 : 0;
    struct nftnl_expr *e;

    if (d->key == K_V4)
        ctl_nftx_meta_u8(rl, NFT_META_NFPROTO, NFPROTO_IPV4);
    else if (d->key == K_V6)
        ctl_nftx_meta_u8(rl, NFT_META_NFPROTO, NFPROTO_IPV6);
    if (d->l4proto) {
        ctl_nftx_meta_to(rl, NFT_META_L4PROTO, reg);
        reg++;
    }
    switch (d->key) {
    case K_V4:
        ctl_nftx_payload_to(rl, NFT_PAYLOAD_NETWORK_HEADER, d->dst ? 16 : 12, 4, reg);
        reg += 1;
        break;
    case K_V6:
        ctl_nftx_payload_to(rl, NFT_PAYLOAD_NETWORK_HEADER, d->dst ? 24 : 8, 16, reg);
        reg += 4;
        break;
    case K_IF:
        ctl_nftx_meta_to(rl, d->dst ? NFT_META_IIFNAME : NFT_META_OIFNAME, reg);
        reg += 4;
        break;
    case K_PORT:
        break;
    }
    ctl_nftx_payload_to(rl, NFT_PAYLOAD_TRANSPORT_HEADER, port_off, 2, reg);
    e = ctl_nftx_expr(rl, "lookup");
    if (!e)
        return;
    nftnl_expr_set_u32(e, NFTNL_EXPR_LOOKUP_SREG, NFT_REG32_00);
    nftnl_expr_set_str(e, NFTNL_EXPR_LOOKUP_SET, d->name);
    nftnl_expr_set_u32(e, NFTNL_EXPR_LOOKUP_SET_ID, map_id(m));
    if (d->verdict)
        nftnl_expr_set_u32(e, NFTNL_EXPR_LOOKUP_DREG, NFT_REG_VERDICT);
}

/* ---- the table ------------------------------------------------------------------------------ */

struct nft_sync_arg {
    const struct ctl_nft_service *svcs;
    size_t nsvcs;
    const struct ctl_nft_service *px;
    size_t npx;
    uint16_t px_port;
};

static const char *queue_chain(bool fail_open)
{
    return fail_open ? "qfo" : "qfc";
}

static void rule_queue(struct ctl_nftx_rule *rl, bool native, uint16_t num, bool bypass)
{
    if (native)
        e_queue(rl, num, bypass);
    else
        e_nfqueue_target(rl, num, bypass);
}

static void build_queue_chain(struct ctl_nftx *tx, bool fail_open)
{
    struct ctl_nft *n = nft_of(tx);
    const char *chain = queue_chain(fail_open);
    struct ctl_nftx_rule rl;

    tx_chain(tx, chain, -1, 0);
    for (unsigned t = 0; t < n->nthreads; t++) {
        ctl_nftx_rule_start(tx, chain, &rl);
        if (n->nthreads > 1) {
            e_symhash(&rl, n->nthreads);
            ctl_nftx_cmp(&rl, NFT_CMP_EQ, &t, sizeof(t));
        }
        rule_queue(&rl, n->native,
                   (uint16_t)fgx_queue_num(n->queue_base, n->nthreads, fail_open, t), fail_open);
        ctl_nftx_rule_end(&rl);
    }
}

/* The SYN-ACKs of TCP services go to the NFLOG group of the thread that reads the flow's
 * queue (the same symmetric hash, so the same thread; group numbers are the fail-closed queue
 * numbers), and the chain returns. */
static void build_synack_chain(struct ctl_nftx *tx)
{
    struct ctl_nft *n = nft_of(tx);
    struct ctl_nftx_rule rl;

    tx_chain(tx, NFT_SYNACK_CHAIN, -1, 0);
    for (unsigned t = 0; t < n->nthreads; t++) {
        ctl_nftx_rule_start(tx, NFT_SYNACK_CHAIN, &rl);
        if (n->nthreads > 1) {
            e_symhash(&rl, n->nthreads);
            ctl_nftx_cmp(&rl, NFT_CMP_EQ, &t, sizeof(t));
        }
        e_log_group(&rl, (uint16_t)fgx_queue_num(n->queue_base, n->nthreads, false, t));
        ctl_nftx_rule_end(&rl);
    }
}

/* TCP header lengths (in 32-bit words) of the exact no-payload rules, in the order they are
 * tried: 8 first, Linux's usual header (timestamps), so its pure ACKs stop at the first rule. */
static const uint8_t nft_doff_order[] = {8, 5, 6, 7, 9, 10, 11, 12, 13, 14, 15};

/* The body of a service chain, for either direction (c2s: client -> server). */
static void build_service_chain(struct ctl_nftx *tx, const struct ctl_nft_service *s,
                                const char *chain, bool c2s)
{
    static const uint8_t frag_mask[2] = {0x3f, 0xff}; /* IPv4 MF and fragment offset */
    const char *q = queue_chain(s->fail_open);
    struct ctl_nftx_rule rl;

    tx_chain(tx, chain, -1, 0);
    if (s->ipproto == IPPROTO_TCP) {
        ctl_nftx_rule_start(tx, chain, &rl);
        m_tcp_syn(&rl);
        e_mss(&rl, false);
        e_cmp_be16(&rl, NFT_CMP_GT, NFT_MSS_MAX);
        e_set_be16(&rl, NFT_MSS_MAX);
        e_mss(&rl, true);
        ctl_nftx_rule_end(&rl);

        /* Urgent data is made ordinary data, as inline normalisers do: a receiver without
         * SO_OOBINLINE takes the byte the urgent pointer names out of the stream it reads
         * (from this segment or a later one), so "evXil1337" with X urgent would be read as
         * "evil1337" while the worker scans all of it. Cleared here, in the kernel, before the
         * queue and before the no-payload rules accept a pure ACK whose pointer names a byte
         * still to come: the flag (in the 16 bits at offset 12, an even offset for the
         * checksum update) and the pointer. Only packets with URG pay for it. */
        {
            static const uint8_t urg = 0x20;
            static const uint8_t keep_all_but_urg[2] = {0xff, 0xdf};

            ctl_nftx_rule_start(tx, chain, &rl);
            ctl_nftx_meta_u8(&rl, NFT_META_L4PROTO, IPPROTO_TCP);
            ctl_nftx_payload(&rl, NFT_PAYLOAD_TRANSPORT_HEADER, 13, 1);
            ctl_nftx_and(&rl, &urg, 1);
            ctl_nftx_cmp_u8(&rl, urg);
            ctl_nftx_payload(&rl, NFT_PAYLOAD_TRANSPORT_HEADER, 12, 2);
            ctl_nftx_and(&rl, keep_all_but_urg, 2);
            e_payload_write_th(&rl, 12, 2);
            e_set_be16(&rl, 0);
            e_payload_write_th(&rl, 18, 2);
            ctl_nftx_rule_end(&rl);
        }

        /* No handshake packet is queued. The server's SYN-ACK is logged to the worker
         * (NFLOG, the packet is not held): it says that the server accepted a connection, and
         * its sequence and acknowledgement numbers anchor both of the worker's streams at
         * their first byte, so a first data segment sent out of order is held, not taken for
         * the start, and a reused 4-tuple starts afresh. It is logged before it leaves, so
         * before the client can send data after it. A SYN or SYN-ACK with payload is still
         * queued by the rules below. Without the log expression (a kernel without nft_log) the
         * SYN-ACK itself is queued, for the same anchor: one queue trip more per connection. */
        if (!c2s) {
            static const uint8_t syn_ack = 0x12; /* TCP flag bits SYN|ACK */

            ctl_nftx_rule_start(tx, chain, &rl);
            ctl_nftx_meta_u8(&rl, NFT_META_L4PROTO, IPPROTO_TCP);
            ctl_nftx_payload(&rl, NFT_PAYLOAD_TRANSPORT_HEADER, 13, 1);
            ctl_nftx_and(&rl, &syn_ack, 1);
            ctl_nftx_cmp_u8(&rl, syn_ack);
            if (nft_of(tx)->synack_log)
                ctl_nftx_verdict(&rl, NFT_JUMP, NFT_SYNACK_CHAIN);
            else
                ctl_nftx_verdict(&rl, NFT_GOTO, q);
            ctl_nftx_rule_end(&rl);
        }

        /* A FIN or RST is copied to the worker the same way (NFLOG, the packet goes on, never
         * held): it sees connections close, so that flows_active counts open ones only. */
        if (nft_of(tx)->synack_log) {
            static const uint8_t fin_rst = 0x05; /* TCP flag bits FIN|RST */
            static const uint8_t none = 0;

            ctl_nftx_rule_start(tx, chain, &rl);
            ctl_nftx_meta_u8(&rl, NFT_META_L4PROTO, IPPROTO_TCP);
            ctl_nftx_payload(&rl, NFT_PAYLOAD_TRANSPORT_HEADER, 13, 1);
            ctl_nftx_and(&rl, &fin_rst, 1);
            ctl_nftx_cmp(&rl, NFT_CMP_NEQ, &none, 1);
            ctl_nftx_verdict(&rl, NFT_JUMP, NFT_SYNACK_CHAIN);
            ctl_nftx_rule_end(&rl);
        }

        /* Longer than any header the exact rules below accept (IPv4: 20 + 60 bytes, IPv6:
         * 60 after the fixed header), a packet carries payload, IP options or extension
         * headers: queued whichever. Bulk data then skips those 22 rules (measured on veth:
         * the walk was ~2% of all CPU in a bulk transfer). */
        ctl_nftx_rule_start(tx, chain, &rl);
        ctl_nftx_meta_u8(&rl, NFT_META_NFPROTO, NFPROTO_IPV4);
        ctl_nftx_payload(&rl, NFT_PAYLOAD_NETWORK_HEADER, 2, 2);
        e_cmp_be16(&rl, NFT_CMP_GT, 20 + 4 * 15);
        ctl_nftx_verdict(&rl, NFT_GOTO, q);
        ctl_nftx_rule_end(&rl);
        ctl_nftx_rule_start(tx, chain, &rl);
        ctl_nftx_meta_u8(&rl, NFT_META_NFPROTO, NFPROTO_IPV6);
        ctl_nftx_payload(&rl, NFT_PAYLOAD_NETWORK_HEADER, 4, 2);
        e_cmp_be16(&rl, NFT_CMP_GT, 4 * 15);
        ctl_nftx_verdict(&rl, NFT_GOTO, q);
        ctl_nftx_rule_end(&rl);

        /* An IPv4 fragment goes to the worker (which drops it) whatever its length. Where
         * nothing reassembles before these rules (no conntrack or tproxy user in the
         * namespace), a first fragment that holds just a TCP header would pass the exact
         * rules below as a segment with no payload, and the later fragments, which carry no
         * ports, match no service rule: the receiver would reassemble a payload nobody
         * scanned. (An IPv6 fragment header fails "ip6 nexthdr tcp" below.) */
        ctl_nftx_rule_start(tx, chain, &rl);
        ctl_nftx_meta_u8(&rl, NFT_META_NFPROTO, NFPROTO_IPV4);
        ctl_nftx_payload(&rl, NFT_PAYLOAD_NETWORK_HEADER, 6, 2);
        ctl_nftx_and(&rl, &frag_mask, 2);
        e_cmp_be16(&rl, NFT_CMP_NEQ, 0);
        ctl_nftx_verdict(&rl, NFT_GOTO, q);
        ctl_nftx_rule_end(&rl);

        /* A segment with no payload has nothing to scan. Only an exact header-length match
         * counts: IP options or IPv6 extension headers fall through to the worker. */
        for (unsigned i = 0; i < sizeof(nft_doff_order); i++) {
            static const uint8_t ihl_mask = 0x0f;
            unsigned d = nft_doff_order[i];

            ctl_nftx_rule_start(tx, chain, &rl);
            ctl_nftx_meta_u8(&rl, NFT_META_NFPROTO, NFPROTO_IPV4);
            ctl_nftx_payload(&rl, NFT_PAYLOAD_NETWORK_HEADER, 0, 1);
            ctl_nftx_and(&rl, &ihl_mask, 1);
            ctl_nftx_cmp_u8(&rl, 5);
            m_tcp_doff(&rl, d);
            ctl_nftx_payload(&rl, NFT_PAYLOAD_NETWORK_HEADER, 2, 2);
            e_cmp_be16(&rl, NFT_CMP_EQ, (uint16_t)(20 + 4 * d));
            ctl_nftx_verdict(&rl, NF_ACCEPT, NULL);
            ctl_nftx_rule_end(&rl);
        }
        for (unsigned i = 0; i < sizeof(nft_doff_order); i++) {
            unsigned d = nft_doff_order[i];

            ctl_nftx_rule_start(tx, chain, &rl);
            ctl_nftx_meta_u8(&rl, NFT_META_NFPROTO, NFPROTO_IPV6);
            ctl_nftx_payload(&rl, NFT_PAYLOAD_NETWORK_HEADER, 6, 1);
            ctl_nftx_cmp_u8(&rl, IPPROTO_TCP);
            m_tcp_doff(&rl, d);
            ctl_nftx_payload(&rl, NFT_PAYLOAD_NETWORK_HEADER, 4, 2);
            e_cmp_be16(&rl, NFT_CMP_EQ, (uint16_t)(4 * d));
            ctl_nftx_verdict(&rl, NF_ACCEPT, NULL);
            ctl_nftx_rule_end(&rl);
        }
    }
    ctl_nftx_rule_start(tx, chain, &rl);
    ctl_nftx_verdict(&rl, NFT_GOTO, q);
    ctl_nftx_rule_end(&rl);
}

static void build_own_packets(struct ctl_nftx *tx, const char *chain)
{
    uint32_t mask = FGX_MARK_MASK, mark = FGX_MARK;
    struct ctl_nftx_rule rl;

    ctl_nftx_rule_start(tx, chain, &rl);
    ctl_nftx_meta(&rl, NFT_META_MARK);
    ctl_nftx_and(&rl, &mask, sizeof(mask));
    ctl_nftx_cmp(&rl, NFT_CMP_EQ, &mark, sizeof(mark));
    ctl_nftx_verdict(&rl, NF_ACCEPT, NULL);
    ctl_nftx_rule_end(&rl);
}

/* tproxy to addr:port (the team's own proxy), for that address's family only. */
static void e_tproxy_to(struct ctl_nftx_rule *rl, const struct fgx_svcaddr *to)
{
    struct nftnl_expr *e;
    uint16_t port = htons(to->port);
    uint32_t alen = to->cidr.family == 4 ? 4 : 16;

    e = ctl_nftx_expr(rl, "immediate");
    if (e) {
        nftnl_expr_set_u32(e, NFTNL_EXPR_IMM_DREG, NFT_REG_1);
        nftnl_expr_set(e, NFTNL_EXPR_IMM_DATA, to->cidr.addr, alen);
    }
    e = ctl_nftx_expr(rl, "immediate");
    if (e) {
        nftnl_expr_set_u32(e, NFTNL_EXPR_IMM_DREG, NFT_REG_2);
        nftnl_expr_set(e, NFTNL_EXPR_IMM_DATA, &port, sizeof(port));
    }
    e = ctl_nftx_expr(rl, "tproxy");
    if (!e)
        return;
    nftnl_expr_set_u32(e, NFTNL_EXPR_TPROXY_FAMILY,
                       to->cidr.family == 4 ? NFPROTO_IPV4 : NFPROTO_IPV6);
    nftnl_expr_set_u32(e, NFTNL_EXPR_TPROXY_REG_ADDR, NFT_REG_1);
    nftnl_expr_set_u32(e, NFTNL_EXPR_TPROXY_REG_PORT, NFT_REG_2);
}

/* px<id>: where a new connection to the service goes. The proxy layer: proxyworker's port on
 * the packet's own destination. The external layer: the team's proxy at `to` (its family
 * only). Either way marked, so the policy route delivers it locally; a fail-closed service
 * drops what tproxy could not take (no listener, or the other family). */
static void build_px_chain(struct ctl_nftx *tx, const struct ctl_nft_service *s, uint16_t px_port)
{
    char chain[NFT_LABEL_LEN];
    struct ctl_nftx_rule rl;

    (void)snprintf(chain, sizeof(chain), "px%u", (unsigned)s->id);
    tx_chain(tx, chain, -1, 0);
    ctl_nftx_rule_start(tx, chain, &rl);
    if (s->external) {
        ctl_nftx_meta_u8(&rl, NFT_META_NFPROTO,
                         s->to.cidr.family == 4 ? NFPROTO_IPV4 : NFPROTO_IPV6);
        e_tproxy_to(&rl, &s->to);
    } else {
        e_tproxy(&rl, px_port);
    }
    e_mark_set(&rl, CTL_ROUTE_MARK);
    ctl_nftx_verdict(&rl, NF_ACCEPT, NULL);
    ctl_nftx_rule_end(&rl);
    if (!s->fail_open) {
        ctl_nftx_rule_start(tx, chain, &rl);
        ctl_nftx_verdict(&rl, NF_DROP, NULL);
        ctl_nftx_rule_end(&rl);
    }
}

static void build_proxy(struct ctl_nftx *tx, const struct nft_sync_arg *a)
{
    static const uint8_t syn = 0x02, syn_ack = 0x12; /* TCP flag bits SYN, SYN|ACK */
    static const enum nft_map px_maps[] = {M_PX_4, M_PX_6, M_PX_IF};
    static const enum nft_map pxo_sets[] = {S_PXO_4, S_PXO_6, S_PXO_IP};
    struct ctl_nftx_rule rl;
    uint8_t one = 1;
    size_t i;

    tx_chain(tx, "pxpre", NF_INET_PRE_ROUTING, NFT_PRIO_PRE);
    ctl_nftx_chain(tx, "pxout", "route", NF_INET_LOCAL_OUT, NFT_PRIO_PRE, NF_ACCEPT);
    for (i = 0; i < a->npx; i++)
        build_px_chain(tx, &a->px[i], a->px_port);
    for (i = 0; i < sizeof(px_maps) / sizeof(px_maps[0]); i++)
        tx_map(tx, px_maps[i]);
    for (i = 0; i < sizeof(pxo_sets) / sizeof(pxo_sets[0]); i++)
        tx_map(tx, pxo_sets[i]);
    for (i = 0; i < a->npx; i++)
        build_service_elems(tx, &a->px[i], true);

    /* The proxy's own connections to the services: never diverted again. */
    ctl_nftx_rule_start(tx, "pxpre", &rl);
    m_mark_eq(&rl, NFT_CMP_EQ, FGX_MARK);
    ctl_nftx_verdict(&rl, NF_ACCEPT, NULL);
    ctl_nftx_rule_end(&rl);
    /* Packets of a connection the proxy holds (either leg): to it, locally. Not a SYN without
     * ACK: it opens a new connection, and the lookup would also find the proxy's TIME_WAIT
     * socket of a client tuple being reused (transparent too). Accepted here, such a SYN skips
     * tproxy and lands on the service's own listener, unfiltered; the client's ACK then meets
     * that non-transparent request socket in tproxy, falls to the fail-closed drop, and the
     * handshake stalls in SYN-RECV. tproxy below reopens a TIME_WAIT to the proxy itself.
     * The team's own proxy of an external-layer service holds transparent sockets too. */
    ctl_nftx_rule_start(tx, "pxpre", &rl);
    ctl_nftx_meta_u8(&rl, NFT_META_L4PROTO, IPPROTO_TCP);
    ctl_nftx_payload(&rl, NFT_PAYLOAD_TRANSPORT_HEADER, 13, 1);
    ctl_nftx_and(&rl, &syn_ack, sizeof(syn_ack));
    ctl_nftx_cmp(&rl, NFT_CMP_NEQ, &syn, sizeof(syn));
    e_socket_transparent(&rl);
    ctl_nftx_cmp(&rl, NFT_CMP_EQ, &one, sizeof(one));
    e_mark_set(&rl, CTL_ROUTE_MARK);
    ctl_nftx_verdict(&rl, NF_ACCEPT, NULL);
    ctl_nftx_rule_end(&rl);
    /* A service's datagram to a UDP flow's upstream socket (bound to the client's address and
     * port, transparent: px_udp.c): to it, locally. A client's datagram to the service finds
     * no transparent socket of that address there and goes on to tproxy. */
    ctl_nftx_rule_start(tx, "pxpre", &rl);
    ctl_nftx_meta_u8(&rl, NFT_META_L4PROTO, IPPROTO_UDP);
    e_socket_transparent(&rl);
    ctl_nftx_cmp(&rl, NFT_CMP_EQ, &one, sizeof(one));
    e_mark_set(&rl, CTL_ROUTE_MARK);
    ctl_nftx_verdict(&rl, NF_ACCEPT, NULL);
    ctl_nftx_rule_end(&rl);
    /* New connections and datagrams to a service: one lookup per address kind (the protocol
     * in the key), to its px<id> chain. */
    for (i = 0; i < sizeof(px_maps) / sizeof(px_maps[0]); i++) {
        if (px_maps[i] == M_PX_IF && !list_has_ifname(a->px, a->npx))
            continue;
        ctl_nftx_rule_start(tx, "pxpre", &rl);
        m_map(&rl, px_maps[i]);
        ctl_nftx_rule_end(&rl);
    }
    /* The services' replies on the proxy's upstream connections (conntrack marked below),
     * addressed to the client: to the proxy. For any such connection, not per service: one
     * the proxy still holds after its service stopped or moved to the other layer must keep
     * its way back, or the service's next reply goes to the real client, whose reset kills
     * the service's end. */
    ctl_nftx_rule_start(tx, "pxout", &rl);
    m_mark_eq(&rl, NFT_CMP_NEQ, FGX_MARK); /* not the proxy's own packets on that entry */
    e_ct_mark(&rl, false);
    ctl_nftx_cmp(&rl, NFT_CMP_EQ, &(uint32_t){CT_PX}, sizeof(uint32_t));
    e_mark_set(&rl, CTL_ROUTE_MARK);
    ctl_nftx_rule_end(&rl);
    /* The proxy's upstream connection to a service of this box: remember it in conntrack so
     * the service's replies, addressed to the client, are rerouted to the proxy (the rule
     * above). An interface's service is known by its port (pxo_ip). */
    for (i = 0; i < sizeof(pxo_sets) / sizeof(pxo_sets[0]); i++) {
        if (pxo_sets[i] == S_PXO_IP && !list_has_ifname(a->px, a->npx))
            continue;
        ctl_nftx_rule_start(tx, "pxout", &rl);
        m_mark_eq(&rl, NFT_CMP_EQ, FGX_MARK);
        if (pxo_sets[i] == S_PXO_IP) /* a port alone: TCP's (the other sets key the protocol) */
            ctl_nftx_meta_u8(&rl, NFT_META_L4PROTO, IPPROTO_TCP);
        m_map(&rl, pxo_sets[i]);
        e_set_u32(&rl, CT_PX);
        e_ct_mark(&rl, true);
        ctl_nftx_verdict(&rl, NF_ACCEPT, NULL);
        ctl_nftx_rule_end(&rl);
    }
    /* The box's own clients: through lo, where the tproxy rule sees them (an interface's
     * service is reached from outside only; the external layer takes outside clients). */
    for (i = 0; i < 2; i++) {
        ctl_nftx_rule_start(tx, "pxout", &rl);
        m_mark_eq(&rl, NFT_CMP_NEQ, FGX_MARK);
        m_map(&rl, pxo_sets[i]);
        e_mark_set(&rl, CTL_ROUTE_MARK);
        ctl_nftx_rule_end(&rl);
    }
}

static void build_sync(struct ctl_nftx *tx, const void *arg)
{
    static const enum nft_map c2s_maps[] = {M_C2S_4, M_C2S_6, M_C2S_IF};
    static const enum nft_map s2c_maps[] = {M_S2C_4, M_S2C_6, M_S2C_IF};
    const struct nft_sync_arg *a = arg;
    bool used[2] = {false, false};
    char c2s[NFT_LABEL_LEN], s2c[NFT_LABEL_LEN];
    struct ctl_nftx_rule rl;

    /* Adding first makes the delete valid whether or not the table existed. */
    ctl_nftx_table(tx, NFT_MSG_NEWTABLE, tx->table);
    ctl_nftx_table(tx, NFT_MSG_DELTABLE, tx->table);
    if (a->nsvcs == 0 && a->npx == 0)
        return;
    ctl_nftx_table(tx, NFT_MSG_NEWTABLE, tx->table);
    if (a->npx > 0)
        build_proxy(tx, a);
    if (a->nsvcs == 0)
        return;
    tx_chain(tx, "pre", NF_INET_PRE_ROUTING, NFT_PRIO_PRE);
    tx_chain(tx, "post", NF_INET_POST_ROUTING, NFT_PRIO_POST);
    for (size_t i = 0; i < a->nsvcs; i++)
        used[a->svcs[i].fail_open] = true;
    for (int fo = 0; fo < 2; fo++) {
        if (used[fo])
            build_queue_chain(tx, fo);
    }
    for (size_t i = 0; i < a->nsvcs; i++) {
        if (a->svcs[i].ipproto == IPPROTO_TCP) {
            if (nft_of(tx)->synack_log)
                build_synack_chain(tx);
            break;
        }
    }
    for (size_t i = 0; i < a->nsvcs; i++) {
        (void)snprintf(c2s, sizeof(c2s), "s%u_c2s", (unsigned)a->svcs[i].id);
        (void)snprintf(s2c, sizeof(s2c), "s%u_s2c", (unsigned)a->svcs[i].id);
        build_service_chain(tx, &a->svcs[i], c2s, true);
        build_service_chain(tx, &a->svcs[i], s2c, false);
    }
    /* The maps after the chains their elements jump to. */
    for (size_t i = 0; i < 3; i++) {
        tx_map(tx, c2s_maps[i]);
        tx_map(tx, s2c_maps[i]);
    }
    for (size_t i = 0; i < a->nsvcs; i++)
        build_service_elems(tx, &a->svcs[i], false);
    build_own_packets(tx, "pre");
    build_own_packets(tx, "post");
    /* One lookup per address kind and direction, however many services and addresses. */
    for (size_t i = 0; i < 3; i++) {
        if (c2s_maps[i] == M_C2S_IF && !list_has_ifname(a->svcs, a->nsvcs))
            continue;
        ctl_nftx_rule_start(tx, "pre", &rl);
        m_map(&rl, c2s_maps[i]);
        ctl_nftx_rule_end(&rl);
        ctl_nftx_rule_start(tx, "post", &rl);
        m_map(&rl, s2c_maps[i]);
        ctl_nftx_rule_end(&rl);
    }
}

/* Only addresses changed since the last sync (same services, same order, same everything
 * else): the elements that differ, in one batch. */
struct nft_delta_arg {
    const struct ctl_nft_service *old_nfq, *nfq, *old_px, *px;
    size_t nnfq, npx;
};

static void build_delta(struct ctl_nftx *tx, const void *arg)
{
    const struct nft_delta_arg *a = arg;

    for (int pass = 0; pass < 2; pass++) {
        for (size_t i = 0; i < a->nnfq; i++)
            build_service_delta(tx, &a->old_nfq[i], &a->nfq[i], false, pass);
        for (size_t i = 0; i < a->npx; i++)
            build_service_delta(tx, &a->old_px[i], &a->px[i], true, pass);
    }
}

/* true when old and cur differ in addresses at most: the same chains, only other elements. */
static bool same_but_addrs(const struct ctl_nft_service *old, size_t nold,
                           const struct ctl_nft_service *cur, size_t ncur)
{
    if (nold != ncur || list_has_ifname(old, nold) != list_has_ifname(cur, ncur))
        return false;
    for (size_t i = 0; i < ncur; i++) {
        if (old[i].id != cur[i].id || old[i].ipproto != cur[i].ipproto ||
            old[i].fail_open != cur[i].fail_open || old[i].external != cur[i].external ||
            (cur[i].external && !fgx_svcaddr_equal(&old[i].to, &cur[i].to)))
            return false;
    }
    return true;
}

/* A throwaway table with one rule that queues the way n->native says; deleted in the same
 * transaction, so nothing stays behind whatever the outcome. */
static void build_probe(struct ctl_nftx *tx, const void *arg)
{
    struct ctl_nftx_rule rl;

    (void)arg;
    ctl_nftx_table(tx, NFT_MSG_NEWTABLE, tx->table);
    tx_chain(tx, "probe", -1, 0);
    ctl_nftx_rule_start(tx, "probe", &rl);
    rule_queue(&rl, nft_of(tx)->native, (uint16_t)nft_of(tx)->queue_base, true);
    ctl_nftx_rule_end(&rl);
    ctl_nftx_table(tx, NFT_MSG_DELTABLE, tx->table);
}

/* The same for the log expression the SYN-ACK copies use. */
static void build_probe_log(struct ctl_nftx *tx, const void *arg)
{
    struct ctl_nftx_rule rl;

    (void)arg;
    ctl_nftx_table(tx, NFT_MSG_NEWTABLE, tx->table);
    tx_chain(tx, "probe", -1, 0);
    ctl_nftx_rule_start(tx, "probe", &rl);
    e_log_group(&rl, (uint16_t)nft_of(tx)->queue_base);
    ctl_nftx_rule_end(&rl);
    ctl_nftx_table(tx, NFT_MSG_DELTABLE, tx->table);
}

/* ---- running a transaction ------------------------------------------------------------- */

/* Build with fn and run it as one transaction. quiet: the caller expects that it may fail
 * (the probe), so the kernel's refusal is logged at debug level only. */
static int tx_run(struct ctl_nft *n, const char *table, nft_build_fn fn, const void *arg,
                  bool quiet)
{
    struct ctl_nftx tx;
    int rc;

    ctl_nftx_begin(&tx, &n->sock, table, "the transaction", n);
    fn(&tx, arg);
    rc = ctl_nftx_commit(&tx, &n->sock, quiet);
    ctl_nftx_release(&tx);
    return rc;
}

/* ---- public ---------------------------------------------------------------------------- */

int ctl_nft_open(const struct ctl_nft_config *cfg, struct ctl_nft **out)
{
    struct ctl_nft *n = NULL;
    const char *table = cfg->table ? cfg->table : NFT_DEFAULT_TABLE;
    int rc;

    if (table[0] == '\0' || cfg->nthreads == 0 ||
        cfg->queue_base + 2ul * cfg->nthreads - 1 > UINT16_MAX) {
        fgx_err("nft: bad config: table '%s', queues %u + 2 * %u threads", table, cfg->queue_base,
                cfg->nthreads);
        return -EINVAL;
    }
    n = calloc(1, sizeof(*n));
    if (!n || !(n->table = strdup(table))) {
        rc = -ENOMEM;
        fgx_err("nft: no memory");
        goto err;
    }
    n->queue_base = cfg->queue_base;
    n->nthreads = cfg->nthreads;
    rc = ctl_nftx_sock_open(&n->sock, (uint32_t)time(NULL));
    if (rc < 0)
        goto err;

    n->native = true;
    rc = tx_run(n, NFT_PROBE_TABLE, build_probe, NULL, true);
    if (rc == -ENOENT || rc == -EOPNOTSUPP) {
        n->native = false;
        rc = tx_run(n, NFT_PROBE_TABLE, build_probe, NULL, true);
        if (rc < 0) {
            fgx_err("nft: neither the nftables queue expression nor the xtables NFQUEUE target "
                    "is available: %s",
                    strerror(-rc));
            goto err;
        }
        fgx_info("nft: no native queue expression in this kernel: using the xtables NFQUEUE "
                 "target");
    } else if (rc < 0) {
        fgx_err("nft: probing the kernel failed: %s", strerror(-rc));
        goto err;
    }
    n->synack_log = cfg->no_synack_log == 0;
    if (n->synack_log) {
        rc = tx_run(n, NFT_PROBE_TABLE, build_probe_log, NULL, true);
        if (rc == -ENOENT || rc == -EOPNOTSUPP) {
            n->synack_log = false;
            fgx_info("nft: no log expression in this kernel: the server's SYN-ACK is queued "
                     "instead of copied (one queue trip more per connection)");
        } else if (rc < 0) {
            fgx_err("nft: probing the kernel failed: %s", strerror(-rc));
            goto err;
        }
    }
    *out = n;
    return 0;
err:
    ctl_nft_close(n);
    return rc;
}

bool ctl_nft_native_queue(const struct ctl_nft *n)
{
    return n->native;
}

bool ctl_nft_synack_log(const struct ctl_nft *n)
{
    return n->synack_log;
}

static int check_service(const struct ctl_nft_service *s)
{
    unsigned maxprefix = s->addr.family == 4 ? 32 : 128;

    if (s->ipproto != IPPROTO_TCP && s->ipproto != IPPROTO_UDP) {
        fgx_err("nft: service %u: protocol %u is neither tcp nor udp", (unsigned)s->id,
                (unsigned)s->ipproto);
        return -EINVAL;
    }
    if (s->port == 0) {
        fgx_err("nft: service %u: port 0", (unsigned)s->id);
        return -EINVAL;
    }
    if (s->addr.family != 0 && s->addr.family != 4 && s->addr.family != 6) {
        fgx_err("nft: service %u: address family %u", (unsigned)s->id, (unsigned)s->addr.family);
        return -EINVAL;
    }
    if (s->addr.family != 0 && s->addr.prefix > maxprefix) {
        fgx_err("nft: service %u: prefix /%u", (unsigned)s->id, (unsigned)s->addr.prefix);
        return -EINVAL;
    }
    return 0;
}

static int check_list(const struct ctl_nft_service *svcs, size_t nsvcs)
{
    int rc;

    for (size_t i = 0; i < nsvcs; i++) {
        rc = check_service(&svcs[i]);
        if (rc < 0)
            return rc;
        for (size_t j = 0; j < i; j++) {
            if (svcs[j].id == svcs[i].id) {
                fgx_err("nft: service %u given twice", (unsigned)svcs[i].id);
                return -EINVAL;
            }
        }
    }
    return 0;
}

/* *dst (nd entries) becomes a copy of src; unchanged on failure. */
static int list_copy(struct ctl_nft_service **dst, size_t *nd, const struct ctl_nft_service *src,
                     size_t n)
{
    struct ctl_nft_service *c = NULL;

    if (n > 0) {
        c = malloc(n * sizeof(*c));
        if (!c) {
            fgx_err("nft: no memory");
            return -ENOMEM;
        }
        memcpy(c, src, n * sizeof(*c));
    }
    free(*dst);
    *dst = c;
    *nd = n;
    return 0;
}

int ctl_nft_sync_layers(struct ctl_nft *n, const struct ctl_nft_service *nfq, size_t nnfq,
                        const struct ctl_nft_service *px, size_t npx, uint16_t px_port)
{
    struct nft_sync_arg arg = {
        .svcs = nfq, .nsvcs = nnfq, .px = px, .npx = npx, .px_port = px_port};
    struct ctl_nft_service *keep_nfq = NULL, *keep_px = NULL;
    size_t nkeep_nfq = 0, nkeep_px = 0;
    int rc;

    rc = check_list(nfq, nnfq);
    if (rc == 0)
        rc = check_list(px, npx);
    for (size_t i = 0; rc == 0 && i < npx; i++) {
        if (!px[i].external && px_port == 0) {
            fgx_err("nft: proxy-layer services but no proxy port");
            rc = -EINVAL;
        }
        if (px[i].external &&
            ((px[i].to.cidr.family != 4 && px[i].to.cidr.family != 6) || px[i].to.port == 0)) {
            fgx_err("nft: external service %u without its proxy's address", (unsigned)px[i].id);
            rc = -EINVAL;
        }
    }
    for (size_t i = 0; rc == 0 && i < npx; i++) {
        for (size_t j = 0; j < nnfq; j++) {
            if (nfq[j].id == px[i].id) {
                fgx_err("nft: service %u on both layers", (unsigned)px[i].id);
                rc = -EINVAL;
                break;
            }
        }
    }
    if (rc < 0)
        return rc;
    /* Copies first, so that a failure leaves the recorded state as it was. */
    if ((rc = list_copy(&keep_nfq, &nkeep_nfq, nfq, nnfq)) < 0 ||
        (rc = list_copy(&keep_px, &nkeep_px, px, npx)) < 0)
        goto out;
    /* Only addresses changed: their elements, in one batch, and nothing else is touched (a
     * table rebuilt whole would be atomic too, but every service's rules would be replaced
     * for one address). A table that went astray meanwhile gets rebuilt whole below. */
    if (n->applied && nnfq + npx > 0 && px_port == n->px_port &&
        same_but_addrs(n->nfq, n->nnfq, nfq, nnfq) && same_but_addrs(n->px, n->npx, px, npx)) {
        struct nft_delta_arg d = {
            .old_nfq = n->nfq, .nfq = nfq, .nnfq = nnfq, .old_px = n->px, .px = px, .npx = npx};
        struct ctl_nftx tx;
        uint32_t nmsgs;

        ctl_nftx_begin(&tx, &n->sock, n->table, "the transaction", n);
        build_delta(&tx, &d);
        nmsgs = tx.nmsgs;
        rc = tx.nmsgs > 0 || tx.err ? ctl_nftx_commit(&tx, &n->sock, false) : 0;
        ctl_nftx_release(&tx);
        if (rc == 0) {
            fgx_debug("nft: %u address element(s) changed in table inet %s", (unsigned)nmsgs,
                      n->table);
            goto keep;
        }
        fgx_warn("nft: changing the address elements failed; rebuilding table inet %s", n->table);
    }
    /* The routing exists before any rule marks a packet for it, and goes after the last. */
    if (npx > 0 && (rc = ctl_route_setup()) < 0)
        goto out;
    n->applied = false;
    rc = tx_run(n, n->table, build_sync, &arg, false);
    if (rc < 0)
        goto out;
    n->applied = true;
    if (npx == 0 && n->npx > 0)
        (void)ctl_route_teardown();
keep:
    free(n->nfq);
    free(n->px);
    n->nfq = keep_nfq;
    n->nnfq = nkeep_nfq;
    n->px = keep_px;
    n->npx = nkeep_px;
    n->px_port = px_port;
    keep_nfq = keep_px = NULL;
    fgx_debug("nft: table inet %s now holds %zu nfqueue-layer and %zu proxy-layer services",
              n->table, nnfq, npx);
out:
    free(keep_nfq);
    free(keep_px);
    return rc;
}

int ctl_nft_sync(struct ctl_nft *n, const struct ctl_nft_service *svcs, size_t nsvcs)
{
    return ctl_nft_sync_layers(n, svcs, nsvcs, n->px, n->npx, n->px_port);
}

const char *ctl_nft_table(const struct ctl_nft *n)
{
    return n->table;
}

uint32_t ctl_nft_portid(const struct ctl_nft *n)
{
    return ctl_nftx_sock_portid(&n->sock);
}

bool ctl_nft_wanted(const struct ctl_nft *n)
{
    return n->nnfq + n->npx > 0;
}

bool ctl_nft_route_wanted(const struct ctl_nft *n)
{
    return n->npx > 0;
}

int ctl_nft_restore(struct ctl_nft *n)
{
    struct nft_sync_arg arg = {
        .svcs = n->nfq, .nsvcs = n->nnfq, .px = n->px, .npx = n->npx, .px_port = n->px_port};
    int rc;

    if (!ctl_nft_wanted(n))
        return 0;
    if (n->npx > 0 && (rc = ctl_route_setup()) < 0)
        return rc;
    n->applied = false;
    rc = tx_run(n, n->table, build_sync, &arg, false);
    if (rc == 0)
        n->applied = true;
    return rc;
}

int ctl_nft_clear(struct ctl_nft *n)
{
    int rc = ctl_nft_sync_layers(n, NULL, 0, NULL, 0, 0);

    /* Whatever the table held, no proxy routing stays behind controld. */
    if (rc == 0)
        rc = ctl_route_teardown();
    return rc;
}

void ctl_nft_close(struct ctl_nft *n)
{
    if (!n)
        return;
    ctl_nftx_sock_close(&n->sock);
    free(n->nfq);
    free(n->px);
    free(n->table);
    free(n);
}
