/* fgexctl, issue 14's commands: `history`, `undo`, `redo`, the request of `stats --history`
 * (cli_cmd_stats_history_build; cmd_stats.c renders its reply) and the renderers of an import's
 * diff (`filter import --sync`, `import`, `--dry-run`), which cli_local.c prints for the
 * imports. */
#include "cmd.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli_fmt.h"
#include "cli_json.h"

/* ---- usage ---- */

/* clang-format off */
static const char usage_history[] =
    "usage: fgexctl history [--since DURATION] [--limit N] [--json]\n"
    "\n"
    "Every change to services and filters, oldest first: its number, time (UTC),\n"
    "who made it (local, or the remote peer's address and session, named by a hash of\n"
    "its token) and the request in words. An undone change is marked so. controld keeps\n"
    "the last 500 (--history-keep), across restarts.\n"
    "\n"
    "  --since DURATION  only changes from this long ago (90s, 30m, 1h, 2d)\n"
    "  --limit N         only the newest N (default 100)\n";

static const char usage_undo[] =
    "usage: fgexctl undo [--json]\n"
    "\n"
    "Revert the last change not reverted yet: the configuration goes back to what it\n"
    "was before it (a removed filter comes back with its id and counters, a removed\n"
    "service with its filters), atomically and with the same hot swap as any change.\n"
    "Run it again to walk further back. An undo is itself recorded; `fgexctl redo`\n"
    "reverts it (the undo of an undo).\n";

static const char usage_redo[] =
    "usage: fgexctl redo [--json]\n"
    "\n"
    "Revert the last undo (the undo of an undo), as long as no other change was made\n"
    "since. Repeated, it redoes what repeated undos undid.\n";
/* clang-format on */

/* ---- --since ---- */

int cli_cmd_parse_since(struct cli_cmd *cmd, const char *s, uint64_t *out)
{
    uint64_t now = (uint64_t)time(NULL), secs;

    /* the one duration syntax of fgexctl (cmd_events.c), at most ten years back */
    if (cli_cmd_parse_duration(s, &secs) < 0 || secs > 3650ull * 86400)
        return cli_args_fail(cmd, CLI_EXIT_INVALID,
                             "invalid --since '%.60s': a duration such as 90s, 30m, 1h or 2d", s);
    *out = secs > now ? 0 : now - secs;
    return 0;
}

/* ---- building ---- */

static int build_history(struct cli_cmd *cmd, const struct cli_cmd_def *spec,
                         const struct cli_args_raw *raw)
{
    Fgx__Ctl__HistoryQuery *m = &cmd->m.history;
    const char *v;
    int rc;

    (void)spec;
    fgx__ctl__history_query__init(m);
    if ((v = cli_args_opt(raw, CLI_OPT_SINCE))) {
        rc = cli_cmd_parse_since(cmd, v, &m->since);
        if (rc < 0)
            return rc;
        m->has_since = 1;
    }
    if ((v = cli_args_opt(raw, CLI_OPT_LIMIT))) {
        if (!cli_args_all_digits(v) || strlen(v) > 6 || atoi(v) == 0)
            return cli_args_fail(cmd, CLI_EXIT_INVALID, "invalid --limit '%.60s'", v);
        m->has_limit = 1;
        m->limit = (uint32_t)atoi(v);
    }
    cmd->req.history = m;
    return 0;
}

/* A time of --from/--to: unix seconds, `now`, `-DURATION` (that long ago) or UTC
 * `YYYY-MM-DDTHH:MM[:SS][Z]`. */
static int parse_when(struct cli_cmd *cmd, const char *opt, const char *s, uint64_t *out)
{
    uint64_t now = (uint64_t)time(NULL), secs;
    struct tm tm;
    const char *end;

    if (strcmp(s, "now") == 0) {
        *out = now;
        return 0;
    }
    if (cli_args_all_digits(s) && strlen(s) <= 12) {
        *out = strtoull(s, NULL, 10);
        return 0;
    }
    if (s[0] == '-' && cli_cmd_parse_duration(s + 1, &secs) == 0 && secs <= now) {
        *out = now - secs;
        return 0;
    }
    memset(&tm, 0, sizeof(tm));
    end = strptime(s, "%Y-%m-%dT%H:%M", &tm);
    if (end && *end == ':')
        end = strptime(end, ":%S", &tm);
    if (end && *end == 'Z')
        end++;
    if (end && *end == '\0') {
        time_t t = timegm(&tm);

        if (t >= 0) {
            *out = (uint64_t)t;
            return 0;
        }
    }
    return cli_args_fail(cmd, CLI_EXIT_INVALID,
                         "invalid %s '%.60s': unix seconds, now, -DURATION (-30m) or "
                         "YYYY-MM-DDTHH:MM[:SS]Z (UTC)",
                         opt, s);
}

