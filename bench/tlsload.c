/* TLS load for bench/tls (bench stage, never part of the data path): the TLS service and the
 * TLS clients, OpenSSL, one blocking thread per connection (the load must not be what is
 * measured, and 32 threads are plenty for 32 clients).
 *
 *   tlsload server --port P --cert C --key K [--mode close|sink] [--threads T]
 *       close: handshake, read the request, send a 64-byte reply, close (short connections)
 *       sink:  handshake, read everything until the end (bulk)
 *   tlsload hs --host H --port P [--conns N] [--seconds S] [--req B]
 *       N clients, each: connect, full handshake (no resumption), send B bytes, read the
 *       64-byte reply, close, again. {"rate": handshakes/s, "done", "errors"}
 *   tlsload bulk --host H --port P [--conns N] [--seconds S]
 *       N streams, each: one handshake, then 64 KiB writes for S seconds. {"mbps": MB/s}
 */
#include <arpa/inet.h>
#include <errno.h>
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
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

#define MAX_THREADS 256
#define REPLY_LEN 64
#define CHUNK (64 << 10)

static const char *g_cmd, *g_host = "127.0.0.1", *g_cert, *g_key, *g_mode = "close";
static int g_port, g_conns = 32, g_threads = 32, g_req = 64;
static double g_seconds = 5;
static SSL_CTX *g_ctx;
static int g_lfd = -1;
static volatile int g_stop;

struct result {
    uint64_t done, errors, bytes;
};

static uint64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void die(const char *what)
{
    fprintf(stderr, "tlsload: %s: %s\n", what, strerror(errno));
    exit(1);
}

static void die_ssl(const char *what)
{
    fprintf(stderr, "tlsload: %s\n", what);
    ERR_print_errors_fp(stderr);
    exit(1);
}

static int read_full(SSL *s, char *buf, int len)
{
    int got = 0;

    while (got < len) {
        int n = SSL_read(s, buf + got, len - got);

        if (n <= 0)
            return -1;
        got += n;
    }
    return got;
}

/* ---- server ---- */

static void *server_loop(void *arg)
{
    static char buf[CHUNK];
    char reply[REPLY_LEN];

    (void)arg;
    memset(reply, 'r', sizeof(reply));
    for (;;) {
        int fd = accept(g_lfd, NULL, NULL), one = 1;
        SSL *s;

        if (fd == -1) {
            if (errno == EINTR || errno == ECONNABORTED || errno == EMFILE)
                continue;
            die("accept");
        }
        (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        s = SSL_new(g_ctx);
        SSL_set_fd(s, fd);
        if (SSL_accept(s) == 1) {
            if (strcmp(g_mode, "sink") == 0) {
                while (SSL_read(s, buf, sizeof(buf)) > 0)
                    ;
            } else {
                int n = SSL_read(s, buf, sizeof(buf));

                if (n > 0)
                    (void)SSL_write(s, reply, sizeof(reply));
            }
        }
        ERR_clear_error();
        SSL_free(s);
        close(fd);
    }
    return NULL;
}

static int run_server(void)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)g_port)};
    pthread_t tid[MAX_THREADS];
    int one = 1, i;

    g_ctx = SSL_CTX_new(TLS_server_method());
    if (g_ctx == NULL || SSL_CTX_use_certificate_chain_file(g_ctx, g_cert) != 1 ||
        SSL_CTX_use_PrivateKey_file(g_ctx, g_key, SSL_FILETYPE_PEM) != 1)
        die_ssl("server certificate");
    /* OpenSSL's defaults (tickets on), as a real service has them: a proxy may resume its own
     * sessions to the service; the clients never resume (full handshakes). */
    g_lfd = socket(AF_INET, SOCK_STREAM, 0);
    if (g_lfd == -1)
        die("socket");
    (void)setsockopt(g_lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(g_lfd, (struct sockaddr *)&a, sizeof(a)) == -1 || listen(g_lfd, 4096) == -1)
        die("listen");
    for (i = 0; i < g_threads; i++)
        if (pthread_create(&tid[i], NULL, server_loop, NULL) != 0)
            die("pthread_create");
    printf("{\"listening\": %d}\n", g_port);
    fflush(stdout);
    for (i = 0; i < g_threads; i++)
        pthread_join(tid[i], NULL);
    return 0;
}

/* ---- clients ---- */

static int dial(const struct sockaddr_in *a)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    /* A connection that never answers is an error after this, not a client stuck for good. */
    struct timeval tmo = {5, 0};

    if (fd == -1)
        return -1;
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    (void)setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tmo, sizeof(tmo));
    (void)setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tmo, sizeof(tmo));
    if (connect(fd, (const struct sockaddr *)a, sizeof(*a)) == -1) {
        close(fd);
        return -1;
    }
    return fd;
}

/* TLSLOAD_DEBUG: which step of which connection failed, for a reader matching it up with the
 * proxy's sockets (ss). */
