/* Unit tests for nfqworker's match stage across ruleset generations (nfq_match.c, nfq_stats.c,
 * libcommon/wcfg.c): one packet thread without its netlink socket is fed hand-built IPv4
 * packets; the verdicts it batches are read back from its transmit buffer. These are the hot-swap semantics
 * of issue 3 for connections that stay open across a change, plus the events and counters, and
 * the normalise stage (nfq_normalize.c) with the keep pool of issue 11. */
#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

#include <libmnl/libmnl.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nfnetlink_queue.h>

#include "fgx/ruleset.h"
#include "nfqworker/nfq.h"

#define QB 60000u /* queue numbers no real worker of this host uses */
#define SVC_TCP 1u
#define SVC_UDP 2u
#define SVC_OTHER 3u
#define F_EVIL 5u
#define F_ZZZ 6u
#define F_OTHER 7u

static struct nfq_worker w;
static struct nfq_thread t;
static uint32_t next_id;

static const uint8_t cli_ip[4] = {10, 77, 0, 2}, srv_ip[4] = {10, 77, 0, 1};

static void setup(void)
{
    memset(&w, 0, sizeof(w));
    memset(&t, 0, sizeof(t));
    w.nthreads = 1;
    w.queue_fd = -1;
    w.queue_base = QB;
    w.threads = &t;
    t.w = &w;
    t.queue[0] = QB;
    t.queue[1] = QB + 1;
    t.raw4 = t.raw6 = t.efd = -1;
    t.txbuf = malloc(NFQ_TXBUF);
    cr_assert_not_null(t.txbuf);
    cr_assert_eq(fgx_reasm_ctx_new(1 << 16, 1 << 14, nfq_match_held_verdict, &t, &t.reasm), 0);
    cr_assert_eq(fgx_flow_table_new(64, nfq_match_flow_release, &t, &t.flows), 0);
    next_id = 1;
}

static void teardown(void)
{
    fgx_flow_table_free(t.flows);
    fgx_reasm_ctx_free(t.reasm);
    fgx_wcfg_unref(t.cfg);
    fgx_wcfg_unref(w.current);
    free(t.txbuf);
}

TestSuite(nfq_swap, .init = setup, .fini = teardown);

/* ---- rulesets ---- */

struct svc_def {
    uint32_t id;
    uint8_t ipproto;
    uint16_t port;
    size_t n;
    struct fgx_pattern pats[3];
    uint8_t midstream; /* FGX_MIDSTREAM_RESET (0) or _SCAN */
};

static int id_cmp(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

    return x < y ? -1 : x > y;
}

/* Compile and publish a generation the way controld and the control thread do (databases and
 * the filter ids of each, ascending), then let the packet thread switch between packets. */
static void publish(uint64_t gen, const struct svc_def *defs, size_t ndefs)
{
    uint32_t ids[4][2][3];
    struct fgx_dp_service svcs[4];
    struct fgx_dp_ruleset rs = {.generation = gen, .nservices = ndefs, .services = svcs};
    struct fgx_wcfg *c = NULL, *old;
    char err[256];
    size_t i;
    int d;

    cr_assert_leq(ndefs, 4);
    memset(svcs, 0, sizeof(svcs));
    for (i = 0; i < ndefs; i++) {
        svcs[i].id = defs[i].id;
        svcs[i].ipproto = defs[i].ipproto;
        svcs[i].port = defs[i].port;
        svcs[i].midstream = defs[i].midstream;
        for (d = 0; d < 2; d++) {
            enum fgx_dir dir = d == 0 ? FGX_DIR_C2S : FGX_DIR_S2C;
            size_t k;

            cr_assert_eq(fgx_ruleset_compile(defs[i].pats, defs[i].n, dir, defs[i].ipproto,
                                             &svcs[i].db[d], err, sizeof(err)),
                         0, "%s", err);
            for (k = 0; k < defs[i].n; k++)
                if (defs[i].pats[k].dir & dir)
                    ids[i][d][svcs[i].nids[d]++] = defs[i].pats[k].filter_id;
            qsort(ids[i][d], svcs[i].nids[d], sizeof(uint32_t), id_cmp);
            svcs[i].ids[d] = svcs[i].nids[d] > 0 ? ids[i][d] : NULL;
        }
    }
    cr_assert_eq(fgx_wcfg_build(&rs, w.current, &c), 0);
    for (i = 0; i < ndefs; i++)
        for (d = 0; d < 2; d++)
            fgx_blob_release(&svcs[i].db[d]);
    old = w.current;
    __atomic_store_n(&w.current, c, __ATOMIC_RELEASE);
    nfq_match_switch(&t);
    cr_assert_eq(t.applied, c);
    fgx_wcfg_unref(old);
}

static const struct fgx_pattern P_EVIL = {F_EVIL, "evil[0-9]+", FGX_DIR_C2S, false};
static const struct fgx_pattern P_ZZZ = {F_ZZZ, "zzz", FGX_DIR_BOTH, false};
static const struct fgx_pattern P_OTHER = {F_OTHER, "other", FGX_DIR_C2S, false};

static void publish_tcp(uint64_t gen, size_t n, const struct fgx_pattern *p)
{
    struct svc_def d = {.id = SVC_TCP, .ipproto = IPPROTO_TCP, .port = 80, .n = n};

    if (n > 0)
        memcpy(d.pats, p, n * sizeof(*p));
    publish(gen, &d, 1);
}

/* ---- packets and verdicts ---- */

static size_t ip4(uint8_t *b, uint8_t proto, const uint8_t *src, const uint8_t *dst, size_t l4len)
{
    size_t tot = 20 + l4len;

    memset(b, 0, 20);
    b[0] = 0x45;
    b[2] = (uint8_t)(tot >> 8);
    b[3] = (uint8_t)tot;
    b[8] = 64;
    b[9] = proto;
    memcpy(b + 12, src, 4);
    memcpy(b + 16, dst, 4);
    return tot;
}

/* A TCP segment; c2s: from the client (port cport) to the server (port 80), acknowledging
 * ack. Returns its id. */
static uint32_t tcp_port(bool c2s, uint16_t cport, uint8_t flags, uint32_t seq, uint32_t ack,
                         const char *data)
{
    uint8_t b[1500], *h = b + 20;
    size_t n = strlen(data), len;
    uint16_t sp = c2s ? cport : 80, dp = c2s ? 80 : cport;
    uint32_t id = next_id++;

    len = ip4(b, IPPROTO_TCP, c2s ? cli_ip : srv_ip, c2s ? srv_ip : cli_ip, 20 + n);
    memset(h, 0, 20);
    h[0] = (uint8_t)(sp >> 8);
    h[1] = (uint8_t)sp;
    h[2] = (uint8_t)(dp >> 8);
    h[3] = (uint8_t)dp;
    seq = htonl(seq);
    memcpy(h + 4, &seq, 4);
    ack = htonl(ack);
    memcpy(h + 8, &ack, 4);
    h[12] = 5 << 4;
    h[13] = flags;
    memcpy(h + 20, data, n);
    nfq_match_packet(&t, t.queue[0], id, b, len, 0);
    return id;
}

