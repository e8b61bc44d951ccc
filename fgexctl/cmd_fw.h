/* fgexctl, the firewall's rule files (cmd_fw.c): one rule a line, written with `fw rule add`'s
 * options, '#' comments. Parsed before anything is sent (cli_local.c), written by fw export. */
#ifndef CLI_CMD_FW_H
#define CLI_CMD_FW_H

#include <stddef.h>
#include <stdio.h>

#include <jansson.h>

#include "control.pb-c.h"

/* Parse text (modified in place: the rules' strings point into it, so it must outlive imp).
 * imp->rules is allocated (cli_fw_file_release()). Returns 0, or -EINVAL with "line N: ..." in
 * err (nothing kept), -ENOMEM. */
int cli_fw_file_parse(char *text, size_t len, Fgx__Ctl__FwImport *imp, char *err, size_t errlen);
void cli_fw_file_release(Fgx__Ctl__FwImport *imp);

/* The rules of c as a rule file that cli_fw_file_parse() reads back. Returns 0 or -EIO. */
int cli_fw_file_write(FILE *f, const Fgx__Ctl__FwConfig *c);

/* The firewall in a configuration backup (cli_config.c): {enabled, policy: {in, out, forward},
 * options: {loopback, ...}, rules: ["<rule file line>", ...]}. _to_json: NULL when out of
 * memory. _from_json: *out owned by the caller (fgx__ctl__fw_config__free_unpacked), or
 * -EINVAL with the reason in err. */
json_t *cli_fw_config_to_json(const Fgx__Ctl__FwConfig *c);
int cli_fw_config_from_json(const json_t *j, Fgx__Ctl__FwConfig **out, char *err, size_t len);

#endif
