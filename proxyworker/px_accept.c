/* Accept stage of proxyworker: one event loop per thread with its own SO_REUSEPORT listening
 * sockets (IPv4 and IPv6, IP_TRANSPARENT so the tproxy rules can hand them connections for any
 * address). A connection -> its original destination (the accepted socket's local address) ->
 * its service -> an upstream socket bound to the client's address (so the real service sees the
 * client) and marked FGX_MARK (so no rule redirects it again) -> the relay stage. */
#include "px.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/tcp.h>

#include <event2/event.h>
#include <event2/listener.h>
#include <event2/thread.h>

#include "fgx/log.h"

/* The onward connection speaks from the client's address, so its 4-tuple (client address,
 * onward port, service address, service port) must never be a client's: in this namespace the
 * service's socket of the onward leg and the proxy's accepted socket of a client from that port
 * would share one address pair. Either way round it fails: an onward port equal to a connected
 * client's lands the onward SYN on the accepted socket (its challenge ACK makes the onward
 * socket reset it); a client connecting from a port an onward connection holds meets the
 * service's own socket of that leg in tproxy's established lookup, which is not transparent,
 * so tproxy passes and the SYN never reaches the proxy. Clients behind a NAT come from any
 * unprivileged port (1024-65535; Linux NAT maps an unprivileged port to an unprivileged one),
 * so onward ports are the privileged ones, which only a client running as root binds on
 * purpose. The kernel does not choose there itself (a per-socket IP_LOCAL_PORT_RANGE only
 * narrows the namespace's ip_local_port_range, 32768-60999 by default): bind_onward() picks
 * the port; a port a service of this box listens on (22, 80, ...) is skipped as taken. */
#define PX_ONWARD_PORT_LO 1
#define PX_ONWARD_PORT_HI 1023
#define PX_ONWARD_TRIES 32

uint64_t px_now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static int set_int(int fd, int level, int opt, int v, const char *what)
{
    if (setsockopt(fd, level, opt, &v, sizeof(v)) == -1) {
        int e = errno;

        fgx_err("setsockopt %s: %s", what, strerror(e));
        return -e;
    }
    return 0;
}

/* A listening socket on every address of family, port: SO_REUSEPORT so that each thread has
 * its own (the kernel spreads connections over them), IP_TRANSPARENT so tproxy may give it
 * connections addressed to anything. Returns the fd or a negative errno. */
static int listen_socket(int family, uint16_t port)
{
    struct sockaddr_storage ss;
    socklen_t len;
    int fd, ret;

    memset(&ss, 0, sizeof(ss));
    if (family == AF_INET) {
        struct sockaddr_in *a = (struct sockaddr_in *)&ss;

        a->sin_family = AF_INET;
        a->sin_port = htons(port);
        len = sizeof(*a);
    } else {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;

        a->sin6_family = AF_INET6;
        a->sin6_port = htons(port);
        len = sizeof(*a);
    }
    fd = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd == -1) {
        ret = -errno;
        goto err;
    }
    if ((ret = set_int(fd, SOL_SOCKET, SO_REUSEADDR, 1, "SO_REUSEADDR")) != 0 ||
        (ret = set_int(fd, SOL_SOCKET, SO_REUSEPORT, 1, "SO_REUSEPORT")) != 0)
        goto err;
    /* Accepted sockets inherit it: one setsockopt less per connection. */
    if ((ret = set_int(fd, IPPROTO_TCP, TCP_NODELAY, 1, "TCP_NODELAY")) != 0)
        goto err;
    if (family == AF_INET)
        ret = set_int(fd, SOL_IP, IP_TRANSPARENT, 1, "IP_TRANSPARENT");
    else if ((ret = set_int(fd, SOL_IPV6, IPV6_V6ONLY, 1, "IPV6_V6ONLY")) == 0)
        ret = set_int(fd, SOL_IPV6, IPV6_TRANSPARENT, 1, "IPV6_TRANSPARENT");
    if (ret != 0)
        goto err;
    if (bind(fd, (struct sockaddr *)&ss, len) == -1 || listen(fd, PX_BACKLOG) == -1) {
        ret = -errno;
        goto err;
    }
    return fd;
err:
    if (fd != -1)
        close(fd);
    return ret;
}

/* Close with a RST rather than a FIN: the peer must not take a refused or blocked connection
 * for a clean end of data. */
