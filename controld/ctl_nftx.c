/* controld: one nftables transaction (ctl_nftx.h). */
#include "controld/ctl_nftx.h"

/* glibc's first, so that the linux/ headers defer to its definitions */
#include <netinet/in.h>

#include <errno.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <libmnl/libmnl.h>
#include <libnftnl/chain.h>
#include <libnftnl/common.h>
#include <libnftnl/expr.h>
#include <libnftnl/rule.h>
#include <libnftnl/table.h>

#include "fgx/log.h"

#define NFTX_RX_TIMEOUT_MS 10000
#define NFTX_RCVBUF (1 << 20)
#define NFTX_SLACK 64             /* room for the batch end after any message */
#define NFTX_BATCH_MAX (1u << 30) /* a batch is one datagram */

/* ---- the socket ---- */

int ctl_nftx_sock_open(struct ctl_nftx_sock *s, uint32_t seq0)
{
    int one = 1, rcvbuf = NFTX_RCVBUF, fd;
    socklen_t sl = sizeof(s->sndbuf);

    s->seq = seq0;
    s->nl = mnl_socket_open(NETLINK_NETFILTER);
    if (!s->nl || mnl_socket_bind(s->nl, 0, MNL_SOCKET_AUTOPID) == -1) {
        int rc = -errno;

        fgx_err("nft: netlink socket: %s", strerror(errno));
        ctl_nftx_sock_close(s);
        return rc;
    }
    /* Best effort: the kernel's error text, and acks without a copy of our message. */
    (void)mnl_socket_setsockopt(s->nl, NETLINK_EXT_ACK, &one, sizeof(one));
    (void)mnl_socket_setsockopt(s->nl, NETLINK_CAP_ACK, &one, sizeof(one));
    fd = mnl_socket_get_fd(s->nl);
    if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf, sizeof(rcvbuf)) == -1)
        (void)setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
    if (getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &s->sndbuf, &sl) == -1)
        s->sndbuf = 0;
    return 0;
}

uint32_t ctl_nftx_sock_portid(const struct ctl_nftx_sock *s)
{
    return s->nl ? mnl_socket_get_portid(s->nl) : 0;
}

void ctl_nftx_sock_close(struct ctl_nftx_sock *s)
{
    if (s->nl)
        mnl_socket_close(s->nl);
    s->nl = NULL;
}

/* ---- building ---- */

void ctl_nftx_fail(struct ctl_nftx *tx, int err)
{
    if (tx->err == 0)
        tx->err = err;
}

/* Room for need more bytes (and the batch end) in the buffer. */
static int reserve(struct ctl_nftx *tx, size_t need)
{
    size_t ncap = tx->cap ? tx->cap : 65536;
    char *nb;

    if (tx->err)
        return tx->err;
    if (tx->len + need + NFTX_SLACK <= tx->cap)
        return 0;
    while (tx->len + need + NFTX_SLACK > ncap)
        ncap *= 2;
    nb = realloc(tx->buf, ncap);
    if (!nb) {
        ctl_nftx_fail(tx, -ENOMEM);
        return -ENOMEM;
    }
    tx->buf = nb;
    tx->cap = ncap;
    return 0;
}

void ctl_nftx_restart(struct ctl_nftx *tx, struct ctl_nftx_sock *s)
{
    tx->len = 0;
    tx->nmsgs = 0;
    tx->err = tx->kerr = 0;
    tx->seq0 = s->seq;
    if (reserve(tx, NFTX_SLACK) == 0)
        tx->len = NLMSG_ALIGN(nftnl_batch_begin(tx->buf, tx->seq0)->nlmsg_len);
}

void ctl_nftx_begin(struct ctl_nftx *tx, struct ctl_nftx_sock *s, const char *table,
                    const char *what, void *arg)
{
    memset(tx, 0, sizeof(*tx));
    tx->table = table;
    tx->what = what;
    tx->arg = arg;
    ctl_nftx_restart(tx, s);
}

