/* controld control API, the capture family: `capture` (a service's captured connections: the
 * workers' rings, asked over the data-path channel, and the blocked ones kept in the store with
 * their events), `events show` (one block's event and capture) and `filter test` (a candidate
 * regex, compiled as a filter would be, run over those captures). */
#include "controld/ctl_rpc_cmd.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hs.h>

#include "controld/ctl_compile.h"
#include "controld/ctl_game.h"
#include "controld/ctl_ruleset.h"
#include "controld/ctl_stats.h"
#include "controld/ctl_supervise.h"
#include "fgx/capture.h"
#include "fgx/log.h"

/* How long a capture request waits for a worker. */
#define RPC_CAPTURE_TIMEOUT_MS 3000

int ctl_rpc_check_capture(struct ctl_rpc *r, bool has_on, bool on, bool has_conns, uint32_t conns,
                          bool has_bytes, uint32_t bytes, struct ctl_service *svc)
{
    if (has_conns && (conns < 1 || conns > FGX_CAP_CONNS_MAX)) {
        ctl_rpc_fail(r, FGX__CTL__CODE__CODE_INVALID, "--capture-conns takes 1..%u",
                     (unsigned)FGX_CAP_CONNS_MAX);
        return -EINVAL;
    }
    if (has_bytes && (bytes < 1 || bytes > FGX_CAP_BYTES_MAX)) {
        ctl_rpc_fail(r, FGX__CTL__CODE__CODE_INVALID, "--capture-bytes takes 1..%u",
                     (unsigned)FGX_CAP_BYTES_MAX);
        return -EINVAL;
    }
    if (has_on)
        svc->capture_off = !on;
    if (has_conns)
        svc->capture_conns = conns;
    if (has_bytes)
        svc->capture_bytes = bytes;
    return 0;
}

/* ---- gathering a service's captures ---- */

struct cap_list {
    struct fgx_cap *c; /* decoded */
    uint8_t **buf;     /* encoded, with event_seq for stored ones (owned) */
    size_t *len;
    size_t n, cap;
};

static void cap_list_free(struct cap_list *l)
{
    for (size_t i = 0; i < l->n; i++) {
        fgx_cap_release(&l->c[i]);
        free(l->buf[i]);
    }
    free(l->c);
    free(l->buf);
    free(l->len);
    memset(l, 0, sizeof(*l));
}

/* Takes buf. */
static int cap_list_add(struct cap_list *l, uint8_t *buf, size_t len)
{
    if (l->n == l->cap) {
        size_t nc = l->cap ? l->cap * 2 : 64;
        struct fgx_cap *c = realloc(l->c, nc * sizeof(*c));
        uint8_t **b = c ? realloc(l->buf, nc * sizeof(*b)) : NULL;
        size_t *n = b ? realloc(l->len, nc * sizeof(*n)) : NULL;

        if (c)
            l->c = c;
        if (b)
            l->buf = b;
        if (!n) {
            free(buf);
            return -ENOMEM;
        }
        l->len = n;
        l->cap = nc;
    }
    if (fgx_cap_decode(buf, len, &l->c[l->n]) < 0) {
        free(buf);
        return 0; /* not one: skipped, never trusted */
    }
    l->buf[l->n] = buf;
    l->len[l->n] = len;
    l->n++;
    return 0;
}

struct stored_arg {
    struct cap_list *l;
    uint32_t service_id;
};

static int stored_one(void *arg, uint64_t seq, const void *data, size_t len)
{
    struct stored_arg *a = arg;
    struct fgx_cap c;
    uint8_t *buf;
    size_t blen;
    bool mine;

    if (fgx_cap_decode(data, len, &c) < 0)
        return 0;
    mine = c.service_id == a->service_id;
    fgx_cap_release(&c);
    if (!mine)
        return 0;
    if (fgx_cap_set_event_seq(data, len, seq, &buf, &blen) < 0)
        return -ENOMEM;
    return cap_list_add(a->l, buf, blen);
}

