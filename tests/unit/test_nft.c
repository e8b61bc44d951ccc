/* Tests for controld's nftables stage (controld/ctl_nft.c). Every test first moves into a network
 * namespace of its own (Criterion runs each test in a forked process), so the host's firewall
 * is never touched; the `nft` binary run through popen() inherits that namespace and is used
 * only to read back what the kernel holds. The queue rules are read back from the kernel with
 * libnftnl instead: nft renders the xtables NFQUEUE target (the compat mode) only through the
 * iptables package's libxt_NFQUEUE.so, which the test must not depend on. The packet tests join
 * two namespaces with a veth pair: the server side holds the rules, and no NFQUEUE reader exists
 * anywhere. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <libmnl/libmnl.h>
#include <libnftnl/expr.h>
#include <libnftnl/rule.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_log.h>
#include <linux/netfilter/nfnetlink_queue.h>
#include <linux/netfilter/x_tables.h>
#include <linux/netfilter/xt_NFQUEUE.h>

#include "controld/ctl_nft.h"
#include "fgx/log.h"

#define MAX_LINES 4096
#define PORT_TCP 9000
#define PORT_UDP 9200
#define WAIT_MS 400

/* ---- namespaces and commands ---------------------------------------------------------- */

static void sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void sh(const char *fmt, ...)
{
    char cmd[1024];
    va_list ap;
    int rc;

    va_start(ap, fmt);
    (void)vsnprintf(cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    rc = system(cmd);
    cr_assert_eq(rc, 0, "command failed (%d): %s", rc, cmd);
}

static int sh_status(const char *cmd)
{
    return system(cmd);
}

static void enter_netns(void)
{
    if (geteuid() != 0)
        cr_skip_test("needs root for a network namespace");
    fgx_log_init("test_nft", FGX_LOG_WARN);
    cr_assert_eq(unshare(CLONE_NEWNET), 0, "unshare: %s", strerror(errno));
    sh("ip link set lo up");
}

/* Two namespaces joined by a veth pair: the test process ends in the server one. Both die with
 * the test process. */
struct pair {
    int ns_srv, ns_cli;
};

static void pair_setup(struct pair *p)
{
    enter_netns();
    p->ns_srv = open("/proc/self/ns/net", O_RDONLY);
    cr_assert_geq(p->ns_srv, 0);
    cr_assert_eq(unshare(CLONE_NEWNET), 0);
    p->ns_cli = open("/proc/self/ns/net", O_RDONLY);
    cr_assert_geq(p->ns_cli, 0);
    sh("ip link set lo up && ip link add fgxc type veth peer name fgxs netns /proc/%d/fd/%d",
       (int)getpid(), p->ns_srv);
    sh("ip addr add 10.99.0.1/24 dev fgxc && ip -6 addr add fd99::1/64 dev fgxc nodad && "
       "ip link set fgxc up");
    cr_assert_eq(setns(p->ns_srv, CLONE_NEWNET), 0);
    sh("ip addr add 10.99.0.2/24 dev fgxs && ip -6 addr add fd99::2/64 dev fgxs nodad && "
       "ip link set fgxs up");
}

static void pair_release(struct pair *p)
{
    close(p->ns_cli);
    close(p->ns_srv);
}

/* ---- reading the table back ----------------------------------------------------------- */

struct listing {
    char *text;
    int status;
};

static void list_table(const char *family, const char *name, struct listing *out)
{
    char cmd[256], buf[4096];
    size_t len = 0, cap = 0, n;
    FILE *f;

    (void)snprintf(cmd, sizeof(cmd), "nft list table %s %s 2>/dev/null", family, name);
    f = popen(cmd, "r");
    cr_assert_not_null(f);
    out->text = NULL;
    while ((n = fread(buf, 1, sizeof(buf), f)) > 0) {
        if (len + n + 1 > cap) {
            cap = (len + n + 1) * 2;
            out->text = realloc(out->text, cap);
            cr_assert_not_null(out->text);
        }
        memcpy(out->text + len, buf, n);
        len += n;
    }
    if (!out->text)
        out->text = calloc(1, 1);
    out->text[len] = '\0';
    out->status = pclose(f);
}

static void listing_release(struct listing *l)
{
    free(l->text);
    l->text = NULL;
}

static bool table_exists(const char *family, const char *name)
{
    struct listing l;
    bool ok;

    list_table(family, name, &l);
    ok = l.status == 0;
    listing_release(&l);
    return ok;
}

/* nft 1.1 (Debian 13) prints some of the same rules otherwise than 1.0 (Debian 12), the one the
 * expected texts are written in: line is rewritten as 1.0 prints it. The mark: "meta mark &
 * 0xffff0000 == 0x0fe40000" is 1.0's "meta mark 0x0fe40000/16"; the rest in the table below. */
static void as_nft_1_0(char *line)
{
    static const char form[] = "meta mark & 0xffff0000 == ";
    static const struct {
        const char *v11, *v10;
    } same[] = {
        {"tcp flags set tcp flags & (fin | syn | rst | psh | ack | ecn | cwr)",
         "@th,96,16 set @th,96,16 & 0x20"},
        {"ip frag-off & 0x3fff != 0x0", "ip frag-off & 16383 != 0"},
        {"tcp flags & (syn | ack) == syn | ack", "tcp flags syn,ack / syn,ack"},
    };
    const size_t flen = sizeof(form) - 1, vlen = 10; /* 0x and eight digits */
    char *v = line + flen;

    if (strncmp(line, form, flen) == 0 && strlen(v) >= vlen) {
        /* "meta mark " + the value + "/16" + the rest, shorter than before: in place */
        memmove(line + 10, v, vlen);
        memmove(line + 10 + vlen + 3, v + vlen, strlen(v + vlen) + 1);
        memcpy(line + 10 + vlen, "/16", 3);
    }
    for (size_t i = 0; i < sizeof(same) / sizeof(same[0]); i++) {
        size_t l11 = strlen(same[i].v11), l10 = strlen(same[i].v10);
        char *at = strstr(line, same[i].v11);

        /* each 1.0 form is the shorter: in place too */
        if (at) {
            memcpy(at, same[i].v10, l10);
            memmove(at + l10, at + l11, strlen(at + l11) + 1);
        }
    }
}

/* The rules of one chain, each trimmed of its indentation, in order. Returns the count, or -1
 * when the chain is absent. lines point into text, which is modified. */
static int chain_rules(char *text, const char *chain, char **lines, int max)
{
    char head[128], *save = NULL, *line;
    bool in = false;
    int n = 0;

    (void)snprintf(head, sizeof(head), "chain %s {", chain);
    for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        while (*line == '\t' || *line == ' ')
            line++;
        if (!in) {
            in = strcmp(line, head) == 0;
            continue;
        }
        if (strcmp(line, "}") == 0)
            return n;
        if (strncmp(line, "type ", 5) == 0 || line[0] == '\0')
            continue;
        cr_assert_lt(n, max);
        as_nft_1_0(line);
        lines[n++] = line;
    }
    return in ? n : -1;
}

/* The rules of chain as one string, "\n"-separated; "" when empty, NULL when absent. */
static char *chain_text(const char *chain)
{
    struct listing l;
    char *lines[MAX_LINES], *out;
    size_t len = 1;
    int n;

    list_table("inet", "fgex", &l);
    n = chain_rules(l.text, chain, lines, MAX_LINES);
    if (n < 0) {
        listing_release(&l);
        return NULL;
    }
    for (int i = 0; i < n; i++)
        len += strlen(lines[i]) + 1;
    out = calloc(1, len);
    cr_assert_not_null(out);
    len = 0;
    for (int i = 0; i < n; i++) {
        size_t ll = strlen(lines[i]);

        memcpy(out + len, lines[i], ll);
        out[len + ll] = '\n';
        len += ll + 1;
    }
    listing_release(&l);
    return out;
}

