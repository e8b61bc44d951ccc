/* Match stage of proxyworker: what one side of a connection sent, read into the thread's
 * scratch buffer -> scanned there with the service's stream database for that
 * direction -> passed on to the relay stage, or, on a match, counted, recorded as an event and
 * refused: the relay resets both sides and the matching bytes never reach the other one.
 *
 * Streams are libcommon's reassembly contexts fed in order (the proxy sees a byte stream, so a
 * "sequence number" is just the count of bytes scanned), which gives the proxy the very hot-swap
 * semantics of the NFQUEUE layer: at its first data after a ruleset change a connection keeps a
 * direction's stream when its database is unchanged, and otherwise opens one on the new database
 * primed with the last FGX_REASM_RING bytes that passed, keeping the previous stream beside it
 * while it shares a filter with the new database (so a long partial match of a surviving filter
 * is not lost).
 *
 * A connection whose service left the proxy's ruleset (stopped, removed, or moved to the nfqueue
 * layer) is relayed on as it is, the service's traffic being unfiltered now, but keeps its
 * streams. When the service comes back (the same id, or a service that now covers the
 * connection's destination), a connection that moved nothing meanwhile goes on with those
 * streams, so a match across the gap is still found; one that moved bytes unscanned has streams
 * that no longer hold what passed and gets the service's midstream policy: reset (the default),
 * or scanned on with fresh streams. px_match_presence() applies it at the config switch, before
 * any more byte of such a connection moves. */
#include "px.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "fgx/log.h"

void px_match_switch(struct px_thread *t)
{
    struct fgx_wcfg *cur = __atomic_load_n(&t->w->current, __ATOMIC_ACQUIRE), *old = t->cfg;
    size_t i;
    int d;

    if (cur == old)
        return;
    /* The control thread keeps its own reference until every thread has moved on, so cur
     * cannot be freed between the load and this ref. */
    fgx_wcfg_ref(cur);
    for (i = 0; cur != NULL && i < cur->nservices; i++)
        for (d = 0; d < 2; d++)
            if (cur->svc[i].db[d] != NULL)
                (void)fgx_reasm_ctx_scratch(t->reasm, cur->svc[i].db[d]->db);
    t->cfg = cur;
    t->epoch++;
    if (cur != NULL)
        fgx_cap_set_switch(&t->caps, cur, t->w->nthreads);
    fgx_wcfg_unref(old);
    /* Before the control thread hears that this thread uses cur: once `service start` returns,
     * no connection relayed unscanned meanwhile moves another byte unless its policy says so. */
    px_match_presence(t);
    px_script_switch(t);
    __atomic_store_n(&t->applied, cur, __ATOMIC_RELEASE);
}

/* The service c belongs to in t's config: its own, or the one that now covers its destination
 * (its own removed and another added there), or NULL. */
static const struct fgx_wsvc *conn_service(struct px_thread *t, const struct px_conn *c)
{
    const struct fgx_wsvc *svc = fgx_wcfg_service(t->cfg, c->service_id);
    const uint8_t *addr;
    uint16_t port;

    if (svc != NULL)
        return svc;
    if (c->server.ss_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)&c->server;

        addr = (const uint8_t *)&a->sin_addr;
        port = ntohs(a->sin_port);
    } else {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)&c->server;

        addr = (const uint8_t *)&a->sin6_addr;
        port = ntohs(a->sin6_port);
    }
    return fgx_wcfg_lookup(t->cfg, IPPROTO_TCP, c->family, addr, port);
}

/* The service's midstream policy: true to scan a connection that relayed unscanned bytes on
 * with fresh streams, false to reset it. */
static bool midstream_scan(const struct fgx_wsvc *svc)
{
    return svc->midstream == FGX_MIDSTREAM_SCAN;
}

/* Fresh, empty streams for c: the next bytes are scanned as if the connection began there. */
static void conn_restart_streams(struct px_conn *c)
{
    px_match_conn_release(c);
    fgx_reasm_init(&c->dir[0]);
    fgx_reasm_init(&c->dir[1]);
    /* px_match_attach() opens them on the service's databases at the next read. */
    c->epoch = c->t->epoch - 1;
}

