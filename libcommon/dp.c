/* The data-path message layer: converts controld <-> worker messages (fgx/dp.h) to and from
 * datapath.proto, so that neither side ever sees protobuf types. Everything received is
 * validated here, before a worker acts on it: a worker trusts what fgx_dp_decode() returns. */
#include "fgx/dp.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "datapath.pb-c.h"
#include "fgx/log.h"

/* ---- validation shared by both directions ---- */

static int addr_bytes(int family)
{
    return family == 4 ? 4 : family == 6 ? 16 : 0;
}

/* The invariants of struct fgx_cidr (fgx/addr.h) and of the service's other fields. */
static int service_check(uint32_t id, uint32_t proto, uint32_t port, const struct fgx_cidr *c)
{
    unsigned bits = (unsigned)addr_bytes(c->family) * 8, i;

    if (proto != IPPROTO_TCP && proto != IPPROTO_UDP) {
        fgx_warn("data-path service %u: bad IP protocol %u", id, proto);
        return -EINVAL;
    }
    if (port > 65535) {
        fgx_warn("data-path service %u: bad port %u", id, port);
        return -EINVAL;
    }
    if (c->family != 0 && c->family != 4 && c->family != 6) {
        fgx_warn("data-path service %u: bad address family %u", id, (unsigned)c->family);
        return -EINVAL;
    }
    if (c->prefix > bits) {
        fgx_warn("data-path service %u: prefix /%u too long for family %u", id, (unsigned)c->prefix,
                 (unsigned)c->family);
        return -EINVAL;
    }
    for (i = c->prefix; i < bits; i++) {
        if (c->addr[i / 8] & (0x80u >> (i % 8))) {
            fgx_warn("data-path service %u: address bits set below prefix /%u", id,
                     (unsigned)c->prefix);
            return -EINVAL;
        }
    }
    return 0;
}

/* An event is checked on both sides, and a bad one is dropped and counted in events_lost rather
 * than refusing the whole STATS: one worker bug must not silence every counter. */
static bool event_ok(uint32_t dir, uint32_t ipproto, size_t srclen, size_t dstlen, size_t exlen)
{
    return (dir == FGX_DIR_C2S || dir == FGX_DIR_S2C) &&
           (ipproto == IPPROTO_TCP || ipproto == IPPROTO_UDP) && srclen == dstlen &&
           (srclen == 4 || srclen == 16) && exlen <= FGX_DP_EXCERPT_MAX;
}

/* Filter ids of one database: strictly ascending by filter id (a log filter's carries
 * FGX_FILTER_ID_LOG, which is not part of the order), so that a worker can look one up by
 * bisection and compare two databases' sets in one pass. */
static int ids_check(uint32_t id, const char *dir, const uint32_t *ids, size_t n)
{
    size_t i;

    if (n > 0 && ids == NULL) {
        fgx_warn("data-path service %u: %zu %s filter ids missing", id, n, dir);
        return -EINVAL;
    }
    for (i = 1; i < n; i++) {
        if ((ids[i] & FGX_FILTER_ID_MASK) <= (ids[i - 1] & FGX_FILTER_ID_MASK)) {
            fgx_warn("data-path service %u: %s filter ids not strictly ascending (%u after %u)",
                     id, dir, ids[i], ids[i - 1]);
            return -EINVAL;
        }
    }
    return 0;
}

/* ---- encode ---- */

/* The address list of s into am/ap (room for s->naddrs each). */
static int addrs_to_pb(const struct fgx_dp_service *s, Fgx__Dp__Addr *am, Fgx__Dp__Addr **ap,
                       Fgx__Dp__Service *p)
{
    for (size_t i = 0; i < s->naddrs; i++) {
        const struct fgx_svcaddr *a = &s->addrs[i];
        int n = addr_bytes(a->cidr.family);

        if (service_check(s->id, s->ipproto, a->port, &a->cidr) < 0 || a->port == 0)
            return -EINVAL;
        fgx__dp__addr__init(&am[i]);
        am[i].family = a->cidr.family;
        am[i].port = a->port;
        if (n > 0) {
            am[i].has_addr = 1;
            am[i].addr.data = (uint8_t *)a->cidr.addr;
            am[i].addr.len = (size_t)n;
            am[i].has_prefix = 1;
            am[i].prefix = a->cidr.prefix;
        }
        if (a->ifname[0] != '\0')
            am[i].ifname = (char *)a->ifname;
        am[i].has_edge = a->edge != FGX_EDGE_DEFAULT;
        am[i].edge = a->edge;
        am[i].has_to_port = a->to_port != 0;
        am[i].to_port = a->to_port;
        ap[i] = &am[i];
    }
    p->n_addrs = s->naddrs;
    p->addrs = s->naddrs > 0 ? ap : NULL;
    return 0;
}

