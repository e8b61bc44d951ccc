/* Unit tests for controld/ctl_metrics.c: the exposition text rendered from known totals, and
 * real HTTP requests over TCP to the server on a free loopback port (GET /metrics, 404, 405, a
 * client that sends nothing, and a newly published snapshot). */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "controld/ctl_metrics.h"
#include "controld/ctl_stats.h"

static char dir[64];
static struct ctl_store *st;
static struct ctl_stats *stats;

static void setup(void)
{
    snprintf(dir, sizeof(dir), "/tmp/fgx-test-metrics-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    cr_assert_eq(ctl_store_open(dir, 0, &st), 0);
    cr_assert_eq(ctl_stats_open(st, &stats), 0);
}

static void teardown(void)
{
    char path[128];

    ctl_stats_free(stats);
    ctl_store_close(st);
    snprintf(path, sizeof(path), "%s/data.mdb", dir);
    unlink(path);
    snprintf(path, sizeof(path), "%s/lock.mdb", dir);
    unlink(path);
    rmdir(dir);
}

TestSuite(ctl_metrics, .init = setup, .fini = teardown);

static const struct ctl_service svcs[] = {
    {.id = 1, .name = "web", .ipproto = IPPROTO_TCP, .port = 8080},
    {.id = 2, .name = "dns", .ipproto = IPPROTO_UDP, .port = 53},
};
static const struct ctl_filter flts[] = {
    {.id = 5, .service_id = 1, .regex = "evil"},
    {.id = 6, .service_id = 2, .regex = "AAAA"},
};

static void feed(void)
{
    struct fgx_dp_service_stat ss[] = {{1, 100, 5000, 90, 10, 3, 6, 0, 0, 0, 0, 0},
                                       {2, 7, 700, 7, 0, 0, 0, 0, 0, 0, 0, 0}};
    struct fgx_dp_filter_stat fs[] = {{5, 4, 0}, {6, 0, 0}};
    struct fgx_dp_stats m = {.nservices = 2,
                             .services = ss,
                             .nfilters = 2,
                             .filters = fs,
                             .queue_drops = 12,
                             .rss_bytes = 1 << 20,
                             .flows = 3};

    cr_assert_eq(ctl_stats_ingest(stats, 1, &m, svcs, 2), 0);
}

static char *render(void)
{
    struct ctl_metrics_worker w = {
        .kind = "nfq", .up = true, .restarts = 2, .rss_bytes = 1 << 20, .flows = 3};
    char *text = NULL;
    size_t len = 0;

    cr_assert_eq(ctl_metrics_render(svcs, 2, flts, 2, stats, &w, 1, &text, &len), 0);
    cr_assert_not_null(text);
    cr_assert_eq(strlen(text), len);
    return text;
}

static void has_line(const char *text, const char *line)
{
    char want[256];

    snprintf(want, sizeof(want), "\n%s\n", line);
    cr_assert_not_null(strstr(text, want), "missing line \"%s\" in:\n%s", line, text);
}

Test(ctl_metrics, render_every_family)
{
    char *text;

    feed();
    text = render();
    has_line(text, "fgex_up 1");
    has_line(text, "fgex_service_packets_total{service=\"web\",id=\"1\"} 100");
    has_line(text, "fgex_service_bytes_total{service=\"web\",id=\"1\"} 5000");
    has_line(text, "fgex_service_accepted_total{service=\"web\",id=\"1\"} 90");
    has_line(text, "fgex_service_dropped_total{service=\"web\",id=\"1\"} 10");
    has_line(text, "fgex_service_flows_active{service=\"web\",id=\"1\"} 3");
    has_line(text, "fgex_service_events_lost_total{service=\"web\",id=\"1\"} 6");
    has_line(text, "fgex_service_events_lost_total{service=\"dns\",id=\"2\"} 0");
    has_line(text, "fgex_service_packets_total{service=\"dns\",id=\"2\"} 7");
    has_line(text, "fgex_filter_blocked_total{service=\"web\",filter=\"5\"} 4");
    has_line(text, "fgex_filter_blocked_total{service=\"dns\",filter=\"6\"} 0");
    has_line(text, "fgex_worker_up{kind=\"nfq\"} 1");
    has_line(text, "fgex_worker_restarts_total{kind=\"nfq\"} 2");
    has_line(text, "fgex_worker_queue_drops_total{kind=\"nfq\"} 12");
    has_line(text, "fgex_worker_rss_bytes{kind=\"nfq\"} 1048576");
    has_line(text, "# TYPE fgex_service_packets_total counter");
    has_line(text, "# TYPE fgex_service_flows_active gauge");
    has_line(text, "# TYPE fgex_filter_blocked_total counter");
    cr_assert_eq(text[strlen(text) - 1], '\n', "the format ends every line");
    free(text);
}

/* Every sample line is "name{labels} value" or "name value" with a decimal value, and each
 * metric name has its # TYPE line before its first sample. */
Test(ctl_metrics, render_well_formed)
{
    char *text, *orig, *save = NULL, *line;
    size_t samples = 0;

    feed();
    text = render();
    orig = strdup(text);
    cr_assert_not_null(orig);
    for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char name[128], type_line[160], *sp, *brace, *end, *type_at;

        if (line[0] == '#') {
            cr_assert(strncmp(line, "# HELP ", 7) == 0 || strncmp(line, "# TYPE ", 7) == 0, "%s",
                      line);
            continue;
        }
        samples++;
        sp = strrchr(line, ' ');
        cr_assert_not_null(sp, "%s", line);
        strtoull(sp + 1, &end, 10);
        cr_assert(end != sp + 1 && *end == '\0', "value of: %s", line);
        brace = strchr(line, '{');
        if (brace)
            cr_assert_eq(sp[-1], '}', "%s", line);
        snprintf(name, sizeof(name), "%.*s", (int)((brace ? brace : sp) - line), line);
        snprintf(type_line, sizeof(type_line), "# TYPE %s ", name);
        type_at = strstr(orig, type_line);
        cr_assert_not_null(type_at, "no TYPE for %s", name);
        cr_assert_lt(type_at - orig, line - text, "TYPE after the first sample of %s", name);
    }
    cr_assert_geq(samples, 15);
    free(orig);
    free(text);
}

