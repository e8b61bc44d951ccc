/* fgexctl input stage: argv -> one control.proto Request. A table of commands says which
 * positional arguments and options each takes; options may come anywhere after the
 * subcommand, and `--` ends them so a regex may start with '-'. Values are checked here when
 * the client can judge them (ports, enumerations, addresses); controld judges the rest. */
#include "cli_args.h"

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

#define SERVICE_HELP_NOTE "SERVICE is a service id or name.\n"

static const char usage_main[] =
    "usage: fgexctl [-c URL] [--json] COMMAND [ARGS...]\n"
    "\n"
    "Commands:\n"
    "  status                                   version, uptime, services and workers\n"
    "  service add NAME --proto tcp|udp --port N [--ip ADDR|CIDR]\n"
    "              [--layer nfqueue|proxy] [--fail-open] [--midstream reset|scan]\n"
    "  service list\n"
    "  service show|start|stop|rm SERVICE\n"
    "  service rename SERVICE NEWNAME\n"
    "  service set SERVICE [--port N] [--ip ADDR|CIDR|any] [--proto tcp|udp]\n"
    "              [--layer nfqueue|proxy] [--fail-open on|off] [--midstream reset|scan]\n"
    "  filter add SERVICE REGEX [--dir c2s|s2c|both] [--nocase]\n"
    "  filter list SERVICE\n"
    "  filter enable|disable|rm FILTER\n"
    "  worker list                              the data-path workers and their counters\n"
    "  worker restart nfq|proxy|all\n"
    "  stats [SERVICE] [--watch [--interval SEC]]\n"
    "                                           traffic counters per service\n"
    "  events [SERVICE] [--limit N] [--follow]  the latest blocks, with an excerpt\n"
    "  filter import SERVICE FILE [--replace]   load a ruleset file, all or nothing\n"
    "  filter export SERVICE                    print a service's filters as a ruleset file\n"
    "  export FILE                              save the whole configuration as JSON\n"
    "  import FILE                              restore it (replaces everything, atomically)\n"
    "  login [--password-file F]                log in to a remote controld\n"
    "  logout\n"
    "  passwd [--password-file F] [--expire-sessions]\n"
    "                                           set controld's password\n"
    "  auth on|off                              require the password from remote clients\n"
    "  cert                                     controld's certificate fingerprint\n"
    "  version                                  fgexctl's version and controld's\n"
    "  help [COMMAND [SUBCOMMAND]]\n"
    "\n"
    "Options:\n"
    "  -c, --connect URL  controld's control socket (default: $FGEX_URL, else\n"
    "                     " CLI_DEFAULT_URL "), or tls+tcp://HOST:PORT\n"
    "  --fingerprint FP   tls+tcp: accept only the certificate with this SHA-256\n"
    "                     (AB:CD:...) and pin it\n"
    "  --ca FILE          tls+tcp: verify the server against this PEM certificate or CA\n"
    "  --json             print one JSON document on stdout\n"
    "  -h, --help         this help; `fgexctl COMMAND --help` for one command\n"
    "  --version          fgexctl's version (`fgexctl version`: controld's too)\n"
    "\n"
    "SERVICE is a service id or name; FILTER is a filter id. Options may follow the\n"
    "arguments; `--` ends the options (for a regex that starts with '-').\n"
    "\n"
    "A tls+tcp server's certificate is pinned on first use in ~/.config/fgex/known_hosts;\n"
    "a changed one is refused. Colours only on a terminal, never with --json or NO_COLOR.\n"
    "\n"
    "Exit status: 0 ok, 1 error, 2 usage, 3 not found, 4 invalid argument or URL, 5 exists,\n"
    "6 stored but not confirmed by the worker, 7 login required or refused,\n"
    "8 the server's certificate does not match its pin.\n";

static const char usage_version[] =
    "usage: fgexctl version\n"
    "\n"
    "Show fgexctl's version, then the version of the controld it reaches.\n"
    "With --json: {client, server}.\n";

static const char usage_help[] = "usage: fgexctl help [COMMAND [SUBCOMMAND]]\n"
                                 "\n"
                                 "Show the help of fgexctl, of a command family or of one "
                                 "command\n"
                                 "(the same as `fgexctl COMMAND --help`).\n";

static const char version_line[] = CLI_PROG " " FGX_VERSION "\n";

static const char usage_status[] =
    "usage: fgexctl status\n"
    "\n"
    "Show controld's version and uptime, the number of services, and its workers.\n";

static const char usage_service[] =
    "usage: fgexctl service COMMAND ...\n"
    "\n"
    "Commands:\n"
    "  add NAME --proto tcp|udp --port N [--ip ADDR|CIDR] [--layer nfqueue|proxy] [--fail-open]\n"
    "      [--midstream reset|scan]\n"
    "  list\n"
    "  show SERVICE\n"
    "  start SERVICE\n"
    "  stop SERVICE\n"
    "  rm SERVICE\n"
    "  rename SERVICE NEWNAME\n"
    "  set SERVICE [--port N] [--ip ADDR|CIDR|any] [--proto tcp|udp] [--layer nfqueue|proxy]\n"
    "      [--fail-open on|off] [--midstream reset|scan]\n"
    "\n" SERVICE_HELP_NOTE "`fgexctl service COMMAND --help` for one command.\n";

static const char usage_service_add[] =
    "usage: fgexctl service add NAME --proto tcp|udp --port N [--ip ADDR|CIDR]\n"
    "                           [--layer nfqueue|proxy] [--fail-open]\n"
    "                           [--midstream reset|scan]\n"
    "\n"
    "Define a service (it starts active) and print it.\n"
    "\n"
    "  --proto tcp|udp         the service's transport protocol (required)\n"
    "  --port N                its port, 1..65535 (required)\n"
    "  --ip ADDR|CIDR          only this address or prefix (default: every address of\n"
    "                          both families)\n"
    "  --layer nfqueue|proxy   where its traffic is filtered (default: nfqueue)\n"
    "  --fail-open             let traffic pass unfiltered when the worker cannot take it\n"
    "                          (default: drop it)\n"
    "  --midstream reset|scan  a connection whose earlier bytes fgex did not see (open\n"
    "                          before the service started, across a worker restart, bytes\n"
    "                          sent while it was stopped): reset it when it next sends\n"
    "                          (default), or scan it from then on, missing what it sent\n";

static const char usage_service_list[] =
    "usage: fgexctl service list\n"
    "\n"
    "List every service with its status, filter count and blocked count.\n";

