/* Unit tests for service addresses: the text of one address (libcommon/svcaddr.c), the overlap
 * rules between services and within one (controld/ctl_svcaddr.c), the workers' index that finds
 * a packet's service among every address (libcommon/wcfg.c), checked against a plain walk of
 * every address on random sets, and the data-path message that carries the list (dp.c). */
#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

#include "controld/ctl_svcaddr.h"
#include "fgx/dp.h"
#include "fgx/svcaddr.h"
#include "fgx/wcfg.h"

static struct fgx_svcaddr P(const char *text, uint16_t dflt) {
    struct fgx_svcaddr a;
    const char *why = NULL;

    cr_assert_eq(fgx_svcaddr_parse(text, dflt, &a, &why), 0, "%s refused: %s", text,
                 why ? why : "?");
    return a;
}

static void
round_trip(const char *in, uint16_t dflt, const char *out)
{
    struct fgx_svcaddr a = P(in, dflt);
    char buf[FGX_SVCADDR_TEXT_MAX];

    cr_assert_eq(fgx_svcaddr_format(&a, buf, sizeof(buf)), 0);
    cr_assert_str_eq(buf, out, "%s gave %s, expected %s", in, buf, out);
}

Test(svcaddr, forms_and_their_canonical_text)
{
    round_trip("10.0.0.2:80", 0, "10.0.0.2:80");
    round_trip("10.0.0.2", 443, "10.0.0.2:443");
    round_trip("10.0.0.0/24:80", 0, "10.0.0.0/24:80");
    round_trip("[fd00::1]:80", 0, "[fd00::1]:80");
    round_trip("[fd00::/64]:8080", 0, "[fd00::/64]:8080");
    round_trip("fd00::1", 53, "[fd00::1]:53"); /* no brackets, no port: the whole is the address */
    round_trip("[FD00:0::1]", 53, "[fd00::1]:53");
    round_trip("eth1:80", 0, "eth1:80");
    round_trip("eth0.100:81", 0, "eth0.100:81"); /* a VLAN's name has a dot */
    round_trip("*:80", 0, "*:80");
    round_trip("*", 22, "*:22");
    /* IPv4-mapped is IPv4, as everywhere in fgex */
    round_trip("[::ffff:10.1.2.3]:80", 0, "10.1.2.3:80");
    round_trip("[::ffff:10.1.2.0/120]:80", 0, "10.1.2.0/24:80");
}

Test(svcaddr, kinds)
{
    struct fgx_svcaddr a = P("eth1:80", 0);

    cr_assert_str_eq(a.ifname, "eth1");
    cr_assert_eq(a.cidr.family, 0);
    a = P("*:80", 0);
    cr_assert_eq(a.ifname[0], '\0');
    cr_assert_eq(a.cidr.family, 0);
    a = P("10.9.0.0/16:1", 0);
    cr_assert_eq(a.cidr.family, 4);
    cr_assert_eq(a.cidr.prefix, 16);
    cr_assert_eq(a.port, 1);
}

Test(svcaddr, bad_text_is_refused_with_a_reason)
{
    static const char *const bad[] = {
        "",           /* nothing */
        ":80",        /* no address */
        "10.0.0.1:0", /* port 0 */
        "10.0.0.1:65536",
        "10.0.0.1:8o",
        "10.0.0.1:+80",
        "10.0.0.1: 80",
        "10.0.0.300:80", /* looks like an address: never an interface name */
        "10.0.0.1/33:80",
        "10.0.0.1/24:80", /* host bits below the prefix */
        "[10.0.0.1]:80",  /* brackets are for IPv6 */
        "[fd00::1:80",
        "[fd00::1]80",
        "fd00::zz",
        "a/b:80", /* not an interface name */
        "averylonginterfacename:80",
        "..:80",
    };
    struct fgx_svcaddr a;

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        const char *why = NULL;

        cr_expect_eq(fgx_svcaddr_parse(bad[i], 80, &a, &why), -EINVAL, "\"%s\" accepted", bad[i]);
        cr_expect_not_null(why, "\"%s\" refused without a reason", bad[i]);
    }
    /* no port anywhere */
    cr_assert_eq(fgx_svcaddr_parse("10.0.0.1", 0, &a, NULL), -EINVAL);
    cr_assert_eq(fgx_svcaddr_parse(NULL, 80, &a, NULL), -EINVAL);
}

