/* Unit tests for controld's web API (controld/ctl_webapi.c) against fgexctl itself: for each
 * family of commands, the Request built from the JSON parameters is byte for byte the one
 * fgexctl's argv parse (and its local stage, for files) builds for the same command line; the
 * JSON of a Reply is byte for byte what fgexctl's printer writes; bad parameters are refused
 * with fgexctl's own message and exit status (mapped to HTTP); a file parameter is content and
 * never a path that is opened; fgexctl's local commands are not in the API; GETs are only for
 * commands that change nothing; the downloads are the bytes fgexctl writes to files. */
#include <criterion/criterion.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "control.pb-c.h"
#include "controld/ctl_webapi.h"
#include "fgexctl/cli_args.h"
#include "fgexctl/cli_fmt.h"
#include "fgexctl/cli_json.h"
#include "fgexctl/cli_local.h"
#include "fgexctl/cmd.h"
#include "fgx/capture.h"
#include "fgx/version.h"

#define ARGV(...) ((char *[]){"fgexctl", "--json", __VA_ARGS__, NULL})

static int argc_of(char **v)
{
    int n = 0;

    while (v[n])
        n++;
    return n;
}

struct packed {
    uint8_t *buf;
    size_t len;
};

/* fgexctl's request for argv, as run_one sends it (after cli_local_prepare). */
static struct packed cli_request(char **argv)
{
    struct cli_cmd cmd;
    struct cli_local local;
    struct packed p;

    cr_assert_eq(cli_args_parse(argc_of(argv), argv, NULL, &cmd), 0, "fgexctl parse: %s",
                 cmd.err);
    cr_assert_eq(cli_local_prepare(&cmd, &local), 0, "fgexctl local: %s", local.err);
    p.len = fgx__ctl__request__get_packed_size(&cmd.req);
    p.buf = malloc(p.len + 1);
    cr_assert_not_null(p.buf);
    (void)fgx__ctl__request__pack(&cmd.req, p.buf);
    cli_local_release(&cmd, &local);
    return p;
}

static json_t *params_of(const char *text)
{
    json_error_t e;
    json_t *v = json_loads(text, 0, &e);

    cr_assert_not_null(v, "bad test JSON %s: %s", text, e.text);
    return v;
}

static const struct ctl_webapi_cmd *find(const char *path)
{
    const struct ctl_webapi_cmd *c = ctl_webapi_find(path);

    cr_assert_not_null(c, "%s is not in the API", path);
    return c;
}

static struct packed web_request(const char *path, const char *params, const char *token)
{
    const struct ctl_webapi_cmd *c = find(path);
    json_t *pj = params_of(params), *err = NULL;
    struct packed p;
    void *req;
    int status = 0;

    cr_assert_eq(ctl_webapi_request(c, pj, token, &req, &p.len, &status, &err), 0,
                 "%s %s: %s", path, params, err ? json_dumps(err, 0) : "?");
    cr_assert_eq(status, 200);
    cr_assert_null(err);
    p.buf = req;
    json_decref(pj);
    return p;
}

static void same_request(char **argv, const char *path, const char *params)
{
    struct packed a = cli_request(argv), b = web_request(path, params, NULL);

    cr_assert_eq(a.len, b.len, "%s %s: %zu bytes from fgexctl, %zu from the web", path, params,
                 a.len, b.len);
    cr_assert(memcmp(a.buf, b.buf, a.len) == 0, "%s %s: the requests differ", path, params);
    free(a.buf);
    free(b.buf);
}

/* The web API refuses params with the message and exit status fgexctl gives argv. */
static void same_refusal(char **argv, const char *path, const char *params)
{
    const struct ctl_webapi_cmd *c = find(path);
    json_t *pj = params_of(params), *err = NULL;
    struct cli_cmd cmd;
    void *req = NULL;
    size_t len = 0;
    int status = 0;

    cr_assert_eq(cli_args_parse(argc_of(argv), argv, NULL, &cmd), -EINVAL, "fgexctl took it");
    cr_assert_eq(ctl_webapi_request(c, pj, NULL, &req, &len, &status, &err), -EINVAL,
                 "%s %s was taken", path, params);
    cr_assert_null(req);
    cr_assert_not_null(err);
    cr_assert_str_eq(json_string_value(json_object_get(err, "error")), cmd.err);
    cr_assert_eq(json_integer_value(json_object_get(err, "exit")), cmd.exit_code);
    cr_assert_eq(status, 400);
    json_decref(err);
    json_decref(pj);
}

/* A refusal of the web's own (fgexctl has no such command line): its exit and some words. */
static void web_refuses(const char *path, const char *params, int exit_code, const char *part)
{
    const struct ctl_webapi_cmd *c = find(path);
    json_t *pj = params_of(params), *err = NULL;
    void *req = NULL;
    size_t len = 0;
    int status = 0;
    const char *msg;

    cr_assert_eq(ctl_webapi_request(c, pj, NULL, &req, &len, &status, &err), -EINVAL,
                 "%s %s was taken", path, params);
    msg = json_string_value(json_object_get(err, "error"));
    cr_assert_not_null(msg);
    cr_assert(strstr(msg, part), "'%s' lacks '%s'", msg, part);
    cr_assert_eq(json_integer_value(json_object_get(err, "exit")), exit_code, "%s", msg);
    cr_assert_eq(status, ctl_webapi_http_status(exit_code, false));
    json_decref(err);
    json_decref(pj);
}

static char *tmpfile_with(const char *text)
{
    char *path = strdup("/tmp/fgx-webapi-XXXXXX");
    int fd = mkstemp(path);

    cr_assert_geq(fd, 0);
    cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    (void)close(fd);
    return path;
}

/* ---- the table ---- */

Test(webapi, local_and_unknown_commands_are_not_found)
{
    static const char *const none[] = {"context/add", "context/use", "context/list",
                                       "regex/test",  "login",       "logout",
                                       "script/test", "nope",        "service",
                                       "service/nope", "fw/rule",    "",
                                       "help"};

    for (size_t i = 0; i < sizeof(none) / sizeof(none[0]); i++)
        cr_assert_null(ctl_webapi_find(none[i]), "%s is in the API", none[i]);
    cr_assert_null(ctl_webapi_find(NULL));
    cr_assert_not_null(ctl_webapi_find("status"));
    cr_assert_not_null(ctl_webapi_find("/filter/add"), "a leading / is the path's");
    cr_assert_not_null(ctl_webapi_find("fw/rule/add"));
    cr_assert_not_null(ctl_webapi_find("events/show"));
    cr_assert_not_null(ctl_webapi_find("service/addr/add"));
}

