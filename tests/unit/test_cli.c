/* Unit tests for fgexctl's pure stages: argv -> Request (cli_args.c) and Reply -> text or JSON
 * (cli_fmt.c, cli_json.c). No controld is needed: requests are checked field by field and
 * through a pack/unpack round trip, output is compared exactly and parsed back. */
#include <criterion/criterion.h>
#include <criterion/redirect.h>

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "control.pb-c.h"
#include "fgexctl/cli_args.h"
#include "fgexctl/cli_fmt.h"
#include "fgexctl/cmd.h"
#include "fgexctl/cli_json.h"
#include "fgexctl/cli_loop.h"
#include "fgexctl/cli_rpc.h"
#include "fgx/chan.h"
#include "fgx/version.h"

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

/* Issue 24: how long a change waits for a busy controld: 30 s unless --wait says. */
Test(cli, wait_for_a_busy_controld)
{
    struct cli_cmd cmd;

    parse_ok(ARGV("filter", "add", "web", "x"), &cmd);
    cr_assert_eq(cmd.wait_s, 30);
    parse_ok(ARGV("--wait", "0", "filter", "add", "web", "x"), &cmd);
    cr_assert_eq(cmd.wait_s, 0);
    parse_ok(ARGV("filter", "add", "web", "x", "--wait=120"), &cmd);
    cr_assert_eq(cmd.wait_s, 120);
    parse_ok(ARGV("filter", "import", "web", "f.rules", "--wait", "5", "--sync"), &cmd);
    cr_assert_eq(cmd.wait_s, 5);
    parse_fails(ARGV("--wait", "soon", "status"), 4, "invalid --wait 'soon'");
    parse_fails(ARGV("--wait", "-1", "status"), 4, "invalid --wait");
    parse_fails(ARGV("--wait", "999999", "status"), 4, "invalid --wait");
    parse_fails(ARGV("status", "--wait"), 2, "--wait needs a number of seconds");
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
                  "10.0.0.0/24", "--layer", "proxy", "--fail-open", "--midstream", "scan"),
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
    cr_assert(r->service_add->has_midstream);
    cr_assert_eq(r->service_add->midstream, FGX__CTL__MIDSTREAM__MIDSTREAM_SCAN);
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
    cr_assert_not(r->service_add->has_midstream, "no --midstream: controld's default (reset)");
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
    cr_assert_not(r->service_set->has_midstream);
    fgx__ctl__request__free_unpacked(r, NULL);

    parse_ok(ARGV("service", "set", "web", "--midstream", "reset"), &cmd);
    r = wire(&cmd);
    cr_assert(r->service_set->has_midstream, "--midstream alone is a change");
    cr_assert_eq(r->service_set->midstream, FGX__CTL__MIDSTREAM__MIDSTREAM_RESET);
    fgx__ctl__request__free_unpacked(r, NULL);
}

/* --upstream: a comma-separated list, a TLS service's transport and an HTTP one's protocol. */
Test(cli, upstream_list)
{
    struct cli_cmd cmd;
    Fgx__Ctl__Request *r;

    parse_ok(ARGV("service", "add", "web", "--proto", "http", "--port", "80", "--layer", "proxy",
                  "--upstream", "http1"),
             &cmd);
    r = wire(&cmd);
    cr_assert(r->service_add->has_http && r->service_add->http);
    cr_assert(r->service_add->has_upstream_http1 && r->service_add->upstream_http1);
    cr_assert_not(r->service_add->has_upstream, "http1 alone says nothing of TLS");
    fgx__ctl__request__free_unpacked(r, NULL);
    parse_ok(ARGV("service", "set", "web", "--upstream", "plain,h2"), &cmd);
    r = wire(&cmd);
    cr_assert(r->service_set->has_upstream);
    cr_assert_eq(r->service_set->upstream, FGX__CTL__UPSTREAM__UPSTREAM_PLAIN);
    cr_assert(r->service_set->has_upstream_http1);
    cr_assert_not(r->service_set->upstream_http1);
    fgx__ctl__request__free_unpacked(r, NULL);
    parse_ok(ARGV("service", "set", "web", "--upstream", "tls"), &cmd);
    r = wire(&cmd);
    cr_assert(r->service_set->has_upstream);
    cr_assert_eq(r->service_set->upstream, FGX__CTL__UPSTREAM__UPSTREAM_TLS);
    cr_assert_not(r->service_set->has_upstream_http1, "tls alone leaves the protocol");
    fgx__ctl__request__free_unpacked(r, NULL);
    parse_fails(ARGV("service", "set", "web", "--upstream", "http2"), CLI_EXIT_INVALID,
                "http1 or h2");
    parse_fails(ARGV("service", "set", "web", "--upstream", "plain,,x"), CLI_EXIT_INVALID,
                "tls or plain");
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
                "tcp, udp or http");
    parse_fails(ARGV("service", "add", "w", "--proto", "tcp", "--port", "80", "--layer", "ebpf"),
                CLI_EXIT_INVALID, "nfqueue, proxy or external");
    parse_fails(ARGV("service", "add", "w", "--proto", "tcp", "--port", "80", "--ip", "10.0.0"),
                CLI_EXIT_INVALID, "invalid --ip");
    parse_fails(ARGV("service", "add", "w", "--proto", "tcp", "--port", "80", "--ip", "::/129"),
                CLI_EXIT_INVALID, "invalid --ip");
    parse_fails(ARGV("service", "add", "123", "--proto", "tcp", "--port", "80"), CLI_EXIT_INVALID,
                "service id");
    parse_fails(ARGV("service", "set", "w", "--fail-open", "maybe"), CLI_EXIT_INVALID, "on or off");
    parse_fails(ARGV("service", "set", "w", "--midstream", "pass"), CLI_EXIT_INVALID,
                "reset or scan");
    parse_fails(ARGV("service", "add", "w", "--proto", "tcp", "--port", "1", "--midstream", "x"),
                CLI_EXIT_INVALID, "reset or scan");
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

