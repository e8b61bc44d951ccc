/* Unit tests for the decode stage (libcommon/pkt.c). */
#include <criterion/criterion.h>

#include <errno.h>
#include <string.h>

#include <netinet/in.h>

#include "fgx/pkt.h"

static size_t v4_tcp(uint8_t *b, const char *payload)
{
    size_t plen = strlen(payload), tot = 20 + 20 + plen;

    memset(b, 0, 40);
    b[0] = 0x45;
    b[2] = (uint8_t)(tot >> 8);
    b[3] = (uint8_t)tot;
    b[8] = 64;
    b[9] = IPPROTO_TCP;
    memcpy(b + 12, (uint8_t[]){10, 0, 0, 1}, 4);
    memcpy(b + 16, (uint8_t[]){10, 0, 0, 2}, 4);
    b[20] = 0x9c; /* sport 40000 */
    b[21] = 0x40;
    b[23] = 80;
    b[24] = 0x11; b[25] = 0x22; b[26] = 0x33; b[27] = 0x44;
    b[31] = 7;
    b[32] = 5 << 4;
    b[33] = 0x18; /* PSH|ACK */
    memcpy(b + 40, payload, plen);
    return tot;
}

static size_t v6_udp(uint8_t *b, const char *payload, bool with_ext)
{
    size_t plen = strlen(payload), off = 40, l4len = 8 + plen;

    memset(b, 0, 48 + 8);
    b[0] = 0x60;
    b[6] = with_ext ? IPPROTO_DSTOPTS : IPPROTO_UDP;
    b[7] = 64;
    b[8] = 0xfd;
    b[23] = 1;
    b[24] = 0xfd;
    b[39] = 2;
    if (with_ext) {
        b[40] = IPPROTO_UDP;
        b[41] = 0; /* 8 bytes */
        off = 48;
    }
    b[off] = 0x30; b[off + 1] = 0x39; /* 12345 */
    b[off + 2] = 0x00; b[off + 3] = 53;
    b[off + 4] = (uint8_t)(l4len >> 8);
    b[off + 5] = (uint8_t)l4len;
    memcpy(b + off + 8, payload, plen);
    b[4] = (uint8_t)((off - 40 + l4len) >> 8);
    b[5] = (uint8_t)(off - 40 + l4len);
    return off + l4len;
}

Test(pkt, ipv4_tcp)
{
    uint8_t b[128];
    size_t n = v4_tcp(b, "hello");
    struct fgx_pkt p;

    cr_assert_eq(fgx_pkt_decode(b, n, &p), 0);
    cr_assert_eq(p.family, 4);
    cr_assert_eq(p.ipproto, IPPROTO_TCP);
    cr_assert_eq(p.sport, 40000);
    cr_assert_eq(p.dport, 80);
    cr_assert_eq(p.seq, 0x11223344u);
    cr_assert_eq(p.ack, 7u);
    cr_assert_eq(p.tcp_flags, FGX_TCP_PSH | FGX_TCP_ACK);
    cr_assert_eq(p.saddr[3], 1);
    cr_assert_eq(p.daddr[3], 2);
    cr_assert_eq(p.payload_len, 5);
    cr_assert_eq(memcmp(p.payload, "hello", 5), 0);
}

Test(pkt, ipv4_trailing_padding_trimmed)
{
    uint8_t b[128];
    size_t n = v4_tcp(b, "hi");
    struct fgx_pkt p;

    memset(b + n, 0xaa, 6); /* link-layer padding beyond the IP total length */
    cr_assert_eq(fgx_pkt_decode(b, n + 6, &p), 0);
    cr_assert_eq(p.payload_len, 2);
}

Test(pkt, ipv6_udp_with_extension_header)
{
    uint8_t b[128];
    size_t n = v6_udp(b, "query", true);
    struct fgx_pkt p;

    cr_assert_eq(fgx_pkt_decode(b, n, &p), 0);
    cr_assert_eq(p.family, 6);
    cr_assert_eq(p.ipproto, IPPROTO_UDP);
    cr_assert_eq(p.sport, 12345);
    cr_assert_eq(p.dport, 53);
    cr_assert_eq(p.saddr[15], 1);
    cr_assert_eq(p.daddr[15], 2);
    cr_assert_eq(p.payload_len, 5);
    cr_assert_eq(memcmp(p.payload, "query", 5), 0);
}

Test(pkt, truncated_by_copy_range)
{
    uint8_t b[128];
    size_t n = v4_tcp(b, "0123456789");
    struct fgx_pkt p;

    cr_assert_eq(fgx_pkt_decode(b, n - 4, &p), -EMSGSIZE);
    n = v6_udp(b, "0123456789", false);
    cr_assert_eq(fgx_pkt_decode(b, n - 1, &p), -EMSGSIZE);
}

