/* Unit tests for libcommon/dp.c: every data-path message survives a round trip, and whatever a
 * worker receives that is truncated, garbage or out of range is refused without a crash. */
#include <criterion/criterion.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

#include "datapath.pb-c.h"
#include "fgx/dp.h"

static const uint8_t db_a[] = {1, 2, 3, 4, 5, 0, 7};
static const uint8_t db_b[] = {0xff, 0xfe};

static struct fgx_dp_service sample_services[3];
static uint32_t ids_a[] = {1, 7, 0xffffffffu};
static uint32_t ids_b[] = {7};

static void make_ruleset(struct fgx_dp_msg *m)
{
    struct fgx_dp_service *s = sample_services;

    memset(sample_services, 0, sizeof(sample_services));
    s[0].id = 1;
    s[0].ipproto = IPPROTO_TCP;
    s[0].port = 8080;
    cr_assert_eq(fgx_cidr_parse("10.0.0.0/24", &s[0].addr), 0);
    s[0].db[0] = (struct fgx_blob){.data = (void *)db_a, .len = sizeof(db_a), .hash = 0x1234};
    s[0].db[1] = (struct fgx_blob){.data = (void *)db_b, .len = sizeof(db_b), .hash = ~0ULL};
    s[0].ids[0] = ids_a;
    s[0].nids[0] = 3;
    s[0].ids[1] = ids_b;
    s[0].nids[1] = 1;
    s[1].id = 2;
    s[1].ipproto = IPPROTO_UDP;
    s[1].port = 65535;
    s[1].fail_open = true;
    s[1].midstream = FGX_MIDSTREAM_SCAN;
    s[0].max_conns = 7; /* the service's own limits (issue 27) */
    s[0].over_limit_forward = true;
    s[0].first_byte_ms = 1500;
    cr_assert_eq(fgx_cidr_parse("fd00::1", &s[1].addr), 0);
    s[1].db[1] = (struct fgx_blob){.data = (void *)db_a, .len = sizeof(db_a), .hash = 9};
    s[2].id = 3;
    s[2].ipproto = IPPROTO_TCP;
    s[2].port = 0; /* family 0, no databases */

    memset(m, 0, sizeof(*m));
    m->type = FGX_DP_RULESET;
    m->u.ruleset.generation = 0x100000001ULL;
    m->u.ruleset.nservices = 3;
    m->u.ruleset.services = s;
}

static struct fgx_dp_filter_stat sample_filters[] = {{1, 10, 0}, {0xffffffffu, UINT64_MAX, 3}};
static struct fgx_dp_service_stat sample_svc_stats[] = {
    {7, 1, 2, 3, 4, 5, 9, 11, 1ull << 40, 13, 17, 19}};

static void make_stats(struct fgx_dp_msg *m)
{
    memset(m, 0, sizeof(*m));
    m->type = FGX_DP_STATS;
    m->u.stats = (struct fgx_dp_stats){
        .generation = 42,
        .nfilters = 2,
        .filters = sample_filters,
        .nservices = 1,
        .services = sample_svc_stats,
        .queue_drops = 11,
        .flows = 12,
        .rss_bytes = 13,
        .truncated = 14,
        .verdict_errors = 15,
        .malformed = 16,
        .evasion = 21,
        .midstream_resets = 22,
        .flows_evicted = 23,
        .script_refused = 380,
        .script_errors = 381,
        .script_timeouts = 382,
        .script_blocked = 383,
        .script_final = 384,
        .script_held = 385,
        .script_flows = 386,
        .script_reclaimed = 387,
        .conns_refused = 17,
        .unclassified = 18,
        .connect_failed = 19,
        .scan_errors = 20,
        .src_refused = 40,
        .evicted = 41,
        .silent_closed = 42,
        .midstream_reset = 43,
        .midstream_rescan = 44,
    };
}

static void encode_decode(const struct fgx_dp_msg *in, struct fgx_dp_msg *out)
{
    void *buf = NULL;
    size_t len = 0;

    cr_assert_eq(fgx_dp_encode(in, &buf, &len), 0);
    cr_assert_not_null(buf);
    cr_assert_eq(fgx_dp_decode(buf, len, out), 0);
    free(buf);
}

static void blob_eq(const struct fgx_blob *a, const struct fgx_blob *b)
{
    cr_assert_eq(a->len, b->len);
    cr_assert_eq(a->hash, b->hash);
    if (a->len == 0) {
        cr_assert_null(b->data);
        return;
    }
    cr_assert_neq(a->data, b->data, "decoded blobs are copies");
    cr_assert_eq(memcmp(a->data, b->data, a->len), 0);
}