static int service_to_pb(const struct fgx_dp_service *s, Fgx__Dp__Service *p)
{
    int n = addr_bytes(s->addr.family);

    if ((s->db_known[0] && s->db[0].hash == 0) || (s->db_known[1] && s->db[1].hash == 0)) {
        fgx_err("data-path service %u: a database known to the worker needs its hash", s->id);
        return -EINVAL;
    }
    if (service_check(s->id, s->ipproto, s->port, &s->addr) < 0 ||
        ids_check(s->id, "c2s", s->ids[0], s->nids[0]) < 0 ||
        ids_check(s->id, "s2c", s->ids[1], s->nids[1]) < 0)
        return -EINVAL;
    fgx__dp__service__init(p);
    p->id = s->id;
    p->proto = s->ipproto;
    p->port = s->port;
    p->family = s->addr.family;
    if (n > 0) {
        p->has_addr = 1;
        /* protobuf-c never writes through data when packing; the cast only drops const. */
        p->addr.data = (uint8_t *)s->addr.addr;
        p->addr.len = (size_t)n;
        p->has_prefix = 1;
        p->prefix = s->addr.prefix;
    }
    p->fail_open = s->fail_open;
    if (s->midstream != FGX_MIDSTREAM_RESET) {
        p->has_midstream = 1;
        p->midstream = s->midstream;
    }
    if (s->capture_conns > 0 && s->capture_bytes > 0) {
        p->has_capture_conns = p->has_capture_bytes = 1;
        p->capture_conns = s->capture_conns;
        p->capture_bytes = s->capture_bytes;
    }
    if (s->db[0].len > 0) {
        p->has_db_c2s = 1;
        p->db_c2s.data = s->db[0].data;
        p->db_c2s.len = s->db[0].len;
    }
    if (s->db[0].len > 0 || s->db[0].hash != 0) {
        p->has_hash_c2s = 1;
        p->hash_c2s = s->db[0].hash;
    }
    if (s->db_known[0]) {
        p->has_db_c2s = 0;
        p->has_db_c2s_known = 1;
        p->db_c2s_known = 1;
    }
    if (s->db[1].len > 0) {
        p->has_db_s2c = 1;
        p->db_s2c.data = s->db[1].data;
        p->db_s2c.len = s->db[1].len;
    }
    if (s->db[1].len > 0 || s->db[1].hash != 0) {
        p->has_hash_s2c = 1;
        p->hash_s2c = s->db[1].hash;
    }
    if (s->tls_cert.len > 0) {
        p->has_tls_cert = p->has_tls_key = 1;
        p->tls_cert.data = s->tls_cert.data;
        p->tls_cert.len = s->tls_cert.len;
        p->tls_key.data = s->tls_key.data;
        p->tls_key.len = s->tls_key.len;
        p->has_tls_upstream_plain = s->tls_upstream_plain;
        p->tls_upstream_plain = s->tls_upstream_plain;
    }
    p->has_http = s->http;
    p->http = s->http;
    p->has_http_upstream_http1 = s->http_upstream_http1;
    p->http_upstream_http1 = s->http_upstream_http1;
    p->has_max_conns = p->has_over_limit_forward = s->max_conns > 0;
    p->max_conns = s->max_conns;
    p->over_limit_forward = s->over_limit_forward;
    p->has_first_byte_ms = s->first_byte_ms > 0;
    p->first_byte_ms = s->first_byte_ms;
    if (s->db_known[1]) {
        p->has_db_s2c = 0;
        p->has_db_s2c_known = 1;
        p->db_s2c_known = 1;
    }
    /* protobuf-c never writes through these when packing either. */
    p->n_ids_c2s = s->nids[0];
    p->ids_c2s = (uint32_t *)s->ids[0];
    p->n_ids_s2c = s->nids[1];
    p->ids_s2c = (uint32_t *)s->ids[1];
    if (s->script.len > 0) {
        p->has_script = 1;
        p->script.data = s->script.data;
        p->script.len = s->script.len;
        p->has_script_deadline_ms = 1;
        p->script_deadline_ms = s->script_deadline_ms;
        p->has_script_dirs = 1;
        p->script_dirs = s->script_dirs;
    }
    return 0;
}

static bool blob_same(const struct fgx_blob *a, const struct fgx_blob *b)
{
    return a->len > 0 && a->len == b->len &&
           (a->data == b->data || memcmp(a->data, b->data, a->len) == 0);
}

/* Send service i's databases as references to an identical earlier one of r where there is
 * one: a worker's receive buffers then hold each database once. */
static void blobs_dedup(const struct fgx_dp_ruleset *r, size_t i, Fgx__Dp__Service *p)
{
    size_t k, d;

    for (d = 0; d < 2; d++) {
        const struct fgx_blob *b = &r->services[i].db[d];

        if (b->len == 0 || r->services[i].db_known[d])
            continue;
        for (k = 0; k < 2 * i + d; k++) {
            if (r->services[k / 2].db_known[k % 2] ||
                !blob_same(&r->services[k / 2].db[k % 2], b))
                continue;
            if (d == 0) {
                p->has_db_c2s = 0;
                p->has_db_c2s_as = 1;
                p->db_c2s_as = (uint32_t)k + 1;
            } else {
                p->has_db_s2c = 0;
                p->has_db_s2c_as = 1;
                p->db_s2c_as = (uint32_t)k + 1;
            }
            break;
        }
    }
}