/* Both workers, each under its own kind; the proxy has no queue, so no queue-drop sample. */
Test(ctl_metrics, render_the_proxy_worker)
{
    struct ctl_metrics_worker w[] = {
        {.kind = "nfq", .up = true, .restarts = 2, .rss_bytes = 1 << 20, .flows = 3},
        {.kind = "proxy", .up = true, .restarts = 1, .rss_bytes = 3 << 20, .flows = 5,
         .has_own = true, .conns_refused = 6, .unclassified = 7, .connect_failed = 8,
         .scan_errors = 9, .src_refused = 10, .evicted = 11, .silent_closed = 12,
         .midstream_reset = 13, .midstream_rescan = 14},
    };
    char *text = NULL;
    size_t len = 0;

    feed();
    cr_assert_eq(ctl_metrics_render(svcs, 2, flts, 2, stats, w, 2, &text, &len), 0);
    has_line(text, "fgex_worker_up{kind=\"nfq\"} 1");
    has_line(text, "fgex_worker_up{kind=\"proxy\"} 1");
    has_line(text, "fgex_worker_restarts_total{kind=\"proxy\"} 1");
    has_line(text, "fgex_worker_rss_bytes{kind=\"nfq\"} 1048576");
    has_line(text, "fgex_worker_rss_bytes{kind=\"proxy\"} 3145728");
    has_line(text, "fgex_worker_flows{kind=\"nfq\"} 3");
    has_line(text, "fgex_worker_flows{kind=\"proxy\"} 5");
    has_line(text, "fgex_worker_queue_drops_total{kind=\"nfq\"} 12");
    has_line(text, "fgex_worker_conns_refused_total{kind=\"proxy\"} 6");
    has_line(text, "fgex_worker_unclassified_total{kind=\"proxy\"} 7");
    has_line(text, "fgex_worker_connect_failed_total{kind=\"proxy\"} 8");
    has_line(text, "fgex_worker_scan_errors_total{kind=\"proxy\"} 9");
    has_line(text, "fgex_worker_src_refused_total{kind=\"proxy\"} 10");
    has_line(text, "fgex_worker_evicted_total{kind=\"proxy\"} 11");
    has_line(text, "fgex_worker_silent_closed_total{kind=\"proxy\"} 12");
    has_line(text, "fgex_worker_midstream_resets_total{kind=\"proxy\"} 13");
    has_line(text, "fgex_worker_midstream_rescan_total{kind=\"proxy\"} 14");
    cr_assert_null(strstr(text, "fgex_worker_conns_refused_total{kind=\"nfq\"}"));
    cr_assert_null(strstr(text, "fgex_worker_queue_drops_total{kind=\"proxy\"}"),
                   "the nfq worker's queue drops shown for the proxy:\n%s", text);
    free(text);
}

