/* Unit tests for fgexctl's pure stages: argv -> Request (cli_args.c) and Reply -> text or JSON
 * (cli_fmt.c, cli_json.c). No controld is needed: requests are checked field by field and
 * through a pack/unpack round trip, output is compared exactly and parsed back. */
#include <criterion/criterion.h>
#include <criterion/redirect.h>

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "control.pb-c.h"
#include "fgexctl/cli_args.h"
#include "fgexctl/cli_fmt.h"
#include "fgexctl/cli_json.h"
#include "fgexctl/cli_rpc.h"
#include "fgx/chan.h"

/* ---- helpers ----------------------------------------------------------------------------- */

#define ARGV(...) ((char *[]){"fgexctl", __VA_ARGS__, NULL})
#define ARGC(v) argc_of(v)

static int argc_of(char **v)
{
    int n = 0;

    while (v[n])
        n++;
    return n;
}

static void parse_ok(char **argv, struct cli_cmd *cmd)
{
    int rc = cli_args_parse(argc_of(argv), argv, NULL, cmd);

    cr_assert_eq(rc, 0, "parse failed: %s", cmd->err);
}

static void parse_fails(char **argv, int exit_code, const char *msg_part)
{
    struct cli_cmd cmd;
    int rc = cli_args_parse(argc_of(argv), argv, NULL, &cmd);

    cr_assert_eq(rc, -EINVAL, "expected a failure for '%s %s'", argv[1], argv[2] ? argv[2] : "");
    cr_assert_eq(cmd.exit_code, exit_code, "exit %d, want %d (%s)", cmd.exit_code, exit_code,
                 cmd.err);
    cr_assert(strstr(cmd.err, msg_part), "message '%s' lacks '%s'", cmd.err, msg_part);
    cr_assert_null(strchr(cmd.err, '\n'), "the reason must be one line");
    cr_assert_eq(cmd.req.req_case, FGX__CTL__REQUEST__REQ__NOT_SET);
}

/* Pack the request and unpack it again, as controld will; the caller frees. */
static Fgx__Ctl__Request *wire(const struct cli_cmd *cmd)
{
    size_t len = fgx__ctl__request__get_packed_size(&cmd->req);
    uint8_t *buf = malloc(len + 1);
    Fgx__Ctl__Request *r;

    cr_assert_not_null(buf);
    cr_assert_eq(fgx__ctl__request__pack(&cmd->req, buf), len);
    r = fgx__ctl__request__unpack(NULL, len, buf);
    free(buf);
    cr_assert_not_null(r, "request does not unpack");
    return r;
}

/* Render a reply to a string (malloc'd, caller frees). */
static char *render(const Fgx__Ctl__Request *req, const Fgx__Ctl__Reply *rep, bool json)
{
    char *out = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&out, &len);

    cr_assert_not_null(f);
    cr_assert_eq(cli_fmt_reply(f, req, rep, json), 0);
    (void)fclose(f);
    return out;
}

static Fgx__Ctl__Request request_of(Fgx__Ctl__Request__ReqCase c, Fgx__Ctl__Ref *ref)
{
    Fgx__Ctl__Request r = FGX__CTL__REQUEST__INIT;

    r.req_case = c;
    r.service_show = ref; /* every Ref member shares the slot; status/list ignore it */
    return r;
}

/* ---- a small JSON reader, to prove the output parses ------------------------------------- */

struct jp {
    const char *p;
    const char *want_key; /* when set, the string value of this key (any depth) goes to got */
    char got[512];
    bool found;
};

static bool jp_value(struct jp *j, bool capture);

static void jp_ws(struct jp *j)
{
    while (*j->p == ' ' || *j->p == '\n' || *j->p == '\t' || *j->p == '\r')
        j->p++;
}

static void put_utf8(char *out, size_t *n, unsigned cp)
{
    if (cp < 0x80) {
        out[(*n)++] = (char)cp;
    } else if (cp < 0x800) {
        out[(*n)++] = (char)(0xc0 | cp >> 6);
        out[(*n)++] = (char)(0x80 | (cp & 0x3f));
    } else {
        out[(*n)++] = (char)(0xe0 | cp >> 12);
        out[(*n)++] = (char)(0x80 | ((cp >> 6) & 0x3f));
        out[(*n)++] = (char)(0x80 | (cp & 0x3f));
    }
}

/* Parse a string; its decoded bytes go to out (when not NULL, sized 512). */
static bool jp_string(struct jp *j, char *out)
{
    size_t n = 0;

    if (*j->p != '"')
        return false;
    j->p++;
    while (*j->p != '"') {
        unsigned char c = (unsigned char)*j->p;
        unsigned cp;

        if (c == '\0' || c < 0x20)
            return false; /* raw control bytes are not valid JSON */
        if (n > 500)
            return false;
        if (c != '\\') {
            if (out)
                out[n] = (char)c;
            n++;
            j->p++;
            continue;
        }
        j->p++;
        switch (*j->p) {
        case '"':
        case '\\':
        case '/':
            cp = (unsigned char)*j->p;
            break;
        case 'n':
            cp = '\n';
            break;
        case 't':
            cp = '\t';
            break;
        case 'r':
            cp = '\r';
            break;
        case 'b':
            cp = '\b';
            break;
        case 'f':
            cp = '\f';
            break;
        case 'u':
            if (sscanf(j->p + 1, "%4x", &cp) != 1 || strspn(j->p + 1, "0123456789abcdefABCDEF") < 4)
                return false;
            j->p += 4;
            break;
        default:
            return false;
        }
        j->p++;
        if (out) {
            put_utf8(out, &n, cp);
        } else {
            size_t dummy = 0;
            char tmp[4];
            put_utf8(tmp, &dummy, cp);
            n += dummy;
        }
    }
    j->p++;
    if (out)
        out[n] = '\0';
    return true;
}

