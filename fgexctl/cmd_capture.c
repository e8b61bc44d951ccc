/* fgexctl, the capture commands: `capture SERVICE --pcap FILE` (the service's captured
 * connections as a pcap that tshark and Wireshark open, written with libpcap), `events show SEQ`
 * (one block's capture, hex and ASCII per direction, or --raw bytes to replay) and `filter test
 * SERVICE REGEX` (what a candidate regex would have blocked of the capture), plus the service
 * add/set capture options. */
#include "cmd.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <pcap/pcap.h>

#include "cli_fmt.h"
#include "cli_json.h"
#include "fgx/capture.h"
#include "fgx/pkt.h"

/* ---- usage ---- */

/* clang-format off */
static const char usage_capture[] =
    "usage: fgexctl capture SERVICE --pcap FILE [--blocked] [--since DURATION]\n"
    "                       [--src ADDR|CIDR] [--filter ID]\n"
    "\n"
    "Write the service's captured connections to FILE as a pcap (Ethernet link type),\n"
    "one TCP stream per connection with its real addresses, ports, sequence numbers\n"
    "and times (the handshake is synthesized from the streams' first sequence\n"
    "numbers), UDP datagrams as they came. The workers keep the first bytes of each\n"
    "direction of each service's last connections (service add/set --capture-conns,\n"
    "--capture-bytes); controld keeps the blocked ones with their events.\n"
    "\n"
    "The bytes that a filter blocked (they never reached the peer) are in the file,\n"
    "marked by their Ethernet source address 02:42:4c:4f:43:4b (\"BLOCK\"): in tshark\n"
    "or Wireshark, `eth.src == 02:42:4c:4f:43:4b`. fgex's resets follow them.\n"
    "\n"
    "  --pcap FILE        where to write (\"-\": standard output)\n"
    "  --blocked          only the connections a filter blocked\n"
    "  --since DURATION   only connections that began in the last DURATION (30s, 10m,\n"
    "                     2h, 1d)\n"
    "  --src ADDR|CIDR    only connections from this client address or prefix\n"
    "  --filter ID        only connections that filter ID blocked\n"
    "\n"
    "--json prints {file, connections, blocked, packets}.\n"
    "\n" CLI_SERVICE_HELP_NOTE;

static const char usage_event_show[] =
    "usage: fgexctl events show SEQ [--raw [--dir c2s|s2c]] [--json]\n"
    "\n"
    "Show block SEQ (the seq of `fgexctl --json events`) and what its connection\n"
    "carried: each direction's first bytes as hex and ASCII, the blocked bytes (that\n"
    "never reached the peer) after a marker line. --raw writes the client's bytes\n"
    "(--dir s2c: the server's), blocked ones included, as they are: ready to replay,\n"
    "e.g. `fgexctl events show 42 --raw | nc HOST PORT`.\n";
/* clang-format on */

const char cli_cmd_usage_filter_test[] =
    "usage: fgexctl filter test SERVICE REGEX [--dir c2s|s2c|both] [--nocase] [--json]\n"
    "\n"
    "Try REGEX on the service's capture before adding it: it is compiled exactly as\n"
    "filter add would compile it (same flags, stream or block mode, same checks and\n"
    "warnings, same message for an invalid regex) and run over every connection\n"
    "captured (the workers' and the blocked ones controld keeps). Prints the\n"
    "connections it would have blocked (time, client, direction, the bytes around\n"
    "the match end) and how many of those captured it spares. Nothing is stored.\n"
    "\n"
    "--json prints {hits: [{time, time_ns, src, sport, dir, excerpt (or excerpt_b64),\n"
    "match_end, blocked, filter_id, event_seq, script_function (a script's block)}],\n"
    "total, would_block, spared, warnings}.\n"
    "\n" CLI_SERVICE_HELP_NOTE;

/* Where fgexctl writes the pcap (one command per process); the web API (cmd->in_memory)
 * leaves it alone and asks for the bytes (cli_cmd_capture_pcap). */
static const char *pcap_path;

/* ---- service add/set options ---- */

static int parse_u32(struct cli_cmd *cmd, const char *opt, const char *v, uint32_t max,
                     uint32_t *out)
{
    unsigned long n;

    if (!cli_args_all_digits(v) || strlen(v) > 9 || (n = strtoul(v, NULL, 10)) < 1 || n > max)
        return cli_args_fail(cmd, CLI_EXIT_INVALID, "invalid %s '%.60s': expected 1..%" PRIu32, opt,
                             v, max);
    *out = (uint32_t)n;
    return 0;
}