int fgx_dp_encode(const struct fgx_dp_msg *m, void **buf, size_t *len)
{
    Fgx__Dp__Msg msg = FGX__DP__MSG__INIT;
    Fgx__Dp__Ruleset rs = FGX__DP__RULESET__INIT;
    Fgx__Dp__Ack ack = FGX__DP__ACK__INIT;
    Fgx__Dp__StatsRequest sreq = FGX__DP__STATS_REQUEST__INIT;
    Fgx__Dp__Stats st = FGX__DP__STATS__INIT;
    Fgx__Dp__FlowsRequest freq = FGX__DP__FLOWS_REQUEST__INIT;
    Fgx__Dp__Flows fl = FGX__DP__FLOWS__INIT;
    Fgx__Dp__CaptureRequest creq = FGX__DP__CAPTURE_REQUEST__INIT;
    Fgx__Dp__Captures caps = FGX__DP__CAPTURES__INIT;
    Fgx__Dp__HeartbeatRequest hreq = FGX__DP__HEARTBEAT_REQUEST__INIT;
    Fgx__Dp__Heartbeat hb = FGX__DP__HEARTBEAT__INIT;
    uint32_t stale[FGX_DP_HB_THREADS_MAX];
    ProtobufCBinaryData *capv = NULL;
    Fgx__Dp__ScriptLog *sl = NULL, **slp = NULL;
    Fgx__Dp__Service *svc = NULL, **svcp = NULL;
    Fgx__Dp__Addr *addrm = NULL, **addrp = NULL;
    Fgx__Dp__FilterStat *fs = NULL, **fsp = NULL;
    Fgx__Dp__ServiceStat *ss = NULL, **ssp = NULL;
    Fgx__Dp__Event *ev = NULL, **evp = NULL;
    void *out = NULL;
    size_t i, n = 0;
    int ret = -ENOMEM;

    *buf = NULL;
    *len = 0;
    switch (m->type) {
    case FGX_DP_RULESET: {
        const struct fgx_dp_ruleset *r = &m->u.ruleset;

        if (r->nservices > 0 && r->services == NULL) {
            ret = -EINVAL;
            goto invalid;
        }
        size_t naddrs = 0, at = 0;

        for (i = 0; i < r->nservices; i++)
            naddrs += r->services[i].naddrs;
        if (r->nservices > 0) {
            svc = calloc(r->nservices, sizeof(*svc));
            svcp = calloc(r->nservices, sizeof(Fgx__Dp__Service *));
            addrm = calloc(naddrs ? naddrs : 1, sizeof(*addrm));
            addrp = calloc(naddrs ? naddrs : 1, sizeof(*addrp));
            if (svc == NULL || svcp == NULL || addrm == NULL || addrp == NULL)
                goto nomem;
        }
        for (i = 0; i < r->nservices; i++) {
            ret = service_to_pb(&r->services[i], &svc[i]);
            if (ret == 0)
                ret = addrs_to_pb(&r->services[i], addrm + at, addrp + at, &svc[i]);
            if (ret < 0)
                goto out; /* service_check() said why */
            at += r->services[i].naddrs;
            svcp[i] = &svc[i];
            blobs_dedup(r, i, &svc[i]);
        }
        rs.generation = r->generation;
        rs.n_services = r->nservices;
        rs.services = svcp;
        msg.msg_case = FGX__DP__MSG__MSG_RULESET;
        msg.ruleset = &rs;
        break;
    }
    case FGX_DP_ACK:
        ack.generation = m->u.ack_generation;
        msg.msg_case = FGX__DP__MSG__MSG_ACK;
        msg.ack = &ack;
        break;
    case FGX_DP_STATS_REQUEST:
        msg.msg_case = FGX__DP__MSG__MSG_STATS_REQUEST;
        msg.stats_request = &sreq;
        break;
    case FGX_DP_STATS: {
        const struct fgx_dp_stats *s = &m->u.stats;

        size_t nev = 0;

        if ((s->nfilters > 0 && s->filters == NULL) || (s->nservices > 0 && s->services == NULL) ||
            (s->nevents > 0 && s->events == NULL)) {
            ret = -EINVAL;
            goto invalid;
        }
        if (s->nfilters > 0) {
            fs = calloc(s->nfilters, sizeof(*fs));
            fsp = calloc(s->nfilters, sizeof(Fgx__Dp__FilterStat *));
            if (fs == NULL || fsp == NULL)
                goto nomem;
        }
        for (i = 0; i < s->nfilters; i++) {
            fgx__dp__filter_stat__init(&fs[i]);
            fs[i].filter_id = s->filters[i].filter_id;
            fs[i].blocked = s->filters[i].blocked;
            if (s->filters[i].matched > 0) {
                fs[i].has_matched = 1;
                fs[i].matched = s->filters[i].matched;
            }
            fsp[i] = &fs[i];
        }
        if (s->nservices > 0) {
            ss = calloc(s->nservices, sizeof(*ss));
            ssp = calloc(s->nservices, sizeof(Fgx__Dp__ServiceStat *));
            if (ss == NULL || ssp == NULL)
                goto nomem;
        }
        for (i = 0; i < s->nservices; i++) {
            const struct fgx_dp_service_stat *v = &s->services[i];

            fgx__dp__service_stat__init(&ss[i]);
            ss[i].service_id = v->service_id;
            ss[i].packets = v->packets;
            ss[i].bytes = v->bytes;
            ss[i].accepted = v->accepted;
            ss[i].dropped = v->dropped;
            ss[i].flows_active = v->flows_active;
            if (v->events_lost > 0) {
                ss[i].has_events_lost = 1;
                ss[i].events_lost = v->events_lost;
            }
            ss[i].has_tls_failed = v->tls_failed > 0;
            ss[i].tls_failed = v->tls_failed;
            ss[i].has_bytes_c2s = ss[i].has_bytes_s2c = ss[i].has_flows_new = 1;
            ss[i].bytes_c2s = v->bytes_c2s;
            ss[i].bytes_s2c = v->bytes_s2c;
            ss[i].flows_new = v->flows_new;
            ss[i].has_limit_hits = v->limit_hits > 0;
            ss[i].limit_hits = v->limit_hits;
            ssp[i] = &ss[i];
        }
        if (s->nevents > 0) {
            ev = calloc(s->nevents, sizeof(*ev));
            evp = calloc(s->nevents, sizeof(Fgx__Dp__Event *));
            if (ev == NULL || evp == NULL)
                goto nomem;
        }
        for (i = 0; i < s->nevents; i++) {
            const struct fgx_dp_event *e = &s->events[i];
            size_t alen = (size_t)addr_bytes(e->family);
            Fgx__Dp__Event *p = &ev[nev];

            if (!event_ok(e->dir, e->ipproto, alen, alen, e->excerpt_len) ||
                e->match_end > e->excerpt_len)
                continue;
            fgx__dp__event__init(p);
            p->time_ns = e->time_ns;
            p->service_id = e->service_id;
            p->filter_id = e->filter_id;
            p->dir = e->dir;
            p->ipproto = e->ipproto;
            p->src.data = (uint8_t *)e->src;
            p->src.len = alen;
            p->sport = e->sport;
            p->dst.data = (uint8_t *)e->dst;
            p->dst.len = alen;
            p->dport = e->dport;
            if (e->excerpt_len > 0) {
                p->has_excerpt = 1;
                p->excerpt.data = (uint8_t *)e->excerpt;
                p->excerpt.len = e->excerpt_len;
            }
            if (e->match_end != e->excerpt_len) {
                p->has_match_end = 1;
                p->match_end = e->match_end;
            }
            if (e->log) {
                p->has_log = 1;
                p->log = 1;
            }
            p->has_h2_stream = e->h2_stream != 0;
            p->h2_stream = e->h2_stream;
            p->has_edge = e->edge != FGX_EDGE_DEFAULT;
            p->edge = e->edge;
            p->has_stream_end = e->stream_end != 0;
            p->stream_end = e->stream_end;
            if (e->script_verdict != 0) {
                p->has_script_verdict = 1;
                p->script_verdict = e->script_verdict;
                /* the ring's copy is NUL-terminated by its writer; the stats own it meanwhile */
                p->script_function = (char *)e->script_fn;
            }
            if (e->capture != NULL) {
                p->has_capture = 1;
                p->capture.data = e->capture;
                p->capture.len = e->capture_len;
            }
            evp[nev++] = p;
        }
        if (nev < s->nevents)
            fgx_warn("data-path encode: %zu invalid event(s) dropped", s->nevents - nev);
        st.n_events = nev;
        st.events = evp;
        if (s->events_lost > 0 || nev < s->nevents) {
            st.has_events_lost = 1;
            st.events_lost = s->events_lost + (s->nevents - nev);
        }
        st.generation = s->generation;
        st.n_filters = s->nfilters;
        st.filters = fsp;
        st.n_services = s->nservices;
        st.services = ssp;
        st.queue_drops = s->queue_drops;
        st.flows = s->flows;
        st.rss_bytes = s->rss_bytes;
        st.truncated = s->truncated;
        st.verdict_errors = s->verdict_errors;
        st.malformed = s->malformed;
        st.has_evasion = s->evasion != 0;
        st.evasion = s->evasion;
        st.has_midstream_resets = s->midstream_resets != 0;
        st.midstream_resets = s->midstream_resets;
        st.has_flows_evicted = s->flows_evicted != 0;
        st.flows_evicted = s->flows_evicted;
        st.has_script_refused = s->script_refused != 0;
        st.script_refused = s->script_refused;
        st.has_script_errors = s->script_errors != 0;
        st.script_errors = s->script_errors;
        st.has_script_timeouts = s->script_timeouts != 0;
        st.script_timeouts = s->script_timeouts;
        st.has_script_blocked = s->script_blocked != 0;
        st.script_blocked = s->script_blocked;
        st.has_script_final = s->script_final != 0;
        st.script_final = s->script_final;
        st.has_script_held = s->script_held != 0;
        st.script_held = s->script_held;
        st.has_script_flows = s->script_flows != 0;
        st.script_flows = s->script_flows;
        st.has_script_reclaimed = s->script_reclaimed != 0;
        st.script_reclaimed = s->script_reclaimed;
        /* Optional: absent (0) from nfqworker costs no bytes. */
        st.has_conns_refused = s->conns_refused != 0;
        st.has_unclassified = s->unclassified != 0;
        st.has_connect_failed = s->connect_failed != 0;
        st.has_scan_errors = s->scan_errors != 0;
        st.conns_refused = s->conns_refused;
        st.unclassified = s->unclassified;
        st.connect_failed = s->connect_failed;
        st.scan_errors = s->scan_errors;
        st.has_src_refused = s->src_refused != 0;
        st.has_evicted = s->evicted != 0;
        st.has_silent_closed = s->silent_closed != 0;
        st.has_midstream_reset = s->midstream_reset != 0;
        st.has_midstream_rescan = s->midstream_rescan != 0;
        st.src_refused = s->src_refused;
        st.evicted = s->evicted;
        st.silent_closed = s->silent_closed;
        st.midstream_reset = s->midstream_reset;
        st.midstream_rescan = s->midstream_rescan;
        if (s->nscript_logs > 0) {
            sl = calloc(s->nscript_logs, sizeof(*sl));
            slp = calloc(s->nscript_logs, sizeof(*slp));
            if (sl == NULL || slp == NULL)
                goto nomem;
            for (size_t k = 0; k < s->nscript_logs; k++) {
                fgx__dp__script_log__init(&sl[k]);
                sl[k].service_id = s->script_logs[k].service_id;
                sl[k].kind = s->script_logs[k].kind ? s->script_logs[k].kind : "";
                sl[k].function = s->script_logs[k].function;
                sl[k].text = s->script_logs[k].text;
                if (s->script_logs[k].family == 4 || s->script_logs[k].family == 6) {
                    size_t al = s->script_logs[k].family == 4 ? 4 : 16;

                    sl[k].has_client = sl[k].has_server = 1;
                    sl[k].client = (ProtobufCBinaryData){al, s->script_logs[k].caddr};
                    sl[k].server = (ProtobufCBinaryData){al, s->script_logs[k].saddr};
                    sl[k].has_cport = sl[k].has_sport = 1;
                    sl[k].cport = s->script_logs[k].cport;
                    sl[k].sport = s->script_logs[k].sport;
                }
                slp[k] = &sl[k];
            }
            st.n_script_logs = s->nscript_logs;
            st.script_logs = slp;
        }
        st.has_script_logs_lost = s->script_logs_lost != 0;
        st.script_logs_lost = s->script_logs_lost;
        st.has_worker_id = s->worker_id != 0;
        st.worker_id = s->worker_id;
        msg.msg_case = FGX__DP__MSG__MSG_STATS;
        msg.stats = &st;
        break;
    }
    case FGX_DP_ERROR:
        msg.msg_case = FGX__DP__MSG__MSG_ERROR;
        msg.error = m->u.error != NULL ? m->u.error : "";
        break;
    case FGX_DP_FLOWS_REQUEST:
        msg.msg_case = FGX__DP__MSG__MSG_FLOWS_REQUEST;
        msg.flows_request = &freq;
        break;
    case FGX_DP_FLOWS:
        fl.data.data = m->u.flows.data;
        fl.data.len = m->u.flows.len;
        msg.msg_case = FGX__DP__MSG__MSG_FLOWS;
        msg.flows = &fl;
        break;
    case FGX_DP_CAPTURE_REQUEST:
        creq.service_id = m->u.capture_service;
        msg.msg_case = FGX__DP__MSG__MSG_CAPTURE_REQUEST;
        msg.capture_request = &creq;
        break;
    case FGX_DP_CAPTURES:
        if (m->u.captures.n > 0) {
            capv = calloc(m->u.captures.n, sizeof(*capv));
            if (capv == NULL)
                goto nomem;
        }
        for (i = 0; i < m->u.captures.n; i++) {
            capv[i].data = m->u.captures.caps[i].data;
            capv[i].len = m->u.captures.caps[i].len;
        }
        caps.n_captures = m->u.captures.n;
        caps.captures = capv;
        msg.msg_case = FGX__DP__MSG__MSG_CAPTURES;
        msg.captures = &caps;
        break;
    case FGX_DP_HEARTBEAT_REQUEST:
        msg.msg_case = FGX__DP__MSG__MSG_HEARTBEAT_REQUEST;
        msg.heartbeat_request = &hreq;
        break;
    case FGX_DP_HEARTBEAT:
        if (m->u.heartbeat.nthreads > FGX_DP_HB_THREADS_MAX) {
            ret = -EINVAL;
            goto invalid;
        }
        hb.pid = m->u.heartbeat.pid;
        hb.worker_id = m->u.heartbeat.worker_id;
        hb.generation = m->u.heartbeat.generation;
        memcpy(stale, m->u.heartbeat.stale_ms, m->u.heartbeat.nthreads * sizeof(*stale));
        hb.n_stale_ms = m->u.heartbeat.nthreads;
        hb.stale_ms = stale;
        msg.msg_case = FGX__DP__MSG__MSG_HEARTBEAT;
        msg.heartbeat = &hb;
        break;
    default:
        ret = -EINVAL;
        goto invalid;
    }

    n = fgx__dp__msg__get_packed_size(&msg);
    out = malloc(n > 0 ? n : 1);
    if (out == NULL)
        goto nomem;
    if (fgx__dp__msg__pack(&msg, out) != n) {
        fgx_err("data-path encode: packed size mismatch");
        free(out);
        ret = -EINVAL;
        goto out;
    }
    *buf = out;
    *len = n;
    ret = 0;
    goto out;

nomem:
    fgx_err("data-path encode (type %d): out of memory", (int)m->type);
    ret = -ENOMEM;
    goto out;
invalid:
    fgx_err("data-path encode (type %d): invalid message", (int)m->type);
out:
    free(capv);
    free(sl);
    free(slp);
    free(evp);
    free(ev);
    free(ssp);
    free(ss);
    free(fsp);
    free(fs);
    free(svcp);
    free(svc);
    free(addrp);
    free(addrm);
    return ret;
}

