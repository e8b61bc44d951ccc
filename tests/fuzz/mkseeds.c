/* Writes the fuzzing harnesses' binary seeds into DIR/<harness>/ (make fuzz-bins runs it into
 * build/fuzz/seeds): packets, worker-channel messages, control requests, captures and segment
 * sequences made with fgex's own encoders (and fuzz_norm's packet records), so that each harness starts from inputs that reach
 * deep into its parser. Text seeds (rule files, backups, config files) are committed under
 * tests/fuzz/corpus/ instead. A seed is a few hundred bytes at most. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "control.pb-c.h"
#include "fgx/capture.h"
#include "fgx/dp.h"

static const char *root;
static int nfail;

static void put(const char *harness, const char *name, const void *buf, size_t len)
{
    char path[512];
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s", root, harness);
    if (mkdir(path, 0755) == -1 && errno != EEXIST) {
        perror(path);
        nfail++;
        return;
    }
    snprintf(path, sizeof(path), "%s/%s/%s", root, harness, name);
    f = fopen(path, "wb");
    if (!f || fwrite(buf, 1, len, f) != len || fclose(f) != 0) {
        perror(path);
        nfail++;
    }
}

/* ---- packets (fuzz_pkt) -------------------------------------------------------------------- */

static size_t ip4(uint8_t *b, uint8_t proto, size_t optlen, uint16_t frag, size_t l4len)
{
    size_t hl = 20 + optlen, tot = hl + l4len;

    memset(b, 0, hl);
    b[0] = (uint8_t)(0x40 | (hl / 4));
    b[2] = (uint8_t)(tot >> 8);
    b[3] = (uint8_t)tot;
    b[6] = (uint8_t)(frag >> 8);
    b[7] = (uint8_t)frag;
    b[8] = 64;
    b[9] = proto;
    memcpy(b + 12, (uint8_t[]){10, 77, 0, 2}, 4);
    memcpy(b + 16, (uint8_t[]){10, 77, 0, 1}, 4);
    for (size_t i = 20; i < hl; i++)
        b[i] = 1; /* NOPs */
    return hl;
}

static size_t tcp(uint8_t *b, uint8_t flags, bool ts, const char *payload)
{
    size_t hl = ts ? 32 : 20, n = strlen(payload);

    memset(b, 0, hl);
    b[0] = 0x9c, b[1] = 0x40; /* 40000 */
    b[2] = 0x13, b[3] = 0x88; /* 5000 */
    b[4] = 0;
    b[5] = 0;
    b[6] = 0x03;
    b[7] = 0xe9;
    b[12] = (uint8_t)((hl / 4) << 4);
    b[13] = flags;
    b[14] = 0xff;
    b[15] = 0xff;
    if (ts) {
        b[20] = 1;
        b[21] = 1;
        b[22] = 8;
        b[23] = 10;
        b[27] = 7;
    }
    memcpy(b + hl, payload, n);
    return hl + n;
}

static size_t ip6(uint8_t *b, uint8_t next, size_t plen)
{
    memset(b, 0, 40);
    b[0] = 0x60;
    b[4] = (uint8_t)(plen >> 8);
    b[5] = (uint8_t)plen;
    b[6] = next;
    b[7] = 64;
    b[8] = 0xfd;
    b[9] = 0x77;
    b[23] = 2;
    b[24] = 0xfd;
    b[25] = 0x77;
    b[39] = 1;
    return 40;
}

