/* Decode stage of the data path: raw IP packet -> struct fgx_pkt. Hands on to classification
 * (which service, which direction) and to the flow table. Every length is checked against the
 * buffer before it is read, so a malformed packet is an error code, never a crash. */
#include "fgx/pkt.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include <netinet/in.h>

static uint16_t rd16(const uint8_t *p)
{
    return (uint16_t)((p[0] << 8) | p[1]);
}

static uint32_t rd32(const uint8_t *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

/* The TCP options the data path acts on, parsed the way Linux parses them (tcp_parse_options):
 * EOL ends the list, NOP is one byte, any other option needs a length of at least 2 that fits,
 * else parsing stops there. */
static void decode_tcpopts(struct fgx_pkt *p, const uint8_t *o, size_t len)
{
    size_t i = 0;

    while (i < len) {
        uint8_t kind = o[i], olen;

        if (kind == 0)
            return;
        if (kind == 1) {
            i++;
            continue;
        }
        if (len - i < 2)
            return;
        olen = o[i + 1];
        if (olen < 2 || olen > len - i)
            return;
        if (kind == 8 && olen == 10) {
            p->tcpopt |= FGX_TCPOPT_TS;
            p->tsval = rd32(o + i + 2);
            p->tsecr = rd32(o + i + 6);
        } else if (kind == 19 || kind == 29) {
            /* Any length: the receiver without a key drops what it recognises as a
             * signature, and an honest segment to a service carries none. */
            p->tcpopt |= FGX_TCPOPT_SIG;
        }
        i += olen;
    }
}

static int decode_l4(struct fgx_pkt *p, uint8_t proto, size_t off)
{
    const uint8_t *b = p->l3;
    size_t hl;

    if (proto != IPPROTO_TCP && proto != IPPROTO_UDP)
        return -EPROTONOSUPPORT;
    p->ipproto = proto;
    p->l4_off = off;
    if (proto == IPPROTO_UDP) {
        size_t ulen;

        if (p->l3_len - off < 8)
            return -EINVAL;
        ulen = rd16(b + off + 4);
        /* The UDP length must agree with the IP one: a datagram claiming less would hide bytes
         * from the scan that the receiver may still see. */
        if (ulen != p->l3_len - off)
            return -EINVAL;
        hl = 8;
    } else {
        if (p->l3_len - off < 20)
            return -EINVAL;
        hl = (size_t)(b[off + 12] >> 4) * 4;
        if (hl < 20 || hl > p->l3_len - off)
            return -EINVAL;
        p->seq = rd32(b + off + 4);
        p->ack = rd32(b + off + 8);
        p->tcp_flags = b[off + 13];
        p->urg_ptr = rd16(b + off + 18);
        decode_tcpopts(p, b + off + 20, hl - 20);
    }
    p->sport = rd16(b + off);
    p->dport = rd16(b + off + 2);
    p->payload = b + off + hl;
    p->payload_len = p->l3_len - off - hl;
    return 0;
}

/* Whether IPv4 options hold anything but NOP and EOL. Linux drops source-routed packets
 * (accept_source_route 0), and any packet whose options it finds malformed, after the prerouting
 * hook; honest TCP to a service carries no options at all, so none is trusted. */
static bool v4_opts_discard(const uint8_t *o, size_t len)
{
    size_t i;

    for (i = 0; i < len; i++) {
        if (o[i] == 0)
            return false;
        if (o[i] != 1)
            return true;
    }
    return false;
}

/* Whether a hop-by-hop or destination options header (len bytes, its two fixed bytes first)
 * holds an option other than padding, or padding Linux refuses (ip6_parse_tlv: more than 7
 * bytes in a row, PadN with non-zero bytes, an option running past the header). An unknown
 * option whose type's top bits say "discard" is dropped by the receiver; known ones (router
 * alert, jumbo payload, CALIPSO, ...) have checks of their own; honest TCP carries none. */
static bool v6_opts_discard(const uint8_t *h, size_t len)
{
    size_t i = 2, pad = 0;

    while (i < len) {
        size_t olen;

        if (h[i] == 0) { /* Pad1 */
            if (++pad > 7)
                return true;
            i++;
            continue;
        }
        if (len - i < 2)
            return true;
        olen = (size_t)h[i + 1] + 2;
        if (olen > len - i)
            return true;
        if (h[i] != 1)
            return true;
        pad += olen;
        if (pad > 7)
            return true;
        for (size_t k = 2; k < olen; k++)
            if (h[i + k] != 0)
                return true;
        i += olen;
    }
    return false;
}

static int decode_v4(struct fgx_pkt *p, const uint8_t *b, size_t len)
{
    size_t ihl, tot;
    uint16_t frag;

    if (len < 20)
        return -EINVAL;
    ihl = (size_t)(b[0] & 0x0f) * 4;
    tot = rd16(b + 2);
    if (ihl < 20 || tot < ihl)
        return -EINVAL;
    if (ihl > len)
        return -EINVAL;
    if (tot > len)
        return -EMSGSIZE;
    p->family = 4;
    p->l3_len = tot;
    memcpy(p->saddr, b + 12, 4);
    memcpy(p->daddr, b + 16, 4);
    frag = rd16(b + 6);
    if ((frag & 0x2000) || (frag & 0x1fff))
        return -ENOTSUP;
    if (ihl > 20 && v4_opts_discard(b + 20, ihl - 20))
        p->ipdiscard |= FGX_IPD_OPTS;
    return decode_l4(p, b[9], ihl);
}

static int decode_v6(struct fgx_pkt *p, const uint8_t *b, size_t len)
{
    size_t plen, off;
    uint8_t nh;
    int hops;

    if (len < 40)
        return -EINVAL;
    plen = rd16(b + 4);
    if (plen == 0) /* jumbogram or nonsense: neither can be queued whole */
        return -EINVAL;
    if (40 + plen > len)
        return -EMSGSIZE;
    p->family = 6;
    p->l3_len = 40 + plen;
    memcpy(p->saddr, b + 8, 16);
    memcpy(p->daddr, b + 24, 16);
    nh = b[6];
    off = 40;
    /* Walk the extension headers a service's traffic may carry; a bounded number, so a chain
     * crafted to be long costs nothing. */
    for (hops = 0; hops < 8; hops++) {
        switch (nh) {
        case IPPROTO_HOPOPTS:
        case IPPROTO_ROUTING:
        case IPPROTO_DSTOPTS: {
            size_t elen;

            if (p->l3_len - off < 8)
                return -EINVAL;
            elen = ((size_t)b[off + 1] + 1) * 8;
            if (elen > p->l3_len - off)
                return -EINVAL;
            /* Linux refuses a hop-by-hop header anywhere but first. */
            if (nh == IPPROTO_ROUTING)
                p->ipdiscard |= FGX_IPD_RTHDR;
            else if (nh == IPPROTO_HOPOPTS && off != 40)
                p->ipdiscard |= FGX_IPD_EXTOPT;
            else if (v6_opts_discard(b + off, elen))
                p->ipdiscard |= FGX_IPD_EXTOPT;
            nh = b[off];
            off += elen;
            break;
        }
        case IPPROTO_FRAGMENT:
            return -ENOTSUP;
        default:
            return decode_l4(p, nh, off);
        }
    }
    return -EINVAL;
}

int fgx_pkt_decode(const void *buf, size_t len, struct fgx_pkt *out)
{
    const uint8_t *b = buf;

    memset(out, 0, sizeof(*out));
    out->l3 = b;
    if (len < 1)
        return -EINVAL;
    switch (b[0] >> 4) {
    case 4: return decode_v4(out, b, len);
    case 6: return decode_v6(out, b, len);
    default: return -EINVAL;
    }
}

/* One's complement sum of len bytes, folded later: 64-bit accumulation cannot overflow for any
 * IP packet (at most 64 KiB of 16-bit words). */
static uint64_t sum16(const uint8_t *b, size_t len, uint64_t acc)
{
    size_t i;

    for (i = 0; i + 1 < len; i += 2)
        acc += (uint32_t)((b[i] << 8) | b[i + 1]);
    if (len & 1)
        acc += (uint32_t)b[len - 1] << 8;
    return acc;
}

uint32_t fgx_csum_add(uint32_t sum, const void *p, size_t len)
{
    uint64_t acc = sum16(p, len, sum);

    while (acc >> 16)
        acc = (acc & 0xffff) + (acc >> 16);
    return (uint32_t)acc;
}

uint16_t fgx_csum_fold(uint32_t sum)
{
    while (sum >> 16)
        sum = (sum & 0xffff) + (sum >> 16);
    return (uint16_t)~sum;
}

int fgx_pkt_csum_check(const struct fgx_pkt *p)
{
    const uint8_t *l4 = p->l3 + p->l4_off;
    size_t l4_len = p->l3_len - p->l4_off;
    uint64_t acc = 0;

    if (p->ipproto == IPPROTO_UDP && l4[6] == 0 && l4[7] == 0)
        return p->family == 4 ? 0 : -EBADMSG;
    if (p->family == 4) {
        acc = sum16(p->l3 + 12, 8, acc); /* source and destination */
    } else {
        acc = sum16(p->saddr, 16, acc);
        acc = sum16(p->daddr, 16, acc);
    }
    acc += p->ipproto;
    acc += l4_len;
    acc = sum16(l4, l4_len, acc);
    while (acc >> 16)
        acc = (acc & 0xffff) + (acc >> 16);
    return acc == 0xffff ? 0 : -EBADMSG;
}
