/* Tests for the proxy layer's nftables rules and policy routing (controld/ctl_nft.c with
 * ctl_nft_sync_layers(), ctl_route.c) carrying real connections through proxyworker's stages.
 * Each test builds two network namespaces joined by a veth pair (Criterion forks a process per
 * test): the client's, and the server's, where the rules, the proxy threads and the service
 * live, so the client's address is not one of the server box's and only transparent proxying
 * can show it to the service. */
#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "controld/ctl_nft.h"
#include "controld/ctl_nft_px.h"
#include "fgx/log.h"
#include "fgx/ruleset.h"
#include "proxyworker/px.h"

#define PX_PORT 15002
#define SVC_PORT 8080
#define SVC_ID 7u
#define F_EVIL 9u

static struct px_worker w;
static struct ctl_nft *nft;
static int ns_srv = -1, ns_cli = -1;

static void sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void sh(const char *fmt, ...)
{
    char cmd[1024];
    va_list ap;
    int rc;

    va_start(ap, fmt);
    (void)vsnprintf(cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    rc = system(cmd);
    cr_assert_eq(rc, 0, "command failed (%d): %s", rc, cmd);
}

static void setup(void)
{
    fgx_log_init("test_px_nft", FGX_LOG_WARN);
    cr_assert_eq(unshare(CLONE_NEWNET), 0, "unshare: %s", strerror(errno));
    sh("ip link set lo up");
    ns_srv = open("/proc/self/ns/net", O_RDONLY);
    cr_assert_geq(ns_srv, 0);
    cr_assert_eq(unshare(CLONE_NEWNET), 0);
    ns_cli = open("/proc/self/ns/net", O_RDONLY);
    cr_assert_geq(ns_cli, 0);
    sh("ip link set lo up && ip link add pxc type veth peer name pxs netns /proc/%d/fd/%d",
       (int)getpid(), ns_srv);
    sh("ip addr add 10.98.0.1/24 dev pxc && ip -6 addr add fd98::1/64 dev pxc nodad && "
       "ip link set pxc up");
    cr_assert_eq(setns(ns_srv, CLONE_NEWNET), 0);
    sh("ip addr add 10.98.0.2/24 dev pxs && ip -6 addr add fd98::2/64 dev pxs nodad && "
       "ip link set pxs up");
    cr_assert_eq(ctl_nft_open(&(struct ctl_nft_config){.queue_base = 7000, .nthreads = 1}, &nft),
                 0);
    memset(&w, 0, sizeof(w));
    w.nthreads = 2;
    w.port = PX_PORT;
    w.max_conns = 64;
    w.idle_ms = 60000;
}

static void teardown(void)
{
    px_worker_stop(&w);
    if (nft != NULL)
        (void)ctl_nft_clear(nft);
    ctl_nft_close(nft);
    nft = NULL;
    close(ns_cli);
    close(ns_srv);
}

TestSuite(px_nft, .init = setup, .fini = teardown, .timeout = 30);

static void rules(bool fail_open)
{
    struct ctl_nft_service s = {.id = SVC_ID, .ipproto = IPPROTO_TCP, .port = SVC_PORT,
                                .fail_open = fail_open};

    cr_assert_eq(ctl_nft_sync_layers(nft, NULL, 0, &s, 1, PX_PORT), 0);
}

static void proxy_start(void)
{
    static const struct fgx_pattern evil = {F_EVIL, "evil[0-9]+", FGX_DIR_C2S, false};
    struct fgx_dp_service s = {.id = SVC_ID, .ipproto = IPPROTO_TCP, .port = SVC_PORT};
    struct fgx_dp_ruleset rs = {.generation = 1, .nservices = 1, .services = &s};
    char err[256];
    int d;

    cr_assert_eq(px_worker_open(&w), 0);
    cr_assert_eq(px_worker_start(&w), 0);
    for (d = 0; d < 2; d++)
        cr_assert_eq(fgx_ruleset_compile(&evil, 1, d == 0 ? FGX_DIR_C2S : FGX_DIR_S2C,
                                         IPPROTO_TCP, &s.db[d], err, sizeof(err)),
                     0, "%s", err);
    cr_assert_eq(px_ctl_apply(&w, &rs), 0);
    for (d = 0; d < 2; d++)
        fgx_blob_release(&s.db[d]);
}

static socklen_t sa_make(int family, const char *ip, uint16_t port, struct sockaddr_storage *ss)
{
    memset(ss, 0, sizeof(*ss));
    if (family == AF_INET) {
        struct sockaddr_in *a = (struct sockaddr_in *)ss;

        a->sin_family = AF_INET;
        a->sin_port = htons(port);
        cr_assert_eq(inet_pton(AF_INET, ip, &a->sin_addr), 1);
        return sizeof(*a);
    }
    struct sockaddr_in6 *a = (struct sockaddr_in6 *)ss;

    a->sin6_family = AF_INET6;
    a->sin6_port = htons(port);
    cr_assert_eq(inet_pton(AF_INET6, ip, &a->sin6_addr), 1);
    return sizeof(*a);
}

static int server_listen(int family, const char *ip)
{
    struct sockaddr_storage ss;
    socklen_t len = sa_make(family, ip, SVC_PORT, &ss);
    int fd = socket(family, SOCK_STREAM, 0), one = 1;

    cr_assert_neq(fd, -1);
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    cr_assert_eq(bind(fd, (struct sockaddr *)&ss, len), 0, "bind: %s", strerror(errno));
    cr_assert_eq(listen(fd, 16), 0);
    return fd;
}

/* Connect from the client's namespace (remote) or the server's (the box itself), waiting at
 * most ms. Returns the socket, or -1 when the connection did not happen in time. */
static int client_connect(bool remote, int family, const char *dst, int ms)
{
    struct sockaddr_storage d;
    socklen_t dl = sa_make(family, dst, SVC_PORT, &d);
    struct pollfd p;
    int fd, err = 0;
    socklen_t el = sizeof(err);
    struct timeval tv = {5, 0};

    if (remote)
        cr_assert_eq(setns(ns_cli, CLONE_NEWNET), 0);
    fd = socket(family, SOCK_STREAM | SOCK_NONBLOCK, 0);
    if (remote)
        cr_assert_eq(setns(ns_srv, CLONE_NEWNET), 0);
    cr_assert_neq(fd, -1);
    if (connect(fd, (struct sockaddr *)&d, dl) == -1)
        cr_assert_eq(errno, EINPROGRESS, "connect: %s", strerror(errno));
    p = (struct pollfd){.fd = fd, .events = POLLOUT};
    if (poll(&p, 1, ms) != 1 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) != 0 || err != 0) {
        close(fd);
        return -1;
    }
    cr_assert_eq(fcntl(fd, F_SETFL, 0), 0);
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    return fd;
}

