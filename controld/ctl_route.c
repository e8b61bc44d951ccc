/* controld stage: policy routing for the proxy layer, over rtnetlink with libmnl. The nftables
 * rules (ctl_nft.c) mark what must reach the proxy; this routes the marked packets locally:
 *   ip rule add fwmark CTL_ROUTE_MARK lookup CTL_ROUTE_TABLE pref CTL_ROUTE_PREF
 *   ip route add local default dev lo table CTL_ROUTE_TABLE
 * for each family. Nothing else in the routing configuration is read or changed. */
#include "ctl_route.h"

#include <netinet/in.h>

#include <errno.h>
#include <linux/fib_rules.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <stdbool.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include <libmnl/libmnl.h>

#include "fgx/log.h"

#define ROUTE_BUF 8192

/* Send one request and wait for its ack. Returns 0 or the kernel's negative errno. */
static int rt_call(struct mnl_socket *nl, struct nlmsghdr *nlh)
{
    char buf[ROUTE_BUF];
    unsigned portid = mnl_socket_get_portid(nl);
    ssize_t n;
    int rc;

    if (mnl_socket_sendto(nl, nlh, nlh->nlmsg_len) == -1)
        return -errno;
    for (;;) {
        n = mnl_socket_recvfrom(nl, buf, sizeof(buf));
        if (n == -1)
            return -errno;
        rc = mnl_cb_run(buf, (size_t)n, nlh->nlmsg_seq, portid, NULL, NULL);
        if (rc == -1)
            return -errno;
        if (rc <= MNL_CB_STOP)
            return 0;
    }
}

static void rule_msg(struct nlmsghdr *nlh, int family)
{
    struct fib_rule_hdr *frh = mnl_nlmsg_put_extra_header(nlh, sizeof(*frh));

    frh->family = (uint8_t)family;
    frh->action = FR_ACT_TO_TBL;
    frh->table = RT_TABLE_UNSPEC;
    mnl_attr_put_u32(nlh, FRA_FWMARK, CTL_ROUTE_MARK);
    mnl_attr_put_u32(nlh, FRA_FWMASK, 0xffffffffu);
    mnl_attr_put_u32(nlh, FRA_TABLE, CTL_ROUTE_TABLE);
    mnl_attr_put_u32(nlh, FRA_PRIORITY, CTL_ROUTE_PREF);
}

static void route_msg(struct nlmsghdr *nlh, int family)
{
    struct rtmsg *rtm = mnl_nlmsg_put_extra_header(nlh, sizeof(*rtm));

    rtm->rtm_family = (uint8_t)family;
    rtm->rtm_dst_len = 0;
    rtm->rtm_table = RT_TABLE_UNSPEC;
    rtm->rtm_protocol = RTPROT_STATIC;
    rtm->rtm_scope = RT_SCOPE_HOST;
    rtm->rtm_type = RTN_LOCAL;
    mnl_attr_put_u32(nlh, RTA_TABLE, CTL_ROUTE_TABLE);
    mnl_attr_put_u32(nlh, RTA_OIF, if_nametoindex("lo"));
}

/* add: create (an existing one is fine); otherwise delete (a missing one is fine). */
static int rt_one(struct mnl_socket *nl, uint32_t *seq, bool add, bool rule, int family,
                  unsigned *created)
{
    char buf[MNL_SOCKET_BUFFER_SIZE];
    struct nlmsghdr *nlh = mnl_nlmsg_put_header(buf);
    int rc;

    if (rule)
        nlh->nlmsg_type = add ? RTM_NEWRULE : RTM_DELRULE;
    else
        nlh->nlmsg_type = add ? RTM_NEWROUTE : RTM_DELROUTE;
    nlh->nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK | (add ? NLM_F_CREATE | NLM_F_EXCL : 0);
    nlh->nlmsg_seq = ++*seq;
    if (rule)
        rule_msg(nlh, family);
    else
        route_msg(nlh, family);
    rc = rt_call(nl, nlh);
    if (add && rc == 0 && created)
        (*created)++;
    if (add && rc == -EEXIST)
        rc = 0;
    if (!add && (rc == -ENOENT || rc == -ESRCH))
        rc = 0;
    return rc;
}

static int rt_all(bool add, unsigned *created)
{
    static const int families[2] = {AF_INET, AF_INET6};
    struct mnl_socket *nl;
    uint32_t seq = (uint32_t)time(NULL);
    int rc = 0, i;

    nl = mnl_socket_open(NETLINK_ROUTE);
    if (nl == NULL) {
        rc = -errno;
        fgx_err("route: netlink socket: %s", strerror(errno));
        return rc;
    }
    if (mnl_socket_bind(nl, 0, MNL_SOCKET_AUTOPID) == -1) {
        rc = -errno;
        fgx_err("route: netlink bind: %s", strerror(errno));
        goto out;
    }
    for (i = 0; i < 2; i++) {
        const char *fam = i == 0 ? "IPv4" : "IPv6";
        int r1, r2;

        /* Route before rule when adding, rule before route when removing: the rule never
         * points at an empty table. */
        if (add) {
            r1 = rt_one(nl, &seq, true, false, families[i], created);
            r2 = r1 == 0 ? rt_one(nl, &seq, true, true, families[i], created) : 0;
        } else {
            r2 = rt_one(nl, &seq, false, true, families[i], NULL);
            r1 = rt_one(nl, &seq, false, false, families[i], NULL);
        }
        if (r1 == 0 && r2 == 0)
            continue;
        if (i == 1 && (r1 == -EAFNOSUPPORT || r2 == -EAFNOSUPPORT)) {
            fgx_warn("route: no IPv6 on this host: the proxy layer carries IPv4 only");
            continue;
        }
        rc = r1 != 0 ? r1 : r2;
        fgx_err("route: %s %s %s (fwmark 0x%x, table %u): %s", add ? "adding" : "removing", fam,
                r1 != 0 ? "local route" : "rule", CTL_ROUTE_MARK, CTL_ROUTE_TABLE,
                strerror(-rc));
        break;
    }
out:
    mnl_socket_close(nl);
    return rc;
}

int ctl_route_setup(void)
{
    return rt_all(true, NULL);
}

int ctl_route_restore(unsigned *created)
{
    *created = 0;
    return rt_all(true, created);
}

int ctl_route_teardown(void)
{
    return rt_all(false, NULL);
}
