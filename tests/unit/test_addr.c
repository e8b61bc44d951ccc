/* Unit tests for libcommon/addr.c: parsing, formatting and matching of service addresses. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

#include "fgx/addr.h"

static void roundtrip(const char *in, const char *canon, int family, int prefix)
{
    struct fgx_cidr c;
    char buf[64];

    cr_assert_eq(fgx_cidr_parse(in, &c), 0, "parse %s", in);
    cr_assert_eq(c.family, family, "family of %s", in);
    cr_assert_eq(c.prefix, prefix, "prefix of %s", in);
    cr_assert_eq(fgx_cidr_format(&c, buf, sizeof(buf)), 0, "format %s", in);
    cr_assert_str_eq(buf, canon);
}

Test(addr, parse_format_v4)
{
    roundtrip("10.0.0.2", "10.0.0.2", 4, 32);
    roundtrip("10.0.0.2/32", "10.0.0.2", 4, 32);
    roundtrip("10.0.0.0/24", "10.0.0.0/24", 4, 24);
    roundtrip("10.0.0.0/7", "10.0.0.0/7", 4, 7);
    roundtrip("0.0.0.0/0", "0.0.0.0/0", 4, 0);
}

Test(addr, parse_format_v6)
{
    roundtrip("fd00::1", "fd00::1", 6, 128);
    roundtrip("FD00:0:0:0:0:0:0:1/128", "fd00::1", 6, 128);
    roundtrip("fd00::/64", "fd00::/64", 6, 64);
    roundtrip("::/0", "::/0", 6, 0);
    roundtrip("2001:db8::/33", "2001:db8::/33", 6, 33);
}

/* ::ffff:a.b.c.d is how a dual-stack socket shows an IPv4 peer; its packets are IPv4, so a
 * service or --allow entry written that way must be the IPv4 address, or it never matches. */
Test(addr, v4mapped_is_ipv4)
{
    struct fgx_cidr c;
    const uint8_t a[4] = {10, 77, 0, 1}, b[4] = {10, 78, 0, 1};

    roundtrip("::ffff:10.233.0.1", "10.233.0.1", 4, 32);
    roundtrip("::FFFF:0a4d:0001", "10.77.0.1", 4, 32);
    roundtrip("::ffff:10.233.0.1/128", "10.233.0.1", 4, 32);
    roundtrip("::ffff:10.0.0.0/104", "10.0.0.0/8", 4, 8);
    roundtrip("::ffff:10.77.0.0/120", "10.77.0.0/24", 4, 24);
    roundtrip("::ffff:0.0.0.0/96", "0.0.0.0/0", 4, 0);
    /* Wider than the mapped block: it covers real IPv6 addresses too, so it stays IPv6. */
    roundtrip("::/80", "::/80", 6, 80);
    roundtrip("::fffe:0:0/95", "::fffe:0:0/95", 6, 95);
    /* Host bits are still checked, before the mapping. */
    cr_assert_eq(fgx_cidr_parse("::ffff:10.0.0.1/104", &c), -EINVAL);
    cr_assert_eq(fgx_cidr_parse("::ffff:10.77.0.1", &c), 0);
    cr_assert(fgx_cidr_contains(&c, 4, a));
    cr_assert(!fgx_cidr_contains(&c, 4, b));
    /* Not mapped: ::10.0.0.1 (deprecated compatible form), and the NAT64 prefix. */
    roundtrip("::10.0.0.1", "::10.0.0.1", 6, 128);
    roundtrip("64:ff9b::10.0.0.1", "64:ff9b::a00:1", 6, 128);
}

Test(addr, empty_is_any)
{
    struct fgx_cidr c;
    char buf[8] = "x";

    memset(&c, 0xff, sizeof(c));
    cr_assert_eq(fgx_cidr_parse("", &c), 0);
    cr_assert_eq(c.family, 0);
    cr_assert_eq(fgx_cidr_parse(NULL, &c), 0);
    cr_assert_eq(c.family, 0);
    cr_assert_eq(c.prefix, 0);
    cr_assert_eq(fgx_cidr_format(&c, buf, sizeof(buf)), 0);
    cr_assert_str_eq(buf, "");
}