static void close_reset(int fd)
{
    struct linger l = {1, 0};

    (void)setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
    close(fd);
}

static const uint8_t *sa_addr(const struct sockaddr_storage *ss)
{
    if (ss->ss_family == AF_INET)
        return (const uint8_t *)&((const struct sockaddr_in *)ss)->sin_addr;
    return (const uint8_t *)&((const struct sockaddr_in6 *)ss)->sin6_addr;
}

static uint16_t sa_port(const struct sockaddr_storage *ss)
{
    if (ss->ss_family == AF_INET)
        return ntohs(((const struct sockaddr_in *)ss)->sin_port);
    return ntohs(((const struct sockaddr_in6 *)ss)->sin6_port);
}

/* Bind fd to the client's address and a port of PX_ONWARD_PORT_LO..HI, taken in turn from the
 * thread's cursor: the kernel will not choose below its ip_local_port_range itself (above).
 * The socket has SO_REUSEADDR, so a port is shared by the onward connections to different
 * services and one left in TIME_WAIT can be bound again; a port the same 4-tuple still holds
 * fails at connect() (EADDRNOTAVAIL), and px_relay_start() asks again. A port bound without
 * SO_REUSEADDR (a listener of the box) is skipped here; after PX_ONWARD_TRIES of them, or when
 * kernel_port (px_relay_start()'s last try), the kernel chooses, from the clients' range, where
 * a clash is possible again: said, rate-limited. Returns 0, or a negative errno when even that
 * fails. */
static int bind_onward(struct px_thread *t, int fd, struct sockaddr_storage *b, socklen_t len,
                       bool kernel_port)
{
    static __thread unsigned long long last_log;
    const unsigned span = PX_ONWARD_PORT_HI - PX_ONWARD_PORT_LO + 1;
    int i, ret;

    errno = EADDRINUSE;
    for (i = 0; !kernel_port && i < PX_ONWARD_TRIES; i++) {
        uint16_t port = (uint16_t)(PX_ONWARD_PORT_LO + t->onward_next++ % span);

        if (b->ss_family == AF_INET)
            ((struct sockaddr_in *)b)->sin_port = htons(port);
        else
            ((struct sockaddr_in6 *)b)->sin6_port = htons(port);
        if (bind(fd, (struct sockaddr *)b, len) == 0)
            return 0;
        if (errno != EADDRINUSE)
            break;
    }
    /* Many ports of this client address taken, or a bind refused: skip ahead, and let the
     * kernel choose this time. */
    if (errno == EADDRINUSE)
        fgx_log_ratelimited(&last_log, FGX_LOG_WARN,
                            "onward ports %u-%u of a client address all taken (open or in "
                            "TIME_WAIT): the kernel chose one from the clients' range, which a "
                            "client's may clash with",
                            PX_ONWARD_PORT_LO, PX_ONWARD_PORT_HI);
    t->onward_next += span / 7;
    if (b->ss_family == AF_INET)
        ((struct sockaddr_in *)b)->sin_port = 0;
    else
        ((struct sockaddr_in6 *)b)->sin6_port = 0;
    if ((ret = set_int(fd, SOL_IP, IP_BIND_ADDRESS_NO_PORT, 1, "IP_BIND_ADDRESS_NO_PORT")) != 0)
        return ret;
    if (bind(fd, (struct sockaddr *)b, len) == -1) {
        ret = -errno;
        fgx_log_ratelimited(&last_log, FGX_LOG_ERROR, "upstream bind to the client's address: %s",
                            strerror(errno));
        return ret;
    }
    return 0;
}

int px_accept_onward(struct px_thread *t, const struct sockaddr_storage *client, bool kernel_port,
                     int *out)
{
    struct sockaddr_storage b = *client;
    socklen_t len;
    int fd, ret;

    fd = socket(client->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd == -1) {
        ret = -errno;
        fgx_err("upstream socket: %s", strerror(errno));
        return ret;
    }
    if (client->ss_family == AF_INET) {
        len = sizeof(struct sockaddr_in);
        ret = set_int(fd, SOL_IP, IP_TRANSPARENT, 1, "IP_TRANSPARENT");
    } else {
        len = sizeof(struct sockaddr_in6);
        ret = set_int(fd, SOL_IPV6, IPV6_TRANSPARENT, 1, "IPV6_TRANSPARENT");
    }
    if (ret == 0)
        ret = set_int(fd, SOL_SOCKET, SO_MARK, (int)FGX_MARK, "SO_MARK");
    if (ret == 0)
        (void)set_int(fd, IPPROTO_TCP, TCP_NODELAY, 1, "TCP_NODELAY");
    if (ret == 0)
        ret = set_int(fd, SOL_SOCKET, SO_REUSEADDR, 1, "SO_REUSEADDR");
    if (ret == 0)
        ret = bind_onward(t, fd, &b, len, kernel_port);
    if (ret != 0) {
        close(fd);
        return ret;
    }
    *out = fd;
    return 0;
}

