/* fgexctl, the service commands: add, list, show, start, stop, rm, rename, set, addr add|rm,
 * and log (its builder and renderers in cmd_svclog.c). */
#include "cmd.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli_fmt.h"
#include "cli_json.h"
#include "fgx/svcaddr.h"

/* ---- usage ---- */

/* clang-format off */
static const char usage_service[] =
    "usage: fgexctl service COMMAND ...\n"
    "\n"
    "Commands:\n"
    "  add NAME --proto tcp|udp|http --port N [--ip ADDR|CIDR] [--layer nfqueue|proxy] [--fail-open]\n"
    "      [--midstream reset|scan] [--capture on|off] [--capture-conns N] [--capture-bytes N]\n"
    "  add NAME --proto tcp|udp [--port N] --addr ADDR[:PORT] [--addr ...] ...\n"
    "  add NAME --proto tcp --addr ADDR[:PORT] ... --layer external --to ADDR:PORT\n"
    "  list\n"
    "  show SERVICE\n"
    "  start SERVICE\n"
    "  stop SERVICE\n"
    "  rm SERVICE [--yes]\n"
    "  rename SERVICE NEWNAME\n"
    "  set SERVICE [--port N] [--ip ADDR|CIDR|any] [--proto tcp|udp|http]\n"
    "      [--layer nfqueue|proxy|external] [--to ADDR:PORT] [--fail-open on|off]\n"
    "      [--midstream reset|scan] [--capture on|off] [--capture-conns N] [--capture-bytes N]\n"
    "      [--tls-cert FILE --tls-key FILE] [--upstream UP] [--no-tls]\n"
    "  addr add SERVICE ADDR[:PORT][,tcp|,tls][,to=PORT]\n"
    "  addr rm SERVICE ADDR[:PORT]\n"
    "  log [SERVICE] [--follow] [--since DURATION] [--limit N]\n"
    "\n" CLI_SERVICE_HELP_NOTE "`fgexctl service COMMAND --help` for one command.\n";

static const char usage_service_add[] =
    "usage: fgexctl service add NAME --proto tcp|udp|http --port N [--ip ADDR|CIDR]\n"
    "                           [--addr ADDR[:PORT]]... [--layer nfqueue|proxy|external]\n"
    "                           [--to ADDR:PORT] [--fail-open] [--midstream reset|scan]\n"
    "                           [--tls-cert FILE --tls-key FILE] [--upstream UP]\n"
    "                           [--capture on|off] [--capture-conns N] [--capture-bytes N]\n"
    "\n"
    "Define a service (it starts active) and print it.\n"
    "\n"
    "  --proto tcp|udp|http    the service's protocol (required); http: TCP carrying HTTP\n"
    "                          (proxy layer only): each connection's HTTP/2 (h2 over TLS,\n"
    "                          h2c) is terminated and each stream filtered as the HTTP/1.1\n"
    "                          exchange it would have been; HTTP/1.1 passes as it is\n"
    "  --port N                its port, 1..65535 (required without --addr; with --addr,\n"
    "                          the port of each --addr that names none)\n"
    "  --ip ADDR|CIDR          only this address or prefix (default: every address of\n"
    "                          both families)\n"
    "  --addr ADDR[:PORT]      one address of the service, again for each more: an IPv4\n"
    "                          address or prefix (10.0.0.2:80, 10.0.0.0/24:80), an IPv6\n"
    "                          one in brackets ([fd00::1]:80), an interface name\n"
    "                          (eth1:80: what comes in on it) or * (any address); instead\n"
    "                          of --ip. After it, proxy layer (TCP, HTTP): ,tcp or ,tls says\n"
    "                          what clients speak there (default: TLS when the service has\n"
    "                          a certificate), ,to=PORT where the service really listens\n"
    "                          (10.0.0.2:8443,tls,to=8080: a second port, over TLS, of the\n"
    "                          service on 8080; same filters, an edge of the service)\n"
    "  --layer nfqueue|proxy|external\n"
    "                          where its traffic is filtered (default: nfqueue); external:\n"
    "                          handed to the team's own proxy at --to, unfiltered by fgex\n"
    "  --to ADDR:PORT          --layer external: the team's proxy, listening on this box\n"
    "                          with IP_TRANSPARENT; it sees each client's own address\n"
    "  --fail-open             let traffic pass unfiltered when the worker cannot take it\n"
    "                          (default: drop it)\n"
    "  --midstream reset|scan  a connection whose earlier bytes fgex did not see (open\n"
    "                          before the service started, across a worker restart, bytes\n"
    "                          sent while it was stopped): reset it when it next sends\n"
    "                          (default), or scan it from then on, missing what it sent\n"
    "  --tls-cert FILE --tls-key FILE  terminate TLS (proxy layer only): the proxy completes\n"
    "                          the client's handshake with this certificate chain and key\n"
    "                          (PEM), filters the plaintext and speaks TLS to the service\n"
    "  --upstream UP           what the proxy speaks to the service, comma-separated:\n"
    "                          tls|plain for a TLS service (default: tls); http1|h2 for\n"
    "                          an HTTP one (default h2: what the client spoke; http1:\n"
    "                          each HTTP/2 stream sent as an HTTP/1.1 request, for a\n"
    "                          service that speaks HTTP/1.1 only)\n"

    "  --capture on|off        keep the first bytes of each direction of the service's\n"
    "                          last connections (default on; see fgexctl capture)\n"
    "  --capture-conns N       how many connections the worker keeps (default 128)\n"
    "  --capture-bytes N       bytes kept per direction (default 16384)\n";

static const char usage_service_list[] =
    "usage: fgexctl service list\n"
    "\n"
    "List every service with its status, filter count and blocked count.\n";

static const char usage_service_show[] =
    "usage: fgexctl service show SERVICE\n"
    "\n"
    "Show one service: its settings, status and counters, then what judges its\n"
    "traffic, in the order it does: its regex filters (all in one scan: their order\n"
    "has no effect, so there is nothing to reorder), then its script's functions, in\n"
    "file order, on the bytes the regexes passed; and its filters.\n" CLI_SERVICE_HELP_NOTE;

static const char usage_service_start[] =
    "usage: fgexctl service start SERVICE\n"
    "\n"
    "Start filtering a service's traffic.\n" CLI_SERVICE_HELP_NOTE;

static const char usage_service_stop[] =
    "usage: fgexctl service stop SERVICE\n"
    "\n"
    "Stop filtering a service: its traffic passes untouched, "
    "its filters are kept.\n" CLI_SERVICE_HELP_NOTE;