Test(dp, ruleset_round_trip)
{
    struct fgx_dp_msg in, out;

    make_ruleset(&in);
    encode_decode(&in, &out);
    cr_assert_eq(out.type, FGX_DP_RULESET);
    cr_assert_eq(out.u.ruleset.generation, in.u.ruleset.generation);
    cr_assert_eq(out.u.ruleset.nservices, 3);
    for (size_t i = 0; i < 3; i++) {
        const struct fgx_dp_service *a = &in.u.ruleset.services[i];
        const struct fgx_dp_service *b = &out.u.ruleset.services[i];

        cr_assert_eq(a->id, b->id);
        cr_assert_eq(a->ipproto, b->ipproto);
        cr_assert_eq(a->port, b->port);
        cr_assert_eq(a->fail_open, b->fail_open);
        cr_assert_eq(a->midstream, b->midstream);
        cr_assert_eq(a->max_conns, b->max_conns, "service %zu max_conns", i);
        cr_assert_eq(a->over_limit_forward, b->over_limit_forward);
        cr_assert_eq(a->first_byte_ms, b->first_byte_ms);
        cr_assert_eq(memcmp(&a->addr, &b->addr, sizeof(a->addr)), 0, "service %zu addr", i);
        blob_eq(&a->db[0], &b->db[0]);
        blob_eq(&a->db[1], &b->db[1]);
        for (int d = 0; d < 2; d++) {
            cr_assert_eq(a->nids[d], b->nids[d], "service %zu dir %d ids", i, d);
            if (a->nids[d] == 0) {
                cr_assert_null(b->ids[d]);
                continue;
            }
            cr_assert_neq(a->ids[d], b->ids[d], "decoded ids are copies");
            cr_assert_eq(memcmp(a->ids[d], b->ids[d], a->nids[d] * sizeof(uint32_t)), 0);
        }
    }
    cr_assert_eq(out.u.ruleset.services[0].ids[0][2], 0xffffffffu);
    fgx_dp_msg_release(&out);
    cr_assert_eq(out.type, 0);
    cr_assert_null(out.u.ruleset.services);
}

Test(dp, empty_ruleset_round_trip)
{
    struct fgx_dp_msg in = {.type = FGX_DP_RULESET}, out;

    in.u.ruleset.generation = 1;
    encode_decode(&in, &out);
    cr_assert_eq(out.type, FGX_DP_RULESET);
    cr_assert_eq(out.u.ruleset.generation, 1);
    cr_assert_eq(out.u.ruleset.nservices, 0);
    cr_assert_null(out.u.ruleset.services);
    fgx_dp_msg_release(&out);
}

Test(dp, ack_round_trip)
{
    struct fgx_dp_msg in = {.type = FGX_DP_ACK, .u.ack_generation = UINT64_MAX}, out;

    encode_decode(&in, &out);
    cr_assert_eq(out.type, FGX_DP_ACK);
    cr_assert_eq(out.u.ack_generation, UINT64_MAX);
    fgx_dp_msg_release(&out);
}

/* fuzz_dp's input: a captures message whose captures are empty (protobuf gives them no data
 * pointer, and the decoder copied from it: undefined behaviour, UBSan). */
Test(dp, captures_that_are_empty_decode)
{
    static const uint8_t in[] = {0xca, 0x0c, 0x00, 0xca, 0x0c, 0x03, 0xc2, 0x0c, 0x00};
    struct fgx_dp_msg out;

    cr_assert_eq(fgx_dp_decode(in, sizeof(in), &out), 0);
    cr_assert_eq(out.type, FGX_DP_CAPTURES);
    cr_assert_eq(out.u.captures.n, 1);
    cr_assert_eq(out.u.captures.caps[0].len, 0);
    fgx_dp_msg_release(&out);
}

Test(dp, stats_request_round_trip)
{
    struct fgx_dp_msg in = {.type = FGX_DP_STATS_REQUEST}, out;

    encode_decode(&in, &out);
    cr_assert_eq(out.type, FGX_DP_STATS_REQUEST);
    fgx_dp_msg_release(&out);
}