static void assert_chain(const char *chain, const char *expected)
{
    char *got = chain_text(chain);

    cr_assert_not_null(got, "chain %s is missing", chain);
    cr_assert_str_eq(got, expected, "chain %s:\n%s\nexpected:\n%s", chain, got, expected);
    free(got);
}

static void assert_no_chain(const char *chain)
{
    char *got = chain_text(chain);

    cr_assert_null(got, "chain %s should be gone:\n%s", chain, got);
}

/* ---- queue rules, decoded from the kernel ------------------------------------------------- */

/* What one rule of a queue chain holds, as the kernel reports it. */
struct kq_rule {
    char exprs[128]; /* expression names in order, ","-joined */
    uint32_t hash_type, hash_mod, cmp_val;
    bool has_cmp;
    char tg_name[32]; /* compat: the xtables target's name and revision */
    uint32_t tg_rev;
    size_t tg_len;
    uint16_t num, total, flags; /* the queue, from either expression */
};

struct kq_dump {
    const char *chain;
    struct kq_rule *rules;
    int n, max;
};

static void kq_expr(struct kq_rule *k, struct nftnl_expr *e)
{
    const char *name = nftnl_expr_get_str(e, NFTNL_EXPR_NAME);
    size_t len = strlen(k->exprs);

    (void)snprintf(k->exprs + len, sizeof(k->exprs) - len, "%s%s", len ? "," : "", name);
    if (strcmp(name, "hash") == 0) {
        k->hash_type = nftnl_expr_get_u32(e, NFTNL_EXPR_HASH_TYPE);
        k->hash_mod = nftnl_expr_get_u32(e, NFTNL_EXPR_HASH_MODULUS);
    } else if (strcmp(name, "cmp") == 0) {
        uint32_t dlen = 0;
        const void *d = nftnl_expr_get(e, NFTNL_EXPR_CMP_DATA, &dlen);

        cr_assert_eq(dlen, sizeof(k->cmp_val));
        memcpy(&k->cmp_val, d, sizeof(k->cmp_val));
        k->has_cmp = nftnl_expr_get_u32(e, NFTNL_EXPR_CMP_OP) == NFT_CMP_EQ;
    } else if (strcmp(name, "queue") == 0) {
        k->num = nftnl_expr_get_u16(e, NFTNL_EXPR_QUEUE_NUM);
        k->total = nftnl_expr_get_u16(e, NFTNL_EXPR_QUEUE_TOTAL);
        k->flags = nftnl_expr_get_u16(e, NFTNL_EXPR_QUEUE_FLAGS);
    } else if (strcmp(name, "target") == 0) {
        uint32_t ilen = 0;
        const struct xt_NFQ_info_v3 *info = nftnl_expr_get(e, NFTNL_EXPR_TG_INFO, &ilen);

        (void)snprintf(k->tg_name, sizeof(k->tg_name), "%s",
                       nftnl_expr_get_str(e, NFTNL_EXPR_TG_NAME));
        k->tg_rev = nftnl_expr_get_u32(e, NFTNL_EXPR_TG_REV);
        k->tg_len = ilen;
        if (info && ilen >= sizeof(*info)) {
            k->num = info->queuenum;
            k->total = info->queues_total;
            k->flags = info->flags;
        }
    }
}

static int kq_rule_cb(const struct nlmsghdr *nlh, void *data)
{
    struct kq_dump *d = data;
    struct nftnl_rule *r = nftnl_rule_alloc();
    struct nftnl_expr_iter *it;
    struct nftnl_expr *e;
    struct kq_rule *k;

    cr_assert_not_null(r);
    cr_assert_eq(nftnl_rule_nlmsg_parse(nlh, r), 0);
    if (strcmp(nftnl_rule_get_str(r, NFTNL_RULE_CHAIN), d->chain) != 0) {
        nftnl_rule_free(r);
        return MNL_CB_OK;
    }
    cr_assert_lt(d->n, d->max);
    k = &d->rules[d->n++];
    memset(k, 0, sizeof(*k));
    it = nftnl_expr_iter_create(r);
    cr_assert_not_null(it);
    while ((e = nftnl_expr_iter_next(it)))
        kq_expr(k, e);
    nftnl_expr_iter_destroy(it);
    nftnl_rule_free(r);
    return MNL_CB_OK;
}

/* The rules of chain in table inet fgex, in order, straight from the kernel. Returns the count. */
static int kq_chain(const char *chain, struct kq_rule *rules, int max)
{
    char buf[MNL_SOCKET_BUFFER_SIZE * 4];
    struct kq_dump d = {.chain = chain, .rules = rules, .max = max};
    struct nftnl_rule *r = nftnl_rule_alloc();
    struct mnl_socket *nl = mnl_socket_open(NETLINK_NETFILTER);
    struct nlmsghdr *nlh;
    uint32_t seq = 1, port;
    ssize_t got;
    int rc = MNL_CB_OK;

    cr_assert_not_null(r);
    cr_assert_not_null(nl);
    cr_assert_eq(mnl_socket_bind(nl, 0, MNL_SOCKET_AUTOPID), 0);
    port = mnl_socket_get_portid(nl);
    nlh = nftnl_nlmsg_build_hdr(buf, NFT_MSG_GETRULE, NFPROTO_INET, NLM_F_DUMP, seq);
    nftnl_rule_set_str(r, NFTNL_RULE_TABLE, "fgex");
    nftnl_rule_set_str(r, NFTNL_RULE_CHAIN, chain);
    nftnl_rule_nlmsg_build_payload(nlh, r);
    nftnl_rule_free(r);
    cr_assert_geq(mnl_socket_sendto(nl, nlh, nlh->nlmsg_len), 0);
    while (rc > MNL_CB_STOP) {
        got = mnl_socket_recvfrom(nl, buf, sizeof(buf));
        cr_assert_geq(got, 0, "recv: %s", strerror(errno));
        rc = mnl_cb_run(buf, (size_t)got, seq, port, kq_rule_cb, &d);
        cr_assert_geq(rc, MNL_CB_STOP, "rule dump: %s", strerror(errno));
    }
    mnl_socket_close(nl);
    return d.n;
}

/* A queue chain spreads flows over nthreads threads (symhash mod nthreads == t, no hash with one
 * thread) to queues base.., with bypass on the fail-open chain, through the native queue
 * expression or the xtables NFQUEUE target revision 3, the way the probe chose. */