static const char usage_service_show[] =
    "usage: fgexctl service show SERVICE\n"
    "\n"
    "Show one service: its settings, status and counters.\n" SERVICE_HELP_NOTE;

static const char usage_service_start[] =
    "usage: fgexctl service start SERVICE\n"
    "\n"
    "Start filtering a service's traffic.\n" SERVICE_HELP_NOTE;

static const char usage_service_stop[] =
    "usage: fgexctl service stop SERVICE\n"
    "\n"
    "Stop filtering a service: its traffic passes untouched, "
    "its filters are kept.\n" SERVICE_HELP_NOTE;

static const char usage_service_rm[] =
    "usage: fgexctl service rm SERVICE\n"
    "\n"
    "Remove a service and all its filters.\n" SERVICE_HELP_NOTE;

static const char usage_service_rename[] =
    "usage: fgexctl service rename SERVICE NEWNAME\n"
    "\n"
    "Rename a service.\n" SERVICE_HELP_NOTE;

static const char usage_service_set[] =
    "usage: fgexctl service set SERVICE [--port N] [--ip ADDR|CIDR|any] [--proto tcp|udp]\n"
    "                               [--layer nfqueue|proxy] [--fail-open on|off]\n"
    "                               [--midstream reset|scan]\n"
    "\n"
    "Change a service's settings; at least one option is needed. `--ip any` (or\n"
    "`--ip ''`) matches every address of both families.\n" SERVICE_HELP_NOTE;

static const char usage_filter[] =
    "usage: fgexctl filter COMMAND ...\n"
    "\n"
    "Commands:\n"
    "  add SERVICE REGEX [--dir c2s|s2c|both] [--nocase]\n"
    "  list SERVICE\n"
    "  enable FILTER\n"
    "  disable FILTER\n"
    "  rm FILTER\n"
    "  import SERVICE FILE [--replace]\n"
    "  export SERVICE\n"
    "\n"
    "SERVICE is a service id or name; FILTER is a filter id.\n"
                                   "`fgexctl filter COMMAND --help` for one command.\n";

static const char usage_filter_add[] =
    "usage: fgexctl filter add SERVICE REGEX [--dir c2s|s2c|both] [--nocase]\n"
    "\n"
    "Add a regex to a service: from the moment this returns, a TCP connection whose\n"
    "stream matches is reset, a UDP datagram that matches is dropped. An invalid\n"
    "regex is refused and nothing is stored.\n"
    "\n"
    "  --dir c2s|s2c|both   which direction to scan: client to server, server to\n"
    "                       client, or both (default: both)\n"
    "  --nocase             match case-insensitively\n"
    "\n"
    "Put `--` before a regex that starts with '-'. " SERVICE_HELP_NOTE;

static const char usage_filter_list[] =
    "usage: fgexctl filter list SERVICE\n"
    "\n"
    "List a service's filters with their blocked counts.\n" SERVICE_HELP_NOTE;

static const char usage_filter_enable[] =
    "usage: fgexctl filter enable FILTER\n"
    "\n"
    "Enable a disabled filter. FILTER is a filter id.\n";

static const char usage_filter_disable[] =
    "usage: fgexctl filter disable FILTER\n"
    "\n"
    "Disable a filter without removing it. FILTER is a filter id.\n";

static const char usage_filter_rm[] =
    "usage: fgexctl filter rm FILTER\n"
    "\n"
    "Remove a filter. FILTER is a filter id.\n";

static const char usage_worker[] =
    "usage: fgexctl worker COMMAND ...\n"
    "\n"
    "Commands:\n"
    "  list\n"
    "  restart nfq|proxy|all\n"
    "\n"
    "`fgexctl worker COMMAND --help` for one command.\n";

static const char usage_worker_list[] =
    "usage: fgexctl worker list\n"
    "\n"
    "List controld's data-path workers: kind, pid, state, the last generation of the\n"
    "rules each acknowledged, how often it was restarted, the flows it tracks, the\n"
    "packets the kernel dropped from its queues, and its memory (RSS).\n"
    "With --json: an array of {kind, pid, state, generation, restarts, queue_drops,\n"
    "flows, rss_bytes, truncated, verdict_errors, malformed}, with evasion,\n"
    "midstream_resets and flows_evicted for kind nfq, and conns_refused, unclassified,\n"
    "connect_failed, scan_errors, src_refused, evicted, silent_closed, midstream_resets,\n"
    "midstream_rescan for kind proxy.\n";

static const char usage_worker_restart[] =
    "usage: fgexctl worker restart nfq|proxy|all\n"
    "\n"
    "Restart the NFQUEUE worker, the proxy worker, or both. Returns once each is back\n"
    "and has applied the current rules, then lists the workers as `worker list` does.\n";

static const char usage_stats[] =
    "usage: fgexctl stats [SERVICE] [--json] [--watch [--interval SEC]]\n"
    "\n"
    "Traffic counters per service (every service, or only SERVICE): packets and bytes\n"
    "seen, packets accepted and dropped, flows open now, and connections blocked.\n"
    "Totals survive worker and controld restarts.\n"
    "\n"
    "  --watch           redraw every SEC seconds with the rate per second beside each\n"
    "                    total, until interrupted (Ctrl-C); with --json, print one JSON\n"
    "                    document per line per refresh instead\n"
    "  --interval SEC    the refresh period for --watch (default: 1; e.g. 0.5)\n"
    "\n"
    "The table shows bytes in binary units (KiB, MiB, ...); --json gives exact numbers:\n"
    "an array of {id, name, packets, bytes, accepted, dropped, flows_active, blocked}.\n"
    "\n" SERVICE_HELP_NOTE;

static const char usage_events[] =
    "usage: fgexctl events [SERVICE] [--limit N] [--follow] [--json]\n"
    "\n"
    "The latest blocks (of every service, or only SERVICE), oldest first: when, which\n"
    "service and filter, the direction, the flow's addresses, and the bytes around\n"
    "the end of the match (printable ASCII as is, other bytes as \\xNN).\n"
    "\n"
    "  --limit N    show the newest N events (default: controld's, 100)\n"
    "  --follow     then keep printing new events as they arrive, until interrupted\n"
    "               (Ctrl-C); with --json, one JSON object per line\n"
    "\n"
    "--json without --follow prints an array of {seq, time, time_ns, service_id,\n"
    "service, filter_id, dir, proto, src, sport, dst, dport, excerpt, excerpt_hex}.\n"
    "\n" SERVICE_HELP_NOTE;

