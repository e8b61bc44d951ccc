/* Unit tests for fgexctl's contexts (cli_ctx.c), the fan-out's output and refusals
 * (cli_fanout.c), the confirmation of `service rm` (cli_confirm.c, on a real pseudo-terminal)
 * and the parse of -C and --yes (cli_args.c). Files go to a directory of the test's own
 * ($FGEX_CONFIG_DIR). */
#include <criterion/criterion.h>

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fgexctl/cli_args.h"
#include "fgexctl/cli_confirm.h"
#include "fgexctl/cli_ctx.h"
#include "fgexctl/cli_fanout.h"
#include "fgexctl/cli_pin.h"
#include "fgexctl/cmd.h"

#define ARGV(...) ((char *[]){"fgexctl", __VA_ARGS__, NULL})

static int argc_of(char **v)
{
    int n = 0;

    while (v[n])
        n++;
    return n;
}

static char tmpdir[256];

static void use_tmpdir(void)
{
    (void)snprintf(tmpdir, sizeof(tmpdir), "/tmp/fgx-unit-ctx-XXXXXX");
    cr_assert_not_null(mkdtemp(tmpdir));
    cr_assert_eq(setenv("FGEX_CONFIG_DIR", tmpdir, 1), 0);
    cli_pin_dir_set(NULL);
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static void rm_tmpdir(void)
{
    (void)nftw(tmpdir, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
    cli_pin_dir_set(NULL);
}

static void three(struct cli_ctx_store *s)
{
    memset(s, 0, sizeof(*s));
    cr_assert_eq(cli_ctx_add(s, "box1", "tls+tcp://10.60.1.1:7443", NULL, false), 0);
    cr_assert_eq(cli_ctx_add(s, "box2", "tls+tcp://[fd00::2]:7443", "/etc/ca.pem", false), 0);
    cr_assert_eq(cli_ctx_add(s, "lab.3", "ipc:///tmp/x.sock", NULL, false), 0);
}

Test(cli_ctx, names)
{
    static const char *const good[] = {"box1", "a", "Box_2.team-9", "x123456789"};
    static const char *const bad[] = {"",    "all", "local", "-x", ".hidden",
                                      "a/b", "a,b", "a b",   "ü",  "../x"};
    char err[200], longname[80];

    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
        cr_assert_eq(cli_ctx_name_check(good[i], err, sizeof(err)), 0, "%s: %s", good[i], err);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err[0] = '\0';
        cr_assert_eq(cli_ctx_name_check(bad[i], err, sizeof(err)), -EINVAL, "'%s' accepted",
                     bad[i]);
        cr_assert(err[0], "no reason for '%s'", bad[i]);
    }
    memset(longname, 'a', 65);
    longname[65] = '\0';
    cr_assert_eq(cli_ctx_name_check(longname, err, sizeof(err)), -EINVAL);
    longname[64] = '\0';
    cr_assert_eq(cli_ctx_name_check(longname, err, sizeof(err)), 0);
}

Test(cli_ctx, urls)
{
    cr_assert(cli_ctx_url_valid("ipc:///run/fgex/control.sock"));
    cr_assert(cli_ctx_url_valid("tls+tcp://10.0.0.1:7443"));
    cr_assert(cli_ctx_url_valid("tls+tcp6://[fd00::1]:1"));
    cr_assert_not(cli_ctx_url_valid("ipc://"));
    cr_assert_not(cli_ctx_url_valid("tls+tcp://10.0.0.1"));
    cr_assert_not(cli_ctx_url_valid("tls+tcp://10.0.0.1:0"));
    cr_assert_not(cli_ctx_url_valid("tls+tcp://10.0.0.1:65536"));
    cr_assert_not(cli_ctx_url_valid("tcp://10.0.0.1:7443"));
}

Test(cli_ctx, add_replace_remove_current)
{
    struct cli_ctx_store s;
    const struct cli_ctx *c;

    three(&s);
    cr_assert_eq(s.n, 3);
    cr_assert_eq(cli_ctx_add(&s, "box1", "ipc:///other", NULL, false), -EEXIST);
    cr_assert_str_eq(cli_ctx_find(&s, "box1")->url, "tls+tcp://10.60.1.1:7443");
    cr_assert_eq(cli_ctx_add(&s, "box1", "ipc:///other", "/ca", true), 0);
    cr_assert_eq(s.n, 3, "a replace adds nothing");
    c = cli_ctx_find(&s, "box1");
    cr_assert_str_eq(c->url, "ipc:///other");
    cr_assert_str_eq(c->ca, "/ca");
    cr_assert_eq(cli_ctx_add(&s, "all", "ipc:///x", NULL, false), -EINVAL);
    /* local is built in, and not one of the stored */
    c = cli_ctx_find(&s, "local");
    cr_assert_not_null(c);
    cr_assert(c->builtin);
    cr_assert_str_eq(c->url, CLI_DEFAULT_URL);
    cr_assert_null(cli_ctx_find(&s, "nope"));
    s.current = strdup("box2");
    cr_assert_eq(cli_ctx_remove(&s, "box2"), 0);
    cr_assert_null(s.current, "the removed context stayed current");
    cr_assert_eq(cli_ctx_remove(&s, "box2"), -ENOENT);
    cr_assert_eq(s.n, 2);
    cr_assert_str_eq(s.v[0].name, "box1");
    cr_assert_str_eq(s.v[1].name, "lab.3", "the order is kept");
    cli_ctx_store_release(&s);
}

Test(cli_ctx, format_parse_round_trip)
{
    struct cli_ctx_store s, t;
    char err[300], *text;

    three(&s);
    s.current = strdup("lab.3");
    text = cli_ctx_format(&s);
    cr_assert_not_null(text);
    cr_assert(strstr(text, "\"format\": \"fgex-contexts\""), "%s", text);
    cr_assert_eq(cli_ctx_parse(text, strlen(text), &t, err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(t.n, 3);
    for (size_t i = 0; i < 3; i++) {
        cr_assert_str_eq(t.v[i].name, s.v[i].name);
        cr_assert_str_eq(t.v[i].url, s.v[i].url);
        cr_assert_eq(!t.v[i].ca, !s.v[i].ca);
    }
    cr_assert_str_eq(t.v[1].ca, "/etc/ca.pem");
    cr_assert_str_eq(t.current, "lab.3");
    free(text);
    cli_ctx_store_release(&t);
    free(s.current);
    s.current = NULL;
    text = cli_ctx_format(&s);
    cr_assert(strstr(text, "\"current\": null"), "%s", text);
    cr_assert_eq(cli_ctx_parse(text, strlen(text), &t, err, sizeof(err)), 0, "%s", err);
    cr_assert_null(t.current);
    free(text);
    cli_ctx_store_release(&t);
    cli_ctx_store_release(&s);
}

Test(cli_ctx, parse_refuses_bad_files)
{
    static const struct {
        const char *text, *why;
    } bad[] = {
        {"[]", "not a JSON object"},
        {"{\"format\": \"fgex-config\"}", "\"format\""},
        {"{\"contexts\": {}}", "not an array"},
        {"{\"contexts\": [{\"name\": \"a\"}]}", "contexts[0] needs"},
        {"{\"contexts\": [{\"name\": \"all\", \"url\": \"ipc:///x\"}]}", "reserved"},
        {"{\"contexts\": [{\"name\": \"a\", \"url\": \"http://x\"}]}", "invalid URL"},
        {"{\"contexts\": [{\"name\": \"a\", \"url\": \"ipc:///x\"}, "
         "{\"name\": \"a\", \"url\": \"ipc:///y\"}]}",
         "used twice"},
        {"{\"current\": \"zz\", \"contexts\": []}", "\"current\" names no context"},
        {"{\"contexts\": [", "line 1"},
    };
    struct cli_ctx_store s;
    char err[300];

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err[0] = '\0';
        cr_assert_eq(cli_ctx_parse(bad[i].text, strlen(bad[i].text), &s, err, sizeof(err)), -EINVAL,
                     "accepted %s", bad[i].text);
        cr_assert(strstr(err, bad[i].why), "%s: '%s' lacks '%s'", bad[i].text, err, bad[i].why);
        cr_assert_eq(s.n, 0);
        cr_assert_null(s.v);
    }
    /* An empty object is an empty store; "local" may be current by name. */
    cr_assert_eq(cli_ctx_parse("{}", 2, &s, err, sizeof(err)), 0);
    cr_assert_eq(s.n, 0);
    cli_ctx_store_release(&s);
}

Test(cli_ctx, select)
{
    struct cli_ctx_store s, empty = {0};
    const struct cli_ctx **v;
    size_t n;
    char err[300];

    three(&s);
    cr_assert_eq(cli_ctx_select(&s, "all", &v, &n, err, sizeof(err)), 0);
    cr_assert_eq(n, 3, "all is every stored one, not the built-in local");
    cr_assert_str_eq(v[0]->name, "box1");
    cr_assert_str_eq(v[2]->name, "lab.3");
    free(v);
    cr_assert_eq(cli_ctx_select(&s, "lab.3,box1,lab.3,local", &v, &n, err, sizeof(err)), 0);
    cr_assert_eq(n, 3, "each once");
    cr_assert_str_eq(v[0]->name, "lab.3", "in the order given");
    cr_assert_str_eq(v[1]->name, "box1");
    cr_assert(v[2]->builtin);
    free(v);
    cr_assert_eq(cli_ctx_select(&s, "box2", &v, &n, err, sizeof(err)), 0);
    cr_assert_eq(n, 1);
    free(v);
    cr_assert_eq(cli_ctx_select(&s, "box1,nope,zz", &v, &n, err, sizeof(err)), -ENOENT);
    cr_assert(strstr(err, "no such contexts: nope, zz"), "%s", err);
    cr_assert_eq(cli_ctx_select(&s, "box1,,box2", &v, &n, err, sizeof(err)), -EINVAL);
    cr_assert(strstr(err, "empty"), "%s", err);
    cr_assert_eq(cli_ctx_select(&s, "box1,", &v, &n, err, sizeof(err)), -EINVAL);
    cr_assert_eq(cli_ctx_select(&s, "box1,all", &v, &n, err, sizeof(err)), -EINVAL);
    cr_assert_eq(cli_ctx_select(&empty, "all", &v, &n, err, sizeof(err)), -ENOENT);
    cr_assert(strstr(err, "context add"), "%s", err);
    cli_ctx_store_release(&s);
}

Test(cli_ctx, load_save_mode_and_apply, .init = use_tmpdir, .fini = rm_tmpdir)
{
    struct cli_ctx_store s, t;
    struct cli_cmd cmd;
    char err[300], path[PATH_MAX], dir[PATH_MAX];
    struct stat st;

    cr_assert_eq(cli_ctx_load(&t, err, sizeof(err)), 0, "a missing file is no error: %s", err);
    cr_assert_eq(t.n, 0);
    three(&s);
    s.current = strdup("box2");
    cr_assert_eq(cli_ctx_save(&s, err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(cli_ctx_file_path(path, sizeof(path)), 0);
    cr_assert(strstr(path, tmpdir) == path && strstr(path, "/contexts.json"), "%s", path);
    cr_assert_eq(stat(path, &st), 0);
    cr_assert_eq(st.st_mode & 0777, 0600, "mode %o", st.st_mode & 0777);
    cr_assert_eq(cli_ctx_load(&t, err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(t.n, 3);
    cr_assert_str_eq(t.current, "box2");

    /* A stored context has its own directory for pins and sessions; local uses the base. */
    memset(&cmd, 0, sizeof(cmd));
    cr_assert_eq(cli_ctx_apply(&cmd, cli_ctx_find(&t, "box2")), 0);
    cr_assert_str_eq(cmd.url, "tls+tcp://[fd00::2]:7443");
    cr_assert_str_eq(cmd.ca, "/etc/ca.pem");
    cr_assert_eq(cli_pin_dir(dir, sizeof(dir)), 0);
    (void)snprintf(path, sizeof(path), "%s/contexts/box2", tmpdir);
    cr_assert_str_eq(dir, path);
    memset(&cmd, 0, sizeof(cmd));
    cmd.ca = "/given.pem";
    cr_assert_eq(cli_ctx_apply(&cmd, cli_ctx_find(&t, "box2")), 0);
    cr_assert_str_eq(cmd.ca, "/given.pem", "--ca on the command line comes first");
    cr_assert_eq(cli_ctx_apply(&cmd, cli_ctx_find(&t, "local")), 0);
    cr_assert_eq(cli_pin_dir(dir, sizeof(dir)), 0);
    cr_assert_str_eq(dir, tmpdir);
    cli_ctx_store_release(&t);
    cli_ctx_store_release(&s);

    /* A file that is not ours is refused with its name, and not overwritten by the load. */
    cr_assert_eq(cli_ctx_file_path(path, sizeof(path)), 0);
    cr_assert_eq(cli_pin_write_file(path, "{\"contexts\": 3}", 15), 0);
    cr_assert_eq(cli_ctx_load(&t, err, sizeof(err)), -EINVAL);
    cr_assert(strstr(err, path) && strstr(err, "not an array"), "%s", err);
}

Test(cli_ctx, parse_context_and_yes)
{
    struct cli_cmd cmd;
    char **v;
    char what[200];

    v = ARGV("-C", "box1,box2", "status");
    cr_assert_eq(cli_args_parse(argc_of(v), v, NULL, &cmd), 0, "%s", cmd.err);
    cr_assert_str_eq(cmd.context, "box1,box2");
    cr_assert_not(cmd.url_given);
    v = ARGV("-Call", "--json", "status");
    cr_assert_eq(cli_args_parse(argc_of(v), v, NULL, &cmd), 0, "%s", cmd.err);
    cr_assert_str_eq(cmd.context, "all");
    v = ARGV("filter", "add", "web", "evil[0-9]+", "--context=b3");
    cr_assert_eq(cli_args_parse(argc_of(v), v, NULL, &cmd), 0, "%s", cmd.err);
    cr_assert_str_eq(cmd.context, "b3");
    cr_assert_str_eq(cmd.req.filter_add->regex, "evil[0-9]+");
    v = ARGV("-c", "ipc:///x", "status");
    cr_assert_eq(cli_args_parse(argc_of(v), v, "ipc:///env", &cmd), 0, "%s", cmd.err);
    cr_assert(cmd.url_given);
    v = ARGV("status");
    cr_assert_eq(cli_args_parse(argc_of(v), v, "ipc:///env", &cmd), 0, "%s", cmd.err);
    cr_assert_not(cmd.url_given, "$FGEX_URL is not -c");
    v = ARGV("-C");
    cr_assert_eq(cli_args_parse(argc_of(v), v, NULL, &cmd), -EINVAL);
    cr_assert_eq(cmd.exit_code, CLI_EXIT_USAGE);

    /* service rm asks, unless --yes (anywhere); filter rm does not ask. */
    v = ARGV("service", "rm", "web");
    cr_assert_eq(cli_args_parse(argc_of(v), v, NULL, &cmd), 0, "%s", cmd.err);
    cr_assert(cli_confirm_needed(&cmd, what, sizeof(what)));
    cr_assert_str_eq(what, "remove service web and all its filters");
    v = ARGV("service", "rm", "--yes", "web");
    cr_assert_eq(cli_args_parse(argc_of(v), v, NULL, &cmd), 0, "%s", cmd.err);
    cr_assert_not(cli_confirm_needed(&cmd, what, sizeof(what)));
    cr_assert_str_eq(cmd.req.service_rm->ref, "web");
    v = ARGV("-y", "service", "rm", "web");
    cr_assert_eq(cli_args_parse(argc_of(v), v, NULL, &cmd), 0, "%s", cmd.err);
    cr_assert_not(cli_confirm_needed(&cmd, what, sizeof(what)));
    v = ARGV("filter", "rm", "3");
    cr_assert_eq(cli_args_parse(argc_of(v), v, NULL, &cmd), 0, "%s", cmd.err);
    cr_assert_not(cli_confirm_needed(&cmd, what, sizeof(what)));
    v = ARGV("filter", "rm", "3", "--yes");
    cr_assert_eq(cli_args_parse(argc_of(v), v, NULL, &cmd), -EINVAL, "--yes where nothing asks");
    v = ARGV("service", "rm", "we\x1b[31m");
    cr_assert_eq(cli_args_parse(argc_of(v), v, NULL, &cmd), 0, "%s", cmd.err);
    cr_assert(cli_confirm_needed(&cmd, what, sizeof(what)));
    cr_assert_null(strchr(what, '\x1b'), "a terminal escape reached the prompt: %s", what);

    /* context commands send nothing */
    v = ARGV("context", "add", "box1", "tls+tcp://10.0.0.1:7443", "--replace");
    cr_assert_eq(cli_args_parse(argc_of(v), v, NULL, &cmd), 0, "%s", cmd.err);
    cr_assert(cmd.def->flags & CLI_CMD_LOCAL);
    cr_assert(cmd.ctx_replace);
    cr_assert_str_eq(cmd.pos[1], "tls+tcp://10.0.0.1:7443");
    v = ARGV("context", "add", "all", "ipc:///x");
    cr_assert_eq(cli_args_parse(argc_of(v), v, NULL, &cmd), -EINVAL);
    cr_assert_eq(cmd.exit_code, CLI_EXIT_INVALID);
    v = ARGV("context", "add", "b", "http://x");
    cr_assert_eq(cli_args_parse(argc_of(v), v, NULL, &cmd), -EINVAL);
    cr_assert_eq(cmd.exit_code, CLI_EXIT_INVALID);
    v = ARGV("context", "show");
    cr_assert_eq(cli_args_parse(argc_of(v), v, NULL, &cmd), 0, "%s", cmd.err);
    cr_assert_null(cmd.pos[0]);
    cr_assert_null(cli_cmd_of_req(FGX__CTL__REQUEST__REQ__NOT_SET),
                   "a context command was taken for a request");
}

Test(cli_ctx, confirm_on_a_terminal)
{
    int m = posix_openpt(O_RDWR | O_NOCTTY), s;
    FILE *prompt = tmpfile();
    char buf[256];
    size_t n;

    cr_assert_neq(m, -1);
    cr_assert_eq(grantpt(m), 0);
    cr_assert_eq(unlockpt(m), 0);
    s = open(ptsname(m), O_RDWR | O_NOCTTY);
    cr_assert_neq(s, -1);
    cr_assert_eq(write(m, "y\n", 2), 2);
    cr_assert_eq(cli_confirm_ask("remove service web", "box1", s, prompt), 1);
    cr_assert_eq(write(m, "YES\n", 4), 4);
    cr_assert_eq(cli_confirm_ask("remove service web", "box1", s, prompt), 1);
    cr_assert_eq(write(m, "\n", 1), 1);
    cr_assert_eq(cli_confirm_ask("remove service web", "box1", s, prompt), 0, "the default is no");
    cr_assert_eq(write(m, "yess\n", 5), 5);
    cr_assert_eq(cli_confirm_ask("remove service web", "box1", s, prompt), 0);
    rewind(prompt);
    n = fread(buf, 1, sizeof(buf) - 1, prompt);
    buf[n] = '\0';
    cr_assert(strstr(buf, "remove service web on box1? [y/N] "), "%s", buf);
    /* not a terminal: nothing is asked */
    cr_assert_eq(cli_confirm_ask("x", "y", fileno(prompt), prompt), -ENOTTY);
    (void)close(s);
    (void)close(m);
    (void)fclose(prompt);
}

static char *dup_s(const char *s)
{
    return s ? strdup(s) : NULL;
}

Test(cli_ctx, fanout_print_text_and_exit)
{
    struct cli_fanout_result r[3] = {
        {.name = "box1", .url = "u1", .status = 0, .out = dup_s("added filter 7 to web\n")},
        {.name = "b2",
         .url = "u2",
         .status = 1,
         .err = dup_s("fgexctl: cannot reach controld at u2: Connection refused\n")},
        {.name = "box3", .url = "u3", .status = 0, .out = dup_s("")},
    };
    char *o = NULL, *e = NULL;
    size_t ol, el;
    FILE *out = open_memstream(&o, &ol), *err = open_memstream(&e, &el);
    int st = cli_fanout_print(r, 3, false, out, err);

    (void)fclose(out);
    (void)fclose(err);
    cr_assert_eq(st, 1);
    cr_assert_str_eq(o, "box1: added filter 7 to web\nbox3: ok\n");
    cr_assert(strstr(e, "b2:   cannot reach controld at u2: Connection refused\n"), "%s", e);
    cr_assert(strstr(e, "failed on 1 of 3 contexts: b2 (exit 1)"), "%s", e);
    free(o);
    free(e);

    /* every one failed alike: that status; differently: 1; none: 0 */
    r[0].status = 8;
    r[1].status = 8;
    r[2].status = 8;
    out = fopen("/dev/null", "w");
    cr_assert_eq(cli_fanout_print(r, 3, false, out, out), 8);
    r[2].status = 3;
    cr_assert_eq(cli_fanout_print(r, 3, false, out, out), 1);
    r[0].status = r[1].status = r[2].status = 0;
    cr_assert_eq(cli_fanout_print(r, 3, false, out, out), 0);
    (void)fclose(out);
    cli_fanout_release(r, 3);
}

Test(cli_ctx, fanout_print_json)
{
    struct cli_fanout_result r[2] = {
        {.name = "box1",
         .url = "u1",
         .status = 0,
         .out = dup_s("{\"id\":7}\n"),
         .err = dup_s("fgexctl: first connection to x: pinned\n  AB:CD\n")},
        {.name = "box2",
         .url = "u2",
         .status = 8,
         .err = dup_s("fgexctl: the certificate of h has CHANGED\n")},
    };
    char *o = NULL, *e = NULL;
    size_t ol, el;
    FILE *out = open_memstream(&o, &ol), *err = open_memstream(&e, &el);
    int st = cli_fanout_print(r, 2, true, out, err);

    (void)fclose(out);
    (void)fclose(err);
    cr_assert_eq(st, 8);
    cr_assert_str_eq(o, "[{\"context\":\"box1\",\"url\":\"u1\",\"exit\":0,\"ok\":true,\"result\":"
                        "{\"id\":7},\"messages\":[\"first connection to x: pinned\",\"  AB:CD\"]},"
                        "{\"context\":\"box2\",\"url\":\"u2\",\"exit\":8,\"ok\":false,"
                        "\"messages\":[\"the certificate of h has CHANGED\"]}]\n");
    cr_assert(strstr(e, "failed on 1 of 2 contexts: box2 (exit 8)"), "%s", e);
    free(o);
    free(e);
    cli_fanout_release(r, 2);
}

Test(cli_ctx, fanout_refuses_terminal_commands)
{
    const struct {
        char **argv;
        const char *why;
    } no[] = {
        {ARGV("events", "--follow"), "--follow"},
        {ARGV("stats", "--watch"), "--watch"},
        {ARGV("login"), "--password-file"},
        {ARGV("passwd"), "--password-file"},
        {ARGV("import", "-"), "stdin"},
        {ARGV("filter", "import", "web", "-"), "filter import cannot"},
        {ARGV("export", "/tmp/x.json"), "one file"},
        {ARGV("--fingerprint", "AB:CD", "status"), "-C NAME for each"},
    };
    char **yes[] = {
        ARGV("status"),
        ARGV("login", "--password-file", "/tmp/pw"),
        ARGV("filter", "add", "web", "evil[0-9]+"),
        ARGV("filter", "import", "web", "/tmp/rules"),
        ARGV("service", "rm", "web", "--yes"),
    };
    struct cli_cmd cmd;
    char err[300];

    for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++) {
        cr_assert_eq(cli_args_parse(argc_of(no[i].argv), no[i].argv, NULL, &cmd), 0, "%s", cmd.err);
        err[0] = '\0';
        cr_assert_eq(cli_fanout_check(&cmd, err, sizeof(err)), -EINVAL, "%s accepted",
                     no[i].argv[1]);
        cr_assert(strstr(err, "several contexts") && strstr(err, no[i].why), "%s", err);
    }
    for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
        cr_assert_eq(cli_args_parse(argc_of(yes[i]), yes[i], NULL, &cmd), 0, "%s", cmd.err);
        cr_assert_eq(cli_fanout_check(&cmd, err, sizeof(err)), 0, "%s refused: %s", yes[i][1], err);
    }
}

Test(cli_ctx, fanout_one_line_per_object)
{
    /* One object (cli_fmt_kv lines) is one line; a table stays a table, each row prefixed. */
    struct cli_fanout_result r[2] = {
        {.name = "box1",
         .url = "u1",
         .status = 0,
         .out = dup_s("id:        7\nregex:     evil[0-9]+\nnocase:    no\n")},
        {.name = "box22", .url = "u2", .status = 0, .out = dup_s("ID  NAME\n1   web\n2   db: x\n")},
    };
    char *o = NULL;
    size_t ol;
    FILE *out = open_memstream(&o, &ol), *null = fopen("/dev/null", "w");

    cr_assert_eq(cli_fanout_print(r, 2, false, out, null), 0);
    (void)fclose(out);
    (void)fclose(null);
    cr_assert_str_eq(o, "box1:  id: 7, regex: evil[0-9]+, nocase: no\n"
                        "box22: ID  NAME\nbox22: 1   web\nbox22: 2   db: x\n");
    free(o);
    cli_fanout_release(r, 2);
}

Test(cli_ctx, help_texts)
{
    static const char *const subs[] = {"add", "use", "list", "show", "rm"};
    struct cli_cmd cmd;
    char **v;

    v = ARGV("context", "--help");
    cr_assert_eq(cli_args_parse(argc_of(v), v, NULL, &cmd), 0, "%s", cmd.err);
    cr_assert(strstr(cmd.help, "usage: fgexctl context COMMAND"), "%s", cmd.help);
    for (size_t i = 0; i < sizeof(subs) / sizeof(subs[0]); i++) {
        char *argv[] = {"fgexctl", "help", "context", (char *)subs[i], NULL};
        char want[64];

        cr_assert_eq(cli_args_parse(4, argv, NULL, &cmd), 0, "%s", cmd.err);
        (void)snprintf(want, sizeof(want), "usage: fgexctl context %s", subs[i]);
        cr_assert(strstr(cmd.help, want), "%s: %s", subs[i], cmd.help);
    }
    v = ARGV("service", "rm", "--help");
    cr_assert_eq(cli_args_parse(argc_of(v), v, NULL, &cmd), 0, "%s", cmd.err);
    cr_assert(strstr(cmd.help, "--yes"), "%s", cmd.help);
    v = ARGV("--help");
    cr_assert_eq(cli_args_parse(argc_of(v), v, NULL, &cmd), 0, "%s", cmd.err);
    cr_assert(strstr(cmd.help, "-C, --context NAME") && strstr(cmd.help, "context add NAME URL") &&
                  strstr(cmd.help, "--yes"),
              "%s", cmd.help);
    v = ARGV("context", "frob");
    cr_assert_eq(cli_args_parse(argc_of(v), v, NULL, &cmd), -EINVAL);
    cr_assert_eq(cmd.exit_code, CLI_EXIT_USAGE);
}