static void assert_queue_chain(const char *chain, bool native, unsigned nthreads, unsigned base,
                               bool bypass)
{
    struct kq_rule rules[16];
    const char *verdict = native ? "queue" : "target";
    char want[64];
    int n = kq_chain(chain, rules, 16);

    cr_assert_eq(n, (int)nthreads, "chain %s: %d rules, expected %u", chain, n, nthreads);
    for (unsigned t = 0; t < nthreads; t++) {
        struct kq_rule *k = &rules[t];

        if (nthreads > 1)
            (void)snprintf(want, sizeof(want), "hash,cmp,%s", verdict);
        else
            (void)snprintf(want, sizeof(want), "%s", verdict);
        cr_assert_str_eq(k->exprs, want, "chain %s rule %u", chain, t);
        if (nthreads > 1) {
            cr_assert_eq(k->hash_type, NFT_HASH_SYM, "chain %s rule %u", chain, t);
            cr_assert_eq(k->hash_mod, nthreads, "chain %s rule %u", chain, t);
            cr_assert(k->has_cmp, "chain %s rule %u", chain, t);
            cr_assert_eq(k->cmp_val, t, "chain %s rule %u", chain, t);
        }
        if (native) {
            cr_assert_eq(k->flags, bypass ? NFT_QUEUE_FLAG_BYPASS : 0, "chain %s rule %u", chain,
                         t);
        } else {
            cr_assert_str_eq(k->tg_name, "NFQUEUE", "chain %s rule %u", chain, t);
            cr_assert_eq(k->tg_rev, 3, "chain %s rule %u", chain, t);
            cr_assert_geq(k->tg_len, sizeof(struct xt_NFQ_info_v3), "chain %s rule %u", chain, t);
            cr_assert_eq(k->flags, bypass ? NFQ_FLAG_BYPASS : 0, "chain %s rule %u", chain, t);
        }
        cr_assert_eq(k->num, base + t, "chain %s rule %u: queue %u", chain, t, k->num);
        cr_assert_eq(k->total, 1, "chain %s rule %u", chain, t);
    }
}

/* The order of the exact no-payload rules: Linux's usual TCP header (doff 8) first. */
static const uint8_t doff_order[] = {8, 5, 6, 7, 9, 10, 11, 12, 13, 14, 15};

/* No handshake packet is queued; the SYN-ACK (s2c) is logged to the worker (and clamped), or
 * queued when the log expression is not used (synack_log false). */
static void tcp_chain_expect_log(char *buf, size_t len, const char *q, bool c2s, bool synack_log)
{
    size_t off = 0;

    off += (size_t)snprintf(buf + off, len - off,
                            "tcp flags & syn == syn tcp option maxseg size > 65000 tcp option "
                            "maxseg size set 65000\n");
    /* URG and the urgent pointer cleared (nft lists the AND mask 0xffdf as 0x20) */
    off += (size_t)snprintf(buf + off, len - off,
                            "tcp flags & urg == urg @th,96,16 set @th,96,16 & 0x20 tcp urgptr "
                            "set 0\n");
    if (!c2s && synack_log)
        off += (size_t)snprintf(buf + off, len - off, "tcp flags syn,ack / syn,ack jump synack\n");
    else if (!c2s)
        off += (size_t)snprintf(buf + off, len - off, "tcp flags syn,ack / syn,ack goto %s\n", q);
    /* FINs and RSTs copied too, so that the worker sees connections close (flows_active) */
    if (synack_log)
        off += (size_t)snprintf(buf + off, len - off, "tcp flags fin,rst jump synack\n");
    /* Longer than any payload-less header: queued without walking the exact rules. */
    off += (size_t)snprintf(buf + off, len - off, "ip length > 80 goto %s\n", q);
    off += (size_t)snprintf(buf + off, len - off, "ip6 length > 60 goto %s\n", q);
    /* IPv4 fragments to the worker, even a first one that is only a header. */
    off += (size_t)snprintf(buf + off, len - off, "ip frag-off & 16383 != 0 goto %s\n", q);
    for (unsigned i = 0; i < sizeof(doff_order); i++)
        off += (size_t)snprintf(buf + off, len - off,
                                "ip hdrlength 5 tcp doff %u ip length %u accept\n", doff_order[i],
                                20 + 4 * doff_order[i]);
    for (unsigned i = 0; i < sizeof(doff_order); i++)
        off += (size_t)snprintf(buf + off, len - off,
                                "ip6 nexthdr tcp tcp doff %u ip6 length %u accept\n", doff_order[i],
                                4 * doff_order[i]);
    (void)snprintf(buf + off, len - off, "goto %s\n", q);
}

static void tcp_chain_expect(char *buf, size_t len, const char *q, bool c2s)
{
    tcp_chain_expect_log(buf, len, q, c2s, true);
}

/* ---- services ---------------------------------------------------------------------------- */

/* The pre and post chains: one lookup per address kind, the services are map elements. */
/* (The interface lookups only while some service has an interface address.) */
#define PRE_CHAIN                                                                                  \
    "meta mark 0x0fe40000/16 accept\n"                                                             \
    "meta l4proto . ip daddr . th dport vmap @c2s_4\n"                                             \
    "meta l4proto . ip6 daddr . th dport vmap @c2s_6\n"
#define POST_CHAIN                                                                                 \
    "meta mark 0x0fe40000/16 accept\n"                                                             \
    "meta l4proto . ip saddr . th sport vmap @s2c_4\n"                                             \
    "meta l4proto . ip6 saddr . th sport vmap @s2c_6\n"
#define PRE_CHAIN_IF PRE_CHAIN "meta l4proto . iifname . th dport vmap @c2s_if\n"
#define POST_CHAIN_IF POST_CHAIN "meta l4proto . oifname . th sport vmap @s2c_if\n"

/* The table's listing holds each of the NULL-ended elements (as nft prints them). */
static void assert_elements(const char *const *want)
{
    struct listing l;

    list_table("inet", "fgex", &l);
    for (size_t i = 0; want[i]; i++)
        cr_assert(strstr(l.text, want[i]), "no element \"%s\" in:\n%s", want[i], l.text);
    listing_release(&l);
}

/* ... and none of these. */
static void assert_no_elements(const char *const *unwanted)
{
    struct listing l;

    list_table("inet", "fgex", &l);
    for (size_t i = 0; unwanted[i]; i++)
        cr_assert(!strstr(l.text, unwanted[i]), "element \"%s\" still in:\n%s", unwanted[i],
                  l.text);
    listing_release(&l);
}

static struct ctl_nft_service svc(uint32_t id, uint8_t proto, uint16_t port, const char *cidr,
                                  bool fail_open)
{
    struct ctl_nft_service s = {.id = id, .ipproto = proto, .port = port, .fail_open = fail_open};
    char addr[64];
    const char *slash;

    if (cidr) {
        slash = strchr(cidr, '/');
        (void)snprintf(addr, sizeof(addr), "%.*s", slash ? (int)(slash - cidr) : (int)strlen(cidr),
                       cidr);
        if (strchr(addr, ':')) {
            s.addr.family = 6;
            s.addr.prefix = slash ? (uint8_t)atoi(slash + 1) : 128;
            cr_assert_eq(inet_pton(AF_INET6, addr, s.addr.addr), 1);
        } else {
            s.addr.family = 4;
            s.addr.prefix = slash ? (uint8_t)atoi(slash + 1) : 32;
            cr_assert_eq(inet_pton(AF_INET, addr, s.addr.addr), 1);
        }
    }
    return s;
}

static struct ctl_nft *nft_open(unsigned nthreads)
{
    struct ctl_nft_config cfg = {.table = NULL, .queue_base = 7000, .nthreads = nthreads};
    struct ctl_nft *n = NULL;

    cr_assert_eq(ctl_nft_open(&cfg, &n), 0);
    cr_assert_not_null(n);
    return n;
}

/* ---- rules ---------------------------------------------------------------------------------- */

Test(nft, detection_matches_kernel)
{
    struct ctl_nft *n;
    bool kernel_native;
    struct listing l;

    enter_netns();
    kernel_native = sh_status("nft add table inet fgxq && nft add chain inet fgxq c && "
                              "nft add rule inet fgxq c queue num 1 2>/dev/null") == 0;
    sh("nft delete table inet fgxq");
    n = nft_open(1);
    cr_assert_eq(ctl_nft_native_queue(n), kernel_native);
    /* The probe leaves nothing behind. */
    list_table("inet", "fgex_probe", &l);
    cr_assert_neq(l.status, 0, "probe table left behind:\n%s", l.text);
    listing_release(&l);
    cr_assert_not(table_exists("inet", "fgex"));
    ctl_nft_close(n);
}

