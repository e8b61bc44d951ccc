/* controld's listening sockets, and what their guards closed (ctl_listen.h). */
#include "controld/ctl_listen.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "controld/ctl_auth.h"
#include "controld/ctl_health.h"
#include "fgx/log.h"

/* Sources remembered for the one-note-a-minute rule (per listener); past that, the least recent is
 * forgotten (a flood from more addresses than this notes at most this many a minute). */
#define LISTEN_NOTED 256
#define LISTEN_NOTE_NS (60ull * 1000000000ull)

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct ctl_listen_view views[CTL_LISTENER_N];
static struct {
    struct fgx_peer src;
    enum ctl_listener l;
    uint64_t at_ns; /* 0: free */
} noted[LISTEN_NOTED];

static const char *const names[CTL_LISTENER_N] = {"control", "web"};

static uint64_t mono_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

const char *ctl_listener_name(enum ctl_listener l)
{
    return (unsigned)l < CTL_LISTENER_N ? names[l] : "?";
}

void ctl_listen_limits(enum ctl_listener l, unsigned max, unsigned per_src, unsigned handshake_s)
{
    pthread_mutex_lock(&lock);
    views[l].on = true;
    views[l].max = max;
    views[l].per_src = per_src;
    views[l].handshake_s = handshake_s;
    pthread_mutex_unlock(&lock);
}

void ctl_listen_stream_limits(unsigned per_session, unsigned per_src, unsigned max)
{
    pthread_mutex_lock(&lock);
    views[CTL_LISTENER_WEB].streams_per_session = per_session;
    views[CTL_LISTENER_WEB].streams_per_src = per_src;
    views[CTL_LISTENER_WEB].streams_max = max;
    pthread_mutex_unlock(&lock);
}

void ctl_listen_gauge(enum ctl_listener l, unsigned open, unsigned pending, unsigned streams)
{
    pthread_mutex_lock(&lock);
    views[l].open = open;
    views[l].pending = pending;
    views[l].streams = streams;
    pthread_mutex_unlock(&lock);
}

/* Whether src may have a note of listener l now (under lock): one a minute per source. */
static bool note_due(enum ctl_listener l, const struct fgx_peer *src, uint64_t now)
{
    size_t oldest = 0;

    for (size_t i = 0; i < LISTEN_NOTED; i++) {
        if (noted[i].at_ns && noted[i].l == l && fgx_conn_same_src(&noted[i].src, src)) {
            if (now - noted[i].at_ns < LISTEN_NOTE_NS)
                return false;
            noted[i].at_ns = now;
            return true;
        }
        if (noted[i].at_ns < noted[oldest].at_ns)
            oldest = i;
    }
    noted[oldest].src = *src;
    noted[oldest].l = l;
    noted[oldest].at_ns = now;
    return true;
}

void ctl_listen_hit(enum ctl_listener l, enum ctl_limit_hit hit, const struct fgx_peer *src,
                    unsigned n)
{
    struct ctl_listen_view v;
    char who[64];
    bool due;

    if (n == 0 || (unsigned)hit >= CTL_HIT_N)
        return;
    pthread_mutex_lock(&lock);
    views[l].hits[hit] += n;
    due = note_due(l, src, mono_ns() | 1);
    v = views[l];
    pthread_mutex_unlock(&lock);
    if (!due)
        return;
    ctl_auth_peer_format(src, who, sizeof(who));
    switch (hit) {
    case CTL_HIT_TIMEOUT:
        ctl_health_note(0, CTL_HEALTH_WARN, "listen-limit", v.hits[hit],
                        "%s listener: closed %u connection(s) from %s that sent no request "
                        "within %u s (more this minute are only counted in status)",
                        names[l], n, who, v.handshake_s);
        break;
    case CTL_HIT_PER_SRC:
        ctl_health_note(0, CTL_HEALTH_WARN, "listen-limit", v.hits[hit],
                        "%s listener: closed %u connection(s) from %s: more than %u open from "
                        "that address (more this minute are only counted in status)",
                        names[l], n, who, v.per_src);
        break;
    case CTL_HIT_FULL:
        ctl_health_note(0, CTL_HEALTH_WARN, "listen-limit", v.hits[hit],
                        "%s listener full (%u connections): closed %u from %s, the address "
                        "holding the most, for newcomers (more this minute are only counted "
                        "in status)",
                        names[l], v.max, n, who);
        break;
    case CTL_HIT_STREAM_SESSION:
    case CTL_HIT_STREAM_SRC:
    case CTL_HIT_STREAM_FULL:
        ctl_health_note(0, CTL_HEALTH_WARN, "listen-limit", v.hits[hit],
                        "web listener: refused a live stream from %s: more than %u %s (more "
                        "this minute are only counted in status)",
                        who,
                        hit == CTL_HIT_STREAM_SESSION ? v.streams_per_session
                        : hit == CTL_HIT_STREAM_SRC   ? v.streams_per_src
                                                      : v.streams_max,
                        hit == CTL_HIT_STREAM_SESSION ? "for one session"
                        : hit == CTL_HIT_STREAM_SRC   ? "from that address"
                                                      : "in all");
        break;
    default:
        break;
    }
}