void px_match_presence(struct px_thread *t)
{
    static __thread unsigned long long last_log;
    size_t nreset = 0;
    int l;

    for (l = 0; l < PX_LISTS; l++) {
        struct px_conn *c = t->list[l].head, *next;

        for (; c != NULL; c = next) {
            const struct fgx_wsvc *svc = conn_service(t, c);

            next = c->next;
            if (svc == NULL) {
                c->absent = true;
                continue;
            }
            if (svc->id != c->service_id) {
                /* Counted open under the service it is in now. */
                PX_CTR_ADD(&px_stats_svc(&t->ctr, c->service_id)->open, (uint64_t)-1);
                PX_CTR_ADD(&px_stats_svc(&t->ctr, svc->id)->open, 1);
                c->service_id = svc->id;
            }
            if (!c->absent)
                continue;
            c->absent = false;
            if (!c->unscanned)
                continue;
            c->unscanned = false;
            if (midstream_scan(svc)) {
                PX_CTR_ADD(&t->ctr.midstream_rescan, 1);
                conn_restart_streams(c);
                continue;
            }
            PX_CTR_ADD(&t->ctr.midstream_reset, 1);
            px_relay_close(c, true);
            nreset++;
        }
    }
    if (nreset > 0)
        fgx_log_ratelimited(&last_log, FGX_LOG_INFO,
                            "%zu connection(s) relayed unscanned while their service was away "
                            "reset at its return (midstream policy reset)",
                            nreset);
}

static void wdb_unref(void *ref)
{
    fgx_wdb_unref(ref);
}

void px_match_attach(struct px_conn *c)
{
    struct px_thread *t = c->t;
    const struct fgx_wsvc *svc;
    int d;

    c->epoch = t->epoch;
    /* Away: the streams stay as they are for the service's return (px_match_presence()). */
    if (c->absent)
        return;
    svc = fgx_wcfg_service(t->cfg, c->service_id);
    if (svc == NULL) {
        c->absent = true;
        return;
    }
    for (d = 0; d < 2; d++) {
        struct fgx_wdb *old = c->dbref[d], *nd = svc->db[d];

        if (c->dir[d].active && (old != NULL ? old->hash : 0) == (nd != NULL ? nd->hash : 0) &&
            (old == NULL) == (nd == NULL))
            continue;
        if (!c->dir[d].active)
            (void)fgx_reasm_start(t->reasm, &c->dir[d], 0);
        fgx_wdb_ref(nd);
        c->dbref[d] = nd;
        /* Our reference on the replaced database goes to reasm, which keeps it while that
         * database's stream stays open beside the new one. */
        (void)fgx_reasm_switch_db(t->reasm, &c->dir[d], nd != NULL ? nd->db : NULL,
                                  nd != NULL ? nd->hash : 0, nd != NULL ? nd->ids : NULL,
                                  nd != NULL ? nd->nids : 0, old, wdb_unref);
    }
}

void px_match_conn_release(struct px_conn *c)
{
    int d;

    for (d = 0; d < 2; d++) {
        fgx_reasm_release(c->t->reasm, &c->dir[d]);
        fgx_wdb_unref(c->dbref[d]);
        c->dbref[d] = NULL;
    }
}

uint8_t px_sa_split(const struct sockaddr_storage *ss, uint8_t *addr, uint16_t *port)
{
    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)ss;

        memcpy(addr, &a->sin_addr, 4);
        *port = ntohs(a->sin_port);
        return 4;
    }
    if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)ss;

        memcpy(addr, &a->sin6_addr, 16);
        *port = ntohs(a->sin6_port);
        return 6;
    }
    return 0;
}

/* ref: the capture the event takes (the connection's, or an HTTP/2 stream's). */
static void event_record(struct px_conn *c, int side, const struct fgx_reasm_match *m,
                         struct fgx_cap_ring *cr, const struct fgx_cap_ref *ref,
                         uint8_t script_verdict, const char *script_fn)
{
    struct fgx_dp_event *ev = fgx_evring_claim(&c->t->events, c->service_id);
    struct timespec ts;

    if (ev == NULL)
        return;
    memset(ev, 0, sizeof(*ev));
    clock_gettime(CLOCK_REALTIME, &ts);
    ev->time_ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    ev->service_id = c->service_id;
    ev->filter_id = m->filter_id;
    ev->dir = side == 0 ? FGX_DIR_C2S : FGX_DIR_S2C;
    ev->ipproto = c->udp ? IPPROTO_UDP : IPPROTO_TCP;
    ev->family = c->family;
    (void)px_sa_split(side == 0 ? &c->client : &c->server, ev->src, &ev->sport);
    (void)px_sa_split(side == 0 ? &c->server : &c->client, ev->dst, &ev->dport);
    ev->excerpt_len = m->excerpt_len > FGX_DP_EXCERPT_MAX ? FGX_DP_EXCERPT_MAX : m->excerpt_len;
    ev->match_end = m->match_end <= ev->excerpt_len ? m->match_end : ev->excerpt_len;
    memcpy(ev->excerpt, m->excerpt, ev->excerpt_len);
    ev->log = m->log;
    ev->stream_end = m->log ? m->stream_end : 0;
    ev->h2_stream = c->t->scan_stream;
    ev->edge = c->edge;
    ev->script_verdict = script_verdict;
    if (script_fn)
        (void)snprintf(ev->script_fn, sizeof(ev->script_fn), "%s", script_fn);
    /* The capture waits pinned in its slot until the control thread takes it with the event. */
    if (cr != NULL && ref != NULL && ref->gen != 0 &&
        (m->log ? fgx_cap_pin_keep(cr, ref) : fgx_cap_pin(cr, ref, m->filter_id))) {
        ev->cap_slot = ref->slot;
        ev->cap_gen = ref->gen;
    }
    fgx_evring_commit(&c->t->events);
}

