/* Benchmark load generator (bench stage, never part of the data path): the servers and clients
 * that bench/connbench, bench/latency and bench/throughput run inside their namespaces.
 *
 *   connload server --port P [--mode close|echo] [--threads T]
 *       close: read the request, send a small reply, close (short connections)
 *       echo:  echo every read back on a connection that stays open (request/response)
 *   connload conn --host H --port P [--conns N] [--seconds S] [--req B] [--threads T]
 *       N concurrent clients, each: connect, send B bytes, read the reply to EOF, close, again.
 *   connload rr --host H --port P [--conns N] [--seconds S] [--req B] [--threads T]
 *       N persistent connections, each sending B bytes and waiting for the B-byte echo.
 *   connload idle --host H --port P [--conns N] [--seconds S]
 *       open N connections, hold them idle, close them.
 *   connload relay --port P --to H --to-port Q
 *       a plain read/write relay that does not scan: the proxy layer's ceiling.
 *
 * Clients print one JSON document on stdout. Everything is epoll, one loop per thread, except the
 * relay (two blocking threads per connection, as a naive relay would be). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_THREADS 64
#define BUF_LEN 65536

enum cl_mode { MODE_CLOSE, MODE_ECHO };

struct opts {
    const char *cmd;
    const char *host;
    const char *to;
    int port, to_port;
    int conns, threads, req;
    int http; /* --http: the request is an HTTP/1.1 POST of --req bytes in all (bench/scripts) */
    double seconds;
    enum cl_mode mode;
};

static struct opts g_o = {
    .host = "127.0.0.1", .to = "127.0.0.1", .conns = 32, .threads = 1, .req = 64, .seconds = 5};

static uint64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void die(const char *what)
{
    fprintf(stderr, "connload: %s: %s\n", what, strerror(errno));
    exit(1);
}

static void raise_nofile(void)
{
    struct rlimit rl;

    if (getrlimit(RLIMIT_NOFILE, &rl) == -1)
        return;
    rl.rlim_cur = rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &rl) == -1)
        fprintf(stderr, "connload: cannot raise RLIMIT_NOFILE: %s\n", strerror(errno));
}

static int resolve(const char *host, int port, struct sockaddr_storage *ss, socklen_t *len)
{
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
    char ps[16];
    int rc;

    snprintf(ps, sizeof(ps), "%d", port);
    rc = getaddrinfo(host, ps, &hints, &res);
    if (rc != 0) {
        fprintf(stderr, "connload: %s: %s\n", host, gai_strerror(rc));
        return -EINVAL;
    }
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    *len = res->ai_addrlen;
    freeaddrinfo(res);
    return 0;
}

static int listen_on(int port, bool reuseport)
{
    struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_port = htons((uint16_t)port),
                             .sin6_addr = IN6ADDR_ANY_INIT};
    int one = 1, zero = 0;
    int fd = socket(AF_INET6, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

    if (fd == -1)
        die("socket");
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) == -1 ||
        (reuseport && setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) == -1) ||
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero)) == -1)
        die("setsockopt");
    if (bind(fd, (struct sockaddr *)&a, sizeof(a)) == -1)
        die("bind");
    if (listen(fd, 4096) == -1)
        die("listen");
    return fd;
}

/* ---- servers -------------------------------------------------------------------------------- */

static void *server_loop(void *arg)
{
    int lfd = (int)(intptr_t)arg;
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = lfd}, evs[256];
    static const char reply[64] = "rrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrr";
    char buf[BUF_LEN];
    int ep = epoll_create1(EPOLL_CLOEXEC);

    if (ep == -1 || epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev) == -1)
        die("epoll");
    for (;;) {
        int n = epoll_wait(ep, evs, 256, -1);

        if (n == -1) {
            if (errno == EINTR)
                continue;
            die("epoll_wait");
        }
        for (int i = 0; i < n; i++) {
            int fd = evs[i].data.fd;

            if (fd == lfd) {
                int c;

                while ((c = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) != -1) {
                    struct epoll_event cev = {.events = EPOLLIN | EPOLLRDHUP, .data.fd = c};
                    int one = 1;

                    setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
                    if (epoll_ctl(ep, EPOLL_CTL_ADD, c, &cev) == -1)
                        close(c);
                }
                continue;
            }
            ssize_t r = read(fd, buf, sizeof(buf));
            if (r <= 0) {
                if (r == -1 && errno == EAGAIN)
                    continue;
                close(fd);
                continue;
            }
            if (g_o.mode == MODE_CLOSE) {
                /* The request came in one segment, and 64 bytes always fit a fresh socket's
                 * buffer: a failed write means the client is gone, and closing is all that
                 * is left to do either way. */
                ssize_t w = write(fd, reply, sizeof(reply));

                (void)w;
                close(fd);
            } else {
                ssize_t off = 0;

                while (off < r) {
                    ssize_t w = write(fd, buf + off, (size_t)(r - off));

                    if (w == -1) {
                        if (errno == EAGAIN)
                            continue;
                        break;
                    }
                    off += w;
                }
            }
        }
    }
    return NULL;
}

