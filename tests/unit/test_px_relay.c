/* Unit tests for proxyworker's accept, relay and match stages (px_accept.c, px_relay.c,
 * px_match.c, px_stats.c, px_ctl.c): each test runs in a network namespace of its own (Criterion
 * runs every test in its own process; unshare(CLONE_NEWNET) there), with the tproxy rules and
 * policy routing controld installs, a real server and a real client on addresses of lo, and
 * the worker's threads in-process. */
#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "fgx/addr.h"
#include "fgx/log.h"
#include "fgx/ruleset.h"
#include "proxyworker/px.h"
#include "proxyworker/px_stats.h"

#define PX_PORT 15001
#define SVC_PORT 8080
#define SVC_ID 1u
#define F_EVIL 5u
#define F_ZZZ 6u

static struct px_worker w;

static void sh(const char *cmd)
{
    int rc = system(cmd);

    cr_assert_eq(rc, 0, "command failed (%d): %s", rc, cmd);
}

static void netns_up(void)
{
    cr_assert_eq(unshare(CLONE_NEWNET), 0, "unshare: %s", strerror(errno));
    sh("ip link set lo up && "
       "ip addr add 10.66.0.1/32 dev lo && ip addr add 10.66.0.2/32 dev lo && "
       "ip addr add 10.66.0.3/32 dev lo && "
       "ip -6 addr add fd66::1/128 dev lo nodad && ip -6 addr add fd66::2/128 dev lo nodad && "
       "ip -6 addr add fd66::3/128 dev lo nodad && "
       "ip -6 addr add fd66:0:0:1::2/128 dev lo nodad");
    sh("ip rule add fwmark 0x0fe40001 lookup 4001 && "
       "ip route add local default dev lo table 4001 && "
       "ip -6 rule add fwmark 0x0fe40001 lookup 4001 && "
       "ip -6 route add local ::/0 dev lo table 4001");
    sh("nft -f - <<'EOF'\n"
       "table inet fgxpx {\n"
       "  chain pre {\n"
       "    type filter hook prerouting priority mangle; policy accept;\n"
       "    meta mark 0x0fe40000 accept\n"
       "    meta l4proto tcp socket transparent 1 meta mark set 0x0fe40001 accept\n"
       "    tcp dport 8080 tproxy to :15001 meta mark set 0x0fe40001 accept\n"
       "  }\n"
       "}\n"
       "EOF");
}

static void setup(void)
{
    fgx_log_init("test_px_relay", FGX_LOG_WARN);
    netns_up();
    memset(&w, 0, sizeof(w));
    w.nthreads = 2;
    w.port = PX_PORT;
    w.max_conns = 64;
    w.idle_ms = 60000;
}

static void teardown(void)
{
    px_worker_stop(&w);
}

TestSuite(px_relay, .init = setup, .fini = teardown, .timeout = 30);

static void start(void)
{
    cr_assert_eq(px_worker_open(&w), 0);
    cr_assert_eq(px_worker_start(&w), 0);
}

/* Compile the patterns for the service (TCP, port SVC_PORT) and apply them as the control
 * thread does on a RULESET: returns once every thread uses them. */
static uint8_t midstream = FGX_MIDSTREAM_RESET; /* the service's policy in apply() */
static const char *svc_ip;                      /* the service's --ip in apply(); NULL: any */

static void apply_id(uint32_t id, uint64_t gen, size_t n, const struct fgx_pattern *pats)
{
    struct fgx_dp_service s = {
        .id = id, .ipproto = IPPROTO_TCP, .port = SVC_PORT, .midstream = midstream};
    struct fgx_dp_ruleset rs = {.generation = gen, .nservices = 1, .services = &s};
    char err[256];
    int d;

    if (svc_ip != NULL)
        cr_assert_eq(fgx_cidr_parse(svc_ip, &s.addr), 0);
    for (d = 0; d < 2; d++)
        cr_assert_eq(fgx_ruleset_compile(pats, n, d == 0 ? FGX_DIR_C2S : FGX_DIR_S2C,
                                         IPPROTO_TCP, &s.db[d], err, sizeof(err)),
                     0, "%s", err);
    cr_assert_eq(px_ctl_apply(&w, &rs), 0);
    for (d = 0; d < 2; d++)
        fgx_blob_release(&s.db[d]);
}

static void apply(uint64_t gen, size_t n, const struct fgx_pattern *pats)
{
    apply_id(SVC_ID, gen, n, pats);
}

static void apply_none(uint64_t gen)
{
    struct fgx_dp_ruleset rs = {.generation = gen};

    cr_assert_eq(px_ctl_apply(&w, &rs), 0);
}

static const struct fgx_pattern P_EVIL = {F_EVIL, "evil[0-9]+", FGX_DIR_C2S, false};
static const struct fgx_pattern P_ZZZ = {F_ZZZ, "zzz", FGX_DIR_BOTH, false};

/* ---- sockets ---- */

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