Test(dp, stats_round_trip)
{
    struct fgx_dp_msg in, out;
    const struct fgx_dp_stats *a, *b;

    make_stats(&in);
    encode_decode(&in, &out);
    cr_assert_eq(out.type, FGX_DP_STATS);
    a = &in.u.stats;
    b = &out.u.stats;
    cr_assert_eq(b->generation, 42);
    cr_assert_eq(b->nfilters, 2);
    for (size_t i = 0; i < 2; i++) {
        cr_assert_eq(b->filters[i].filter_id, a->filters[i].filter_id);
        cr_assert_eq(b->filters[i].blocked, a->filters[i].blocked);
    }
    cr_assert_eq(b->nservices, 1);
    cr_assert_eq(b->services[0].service_id, 7);
    cr_assert_eq(b->services[0].packets, 1);
    cr_assert_eq(b->services[0].bytes, 2);
    cr_assert_eq(b->services[0].accepted, 3);
    cr_assert_eq(b->services[0].dropped, 4);
    cr_assert_eq(b->services[0].flows_active, 5);
    cr_assert_eq(b->services[0].events_lost, 9);
    cr_assert_eq(b->services[0].tls_failed, 11, "a TLS service's failed handshakes travel");
    cr_assert_eq(b->services[0].bytes_c2s, 1ull << 40, "the bytes of each way travel, 64 bits");
    cr_assert_eq(b->services[0].bytes_s2c, 13);
    cr_assert_eq(b->services[0].flows_new, 17, "the connections seen travel");
    cr_assert_eq(b->services[0].limit_hits, 19, "a service's limit hits travel (issue 27)");
    cr_assert_eq(b->queue_drops, 11);
    cr_assert_eq(b->flows, 12);
    cr_assert_eq(b->rss_bytes, 13);
    cr_assert_eq(b->truncated, 14);
    cr_assert_eq(b->verdict_errors, 15);
    cr_assert_eq(b->malformed, 16);
    cr_assert_eq(b->evasion, 21);
    cr_assert_eq(b->midstream_resets, 22);
    cr_assert_eq(b->flows_evicted, 23);
    /* the NFQUEUE worker's script counters */
    cr_assert_eq(b->script_refused, 380);
    cr_assert_eq(b->script_errors, 381);
    cr_assert_eq(b->script_timeouts, 382);
    cr_assert_eq(b->script_blocked, 383);
    cr_assert_eq(b->script_final, 384);
    cr_assert_eq(b->script_held, 385);
    cr_assert_eq(b->script_flows, 386);
    cr_assert_eq(b->script_reclaimed, 387);
    cr_assert_eq(b->conns_refused, 17);
    cr_assert_eq(b->unclassified, 18);
    cr_assert_eq(b->connect_failed, 19);
    cr_assert_eq(b->scan_errors, 20);
    cr_assert_eq(b->src_refused, 40);
    cr_assert_eq(b->evicted, 41);
    cr_assert_eq(b->silent_closed, 42);
    cr_assert_eq(b->midstream_reset, 43);
    cr_assert_eq(b->midstream_rescan, 44);
    fgx_dp_msg_release(&out);
}

Test(dp, error_round_trip)
{
    struct fgx_dp_msg in = {.type = FGX_DP_ERROR}, out;
    char text[] = "cannot load database for service 3";

    in.u.error = text;
    encode_decode(&in, &out);
    cr_assert_eq(out.type, FGX_DP_ERROR);
    cr_assert_str_eq(out.u.error, text);
    cr_assert_neq(out.u.error, text);
    fgx_dp_msg_release(&out);

    in.u.error = NULL;
    encode_decode(&in, &out);
    cr_assert_str_eq(out.u.error, "");
    fgx_dp_msg_release(&out);
}

static void check_every_prefix(const struct fgx_dp_msg *in)
{
    struct fgx_dp_msg out;
    uint8_t *buf = NULL, *copy;
    size_t len = 0;

    cr_assert_eq(fgx_dp_encode(in, (void **)&buf, &len), 0);
    for (size_t cut = 0; cut < len; cut++) {
        /* A fresh allocation of exactly cut bytes, so ASan sees any read past the end. */
        copy = malloc(cut > 0 ? cut : 1);
        cr_assert_not_null(copy);
        memcpy(copy, buf, cut);
        memset(&out, 0xa5, sizeof(out));
        cr_assert_eq(fgx_dp_decode(copy, cut, &out), -EINVAL, "type %d: accepted %zu of %zu",
                     (int)in->type, cut, len);
        cr_assert_eq(out.type, 0, "a refused message is left empty");
        free(copy);
    }
    free(buf);
}

Test(dp, truncated_refused_at_every_length)
{
    struct fgx_dp_msg m;
    char text[] = "boom";

    make_ruleset(&m);
    check_every_prefix(&m);
    make_stats(&m);
    check_every_prefix(&m);
    m = (struct fgx_dp_msg){.type = FGX_DP_ACK, .u.ack_generation = 1ULL << 40};
    check_every_prefix(&m);
    m = (struct fgx_dp_msg){.type = FGX_DP_STATS_REQUEST};
    check_every_prefix(&m);
    m = (struct fgx_dp_msg){.type = FGX_DP_ERROR, .u.error = text};
    check_every_prefix(&m);
}