static uint32_t tcp_ack(bool c2s, uint8_t flags, uint32_t seq, uint32_t ack, const char *data)
{
    return tcp_port(c2s, 40000, flags, seq, ack, data);
}

static uint32_t tcp(bool c2s, uint8_t flags, uint32_t seq, const char *data)
{
    return tcp_ack(c2s, flags, seq, 1, data);
}

static uint32_t udp(uint16_t dport, const char *data)
{
    uint8_t b[1500], *h = b + 20;
    size_t n = strlen(data), len;
    uint32_t id = next_id++;

    len = ip4(b, IPPROTO_UDP, cli_ip, srv_ip, 8 + n);
    h[0] = 0x9c;
    h[1] = 0x40; /* 40000 */
    h[2] = (uint8_t)(dport >> 8);
    h[3] = (uint8_t)dport;
    h[4] = (uint8_t)((8 + n) >> 8);
    h[5] = (uint8_t)(8 + n);
    h[6] = h[7] = 0;
    memcpy(h + 8, data, n);
    nfq_match_packet(&t, t.queue[0], id, b, len, 0);
    return id;
}

#define NO_VERDICT (-1)

/* The verdict batched for packet id (NF_ACCEPT, NF_DROP or NO_VERDICT). */
static int verdict_of(uint32_t id)
{
    const struct nlmsghdr *nlh = (const struct nlmsghdr *)t.txbuf;
    int rest = (int)t.txlen, v = NO_VERDICT;

    for (; mnl_nlmsg_ok(nlh, rest); nlh = mnl_nlmsg_next(nlh, &rest)) {
        const struct nlattr *a;

        mnl_attr_for_each(a, nlh, sizeof(struct nfgenmsg)) {
            const struct nfqnl_msg_verdict_hdr *vh = mnl_attr_get_payload(a);

            if (mnl_attr_get_type(a) == NFQA_VERDICT_HDR && ntohl(vh->id) == id) {
                cr_assert_eq(v, NO_VERDICT, "two verdicts for packet %u", id);
                v = (int)ntohl(vh->verdict);
            }
        }
    }
    return v;
}

#define C2S_SEQ 1000u
#define S2C_SEQ 5000u

/* Handshake of the one test connection; the client's data starts at C2S_SEQ + 1. */
static void connect_tcp(void)
{
    cr_assert_eq(verdict_of(tcp(true, 0x02, C2S_SEQ, "")), NF_ACCEPT);
    cr_assert_eq(verdict_of(tcp_ack(false, 0x12, S2C_SEQ, C2S_SEQ + 1, "")), NF_ACCEPT);
    cr_assert_eq(verdict_of(tcp(true, 0x10, C2S_SEQ + 1, "")), NF_ACCEPT);
}

static uint64_t blocked_of(uint32_t filter_id)
{
    uint64_t n = 0;
    size_t i;

    for (i = 0; i < NFQ_FILTER_SLOTS; i++)
        if (t.ctr.filter[i].slot.used && t.ctr.filter[i].slot.id == filter_id)
            n += t.ctr.filter[i].blocked;
    return n;
}

static size_t drain(struct fgx_dp_event *ev, size_t max, uint64_t *lost)
{
    return fgx_evring_drain(&t.events, ev, max, lost);
}

/* ---- hot swap ---- */

Test(nfq_swap, filter_added_applies_to_open_connection_from_next_packet)
{
    struct fgx_dp_event ev[4];
    uint64_t lost = 0;

    publish_tcp(1, 0, NULL);
    connect_tcp();
    cr_assert_eq(verdict_of(tcp(true, 0x18, C2S_SEQ + 1, "evil1 passed before")), NF_ACCEPT);
    publish_tcp(2, 1, &P_EVIL);
    /* bytes that passed before the filter existed are not held against the connection */
    cr_assert_eq(verdict_of(tcp(true, 0x18, C2S_SEQ + 20, "hello")), NF_ACCEPT);
    cr_assert_eq(verdict_of(tcp(true, 0x18, C2S_SEQ + 25, "GET evil2")), NF_DROP);
    /* the flow is blocked from then on, whatever it sends */
    cr_assert_eq(verdict_of(tcp(true, 0x18, C2S_SEQ + 34, "harmless")), NF_DROP);
    cr_assert_eq(verdict_of(tcp(false, 0x18, S2C_SEQ + 1, "reply")), NF_DROP);
    cr_assert_eq(drain(ev, 4, &lost), 1);
    cr_assert_eq(ev[0].filter_id, F_EVIL);
    cr_assert_eq(ev[0].service_id, SVC_TCP);
    cr_assert_eq(ev[0].dir, FGX_DIR_C2S);
    cr_assert_eq(ev[0].ipproto, IPPROTO_TCP);
    cr_assert_eq(ev[0].family, 4);
    cr_assert_arr_eq(ev[0].src, cli_ip, 4);
    cr_assert_arr_eq(ev[0].dst, srv_ip, 4);
    cr_assert_eq(ev[0].sport, 40000);
    cr_assert_eq(ev[0].dport, 80);
    cr_assert_gt(ev[0].time_ns, 1500000000ull * 1000000000ull);
    /* the excerpt ends at the match end and reaches back over the switch into earlier bytes */
    cr_assert_eq(ev[0].excerpt_len, 33);
    cr_assert_arr_eq(ev[0].excerpt, "evil1 passed beforehelloGET evil2", 33);
    cr_assert_eq(lost, 0);
}

Test(nfq_swap, partial_match_survives_a_change_of_another_filter)
{
    const struct fgx_pattern two[] = {P_EVIL, P_ZZZ}, evil_only[] = {P_EVIL},
                             evil_other[] = {P_OTHER, P_EVIL};

    publish_tcp(1, 2, two);
    connect_tcp();
    cr_assert_eq(verdict_of(tcp(true, 0x18, C2S_SEQ + 1, "ev")), NF_ACCEPT);
    publish_tcp(2, 1, evil_only); /* zzz removed */
    cr_assert_eq(verdict_of(tcp(true, 0x18, C2S_SEQ + 3, "i")), NF_ACCEPT);
    publish_tcp(3, 2, evil_other); /* another added */
    cr_assert_eq(verdict_of(tcp(true, 0x18, C2S_SEQ + 4, "l1337")), NF_DROP);
    cr_assert_eq(blocked_of(F_EVIL), 1);
    cr_assert_eq(blocked_of(F_OTHER), 0);
}