static int run_server(void)
{
    pthread_t th[MAX_THREADS];

    for (int i = 0; i < g_o.threads; i++) {
        int lfd = listen_on(g_o.port, true);

        if (pthread_create(&th[i], NULL, server_loop, (void *)(intptr_t)lfd) != 0)
            die("pthread_create");
    }
    for (int i = 0; i < g_o.threads; i++)
        pthread_join(th[i], NULL);
    return 0;
}

/* ---- relay ---------------------------------------------------------------------------------- */

struct pipe_arg {
    int from, to;
};

static void *relay_pipe(void *arg)
{
    struct pipe_arg *p = arg;
    char *buf = malloc(BUF_LEN);
    ssize_t r;

    while (buf && (r = read(p->from, buf, BUF_LEN)) > 0) {
        ssize_t off = 0;

        while (off < r) {
            ssize_t w = write(p->to, buf + off, (size_t)(r - off));

            if (w == -1)
                goto out;
            off += w;
        }
    }
out:
    shutdown(p->to, SHUT_WR);
    shutdown(p->from, SHUT_RD);
    free(buf);
    return NULL;
}

static void *relay_conn(void *arg)
{
    int c = (int)(intptr_t)arg, s;
    struct sockaddr_storage ss;
    socklen_t sl;
    pthread_t t;
    struct pipe_arg up, down;

    if (resolve(g_o.to, g_o.to_port, &ss, &sl) < 0)
        goto out_c;
    s = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s == -1)
        goto out_c;
    if (connect(s, (struct sockaddr *)&ss, sl) == -1)
        goto out_s;
    up = (struct pipe_arg){.from = c, .to = s};
    down = (struct pipe_arg){.from = s, .to = c};
    if (pthread_create(&t, NULL, relay_pipe, &up) != 0)
        goto out_s;
    relay_pipe(&down);
    pthread_join(t, NULL);
out_s:
    close(s);
out_c:
    close(c);
    return NULL;
}

static int run_relay(void)
{
    int lfd = listen_on(g_o.port, false);
    int fl = fcntl(lfd, F_GETFL);

    if (fl == -1 || fcntl(lfd, F_SETFL, fl & ~O_NONBLOCK) == -1)
        die("fcntl");
    for (;;) {
        pthread_t t;
        int c = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);

        if (c == -1) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            die("accept");
        }
        if (pthread_create(&t, NULL, relay_conn, (void *)(intptr_t)c) != 0) {
            close(c);
            continue;
        }
        pthread_detach(t);
    }
    return 0;
}

/* ---- clients -------------------------------------------------------------------------------- */

enum cstate { C_CONNECTING, C_WAIT, C_DONE };

struct conn {
    int fd;
    enum cstate st;
    int got;
    uint64_t t0;
};

struct worker {
    pthread_t th;
    int nconns;
    struct sockaddr_storage ss;
    socklen_t sl;
    uint64_t deadline;
    /* results */
    uint64_t done, errors, connected;
    uint64_t *lat; /* rr: one latency per response, ns */
    size_t nlat, caplat;
};

static char g_req[BUF_LEN];

static int conn_open(struct worker *w, struct conn *c, int ep, int idx)
{
    struct epoll_event ev = {.events = EPOLLOUT, .data.u32 = (uint32_t)idx};
    int one = 1;

    c->fd = socket(w->ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c->fd == -1)
        return -errno;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    c->st = C_CONNECTING;
    c->got = 0;
    c->t0 = now_ns();
    if (connect(c->fd, (struct sockaddr *)&w->ss, w->sl) == -1 && errno != EINPROGRESS) {
        int e = errno;

        close(c->fd);
        c->fd = -1;
        return -e;
    }
    if (epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev) == -1) {
        close(c->fd);
        c->fd = -1;
        return -errno;
    }
    return 0;
}