Test(svcaddr, overlap)
{
    struct {
        const char *a, *b;
        bool overlap;
    } cases[] = {
        {"10.0.0.1:80", "10.0.0.1:80", true},
        {"10.0.0.1:80", "10.0.0.1:81", false}, /* another port */
        {"10.0.0.1:80", "10.0.0.2:80", false},
        {"10.0.0.0/24:80", "10.0.0.77:80", true},      /* inside the prefix */
        {"10.0.0.77:80", "10.0.0.0/24:80", true},      /* either order */
        {"10.0.0.0/25:80", "10.0.0.128/25:80", false}, /* adjacent halves */
        {"10.0.0.0/23:80", "10.0.1.0/24:80", true},
        {"*:80", "[fd00::1]:80", true}, /* any address covers both families */
        {"*:80", "*:81", false},
        {"[fd00::/64]:80", "[fd00::1:2]:80", true},
        {"[fd00::/64]:80", "[fd00:0:0:1::1]:80", false},
        {"10.0.0.1:80", "[::ffff:10.0.0.1]:80", true}, /* mapped is the same IPv4 address */
        {"10.0.0.1:80", "[fd00::1]:80", false},        /* families apart */
        {"eth1:80", "10.0.0.1:80", true},              /* an interface takes its port everywhere */
        {"eth1:80", "eth2:80", true},
        {"eth1:80", "eth1:81", false},
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct fgx_svcaddr a = P(cases[i].a, 0), b = P(cases[i].b, 0);

        cr_expect_eq(fgx_svcaddr_overlap(&a, &b), cases[i].overlap, "%s vs %s", cases[i].a,
                     cases[i].b);
        cr_expect_eq(fgx_svcaddr_overlap(&b, &a), cases[i].overlap, "%s vs %s", cases[i].b,
                     cases[i].a);
    }
}

static struct ctl_service svc_of(uint8_t proto, const char *const *addrs)
{
    struct ctl_service s = {.ipproto = proto};

    for (; *addrs; addrs++)
        s.addrs[s.naddrs++] = P(*addrs, 0);
    ctl_service_addrs_sync(&s);
    return s;
}

Test(svcaddr, services_conflict_only_on_the_same_protocol)
{
    struct ctl_service a =
        svc_of(IPPROTO_TCP, (const char *const[]){"10.0.0.1:80", "eth1:81", NULL});
    struct ctl_service b =
        svc_of(IPPROTO_TCP, (const char *const[]){"10.0.0.2:80", "10.0.0.9:81", NULL});
    struct ctl_service c = svc_of(IPPROTO_UDP, (const char *const[]){"10.0.0.1:80", NULL});
    size_t i, j;

    cr_assert(ctl_service_overlap(&a, &b, &i, &j));
    cr_assert_eq(i, 1); /* eth1:81 */
    cr_assert_eq(j, 1); /* 10.0.0.9:81 */
    cr_assert_not(ctl_service_overlap(&a, &c, &i, &j));
    cr_assert_eq(a.port, 80);
    cr_assert_eq(a.addr.family, 4);
}

Test(svcaddr, a_list_may_not_repeat_itself)
{
    struct ctl_service ok =
        svc_of(IPPROTO_TCP, (const char *const[]){"10.0.0.1:80", "eth1:80", "eth2:80",
                                                  "[fd00::1]:80", "10.0.0.2:80", NULL});
    struct ctl_service dup =
        svc_of(IPPROTO_TCP, (const char *const[]){"10.0.0.0/24:80", "10.0.0.5:80", NULL});
    struct ctl_service dup_if =
        svc_of(IPPROTO_TCP, (const char *const[]){"eth1:80", "eth1:80", NULL});
    struct ctl_service any =
        svc_of(IPPROTO_TCP, (const char *const[]){"*:80", "[fd00::1]:80", NULL});
    size_t i, j;

    cr_assert_not(ctl_service_self_overlap(&ok, &i, &j));
    cr_assert(ctl_service_self_overlap(&dup, &i, &j));
    cr_assert(ctl_service_self_overlap(&dup_if, &i, &j));
    cr_assert(ctl_service_self_overlap(&any, &i, &j));
}