Test(nft, sync_builds_the_specified_rules)
{
    struct ctl_nft_service s[2] = {
        svc(1, IPPROTO_TCP, 8080, "10.1.2.0/24", false),
        svc(2, IPPROTO_UDP, 5353, NULL, true),
    };
    char exp[8192];
    struct ctl_nft *n;
    bool native;

    enter_netns();
    n = nft_open(2);
    native = ctl_nft_native_queue(n);
    cr_assert_eq(ctl_nft_sync(n, s, 2), 0);

    assert_chain("pre", PRE_CHAIN);
    assert_chain("post", POST_CHAIN);
    assert_elements((const char *const[]){
        "tcp . 10.1.2.0/24 . 8080 : jump s1_c2s", "tcp . 10.1.2.0/24 . 8080 : jump s1_s2c",
        "udp . 0.0.0.0/0 . 5353 : jump s2_c2s", "udp . ::/0 . 5353 : jump s2_s2c", NULL});
    assert_queue_chain("qfc", native, 2, 7000, false);
    assert_queue_chain("qfo", native, 2, 7002, true);
    tcp_chain_expect(exp, sizeof(exp), "qfc", true);
    assert_chain("s1_c2s", exp);
    tcp_chain_expect(exp, sizeof(exp), "qfc", false);
    assert_chain("s1_s2c", exp);
    /* SYN-ACKs to the NFLOG group of the thread that reads the flow's queue. */
    assert_chain("synack", "symhash mod 2 0 log group 7000 queue-threshold 1\n"
                           "symhash mod 2 1 log group 7001 queue-threshold 1\n");
    assert_chain("s2_c2s", "goto qfo\n");
    assert_chain("s2_s2c", "goto qfo\n");

    /* The hooks and priorities: before DNAT, after SNAT. */
    {
        struct listing l;

        list_table("inet", "fgex", &l);
        cr_assert(strstr(l.text, "type filter hook prerouting priority mangle; policy accept;"),
                  "%s", l.text);
        cr_assert(strstr(l.text, "type filter hook postrouting priority 300; policy accept;"), "%s",
                  l.text);
        listing_release(&l);
    }
    ctl_nft_close(n);
}

Test(nft, ipv6_prefixes_and_single_thread)
{
    struct ctl_nft_service s[2] = {
        svc(7, IPPROTO_TCP, 80, "fd00:1:2:30::/60", true),
        svc(8, IPPROTO_UDP, 53, "fd00::5", false),
    };
    char exp[256];
    struct ctl_nft *n;

    enter_netns();
    n = nft_open(1);
    cr_assert_eq(ctl_nft_sync(n, s, 2), 0);
    assert_chain("pre", PRE_CHAIN);
    assert_chain("post", POST_CHAIN);
    assert_elements((const char *const[]){
        "tcp . fd00:1:2:30::/60 . 80 : jump s7_c2s", "tcp . fd00:1:2:30::/60 . 80 : jump s7_s2c",
        "udp . fd00::5 . 53 : jump s8_c2s", "udp . fd00::5 . 53 : jump s8_s2c", NULL});
    /* One thread: no hash, fail-open numbering starts right after the fail-closed queue. */
    assert_queue_chain("qfc", ctl_nft_native_queue(n), 1, 7000, false);
    assert_queue_chain("qfo", ctl_nft_native_queue(n), 1, 7001, true);
    (void)snprintf(exp, sizeof(exp), "goto qfc\n");
    assert_chain("s8_c2s", exp);
    ctl_nft_close(n);
}

Test(nft, sync_with_fewer_services_removes_the_others)
{
    struct ctl_nft_service s[3] = {
        svc(1, IPPROTO_TCP, 8080, "10.1.2.0/24", false),
        svc(2, IPPROTO_UDP, 5353, NULL, true),
        svc(3, IPPROTO_TCP, 22, "10.0.0.1", false),
    };
    struct ctl_nft *n;

    enter_netns();
    n = nft_open(2);
    cr_assert_eq(ctl_nft_sync(n, s, 3), 0);
    cr_assert_eq(ctl_nft_sync(n, &s[2], 1), 0);
    assert_chain("pre", PRE_CHAIN);
    assert_chain("post", POST_CHAIN);
    assert_elements((const char *const[]){"tcp . 10.0.0.1 . 22 : jump s3_c2s", NULL});
    assert_no_elements((const char *const[]){"s1_c2s", "s2_c2s", "s1_s2c", "s2_s2c", NULL});
    assert_no_chain("s1_c2s");
    assert_no_chain("s1_s2c");
    assert_no_chain("s2_c2s");
    assert_no_chain("s2_s2c");
    assert_no_chain("qfo"); /* no fail-open service left */
    ctl_nft_close(n);
}

/* Adding or removing one address of a service changes one element: the rules and chains stay
 * the same objects (their handles do not change), and the other services are untouched. */
static char *handles(void)
{
    FILE *f = popen("nft -a list table inet fgex 2>/dev/null | grep -o '# handle [0-9]*' | "
                    "tr '\\n' ' '",
                    "r");
    char buf[8192];
    size_t len;

    cr_assert_not_null(f);
    len = fread(buf, 1, sizeof(buf) - 1, f);
    buf[len] = '\0';
    pclose(f);
    return strdup(buf);
}

Test(nft, address_change_is_an_element_not_a_rebuild)
{
    struct ctl_nft_service s[2] = {
        svc(1, IPPROTO_TCP, 8080, "10.1.2.0/24", false),
        svc(2, IPPROTO_UDP, 5353, "10.9.9.9", true),
    };
    struct ctl_nft *n;
    char *before, *after;

    enter_netns();
    n = nft_open(2);
    s[0].addrs[0] = (struct fgx_svcaddr){.cidr = s[0].addr, .port = 8080};
    s[0].naddrs = 1;
    cr_assert_eq(ctl_nft_sync(n, s, 2), 0);
    before = handles();
    /* One more address, an IPv6 one and an interface with other ports. */
    cr_assert_eq(fgx_svcaddr_parse("[fd00::7]:8443", 0, &s[0].addrs[1], NULL), 0);
    s[0].naddrs = 2;
    cr_assert_eq(ctl_nft_sync(n, s, 2), 0);
    after = handles();
    cr_assert_str_eq(before, after, "rules and chains kept: %s / %s", before, after);
    free(after);
    assert_chain("pre", PRE_CHAIN);
    /* The first interface address brings the interface lookups (a rebuild, once); more are
     * elements again. */
    cr_assert_eq(fgx_svcaddr_parse("veth9:81", 0, &s[0].addrs[2], NULL), 0);
    s[0].naddrs = 3;
    cr_assert_eq(ctl_nft_sync(n, s, 2), 0);
    assert_chain("pre", PRE_CHAIN_IF);
    assert_chain("post", POST_CHAIN_IF);
    free(before);
    before = handles();
    cr_assert_eq(fgx_svcaddr_parse("veth8:82", 0, &s[0].addrs[3], NULL), 0);
    s[0].naddrs = 4;
    cr_assert_eq(ctl_nft_sync(n, s, 2), 0);
    after = handles();
    cr_assert_str_eq(before, after, "rules and chains kept: %s / %s", before, after);
    assert_elements((const char *const[]){
        "tcp . 10.1.2.0/24 . 8080 : jump s1_c2s", "tcp . fd00::7 . 8443 : jump s1_c2s",
        "tcp . \"veth9\" . 81 : jump s1_c2s", "tcp . \"veth9\" . 81 : jump s1_s2c",
        "udp . 10.9.9.9 . 5353 : jump s2_c2s", NULL});
    free(after);
    /* And the first one removed. */
    s[0].addrs[0] = s[0].addrs[3];
    s[0].naddrs = 3;
    cr_assert_eq(ctl_nft_sync(n, s, 2), 0);
    after = handles();
    cr_assert_str_eq(before, after);
    assert_no_elements((const char *const[]){"10.1.2.0/24", NULL});
    assert_elements((const char *const[]){"tcp . fd00::7 . 8443 : jump s1_c2s",
                                          "udp . 10.9.9.9 . 5353 : jump s2_s2c", NULL});
    free(after);
    free(before);
    ctl_nft_close(n);
}