Test(webapi, every_command_of_fgexctl_but_the_local_ones)
{
    size_t n = 0, paths = 0;

    for (size_t f = 0; cli_cmd_families[f]; f++) {
        for (const struct cli_cmd_def *d = cli_cmd_families[f]->cmds; d->name; d++) {
            char path[64];
            bool local = (d->flags & (CLI_CMD_LOCAL | CLI_CMD_OFFLINE)) ||
                         d->req == FGX__CTL__REQUEST__REQ_LOGIN ||
                         d->req == FGX__CTL__REQUEST__REQ_LOGOUT ||
                         (d->group && strcmp(d->group, "script") == 0 &&
                          (strcmp(d->name, "test") == 0 || strcmp(d->name, "proxy") == 0)) ||
                         /* issue 27: no page button, and the API asks nobody first */
                         (!d->group && strcmp(d->name, "reset") == 0);

            (void)snprintf(path, sizeof(path), "%s%s%s", d->group ? d->group : "",
                           d->group ? "/" : "", d->name);
            for (char *p = path; *p; p++)
                if (*p == ' ')
                    *p = '/';
            if (local) {
                cr_assert_null(ctl_webapi_find(path), "%s is local to fgexctl", path);
                continue;
            }
            cr_assert_not_null(ctl_webapi_find(path), "%s is missing", path);
            cr_assert_str_eq(ctl_webapi_path(ctl_webapi_find(path)), path);
            n++;
        }
    }
    cr_assert_gt(n, 40);
    /* one entry a path (stats's, and the one `stats --history` hands over to, share one) */
    for (size_t i = 0; ctl_webapi_at(i); i++) {
        for (size_t k = 0; k < i; k++)
            cr_assert_str_neq(ctl_webapi_path(ctl_webapi_at(k)), ctl_webapi_path(ctl_webapi_at(i)));
        paths++;
    }
    cr_assert_geq(paths, n - 1);
    cr_assert_leq(paths, n);
}

Test(webapi, get_is_for_what_changes_nothing)
{
    static const char *const ro[] = {"status", "version", "service/list", "service/show",
                                     "filter/list", "filter/export", "filter/test",
                                     "worker/list", "stats", "events", "events/show",
                                     "history", "export", "capture", "script/get",
                                     "script/list", "script/log", "fw/list", "fw/rule/list",
                                     "fw/export", "cert"};
    static const char *const rw[] = {"service/add", "service/rm", "service/start",
                                     "service/set", "filter/add", "filter/rm", "filter/import",
                                     "filter/set", "worker/restart", "undo", "redo", "import",
                                     "passwd", "auth", "script/set", "script/rm",
                                     "fw/rule/add", "fw/policy", "fw/apply", "fw/confirm",
                                     "service/addr/add"};

    for (size_t i = 0; i < sizeof(ro) / sizeof(ro[0]); i++)
        cr_assert(ctl_webapi_read_only(find(ro[i])), "%s changes nothing", ro[i]);
    for (size_t i = 0; i < sizeof(rw) / sizeof(rw[0]); i++)
        cr_assert(!ctl_webapi_read_only(find(rw[i])), "%s changes something", rw[i]);
    cr_assert_str_eq(ctl_webapi_changes(find("service/add")), "services");
    cr_assert_str_eq(ctl_webapi_changes(find("filter/add")), "filters");
    cr_assert_str_eq(ctl_webapi_changes(find("fw/rule/add")), "fw");
    cr_assert_str_eq(ctl_webapi_changes(find("script/set")), "script");
    cr_assert_str_eq(ctl_webapi_changes(find("passwd")), "auth");
    cr_assert_null(ctl_webapi_changes(find("service/list")));
    cr_assert_null(ctl_webapi_changes(find("filter/test")));
}

Test(webapi, positional_names)
{
    cr_assert_str_eq(ctl_webapi_pos_name(find("filter/add"), 0), "service");
    cr_assert_str_eq(ctl_webapi_pos_name(find("filter/add"), 1), "regex");
    cr_assert_str_eq(ctl_webapi_pos_name(find("auth"), 0), "value");
    cr_assert_str_eq(ctl_webapi_pos_name(find("fw/rule/move"), 1), "position");
    cr_assert_str_eq(ctl_webapi_pos_name(find("service/addr/add"), 1), "addr");
    cr_assert_str_eq(ctl_webapi_pos_name(find("events/show"), 0), "show", "a fixed word");
    cr_assert_null(ctl_webapi_pos_name(find("export"), 0), "export's FILE is the reply");
    cr_assert_null(ctl_webapi_pos_name(find("status"), 0));
}

/* ---- requests: the same as fgexctl's, family by family ---- */

Test(webapi, admin_requests)
{
    char *cfg = tmpfile_with("{\"services\": [{\"name\": \"a\", \"proto\": \"tcp\", \"port\": 1, "
                             "\"filters\": [{\"regex\": \"x\"}]}]}");

    same_request(ARGV("status"), "status", "{}");
    same_request(ARGV("version"), "version", "{}");
    same_request(ARGV("cert"), "cert", "{}");
    same_request(ARGV("auth", "on"), "auth", "{\"value\": \"on\"}");
    same_request(ARGV("export", "-", "--with-secrets"), "export", "{\"with_secrets\": true}");
    same_request(ARGV("export", "-"), "export", "{\"with_secrets\": false}");
    same_request(ARGV("import", cfg, "--dry-run"), "import",
                 "{\"file\": \"{\\\"services\\\": [{\\\"name\\\": \\\"a\\\", \\\"proto\\\": "
                 "\\\"tcp\\\", \\\"port\\\": 1, \\\"filters\\\": [{\\\"regex\\\": "
                 "\\\"x\\\"}]}]}\", \"dry_run\": \"true\"}");
    unlink(cfg);
    free(cfg);
}

Test(webapi, passwd_from_the_parameter_never_stdin)
{
    char *pw = tmpfile_with("s3cret\nignored\n");
    struct packed b;
    Fgx__Ctl__Request *r;

    same_request(ARGV("passwd", "--password-file", pw, "--expire-sessions"), "passwd",
                 "{\"password_file\": \"s3cret\\nignored\\n\", \"expire_sessions\": true}");
    b = web_request("passwd", "{\"password_file_b64\": \"czNjcmV0\"}", NULL);
    r = fgx__ctl__request__unpack(NULL, b.len, b.buf);
    cr_assert_not_null(r);
    cr_assert_str_eq(r->passwd->password, "s3cret");
    fgx__ctl__request__free_unpacked(r, NULL);
    free(b.buf);
    /* no password given: refused, not read from controld's stdin */
    web_refuses("passwd", "{}", CLI_EXIT_USAGE, "password_file");
    unlink(pw);
    free(pw);
}