static void seeds_pkt(void)
{
    uint8_t b[512], l4[256];
    size_t n, h;

    n = tcp(l4, 0x18, true, "GET /evil1337 HTTP/1.1\r\n\r\n");
    h = ip4(b, IPPROTO_TCP, 0, 0x4000, n);
    memcpy(b + h, l4, n);
    put("fuzz_pkt", "ip4-tcp-ts", b, h + n);
    h = ip4(b, IPPROTO_TCP, 8, 0, n);
    memcpy(b + h, l4, n);
    put("fuzz_pkt", "ip4-options", b, h + n);
    h = ip4(b, IPPROTO_TCP, 0, 0x2000, n); /* first fragment */
    memcpy(b + h, l4, n);
    put("fuzz_pkt", "ip4-frag", b, h + n);
    memcpy(l4, (uint8_t[]){0x9c, 0x40, 0x00, 0x35, 0, 12, 0, 0, 'e', 'v', 'i', 'l'}, 12);
    h = ip4(b, IPPROTO_UDP, 0, 0, 12);
    memcpy(b + h, l4, 12);
    put("fuzz_pkt", "ip4-udp", b, h + 12);
    n = tcp(l4, 0x02, false, "");
    h = ip6(b, IPPROTO_TCP, n);
    memcpy(b + h, l4, n);
    put("fuzz_pkt", "ip6-syn", b, h + n);
    /* hop-by-hop (PadN), then a fragment header, then TCP */
    n = tcp(l4, 0x18, false, "evil1337");
    h = ip6(b, 0, 8 + 8 + n);
    memcpy(b + h, (uint8_t[]){44, 0, 1, 4, 0, 0, 0, 0}, 8);
    memcpy(b + h + 8, (uint8_t[]){IPPROTO_TCP, 0, 0, 1, 0, 0, 0, 7}, 8);
    memcpy(b + h + 16, l4, n);
    put("fuzz_pkt", "ip6-hbh-frag", b, h + 16 + n);
    /* a routing header */
    h = ip6(b, 43, 8 + n);
    memcpy(b + h, (uint8_t[]){IPPROTO_TCP, 0, 0, 0, 0, 0, 0, 0}, 8);
    memcpy(b + h + 8, l4, n);
    put("fuzz_pkt", "ip6-rthdr", b, h + 8 + n);
}

/* ---- worker channel (fuzz_dp) ------------------------------------------------------------- */

static void put_dp(const char *name, const struct fgx_dp_msg *m)
{
    void *buf = NULL;
    size_t len = 0;

    if (fgx_dp_encode(m, &buf, &len) != 0) {
        fprintf(stderr, "mkseeds: cannot encode %s\n", name);
        nfail++;
        return;
    }
    put("fuzz_dp", name, buf, len);
    free(buf);
}

static void seeds_dp(void)
{
    struct fgx_dp_msg m;
    struct fgx_dp_service s[2];
    uint32_t ids[2] = {3, 7};
    struct fgx_svcaddr addrs[2];
    struct fgx_dp_service_stat st = {.service_id = 1, .packets = 10, .bytes = 999, .flows_new = 2};
    struct fgx_dp_filter_stat fst = {.filter_id = 3, .blocked = 4};

    memset(&m, 0, sizeof(m));
    memset(s, 0, sizeof(s));
    memset(addrs, 0, sizeof(addrs));
    m.type = FGX_DP_RULESET;
    m.u.ruleset.generation = 42;
    m.u.ruleset.nservices = 2;
    m.u.ruleset.services = s;
    s[0].id = 1;
    s[0].ipproto = IPPROTO_TCP;
    s[0].port = 5000;
    s[0].fail_open = true;
    s[0].db[0].data = (uint8_t *)"not-a-database";
    s[0].db[0].len = 14;
    s[0].ids[0] = ids;
    s[0].nids[0] = 2;
    s[0].capture_conns = 16;
    s[0].capture_bytes = 4096;
    s[0].script.data = (uint8_t *)"def f(p):\n    return\n";
    s[0].script.len = 22;
    s[0].script_deadline_ms = 100;
    s[0].script_dirs = 3;
    s[1].id = 2;
    s[1].ipproto = IPPROTO_UDP;
    s[1].port = 53;
    addrs[0].port = 53;
    addrs[1].port = 5353;
    snprintf(addrs[1].ifname, sizeof(addrs[1].ifname), "eth1");
    s[1].addrs = addrs;
    s[1].naddrs = 2;
    s[1].tls_cert.data = (uint8_t *)"-----BEGIN CERTIFICATE-----";
    s[1].tls_cert.len = 27;
    put_dp("ruleset", &m);

    memset(&m, 0, sizeof(m));
    m.type = FGX_DP_ACK;
    m.u.ack_generation = 42;
    put_dp("ack", &m);
    m.type = FGX_DP_STATS_REQUEST;
    put_dp("stats-request", &m);

    memset(&m, 0, sizeof(m));
    m.type = FGX_DP_STATS;
    m.u.stats.nservices = 1;
    m.u.stats.services = &st;
    m.u.stats.nfilters = 1;
    m.u.stats.filters = &fst;
    put_dp("stats", &m);

    memset(&m, 0, sizeof(m));
    m.type = FGX_DP_ERROR;
    m.u.error = "refused: bad database";
    put_dp("error", &m);
    memset(&m, 0, sizeof(m));
    m.type = FGX_DP_CAPTURE_REQUEST;
    m.u.capture_service = 1;
    put_dp("capture-request", &m);
    /* what fuzz_dp found (UBSan: a copy from the null data of an empty capture), kept as a
     * regression seed; tests/unit/test_dp.c decodes it too */
    put("fuzz_dp", "captures-empty", "\xca\x0c\x00\xca\x0c\x03\xc2\x0c\x00", 9);
}