static const char usage_service_rm[] =
    "usage: fgexctl service rm SERVICE [--yes]\n"
    "\n"
    "Remove a service and all its filters. On a terminal it asks first; a script passes\n"
    "--yes (without a terminal and without --yes it is refused, exit 2).\n"
    "\n"
    "  -y, --yes   remove without asking\n" CLI_SERVICE_HELP_NOTE;

static const char usage_service_rename[] =
    "usage: fgexctl service rename SERVICE NEWNAME\n"
    "\n"
    "Rename a service.\n" CLI_SERVICE_HELP_NOTE;

static const char usage_service_set[] =
    "usage: fgexctl service set SERVICE [--port N] [--ip ADDR|CIDR|any]\n"
    "                               [--proto tcp|udp|http]\n"
    "                               [--layer nfqueue|proxy|external] [--to ADDR:PORT]\n"
    "                               [--fail-open on|off] [--midstream reset|scan]\n"
    "                               [--tls-cert FILE --tls-key FILE] [--upstream UP]\n"
    "                               [--no-tls] [--capture on|off] [--capture-conns N]\n"
    "                               [--capture-bytes N] [--max-conns N]\n"
    "                               [--over-limit forward|refuse]\n"
    "                               [--first-byte-timeout S]\n"
    "\n"
    "Change a service's settings; at least one option is needed. `--ip any` (or\n"
    "`--ip ''`) matches every address of both families. --port and --ip change the\n"
    "one address of a service that has one (with more, use `service addr`).\n"
    "--layer external needs --to (and a service without filters). --tls-cert/--tls-key\n"
    "give a TLS service a new certificate and key (or make a proxy-layer service a TLS\n"
    "one); --no-tls stops terminating TLS and deletes the stored key. The capture options are those of service add;\n"
    "new bounds start the service's capture afresh.\n"
    "\n"
    "Limits of the service's own (proxy layer only; 0 removes one):\n"
    "  --max-conns N        at most N of its connections open at once, counted over\n"
    "                       every proxy thread (two threads accepting at the same\n"
    "                       moment may each let one more in); a UDP service's\n"
    "                       flows count, each until --udp-idle without a datagram\n"
    "  --over-limit forward|refuse\n"
    "                       what a connection past N gets: refuse (the default)\n"
    "                       resets it at once; forward relays and filters it as\n"
    "                       any other. Either way it is counted: service show\n"
    "                       gives the hits and the first and last time, kept\n"
    "                       across restarts\n"
    "  --first-byte-timeout S\n"
    "                       close (reset) a connection of the service after S\n"
    "                       seconds without a first byte from either side (the\n"
    "                       proxy's own --first-byte-timeout for the others)\n"
    CLI_SERVICE_HELP_NOTE;

static const char usage_service_addr_add[] =
    "usage: fgexctl service addr add SERVICE ADDR[:PORT][,tcp|,tls][,to=PORT]\n"
    "\n"
    "Add an address to a service, running or not: an IPv4 address or prefix\n"
    "(10.0.0.2:80, 10.0.0.0/24:80), an IPv6 one ([fd00::1]:80), an interface name\n"
    "(eth1:80) or * (any address). Without :PORT, the service's port (its first\n"
    "address's). The connections of its other addresses are untouched. An address\n"
    "that overlaps another service's on the same protocol and port is refused.\n"
    "Proxy layer: ,tcp or ,tls is what clients speak there, ,to=PORT the port the\n"
    "service listens on for it (an edge: one service, one set of filters).\n"
    CLI_SERVICE_HELP_NOTE;

static const char usage_service_addr_rm[] =
    "usage: fgexctl service addr rm SERVICE ADDR[:PORT]\n"
    "\n"
    "Remove an address from a service (written as it was added; without :PORT, the\n"
    "service's port). A service keeps at least one. The connections of its other\n"
    "addresses are untouched.\n" CLI_SERVICE_HELP_NOTE;
/* clang-format on */

/* ---- building the request ---- */

#define TLS_PEM_MAX (64u << 10) /* as controld's limit */

/* The PEM file of --tls-cert or --tls-key, read here: fgexctl may run on a laptop, and
 * controld checks what it gets. The bytes live as long as the process (the request points at
 * them). */
static int read_pem(struct cli_cmd *cmd, const char *opt, const char *path, ProtobufCBinaryData *out)
{
    static uint8_t bufs[2][TLS_PEM_MAX + 1];
    uint8_t *buf = bufs[strcmp(opt, "--tls-key") == 0];
    FILE *f;
    size_t n;

    if (cmd->in_memory) {
        /* the web API: the PEM came with the request, and the request points at it */
        const struct cli_blob *b = cli_args_blob(cmd, path);

        if (!b || b->len == 0 || b->len > TLS_PEM_MAX)
            return cli_args_fail(cmd, CLI_EXIT_INVALID, "%s: %s", opt,
                                 !b || b->len == 0 ? "the file is empty"
                                                   : "larger than 64 KiB: not a PEM file");
        out->data = (uint8_t *)b->data;
        out->len = b->len;
        return 0;
    }
    f = fopen(path, "rb");
    if (f == NULL)
        return cli_args_fail(cmd, CLI_EXIT_INVALID, "%s %.200s: cannot read it: %s", opt, path,
                             strerror(errno));
    n = fread(buf, 1, TLS_PEM_MAX + 1, f);
    if (ferror(f)) {
        int e = errno;

        (void)fclose(f);
        return cli_args_fail(cmd, CLI_EXIT_INVALID, "%s %.200s: cannot read it: %s", opt, path,
                             strerror(e));
    }
    (void)fclose(f);
    if (n == 0 || n > TLS_PEM_MAX)
        return cli_args_fail(cmd, CLI_EXIT_INVALID, "%s %.200s: %s", opt, path,
                             n == 0 ? "the file is empty" : "larger than 64 KiB: not a PEM file");
    out->data = buf;
    out->len = n;
    return 0;
}

/* --proto: tcp or udp, or http (TCP, the HTTP service kind). set says http either way, so
 * --proto tcp turns the kind off again. */
