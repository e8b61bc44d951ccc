/* fgexctl: parse the command line (cli_args.c), send it to controld (cli_rpc.c), print the
 * reply (cli_fmt.c) and exit with a status a script can act on (enum cli_exit). `stats --watch`
 * and `events --follow` poll until interrupted instead (cli_loop.c). */
#include <stdio.h>
#include <stdlib.h>

#include "cli_args.h"
#include "cli_fmt.h"
#include "cli_loop.h"
#include "cli_rpc.h"
#include "fgx/log.h"

int main(int argc, char **argv)
{
    struct cli_cmd cmd;
    Fgx__Ctl__Reply *rep = NULL;
    int status = CLI_EXIT_ERROR;

    /* libcommon logs only what it cannot hand back; fgexctl speaks in its own one-liners. */
    fgx_log_init(CLI_PROG, FGX_LOG_ERROR);
    if (cli_args_parse(argc, argv, getenv("FGEX_URL"), &cmd) < 0) {
        (void)fprintf(stderr, CLI_PROG ": %s\n", cmd.err);
        status = cmd.exit_code;
        goto out;
    }
    if (cmd.help) {
        (void)fputs(cmd.help, stdout);
        status = fflush(stdout) == EOF ? CLI_EXIT_ERROR : CLI_EXIT_OK;
        goto out;
    }
    if (cmd.watch || cmd.follow) {
        status = cli_loop_run(&cmd, stdout);
        goto out;
    }
    if (cli_rpc_call(cmd.url, &cmd.req, CLI_RPC_TIMEOUT_MS, &rep) < 0)
        goto out;

    status = cli_fmt_exit_code(rep->code);
    /* UNAVAILABLE: the change is stored, so what it stored is still worth printing. */
    if (rep->code == FGX__CTL__CODE__CODE_OK || rep->code == FGX__CTL__CODE__CODE_UNAVAILABLE) {
        if (cli_fmt_reply(stdout, &cmd.req, rep, cmd.json) < 0) {
            (void)fprintf(stderr, CLI_PROG ": cannot write the output\n");
            status = CLI_EXIT_ERROR;
        }
    }
    if (rep->code != FGX__CTL__CODE__CODE_OK)
        cli_fmt_error(stderr, rep);
out:
    if (rep)
        fgx__ctl__reply__free_unpacked(rep, NULL);
    return status;
}
