/* Unit tests for proxyworker's per-source accounting (px_src.c): the table's counts against a
 * plain reference under random takes and puts (deletion with backward shifts must keep every
 * other source findable), the limit, IPv6 grouped by /64, and the memory-derived default
 * connection limit. */
#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>

#include "proxyworker/px.h"

static struct sockaddr_storage v4(uint32_t a)
{
    struct sockaddr_storage ss;
    struct sockaddr_in *s = (struct sockaddr_in *)&ss;

    memset(&ss, 0, sizeof(ss));
    s->sin_family = AF_INET;
    s->sin_addr.s_addr = htonl(a);
    s->sin_port = htons((uint16_t)(a * 7));
    return ss;
}

static struct sockaddr_storage v6(const char *txt)
{
    struct sockaddr_storage ss;
    struct sockaddr_in6 *s = (struct sockaddr_in6 *)&ss;

    memset(&ss, 0, sizeof(ss));
    s->sin6_family = AF_INET6;
    cr_assert_eq(inet_pton(AF_INET6, txt, &s->sin6_addr), 1);
    return ss;
}

Test(px_src, the_limit_is_per_source)
{
    struct px_src_table t;
    struct sockaddr_storage a = v4(0x0a000001), b = v4(0x0a000002);

    cr_assert_eq(px_src_init(&t, 64), 0);
    cr_assert(px_src_take(&t, &a, 0, 2));
    cr_assert(px_src_take(&t, &a, 0, 2));
    cr_assert_not(px_src_take(&t, &a, 0, 2), "a third from the same address");
    cr_assert(px_src_take(&t, &b, 0, 2), "another address is not held back");
    cr_assert_eq(px_src_count(&t, &a, 0), 2);
    px_src_put(&t, &a, 0);
    cr_assert(px_src_take(&t, &a, 0, 2), "room again after a close");
    cr_assert(px_src_take(&t, &a, 0, 0), "0: no limit");
    cr_assert_eq(px_src_count(&t, &a, 0), 3);
    cr_assert(px_src_take(&t, &b, 1, 1), "another thread counts its own");
    cr_assert_not(px_src_take(&t, &b, 1, 1));
    cr_assert_eq(px_src_count(&t, &b, 0), 1);
    cr_assert_eq(px_src_count(&t, &b, 1), 1);
    px_src_release(&t);
}

Test(px_src, ipv6_counts_by_64)
{
    struct px_src_table t;
    struct sockaddr_storage a = v6("2001:db8:1:2::1"), b = v6("2001:db8:1:2:ffff:1:2:3"),
                            c = v6("2001:db8:1:3::1"), m = v6("::ffff:10.0.0.1");
    struct sockaddr_storage four = v4(0x0a000001);

    cr_assert_eq(px_src_init(&t, 64), 0);
    cr_assert(px_src_take(&t, &a, 0, 2));
    cr_assert(px_src_take(&t, &b, 0, 2), "same /64, second");
    cr_assert_not(px_src_take(&t, &a, 0, 2), "same /64, third");
    cr_assert(px_src_take(&t, &c, 0, 2), "the next /64 is another source");
    cr_assert(px_src_take(&t, &four, 0, 1), "IPv4 is not confused with any IPv6 prefix");
    cr_assert(px_src_take(&t, &m, 0, 1));
    cr_assert_eq(px_src_count(&t, &b, 0), 2);
    px_src_release(&t);
}

/* Random takes and puts over few enough sources that probe runs overlap and wrap: after each
 * step every source's count is what the reference says. */
Test(px_src, counts_stay_exact_through_deletions)
{
    enum { NSRC = 40, STEPS = 20000 };
    struct px_src_table t;
    unsigned ref[NSRC] = {0};
    struct sockaddr_storage src[NSRC];
    unsigned i, k, live = 0;

    srand(7);
    cr_assert_eq(px_src_init(&t, 24), 0); /* 64 slots for up to 40 sources */
    for (i = 0; i < NSRC; i++)
        src[i] = i % 2 ? v4(0xc0a80000u + i * 977u) : v6(i % 4 ? "fd00::1" : "fd00:0:0:9::1");
    /* Distinct v6 sources too: vary the /64. */
    for (i = 0; i < NSRC; i += 2)
        ((struct sockaddr_in6 *)&src[i])->sin6_addr.s6_addr[5] = (uint8_t)i;
    for (k = 0; k < STEPS; k++) {
        i = (unsigned)rand() % NSRC;
        if (ref[i] > 0 && (rand() & 1)) {
            px_src_put(&t, &src[i], 0);
            if (--ref[i] == 0)
                live--;
        } else if (live < 30 || ref[i] > 0) {
            cr_assert(px_src_take(&t, &src[i], 0, 0));
            if (ref[i]++ == 0)
                live++;
        }
        if (k % 97 == 0)
            for (unsigned j = 0; j < NSRC; j++)
                cr_assert_eq(px_src_count(&t, &src[j], 0), ref[j], "step %u source %u", k, j);
    }
    for (i = 0; i < NSRC; i++)
        cr_assert_eq(px_src_count(&t, &src[i], 0), ref[i]);
    px_src_release(&t);
}

Test(px_src, the_default_limit_follows_memory_and_descriptors)
{
    uint64_t gib = 1ull << 30;

    /* 1/8 of 8 GiB at 24 KiB each */
    cr_assert_eq(px_max_conns_default(8 * gib, 0), (unsigned)(gib / PX_CONN_COST));
    cr_assert_eq(px_max_conns_default(16 * gib, 0), (unsigned)(2 * gib / PX_CONN_COST));
    cr_assert_eq(px_max_conns_default(64ull << 20, 0), PX_MAX_CONNS_MIN, "a small box");
    cr_assert_eq(px_max_conns_default(1ull << 50, 0), PX_MAX_CONNS_MAX);
    cr_assert_eq(px_max_conns_default(8 * gib, 4096), (4096 - 64) / 2,
                 "two descriptors a connection");
    cr_assert_eq(px_max_conns_default(8 * gib, 1u << 20), (unsigned)(gib / PX_CONN_COST));
}

Test(px_src, same_source_is_the_address_or_the_64)
{
    struct sockaddr_storage a = v6("2001:db8:1:2::1"), b = v6("2001:db8:1:2:ffff::9"),
                            c = v6("2001:db8:1:3::1"), d = v4(0x0a000001), e = v4(0x0a000001),
                            f = v4(0x0a000002);

    cr_assert(px_src_same(&a, &b));
    cr_assert_not(px_src_same(&a, &c));
    cr_assert(px_src_same(&d, &e), "the port does not matter");
    ((struct sockaddr_in *)&e)->sin_port = 1;
    cr_assert(px_src_same(&d, &e));
    cr_assert_not(px_src_same(&d, &f));
    cr_assert_not(px_src_same(&a, &d));
}