Test(pkt, truncated_headers_are_malformed)
{
    uint8_t b[128];
    size_t n = v4_tcp(b, ""), i;
    struct fgx_pkt p;

    /* IP total length claiming only part of the TCP header */
    b[3] = 30;
    cr_assert_eq(fgx_pkt_decode(b, n, &p), -EINVAL);
    /* every prefix shorter than an IP header */
    v4_tcp(b, "");
    for (i = 0; i < 20; i++)
        cr_assert_neq(fgx_pkt_decode(b, i, &p), 0, "prefix %zu", i);
    /* TCP data offset beyond the packet */
    v4_tcp(b, "");
    b[32] = 15 << 4;
    cr_assert_eq(fgx_pkt_decode(b, n, &p), -EINVAL);
    /* bad version */
    v4_tcp(b, "");
    b[0] = 0x55;
    cr_assert_eq(fgx_pkt_decode(b, n, &p), -EINVAL);
    /* UDP length disagreeing with the IP length */
    n = v6_udp(b, "abc", false);
    b[45] = 9;
    cr_assert_eq(fgx_pkt_decode(b, n, &p), -EINVAL);
}

Test(pkt, fragments_refused)
{
    uint8_t b[128];
    size_t n = v4_tcp(b, "abc");
    struct fgx_pkt p;

    b[6] = 0x20; /* more fragments */
    cr_assert_eq(fgx_pkt_decode(b, n, &p), -ENOTSUP);
    b[6] = 0x00;
    b[7] = 0x10; /* offset 16 */
    cr_assert_eq(fgx_pkt_decode(b, n, &p), -ENOTSUP);
    b[7] = 0x00;
    b[6] = 0x40; /* don't fragment: fine */
    cr_assert_eq(fgx_pkt_decode(b, n, &p), 0);

    n = v6_udp(b, "abc", true);
    b[6] = IPPROTO_FRAGMENT;
    cr_assert_eq(fgx_pkt_decode(b, n, &p), -ENOTSUP);
}

Test(pkt, other_protocols)
{
    uint8_t b[128];
    size_t n = v4_tcp(b, "abc");
    struct fgx_pkt p;

    b[9] = IPPROTO_ICMP;
    cr_assert_eq(fgx_pkt_decode(b, n, &p), -EPROTONOSUPPORT);
}

/* Reference packets built by scapy, checksums and all: the check is compared against an
 * implementation other than its own. Odd payload length (9) exercises the trailing byte. */
static const uint8_t v4_tcp_good[] = {
    0x45, 0x00, 0x00, 0x31, 0x00, 0x01, 0x00, 0x00, 0x40, 0x06, 0x66, 0xc4, 0x0a, 0x00, 0x00,
    0x01, 0x0a, 0x00, 0x00, 0x02, 0x9c, 0x40, 0x00, 0x50, 0x11, 0x22, 0x33, 0x44, 0x00, 0x00,
    0x00, 0x07, 0x50, 0x18, 0x20, 0x00, 0xef, 0x75, 0x00, 0x00, 0x65, 0x76, 0x69, 0x6c, 0x31,
    0x33, 0x33, 0x37, 0x78};
static const uint8_t v6_udp_good[] = {
    0x60, 0x00, 0x00, 0x00, 0x00, 0x0d, 0x11, 0x40, 0xfd, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0xfd, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x30, 0x39, 0x00, 0x35, 0x00,
    0x0d, 0x85, 0x79, 0x71, 0x75, 0x65, 0x72, 0x79};
static const uint8_t v6_tcp_good[] = {
    0x60, 0x00, 0x00, 0x00, 0x00, 0x19, 0x06, 0x40, 0xfd, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0xfd, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x9c, 0x40, 0x00, 0x50, 0x00,
    0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x02, 0x50, 0x10, 0x20, 0x00, 0xb5, 0x65, 0x00, 0x00,
    0x68, 0x65, 0x6c, 0x6c, 0x6f};

static int csum_of(const uint8_t *ref, size_t n, size_t flip)
{
    uint8_t b[128];
    struct fgx_pkt p;

    memcpy(b, ref, n);
    if (flip < n)
        b[flip] ^= 0x01;
    cr_assert_eq(fgx_pkt_decode(b, n, &p), 0);
    return fgx_pkt_csum_check(&p);
}

