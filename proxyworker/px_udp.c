/* UDP stage of proxyworker (issue 27): a proxy-layer UDP service's datagrams, tproxied to the
 * thread's UDP listener (IP_TRANSPARENT, the original destination of each datagram from
 * IP_ORIGDSTADDR) -> its flow (client and service addresses: one px_conn marked udp, in a
 * hash of the thread's own) -> the regexes of its direction, each datagram alone (block mode)
 * -> the script stage (px_script.c: each datagram a RawPacket) -> on to the service from the
 * flow's upstream socket, bound to the client's own address and port (IP_TRANSPARENT +
 * IP_FREEBIND: the service sees the client; a client of the box itself, whose own socket holds
 * that port, gets another port of its address), or back to the client from the service's
 * address and port through a raw socket (no socket of the box can be bound there when the
 * service itself is bound on it). A flow goes after --udp-idle without a datagram. A
 * blocked datagram is dropped alone; the flow goes on. A flow counts as one of its service's
 * connections (service set --max-conns): past the limit a new flow's datagrams are dropped
 * (refuse) or relayed all the same (forward), counted either way. */
#include "px.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>

#include "fgx/dp.h"
#include "fgx/log.h"
#include "fgx/pkt.h"
#include "fgx/ruleset.h"

#define PX_UDP_BUCKETS 4096u
#define PX_UDP_FLOWS_MAX 16384u /* per thread: past it the flow idle longest goes */
#define PX_UDP_BURST 64 /* datagrams taken from a socket per callback */
#define PX_UDP_QUEUE 256 /* a side's datagrams waiting behind one a script judges */

struct px_dgram {
    struct px_dgram *next;
    size_t len;
    uint8_t data[];
};

struct px_udp {
    int lfd[2];
    struct event *lev[2];
    int raw[2];
    struct px_conn *bucket[PX_UDP_BUCKETS]; /* chained by next / prev */
    unsigned nflows;
};

static int set_int(int fd, int level, int opt, int v)
{
    return setsockopt(fd, level, opt, &v, sizeof(v)) == -1 ? -errno : 0;
}

/* The thread's UDP listener of family on port: SO_REUSEPORT (the kernel spreads the flows over
 * the threads by their 4-tuple, so a flow stays on one), transparent, and telling each
 * datagram's original destination. */
static int listen_udp(int family, uint16_t port)
{
    struct sockaddr_storage ss = {0};
    socklen_t len;
    int fd, ret;

    fd = socket(family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd == -1)
        return -errno;
    if (family == AF_INET) {
        struct sockaddr_in *a = (struct sockaddr_in *)&ss;

        a->sin_family = AF_INET;
        a->sin_port = htons(port);
        len = sizeof(*a);
        if ((ret = set_int(fd, SOL_IP, IP_TRANSPARENT, 1)) != 0 ||
            (ret = set_int(fd, SOL_IP, IP_RECVORIGDSTADDR, 1)) != 0)
            goto err;
    } else {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;

        a->sin6_family = AF_INET6;
        a->sin6_port = htons(port);
        len = sizeof(*a);
        if ((ret = set_int(fd, SOL_IPV6, IPV6_V6ONLY, 1)) != 0 ||
            (ret = set_int(fd, SOL_IPV6, IPV6_TRANSPARENT, 1)) != 0 ||
            (ret = set_int(fd, SOL_IPV6, IPV6_RECVORIGDSTADDR, 1)) != 0)
            goto err;
    }
    if ((ret = set_int(fd, SOL_SOCKET, SO_REUSEADDR, 1)) != 0 ||
        (ret = set_int(fd, SOL_SOCKET, SO_REUSEPORT, 1)) != 0)
        goto err;
    if (bind(fd, (struct sockaddr *)&ss, len) == -1) {
        ret = -errno;
        goto err;
    }
    return fd;
err:
    close(fd);
    return ret;
}

static int raw_open(int family)
{
    int fd = socket(family, SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK, IPPROTO_RAW);

    if (fd == -1)
        return -errno;
    /* fgex's own rules let its packets pass (fgx/dp.h) */
    if (set_int(fd, SOL_SOCKET, SO_MARK, FGX_MARK) != 0) {
        int e = errno;

        close(fd);
        return -e;
    }
    return fd;
}

static socklen_t sa_len(const struct sockaddr_storage *ss)
{
    return ss->ss_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
}

