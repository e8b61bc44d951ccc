/* fgexctl, `service log [SERVICE]` (the service family's table entry is in cmd_service.c): the
 * health log, what happened to fgex itself (a service started, stopped, switched layers, a
 * worker restarted, a limit hit, traffic passed unfiltered), once or followed (--follow).
 * Without SERVICE, the box's whole log. */
#include "cmd.h"

#include <inttypes.h>
#include <string.h>

#include "cli_fmt.h"
#include "cli_json.h"
#include "cli_loop.h"

#define CLI_SVCLOG_FOLLOW_MS 250

/* clang-format off */
const char cli_cmd_usage_service_log[] =
    "usage: fgexctl service log [SERVICE] [--follow] [--since DURATION] [--limit N] [--json]\n"
    "\n"
    "Print a service's health log: what happened to fgex itself for it, oldest first.\n"
    "The service started, stopped, added or removed, its addresses changed, its layer\n"
    "switched, fail_open turned on or off, its traffic passed unfiltered (fail_open)\n"
    "or was not served while its worker was down; and for the whole box (marked\n"
    "\"box\", in every service's log): controld started or stopped, a worker\n"
    "restarted, limits hit and traffic passed unfiltered or unscanned, with their\n"
    "count (one entry per kind every 5 s at most). Without SERVICE: the box's whole\n"
    "log, every service's.\n"
    "Warnings and errors are marked in the LEVEL column. The log survives a restart\n"
    "of controld (the newest 500 entries of each service and of the box).\n"
    "\n"
    "  --follow          then keep printing new entries as they arrive, until interrupted\n"
    "  --since DURATION  only entries of the last DURATION (90s, 30m, 2h, 1d)\n"
    "  --limit N         only the newest N entries\n"
    "\n"
    "--json prints an array of {seq, time, time_ns, service_id, service, box, level,\n"
    "kind, text, count}; with --follow one object per line.\n"
    "\n" CLI_SERVICE_HELP_NOTE;
/* clang-format on */

static int run_follow(struct cli_cmd *cmd);

int cli_cmd_service_log_build(struct cli_cmd *cmd, const struct cli_cmd_def *spec,
                              const struct cli_args_raw *raw)
{
    Fgx__Ctl__HealthLogQuery *m = &cmd->m.service_log;
    const char *v;
    int rc;

    fgx__ctl__health_log_query__init(m);
    if (raw->npos > 0) {
        rc = cli_args_check_ref(cmd, spec, raw->pos[0]);
        if (rc < 0)
            return rc;
        m->service = (char *)raw->pos[0];
    }
    if ((v = cli_args_opt(raw, CLI_OPT_LIMIT))) {
        rc = cli_cmd_parse_limit(cmd, v, "entries", &m->limit);
        if (rc < 0)
            return rc;
        m->has_limit = 1;
    }
    if ((v = cli_args_opt(raw, CLI_OPT_SINCE))) {
        uint64_t since;

        rc = cli_cmd_parse_since(cmd, v, &since);
        if (rc < 0)
            return rc;
        m->has_since_ns = 1;
        m->since_ns = since * 1000000000ull;
    }
    cmd->req.service_log = m;
    if (cli_args_opt(raw, CLI_OPT_FOLLOW))
        cmd->run_local = run_follow;
    return 0;
}

/* ---- output ---- */

static bool is_box(const Fgx__Ctl__HealthEntry *e)
{
    return !e->has_service_id || e->service_id == 0;
}

static json_t *entry_json(const Fgx__Ctl__HealthEntry *e)
{
    char t[64];
    json_t *o;

    cli_fmt_time(e->time_ns, true, t, sizeof(t));
    o = json_pack("{s:I, s:s, s:I, s:I, s:o, s:b, s:o, s:o, s:o, s:I}", "seq", cli_json_int(e->seq),
                  "time", t, "time_ns", cli_json_int(e->time_ns), "service_id",
                  cli_json_int(e->service_id), "service",
                  cli_json_str_or_null(is_box(e) ? NULL : e->service), "box", is_box(e), "level",
                  cli_json_str(e->level), "kind", cli_json_str(e->kind), "text",
                  cli_json_str(e->text), "count", cli_json_int(e->count));
    return o;
}