Test(cli, version)
{
    struct cli_cmd cmd;

    parse_ok(ARGV("--version"), &cmd);
    cr_assert_str_eq(cmd.help, "fgexctl " FGX_VERSION "\n");
    /* `version` asks controld for its status, and prints both versions. */
    parse_ok(ARGV("--json", "version"), &cmd);
    cr_assert_null(cmd.help);
    cr_assert(cmd.version);
    cr_assert_eq(cmd.req.req_case, FGX__CTL__REQUEST__REQ_STATUS);
    parse_ok(ARGV("status"), &cmd);
    cr_assert_not(cmd.version);
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
    cr_assert(strstr(cmd.help, "filter enable FILTER [--force]"));
    cr_assert(strstr(cmd.help, "filter disable|rm FILTER"));

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
    /* help has help of its own, and so has version. */
    parse_ok(ARGV("help", "--help"), &cmd);
    cr_assert(strstr(cmd.help, "usage: fgexctl help [COMMAND [SUBCOMMAND]]"), "%s", cmd.help);
    parse_ok(ARGV("help", "help"), &cmd);
    cr_assert(strstr(cmd.help, "usage: fgexctl help"), "%s", cmd.help);
    parse_ok(ARGV("version", "--help"), &cmd);
    cr_assert(strstr(cmd.help, "usage: fgexctl version"), "%s", cmd.help);

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
    a->has_midstream = 1;
    a->midstream = FGX__CTL__MIDSTREAM__MIDSTREAM_RESET;
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
    b->has_midstream = 1;
    b->midstream = FGX__CTL__MIDSTREAM__MIDSTREAM_SCAN;
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
        "\"addrs\":[{\"addr\":\"\",\"port\":8080,\"kind\":\"any\",\"text\":\"*:8080\"}],"
                     "\"layer\":\"nfqueue\",\"status\":\"active\",\"fail_open\":false,"
                     "\"midstream\":\"reset\",\"filters\":2,\"blocked\":17,\"blocked_removed\":0,\"tls\":false,"
                     "\"limits\":{\"max_conns\":0,\"over_limit\":\"refuse\",\"first_byte_timeout\":0,"
                     "\"hits\":0,\"first_hit\":null,\"last_hit\":null}},"
                     "{\"id\":12,\"name\":\"dns-thing\",\"proto\":\"udp\",\"ip\":\"10.0.0.0/24\","
                     "\"port\":53,\"addrs\":[{\"addr\":\"10.0.0.0/24\",\"port\":53,\"kind\":\"prefix\","
        "\"text\":\"10.0.0.0/24:53\"}],\"layer\":\"proxy\",\"status\":\"stopped\",\"fail_open\":true,"
                     "\"midstream\":\"scan\",\"filters\":0,\"blocked\":0,\"blocked_removed\":0,\"tls\":false,"
                     "\"limits\":{\"max_conns\":0,\"over_limit\":\"refuse\",\"first_byte_timeout\":0,"
                     "\"hits\":0,\"first_hit\":null,\"last_hit\":null}}]\n");
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
                          "MIDSTREAM  FILTERS  BLOCKED\n"
                          " 1  web        tcp    any          8080  nfqueue  active   no         "
                          "reset            2       17\n"
                          "12  dns-thing  udp    10.0.0.0/24    53  proxy    stopped  yes        "
                          "scan             0        0\n");
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
    /* The invalid byte makes the whole regex go as base64: never a string that means other
     * bytes. */
    cr_assert_str_eq(out, "{\"id\":7,\"service_id\":1,"
                          "\"regex_b64\":\"YSJiXGQrCgkBf8Op/w==\","
                          "\"dir\":\"c2s\",\"nocase\":true,\"active\":true,\"blocked\":0,"
                     "\"action\":\"block\",\"matched\":0,\"label\":null,"
                     "\"revision\":0,\"edited\":null}\n");
    free(out);
    /* Valid UTF-8 stays a readable string, every special escaped. */
    fl.regex = (char *)"a\"b\\d+\n\t\x01\x7f\xc3\xa9";
    out = render(&req, &rep, true);
    cr_assert_str_eq(out, "{\"id\":7,\"service_id\":1,"
                          "\"regex\":\"a\\\"b\\\\d+\\n\\t\\u0001\\u007f\xc3\xa9\","
                          "\"dir\":\"c2s\",\"nocase\":true,\"active\":true,\"blocked\":0,"
                     "\"action\":\"block\",\"matched\":0,\"label\":null,"
                          "\"revision\":0,\"edited\":null}\n");
    cr_assert(json_parse(out, "regex", &j), "not valid JSON: %s", out);
    cr_assert(j.found);
    cr_assert_str_eq(j.got, fl.regex);
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
                          "\"generation\":9,\"restarts\":0}],\"listeners\":[]}\n");
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

Test(cli, status_shows_the_listeners)
{
    Fgx__Ctl__Listener l = FGX__CTL__LISTENER__INIT, *lv[1] = {&l};
    Fgx__Ctl__Status st = FGX__CTL__STATUS__INIT;
    Fgx__Ctl__Reply rep = FGX__CTL__REPLY__INIT;
    Fgx__Ctl__Request req = request_of(FGX__CTL__REQUEST__REQ_STATUS, NULL);
    char *out;

    l.name = "web";
    l.open = 3;
    l.max = 1024;
    l.per_src = 64;
    l.handshake_s = 5;
    l.closed_timeout = 7;
    l.closed_per_src = 436;
    l.closed_full = 2;
    l.has_streams = 1;
    l.streams = 1;
    l.streams_refused = 4;
    st.version = "0.1.0";
    st.n_listeners = 1;
    st.listeners = lv;
    rep.status = &st;
    out = render(&req, &rep, true);
    cr_assert(strstr(out, "\"listeners\":[{\"name\":\"web\",\"open\":3,\"pending\":0,"
                          "\"max\":1024,\"per_src\":64,\"handshake_s\":5,"
                          "\"closed_timeout\":7,\"closed_per_src\":436,\"closed_full\":2,"
                          "\"streams\":1,") &&
                  strstr(out, "\"streams_refused\":4}]"),
              "%s", out);
    free(out);
    out = render(&req, &rep, false);
    cr_assert(strstr(out, "web listener:") &&
                  strstr(out, "3 open (0 before a request), limits 1024 in all, 64 per address, "
                              "5 s to a request; closed: 7 late, 436 per address, 2 full; live "
                              "streams 1 open, 4 refused"),
              "%s", out);
    free(out);
}