#define RULESET_FORMAT_HELP \
    "File format: one filter a line,\n" \
    "\n" \
    "    [c2s|s2c|both] [nocase] [disabled] /REGEX/\n" \
    "\n" \
    "e.g. `c2s nocase /evil[0-9]+/`. The regex is everything between the first and\n" \
    "the last '/' of the line, as is (a '/' inside needs no escape). The direction\n" \
    "defaults to both. Blank lines and lines starting with '#' are ignored.\n"

static const char usage_filter_import[] =
    "usage: fgexctl filter import SERVICE FILE [--replace]\n"
    "\n"
    "Add the filters of a ruleset file (FILE, or - for stdin) to a service, all or\n"
    "nothing: one bad line (its syntax here, its regex in controld) refuses the whole\n"
    "file, names the line, and changes nothing.\n"
    "\n"
    "  --replace   remove the service's other filters, so it has exactly the file's\n"
    "\n" RULESET_FORMAT_HELP SERVICE_HELP_NOTE;

static const char usage_filter_export[] =
    "usage: fgexctl filter export SERVICE\n"
    "\n"
    "Print a service's filters on stdout in the ruleset file format that\n"
    "`filter import` reads (with --json: an array of filters, as `filter list`).\n"
    "\n" RULESET_FORMAT_HELP SERVICE_HELP_NOTE;

static const char usage_export[] =
    "usage: fgexctl export FILE\n"
    "\n"
    "Save controld's whole configuration (services, their filters, settings; never the\n"
    "password hash or sessions) as one JSON document in FILE (mode 0600), or on stdout\n"
    "for `-`. `fgexctl import FILE` restores it. The format is in docs/fgexctl.md.\n";

static const char usage_import[] =
    "usage: fgexctl import FILE\n"
    "\n"
    "Replace controld's whole configuration with FILE (or - for stdin), as written by\n"
    "`fgexctl export`, atomically: a file that is malformed (its line and column are\n"
    "named) or asks for something impossible changes nothing and says why.\n";

static const char usage_login[] =
    "usage: fgexctl [-c URL] login [--password-file F]\n"
    "\n"
    "Log in to controld with its password (the first line of F, else stdin; not echoed\n"
    "on a terminal). The session token is kept in ~/.config/fgex/sessions/ (mode 0600)\n"
    "and sent with every later request to the same URL.\n";

static const char usage_logout[] =
    "usage: fgexctl [-c URL] logout\n"
    "\n"
    "End the session with controld and forget its token.\n";

static const char usage_passwd[] =
    "usage: fgexctl passwd [--password-file F] [--expire-sessions]\n"
    "\n"
    "Set controld's password: the first line of F, else from stdin (asked twice on a\n"
    "terminal). Over the local socket, or by a logged-in remote client.\n"
    "\n"
    "  --expire-sessions   log out every other session\n";

static const char usage_auth[] =
    "usage: fgexctl auth on|off\n"
    "\n"
    "Require the password from remote clients (on), or not (off), from now on.\n";

static const char usage_cert[] =
    "usage: fgexctl cert\n"
    "\n"
    "Print the SHA-256 fingerprint of controld's TLS certificate, to compare with what\n"
    "a client pinned on first use.\n";

/* clang-format on */

/* ---- the command table ------------------------------------------------------------------- */

enum opt_bit {
    OPT_PROTO = 1u << 0,
    OPT_PORT = 1u << 1,
    OPT_IP = 1u << 2,
    OPT_LAYER = 1u << 3,
    OPT_FAIL_OPEN_FLAG = 1u << 4, /* service add: --fail-open [=on|off] */
    OPT_FAIL_OPEN_ARG = 1u << 5,  /* service set: --fail-open on|off */
    OPT_DIR = 1u << 6,
    OPT_NOCASE = 1u << 7,
    OPT_WATCH = 1u << 8,
    OPT_INTERVAL = 1u << 9,
    OPT_LIMIT = 1u << 10,
    OPT_FOLLOW = 1u << 11,
    OPT_PASSWORD_FILE = 1u << 12,
    OPT_EXPIRE = 1u << 13,
    OPT_REPLACE = 1u << 14,
    OPT_MIDSTREAM = 1u << 15,
};

enum opt_arg {
    ARG_NONE,
    ARG_REQUIRED,
    ARG_OPTIONAL, /* only as --opt=VALUE */
};

struct opt_def {
    const char *name;
    unsigned bit;
    enum opt_arg arg;
};

#define NOPTS 16

/* Index i of this table is the slot where the value of option bit 1 << i is kept. */
static const struct opt_def opt_defs[NOPTS] = {
    {"--proto", OPT_PROTO, ARG_REQUIRED},
    {"--port", OPT_PORT, ARG_REQUIRED},
    {"--ip", OPT_IP, ARG_REQUIRED},
    {"--layer", OPT_LAYER, ARG_REQUIRED},
    {"--fail-open", OPT_FAIL_OPEN_FLAG, ARG_OPTIONAL},
    {"--fail-open", OPT_FAIL_OPEN_ARG, ARG_REQUIRED},
    {"--dir", OPT_DIR, ARG_REQUIRED},
    {"--nocase", OPT_NOCASE, ARG_NONE},
    {"--watch", OPT_WATCH, ARG_NONE},
    {"--interval", OPT_INTERVAL, ARG_REQUIRED},
    {"--limit", OPT_LIMIT, ARG_REQUIRED},
    {"--follow", OPT_FOLLOW, ARG_NONE},
    {"--password-file", OPT_PASSWORD_FILE, ARG_REQUIRED},
    {"--expire-sessions", OPT_EXPIRE, ARG_NONE},
    {"--replace", OPT_REPLACE, ARG_NONE},
    {"--midstream", OPT_MIDSTREAM, ARG_REQUIRED},
};

struct cmd_spec {
    const char *group; /* "service", "filter", "worker", or NULL for a top-level command */
    const char *name;
    Fgx__Ctl__Request__ReqCase req;
    int npos; /* number of positional arguments */
    const char *pos_names[2];
    unsigned opts;
    const char *usage;
    bool pos_optional; /* the positionals may be left out ([SERVICE]) */
};