Test(nft, sync_zero_and_clear_remove_the_table)
{
    struct ctl_nft_service s = svc(1, IPPROTO_TCP, 8080, NULL, false);
    struct ctl_nft *n;

    enter_netns();
    n = nft_open(2);
    cr_assert_eq(ctl_nft_clear(n), 0, "clear without a table is a success");
    cr_assert_eq(ctl_nft_sync(n, NULL, 0), 0);
    cr_assert_not(table_exists("inet", "fgex"));
    cr_assert_eq(ctl_nft_sync(n, &s, 1), 0);
    cr_assert(table_exists("inet", "fgex"));
    cr_assert_eq(ctl_nft_sync(n, NULL, 0), 0);
    cr_assert_not(table_exists("inet", "fgex"));
    cr_assert_eq(ctl_nft_sync(n, &s, 1), 0);
    cr_assert_eq(ctl_nft_clear(n), 0);
    cr_assert_not(table_exists("inet", "fgex"));
    cr_assert_eq(ctl_nft_clear(n), 0);
    ctl_nft_close(n);
}

Test(nft, foreign_tables_are_untouched)
{
    struct ctl_nft_service s = svc(1, IPPROTO_TCP, 8080, NULL, false);
    struct listing before[2], after;
    struct ctl_nft *n;

    enter_netns();
    sh("nft add table inet other && "
       "nft add chain inet other c '{ type filter hook input priority 0; policy accept; }' && "
       "nft add rule inet other c tcp dport 8080 counter accept && "
       "nft add table ip fgex && nft add chain ip fgex c && nft add rule ip fgex c udp dport 1 "
       "drop");
    list_table("inet", "other", &before[0]);
    list_table("ip", "fgex", &before[1]);
    cr_assert_eq(before[0].status, 0);
    cr_assert_eq(before[1].status, 0);

    n = nft_open(2);
    for (int step = 0; step < 4; step++) {
        if (step == 0)
            cr_assert_eq(ctl_nft_sync(n, &s, 1), 0);
        else if (step == 1)
            cr_assert_eq(ctl_nft_sync(n, &s, 1), 0);
        else if (step == 2)
            cr_assert_eq(ctl_nft_sync(n, NULL, 0), 0);
        else
            cr_assert_eq(ctl_nft_clear(n), 0);
        list_table("inet", "other", &after);
        cr_assert_str_eq(after.text, before[0].text, "step %d", step);
        listing_release(&after);
        list_table("ip", "fgex", &after);
        cr_assert_str_eq(after.text, before[1].text, "step %d", step);
        listing_release(&after);
    }
    ctl_nft_close(n);
    listing_release(&before[0]);
    listing_release(&before[1]);
}

Test(nft, errors_are_returned)
{
    struct ctl_nft_config bad_threads = {.queue_base = 7000, .nthreads = 0};
    struct ctl_nft_config bad_range = {.queue_base = 65530, .nthreads = 4};
    struct ctl_nft_config empty_name = {.table = "", .queue_base = 7000, .nthreads = 1};
    struct ctl_nft_config long_name = {.queue_base = 7000, .nthreads = 1};
    struct ctl_nft_service good = svc(1, IPPROTO_TCP, 8080, NULL, false);
    struct ctl_nft_service bad;
    struct ctl_nft *n = NULL, *nl = NULL;
    char name[400];

    enter_netns();
    cr_assert_eq(ctl_nft_open(&bad_threads, &n), -EINVAL);
    cr_assert_eq(ctl_nft_open(&bad_range, &n), -EINVAL);
    cr_assert_eq(ctl_nft_open(&empty_name, &n), -EINVAL);
    cr_assert_null(n);

    n = nft_open(2);
    cr_assert_eq(ctl_nft_sync(n, &good, 1), 0);
    bad = good;
    bad.ipproto = IPPROTO_ICMP;
    cr_assert_eq(ctl_nft_sync(n, &bad, 1), -EINVAL);
    bad = good;
    bad.port = 0;
    cr_assert_eq(ctl_nft_sync(n, &bad, 1), -EINVAL);
    bad = svc(1, IPPROTO_TCP, 8080, "10.0.0.0/8", false);
    bad.addr.prefix = 33;
    cr_assert_eq(ctl_nft_sync(n, &bad, 1), -EINVAL);
    bad.addr.family = 5;
    cr_assert_eq(ctl_nft_sync(n, &bad, 1), -EINVAL);
    {
        struct ctl_nft_service dup[2] = {good, good};

        cr_assert_eq(ctl_nft_sync(n, dup, 2), -EINVAL);
    }
    /* A refused sync leaves the previous rules in place. */
    assert_chain("pre", PRE_CHAIN);
    assert_elements((const char *const[]){"tcp . 0.0.0.0/0 . 8080 : jump s1_c2s", NULL});

    /* The kernel refuses a table name this long: its error comes back, nothing is left. */
    memset(name, 'x', sizeof(name) - 1);
    name[sizeof(name) - 1] = '\0';
    long_name.table = name;
    cr_assert_eq(ctl_nft_open(&long_name, &nl), 0);
    {
        int rc = ctl_nft_sync(nl, &good, 1);

        cr_assert_lt(rc, 0);
        cr_assert_neq(rc, -ETIMEDOUT);
    }
    cr_assert_lt(ctl_nft_clear(nl), 0);
    cr_assert_eq(sh_status("nft list tables | grep -q xxxx"), 256, "no half-made table");
    /* The socket is still usable after a refused transaction. */
    cr_assert_eq(ctl_nft_sync(n, &good, 1), 0);
    ctl_nft_close(nl);
    ctl_nft_close(n);
    ctl_nft_close(NULL);
}

Test(nft, many_services_fit_one_transaction)
{
    enum { NSVC = 300 };
    struct ctl_nft_service *s = calloc(NSVC, sizeof(*s));
    struct ctl_nft *n;
    char *pre;
    int jumps = 0;

    cr_assert_not_null(s);
    enter_netns();
    for (int i = 0; i < NSVC; i++)
        s[i] = svc((uint32_t)i + 1, i % 2 ? IPPROTO_UDP : IPPROTO_TCP, (uint16_t)(10000 + i), NULL,
                   i % 3 == 0);
    n = nft_open(4);
    cr_assert_eq(ctl_nft_sync(n, s, NSVC), 0);
    {
        struct listing l;

        list_table("inet", "fgex", &l);
        /* Each service any address, so an element in both families' maps each way. */
        for (const char *p = l.text; (p = strstr(p, ": jump s")); p++)
            jumps++;
        listing_release(&l);
    }
    cr_assert_eq(jumps, 4 * NSVC);
    pre = chain_text("pre");
    cr_assert_not_null(pre);
    free(pre);
    ctl_nft_close(n);
    free(s);
}

/* ---- real packets ------------------------------------------------------------------------ */