void px_match_event_script(struct px_conn *c, int side, uint8_t verdict, const char *fn,
                           const uint8_t *data, size_t len)
{
    struct fgx_cap_ring *cr = fgx_cap_set_ring(&c->t->caps, c->service_id);
    struct fgx_cap_ref ref = {c->cap_slot, c->cap_gen};
    struct fgx_reasm_match m = {0};

    /* the excerpt is the judged bytes' start: a request line, a header, what the file saw */
    size_t room = sizeof(m.excerpt) < FGX_DP_EXCERPT_MAX ? sizeof(m.excerpt) : FGX_DP_EXCERPT_MAX;

    m.excerpt_len = (uint8_t)(len < room ? len : room);
    m.match_end = m.excerpt_len;
    if (data && m.excerpt_len)
        memcpy(m.excerpt, data, m.excerpt_len);
    /* The regex stage recorded the judged read as passed; it never reached the peer. It is the
     * side's last read (the side is not read while its verdict is awaited): blocked now, before
     * the pin hands the capture to the event. */
    if (cr != NULL && ref.gen != 0)
        (void)fgx_cap_block_tail(cr, &ref, side, len, verdict == FGX_DP_SCRIPT_DROP);
    event_record(c, side, &m, cr, &ref, verdict, fn);
}

void px_match_log(void *arg, const struct fgx_reasm_match *m)
{
    struct px_thread *t = arg;

    px_stats_filter_matched(&t->ctr, m->filter_id);
    if (t->scan_conn != NULL) {
        /* the game's flag leaving (its reserved id): its event keeps the capture so far (the
         * connection's, or the HTTP/2 stream's being scanned), as a block's does; a log
         * filter's keeps none */
        struct px_conn *c = t->scan_conn;
        struct fgx_cap_ring *cr = m->filter_id == FGX_FILTER_ID_MASK
                                      ? fgx_cap_set_ring(&t->caps, c->service_id)
                                      : NULL;
        struct fgx_cap_ref ref = t->scan_cap ? *t->scan_cap
                                             : (struct fgx_cap_ref){c->cap_slot, c->cap_gen};

        event_record(c, t->scan_side, m, cr, &ref, 0, NULL);
    }
}

/* A read's bytes into a capture (*ref: the connection's, or an HTTP/2 stream's rendering, which
 * is recorded as a connection of its own from the port fgx_cap_stream_port() gives it, so a
 * pcap holds one TCP stream per exchange: docs/user-guide.md, HTTP services), after the others
 * of its side: the proxy sees byte streams, not segments (a read is a mark). The blocked read
 * never reaches the peer. */
static void cap_bytes(struct px_conn *c, struct fgx_cap_ring *cr, struct fgx_cap_ref *ref,
                      uint32_t stream, int side, const uint8_t *data, size_t len, bool blocked)
{
    struct timespec ts;
    uint64_t now;

    clock_gettime(CLOCK_REALTIME, &ts);
    now = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    if (ref->gen == 0) {
        uint8_t ca[16] = {0}, sa[16] = {0};
        uint16_t cp = 0, sp = 0;

        (void)px_sa_split(&c->client, ca, &cp);
        (void)px_sa_split(&c->server, sa, &sp);
        if (stream != 0)
            cp = fgx_cap_stream_port(cp, stream);
        fgx_cap_open(cr, IPPROTO_TCP, c->family, ca, cp, sa, sp, now, ref);
        if (ref->gen == 0)
            return; /* every slot holds a blocked capture not collected yet */
        /* Both made-up streams start at 1, also the one that has sent nothing yet. */
        fgx_cap_append(cr, ref, 0, NULL, 0, now, false);
        fgx_cap_append(cr, ref, 1, NULL, 0, now, false);
    }
    fgx_cap_append(cr, ref, side, data, len, now, blocked);
}