Test(svcaddr, external_target_is_one_host_and_port)
{
    struct fgx_svcaddr to;
    const char *why = NULL;

    cr_assert_eq(ctl_ext_to_parse("127.0.0.1:9000", &to, &why), 0);
    cr_assert_eq(to.cidr.family, 4);
    cr_assert_eq(to.port, 9000);
    cr_assert_eq(ctl_ext_to_parse("[::1]:9000", &to, &why), 0);
    cr_assert_eq(ctl_ext_to_parse("127.0.0.0/8:9000", &to, &why), -EINVAL);
    cr_assert_eq(ctl_ext_to_parse("lo:9000", &to, &why), -EINVAL);
    cr_assert_eq(ctl_ext_to_parse("*:9000", &to, &why), -EINVAL);
    cr_assert_eq(ctl_ext_to_parse("127.0.0.1", &to, &why), -EINVAL); /* the port is needed */
}

/* ---- the workers' index, against a walk over every address ---- */

static const struct fgx_wsvc *naive(const struct fgx_wcfg *c, const struct fgx_dp_ruleset *rs,
                                    uint8_t proto, int family, const uint8_t *addr, uint16_t port)
{
    /* the most specific address wins (services never overlap, so any winner is the one) */
    const struct fgx_wsvc *best = NULL;
    int best_prefix = -1;

    for (size_t i = 0; i < rs->nservices; i++) {
        const struct fgx_dp_service *s = &rs->services[i];

        if (s->ipproto != proto)
            continue;
        for (size_t k = 0; k < s->naddrs; k++) {
            struct fgx_cidr cidr = s->addrs[k].ifname[0] ? (struct fgx_cidr){0} : s->addrs[k].cidr;
            int pfx = cidr.family ? cidr.prefix : 0;

            if (s->addrs[k].port == port && fgx_cidr_contains(&cidr, family, addr) &&
                pfx > best_prefix) {
                best = &c->svc[i];
                best_prefix = pfx;
            }
        }
    }
    return best;
}