static void debug_fail(int fd, const char *what)
{
    struct sockaddr_in me;
    socklen_t len = sizeof(me);
    int e = errno;

    if (getenv("TLSLOAD_DEBUG") == NULL)
        return;
    if (getsockname(fd, (struct sockaddr *)&me, &len) == -1)
        me.sin_port = 0;
    fprintf(stderr, "tlsload: %s failed: port %u: %s\n", what, ntohs(me.sin_port), strerror(e));
}

static void *client_loop(void *arg)
{
    struct result *r = arg;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)g_port)};
    static char chunk[CHUNK];
    char *req = malloc((size_t)g_req), reply[REPLY_LEN];
    bool bulk = strcmp(g_cmd, "bulk") == 0;

    memset(req, 'q', (size_t)g_req);
    memset(chunk, 'b', sizeof(chunk));
    inet_pton(AF_INET, g_host, &a.sin_addr);
    while (!g_stop) {
        int fd = dial(&a);
        SSL *s;

        if (fd == -1) {
            r->errors++;
            usleep(1000);
            continue;
        }
        s = SSL_new(g_ctx);
        SSL_set_fd(s, fd);
        if (SSL_connect(s) != 1) {
            debug_fail(fd, "handshake");
            r->errors++;
        } else if (bulk) {
            while (!g_stop) {
                int n = SSL_write(s, chunk, sizeof(chunk));

                if (n <= 0) {
                    r->errors++;
                    break;
                }
                r->bytes += (uint64_t)n;
            }
            (void)SSL_shutdown(s);
        } else if (SSL_write(s, req, g_req) != g_req || read_full(s, reply, REPLY_LEN) < 0) {
            debug_fail(fd, "request or reply");
            r->errors++;
        } else {
            r->done++;
        }
        ERR_clear_error();
        SSL_free(s);
        close(fd);
        if (bulk)
            break;
    }
    free(req);
    return NULL;
}

static int run_client(void)
{
    pthread_t tid[MAX_THREADS];
    struct result res[MAX_THREADS], sum = {0, 0, 0};
    uint64_t t0, t1;
    int i;

    if (g_conns > MAX_THREADS)
        g_conns = MAX_THREADS;
    g_ctx = SSL_CTX_new(TLS_client_method());
    if (g_ctx == NULL)
        die_ssl("client context");
    SSL_CTX_set_session_cache_mode(g_ctx, SSL_SESS_CACHE_OFF);
    memset(res, 0, sizeof(res));
    t0 = now_ns();
    for (i = 0; i < g_conns; i++)
        if (pthread_create(&tid[i], NULL, client_loop, &res[i]) != 0)
            die("pthread_create");
    usleep((useconds_t)(g_seconds * 1e6));
    g_stop = 1;
    t1 = now_ns();
    for (i = 0; i < g_conns; i++) {
        pthread_join(tid[i], NULL);
        sum.done += res[i].done;
        sum.errors += res[i].errors;
        sum.bytes += res[i].bytes;
    }
    printf("{\"rate\": %.1f, \"done\": %llu, \"errors\": %llu, \"bytes\": %llu, \"mbps\": %.1f}\n",
           (double)sum.done / ((double)(t1 - t0) / 1e9), (unsigned long long)sum.done,
           (unsigned long long)sum.errors, (unsigned long long)sum.bytes,
           (double)sum.bytes / 1e6 / ((double)(t1 - t0) / 1e9));
    return 0;
}

int main(int argc, char **argv)
{
    int i;

    signal(SIGPIPE, SIG_IGN);
    if (argc < 2) {
        fprintf(stderr, "usage: tlsload server|hs|bulk [options]\n");
        return 2;
    }
    g_cmd = argv[1];
    for (i = 2; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];

        if (strcmp(k, "--port") == 0)
            g_port = atoi(v);
        else if (strcmp(k, "--host") == 0)
            g_host = v;
        else if (strcmp(k, "--cert") == 0)
            g_cert = v;
        else if (strcmp(k, "--key") == 0)
            g_key = v;
        else if (strcmp(k, "--mode") == 0)
            g_mode = v;
        else if (strcmp(k, "--threads") == 0)
            g_threads = atoi(v);
        else if (strcmp(k, "--conns") == 0)
            g_conns = atoi(v);
        else if (strcmp(k, "--seconds") == 0)
            g_seconds = atof(v);
        else if (strcmp(k, "--req") == 0)
            g_req = atoi(v);
        else {
            fprintf(stderr, "tlsload: unknown option %s\n", k);
            return 2;
        }
    }
    if (g_threads < 1 || g_threads > MAX_THREADS || g_port <= 0 || g_req < 1)
        return 2;
    if (strcmp(g_cmd, "server") == 0)
        return run_server();
    if (strcmp(g_cmd, "hs") == 0 || strcmp(g_cmd, "bulk") == 0)
        return run_client();
    fprintf(stderr, "tlsload: unknown command %s\n", g_cmd);
    return 2;
}
