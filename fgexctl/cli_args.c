/* fgexctl input stage: argv -> one control.proto Request. The command families' tables
 * (cmd.c) say which positional arguments and options each command takes and which builder
 * turns them into its request; this file finds the command, scans its arguments (options may
 * come anywhere after the subcommand, and `--` ends them so a regex may start with '-') and
 * offers the builders the value checks the client can judge (ports, enumerations, addresses);
 * controld judges the rest. */
#include "cli_args.h"

#include "cmd.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fgx/version.h"

/* ---- usage texts ------------------------------------------------------------------------- */

/* One line of source per line of help keeps the texts readable. */
/* clang-format off */

static const char usage_main[] =
    "usage: fgexctl [-c URL | -C CONTEXT[,CONTEXT...] | -C all] [--json] [--wait SECS]\n"
    "               COMMAND [ARGS...]\n"
    "\n"
    "Commands:\n"
    "  status                                   version, uptime, services and workers\n"
    "  service add NAME --proto tcp|udp --port N [--ip ADDR|CIDR]\n"
    "              [--layer nfqueue|proxy] [--fail-open] [--midstream reset|scan]\n"
    "  service list\n"
    "  service show|start|stop SERVICE\n"
    "  service rm SERVICE [--yes]               asks first on a terminal\n"
    "  service rename SERVICE NEWNAME\n"
    "  service set SERVICE [--port N] [--ip ADDR|CIDR|any] [--proto tcp|udp]\n"
    "              [--layer nfqueue|proxy] [--fail-open on|off] [--midstream reset|scan]\n"
    "  filter add SERVICE REGEX [--dir c2s|s2c|both] [--nocase] [--log] [--label TEXT]\n"
    "             [--force]\n"
    "  filter list SERVICE\n"
    "  filter enable FILTER [--force]\n"
    "  filter disable|rm FILTER\n"
    "  filter set FILTER [--action block|log] [--label TEXT] [--force]\n"
    "                                           switch a filter to log-only and back\n"
    "  worker list                              the data-path workers and their counters\n"
    "  worker restart nfq|proxy|script|all\n"
    "  stats [SERVICE] [--watch [--interval SEC]]\n"
    "                                           traffic counters per service\n"
    "  events [SERVICE] [--limit N] [--follow]  the latest blocks, with an excerpt\n"
    "  stats --history [SERVICE] [--since 1h]   blocks per minute, the last 48 hours\n"
    "  events [SERVICE] --top src [--since 30m] blocks per source address and filter\n"
    "  regex test REGEX [--nocase] [--proto tcp|udp] FILE|-\n"
    "                                           try a regex on bytes, offline\n"
    "  events show SEQ [--raw]                  one block's capture, hex or raw bytes\n"
    "  capture SERVICE --pcap FILE [--blocked] [--since 10m] [--src ADDR] [--filter ID]\n"
    "                                           captured connections as a pcap\n"
    "  filter test SERVICE REGEX [--dir D] [--nocase]\n"
    "                                           what REGEX would block of the capture\n"
    "  filter import SERVICE FILE [--replace|--sync] [--dry-run] [--force]\n"
    "                                           load a ruleset file, all or nothing\n"
    "  filter export SERVICE                    print a service's filters as a ruleset file\n"
    "  script set SERVICE FILE.py               a Python filter file (Firegex's API), checked\n"
    "  script get|rm|list SERVICE\n"
    "  script enable|disable SERVICE FUNCTION\n"
    "  script log SERVICE [--follow]            tracebacks, timeouts, what scripts print\n"
    "  script test FILE.py --pcap FILE          run a filter file offline over a capture\n"
    "  export FILE                              save the whole configuration as JSON\n"
    "  import FILE [--dry-run]                  restore it (atomically; what it leaves as it\n"
    "                                           was keeps its ids and counters)\n"
    "  history [--since 1h]                     who changed what, and when\n"
    "  undo                                     revert the last change (again: the one before)\n"
    "  redo                                     revert the last undo\n"
    "  login [--password-file F]                log in to a remote controld\n"
    "  logout\n"
    "  passwd [--password-file F] [--expire-sessions]\n"
    "                                           set controld's password\n"
    "  auth on|off                              require the password from remote clients\n"
    "  cert                                     controld's certificate fingerprint\n"
    "  interfaces                               the box's interfaces, addresses, services\n"
    "  reset [--keep-firewall] [--yes]          remove every service, filter and script\n"
    "  fw rule add|rm|move|enable|disable|list ... the firewall: ordered rules, first\n"
    "  fw policy|set|enable|disable|import|export|apply|confirm ...   match wins\n"
    "                                           (`fgexctl fw --help`)\n"
    "  game set --flag REGEX --checker CIDR... [--team CIDR...]\n"
    "  game show                                the game's flag format and checker\n"
    "  version                                  fgexctl's version and controld's\n"
    "  context add NAME URL [--fingerprint FP] [--ca FILE] [--replace]\n"
    "  context use|show|rm NAME                 named controlds (`context list`)\n"
    "  help [COMMAND [SUBCOMMAND]]\n"
    "\n"
    "Options:\n"
    "  -c, --connect URL  controld's control socket (default: $FGEX_URL, else\n"
    "                     " CLI_DEFAULT_URL "), or tls+tcp://HOST:PORT\n"
    "  --fingerprint FP   tls+tcp: accept only the certificate with this SHA-256\n"
    "                     (AB:CD:...) and pin it\n"
    "  --ca FILE          tls+tcp: verify the server against this PEM certificate or CA\n"
    "  -C, --context NAME run on the context NAME (`fgexctl context list`); with\n"
    "                     NAME,NAME... or `all`, on each of them in parallel\n"
    "  --json             print one JSON document on stdout\n"
    "  --wait SECS        a change that finds controld compiling another one waits\n"
    "                     for its turn this long (default 30; 0: fail at once)\n"
    "  -y, --yes          do not ask before removing (`service rm`)\n"
    "  -h, --help         this help; `fgexctl COMMAND --help` for one command\n"
    "  --version          fgexctl's version (`fgexctl version`: controld's too)\n"
    "\n"
    "SERVICE is a service id or name; FILTER is a filter id. Options may follow the\n"
    "arguments; `--` ends the options (for a regex that starts with '-').\n"
    "\n"
    "A tls+tcp server's certificate is pinned on first use in ~/.config/fgex/known_hosts;\n"
    "a changed one is refused. Colours only on a terminal, never with --json or NO_COLOR.\n"
    "Without -c or -C: $FGEX_URL, else the current context, else the local socket. On\n"
    "several contexts, each prints its result prefixed with its name, and the exit status\n"
    "is 0 only if every one succeeded.\n"
    "\n"
    "Exit status: 0 ok, 1 error, 2 usage, 3 not found, 4 invalid argument or URL, 5 exists,\n"
    "6 stored but not confirmed by the worker, 7 login required or refused,\n"
    "8 the server's certificate does not match its pin.\n";