int cli_cmd_capture_opts(struct cli_cmd *cmd, const struct cli_args_raw *raw,
                         protobuf_c_boolean *has_on, protobuf_c_boolean *on,
                         protobuf_c_boolean *has_conns, uint32_t *conns,
                         protobuf_c_boolean *has_bytes, uint32_t *bytes, bool *any)
{
    const char *v;
    int rc;

    if ((v = cli_args_opt(raw, CLI_OPT_CAPTURE))) {
        rc = cli_args_parse_onoff(cmd, v, on);
        if (rc < 0)
            return rc;
        *has_on = 1;
        *any = true;
    }
    if ((v = cli_args_opt(raw, CLI_OPT_CAPTURE_CONNS))) {
        rc = parse_u32(cmd, "--capture-conns", v, FGX_CAP_CONNS_MAX, conns);
        if (rc < 0)
            return rc;
        *has_conns = 1;
        *any = true;
    }
    if ((v = cli_args_opt(raw, CLI_OPT_CAPTURE_BYTES))) {
        rc = parse_u32(cmd, "--capture-bytes", v, FGX_CAP_BYTES_MAX, bytes);
        if (rc < 0)
            return rc;
        *has_bytes = 1;
        *any = true;
    }
    return 0;
}

/* ---- capture: the request ---- */

/* "30s", "10m", "2h", "1d" (or plain seconds) in ns. */
static int parse_duration(const char *s, uint64_t *ns)
{
    char *end;
    unsigned long long v;
    uint64_t mul = 1;

    if (*s < '0' || *s > '9')
        return -EINVAL;
    v = strtoull(s, &end, 10);
    if (*end == 's' || *end == '\0')
        mul = 1;
    else if (*end == 'm')
        mul = 60;
    else if (*end == 'h')
        mul = 3600;
    else if (*end == 'd')
        mul = 86400;
    else
        return -EINVAL;
    if (*end != '\0' && end[1] != '\0')
        return -EINVAL;
    if (v > 100ull * 365 * 86400 / mul)
        return -EINVAL;
    *ns = v * mul * 1000000000ull;
    return 0;
}

static int build_capture(struct cli_cmd *cmd, const struct cli_cmd_def *spec,
                         const struct cli_args_raw *raw)
{
    Fgx__Ctl__CaptureQuery *m = &cmd->m.capture;
    const char *v;
    int rc;

    fgx__ctl__capture_query__init(m);
    rc = cli_args_check_ref(cmd, spec, raw->pos[0]);
    if (rc < 0)
        return rc;
    m->service = (char *)raw->pos[0];
    v = cli_args_opt(raw, CLI_OPT_PCAP);
    if (!v || !*v)
        return cli_args_fail_usage(cmd, spec, "missing --pcap FILE");
    if (cmd->json && strcmp(v, "-") == 0 && !cmd->in_memory)
        return cli_args_fail_usage(cmd, spec, "--pcap - and --json would both write to stdout");
    if (!cmd->in_memory)
        pcap_path = v;
    if (cli_args_opt(raw, CLI_OPT_BLOCKED)) {
        m->has_blocked = 1;
        m->blocked = 1;
    }
    if ((v = cli_args_opt(raw, CLI_OPT_SINCE))) {
        struct timespec ts;
        uint64_t d, now;

        if (parse_duration(v, &d) < 0)
            return cli_args_fail(cmd, CLI_EXIT_INVALID,
                                 "invalid --since '%.60s': expected a duration (30s, 10m, 2h, 1d)",
                                 v);
        clock_gettime(CLOCK_REALTIME, &ts);
        now = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
        m->has_since_ns = 1;
        m->since_ns = d < now ? now - d : 0;
    }
    if ((v = cli_args_opt(raw, CLI_OPT_SRC)))
        m->src = (char *)v;
    if ((v = cli_args_opt(raw, CLI_OPT_FILTER))) {
        rc = parse_u32(cmd, "--filter", v, UINT32_MAX / 2, &m->filter_id);
        if (rc < 0)
            return rc;
        m->has_filter_id = 1;
    }
    cmd->req.capture = m;
    return 0;
}

/* ---- capture: the pcap ---- */

/* Link-layer addresses: the capture has none, so they are made up. A blocked segment's source
 * address says "BLOCK" (libpcap's pcap format has no per-packet comment; this survives every
 * tool that reads Ethernet and changes nothing above it). */
static const uint8_t mac_client[6] = {0x02, 0, 0, 0, 0, 0x01};
static const uint8_t mac_server[6] = {0x02, 0, 0, 0, 0, 0x02};
static const uint8_t mac_blocked[6] = {0x02, 0x42, 0x4c, 0x4f, 0x43, 0x4b};

#define PKT_MAX 65535
#define SEG_CHUNK 8192 /* payload per packet: a kept segment can be larger than one */

struct pkt {
    uint64_t time_ns;
    size_t order; /* ties keep the order they were made in */
    size_t len;
    uint8_t *data;
};

struct pkts {
    struct pkt *p;
    size_t n, cap;
};