/* Whether l already holds c's connection: a flag-out's capture is stored with its event while
 * the connection goes on in the ring (issue 28); the stored one, with its event, stands. */
static bool cap_listed(const struct cap_list *l, const struct fgx_cap *c)
{
    for (size_t i = 0; i < l->n; i++)
        if (l->c[i].start_ns == c->start_ns && l->c[i].cport == c->cport &&
            l->c[i].family == c->family && memcmp(l->c[i].caddr, c->caddr, 16) == 0)
            return true;
    return false;
}

static void live_from(struct ctl_sup *sup, uint32_t service_id, struct cap_list *l)
{
    struct fgx_dp_msg m;

    if (!sup || ctl_sup_captures(sup, service_id, RPC_CAPTURE_TIMEOUT_MS, &m) < 0)
        return;
    for (size_t i = 0; i < m.u.captures.n; i++) {
        struct fgx_cap c;
        bool blocked;

        /* A blocked connection's capture is in the store, with its event's seq. */
        if (fgx_cap_decode(m.u.captures.caps[i].data, m.u.captures.caps[i].len, &c) < 0)
            continue;
        blocked = c.blocked || cap_listed(l, &c);
        fgx_cap_release(&c);
        if (blocked)
            continue;
        if (cap_list_add(l, m.u.captures.caps[i].data, m.u.captures.caps[i].len) < 0)
            break;
        m.u.captures.caps[i].data = NULL; /* taken */
    }
    fgx_dp_msg_release(&m);
}

/* Every capture of svc: stored blocked ones (newest first), then the workers' (unless
 * blocked_only). Failures are in the reply. */
static int gather(struct ctl_rpc *r, struct ctl_txn *t, const struct ctl_service *svc,
                  bool blocked_only, struct cap_list *l)
{
    struct stored_arg a = {l, svc->id};
    int rv;

    rv = ctl_store_capture_each(t, stored_one, &a);
    if (rv < 0) {
        ctl_rpc_store_fail(r, rv);
        return rv;
    }
    if (!blocked_only) {
        live_from(r->ctx->sup, svc->id, l);
        live_from(r->ctx->px_sup, svc->id, l);
    }
    return 0;
}

static void cap_src(const struct fgx_cap *c, char *buf, size_t len)
{
    if (!inet_ntop(c->family == 4 ? AF_INET : AF_INET6, c->caddr, buf, (socklen_t)len))
        buf[0] = '\0';
}

static bool cap_wanted(const struct fgx_cap *c, const Fgx__Ctl__CaptureQuery *q,
                       const struct fgx_cidr *src)
{
    if (q->has_since_ns && c->start_ns < q->since_ns)
        return false;
    if (q->has_filter_id && (!c->blocked || c->filter_id != q->filter_id))
        return false;
    if (src && !fgx_cidr_contains(src, c->family, c->caddr))
        return false;
    return true;
}

/* The reply's captures: l's encoded buffers move to r. */
static int reply_caps(struct ctl_rpc *r, struct cap_list *l, const bool *keep)
{
    r->caps = calloc(l->n ? l->n : 1, sizeof(*r->caps));
    if (!r->caps)
        return -ENOMEM;
    for (size_t i = 0; i < l->n; i++) {
        if (keep && !keep[i])
            continue;
        r->caps[r->ncaps].data = l->buf[i];
        r->caps[r->ncaps].len = l->len[i];
        r->ncaps++;
        l->buf[i] = NULL;
    }
    r->reply.n_captures = r->ncaps;
    r->reply.captures = r->caps;
    return 0;
}

void ctl_rpc_capture_release(struct ctl_rpc *r)
{
    for (size_t i = 0; i < r->ncaps; i++)
        free(r->caps[i].data);
    free(r->caps);
    r->caps = NULL;
    r->ncaps = 0;
    free(r->cap_extra);
    r->cap_extra = NULL;
}