static const char usage_help[] = "usage: fgexctl help [COMMAND [SUBCOMMAND]]\n"
                                 "\n"
                                 "Show the help of fgexctl, of a command family or of one "
                                 "command\n"
                                 "(the same as `fgexctl COMMAND --help`).\n";

static const char version_line[] = CLI_PROG " " FGX_VERSION "\n";

/* clang-format on */

/* ---- options ---------------------------------------------------------------------------- */

enum opt_arg {
    ARG_NONE,
    ARG_REQUIRED,
    ARG_OPTIONAL, /* only as --opt=VALUE */
};

struct opt_def {
    const char *name;
    uint64_t bit;
    enum opt_arg arg;
};

/* Index i of this table is the slot where the value of option bit 1 << i is kept. */
static const struct opt_def opt_defs[CLI_NOPTS] = {
    {"--proto", CLI_OPT_PROTO, ARG_REQUIRED},
    {"--port", CLI_OPT_PORT, ARG_REQUIRED},
    {"--ip", CLI_OPT_IP, ARG_REQUIRED},
    {"--layer", CLI_OPT_LAYER, ARG_REQUIRED},
    {"--fail-open", CLI_OPT_FAIL_OPEN_FLAG, ARG_OPTIONAL},
    {"--fail-open", CLI_OPT_FAIL_OPEN_ARG, ARG_REQUIRED},
    {"--dir", CLI_OPT_DIR, ARG_REQUIRED},
    {"--nocase", CLI_OPT_NOCASE, ARG_NONE},
    {"--watch", CLI_OPT_WATCH, ARG_NONE},
    {"--interval", CLI_OPT_INTERVAL, ARG_REQUIRED},
    {"--limit", CLI_OPT_LIMIT, ARG_REQUIRED},
    {"--follow", CLI_OPT_FOLLOW, ARG_NONE},
    {"--password-file", CLI_OPT_PASSWORD_FILE, ARG_REQUIRED},
    {"--expire-sessions", CLI_OPT_EXPIRE, ARG_NONE},
    {"--replace", CLI_OPT_REPLACE, ARG_NONE},
    {"--midstream", CLI_OPT_MIDSTREAM, ARG_REQUIRED},
    {"--sync", CLI_OPT_SYNC, ARG_NONE},
    {"--dry-run", CLI_OPT_DRY_RUN, ARG_NONE},
    {"--since", CLI_OPT_SINCE, ARG_REQUIRED},
    {"--history", CLI_OPT_HISTORY, ARG_NONE},
    {"--log", CLI_OPT_LOG, ARG_NONE},
    {"--action", CLI_OPT_ACTION, ARG_REQUIRED},
    {"--label", CLI_OPT_LABEL, ARG_REQUIRED},
    {"--top", CLI_OPT_TOP, ARG_REQUIRED},
    {"--addr", CLI_OPT_ADDR, ARG_REQUIRED},
    {"--to", CLI_OPT_TO, ARG_REQUIRED},
    {"--tls-cert", CLI_OPT_TLS_CERT, ARG_REQUIRED},
    {"--tls-key", CLI_OPT_TLS_KEY, ARG_REQUIRED},
    {"--no-tls", CLI_OPT_NO_TLS, ARG_NONE},
    {"--upstream", CLI_OPT_UPSTREAM, ARG_REQUIRED},
    {"--with-secrets", CLI_OPT_WITH_SECRETS, ARG_NONE},
    {"--capture", CLI_OPT_CAPTURE, ARG_REQUIRED},
    {"--capture-bytes", CLI_OPT_CAPTURE_BYTES, ARG_REQUIRED},
    {"--capture-conns", CLI_OPT_CAPTURE_CONNS, ARG_REQUIRED},
    {"--pcap", CLI_OPT_PCAP, ARG_REQUIRED},
    {"--blocked", CLI_OPT_BLOCKED, ARG_NONE},
    {"--src", CLI_OPT_SRC, ARG_REQUIRED},
    {"--filter", CLI_OPT_FILTER, ARG_REQUIRED},
    {"--raw", CLI_OPT_RAW, ARG_NONE},
    {"--deadline", CLI_OPT_DEADLINE, ARG_REQUIRED},
    {"--service", CLI_OPT_SERVICE, ARG_REQUIRED},
    {"--force", CLI_OPT_FORCE, ARG_NONE},
    {"--regex", CLI_OPT_REGEX, ARG_REQUIRED},
    {"--max-conns", CLI_OPT_MAX_CONNS, ARG_REQUIRED},
    {"--over-limit", CLI_OPT_OVER_LIMIT, ARG_REQUIRED},
    {"--first-byte-timeout", CLI_OPT_FIRST_BYTE, ARG_REQUIRED},
    {"--from", CLI_OPT_FROM, ARG_REQUIRED},
    {"--step", CLI_OPT_STEP, ARG_REQUIRED},
    {"--keep-firewall", CLI_OPT_KEEP_FW, ARG_NONE},
    {"--flags", CLI_OPT_FLAGS, ARG_NONE},
    /* 50..59: other branches' */
    [60] = {"--listen", CLI_OPT_LISTEN, ARG_REQUIRED},
};