static void print_header(FILE *f, bool count)
{
    (void)fprintf(f, "%-23s %-5s %-12s %-19s %s%s\n", "TIME", "LEVEL", "SERVICE", "KIND",
                  count ? "   COUNT " : "", "TEXT");
}

static void print_entry(FILE *f, const Fgx__Ctl__HealthEntry *e, bool count)
{
    char when[64], n[24] = "";

    cli_fmt_time(e->time_ns, false, when, sizeof(when));
    if (count) {
        if (e->has_count && e->count > 0)
            (void)snprintf(n, sizeof(n), "%8" PRIu64 " ", e->count);
        else
            (void)snprintf(n, sizeof(n), "%8s ", "-");
    }
    /* warnings and errors stand out: upper case, as a terminal without colour shows them */
    (void)fprintf(f, "%-23s %-5s %-12s %-19s %s%s\n", when,
                  !e->level                        ? "info"
                  : strcmp(e->level, "error") == 0 ? "ERROR"
                  : strcmp(e->level, "warn") == 0  ? "WARN"
                                                   : e->level,
                  is_box(e)    ? "(box)"
                  : e->service ? e->service
                               : "-",
                  e->kind ? e->kind : "", n, e->text ? e->text : "");
}

int cli_cmd_service_log_human(FILE *f, const Fgx__Ctl__Request *req, const Fgx__Ctl__Reply *rep)
{
    (void)req;
    if (rep->n_health_log == 0) {
        (void)fputs("the health log is empty\n", f);
        return 0;
    }
    print_header(f, true);
    for (size_t i = 0; i < rep->n_health_log; i++)
        print_entry(f, rep->health_log[i], true);
    return 0;
}

json_t *cli_cmd_service_log_json(const Fgx__Ctl__Request *req, const Fgx__Ctl__Reply *rep)
{
    json_t *a = json_array();

    (void)req;
    for (size_t i = 0; a && i < rep->n_health_log; i++)
        (void)json_array_append_new(a, entry_json(rep->health_log[i]));
    return a;
}

json_t *cli_cmd_health_entry_json(const Fgx__Ctl__HealthEntry *e)
{
    return entry_json(e);
}

/* --limit of a follower: the first answer's newest N (0: all). The later ones all. */
static uint32_t follow_first_limit;

/* The first reply's entries under the table's header, then each new one. */
static uint64_t follow_print(const struct cli_cmd *cmd, const Fgx__Ctl__Reply *rep, uint64_t last)
{
    static bool headed;
    size_t from = 0;

    if (!headed) {
        if (!cmd->json)
            print_header(stdout, true);
        if (follow_first_limit > 0 && rep->n_health_log > follow_first_limit)
            from = rep->n_health_log - follow_first_limit;
    }
    headed = true;
    if (rep->has_health_last && rep->health_last < last)
        last = 0; /* a controld with another store: its log starts again */
    for (size_t i = from; i < rep->n_health_log; i++)
        if (rep->health_log[i]->seq > last) {
            if (cmd->json)
                (void)cli_json_print(stdout, entry_json(rep->health_log[i]), false);
            else
                print_entry(stdout, rep->health_log[i], true);
            last = rep->health_log[i]->seq;
        }
    return last;
}

/* As `script log --follow`: ask again every CLI_SVCLOG_FOLLOW_MS for what came after the
 * newest entry printed; --limit and --since are for the first answer only. */
static int run_follow(struct cli_cmd *cmd)
{
    Fgx__Ctl__HealthLogQuery q = *cmd->req.service_log;
    Fgx__Ctl__Request req = cmd->req;

    req.service_log = &q;
    /* a limit on every poll could leave out some of a burst: cut the first answer here */
    follow_first_limit = q.has_limit ? q.limit : 0;
    q.has_limit = 0;
    return cli_loop_follow(cmd, &req, &q.has_after_seq, &q.after_seq, CLI_SVCLOG_FOLLOW_MS,
                           follow_print);
}