Test(dp, garbage_refused)
{
    struct fgx_dp_msg out;
    uint8_t buf[257];
    uint32_t x = 2463534242u;
    int accepted = 0;

    cr_assert_eq(fgx_dp_decode(NULL, 0, &out), -EINVAL);
    cr_assert_eq(fgx_dp_decode("\x0a\xff\xff\xff\xff\x0f", 6, &out), -EINVAL);
    /* Deterministic pseudo-random buffers: nothing may crash, and what is accepted must be a
     * complete message that releases cleanly. */
    for (int round = 0; round < 2000; round++) {
        size_t len = (size_t)(round % (int)sizeof(buf));

        for (size_t i = 0; i < len; i++) {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            buf[i] = (uint8_t)x;
        }
        if (fgx_dp_decode(buf, len, &out) == 0) {
            accepted++;
            cr_assert(out.type >= FGX_DP_RULESET && out.type <= FGX_DP_ERROR);
            fgx_dp_msg_release(&out);
        } else {
            cr_assert_eq(out.type, 0);
        }
    }
    cr_assert_lt(accepted, 2000);
}

/* Pack a hand-made Service into a Ruleset message, as a broken or hostile peer might. */
static int decode_service(const Fgx__Dp__Service *svc)
{
    Fgx__Dp__Msg msg = FGX__DP__MSG__INIT;
    Fgx__Dp__Ruleset rs = FGX__DP__RULESET__INIT;
    Fgx__Dp__Service *one = (Fgx__Dp__Service *)svc;
    struct fgx_dp_msg out;
    uint8_t buf[256];
    size_t len;
    int ret;

    rs.generation = 5;
    rs.n_services = 1;
    rs.services = &one;
    msg.msg_case = FGX__DP__MSG__MSG_RULESET;
    msg.ruleset = &rs;
    len = fgx__dp__msg__get_packed_size(&msg);
    cr_assert_leq(len, sizeof(buf));
    fgx__dp__msg__pack(&msg, buf);
    ret = fgx_dp_decode(buf, len, &out);
    if (ret == 0)
        fgx_dp_msg_release(&out);
    else
        cr_assert_eq(out.type, 0);
    return ret;
}

static void base_service(Fgx__Dp__Service *s, uint8_t *addr)
{
    fgx__dp__service__init(s);
    s->id = 9;
    s->proto = IPPROTO_TCP;
    s->port = 80;
    s->family = 4;
    s->has_addr = 1;
    s->addr.data = addr;
    s->addr.len = 4;
    s->has_prefix = 1;
    s->prefix = 24;
}

Test(dp, bad_service_fields_refused)
{
    uint8_t addr[17] = {10, 0, 0, 0};
    Fgx__Dp__Service s;

    base_service(&s, addr);
    cr_assert_eq(decode_service(&s), 0, "the baseline must be valid");

    base_service(&s, addr);
    s.addr.len = 16; /* v6 length for a v4 service */
    cr_assert_eq(decode_service(&s), -EINVAL);
    base_service(&s, addr);
    s.addr.len = 3;
    cr_assert_eq(decode_service(&s), -EINVAL);
    base_service(&s, addr);
    s.has_addr = 0;
    cr_assert_eq(decode_service(&s), -EINVAL);
    base_service(&s, addr);
    s.family = 6; /* 4 bytes for a v6 service */
    cr_assert_eq(decode_service(&s), -EINVAL);
    base_service(&s, addr);
    s.family = 6;
    s.addr.len = 17;
    cr_assert_eq(decode_service(&s), -EINVAL);
    base_service(&s, addr);
    s.family = 0; /* "any" with an address */
    cr_assert_eq(decode_service(&s), -EINVAL);
    base_service(&s, addr);
    s.family = 5;
    cr_assert_eq(decode_service(&s), -EINVAL);
    base_service(&s, addr);
    s.port = 65536;
    cr_assert_eq(decode_service(&s), -EINVAL);
    base_service(&s, addr);
    s.prefix = 33;
    cr_assert_eq(decode_service(&s), -EINVAL);
    base_service(&s, addr);
    s.prefix = 300; /* would wrap to 44 in a uint8_t */
    cr_assert_eq(decode_service(&s), -EINVAL);
    base_service(&s, addr);
    s.prefix = 6; /* 10.0.0.0/6: a host bit set */
    cr_assert_eq(decode_service(&s), -EINVAL);
    base_service(&s, addr);
    s.proto = IPPROTO_ICMP;
    cr_assert_eq(decode_service(&s), -EINVAL);

    base_service(&s, addr);
    s.family = 6;
    s.addr.len = 16;
    s.prefix = 129;
    cr_assert_eq(decode_service(&s), -EINVAL);
    s.prefix = 128;
    cr_assert_eq(decode_service(&s), 0);
    s.has_prefix = 0; /* absent prefix: a single host */
    cr_assert_eq(decode_service(&s), 0);
}

