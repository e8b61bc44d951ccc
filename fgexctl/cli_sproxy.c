/* `fgexctl script proxy` (cli_sproxy.h): accept on --listen, connect to --to, give every chunk
 * of both directions to the file through fgex's own script link (fgx/swlink.h, as proxyworker
 * does) and pass it on, edited, or cut the connection, as the verdict says; print each verdict
 * and what the file logs. One thread and one poll loop: a direction waits for its chunk's
 * verdict before it reads more, so its bytes reach the other side in order and judged.
 *
 * The file runs in a scriptworker started here (its interpreters: fgex's sandbox, a script
 * uid, no network), never in this process. Each version of the file is a service id of its
 * own (a generation): a changed file loads beside the old one, new connections take the newest
 * that loaded, and open ones finish under the version they began with (its globals). */
#include "cli_sproxy.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>

#include "cli_args.h"
#include "fgx/swlink.h"
#include "fgx/wcfg.h"

#define SP_CONNS_MAX 256
#define SP_CHUNK 16384    /* one read, one call */
#define SP_OUT_MAX 65536  /* a chunk as the file edited it (at most ~60000 bytes) */
#define SP_WATCH_MS 250   /* how often the file's stat is compared */
#define SP_START_MS 15000 /* scriptworker's interpreters up and the first file answered */
#define SP_GENS_MAX 64    /* versions of the file loaded at once (open connections' ones) */
/* interpreters of controld's scriptworker run as CTL_PRIV_SCRIPT_UID_DEFAULT + i (i < 16):
 * ours run as the next uid, so neither may signal or ptrace the other's */
#define SP_SCRIPT_UID (2147352576u + FGX_SW_PROCS_MAX)

struct sp_dir {
    uint8_t in[SP_CHUNK]; /* the chunk waiting for its verdict */
    size_t inlen;
    bool waiting;
    uint32_t seq;
    uint8_t out[SP_OUT_MAX]; /* judged, to be written to the other side */
    size_t outlen, outoff;
    bool eof, shut; /* read to its end; its end passed on (shutdown) */
};

struct sp_conn {
    bool used;
    int fd[2]; /* 0: the client, 1: the service */
    bool connecting;
    uint64_t id;
    uint32_t gen; /* the file's version (its service id) */
    bool opened;  /* its first chunk went (DATA_OPEN) */
    bool final;   /* the file decided it for good: no more calls */
    bool v6;
    struct fgx_sw_addr addr;
    char name[INET6_ADDRSTRLEN + 8]; /* the client, as printed */
    struct sp_dir d[2];              /* 0: client -> service, 1: service -> client */
};

struct sp_gen {
    uint32_t id;
    uint8_t *script; /* the SCRIPT payload (no disabled functions, then the source) */
    size_t len;
    int state; /* 0: sent, 1: loaded, -1: refused */
};

struct sp {
    const struct cli_sproxy_opts *o;
    FILE *out;
    struct fgx_swlink link;
    struct fgx_wcfg *cfg; /* the versions loaded, as the link sends them */
    struct sp_gen gens[SP_GENS_MAX];
    size_t ngens;
    uint32_t next_gen;
    uint32_t cur; /* the version new connections take; 0: none loaded yet */
    struct sp_conn *conns;
    uint64_t next_conn;
    struct sockaddr_storage to;
    socklen_t tolen;
    struct stat st; /* the file when last read */
    pid_t sw;
    char dir[64];
};

static volatile sig_atomic_t sp_stop;

static void on_signal(int sig)
{
    (void)sig;
    sp_stop = 1;
}