/* ---- control requests (fuzz_ctl_rpc) ------------------------------------------------------ */

static void put_req(const char *name, const Fgx__Ctl__Request *q)
{
    size_t len = fgx__ctl__request__get_packed_size(q);
    uint8_t *buf = malloc(len ? len : 1);

    if (!buf) {
        nfail++;
        return;
    }
    fgx__ctl__request__pack(q, buf);
    put("fuzz_ctl_rpc", name, buf, len);
    free(buf);
}

static void seeds_rpc(void)
{
    Fgx__Ctl__Request q = FGX__CTL__REQUEST__INIT;
    Fgx__Ctl__ServiceAdd sa = FGX__CTL__SERVICE_ADD__INIT;
    Fgx__Ctl__FilterAdd fa = FGX__CTL__FILTER_ADD__INIT;
    Fgx__Ctl__Ref ref = FGX__CTL__REF__INIT;
    Fgx__Ctl__FilterImport fi = FGX__CTL__FILTER_IMPORT__INIT;
    Fgx__Ctl__FilterSpec spec = FGX__CTL__FILTER_SPEC__INIT, *specs[1] = {&spec};
    Fgx__Ctl__EventsQuery eq = FGX__CTL__EVENTS_QUERY__INIT;

    q.req_case = FGX__CTL__REQUEST__REQ_SERVICE_ADD;
    q.service_add = &sa;
    sa.name = "notes";
    sa.proto = FGX__CTL__PROTO__PROTO_TCP;
    sa.port = 5000;
    put_req("service-add", &q);
    sa.name = "dns";
    sa.proto = FGX__CTL__PROTO__PROTO_UDP;
    sa.port = 53;
    sa.ip = "10.60.1.1";
    put_req("service-add-udp", &q);

    q = (Fgx__Ctl__Request)FGX__CTL__REQUEST__INIT;
    q.req_case = FGX__CTL__REQUEST__REQ_FILTER_ADD;
    q.filter_add = &fa;
    fa.service = "notes";
    fa.regex = "evil[0-9]+";
    fa.has_dir = true;
    fa.dir = FGX__CTL__DIR__DIR_C2S;
    put_req("filter-add", &q);
    fa.regex = "FLAG\\{";
    fa.has_nocase = true;
    fa.nocase = true;
    fa.dir = FGX__CTL__DIR__DIR_S2C;
    put_req("filter-add-s2c", &q);

    q = (Fgx__Ctl__Request)FGX__CTL__REQUEST__INIT;
    q.req_case = FGX__CTL__REQUEST__REQ_FILTER_LIST;
    q.filter_list = &ref;
    ref.ref = "notes";
    put_req("filter-list", &q);
    q.req_case = FGX__CTL__REQUEST__REQ_SERVICE_STOP;
    q.filter_list = NULL;
    q.service_stop = &ref;
    put_req("service-stop", &q);

    q = (Fgx__Ctl__Request)FGX__CTL__REQUEST__INIT;
    q.req_case = FGX__CTL__REQUEST__REQ_FILTER_IMPORT;
    q.filter_import = &fi;
    fi.service = "notes";
    fi.n_filters = 1;
    fi.filters = specs;
    fi.has_sync = true;
    fi.sync = true;
    spec.regex = "\\.\\./\\.\\./";
    put_req("filter-import-sync", &q);

    q = (Fgx__Ctl__Request)FGX__CTL__REQUEST__INIT;
    q.req_case = FGX__CTL__REQUEST__REQ_EVENTS;
    q.events = &eq;
    put_req("events", &q);
}