/* A client bound to ip (so the address the server sees is known), connected to the service. */
static int client_connect(int family, const char *ip, const char *dst)
{
    struct sockaddr_storage b, d;
    socklen_t bl = sa_make(family, ip, 0, &b), dl = sa_make(family, dst, SVC_PORT, &d);
    int fd = socket(family, SOCK_STREAM, 0);

    cr_assert_neq(fd, -1);
    cr_assert_eq(bind(fd, (struct sockaddr *)&b, bl), 0);
    cr_assert_eq(connect(fd, (struct sockaddr *)&d, dl), 0, "connect: %s", strerror(errno));
    return fd;
}

static void set_timeout(int fd, int ms)
{
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};

    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

static int accept_peer(int lfd, struct sockaddr_storage *peer)
{
    socklen_t len = sizeof(*peer);
    int fd = accept(lfd, (struct sockaddr *)peer, &len);

    cr_assert_neq(fd, -1, "accept: %s", strerror(errno));
    set_timeout(fd, 5000);
    return fd;
}

static void send_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;

    while (len > 0) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);

        cr_assert_gt(n, 0, "send: %s", strerror(errno));
        p += n;
        len -= (size_t)n;
    }
}

static void recv_exact(int fd, void *buf, size_t len)
{
    char *p = buf;

    while (len > 0) {
        ssize_t n = recv(fd, p, len, 0);

        cr_assert_gt(n, 0, "recv: %zd (%s)", n, n < 0 ? strerror(errno) : "EOF");
        p += n;
        len -= (size_t)n;
    }
}

/* Read until EOF or error; returns bytes read, *err set to the errno of an error (0 for EOF). */
static size_t recv_until_end(int fd, char *buf, size_t cap, int *err)
{
    size_t got = 0;

    for (;;) {
        ssize_t n = recv(fd, buf + got, cap - got, 0);

        if (n > 0) {
            got += (size_t)n;
            if (got == cap)
                got = 0; /* only the tail matters to callers that pass a small buffer */
            continue;
        }
        *err = n == 0 ? 0 : errno;
        return got;
    }
}

static uint64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};

    nanosleep(&ts, NULL);
}

/* ---- tests ---- */

static void relay_echo(int family, const char *srv, const char *cli)
{
    struct sockaddr_storage peer, want;
    int lfd, cfd, sfd;
    char buf[16];

    start();
    apply(1, 1, &P_EVIL);
    lfd = server_listen(family, srv);
    cfd = client_connect(family, cli, srv);
    set_timeout(cfd, 5000);
    sfd = accept_peer(lfd, &peer);
    /* The real service sees the client's own address, not the proxy's. */
    sa_make(family, cli, 0, &want);
    if (family == AF_INET)
        cr_assert_eq(memcmp(&((struct sockaddr_in *)&peer)->sin_addr,
                            &((struct sockaddr_in *)&want)->sin_addr, 4),
                     0);
    else
        cr_assert_eq(memcmp(&((struct sockaddr_in6 *)&peer)->sin6_addr,
                            &((struct sockaddr_in6 *)&want)->sin6_addr, 16),
                     0);
    /* ... from a privileged port, below every port a client (or a NAT for it) takes, so never
     * a client's own. */
    {
        unsigned port = ntohs(family == AF_INET ? ((struct sockaddr_in *)&peer)->sin_port
                                                : ((struct sockaddr_in6 *)&peer)->sin6_port);

        cr_assert(port >= 1 && port <= 1023, "onward port %u", port);
    }
    send_all(cfd, "hello", 5);
    recv_exact(sfd, buf, 5);
    cr_assert_eq(memcmp(buf, "hello", 5), 0);
    send_all(sfd, "world!", 6);
    recv_exact(cfd, buf, 6);
    cr_assert_eq(memcmp(buf, "world!", 6), 0);
    close(cfd);
    close(sfd);
    close(lfd);
}

Test(px_relay, relays_ipv4_with_the_client_address)
{
    relay_echo(AF_INET, "10.66.0.1", "10.66.0.2");
}

Test(px_relay, relays_ipv6_with_the_client_address)
{
    relay_echo(AF_INET6, "fd66::1", "fd66::2");
}

/* Every privileged port of the client's address taken by a connection to the service (the
 * 4-tuples an onward connection would need: connect() says EADDRNOTAVAIL for each): the proxy
 * tries other ports, then takes the kernel's choice, and the connection gets through. */