/* One packet of c: from the client (d 0) or the server, TCP flags (0: UDP), payload. */
static int pkt_make(struct pkts *ps, const struct fgx_cap *c, int d, uint64_t t, uint32_t seq,
                    uint32_t ack, uint8_t flags, const uint8_t *pl, size_t plen, bool blocked)
{
    bool v4 = c->family == 4, tcp = c->ipproto == IPPROTO_TCP;
    size_t iph = v4 ? 20 : 40, l4 = tcp ? 20 : 8, len = 14 + iph + l4 + plen;
    const uint8_t *src = d == 0 ? c->caddr : c->saddr, *dst = d == 0 ? c->saddr : c->caddr;
    uint16_t sport = d == 0 ? c->cport : c->sport, dport = d == 0 ? c->sport : c->cport;
    size_t alen = v4 ? 4 : 16;
    uint8_t *b, *ip, *th;
    uint32_t sum;

    if (len > PKT_MAX)
        return -EINVAL;
    if (ps->n == ps->cap) {
        size_t nc = ps->cap ? ps->cap * 2 : 256;
        struct pkt *np = realloc(ps->p, nc * sizeof(*np));

        if (!np)
            return -ENOMEM;
        ps->p = np;
        ps->cap = nc;
    }
    b = calloc(1, len);
    if (!b)
        return -ENOMEM;
    memcpy(b, d == 0 ? mac_server : mac_client, 6);
    memcpy(b + 6, blocked ? mac_blocked : d == 0 ? mac_client : mac_server, 6);
    b[12] = v4 ? 0x08 : 0x86;
    b[13] = v4 ? 0x00 : 0xdd;
    ip = b + 14;
    if (v4) {
        ip[0] = 0x45;
        ip[2] = (uint8_t)((iph + l4 + plen) >> 8);
        ip[3] = (uint8_t)(iph + l4 + plen);
        ip[6] = 0x40; /* DF */
        ip[8] = 64;
        ip[9] = c->ipproto;
        memcpy(ip + 12, src, 4);
        memcpy(ip + 16, dst, 4);
        sum = fgx_csum_fold(fgx_csum_add(0, ip, 20));
        ip[10] = (uint8_t)(sum >> 8);
        ip[11] = (uint8_t)sum;
    } else {
        ip[0] = 0x60;
        ip[4] = (uint8_t)((l4 + plen) >> 8);
        ip[5] = (uint8_t)(l4 + plen);
        ip[6] = c->ipproto;
        ip[7] = 64;
        memcpy(ip + 8, src, 16);
        memcpy(ip + 24, dst, 16);
    }
    th = ip + iph;
    th[0] = (uint8_t)(sport >> 8);
    th[1] = (uint8_t)sport;
    th[2] = (uint8_t)(dport >> 8);
    th[3] = (uint8_t)dport;
    if (tcp) {
        th[4] = (uint8_t)(seq >> 24);
        th[5] = (uint8_t)(seq >> 16);
        th[6] = (uint8_t)(seq >> 8);
        th[7] = (uint8_t)seq;
        th[8] = (uint8_t)(ack >> 24);
        th[9] = (uint8_t)(ack >> 16);
        th[10] = (uint8_t)(ack >> 8);
        th[11] = (uint8_t)ack;
        th[12] = 5 << 4;
        th[13] = flags;
        th[14] = 0xff; /* window 65535 */
        th[15] = 0xff;
    } else {
        th[4] = (uint8_t)((l4 + plen) >> 8);
        th[5] = (uint8_t)(l4 + plen);
    }
    if (plen)
        memcpy(th + l4, pl, plen);
    /* The checksum over the pseudo-header, so tools that check it find it right. */
    sum = fgx_csum_add(0, src, alen);
    sum = fgx_csum_add(sum, dst, alen);
    sum += c->ipproto;
    sum += (uint32_t)(l4 + plen);
    sum = fgx_csum_fold(fgx_csum_add(sum, th, l4 + plen));
    if (!tcp && sum == 0)
        sum = 0xffff;
    th[tcp ? 16 : 6] = (uint8_t)(sum >> 8);
    th[tcp ? 17 : 7] = (uint8_t)sum;
    ps->p[ps->n] = (struct pkt){.time_ns = t, .order = ps->n, .len = len, .data = b};
    ps->n++;
    return 0;
}

enum { TCP_FIN = 0x01, TCP_SYN = 0x02, TCP_RST = 0x04, TCP_PSH = 0x08, TCP_ACK = 0x10 };

/* c's packets: TCP with a handshake made from where each direction started, then its
 * segments in the order seen, each acknowledging what the other side had sent by then. */