Test(nfq_swap, change_in_another_service_keeps_the_stream)
{
    struct svc_def defs[2] = {
        {.id = SVC_TCP, .ipproto = IPPROTO_TCP, .port = 80, .n = 1, .pats = {P_EVIL}},
        {.id = SVC_OTHER, .ipproto = IPPROTO_TCP, .port = 81, .n = 1, .pats = {P_ZZZ}},
    };
    struct fgx_flow_key key;
    struct fgx_flow *f;
    struct hs_stream *s;

    publish(1, defs, 2);
    connect_tcp();
    cr_assert_eq(verdict_of(tcp(true, 0x18, C2S_SEQ + 1, "ev")), NF_ACCEPT);
    memset(&key, 0, sizeof(key));
    key.family = 4;
    key.ipproto = IPPROTO_TCP;
    key.cport = 40000;
    key.sport = 80;
    memcpy(key.caddr, cli_ip, 4);
    memcpy(key.saddr, srv_ip, 4);
    f = fgx_flow_lookup(t.flows, &key, 0);
    cr_assert_not_null(f);
    s = f->dir[0].stream;
    cr_assert_not_null(s);
    defs[1].pats[0] = P_OTHER;
    publish(2, defs, 2);
    cr_assert_eq(verdict_of(tcp(true, 0x18, C2S_SEQ + 3, "il")), NF_ACCEPT);
    cr_assert_eq(f->dir[0].stream, s, "an unchanged database must keep its stream");
    cr_assert_eq(verdict_of(tcp(true, 0x18, C2S_SEQ + 5, "9")), NF_DROP);
}

Test(nfq_swap, removed_filter_stops_matching_at_once)
{
    const struct fgx_pattern zzz[] = {P_ZZZ};

    publish_tcp(1, 1, &P_EVIL);
    connect_tcp();
    cr_assert_eq(verdict_of(tcp(true, 0x18, C2S_SEQ + 1, "ev")), NF_ACCEPT);
    publish_tcp(2, 1, zzz);
    cr_assert_eq(verdict_of(tcp(true, 0x18, C2S_SEQ + 3, "il1337")), NF_ACCEPT);
    publish_tcp(3, 0, NULL);
    cr_assert_eq(verdict_of(tcp(true, 0x18, C2S_SEQ + 9, "zzz evil9")), NF_ACCEPT);
    publish_tcp(4, 1, zzz);
    cr_assert_eq(verdict_of(tcp(true, 0x18, C2S_SEQ + 18, " zzz")), NF_DROP);
}

Test(nfq_swap, held_segment_crosses_a_swap_and_is_scanned_with_the_new_filters)
{
    uint32_t held, gap;

    publish_tcp(1, 0, NULL);
    connect_tcp();
    held = tcp(true, 0x18, C2S_SEQ + 3, "il42");
    cr_assert_eq(verdict_of(held), NO_VERDICT);
    publish_tcp(2, 1, &P_EVIL);
    gap = tcp(true, 0x18, C2S_SEQ + 1, "ev");
    cr_assert_eq(verdict_of(gap), NF_ACCEPT);
    cr_assert_eq(verdict_of(held), NF_DROP);
}

Test(nfq_swap, swap_with_held_segments_loses_no_verdict)
{
    uint32_t held, gap;
    const struct fgx_pattern zzz[] = {P_ZZZ};

    publish_tcp(1, 1, &P_EVIL);
    connect_tcp();
    held = tcp(true, 0x18, C2S_SEQ + 6, "world");
    publish_tcp(2, 1, zzz);
    gap = tcp(true, 0x18, C2S_SEQ + 1, "hello");
    cr_assert_eq(verdict_of(gap), NF_ACCEPT);
    cr_assert_eq(verdict_of(held), NF_ACCEPT);
}

/* A stopped (or removed) service's flows are parked, not freed: when it comes back with
 * nothing sent in between, the stream goes on where it was ("ev" | stop | start | "il1337" is
 * a match). The idle expiry frees them, and the counters balance. */
Test(nfq_swap, stopped_service_parks_its_flows_and_counters_balance)
{
    struct svc_def other = {.id = SVC_OTHER, .ipproto = IPPROTO_TCP, .port = 81, .n = 0};
    struct nfq_svc_ctr *sc;

    publish_tcp(1, 1, &P_EVIL);
    connect_tcp();
    cr_assert_eq(verdict_of(tcp(true, 0x18, C2S_SEQ + 1, "ev")), NF_ACCEPT);
    sc = nfq_stats_svc(&t.ctr, SVC_TCP);
    cr_assert_eq(sc->flows_active, 1);
    cr_assert_eq(sc->flows_new, 1, "one flow seen, whatever its packets");
    /* the bytes by direction (IPv4 + TCP headers, 40 bytes, and the payload): SYN, ACK and
     * "ev" from the client, the SYN-ACK from the server */
    cr_assert_eq(sc->bytes[0], 40 + 40 + 42, "client->server bytes: %llu",
                 (unsigned long long)sc->bytes[0]);
    cr_assert_eq(sc->bytes[1], 40, "server->client bytes: %llu", (unsigned long long)sc->bytes[1]);
    cr_assert_eq(t.ctr.flows, 1);
    publish(2, &other, 1);
    cr_assert_eq(fgx_flow_count(t.flows), 1, "parked");
    /* its packets are no longer any service's: counted, passed (nftables stopped queueing them) */
    cr_assert_eq(verdict_of(tcp(true, 0x18, C2S_SEQ + 50, "x")), NF_ACCEPT);
    cr_assert_eq(t.ctr.unclassified, 1);
    publish_tcp(3, 1, &P_EVIL);
    cr_assert_eq(verdict_of(tcp(true, 0x18, C2S_SEQ + 3, "il1337")), NF_DROP);
    cr_assert_eq(blocked_of(F_EVIL), 1);
    cr_assert_eq(t.ctr.midstream_resets, 0);
    cr_assert_eq(fgx_flow_expire(t.flows, 1ull << 40, NFQ_FLOW_IDLE_MS), 1);
    cr_assert_eq(fgx_flow_count(t.flows), 0);
    cr_assert_eq(sc->flows_active, 0);
    cr_assert_eq(t.ctr.flows, 0);
}

/* ---- connections whose earlier bytes were not scanned (midstream) ---- */

static const struct nfq_reset *reset_to(const uint8_t *daddr, uint16_t dport)
{
    for (unsigned i = 0; i < t.nresets; i++)
        if (memcmp(t.resets[i].daddr, daddr, 4) == 0 && t.resets[i].dport == dport)
            return &t.resets[i];
    return NULL;
}

/* Data on a flow no SYN-ACK anchored (open before the worker or the service): reset, both ends,
 * at the places each expects, and dropped from then on; counted as such, not as a block. */