static int parse_proto_kind(struct cli_cmd *cmd, const char *v, bool set, Fgx__Ctl__Proto *proto,
                            protobuf_c_boolean *has_http, protobuf_c_boolean *http)
{
    if (strcmp(v, "http") == 0) {
        *proto = FGX__CTL__PROTO__PROTO_TCP;
        *has_http = *http = 1;
        return 0;
    }
    if (strcmp(v, "tcp") != 0 && strcmp(v, "udp") != 0)
        return cli_args_fail(cmd, CLI_EXIT_INVALID, "invalid --proto '%s': must be tcp, udp or http",
                             v);
    if (cli_args_parse_proto(cmd, v, proto) < 0)
        return -EINVAL;
    *has_http = set;
    *http = 0;
    return 0;
}

/* The protocol as the user named it: http for the HTTP kind. */
static const char *svc_proto_name(const Fgx__Ctl__Service *s)
{
    return s->has_http && s->http ? "http" : cli_fmt_proto_name(s->proto);
}

/* --upstream: a comma-separated list of what the proxy speaks to the service, tls|plain (a TLS
 * service's transport) and http1|h2 (an HTTP service's protocol; h2: what the client spoke). */
static int parse_upstream(struct cli_cmd *cmd, const char *u, protobuf_c_boolean *has_up,
                          Fgx__Ctl__Upstream *up, protobuf_c_boolean *has_h1,
                          protobuf_c_boolean *h1)
{
    const char *p = u;

    while (*p != '\0') {
        size_t n = strcspn(p, ",");

        if (n == 3 && memcmp(p, "tls", 3) == 0) {
            *up = FGX__CTL__UPSTREAM__UPSTREAM_TLS;
            *has_up = 1;
        } else if (n == 5 && memcmp(p, "plain", 5) == 0) {
            *up = FGX__CTL__UPSTREAM__UPSTREAM_PLAIN;
            *has_up = 1;
        } else if (n == 5 && memcmp(p, "http1", 5) == 0) {
            *has_h1 = *h1 = 1;
        } else if (n == 2 && memcmp(p, "h2", 2) == 0) {
            *has_h1 = 1;
            *h1 = 0;
        } else {
            return cli_args_fail(cmd, CLI_EXIT_INVALID,
                                 "invalid --upstream '%.60s': must be tls or plain (a TLS service), "
                                 "http1 or h2 (an HTTP one), or both, comma-separated",
                                 u);
        }
        p += n;
        if (*p == ',')
            p++;
    }
    return 0;
}

/* --tls-cert and --tls-key (both or neither) and --upstream. */
static int build_tls(struct cli_cmd *cmd, const struct cli_cmd_def *spec,
                     const struct cli_args_raw *raw, protobuf_c_boolean *has_cert,
                     ProtobufCBinaryData *cert, protobuf_c_boolean *has_key,
                     ProtobufCBinaryData *key, protobuf_c_boolean *has_up, Fgx__Ctl__Upstream *up,
                     protobuf_c_boolean *has_h1, protobuf_c_boolean *h1)
{
    const char *c = cli_args_opt(raw, CLI_OPT_TLS_CERT), *k = cli_args_opt(raw, CLI_OPT_TLS_KEY);
    const char *u = cli_args_opt(raw, CLI_OPT_UPSTREAM);
    int rc = 0;

    if ((c == NULL) != (k == NULL))
        return cli_args_fail_usage(cmd, spec, "--tls-cert and --tls-key go together");
    if (c != NULL) {
        rc = read_pem(cmd, "--tls-cert", c, cert);
        if (rc == 0)
            rc = read_pem(cmd, "--tls-key", k, key);
        *has_cert = *has_key = rc == 0;
    }
    if (rc == 0 && u != NULL)
        rc = parse_upstream(cmd, u, has_up, up, has_h1, h1);
    return rc;
}

static int build_service_add(struct cli_cmd *cmd, const struct cli_cmd_def *spec,
                             const struct cli_args_raw *raw)
{
    Fgx__Ctl__ServiceAdd *m = &cmd->m.service_add;
    bool cap_any = false;
    const char *v;
    int rc;

    fgx__ctl__service_add__init(m);
    rc = cli_args_check_name(cmd, raw->pos[0]);
    if (rc < 0)
        return rc;
    m->name = (char *)raw->pos[0];
    if (!cli_args_opt(raw, CLI_OPT_PROTO))
        return cli_args_fail_usage(cmd, spec, "missing --proto tcp|udp|http");
    if (!cli_args_opt(raw, CLI_OPT_PORT) && raw->naddrs == 0)
        return cli_args_fail_usage(cmd, spec, "missing --port N (or --addr ADDR:PORT)");
    if (raw->naddrs > 0 && cli_args_opt(raw, CLI_OPT_IP))
        return cli_args_fail_usage(cmd, spec, "--ip is the one-address form: use --addr only");
    rc = parse_proto_kind(cmd, cli_args_opt(raw, CLI_OPT_PROTO), false, &m->proto, &m->has_http,
                          &m->http);
    if (rc == 0 && cli_args_opt(raw, CLI_OPT_PORT))
        rc = cli_args_parse_port(cmd, cli_args_opt(raw, CLI_OPT_PORT), &m->port);
    for (int k = 0; rc == 0 && k < raw->naddrs; k++) {
        struct fgx_svcaddr sa;
        const char *why = NULL;

        /* Checked here too, so a typo is named before anything is sent. */
        if (fgx_svcaddr_parse(raw->addrs[k], (uint16_t)m->port, &sa, &why) < 0)
            rc = cli_args_fail(cmd, CLI_EXIT_INVALID, "invalid --addr '%s': %s", raw->addrs[k],
                               why ? why : "use ADDR[:PORT]");
        cmd->addrs[k] = (char *)raw->addrs[k];
    }
    m->n_addrs = (size_t)raw->naddrs;
    m->addrs = cmd->addrs;
    if (rc == 0 && (v = cli_args_opt(raw, CLI_OPT_TO)))
        m->to = (char *)v;
    if (rc == 0 && (v = cli_args_opt(raw, CLI_OPT_IP)))
        rc = cli_args_parse_ip(cmd, v, &m->ip);
    if (rc == 0 && (v = cli_args_opt(raw, CLI_OPT_LAYER))) {
        rc = cli_args_parse_layer(cmd, v, &m->layer);
        m->has_layer = 1;
    }
    if (rc == 0 && (v = cli_args_opt(raw, CLI_OPT_FAIL_OPEN_FLAG))) {
        m->fail_open = 1;
        if (*v)
            rc = cli_args_parse_onoff(cmd, v, &m->fail_open);
        m->has_fail_open = 1;
    }
    if (rc == 0 && (v = cli_args_opt(raw, CLI_OPT_MIDSTREAM))) {
        rc = cli_args_parse_midstream(cmd, v, &m->midstream);
        m->has_midstream = 1;
    }
    if (rc == 0)
        rc = build_tls(cmd, spec, raw, &m->has_tls_cert, &m->tls_cert, &m->has_tls_key,
                       &m->tls_key, &m->has_upstream, &m->upstream, &m->has_upstream_http1,
                       &m->upstream_http1);
    if (rc == 0)
        rc = cli_cmd_capture_opts(cmd, raw, &m->has_capture, &m->capture, &m->has_capture_conns,
                                  &m->capture_conns, &m->has_capture_bytes, &m->capture_bytes,
                                  &cap_any);
    if (rc < 0)
        return rc;
    cmd->req.service_add = m;
    return 0;
}

