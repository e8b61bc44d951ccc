/* fgexctl local stage: what a command reads or writes on this machine around its one request:
 * the password for login/passwd, the JSON of `import`, the ruleset file of `filter import`
 * (all read and checked before anything is sent), then the session token of `login`, the file
 * of `export` and the ruleset text of `filter export` once controld has answered. */
#ifndef CLI_LOCAL_H
#define CLI_LOCAL_H

#include <stdbool.h>
#include <stdio.h>

#include "cli_args.h"
#include "control.pb-c.h"

#define CLI_IMPORT_MAX (64u << 20) /* a configuration or ruleset file larger is refused */

struct cli_local {
    char *password;           /* login/passwd; wiped and freed by cli_local_release */
    Fgx__Ctl__Config *config; /* import: the Config sent */
    bool ruleset;             /* filter import: cmd->m.filter_import.filters are ours */
    char *fw_text;            /* fw import: the file, which the rules' strings point into */
    char *script;             /* script set: the file's bytes, sent as they are; regex match:
                               * the sample's */
    int exit_code;            /* after a failure: the exit status */
    char err[1024];           /* after a failure: the reason, one line, without "fgexctl: " */
};

/* Read and check what cmd needs before its request can be sent, and complete cmd->req. On
 * failure nothing is to be sent: err and exit_code say why. Returns 0 or a negative errno. */
int cli_local_prepare(struct cli_cmd *cmd, struct cli_local *l);

/* True for the commands whose output cli_local_finish() prints instead of cli_fmt_reply(). */
bool cli_local_prints(const struct cli_cmd *cmd);

/* After an OK reply: keep or drop the session token, write the export file, print the result
 * of the commands cli_local_prints() names on out. Returns 0, or a negative errno with err and
 * exit_code set. */
int cli_local_finish(struct cli_cmd *cmd, struct cli_local *l, const Fgx__Ctl__Reply *rep,
                     FILE *out);

/* After a reply with CODE_AUTH: a stored session token that was refused is dropped, so the
 * next command asks for a login instead of failing the same way. */
void cli_local_auth_failed(const struct cli_cmd *cmd);

void cli_local_release(struct cli_cmd *cmd, struct cli_local *l);

#endif
