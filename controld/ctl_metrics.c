/* controld metrics stage: a tiny HTTP/1.0 server for Prometheus. One thread, one request per
 * connection, with socket timeouts so that a client that sends nothing cannot hold it for
 * long; it serves the snapshot the control loop last published and never touches controld's
 * state itself. */
#include "controld/ctl_metrics.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "fgx/log.h"

#define HTTP_REQ_MAX 4096
#define HTTP_IO_TIMEOUT_S 2

struct ctl_metrics {
    int fd;
    int wake[2]; /* a byte on wake[1] stops the thread */
    uint16_t port;
    pthread_t thread;
    bool running;
    pthread_mutex_t lock;
    char *text; /* under lock */
    size_t len;
};

/* ---- rendering ---- */

/* Write errors are sticky in the stream and checked once, before fclose(). */
static void emit(FILE *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void emit(FILE *f, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    (void)vfprintf(f, fmt, ap);
    va_end(ap);
}

/* Label values are quoted with \\, \" and \n escaped (exposition format). */
static void label(FILE *f, const char *v)
{
    emit(f, "\"");
    for (; *v; v++) {
        if (*v == '\\' || *v == '"')
            emit(f, "\\%c", *v);
        else if (*v == '\n')
            emit(f, "\\n");
        else
            emit(f, "%c", *v);
    }
    emit(f, "\"");
}

static void head(FILE *f, const char *name, const char *type, const char *help)
{
    emit(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static const char *service_name(const struct ctl_service *svcs, size_t n, uint32_t id)
{
    for (size_t i = 0; i < n; i++)
        if (svcs[i].id == id)
            return svcs[i].name;
    return "";
}

int ctl_metrics_render(const struct ctl_service *svcs, size_t nsvcs, const struct ctl_filter *flts,
                       size_t nflts, const struct ctl_stats *stats,
                       const struct ctl_metrics_worker *workers, size_t nworkers, char **out,
                       size_t *len)
{
    static const struct {
        const char *name, *type, *help;
        size_t off;
    } svc_metrics[] = {
        {"fgex_service_packets_total", "counter", "Packets of the service seen by the workers.",
         offsetof(struct ctl_svc_counters, packets)},
        {"fgex_service_bytes_total", "counter", "Payload bytes of the service seen by the workers.",
         offsetof(struct ctl_svc_counters, bytes)},
        {"fgex_service_accepted_total", "counter", "Packets of the service accepted.",
         offsetof(struct ctl_svc_counters, accepted)},
        {"fgex_service_dropped_total", "counter", "Packets of the service dropped.",
         offsetof(struct ctl_svc_counters, dropped)},
        {"fgex_service_flows_active", "gauge", "Flows of the service tracked now.",
         offsetof(struct ctl_svc_counters, flows_active)},
        {"fgex_service_events_lost_total", "counter",
         "Blocks of the service whose event was lost (a worker's event queue was full).",
         offsetof(struct ctl_svc_counters, events_lost)},
    };
    static const struct {
        const char *name, *help;
        size_t off;
    } own_metrics[] = {
        {"fgex_worker_conns_refused_total", "Connections the proxy refused at its limit.",
         offsetof(struct ctl_metrics_worker, conns_refused)},
        {"fgex_worker_unclassified_total", "Connections the proxy got for no running service.",
         offsetof(struct ctl_metrics_worker, unclassified)},
        {"fgex_worker_connect_failed_total",
         "Connections whose real service the proxy could not reach.",
         offsetof(struct ctl_metrics_worker, connect_failed)},
        {"fgex_worker_scan_errors_total", "Connections reset because their scan failed.",
         offsetof(struct ctl_metrics_worker, scan_errors)},
        {"fgex_worker_src_refused_total",
         "Connections the proxy refused at its per-source limit.",
         offsetof(struct ctl_metrics_worker, src_refused)},
        {"fgex_worker_evicted_total",
         "Idle connections the proxy closed at its limit to make room for new ones.",
         offsetof(struct ctl_metrics_worker, evicted)},
        {"fgex_worker_silent_closed_total",
         "Connections the proxy closed because no byte moved within the first-byte timeout.",
         offsetof(struct ctl_metrics_worker, silent_closed)},
        {"fgex_worker_midstream_resets_total",
         "Connections reset at their service's return because bytes passed unscanned while it "
         "was away.",
         offsetof(struct ctl_metrics_worker, midstream_reset)},
        {"fgex_worker_midstream_rescan_total",
         "Connections scanned on with fresh streams at their service's return (policy scan).",
         offsetof(struct ctl_metrics_worker, midstream_rescan)},
    };
    const struct ctl_worker_counters *wc = stats ? ctl_stats_worker(stats) : NULL;
    char *buf = NULL;
    size_t blen = 0;
    bool failed;
    FILE *f = open_memstream(&buf, &blen);

    if (!f) {
        fgx_err("metrics: cannot render: %s", strerror(errno));
        return -ENOMEM;
    }
    head(f, "fgex_up", "gauge", "1 while controld serves.");
    emit(f, "fgex_up 1\n");
    for (size_t k = 0; k < sizeof(svc_metrics) / sizeof(svc_metrics[0]); k++) {
        head(f, svc_metrics[k].name, svc_metrics[k].type, svc_metrics[k].help);
        for (size_t i = 0; i < nsvcs; i++) {
            struct ctl_svc_counters c = {0};
            uint64_t v;

            if (stats)
                ctl_stats_service(stats, svcs[i].id, &c);
            memcpy(&v, (const char *)&c + svc_metrics[k].off, sizeof(v));
            emit(f, "%s{service=", svc_metrics[k].name);
            label(f, svcs[i].name);
            emit(f, ",id=\"%u\"} %llu\n", svcs[i].id, (unsigned long long)v);
        }
    }
    head(f, "fgex_filter_blocked_total", "counter",
         "Flows (TCP) or datagrams (UDP) blocked by the filter.");
    for (size_t i = 0; i < nflts; i++) {
        emit(f, "fgex_filter_blocked_total{service=");
        label(f, service_name(svcs, nsvcs, flts[i].service_id));
        emit(f, ",filter=\"%u\"} %llu\n", flts[i].id,
             (unsigned long long)(stats ? ctl_stats_blocked(stats, flts[i].id) : 0));
    }
    head(f, "fgex_filter_matched_total", "counter",
         "Matches of the filter while its action was log (the traffic passed).");
    for (size_t i = 0; i < nflts; i++) {
        emit(f, "fgex_filter_matched_total{service=");
        label(f, service_name(svcs, nsvcs, flts[i].service_id));
        emit(f, ",filter=\"%u\",action=\"%s\"} %llu\n", flts[i].id, flts[i].log ? "log" : "block",
             (unsigned long long)(stats ? ctl_stats_matched(stats, flts[i].id) : 0));
    }
    head(f, "fgex_worker_up", "gauge", "1 when the worker runs and confirmed the ruleset.");
    for (size_t i = 0; i < nworkers; i++)
        emit(f, "fgex_worker_up{kind=\"%s\"} %d\n", workers[i].kind, workers[i].up ? 1 : 0);
    head(f, "fgex_worker_restarts_total", "counter", "Times controld restarted the worker.");
    for (size_t i = 0; i < nworkers; i++)
        emit(f, "fgex_worker_restarts_total{kind=\"%s\"} %u\n", workers[i].kind,
             workers[i].restarts);
    /* Only the nfq worker has queues; a proxy sample would claim drops it cannot have. */
    head(f, "fgex_worker_queue_drops_total", "counter",
         "Packets dropped on the worker's queues (kernel and user space), across restarts.");
    for (size_t i = 0; i < nworkers; i++)
        if (strcmp(workers[i].kind, "nfq") == 0)
            emit(f, "fgex_worker_queue_drops_total{kind=\"%s\"} %llu\n", workers[i].kind,
                 (unsigned long long)(wc ? wc->queue_drops_total : 0));
    head(f, "fgex_worker_rss_bytes", "gauge", "Resident memory of the worker.");
    for (size_t i = 0; i < nworkers; i++)
        emit(f, "fgex_worker_rss_bytes{kind=\"%s\"} %llu\n", workers[i].kind,
             (unsigned long long)workers[i].rss_bytes);
    head(f, "fgex_worker_flows", "gauge",
         "Flows the worker tracks now (proxy: connections it relays now).");
    for (size_t i = 0; i < nworkers; i++)
        emit(f, "fgex_worker_flows{kind=\"%s\"} %llu\n", workers[i].kind,
             (unsigned long long)workers[i].flows);
    for (size_t k = 0; k < sizeof(own_metrics) / sizeof(own_metrics[0]); k++) {
        head(f, own_metrics[k].name, "counter", own_metrics[k].help);
        for (size_t i = 0; i < nworkers; i++) {
            uint64_t v;

            if (!workers[i].has_own)
                continue;
            memcpy(&v, (const char *)&workers[i] + own_metrics[k].off, sizeof(v));
            emit(f, "%s{kind=\"%s\"} %llu\n", own_metrics[k].name, workers[i].kind,
                 (unsigned long long)v);
        }
    }
    head(f, "fgex_events_lost_total", "counter",
         "Match events the workers could not report (their queue was full).");
    emit(f, "fgex_events_lost_total %llu\n", (unsigned long long)(wc ? wc->events_lost_total : 0));
    head(f, "fgex_events_last_seq", "gauge", "Sequence number of the newest match event.");
    emit(f, "fgex_events_last_seq %llu\n",
         (unsigned long long)(stats ? ctl_stats_last_seq(stats) : 0));
    failed = ferror(f) != 0;
    if (fclose(f) != 0 || failed || !buf) {
        free(buf);
        fgx_err("metrics: cannot render: out of memory");
        return -ENOMEM;
    }
    *out = buf;
    *len = blen;
    return 0;
}

/* One supervised worker's entry, with its own numbers when they came from the process that
 * runs now. */
static void metrics_worker(const struct ctl_sup *sup, const struct ctl_worker_counters *c,
                           const char *kind, struct ctl_metrics_worker *w)
{
    struct ctl_sup_info info;

    ctl_sup_info(sup, &info);
    *w = (struct ctl_metrics_worker){.kind = kind};
    w->up = info.pid > 0 && strcmp(info.state, "running") == 0;
    w->restarts = info.restarts;
    if (c && c->valid && c->instance == info.instance && info.pid > 0) {
        w->rss_bytes = c->rss_bytes;
        w->flows = c->flows;
        if (strcmp(kind, "proxy") == 0) {
            w->has_own = true;
            w->conns_refused = c->conns_refused;
            w->unclassified = c->unclassified;
            w->connect_failed = c->connect_failed;
            w->scan_errors = c->scan_errors;
            w->src_refused = c->src_refused;
            w->evicted = c->evicted;
            w->silent_closed = c->silent_closed;
            w->midstream_reset = c->midstream_reset;
            w->midstream_rescan = c->midstream_rescan;
        }
    }
}

int ctl_metrics_update(struct ctl_metrics *m, struct ctl_ctx *ctx)
{
    struct ctl_service *svcs = NULL;
    struct ctl_filter *flts = NULL;
    struct ctl_metrics_worker w[2];
    size_t nsvcs = 0, nflts = 0, nw = 0, len = 0;
    struct ctl_txn *t;
    char *text = NULL;
    int rv;

    rv = ctl_txn_begin(ctx->store, false, &t);
    if (rv < 0)
        return rv;
    rv = ctl_store_service_list(t, &svcs, &nsvcs);
    if (rv == 0)
        rv = ctl_store_filter_list(t, 0, &flts, &nflts);
    ctl_txn_abort(t);
    if (rv < 0)
        goto out;
    if (ctx->sup)
        metrics_worker(ctx->sup, ctx->stats ? ctl_stats_worker(ctx->stats) : NULL, "nfq",
                       &w[nw++]);
    if (ctx->px_sup)
        metrics_worker(ctx->px_sup, ctx->stats ? ctl_stats_px_worker(ctx->stats) : NULL,
                       "proxy", &w[nw++]);
    rv = ctl_metrics_render(svcs, nsvcs, flts, nflts, ctx->stats, w, nw, &text, &len);
    if (rv == 0)
        ctl_metrics_publish(m, text, len);
out:
    ctl_filters_free(flts, nflts);
    free(svcs);
    return rv;
}

/* ---- the server ---- */

static void write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);

        if (w == -1 && errno == EINTR)
            continue;
        if (w <= 0)
            return; /* the client went away or stalled past the timeout: its loss */
        p += w;
        n -= (size_t)w;
    }
}

