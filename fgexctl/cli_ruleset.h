/* fgexctl ruleset-file stage: the line format of `fgexctl filter import` / `filter export`, so a
 * team can keep a service's regexes in git. One filter a line:
 *
 *     [c2s|s2c|both] [nocase] [disabled] [log] [label="TEXT"] /REGEX/
 *
 * `log`: a log-only filter (its matches are recorded, nothing is dropped; `block`, the default,
 * may be written too). label="TEXT": the filter's label, which may hold blanks and '/', with \"
 * and \\ for a quote and a backslash.
 *
 * The regex is everything between the first '/' and the last '/' of the line, verbatim (no
 * escaping: a '/' inside needs none). Blank lines and lines starting with '#' are ignored;
 * leading blanks are allowed; the direction defaults to both. docs/fgexctl.md has the details. */
#ifndef CLI_RULESET_H
#define CLI_RULESET_H

#include <stddef.h>
#include <stdio.h>

#include "control.pb-c.h"

/* Parse text[0..len) into fi->filters / fi->n_filters (malloc'd, one FilterSpec per filter
 * line, each with its line number). All or nothing: on the first bad line nothing is kept and
 * err says "line N: why". Returns 0, -EINVAL or -ENOMEM. */
int cli_ruleset_parse(const char *text, size_t len, Fgx__Ctl__FilterImport *fi, char *err,
                      size_t errlen);

/* Free what cli_ruleset_parse() put in fi; the rest of fi is the caller's. */
void cli_ruleset_release(Fgx__Ctl__FilterImport *fi);

/* Write filters[0..n) of service in the file format, a header comment first. Returns 0, -EIO,
 * or -EINVAL when a regex holds a line break and so has no line of its own (err says which
 * filter). Nothing is written in that case. */
int cli_ruleset_write(FILE *f, const char *service, Fgx__Ctl__Filter *const *filters, size_t n,
                      char *err, size_t errlen);

#endif