/* `stats --from T [--to T] [--step S]` (issue 27): a window of buckets, every one drawn. */
static int build_window(struct cli_cmd *cmd, const struct cli_cmd_def *spec,
                        const struct cli_args_raw *raw, Fgx__Ctl__StatsHistoryQuery *m)
{
    uint64_t now = (uint64_t)time(NULL), step = 60;
    const char *v;
    int rc;

    if (cli_args_opt(raw, CLI_OPT_SINCE) || cli_args_opt(raw, CLI_OPT_HISTORY))
        return cli_args_fail_usage(cmd, spec, "--from/--to/--step replace --history/--since");
    if (!cli_args_opt(raw, CLI_OPT_FROM))
        return cli_args_fail_usage(cmd, spec, "--to and --step go with --from");
    rc = parse_when(cmd, "--from", cli_args_opt(raw, CLI_OPT_FROM), &m->since);
    m->until = now;
    if (rc == 0 && (v = cli_args_opt(raw, CLI_OPT_TO)))
        rc = parse_when(cmd, "--to", v, &m->until);
    if (rc == 0 && (v = cli_args_opt(raw, CLI_OPT_STEP)) &&
        (cli_cmd_parse_duration(v, &step) < 0 || step == 0 || step % 60 != 0 ||
         step > 86400))
        rc = cli_args_fail(cmd, CLI_EXIT_INVALID,
                           "invalid --step '%.60s': whole minutes up to a day (60s, 5m, 1h)", v);
    if (rc < 0)
        return rc;
    m->since -= m->since % 60; /* controld counts per minute */
    if (m->until > now)
        m->until = now;
    if (m->until <= m->since)
        return cli_args_fail(cmd, CLI_EXIT_INVALID, "--to must come after --from");
    if (now - m->since > 2880 * 60)
        return cli_args_fail(cmd, CLI_EXIT_INVALID,
                             "--from: controld keeps the last 48 hours of blocks per minute");
    if ((m->until - m->since) / step > 10000)
        return cli_args_fail(cmd, CLI_EXIT_INVALID,
                             "at most 10000 buckets: a longer --step, or a shorter window");
    m->has_since = m->has_until = m->has_step = 1;
    m->step = (uint32_t)step;
    return 0;
}

int cli_cmd_stats_history_build(struct cli_cmd *cmd, const struct cli_cmd_def *spec,
                                const struct cli_args_raw *raw)
{
    Fgx__Ctl__StatsHistoryQuery *m = &cmd->m.stats_history;
    const char *v;
    int rc;

    if (cli_args_opt(raw, CLI_OPT_WATCH) || cli_args_opt(raw, CLI_OPT_INTERVAL))
        return cli_args_fail_usage(cmd, spec, "--history does not go with --watch");
    fgx__ctl__stats_history_query__init(m);
    if (raw->npos > 0) {
        rc = cli_args_check_ref(cmd, spec, raw->pos[0]);
        if (rc < 0)
            return rc;
        m->service = (char *)raw->pos[0];
    }
    if (cli_args_opt(raw, CLI_OPT_FROM) || cli_args_opt(raw, CLI_OPT_TO) ||
        cli_args_opt(raw, CLI_OPT_STEP)) {
        rc = build_window(cmd, spec, raw, m);
        if (rc < 0)
            return rc;
    } else if ((v = cli_args_opt(raw, CLI_OPT_SINCE))) {
        rc = cli_cmd_parse_since(cmd, v, &m->since);
        if (rc < 0)
            return rc;
        m->has_since = 1;
    }
    cmd->req.req_case = FGX__CTL__REQUEST__REQ_STATS_HISTORY;
    cmd->req.stats_history = m;
    return 0;
}

/* ---- the diff ---- */

static const char *op_mark(const char *op)
{
    return strcmp(op, "add") == 0 ? "+" : strcmp(op, "rm") == 0 ? "-" : "~";
}