static int accept_peer(int lfd, char *peer, size_t len)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    struct timeval tv = {5, 0};
    int fd = accept(lfd, (struct sockaddr *)&ss, &sl);

    cr_assert_neq(fd, -1, "accept: %s", strerror(errno));
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    inet_ntop(ss.ss_family,
              ss.ss_family == AF_INET ? (void *)&((struct sockaddr_in *)&ss)->sin_addr
                                      : (void *)&((struct sockaddr_in6 *)&ss)->sin6_addr,
              peer, (socklen_t)len);
    return fd;
}

static void exchange(int cfd, int sfd)
{
    char buf[8];

    cr_assert_eq(send(cfd, "ping", 4, 0), 4);
    cr_assert_eq(recv(sfd, buf, sizeof(buf), MSG_WAITALL), 4);
    cr_assert_eq(memcmp(buf, "ping", 4), 0);
    cr_assert_eq(send(sfd, "pong!", 5, 0), 5);
    cr_assert_eq(recv(cfd, buf, 5, MSG_WAITALL), 5);
    cr_assert_eq(memcmp(buf, "pong!", 5), 0);
}

static uint64_t proxied(void)
{
    struct fgx_dp_stats st;
    uint64_t n = 0;
    size_t i;

    cr_assert_eq(px_stats_collect(&w, &st), 0);
    for (i = 0; i < st.nservices; i++)
        if (st.services[i].service_id == SVC_ID)
            n = st.services[i].accepted;
    struct fgx_dp_msg m = {.type = FGX_DP_STATS, .u.stats = st};

    fgx_dp_msg_release(&m);
    return n;
}

static void remote(int family, const char *srv, const char *cli)
{
    char peer[INET6_ADDRSTRLEN];
    int lfd, cfd, sfd;

    rules(false);
    proxy_start();
    lfd = server_listen(family, srv);
    cfd = client_connect(true, family, srv, 3000);
    cr_assert_geq(cfd, 0, "no connection");
    sfd = accept_peer(lfd, peer, sizeof(peer));
    /* Through the proxy, and yet the service sees the client's own address. */
    cr_assert_str_eq(peer, cli);
    exchange(cfd, sfd);
    cr_assert_eq(proxied(), 1);
    close(cfd);
    close(sfd);
    close(lfd);
}