Test(webapi, service_requests)
{
    same_request(ARGV("service", "add", "web", "--proto", "tcp", "--port", "8080", "--ip",
                      "10.0.0.1", "--layer", "proxy", "--fail-open", "--midstream", "scan",
                      "--capture", "on", "--capture-bytes", "4096", "--capture-conns", "9"),
                 "service/add",
                 "{\"name\": \"web\", \"proto\": \"tcp\", \"port\": 8080, \"ip\": \"10.0.0.1\", "
                 "\"layer\": \"proxy\", \"fail_open\": true, \"midstream\": \"scan\", "
                 "\"capture\": \"on\", \"capture_bytes\": \"4096\", \"capture_conns\": 9}");
    same_request(ARGV("service", "add", "w2", "--proto", "udp", "--port", "53", "--fail-open=off"),
                 "service/add",
                 "{\"name\": \"w2\", \"proto\": \"udp\", \"port\": \"53\", \"fail_open\": \"off\"}");
    same_request(ARGV("service", "add", "m", "--proto", "tcp", "--port", "80", "--addr",
                      "10.0.0.1", "--addr", "10.0.0.2:81"),
                 "service/add",
                 "{\"name\": \"m\", \"proto\": \"tcp\", \"port\": 80, "
                 "\"addr\": [\"10.0.0.1\", \"10.0.0.2:81\"]}");
    same_request(ARGV("service", "addr", "add", "web", "10.0.0.3:81"), "service/addr/add",
                 "{\"service\": \"web\", \"addr\": \"10.0.0.3:81\"}");
    same_request(ARGV("service", "addr", "rm", "web", "10.0.0.3"), "service/addr/rm",
                 "{\"service\": \"web\", \"addr\": \"10.0.0.3\"}");
    same_request(ARGV("service", "list"), "service/list", "{}");
    same_request(ARGV("service", "show", "web"), "service/show", "{\"service\": \"web\"}");
    same_request(ARGV("service", "start", "3"), "service/start", "{\"service\": 3}");
    same_request(ARGV("service", "stop", "web"), "service/stop", "{\"service\": \"web\"}");
    same_request(ARGV("service", "rm", "web", "--yes"), "service/rm", "{\"service\": \"web\"}");
    same_request(ARGV("service", "rename", "web", "www"), "service/rename",
                 "{\"service\": \"web\", \"newname\": \"www\"}");
    same_request(ARGV("service", "set", "web", "--port", "81", "--ip", "any", "--fail-open", "on"),
                 "service/set",
                 "{\"service\": \"web\", \"port\": 81, \"ip\": \"any\", \"fail_open\": \"on\"}");
}

Test(webapi, tls_files_are_content_not_paths)
{
    char *cert = tmpfile_with("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n");
    char *key = tmpfile_with("-----BEGIN PRIVATE KEY-----\nBBBB\n-----END PRIVATE KEY-----\n");
    char params[1024];
    struct packed b;
    Fgx__Ctl__Request *r;

    (void)snprintf(params, sizeof(params),
                   "{\"name\": \"s\", \"proto\": \"tcp\", \"port\": 443, \"layer\": \"proxy\", "
                   "\"tls_cert\": \"-----BEGIN CERTIFICATE-----\\nAAAA\\n-----END "
                   "CERTIFICATE-----\\n\", \"tls_key\": \"-----BEGIN PRIVATE KEY-----\\nBBBB\\n"
                   "-----END PRIVATE KEY-----\\n\"}");
    same_request(ARGV("service", "add", "s", "--proto", "tcp", "--port", "443", "--layer",
                      "proxy", "--tls-cert", cert, "--tls-key", key),
                 "service/add", params);
    /* a path given as the parameter is the bytes of the path: the file is not read */
    (void)snprintf(params, sizeof(params),
                   "{\"name\": \"s\", \"proto\": \"tcp\", \"port\": 443, \"layer\": \"proxy\", "
                   "\"tls_cert\": \"%s\", \"tls_key\": \"%s\"}",
                   cert, key);
    b = web_request("service/add", params, NULL);
    r = fgx__ctl__request__unpack(NULL, b.len, b.buf);
    cr_assert_not_null(r);
    cr_assert_eq(r->service_add->tls_cert.len, strlen(cert));
    cr_assert(memcmp(r->service_add->tls_cert.data, cert, strlen(cert)) == 0);
    fgx__ctl__request__free_unpacked(r, NULL);
    free(b.buf);
    web_refuses("service/add",
                "{\"name\": \"s\", \"proto\": \"tcp\", \"port\": 443, \"tls_cert\": \"\", "
                "\"tls_key\": \"k\"}",
                CLI_EXIT_INVALID, "--tls-cert");
    unlink(cert);
    unlink(key);
    free(cert);
    free(key);
}

Test(webapi, filter_requests)
{
    char *rules = tmpfile_with("c2s /evil[0-9]+/\nboth nocase log label=\"x\" /FLAG\\{/\n");

    same_request(ARGV("filter", "add", "web", "evil[0-9]+", "--dir", "c2s", "--nocase", "--log",
                      "--label", "probe"),
                 "filter/add",
                 "{\"service\": \"web\", \"regex\": \"evil[0-9]+\", \"dir\": \"c2s\", "
                 "\"nocase\": \"true\", \"log\": true, \"label\": \"probe\"}");
    /* bytes that are not UTF-8 go base64: \xff\xfe/ */
    same_request(ARGV("filter", "add", "web", "--", "\xff\xfe/-x"), "filter/add",
                 "{\"service\": \"web\", \"regex_b64\": \"//4vLXg=\"}");
    /* a GET's strings: "true" for a flag, "false" leaves it out; a value "false" stays one */
    same_request(ARGV("filter", "add", "web", "true", "--label", "false", "--nocase"), "filter/add",
                 "{\"service\": \"web\", \"regex\": \"true\", \"label\": \"false\", "
                 "\"nocase\": \"\", \"log\": \"false\"}");
    web_refuses("filter/add", "{\"service\": \"web\", \"regex\": true}", CLI_EXIT_USAGE,
                "takes a value");
    web_refuses("filter/add", "{\"service\": \"web\", \"regex\": \"x\", \"label\": true}",
                CLI_EXIT_USAGE, "--label needs a value");
    same_request(ARGV("filter", "list", "web"), "filter/list", "{\"service\": \"web\"}");
    same_request(ARGV("filter", "enable", "7"), "filter/enable", "{\"filter\": 7}");
    same_request(ARGV("filter", "disable", "7"), "filter/disable", "{\"filter\": \"7\"}");
    same_request(ARGV("filter", "rm", "7"), "filter/rm", "{\"filter\": 7}");
    same_request(ARGV("filter", "set", "7", "--action", "log", "--label", ""), "filter/set",
                 "{\"filter\": 7, \"action\": \"log\", \"label\": \"\"}");
    same_request(ARGV("filter", "test", "web", "evil", "--dir", "s2c"), "filter/test",
                 "{\"service\": \"web\", \"regex\": \"evil\", \"dir\": \"s2c\"}");
    same_request(ARGV("filter", "export", "web"), "filter/export", "{\"service\": \"web\"}");
    same_request(ARGV("filter", "import", "web", rules, "--sync", "--dry-run"), "filter/import",
                 "{\"service\": \"web\", \"file\": \"c2s /evil[0-9]+/\\nboth nocase log "
                 "label=\\\"x\\\" /FLAG\\\\{/\\n\", \"sync\": true, \"dry_run\": true}");
    unlink(rules);
    free(rules);
}