int cli_cmd_diff_print(FILE *f, const Fgx__Ctl__Reply *rep)
{
    size_t add = 0, rm = 0, change = 0, keep = 0;
    char name[160], rx[512];

    for (size_t i = 0; i < rep->n_diff; i++) {
        const Fgx__Ctl__DiffEntry *d = rep->diff[i];
        bool filter = strcmp(d->kind, "filter") == 0;

        if (strcmp(d->op, "keep") == 0) {
            keep++;
            continue;
        }
        add += strcmp(d->op, "add") == 0;
        rm += strcmp(d->op, "rm") == 0;
        change += strcmp(d->op, "change") == 0;
        cli_fmt_escape(d->service ? d->service : "", name, sizeof(name));
        if (!filter) {
            (void)fprintf(f, "%s service %" PRIu32 " %s%s%s\n", op_mark(d->op), d->id, name,
                          d->what ? ": " : "", d->what ? d->what : "");
            continue;
        }
        cli_fmt_escape(d->regex ? d->regex : "", rx, sizeof(rx));
        if (d->id)
            (void)fprintf(f, "%s filter %" PRIu32 " %s %s%s%s /%s/", op_mark(d->op), d->id, name,
                          cli_fmt_dir_name(d->dir), d->nocase ? " nocase" : "",
                          d->active ? "" : " disabled", rx);
        else
            (void)fprintf(f, "%s filter (new) %s %s%s%s /%s/", op_mark(d->op), name,
                          cli_fmt_dir_name(d->dir), d->nocase ? " nocase" : "",
                          d->active ? "" : " disabled", rx);
        if (d->has_action && d->action == FGX__CTL__FILTER_ACTION__FILTER_ACTION_LOG)
            (void)fputs(" log", f);
        if (d->what) {
            cli_fmt_escape(d->what, rx, sizeof(rx));
            (void)fprintf(f, ": %s", rx);
        }
        if (strcmp(d->op, "rm") == 0 && d->blocked > 0)
            (void)fprintf(f, " (its %" PRIu64 " block%s stay%s in %s's total)", d->blocked,
                          d->blocked == 1 ? "" : "s", d->blocked == 1 ? "s" : "", name);
        (void)fputc('\n', f);
    }
    if (add + rm + change == 0)
        (void)fprintf(f, "no change (%zu unchanged)\n", keep);
    else
        (void)fprintf(f, "%zu added, %zu removed, %zu changed, %zu unchanged%s\n", add, rm, change,
                      keep, rep->has_dry_run && rep->dry_run ? " (dry run: nothing done)" : "");
    return ferror(f) ? -EIO : 0;
}

static json_t *diff_entry_json(const void *p)
{
    const Fgx__Ctl__DiffEntry *d = p;
    json_t *o =
        json_pack("{s:s, s:s, s:I}", "op", d->op, "kind", d->kind, "id", cli_json_int(d->id));

    if (!o)
        return NULL;
    (void)json_object_set_new(o, "service", cli_json_str_or_null(d->service));
    if (strcmp(d->kind, "filter") == 0) {
        if (cli_json_set_bytes(o, "regex", d->regex, d->regex ? strlen(d->regex) : 0) < 0) {
            json_decref(o);
            return NULL;
        }
        (void)json_object_set_new(o, "dir", json_string(cli_fmt_dir_name(d->dir)));
        (void)json_object_set_new(o, "nocase", json_boolean(d->nocase));
        (void)json_object_set_new(o, "active", json_boolean(d->active));
        (void)json_object_set_new(o, "blocked", json_integer(cli_json_int(d->blocked)));
        (void)json_object_set_new(
            o, "action",
            json_string(d->has_action && d->action == FGX__CTL__FILTER_ACTION__FILTER_ACTION_LOG
                            ? "log"
                            : "block"));
        (void)json_object_set_new(o, "label", cli_json_str_or_null(d->label));
        (void)json_object_set_new(o, "what", cli_json_str_or_null(d->what));
    } else {
        (void)json_object_set_new(o, "active", json_boolean(d->active));
        (void)json_object_set_new(o, "what", cli_json_str_or_null(d->what));
    }
    return o;
}

json_t *cli_cmd_diff_json(const Fgx__Ctl__Reply *rep)
{
    return cli_fmt_json_list((void *const *)rep->diff, rep->n_diff, diff_entry_json);
}

