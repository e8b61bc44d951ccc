/* controld stage: the watch over fgex's tables and policy routing (ctl_nftwatch.h). The loop
 * calls ctl_nftwatch_tick() at every turn (at least every 100 ms): it reads both monitor
 * sockets to the end without blocking, notes which part another program touched, and writes
 * that part whole again through its owner (ctl_nft.c, ctl_fw.c, ctl_route.c), within the
 * rate bound. The kernel stamps each notification with the port id of the socket whose request
 * caused it; ctl_nft's and ctl_fw_nft's sockets are controld's own, so their echo is skipped. */
#include "controld/ctl_nftwatch.h"

/* glibc's first, so that the linux/ headers defer to its definitions */
#include <netinet/in.h>

#include <errno.h>
#include <stdarg.h>
#include <linux/fib_rules.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/rtnetlink.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include <libmnl/libmnl.h>

#include "controld/ctl_fw.h"
#include "controld/ctl_fw_nft.h"
#include "controld/ctl_health.h"
#include "controld/ctl_nft.h"
#include "controld/ctl_route.h"
#include "fgx/log.h"

#define WATCH_RCVBUF (8 << 20) /* a flush of a large firewall table is many notifications */
#define WATCH_BUF 65536

/* The parts watched: each is restored apart, by its owner. */
enum { P_SVC, P_FW, P_ROUTE, P_N };

struct part {
    bool dirty;
    bool overflow;     /* the notifications overflowed: restored to be sure, not counted */
    uint64_t since_ms; /* the change came after this (the turn before it was seen) */
    int rank;          /* what.. describes the most serious change seen (a table deleted) */
    char what[96];
    uint32_t portid; /* of the change: its process is named by the batch's NEWGEN */
    char who[48];
};

struct ctl_nftwatch {
    struct mnl_socket *nf, *rt;
    struct ctl_nft *nft;
    struct ctl_fw *fw;
    struct part part[P_N];
    uint64_t last_turn_ms;
    /* the rate bound: a token per restore, CTL_NFTWATCH_BURST at most, one back a period */
    unsigned tokens;
    uint64_t refill_ms;
    uint64_t last_foreign_ms;
    uint64_t fight_restores;
    bool failing; /* the last restore failed (noted once) */
    unsigned long long err_log_ns;
    struct ctl_nftwatch_info info;
    _Alignas(struct nlmsghdr) char buf[WATCH_BUF];
};