static bool jp_value(struct jp *j, bool capture)
{
    char key[512];

    jp_ws(j);
    if (*j->p == '{' || *j->p == '[') {
        bool obj = *j->p == '{';
        char close = obj ? '}' : ']';

        j->p++;
        jp_ws(j);
        if (*j->p == close) {
            j->p++;
            return true;
        }
        for (;;) {
            bool cap = false;

            jp_ws(j);
            if (obj) {
                if (!jp_string(j, key))
                    return false;
                jp_ws(j);
                if (*j->p++ != ':')
                    return false;
                cap = j->want_key && !j->found && strcmp(key, j->want_key) == 0;
            }
            if (!jp_value(j, cap))
                return false;
            jp_ws(j);
            if (*j->p == ',') {
                j->p++;
                continue;
            }
            if (*j->p++ != close)
                return false;
            return true;
        }
    }
    if (*j->p == '"') {
        if (capture) {
            j->found = true;
            return jp_string(j, j->got);
        }
        return jp_string(j, NULL);
    }
    if (strncmp(j->p, "true", 4) == 0 || strncmp(j->p, "null", 4) == 0) {
        j->p += 4;
        return true;
    }
    if (strncmp(j->p, "false", 5) == 0) {
        j->p += 5;
        return true;
    }
    if (*j->p == '-' || (*j->p >= '0' && *j->p <= '9')) {
        j->p++;
        while (*j->p >= '0' && *j->p <= '9')
            j->p++;
        return true;
    }
    return false;
}

/* Whether doc is exactly one JSON value followed by a newline; the string value of key, if
 * given, is decoded into j->got. */
static bool json_parse(const char *doc, const char *key, struct jp *j)
{
    memset(j, 0, sizeof(*j));
    j->p = doc;
    j->want_key = key;
    if (!jp_value(j, false))
        return false;
    return strcmp(j->p, "\n") == 0;
}

/* ---- argv -> Request --------------------------------------------------------------------- */

Test(cli, status_and_default_url)
{
    struct cli_cmd cmd;

    parse_ok(ARGV("status"), &cmd);
    cr_assert_eq(cmd.req.req_case, FGX__CTL__REQUEST__REQ_STATUS);
    cr_assert_not_null(cmd.req.status);
    cr_assert_str_eq(cmd.url, "ipc:///run/fgex/control.sock");
    cr_assert_not(cmd.json);
    cr_assert_null(cmd.help);
}

Test(cli, url_from_env_then_dash_c_wins)
{
    struct cli_cmd cmd;
    char **v = ARGV("status");

    cr_assert_eq(cli_args_parse(argc_of(v), v, "ipc:///tmp/env.sock", &cmd), 0);
    cr_assert_str_eq(cmd.url, "ipc:///tmp/env.sock");

    v = ARGV("-c", "ipc:///tmp/c.sock", "--json", "status");
    cr_assert_eq(cli_args_parse(argc_of(v), v, "ipc:///tmp/env.sock", &cmd), 0);
    cr_assert_str_eq(cmd.url, "ipc:///tmp/c.sock");
    cr_assert(cmd.json);

    v = ARGV("--connect=tls+tcp://box:4433", "status");
    cr_assert_eq(cli_args_parse(argc_of(v), v, "", &cmd), 0);
    cr_assert_str_eq(cmd.url, "tls+tcp://box:4433");

    /* Global options also after the subcommand. */
    v = ARGV("service", "list", "--json", "-c", "ipc:///tmp/late.sock");
    cr_assert_eq(cli_args_parse(argc_of(v), v, NULL, &cmd), 0);
    cr_assert_str_eq(cmd.url, "ipc:///tmp/late.sock");
    cr_assert(cmd.json);
    cr_assert_eq(cmd.req.req_case, FGX__CTL__REQUEST__REQ_SERVICE_LIST);
}

Test(cli, service_add_every_field)
{
    struct cli_cmd cmd;
    Fgx__Ctl__Request *r;

    parse_ok(ARGV("service", "add", "web", "--proto", "udp", "--port", "8080", "--ip",
                  "10.0.0.0/24", "--layer", "proxy", "--fail-open"),
             &cmd);
    cr_assert_eq(cmd.req.req_case, FGX__CTL__REQUEST__REQ_SERVICE_ADD);
    r = wire(&cmd);
    cr_assert_eq(r->req_case, FGX__CTL__REQUEST__REQ_SERVICE_ADD);
    cr_assert_str_eq(r->service_add->name, "web");
    cr_assert_eq(r->service_add->proto, FGX__CTL__PROTO__PROTO_UDP);
    cr_assert_eq(r->service_add->port, 8080);
    cr_assert_str_eq(r->service_add->ip, "10.0.0.0/24");
    cr_assert(r->service_add->has_layer);
    cr_assert_eq(r->service_add->layer, FGX__CTL__LAYER__LAYER_PROXY);
    cr_assert(r->service_add->has_fail_open);
    cr_assert(r->service_add->fail_open);
    fgx__ctl__request__free_unpacked(r, NULL);
}