Test(pkt, checksum_right_is_accepted)
{
    cr_assert_eq(csum_of(v4_tcp_good, sizeof(v4_tcp_good), SIZE_MAX), 0);
    cr_assert_eq(csum_of(v6_udp_good, sizeof(v6_udp_good), SIZE_MAX), 0);
    cr_assert_eq(csum_of(v6_tcp_good, sizeof(v6_tcp_good), SIZE_MAX), 0);
}

Test(pkt, checksum_wrong_is_refused)
{
    /* the last payload byte (odd position), a payload byte, the checksum, an address (the
     * pseudo-header) and a port */
    cr_assert_eq(csum_of(v4_tcp_good, sizeof(v4_tcp_good), sizeof(v4_tcp_good) - 1), -EBADMSG);
    cr_assert_eq(csum_of(v4_tcp_good, sizeof(v4_tcp_good), 40), -EBADMSG);
    cr_assert_eq(csum_of(v4_tcp_good, sizeof(v4_tcp_good), 37), -EBADMSG);
    cr_assert_eq(csum_of(v4_tcp_good, sizeof(v4_tcp_good), 15), -EBADMSG);
    cr_assert_eq(csum_of(v6_udp_good, sizeof(v6_udp_good), 50), -EBADMSG);
    cr_assert_eq(csum_of(v6_udp_good, sizeof(v6_udp_good), 39), -EBADMSG);
    cr_assert_eq(csum_of(v6_tcp_good, sizeof(v6_tcp_good), 41), -EBADMSG);
}

Test(pkt, udp_zero_checksum_is_none_over_ipv4_only)
{
    uint8_t b[128];
    size_t n;
    struct fgx_pkt p;

    n = v6_udp(b, "query", false); /* built with no checksum */
    cr_assert_eq(fgx_pkt_decode(b, n, &p), 0);
    cr_assert_eq(fgx_pkt_csum_check(&p), -EBADMSG);
    memset(b, 0, sizeof(b));
    b[0] = 0x45;
    b[3] = 20 + 8 + 2;
    b[9] = IPPROTO_UDP;
    b[12] = 10;
    b[16] = 10;
    b[23] = 53;
    b[25] = 10; /* UDP length; checksum left zero */
    cr_assert_eq(fgx_pkt_decode(b, 30, &p), 0);
    cr_assert_eq(fgx_pkt_csum_check(&p), 0);
}

/* IPv4 + TCP with ipopt (ipolen bytes, a multiple of 4) and tcpopt (tcpolen, a multiple of 4). */
static size_t v4_tcp_opts(uint8_t *b, const uint8_t *ipopt, size_t ipolen, const uint8_t *tcpopt,
                          size_t tcpolen, const char *payload)
{
    size_t plen = strlen(payload), ihl = 20 + ipolen, thl = 20 + tcpolen, tot = ihl + thl + plen;

    memset(b, 0, ihl + thl);
    b[0] = (uint8_t)(0x40 | (ihl / 4));
    b[2] = (uint8_t)(tot >> 8);
    b[3] = (uint8_t)tot;
    b[8] = 64;
    b[9] = IPPROTO_TCP;
    memcpy(b + 12, (uint8_t[]){10, 0, 0, 1}, 4);
    memcpy(b + 16, (uint8_t[]){10, 0, 0, 2}, 4);
    if (ipolen > 0)
        memcpy(b + 20, ipopt, ipolen);
    b[ihl + 3] = 80;
    b[ihl + 12] = (uint8_t)((thl / 4) << 4);
    b[ihl + 13] = 0x10;
    if (tcpolen > 0)
        memcpy(b + ihl + 20, tcpopt, tcpolen);
    memcpy(b + ihl + thl, payload, plen);
    return tot;
}

