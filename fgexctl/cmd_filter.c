/* fgexctl, the filter commands: add, list, enable, disable, set, rm, and a service's ruleset
 * file's import and export (read and written by cli_local.c). */
#include "cmd.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "cli_fmt.h"
#include "cli_json.h"
#include "fgx/ruleset.h"

/* ---- usage ---- */

/* clang-format off */
#define RULESET_FORMAT_HELP \
    "File format: one filter a line,\n" \
    "\n" \
    "    [c2s|s2c|both] [nocase] [disabled] [log] [label=\"TEXT\"] /REGEX/\n" \
    "\n" \
    "e.g. `c2s nocase /evil[0-9]+/`. The regex is everything between the first and\n" \
    "the last '/' of the line, as is (a '/' inside needs no escape). The direction\n" \
    "defaults to both. `log`: a log-only filter. label=\"team12 sqli\" (\\\" and \\\\\n" \
    "inside for a quote and a backslash). Blank lines and lines starting with '#'\n" \
    "are ignored.\n"

#define FORCE_HELP \
    "  --force     store it even if it would block (nearly) every connection: a block\n" \
    "              filter whose regex matches any stream (\\b, ^, ., [^x] ...), or\n" \
    "              that matches at least 90% of at least 10 of the service's captured\n" \
    "              connections (or all of at least 3), is refused without it, saying\n" \
    "              why\n"

static const char usage_filter[] =
    "usage: fgexctl filter COMMAND ...\n"
    "\n"
    "Commands:\n"
    "  add SERVICE REGEX [--dir c2s|s2c|both] [--nocase] [--log] [--label TEXT]\n"
    "      [--force]\n"
    "  list SERVICE\n"
    "  enable FILTER [--force]\n"
    "  disable FILTER\n"
    "  set FILTER [--regex R [--dir c2s|s2c|both] [--nocase]] [--action block|log]\n"
    "      [--label TEXT] [--force]\n"
    "  rm FILTER\n"
    "  import SERVICE FILE [--replace|--sync] [--dry-run] [--force]\n"
    "  export SERVICE\n"
    "  test SERVICE REGEX [--dir c2s|s2c|both] [--nocase]\n"
    "\n"
    "SERVICE is a service id or name; FILTER is a filter id.\n"
                                   "`fgexctl filter COMMAND --help` for one command.\n";

static const char usage_filter_add[] =
    "usage: fgexctl filter add SERVICE REGEX [--dir c2s|s2c|both] [--nocase] [--log]\n"
    "                          [--label TEXT] [--force]\n"
    "\n"
    "Add a regex to a service: from the moment this returns, a TCP connection whose\n"
    "stream matches is reset, a UDP datagram that matches is dropped. An invalid\n"
    "regex is refused and nothing is stored, and so is a filter identical to one the\n"
    "service has (same regex bytes, direction and case): the error names its id.\n"
    "\n"
    "  --dir c2s|s2c|both   which direction to scan: client to server, server to\n"
    "                       client, or both (default: both)\n"
    "  --nocase             match case-insensitively\n"
    "  --log                log only: a match is an event marked log and counted as\n"
    "                       matched, nothing is dropped (at most one event per\n"
    "                       direction of a connection, one per datagram); the\n"
    "                       service's block filters still judge the traffic.\n"
    "                       `filter set FILTER --action block` makes it block\n"
    "  --label TEXT         a label shown in lists and events (\"team12 sqli\"):\n"
    "                       UTF-8, at most 64 bytes, no control characters\n"
    FORCE_HELP
    "\n"
    "Put `--` before a regex that starts with '-'. " CLI_SERVICE_HELP_NOTE;

static const char usage_filter_list[] =
    "usage: fgexctl filter list SERVICE\n"
    "\n"
    "List a service's filters with their blocked counts.\n" CLI_SERVICE_HELP_NOTE;

static const char usage_filter_enable[] =
    "usage: fgexctl filter enable FILTER [--force]\n"
    "\n"
    "Enable a disabled filter. FILTER is a filter id.\n"
    "\n" FORCE_HELP;

static const char usage_filter_disable[] =
    "usage: fgexctl filter disable FILTER\n"
    "\n"
    "Disable a filter without removing it. FILTER is a filter id.\n";