Test(cli, service_add_defaults_and_options_first)
{
    struct cli_cmd cmd;
    Fgx__Ctl__Request *r;

    parse_ok(ARGV("service", "add", "--port", "1", "--proto=tcp", "pwn"), &cmd);
    r = wire(&cmd);
    cr_assert_str_eq(r->service_add->name, "pwn");
    cr_assert_eq(r->service_add->proto, FGX__CTL__PROTO__PROTO_TCP);
    cr_assert_eq(r->service_add->port, 1);
    cr_assert_null(r->service_add->ip, "no --ip: every address");
    cr_assert_not(r->service_add->has_layer);
    cr_assert_not(r->service_add->has_fail_open);
    fgx__ctl__request__free_unpacked(r, NULL);

    parse_ok(ARGV("service", "add", "v6", "--proto", "tcp", "--port", "65535", "--ip", "fd00::1"),
             &cmd);
    cr_assert_eq(cmd.m.service_add.port, 65535);
    cr_assert_str_eq(cmd.m.service_add.ip, "fd00::1");
}

Test(cli, filter_add_options_anywhere)
{
    char **forms[] = {
        ARGV("filter", "add", "svc", "--nocase", "fl[a4]g"),
        ARGV("filter", "add", "svc", "fl[a4]g", "--nocase"),
        ARGV("filter", "add", "--nocase", "svc", "fl[a4]g"),
    };

    for (size_t i = 0; i < sizeof(forms) / sizeof(forms[0]); i++) {
        struct cli_cmd cmd;
        Fgx__Ctl__Request *r;

        parse_ok(forms[i], &cmd);
        r = wire(&cmd);
        cr_assert_eq(r->req_case, FGX__CTL__REQUEST__REQ_FILTER_ADD, "form %zu", i);
        cr_assert_str_eq(r->filter_add->service, "svc");
        cr_assert_str_eq(r->filter_add->regex, "fl[a4]g");
        cr_assert(r->filter_add->has_nocase && r->filter_add->nocase, "form %zu", i);
        cr_assert_not(r->filter_add->has_dir, "default dir is left to controld (both)");
        fgx__ctl__request__free_unpacked(r, NULL);
    }
}

Test(cli, filter_add_dir_and_double_dash)
{
    struct cli_cmd cmd;

    parse_ok(ARGV("filter", "add", "svc", "--dir", "c2s", "x"), &cmd);
    cr_assert(cmd.m.filter_add.has_dir);
    cr_assert_eq(cmd.m.filter_add.dir, FGX__CTL__DIR__DIR_C2S);
    cr_assert_not(cmd.m.filter_add.has_nocase);

    parse_ok(ARGV("filter", "add", "svc", "--dir=s2c", "x"), &cmd);
    cr_assert_eq(cmd.m.filter_add.dir, FGX__CTL__DIR__DIR_S2C);

    parse_ok(ARGV("filter", "add", "svc", "x", "--dir", "both"), &cmd);
    cr_assert(cmd.m.filter_add.has_dir);
    cr_assert_eq(cmd.m.filter_add.dir, FGX__CTL__DIR__DIR_BOTH);

    /* After `--`, even "--help" and "-x" are plain arguments. */
    parse_ok(ARGV("filter", "add", "--nocase", "svc", "--", "-rf /"), &cmd);
    cr_assert_str_eq(cmd.req.filter_add->regex, "-rf /");
    cr_assert(cmd.m.filter_add.nocase);
    parse_ok(ARGV("filter", "add", "svc", "--", "--help"), &cmd);
    cr_assert_null(cmd.help);
    cr_assert_str_eq(cmd.req.filter_add->regex, "--help");
    parse_ok(ARGV("filter", "add", "svc", "-", "--nocase"), &cmd);
    cr_assert_str_eq(cmd.req.filter_add->regex, "-", "a lone '-' is an argument");
}

Test(cli, ref_commands)
{
    static const struct {
        const char *group, *name;
        Fgx__Ctl__Request__ReqCase req;
    } cases[] = {
        {"service", "show", FGX__CTL__REQUEST__REQ_SERVICE_SHOW},
        {"service", "start", FGX__CTL__REQUEST__REQ_SERVICE_START},
        {"service", "stop", FGX__CTL__REQUEST__REQ_SERVICE_STOP},
        {"service", "rm", FGX__CTL__REQUEST__REQ_SERVICE_RM},
        {"filter", "list", FGX__CTL__REQUEST__REQ_FILTER_LIST},
        {"filter", "enable", FGX__CTL__REQUEST__REQ_FILTER_ENABLE},
        {"filter", "disable", FGX__CTL__REQUEST__REQ_FILTER_DISABLE},
        {"filter", "rm", FGX__CTL__REQUEST__REQ_FILTER_RM},
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char *argv[] = {"fgexctl", (char *)cases[i].group, (char *)cases[i].name, "42", NULL};
        struct cli_cmd cmd;
        Fgx__Ctl__Request *r;

        parse_ok(argv, &cmd);
        r = wire(&cmd);
        cr_assert_eq(r->req_case, cases[i].req, "%s %s", cases[i].group, cases[i].name);
        /* Unpacked, each case has its own member; they share the union slot. */
        cr_assert_str_eq(r->service_show->ref, "42");
        fgx__ctl__request__free_unpacked(r, NULL);
    }
}