static void refuse(struct px_thread *t, int fd, uint64_t *ctr)
{
    PX_CTR_ADD(ctr, 1);
    (void)t;
    close_reset(fd);
}

static void on_accept(struct evconnlistener *lis, evutil_socket_t fd, struct sockaddr *peer,
                      int peerlen, void *arg)
{
    static __thread unsigned long long last_limit, last_src, last_svc, last_oom;
    struct px_thread *t = arg;
    struct px_worker *w = t->w;
    const struct fgx_wsvc *svc;
    const struct fgx_waddr *wa = NULL;
    struct fgx_wtls *tls;
    struct sockaddr_storage local;
    socklen_t llen = sizeof(local);
    struct px_conn *c;
    int ufd = -1;
    unsigned per_src;
    bool slot;

    (void)lis;
    t->now_ms = px_now_ms();
    px_match_switch(t);
    if (peerlen <= 0 || (size_t)peerlen > sizeof(struct sockaddr_storage)) {
        refuse(t, fd, &t->ctr.unclassified);
        return;
    }
    if (getsockname(fd, (struct sockaddr *)&local, &llen) == -1) {
        refuse(t, fd, &t->ctr.unclassified);
        return;
    }
    svc = fgx_wcfg_lookup_addr(t->cfg, IPPROTO_TCP, local.ss_family == AF_INET ? 4 : 6,
                               sa_addr(&local), sa_port(&local), &wa);
    if (svc == NULL) {
        /* Only a running proxy-layer service's connections are sent here; one for no service
         * (a rule and a ruleset out of step) is refused, never relayed unfiltered. */
        char a[INET6_ADDRSTRLEN] = "?";

        inet_ntop(local.ss_family, sa_addr(&local), a, sizeof(a));
        fgx_log_ratelimited(&last_svc, FGX_LOG_WARN,
                            "connection to %s port %u: no proxy-layer service there, refused", a,
                            sa_port(&local));
        refuse(t, fd, &t->ctr.unclassified);
        return;
    }
    /* The service's own limit (issue 27): its connections open over every thread. Two
     * threads accepting at the same moment may each let one past it; a connection past it is
     * counted, then refused or (forward) relayed and filtered as any. */
    if (svc->max_conns > 0 && px_stats_svc_open(w, svc->id) >= svc->max_conns) {
        static __thread unsigned long long last_svc_limit;
        uint64_t *hits = &px_stats_svc(&t->ctr, svc->id)->limit_hits;

        fgx_log_ratelimited(&last_svc_limit, FGX_LOG_WARN,
                            "service %u has its %u connections open: new connection %s "
                            "(service set --max-conns)",
                            svc->id, svc->max_conns,
                            svc->over_limit_forward ? "forwarded all the same" : "refused");
        if (!svc->over_limit_forward) {
            refuse(t, fd, hits);
            return;
        }
        PX_CTR_ADD(hits, 1);
    }
    /* One source may hold only so many: checked before the global limit, so that a flood from
     * one source never makes room at the cost of another. At its limit the source's own most
     * idle connection (of this thread) makes room: behind one address (a NAT) an idler must not
     * keep that address's next client out either. Its places pass to the new connection. The
     * limit holds per thread, as its share (rounded up): a thread can only close its own. */
    per_src = w->max_per_src == 0 ? 0 : (w->max_per_src + w->nthreads - 1) / w->nthreads;
    slot = false;
    if (!px_src_take(&w->src, (const struct sockaddr_storage *)(void *)peer, t->idx, per_src)) {
        if (!px_relay_evict_src(t, (const struct sockaddr_storage *)(void *)peer)) {
            fgx_log_ratelimited(&last_src, FGX_LOG_WARN,
                                "a client source has %u connections open, none of them on this "
                                "thread to close: new connection refused (--max-conns-per-src)",
                                w->max_per_src);
            refuse(t, fd, &t->ctr.src_refused);
            return;
        }
        fgx_log_ratelimited(&last_src, FGX_LOG_WARN,
                            "a client source has %u connections open: its most idle make room "
                            "(--max-conns-per-src)",
                            w->max_per_src);
        slot = true;
    }
    /* At the limit the most idle connection of this thread makes room: an idler must never
     * keep a new client out. Only a thread holding none refuses (its share is elsewhere). A
     * connection for no service never gets this far (above), so it takes nobody's place. */
    if (!slot && __atomic_add_fetch(&w->nconns, 1, __ATOMIC_RELAXED) > w->max_conns) {
        __atomic_sub_fetch(&w->nconns, 1, __ATOMIC_RELAXED);
        if (!px_relay_evict(t)) {
            fgx_log_ratelimited(&last_limit, FGX_LOG_WARN,
                                "connection limit of %u reached, none of this thread's to "
                                "close: new connection refused (--max-conns)",
                                w->max_conns);
            px_src_put(&w->src, (const struct sockaddr_storage *)(void *)peer, t->idx);
            refuse(t, fd, &t->ctr.limit_refused);
            return;
        }
        fgx_log_ratelimited(&last_limit, FGX_LOG_WARN,
                            "connection limit of %u reached: the most idle connections make "
                            "room (--max-conns)",
                            w->max_conns);
    }
    c = px_conn_new();
    if (c == NULL ||
        px_accept_onward(t, (const struct sockaddr_storage *)(void *)peer, false, &ufd) != 0) {
        if (c == NULL)
            fgx_log_ratelimited(&last_oom, FGX_LOG_ERROR, "connection: out of memory");
        free(c);
        px_src_put(&w->src, (const struct sockaddr_storage *)(void *)peer, t->idx);
        __atomic_sub_fetch(&w->nconns, 1, __ATOMIC_RELAXED);
        refuse(t, fd, &t->ctr.connect_failed);
        return;
    }
    c->t = t;
    c->family = local.ss_family == AF_INET ? 4 : 6;
    memcpy(&c->client, peer, (size_t)peerlen);
    c->server = local;
    c->service_id = svc->id;
    c->http = svc->http;
    c->h1up = svc->http && svc->http_upstream_http1;
    c->first_byte_ms = svc->first_byte_ms;
    /* The address's edge: TLS terminated there (tls), not (tcp), or as the service has it */
    c->edge = wa != NULL ? wa->edge : FGX_EDGE_DEFAULT;
    c->up_port = wa != NULL ? wa->to_port : 0;
    tls = c->edge == FGX_EDGE_TCP ? NULL : svc->tls;
    c->last_ms = t->now_ms;
    c->s[0].fd = fd;
    c->s[1].fd = ufd;
    fgx_reasm_init(&c->dir[0]);
    fgx_reasm_init(&c->dir[1]);
    if ((tls != NULL && px_tls_conn_start(c, tls) != 0) ||
        (tls == NULL && c->edge == FGX_EDGE_TLS)) {
        static __thread unsigned long long last_tls;

        fgx_log_ratelimited(&last_tls, FGX_LOG_WARN,
                            "service %u: TLS not ready (its certificate did not load, or out of "
                            "memory): connection refused",
                            svc->id);
        PX_CTR_ADD(&px_stats_svc(&t->ctr, svc->id)->tls_failed, 1);
        close(ufd);
        free(c);
        px_src_put(&w->src, (const struct sockaddr_storage *)(void *)peer, t->idx);
        __atomic_sub_fetch(&w->nconns, 1, __ATOMIC_RELAXED);
        close_reset(fd);
        return;
    }
    PX_CTR_ADD(&t->ctr.conns, 1);
    px_match_attach(c);
    px_relay_start(c);
}