static const char usage_filter_set[] =
    "usage: fgexctl filter set FILTER [--regex R [--dir c2s|s2c|both] [--nocase]]\n"
    "                                 [--action block|log] [--label TEXT] [--force]\n"
    "\n"
    "Change a filter in place: its id, counters, timeline and enabled state stay. The\n"
    "action switches live, as enable and disable do: once this returns, new\n"
    "connections are judged by the new action, and open ones from their next packet\n"
    "on (also one that the filter already logged: its next occurrence there is\n"
    "blocked). --label \"\" removes the label.\n"
    "\n"
    "  --regex R            edit the regex in place: R is compiled and checked as\n"
    "                       `filter add` checks one (an invalid regex, or one\n"
    "                       identical to another filter of the service, is refused\n"
    "                       and nothing changes); once this returns the old regex\n"
    "                       blocks nothing, on open connections too, and R blocks\n"
    "                       new ones and open ones from their next bytes on. The\n"
    "                       change is in `history` with the old text (and `undo`\n"
    "                       takes it back); the filter shows its revision and when\n"
    "                       it was edited\n"
    "  --dir c2s|s2c|both   with --regex, its direction (default: the filter's)\n"
    "  --nocase             with --regex, match R case-insensitively (without it,\n"
    "                       R is case-sensitive)\n"
    "\n"
    "A log filter made to block, or a block filter given a new regex, is judged as a\n"
    "new block filter:\n"
    "\n" FORCE_HELP "\n"
    "Put `--regex=R` for a regex that starts with '-'. FILTER is a filter id.\n";

static const char usage_filter_rm[] =
    "usage: fgexctl filter rm FILTER\n"
    "\n"
    "Remove a filter. FILTER is a filter id.\n";

static const char usage_filter_import[] =
    "usage: fgexctl filter import SERVICE FILE [--replace|--sync] [--dry-run] [--force]\n"
    "\n"
    "Add the filters of a ruleset file (FILE, or - for stdin) to a service, all or\n"
    "nothing: one bad line (its syntax here, its regex in controld) refuses the whole\n"
    "file, names the line, and changes nothing. A line identical to a filter the\n"
    "service has (same regex bytes, direction and case), or to another line, is\n"
    "refused too, naming that filter or line.\n"
    "\n"
    "  --sync      the service ends with exactly the file's filters: those it has\n"
    "              already keep their id, counters and enabled state, the others are\n"
    "              added or removed, and the diff is printed. Loading the same file\n"
    "              again changes nothing (rules kept in git, loaded as often as wanted)\n"
    "  --replace   the same, but each filter takes the file's enabled state\n"
    "  --dry-run   print the diff and change nothing\n"
    "  --force     import it even if a line would block (nearly) every connection\n"
    "              (see `filter add --help`): without it such a line refuses the\n"
    "              whole file, naming the line and why\n"
    "\n"
    "A removed filter's blocks stay in its service's total.\n"
    "\n" RULESET_FORMAT_HELP CLI_SERVICE_HELP_NOTE;

static const char usage_filter_export[] =
    "usage: fgexctl filter export SERVICE\n"
    "\n"
    "Print a service's filters on stdout in the ruleset file format that\n"
    "`filter import` reads (with --json: an array of filters, as `filter list`).\n"
    "\n" RULESET_FORMAT_HELP CLI_SERVICE_HELP_NOTE;
/* clang-format on */

/* ---- building the request ---- */

static int check_label(struct cli_cmd *cmd, const char *v)
{
    char why[128];

    if (fgx_label_check(v, why, sizeof(why)) < 0)
        return cli_args_fail(cmd, CLI_EXIT_INVALID, "invalid --label: %s", why);
    return 0;
}

/* --force: a filter that would block (nearly) everything is stored anyway. */
static void build_force(struct cli_cmd *cmd, const struct cli_args_raw *raw)
{
    if (cli_args_opt(raw, CLI_OPT_FORCE)) {
        cmd->req.has_force = 1;
        cmd->req.force = 1;
    }
}