static void respond(int fd, const char *status, const char *type, const char *body, size_t len)
{
    char hdr[256];
    int n = snprintf(hdr, sizeof(hdr),
                     "HTTP/1.0 %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
                     "Connection: close\r\n\r\n",
                     status, type, len);

    write_all(fd, hdr, (size_t)n);
    write_all(fd, body, len);
}

/* Read up to the end of the request head, or what arrived before the timeout. */
static size_t read_request(int fd, char *buf, size_t cap)
{
    size_t n = 0;

    while (n < cap - 1) {
        ssize_t r = recv(fd, buf + n, cap - 1 - n, 0);

        if (r == -1 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        n += (size_t)r;
        buf[n] = '\0';
        if (strstr(buf, "\r\n\r\n") || strstr(buf, "\n\n"))
            break;
    }
    buf[n] = '\0';
    return n;
}

static void serve(struct ctl_metrics *m, int fd)
{
    static const char not_found[] = "404 not found: try /metrics\n";
    static const char bad[] = "400 bad request\n";
    static const char no_method[] = "405 method not allowed: use GET\n";
    struct timeval tv = {.tv_sec = HTTP_IO_TIMEOUT_S};
    char req[HTTP_REQ_MAX], *sp, *path, *end;
    char *text = NULL;
    size_t len = 0;

    if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) == -1 ||
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) == -1)
        return;
    if (read_request(fd, req, sizeof(req)) == 0)
        return;
    sp = strchr(req, ' ');
    if (!sp) {
        respond(fd, "400 Bad Request", "text/plain", bad, sizeof(bad) - 1);
        return;
    }
    *sp = '\0';
    path = sp + 1;
    end = path + strcspn(path, " \r\n");
    *end = '\0';
    if (strcmp(req, "GET") != 0) {
        respond(fd, "405 Method Not Allowed", "text/plain", no_method, sizeof(no_method) - 1);
        return;
    }
    path[strcspn(path, "?")] = '\0';
    if (strcmp(path, "/metrics") != 0) {
        respond(fd, "404 Not Found", "text/plain", not_found, sizeof(not_found) - 1);
        return;
    }
    /* A copy, so that the lock is never held across a write to a slow client. */
    pthread_mutex_lock(&m->lock);
    if (m->text) {
        text = malloc(m->len ? m->len : 1);
        if (text) {
            memcpy(text, m->text, m->len);
            len = m->len;
        }
    }
    pthread_mutex_unlock(&m->lock);
    if (!text) {
        static const char up[] = "fgex_up 1\n";
        respond(fd, "200 OK", "text/plain; version=0.0.4; charset=utf-8", up, sizeof(up) - 1);
        return;
    }
    respond(fd, "200 OK", "text/plain; version=0.0.4; charset=utf-8", text, len);
    free(text);
}