/* issue 24: rules restored and a degraded store, in both renderings */
Test(cli, status_rules_and_store)
{
    Fgx__Ctl__Status st = FGX__CTL__STATUS__INIT;
    Fgx__Ctl__Reply rep = FGX__CTL__REPLY__INIT;
    Fgx__Ctl__Request req = request_of(FGX__CTL__REQUEST__REQ_STATUS, NULL);
    char *out;

    st.version = "0.1.0";
    st.has_rules_restored = st.has_rules_restored_last = st.has_rules_gap_ms = 1;
    st.has_rules_gap_max_ms = st.has_rules_fight = 1;
    st.rules_restored = 3;
    st.rules_restored_last = 1796169726;
    st.rules_gap_ms = 104;
    st.rules_gap_max_ms = 250;
    st.rules_removed = "table inet fgex deleted by nft (pid 42)";
    st.has_store_degraded = st.has_store_since = st.has_store_failures = 1;
    st.store_degraded = 1;
    st.store_error = "no space left on the state store's disk";
    st.store_failed = "saving events and counters";
    st.store_since = 1796169000;
    st.store_failures = 7;
    st.has_events_unsaved = 1;
    st.events_unsaved = 86;
    rep.status = &st;
    out = render(&req, &rep, true);
    cr_assert(strstr(out, "\"rules\":{\"restored\":3,\"last\":1796169726,\"gap_ms\":104,"
                          "\"gap_max_ms\":250,\"removed\":\"table inet fgex deleted by nft "
                          "(pid 42)\",\"fight\":false}") != NULL, "%s", out);
    cr_assert(strstr(out, "\"store\":{\"degraded\":true,\"error\":\"no space left on the "
                          "state store's disk\",\"failed\":\"saving events and counters\","
                          "\"since\":1796169000,\"failures\":7,\"events_unsaved\":86}") != NULL,
              "%s", out);
    free(out);
    out = render(&req, &rep, false);
    cr_assert(strstr(out, "rules:     restored 3 times, last at ") != NULL, "%s", out);
    cr_assert(strstr(out, "after a gap of 104 ms (longest 250 ms)\n") != NULL, "%s", out);
    cr_assert(strstr(out, "removed:   table inet fgex deleted by nft (pid 42)\n") != NULL, "%s",
              out);
    cr_assert(strstr(out, "store:     DEGRADED since ") != NULL, "%s", out);
    cr_assert(strstr(out, "no space left on the state store's disk; last refused: saving events "
                          "and counters (7 refused)\n") != NULL, "%s", out);
    cr_assert(strstr(out, "events:    86 in memory only") != NULL, "%s", out);
    free(out);
    st.store_degraded = 0;
    st.rules_restored = 0;
    out = render(&req, &rep, false);
    cr_assert(strstr(out, "rules:     in place (never restored)\nstore:     ok\n") != NULL, "%s",
              out);
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
                          "midstream: reset\n"
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
    out = NULL;

    /* A refused request says the whole login command, -c URL included. */
    f = open_memstream(&out, &len);
    cr_assert_not_null(f);
    rep.code = FGX__CTL__CODE__CODE_AUTH;
    rep.error = "login required: run fgexctl login";
    cli_fmt_error_at(f, &rep, "tls+tcp://10.60.1.1:7443");
    rep.error = "the session has expired or was logged out: run fgexctl login";
    cli_fmt_error_at(f, &rep, CLI_DEFAULT_URL);
    rep.error = NULL;
    cli_fmt_error_at(f, &rep, "tls+tcp://[fd00::1]:7443");
    rep.code = FGX__CTL__CODE__CODE_NOT_FOUND;
    rep.error = "no such service 'x'";
    cli_fmt_error_at(f, &rep, "tls+tcp://10.60.1.1:7443");
    (void)fclose(f);
    cr_assert_str_eq(out, "fgexctl: login required: run fgexctl -c tls+tcp://10.60.1.1:7443 login\n"
                          "fgexctl: the session has expired or was logged out: run fgexctl login\n"
                          "fgexctl: login required: run fgexctl -c tls+tcp://[fd00::1]:7443 login\n"
                          "fgexctl: no such service 'x'\n");
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

static char *print_json(json_t *v, bool pretty)
{
    char *out = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&out, &len);

    cr_assert_not_null(f);
    cr_assert_eq(cli_json_print(f, v, pretty), 0);
    (void)fclose(f);
    return out;
}

Test(cli, json_print_forms)
{
    json_t *v = json_pack("{s:[I, {}, [], n], s:b}", "a", (json_int_t)-1, "k\"ey", 0);
    char *out = print_json(json_incref(v), false);

    cr_assert_str_eq(out, "{\"a\":[-1,{},[],null],\"k\\\"ey\":false}\n", "one line, in order");
    free(out);
    out = print_json(v, true);
    cr_assert_str_eq(out, "{\n  \"a\": [\n    -1,\n    {},\n    [],\n    null\n  ],\n"
                          "  \"k\\\"ey\": false\n}\n",
                     "export files: indented by two");
    free(out);
    /* Control characters in lower-case hex and DEL escaped, as fgexctl always wrote them; a
     * backslash before a u in the text stays a backslash. */
    out = print_json(json_pack("[s]", "\x1b\x1f\x7f\\u00AB\n"), false);
    cr_assert_str_eq(out, "[\"\\u001b\\u001f\\u007f\\\\u00AB\\n\"]\n");
    free(out);
    cr_assert_eq(cli_json_print(stdout, NULL, false), -ENOMEM, "a failed json_pack prints nothing");
}