static const struct cmd_spec cmd_specs[] = {
    {NULL, "status", FGX__CTL__REQUEST__REQ_STATUS, 0, {NULL, NULL}, 0, usage_status, false},
    /* a status request, printed as the two versions (cli_cmd.version) */
    {NULL, "version", FGX__CTL__REQUEST__REQ_STATUS, 0, {NULL, NULL}, 0, usage_version, false},
    {"service",
     "add",
     FGX__CTL__REQUEST__REQ_SERVICE_ADD,
     1,
     {"NAME", NULL},
     OPT_PROTO | OPT_PORT | OPT_IP | OPT_LAYER | OPT_FAIL_OPEN_FLAG | OPT_MIDSTREAM,
     usage_service_add,
     false},
    {"service",
     "list",
     FGX__CTL__REQUEST__REQ_SERVICE_LIST,
     0,
     {NULL, NULL},
     0,
     usage_service_list,
     false},
    {"service",
     "show",
     FGX__CTL__REQUEST__REQ_SERVICE_SHOW,
     1,
     {"SERVICE", NULL},
     0,
     usage_service_show,
     false},
    {"service",
     "start",
     FGX__CTL__REQUEST__REQ_SERVICE_START,
     1,
     {"SERVICE", NULL},
     0,
     usage_service_start,
     false},
    {"service",
     "stop",
     FGX__CTL__REQUEST__REQ_SERVICE_STOP,
     1,
     {"SERVICE", NULL},
     0,
     usage_service_stop,
     false},
    {"service",
     "rm",
     FGX__CTL__REQUEST__REQ_SERVICE_RM,
     1,
     {"SERVICE", NULL},
     0,
     usage_service_rm,
     false},
    {"service",
     "rename",
     FGX__CTL__REQUEST__REQ_SERVICE_RENAME,
     2,
     {"SERVICE", "NEWNAME"},
     0,
     usage_service_rename,
     false},
    {"service",
     "set",
     FGX__CTL__REQUEST__REQ_SERVICE_SET,
     1,
     {"SERVICE", NULL},
     OPT_PORT | OPT_IP | OPT_PROTO | OPT_LAYER | OPT_FAIL_OPEN_ARG | OPT_MIDSTREAM,
     usage_service_set,
     false},
    {"filter",
     "add",
     FGX__CTL__REQUEST__REQ_FILTER_ADD,
     2,
     {"SERVICE", "REGEX"},
     OPT_DIR | OPT_NOCASE,
     usage_filter_add,
     false},
    {"filter",
     "list",
     FGX__CTL__REQUEST__REQ_FILTER_LIST,
     1,
     {"SERVICE", NULL},
     0,
     usage_filter_list,
     false},
    {"filter",
     "enable",
     FGX__CTL__REQUEST__REQ_FILTER_ENABLE,
     1,
     {"FILTER", NULL},
     0,
     usage_filter_enable,
     false},
    {"filter",
     "disable",
     FGX__CTL__REQUEST__REQ_FILTER_DISABLE,
     1,
     {"FILTER", NULL},
     0,
     usage_filter_disable,
     false},
    {"filter",
     "rm",
     FGX__CTL__REQUEST__REQ_FILTER_RM,
     1,
     {"FILTER", NULL},
     0,
     usage_filter_rm,
     false},
    {"worker",
     "list",
     FGX__CTL__REQUEST__REQ_WORKER_LIST,
     0,
     {NULL, NULL},
     0,
     usage_worker_list,
     false},
    {"worker",
     "restart",
     FGX__CTL__REQUEST__REQ_WORKER_RESTART,
     1,
     {"KIND", NULL},
     0,
     usage_worker_restart,
     false},
    {NULL,
     "stats",
     FGX__CTL__REQUEST__REQ_STATS,
     1,
     {"SERVICE", NULL},
     OPT_WATCH | OPT_INTERVAL,
     usage_stats,
     true},
    {NULL,
     "events",
     FGX__CTL__REQUEST__REQ_EVENTS,
     1,
     {"SERVICE", NULL},
     OPT_LIMIT | OPT_FOLLOW,
     usage_events,
     true},
    {"filter",
     "import",
     FGX__CTL__REQUEST__REQ_FILTER_IMPORT,
     2,
     {"SERVICE", "FILE"},
     OPT_REPLACE,
     usage_filter_import,
     false},
    {"filter",
     "export",
     FGX__CTL__REQUEST__REQ_FILTER_EXPORT,
     1,
     {"SERVICE", NULL},
     0,
     usage_filter_export,
     false},
    {NULL,
     "login",
     FGX__CTL__REQUEST__REQ_LOGIN,
     0,
     {NULL, NULL},
     OPT_PASSWORD_FILE,
     usage_login,
     false},
    {NULL, "logout", FGX__CTL__REQUEST__REQ_LOGOUT, 0, {NULL, NULL}, 0, usage_logout, false},
    {NULL,
     "passwd",
     FGX__CTL__REQUEST__REQ_PASSWD,
     0,
     {NULL, NULL},
     OPT_PASSWORD_FILE | OPT_EXPIRE,
     usage_passwd,
     false},
    {NULL, "auth", FGX__CTL__REQUEST__REQ_AUTH_SET, 1, {"on|off", NULL}, 0, usage_auth, false},
    {NULL, "cert", FGX__CTL__REQUEST__REQ_CERT, 0, {NULL, NULL}, 0, usage_cert, false},
    {NULL,
     "export",
     FGX__CTL__REQUEST__REQ_CONFIG_EXPORT,
     1,
     {"FILE", NULL},
     0,
     usage_export,
     false},
    {NULL,
     "import",
     FGX__CTL__REQUEST__REQ_CONFIG_IMPORT,
     1,
     {"FILE", NULL},
     0,
     usage_import,
     false},
};

#define NSPECS (sizeof(cmd_specs) / sizeof(cmd_specs[0]))

/* What the scan of a subcommand's arguments found, before any value is interpreted. */
struct args_raw {
    const char *pos[2];
    int npos;
    const char *val[NOPTS]; /* NULL: option not given; "" for a flag given without value */
};

/* ---- helpers ----------------------------------------------------------------------------- */