/* ---- decode ---- */

/* The decoded bytes are taken from the unpacked message rather than copied (protobuf-c
 * allocated them with malloc and skips a NULL pointer when it frees the message): a database is
 * never held twice during a decode. */
static void blob_take(protobuf_c_boolean has, ProtobufCBinaryData *src, protobuf_c_boolean has_hash,
                      uint64_t hash, struct fgx_blob *b)
{
    if (has && src->len > 0 && src->data != NULL) {
        b->data = src->data;
        b->len = src->len;
        src->data = NULL;
        src->len = 0;
    }
    b->hash = has_hash ? hash : 0;
}

/* Blob k (2 * service index + direction) of the services decoded so far, as the target of a
 * reference from blob self; NULL when k is not an earlier blob with bytes. */
static const struct fgx_blob *blob_ref(const struct fgx_dp_ruleset *r, uint32_t k, size_t self)
{
    const struct fgx_blob *b;

    if (k >= self)
        return NULL;
    b = &r->services[k / 2].db[k % 2];
    return b->len > 0 ? b : NULL;
}

static void blob_free(struct fgx_blob *b, bool shared)
{
    /* Not fgx_blob_release(): keep this object free of any link to the hyperscan code. */
    if (!shared)
        free(b->data);
    b->data = NULL;
    b->len = 0;
}

