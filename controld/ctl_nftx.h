/* controld: one nftables transaction, shared by the services' table (ctl_nft.c) and the
 * firewall's (ctl_fw_nft.c). A transaction is a netlink batch (begin, messages, end) built in
 * a growing buffer with libnftnl, sent as one datagram (one kernel transaction: a packet sees
 * the old rules or the new ones), and the kernel's answers read until the ack of its last
 * message. Each message has a label, so that a refusal is logged as what it refused. Rules
 * are built with the expression builders below, every value through register 1 (the callers
 * add their own builders on ctl_nftx_expr()). */
#ifndef CTL_NFTX_H
#define CTL_NFTX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <linux/netlink.h>

#define CTL_NFTX_LABEL_LEN 64
#define CTL_NFTX_MSG_MAX 4096 /* a table, chain, set or rule message */
#define CTL_NFTX_RX_BUF 16384

struct mnl_socket;
struct nftnl_rule;
struct nftnl_expr;

/* The netlink socket a table is written through, and its sequence numbers. */
struct ctl_nftx_sock {
    struct mnl_socket *nl;
    uint32_t seq;
    int sndbuf;
    _Alignas(struct nlmsghdr) char rx[CTL_NFTX_RX_BUF]; /* replies are parsed in place */
};

/* Open and bind s (the kernel's error texts asked for, a large receive buffer); seq starts at
 * seq0. Returns 0 or -errno (logged). */
int ctl_nftx_sock_open(struct ctl_nftx_sock *s, uint32_t seq0);
void ctl_nftx_sock_close(struct ctl_nftx_sock *s);
/* The socket's netlink port id: the kernel's notifications of its changes carry it (the
 * nftables watch, ctl_nftwatch.c, tells its own changes from others' by it). */
uint32_t ctl_nftx_sock_portid(const struct ctl_nftx_sock *s);

/* One transaction being built. */
struct ctl_nftx {
    const char *table; /* the table the chains, sets and rules go into */
    const char *what;  /* for the log: "the firewall table", "the transaction" */
    void *arg;         /* the builder's own state */
    char *buf;
    size_t len, cap, need; /* need: the room reserved for the message being built */
    uint32_t seq0, nmsgs;  /* the batch begin is seq0; messages seq0 + 1 .. seq0 + nmsgs */
    char (*labels)[CTL_NFTX_LABEL_LEN];
    size_t nlabels;
    int err;  /* first error while building (-ENOMEM, -EMSGSIZE); later calls do nothing */
    int kerr; /* first error the kernel answered; only that one is logged */
};

/* Start a transaction on s into table (borrowed). ctl_nftx_release() frees it. */
void ctl_nftx_begin(struct ctl_nftx *tx, struct ctl_nftx_sock *s, const char *table,
                    const char *what, void *arg);
/* The same transaction emptied, to be built again (a refused difference rebuilt whole). */
void ctl_nftx_restart(struct ctl_nftx *tx, struct ctl_nftx_sock *s);
void ctl_nftx_release(struct ctl_nftx *tx);
void ctl_nftx_fail(struct ctl_nftx *tx, int err);
/* The next message, of at most need bytes (libnftnl's builders do not check room): its header,
 * or NULL after an error. ctl_nftx_next() ends it. */
struct nlmsghdr *ctl_nftx_hdr(struct ctl_nftx *tx, uint16_t type, uint16_t flags, size_t need,
                              const char *label);
void ctl_nftx_next(struct ctl_nftx *tx, struct nlmsghdr *nlh);
/* End the batch, send it and read the answers. quiet: a refusal is expected (a probe) and
 * logged at debug level only. Returns 0, the kernel's first error, or -errno of the socket
 * (-ETIMEDOUT: no answer; then what the kernel holds is unknown). */
int ctl_nftx_commit(struct ctl_nftx *tx, struct ctl_nftx_sock *s, bool quiet);

/* ---- objects ---- */

/* NFT_MSG_NEWTABLE or NFT_MSG_DELTABLE of table name. */
void ctl_nftx_table(struct ctl_nftx *tx, uint16_t type, const char *name);
/* hook < 0: a regular chain; else a base chain of type ("filter", "route"), at prio, with
 * policy (NF_ACCEPT, NF_DROP). */
void ctl_nftx_chain(struct ctl_nftx *tx, const char *name, const char *type, int hook, int prio,
                    uint32_t policy);

/* ---- rules and expressions ---- */

/* A rule under construction: expressions are appended as long as nothing failed. */
struct ctl_nftx_rule {
    struct ctl_nftx *tx;
    struct nftnl_rule *r;
    const char *chain;
};

void ctl_nftx_rule_start(struct ctl_nftx *tx, const char *chain, struct ctl_nftx_rule *rl);
/* Append the rule to its chain (NEWRULE, APPEND) and free it. */
void ctl_nftx_rule_end(struct ctl_nftx_rule *rl);
/* A new expression of kind name added to the rule, or NULL after an error. */
struct nftnl_expr *ctl_nftx_expr(struct ctl_nftx_rule *rl, const char *name);

void ctl_nftx_meta(struct ctl_nftx_rule *rl, uint32_t key);
void ctl_nftx_payload(struct ctl_nftx_rule *rl, uint32_t base, uint32_t offset, uint32_t len);
/* The same into register dreg (NFT_REG32_xx: a concatenation's later parts). */
void ctl_nftx_meta_to(struct ctl_nftx_rule *rl, uint32_t key, uint32_t dreg);
void ctl_nftx_payload_to(struct ctl_nftx_rule *rl, uint32_t base, uint32_t offset, uint32_t len,
                         uint32_t dreg);
void ctl_nftx_and(struct ctl_nftx_rule *rl, const void *mask, uint32_t len); /* len <= 16 */
void ctl_nftx_cmp(struct ctl_nftx_rule *rl, uint32_t op, const void *data, uint32_t len);
void ctl_nftx_cmp_u8(struct ctl_nftx_rule *rl, uint8_t v);
/* chain: the target of a jump or goto, NULL otherwise. */
void ctl_nftx_verdict(struct ctl_nftx_rule *rl, int verdict, const char *chain);
/* meta KEY == v (u8 keys: l4proto, nfproto) */
void ctl_nftx_meta_u8(struct ctl_nftx_rule *rl, uint32_t key, uint8_t v);

#endif