static uint64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* One line of output, after the time of day. */
static void say(struct sp *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void say(struct sp *p, const char *fmt, ...)
{
    struct timespec ts;
    struct tm tm;
    char when[32] = "";
    va_list ap;

    clock_gettime(CLOCK_REALTIME, &ts);
    if (localtime_r(&ts.tv_sec, &tm))
        (void)strftime(when, sizeof(when), "%H:%M:%S", &tm);
    (void)fprintf(p->out, "%s.%03ld ", when, ts.tv_nsec / 1000000);
    va_start(ap, fmt);
    (void)vfprintf(p->out, fmt, ap);
    va_end(ap);
    (void)fputc('\n', p->out);
    (void)fflush(p->out);
}

static int addr_parse(const char *s, struct sockaddr_storage *ss, socklen_t *len)
{
    char host[INET6_ADDRSTRLEN + 2];
    const char *colon = strrchr(s, ':');
    struct addrinfo hints = {.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV,
                             .ai_socktype = SOCK_STREAM};
    struct addrinfo *ai = NULL;
    unsigned port;
    size_t hl;

    if (!colon || colon == s || cli_args_port(colon + 1, &port) < 0)
        return -EINVAL;
    hl = (size_t)(colon - s);
    if (s[0] == '[') {
        if (hl < 3 || s[hl - 1] != ']')
            return -EINVAL;
        s++;
        hl -= 2;
    }
    if (hl >= sizeof(host))
        return -EINVAL;
    memcpy(host, s, hl);
    host[hl] = '\0';
    if (getaddrinfo(host, colon + 1, &hints, &ai) != 0 || !ai)
        return -EINVAL;
    if (ss) {
        memcpy(ss, ai->ai_addr, ai->ai_addrlen);
        *len = ai->ai_addrlen;
    }
    freeaddrinfo(ai);
    return 0;
}

int cli_sproxy_addr_check(const char *s)
{
    return addr_parse(s, NULL, NULL);
}

static void addr_name(const struct sockaddr_storage *ss, char *buf, size_t cap)
{
    char h[INET6_ADDRSTRLEN] = "?";
    unsigned port = 0;

    if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const void *)ss;

        (void)inet_ntop(AF_INET6, &a->sin6_addr, h, sizeof(h));
        port = ntohs(a->sin6_port);
        (void)snprintf(buf, cap, "[%s]:%u", h, port);
        return;
    }
    (void)inet_ntop(AF_INET, &((const struct sockaddr_in *)(const void *)ss)->sin_addr, h,
                    sizeof(h));
    port = ntohs(((const struct sockaddr_in *)(const void *)ss)->sin_port);
    (void)snprintf(buf, cap, "%s:%u", h, port);
}

/* An address into the link's form (an IPv4 one in the first 4 bytes, ports in host order):
 * the client's (server false) or the service's. */
static void addr_fill(const struct sockaddr_storage *ss, struct fgx_sw_addr *a, bool server)
{
    uint8_t *to = server ? a->saddr : a->caddr;
    uint16_t port;

    if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *s6 = (const void *)ss;

        memcpy(to, &s6->sin6_addr, 16);
        port = ntohs(s6->sin6_port);
    } else {
        const struct sockaddr_in *s4 = (const void *)ss;

        memcpy(to, &s4->sin_addr, 4);
        port = ntohs(s4->sin_port);
    }
    if (server)
        a->sport = port;
    else
        a->cport = port;
}

/* ---- the file's versions ---- */

static struct sp_gen *gen_find(struct sp *p, uint32_t id)
{
    for (size_t i = 0; i < p->ngens; i++)
        if (p->gens[i].id == id)
            return &p->gens[i];
    return NULL;
}

/* The versions in use as one generation for the link: it sends what the interpreter lacks and
 * takes back (UNSCRIPT) what is gone. */
static int cfg_push(struct sp *p)
{
    struct fgx_wcfg *c = calloc(1, sizeof(*c) + p->ngens * sizeof(struct fgx_wsvc));

    if (!c)
        return -ENOMEM;
    c->refs = 1;
    c->nservices = p->ngens;
    for (size_t i = 0; i < p->ngens; i++) {
        struct fgx_wsvc *s = &c->svc[i];

        s->id = p->gens[i].id;
        s->ipproto = IPPROTO_TCP;
        s->script = p->gens[i].script; /* borrowed: the gens own them */
        s->script_len = p->gens[i].len;
        s->script_deadline_ms = p->o->deadline_ms;
        s->script_dirs = 3;
    }
    fgx_swlink_switch(&p->link, c);
    free(p->cfg);
    p->cfg = c;
    return 0;
}

static bool gen_in_use(const struct sp *p, uint32_t id)
{
    if (id == p->cur)
        return true;
    for (size_t i = 0; i < SP_CONNS_MAX; i++)
        if (p->conns[i].used && p->conns[i].gen == id)
            return true;
    return false;
}

/* Versions no connection uses and that new ones will not take: unloaded. The newest (still
 * being loaded) stays too. */