static void sa_make(int family, const char *ip, uint16_t port, struct sockaddr_storage *ss,
                    socklen_t *len)
{
    memset(ss, 0, sizeof(*ss));
    if (family == AF_INET) {
        struct sockaddr_in *a = (struct sockaddr_in *)ss;

        a->sin_family = AF_INET;
        a->sin_port = htons(port);
        cr_assert_eq(inet_pton(AF_INET, ip, &a->sin_addr), 1);
        *len = sizeof(*a);
    } else {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)ss;

        a->sin6_family = AF_INET6;
        a->sin6_port = htons(port);
        cr_assert_eq(inet_pton(AF_INET6, ip, &a->sin6_addr), 1);
        *len = sizeof(*a);
    }
}

/* A socket created while the process is in namespace ns stays there. */
static int sock_in(int ns_from, int ns_to, int family, int type)
{
    int fd;

    cr_assert_eq(setns(ns_to, CLONE_NEWNET), 0);
    fd = socket(family, type | SOCK_NONBLOCK, 0);
    cr_assert_geq(fd, 0);
    cr_assert_eq(setns(ns_from, CLONE_NEWNET), 0);
    return fd;
}

static int tcp_listen(int family, const char *ip, uint16_t port)
{
    struct sockaddr_storage ss;
    socklen_t len;
    int one = 1, fd = socket(family, SOCK_STREAM | SOCK_NONBLOCK, 0);

    cr_assert_geq(fd, 0);
    sa_make(family, ip, port, &ss, &len);
    cr_assert_eq(setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)), 0);
    cr_assert_eq(bind(fd, (struct sockaddr *)&ss, len), 0, "bind: %s", strerror(errno));
    cr_assert_eq(listen(fd, 16), 0);
    return fd;
}

static bool wait_fd(int fd, short events, int ms)
{
    struct pollfd p = {.fd = fd, .events = events};

    return poll(&p, 1, ms) == 1 && (p.revents & events);
}

/* Start a connection from the client namespace; true when it completed within ms. */
/* A fresh veth pair can lose the first SYN (or the neighbour solicitation before it); TCP
 * sends it again after 1 s, then 3 s: a connect gets until the second one. */
#define CONNECT_MS 5000

static bool tcp_connect(struct pair *p, int family, const char *ip, uint16_t port, int ms, int *out)
{
    struct sockaddr_storage ss;
    socklen_t len, el = sizeof(int);
    int fd = sock_in(p->ns_srv, p->ns_cli, family, SOCK_STREAM), err = 0;

    sa_make(family, ip, port, &ss, &len);
    cr_assert(connect(fd, (struct sockaddr *)&ss, len) == 0 || errno == EINPROGRESS);
    *out = fd;
    if (!wait_fd(fd, POLLOUT, ms))
        return false;
    cr_assert_eq(getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el), 0);
    return err == 0;
}

static int tcp_accept(int lfd, int ms)
{
    if (!wait_fd(lfd, POLLIN, ms))
        return -1;
    return accept4(lfd, NULL, NULL, SOCK_NONBLOCK);
}

/* Bytes that arrived on fd within ms: -1 for none, 0 for end of stream. */
static ssize_t recv_within(int fd, char *buf, size_t len, int ms)
{
    if (!wait_fd(fd, POLLIN, ms))
        return -1;
    return recv(fd, buf, len, 0);
}

static void sync_one(struct ctl_nft *n, struct ctl_nft_service s)
{
    cr_assert_eq(ctl_nft_sync(n, &s, 1), 0);
}

Test(nft, fail_closed_service_drops_without_reader)
{
    struct pair p;
    struct ctl_nft *n;
    int lfd, cfd, afd;
    char buf[16];

    pair_setup(&p);
    lfd = tcp_listen(AF_INET, "10.99.0.2", PORT_TCP);
    n = nft_open(2);

    /* Another prefix: this traffic is not the service's and passes. */
    sync_one(n, svc(1, IPPROTO_TCP, PORT_TCP, "10.98.0.0/16", false));
    cr_assert(tcp_connect(&p, AF_INET, "10.99.0.2", PORT_TCP, CONNECT_MS, &cfd));
    afd = tcp_accept(lfd, 2000);
    cr_assert_geq(afd, 0);
    close(afd);
    close(cfd);

    /* The service's own traffic: the handshake carries no payload and passes, but every
     * segment with payload is queued, and with nobody reading the queue and no bypass the
     * kernel drops it. */
    sync_one(n, svc(1, IPPROTO_TCP, PORT_TCP, "10.99.0.0/24", false));
    cr_assert(tcp_connect(&p, AF_INET, "10.99.0.2", PORT_TCP, CONNECT_MS, &cfd));
    afd = tcp_accept(lfd, 2000);
    cr_assert_geq(afd, 0);
    cr_assert_eq(send(cfd, "x", 1, MSG_NOSIGNAL), 1);
    cr_assert_eq(recv_within(afd, buf, sizeof(buf), WAIT_MS), -1, "c2s payload got through");
    cr_assert_eq(send(afd, "y", 1, MSG_NOSIGNAL), 1);
    cr_assert_eq(recv_within(cfd, buf, sizeof(buf), WAIT_MS), -1, "s2c payload got through");
    close(afd);
    close(cfd);
    close(lfd);
    ctl_nft_close(n);
    pair_release(&p);
}

Test(nft, fail_open_service_passes_without_reader)
{
    struct pair p;
    struct ctl_nft *n;
    int lfd, cfd, afd;
    char buf[16];

    pair_setup(&p);
    lfd = tcp_listen(AF_INET, "10.99.0.2", PORT_TCP);
    n = nft_open(2);
    sync_one(n, svc(1, IPPROTO_TCP, PORT_TCP, "10.99.0.2", true));
    cr_assert(tcp_connect(&p, AF_INET, "10.99.0.2", PORT_TCP, CONNECT_MS, &cfd));
    afd = tcp_accept(lfd, 2000);
    cr_assert_geq(afd, 0);
    cr_assert_eq(send(cfd, "hello", 5, MSG_NOSIGNAL), 5);
    cr_assert_eq(recv_within(afd, buf, sizeof(buf), 2000), 5);
    cr_assert_eq(memcmp(buf, "hello", 5), 0);
    cr_assert_eq(send(afd, "world", 5, MSG_NOSIGNAL), 5);
    cr_assert_eq(recv_within(cfd, buf, sizeof(buf), 2000), 5);
    close(afd);
    close(cfd);
    close(lfd);
    ctl_nft_close(n);
    pair_release(&p);
}

/* Connections opened before the service's rules: from then on, segments with payload are
 * queued (and dropped, nobody reads), segments without payload (FIN, ACK) pass. */