Test(nfq_swap, unanchored_data_is_reset_under_policy_reset)
{
    const struct nfq_reset *r;

    publish_tcp(1, 1, &P_EVIL);
    cr_assert_eq(verdict_of(tcp_ack(true, 0x18, 7000, 9000, "il1337")), NF_DROP);
    cr_assert_eq(t.ctr.midstream_resets, 1);
    cr_assert_eq(blocked_of(F_EVIL), 0);
    cr_assert_eq(t.nresets, 2);
    r = reset_to(srv_ip, 80);
    cr_assert_not_null(r);
    cr_assert_eq(r->seq, 7000, "the server expects the dropped segment's place");
    r = reset_to(cli_ip, 40000);
    cr_assert_not_null(r);
    cr_assert_eq(r->seq, 9000, "the client expects what it acknowledged");
    cr_assert_eq(verdict_of(tcp_ack(true, 0x18, 7006, 9000, "hello")), NF_DROP);
    cr_assert_eq(verdict_of(tcp_ack(false, 0x18, 9000, 7006, "reply")), NF_DROP);
    cr_assert_eq(t.ctr.midstream_resets, 1, "one reset per connection");
}

Test(nfq_swap, unanchored_data_is_scanned_from_there_under_policy_scan)
{
    struct svc_def d = {.id = SVC_TCP,
                        .ipproto = IPPROTO_TCP,
                        .port = 80,
                        .n = 1,
                        .pats = {P_EVIL},
                        .midstream = FGX_MIDSTREAM_SCAN};

    publish(1, &d, 1);
    cr_assert_eq(verdict_of(tcp_ack(true, 0x18, 7000, 9000, "il1337")), NF_ACCEPT);
    cr_assert_eq(verdict_of(tcp_ack(true, 0x18, 7006, 9000, " evil2")), NF_DROP);
    cr_assert_eq(t.ctr.midstream_resets, 0);
    cr_assert_eq(blocked_of(F_EVIL), 1);
}

/* Stopped, then started: a segment beyond where the stream stood means bytes passed unseen
 * meanwhile: the policy. One that starts at or before it goes on. */
Test(nfq_swap, bytes_sent_while_stopped_reset_at_the_return)
{
    struct svc_def other = {.id = SVC_OTHER, .ipproto = IPPROTO_TCP, .port = 81, .n = 0};

    publish_tcp(1, 1, &P_EVIL);
    connect_tcp();
    cr_assert_eq(verdict_of(tcp(true, 0x18, C2S_SEQ + 1, "ev")), NF_ACCEPT);
    cr_assert_eq(verdict_of(tcp(false, 0x18, S2C_SEQ + 1, "hi")), NF_ACCEPT);
    publish(2, &other, 1);
    publish_tcp(3, 1, &P_EVIL);
    /* the server's side goes on in order; a retransmission proves nothing either way */
    cr_assert_eq(verdict_of(tcp(false, 0x18, S2C_SEQ + 3, "there")), NF_ACCEPT);
    cr_assert_eq(verdict_of(tcp(true, 0x18, C2S_SEQ + 1, "ev")), NF_ACCEPT);
    /* the client's "xx" passed while stopped */
    cr_assert_eq(verdict_of(tcp(true, 0x18, C2S_SEQ + 5, "il1337")), NF_DROP);
    cr_assert_eq(t.ctr.midstream_resets, 1);
    cr_assert_eq(blocked_of(F_EVIL), 0);
}

/* A service removed and added again has a new id: its old flows are of unknown past. */
Test(nfq_swap, service_of_a_new_id_resets_the_old_flow)
{
    struct svc_def again = {
        .id = SVC_OTHER, .ipproto = IPPROTO_TCP, .port = 80, .n = 1, .pats = {P_EVIL}};

    publish_tcp(1, 1, &P_EVIL);
    connect_tcp();
    cr_assert_eq(verdict_of(tcp(true, 0x18, C2S_SEQ + 1, "ev")), NF_ACCEPT);
    publish(2, &again, 1);
    cr_assert_eq(verdict_of(tcp(true, 0x18, C2S_SEQ + 3, "il1337")), NF_DROP);
    cr_assert_eq(t.ctr.midstream_resets, 1);
}

/* ---- SYN floods: embryonic flows never push out flows with stream state ---- */

static void synack_port(uint16_t cport, uint32_t s2c_isn, uint32_t c2s_isn)
{
    uint8_t b[64], *h = b + 20;
    uint32_t seq = htonl(s2c_isn), ack = htonl(c2s_isn + 1);
    size_t len = ip4(b, IPPROTO_TCP, srv_ip, cli_ip, 20);

    memset(h, 0, 20);
    h[1] = 80;
    h[2] = (uint8_t)(cport >> 8);
    h[3] = (uint8_t)cport;
    memcpy(h + 4, &seq, 4);
    memcpy(h + 8, &ack, 4);
    h[12] = 5 << 4;
    h[13] = 0x12;
    nfq_match_synack(&t, b, len);
}

Test(nfq_swap, synack_flood_keeps_a_flow_with_stream_state)
{
    publish_tcp(1, 1, &P_EVIL);
    connect_tcp();
    cr_assert_eq(verdict_of(tcp(true, 0x18, C2S_SEQ + 1, "ev")), NF_ACCEPT);
    /* ten times the table (64), from other client ports */
    for (unsigned i = 0; i < 640; i++)
        synack_port((uint16_t)(20000 + i), 100000 + i, 200000 + i);
    cr_assert_leq(fgx_flow_count(t.flows), 1 + 64 / 4, "embryonic flows are capped");
    cr_assert_eq(verdict_of(tcp(true, 0x18, C2S_SEQ + 3, "il1337")), NF_DROP);
    cr_assert_eq(blocked_of(F_EVIL), 1, "matched across the flood: the state stayed");
    cr_assert_eq(t.ctr.midstream_resets, 0);
}

/* An honest connection whose embryonic flow the flood pushed out starts from its anchor: its
 * first data is neither reset nor taken for a stream of unknown past. */
Test(nfq_swap, pushed_out_embryonic_flow_starts_from_its_anchor)
{
    uint32_t held;

    publish_tcp(1, 1, &P_EVIL);
    synack_port(30000, S2C_SEQ, C2S_SEQ);
    for (unsigned i = 0; i < 20; i++)
        synack_port((uint16_t)(20000 + i), 100000 + i, 200000 + i);
    /* second segment first: held, as on the anchored flow */
    held = tcp_port(true, 30000, 0x18, C2S_SEQ + 3, S2C_SEQ + 1, "il1337");
    cr_assert_eq(verdict_of(held), NO_VERDICT);
    cr_assert_eq(verdict_of(tcp_port(true, 30000, 0x18, C2S_SEQ + 1, S2C_SEQ + 1, "ev")),
                 NF_ACCEPT);
    cr_assert_eq(verdict_of(held), NF_DROP);
    cr_assert_eq(blocked_of(F_EVIL), 1);
    cr_assert_eq(t.ctr.midstream_resets, 0);
    /* and another one's server speaks first */
    cr_assert_eq(verdict_of(tcp_port(false, 20001, 0x18, 100001 + 1, 200001 + 1, "banner")),
                 NF_ACCEPT);
    cr_assert_eq(t.ctr.midstream_resets, 0);
}