void ctl_nftx_release(struct ctl_nftx *tx)
{
    free(tx->buf);
    free(tx->labels);
    tx->buf = NULL;
    tx->labels = NULL;
    tx->len = tx->cap = tx->nlabels = 0;
}

struct nlmsghdr *ctl_nftx_hdr(struct ctl_nftx *tx, uint16_t type, uint16_t flags, size_t need,
                              const char *label)
{
    if (reserve(tx, need) < 0)
        return NULL;
    if (tx->nmsgs >= tx->nlabels) {
        size_t n = tx->nlabels ? 2 * tx->nlabels : 64;
        char(*nl)[CTL_NFTX_LABEL_LEN] = realloc(tx->labels, n * sizeof(*nl));

        if (!nl) {
            ctl_nftx_fail(tx, -ENOMEM);
            return NULL;
        }
        tx->labels = nl;
        tx->nlabels = n;
    }
    (void)snprintf(tx->labels[tx->nmsgs], CTL_NFTX_LABEL_LEN, "%s", label);
    tx->nmsgs++;
    tx->need = need;
    return nftnl_nlmsg_build_hdr(tx->buf + tx->len, type, NFPROTO_INET, flags,
                                 tx->seq0 + tx->nmsgs);
}

void ctl_nftx_next(struct ctl_nftx *tx, struct nlmsghdr *nlh)
{
    /* The room reserved was need (and the slack): a larger message is a builder's bug. */
    if (nlh->nlmsg_len > tx->need) {
        fgx_err("nft: message for %s too large (%u bytes)", tx->labels[tx->nmsgs - 1],
                nlh->nlmsg_len);
        ctl_nftx_fail(tx, -EMSGSIZE);
        return;
    }
    tx->len += NLMSG_ALIGN(nlh->nlmsg_len);
}

/* ---- sending ---- */

static const char *extack_msg(const struct nlmsghdr *nlh)
{
    const struct nlmsgerr *e = mnl_nlmsg_get_payload(nlh);
    const struct nlattr *attr;
    size_t off = sizeof(*e);

    if (!(nlh->nlmsg_flags & NLM_F_ACK_TLVS))
        return NULL;
    if (!(nlh->nlmsg_flags & NLM_F_CAPPED))
        off += e->msg.nlmsg_len - sizeof(struct nlmsghdr);
    mnl_attr_for_each(attr, nlh, off)
    {
        if (mnl_attr_get_type(attr) == NLMSGERR_ATTR_MSG &&
            mnl_attr_validate(attr, MNL_TYPE_NUL_STRING) == 0)
            return mnl_attr_get_str(attr);
    }
    return NULL;
}

/* One buffer of replies. Sets *done on the reply that ends the transaction: the ack of its
 * last message, or an error for the batch as a whole. Keeps the first error in tx->kerr and
 * logs it; the rest are consequences of the same refusal. */
static void replies(struct ctl_nftx *tx, const void *buf, size_t len, bool quiet, bool *done)
{
    const struct nlmsghdr *nlh = buf;
    int left = (int)len;

    for (; mnl_nlmsg_ok(nlh, left); nlh = mnl_nlmsg_next(nlh, &left)) {
        const struct nlmsgerr *e;
        const char *msg;
        uint32_t rel = nlh->nlmsg_seq - tx->seq0; /* 0: batch begin; wraps safely */

        /* Replies to an earlier transaction that gave up early are not ours. */
        if (nlh->nlmsg_type != NLMSG_ERROR || rel > tx->nmsgs ||
            mnl_nlmsg_get_payload_len(nlh) < sizeof(*e))
            continue;
        e = mnl_nlmsg_get_payload(nlh);
        if (rel == tx->nmsgs || (rel == 0 && e->error != 0))
            *done = true;
        if (e->error == 0 || tx->kerr != 0)
            continue;
        tx->kerr = e->error;
        msg = extack_msg(nlh);
        fgx_log(quiet ? FGX_LOG_DEBUG : FGX_LOG_ERROR,
                "nft: the kernel refused %s (message %u of %u, %s): %s%s%s", tx->what,
                (unsigned)rel, (unsigned)tx->nmsgs, rel == 0 ? "the batch" : tx->labels[rel - 1],
                strerror(-e->error), msg ? ": " : "", msg ? msg : "");
    }
}