Test(cli, service_rename_and_set)
{
    struct cli_cmd cmd;
    Fgx__Ctl__Request *r;

    parse_ok(ARGV("service", "rename", "web", "web2"), &cmd);
    r = wire(&cmd);
    cr_assert_eq(r->req_case, FGX__CTL__REQUEST__REQ_SERVICE_RENAME);
    cr_assert_str_eq(r->service_rename->ref, "web");
    cr_assert_str_eq(r->service_rename->name, "web2");
    fgx__ctl__request__free_unpacked(r, NULL);

    parse_ok(ARGV("service", "set", "web", "--port", "9000", "--ip", "any", "--fail-open", "off"),
             &cmd);
    r = wire(&cmd);
    cr_assert_eq(r->req_case, FGX__CTL__REQUEST__REQ_SERVICE_SET);
    cr_assert_str_eq(r->service_set->ref, "web");
    cr_assert(r->service_set->has_port);
    cr_assert_eq(r->service_set->port, 9000);
    cr_assert_str_eq(r->service_set->ip, "", "'any' is sent as the empty address");
    cr_assert(r->service_set->has_fail_open);
    cr_assert_not(r->service_set->fail_open);
    cr_assert_not(r->service_set->has_proto);
    cr_assert_not(r->service_set->has_layer);
    fgx__ctl__request__free_unpacked(r, NULL);

    parse_ok(ARGV("service", "set", "--proto", "udp", "3", "--fail-open=on"), &cmd);
    r = wire(&cmd);
    cr_assert_str_eq(r->service_set->ref, "3");
    cr_assert(r->service_set->has_proto);
    cr_assert_eq(r->service_set->proto, FGX__CTL__PROTO__PROTO_UDP);
    cr_assert(r->service_set->fail_open);
    cr_assert_null(r->service_set->ip, "no --ip: the address is left alone");
    cr_assert_not(r->service_set->has_port);
    fgx__ctl__request__free_unpacked(r, NULL);
}

Test(cli, usage_errors_exit_2)
{
    parse_fails(ARGV("frobnicate"), CLI_EXIT_USAGE, "unknown command 'frobnicate'");
    parse_fails(ARGV("service"), CLI_EXIT_USAGE, "missing command");
    parse_fails(ARGV("filter", "zap", "1"), CLI_EXIT_USAGE, "unknown command 'zap'");
    parse_fails(ARGV("--bogus", "status"), CLI_EXIT_USAGE, "unknown option '--bogus'");
    parse_fails(ARGV("-c"), CLI_EXIT_USAGE, "needs a URL");
    parse_fails(ARGV("status", "extra"), CLI_EXIT_USAGE, "unexpected argument 'extra'");
    parse_fails(ARGV("service", "add", "web", "--port", "80"), CLI_EXIT_USAGE, "missing --proto");
    parse_fails(ARGV("service", "add", "web", "--proto", "tcp"), CLI_EXIT_USAGE, "missing --port");
    parse_fails(ARGV("service", "add", "--proto", "tcp", "--port", "80"), CLI_EXIT_USAGE,
                "missing NAME");
    parse_fails(ARGV("service", "add", "web", "--proto"), CLI_EXIT_USAGE, "--proto needs a value");
    parse_fails(ARGV("service", "show"), CLI_EXIT_USAGE, "missing SERVICE");
    parse_fails(ARGV("service", "rename", "web"), CLI_EXIT_USAGE, "missing NEWNAME");
    parse_fails(ARGV("service", "set", "web"), CLI_EXIT_USAGE, "nothing to change");
    parse_fails(ARGV("service", "list", "--nocase"), CLI_EXIT_USAGE, "unknown option '--nocase'");
    parse_fails(ARGV("filter", "add", "svc"), CLI_EXIT_USAGE, "missing REGEX");
    parse_fails(ARGV("filter", "add", "svc", "-x"), CLI_EXIT_USAGE, "put '--' before");
    parse_fails(ARGV("filter", "add", "svc", "x", "--nocase=yes"), CLI_EXIT_USAGE,
                "takes no value");
    parse_fails(ARGV("filter", "rm", "1", "2"), CLI_EXIT_USAGE, "unexpected argument '2'");
    parse_fails(ARGV("help", "nosuch"), CLI_EXIT_USAGE, "no such command");
}

Test(cli, invalid_values_exit_4)
{
    parse_fails(ARGV("service", "add", "w", "--proto", "tcp", "--port", "0"), CLI_EXIT_INVALID,
                "1 to 65535");
    parse_fails(ARGV("service", "add", "w", "--proto", "tcp", "--port", "65536"), CLI_EXIT_INVALID,
                "invalid port '65536'");
    parse_fails(ARGV("service", "add", "w", "--proto", "tcp", "--port", "-1"), CLI_EXIT_INVALID,
                "invalid port");
    parse_fails(ARGV("service", "add", "w", "--proto", "tcp", "--port", "80x"), CLI_EXIT_INVALID,
                "invalid port");
    parse_fails(ARGV("service", "add", "w", "--proto", "sctp", "--port", "80"), CLI_EXIT_INVALID,
                "tcp or udp");
    parse_fails(ARGV("service", "add", "w", "--proto", "tcp", "--port", "80", "--layer", "ebpf"),
                CLI_EXIT_INVALID, "nfqueue or proxy");
    parse_fails(ARGV("service", "add", "w", "--proto", "tcp", "--port", "80", "--ip", "10.0.0"),
                CLI_EXIT_INVALID, "invalid --ip");
    parse_fails(ARGV("service", "add", "w", "--proto", "tcp", "--port", "80", "--ip", "::/129"),
                CLI_EXIT_INVALID, "invalid --ip");
    parse_fails(ARGV("service", "add", "123", "--proto", "tcp", "--port", "80"), CLI_EXIT_INVALID,
                "service id");
    parse_fails(ARGV("service", "set", "w", "--fail-open", "maybe"), CLI_EXIT_INVALID, "on or off");
    parse_fails(ARGV("service", "set", "w", "--port", "99999"), CLI_EXIT_INVALID, "1 to 65535");
    parse_fails(ARGV("filter", "add", "svc", "x", "--dir", "up"), CLI_EXIT_INVALID,
                "c2s, s2c or both");
    parse_fails(ARGV("filter", "add", "svc", ""), CLI_EXIT_INVALID, "regex is empty");
}