Test(svcaddr, index_finds_what_a_walk_finds)
{
    enum { NSVC = 200, ROUNDS = 20000 };
    struct fgx_dp_service *s = calloc(NSVC, sizeof(*s));
    struct fgx_dp_ruleset rs = {.generation = 1, .nservices = NSVC, .services = s};
    struct fgx_wcfg *c = NULL;
    unsigned seed = 17;

    cr_assert_not_null(s);
    for (int i = 0; i < NSVC; i++) {
        s[i].id = (uint32_t)i + 1;
        s[i].ipproto = i % 3 ? IPPROTO_TCP : IPPROTO_UDP;
        s[i].naddrs = 1 + (size_t)(rand_r(&seed) % 4);
        s[i].addrs = calloc(s[i].naddrs, sizeof(*s[i].addrs));
        cr_assert_not_null(s[i].addrs);
        for (size_t k = 0; k < s[i].naddrs; k++) {
            struct fgx_svcaddr *a = &s[i].addrs[k];

            /* distinct per service: its own /24 of 10.x, a host in it, or its own port for
             * "any" and an interface */
            a->port = (uint16_t)(1000 + rand_r(&seed) % 40);
            switch (rand_r(&seed) % 5) {
            case 0:
                a->cidr.family = 4;
                a->cidr.prefix = 24;
                a->cidr.addr[0] = 10;
                a->cidr.addr[1] = (uint8_t)i;
                a->cidr.addr[2] = (uint8_t)k;
                break;
            case 1:
                a->cidr.family = 4;
                a->cidr.prefix = 32;
                a->cidr.addr[0] = 11;
                a->cidr.addr[1] = (uint8_t)i;
                a->cidr.addr[2] = (uint8_t)k;
                a->cidr.addr[3] = 7;
                break;
            case 2:
                a->cidr.family = 6;
                a->cidr.prefix = 64;
                a->cidr.addr[0] = 0xfd;
                a->cidr.addr[1] = (uint8_t)i;
                a->cidr.addr[2] = (uint8_t)k;
                break;
            case 3:
                a->port = (uint16_t)(20000 + i * 8 + k); /* any address: a port of its own */
                break;
            default:
                a->port = (uint16_t)(30000 + i * 8 + k);
                memcpy(a->ifname, "eth1", 5);
                break;
            }
        }
        s[i].addr = s[i].addrs[0].ifname[0] ? (struct fgx_cidr){0} : s[i].addrs[0].cidr;
        s[i].port = s[i].addrs[0].port;
    }
    cr_assert_eq(fgx_wcfg_build(&rs, NULL, &c), 0);
    for (int r = 0; r < ROUNDS; r++) {
        uint8_t addr[16] = {0};
        int family = rand_r(&seed) % 2 ? 4 : 6;
        uint8_t proto = rand_r(&seed) % 3 ? IPPROTO_TCP : IPPROTO_UDP;
        uint16_t port;
        int svc = rand_r(&seed) % NSVC;

        /* mostly near a real address, sometimes anywhere */
        if (rand_r(&seed) % 4) {
            const struct fgx_svcaddr *a = &s[svc].addrs[rand_r(&seed) % s[svc].naddrs];

            port = a->port;
            memcpy(addr, a->cidr.addr, 16);
            if (a->cidr.family)
                family = a->cidr.family;
            addr[family == 4 ? 3 : 15] ^= (uint8_t)(rand_r(&seed) % 3 ? 0 : rand_r(&seed));
        } else {
            port = (uint16_t)(rand_r(&seed) % 65536);
            for (int b = 0; b < 16; b++)
                addr[b] = (uint8_t)rand_r(&seed);
        }
        cr_assert_eq(fgx_wcfg_lookup(c, proto, family, addr, port),
                     naive(c, &rs, proto, family, addr, port), "round %d", r);
    }
    fgx_wcfg_unref(c);
    for (int i = 0; i < NSVC; i++)
        free(s[i].addrs);
    free(s);
}

Test(svcaddr, the_list_travels_to_the_workers)
{
    struct fgx_svcaddr addrs[3] = {P("10.0.0.0/24:80", 0), P("[fd00::1]:81", 0), P("eth1:82", 0)};
    struct fgx_dp_service svc = {
        .id = 4, .ipproto = IPPROTO_TCP, .port = 80, .addrs = addrs, .naddrs = 3};
    struct fgx_dp_msg m = {.type = FGX_DP_RULESET}, back;
    void *buf;
    size_t len;

    svc.addr = addrs[0].cidr;
    m.u.ruleset.generation = 9;
    m.u.ruleset.nservices = 1;
    m.u.ruleset.services = &svc;
    cr_assert_eq(fgx_dp_encode(&m, &buf, &len), 0);
    cr_assert_eq(fgx_dp_decode(buf, len, &back), 0);
    free(buf);
    cr_assert_eq(back.u.ruleset.nservices, 1);
    cr_assert_eq(back.u.ruleset.services[0].naddrs, 3);
    for (int i = 0; i < 3; i++)
        cr_assert(fgx_svcaddr_equal(&back.u.ruleset.services[0].addrs[i], &addrs[i]), "addr %d", i);
    fgx_dp_msg_release(&back);
}