Test(nfq_swap, blocked_flow_gives_back_streams_and_databases)
{
    struct fgx_flow_key key;
    struct fgx_flow *f;
    struct fgx_wdb *db;

    publish_tcp(1, 1, &P_EVIL);
    db = w.current->svc[0].db[0];
    cr_assert_not_null(db);
    connect_tcp();
    cr_assert_eq(__atomic_load_n(&db->refs, __ATOMIC_RELAXED), 2); /* config + flow */
    cr_assert_eq(verdict_of(tcp(true, 0x18, C2S_SEQ + 1, "evil1")), NF_DROP);
    memset(&key, 0, sizeof(key));
    key.family = 4;
    key.ipproto = IPPROTO_TCP;
    key.cport = 40000;
    key.sport = 80;
    memcpy(key.caddr, cli_ip, 4);
    memcpy(key.saddr, srv_ip, 4);
    f = fgx_flow_lookup(t.flows, &key, 0);
    cr_assert_not_null(f);
    cr_assert(f->blocked);
    cr_assert_null(f->dir[0].stream);
    cr_assert_null(f->dir[1].stream);
    cr_assert_null(f->dbref[0]);
    cr_assert_eq(__atomic_load_n(&db->refs, __ATOMIC_RELAXED), 1);
    /* resets for both ends are queued */
    cr_assert_eq(t.nresets, 2);
    /* a swap leaves it blocked */
    publish_tcp(2, 0, NULL);
    cr_assert_eq(verdict_of(tcp(true, 0x18, C2S_SEQ + 6, "more")), NF_DROP);
}

/* ---- long partial matches: the old stream kept across changes ---- */

#define F_LONG 8u
static const struct fgx_pattern P_LONG = {F_LONG, "BEGIN[^\n]{0,4000}END", FGX_DIR_C2S, false};

static struct fgx_flow *the_flow(void)
{
    struct fgx_flow_key key;
    struct fgx_flow *f;

    memset(&key, 0, sizeof(key));
    key.family = 4;
    key.ipproto = IPPROTO_TCP;
    key.cport = 40000;
    key.sport = 80;
    memcpy(key.caddr, cli_ip, 4);
    memcpy(key.saddr, srv_ip, 4);
    f = fgx_flow_lookup(t.flows, &key, 0);
    cr_assert_not_null(f);
    return f;
}

/* "BEGIN" and 1000 bytes of filler, well beyond the ring that primes a new stream. Returns the
 * next sequence number. */
static uint32_t begin_long(void)
{
    char filler[1001];

    memset(filler, 'a', 1000);
    filler[1000] = '\0';
    cr_assert_eq(verdict_of(tcp(true, 0x18, C2S_SEQ + 1, "BEGIN")), NF_ACCEPT);
    cr_assert_eq(verdict_of(tcp(true, 0x18, C2S_SEQ + 6, filler)), NF_ACCEPT);
    return C2S_SEQ + 1006;
}

Test(nfq_swap, long_partial_match_completes_after_a_change_of_another_filter)
{
    const struct fgx_pattern g1[] = {P_LONG, P_ZZZ}, g2[] = {P_LONG, P_OTHER};
    struct fgx_dp_event ev[2];
    struct fgx_flow *f;
    struct fgx_wdb *db1;
    uint64_t lost = 0;
    uint32_t seq;

    publish_tcp(1, 2, g1);
    db1 = w.current->svc[0].db[0];
    connect_tcp();
    seq = begin_long();
    publish_tcp(2, 2, g2);
    cr_assert_eq(__atomic_load_n(&db1->refs, __ATOMIC_RELAXED), 1, "only the flow's");
    cr_assert_eq(verdict_of(tcp(true, 0x18, seq, " ")), NF_ACCEPT);
    f = the_flow();
    cr_assert_not_null(f->dir[0].old_stream, "the flow keeps its stream on generation 1");
    cr_assert_eq(f->dir[0].old_ref, db1);
    cr_assert_eq(f->dbref[0], w.current->svc[0].db[0]);
    cr_assert_eq(verdict_of(tcp(true, 0x18, seq + 1, "END")), NF_DROP);
    cr_assert_eq(blocked_of(F_LONG), 1);
    cr_assert_eq(drain(ev, 2, &lost), 1);
    cr_assert_eq(ev[0].filter_id, F_LONG);
    cr_assert_arr_eq(ev[0].excerpt + ev[0].excerpt_len - 5, "a END", 5);
    /* the block gives the old stream and its database back at once */
    cr_assert_null(f->dir[0].old_stream);
    cr_assert_null(f->dir[0].old_ref);
}

Test(nfq_swap, long_partial_match_survives_two_changes_in_a_row)
{
    const struct fgx_pattern g1[] = {P_LONG, P_ZZZ}, g2[] = {P_LONG, P_OTHER}, g3[] = {P_LONG};
    struct fgx_wdb *db1;
    uint32_t seq;

    publish_tcp(1, 2, g1);
    db1 = w.current->svc[0].db[0];
    connect_tcp();
    seq = begin_long();
    publish_tcp(2, 2, g2);
    cr_assert_eq(verdict_of(tcp(true, 0x18, seq, "0123456789")), NF_ACCEPT);
    publish_tcp(3, 1, g3);
    cr_assert_eq(verdict_of(tcp(true, 0x18, seq + 10, "0123456789")), NF_ACCEPT);
    cr_assert_eq(the_flow()->dir[0].old_ref, db1, "the oldest stream is the one kept");
    cr_assert_eq(verdict_of(tcp(true, 0x18, seq + 20, "END")), NF_DROP);
    cr_assert_eq(blocked_of(F_LONG), 1);
}

Test(nfq_swap, removed_filter_pending_in_the_old_stream_does_not_fire)
{
    const struct fgx_pattern g1[] = {P_LONG, P_ZZZ}, g2[] = {P_ZZZ};
    uint32_t seq;

    publish_tcp(1, 2, g1);
    connect_tcp();
    seq = begin_long();
    publish_tcp(2, 1, g2); /* the long filter goes; zzz survives, so the old stream stays */
    cr_assert_eq(verdict_of(tcp(true, 0x18, seq, "END")), NF_ACCEPT);
    cr_assert_not_null(the_flow()->dir[0].old_stream);
    cr_assert_eq(blocked_of(F_LONG), 0);
    cr_assert_eq(verdict_of(tcp(true, 0x18, seq + 3, " zzz")), NF_DROP);
    cr_assert_eq(blocked_of(F_ZZZ), 1);
}

Test(nfq_swap, old_stream_sharing_no_filter_is_closed)
{
    const struct fgx_pattern g1[] = {P_LONG}, g2[] = {P_OTHER};
    struct fgx_flow *f;
    struct fgx_wdb *db2;
    uint32_t seq;

    publish_tcp(1, 1, g1);
    connect_tcp();
    seq = begin_long();
    publish_tcp(2, 1, g2);
    db2 = w.current->svc[0].db[0];
    cr_assert_eq(verdict_of(tcp(true, 0x18, seq, "END")), NF_ACCEPT);
    f = the_flow();
    cr_assert_null(f->dir[0].old_stream);
    cr_assert_null(f->dir[0].old_ref);
    cr_assert_eq(__atomic_load_n(&db2->refs, __ATOMIC_RELAXED), 2); /* config + flow */
    cr_assert_eq(verdict_of(tcp(true, 0x18, seq + 3, "other")), NF_DROP);
}