Test(cli, json_str_of_any_bytes)
{
    json_t *v = cli_json_str("ok\xc3\xa9\xc3");

    /* A byte outside valid UTF-8 is the character of its number: the document stays valid. */
    cr_assert_str_eq(json_string_value(v), "ok\xc3\xa9\xc3\x83");
    json_decref(v);
    v = cli_json_str("\xe2\x82");
    cr_assert_str_eq(json_string_value(v), "\xc3\xa2\xc2\x82", "a cut sequence is two bytes");
    json_decref(v);
    v = cli_json_str(NULL);
    cr_assert_str_eq(json_string_value(v), "");
    json_decref(v);
    v = cli_json_str_or_null(NULL);
    cr_assert(json_is_null(v));
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

/* ---- issue 3: workers, stats, events ----------------------------------------------------- */

Test(cli, worker_commands_to_request)
{
    static const char *const kinds[] = {"nfq", "proxy", "all"};
    struct cli_cmd cmd;
    Fgx__Ctl__Request *r;

    parse_ok(ARGV("worker", "list"), &cmd);
    r = wire(&cmd);
    cr_assert_eq(r->req_case, FGX__CTL__REQUEST__REQ_WORKER_LIST);
    cr_assert_not_null(r->worker_list);
    fgx__ctl__request__free_unpacked(r, NULL);

    for (size_t i = 0; i < 3; i++) {
        char *argv[] = {"fgexctl", "--json", "worker", "restart", (char *)kinds[i], NULL};

        parse_ok(argv, &cmd);
        cr_assert(cmd.json);
        r = wire(&cmd);
        cr_assert_eq(r->req_case, FGX__CTL__REQUEST__REQ_WORKER_RESTART);
        cr_assert_str_eq(r->worker_restart->kind, kinds[i]);
        fgx__ctl__request__free_unpacked(r, NULL);
    }
    parse_fails(ARGV("worker", "restart", "nfqueue"), CLI_EXIT_INVALID, "nfq, proxy, script or all");
    parse_fails(ARGV("worker", "restart"), CLI_EXIT_USAGE, "missing KIND");
    parse_fails(ARGV("worker", "list", "nfq"), CLI_EXIT_USAGE, "unexpected argument 'nfq'");
    parse_fails(ARGV("worker"), CLI_EXIT_USAGE, "missing command");
    parse_fails(ARGV("worker", "kill"), CLI_EXIT_USAGE, "unknown command 'kill'");
}

Test(cli, stats_to_request)
{
    struct cli_cmd cmd;
    Fgx__Ctl__Request *r;

    parse_ok(ARGV("stats"), &cmd);
    r = wire(&cmd);
    cr_assert_eq(r->req_case, FGX__CTL__REQUEST__REQ_STATS);
    cr_assert_null(r->stats->service, "no SERVICE: every service");
    cr_assert_not(cmd.watch);
    fgx__ctl__request__free_unpacked(r, NULL);

    parse_ok(ARGV("stats", "--json", "web"), &cmd);
    r = wire(&cmd);
    cr_assert_str_eq(r->stats->service, "web");
    cr_assert(cmd.json);
    fgx__ctl__request__free_unpacked(r, NULL);

    parse_ok(ARGV("stats", "--watch"), &cmd);
    cr_assert(cmd.watch);
    cr_assert_not(cmd.follow);
    cr_assert_eq(cmd.interval_ms, 1000, "default refresh: 1 s");
    parse_ok(ARGV("stats", "3", "--watch", "--interval", "0.5"), &cmd);
    cr_assert_eq(cmd.interval_ms, 500);
    cr_assert_str_eq(cmd.req.stats->service, "3");
    parse_ok(ARGV("stats", "--interval=2", "--watch"), &cmd);
    cr_assert_eq(cmd.interval_ms, 2000);

    parse_fails(ARGV("stats", "--interval", "2"), CLI_EXIT_USAGE, "--interval goes with --watch");
    parse_fails(ARGV("stats", "--watch", "--interval", "0"), CLI_EXIT_INVALID,
                "invalid --interval");
    parse_fails(ARGV("stats", "--watch", "--interval", "0.05"), CLI_EXIT_INVALID, "0.1 to 86400");
    parse_fails(ARGV("stats", "--watch", "--interval", "inf"), CLI_EXIT_INVALID,
                "invalid --interval");
    parse_fails(ARGV("stats", "--watch", "--interval", "1s"), CLI_EXIT_INVALID,
                "invalid --interval");
    parse_fails(ARGV("stats", "--watch", "--interval"), CLI_EXIT_USAGE, "needs a value");
    parse_fails(ARGV("stats", "a", "b"), CLI_EXIT_USAGE, "unexpected argument 'b'");
    parse_fails(ARGV("stats", "--follow"), CLI_EXIT_USAGE, "unknown option '--follow'");
}

Test(cli, events_to_request)
{
    struct cli_cmd cmd;
    Fgx__Ctl__Request *r;

    parse_ok(ARGV("events"), &cmd);
    r = wire(&cmd);
    cr_assert_eq(r->req_case, FGX__CTL__REQUEST__REQ_EVENTS);
    cr_assert_null(r->events->service);
    cr_assert_not(r->events->has_limit, "controld's default");
    cr_assert_not(r->events->has_after_seq);
    cr_assert_not(cmd.follow);
    fgx__ctl__request__free_unpacked(r, NULL);

    parse_ok(ARGV("events", "--follow", "web", "--limit", "5", "--json"), &cmd);
    r = wire(&cmd);
    cr_assert_str_eq(r->events->service, "web");
    cr_assert(r->events->has_limit);
    cr_assert_eq(r->events->limit, 5);
    cr_assert(cmd.follow);
    cr_assert(cmd.json);
    cr_assert_not(cmd.watch);
    fgx__ctl__request__free_unpacked(r, NULL);

    parse_fails(ARGV("events", "--limit", "0"), CLI_EXIT_INVALID, "invalid --limit '0'");
    parse_fails(ARGV("events", "--limit", "-1"), CLI_EXIT_INVALID, "invalid --limit");
    parse_fails(ARGV("events", "--limit", "9999999999"), CLI_EXIT_INVALID, "invalid --limit");
    parse_fails(ARGV("events", "--watch"), CLI_EXIT_USAGE, "unknown option '--watch'");
    parse_fails(ARGV("events", "--follow=yes"), CLI_EXIT_USAGE, "takes no value");
}

Test(cli, help_for_issue3_commands)
{
    static const char *const lines[][4] = {
        {"worker", "list", "--help", "usage: fgexctl worker list"},
        {"worker", "restart", "-h", "usage: fgexctl worker restart nfq|proxy|script|all"},
        {"worker", "--help", NULL, "usage: fgexctl worker COMMAND"},
        {"help", "worker", NULL, "usage: fgexctl worker COMMAND"},
        {"help", "stats", NULL, "usage: fgexctl stats [SERVICE]"},
        {"stats", "--watch", "--help", "--interval SEC"},
        {"events", "--help", NULL, "usage: fgexctl events [SERVICE] [--limit N] [--follow]"},
        {"help", "events", NULL, "excerpt_hex"},
    };
    struct cli_cmd cmd;

    for (size_t i = 0; i < sizeof(lines) / sizeof(lines[0]); i++) {
        char *argv[] = {"fgexctl", (char *)lines[i][0], (char *)lines[i][1], (char *)lines[i][2],
                        NULL};

        parse_ok(argv, &cmd);
        cr_assert_not_null(cmd.help, "line %zu", i);
        cr_assert(strstr(cmd.help, lines[i][3]), "line %zu lacks '%s'", i, lines[i][3]);
        cr_assert_not(cmd.watch);
    }
    parse_ok(ARGV("--help"), &cmd);
    cr_assert(strstr(cmd.help, "worker restart nfq|proxy|script|all"));
    cr_assert(strstr(cmd.help, "events [SERVICE] [--limit N] [--follow]"));
}

static void two_workers(Fgx__Ctl__Worker *a, Fgx__Ctl__Worker *b, Fgx__Ctl__Worker **v,
                        Fgx__Ctl__Reply *rep)
{
    fgx__ctl__worker__init(a);
    a->kind = "nfq";
    a->pid = 1234;
    a->state = "running";
    a->has_generation = 1;
    a->generation = 5;
    a->has_restarts = 1;
    a->restarts = 1;
    a->has_flows = 1;
    a->flows = 42;
    a->has_queue_drops = 1;
    a->queue_drops = 3;
    a->has_rss_bytes = 1;
    a->rss_bytes = 12345678;
    a->has_truncated = 1;
    a->truncated = 2;
    a->has_verdict_errors = 1;
    a->verdict_errors = 1;
    fgx__ctl__worker__init(b);
    b->kind = "proxy";
    b->state = "down";
    v[0] = a;
    v[1] = b;
    fgx__ctl__reply__init(rep);
    rep->n_workers = 2;
    rep->workers = v;
}

Test(cli, worker_list_rendering)
{
    Fgx__Ctl__Worker a, b, *v[2];
    Fgx__Ctl__Reply rep;
    Fgx__Ctl__Request req = request_of(FGX__CTL__REQUEST__REQ_WORKER_LIST, NULL);
    static const char want_json[] =
        "[{\"kind\":\"nfq\",\"pid\":1234,\"state\":\"running\",\"generation\":5,\"restarts\":1,"
        "\"queue_drops\":3,\"flows\":42,\"rss_bytes\":12345678,\"truncated\":2,"
        "\"verdict_errors\":1,\"malformed\":0,\"heartbeat_age_ms\":null,\"adopted\":false,"
        "\"replaced_why\":null},"
        "{\"kind\":\"proxy\",\"pid\":0,\"state\":\"down\",\"generation\":0,\"restarts\":0,"
        "\"queue_drops\":0,\"flows\":0,\"rss_bytes\":0,\"truncated\":0,\"verdict_errors\":0,"
        "\"malformed\":0,\"heartbeat_age_ms\":null,\"adopted\":false,\"replaced_why\":null}]\n";
    struct jp j;
    char *out;

    two_workers(&a, &b, v, &rep);
    out = render(&req, &rep, false);
    /* What the down worker has not reported is "-", not a made-up 0. */
    cr_assert_str_eq(
        out, "KIND    PID  STATE    GENERATION  RESTARTS  FLOWS  QDROPS       RSS  REFUSED  HEARTBEAT  NOTE\n"
             "nfq    1234  running           5         1     42       3  11.8 MiB        -          -  -\n"
             "proxy     0  down              -         0      -       -         -        -          -  -\n");
    free(out);
    out = render(&req, &rep, true);
    cr_assert_str_eq(out, want_json);
    cr_assert(json_parse(out, "state", &j), "not valid JSON: %s", out);
    cr_assert_str_eq(j.got, "running");
    free(out);

    /* restart answers with the workers as they are once back. */
    req = request_of(FGX__CTL__REQUEST__REQ_WORKER_RESTART, NULL);
    out = render(&req, &rep, true);
    cr_assert_str_eq(out, want_json);
    free(out);

    rep.n_workers = 0;
    out = render(&req, &rep, true);
    cr_assert_str_eq(out, "[]\n");
    free(out);
    out = render(&req, &rep, false);
    cr_assert_str_eq(out, "no workers\n");
    free(out);
}

static void two_stats(Fgx__Ctl__ServiceStats *a, Fgx__Ctl__ServiceStats *b,
                      Fgx__Ctl__ServiceStats **v, Fgx__Ctl__Reply *rep)
{
    fgx__ctl__service_stats__init(a);
    a->service_id = 1;
    a->name = "web";
    a->packets = 4000;
    a->bytes = 6000000;
    a->accepted = 3997;
    a->dropped = 3;
    a->flows_active = 12;
    a->blocked = 8;
    fgx__ctl__service_stats__init(b);
    b->service_id = 12;
    b->name = "dns\x1b";
    b->packets = 2000;
    b->bytes = 60000;
    b->accepted = 2000;
    b->flows_active = 1;
    v[0] = a;
    v[1] = b;
    fgx__ctl__reply__init(rep);
    rep->n_service_stats = 2;
    rep->service_stats = v;
}

Test(cli, stats_and_events_say_lost_events)
{
    Fgx__Ctl__ServiceStats a, b, *v[2];
    Fgx__Ctl__Reply rep;
    Fgx__Ctl__Request req = request_of(FGX__CTL__REQUEST__REQ_STATS, NULL);
    Fgx__Ctl__Request ereq = request_of(FGX__CTL__REQUEST__REQ_EVENTS, NULL);
    char *out;

    two_stats(&a, &b, v, &rep);
    a.has_events_lost = 1;
    a.events_lost = 3;
    rep.has_events_lost = 1;
    rep.events_lost = 3;
    out = render(&req, &rep, false);
    cr_assert(strstr(out, "\n3 blocks had no event recorded (a worker's event queue was full)\n"),
              "%s", out);
    free(out);
    out = render(&req, &rep, true);
    cr_assert(strstr(out, "\"blocked\":8,\"blocked_removed\":0,\"events_lost\":3,\"matched\":0,\"flags_out\":0,\"flags_to_checker\":0}"), "%s", out);
    free(out);
    rep.n_service_stats = 0;
    rep.events_lost = 1;
    out = render(&ereq, &rep, false);
    cr_assert_str_eq(out, "no events\n1 block had no event recorded (a worker's event queue was "
                          "full)\n");
    free(out);
}

Test(cli, stats_rendering)
{
    Fgx__Ctl__ServiceStats a, b, *v[2];
    Fgx__Ctl__Reply rep;
    Fgx__Ctl__Request req = request_of(FGX__CTL__REQUEST__REQ_STATS, NULL);
    struct jp j;
    char *out;

    two_stats(&a, &b, v, &rep);
    out = render(&req, &rep, false);
    cr_assert_str_eq(out, "SERVICE  PACKETS     BYTES  ACCEPTED  DROPPED  FLOWS  BLOCKED\n"
                          "web         4000   5.7 MiB      3997        3     12        8\n"
                          "dns\\x1b     2000  58.6 KiB      2000        0      1        0\n");
    free(out);
    out = render(&req, &rep, true);
    cr_assert_str_eq(out, "[{\"id\":1,\"name\":\"web\",\"packets\":4000,\"bytes\":6000000,"
                          "\"accepted\":3997,\"dropped\":3,\"flows_active\":12,\"blocked\":8,\"blocked_removed\":0,\"events_lost\":0,\"matched\":0,\"flags_out\":0,\"flags_to_checker\":0},"
                          "{\"id\":12,\"name\":\"dns\\u001b\",\"packets\":2000,\"bytes\":60000,"
                          "\"accepted\":2000,\"dropped\":0,\"flows_active\":1,\"blocked\":0,\"blocked_removed\":0,\"events_lost\":0,\"matched\":0,\"flags_out\":0,\"flags_to_checker\":0}]\n");
    cr_assert(json_parse(out, "name", &j), "not valid JSON: %s", out);
    free(out);

    rep.n_service_stats = 0;
    out = render(&req, &rep, true);
    cr_assert_str_eq(out, "[]\n");
    free(out);
}

Test(cli, stats_watch_rates)
{
    Fgx__Ctl__ServiceStats a, b, *v[2], pa, *pv[1] = {&pa};
    Fgx__Ctl__Reply rep, prev = FGX__CTL__REPLY__INIT;
    char *out = NULL;
    size_t len = 0;
    FILE *f;

    two_stats(&a, &b, v, &rep);
    /* Two seconds earlier, web had half its bytes; dns did not exist yet. */
    fgx__ctl__service_stats__init(&pa);
    pa.service_id = 1;
    pa.name = "web";
    pa.packets = 2000;
    pa.bytes = 2000000;
    pa.accepted = 1997;
    pa.dropped = 3;
    pa.blocked = 4;
    prev.n_service_stats = 1;
    prev.service_stats = pv;

    f = open_memstream(&out, &len);
    cr_assert_not_null(f);
    cr_assert_eq(cli_cmd_stats_watch(f, &rep, NULL, 0), 0);
    cr_assert_eq(cli_cmd_stats_watch(f, &rep, &prev, 2.0), 0);
    (void)fclose(f);
    cr_assert_str_eq(
        out, "SERVICE  PACKETS  PKT/S     BYTES  BYTES/S  ACCEPTED  ACC/S  DROPPED  DROP/S  "
             "FLOWS  BLOCKED  BLK/S\n"
             "web         4000      -   5.7 MiB        -      3997      -        3       -  "
             "   12        8      -\n"
             "dns\\x1b     2000      -  58.6 KiB        -      2000      -        0       -  "
             "    1        0      -\n"
             "SERVICE  PACKETS  PKT/S     BYTES    BYTES/S  ACCEPTED  ACC/S  DROPPED  DROP/S  "
             "FLOWS  BLOCKED  BLK/S\n"
             "web         4000   1000   5.7 MiB  1.9 MiB/s      3997   1000        3       0  "
             "   12        8      2\n"
             "dns\\x1b     2000      -  58.6 KiB          -      2000      -        0       -  "
             "    1        0      -\n");
    free(out);

    /* A counter that went back (a new service under an old id) has no rate. */
    pa.packets = 5000;
    out = NULL;
    f = open_memstream(&out, &len);
    cr_assert_not_null(f);
    cr_assert_eq(cli_cmd_stats_watch(f, &rep, &prev, 2.0), 0);
    (void)fclose(f);
    cr_assert(strstr(out, "\nweb         4000      -"), "%s", out);
    free(out);
}

static const uint8_t excerpt1[] = {'a', '"', 'b', '\\', 0x00, 0xff, 0xc3, 0xa9, '\r', '\n'};

static void two_events(Fgx__Ctl__Event *a, Fgx__Ctl__Event *b, Fgx__Ctl__Event **v,
                       Fgx__Ctl__Reply *rep)
{
    fgx__ctl__event__init(a);
    a->seq = 7;
    a->time_ns = 1714566896789123456ull; /* 2024-05-01T12:34:56.789123456Z */
    a->service_id = 1;
    a->service = "web";
    a->filter_id = 3;
    a->dir = FGX__CTL__DIR__DIR_C2S;
    a->proto = FGX__CTL__PROTO__PROTO_TCP;
    a->src = "10.0.0.5";
    a->sport = 40000;
    a->dst = "10.0.0.1";
    a->dport = 80;
    a->has_excerpt = 1;
    a->excerpt.data = (uint8_t *)excerpt1;
    a->excerpt.len = sizeof(excerpt1);
    fgx__ctl__event__init(b);
    b->seq = 8;
    b->time_ns = 1714566898289000000ull;
    b->service_id = 2; /* no name: the id stands in */
    b->filter_id = 11;
    b->dir = FGX__CTL__DIR__DIR_S2C;
    b->proto = FGX__CTL__PROTO__PROTO_UDP;
    b->src = "fd00::1";
    b->sport = 53;
    b->dst = "fd00::2";
    b->dport = 5353;
    v[0] = a;
    v[1] = b;
    fgx__ctl__reply__init(rep);
    rep->n_events = 2;
    rep->events = v;
    rep->has_last_seq = 1;
    rep->last_seq = 8;
}

#define EVENT_A_JSON                                                                               \
    "{\"seq\":7,\"time\":\"2024-05-01T12:34:56.789Z\",\"time_ns\":1714566896789123456,"            \
    "\"service_id\":1,\"service\":\"web\",\"filter_id\":3,\"dir\":\"c2s\",\"proto\":\"tcp\","      \
    "\"src\":\"10.0.0.5\",\"sport\":40000,\"dst\":\"10.0.0.1\",\"dport\":80,"                      \
    "\"excerpt_b64\":\"YSJiXAD/w6kNCg==\",\"excerpt_hex\":"                      \
    "\"6122625c00ffc3a90d0a\",\"action\":\"block\",\"label\":null}"
#define EVENT_B_JSON                                                                               \
    "{\"seq\":8,\"time\":\"2024-05-01T12:34:58.289Z\",\"time_ns\":1714566898289000000,"            \
    "\"service_id\":2,\"service\":null,\"filter_id\":11,\"dir\":\"s2c\",\"proto\":\"udp\","        \
    "\"src\":\"fd00::1\",\"sport\":53,\"dst\":\"fd00::2\",\"dport\":5353,"                         \
    "\"excerpt\":\"\",\"excerpt_hex\":\"\",\"action\":\"block\",\"label\":null}"

Test(cli, events_rendering)
{
    Fgx__Ctl__Event a, b, *v[2];
    Fgx__Ctl__Reply rep;
    Fgx__Ctl__Request req = request_of(FGX__CTL__REQUEST__REQ_EVENTS, NULL);
    struct jp j;
    char *out;

    /* The table is in local time: pin it (a POSIX TZ needs no tzdata). */
    cr_assert_eq(setenv("TZ", "UTC0", 1), 0);
    tzset();
    two_events(&a, &b, v, &rep);
    out = render(&req, &rep, false);
    cr_assert_str_eq(
        out,
        "SEQ  TIME                     SERVICE  FILTER  DIR  SRC             DST             EXCERPT\n"
        "  7  2024-05-01T12:34:56.789  web           3  c2s  10.0.0.5:40000  10.0.0.1:80     "
        "a\"b\\\\x00\\xff\\xc3\\xa9\\x0d\\x0a\n"
        "  8  2024-05-01T12:34:58.289  2            11  s2c  [fd00::1]:53    [fd00::2]:5353  \n");
    free(out);

    out = render(&req, &rep, true);
    cr_assert_str_eq(out, "[" EVENT_A_JSON "," EVENT_B_JSON "]\n");
    cr_assert(json_parse(out, "time", &j), "not valid JSON: %s", out);
    cr_assert_str_eq(j.got, "2024-05-01T12:34:56.789Z");
    free(out);

    rep.n_events = 0;
    out = render(&req, &rep, false);
    cr_assert_str_eq(out, "no events\n");
    free(out);
    out = render(&req, &rep, true);
    cr_assert_str_eq(out, "[]\n");
    free(out);
}

Test(cli, events_follow_batches_line_up)
{
    Fgx__Ctl__Event a, b, *v[2];
    Fgx__Ctl__Reply rep, none = FGX__CTL__REPLY__INIT;
    char *out = NULL;
    size_t len = 0;
    FILE *f;

    cr_assert_eq(setenv("TZ", "CET-1", 1), 0); /* UTC+1, no DST rules */
    tzset();
    two_events(&a, &b, v, &rep);
    f = open_memstream(&out, &len);
    cr_assert_not_null(f);
    cr_assert_eq(cli_cmd_events_follow(f, &none, false, true), 0);
    rep.n_events = 1;
    cr_assert_eq(cli_cmd_events_follow(f, &rep, false, false), 0);
    rep.events = v + 1;
    cr_assert_eq(cli_cmd_events_follow(f, &rep, false, false), 0);
    cr_assert_eq(cli_cmd_events_follow(f, &none, false, false), 0);
    (void)fclose(f);
    /* Fixed minimum widths: the header and rows printed apart share their columns. */
    cr_assert_str_eq(
        out, "  SEQ  TIME                     SERVICE     FILTER  DIR  SRC                    DST  "
             "                  EXCERPT\n"
             "    7  2024-05-01T13:34:56.789  web              3  c2s  10.0.0.5:40000         "
             "10.0.0.1:80            a\"b\\\\x00\\xff\\xc3\\xa9\\x0d\\x0a\n"
             "    8  2024-05-01T13:34:58.289  2               11  s2c  [fd00::1]:53           "
             "[fd00::2]:5353         \n");
    free(out);

    /* JSON lines: one object per event, no array. */
    out = NULL;
    f = open_memstream(&out, &len);
    cr_assert_not_null(f);
    rep.events = v;
    rep.n_events = 2;
    cr_assert_eq(cli_cmd_events_follow(f, &rep, true, true), 0);
    cr_assert_eq(cli_cmd_events_follow(f, &none, true, false), 0);
    (void)fclose(f);
    cr_assert_str_eq(out, EVENT_A_JSON "\n" EVENT_B_JSON "\n");
    free(out);
}

Test(cli, bytes_and_time_units)
{
    static const struct {
        uint64_t v;
        const char *s;
    } cases[] = {
        {0, "0 B"},
        {1023, "1023 B"},
        {1024, "1.0 KiB"},
        {1536, "1.5 KiB"},
        {1048575, "1.0 MiB"}, /* not "1024.0 KiB" */
        {6000000, "5.7 MiB"},
        {1099511627776ull, "1.0 TiB"},
        {UINT64_MAX, "16.0 EiB"},
    };
    char buf[64];

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        cli_fmt_bytes(cases[i].v, buf, sizeof(buf));
        cr_assert_str_eq(buf, cases[i].s, "%" PRIu64, cases[i].v);
    }
    cr_assert_eq(setenv("TZ", "CET-1", 1), 0);
    tzset();
    cli_fmt_time(1714566896789123456ull, true, buf, sizeof(buf));
    cr_assert_str_eq(buf, "2024-05-01T12:34:56.789Z");
    cli_fmt_time(1714566896789123456ull, false, buf, sizeof(buf));
    cr_assert_str_eq(buf, "2024-05-01T13:34:56.789");
    cli_fmt_time(999999, true, buf, sizeof(buf));
    cr_assert_str_eq(buf, "1970-01-01T00:00:00.000Z");
}