static int cap_packets(struct pkts *ps, const struct fgx_cap *c)
{
    bool tcp = c->ipproto == IPPROTO_TCP;
    uint64_t t0 = c->nseg > 0 ? c->seg[0].time_ns : c->start_ns;
    uint32_t upto[2] = {c->isn[0], c->isn[1]};
    int rv = 0;

    if (tcp) {
        rv = pkt_make(ps, c, 0, t0 - 3000, c->isn[0] - 1, 0, TCP_SYN, NULL, 0, false);
        if (rv == 0)
            rv = pkt_make(ps, c, 1, t0 - 2000, c->isn[1] - 1, c->isn[0], TCP_SYN | TCP_ACK, NULL, 0,
                          false);
        if (rv == 0)
            rv = pkt_make(ps, c, 0, t0 - 1000, c->isn[0], c->isn[1], TCP_ACK, NULL, 0, false);
    }
    for (size_t i = 0; rv == 0 && i < c->nseg; i++) {
        const struct fgx_cap_seg *s = &c->seg[i];
        int d = c->seg_dir[i];
        /* a direction with no bytes has no data (its segments are empty) */
        const uint8_t *data = c->data[d] != NULL ? c->data[d] + s->off : NULL;

        if (!tcp) {
            rv = pkt_make(ps, c, d, s->time_ns, 0, 0, 0, data, s->len, s->blocked);
            continue;
        }
        for (size_t o = 0; rv == 0 && o < s->len; o += SEG_CHUNK) {
            size_t n = s->len - o < SEG_CHUNK ? s->len - o : SEG_CHUNK;
            uint32_t seq = c->isn[d] + s->off + (uint32_t)o;

            rv = pkt_make(ps, c, d, s->time_ns, seq, upto[!d], TCP_PSH | TCP_ACK, data + o, n,
                          s->blocked);
            if (!s->blocked && (int32_t)(seq + (uint32_t)n - upto[d]) > 0)
                upto[d] = seq + (uint32_t)n;
        }
        if (rv == 0 && s->blocked && !c->silent) {
            /* fgex reset both ends where they stood: the blocked bytes' receiver expected
             * them, their sender what it had been acknowledged. A script's DROP told
             * nobody (silent): no reset. */
            rv = pkt_make(ps, c, d, s->time_ns + 1000, c->isn[d] + s->off, 0, TCP_RST, NULL, 0,
                          false);
            if (rv == 0)
                rv = pkt_make(ps, c, !d, s->time_ns + 1000, upto[!d], 0, TCP_RST, NULL, 0, false);
        }
    }
    return rv;
}

static int pkt_cmp(const void *a, const void *b)
{
    const struct pkt *x = a, *y = b;

    if (x->time_ns != y->time_ns)
        return x->time_ns < y->time_ns ? -1 : 1;
    return x->order < y->order ? -1 : x->order > y->order;
}

struct pcap_result {
    size_t conns, blocked, packets;
};

/* To path, or with path NULL to fp (which the dump closes). */
static int write_pcap(const Fgx__Ctl__Reply *rep, const char *path, FILE *fp,
                      struct pcap_result *res, char *err, size_t errlen)
{
    struct pkts ps = {0};
    pcap_t *p = NULL;
    pcap_dumper_t *dp = NULL;
    int rv = 0;

    memset(res, 0, sizeof(*res));
    for (size_t i = 0; rv == 0 && i < rep->n_captures; i++) {
        struct fgx_cap c;

        if (fgx_cap_decode(rep->captures[i].data, rep->captures[i].len, &c) < 0)
            continue;
        rv = cap_packets(&ps, &c);
        res->conns++;
        res->blocked += c.blocked;
        fgx_cap_release(&c);
    }
    if (rv < 0) {
        (void)snprintf(err, errlen, "out of memory");
        goto out;
    }
    if (ps.n > 1)
        qsort(ps.p, ps.n, sizeof(*ps.p), pkt_cmp);
    p = pcap_open_dead_with_tstamp_precision(DLT_EN10MB, PKT_MAX, PCAP_TSTAMP_PRECISION_NANO);
    if (!p) {
        (void)snprintf(err, errlen, "libpcap: cannot open a pcap handle");
        rv = -ENOMEM;
        goto out;
    }
    dp = path ? pcap_dump_open(p, path) : pcap_dump_fopen(p, fp);
    if (!dp) {
        (void)snprintf(err, errlen, "%s: %s", path ? path : "pcap", pcap_geterr(p));
        rv = -EIO;
        goto out;
    }
    for (size_t i = 0; i < ps.n; i++) {
        struct pcap_pkthdr h;

        h.ts.tv_sec = (time_t)(ps.p[i].time_ns / 1000000000ull);
        /* A nanosecond handle takes the fraction in ns. */
        h.ts.tv_usec = (suseconds_t)(ps.p[i].time_ns % 1000000000ull);
        h.caplen = h.len = (bpf_u_int32)ps.p[i].len;
        pcap_dump((u_char *)dp, &h, ps.p[i].data);
    }
    res->packets = ps.n;
    if (pcap_dump_flush(dp) != 0) {
        (void)snprintf(err, errlen, "%s: write failed", path ? path : "pcap");
        rv = -EIO;
    }
out:
    if (dp)
        pcap_dump_close(dp);
    else if (!path && fp)
        (void)fclose(fp);
    if (p)
        pcap_close(p);
    for (size_t i = 0; i < ps.n; i++)
        free(ps.p[i].data);
    free(ps.p);
    return rv;
}