int px_match_scan(struct px_conn *c, int side, const uint8_t *data, size_t len)
{
    static __thread unsigned long long last_log;
    struct px_thread *t = c->t;
    struct fgx_reasm *r = &c->dir[side];
    struct fgx_reasm_match m;
    enum fgx_reasm_verdict v;
    struct fgx_cap_ring *cr;

    if (c->epoch != t->epoch)
        px_match_attach(c);
    /* The service is away, its traffic unfiltered: these bytes pass, and the streams no longer
     * hold everything that passed. */
    if (c->absent) {
        c->unscanned = true;
        return 0;
    }
    /* Scanned even with no database: the ring of passed bytes must be current for when one
     * comes. */
    t->scan_conn = c;
    t->scan_side = side;
    v = fgx_reasm_segment(t->reasm, r, r->next_seq, 0, data, len, 0, t->now_ms, &m);
    t->scan_conn = NULL;
    cr = len > 0 ? fgx_cap_set_ring(&t->caps, c->service_id) : NULL;
    /* after a script's DROP nothing read reaches the peer (px_script_chunk()): blocked too */
    if (cr != NULL) {
        struct fgx_cap_ref ref = {c->cap_slot, c->cap_gen};

        cap_bytes(c, cr, &ref, 0, side, data, len, m.matched || c->sw_drop);
        c->cap_slot = ref.slot;
        c->cap_gen = ref.gen;
    }
    if (m.matched) {
        struct fgx_cap_ref ref = {c->cap_slot, c->cap_gen};

        px_stats_filter_blocked(&t->ctr, m.filter_id);
        event_record(c, side, &m, cr, &ref, 0, NULL);
        return -EACCES;
    }
    if (v != FGX_REASM_ACCEPT) {
        PX_CTR_ADD(&t->ctr.scan_errors, 1);
        fgx_log_ratelimited(&last_log, FGX_LOG_WARN,
                            "service %u: a stream could not be scanned: connection reset",
                            c->service_id);
        return -EIO;
    }
    return 0;
}

int px_match_scan_dgram(struct px_conn *c, int side, const uint8_t *data, size_t len)
{
    static __thread unsigned long long last_log;
    struct px_thread *t = c->t;
    const struct fgx_wsvc *svc = t->cfg ? fgx_wcfg_service(t->cfg, c->service_id) : NULL;
    const struct fgx_wdb *db = svc ? svc->db[side] : NULL;
    struct fgx_reasm_match m;
    int rc;

    t->scan_conn = c;
    t->scan_side = side;
    rc = fgx_reasm_scan_block(t->reasm, db ? db->db : NULL, data, len, &m);
    t->scan_conn = NULL;
    if (rc == 1) {
        px_stats_filter_blocked(&t->ctr, m.filter_id);
        event_record(c, side, &m, NULL, NULL, 0, NULL);
        return -EACCES;
    }
    if (rc < 0) {
        PX_CTR_ADD(&t->ctr.scan_errors, 1);
        fgx_log_ratelimited(&last_log, FGX_LOG_WARN,
                            "service %u: a datagram could not be scanned: dropped", c->service_id);
        return -EIO;
    }
    return 0;
}

int px_match_scan_h2(struct px_conn *c, struct fgx_reasm *r, struct fgx_cap_ref *cap, int side,
                     uint32_t stream, const uint8_t *data, size_t len)
{
    static __thread unsigned long long last_log;
    struct px_thread *t = c->t;
    struct fgx_reasm_match m;
    enum fgx_reasm_verdict v;
    struct fgx_cap_ring *cr;

    /* a log filter's event (px_match_log()) names the stream too */
    t->scan_conn = c;
    t->scan_side = side;
    t->scan_stream = stream;
    t->scan_cap = cap;
    v = fgx_reasm_segment(t->reasm, r, r->next_seq, 0, data, len, 0, t->now_ms, &m);
    t->scan_conn = NULL;
    t->scan_cap = NULL;
    /* the rendering is what the capture holds: each exchange its own connection (cap_bytes()) */
    cr = len > 0 ? fgx_cap_set_ring(&t->caps, c->service_id) : NULL;
    if (cr != NULL)
        cap_bytes(c, cr, cap, stream, side, data, len, m.matched);
    if (m.matched) {
        px_stats_filter_blocked(&t->ctr, m.filter_id);
        event_record(c, side, &m, cr, cap, 0, NULL);
        t->scan_stream = 0;
        return -EACCES;
    }
    t->scan_stream = 0;
    if (v != FGX_REASM_ACCEPT) {
        PX_CTR_ADD(&t->ctr.scan_errors, 1);
        fgx_log_ratelimited(&last_log, FGX_LOG_WARN,
                            "service %u: an HTTP/2 stream could not be scanned: connection reset",
                            c->service_id);
        return -EIO;
    }
    return 0;
}
