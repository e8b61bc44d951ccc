/* Reset stage of nfqworker: when a TCP flow is blocked, both ends get a RST built here and sent
 * through a raw socket. The packets carry FGX_MARK so fgex's own rules never queue them back. */
#include "nfq.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "fgx/log.h"
#include "fgx/pkt.h"

static int raw_open(int family)
{
    unsigned mark = FGX_MARK;
    int fd;

    fd = socket(family, SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK, IPPROTO_RAW);
    if (fd == -1) {
        fgx_err("raw socket (%s): %s", family == AF_INET ? "IPv4" : "IPv6", strerror(errno));
        return -errno;
    }
    if (setsockopt(fd, SOL_SOCKET, SO_MARK, &mark, sizeof(mark)) == -1) {
        int e = errno;

        fgx_err("raw socket: SO_MARK: %s", strerror(e));
        close(fd);
        return -e;
    }
    return fd;
}

int nfq_reset_open(struct nfq_thread *t)
{
    t->raw4 = raw_open(AF_INET);
    if (t->raw4 < 0)
        return t->raw4;
    /* An IPv6-less host still filters IPv4: resets are then IPv4 only. */
    t->raw6 = raw_open(AF_INET6);
    return 0;
}

void nfq_reset_close(struct nfq_thread *t)
{
    if (t->raw4 >= 0)
        close(t->raw4);
    if (t->raw6 >= 0)
        close(t->raw6);
    t->raw4 = t->raw6 = -1;
}

static void put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

static void put32(uint8_t *p, uint32_t v)
{
    put16(p, (uint16_t)(v >> 16));
    put16(p + 2, (uint16_t)v);
}

void nfq_reset_send(struct nfq_thread *t, int family, const uint8_t *saddr, uint16_t sport,
                    const uint8_t *daddr, uint16_t dport, uint32_t seq)
{
    struct nfq_reset *r;

    if (t->nresets == NFQ_RESET_PENDING)
        nfq_verdict_flush(t);
    r = &t->resets[t->nresets++];
    r->family = (uint8_t)family;
    r->sport = sport;
    r->dport = dport;
    r->seq = seq;
    memcpy(r->saddr, saddr, family == 4 ? 4 : 16);
    memcpy(r->daddr, daddr, family == 4 ? 4 : 16);
}

static void reset_send_now(struct nfq_thread *t, int family, const uint8_t *saddr, uint16_t sport,
                           const uint8_t *daddr, uint16_t dport, uint32_t seq)
{
    static __thread unsigned long long last_log;
    uint8_t pkt[60] = {0};
    uint8_t *tcp;
    size_t alen = family == 4 ? 4 : 16, hlen = family == 4 ? 20 : 40;
    uint32_t sum;
    union {
        struct sockaddr_in v4;
        struct sockaddr_in6 v6;
    } dst;
    socklen_t dlen;
    int fd;

    memset(&dst, 0, sizeof(dst));
    if (family == 4) {
        pkt[0] = 0x45;
        put16(pkt + 2, 40);
        pkt[8] = 64;
        pkt[9] = IPPROTO_TCP;
        memcpy(pkt + 12, saddr, 4);
        memcpy(pkt + 16, daddr, 4);
        put16(pkt + 10, fgx_csum_fold(fgx_csum_add(0, pkt, 20)));
        dst.v4.sin_family = AF_INET;
        memcpy(&dst.v4.sin_addr, daddr, 4);
        dlen = sizeof(dst.v4);
        fd = t->raw4;
    } else {
        pkt[0] = 0x60;
        put16(pkt + 4, 20);
        pkt[6] = IPPROTO_TCP;
        pkt[7] = 64;
        memcpy(pkt + 8, saddr, 16);
        memcpy(pkt + 24, daddr, 16);
        dst.v6.sin6_family = AF_INET6;
        memcpy(&dst.v6.sin6_addr, daddr, 16);
        dlen = sizeof(dst.v6);
        fd = t->raw6;
    }
    tcp = pkt + hlen;
    put16(tcp, sport);
    put16(tcp + 2, dport);
    put32(tcp + 4, seq);
    tcp[12] = 5 << 4;
    tcp[13] = FGX_TCP_RST;
    /* pseudo header: addresses, protocol, TCP length */
    sum = fgx_csum_add(0, saddr, alen);
    sum = fgx_csum_add(sum, daddr, alen);
    sum += IPPROTO_TCP + 20;
    sum = fgx_csum_add(sum, tcp, 20);
    put16(tcp + 16, fgx_csum_fold(sum));
    if (fd < 0 || sendto(fd, pkt, hlen + 20, 0, (struct sockaddr *)&dst, dlen) == -1)
        fgx_log_ratelimited(&last_log, FGX_LOG_WARN, "thread %u: sending a TCP reset: %s", t->idx,
                            fd < 0 ? "no raw socket" : strerror(errno));
}

void nfq_reset_flush(struct nfq_thread *t)
{
    unsigned i;

    for (i = 0; i < t->nresets; i++) {
        const struct nfq_reset *r = &t->resets[i];

        reset_send_now(t, r->family, r->saddr, r->sport, r->daddr, r->dport, r->seq);
    }
    t->nresets = 0;
}