static void gens_trim(struct sp *p)
{
    size_t n = 0;
    bool changed = false;

    for (size_t i = 0; i < p->ngens; i++) {
        struct sp_gen *g = &p->gens[i];

        if (g->id == p->next_gen - 1 || gen_in_use(p, g->id)) {
            p->gens[n++] = *g;
            continue;
        }
        free(g->script);
        changed = true;
    }
    p->ngens = n;
    if (changed)
        (void)cfg_push(p);
}

/* The file read again: a new version when its text changed. */
static void file_load(struct sp *p, bool first)
{
    FILE *f = fopen(p->o->file, "rb");
    uint8_t *buf = NULL;
    size_t len = 0, cap = 0;
    struct stat st;
    struct sp_gen *last;

    if (!f) {
        say(p, "%s: %s%s", p->o->file, strerror(errno),
            first ? "" : " (new connections keep the file that loaded last)");
        return;
    }
    if (fstat(fileno(f), &st) == 0)
        p->st = st;
    for (;;) {
        size_t n;

        if (len + 4096 + 1 > cap) {
            uint8_t *nb = realloc(buf, cap = cap ? cap * 2 : 65536);

            if (!nb) {
                free(buf);
                (void)fclose(f);
                say(p, "%s: out of memory", p->o->file);
                return;
            }
            buf = nb;
        }
        n = fread(buf + 2 + len, 1, cap - len - 2, f);
        len += n;
        if (n == 0)
            break;
    }
    (void)fclose(f);
    buf[0] = buf[1] = 0; /* no function disabled */
    last = p->ngens ? &p->gens[p->ngens - 1] : NULL;
    if (last && last->len == len + 2 && memcmp(last->script, buf, len + 2) == 0) {
        free(buf);
        return; /* touched, not changed */
    }
    if (p->ngens == SP_GENS_MAX) {
        free(buf);
        say(p, "%s changed, but %d versions are still in use by open connections: not loaded",
            p->o->file, SP_GENS_MAX);
        return;
    }
    p->gens[p->ngens++] = (struct sp_gen){.id = p->next_gen++, .script = buf, .len = len + 2};
    say(p, "%s: %s version %" PRIu32 " (%zu bytes)", p->o->file,
        first ? "loading" : "changed: loading", p->next_gen - 1, len);
    gens_trim(p);
    if (cfg_push(p) < 0)
        say(p, "out of memory");
}

static void file_watch(struct sp *p)
{
    struct stat st;

    if (stat(p->o->file, &st) == -1)
        return; /* an editor between its unlink and its rename: looked at again next time */
    if (st.st_mtim.tv_sec != p->st.st_mtim.tv_sec || st.st_mtim.tv_nsec != p->st.st_mtim.tv_nsec ||
        st.st_size != p->st.st_size || st.st_ino != p->st.st_ino)
        file_load(p, false);
}

static void logs_print(struct sp *p, const struct sp_conn *c);

static void on_ack(void *arg, uint32_t service, uint8_t code)
{
    struct sp *p = arg;
    struct sp_gen *g = gen_find(p, service);

    if (!g || g->state != 0)
        return;          /* an UNSCRIPT's */
    logs_print(p, NULL); /* why it did not load, its warnings: first */
    g->state = code == 0 ? 1 : -1;
    if (code == 0) {
        /* a newer version may have loaded first: the newest wins */
        if (service > p->cur || p->cur == 0) {
            p->cur = service;
            say(p, "version %" PRIu32 " loaded: new connections use it", service);
        }
    } else {
        say(p, "version %" PRIu32 " did not load%s", service,
            p->cur ? ": new connections keep the version that loaded last"
                   : ": connections are refused until the file loads");
    }
    gens_trim(p);
}

/* A log entry's connection (the link's conn_fn): its addresses. */
static bool conn_find(void *arg, uint64_t id, struct fgx_dp_script_log *e)
{
    struct sp *p = arg;

    for (size_t i = 0; i < SP_CONNS_MAX; i++) {
        const struct sp_conn *c = &p->conns[i];

        if (c->used && c->id == id) {
            e->family = c->v6 ? 6 : 4;
            memcpy(e->caddr, c->addr.caddr, 16);
            memcpy(e->saddr, c->addr.saddr, 16);
            e->cport = c->addr.cport;
            e->sport = c->addr.sport;
            return true;
        }
    }
    return false;
}