Test(webapi, worker_stats_events_history_requests)
{
    same_request(ARGV("worker", "list"), "worker/list", "{}");
    same_request(ARGV("worker", "restart", "nfq"), "worker/restart", "{\"kind\": \"nfq\"}");
    same_request(ARGV("stats"), "stats", "{}");
    same_request(ARGV("stats", "web"), "stats", "{\"service\": \"web\"}");
    same_request(ARGV("events"), "events", "{}");
    same_request(ARGV("events", "web", "--limit", "5"), "events",
                 "{\"service\": \"web\", \"limit\": 5}");
    same_request(ARGV("events", "show", "42", "--raw", "--dir", "s2c"), "events/show",
                 "{\"seq\": 42, \"raw\": true, \"dir\": \"s2c\"}");
    same_request(ARGV("events", "show", "42"), "events/show", "{\"seq\": \"42\"}");
    same_request(ARGV("history", "--limit", "10"), "history", "{\"limit\": 10}");
    same_request(ARGV("undo"), "undo", "{}");
    same_request(ARGV("redo"), "redo", "{}");
    same_request(ARGV("capture", "web", "--pcap", "/tmp/x.pcap", "--blocked", "--src", "10.0.0.2",
                      "--filter", "3"),
                 "capture",
                 "{\"service\": \"web\", \"pcap\": true, \"blocked\": true, \"src\": "
                 "\"10.0.0.2\", \"filter\": 3}");
}

Test(webapi, since_is_read_as_fgexctl_reads_it)
{
    /* --since is "that long ago": the two builds a moment apart differ by that moment only */
    struct packed a = cli_request(ARGV("stats", "--history", "--since", "1h"));
    struct packed b = web_request("stats", "{\"history\": true, \"since\": \"1h\"}", NULL);
    Fgx__Ctl__Request *ra = fgx__ctl__request__unpack(NULL, a.len, a.buf);
    Fgx__Ctl__Request *rb = fgx__ctl__request__unpack(NULL, b.len, b.buf);

    cr_assert(ra && rb);
    cr_assert_eq(ra->req_case, FGX__CTL__REQUEST__REQ_STATS_HISTORY);
    cr_assert_eq(rb->req_case, ra->req_case);
    fgx__ctl__request__free_unpacked(ra, NULL);
    fgx__ctl__request__free_unpacked(rb, NULL);
    free(a.buf);
    free(b.buf);
}

Test(webapi, script_requests)
{
    char *py = tmpfile_with("from fgex import *\n\n@tcp\ndef f(c):\n    return ACCEPT\n");

    char params[512];

    /* file_name is the name fgexctl would have given (a path: its base name goes to controld) */
    (void)snprintf(params, sizeof(params),
                   "{\"service\": \"web\", \"file\": \"from fgex import *\\n\\n@tcp\\ndef "
                   "f(c):\\n    return ACCEPT\\n\", \"deadline\": 50, \"file_name\": \"%s\"}",
                   py);
    same_request(ARGV("script", "set", "web", py, "--deadline", "50"), "script/set", params);
    /* the name is never opened: the source is the parameter's */
    (void)snprintf(params, sizeof(params),
                   "{\"service\": \"web\", \"file\": \"x = 1\\n\", \"file_name\": \"%s\"}", py);
    {
        struct packed b = web_request("script/set", params, NULL);
        Fgx__Ctl__Request *r = fgx__ctl__request__unpack(NULL, b.len, b.buf);

        cr_assert_not_null(r);
        cr_assert_eq(r->script_set->source.len, 6);
        cr_assert(memcmp(r->script_set->source.data, "x = 1\n", 6) == 0);
        cr_assert_str_eq(r->script_set->filename, strrchr(py, '/') + 1);
        fgx__ctl__request__free_unpacked(r, NULL);
        free(b.buf);
    }
    web_refuses("script/set", "{\"service\": \"web\", \"file\": \"x\", \"file_name\": 3}",
                CLI_EXIT_USAGE, "file_name");
    /* file bytes with a NUL go whole, base64 */
    {
        struct packed b = web_request("script/set", "{\"service\": \"web\", \"file_b64\": \"YQBi\"}",
                                      NULL);
        Fgx__Ctl__Request *r = fgx__ctl__request__unpack(NULL, b.len, b.buf);

        cr_assert_not_null(r);
        cr_assert_eq(r->script_set->source.len, 3);
        cr_assert(memcmp(r->script_set->source.data, "a\0b", 3) == 0);
        fgx__ctl__request__free_unpacked(r, NULL);
        free(b.buf);
    }
    same_request(ARGV("script", "get", "web"), "script/get", "{\"service\": \"web\"}");
    same_request(ARGV("script", "rm", "web"), "script/rm", "{\"service\": \"web\"}");
    same_request(ARGV("script", "list", "web"), "script/list", "{\"service\": \"web\"}");
    same_request(ARGV("script", "enable", "web", "f"), "script/enable",
                 "{\"service\": \"web\", \"function\": \"f\"}");
    same_request(ARGV("script", "disable", "web", "f"), "script/disable",
                 "{\"service\": \"web\", \"function\": \"f\"}");
    same_request(ARGV("script", "log", "web"), "script/log", "{\"service\": \"web\"}");
    web_refuses("script/log", "{\"service\": \"web\", \"follow\": true}", CLI_EXIT_USAGE,
                "/api/live");
    unlink(py);
    free(py);
}

Test(webapi, fw_requests)
{
    char *rules = tmpfile_with("--name ssh --proto tcp --dport 22 --action accept\n");

    same_request(ARGV("fw", "rule", "add", "--name", "ssh", "--proto", "tcp", "--src",
                      "10.0.0.0/8", "--dport", "22", "--action", "accept", "--at", "2",
                      "--confirm", "30"),
                 "fw/rule/add",
                 "{\"name\": \"ssh\", \"proto\": \"tcp\", \"src\": \"10.0.0.0/8\", \"dport\": 22, "
                 "\"action\": \"accept\", \"at\": 2, \"confirm\": \"30\"}");
    same_request(ARGV("fw", "rule", "rm", "ssh"), "fw/rule/rm", "{\"rule\": \"ssh\"}");
    same_request(ARGV("fw", "rule", "move", "ssh", "1", "--confirm", "20"), "fw/rule/move",
                 "{\"rule\": \"ssh\", \"position\": 1, \"confirm\": 20}");
    same_request(ARGV("fw", "rule", "enable", "4"), "fw/rule/enable", "{\"rule\": 4}");
    same_request(ARGV("fw", "rule", "disable", "4"), "fw/rule/disable", "{\"rule\": 4}");
    same_request(ARGV("fw", "list"), "fw/list", "{}");
    same_request(ARGV("fw", "policy", "drop", "--dir", "in"), "fw/policy",
                 "{\"policy\": \"drop\", \"dir\": \"in\"}");
    same_request(ARGV("fw", "set", "icmp", "off"), "fw/set",
                 "{\"option\": \"icmp\", \"value\": \"off\"}");
    same_request(ARGV("fw", "enable", "--confirm", "60"), "fw/enable", "{\"confirm\": 60}");
    same_request(ARGV("fw", "disable"), "fw/disable", "{}");
    same_request(ARGV("fw", "confirm"), "fw/confirm", "{}");
    same_request(ARGV("fw", "export", "-"), "fw/export", "{}");
    same_request(ARGV("fw", "import", rules), "fw/import",
                 "{\"file\": \"--name ssh --proto tcp --dport 22 --action accept\\n\"}");
    same_request(ARGV("fw", "apply", rules, "--confirm", "30"), "fw/apply",
                 "{\"file\": \"--name ssh --proto tcp --dport 22 --action accept\\n\", "
                 "\"confirm\": 30}");
    unlink(rules);
    free(rules);
}