static void do_capture(struct ctl_rpc *r, const Fgx__Ctl__Request *req)
{
    const Fgx__Ctl__CaptureQuery *q = req->capture;
    struct fgx_cidr src, *srcp = NULL;
    struct cap_list l = {0};
    struct ctl_service svc;
    struct ctl_txn *t = NULL;
    bool *keep = NULL;

    if (q->src && *q->src) {
        if (fgx_cidr_parse(q->src, &src) < 0 || src.family == 0) {
            ctl_rpc_fail(r, FGX__CTL__CODE__CODE_INVALID, "invalid address: %s", q->src);
            return;
        }
        srcp = &src;
    }
    /* The blocks the workers reported since the last collection are stored first. */
    ctl_stats_refresh(r->ctx, CTL_RPC_STATS_TIMEOUT_MS);
    if (ctl_rpc_txn_begin(r, false, &t) < 0)
        return;
    if (ctl_rpc_service_resolve(r, t, q->service, &svc) < 0)
        goto out;
    if (gather(r, t, &svc, q->has_blocked && q->blocked, &l) < 0)
        goto out;
    keep = calloc(l.n ? l.n : 1, sizeof(*keep));
    if (!keep) {
        ctl_rpc_store_fail(r, -ENOMEM);
        goto out;
    }
    for (size_t i = 0; i < l.n; i++)
        keep[i] = cap_wanted(&l.c[i], q, srcp);
    if (reply_caps(r, &l, keep) < 0)
        ctl_rpc_store_fail(r, -ENOMEM);
out:
    free(keep);
    cap_list_free(&l);
    ctl_txn_abort(t);
}

/* ---- events show ---- */

static void event_msg(const struct ctl_event *e, Fgx__Ctl__Event *m)
{
    fgx__ctl__event__init(m);
    m->seq = e->seq;
    m->time_ns = e->time_ns;
    m->service_id = e->service_id;
    m->service = (char *)e->service;
    m->filter_id = e->filter_id;
    m->dir = e->dir == FGX_DIR_S2C ? FGX__CTL__DIR__DIR_S2C : FGX__CTL__DIR__DIR_C2S;
    m->proto = e->ipproto == IPPROTO_UDP ? FGX__CTL__PROTO__PROTO_UDP : FGX__CTL__PROTO__PROTO_TCP;
    m->src = (char *)e->src;
    m->sport = e->sport;
    m->dst = (char *)e->dst;
    m->dport = e->dport;
    if (e->excerpt_len > 0) {
        m->has_excerpt = 1;
        m->excerpt.data = (uint8_t *)e->excerpt;
        m->excerpt.len = e->excerpt_len;
        m->has_match_end = 1;
        m->match_end = e->match_end;
    }
    if (e->script_kind[0]) {
        m->script_kind = (char *)e->script_kind;
        m->script_function = (char *)e->script_fn;
    }
}

static void do_event_show(struct ctl_rpc *r, const Fgx__Ctl__Request *req)
{
    uint64_t seq = req->event_show->seq;
    const struct ctl_event *e;
    struct ctl_txn *t = NULL;
    void *data = NULL;
    size_t len = 0;
    int rv;

    ctl_stats_refresh(r->ctx, CTL_RPC_STATS_TIMEOUT_MS);
    e = r->ctx->stats ? ctl_stats_event_get(r->ctx->stats, seq) : NULL;
    if (!e) {
        ctl_rpc_fail(r, FGX__CTL__CODE__CODE_NOT_FOUND,
                     "no event %llu (events kept: see "
                     "fgexctl events)",
                     (unsigned long long)seq);
        return;
    }
    r->ev_msgs = calloc(1, sizeof(*r->ev_msgs));
    r->ev_ptrs = calloc(1, sizeof(*r->ev_ptrs));
    if (!r->ev_msgs || !r->ev_ptrs) {
        ctl_rpc_store_fail(r, -ENOMEM);
        return;
    }
    event_msg(e, &r->ev_msgs[0]);
    r->ev_ptrs[0] = &r->ev_msgs[0];
    r->reply.n_events = 1;
    r->reply.events = r->ev_ptrs;
    if (ctl_rpc_txn_begin(r, false, &t) < 0)
        return;
    rv = ctl_store_capture_get(t, seq, &data, &len);
    ctl_txn_abort(t);
    if (rv == -ENOENT)
        return; /* an event without a capture: capture off, or the store's bound passed it */
    if (rv < 0) {
        ctl_rpc_store_fail(r, rv);
        return;
    }
    r->caps = calloc(1, sizeof(*r->caps));
    if (!r->caps || fgx_cap_set_event_seq(data, len, seq, &r->caps[0].data, &r->caps[0].len) < 0) {
        free(data);
        ctl_rpc_store_fail(r, -ENOMEM);
        return;
    }
    free(data);
    r->ncaps = 1;
    r->reply.n_captures = 1;
    r->reply.captures = r->caps;
}