/* A count or seconds, 0..max, digits only. */
static int limit_u32(struct cli_cmd *cmd, const char *opt, const char *v, uint32_t max,
                     uint32_t *out)
{
    unsigned long n;

    if (!cli_args_all_digits(v) || strlen(v) > 9 || (n = strtoul(v, NULL, 10)) > max)
        return cli_args_fail(cmd, CLI_EXIT_INVALID, "invalid %s '%.60s': expected 0..%" PRIu32,
                             opt, v, max);
    *out = (uint32_t)n;
    return 0;
}

/* --max-conns, --over-limit, --first-byte-timeout (issue 27; controld's bounds). */
static int build_limits(struct cli_cmd *cmd, const struct cli_args_raw *raw,
                        Fgx__Ctl__ServiceSet *m)
{
    const char *v;
    int rc = 0;

    if ((v = cli_args_opt(raw, CLI_OPT_MAX_CONNS))) {
        rc = limit_u32(cmd, "--max-conns", v, 1000000, &m->max_conns);
        m->has_max_conns = 1;
    }
    if (rc == 0 && (v = cli_args_opt(raw, CLI_OPT_OVER_LIMIT))) {
        if (strcmp(v, "forward") != 0 && strcmp(v, "refuse") != 0)
            return cli_args_fail(cmd, CLI_EXIT_INVALID,
                                 "invalid --over-limit '%.60s': must be forward or refuse", v);
        m->has_over_limit_forward = 1;
        m->over_limit_forward = strcmp(v, "forward") == 0;
    }
    if (rc == 0 && (v = cli_args_opt(raw, CLI_OPT_FIRST_BYTE))) {
        rc = limit_u32(cmd, "--first-byte-timeout", v, 86400, &m->first_byte_timeout);
        m->has_first_byte_timeout = 1;
    }
    return rc;
}

static int build_service_set(struct cli_cmd *cmd, const struct cli_cmd_def *spec,
                             const struct cli_args_raw *raw)
{
    Fgx__Ctl__ServiceSet *m = &cmd->m.service_set;
    bool cap_any = false;
    const char *v;
    int rc;

    fgx__ctl__service_set__init(m);
    rc = cli_args_check_ref(cmd, spec, raw->pos[0]);
    if (rc < 0)
        return rc;
    m->ref = (char *)raw->pos[0];
    if ((v = cli_args_opt(raw, CLI_OPT_PORT))) {
        rc = cli_args_parse_port(cmd, v, &m->port);
        m->has_port = 1;
    }
    if (rc == 0 && (v = cli_args_opt(raw, CLI_OPT_IP)))
        rc = cli_args_parse_ip(cmd, v, &m->ip);
    if (rc == 0 && (v = cli_args_opt(raw, CLI_OPT_PROTO))) {
        rc = parse_proto_kind(cmd, v, true, &m->proto, &m->has_http, &m->http);
        m->has_proto = 1;
    }
    if (rc == 0 && (v = cli_args_opt(raw, CLI_OPT_LAYER))) {
        rc = cli_args_parse_layer(cmd, v, &m->layer);
        m->has_layer = 1;
    }
    if (rc == 0 && (v = cli_args_opt(raw, CLI_OPT_FAIL_OPEN_ARG))) {
        rc = cli_args_parse_onoff(cmd, v, &m->fail_open);
        m->has_fail_open = 1;
    }
    if (rc == 0 && (v = cli_args_opt(raw, CLI_OPT_TO)))
        m->to = (char *)v;
    if (rc == 0 && (v = cli_args_opt(raw, CLI_OPT_MIDSTREAM))) {
        rc = cli_args_parse_midstream(cmd, v, &m->midstream);
        m->has_midstream = 1;
    }
    if (rc == 0)
        rc = build_tls(cmd, spec, raw, &m->has_tls_cert, &m->tls_cert, &m->has_tls_key,
                       &m->tls_key, &m->has_upstream, &m->upstream, &m->has_upstream_http1,
                       &m->upstream_http1);
    if (rc == 0 && cli_args_opt(raw, CLI_OPT_NO_TLS))
        m->has_no_tls = m->no_tls = 1;
    if (rc == 0)
        rc = cli_cmd_capture_opts(cmd, raw, &m->has_capture, &m->capture, &m->has_capture_conns,
                                  &m->capture_conns, &m->has_capture_bytes, &m->capture_bytes,
                                  &cap_any);
    if (rc == 0)
        rc = build_limits(cmd, raw, m);
    if (rc < 0)
        return rc;
    if (!m->has_port && !m->ip && !m->has_proto && !m->has_layer && !m->has_fail_open &&
        !m->has_midstream && !m->to && !m->has_tls_cert && !m->has_upstream && !m->has_no_tls &&
        !m->has_upstream_http1 && !m->has_max_conns && !m->has_over_limit_forward &&
        !m->has_first_byte_timeout &&
        !cap_any)
        return cli_args_fail_usage(cmd, spec, "nothing to change");
    cmd->req.service_set = m;
    return 0;
}

static int build_service_addr(struct cli_cmd *cmd, const struct cli_cmd_def *spec,
                              const struct cli_args_raw *raw)
{
    Fgx__Ctl__ServiceAddrChange *m = &cmd->m.service_addr;
    struct fgx_svcaddr sa;
    const char *why = NULL;
    int rc;

    fgx__ctl__service_addr_change__init(m);
    rc = cli_args_check_ref(cmd, spec, raw->pos[0]);
    if (rc < 0)
        return rc;
    /* The port may be left to controld (the service's); the rest is checked here. */
    if (fgx_svcaddr_parse(raw->pos[1], 1, &sa, &why) < 0)
        return cli_args_fail(cmd, CLI_EXIT_INVALID, "invalid address '%s': %s", raw->pos[1],
                             why ? why : "use ADDR[:PORT]");
    m->ref = (char *)raw->pos[0];
    m->addr = (char *)raw->pos[1];
    if (spec->req == FGX__CTL__REQUEST__REQ_SERVICE_ADDR_ADD)
        cmd->req.service_addr_add = m;
    else
        cmd->req.service_addr_rm = m;
    return 0;
}