static int fail(struct cli_cmd *cmd, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail(struct cli_cmd *cmd, int code, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    (void)vsnprintf(cmd->err, sizeof(cmd->err), fmt, ap);
    va_end(ap);
    cmd->exit_code = code;
    return -EINVAL;
}

/* A usage error in a known command, with a pointer to its help. */
static int fail_usage(struct cli_cmd *cmd, const struct cmd_spec *spec, const char *what)
{
    if (spec->group)
        return fail(cmd, CLI_EXIT_USAGE, "%s %s: %s (see 'fgexctl %s %s --help')", spec->group,
                    spec->name, what, spec->group, spec->name);
    return fail(cmd, CLI_EXIT_USAGE, "%s: %s (see 'fgexctl %s --help')", spec->name, what,
                spec->name);
}

static bool is_help(const char *a)
{
    return strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0;
}

static bool all_digits(const char *s)
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
    if (!all_digits(s) || strlen(s) > 5)
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
    return all_digits(slash + 1) && strlen(slash + 1) <= 3 && atoi(slash + 1) <= max;
}

/* "", "any" and "*" all mean every address of both families, sent as "". */
static int parse_ip(struct cli_cmd *cmd, const char *s, char **out)
{
    if (*s == '\0' || strcmp(s, "any") == 0 || strcmp(s, "*") == 0) {
        *out = (char *)"";
        return 0;
    }
    if (!cli_args_ip_valid(s))
        return fail(cmd, CLI_EXIT_INVALID,
                    "invalid --ip '%s': expected an IPv4 or IPv6 address or prefix "
                    "(10.0.0.2, 10.0.0.0/24, fd00::/64)",
                    s);
    *out = (char *)s;
    return 0;
}

static int parse_port(struct cli_cmd *cmd, const char *s, uint32_t *out)
{
    unsigned port;

    if (cli_args_port(s, &port) < 0)
        return fail(cmd, CLI_EXIT_INVALID, "invalid port '%s': must be a number from 1 to 65535",
                    s);
    *out = port;
    return 0;
}

static int parse_proto(struct cli_cmd *cmd, const char *s, Fgx__Ctl__Proto *out)
{
    if (strcmp(s, "tcp") == 0)
        *out = FGX__CTL__PROTO__PROTO_TCP;
    else if (strcmp(s, "udp") == 0)
        *out = FGX__CTL__PROTO__PROTO_UDP;
    else
        return fail(cmd, CLI_EXIT_INVALID, "invalid --proto '%s': must be tcp or udp", s);
    return 0;
}

static int parse_layer(struct cli_cmd *cmd, const char *s, Fgx__Ctl__Layer *out)
{
    if (strcmp(s, "nfqueue") == 0)
        *out = FGX__CTL__LAYER__LAYER_NFQUEUE;
    else if (strcmp(s, "proxy") == 0)
        *out = FGX__CTL__LAYER__LAYER_PROXY;
    else
        return fail(cmd, CLI_EXIT_INVALID, "invalid --layer '%s': must be nfqueue or proxy", s);
    return 0;
}

static int parse_midstream(struct cli_cmd *cmd, const char *s, Fgx__Ctl__Midstream *out)
{
    if (strcmp(s, "reset") == 0)
        *out = FGX__CTL__MIDSTREAM__MIDSTREAM_RESET;
    else if (strcmp(s, "scan") == 0)
        *out = FGX__CTL__MIDSTREAM__MIDSTREAM_SCAN;
    else
        return fail(cmd, CLI_EXIT_INVALID, "invalid --midstream '%s': must be reset or scan", s);
    return 0;
}

static int parse_dir(struct cli_cmd *cmd, const char *s, Fgx__Ctl__Dir *out)
{
    if (strcmp(s, "both") == 0)
        *out = FGX__CTL__DIR__DIR_BOTH;
    else if (strcmp(s, "c2s") == 0)
        *out = FGX__CTL__DIR__DIR_C2S;
    else if (strcmp(s, "s2c") == 0)
        *out = FGX__CTL__DIR__DIR_S2C;
    else
        return fail(cmd, CLI_EXIT_INVALID, "invalid --dir '%s': must be c2s, s2c or both", s);
    return 0;
}

static int parse_onoff(struct cli_cmd *cmd, const char *s, protobuf_c_boolean *out)
{
    if (strcmp(s, "on") == 0 || strcmp(s, "yes") == 0 || strcmp(s, "true") == 0)
        *out = 1;
    else if (strcmp(s, "off") == 0 || strcmp(s, "no") == 0 || strcmp(s, "false") == 0)
        *out = 0;
    else
        return fail(cmd, CLI_EXIT_INVALID, "invalid --fail-open '%s': must be on or off", s);
    return 0;
}

/* A name that is all digits could never be referred to: numbers are read as ids. */
static int check_name(struct cli_cmd *cmd, const char *name)
{
    if (!name || *name == '\0')
        return fail(cmd, CLI_EXIT_INVALID, "a service name cannot be empty");
    if (all_digits(name))
        return fail(cmd, CLI_EXIT_INVALID,
                    "invalid service name '%s': a number would be read as a service id", name);
    return 0;
}

static int check_ref(struct cli_cmd *cmd, const struct cmd_spec *spec, const char *ref)
{
    if (!ref || *ref == '\0')
        return fail(cmd, CLI_EXIT_INVALID, "%s %s: empty %s", spec->group, spec->name,
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
            return fail(cmd, CLI_EXIT_USAGE, "option %s needs a URL (see 'fgexctl --help')", a);
        cmd->url = argv[++*i];
        return 1;
    }
    if (strncmp(a, "--connect=", 10) == 0) {
        cmd->url = a + 10;
        return 1;
    }
    if (strcmp(a, "--fingerprint") == 0 || strcmp(a, "--ca") == 0) {
        if (*i + 1 >= argc)
            return fail(cmd, CLI_EXIT_USAGE, "option %s needs a value (see 'fgexctl --help')", a);
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
    if (glued && strncmp(a, "-c", 2) == 0 && a[2] != '\0') {
        cmd->url = a + 2;
        return 1;
    }
    return 0;
}

static const struct opt_def *opt_find(const char *name, size_t namelen, unsigned allowed,
                                      size_t *slot)
{
    for (size_t k = 0; k < NOPTS; k++) {
        if ((opt_defs[k].bit & allowed) && strlen(opt_defs[k].name) == namelen &&
            strncmp(opt_defs[k].name, name, namelen) == 0) {
            *slot = k;
            return &opt_defs[k];
        }
    }
    return NULL;
}

/* Sort a subcommand's arguments (argv[first..argc)) into positionals and options. */
static int scan_args(struct cli_cmd *cmd, const struct cmd_spec *spec, int argc, char **argv,
                     int first, struct args_raw *raw)
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
                return fail_usage(cmd, spec, what);
            }
            if (od->arg == ARG_NONE && eq) {
                (void)snprintf(what, sizeof(what), "option %s takes no value", od->name);
                return fail_usage(cmd, spec, what);
            }
            if (eq) {
                raw->val[slot] = eq + 1;
            } else if (od->arg == ARG_REQUIRED) {
                if (i + 1 >= argc) {
                    (void)snprintf(what, sizeof(what), "option %s needs a value", od->name);
                    return fail_usage(cmd, spec, what);
                }
                raw->val[slot] = argv[++i];
            } else {
                raw->val[slot] = "";
            }
            continue;
        }
        if (raw->npos >= spec->npos) {
            (void)snprintf(what, sizeof(what), "unexpected argument '%.60s'", a);
            return fail_usage(cmd, spec, what);
        }
        raw->pos[raw->npos++] = a;
    }
    if (raw->npos < spec->npos && !spec->pos_optional) {
        (void)snprintf(what, sizeof(what), "missing %s", spec->pos_names[raw->npos]);
        return fail_usage(cmd, spec, what);
    }
    return 0;
}