/* ---- the polling loops, against a scripted controld -------------------------------------- */

#define SCRIPT_MAX 8

struct script {
    struct fgx_chan *chan;
    Fgx__Ctl__Reply replies[SCRIPT_MAX];
    size_t n;
    Fgx__Ctl__EventsQuery seen[SCRIPT_MAX]; /* what each events request asked */
    size_t nseen;
    pthread_t looper; /* the thread to interrupt (Criterion has threads of its own) */
};

/* Answer the scripted replies in order, then interrupt the loop as Ctrl-C would. */
static void *script_run(void *arg)
{
    struct script *sc = arg;

    for (size_t i = 0; i < sc->n; i++) {
        Fgx__Ctl__Request *q;
        void *buf = NULL;
        size_t len = 0;

        if (fgx_chan_recv(sc->chan, &buf, &len, 5000) < 0)
            break;
        q = fgx__ctl__request__unpack(NULL, len, buf);
        free(buf);
        if (q && q->req_case == FGX__CTL__REQUEST__REQ_EVENTS) {
            sc->seen[sc->nseen] = *q->events;
            sc->seen[sc->nseen].service = NULL; /* freed with q */
            sc->nseen++;
        }
        fgx__ctl__request__free_unpacked(q, NULL);
        len = fgx__ctl__reply__get_packed_size(&sc->replies[i]);
        buf = malloc(len + 1);
        fgx__ctl__reply__pack(&sc->replies[i], buf);
        (void)fgx_chan_send(sc->chan, buf, len, 5000);
        free(buf);
    }
    (void)pthread_kill(sc->looper, SIGINT);
    return NULL;
}

