/* Packet decoding for the data path: an IPv4 or IPv6 packet as NFQUEUE hands it over (no link
 * header) is turned into the few fields classification, flow tracking and reassembly need. The
 * decoder only points into the caller's buffer: nothing is copied or allocated. */
#ifndef FGX_PKT_H
#define FGX_PKT_H

#include <stddef.h>
#include <stdint.h>

#define FGX_TCP_FIN 0x01
#define FGX_TCP_SYN 0x02
#define FGX_TCP_RST 0x04
#define FGX_TCP_PSH 0x08
#define FGX_TCP_ACK 0x10
#define FGX_TCP_URG 0x20

/* What the decoder found in the TCP options (fgx_pkt.tcpopt). */
#define FGX_TCPOPT_TS 0x01  /* a timestamp option: tsval, tsecr are set */
#define FGX_TCPOPT_SIG 0x02 /* an MD5 signature (kind 19) or TCP-AO (kind 29) option */

/* IP-level reasons the receiver discards a packet that nfqueue saw first (fgx_pkt.ipdiscard):
 * the kernel parses IPv4 options and IPv6 extension headers after the prerouting hook. */
#define FGX_IPD_OPTS 0x01   /* IPv4 options other than NOP and EOL */
#define FGX_IPD_EXTOPT 0x02 /* an IPv6 hop-by-hop or destination option other than padding,
                             * or padding the kernel refuses */
#define FGX_IPD_RTHDR 0x04  /* an IPv6 routing header */

struct fgx_pkt {
    uint8_t family;  /* 4 or 6 */
    uint8_t ipproto; /* IPPROTO_TCP or IPPROTO_UDP */
    uint8_t tcp_flags;
    uint8_t tcpopt;    /* FGX_TCPOPT_* */
    uint8_t ipdiscard; /* FGX_IPD_*: 0 for a plain header */
    uint16_t urg_ptr;  /* TCP urgent pointer, host order */
    uint32_t tsval, tsecr; /* when tcpopt has FGX_TCPOPT_TS */
    uint8_t saddr[16]; /* 4 or 16 bytes used, network order */
    uint8_t daddr[16];
    uint16_t sport, dport; /* host order */
    uint32_t seq, ack;     /* TCP only, host order */
    const uint8_t *l3;     /* the packet, trimmed to the length its IP header claims */
    size_t l3_len;
    size_t l4_off; /* offset of the TCP/UDP header in l3 */
    const uint8_t *payload;
    size_t payload_len;
};

/* Decode buf (len bytes, starting at the IP header) into *out, which points into buf.
 * Returns 0, or:
 *   -EMSGSIZE  the IP header claims more bytes than buf holds (cut short by the copy range);
 *   -ENOTSUP   an IP fragment (no complete transport header or payload to scan);
 *   -EPROTONOSUPPORT  neither TCP nor UDP;
 *   -EINVAL    malformed (bad version, lengths or header sizes). */
int fgx_pkt_decode(const void *buf, size_t len, struct fgx_pkt *out);

/* Verify the TCP or UDP checksum of a decoded packet (pseudo-header included). A UDP checksum of
 * zero means none over IPv4 and is accepted; over IPv6 it is invalid. Returns 0 when it is
 * right, -EBADMSG when the receiver would discard the packet for it. Only for packets whose
 * checksum the kernel has not verified and that are not locally generated (NFQUEUE's
 * NFQA_SKB_CSUM_NOTVERIFIED without NFQA_SKB_CSUMNOTREADY): a partial checksum is not wrong. */
int fgx_pkt_csum_check(const struct fgx_pkt *p);

/* The Internet checksum (RFC 1071) of a header built anew, in parts: fgx_csum_add() adds len
 * bytes at p (big-endian 16-bit words, an odd last byte padded with a zero) to a partial sum
 * (start at 0; a pseudo-header's length and protocol may be added to it as numbers), and
 * fgx_csum_fold() gives the sum's complement, the value the header carries. The partial sum is
 * kept folded, so any number of parts of any size add up without overflow. */
uint32_t fgx_csum_add(uint32_t sum, const void *p, size_t len);
uint16_t fgx_csum_fold(uint32_t sum);

#endif