int cli_cmd_regex_args(struct cli_cmd *cmd, const struct cli_cmd_def *spec,
                       const struct cli_args_raw *raw, const char *what, char **service,
                       char **regex, protobuf_c_boolean *has_dir, Fgx__Ctl__Dir *dir,
                       protobuf_c_boolean *has_nocase, protobuf_c_boolean *nocase)
{
    const char *v;
    int rc = cli_args_check_ref(cmd, spec, raw->pos[0]);

    if (rc < 0)
        return rc;
    if (!raw->pos[1] || raw->pos[1][0] == '\0')
        return cli_args_fail(cmd, CLI_EXIT_INVALID, "%s: the regex is empty", what);
    *service = (char *)raw->pos[0];
    *regex = (char *)raw->pos[1];
    if ((v = cli_args_opt(raw, CLI_OPT_DIR))) {
        rc = cli_args_parse_dir(cmd, v, dir);
        if (rc < 0)
            return rc;
        *has_dir = 1;
    }
    if (cli_args_opt(raw, CLI_OPT_NOCASE)) {
        *has_nocase = 1;
        *nocase = 1;
    }
    return 0;
}

static int build_filter_add(struct cli_cmd *cmd, const struct cli_cmd_def *spec,
                            const struct cli_args_raw *raw)
{
    Fgx__Ctl__FilterAdd *m = &cmd->m.filter_add;
    const char *v;
    int rc;

    fgx__ctl__filter_add__init(m);
    rc = cli_cmd_regex_args(cmd, spec, raw, "filter add", &m->service, &m->regex, &m->has_dir,
                            &m->dir, &m->has_nocase, &m->nocase);
    if (rc < 0)
        return rc;
    if (cli_args_opt(raw, CLI_OPT_LOG)) {
        m->has_action = 1;
        m->action = FGX__CTL__FILTER_ACTION__FILTER_ACTION_LOG;
    }
    if ((v = cli_args_opt(raw, CLI_OPT_LABEL))) {
        rc = check_label(cmd, v);
        if (rc < 0)
            return rc;
        m->label = (char *)v;
    }
    cmd->req.filter_add = m;
    build_force(cmd, raw);
    return 0;
}

static int build_filter_set(struct cli_cmd *cmd, const struct cli_cmd_def *spec,
                            const struct cli_args_raw *raw)
{
    Fgx__Ctl__FilterSet *m = &cmd->m.filter_set;
    const char *v;
    int rc;

    fgx__ctl__filter_set__init(m);
    rc = cli_args_check_ref(cmd, spec, raw->pos[0]);
    if (rc < 0)
        return rc;
    m->ref = (char *)raw->pos[0];
    if ((v = cli_args_opt(raw, CLI_OPT_ACTION))) {
        m->has_action = 1;
        if (strcmp(v, "block") == 0)
            m->action = FGX__CTL__FILTER_ACTION__FILTER_ACTION_BLOCK;
        else if (strcmp(v, "log") == 0)
            m->action = FGX__CTL__FILTER_ACTION__FILTER_ACTION_LOG;
        else
            return cli_args_fail(cmd, CLI_EXIT_INVALID,
                                 "invalid --action '%.60s': must be block or log", v);
    }
    if ((v = cli_args_opt(raw, CLI_OPT_LABEL))) {
        rc = check_label(cmd, v);
        if (rc < 0)
            return rc;
        m->label = (char *)v;
    }
    if ((v = cli_args_opt(raw, CLI_OPT_REGEX))) {
        if (v[0] == '\0')
            return cli_args_fail(cmd, CLI_EXIT_INVALID, "filter set: the regex is empty");
        m->regex = (char *)v;
        /* the edited pattern's case is what the command says, as `filter add`'s */
        m->has_nocase = 1;
        m->nocase = cli_args_opt(raw, CLI_OPT_NOCASE) != NULL;
        if ((v = cli_args_opt(raw, CLI_OPT_DIR))) {
            rc = cli_args_parse_dir(cmd, v, &m->dir);
            if (rc < 0)
                return rc;
            m->has_dir = 1;
        }
    } else if (cli_args_opt(raw, CLI_OPT_DIR) || cli_args_opt(raw, CLI_OPT_NOCASE)) {
        return cli_args_fail_usage(cmd, spec, "--dir and --nocase go with --regex");
    }
    if (!m->has_action && !m->label && !m->regex)
        return cli_args_fail_usage(cmd, spec, "nothing to set: give --regex, --action or --label");
    cmd->req.filter_set = m;
    build_force(cmd, raw);
    return 0;
}

