/* controld metrics stage: the Prometheus text, and its own plain-HTTP listener on
 * libmicrohttpd (--metrics-listen; the web listener serves the same snapshot, ctl_web.c). The
 * server's thread serves the snapshot the control loop last published and never touches
 * controld's state itself. */
#include "controld/ctl_metrics.h"

#include <errno.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "controld/ctl_listen.h"
#include "fgx/log.h"

/* A scraper that sends nothing is dropped after this long. */
#define METRICS_IO_TIMEOUT_S 5

struct ctl_metrics {
    struct MHD_Daemon *httpd; /* NULL: no listener of its own */
    uint16_t port;
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
        {"fgex_flags_out_total", "counter",
         "Connections of the service that sent a flag to an address outside the game's checker.",
         offsetof(struct ctl_svc_counters, flags_out)},
        {"fgex_flags_to_checker_total", "counter",
         "Connections of the service that sent a flag to the game's checker.",
         offsetof(struct ctl_svc_counters, flags_to_checker)},
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

/* ---- the snapshot and the server ---- */

int ctl_metrics_text(struct ctl_metrics *m, char **text, size_t *len)
{
    static const char up[] = "fgex_up 1\n";
    const char *src = up;
    size_t n = sizeof(up) - 1;
    int rv = 0;

    /* A copy, so that the lock is never held across a write to a slow client. */
    pthread_mutex_lock(&m->lock);
    if (m->text) {
        src = m->text;
        n = m->len;
    }
    *text = malloc(n ? n : 1);
    if (*text) {
        memcpy(*text, src, n);
        *len = n;
    } else {
        rv = -ENOMEM;
    }
    pthread_mutex_unlock(&m->lock);
    return rv;
}

static enum MHD_Result plain(struct MHD_Connection *conn, unsigned status, const char *text)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(text), (void *)text, MHD_RESPMEM_PERSISTENT);
    enum MHD_Result rv;

    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/plain");
    rv = MHD_queue_response(conn, status, r);
    MHD_destroy_response(r);
    return rv;
}

static enum MHD_Result metrics_serve(struct ctl_metrics *m, struct MHD_Connection *conn,
                                     const char *method)
{
    struct MHD_Response *r;
    enum MHD_Result rv;
    char *text;
    size_t len;

    if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0)
        return plain(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "405 method not allowed: use GET\n");
    if (ctl_metrics_text(m, &text, &len) < 0)
        return MHD_NO;
    r = MHD_create_response_from_buffer(len, text, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(text);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
                            "text/plain; version=0.0.4; charset=utf-8");
    rv = MHD_queue_response(conn, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return rv;
}

static enum MHD_Result metrics_handler(void *cls, struct MHD_Connection *conn, const char *url,
                                       const char *method, const char *version, const char *upload,
                                       size_t *upload_size, void **con_cls)
{
    (void)version;
    (void)upload;
    (void)con_cls;
    if (*upload_size) {
        *upload_size = 0; /* a body is read and ignored */
        return MHD_YES;
    }
    if (strcmp(url, "/metrics") != 0)
        return plain(conn, MHD_HTTP_NOT_FOUND, "404 not found: try /metrics\n");
    return metrics_serve(cls, conn, method);
}

__attribute__((format(printf, 2, 0)))
static void metrics_log(void *cls, const char *fmt, va_list ap)
{
    char line[512];

    (void)cls;
    vsnprintf(line, sizeof(line), fmt, ap);
    line[strcspn(line, "\n")] = '\0';
    fgx_debug("metrics: %s", line);
}

int ctl_metrics_start(const char *addr, struct ctl_metrics **out)
{
    struct ctl_metrics *m = calloc(1, sizeof(*m));
    int rv, fd = -1;

    if (!m)
        return -ENOMEM;
    pthread_mutex_init(&m->lock, NULL);
    if (addr) {
        rv = ctl_listen_tcp("metrics", addr, &fd, &m->port);
        if (rv < 0)
            goto err;
        /* One thread polling every connection (no per-connection threads), as the old server
         * had: a scrape is one small copy. */
        m->httpd = MHD_start_daemon(MHD_USE_AUTO_INTERNAL_THREAD | MHD_USE_ERROR_LOG, 0, NULL, NULL,
                                    metrics_handler, m, MHD_OPTION_LISTEN_SOCKET, fd,
                                    MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)METRICS_IO_TIMEOUT_S,
                                    MHD_OPTION_CONNECTION_LIMIT, 64u, MHD_OPTION_EXTERNAL_LOGGER,
                                    metrics_log, NULL, MHD_OPTION_END);
        if (!m->httpd) {
            fgx_err("metrics: cannot start the HTTP server on %s", addr);
            close(fd);
            rv = -EIO;
            goto err;
        }
        fgx_info("serving Prometheus metrics on http://%s/metrics", addr);
    }
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
    if (m->httpd)
        MHD_stop_daemon(m->httpd); /* closes the listening socket too */
    pthread_mutex_destroy(&m->lock);
    free(m->text);
    free(m);
}