Test(cli, port_bounds)
{
    unsigned p = 0;

    cr_assert_eq(cli_args_port("1", &p), 0);
    cr_assert_eq(p, 1);
    cr_assert_eq(cli_args_port("65535", &p), 0);
    cr_assert_eq(p, 65535);
    cr_assert_eq(cli_args_port("08080", &p), 0);
    cr_assert_eq(p, 8080);
    cr_assert_eq(cli_args_port("0", &p), -EINVAL);
    cr_assert_eq(cli_args_port("65536", &p), -EINVAL);
    cr_assert_eq(cli_args_port("", &p), -EINVAL);
    cr_assert_eq(cli_args_port(" 80", &p), -EINVAL);
    cr_assert_eq(cli_args_port("+80", &p), -EINVAL);
    cr_assert_eq(cli_args_port("4294967377", &p), -EINVAL, "no wrap-around to 81");
}

Test(cli, help_everywhere)
{
    struct cli_cmd cmd;

    parse_ok((char *[]){"fgexctl", NULL}, &cmd);
    cr_assert_eq(cmd.help, cli_args_usage());
    parse_ok(ARGV("help"), &cmd);
    cr_assert_eq(cmd.help, cli_args_usage());
    parse_ok(ARGV("--json", "-h"), &cmd);
    cr_assert_eq(cmd.help, cli_args_usage());
    cr_assert(strstr(cmd.help, "service add NAME --proto tcp|udp --port N"));
    cr_assert(strstr(cmd.help, "filter enable|disable|rm FILTER"));

    parse_ok(ARGV("service", "add", "--help"), &cmd);
    cr_assert(strstr(cmd.help, "usage: fgexctl service add NAME"), "%s", cmd.help);
    cr_assert_eq(cmd.req.req_case, FGX__CTL__REQUEST__REQ__NOT_SET);
    /* --help wins even over a line that would not parse. */
    parse_ok(ARGV("service", "add", "--port", "0", "-h"), &cmd);
    cr_assert(strstr(cmd.help, "usage: fgexctl service add NAME"));
    parse_ok(ARGV("filter", "add", "--help"), &cmd);
    cr_assert(strstr(cmd.help, "usage: fgexctl filter add SERVICE REGEX"));
    parse_ok(ARGV("service", "--help"), &cmd);
    cr_assert(strstr(cmd.help, "usage: fgexctl service COMMAND"));
    parse_ok(ARGV("help", "filter"), &cmd);
    cr_assert(strstr(cmd.help, "usage: fgexctl filter COMMAND"));
    parse_ok(ARGV("help", "service", "set"), &cmd);
    cr_assert(strstr(cmd.help, "usage: fgexctl service set SERVICE"));
    parse_ok(ARGV("status", "--help"), &cmd);
    cr_assert(strstr(cmd.help, "usage: fgexctl status"));

    /* Every command has its own help. */
    static const char *const cmds[][2] = {
        {"service", "list"},  {"service", "show"},   {"service", "start"}, {"service", "stop"},
        {"service", "rm"},    {"service", "rename"}, {"service", "set"},   {"filter", "list"},
        {"filter", "enable"}, {"filter", "disable"}, {"filter", "rm"},
    };
    for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
        char *argv[] = {"fgexctl", (char *)cmds[i][0], (char *)cmds[i][1], "--help", NULL};
        char want[64];

        parse_ok(argv, &cmd);
        (void)snprintf(want, sizeof(want), "usage: fgexctl %s %s", cmds[i][0], cmds[i][1]);
        cr_assert(strstr(cmd.help, want), "%s %s", cmds[i][0], cmds[i][1]);
    }
}

/* ---- Reply -> output --------------------------------------------------------------------- */

/* Two services: a small Reply whose JSON is checked byte for byte. */
static void two_services(Fgx__Ctl__Service *a, Fgx__Ctl__Service *b, Fgx__Ctl__Service **v,
                         Fgx__Ctl__Reply *rep)
{
    fgx__ctl__service__init(a);
    a->id = 1;
    a->name = "web";
    a->proto = FGX__CTL__PROTO__PROTO_TCP;
    a->ip = "";
    a->port = 8080;
    a->active = 1;
    a->has_filters = 1;
    a->filters = 2;
    a->has_blocked = 1;
    a->blocked = 17;
    fgx__ctl__service__init(b);
    b->id = 12;
    b->name = "dns-thing";
    b->proto = FGX__CTL__PROTO__PROTO_UDP;
    b->ip = "10.0.0.0/24";
    b->port = 53;
    b->layer = FGX__CTL__LAYER__LAYER_PROXY;
    b->fail_open = 1;
    v[0] = a;
    v[1] = b;
    fgx__ctl__reply__init(rep);
    rep->n_services = 2;
    rep->services = v;
}