/* ---- filter test ---- */

struct test_out {
    Fgx__Ctl__FilterTestResult res;
    Fgx__Ctl__FilterTestHit *hits;
    Fgx__Ctl__FilterTestHit **hitp;
    char (*src)[CTL_ADDR_TEXT_MAX];
    uint8_t (*ex)[FGX_DP_EXCERPT_MAX]; /* the excerpts, copied: the captures go before the reply */
    char (*fn)[64];                    /* the function of a script's block, copied from its event */
    char *warn[FGX_PATTERN_WARN_MAX];
};

static int on_match(unsigned id, unsigned long long from, unsigned long long to, unsigned flags,
                    void *ctx)
{
    (void)id;
    (void)from;
    (void)flags;
    *(unsigned long long *)ctx = to;
    return 1; /* the first match is enough: a filter blocks there */
}

/* Where db first matches direction d of c: its end offset + 1, or 0 for none. TCP: the stream
 * (stream mode, as the worker scans it); UDP: each datagram alone (block mode). */
static size_t scan_dir(const struct fgx_cap *c, int d, hs_database_t *db, hs_scratch_t *scr,
                       bool udp)
{
    unsigned long long end = 0;

    if (c->len[d] == 0)
        return 0;
    if (udp) {
        for (size_t i = 0; i < c->nseg; i++) {
            const struct fgx_cap_seg *s = &c->seg[i];

            if (c->seg_dir[i] != d || s->len == 0)
                continue;
            end = 0;
            if (hs_scan(db, (const char *)c->data[d] + s->off, s->len, 0, scr, on_match, &end) ==
                    HS_SCAN_TERMINATED &&
                end > 0)
                return s->off + end;
        }
        return 0;
    }
    {
        hs_stream_t *st = NULL;

        if (hs_open_stream(db, 0, &st) != HS_SUCCESS)
            return 0;
        (void)hs_scan_stream(st, (const char *)c->data[d], c->len[d], 0, scr, on_match, &end);
        (void)hs_close_stream(st, scr, NULL, NULL);
    }
    return (size_t)end;
}

/* The two databases (c2s, s2c: db[d] NULL where no pattern applies) of pats[n], as filters
 * compile them, loaded with one scratch for both. 1: still to compile (the compile session's
 * probe: the request runs again once it is); 0: loaded; < 0: failed, the reply says why. The
 * caller releases blob, db and *scr whatever this returns. */
static int pattern_dbs(struct ctl_rpc *r, struct ctl_txn *t, const struct fgx_pattern *pats,
                       size_t n, uint8_t ipproto, struct fgx_blob blob[2], hs_database_t *db[2],
                       hs_scratch_t **scr)
{
    char err[768];
    int rv;

    for (int k = 0; k < 2; k++) {
        uint64_t key;

        rv = ctl_ruleset_db_get(t, pats, n, k == 0 ? FGX_DIR_C2S : FGX_DIR_S2C, ipproto, &blob[k],
                                &key, err, sizeof(err));
        if (rv < 0) {
            ctl_rpc_fail(r,
                         rv == -EINVAL ? FGX__CTL__CODE__CODE_INVALID : FGX__CTL__CODE__CODE_ERROR,
                         "%s", err);
            return rv;
        }
    }
    if (ctl_compile_collecting() && ctl_compile_pending() > 0)
        return 1;
    for (int k = 0; k < 2; k++) {
        if (blob[k].len == 0)
            continue;
        if (fgx_hsdb_load(blob[k].data, blob[k].len, &db[k]) < 0 ||
            hs_alloc_scratch(db[k], scr) != HS_SUCCESS) {
            ctl_rpc_fail(r, FGX__CTL__CODE__CODE_ERROR, "cannot load the compiled regex");
            return -EIO;
        }
    }
    return 0;
}