Test(dp, unsorted_or_duplicate_ids_refused)
{
    uint8_t addr[17] = {10, 0, 0, 0};
    uint32_t ok[] = {1, 2, 9}, dup[] = {1, 2, 2}, down[] = {1, 9, 2};
    Fgx__Dp__Service s;

    base_service(&s, addr);
    s.n_ids_c2s = 3;
    s.ids_c2s = ok;
    s.n_ids_s2c = 1;
    s.ids_s2c = ok + 2;
    cr_assert_eq(decode_service(&s), 0, "ascending ids are valid");
    s.ids_c2s = dup;
    cr_assert_eq(decode_service(&s), -EINVAL);
    s.ids_c2s = down;
    cr_assert_eq(decode_service(&s), -EINVAL);
    s.ids_c2s = ok;
    s.n_ids_s2c = 2;
    s.ids_s2c = down + 1; /* 9, 2 */
    cr_assert_eq(decode_service(&s), -EINVAL);
}

Test(dp, unsorted_or_duplicate_ids_not_encoded)
{
    uint32_t dup[] = {4, 4}, down[] = {5, 4};
    struct fgx_dp_msg m;
    void *buf = (void *)1;
    size_t len = 1;

    make_ruleset(&m);
    sample_services[0].ids[1] = dup;
    sample_services[0].nids[1] = 2;
    cr_assert_eq(fgx_dp_encode(&m, &buf, &len), -EINVAL);
    cr_assert_null(buf);
    make_ruleset(&m);
    sample_services[1].ids[1] = down;
    sample_services[1].nids[1] = 2;
    cr_assert_eq(fgx_dp_encode(&m, &buf, &len), -EINVAL);
    make_ruleset(&m);
    sample_services[2].nids[0] = 1; /* ids NULL */
    cr_assert_eq(fgx_dp_encode(&m, &buf, &len), -EINVAL);
}

Test(dp, bad_message_not_encoded)
{
    struct fgx_dp_msg m;
    void *buf = (void *)1;
    size_t len = 1;

    make_ruleset(&m);
    sample_services[1].addr.prefix = 129;
    cr_assert_eq(fgx_dp_encode(&m, &buf, &len), -EINVAL);
    cr_assert_null(buf);
    cr_assert_eq(len, 0);
    make_ruleset(&m);
    sample_services[0].ipproto = IPPROTO_ICMP;
    cr_assert_eq(fgx_dp_encode(&m, &buf, &len), -EINVAL);
    m = (struct fgx_dp_msg){.type = 99};
    cr_assert_eq(fgx_dp_encode(&m, &buf, &len), -EINVAL);
    m = (struct fgx_dp_msg){.type = FGX_DP_RULESET};
    m.u.ruleset.nservices = 2; /* services NULL */
    cr_assert_eq(fgx_dp_encode(&m, &buf, &len), -EINVAL);
}

Test(dp, release_is_idempotent)
{
    struct fgx_dp_msg m;

    memset(&m, 0, sizeof(m));
    fgx_dp_msg_release(&m);
    fgx_dp_msg_release(NULL);
    cr_assert_eq(m.type, 0);
}

/* ---- match events in STATS ---- */

static struct fgx_dp_event sample_events[3];

static void make_stats_events(struct fgx_dp_msg *m)
{
    struct fgx_dp_event *e = sample_events;

    memset(sample_events, 0, sizeof(sample_events));
    e[0] = (struct fgx_dp_event){.time_ns = 1700000000123456789ULL,
                                 .service_id = 7,
                                 .filter_id = 3,
                                 .dir = FGX_DIR_C2S,
                                 .ipproto = IPPROTO_TCP,
                                 .family = 4,
                                 .src = {10, 0, 0, 1},
                                 .dst = {10, 0, 0, 2},
                                 .sport = 40000,
                                 .dport = 8080,
                                 .excerpt_len = 9};
    memcpy(e[0].excerpt, "GET /evil", 9);
    e[0].match_end = 7; /* "GET /ev" matched; "il" came after */
    e[1] = (struct fgx_dp_event){.time_ns = 2,
                                 .service_id = 8,
                                 .filter_id = 0xffffffffu,
                                 .dir = FGX_DIR_S2C,
                                 .ipproto = IPPROTO_UDP,
                                 .family = 6,
                                 .sport = 65535,
                                 .dport = 1,
                                 .excerpt_len = FGX_DP_EXCERPT_MAX};
    e[1].match_end = FGX_DP_EXCERPT_BEFORE;
    e[1].src[0] = 0xfd;
    e[1].src[15] = 1;
    e[1].dst[0] = 0xfd;
    e[1].dst[15] = 2;
    for (int i = 0; i < FGX_DP_EXCERPT_MAX; i++)
        e[1].excerpt[i] = (uint8_t)(i * 7); /* binary, with a 0 byte first */
    e[2] = e[0];
    e[2].excerpt_len = 0; /* no excerpt at all */
    e[2].match_end = 0;
    e[2].time_ns = 3;
    make_stats(m);
    m->u.stats.nevents = 3;
    m->u.stats.events = sample_events;
    m->u.stats.events_lost = 5;
}