static int ids_copy(const uint32_t *src, size_t n, uint32_t **ids, size_t *nids)
{
    if (n == 0)
        return 0;
    *ids = malloc(n * sizeof(**ids));
    if (*ids == NULL)
        return -ENOMEM;
    memcpy(*ids, src, n * sizeof(**ids));
    *nids = n;
    return 0;
}

static int service_from_pb(Fgx__Dp__Service *p, const struct fgx_dp_ruleset *r, size_t idx,
                           struct fgx_dp_service *s)
{
    int n, d;

    if (p->family != 0 && p->family != 4 && p->family != 6) {
        fgx_warn("data-path service %u: bad address family %u", p->id, p->family);
        return -EINVAL;
    }
    n = addr_bytes((int)p->family);
    if ((p->has_addr ? p->addr.len : 0) != (size_t)n) {
        fgx_warn("data-path service %u: %zu address bytes for family %u", p->id,
                 p->has_addr ? p->addr.len : 0, p->family);
        return -EINVAL;
    }
    if (p->has_prefix && p->prefix > (unsigned)n * 8) {
        fgx_warn("data-path service %u: prefix /%u too long for family %u", p->id, p->prefix,
                 p->family);
        return -EINVAL;
    }
    s->id = p->id;
    s->addr.family = (uint8_t)p->family;
    s->addr.prefix = (uint8_t)(p->has_prefix ? p->prefix : (unsigned)n * 8);
    if (n > 0)
        memcpy(s->addr.addr, p->addr.data, (size_t)n);
    if (service_check(p->id, p->proto, p->port, &s->addr) < 0)
        return -EINVAL;
    s->ipproto = (uint8_t)p->proto;
    s->port = (uint16_t)p->port;
    s->fail_open = p->fail_open != 0;
    if (p->has_midstream && p->midstream > FGX_MIDSTREAM_SCAN) {
        fgx_warn("data-path service %u: unknown midstream policy %u", p->id, p->midstream);
        return -EINVAL;
    }
    s->midstream = (uint8_t)(p->has_midstream ? p->midstream : FGX_MIDSTREAM_RESET);
    s->capture_conns = p->has_capture_conns ? p->capture_conns : 0;
    s->capture_bytes = p->has_capture_bytes ? p->capture_bytes : 0;
    if ((p->has_db_c2s + p->has_db_c2s_as + (p->has_db_c2s_known && p->db_c2s_known)) > 1 ||
        (p->has_db_s2c + p->has_db_s2c_as + (p->has_db_s2c_known && p->db_s2c_known)) > 1) {
        fgx_warn("data-path service %u: a database given as more than one of bytes, a reference "
                 "and a known hash", p->id);
        return -EINVAL;
    }
    if ((p->has_db_c2s_known && p->db_c2s_known && (!p->has_hash_c2s || p->hash_c2s == 0)) ||
        (p->has_db_s2c_known && p->db_s2c_known && (!p->has_hash_s2c || p->hash_s2c == 0))) {
        fgx_warn("data-path service %u: a known database without its hash", p->id);
        return -EINVAL;
    }
    s->db_known[0] = p->has_db_c2s_known && p->db_c2s_known;
    s->db_known[1] = p->has_db_s2c_known && p->db_s2c_known;
    blob_take(p->has_db_c2s, &p->db_c2s, p->has_hash_c2s, p->hash_c2s, &s->db[0]);
    blob_take(p->has_db_s2c, &p->db_s2c, p->has_hash_s2c, p->hash_s2c, &s->db[1]);
    if (p->has_tls_cert != p->has_tls_key) {
        fgx_warn("data-path service %u: a TLS certificate without its key, or a key without one",
                 p->id);
        return -EINVAL;
    }
    blob_take(p->has_tls_cert, &p->tls_cert, 0, 0, &s->tls_cert);
    blob_take(p->has_tls_key, &p->tls_key, 0, 0, &s->tls_key);
    s->tls_upstream_plain = p->has_tls_upstream_plain && p->tls_upstream_plain;
    s->http = p->has_http && p->http;
    s->http_upstream_http1 = p->has_http_upstream_http1 && p->http_upstream_http1;
    s->max_conns = p->has_max_conns ? p->max_conns : 0;
    s->over_limit_forward = p->has_over_limit_forward && p->over_limit_forward;
    s->first_byte_ms = p->has_first_byte_ms ? p->first_byte_ms : 0;
    for (d = 0; d < 2; d++) {
        protobuf_c_boolean has_as = d == 0 ? p->has_db_c2s_as : p->has_db_s2c_as;
        uint32_t as = d == 0 ? p->db_c2s_as : p->db_s2c_as;
        const struct fgx_blob *b;

        if (!has_as)
            continue;
        b = as > 0 ? blob_ref(r, as - 1, 2 * idx + d) : NULL;
        if (b == NULL) {
            fgx_warn("data-path service %u: database reference %u is not an earlier database",
                     p->id, as);
            return -EINVAL;
        }
        s->db[d].data = b->data;
        s->db[d].len = b->len;
        s->db_shared[d] = true;
    }
    if (ids_check(p->id, "c2s", p->ids_c2s, p->n_ids_c2s) < 0 ||
        ids_check(p->id, "s2c", p->ids_s2c, p->n_ids_s2c) < 0)
        return -EINVAL;
    if (ids_copy(p->ids_c2s, p->n_ids_c2s, &s->ids[0], &s->nids[0]) < 0 ||
        ids_copy(p->ids_s2c, p->n_ids_s2c, &s->ids[1], &s->nids[1]) < 0) {
        fgx_err("data-path decode: out of memory for the filter ids of service %u", p->id);
        return -ENOMEM;
    }
    if (p->n_addrs > 0) {
        s->addrs = calloc(p->n_addrs, sizeof(*s->addrs));
        if (s->addrs == NULL) {
            fgx_err("data-path decode: out of memory for the addresses of service %u", p->id);
            return -ENOMEM;
        }
        s->naddrs = p->n_addrs;
        for (size_t i = 0; i < p->n_addrs; i++) {
            const Fgx__Dp__Addr *a = p->addrs[i];
            struct fgx_svcaddr *o = &s->addrs[i];
            int an;

            if (a->family != 0 && a->family != 4 && a->family != 6) {
                fgx_warn("data-path service %u: bad address family %u", p->id, a->family);
                return -EINVAL;
            }
            an = addr_bytes((int)a->family);
            if ((a->has_addr ? a->addr.len : 0) != (size_t)an ||
                (a->has_prefix && a->prefix > (unsigned)an * 8) || a->port == 0 ||
                (a->ifname && (a->family != 0 || !fgx_ifname_valid(a->ifname)))) {
                fgx_warn("data-path service %u: address %zu is malformed", p->id, i + 1);
                return -EINVAL;
            }
            o->cidr.family = (uint8_t)a->family;
            o->cidr.prefix = (uint8_t)(a->has_prefix ? a->prefix : (unsigned)an * 8);
            if (an > 0)
                memcpy(o->cidr.addr, a->addr.data, (size_t)an);
            if (service_check(p->id, p->proto, a->port, &o->cidr) < 0)
                return -EINVAL;
            o->port = (uint16_t)a->port;
            if (a->ifname)
                memcpy(o->ifname, a->ifname, strlen(a->ifname) + 1);
            if ((a->has_edge && a->edge > FGX_EDGE_MAX) || (a->has_to_port && a->to_port > 65535)) {
                fgx_warn("data-path service %u: address %zu has a bad edge", p->id, i + 1);
                return -EINVAL;
            }
            o->edge = (uint8_t)(a->has_edge ? a->edge : FGX_EDGE_DEFAULT);
            o->to_port = (uint16_t)(a->has_to_port ? a->to_port : 0);
        }
    }
    if (p->has_script && p->script.len > 0) {
        s->script.data = malloc(p->script.len);
        if (!s->script.data)
            return -ENOMEM;
        memcpy(s->script.data, p->script.data, p->script.len);
        s->script.len = p->script.len;
        s->script_deadline_ms = p->has_script_deadline_ms ? p->script_deadline_ms : 100;
        s->script_dirs = (uint8_t)(p->has_script_dirs ? p->script_dirs & 3 : 3);
    }
    return 0;
}