static int build_service_rename(struct cli_cmd *cmd, const struct cli_cmd_def *spec,
                                const struct cli_args_raw *raw)
{
    int rc;

    fgx__ctl__service_rename__init(&cmd->m.service_rename);
    rc = cli_args_check_ref(cmd, spec, raw->pos[0]);
    if (rc == 0)
        rc = cli_args_check_name(cmd, raw->pos[1]);
    cmd->m.service_rename.ref = (char *)raw->pos[0];
    cmd->m.service_rename.name = (char *)raw->pos[1];
    cmd->req.service_rename = &cmd->m.service_rename;
    return rc;
}

/* ---- output ---- */

/* One address of a service message, as "ADDR:PORT" text. */
static void addr_text(const Fgx__Ctl__ServiceAddr *a, char *buf, size_t len)
{
    struct fgx_svcaddr sa;

    if (a->port == 0 || a->port > 65535 ||
        fgx_svcaddr_parse_addr(a->addr, (uint16_t)a->port, &sa) < 0 ||
        (sa.edge = (uint8_t)a->edge, sa.to_port = (uint16_t)a->to_port,
         fgx_svcaddr_format(&sa, buf, len) < 0))
        (void)snprintf(buf, len, "%s:%u", a->addr ? a->addr : "?", a->port);
}

static const char *addr_kind(const Fgx__Ctl__ServiceAddr *a)
{
    struct fgx_svcaddr sa;

    if (fgx_svcaddr_parse_addr(a->addr, 1, &sa) < 0)
        return "?";
    if (sa.ifname[0])
        return "interface";
    if (sa.cidr.family == 0)
        return "any";
    return sa.cidr.prefix == (sa.cidr.family == 4 ? 32 : 128) ? "address" : "prefix";
}

/* The addresses of s; a controld from before the list sends ip/port alone: that one. */
static size_t service_addrs(const Fgx__Ctl__Service *s, Fgx__Ctl__ServiceAddr *one,
                            Fgx__Ctl__ServiceAddr *const **out)
{
    static Fgx__Ctl__ServiceAddr *ptr;

    if (s->n_addrs > 0) {
        *out = s->addrs;
        return s->n_addrs;
    }
    fgx__ctl__service_addr__init(one);
    one->addr = s->ip ? s->ip : (char *)"";
    one->port = s->port;
    ptr = one;
    *out = &ptr;
    return 1;
}

static void human_service(FILE *f, const Fgx__Ctl__Service *s)
{
    Fgx__Ctl__ServiceAddr one, *const *addrs;
    size_t naddrs = service_addrs(s, &one, &addrs);

    cli_fmt_kv_u64(f, "id:", s->id);
    cli_fmt_kv_str(f, "name:", s->name);
    cli_fmt_kv(f, "proto:", svc_proto_name(s));
    cli_fmt_kv_str(f, "ip:", cli_fmt_ip_text(s->ip));
    cli_fmt_kv_u64(f, "port:", s->port);
    /* ip/port say it all for one address (an interface is not an ip, nor an edge: listed). */
    if (naddrs == 1 && strcmp(addrs[0]->addr ? addrs[0]->addr : "", s->ip ? s->ip : "") == 0 &&
        !addrs[0]->has_edge && !addrs[0]->has_to_port)
        naddrs = 0;
    for (size_t i = 0; i < naddrs; i++) {
        char text[FGX_SVCADDR_TEXT_MAX + 8], esc[2 * FGX_SVCADDR_TEXT_MAX];

        addr_text(addrs[i], text, sizeof(text));
        cli_fmt_escape(text, esc, sizeof(esc));
        cli_fmt_kv(f, i == 0 ? "addresses:" : "", esc);
    }
    cli_fmt_kv(f, "layer:", cli_fmt_layer_name(s->layer));
    if (s->to)
        cli_fmt_kv_str(f, "to:", s->to);
    /* The value ends the line, so colour codes cannot shift the alignment. */
    (void)fprintf(f, "%-11s%s%s%s\n",
                  "status:", cli_fmt_paint(s->active ? CLI_COLOR_OK : CLI_COLOR_WARN),
                  s->active ? "active" : "stopped", cli_fmt_paint(CLI_COLOR_OFF));
    cli_fmt_kv(f, "fail-open:", cli_fmt_yesno(s->fail_open));
    cli_fmt_kv(f, "midstream:", cli_fmt_midstream_name(s));
    if (s->tls) {
        char when[32] = "?";
        time_t t = (time_t)s->tls_not_after;
        struct tm tm;

        if (s->has_tls_not_after && gmtime_r(&t, &tm) != NULL)
            (void)strftime(when, sizeof(when), "%Y-%m-%d %H:%M UTC", &tm);
        (void)fprintf(f, "%-11s%s, upstream %s\n", "tls:", "terminated",
                      s->has_upstream && s->upstream == FGX__CTL__UPSTREAM__UPSTREAM_PLAIN
                          ? "plain"
                          : "tls");
        cli_fmt_kv_str(f, "cert:", s->tls_subject ? s->tls_subject : "?");
        cli_fmt_kv(f, "expires:", when);
    }
    if (s->has_http && s->http)
        cli_fmt_kv(f, "http:",
                   s->has_upstream_http1 && s->upstream_http1
                       ? "HTTP/2 terminated, upstream http1 (streams sent as HTTP/1.1)"
                       : "HTTP/2 terminated, upstream h2 (as the client spoke)");
    /* its own limits (issue 27) and how often connections found it full */
    if (s->max_conns > 0 || s->first_byte_timeout > 0 || s->limit_hits > 0) {
        char lim[160], first[40] = "", last[40] = "";

        if (s->max_conns > 0)
            (void)snprintf(lim, sizeof(lim), "%" PRIu32 " connections, over it %s",
                           s->max_conns, s->over_limit_forward ? "forward" : "refuse");
        else
            (void)snprintf(lim, sizeof(lim), "no connection limit of its own");
        if (s->first_byte_timeout > 0)
            (void)snprintf(lim + strlen(lim), sizeof(lim) - strlen(lim),
                           "; first byte within %" PRIu32 " s", s->first_byte_timeout);
        cli_fmt_kv(f, "limits:", lim);
        if (s->limit_hits > 0) {
            cli_fmt_time(s->limit_first * UINT64_C(1000000000), false, first, sizeof(first));
            cli_fmt_time(s->limit_last * UINT64_C(1000000000), false, last, sizeof(last));
        }
        (void)snprintf(lim, sizeof(lim), "%" PRIu64 "%s%s%s%s", s->limit_hits,
                       s->limit_hits ? " (first " : "", first, s->limit_hits ? ", last " : "",
                       s->limit_hits ? last : "");
        if (s->limit_hits > 0)
            (void)snprintf(lim + strlen(lim), sizeof(lim) - strlen(lim), ")");
        cli_fmt_kv(f, "at limit:", lim);
    }
    /* controld always says; a reply without it is from a controld before capture. */
    if (s->has_capture && !s->capture) {
        cli_fmt_kv(f, "capture:", "off");
    } else if (s->has_capture) {
        char cap[64];

        (void)snprintf(cap, sizeof(cap), "on (%u connections, %u bytes each way)",
                       s->capture_conns ? s->capture_conns : 128,
                       s->capture_bytes ? s->capture_bytes : 16384);
        cli_fmt_kv(f, "capture:", cap);
    }
    cli_fmt_kv_u64(f, "filters:", s->filters);
    cli_fmt_kv_u64(f, "blocked:", s->blocked);
}