static uint32_t flow_bucket(const struct sockaddr_storage *cl, const struct sockaddr_storage *sv)
{
    uint8_t a[16] = {0}, b[16] = {0};
    uint16_t pa = 0, pb = 0;

    (void)px_sa_split(cl, a, &pa);
    (void)px_sa_split(sv, b, &pb);
    return (uint32_t)((fgx_hash64(a, sizeof(a), pa) ^ (fgx_hash64(b, sizeof(b), pb) << 1)) %
                      PX_UDP_BUCKETS);
}

static bool sa_same(const struct sockaddr_storage *x, const struct sockaddr_storage *y)
{
    uint8_t a[16] = {0}, b[16] = {0};
    uint16_t pa = 0, pb = 0;

    return px_sa_split(x, a, &pa) == px_sa_split(y, b, &pb) && pa == pb &&
           memcmp(a, b, sizeof(a)) == 0;
}

static void flow_free(struct px_thread *t, struct px_conn *c)
{
    struct px_udp *u = t->udp;
    struct px_svc_ctr *sc = px_stats_svc(&t->ctr, c->service_id);

    px_script_conn_close(c);
    for (int s = 0; s < 2; s++)
        while (c->uq_head[s]) {
            struct px_dgram *d = c->uq_head[s];

            c->uq_head[s] = d->next;
            free(d);
        }
    if (c->prev)
        c->prev->next = c->next;
    else
        u->bucket[flow_bucket(&c->client, &c->server)] = c->next;
    if (c->next)
        c->next->prev = c->prev;
    if (c->s[1].rev)
        event_free(c->s[1].rev);
    if (c->s[1].fd >= 0)
        close(c->s[1].fd);
    PX_CTR_ADD(&sc->open, (uint64_t)-1);
    u->nflows--;
    free(c);
}

static void dgram(struct px_conn *c, int side, const uint8_t *data, size_t len);

static void on_upstream(evutil_socket_t fd, short what, void *arg)
{
    struct px_conn *c = arg;
    struct px_thread *t = c->t;

    (void)what;
    t->now_ms = px_now_ms();
    for (int i = 0; i < PX_UDP_BURST; i++) {
        ssize_t n = recv(fd, t->buf, PX_READ_MAX, MSG_DONTWAIT);

        /* an ICMP error of the service (ECONNREFUSED: nothing listens there) is not a
         * datagram: the flow stays, as the client's socket would */
        if (n == -1)
            break;
        c->last_ms = t->now_ms;
        dgram(c, 1, t->buf, (size_t)n);
    }
}

/* The flow's upstream socket: the client's own address and port, towards the service. A
 * client of the box itself holds that port with its own socket (EADDRINUSE: a remote
 * client's port is taken only by its other flows, which share it with SO_REUSEADDR): its
 * address and a port the kernel chooses. */