/* ---- captures (fuzz_capture) -------------------------------------------------------------- */

static int keep_cap(void *arg, uint8_t *buf, size_t len)
{
    const char *name = arg;

    put("fuzz_capture", name, buf, len);
    free(buf);
    return 0;
}

static void seeds_capture(void)
{
    struct fgx_cap_ring *r = NULL;
    struct fgx_cap_ref ref;
    uint8_t c[4] = {10, 77, 0, 2}, s[4] = {10, 77, 0, 1};
    uint8_t c6[16] = {0xfd, 0x77, [15] = 2}, s6[16] = {0xfd, 0x77, [15] = 1};

    if (fgx_cap_ring_new(1, 4, 1024, &r) != 0) {
        nfail++;
        return;
    }
    fgx_cap_open(r, IPPROTO_TCP, 4, c, 40000, s, 5000, 1000, &ref);
    fgx_cap_add(r, &ref, 0, 100, 101, (const uint8_t *)"GET / HTTP/1.1\r\n", 16, 1001, false);
    fgx_cap_add(r, &ref, 1, 900, 901, (const uint8_t *)"HTTP/1.1 200 OK\r\n", 17, 1002, false);
    fgx_cap_add(r, &ref, 0, 100, 117, (const uint8_t *)"evil1337", 8, 1003, true);
    (void)fgx_cap_pin(r, &ref, 3);
    (void)fgx_cap_ring_collect(r, keep_cap, "tcp4-blocked");
    fgx_cap_ring_free(r);

    r = NULL;
    if (fgx_cap_ring_new(2, 4, 1024, &r) != 0) {
        nfail++;
        return;
    }
    fgx_cap_udp(r, 6, c6, 40000, s6, 53, 1000, &ref);
    fgx_cap_append(r, &ref, 0, (const uint8_t *)"query", 5, 1001, false);
    fgx_cap_append(r, &ref, 1, (const uint8_t *)"answer", 6, 1002, false);
    (void)fgx_cap_ring_collect(r, keep_cap, "udp6");
    fgx_cap_ring_free(r);
}

/* ---- segment sequences (fuzz_reasm): set-up byte, then op, offset (LE), length, bytes ----- */

struct rec {
    uint8_t op;
    uint16_t off;
    const char *data;
};

static void put_reasm(const char *name, uint8_t setup, const struct rec *recs, size_t n)
{
    uint8_t buf[1024];
    size_t at = 0;

    buf[at++] = setup;
    for (size_t i = 0; i < n; i++) {
        size_t len = recs[i].data ? strlen(recs[i].data) : 0;

        buf[at++] = recs[i].op;
        buf[at++] = (uint8_t)recs[i].off;
        buf[at++] = (uint8_t)(recs[i].off >> 8);
        buf[at++] = (uint8_t)len;
        memcpy(buf + at, recs[i].data ? recs[i].data : "", len);
        at += len;
    }
    put("fuzz_reasm", name, buf, at);
}

static void seeds_reasm(void)
{
    put_reasm("in-order", 0, (struct rec[]){{0, 0, "GET / HTTP/1.1\r\n"}, {4, 16, NULL},
                                            {0, 16, "Host: x\r\n\r\n"}}, 3);
    put_reasm("out-of-order", 0, (struct rec[]){{0, 4, "l1337"}, {0, 0, "evi"}, {0, 3, "xx"}},
              3);
    put_reasm("overlap-differs", 2, (struct rec[]){{0, 0, "eviX"}, {0, 0, "evil"}, {4, 2, NULL},
                                                   {0, 2, "il"}}, 4);
    put_reasm("wrap", 1, (struct rec[]){{0, 0, "aaaa"}, {0, 250, "ev"}, {0, 4, "bbbb"},
                                        {5, 50, NULL}, {0, 8, "il"}}, 5);
    put_reasm("before-start", 6, (struct rec[]){{3, 0xfffc, "evil"}, {0, 0, "ok"}}, 2);
}