static int build_filter_import(struct cli_cmd *cmd, const struct cli_cmd_def *spec,
                               const struct cli_args_raw *raw)
{
    int rc;

    fgx__ctl__filter_import__init(&cmd->m.filter_import);
    rc = cli_args_check_ref(cmd, spec, raw->pos[0]);
    if (rc == 0 && (!raw->pos[1] || !*raw->pos[1]))
        rc = cli_args_fail(cmd, CLI_EXIT_INVALID, "filter import: the file name is empty");
    cmd->m.filter_import.service = (char *)raw->pos[0];
    cmd->file = raw->pos[1];
    if (cli_args_opt(raw, CLI_OPT_REPLACE)) {
        cmd->m.filter_import.has_replace = 1;
        cmd->m.filter_import.replace = 1;
    }
    if (cli_args_opt(raw, CLI_OPT_SYNC)) {
        if (cmd->m.filter_import.replace && rc == 0)
            rc = cli_args_fail_usage(cmd, spec, "--sync and --replace exclude each other");
        cmd->m.filter_import.has_sync = 1;
        cmd->m.filter_import.sync = 1;
    }
    if (cli_args_opt(raw, CLI_OPT_DRY_RUN)) {
        cmd->req.has_dry_run = 1;
        cmd->req.dry_run = 1;
    }
    cmd->req.filter_import = &cmd->m.filter_import;
    build_force(cmd, raw);
    return rc;
}

static int build_filter_enable(struct cli_cmd *cmd, const struct cli_cmd_def *spec,
                               const struct cli_args_raw *raw)
{
    int rc = cli_args_build_ref(cmd, spec, raw);

    if (rc == 0)
        build_force(cmd, raw);
    return rc;
}

/* ---- output ---- */

static void human_filter(FILE *f, const Fgx__Ctl__Filter *fl)
{
    cli_fmt_kv_u64(f, "id:", fl->id);
    cli_fmt_kv_u64(f, "service:", fl->service_id);
    cli_fmt_kv_str(f, "regex:", fl->regex);
    cli_fmt_kv(f, "dir:", cli_fmt_dir_name(fl->dir));
    cli_fmt_kv(f, "nocase:", cli_fmt_yesno(fl->nocase));
    cli_fmt_kv(f, "active:", cli_fmt_yesno(fl->active));
    cli_fmt_kv(f, "action:", cli_fmt_action_name(fl));
    cli_fmt_kv_u64(f, "blocked:", fl->blocked);
    if (cli_fmt_filter_is_log(fl) || fl->matched > 0)
        cli_fmt_kv_u64(f, "matched:", fl->matched);
    if (fl->has_revision && fl->revision > 0) {
        char when[64];

        cli_fmt_time(fl->edited * UINT64_C(1000000000), false, when, sizeof(when));
        cli_fmt_kv_u64(f, "revision:", fl->revision);
        cli_fmt_kv(f, "edited:", when);
    }
    if (fl->label && fl->label[0]) {
        char why[64];

        if (fgx_label_check(fl->label, why, sizeof(why)) == 0)
            cli_fmt_kv(f, "label:", fl->label);
        else
            cli_fmt_kv_str(f, "label:", fl->label);
    }
}

static int human_list(FILE *f, const Fgx__Ctl__Request *req, const Fgx__Ctl__Reply *rep)
{
    (void)req;
    return cli_fmt_filter_table(f, rep);
}

static json_t *json_list(const Fgx__Ctl__Request *req, const Fgx__Ctl__Reply *rep)
{
    (void)req;
    return cli_fmt_json_filters(rep);
}

/* The commands that print the filter concerned. */
static int human_one(FILE *f, const Fgx__Ctl__Request *req, const Fgx__Ctl__Reply *rep)
{
    (void)req;
    if (rep->n_filters > 0)
        human_filter(f, rep->filters[0]);
    return 0;
}

static json_t *json_one(const Fgx__Ctl__Request *req, const Fgx__Ctl__Reply *rep)
{
    (void)req;
    return rep->n_filters > 0 ? cli_fmt_json_filter(rep->filters[0]) : json_null();
}

static int human_rm(FILE *f, const Fgx__Ctl__Request *req, const Fgx__Ctl__Reply *rep)
{
    uint32_t id;

    if (cli_fmt_removed_id(req, rep, &id))
        (void)fprintf(f, "removed filter %" PRIu32 "\n", id);
    else
        (void)fputs("removed\n", f);
    return 0;
}