static int human_service_table(FILE *f, const Fgx__Ctl__Reply *rep)
{
    static const char *const heads[] = {"ID",        "NAME",    "PROTO",  "IP",
                                        "PORT",      "LAYER",   "STATUS", "FAIL-OPEN",
                                        "MIDSTREAM", "FILTERS", "BLOCKED"};
    struct cli_table t;
    int rc;

    if (rep->n_services == 0) {
        (void)fputs("no services (add one with 'fgexctl service add')\n", f);
        return 0;
    }
    cli_fmt_table_init(&t, heads, 11, 1u << 0 | 1u << 4 | 1u << 9 | 1u << 10);
    for (size_t i = 0; i < rep->n_services; i++) {
        const Fgx__Ctl__Service *s = rep->services[i];

        cli_fmt_table_addf(&t, "%" PRIu32, s->id);
        cli_fmt_table_add_str(&t, s->name);
        cli_fmt_table_addf(&t, "%s", svc_proto_name(s));
        if (s->n_addrs > 1)
            cli_fmt_table_addf(&t, "%s (+%zu)", cli_fmt_ip_text(s->ip), s->n_addrs - 1);
        else
            cli_fmt_table_add_str(&t, cli_fmt_ip_text(s->ip));
        cli_fmt_table_addf(&t, "%" PRIu32, s->port);
        /* A TLS service says so where its layer is: the proxy terminates its TLS. */
        cli_fmt_table_addf(&t, "%s%s", cli_fmt_layer_name(s->layer), s->tls ? "+tls" : "");
        cli_fmt_table_addf(&t, "%s", s->active ? "active" : "stopped");
        cli_fmt_table_addf(&t, "%s", cli_fmt_yesno(s->fail_open));
        cli_fmt_table_addf(&t, "%s", cli_fmt_midstream_name(s));
        cli_fmt_table_addf(&t, "%" PRIu32, s->filters);
        cli_fmt_table_addf(&t, "%" PRIu64, s->blocked);
    }
    rc = cli_fmt_table_print(f, &t);
    cli_fmt_table_release(&t);
    return rc;
}