static int ruleset_from_pb(Fgx__Dp__Ruleset *p, struct fgx_dp_ruleset *r)
{
    size_t i;
    int ret;

    r->generation = p->generation;
    if (p->n_services == 0)
        return 0;
    r->services = calloc(p->n_services, sizeof(*r->services));
    if (r->services == NULL) {
        fgx_err("data-path decode: out of memory for %zu services", p->n_services);
        return -ENOMEM;
    }
    /* Count as we go, so that a failure half-way releases exactly what was copied. */
    for (i = 0; i < p->n_services; i++) {
        r->nservices = i + 1;
        ret = service_from_pb(p->services[i], r, i, &r->services[i]);
        if (ret < 0)
            return ret;
    }
    return 0;
}

static int stats_from_pb(const Fgx__Dp__Stats *p, struct fgx_dp_stats *s)
{
    size_t i;

    s->generation = p->generation;
    s->queue_drops = p->queue_drops;
    s->flows = p->flows;
    s->rss_bytes = p->rss_bytes;
    s->truncated = p->truncated;
    s->verdict_errors = p->verdict_errors;
    s->malformed = p->malformed;
    s->evasion = p->evasion;
    s->midstream_resets = p->midstream_resets;
    s->flows_evicted = p->flows_evicted;
    s->script_refused = p->script_refused;
    s->script_errors = p->script_errors;
    s->script_timeouts = p->script_timeouts;
    s->script_blocked = p->script_blocked;
    s->script_final = p->script_final;
    s->script_held = p->script_held;
    s->script_flows = p->script_flows;
    s->script_reclaimed = p->script_reclaimed;
    s->conns_refused = p->conns_refused;
    s->unclassified = p->unclassified;
    s->connect_failed = p->connect_failed;
    s->scan_errors = p->scan_errors;
    s->src_refused = p->src_refused;
    s->evicted = p->evicted;
    s->silent_closed = p->silent_closed;
    s->midstream_reset = p->midstream_reset;
    s->midstream_rescan = p->midstream_rescan;
    if (p->n_filters > 0) {
        s->filters = calloc(p->n_filters, sizeof(*s->filters));
        if (s->filters == NULL)
            goto nomem;
        s->nfilters = p->n_filters;
        for (i = 0; i < p->n_filters; i++) {
            s->filters[i].filter_id = p->filters[i]->filter_id;
            s->filters[i].blocked = p->filters[i]->blocked;
            s->filters[i].matched = p->filters[i]->has_matched ? p->filters[i]->matched : 0;
        }
    }
    if (p->n_services > 0) {
        s->services = calloc(p->n_services, sizeof(*s->services));
        if (s->services == NULL)
            goto nomem;
        s->nservices = p->n_services;
        for (i = 0; i < p->n_services; i++) {
            const Fgx__Dp__ServiceStat *v = p->services[i];

            s->services[i].service_id = v->service_id;
            s->services[i].packets = v->packets;
            s->services[i].bytes = v->bytes;
            s->services[i].accepted = v->accepted;
            s->services[i].dropped = v->dropped;
            s->services[i].flows_active = v->flows_active;
            s->services[i].events_lost = v->has_events_lost ? v->events_lost : 0;
            s->services[i].tls_failed = v->has_tls_failed ? v->tls_failed : 0;
            s->services[i].bytes_c2s = v->has_bytes_c2s ? v->bytes_c2s : 0;
            s->services[i].bytes_s2c = v->has_bytes_s2c ? v->bytes_s2c : 0;
            s->services[i].flows_new = v->has_flows_new ? v->flows_new : 0;
            s->services[i].limit_hits = v->has_limit_hits ? v->limit_hits : 0;
        }
    }
    s->events_lost = p->has_events_lost ? p->events_lost : 0;
    if (p->n_events > 0) {
        size_t bad = 0;

        s->events = calloc(p->n_events, sizeof(*s->events));
        if (s->events == NULL)
            goto nomem;
        for (i = 0; i < p->n_events; i++) {
            const Fgx__Dp__Event *v = p->events[i];
            struct fgx_dp_event *e = &s->events[s->nevents];
            size_t exlen = v->has_excerpt ? v->excerpt.len : 0;

            if (!event_ok(v->dir, v->ipproto, v->src.len, v->dst.len, exlen) || v->sport > 65535 ||
                v->dport > 65535 || (v->has_match_end && v->match_end > exlen)) {
                bad++;
                continue;
            }
            e->time_ns = v->time_ns;
            e->service_id = v->service_id;
            e->filter_id = v->filter_id;
            e->dir = (uint8_t)v->dir;
            e->ipproto = (uint8_t)v->ipproto;
            e->family = v->src.len == 4 ? 4 : 6;
            memcpy(e->src, v->src.data, v->src.len);
            memcpy(e->dst, v->dst.data, v->dst.len);
            e->sport = (uint16_t)v->sport;
            e->dport = (uint16_t)v->dport;
            e->excerpt_len = (uint8_t)exlen;
            e->match_end = v->has_match_end ? (uint8_t)v->match_end : (uint8_t)exlen;
            if (exlen > 0)
                memcpy(e->excerpt, v->excerpt.data, exlen);
            e->log = v->has_log && v->log;
            e->h2_stream = v->has_h2_stream ? v->h2_stream : 0;
            e->edge = (uint8_t)(v->has_edge && v->edge <= FGX_EDGE_MAX ? v->edge : 0);
            e->stream_end = v->has_stream_end ? v->stream_end : 0;
            if (v->has_script_verdict && (v->script_verdict == FGX_DP_SCRIPT_REJECT ||
                                          v->script_verdict == FGX_DP_SCRIPT_DROP)) {
                e->script_verdict = (uint8_t)v->script_verdict;
                (void)snprintf(e->script_fn, sizeof(e->script_fn), "%s",
                               v->script_function ? v->script_function : "");
            }
            if (v->has_capture && v->capture.len > 0) {
                e->capture = malloc(v->capture.len);
                if (e->capture == NULL)
                    goto nomem;
                memcpy(e->capture, v->capture.data, v->capture.len);
                e->capture_len = v->capture.len;
            }
            s->nevents++;
        }
        if (bad > 0) {
            fgx_warn("data-path decode: %zu invalid event(s) dropped", bad);
            s->events_lost += bad;
        }
    }
    s->script_logs_lost = p->has_script_logs_lost ? p->script_logs_lost : 0;
    s->worker_id = p->has_worker_id ? p->worker_id : 0;
    if (p->n_script_logs > 0) {
        s->script_logs = calloc(p->n_script_logs, sizeof(*s->script_logs));
        if (s->script_logs == NULL)
            goto nomem;
        for (i = 0; i < p->n_script_logs; i++) {
            const Fgx__Dp__ScriptLog *v = p->script_logs[i];
            struct fgx_dp_script_log *e = &s->script_logs[s->nscript_logs++];

            e->service_id = v->service_id;
            e->kind = strdup(v->kind ? v->kind : "");
            e->function = strdup(v->function ? v->function : "");
            e->text = strdup(v->text ? v->text : "");
            if (!e->kind || !e->function || !e->text)
                goto nomem;
            /* the call's connection: both addresses of one family, or none */
            if (v->has_client && v->has_server && v->client.len == v->server.len &&
                (v->client.len == 4 || v->client.len == 16)) {
                e->family = v->client.len == 4 ? 4 : 6;
                memcpy(e->caddr, v->client.data, v->client.len);
                memcpy(e->saddr, v->server.data, v->server.len);
                e->cport = (uint16_t)(v->has_cport ? v->cport : 0);
                e->sport = (uint16_t)(v->has_sport ? v->sport : 0);
            }
        }
    }
    return 0;
nomem:
    fgx_err("data-path decode: out of memory for statistics");
    return -ENOMEM;
}