/* ---- UDP, events and counters ---- */

Test(nfq_swap, udp_block_event_and_service_counters)
{
    struct svc_def d = {.id = SVC_UDP, .ipproto = IPPROTO_UDP, .port = 53, .n = 1,
                        .pats = {P_EVIL}};
    struct fgx_dp_stats st;
    struct fgx_dp_msg m;
    uint32_t a, b;
    size_t i;

    publish(7, &d, 1);
    a = udp(53, "a query");
    b = udp(53, "xx evil42 yy");
    cr_assert_eq(verdict_of(a), NF_ACCEPT);
    cr_assert_eq(verdict_of(b), NF_DROP);
    cr_assert_eq(nfq_stats_collect(&w, &st), 0);
    cr_assert_eq(st.generation, 7);
    cr_assert_eq(st.nservices, 1);
    cr_assert_eq(st.services[0].service_id, SVC_UDP);
    cr_assert_eq(st.services[0].packets, 2);
    cr_assert_eq(st.services[0].bytes, 28 + 7 + 28 + 12);
    cr_assert_eq(st.services[0].accepted, 1);
    cr_assert_eq(st.services[0].dropped, 1);
    cr_assert_eq(st.services[0].flows_active, 0);
    cr_assert_eq(st.nfilters, 1);
    cr_assert_eq(st.filters[0].filter_id, F_EVIL);
    cr_assert_eq(st.filters[0].blocked, 1);
    cr_assert_eq(st.queue_drops, 0);
    cr_assert_gt(st.rss_bytes, 0);
    cr_assert_eq(st.nevents, 1);
    cr_assert_eq(st.events[0].ipproto, IPPROTO_UDP);
    cr_assert_eq(st.events[0].service_id, SVC_UDP);
    cr_assert_eq(st.events[0].dport, 53);
    cr_assert_eq(st.events[0].excerpt_len, 12);
    cr_assert_eq(st.events[0].match_end, 8);
    cr_assert_arr_eq(st.events[0].excerpt, "xx evil42 yy", 12);
    cr_assert_eq(st.events_lost, 0);
    m.type = FGX_DP_STATS;
    m.u.stats = st;
    fgx_dp_msg_release(&m);
    /* events go once: the next report has none, counters stay cumulative */
    cr_assert_eq(nfq_stats_collect(&w, &st), 0);
    cr_assert_eq(st.nevents, 0);
    cr_assert_null(st.events);
    for (i = 0; i < st.nfilters; i++)
        cr_assert_eq(st.filters[i].blocked, 1);
    m.type = FGX_DP_STATS; /* the release above emptied m */
    m.u.stats = st;
    fgx_dp_msg_release(&m);
}

Test(nfq_swap, tcp_counters_and_flows)
{
    struct fgx_dp_stats st;
    struct fgx_dp_msg m;

    publish_tcp(1, 1, &P_EVIL);
    connect_tcp();
    cr_assert_eq(verdict_of(tcp(true, 0x18, C2S_SEQ + 1, "hello")), NF_ACCEPT);
    cr_assert_eq(nfq_stats_collect(&w, &st), 0);
    cr_assert_eq(st.flows, 1);
    cr_assert_eq(st.nservices, 1);
    cr_assert_eq(st.services[0].packets, 4);
    cr_assert_eq(st.services[0].bytes, 40 * 4 + 5);
    cr_assert_eq(st.services[0].accepted, 4);
    cr_assert_eq(st.services[0].flows_active, 1);
    m.type = FGX_DP_STATS;
    m.u.stats = st;
    fgx_dp_msg_release(&m);
}

/* ---- handshake anchors: the server's SYN-ACK, copied through NFLOG (nfq_match_synack) ---- */

/* The server's SYN-ACK (ISN S2C_SEQ, acknowledging the client's ISN C2S_SEQ) as the log stage
 * hands it over: no packet id, no verdict. */
static void synack_logged(uint32_t s2c_isn, uint32_t c2s_isn)
{
    uint8_t b[64], *h = b + 20;
    uint32_t seq = htonl(s2c_isn), ack = htonl(c2s_isn + 1);
    size_t len = ip4(b, IPPROTO_TCP, srv_ip, cli_ip, 20);

    memset(h, 0, 20);
    h[0] = 0;
    h[1] = 80;
    h[2] = (uint8_t)(40000 >> 8);
    h[3] = (uint8_t)40000;
    memcpy(h + 4, &seq, 4);
    memcpy(h + 8, &ack, 4);
    h[12] = 5 << 4;
    h[13] = 0x12;
    nfq_match_synack(&t, b, len);
}

/* The same SYN-ACK queued by the rules (a kernel without the log expression): it passes. */
static void synack_queued(uint32_t s2c_isn, uint32_t c2s_isn)
{
    cr_assert_eq(verdict_of(tcp_ack(false, 0x12, s2c_isn, c2s_isn + 1, "")), NF_ACCEPT);
}

static void anchors_the_client_stream(void (*synack)(uint32_t, uint32_t))
{
    uint32_t held;

    publish_tcp(1, 1, &P_EVIL);
    synack(S2C_SEQ, C2S_SEQ);
    /* The client's second segment first: held, not taken for the start of the stream. */
    held = tcp(true, 0x18, C2S_SEQ + 3, "il1337");
    cr_assert_eq(verdict_of(held), NO_VERDICT);
    /* The first passes once scanned; the held one completes the match. */
    cr_assert_eq(verdict_of(tcp(true, 0x18, C2S_SEQ + 1, "ev")), NF_ACCEPT);
    cr_assert_eq(verdict_of(held), NF_DROP);
    cr_assert_eq(blocked_of(F_EVIL), 1);
}

Test(nfq_swap, synack_anchors_the_client_stream_at_its_first_byte)
{
    anchors_the_client_stream(synack_logged);
}

/* Without the log expression the rules queue the SYN-ACK itself: it anchors as a copy does. */
Test(nfq_swap, queued_synack_anchors_and_passes)
{
    anchors_the_client_stream(synack_queued);
}

Test(nfq_swap, synack_anchors_the_server_stream_at_its_first_byte)
{
    const struct fgx_pattern p = {F_ZZZ, "zzz", FGX_DIR_S2C, false};
    uint32_t held;

    publish_tcp(1, 1, &p);
    synack_logged(S2C_SEQ, C2S_SEQ);
    held = tcp(false, 0x18, S2C_SEQ + 2, "zz");
    cr_assert_eq(verdict_of(held), NO_VERDICT);
    cr_assert_eq(verdict_of(tcp(false, 0x18, S2C_SEQ + 1, "z")), NF_ACCEPT);
    cr_assert_eq(verdict_of(held), NF_DROP);
    cr_assert_eq(blocked_of(F_ZZZ), 1);
}