static void conn_close(struct conn *c)
{
    if (c->fd != -1)
        close(c->fd);
    c->fd = -1;
    c->st = C_DONE;
}

static void lat_push(struct worker *w, uint64_t ns)
{
    if (w->nlat == w->caplat) {
        size_t cap = w->caplat ? 2 * w->caplat : 65536;
        uint64_t *n = realloc(w->lat, cap * sizeof(*n));

        if (!n)
            return;
        w->lat = n;
        w->caplat = cap;
    }
    w->lat[w->nlat++] = ns;
}

static bool send_req(struct conn *c)
{
    c->got = 0;
    c->t0 = now_ns();
    return write(c->fd, g_req, (size_t)g_o.req) == g_o.req;
}

static void *client_loop(void *arg)
{
    struct worker *w = arg;
    bool rr = strcmp(g_o.cmd, "rr") == 0, idle = strcmp(g_o.cmd, "idle") == 0;
    struct conn *cs = calloc((size_t)w->nconns, sizeof(*cs));
    struct epoll_event evs[256];
    char buf[BUF_LEN];
    int ep = epoll_create1(EPOLL_CLOEXEC);

    if (!cs || ep == -1)
        die("client setup");
    for (int i = 0; i < w->nconns; i++) {
        cs[i].fd = -1;
        if (conn_open(w, &cs[i], ep, i) < 0) {
            w->errors++;
            cs[i].st = C_DONE;
        }
    }
    while (now_ns() < w->deadline) {
        int n = epoll_wait(ep, evs, 256, 50);

        for (int k = 0; k < n; k++) {
            int i = (int)evs[k].data.u32;
            struct conn *c = &cs[i];
            struct epoll_event mod = {.events = EPOLLIN, .data.u32 = (uint32_t)i};

            if (c->st == C_CONNECTING) {
                int err = 0;
                socklen_t el = sizeof(err);

                if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &el) == -1 || err != 0)
                    goto fail;
                w->connected++;
                if (idle) {
                    mod.events = EPOLLRDHUP;
                    epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &mod);
                    c->st = C_WAIT;
                    continue;
                }
                if (!send_req(c) || epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &mod) == -1)
                    goto fail;
                c->st = C_WAIT;
                continue;
            }
            if (idle)
                goto fail; /* an idle connection the other side closed */
            for (;;) {
                ssize_t r = read(c->fd, buf, sizeof(buf));

                if (r > 0) {
                    c->got += (int)r;
                    if (rr && c->got >= g_o.req) {
                        lat_push(w, now_ns() - c->t0);
                        w->done++;
                        if (!send_req(c))
                            goto fail;
                        break;
                    }
                    continue;
                }
                if (r == -1 && errno == EAGAIN)
                    break;
                if (r == 0 && !rr && c->got > 0) {
                    w->done++;
                    conn_close(c);
                    if (conn_open(w, c, ep, i) < 0) {
                        w->errors++;
                        c->st = C_DONE;
                    }
                    break;
                }
                goto fail;
            }
            continue;
        fail:
            w->errors++;
            conn_close(c);
            if (!idle && conn_open(w, c, ep, i) < 0)
                c->st = C_DONE;
        }
    }
    for (int i = 0; i < w->nconns; i++)
        conn_close(&cs[i]);
    close(ep);
    free(cs);
    return NULL;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

    return x < y ? -1 : x > y;
}

static double pct(const uint64_t *v, size_t n, double p)
{
    size_t i;

    if (n == 0)
        return -1;
    i = (size_t)(p / 100.0 * (double)(n - 1) + 0.5);
    return (double)v[i] / 1000.0;
}