static void *metrics_thread(void *arg)
{
    struct ctl_metrics *m = arg;
    struct pollfd p[2] = {{.fd = m->fd, .events = POLLIN}, {.fd = m->wake[0], .events = POLLIN}};

    for (;;) {
        int fd;

        if (poll(p, 2, -1) == -1) {
            if (errno == EINTR)
                continue;
            fgx_err("metrics: poll: %s", strerror(errno));
            break;
        }
        if (p[1].revents)
            break;
        if (!(p[0].revents & POLLIN))
            continue;
        fd = accept4(m->fd, NULL, NULL, SOCK_CLOEXEC);
        if (fd == -1) {
            if (errno != EINTR && errno != EAGAIN && errno != ECONNABORTED)
                fgx_warn("metrics: accept: %s", strerror(errno));
            if (errno == EMFILE || errno == ENFILE)
                usleep(100000); /* do not spin while out of descriptors */
            continue;
        }
        serve(m, fd);
        close(fd);
    }
    return NULL;
}

/* "host:port", "[v6]:port" or ":port" -> host (NULL: any) and port, in buf. */
static int split_listen(const char *addr, char *buf, size_t cap, const char **host,
                        const char **port)
{
    char *colon;

    if (snprintf(buf, cap, "%s", addr) >= (int)cap)
        return -EINVAL;
    colon = strrchr(buf, ':');
    if (!colon || colon[1] == '\0')
        return -EINVAL;
    *colon = '\0';
    *port = colon + 1;
    if (buf[0] == '[') {
        size_t n = strlen(buf);
        if (n < 2 || buf[n - 1] != ']')
            return -EINVAL;
        buf[n - 1] = '\0';
        *host = buf + 1;
    } else {
        if (strchr(buf, ':'))
            return -EINVAL; /* a bare IPv6 address needs brackets */
        *host = buf[0] ? buf : NULL;
    }
    for (const char *p = *port; *p; p++)
        if (*p < '0' || *p > '9')
            return -EINVAL;
    if (strlen(*port) > 5 || atoi(*port) > 65535)
        return -EINVAL;
    return 0;
}