static uint64_t unix_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t mono_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static int monitor_open(int bus, const unsigned *groups, size_t ngroups, struct mnl_socket **out)
{
    struct mnl_socket *nl = mnl_socket_open2(bus, SOCK_NONBLOCK | SOCK_CLOEXEC);
    int rcvbuf = WATCH_RCVBUF, rc;

    if (!nl || mnl_socket_bind(nl, 0, MNL_SOCKET_AUTOPID) == -1)
        goto err;
    for (size_t i = 0; i < ngroups; i++) {
        if (mnl_socket_setsockopt(nl, NETLINK_ADD_MEMBERSHIP, (void *)&groups[i],
                                  sizeof(groups[i])) == -1)
            goto err;
    }
    if (setsockopt(mnl_socket_get_fd(nl), SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf,
                   sizeof(rcvbuf)) == -1)
        (void)setsockopt(mnl_socket_get_fd(nl), SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
    *out = nl;
    return 0;
err:
    rc = -errno;
    fgx_err("nft watch: %s monitor socket: %s", bus == NETLINK_ROUTE ? "rtnetlink" : "nftables",
            strerror(errno));
    if (nl)
        mnl_socket_close(nl);
    return rc;
}

int ctl_nftwatch_open(struct ctl_nft *nft, struct ctl_fw *fw, struct ctl_nftwatch **out)
{
    static const unsigned nf_groups[] = {NFNLGRP_NFTABLES};
    static const unsigned rt_groups[] = {RTNLGRP_IPV4_RULE, RTNLGRP_IPV6_RULE, RTNLGRP_IPV4_ROUTE,
                                         RTNLGRP_IPV6_ROUTE};
    struct ctl_nftwatch *w = calloc(1, sizeof(*w));
    int rc;

    if (!w)
        return -ENOMEM;
    w->nft = nft;
    w->fw = fw;
    w->tokens = CTL_NFTWATCH_BURST;
    w->last_turn_ms = w->refill_ms = mono_ms();
    rc = monitor_open(NETLINK_NETFILTER, nf_groups, 1, &w->nf);
    if (rc == 0)
        rc = monitor_open(NETLINK_ROUTE, rt_groups, 4, &w->rt);
    if (rc < 0) {
        ctl_nftwatch_free(w);
        return rc;
    }
    *out = w;
    return 0;
}

void ctl_nftwatch_free(struct ctl_nftwatch *w)
{
    if (!w)
        return;
    if (w->nf)
        mnl_socket_close(w->nf);
    if (w->rt)
        mnl_socket_close(w->rt);
    free(w);
}

void ctl_nftwatch_get(const struct ctl_nftwatch *w, struct ctl_nftwatch_info *out)
{
    if (!w) {
        memset(out, 0, sizeof(*out));
        return;
    }
    *out = w->info;
}

/* ---- reading the notifications ---- */

/* A part was changed by someone else: keep the most serious description. */
static void part_mark(struct ctl_nftwatch *w, int p, int rank, uint32_t portid, const char *fmt,
                      ...) __attribute__((format(printf, 5, 6)));
static void part_mark(struct ctl_nftwatch *w, int p, int rank, uint32_t portid, const char *fmt,
                      ...)
{
    struct part *pt = &w->part[p];
    va_list ap;

    if (!pt->dirty) {
        pt->dirty = true;
        pt->since_ms = w->last_turn_ms;
        pt->rank = -1;
        pt->who[0] = '\0';
    }
    if (rank > pt->rank) {
        pt->rank = rank;
        pt->portid = portid;
        va_start(ap, fmt);
        (void)vsnprintf(pt->what, sizeof(pt->what), fmt, ap);
        va_end(ap);
    }
}

struct nf_attrs {
    const char *table, *name;
    uint32_t gen_pid;
    const char *gen_proc;
};

/* Attribute 1 is the table in every object message (NFTA_TABLE_NAME, NFTA_CHAIN_TABLE,
 * NFTA_RULE_TABLE, NFTA_SET_TABLE, NFTA_SET_ELEM_LIST_TABLE, NFTA_OBJ_TABLE, ...); the object's
 * own name is attribute 2 or 3 (name_type). */
static void nf_parse(const struct nlmsghdr *nlh, uint16_t name_type, bool gen,
                     struct nf_attrs *a)
{
    const struct nlattr *attr;

    memset(a, 0, sizeof(*a));
    mnl_attr_for_each(attr, nlh, sizeof(struct nfgenmsg))
    {
        uint16_t t = mnl_attr_get_type(attr);

        if (gen) {
            if (t == NFTA_GEN_PROC_PID && mnl_attr_validate(attr, MNL_TYPE_U32) == 0)
                a->gen_pid = ntohl(mnl_attr_get_u32(attr));
            else if (t == NFTA_GEN_PROC_NAME && mnl_attr_validate(attr, MNL_TYPE_NUL_STRING) == 0)
                a->gen_proc = mnl_attr_get_str(attr);
            continue;
        }
        if (mnl_attr_validate(attr, MNL_TYPE_NUL_STRING) < 0)
            continue;
        if (t == 1)
            a->table = mnl_attr_get_str(attr);
        else if (t == name_type)
            a->name = mnl_attr_get_str(attr);
    }
}

static bool own_port(const struct ctl_nftwatch *w, uint32_t portid)
{
    struct ctl_fw_nft *fn = ctl_fw_nft_of(w->fw);

    /* the firewall's confirm watchdog writes the table through a socket of its own */
    return portid == ctl_nft_portid(w->nft) || (fn && portid == ctl_fw_nft_portid(fn)) ||
           (w->fw && portid == ctl_fw_watchdog_portid(w->fw));
}

/* The changes that concern a table, how serious each is (the most serious one seen describes a
 * restore), the attribute of the object's name (0: none) and the description: %1$s is the
 * table, %2$s the object (or "" when it has none). */
static const struct {
    uint8_t msg;
    int rank;
    uint16_t name_type;
    const char *fmt;
} nf_kinds[] = {
    {NFT_MSG_DELTABLE, 6, 0, "table inet %s%s deleted"},
    {NFT_MSG_DELCHAIN, 5, 3, "chain %2$s of table inet %1$s deleted"},
    {NFT_MSG_DELSET, 4, 2, "set %2$s of table inet %1$s deleted"},
    {NFT_MSG_DELRULE, 3, 2, "a rule of chain %2$s (table inet %1$s) deleted"},
    {NFT_MSG_DELSETELEM, 3, 2, "elements of set %2$s (table inet %1$s) deleted"},
    {NFT_MSG_NEWRULE, 2, 2, "a rule added to chain %2$s (table inet %1$s)"},
    {NFT_MSG_NEWCHAIN, 2, 3, "chain %2$s of table inet %1$s added or changed"},
    {NFT_MSG_NEWTABLE, 1, 0, "table inet %s%s changed"},
    {NFT_MSG_NEWSET, 1, 0, "table inet %s%s changed"},
    {NFT_MSG_NEWSETELEM, 1, 0, "table inet %s%s changed"},
    {NFT_MSG_NEWOBJ, 1, 0, "table inet %s%s changed"},
    {NFT_MSG_DELOBJ, 1, 0, "table inet %s%s changed"},
    {NFT_MSG_NEWFLOWTABLE, 1, 0, "table inet %s%s changed"},
    {NFT_MSG_DELFLOWTABLE, 1, 0, "table inet %s%s changed"},
};

static void on_nf_msg(struct ctl_nftwatch *w, const struct nlmsghdr *nlh)
{
    const struct nfgenmsg *g;
    struct ctl_fw_nft *fn = ctl_fw_nft_of(w->fw);
    struct nf_attrs a;
    uint8_t msg;
    int p, rank;
    uint16_t name_type;
    const char *fmt;
    size_t k;

    if (NFNL_SUBSYS_ID(nlh->nlmsg_type) != NFNL_SUBSYS_NFTABLES ||
        mnl_nlmsg_get_payload_len(nlh) < sizeof(*g) || own_port(w, nlh->nlmsg_pid))
        return;
    msg = NFNL_MSG_TYPE(nlh->nlmsg_type);
    if (msg == NFT_MSG_NEWGEN) {
        /* the end of someone's batch: name its process on what it changed */
        nf_parse(nlh, 0, true, &a);
        for (p = 0; p < P_ROUTE; p++) {
            struct part *pt = &w->part[p];

            if (pt->dirty && !pt->who[0] && pt->portid == nlh->nlmsg_pid && a.gen_proc)
                (void)snprintf(pt->who, sizeof(pt->who), " by %s (pid %u)", a.gen_proc,
                               (unsigned)a.gen_pid);
        }
        return;
    }
    for (k = 0; k < sizeof(nf_kinds) / sizeof(nf_kinds[0]); k++)
        if (nf_kinds[k].msg == msg)
            break;
    if (k == sizeof(nf_kinds) / sizeof(nf_kinds[0]))
        return;
    rank = nf_kinds[k].rank;
    name_type = nf_kinds[k].name_type;
    fmt = nf_kinds[k].fmt;
    g = mnl_nlmsg_get_payload(nlh);
    if (g->nfgen_family != NFPROTO_INET)
        return;
    nf_parse(nlh, name_type, false, &a);
    if (!a.table)
        return;
    if (strcmp(a.table, ctl_nft_table(w->nft)) == 0 && ctl_nft_wanted(w->nft))
        p = P_SVC;
    else if (fn && strcmp(a.table, ctl_fw_nft_table(fn)) == 0 && ctl_fw_nft_present(fn))
        p = P_FW;
    else
        return;
    /* fmt is one of the literals above */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
    part_mark(w, p, rank, nlh->nlmsg_pid, fmt, a.table, name_type ? (a.name ? a.name : "?") : "");
#pragma GCC diagnostic pop
}

/* The proxy layer's rule (fwmark CTL_ROUTE_MARK -> table CTL_ROUTE_TABLE) or its local route. */
static void on_rt_msg(struct ctl_nftwatch *w, const struct nlmsghdr *nlh)
{
    const struct nlattr *attr;
    uint32_t table = 0;
    bool rule = nlh->nlmsg_type == RTM_DELRULE;
    size_t hdr = rule ? sizeof(struct fib_rule_hdr) : sizeof(struct rtmsg);

    if ((nlh->nlmsg_type != RTM_DELRULE && nlh->nlmsg_type != RTM_DELROUTE) ||
        mnl_nlmsg_get_payload_len(nlh) < hdr || !ctl_nft_route_wanted(w->nft))
        return;
    mnl_attr_for_each(attr, nlh, hdr)
    {
        /* FRA_TABLE and RTA_TABLE are both 15 */
        if (mnl_attr_get_type(attr) == (rule ? FRA_TABLE : RTA_TABLE) &&
            mnl_attr_validate(attr, MNL_TYPE_U32) == 0)
            table = mnl_attr_get_u32(attr);
    }
    if (table != CTL_ROUTE_TABLE)
        return;
    part_mark(w, P_ROUTE, rule ? 2 : 1, nlh->nlmsg_pid, "%s",
              rule ? "the proxy layer's ip rule (fwmark to table 4066) deleted"
                   : "the proxy layer's local route (table 4066) deleted");
}

/* Read sock to the end. Returns false when notifications were lost (ENOBUFS). */
static bool drain(struct ctl_nftwatch *w, struct mnl_socket *nl, bool rt)
{
    bool ok = true;

    for (;;) {
        ssize_t n = recv(mnl_socket_get_fd(nl), w->buf, sizeof(w->buf), MSG_DONTWAIT);
        const struct nlmsghdr *nlh = (const struct nlmsghdr *)w->buf;
        int left;

        if (n == -1) {
            if (errno == EINTR)
                continue;
            if (errno == ENOBUFS) {
                ok = false;
                continue;
            }
            if (errno != EAGAIN && errno != EWOULDBLOCK)
                (void)fgx_log_ratelimited(&w->err_log_ns, FGX_LOG_WARN, "nft watch: reading: %s",
                                          strerror(errno));
            return ok;
        }
        left = (int)n;
        for (; mnl_nlmsg_ok(nlh, left); nlh = mnl_nlmsg_next(nlh, &left)) {
            if (rt)
                on_rt_msg(w, nlh);
            else
                on_nf_msg(w, nlh);
        }
    }
}

/* ---- restoring ---- */

static int restore_part(struct ctl_nftwatch *w, int p, struct ctl_store *store, bool *done)
{
    struct ctl_fw_nft *fn = ctl_fw_nft_of(w->fw);
    unsigned created = 0;
    int rc = 0;

    *done = false;
    switch (p) {
    case P_SVC:
        if (!ctl_nft_wanted(w->nft))
            return 0;
        rc = ctl_nft_restore(w->nft);
        *done = rc == 0;
        break;
    case P_FW:
        if (!fn || !ctl_fw_nft_present(fn))
            return 0;
        rc = ctl_fw_restore(w->fw, store);
        *done = rc == 0;
        break;
    case P_ROUTE:
        if (!ctl_nft_route_wanted(w->nft))
            return 0;
        /* our own removal and re-adding (a layer switch) leaves nothing missing: no restore */
        rc = ctl_route_restore(&created);
        *done = rc == 0 && created > 0;
        break;
    default:
        break;
    }
    return rc;
}

static void refill(struct ctl_nftwatch *w, uint64_t now)
{
    while (w->tokens < CTL_NFTWATCH_BURST && now >= w->refill_ms + CTL_NFTWATCH_PERIOD_MS) {
        w->tokens++;
        w->refill_ms += CTL_NFTWATCH_PERIOD_MS;
    }
    if (w->tokens == CTL_NFTWATCH_BURST)
        w->refill_ms = now;
}

void ctl_nftwatch_tick(struct ctl_nftwatch *w, struct ctl_store *store, uint64_t now_ms)
{
    char what[3 * (96 + 48) + 8] = "";
    uint64_t since = UINT64_MAX, gap;
    bool any = false, counted = false, lost;
    int rc = 0;

    if (!w)
        return;
    lost = !drain(w, w->nf, false);
    lost |= !drain(w, w->rt, true);
    if (lost) {
        /* what changed is unknown: write every part that should exist, without counting */
        fgx_warn("nft watch: the kernel's notifications overflowed; writing fgex's tables again "
                 "to be sure");
        for (int p = 0; p < P_N; p++) {
            if (!w->part[p].dirty) {
                w->part[p].dirty = w->part[p].overflow = true;
                w->part[p].since_ms = now_ms;
                w->part[p].rank = -1;
                w->part[p].what[0] = w->part[p].who[0] = '\0';
            }
        }
    }
    w->last_turn_ms = now_ms;
    for (int p = 0; p < P_N; p++) {
        if (w->part[p].dirty && !w->part[p].overflow)
            w->last_foreign_ms = now_ms;
        any |= w->part[p].dirty;
    }
    if (!any) {
        if (w->info.fighting && now_ms - w->last_foreign_ms >= CTL_NFTWATCH_CALM_MS) {
            w->info.fighting = false;
            ctl_health_note(0, CTL_HEALTH_INFO, "rules-fight", w->fight_restores,
                            "the other program stopped removing fgex's rules: they were put "
                            "back %llu times meanwhile, and are in place",
                            (unsigned long long)w->fight_restores);
        }
        return;
    }
    refill(w, now_ms);
    if (w->tokens == 0) {
        if (!w->info.fighting) {
            int f = w->part[P_SVC].dirty ? P_SVC : w->part[P_FW].dirty ? P_FW : P_ROUTE;

            w->info.fighting = true;
            w->fight_restores = 0;
            ctl_health_note(0, CTL_HEALTH_ERROR, "rules-fight", 0,
                            "another program keeps removing fgex's rules (%s%s): controld puts "
                            "them back at most once a second, so traffic may pass unfiltered in "
                            "between",
                            w->part[f].what[0] ? w->part[f].what : "its tables",
                            w->part[f].who);
        }
        return;
    }
    w->tokens--;
    for (int p = 0; p < P_N; p++) {
        struct part *pt = &w->part[p];
        bool done = false;
        int r;

        if (!pt->dirty)
            continue;
        r = restore_part(w, p, store, &done);
        if (r < 0) {
            rc = r;
            continue; /* stays dirty: tried again with the next token */
        }
        if (done && !pt->overflow) {
            size_t len = strlen(what);

            (void)snprintf(what + len, sizeof(what) - len, "%s%s%s", len ? "; " : "", pt->what,
                           pt->who);
            if (pt->since_ms < since)
                since = pt->since_ms;
            counted = true;
        }
        pt->dirty = pt->overflow = false;
    }
    if (rc < 0) {
        if (!w->failing)
            ctl_health_note(0, CTL_HEALTH_ERROR, "rules-restore-failed", 0,
                            "fgex's rules were removed by another program and could not be put "
                            "back (%s): traffic may pass unfiltered; controld keeps trying",
                            strerror(-rc));
        w->failing = true;
    } else {
        w->failing = false;
    }
    if (!counted)
        return;
    now_ms = mono_ms();
    gap = now_ms > since ? now_ms - since : 0;
    w->info.restores++;
    w->info.last_ns = unix_ns();
    w->info.last_gap_ms = gap;
    if (gap > w->info.max_gap_ms)
        w->info.max_gap_ms = gap;
    (void)snprintf(w->info.last_what, sizeof(w->info.last_what), "%s", what);
    if (w->info.fighting) {
        w->fight_restores++;
        fgx_debug("nft watch: %s; put back (restore %llu, in a fight)", what,
                  (unsigned long long)w->info.restores);
        return;
    }
    ctl_health_note(0, CTL_HEALTH_WARN, "rules-restored", w->info.restores,
                    "%s: fgex's rules were missing for at most %llu ms and are back in place "
                    "(restore %llu since controld started)",
                    what, (unsigned long long)gap, (unsigned long long)w->info.restores);
}