Test(px_relay, onward_ports_all_taken_falls_back_to_the_kernel)
{
    static int squat[1024];
    struct sockaddr_storage d, b, peer;
    socklen_t dl = sa_make(AF_INET, "10.66.0.1", SVC_PORT, &d), bl;
    int lfd, cfd, sfd = -1, one = 1, mark = 0x0fe40000;
    char buf[8];

    start();
    apply(1, 1, &P_EVIL);
    lfd = socket(AF_INET, SOCK_STREAM, 0);
    cr_assert_neq(lfd, -1);
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    cr_assert_eq(bind(lfd, (struct sockaddr *)&d, dl), 0);
    cr_assert_eq(listen(lfd, 2048), 0);
    for (int p = 1; p <= 1023; p++) {
        bl = sa_make(AF_INET, "10.66.0.2", (uint16_t)p, &b);
        squat[p] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
        cr_assert_neq(squat[p], -1);
        setsockopt(squat[p], SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        /* the proxy's mark: straight to the service, not through tproxy */
        setsockopt(squat[p], SOL_SOCKET, SO_MARK, &mark, sizeof(mark));
        cr_assert_eq(bind(squat[p], (struct sockaddr *)&b, bl), 0, "port %d: %s", p,
                     strerror(errno));
        cr_assert(connect(squat[p], (struct sockaddr *)&d, dl) == 0 || errno == EINPROGRESS);
    }
    cfd = client_connect(AF_INET, "10.66.0.2", "10.66.0.1");
    set_timeout(cfd, 5000);
    send_all(cfd, "hello", 5);
    set_timeout(lfd, 5000);
    for (int i = 0; i < 1100 && sfd < 0; i++) {
        int fd = accept_peer(lfd, &peer);
        unsigned port = ntohs(((struct sockaddr_in *)&peer)->sin_port);

        if (port > 1023)
            sfd = fd; /* not a squatter: the proxied connection */
        else
            close(fd);
    }
    cr_assert_geq(sfd, 0, "the proxied connection never reached the service");
    set_timeout(sfd, 5000);
    recv_exact(sfd, buf, 5);
    cr_assert_eq(memcmp(buf, "hello", 5), 0);
    send_all(sfd, "ok", 2);
    recv_exact(cfd, buf, 2);
    cr_assert_eq(memcmp(buf, "ok", 2), 0);
    close(sfd);
    close(cfd);
    for (int p = 1; p <= 1023; p++)
        close(squat[p]);
    close(lfd);
}

/* Onward ports are privileged (1-1023) and SO_REUSEADDR: the onward leg closes first here, so
 * each port it used stays in TIME_WAIT to this service, and a port bound again connects over
 * its TIME_WAIT (bind then connect, with timestamps: the kernel reuses it). 1100 connections
 * one after the other, every one from a privileged port. */
Test(px_relay, onward_ports_privileged_and_reused_past_time_wait)
{
    enum { N = 1100 };
    unsigned privileged = 0;
    int lfd;

    start();
    apply(1, 1, &P_EVIL);
    lfd = server_listen(AF_INET, "10.66.0.1");
    for (int i = 0; i < N; i++) {
        struct sockaddr_storage peer;
        int cfd = client_connect(AF_INET, "10.66.0.2", "10.66.0.1"), sfd;
        unsigned port;
        char b[4];

        set_timeout(cfd, 5000);
        sfd = accept_peer(lfd, &peer);
        set_timeout(sfd, 5000);
        port = ntohs(((struct sockaddr_in *)&peer)->sin_port);
        privileged += port >= 1 && port <= 1023;
        send_all(cfd, "x", 1);
        recv_exact(sfd, b, 1);
        cr_assert_eq(shutdown(cfd, SHUT_WR), 0);
        cr_assert_eq(recv(sfd, b, sizeof(b), 0), 0, "connection %d: the client's FIN", i);
        close(sfd); /* after the onward leg's FIN: that leg is the one in TIME_WAIT */
        cr_assert_eq(recv(cfd, b, sizeof(b), 0), 0, "connection %d: the service's FIN", i);
        close(cfd);
    }
    cr_assert_eq(privileged, N, "onward ports below 1024: %u of %d", privileged, N);
    close(lfd);
}

Test(px_relay, match_resets_both_sides_and_records_the_event)
{
    struct fgx_dp_stats st;
    struct sockaddr_storage peer;
    char buf[64];
    int lfd, cfd, sfd, err = 0;
    size_t got;

    start();
    apply(1, 1, &P_EVIL);
    lfd = server_listen(AF_INET, "10.66.0.1");
    cfd = client_connect(AF_INET, "10.66.0.2", "10.66.0.1");
    set_timeout(cfd, 5000);
    sfd = accept_peer(lfd, &peer);
    send_all(cfd, "GET ev", 6);
    recv_exact(sfd, buf, 6);
    /* The rest of the match, split over two sends: scanned as one stream. */
    send_all(cfd, "il1337 and more", 15);
    got = recv_until_end(sfd, buf, sizeof(buf), &err);
    cr_assert_eq(got, 0, "the server got %zu bytes of the matching send", got);
    cr_assert_eq(err, ECONNRESET, "server side: %s", strerror(err));
    got = recv_until_end(cfd, buf, sizeof(buf), &err);
    cr_assert_eq(got, 0);
    cr_assert_eq(err, ECONNRESET, "client side: %s", strerror(err));

    cr_assert_eq(px_stats_collect(&w, &st), 0);
    cr_assert_eq(st.nfilters, 1);
    cr_assert_eq(st.filters[0].filter_id, F_EVIL);
    cr_assert_eq(st.filters[0].blocked, 1);
    cr_assert_eq(st.nevents, 1);
    cr_assert_eq(st.events[0].filter_id, F_EVIL);
    cr_assert_eq(st.events[0].service_id, SVC_ID);
    cr_assert_eq(st.events[0].dir, FGX_DIR_C2S);
    cr_assert_eq(st.events[0].dport, SVC_PORT);
    cr_assert_eq(memcmp(st.events[0].src, (uint8_t[]){10, 66, 0, 2}, 4), 0);
    /* Before the match end (the first digit) the bytes reach back into those that passed
     * before; after it comes the rest of the matching read. */
    cr_assert_eq(st.events[0].match_end, 9);
    cr_assert_eq(st.events[0].excerpt_len, 21);
    cr_assert_eq(memcmp(st.events[0].excerpt, "GET evil1337 and more", 21), 0);
    cr_assert_eq(st.nservices, 1);
    cr_assert_eq(st.services[0].accepted, 1);
    cr_assert_eq(st.services[0].dropped, 1);
    {
        struct fgx_dp_msg m = {.type = FGX_DP_STATS, .u.stats = st};

        fgx_dp_msg_release(&m);
    }
    close(cfd);
    close(sfd);
    close(lfd);
}

Test(px_relay, server_to_client_match_blocks_the_response)
{
    struct sockaddr_storage peer;
    char buf[64];
    int lfd, cfd, sfd, err = 0;

    start();
    apply(1, 1, &P_ZZZ);
    lfd = server_listen(AF_INET, "10.66.0.1");
    cfd = client_connect(AF_INET, "10.66.0.2", "10.66.0.1");
    set_timeout(cfd, 5000);
    sfd = accept_peer(lfd, &peer);
    send_all(sfd, "flag{zzz}", 9);
    cr_assert_eq(recv_until_end(cfd, buf, sizeof(buf), &err), 0);
    cr_assert_eq(err, ECONNRESET);
    close(cfd);
    close(sfd);
    close(lfd);
}

Test(px_relay, half_close_passes_through)
{
    struct sockaddr_storage peer;
    char buf[64];
    int lfd, cfd, sfd, err = -1;

    start();
    apply(1, 1, &P_EVIL);
    lfd = server_listen(AF_INET, "10.66.0.1");
    cfd = client_connect(AF_INET, "10.66.0.2", "10.66.0.1");
    set_timeout(cfd, 5000);
    sfd = accept_peer(lfd, &peer);
    send_all(cfd, "request", 7);
    cr_assert_eq(shutdown(cfd, SHUT_WR), 0);
    /* The server sees the request, then EOF, and can still answer. */
    cr_assert_eq(recv_until_end(sfd, buf, sizeof(buf), &err), 7);
    cr_assert_eq(err, 0);
    send_all(sfd, "answer", 6);
    close(sfd);
    cr_assert_eq(recv_until_end(cfd, buf, sizeof(buf), &err), 6);
    cr_assert_eq(err, 0);
    cr_assert_eq(memcmp(buf, "answer", 6), 0);
    close(cfd);
    close(lfd);
}

/* A server that does not read: what the client manages to send stays bounded by the socket
 * buffers (a few MiB each here) and the one read the proxy keeps; then everything arrives, in
 * order. A proxy that kept reading would take all 64 MiB. */
Test(px_relay, slow_reader_bounds_what_is_buffered)
{
    enum { CHUNK = 65536, TRY = 64 << 20 };
    struct sockaddr_storage peer;
    static char pat[CHUNK + 26], buf[CHUNK];
    uint64_t sent = 0, got = 0;
    int lfd, cfd, sfd, i, idle = 0;

    start();
    apply(1, 1, &P_EVIL);
    lfd = server_listen(AF_INET, "10.66.0.1");
    cfd = client_connect(AF_INET, "10.66.0.2", "10.66.0.1");
    sfd = accept_peer(lfd, &peer);
    for (i = 0; i < (int)sizeof(pat); i++)
        pat[i] = (char)('a' + i % 26);
    cr_assert_eq(fcntl(cfd, F_SETFL, O_NONBLOCK), 0);
    /* Send until nothing more is taken for 300 ms. */
    while (sent < TRY && idle < 15) {
        ssize_t n = send(cfd, pat + sent % 26, CHUNK, MSG_NOSIGNAL);

        if (n > 0) {
            sent += (uint64_t)n;
            idle = 0;
            continue;
        }
        cr_assert_eq(errno, EAGAIN);
        idle++;
        sleep_ms(20);
    }
    cr_assert_lt(sent, (uint64_t)TRY / 2, "sent %llu", (unsigned long long)sent);
    cr_assert_gt(sent, 0);
    while (got < sent) {
        ssize_t n = recv(sfd, buf, sizeof(buf), 0);

        cr_assert_gt(n, 0);
        for (i = 0; i < n; i++)
            cr_assert_eq(buf[i], 'a' + (char)((got + (uint64_t)i) % 26), "byte %llu differs",
                         (unsigned long long)(got + (uint64_t)i));
        got += (uint64_t)n;
    }
    cr_assert_eq(got, sent);
    close(cfd);
    close(sfd);
    close(lfd);
}

/* The NFQUEUE layer's hot-swap contract: a partial match carries over a ruleset change. */
Test(px_relay, partial_match_survives_a_ruleset_change)
{
    const struct fgx_pattern both[2] = {P_EVIL, P_ZZZ};
    struct sockaddr_storage peer;
    char buf[64];
    int lfd, cfd, sfd, err = 0;

    start();
    apply(1, 1, &P_EVIL);
    lfd = server_listen(AF_INET, "10.66.0.1");
    cfd = client_connect(AF_INET, "10.66.0.2", "10.66.0.1");
    set_timeout(cfd, 5000);
    sfd = accept_peer(lfd, &peer);
    send_all(cfd, "ev", 2);
    recv_exact(sfd, buf, 2);
    apply(2, 2, both);
    send_all(cfd, "il1337", 6);
    cr_assert_eq(recv_until_end(sfd, buf, sizeof(buf), &err), 0);
    cr_assert_eq(err, ECONNRESET);
    close(cfd);
    close(sfd);
    close(lfd);
}

Test(px_relay, a_removed_filter_stops_matching_open_connections)
{
    struct sockaddr_storage peer;
    char buf[64];
    int lfd, cfd, sfd;

    start();
    apply(1, 1, &P_EVIL);
    lfd = server_listen(AF_INET, "10.66.0.1");
    cfd = client_connect(AF_INET, "10.66.0.2", "10.66.0.1");
    set_timeout(cfd, 5000);
    sfd = accept_peer(lfd, &peer);
    send_all(cfd, "hi", 2);
    recv_exact(sfd, buf, 2);
    apply(2, 1, &P_ZZZ);
    send_all(cfd, "evil1337", 8);
    recv_exact(sfd, buf, 8);
    cr_assert_eq(memcmp(buf, "evil1337", 8), 0);
    close(cfd);
    close(sfd);
    close(lfd);
}

/* The client's end of a connection the proxy reset: ECONNRESET, nothing read. */
static void assert_reset(int fd)
{
    char buf[64];
    int err = 0;

    set_timeout(fd, 5000);
    cr_assert_eq(recv_until_end(fd, buf, sizeof(buf), &err), 0);
    cr_assert_eq(err, ECONNRESET, "%s", err ? strerror(err) : "EOF");
}

/* A round trip through the proxy: cfd sends, sfd (the service's end) reads it. */
static void assert_relays(int cfd, int sfd, const char *what)
{
    char buf[64];
    size_t n = strlen(what);

    send_all(cfd, what, n);
    recv_exact(sfd, buf, n);
    cr_assert_eq(memcmp(buf, what, n), 0);
}

static struct px_own_stats own_stats(void)
{
    struct px_own_stats own;

    px_stats_own(&w, &own);
    return own;
}

/* At the limit a new connection is not refused: the one that sent nothing yet makes room
 * (an idler never keeps a new client out), and the live one stays. */
Test(px_relay, at_the_limit_a_silent_connection_makes_room)
{
    struct sockaddr_storage peer;
    int lfd, c1, s1, c2, s2, c3, s3;

    w.nthreads = 1; /* one thread holds them all: the victim is known */
    w.max_conns = 2;
    start();
    apply(1, 1, &P_EVIL);
    lfd = server_listen(AF_INET, "10.66.0.1");
    c1 = client_connect(AF_INET, "10.66.0.2", "10.66.0.1");
    s1 = accept_peer(lfd, &peer);
    assert_relays(c1, s1, "live");
    c2 = client_connect(AF_INET, "10.66.0.2", "10.66.0.1");
    s2 = accept_peer(lfd, &peer);
    c3 = client_connect(AF_INET, "10.66.0.3", "10.66.0.1");
    s3 = accept_peer(lfd, &peer);
    assert_relays(c3, s3, "new");
    assert_reset(c2);
    assert_reset(s2);
    assert_relays(c1, s1, "still");
    cr_assert_eq(own_stats().evicted, 1);
    cr_assert_eq(own_stats().conns_refused, 0);
    close(c1), close(s1), close(c2), close(s2), close(c3), close(s3), close(lfd);
}

/* A connection for no service is refused before the limit: it takes nobody's place. */
Test(px_relay, at_the_limit_a_connection_for_no_service_takes_no_place)
{
    struct sockaddr_storage peer;
    int lfd, c1, s1, c2;

    w.nthreads = 1;
    w.max_conns = 1;
    svc_ip = "10.66.0.1"; /* the tproxy rule sends 10.66.0.3:8080 too, for no service */
    start();
    apply(1, 1, &P_EVIL);
    lfd = server_listen(AF_INET, "10.66.0.1");
    c1 = client_connect(AF_INET, "10.66.0.2", "10.66.0.1");
    s1 = accept_peer(lfd, &peer);
    c2 = client_connect(AF_INET, "10.66.0.2", "10.66.0.3");
    assert_reset(c2);
    assert_relays(c1, s1, "still here");
    cr_assert_eq(own_stats().evicted, 0);
    cr_assert_eq(own_stats().unclassified, 1);
    close(c1), close(s1), close(c2), close(lfd);
}

/* With no silent one, the least recently active goes. */
Test(px_relay, at_the_limit_the_least_recently_active_makes_room)
{
    struct sockaddr_storage peer;
    int lfd, c1, s1, c2, s2, c3, s3;

    w.nthreads = 1;
    w.max_conns = 2;
    start();
    apply(1, 1, &P_EVIL);
    lfd = server_listen(AF_INET6, "fd66::1");
    c1 = client_connect(AF_INET6, "fd66::2", "fd66::1");
    s1 = accept_peer(lfd, &peer);
    c2 = client_connect(AF_INET6, "fd66::2", "fd66::1");
    s2 = accept_peer(lfd, &peer);
    assert_relays(c1, s1, "one");
    assert_relays(c2, s2, "two");
    assert_relays(c1, s1, "one again");
    c3 = client_connect(AF_INET6, "fd66::2", "fd66::1");
    s3 = accept_peer(lfd, &peer);
    assert_relays(c3, s3, "three");
    assert_reset(c2);
    assert_relays(c1, s1, "one stays");
    cr_assert_eq(own_stats().evicted, 1);
    close(c1), close(s1), close(c2), close(s2), close(c3), close(s3), close(lfd);
}

/* A source at its limit makes room among its own connections: its oldest silent one goes,
 * never another source's (even an older, silent one); within an IPv6 /64 another address is
 * the same source, another /64 is not. */
static void per_source_limit(int family, const char *srv, const char *cli, const char *same,
                             const char *other)
{
    struct sockaddr_storage peer;
    int lfd, c[3], s[3], co, so, i;

    w.nthreads = 1; /* the source's connections are all on the accepting thread */
    w.max_per_src = 2;
    start();
    apply(1, 1, &P_EVIL);
    lfd = server_listen(family, srv);
    co = client_connect(family, other, srv); /* the oldest, silent, of another source */
    so = accept_peer(lfd, &peer);
    for (i = 0; i < 2; i++) {
        c[i] = client_connect(family, cli, srv);
        s[i] = accept_peer(lfd, &peer);
    }
    c[2] = client_connect(family, same, srv);
    s[2] = accept_peer(lfd, &peer);
    assert_relays(c[2], s[2], "the source's newest");
    assert_reset(c[0]);
    assert_relays(c[1], s[1], "kept");
    assert_relays(co, so, "another source is never touched");
    cr_assert_eq(own_stats().evicted, 1);
    cr_assert_eq(own_stats().src_refused, 0);
    /* All of the source's active now: the least recently active of them goes. */
    assert_relays(c[1], s[1], "more");
    {
        int c4 = client_connect(family, cli, srv), s4 = accept_peer(lfd, &peer);

        assert_relays(c4, s4, "a fourth");
        assert_reset(c[2]);
        assert_relays(c[1], s[1], "kept again");
        close(c4), close(s4);
    }
    cr_assert_eq(own_stats().evicted, 2);
    for (i = 0; i < 3; i++)
        close(c[i]), close(s[i]);
    close(co), close(so), close(lfd);
}

Test(px_relay, per_source_limit_ipv4)
{
    per_source_limit(AF_INET, "10.66.0.1", "10.66.0.2", "10.66.0.2", "10.66.0.3");
}

Test(px_relay, per_source_limit_ipv6_by_64)
{
    per_source_limit(AF_INET6, "fd66::1", "fd66::2", "fd66::3", "fd66:0:0:1::2");
}

/* Nothing from either side within the first-byte timeout: closed. A service that speaks first
 * makes the connection live, as a client that sends does. */
Test(px_relay, first_byte_timeout_spares_server_first_connections)
{
    struct sockaddr_storage peer;
    char buf[16];
    int lfd, cq, sq, cb, sb, cc, sc;
    uint64_t t0;

    w.first_byte_ms = 1000;
    start();
    apply(1, 1, &P_EVIL);
    lfd = server_listen(AF_INET, "10.66.0.1");
    cq = client_connect(AF_INET, "10.66.0.2", "10.66.0.1");
    sq = accept_peer(lfd, &peer);
    cb = client_connect(AF_INET, "10.66.0.2", "10.66.0.1");
    sb = accept_peer(lfd, &peer);
    cc = client_connect(AF_INET, "10.66.0.2", "10.66.0.1");
    sc = accept_peer(lfd, &peer);
    t0 = now_ms();
    send_all(sb, "220 banner", 10); /* server first */
    set_timeout(cb, 5000);
    recv_exact(cb, buf, 10);
    assert_relays(cc, sc, "client first");
    assert_reset(cq);
    assert_reset(sq);
    cr_assert_geq(now_ms() - t0, 900, "closed early");
    sleep_ms(1500);
    assert_relays(cb, sb, "the banner's client answers");
    assert_relays(cc, sc, "and the other");
    cr_assert_eq(own_stats().silent_closed, 1);
    close(cq), close(sq), close(cb), close(sb), close(cc), close(sc), close(lfd);
}

static const struct fgx_pattern P_ZNUM = {F_ZZZ, "zzz[0-9]+", FGX_DIR_BOTH, false};

/* The case: bytes relayed while the service was stopped; at its start the connection
 * is reset, so neither zzz555 nor zzz666 reaches it. */
static void stop_send_start(int family, const char *srv, const char *cli)
{
    struct sockaddr_storage peer;
    char buf[64];
    int lfd, cfd, sfd, err = 0;
    size_t got;

    start();
    apply(1, 1, &P_ZNUM);
    lfd = server_listen(family, srv);
    cfd = client_connect(family, cli, srv);
    sfd = accept_peer(lfd, &peer);
    assert_relays(cfd, sfd, "hello");
    apply_none(2);
    assert_relays(cfd, sfd, "while stopped zzz1"); /* unfiltered while stopped */
    apply(3, 1, &P_ZNUM);
    /* Reset at the start, not at the next send. */
    assert_reset(cfd);
    (void)send(cfd, "zzz555", 6, MSG_NOSIGNAL);
    sleep_ms(200);
    (void)send(cfd, "zzz666", 6, MSG_NOSIGNAL);
    got = recv_until_end(sfd, buf, sizeof(buf), &err);
    cr_assert_eq(got, 0, "the service read %zu more bytes", got);
    cr_assert_eq(err, ECONNRESET);
    cr_assert_eq(own_stats().midstream_reset, 1);
    close(cfd), close(sfd), close(lfd);
}

Test(px_relay, stop_send_start_resets_ipv4)
{
    stop_send_start(AF_INET, "10.66.0.1", "10.66.0.2");
}

Test(px_relay, stop_send_start_resets_ipv6)
{
    stop_send_start(AF_INET6, "fd66::1", "fd66::2");
}

/* Nothing moved while the service was away: the connection goes on with its streams, so a
 * match begun before the stop completes after the start. With new_id, the service came back
 * removed and re-added (another id, the same port). */
static void stop_start_keeps_stream(int family, const char *srv, const char *cli, uint32_t new_id)
{
    struct sockaddr_storage peer;
    char buf[64];
    int lfd, cfd, sfd, err = 0;

    start();
    apply(1, 1, &P_ZNUM);
    lfd = server_listen(family, srv);
    cfd = client_connect(family, cli, srv);
    sfd = accept_peer(lfd, &peer);
    assert_relays(cfd, sfd, "zzz");
    apply_none(2);
    apply_id(new_id, 3, 1, &P_ZNUM);
    send_all(cfd, "555", 3);
    assert_reset(cfd);
    cr_assert_eq(recv_until_end(sfd, buf, sizeof(buf), &err), 0, "555 reached the service");
    cr_assert_eq(err, ECONNRESET);
    cr_assert_eq(own_stats().midstream_reset, 0);
    close(cfd), close(sfd), close(lfd);
}

Test(px_relay, stop_start_with_nothing_sent_keeps_the_stream_ipv4)
{
    stop_start_keeps_stream(AF_INET, "10.66.0.1", "10.66.0.2", SVC_ID);
}

Test(px_relay, stop_start_with_nothing_sent_keeps_the_stream_ipv6)
{
    stop_start_keeps_stream(AF_INET6, "fd66::1", "fd66::2", SVC_ID);
}

/* Policy scan: the connection that moved bytes while the service was away is scanned on with
 * a fresh stream: honest bytes pass, zzz555 is blocked, and what came before the start cannot
 * complete a match (the fresh stream does not see it). */
static void stop_send_start_scan(int family, const char *srv, const char *cli)
{
    struct sockaddr_storage peer;
    char buf[64];
    int lfd, cfd, sfd, err = 0;

    midstream = FGX_MIDSTREAM_SCAN;
    start();
    apply(1, 1, &P_ZNUM);
    lfd = server_listen(family, srv);
    cfd = client_connect(family, cli, srv);
    sfd = accept_peer(lfd, &peer);
    assert_relays(cfd, sfd, "hello");
    apply_none(2);
    assert_relays(cfd, sfd, "while stopped zzz");
    apply(3, 1, &P_ZNUM);
    assert_relays(cfd, sfd, "1 honest after the start");
    set_timeout(sfd, 300);
    send_all(sfd, "an answer", 9);
    recv_exact(cfd, buf, 9);
    cr_assert_eq(own_stats().midstream_rescan, 1);
    cr_assert_eq(own_stats().midstream_reset, 0);
    send_all(cfd, "zzz555", 6);
    assert_reset(cfd);
    set_timeout(sfd, 5000);
    cr_assert_eq(recv_until_end(sfd, buf, sizeof(buf), &err), 0, "zzz555 reached the service");
    cr_assert_eq(err, ECONNRESET);
    close(cfd), close(sfd), close(lfd);
}

Test(px_relay, stop_send_start_scans_afresh_under_policy_scan_ipv4)
{
    stop_send_start_scan(AF_INET, "10.66.0.1", "10.66.0.2");
}

Test(px_relay, stop_send_start_scans_afresh_under_policy_scan_ipv6)
{
    stop_send_start_scan(AF_INET6, "fd66::1", "fd66::2");
}

/* Under policy scan a connection that moved nothing while away keeps its stream too. */
Test(px_relay, policy_scan_keeps_the_stream_when_nothing_moved)
{
    midstream = FGX_MIDSTREAM_SCAN;
    stop_start_keeps_stream(AF_INET, "10.66.0.1", "10.66.0.2", SVC_ID);
}

Test(px_relay, a_service_readded_at_the_port_takes_the_connection_back)
{
    stop_start_keeps_stream(AF_INET, "10.66.0.1", "10.66.0.2", SVC_ID + 1);
}

Test(px_relay, a_connection_for_no_service_is_refused)
{
    char buf[8];
    int lfd, cfd, err = 0;

    start();
    apply_none(1);
    lfd = server_listen(AF_INET, "10.66.0.1");
    cfd = client_connect(AF_INET, "10.66.0.2", "10.66.0.1");
    set_timeout(cfd, 5000);
    cr_assert_eq(recv_until_end(cfd, buf, sizeof(buf), &err), 0);
    cr_assert_eq(err, ECONNRESET);
    close(cfd);
    close(lfd);
}

Test(px_relay, an_unreachable_service_resets_the_client)
{
    char buf[8];
    int cfd, err = 0;

    start();
    apply(1, 1, &P_EVIL);
    cfd = client_connect(AF_INET, "10.66.0.2", "10.66.0.1"); /* nobody listens there */
    set_timeout(cfd, 5000);
    cr_assert_eq(recv_until_end(cfd, buf, sizeof(buf), &err), 0);
    cr_assert_eq(err, ECONNRESET);
    close(cfd);
}

Test(px_relay, idle_connections_are_closed)
{
    struct sockaddr_storage peer;
    char buf[8];
    int lfd, cfd, sfd, err = 0;

    w.idle_ms = 200;
    start();
    apply(1, 1, &P_EVIL);
    lfd = server_listen(AF_INET, "10.66.0.1");
    cfd = client_connect(AF_INET, "10.66.0.2", "10.66.0.1");
    set_timeout(cfd, 5000);
    sfd = accept_peer(lfd, &peer);
    cr_assert_eq(recv_until_end(cfd, buf, sizeof(buf), &err), 0);
    cr_assert_eq(err, ECONNRESET);
    cr_assert_eq(recv_until_end(sfd, buf, sizeof(buf), &err), 0);
    cr_assert_eq(err, ECONNRESET);
    close(cfd);
    close(sfd);
    close(lfd);
}

/* A block resets the service's side only once the service acknowledged what it was sent (a reset
 * overtaking bytes still on their way would be ignored as out of place): here its ACKs to the
 * proxy's onward socket are dropped, so the reset waits its longest, and the service still gets
 * it, after the bytes. */
Test(px_relay, a_block_resets_the_service_after_the_bytes_in_flight)
{
    struct sockaddr_storage peer;
    char buf[64];
    int lfd, cfd, sfd, err = 0;
    uint64_t t0;
    size_t got;

    start();
    apply(1, 1, &P_EVIL);
    lfd = server_listen(AF_INET, "10.66.0.1");
    cfd = client_connect(AF_INET, "10.66.0.2", "10.66.0.1");
    set_timeout(cfd, 5000);
    sfd = accept_peer(lfd, &peer);
    send_all(cfd, "hello", 5);
    recv_exact(sfd, buf, 5);
    {
        struct sockaddr_in me;
        socklen_t ml = sizeof(me);

        /* Everything the service sends to the proxy's onward socket, not what the proxy sends
         * to the client (its port is the client's). */
        cr_assert_eq(getsockname(cfd, (struct sockaddr *)&me, &ml), 0);
        char cmd[256];

        snprintf(cmd, sizeof(cmd),
                 "nft add table inet fgxt && "
                 "nft add chain inet fgxt out '{ type filter hook output priority 0; }' && "
                 "nft add rule inet fgxt out tcp sport 8080 tcp dport != %u drop",
                 (unsigned)ntohs(me.sin_port));
        sh(cmd);
    }
    send_all(cfd, "more ", 5);
    sleep_ms(50);
    send_all(cfd, "evil1337", 8);
    cr_assert_eq(recv_until_end(cfd, buf, sizeof(buf), &err), 0);
    cr_assert_eq(err, ECONNRESET, "client side: %s", strerror(err));
    t0 = now_ms();
    got = recv_until_end(sfd, buf, sizeof(buf), &err);
    cr_assert_eq(got, 5, "the server got %zu bytes", got);
    cr_assert_eq(memcmp(buf, "more ", 5), 0);
    cr_assert_eq(err, ECONNRESET, "server side: %s", strerror(err));
    /* It waited for the acknowledgement that never came (the client's reset did not). */
    cr_assert_geq(now_ms() - t0, PX_RESET_WAIT_MS / 2);
    close(cfd);
    close(sfd);
    close(lfd);
}
