/* Unit tests for issue 14's fgexctl commands: the requests `filter import --sync/--dry-run`,
 * `import --dry-run`, `history`, `undo`, `redo` and `stats --history` build, and how a diff and
 * a history are printed. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "control.pb-c.h"
#include "fgexctl/cli_args.h"
#include "fgexctl/cli_fmt.h"
#include "fgexctl/cmd.h"

static int argc_of(char **v)
{
    int n = 0;

    while (v[n])
        n++;
    return n;
}

static void parse(char **argv, struct cli_cmd *cmd, int want)
{
    int rc = cli_args_parse(argc_of(argv), argv, NULL, cmd);

    cr_assert_eq(rc, want, "parse of %s: %d (%s)", argv[1], rc, cmd->err);
}

Test(cli_history, filter_import_sync_and_dry_run)
{
    char *v[] = {"fgexctl", "filter", "import", "web", "rules.txt", "--sync", "--dry-run", NULL};
    char *both[] = {"fgexctl", "filter", "import", "web", "f", "--sync", "--replace", NULL};
    struct cli_cmd cmd;

    parse(v, &cmd, 0);
    cr_assert_eq(cmd.req.req_case, FGX__CTL__REQUEST__REQ_FILTER_IMPORT);
    cr_assert(cmd.m.filter_import.has_sync && cmd.m.filter_import.sync);
    cr_assert(cmd.req.has_dry_run && cmd.req.dry_run);
    cr_assert_str_eq(cmd.file, "rules.txt");
    parse(both, &cmd, -EINVAL);
    cr_assert(strstr(cmd.err, "exclude each other"), "%s", cmd.err);
}

Test(cli_history, import_dry_run)
{
    char *v[] = {"fgexctl", "import", "backup.json", "--dry-run", NULL};
    char *plain[] = {"fgexctl", "import", "backup.json", NULL};
    struct cli_cmd cmd;

    parse(v, &cmd, 0);
    cr_assert_eq(cmd.req.req_case, FGX__CTL__REQUEST__REQ_CONFIG_IMPORT);
    cr_assert(cmd.req.has_dry_run && cmd.req.dry_run);
    parse(plain, &cmd, 0);
    cr_assert_not(cmd.req.has_dry_run);
}

Test(cli_history, history_undo_redo)
{
    char *h[] = {"fgexctl", "history", "--since", "2h", "--limit", "5", NULL};
    char *bad[] = {"fgexctl", "history", "--since", "2 weeks", NULL};
    char *u[] = {"fgexctl", "undo", NULL};
    char *r[] = {"fgexctl", "redo", NULL};
    struct cli_cmd cmd;
    uint64_t now = (uint64_t)time(NULL);

    parse(h, &cmd, 0);
    cr_assert_eq(cmd.req.req_case, FGX__CTL__REQUEST__REQ_HISTORY);
    cr_assert(cmd.m.history.has_since && cmd.m.history.has_limit);
    cr_assert(cmd.m.history.since + 7200 >= now - 2 && cmd.m.history.since + 7200 <= now + 2);
    cr_assert_eq(cmd.m.history.limit, 5);
    parse(bad, &cmd, -EINVAL);
    parse(u, &cmd, 0);
    cr_assert_eq(cmd.req.req_case, FGX__CTL__REQUEST__REQ_UNDO);
    parse(r, &cmd, 0);
    cr_assert_eq(cmd.req.req_case, FGX__CTL__REQUEST__REQ_REDO);
}

Test(cli_history, stats_history)
{
    char *v[] = {"fgexctl", "stats", "--history", "web", "--since", "30m", NULL};
    char *watch[] = {"fgexctl", "stats", "--history", "--watch", NULL};
    char *since[] = {"fgexctl", "stats", "--since", "1h", NULL};
    struct cli_cmd cmd;

    parse(v, &cmd, 0);
    cr_assert_eq(cmd.req.req_case, FGX__CTL__REQUEST__REQ_STATS_HISTORY);
    cr_assert_str_eq(cmd.m.stats_history.service, "web");
    cr_assert(cmd.m.stats_history.has_since);
    parse(watch, &cmd, -EINVAL);
    parse(since, &cmd, -EINVAL);
}

static char *render(const Fgx__Ctl__Request *req, const Fgx__Ctl__Reply *rep, bool json)
{
    char *out = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&out, &len);

    cr_assert_eq(cli_fmt_reply(f, req, rep, json), 0);
    fclose(f);
    return out;
}

Test(cli_history, undo_prints_the_change_and_its_diff)
{
    Fgx__Ctl__Request req = FGX__CTL__REQUEST__INIT;
    Fgx__Ctl__Reply rep = FGX__CTL__REPLY__INIT;
    Fgx__Ctl__Change c = FGX__CTL__CHANGE__INIT;
    Fgx__Ctl__DiffEntry d = FGX__CTL__DIFF_ENTRY__INIT, k = FGX__CTL__DIFF_ENTRY__INIT;
    Fgx__Ctl__Change *cs[] = {&c};
    Fgx__Ctl__DiffEntry *ds[] = {&d, &k};
    char *out;

    req.req_case = FGX__CTL__REQUEST__REQ_UNDO;
    c.seq = 9;
    c.what = "undo of #8: filter rm 3";
    c.who = "local";
    c.kind = "undo";
    d.op = "add";
    d.kind = "filter";
    d.id = 3;
    d.service = "web";
    d.regex = "evil[0-9]+";
    d.has_dir = 1;
    d.dir = FGX__CTL__DIR__DIR_C2S;
    d.active = 1;
    k.op = "keep";
    k.kind = "service";
    k.id = 1;
    k.service = "web";
    rep.n_changes = 1;
    rep.changes = cs;
    rep.n_diff = 2;
    rep.diff = ds;
    out = render(&req, &rep, false);
    cr_assert_str_eq(out, "undo of #8: filter rm 3 (recorded as #9)\n"
                          "+ filter 3 web c2s /evil[0-9]+/\n"
                          "1 added, 0 removed, 0 changed, 1 unchanged\n");
    free(out);
    out = render(&req, &rep, true);
    cr_assert(strstr(out, "\"change\":{\"seq\":9,") && strstr(out, "\"kind\":\"undo\"") &&
                  strstr(out, "\"diff\":[{\"op\":\"add\",\"kind\":\"filter\",\"id\":3,"),
              "%s", out);
    free(out);
}