Test(nfq_swap, synack_retransmitted_keeps_the_stream)
{
    publish_tcp(1, 1, &P_EVIL);
    synack_logged(S2C_SEQ, C2S_SEQ);
    cr_assert_eq(verdict_of(tcp(true, 0x18, C2S_SEQ + 1, "ev")), NF_ACCEPT);
    synack_logged(S2C_SEQ, C2S_SEQ);
    cr_assert_eq(verdict_of(tcp(true, 0x18, C2S_SEQ + 3, "il1337")), NF_DROP);
}

Test(nfq_swap, synack_of_a_new_connection_on_the_same_tuple_restarts_the_flow)
{
    char filler[301];

    publish_tcp(1, 1, &P_EVIL);
    synack_logged(S2C_SEQ, C2S_SEQ);
    memset(filler, 'a', 300);
    filler[300] = '\0';
    cr_assert_eq(verdict_of(tcp(true, 0x18, C2S_SEQ + 1, filler)), NF_ACCEPT);
    /* The same client ISN again, a new server ISN: the bytes at the old places are new. */
    synack_logged(S2C_SEQ + 777, C2S_SEQ);
    cr_assert_eq(verdict_of(tcp(true, 0x18, C2S_SEQ + 1, "evil1337")), NF_DROP);
    cr_assert_eq(blocked_of(F_EVIL), 1);
}

Test(nfq_swap, synack_after_fast_open_data_keeps_the_scanned_bytes)
{
    publish_tcp(1, 1, &P_EVIL);
    /* A SYN with data (fast open) is queued: the flow starts at ISN + 1 with it. */
    cr_assert_eq(verdict_of(tcp(true, 0x02, C2S_SEQ, "ev")), NF_ACCEPT);
    /* The server took the data: its SYN-ACK acknowledges ISN + 1 + 2, where the stream is. */
    synack_logged(S2C_SEQ, C2S_SEQ + 2);
    cr_assert_eq(verdict_of(tcp(true, 0x18, C2S_SEQ + 3, "il1337")), NF_DROP);
}

Test(nfq_swap, queued_synack_of_a_new_connection_restarts_the_flow)
{
    char filler[301];

    publish_tcp(1, 1, &P_EVIL);
    synack_queued(S2C_SEQ, C2S_SEQ);
    memset(filler, 'a', 300);
    filler[300] = '\0';
    cr_assert_eq(verdict_of(tcp(true, 0x18, C2S_SEQ + 1, filler)), NF_ACCEPT);
    /* A retransmitted SYN-ACK keeps the stream: a match across it is found. */
    cr_assert_eq(verdict_of(tcp(true, 0x18, C2S_SEQ + 301, "ev")), NF_ACCEPT);
    synack_queued(S2C_SEQ, C2S_SEQ);
    cr_assert_eq(verdict_of(tcp(true, 0x18, C2S_SEQ + 303, "il1337")), NF_DROP);
    cr_assert_eq(blocked_of(F_EVIL), 1);
    /* A new server ISN is a new connection: its bytes at the old places are scanned anew. */
    synack_queued(S2C_SEQ + 777, C2S_SEQ);
    cr_assert_eq(verdict_of(tcp(true, 0x18, C2S_SEQ + 1, "clean")), NF_ACCEPT);
    cr_assert_eq(verdict_of(tcp(true, 0x18, C2S_SEQ + 6, "evil1337")), NF_DROP);
    cr_assert_eq(blocked_of(F_EVIL), 2);
}

Test(nfq_swap, syn_on_an_open_flow_does_not_restart_it)
{
    publish_tcp(1, 1, &P_EVIL);
    connect_tcp();
    cr_assert_eq(verdict_of(tcp(true, 0x18, C2S_SEQ + 1, "ev")), NF_ACCEPT);
    /* Placed so that a restart would begin the stream right after "ev". With data it cannot
     * be placed: dropped; without data (IP options bring it here) it passes. */
    cr_assert_eq(verdict_of(tcp(true, 0x02, C2S_SEQ + 2, "x")), NF_DROP);
    cr_assert_eq(verdict_of(tcp(true, 0x02, C2S_SEQ + 2, "")), NF_ACCEPT);
    cr_assert_eq(verdict_of(tcp(true, 0x18, C2S_SEQ + 3, "il1337")), NF_DROP);
    cr_assert_eq(blocked_of(F_EVIL), 1);
}

Test(nfq_swap, lost_synacks_make_old_positions_unacceptable)
{
    char filler[301];

    publish_tcp(1, 1, &P_EVIL);
    synack_logged(S2C_SEQ, C2S_SEQ);
    memset(filler, 'a', 300);
    filler[300] = '\0';
    cr_assert_eq(verdict_of(tcp(true, 0x18, C2S_SEQ + 1, filler)), NF_ACCEPT);
    /* Beyond the ring: before the overflow it would pass as a retransmission, unscanned. */
    nfq_match_synacks_lost(&t);
    cr_assert_eq(verdict_of(tcp(true, 0x18, C2S_SEQ + 1, "evil1337")), NF_DROP);
    cr_assert_eq(blocked_of(F_EVIL), 0, "dropped for its place, not matched");
    /* The stream goes on from where it was, scan state intact. */
    cr_assert_eq(verdict_of(tcp(true, 0x18, C2S_SEQ + 301, "ev")), NF_ACCEPT);
    cr_assert_eq(verdict_of(tcp(true, 0x18, C2S_SEQ + 303, "il1337")), NF_DROP);
    cr_assert_eq(blocked_of(F_EVIL), 1);
}

Test(nfq_swap, synack_retransmitted_after_a_block_keeps_it_blocked)
{
    publish_tcp(1, 1, &P_EVIL);
    synack_logged(S2C_SEQ, C2S_SEQ);
    cr_assert_eq(verdict_of(tcp(true, 0x18, C2S_SEQ + 1, "evil1337")), NF_DROP);
    synack_logged(S2C_SEQ, C2S_SEQ);
    cr_assert_eq(verdict_of(tcp(true, 0x18, C2S_SEQ + 9, "hello")), NF_DROP);
    /* A new connection on the 4-tuple (a new server ISN) starts clean. */
    synack_logged(S2C_SEQ + 777, C2S_SEQ + 5000);
    cr_assert_eq(verdict_of(tcp(true, 0x18, C2S_SEQ + 5001, "hello")), NF_ACCEPT);
}

/* ---- a planned restart hands the flows over (nfq_handover.c) ---- */

/* The old worker writes its flows out; a fresh table (the new worker's) takes them back at its
 * first ruleset. */
