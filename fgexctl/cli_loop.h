/* fgexctl polling stage: the commands that keep running until interrupted, `stats --watch`
 * and `events --follow`. They ask controld again and again over one connection (cli_rpc.c) and
 * print each answer (cli_fmt.c); a connection lost on the way is reported and retried. */
#ifndef CLI_LOOP_H
#define CLI_LOOP_H

#include <stdint.h>
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

/* The log followers (`script log --follow`, `service log --follow`): print one reply's
 * entries newer than last on stdout; return the newest seq printed (last when none, 0 when the
 * log started again: a controld with another store). */
typedef uint64_t (*cli_loop_follow_fn)(const struct cli_cmd *cmd, const Fgx__Ctl__Reply *rep,
                                       uint64_t last);
/* Send req every period_ms until an error or a failed write, each time with *after_seq (and
 * *has_after set) at the newest seq printed. Returns fgexctl's exit status. */
int cli_loop_follow(const struct cli_cmd *cmd, Fgx__Ctl__Request *req, protobuf_c_boolean *has_after,
                    uint64_t *after_seq, unsigned period_ms, cli_loop_follow_fn print);

#endif