/* issue 26 point 6: an address says what clients speak there and where the service listens */
Test(svcaddr, an_edge_and_the_services_own_port)
{
    struct fgx_svcaddr a = P("10.0.0.2:8443,tls,to=8080", 0), b;
    const char *why = NULL;

    cr_assert_eq(a.port, 8443);
    cr_assert_eq(a.edge, FGX_EDGE_TLS);
    cr_assert_eq(a.to_port, 8080);
    round_trip("10.0.0.2:8443,tls,to=8080", 0, "10.0.0.2:8443,tls,to=8080");
    round_trip("10.0.0.2,to=8080,tls", 8443, "10.0.0.2:8443,tls,to=8080"); /* any order */
    round_trip("[fd00::1]:80,tcp", 0, "[fd00::1]:80,tcp");
    round_trip("*:80,to=81", 0, "*:80,to=81");
    round_trip("10.0.0.2:80,to=80", 0, "10.0.0.2:80"); /* its own port: nothing to say */
    round_trip("[fd00:1:2:3:4:5:6:7]:65535,tls,to=65534", 0,
               "[fd00:1:2:3:4:5:6:7]:65535,tls,to=65534");
    /* not part of the address: the same address, whatever its edge */
    b = P("10.0.0.2:8443", 0);
    cr_assert(fgx_svcaddr_equal(&a, &b));
    cr_assert(fgx_svcaddr_overlap(&a, &b));
    cr_assert_eq(P("10.0.0.2:80", 0).edge, FGX_EDGE_DEFAULT);
    cr_assert_str_eq(fgx_edge_name(FGX_EDGE_TCP), "tcp");
    cr_assert_str_eq(fgx_edge_name(FGX_EDGE_DEFAULT), "");
    static const char *const bad[] = {
        "10.0.0.2:80,quic",     "10.0.0.2:80,tls,tcp",   "10.0.0.2:80,",   "10.0.0.2:80,to=0",
        "10.0.0.2:80,to=65536", "10.0.0.2:80,to=1,to=2", "10.0.0.2:80,TLS"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        why = NULL;
        cr_expect_eq(fgx_svcaddr_parse(bad[i], 80, &b, &why), -EINVAL, "\"%s\" accepted", bad[i]);
        cr_expect_not_null(why, "\"%s\" refused without a reason", bad[i]);
    }
    /* the team's proxy is one address and port, no edge */
    cr_assert_eq(ctl_ext_to_parse("10.0.0.2:9000,tls", &b, &why), -EINVAL);
}

Test(svcaddr, edges_travel_to_the_workers_and_their_index)
{
    struct fgx_svcaddr addrs[2] = {P("10.0.0.2:8080,tcp", 0), P("10.0.0.2:8443,tls,to=8080", 0)};
    struct fgx_dp_service svc = {
        .id = 4, .ipproto = IPPROTO_TCP, .port = 8080, .addrs = addrs, .naddrs = 2};
    struct fgx_dp_msg m = {.type = FGX_DP_RULESET}, back;
    const struct fgx_waddr *wa = NULL;
    struct fgx_wcfg *c = NULL;
    uint8_t ip[4] = {10, 0, 0, 2};
    void *buf;
    size_t len;

    svc.addr = addrs[0].cidr;
    m.u.ruleset.generation = 9;
    m.u.ruleset.nservices = 1;
    m.u.ruleset.services = &svc;
    cr_assert_eq(fgx_dp_encode(&m, &buf, &len), 0);
    cr_assert_eq(fgx_dp_decode(buf, len, &back), 0);
    free(buf);
    cr_assert_eq(back.u.ruleset.services[0].addrs[0].edge, FGX_EDGE_TCP);
    cr_assert_eq(back.u.ruleset.services[0].addrs[0].to_port, 0);
    cr_assert_eq(back.u.ruleset.services[0].addrs[1].edge, FGX_EDGE_TLS);
    cr_assert_eq(back.u.ruleset.services[0].addrs[1].to_port, 8080);
    cr_assert_eq(fgx_wcfg_build(&back.u.ruleset, NULL, &c), 0);
    cr_assert_not_null(fgx_wcfg_lookup_addr(c, IPPROTO_TCP, 4, ip, 8443, &wa));
    cr_assert(wa != NULL && wa->edge == FGX_EDGE_TLS && wa->to_port == 8080);
    cr_assert_not_null(fgx_wcfg_lookup_addr(c, IPPROTO_TCP, 4, ip, 8080, &wa));
    cr_assert(wa->edge == FGX_EDGE_TCP && wa->to_port == 0);
    fgx_wcfg_unref(c);
    fgx_dp_msg_release(&back);
}