Test(px_nft, remote_ipv4_client_is_proxied_and_keeps_its_address)
{
    remote(AF_INET, "10.98.0.2", "10.98.0.1");
}

Test(px_nft, remote_ipv6_client_is_proxied_and_keeps_its_address)
{
    remote(AF_INET6, "fd98::2", "fd98::1");
}

Test(px_nft, remote_match_resets_the_client)
{
    char peer[INET6_ADDRSTRLEN], buf[16];
    int lfd, cfd, sfd;

    rules(false);
    proxy_start();
    lfd = server_listen(AF_INET, "10.98.0.2");
    cfd = client_connect(true, AF_INET, "10.98.0.2", 3000);
    cr_assert_geq(cfd, 0);
    sfd = accept_peer(lfd, peer, sizeof(peer));
    cr_assert_eq(send(cfd, "evil42", 6, 0), 6);
    cr_assert_eq(recv(cfd, buf, sizeof(buf), 0), -1);
    cr_assert_eq(errno, ECONNRESET);
    cr_assert_leq(recv(sfd, buf, sizeof(buf), 0), 0);
    close(cfd);
    close(sfd);
    close(lfd);
}

Test(px_nft, the_box_own_connections_are_proxied)
{
    char peer[INET6_ADDRSTRLEN];
    int lfd, cfd, sfd;

    rules(false);
    proxy_start();
    lfd = server_listen(AF_INET, "10.98.0.2");
    cfd = client_connect(false, AF_INET, "10.98.0.2", 3000);
    cr_assert_geq(cfd, 0);
    sfd = accept_peer(lfd, peer, sizeof(peer));
    exchange(cfd, sfd);
    cr_assert_eq(proxied(), 1);
    close(cfd);
    close(sfd);
    close(lfd);
}

Test(px_nft, fail_open_without_a_proxy_goes_straight_to_the_service)
{
    char peer[INET6_ADDRSTRLEN];
    int lfd, cfd, sfd;

    rules(true);
    lfd = server_listen(AF_INET, "10.98.0.2");
    cfd = client_connect(true, AF_INET, "10.98.0.2", 3000);
    cr_assert_geq(cfd, 0, "a fail-open service must stay reachable");
    sfd = accept_peer(lfd, peer, sizeof(peer));
    cr_assert_str_eq(peer, "10.98.0.1");
    exchange(cfd, sfd);
    close(cfd);
    close(sfd);
    close(lfd);
}

Test(px_nft, fail_closed_without_a_proxy_lets_nothing_through)
{
    int lfd, cfd;

    rules(false);
    lfd = server_listen(AF_INET, "10.98.0.2");
    cfd = client_connect(true, AF_INET, "10.98.0.2", 1000);
    cr_assert_eq(cfd, -1, "a fail-closed service was reached without the proxy");
    close(lfd);
}

/* Both ways through a held connection, each read exactly what was sent (quick). */
static void ping_pong(int cfd, int sfd)
{
    char buf[8];

    cr_assert_eq(send(cfd, "ping", 4, 0), 4);
    cr_assert_eq(recv(sfd, buf, 4, MSG_WAITALL), 4);
    cr_assert_eq(memcmp(buf, "ping", 4), 0);
    cr_assert_eq(send(sfd, "pong!", 5, 0), 5, "send: %s", strerror(errno));
    cr_assert_eq(recv(cfd, buf, 5, MSG_WAITALL), 5);
    cr_assert_eq(memcmp(buf, "pong!", 5), 0);
}

/* A proxied connection whose service leaves the proxy layer (stopped, or moved to the other
 * layer) while another proxy-layer service stays: the proxy still holds it, and both ways must
 * still reach it; the service's replies must not go to the real client, whose reset would kill
 * the service's end. */