static json_t *json_service_base(const Fgx__Ctl__Service *s)
{
    Fgx__Ctl__ServiceAddr one, *const *list;
    size_t n = service_addrs(s, &one, &list);
    json_t *o, *addrs = json_array();

    for (size_t i = 0; addrs && i < n; i++) {
        char text[FGX_SVCADDR_TEXT_MAX + 8];

        addr_text(list[i], text, sizeof(text));
        /* its edge and the service's own port only when set (issue 26 point 6) */
        const char *edge = list[i]->has_edge ? fgx_edge_name(list[i]->edge) : NULL;
        json_t *to = list[i]->has_to_port ? json_integer(list[i]->to_port) : NULL;

        if (json_array_append_new(addrs, json_pack("{s:o, s:I, s:s, s:o, s:s*, s:o*}", "addr",
                                                   cli_json_str(list[i]->addr), "port",
                                                   cli_json_int(list[i]->port), "kind",
                                                   addr_kind(list[i]), "text", cli_json_str(text),
                                                   "edge", edge, "to_port", to)) < 0) {
            json_decref(addrs);
            return NULL;
        }
    }
    if (!addrs)
        return NULL;
    o = json_pack("{s:I, s:o, s:s, s:o, s:I, s:o, s:s, s:s, s:b, s:s, s:I, s:I, s:I}", "id",
                  cli_json_int(s->id), "name", cli_json_str(s->name), "proto",
                  svc_proto_name(s), "ip", cli_json_str(s->ip), "port",
                  cli_json_int(s->port), "addrs", addrs, "layer", cli_fmt_layer_name(s->layer),
                  "status", s->active ? "active" : "stopped", "fail_open", s->fail_open,
                  "midstream", cli_fmt_midstream_name(s), "filters", cli_json_int(s->filters),
                  "blocked", cli_json_int(s->blocked), "blocked_removed",
                  cli_json_int(s->blocked_removed));
    if (o && s->has_http && s->http &&
        json_object_set_new(o, "upstream_http",
                            json_string(s->has_upstream_http1 && s->upstream_http1 ? "http1"
                                                                                   : "h2")) < 0) {
        json_decref(o);
        return NULL;
    }
    if (o && s->to && json_object_set_new(o, "to", cli_json_str(s->to)) < 0) {
        json_decref(o);
        return NULL;
    }
    /* TLS fields for every service ("tls": false for plain ones); never the key. */
    if (o != NULL &&
        json_object_update_new(
            o, json_pack("{s:b, s:s*, s:s*, s:o*}", "tls", s->tls, "upstream",
                         !s->tls ? NULL
                         : s->has_upstream && s->upstream == FGX__CTL__UPSTREAM__UPSTREAM_PLAIN
                             ? "plain"
                             : "tls",
                         "tls_subject", s->tls ? s->tls_subject : NULL, "tls_not_after",
                         s->tls && s->has_tls_not_after
                             ? json_integer(cli_json_int(s->tls_not_after))
                             : NULL)) < 0) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static json_t *json_service(const Fgx__Ctl__Service *s)
{
    json_t *o = json_service_base(s);

    /* Its own limits (issue 27): {max_conns (0: none), over_limit, first_byte_timeout (0:
     * the proxy's), hits, first_hit, last_hit (unix seconds, null: none)}. */
    if (o && json_object_set_new(
                 o, "limits",
                 json_pack("{s:I, s:s, s:I, s:I, s:o, s:o}", "max_conns",
                           cli_json_int(s->max_conns), "over_limit",
                           s->over_limit_forward ? "forward" : "refuse", "first_byte_timeout",
                           cli_json_int(s->first_byte_timeout), "hits",
                           cli_json_int(s->limit_hits), "first_hit",
                           s->limit_hits ? json_integer((json_int_t)s->limit_first) : json_null(),
                           "last_hit",
                           s->limit_hits ? json_integer((json_int_t)s->limit_last)
                                         : json_null())) < 0) {
        json_decref(o);
        return NULL;
    }
    /* Capture: 0 bounds are controld's defaults. Absent from a controld before capture. */
    if (o && s->has_capture &&
        (json_object_set_new(o, "capture", json_boolean(s->capture)) < 0 ||
         json_object_set_new(o, "capture_conns", json_integer(s->capture_conns)) < 0 ||
         json_object_set_new(o, "capture_bytes", json_integer(s->capture_bytes)) < 0)) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static json_t *json_service_any(const void *s)
{
    return json_service(s);
}

static int human_list(FILE *f, const Fgx__Ctl__Request *req, const Fgx__Ctl__Reply *rep)
{
    (void)req;
    return human_service_table(f, rep);
}

static json_t *json_list(const Fgx__Ctl__Request *req, const Fgx__Ctl__Reply *rep)
{
    (void)req;
    return cli_fmt_json_list((void *const *)rep->services, rep->n_services, json_service_any);
}

/* The commands that print the service concerned. */
/* A change accepted with a warning (an expired certificate): said on stderr, either format. */
static void warn_reply(const Fgx__Ctl__Reply *rep)
{
    for (size_t i = 0; i < rep->n_warnings; i++)
        (void)fprintf(stderr, "fgexctl: warning: %s\n", rep->warnings[i]);
}

/* show: what judges the traffic, in its order (issue 27). All of a service's regex filters are
 * one hyperscan database scanned once: no filter comes before another (a log filter records
 * its match and the scan goes on; a block ends the connection at the first block match in the
 * stream, whichever filter it is; at that byte every log filter that matches logs too, and the
 * block is the oldest matching filter's: libcommon/reasm.c). The script sees only the bytes the regexes passed, its
 * functions called in file order. */
static void human_judges(FILE *f, const Fgx__Ctl__Reply *rep)
{
    size_t nlog = 0, nblock = 0;
    char name[256];

    for (size_t i = 0; i < rep->n_filters; i++) {
        if (!rep->filters[i]->active)
            continue;
        if (cli_fmt_filter_is_log(rep->filters[i]))
            nlog++;
        else
            nblock++;
    }
    (void)fputs("\njudged by, in this order:\n", f);
    (void)fprintf(f, "  1. its regex filters, all in one scan (their order has no effect): "
                     "%zu block, %zu log; at a block's byte, every log filter matching there "
                     "logs and the block is the oldest matching filter's\n",
                  nblock, nlog);
    if (!rep->script) {
        (void)fputs("  2. no script\n", f);
        return;
    }
    cli_fmt_escape(rep->script->filename ? rep->script->filename : "", name, sizeof(name));
    (void)fprintf(f, "  2. script %s, on the bytes the regexes passed, its functions in file "
                     "order:",
                  name);
    for (size_t i = 0; i < rep->script->n_functions; i++) {
        const Fgx__Ctl__ScriptFunction *fn = rep->script->functions[i];

        cli_fmt_escape(fn->name, name, sizeof(name));
        (void)fprintf(f, "%s %s (line %" PRIu32 "%s)", i ? "," : "", name, fn->line,
                      fn->has_active && !fn->active ? ", disabled" : "");
    }
    (void)fputc('\n', f);
}

static int human_one(FILE *f, const Fgx__Ctl__Request *req, const Fgx__Ctl__Reply *rep)
{
    warn_reply(rep);
    if (rep->n_services > 0)
        human_service(f, rep->services[0]);
    if (req->req_case != FGX__CTL__REQUEST__REQ_SERVICE_SHOW || rep->n_services == 0)
        return 0;
    human_judges(f, rep);
    /* show: the service's filters too, when controld sends them. */
    if (rep->n_filters > 0) {
        (void)fputc('\n', f);
        return cli_fmt_filter_table(f, rep);
    }
    return 0;
}

/* show's "judges" (human_judges()): {"filters": [ids], "script": null or {"filename",
 * "functions": [{"name", "line", "active"}] in file order}}. */
static json_t *json_judges(const Fgx__Ctl__Reply *rep)
{
    json_t *o = json_object(), *ids = json_array(), *sc = json_null(), *fns = NULL;

    for (size_t i = 0; ids && i < rep->n_filters; i++)
        if (json_array_append_new(ids, json_integer(rep->filters[i]->id)) < 0)
            goto fail;
    if (rep->script) {
        fns = json_array();
        for (size_t i = 0; fns && i < rep->script->n_functions; i++) {
            const Fgx__Ctl__ScriptFunction *fn = rep->script->functions[i];

            if (json_array_append_new(fns, json_pack("{s:o, s:I, s:b}", "name",
                                                     cli_json_str(fn->name), "line",
                                                     cli_json_int(fn->line), "active",
                                                     !fn->has_active || fn->active)) < 0)
                goto fail;
        }
        json_decref(sc);
        sc = json_pack("{s:o, s:o}", "filename",
                       cli_json_str_or_null(rep->script->filename), "functions", fns);
        fns = NULL;
    }
    if (!o || !ids || !sc)
        goto fail;
    if (json_object_set_new(o, "filters", ids) < 0) {
        ids = NULL; /* taken even on failure */
        goto fail;
    }
    ids = NULL;
    if (json_object_set_new(o, "script", sc) < 0) {
        sc = NULL;
        goto fail;
    }
    return o;
fail:
    json_decref(fns);
    json_decref(sc);
    json_decref(ids);
    json_decref(o);
    return NULL;
}

static json_t *json_one(const Fgx__Ctl__Request *req, const Fgx__Ctl__Reply *rep)
{
    json_t *o;

    warn_reply(rep);
    if (rep->n_services == 0)
        return json_null();
    o = json_service(rep->services[0]);
    if (o && req->req_case == FGX__CTL__REQUEST__REQ_SERVICE_SHOW &&
        json_object_set_new(o, "judges", json_judges(rep)) < 0) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static int human_rm(FILE *f, const Fgx__Ctl__Request *req, const Fgx__Ctl__Reply *rep)
{
    uint32_t id;

    if (rep->n_services > 0) {
        char name[256];
        cli_fmt_escape(rep->services[0]->name, name, sizeof(name));
        (void)fprintf(f, "removed service %" PRIu32 " (%s)\n", rep->services[0]->id, name);
    } else if (cli_fmt_removed_id(req, rep, &id)) {
        (void)fprintf(f, "removed service %" PRIu32 "\n", id);
    } else {
        (void)fputs("removed\n", f);
    }
    return 0;
}

/* ---- the commands ---- */

#define SERVICE_ONE .human = human_one, .json = json_one

static const struct cli_cmd_def service_cmds[] = {
    {.group = "service",
     .name = "add",
     .req = FGX__CTL__REQUEST__REQ_SERVICE_ADD,
     .npos = 1,
     .pos_names = {"NAME"},
     .opts = CLI_OPT_PROTO | CLI_OPT_PORT | CLI_OPT_IP | CLI_OPT_LAYER | CLI_OPT_FAIL_OPEN_FLAG |
             CLI_OPT_MIDSTREAM | CLI_OPT_ADDR | CLI_OPT_TO | CLI_OPT_TLS_CERT | CLI_OPT_TLS_KEY |
             CLI_OPT_UPSTREAM | CLI_OPT_CAPTURE | CLI_OPT_CAPTURE_BYTES | CLI_OPT_CAPTURE_CONNS,
     .usage = usage_service_add,
     .build = build_service_add,
     SERVICE_ONE,
     .flags = CLI_CMD_CHANGE},
    {.group = "service",
     .name = "list",
     .req = FGX__CTL__REQUEST__REQ_SERVICE_LIST,
     .usage = usage_service_list,
     .build = cli_args_build_empty,
     .human = human_list,
     .json = json_list},
    {.group = "service",
     .name = "show",
     .req = FGX__CTL__REQUEST__REQ_SERVICE_SHOW,
     .npos = 1,
     .pos_names = {"SERVICE"},
     .usage = usage_service_show,
     .build = cli_args_build_ref,
     SERVICE_ONE},
    {.group = "service",
     .name = "start",
     .req = FGX__CTL__REQUEST__REQ_SERVICE_START,
     .npos = 1,
     .pos_names = {"SERVICE"},
     .usage = usage_service_start,
     .build = cli_args_build_ref,
     SERVICE_ONE,
     .flags = CLI_CMD_CHANGE},
    {.group = "service",
     .name = "stop",
     .req = FGX__CTL__REQUEST__REQ_SERVICE_STOP,
     .npos = 1,
     .pos_names = {"SERVICE"},
     .usage = usage_service_stop,
     .build = cli_args_build_ref,
     SERVICE_ONE,
     .flags = CLI_CMD_CHANGE},
    {.group = "service",
     .name = "rm",
     .req = FGX__CTL__REQUEST__REQ_SERVICE_RM,
     .npos = 1,
     .pos_names = {"SERVICE"},
     .usage = usage_service_rm,
     .build = cli_args_build_ref,
     .human = human_rm,
     .json = cli_fmt_json_removed,
     .flags = CLI_CMD_CHANGE,
     .confirm = "remove service %s and all its filters"},
    {.group = "service",
     .name = "rename",
     .req = FGX__CTL__REQUEST__REQ_SERVICE_RENAME,
     .npos = 2,
     .pos_names = {"SERVICE", "NEWNAME"},
     .usage = usage_service_rename,
     .build = build_service_rename,
     SERVICE_ONE,
     .flags = CLI_CMD_CHANGE},
    {.group = "service",
     .name = "set",
     .req = FGX__CTL__REQUEST__REQ_SERVICE_SET,
     .npos = 1,
     .pos_names = {"SERVICE"},
     .opts = CLI_OPT_PORT | CLI_OPT_IP | CLI_OPT_PROTO | CLI_OPT_LAYER | CLI_OPT_FAIL_OPEN_ARG |
             CLI_OPT_MIDSTREAM | CLI_OPT_TO | CLI_OPT_TLS_CERT | CLI_OPT_TLS_KEY | CLI_OPT_UPSTREAM |
             CLI_OPT_NO_TLS | CLI_OPT_CAPTURE | CLI_OPT_CAPTURE_BYTES | CLI_OPT_CAPTURE_CONNS |
             CLI_OPT_MAX_CONNS | CLI_OPT_OVER_LIMIT | CLI_OPT_FIRST_BYTE,
     .usage = usage_service_set,
     .build = build_service_set,
     SERVICE_ONE,
     .flags = CLI_CMD_CHANGE},
    {.group = "service",
     .name = "addr add",
     .req = FGX__CTL__REQUEST__REQ_SERVICE_ADDR_ADD,
     .npos = 2,
     .pos_names = {"SERVICE", "ADDR[:PORT]"},
     .usage = usage_service_addr_add,
     .build = build_service_addr,
     SERVICE_ONE,
     .flags = CLI_CMD_CHANGE},
    {.group = "service",
     .name = "addr rm",
     .req = FGX__CTL__REQUEST__REQ_SERVICE_ADDR_RM,
     .npos = 2,
     .pos_names = {"SERVICE", "ADDR[:PORT]"},
     .usage = usage_service_addr_rm,
     .build = build_service_addr,
     SERVICE_ONE,
     .flags = CLI_CMD_CHANGE},
    {.group = "service",
     .name = "log",
     .req = FGX__CTL__REQUEST__REQ_SERVICE_LOG,
     .npos = 1,
     .pos_names = {"SERVICE"},
     .pos_optional = true,
     .opts = CLI_OPT_FOLLOW | CLI_OPT_SINCE | CLI_OPT_LIMIT,
     .usage = cli_cmd_usage_service_log,
     .build = cli_cmd_service_log_build,
     .human = cli_cmd_service_log_human,
     .json = cli_cmd_service_log_json},
    {.name = NULL},
};

const struct cli_cmd_family cli_cmd_service = {
    .group = "service", .usage = usage_service, .cmds = service_cmds};
