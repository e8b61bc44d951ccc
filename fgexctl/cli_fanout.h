/* fgexctl fan-out stage: one command on several contexts at once (`-C box1,box2`, `-C all`).
 * Each context gets a process of its own (its own connection, pin and session: cli_ctx_apply),
 * all started together; what each printed is collected and shown as one result per context,
 * prefixed with its name, or one JSON array. Nothing here dials: the run of one context is the
 * same function main.c uses for one (cli_fanout_fn). */
#ifndef CLI_FANOUT_H
#define CLI_FANOUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "cli_args.h"
#include "cli_ctx.h"

/* Runs cmd (pointed at one context) and returns fgexctl's exit status. */
typedef int (*cli_fanout_fn)(struct cli_cmd *cmd);

/* What the run on one context printed and how it ended. */
struct cli_fanout_result {
    const char *name; /* borrowed from the context */
    const char *url;
    int status; /* its exit status (enum cli_exit) */
    char *out;  /* what it printed on stdout, NUL-terminated; malloc'd */
    char *err;  /* on stderr */
};

/* A command that cannot run on several contexts: one that reads the terminal or stdin
 * (`login`/`passwd` without --password-file, an import of "-"), one that never ends (--follow,
 * --watch), `export` (one file), --fingerprint (one certificate). Returns 0, or -EINVAL with err
 * saying why. */
int cli_fanout_check(const struct cli_cmd *cmd, char *err, size_t errlen);

/* Run fn(cmd) for each of the n contexts, in parallel, each in a child process whose stdout and
 * stderr are kept in res[i] (res: n entries, filled here). Returns 0 or a negative errno (no
 * process could be started; res is then empty). */
int cli_fanout_run(struct cli_cmd *cmd, const struct cli_ctx *const *ctxs, size_t n,
                   cli_fanout_fn fn, struct cli_fanout_result *res);

/* Print the results: in text, each line a context printed prefixed with its name (stdout lines
 * on out, its messages on err, "NAME: ok" for a success that printed nothing), then on err
 * which contexts failed; with json, one array on out of {context, url, exit, ok, result,
 * messages}. Returns the exit status: 0 when every context succeeded, else the status they
 * failed with when all failed alike, else 1 (CLI_EXIT_ERROR). */
int cli_fanout_print(const struct cli_fanout_result *res, size_t n, bool json, FILE *out,
                     FILE *err);

void cli_fanout_release(struct cli_fanout_result *res, size_t n);

#endif