static void event_eq(const struct fgx_dp_event *a, const struct fgx_dp_event *b)
{
    size_t alen = a->family == 4 ? 4 : 16;

    cr_assert_eq(a->time_ns, b->time_ns);
    cr_assert_eq(a->service_id, b->service_id);
    cr_assert_eq(a->filter_id, b->filter_id);
    cr_assert_eq(a->dir, b->dir);
    cr_assert_eq(a->ipproto, b->ipproto);
    cr_assert_eq(a->family, b->family);
    cr_assert_eq(memcmp(a->src, b->src, alen), 0);
    cr_assert_eq(memcmp(a->dst, b->dst, alen), 0);
    cr_assert_eq(a->sport, b->sport);
    cr_assert_eq(a->dport, b->dport);
    cr_assert_eq(a->excerpt_len, b->excerpt_len);
    cr_assert_eq(memcmp(a->excerpt, b->excerpt, a->excerpt_len), 0);
    cr_assert_eq(a->match_end, b->match_end);
}

Test(dp, stats_events_round_trip)
{
    struct fgx_dp_msg in, out;

    make_stats_events(&in);
    encode_decode(&in, &out);
    cr_assert_eq(out.type, FGX_DP_STATS);
    cr_assert_eq(out.u.stats.nevents, 3);
    for (size_t i = 0; i < 3; i++)
        event_eq(&in.u.stats.events[i], &out.u.stats.events[i]);
    cr_assert_eq(out.u.stats.events_lost, 5);
    cr_assert_eq(out.u.stats.nfilters, 2, "the counters travel with the events");
    fgx_dp_msg_release(&out);
    cr_assert_null(out.u.stats.events);
}

Test(dp, stats_without_events_has_none)
{
    struct fgx_dp_msg in, out;

    make_stats(&in);
    encode_decode(&in, &out);
    cr_assert_eq(out.u.stats.nevents, 0);
    cr_assert_null(out.u.stats.events);
    cr_assert_eq(out.u.stats.events_lost, 0);
    fgx_dp_msg_release(&out);
}

/* Stats travels inside Msg with a length prefix, so a cut anywhere, even between two events,
 * is refused: an event is never lost or altered by truncation without an error. */
Test(dp, stats_events_truncated_refused)
{
    struct fgx_dp_msg in;

    make_stats_events(&in);
    check_every_prefix(&in);
}

static uint8_t *pack_stats_pb(Fgx__Dp__Event **evs, size_t n, size_t *len)
{
    Fgx__Dp__Msg msg = FGX__DP__MSG__INIT;
    Fgx__Dp__Stats st = FGX__DP__STATS__INIT;
    uint8_t *buf;

    st.n_events = n;
    st.events = evs;
    st.has_events_lost = 1;
    st.events_lost = 1;
    msg.msg_case = FGX__DP__MSG__MSG_STATS;
    msg.stats = &st;
    *len = fgx__dp__msg__get_packed_size(&msg);
    buf = malloc(*len);
    cr_assert_not_null(buf);
    fgx__dp__msg__pack(&msg, buf);
    return buf;
}

Test(dp, bad_events_dropped_and_counted)
{
    static uint8_t a4[4] = {1, 2, 3, 4}, a16[16] = {0xfd}, a5[5], big[FGX_DP_EXCERPT_MAX + 1];
    Fgx__Dp__Event ev[8], *evp[8];
    struct fgx_dp_msg out;
    uint8_t *buf;
    size_t len;

    for (int i = 0; i < 8; i++) {
        fgx__dp__event__init(&ev[i]);
        ev[i].service_id = (uint32_t)i;
        ev[i].dir = FGX_DIR_C2S;
        ev[i].ipproto = IPPROTO_TCP;
        ev[i].src = (ProtobufCBinaryData){.len = 4, .data = a4};
        ev[i].dst = (ProtobufCBinaryData){.len = 4, .data = a4};
        ev[i].sport = 1;
        ev[i].dport = 2;
        evp[i] = &ev[i];
    }
    ev[1].src = (ProtobufCBinaryData){.len = 5, .data = a5}; /* no such family */
    ev[1].dst = (ProtobufCBinaryData){.len = 5, .data = a5};
    ev[2].dst = (ProtobufCBinaryData){.len = 16, .data = a16}; /* families differ */
    ev[3].has_excerpt = 1;                                     /* excerpt too long */
    ev[3].excerpt = (ProtobufCBinaryData){.len = sizeof(big), .data = big};
    ev[4].dir = 3;         /* BOTH is no direction of bytes */
    ev[5].ipproto = 1;     /* ICMP */
    ev[6].sport = 70000;   /* not a port */
    ev[7].has_excerpt = 1; /* the good one, at the limit */
    ev[7].excerpt = (ProtobufCBinaryData){.len = FGX_DP_EXCERPT_MAX, .data = big};
    buf = pack_stats_pb(evp, 8, &len);
    cr_assert_eq(fgx_dp_decode(buf, len, &out), 0);
    free(buf);
    cr_assert_eq(out.u.stats.nevents, 2);
    cr_assert_eq(out.u.stats.events[0].service_id, 0);
    cr_assert_eq(out.u.stats.events[0].family, 4);
    cr_assert_eq(out.u.stats.events[1].service_id, 7);
    cr_assert_eq(out.u.stats.events[1].excerpt_len, FGX_DP_EXCERPT_MAX);
    cr_assert_eq(out.u.stats.events_lost, 1 + 6, "the dropped events are counted as lost");
    fgx_dp_msg_release(&out);
}

