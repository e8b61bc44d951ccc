/* fgexctl confirmation stage: a command that removes what cannot be had back (`service rm`,
 * struct cli_cmd_def.confirm) asks on a terminal before its request is sent, unless --yes. A
 * script has no one to ask: without a terminal and without --yes it is refused, naming --yes,
 * so that nothing is removed by a command line that was never meant for it. */
#ifndef CLI_CONFIRM_H
#define CLI_CONFIRM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "cli_args.h"

/* What cmd is about to do, when it must be confirmed ("remove service 'web' and all its
 * filters"), in buf; false when it needs no confirmation (no confirm text, or --yes). */
bool cli_confirm_needed(const struct cli_cmd *cmd, char *buf, size_t len);

/* Ask "WHAT on WHERE? [y/N] " on prompt and read one line of in_fd, which must be a terminal.
 * Returns 1 (y or yes), 0 (anything else, or the end of input), or -ENOTTY (in_fd is not a
 * terminal: nothing was asked). */
int cli_confirm_ask(const char *what, const char *where, int in_fd, FILE *prompt);

#endif