Test(cli, json_service_list_exact)
{
    Fgx__Ctl__Service a, b, *v[2];
    Fgx__Ctl__Reply rep;
    Fgx__Ctl__Request req = request_of(FGX__CTL__REQUEST__REQ_SERVICE_LIST, NULL);
    struct jp j;
    char *out;

    two_services(&a, &b, v, &rep);
    out = render(&req, &rep, true);
    cr_assert_str_eq(out,
                     "[{\"id\":1,\"name\":\"web\",\"proto\":\"tcp\",\"ip\":\"\",\"port\":8080,"
                     "\"layer\":\"nfqueue\",\"status\":\"active\",\"fail_open\":false,"
                     "\"filters\":2,\"blocked\":17},"
                     "{\"id\":12,\"name\":\"dns-thing\",\"proto\":\"udp\",\"ip\":\"10.0.0.0/24\","
                     "\"port\":53,\"layer\":\"proxy\",\"status\":\"stopped\",\"fail_open\":true,"
                     "\"filters\":0,\"blocked\":0}]\n");
    cr_assert(json_parse(out, "ip", &j));
    cr_assert(j.found);
    cr_assert_str_eq(j.got, "");
    free(out);

    /* An empty list is still a JSON array. */
    rep.n_services = 0;
    out = render(&req, &rep, true);
    cr_assert_str_eq(out, "[]\n");
    free(out);
}

Test(cli, human_service_table_aligned)
{
    Fgx__Ctl__Service a, b, *v[2];
    Fgx__Ctl__Reply rep;
    Fgx__Ctl__Request req = request_of(FGX__CTL__REQUEST__REQ_SERVICE_LIST, NULL);
    char *out;

    two_services(&a, &b, v, &rep);
    out = render(&req, &rep, false);
    cr_assert_str_eq(out, "ID  NAME       PROTO  IP           PORT  LAYER    STATUS   FAIL-OPEN  "
                          "FILTERS  BLOCKED\n"
                          " 1  web        tcp    any          8080  nfqueue  active   no         "
                          "      2       17\n"
                          "12  dns-thing  udp    10.0.0.0/24    53  proxy    stopped  yes        "
                          "      0        0\n");
    free(out);
}

Test(cli, json_filter_escapes_regex)
{
    /* quote, backslash, newline, tab, 0x01, DEL, valid UTF-8 (é), an invalid byte (0xff) */
    static const char regex[] = "a\"b\\d+\n\t\x01\x7f\xc3\xa9\xff";
    Fgx__Ctl__Filter fl = FGX__CTL__FILTER__INIT, *fv[1] = {&fl};
    Fgx__Ctl__Reply rep = FGX__CTL__REPLY__INIT;
    Fgx__Ctl__Request req = request_of(FGX__CTL__REQUEST__REQ_FILTER_ADD, NULL);
    struct jp j;
    char *out;

    fl.id = 7;
    fl.service_id = 1;
    fl.regex = (char *)regex;
    fl.dir = FGX__CTL__DIR__DIR_C2S;
    fl.nocase = 1;
    fl.active = 1;
    rep.n_filters = 1;
    rep.filters = fv;
    out = render(&req, &rep, true);
    cr_assert_str_eq(out, "{\"id\":7,\"service_id\":1,"
                          "\"regex\":\"a\\\"b\\\\d+\\n\\t\\u0001\\u007f\xc3\xa9\\u00ff\","
                          "\"dir\":\"c2s\",\"nocase\":true,\"active\":true,\"blocked\":0}\n");
    cr_assert(json_parse(out, "regex", &j), "not valid JSON: %s", out);
    cr_assert(j.found);
    /* Everything round-trips but the invalid byte, which comes back as U+00FF. */
    cr_assert_str_eq(j.got, "a\"b\\d+\n\t\x01\x7f\xc3\xa9\xc3\xbf");
    free(out);
}

Test(cli, human_filter_table_escapes)
{
    Fgx__Ctl__Filter f1 = FGX__CTL__FILTER__INIT, f2 = FGX__CTL__FILTER__INIT;
    Fgx__Ctl__Filter *fv[2] = {&f1, &f2};
    Fgx__Ctl__Reply rep = FGX__CTL__REPLY__INIT;
    Fgx__Ctl__Request req = request_of(FGX__CTL__REQUEST__REQ_FILTER_LIST, NULL);
    char *out;

    f1.id = 3;
    f1.regex = "flag\\{[a-z]+\\}";
    f1.active = 1;
    f1.has_blocked = 1;
    f1.blocked = 1234;
    f2.id = 10;
    f2.regex = "\x01\x02 \x1b[31m\n";
    f2.dir = FGX__CTL__DIR__DIR_S2C;
    f2.nocase = 1;
    rep.n_filters = 2;
    rep.filters = fv;
    out = render(&req, &rep, false);
    cr_assert_str_eq(out, "ID  DIR   NOCASE  ACTIVE  BLOCKED  REGEX\n"
                          " 3  both  no      yes        1234  flag\\{[a-z]+\\}\n"
                          "10  s2c   yes     no            0  \\x01\\x02 \\x1b[31m\\x0a\n");
    free(out);
}