static void on_accept_error(struct evconnlistener *lis, void *arg)
{
    static __thread unsigned long long last_log;
    int e = EVUTIL_SOCKET_ERROR();

    (void)lis;
    (void)arg;
    /* EMFILE and friends pass: the listener keeps going and the backlog waits. */
    fgx_log_ratelimited(&last_log, FGX_LOG_WARN, "accept: %s", strerror(e));
}

static void on_wake(evutil_socket_t fd, short what, void *arg)
{
    struct px_thread *t = arg;

    (void)fd;
    (void)what;
    if (__atomic_load_n(&t->w->stop, __ATOMIC_ACQUIRE)) {
        event_base_loopbreak(t->base);
        return;
    }
    t->now_ms = px_now_ms();
    px_match_switch(t);
}

static void on_reset_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    px_relay_resets(arg, false);
}

/* Liveness (issue 24): a timer every PX_ALIVE_MS stamps the loop, so an idle loop in epoll
 * stays fresh and one stuck inside a callback goes stale (heartbeat, fgx/wctl.h). */
static void on_alive(evutil_socket_t fd, short what, void *arg)
{
    struct px_thread *t = arg;

    (void)fd;
    (void)what;
    fgx_wctl_stamp(&t->alive_ms, fgx_wctl_now_ms());
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    struct px_thread *t = arg;

    (void)fd;
    (void)what;
    t->now_ms = px_now_ms();
    px_match_switch(t);
    px_relay_expire(t);
    px_udp_expire(t);
}