Test(px_nft, a_held_connection_keeps_its_way_back_after_its_service_leaves)
{
    struct ctl_nft_service other = {.id = SVC_ID + 1, .ipproto = IPPROTO_TCP,
                                    .port = SVC_PORT + 1};
    struct ctl_nft_service both[2] = {
        {.id = SVC_ID, .ipproto = IPPROTO_TCP, .port = SVC_PORT}, other};
    char peer[INET6_ADDRSTRLEN];
    int lfd, cfd, sfd, family;

    proxy_start();
    for (family = AF_INET; family != 0; family = family == AF_INET ? AF_INET6 : 0) {
        const char *srv = family == AF_INET ? "10.98.0.2" : "fd98::2";

        cr_assert_eq(ctl_nft_sync_layers(nft, NULL, 0, both, 2, PX_PORT), 0);
        lfd = server_listen(family, srv);
        cfd = client_connect(true, family, srv, 3000);
        cr_assert_geq(cfd, 0, "no connection");
        sfd = accept_peer(lfd, peer, sizeof(peer));
        ping_pong(cfd, sfd);
        cr_assert_eq(ctl_nft_sync_layers(nft, NULL, 0, &other, 1, PX_PORT), 0);
        ping_pong(cfd, sfd);
        usleep(100 * 1000); /* the service's delayed ACKs of those bytes, too */
        ping_pong(cfd, sfd);
        close(cfd);
        close(sfd);
        close(lfd);
    }
}

Test(px_nft, no_proxy_service_removes_rules_and_routing)
{
    FILE *f;
    char line[256];
    int n = 0;

    rules(false);
    cr_assert_eq(ctl_nft_sync_layers(nft, NULL, 0, NULL, 0, 0), 0);
    f = popen("ip rule; nft list ruleset", "r");
    cr_assert_not_null(f);
    while (fgets(line, sizeof(line), f) != NULL)
        if (strstr(line, "4066") != NULL || strstr(line, "tproxy") != NULL)
            n++;
    pclose(f);
    cr_assert_eq(n, 0);
}

/* The proxy relays UDP (px_udp.c) and the external layer hands it on: a UDP and a TCP service
 * on one address and port are two elements (the maps key the protocol); only TCP and UDP. */
Test(px_nft, udp_services_on_the_proxy_and_external_layers)
{
    struct ctl_nft_service s[2] = {
        {.id = SVC_ID, .ipproto = IPPROTO_UDP, .port = SVC_PORT, .external = true},
        {.id = SVC_ID + 1, .ipproto = IPPROTO_TCP, .port = SVC_PORT}};

    s[0].to.cidr.family = 4;
    s[0].to.cidr.prefix = 32;
    memcpy(s[0].to.cidr.addr, (uint8_t[]){127, 0, 0, 1}, 4);
    s[0].to.port = 9000;
    cr_assert_eq(ctl_nft_sync_layers(nft, NULL, 0, s, 2, PX_PORT), 0);
    s[0].external = false;
    cr_assert_eq(ctl_nft_sync_layers(nft, NULL, 0, s, 2, PX_PORT), 0);
    s[0].ipproto = IPPROTO_ICMP;
    cr_assert_eq(ctl_nft_sync_layers(nft, NULL, 0, s, 2, PX_PORT), -EINVAL);
}

struct sender {
    int fd;
    size_t total;
    uint64_t hash;
};

/* Pseudo-random bytes (xorshift), the same on both ends only through the proxy. */
static void *send_main(void *arg)
{
    struct sender *s = arg;
    static uint8_t buf[1 << 16];
    uint64_t x = 0x9e3779b97f4a7c15ull;
    size_t left = s->total;

    s->hash = FGX_HASH64_SEED;
    while (left > 0) {
        size_t n = left < sizeof(buf) ? left : sizeof(buf), i, off = 0;

        for (i = 0; i + 8 <= n; i += 8) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            memcpy(buf + i, &x, 8);
        }
        s->hash = fgx_hash64(buf, n, s->hash);
        while (off < n) {
            ssize_t k = send(s->fd, buf + off, n - off, MSG_NOSIGNAL);

            if (k <= 0)
                return NULL;
            off += (size_t)k;
        }
        left -= n;
    }
    shutdown(s->fd, SHUT_WR);
    return NULL;
}

/* 100 MiB from a remote client, checksummed at both ends; then the server answers after the
 * client's FIN (half-close) and the client reads it. */