Test(cli, json_status_exact)
{
    Fgx__Ctl__Worker w = FGX__CTL__WORKER__INIT, *wv[1] = {&w};
    Fgx__Ctl__Status st = FGX__CTL__STATUS__INIT;
    Fgx__Ctl__Reply rep = FGX__CTL__REPLY__INIT;
    Fgx__Ctl__Request req = request_of(FGX__CTL__REQUEST__REQ_STATUS, NULL);
    struct jp j;
    char *out;

    w.kind = "nfq";
    w.pid = 4242;
    w.state = "running";
    w.has_generation = 1;
    w.generation = 9;
    st.version = "0.1.0";
    st.uptime = 93784;
    st.services = 3;
    st.services_active = 2;
    st.n_workers = 1;
    st.workers = wv;
    st.queue_mode = "compat";
    st.has_threads = 1;
    st.threads = 2;
    rep.status = &st;
    out = render(&req, &rep, true);
    cr_assert_str_eq(out, "{\"version\":\"0.1.0\",\"uptime\":93784,\"services\":3,"
                          "\"services_active\":2,\"queue_mode\":\"compat\",\"threads\":2,"
                          "\"workers\":[{\"kind\":\"nfq\",\"pid\":4242,\"state\":\"running\","
                          "\"generation\":9,\"restarts\":0}]}\n");
    cr_assert(json_parse(out, "state", &j));
    cr_assert_str_eq(j.got, "running");
    free(out);

    out = render(&req, &rep, false);
    cr_assert(strstr(out, "uptime:    1d 2h 3m 4s\n"), "%s", out);
    cr_assert(strstr(out, "services:  3 (2 active)\n"), "%s", out);
    cr_assert(strstr(out, "\nKIND   PID  STATE    GENERATION  RESTARTS\n"
                          "nfq   4242  running           9         0\n"),
              "%s", out);
    free(out);
}

Test(cli, json_removed)
{
    Fgx__Ctl__Service s = FGX__CTL__SERVICE__INIT, *sv[1] = {&s};
    Fgx__Ctl__Reply rep = FGX__CTL__REPLY__INIT;
    Fgx__Ctl__Ref ref = FGX__CTL__REF__INIT;
    Fgx__Ctl__Request req;
    char *out;

    /* The id comes from the reply when controld sends the removed object... */
    ref.ref = "web";
    s.id = 5;
    s.name = "web";
    rep.n_services = 1;
    rep.services = sv;
    req = request_of(FGX__CTL__REQUEST__REQ_SERVICE_RM, &ref);
    out = render(&req, &rep, true);
    cr_assert_str_eq(out, "{\"removed\":5}\n");
    free(out);
    out = render(&req, &rep, false);
    cr_assert_str_eq(out, "removed service 5 (web)\n");
    free(out);

    /* ...else from a numeric ref, else null. */
    rep.n_services = 0;
    ref.ref = "31";
    req = request_of(FGX__CTL__REQUEST__REQ_FILTER_RM, &ref);
    out = render(&req, &rep, true);
    cr_assert_str_eq(out, "{\"removed\":31}\n");
    free(out);
    ref.ref = "web";
    req = request_of(FGX__CTL__REQUEST__REQ_SERVICE_RM, &ref);
    out = render(&req, &rep, true);
    cr_assert_str_eq(out, "{\"removed\":null}\n");
    free(out);
}

Test(cli, human_service_block)
{
    Fgx__Ctl__Service a, b, *v[2];
    Fgx__Ctl__Reply rep;
    Fgx__Ctl__Request req = request_of(FGX__CTL__REQUEST__REQ_SERVICE_ADD, NULL);
    struct jp j;
    char *out;

    two_services(&a, &b, v, &rep);
    rep.n_services = 1;
    out = render(&req, &rep, false);
    cr_assert_str_eq(out, "id:        1\n"
                          "name:      web\n"
                          "proto:     tcp\n"
                          "ip:        any\n"
                          "port:      8080\n"
                          "layer:     nfqueue\n"
                          "status:    active\n"
                          "fail-open: no\n"
                          "filters:   2\n"
                          "blocked:   17\n");
    free(out);
    out = render(&req, &rep, true);
    cr_assert(json_parse(out, "name", &j));
    cr_assert_str_eq(j.got, "web");
    cr_assert_eq(out[0], '{', "one object, not an array");
    free(out);
}

Test(cli, exit_codes_and_error_line)
{
    Fgx__Ctl__Reply rep = FGX__CTL__REPLY__INIT;
    char *out = NULL;
    size_t len = 0;
    FILE *f;

    cr_assert_eq(cli_fmt_exit_code(FGX__CTL__CODE__CODE_OK), 0);
    cr_assert_eq(cli_fmt_exit_code(FGX__CTL__CODE__CODE_ERROR), 1);
    cr_assert_eq(cli_fmt_exit_code(FGX__CTL__CODE__CODE_NOT_FOUND), 3);
    cr_assert_eq(cli_fmt_exit_code(FGX__CTL__CODE__CODE_INVALID), 4);
    cr_assert_eq(cli_fmt_exit_code(FGX__CTL__CODE__CODE_EXISTS), 5);
    cr_assert_eq(cli_fmt_exit_code(FGX__CTL__CODE__CODE_UNAVAILABLE), 6);

    f = open_memstream(&out, &len);
    cr_assert_not_null(f);
    rep.code = FGX__CTL__CODE__CODE_INVALID;
    rep.error = "invalid regex 'a(\n': Missing close parenthesis";
    cli_fmt_error(f, &rep);
    rep.code = FGX__CTL__CODE__CODE_NOT_FOUND;
    rep.error = NULL;
    cli_fmt_error(f, &rep);
    (void)fclose(f);
    cr_assert_str_eq(out, "fgexctl: invalid regex 'a(\\x0a': Missing close parenthesis\n"
                          "fgexctl: not found\n");
    free(out);
}

Test(cli, escape_and_duration)
{
    char buf[8];
    char d[32];

    cr_assert_eq(cli_fmt_escape("ab\x01"
                                "cd",
                                buf, sizeof(buf)),
                 8);
    cr_assert_str_eq(buf, "ab\\x01c", "truncated, still terminated");
    cr_assert_eq(cli_fmt_escape("", buf, sizeof(buf)), 0);
    cr_assert_str_eq(buf, "");

    cli_fmt_duration(0, d, sizeof(d));
    cr_assert_str_eq(d, "0s");
    cli_fmt_duration(60, d, sizeof(d));
    cr_assert_str_eq(d, "1m 0s");
    cli_fmt_duration(3661, d, sizeof(d));
    cr_assert_str_eq(d, "1h 1m 1s");
    cli_fmt_duration(86400 * 3 + 5, d, sizeof(d));
    cr_assert_str_eq(d, "3d 0h 0m 5s");
}