/* What the file logged (prints, exceptions, warnings, timeouts), in the order it came: the
 * entries read with a verdict are that call's (the interpreter sends a call's entries just
 * before its verdict), named by its connection (c); the others by the file's version. The
 * blocks and edits are said with their verdict. */
static void logs_print(struct sp *p, const struct sp_conn *c)
{
    struct fgx_dp_stats st = {0};

    if (fgx_swlink_logs_take(&st) < 0)
        return;
    for (size_t i = 0; i < st.nscript_logs; i++) {
        struct fgx_dp_script_log *e = &st.script_logs[i];
        const char *kind = e->kind ? e->kind : "", *t = e->text ? e->text : "";
        char who[INET6_ADDRSTRLEN + 40];

        if (strcmp(kind, "block") == 0 || strcmp(kind, "edit") == 0)
            goto next;
        if (c)
            (void)snprintf(who, sizeof(who), "#%" PRIu64 " %s", c->id, c->name);
        else
            (void)snprintf(who, sizeof(who), "version %" PRIu32, e->service_id);
        /* one output line per line of text: a traceback stays readable */
        do {
            const char *nl = strchr(t, '\n');
            int n = nl ? (int)(nl - t) : (int)strlen(t);

            if (n > 0 || !nl)
                say(p, "%s %s%s%s: %.*s", who, kind, e->function && *e->function ? " " : "",
                    e->function ? e->function : "", n, t);
            t += n + (nl ? 1 : 0);
        } while (*t);
    next:
        free(e->kind);
        free(e->function);
        free(e->text);
    }
    free(st.script_logs);
}

/* ---- connections ---- */