static const char *raw_opt(const struct args_raw *raw, unsigned bit)
{
    for (size_t k = 0; k < NOPTS; k++)
        if (opt_defs[k].bit == bit)
            return raw->val[k];
    return NULL;
}

/* ---- building the request ---------------------------------------------------------------- */

static int build_service_add(struct cli_cmd *cmd, const struct cmd_spec *spec,
                             const struct args_raw *raw)
{
    Fgx__Ctl__ServiceAdd *m = &cmd->m.service_add;
    const char *v;
    int rc;

    fgx__ctl__service_add__init(m);
    rc = check_name(cmd, raw->pos[0]);
    if (rc < 0)
        return rc;
    m->name = (char *)raw->pos[0];
    if (!raw_opt(raw, OPT_PROTO))
        return fail_usage(cmd, spec, "missing --proto tcp|udp");
    if (!raw_opt(raw, OPT_PORT))
        return fail_usage(cmd, spec, "missing --port N");
    rc = parse_proto(cmd, raw_opt(raw, OPT_PROTO), &m->proto);
    if (rc == 0)
        rc = parse_port(cmd, raw_opt(raw, OPT_PORT), &m->port);
    if (rc == 0 && (v = raw_opt(raw, OPT_IP)))
        rc = parse_ip(cmd, v, &m->ip);
    if (rc == 0 && (v = raw_opt(raw, OPT_LAYER))) {
        rc = parse_layer(cmd, v, &m->layer);
        m->has_layer = 1;
    }
    if (rc == 0 && (v = raw_opt(raw, OPT_FAIL_OPEN_FLAG))) {
        m->fail_open = 1;
        if (*v)
            rc = parse_onoff(cmd, v, &m->fail_open);
        m->has_fail_open = 1;
    }
    if (rc == 0 && (v = raw_opt(raw, OPT_MIDSTREAM))) {
        rc = parse_midstream(cmd, v, &m->midstream);
        m->has_midstream = 1;
    }
    if (rc < 0)
        return rc;
    cmd->req.service_add = m;
    return 0;
}

static int build_service_set(struct cli_cmd *cmd, const struct cmd_spec *spec,
                             const struct args_raw *raw)
{
    Fgx__Ctl__ServiceSet *m = &cmd->m.service_set;
    const char *v;
    int rc;

    fgx__ctl__service_set__init(m);
    rc = check_ref(cmd, spec, raw->pos[0]);
    if (rc < 0)
        return rc;
    m->ref = (char *)raw->pos[0];
    if ((v = raw_opt(raw, OPT_PORT))) {
        rc = parse_port(cmd, v, &m->port);
        m->has_port = 1;
    }
    if (rc == 0 && (v = raw_opt(raw, OPT_IP)))
        rc = parse_ip(cmd, v, &m->ip);
    if (rc == 0 && (v = raw_opt(raw, OPT_PROTO))) {
        rc = parse_proto(cmd, v, &m->proto);
        m->has_proto = 1;
    }
    if (rc == 0 && (v = raw_opt(raw, OPT_LAYER))) {
        rc = parse_layer(cmd, v, &m->layer);
        m->has_layer = 1;
    }
    if (rc == 0 && (v = raw_opt(raw, OPT_FAIL_OPEN_ARG))) {
        rc = parse_onoff(cmd, v, &m->fail_open);
        m->has_fail_open = 1;
    }
    if (rc == 0 && (v = raw_opt(raw, OPT_MIDSTREAM))) {
        rc = parse_midstream(cmd, v, &m->midstream);
        m->has_midstream = 1;
    }
    if (rc < 0)
        return rc;
    if (!m->has_port && !m->ip && !m->has_proto && !m->has_layer && !m->has_fail_open &&
        !m->has_midstream)
        return fail_usage(cmd, spec, "nothing to change");
    cmd->req.service_set = m;
    return 0;
}

static int build_filter_add(struct cli_cmd *cmd, const struct cmd_spec *spec,
                            const struct args_raw *raw)
{
    Fgx__Ctl__FilterAdd *m = &cmd->m.filter_add;
    const char *v;
    int rc;

    fgx__ctl__filter_add__init(m);
    rc = check_ref(cmd, spec, raw->pos[0]);
    if (rc < 0)
        return rc;
    if (!raw->pos[1] || raw->pos[1][0] == '\0')
        return fail(cmd, CLI_EXIT_INVALID, "filter add: the regex is empty");
    m->service = (char *)raw->pos[0];
    m->regex = (char *)raw->pos[1];
    if ((v = raw_opt(raw, OPT_DIR))) {
        rc = parse_dir(cmd, v, &m->dir);
        if (rc < 0)
            return rc;
        m->has_dir = 1;
    }
    if (raw_opt(raw, OPT_NOCASE)) {
        m->has_nocase = 1;
        m->nocase = 1;
    }
    cmd->req.filter_add = m;
    return 0;
}

static int build_worker_restart(struct cli_cmd *cmd, const struct args_raw *raw)
{
    const char *kind = raw->pos[0];

    fgx__ctl__worker_restart__init(&cmd->m.worker_restart);
    if (strcmp(kind, "nfq") != 0 && strcmp(kind, "proxy") != 0 && strcmp(kind, "all") != 0)
        return fail(cmd, CLI_EXIT_INVALID, "invalid worker kind '%.60s': must be nfq, proxy or all",
                    kind);
    cmd->m.worker_restart.kind = (char *)kind;
    cmd->req.worker_restart = &cmd->m.worker_restart;
    return 0;
}

