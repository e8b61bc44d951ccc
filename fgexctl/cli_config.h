/* fgexctl backup stage: the whole configuration (control.proto Config) as one JSON document,
 * written by `fgexctl export` and read back by `fgexctl import` (format: docs/fgexctl.md). */
#ifndef CLI_CONFIG_H
#define CLI_CONFIG_H

#include <stddef.h>
#include <stdio.h>

#include "control.pb-c.h"

#define CLI_CONFIG_FORMAT "fgex-config"
/* Version 2 writes a regex that is not valid UTF-8 as "regex_b64"; version 1 wrote its bytes
 * as \u0080..\u00ff escapes, which a version-1 file is still read as (docs/fgexctl.md). */
#define CLI_CONFIG_VERSION 2

/* Write cfg to f as an indented JSON document: settings, then each service with its filters
 * nested in it. Counters and timestamps are left out: they are not configuration. Returns 0,
 * -EINVAL (a filter names no service of cfg; err says which) or -EIO. */
int cli_config_write(FILE *f, const Fgx__Ctl__Config *cfg, char *err, size_t errlen);

/* Parse and check text[0..len) as written by cli_config_write(). On success *out is owned by
 * the caller (fgx__ctl__config__free_unpacked(*out, NULL)). On -EINVAL, err holds one line,
 * "line L, column C: what is wrong". Returns 0, -EINVAL or -ENOMEM. Ids left out are given
 * fresh ones; each filter's service_id is the service it is nested in. */
int cli_config_read(const char *text, size_t len, Fgx__Ctl__Config **out, char *err, size_t errlen);

#endif