Test(webapi, the_token_goes_in_the_request)
{
    struct packed b = web_request("service/list", "{}", "tok123");
    Fgx__Ctl__Request *r = fgx__ctl__request__unpack(NULL, b.len, b.buf);

    cr_assert_not_null(r);
    cr_assert_str_eq(r->token, "tok123");
    cr_assert_eq(r->req_case, FGX__CTL__REQUEST__REQ_SERVICE_LIST);
    fgx__ctl__request__free_unpacked(r, NULL);
    free(b.buf);
}

/* ---- refusals ---- */

Test(webapi, bad_parameters_get_fgexctl_s_message)
{
    same_refusal(ARGV("filter", "add", "web"), "filter/add", "{\"service\": \"web\"}");
    same_refusal(ARGV("service", "add", "x", "--proto", "tcp", "--port", "99999"), "service/add",
                 "{\"name\": \"x\", \"proto\": \"tcp\", \"port\": 99999}");
    same_refusal(ARGV("service", "add", "x", "--proto", "sctp", "--port", "1"), "service/add",
                 "{\"name\": \"x\", \"proto\": \"sctp\", \"port\": 1}");
    same_refusal(ARGV("service", "add", "123", "--proto", "tcp", "--port", "1"), "service/add",
                 "{\"name\": \"123\", \"proto\": \"tcp\", \"port\": 1}");
    same_refusal(ARGV("filter", "add", "web", "x", "--dir", "up"), "filter/add",
                 "{\"service\": \"web\", \"regex\": \"x\", \"dir\": \"up\"}");
    same_refusal(ARGV("events", "show", "x1"), "events/show", "{\"seq\": \"x1\"}");
    same_refusal(ARGV("events", "web", "--limit", "0"), "events",
                 "{\"service\": \"web\", \"limit\": 0}");
    same_refusal(ARGV("capture", "web"), "capture", "{\"service\": \"web\"}");
    same_refusal(ARGV("fw", "policy", "maybe"), "fw/policy", "{\"policy\": \"maybe\"}");
    same_refusal(ARGV("fw", "apply", "f"), "fw/apply", "{\"file\": \"x\"}");
    same_refusal(ARGV("fw", "rule", "move", "ssh", "0"), "fw/rule/move",
                 "{\"rule\": \"ssh\", \"position\": 0}");
    same_refusal(ARGV("filter", "add", "web", "x", "--nocase=yes"), "filter/add",
                 "{\"service\": \"web\", \"regex\": \"x\", \"nocase\": \"yes\"}");
    /* the web's own */
    web_refuses("filter/add", "{\"service\": \"web\", \"regex\": \"x\", \"colour\": 1}",
                CLI_EXIT_USAGE, "unknown parameter");
    web_refuses("filter/add", "{\"regex\": \"x\"}", CLI_EXIT_USAGE, "missing SERVICE");
    web_refuses("filter/add", "{\"service\": \"web\", \"regex_b64\": \"!!\"}", CLI_EXIT_INVALID,
                "base64");
    web_refuses("filter/add", "{\"service\": \"web\", \"regex_b64\": \"YQBi\"}", CLI_EXIT_INVALID,
                "NUL");
    web_refuses("filter/add", "{\"service\": \"web\", \"regex\": [1]}", CLI_EXIT_USAGE,
                "expected");
    web_refuses("stats", "{\"watch\": true}", CLI_EXIT_USAGE, "/api/live");
    web_refuses("events", "{\"follow\": \"true\"}", CLI_EXIT_USAGE, "/api/live");
    web_refuses("capture", "{\"service\": \"web\", \"pcap\": \"/tmp/out.pcap\"}", CLI_EXIT_USAGE,
                "pcap takes true");
    web_refuses("export", "{\"file\": \"/tmp/x.json\"}", CLI_EXIT_USAGE, "unknown parameter");
    {
        json_t *arr = json_array(), *err = NULL;
        void *req = NULL;
        size_t len;
        int status;

        cr_assert_eq(ctl_webapi_request(find("status"), arr, NULL, &req, &len, &status, &err),
                     -EINVAL);
        cr_assert_eq(status, 400);
        json_decref(err);
        json_decref(arr);
    }
}

Test(webapi, import_file_is_content_never_a_path)
{
    char *cfg = tmpfile_with("{\"services\": []}");
    char params[256];
    json_t *pj, *err = NULL;
    void *req = NULL;
    size_t len;
    int status;
    const char *msg;

    /* the name of a valid file is not valid JSON: refused as the bad document it is */
    (void)snprintf(params, sizeof(params), "{\"file\": \"%s\"}", cfg);
    pj = params_of(params);
    cr_assert_eq(ctl_webapi_request(find("import"), pj, NULL, &req, &len, &status, &err), -EINVAL);
    msg = json_string_value(json_object_get(err, "error"));
    cr_assert(msg && strstr(msg, "import: -:"), "%s", msg);
    cr_assert_eq(json_integer_value(json_object_get(err, "exit")), CLI_EXIT_INVALID);
    cr_assert_eq(status, 400);
    json_decref(err);
    json_decref(pj);
    web_refuses("import", "{}", CLI_EXIT_USAGE, "missing FILE");
    web_refuses("filter/import", "{\"service\": \"web\", \"file\": \"c2x /a/\\n\"}",
                CLI_EXIT_INVALID, "line 1");
    unlink(cfg);
    free(cfg);
}

/* ---- replies: byte for byte fgexctl's ---- */

struct web_reply {
    int status;
    const char *ctype;
    char *body;
    size_t len;
    char *disposition;
};

static struct web_reply web_reply(const char *path, const char *params, const Fgx__Ctl__Reply *rep)
{
    struct packed q = web_request(path, params, NULL);
    size_t rlen = fgx__ctl__reply__get_packed_size(rep);
    uint8_t *rbuf = malloc(rlen + 1);
    struct web_reply w;
    void *body;

    cr_assert_not_null(rbuf);
    (void)fgx__ctl__reply__pack(rep, rbuf);
    cr_assert_eq(ctl_webapi_reply(find(path), q.buf, q.len, rbuf, rlen, &w.status, &w.ctype, &body,
                                  &w.len, &w.disposition),
                 0);
    w.body = body;
    free(q.buf);
    free(rbuf);
    return w;
}

/* What `fgexctl --json ARGV` prints on stdout for rep (run_one's output part). */
static char *cli_output(char **argv, const Fgx__Ctl__Reply *rep, size_t *len)
{
    struct cli_cmd cmd;
    struct cli_local local;
    char *out = NULL;
    FILE *f = open_memstream(&out, len);

    cr_assert_not_null(f);
    cr_assert_eq(cli_args_parse(argc_of(argv), argv, NULL, &cmd), 0, "%s", cmd.err);
    cr_assert_eq(cli_local_prepare(&cmd, &local), 0, "%s", local.err);
    if (cli_local_prints(&cmd))
        cr_assert_eq(cli_local_finish(&cmd, &local, rep, f), 0, "%s", local.err);
    else
        cr_assert_eq(cli_fmt_reply(f, &cmd.req, rep, cmd.json), 0);
    (void)fclose(f);
    cli_local_release(&cmd, &local);
    return out;
}