/* Seconds, with a fraction ("0.5"), to milliseconds within the bounds --watch accepts. */
static int parse_interval(struct cli_cmd *cmd, const char *s, unsigned *out)
{
    char *end;
    double v;

    errno = 0;
    v = strtod(s, &end);
    /* strtod would also take "inf", "nan", hex floats and leading blanks. */
    if (!*s || *end || errno || s[strspn(s, "0123456789.")] != '\0' ||
        v * 1000 < CLI_WATCH_MIN_MS || v * 1000 > CLI_WATCH_MAX_MS)
        return fail(cmd, CLI_EXIT_INVALID,
                    "invalid --interval '%.60s': expected seconds, from 0.1 to 86400", s);
    *out = (unsigned)(v * 1000 + 0.5);
    return 0;
}

static int build_stats(struct cli_cmd *cmd, const struct cmd_spec *spec, const struct args_raw *raw)
{
    Fgx__Ctl__StatsQuery *m = &cmd->m.stats;
    const char *v;
    int rc;

    fgx__ctl__stats_query__init(m);
    if (raw->npos > 0) {
        rc = check_ref(cmd, spec, raw->pos[0]);
        if (rc < 0)
            return rc;
        m->service = (char *)raw->pos[0];
    }
    cmd->watch = raw_opt(raw, OPT_WATCH) != NULL;
    cmd->interval_ms = CLI_WATCH_MS;
    if ((v = raw_opt(raw, OPT_INTERVAL))) {
        if (!cmd->watch)
            return fail_usage(cmd, spec, "--interval goes with --watch");
        rc = parse_interval(cmd, v, &cmd->interval_ms);
        if (rc < 0)
            return rc;
    }
    cmd->req.stats = m;
    return 0;
}

static int build_events(struct cli_cmd *cmd, const struct cmd_spec *spec,
                        const struct args_raw *raw)
{
    Fgx__Ctl__EventsQuery *m = &cmd->m.events;
    const char *v;
    int rc;

    fgx__ctl__events_query__init(m);
    if (raw->npos > 0) {
        rc = check_ref(cmd, spec, raw->pos[0]);
        if (rc < 0)
            return rc;
        m->service = (char *)raw->pos[0];
    }
    if ((v = raw_opt(raw, OPT_LIMIT))) {
        unsigned long n;

        /* Same digit-only rule as ports: strtoul would take "-1" as a huge number. */
        if (!all_digits(v) || strlen(v) > 9 || (n = strtoul(v, NULL, 10)) < 1)
            return fail(cmd, CLI_EXIT_INVALID,
                        "invalid --limit '%.60s': expected a number of events, at least 1", v);
        m->has_limit = 1;
        m->limit = (uint32_t)n;
    }
    cmd->follow = raw_opt(raw, OPT_FOLLOW) != NULL;
    cmd->req.events = m;
    return 0;
}

static int build_request(struct cli_cmd *cmd, const struct cmd_spec *spec,
                         const struct args_raw *raw)
{
    Fgx__Ctl__Request *r = &cmd->req;
    int rc = 0;

    r->req_case = spec->req;
    switch (spec->req) {
    case FGX__CTL__REQUEST__REQ_STATUS:
    case FGX__CTL__REQUEST__REQ_SERVICE_LIST:
        fgx__ctl__empty__init(&cmd->m.empty);
        /* The two Empty members share their place in the union. */
        r->status = &cmd->m.empty;
        break;
    case FGX__CTL__REQUEST__REQ_SERVICE_ADD:
        rc = build_service_add(cmd, spec, raw);
        break;
    case FGX__CTL__REQUEST__REQ_SERVICE_SET:
        rc = build_service_set(cmd, spec, raw);
        break;
    case FGX__CTL__REQUEST__REQ_FILTER_ADD:
        rc = build_filter_add(cmd, spec, raw);
        break;
    case FGX__CTL__REQUEST__REQ_WORKER_LIST:
        fgx__ctl__empty__init(&cmd->m.empty);
        r->worker_list = &cmd->m.empty;
        break;
    case FGX__CTL__REQUEST__REQ_WORKER_RESTART:
        rc = build_worker_restart(cmd, raw);
        break;
    case FGX__CTL__REQUEST__REQ_STATS:
        rc = build_stats(cmd, spec, raw);
        break;
    case FGX__CTL__REQUEST__REQ_EVENTS:
        rc = build_events(cmd, spec, raw);
        break;
    case FGX__CTL__REQUEST__REQ_LOGIN:
        fgx__ctl__login__init(&cmd->m.login);
        cmd->password_file = raw_opt(raw, OPT_PASSWORD_FILE);
        r->login = &cmd->m.login;
        break;
    case FGX__CTL__REQUEST__REQ_PASSWD:
        fgx__ctl__passwd__init(&cmd->m.passwd);
        cmd->password_file = raw_opt(raw, OPT_PASSWORD_FILE);
        if (raw_opt(raw, OPT_EXPIRE)) {
            cmd->m.passwd.has_expire_sessions = 1;
            cmd->m.passwd.expire_sessions = 1;
        }
        r->passwd = &cmd->m.passwd;
        break;
    case FGX__CTL__REQUEST__REQ_AUTH_SET:
        fgx__ctl__auth_set__init(&cmd->m.auth_set);
        if (raw->pos[0] && strcmp(raw->pos[0], "on") == 0)
            cmd->m.auth_set.enabled = 1;
        else if (!raw->pos[0] || strcmp(raw->pos[0], "off") != 0)
            rc = fail(cmd, CLI_EXIT_INVALID, "auth: '%.60s' must be on or off", raw->pos[0]);
        r->auth_set = &cmd->m.auth_set;
        break;
    case FGX__CTL__REQUEST__REQ_LOGOUT:
    case FGX__CTL__REQUEST__REQ_CERT:
    case FGX__CTL__REQUEST__REQ_CONFIG_EXPORT:
        fgx__ctl__empty__init(&cmd->m.empty);
        r->logout = &cmd->m.empty;
        if (spec->req == FGX__CTL__REQUEST__REQ_CONFIG_EXPORT) {
            cmd->file = raw->pos[0];
            if (!cmd->file || !*cmd->file)
                rc = fail(cmd, CLI_EXIT_INVALID, "export: the file name is empty");
        }
        break;
    case FGX__CTL__REQUEST__REQ_CONFIG_IMPORT:
        /* The Config is read from the file by cli_local.c, before sending. */
        cmd->file = raw->pos[0];
        if (!cmd->file || !*cmd->file)
            rc = fail(cmd, CLI_EXIT_INVALID, "import: the file name is empty");
        break;
    case FGX__CTL__REQUEST__REQ_FILTER_IMPORT:
        fgx__ctl__filter_import__init(&cmd->m.filter_import);
        rc = check_ref(cmd, spec, raw->pos[0]);
        if (rc == 0 && (!raw->pos[1] || !*raw->pos[1]))
            rc = fail(cmd, CLI_EXIT_INVALID, "filter import: the file name is empty");
        cmd->m.filter_import.service = (char *)raw->pos[0];
        cmd->file = raw->pos[1];
        if (raw_opt(raw, OPT_REPLACE)) {
            cmd->m.filter_import.has_replace = 1;
            cmd->m.filter_import.replace = 1;
        }
        r->filter_import = &cmd->m.filter_import;
        break;
    case FGX__CTL__REQUEST__REQ_SERVICE_RENAME:
        fgx__ctl__service_rename__init(&cmd->m.service_rename);
        rc = check_ref(cmd, spec, raw->pos[0]);
        if (rc == 0)
            rc = check_name(cmd, raw->pos[1]);
        cmd->m.service_rename.ref = (char *)raw->pos[0];
        cmd->m.service_rename.name = (char *)raw->pos[1];
        r->service_rename = &cmd->m.service_rename;
        break;
    default:
        /* Every other command takes one Ref, and all Ref members share their place. */
        fgx__ctl__ref__init(&cmd->m.ref);
        rc = check_ref(cmd, spec, raw->pos[0]);
        cmd->m.ref.ref = (char *)raw->pos[0];
        r->service_show = &cmd->m.ref;
        break;
    }
    if (rc < 0) {
        fgx__ctl__request__init(r);
        cmd->watch = cmd->follow = false;
        cmd->file = cmd->password_file = NULL;
    }
    return rc;
}