static void conn_close(struct sp *p, struct sp_conn *c, bool reset)
{
    struct fgx_sw_hdr h = {.type = FGX_SW_CLOSE, .service = c->gen, .conn = c->id};

    for (int i = 0; i < 2; i++) {
        if (c->fd[i] < 0)
            continue;
        if (reset) {
            struct linger lg = {.l_onoff = 1, .l_linger = 0};

            (void)setsockopt(c->fd[i], SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
        }
        (void)close(c->fd[i]);
        c->fd[i] = -1;
    }
    if (c->opened && !c->final)
        (void)fgx_swlink_send(&p->link, &h, NULL);
    c->used = false;
    gens_trim(p);
}

static void on_accept(struct sp *p, int lfd)
{
    struct sockaddr_storage ca;
    socklen_t calen = sizeof(ca);
    struct sockaddr_storage sa;
    socklen_t salen = sizeof(sa);
    struct sp_conn *c = NULL;
    int fd = accept4(lfd, (struct sockaddr *)&ca, &calen, SOCK_NONBLOCK | SOCK_CLOEXEC), sfd;

    if (fd == -1)
        return;
    for (size_t i = 0; i < SP_CONNS_MAX && !c; i++)
        if (!p->conns[i].used)
            c = &p->conns[i];
    if (!c || p->cur == 0) {
        char n[INET6_ADDRSTRLEN + 8];

        addr_name(&ca, n, sizeof(n));
        say(p, "%s refused: %s", n,
            c ? "no version of the file has loaded" : "too many connections");
        (void)close(fd);
        return;
    }
    sfd = socket(p->to.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (sfd == -1 ||
        (connect(sfd, (struct sockaddr *)&p->to, p->tolen) == -1 && errno != EINPROGRESS)) {
        say(p, "cannot connect to %s: %s", p->o->to, strerror(errno));
        if (sfd != -1)
            (void)close(sfd);
        (void)close(fd);
        return;
    }
    memset(c, 0, sizeof(*c));
    c->used = true;
    c->fd[0] = fd;
    c->fd[1] = sfd;
    c->connecting = true;
    c->id = ++p->next_conn;
    c->gen = p->cur;
    c->v6 = ca.ss_family == AF_INET6;
    addr_fill(&ca, &c->addr, false);
    if (p->to.ss_family == ca.ss_family)
        addr_fill(&p->to, &c->addr, true);
    else if (getsockname(fd, (struct sockaddr *)&sa, &salen) == 0)
        addr_fill(&sa, &c->addr, true); /* the address it reached */
    addr_name(&ca, c->name, sizeof(c->name));
    say(p, "#%" PRIu64 " %s connected (version %" PRIu32 ")", c->id, c->name, c->gen);
}

/* What side x sends on next: n bytes of b (its own chunk or an edit), the chunk done with. */
static void dir_out(struct sp_dir *x, const uint8_t *b, size_t n)
{
    memcpy(x->out, b, n);
    x->outlen = n;
    x->outoff = 0;
    x->inlen = 0;
}

/* A chunk read from side d's reader: to the file, or straight on once the file decided. */
static void dir_read(struct sp *p, struct sp_conn *c, int d)
{
    struct sp_dir *x = &c->d[d];
    ssize_t n = read(c->fd[d], x->in, sizeof(x->in));
    struct fgx_sw_hdr h;
    int rv;

    if (n == -1 && (errno == EAGAIN || errno == EINTR))
        return;
    if (n <= 0) {
        if (n == -1) {
            say(p, "#%" PRIu64 " %s: %s", c->id, d ? "service" : "client", strerror(errno));
            conn_close(p, c, true);
            return;
        }
        x->eof = true;
        return;
    }
    if (c->final) {
        dir_out(x, x->in, (size_t)n);
        return;
    }
    x->inlen = (size_t)n;
    x->seq = ++p->link.seq;
    h = (struct fgx_sw_hdr){.type = FGX_SW_DATA,
                            .code = (uint8_t)d,
                            .service = c->gen,
                            .conn = c->id,
                            .seq = x->seq,
                            .len = (uint32_t)n};
    fgx_swlink_resend(&p->link, p->cfg);
    if (!c->opened) {
        h.code |= FGX_SW_DATA_OPEN | FGX_SW_DATA_ADDR | (c->v6 ? FGX_SW_DATA_V6 : 0);
        rv = fgx_swlink_send_addr(&p->link, &h, &c->addr, x->in);
    } else {
        rv = fgx_swlink_send(&p->link, &h, x->in);
    }
    if (rv < 0) {
        say(p, "#%" PRIu64 " %s: the script interpreter is not there (%s): %s", c->id, c->name,
            strerror(-rv), p->o->fail_open ? "passed (--fail-open)" : "cut");
        if (!p->o->fail_open) {
            conn_close(p, c, true);
            return;
        }
        dir_out(x, x->in, x->inlen);
        return;
    }
    c->opened = true;
    x->waiting = true;
}

static struct sp_conn *conn_by_id(struct sp *p, uint64_t id)
{
    for (size_t i = 0; i < SP_CONNS_MAX; i++)
        if (p->conns[i].used && p->conns[i].id == id)
            return &p->conns[i];
    return NULL;
}

static void on_verdict(struct sp *p, const struct fgx_sw_hdr *h, const uint8_t *pl, size_t len)
{
    static const char *const names[] = {"accept", "REJECT", "DROP", "ERROR", "TIMEOUT", "edit"};
    struct sp_conn *c = conn_by_id(p, h->conn);
    const char *fn = (const char *)pl, *detail = "";
    size_t fnlen = len ? strnlen(fn, len) : 0;
    struct sp_dir *x;
    int d;

    if (!c)
        return; /* closed while its call ran */
    if (c->d[0].waiting && c->d[0].seq == h->seq)
        d = 0;
    else if (c->d[1].waiting && c->d[1].seq == h->seq)
        d = 1;
    else
        return;
    x = &c->d[d];
    x->waiting = false;
    if (fnlen < len)
        detail = fn + fnlen + 1;
    if (h->code == FGX_SW_EDIT) {
        size_t nb = len > fnlen + 1 ? len - fnlen - 1 : 0;

        if (nb > sizeof(x->out))
            nb = sizeof(x->out);
        say(p, "#%" PRIu64 " %s %s %zu bytes: edited by %.*s to %zu bytes", c->id, c->name,
            d ? "s2c" : "c2s", x->inlen, (int)fnlen, fn, nb);
        dir_out(x, pl + fnlen + 1, nb);
        return;
    }
    {
        const char *name = names[h->code < 6 ? h->code : 3];
        size_t dlen = len > fnlen + 1 ? strnlen(detail, len - fnlen - 1) : 0;
        bool pass = h->code == FGX_SW_ACCEPT ||
                    ((h->code == FGX_SW_ERROR || h->code == FGX_SW_TIMEOUT) && p->o->fail_open);
        const char *then = !pass                              ? ": connection cut"
                           : h->code != FGX_SW_ACCEPT         ? " (passed: --fail-open)"
                           : (h->hash & FGX_SW_VERDICT_FINAL) ? " (the rest of the connection "
                                                                "passes unjudged)"
                                                              : "";

        say(p, "#%" PRIu64 " %s %s %zu bytes: %s%s%.*s%s%.*s%s", c->id, c->name, d ? "s2c" : "c2s",
            x->inlen, name, fnlen ? " by " : "", (int)fnlen, fn, dlen ? ": " : "", (int)dlen,
            detail, then);
        if (!pass) {
            conn_close(p, c, true);
            return;
        }
    }
    dir_out(x, x->in, x->inlen);
    if (h->code == FGX_SW_ACCEPT && (h->hash & FGX_SW_VERDICT_FINAL)) {
        struct fgx_sw_hdr cl = {.type = FGX_SW_CLOSE, .service = c->gen, .conn = c->id};

        c->final = true;
        (void)fgx_swlink_send(&p->link, &cl, NULL);
    }
}

static void link_read(struct sp *p)
{
    struct fgx_sw_hdr h;
    const uint8_t *pl;
    size_t len;

    while (fgx_swlink_recv(&p->link, &h, &pl, &len) == 0) {
        logs_print(p, conn_by_id(p, h.conn)); /* the call's: before the verdict it led to */
        on_verdict(p, &h, pl, len);
    }
    logs_print(p, NULL);
}

/* Judged bytes to the other side; an end passed on once all before it went. */
static void dir_write(struct sp *p, struct sp_conn *c, int d)
{
    struct sp_dir *x = &c->d[d];
    int to = c->fd[!d];

    while (x->outoff < x->outlen) {
        ssize_t n = send(to, x->out + x->outoff, x->outlen - x->outoff, MSG_NOSIGNAL);

        if (n == -1) {
            if (errno == EAGAIN || errno == EINTR)
                return;
            say(p, "#%" PRIu64 " %s: %s", c->id, d ? "client" : "service", strerror(errno));
            conn_close(p, c, true);
            return;
        }
        x->outoff += (size_t)n;
    }
    x->outlen = x->outoff = 0;
    if (x->eof && !x->waiting && !x->shut) {
        (void)shutdown(to, SHUT_WR);
        x->shut = true;
    }
    if (c->d[0].shut && c->d[1].shut) {
        say(p, "#%" PRIu64 " %s closed", c->id, c->name);
        conn_close(p, c, false);
    }
}

static void conn_events(struct sp *p, struct sp_conn *c, const short rev[2])
{
    if (c->connecting && (rev[1] & (POLLOUT | POLLERR | POLLHUP))) {
        int err = 0;
        socklen_t el = sizeof(err);

        if (getsockopt(c->fd[1], SOL_SOCKET, SO_ERROR, &err, &el) == -1)
            err = errno;
        if (err) {
            say(p, "#%" PRIu64 " %s: cannot connect to %s: %s", c->id, c->name, p->o->to,
                strerror(err));
            conn_close(p, c, true);
            return;
        }
        c->connecting = false;
    }
    for (int d = 0; d < 2 && c->used; d++) {
        struct sp_dir *x = &c->d[d];

        if ((rev[d] & (POLLIN | POLLHUP | POLLERR)) && !x->waiting && x->outlen == 0 && !x->eof &&
            !(d == 1 && c->connecting))
            dir_read(p, c, d);
        if (c->used && !c->connecting && !x->waiting && (x->outlen > 0 || (x->eof && !x->shut)))
            dir_write(p, c, d);
    }
}

/* ---- the scriptworker of our own ---- */

static int sw_start(struct sp *p, char *url, size_t cap)
{
    char exe[PATH_MAX], sw[PATH_MAX + 32], suid[16];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    char *slash;
    pid_t pid;

    if (n == -1)
        return -errno;
    exe[n] = '\0';
    slash = strrchr(exe, '/');
    if (slash)
        *slash = '\0';
    (void)snprintf(sw, sizeof(sw), "%s/scriptworker", exe);
    if (access(sw, X_OK) == -1)
        (void)snprintf(sw, sizeof(sw), "%s/../lib/fgex/scriptworker", exe);
    if (access(sw, X_OK) == -1)
        return -ENOENT;
    (void)snprintf(p->dir, sizeof(p->dir), "/tmp/fgexctl-proxy-XXXXXX");
    if (!mkdtemp(p->dir))
        return -errno;
    (void)snprintf(url, cap, "ipc://%s/sw", p->dir);
    (void)snprintf(suid, sizeof(suid), "%u", SP_SCRIPT_UID);
    pid = fork();
    if (pid == -1)
        return -errno;
    if (pid == 0) {
        const char *argv[] = {
            sw,     "--listen",     url,  "--python-dir", p->o->pydir, "--procs", "1", "--user",
            "root", "--script-uid", suid, "--log-level",  "warn",      NULL};
        sigset_t none;

        /* it goes with us, however we end */
        (void)prctl(PR_SET_PDEATHSIG, SIGTERM);
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        /* a ^C at the terminal is ours (we stop it, then its sockets go): out of the
         * terminal's process group */
        (void)setpgid(0, 0);
        close_range(3, ~0u, 0);
        execv(sw, (char *const *)argv);
        _exit(127);
    }
    p->sw = pid;
    return 0;
}

static void sw_stop(struct sp *p)
{
    if (p->sw > 0) {
        (void)kill(p->sw, SIGTERM);
        while (waitpid(p->sw, NULL, 0) == -1 && errno == EINTR)
            ;
        p->sw = 0;
    }
    if (p->dir[0]) {
        char path[96];

        /* its sockets, should it have died before removing them */
        (void)snprintf(path, sizeof(path), "%s/sw", p->dir);
        (void)unlink(path);
        (void)snprintf(path, sizeof(path), "%s/sw.0", p->dir);
        (void)unlink(path);
        (void)rmdir(p->dir);
        p->dir[0] = '\0';
    }
}

static bool sw_alive(struct sp *p)
{
    int st;

    if (p->sw > 0 && waitpid(p->sw, &st, WNOHANG) == p->sw) {
        p->sw = 0;
        return false;
    }
    return p->sw > 0;
}

static int listen_open(struct sp *p)
{
    struct sockaddr_storage ss;
    socklen_t len;
    int fd, one = 1;

    if (addr_parse(p->o->listen, &ss, &len) < 0)
        return -EINVAL;
    fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd == -1)
        return -errno;
    (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, (struct sockaddr *)&ss, len) == -1 || listen(fd, 64) == -1) {
        int e = -errno;

        (void)close(fd);
        return e;
    }
    return fd;
}