Test(dp, bad_events_not_encoded)
{
    struct fgx_dp_msg in, out;

    make_stats_events(&in);
    sample_events[0].family = 5;
    sample_events[2].excerpt_len = FGX_DP_EXCERPT_MAX + 1;
    encode_decode(&in, &out);
    cr_assert_eq(out.u.stats.nevents, 1);
    event_eq(&sample_events[1], &out.u.stats.events[0]);
    cr_assert_eq(out.u.stats.events_lost, 5 + 2);
    fgx_dp_msg_release(&out);
}

/* Identical databases (both directions of a service whose filters are all "both", services
 * with the same filters) travel once: the message holds one copy, and the decoded ruleset
 * shares it. */
Test(dp, identical_databases_travel_once)
{
    enum { BIG = 1 << 16 };
    static uint8_t big[BIG], other[BIG];
    struct fgx_dp_service s[2];
    struct fgx_dp_msg in = {0}, out;
    void *buf = NULL;
    size_t len = 0, i;

    for (i = 0; i < BIG; i++) {
        big[i] = (uint8_t)(i * 7);
        other[i] = (uint8_t)(i * 7);
    }
    other[BIG - 1] ^= 1; /* one byte differs: sent on its own */
    memset(s, 0, sizeof(s));
    for (i = 0; i < 2; i++) {
        s[i].id = (uint32_t)i + 1;
        s[i].ipproto = IPPROTO_TCP;
        s[i].port = (uint16_t)(80 + i);
        s[i].db[0] = (struct fgx_blob){.data = big, .len = BIG, .hash = 77};
    }
    s[0].db[1] = (struct fgx_blob){.data = big, .len = BIG, .hash = 77};
    s[1].db[1] = (struct fgx_blob){.data = other, .len = BIG, .hash = 78};
    in.type = FGX_DP_RULESET;
    in.u.ruleset = (struct fgx_dp_ruleset){.generation = 3, .nservices = 2, .services = s};
    cr_assert_eq(fgx_dp_encode(&in, &buf, &len), 0);
    cr_assert_lt(len, 2 * BIG + 256, "%zu bytes: identical databases were sent again", len);
    cr_assert_gt(len, 2 * BIG, "the differing database must travel");
    cr_assert_eq(fgx_dp_decode(buf, len, &out), 0);
    free(buf);
    cr_assert_eq(out.u.ruleset.nservices, 2);
    {
        const struct fgx_dp_service *o = out.u.ruleset.services;

        cr_assert_not(o[0].db_shared[0]);
        cr_assert(o[0].db_shared[1]);
        cr_assert(o[1].db_shared[0]);
        cr_assert_not(o[1].db_shared[1]);
        cr_assert_eq(o[0].db[1].data, o[0].db[0].data);
        cr_assert_eq(o[1].db[0].data, o[0].db[0].data);
        cr_assert_eq(memcmp(o[0].db[0].data, big, BIG), 0);
        cr_assert_eq(memcmp(o[1].db[1].data, other, BIG), 0);
        cr_assert_eq(o[0].db[1].len, (size_t)BIG);
        cr_assert_eq(o[0].db[1].hash, 77);
        cr_assert_eq(o[1].db[1].hash, 78);
    }
    fgx_dp_msg_release(&out); /* the sanitizer build catches a double free here */
}

Test(dp, bad_database_references_refused)
{
    uint8_t addr[4] = {10, 0, 0, 0};
    uint8_t db[3] = {1, 2, 3};
    Fgx__Dp__Service s;

    /* s2c as c2s: fine when c2s has bytes. */
    base_service(&s, addr);
    s.has_db_c2s = 1;
    s.db_c2s.data = db;
    s.db_c2s.len = sizeof(db);
    s.has_db_s2c_as = 1;
    s.db_s2c_as = 1;
    cr_assert_eq(decode_service(&s), 0);
    /* ... not when c2s has none, */
    s.has_db_c2s = 0;
    cr_assert_eq(decode_service(&s), -EINVAL);
    /* not to itself or a later one, not 0, */
    base_service(&s, addr);
    s.has_db_c2s_as = 1;
    s.db_c2s_as = 1;
    cr_assert_eq(decode_service(&s), -EINVAL);
    s.db_c2s_as = 2;
    cr_assert_eq(decode_service(&s), -EINVAL);
    s.db_c2s_as = 0;
    cr_assert_eq(decode_service(&s), -EINVAL);
    /* and never bytes and a reference at once. */
    base_service(&s, addr);
    s.has_db_c2s = 1;
    s.db_c2s.data = db;
    s.db_c2s.len = sizeof(db);
    s.has_db_s2c = 1;
    s.db_s2c.data = db;
    s.db_s2c.len = sizeof(db);
    s.has_db_s2c_as = 1;
    s.db_s2c_as = 1;
    cr_assert_eq(decode_service(&s), -EINVAL);
}

