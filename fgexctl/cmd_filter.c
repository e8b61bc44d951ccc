/* fgexctl, the filter commands: add, list, enable, disable, rm, and a service's ruleset
 * file's import and export (read and written by cli_local.c). */
#include "cmd.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "cli_fmt.h"
#include "cli_json.h"

/* ---- usage ---- */

/* clang-format off */
#define RULESET_FORMAT_HELP \
    "File format: one filter a line,\n" \
    "\n" \
    "    [c2s|s2c|both] [nocase] [disabled] /REGEX/\n" \
    "\n" \
    "e.g. `c2s nocase /evil[0-9]+/`. The regex is everything between the first and\n" \
    "the last '/' of the line, as is (a '/' inside needs no escape). The direction\n" \
    "defaults to both. Blank lines and lines starting with '#' are ignored.\n"

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
    "  test SERVICE REGEX [--dir c2s|s2c|both] [--nocase]\n"
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
    "Put `--` before a regex that starts with '-'. " CLI_SERVICE_HELP_NOTE;

static const char usage_filter_list[] =
    "usage: fgexctl filter list SERVICE\n"
    "\n"
    "List a service's filters with their blocked counts.\n" CLI_SERVICE_HELP_NOTE;

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

static const char usage_filter_import[] =
    "usage: fgexctl filter import SERVICE FILE [--replace]\n"
    "\n"
    "Add the filters of a ruleset file (FILE, or - for stdin) to a service, all or\n"
    "nothing: one bad line (its syntax here, its regex in controld) refuses the whole\n"
    "file, names the line, and changes nothing.\n"
    "\n"
    "  --replace   remove the service's other filters, so it has exactly the file's\n"
    "\n" RULESET_FORMAT_HELP CLI_SERVICE_HELP_NOTE;

static const char usage_filter_export[] =
    "usage: fgexctl filter export SERVICE\n"
    "\n"
    "Print a service's filters on stdout in the ruleset file format that\n"
    "`filter import` reads (with --json: an array of filters, as `filter list`).\n"
    "\n" RULESET_FORMAT_HELP CLI_SERVICE_HELP_NOTE;
/* clang-format on */

/* ---- building the request ---- */

static int build_filter_add(struct cli_cmd *cmd, const struct cli_cmd_def *spec,
                            const struct cli_args_raw *raw)
{
    Fgx__Ctl__FilterAdd *m = &cmd->m.filter_add;
    const char *v;
    int rc;

    fgx__ctl__filter_add__init(m);
    rc = cli_args_check_ref(cmd, spec, raw->pos[0]);
    if (rc < 0)
        return rc;
    if (!raw->pos[1] || raw->pos[1][0] == '\0')
        return cli_args_fail(cmd, CLI_EXIT_INVALID, "filter add: the regex is empty");
    m->service = (char *)raw->pos[0];
    m->regex = (char *)raw->pos[1];
    if ((v = cli_args_opt(raw, CLI_OPT_DIR))) {
        rc = cli_args_parse_dir(cmd, v, &m->dir);
        if (rc < 0)
            return rc;
        m->has_dir = 1;
    }
    if (cli_args_opt(raw, CLI_OPT_NOCASE)) {
        m->has_nocase = 1;
        m->nocase = 1;
    }
    cmd->req.filter_add = m;
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
    cmd->req.filter_import = &cmd->m.filter_import;
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
    cli_fmt_kv_u64(f, "blocked:", fl->blocked);
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
     .opts = CLI_OPT_DIR | CLI_OPT_NOCASE,
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
     .usage = usage_filter_enable,
     .build = cli_args_build_ref,
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
     .opts = CLI_OPT_REPLACE,
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