/* ---- helpers ----------------------------------------------------------------------------- */

int cli_args_fail(struct cli_cmd *cmd, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

int cli_args_fail(struct cli_cmd *cmd, int code, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    (void)vsnprintf(cmd->err, sizeof(cmd->err), fmt, ap);
    va_end(ap);
    cmd->exit_code = code;
    return -EINVAL;
}

/* A usage error in a known command, with a pointer to its help. */
int cli_args_fail_usage(struct cli_cmd *cmd, const struct cli_cmd_def *spec, const char *what)
{
    if (spec->group)
        return cli_args_fail(cmd, CLI_EXIT_USAGE, "%s %s: %s (see 'fgexctl %s %s --help')",
                             spec->group, spec->name, what, spec->group, spec->name);
    return cli_args_fail(cmd, CLI_EXIT_USAGE, "%s: %s (see 'fgexctl %s --help')", spec->name, what,
                         spec->name);
}

bool cli_args_is_help(const char *a)
{
    return strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0;
}

bool cli_args_all_digits(const char *s)
{
    if (!*s)
        return false;
    for (; *s; s++)
        if (*s < '0' || *s > '9')
            return false;
    return true;
}

int cli_args_port(const char *s, unsigned *out)
{
    unsigned long v;

    /* strtoul alone would take " 80", "+80" and "-1" (as a huge number). */
    if (!cli_args_all_digits(s) || strlen(s) > 5)
        return -EINVAL;
    v = strtoul(s, NULL, 10);
    if (v < 1 || v > 65535)
        return -EINVAL;
    *out = (unsigned)v;
    return 0;
}

const char *cli_args_usage(void)
{
    return usage_main;
}

/* A light check of an address or prefix, so a typo is caught before it reaches controld
 * (which checks it again, host bits included). */
bool cli_args_ip_valid(const char *s)
{
    char addr[INET6_ADDRSTRLEN + 1];
    unsigned char bin[16];
    const char *slash = strchr(s, '/');
    size_t alen = slash ? (size_t)(slash - s) : strlen(s);
    int max;

    if (alen == 0 || alen >= sizeof(addr))
        return false;
    memcpy(addr, s, alen);
    addr[alen] = '\0';
    if (inet_pton(AF_INET, addr, bin) == 1)
        max = 32;
    else if (inet_pton(AF_INET6, addr, bin) == 1)
        max = 128;
    else
        return false;
    if (!slash)
        return true;
    return cli_args_all_digits(slash + 1) && strlen(slash + 1) <= 3 && atoi(slash + 1) <= max;
}

/* "", "any" and "*" all mean every address of both families, sent as "". */
int cli_args_parse_ip(struct cli_cmd *cmd, const char *s, char **out)
{
    if (*s == '\0' || strcmp(s, "any") == 0 || strcmp(s, "*") == 0) {
        *out = (char *)"";
        return 0;
    }
    if (!cli_args_ip_valid(s))
        return cli_args_fail(cmd, CLI_EXIT_INVALID,
                             "invalid --ip '%s': expected an IPv4 or IPv6 address or prefix "
                             "(10.0.0.2, 10.0.0.0/24, fd00::/64)",
                             s);
    *out = (char *)s;
    return 0;
}

int cli_args_parse_port(struct cli_cmd *cmd, const char *s, uint32_t *out)
{
    unsigned port;

    if (cli_args_port(s, &port) < 0)
        return cli_args_fail(cmd, CLI_EXIT_INVALID,
                             "invalid port '%s': must be a number from 1 to 65535", s);
    *out = port;
    return 0;
}

int cli_args_parse_proto(struct cli_cmd *cmd, const char *s, Fgx__Ctl__Proto *out)
{
    if (strcmp(s, "tcp") == 0)
        *out = FGX__CTL__PROTO__PROTO_TCP;
    else if (strcmp(s, "udp") == 0)
        *out = FGX__CTL__PROTO__PROTO_UDP;
    else
        return cli_args_fail(cmd, CLI_EXIT_INVALID, "invalid --proto '%s': must be tcp or udp", s);
    return 0;
}

int cli_args_parse_layer(struct cli_cmd *cmd, const char *s, Fgx__Ctl__Layer *out)
{
    if (strcmp(s, "nfqueue") == 0)
        *out = FGX__CTL__LAYER__LAYER_NFQUEUE;
    else if (strcmp(s, "proxy") == 0)
        *out = FGX__CTL__LAYER__LAYER_PROXY;
    else if (strcmp(s, "external") == 0)
        *out = FGX__CTL__LAYER__LAYER_EXTERNAL;
    else
        return cli_args_fail(cmd, CLI_EXIT_INVALID,
                             "invalid --layer '%s': must be nfqueue, proxy or external", s);
    return 0;
}

int cli_args_parse_midstream(struct cli_cmd *cmd, const char *s, Fgx__Ctl__Midstream *out)
{
    if (strcmp(s, "reset") == 0)
        *out = FGX__CTL__MIDSTREAM__MIDSTREAM_RESET;
    else if (strcmp(s, "scan") == 0)
        *out = FGX__CTL__MIDSTREAM__MIDSTREAM_SCAN;
    else
        return cli_args_fail(cmd, CLI_EXIT_INVALID,
                             "invalid --midstream '%s': must be reset or scan", s);
    return 0;
}

int cli_args_parse_dir(struct cli_cmd *cmd, const char *s, Fgx__Ctl__Dir *out)
{
    if (strcmp(s, "both") == 0)
        *out = FGX__CTL__DIR__DIR_BOTH;
    else if (strcmp(s, "c2s") == 0)
        *out = FGX__CTL__DIR__DIR_C2S;
    else if (strcmp(s, "s2c") == 0)
        *out = FGX__CTL__DIR__DIR_S2C;
    else
        return cli_args_fail(cmd, CLI_EXIT_INVALID, "invalid --dir '%s': must be c2s, s2c or both",
                             s);
    return 0;
}

int cli_args_parse_onoff(struct cli_cmd *cmd, const char *s, protobuf_c_boolean *out)
{
    if (strcmp(s, "on") == 0 || strcmp(s, "yes") == 0 || strcmp(s, "true") == 0)
        *out = 1;
    else if (strcmp(s, "off") == 0 || strcmp(s, "no") == 0 || strcmp(s, "false") == 0)
        *out = 0;
    else
        return cli_args_fail(cmd, CLI_EXIT_INVALID, "invalid --fail-open '%s': must be on or off",
                             s);
    return 0;
}

/* A name that is all digits could never be referred to: numbers are read as ids. */
int cli_args_check_name(struct cli_cmd *cmd, const char *name)
{
    if (!name || *name == '\0')
        return cli_args_fail(cmd, CLI_EXIT_INVALID, "a service name cannot be empty");
    if (cli_args_all_digits(name))
        return cli_args_fail(cmd, CLI_EXIT_INVALID,
                             "invalid service name '%s': a number would be read as a service id",
                             name);
    return 0;
}

int cli_args_check_ref(struct cli_cmd *cmd, const struct cli_cmd_def *spec, const char *ref)
{
    if (!ref || *ref == '\0')
        return cli_args_fail(cmd, CLI_EXIT_INVALID, "%s %s: empty %s", spec->group, spec->name,
                             spec->pos_names[0]);
    return 0;
}

/* ---- scanning ---------------------------------------------------------------------------- */

/* -c URL, --connect URL, --connect=URL, and -cURL when glued is allowed (not after the
 * subcommand, where "-cat" is more likely a regex missing its `--`). Returns 1 if argv[*i] was
 * one (and consumed its value, advancing *i), 0 if not, or -EINVAL. */
static int scan_connect(struct cli_cmd *cmd, int argc, char **argv, int *i, bool glued)
{
    const char *a = argv[*i];

    if (strcmp(a, "-c") == 0 || strcmp(a, "--connect") == 0) {
        if (*i + 1 >= argc)
            return cli_args_fail(cmd, CLI_EXIT_USAGE,
                                 "option %s needs a URL (see 'fgexctl --help')", a);
        cmd->url = argv[++*i];
        cmd->url_given = true;
        return 1;
    }
    if (strncmp(a, "--connect=", 10) == 0) {
        cmd->url = a + 10;
        cmd->url_given = true;
        return 1;
    }
    if (strcmp(a, "-C") == 0 || strcmp(a, "--context") == 0) {
        if (*i + 1 >= argc)
            return cli_args_fail(cmd, CLI_EXIT_USAGE,
                                 "option %s needs a context name (see 'fgexctl --help')", a);
        cmd->context = argv[++*i];
        return 1;
    }
    if (strncmp(a, "--context=", 10) == 0) {
        cmd->context = a + 10;
        return 1;
    }
    if (strcmp(a, "--fingerprint") == 0 || strcmp(a, "--ca") == 0) {
        if (*i + 1 >= argc)
            return cli_args_fail(cmd, CLI_EXIT_USAGE,
                                 "option %s needs a value (see 'fgexctl --help')", a);
        if (a[2] == 'f')
            cmd->fingerprint = argv[++*i];
        else
            cmd->ca = argv[++*i];
        return 1;
    }
    if (strncmp(a, "--fingerprint=", 14) == 0) {
        cmd->fingerprint = a + 14;
        return 1;
    }
    if (strncmp(a, "--ca=", 5) == 0) {
        cmd->ca = a + 5;
        return 1;
    }
    if (strcmp(a, "--wait") == 0 || strncmp(a, "--wait=", 7) == 0) {
        const char *v = a[6] == '=' ? a + 7 : NULL;

        if (!v && *i + 1 >= argc)
            return cli_args_fail(cmd, CLI_EXIT_USAGE,
                                 "option --wait needs a number of seconds (see 'fgexctl --help')");
        if (!v)
            v = argv[++*i];
        if (!cli_args_all_digits(v) || strlen(v) > 5 || atoi(v) > CLI_WAIT_MAX_S)
            return cli_args_fail(cmd, CLI_EXIT_INVALID,
                                 "invalid --wait '%.60s': expected seconds, 0 to %d", v,
                                 CLI_WAIT_MAX_S);
        cmd->wait_s = (unsigned)atoi(v);
        return 1;
    }
    if (glued && strncmp(a, "-c", 2) == 0 && a[2] != '\0') {
        cmd->url = a + 2;
        cmd->url_given = true;
        return 1;
    }
    if (glued && strncmp(a, "-C", 2) == 0 && a[2] != '\0') {
        cmd->context = a + 2;
        return 1;
    }
    return 0;
}

static const struct opt_def *opt_find(const char *name, size_t namelen, uint64_t allowed,
                                      size_t *slot)
{
    for (size_t k = 0; k < CLI_NOPTS; k++) {
        if ((opt_defs[k].bit & allowed) && strlen(opt_defs[k].name) == namelen &&
            strncmp(opt_defs[k].name, name, namelen) == 0) {
            *slot = k;
            return &opt_defs[k];
        }
    }
    return NULL;
}

/* Sort a subcommand's arguments (argv[first..argc)) into positionals and options. */
static int scan_args(struct cli_cmd *cmd, const struct cli_cmd_def *spec, int argc, char **argv,
                     int first, struct cli_args_raw *raw)
{
    char what[160];
    bool opts_done = false;
    int rc;

    memset(raw, 0, sizeof(*raw));
    for (int i = first; i < argc; i++) {
        const char *a = argv[i];

        if (!opts_done && a[0] == '-' && a[1] != '\0') {
            const struct opt_def *od;
            const char *eq;
            size_t slot;

            if (strcmp(a, "--") == 0) {
                opts_done = true;
                continue;
            }
            if (strcmp(a, "--json") == 0) {
                cmd->json = true;
                continue;
            }
            if (spec->confirm && (strcmp(a, "--yes") == 0 || strcmp(a, "-y") == 0)) {
                cmd->yes = true;
                continue;
            }
            rc = scan_connect(cmd, argc, argv, &i, false);
            if (rc < 0)
                return rc;
            if (rc > 0)
                continue;
            eq = strchr(a, '=');
            od = opt_find(a, eq ? (size_t)(eq - a) : strlen(a), spec->opts, &slot);
            if (!od) {
                (void)snprintf(what, sizeof(what), "unknown option '%.*s'%s",
                               (int)(eq ? (size_t)(eq - a) : strlen(a)), a,
                               (spec->npos > 0) ? "; put '--' before an argument starting with '-'"
                                                : "");
                return cli_args_fail_usage(cmd, spec, what);
            }
            if (od->arg == ARG_NONE && eq) {
                (void)snprintf(what, sizeof(what), "option %s takes no value", od->name);
                return cli_args_fail_usage(cmd, spec, what);
            }
            if (eq) {
                raw->val[slot] = eq + 1;
            } else if (od->arg == ARG_REQUIRED) {
                if (i + 1 >= argc) {
                    (void)snprintf(what, sizeof(what), "option %s needs a value", od->name);
                    return cli_args_fail_usage(cmd, spec, what);
                }
                raw->val[slot] = argv[++i];
            } else {
                raw->val[slot] = "";
            }
            if (od->bit == CLI_OPT_ADDR) {
                if (raw->naddrs >= CLI_ADDRS_MAX) {
                    (void)snprintf(what, sizeof(what), "at most %d --addr", CLI_ADDRS_MAX);
                    return cli_args_fail_usage(cmd, spec, what);
                }
                raw->addrs[raw->naddrs++] = raw->val[slot];
            }
            continue;
        }
        if (raw->npos >= spec->npos) {
            (void)snprintf(what, sizeof(what), "unexpected argument '%.60s'", a);
            return cli_args_fail_usage(cmd, spec, what);
        }
        raw->pos[raw->npos++] = a;
    }
    if (raw->npos < spec->npos && !spec->pos_optional) {
        (void)snprintf(what, sizeof(what), "missing %s", spec->pos_names[raw->npos]);
        return cli_args_fail_usage(cmd, spec, what);
    }
    return 0;
}

const char *cli_args_opt(const struct cli_args_raw *raw, uint64_t bit)
{
    for (size_t k = 0; k < CLI_NOPTS; k++)
        if (opt_defs[k].bit == bit)
            return raw->val[k];
    return NULL;
}

/* ---- building the request ---------------------------------------------------------------- */

/* Commands that send an Empty: every Empty member of the Request shares its place. */
int cli_args_build_empty(struct cli_cmd *cmd, const struct cli_cmd_def *def,
                         const struct cli_args_raw *raw)
{
    (void)def;
    (void)raw;
    fgx__ctl__empty__init(&cmd->m.empty);
    cmd->req.status = &cmd->m.empty;
    return 0;
}

/* Commands that send one Ref (a service or filter): every Ref member shares its place. */
int cli_args_build_ref(struct cli_cmd *cmd, const struct cli_cmd_def *def,
                       const struct cli_args_raw *raw)
{
    int rc;

    fgx__ctl__ref__init(&cmd->m.ref);
    rc = cli_args_check_ref(cmd, def, raw->pos[0]);
    cmd->m.ref.ref = (char *)raw->pos[0];
    cmd->req.service_show = &cmd->m.ref;
    return rc;
}

void cli_args_opt_info(size_t k, const char **name, uint64_t *bit, int *arg)
{
    *name = opt_defs[k].name;
    *bit = opt_defs[k].bit;
    *arg = opt_defs[k].arg == ARG_NONE ? 0 : opt_defs[k].arg == ARG_REQUIRED ? 1 : 2;
}

int cli_args_build(struct cli_cmd *cmd, const struct cli_cmd_def *spec, struct cli_args_raw *raw)
{
    Fgx__Ctl__Request *r = &cmd->req;
    int rc;

    r->req_case = spec->req;
    cmd->def = spec;
    cmd->pos[0] = raw->pos[0];
    cmd->pos[1] = raw->pos[1];
    rc = spec->build(cmd, spec, raw);
    if (rc < 0) {
        fgx__ctl__request__init(r);
        cmd->watch = cmd->follow = false;
        cmd->file = cmd->password_file = NULL;
        cmd->run_local = NULL;
    }
    return rc;
}

/* ---- the parse --------------------------------------------------------------------------- */

/* The family whose group word is w ("service"), or NULL. */
static const struct cli_cmd_family *group_find(const char *w)
{
    for (size_t f = 0; cli_cmd_families[f]; f++)
        if (cli_cmd_families[f]->group && strcmp(cli_cmd_families[f]->group, w) == 0)
            return cli_cmd_families[f];
    return NULL;
}

/* Find the command named by words w[0..n) ("status", or "service" "add"). Returns NULL and sets
 * *nused to the words it recognised (a group alone is 1). */
static const struct cli_cmd_def *spec_find(char **w, int n, int *nused)
{
    const struct cli_cmd_family *g;

    *nused = 0;
    if (n < 1)
        return NULL;
    g = group_find(w[0]);
    if (g) {
        *nused = 1;
        if (n < 2)
            return NULL;
        for (const struct cli_cmd_def *d = g->cmds; d->name; d++) {
            const char *sp = strchr(d->name, ' ');

            if (!sp && strcmp(d->name, w[1]) == 0) {
                *nused = 2;
                return d;
            }
            /* "rule add": the group's next two words */
            if (sp && n >= 3 && strlen(w[1]) == (size_t)(sp - d->name) &&
                strncmp(d->name, w[1], (size_t)(sp - d->name)) == 0 && strcmp(sp + 1, w[2]) == 0) {
                *nused = 3;
                return d;
            }
        }
        return NULL;
    }
    for (size_t f = 0; cli_cmd_families[f]; f++) {
        if (cli_cmd_families[f]->group)
            continue;
        for (const struct cli_cmd_def *d = cli_cmd_families[f]->cmds; d->name; d++) {
            if (strcmp(d->name, w[0]) == 0) {
                *nused = 1;
                return d;
            }
        }
    }
    return NULL;
}

/* `fgexctl help [COMMAND [SUBCOMMAND]]` */
static int parse_help(struct cli_cmd *cmd, int argc, char **argv, int first)
{
    const struct cli_cmd_def *spec;
    int n = argc - first, used;

    if (n == 0) {
        cmd->help = usage_main;
        return 0;
    }
    if (n == 1 && (cli_args_is_help(argv[first]) || strcmp(argv[first], "help") == 0)) {
        cmd->help = usage_help;
        return 0;
    }
    spec = spec_find(argv + first, n, &used);
    if (spec && n == used) {
        cmd->help = spec->usage;
        return 0;
    }
    if (!spec && used == 1 && n == 1) {
        cmd->help = group_find(argv[first])->usage;
        return 0;
    }
    return cli_args_fail(cmd, CLI_EXIT_USAGE,
                         "help: no such command '%s%s%s' (see 'fgexctl --help')", argv[first],
                         n > 1 ? " " : "", n > 1 ? argv[first + 1] : "");
}

int cli_args_parse(int argc, char **argv, const char *env_url, struct cli_cmd *cmd)
{
    const struct cli_cmd_def *spec;
    struct cli_args_raw raw;
    int i, used, rc;

    memset(cmd, 0, sizeof(*cmd));
    fgx__ctl__request__init(&cmd->req);
    cmd->url = (env_url && *env_url) ? env_url : CLI_DEFAULT_URL;
    cmd->wait_s = CLI_WAIT_DEFAULT_S;

    /* Global options, up to the command word. */
    for (i = 1; i < argc; i++) {
        const char *a = argv[i];

        if (a[0] != '-' || a[1] == '\0')
            break;
        if (strcmp(a, "--") == 0) {
            i++;
            break;
        }
        if (cli_args_is_help(a)) {
            cmd->help = usage_main;
            return 0;
        }
        if (strcmp(a, "--version") == 0) {
            cmd->help = version_line;
            return 0;
        }
        if (strcmp(a, "--json") == 0) {
            cmd->json = true;
            continue;
        }
        if (strcmp(a, "--yes") == 0 || strcmp(a, "-y") == 0) {
            cmd->yes = true;
            continue;
        }
        rc = scan_connect(cmd, argc, argv, &i, true);
        if (rc < 0)
            return rc;
        if (rc == 0)
            return cli_args_fail(cmd, CLI_EXIT_USAGE, "unknown option '%s' (see 'fgexctl --help')",
                                 a);
    }
    if (i >= argc) {
        cmd->help = usage_main;
        return 0;
    }
    if (strcmp(argv[i], "help") == 0)
        return parse_help(cmd, argc, argv, i + 1);

    spec = spec_find(argv + i, argc - i, &used);
    if (!spec) {
        if (used == 0)
            return cli_args_fail(cmd, CLI_EXIT_USAGE, "unknown command '%s' (see 'fgexctl --help')",
                                 argv[i]);
        if (i + 1 >= argc || cli_args_is_help(argv[i + 1])) {
            if (i + 1 < argc) {
                cmd->help = group_find(argv[i])->usage;
                return 0;
            }
            return cli_args_fail(cmd, CLI_EXIT_USAGE,
                                 "%s: missing command (see 'fgexctl %s --help')", argv[i], argv[i]);
        }
        /* the first word of a two-word command ("fw rule") without a known second one */
        for (const struct cli_cmd_def *d = group_find(argv[i])->cmds; d->name; d++) {
            const char *sp = strchr(d->name, ' ');

            if (sp && strlen(argv[i + 1]) == (size_t)(sp - d->name) &&
                strncmp(d->name, argv[i + 1], (size_t)(sp - d->name)) == 0) {
                if (i + 2 >= argc || cli_args_is_help(argv[i + 2])) {
                    if (i + 2 < argc) {
                        cmd->help = group_find(argv[i])->usage;
                        return 0;
                    }
                    return cli_args_fail(cmd, CLI_EXIT_USAGE,
                                         "%s %s: missing command (see 'fgexctl %s --help')",
                                         argv[i], argv[i + 1], argv[i]);
                }
                return cli_args_fail(cmd, CLI_EXIT_USAGE,
                                     "%s %s: unknown command '%s' (see 'fgexctl %s --help')",
                                     argv[i], argv[i + 1], argv[i + 2], argv[i]);
            }
        }
        return cli_args_fail(cmd, CLI_EXIT_USAGE,
                             "%s: unknown command '%s' (see 'fgexctl %s --help')", argv[i],
                             argv[i + 1], argv[i]);
    }
    i += used;

    /* --help anywhere before `--` wins over everything else on the line. */
    for (int k = i; k < argc && strcmp(argv[k], "--") != 0; k++) {
        if (cli_args_is_help(argv[k])) {
            cmd->help = spec->usage;
            return 0;
        }
    }
    if (spec->flags & CLI_CMD_RAW) {
        memset(&raw, 0, sizeof(raw));
        raw.rest = argv + i;
        raw.nrest = argc - i;
    } else {
        rc = scan_args(cmd, spec, argc, argv, i, &raw);
        if (rc < 0)
            return rc;
    }
    cmd->version = (spec->flags & CLI_CMD_VERSION) != 0;
    cmd->offline = (spec->flags & CLI_CMD_OFFLINE) != 0;
    return cli_args_build(cmd, spec, &raw);
}