Test(ctl_metrics, render_without_stats_or_workers)
{
    char *text = NULL;
    size_t len;

    cr_assert_eq(ctl_metrics_render(svcs, 2, flts, 2, NULL, NULL, 0, &text, &len), 0);
    has_line(text, "fgex_service_packets_total{service=\"web\",id=\"1\"} 0");
    cr_assert_null(strstr(text, "kind=\"nfq\""));
    free(text);
}

Test(ctl_metrics, label_values_escaped)
{
    struct ctl_service odd = {.id = 9, .name = "a\"b\\c\nd"};
    char *text = NULL;
    size_t len;

    cr_assert_eq(ctl_metrics_render(&odd, 1, NULL, 0, NULL, NULL, 0, &text, &len), 0);
    has_line(text, "fgex_service_packets_total{service=\"a\\\"b\\\\c\\nd\",id=\"9\"} 0");
    free(text);
}

/* ---- the server, over real TCP ---- */

static int dial(uint16_t port)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    struct timeval tv = {.tv_sec = 5};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    cr_assert_neq(fd, -1);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    cr_assert_eq(setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
    cr_assert_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    return fd;
}

/* Send req, read to EOF (the server closes: one request per connection). Caller frees. */
static char *http(uint16_t port, const char *req)
{
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    int fd = dial(port);
    ssize_t r;

    cr_assert_not_null(buf);
    if (req)
        cr_assert_eq(send(fd, req, strlen(req), MSG_NOSIGNAL), (ssize_t)strlen(req));
    while ((r = recv(fd, buf + n, cap - 1 - n, 0)) > 0)
        n += (size_t)r;
    cr_assert_eq(r, 0, "the server closes the connection");
    buf[n] = '\0';
    close(fd);
    return buf;
}

/* The reply's status is code (libmicrohttpd answers in the request's HTTP version). */
static bool status_is(const char *resp, int code)
{
    char want[8];

    snprintf(want, sizeof(want), " %d ", code);
    return (strncmp(resp, "HTTP/1.0", 8) == 0 || strncmp(resp, "HTTP/1.1", 8) == 0) &&
           strncmp(resp + 8, want, 5) == 0;
}

static struct ctl_metrics *serve_text(const char *text)
{
    struct ctl_metrics *m = NULL;

    cr_assert_eq(ctl_metrics_start("127.0.0.1:0", &m), 0);
    cr_assert_gt(ctl_metrics_port(m), 0);
    if (text)
        ctl_metrics_publish(m, strdup(text), strlen(text));
    return m;
}