static int recv_answers(struct ctl_nftx *tx, struct ctl_nftx_sock *s, bool quiet)
{
    int fd = mnl_socket_get_fd(s->nl), rc;
    bool done = false;
    ssize_t len;

    while (!done) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};

        rc = poll(&pfd, 1, NFTX_RX_TIMEOUT_MS);
        if (rc == -1 && errno == EINTR)
            continue;
        if (rc <= 0) {
            rc = rc == 0 ? -ETIMEDOUT : -errno;
            fgx_err("nft: no answer from the kernel for %s: %s", tx->what, strerror(-rc));
            return rc;
        }
        len = recv(fd, s->rx, sizeof(s->rx), 0);
        if (len == -1) {
            if (errno == EINTR)
                continue;
            rc = -errno;
            fgx_err("nft: reading the kernel's answer: %s", strerror(errno));
            return rc;
        }
        replies(tx, s->rx, (size_t)len, quiet, &done);
    }
    /* The kernel answers the whole batch before sendmsg returns: anything left (the other
     * errors of a failed batch) is already queued. */
    while ((len = recv(fd, s->rx, sizeof(s->rx), MSG_DONTWAIT)) > 0)
        replies(tx, s->rx, (size_t)len, quiet, &done);
    return tx->kerr;
}

/* Room in the socket's send buffer for the whole batch: a batch is one datagram. */
static int sndbuf(struct ctl_nftx_sock *s, size_t len)
{
    int fd = mnl_socket_get_fd(s->nl), want;

    if (len + 4096 <= (size_t)s->sndbuf)
        return 0;
    if (len > NFTX_BATCH_MAX) {
        fgx_err("nft: batch of %zu bytes is too large", len);
        return -EMSGSIZE;
    }
    want = (int)len + 4096;
    if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &want, sizeof(want)) == -1 &&
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &want, sizeof(want)) == -1) {
        int rc = -errno;

        fgx_err("nft: netlink send buffer of %d bytes: %s", want, strerror(errno));
        return rc;
    }
    s->sndbuf = want;
    return 0;
}

int ctl_nftx_commit(struct ctl_nftx *tx, struct ctl_nftx_sock *s, bool quiet)
{
    struct nlmsghdr *last = NULL;
    size_t off;
    int rc;

    if (tx->err) {
        fgx_err("nft: building %s: %s", tx->what, strerror(-tx->err));
        return tx->err;
    }
    /* Only the last message asks for an ack: errors come regardless, and the ack says the
     * kernel is done with the batch. */
    off = NLMSG_ALIGN(((struct nlmsghdr *)tx->buf)->nlmsg_len);
    while (off < tx->len) {
        last = (struct nlmsghdr *)(tx->buf + off);
        off += NLMSG_ALIGN(last->nlmsg_len);
    }
    if (last)
        last->nlmsg_flags |= NLM_F_ACK;
    /* the slack reserved with every message holds the end */
    tx->len += NLMSG_ALIGN(nftnl_batch_end(tx->buf + tx->len, tx->seq0 + tx->nmsgs + 1)->nlmsg_len);
    s->seq = tx->seq0 + tx->nmsgs + 2;
    rc = sndbuf(s, tx->len);
    if (rc < 0)
        return rc;
    if (mnl_socket_sendto(s->nl, tx->buf, tx->len) == -1) {
        rc = -errno;
        fgx_err("nft: sending %s (%zu bytes): %s", tx->what, tx->len, strerror(errno));
        return rc;
    }
    return recv_answers(tx, s, quiet);
}

/* ---- objects ---- */