Test(px_nft, large_transfer_arrives_intact, .timeout = 120)
{
    static uint8_t buf[1 << 16];
    struct sender s = {.total = 100u << 20};
    char peer[INET6_ADDRSTRLEN];
    uint64_t hash = FGX_HASH64_SEED, got = 0;
    pthread_t tid;
    int lfd, sfd;
    ssize_t n;

    rules(false);
    proxy_start();
    lfd = server_listen(AF_INET, "10.98.0.2");
    s.fd = client_connect(true, AF_INET, "10.98.0.2", 3000);
    cr_assert_geq(s.fd, 0);
    sfd = accept_peer(lfd, peer, sizeof(peer));
    cr_assert_eq(pthread_create(&tid, NULL, send_main, &s), 0);
    while ((n = recv(sfd, buf, sizeof(buf), 0)) > 0) {
        hash = fgx_hash64(buf, (size_t)n, hash);
        got += (uint64_t)n;
    }
    pthread_join(tid, NULL);
    cr_assert_eq(n, 0, "server: %s", strerror(errno));
    cr_assert_eq(got, s.total);
    cr_assert_eq(hash, s.hash);
    cr_assert_eq(send(sfd, "ok", 2, 0), 2);
    close(sfd);
    cr_assert_eq(recv(s.fd, buf, sizeof(buf), MSG_WAITALL), 2);
    cr_assert_eq(recv(s.fd, buf, sizeof(buf), 0), 0);
    close(s.fd);
    close(lfd);
}

/* An edge (issue 26 point 6): the service listens on SVC_PORT only; clients reach it on
 * EDGE_PORT, where the proxy alone listens (to=SVC_PORT). The service lives on this box (the
 * server's namespace): its replies to the proxy's upstream connection come back to the proxy
 * only if the pxo sets hold the port it connected to (SVC_PORT, no address of the service). */
#define EDGE_PORT 8443

static void edge_start(void)
{
    static const struct fgx_pattern evil = {F_EVIL, "evil[0-9]+", FGX_DIR_C2S, false};
    struct fgx_svcaddr a = {.cidr = {.family = 4, .prefix = 32, .addr = {10, 98, 0, 2}},
                            .port = EDGE_PORT,
                            .edge = FGX_EDGE_TCP,
                            .to_port = SVC_PORT};
    struct ctl_nft_service ns = {
        .id = SVC_ID, .ipproto = IPPROTO_TCP, .port = EDGE_PORT, .addr = a.cidr, .naddrs = 1};
    struct fgx_dp_service s = {.id = SVC_ID,
                               .ipproto = IPPROTO_TCP,
                               .port = EDGE_PORT,
                               .addr = a.cidr,
                               .addrs = &a,
                               .naddrs = 1};
    struct fgx_dp_ruleset rs = {.generation = 1, .nservices = 1, .services = &s};
    char err[256];

    ns.addrs[0] = a;
    cr_assert_eq(ctl_nft_sync_layers(nft, NULL, 0, &ns, 1, PX_PORT), 0);
    cr_assert_eq(px_worker_open(&w), 0);
    cr_assert_eq(px_worker_start(&w), 0);
    for (int d = 0; d < 2; d++)
        cr_assert_eq(fgx_ruleset_compile(&evil, 1, d == 0 ? FGX_DIR_C2S : FGX_DIR_S2C, IPPROTO_TCP,
                                         &s.db[d], err, sizeof(err)),
                     0, "%s", err);
    cr_assert_eq(px_ctl_apply(&w, &rs), 0);
    for (int d = 0; d < 2; d++)
        fgx_blob_release(&s.db[d]);
}

static void edge_case(bool remote_client)
{
    char peer[INET6_ADDRSTRLEN];
    struct sockaddr_storage d;
    socklen_t dl = sa_make(AF_INET, "10.98.0.2", EDGE_PORT, &d);
    struct timeval tv = {5, 0};
    int lfd, cfd, sfd;

    edge_start();
    lfd = server_listen(AF_INET, "10.98.0.2");
    if (remote_client)
        cr_assert_eq(setns(ns_cli, CLONE_NEWNET), 0);
    cfd = socket(AF_INET, SOCK_STREAM, 0);
    if (remote_client)
        cr_assert_eq(setns(ns_srv, CLONE_NEWNET), 0);
    setsockopt(cfd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(cfd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    cr_assert_eq(connect(cfd, (struct sockaddr *)&d, dl), 0, "connect to the edge: %s",
                 strerror(errno));
    sfd = accept_peer(lfd, peer, sizeof(peer));
    cr_assert_str_eq(peer, remote_client ? "10.98.0.1" : "10.98.0.2");
    exchange(cfd, sfd);
    cr_assert_eq(proxied(), 1);
    close(cfd);
    close(sfd);
    close(lfd);
}

Test(px_nft, an_edge_reaches_the_service_on_its_own_port)
{
    edge_case(true);
}

Test(px_nft, an_edge_from_the_box_itself_gets_the_services_replies)
{
    edge_case(false);
}