Test(cli, json_writer_nesting)
{
    struct cli_json j;
    char *out = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&out, &len);

    cr_assert_not_null(f);
    cli_json_init(&j, f);
    cli_json_obj_begin(&j);
    cli_json_key(&j, "a");
    cli_json_arr_begin(&j);
    cli_json_i64(&j, -1);
    cli_json_obj_begin(&j);
    cli_json_obj_end(&j);
    cli_json_arr_begin(&j);
    cli_json_arr_end(&j);
    cli_json_null(&j);
    cli_json_arr_end(&j);
    cli_json_key(&j, "k\"ey");
    cli_json_bool(&j, false);
    cli_json_obj_end(&j);
    cli_json_end(&j);
    (void)fclose(f);
    cr_assert_str_eq(out, "{\"a\":[-1,{},[],null],\"k\\\"ey\":false}\n");
    free(out);
}

/* ---- Request -> controld -> Reply -------------------------------------------------------- */

Test(cli, rpc_unreachable_says_so, .init = cr_redirect_stderr)
{
    char url[128];
    Fgx__Ctl__Reply *rep = NULL;
    struct cli_cmd cmd;

    (void)snprintf(url, sizeof(url), "ipc:///tmp/fgx-cli-test-none-%d.sock", (int)getpid());
    parse_ok(ARGV("status"), &cmd);
    cr_assert_eq(cli_rpc_call(url, &cmd.req, 1000, &rep), -ECONNREFUSED);
    cr_assert_null(rep);
    (void)fflush(stderr);
    char want[256];
    (void)snprintf(
        want, sizeof(want),
        "fgexctl: cannot reach controld at %s: Connection refused (is controld running?)\n", url);
    cr_assert_stderr_eq_str(want);
}

struct fake_ctld {
    struct fgx_chan *chan;
    char ref[64]; /* what the request named */
};

/* Answer one request: NOT_FOUND for a service_show of "nope", else the service "web". */
static void *fake_ctld_run(void *arg)
{
    struct fake_ctld *fc = arg;
    Fgx__Ctl__Service s = FGX__CTL__SERVICE__INIT, *sv[1] = {&s};
    Fgx__Ctl__Reply rep = FGX__CTL__REPLY__INIT;
    Fgx__Ctl__Request *q;
    void *buf = NULL;
    size_t len = 0;

    if (fgx_chan_recv(fc->chan, &buf, &len, 5000) < 0)
        return NULL;
    q = fgx__ctl__request__unpack(NULL, len, buf);
    free(buf);
    if (q && q->req_case == FGX__CTL__REQUEST__REQ_SERVICE_SHOW) {
        (void)snprintf(fc->ref, sizeof(fc->ref), "%s", q->service_show->ref);
        if (strcmp(q->service_show->ref, "nope") == 0) {
            rep.code = FGX__CTL__CODE__CODE_NOT_FOUND;
            rep.error = "no such service: nope";
        } else {
            s.id = 4;
            s.name = "web";
            s.port = 80;
            rep.n_services = 1;
            rep.services = sv;
        }
    }
    len = fgx__ctl__reply__get_packed_size(&rep);
    buf = malloc(len + 1);
    fgx__ctl__reply__pack(&rep, buf);
    fgx_chan_send(fc->chan, buf, len, 5000);
    free(buf);
    fgx__ctl__request__free_unpacked(q, NULL);
    return NULL;
}

static void rpc_roundtrip(const char *ref, Fgx__Ctl__Reply **out, char *seen)
{
    char url[128];
    char *argv[] = {"fgexctl", "service", "show", (char *)ref, NULL};
    struct fake_ctld fc = {0};
    struct cli_cmd cmd;
    pthread_t th;

    (void)snprintf(url, sizeof(url), "ipc:///tmp/fgx-cli-test-%d.sock", (int)getpid());
    cr_assert_eq(fgx_chan_listen(url, FGX_CHAN_REP, &fc.chan), 0);
    cr_assert_eq(pthread_create(&th, NULL, fake_ctld_run, &fc), 0);
    parse_ok(argv, &cmd);
    cr_assert_eq(cli_rpc_call(url, &cmd.req, 5000, out), 0);
    pthread_join(th, NULL);
    fgx_chan_close(fc.chan);
    unlink(url + strlen("ipc://"));
    (void)snprintf(seen, 64, "%s", fc.ref);
}

Test(cli, rpc_roundtrip_through_a_rep_socket)
{
    Fgx__Ctl__Reply *rep = NULL;
    char seen[64];

    rpc_roundtrip("web", &rep, seen);
    cr_assert_str_eq(seen, "web", "controld got the ref as typed");
    cr_assert_eq(rep->code, FGX__CTL__CODE__CODE_OK);
    cr_assert_eq(rep->n_services, 1);
    cr_assert_eq(rep->services[0]->id, 4);
    fgx__ctl__reply__free_unpacked(rep, NULL);

    rpc_roundtrip("nope", &rep, seen);
    cr_assert_eq(cli_fmt_exit_code(rep->code), CLI_EXIT_NOT_FOUND);
    cr_assert_str_eq(rep->error, "no such service: nope");
    fgx__ctl__reply__free_unpacked(rep, NULL);
}