void ctl_nftx_table(struct ctl_nftx *tx, uint16_t type, const char *name)
{
    struct nftnl_table *t = NULL;
    struct nlmsghdr *nlh;
    char label[CTL_NFTX_LABEL_LEN];

    (void)snprintf(label, sizeof(label), "%s table %s", type == NFT_MSG_DELTABLE ? "delete" : "add",
                   name);
    nlh = ctl_nftx_hdr(tx, type, type == NFT_MSG_NEWTABLE ? NLM_F_CREATE : 0, CTL_NFTX_MSG_MAX,
                       label);
    if (!nlh)
        return;
    t = nftnl_table_alloc();
    if (!t || nftnl_table_set_str(t, NFTNL_TABLE_NAME, name) != 0) {
        ctl_nftx_fail(tx, -ENOMEM);
        goto out;
    }
    nftnl_table_set_u32(t, NFTNL_TABLE_FAMILY, NFPROTO_INET);
    nftnl_table_nlmsg_build_payload(nlh, t);
    ctl_nftx_next(tx, nlh);
out:
    nftnl_table_free(t);
}

void ctl_nftx_chain(struct ctl_nftx *tx, const char *name, const char *type, int hook, int prio,
                    uint32_t policy)
{
    struct nftnl_chain *c = NULL;
    struct nlmsghdr *nlh;
    char label[CTL_NFTX_LABEL_LEN];

    (void)snprintf(label, sizeof(label), "add chain %s", name);
    nlh = ctl_nftx_hdr(tx, NFT_MSG_NEWCHAIN, NLM_F_CREATE, CTL_NFTX_MSG_MAX, label);
    if (!nlh)
        return;
    c = nftnl_chain_alloc();
    if (!c || nftnl_chain_set_str(c, NFTNL_CHAIN_TABLE, tx->table) != 0 ||
        nftnl_chain_set_str(c, NFTNL_CHAIN_NAME, name) != 0 ||
        (hook >= 0 && nftnl_chain_set_str(c, NFTNL_CHAIN_TYPE, type) != 0)) {
        ctl_nftx_fail(tx, -ENOMEM);
        goto out;
    }
    nftnl_chain_set_u32(c, NFTNL_CHAIN_FAMILY, NFPROTO_INET);
    if (hook >= 0) {
        nftnl_chain_set_u32(c, NFTNL_CHAIN_HOOKNUM, (uint32_t)hook);
        nftnl_chain_set_s32(c, NFTNL_CHAIN_PRIO, prio);
        nftnl_chain_set_u32(c, NFTNL_CHAIN_POLICY, policy);
    }
    nftnl_chain_nlmsg_build_payload(nlh, c);
    ctl_nftx_next(tx, nlh);
out:
    nftnl_chain_free(c);
}

/* ---- rules ---- */

void ctl_nftx_rule_start(struct ctl_nftx *tx, const char *chain, struct ctl_nftx_rule *rl)
{
    rl->tx = tx;
    rl->chain = chain;
    rl->r = NULL;
    if (tx->err)
        return;
    rl->r = nftnl_rule_alloc();
    if (!rl->r || nftnl_rule_set_str(rl->r, NFTNL_RULE_TABLE, tx->table) != 0 ||
        nftnl_rule_set_str(rl->r, NFTNL_RULE_CHAIN, chain) != 0) {
        ctl_nftx_fail(tx, -ENOMEM);
        return;
    }
    nftnl_rule_set_u32(rl->r, NFTNL_RULE_FAMILY, NFPROTO_INET);
}

void ctl_nftx_rule_end(struct ctl_nftx_rule *rl)
{
    struct nlmsghdr *nlh = NULL;
    char label[CTL_NFTX_LABEL_LEN];

    if (rl->r && !rl->tx->err) {
        (void)snprintf(label, sizeof(label), "add rule to chain %s", rl->chain);
        nlh = ctl_nftx_hdr(rl->tx, NFT_MSG_NEWRULE, NLM_F_CREATE | NLM_F_APPEND, CTL_NFTX_MSG_MAX,
                           label);
    }
    if (nlh) {
        nftnl_rule_nlmsg_build_payload(nlh, rl->r);
        ctl_nftx_next(rl->tx, nlh);
    }
    nftnl_rule_free(rl->r);
    rl->r = NULL;
}

struct nftnl_expr *ctl_nftx_expr(struct ctl_nftx_rule *rl, const char *name)
{
    struct nftnl_expr *e;