static void same_output(char **argv, const char *path, const char *params,
                        const Fgx__Ctl__Reply *rep)
{
    size_t n;
    char *a = cli_output(argv, rep, &n);
    struct web_reply w = web_reply(path, params, rep);

    cr_assert_eq(w.status, 200, "%s: %.*s", path, (int)w.len, w.body);
    cr_assert_str_eq(w.ctype, "application/json");
    cr_assert_eq(w.len, n, "%s:\nfgexctl %s\nweb     %.*s", path, a, (int)w.len, w.body);
    cr_assert(memcmp(a, w.body, n) == 0, "%s:\nfgexctl %s\nweb     %.*s", path, a, (int)w.len,
              w.body);
    cr_assert_eq(w.body[w.len - 1], '\n', "one line, as printed");
    cr_assert(memchr(w.body, '\n', w.len - 1) == NULL, "one line");
    free(a);
    free(w.body);
    free(w.disposition);
}

Test(webapi, replies_print_as_fgexctl_prints_them)
{
    Fgx__Ctl__Reply rep = FGX__CTL__REPLY__INIT;
    Fgx__Ctl__Service s1 = FGX__CTL__SERVICE__INIT, *sv[1] = {&s1};
    Fgx__Ctl__Filter f1 = FGX__CTL__FILTER__INIT, *fv[1] = {&f1};
    Fgx__Ctl__Status st = FGX__CTL__STATUS__INIT;
    Fgx__Ctl__ServiceStats ss = FGX__CTL__SERVICE_STATS__INIT, *ssv[1] = {&ss};
    Fgx__Ctl__Event ev = FGX__CTL__EVENT__INIT, *evv[1] = {&ev};
    Fgx__Ctl__FwConfig fw = FGX__CTL__FW_CONFIG__INIT;
    char *rules = tmpfile_with("c2s /evil/\n");

    s1.id = 3;
    s1.name = "web";
    s1.proto = FGX__CTL__PROTO__PROTO_TCP;
    s1.port = 8080;
    s1.ip = "";
    s1.active = true;
    f1.id = 7;
    f1.service_id = 3;
    f1.regex = "evil\xff[0-9]+";
    f1.dir = FGX__CTL__DIR__DIR_C2S;
    f1.active = true;
    rep.n_services = 1;
    rep.services = sv;
    rep.n_filters = 1;
    rep.filters = fv;
    same_output(ARGV("service", "list"), "service/list", "{}", &rep);
    same_output(ARGV("service", "show", "web"), "service/show", "{\"service\": \"web\"}", &rep);
    same_output(ARGV("filter", "list", "web"), "filter/list", "{\"service\": \"web\"}", &rep);
    same_output(ARGV("filter", "add", "web", "evil"), "filter/add",
                "{\"service\": \"web\", \"regex\": \"evil\"}", &rep);
    same_output(ARGV("filter", "export", "web"), "filter/export", "{\"service\": \"web\"}", &rep);
    same_output(ARGV("filter", "import", "web", rules), "filter/import",
                "{\"service\": \"web\", \"file\": \"c2s /evil/\\n\"}", &rep);
    same_output(ARGV("filter", "import", "web", rules, "--dry-run"), "filter/import",
                "{\"service\": \"web\", \"file\": \"c2s /evil/\\n\", \"dry_run\": true}", &rep);
    same_output(ARGV("filter", "rm", "7"), "filter/rm", "{\"filter\": 7}", &rep);
    same_output(ARGV("service", "rm", "web", "--yes"), "service/rm", "{\"service\": \"web\"}",
                &rep);
    same_output(ARGV("passwd", "--password-file", rules, "--expire-sessions"), "passwd",
                "{\"password_file\": \"x\", \"expire_sessions\": true}", &rep);
    same_output(ARGV("auth", "off"), "auth", "{\"value\": \"off\"}", &rep);

    st.version = "9.9.9";
    st.uptime = 77;
    rep.status = &st;
    same_output(ARGV("status"), "status", "{}", &rep);
    {
        /* main.c's print_versions: the client's version and the server's */
        struct web_reply w = web_reply("version", "{}", &rep);

        cr_assert_eq(w.status, 200);
        cr_assert_str_eq(w.body, "{\"client\":\"" FGX_VERSION "\",\"server\":\"9.9.9\"}\n");
        free(w.body);
    }
    rep.fingerprint = "AB:CD";
    same_output(ARGV("cert"), "cert", "{}", &rep);

    ss.service_id = 3;
    ss.name = "web";
    ss.packets = 10;
    ss.bytes = 1000;
    ss.blocked = 2;
    rep.n_service_stats = 1;
    rep.service_stats = ssv;
    same_output(ARGV("stats"), "stats", "{}", &rep);

    ev.seq = 5;
    ev.time_ns = 1700000000123456789ull;
    ev.service = "web";
    ev.filter_id = 7;
    ev.src = "10.0.0.2";
    ev.sport = 40000;
    ev.dst = "10.0.0.1";
    ev.dport = 8080;
    ev.excerpt.data = (uint8_t *)"GET /evil\x01";
    ev.excerpt.len = 10;
    ev.has_excerpt = 1;
    rep.n_events = 1;
    rep.events = evv;
    same_output(ARGV("events", "web"), "events", "{\"service\": \"web\"}", &rep);
    same_output(ARGV("events", "show", "5"), "events/show", "{\"seq\": 5}", &rep);

    fw.has_enabled = 1;
    fw.enabled = true;
    rep.fw = &fw;
    same_output(ARGV("fw", "list"), "fw/list", "{}", &rep);
    same_output(ARGV("fw", "policy", "drop"), "fw/policy", "{\"policy\": \"drop\"}", &rep);
    unlink(rules);
    free(rules);
}

Test(webapi, unconfirmed_change_is_504_with_what_was_stored)
{
    Fgx__Ctl__Reply rep = FGX__CTL__REPLY__INIT;
    Fgx__Ctl__Filter f1 = FGX__CTL__FILTER__INIT, *fv[1] = {&f1};
    struct web_reply w;
    size_t n;
    char *a;
    json_t *o, *want;

    f1.id = 7;
    f1.service_id = 3;
    f1.regex = "evil";
    f1.active = true;
    rep.n_filters = 1;
    rep.filters = fv;
    rep.code = FGX__CTL__CODE__CODE_UNAVAILABLE;
    a = cli_output(ARGV("filter", "add", "web", "evil"), &rep, &n);
    want = json_loadb(a, n, 0, NULL);
    cr_assert_not_null(want);
    w = web_reply("filter/add", "{\"service\": \"web\", \"regex\": \"evil\"}", &rep);
    cr_assert_eq(w.status, 504);
    o = json_loadb(w.body, w.len, 0, NULL);
    cr_assert_not_null(o, "%.*s", (int)w.len, w.body);
    cr_assert_eq(json_integer_value(json_object_get(o, "exit")), CLI_EXIT_UNAVAILABLE);
    cr_assert(json_equal(json_object_get(o, "result"), want), "%.*s", (int)w.len, w.body);
    cr_assert_null(w.disposition);
    json_decref(o);
    json_decref(want);
    free(a);
    free(w.body);
}