int cli_sproxy_run(const struct cli_sproxy_opts *o, FILE *out)
{
    struct sp *p = calloc(1, sizeof(*p));
    struct pollfd *pf = NULL;
    size_t *who = NULL;
    struct sigaction sa = {.sa_handler = on_signal};
    char url[128];
    uint64_t started, watched = 0;
    int lfd = -1, rv, status = 1;

    if (!p)
        return 1;
    p->o = o;
    p->out = out;
    p->next_gen = 1;
    p->sw = 0;
    p->conns = calloc(SP_CONNS_MAX, sizeof(*p->conns));
    pf = calloc(SP_CONNS_MAX * 2 + 2, sizeof(*pf));
    who = calloc(SP_CONNS_MAX * 2 + 2, sizeof(*who));
    if (!p->conns || !pf || !who)
        goto out;
    for (size_t i = 0; i < SP_CONNS_MAX; i++)
        p->conns[i].fd[0] = p->conns[i].fd[1] = -1;
    if (geteuid() != 0) {
        (void)fprintf(stderr, "fgexctl: script proxy: run it as root: the file runs in fgex's "
                              "script sandbox (its own namespaces, a script uid), which root "
                              "sets up\n");
        goto out;
    }
    if (addr_parse(o->to, &p->to, &p->tolen) < 0) {
        (void)fprintf(stderr, "fgexctl: script proxy: --to %s: expected ADDR:PORT\n", o->to);
        goto out;
    }
    if (access(o->file, R_OK) == -1) {
        (void)fprintf(stderr, "fgexctl: script proxy: %s: %s\n", o->file, strerror(errno));
        goto out;
    }
    lfd = listen_open(p);
    if (lfd < 0) {
        (void)fprintf(stderr, "fgexctl: script proxy: --listen %s: %s\n", o->listen,
                      lfd == -EINVAL ? "expected ADDR:PORT" : strerror(-lfd));
        goto out;
    }
    sigemptyset(&sa.sa_mask);
    (void)sigaction(SIGINT, &sa, NULL);
    (void)sigaction(SIGTERM, &sa, NULL);
    (void)signal(SIGPIPE, SIG_IGN);
    rv = sw_start(p, url, sizeof(url));
    if (rv < 0) {
        (void)fprintf(stderr, "fgexctl: script proxy: cannot start scriptworker: %s\n",
                      strerror(-rv));
        goto out;
    }
    rv = fgx_swlink_init(&p->link, url, ((uint64_t)getpid() << 16) | 1);
    if (rv < 0) {
        (void)fprintf(stderr, "fgexctl: script proxy: %s\n", strerror(-rv));
        goto out;
    }
    p->link.conn_fn = conn_find;
    p->link.conn_arg = p;
    p->link.ack_fn = on_ack;
    started = now_ms();
    /* the interpreter up first: the first file goes once it is connected */
    while (!sp_stop) {
        fgx_swlink_resend(&p->link, p->cfg);
        if (p->link.ctl >= 0 && p->link.nprocs > 0 && p->link.py[0].fd >= 0)
            break;
        if (!sw_alive(p) || now_ms() - started > SP_START_MS) {
            (void)fprintf(stderr, "fgexctl: script proxy: scriptworker did not start%s\n",
                          p->sw > 0 ? " in time" : " (see its messages above)");
            goto out;
        }
        (void)poll(NULL, 0, 20);
    }
    file_load(p, true);
    say(p, "listening on %s, to %s; the file runs sandboxed as uid %u; ^C stops", o->listen, o->to,
        SP_SCRIPT_UID);
    while (!sp_stop) {
        size_t n = 0;
        int ready;

        pf[n] = (struct pollfd){.fd = lfd, .events = POLLIN};
        who[n++] = SIZE_MAX;
        pf[n] = (struct pollfd){.fd = p->link.fd, .events = POLLIN};
        who[n++] = SIZE_MAX - 1;
        for (size_t i = 0; i < SP_CONNS_MAX; i++) {
            struct sp_conn *c = &p->conns[i];

            if (!c->used)
                continue;
            for (int s = 0; s < 2; s++) {
                /* side s reads direction s and writes direction !s */
                const struct sp_dir *rd = &c->d[s], *wr = &c->d[!s];
                short ev = 0;

                if (s == 1 && c->connecting)
                    ev = POLLOUT;
                else {
                    if (!rd->waiting && rd->outlen == 0 && !rd->eof)
                        ev |= POLLIN;
                    if (!c->connecting && wr->outlen > wr->outoff)
                        ev |= POLLOUT;
                }
                pf[n] = (struct pollfd){.fd = c->fd[s], .events = ev};
                who[n++] = i * 2 + (size_t)s;
            }
        }
        ready = poll(pf, (nfds_t)n, SP_WATCH_MS);
        if (ready == -1 && errno != EINTR)
            break;
        if (sp_stop)
            break;
        if (!sw_alive(p)) {
            say(p, "scriptworker ended: stopping");
            goto out;
        }
        if (pf[1].revents)
            link_read(p);
        for (size_t k = 2; k < n; k += 2) {
            struct sp_conn *c = &p->conns[who[k] / 2];
            short rev[2] = {pf[k].revents, pf[k + 1].revents};

            if (c->used && c->fd[0] == pf[k].fd)
                conn_events(p, c, rev);
        }
        if (pf[0].revents & POLLIN)
            on_accept(p, lfd);
        if (p->link.need)
            fgx_swlink_reconnect(&p->link, p->cfg);
        if (now_ms() - watched >= SP_WATCH_MS) {
            watched = now_ms();
            file_watch(p);
        }
    }
    say(p, "stopped");
    status = 0;
out:
    for (size_t i = 0; p->conns && i < SP_CONNS_MAX; i++)
        if (p->conns[i].used)
            conn_close(p, &p->conns[i], true);
    if (lfd >= 0)
        (void)close(lfd);
    fgx_swlink_release(&p->link);
    sw_stop(p);
    for (size_t i = 0; i < p->ngens; i++)
        free(p->gens[i].script);
    free(p->cfg);
    free(p->conns);
    free(pf);
    free(who);
    free(p);
    return status;
}