/* The proxy feeds its streams in order, so nothing is ever held for a later verdict. */
static void no_hold(void *arg, uint64_t cookie, bool accept)
{
    (void)arg;
    (void)cookie;
    (void)accept;
}

void px_thread_wake(struct px_thread *t)
{
    if (t->wake != NULL)
        event_active(t->wake, EV_READ, 0);
}

int px_thread_init(struct px_worker *w, struct px_thread *t, unsigned idx)
{
    static const int families[2] = {AF_INET, AF_INET6};
    struct timeval tv = {PX_TICK_MS / 1000, (PX_TICK_MS % 1000) * 1000};
    /* priority 0: a loop busy with bulk reads still stamps; only a stuck callback stops it */
    struct timeval alive_tv = {0, PX_ALIVE_MS * 1000};
    int i, fd, ret;

    t->w = w;
    t->idx = idx;
    fgx_cap_set_init(&t->caps, true);
    /* Threads start far apart, and elsewhere after each restart. */
    t->onward_next = (unsigned)px_now_ms() * 7919u + idx * 5003u;
    {
        struct event_config *cfg = event_config_new();

        if (cfg == NULL || event_config_set_max_dispatch_interval(cfg, NULL, 1, PX_PRIO_HEAVY))
            t->base = NULL;
        else
            t->base = event_base_new_with_config(cfg);
        if (cfg != NULL)
            event_config_free(cfg);
    }
    if (t->base == NULL || event_base_priority_init(t->base, PX_PRIO_COUNT) != 0) {
        fgx_err("thread %u: cannot create an event base", idx);
        return -ENOMEM;
    }
    ret = fgx_reasm_ctx_new(0, 0, no_hold, NULL, &t->reasm);
    if (ret != 0)
        return ret;
    fgx_reasm_ctx_set_log(t->reasm, px_match_log, t);
    t->buf = malloc(PX_READ_MAX + PX_H2_PREFACE_LEN); /* px_h2_read() may put bytes in front */
    if (t->buf == NULL) {
        fgx_err("thread %u: out of memory", idx);
        return -ENOMEM;
    }
    t->wake = event_new(t->base, -1, 0, on_wake, t);
    t->tick = event_new(t->base, -1, EV_PERSIST, on_tick, t);
    t->alive = event_new(t->base, -1, EV_PERSIST, on_alive, t);
    t->reset_timer = evtimer_new(t->base, on_reset_timer, t);
    if (t->wake == NULL || t->tick == NULL || t->reset_timer == NULL || t->alive == NULL ||
        event_add(t->tick, &tv) != 0 || event_priority_set(t->alive, 0) != 0 ||
        event_add(t->alive, &alive_tv) != 0) {
        fgx_err("thread %u: cannot create its events", idx);
        return -ENOMEM;
    }
    for (i = 0; i < 2; i++) {
        fd = listen_socket(families[i], w->port);
        if (fd < 0) {
            /* A host without IPv6 still proxies IPv4; without either, nothing works. */
            if (i == 1 && (fd == -EAFNOSUPPORT || fd == -EADDRNOTAVAIL)) {
                fgx_warn("no IPv6 listener: %s", strerror(-fd));
                continue;
            }
            fgx_err("listen on %s port %u: %s", i == 0 ? "IPv4" : "IPv6", w->port,
                    strerror(-fd));
            return fd;
        }
        t->lis[i] = evconnlistener_new(t->base, on_accept, t, LEV_OPT_CLOSE_ON_FREE, 0, fd);
        if (t->lis[i] == NULL) {
            close(fd);
            fgx_err("thread %u: cannot create a listener", idx);
            return -ENOMEM;
        }
        evconnlistener_set_error_cb(t->lis[i], on_accept_error);
    }
    ret = px_udp_thread_init(t);
    if (ret != 0)
        return ret;
    return px_script_thread_init(t, w->script_url);
}