Test(webapi, export_is_the_document)
{
    Fgx__Ctl__Reply rep = FGX__CTL__REPLY__INIT;
    Fgx__Ctl__Config cfg = FGX__CTL__CONFIG__INIT;
    Fgx__Ctl__Service s1 = FGX__CTL__SERVICE__INIT, *sv[1] = {&s1};
    size_t n;
    char *a;
    struct web_reply w;

    s1.id = 1;
    s1.name = "a";
    s1.proto = FGX__CTL__PROTO__PROTO_UDP;
    s1.port = 53;
    s1.ip = "";
    cfg.n_services = 1;
    cfg.services = sv;
    rep.config = &cfg;
    a = cli_output(ARGV("export", "-"), &rep, &n);
    w = web_reply("export", "{}", &rep);
    cr_assert_eq(w.status, 200);
    cr_assert_str_eq(w.ctype, "application/json");
    cr_assert_eq(w.len, n);
    cr_assert(memcmp(w.body, a, n) == 0, "web %.*s", (int)w.len, w.body);
    cr_assert(strstr(w.body, "\"services\""));
    cr_assert_str_eq(w.disposition, "attachment; filename=\"fgex-export.json\"");
    free(a);
    free(w.body);
    free(w.disposition);
}

Test(webapi, import_reply_names_the_upload_as_stdin)
{
    Fgx__Ctl__Reply rep = FGX__CTL__REPLY__INIT;
    const char *doc = "{\"services\": [{\"name\": \"a\", \"proto\": \"tcp\", \"port\": 1}]}";
    char *path = tmpfile_with(doc);
    json_t *pj = json_pack("{s:s}", "file", doc);
    char *params = json_dumps(pj, 0);
    struct web_reply w;

    w = web_reply("import", params, &rep);
    cr_assert_eq(w.status, 200);
    cr_assert_str_eq(w.body, "{\"imported\":\"-\",\"services\":1,\"filters\":0,\"dry_run\":false,"
                             "\"diff\":[]}\n");
    free(w.body);
    free(params);
    json_decref(pj);
    unlink(path);
    free(path);
}

Test(webapi, errors_as_fgexctl_reports_them)
{
    static const struct {
        Fgx__Ctl__Code code;
        const char *error;
        int exit_code, http;
    } cases[] = {
        {FGX__CTL__CODE__CODE_NOT_FOUND, "no such service 'x'", 3, 404},
        {FGX__CTL__CODE__CODE_INVALID, "invalid regex: missing )", 4, 400},
        {FGX__CTL__CODE__CODE_EXISTS, "name 'web' is taken", 5, 409},
        {FGX__CTL__CODE__CODE_UNAVAILABLE, NULL, 6, 504},
        {FGX__CTL__CODE__CODE_AUTH, "login required", 7, 401},
        {FGX__CTL__CODE__CODE_ERROR, "controld is busy compiling", 1, 503},
        {FGX__CTL__CODE__CODE_ERROR, "lmdb: disk full", 1, 500},
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        Fgx__Ctl__Reply rep = FGX__CTL__REPLY__INIT;
        char *line = NULL, want[512];
        size_t n = 0;
        FILE *f = open_memstream(&line, &n);
        struct web_reply w;
        json_t *o;

        rep.code = cases[i].code;
        rep.error = (char *)cases[i].error;
        if (i == 2) {
            rep.has_duplicate_of = 1;
            rep.duplicate_of = 12;
        }
        if (i == 5) { /* controld marks the refusal, and says what compiles (issue 24) */
            rep.has_busy = rep.busy = 1;
            rep.busy_what = "filter import web (2000 filters)";
            rep.has_busy_secs = 1;
            rep.busy_secs = 3;
        }
        cli_fmt_error(f, &rep);
        (void)fclose(f);
        line[n - 1] = '\0';
        (void)snprintf(want, sizeof(want), "%s", line + strlen("fgexctl: "));
        w = web_reply("filter/add", "{\"service\": \"web\", \"regex\": \"x(\"}", &rep);
        cr_assert_eq(w.status, cases[i].http, "case %zu: %d", i, w.status);
        cr_assert_str_eq(w.ctype, "application/json");
        o = json_loadb(w.body, w.len, 0, NULL);
        cr_assert_not_null(o);
        cr_assert_str_eq(json_string_value(json_object_get(o, "error")), want);
        cr_assert_eq(json_integer_value(json_object_get(o, "exit")), cases[i].exit_code);
        cr_assert_eq(cli_fmt_exit_code(rep.code), cases[i].exit_code);
        cr_assert_eq(json_is_true(json_object_get(o, "busy")), i == 5, "case %zu", i);
        if (i == 5) {
            cr_assert_str_eq(json_string_value(json_object_get(o, "busy_what")),
                             "filter import web (2000 filters)");
            cr_assert_eq(json_integer_value(json_object_get(o, "busy_secs")), 3);
        }
        if (i == 2)
            cr_assert_eq(json_integer_value(json_object_get(o, "duplicate_of")), 12);
        else
            cr_assert_null(json_object_get(o, "duplicate_of"));
        /* stored but unconfirmed: fgexctl prints the change too, so the error carries it */
        if (rep.code == FGX__CTL__CODE__CODE_UNAVAILABLE)
            cr_assert(json_is_null(json_object_get(o, "result")), "filter add's null");
        else
            cr_assert_null(json_object_get(o, "result"));
        json_decref(o);
        free(w.body);
        free(line);
    }
}

/* ---- downloads ---- */

static ProtobufCBinaryData a_capture(void)
{
    static const uint8_t cli4[4] = {10, 0, 0, 2}, srv4[4] = {10, 0, 0, 1};
    ProtobufCBinaryData capb;
    struct fgx_cap_ring *r;
    struct fgx_cap_ref ref;

    cr_assert_eq(fgx_cap_ring_new(1, 1, 256, &r), 0);
    fgx_cap_open(r, 6, 4, cli4, 40000, srv4, 80, 1, &ref);
    fgx_cap_add(r, &ref, 0, 100, 100, (const uint8_t *)"LOGIN x\r\n", 9, 2, false);
    fgx_cap_add(r, &ref, 1, 500, 500, (const uint8_t *)"OK\r\n", 4, 3, false);
    fgx_cap_add(r, &ref, 0, 100, 109, (const uint8_t *)"evil1337", 8, 4, true);
    cr_assert(fgx_cap_pin(r, &ref, 5));
    cr_assert_eq(fgx_cap_take(r, &ref, &capb.data, &capb.len), 0);
    fgx_cap_ring_free(r);
    return capb;
}