int cli_cmd_capture_write(const Fgx__Ctl__Reply *rep, const char *path, size_t *conns, char *err,
                          size_t errlen)
{
    struct pcap_result res;
    int rv = write_pcap(rep, path, NULL, &res, err, errlen);

    if (rv == 0 && conns)
        *conns = res.conns;
    return rv;
}

int cli_cmd_capture_pcap(const Fgx__Ctl__Reply *rep, uint8_t **buf, size_t *len, char *err,
                         size_t errlen)
{
    struct pcap_result res;
    char *data = NULL;
    size_t n = 0;
    FILE *mf = open_memstream(&data, &n);
    int rv;

    if (!mf) {
        (void)snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    rv = write_pcap(rep, NULL, mf, &res, err, errlen); /* closes mf */
    if (rv < 0) {
        free(data);
        return rv;
    }
    *buf = (uint8_t *)data;
    *len = n;
    return 0;
}

int cli_cmd_event_raw(const Fgx__Ctl__Reply *rep, bool s2c, uint8_t **buf, size_t *len)
{
    struct fgx_cap c;
    size_t n;

    if (rep->n_captures == 0 ||
        fgx_cap_decode(rep->captures[0].data, rep->captures[0].len, &c) < 0)
        return -ENOENT;
    n = c.len[s2c ? 1 : 0];
    *buf = malloc(n ? n : 1);
    if (!*buf) {
        fgx_cap_release(&c);
        return -ENOMEM;
    }
    if (n)
        memcpy(*buf, c.data[s2c ? 1 : 0], n);
    *len = n;
    fgx_cap_release(&c);
    return 0;
}

static int human_capture(FILE *f, const Fgx__Ctl__Request *req, const Fgx__Ctl__Reply *rep)
{
    struct pcap_result res;
    char err[512];
    bool out_stdout = strcmp(pcap_path, "-") == 0;

    (void)req;
    if (write_pcap(rep, pcap_path, NULL, &res, err, sizeof(err)) < 0) {
        (void)fprintf(stderr, "fgexctl: capture: %s\n", err);
        return -EIO;
    }
    /* With the pcap on stdout, the summary goes to stderr. */
    (void)fprintf(out_stdout ? stderr : f,
                  "%zu connection(s) (%zu blocked), %zu packet(s) written to %s\n", res.conns,
                  res.blocked, res.packets, out_stdout ? "standard output" : pcap_path);
    return 0;
}

static json_t *json_capture(const Fgx__Ctl__Request *req, const Fgx__Ctl__Reply *rep)
{
    struct pcap_result res;
    char err[512];

    (void)req;
    if (write_pcap(rep, pcap_path, NULL, &res, err, sizeof(err)) < 0) {
        (void)fprintf(stderr, "fgexctl: capture: %s\n", err);
        return NULL;
    }
    return json_pack("{s:s, s:I, s:I, s:I}", "file", pcap_path, "connections",
                     cli_json_int(res.conns), "blocked", cli_json_int(res.blocked), "packets",
                     cli_json_int(res.packets));
}

/* ---- events show ---- */

int cli_cmd_event_show_build(struct cli_cmd *cmd, const struct cli_cmd_def *spec,
                             const struct cli_args_raw *raw)
{
    Fgx__Ctl__EventShow *m = &cmd->m.event_show;
    const char *s = raw->pos[1], *v;

    (void)spec;
    fgx__ctl__event_show__init(m);
    if (!s || !cli_args_all_digits(s) || strlen(s) > 19)
        return cli_args_fail(cmd, CLI_EXIT_INVALID,
                             "events show: invalid SEQ '%.60s': expected an event's seq number",
                             s ? s : "");
    m->seq = strtoull(s, NULL, 10);
    if (cli_args_opt(raw, CLI_OPT_RAW)) {
        m->has_raw = 1;
        m->raw = 1;
    }
    if ((v = cli_args_opt(raw, CLI_OPT_DIR))) {
        if (strcmp(v, "c2s") == 0) {
            m->has_raw_s2c = 0;
        } else if (strcmp(v, "s2c") == 0) {
            m->has_raw_s2c = 1;
            m->raw_s2c = 1;
        } else
            return cli_args_fail(cmd, CLI_EXIT_INVALID,
                                 "events show: invalid --dir '%.60s': use c2s or s2c", v);
    }
    cmd->req.req_case = FGX__CTL__REQUEST__REQ_EVENT_SHOW;
    cmd->req.event_show = m;
    return 0;
}

/* Where the blocked bytes of direction d begin (len[d] when none were blocked). */
static size_t blocked_from(const struct fgx_cap *c, int d)
{
    size_t from = c->len[d];

    for (size_t i = 0; i < c->nseg; i++)
        if (c->seg_dir[i] == d && c->seg[i].blocked && c->seg[i].off < from)
            from = c->seg[i].off;
    return from;
}

static void hexdump(FILE *f, const uint8_t *p, size_t from, size_t to)
{
    for (size_t o = from; o < to; o += 16) {
        (void)fprintf(f, "  %08zx  ", o);
        for (size_t k = 0; k < 16; k++) {
            if (o + k < to)
                (void)fprintf(f, "%02x ", p[o + k]);
            else
                (void)fputs("   ", f);
            if (k == 7)
                (void)fputc(' ', f);
        }
        (void)fputs(" |", f);
        for (size_t k = 0; k < 16 && o + k < to; k++)
            (void)fputc(p[o + k] >= 0x20 && p[o + k] < 0x7f ? p[o + k] : '.', f);
        (void)fputs("|\n", f);
    }
}

static int human_event_show(FILE *f, const Fgx__Ctl__Request *req, const Fgx__Ctl__Reply *rep)
{
    const Fgx__Ctl__Event *e = rep->n_events ? rep->events[0] : NULL;
    bool show_raw = req->event_show && req->event_show->raw;
    int show_raw_dir = req->event_show && req->event_show->raw_s2c ? 1 : 0;
    struct fgx_cap c;
    char t[64], a[INET6_ADDRSTRLEN + 16], b[INET6_ADDRSTRLEN + 16];

    if (!e)
        return 0;
    if (rep->n_captures == 0 ||
        fgx_cap_decode(rep->captures[0].data, rep->captures[0].len, &c) < 0) {
        if (show_raw) {
            (void)fprintf(stderr,
                          "fgexctl: event %" PRIu64 " has no capture (capture off, or "
                          "older than controld's --captures-keep)\n",
                          e->seq);
            return -ENOENT;
        }
        memset(&c, 0, sizeof(c));
    }
    if (show_raw) {
        size_t n = c.len[show_raw_dir];

        if (n > 0 && fwrite(c.data[show_raw_dir], 1, n, f) != n) {
            fgx_cap_release(&c);
            return -EIO;
        }
        fgx_cap_release(&c);
        return fflush(f) == EOF ? -EIO : 0;
    }
    cli_fmt_time(e->time_ns, false, t, sizeof(t));
    cli_fmt_kv_u64(f, "seq:", e->seq);
    cli_fmt_kv(f, "time:", t);
    cli_fmt_kv_str(f, "service:", e->service && *e->service ? e->service : "?");
    if (e->script_kind && e->script_kind[0]) {
        /* a script's block or failure: named by its function, never "filter 0" */
        char who[200];

        (void)snprintf(who, sizeof(who), "script %s %s", e->script_kind,
                       e->script_function && e->script_function[0] ? e->script_function : "-");
        cli_fmt_kv(f, "filter:", who);
    } else {
        cli_fmt_kv_u64(f, "filter:", e->filter_id);
    }
    cli_fmt_kv(f, "dir:", cli_fmt_dir_name(e->dir));
    if (e->src && e->src[0]) {
        cli_fmt_addr_port(e->src, e->sport, a, sizeof(a));
        cli_fmt_addr_port(e->dst, e->dport, b, sizeof(b));
        (void)fprintf(f, "%-11s%s -> %s (%s)\n", "flow:", a, b, cli_fmt_proto_name(e->proto));
    } else {
        /* a script call's failure: its log entry does not name the connection */
        cli_fmt_kv(f, "flow:", "- (not recorded for a script call's failure)");
    }
    if (!c.msg) {
        (void)fputs("no capture kept for this event (capture off, or older than controld's "
                    "--captures-keep)\n",
                    f);
        return 0;
    }
    for (int d = 0; d < 2; d++) {
        size_t bf = blocked_from(&c, d);

        (void)fprintf(f, "\n%s (%zu byte(s) kept", d == 0 ? "client -> server" : "server -> client",
                      c.len[d]);
        if (c.seen[d] > c.len[d])
            (void)fprintf(f, " of %" PRIu64 " seen", c.seen[d]);
        (void)fputs("):\n", f);
        hexdump(f, c.data[d], 0, bf);
        if (bf < c.len[d]) {
            (void)fprintf(f, "  -- blocked from here: these bytes never reached the %s --\n",
                          d == 0 ? "server" : "client");
            hexdump(f, c.data[d], bf, c.len[d]);
        }
    }
    fgx_cap_release(&c);
    return ferror(f) ? -EIO : 0;
}

static json_t *json_cap(const struct fgx_cap *c)
{
    json_t *o = json_object(), *segs = json_array();

    if (!o || !segs)
        goto fail;
    for (size_t i = 0; i < c->nseg; i++) {
        const struct fgx_cap_seg *s = &c->seg[i];
        json_t *j = json_pack(
            "{s:s, s:I, s:I, s:I, s:I, s:b}", "dir", c->seg_dir[i] ? "s2c" : "c2s", "offset",
            cli_json_int(s->off), "seq", cli_json_int(c->isn[c->seg_dir[i]] + s->off), "len",
            cli_json_int(s->len), "time_ns", cli_json_int(s->time_ns), "blocked", s->blocked);

        if (!j || json_array_append_new(segs, j) < 0)
            goto fail;
    }
    if (cli_json_set_bytes(o, "c2s", c->data[0], c->len[0]) < 0 ||
        cli_json_set_bytes(o, "s2c", c->data[1], c->len[1]) < 0 ||
        json_object_set_new(o, "seen_c2s", json_integer((json_int_t)c->seen[0])) < 0 ||
        json_object_set_new(o, "seen_s2c", json_integer((json_int_t)c->seen[1])) < 0 ||
        json_object_set_new(o, "isn_c2s", json_integer(c->isn[0])) < 0 ||
        json_object_set_new(o, "isn_s2c", json_integer(c->isn[1])) < 0 ||
        json_object_set_new(o, "blocked", json_boolean(c->blocked)) < 0 ||
        json_object_set_new(o, "silent", json_boolean(c->silent)) < 0 ||
        json_object_set_new(o, "segments", segs) < 0)
        goto fail_obj;
    return o;
fail:
    json_decref(segs);
fail_obj:
    json_decref(o);
    return NULL;
}

static json_t *json_event_show(const Fgx__Ctl__Request *req, const Fgx__Ctl__Reply *rep)
{
    json_t *o, *ev;
    struct fgx_cap c;

    if (req->event_show && req->event_show->raw) {
        /* --raw writes bytes, not JSON. */
        (void)human_event_show(stdout, req, rep);
        return json_null();
    }
    ev = rep->n_events ? cli_cmd_event_json(rep->events[0]) : json_null();
    o = json_pack("{s:o}", "event", ev);
    if (!o)
        return NULL;
    if (rep->n_captures > 0 &&
        fgx_cap_decode(rep->captures[0].data, rep->captures[0].len, &c) == 0) {
        json_t *j = json_cap(&c);

        fgx_cap_release(&c);
        if (!j || json_object_set_new(o, "capture", j) < 0) {
            json_decref(o);
            return NULL;
        }
    } else if (json_object_set_new(o, "capture", json_null()) < 0) {
        json_decref(o);
        return NULL;
    }
    return o;
}

/* ---- filter test ---- */

int cli_cmd_filter_test_build(struct cli_cmd *cmd, const struct cli_cmd_def *spec,
                              const struct cli_args_raw *raw)
{
    Fgx__Ctl__FilterTest *m = &cmd->m.filter_test;
    int rc;

    fgx__ctl__filter_test__init(m);
    rc = cli_cmd_regex_args(cmd, spec, raw, "filter test", &m->service, &m->regex, &m->has_dir,
                            &m->dir, &m->has_nocase, &m->nocase);
    if (rc < 0)
        return rc;
    cmd->req.filter_test = m;
    return 0;
}

int cli_cmd_filter_test_human(FILE *f, const Fgx__Ctl__Request *req, const Fgx__Ctl__Reply *rep)
{
    static const char *const heads[] = {"TIME", "SRC", "DIR", "BLOCKED-BY", "EXCERPT"};
    const Fgx__Ctl__FilterTestResult *r = rep->filter_test;
    struct cli_table t;
    char buf[INET6_ADDRSTRLEN + 16];
    int rc = 0;

    (void)req;
    if (!r)
        return 0;
    for (size_t i = 0; i < r->n_warnings; i++)
        (void)fprintf(stderr, "fgexctl: warning: %s\n", r->warnings[i]);
    if (r->n_hits > 0) {
        cli_fmt_table_init(&t, heads, 5, 0);
        for (size_t i = 0; i < r->n_hits; i++) {
            const Fgx__Ctl__FilterTestHit *h = r->hits[i];

            cli_fmt_time(h->time_ns, false, buf, sizeof(buf));
            cli_fmt_table_addf(&t, "%s", buf);
            cli_fmt_addr_port(h->src, h->sport, buf, sizeof(buf));
            cli_fmt_table_addf(&t, "%s", buf);
            cli_fmt_table_addf(&t, "%s", cli_fmt_dir_name(h->dir));
            if (h->blocked && h->filter_id == 0)
                /* a script's block: its function (when its event is still in memory) */
                cli_fmt_table_addf(&t, "script %s",
                                   h->script_function && *h->script_function ? h->script_function
                                                                             : "-");
            else if (h->blocked)
                cli_fmt_table_addf(&t, "filter %" PRIu32, h->filter_id);
            else
                cli_fmt_table_addf(&t, "-");
            cli_fmt_table_push(&t, cli_fmt_escape_bytes_dup(h->excerpt.data, h->excerpt.len));
        }
        rc = cli_fmt_table_print(f, &t);
        cli_fmt_table_release(&t);
    }
    (void)fprintf(f, "would block %zu of %" PRIu32 " captured connection(s); spares %" PRIu32 "\n",
                  r->n_hits, r->total, r->spared);
    if (r->has_checker_total)
        (void)fprintf(f, "would break %" PRIu32 " of %" PRIu32 " connection(s) of the game's "
                      "checker; would stop %" PRIu32 " of %" PRIu32 " flag-out connection(s)\n",
                      r->checker_broken, r->checker_total, r->flags_out_stopped,
                      r->flags_out_total);
    return rc;
}

json_t *cli_cmd_filter_test_json(const Fgx__Ctl__Request *req, const Fgx__Ctl__Reply *rep)
{
    const Fgx__Ctl__FilterTestResult *r = rep->filter_test;
    json_t *hits, *warn, *o;

    (void)req;
    if (!r)
        return json_null();
    hits = json_array();
    warn = json_array();
    if (!hits || !warn)
        goto fail;
    for (size_t i = 0; i < r->n_hits; i++) {
        const Fgx__Ctl__FilterTestHit *h = r->hits[i];
        char t[64];
        json_t *j;

        cli_fmt_time(h->time_ns, true, t, sizeof(t));
        j = json_pack("{s:s, s:I, s:o, s:I, s:s, s:I, s:b}", "time", t, "time_ns",
                      cli_json_int(h->time_ns), "src", cli_json_str(h->src), "sport",
                      cli_json_int(h->sport), "dir", cli_fmt_dir_name(h->dir), "match_end",
                      cli_json_int(h->match_end), "blocked", h->blocked);
        if (!j || cli_json_set_bytes(j, "excerpt", h->excerpt.data, h->excerpt.len) < 0 ||
            json_object_set_new(j, "filter_id",
                                h->has_filter_id ? json_integer(h->filter_id) : json_null()) < 0 ||
            json_object_set_new(j, "event_seq",
                                h->has_event_seq ? json_integer((json_int_t)h->event_seq)
                                                 : json_null()) < 0 ||
            (h->script_function && *h->script_function &&
             json_object_set_new(j, "script_function", json_string(h->script_function)) < 0) ||
            json_array_append_new(hits, j) < 0) {
            json_decref(j);
            goto fail;
        }
    }
    for (size_t i = 0; i < r->n_warnings; i++)
        if (json_array_append_new(warn, cli_json_str(r->warnings[i])) < 0)
            goto fail;
    o = json_pack("{s:o, s:I, s:I, s:I, s:o}", "hits", hits, "total", cli_json_int(r->total),
                  "would_block", cli_json_int(r->n_hits), "spared", cli_json_int(r->spared),
                  "warnings", warn);
    /* with a game set (issue 28): the checker's connections and the flag-outs */
    if (o && r->has_checker_total &&
        (json_object_set_new(o, "checker_total", json_integer(r->checker_total)) < 0 ||
         json_object_set_new(o, "checker_broken", json_integer(r->checker_broken)) < 0 ||
         json_object_set_new(o, "flags_out_total", json_integer(r->flags_out_total)) < 0 ||
         json_object_set_new(o, "flags_out_stopped", json_integer(r->flags_out_stopped)) < 0)) {
        json_decref(o);
        return NULL;
    }
    return o;
fail:
    json_decref(hits);
    json_decref(warn);
    return NULL;
}

/* ---- the commands ---- */

static const struct cli_cmd_def capture_cmds[] = {
    {.name = "capture",
     .req = FGX__CTL__REQUEST__REQ_CAPTURE,
     .npos = 1,
     .pos_names = {"SERVICE"},
     .opts = CLI_OPT_PCAP | CLI_OPT_BLOCKED | CLI_OPT_SINCE | CLI_OPT_SRC | CLI_OPT_FILTER,
     .usage = usage_capture,
     .build = build_capture,
     .human = human_capture,
     .json = json_capture},
    /* Parsed as `events show SEQ` by the events command (cmd_events.c); this entry renders
     * its reply. Its name is no word, so it is never matched on the command line. */
    {.name = "events show",
     .req = FGX__CTL__REQUEST__REQ_EVENT_SHOW,
     .npos = 2,
     .pos_names = {"show", "SEQ"},
     .opts = CLI_OPT_RAW | CLI_OPT_DIR,
     .usage = usage_event_show,
     .build = cli_cmd_event_show_build,
     .human = human_event_show,
     .json = json_event_show},
    {.name = NULL},
};

const struct cli_cmd_family cli_cmd_capture = {.group = NULL, .usage = NULL, .cmds = capture_cmds};