Test(addr, junk_refused)
{
    static const char *const bad[] = {
        "10.0.0.1/24", /* host bits set */
        "fd00::1/64",  /* host bits set */
        "10.0.0.0/33",
        "fd00::/129",
        "10.0.0.0/",
        "10.0.0.0/-1",
        "10.0.0.0/+8",
        "10.0.0.0/ 8",
        "10.0.0.0/8x",
        "10.0.0.0/0x8",
        "10.0.0.0/0008",
        "10.0.0",
        "10.0.0.256",
        "1.2.3.4.5",
        " 10.0.0.1",
        "10.0.0.1 ",
        "hello",
        "/24",
        "::g",
        "fd00::/64/64",
        "10.0.0.0/24/24",
        "fd00:::1",
        "1.2.3.4/32/",
        "aaaa:bbbb:cccc:dddd:eeee:ffff:aaaa:bbbb:cccc",
    };
    struct fgx_cidr c;
    size_t i;

    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        cr_assert_eq(fgx_cidr_parse(bad[i], &c), -EINVAL, "accepted \"%s\"", bad[i]);
}

Test(addr, format_small_buffer_and_bad_struct)
{
    struct fgx_cidr c;
    char buf[8];

    cr_assert_eq(fgx_cidr_parse("192.168.100.0/24", &c), 0);
    cr_assert_eq(fgx_cidr_format(&c, buf, sizeof(buf)), -ENOSPC);
    c.prefix = 33;
    cr_assert_eq(fgx_cidr_format(&c, buf, sizeof(buf)), -EINVAL);
    c.family = 5;
    c.prefix = 0;
    cr_assert_eq(fgx_cidr_format(&c, buf, sizeof(buf)), -EINVAL);
}

static bool has(const char *cidr, const char *ip)
{
    struct fgx_cidr c;
    uint8_t a[16];
    int family = strchr(ip, ':') ? 6 : 4;

    cr_assert_eq(fgx_cidr_parse(cidr, &c), 0, "parse %s", cidr);
    cr_assert_eq(inet_pton(family == 4 ? AF_INET : AF_INET6, ip, a), 1);
    return fgx_cidr_contains(&c, family, a);
}

Test(addr, contains_v4)
{
    cr_assert(has("10.0.0.0/24", "10.0.0.255"));
    cr_assert(has("10.0.0.0/24", "10.0.0.0"));
    cr_assert_not(has("10.0.0.0/24", "10.0.1.0"));
    cr_assert(has("10.0.0.2", "10.0.0.2"));
    cr_assert_not(has("10.0.0.2", "10.0.0.3"));
    cr_assert(has("0.0.0.0/0", "203.0.113.9"));
    cr_assert_not(has("0.0.0.0/0", "::1"));
    cr_assert(has("10.0.0.0/7", "11.255.255.255"));
    cr_assert_not(has("10.0.0.0/7", "12.0.0.0"));
    cr_assert_not(has("10.0.0.0/7", "9.255.255.255"));
}

Test(addr, contains_v6)
{
    cr_assert(has("fd00::/64", "fd00::abcd"));
    cr_assert_not(has("fd00::/64", "fd00:0:0:1::1"));
    cr_assert(has("fd00::1", "fd00::1"));
    cr_assert_not(has("fd00::1", "fd00::2"));
    cr_assert(has("::/0", "2001:db8::1"));
    cr_assert_not(has("::/0", "10.0.0.1"));
    cr_assert(has("2001:db8::/33", "2001:db8:7fff::1"));
    cr_assert_not(has("2001:db8::/33", "2001:db8:8000::1"));
    cr_assert_not(has("fd00::1", "10.0.0.1"));
}

Test(addr, contains_any)
{
    cr_assert(has("", "10.0.0.1"));
    cr_assert(has("", "fd00::1"));
}

Test(addr, contains_bad_input)
{
    struct fgx_cidr c;
    uint8_t a[4] = {10, 0, 0, 1};

    cr_assert_eq(fgx_cidr_parse("10.0.0.0/8", &c), 0);
    cr_assert_not(fgx_cidr_contains(&c, 5, a));
    cr_assert_not(fgx_cidr_contains(&c, 4, NULL));
    c.prefix = 40; /* corrupt: must not read past a 4-byte address */
    cr_assert_not(fgx_cidr_contains(&c, 4, a));
}
