/* fgexctl polling stage: the commands that keep running until interrupted, `stats --watch`
 * and `events --follow`. They ask controld again and again over one connection (cli_rpc.c) and
 * print each answer (cli_fmt.c); a connection lost on the way is reported and retried. */
#ifndef CLI_LOOP_H
#define CLI_LOOP_H

#include <stdio.h>

#include "cli_args.h"

#define CLI_LOOP_TIMEOUT_MS 3000 /* per poll: short, since Ctrl-C is noticed between polls */
#define CLI_FOLLOW_MS 200        /* events --follow: the polling period */
#define CLI_FOLLOW_BATCH 1000    /* events --follow: at most this many new events per poll */

/* Run cmd (its watch or follow flag set) printing to out, until SIGINT or SIGTERM. Must be
 * called before anything opens an nng socket: it blocks those signals in the calling thread so
 * that nng's threads, created later, inherit the mask and the signal waits for the loop.
 * Returns fgexctl's exit status: 0 when interrupted, else why it stopped (enum cli_exit). */
int cli_loop_run(const struct cli_cmd *cmd, FILE *out);

#endif
