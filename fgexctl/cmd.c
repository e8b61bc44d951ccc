/* fgexctl's command table: every family of commands, in the order `fgexctl --help` lists
 * them. cli_args.c finds a command here by its words, cli_fmt.c by the request it sent. */
#include "cmd.h"

#include <stddef.h>

const struct cli_cmd_family *const cli_cmd_families[] = {
    &cli_cmd_admin,
    &cli_cmd_service,
    &cli_cmd_filter,
    &cli_cmd_worker,
    &cli_cmd_stats,
    &cli_cmd_events,
    &cli_cmd_context,
    &cli_cmd_history,
    &cli_cmd_regex,
    &cli_cmd_fw,
    &cli_cmd_capture,
    &cli_cmd_script,
    &cli_cmd_game,
    NULL,
};

const struct cli_cmd_def *cli_cmd_of_req(Fgx__Ctl__Request__ReqCase req)
{
    for (size_t f = 0; cli_cmd_families[f]; f++)
        for (const struct cli_cmd_def *d = cli_cmd_families[f]->cmds; d->name; d++)
            if (d->req == req && !(d->flags & (CLI_CMD_LOCAL | CLI_CMD_OFFLINE)))
                return d;
    return NULL;
}