/* ---- history ---- */

static void utc_time(uint64_t secs, char *buf, size_t len)
{
    time_t t = (time_t)secs;
    struct tm tm;

    if (!gmtime_r(&t, &tm) || strftime(buf, len, "%Y-%m-%d %H:%M:%S", &tm) == 0)
        (void)snprintf(buf, len, "%" PRIu64, secs);
}

static int human_history(FILE *f, const Fgx__Ctl__Request *req, const Fgx__Ctl__Reply *rep)
{
    static const char *const heads[] = {"SEQ", "TIME (UTC)", "WHO", "WHAT"};
    struct cli_table t;
    char when[32];
    int rc;

    (void)req;
    if (rep->n_changes == 0) {
        (void)fputs("no change recorded\n", f);
        return ferror(f) ? -EIO : 0;
    }
    cli_fmt_table_init(&t, heads, 4, 1u << 0); /* SEQ right-aligned */
    for (size_t i = 0; i < rep->n_changes; i++) {
        const Fgx__Ctl__Change *c = rep->changes[i];

        cli_fmt_table_addf(&t, "%" PRIu64, c->seq);
        utc_time(c->time, when, sizeof(when));
        cli_fmt_table_add_str(&t, when);
        cli_fmt_table_add_str(&t, c->who);
        if (c->has_undone && c->undone)
            cli_fmt_table_addf(&t, "%s (%s)", c->what,
                               c->kind && strcmp(c->kind, "undo") == 0 ? "redone" : "undone");
        else
            cli_fmt_table_add_str(&t, c->what);
    }
    rc = cli_fmt_table_print(f, &t);
    cli_fmt_table_release(&t);
    return rc;
}

static json_t *change_json(const void *p)
{
    const Fgx__Ctl__Change *c = p;
    json_t *o = json_pack("{s:I, s:I, s:o, s:o, s:s}", "seq", cli_json_int(c->seq), "time",
                          cli_json_int(c->time), "who", cli_json_str(c->who), "what",
                          cli_json_str(c->what), "kind", c->kind ? c->kind : "change");

    if (!o)
        return NULL;
    (void)json_object_set_new(o, "target",
                              c->has_target ? json_integer(cli_json_int(c->target)) : json_null());
    (void)json_object_set_new(o, "undone", json_boolean(c->has_undone && c->undone));
    return o;
}

static json_t *json_history(const Fgx__Ctl__Request *req, const Fgx__Ctl__Reply *rep)
{
    (void)req;
    return cli_fmt_json_list((void *const *)rep->changes, rep->n_changes, change_json);
}

static int human_undo(FILE *f, const Fgx__Ctl__Request *req, const Fgx__Ctl__Reply *rep)
{
    (void)req;
    if (rep->n_changes > 0)
        (void)fprintf(f, "%s (recorded as #%" PRIu64 ")\n", rep->changes[0]->what,
                      rep->changes[0]->seq);
    return cli_cmd_diff_print(f, rep);
}

static json_t *json_undo(const Fgx__Ctl__Request *req, const Fgx__Ctl__Reply *rep)
{
    (void)req;
    return json_pack("{s:o, s:o}", "change",
                     rep->n_changes > 0 ? change_json(rep->changes[0]) : json_null(), "diff",
                     cli_cmd_diff_json(rep));
}

/* ---- the commands ---- */

static const struct cli_cmd_def history_cmds[] = {
    {.name = "history",
     .req = FGX__CTL__REQUEST__REQ_HISTORY,
     .opts = CLI_OPT_SINCE | CLI_OPT_LIMIT,
     .usage = usage_history,
     .build = build_history,
     .human = human_history,
     .json = json_history},
    {.name = "undo",
     .req = FGX__CTL__REQUEST__REQ_UNDO,
     .usage = usage_undo,
     .build = cli_args_build_empty,
     .human = human_undo,
     .json = json_undo,
     .flags = CLI_CMD_CHANGE},
    {.name = "redo",
     .req = FGX__CTL__REQUEST__REQ_REDO,
     .usage = usage_redo,
     .build = cli_args_build_empty,
     .human = human_undo,
     .json = json_undo,
     .flags = CLI_CMD_CHANGE},
    {.name = NULL},
};

const struct cli_cmd_family cli_cmd_history = {.group = NULL, .usage = NULL, .cmds = history_cmds};