/* ---- packet sequences of both directions (fuzz_norm): set-up byte, then ctl, flags, seq
 * (LE), ack (LE), tsval offset, length, bytes (tests/fuzz/fuzz_norm.c) ---------------------- */

#define N_S2C 0x01
#define N_TS 0x02
#define N_MD5 0x04
#define N_LSRR 0x10
#define N_RAWACK 0x20
#define N_ACK 0x10 /* TCP flags */
#define N_URG 0x20

struct nrec {
    uint8_t ctl, flags;
    int16_t seq, ack;
    int8_t ts;
    const char *data;
};

static void put_norm(const char *name, uint8_t setup, const struct nrec *recs, size_t n)
{
    uint8_t buf[1024];
    size_t at = 0;

    buf[at++] = setup;
    for (size_t i = 0; i < n; i++) {
        size_t len = recs[i].data ? strlen(recs[i].data) : 0;

        buf[at++] = recs[i].ctl;
        buf[at++] = recs[i].flags;
        buf[at++] = (uint8_t)recs[i].seq;
        buf[at++] = (uint8_t)((uint16_t)recs[i].seq >> 8);
        buf[at++] = (uint8_t)recs[i].ack;
        buf[at++] = (uint8_t)((uint16_t)recs[i].ack >> 8);
        buf[at++] = (uint8_t)recs[i].ts;
        buf[at++] = (uint8_t)len;
        memcpy(buf + at, recs[i].data ? recs[i].data : "", len);
        at += len;
    }
    put("fuzz_norm", name, buf, at);
}

static void seeds_norm(void)
{
    /* a request, the server's ack and answer, the client's ack */
    put_norm("exchange", 0,
             (struct nrec[]){{N_TS, N_ACK, 0, 0, 1, "GET / HTTP/1.0\r\n\r\n"},
                             {N_S2C | N_TS, N_ACK, 0, 18, 1, "HTTP/1.0 200 OK\r\n\r\n"},
                             {N_TS, N_ACK, 18, 19, 2, NULL}},
             3);
    /* bytes the receiver discards (an MD5 option, an old timestamp, a source route, no ACK,
     * urgent data, an ack of unsent bytes), then the evil ones at the same place */
    put_norm("md5-then-evil", 0,
             (struct nrec[]){{N_MD5, N_ACK, 0, 0, 0, "good"}, {0, N_ACK, 0, 0, 0, "evil"}}, 2);
    put_norm("paws-then-evil", 2,
             (struct nrec[]){{N_TS, N_ACK, 0, 0, 10, "ab"}, {N_TS, N_ACK, 2, 0, 0, "good"},
                             {N_TS, N_ACK, 2, 0, 11, "evil"}},
             3);
    put_norm("lsrr-then-evil", 4,
             (struct nrec[]){{N_LSRR, N_ACK, 0, 0, 0, "good"}, {0, N_ACK, 0, 0, 0, "evil"}}, 2);
    put_norm("noack-urg", 8,
             (struct nrec[]){{0, 0, 0, 0, 0, "good"}, {N_RAWACK, N_ACK | N_URG, 0, 0, 0, "ev"},
                             {0, N_ACK, 0, 0, 0, "evil"}},
             3);
    put_norm("ack-unsent", 1,
             (struct nrec[]){{N_RAWACK, N_ACK, 0, 4000, 0, "good"},
                             {N_S2C, N_ACK, 0, 4, 0, "ok"}, {0, N_ACK, 0, 2, 0, "evil"}},
             3);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: mkseeds DIR\n");
        return 2;
    }
    root = argv[1];
    if (mkdir(root, 0755) == -1 && errno != EEXIST) {
        perror(root);
        return 1;
    }
    seeds_pkt();
    seeds_dp();
    seeds_rpc();
    seeds_capture();
    seeds_reasm();
    seeds_norm();
    return nfail ? 1 : 0;
}