Test(pkt, tcp_timestamp_signature_and_urgent_pointer)
{
    uint8_t b[256];
    struct fgx_pkt p;
    static const uint8_t ts[] = {1, 1, 8, 10, 0, 0, 0, 5, 0, 0, 0, 9};
    static const uint8_t md5[20] = {19, 18};
    static const uint8_t broken[] = {1, 8, 10, 0}; /* a timestamp that does not fit: ignored */
    size_t n;

    n = v4_tcp_opts(b, NULL, 0, ts, sizeof(ts), "x");
    b[20 + 13] |= FGX_TCP_URG;
    b[20 + 18] = 0x01;
    b[20 + 19] = 0x02;
    cr_assert_eq(fgx_pkt_decode(b, n, &p), 0);
    cr_assert_eq(p.tcpopt, FGX_TCPOPT_TS);
    cr_assert_eq(p.tsval, 5);
    cr_assert_eq(p.tsecr, 9);
    cr_assert_eq(p.urg_ptr, 0x0102);
    cr_assert(p.tcp_flags & FGX_TCP_URG);
    cr_assert_eq(p.payload_len, 1);

    n = v4_tcp_opts(b, NULL, 0, md5, sizeof(md5), "x");
    cr_assert_eq(fgx_pkt_decode(b, n, &p), 0);
    cr_assert_eq(p.tcpopt, FGX_TCPOPT_SIG);
    n = v4_tcp_opts(b, NULL, 0, (const uint8_t[]){29, 4, 0, 0}, 4, "x"); /* TCP-AO */
    cr_assert_eq(fgx_pkt_decode(b, n, &p), 0);
    cr_assert_eq(p.tcpopt, FGX_TCPOPT_SIG);
    n = v4_tcp_opts(b, NULL, 0, broken, sizeof(broken), "x");
    cr_assert_eq(fgx_pkt_decode(b, n, &p), 0);
    cr_assert_eq(p.tcpopt, 0);
    /* An EOL ends the list: what follows is not an option. */
    n = v4_tcp_opts(b, NULL, 0, (const uint8_t[]){0, 19, 2, 0}, 4, "x");
    cr_assert_eq(fgx_pkt_decode(b, n, &p), 0);
    cr_assert_eq(p.tcpopt, 0);
}

Test(pkt, ipv4_options_the_receiver_may_discard)
{
    uint8_t b[256];
    struct fgx_pkt p;
    static const uint8_t lsrr[8] = {131, 7, 4, 10, 0, 0, 9, 0};
    static const uint8_t ssrr[8] = {137, 7, 4, 10, 0, 0, 9, 0};
    static const uint8_t nops[4] = {1, 1, 1, 0};
    size_t n;

    n = v4_tcp_opts(b, lsrr, sizeof(lsrr), NULL, 0, "data");
    cr_assert_eq(fgx_pkt_decode(b, n, &p), 0);
    cr_assert_eq(p.ipdiscard, FGX_IPD_OPTS);
    cr_assert_eq(p.payload_len, 4);
    n = v4_tcp_opts(b, ssrr, sizeof(ssrr), NULL, 0, "data");
    cr_assert_eq(fgx_pkt_decode(b, n, &p), 0);
    cr_assert_eq(p.ipdiscard, FGX_IPD_OPTS);
    n = v4_tcp_opts(b, nops, sizeof(nops), NULL, 0, "data");
    cr_assert_eq(fgx_pkt_decode(b, n, &p), 0);
    cr_assert_eq(p.ipdiscard, 0);
    n = v4_tcp(b, "data");
    cr_assert_eq(fgx_pkt_decode(b, n, &p), 0);
    cr_assert_eq(p.ipdiscard, 0);
}

/* IPv6 + TCP ("x") behind the extension headers in ext (extlen bytes, the first one's type
 * first_nh, each header's next-header byte already set by the caller but the last's). */
static size_t v6_tcp_ext(uint8_t *b, uint8_t first_nh, const uint8_t *ext, size_t extlen,
                         size_t last_off)
{
    size_t plen = extlen + 20 + 1;

    memset(b, 0, 40 + plen);
    b[0] = 0x60;
    b[4] = (uint8_t)(plen >> 8);
    b[5] = (uint8_t)plen;
    b[6] = extlen > 0 ? first_nh : IPPROTO_TCP;
    b[7] = 64;
    b[8] = 0xfd;
    b[23] = 1;
    b[24] = 0xfd;
    b[39] = 2;
    memcpy(b + 40, ext, extlen);
    if (extlen > 0)
        b[40 + last_off] = IPPROTO_TCP;
    b[40 + extlen + 3] = 80;
    b[40 + extlen + 12] = 5 << 4;
    b[40 + extlen + 13] = 0x10;
    b[40 + extlen + 20] = 'x';
    return 40 + plen;
}