static void payloadless_pass(int family, const char *srv_ip)
{
    struct pair p;
    struct ctl_nft *n;
    int lfd, cfd[3], afd[3];
    char buf[16], big[1000];

    pair_setup(&p);
    lfd = tcp_listen(family, srv_ip, PORT_TCP);
    n = nft_open(2);
    for (int i = 0; i < 3; i++) {
        cr_assert(tcp_connect(&p, family, srv_ip, PORT_TCP, CONNECT_MS, &cfd[i]));
        afd[i] = tcp_accept(lfd, 2000);
        cr_assert_geq(afd[i], 0);
    }
    sync_one(n, svc(1, IPPROTO_TCP, PORT_TCP, NULL, false));

    cr_assert_eq(send(cfd[0], "data", 4, MSG_NOSIGNAL), 4);
    cr_assert_eq(recv_within(afd[0], buf, sizeof(buf), WAIT_MS), -1, "c2s payload got through");
    cr_assert_eq(send(afd[1], "data", 4, MSG_NOSIGNAL), 4);
    cr_assert_eq(recv_within(cfd[1], buf, sizeof(buf), WAIT_MS), -1, "s2c payload got through");
    /* Longer than any header (the rule that skips the exact header-length rules). */
    memset(big, 'x', sizeof(big));
    cr_assert_eq(send(cfd[0], big, sizeof(big), MSG_NOSIGNAL), (ssize_t)sizeof(big));
    cr_assert_eq(recv_within(afd[0], buf, sizeof(buf), WAIT_MS), -1, "large c2s got through");
    cr_assert_eq(send(afd[1], big, sizeof(big), MSG_NOSIGNAL), (ssize_t)sizeof(big));
    cr_assert_eq(recv_within(cfd[1], buf, sizeof(buf), WAIT_MS), -1, "large s2c got through");

    cr_assert_eq(shutdown(cfd[2], SHUT_WR), 0);
    cr_assert_eq(recv_within(afd[2], buf, sizeof(buf), 2000), 0, "client FIN did not pass");
    cr_assert_eq(shutdown(afd[2], SHUT_WR), 0);
    cr_assert_eq(recv_within(cfd[2], buf, sizeof(buf), 2000), 0, "server FIN did not pass");

    for (int i = 0; i < 3; i++) {
        close(cfd[i]);
        close(afd[i]);
    }
    close(lfd);
    ctl_nft_close(n);
    pair_release(&p);
}

Test(nft, payloadless_segments_pass_ipv4)
{
    payloadless_pass(AF_INET, "10.99.0.2");
}

Test(nft, payloadless_segments_pass_ipv6)
{
    payloadless_pass(AF_INET6, "fd99::2");
}

Test(nft, udp_fail_closed_drops_fail_open_passes)
{
    struct sockaddr_storage ss;
    socklen_t len;
    struct pair p;
    struct ctl_nft *n;
    int sfd, cfd;
    char buf[16];

    pair_setup(&p);
    sfd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0);
    cr_assert_geq(sfd, 0);
    sa_make(AF_INET, "10.99.0.2", PORT_UDP, &ss, &len);
    cr_assert_eq(bind(sfd, (struct sockaddr *)&ss, len), 0);
    cfd = sock_in(p.ns_srv, p.ns_cli, AF_INET, SOCK_DGRAM);
    n = nft_open(2);

    sync_one(n, svc(4, IPPROTO_UDP, PORT_UDP, NULL, false));
    cr_assert_eq(sendto(cfd, "one", 3, 0, (struct sockaddr *)&ss, len), 3);
    cr_assert_eq(recv_within(sfd, buf, sizeof(buf), WAIT_MS), -1, "datagram got through");

    sync_one(n, svc(4, IPPROTO_UDP, PORT_UDP, NULL, true));
    cr_assert_eq(sendto(cfd, "two", 3, 0, (struct sockaddr *)&ss, len), 3);
    cr_assert_eq(recv_within(sfd, buf, sizeof(buf), 2000), 3, "bypass did not pass it");
    cr_assert_eq(memcmp(buf, "two", 3), 0);
    close(cfd);
    close(sfd);
    ctl_nft_close(n);
    pair_release(&p);
}

/* On loopback (64 KiB MTU) SYNs offer an MSS above the NFQUEUE copy range; the rules clamp it
 * so that no segment a worker must scan arrives cut short. The server's SYN-ACK is clamped in
 * postrouting, before loopback transmits it, so a packet socket on lo sees the result. Returns
 * the MSS the SYN-ACK carried on the wire. */
static int loopback_synack_mss(void)
{
    int lfd = tcp_listen(AF_INET, "127.0.0.1", PORT_TCP), cfd, afd, mss = -1;
    int pfd = socket(AF_PACKET, SOCK_DGRAM | SOCK_NONBLOCK, htons(ETH_P_IP));
    struct sockaddr_ll ll = {.sll_family = AF_PACKET, .sll_protocol = htons(ETH_P_IP)};
    struct sockaddr_storage ss;
    uint8_t pkt[256];
    socklen_t len;
    ssize_t got;

    cr_assert_geq(pfd, 0);
    ll.sll_ifindex = (int)if_nametoindex("lo");
    cr_assert_eq(bind(pfd, (struct sockaddr *)&ll, sizeof(ll)), 0);
    cfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    cr_assert_geq(cfd, 0);
    sa_make(AF_INET, "127.0.0.1", PORT_TCP, &ss, &len);
    cr_assert(connect(cfd, (struct sockaddr *)&ss, len) == 0 || errno == EINPROGRESS);
    afd = tcp_accept(lfd, 2000);
    cr_assert_geq(afd, 0);
    while (mss < 0 && (got = recv(pfd, pkt, sizeof(pkt), 0)) > 0) {
        size_t ihl = (size_t)(pkt[0] & 0x0f) * 4, doff;
        const uint8_t *tcp = pkt + ihl, *opt;

        if (got < 40 || pkt[9] != IPPROTO_TCP || (size_t)got < ihl + 20)
            continue;
        /* SYN-ACK from the server port */
        if (((tcp[0] << 8) | tcp[1]) != PORT_TCP || (tcp[13] & 0x12) != 0x12)
            continue;
        doff = (size_t)(tcp[12] >> 4) * 4;
        for (opt = tcp + 20; opt + 4 <= tcp + doff && opt + 4 <= pkt + got;) {
            if (opt[0] == 0)
                break;
            if (opt[0] == 1) {
                opt++;
                continue;
            }
            if (opt[0] == 2 && opt[1] == 4) {
                mss = (opt[2] << 8) | opt[3];
                break;
            }
            if (opt[1] < 2)
                break;
            opt += opt[1];
        }
    }
    close(pfd);
    close(afd);
    close(cfd);
    close(lfd);
    return mss;
}

Test(nft, syn_mss_is_clamped)
{
    struct ctl_nft *n;
    int mss;

    enter_netns();
    mss = loopback_synack_mss();
    cr_assert_gt(mss, 65000, "loopback should offer more than the clamp: %d", mss);
    n = nft_open(2);
    sync_one(n, svc(1, IPPROTO_TCP, PORT_TCP, NULL, true));
    mss = loopback_synack_mss();
    cr_assert_eq(mss, 65000);
    ctl_nft_close(n);
}

/* ---- SYN-ACK copies (NFLOG) ---------------------------------------------------------------- */

/* A netlink socket bound to NFQUEUE queue num (subsys NFNL_SUBSYS_QUEUE) or NFLOG group num
 * (NFNL_SUBSYS_ULOG), with the kernel's defaults otherwise; only which one a message arrives on
 * matters here (its nfgenmsg res_id). */