void px_thread_release(struct px_thread *t)
{
    int i;

    for (i = 0; i < PX_LISTS; i++)
        while (t->list[i].head != NULL)
            px_relay_close(t->list[i].head, true);
    for (i = 0; i < 2; i++) {
        if (t->lis[i] != NULL)
            evconnlistener_free(t->lis[i]);
        t->lis[i] = NULL;
    }
    if (t->wake != NULL)
        event_free(t->wake);
    if (t->tick != NULL)
        event_free(t->tick);
    if (t->alive != NULL)
        event_free(t->alive);
    t->wake = t->tick = t->alive = NULL;
    px_relay_resets(t, true);
    px_udp_thread_release(t); /* its flows' script states, before the script link goes */
    px_script_thread_release(t);
    if (t->reset_timer != NULL)
        event_free(t->reset_timer);
    t->reset_timer = NULL;
    fgx_wcfg_unref(t->cfg);
    t->cfg = NULL;
    fgx_reasm_ctx_free(t->reasm);
    t->reasm = NULL;
    px_tls_thread_release(t);
    free(t->buf);
    t->buf = NULL;
    if (t->base != NULL)
        event_base_free(t->base);
    t->base = NULL;
    fgx_cap_set_release(&t->caps);
}

void *px_thread_main(void *arg)
{
    struct px_thread *t = arg;
    char name[16];

    /* named, so that ps, gdb and the liveness test find the event loops */
    (void)snprintf(name, sizeof(name), "px-loop-%u", t->idx);
    (void)pthread_setname_np(pthread_self(), name);
    t->now_ms = px_now_ms();
    fgx_wctl_stamp(&t->alive_ms, fgx_wctl_now_ms());
    px_match_switch(t);
    event_base_dispatch(t->base);
    return NULL;
}

int px_worker_open(struct px_worker *w)
{
    unsigned i;
    int ret;

    /* The control thread wakes the loops (event_active from another thread). */
    if (evthread_use_pthreads() != 0) {
        fgx_err("libevent: no pthreads support");
        return -ENOSYS;
    }
    if (px_src_init(&w->src, w->max_conns) != 0) {
        fgx_err("out of memory");
        return -ENOMEM;
    }
    w->threads = calloc(w->nthreads, sizeof(*w->threads));
    if (w->threads == NULL) {
        px_src_release(&w->src);
        fgx_err("out of memory");
        return -ENOMEM;
    }
    for (i = 0; i < w->nthreads; i++) {
        ret = px_thread_init(w, &w->threads[i], i);
        if (ret != 0)
            goto err;
    }
    return 0;
err:
    px_worker_stop(w);
    return ret;
}

int px_worker_start(struct px_worker *w)
{
    unsigned i;
    int ret;

    for (i = 0; i < w->nthreads; i++) {
        ret = pthread_create(&w->threads[i].tid, NULL, px_thread_main, &w->threads[i]);
        if (ret != 0) {
            fgx_err("pthread_create: %s", strerror(ret));
            ret = -ret;
            goto err;
        }
        w->threads[i].started = true;
    }
    return 0;
err:
    px_worker_stop(w);
    return ret;
}

void px_worker_stop(struct px_worker *w)
{
    unsigned i;

    if (w->threads == NULL)
        return;
    __atomic_store_n(&w->stop, 1, __ATOMIC_RELEASE);
    for (i = 0; i < w->nthreads; i++) {
        if (w->threads[i].started) {
            px_thread_wake(&w->threads[i]);
            pthread_join(w->threads[i].tid, NULL);
            w->threads[i].started = false;
        }
    }
    for (i = 0; i < w->nthreads; i++)
        px_thread_release(&w->threads[i]);
    fgx_wcfg_unref(w->current);
    w->current = NULL;
    free(w->threads);
    w->threads = NULL;
    px_src_release(&w->src);
}