Test(pkt, ipv6_extension_headers_the_receiver_may_discard)
{
    uint8_t b[256];
    struct fgx_pkt p;
    /* next header (set by the builder), length 0 (8 bytes), then 6 bytes of options */
    static const uint8_t pad1[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    static const uint8_t padn[8] = {0, 0, 1, 4, 0, 0, 0, 0};
    static const uint8_t padn_dirty[8] = {0, 0, 1, 4, 0, 7, 0, 0};
    static const uint8_t unknown_discard[8] = {0, 0, 0x7e, 4, 0, 0, 0, 0}; /* top bits 01 */
    static const uint8_t unknown_skip[8] = {0, 0, 0x1e, 4, 0, 0, 0, 0};    /* top bits 00 */
    static const uint8_t too_long[8] = {0, 0, 1, 9, 0, 0, 0, 0};
    static const uint8_t rh0[24] = {0, 2, 0, 1}; /* type 0, one segment left */
    uint8_t two[16];
    size_t n;

    n = v6_tcp_ext(b, IPPROTO_DSTOPTS, pad1, 8, 0);
    cr_assert_eq(fgx_pkt_decode(b, n, &p), 0);
    cr_assert_eq(p.ipdiscard, 0);
    cr_assert_eq(p.payload_len, 1);
    n = v6_tcp_ext(b, IPPROTO_HOPOPTS, padn, 8, 0);
    cr_assert_eq(fgx_pkt_decode(b, n, &p), 0);
    cr_assert_eq(p.ipdiscard, 0);
    n = v6_tcp_ext(b, IPPROTO_DSTOPTS, padn_dirty, 8, 0);
    cr_assert_eq(fgx_pkt_decode(b, n, &p), 0);
    cr_assert_eq(p.ipdiscard, FGX_IPD_EXTOPT);
    n = v6_tcp_ext(b, IPPROTO_DSTOPTS, unknown_discard, 8, 0);
    cr_assert_eq(fgx_pkt_decode(b, n, &p), 0);
    cr_assert_eq(p.ipdiscard, FGX_IPD_EXTOPT);
    n = v6_tcp_ext(b, IPPROTO_HOPOPTS, unknown_discard, 8, 0);
    cr_assert_eq(fgx_pkt_decode(b, n, &p), 0);
    cr_assert_eq(p.ipdiscard, FGX_IPD_EXTOPT);
    /* Even an option the receiver would skip: honest TCP carries none. */
    n = v6_tcp_ext(b, IPPROTO_DSTOPTS, unknown_skip, 8, 0);
    cr_assert_eq(fgx_pkt_decode(b, n, &p), 0);
    cr_assert_eq(p.ipdiscard, FGX_IPD_EXTOPT);
    n = v6_tcp_ext(b, IPPROTO_DSTOPTS, too_long, 8, 0);
    cr_assert_eq(fgx_pkt_decode(b, n, &p), 0);
    cr_assert_eq(p.ipdiscard, FGX_IPD_EXTOPT);
    n = v6_tcp_ext(b, IPPROTO_ROUTING, rh0, sizeof(rh0), 0);
    cr_assert_eq(fgx_pkt_decode(b, n, &p), 0);
    cr_assert_eq(p.ipdiscard, FGX_IPD_RTHDR);
    /* A hop-by-hop header after another header: Linux refuses it. */
    memcpy(two, pad1, 8);
    memcpy(two + 8, pad1, 8);
    two[0] = IPPROTO_HOPOPTS;
    n = v6_tcp_ext(b, IPPROTO_DSTOPTS, two, sizeof(two), 8);
    cr_assert_eq(fgx_pkt_decode(b, n, &p), 0);
    cr_assert_eq(p.ipdiscard, FGX_IPD_EXTOPT);
}

/* RFC 1071's example (its section 3): the words 0001 f203 f4f5 f6f7 sum to ddf2; the header
 * carries the complement. In parts, an odd part padded, as built headers add them. */
Test(pkt, internet_checksum_in_parts)
{
    static const uint8_t w[] = {0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7};
    uint32_t s = fgx_csum_add(0, w, 4);

    s = fgx_csum_add(s, w + 4, 4);
    cr_assert_eq(fgx_csum_fold(s), (uint16_t)~0xddf2);
    cr_assert_eq(fgx_csum_fold(fgx_csum_add(0, w, sizeof(w))), (uint16_t)~0xddf2);
    /* an odd length: the last byte is the high half of a word */
    cr_assert_eq(fgx_csum_fold(fgx_csum_add(0, (const uint8_t[]){0x12}, 1)), (uint16_t)~0x1200);
}

/* A sum of more than 2^32 / 0xffff words (a jumbo payload in many parts) still folds right:
 * 0xffff words each add nothing in one's complement. */
Test(pkt, internet_checksum_never_overflows)
{
    static uint8_t b[70000];
    uint32_t s = 0;

    memset(b, 0xff, sizeof(b));
    for (int i = 0; i < 100; i++)
        s = fgx_csum_add(s, b, sizeof(b));
    s = fgx_csum_add(s, (const uint8_t[]){0x00, 0x01}, 2);
    cr_assert_eq(fgx_csum_fold(s), (uint16_t)~0x0001);
}