Test(dp, known_databases_travel_as_their_hash)
{
    static uint8_t big[4096];
    struct fgx_dp_service s = {.id = 1, .ipproto = IPPROTO_TCP, .port = 80};
    struct fgx_dp_msg in = {0}, out;
    void *buf = NULL;
    size_t len = 0;

    s.db[0] = (struct fgx_blob){.hash = 0xabcdef};
    s.db_known[0] = true;
    s.db[1] = (struct fgx_blob){.data = big, .len = sizeof(big), .hash = 5};
    in.type = FGX_DP_RULESET;
    in.u.ruleset = (struct fgx_dp_ruleset){.generation = 1, .nservices = 1, .services = &s};
    cr_assert_eq(fgx_dp_encode(&in, &buf, &len), 0);
    cr_assert_eq(fgx_dp_decode(buf, len, &out), 0);
    free(buf);
    cr_assert(out.u.ruleset.services[0].db_known[0]);
    cr_assert_not(out.u.ruleset.services[0].db_known[1]);
    cr_assert_eq(out.u.ruleset.services[0].db[0].hash, 0xabcdef);
    cr_assert_eq(out.u.ruleset.services[0].db[0].len, 0);
    cr_assert_eq(out.u.ruleset.services[0].db[1].len, sizeof(big));
    fgx_dp_msg_release(&out);
    /* without its hash a known database means nothing: not encoded, not decoded */
    s.db[0].hash = 0;
    cr_assert_eq(fgx_dp_encode(&in, &buf, &len), -EINVAL);
}

Test(dp, bad_known_databases_refused)
{
    uint8_t addr[4] = {10, 0, 0, 0};
    uint8_t db[3] = {1, 2, 3};
    Fgx__Dp__Service s;

    base_service(&s, addr);
    s.has_db_c2s_known = 1;
    s.db_c2s_known = 1;
    cr_assert_eq(decode_service(&s), -EINVAL, "no hash");
    s.has_hash_c2s = 1;
    s.hash_c2s = 0;
    cr_assert_eq(decode_service(&s), -EINVAL, "hash 0");
    s.hash_c2s = 77;
    cr_assert_eq(decode_service(&s), 0);
    s.has_db_c2s = 1;
    s.db_c2s.data = db;
    s.db_c2s.len = sizeof(db);
    cr_assert_eq(decode_service(&s), -EINVAL, "bytes and known");
}

Test(dp, heartbeat_round_trip)
{
    struct fgx_dp_msg in = {.type = FGX_DP_HEARTBEAT}, out;

    in.u.heartbeat.pid = 4242;
    in.u.heartbeat.worker_id = 0xfeedfacecafebeefull;
    in.u.heartbeat.generation = 17;
    in.u.heartbeat.nthreads = 3;
    in.u.heartbeat.stale_ms[0] = 1;
    in.u.heartbeat.stale_ms[1] = 0;
    in.u.heartbeat.stale_ms[2] = 1500;
    encode_decode(&in, &out);
    cr_assert_eq(out.type, FGX_DP_HEARTBEAT);
    cr_assert_eq(out.u.heartbeat.pid, 4242);
    cr_assert_eq(out.u.heartbeat.worker_id, 0xfeedfacecafebeefull);
    cr_assert_eq(out.u.heartbeat.generation, 17);
    cr_assert_eq(out.u.heartbeat.nthreads, 3);
    cr_assert_eq(out.u.heartbeat.stale_ms[2], 1500);
    fgx_dp_msg_release(&out);

    in.type = FGX_DP_HEARTBEAT_REQUEST;
    encode_decode(&in, &out);
    cr_assert_eq(out.type, FGX_DP_HEARTBEAT_REQUEST);
    in.type = FGX_DP_HEARTBEAT;
    in.u.heartbeat.nthreads = FGX_DP_HB_THREADS_MAX + 1;
    {
        void *buf = NULL;
        size_t len = 0;

        cr_assert_eq(fgx_dp_encode(&in, &buf, &len), -EINVAL, "more threads than it can carry");
    }
}