int fgx_dp_decode(const void *buf, size_t len, struct fgx_dp_msg *m)
{
    Fgx__Dp__Msg *msg = NULL;
    int ret;

    memset(m, 0, sizeof(*m));
    if (buf == NULL && len > 0) {
        ret = -EINVAL;
        goto out;
    }
    msg = fgx__dp__msg__unpack(NULL, len, buf);
    if (msg == NULL) {
        fgx_warn("data-path decode: malformed message (%zu bytes)", len);
        ret = -EINVAL;
        goto out;
    }
    switch (msg->msg_case) {
    case FGX__DP__MSG__MSG_RULESET:
        m->type = FGX_DP_RULESET;
        ret = ruleset_from_pb(msg->ruleset, &m->u.ruleset);
        break;
    case FGX__DP__MSG__MSG_ACK:
        m->type = FGX_DP_ACK;
        m->u.ack_generation = msg->ack->generation;
        ret = 0;
        break;
    case FGX__DP__MSG__MSG_STATS_REQUEST:
        m->type = FGX_DP_STATS_REQUEST;
        ret = 0;
        break;
    case FGX__DP__MSG__MSG_STATS:
        m->type = FGX_DP_STATS;
        ret = stats_from_pb(msg->stats, &m->u.stats);
        break;
    case FGX__DP__MSG__MSG_FLOWS_REQUEST:
        m->type = FGX_DP_FLOWS_REQUEST;
        ret = 0;
        break;
    case FGX__DP__MSG__MSG_HEARTBEAT_REQUEST:
        m->type = FGX_DP_HEARTBEAT_REQUEST;
        ret = 0;
        break;
    case FGX__DP__MSG__MSG_HEARTBEAT:
        m->type = FGX_DP_HEARTBEAT;
        ret = msg->heartbeat->n_stale_ms > FGX_DP_HB_THREADS_MAX ? -EINVAL : 0;
        if (ret < 0)
            break;
        m->u.heartbeat.pid = msg->heartbeat->pid;
        m->u.heartbeat.worker_id = msg->heartbeat->worker_id;
        m->u.heartbeat.generation = msg->heartbeat->generation;
        m->u.heartbeat.nthreads = (uint32_t)msg->heartbeat->n_stale_ms;
        for (size_t k = 0; k < msg->heartbeat->n_stale_ms; k++)
            m->u.heartbeat.stale_ms[k] = msg->heartbeat->stale_ms[k];
        break;
    case FGX__DP__MSG__MSG_CAPTURE_REQUEST:
        m->type = FGX_DP_CAPTURE_REQUEST;
        m->u.capture_service = msg->capture_request->service_id;
        ret = 0;
        break;
    case FGX__DP__MSG__MSG_CAPTURES:
        m->type = FGX_DP_CAPTURES;
        ret = 0;
        if (msg->captures->n_captures > 0) {
            m->u.captures.caps = calloc(msg->captures->n_captures, sizeof(struct fgx_blob));
            if (m->u.captures.caps == NULL)
                ret = -ENOMEM;
        }
        for (size_t k = 0; ret == 0 && k < msg->captures->n_captures; k++) {
            const ProtobufCBinaryData *b = &msg->captures->captures[k];
            struct fgx_blob *o = &m->u.captures.caps[m->u.captures.n];

            o->data = malloc(b->len > 0 ? b->len : 1);
            if (o->data == NULL) {
                ret = -ENOMEM;
                break;
            }
            if (b->len > 0) /* an empty one may carry no data pointer */
                memcpy(o->data, b->data, b->len);
            o->len = b->len;
            m->u.captures.n++;
        }
        break;
    case FGX__DP__MSG__MSG_FLOWS:
        m->type = FGX_DP_FLOWS;
        m->u.flows.len = msg->flows->data.len;
        m->u.flows.data = malloc(m->u.flows.len > 0 ? m->u.flows.len : 1);
        if (m->u.flows.data == NULL) {
            ret = -ENOMEM;
            break;
        }
        if (m->u.flows.len > 0)
            memcpy(m->u.flows.data, msg->flows->data.data, m->u.flows.len);
        ret = 0;
        break;
    case FGX__DP__MSG__MSG_ERROR:
        m->type = FGX_DP_ERROR;
        m->u.error = strdup(msg->error != NULL ? msg->error : "");
        if (m->u.error == NULL) {
            fgx_err("data-path decode: out of memory for an error message");
            ret = -ENOMEM;
        } else {
            ret = 0;
        }
        break;
    default:
        fgx_warn("data-path decode: message of no known type (%zu bytes)", len);
        ret = -EINVAL;
        break;
    }
out:
    if (ret < 0)
        fgx_dp_msg_release(m);
    if (msg != NULL)
        fgx__dp__msg__free_unpacked(msg, NULL);
    return ret;
}

