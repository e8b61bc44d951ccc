/* fgexctl's commands, by family (git's builtin/ with its commands[] table): each
 * cmd_<family>.c holds its commands' usage texts, argument specs, request builders and
 * renderers (text and JSON), in a table of struct cli_cmd_def; cmd.c lists the families, and
 * the parse (cli_args.c) and the output (cli_fmt.c) walk that one list. A new command adds an
 * entry to its family's table and its messages to proto/. */
#ifndef CLI_CMD_H
#define CLI_CMD_H

#include <stdbool.h>
#include <stdio.h>

#include <jansson.h>

#include "cli_args.h"
#include "control.pb-c.h"

#define CLI_SERVICE_HELP_NOTE "SERVICE is a service id or name.\n"

/* The options a command may take (struct cli_cmd_def.opts); cli_args.c knows their names. */
enum cli_opt {
    CLI_OPT_PROTO = 1u << 0,
    CLI_OPT_PORT = 1u << 1,
    CLI_OPT_IP = 1u << 2,
    CLI_OPT_LAYER = 1u << 3,
    CLI_OPT_FAIL_OPEN_FLAG = 1u << 4, /* service add: --fail-open [=on|off] */
    CLI_OPT_FAIL_OPEN_ARG = 1u << 5,  /* service set: --fail-open on|off */
    CLI_OPT_DIR = 1u << 6,
    CLI_OPT_NOCASE = 1u << 7,
    CLI_OPT_WATCH = 1u << 8,
    CLI_OPT_INTERVAL = 1u << 9,
    CLI_OPT_LIMIT = 1u << 10,
    CLI_OPT_FOLLOW = 1u << 11,
    CLI_OPT_PASSWORD_FILE = 1u << 12,
    CLI_OPT_EXPIRE = 1u << 13,
    CLI_OPT_REPLACE = 1u << 14,
    CLI_OPT_MIDSTREAM = 1u << 15,
    CLI_OPT_PCAP = 1u << 16,     /* script test --pcap FILE */
    CLI_OPT_DEADLINE = 1u << 17, /* script set --deadline MS */
};
#define CLI_NOPTS 18

/* What the scan of a command's arguments found, before any value is interpreted. */
struct cli_args_raw {
    const char *pos[2];
    int npos;
    const char *val[CLI_NOPTS]; /* NULL: option not given; "" for a flag given without value */
};

struct cli_cmd_def;

/* Fill cmd->m and the request's member from raw. Returns 0, or -EINVAL with cmd->err set
 * (cli_args_fail). */
typedef int (*cli_cmd_build_fn)(struct cli_cmd *cmd, const struct cli_cmd_def *def,
                                const struct cli_args_raw *raw);
/* The reply for a human. Returns 0, -ENOMEM or -EIO. */
typedef int (*cli_cmd_human_fn)(FILE *f, const Fgx__Ctl__Request *req, const Fgx__Ctl__Reply *rep);
/* The reply as one JSON value (a new reference; NULL when out of memory). */
typedef json_t *(*cli_cmd_json_fn)(const Fgx__Ctl__Request *req, const Fgx__Ctl__Reply *rep);

enum cli_cmd_flags {
    CLI_CMD_CHANGE = 1u << 0,  /* changes services or filters: controld may compile for long */
    CLI_CMD_VERSION = 1u << 1, /* `fgexctl version`: a status request, printed as versions */
};

struct cli_cmd_def {
    const char *group; /* its family's group word ("service"), or NULL at the top level */
    const char *name;  /* NULL ends a table */
    Fgx__Ctl__Request__ReqCase req;
    int npos; /* number of positional arguments */
    const char *pos_names[2];
    unsigned opts; /* enum cli_opt */
    const char *usage;
    bool pos_optional; /* the positionals may be left out ([SERVICE]) */
    cli_cmd_build_fn build;
    cli_cmd_human_fn human; /* NULL: prints nothing, or cli_local.c prints (files, sessions) */
    cli_cmd_json_fn json;
    unsigned flags; /* enum cli_cmd_flags */
};

struct cli_cmd_family {
    const char *group; /* "service", "filter", "worker", or NULL: top-level commands */
    const char *usage; /* the group's own help (`fgexctl service --help`), NULL without group */
    const struct cli_cmd_def *cmds;
};

extern const struct cli_cmd_family cli_cmd_admin, cli_cmd_service, cli_cmd_filter, cli_cmd_worker,
    cli_cmd_stats, cli_cmd_events, cli_cmd_script;

/* Every family, NULL-terminated (cmd.c). */
extern const struct cli_cmd_family *const cli_cmd_families[];

/* The first command that sends req (status before version), or NULL. */
const struct cli_cmd_def *cli_cmd_of_req(Fgx__Ctl__Request__ReqCase req);

/* `stats --watch`, one refresh: the stats table of cur with, beside each total, its rate per
 * second since prev, taken secs earlier ("-" where prev is NULL or has no such service).
 * Returns 0, -ENOMEM or -EIO. (cmd_stats.c) */
int cli_cmd_stats_watch(FILE *f, const Fgx__Ctl__Reply *cur, const Fgx__Ctl__Reply *prev,
                        double secs);

/* `events --follow`, one batch: the events of rep as table rows of fixed minimum widths (so
 * batches line up; the header first when head is set), or one JSON object per line. Returns 0,
 * -ENOMEM or -EIO. (cmd_events.c) */
int cli_cmd_events_follow(FILE *f, const Fgx__Ctl__Reply *rep, bool json, bool head);

#endif
