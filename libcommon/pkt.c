/* Decode stage of the data path: raw IP packet -> struct fgx_pkt. Hands on to classification
 * (which service, which direction) and to the flow table. Every length is checked against the
 * buffer before it is read, so a malformed packet is an error code, never a crash. */
#include "fgx/pkt.h"

#include <errno.h>
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
    }
    p->sport = rd16(b + off);
    p->dport = rd16(b + off + 2);
    p->payload = b + off + hl;
    p->payload_len = p->l3_len - off - hl;
    return 0;
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