static int upstream_open(const struct px_conn *c, int *out)
{
    struct sockaddr_storage b = c->client;
    int fd = socket(c->client.ss_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int ret;

    if (fd == -1)
        return -errno;
    if (c->client.ss_family == AF_INET)
        ret = set_int(fd, SOL_IP, IP_TRANSPARENT, 1);
    else
        ret = set_int(fd, SOL_IPV6, IPV6_TRANSPARENT, 1);
    /* SO_REUSEADDR: the client's one port may speak to several services (each a flow) */
    if (ret == 0)
        ret = set_int(fd, SOL_IP, IP_FREEBIND, 1);
    if (ret == 0)
        ret = set_int(fd, SOL_SOCKET, SO_REUSEADDR, 1);
    if (ret == 0)
        ret = set_int(fd, SOL_SOCKET, SO_MARK, FGX_MARK);
    if (ret == 0 && bind(fd, (const struct sockaddr *)&b, sa_len(&b)) == -1) {
        ret = -errno;
        if (ret == -EADDRINUSE) {
            if (b.ss_family == AF_INET)
                ((struct sockaddr_in *)&b)->sin_port = 0;
            else
                ((struct sockaddr_in6 *)&b)->sin6_port = 0;
            ret = bind(fd, (const struct sockaddr *)&b, sa_len(&b)) == -1 ? -errno : 0;
        }
    }
    if (ret == 0 && connect(fd, (const struct sockaddr *)&c->server, sa_len(&c->server)) == -1)
        ret = -errno;
    if (ret != 0) {
        close(fd);
        return ret;
    }
    *out = fd;
    return 0;
}

/* The flow idle longest of the thread (a full table makes room with it). */
static struct px_conn *flow_oldest(struct px_udp *u)
{
    struct px_conn *old = NULL;

    for (unsigned b = 0; b < PX_UDP_BUCKETS; b++)
        for (struct px_conn *c = u->bucket[b]; c; c = c->next)
            if (!old || c->last_ms < old->last_ms)
                old = c;
    return old;
}

static struct px_conn *flow_get(struct px_thread *t, const struct fgx_wsvc *svc,
                                const struct sockaddr_storage *cl,
                                const struct sockaddr_storage *sv)
{
    static __thread unsigned long long last_log;
    struct px_udp *u = t->udp;
    uint32_t b = flow_bucket(cl, sv);
    struct px_conn *c;
    int rv;

    for (c = u->bucket[b]; c; c = c->next)
        if (sa_same(&c->client, cl) && sa_same(&c->server, sv)) {
            if (c->service_id == svc->id)
                return c;
            flow_free(t, c); /* the service was removed and added: a new flow */
            break;
        }
    /* The service's own limit (issue 27), its flows open over every thread, as px_accept.c
     * counts its TCP connections: a new flow past it is counted, then refused (its datagram
     * dropped: UDP has no reset) or relayed. A refused flow is no flow: its next datagram
     * asks again, and gets in once one has gone idle. */
    if (svc->max_conns > 0 && px_stats_svc_open(t->w, svc->id) >= svc->max_conns) {
        static __thread unsigned long long last_limit;

        PX_CTR_ADD(&px_stats_svc(&t->ctr, svc->id)->limit_hits, 1);
        fgx_log_ratelimited(&last_limit, FGX_LOG_WARN,
                            "service %u has its %u flows open: new UDP flow %s "
                            "(service set --max-conns)",
                            svc->id, svc->max_conns,
                            svc->over_limit_forward ? "relayed all the same" : "dropped");
        if (!svc->over_limit_forward)
            return NULL;
    }
    if (u->nflows >= PX_UDP_FLOWS_MAX && (c = flow_oldest(u)) != NULL)
        flow_free(t, c);
    c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->t = t;
    c->udp = true;
    c->s[0].fd = c->s[1].fd = -1;
    c->client = *cl;
    c->server = *sv;
    c->family = cl->ss_family == AF_INET ? 4 : 6;
    c->service_id = svc->id;
    c->last_ms = t->now_ms;
    c->epoch = t->epoch;
    rv = upstream_open(c, &c->s[1].fd);
    if (rv == 0) {
        c->s[1].rev = event_new(t->base, c->s[1].fd, EV_READ | EV_PERSIST, on_upstream, c);
        if (!c->s[1].rev || event_add(c->s[1].rev, NULL) != 0)
            rv = -ENOMEM;
    }
    if (rv != 0) {
        PX_CTR_ADD(&t->ctr.connect_failed, 1);
        fgx_log_ratelimited(&last_log, FGX_LOG_WARN,
                            "service %u: a UDP flow's socket from the client's address: %s",
                            svc->id, strerror(-rv));
        if (c->s[1].rev)
            event_free(c->s[1].rev);
        if (c->s[1].fd >= 0)
            close(c->s[1].fd);
        free(c);
        return NULL;
    }
    c->next = u->bucket[b];
    if (c->next)
        c->next->prev = c;
    u->bucket[b] = c;
    u->nflows++;
    PX_CTR_ADD(&px_stats_svc(&t->ctr, svc->id)->open, 1);
    PX_CTR_ADD(&px_stats_svc(&t->ctr, svc->id)->accepted, 1);
    return c;
}

static void put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

/* The service's datagram to the client, from the service's address and port: an IP and UDP
 * header of its own in front (the thread's scratch past the data is not touched: the packet is
 * built in a buffer of its own). */
static void reply_send(struct px_conn *c, const uint8_t *data, size_t len)
{
    static __thread unsigned long long last_log;
    static __thread uint8_t pkt[40 + 8 + 65535];
    struct px_udp *u = c->t->udp;
    bool v4 = c->family == 4;
    size_t hlen = v4 ? 20 : 40, alen = v4 ? 4 : 16;
    uint8_t sa[16] = {0}, ca[16] = {0}, *udp = pkt + hlen;
    uint16_t sp = 0, cp = 0, ul;
    uint32_t sum;
    int fd = u->raw[v4 ? 0 : 1];

    if (len > 65535 - 8 - hlen) {
        fgx_log_ratelimited(&last_log, FGX_LOG_WARN, "UDP reply of %zu bytes: too long", len);
        return;
    }
    (void)px_sa_split(&c->server, sa, &sp);
    (void)px_sa_split(&c->client, ca, &cp);
    ul = (uint16_t)(8 + len);
    memset(pkt, 0, hlen + 8);
    if (v4) {
        pkt[0] = 0x45;
        put16(pkt + 2, (uint16_t)(hlen + ul));
        pkt[6] = 0x40; /* DF: a reply past the path MTU is refused, not fragmented here */
        pkt[8] = 64;
        pkt[9] = IPPROTO_UDP;
        memcpy(pkt + 12, sa, 4);
        memcpy(pkt + 16, ca, 4);
        put16(pkt + 10, fgx_csum_fold(fgx_csum_add(0, pkt, 20)));
    } else {
        pkt[0] = 0x60;
        put16(pkt + 4, ul);
        pkt[6] = IPPROTO_UDP;
        pkt[7] = 64;
        memcpy(pkt + 8, sa, 16);
        memcpy(pkt + 24, ca, 16);
    }
    put16(udp, sp);
    put16(udp + 2, cp);
    put16(udp + 4, ul);
    memcpy(udp + 8, data, len);
    sum = fgx_csum_add(0, sa, alen);
    sum = fgx_csum_add(sum, ca, alen);
    sum += IPPROTO_UDP + ul;
    sum = fgx_csum_add(sum, udp, ul);
    {
        uint16_t ck = fgx_csum_fold(sum);

        put16(udp + 6, ck == 0 ? 0xffff : ck);
    }
    {
        struct sockaddr_storage dst = c->client;

        /* a raw socket takes no port */
        if (v4)
            ((struct sockaddr_in *)&dst)->sin_port = 0;
        else
            ((struct sockaddr_in6 *)&dst)->sin6_port = 0;
        if (fd < 0 || sendto(fd, pkt, hlen + ul, 0, (struct sockaddr *)&dst, sa_len(&dst)) == -1)
            fgx_log_ratelimited(&last_log, FGX_LOG_WARN, "UDP reply to a client: %s",
                                fd < 0 ? "no raw socket" : strerror(errno));
    }
}

bool px_udp_forward(struct px_conn *c, int side, const uint8_t *data, size_t len)
{
    struct px_svc_ctr *sc = px_stats_svc(&c->t->ctr, c->service_id);

    PX_CTR_ADD(&sc->reads, 1);
    PX_CTR_ADD(&sc->bytes[side], len);
    if (side == 0)
        (void)send(c->s[1].fd, data, len, MSG_DONTWAIT);
    else
        reply_send(c, data, len);
    return true;
}

/* Past the regexes: the script judges it (or it goes on now). */
static void judged(struct px_conn *c, int side, const uint8_t *data, size_t len)
{
    if (px_script_chunk(c, side, data, len) == 0)
        (void)px_udp_forward(c, side, data, len);
    /* 1: it waits for its verdict (px_script.c forwards it); -1: the fail policy dropped it */
}

void px_udp_next(struct px_conn *c)
{
    for (int side = 0; side < 2; side++)
        while (!c->hold[side] && c->uq_head[side]) {
            struct px_dgram *d = c->uq_head[side];

            c->uq_head[side] = d->next;
            if (!c->uq_head[side])
                c->uq_tail[side] = NULL;
            c->uq_n[side]--;
            judged(c, side, d->data, d->len);
            free(d);
        }
}

static void dgram(struct px_conn *c, int side, const uint8_t *data, size_t len)
{
    static __thread unsigned long long last_log;
    struct px_dgram *d;

    if (px_match_scan_dgram(c, side, data, len) != 0)
        return; /* blocked (counted, an event) or unscannable: this datagram alone */
    if (!c->hold[side] && !c->uq_head[side]) {
        judged(c, side, data, len);
        return;
    }
    /* one of this side waits for its script verdict: this one waits behind it, in order */
    d = c->uq_n[side] < PX_UDP_QUEUE ? malloc(sizeof(*d) + len) : NULL;
    if (!d) {
        PX_CTR_ADD(&c->t->ctr.script_errors, 1);
        fgx_log_ratelimited(&last_log, FGX_LOG_WARN,
                            "service %u: %u UDP datagrams of a flow wait for a script verdict: "
                            "one more dropped",
                            c->service_id, c->uq_n[side]);
        return;
    }
    d->next = NULL;
    d->len = len;
    memcpy(d->data, data, len);
    if (c->uq_tail[side])
        c->uq_tail[side]->next = d;
    else
        c->uq_head[side] = d;
    c->uq_tail[side] = d;
    c->uq_n[side]++;
}

static void on_listen(evutil_socket_t fd, short what, void *arg)
{
    struct px_thread *t = arg;

    (void)what;
    t->now_ms = px_now_ms();
    px_match_switch(t);
    for (int i = 0; i < PX_UDP_BURST; i++) {
        struct sockaddr_storage cl, sv;
        union {
            struct cmsghdr h;
            uint8_t b[CMSG_SPACE(sizeof(struct sockaddr_in6))];
        } ctl;
        struct iovec iov = {t->buf, PX_READ_MAX};
        struct msghdr msg = {.msg_name = &cl,
                             .msg_namelen = sizeof(cl),
                             .msg_iov = &iov,
                             .msg_iovlen = 1,
                             .msg_control = ctl.b,
                             .msg_controllen = sizeof(ctl.b)};
        const struct fgx_wsvc *svc;
        struct px_conn *c;
        uint8_t addr[16] = {0};
        uint16_t port = 0;
        bool found = false;
        ssize_t n = recvmsg(fd, &msg, MSG_DONTWAIT);

        if (n == -1)
            break;
        for (struct cmsghdr *h = CMSG_FIRSTHDR(&msg); h; h = CMSG_NXTHDR(&msg, h))
            if ((h->cmsg_level == SOL_IP && h->cmsg_type == IP_ORIGDSTADDR) ||
                (h->cmsg_level == SOL_IPV6 && h->cmsg_type == IPV6_ORIGDSTADDR)) {
                memset(&sv, 0, sizeof(sv));
                memcpy(&sv, CMSG_DATA(h),
                       h->cmsg_len - CMSG_LEN(0) < sizeof(sv) ? h->cmsg_len - CMSG_LEN(0)
                                                              : sizeof(sv));
                found = true;
            }
        if (!found || px_sa_split(&sv, addr, &port) == 0 || t->cfg == NULL) {
            PX_CTR_ADD(&t->ctr.unclassified, 1);
            continue;
        }
        svc = fgx_wcfg_lookup(t->cfg, IPPROTO_UDP, sv.ss_family == AF_INET ? 4 : 6, addr, port);
        if (!svc) {
            PX_CTR_ADD(&t->ctr.unclassified, 1);
            continue;
        }
        c = flow_get(t, svc, &cl, &sv);
        if (!c)
            continue;
        c->last_ms = t->now_ms;
        dgram(c, 0, t->buf, (size_t)n);
    }
}

int px_udp_thread_init(struct px_thread *t)
{
    static const int fam[2] = {AF_INET, AF_INET6};
    struct px_udp *u = calloc(1, sizeof(*u));

    t->udp = u;
    if (!u)
        return -ENOMEM;
    u->lfd[0] = u->lfd[1] = u->raw[0] = u->raw[1] = -1;
    for (int i = 0; i < 2; i++) {
        u->lfd[i] = listen_udp(fam[i], t->w->port);
        u->raw[i] = raw_open(fam[i]);
        if (u->lfd[i] < 0 || u->raw[i] < 0) {
            /* an IPv6-less host still relays IPv4 */
            if (i == 0) {
                int e = u->lfd[i] < 0 ? u->lfd[i] : u->raw[i];

                fgx_err("UDP listener on port %u: %s", t->w->port, strerror(-e));
                return e;
            }
            fgx_warn("no IPv6 UDP relay: %s", strerror(-(u->lfd[i] < 0 ? u->lfd[i] : u->raw[i])));
            continue;
        }
        u->lev[i] = event_new(t->base, u->lfd[i], EV_READ | EV_PERSIST, on_listen, t);
        if (!u->lev[i] || event_add(u->lev[i], NULL) != 0)
            return -ENOMEM;
    }
    return 0;
}

void px_udp_thread_release(struct px_thread *t)
{
    struct px_udp *u = t->udp;

    if (!u)
        return;
    for (unsigned b = 0; b < PX_UDP_BUCKETS; b++)
        while (u->bucket[b])
            flow_free(t, u->bucket[b]);
    for (int i = 0; i < 2; i++) {
        if (u->lev[i])
            event_free(u->lev[i]);
        if (u->lfd[i] >= 0)
            close(u->lfd[i]);
        if (u->raw[i] >= 0)
            close(u->raw[i]);
    }
    free(u);
    t->udp = NULL;
}

void px_udp_expire(struct px_thread *t)
{
    struct px_udp *u = t->udp;

    if (!u || u->nflows == 0)
        return;
    for (unsigned b = 0; b < PX_UDP_BUCKETS; b++) {
        struct px_conn *c = u->bucket[b];

        while (c) {
            struct px_conn *next = c->next;
            bool gone = t->cfg == NULL || fgx_wcfg_service(t->cfg, c->service_id) == NULL;

            /* idle, or its service stopped (its datagrams are no longer sent here) */
            if ((gone || c->last_ms + t->w->udp_idle_ms <= t->now_ms) && !c->hold[0] &&
                !c->hold[1])
                flow_free(t, c);
            c = next;
        }
    }
}