static int nfnl_bind(uint8_t subsys, uint16_t num)
{
    char buf[MNL_SOCKET_BUFFER_SIZE];
    struct mnl_socket *nl = mnl_socket_open(NETLINK_NETFILTER);
    struct nlmsghdr *nlh;
    struct nfgenmsg *g;
    uint8_t cmd[4] = {1, 0, 0, 0}; /* NFQNL_CFG_CMD_BIND == NFULNL_CFG_CMD_BIND == 1 */
    ssize_t n;
    int fd;

    cr_assert_not_null(nl);
    cr_assert_eq(mnl_socket_bind(nl, 0, MNL_SOCKET_AUTOPID), 0);
    nlh = mnl_nlmsg_put_header(buf);
    nlh->nlmsg_type = (uint16_t)((subsys << 8) | (subsys == NFNL_SUBSYS_QUEUE ? NFQNL_MSG_CONFIG
                                                                              : NFULNL_MSG_CONFIG));
    nlh->nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK;
    nlh->nlmsg_seq = 1;
    g = mnl_nlmsg_put_extra_header(nlh, sizeof(*g));
    g->nfgen_family = AF_UNSPEC;
    g->version = NFNETLINK_V0;
    g->res_id = htons(num);
    /* NFQA_CFG_CMD == NFULA_CFG_CMD == 1; the queue's command carries a (here unused) pf too. */
    mnl_attr_put(nlh, 1, subsys == NFNL_SUBSYS_QUEUE ? 4 : 1, cmd);
    cr_assert_geq(mnl_socket_sendto(nl, nlh, nlh->nlmsg_len), 0);
    n = mnl_socket_recvfrom(nl, buf, sizeof(buf));
    cr_assert_gt(n, 0);
    cr_assert_geq(mnl_cb_run(buf, (size_t)n, 1, mnl_socket_get_portid(nl), NULL, NULL), 0,
                  "bind %u/%u: %s", subsys, num, strerror(errno));
    if (subsys == NFNL_SUBSYS_QUEUE) {
        /* A queue copies nothing by default, and then drops what it is given. */
        struct nfqnl_msg_config_params params = {.copy_range = htonl(128),
                                                 .copy_mode = NFQNL_COPY_META};

        nlh = mnl_nlmsg_put_header(buf);
        nlh->nlmsg_type = (uint16_t)((subsys << 8) | NFQNL_MSG_CONFIG);
        nlh->nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK;
        nlh->nlmsg_seq = 2;
        g = mnl_nlmsg_put_extra_header(nlh, sizeof(*g));
        g->nfgen_family = AF_UNSPEC;
        g->version = NFNETLINK_V0;
        g->res_id = htons(num);
        mnl_attr_put(nlh, NFQA_CFG_PARAMS, sizeof(params), &params);
        cr_assert_geq(mnl_socket_sendto(nl, nlh, nlh->nlmsg_len), 0);
        n = mnl_socket_recvfrom(nl, buf, sizeof(buf));
        cr_assert_gt(n, 0);
        cr_assert_geq(mnl_cb_run(buf, (size_t)n, 2, mnl_socket_get_portid(nl), NULL, NULL), 0);
    }
    fd = dup(mnl_socket_get_fd(nl));
    mnl_socket_close(nl);
    return fd;
}

/* Which of fds[0..1] receives a message of type subsys within ms: its index, or -1. */
static int nfnl_which(const int *fds, uint8_t subsys, int ms)
{
    struct pollfd pfd[2] = {{.fd = fds[0], .events = POLLIN}, {.fd = fds[1], .events = POLLIN}};
    char buf[8192];
    int got = -1;

    if (poll(pfd, 2, ms) <= 0)
        return -1;
    for (int i = 0; i < 2; i++) {
        ssize_t n;

        while ((n = recv(fds[i], buf, sizeof(buf), MSG_DONTWAIT)) > 0) {
            const struct nlmsghdr *nlh = (const struct nlmsghdr *)buf;

            if (NFNL_SUBSYS_ID(nlh->nlmsg_type) == subsys) {
                cr_assert(got == -1 || got == i, "both threads got a message");
                got = i;
            }
        }
    }
    return got;
}

/* The worker anchors a flow in the thread that reads the flow's queue: the SYN-ACK copy must go
 * to that thread's NFLOG group, for every flow. */
Test(nft, synack_copy_goes_to_the_thread_of_the_flows_queue)
{
    int lfd, cfd, afd, logs[2], queues[2], seen[2] = {0, 0};
    struct pair p;
    struct ctl_nft *n;

    pair_setup(&p);
    lfd = tcp_listen(AF_INET, "10.99.0.2", PORT_TCP);
    n = nft_open(2);
    sync_one(n, svc(1, IPPROTO_TCP, PORT_TCP, NULL, false));
    for (int i = 0; i < 2; i++) {
        logs[i] = nfnl_bind(NFNL_SUBSYS_ULOG, (uint16_t)(7000 + i));
        queues[i] = nfnl_bind(NFNL_SUBSYS_QUEUE, (uint16_t)(7000 + i));
    }
    for (int c = 0; c < 16; c++) {
        int lg, q;

        /* The handshake is not queued: it completes with nobody giving verdicts. */
        cr_assert(tcp_connect(&p, AF_INET, "10.99.0.2", PORT_TCP, CONNECT_MS, &cfd));
        afd = tcp_accept(lfd, 2000);
        cr_assert_geq(afd, 0);
        lg = nfnl_which(logs, NFNL_SUBSYS_ULOG, 2000);
        cr_assert_geq(lg, 0, "connection %d: no SYN-ACK copy", c);
        cr_assert_eq(send(cfd, "x", 1, MSG_NOSIGNAL), 1);
        q = nfnl_which(queues, NFNL_SUBSYS_QUEUE, 2000);
        cr_assert_eq(q, lg, "connection %d: SYN-ACK copy to group %d, data to queue %d", c,
                     7000 + lg, 7000 + q);
        seen[q]++;
        {
            /* Closed with a reset, which nothing retransmits: its copy (flows_active) goes to
             * the flow's thread too, and nowhere else. */
            struct linger lin = {.l_onoff = 1, .l_linger = 0};

            cr_assert_eq(setsockopt(cfd, SOL_SOCKET, SO_LINGER, &lin, sizeof(lin)), 0);
            close(cfd);
            close(afd);
        }
        for (;;) {
            int rst = nfnl_which(logs, NFNL_SUBSYS_ULOG, 300);

            if (rst < 0)
                break;
            cr_assert_eq(rst, lg, "connection %d: a RST copy to group %d, SYN-ACK to %d", c,
                         7000 + rst, 7000 + lg);
        }
    }
    cr_assert(seen[0] > 0 && seen[1] > 0, "16 connections all on one thread (%d, %d)", seen[0],
              seen[1]);
    for (int i = 0; i < 2; i++) {
        close(logs[i]);
        close(queues[i]);
    }
    close(lfd);
    ctl_nft_close(n);
    pair_release(&p);
}

/* A kernel without the log expression (forced here): no SYN-ACK copies, the server's SYN-ACK
 * is queued instead, right after the MSS clamp; the client's side is as with copies. */
Test(nft, without_synack_log_the_synack_is_queued)
{
    struct ctl_nft_config cfg = {.queue_base = 7000, .nthreads = 2, .no_synack_log = 1};
    struct ctl_nft_service s = svc(1, IPPROTO_TCP, 8080, NULL, false);
    struct ctl_nft *n = NULL;
    char exp[8192];

    enter_netns();
    cr_assert_eq(ctl_nft_open(&cfg, &n), 0);
    cr_assert_not(ctl_nft_synack_log(n));
    cr_assert_eq(ctl_nft_sync(n, &s, 1), 0);
    tcp_chain_expect_log(exp, sizeof(exp), "qfc", true, false);
    assert_chain("s1_c2s", exp);
    tcp_chain_expect_log(exp, sizeof(exp), "qfc", false, false);
    assert_chain("s1_s2c", exp);
    assert_no_chain("synack");
    ctl_nft_close(n);
}

Test(nft, synack_log_is_probed_by_default)
{
    struct ctl_nft *n;
    bool kernel_log;

    enter_netns();
    kernel_log = sh_status("nft add table inet fgxq && nft add chain inet fgxq c && "
                           "nft add rule inet fgxq c log group 7000 2>/dev/null") == 0;
    sh("nft delete table inet fgxq");
    n = nft_open(1);
    cr_assert_eq(ctl_nft_synack_log(n), kernel_log);
    ctl_nft_close(n);
}