Test(ctl_metrics, http_get_metrics)
{
    struct ctl_metrics *m;
    char *text, *resp, *body, clen[64];

    feed();
    text = render();
    m = serve_text(text);
    resp = http(ctl_metrics_port(m), "GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: */*\r\n\r\n");
    cr_assert(status_is(resp, 200), "%s", resp);
    cr_assert_not_null(strstr(resp, "\r\nContent-Type: text/plain; version=0.0.4"));
    snprintf(clen, sizeof(clen), "\r\nContent-Length: %zu\r\n", strlen(text));
    cr_assert_not_null(strstr(resp, clen), "%s", resp);
    body = strstr(resp, "\r\n\r\n");
    cr_assert_not_null(body);
    cr_assert_str_eq(body + 4, text, "the body is the published snapshot");
    free(resp);

    /* A query string is still /metrics; a new snapshot is served from the next request on. */
    ctl_metrics_publish(m, strdup("fgex_up 1\nx 2\n"), 14);
    resp = http(ctl_metrics_port(m), "GET /metrics?x=1 HTTP/1.0\r\n\r\n");
    body = strstr(resp, "\r\n\r\n");
    cr_assert_not_null(body);
    cr_assert_str_eq(body + 4, "fgex_up 1\nx 2\n");
    free(resp);
    ctl_metrics_stop(m);
    free(text);
}

Test(ctl_metrics, http_other_paths_and_methods)
{
    struct ctl_metrics *m = serve_text("fgex_up 1\n");
    uint16_t port = ctl_metrics_port(m);
    char *resp;

    resp = http(port, "GET / HTTP/1.0\r\n\r\n");
    cr_assert(status_is(resp, 404), "%s", resp);
    free(resp);
    resp = http(port, "GET /metricsx HTTP/1.0\r\n\r\n");
    cr_assert(status_is(resp, 404), "%s", resp);
    free(resp);
    resp = http(port, "POST /metrics HTTP/1.0\r\nContent-Length: 0\r\n\r\n");
    cr_assert(status_is(resp, 405), "%s", resp);
    free(resp);
    /* Not HTTP: refused (libmicrohttpd may just close), and the server goes on. */
    resp = http(port, "garbage\r\n\r\n");
    cr_assert(resp[0] == '\0' || status_is(resp, 400), "%s", resp);
    free(resp);
    resp = http(port, "GET /metrics HTTP/1.0\r\n\r\n");
    cr_assert(status_is(resp, 200), "%s", resp);
    free(resp);
    ctl_metrics_stop(m);
}

/* A client that connects and sends nothing is dropped after the I/O timeout, and the server
 * answers the next one; publishing never waits for the server thread. */
Test(ctl_metrics, http_silent_client_does_not_wedge, .timeout = 15)
{
    struct ctl_metrics *m = serve_text("fgex_up 1\n");
    int silent = dial(ctl_metrics_port(m));
    char *resp;

    ctl_metrics_publish(m, strdup("fgex_up 1\ny 3\n"), 14);
    resp = http(ctl_metrics_port(m), "GET /metrics HTTP/1.0\r\n\r\n");
    cr_assert_not_null(strstr(resp, "\r\n\r\nfgex_up 1\ny 3\n"), "%s", resp);
    free(resp);
    close(silent);
    ctl_metrics_stop(m);
}

Test(ctl_metrics, before_the_first_snapshot)
{
    struct ctl_metrics *m = serve_text(NULL);
    char *resp = http(ctl_metrics_port(m), "GET /metrics HTTP/1.0\r\n\r\n");

    cr_assert_not_null(strstr(resp, "\r\n\r\nfgex_up 1\n"), "%s", resp);
    free(resp);
    ctl_metrics_stop(m);
}

Test(ctl_metrics, bad_listen_addresses_refused)
{
    static const char *bad[] = {"",           "9100",        "127.0.0.1",
                                "127.0.0.1:", "127.0.0.1:x", "127.0.0.1:70000",
                                "::1:9100",   "[::1:9100",   "[]:1"};
    struct ctl_metrics *m = NULL;

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        cr_assert_eq(ctl_metrics_start(bad[i], &m), -EINVAL, "accepted \"%s\"", bad[i]);
    cr_assert_eq(ctl_metrics_start("[::1]:0", &m), 0, "IPv6 in brackets");
    ctl_metrics_stop(m);
    ctl_metrics_stop(NULL);
}