/* ---- the parse --------------------------------------------------------------------------- */

static const char *group_usage(const char *group)
{
    if (strcmp(group, "service") == 0)
        return usage_service;
    return strcmp(group, "worker") == 0 ? usage_worker : usage_filter;
}

static bool is_group(const char *w)
{
    return strcmp(w, "service") == 0 || strcmp(w, "filter") == 0 || strcmp(w, "worker") == 0;
}

/* Find the command named by words w[0..n) ("status", or "service" "add"). Returns NULL and sets
 * *nused to the words it recognised (a group alone is 1). */
static const struct cmd_spec *spec_find(char **w, int n, int *nused)
{
    *nused = 0;
    if (n < 1)
        return NULL;
    if (is_group(w[0])) {
        *nused = 1;
        if (n < 2)
            return NULL;
        for (size_t k = 0; k < NSPECS; k++) {
            if (cmd_specs[k].group && strcmp(cmd_specs[k].group, w[0]) == 0 &&
                strcmp(cmd_specs[k].name, w[1]) == 0) {
                *nused = 2;
                return &cmd_specs[k];
            }
        }
        return NULL;
    }
    for (size_t k = 0; k < NSPECS; k++) {
        if (!cmd_specs[k].group && strcmp(cmd_specs[k].name, w[0]) == 0) {
            *nused = 1;
            return &cmd_specs[k];
        }
    }
    return NULL;
}

/* `fgexctl help [COMMAND [SUBCOMMAND]]` */
static int parse_help(struct cli_cmd *cmd, int argc, char **argv, int first)
{
    const struct cmd_spec *spec;
    int n = argc - first, used;

    if (n == 0) {
        cmd->help = usage_main;
        return 0;
    }
    if (n == 1 && (is_help(argv[first]) || strcmp(argv[first], "help") == 0)) {
        cmd->help = usage_help;
        return 0;
    }
    spec = spec_find(argv + first, n, &used);
    if (spec && n == used) {
        cmd->help = spec->usage;
        return 0;
    }
    if (!spec && used == 1 && n == 1) {
        cmd->help = group_usage(argv[first]);
        return 0;
    }
    return fail(cmd, CLI_EXIT_USAGE, "help: no such command '%s%s%s' (see 'fgexctl --help')",
                argv[first], n > 1 ? " " : "", n > 1 ? argv[first + 1] : "");
}

int cli_args_parse(int argc, char **argv, const char *env_url, struct cli_cmd *cmd)
{
    const struct cmd_spec *spec;
    struct args_raw raw;
    int i, used, rc;

    memset(cmd, 0, sizeof(*cmd));
    fgx__ctl__request__init(&cmd->req);
    cmd->url = (env_url && *env_url) ? env_url : CLI_DEFAULT_URL;

    /* Global options, up to the command word. */
    for (i = 1; i < argc; i++) {
        const char *a = argv[i];

        if (a[0] != '-' || a[1] == '\0')
            break;
        if (strcmp(a, "--") == 0) {
            i++;
            break;
        }
        if (is_help(a)) {
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
        rc = scan_connect(cmd, argc, argv, &i, true);
        if (rc < 0)
            return rc;
        if (rc == 0)
            return fail(cmd, CLI_EXIT_USAGE, "unknown option '%s' (see 'fgexctl --help')", a);
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
            return fail(cmd, CLI_EXIT_USAGE, "unknown command '%s' (see 'fgexctl --help')",
                        argv[i]);
        if (i + 1 >= argc || is_help(argv[i + 1])) {
            if (i + 1 < argc) {
                cmd->help = group_usage(argv[i]);
                return 0;
            }
            return fail(cmd, CLI_EXIT_USAGE, "%s: missing command (see 'fgexctl %s --help')",
                        argv[i], argv[i]);
        }
        return fail(cmd, CLI_EXIT_USAGE, "%s: unknown command '%s' (see 'fgexctl %s --help')",
                    argv[i], argv[i + 1], argv[i]);
    }
    i += used;

    /* --help anywhere before `--` wins over everything else on the line. */
    for (int k = i; k < argc && strcmp(argv[k], "--") != 0; k++) {
        if (is_help(argv[k])) {
            cmd->help = spec->usage;
            return 0;
        }
    }
    rc = scan_args(cmd, spec, argc, argv, i, &raw);
    if (rc < 0)
        return rc;
    cmd->version = spec->usage == usage_version;
    return build_request(cmd, spec, &raw);
}