void fgx_dp_msg_release(struct fgx_dp_msg *m)
{
    size_t i;

    if (m == NULL)
        return;
    switch (m->type) {
    case FGX_DP_RULESET:
        for (i = 0; i < m->u.ruleset.nservices; i++) {
            blob_free(&m->u.ruleset.services[i].db[0],
                      m->u.ruleset.services[i].db_shared[0]);
            blob_free(&m->u.ruleset.services[i].db[1],
                      m->u.ruleset.services[i].db_shared[1]);
            free(m->u.ruleset.services[i].ids[0]);
            free(m->u.ruleset.services[i].ids[1]);
            free(m->u.ruleset.services[i].addrs);
            blob_free(&m->u.ruleset.services[i].tls_cert, false);
            blob_free(&m->u.ruleset.services[i].tls_key, false);
            free(m->u.ruleset.services[i].script.data);
        }
        free(m->u.ruleset.services);
        break;
    case FGX_DP_STATS:
        free(m->u.stats.filters);
        free(m->u.stats.services);
        for (i = 0; i < m->u.stats.nevents; i++)
            free(m->u.stats.events[i].capture);
        free(m->u.stats.events);
        for (i = 0; i < m->u.stats.nscript_logs; i++) {
            free(m->u.stats.script_logs[i].kind);
            free(m->u.stats.script_logs[i].function);
            free(m->u.stats.script_logs[i].text);
        }
        free(m->u.stats.script_logs);
        break;
    case FGX_DP_CAPTURES:
        for (i = 0; i < m->u.captures.n; i++)
            free(m->u.captures.caps[i].data);
        free(m->u.captures.caps);
        break;
    case FGX_DP_ERROR:
        free(m->u.error);
        break;
    case FGX_DP_FLOWS:
        free(m->u.flows.data);
        break;
    default:
        break;
    }
    memset(m, 0, sizeof(*m));
}