    if (!rl->r || rl->tx->err)
        return NULL;
    e = nftnl_expr_alloc(name);
    if (!e) {
        ctl_nftx_fail(rl->tx, -ENOMEM);
        return NULL;
    }
    nftnl_rule_add_expr(rl->r, e);
    return e;
}

void ctl_nftx_meta_to(struct ctl_nftx_rule *rl, uint32_t key, uint32_t dreg)
{
    struct nftnl_expr *e = ctl_nftx_expr(rl, "meta");

    if (!e)
        return;
    nftnl_expr_set_u32(e, NFTNL_EXPR_META_KEY, key);
    nftnl_expr_set_u32(e, NFTNL_EXPR_META_DREG, dreg);
}

void ctl_nftx_meta(struct ctl_nftx_rule *rl, uint32_t key)
{
    ctl_nftx_meta_to(rl, key, NFT_REG_1);
}

void ctl_nftx_payload_to(struct ctl_nftx_rule *rl, uint32_t base, uint32_t offset, uint32_t len,
                         uint32_t dreg)
{
    struct nftnl_expr *e = ctl_nftx_expr(rl, "payload");

    if (!e)
        return;
    nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_BASE, base);
    nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_OFFSET, offset);
    nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_LEN, len);
    nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_DREG, dreg);
}

void ctl_nftx_payload(struct ctl_nftx_rule *rl, uint32_t base, uint32_t offset, uint32_t len)
{
    ctl_nftx_payload_to(rl, base, offset, len, NFT_REG_1);
}

void ctl_nftx_and(struct ctl_nftx_rule *rl, const void *mask, uint32_t len)
{
    static const uint8_t zero[16];
    struct nftnl_expr *e = ctl_nftx_expr(rl, "bitwise");

    if (!e)
        return;
    if (len > sizeof(zero)) {
        ctl_nftx_fail(rl->tx, -EINVAL);
        return;
    }
    nftnl_expr_set_u32(e, NFTNL_EXPR_BITWISE_SREG, NFT_REG_1);
    nftnl_expr_set_u32(e, NFTNL_EXPR_BITWISE_DREG, NFT_REG_1);
    nftnl_expr_set_u32(e, NFTNL_EXPR_BITWISE_LEN, len);
    nftnl_expr_set(e, NFTNL_EXPR_BITWISE_MASK, mask, len);
    nftnl_expr_set(e, NFTNL_EXPR_BITWISE_XOR, zero, len);
}

void ctl_nftx_cmp(struct ctl_nftx_rule *rl, uint32_t op, const void *data, uint32_t len)
{
    struct nftnl_expr *e = ctl_nftx_expr(rl, "cmp");

    if (!e)
        return;
    nftnl_expr_set_u32(e, NFTNL_EXPR_CMP_SREG, NFT_REG_1);
    nftnl_expr_set_u32(e, NFTNL_EXPR_CMP_OP, op);
    nftnl_expr_set(e, NFTNL_EXPR_CMP_DATA, data, len);
}

void ctl_nftx_cmp_u8(struct ctl_nftx_rule *rl, uint8_t v)
{
    ctl_nftx_cmp(rl, NFT_CMP_EQ, &v, sizeof(v));
}

void ctl_nftx_verdict(struct ctl_nftx_rule *rl, int verdict, const char *chain)
{
    struct nftnl_expr *e = ctl_nftx_expr(rl, "immediate");

    if (!e)
        return;
    nftnl_expr_set_u32(e, NFTNL_EXPR_IMM_DREG, NFT_REG_VERDICT);
    nftnl_expr_set_u32(e, NFTNL_EXPR_IMM_VERDICT, (uint32_t)verdict);
    if (chain && nftnl_expr_set_str(e, NFTNL_EXPR_IMM_CHAIN, chain) != 0)
        ctl_nftx_fail(rl->tx, -ENOMEM);
}

void ctl_nftx_meta_u8(struct ctl_nftx_rule *rl, uint32_t key, uint8_t v)
{
    ctl_nftx_meta(rl, key);
    ctl_nftx_cmp_u8(rl, v);
}