static int listen_on(const char *addr, int *fd_out, uint16_t *port_out)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *res = NULL;
    union {
        struct sockaddr sa;
        struct sockaddr_in in;
        struct sockaddr_in6 in6;
        struct sockaddr_storage ss;
    } bound = {0};
    socklen_t sl = sizeof(bound);
    const char *host, *port;
    char buf[256];
    int fd = -1, one = 1, rv, gai;

    if (split_listen(addr, buf, sizeof(buf), &host, &port) < 0) {
        fgx_err("metrics: bad listen address \"%s\": use ADDR:PORT or [ADDR6]:PORT", addr);
        return -EINVAL;
    }
    gai = getaddrinfo(host, port, &hints, &res);
    if (gai != 0) {
        fgx_err("metrics: cannot resolve \"%s\": %s", addr, gai_strerror(gai));
        return -EINVAL;
    }
    fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd == -1)
        goto fail;
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) == -1 ||
        bind(fd, res->ai_addr, res->ai_addrlen) == -1 || listen(fd, 16) == -1 ||
        getsockname(fd, &bound.sa, &sl) == -1)
        goto fail;
    *port_out = ntohs(bound.sa.sa_family == AF_INET6 ? bound.in6.sin6_port : bound.in.sin_port);
    *fd_out = fd;
    freeaddrinfo(res);
    return 0;