/* Run argv's loop against the script; returns the exit status, output in *out (free it). */
static int loop_scripted(char **argv, struct script *sc, char **out)
{
    char url[128];
    struct cli_cmd cmd;
    sigset_t sigs;
    pthread_t th;
    size_t len = 0;
    FILE *f;
    int status;

    (void)snprintf(url, sizeof(url), "ipc:///tmp/fgx-cli-loop-%d.sock", (int)getpid());
    /* The script thread inherits the block, so its SIGINT waits for the loop. */
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    cr_assert_eq(pthread_sigmask(SIG_BLOCK, &sigs, NULL), 0);
    cr_assert_eq(fgx_chan_listen(url, FGX_CHAN_REP, &sc->chan), 0);
    sc->looper = pthread_self();
    cr_assert_eq(pthread_create(&th, NULL, script_run, sc), 0);
    parse_ok(argv, &cmd);
    cmd.url = url;
    f = open_memstream(out, &len);
    cr_assert_not_null(f);
    status = cli_loop_run(&cmd, f);
    (void)fclose(f);
    pthread_join(th, NULL);
    fgx_chan_close(sc->chan);
    unlink(url + strlen("ipc://"));
    return status;
}

Test(cli, follow_asks_after_last_seq_and_never_repeats)
{
    Fgx__Ctl__Event a, b, *v[2];
    Fgx__Ctl__Reply ab;
    static struct script sc;
    char *out = NULL;

    two_events(&a, &b, v, &ab);
    for (size_t i = 0; i < 4; i++)
        fgx__ctl__reply__init(&sc.replies[i]);
    /* 1: the newest event only, while controld is at seq 7. */
    sc.replies[0].n_events = 1;
    sc.replies[0].events = v;
    sc.replies[0].has_last_seq = 1;
    sc.replies[0].last_seq = 7;
    /* 2: nothing new, though blocks of other services moved last_seq on. */
    sc.replies[1].has_last_seq = 1;
    sc.replies[1].last_seq = 7;
    /* 3: seq 7 again (a controld ignoring after_seq) and 8: only 8 is new. */
    sc.replies[2] = ab;
    /* 4: nothing. */
    sc.replies[3].has_last_seq = 1;
    sc.replies[3].last_seq = 8;
    sc.n = 4;

    cr_assert_eq(loop_scripted(ARGV("events", "--follow", "--json", "--limit", "1"), &sc, &out),
                 CLI_EXIT_OK);
    cr_assert_str_eq(out, EVENT_A_JSON "\n" EVENT_B_JSON "\n");
    free(out);
    cr_assert_eq(sc.nseen, 4);
    cr_assert_not(sc.seen[0].has_after_seq, "first: the newest N");
    cr_assert(sc.seen[0].has_limit);
    cr_assert_eq(sc.seen[0].limit, 1);
    cr_assert(sc.seen[1].has_after_seq);
    cr_assert_eq(sc.seen[1].after_seq, 7);
    cr_assert_eq(sc.seen[2].after_seq, 7);
    cr_assert_eq(sc.seen[3].after_seq, 8);
}