void ctl_listen_control_cut(const struct fgx_peer *peer, int why, unsigned n, void *arg)
{
    (void)arg;
    ctl_listen_hit(CTL_LISTENER_CONTROL,
                   why == FGX_GUARD_LATE       ? CTL_HIT_TIMEOUT
                   : why == FGX_GUARD_PER_PEER ? CTL_HIT_PER_SRC
                                               : CTL_HIT_FULL,
                   peer, n);
}

void ctl_listen_control_gauge(unsigned pending, void *arg)
{
    (void)arg;
    ctl_listen_gauge(CTL_LISTENER_CONTROL, pending, pending, 0);
}

void ctl_listen_view_get(enum ctl_listener l, struct ctl_listen_view *out)
{
    pthread_mutex_lock(&lock);
    *out = views[l];
    pthread_mutex_unlock(&lock);
}

void ctl_listen_reset(void)
{
    pthread_mutex_lock(&lock);
    memset(views, 0, sizeof(views));
    memset(noted, 0, sizeof(noted));
    pthread_mutex_unlock(&lock);
}

unsigned long ctl_listen_raise_nofile(void)
{
    struct rlimit rl;
    rlim_t was;

    if (getrlimit(RLIMIT_NOFILE, &rl) == -1) {
        fgx_warn("cannot read the open-files limit: %s", strerror(errno));
        return 1024;
    }
    was = rl.rlim_cur;
    if (rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl) == -1) {
            fgx_warn("cannot raise the open-files limit from %llu to %llu: %s",
                     (unsigned long long)was, (unsigned long long)rl.rlim_max, strerror(errno));
            rl.rlim_cur = was;
        } else {
            fgx_info("open-files limit raised from %llu to %llu (its hard limit): each "
                     "connection to a listener holds one",
                     (unsigned long long)was, (unsigned long long)rl.rlim_cur);
        }
    }
    return rl.rlim_cur == RLIM_INFINITY ? 1ul << 20 : (unsigned long)rl.rlim_cur;
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

int ctl_listen_tcp(const char *what, const char *addr, int *fd_out, uint16_t *port_out)
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
        fgx_err("%s: bad listen address \"%s\": use ADDR:PORT or [ADDR6]:PORT", what, addr);
        return -EINVAL;
    }
    gai = getaddrinfo(host, port, &hints, &res);
    if (gai != 0) {
        fgx_err("%s: cannot resolve \"%s\": %s", what, addr, gai_strerror(gai));
        return -EINVAL;
    }
    fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd == -1)
        goto fail;
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) == -1 ||
        bind(fd, res->ai_addr, res->ai_addrlen) == -1 || listen(fd, CTL_LISTEN_BACKLOG) == -1 ||
        getsockname(fd, &bound.sa, &sl) == -1)
        goto fail;
    *port_out = ntohs(bound.sa.sa_family == AF_INET6 ? bound.in6.sin6_port : bound.in.sin_port);
    *fd_out = fd;
    freeaddrinfo(res);
    return 0;
fail:
    rv = -errno;
    fgx_err("%s: cannot listen on %s: %s", what, addr, strerror(errno));
    if (fd != -1)
        close(fd);
    freeaddrinfo(res);
    return rv;
}