fail:
    rv = -errno;
    fgx_err("metrics: cannot listen on %s: %s", addr, strerror(errno));
    if (fd != -1)
        close(fd);
    freeaddrinfo(res);
    return rv;
}

int ctl_metrics_start(const char *addr, struct ctl_metrics **out)
{
    struct ctl_metrics *m = calloc(1, sizeof(*m));
    int rv;

    if (!m)
        return -ENOMEM;
    m->fd = m->wake[0] = m->wake[1] = -1;
    pthread_mutex_init(&m->lock, NULL);
    rv = listen_on(addr, &m->fd, &m->port);
    if (rv < 0)
        goto err;
    if (pipe2(m->wake, O_CLOEXEC) == -1) {
        rv = -errno;
        fgx_err("metrics: pipe: %s", strerror(errno));
        goto err;
    }
    rv = -pthread_create(&m->thread, NULL, metrics_thread, m);
    if (rv < 0) {
        fgx_err("metrics: cannot start the thread: %s", strerror(-rv));
        goto err;
    }
    m->running = true;
    fgx_info("serving Prometheus metrics on http://%s/metrics", addr);
    *out = m;
    return 0;
err:
    ctl_metrics_stop(m);
    return rv;
}

uint16_t ctl_metrics_port(const struct ctl_metrics *m)
{
    return m->port;
}

void ctl_metrics_publish(struct ctl_metrics *m, char *text, size_t len)
{
    char *old;

    pthread_mutex_lock(&m->lock);
    old = m->text;
    m->text = text;
    m->len = len;
    pthread_mutex_unlock(&m->lock);
    free(old);
}

void ctl_metrics_stop(struct ctl_metrics *m)
{
    if (!m)
        return;
    if (m->running) {
        char c = 1;

        if (write(m->wake[1], &c, 1) != 1)
            fgx_warn("metrics: cannot wake the thread: %s", strerror(errno));
        pthread_join(m->thread, NULL);
    }
    if (m->fd != -1)
        close(m->fd);
    if (m->wake[0] != -1)
        close(m->wake[0]);
    if (m->wake[1] != -1)
        close(m->wake[1]);
    pthread_mutex_destroy(&m->lock);
    free(m->text);
    free(m);
}