static void pattern_dbs_release(struct fgx_blob blob[2], hs_database_t *db[2], hs_scratch_t *scr)
{
    hs_free_scratch(scr);
    for (int k = 0; k < 2; k++) {
        fgx_hsdb_free(db[k]);
        fgx_blob_release(&blob[k]);
    }
}

/* ---- a filter's breadth: what --force is for ---- */

static void fail_force(struct ctl_rpc *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail_force(struct ctl_rpc *r, const char *fmt, ...)
{
    char msg[900];
    va_list ap;

    va_start(ap, fmt);
    (void)vsnprintf(msg, sizeof(msg), fmt, ap); /* a cut message still says why */
    va_end(ap);
    ctl_rpc_fail(r, FGX__CTL__CODE__CODE_INVALID, "%s", msg);
    r->reply.has_needs_force = 1;
    r->reply.needs_force = 1;
}

/* Each capture's hits of the batch's patterns (ids 1..n), counted once per connection. */
struct breadth_scan {
    uint32_t *hits;   /* per pattern */
    uint32_t *chk;    /* per pattern: of hits, the checker's connections */
    uint32_t *last;   /* per pattern: the capture (from 1) it last counted */
    uint32_t cap, n;
    bool checker;     /* the capture scanned is the game checker's */
};

static int breadth_hit(unsigned id, unsigned long long from, unsigned long long to,
                       unsigned flags, void *ctx)
{
    struct breadth_scan *b = ctx;

    (void)from;
    (void)to;
    (void)flags;
    if (id >= 1 && id <= b->n && b->last[id - 1] != b->cap) {
        b->last[id - 1] = b->cap;
        b->hits[id - 1]++;
        b->chk[id - 1] += b->checker;
    }
    return 0; /* every pattern of the batch: each reports once per stream (SINGLEMATCH) */
}

/* Every pattern of db over direction d of c, as the worker scans it. */
static void breadth_dir(const struct fgx_cap *c, int d, hs_database_t *db, hs_scratch_t *scr,
                        struct breadth_scan *b)
{
    hs_stream_t *st = NULL;

    if (c->len[d] == 0)
        return;
    if (c->ipproto == IPPROTO_UDP) {
        for (size_t i = 0; i < c->nseg; i++)
            if (c->seg_dir[i] == d && c->seg[i].len > 0)
                (void)hs_scan(db, (const char *)c->data[d] + c->seg[i].off, c->seg[i].len, 0,
                              scr, breadth_hit, b);
        return;
    }
    if (hs_open_stream(db, 0, &st) != HS_SUCCESS)
        return;
    (void)hs_scan_stream(st, (const char *)c->data[d], c->len[d], 0, scr, breadth_hit, b);
    (void)hs_close_stream(st, scr, NULL, NULL);
}

int ctl_rpc_filters_breadth(struct ctl_rpc *r, struct ctl_txn *t, const struct ctl_service *svc,
                            const struct ctl_filter *fs, size_t n, const char *const *whats,
                            const char *verb)
{
    struct fgx_blob blob[2] = {{0}, {0}};
    hs_database_t *db[2] = {NULL, NULL};
    struct fgx_pattern *pats = NULL;
    struct breadth_scan b = {0};
    struct fgx_pattern_warnings w;
    hs_scratch_t *scr = NULL;
    struct cap_list l = {0};
    struct ctl_game game;
    uint32_t total = 0, checker_total = 0;
    size_t np = 0;
    int rv = 0;

    if ((r->req && r->req->has_force && r->req->force) || n == 0)
        return 0;
    ctl_game_init(&game);
    pats = calloc(n, sizeof(*pats));
    b.hits = calloc(n, sizeof(*b.hits));
    b.chk = calloc(n, sizeof(*b.chk));
    b.last = calloc(n, sizeof(*b.last));
    if (!pats || !b.hits || !b.chk || !b.last) {
        ctl_rpc_store_fail(r, -ENOMEM);
        rv = -ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        if (fs[i].log || !fs[i].active)
            continue; /* blocks nothing */
        rv = ctl_rpc_check_regex(r, fs[i].regex, fs[i].nocase, svc->ipproto, &w);
        if (rv < 0)
            goto out;
        if (w.any_stream) {
            fail_force(r, "%s on service %s: %s. Nothing was stored; give --force to %s anyway",
                       whats[i], svc->name, w.text[0], verb);
            rv = -EPERM;
            goto out;
        }
        pats[np++] = (struct fgx_pattern){.filter_id = (uint32_t)i + 1, .regex = fs[i].regex,
                                          .dir = fs[i].dir, .nocase = fs[i].nocase};
    }
    if (np == 0)
        goto out;
    /* Still to compile: the request runs again once it is, and is judged then. */
    rv = pattern_dbs(r, t, pats, np, svc->ipproto, blob, db, &scr);
    if (rv != 0) {
        rv = rv > 0 ? 0 : rv;
        goto out;
    }
    (void)ctl_game_load(t, &game); /* none: no connection is the checker's */
    /* The traffic to spare: the workers' rings (a blocked connection there is skipped). */
    live_from(r->ctx->sup, svc->id, &l);
    live_from(r->ctx->px_sup, svc->id, &l);
    b.n = (uint32_t)n;
    for (size_t i = 0; i < l.n; i++) {
        const struct fgx_cap *c = &l.c[i];

        if (c->len[0] == 0 && c->len[1] == 0)
            continue; /* nothing sent: no filter can block it */
        total++;
        b.cap = (uint32_t)i + 1;
        b.checker = ctl_game_is_checker(&game, c->family, c->caddr);
        checker_total += b.checker;
        for (int d = 0; d < 2; d++)
            if (db[d])
                breadth_dir(c, d, db[d], scr, &b);
    }
    for (size_t i = 0; i < n; i++) {
        /* the game's checker: one connection of its broken is SLA lost every tick */
        if (b.chk[i] > 0) {
            fail_force(r,
                       "%s would have broken %u of the %u connections of the game's checker "
                       "captured on service %s (and blocked %u of all %u; see `fgexctl filter "
                       "test %s REGEX`). Nothing was stored; give --force to %s anyway",
                       whats[i], b.chk[i], checker_total, svc->name, b.hits[i], total,
                       svc->name, verb);
            rv = -EPERM;
            break;
        }
        if (!ctl_config_reach_too_wide(b.hits[i], total))
            continue;
        fail_force(r,
                   "%s would have blocked %u of the %u connections captured on service %s "
                   "(%u%%), likely the game's checker too (see `fgexctl filter test %s REGEX`). "
                   "Nothing was stored; give --force to %s anyway",
                   whats[i], b.hits[i], total, svc->name,
                   (unsigned)((uint64_t)b.hits[i] * 100 / total), svc->name, verb);
        rv = -EPERM;
        break;
    }
out:
    pattern_dbs_release(blob, db, scr);
    cap_list_free(&l);
    ctl_game_release(&game);
    free(pats);
    free(b.hits);
    free(b.chk);
    free(b.last);
    return rv;
}

int ctl_rpc_filter_breadth(struct ctl_rpc *r, struct ctl_txn *t, const struct ctl_service *svc,
                           const struct ctl_filter *f, const char *what, const char *verb)
{
    return ctl_rpc_filters_breadth(r, t, svc, f, 1, &what, verb);
}

static void do_filter_test(struct ctl_rpc *r, const Fgx__Ctl__Request *req)
{
    const Fgx__Ctl__FilterTest *q = req->filter_test;
    hs_database_t *db[2] = {NULL, NULL};
    hs_scratch_t *scr = NULL;
    struct fgx_blob blob[2] = {{0}, {0}};
    struct fgx_pattern pat;
    struct cap_list l = {0};
    struct ctl_service svc;
    struct ctl_txn *t = NULL;
    struct test_out *o = NULL;
    struct fgx_blob fblob[2] = {{0}, {0}};
    hs_database_t *fdb[2] = {NULL, NULL};
    hs_scratch_t *fscr = NULL;
    struct ctl_game game;
    size_t nhits = 0;
    int rv;

    ctl_game_init(&game);
    pat.filter_id = 1;
    pat.regex = q->regex;
    pat.nocase = q->has_nocase && q->nocase;
    pat.dir = !q->has_dir || q->dir == FGX__CTL__DIR__DIR_BOTH ? FGX_DIR_BOTH
              : q->dir == FGX__CTL__DIR__DIR_C2S               ? FGX_DIR_C2S
              : q->dir == FGX__CTL__DIR__DIR_S2C               ? FGX_DIR_S2C
                                                               : 0;
    if (pat.dir == 0) {
        ctl_rpc_fail(r, FGX__CTL__CODE__CODE_INVALID, "invalid direction: use c2s, s2c or both");
        return;
    }
    /* A write transaction only for the compile cache's sake; it is aborted: nothing stored. */
    if (ctl_rpc_txn_begin(r, true, &t) < 0)
        return;
    if (ctl_rpc_service_resolve(r, t, q->service, &svc) < 0)
        goto out;
    if (ctl_rpc_check_regex(r, q->regex, pat.nocase, svc.ipproto, &r->add_warn) < 0)
        goto out;
    rv = pattern_dbs(r, t, &pat, 1, svc.ipproto, blob, db, &scr);
    /* The game's flag format, as the service's s2c database holds it: which connections are
     * flag-outs (issue 28). */
    if (rv == 0 && ctl_game_load(t, &game) == 0 && ctl_game_is_set(&game) &&
        svc.ipproto == IPPROTO_TCP) {
        struct fgx_pattern fp = {.filter_id = 1, .regex = game.flag, .dir = FGX_DIR_S2C};

        rv = pattern_dbs(r, t, &fp, 1, svc.ipproto, fblob, fdb, &fscr);
    }
    if (rv > 0) {
        /* A probe: the compile children build the database; the request runs again then. */
        r->deferred = true;
        ctl_rpc_fail(r, FGX__CTL__CODE__CODE_ERROR, "compiling");
    }
    if (rv != 0)
        goto out;
    ctl_txn_abort(t);
    t = NULL;
    ctl_stats_refresh(r->ctx, CTL_RPC_STATS_TIMEOUT_MS);
    if (ctl_rpc_txn_begin(r, false, &t) < 0)
        goto out;
    if (gather(r, t, &svc, false, &l) < 0)
        goto out;
    o = calloc(1, sizeof(*o));
    if (o)
        r->cap_extra = o;
    if (o && l.n > 0) {
        /* One block holds the hits, their pointers and their texts, freed with cap_extra. */
        size_t sz =
            sizeof(struct test_out) + l.n * (sizeof(*o->hits) + sizeof(*o->hitp) + sizeof(*o->src) +
                                             sizeof(*o->ex) + sizeof(*o->fn));
        struct test_out *big = realloc(o, sz);

        if (big) {
            o = big;
            r->cap_extra = o;
            o->hits = (void *)(o + 1);
            o->hitp = (void *)(o->hits + l.n);
            o->src = (void *)(o->hitp + l.n);
            o->ex = (void *)(o->src + l.n);
            o->fn = (void *)(o->ex + l.n);
        } else {
            o = NULL;
        }
    }
    if (!o) {
        ctl_rpc_store_fail(r, -ENOMEM);
        goto out;
    }
    fgx__ctl__filter_test_result__init(&o->res);
    for (size_t i = 0; i < l.n; i++) {
        const struct fgx_cap *c = &l.c[i];
        Fgx__Ctl__FilterTestHit *h;
        size_t end = 0, lo, hi;
        bool checker = ctl_game_is_checker(&game, c->family, c->caddr);
        bool flag = !checker && fdb[1] && scan_dir(c, 1, fdb[1], fscr, false) > 0;
        int d;

        for (d = 0; d < 2 && end == 0; d++)
            if (db[d])
                end = scan_dir(c, d, db[d], scr, c->ipproto == IPPROTO_UDP);
        o->res.checker_total += checker;
        o->res.checker_broken += checker && end > 0;
        o->res.flags_out_total += flag;
        o->res.flags_out_stopped += flag && end > 0;
        if (end == 0)
            continue;
        d--;
        h = &o->hits[nhits];
        fgx__ctl__filter_test_hit__init(h);
        h->time_ns = c->start_ns;
        cap_src(c, o->src[nhits], sizeof(o->src[nhits]));
        h->src = o->src[nhits];
        h->sport = c->cport;
        h->dir = d == 0 ? FGX__CTL__DIR__DIR_C2S : FGX__CTL__DIR__DIR_S2C;
        lo = end > FGX_DP_EXCERPT_BEFORE ? end - FGX_DP_EXCERPT_BEFORE : 0;
        hi = end + FGX_DP_EXCERPT_AFTER < c->len[d] ? end + FGX_DP_EXCERPT_AFTER : c->len[d];
        h->has_excerpt = h->has_match_end = 1;
        memcpy(o->ex[nhits], c->data[d] + lo, hi - lo);
        h->excerpt.data = o->ex[nhits];
        h->excerpt.len = hi - lo;
        h->match_end = (uint32_t)(end - lo);
        if (c->blocked) {
            h->has_blocked = h->has_filter_id = 1;
            h->blocked = 1;
            h->filter_id = c->filter_id;
        }
        if (c->event_seq) {
            const struct ctl_event *ev = c->blocked && c->filter_id == 0 && r->ctx->stats
                                             ? ctl_stats_event_get(r->ctx->stats, c->event_seq)
                                             : NULL;

            h->has_event_seq = 1;
            h->event_seq = c->event_seq;
            /* a script's block: named by its function, as its event is */
            if (ev && ev->script_fn[0]) {
                (void)snprintf(o->fn[nhits], sizeof(o->fn[nhits]), "%s", ev->script_fn);
                h->script_function = o->fn[nhits];
            }
        }
        o->hitp[nhits++] = h;
    }
    o->res.n_hits = nhits;
    o->res.hits = o->hitp;
    if (ctl_game_is_set(&game))
        o->res.has_checker_total = o->res.has_checker_broken = o->res.has_flags_out_total =
            o->res.has_flags_out_stopped = 1;
    o->res.total = (uint32_t)l.n;
    o->res.spared = (uint32_t)(l.n - nhits);
    for (size_t i = 0; i < r->add_warn.n; i++)
        o->warn[i] = r->add_warn.text[i];
    o->res.n_warnings = r->add_warn.n;
    o->res.warnings = o->warn;
    r->reply.filter_test = &o->res;
out:
    pattern_dbs_release(blob, db, scr);
    pattern_dbs_release(fblob, fdb, fscr);
    ctl_game_release(&game);
    cap_list_free(&l);
    ctl_txn_abort(t);
}

const struct ctl_rpc_cmd ctl_rpc_capture_cmds[] = {
    {FGX__CTL__REQUEST__REQ_CAPTURE, do_capture, 0},
    {FGX__CTL__REQUEST__REQ_EVENT_SHOW, do_event_show, 0},
    /* A change only in that it may need the compiler: it stores nothing. */
    {FGX__CTL__REQUEST__REQ_FILTER_TEST, do_filter_test, CTL_RPC_CHANGE},
    {0, NULL, 0},
};