Test(cli, follow_reports_an_error_reply)
{
    static struct script sc;
    char *out = NULL;

    fgx__ctl__reply__init(&sc.replies[0]);
    sc.replies[0].code = FGX__CTL__CODE__CODE_NOT_FOUND;
    sc.replies[0].error = "no such service: nope";
    sc.n = 1;
    cr_redirect_stderr();
    cr_assert_eq(loop_scripted(ARGV("events", "nope", "--follow"), &sc, &out), CLI_EXIT_NOT_FOUND);
    free(out);
    (void)fflush(stderr);
    cr_assert_stderr_eq_str("fgexctl: no such service: nope\n");
}

Test(cli, watch_json_one_line_per_refresh)
{
    Fgx__Ctl__ServiceStats a, b, *v[2];
    static struct script sc;
    char *out = NULL;

    two_stats(&a, &b, v, &sc.replies[0]);
    sc.replies[0].n_service_stats = 1;
    sc.replies[1] = sc.replies[0];
    sc.n = 2;
    cr_assert_eq(loop_scripted(ARGV("stats", "--watch", "--interval", "0.1", "--json"), &sc, &out),
                 CLI_EXIT_OK);
    cr_assert_str_eq(out, "[{\"id\":1,\"name\":\"web\",\"packets\":4000,\"bytes\":6000000,"
                          "\"accepted\":3997,\"dropped\":3,\"flows_active\":12,\"blocked\":8,\"blocked_removed\":0,\"events_lost\":0,\"matched\":0,\"flags_out\":0,\"flags_to_checker\":0}]\n"
                          "[{\"id\":1,\"name\":\"web\",\"packets\":4000,\"bytes\":6000000,"
                          "\"accepted\":3997,\"dropped\":3,\"flows_active\":12,\"blocked\":8,\"blocked_removed\":0,\"events_lost\":0,\"matched\":0,\"flags_out\":0,\"flags_to_checker\":0}]\n");
    free(out);
}