Test(webapi, capture_pcap_is_the_file_fgexctl_writes)
{
    Fgx__Ctl__Reply rep = FGX__CTL__REPLY__INIT;
    ProtobufCBinaryData capb = a_capture();
    char path[] = "/tmp/fgx-webapi-pcap-XXXXXX", err[256];
    char *file = NULL;
    size_t flen, conns = 0;
    int fd = mkstemp(path);
    struct web_reply w;

    cr_assert_geq(fd, 0);
    (void)close(fd);
    rep.n_captures = 1;
    rep.captures = &capb;
    cr_assert_eq(cli_cmd_capture_write(&rep, path, &conns, err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(conns, 1);
    {
        FILE *f = fopen(path, "rb");

        cr_assert_not_null(f);
        file = malloc(65536);
        flen = fread(file, 1, 65536, f);
        (void)fclose(f);
    }
    w = web_reply("capture", "{\"service\": \"we b\", \"pcap\": \"true\"}", &rep);
    cr_assert_eq(w.status, 200);
    cr_assert_str_eq(w.ctype, "application/vnd.tcpdump.pcap");
    cr_assert_str_eq(w.disposition, "attachment; filename=\"fgex-we_b.pcap\"");
    cr_assert_gt(flen, 24);
    cr_assert_eq(w.len, flen);
    cr_assert(memcmp(w.body, file, flen) == 0, "the same pcap, byte for byte");
    cr_assert_eq(*(uint32_t *)w.body, 0xa1b23c4d, "a nanosecond pcap");
    free(w.body);
    free(w.disposition);
    free(file);
    free(capb.data);
    unlink(path);
}

Test(webapi, events_show_raw_is_the_bytes)
{
    Fgx__Ctl__Reply rep = FGX__CTL__REPLY__INIT;
    Fgx__Ctl__Event ev = FGX__CTL__EVENT__INIT, *evv[1] = {&ev};
    ProtobufCBinaryData capb = a_capture();
    struct web_reply w;

    ev.seq = 9;
    rep.n_events = 1;
    rep.events = evv;
    rep.n_captures = 1;
    rep.captures = &capb;
    w = web_reply("events/show", "{\"seq\": 9, \"raw\": true}", &rep);
    cr_assert_eq(w.status, 200);
    cr_assert_str_eq(w.ctype, "application/octet-stream");
    cr_assert_eq(w.len, 17);
    cr_assert(memcmp(w.body, "LOGIN x\r\nevil1337", 17) == 0);
    cr_assert_str_eq(w.disposition, "attachment; filename=\"fgex-event-9-c2s.bin\"");
    free(w.body);
    free(w.disposition);
    w = web_reply("events/show", "{\"seq\": 9, \"raw\": true, \"dir\": \"s2c\"}", &rep);
    cr_assert_eq(w.len, 4);
    cr_assert(memcmp(w.body, "OK\r\n", 4) == 0);
    free(w.body);
    free(w.disposition);
    /* without a capture: 404, and no bytes */
    rep.n_captures = 0;
    w = web_reply("events/show", "{\"seq\": 9, \"raw\": true}", &rep);
    cr_assert_eq(w.status, 404);
    cr_assert(strstr(w.body, "has no capture"));
    free(w.body);
    free(capb.data);
}

/* ---- the live helpers ---- */

Test(webapi, live_json_is_fgexctl_s)
{
    Fgx__Ctl__Event ev = FGX__CTL__EVENT__INIT;
    Fgx__Ctl__ScriptLogEntry le = FGX__CTL__SCRIPT_LOG_ENTRY__INIT;
    Fgx__Ctl__Reply rep = FGX__CTL__REPLY__INIT;
    Fgx__Ctl__ServiceStats ss = FGX__CTL__SERVICE_STATS__INIT, *ssv[1] = {&ss};
    char *a, *b;
    size_t n;
    uint8_t *buf;
    json_t *j;

    ev.seq = 3;
    ev.service = "web";
    ev.excerpt.data = (uint8_t *)"\xff\x00z";
    ev.excerpt.len = 3;
    ev.has_excerpt = 1;
    j = ctl_webapi_event_json(&ev);
    a = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(j);
    j = cli_cmd_event_json(&ev);
    b = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER);
    cr_assert_str_eq(a, b);
    cr_assert(strstr(a, "excerpt_b64"));
    free(a);
    free(b);
    json_decref(j);

    ss.service_id = 1;
    ss.name = "web";
    ss.bytes = 5;
    rep.n_service_stats = 1;
    rep.service_stats = ssv;
    n = fgx__ctl__reply__get_packed_size(&rep);
    buf = malloc(n);
    (void)fgx__ctl__reply__pack(&rep, buf);
    j = ctl_webapi_stats_json(buf, n);
    cr_assert_not_null(j);
    a = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER);
    b = cli_output(ARGV("stats"), &rep, &n);
    cr_assert_eq(strlen(a) + 1, n);
    cr_assert(strncmp(a, b, n - 1) == 0, "%s\n%s", a, b);
    free(a);
    free(b);
    json_decref(j);
    cr_assert_null(ctl_webapi_stats_json("\xff\xff", 2), "a reply that does not parse");
    free(buf);

    le.seq = 4;
    le.kind = "print";
    le.function = "f";
    le.text = "hello";
    j = ctl_webapi_script_log_json(&le);
    a = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER);
    cr_assert_str_eq(a, "{\"seq\":4,\"time_ns\":0,\"kind\":\"print\",\"function\":\"f\","
                        "\"text\":\"hello\"}");
    free(a);
    json_decref(j);
}

/* ---- the documentation ---- */

Test(webapi, every_endpoint_is_in_docs_web_md)
{
    char *doc = NULL;
    size_t len = 0;
    FILE *f = fopen("docs/web.md", "rb");

    cr_assert_not_null(f, "run from the source tree: docs/web.md");
    {
        FILE *m = open_memstream(&doc, &len);
        char buf[4096];
        size_t n;

        cr_assert_not_null(m);
        while ((n = fread(buf, 1, sizeof(buf), f)) > 0)
            (void)fwrite(buf, 1, n, m);
        (void)fclose(m);
    }
    (void)fclose(f);
    for (size_t i = 0; ctl_webapi_at(i); i++) {
        const struct ctl_webapi_cmd *c = ctl_webapi_at(i);
        char row[128];
        const char *at;

        (void)snprintf(row, sizeof(row), "| `/api/cmd/%s` | %s |", ctl_webapi_path(c),
                       ctl_webapi_read_only(c) ? "GET, POST" : "POST");
        at = strstr(doc, row);
        cr_assert_not_null(at, "docs/web.md has no row '%s'", row);
        /* and every positional parameter is named in it */
        for (int k = 0; k < 2; k++) {
            const char *pn = ctl_webapi_pos_name(c, k);
            char want[40];
            const char *eol = strchr(at, '\n');

            if (!pn || strcmp(pn, "show") == 0)
                continue;
            (void)snprintf(want, sizeof(want), "`%s`", pn);
            cr_assert(memmem(at, (size_t)(eol - at), want, strlen(want)),
                      "docs/web.md's row of %s lacks %s", ctl_webapi_path(c), want);
        }
    }
    free(doc);
}