/* ---- the commands ---- */

static const struct cli_cmd_def filter_cmds[] = {
    /* filter test lives with the capture it runs on (cmd_capture.c). */
    {.group = "filter",
     .name = "test",
     .req = FGX__CTL__REQUEST__REQ_FILTER_TEST,
     .npos = 2,
     .pos_names = {"SERVICE", "REGEX"},
     .opts = CLI_OPT_DIR | CLI_OPT_NOCASE,
     .usage = cli_cmd_usage_filter_test,
     .build = cli_cmd_filter_test_build,
     .human = cli_cmd_filter_test_human,
     .json = cli_cmd_filter_test_json,
     .flags = CLI_CMD_CHANGE},
    {.group = "filter",
     .name = "add",
     .req = FGX__CTL__REQUEST__REQ_FILTER_ADD,
     .npos = 2,
     .pos_names = {"SERVICE", "REGEX"},
     .opts = CLI_OPT_DIR | CLI_OPT_NOCASE | CLI_OPT_LOG | CLI_OPT_LABEL | CLI_OPT_FORCE,
     .usage = usage_filter_add,
     .build = build_filter_add,
     .human = human_one,
     .json = json_one,
     .flags = CLI_CMD_CHANGE},
    {.group = "filter",
     .name = "list",
     .req = FGX__CTL__REQUEST__REQ_FILTER_LIST,
     .npos = 1,
     .pos_names = {"SERVICE"},
     .usage = usage_filter_list,
     .build = cli_args_build_ref,
     .human = human_list,
     .json = json_list},
    {.group = "filter",
     .name = "enable",
     .req = FGX__CTL__REQUEST__REQ_FILTER_ENABLE,
     .npos = 1,
     .pos_names = {"FILTER"},
     .opts = CLI_OPT_FORCE,
     .usage = usage_filter_enable,
     .build = build_filter_enable,
     .human = human_one,
     .json = json_one,
     .flags = CLI_CMD_CHANGE},
    {.group = "filter",
     .name = "disable",
     .req = FGX__CTL__REQUEST__REQ_FILTER_DISABLE,
     .npos = 1,
     .pos_names = {"FILTER"},
     .usage = usage_filter_disable,
     .build = cli_args_build_ref,
     .human = human_one,
     .json = json_one,
     .flags = CLI_CMD_CHANGE},
    {.group = "filter",
     .name = "set",
     .req = FGX__CTL__REQUEST__REQ_FILTER_SET,
     .npos = 1,
     .pos_names = {"FILTER"},
     .opts = CLI_OPT_ACTION | CLI_OPT_LABEL | CLI_OPT_FORCE | CLI_OPT_REGEX | CLI_OPT_DIR |
             CLI_OPT_NOCASE,
     .usage = usage_filter_set,
     .build = build_filter_set,
     .human = human_one,
     .json = json_one,
     .flags = CLI_CMD_CHANGE},
    {.group = "filter",
     .name = "rm",
     .req = FGX__CTL__REQUEST__REQ_FILTER_RM,
     .npos = 1,
     .pos_names = {"FILTER"},
     .usage = usage_filter_rm,
     .build = cli_args_build_ref,
     .human = human_rm,
     .json = cli_fmt_json_removed,
     .flags = CLI_CMD_CHANGE},
    {.group = "filter",
     .name = "import",
     .req = FGX__CTL__REQUEST__REQ_FILTER_IMPORT,
     .npos = 2,
     .pos_names = {"SERVICE", "FILE"},
     .opts = CLI_OPT_REPLACE | CLI_OPT_SYNC | CLI_OPT_DRY_RUN | CLI_OPT_FORCE,
     .usage = usage_filter_import,
     .build = build_filter_import,
     .flags = CLI_CMD_CHANGE},
    {.group = "filter",
     .name = "export",
     .req = FGX__CTL__REQUEST__REQ_FILTER_EXPORT,
     .npos = 1,
     .pos_names = {"SERVICE"},
     .usage = usage_filter_export,
     .build = cli_args_build_ref},
    {.name = NULL},
};

const struct cli_cmd_family cli_cmd_filter = {
    .group = "filter", .usage = usage_filter, .cmds = filter_cmds};