static void hand_over(void)
{
    void *data = NULL;
    size_t len = 0;

    __atomic_store_n(&t.hx_req, 1, __ATOMIC_RELEASE);
    cr_assert(nfq_handover_poll(&t));
    cr_assert_eq(nfq_handover_export(&w, &data, &len), 0);
    cr_assert(w.stop, "the old worker ends after the reply");
    fgx_flow_table_free(t.flows);
    cr_assert_eq(fgx_flow_table_new(64, nfq_match_flow_release, &t, &t.flows), 0);
    free(t.hx_out);
    t.hx_out = NULL;
    t.hx_req = t.hx_done = 0;
    w.stop = 0;
    cr_assert_eq(nfq_handover_import(&w, data, len), 0);
    free(data);
}

Test(nfq_swap, handed_over_flow_keeps_its_partial_match)
{
    publish_tcp(1, 1, &P_EVIL);
    connect_tcp();
    cr_assert_eq(verdict_of(tcp(true, 0x18, C2S_SEQ + 1, "ev")), NF_ACCEPT);
    hand_over();
    cr_assert_eq(fgx_flow_count(t.flows), 0, "nothing before the first ruleset");
    publish_tcp(2, 1, &P_EVIL);
    cr_assert_eq(fgx_flow_count(t.flows), 1);
    cr_assert_eq(verdict_of(tcp(true, 0x18, C2S_SEQ + 3, "il1337")), NF_DROP);
    cr_assert_eq(blocked_of(F_EVIL), 1);
    cr_assert_eq(t.ctr.midstream_resets, 0);
}

Test(nfq_swap, handed_over_flow_with_a_gap_meets_the_policy)
{
    publish_tcp(1, 1, &P_EVIL);
    connect_tcp();
    cr_assert_eq(verdict_of(tcp(true, 0x18, C2S_SEQ + 1, "ev")), NF_ACCEPT);
    hand_over();
    publish_tcp(2, 1, &P_EVIL);
    /* "xx" passed while no worker read a fail-open queue */
    cr_assert_eq(verdict_of(tcp(true, 0x18, C2S_SEQ + 5, "il1337")), NF_DROP);
    cr_assert_eq(t.ctr.midstream_resets, 1);
}

Test(nfq_swap, handed_over_flow_of_a_changed_database_meets_the_policy)
{
    const struct fgx_pattern two[] = {P_EVIL, P_ZZZ};

    publish_tcp(1, 1, &P_EVIL);
    connect_tcp();
    cr_assert_eq(verdict_of(tcp(true, 0x18, C2S_SEQ + 1, "ev")), NF_ACCEPT);
    hand_over();
    publish_tcp(2, 2, two);
    cr_assert_eq(fgx_flow_count(t.flows), 0, "its stream cannot be rebuilt on another database");
    cr_assert_eq(verdict_of(tcp(true, 0x18, C2S_SEQ + 3, "il1337")), NF_DROP);
    cr_assert_eq(t.ctr.midstream_resets, 1);
}

/* ---- the normalise stage (nfq_normalize.c) with the worker's keep pool ---- */

static void norm_setup(void)
{
    setup();
    cr_assert_eq(fgx_reasm_ctx_keep(t.reasm, 1 << 20, 1 << 18), 0);
}

TestSuite(nfq_norm, .init = norm_setup, .fini = teardown);

Test(nfq_norm, ack_of_unsent_data_is_dropped_before_it_moves_the_stream)
{
    publish_tcp(1, 1, &P_EVIL);
    synack_logged(S2C_SEQ, C2S_SEQ);
    /* acknowledges 100 bytes the server never sent: the server discards it */
    cr_assert_eq(verdict_of(tcp_ack(true, 0x18, C2S_SEQ + 1, S2C_SEQ + 101, "xxxxxxxx")),
                 NF_DROP);
    cr_assert_eq(t.ctr.evasion, 1);
    /* nothing moved: the real bytes at the same place are scanned */
    cr_assert_eq(verdict_of(tcp_ack(true, 0x18, C2S_SEQ + 1, S2C_SEQ + 1, "evil1337")), NF_DROP);
    cr_assert_eq(blocked_of(F_EVIL), 1);
}

Test(nfq_norm, ack_of_what_the_server_sent_and_of_its_fin_passes)
{
    publish_tcp(1, 1, &P_EVIL);
    synack_logged(S2C_SEQ, C2S_SEQ);
    cr_assert_eq(verdict_of(tcp_ack(false, 0x18, S2C_SEQ + 1, C2S_SEQ + 1, "hello")), NF_ACCEPT);
    cr_assert_eq(verdict_of(tcp_ack(true, 0x18, C2S_SEQ + 1, S2C_SEQ + 6, "a")), NF_ACCEPT);
    /* the server's FIN (not queued) takes one more */
    cr_assert_eq(verdict_of(tcp_ack(true, 0x18, C2S_SEQ + 2, S2C_SEQ + 7, "b")), NF_ACCEPT);
    cr_assert_eq(verdict_of(tcp_ack(true, 0x18, C2S_SEQ + 3, S2C_SEQ + 8, "c")), NF_DROP);
    cr_assert_eq(t.ctr.evasion, 1);
}

Test(nfq_norm, urgent_data_that_was_not_normalised_is_dropped)
{
    publish_tcp(1, 1, &P_EVIL);
    synack_logged(S2C_SEQ, C2S_SEQ);
    cr_assert_eq(verdict_of(tcp(true, 0x18 | 0x20, C2S_SEQ + 1, "evXil1337")), NF_DROP);
    cr_assert_eq(t.ctr.evasion, 1);
    cr_assert_eq(verdict_of(tcp(true, 0x18, C2S_SEQ + 1, "evXil1337")), NF_ACCEPT);
}

Test(nfq_norm, the_servers_ack_releases_kept_bytes)
{
    publish_tcp(1, 1, &P_EVIL);
    synack_logged(S2C_SEQ, C2S_SEQ);
    cr_assert_eq(verdict_of(tcp_ack(true, 0x18, C2S_SEQ + 1, S2C_SEQ + 1, "hello")), NF_ACCEPT);
    cr_assert_eq(fgx_reasm_ctx_kept(t.reasm), 5);
    /* not acknowledged: a retransmission that differs is refused */
    cr_assert_eq(verdict_of(tcp_ack(true, 0x18, C2S_SEQ + 1, S2C_SEQ + 1, "hellx")), NF_DROP);
    cr_assert_eq(t.ctr.evasion, 1);
    /* the server's reply acknowledges them: the copy goes, and the receiver trims whatever a
     * retransmission says there */
    cr_assert_eq(verdict_of(tcp_ack(false, 0x18, S2C_SEQ + 1, C2S_SEQ + 6, "ok")), NF_ACCEPT);
    cr_assert_eq(fgx_reasm_ctx_kept(t.reasm), 0);
    cr_assert_eq(verdict_of(tcp_ack(true, 0x18, C2S_SEQ + 1, S2C_SEQ + 3, "hellx")), NF_ACCEPT);
    cr_assert_eq(t.ctr.evasion, 1);
}