static int run_client(void)
{
    struct worker *ws = calloc((size_t)g_o.threads, sizeof(*ws));
    uint64_t t0 = now_ns(), done = 0, errors = 0, connected = 0;
    size_t nlat = 0;
    uint64_t *lat = NULL;
    double secs;

    if (!ws)
        die("calloc");
    memset(g_req, 'q', sizeof(g_req));
    if (g_o.http) {
        /* a header a script checks and a body of the rest: Content-Length says how much */
        char head[160];
        int hl = 0, body = g_o.req;

        for (int k = 0; k < 3; k++) {
            hl = snprintf(head, sizeof(head),
                          "POST /submit HTTP/1.1\r\nHost: bench\r\nX-Checker: sla-bot\r\n"
                          "Content-Length: %d\r\n\r\n",
                          body);
            body = g_o.req - hl;
        }
        if (body < 0 || hl >= g_o.req)
            die("--req too small for --http");
        memcpy(g_req, head, (size_t)hl);
    }
    for (int i = 0; i < g_o.threads; i++) {
        struct worker *w = &ws[i];

        if (resolve(g_o.host, g_o.port, &w->ss, &w->sl) < 0)
            return 1;
        w->nconns = g_o.conns / g_o.threads + (i < g_o.conns % g_o.threads);
        w->deadline = t0 + (uint64_t)(g_o.seconds * 1e9);
        if (pthread_create(&w->th, NULL, client_loop, w) != 0)
            die("pthread_create");
    }
    for (int i = 0; i < g_o.threads; i++) {
        pthread_join(ws[i].th, NULL);
        done += ws[i].done;
        errors += ws[i].errors;
        connected += ws[i].connected;
        nlat += ws[i].nlat;
    }
    secs = (double)(now_ns() - t0) / 1e9;
    if (nlat) {
        lat = malloc(nlat * sizeof(*lat));
        if (!lat)
            die("malloc");
        nlat = 0;
        for (int i = 0; i < g_o.threads; i++) {
            memcpy(lat + nlat, ws[i].lat, ws[i].nlat * sizeof(*lat));
            nlat += ws[i].nlat;
        }
        qsort(lat, nlat, sizeof(*lat), cmp_u64);
    }
    printf("{\"cmd\":\"%s\",\"conns\":%d,\"threads\":%d,\"seconds\":%.3f,\"done\":%llu,"
           "\"errors\":%llu,\"connected\":%llu,\"rate\":%.1f",
           g_o.cmd, g_o.conns, g_o.threads, secs, (unsigned long long)done,
           (unsigned long long)errors, (unsigned long long)connected, (double)done / secs);
    if (nlat)
        printf(",\"p50_us\":%.1f,\"p99_us\":%.1f,\"p999_us\":%.1f,\"max_us\":%.1f",
               pct(lat, nlat, 50), pct(lat, nlat, 99), pct(lat, nlat, 99.9),
               (double)lat[nlat - 1] / 1000.0);
    printf("}\n");
    for (int i = 0; i < g_o.threads; i++)
        free(ws[i].lat);
    free(lat);
    free(ws);
    return 0;
}

/* ---- options -------------------------------------------------------------------------------- */

static void usage(void)
{
    fprintf(stderr, "usage: connload server|conn|rr|idle|relay [--host H] [--port P] "
                    "[--mode close|echo] [--conns N] [--seconds S] [--req B] [--threads T] "
                    "[--to H --to-port Q]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    if (argc < 2)
        usage();
    g_o.cmd = argv[1];
    for (int i = 2; i < argc; i++) {
        const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

        if (!v)
            usage();
        i++;
        if (!strcmp(k, "--host"))
            g_o.host = v;
        else if (!strcmp(k, "--port"))
            g_o.port = atoi(v);
        else if (!strcmp(k, "--to"))
            g_o.to = v;
        else if (!strcmp(k, "--to-port"))
            g_o.to_port = atoi(v);
        else if (!strcmp(k, "--conns"))
            g_o.conns = atoi(v);
        else if (!strcmp(k, "--threads"))
            g_o.threads = atoi(v);
        else if (!strcmp(k, "--req"))
            g_o.req = atoi(v);
        else if (!strcmp(k, "--seconds"))
            g_o.seconds = atof(v);
        else if (!strcmp(k, "--http"))
            g_o.http = atoi(v);
        else if (!strcmp(k, "--mode"))
            g_o.mode = !strcmp(v, "echo") ? MODE_ECHO : MODE_CLOSE;
        else
            usage();
    }
    if (g_o.port <= 0 || g_o.threads < 1 || g_o.threads > MAX_THREADS || g_o.conns < 1 ||
        g_o.req < 1 || g_o.req > BUF_LEN)
        usage();
    signal(SIGPIPE, SIG_IGN);
    raise_nofile();
    if (!strcmp(g_o.cmd, "server"))
        return run_server();
    if (!strcmp(g_o.cmd, "relay"))
        return run_relay();
    if (!strcmp(g_o.cmd, "conn") || !strcmp(g_o.cmd, "rr") || !strcmp(g_o.cmd, "idle"))
        return run_client();
    usage();
    return 2;
}
